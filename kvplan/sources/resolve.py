"""Turn what the user typed (MODEL, --gpu) into core `Model` / `Gpu` objects.

MODEL resolution order: a local path (config.json or model directory) -> the catalogs (user
files first) -> the local Hugging Face cache -> the Hub (`kvplan/sources/hub.py`).
"""

from __future__ import annotations

import re
from typing import Any

from kvplan import catalog
from kvplan.core.sizing import Gpu, Model
from kvplan.errors import BadInput
from kvplan.sources.local import load_local
from kvplan.units import parse_bytes

_MIG = re.compile(r"[\s_-]MIG[\s_-]+(\d+g\.\d+gb(?:\+me)?)\s*$", re.I)


def _unknown(kind: str, name: str, cat: catalog.Catalog, listing: str) -> BadInput:
    close = cat.suggestions(name)
    hint = f"did you mean {', '.join(close)}?" if close else f"see `kvplan {listing}`"
    return BadInput(f"unknown {kind} {name!r}", hint=hint)


def model_from_entry(key: str, entry: dict[str, Any]) -> Model:
    config = entry.get("config")
    if not isinstance(config, dict):
        raise BadInput(f"catalog model {key!r} has no 'config' mapping")
    return Model(id=key, config=config, weights_bytes=entry.get("weights_bytes"),
                 weights_source=entry.get("weights_source", "catalog"),
                 hf_quant_config=entry.get("quant_config"),
                 weights_layout=entry.get("weights_layout"))


def model_from_record(rec: dict[str, Any]) -> Model:
    return Model(id=rec["id"], config=rec["config"], weights_bytes=rec.get("weights_bytes"),
                 weights_source=rec.get("weights_source", ""),
                 hf_quant_config=rec.get("quant_config"),
                 weights_layout=rec.get("weights_layout"))


def resolve_model(name: str, catalogs: list[str] | None = None, *, revision: str | None = None,
                  token: str | None = None, offline: bool | None = None) -> Model:
    rec = load_local(name)
    if rec is not None:
        return model_from_record(rec)
    if name.startswith((".", "/", "~")) or name.endswith(".json"):
        raise BadInput(f"no model at path {name}", hint="check the path")
    cat = catalog.load("models", catalogs)
    hit = cat.get(name) if revision is None else None
    if hit:
        return model_from_entry(*hit)
    from kvplan.sources import hub

    if not hub.looks_like_repo_id(name):
        raise _unknown("model", name, cat, "models")
    return model_from_record(hub.load_hub(name, revision=revision, token=token,
                                          offline=offline, suggestions=cat.suggestions(name)))


def gpu_from_entry(key: str, e: dict[str, Any]) -> Gpu:
    mem = e.get("memory_bytes")
    if not isinstance(mem, int) or mem <= 0:
        raise BadInput(f"catalog GPU {key!r} needs a positive integer memory_bytes")
    return Gpu(id=key, name=str(e.get("name", key)), memory_bytes=mem,
               compute_capability=str(e.get("compute_capability", "9.0")),
               vendor=str(e.get("vendor", "nvidia")),
               bandwidth_gbps=float(e.get("bandwidth_gbps") or 0),
               interconnect_gbps=float(e.get("interconnect_gbps") or 0),
               unified_memory=bool(e.get("unified_memory")),
               sm_count=int(e.get("sm_count") or 0),
               tflops=dict(e.get("tflops") or {}),
               price_per_hour=e.get("price_per_hour"))


def _gpu_memory(memory: str) -> int:
    mem = parse_bytes(memory, what="--gpu-memory")
    if mem <= 0:
        raise BadInput("--gpu-memory must be positive", hint="e.g. --gpu-memory 24GiB")
    return mem


def resolve_gpu(name: str | None, memory: str | None = None,
                catalogs: list[str] | None = None) -> Gpu:
    """--gpu NAME (id, alias, nvidia-smi or GFD label) and/or --gpu-memory SIZE."""
    if name:
        cat = catalog.load("gpus", catalogs)
        hit = cat.get(name)
        mig = None if hit else _MIG.search(name)
        if mig:  # GFD's "<GPU>-MIG-3g.20gb", nvidia-smi's "<GPU> MIG 3g.20gb": the GPU's entry
            hit = cat.get(name[:mig.start()].strip(" -_"))
            if not memory:
                raise BadInput(
                    f"GPU {name!r} is a MIG slice ({mig.group(1)}); kvplan has no table of MIG "
                    "slice memory", hint="give the slice's total memory as nvidia-smi or "
                    "vLLM's 'Free memory on device (free/TOTAL GiB)' prints it: --gpu-memory "
                    "SIZE (in check's files the annotation kvplan.io/gpu-memory)" + (
                        f" (the GPU is {hit[0]})" if hit else ""))
        if not hit:
            raise _unknown("GPU", name, cat, "gpus")
        gpu = gpu_from_entry(*hit)
        if memory:
            gpu = Gpu(**{**gpu.__dict__, "memory_bytes": _gpu_memory(memory),
                         "id": f"{gpu.id} ({memory})"})
        return gpu
    if memory:
        mem = _gpu_memory(memory)
        return Gpu(id=f"custom-{memory}", name=f"custom GPU ({memory})", memory_bytes=mem)
    raise BadInput("no GPU given", hint="pass --gpu NAME (see `kvplan gpus`) or --gpu-memory 24GiB")
