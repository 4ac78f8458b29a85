"""The throughput curve of one deployment: tokens/s, TPOT and TTFT against batch depth.

Up to the KV ceiling every point is `perf.operating_point`. Past it the pool holds about the
ceiling's batch on average, whatever the load: the engine runs that batch and the rest of
the clients wait (or are preempted and wait again), so tokens/s and TPOT stay at the
ceiling's and TTFT adds the wait of a closed loop of `b` clients served `c` at a time,
(b - c) x service / c (the response-time law). That is what `kvplan simulate` shows from
vLLM 0.19 (full-prompt admission); earlier releases over-admit and lose more to
recomputation, so there it is an upper bound.
"""

from __future__ import annotations

from dataclasses import replace

from kvplan.core import perf
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
    safe: int  # `kvplan recommend`'s --max-num-seqs: within a 1 % preemption risk on its pool
    rejected_share: float = 0.0  # requests vLLM refuses: prompts of max_model_len or more

    def notes(self) -> list[str]:
        from kvplan.core.plan import kv_format_advice
        from kvplan.core.workload import rejected_note

        head = [rejected_note(self.rejected_share, self.result.max_model_len) +
                "; the curve is the served requests'"] if self.rejected_share else []
        return head + kv_format_advice(self.result)

    def to_json(self) -> dict:
        return {
            "model": self.result.model, "gpu": self.result.gpu,
            "tensor_parallel_size": self.result.args.tensor_parallel_size,
            "workload": self.workload.name,
            "points": [{"batch_size": p.batch_size,
                        "output_tokens_per_s": round(p.output_tokens_per_s, 1),
                        "tpot_ms": round(p.tpot_ms, 2), "ttft_ms": round(p.ttft_ms, 1),
                        "preempting": p.batch_size > self.kv_ceiling,
                        "budget_starved": p.budget_starved,
                        "requests_per_s": round(p.requests_per_s, 3)}
                       for p in self.points],
            "unstarved_batch_size": self.points[0].unstarved_batch if self.points else None,
            "knee_batch_size": self.knee,
            "kv_ceiling_batch_size": self.kv_ceiling,
            "safe_max_num_seqs": self.safe,
            "max_model_len": self.result.max_model_len,
            "max_num_batched_tokens": self.result.max_num_batched_tokens,
            "kv_cache_dtype": self.result.kv_dtype,
            "rejected_share": round(self.rejected_share, 4),
            "notes": self.notes(),
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


def past_ceiling(at_ceiling: perf.Point, batch: int, ceiling: int, out_mean: float
                 ) -> perf.Point:
    """`batch` clients on a pool that holds `ceiling` sequences: the ceiling's tokens/s and
    TPOT; TTFT adds the closed loop's wait, (batch - ceiling) x service / ceiling."""
    service_s = at_ceiling.ttft_ms / 1000 + out_mean * at_ceiling.tpot_ms / 1000
    wait_s = (batch - ceiling) * service_s / ceiling
    return replace(at_ceiling, batch_size=batch, ttft_ms=at_ceiling.ttft_ms + wait_s * 1000)


def curve(model: Model, gpu: Gpu, args: EngineArgs, version: str | None, wl: Workload,
          sizes: list[int] | None = None) -> Curve:
    from kvplan.core.plan import Targets, plan_one, refuse_pooling

    r = size(model, gpu, args, version)
    if not r.fits:
        raise DoesNotFit(f"{r.model} on {r.gpu}: {r.failure}")
    refuse_pooling(r)  # nothing decodes: no output tokens/s to curve
    share = 1 - wl.served_share(r.max_model_len)  # refuses a workload vLLM refuses whole
    wlc = wl.clip(r.max_model_len)  # the served requests
    # the cap `kvplan recommend` (and `check`) give, on the pool vLLM leaves at that cap,
    # and the ceiling of that pool
    plan = plan_one(model, gpu, replace(args, max_num_seqs=None), version, wl, Targets())
    ceiling = plan.kv_ceiling
    safe = plan.max_num_seqs if plan.feasible else 0
    pm = perf.build(r, gpu)
    tr = perf.traffic(wlc)

    def point(b: int) -> perf.Point:
        return perf.operating_point(pm, b, tr, r.max_num_batched_tokens)

    top = max(ceiling, 1)
    at_top = point(top)
    dense = [point(b) for b in default_sizes(max(2, min(ceiling, 4096)))]
    knee = knee_of(dense)
    # the default rows include the batches the summary names: the knee, the KV ceiling and
    # the safe cap (--batch-sizes are the user's rows alone)
    grid = sizes or sorted(set(default_sizes(max(2, min(int(ceiling * 1.5), 4096)))) |
                           {b for b in (knee, ceiling, safe) if b >= 1})
    pts = [point(b) if b <= top else past_ceiling(at_top, b, top, tr.out_mean) for b in grid]
    return Curve(r, wlc, pts, knee, ceiling, safe, share)
