"""Checks that size the deployment with kvplan's model of vLLM: sizing-inputs,
tensor-parallel-valid, weights-fit, max-model-len-fits, max-num-seqs-safe,
replicas-cover-rate. The safe max-num-seqs and the replica count are those
`kvplan recommend` computes (`core.plan.plan_one`) for the declared workload and SLOs."""

from __future__ import annotations

import contextlib
import math
import re
from dataclasses import fields, replace
from typing import Any

from kvplan.check.base import FAIL, PASS, SKIP, WARN, Loc
from kvplan.check.mapping import Parsed, spelled
from kvplan.core.arch import tp_refusal, valid_tps
from kvplan.errors import BadInput
from kvplan.units import GiB

# the variable that lets each engine run past the model's configured length
ALLOW_LONG = {"vllm": "VLLM_ALLOW_LONG_MAX_MODEL_LEN",
              "sglang": "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"}
SIZED = ("tensor-parallel-valid", "weights-fit", "late-allocations-fit", "max-model-len-fits",
         "max-num-seqs-safe", "replicas-cover-rate")


def _path_like(name: str) -> bool:
    return name.startswith(("/", "./", "../", "~")) or "{{" in name or "$" in name


def _model_name(t: Any, p: Parsed) -> tuple[str | None, Loc]:
    """The model to size: kvplan.io/model (or the plan's `model:`), else the command's, else
    a KServe `storageUri: hf://…` when the command names a path inside the container."""
    if t.model:
        return t.model, t.model_loc or t.loc
    if p.model and not _path_like(p.model):
        return p.model, p.model_loc or p.cmd.loc
    if t.model_hint:
        return t.model_hint, t.model_hint_loc or t.loc
    return p.model, p.model_loc or p.cmd.loc


def _skip_sized(out: Any, why: str) -> None:
    for cid in SIZED:
        out.add(cid, SKIP, why)


def _resolve_gpu(t: Any, catalogs: list[str] | None) -> Any:
    from kvplan.sources.resolve import resolve_gpu

    def one(name: str | None) -> Any:  # node-label values are catalog aliases (gpus.yaml)
        return resolve_gpu(name.strip() if name else None, t.gpu_memory, catalogs)

    if t.gpu or not t.gpu_choices:
        return one(t.gpu)
    gpus = [one(n) for n in t.gpu_choices]
    return min(gpus, key=lambda g: g.memory_bytes)


def _inputs(out: Any, p: Parsed, catalogs: list[str] | None) -> tuple[Any, Any] | None:
    """Model and GPU, or None after a sizing-inputs finding."""
    from kvplan.sources.resolve import resolve_model

    t = out.target
    name, mloc = _model_name(t, p)
    out.facts["model"] = name
    if t.gpu or t.gpu_choices or t.gpu_memory:  # known without the model: for the header
        with contextlib.suppress(BadInput):
            out.facts["gpu"] = _resolve_gpu(t, catalogs).id
    fix_model = {"plan deployment": "set model: <Hub id or catalog id>",
                 "command": "name the model by its Hub id",
                 "script": "name the model by its Hub id",
                 "dockerfile": "name the model by its Hub id"}.get(
        t.kind, "add the annotation kvplan.io/model: <Hub id or catalog id>")
    if not name or _path_like(name):
        what = f"the model {name!r} is a path inside the container" if name else \
            "the command names no model"
        status = SKIP if t.template else FAIL
        out.add("sizing-inputs", status, f"cannot size: {what}", mloc,
                fix=None if t.template else fix_model)
        _skip_sized(out, "not sized: " + ("a runtime template (sized on the "
                                          "InferenceServices that use it)" if t.template
                                          else "the model is not known"))
        return None
    if not t.gpu and not t.gpu_choices and not t.gpu_memory:
        status = SKIP if t.template else FAIL
        out.add("sizing-inputs", status, "cannot size: no GPU type", t.loc,
                fix=None if t.template else
                "add nodeSelector nvidia.com/gpu.product (e.g. NVIDIA-H100-80GB-HBM3), the "
                "annotation kvplan.io/gpu, or pass --gpu (or --gpu-memory)")
        _skip_sized(out, "not sized: no GPU type")
        return None
    try:
        model = resolve_model(name, catalogs)
    except BadInput as e:
        out.add("sizing-inputs", FAIL, f"cannot size: {e.message}", mloc,
                fix=e.hint or "add the model to a catalog (kvplan models add / --catalog)")
        _skip_sized(out, "not sized: the model is not known")
        return None
    try:
        gpu = _resolve_gpu(t, catalogs)
    except BadInput as e:
        out.add("sizing-inputs", FAIL, f"cannot size: {e.message}", t.gpu_loc or t.loc,
                fix=e.hint or "see `kvplan gpus`")
        _skip_sized(out, "not sized: the GPU type is not known")
        return None
    where = f" (may land on {', '.join(t.gpu_choices)}: checked on the smallest)" \
        if t.gpu_choices else ""
    out.add("sizing-inputs", PASS, f"{model.id} on {gpu.id}{where}", mloc)
    out.facts.update(model=model.id, gpu=gpu.id)
    return model, gpu


# each pod's share of a time-sliced GPU, as gpu-memory-utilization-range keeps 5 % outside it
SHARED_HEADROOM = 0.95


def _time_sliced(out: Any, p: Parsed, gpu: Any, version: str) -> None:
    """gpu-not-shared (only for a time-sliced GPU): time slicing shares the GPU's memory
    between the pods scheduled on it, while kvplan sizes one engine with all of it. From
    0.9.1 vLLM refuses to start when the free memory is below gpu_memory_utilization x total
    ("Free memory on device ... on startup is less than desired GPU memory utilization":
    `Worker.init_device` in v1/worker/gpu_worker.py, from 0.14 `request_memory` in
    v1/worker/utils.py); earlier releases profile
    around the other pod's memory and run out of it loading the model or the KV cache."""
    from kvplan.check.checks import shared_gpu
    from kvplan.core.versions import VllmVersion

    t = out.target
    label = shared_gpu(t)
    if label is None:
        return
    cid, loc = "gpu-not-shared", t.gpu_loc or t.loc
    shared = (f"{label} is a time-sliced GPU (GPU feature discovery's -SHARED label): the pods "
              f"scheduled on it share its {gpu.memory_bytes / GiB:.1f} GiB, and these checks "
              "size one engine with all of it")
    fix = ("schedule it on a dedicated GPU (the product label without -SHARED), or give each "
           "pod that shares the GPU its share of it")
    if p.engine != "vllm":
        out.add(cid, WARN, f"{shared}; a second engine on it has less memory than sized", loc,
                fix=fix)
        return
    v = VllmVersion.of(version)
    gmu = p.values.get("gpu_memory_utilization") or v.default_gpu_memory_utilization
    name = spelled(p.engine, "gpu_memory_utilization")
    pods = int(SHARED_HEADROOM / gmu + 1e-9) if 0 < gmu <= 1 else 0
    if pods >= 2:
        out.add(cid, PASS, f"{label} is time-sliced: each vLLM pod on it takes {name} {gmu:g}"
                f" of its memory, so {pods} fit", loc, current=gmu)
        return
    where = "v1/worker/utils.py" if v.at_least(0, 14) else "v1/worker/gpu_worker.py"
    fails = ("fails vLLM's start-up check, which wants that share free (\"Free memory on "
             f"device ... on startup is less than desired GPU memory utilization\", {where})"
             if v.at_least(0, 9, 1) else
             "finds the first one's memory taken and runs out of memory loading the model or "
             f"its KV cache (vLLM {v.text} does not check the free memory at start-up)")
    half = math.floor(SHARED_HEADROOM * 50) / 100
    out.add(cid, WARN, f"{shared}; at {name} {gmu:g} a second vLLM pod on the same GPU "
            f"{fails}", loc, fix=fix + f" ({name} {half:g} for two)", current=gmu,
            suggested=half)


def _unresolved_sizing(p: Parsed) -> list[Any]:
    """The sized flags whose value is a variable kvplan cannot resolve (`$DP`)."""
    from kvplan.check.mapping import SGLANG_FIELDS, TGI_FIELDS, VLLM_FIELDS

    fields = {"vllm": VLLM_FIELDS, "sglang": SGLANG_FIELDS, "tgi": TGI_FIELDS}[p.engine]
    texts = {tok.text for tok in p.cmd.unresolved}
    return [f for f in p.flags if fields.get(f.name) not in (None, *_PLACEMENT) and f.value
            and (f.value in texts or "$" in f.value)]


# flags that place an engine in its group without changing its memory (an LWS pod's ranks)
_PLACEMENT = ("data_parallel_start_rank", "data_parallel_size_local", "api_server_count",
              "headless", "model", "node_rank")


def _engine_args(p: Parsed) -> Any:
    """The engine arguments, with the modelled vLLM environment variables of the container
    (`engines/vllm_env.py`; a value vLLM cannot parse is left at its default here and
    reported by `flag-values`)."""
    from kvplan.core.sizing import EngineArgs
    from kvplan.engines.vllm_env import ENV_FIELDS, parse_value

    names = {f.name for f in fields(EngineArgs)}
    a = EngineArgs(**{k: v for k, v in p.values.items() if k in names})
    if p.engine == "sglang":
        a.engine = "sglang"  # its own KV formats (fp4_e2m1) and pool rules
    if p.values.get("headless") and a.api_server_count is None:
        a.api_server_count = 1  # `vllm serve --headless`: the worker counts one API process
    if p.engine == "vllm":
        for var, (fld, _) in ENV_FIELDS.items():
            value = p.env_value(var)
            if value is not None:
                with contextlib.suppress(BadInput):  # flag-values reports it
                    setattr(a, fld, parse_value(var, value))
    from kvplan.core.attnbackend import BACKENDS

    for fld in ("attention_backend", "attention_backend_env"):  # one kvplan does not model:
        if str(getattr(a, fld) or "").upper() not in BACKENDS:  # the default (a warning)
            setattr(a, fld, None)
    return a


def _long_model(model: Any, mml: int) -> Any:
    """VLLM_ALLOW_LONG_MAX_MODEL_LEN=1: the length keys raised to the requested length."""
    from kvplan.core.arch import MAX_LEN_KEYS

    def lift(c: dict) -> dict:
        c = dict(c)
        for k in MAX_LEN_KEYS:
            if isinstance(c.get(k), (int, float)) and c[k] < mml:
                c[k] = mml
        for sub in ("text_config", "llm_config", "language_config", "text_model_config"):
            if isinstance(c.get(sub), dict):
                c[sub] = lift(c[sub])
        return c

    return replace(model, config=lift(model.config))


def run(out: Any, p: Parsed, version: str, catalogs: list[str] | None) -> None:
    from kvplan.core.arch import normalize
    from kvplan.core.sizing import derived_max_model_len, size
    from kvplan.core.versions import VllmVersion

    got = _inputs(out, p, catalogs)
    if got is None:
        return
    model, gpu = got
    _time_sliced(out, p, gpu, version)
    hidden = _unresolved_sizing(p)
    if hidden:  # sized with a default in its place, a verdict would be a guess
        f = hidden[0]
        _skip_sized(out, f"not sized: {f.key} is {f.value}, which kvplan cannot resolve "
                    "(give it literally, or in the container's env)")
        return
    if p.engine == "vllm" and p.values.get("hf_overrides"):  # as vLLM applies them to the config
        from kvplan.engines.vllm_overrides import apply_hf_overrides

        model = replace(model, config=apply_hf_overrides(model.config, p.values["hf_overrides"]))
    a = _engine_args(p)
    if p.engine == "vllm" and p.values.get("pooler_config"):
        from kvplan.engines.vllm_pooler import read

        with contextlib.suppress(BadInput):  # a value the release refuses: flag-values
            a.pooler = read(str(p.values["pooler_config"]), version)
    spec_why = _speculative(out, p, a, version, catalogs)
    try:
        arch = normalize(model.config)
    except BadInput as e:
        out.findings[-1].status, out.findings[-1].message = FAIL, f"cannot size: {e.message}"
        out.findings[-1].fix = "add kvplan.io/ignore: sizing-inputs to skip sizing"
        _skip_sized(out, "not sized: the architecture is not modelled")
        return
    if not _tensor_parallel(out, p, arch, a):
        for cid in SIZED[1:]:
            out.add(cid, SKIP, "not sized: the parallel layout is invalid")
        return
    mml = a.max_model_len
    longest, longest_src = derived_max_model_len(arch, VllmVersion.of(version))
    if mml and mml > 0 and mml > longest:
        allow = ALLOW_LONG.get(p.engine)
        if allow and (p.env_value(allow) or "").lower() in ("1", "true"):
            model = _long_model(model, mml)
        else:
            name = spelled(p.engine, "max_model_len")
            out.add("max-model-len-fits", FAIL, f"{name} {mml} exceeds the model's maximum of "
                    f"{longest} ({longest_src}): the engine refuses to "
                    "start", p.loc_of("max_model_len"), fix=f"{name} {longest}"
                    + (f" (or set {allow}=1 if the model really handles more)" if allow else ""),
                    current=mml, suggested=longest)
            a.max_model_len = longest
    gmu = a.gpu_memory_utilization
    if gmu is not None and not 0 < gmu <= 1:
        for cid in SIZED[1:]:
            out.add(cid, SKIP, "not sized: gpu_memory_utilization is outside (0, 1]")
        return
    if p.engine != "vllm" and (p.values.get("enable_lora") or p.values.get("lora_adapters")):
        passed = next(f for f in out.findings if f.id == "sizing-inputs")  # fail closed
        passed.status, passed.fix = FAIL, "add kvplan.io/ignore: sizing-inputs to skip sizing"
        passed.message = (f"cannot size: kvplan models vLLM's LoRA slots, not {p.engine}'s "
                          "LoRA memory pool")
        for c in SIZED[1:]:
            out.add(c, SKIP, "not sized: LoRA memory is not modelled for this engine")
        return
    _warn_unmodelled(out, p, a, version, arch, spec_why)
    if p.engine == "vllm":
        _refusals(out, p, a, version, gpu)
        if any(f.id == "flag-values" and f.status == FAIL and "(microbatching)" in f.message
               for f in out.findings):  # reported at the flag: size the rest without it
            a.enable_dbo, a.ubatch_size = False, 1
    try:
        a = _sglang_pool(p, model, gpu, a, version)
        r = size(model, gpu, a, version)
    except BadInput as e:
        passed = next(f for f in out.findings if f.id == "sizing-inputs")
        if e.message.startswith("kvplan does not"):
            passed.status, passed.fix = FAIL, "add kvplan.io/ignore: sizing-inputs to skip sizing"
            passed.message = f"cannot size: {e.message}"
        elif e.flag == "kv_cache_dtype":  # vLLM has no backend for it here
            out.add("flag-values", FAIL, f"{e.message}: the engine refuses to start",
                    p.loc_of("kv_cache_dtype"), fix=e.hint or "fix the flag")
        elif "dtype" in e.message and _engine_accepts_kv_dtype(p, version):
            passed.status, passed.fix = FAIL, "add kvplan.io/ignore: sizing-inputs to skip sizing"
            passed.message = (f"cannot size: kvplan does not model --kv-cache-dtype "
                              f"{p.values['kv_cache_dtype']} (vLLM accepts it)")
        elif "dtype" in e.message:
            out.add("flag-values", FAIL, f"{e.message}: the engine refuses to start",
                    p.loc_of(e.flag or "kv_cache_dtype"), fix=e.hint or "fix the flag")
        elif e.flag == "vllm_version":  # the release lacks the model: the image is the fix
            src = out.target.version_source or ""
            passed.status, passed.message = FAIL, f"cannot size: {e.message}"
            after = e.message.rsplit("after ", 1)[-1].rstrip(")")
            passed.fix = (f"run a vLLM image newer than {after} (this one is "
                          f"{src.split(' ', 1)[1]})" if src.startswith("image ") else
                          "set kvplan.io/vllm-version to a later release"
                          if src == "kvplan.io/vllm-version" else e.hint)
        elif e.flag == "tensor_parallel_size":  # a layout vLLM rejects (FP8 block split)
            tpv = next(f for f in out.findings if f.id == "tensor-parallel-valid")
            tpv.status, tpv.message = FAIL, f"{e.message}: the engine refuses to start"
            tpv.fix = e.hint or "change the tensor parallel size"
        elif e.flag:  # a scheduler limit vLLM rejects, reported at the flag that sets it
            fld = e.flag if e.flag in p.values else next(
                (f for f in ("max_num_seqs", "max_num_batched_tokens", "max_model_len")
                 if f in p.values), e.flag)
            out.add("flag-values", FAIL, f"{e.message}: the engine refuses to start",
                    p.loc_of(fld), fix=e.hint or "fix the flag")
        else:
            passed.status, passed.message = FAIL, f"cannot size: {e.message}"
            passed.fix = e.hint or "fix the flags"
        for c in SIZED[1:]:
            out.add(c, SKIP, "not sized")
        return
    from kvplan.core.prefixcache import prefix_caching

    out.facts.update(max_model_len=r.max_model_len, max_num_seqs=r.max_num_seqs,
                     kv_cache_tokens=r.kv_cache_tokens, num_gpu_blocks=r.num_gpu_blocks,
                     tensor_parallel_size=a.tensor_parallel_size,
                     prefix_caching=prefix_caching(r)[0], engine_v0=r.version.engine_v0)
    if r.version.engine_v0:  # 0.8-0.10 moved this start to V0: say so where it was sized
        passed = next(f for f in out.findings if f.id == "sizing-inputs")
        passed.message += f"; {r.engine_note}"
    from kvplan.engines.vllm_archs import FALLBACK

    fallback = next((n for n in r.notes if FALLBACK in n), None)
    if fallback:  # the registry lacks the architecture: sized as a generic decoder
        passed = next(f for f in out.findings if f.id == "sizing-inputs")
        passed.status, passed.message = WARN, f"{passed.message}; {fallback}"
        passed.fix = passed.fix or ("confirm the start logs the Transformers backend, or "
                                    "accept the margin (kvplan.io/ignore: sizing-inputs)")
    if not _weights(out, p, r):
        for cid in SIZED[2:]:
            out.add(cid, SKIP, "not sized: the weights do not fit")
        return
    _late(out, p, r, gpu)
    r = _max_model_len(out, p, r, model, gpu, a, version)
    if r is None:
        for cid in SIZED[4:]:
            out.add(cid, SKIP, "not sized: not one request fits")
        return
    from kvplan.check.capacity_checks import seqs_and_replicas

    seqs_and_replicas(out, p, r, model, gpu, version)


# 0.24+ `--spec-method` / `--spec-model` / `--spec-tokens`: keys of the speculative config
SPEC_FLAGS = {"spec_method": "method", "spec_model": "model",
              "spec_tokens": "num_speculative_tokens"}


def _speculative(out: Any, p: Parsed, a: Any, version: str,
                 catalogs: list[str] | None) -> str:
    """Size vLLM's `--speculative-config` JSON (the draft resolved like the model); the
    reason it is not sized otherwise ("" when sized or absent)."""
    from kvplan.core.specdec import check_version
    from kvplan.core.versions import VllmVersion
    from kvplan.engines.vllm_spec import speculative
    from kvplan.sources.resolve import resolve_model

    value = p.values.get("speculative_config")
    if p.engine != "vllm":
        return ""
    given = {key: p.values[fld] for fld, key in SPEC_FLAGS.items()
             if p.values.get(fld) is not None}
    if given:  # 0.24+ `create_speculative_config`: the flags fill the JSON's keys
        import json

        from kvplan.engines.vllm_spec import parse_speculative_config

        base = parse_speculative_config(value, what="--speculative-config") \
            if value and str(value).lstrip().startswith("{") else {}
        clash = sorted(set(given) & set(base))
        if clash:
            f = p.set_by[next(fld for fld, key in SPEC_FLAGS.items() if key == clash[0])]
            out.add("flag-values", FAIL, f"{f.key} and --speculative-config['{clash[0]}'] "
                    "are mutually exclusive: the engine refuses to start", f.loc,
                    fix=f"remove {f.key} or the key from --speculative-config")
            return f"{f.key} clashes with --speculative-config"
        value = json.dumps({**base, **given})
    if not value:
        return ""
    if not str(value).lstrip().startswith("{"):
        return "a draft given by --speculative-model, not --speculative-config"
    try:
        spec = speculative(value, lambda name: resolve_model(name, catalogs),
                           version=version)
        check_version(spec, VllmVersion.of(version))
    except BadInput as e:
        f = p.set_by.get("speculative_config") or next(
            (p.set_by[fld] for fld in SPEC_FLAGS if fld in p.set_by), None)
        if "refuses" in e.message:  # vLLM's own start-up check, not a gap in kvplan
            out.add("flag-values", FAIL, f"{e.message}: the engine refuses to start",
                    f.loc if f else p.cmd.loc, fix=e.hint or "fix the speculative config")
        elif p.values.get("kv_sharing_fast_prefill") and _eagle_like(value) and \
                VllmVersion.of(version).at_least(0, 10, 2):
            # the draft is unresolved (offline CI), but the refusal needs only the method
            fp = p.set_by["kv_sharing_fast_prefill"]
            out.add("flag-values", FAIL, "vLLM refuses --kv-sharing-fast-prefill with "
                    "EAGLE-style speculative decoding (MTP included): the engine refuses to "
                    "start", fp.loc, fix="drop --kv-sharing-fast-prefill or the EAGLE draft")
        return e.message
    a.speculative = spec
    return ""


def _eagle_like(value: str) -> bool:
    """Whether a speculative config's method drafts from the target's hidden states
    (`SpeculativeConfig.use_eagle`: eagle, eagle3, any MTP, dflash, dspark)."""
    import json

    from kvplan.core.specdec import EAGLE_LIKE

    try:
        method = str(json.loads(value).get("method") or "").lower()
    except (ValueError, AttributeError):
        return False
    return method in EAGLE_LIKE or method.endswith("mtp")


def _all2all(p: Parsed, a: Any, version: str) -> str:
    """The all-to-all backend vLLM takes from the flag and the environment for this release
    (`core/all2all.resolve`; a name it refuses is left to sizing to report)."""
    from kvplan.core import all2all as A2A
    from kvplan.core.versions import VllmVersion

    try:
        return A2A.resolve(a.all2all_backend, a.all2all_backend_env,
                           VllmVersion.of(version).v, []) or ""
    except BadInput:
        return str(a.all2all_backend or a.all2all_backend_env or "")


def _warn_unmodelled(out: Any, p: Parsed, a: Any, version: str, arch: Any,
                     spec_why: str = "") -> None:
    """Flags kvplan sizes without: sizing-inputs warns, naming them. All but the context-
    parallel split take memory from the KV cache."""
    if p.engine != "vllm":
        if p.values.get("speculative_algorithm"):  # SGLang / TGI drafts: not sized
            passed = next(f for f in out.findings if f.id == "sizing-inputs")
            passed.status = WARN
            passed.message += (f"; sized without {p.engine}'s speculative decoding (its draft "
                               "model and cache come out of the pool): the pool is smaller "
                               "than these checks find")
            passed.fix = ("size from a real start, or accept the margin "
                          "(kvplan.io/ignore: sizing-inputs)")
        return
    drafted = any(p.values.get(fld) for fld in ("speculative_config", *SPEC_FLAGS))
    smaller = [f"the speculative draft model ({spec_why})"] if drafted and \
        a.speculative is None else []
    smaller += [what for fld, what in (
        ("kv_transfer_config", "the KV connector's buffers"),
        ("disable_sliding_window", "--disable-sliding-window (sliding-window layers kept "
         "whole, the length capped at the window)")) if p.values.get(fld)]
    from kvplan.core import all2all as A2A

    a2a = _all2all(p, a, version)
    other = ["--prefill-context-parallel-size (its extra GPUs per replica and MoE ranks; it "
             "does not split the KV cache)"] if str(
        p.values.get("prefill_context_parallel_size") or "1") != "1" else []
    if a.enable_expert_parallel and a.data_parallel_size > 1 and arch.num_experts and \
            a2a not in ("", "pplx", *A2A.NO_BUFFER):
        if a2a in A2A.DEEPEP:  # its buffers and low latency's experts are sized
            smaller.append("NVSHMEM's rounding of DeepEP's RDMA heap (0.5-1.1 GiB where it "
                           "has one)")
            if a2a == "deepep_high_throughput":
                other.append("DeepEP's MoE activations (sized as the all-gather path's, "
                             "the ranks hosting the profile's experts)")
        else:
            smaller.append(f"the {a2a} all-to-all buffers of expert parallelism")
    from kvplan.core.versions import VllmVersion
    from kvplan.engines.vllm_unsized import unsized

    release = VllmVersion.of(version).v[:2]
    for name, what in unsized([(f.name, f.value, f.negated) for f in p.flags if f.name],
                              release):
        (smaller if name == "--kv-offloading-size" else other).append(what)
    from kvplan.core.attnbackend import BACKENDS

    backend = p.values.get("attention_backend") or p.env_value("VLLM_ATTENTION_BACKEND")
    if backend and str(backend).upper() not in BACKENDS:  # sized with vLLM's default choice
        other.append(f"the attention backend {backend} (kvplan sizes with vLLM's default "
                     "backend)")
    if not smaller and not other:
        return
    passed = next(f for f in out.findings if f.id == "sizing-inputs")
    passed.status = WARN
    passed.message += "; sized without " + " and ".join(smaller + other) + (
        ", which come out of the KV cache: the pool is smaller than these checks find"
        if not other else ": the KV cache differs from what these checks find")
    passed.fix = ("size from a real start with --kv-cache-memory-bytes, or accept the margin "
                  "(kvplan.io/ignore: sizing-inputs)")


def _refusals(out: Any, p: Parsed, a: Any, version: str, gpu: Any) -> None:
    """Flag combinations vLLM refuses at start-up (`engines/vllm_unsized.py`): flag-values
    fails at the flag."""
    from kvplan.core.versions import VllmVersion
    from kvplan.engines.vllm_env import read_by
    from kvplan.engines.vllm_unsized import refusals

    given = {f.name: f.value for f in p.flags if f.name and not f.negated}
    a2a = _all2all(p, a, version) or None
    v = VllmVersion.of(version).v
    env = p.cmd.env.get("VLLM_ALL2ALL_BACKEND")
    ignored = env is not None and env.value and not read_by("VLLM_ALL2ALL_BACKEND", v)
    for flag, what, fix in refusals(given, v, gpu.vendor, a.tensor_parallel_size,
                                    a.max_num_seqs, a2a):
        use = next(f for f in p.flags if f.name == flag)
        if ignored and "all-to-all backend" in what:  # an image upgraded past the variable
            what += (f" (vLLM {version} no longer reads VLLM_ALL2ALL_BACKEND="
                     f"{env.value}; it takes --all2all-backend)")
        out.add("flag-values", FAIL, f"{what}: the engine refuses to start", use.loc,
                fix=fix, current=use.value)


def _engine_accepts_kv_dtype(p: Parsed, version: str) -> bool:
    """A --kv-cache-dtype the release knows but kvplan does not model (then sizing-inputs)."""
    from kvplan.check.checks import _registry

    v = p.values.get("kv_cache_dtype")
    if p.engine != "vllm" or v is None:
        return False
    info = _registry(version).flags.get("--kv-cache-dtype", {})
    return v in (info.get("choices") or info.get("known_values") or ())


def _tensor_parallel(out: Any, p: Parsed, arch: Any, a: Any) -> bool:
    tp, pp = a.tensor_parallel_size, a.pipeline_parallel_size
    name = spelled(p.engine, "tensor_parallel_size")
    loc = p.loc_of("tensor_parallel_size")
    for fld in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
        if getattr(a, fld) < 1:
            out.add("tensor-parallel-valid", FAIL, f"{spelled(p.engine, fld)} "
                    f"{getattr(a, fld)} must be >= 1", p.loc_of(fld),
                    fix=f"{spelled(p.engine, fld)} 1")
            return False
    why = tp_refusal(arch, tp)
    if why:
        ok = valid_tps(arch)
        out.add("tensor-parallel-valid", FAIL, f"{name} {tp}: {why}, so the engine refuses "
                "to start", loc,
                fix=f"{name} {max(d for d in ok if d <= tp)} (valid: {', '.join(map(str, ok))})",
                current=tp, suggested=max(d for d in ok if d <= tp))
        return False
    if pp > arch.num_layers:
        out.add("tensor-parallel-valid", FAIL, f"{spelled(p.engine, 'pipeline_parallel_size')} "
                f"{pp} exceeds the model's {arch.num_layers} layers",
                p.loc_of("pipeline_parallel_size"),
                fix=f"{spelled(p.engine, 'pipeline_parallel_size')} {arch.num_layers} or less")
        return False
    out.add("tensor-parallel-valid", PASS, f"TP {tp} divides "
            f"{arch.num_attention_heads} attention heads"
            + (f"; PP {pp} <= {arch.num_layers} layers" if pp > 1 else ""), loc)
    return True


def _sglang_pool(p: Parsed, model: Any, gpu: Any, a: Any, version: str) -> Any:
    """SGLang: KV pool = mem-fraction-static x total - weights (the inverse of what
    `kvplan recommend --engine sglang` emits)."""
    from kvplan.core.sizing import size

    if p.engine != "sglang" or a.gpu_memory_utilization is None:
        return a
    mfs = a.gpu_memory_utilization
    base = replace(a, gpu_memory_utilization=None)
    r = size(model, gpu, base, version, hints=False)
    kv = int(mfs * gpu.memory_bytes) - r.budget.weights
    if kv <= 0:
        return replace(base, gpu_memory_utilization=mfs)  # weights-fit reports it
    return replace(base, kv_cache_memory_bytes=kv, engine="sglang")


def _late(out: Any, p: Parsed, r: Any, gpu: Any) -> None:
    """`late-allocations-fit`: what vLLM allocates after sizing the KV cache, unbudgeted,
    against the memory gpu_memory_utilization leaves (`SizeResult.outside_budget_bytes`)."""
    cid, b, late = "late-allocations-fit", r.budget, r.outside_budget_bytes
    loc = p.loc_of("gpu_memory_utilization")
    if not late or gpu.unified_memory:
        out.add(cid, PASS, "nothing is allocated outside the budget after sizing" if not late
                else "unified memory: the host's RAM use decides", loc)
        return
    if late <= b.headroom:
        out.add(cid, PASS, f"{late / GiB:.2f} GiB allocated after sizing (CUDA graphs, "
                f"warm-ups, workspaces) fits in the {b.headroom / GiB:.2f} GiB left outside "
                "the budget", loc)
        return
    name, safe = spelled(p.engine, "gpu_memory_utilization"), r.safe_gpu_memory_utilization
    out.add(cid, WARN, f"{late / GiB:.2f} GiB allocated after the KV cache is sized (CUDA graphs "
            f"vLLM does not subtract, warm-ups, workspaces) exceeds the {b.headroom / GiB:.2f} "
            "GiB outside the budget: OOM risk at start-up or on the first requests", loc,
            fix=f"{name} {safe:g}" if safe else f"lower {name}",
            current=b.utilization, suggested=safe)


def _weights(out: Any, p: Parsed, r: Any) -> bool:
    b = r.budget
    loc = p.loc_of("tensor_parallel_size")
    hint = next((n for n in r.notes if n.startswith(("fits with", "does not fit"))), None)
    if hint:
        m = re.match(r"fits with --tensor-parallel-size (\d+) (.*)", hint)
        if m:
            hint = (f"{spelled(p.engine, 'tensor_parallel_size')} {m.group(1)} on "
                    f"{m.group(1)} GPUs {m.group(2)}") + _devices_too(p, int(m.group(1)))
        elif hint.startswith("fits with "):
            hint = hint.replace("fits with ", "use ", 1)
    kv = r.args.kv_cache_memory_bytes
    if b.weights > b.requested and kv is None:  # a given KV size is bounded by the GPU alone
        out.add("weights-fit", FAIL, f"{r.failure}: the engine cannot load the model", loc,
                fix=hint or "use a larger GPU, more tensor parallelism or a quantized "
                "checkpoint", current=round(b.weights / GiB, 2))
        return False
    if kv is not None and r.args.engine == "vllm" and kv > r.kv_cache_memory_bytes_max:
        out.add("weights-fit", FAIL, r.failure, p.loc_of("kv_cache_memory_bytes"),
                fix=f"{spelled(p.engine, 'kv_cache_memory_bytes')} "
                    f"{r.kv_cache_memory_bytes_max} or less, or drop it for "
                    "--gpu-memory-utilization", current=kv,
                suggested=r.kv_cache_memory_bytes_max)
        return False
    if b.kv_pool <= 0:
        fix = "raise --gpu-memory-utilization or use more tensor parallelism"
        if b.available_kv > 0:  # the frontend's multimodal decoding took the rest
            fix = "lower --mm-ipc-gpu-memory-gb or the video decoders, or raise " \
                  "--gpu-memory-utilization"
        out.add("weights-fit", FAIL, f"{r.failure}: the engine refuses to start", loc,
                fix=hint or fix)
        return False
    out.add("weights-fit", PASS, f"weights {b.weights / GiB:.2f} GiB per GPU; "
            f"{b.kv_pool / GiB:.2f} GiB left for the KV cache" + (
                f" ({b.frontend_reserved / GiB:.2f} GiB of the logged "
                f"{b.available_kv / GiB:.2f} GiB go to the API server's multimodal decoding)"
                if b.frontend_reserved else ""), loc,
            current=round(b.weights / GiB, 2))
    return True


def _devices_too(p: Parsed, n: int) -> str:
    """The device list a TP fix must widen too: a CUDA_VISIBLE_DEVICES (or
    NVIDIA_VISIBLE_DEVICES) that shows the engine fewer than `n` GPUs, as gpu-count-matches
    would fail next (`checks._visible_devices`)."""
    from kvplan.check.checks import _visible_devices

    vis, loc, var = _visible_devices(p)
    if vis is None or vis >= n:
        return ""
    where = f"line {loc.line}: " if loc and loc.line and loc.file else ""
    how = "the script's default " if var in p.cmd.env_defaulted else ""
    return (f", and list {n} devices in {var} ({where}{how}{p.cmd.env[var].value} shows the "
            f"engine {vis} GPU{'s' * (vis != 1)})")


def _max_model_len(out: Any, p: Parsed, r: Any, model: Any, gpu: Any, a: Any,
                   version: str) -> Any:
    """The result to plan with: as given if it fits, else at the largest length that fits."""
    from kvplan.core.sizing import DRAFT_LEN_SOURCE, size

    name = spelled(p.engine, "max_model_len")
    loc = p.loc_of("max_model_len")
    if out.has("max-model-len-fits", FAIL):  # above the model's maximum: planned at it
        return r if r.fits else None
    given = p.values.get("max_model_len")
    src = f"{name} {given}" if given not in (None, -1) else (
        f"max_model_len {r.max_model_len} (the model's default)" if given is None else
        f"{name} auto")
    largest = r.largest_max_model_len or 0
    cap = r.max_num_seqs_limit
    if not r.fits and cap is not None and r.max_num_seqs > cap >= 1 and largest >= \
            r.max_model_len:  # the length fits; max_num_seqs is over the Mamba block count
        out.facts["max_num_seqs_over_blocks"] = (r.max_num_seqs, cap)
        r = size(model, gpu, replace(a, max_num_seqs=cap), version, hints=False)
    stall = r.whole_prompt_limit if r.fits and p.engine == "vllm" else None
    if stall is not None:  # 0.19.x sliding-window models: a long prompt stalls the queue
        out.add("max-model-len-fits", FAIL, f"{src} starts, but vLLM {r.version.text}'s "
                f"whole-prompt admission check never admits a prompt over {stall:,} tokens "
                "on this pool (its sliding-window groups are charged the whole prompt), and "
                "the scheduler then stops the waiting queue at it for good: every request "
                "behind it waits", loc, fix=f"{name} {stall + 1} (or vLLM 0.20+, which caps "
                "the check)", current=r.max_model_len, suggested=stall + 1)
        return r
    if r.fits and r.max_model_len_source.startswith(DRAFT_LEN_SOURCE) and (
            given is None or isinstance(given, int) and given > r.max_model_len):
        # 0.33 `_limit_max_model_len_to_draft`, from the flag or the model's default
        if given is None:
            src = f"the model's default max_model_len ({r.max_model_len_source.split('; ')[-1]})"
        out.add("max-model-len-fits", WARN, f"{src} starts as {r.max_model_len:,}: vLLM "
                f"{r.version.text} lowers it to the draft model's (model runner V2 cannot skip "
                f"speculation for longer sequences), so longer prompts get HTTP 400; the pool "
                f"holds {r.kv_cache_tokens:,} tokens ({r.max_concurrency:.2f} requests of "
                f"{r.max_model_len:,})", loc, fix=f"{name} {r.max_model_len}, or a drafter with "
                "a longer context (an EAGLE-style one shares the target's)",
                current=given, suggested=r.max_model_len)
        return r
    if r.fits:
        out.add("max-model-len-fits", PASS, f"{src} fits: the pool holds "
                f"{r.kv_cache_tokens:,} tokens ({r.max_concurrency:.2f} full-length requests)",
                loc, current=r.max_model_len)
        return r
    fix = f"{name} {largest}" if largest > 0 else "use a larger GPU or more tensor parallelism"
    out.add("max-model-len-fits", FAIL, f"{src} does not fit: {r.failure}; the engine "
            "refuses to start", loc, fix=fix, current=r.max_model_len,
            suggested=largest or None)
    if largest <= 0:
        return None
    return size(model, gpu, replace(a, max_model_len=largest), version, hints=False)


def replicas_fix(t: Any, n: int) -> str:
    if t.replicas_source.startswith("ScaledObject/"):  # KEDA overwrites spec.replicas
        return f"maxReplicaCount: {n} ({t.replicas_source})"
    if t.replicas_max is not None or t.replicas_source == "HorizontalPodAutoscaler":
        return f"maxReplicas: {n}"
    return {"spec.replicas": f"spec.replicas: {n}", "deploy.replicas": f"deploy.replicas: {n}",
            "replicas": f"replicas: {n}", "spec.replicas (groups)": f"spec.replicas: {n}",
            "predictor.minReplicas/maxReplicas": f"minReplicas: {n} (and maxReplicas >= {n})"
            }.get(
        t.replicas_source, f"run {n} replicas")
