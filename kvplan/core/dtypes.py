"""Model and KV-cache dtypes, resolved the way vLLM resolves them.

Sources: vLLM 0.33 `config/model.py` `_resolve_auto_dtype` (float32 checkpoints run in the
platform's preferred half type), `utils/torch_utils.py` `STR_DTYPE_TO_TORCH_DTYPE` and
`config/cache.py` `resolve_kv_cache_dtype_string` (ModelOpt checkpoints' KV scheme).
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from kvplan.core.versions import cc_major
from kvplan.errors import BadInput

DTYPE_BYTES = {
    "float32": 4, "float": 4, "fp32": 4,
    "bfloat16": 2, "bf16": 2, "float16": 2, "half": 2, "fp16": 2,
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1, "fp8_ds_mla": 1, "uint8": 1,
    "int8": 1,
}
_CANON = {"float": "float32", "fp32": "float32", "half": "float16", "fp16": "float16",
          "bf16": "bfloat16"}
FP8_DS_MLA_BYTES_PER_TOKEN = 656  # 512 fp8 NoPE + 4 fp32 scales + 64 bf16 RoPE (flashmla_sparse)


@cache
def canonical(dtype: str) -> str:
    d = str(dtype).lower().replace("torch.", "")
    return _CANON.get(d, d)


@cache
def dtype_bytes(dtype: str) -> int:
    d = canonical(dtype)
    if d not in DTYPE_BYTES:
        raise BadInput(f"unknown dtype {dtype!r}")
    return DTYPE_BYTES[d]


# model types vLLM runs in no float16 ("Numerical instability", `_FLOAT16_NOT_SUPPORTED_MODELS`
# in config/model.py, the 0.9.2-0.33.0 wheels; plamo2 too until it was dropped after 0.26)
FLOAT16_UNSUPPORTED = frozenset({"gemma2", "gemma3", "gemma3_text", "glm4", "plamo2"})


def resolve_model_dtype(config_dtype: str, user_dtype: str | None, compute_capability: str,
                        *, v1: bool = True, model_type: str = "",
                        fp16_checked: bool = False) -> str:
    """The dtype vLLM runs the model in (`--dtype auto` unless overridden).

    A float32 checkpoint runs in bfloat16 on sm80+ and float16 on older GPUs; vLLM 0.6
    (V0) chose float16 except for Gemma-2 (bfloat16). bfloat16 on a pre-sm80 GPU is refused.
    `fp16_checked` (0.9+): the model types in FLOAT16_UNSUPPORTED refuse --dtype float16 and
    fall back to float32 where bfloat16 is missing (Turing, Volta: `_resolve_auto_dtype`).
    """
    major = cc_major(compute_capability or "8.0")
    no_fp16 = fp16_checked and model_type in FLOAT16_UNSUPPORTED
    if user_dtype and canonical(user_dtype) != "auto":
        d = canonical(user_dtype)
        if d not in ("float32", "float16", "bfloat16"):
            raise BadInput(f"--dtype {user_dtype} is not one of auto, float16, bfloat16, float32")
        if d == "bfloat16" and major < 8:
            raise BadInput(f"--dtype bfloat16 needs compute capability 8.0+, this GPU is "
                           f"{compute_capability}", hint="use --dtype float16")
        if d == "float16" and no_fp16:
            raise BadInput(f"vLLM refuses --dtype float16 for model type {model_type!r} "
                           "('Numerical instability')",
                           hint="use --dtype bfloat16" if major >= 8 else "use --dtype float32")
        return d
    if no_fp16 and major < 8:
        return "float32"
    d = canonical(config_dtype or "auto")
    if d in ("auto", "float32", "none"):
        if not v1 and model_type != "gemma2":
            return "float16"
        return "bfloat16" if major >= 8 else "float16"
    if d == "bfloat16" and major < 8:
        return "float16"  # vLLM casts bf16 checkpoints to fp16 on Turing/Volta (with a warning)
    if d not in ("float16", "bfloat16"):
        raise BadInput(f"config dtype {config_dtype!r} is not a floating-point dtype vLLM runs")
    return d


def modelopt_in_config_json(hf_quant: dict | None) -> bool:
    """Whether the ModelOpt export that wrote this hf_quant_config.json also put its
    `quantization_config` into config.json: "ModelOpt 0.31.0 and after saves the
    quantization config in the model config file" (vLLM `transformers_utils/config.py`).
    Development builds ('0.0.1.devN+g<sha>.dYYYYMMDD') count by their date (June 2025+)."""
    text = str(((hf_quant or {}).get("producer") or {}).get("version") or "")
    m = re.match(r"(\d+)\.(\d+)", text)
    if m and (int(m.group(1)), int(m.group(2))) >= (0, 31):
        return True
    d = re.search(r"\.d(20\d{6})$", text)
    return bool(d) and d.group(1) >= "20250601"


def modelopt_kv_dtype(quant_config: dict | None, hf_quant: dict | None, *,
                      config_json_from: bool, hf_quant_from: bool,
                      nvfp4: bool = False) -> str | None:
    """KV scheme a ModelOpt checkpoint declares, if this vLLM reads it for `auto`
    (`utils/torch_utils.py get_kv_cache_quant_algo_string`, which needs a `quant_method`
    starting with 'modelopt'). vLLM folds hf_quant_config.json into `quantization_config`
    (`transformers_utils/config.py`) and names its method from the producer in place
    (`_normalize_quantization_config`): `config_json_from` gates the config.json form,
    `hf_quant_from` a separate file from an older export (both 0.14+). fp8, and from 0.20
    (`nvfp4`) an NVFP4 scheme (4-bit float, or an 'nvfp4' algo string) -> nvfp4."""
    cands = []
    if hf_quant and (hf_quant_from or (config_json_from and modelopt_in_config_json(hf_quant))):
        cands.append(hf_quant)
    if (quant_config and config_json_from
            and str(quant_config.get("quant_method", "")).startswith("modelopt")):
        cands.append(quant_config)
    for q in cands:
        inner = q.get("quantization", q) if isinstance(q.get("quantization"), dict) else q
        algo = (inner.get("kv_cache_scheme") or q.get("kv_cache_scheme")
                or inner.get("kv_cache_quant_algo") or q.get("kv_cache_quant_algo"))
        if isinstance(algo, dict):
            if (algo.get("dynamic") is False and algo.get("num_bits") == 8
                    and algo.get("type") == "float"):
                return "fp8"
            if nvfp4 and algo.get("num_bits") == 4 and algo.get("type") == "float":
                return "nvfp4"
            continue
        if isinstance(algo, str) and "fp8" in algo.lower():
            return "fp8"
        if nvfp4 and isinstance(algo, str) and algo.lower() == "nvfp4":
            return "nvfp4"
    return None


def quant_file_notes(top_q: Any, hf_quant: Any, used_kv: str | None, kv_arg: str, *,
                     nvfp4: bool) -> list[str]:
    """What a config.json `quantization_config` hides of hf_quant_config.json: vLLM reads
    the file only without one (`transformers_utils/config.py get_config`), and sets a
    ModelOpt quant_method only from a `quant_method` or the nested `quantization.quant_algo`
    (`ModelArchConfigConvertorBase._normalize_quantization_config`)."""
    if not isinstance(hf_quant, dict) or not isinstance(top_q, dict):
        return []
    if not top_q.get("quant_method") and not isinstance(top_q.get("quantization"), dict):
        return ["config.json has a quantization_config without quant_method, so vLLM reads "
                "neither it nor hf_quant_config.json as ModelOpt: sized unquantized, as vLLM "
                "configures it ('auto' KV in the model dtype; its quantized tensors are "
                "unlikely to load)"]
    file_kv = modelopt_kv_dtype(None, hf_quant, config_json_from=True, hf_quant_from=True,
                                nvfp4=nvfp4)
    if (kv_arg or "auto").lower() != "auto" or not file_kv or file_kv == used_kv:
        return []
    stored = used_kv or "the model dtype"
    return [f"hf_quant_config.json declares an {file_kv} KV cache, but vLLM reads config.json's "
            f"quantization_config instead, which declares {used_kv or 'none'}: 'auto' stores "
            f"{stored}; pass --kv-cache-dtype {file_kv} for the file's"]


def resolve_kv_dtype(kv_cache_dtype: str, model_dtype: str, *, allowed: tuple[str, ...],
                     modelopt_kv: str | None, sparse_mla: str | None = None) -> str:
    """Resolve `--kv-cache-dtype` to a concrete storage dtype name.

    - `auto` -> the model dtype, or the ModelOpt checkpoint's KV scheme (`modelopt_kv`).
    - DeepSeek-V3.2 sparse MLA (`sparse_mla`, from `VllmVersion.sparse_mla_kv`): "auto+fp8"
      stores `auto` and fp8 values as `fp8_ds_mla`, "fp8" only fp8 values, "none" neither.
    """
    k = kv_cache_dtype or "auto"
    if k not in allowed and k.lower() in allowed:  # argparse's choices are case-sensitive
        raise BadInput(f"--kv-cache-dtype {kv_cache_dtype} is not one of vLLM's names "
                       "(they are lower-case)", hint=f"use --kv-cache-dtype {k.lower()}",
                       flag="kv_cache_dtype")
    if k not in allowed:
        raise BadInput(f"--kv-cache-dtype {kv_cache_dtype} is not accepted by this vLLM version",
                       hint="choose one of " + ", ".join(allowed))
    if k == "auto":
        if sparse_mla == "auto+fp8":
            return "fp8_ds_mla"
        if not modelopt_kv:
            return model_dtype
        k = modelopt_kv
    if sparse_mla in ("auto+fp8", "fp8") and k.startswith("fp8"):
        return "fp8_ds_mla"
    return k
