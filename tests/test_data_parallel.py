"""Data parallelism with MoE models (vLLM 0.33 `FusedMoEParallelConfig.make`, the naive
DP prepare/finalize), re-derived from the 0.31-0.33 wheels."""

from dataclasses import replace

import pytest

from kvplan.core.sizing import EngineArgs, size
from kvplan.errors import BadInput
from kvplan.sources.resolve import resolve_gpu, resolve_model


def _run(model, gpu, version="0.33", **kw):
    return size(resolve_model(model), resolve_gpu(gpu), EngineArgs(**kw), version)


def _padded_rows(n, e, tile):
    """`getMaxPermutedPaddedCount` over the global experts."""
    return tile * (min(e, n) + (n - min(e, n)) // tile)


def _routing(n, e, p, tile):
    """TRT-LLM's `prepare_routing_common` buffers (+ the 2n bf16 expert weights)."""
    return 8 * n + 4 * (p + 1) + 4 * e + 4 * max(2 * e, 512) + 8 * (p // tile) + 8 + 2 * n


def _bf16_in_call(n, e, tile, i, k):
    """A bf16-activation TRT-LLM call (MXFP4 or 16-bit experts): P x (2I + 2K) + routing."""
    p = _padded_rows(n, e, tile)
    return p * (2 * i + 2 * k) + _routing(n, e, p, tile)


def test_dp_without_ep_splits_the_experts_over_tp_x_dp():
    # Qwen3-30B-A3B -dp 2 on H100s: without --enable-expert-parallel the experts' rows are
    # split over TP x DP (`flatten_tp_across_dp_and_pcp`), the same bytes as EP2
    flat = _run("Qwen/Qwen3-30B-A3B", "h100", data_parallel_size=2)
    ep = _run("Qwen/Qwen3-30B-A3B", "h100", data_parallel_size=2, enable_expert_parallel=True)
    one = _run("Qwen/Qwen3-30B-A3B", "h100")
    # (+ 1 MiB: the 593.5 MiB embedding and LM head each hold a 594 MiB allocator segment;
    # the dummy run's hidden states, 8,192 x 2,048 x 2 B, are held while the sampler runs)
    assert flat.budget.weights == ep.budget.weights == 32_083_701_760 + (1 << 20)
    assert one.budget.weights > 1.9 * flat.budget.weights
    assert flat.budget.available_kv == ep.budget.available_kv == \
        40_734_520_411 - (1 << 20) - 8192 * 2048 * 2


def test_dp_gathers_every_rank_s_tokens_into_the_moe_layers():
    # DeepSeek-R1 -dp 8 -ep on H200s: each MoE layer sees 8 x 8,192 tokens; FlashInfer
    # CUTLASS keeps an M x K workspace (65,536 x 7,168 x 2 B = 939,524,096 B, not 117 MB),
    # and the gathered bf16 input is as large again at the MoE point
    r = _run("deepseek-ai/DeepSeek-R1", "h200", data_parallel_size=8,
             enable_expert_parallel=True)
    # FlashInfer CUTLASS also allocates its own per-call buffers through torch at that M
    # (`getWorkspaceDeviceBufferSizes`, DeepSeek block path; n = 8 x 65,536 rows, K 7,168,
    # I 2,048 whole under EP, 32 local experts), freed on return: in the forward's peak,
    # which now passes the sampler's (6,805,848,064 B before) by 12.35 GB
    # (+ the Python wrapper's `experts_to_token_score`, 32 x 65,536 fp32)
    n = 8 * 65_536
    call = n * (16 + 3 * 7168 + 4 * 2048 + 7168 // 32) + 4 * 32 * 65_536 + 4 * 32 * 65_536
    assert r.to_json()["moe_call_scratch_bytes"] == call == 15_711_862_784
    assert r.budget.activation == 3_450_404_864 + call
    assert r.budget.available_kv == 14_890_026_174  # with the block-FP8 weights' fp32 scales
    assert r.kv_cache_tokens == 211_888  # 387,728 without the per-call scratch
    # one rank's tokens at DP 1: no gather
    d1 = _run("Qwen/Qwen3-235B-A22B-FP8", "h100", tensor_parallel_size=4,
              enable_expert_parallel=True)
    assert d1.budget.activation == 3_512_565_760


def test_eplb_redundant_experts_and_state():
    # DeepSeek-R1 -dp 8 -ep --enable-eplb with 32 redundant experts on H200s (0.33):
    # 288 physical experts, 36 a rank (+4 x 58 layers x 44,050,944 B of weights), and the
    # state `EplbState.add_model` keeps: one layer's local experts (36 x 44,050,944 B),
    # logical_to_physical_map (58 x 256 x 1,024 x 8 B), the 1,000-step load window
    # (1,000 x 58 x 288 x 4 B) and the small maps
    from kvplan.core.eplb import eplb_state_bytes

    base = _run("deepseek-ai/DeepSeek-R1", "h200", data_parallel_size=8,
                enable_expert_parallel=True)
    r = _run("deepseek-ai/DeepSeek-R1", "h200", data_parallel_size=8,
             enable_expert_parallel=True, enable_eplb=True, eplb_num_redundant_experts=32)
    extra = 4 * 58 * 44_050_944
    assert abs(r.budget.weights - base.budget.weights - extra) < 8 << 20
    state = eplb_state_bytes(moe_layers=58, experts=256, redundant=32, window=1000,
                             layer_expert_bytes=36 * 44_050_944, buffer_kept=True)
    assert state == 1_585_833_984 + 121_634_816 + 66_816_000 + 58 * (256 * 8 + 288 * 12)
    assert abs(base.budget.available_kv - r.budget.available_kv - extra - state) < 16 << 20


def test_eplb_refusals():
    import pytest

    from kvplan.errors import BadInput

    for kw, says in (({"enable_eplb": True}, "enable_expert_parallel must be True"),
                     ({"enable_expert_parallel": True, "eplb_num_redundant_experts": 8},
                      "EPLB is not enabled")):
        with pytest.raises(BadInput, match=says):
            _run("Qwen/Qwen3-30B-A3B", "h100", data_parallel_size=2, **kw)
    with pytest.raises(BadInput, match="tensor or data parallelism"):
        _run("Qwen/Qwen3-30B-A3B", "h100", enable_expert_parallel=True, enable_eplb=True)


def test_dp_without_ep_pads_the_rows_each_rank_holds():
    # FlashInfer's FP8 MoE pads each rank's expert rows: without expert parallelism the rows
    # are split over TP x DP (`FusedMoEConfig.intermediate_size_per_partition`), so -dp 4
    # pads as -tp 4 does (Nemotron-3-Super latent experts: 1,344 / 4 = 336 -> 384 rows)
    from kvplan.core.arch import normalize
    from kvplan.core.moekernel import fi_expert_pad as _fi_expert_pad
    from kvplan.core.versions import VllmVersion

    m = resolve_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8")
    arch, b200, v = normalize(m.config), resolve_gpu("b200"), VllmVersion.of("0.33")
    dp4 = _fi_expert_pad(arch, m, EngineArgs(data_parallel_size=4), b200, v)[0]
    assert dp4 == _fi_expert_pad(arch, m, EngineArgs(tensor_parallel_size=4), b200, v)[0]
    assert round(dp4, 4) == round(384 / 336, 4)


def test_blackwell_trtllm_moe_allocates_its_own_buffers_per_call():
    # SM100 block FP8 runs `TrtLlmFp8ExpertsMonolithic`: no kept workspace, but FlashInfer's
    # launcher allocates per call through torch (`prepare_moe`). DeepSeek-R1 -dp 8 -ep on
    # B200s at 0.33: M = 8 x 16,384, n = 8M = 1,048,576 rows, 32 local experts, so 32,768 rows
    # an expert: tile 64 (below 128, the first tile at or above), P = 64 x (256 + (n - 256)
    # // 64) = 1,064,704 padded rows of 3 x 2,048 + 3 x 2,048 / 32 + 2 x 7,168 bytes, plus
    # the routing buffers
    from kvplan.core.memory import ActivationShape

    r = _run("deepseek-ai/DeepSeek-R1", "b200", data_parallel_size=8,
             enable_expert_parallel=True)
    p, n, e = 1_064_704, 1_048_576, 256
    routing = _routing(n, e, p, 64)
    body = p * (3 * 2048 + 3 * 2048 // 32 + 2 * 7168)
    assert r.to_json()["moe_call_scratch_bytes"] == body + routing == 22_024_441_836
    assert r.budget.available_kv == 44_310_576_780  # 63,105,404,536 before (-17.5 GiB)
    j = r.to_json()
    assert j["moe_workspace_kept"] is False and j["moe_workspace_bytes"] == 131072 * 7168 * 2
    # the tile ladder: NVFP4 takes 192 from FlashInfer 0.6.16 (vLLM 0.27+)
    nv = ActivationShape(hidden=7168, intermediate_local=0, moe_intermediate_local=2048,
                         top_k=8, vocab=0, act_bytes=2, local_experts=32, trtllm="nvfp4",
                         global_experts=256)
    assert nv.trtllm_rows(131072)[0] == 128
    assert replace(nv, trtllm_tile_192=True).trtllm_rows(131072)[0] == 192
    assert replace(nv, trtllm_tile_192=True).trtllm_rows(16)[0] == 8  # 4 rows an expert


def test_trtllm_charge_follows_vllm_s_spelling_release_and_class():
    from kvplan.errors import BadInput

    ep8 = dict(data_parallel_size=8, enable_expert_parallel=True)
    # vLLM lowercases --moe-backend and reads '-' as '_' (`arg_utils`)
    loud = _run("deepseek-ai/DeepSeek-R1", "b200", moe_backend="FLASHINFER-TRTLLM", **ep8)
    assert loud.to_json()["moe_call_scratch_bytes"] == 22_024_441_836
    # 0.16 already runs NVFP4 experts on TRT-LLM (tile 128 there: 0.6.3 has no 192)
    nv = _run("nvidia/DeepSeek-V3.1-NVFP4", "b200", version="0.16", **ep8)
    assert nv.to_json()["moe_call_scratch_bytes"] == 8_631_226_364
    # NVFP4 with EPLB leaves the monolithic class for the modular one, which keeps M x K
    eplb = _run("nvidia/DeepSeek-V3.1-NVFP4", "b200", tensor_parallel_size=8,
                enable_expert_parallel=True, enable_eplb=True)
    assert eplb.to_json()["moe_workspace_kept"] is True
    # kernels vLLM refuses on the device
    with pytest.raises(BadInput, match="block-FP8 experts on Hopper only"):
        _run("deepseek-ai/DeepSeek-R1", "b200", tensor_parallel_size=8,
             moe_backend="flashinfer_cutlass")
    with pytest.raises(BadInput, match="B200/B300 family only"):
        _run("deepseek-ai/DeepSeek-R1", "h200", tensor_parallel_size=8,
             moe_backend="flashinfer_trtllm")


def test_trtllm_fp8_class_follows_the_router():
    # `TrtLlmFp8ExpertsMonolithic._supports_routing_method` (block FP8): grouped top-k,
    # renormalised softmax (0.20+), MiniMax-M2's and sigmoid-renorm (0.21+), sigmoid (0.23+);
    # other routers take the modular class, which keeps M x K (and copies FlashInfer's
    # output into it in 0.18-0.20)
    def kept(model, v):
        j = _run(model, "b200", version=v, tensor_parallel_size=4).to_json()
        return j["moe_workspace_kept"], j["moe_call_scratch_bytes"] > 0

    assert kept("MiniMaxAI/MiniMax-M2.5", "0.20") == (True, True)  # 'unspecified' in 0.20
    assert kept("MiniMaxAI/MiniMax-M2.5", "0.22") == (False, True)
    assert kept("MiniMaxAI/MiniMax-M2.5", "0.33") == (False, True)
    assert kept("Qwen/Qwen3-235B-A22B-FP8", "0.18") == (True, True)  # 0.18-0.19: grouped only
    assert kept("Qwen/Qwen3-235B-A22B-FP8", "0.22") == (False, True)
    assert kept("sgl-project/DeepSeek-V4-Flash-FP8", "0.33") == (True, True)  # sqrtsoftplus
    # DeepSeek-V4's own FP4 experts under its block-FP8 config take the MXFP4 path
    assert kept("deepseek-ai/DeepSeek-V4-Flash", "0.33") == (True, False)


def test_flashinfer_cutlass_scratch_on_the_other_paths():
    # `getWorkspaceDeviceBufferSizes` for per-tensor FP8 (Nemotron-3-Super's non-gated ReLU^2
    # experts, the latent K 1,024, the intermediate padded to 128 rows: 2,688 whole under
    # EP) at -dp 2 -ep on H200s: n = 22 x 16,384; FP8 input max(2nK, nI), outputs max(2nI,
    # 2nK) (a GLU buffer of nI: FP8), the row maps (three with the TMA kernels), the expert
    # counters, the binding's map and the wrapper's score tensor
    r = _run("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8", "h200", data_parallel_size=2,
             enable_expert_parallel=True)
    n, m, k, i, e = 22 * 16_384, 16_384, 1024, 2688, 256
    big = max(2 * n * k, n * i) + max(2 * n * i, 2 * n * k)
    small = 3 * 4 * n + 2 * 4 * e * 16 + 4 * e * m + 8 * (e + 1) + 2 * 8 * e
    call = r.to_json()["moe_call_scratch_bytes"]
    assert abs(call - (big + small + 4 * n + 4 * e * m)) < 1024
    assert call == 2_946_013_312
    # 68,104,665,892 before (-1.27 GiB); the Mamba2 mixers' small parameters -757,760 B,
    # one norm a layer (not two) +720,896 B (88 layers x 4,096 x 2 B)
    assert r.budget.available_kv == 66_734_953_124 + 88 * 4096 * 2 == 66_735_674_020
    # NVFP4 on SM120: the kept workspace is over the packed K (hidden / 2), M x hidden
    q = _run("nvidia/Qwen3.5-122B-A10B-NVFP4", "rtx-pro-6000").to_json()
    assert q["moe_workspace_bytes"] == 8192 * 3072 * 2


def test_sm100_per_tensor_fp8_runs_the_trtllm_monolithic_class():
    # ModelOpt FP8 (Nemotron-3-Super: grouped router, non-gated ReLU^2, the latent K 1,024,
    # 2,688 / 2 = 1,344 rows padded to 1,408) at TP2 on B200s, 0.33: tile 64 for 704 rows
    # an expert, P = 64 x (512 + (n - 512) // 64); a 2I FP8 FC1 output and its fp32 scales
    # over P + E rows, the bf16 FC2 output, the routing buffers; nothing kept
    r = _run("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8", "b200", tensor_parallel_size=2)
    j = r.to_json()
    n, e, i, k = 22 * 16_384, 512, 1408, 1024
    p = _padded_rows(n, e, 64)
    routing = _routing(n, e, p, 64)
    assert j["moe_call_scratch_bytes"] == (p + e) * (2 * i + 2 * i // 128 * 4) + p * 2 * k \
        + routing
    assert j["moe_workspace_kept"] is False
    # with EPLB vLLM takes FlashInfer CUTLASS, which keeps its M x K workspace
    eplb = _run("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8", "b200", tensor_parallel_size=2,
                enable_expert_parallel=True, enable_eplb=True).to_json()
    assert eplb["moe_workspace_kept"] is True and eplb["moe_call_scratch_bytes"] > 0


def test_gpt_oss_on_sm100_runs_the_trtllm_mxfp4_monolithic_class():
    # 0.20+ `oracle/mxfp4.py`: FLASHINFER_TRTLLM_MXFP4_BF16, monolithic without DP or EPLB
    # (nothing kept: 94,371,840 B = 16,384 x 2,880 x 2 less at the sampler point); per call
    # P x (2I + 2K) over the padded widths (I 2,944, K 3,072), tile 32 (ladder 8-64); both
    # figures hold the dummy run's hidden states at the sampler point (16,384 x 2,880 x 2 B)
    one = _run("openai/gpt-oss-120b", "b200").to_json()
    before = 4_391_272_448 + 16_384 * 2880 * 2
    assert one["moe_workspace_kept"] is False
    assert before - one["activation_bytes"] == 16_384 * 2880 * 2
    assert one["moe_call_scratch_bytes"] == _bf16_in_call(16_384 * 4, 128, 32, 2944, 3072)
    dp = _run("openai/gpt-oss-120b", "b200", data_parallel_size=2,
              enable_expert_parallel=True).to_json()
    assert dp["moe_workspace_kept"] is True  # the modular class with DP


def test_sm100_bf16_experts_run_the_trtllm_monolithic_class():
    # Qwen3-30B-A3B (bf16, SiLU) on a B200: `TrtLlmBf16ExpertsMonolithic` keeps nothing
    # (67,108,864 B = 16,384 x 2,048 x 2 less at the sampler point than the kept M x K);
    # per call P x (2I + 2K), tile 64 for 16,384 x 8 / 128 = 1,024 rows an expert
    # (both figures hold the dummy run's hidden states at the sampler point, 16,384 x 2,048
    # x 2 B too)
    r = _run("Qwen/Qwen3-30B-A3B", "b200").to_json()
    before = 3_445_456_896 + 16_384 * 2048 * 2
    assert r["moe_workspace_kept"] is False
    assert before - r["activation_bytes"] == 16_384 * 2048 * 2
    assert r["moe_call_scratch_bytes"] == _bf16_in_call(16_384 * 8, 128, 64, 768, 2048)
    # with DP over the default all-gather the monolithic class still runs, at DP x M
    dp = _run("Qwen/Qwen3-30B-A3B", "b200", data_parallel_size=2,
              enable_expert_parallel=True).to_json()
    assert dp["moe_workspace_kept"] is False and dp["moe_call_scratch_bytes"] > \
        r["moe_call_scratch_bytes"]


def test_routers_as_vllm_names_them():
    # `get_routing_method_type`: a bias with groups is DeepSeek-V3's, without groups
    # MiniMax-M2's (0.21+, a routed scaling factor of 1 in 0.24-0.29), softmax without
    # renormalisation "default" (not in the 16-bit TRT-LLM list: CUTLASS keeps M x K)
    from kvplan.core.arch import normalize
    from kvplan.core.moekernel import moe_routing as _moe_routing
    from kvplan.core.versions import VllmVersion

    def route(model, v="0.33"):
        return _moe_routing(normalize(resolve_model(model).config), VllmVersion.of(v))

    assert route("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8") == "deepseek"
    assert route("zai-org/GLM-4.7-Flash") == "deepseek"
    assert route("Qwen/Qwen1.5-MoE-A2.7B") == route("deepseek-ai/DeepSeek-V2-Lite") == "default"
    # sarvam passes its routed scaling 2.5 to the router: MiniMax-M2's in 0.21-0.22 and
    # from 0.31, when get_routing_method_type no longer takes the factor
    assert [route("sarvamai/sarvam-105b", v) for v in ("0.20", "0.22", "0.23", "0.30", "0.31")] \
        == ["unspecified", "minimax2", "unspecified", "unspecified", "minimax2"]
    # sigmoid without a bias: Llama 4's at top-1 and "unspecified" otherwise in 0.20,
    # sigmoid-renorm from 0.21, plain sigmoid (not renormalised) from 0.23
    qwen = resolve_model("Qwen/Qwen3-30B-A3B").config
    text = dict(qwen.get("text_config") or qwen, scoring_func="sigmoid")

    def sig(v, **kw):
        return _moe_routing(normalize(dict(text, **kw)), VllmVersion.of(v))

    assert [sig(v) for v in ("0.20", "0.21", "0.23")] == \
        ["unspecified", "sigmoid_renorm", "sigmoid_renorm"]
    assert [sig(v, norm_topk_prob=False) for v in ("0.22", "0.23")] == ["unspecified", "sigmoid"]
    assert [sig(v, num_experts_per_tok=1) for v in ("0.22", "0.23")] == ["llama4", "sigmoid_renorm"]
    q = _run("Qwen/Qwen1.5-MoE-A2.7B", "b200").to_json()
    assert q["moe_workspace_kept"] is True and q["moe_call_scratch_bytes"] == 0
    # NVFP4: an unlisted router (Gemma 4's own, MiniMax-M2's before 0.21) takes the modular
    # class, which keeps M x K; per-call buffers either way
    def nv(model, v="0.33", **kw):
        j = _run(model, "b200", version=v, **kw).to_json()
        return j["moe_workspace_kept"], j["moe_call_scratch_bytes"] > 0

    assert nv("nvidia/Gemma-4-26B-A4B-NVFP4") == (True, True)
    assert nv("nvidia/MiniMax-M2.5-NVFP4", "0.20", tensor_parallel_size=4) == (True, True)
    assert nv("nvidia/MiniMax-M2.5-NVFP4", "0.22", tensor_parallel_size=4) == (False, True)
    # block FP8: Step-3.7's router (routed scaling 3.0) is "unspecified" in 0.23-0.30, where
    # the modular class keeps M x K, and MiniMax-M2's from 0.31
    assert [nv("stepfun-ai/Step-3.7-Flash-FP8", v)[0] for v in ("0.23", "0.30", "0.31")] \
        == [True, True, False]


def test_large_per_call_moe_buffers_get_a_batched_tokens_hint():
    # DeepSeek-R1 -dp 8 -ep on B200s: 20.5 GiB per call at 8 x 16,384 tokens; half the
    # token budget halves it, and the note gives the KV that frees (re-sized, not scaled)
    r = _run("deepseek-ai/DeepSeek-R1", "b200", data_parallel_size=8,
             enable_expert_parallel=True)
    half = _run("deepseek-ai/DeepSeek-R1", "b200", data_parallel_size=8,
                enable_expert_parallel=True, max_num_batched_tokens=8192)
    gain = (half.budget.available_kv - r.budget.available_kv) / 2**30
    (note,) = [n for n in r.notes if "fused-MoE kernel allocates" in n]
    assert f"--max-num-batched-tokens 8192 gives {gain:.1f} GiB" in note and gain > 10
    assert not any("fused-MoE kernel allocates" in n
                   for n in _run("Qwen/Qwen3-30B-A3B", "b200").notes)


def test_deepep_buffers_come_out_of_the_kv_cache():
    # one `deep_ep.Buffer` per process, made while the model loads: the 1 GiB NVLink buffer
    # (+160 B of signals, on 2 MiB pages) and the 32 MiB workspace; across hosts as much
    # again in NVSHMEM; low latency adds its RDMA heap for the tokens per DP rank
    # (`get_low_latency_rdma_size_hint`: DeepSeek-R1 at 256 tokens 3,816,818,816 B)
    cuda = (1024 + 2 + 32) << 20
    r1 = dict(data_parallel_size=8, enable_expert_parallel=True)
    plain = _run("deepseek-ai/DeepSeek-R1", "h200", **r1)
    ht = _run("deepseek-ai/DeepSeek-R1", "h200", all2all_backend="deepep_high_throughput",
              **r1)
    assert ht.all2all_buffer_bytes == cuda
    assert ht.budget.non_torch - plain.budget.non_torch == cuda
    two_hosts = _run("deepseek-ai/DeepSeek-R1", "h200", all2all_backend="deepep_high_throughput",
                     data_parallel_size=16, enable_expert_parallel=True)
    assert two_hosts.all2all_buffer_bytes == cuda + (1 << 30)
    ll = _run("deepseek-ai/DeepSeek-R1", "h200", all2all_backend="deepep_low_latency", **r1)
    assert ll.all2all_buffer_bytes == cuda + 3_816_818_816
    # `use_batched_dp_moe` (0.20+): the token budget defaults to 256 (1,024 at 0.19, whose
    # heap took VLLM_MOE_DP_CHUNK_SIZE's 256 either way)
    assert ll.to_json()["max_num_batched_tokens"] == 256
    old = _run("deepseek-ai/DeepSeek-R1", "h200", "0.19", all2all_backend="deepep_low_latency",
               **r1)
    assert old.to_json()["max_num_batched_tokens"] != 256
    assert old.all2all_buffer_bytes == ll.all2all_buffer_bytes
    # Qwen3-30B-A3B -dp 4 on H100s: hidden 2048, 128 experts
    q = _run("Qwen/Qwen3-30B-A3B", "h100", all2all_backend="deepep_low_latency",
             data_parallel_size=4, enable_expert_parallel=True, deepep_buffer_mb=512)
    assert q.all2all_buffer_bytes == ((512 + 2 + 32) << 20) + 545_260_672
    # without DP there is no all-to-all; pplx left vLLM in 0.17
    for kw in (dict(enable_expert_parallel=True, all2all_backend="deepep_low_latency"),
               dict(all2all_backend="pplx", **r1)):
        assert _run("deepseek-ai/DeepSeek-R1", "h200", **kw).all2all_buffer_bytes == 0


def test_deepep_low_latency_runs_batched_experts():
    # DeepEP low latency hands the experts a batched layout: BatchedDeepGemm for block FP8
    # (FP8 dispatch, fp32 scales per 128 on Hopper), BatchedTriton for bf16; kept workspace
    # E x R x (max(K, N) + N / 2) with R = ranks x 256 tokens, nothing gathered, no FlashInfer.
    # DeepSeek-R1 -dp 8 on H200s: kept 32 x 2,048 x 9,216 x 2 B = 1,207,959,552 B; the peak is
    # the MLA layer's point above it (hand-derived from the 0.33 wheel: 6,056,574,976 B)
    r1 = _run("deepseek-ai/DeepSeek-R1", "h200", all2all_backend="deepep_low_latency",
              data_parallel_size=8, enable_expert_parallel=True).to_json()
    assert (r1["moe_kernel"], r1["moe_workspace_bytes"], r1["moe_call_scratch_bytes"]) == (
        "batched_deepgemm", 1_207_959_552, 0)
    assert r1["activation_bytes"] - r1["sampler_state_bytes"] == 6_056_574_976
    # Qwen3-30B-A3B -dp 4 on H100s: 32 x 1,024 x (2,048 + 768) x 2 B kept, under the sampler
    q = _run("Qwen/Qwen3-30B-A3B", "h100", all2all_backend="deepep_low_latency",
             data_parallel_size=4, enable_expert_parallel=True).to_json()
    assert (q["moe_kernel"], q["moe_workspace_bytes"]) == ("batched_triton", 184_549_376)
    assert q["activation_bytes"] - q["sampler_state_bytes"] == 1_269_104_640


def test_deepseek_v4_mega_moe_symmetric_buffer():
    # `--moe-backend deep_gemm_mega_moe`: one DeepGEMM symmetric buffer per process, outside
    # torch (non-torch memory), for 8,192 tokens (aligned to 8,448) on each of 8 EP ranks:
    # DeepGEMM 2.5.0's layout gives 4,321,690,912 B for DeepSeek-V4-Flash (on 2 MiB granules
    # 4,322,230,272); no fused-MoE workspace, no DP gather. vLLM issue 51454's 0.25.0 starts
    # of V4-Flash-0731 on 8x B200 logged 20,571,235 tokens per DP rank and 21,419,891 at TP8
    from kvplan.core.all2all import mega_moe_buffer_bytes

    assert mega_moe_buffer_bytes(ranks=8, experts=256, tokens=8192, top_k=6, hidden=4096,
                                 intermediate=2048) == 4_321_690_912
    flags = dict(enable_expert_parallel=True, moe_backend="deep_gemm_mega_moe", block_size=256,
                 gpu_memory_utilization=0.95, kv_cache_dtype="fp8",
                 max_num_batched_tokens=8192, max_num_seqs=256)
    dp = _run("deepseek-ai/DeepSeek-V4-Flash", "b200", "0.25", data_parallel_size=8,
              **flags).to_json()
    tp = _run("deepseek-ai/DeepSeek-V4-Flash", "b200", "0.25", tensor_parallel_size=8,
              **flags).to_json()
    for j in (dp, tp):
        assert (j["moe_kernel"], j["all2all_buffer_bytes"], j["moe_workspace_bytes"]) == (
            "deepgemm_mega", 4_322_230_272, 0)
    assert dp["kv_cache_tokens"] / 20_571_235 - 1 == pytest.approx(0.0028, abs=0.001)
    assert tp["kv_cache_tokens"] / 21_419_891 - 1 == pytest.approx(0.0041, abs=0.001)
    # vLLM refuses it without expert parallelism and off SM100
    for gpu, kw in (("b200", dict(data_parallel_size=8)),
                    ("h200", dict(data_parallel_size=8, enable_expert_parallel=True))):
        with pytest.raises(BadInput, match="MegaMoE requires"):
            _run("deepseek-ai/DeepSeek-V4-Flash", gpu, moe_backend="deep_gemm_mega_moe", **kw)


def test_all2all_backend_names_and_precedence_by_release():
    # `All2AllBackend` / VLLM_ALL2ALL_BACKEND's choices as each release reads them
    from kvplan.core.all2all import backends, resolve

    assert "nixl_ep" in backends((0, 18, 0)) and "nixl_ep" not in backends((0, 17, 1))
    assert "mori" in backends((0, 15, 0)) and "mori" not in backends((0, 23, 0))
    assert "deepep_v2" in backends((0, 24, 0)) and "moonep" in backends((0, 31, 0))
    assert "passthrough" not in backends((0, 31, 0)) and "passthrough" in backends((0, 32, 0))
    assert backends((0, 9, 0)) == ("naive", "pplx")
    notes = []
    # the variable alone to 0.11.0; the flag first in 0.11.1-0.13; the variable first in
    # 0.14-0.15 (`ParallelConfig.__post_init__`); not read from 0.16
    assert resolve(None, "deepep_low_latency", (0, 11, 0), notes) == "deepep_low_latency"
    ht, ll = "deepep_high_throughput", "deepep_low_latency"
    assert resolve(ht, ll, (0, 13, 0), notes) == ht and resolve(ht, ll, (0, 14, 0), notes) == ll
    assert resolve(None, ll, (0, 16, 0), notes) is None
    assert notes[-1] == "VLLM_ALL2ALL_BACKEND is not read by vLLM 0.16.0 (use --all2all-backend)"
    assert "vLLM 0.14.0 takes VLLM_ALL2ALL_BACKEND deepep_low_latency over the other setting" \
        in notes
    for flag, env, release in ((None, "bogus", (0, 11, 0)), (None, ll, (0, 9, 0)),
                               ("nixl_ep", None, (0, 17, 1)), ("mori", None, (0, 24, 0))):
        with pytest.raises(BadInput, match="all-to-all backends"):
            resolve(flag, env, release, [])
    # a dense model under DP + EP with low latency still gets its 256-token budget (0.20+)
    dense = _run("Qwen/Qwen3-8B", "h100", data_parallel_size=2, enable_expert_parallel=True,
                 all2all_backend="deepep_low_latency").to_json()
    assert (dense["max_num_batched_tokens"], dense["max_num_seqs"]) == (256, 256)
    # 0.9.1-0.10 hard-code DeepEP's 1 GiB buffer: VLLM_DEEPEP_BUFFER_SIZE_MB is 0.11+
    r = _run("deepseek-ai/DeepSeek-R1", "h200", "0.10", data_parallel_size=8,
             enable_expert_parallel=True, all2all_backend_env="deepep_high_throughput",
             deepep_buffer_mb=512)
    assert r.all2all_buffer_bytes == (1024 + 2 + 32) << 20


def test_dual_batch_overlap_and_deepep_high_throughput_graphs():
    # DeepEP high throughput with DP > 1: vLLM captures no CUDA graphs (0.13+)
    r1 = dict(data_parallel_size=8, enable_expert_parallel=True)
    ht = _run("deepseek-ai/DeepSeek-R1", "h200", all2all_backend="deepep_high_throughput", **r1)
    assert (ht.budget.cudagraph, ht.to_json()["cudagraph_mode"]) == (0, "NONE")
    # --enable-dbo runs model runner V1 (`_get_dbo_unsupported_features`); low latency's
    # 256-token budget is under the 512-token prefill threshold, so the profile is not split
    # and the second microbatch's workspace slot comes after sizing (a helper's reading of
    # 0.33: V1's available KV 23,341,733,728 B)
    ll = _run("deepseek-ai/DeepSeek-R1", "h200", all2all_backend="deepep_low_latency",
              enable_dbo=True, **r1).to_json()
    assert (ll["model_runner_v2"], ll["available_kv_bytes"]) == (False, 23_341_733_728)
    assert ll["outside_budget_bytes"] == 1_207_959_552
    # high throughput's 8,192 tokens are split in two: the waiting microbatch keeps its
    # tensors, the running one alone holds FlashInfer's per-call buffers (15.7 GB -> 7.9 GB)
    dbo = _run("deepseek-ai/DeepSeek-R1", "h200", all2all_backend="deepep_high_throughput",
               enable_dbo=True, **r1).to_json()
    assert dbo["activation_bytes"] == 10_743_709_696
    with pytest.raises(BadInput, match="microbatching"):
        _run("deepseek-ai/DeepSeek-R1", "h200", enable_dbo=True, **r1)


def test_review_refusals_mega_moe_fp8_and_microbatching_before_020():
    # mega-MoE takes FP4 experts only; an FP8-expert checkpoint is refused with its own hint
    with pytest.raises(BadInput, match="only supports fp4 experts") as e:
        _run("sgl-project/DeepSeek-V4-Flash-FP8", "b200", data_parallel_size=8,
             enable_expert_parallel=True, moe_backend="deep_gemm_mega_moe")
    assert "FP4-expert checkpoint" in e.value.hint
    # vLLM refuses microbatching beside a non-DeepEP backend from 0.11 (sized as one batch
    # before 0.20)
    with pytest.raises(BadInput, match="microbatching"):
        _run("deepseek-ai/DeepSeek-R1", "h200", "0.19", data_parallel_size=8,
             enable_expert_parallel=True, enable_dbo=True)
    ok = _run("deepseek-ai/DeepSeek-R1", "h200", "0.19", data_parallel_size=8,
              enable_expert_parallel=True, enable_dbo=True,
              all2all_backend="deepep_low_latency")
    assert any("sized as one batch" in n for n in ok.notes)
