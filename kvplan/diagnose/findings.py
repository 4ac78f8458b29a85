"""The rules: one engine's window in, findings with evidence and fixes out (pure).

Every threshold is named here and explained in docs/diagnose.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from kvplan.core import preemptfloor as floor
from kvplan.core.queueing import QUEUE_SERVICE_TIMES
from kvplan.diagnose.safecap import Recommendation
from kvplan.diagnose.window import EngineWindow, Level, tail_share

KV_FULL = 0.90  # mean KV usage at which the pool counts as full
KV_PRESSURE = 0.80  # mean KV usage at which long requests start to matter
PINNED = 0.95  # running >= 95 % of the cap: pinned at max-num-seqs
QUEUE_GROWTH = 5.0  # waiting requests added over the window (fitted line)
STANDING_QUEUE = 5.0  # waiting in every scrape
TAIL = 0.05  # "long requests": the longest 5 % ...
TAIL_SHARE = 0.30  # ... carrying at least 30 % of the tokens
TAIL_MIN_REQUESTS = 20  # finished requests a length histogram needs
UNDERFED_RUNNING = 0.25  # running at most 25 % of the cap ...
UNDERFED_KV = 0.30  # ... with KV usage never above 30 %
TARGET_UTILIZATION = 0.8  # replicas are sized for this utilisation (as kvplan recommend)
QUEUE_BUDGET_S = 10.0  # without a running level: about this many seconds of completions

SEVERITY = {"critical": 0, "warning": 1, "ok": 2}
ORDER = ("preemption_spiral", "queue_explosion", "long_requests_hogging_kv",
         "intermittent_preemption", "saturated", "standing_queue", "under_fed", "healthy")


@dataclass
class Finding:
    """One named cause with the numbers that show it and what to change."""

    id: str
    severity: str  # critical | warning | ok
    title: str
    evidence: list[str]
    fix: list[str]
    engines: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)  # engine -> machine-readable numbers

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "severity": self.severity, "title": self.title,
                "evidence": self.evidence, "fix": self.fix, "engines": self.engines,
                "data": self.data}


@dataclass(frozen=True)
class Cap:
    """The engine's max-num-seqs and where kvplan learned it."""

    value: int
    source: str


@dataclass
class Context:
    """What the rules need beyond one engine's window."""

    server: str = "vllm"
    rec: Recommendation | None = None  # the server's (smallest over engines)
    requests_per_s: float | None = None  # server-wide completions
    arrivals_per_s: float | None = None

    @property
    def flag(self) -> str:
        return "--max-running-requests" if self.server == "sglang" else "--max-num-seqs"


# --- formatting ----------------------------------------------------------------------------

def pct(x: float) -> str:
    return f"{x * 100:.1f}%"


HUGE = 1e15  # past a quadrillion a figure is shown as 1e+308, not 309 digits


def num(x: float) -> str:
    """A count as people read it: 1,234 or 2.5 (1e+308 when huge)."""
    if abs(x) >= HUGE:
        return f"{x:.3g}"
    return f"{x:,.0f}" if abs(x) >= 10 or x == int(x) else f"{x:,.1f}"


def fixed(x: float, spec: str = ".2f") -> str:
    """`format(x, spec)` (a rate: 2.50), or 1e+308 when huge."""
    return format(x, spec) if abs(x) < HUGE else format(x, "+.3g" if "+" in spec else ".3g")


def span(lv: Level, fmt=num) -> str:
    lo, hi = fmt(lv.min), fmt(lv.max)
    return lo if lo == hi else f"{lo}–{hi}"


def span_mean(lv: Level, fmt=num) -> str:
    """'97.0%–99.0% (mean 98.0%)', or one value when the level never moved."""
    return fmt(lv.min) if lv.min == lv.max else f"{span(lv, fmt)} (mean {fmt(lv.mean)})"


def round_up(x: float, step: int) -> int:
    return int(math.ceil(x / step) * step)


def prob(x: float) -> str:
    """An overflow probability: '<0.1%', '0.7%', 'over 10%' (the saddlepoint estimate is
    made for tails; near the mean it is rough)."""
    return "<0.1%" if x < 0.001 else f"{x:.1%}" if x < 0.1 else "over 10%"


def rec_reason(rec: Recommendation) -> str:
    """Why the recommended cap: the mean footprint, its spread and the overflow risk."""
    if rec.tokens_per_seq and rec.pool_tokens:
        per, pool = (f"{num(rec.tokens_per_seq)} tokens of KV",
                     f"the {rec.pool_tokens:,}-token pool")
        if rec.resized:
            pool += (f" vLLM leaves at {rec.max_num_seqs} (kvplan size; "
                     f"{rec.now_pool_tokens:,} now)")
    else:
        per, pool = f"{pct(rec.kv_per_seq)} of the pool", "the pool"
    if rec.demand is None:
        return (f"a running sequence holds {per} on average, so {rec.max_num_seqs} of them "
                f"fill {pct(rec.mean_usage)} of {pool}")
    return (f"a running sequence holds {per} on average (CV {rec.cv:.2f}, {rec.shape}), so "
            f"{rec.max_num_seqs} of them overflow {pool} with ≤ {rec.risk:.0%} probability "
            f"(mean KV usage {pct(rec.mean_usage)})")


def _lower_cap(ctx: Context, cap: Cap | None, running: Level | None = None) -> str | None:
    """'lower the cap to N' when the recommendation is below the cap (or, with the cap
    unknown, below the largest running batch seen)."""
    rec = ctx.rec
    if rec is None:
        return None
    top = cap.value if cap else (running.max if running else None)
    if top is not None and rec.max_num_seqs >= top:
        return None
    now = ""
    if cap:
        risk = rec.overflow_at(cap.value)
        now = f" (now {cap.value}, {cap.source}" + (
            f"; a full batch of {cap.value} holds {pct(cap.value * rec.kv_per_seq)} of the "
            f"pool on average and overflows with {prob(risk)})" if risk is not None else ")")
    return f"lower {ctx.flag} to {rec.max_num_seqs}{now}: {rec_reason(rec)}"


def _bigger_pool(server: str) -> str:
    if server == "sglang":
        return ("a higher --mem-fraction-static, --kv-cache-dtype fp8_e5m2, more tensor "
                "parallelism, or a lower --context-length")
    return ("--kv-cache-dtype fp8, a higher --gpu-memory-utilization, more tensor "
            "parallelism, or a lower --max-model-len")


# --- rules ---------------------------------------------------------------------------------

def preempted(w: EngineWindow) -> tuple[float, float | None] | None:
    """(preemptions, finished requests) in the window when preemptions rose; None when they
    did not (finished is None without the counter)."""
    c = w.counter("preemptions")
    if c is None or c[2] <= 0 or c[3] <= 0:
        return None
    fin = w.counter("requests_finished")
    return c[2], fin[2] if fin else None


def preemption(w: EngineWindow, ctx: Context, cap: Cap | None) -> Finding | None:
    """Preemptions above the floor (core/preemptfloor.py): a spiral with KV near full,
    intermittent below it."""
    got = preempted(w)
    if got is None or not floor.excessive(*got):
        return None
    first, last, inc, secs = w.counter("preemptions")
    fin = got[1]
    kv, running, waiting = w.level("kv_cache_usage"), w.level("running"), w.level("waiting")
    rate = inc / secs
    per_req = f", {fixed(inc / fin)} per finished request" if fin else ""
    drops = w.resets("preemptions")
    if drops:
        before, after = drops[0]
        ev = [f"+{num(inc)} preemptions in {secs:.1f} s ({fixed(rate)}/s{per_req}); the counter "
              f"reset in the window ({num(before)} → {num(after)}: a server restart) and "
              "counts from zero after it"]
    else:
        ev = [f"preemptions rose {num(first)} → {num(last)} in {secs:.1f} s "
              f"({fixed(rate)}/s{per_req})"]
    if kv:
        ev.append(f"KV cache usage {span_mean(kv, pct)}")
    if running:
        ev.append(f"running {span(running)}" + (f", waiting {span(waiting)}" if waiting else ""))
    data = {"preemptions": inc, "preemptions_per_s": round(rate, 3),
            "kv_cache_usage": round(kv.mean, 4) if kv else None,
            "counter_reset": bool(drops), "requests_finished": fin,
            "preemptions_per_request": round(inc / fin, 6) if fin else None}
    lower = _lower_cap(ctx, cap, running)
    spiral = kv is not None and (kv.mean >= KV_FULL or _full_when_preempting(w))
    fix = _preemption_fix(ctx, cap, lower, spiral)
    if spiral:
        return Finding("preemption_spiral", "critical",
                       "Preemption spiral: the KV cache is full and running requests are "
                       "evicted and recomputed", ev, fix, data=data)
    if kv is None or kv.max < KV_FULL:
        ev.append(f"KV usage below {KV_FULL:.0%} at scrape times: it peaks between scrapes")
    if fin:
        ev.append(f"{floor.share_text(inc, fin)} preempted: more than the "
                  f"{floor.SHARE:.1%} diagnose accepts, beyond chance")
    return Finding("intermittent_preemption", "warning",
                   "Preemptions while the KV cache reads below full", ev, fix, data=data)


def _preemption_fix(ctx: Context, cap: Cap | None, lower: str | None, spiral: bool
                    ) -> list[str]:
    """Lower the cap to the recommendation when it is above it; otherwise the pool, in
    words that do not contradict the recommendation line."""
    bigger = _bigger_pool(ctx.server)
    if lower:
        return [lower, f"or enlarge the pool: {bigger}"]
    if not (ctx.rec and cap):
        fix = [f"enlarge the pool: {bigger}"]
    elif spiral:  # a full pool hides the footprint: the recommendation is an upper bound
        fix = [f"{ctx.flag} {cap.value} is not above the recommended "
               f"{ctx.rec.max_num_seqs}, an upper bound while the pool is full: lower "
               f"{ctx.flag} below it and diagnose again once the pool reads below full",
               f"or enlarge the pool: {bigger}"]
    else:
        fix = [f"{ctx.flag} {cap.value} is not above the recommended "
               f"{ctx.rec.max_num_seqs}, which rests on the footprint at scrape times: the "
               f"pool fills between them. To preempt less at this cap, enlarge the pool: "
               f"{bigger}"]
    if not spiral:
        fix.append("scrape more often (--interval) to catch the peaks")
    return fix


def _full_when_preempting(w: EngineWindow) -> bool:
    """Preemptions rose over an interval that ends with the KV cache full: a spiral that
    began inside the window (its mean KV still holds the healthy scrapes before it)."""
    kv = dict(w.points("kv_cache_usage"))
    pre = [(t, s.counters["preemptions"]) for t, s in zip(w.times, w.snaps)
           if "preemptions" in s.counters]
    return any(b > a and kv.get(t, 0.0) >= KV_FULL for (_, a), (t, b) in zip(pre, pre[1:]))


def limit(cap: Cap | None, kv: Level | None, running: Level | None) -> str:
    """What holds the running batch: max_num_seqs, kv, or compute (token budget)."""
    if cap and running and running.mean >= PINNED * cap.value:
        return "max_num_seqs"
    if kv and kv.mean >= KV_FULL:
        return "kv"
    return "compute"


def queue(w: EngineWindow, ctx: Context, cap: Cap | None) -> Finding | None:
    """Waiting requests growing (explosion) or never draining (standing queue)."""
    waiting = w.level("waiting")
    if waiting is None:
        return None
    s = w.slope("waiting")
    growth = s * w.duration if s is not None else None
    exploding = growth is not None and growth >= QUEUE_GROWTH and waiting.last >= QUEUE_GROWTH
    if not exploding and (waiting.min < STANDING_QUEUE or w.duration <= 0):
        return None
    kv, running = w.level("kv_cache_usage"), w.level("running")
    lim = limit(cap, kv, running)
    if exploding:
        ev = [f"waiting grew {num(waiting.first)} → {num(waiting.last)} in "
              f"{w.duration:.1f} s (+{fixed(s)}/s fitted)"]
    else:
        ev = [f"{span(waiting)} requests waiting in every scrape"]
    r = span(running) if running else "?"
    if lim == "max_num_seqs":
        ev.append(f"running pinned at {r} = {ctx.flag} {cap.value} ({cap.source})")
    elif lim == "kv":
        ev.append(f"running {r} with KV cache usage at {pct(kv.mean)}: the pool is the limit")
    else:
        kvs = f" and KV cache usage is {pct(kv.mean)}" if kv else ""
        ev.append(f"running {r} is not at a known cap{kvs}: compute or the per-step token "
                  "budget is the limit (prefill-heavy load?)")
    mu, lam = ctx.requests_per_s, ctx.arrivals_per_s
    data: dict[str, Any] = {"waiting_first": waiting.first, "waiting_last": waiting.last,
                            "waiting_growth_per_s": round(s, 3) if s is not None else None,
                            "limit": lim}
    if mu is not None:
        ev.append(f"the server completes {fixed(mu)} requests/s; arrivals ≈ {fixed(lam)}/s")
    qt = w.hist("queue_time", 1, since_start=False)
    if qt and qt[0].mean is not None:
        ev.append(f"mean queue time {qt[0].mean:.2f} s")
    fix = []
    rec = ctx.rec
    if lim == "max_num_seqs" and rec and rec.max_num_seqs > cap.value and kv:
        fix.append(f"raise {ctx.flag} from {cap.value} to {rec.max_num_seqs}: KV usage is "
                   f"only {pct(kv.mean)}; {rec_reason(rec)}")
    if mu and lam:
        n = max(2, math.ceil(lam / (TARGET_UTILIZATION * mu) - 1e-9))
        # two service times of queueing, `kvplan recommend`'s bound: by Little's law the
        # running batch is completions/s x the service time, so the depth is 2 x running
        if running and running.mean >= 1:
            depth, why = max(1, math.ceil(QUEUE_SERVICE_TIMES * running.mean)), (
                "about two service times of queueing, as kvplan recommend bounds it")
        else:
            depth, why = max(1, math.ceil(mu * QUEUE_BUDGET_S)), (
                f"about {QUEUE_BUDGET_S:.0f} s of completions")
        data.update(replicas_needed=n, queue_limit=depth)
        fix.append(f"add replicas: {n} servers like this one carry {fixed(lam)} requests/s at "
                   f"≤ {TARGET_UTILIZATION:.0%} utilisation")
        fix.append(f"bound the queue: answer 429 past ~{depth} waiting requests ({why}) at "
                   "the gateway, so clients back off instead of timing out")
    else:
        fix.append("add replicas, and answer 429 at the gateway past a bounded queue")
    if lim == "kv":
        fix.append(f"more KV per replica lets each hold more sequences: "
                   f"{_bigger_pool(ctx.server)}")
    elif lim == "compute":
        fix.append("if engine steps are full (vllm:iteration_tokens_total near "
                   "--max-num-batched-tokens), a larger --max-num-batched-tokens helps")
    if exploding:
        return Finding("queue_explosion", "critical",
                       "Queue explosion: requests arrive faster than the server completes them",
                       ev, fix, data=data)
    return Finding("standing_queue", "warning", "Standing queue: the server is saturated",
                   ev, fix, data=data)


def saturated(w: EngineWindow, ctx: Context, cap: Cap | None) -> Finding | None:
    """One scrape, no trend: requests waiting, or a full pool on a server that preempts."""
    if w.duration > 0:  # two or more scrapes: the trend rules decide
        return None
    waiting, kv, running = w.level("waiting"), w.level("kv_cache_usage"), w.level("running")
    preempted = w.last.counters.get("preemptions")
    queued = waiting is not None and waiting.last >= STANDING_QUEUE
    full = kv is not None and kv.last >= KV_FULL and floor.excessive(
        preempted or 0, w.last.counters.get("requests_finished"))
    if not (queued or full):
        return None
    lim = limit(cap, kv, running)
    ev = []
    if queued:
        ev.append(f"{num(waiting.last)} requests waiting")
    r = num(running.last) if running else "?"
    kv_text = f"KV cache usage at {pct(kv.last)}" if kv else ""
    if lim == "max_num_seqs":
        ev.append(f"running {r} = {ctx.flag} {cap.value} ({cap.source})"
                  + (f", {kv_text}" if kv else ""))
    elif kv:
        ev.append(f"running {r} with {kv_text}" + (": the pool is the limit" if lim == "kv"
                                                   else ""))
    if preempted:
        ev.append(f"{num(preempted)} preemptions since the server started (one scrape: when "
                  "they happened is unknown)")
    ev.append("one scrape: whether the queue grows and preemptions go on takes two or more")
    fix = []
    pool_full = kv is not None and kv.last >= KV_FULL
    lower = _lower_cap(ctx, cap, running) if pool_full else None
    if lower:
        fix.append(lower)
    if pool_full:
        fix.append(f"more KV per replica: {_bigger_pool(ctx.server)}")
    rec = ctx.rec
    if lim == "max_num_seqs" and rec and rec.max_num_seqs > cap.value and kv and not pool_full:
        fix.append(f"raise {ctx.flag} from {cap.value} to {rec.max_num_seqs}: KV usage is "
                   f"only {pct(kv.last)}; {rec_reason(rec)}")
    if queued:
        fix.append("add replicas, and answer 429 at the gateway past a bounded queue")
    fix.append("scrape over a window to see the trend: a URL with --scrapes 3 --interval 5, "
               "or several saved scrapes")
    data = {"waiting": waiting.last if waiting else None,
            "kv_cache_usage": round(kv.last, 4) if kv else None,
            "preemptions_total": preempted, "limit": lim}
    return Finding("saturated", "warning", "Saturated at the only scrape: "
                   + ("requests wait" if queued else "the KV cache is full and the server "
                      "preempts") + " (levels, no trend)", ev, fix, data=data)


def hogging(w: EngineWindow, ctx: Context, pressure: bool) -> Finding | None:
    """A few long prompts or outputs carrying most of the tokens while KV is under pressure."""
    if not pressure:
        return None
    ev, fix, data = [], [], {}
    for fld, what in (("prompt_len", "prompt"), ("generation_len", "output")):
        got = w.hist(fld, TAIL_MIN_REQUESTS)
        if got is None:
            continue
        h, scope = got
        ts = tail_share(h, TAIL)
        if ts is None or ts[0] < TAIL_SHARE:
            continue
        share, start = ts
        ev.append(f"the longest {TAIL:.0%} of {what}s (over ~{num(start)} tokens) carry "
                  f"{share:.0%} of {what} tokens; the mean {what} is {num(h.mean)} tokens "
                  f"({num(h.count)} requests, {scope})")
        data[what] = {"tail_share": round(share, 4), "tail_starts_at": round(start, 1),
                      "mean": round(h.mean, 1), "requests": h.count}
        if what == "prompt":
            fix.append(f"route prompts over ~{round_up(start, 1024):,} tokens to a separate "
                       "long-context pool (or lower --max-model-len to refuse them), so the "
                       "short majority keeps the cache")
        else:
            fix.append(f"cap max_tokens at the gateway: outputs past ~{num(start)} tokens "
                       f"are the longest {TAIL:.0%}")
    if not ev:
        return None
    kv = w.level("kv_cache_usage")
    if kv:
        ev.append(f"KV cache usage mean {pct(kv.mean)}")
    rec = ctx.rec
    if rec and rec.tokens_per_seq:
        ev.append(f"a running sequence holds {num(rec.tokens_per_seq)} tokens of KV on average")
    return Finding("long_requests_hogging_kv", "warning",
                   "Long requests hog the KV cache", ev, fix, data=data)


def underfed(w: EngineWindow, ctx: Context, cap: Cap | None,
             own: Recommendation | None) -> Finding | None:
    """Always busy, never queueing, far below the cap with KV low: the clients hold back."""
    running, waiting, kv = w.level("running"), w.level("waiting"), w.level("kv_cache_usage")
    if running is None or kv is None or running.min < 1 or kv.max > UNDERFED_KV:
        return None
    if w.duration <= 0:  # "always busy" needs more than one scrape
        return None
    if waiting is not None and waiting.max > 0:
        return None
    c = w.counter("preemptions")
    if c is not None and c[2] > 0:
        return None
    if own is not None and (cap is None or own.max_num_seqs < cap.value):
        room = own.max_num_seqs
        what = (f"the ~{room} sequences the KV pool holds at ≤ {own.risk:.0%} overflow "
                "risk")
    elif cap is not None:
        room, what = cap.value, f"{ctx.flag} {cap.value} ({cap.source})"
    else:
        return None
    if running.mean > UNDERFED_RUNNING * room:
        return None
    ev = [f"running {span(running)} (mean {running.mean:.1f}): {pct(running.mean / room)} of "
          f"{what}",
          f"KV cache usage at most {pct(kv.max)}",
          "nothing waiting and no preemptions"]
    fix = [f"send more concurrent requests: the server has room for ~{room} running "
           "sequences; look for a client concurrency limit or a per-backend connection cap "
           "in the gateway or load balancer",
           "or run fewer replicas and give each more traffic"]
    return Finding("under_fed", "warning", "Under-fed: the clients send too little concurrency",
                   ev, fix, data={"running": round(running.mean, 2), "room": room,
                                  "kv_cache_usage_max": round(kv.max, 4)})


def engine_findings(w: EngineWindow, ctx: Context, cap: Cap | None,
                    own: Recommendation | None) -> list[Finding]:
    """All rules on one engine."""
    out = [f for f in (preemption(w, ctx, cap), queue(w, ctx, cap), saturated(w, ctx, cap))
           if f]
    kv = w.level("kv_cache_usage")
    s = w.slope("waiting")
    pressure = bool((kv and kv.mean >= KV_PRESSURE) or any(
        f.id in ("preemption_spiral", "intermittent_preemption", "queue_explosion")
        for f in out) or (s is not None and s * w.duration >= QUEUE_GROWTH))
    h = hogging(w, ctx, pressure)
    if h:
        out.append(h)
    u = underfed(w, ctx, cap, own)
    if u:
        out.append(u)
    return out


def merge(per_engine: dict[str, list[Finding]]) -> list[Finding]:
    """One finding per id; with several engines, evidence lines name their engine."""
    multi = len(per_engine) > 1
    by_id: dict[str, Finding] = {}
    for key, fs in per_engine.items():
        for f in fs:
            ev = [f"engine {key}: {e}" for e in f.evidence] if multi else list(f.evidence)
            g = by_id.get(f.id)
            if g is None:
                by_id[f.id] = Finding(f.id, f.severity, f.title, ev, list(f.fix), [key],
                                      {key: f.data})
                continue
            g.engines.append(key)
            g.evidence += ev
            g.fix += [x for x in f.fix if x not in g.fix]
            g.data[key] = f.data
            if SEVERITY[f.severity] < SEVERITY[g.severity]:
                g.severity = f.severity
    return sorted(by_id.values(), key=lambda f: (SEVERITY[f.severity], ORDER.index(f.id)))
