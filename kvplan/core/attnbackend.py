"""`--attention-backend` (0.13+; `VLLM_ATTENTION_BACKEND` in 0.11-0.14): the backends kvplan
models when a user forces one, what vLLM checks before it takes it, and the block size it
then uses. Read in the 0.11.0-0.33.0 wheels (`AttentionBackendEnum`, each backend's
`supports_compute_capability`, `supported_kv_cache_dtypes`, `get_supported_kernel_block_sizes`
and `get_preferred_block_size`; `CudaPlatform.check_and_update_config` forced the MLA sizes
up to 0.17). From 0.11.1 a forced backend never silently falls back: "Selected backend X is
not valid for this configuration". The default choice is `backends.py`'s."""

from __future__ import annotations

from kvplan.core.record import record
from kvplan.core.versions import VllmVersion, cc_tuple
from kvplan.errors import BadInput

B16 = ("auto", "float16", "bfloat16")
FP8 = ("fp8", "fp8_e4m3")


@record(frozen=True)
class Backend:
    kind: str  # "dense", "mla" (DeepSeek-style latent cache) or "sparse" (V3.2-style)
    vendor: str  # "nvidia", "amd" or "any"
    cc: tuple[tuple[int, int], tuple[int, int]] | None  # NVIDIA compute capability range
    kv: tuple[str, ...]  # --kv-cache-dtype values it stores (0.33)
    block: int  # the block it takes without --block-size


BACKENDS: dict[str, Backend] = {
    "FLASH_ATTN": Backend("dense", "nvidia", ((8, 0), (12, 1)), B16 + FP8, 16),
    "FLASHINFER": Backend("dense", "nvidia", ((8, 0), (12, 1)), B16 + FP8 + ("fp8_e5m2",),
                          16),
    "TRITON_ATTN": Backend("dense", "any", None, B16 + FP8 + ("fp8_e5m2",), 16),
    "FLEX_ATTENTION": Backend("dense", "any", None, B16, 16),
    "ROCM_ATTN": Backend("dense", "amd", None, B16 + FP8 + ("fp8_e5m2",), 16),
    "ROCM_AITER_FA": Backend("dense", "amd", None, B16 + FP8 + ("fp8_e5m2",), 16),
    "ROCM_AITER_UNIFIED_ATTN": Backend("dense", "amd", None, B16 + FP8 + ("fp8_e5m2",), 64),
    "TRITON_MLA": Backend("mla", "any", None, B16 + FP8, 16),
    "FLASH_ATTN_MLA": Backend("mla", "nvidia", ((9, 0), (9, 9)), B16, 16),
    "FLASHMLA": Backend("mla", "nvidia", ((9, 0), (10, 9)), B16 + FP8, 64),
    "CUTLASS_MLA": Backend("mla", "nvidia", ((10, 0), (10, 9)), B16 + FP8, 128),
    "FLASHINFER_MLA": Backend("mla", "nvidia", ((10, 0), (10, 9)), B16 + FP8, 32),
    "ROCM_AITER_MLA": Backend("mla", "amd", None, B16 + FP8 + ("fp8_e5m2",), 16),
    "FLASHMLA_SPARSE": Backend("sparse", "nvidia", ((9, 0), (10, 9)),
                               ("auto", "bfloat16", "fp8_ds_mla") + FP8, 64),
    "FLASHINFER_MLA_SPARSE": Backend("sparse", "nvidia", ((10, 0), (10, 9)), B16 + FP8, 64),
}


def requested(flag: str | None, env: str | None, version: VllmVersion) -> str | None:
    """The backend the user forces: `--attention-backend` from 0.13, the environment variable
    in 0.11-0.14 (both at once refused, "mutually exclusive"; 0.15+ ignore the variable)."""
    name = (flag or "").strip().upper() or None
    if name and not version.at_least(0, 13):
        raise BadInput(f"vLLM {version.text} has no --attention-backend (0.13+)",
                       hint="use --env VLLM_ATTENTION_BACKEND=NAME", flag="attention_backend")
    from_env = (env or "").strip().upper().removesuffix("_VLLM_V1") or None
    if from_env and version.at_least(0, 15):
        from_env = None  # no longer read ("Unknown vLLM environment variable" from 0.17)
    if name and from_env:
        raise BadInput("--attention-backend and VLLM_ATTENTION_BACKEND are mutually exclusive "
                       f"in vLLM {version.text}", hint="give one", flag="attention_backend")
    return name or from_env


def check(name: str, *, kind: str, kv_requested: str, cc: str, vendor: str,
          version: VllmVersion, qk_nope: int = 0) -> Backend:
    """The forced backend, or BadInput where vLLM refuses it (0.11.1+ validate)."""
    b = BACKENDS.get(name)
    if b is None:
        raise BadInput(f"kvplan does not model --attention-backend {name}",
                       hint="use one of " + ", ".join(BACKENDS), flag="attention_backend")
    if not version.at_least(0, 11, 1):
        return b
    why = None
    kv_ok = b.kv
    if name == "TRITON_MLA":  # its list grew by release
        from kvplan.core.backends import TRITON_MLA_KV

        kv_ok = next((kv for since, kv in TRITON_MLA_KV if version.at_least(*since)), b.kv)
    if b.kind != kind:
        why = ("non-MLA not supported" if kind == "dense" else "MLA not supported"
               if b.kind == "dense" else "sparse not supported" if kind == "sparse"
               else "non-sparse not supported")
    elif b.vendor not in ("any", vendor):
        why = f"it is a {'ROCm' if b.vendor == 'amd' else 'CUDA'} backend"
    elif b.cc and vendor == "nvidia" and not b.cc[0] <= cc_tuple(cc) <= b.cc[1]:
        why = "compute capability not supported"
    elif (kv_requested or "auto").lower() not in kv_ok:
        why = "kv_cache_dtype not supported"
    elif name == "FLASHINFER_MLA" and qk_nope not in (
            (64, 128, 192) if version.at_least(0, 19) else (64, 128)):
        why = f"qk_nope_head_dim {qk_nope} not supported"
    if why:
        raise BadInput(f"vLLM {version.text} refuses --attention-backend {name} for this "
                       f"model on compute capability {cc} ({why}: 'Selected backend is not "
                       "valid for this configuration')", flag="attention_backend")
    return b


def block_size(name: str, b: Backend, version: VllmVersion) -> int:
    """The block a forced backend takes without --block-size: its preferred size (0.18+);
    up to 0.17 `check_and_update_config` forced FlashMLA's 64, CUTLASS-MLA's 128 and
    FlashInfer-MLA's 64."""
    if name == "FLASHINFER_MLA" and not version.at_least(0, 18):
        return 64
    return b.block
