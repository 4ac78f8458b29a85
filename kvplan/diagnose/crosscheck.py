"""`--model`/`--gpu`: size the same deployment with `kvplan size` and compare the pools."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from kvplan.errors import BadInput

if TYPE_CHECKING:
    from kvplan.core.sizing import SizeResult

POOL_TOLERANCE = 0.10  # a pool further than this from the prediction earns a note


def _num(cfg: dict[str, str], key: str, kind=float):
    try:
        return kind(float(cfg[key]))
    except (KeyError, ValueError):
        return None


def sizer(model: str, gpu: str, *, tp: int, max_model_len: int | None,
          vllm_version: str | None, catalogs: list[str] | None, cache_config: dict[str, str],
          pp: int = 1) -> tuple[Callable[..., SizeResult], list[str]]:
    """`kvplan size` of the deployment at a --max-num-seqs (None: vLLM's default) with the
    server's cache settings (gpu_memory_utilization, cache_dtype, num_gpu_blocks_override
    from cache_config_info); notes when its cache dtype had to be read as auto."""
    from kvplan.core.sizing import EngineArgs, size
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    m = resolve_model(model, catalogs)
    g = resolve_gpu(gpu, None, catalogs)
    util = _num(cache_config, "gpu_memory_utilization")
    override = _num(cache_config, "num_gpu_blocks_override", int)
    kvd = cache_config.get("cache_dtype") or "auto"
    notes: list[str] = []
    # the label prints the list ("['0', '1', '30', '31']"; TurboQuant's boundary layers merged)
    skip = tuple(re.findall(r"[A-Za-z_]+|\d+", cache_config.get("kv_cache_dtype_skip_layers")
                            or ""))
    args = EngineArgs(tensor_parallel_size=tp, pipeline_parallel_size=pp,
                      max_model_len=max_model_len, kv_cache_dtype=kvd,
                      gpu_memory_utilization=util, num_gpu_blocks_override=override,
                      kv_cache_dtype_skip_layers=skip)
    try:
        size(m, g, args, vllm_version)
    except BadInput as e:
        if kvd == "auto":
            raise
        notes.append(f"cross-check: cache_dtype {kvd} not understood ({e.line()}); sized "
                     "with --kv-cache-dtype auto")
        args = replace(args, kv_cache_dtype="auto", kv_cache_dtype_skip_layers=())

    def at(cap: int | None, hints: bool = False) -> SizeResult:
        return size(m, g, replace(args, max_num_seqs=cap), vllm_version, hints=hints)

    return at, notes


def blocks_at(size_at: Callable[..., SizeResult], block_size: int | None
              ) -> Callable[[int], int | None]:
    """num_gpu_blocks kvplan size predicts at a cap (None where it does not start), for
    diagnose's re-sized cap; block_size: the server's, which the prediction must match."""
    memo: dict[int, int | None] = {}

    def at(cap: int) -> int | None:
        if cap not in memo:
            r = size_at(cap)
            ok = r.fits and r.num_gpu_blocks > 0 and block_size in (None, r.block_size)
            memo[cap] = r.num_gpu_blocks if ok else None
        return memo[cap]

    return at


def cross_check(model: str, gpu: str, *, tp: int, max_model_len: int | None,
                vllm_version: str | None, catalogs: list[str] | None,
                cache_config: dict[str, str], pp: int = 1, max_num_seqs: int | None = None
                ) -> tuple[dict[str, Any], list[str]]:
    """Size MODEL on GPU with the server's cache settings and cap (--max-num-seqs: the
    profile run and the CUDA graphs it sizes change the pool); returns (JSON, notes)."""
    size_at, notes = sizer(model, gpu, tp=tp, max_model_len=max_model_len,
                           vllm_version=vllm_version, catalogs=catalogs,
                           cache_config=cache_config, pp=pp)
    return compare(size_at(max_num_seqs, True), cache_config, tp, pp, max_num_seqs, notes)


def compare(r: SizeResult, cache_config: dict[str, str], tp: int, pp: int,
            max_num_seqs: int | None, notes: list[str]) -> tuple[dict[str, Any], list[str]]:
    """The cross-check's JSON and notes: kvplan size's `r` against the server's pool."""
    notes = list(notes)
    observed = _num(cache_config, "num_gpu_blocks", int)
    obs_bs = _num(cache_config, "block_size", int)
    ratio = observed / r.num_gpu_blocks if observed and r.num_gpu_blocks > 0 else None
    blocks = observed or r.num_gpu_blocks
    guaranteed = max(blocks - 1, 0) // r.blocks_per_request if r.blocks_per_request else None
    out = {
        "model": r.model, "gpu": r.gpu, "vllm_version": r.version.text,
        "tensor_parallel_size": tp, "pipeline_parallel_size": pp,
        "gpu_memory_utilization": r.budget.utilization,
        "kv_cache_dtype": r.kv_dtype, "max_model_len": r.max_model_len,
        "predicted_num_gpu_blocks": r.num_gpu_blocks, "observed_num_gpu_blocks": observed,
        "blocks_ratio": round(ratio, 4) if ratio is not None else None,
        "predicted_block_size": r.block_size, "observed_block_size": obs_bs,
        "kv_cache_tokens": r.kv_cache_tokens, "blocks_per_request": r.blocks_per_request,
        "guaranteed_max_num_seqs": guaranteed,
        "default_max_num_seqs": r.max_num_seqs if max_num_seqs is None else None,
        "max_num_seqs": max_num_seqs, "fits": r.fits,
    }
    if not r.fits:
        notes.append(f"cross-check: kvplan size says this deployment would not start "
                     f"({r.failure}); check --model, --gpu and -tp")
    elif ratio is not None and abs(ratio - 1) > POOL_TOLERANCE:
        notes.append(f"the server's pool ({observed:,} blocks) differs from kvplan size's "
                     f"prediction ({r.num_gpu_blocks:,}) by {ratio - 1:+.0%}: check "
                     "--gpu-memory-utilization, -tp, --max-model-len and other processes on "
                     "the GPU")
    if obs_bs and obs_bs != r.block_size:
        notes.append(f"the server's block size ({obs_bs}) differs from kvplan size's "
                     f"({r.block_size})")
    return out, notes
