"""Whether vLLM runs a start with prefix caching, as each release decides it. A declared
prefix-hit share counts for capacity only when it is on (`kvplan check`, `kvplan simulate`).

Read in the 0.6.0-0.33.0 sources (`engine/arg_utils.py`, `config/cache.py`):
* 0.6.0-0.6.4: `EngineArgs.enable_prefix_caching: bool = False` (V0, opt-in).
* 0.6.5-0.7.x: `None`, then `bool(envs.VLLM_USE_V1)` in `EngineArgs.__post_init__`: off
  unless `VLLM_USE_V1=1`.
* 0.8.0-0.10.x: V1 turns it on for generation when not given (`_set_default_args_v1`); a
  start that falls back to V0 keeps `None` (`_set_default_args_v0` sets no default), which
  `CacheConfig` reads as off.
* 0.11+: V1 only, on by default for generation (0.12+ `CacheConfig.enable_prefix_caching:
  bool = True`).
* V0 turns it off for multimodal models, given or not (0.6.2-0.6.5 for every start,
  0.6.6+ unless `VLLM_USE_V1=1`: `create_engine_config`, `_set_default_args_v0`).
* Hybrid (Mamba / linear-attention) models: off by default before 0.28
  (`VllmVersion.mamba_prefix_caching_default`); attention-free Mamba models from 0.12
  (`sizing.prefix_caching_default`); and off whatever the flags say where the
  release has no Mamba cache mode for the model (`sizing._mamba_cache_mode` "none"), or
  gives an attention-free model one Mamba block of max_model_len (0.11.1-0.14).
* Pooling models: the release's rule, already resolved into `args` by `size`
  (`core/pooling.py`).
"""

from __future__ import annotations

from typing import Any

OFF_BY_FLAG = "the flags turn it off"


def prefix_caching(r: Any) -> tuple[bool, str]:
    """(on, why it is off; "" when on) for a `SizeResult`."""
    a, v, arch = r.args, r.version, r.arch
    asked = a.enable_prefix_caching
    if getattr(r, "pooling", False):
        return bool(asked), "" if asked else "vLLM turns it off for this pooling model"
    if asked is False:
        return False, OFF_BY_FLAG
    if not v.v1:
        return _v0(a, v, bool(arch.vision_config or arch.audio_config))
    if arch.is_hybrid_state:
        from kvplan.core.sizing import (
            _mamba_cache_mode,
            attention_free_all_mode,
            prefix_caching_default,
        )

        if asked is None and not prefix_caching_default(arch, v):
            if arch.attention_free:
                return False, (f"vLLM {v.text} keeps it off by default for attention-free "
                               "Mamba models")
            return False, (f"vLLM {v.text} keeps it off by default for hybrid (Mamba / "
                           "linear-attention) models (on from 0.28)")
        mode = _mamba_cache_mode(arch, True, v)
        if mode == "none":
            return False, f"vLLM {v.text} turns it off for this hybrid model"
        if mode == "all" and arch.attention_free and \
                attention_free_all_mode(v, a.block_size) != "all":
            return False, (f"vLLM {v.text} gives this attention-free model one Mamba block "
                           "of max_model_len tokens, so no prefix is reused")
    return True, ""


def _v0(a: Any, v: Any, multimodal: bool) -> tuple[bool, str]:
    """The V0 engine: 0.6-0.7, or a 0.8-0.10 start that fell back to it."""
    v1_env = bool(a.use_v1) and not v.at_least(0, 8)  # 0.6.5-0.7 read VLLM_USE_V1=1
    if multimodal and v.at_least(0, 6, 2) and not (v1_env and v.at_least(0, 6, 6)):
        return False, f"vLLM {v.text}'s V0 engine turns it off for multimodal models"
    if a.enable_prefix_caching or (v1_env and v.at_least(0, 6, 5)):
        return True, ""
    if v.at_least(0, 8):
        return False, (f"vLLM {v.text} runs this start on its V0 engine, where it is off "
                       "unless --enable-prefix-caching is given")
    return False, (f"vLLM {v.text} (V0) runs without it unless --enable-prefix-caching is "
                   "given")
