"""vLLM environment variables that change memory, mapped onto `EngineArgs` fields.

`kvplan size --env NAME=VALUE` (also `recommend` and `throughput`) and `kvplan check` (the
container's environment) read them here. vLLM parses the padding and sampler switches as
`bool(int(value))` (`vllm/envs.py`), so a value that is not an integer makes vLLM fail at
start-up; the AITER switches as `value.lower() in ("true", "1")`, and
`VLLM_USE_BREAKABLE_CUDAGRAPH` as `value == "1"` (set to anything else, it also stops vLLM
from turning breakable graphs on by default).
"""

from __future__ import annotations

from typing import Any

from kvplan.errors import BadInput

# name -> (EngineArgs field, what it does)
ENV_FIELDS: dict[str, tuple[str, str]] = {
    "VLLM_ROCM_MOE_PADDING": (
        "rocm_moe_padding", "ROCm: pad unquantized MoE weights by 256 B per row (default 1)"),
    "VLLM_ROCM_FP8_PADDING": (
        "rocm_fp8_padding", "ROCm: pad per-tensor and block FP8 linears (default 1)"),
    "VLLM_USE_FLASHINFER_SAMPLER": (
        "flashinfer_sampler", "sample through FlashInfer (profiled in 0.10-0.11.0)"),
    "VLLM_ROCM_USE_AITER": (
        "rocm_aiter", "ROCm: AITER kernels (default off); kvplan models the MoE weight shuffle"),
    "VLLM_ROCM_USE_AITER_MOE": (
        "rocm_aiter_moe", "ROCm: AITER fused MoE when AITER is on (default on)"),
    "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": (
        "estimate_cudagraphs", "0: the CUDA-graph memory estimate is not subtracted before "
        "sizing the KV cache (default 1 from 0.20)"),
    "VLLM_ATTENTION_BACKEND": (
        "attention_backend_env", "the attention backend (read by vLLM 0.11-0.14; as "
        "--attention-backend)"),
    "VLLM_ALLOW_LONG_MAX_MODEL_LEN": (
        "allow_long_max_model_len", "1: --max-model-len may exceed the length the config "
        "allows (vLLM warns; outputs past the trained length may be wrong)"),
    "VLLM_USE_BREAKABLE_CUDAGRAPH": (
        "breakable_cudagraph", "1: CUDA graphs broken around attention without torch.compile "
        "(0.24+; on by default for DeepSeek-V4 and other models vLLM lists, 0 opts out)"),
    "VLLM_USE_FLASHINFER_MOE_FP8": (
        "flashinfer_moe_fp8", "0: FP8 MoE off FlashInfer's kernels (0.16-0.23; unset or 1: "
        "FlashInfer first, which pads non-gated experts to 128 rows from 0.17; 0.24+ no "
        "longer read it: use --moe-backend triton)"),
    "VLLM_USE_V1": (
        "use_v1", "0: the V0 engine (0.8-0.10; 0.11+ refuse to start); 1: V1 only, where "
        "0.8-0.10 would fall back to V0 vLLM refuses to start"),
    "VLLM_VIDEO_LOADER_BACKEND": (
        "video_loader_backend", "video loader of multimodal models (default opencv); "
        "pynvvideocodec decodes on the GPU, which vLLM 0.25+ carves out of the KV cache"),
    "VLLM_PP_LAYER_PARTITION": (
        "pp_layer_partition", "layers per pipeline stage, e.g. 20,20,24 (default: even, the "
        "remainder on the middle stages)"),
    "VLLM_ALL2ALL_BACKEND": (
        "all2all_backend_env", "expert parallelism's all-to-all backend with -dp > 1 "
        "(0.9-0.15; then --all2all-backend): DeepEP's buffers are sized"),
    "VLLM_DEEPEP_BUFFER_SIZE_MB": (
        "deepep_buffer_mb", "DeepEP's NVLink buffer (and internode RDMA buffer), MiB "
        "(default 1024; 0.11+)"),
    "VLLM_DCP_Q_REPLICATE": (
        "dcp_q_replicate_env", "1 with -dcp > 1: DeepSeek-V2/V3-family MLA q_b_proj split "
        "TP/dcp ways (0.27-0.28; from 0.29 as --dcp-q-replicate, which it overrides)"),
}
# releases whose `vllm/envs.py` defines the variable (first, last; None: still read), read in
# the 0.6.4-0.33 wheels; the others are read by every release kvplan models. vLLM parses a
# variable only when it reads it, so a release without it ignores any value (with an
# "Unknown vLLM environment variable" warning).
READ_IN: dict[str, tuple[tuple[int, ...], tuple[int, ...] | None]] = {
    "VLLM_ROCM_MOE_PADDING": ((0, 8, 2), None), "VLLM_ROCM_FP8_PADDING": ((0, 8, 0), None),
    "VLLM_ROCM_USE_AITER": ((0, 8, 2), None), "VLLM_ROCM_USE_AITER_MOE": ((0, 8, 5), None),
    "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": ((0, 18, 0), None),
    "VLLM_ATTENTION_BACKEND": ((0,), (0, 14, 99)),
    "VLLM_USE_BREAKABLE_CUDAGRAPH": ((0, 22, 0), None),
    "VLLM_USE_FLASHINFER_MOE_FP8": ((0, 10, 0), (0, 23, 99)),
    "VLLM_USE_V1": ((0,), (0, 11, 0)), "VLLM_VIDEO_LOADER_BACKEND": ((0, 9, 0), None),
    "VLLM_DCP_Q_REPLICATE": ((0, 27, 0), None),
    "VLLM_ALL2ALL_BACKEND": ((0, 9, 0), (0, 15, 99)),
    "VLLM_DEEPEP_BUFFER_SIZE_MB": ((0, 11, 0), None),
}


def read_by(name: str, release: tuple[int, int, int]) -> bool:
    """Whether this vLLM release reads the variable at all (`READ_IN`)."""
    first, last = READ_IN.get(name, ((0,), None))
    return first <= release and (last is None or release <= last)


ENV_HELP = ("NAME=VALUE of the server's environment (repeatable). Modelled: "
            + ", ".join(ENV_FIELDS) + "; others are noted and ignored.")
# read as `value.lower() in ("true", "1")`, never an error (`envs.py`); the rest as integers
TEXT_FLAGS = {"VLLM_ROCM_USE_AITER", "VLLM_ROCM_USE_AITER_MOE", "VLLM_ALLOW_LONG_MAX_MODEL_LEN"}
EXACT_ONE = {"VLLM_USE_BREAKABLE_CUDAGRAPH"}  # `os.environ.get(name, "0") == "1"`
# read as the string
STRINGS = {"VLLM_VIDEO_LOADER_BACKEND", "VLLM_ATTENTION_BACKEND", "VLLM_PP_LAYER_PARTITION",
           "VLLM_ALL2ALL_BACKEND"}
INTS = {"VLLM_DEEPEP_BUFFER_SIZE_MB"}  # `int(os.getenv(...))`


def int_bool(name: str, value: str) -> bool:
    try:
        return bool(int(value.strip()))
    except ValueError:
        raise BadInput(f"{name}={value!r}: vLLM reads it as an integer (0 or 1) and fails "
                       "to start on anything else", hint=f"set {name}=0 or {name}=1") from None


def parse_value(name: str, value: str) -> bool | str | int:
    """A modelled variable's value as vLLM reads it."""
    if name in STRINGS:
        return value
    if name in TEXT_FLAGS:
        return value.strip().lower() in ("true", "1")
    if name in EXACT_ONE:
        return value == "1"
    if name in INTS:
        try:
            n = int(value.strip())
        except ValueError:
            n = -1
        if n < 1:
            raise BadInput(f"{name}={value!r}: vLLM reads it as a positive integer",
                           hint=f"e.g. {name}=1024")
        return n
    return int_bool(name, value)


def apply_env(args: Any, env: dict[str, str],
              release: tuple[int, int, int] | None = None) -> tuple[list[str], list[str]]:
    """Set the fields of `args` the modelled variables name; return the names of the
    variables kvplan does not model, and of those `release` does not read whose value does
    not parse (both ignored: such a value is an error only where the release reads it;
    a readable value is kept, so the sizing notes can say what the release reads instead)."""
    ignored, unparsed = [], []
    for name, value in env.items():
        if name not in ENV_FIELDS:
            ignored.append(name)
            continue
        try:
            setattr(args, ENV_FIELDS[name][0], parse_value(name, value))
        except BadInput:
            if release is None or read_by(name, release):
                raise
            unparsed.append(name)
    return ignored, unparsed


def apply_assignments(args: Any, items: list[str] | None,
                      release: tuple[int, int, int] | None = None) -> str | None:
    """Apply `--env NAME=VALUE` items to `args` for vLLM `release`; a note naming the
    variables kvplan does not model or the release does not read (None when none)."""
    if not items:
        return None
    ignored, unparsed = apply_env(args, parse_assignments(items), release)
    notes = [f"--env {', '.join(ignored)}: not modelled, ignored"] if ignored else []
    if unparsed:
        notes.append(f"--env {', '.join(unparsed)}: not read by vLLM "
                     f"{'.'.join(map(str, release or ()))}, which warns of an unknown "
                     "variable and ignores it")
    return "; ".join(notes) or None


def parse_assignments(items: list[str]) -> dict[str, str]:
    """`NAME=VALUE` strings (from `--env`) as a mapping."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise BadInput(f"--env {item!r} is not NAME=VALUE", hint="e.g. --env "
                           "VLLM_ROCM_MOE_PADDING=0")
        out[name.strip()] = value
    return out


def env_for(args: Any) -> list[str]:
    """`NAME=VALUE` for every modelled variable whose field differs from vLLM's default
    (to prefix a launch command)."""
    from dataclasses import fields

    defaults = {f.name: f.default for f in fields(args)}
    return [f"{name}={_shown(getattr(args, fld))}" for name, (fld, _) in ENV_FIELDS.items()
            if getattr(args, fld) != defaults.get(fld) and getattr(args, fld) is not None]


def _shown(value: bool | str | int) -> str:
    return value if isinstance(value, str) else str(int(value))
