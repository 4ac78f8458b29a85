"""Scrapes in, a `Diagnosis` out: the cap, the recommendation, the rules per engine, the
server-wide figures and the verdict (pure; JSON keys: docs/json.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kvplan.core import preemptfloor as floor
from kvplan.diagnose import findings as F
from kvplan.diagnose import metrics as M
from kvplan.diagnose import safecap
from kvplan.diagnose.crosscheck import POOL_TOLERANCE
from kvplan.diagnose.metrics import Scrape
from kvplan.diagnose.names import version_notes
from kvplan.diagnose.safecap import Recommendation
from kvplan.diagnose.window import EngineWindow, Level, slope, windows


@dataclass
class Options:
    """What the command line adds to the scrapes."""

    max_num_seqs: int | None = None  # --max-num-seqs
    default_max_num_seqs: int | None = None  # vLLM's default, from kvplan size
    size_pool: tuple[int, int] | None = None  # (num_gpu_blocks, block_size) from kvplan size
    cross_check: dict[str, Any] | None = None
    vllm_version: str | None = None
    timed: bool = True  # scrape times are real (timestamps or receive times), not file order
    interval: float = 5.0
    preempt_risk: float = safecap.RISK  # --preempt-risk
    blocks_at: Callable[[int], int | None] | None = None  # kvplan size's blocks at a cap
    notes: list[str] = field(default_factory=list)


@dataclass
class Diagnosis:
    verdict: str  # healthy | unhealthy
    findings: list[F.Finding]
    recommendation: Recommendation | None
    cap: F.Cap | None
    observed: dict[str, Any]
    engines: list[dict[str, Any]]
    scrapes: list[dict[str, Any]]
    server: str
    model_names: list[str]
    metric_names: dict[str, str]
    cross_check: dict[str, Any] | None
    notes: list[str]
    vllm_version: str | None

    @property
    def exit_code(self) -> int:
        return 0 if self.verdict == "healthy" else 1

    def to_json(self) -> dict[str, Any]:
        rec = self.recommendation
        return {
            "verdict": self.verdict,
            "findings": [f.to_json() for f in self.findings],
            "recommended_max_num_seqs": rec.max_num_seqs if rec else None,
            "recommendation": None if rec is None else {
                "max_num_seqs": rec.max_num_seqs,
                "flag": "--max-running-requests" if self.server == "sglang" else "--max-num-seqs",
                "target_kv_cache_usage": round(rec.mean_usage, 4),
                "kv_cache_usage_per_sequence": round(rec.kv_per_seq, 6),
                "method": "risk",
                "preempt_risk": rec.risk,
                "overflow_probability": round(rec.overflow, 6),
                "footprint_cv": round(rec.cv, 4),
                "footprint_shape": rec.shape,
                "kv_tokens_per_sequence": _r(rec.tokens_per_seq, 1),
                "pool_tokens": rec.pool_tokens,
                "pool_source": rec.pool_source,
                "current_pool_tokens": rec.now_pool_tokens if rec.resized else rec.pool_tokens,
                "engine": rec.engine,
                "current_max_num_seqs": self.cap.value if self.cap else None,
                "current_max_num_seqs_source": self.cap.source if self.cap else None,
                "current_overflow_probability": _r(rec.overflow_at(self.cap.value), 6)
                if self.cap else None,
            },
            "observed": self.observed,
            "engines": self.engines,
            "scrapes": self.scrapes,
            "server": self.server,
            "model_names": self.model_names,
            "metric_names": self.metric_names,
            "cross_check": self.cross_check,
            "notes": self.notes,
            "vllm_version": self.vllm_version,
        }


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def _sum(xs: list[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return sum(vals) if vals else None


# --- per engine ----------------------------------------------------------------------------

def _inferred_cap(w: EngineWindow) -> F.Cap | None:
    """Running constant across >= 3 scrapes while requests wait and KV has room."""
    rows = [(s.gauges.get("running"), s.gauges.get("waiting"), s.gauges.get("kv_cache_usage"))
            for s in w.snaps]
    if len(rows) < 3 or any(r is None or q is None for r, q, _ in rows):
        return None
    if len({r for r, _, _ in rows}) != 1 or min(q for _, q, _ in rows) < 1:
        return None
    if any(kv is not None and kv >= F.KV_FULL for _, _, kv in rows) or rows[0][0] < 1:
        return None
    return F.Cap(int(rows[0][0]), "inferred: running constant while requests wait")


def _cap(w: EngineWindow, o: Options) -> F.Cap | None:
    if o.max_num_seqs:
        return F.Cap(o.max_num_seqs, "given")
    g = w.last.gauges.get("max_num_seqs")
    if g:
        return F.Cap(int(g), "sglang:max_running_requests")
    return _inferred_cap(w) or (F.Cap(o.default_max_num_seqs, "vLLM default, from kvplan size")
                                if o.default_max_num_seqs else None)


def _pool(w: EngineWindow, o: Options) -> tuple[int | None, int | None, int | None, str | None]:
    blocks, bs, tokens = w.pool()
    if tokens:
        src = "vllm:cache_config_info" if blocks else "sglang:max_total_num_tokens"
        return blocks, bs, tokens, src
    if o.size_pool:
        b, s = o.size_pool
        return b, s, b * s, "kvplan size"
    return blocks, bs, None, None


def _resize(o: Options, cap: F.Cap | None, pool: tuple, server: str) -> safecap.Resize | None:
    """With --model/--gpu, the pool vLLM leaves at another cap: the server's pool moved by
    what kvplan size predicts the cap changes (the profile run and the CUDA graphs it sizes)."""
    blocks, bs = pool[0], pool[1]
    if o.blocks_at is None or cap is None or server != "vllm" or not (blocks and bs):
        return None
    here = o.blocks_at(cap.value)
    if here is None or abs(blocks / here - 1) > POOL_TOLERANCE:  # not the deployment sized
        return None

    def pool_at(c: int) -> tuple | None:
        got = o.blocks_at(c)
        if got is None:
            return None
        b = max(blocks + got - here, 0)
        return b, bs, b * bs, f"kvplan size at max_num_seqs {c}"

    return safecap.Resize(cap.value, pool_at)


def _engine_json(w: EngineWindow, cap: F.Cap | None, rec: Recommendation | None,
                 pool: tuple, ids: list[str]) -> dict[str, Any]:
    running, waiting, kv = w.level("running"), w.level("waiting"), w.level("kv_cache_usage")
    return {
        "engine": w.key,
        "running": _r(running.mean, 2) if running else None,
        "waiting": _r(waiting.mean, 2) if waiting else None,
        "waiting_last": waiting.last if waiting else None,
        "kv_cache_usage": _r(kv.mean, 4) if kv else None,
        "kv_cache_usage_max": _r(kv.max, 4) if kv else None,
        "preemptions_per_s": _r(w.rate("preemptions")),
        "requests_per_s": _r(w.rate("requests_finished")),
        "generation_tokens_per_s": _r(w.rate("generation_tokens"), 1),
        "num_gpu_blocks": pool[0],
        "block_size": pool[1],
        "kv_pool_tokens": pool[2],
        "max_num_seqs": cap.value if cap else None,
        "max_num_seqs_source": cap.source if cap else None,
        "recommended_max_num_seqs": rec.max_num_seqs if rec else None,
        "kv_tokens_per_running_seq": _r(rec.tokens_per_seq, 1) if rec else None,
        "findings": ids or ["healthy"],
    }


# --- server-wide ---------------------------------------------------------------------------

def _series(scrapes: list[Scrape], fld: str, mean: bool = False) -> list[tuple[float, float]]:
    t0 = scrapes[0].t
    out = []
    for s in scrapes:
        vals = [e.gauges[fld] for e in s.engines.values() if fld in e.gauges]
        if vals:
            out.append((s.t - t0, sum(vals) / len(vals) if mean else sum(vals)))
    return out


def _hist_mean(ws: list[EngineWindow], fld: str) -> float | None:
    total = count = 0.0
    for w in ws:
        got = w.hist(fld, 1, since_start=False)
        if got:
            total, count = total + got[0].sum, count + got[0].count
    return total / count if count else None


def _tokens_per_s(ws: list[EngineWindow], counter: str, gauge: str) -> float | None:
    rate = _sum([w.rate(counter) for w in ws])
    if rate is not None:
        return rate
    lv = [w.level(gauge) for w in ws]
    return _sum([x.mean if x else None for x in lv])


def _observed(scrapes: list[Scrape], ws: list[EngineWindow], cap: F.Cap | None,
              rec: Recommendation | None, pools: list[tuple], duration: float
              ) -> dict[str, Any]:
    """Server-wide figures: gauges summed (KV averaged) over engines per scrape, rates summed."""
    run = Level.of([v for _, v in _series(scrapes, "running")])
    wait_pts = _series(scrapes, "waiting")
    wait = Level.of([v for _, v in wait_pts])
    kv = Level.of([v for _, v in _series(scrapes, "kv_cache_usage", mean=True)])
    req = _sum([w.rate("requests_finished") for w in ws])
    ws_slope = slope(wait_pts)
    pre = [w.counter("preemptions") for w in ws]
    fin = _sum([c[2] if c else None for c in (w.counter("requests_finished") for w in ws)])
    n_pre = _sum([c[2] if c else None for c in pre])
    hits = _sum([(w.counter("prefix_cache_hits") or (0, 0, None))[2] for w in ws])
    queries = _sum([(w.counter("prefix_cache_queries") or (0, 0, None))[2] for w in ws])
    pool = next((p for p in pools if p[2]), (None, None, None, None))
    swapped = Level.of([v for _, v in _series(scrapes, "swapped")])
    return {
        "window_s": round(duration, 3),
        "preemptions": n_pre,
        "requests_finished": fin,
        "preemptions_per_request": _r(n_pre / fin, 6) if n_pre is not None and fin else None,
        "preemptions_per_s": _r(_sum([w.rate("preemptions") for w in ws])),
        "kv_cache_usage": _r(kv.mean, 4) if kv else None,
        "kv_cache_usage_min": _r(kv.min, 4) if kv else None,
        "kv_cache_usage_max": _r(kv.max, 4) if kv else None,
        "running": _r(run.mean, 2) if run else None,
        "running_min": run.min if run else None,
        "running_max": run.max if run else None,
        "waiting": _r(wait.mean, 2) if wait else None,
        "waiting_min": wait.min if wait else None,
        "waiting_max": wait.max if wait else None,
        "waiting_last": wait.last if wait else None,
        "waiting_growth_per_s": _r(ws_slope),
        "swapped": _r(swapped.mean, 2) if swapped else None,
        "max_num_seqs": cap.value if cap else None,
        "max_num_seqs_source": cap.source if cap else None,
        "num_gpu_blocks": pool[0],
        "block_size": pool[1],
        "kv_pool_tokens": pool[2],
        "kv_pool_source": pool[3],
        "kv_tokens_per_running_seq": _r(rec.tokens_per_seq, 1) if rec else None,
        "requests_per_s": _r(req),
        "arrivals_per_s": _r(req + max(ws_slope or 0.0, 0.0)) if req is not None else None,
        "prompt_tokens_per_s": _r(_tokens_per_s(ws, "prompt_tokens", "prompt_tps_gauge"), 1),
        "generation_tokens_per_s": _r(_tokens_per_s(ws, "generation_tokens",
                                                    "generation_tps_gauge"), 1),
        "ttft_mean_s": _r(_hist_mean(ws, "ttft"), 4),
        "itl_mean_s": _r(_hist_mean(ws, "itl"), 5),
        "e2e_mean_s": _r(_hist_mean(ws, "e2e"), 3),
        "queue_time_mean_s": _r(_hist_mean(ws, "queue_time"), 3),
        "prefix_cache_hit_rate": _r(hits / queries, 4) if hits is not None and queries else None,
    }


def _healthy(o: dict[str, Any], rec: Recommendation | None, cap: F.Cap | None,
             levels_only: bool, flag: str) -> F.Finding:
    ev = []
    if o["running"] is not None and not o["running_max"] and not o["waiting_max"]:
        ev.append("idle: no requests running or waiting")
    else:
        if o["kv_cache_usage"] is not None:
            kv = Level(0, 0, o["kv_cache_usage_min"], o["kv_cache_usage"], o["kv_cache_usage_max"])
            ev.append(f"KV cache usage {F.span_mean(kv, F.pct)}")
        if o["running"] is not None:
            run = Level(0, 0, o["running_min"], o["running"], o["running_max"])
            line = f"running {F.span(run)}"
            if o["waiting"] is not None:  # absent from the scrapes: not quoted as 0
                line += f", waiting {F.span(Level(0, 0, o['waiting_min'], 0, o['waiting_max']))}"
            ev.append(line)
    if o["running"] is None and o["kv_cache_usage"] is None:
        ev.append("no running/waiting/KV values in the scrapes (a server that has served no "
                  "requests yet exports only HELP and TYPE lines)")
    if o["preemptions"] is not None:
        ev.append(_preemptions_line(o))
    if o["requests_per_s"] is not None:
        ev.append(f"{F.fixed(o['requests_per_s'])} requests/s, "
                  f"{F.num(o['generation_tokens_per_s'] or 0)} output tokens/s")
    fix = ["no change needed"]
    risk = rec.overflow_at(cap.value) if rec and cap else None
    if rec and cap and rec.max_num_seqs < cap.value and risk is not None:
        full = o["running_max"] is not None and o["running_max"] >= cap.value
        batch = (f"a full batch of {cap.value} (as here)" if full
                 else f"if the batch grows to {flag} {cap.value}, it")
        fix = [f"no change needed at this load; {batch} overflows the pool with "
               f"{F.prob(risk)}: the recommended {rec.max_num_seqs} keeps that ≤ {rec.risk:.0%}"]
    if levels_only:
        ev.append("one scrape: these are levels at one instant; preemption and queue trends "
                  "need two or more")
        return F.Finding("healthy", "ok", "Healthy at the only scrape (levels, no trend)", ev,
                         fix)
    what = "preemptions within the floor" if o["preemptions"] else "no preemption"
    return F.Finding("healthy", "ok", f"Healthy: {what}, no growing queue, no starved "
                     "capacity", ev, fix)


def _preemptions_line(o: dict[str, Any]) -> str:
    """'0 preemptions in 10.0 s', or with some, their share of the finished requests and why
    that is within the floor (core/preemptfloor.py)."""
    n, fin = o["preemptions"], o["requests_finished"]
    line = f"{F.num(n)} preemption{'' if n == 1 else 's'} in {o['window_s']:.1f} s"
    if not n or not fin:
        return line
    return f"{line} ({floor.share_text(n, fin)}): {floor.within_text(n, fin)}"


# --- entry point ---------------------------------------------------------------------------

def diagnose(scrapes: list[Scrape], o: Options | None = None) -> Diagnosis:
    """Apply every rule to `scrapes` (oldest first, `t` set) and return the verdict."""
    o = o or Options()
    server = "sglang" if any(s.server == "sglang" for s in scrapes) else "vllm"
    wins = windows(scrapes)
    ws = list(wins.values())
    caps = {k: _cap(w, o) for k, w in wins.items()}
    pools = {k: _pool(w, o) for k, w in wins.items()}
    own = {k: safecap.recommend(w, pools[k], o.preempt_risk, _resize(o, caps[k], pools[k],
                                                                     server))
           for k, w in wins.items()}
    recs = [r for r in own.values() if r]
    rec = min(recs, key=lambda r: r.max_num_seqs) if recs else None
    req = _sum([w.rate("requests_finished") for w in ws])
    wait_slope = slope(_series(scrapes, "waiting"))
    ctx = F.Context(server=server, rec=rec, requests_per_s=req,
                    arrivals_per_s=None if req is None else req + max(wait_slope or 0.0, 0.0))
    per_engine = {k: F.engine_findings(w, ctx, caps[k], own[k]) for k, w in wins.items()}
    found = F.merge(per_engine)
    cap = next((c for c in caps.values() if c), None)
    duration = scrapes[-1].t - scrapes[0].t if scrapes else 0.0
    observed = _observed(scrapes, ws, cap, rec, list(pools.values()), duration)
    if not found:
        found = [_healthy(observed, rec, cap, len(scrapes) < 2, ctx.flag)]
    engines = [_engine_json(w, caps[k], own[k], pools[k], [f.id for f in per_engine[k]])
               for k, w in wins.items()]
    names: dict[str, str] = {}
    for w in ws:
        for k, v in w.last.names.items():
            names.setdefault(k, v)
    t0 = scrapes[0].t if scrapes else 0.0
    return Diagnosis(
        verdict="healthy" if all(f.severity == "ok" for f in found) else "unhealthy",
        findings=found, recommendation=rec, cap=cap, observed=observed, engines=engines,
        scrapes=[{"source": s.source, "t_s": round(s.t - t0, 3), "unix_time": s.unix_time}
                 for s in scrapes],
        server=server, model_names=sorted({m for s in scrapes for m in s.model_names}),
        metric_names=dict(sorted(names.items())), cross_check=o.cross_check,
        notes=_notes(scrapes, ws, o, rec, caps), vllm_version=o.vllm_version)


def _notes(scrapes: list[Scrape], ws: list[EngineWindow], o: Options,
           rec: Recommendation | None, caps: dict[str, F.Cap | None]) -> list[str]:
    notes = []
    bare = [i for i, sc in enumerate(scrapes, 1)
            if M.has_engine_metrics(sc) and not M.has_scheduler_gauges(sc)]
    if bare and len(bare) < len(scrapes):  # a partial scrape among whole ones
        which = ", ".join(map(str, bare[:5])) + (" ..." if len(bare) > 5 else "")
        notes.append(f"scrape{'s' * (len(bare) > 1)} {which} of {len(scrapes)} carr"
                     f"{'y' if len(bare) > 1 else 'ies'} no scheduler gauges (running, "
                     "waiting, KV usage: a partial scrape or another process): those figures "
                     f"come from the other {len(scrapes) - len(bare)}")
    keys = sorted({k for sc in scrapes for k in sc.engines})
    for k in keys if len(keys) > 1 else ():
        if not any(x in sc.engines[k].gauges for sc in scrapes if k in sc.engines
                   for x in M.SCHEDULER_GAUGES):
            notes.append(f"engine {k} exports no scheduler gauges in any scrape: its row "
                         "rests on its counters alone")
    if len(scrapes) < 2:
        notes.append("one scrape: preemption and queue trends need two or more (a URL is "
                     "scraped --scrapes times, --interval apart)")
    elif not o.timed:
        notes.append(f"the scrapes carry no timestamps: rates assume they were taken "
                     f"--interval ({o.interval:g} s) apart, in the order given")
    if rec and rec.pool_tokens is None:
        notes.append("no vllm:cache_config_info: the pool size is unknown, so KV per sequence "
                     "is given as a share of the pool (pass --model and --gpu to take the pool "
                     "from kvplan size)")
    full = next((lv for w in ws if rec and w.key == rec.engine
                 for lv in [w.level("kv_cache_usage")] if lv and lv.max >= F.KV_FULL), None)
    if full:
        notes.append(f"the KV pool was full in the window (usage up to {F.pct(full.max)}): a "
                     "full pool caps what the running sequences hold, so the footprint the "
                     "recommendation rests on is a lower bound and the cap an upper one on "
                     "its pool; diagnose again once the pool is below full")
    cap = caps.get(rec.engine) if rec else None
    if (rec and cap and not rec.resized and rec.max_num_seqs < cap.value and rec.pool_tokens
            and all(s.server == "vllm" for s in scrapes)):
        how = ("kvplan size's pool is more than 10% off the server's, so the cap is not "
               "sized on its own pool" if o.blocks_at else "pass --model and --gpu to size "
               "the cap on its own pool, as kvplan recommend does")
        notes.append(f"the recommendation is sized on the pool --max-num-seqs {cap.value} "
                     f"leaves ({rec.pool_tokens:,} tokens); vLLM profiles max_num_seqs "
                     f"sequences, so a lower cap leaves a larger pool that holds more: {how}")
    sw = [w.level("swapped") for w in ws]
    if any(x and x.max > 0 for x in sw):
        notes.append("requests were swapped to CPU (V0): V0 counts swaps as preemptions too")
    drops = [(w.last.names.get(f, f), a, b) for w in ws for f in M.COUNTERS
             for a, b in w.resets(f)]
    if drops:
        shown = "; ".join(f"{n} {F.num(a)} → {F.num(b)}" for n, a, b in drops[:3])
        notes.append(f"counters fell between scrapes ({shown}): the server restarted in the "
                     "window; increases count from zero after the restart (as PromQL's "
                     "increase)")
    if o.vllm_version:
        exported = {n for sc in scrapes for e in sc.engines.values() for n in e.exported}
        notes += version_notes(o.vllm_version, exported)
    notes += o.notes
    return notes
