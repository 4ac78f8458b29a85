"""`kvplan recommend`: resolve candidates, search, and turn the best plan into flags."""

from __future__ import annotations

from dataclasses import dataclass, field

from kvplan import catalog as cat_mod
from kvplan.core.plan import (
    Plan,
    Targets,
    dp_advice,
    kv_format_advice,
    length_advice,
    search,
)
from kvplan.core.sizing import EngineArgs, Model
from kvplan.core.workload import Workload
from kvplan.engines.emit import command_for, flags_for
from kvplan.errors import BadInput, DoesNotFit
from kvplan.sources.resolve import gpu_from_entry, resolve_gpu


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

    @property
    def best(self) -> Plan:
        return self.plans[0]

    def to_json(self) -> dict:
        b = self.best

        def row(p: Plan) -> dict:
            return {
                "gpu": p.gpu.id, "tensor_parallel_size": p.result.args.tensor_parallel_size,
                "kv_cache_dtype": p.result.kv_dtype, "max_num_seqs": p.max_num_seqs,
                "max_model_len": p.max_model_len, "replicas": p.replicas,
                "gpus_per_replica": p.gpus_per_replica, "total_gpus": p.total_gpus,
                "per_replica_output_tokens_per_s": round(p.per_replica_tokens_per_s, 1),
                "ttft_p95_s": round(p.ttft_p95_s, 3), "tpot_p50_ms": round(p.tpot_p50_ms, 2),
                "queue_depth_limit": p.queue_depth_limit,
                "cost_per_hour": round(p.cost_per_hour, 2) if p.cost_per_hour else None,
                "cost_per_million_output_tokens":
                    round(p.cost_per_million, 3) if p.cost_per_million else None,
                "safe_max_num_seqs": p.safe_seqs, "guaranteed_max_num_seqs": p.guaranteed_seqs,
                "kv_ceiling_batch_size": p.kv_ceiling, "utilization": round(p.utilization, 3),
                "users_per_gpu": round(p.users_per_gpu, 1) if p.users_per_gpu else None,
                "daily_output_tokens": int(p.daily_output_tokens),
            }

        return {**row(b), "model": self.model.id, "engine": self.engine,
                "workload": self.workload.name, "rate": self.targets.rate,
                "preempt_risk": self.targets.preempt_risk, "policy": self.targets.policy,
                "flags": self.flags, "command": self.command,
                "alternatives": [row(p) for p in self.plans[1:]],
                "advice": self.advice + b.notes, "rejected": self.rejected}


def _gpus(spec: str | None, catalogs: list[str] | None):
    if not spec:
        raise BadInput("no GPU given", hint="pass --gpu h100, several (--gpu h100,l40s) or any")
    if spec.strip().lower() == "any":
        cat = cat_mod.load("gpus", catalogs)
        return [gpu_from_entry(k, e) for k, e in cat.items() if e.get("price_per_hour")]
    return [resolve_gpu(s.strip(), None, catalogs) for s in spec.split(",") if s.strip()]


def _tps(spec: str, model: Model) -> list[int]:
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
    return vals


def recommend(model: Model, gpu_spec: str | None, tp_spec: str, kv_spec: str,
              base: EngineArgs, version: str | None, wl: Workload, t: Targets, engine: str,
              catalogs: list[str] | None, top: int = 3) -> Recommendation:
    gpus = _gpus(gpu_spec, catalogs)
    kvs = [k.strip() for k in kv_spec.split("|") if k.strip()] or ["auto"]
    plans, rejected = search(model, gpus, base, version, wl, t, _tps(tp_spec, model), kvs,
                             limit=max(top, 1))
    if not plans:
        detail = "; ".join(rejected[:3]) if rejected else "no candidate"
        raise DoesNotFit(f"no deployment meets the targets: {detail}",
                         hint="relax --tpot/--ttft, allow more GPUs (--gpu any, -tp auto) "
                              "or --kv-cache-dtype auto|fp8")
    best = plans[0]
    flags = flags_for(best, engine)
    if engine == "vllm":
        from kvplan.engines.vllm_registry import Registry

        bad = Registry(version).unknown(flags)
        if bad:  # a bug in kvplan, not in the user's input: never emit a flag vLLM rejects
            raise RuntimeError(f"emitted flags unknown to vLLM {version}: {bad}")
    cmd = command_for(best, engine, model.id)
    advice = length_advice(best.result, wl.clip(best.max_model_len)) + kv_format_advice(
        best.result) + (dp_advice(model, best.gpu, best.result) if engine == "vllm" else [])
    return Recommendation(model, wl, t, engine, plans, rejected, flags, cmd, advice)
