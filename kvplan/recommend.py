"""`kvplan recommend`: resolve candidates, search, and turn the best plan into flags."""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass, field, replace

from kvplan import catalog as cat_mod
from kvplan.core.plan import (
    Plan,
    Targets,
    dp_advice,
    kv_format_advice,
    length_advice,
    peak_advice,
    search,
)
from kvplan.core.sizing import DRAFT_LEN_REMEDY, DRAFT_LEN_SOURCE, EngineArgs, Model
from kvplan.core.workload import Workload, rejected_note
from kvplan.engines.emit import command_for, flags_for
from kvplan.errors import BadInput, DoesNotFit
from kvplan.sources.resolve import gpu_from_entry, resolve_gpu
from kvplan.units import fmt_rate


@dataclass
class Emitted:
    """What one plan emits: its flags, environment, command and advice."""

    flags: list[str]
    command: str
    env: list[str]  # NAME=VALUE the command's vLLM needs
    advice: list[str]  # before the plan's own notes


@dataclass
class Recommendation:
    model: Model
    workload: Workload
    targets: Targets
    engine: str
    plans: list[Plan]
    rejected: list[str]
    flags: list[str]
    command: str
    advice: list[str] = field(default_factory=list)
    env: list[str] = field(default_factory=list)  # NAME=VALUE the command's vLLM needs
    rejected_share: float = 0.0  # requests vLLM refuses (a prompt of max_model_len or more)
    offered: Targets | None = None  # the targets as asked, when `targets` are the served part
    emitted: list[Emitted] = field(default_factory=list)  # per plan, the best first

    @property
    def best(self) -> Plan:
        return self.plans[0]

    def to_json(self) -> dict:
        t = self.offered or self.targets

        def row(p: Plan, e: Emitted) -> dict:
            return {
                "gpu": p.gpu.id, "tensor_parallel_size": p.result.args.tensor_parallel_size,
                "kv_cache_dtype": p.result.kv_dtype, "max_num_seqs": p.max_num_seqs,
                "max_model_len": p.max_model_len, "replicas": p.replicas,
                "gpus_per_replica": p.gpus_per_replica, "total_gpus": p.total_gpus,
                "per_replica_output_tokens_per_s": round(p.per_replica_tokens_per_s, 1),
                "per_replica_requests_per_s": round(p.per_replica_rps, 3),
                "max_num_batched_tokens": p.result.max_num_batched_tokens,
                "budget_limited": p.budget_limited,
                "ttft_p95_s": round(p.ttft_p95_s, 3), "tpot_p50_ms": round(p.tpot_p50_ms, 2),
                "tpot_p50_ms_at_rate": (round(p.tpot_at_rate_ms, 2)
                                        if p.tpot_at_rate_ms is not None else None),
                "running_at_rate": (round(p.running_at_rate, 1)
                                    if p.running_at_rate is not None else None),
                "queue_depth_limit": p.queue_depth_limit,
                "cost_per_hour": round(p.cost_per_hour, 2) if p.cost_per_hour else None,
                "cost_per_million_output_tokens":
                    round(p.cost_per_million, 3) if p.cost_per_million else None,
                "safe_max_num_seqs": p.safe_seqs, "guaranteed_max_num_seqs": p.guaranteed_seqs,
                "kv_ceiling_batch_size": p.kv_ceiling, "utilization": round(p.utilization, 3),
                "users_per_gpu": round(p.users_per_gpu, 1) if p.users_per_gpu else None,
                "daily_output_tokens": int(p.daily_output_tokens),
                "peak_ttft_p95_s": _finite(p.peak_ttft_p95_s, 3),
                "peak_utilization": _finite(p.peak_utilization, 3),
                "model": self.model.id, "engine": self.engine,
                "workload": self.workload.name, "rate": t.rate,
                "rejected_share": round(p.rejected_share, 4),
                "served_rate": _finite(p.served_rate, 4),
                "preempt_risk": t.preempt_risk, "policy": t.policy,
                "flags": e.flags, "env": e.env, "command": e.command,
                "advice": e.advice + p.notes,
            }

        rows = [row(p, e) for p, e in zip(self.plans, self.emitted)]
        return {**rows[0], "alternatives": rows[1:], "rejected": self.rejected}


def _finite(x: float | None, digits: int) -> float | None:
    """x rounded; None for None or inf (JSON has no infinity)."""
    return round(x, digits) if x is not None and math.isfinite(x) else None


def _gpus(spec: str | None, catalogs: list[str] | None):
    if not spec:
        raise BadInput("no GPU given", hint="pass --gpu h100, several (--gpu h100,l40s) or any")
    if spec.strip().lower() == "any":
        cat = cat_mod.load("gpus", catalogs)
        return [gpu_from_entry(k, e) for k, e in cat.items() if e.get("price_per_hour")]
    return [resolve_gpu(s.strip(), None, catalogs) for s in spec.split(",") if s.strip()]


def _tps(spec: str, model: Model) -> list[int]:
    """The TP sizes to try: `auto` (1, 2, 4, 8; one that does not divide the heads is a
    rejected candidate) or the user's list, each checked against the model's attention heads
    as vLLM checks them (bad input: no GPU changes it)."""
    s = str(spec).strip().lower()
    if s == "auto":
        return [1, 2, 4, 8]
    try:
        vals = sorted({int(x) for x in s.split(",")})
    except ValueError:
        raise BadInput(f"cannot read --tensor-parallel-size {spec!r}",
                       hint="use N, a list (1,2,4) or auto") from None
    if not vals or vals[0] < 1:
        raise BadInput("--tensor-parallel-size must be >= 1")
    from kvplan.core.arch import normalize, tp_refusal, valid_tps

    arch = normalize(model.config)
    for tp in vals:  # as `kvplan size` says it (sizing._validate_parallel)
        why = tp_refusal(arch, tp)
        if why:
            raise BadInput(f"vLLM rejects --tensor-parallel-size {tp}: {why}",
                           hint=f"use one of {', '.join(map(str, valid_tps(arch)))}",
                           flag="tensor_parallel_size")
    return vals


def _kv_dtypes(spec: str, version: str | None) -> list[str]:
    """The `|`-separated --kv-cache-dtype names, each one the release accepts (bad input
    otherwise: a typo must not vanish into the rejected candidates)."""
    from kvplan.core.versions import VllmVersion

    v = VllmVersion.of(version)
    allowed = v.kv_cache_dtypes
    names: list[str] = []
    for x in (spec or "").split("|"):
        k = x.strip().lower()  # as vLLM's choices spell them (and `size` reads them)
        if not k or k in names:
            continue
        if k not in allowed:
            from kvplan.engines.vllm_registry import registry

            info = registry(v.text).lookup("--kv-cache-dtype")
            if info is not None and k in info.choices:  # the parser takes it; kvplan cannot
                raise BadInput(f"kvplan does not size --kv-cache-dtype {x.strip()} (vLLM "
                               f"{v.text} accepts it)", hint="choose one of "
                               + ", ".join(allowed), flag="kv_cache_dtype")
            close = difflib.get_close_matches(k, allowed, n=2, cutoff=0.6)
            raise BadInput(f"--kv-cache-dtype {x.strip()} is not accepted by vLLM {v.text}",
                           hint=f"did you mean {' or '.join(close)}?" if close else
                           "choose one of " + ", ".join(allowed), flag="kv_cache_dtype")
        names.append(k)
    return names or ["auto"]


_LARGEST = re.compile(r"the largest max_model_len that fits is (\d+)")


def _no_fit_hint(rejected: list[str], t: Targets, gpu_spec: str | None, tp_spec: str,
                 kvs: list[str]) -> str:
    """What to change when no candidate is feasible, from what the candidates failed on."""
    parts = []
    fits = [(int(m.group(1)), r.split(":", 1)[0]) for r in rejected
            if (m := _LARGEST.search(r))]
    if fits:  # the context does not fit: the largest that does, on the best candidate
        n, where = max(fits)
        parts.append(f"--max-model-len {n} fits on {where}")
    if t.tpot_ms is not None or t.ttft_p95_s is not None:
        parts.append("relax --tpot/--ttft")
    more = [f for f, given in (("--gpu any", str(gpu_spec).strip().lower() == "any"),
                               ("-tp auto", str(tp_spec).strip().lower() == "auto")) if not given]
    if more:
        parts.append(f"allow more GPUs ({', '.join(more)})")
    if not any(k.lower().startswith("fp8") for k in kvs):
        parts.append("try --kv-cache-dtype 'auto|fp8'")
    if not parts:
        return "--json lists every candidate and why it was rejected"
    return " or ".join([", ".join(parts[:-1]), parts[-1]] if len(parts) > 1 else parts)


def recommend(model: Model, gpu_spec: str | None, tp_spec: str, kv_spec: str,
              base: EngineArgs, version: str | None, wl: Workload, t: Targets, engine: str,
              catalogs: list[str] | None, top: int = 3) -> Recommendation:
    if top < 1:
        raise BadInput(f"--top must be >= 1, got {top}")
    gpus = _gpus(gpu_spec, catalogs)
    kvs = _kv_dtypes(kv_spec, version)
    tps = _tps(tp_spec, model)
    from kvplan.core.arch import normalize
    from kvplan.core.sizing import release_registers
    from kvplan.core.versions import VllmVersion

    # an architecture vLLM refuses is bad input, not a rejection of every candidate
    release_registers(normalize(model.config), model.config, VllmVersion.of(version))
    # one search: the planner sizes the requests vLLM serves (`Workload.clip`); prompts of
    # max_model_len or more get HTTP 400 and cost nothing, so each candidate is planned on
    # the rate its own max_model_len serves (`served`)
    unserved: list[BadInput] = []
    plans, rejected = search(model, gpus, base, version, wl, t, tps, kvs, limit=top,
                             served=True, stall_cap=engine == "vllm", unserved=unserved)
    if not plans:
        if unserved and len(unserved) == len(rejected):  # vLLM refuses it whole everywhere
            raise unserved[0]
        detail = "; ".join(rejected[:3]) if rejected else "no candidate"
        raise DoesNotFit(f"no deployment meets the targets: {detail}",
                         hint=_no_fit_hint(rejected, t, gpu_spec, tp_spec, kvs))
    emitted = [_emit(p, model, wl, t, engine, version) for p in plans]
    emitted[0].advice[:0] = wl.notes  # the workload's own caveats, once
    best, e = plans[0], emitted[0]
    served = replace(t, rate=best.served_rate, peak_rate=best.served_peak_rate)
    return Recommendation(model, wl, served, engine, plans, rejected, e.flags, e.command,
                          e.advice, e.env, best.rejected_share,
                          t if best.rejected_share else None, emitted)


def _emit(p: Plan, model: Model, wl: Workload, offered: Targets, engine: str,
          version: str | None) -> Emitted:
    """The flags, environment, command and advice of one plan."""
    flags = flags_for(p, engine)
    env = []
    if engine == "vllm":
        from kvplan.engines.vllm_env import env_for
        from kvplan.engines.vllm_registry import Registry

        bad = Registry(version).unknown(flags)
        if bad:  # a bug in kvplan, not in the user's input: never emit a flag vLLM rejects
            raise RuntimeError(f"emitted flags unknown to vLLM {version}: {bad}")
        env = env_for(p.result.args)
    advice = []
    share = p.rejected_share
    if share:
        served = (f"; the fleet is planned for the other {1 - share:.1%} "
                  f"({fmt_rate(p.served_rate)} of {fmt_rate(offered.rate)} req/s)"
                  if p.served_rate and offered.rate else "")
        remedy = ("vLLM 0.20+ serves them at a longer --max-model-len (on this release a "
                  "longer one stalls the engine, below)" if p.length_capped_from else
                  DRAFT_LEN_REMEDY
                  if p.result.max_model_len_source.startswith(DRAFT_LEN_SOURCE) else None)
        advice.append(rejected_note(share, p.max_model_len, remedy=remedy) + served)
    advice += peak_advice(p, offered)
    # on the whole workload: its tails, refused requests included
    advice += length_advice(p.result, wl, share) + kv_format_advice(p.result) + (
        dp_advice(model, p.gpu, p.result) if engine == "vllm" else [])
    return Emitted(flags, command_for(p, engine, model.id), env, advice)
