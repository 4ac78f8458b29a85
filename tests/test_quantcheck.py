"""`--quantization` as vLLM validates it (core/quantcheck.py; the 0.6.6-0.33 wheels)."""

import json

import pytest

from kvplan.cli import main
from kvplan.core import quantcheck as QC
from kvplan.core.sizing import EngineArgs, size
from kvplan.core.versions import VllmVersion
from kvplan.errors import BadInput
from kvplan.sources.resolve import resolve_gpu, resolve_model


def resolve(flag, ckpt, version="0.33", cc="9.0", vendor="nvidia", dtype="bfloat16", **kw):
    return QC.resolve(flag, ckpt, version=VllmVersion.of(version), cc=cc, vendor=vendor,
                      model_dtype=dtype, **kw)


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_awq_and_gptq_checkpoints_resolve_as_vllm_overrides_them():
    # `AutoAWQConfig` (0.24+) / `AutoGPTQConfig` (0.22+) claim the checkpoint whatever kernel
    assert resolve(None, "awq") == "auto_awq" and resolve("awq_marlin", "awq") == "auto_awq"
    assert resolve(None, "gptq", "0.22") == "auto_gptq"
    # before: Marlin when the GPU reaches its floor (8.0, 7.5 from 0.14), else the plain kernel
    assert resolve(None, "awq", "0.20", cc="8.0") == "awq_marlin"
    assert resolve(None, "awq", "0.13", cc="7.5", dtype="float16") == "awq"
    assert resolve(None, "awq", "0.14", cc="7.5") == "awq_marlin"
    assert resolve("gptq", "gptq", "0.20", cc="8.0", dtype="float16") == "gptq"  # forced
    # -q awq_marlin where Marlin cannot claim the checkpoint is a mismatch in vLLM
    with pytest.raises(BadInput, match="does not match the checkpoint's quantization"):
        resolve("awq_marlin", "awq", "0.13", cc="7.5", dtype="float16")


def test_a_flag_that_does_not_match_the_checkpoint_is_refused():
    with pytest.raises(BadInput, match=r"--quantization fp8 does not match .*\(awq\)"):
        resolve("fp8", "awq")
    with pytest.raises(BadInput, match="does not match"):
        resolve("compressed_tensors", "compressed-tensors")  # the flag is not normalised
    assert resolve("compressed-tensors", "compressed-tensors") == "compressed-tensors"
    # ModelOpt (0.10+), auto-round (0.15+) and gpt-oss MXFP4 (0.20+) ignore the flag
    assert resolve("fp8", "modelopt_fp4") == "modelopt_fp4"
    with pytest.raises(BadInput, match="does not match"):
        resolve("fp8", "modelopt", "0.9")
    assert resolve("awq", "mxfp4", model_type="gpt_oss") == "gpt_oss_mxfp4"
    assert resolve(None, "mxfp4", "0.19", model_type="gpt_oss") == "mxfp4"
    assert resolve("fp8", "auto-round") == "inc"


def test_modelopt_checkpoints_are_named_by_their_quant_algo():
    assert QC.checkpoint_method({"quant_method": "modelopt", "quant_algo": "NVFP4"},
                                None) == "modelopt_fp4"
    assert QC.checkpoint_method(None, {"quantization": {"quant_algo": "FP8"}}) == "modelopt"
    assert QC.checkpoint_method(None, {"quantization": {"quant_algo": "MXFP8"}}) == \
        "modelopt_mxfp8"
    assert QC.checkpoint_method({"quant_method": "compressed_tensors"}, None) == \
        "compressed-tensors"
    assert QC.checkpoint_method({}, None) is None


def test_only_online_methods_load_a_16_bit_checkpoint():
    assert resolve("fp8", None) == "fp8" and resolve("fp8_per_block", None, "0.20")
    with pytest.raises(BadInput, match="'Cannot find the config file for awq'"):
        resolve("awq", None)
    with pytest.raises(BadInput, match=r"does not quantize a 16-bit checkpoint with "
                       r"fp8_per_channel \(vLLM 0.24-0.33 does\)"):
        resolve("fp8_per_channel", None, "0.23")  # an online shorthand only from 0.24
    assert resolve("bitsandbytes", None, "0.27") == "bitsandbytes"
    with pytest.raises(BadInput, match="does not model the weights"):
        resolve("humming", None)


def test_the_gpu_dtype_platform_and_deprecation_checks():
    # `get_min_capability`: fp8 needs 8.0 up to 0.13, 7.5 from 0.14 (FP8 Marlin on Turing)
    with pytest.raises(BadInput, match="fp8 quantization on compute capability 7.5: it needs "
                       "8.0"):
        resolve("fp8", None, "0.13", cc="7.5", dtype="float16")
    assert resolve("fp8", None, "0.14", cc="7.5", dtype="float16") == "fp8"
    # an AWQ checkpoint on a V100 in every release (AWQ's floor is 7.5)
    with pytest.raises(BadInput, match=r"auto_awq \(the checkpoint's awq\)"):
        resolve(None, "awq", cc="7.0", dtype="float16")
    # `get_supported_act_dtypes`: GPTQ's own kernels take float16 only up to 0.21
    with pytest.raises(BadInput, match="runs gptq only in float16, not bfloat16"):
        resolve("gptq", "gptq", "0.21", cc="8.0")
    # `RocmPlatform.supported_quantization`
    with pytest.raises(BadInput, match="on ROCm does not support --quantization experts_int8"):
        resolve("experts_int8", None, cc="gfx942", vendor="amd")
    assert resolve("fp8", None, cc="gfx942", vendor="amd") == "fp8"
    # `DEPRECATED_QUANTIZATION_METHODS` (0.14+)
    with pytest.raises(BadInput, match="refuses the deprecated quantization method"):
        resolve(None, "fbgemm_fp8")
    assert resolve(None, "fbgemm_fp8", allow_deprecated=True) == "fbgemm_fp8"
    assert resolve(None, "fbgemm_fp8", "0.13") == "fbgemm_fp8"


def test_online_int8_experts_keep_one_byte_and_a_scale_per_row():
    # Qwen3-30B-A3B: 48 layers x 128 experts x 3 x 2048 x 768 parameters drop from 2 B to 1 B
    # and gain fp32 scales for w13's 2 x 768 rows and w2's 2048 (`Int8OnlineMoEMethod`); the
    # rest is the caching allocator's 2 MiB segment rounding
    m, h100 = resolve_model("Qwen/Qwen3-30B-A3B"), resolve_gpu("h100")
    base, int8 = (size(m, h100, EngineArgs(quantization=q, allow_deprecated_quantization=True),
                       "0.18") for q in (None, "experts_int8"))
    saved = 48 * 128 * 3 * 2048 * 768 - 48 * 128 * (2 * 768 + 2048) * 4
    assert saved == 28902948864
    assert abs(base.budget.weights - int8.budget.weights - saved) <= 2 * 2**20


def test_the_cli_names_a_method_the_release_lacks(capsys):
    code, _, err = run(capsys, "size", "qwen3-8b", "--gpu", "l40s", "-q", "bitsandbytes")
    assert code == 2 and "vLLM 0.33.0 has no --quantization bitsandbytes (it had it up to " \
        "0.27)" in err
    code, _, err = run(capsys, "size", "qwen3-8b", "--gpu", "l40s", "-q", "FP8")
    assert code == 2 and "did you mean fp8" in err  # vLLM stopped lower-casing it in 0.9.1
    code, out, err = run(capsys, "size", "qwen3-8b", "--gpu", "l40s", "-q", "fp8_per_block",
                         "--json")
    code2, out2, _ = run(capsys, "size", "qwen3-8b", "--gpu", "l40s", "-q", "fp8", "--json")
    assert code == code2 == 0, err
    assert json.loads(out)["weights_bytes_per_gpu"] == json.loads(out2)["weights_bytes_per_gpu"]
    assert json.loads(out)["quantization"] == "fp8_per_block"
    code, out, _ = run(capsys, "size", "Qwen/Qwen2.5-3B-Instruct-AWQ", "--gpu", "l40s", "--json",
                       "--vllm-version", "0.23")
    assert json.loads(out)["quantization"] == "awq_marlin"  # AWQMarlinConfig claims it
    code, _, err = run(capsys, "size", "Qwen/Qwen2.5-3B-Instruct-AWQ", "--gpu", "v100")
    assert code == 2 and "it needs 7.5 or newer" in err and "Traceback" not in err


def test_a_start_that_does_not_fit_is_offered_online_fp8_beside_more_tp():
    r = size(resolve_model("Qwen/Qwen3-32B"), resolve_gpu("l40s"),
             EngineArgs(max_model_len=8000), "0.33")
    hint = next(n for n in r.notes if n.startswith("fits with"))
    assert hint.startswith("fits with --tensor-parallel-size 2 (30.6 GiB of weights")
    assert "; or with --quantization fp8 (32.0 GiB of weights" in hint
    # not on a quantized checkpoint, where vLLM would refuse the flag
    r = size(resolve_model("Qwen/Qwen2.5-14B-Instruct-AWQ"), resolve_gpu("t4"),
             EngineArgs(max_model_len=32768), "0.13")
    assert not any("--quantization fp8" in n for n in r.notes)


@pytest.mark.parametrize("gpu", ["b200", "h100"])
def test_a_flag_the_checkpoint_overrides_changes_nothing(capsys, gpu):
    """review 24b F4: gpt-oss loads as gpt_oss_mxfp4 whatever --quantization says (0.20+);
    -q fp8 was an internal TypeError on B200 and dropped the MXFP4 padding on H100."""
    base = ["size", "openai/gpt-oss-20b", "--gpu", gpu, "--max-model-len", "32k", "--json"]
    assert main(base) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main([*base, "-q", "fp8"]) == 0
    flagged = json.loads(capsys.readouterr().out)
    for key in ("weights_bytes_per_gpu", "num_gpu_blocks", "available_kv_bytes"):
        assert flagged[key] == plain[key]
    assert flagged["notes"][0] == ("vLLM 0.33 loads this checkpoint as gpt_oss_mxfp4 whatever "
                                   "--quantization says: fp8 is ignored")


@pytest.mark.parametrize("gpu", ["h100", "b200", "a100-80gb"])
def test_the_reported_method_fed_back_changes_nothing(gpu):
    """Review 28 (metamorphic testing): `-q gpt_oss_mxfp4`, the method `size --json` reports
    for gpt-oss, dropped its MXFP4 padding (crashed on B200); `-q auto_gptq` sized a GPTQ MoE's
    experts as 16-bit. Every catalog model's reported method, given back, is a no-op."""
    from dataclasses import replace

    from kvplan import catalog
    from kvplan.core.sizing import EngineArgs, size
    from kvplan.errors import KvplanError
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    g = resolve_gpu(gpu)
    checked = 0
    for key in sorted(catalog.load("models").entries):
        args = EngineArgs(max_model_len=4096, tensor_parallel_size=8)
        try:
            base = size(resolve_model(key), g, args, "0.33", hints=False)
        except KvplanError:
            continue
        if base.quantization is None:
            continue
        again = size(resolve_model(key), g, replace(args, quantization=base.quantization),
                     "0.33", hints=False)
        assert (again.weights_total_bytes, again.num_gpu_blocks, again.moe_kernel) == (
            base.weights_total_bytes, base.num_gpu_blocks, base.moe_kernel), key
        checked += 1
    assert checked >= 20
