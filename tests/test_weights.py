"""Exact weight placement from tensor names, and the config-based estimate."""

import re

import pytest
from configs import DEEPSEEK_V3, LFM2_12B, LLAMA31_8B, QWEN25_7B_INSTRUCT

from kvplan.core.arch import normalize
from kvplan.core.params import count_params, weight_bytes
from kvplan.core.sizing import EngineArgs, Gpu, Model, size
from kvplan.core.tensors import summarize
from kvplan.core.versions import VllmVersion
from kvplan.errors import BadInput

H100 = Gpu("h100", "NVIDIA H100 80GB HBM3", 81089 << 20, "9.0")
TINY = {**LLAMA31_8B, "num_hidden_layers": 2}
TENSORS = {
    "model.embed_tokens.weight": 1000,
    "lm_head.weight": 1000,
    "model.norm.weight": 8,
    **{f"model.layers.{i}.{n}": b for i in range(2) for n, b in (
        ("self_attn.q_proj.weight", 400), ("self_attn.k_proj.weight", 100),
        ("self_attn.v_proj.weight", 100), ("self_attn.o_proj.weight", 400),
        ("mlp.gate_proj.weight", 600), ("mlp.up_proj.weight", 600),
        ("mlp.down_proj.weight", 600), ("input_layernorm.weight", 8),
        ("post_attention_layernorm.weight", 8))},
    "model.layers.2.self_attn.q_proj.weight": 999,  # an MTP layer past num_hidden_layers
}


def test_summarize_roles():
    s = summarize(TENSORS, 2)
    assert (s.embed, s.lm_head, s.other_split, s.skipped) == (1000, 1000, 8, 999)
    assert [(x.split, x.replicated, x.kv) for x in s.layers] == [(2600, 16, 200)] * 2
    assert s.loaded == sum(TENSORS.values()) - 999


def weights(tp=1, pp=1):
    m = Model("tiny", TINY, weights_bytes=sum(TENSORS.values()),
              weights_layout=summarize(TENSORS, 2).to_json())
    r = size(m, H100, EngineArgs(tensor_parallel_size=tp, pipeline_parallel_size=pp,
                                 kv_cache_memory_bytes=1 << 30, max_model_len=4096))
    return r


def test_placement_tp_and_pp():
    # every GPU also holds the rotary cache: Llama 3.1's 131,072 positions x 128 x 2 B
    rope = 131072 * 128 * 2
    assert weights().rope_cache_bytes == rope
    assert weights().budget.weights == sum(TENSORS.values()) - 999 + rope
    # TP2: everything split but norms; 8 KV heads / 2 -> K/V split too
    assert weights(tp=2).budget.weights == (
        (2 * (2600 + 200) + 1000 + 1000) // 2 + 2 * 16 + 8 + rope)
    # TP16: 8 KV heads -> each rank keeps a whole head: K/V bytes x (1 head / 8)
    r = weights(tp=16)
    assert r.budget.weights == int(2 * 2600 / 16 + 2 * 16 + 2 * 200 / 8 + 2000 / 16 + 8) + rope
    # PP2: stage 0 = layer 0 + embeddings, stage 1 = layer 1 + LM head + final norm
    r = weights(pp=2)
    assert [s["weights_bytes"] for s in r.stages] == [2816 + 1000 + rope, 2816 + 1000 + 8 + rope]


def test_estimate_counts_exact_llama_and_qwen_parameters():
    # published exact counts (= safetensors total_size / 2): Llama-3.1-8B 8,030,261,248 (final
    # norm included), Qwen2.5-7B 7,615,616,512 (q/k/v biases), DeepSeek-V3 671,026,419,200
    # (e_score_correction_bias)
    assert count_params(normalize(LLAMA31_8B)).total == 8_030_261_248
    assert count_params(normalize(QWEN25_7B_INSTRUCT)).total == 7_615_616_512
    assert count_params(normalize(DEEPSEEK_V3)).total == 671_026_419_200


def test_estimate_counts_qwen3_norms_output_gate_and_vision_towers():
    from kvplan import catalog
    from kvplan.sources.resolve import model_from_entry

    def total(repo: str) -> int:
        m = model_from_entry(*catalog.load("models").get(repo))
        return count_params(normalize(m.config)).total

    # Qwen3 q_norm/k_norm (2 x 128 per layer): the tensor counts of shared/hf-configs/PARAMS.md
    assert total("Qwen/Qwen3-8B") == 8_190_735_360
    # Gemma 2's four norms a layer (input, post-attention, pre-/post-feedforward): PARAMS.md's
    # 9,241,705,984 for gemma-2-9b (published 9.24B)
    assert total("google/gemma-2-9b") == 9_241_705_984
    assert total("Qwen/Qwen3-30B-A3B") == 30_532_122_624
    # Qwen2.5-VL-7B: Qwen2.5-7B plus a 32-block SwiGLU ViT (1280 -> 3420, RMSNorm, biases),
    # the 3 x 2 x 14 x 14 patch embedding and the 5120 -> 5120 -> 3584 merger: 8,292,166,656
    assert total("Qwen/Qwen2.5-VL-7B-Instruct") == 7_615_616_512 + 676_550_144
    # Qwen3.5-27B: full-attention q_proj carries the output gate (24 heads x 256 x 2); the 16
    # gated layers add 16 x 5120 x 6144 = 503,316,480 parameters over an ungated count
    m = model_from_entry(*catalog.load("models").get("Qwen/Qwen3.5-27B"))
    ungated = {**m.config, "text_config": {**m.config["text_config"], "attn_output_gate": False}}
    assert total("Qwen/Qwen3.5-27B") - count_params(normalize(ungated)).total == 503_316_480


def test_llava_style_projectors_and_truncated_towers():
    from kvplan import catalog
    from kvplan.core.params import projector_params
    from kvplan.sources.resolve import model_from_entry

    def arch(repo: str):
        return normalize(model_from_entry(*catalog.load("models").get(repo)).config)

    # Mistral-Small-3.1 (mistral3.py): text 40 x 555,755,520 + 2 x 131,072 x 5,120 + 5,120 =
    # 23,572,403,200; Pixtral tower without biases 24 x 16,779,264 + patch conv 602,112 +
    # ln_pre 1,024 = 403,305,472; projector RMSNorm 1,024 + merger 4,096 x 1,024 + 1,024 x
    # 5,120 + 5,120 x 5,120 (no bias) = 35,652,608
    a = arch("mistralai/Mistral-Small-3.1-24B-Instruct-2503")
    assert projector_params(a.mm_projector, a.hidden_size) == 35_652_608
    assert count_params(a).total == 23_572_403_200 + 403_305_472 + 35_652_608
    # LLaVA-Next builds the CLIP tower up to vision_feature_layer -2: 23 of 24 layers
    # (`init_vision_tower_for_llava`), then linear_1 1,024 -> 4,096 and linear_2 4,096 ->
    # 4,096 with biases and the 4,096-wide image_newline
    a = arch("llava-hf/llava-v1.6-mistral-7b-hf")
    assert a.vision_config["num_hidden_layers"] == 23
    assert projector_params(a.mm_projector, 4096) == 1024 * 4096 + 4096 * 4096 + 3 * 4096
    # Gemma 3: the [1,152, 5,376] projection and its norm
    a = arch("google/gemma-3-27b-it")
    assert projector_params(a.mm_projector, a.hidden_size) == 1152 * 5376 + 1152


def test_nemotron_nas_blocks_have_their_own_ffn_widths():
    # Llama-3.3-Nemotron-Super-49B: no top-level intermediate_size; each block's FFN is
    # int(2 x ffn_mult x 8,192 / 3) rounded up to 256 (nemotron_nas.py
    # `_ffn_mult_to_intermediate_size`): ffn_mult 5.25 -> 28,672, 2.625 -> 14,336, 1.3125 ->
    # 7,168, 1.0 -> 5,632, 0.5 -> 2,816, 3.28125 -> 17,920; 49 of 80 blocks keep attention
    from kvplan import catalog
    from kvplan.core.params import nas_ffn_sizes
    from kvplan.sources.resolve import model_from_entry, resolve_gpu

    m = model_from_entry(*catalog.load("models").get("nvidia/Llama-3_3-Nemotron-Super-49B-v1"))
    a = normalize(m.config)
    widths = nas_ffn_sizes(a)
    assert sorted(set(widths)) == [2816, 5632, 7168, 14336, 17920, 28672]
    ffn = sum(3 * 8192 * w for w in widths)
    attn = 49 * (2 * 8192 * 8192 + 2 * 8192 * 1024)
    norms = 8192 * (49 + 80) + 8192  # input norms where attention is, FFN norms, final
    assert count_params(a).total == 2 * 128256 * 8192 + attn + ffn + norms == 49_867_145_216
    # 99.7 GB in bf16: not one H100; at TP2 a helper's hand derivation from the 0.33 wheel
    # gives 14,659 blocks, 234,544 tokens (kvplan had 19 GB of weights and 273,248 tokens);
    # with the dummy run's hidden states held while the sampler runs (8,192 x 8,192 x 2 B),
    # which it leaves out, 14,575 and 233,200
    h100 = resolve_gpu("h100")
    assert not size(m, h100, EngineArgs(), "0.33").fits
    r = size(m, h100, EngineArgs(tensor_parallel_size=2), "0.33")
    assert (r.num_gpu_blocks, r.kv_cache_tokens) == (14575, 233200)


def test_mlp_width_from_the_hidden_size_or_refused():
    # falcon.py / bloom.py build 4 x hidden whatever the config says; gpt2.py / gpt_j.py
    # n_inner or 4 x hidden. Falcon-7B: 32 layers of fused QKV (4,544 x 4,672), dense
    # 4,544^2, 4 x 4,544 MLP (two 4,544 x 18,176), one LayerNorm (weight and bias) + the
    # 65,024 x 4,544 embedding, tied (falcon.py: an unset tie_word_embeddings means tied), and
    # the final LayerNorm: 6,921,720,704 (kvplan had no MLP and an untied head: 2.2 B)
    from kvplan import catalog
    from kvplan.errors import UnsupportedArchitecture
    from kvplan.sources.resolve import model_from_entry

    m = model_from_entry(*catalog.load("models").get("tiiuae/falcon-7b-instruct"))
    h = 4544
    layer = h * (h + 2 * 64) + h * h + 2 * h * 4 * h + 2 * h
    assert count_params(normalize(m.config)).total == 32 * layer + 65024 * h + 2 * h \
        == 6_921_720_704
    # a dense config that names no MLP width is refused rather than sized without its MLP
    bare = {k: v for k, v in LLAMA31_8B.items() if k != "intermediate_size"}
    with pytest.raises(UnsupportedArchitecture, match="gives no MLP width"):
        normalize(bare)


def test_minimax_m3_dense_layers_use_dense_intermediate_size():
    # minimax_m3/nvidia/model.py: the first_k_dense_replace layers build MiniMaxM3MLP with
    # `dense_intermediate_size` (12,288), not the experts' 3,072: 3 x 3 x h x 9,216 more
    from kvplan import catalog
    from kvplan.sources.resolve import model_from_entry

    m = model_from_entry(*catalog.load("models").get("MiniMaxAI/MiniMax-M3"))
    a = normalize(m.config)
    t = a.text_config
    plain = {**m.config, "dense_intermediate_size": t["intermediate_size"]}
    assert count_params(a).total - count_params(normalize(plain)).total == \
        3 * 3 * a.hidden_size * (12288 - 3072)


def test_lfm2_parameters_from_block_ff_dim():
    a = normalize(LFM2_12B)
    assert a.intermediate_size == 8192  # 2/3 x 12,288, rounded up to a multiple of 256
    assert a.tie_word_embeddings
    # embeddings 65,536 x 2,048 (tied) + 10 conv blocks (4 h^2 + 3 h) + 6 GQA blocks
    # (2 h^2 + 2 h x 512) + 16 SwiGLU MLPs (3 h x 8,192) + 2 norms per layer (LFM2's q/k
    # layernorms are not counted)
    h = 2048
    expect = (65536 * h + 10 * (4 * h * h + 3 * h) + 6 * (2 * h * h + 2 * h * 512)
              + 16 * 3 * h * 8192 + 16 * 2 * h + h)  # + the final norm
    assert count_params(a).total == expect


def test_quantized_bytes_per_parameter():
    awq = normalize({**LLAMA31_8B, "quantization_config": {"quant_method": "awq", "bits": 4,
                                                           "group_size": 128}})
    # stored: 4-bit weights, an fp16 scale and a packed 4-bit zero point per group of 128
    assert weight_bytes(awq, 2).linear == 0.5 + 2.5 / 128
    assert weight_bytes(awq, 2).other == 2
    mx = normalize({**LLAMA31_8B, "quantization_config": {"quant_method": "mxfp4"}})
    assert (weight_bytes(mx, 2).linear, weight_bytes(mx, 2).expert) == (2, 0.5 + 1 / 32)
    assert weight_bytes(normalize(LLAMA31_8B), 2, "fp8").linear == 1.0


def test_modelopt_mixed_precision_means_over_listed_modules():
    # nvidia/*-NVFP4 MIXED_PRECISION layout: NVFP4 routed experts, FP8 Mamba projections,
    # NVFP4 shared experts, an excluded attention block and projection kept in bf16.
    hq = {"quantization": {"quant_algo": "MIXED_PRECISION", "quantized_layers": {
        "backbone.layers.1.mixer.experts.0.up_proj": {"quant_algo": "W4A16_NVFP4",
                                                      "group_size": 16},
        "backbone.layers.1.mixer.experts.1.up_proj": {"quant_algo": "NVFP4", "group_size": 16},
        "backbone.layers.0.mixer.in_proj": {"quant_algo": "FP8"},
        "backbone.layers.1.mixer.shared_experts.up_proj": {"quant_algo": "MXFP8"},
        "lm_head": {"quant_algo": "NVFP4"}},
        "exclude_modules": ["backbone.embeddings", "backbone.layers.2.self_attn*",
                            "backbone.layers.3.mixer.o_proj", "backbone.layers.1.mixer.gate"]}}
    wb = weight_bytes(normalize(LLAMA31_8B), 2, None, hq)
    assert wb.expert == 0.5 + 1 / 16
    # FP8 in_proj 1.0 + 4 excluded attention projections + 1 excluded o_proj at 2 B
    assert wb.linear == (1.0 + 5 * 2) / 6
    assert wb.mlp == 1 + 1 / 32  # the shared expert's MXFP8, apart from the attention
    assert (wb.lm_head, wb.other) == (0.5 + 1 / 16, 2)


def test_modelopt_mixed_fused_expert_names():
    # nvidia/Qwen3.6-35B-A3B-NVFP4 lists fused `mlp.experts` (no per-expert index), NVFP4
    # shared experts and LM head, FP8 attention and Gated-DeltaNet projections
    from kvplan import catalog
    from kvplan.sources.resolve import model_from_entry

    m = model_from_entry(*catalog.load("models").get("nvidia/Qwen3.6-35B-A3B-NVFP4"))
    arch = normalize(m.config)
    wb = weight_bytes(arch, 2, None, m.hf_quant_config)
    nvfp4 = 0.5 + 1 / 16
    assert (wb.expert, wb.mlp, wb.lm_head, wb.linear, wb.other) == (nvfp4, nvfp4, nvfp4, 1, 2)
    # the estimate, part by part: 40 x 256 experts x 3 x 2048 x 512 at 4.5 bits ...
    pc = count_params(arch)
    assert pc.experts == 40 * 256 * 3 * 2048 * 512
    mlp = sum(x.mlp for x in pc.layers)
    assert mlp == 40 * (3 * 2048 * 512 + 2048)  # shared expert + its gate
    attn = sum(x.split - x.mlp + x.kv_proj for x in pc.layers)
    rest = pc.embed + pc.vision + sum(x.replicated for x in pc.layers)
    expect = (pc.experts + mlp + pc.lm_head) * nvfp4 + attn + rest * 2
    r = size(m, H100, EngineArgs(max_model_len=8192, kv_cache_memory_bytes=1 << 30))
    assert r.rope_cache_bytes == 262144 * 64 * 2  # partial rotary: 256 x 0.25 dims
    assert abs(r.budget.weights - r.rope_cache_bytes - expect) < 1e3
    # 26.40 with experts at 0.75 B; 20.08 before the attention output gate (10 x 2048 x 4096
    # more q_proj at 1 B: 0.08 GiB) and the vision tower's embeddings and merger (0.07 GiB);
    # + the 32 MiB rotary cache
    assert round(r.budget.weights / (1 << 30), 2) == 20.25


def _size_json(capsys, *argv):
    import json

    from kvplan.cli import main

    code = main(["size", *argv, "--json"])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    return json.loads(out)


def test_modelopt_checkpoint_kv_auto_is_fp8_from_014(capsys):
    # hf_quant_config.json: kv_cache_quant_algo FP8 -> `auto` resolves to fp8 from 0.14 (the
    # resolver arrived then; the folded file gets its 'modelopt' quant_method in place from
    # `_normalize_quantization_config` first); 0.13 keeps the model dtype
    def kv(*version):
        return _size_json(capsys, "nvidia/Llama-3.1-70B-Instruct-FP8", "--gpu", "h100", "-tp",
                          "2", "--max-model-len", "8192", *version)

    d = kv()
    assert d["kv_cache_dtype"] == "fp8"
    assert d["kv_bytes_per_token_per_gpu"] == 80 * 4 * 128 * 2 * 1
    assert kv("--vllm-version", "0.19")["kv_cache_dtype"] == "fp8"
    assert kv("--vllm-version", "0.14")["kv_cache_dtype"] == "fp8"
    assert kv("--vllm-version", "0.13")["kv_cache_dtype"] == "bfloat16"


def test_online_fp8_quantization_shrinks_linear_layers_only(capsys):
    base = _size_json(capsys, "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100",
                      "--max-model-len", "8192")
    fp8 = _size_json(capsys, "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100",
                     "--max-model-len", "8192", "-q", "fp8")
    embed_and_head = 2 * 128256 * 4096 * 2 + base["rope_cache_bytes"]  # stay bf16
    linear = base["weights_bytes_per_gpu"] - embed_and_head
    assert abs(fp8["weights_bytes_per_gpu"] - (embed_and_head + linear / 2)) < 2e6


def test_awq_checkpoint_estimate_without_exact_size():
    awq = normalize({**LLAMA31_8B, "quantization_config": {"quant_method": "awq", "bits": 4,
                                                           "group_size": 128}})
    r = size(Model("awq", awq.text_config), H100, EngineArgs(max_model_len=8192))
    # 4-bit linears (+ fp16 scale/zero per 128) and bf16 embeddings + LM head
    pc = count_params(awq)
    linear = pc.total - pc.embed - pc.lm_head - sum(x.replicated for x in pc.layers)
    expect = linear * (0.5 + 4 / 128) + (pc.embed + pc.lm_head) * 2
    assert r.weights_estimated and abs(r.budget.weights / expect - 1) < 0.01


def test_nemotron_h_block_list_and_latent_moe():
    # Nemotron-3-Ultra-550B: `layers_block_type` instead of hybrid_override_pattern, and
    # experts that work in a 2,048-wide latent space (moe_latent_size)
    from kvplan import catalog

    cfg = catalog.load("models", []).get("nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16")[1]
    arch = normalize(cfg["config"])
    assert arch.num_layers == len(cfg["config"]["layers_block_type"])
    assert abs(count_params(arch).total / 550e9 - 1) < 0.01


def test_gemma4_moe_layers_keep_a_dense_mlp():
    # vLLM `Gemma4DecoderLayer`: every layer of gemma-4-26B-A4B runs a dense gated MLP
    # (intermediate 2112) and the 128-expert block (expert intermediate 704) side by side
    from kvplan import catalog
    from kvplan.sources.resolve import model_from_entry

    m = model_from_entry(*catalog.load("models").get("google/gemma-4-26B-A4B"))
    pc = count_params(normalize(m.config))
    h = 2816
    assert pc.experts == 30 * 128 * 3 * h * 704
    assert sum(x.mlp for x in pc.layers) == 30 * 3 * h * 2112


def test_rotary_cache_follows_get_rope():
    # vLLM builds one [length, rotary_dim] cos/sin table per distinct rope, in the model dtype
    from kvplan import catalog
    from kvplan.core.params import rope_cache_bytes
    from kvplan.sources.resolve import model_from_entry

    def rope(repo: str) -> int:
        m = model_from_entry(*catalog.load("models").get(repo))
        return rope_cache_bytes(normalize(m.config), 2)

    # llama3 type: max_position_embeddings; Llama 4's 10M positions x 128 dims = 2.5 GiB
    assert rope("meta-llama/Llama-3.1-8B-Instruct") == 131072 * 128 * 2
    assert rope("meta-llama/Llama-4-Scout-17B-16E-Instruct") == 10485760 * 128 * 2
    # Gemma 3: global rope linear x8 + the sliding layers' local rope, head_dim 256
    assert rope("google/gemma-3-4b-it") == (131072 * 8 + 131072) * 256 * 2
    # Gemma 4: per-layer-type ropes, the "proportional" one over the whole 512-dim head
    assert rope("google/gemma-4-26B-A4B") == 262144 * (512 + 256) * 2
    # YaRN on the MLA rope dims: original 4,096 x factor 40 positions x 64
    assert rope("deepseek-ai/DeepSeek-V3") == 4096 * 40 * 64 * 2
    # partial rotary: Qwen3.5 rotates a quarter of its 256-dim heads
    assert rope("Qwen/Qwen3.5-27B") == 262144 * 64 * 2
    # linear x4 over 16,384 positions (deepseek-coder)
    assert rope("deepseek-ai/deepseek-coder-6.7b-instruct") == 16384 * 4 * 128 * 2
    # MiniMax-M2 rotates the config's rotary_dim (64 of its 128-dim heads, minimax_m2.py)
    assert rope("MiniMaxAI/MiniMax-M2.5") == 196608 * 64 * 2


@pytest.mark.parametrize("repo,positions,dim", [
    ("Qwen/Qwen2.5-VL-7B-Instruct", 128000, 128), ("Qwen/Qwen3-VL-8B-Instruct", 262144, 128),
    ("Qwen/Qwen3.5-27B", 262144, 64)])
def test_mrope_cache_covers_four_times_the_positions(repo, positions, dim):
    """`MRotaryEmbedding.cache_max_position_num` = max_position_embeddings x 4 from 0.7.2
    (Qwen2.5-VL's video positions run past the token count); from 0.32 Qwen3-VL and Qwen3.5
    pass `positions_factor` 1 (qwen3_vl.py `mrope_positions_factor`, video pruning off)."""
    from kvplan.core.params import mrope_positions_factor
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    m, h100 = resolve_model(repo), resolve_gpu("h100")
    arch = normalize(m.config)
    one = repo != "Qwen/Qwen2.5-VL-7B-Instruct"
    for version, factor in (("0.31", 4), ("0.32", 1 if one else 4), ("0.33", 1 if one else 4)):
        assert mrope_positions_factor(arch, VllmVersion.of(version).v) == factor
        assert size(m, h100, EngineArgs(), version).rope_cache_bytes == positions * factor * dim * 2
    assert mrope_positions_factor(arch, (0, 7, 1)) == 1


def test_mla_rope_fp32_and_the_sparse_indexer_buffers(capsys):
    # `DeepseekScalingRotaryEmbedding` keeps its cache fp32 for FlashInfer when the custom op
    # runs (no compilation: --enforce-eager, breakable graphs), 0.16+; DeepSeek-V3.2's indexer
    # rope is NeoX-style and the attention's is not, so `get_rope` builds two caches; GLM-5
    # sets indexer_rope_interleave and its default rope is a plain one (bf16, shared)
    def run(*argv):
        return _size_json(capsys, *argv, "--offline")

    yarn = 4096 * 40 * 64  # original x factor positions x qk_rope_head_dim
    assert run("deepseek-ai/DeepSeek-R1", "--gpu", "h200", "-tp", "8")[
        "rope_cache_bytes"] == yarn * 2
    assert run("deepseek-ai/DeepSeek-R1", "--gpu", "h200", "-tp", "8", "--enforce-eager")[
        "rope_cache_bytes"] == yarn * 4
    # V3.2 at 0.33 runs breakable graphs by default (compilation off): two fp32 caches, and
    # the [8,192, 2,048] int32 top-k index buffer (64 MiB) every indexer shares; a helper's
    # hand derivation from the 0.33 wheel gives 8,931 blocks, 571,584 tokens on kvplan's
    # weights, and its own weight count (with the FP8 block scales) 20.9 MB more: 8,927;
    # with the dummy run's hidden states held while the sampler runs (8,192 x 7,168 x 2 B),
    # which it leaves out, 8,904
    v32 = run("deepseek-ai/DeepSeek-V3.2", "--gpu", "h200", "-tp", "8")
    assert v32["rope_cache_bytes"] == 2 * yarn * 4 == 83_886_080
    assert (v32["num_gpu_blocks"], v32["kv_cache_tokens"]) == (8904, 569856)
    assert run("zai-org/GLM-5-FP8", "--gpu", "h200", "-tp", "8")[
        "rope_cache_bytes"] == 202752 * 64 * 2


def test_gemma4_audio_tower_counted_and_towers_replicated():
    from kvplan import catalog
    from kvplan.core.mm import towers_tp_sharded
    from kvplan.core.params import _audio_params, _vision_params
    from kvplan.sources.resolve import model_from_entry

    m = model_from_entry(*catalog.load("models").get("google/gemma-4-E4B-it"))
    arch = normalize(m.config)
    # conformer: 12 blocks x 24 h^2 (two 4x FFNs, attention + relative positions, light
    # convolution) at h = 1024, plus the 1024 -> 1536 output projection
    assert _audio_params(m.config["audio_config"]) == 12 * 24 * 1024**2 + 1024 * 1536
    pc = count_params(arch)
    assert pc.audio == 12 * 24 * 1024**2 + 1024 * 1536
    # the vision tower (transformers `Gemma4VisionModel`): 16 blocks of attention (4 x 768²)
    # and a gated GELU MLP (3 x 768 x 3,072), a 768 x 768 patch projection and two
    # 10,240 x 768 position tables, plus kvplan's allowance for biases and norms
    assert pc.vision == _vision_params(m.config["vision_config"], 0) == \
        16 * (4 * 768**2 + 3 * 768 * 3072 + 7 * 768 + 2 * 3072) + 768 * 768 + 2 * 10240 * 768
    # vLLM builds Gemma 3n / 4 towers with AutoModel.from_config: whole on every TP rank
    assert not towers_tp_sharded(arch.architectures)
    assert towers_tp_sharded(["Qwen2_5_VLForConditionalGeneration"])


def test_modelopt_031_export_kv_auto_is_fp8_from_013(capsys):
    # ModelOpt 0.31+ exports write `quantization_config` (quant_method modelopt) into
    # config.json, which vLLM 0.13+ resolves for `auto`. A real 0.18.0 TP8 B200 start of
    # nvidia/DeepSeek-V3.2-NVFP4 printed 110.97 GiB -> 2,758,848 tokens: plain fp8 latent
    # (576 B) + indexer (132 B) x 61 layers, FlashInfer sparse MLA at 16 heads per rank
    d = _size_json(capsys, "nvidia/DeepSeek-V3.2-NVFP4", "--gpu", "b200", "-tp", "8",
                   "--max-model-len", "8192", "--vllm-version", "0.18.0",
                   "--kv-cache-memory-bytes", str(round(110.97 * (1 << 30))))
    assert d["kv_cache_dtype"] == "fp8"
    assert d["kv_bytes_per_token_per_gpu"] == 708 * 61
    assert abs(d["kv_cache_tokens"] - 2758848) <= 64  # one block: the GiB printed to 0.01
    old = _size_json(capsys, "nvidia/DeepSeek-V3.2-NVFP4", "--gpu", "b200", "-tp", "8",
                     "--max-model-len", "8192", "--vllm-version", "0.12.0")
    assert old["kv_cache_dtype"] == "bfloat16"


def test_compressed_tensors_ignore_list_keeps_those_parts_16_bit():
    from kvplan.core.params import ignored_fractions

    four = normalize({**LLAMA31_8B, "num_hidden_layers": 4})
    # llm-compressor style: regexes from the start of the module name, or exact names
    f = ignored_fractions(["lm_head", "re:.*linear_attn.*", "re:.*mlp.gate$"], four)
    assert f == {"attn": 0.0, "state": 0.0, "mlp": 0.0, "expert": 0.0, "mla_a": 0.0,
                 "kv_b": 0.0}  # no mixer layers: nothing of that part to keep
    # exact names of two of four layers' attention (Llama 4 lists every layer's projections)
    f = ignored_fractions([f"language_model.model.layers.{i}.self_attn.q_proj" for i in (0, 1)],
                          four)
    assert f["attn"] == 0.5 and f["mlp"] == 0.0
    # a vision tower's "mlp.fc1" entries say nothing about the language model's MLPs
    scout = weight_bytes(normalize({**LLAMA31_8B, "quantization_config": {
        "quant_method": "compressed-tensors",
        "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"}}},
        "ignore": ["vision_model.model.layers.0.mlp.fc1", "re:.*self_attn.*", "lm_head"]}}), 2)
    assert (scout.linear, scout.mlp_bytes, scout.expert) == (2.0, 1.0, 1.0)


def test_meta_fp8_maverick_quantizes_only_the_routed_experts(capsys):
    # Meta's quantizer (llama-models llama4/quantization/loader.py): FP8 routed experts, the
    # rest 16-bit. Per GPU at TP8: 24 MoE layers x 128 experts x 3 x 5,120 x 8,192 / 8 at
    # 1 B; attention (48 layers), the dense (16,384) and shared (8,192) MLPs, the embedding
    # and LM head sharded at 2 B; the routers and norms whole on every rank
    d = _size_json(capsys, "llama-4-maverick-fp8", "--gpu", "h200", "-tp", "8",
                   "--vllm-version", "0.11.2")
    h = 5120
    expected = (24 * 128 * 3 * h * 8192 // 8
                + 48 * (2 * h * 5120 + 2 * h * 1024) // 8 * 2
                + 24 * 3 * h * (16384 + 8192) // 8 * 2
                + 24 * h * 128 * 2 + (48 * 2 * h + h) * 2 + 2 * (202048 * h // 8) * 2)
    # the vision tower, 16-bit and TP-split: 34 blocks of 4 x 1,408^2 + 2 x 1,408 x 5,632 with
    # 9 x 1,408 + 5,632 biases and norms; the patch (588 x 1,408) and 576 + 2 position/class
    # rows; the adapter 5,632 x 4,096 + 4,096^2 and the projector 4,096 x 5,120
    vh, vi = 1408, 5632
    tower = (34 * (4 * vh * vh + 2 * vh * vi + 9 * vh + vi) + 588 * vh + 578 * vh
             + vi * 4096 + 4096 * 4096 + 4096 * h)
    # FBGEMM FP8 keeps an fp32 scale per output row (`FBGEMMFp8LinearMethod`; the MoE
    # method's w13 [E, 2I, 1] and w2 [E, H, 1]): 24 x 128 x (2 x 8,192 / 8 + 5,120) x 4 B
    scales = 24 * 128 * (2 * 8192 // 8 + h) * 4
    assert d["weights_bytes_per_gpu"] - d["rope_cache_bytes"] == \
        expected + tower // 8 * 2 + scales
    assert expected == 51887974400 and scales == 88080384
    # the Red Hat sweep's 0.11.2 H200 TP8 starts logged 48.87 GiB: within 0.05 %
    assert abs(d["weights_bytes_per_gpu"] / (1 << 30) / 48.8685 - 1) < 0.0005


def test_exclude_list_shares_count_only_the_layers_that_have_the_part():
    # nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4's exclude_modules: the q/k/v/o of all 6
    # attention layers and the in/out projections of the 6 Mamba layers before them (of 23)
    from kvplan.core.params import ignored_fractions
    from kvplan.sources.resolve import resolve_model

    m = resolve_model("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4")
    excl = m.hf_quant_config["quantization"]["exclude_modules"]
    f = ignored_fractions(excl, normalize(m.config), globs=True)
    assert f["attn"] == 1.0 and f["expert"] == 0.0 and f["mlp"] == 0.0
    assert abs(f["state"] - 6 / 23) < 1e-12  # the Mamba layers are all the same size
    # Llama 4 Maverick: a shared expert (8,192 wide) in the 24 MoE layers, a dense MLP
    # (16,384) in the other 24; ignoring the shared experts leaves a third of the MLPs 16-bit
    mav = normalize(resolve_model("llama-4-maverick").config)
    assert abs(ignored_fractions(["re:.*shared_expert.*"], mav)["mlp"] - 1 / 3) < 1e-12
    assert ignored_fractions([r"re:.*feed_forward\.(gate|up|down)_proj"], mav)["mlp"] == 2 / 3


def test_modelopt_exclude_modules_weighted_within_mla():
    # nvidia/DeepSeek-V3.2-NVFP4 style: q_a, kv_a, q_b, kv_b and the indexer excluded (BF16),
    # o_proj and the experts NVFP4. MLA parts weigh by size: o_proj is 128 x 128 x 7,168.
    names = [f"model.layers.{i}.self_attn.{m}" for i in range(61) for m in (
        "q_a_proj", "kv_a_proj_with_mqa", "q_b_proj", "kv_b_proj", "indexer*")]
    wb = weight_bytes(normalize(DEEPSEEK_V3), 2, hf_quant={"quantization": {
        "quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ["lm_head", *names]}})
    nvfp4 = 0.5 + 1 / 16
    q_b, kv_b, o = 1536 * 128 * 192, 512 * 128 * 256, 128 * 128 * 7168
    assert abs(wb.linear - ((q_b + kv_b) * 2 + o * nvfp4) / (q_b + kv_b + o)) < 1e-9
    assert wb.repl_bytes == 2.0 and wb.kv_b_bytes == 2.0 and wb.expert == nvfp4


def test_mla_keeps_a_dequantized_kv_b_copy_in_v1():
    # `MLACommonImpl.process_weights_after_loading`: an FP8 kv_b_proj is dequantized into a
    # 16-bit copy per layer: 16 local heads x 512 x (128 + 128) x 2 B x 61 layers at TP8
    cfg = {**DEEPSEEK_V3, "quantization_config": {"quant_method": "fp8",
                                                  "weight_block_size": [128, 128]}}
    h200 = Gpu("h200", "NVIDIA H200", 143771 << 20, "9.0")

    def weights(version, c=cfg):
        return size(Model("m", c), h200, EngineArgs(tensor_parallel_size=8, max_model_len=4096,
                                                    kv_cache_memory_bytes=1 << 30),
                    version).budget.weights

    # (0.6.6 is the first release whose registry lists DeepseekV3ForCausalLM)
    assert weights("0.11") - weights("0.6.6") == 61 * 16 * 512 * 256 * 2 == 255852544
    # q_a / kv_a are FP8 linears: 1 byte each, whole on every rank
    qa_kva = 61 * 7168 * (1536 + 512 + 64)
    bf16_cfg = {**DEEPSEEK_V3, "torch_dtype": "bfloat16"}
    assert weights("0.6.6", bf16_cfg) - weights("0.6.6") > qa_kva  # 16-bit: q_a/kv_a at 2 B


def test_mistral_native_pixtral_tower_is_whole_on_every_rank_012_to_019(capsys):
    # Real 0.13.0 H200 starts of mistralai/Ministral-3-14B-Reasoning-2512 logged "Model
    # loading took" 7.208 GiB at TP4 and 4.0329 GiB at TP8: the 0.82 GiB Pixtral tower on
    # every rank (Mistral's format, `VisionTransformer` of nn.Linear)
    def w(tp, version):
        d = _size_json(capsys, "mistralai/Ministral-3-14B-Reasoning-2512", "--gpu", "h200",
                       "-tp", str(tp), "--max-model-len", "8192", "--vllm-version", version)
        return d["weights_bytes_per_gpu"] / (1 << 30)

    assert abs(w(4, "0.13.0") / 7.208 - 1) < 0.02
    assert abs(w(8, "0.13.0") / 4.0329 - 1) < 0.02
    # 0.11 read config.json first; 0.20.2's Mistral-format tower is TP-parallel
    assert w(8, "0.11.2") < w(8, "0.13.0") - 0.6 and w(8, "0.20.2") < w(8, "0.13.0") - 0.6


GIB = 1 << 30


def _nemotron(capsys, model, version, tp=1):
    return _size_json(capsys, model, "--gpu", "h200", "-tp", str(tp), "--vllm-version", version,
                      "--kv-cache-dtype", "fp8", "--max-model-len", "8192",
                      "--gpu-memory-utilization", "0.92")


def test_flashinfer_fp8_moe_pads_non_gated_experts_to_128_rows(capsys):
    # ModelOpt FP8 (static per-tensor) experts run on FlashInfer's CUTLASS MoE on Hopper from
    # 0.16; `prepare_fp8_moe_layer_for_fi` pads the intermediate to 16 rows, 128 for
    # Nemotron-H's non-gated relu2 experts from 0.17. Nano: 1,856 -> 1,920 rows of w1 and w2,
    # 23 MoE layers x 128 experts x 64 x 2,688 x 1 B each
    old = _nemotron(capsys, "nemotron-3-nano-fp8", "0.16.0")
    new = _nemotron(capsys, "nemotron-3-nano-fp8", "0.18.0")
    # 0.16 also kept the router in fp32 (`ReplicatedLinear(params_dtype=torch.float32)`);
    # 0.17+ `GateLinear` keeps bf16 on Hopper: 23 x 128 x 2,688 x 2 B less
    assert new["weights_bytes_per_gpu"] - old["weights_bytes_per_gpu"] == \
        23 * 128 * 64 * 2688 * 2 - 23 * 128 * 2688 * 2 == 1012924416 - 15826944
    # the Red Hat sweep's H200 loads: 30.52 GiB (0.13-0.16) and 31.40 GiB (0.18-0.20); the
    # rest is the caching allocator's rounding and 0.16's fp32 router (not modelled)
    assert abs(old["weights_bytes_per_gpu"] / GIB - 30.52) < 0.11
    assert abs(new["weights_bytes_per_gpu"] / GIB - 31.40) < 0.04
    # no rotary table: `NemotronHAttention` has no rotary embedding
    assert new["rope_cache_bytes"] == 0


def test_nemotron_super_latent_projections_are_whole_on_every_rank(capsys):
    # fc1/fc2_latent_proj are ReplicatedLinear and BF16: 40 MoE layers x 2 x 4,096 x 1,024
    # x 2 B on every GPU; experts padded 1,344 -> 1,408 rows per rank at TP2. The 0.17.1-0.20
    # TP2 H200 starts load 59.91 GiB per GPU
    tp2 = _nemotron(capsys, "nemotron-3-super-fp8", "0.19.0", tp=2)
    assert abs(tp2["weights_bytes_per_gpu"] / GIB - 59.91) < 0.005
    from kvplan.core.arch import normalize
    from kvplan.core.params import count_params
    from kvplan.sources.resolve import resolve_model

    layers = count_params(normalize(resolve_model("nemotron-3-super-fp8").config)).layers
    moe = [lp for lp in layers if lp.expert]
    assert len(moe) == 40
    whole = 4096 + 4096 * 512 + 2 * 4096 * 1024  # the layer's norm, the router, the latents
    assert all(lp.replicated == whole for lp in moe[:-1])
    assert moe[-1].replicated == whole + 4096  # the final norm
    assert all(lp.mlp == 2 * 4096 * 5376 for lp in moe)  # the shared expert, TP-split


def test_flashinfer_moe_fp8_off_runs_triton_without_the_padding(capsys):
    # VLLM_USE_FLASHINFER_MOE_FP8=0 removes FlashInfer from `select_fp8_moe_backend`: Triton,
    # whose weights are not re-laid-out, and its workspaces instead of FlashInfer's two M x K
    on = _nemotron(capsys, "nemotron-3-super-fp8", "0.19.0", tp=2)
    off = _size_json(capsys, "nemotron-3-super-fp8", "--gpu", "h200", "-tp", "2",
                     "--vllm-version", "0.19.0", "--kv-cache-dtype", "fp8", "--max-model-len",
                     "8192", "--gpu-memory-utilization", "0.92",
                     "--env", "VLLM_USE_FLASHINFER_MOE_FP8=0")
    # 40 MoE layers x 512 experts x (1,408 - 1,344) rows x 1,024 x (w1 + w2) x 1 B
    assert on["weights_bytes_per_gpu"] - off["weights_bytes_per_gpu"] == \
        40 * 512 * 64 * 1024 * 2 == 5 << 29
    assert (on["moe_kernel"], off["moe_kernel"]) == ("flashinfer", "modular")
    assert off["moe_workspace_bytes"] == 8192 * 22 * (1344 + 1344) * 2
    # 0.24+ no longer read the variable: the padding stays, with a note
    late = _size_json(capsys, "nemotron-3-super-fp8", "--gpu", "h200", "-tp", "2",
                      "--vllm-version", "0.25", "--env", "VLLM_USE_FLASHINFER_MOE_FP8=0")
    assert late["moe_kernel"] == "flashinfer"
    assert any("no longer reads VLLM_USE_FLASHINFER_MOE_FP8" in n for n in late["notes"])


def test_gemma4_edge_weights_follow_what_vllm_allocates(capsys):
    # google/gemma-4-E2B, --language-model-only, on an L4 with vLLM 0.21.0 loaded 8.89 GiB.
    # Counted as gemma4.py builds it: the 20 KV-sharing layers keep q/o (and, to 0.29, K/V),
    # every layer has a per-layer-input gate and projection (2 x 1,536 x 256), and the
    # wrapper allocates its per_layer_embeddings buffer [2,048 tokens x 35 x 256] at load
    def e2b(version, *extra):
        return _size_json(capsys, "google/gemma-4-E2B", "--gpu", "l4", "--vllm-version",
                          version, "--max-model-len", "8192", *extra)

    d = e2b("0.21.0", "--language-model-only")
    assert d["max_num_batched_tokens"] == 2048
    assert abs(d["weights_bytes_per_gpu"] / GIB - 8.89) < 0.02
    # K/V of the sharing layers (16 sliding at head 256, 4 full at 512, one KV head, and
    # k_norm): allocated to 0.29, not from 0.30
    kv = 2 * 1536 * (16 * 256 + 4 * 512) + (16 * 256 + 4 * 512)
    assert e2b("0.29.0", "--language-model-only")["weights_bytes_per_gpu"] - \
        e2b("0.30.0", "--language-model-only")["weights_bytes_per_gpu"] == 2 * kv
    # an image-and-audio limit of 0 keeps the vision tower: video still allows 999 items
    full = e2b("0.21.0")["weights_bytes_per_gpu"]
    no_audio = e2b("0.21.0", "--limit-mm-per-prompt", '{"image": 0, "audio": 0}')
    none = e2b("0.21.0", "--limit-mm-per-prompt", '{"image": 0, "video": 0, "audio": 0}')
    assert none["weights_bytes_per_gpu"] == d["weights_bytes_per_gpu"]
    from kvplan.core.arch import normalize
    from kvplan.sources.resolve import resolve_model

    pc = count_params(normalize(resolve_model("google/gemma-4-E2B").config))
    assert full - no_audio["weights_bytes_per_gpu"] == pc.audio * 2
    # the tower's parameters and the allocator blocks its 16 blocks' projections round up to
    assert no_audio["weights_bytes_per_gpu"] - d["weights_bytes_per_gpu"] == pc.vision * 2 + (
        7 << 20)


def test_mm_limits_parse_like_vllm():
    from kvplan.core.mm import towers_kept
    from kvplan.errors import BadInput
    from kvplan.units import parse_mm_limits

    assert parse_mm_limits('{"image": {"count": 0}, "video": 2}') == {"image": 0, "video": 2}
    assert parse_mm_limits("image=0,video=0") == {"image": 0, "video": 0}
    with pytest.raises(BadInput):
        parse_mm_limits('{"image": "many"}')
    gemma4 = ["Gemma4ForConditionalGeneration"]
    assert towers_kept(gemma4, {"image": 0, "audio": 0}, False) == (True, False)
    assert towers_kept(gemma4, {"image": 0, "video": 0}, False) == (False, True)
    assert towers_kept(["Gemma3ForConditionalGeneration"], {"image": 0}, False) == (False, True)
    assert towers_kept(gemma4, None, True) == (False, False)


def test_trtllm_nvfp4_moe_pads_rows_and_hidden_on_blackwell(capsys):
    # NVFP4 experts run on FlashInfer's TRT-LLM kernels first on the SM100 family; the re-laid
    # copies pad the intermediate of non-gated experts to 128 rows (0.17+) and, from 0.20, the
    # hidden side to 256. Nemotron-3-Nano NVFP4 at TP1 on a B200: 1,856 -> 1,920 rows, and
    # 2,688 -> 2,816 hidden at 0.20: 23 layers x 128 experts x 2 tensors x rows x hidden x
    # (0.5 + 1/16) B
    def weights(version, gpu="b200"):
        return _size_json(capsys, "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4", "--gpu", gpu,
                          "--vllm-version", version)["weights_bytes_per_gpu"]

    per = 23 * 128 * 2 * (0.5 + 1 / 16)
    # 0.16: no TRT-LLM path for non-gated NVFP4 experts yet, and the router still fp32
    base = weights("0.16.0") - 23 * 128 * 2688 * 2
    assert abs(weights("0.19.0") - base - per * 64 * 2688) < 64
    assert abs(weights("0.20.2") - base - per * (1920 * 2816 - 1856 * 2688)) < 64
    # Hopper: no TRT-LLM path, only the router's fp32 -> bf16
    assert weights("0.16.0", "h200") - weights("0.20.2", "h200") == 23 * 128 * 2688 * 2


def test_checkpoint_mtp_modules_are_not_loaded():
    # DeepSeek-V3's 688,586,727,753 B include the 14B-parameter MTP module (layer 61 with its
    # own embedding and shared head), which vLLM skips without MTP drafting: the exact size
    # now rescales to the 61-layer estimate (79.53 GiB per GPU at TP8), not 2.3 % above it
    from dataclasses import replace

    from kvplan.sources.resolve import resolve_gpu, resolve_model

    h200 = resolve_gpu("h200")
    # NVIDIA's NVFP4 export lists its 16-bit modules (GDN, attention, shared experts, MTP,
    # vision) under config.json's `ignore`, which vLLM's ModelOpt config reads as
    # exclude_modules: with both, its 83,474,870,752 B scale to the estimate (8.4 % above
    # before, at 33.52 against 36.59 GiB per GPU)
    for name, tp in (("deepseek-ai/DeepSeek-V3", 8), ("Qwen/Qwen3.5-122B-A10B", 4),
                     ("nvidia/Qwen3.5-122B-A10B-NVFP4", 2)):
        m = resolve_model(name)
        exact = size(m, h200, EngineArgs(tensor_parallel_size=tp, max_model_len=8192), "0.20")
        est = size(replace(m, weights_bytes=None), h200,
                   EngineArgs(tensor_parallel_size=tp, max_model_len=8192), "0.20")
        assert abs(exact.budget.weights / est.budget.weights - 1) < 0.001


def test_gpt_oss_hopper_experts_keep_scales_twice_until_024():
    # Hopper's Triton MXFP4 path pads only the intermediate (to 64) and, up to 0.24, keeps
    # the original block scales beside the swizzled ones: 1 + (1/32) / (0.5 + 1/32)
    from kvplan.core.arch import normalize
    from kvplan.core.params import expert_padding
    from kvplan.sources.resolve import resolve_model

    arch = normalize(resolve_model("openai/gpt-oss-120b").config)
    assert expert_padding(arch, 1, cc="9.0") == 1.0  # 2,880 is a multiple of 64
    assert expert_padding(arch, 1, cc="9.0", scales_kept=True) == 0.5625 / 0.53125
    assert expert_padding(arch, 4, cc="9.0") == 768 / 720  # 720 a rank -> 768
    assert expert_padding(arch, 1, cc="10.0") == 3072 / 2880 * 2944 / 2880


def test_config_json_quantization_config_hides_hf_quant_config(capsys):
    # vLLM reads hf_quant_config.json only when config.json has no quantization_config
    # (`transformers_utils/config.py get_config`). The catalog's nvidia/Qwen3.6-35B-A3B-NVFP4
    # config.json (ModelOpt 0.37.0 export) declares no KV scheme while its hf_quant_config.json
    # (0.44.0) says FP8: `auto` is the model's bf16, as it was before the file was read (0.19).
    for v in ("0.19", "0.33"):
        d = _size_json(capsys, "nvidia/Qwen3.6-35B-A3B-NVFP4", "--gpu", "b200",
                       "--max-model-len", "8192", "--vllm-version", v)
        assert d["kv_cache_dtype"] == "bfloat16"
        assert any("declares an fp8 KV cache" in n for n in d["notes"])
    # 10 full-attention layers x 2 KV heads x 256 x (K+V) x 2 B
    assert d["kv_bytes_per_token_per_gpu"] == 10 * 2 * 256 * 2 * 2
    # the 27B's config.json carries the FP8 kv_cache_scheme itself: fp8, no note
    d = _size_json(capsys, "nvidia/Qwen3.6-27B-NVFP4", "--gpu", "b200", "--max-model-len", "8192")
    assert d["kv_cache_dtype"] == "fp8"
    assert not any("hf_quant_config" in n for n in d["notes"])


def test_quant_file_rules():
    from kvplan.core.dtypes import quant_file_notes

    fp8_file = {"producer": {"name": "modelopt", "version": "0.29.0"},
                "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}}
    alone = Model("m", dict(LLAMA31_8B), hf_quant_config=fp8_file)
    assert alone.quant_file is fp8_file and alone.quant_file_for_kv is fp8_file
    top = {"quant_method": "modelopt", "quant_algo": "FP8"}
    both = Model("m", {**LLAMA31_8B, "quantization_config": top}, hf_quant_config=fp8_file)
    assert both.quant_file is None and both.quant_file_for_kv is None
    # modelopt_mixed without its per-layer map: the weight loader falls through to the file
    # (`get_quant_config`), the KV scheme is still config.json's
    mixed = {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION"}
    m = Model("m", {**LLAMA31_8B, "quantization_config": mixed}, hf_quant_config=fp8_file)
    assert m.quant_file is fp8_file and m.quant_file_for_kv is None
    # a config.json form with no quant_method and no nested `quantization` is not ModelOpt
    # to vLLM (`_normalize_quantization_config`)
    bare = {"quant_algo": "FP8", "kv_cache_scheme": "FP8", "producer": {"name": "modelopt"}}
    assert "without quant_method" in quant_file_notes(bare, fp8_file, None, "auto",
                                                      nvfp4=True)[0]
    assert quant_file_notes(top, fp8_file, None, "fp8", nvfp4=True) == []
    assert quant_file_notes(top, fp8_file, "fp8", "auto", nvfp4=True) == []
    assert quant_file_notes(None, fp8_file, "fp8", "auto", nvfp4=True) == []


def test_group_activation_ordering_is_refused_from_030():
    # `normalize_and_validate_gptq_desc_act` / compressed-tensors actorder (0.30-0.33 wheels)
    import pytest as _pt

    from kvplan.errors import BadInput

    gptq = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": True}
    for q, says in ((gptq, "desc_act=True"),
                    ({**gptq, "desc_act": False, "dynamic": {r"+:.*down.*": {"desc_act": True}}},
                     "dynamic rule"),
                    ({"quant_method": "compressed-tensors", "config_groups": {"g": {
                        "targets": ["Linear"], "weights": {"num_bits": 4, "type": "int",
                                                           "group_size": 128,
                                                           "actorder": "group"}}}},
                     "actorder='group'")):
        m = Model("q", {**LLAMA31_8B, "quantization_config": q})
        with _pt.raises(BadInput, match=says):
            size(m, H100, EngineArgs(max_model_len=8192), "0.30")
        assert size(m, H100, EngineArgs(max_model_len=8192), "0.29").fits
    # one group per output channel makes the ordering a no-op; static ordering is kept
    for q in ({**gptq, "group_size": -1},
              {"quant_method": "compressed-tensors", "config_groups": {"g": {
                  "targets": ["Linear"], "weights": {"num_bits": 4, "type": "int",
                                                     "group_size": 128,
                                                     "actorder": "static"}}}}):
        assert size(Model("q", {**LLAMA31_8B, "quantization_config": q}), H100,
                    EngineArgs(max_model_len=8192), "0.33").fits


def test_block_fp8_on_marlin_keeps_group_scales():
    # `prepare_fp8_layer_for_marlin` / `prepare_fp8_moe_layer_for_marlin`: the 128 x 128 block
    # scales become (K/128, N) bf16 group scales, 2/128 B a weight. Qwen3-30B-A3B-FP8 on an
    # A100 (linears and experts on Marlin): re-derived from the 0.33 wheel 31,644,872,704 B
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    m = resolve_model("Qwen/Qwen3-30B-A3B-FP8")
    on = {g: size(m, resolve_gpu(g), EngineArgs(max_model_len=8192), "0.33").budget.weights
          for g in ("a100-80gb", "l40s", "h100")}
    assert abs(on["a100-80gb"] / 31_644_872_704 - 1) < 0.001
    # block FP8 on Hopper keeps its block scales; on Ada only the attention linears (0.29+)
    assert on["a100-80gb"] - on["h100"] > 0.014 * on["h100"]
    assert 0 < on["l40s"] - on["h100"] < 16 << 20
    old = size(m, resolve_gpu("l40s"), EngineArgs(max_model_len=8192), "0.28").budget.weights
    assert old == on["h100"]


def test_mxfp4_expert_padding_by_platform_and_release():
    from kvplan.core.params import expert_padding
    from kvplan.sources.resolve import resolve_model

    oss = normalize(resolve_model("openai/gpt-oss-120b").config)  # hidden = intermediate = 2,880
    sq = (3072 / 2880) ** 2
    # ROCm: both dims to 256 (0.11, 0.19+), to 128 on gfx942 in 0.12-0.18 (2,944)
    assert expert_padding(oss, 1, vendor="amd", release=(0, 33)) == sq
    assert expert_padding(oss, 1, vendor="amd", release=(0, 14)) == (2944 / 2880) ** 2
    assert expert_padding(oss, 1, cc="gfx950", vendor="amd", release=(0, 14)) == sq
    # Blackwell TRT-LLM: hidden to 256; intermediate to 256 before 0.27, then 128 (2,944)
    assert expert_padding(oss, 1, cc="10.0", release=(0, 26)) == sq
    assert expert_padding(oss, 1, cc="10.0", release=(0, 27)) == 3072 / 2880 * 2944 / 2880
    assert expert_padding(oss, 1, cc="9.0") == 1.0  # Hopper: 2,880 is a multiple of 64


def test_gpt_oss_120b_on_mi300x_pads_experts_and_uses_openai_triton(capsys):
    d = _size_json(capsys, "openai/gpt-oss-120b", "--gpu", "mi300x")
    h100 = _size_json(capsys, "openai/gpt-oss-120b", "--gpu", "h100")
    # 36 x 128 experts of 3 x 3,072^2 at 0.5 + 1/32 B (and 3 x 3,072 bf16 biases) against
    # 3 x 2,880^2: 8,397,914,112 B more than the unpadded Hopper layout (to 0.06 %: kvplan
    # scales the parts to the checkpoint's exact size), whose own fp32 biases and padded
    # swizzled scales hold 64,000 B more an expert and layer (`mxfp4_hopper_extra`); ROCm
    # widens its padded biases to fp32 too: (2 x 3,072 + 3,072) x 2 B an expert and layer
    pad = d["weights_bytes_per_gpu"] - h100["weights_bytes_per_gpu"] + 64000 * 128 * 36 \
        - 18432 * 128 * 36
    assert abs(pad / 8397914112 - 1) < 0.0006
    # (0.33's warm-up sampler pass without FlashInfer: 1.5 logits buffers + 304 cached rows)
    assert d["moe_kernel"] == "oai_triton" and d["kv_cache_tokens"] == 2274301


def test_jamba_experts_only_on_the_expert_period_layers(capsys):
    from kvplan.core.params import _is_moe_layer
    from kvplan.sources.resolve import resolve_model

    t = resolve_model("ai21labs/AI21-Jamba-1.5-Mini").config
    # transformers `JambaConfig.layers_num_experts`: experts where i % 2 == 1
    assert [i for i in range(32) if _is_moe_layer(t, i, 16)] == list(range(1, 32, 2))
    d = _size_json(capsys, "ai21labs/AI21-Jamba-1.5-Mini", "--gpu", "h100", "-tp", "2")
    # 16 MoE layers of 16 experts (3 x 4,096 x 14,336) and 16 dense MLPs, and 28 Mamba1
    # mixers as `MambaMixer` builds them (x_proj, dt_proj, an fp32 A; a helper's count from the
    # 0.33 wheel): 103,147,986,688 B in bf16 (all 32 layers with experts: 78.75 GiB more)
    assert d["weights_total_bytes"] == 103_147_986_688 and d["fits"]


def test_bf16_experts_pad_to_128_rows_on_blackwell_trtllm(capsys):
    # Qwen3-30B-A3B at TP4: 768 / 4 = 192 rows -> 256 (`align_moe_weights_for_fi`, gated from
    # 0.29): 48 layers x 128 experts x 3 x 2,048 x 64 rows x 2 B = 4.5 GiB more a GPU
    new = _size_json(capsys, "qwen3-30b-a3b", "--gpu", "b200", "-tp", "4")
    old = _size_json(capsys, "qwen3-30b-a3b", "--gpu", "b200", "-tp", "4", "--vllm-version",
                     "0.28")
    grown = new["weights_bytes_per_gpu"] - old["weights_bytes_per_gpu"]
    assert abs(grown - 48 * 128 * 3 * 2048 * 64 * 2) < 2 ** 20
    # (6,132,672 with the M x K workspace the monolithic TRT-LLM class no longer keeps)
    assert new["kv_cache_tokens"] == 6135408
    # EPLB leaves TRT-LLM, so no padding
    eplb = _size_json(capsys, "qwen3-30b-a3b", "--gpu", "b200", "-tp", "4",
                      "--enable-expert-parallel", "--enable-eplb")
    assert eplb["weights_bytes_per_gpu"] < new["weights_bytes_per_gpu"]


def test_gemma4_experts_are_not_under_the_mlp(capsys):
    # NVIDIA's Gemma-4-26B-A4B-NVFP4 excludes `layers.N.mlp*`; vLLM names the experts
    # `layers.N.experts`, so they stay NVFP4 (the dense MLP and attention are 16-bit)
    from kvplan.core.params import weight_bytes
    from kvplan.sources.resolve import resolve_model

    m = resolve_model("nvidia/Gemma-4-26B-A4B-NVFP4")
    wb = weight_bytes(normalize(m.config), 2, None, m.quant_file)
    assert wb.expert == 0.5 + 1 / 16 and wb.mlp_bytes == 2
    d = _size_json(capsys, "nvidia/Gemma-4-26B-A4B-NVFP4", "--gpu", "b200")
    assert round(d["weights_bytes_per_gpu"] / (1 << 30), 2) == 17.89


def test_openai_triton_mxfp4_scratch_is_per_call_without_dp_or_ep(capsys):
    # `OAITritonMxfp4ExpertsMonolithic` bypasses the shared workspace (no DP, EP or EPLB):
    # its scratch is per call, so the sampler point no longer carries it (+3.2 % tokens)
    d = _size_json(capsys, "openai/gpt-oss-120b", "--gpu", "h100")
    # (173,398 tokens: the Triton path's fp32 biases and padded scales, 0.27 GiB, count too)
    assert d["moe_kernel"] == "oai_triton" and d["kv_cache_tokens"] == 173398


def test_routers_held_in_fp32_by_model_and_release():
    from kvplan.core.versions import VllmVersion

    v = VllmVersion.of
    assert v("0.18").fp32_router_model("minimax_m2", "9.0")  # on every platform
    # review 27: GLM-4 MoE's fp32 nn.Linear from 0.10.1 (GateLinear from 0.31), AFMoE's
    # from 0.11.1, ERNIE 4.5's from 0.11.1 (the model dtype in 0.9.2-0.11.0), Step-3.5's
    # FP32ReplicatedLinear from 0.15.1, MiniMax-Text-01 in every release, HY-V3 from 0.20,
    # HY-V4 from 0.29
    assert v("0.10.1").fp32_router_model("glm4_moe", "9.0")
    assert not v("0.10.0").fp32_router_model("glm4_moe", "9.0")
    assert v("0.11.1").fp32_router_model("afmoe", "9.0")
    assert v("0.11.1").fp32_router_model("ernie4_5_moe", "9.0")
    assert not v("0.11.0").fp32_router_model("ernie4_5_moe", "9.0")
    assert v("0.15.1").fp32_router_model("step3p5", "9.0")
    assert v("0.23").fp32_router_model("minimax_text_01", "9.0")
    assert v("0.20").fp32_router_model("hy_v3", "9.0") and not v("0.19").fp32_router_model(
        "hy_v3", "9.0")
    assert v("0.29").fp32_router_model("hy_v4", "9.0")
    # by the config: Ling 2.0's router_dtype, the Ling/Ring hybrids unless it says otherwise,
    # MiMo-V2-Flash and Sarvam-MLA by their (float32) defaults
    assert v("0.20").fp32_router_model("bailing_moe", "9.0", config={"router_dtype": "fp32"})
    assert not v("0.20").fp32_router_model("bailing_moe", "9.0", config={})
    assert v("0.18").fp32_router_model("bailing_hybrid", "9.0", config={})
    assert not v("0.18").fp32_router_model("bailing_hybrid", "9.0", config={"router_dtype": "bf16"})
    assert v("0.28").fp32_router_model("bailing_hybrid", "9.0", config={
        "router_dtype": "bf16", "architectures": ["BailingMoeV3ForCausalLM"]})
    assert not v("0.20").fp32_router_model("mimo_v2_flash", "9.0",
                                           config={"moe_router_dtype": None})
    assert v("0.20").fp32_router_model("sarvam_mla", "9.0", config={})
    assert not v("0.31").fp32_router_model("sarvam_mla", "9.0", config={})
    assert v("0.15").fp32_router_model("glm4_moe_lite", "9.0")
    assert v("0.15.1").fp32_router_model("step3p7", "9.0")
    assert v("0.14").fp32_router_model("mimo_v2_flash", "9.0", config={})
    # Nemotron-H: the model dtype on SM90 from 0.17 (its specialised kernels)
    assert not v("0.18").fp32_router_model("nemotron_h", "9.0")
    assert v("0.18").fp32_router_model("nemotron_h", "8.0")
    assert not v("0.33").fp32_router_model("llama4_text", "8.0")


def test_awq_and_gptq_bytes_as_the_kernel_holds_them():
    # Marlin frees a symmetric GPTQ layer's packed zeros (0.5 + 2/g held); Machete (cc 9.0)
    # keeps GPTQ as loaded and turns AWQ's zeros into an fp16 [K/g, N] tensor (0.5 + 4/g,
    # from 0.19; Marlin before); AWQ on Marlin keeps the checkpoint's 0.5 + 2.5/g
    from kvplan.core.params import wna16_held_delta

    def arch(cfg, **q):
        return normalize({**cfg, "quantization_config": {"bits": 4, "group_size": 128, **q}})

    gptq, awq = arch(LLAMA31_8B, quant_method="gptq", sym=True), arch(LLAMA31_8B,
                                                                       quant_method="awq")
    z = 0.5 / 128
    assert wna16_held_delta(gptq, "8.0", "nvidia", (0, 30), 1) == (-z, 0.0)
    assert wna16_held_delta(gptq, "9.0", "nvidia", (0, 30), 1) == (0.0, 0.0)
    assert wna16_held_delta(awq, "8.9", "nvidia", (0, 30), 1) == (0.0, 0.0)
    assert wna16_held_delta(awq, "9.0", "nvidia", (0, 30), 1) == (1.5 / 128, 0.0)
    assert wna16_held_delta(awq, "9.0", "nvidia", (0, 18), 1) == (0.0, 0.0)
    assert wna16_held_delta(gptq, "gfx942", "amd", (0, 30), 1) == (0.0, 0.0)
    # Qwen3-30B-A3B-GPTQ-Int4 (moe_intermediate 768): Marlin MoE keeps the zeros in the model
    # dtype at N/8 columns to 0.26 and as int32 from 0.27; at TP4 / TP8 (192 / 96 a rank)
    # MoeWNA16 halves the group to 64 / 32 and keeps no zeros
    from kvplan.sources.resolve import resolve_model

    moe = normalize(resolve_model("Qwen/Qwen3-30B-A3B-GPTQ-Int4").config)
    assert wna16_held_delta(moe, "12.0", "nvidia", (0, 26), 1)[1] == -z / 2
    assert wna16_held_delta(moe, "12.0", "nvidia", (0, 28), 2)[1] == 0.0
    assert wna16_held_delta(moe, "12.0", "nvidia", (0, 28), 4)[1] == 2 / 64 - 2.5 / 128
    assert wna16_held_delta(moe, "12.0", "nvidia", (0, 28), 8)[1] == 2 / 32 - 2.5 / 128
    # on one RTX 5090 at 0.28 vLLM holds 15,528,886,272 B of experts and attention (28.99 G
    # expert and 0.91 G attention weights at 0.5 + 2.5/128, the attention's zeros freed)
    from kvplan.core.sizing import EngineArgs, size
    from kvplan.sources.resolve import resolve_gpu

    r = size(resolve_model("Qwen/Qwen3-30B-A3B-GPTQ-Int4"), resolve_gpu("rtx-5090"),
             EngineArgs(max_model_len=2048), "0.28")
    experts, attn = 48 * 128 * 3 * 2048 * 768, 48 * (2048 * 5120 + 4096 * 2048)
    assert experts * (0.5 + 2.5 / 128) + attn * (0.5 + 2 / 128) == 15528886272
    # + embedding and LM head, routers and norms (48 x 266,496 + 2,048 parameters), rotary cache
    rest = 2 * 151936 * 2048 * 2 + (48 * 266496 + 2048) * 2 + 40960 * 128 * 2
    assert r.budget.weights == 15528886272 + rest
    # `-q gptq` takes ExLlama, which keeps the zero points: Mistral-7B-GPTQ's 6,979,321,856
    # linear weights hold 27,262,976 B more than on gptq_marlin
    mistral, a100 = resolve_model("TheBloke/Mistral-7B-Instruct-v0.2-GPTQ"), resolve_gpu("a100")
    auto, forced = (size(mistral, a100, EngineArgs(max_model_len=4096, quantization=q,
                                                   dtype="float16"), "0.20")
                    for q in (None, "gptq"))
    assert forced.budget.weights - auto.budget.weights == 6979321856 * 0.5 / 128
    # GPTQConfig's kernels take float16 only up to 0.21 (`get_supported_act_dtypes`), and the
    # checkpoint's config says bfloat16
    with pytest.raises(BadInput, match="runs gptq only in float16, not bfloat16"):
        size(mistral, a100, EngineArgs(max_model_len=4096, quantization="gptq"), "0.20")


def test_allocator_block_rounding_in_the_load_figure():
    # "Model loading took" is the caching allocator's allocated bytes: a tensor over 10 MiB
    # takes a segment of its own rounded up to 2 MiB, and a remainder of 1 MiB or less is not
    # split off. Qwen2.5-7B (hidden 3584) per layer: qkv 31.5 MiB -> 32, gate_up 259 -> 260,
    # down 129.5 -> 130 (o_proj's 24.5 MiB splits off its 1.5 MiB rest): 2 MiB a layer, and
    # 0.5 MiB each for the 1,039.5 MiB embedding and LM head. Checkpoint 15,231,233,024 B +
    # rotary cache 8,388,608 + 59,768,832 = 14.2488 GiB, as vLLM 0.10.1 logs Qwen2-7B
    from kvplan.core.sizing import EngineArgs, size
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    h100 = resolve_gpu("h100")
    r = size(resolve_model("Qwen/Qwen2.5-7B-Instruct"), h100, EngineArgs(max_model_len=8192),
             "0.19")
    assert r.load_extra_bytes == (28 * 2 + 1) << 20
    assert r.budget.weights == 15231233024 + 8388608 + (57 << 20) == 15299390464
    # hidden 4096: every tensor a 2 MiB multiple, nothing held beyond it
    assert size(resolve_model("meta-llama/Llama-3.1-8B-Instruct"), h100,
                EngineArgs(max_model_len=8192), "0.19").load_extra_bytes == 0


def test_mxfp4_hopper_triton_layout_bytes():
    # gpt-oss-120b per expert and layer at TP1, 0.26+: w13 scales [5,888 x 92] for
    # [5,760 x 90] (23,296 B), w2 [3,072 x 92] for [2,880 x 90] (23,424 B), biases widened
    # to fp32 ((5,760 + 2,880) x 2 B): 64,000 B; before 0.26 the group count stays 90
    from kvplan.core.params import mxfp4_hopper_extra
    from kvplan.sources.resolve import resolve_model

    oss = normalize(resolve_model("openai/gpt-oss-120b").config)
    assert mxfp4_hopper_extra(oss, 1, (0, 33)) == 23296 + 23424 + 17280 == 64000
    assert mxfp4_hopper_extra(oss, 1, (0, 25)) == 46080
    # at TP2 the 1,440-row intermediate pads to 1,472, w2's 736-byte rows to 32-byte ones
    assert mxfp4_hopper_extra(oss, 2, (0, 33)) * 128 * 36 == 204079104


def test_mxfp4_fp32_biases_on_blackwell_and_rocm():
    # FlashInfer TRT-LLM (SM100) and ROCm's Triton / AITER kernels widen the padded w13 / w2
    # biases to fp32: gpt-oss-120b at TP1 on SM100 from 0.27 (2,880 -> 2,944 rows, hidden
    # 2,880 -> 3,072), before 0.27 (rows to 3,072), on ROCm (both to 3,072); Marlin keeps bf16
    from kvplan.core.params import mxfp4_bias_extra
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    oss = normalize(resolve_model("openai/gpt-oss-120b").config)
    assert mxfp4_bias_extra(oss, 1, "10.0", "nvidia", (0, 33)) == (2 * 2944 + 3072) * 2
    assert mxfp4_bias_extra(oss, 1, "10.0", "nvidia", (0, 26)) == (2 * 3072 + 3072) * 2
    assert mxfp4_bias_extra(oss, 1, "gfx942", "amd", (0, 33)) == 18432
    assert mxfp4_bias_extra(oss, 1, "8.0", "nvidia", (0, 33)) == 0
    # on one B200 at 0.33: 17,920 B x 128 experts x 36 layers = 82,575,360 B more weights
    b200 = size(resolve_model("openai/gpt-oss-120b"), resolve_gpu("b200"), EngineArgs(), "0.33")
    assert b200.to_json()["weights_bytes_per_gpu"] == 70_793_942_285 + 82_575_360


def test_block_fp8_checkpoints_hold_fp32_block_scales(capsys):
    # `weight_scale_inv`: one fp32 scale per 128 x 128 block, kept by the Triton block-FP8
    # path; Qwen3-235B-A22B-FP8 at TP4 holds 59,196,971,520 B per GPU with the rotary cache
    # (a helper's count from the 0.33 wheel: 14,269,952 B of them scales)
    d = _size_json(capsys, "Qwen/Qwen3-235B-A22B-FP8", "--gpu", "h200", "-tp", "4", "--offline")
    assert d["weights_estimated"] and d["weights_bytes_per_gpu"] == 59_196_971_520


def test_marlin_mxfp4_workspace_on_padded_dims(capsys):
    # gpt-oss-20b on an L4 runs MXFP4 experts on Marlin, padded to 2,944 rows and a 3,072
    # hidden (`mxfp4_round_up_hidden_size_and_intermediate_size`); `MarlinExperts.
    # workspace_shapes` sizes M.k x max(N, K) + M.k x max(2N, K) on them: 2,048 tokens x 4
    # experts x (3,072 + 5,888) x 2 B (141,557,760 on the unpadded 2,880)
    d = _size_json(capsys, "openai/gpt-oss-20b", "--gpu", "l4", "--max-model-len", "32768",
                   "--offline")
    assert (d["moe_kernel"], d["moe_workspace_bytes"]) == ("modular", 8192 * (3072 + 5888) * 2)


def test_moonvit_position_table_and_projector():
    # Kimi-VL / Kimi-K2.5's MoonViT: a [64, 64, 1,152] position table and the patch-merging
    # projector (LayerNorm(1,152), Linear(4,608, 4,608), Linear(4,608, text hidden), biases)
    from kvplan.core.params import _vision_params
    from kvplan.sources.resolve import resolve_model

    vl = resolve_model("moonshotai/Kimi-VL-A3B-Instruct").config
    vc = dict(vl["vision_config"])
    extra = 64 * 64 * 1152 + 2 * 1152 + 4608 * 4608 + 4608 + 4608 * 2048 + 2048
    assert _vision_params(vc, 2048) - _vision_params(
        {k: v for k, v in vc.items() if k != "merge_kernel_size"}, 2048) == extra == 35398400


def test_replicated_projectors_stay_whole_on_every_rank():
    # vLLM splits MoonViT's blocks over TP but builds its projector from ReplicatedLinear:
    # Kimi-K2.5 (4 x 1,152 -> 4,608 -> 7,168, biases, LayerNorm) 54,277,888 parameters on
    # every GPU, so at TP8 each holds 7/8 x 108.6 MB more than a split count gave
    from kvplan.core.params import tower_whole
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    k25 = resolve_model("moonshotai/Kimi-K2.5")
    a = normalize(k25.config)
    m = 4 * 1152
    assert tower_whole(a.vision_config, a.mm_projector, a.hidden_size) == \
        2 * 1152 + m * m + m + m * 7168 + 7168 == 54_277_888
    # Mistral 3: the patch merger (nn.Linear 4,096 -> 1,024) and the norm; Gemma 3's
    # [1,152, 5,376] projection
    a = normalize(resolve_model("mistralai/Mistral-Small-3.1-24B-Instruct-2503").config)
    assert tower_whole(a.vision_config, a.mm_projector, a.hidden_size) == 1024 + 4096 * 1024
    a = normalize(resolve_model("google/gemma-3-27b-it").config)
    assert tower_whole(a.vision_config, a.mm_projector, a.hidden_size) == 1152 * 5376 + 1152

    def per_gpu(tp: int, mode: str = "weights") -> int:
        r = size(k25, resolve_gpu("h200"), EngineArgs(tensor_parallel_size=tp,
                                                      max_model_len=8192,
                                                      mm_encoder_tp_mode=mode), "0.33")
        return r.to_json()["weights_bytes_per_gpu"]
    # --mm-encoder-tp-mode data already holds the whole tower on every rank
    assert per_gpu(8, "data") - per_gpu(8) == (471_140_464 - 54_277_888) * 2 * 7 // 8


def _weights(model, gpu, version="0.33", **kw):
    """Weights on the most loaded GPU, less the rotary cache kvplan adds beside them."""
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    r = size(resolve_model(model), resolve_gpu(gpu), EngineArgs(**kw), version)
    return r.budget.weights - r.rope_cache_bytes


def test_uneven_expert_parallel_loads_the_busiest_rank():
    """review 24c F1: `determine_expert_map` gives the first E % ep ranks one more expert
    (0.10.1+), the last rank the whole remainder before; the busiest rank sets the pool."""
    def mixtral(dp: int) -> int:  # 8 experts over 2 x dp ranks
        return _weights("mistralai/Mixtral-8x7B-Instruct-v0.1", "h100", tensor_parallel_size=2,
                        data_parallel_size=dp, enable_expert_parallel=True)

    # 6 ranks: 2 experts on the busiest (was 8/6 = 1.33), as with 4 ranks; 8 ranks: 1
    assert mixtral(3) == mixtral(2) > mixtral(4)
    assert round(mixtral(3) / 1e6) == 24158  # the reviewer's 24,155.5 MB + load rounding
    # Qwen1.5-MoE: 60 experts over 8 ranks, 8 on the busiest at 0.10.1+, 7 + 4 = 11 before
    q = "Qwen/Qwen1.5-MoE-A2.7B"
    e8, e75 = (_weights(q, "h100", v, tensor_parallel_size=8, enable_expert_parallel=True)
               for v in ("0.11.0", "0.10.0"))
    assert e75 > e8


def test_sequence_parallel_moe_keeps_shared_experts_whole():
    """review 24c F2: TP > 1, DP > 1 and expert parallelism turn on sequence-parallel MoE
    (0.11+), and DeepSeek's shared experts are built with disable_tp: 2.555 GB of FP8 shared
    experts whole at TP8 x DP2 (46,752 MB of weights a GPU, 44,516 before)."""
    v3 = "deepseek-ai/DeepSeek-V3"
    sp = _weights(v3, "h200", tensor_parallel_size=8, data_parallel_size=2,
                  enable_expert_parallel=True)
    assert round(sp / 1e6) == 46752
    tp16 = _weights(v3, "h200", tensor_parallel_size=16, enable_expert_parallel=True)
    assert sp - tp16 > 2.2e9  # the same experts a rank; the shared ones 7/8 more
    assert _weights(v3, "h200", "0.10.2", tensor_parallel_size=8, data_parallel_size=2,
                    enable_expert_parallel=True) < sp  # no sequence-parallel MoE yet


def test_mamba2_single_group_keeps_b_and_c_whole():
    """review 24c F3: `MambaMixer2` pads one group to the TP size, so B and C stay whole:
    granite-4.0-h-micro at TP2/4/8 +18.9 / +28.4 / +33.1 MB over a plain split. Each of
    its 36 Mamba2 layers also holds 8,704 small parameters (conv bias 4,352, A in fp32 as
    two units, D and dt_bias 64 each, the gated norm 4,096), split by TP but for the single
    group's B/C conv bias (256)."""
    w = {tp: _weights("ibm-granite/granite-4.0-h-micro", "h100", tensor_parallel_size=tp)
         for tp in (1, 2, 4, 8)}
    assert w[1] == 6382170112 + 36 * 8704 * 2
    assert (w[2], w[4], w[8]) == tuple(
        b + 36 * (8448 // tp + 256) * 2
        for b, tp in ((3210162176, 2), (1628352512, 4), (834301952, 8)))


def test_gptq_act_order_repeats_row_scales_on_every_rank():
    """review 24c F4: `marlin_repeat_scales_on_all_ranks` (0.6-0.29) loads o_proj's and
    down_proj's whole-K scales on every rank: 4,128,768 B a layer x 80 at TP8."""
    m = "cortecs/Meta-Llama-3-70B-Instruct-GPTQ"
    assert _weights(m, "a100-80gb", "0.29.0", tensor_parallel_size=8) == 5270159360
    assert _weights(m, "a100-80gb", "0.29.0", tensor_parallel_size=1) == \
        _weights(m, "a100-80gb", "0.25.0", tensor_parallel_size=1)


@pytest.mark.parametrize(("model", "kw", "version", "says"), [
    ("nvidia/Nemotron-H-56B-Base-8K", {"tensor_parallel_size": 16}, "0.33",
     "its Mamba2 mixer's 8 groups are not divisible by 16"),
    ("Qwen/Qwen3-30B-A3B-FP8", {"data_parallel_size": 4}, "0.28.0",
     "vLLM rejects --tensor-parallel-size 1 with --data-parallel-size 4 (the experts split "
     "over both) for this FP8 block-quantized checkpoint: the experts' intermediate per GPU "
     "(192) is not a multiple of its 128x128 quantization blocks"),
])
def test_layouts_vllm_refuses(model, kw, version, says):
    """review 24c F5."""
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    with pytest.raises(BadInput, match=re.escape(says)):
        size(resolve_model(model), resolve_gpu("h100"), EngineArgs(**kw), version)


def test_channel_fp8_scales_per_output_row(monkeypatch):
    """compressed-tensors FP8 with strategy "channel" (`CompressedTensorsW8A8Fp8`) holds an
    fp32 scale per output row; an estimated checkpoint size counts them (review 25c #2).
    RedHatAI Llama-3.3-70B fp8-dynamic at TP4, per layer on one GPU: q 8,192 / 4, k+v
    2 x 2 x 128, o 8,192 (row-parallel: every row), gate+up 2 x 28,672 / 4, down 8,192."""
    from kvplan.core import sizing
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    m, h100 = resolve_model("RedHatAI/Llama-3.3-70B-Instruct-fp8-dynamic"), resolve_gpu("h100")
    a = EngineArgs(tensor_parallel_size=4, max_model_len=8192)
    with_scales = size(m, h100, a).budget.weights
    monkeypatch.setattr(sizing, "channel_scaled", lambda arch, q=None: False)
    rows = 2048 + 512 + 8192 + 14336 + 8192
    assert with_scales - size(m, h100, a).budget.weights == 80 * rows * 4 == 10649600


def test_ernie45_moe_layer_range_and_shared_experts():
    # baidu/ERNIE-4.5-21B-A3B (ernie45_moe.py): MoE on layers 1..27 (`moe_layer_start_index` /
    # `_end_index` / `_interval`), layer 0 a dense MLP of 12,288; two shared experts of 1,536
    # (`moe_num_shared_experts`) beside 64 routed ones: 21,825,436,160 parameters
    cfg = {"architectures": ["Ernie4_5_MoeForCausalLM"], "model_type": "ernie4_5_moe",
           "hidden_size": 2560, "intermediate_size": 12288, "moe_intermediate_size": 1536,
           "num_hidden_layers": 28, "num_attention_heads": 20, "num_key_value_heads": 4,
           "head_dim": 128, "moe_num_experts": 64, "moe_num_shared_experts": 2, "moe_k": 6,
           "moe_layer_start_index": 1, "moe_layer_end_index": 27, "moe_layer_interval": 1,
           "vocab_size": 103424, "tie_word_embeddings": True, "torch_dtype": "bfloat16"}
    pc = count_params(normalize(cfg))
    h = 2560
    assert pc.layers[0].expert == 0 and pc.layers[0].mlp == 3 * h * 12288
    assert pc.layers[1].expert == 64 * 3 * h * 1536 and pc.layers[1].mlp == 3 * h * 2 * 1536
    attn = h * 20 * 128 * 2 + h * 4 * 128 * 2
    assert pc.total == (103424 * h + 28 * (attn + 2 * h) + 3 * h * 12288
                        + 27 * (64 * 3 * h * 1536 + 3 * h * 3072 + h * 64) + h) == 21825436160
    # ERNIE-4.5-VL lists its text and vision experts: both sets are weights
    vl = {**cfg, "moe_num_experts": [64, 64], "moe_intermediate_size": [1536, 512],
          "moe_layer_start_index": [1, 1], "moe_layer_end_index": [27, 27]}
    # (and their own gate beside the text one: 64 rows of h a layer)
    assert count_params(normalize(vl)).total == pc.total + 27 * 64 * (3 * h * 512 + h)


def test_attention_free_mamba_layers_have_no_mlp():
    """`MambaDecoderLayer` / `Mamba2DecoderLayer`: the mixer and one norm, though MambaConfig
    carries intermediate_size (the mixer's width). kvplan had added a gated MLP of it, 2x the
    FalconMamba-7B weights."""
    from configs import FALCON_MAMBA_7B, MAMBA2_7B

    # Mamba1 (I 8,192, N 16, R 256): in_proj 4,096 x 16,384, conv 8,192 x 4 + bias, x_proj
    # 8,192 x 288, dt_proj 256 x 8,192 + bias, A fp32 (2 units), D, out_proj, one norm
    layer = (4096 * 16384 + 8192 * 4 + 8192 + 8192 * 288 + 256 * 8192 + 8192
             + 2 * 8192 * 16 + 8192 + 8192 * 4096 + 4096)
    assert layer == 105443328
    pc = count_params(normalize(FALCON_MAMBA_7B))
    assert pc.total == 64 * layer + 2 * 65024 * 4096 + 4096 == 7281053696
    # Mamba2 (I 8,192, 8 groups, N 128, 128 heads): in_proj 4,096 x (8,192 + 10,240 + 128),
    # conv 10,240 x 4 + bias, A (2 units), D, dt_bias, the gated norm 8,192, out_proj, norm
    layer = (4096 * 18560 + 10240 * 4 + 10240 + 4 * 128 + 8192 + 8192 * 4096 + 4096)
    pc = count_params(normalize(MAMBA2_7B))
    assert pc.total == 64 * layer + 2 * 32768 * 4096 + 4096 == 7285411840


def test_tied_embeddings_by_the_config_class_default():
    """transformers drops tie_word_embeddings from a saved config when it equals the class
    default; StarCoder2's, Cohere2's, MiniCPM3's and PLaMo2's default is True (their
    checkpoints are tied), Llama's False. vLLM's Cohere models always tie."""
    base = {"hidden_size": 4608, "num_attention_heads": 36, "num_key_value_heads": 4,
            "num_hidden_layers": 32, "intermediate_size": 18432, "vocab_size": 49152,
            "max_position_embeddings": 16384, "torch_dtype": "bfloat16"}
    sc2 = normalize({**base, "architectures": ["Starcoder2ForCausalLM"],
                     "model_type": "starcoder2", "use_bias": True})
    assert sc2.tie_word_embeddings and count_params(sc2).lm_head == 0
    llama = normalize({**base, "architectures": ["LlamaForCausalLM"], "model_type": "llama"})
    assert not llama.tie_word_embeddings and count_params(llama).lm_head == 49152 * 4608
    assert not normalize({**base, "architectures": ["Starcoder2ForCausalLM"],
                          "model_type": "starcoder2",
                          "tie_word_embeddings": False}).tie_word_embeddings
    # commandr.py: logits from embed_tokens whatever the config says
    assert normalize({**base, "architectures": ["Cohere2ForCausalLM"], "model_type": "cohere2",
                      "tie_word_embeddings": False}).tie_word_embeddings
    # starcoder2-7b's catalog config has no key: about 7.17 B parameters (the model card's),
    # not 7.40 B with a separate 49,152 x 4,608 head (kvplan had 14,814,880,768 B)
    assert _weights("bigcode/starcoder2-7b", "h100") == 14814880768 - 49152 * 4608 * 2


def test_modelopt_file_algos_vllm_refuses_and_kv_only_exports():
    # review 27: a ModelOpt hf_quant_config.json gets its quant_method while the model config
    # is built, or "Unknown ModelOpt quant algo"; a KV-only export (quant_algo null) gets
    # none and runs unquantized, 'auto' in the model dtype
    from configs import LLAMA31_8B

    from kvplan.core.sizing import EngineArgs, Gpu, Model, size

    h100 = Gpu("h100-sxm", "NVIDIA H100 80GB HBM3", 81089 * (1 << 20), "9.0")

    def run(algo, version="0.33", kv="FP8"):
        q = {"producer": {"name": "modelopt", "version": "0.29.0"},
             "quantization": {"quant_algo": algo, "kv_cache_quant_algo": kv}}
        return size(Model("m", LLAMA31_8B, hf_quant_config=q), h100,
                    EngineArgs(max_model_len=8192), version)

    with pytest.raises(BadInput, match="Unknown ModelOpt quant algo"):
        run("W4A8_AWQ")
    with pytest.raises(BadInput, match="Unknown ModelOpt quant algo"):
        run("MIXED_PRECISION", "0.32")
    with pytest.raises(BadInput, match="Unknown ModelOpt quant algo"):
        run("fp8", "0.13")  # as written before 0.14
    assert run("fp8", "0.14").kv_dtype == "fp8"
    kv_only = run(None)
    assert kv_only.kv_dtype == "bfloat16"
    plain = size(Model("m", LLAMA31_8B), h100, EngineArgs(max_model_len=8192), "0.33")
    assert kv_only.to_json()["weights_bytes_per_gpu"] == plain.to_json()["weights_bytes_per_gpu"]


def test_a_wrappers_tie_flag_from_024():
    # vLLM 0.24+ copy a multimodal wrapper's tie flag (Mistral3Config's transformers-5
    # default True when config.json omits it) into the text config: Mistral-Small-3.1's
    # 131,072 x 5,120 head is not loaded (vLLM issue 51063); 0.29's
    # `maybe_untie_word_embeddings` unties it again (the checkpoint ships an lm_head).
    # 0.19.1-0.23 copy it only under transformers 5: a 0.20.0 H200 sweep start of
    # Ministral-3-14B loaded its untied head (C -0.01 % untied, -8.50 % tied)
    w = {v: _weights("mistralai/Mistral-Small-3.1-24B-Instruct-2503", "h100", v,
                     max_model_len=8192) for v in ("0.23", "0.24", "0.28", "0.29")}
    assert w["0.23"] - w["0.24"] == 131072 * 5120 * 2 == 1342177280
    assert w["0.24"] == w["0.28"] and w["0.29"] == w["0.23"]
    # a wrapper that says untied unties a tied text config in every release from 0.24
    from kvplan.core.arch import normalize, release_tie

    base = {"hidden_size": 1024, "num_attention_heads": 8, "num_hidden_layers": 2,
            "intermediate_size": 4096, "vocab_size": 32000, "max_position_embeddings": 4096}
    a = normalize({"architectures": ["LlavaForConditionalGeneration"], "model_type": "llava",
                   "tie_word_embeddings": False,
                   "text_config": {**base, "model_type": "llama", "tie_word_embeddings": True}})
    assert [release_tie(a, v) for v in ((0, 20, 0), (0, 24, 0), (0, 33, 0))] == [
        True, False, False]
    # PaliGemma: gemma.py asserts the flag vLLM sees, the wrapper's from 0.24
    pali = {"architectures": ["PaliGemmaForConditionalGeneration"], "model_type": "paligemma",
            "tie_word_embeddings": True,
            "text_config": {**base, "model_type": "gemma", "tie_word_embeddings": False}}
    with pytest.raises(BadInput, match="asserts tie_word_embeddings"):
        release_tie(normalize(pali), (0, 18, 0))
    assert release_tie(normalize(pali), (0, 24, 0))


def test_the_text_tie_flag_of_every_wrapper_form():
    # the flag a model file asserts is the language model's own, whichever key holds it
    # (`llm_config` of InternVL-chat, `language_config` of DeepSeek-VL2, the thinker's
    # `text_config` of the Omni models), never the wrapper's
    from kvplan.core.arch import normalize, release_tie

    base = {"hidden_size": 1024, "num_attention_heads": 8, "num_hidden_layers": 2,
            "intermediate_size": 4096, "vocab_size": 32000, "max_position_embeddings": 4096,
            "model_type": "gemma", "head_dim": 128}
    for key in ("llm_config", "language_config", "text_config"):
        untied = normalize({"model_type": "w", "architectures": ["W"],
                            key: {**base, "tie_word_embeddings": False}})
        with pytest.raises(BadInput, match="asserts tie_word_embeddings"):
            release_tie(untied, (0, 20, 0))
        # the wrapper's false flag with the text config silent is not the one asserted
        a = normalize({"model_type": "w", "architectures": ["W"], "tie_word_embeddings": False,
                       key: base})
        assert a.text_tie is None
        release_tie(a, (0, 20, 0))
    omni = normalize({"model_type": "qwen2_5_omni", "architectures": ["W"],
                      "thinker_config": {"text_config": {**base, "tie_word_embeddings": False}}})
    assert omni.text_tie is False


def test_a_modelopt_file_needs_its_producer_and_before_0101_the_flag():
    # vLLM names a method from hf_quant_config.json only when its producer is modelopt
    # (`_parse_quant_hf_config` 0.10.1-0.13, `_normalize_quantization_config` 0.14+); before
    # 0.10.1 `get_config` did not read the file at all (PR 22073): `--quantization modelopt`
    from configs import LLAMA31_8B

    from kvplan.core.sizing import EngineArgs, Gpu, Model, size

    h100 = Gpu("h100-sxm", "NVIDIA H100 80GB HBM3", 81089 * (1 << 20), "9.0")
    q = {"producer": {"name": "modelopt", "version": "0.23.0"},
         "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": None}}
    m = Model("m", LLAMA31_8B, hf_quant_config=q)
    with pytest.raises(BadInput, match="does not read hf_quant_config.json by itself") as e:
        size(m, h100, EngineArgs(max_model_len=8192), "0.9.2")
    assert e.value.hint == "add --quantization modelopt"
    old = size(m, h100, EngineArgs(max_model_len=8192, quantization="modelopt"), "0.9.2")
    new = size(m, h100, EngineArgs(max_model_len=8192), "0.10.1")
    assert old.quantization == new.quantization == "modelopt"
    assert old.weights_total_bytes == new.weights_total_bytes
    bare = Model("m", LLAMA31_8B, hf_quant_config={"quantization": q["quantization"]})
    for v in ("0.10.1", "0.20", "0.33"):
        with pytest.raises(BadInput, match="names no producer 'modelopt'"):
            size(bare, h100, EngineArgs(max_model_len=8192), v)
    # review 28: a file naming its method itself needs no producer (the ModelOpt classes
    # claim a quant_method starting with 'modelopt')
    own = Model("m", LLAMA31_8B, hf_quant_config={**bare.hf_quant_config,
                                                   "quant_method": "modelopt"})
    assert size(own, h100, EngineArgs(max_model_len=8192), "0.33").quantization == "modelopt"
    # before 0.10.1 the flag is how vLLM reads the file: another one names the right one,
    # and "None" is no flag
    with pytest.raises(BadInput, match="does not match") as e:
        size(m, h100, EngineArgs(max_model_len=8192, quantization="fp8"), "0.9.2")
    assert e.value.hint == "use --quantization modelopt"
    with pytest.raises(BadInput, match="does not read hf_quant_config.json by itself"):
        size(m, h100, EngineArgs(max_model_len=8192, quantization="None"), "0.9.2")
    # a KV-only export (no quant_algo) runs 16-bit whatever the release
    kv_only = Model("m", LLAMA31_8B, hf_quant_config={"quantization": {"quant_algo": None}})
    assert size(kv_only, h100, EngineArgs(max_model_len=8192), "0.9.2").quantization is None


def test_gpt_j_asserts_an_untied_head():
    # gpt_j.py: `assert not config.tie_word_embeddings` (0.6-0.33); GPT-J-6B's config
    # (EleutherAI/gpt-j-6b) omits the key, whose class default is False
    from kvplan.core.sizing import EngineArgs, Gpu, Model, size

    gptj = {"architectures": ["GPTJForCausalLM"], "model_type": "gptj", "n_embd": 4096,
            "n_head": 16, "n_layer": 28, "n_positions": 2048, "rotary_dim": 64,
            "vocab_size": 50400, "torch_dtype": "float16"}
    h100 = Gpu("h100-sxm", "NVIDIA H100 80GB HBM3", 81089 * (1 << 20), "9.0")
    r = size(Model("m", gptj), h100, EngineArgs(), "0.33")
    assert not r.arch.tie_word_embeddings and r.fits
    with pytest.raises(BadInput, match="asserts an untied LM head"):
        size(Model("m", {**gptj, "tie_word_embeddings": True}), h100, EngineArgs(), "0.20")


def test_quantization_config_null_reads_the_file_and_asserted_ties():
    # `get_config` reads hf_quant_config.json when config.json's key is absent or null
    from configs import GEMMA2_9B, LLAMA31_8B

    from kvplan.core.sizing import EngineArgs, Gpu, Model, size

    h100 = Gpu("h100-sxm", "NVIDIA H100 80GB HBM3", 81089 * (1 << 20), "9.0")
    q = {"producer": {"name": "modelopt", "version": "0.29.0"},
         "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}}
    r = size(Model("m", {**LLAMA31_8B, "quantization_config": None}, hf_quant_config=q), h100,
             EngineArgs(max_model_len=8192), "0.33")
    assert r.kv_dtype == "fp8"
    # gemma2.py asserts tie_word_embeddings through 0.28: an explicit false stops the start
    untied = {**GEMMA2_9B, "tie_word_embeddings": False}
    with pytest.raises(BadInput, match="asserts tie_word_embeddings"):
        size(Model("m", untied), h100, EngineArgs(max_model_len=4096), "0.28")
    assert size(Model("m", untied), h100, EngineArgs(max_model_len=4096), "0.29").fits
