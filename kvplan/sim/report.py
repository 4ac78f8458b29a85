"""Summaries of simulation runs and sweeps (the `--json` contract: docs/json.md)."""

from __future__ import annotations

from dataclasses import dataclass

from kvplan.core import preemptfloor as floor
from kvplan.sim.engine import Stats


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    v = sorted(values)
    i = min(len(v) - 1, max(0, round(q * (len(v) - 1))))
    return v[i]


def summary(st: Stats, ttft_slo: float | None = None, tpot_slo_ms: float | None = None
            ) -> dict:
    done = st.completed
    ttft = [r.first_token - r.arrival for r in done if r.first_token is not None]
    tpot = [(r.finish - r.first_token) / (r.output - 1) * 1000 for r in done
            if r.output > 1 and r.first_token is not None]
    e2e = [r.finish - r.arrival for r in done]
    t = st.sim_time or 1e-9
    good = [r for r in done if (ttft_slo is None or r.first_token - r.arrival <= ttft_slo)
            and (tpot_slo_ms is None or r.output <= 1
                 or (r.finish - r.first_token) / (r.output - 1) * 1000 <= tpot_slo_ms)]
    usage = [u for _, u, _, _ in st.series]
    waiting = [w for _, _, _, w in st.series]

    def rnd(x, n=3):
        return None if x is None else round(x, n)

    return {
        "output_tokens_per_s": round(st.output_tokens / t, 1),
        "requests_completed": len(done),
        "requests_rejected": st.rejected,
        "requests_too_long": st.too_long,
        "requests_never_admitted": st.never_admitted,
        "preemptions": st.preemptions,
        "preemptions_per_request": round(st.preemptions / len(done), 6) if done else None,
        "preemptions_above_floor": floor.excessive(st.preemptions, len(done)),
        "recomputed_tokens": st.recomputed_tokens,
        "ttft_p50_s": rnd(pct(ttft, 0.5)),
        "ttft_p95_s": rnd(pct(ttft, 0.95)),  # recommend's TTFT figure is a p95
        "ttft_p99_s": rnd(pct(ttft, 0.99)),
        "tpot_p50_ms": rnd(pct(tpot, 0.5), 2),
        "tpot_p99_ms": rnd(pct(tpot, 0.99), 2),
        "e2e_p50_s": rnd(pct(e2e, 0.5)),
        "e2e_p99_s": rnd(pct(e2e, 0.99)),
        "simulated_seconds": round(t, 3),
        "goodput_requests_per_s": round(len(good) / t, 3),
        "request_throughput_per_s": round(len(done) / t, 3),
        "mean_in_system": round(st.area_in_system / t, 3),
        "mean_e2e_s": rnd(sum(e2e) / len(e2e)) if e2e else None,
        "kv_usage_mean": rnd(sum(usage) / len(usage)) if usage else None,
        "kv_usage_max": rnd(max(usage)) if usage else None,
        "waiting_max": max(waiting) if waiting else 0,
        "steps": st.steps,
        "events": st.events,
    }


@dataclass
class SweepResult:
    axis: str  # 'concurrency' | 'rate'
    points: list[dict]
    capped: list[dict] | None  # the same sweep with the recommended cap
    cap: int | None
    knee: float | None
    collapse: float | None
    latency_collapse: float | None = None
    context: dict | None = None

    def to_json(self) -> dict:
        out = {**(self.context or {}), "axis": self.axis, "points": self.points,
               "knee": self.knee, "collapse": self.collapse,
               "latency_collapse": self.latency_collapse}
        if self.capped is not None:
            out["recommended_max_num_seqs"] = self.cap
            out["with_recommended_cap"] = self.capped
        return out


def knee_and_collapse(points: list[dict], axis: str
                      ) -> tuple[float | None, float | None, float | None]:
    """Knee: the first load where more load adds relatively less throughput than it adds
    TPOT (as in `kvplan throughput`). Collapse: the first load past the peak whose
    throughput falls more than 10 % below it while the engine preempts. Latency collapse:
    the first load past the knee whose median TTFT is over 10x the knee's while the engine
    preempts."""
    if not points:
        return None, None, None
    peak_p = max(points, key=lambda p: p["output_tokens_per_s"])
    peak = peak_p["output_tokens_per_s"]
    knee_p = points[-1]
    for a, b in zip(points, points[1:]):
        gain = b["output_tokens_per_s"] / max(a["output_tokens_per_s"], 1e-9) - 1
        cost = (b["tpot_p50_ms"] or 0) / max(a["tpot_p50_ms"] or 1e-9, 1e-9) - 1
        if cost > 0 and gain < cost:
            knee_p = a
            break
    collapse = next((p[axis] for p in points if p[axis] > peak_p[axis]
                     and p["output_tokens_per_s"] < 0.9 * peak and p["preemptions"]), None)
    base = knee_p.get("ttft_p50_s") or 0.0
    lat = next((p[axis] for p in points if p[axis] > knee_p[axis] and p["preemptions"]
                and (p.get("ttft_p50_s") or 0) > 10 * max(base, 0.05)), None)
    return knee_p[axis], collapse, lat
