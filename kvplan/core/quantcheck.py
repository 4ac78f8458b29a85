"""Which `--quantization` vLLM accepts for a checkpoint on a GPU, and the method it runs.

vLLM checks the flag at start-up in this order (read in the 0.6.6-0.33 wheels):
`ModelConfig._verify_quantization` (config.py; config/model.py from 0.11) matches the
checkpoint's `quant_method` against the flag (each method class's
`override_quantization_method` may claim the checkpoint), then the platform's list (ROCm) and,
from 0.14, `DEPRECATED_QUANTIZATION_METHODS`; `get_quant_config`
(model_loader/weight_utils.py) needs the method's config file unless the method quantizes
a 16-bit checkpoint online; `VllmConfig._get_quantization_config` checks the GPU against the
class's `get_min_capability()` and the model dtype against `get_supported_act_dtypes()`.
Whether a name exists at all in a release is `vllm_flags.json`'s (engines/vllm_registry.py).
"""

from __future__ import annotations

from kvplan.core.versions import VllmVersion, cc_tuple
from kvplan.errors import BadInput

Release = tuple[int, int, int]

# (first release, method run) of the automatic upgrade of an AWQ / GPTQ checkpoint:
# `AutoAWQConfig` (0.24+) and `AutoGPTQConfig` (0.22+) claim it whatever kernel runs later
_AUTO = {"awq": ((0, 24, 0), "auto_awq"), "gptq": ((0, 22, 0), "auto_gptq")}
# flags an AWQ / GPTQ checkpoint accepts (`override_quantization_method` of the Marlin,
# MoE-WNA16, BitBLAS and Auto* classes)
_WNA16_FLAGS = {"awq": {"awq", "awq_marlin", "auto_awq", "marlin", "moe_wna16"},
                "gptq": {"gptq", "gptq_marlin", "auto_gptq", "marlin", "moe_wna16",
                         "gptq_bitblas", "bitblas", "gptq_marlin_24"}}

# Methods that quantize a 16-bit checkpoint as it loads (no config file: `get_quant_config`
# returns `quant_cls()`), with the releases that have them (last None: still in 0.33)
ONLINE: dict[str, tuple[Release, Release | None]] = {
    "fp8": ((0, 6, 0), None), "experts_int8": ((0, 6, 0), None),
    "bitsandbytes": ((0, 6, 0), (0, 27, 99)), "ptpc_fp8": ((0, 7, 3), (0, 18, 99)),
    "mxfp4": ((0, 10, 1), None), "mxfp8": ((0, 19, 0), None),
    "fp8_per_tensor": ((0, 20, 0), None), "fp8_per_block": ((0, 20, 0), None),
    "int8_per_channel_weight_only": ((0, 20, 0), None),
    "fp8_per_channel": ((0, 24, 0), None), "nvfp4_per_token": ((0, 26, 0), None),
}
# online methods whose weights kvplan does not price (their formats are not in params.py)
_UNPRICED_ONLINE = {"rtn", "fp_quant", "humming", "inc", "online", "tpu_int8", "neuron_quant"}

# `get_min_capability()` (x10) by release: ((first release, value), ...), newest last
_MIN_CC: dict[str, tuple[tuple[Release, int], ...]] = {
    "fp8": (((0, 0, 0), 80), ((0, 14, 0), 75)),
    "awq": (((0, 0, 0), 75),), "auto_awq": (((0, 0, 0), 75),),
    "awq_marlin": (((0, 0, 0), 80), ((0, 14, 0), 75)),
    "gptq": (((0, 0, 0), 60),), "auto_gptq": (((0, 0, 0), 60),),
    "gptq_marlin": (((0, 0, 0), 80), ((0, 14, 0), 75), ((0, 22, 0), 60)),
    "marlin": (((0, 0, 0), 80),), "gptq_marlin_24": (((0, 0, 0), 80),),
    "bitblas": (((0, 0, 0), 70),), "gptq_bitblas": (((0, 0, 0), 70), ((0, 9, 0), 80)),
    "compressed-tensors": (((0, 0, 0), 70),), "bitsandbytes": (((0, 0, 0), 70),),
    "quark": (((0, 0, 0), 70),), "moe_wna16": (((0, 0, 0), 70),),
    "torchao": (((0, 0, 0), 75),), "experts_int8": (((0, 0, 0), 80),),
    "fbgemm_fp8": (((0, 0, 0), 80),), "mxfp4": (((0, 0, 0), 80),),
    "gpt_oss_mxfp4": (((0, 0, 0), 80),), "ptpc_fp8": (((0, 0, 0), 80), ((0, 14, 0), 75)),
    "modelopt": (((0, 0, 0), 89), ((0, 27, 0), 80)),
    "modelopt_fp4": (((0, 0, 0), 80), ((0, 14, 0), 75)), "nvfp4": (((0, 0, 0), 100),),
    "modelopt_mxfp8": (((0, 0, 0), 100), ((0, 20, 0), 80)),
    "modelopt_mixed": (((0, 0, 0), 89), ((0, 24, 0), 75)),
    "mxfp8": (((0, 0, 0), 100), ((0, 20, 0), 80)),
    "gguf": (((0, 0, 0), 60),), "inc": (((0, 0, 0), 60),), "fp_quant": (((0, 0, 0), 100),),
    **{m: (((0, 0, 0), 75),) for m in ("fp8_per_tensor", "fp8_per_block", "fp8_per_channel",
                                      "int8_per_channel_weight_only", "nvfp4_per_token")},
}
# `get_supported_act_dtypes()` where it excludes one of float16 / bfloat16:
# ((first release, dtypes), ...), newest last
_ACT: dict[str, tuple[tuple[Release, tuple[str, ...]], ...]] = {
    "awq": (((0, 0, 0), ("float16",)), ((0, 24, 0), ("float16", "bfloat16"))),
    "gptq": (((0, 0, 0), ("float16",)), ((0, 22, 0), ("float16", "bfloat16"))),
    "marlin": (((0, 0, 0), ("float16",)),), "gptq_marlin_24": (((0, 0, 0), ("float16",)),),
    "mxfp4": (((0, 0, 0), ("bfloat16",)),), "gpt_oss_mxfp4": (((0, 0, 0), ("bfloat16",)),),
    "modelopt_mxfp8": (((0, 0, 0), ("bfloat16",)),), "mxfp8": (((0, 0, 0), ("bfloat16",)),),
}
# `RocmPlatform.supported_quantization`: (release, added, removed), applied in order
_ROCM_STEPS: tuple[tuple[Release, frozenset[str], frozenset[str]], ...] = tuple(
    (r, frozenset(add.split()), frozenset(rm.split())) for r, add, rm in (
        ((0, 0, 0), "awq gptq fp8 compressed_tensors compressed-tensors fbgemm_fp8 gguf", ""),
        ((0, 7, 3), "quark ptpc_fp8", ""), ((0, 8, 5), "", "compressed_tensors"),
        ((0, 10, 1), "mxfp4", ""), ((0, 10, 2), "petit_nvfp4 torchao", ""),
        ((0, 14, 0), "awq_marlin gptq_marlin", ""), ((0, 17, 1), "bitsandbytes", ""),
        ((0, 19, 0), "", "ptpc_fp8"), ((0, 20, 0), "gpt_oss_mxfp4 modelopt_fp4", "petit_nvfp4"),
        ((0, 21, 0), "deepseek_v4_fp8 mxfp8 modelopt modelopt_mxfp8 modelopt_mixed "
         "fp8_per_tensor fp8_per_block online", ""),
        ((0, 22, 0), "auto_gptq", ""), ((0, 24, 0), "auto_awq fp8_per_channel", "gguf"),
        ((0, 25, 0), "", "gptq_marlin"), ((0, 28, 0), "inc", "bitsandbytes")))
# `DEPRECATED_QUANTIZATION_METHODS` (0.14+): refused without --allow-deprecated-quantization
_DEPRECATED: tuple[tuple[Release, frozenset[str]], ...] = tuple(
    (r, frozenset(names.split())) for r, names in (
        ((0, 14, 0), "deepspeedfp tpu_int8 ptpc_fp8 fbgemm_fp8 fp_quant bitblas gptq_marlin_24 "
         "gptq_bitblas hqq experts_int8 ipex auto-round rtn petit_nvfp4"),
        ((0, 15, 0), "tpu_int8 ptpc_fp8 fbgemm_fp8 fp_quant bitblas gptq_marlin_24 gptq_bitblas "
         "experts_int8 ipex petit_nvfp4"),
        ((0, 16, 0), "tpu_int8 ptpc_fp8 fbgemm_fp8 fp_quant experts_int8 petit_nvfp4"),
        ((0, 19, 0), "tpu_int8 fbgemm_fp8 fp_quant experts_int8 petit_nvfp4"),
        ((0, 20, 0), "tpu_int8 fbgemm_fp8 fp_quant"), ((0, 23, 0), "fbgemm_fp8 fp_quant")))


def _at(table: tuple, v: Release):
    """The value of the newest (first release, value) row at or before `v` (None: none)."""
    out = None
    for first, value in table:
        if v >= first:
            out = value
    return out


def rocm_methods(v: Release) -> frozenset[str]:
    """The methods vLLM's ROCm platform allows at release `v`."""
    names: set[str] = set()
    for first, add, rm in _ROCM_STEPS:
        if v >= first:
            names = (names | add) - rm
    return frozenset(names)


def _cc10(cc: str) -> int:
    """A compute capability as vLLM compares it (`to_int`: 8.9 -> 89; 0 when not one)."""
    major, minor = cc_tuple(cc)
    return major * 10 + minor


def marlin_floor(v: Release) -> int:
    """Lowest compute capability (x10) of the Marlin kernels that take AWQ / GPTQ
    checkpoints when no flag is given (`query_marlin_supported_quant_types`): 8.0, 7.5 from
    0.14."""
    return 75 if v >= (0, 14, 0) else 80


def checkpoint_method(quant_config: dict | None, modelopt_file: dict | None) -> str | None:
    """The method the checkpoint claims as `_verify_quantization` reads it: its lower-cased
    `quant_method` ('compressed_tensors' spelled 'compressed-tensors'), a ModelOpt one by its
    `quant_algo` (each ModelOpt class's `override_quantization_method`: FP8 -> modelopt, *FP4
    -> modelopt_fp4, *MXFP8 -> modelopt_mxfp8, MIXED_PRECISION -> modelopt_mixed)."""
    qc = quant_config if isinstance(quant_config, dict) else {}
    m = str(qc.get("quant_method") or "").strip().lower()
    if isinstance(modelopt_file, dict) or m.startswith("modelopt"):
        src = modelopt_file if isinstance(modelopt_file, dict) else qc
        inner = src.get("quantization")
        algo = str((inner if isinstance(inner, dict) else src).get("quant_algo") or "").upper()
        return ("modelopt_fp4" if "FP4" in algo else "modelopt_mxfp8" if "MXFP8" in algo
                else "modelopt_mixed" if algo == "MIXED_PRECISION" else m or "modelopt")
    return {"compressed_tensors": "compressed-tensors"}.get(m, m) or None


def given_flag(flag: str | None) -> str | None:
    """--quantization as vLLM takes it: None, empty and "None" are no flag."""
    return None if flag is None or str(flag).strip() in ("", "None") else str(flag).strip()


def resolve(flag: str | None, ckpt: str | None, *, version: VllmVersion, cc: str,
            vendor: str, model_dtype: str, model_type: str = "",
            allow_deprecated: bool = False) -> str | None:
    """The quantization method vLLM runs for `--quantization flag` on a checkpoint quantized
    with `ckpt` (None: 16-bit), or BadInput where vLLM refuses the start."""
    v = version.v
    q = given_flag(flag)
    if q and v < (0, 9, 1):  # `ModelConfig.__post_init__` lower-cased it up to 0.9.0
        q = q.lower()
    method = _claim(q, ckpt, v, cc, vendor, model_type)
    if method is None:
        return None
    what = method if method in (q, ckpt) else f"{method} (the checkpoint's {ckpt})"
    if ckpt and method == ckpt:
        _check_known(ckpt, version.text)
    if not ckpt:
        _check_online(method, v, version.text)
    if vendor == "amd":
        if method not in rocm_methods(v):
            raise BadInput(f"vLLM {version.text} on ROCm does not support --quantization "
                           f"{what} ('{method} quantization is currently not supported')",
                           flag="quantization")
    elif vendor == "nvidia":
        need, have = _at(_MIN_CC.get(method, ()), v), _cc10(cc)
        if need and have and have < need:
            raise BadInput(f"vLLM {version.text} refuses {what} quantization on compute "
                           f"capability {cc}: it needs {need // 10}.{need % 10} or newer",
                           hint="use a newer GPU or another quantization", flag="quantization")
    if version.at_least(0, 14) and not allow_deprecated and method in _at(_DEPRECATED, v):
        raise BadInput(f"vLLM {version.text} refuses the deprecated quantization method "
                       f"{what}", hint="add --allow-deprecated-quantization",
                       flag="quantization")
    act = _at(_ACT.get(method, ()), v)
    if act and model_dtype not in act:
        raise BadInput(f"vLLM {version.text} runs {what} only in {' or '.join(act)}, not "
                       f"{model_dtype}", hint=f"use --dtype {act[0]}", flag="quantization")
    return method


def _claim(q: str | None, ckpt: str | None, v: Release, cc: str, vendor: str,
           model_type: str) -> str | None:
    """`_verify_quantization`'s override loop and name match: the method that claims the
    checkpoint, or the flag on a 16-bit one."""
    if not ckpt:
        return q
    if ckpt in _WNA16_FLAGS:
        if q is not None and q not in _WNA16_FLAGS[ckpt]:
            raise _mismatch(ckpt, q)
        since, auto = _AUTO[ckpt]
        if v >= since and q != "moe_wna16":
            return auto
        marlin_ok = vendor == "nvidia" and _cc10(cc) >= marlin_floor(v)
        if q in (None, f"{ckpt}_marlin", "marlin") and marlin_ok:
            return f"{ckpt}_marlin"
        if q in (f"{ckpt}_marlin", "marlin"):  # the Marlin class does not claim it here
            raise _mismatch(ckpt, q)
        return q or ckpt
    if ckpt in ("auto-round", "intel/auto-round") and v >= (0, 15, 0):
        # (both overrides below are in CLAIM_WHATEVER_THE_FLAG)
        return "inc"  # `INCConfig.override_quantization_method`, whatever the flag
    if ckpt == "mxfp4" and model_type == "gpt_oss" and v >= (0, 20, 0):
        return "gpt_oss_mxfp4"  # `GptOssMxfp4Config`, whatever the flag
    if ckpt.startswith("modelopt") and v >= (0, 10, 0) or q is None or q == ckpt:
        return ckpt
    if ckpt.startswith("modelopt") and v < (0, 10, 1):  # the flag is how it reads the file
        raise _mismatch(ckpt, q, hint=f"use --quantization {ckpt}")
    raise _mismatch(ckpt, q)


# methods whose config claims the checkpoint whatever --quantization names (`resolve`)
CLAIM_WHATEVER_THE_FLAG = frozenset({"inc", "gpt_oss_mxfp4"})


def _check_known(ckpt: str, text: str) -> None:
    """A checkpoint method the release does not list (`_verify_quantization`: "Unknown
    quantization method"; the release's `QUANTIZATION_METHODS`, as `vllm_flags.json`
    records --quantization's choices)."""
    from kvplan.engines.vllm_registry import missing_choice

    miss = missing_choice("--quantization", ckpt, text)
    if miss:
        src = ("the name vLLM gives the ModelOpt export's quant_algo" if
               ckpt.startswith("modelopt") else
               "quantization_config.quant_method; 'Unknown quantization method'")
        raise BadInput(f"vLLM {text} does not know the checkpoint's quantization method "
                       f"{ckpt!r} ({'; '.join(filter(None, (src, miss[2].strip(' ()'))))})",
                       hint="check the quant_method the export "
                       "wrote, or use a release that has the method", flag="quantization")


def _mismatch(ckpt: str, q: str, hint: str = "drop --quantization: vLLM reads the method "
              "from the checkpoint") -> BadInput:
    return BadInput(f"--quantization {q} does not match the checkpoint's quantization "
                    f"({ckpt}); vLLM refuses the pair", hint=hint, flag="quantization")


def _check_online(method: str, v: Release, text: str) -> None:
    """A 16-bit checkpoint: only the online methods load without a config file."""
    span = ONLINE.get(method)
    if span and span[0] <= v and (span[1] is None or v <= span[1]):
        return
    if span:
        lo, hi = (".".join(map(str, r[:2])) for r in (span[0], span[1] or (0, 33)))
        raise BadInput(f"vLLM {text} does not quantize a 16-bit checkpoint with {method} "
                       f"(vLLM {lo}-{hi} does)", hint=f"use --vllm-version {lo}-{hi} or "
                       "another method", flag="quantization")
    if method in _UNPRICED_ONLINE:
        raise BadInput(f"kvplan does not model the weights of online --quantization {method}",
                       hint="size the quantized checkpoint instead", flag="quantization")
    online = sorted(m for m, (lo, hi) in ONLINE.items() if lo <= v and (hi is None or v <= hi))
    raise BadInput(f"--quantization {method} needs a checkpoint quantized with it (vLLM "
                   f"{text}: 'Cannot find the config file for {method}')",
                   hint="pick the quantized checkpoint as MODEL, or quantize online with "
                   + ", ".join(online), flag="quantization")
