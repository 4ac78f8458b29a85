"""Block sizes an attention backend imposes (core/backends.py), hand-computed from the vLLM
0.30-0.33 wheels: TRITON_FLASHINFER's 64-token blocks for multimodal prefix-LM models on
SM10x, FlashAttention 4's 64-token SM90 FP8 pages for 512-wide heads."""

import pytest

from kvplan.core.sizing import EngineArgs, size
from kvplan.errors import BadInput
from kvplan.sources.resolve import resolve_gpu, resolve_model


def _run(model, gpu, version="0.33", **kw):
    a = EngineArgs(**{"max_model_len": 32768, **kw})
    r = size(resolve_model(model), resolve_gpu(gpu), a, version)
    return r, sorted({(g.spec.kind, g.block_size) for g in r.groups})


@pytest.mark.parametrize("tp,bpb", [(1, 5_242_880), (2, 2_621_440)])
def test_gemma4_31b_fp8_on_hopper_takes_fa4_pages(tp, bpb):
    # 64-token blocks for every layer (spec-less `_get_sm90_fa4_fp8_kv_block_size` sees the
    # model's widest head, 512); the full layers' page (4 KV heads x 512 x K,V x 1 B = 4 KiB
    # a token) is half the sliding one (16 x 256 x 2 = 8 KiB), so unification doubles it
    r, blocks = _run("google/gemma-4-31B-it", "h100", kv_cache_dtype="fp8",
                     tensor_parallel_size=tp)
    assert r.block_size == 64 and blocks == [("full", 128), ("sliding", 64)]
    # six groups of ten layers, each page 64 x 8 KiB (or 128 x 4 KiB) / TP
    assert r.bytes_per_block == bpb == 10 * 64 * 16 * 256 * 2 // tp


def test_gemma4_edge_models_fp8_on_hopper():
    r, blocks = _run("google/gemma-4-E4B-it", "h100", kv_cache_dtype="fp8")
    # sliding 2 x 256 x 2 = 1 KiB a token against the full layers' 2 x 512 x 2 = 2 KiB
    assert blocks == [("full", 64), ("sliding", 128)] and r.bytes_per_block == 4 * 64 * 2048
    r, blocks = _run("google/gemma-4-E2B-it", "h100", kv_cache_dtype="fp8",
                     tensor_parallel_size=2)  # one KV head, replicated
    assert blocks == [("full", 64), ("sliding", 128)] and r.bytes_per_block == 3 * 64 * 1024


@pytest.mark.parametrize("version,kv", [("0.30", "fp8"), ("0.33", "auto"), ("0.33", "fp8_e5m2")])
def test_gemma4_on_hopper_keeps_16_otherwise(version, kv):
    # 0.30 has no FA4 FP8 kernel (the layers fall to TRITON_ATTN); bf16 and e5m2 caches
    # do not take it
    r, blocks = _run("google/gemma-4-31B-it", "h100", version, kv_cache_dtype=kv,
                     tensor_parallel_size=2)
    assert r.block_size == 16 and blocks == [("full", 32), ("sliding", 16)]


@pytest.mark.parametrize("model,want", [
    ("google/gemma-3-12b-it", 64), ("google/gemma-3-4b-it", 64),
    ("google/gemma-3-27b-it", 16),  # 128-wide heads: the composite refuses them
    ("google/gemma-4-31B-it", 64),  # use_bidirectional_attention "vision"
    ("google/gemma-4-E4B-it", 16),  # not a prefix-LM: FlashInfer, 16
])
def test_multimodal_prefix_lm_on_blackwell(model, want):
    r, _ = _run(model, "b200")
    assert r.block_size == want


def test_composite_needs_image_inputs_and_a_release_that_has_it():
    assert _run("google/gemma-3-12b-it", "b200", language_model_only=True)[0].block_size == 16
    assert _run("google/gemma-3-12b-it", "b200",
                limit_mm_per_prompt={"image": 0})[0].block_size == 16
    assert _run("google/gemma-3-12b-it", "b200", "0.29")[0].block_size == 16
    assert _run("google/gemma-3-12b-it", "h100")[0].block_size == 16  # SM90: MultipleOf(16)
    # the user's --block-size wins
    assert _run("google/gemma-3-12b-it", "b200", block_size=32)[0].block_size == 32


def test_skip_list_beside_a_backend_block_is_refused():
    with pytest.raises(BadInput, match="attention backend sets the block"):
        _run("google/gemma-4-31B-it", "h100", kv_cache_dtype="fp8",
             kv_cache_dtype_skip_layers=("5",))


def test_flashinfer_workspace_risk_is_noted_on_blackwell_only():
    def noted(gpu, version="0.33", **kw):
        r, _ = _run("meta-llama/Llama-3.1-8B-Instruct", gpu, version, **kw)
        return any("394 MiB attention workspaces" in n for n in r.notes)

    assert noted("b200") and not noted("h100")
    assert not noted("b200", "0.19")  # graphs not subtracted before 0.20
    assert not noted("b200", enforce_eager=True)  # no graph probe


def test_rocm_sinks_take_aiter_unified_attention_blocks():
    # gpt-oss on an MI300X, 0.33, 20 GiB at 32k (re-derived from the wheel): ROCM_ATTN
    # refuses sinks, ROCM_AITER_UNIFIED_ATTN prefers 64; 36 layers x 64 x 8 KV heads x 64 x
    # K,V x 2 B = 2,359,296 B a block; 1,025 blocks a request (sliding 128 + full)
    r, _ = _run("openai/gpt-oss-120b", "mi300x", kv_cache_memory_bytes=20 << 30)
    assert (r.block_size, r.bytes_per_block, r.num_gpu_blocks) == (64, 2_359_296, 9_102)
    assert (r.blocks_per_request, r.kv_cache_tokens) == (1_025, 290_979)
    # VLLM_ROCM_USE_AITER=1 puts ROCM_AITER_FA first (16); before 0.20 ROCM_ATTN took sinks
    assert _run("openai/gpt-oss-120b", "mi300x", rocm_aiter=True)[0].block_size == 16
    assert _run("openai/gpt-oss-120b", "mi300x", "0.18")[0].block_size == 16
    assert _run("meta-llama/Llama-3.1-8B-Instruct", "mi300x")[0].block_size == 16


def test_rocm_sparse_mla_blocks_and_fp8():
    # DeepSeek-V3.2 TP8 on an MI300X, 0.33: ROCM_AITER_MLA_SPARSE and its indexer accept 16;
    # fp8 stays plain fp8 (576 B + the 132 B indexer key, not fp8_ds_mla's 656)
    kw = dict(kv_cache_memory_bytes=20 << 30, tensor_parallel_size=8)
    r, _ = _run("deepseek-ai/DeepSeek-V3.2", "mi300x", **kw)
    assert (r.block_size, r.bytes_per_block) == (16, 61 * 16 * (1_152 + 132))
    r, _ = _run("deepseek-ai/DeepSeek-V3.2", "mi300x", kv_cache_dtype="fp8", **kw)
    assert (r.kv_dtype, r.bytes_per_block, r.kv_cache_tokens) == ("fp8", 61 * 16 * (576 + 132),
                                                                  497_232)
    # before 0.18 the ROCm selector asserts block size 1 and refuses fp8
    with pytest.raises(BadInput, match="block size 1 only"):
        _run("deepseek-ai/DeepSeek-V3.2", "mi300x", "0.16", tensor_parallel_size=8)
    assert _run("deepseek-ai/DeepSeek-V3.2", "mi300x", "0.16", tensor_parallel_size=8,
                block_size=1)[0].block_size == 1


@pytest.mark.parametrize("model,says", [
    ("openai/gpt-oss-20b", "attention sinks"),
    ("google/gemma-3-12b-it", "multimodal-prefix"),
    ("google/gemma-4-E4B-it", "Gemma 4 runs on Triton"),
    ("deepseek-ai/DeepSeek-V2-Lite-Chat", "Triton-MLA"),
    ("microsoft/Phi-3-mini-4k-instruct", "not 96"),
])
def test_fp8_on_ampere_where_triton_takes_the_layers(model, says):
    # FA2 stores no fp8 and FlashInfer cannot take these layers, so Triton does, whose fp8
    # cache "requires SM89+" (0.27+); Ada (L40S) runs them
    with pytest.raises(BadInput, match=says):
        _run(model, "a100-80gb", kv_cache_dtype="fp8", max_model_len=4096)
    assert _run(model, "l40s", kv_cache_dtype="fp8", max_model_len=4096)[0].kv_dtype == "fp8"


def test_fp8_on_ampere_through_flashinfer_is_sized():
    r, _ = _run("meta-llama/Llama-3.1-8B-Instruct", "a100-80gb", kv_cache_dtype="fp8")
    assert r.kv_dtype == "fp8"
    r, _ = _run("google/gemma-3-12b-it", "a100-80gb", kv_cache_dtype="fp8",
                language_model_only=True)  # no prefix-LM mode: FlashInfer
    assert r.kv_dtype == "fp8"


def test_gemma3_image_prefix_composites_capture_piecewise_graphs_only():
    # the composite's routing reports NEVER for Gemma 3's unclamped sliding windows, so
    # FULL_AND_PIECEWISE drops to PIECEWISE: one graph a size (51 on H100, 83 on B200)
    assert _run("google/gemma-3-12b-it", "h100", max_model_len=8192)[0].cudagraph_graphs == 51
    assert _run("google/gemma-3-12b-it", "b200", max_model_len=8192)[0].cudagraph_graphs == 83
    # no composite: 128-wide heads (27B), or images off
    assert _run("google/gemma-3-27b-it", "h100", max_model_len=8192)[0].cudagraph_graphs == 102
    assert _run("google/gemma-3-12b-it", "h100", max_model_len=8192,
                language_model_only=True)[0].cudagraph_graphs == 102
    assert _run("google/gemma-4-31B-it", "b200", max_model_len=8192)[0].cudagraph_graphs == 166


def test_no_compilation_keeps_full_decode_graphs_from_030():
    # `CUDAGraphMode.without_piecewise`: FULL_AND_PIECEWISE -> FULL_DECODE_ONLY (0.30+);
    # earlier releases override to NONE
    llama = "meta-llama/Llama-3.1-8B-Instruct"
    assert _run(llama, "h100", max_model_len=8192, compilation_mode=0)[0].cudagraph_graphs == 51
    assert _run(llama, "h100", "0.29", max_model_len=8192,
                compilation_mode=0)[0].cudagraph_graphs == 0


@pytest.mark.parametrize("version,kv", [("0.24", "auto"), ("0.28", "fp8"), ("0.33", "fp8_e4m3")])
def test_sparse_mla_on_sm120_stores_fp8_ds_mla(version, kv):
    # FLASHINFER_MLA_SPARSE_SM120 (0.24+) canonicalises auto/fp8/fp8_e4m3 to fp8_ds_mla:
    # (656 B latent + 132 B indexer key) x 61 layers, 64-token blocks (its [64, 256] /
    # MultipleOf(64)); 20 GiB / (64 x 48,068 B) = 6,980 blocks
    r, _ = _run("deepseek-ai/DeepSeek-V3.2", "rtx-pro-6000", version, kv_cache_dtype=kv,
                tensor_parallel_size=8, max_model_len=32000, kv_cache_memory_bytes=20 << 30)
    assert (r.kv_dtype, r.block_size, r.kv_bytes_per_token_per_gpu) == ("fp8_ds_mla", 64, 48068)
    assert (r.num_gpu_blocks, r.kv_cache_tokens) == (6980, 446720)


@pytest.mark.parametrize("gpu,version,kw,says", [
    ("rtx-pro-6000", "0.23", {}, "no sparse MLA backend for compute capability 12.0"),
    ("a100-80gb", "0.33", {"pipeline_parallel_size": 2}, "compute capability 8.0"),
    ("rtx-pro-6000", "0.33", {"kv_cache_dtype": "bfloat16"}, "only the packed fp8_ds_mla"),
    ("rtx-pro-6000", "0.33", {"kv_cache_dtype": "fp8_e5m2"}, "only the packed fp8_ds_mla"),
    ("rtx-pro-6000", "0.33", {"dtype": "float16"}, "bfloat16 models only"),
])
def test_sparse_mla_without_a_backend_is_refused(gpu, version, kw, says):
    with pytest.raises(BadInput, match=says):
        _run("deepseek-ai/DeepSeek-V3.2", gpu, version, tensor_parallel_size=8, **kw)
