"""vLLM 0.8-0.10's V0 fallback (`EngineArgs._is_v1_supported_oracle`) and VLLM_USE_V1."""

import pytest

from kvplan.core.sizing import EngineArgs, size
from kvplan.core.versions import VllmVersion
from kvplan.engines.vllm_env import apply_assignments
from kvplan.errors import BadInput
from kvplan.sources.resolve import resolve_gpu, resolve_model

GiB = 2**30


def fallback(version, cc="9.0", kv="auto", archs=("LlamaForCausalLM",), mla=False,
             vendor="nvidia", **kw):
    r = VllmVersion.of(version).v0_fallback(cc=cc, vendor=vendor, kv_cache_dtype=kv,
                                            architectures=list(archs), mla=mla, **kw)
    return r[0] if r else None


def test_compute_capability_below_8_runs_v0_from_0_8_to_0_10_1():
    assert "compute capability 7.0" in fallback("0.8.5", cc="7.0")
    assert "compute capability 7.5" in fallback("0.10.1", cc="7.5")
    assert fallback("0.10.2", cc="7.5") is None  # the check is gone from 0.10.2
    assert fallback("0.7.3", cc="7.0") is None  # V0 is the default there anyway
    assert fallback("0.9.2", cc="gfx942", vendor="amd") is None


def test_kv_cache_dtype_fallback_by_release():
    assert fallback("0.8.1", kv="fp8") is not None  # 0.8.0/0.8.1: any non-auto dtype
    assert fallback("0.8.2", kv="fp8") is None  # FlashAttention 3 on Hopper stores fp8
    assert fallback("0.9.2", kv="fp8", cc="8.9") is not None  # L40S: FA2 has no fp8
    assert fallback("0.9.2", kv="fp8", cc="8.0") is not None
    assert fallback("0.9.2", kv="bfloat16") is not None  # a 16-bit name is not fp8 either
    assert fallback("0.10.1", kv="fp8", cc="10.0") is None  # SM100 takes every dtype
    assert fallback("0.10.2", kv="bfloat16", cc="8.0") is None
    assert fallback("0.10.2", kv="fp8", cc="8.0", mla=True) is None  # FlashMLA stores fp8
    assert fallback("0.10.2", kv="fp8", cc="8.9") is not None
    assert fallback("0.8.5", kv="fp8", cc="gfx942", vendor="amd") is not None
    assert fallback("0.9.0", kv="fp8", cc="gfx942", vendor="amd") is None


def test_v0_only_model_classes():
    assert "V0-only" in fallback("0.10.0", archs=["JambaForCausalLM"])
    assert fallback("0.10.1", archs=["JambaForCausalLM"]) is None
    assert fallback("0.9.1", archs=["NemotronHForCausalLM"]) is not None
    assert fallback("0.9.2", archs=["NemotronHForCausalLM"]) is None


def test_other_v0_fallbacks_by_release():
    assert fallback("0.8.2", quantization="bitsandbytes") is not None
    assert fallback("0.8.3", quantization="bitsandbytes") is None
    assert fallback("0.8.5", quantization="gguf") is not None
    assert fallback("0.9.0", quantization="gguf") is None
    assert fallback("0.9.1", dtype="float32") is not None
    assert fallback("0.9.2", dtype="float32") is None
    assert fallback("0.8.2", cpu_offload=True) is not None
    assert fallback("0.8.3", cpu_offload=True) is None
    assert fallback("0.8.5", pp=2) is not None and fallback("0.9.0", pp=2) is None
    # to 0.8.2 LoRA and PP are "off by default": VLLM_USE_V1=1 runs them on V1
    r = VllmVersion.of("0.8.2").v0_fallback(cc="9.0", vendor="nvidia", kv_cache_dtype="auto",
                                            architectures=[], mla=False, lora=True)
    assert r == ("--enable-lora is off by default on V1", False)
    assert fallback("0.8.3", lora=True) is None


def test_v100_on_0_8_5_is_sized_as_v0():
    # vLLM 0.8.5 on a V100 32GB (Zhihu article, benchmarks/cases.yaml): "model weights take
    # 14.25GiB; non_torch_memory takes 0.09GiB; PyTorch activation peak memory takes 4.35GiB;
    # the rest of the memory reserved for KV Cache is 9.88GiB" (V0's profile at 32,768 tokens)
    m, g = resolve_model("Qwen/Qwen2.5-7B-Instruct"), resolve_gpu("v100-32gb")
    r = size(m, g, EngineArgs(max_model_len=32768, gpu_memory_utilization=0.9), "0.8.5")
    assert any("V0 engine: compute capability 7.0" in n for n in r.notes)
    assert r.to_json()["engine"] == "v0" and not r.to_json()["model_runner_v2"]
    assert r.max_num_batched_tokens == 32768 and r.max_num_seqs == 256  # V0's defaults
    # the weights as logged (the checkpoint, its rotary cache and the allocator's blocks); the
    # V0 activation (4.41 modelled) and non-torch (0.13) terms sit 0.09 GiB above the log's
    assert r.budget.weights / GiB == pytest.approx(14.25, abs=0.005)
    assert r.budget.available_kv / GiB == pytest.approx(9.88, abs=0.11)
    assert r.budget.activation / GiB == pytest.approx(4.35, abs=0.1)


def test_vllm_use_v1():
    m, h100 = resolve_model("Qwen/Qwen2.5-7B-Instruct"), resolve_gpu("h100")
    a = EngineArgs(max_model_len=4096, kv_cache_dtype="fp8")
    l40s = resolve_gpu("l40s")
    apply_assignments(a, ["VLLM_USE_V1=1"])
    with pytest.raises(BadInput, match="VLLM_USE_V1=1 with vLLM 0.9.2: --kv-cache-dtype fp8"):
        size(m, l40s, a, "0.9.2")
    assert not any("V0" in n for n in size(m, h100, a, "0.9.2").notes)
    b = EngineArgs(max_model_len=4096)
    apply_assignments(b, ["VLLM_USE_V1=0"])
    assert any("V0 engine: VLLM_USE_V1=0" in n for n in size(m, h100, b, "0.9.2").notes)
    with pytest.raises(BadInput, match="has no V0 engine"):
        size(m, h100, b, "0.11")
    # 0.11.1 dropped the variable from `envs.py`: vLLM warns of an unknown one and runs V1
    assert "no longer reads it (0.11.1+) and runs V1" in " ".join(size(m, h100, b, "0.33").notes)


def test_env_values_parse_only_where_the_release_reads_them():
    # vLLM parses a variable when it reads it (`envs.py` lambdas): VLLM_DCP_Q_REPLICATE
    # (0.27+) and VLLM_USE_FLASHINFER_MOE_FP8 (0.10-0.23) as integers
    for release, var in (((0, 20, 0), "VLLM_DCP_Q_REPLICATE"),
                         ((0, 25, 0), "VLLM_USE_FLASHINFER_MOE_FP8")):
        a = EngineArgs()
        note = apply_assignments(a, [f"{var}=true"], release)
        assert note == (f"--env {var}: not read by vLLM {'.'.join(map(str, release))}, which "
                        "warns of an unknown variable and ignores it")
    for release in ((0, 27, 0), None):
        with pytest.raises(BadInput, match="reads it as an integer"):
            apply_assignments(EngineArgs(), ["VLLM_DCP_Q_REPLICATE=true"], release)


def test_hybrid_models_on_v0_are_refused_with_the_first_v1_release():
    m = resolve_model("ai21labs/AI21-Jamba-1.5-Mini")
    with pytest.raises(BadInput, match="V0 engine") as e:
        size(m, resolve_gpu("h100"), EngineArgs(tensor_parallel_size=4), "0.10.0")
    assert e.value.hint == "size it for vLLM 0.10.1 or later (V1)"
    with pytest.raises(BadInput, match="V0 engine"):  # before 0.8 V0 is all there is
        size(m, resolve_gpu("h100"), EngineArgs(tensor_parallel_size=4), "0.7.3")


@pytest.mark.parametrize("model, arch, after", [
    ("qwen3.5-27b", "Qwen3_5ForConditionalGeneration", "0.16.0"),
    ("qwen3-next-80b-a3b-thinking", "Qwen3NextForCausalLM", "0.10.1"),
    ("granite-4.0-h-tiny", "GraniteMoeHybridForCausalLM", "0.8.5"),
    ("kimi-k3", "KimiK3ForConditionalGeneration", "0.26.0"),
])
def test_a_release_without_the_architecture_says_so_whatever_moves_it_to_v0(model, arch, after):
    # review 23a #7: -pp 2 moves 0.8.5 to V0 (`_is_v1_supported_oracle`), but the model
    # registry refuses first ("Model architectures [...] are not supported")
    m, a100 = resolve_model(model), resolve_gpu("a100")
    for pp in (1, 2):
        with pytest.raises(BadInput) as e:
            size(m, a100, EngineArgs(pipeline_parallel_size=pp), "0.8.5")
        assert e.value.line() == (f"vLLM 0.8.5 does not have {arch} yet (its model registry "
                                  f"lists it after {after}) (use a later --vllm-version)")


def test_a_hybrid_moved_to_v0_by_a_flag_names_the_flag():
    # 0.10.0's V1 serves granite-4.0-h (V0-only to 0.9.1); an fp8 cache V1 cannot store on
    # an A100 (`is_kv_cache_dtype_supported`) moves the start to V0, so the fix is that flag
    m = resolve_model("granite-4.0-h-tiny")
    with pytest.raises(BadInput, match="V0 engine") as e:
        size(m, resolve_gpu("a100"), EngineArgs(kv_cache_dtype="fp8"), "0.10.0")
    assert e.value.hint == ("its V1 engine serves it without this: --kv-cache-dtype fp8 is not "
                            "one V1 stores on this GPU")
    with pytest.raises(BadInput, match="V0 engine") as e:
        size(m, resolve_gpu("a100"), EngineArgs(), "0.9.1")
    assert e.value.hint == "size it for vLLM 0.9.2 or later (V1)"
