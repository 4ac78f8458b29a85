"""Speculative decoding (core/specdec.py): draft layers, MTP weights, graphs, real starts."""

import json
from dataclasses import replace

import pytest
from configs import DEEPSEEK_V3, LLAMA31_8B, QWEN3_NEXT_80B

from kvplan.core import memory as M
from kvplan.core.sizing import EngineArgs, Gpu, Model, size
from kvplan.core.specdec import SpecDecode, from_config
from kvplan.errors import BadInput

GiB = 1 << 30
H100 = Gpu("h100", "NVIDIA H100 80GB HBM3", 81559 << 20, "9.0")


def gb10_start(avail_gib, spec=None):
    """nvidia/Qwen3.6-27B-NVFP4 on a DGX Spark (vLLM 0.23.1 nightly, public logs): fp8 KV,
    262,144 tokens, 8 sequences, 65,536 batched tokens, prefix caching on."""
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    a = EngineArgs(max_model_len=262144, max_num_seqs=8, max_num_batched_tokens=65536,
                   kv_cache_dtype="fp8", quantization="modelopt", enable_prefix_caching=True,
                   gpu_memory_utilization=0.7, kv_cache_memory_bytes=round(avail_gib * GiB),
                   speculative=spec)
    return size(resolve_model("nvidia/Qwen3.6-27B-NVFP4"), resolve_gpu("gb10"), a, "0.23")


def test_mtp_on_a_gdn_hybrid_matches_the_logs():
    # without MTP: "block size 1568", 47.84 GiB -> "1,505,068 tokens", 5.74x
    r = gb10_start(47.84)
    assert (r.block_size, r.kv_cache_tokens, round(r.max_concurrency, 2)) == (1568, 1505068, 5.74)
    # MTP k=2: the conv state widens by 2 (block 1600), the MTP layer makes 17 full-attention
    # layers against 48 GDN ("Add 3 padding layers"), each request reserves 2 + 2 state
    # blocks: 48.6 GiB -> "1,394,129 tokens", 5.32x
    mtp = gb10_start(48.6, SpecDecode("mtp", 2))
    assert (mtp.block_size, mtp.kv_cache_tokens, round(mtp.max_concurrency, 2)) == (
        1600, 1394129, 5.32)
    # "Model loading took" grew 19.78 -> 20.57 GiB: one full-attention layer (gated q 2 x 5120
    # x 24 x 256, o 24 x 256 x 5120, k/v 2 x 5120 x 4 x 256, MLP 3 x 5120 x 17408, norms)
    # and the 2 x 5120 x 5120 projection, in bf16 (the NVFP4 release excludes mtp*)
    extra = mtp.budget.weights - r.budget.weights
    assert extra == pytest.approx(2 * (62914560 + 31457280 + 10485760 + 267386880
                                       + 52428800), rel=0.001)
    assert extra / GiB == pytest.approx(0.79, abs=0.01)
    # FlashInfer on SM12x cannot replay FULL graphs of 1 + k tokens: PIECEWISE=9 (largest=48)
    assert (mtp.cudagraph_mode, mtp.cudagraph_graphs) == ("PIECEWISE", 9)


def test_mla_mtp_adds_one_layer():
    m = Model("dsv3", {**DEEPSEEK_V3, "num_nextn_predict_layers": 1})
    a = EngineArgs(tensor_parallel_size=8, kv_cache_memory_bytes=40 * GiB, max_model_len=32768)
    base = size(m, H100, a, "0.23")
    mtp = size(m, H100, EngineArgs(**{**a.__dict__, "speculative": SpecDecode("mtp", 1)}),
               "0.23")
    # 576-element latent x 2 B, replicated: 61 -> 62 layers
    assert (base.kv_bytes_per_token_per_gpu, mtp.kv_bytes_per_token_per_gpu) == (
        61 * 1152, 62 * 1152)
    assert abs(mtp.num_gpu_blocks - base.num_gpu_blocks * 61 / 62) < 1
    # DeepSeek's MTP module keeps its own vocab x hidden shared_head.head before 0.16
    old = size(m, H100, EngineArgs(**{**a.__dict__, "speculative": SpecDecode("mtp", 1)}),
               "0.15")
    new = size(m, H100, EngineArgs(**{**a.__dict__, "speculative": SpecDecode("mtp", 1)}),
               "0.16")
    assert old.budget.weights - new.budget.weights == 129280 * 7168 * 2 // 8


def test_ngram_widens_states_only():
    m = Model("qwen3-next", QWEN3_NEXT_80B)
    a = EngineArgs(tensor_parallel_size=4, kv_cache_memory_bytes=40 * GiB, max_model_len=32768)
    base = size(m, H100, a, "0.22")
    ng = size(m, H100, EngineArgs(**{**a.__dict__, "speculative": SpecDecode("ngram", 4)}),
               "0.22")
    assert ng.budget.weights == base.budget.weights
    assert ng.kv_bytes_per_token_per_gpu == base.kv_bytes_per_token_per_gpu  # no draft layer
    # GDN conv state: (4 - 1 + 4) columns instead of 3 of the conv dimension per request
    conv = (2 * 16 * 128 + 32 * 128) // 4 * 2
    assert ng.state_bytes_per_request_per_gpu - base.state_bytes_per_request_per_gpu == (
        36 * conv * 4)


def test_spec_decode_graph_sizes():
    # max_num_seqs 8, k 6 (DFlash on FA2, 0.22.0): "PIECEWISE=15 (largest=112), FULL=8"
    assert M.cudagraph_graphs(8, 32768, decode_q=7, round_to_q=True) == 15 + 8
    # max_num_seqs 8, k 3 on FA2: "PIECEWISE=9 (largest=64), FULL=5 (largest=32)"
    assert M.cudagraph_graphs(8, 32768, decode_q=4, round_to_q=True) == 9 + 5
    # max_num_seqs 2, k 3: sizes 4, 8, 16 and FULL 4, 8
    assert M.cudagraph_graphs(2, 16384, decode_q=4, round_to_q=True) == 3 + 2
    # PIECEWISE only: no rounding, max 2 x 8 x 3 = 48 -> 9 sizes
    assert M.cudagraph_graphs(8, 65536, "PIECEWISE", decode_q=3, round_to_q=True) == 9


def test_v2_spec_decode_graphs_and_capture_sizes():
    # 0.29+ add n x (1 + k) decode sizes to the default list; at k = 2, max_num_seqs 1024 and
    # 8,192 tokens (H100) that is 3, 6, 12, 264, 312, 360, 408, 456 and 504 beyond the 51
    base = M.cudagraph_capture_sizes(1024, 8192)
    k2 = M.cudagraph_capture_sizes(1024, 8192, decode_q=3, decode_tiers=True)
    assert len(base) == 51 and sorted(set(k2) - set(base)) == [3, 6, 12, 264, 312, 360, 408,
                                                               456, 504]
    # V2 (`_init_candidates`): PIECEWISE per unrounded size, FULL per distinct size rounded up
    # to 1 + k, at most 512: k=2 60 + 56, k=3 51 + 49, k=1 51 + 50
    for q, want in ((3, 116), (4, 100), (2, 101)):
        assert M.cudagraph_graphs(1024, 8192, v2=True, decode_q=q, decode_tiers=True) == want
    # V1 still rounds the list first: k=2 56 + 56
    assert M.cudagraph_graphs(1024, 8192, round_to_q=True, decode_q=3, decode_tiers=True) == 112
    # the drafter: its prefill manager as the target, plus (k >= 2) one FULL graph per size up
    # to max_num_seqs at one token a request; k = 1 returns before the decode manager
    assert M.drafter_cudagraph_graphs(1024, 8192, "FULL_AND_PIECEWISE", 2,
                                      decode_tiers=True) == 116 + 60
    assert M.drafter_cudagraph_graphs(1024, 8192, "FULL_AND_PIECEWISE", 1,
                                      decode_tiers=True) == 101
    assert M.drafter_cudagraph_graphs(1024, 8192, "PIECEWISE", 3, decode_tiers=True) == 51
    # B200 (1,024 ceiling, 16,384 tokens) at k = 2: 97 + 93 target, 287 drafter graphs
    assert M.cudagraph_graphs(1024, 16384, v2=True, ceiling=1024, decode_q=3,
                              decode_tiers=True) == 190
    assert M.drafter_cudagraph_graphs(1024, 16384, "FULL_AND_PIECEWISE", 2, ceiling=1024,
                                      decode_tiers=True) == 287
    # max_num_seqs joins a one-token grid only from 0.31
    assert 100 not in M.cudagraph_capture_sizes(100, 8192, seqs_size=False)
    assert 100 in M.cudagraph_capture_sizes(100, 8192)


@pytest.mark.parametrize("cfg,target,drafter,mib", [
    ({"method": "mtp", "num_speculative_tokens": 2}, 116, 176, 770.5),
    ({"method": "mtp", "num_speculative_tokens": 3}, 100, 151, 682.1),
])
def test_v2_drafter_graphs_join_the_estimate(cfg, target, drafter, mib):
    # Qwen3.5-35B-A3B with its MTP layer on an H100 at 0.33: 130 MiB + 0.133 MiB x (40
    # layers x target graphs + 1 MTP layer x drafter graphs); V2's probe has no long first
    # capture, so no hybrid term
    assert round(130 + 0.133 * (40 * 116 + 176), 1) == 770.5
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    r = size(resolve_model("Qwen/Qwen3.5-35B-A3B"), resolve_gpu("h100"),
             EngineArgs(speculative=from_config(cfg)), "0.33")
    assert (r.cudagraph_graphs, r.drafter_cudagraph_graphs) == (target, drafter)
    assert round(r.budget.cudagraph / (1 << 20), 1) == mib


def test_speculative_bad_input():
    for cfg, says in (({"method": "medusa", "num_speculative_tokens": 3}, "medusa"),
                      ({"method": "mtp", "num_speculative_tokens": 0}, "from 1 to 4096"),
                      ({"method": "lookahead", "num_speculative_tokens": 2}, "not one kvplan"),
                      ({"method": "eagle3", "num_speculative_tokens": 2}, "draft \"model\"")):
        with pytest.raises(BadInput, match=says):
            from_config(cfg)
    assert from_config({"method": "deepseek_mtp", "num_speculative_tokens": 1}).method == "mtp"
    # MTP without k: vLLM takes a default only from a draft config's n_predict, so an MTP
    # config without a "model" is refused ("num_speculative_tokens must be provided")
    with pytest.raises(BadInput, match="got None"):
        from_config({"method": "mtp"})
    # suffix decoding's k defaults to its tree depth (`_validate_suffix_decoding`)
    assert from_config({"method": "suffix"}).num_speculative_tokens == 24
    # vLLM maps 27 names to mtp, each from the release that lists it; Gemma 4's query-only
    # MTP and openPangu's name (never in `MTPModelTypes`) are refused
    m = Model("llama", LLAMA31_8B)
    nem = from_config({"method": "nemotron_h_mtp", "num_speculative_tokens": 1})
    assert (nem.method, nem.alias) == ("mtp", "nemotron_h_mtp")
    with pytest.raises(BadInput, match="does not know speculative method 'nemotron_h_mtp'"):
        size(m, H100, EngineArgs(speculative=nem, max_model_len=4096), "0.16")
    with pytest.raises(BadInput, match="Gemma 4's query-only MTP"):
        from_config({"method": "gemma4_mtp", "num_speculative_tokens": 1})
    with pytest.raises(BadInput, match="not one kvplan models"):
        from_config({"method": "openpangu_mtp", "num_speculative_tokens": 1})
    m = Model("llama", LLAMA31_8B)
    with pytest.raises(BadInput, match="no MTP layers"):
        size(m, H100, EngineArgs(speculative=SpecDecode("mtp", 1), max_model_len=4096))
    with pytest.raises(BadInput, match="no MTP layers"):  # 0.17+ knows the name
        size(m, H100, EngineArgs(speculative=nem, max_model_len=4096), "0.17")
    draft = Model("draft", LLAMA31_8B)
    with pytest.raises(BadInput, match="from vLLM 0.15"):
        size(m, H100, EngineArgs(speculative=SpecDecode("draft_model", 2, draft),
                                 max_model_len=4096), "0.14")


def test_eagle_draft_layers_and_weights():
    # an EAGLE-1 head for Llama-3.1-8B: one Llama decoder layer (+ fc 2H -> H in its
    # checkpoint), embedding and LM head shared with the target
    head = {**LLAMA31_8B, "num_hidden_layers": 1, "architectures": ["LlamaForCausalLMEagle"]}
    m = Model("llama", LLAMA31_8B)
    a = EngineArgs(kv_cache_memory_bytes=50 * GiB, max_model_len=8192)
    base = size(m, H100, a, "0.23")
    r = size(m, H100, EngineArgs(**{**a.__dict__, "speculative": SpecDecode(
        "eagle", 3, Model("head", head))}), "0.23")
    assert r.kv_bytes_per_token_per_gpu == base.kv_bytes_per_token_per_gpu * 33 // 32
    # one layer: attention 4096 x (4096 + 2 x 1024) + 4096 x 4096, MLP 3 x 4096 x 14336, norms,
    # and fc 2 x 4096 -> 4096
    layer = 4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336 + 2 * 4096
    fc = 2 * 4096 * 4096
    assert r.budget.weights - base.budget.weights == pytest.approx(2 * (layer + 4096 + fc),
                                                                     abs=4)


def test_eagle3_head_weights():
    # yuhuili/EAGLE3-LLaMA3.1-Instruct-8B: fc 3H -> H, its layer's qkv over 2H, MLP, a
    # 32,000-row LM head (draft_vocab_size): 424,689,664 params, 849,379,328 B in 16 bits
    # (the "850 MB" its Hub page lists, with the d2t / t2d maps)
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    target = resolve_model("meta-llama/Llama-3.1-8B-Instruct")
    head = resolve_model("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B")
    a = EngineArgs(max_model_len=32768)
    r = size(target, resolve_gpu("h100"), EngineArgs(**{**a.__dict__, "speculative":
                                                         SpecDecode("eagle3", 3, head)}))
    assert r.draft_bytes == pytest.approx(849379328, rel=0.001)
    # at TP2 the fc (3 x 4096 -> 4096, a `ReplicatedLinear`) and the int64 d2t map stay whole
    # on each GPU (`llama_eagle3.py`): half of the rest, 475,273,216 B (237,636,608 split)
    r2 = size(target, resolve_gpu("h100"), EngineArgs(
        **{**a.__dict__, "tensor_parallel_size": 2, "speculative": SpecDecode("eagle3", 3, head)}))
    whole = 2 * 3 * 4096 * 4096 + 8 * 32000
    assert r2.draft_bytes == (r.draft_bytes - whole) // 2 + whole == 475273216


def test_cli_speculative_config(capsys):
    from kvplan.cli import main

    code = main(["size", "qwen3.6-27b-nvfp4", "--gpu", "b200", "--max-model-len", "32k",
                 "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 2}',
                 "--json"])
    d = json.loads(capsys.readouterr().out)
    assert code == 0 and any("speculative decoding (mtp, k=2)" in n for n in d["notes"])
    code = main(["size", "qwen3.6-27b-nvfp4", "--gpu", "b200", "--speculative-config", "{mtp"])
    assert code == 2 and "is not JSON" in capsys.readouterr().err


def test_dflash_draft_layers_bucket_by_head_shape():
    # vLLM 0.22.0 on a DGX Spark, Qwen3.6-35B-A3B + z-lab's 8-layer DFlash draft, k=6:
    # the draft's full-attention layers (4 KV heads of 128) have the target's page (2 of 256)
    # but not its spec, so the buckets are 10, 8 and 30: group size 8, 2 + 1 + 4 groups
    # ("Add 6 padding layers ... 60.00%", "Add 2 padding layers ... 6.67%"), 71.59 GiB ->
    # "1,470,588 tokens", 7.35x
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    draft = resolve_model("z-lab/Qwen3.6-35B-A3B-DFlash")
    a = EngineArgs(max_model_len=200000, max_num_seqs=8, max_num_batched_tokens=32768,
                   kv_cache_dtype="bfloat16", enable_prefix_caching=True,
                   kv_cache_memory_bytes=round(71.59 * GiB),
                   speculative=SpecDecode("dflash", 6, draft))
    r = size(resolve_model("nvidia/Qwen3.6-35B-A3B-NVFP4"), resolve_gpu("gb10"), a, "0.22")
    assert (len(r.groups), r.block_size, round(r.max_concurrency, 2)) == (7, 1104, 7.35)
    assert r.kv_cache_tokens == pytest.approx(1470588, rel=0.0005)
    # its weights: 8 Qwen3 layers of 2048 plus the fc over the 5 target layers' hidden states
    # (5 x 2048 -> 2048, `qwen3_dflash.py`): 947,986,432 B against the Hub's 0.88 GiB
    layer = 2048 * (32 * 128 + 2 * 4 * 128) + 32 * 128 * 2048 + 3 * 2048 * 6144 + 2 * 2048 + 256
    assert r.draft_bytes == 2 * (8 * layer + 2048 + 5 * 2048 * 2048)  # + the final norm


def test_speculators_format_draft(tmp_path):
    # Red Hat's speculators checkpoints nest the decoder under transformer_layer_config and
    # declare the method and k; vLLM reads them so (`configs/speculators/base.py`)
    from kvplan.engines.vllm_spec import speculative
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    layer = {**LLAMA31_8B, "num_hidden_layers": 1, "architectures": ["LlamaForCausalLM"]}
    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3",
        "draft_vocab_size": 32000, "norm_before_residual": True,
        "speculators_config": {"algorithm": "eagle3",
                               "proposal_methods": [{"proposal_type": "greedy",
                                                     "speculative_tokens": 5}],
                               "verifier": {"name_or_path": "meta-llama/Llama-3.1-8B-Instruct"}},
        "transformer_layer_config": layer}))
    spec = speculative(json.dumps({"model": str(tmp_path)}), resolve_model)
    assert (spec.method, spec.num_speculative_tokens) == ("eagle3", 5)
    assert spec.draft.config["draft_vocab_size"] == 32000
    r = size(resolve_model("meta-llama/Llama-3.1-8B-Instruct"), resolve_gpu("h100"),
             EngineArgs(max_model_len=8192, speculative=spec))
    assert r.draft_layers == 1 and r.to_json()["speculative"]["method"] == "eagle3"


def test_deepseek_v4_mtp_start_on_the_023_026_layout():
    # vLLM 0.25.0, DeepSeek-V4-Flash TP2 on RTX PRO 6000s with MTP k=2 (public write-up):
    # "Available KV cache memory: 10.29 GiB", "GPU KV cache size: 1,993,100 tokens",
    # "Maximum concurrency for 1,048,576 tokens per request: 1.90x"
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    a = EngineArgs(tensor_parallel_size=2, kv_cache_dtype="fp8", max_model_len=1048576,
                   max_num_seqs=64, max_num_batched_tokens=4096, enable_prefix_caching=True,
                   kv_cache_memory_bytes=round(10.29 * GiB),
                   speculative=from_config({"method": "mtp", "num_speculative_tokens": 2}))
    r = size(resolve_model("deepseek-ai/DeepSeek-V4-Flash"), resolve_gpu("rtx-pro-6000"), a,
             "0.25.0")
    # padded sliding pages; per page size its largest count in one group (0.33: 1,002,240)
    assert r.bytes_per_block == 37440 * 22 + 8640 * 21 + 1728 * 20 == 1039680
    assert r.num_gpu_blocks == round(10.29 * GiB) // 1039680 == 10627
    assert f"{r.max_concurrency:.2f}" == "1.90"
    assert r.kv_cache_tokens == 1992350  # logged 1,993,100: 10.29 GiB is rounded


def test_dspark_on_deepseek_v4_matches_the_0260_b300_start():
    # vLLM 0.26.0, DeepSeek-V4-Flash-0731 on one B300 (public blog), --speculative-config
    # '{"method":"dspark","num_speculative_tokens":7}', block 256, fp8, EP: "Model loading
    # took 156.32 GiB", "Available KV cache memory: 86.74 GiB", "GPU KV cache size: 913,657
    # tokens", "Maximum concurrency for 65,536 tokens per request: 13.94x"
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    m, b300 = resolve_model("deepseek-ai/DeepSeek-V4-Flash"), resolve_gpu("b300")
    spec = from_config({"method": "dspark", "num_speculative_tokens": 7})
    a = EngineArgs(kv_cache_dtype="fp8", max_model_len=65536, block_size=256,
                   enable_expert_parallel=True, kv_cache_memory_bytes=round(86.74 * GiB),
                   speculative=spec)
    r = size(m, b300, a, "0.26.0")
    # three sliding-window-only stages (n_mtp_layers) join the pool: one more 37,440 B page
    assert r.bytes_per_block == 37440 * 23 + 8640 * 21 + 1728 * 20 == 1077120
    assert f"{r.max_concurrency:.2f}" == "13.94"
    assert abs(r.kv_cache_tokens - 913657) / 913657 < 0.0005
    # 3 stages of the target's layer, the 3H x H main_proj and the rank-256 Markov head
    assert r.budget.weights / GiB == pytest.approx(156.32, abs=0.05)
    with pytest.raises(BadInput, match="from 1 to 4096, got None"):  # k is required
        from_config({"method": "dspark"})
    with pytest.raises(BadInput, match="has none"):  # no V4 stages to draft from
        size(Model("llama", LLAMA31_8B), H100, EngineArgs(max_model_len=4096, speculative=spec),
             "0.26")
    with pytest.raises(BadInput, match="dspark speculative decoding from vLLM 0.25"):
        size(m, b300, a, "0.24")
    with pytest.raises(BadInput, match="pipeline parallelism"):
        size(m, b300, EngineArgs(kv_cache_dtype="fp8", pipeline_parallel_size=2,
                                 speculative=spec, max_model_len=4096), "0.29")
    dsp = Model("v4-dspark", {**m.config, "dspark_block_size": 8})
    with pytest.raises(BadInput, match="dspark_block_size"):  # 0.26-0.27 only
        size(dsp, b300, EngineArgs(kv_cache_dtype="fp8", max_model_len=4096, speculative=spec),
             "0.26")
    assert size(dsp, b300, EngineArgs(kv_cache_dtype="fp8", max_model_len=4096,
                                      speculative=spec), "0.28").fits


def test_dspark_qwen3_draft_joins_the_target_group():
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    draft = resolve_model("deepseek-ai/dspark_qwen3_8b_block7")
    spec = from_config({"method": "dspark", "model": "x"}, draft)
    assert spec.num_speculative_tokens == 7 and spec.k_from_draft  # its block_size, 0.31+
    m, h100 = resolve_model("Qwen/Qwen3-8B"), resolve_gpu("h100")
    base = size(m, h100, EngineArgs(max_model_len=4096), "0.31")
    r = size(m, h100, EngineArgs(max_model_len=4096, speculative=spec), "0.31")
    # 5 full-attention layers of 8 KV heads x 128, the target's spec: one group, +20 KiB/token
    assert r.kv_bytes_per_token_per_gpu - base.kv_bytes_per_token_per_gpu == 5 * 4096
    assert len(r.groups) == 1
    # 5 Qwen3-8B layers + fc (5 x 4096 x 4096) + Markov head (2 x 151,936 x 256), bf16; the
    # embedding and LM head are the target's
    layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 12288 + 2 * 4096 + 2 * 128
    drafter = (5 * layer + 4096 + 5 * 4096 * 4096 + 2 * 151936 * 256) * 2
    assert r.budget.weights - base.budget.weights == drafter
    with pytest.raises(BadInput, match="needs num_speculative_tokens"):
        size(m, h100, EngineArgs(max_model_len=4096, speculative=spec), "0.30")


def test_dspark_probabilistic_logits_and_scheduled_tokens():
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    m, b300 = resolve_model("deepseek-ai/DeepSeek-V4-Flash"), resolve_gpu("b300")

    def start(version, sample="greedy", **kw):
        spec = from_config({"method": "dspark", "num_speculative_tokens": 7,
                            "draft_sample_method": sample})
        return size(m, b300, EngineArgs(kv_cache_dtype="fp8", max_model_len=65536,
                                        speculative=spec, **kw), version)

    # [1024 sequences, k = 7, 129,280 vocabulary]: fp32 to 0.27 (3.45 GiB), bf16 from 0.28;
    # allocated before the profile, so charged only from 0.27 (`total_consumed`)
    greedy, prob = start("0.27.1"), start("0.27.1", "probabilistic")
    assert prob.budget.activation - greedy.budget.activation == 1024 * 7 * 129280 * 4
    assert start("0.28", "probabilistic").budget.activation - start("0.28").budget.activation \
        == 1024 * 7 * 129280 * 2
    assert start("0.26", "probabilistic").budget.activation == start("0.26").budget.activation
    with pytest.raises(BadInput, match="draft_sample_method 'exact'"):
        from_config({"method": "dspark", "num_speculative_tokens": 7,
                     "draft_sample_method": "exact"})
    # 0.25-0.27 keep k - 1 slots per request: 2,048 - 6 x 1,024 <= 0 refuses to start
    with pytest.raises(BadInput, match="refuses to start") as e:
        start("0.26", max_num_batched_tokens=2048)
    assert e.value.flag == "max_num_batched_tokens"
    assert start("0.28", max_num_batched_tokens=2048).fits


def test_multi_module_mtp_widens_sliding_windows_from_028():
    # `SlidingWindowSpec.extra_retained_tokens` (0.28+): k - 1 more tokens kept in every
    # window when more than one MTP module drafts (Step-3.7-Flash: 3 MTP layers, window 512)
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    m, h200 = resolve_model("stepfun-ai/Step-3.7-Flash"), resolve_gpu("h200")

    def windows(version, k):
        spec = from_config({"method": "mtp", "num_speculative_tokens": k})
        r = size(m, h200, EngineArgs(tensor_parallel_size=8, max_model_len=65536,
                                     kv_cache_memory_bytes=40 * GiB, speculative=spec), version)
        return {g.spec.window for g in r.groups if g.spec.window}

    assert windows("0.28", 3) == {514} and windows("0.28", 1) == {512}
    assert windows("0.27.1", 3) == {512}


def test_mtp_joining_projection_whole_on_every_rank_for_deepseek():
    from kvplan.core.arch import normalize
    from kvplan.core.specdec import mtp_join_bytes
    from kvplan.sources.resolve import resolve_model

    def arch(name):
        return normalize(resolve_model(name).config)
    # deepseek_mtp.py `eh_proj = nn.Linear(2H, H)`: 2 x 7,168^2 x 2 B on each of 8 ranks
    assert mtp_join_bytes(arch("deepseek-ai/DeepSeek-R1"), 8, 2, 1.0) == 205520896
    # Qwen3-Next's `fc` is a ColumnParallelLinear: a quarter of 2 x 2,048^2 x 2 B at TP4
    assert mtp_join_bytes(arch("Qwen/Qwen3-Next-80B-A3B-Instruct"), 4, 2, 1.0) == 4194304


def test_mamba2_hybrids_align_blocks_to_the_narrow_state_before_032():
    from kvplan.core.sizing import EngineArgs, size
    from kvplan.core.specdec import SpecDecode
    from kvplan.errors import BadInput
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    m, h100 = resolve_model("ibm-granite/granite-4.0-h-tiny"), resolve_gpu("h100")

    def run(k, version):
        return size(m, h100, EngineArgs(enable_prefix_caching=False,
                                         speculative=SpecDecode("ngram", k, None)), version)
    # granite's model class reports the 806,400 B state without the k conv columns: 400-token
    # blocks (819,200 B pages); with k=3 the mixer's 826,368 B state outgrows them
    with pytest.raises(BadInput, match="826,368 B"):
        run(3, "0.25")
    assert run(1, "0.25").block_size == 400  # k=1 still fits the narrow page
    assert run(3, "0.32").block_size == 416  # 0.32+ align to the widened state


def test_v2_grammar_bitmask_rows_grow_with_the_decode_query():
    from kvplan.core.memory import v2_sampler_state_bytes

    # `StructuredOutputsWorker(max_num_logits=max_num_reqs * decode_query_len)`: with k = 3
    # the [seqs x 4, vocab/32] int32 bitmask adds 3 x 1,024 x 4,748 x 4 B = 55.6 MiB
    base = v2_sampler_state_bytes(1024, 151936)
    assert base == 1024 * (151936 + 2 * 4748) * 4  # 0.616 GiB
    assert v2_sampler_state_bytes(1024, 151936, 4) - base == 3 * 1024 * 4748 * 4


def test_ngram_token_table_and_v1_runner_fallback():
    # n-gram drafting scans a [max_num_seqs, max_model_len] int32 table on the GPU: V1's
    # ngram_gpu `token_ids_gpu_tensor` (0.18+), V2's dense `all_token_ids` (0.32+). Allocated
    # before the profile, it costs KV cache from 0.27 and sits above the utilization before
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    m, g = resolve_model("meta-llama/Llama-3.1-8B-Instruct"), resolve_gpu("h100")

    def run(version, mml, method):
        return size(m, g, EngineArgs(max_model_len=mml, speculative=from_config(
            {"method": method, "num_speculative_tokens": 3})), version)

    half = 1024 * 65536 * 4  # halving max_model_len at 1,024 sequences
    for version, method, charged, outside in (("0.33", "ngram", half, 0),
                                              ("0.30", "ngram_gpu", half, 0),
                                              ("0.20", "ngram_gpu", 0, half),
                                              ("0.30", "ngram", 0, 0)):
        a, b = run(version, 131072, method), run(version, 65536, method)
        assert (a.budget.activation - b.budget.activation,
                a.outside_budget_bytes - b.outside_budget_bytes) == (charged, outside)
    # V2 refuses ngram to 0.31 and suffix throughout: vLLM runs V1 ("Model Runner V2 does
    # not yet support"); 0.30 ngram: 448,352 tokens on V1's profile, 0.33 ngram 441,152 on V2
    r = run("0.30", 131072, "ngram")
    assert any("on model runner V1" in n for n in r.notes) and r.kv_cache_tokens == 448352
    r = run("0.33", 131072, "ngram")
    assert not any("on model runner V1" in n for n in r.notes) and r.kv_cache_tokens == 441152


def test_profile_batch_keeps_each_dummy_request_its_drafter_queries(monkeypatch):
    # 0.31+ V2 `_dummy_run`: requests <= max_num_batched_tokens // num_query_per_req (1 + k
    # for DFlash, k for DSpark from its anchor); a draft model's correction slot per request
    # comes out of the tokens
    from kvplan.core.specdec import profile_batch
    from kvplan.core.versions import VllmVersion
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    v33, v30 = VllmVersion.of("0.33"), VllmVersion.of("0.30")
    draft = resolve_model("z-lab/Qwen3.6-35B-A3B-DFlash")
    dflash = SpecDecode("dflash", 15, draft)
    assert profile_batch(dflash, True, v33, 8192, 1024) == (8192, 512)
    assert profile_batch(dflash, True, v30, 8192, 1024) == (8192, 1024)
    assert profile_batch(SpecDecode("dspark", 16), True, v33, 8192, 1024) == (8192, 512)
    assert profile_batch(SpecDecode("draft_model", 3, draft), True, v33, 8192, 1024) == (
        7168, 1024)
    assert profile_batch(SpecDecode("eagle3", 3, draft), True, v33, 8192, 1024) == (8192, 1024)
    # Qwen3.6-35B-A3B-NVFP4 on an H100 at 0.33, k = 15: the sampler's 3.5 fp32 copies of 512
    # fewer rows of 248,320 logits, 1,779,957,760 B less activation than 1,024 requests give
    import kvplan.core.specdec as sd

    target, h100 = resolve_model("nvidia/Qwen3.6-35B-A3B-NVFP4"), resolve_gpu("h100")

    def act():
        return size(target, h100, EngineArgs(speculative=dflash)).budget.activation

    capped = act()
    monkeypatch.setattr(sd, "profile_batch", lambda spec, v2, version, mnbt, seqs: (
        mnbt, min(mnbt, seqs)))
    assert act() - capped == 512 * 248320 * 4 * 3.5


def test_draft_rope_cache():
    # EAGLE3-LLaMA3.1 declares no rope_theta (10,000) beside Llama-3.1-8B's 500,000 + llama3
    # scaling, so `get_rope` builds it a cache of its own: [2,048 x 128] bf16 to 0.26, and
    # from 0.27 its max_position_embeddings is raised to the target's 131,072 (32 MiB)
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    target, h100 = resolve_model("meta-llama/Llama-3.1-8B-Instruct"), resolve_gpu("h100")
    head = SpecDecode("eagle3", 3, resolve_model("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"))
    base = size(target, h100, EngineArgs()).rope_cache_bytes
    for version, own in (("0.26", 2048 * 128 * 2), ("0.33", 131072 * 128 * 2)):
        assert size(target, h100, EngineArgs(speculative=head), version
                    ).rope_cache_bytes == base + own
    # a DSpark draft whose rope equals Qwen3-8B's (transformers 5 spelling) shares the cache
    q = resolve_model("Qwen/Qwen3-8B")
    draft = from_config({"method": "dspark", "model": "x"},
                        resolve_model("deepseek-ai/dspark_qwen3_8b_block7"))
    assert size(q, h100, EngineArgs(speculative=draft)).rope_cache_bytes == size(
        q, h100, EngineArgs()).rope_cache_bytes



def test_separate_draft_model_rope_and_max_model_len():
    """A draft_model (Meta-Llama-3-8B, 8,192 positions, plain rope theta 500,000) beside
    Llama-3.1-70B: vLLM never raises its positions (`_maybe_override_draft_max_position_
    embeddings` is EAGLE's alone to 0.32, not draft_model's in 0.33), so its own rotary cache is
    [8,192 x 128] bf16 = 2 MiB; 0.33's model runner V2 lowers the target's max_model_len to
    the draft's 8,192 (`_limit_max_model_len_to_draft`), 0.32 keeps 131,072."""
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    target, h100 = resolve_model("meta-llama/Llama-3.1-70B-Instruct"), resolve_gpu("h100")
    spec = from_config({"method": "draft_model", "num_speculative_tokens": 4},
                       resolve_model("meta-llama/Meta-Llama-3-8B-Instruct"))
    a = EngineArgs(tensor_parallel_size=4, speculative=spec)
    base = 131072 * 128 * 2  # the target's llama3-scaled cache
    for version, mml in (("0.30", 131072), ("0.32", 131072), ("0.33", 8192)):
        r = size(target, h100, a, version)
        assert r.rope_cache_bytes == base + 8192 * 128 * 2
        assert r.max_model_len == mml
    assert any("lowers max_model_len from 131,072 to the draft model's 8,192" in n
               for n in r.notes)
    # the draft's own length from the speculative config, at most the draft's: vLLM refuses more
    short = from_config({"method": "draft_model", "num_speculative_tokens": 4,
                         "max_model_len": 4096}, spec.draft)
    assert size(target, h100, replace(a, speculative=short), "0.33").max_model_len == 4096
    too_long = from_config({"method": "draft_model", "num_speculative_tokens": 4,
                            "max_model_len": 16384}, spec.draft)
    with pytest.raises(BadInput, match="larger than the draft model's 8192"):
        size(target, h100, replace(a, speculative=too_long), "0.33")
    # an EAGLE-3 head (cache-only rope) shares the target's positions: nothing lowered
    head = SpecDecode("eagle3", 3, resolve_model("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"))
    assert size(target, h100, replace(a, speculative=head), "0.33").max_model_len == 131072


def test_v2_speculator_hidden_state_buffer():
    # model runner V2's EAGLE / MTP / DFlash speculators allocate [max_num_batched_tokens,
    # draft hidden] in the model dtype before the profile: charged from 0.27, above the
    # utilization before. EAGLE-3 on Llama-3.1-8B, H100, 0.33: 8,192 x 4,096 x 2 B = 64 MiB,
    # 26,536 blocks and 424,576 tokens (a helper's hand derivation from the 0.33 wheel gave
    # 26,567 and 425,072 before the dummy run's hidden states, another 64 MiB held while the
    # sampler runs, were counted)
    from kvplan.core.arch import normalize
    from kvplan.core.specdec import hidden_buffer_bytes
    from kvplan.engines.vllm_spec import speculative
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    m = resolve_model("meta-llama/Llama-3.1-8B-Instruct")
    spec = speculative({"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
                        "num_speculative_tokens": 3}, resolve_model)
    assert hidden_buffer_bytes(spec, normalize(m.config), True, 8192, 2) == 64 << 20
    assert hidden_buffer_bytes(spec, normalize(m.config), False, 8192, 2) == 0
    r = size(m, resolve_gpu("h100"), EngineArgs(speculative=spec), "0.33")
    assert (r.num_gpu_blocks, r.kv_cache_tokens) == (26536, 424576)
    # n-gram keeps no hidden states
    ngram = from_config({"method": "ngram", "num_speculative_tokens": 3})
    assert hidden_buffer_bytes(ngram, normalize(m.config), True, 8192, 2) == 0


def test_v2_draft_model_captures_no_graphs():
    # 0.31+ V2 runs a separate draft model (`StandaloneARSpeculator`) without CUDA graphs:
    # its 16 layers are in no capture (a helper's hand derivation from the 0.33 wheel gave
    # 25,910 blocks before the dummy run's hidden states held while the sampler runs,
    # 7,168 x 8,192 x 2 B, were counted)
    from kvplan.engines.vllm_spec import speculative
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    spec = speculative({"method": "draft_model", "model": "meta-llama/Llama-3.2-1B-Instruct",
                        "num_speculative_tokens": 4}, resolve_model)
    r = size(resolve_model("meta-llama/Llama-3.3-70B-Instruct"), resolve_gpu("h100"),
             EngineArgs(tensor_parallel_size=4, speculative=spec), "0.33")
    assert (r.num_gpu_blocks, r.kv_cache_tokens) == (25828, 413248)


def test_dflash_full_graph_aux_staging_033():
    # 0.33's DFlash keeps the target's aux hidden states for its FULL graph's context step:
    # [min(1,024 x (8 + 1), 8,192), 5 aux layers x 2,048] bf16 = 160 MiB (a helper's reading)
    from kvplan.core.arch import normalize
    from kvplan.core.specdec import dflash_aux_staging_bytes
    from kvplan.engines.vllm_spec import speculative
    from kvplan.sources.resolve import resolve_model

    target = normalize(resolve_model("nvidia/Qwen3.6-35B-A3B-NVFP4").config)
    spec = speculative({"method": "dflash", "model": "z-lab/Qwen3.6-35B-A3B-DFlash",
                        "num_speculative_tokens": 8}, resolve_model)
    assert dflash_aux_staging_bytes(spec, target, 1024, 8192, 2) == 8192 * 5 * 2048 * 2
    assert dflash_aux_staging_bytes(spec, target, 64, 8192, 2) == 64 * 9 * 5 * 2048 * 2


def test_recommend_plans_at_the_draft_models_length(capsys):
    """0.33 lowers max_model_len to a Meta-Llama-3-8B draft_model's 8,192: the plan emits it,
    and the advice on the longer prompts names the draft, not --max-model-len, as the cap."""
    from kvplan.cli import main

    code = main(["recommend", "meta-llama/Llama-3.1-70B-Instruct", "--gpu", "h100", "-tp", "4",
                 "--speculative-config", '{"method": "draft_model", "num_speculative_tokens": 4,'
                 ' "model": "meta-llama/Meta-Llama-3-8B-Instruct"}', "--rate", "2", "--json"])
    d = json.loads(capsys.readouterr().out)
    assert code == 0 and d["max_model_len"] == 8192 and "--max-model-len 8192" in d["command"]
    assert any("the draft model caps --max-model-len" in a for a in d["advice"])


def test_a_draft_quantization_is_noted_not_modelled(capsys):
    from kvplan.cli import main

    assert main(["size", "meta-llama/Llama-3.1-70B-Instruct", "--gpu", "h100", "-tp", "4",
                 "-sc", '{"method": "draft_model", "num_speculative_tokens": 4, '
                 '"model": "meta-llama/Meta-Llama-3-8B-Instruct", "quantization": "fp8"}']) == 0
    assert "quantization 'fp8' is not modelled" in capsys.readouterr().out


def test_draft_model_tp_message_is_the_stricter_rule():
    # a draft model from 0.15 runs at the target's TP only: draft_tensor_parallel_size 2 at
    # TP4 is told so, not "can only be 1 or the target's 4" (review 25i)
    from kvplan.core.specdec import check_args
    from kvplan.core.versions import VllmVersion
    from kvplan.sources.resolve import resolve_model

    spec = from_config({"method": "draft_model", "num_speculative_tokens": 4,
                        "draft_tensor_parallel_size": 2},
                       resolve_model("meta-llama/Meta-Llama-3-8B-Instruct"))
    with pytest.raises(BadInput, match="runs a draft model at the target's TP only"):
        check_args(spec, 128256, 4, VllmVersion.of("0.33"))
