"""The throughput curve of one deployment: tokens/s, TPOT and TTFT against batch depth."""

from __future__ import annotations

from kvplan.core import capacity, perf
from kvplan.core.record import record
from kvplan.core.sizing import EngineArgs, Gpu, Model, SizeResult, size
from kvplan.core.workload import Workload
from kvplan.errors import DoesNotFit


@record
class Curve:
    result: SizeResult
    workload: Workload
    points: list[perf.Point]
    knee: int
    kv_ceiling: int  # batch where the running batch fills the pool on average
    safe: int  # largest batch within a 1 % preemption risk

    def to_json(self) -> dict:
        from kvplan.core.plan import kv_format_advice

        return {
            "model": self.result.model, "gpu": self.result.gpu,
            "tensor_parallel_size": self.result.args.tensor_parallel_size,
            "workload": self.workload.name,
            "points": [{"batch_size": p.batch_size,
                        "output_tokens_per_s": round(p.output_tokens_per_s, 1),
                        "tpot_ms": round(p.tpot_ms, 2), "ttft_ms": round(p.ttft_ms, 1),
                        "preempting": p.batch_size > self.kv_ceiling}
                       for p in self.points],
            "knee_batch_size": self.knee,
            "kv_ceiling_batch_size": self.kv_ceiling,
            "safe_max_num_seqs": self.safe,
            "max_model_len": self.result.max_model_len,
            "max_num_batched_tokens": self.result.max_num_batched_tokens,
            "kv_cache_dtype": self.result.kv_dtype,
            "notes": kv_format_advice(self.result),
        }


def knee_of(points: list[perf.Point]) -> int:
    """First batch where more batch costs relatively more latency than it adds throughput:
    (d tokens/s / tokens/s) < (d TPOT / TPOT) between consecutive points."""
    for a, b in zip(points, points[1:]):
        gain = b.output_tokens_per_s / a.output_tokens_per_s - 1
        cost = b.tpot_ms / a.tpot_ms - 1
        if cost > 0 and gain < cost:
            return a.batch_size
    return points[-1].batch_size


def default_sizes(limit: int) -> list[int]:
    sizes, b = [], 1
    while b < limit:
        sizes.append(b)
        b = b * 2 if b < 8 else int(b * 1.5)
    return sorted(set(sizes + [max(limit, 1)]))


def curve(model: Model, gpu: Gpu, args: EngineArgs, version: str | None, wl: Workload,
          sizes: list[int] | None = None) -> Curve:
    r = size(model, gpu, args, version)
    if not r.fits:
        raise DoesNotFit(f"{r.model} on {r.gpu}: {r.failure}")
    wlc = wl.clip(r.max_model_len)
    d = capacity.demand(r.groups, wlc, r.max_model_len)
    ceiling = capacity.mean_ceiling(d, r.usable_blocks)
    safe = capacity.safe_max_num_seqs(d, r.usable_blocks, 0.01)
    pm = perf.build(r, gpu)
    o = wlc.output.points
    o_mean, o_sq = sum(o) / len(o), sum(x * x for x in o) / len(o)
    grid = sizes or default_sizes(max(2, min(int(ceiling * 1.5), 4096)))
    pts = [perf.operating_point(pm, b, wlc.prompt.mean, o_mean, o_sq,
                                r.max_num_batched_tokens, wlc.prefix_hit) for b in grid]
    dense = [perf.operating_point(pm, b, wlc.prompt.mean, o_mean, o_sq,
                                  r.max_num_batched_tokens, wlc.prefix_hit)
             for b in default_sizes(max(2, min(ceiling, 4096)))]
    return Curve(r, wlc, pts, knee_of(dense), ceiling, safe)
