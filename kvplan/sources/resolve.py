"""Turn what the user typed (MODEL, --gpu) into core `Model` / `Gpu` objects.

MODEL resolution order: a local path (config.json or model directory) -> the catalogs (user
files first) -> the local Hugging Face cache -> the Hub (`kvplan/sources/hub.py`).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from kvplan import catalog
from kvplan.catalog_schema import MIG_PROFILE
from kvplan.core.sizing import Gpu, Model
from kvplan.errors import BadInput
from kvplan.sources.local import load_local, st_modules
from kvplan.units import parse_bytes

_MIG = re.compile(rf"[\s_-]MIG[\s_-]+({MIG_PROFILE}(?:[+-][a-z.]+)*)\s*$", re.I)
# GPU feature discovery's product label on a time-sliced GPU (`sharing.timeSlicing` with
# renameByDefault: nvidia.com/gpu.product=<product>-SHARED)
_SHARED = re.compile(r"-SHARED\s*$", re.I)
ASSUMED_GPU = ("modelled as NVIDIA compute capability {cc} (Hopper), which picks the kernels, "
               "FP8 support and block sizes; pass --gpu NAME (with --gpu-memory SIZE) for "
               "another architecture")


def _unknown(kind: str, name: str, cat: catalog.Catalog, listing: str) -> BadInput:
    close = cat.suggestions(name)
    hint = f"did you mean {', '.join(close)}?" if close else f"see `kvplan {listing}`"
    return BadInput(f"unknown {kind} {name!r}", hint=hint)


def model_from_entry(key: str, entry: dict[str, Any], origin: str = "") -> Model:
    config = entry.get("config")
    if not isinstance(config, dict):
        raise BadInput(f"catalog model {key!r} has no 'config' mapping")
    st = entry.get("sentence_transformers")
    if st is not None:  # {modules: modules.json, pooling: {path: its config.json}}
        mods, pools = st.get("modules"), st.get("pooling") or {}
        if not isinstance(mods, list) or not isinstance(pools, dict) or not all(
                isinstance(c, dict) for c in pools.values()) or not isinstance(
                st.get("encoder") or {}, dict):
            raise BadInput(f"catalog model {key!r}: sentence_transformers needs 'modules' (a "
                           "list, modules.json) and 'pooling' (a mapping of path to config)")
        st_modules(mods, f"catalog model {key!r} sentence_transformers.modules")
    return Model(id=key, config=config, weights_bytes=entry.get("weights_bytes"),
                 weights_source=entry.get("weights_source", "catalog"),
                 hf_quant_config=entry.get("quant_config"),
                 weights_layout=entry.get("weights_layout"),
                 st_modules=st["modules"] if st else None,
                 st_configs=(st.get("pooling") or {}) if st else None,
                 st_checked=st is not None,
                 st_encoder=(st.get("encoder") or None) if st else None, origin=origin)


def model_from_record(rec: dict[str, Any]) -> Model:
    return Model(id=rec["id"], config=rec["config"], weights_bytes=rec.get("weights_bytes"),
                 weights_source=rec.get("weights_source", ""),
                 hf_quant_config=rec.get("quant_config"),
                 weights_layout=rec.get("weights_layout"),
                 st_modules=rec.get("st_modules"), st_configs=rec.get("st_configs"),
                 st_checked=bool(rec.get("st_checked")), st_encoder=rec.get("st_encoder"),
                 origin=rec.get("origin", ""))


def resolve_model(name: str, catalogs: list[str] | None = None, *, revision: str | None = None,
                  token: str | None = None, offline: bool | None = None) -> Model:
    if not name.strip():
        raise BadInput("MODEL is empty", hint="give a catalog id or alias, a Hub repo id, a "
                       "config.json or a model directory")
    rec = load_local(name)
    if rec is not None:
        return model_from_record(rec)
    if name.startswith((".", "/", "~")) or name.endswith(".json"):
        raise BadInput(f"no model at path {name}", hint="check the path")
    cat = catalog.load("models", catalogs)
    hit = cat.get(name)
    if hit and revision is None:
        return model_from_entry(*hit, origin=cat.provenance(name))
    from kvplan.sources import hub

    if not hub.looks_like_repo_id(name):
        if hit:  # --revision names a Hub revision, which a catalog alias has not
            raise BadInput(f"--revision needs a Hub repo id; {name!r} is the catalog alias of "
                           f"{hit[0]}", hint=f"pass {hit[0]} --revision {revision}"
                           if hub.looks_like_repo_id(hit[0]) else "drop --revision")
        raise _unknown("model", name, cat, "models")
    return model_from_record(hub.load_hub(name, revision=revision, token=token,
                                          offline=offline, suggestions=cat.suggestions(name)))


def gpu_from_entry(key: str, e: dict[str, Any]) -> Gpu:
    mem = e.get("memory_bytes")
    if not isinstance(mem, int) or mem <= 0:
        raise BadInput(f"catalog GPU {key!r} needs a positive integer memory_bytes")
    assumed = e.get("compute_capability") is None
    cc = Gpu.compute_capability if assumed else str(e["compute_capability"])
    return Gpu(id=key, name=str(e.get("name", key)), memory_bytes=mem, catalog_id=key,
               compute_capability=cc, assumed=assumed,
               note=f"catalog GPU {key!r} gives no compute_capability: "
               + ASSUMED_GPU.format(cc=cc) if assumed else "",
               vendor=str(e.get("vendor", "nvidia")),
               bandwidth_gbps=float(e.get("bandwidth_gbps") or 0),
               interconnect_gbps=float(e.get("interconnect_gbps") or 0),
               nvlink_domain=int(e.get("nvlink_domain")
                                 or (8 if e.get("interconnect_gbps") else 1)),
               gpus_per_node=int(e.get("gpus_per_node") or 8),
               unified_memory=bool(e.get("unified_memory")),
               sm_count=int(e.get("sm_count") or 0),
               tflops=dict(e.get("tflops") or {}),
               price_per_hour=e.get("price_per_hour"),
               memory_note="the catalog's total memory for this GPU is an estimate (no CUDA "
               "print found)" if str(e.get("memory_source", "")).startswith("estimated")
               else "")


MAX_GPU_MEMORY = 16 << 40  # 16 TiB, fifty times today's largest accelerator


def parse_gpu_memory(memory: str, what: str = "--gpu-memory") -> int:
    """A GPU's total memory as written ('24GiB'), in bytes."""
    mem = parse_bytes(memory, what=what)
    if not 0 < mem <= MAX_GPU_MEMORY:
        raise BadInput(f"{what} {memory} is not a GPU's memory (0 to 16 TiB)",
                       hint="e.g. 24GiB, or 19.5GiB for a MIG slice")
    if mem < 1 << 30:  # a bare '24' is 24 bytes: surely a missing unit
        raise BadInput(f"{what} {memory} is {mem:,} bytes, less than any GPU",
                       hint=f"give a unit, e.g. {memory}GiB" if str(memory).strip()
                       .replace(".", "", 1).isdigit() else "e.g. 24GiB")
    return mem


def mig_bytes(gib: float) -> int:
    """A slice's memory from the GiB `nvidia-smi mig -lgip` prints to two decimals: slices
    come in 64 MiB steps (5.81 -> 5,952 MiB)."""
    return round(gib * 1024 / 64) * 64 << 20


def _mig_slice(gpu: Gpu, entry: dict[str, Any], name: str, profile: str,
               memory: str | None) -> Gpu:
    """A MIG slice of `gpu`. Its memory is what `nvidia-smi mig -lgip` prints for the profile
    (inside the slice CUDA reports the same; the catalog's `mig` table keeps the smallest
    figure seen across drivers) unless given. Compute scales with its share of the GPU's
    `mig_slices`, bandwidth with its share of the memory; instances have no peer access. Its
    SMs are the catalog's `mig_sms` where printed (an H100 1g.10gb has 16, not 132 / 7),
    else the compute share."""
    prof = re.split(r"[+-]", profile.lower())[0]  # 1g.24gb+me / -me: the same memory
    table = entry.get("mig") or {}
    if memory:
        mem = parse_gpu_memory(memory)
    elif prof in table:
        mem = mig_bytes(table[prof])
    else:
        raise BadInput(
            f"GPU {name!r} is a MIG slice ({profile}) whose memory kvplan does not know for "
            f"the {gpu.id}", hint="give the slice's total memory as `nvidia-smi mig -lgip` or "
            "vLLM's 'Free memory on device (free/TOTAL GiB)' prints it: --gpu-memory SIZE (in "
            "check's files the annotation kvplan.io/gpu-memory)")
    note = ""
    if not memory and prof in (entry.get("mig_estimated") or []):
        note = (f"the {prof} slice memory of the {gpu.id} is inferred "
                "(gpus.yaml mig_source)")
    slices = int(entry.get("mig_slices") or 7)
    share = min(int(prof.split("g.")[0]), slices) / slices
    return replace(gpu, id=f"{gpu.id}-mig-{prof}" + (f" ({memory})" if memory else ""),
                   name=f"{gpu.name} MIG {profile}", memory_bytes=mem,
                   bandwidth_gbps=gpu.bandwidth_gbps * min(mem / gpu.memory_bytes, 1.0),
                   tflops={k: v * share if v else v for k, v in gpu.tflops.items()},
                   sm_count=int((entry.get("mig_sms") or {}).get(prof)
                                or gpu.sm_count * share), interconnect_gbps=0.0, nvlink_domain=1,
                   mig_profile=prof, memory_note=note,
                   price_per_hour=gpu.price_per_hour * share if gpu.price_per_hour
                   else gpu.price_per_hour)


def time_sliced(name: str) -> bool:
    """Whether a GPU name is GPU feature discovery's label of a time-sliced GPU
    (`<product>-SHARED`): the pods scheduled on it share its memory."""
    return bool(_SHARED.search(name))


def resolve_gpu(name: str | None, memory: str | None = None,
                catalogs: list[str] | None = None) -> Gpu:
    """--gpu NAME (id, alias, nvidia-smi or GFD label) and/or --gpu-memory SIZE."""
    if name:
        cat = catalog.load("gpus", catalogs)
        hit = cat.get(name)
        shared = None if hit else _SHARED.search(name)
        label = name[:shared.start()] if shared else name
        if shared:
            hit = cat.get(label)
        mig = None if hit else _MIG.search(label)
        if mig:  # GFD's "<GPU>-MIG-3g.20gb", nvidia-smi's "<GPU> MIG 3g.20gb": the GPU's entry
            hit = cat.get(label[:mig.start()].strip(" -_"))
        if not hit:
            raise _unknown("GPU", name, cat, "gpus")
        gpu = gpu_from_entry(*hit)
        if mig:
            gpu = _mig_slice(gpu, hit[1], label, mig.group(1), memory)
        elif memory:
            gpu = replace(gpu, memory_bytes=parse_gpu_memory(memory), id=f"{gpu.id} ({memory})",
                          memory_note="")
        if shared:
            gpu = replace(gpu, note="; ".join(x for x in (gpu.note, (
                f"{name} is a time-sliced GPU (GPU feature discovery's -SHARED label): the "
                "pods that share it share its memory, and this sizes one vLLM with all of "
                "it")) if x))
        return gpu
    if memory:
        mem = parse_gpu_memory(memory)
        return Gpu(id=f"custom-{memory}", name=f"custom GPU ({memory})", memory_bytes=mem,
                   assumed=True, note="custom GPU: " + ASSUMED_GPU.format(
                       cc=Gpu.compute_capability))
    raise BadInput("no GPU given", hint="pass --gpu NAME (see `kvplan gpus`) or --gpu-memory 24GiB")
