"""Quantized KV-cache formats (core/kvquant.py): per-head bytes, boundary layers, the 0.25+
block alignment, the buffers they add, vLLM's refusals and real starts."""

import json

import pytest
from configs import LLAMA31_8B

from kvplan.core import kvquant as Q
from kvplan.core.dtypes import modelopt_kv_dtype
from kvplan.core.sizing import EngineArgs, Gpu, Model, size
from kvplan.errors import BadInput
from kvplan.sources.resolve import resolve_gpu, resolve_model

GiB = 1 << 30
H100 = Gpu("h100", "NVIDIA H100 80GB HBM3", 81559 << 20, "9.0")
LLAMA = Model("meta-llama/Llama-3.1-8B-Instruct", LLAMA31_8B, weights_bytes=16_060_522_496)


@pytest.mark.parametrize("kv,d,want", [
    # per_token_head: 8-bit K and V + one fp32 scale each (inline); int4 halves the values
    ("int8_per_token_head", 128, 264), ("fp8_per_token_head", 256, 520),
    ("int4_per_token_head", 128, 136), ("int4_per_token_head", 64, 72),
    # NVFP4: 4-bit values + one fp8 scale per 16, K and V
    ("nvfp4", 128, 144), ("nvfp4_4over6", 256, 288), ("nvfp4", 64, 72),
    # TurboQuant slots (PR 38479's table at head 128: 196 / 134 (136 in the PR) / 118 / 102)
    ("turboquant_k8v4", 128, 196), ("turboquant_4bit_nc", 128, 134),
    ("turboquant_k3v4_nc", 128, 118), ("turboquant_3bit_nc", 128, 102),
    ("turboquant_k8v4", 64, 100), ("turboquant_3bit_nc", 256, 198),
    # UltraQuant: FP4 codes + a UE8M0 scale per 32 values ("D=256 -> 272 B/slot")
    ("ultraquant_4bit", 256, 272), ("ultraquant_4bit", 128, 136),
])
def test_head_token_bytes(kv, d, want):
    assert Q.head_token_bytes(kv, d, d) == want


def test_octave_slots():
    # OctaveFormat at head 256 with 64 rotary dims: 242 -> 248, 210 -> 216, 196
    assert [Q.octave_slot(k, 256, 64) for k in Q.OCTAVE] == [248, 216, 196]


def test_boundary_layers():
    def at(*v):
        return v <= (0, 33)

    assert Q.boundary_skip("turboquant_k8v4", 32, False, at) == [0, 1, 30, 31]
    assert Q.boundary_skip("turboquant_k8v4", 4, False, at) == [0, 1, 2, 3]
    assert Q.boundary_skip("turboquant_k8v4", 3, False, at) == [0, 2]
    assert Q.boundary_skip("turboquant_k8v4", 1, False, at) == []
    assert Q.boundary_skip("turboquant_k8v4", 32, True, at) == []  # hybrids: none (0.21+)
    assert Q.boundary_skip("nvfp4", 32, False, at) == []
    with pytest.raises(BadInput, match="hybrid"):
        Q.boundary_skip("turboquant_k8v4", 32, True, lambda *v: v <= (0, 20))


def test_heterogeneous_block_size():
    # primary page per token vs a bf16 page of one 16-token kernel block
    assert Q.hetero_block_size(16, 2048, 4096) == 32  # uint8 / fp8 primary: 2 x
    assert Q.hetero_block_size(16, 1152, 4096) == 64  # NVFP4 at head 128, 8 heads
    assert Q.hetero_block_size(64, 2048, 4096) == 64  # never below the chosen size
    assert Q.hetero_block_size(16, 4096, 4096) == 16


def _llama(kv, version, **kw):
    return size(LLAMA, H100, EngineArgs(kv_cache_dtype=kv, **kw), version)


def test_turboquant_on_llama():
    # 28 layers x 8 heads x 196 B + the 4 boundary layers in bf16 (8 x 512 B)
    r = _llama("turboquant_k8v4", "0.24")
    assert r.kv_bytes_per_token_per_gpu == 28 * 8 * 196 + 4 * 4096 == 60288
    assert sorted(r.kv_dtypes.skip) == [0, 1, 30, 31] and r.block_size == 16
    assert r.to_json()["kv_cache_dtype_skip_layers"] == [0, 1, 30, 31]
    # 0.25+: layer 0 (bf16, FLASH_ATTN) sizes the primary page as uint8 K and V: block 32
    assert _llama("turboquant_k8v4", "0.25").block_size == 32
    # 0.20: fp32 decode buffers of max_num_seqs (1,024 on an H100) x 32 heads x (32 x 129
    # + 129) per TurboQuant layer, inside "Model loading took"
    extra = 28 * 4 * 1024 * 32 * (32 * 129 + 129)
    assert extra == 15_623_258_112
    assert (_llama("turboquant_k8v4", "0.20").budget.weights
            - _llama("auto", "0.20").budget.weights) == extra


def test_nvfp4_and_per_token_head_on_llama():
    r = _llama("nvfp4", "0.33", max_num_batched_tokens=8192)
    assert r.kv_bytes_per_token_per_gpu == 32 * 8 * 144  # 0.281 x bf16
    # 0.21-0.31 allocate FlashInfer's FP8 output buffer [8192 tokens, 32 heads, 128] per layer
    old = _llama("nvfp4", "0.24", max_num_batched_tokens=8192)
    base = _llama("auto", "0.24", max_num_batched_tokens=8192)
    assert old.budget.weights - base.budget.weights == 32 * 8192 * 32 * 128 == GiB
    assert _llama("int8_per_token_head", "0.33").kv_bytes_per_token_per_gpu == 32 * 8 * 264
    # fp8 with two layers kept in bf16: 30 x 2,048 + 2 x 4,096; block 32 from 0.25
    r = _llama("fp8", "0.28", kv_cache_dtype_skip_layers=("0", "31"))
    assert (r.kv_bytes_per_token_per_gpu, r.block_size) == (69632, 32)
    assert _llama("fp8", "0.24", kv_cache_dtype_skip_layers=("0", "31")).block_size == 16


def test_int4_sliding_layers_before_028():
    # gpt-oss-20b: 12 sliding + 12 full layers, 8 KV heads of 64. 0.25-0.27's
    # SlidingWindowSpec has no int4 branch, so its layers cost the 8-bit size
    m = resolve_model("openai/gpt-oss-20b")
    g = resolve_gpu("h100")
    r26 = size(m, g, EngineArgs(kv_cache_dtype="int4_per_token_head"), "0.26")
    r28 = size(m, g, EngineArgs(kv_cache_dtype="int4_per_token_head"), "0.28")
    assert r26.kv_bytes_per_token_per_gpu == 12 * 8 * 72 + 12 * 8 * 136
    assert r28.kv_bytes_per_token_per_gpu == 24 * 8 * 72


@pytest.mark.parametrize("model,gpu,kv,version,says", [
    ("meta-llama/Llama-3.1-8B-Instruct", "h100", "nvfp4", "0.31", "SM100 only before 0.32"),
    ("meta-llama/Llama-3.1-8B-Instruct", "h100", "nvfp4_4over6", "0.33", "trtllm-gen"),
    ("meta-llama/Llama-3.1-8B-Instruct", "b200", "nvfp4", "0.20", "not yet supported"),
    ("deepseek-ai/DeepSeek-V3", "b200", "nvfp4", "0.33", "no MLA backend"),
    ("deepseek-ai/DeepSeek-V3", "b200", "nvfp4_ds_mla", "0.33", "sparse MLA"),
    ("openai/gpt-oss-20b", "h100", "turboquant_k8v4", "0.33", "attention sinks"),
    ("meta-llama/Llama-3.1-8B-Instruct", "h100", "octave_k3v4", "0.33", "RDNA3 and CDNA3"),
    ("meta-llama/Llama-3.1-8B-Instruct", "mi300x", "octave_k3v4", "0.33", "head_size 256"),
    ("meta-llama/Llama-3.1-8B-Instruct", "h100", "ultraquant_4bit", "0.33", "ROCm only"),
    ("google/gemma-3-12b-it", "h100", "turboquant_k8v4", "0.27", "until 0.28"),
    ("microsoft/phi-2", "b200", "nvfp4", "0.33", "not 80"),
])
def test_vllm_refusals(model, gpu, kv, version, says):
    with pytest.raises(BadInput, match=says) as e:
        size(resolve_model(model), resolve_gpu(gpu), EngineArgs(kv_cache_dtype=kv), version)
    assert e.value.flag == "kv_cache_dtype"


def test_names_by_release():
    with pytest.raises(BadInput, match="not accepted"):
        _llama("turboquant_k8v4", "0.19")
    with pytest.raises(BadInput, match="not accepted"):
        _llama("int4_per_token_head", "0.24")
    with pytest.raises(BadInput, match="0.19"):
        _llama("fp8", "0.18", kv_cache_dtype_skip_layers=("0",))


def test_sparse_mla_nvfp4_and_ultraquant():
    r = size(resolve_model("deepseek-ai/DeepSeek-V3.2"), resolve_gpu("b200"),
             EngineArgs(tensor_parallel_size=8, kv_cache_dtype="nvfp4_ds_mla"), "0.33")
    fp8 = size(resolve_model("deepseek-ai/DeepSeek-V3.2"), resolve_gpu("b200"),
               EngineArgs(tensor_parallel_size=8, kv_cache_dtype="fp8_ds_mla"), "0.33")
    # 352 B against fp8_ds_mla's 656 per MLA layer; the indexer cache is unchanged
    assert fp8.kv_bytes_per_token_per_gpu - r.kv_bytes_per_token_per_gpu == 61 * (656 - 352)
    # a dense model's boundary layers stay bf16 on ROCM_ATTN (LHBNC/LBHNC), which shares no
    # KV layout with ULTRAQUANT's LBNHC: vLLM 0.32+ fails at start-up (ROCm's selector
    # filters layouts for TurboQuant runs only)
    with pytest.raises(BadInput, match="No KV cache layout satisfies"):
        size(LLAMA, resolve_gpu("mi300x"), EngineArgs(kv_cache_dtype="ultraquant_4bit"), "0.33")
    # a hybrid keeps no layer: ULTRAQUANT alone, whose 64-token preference the Mamba
    # alignment builds on (Qwen3.5-27B: 64 x cdiv(3,207,168, 64 x 1,088) = 3,008; 16 x its
    # padded page = 52,363,264 B a block, 410 at 20 GiB; 11 + 6 blocks a request)
    q = size(resolve_model("Qwen/Qwen3.5-27B"), resolve_gpu("mi300x"),
             EngineArgs(kv_cache_dtype="ultraquant_4bit", kv_cache_memory_bytes=20 * GiB,
                        max_model_len=32768), "0.33")
    assert (q.block_size, q.num_gpu_blocks, q.kv_cache_tokens) == (3008, 410, 790287)


def test_modelopt_nvfp4_kv_scheme():
    q = {"quant_method": "modelopt", "kv_cache_scheme": {"num_bits": 4, "type": "float"}}
    assert modelopt_kv_dtype(q, None, config_json_from=True, hf_quant_from=True,
                             nvfp4=True) == "nvfp4"
    assert modelopt_kv_dtype(q, None, config_json_from=True, hf_quant_from=True) is None
    q = {"quant_method": "modelopt", "quantization": {"kv_cache_quant_algo": "NVFP4"}}
    assert modelopt_kv_dtype(q, None, config_json_from=True, hf_quant_from=True,
                             nvfp4=True) == "nvfp4"


def test_real_starts():
    # Qwen3-4B, turboquant_k8v4 on an Intel Arc Pro B70 (0.20.1 dev, block 64): "TQ: skipping
    # layers ['0', '1', '34', '35']", 17.57 GiB -> "283,392 tokens", 69.19x
    r = size(resolve_model("Qwen/Qwen3-4B"), Gpu("xpu", "Arc Pro B70", 32 * GiB),
             EngineArgs(kv_cache_dtype="turboquant_k8v4", block_size=64, max_model_len=4096,
                        max_num_seqs=4, kv_cache_memory_bytes=round(17.57 * GiB)), "0.20")
    assert (r.kv_cache_tokens, round(r.max_concurrency, 2)) == (283392, 69.19)
    # Qwen3.8-27B (as Qwen3.5-27B) at 262,144 tokens, turboquant_4bit_nc, a 5 GiB pin on an
    # RTX 5090 with 0.27.1: "306,325 KV tokens (1.17x)"
    r = size(resolve_model("Qwen/Qwen3.5-27B"), resolve_gpu("rtx5090"),
             EngineArgs(kv_cache_dtype="turboquant_4bit_nc", max_model_len=262144,
                        max_num_seqs=4, kv_cache_memory_bytes=5 * GiB), "0.27.1")
    assert (r.kv_cache_tokens, round(r.max_concurrency, 2)) == (306325, 1.17)
    # gemma-3-12b on a GB10 (fork of June 2026): nvfp4 53.1 GiB -> 1,072,364 tokens, 130.90x
    r = size(resolve_model("google/gemma-3-12b-it"), resolve_gpu("gb10"),
             EngineArgs(kv_cache_dtype="nvfp4", max_model_len=8192, max_num_batched_tokens=2048,
                        language_model_only=True, kv_cache_memory_bytes=round(53.1 * GiB)),
             "0.22")
    assert abs(r.kv_cache_tokens / 1072364 - 1) < 1e-4 and round(r.max_concurrency, 1) == 130.9


def test_throughput_and_recommend_say_dequantisation_is_not_modelled():
    from kvplan.core.plan import kv_format_advice

    r = _llama("turboquant_4bit_nc", "0.33")
    (note,) = kv_format_advice(r)
    assert "upper bound" in note and "0.37-0.55x" in note
    assert kv_format_advice(_llama("fp8", "0.33")) == []


def test_cli_flags_and_output(capsys):
    from kvplan.cli import main

    code = main(["size", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "b200",
                 "--kv-cache-dtype", "nvfp4"])
    out, _ = capsys.readouterr()
    assert code == 0 and "3.56x fewer than bfloat16" in out  # 4,096 / 1,152 B per layer
    code = main(["size", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100",
                 "--kv-cache-dtype", "fp8", "--kv-cache-dtype-skip-layers", "0 31", "--json"])
    out, _ = capsys.readouterr()
    import json

    d = json.loads(out)
    assert code == 0 and d["kv_cache_dtype_skip_layers"] == [0, 31]
    assert d["kv_bytes_per_token"] == 30 * 2048 + 2 * 4096
    main(["size", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100", "--kv-cache-dtype",
          "fp8", "--kv-cache-dtype-skip-layers", "0,31", "--json"])  # comma form, same list
    assert json.loads(capsys.readouterr()[0])["kv_cache_dtype_skip_layers"] == [0, 31]
    # an index past the last layer matches none: the same bytes, and a note says so
    main(["size", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100", "--kv-cache-dtype",
          "fp8", "--kv-cache-dtype-skip-layers", "0,31,32", "--json"])
    d = json.loads(capsys.readouterr()[0])
    assert d["kv_bytes_per_token"] == 30 * 2048 + 2 * 4096
    assert "--kv-cache-dtype-skip-layers 32: the model has layers 0-31: vLLM matches no " \
        "layer there and quantizes as if it were not listed" in d["notes"]
    code = main(["size", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100",
                 "--kv-cache-dtype", "nvfp4", "--vllm-version", "0.31"])
    _, err = capsys.readouterr()
    assert code == 2 and "no attention backend for --kv-cache-dtype nvfp4" in err
    assert len(err.strip().splitlines()) == 1


def test_sglang_fp4_kv_cache_in_check(capsys):
    import json

    from kvplan.cli import main

    def deployment(cmd, gpu):
        main(["check", "--cmd", cmd, "--gpu", gpu, "--format", "json"])
        return json.loads(capsys.readouterr().out)["deployments"][0]

    def status(dep, fid):
        return next(f for f in dep["checks"] if f["id"] == fid)["status"]

    # SGLang's fp4_e2m1 (`MHATokenToKVPoolFP4`: k/2 bytes + a byte per 16) sizes as nvfp4,
    # without vLLM's backend rules
    dep = deployment("python -m sglang.launch_server --model-path Qwen/Qwen3-8B "
                     "--kv-cache-dtype fp4_e2m1", "h100")
    assert status(dep, "sizing-inputs") == "pass" and status(dep, "flag-values") == "pass"
    dep = deployment("python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 "
                     "--tp 8 --kv-cache-dtype fp4_e2m1", "b200")
    assert status(dep, "sizing-inputs") == "fail"


def test_compressed_tensors_kv_cache_scheme():
    # an llm-compressor FP8 checkpoint that also quantized its KV cache (kv_cache_scheme as
    # llm-compressor writes it): vLLM 0.15+ stores fp8 for auto; 0.15-0.21 even when another
    # dtype is asked for, 0.22+ only for auto; 0.14 kept the model dtype
    q = {"quant_method": "compressed-tensors", "format": "float-quantized",
         "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
             "num_bits": 8, "type": "float", "strategy": "channel", "dynamic": False}}},
         "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor",
                             "dynamic": False, "symmetric": True},
         "ignore": ["lm_head"]}
    m = Model("x/Llama-3.1-8B-FP8-KV", {**LLAMA31_8B, "quantization_config": q})

    def kv(version, asked="auto"):
        return size(m, H100, EngineArgs(kv_cache_dtype=asked), version).kv_dtype

    assert (kv("0.14"), kv("0.15"), kv("0.33")) == ("bfloat16", "fp8", "fp8")
    assert (kv("0.20", "bfloat16"), kv("0.22", "bfloat16")) == ("fp8", "bfloat16")


def test_fp8_e5m2_with_fp8_checkpoints_is_refused():
    # `Attention.__init__`: "fp8_e5m2 kv-cache is not supported with fp8 checkpoints" for
    # the fp8 / ModelOpt / quark / compressed-tensors KV-cache methods; compressed-tensors
    # without a kv_cache_scheme is exempt from 0.24
    fp8 = Model("x/Llama-FP8", {**LLAMA31_8B, "quantization_config": {
        "quant_method": "fp8", "activation_scheme": "dynamic"}})
    with pytest.raises(BadInput, match="not supported with fp8 checkpoints") as e:
        size(fp8, H100, EngineArgs(kv_cache_dtype="fp8_e5m2"), "0.33")
    assert e.value.flag == "kv_cache_dtype"
    ct = Model("x/Llama-W8A8", {**LLAMA31_8B, "quantization_config": {
        "quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {
            "group_0": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float",
                                                           "strategy": "channel"}}}}})
    assert size(ct, H100, EngineArgs(kv_cache_dtype="fp8_e5m2"), "0.24").kv_dtype == "fp8_e5m2"
    with pytest.raises(BadInput, match="fp8 checkpoints"):
        size(ct, H100, EngineArgs(kv_cache_dtype="fp8_e5m2"), "0.23")


def test_diagnose_reads_the_skip_list_from_cache_config_info():
    from kvplan.diagnose.crosscheck import cross_check

    # vLLM's cache_config_info gauge prints the merged list TurboQuant started with
    out, notes = cross_check(
        "meta-llama/Llama-3.1-8B-Instruct", "h100", tp=1, max_model_len=32768,
        vllm_version="0.33", catalogs=None,
        cache_config={"cache_dtype": "turboquant_k8v4", "gpu_memory_utilization": "0.9",
                      "kv_cache_dtype_skip_layers": "['0', '1', '30', '31']"})
    r = size(resolve_model("meta-llama/Llama-3.1-8B-Instruct"), resolve_gpu("h100"),
             EngineArgs(kv_cache_dtype="turboquant_k8v4", max_model_len=32768,
                        gpu_memory_utilization=0.9), "0.33")
    assert (out["predicted_num_gpu_blocks"], out["predicted_block_size"], notes) == (
        r.num_gpu_blocks, 32, [])


def test_sliding_layers_beside_kept_layers():
    g = resolve_gpu("h100")
    # gpt-oss-20b, fp8 with its sliding layers kept in bf16 (0.33): layer 0 is sliding and
    # kept, so the primary page is uint8 K and V (1,024 B a token) against bf16's 2,048:
    # block 32, shared page 32,768; the bf16 sliding layers take the largest multiple of 16
    # that fits (16 tokens, exactly the page); full layers 32 x 1,024 -- every page equal
    r = size(resolve_model("openai/gpt-oss-20b"), g, EngineArgs(
        kv_cache_dtype="fp8", kv_cache_dtype_skip_layers=("sliding_window",)), "0.33")
    assert r.kv_bytes_per_token_per_gpu == 12 * 2048 + 12 * 1024
    assert {(gr.spec.kind, gr.block_size, gr.spec.page) for gr in r.groups} == {
        ("sliding", 16, 32768), ("full", 32, 32768)}
    # TurboQuant on gemma-3 (0.33): its sliding-window layers have no backend
    # (`TurboQuantAttentionBackend.supports_sliding_window` is False, 0.26+), which vLLM
    # finds before its page unification would assert
    with pytest.raises(BadInput, match="sliding-window layers") as e:
        size(resolve_model("google/gemma-3-12b-it"), g,
             EngineArgs(kv_cache_dtype="turboquant_k8v4"), "0.33")
    assert e.value.flag == "kv_cache_dtype"
    # on a B200 the bf16 sliding layers run on FlashInfer, whose trtllm-gen pages go to 1,024
    # tokens with grouped queries (64 heads / 8 KV): the largest that fits 32,768 B is 16
    r = size(resolve_model("openai/gpt-oss-20b"), resolve_gpu("b200"), EngineArgs(
        kv_cache_dtype="fp8", kv_cache_dtype_skip_layers=("sliding_window",)), "0.33")
    assert {(gr.spec.kind, gr.block_size) for gr in r.groups} == {("sliding", 16),
                                                                  ("full", 32)}
    # refused where the backend is not modelled (gemma3's Triton composite on Blackwell)
    with pytest.raises(BadInput, match="kvplan does not size"):
        size(resolve_model("google/gemma-3-12b-it"), resolve_gpu("b200"), EngineArgs(
            kv_cache_dtype="fp8", kv_cache_dtype_skip_layers=("sliding_window",)), "0.33")


def test_gemma4_nvfp4_with_full_layers_kept_matches_the_fork_log():
    # "Padding KV cache pages ... from 73728 to 131072 bytes": NVFP4 sliding pages padded to
    # the bf16 full-attention page (0.22 dev build); 16.49 GiB -> 74,931 tokens, 9.15x
    m = resolve_model("google/gemma-4-31B-it")
    r = size(m, resolve_gpu("gb10"), EngineArgs(
        kv_cache_dtype="nvfp4", kv_cache_dtype_skip_layers=tuple(str(i) for i in range(5, 60, 6)),
        max_model_len=8192, max_num_batched_tokens=2048, language_model_only=True,
        kv_cache_memory_bytes=round(16.49 * GiB)), "0.22")
    assert {gr.spec.page for gr in r.groups} == {131072}
    assert abs(r.kv_cache_tokens / 74931 - 1) < 5e-4 and round(r.max_concurrency, 2) == 9.15


def test_sliding_block_multiple_of_expansion_from_030():
    # gemma-3-12b, int8_per_token_head with global layer 5 kept: primary 8 x 520 = 4,160 B,
    # block 32, shared page 133,120. Triton's MultipleOf(16) gives the sliding layers 16
    # tokens in 0.28-0.29 (the base only) and 32 from 0.30 (expanded to what fits)
    def sliding_block(version):
        r = size(resolve_model("google/gemma-3-12b-it"), resolve_gpu("h100"), EngineArgs(
            kv_cache_dtype="int8_per_token_head", kv_cache_dtype_skip_layers=("5",)), version)
        return {gr.block_size for gr in r.groups if gr.spec.kind == "sliding"}

    assert (sliding_block("0.29"), sliding_block("0.30")) == ({16}, {32})


def test_turboquant_020_buffers_match_vllms_fix_pr():
    # vLLM PR 40798's table (main of April 2026, the 0.20 code): Llama-3.1-70B,
    # turboquant_3bit_nc, TP2 on H200, 65,536 tokens, 0.90: "Model loading" 105.23 GiB with
    # the per-layer buffers, 65.74 GiB without (0.21's shared workspace)
    m, g = resolve_model("meta-llama/Llama-3.1-70B-Instruct"), resolve_gpu("h200")

    def loaded(version):
        a = EngineArgs(tensor_parallel_size=2, kv_cache_dtype="turboquant_3bit_nc",
                       max_model_len=65536, gpu_memory_utilization=0.9)
        return round(size(m, g, a, version).budget.weights / GiB, 2)

    assert (loaded("0.20"), loaded("0.21")) == (105.23, 65.74)


def test_nvfp4_on_a_gdn_hybrid_matches_the_fork_log():
    # Qwen3.6-35B-A3B on a GB10 (fork of June 2026, 262,144 tokens, 128 sequences): the
    # NVFP4 page per token (2 KV heads x 288 B) aligns to the Mamba page at 3,728 tokens
    # ("Setting attention block size to 3728"), 65.48 GiB -> 11,146,226 tokens, 42.52x;
    # its fp8 twin: block 2,096, 64.07 GiB -> 6,364,935 tokens
    def start(kv, gib):
        return size(resolve_model("nvidia/Qwen3.6-35B-A3B-NVFP4"), resolve_gpu("gb10"),
                    EngineArgs(kv_cache_dtype=kv, max_model_len=262144, max_num_seqs=128,
                               max_num_batched_tokens=65536, enable_prefix_caching=True,
                               kv_cache_memory_bytes=round(gib * GiB)), "0.22")

    r = start("nvfp4", 65.48)
    assert (r.block_size, r.kv_cache_tokens, round(r.max_concurrency, 2)) == (
        3728, 11146226, 42.52)
    r = start("fp8", 64.07)
    assert (r.block_size, r.kv_cache_tokens) == (2096, 6364935)


def test_every_layer_kept_builds_no_turboquant_workspace():
    # Mistral-7B-v0.1 (every layer a 4,096-token window) with sliding_window kept: no layer
    # stores TurboQuant, so no TurboQuant backend or workspace exists (it crashed kvplan)
    r = size(resolve_model("mistralai/Mistral-7B-v0.1"), resolve_gpu("h100"), EngineArgs(
        kv_cache_dtype="turboquant_k8v4", kv_cache_dtype_skip_layers=("sliding_window",)), "0.33")
    assert r.kv_bytes_per_token_per_gpu == 32 * 8 * 128 * 2 * 2
    assert not any("TurboQuant's decode workspace" in n for n in r.notes)


def test_speculative_kv_cache_dtype_for_the_drafter():
    # `speculative_config.kv_cache_dtype` (0.26+, model runner V2): the EAGLE3 head's layer
    # stores fp8 (2 KiB a token) beside the target's bf16 (128 KiB)
    from kvplan.core.specdec import from_config

    draft = resolve_model("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B")
    spec = from_config({"method": "eagle3", "num_speculative_tokens": 3,
                        "kv_cache_dtype": "fp8"}, draft)
    m, g = resolve_model("meta-llama/Llama-3.1-8B-Instruct"), resolve_gpu("h100")
    r = size(m, g, EngineArgs(speculative=spec), "0.28")
    assert r.kv_bytes_per_token_per_gpu == 32 * 4096 + 2048
    with pytest.raises(BadInput, match="0.26"):
        size(m, g, EngineArgs(speculative=spec), "0.25")


@pytest.mark.parametrize("version", ["0.28", "0.33"])
def test_gemma4_kept_layers_align_on_the_whole_model_head(version):
    # `_align_heterogeneous_kv_block_size` builds its pages from get_head_size() = 512 and
    # get_num_kv_heads() = 2 for Gemma 4 E4B, not from the first (256-wide) layer:
    # nvfp4 2 x 2 x (256 + 32) = 1,152 B a token against bf16 2 x 512 x 2 x 2 = 4,096;
    # block 16 x cdiv(16 x 4,096, 16 x 1,152) = 64, shared page 64 x 1,152 = 73,728
    gpu = resolve_gpu("b200")
    m = resolve_model("google/gemma-4-E4B-it")
    r = size(m, gpu, EngineArgs(kv_cache_dtype="nvfp4", max_model_len=32768,
                                kv_cache_dtype_skip_layers=("sliding_window",)), version)
    # bf16 sliding layers (1 KiB a token at 2 x 256 x 2 x 2 B) take the largest FlashInfer
    # block of 16/32/64 under 73,728 B: 32 (65,536 B, padded to 73,728); the nvfp4 full
    # layers' 64 x 1,152 = 73,728 equals it, so nothing is unified; 4 layers a group
    blocks = sorted({(g.spec.kind, g.block_size, g.spec.page_padded) for g in r.groups})
    assert blocks == [("full", 64, 0), ("sliding", 32, 73_728)]
    assert r.bytes_per_block == 4 * 73_728
    # the full layers kept instead: the bf16 full page (64 x 4,096 = 262,144) is the
    # largest, the nvfp4 sliding pages (64 x 576, padded to 73,728) pad up to it
    r = size(m, gpu, EngineArgs(kv_cache_dtype="nvfp4", max_model_len=32768,
                                kv_cache_dtype_skip_layers=("5", "11", "17", "23")), version)
    assert r.bytes_per_block == 4 * 262_144


def test_gemma4_31b_int8_per_token_head_with_full_layers_kept():
    # 0.33, H100: int8 per-token-head pages of 16 x (2 x 512 + 8) = 16,512 B a token against
    # bf16 16 x 512 x 2 x 2 = 32,768: block 16 x cdiv(16 x 32,768, 16 x 16,512) = 32, shared
    # page 32 x 16,512 = 528,384. Sliding layers (16 x (2 x 256 + 8) = 8,320 B a token) take
    # Triton's largest multiple of 16 under it, 48 (399,360 B, padded); the bf16 full
    # layers' 32 x 4 x 512 x 2 x 2 = 262,144 pad up to 528,384; 10 layers a group
    r = size(resolve_model("google/gemma-4-31B-it"), resolve_gpu("h100"),
             EngineArgs(kv_cache_dtype="int8_per_token_head", max_model_len=32768,
                        kv_cache_dtype_skip_layers=tuple(str(i) for i in range(5, 60, 6))),
             "0.33")
    assert sorted({(g.spec.kind, g.block_size) for g in r.groups}) == [("full", 32),
                                                                     ("sliding", 48)]
    assert r.bytes_per_block == 10 * 528_384


@pytest.mark.parametrize("model,gpu,kw,says", [
    # TurboQuant's boundary layers stay bf16 on FlashInfer (LBHNC/BLHNC) on SM10x; TurboQuant
    # reads only LBNHC: "No KV cache layout satisfies every supported set" (0.29+)
    ("meta-llama/Llama-3.1-8B-Instruct", "b200", {"kv_cache_dtype": "turboquant_k8v4"},
     "No KV cache layout satisfies"),
    # ... and on ROCm 0.29-0.30, before its selector filtered layouts for TurboQuant
    ("meta-llama/Llama-3.1-8B-Instruct", "mi300x", {"kv_cache_dtype": "turboquant_4bit_nc",
                                                     "_v": "0.30"},
     "ROCM_ATTN"),
    # TurboQuant has no sliding-window support (0.26+)
    ("mistralai/Mistral-7B-v0.1", "h100", {"kv_cache_dtype": "turboquant_k8v4"},
     "sliding-window layers"),
    # FlashInfer, the only NVFP4 backend, has no multimodal-prefix attention
    ("google/gemma-3-12b-it", "h100", {"kv_cache_dtype": "nvfp4"}, "multimodal-prefix"),
    ("google/gemma-3-12b-it", "b200", {"kv_cache_dtype": "nvfp4_4over6"}, "multimodal-prefix"),
    # a kept first layer runs the Triton composite, which refuses a per-token-head spec
    ("google/gemma-3-12b-it", "h100", {"kv_cache_dtype": "int8_per_token_head",
                                       "kv_cache_dtype_skip_layers": ("0",)},
     "Composite backends require the same KV cache spec"),
])
def test_quantized_formats_vllm_033_refuses(model, gpu, kw, says):
    kw = dict(kw)
    version = kw.pop("_v", "0.33")
    with pytest.raises(BadInput, match=says):
        size(resolve_model(model), resolve_gpu(gpu), EngineArgs(max_model_len=8192, **kw),
             version)


def test_quantized_formats_that_still_size():
    # Gemma 3 served text-only takes NVFP4 through FlashInfer (no prefix attention asked)
    r = size(resolve_model("google/gemma-3-12b-it"), resolve_gpu("b200"),
             EngineArgs(max_model_len=8192, kv_cache_dtype="nvfp4", language_model_only=True),
             "0.33")
    assert r.kv_dtype == "nvfp4"
    # TurboQuant on Hopper: the boundary layers run FLASH_ATTN, which declares no layout
    r = size(resolve_model("meta-llama/Llama-3.1-8B-Instruct"), resolve_gpu("h100"),
             EngineArgs(max_model_len=8192, kv_cache_dtype="turboquant_k8v4"), "0.33")
    assert r.fits
    # gpt-oss on ROCm with a per-token-head cache runs Triton everywhere: 16-token blocks
    # (ROCM_AITER_UNIFIED_ATTN takes no per-token-head dtypes); 20 GiB at 32k: 102,801
    # blocks of 208,896 B, 822,207 tokens
    r = size(resolve_model("openai/gpt-oss-20b"), resolve_gpu("mi300x"),
             EngineArgs(max_model_len=32768, kv_cache_dtype="int8_per_token_head",
                        kv_cache_memory_bytes=20 * GiB), "0.33")
    assert (r.block_size, r.num_gpu_blocks, r.kv_cache_tokens) == (16, 102801, 822207)


def test_skip_layers_match_a_draft_models_own_layer_indices(capsys):
    """review 24f F7: a separate draft model's layers are named from 0 again
    ("draft_model.model.layers.0"), and the skip list matches them too: Llama-3.3-70B TP4 +
    Llama-3.2-1B draft, fp8, skip 0 at 0.19 -> 41,472 + 15 x 256 + 512 = 45,824 B a token
    (the target's 79 fp8 layers x 512 + its bf16 layer 0's 1,024 = 41,472)."""
    from kvplan.cli import main

    assert main(["size", "meta-llama/Llama-3.3-70B-Instruct", "--gpu", "h100", "-tp", "4",
                 "--vllm-version", "0.19.0", "--kv-cache-dtype", "fp8",
                 "--kv-cache-dtype-skip-layers", "0", "--json", "--speculative-config",
                 '{"method": "draft_model", "model": "meta-llama/Llama-3.2-1B-Instruct", '
                 '"num_speculative_tokens": 4}']) in (0, 1)
    assert json.loads(capsys.readouterr().out)["kv_bytes_per_token_per_gpu"] == \
        79 * 512 + 1024 + 15 * 256 + 512 == 45824
