"""Drive the engine with open-loop (Poisson / gamma / trace) or closed-loop load and
summarise the run. Pure computation: the caller passes sized objects and a seed."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from kvplan.core.perf import PerfModel
from kvplan.core.workload import Workload
from kvplan.sim.engine import Config, Engine, Request, Stats

MAX_SERIES = 600


@dataclass
class Load:
    """Open loop: `rate` (req/s, gamma gaps of shape `burstiness`) or `arrivals` (trace);
    closed loop: `concurrency` clients with no think time. Stop after `duration` seconds of
    arrivals or `requests` requests, whichever comes first."""

    rate: float | None = None
    burstiness: float = 1.0
    concurrency: int | None = None
    duration: float | None = None
    requests: int | None = None
    trace: list[tuple[float, int, int]] | None = None  # (arrival, prompt, output)


def _gap(rng: random.Random, rate: float, shape: float) -> float:
    if shape == 1.0:
        return rng.expovariate(rate)
    return rng.gammavariate(shape, 1.0 / (rate * shape))


def simulate(cfg: Config, perf: PerfModel, wl: Workload, load: Load, seed: int = 0,
             drain_factor: float = 20.0) -> Stats:
    rng = random.Random(seed)
    eng = Engine(cfg, perf)
    prefix = wl.prefix_hit
    nid = 0

    def new_req(t: float, p: int | None = None, o: int | None = None) -> Request:
        nonlocal nid
        nid += 1
        p = p if p is not None else wl.prompt.sample(rng)
        o = o if o is not None else wl.output.sample(rng)
        return Request(nid, t, p, o, prefix_hit=int(p * prefix))

    limit_n = load.requests if load.requests is not None else math.inf
    limit_t = load.duration if load.duration is not None else math.inf
    if limit_n == math.inf and limit_t == math.inf and load.trace is None:
        limit_n = 1000  # a trace is replayed whole (the caller cuts it: setup.replayed)
    pending: list[Request] = []  # future arrivals (sorted by time, popped from the end)
    if load.trace is not None:
        pending = [new_req(t, p, o) for t, p, o in load.trace
                   if t < limit_t][: int(min(limit_n, len(load.trace)))]
        pending.reverse()
    issued = 0
    next_open = 0.0
    if load.concurrency:
        for _ in range(int(min(load.concurrency, limit_n))):
            pending.append(new_req(0.0))
            issued += 1
        pending.sort(key=lambda r: -r.arrival)
    elif load.rate:
        next_open = _gap(rng, load.rate, load.burstiness)
    done_seen = 0
    last_sample = -1.0
    horizon = (limit_t if limit_t < math.inf else 0.0)
    open_loop = bool(load.rate) and load.trace is None
    if not open_loop:
        next_open = math.inf
    while True:
        # open-loop arrivals come from a generator, everything else from `pending`
        while open_loop and next_open <= eng.now:
            if issued < limit_n and next_open < limit_t:
                eng.arrive(new_req(next_open))
                eng.stats.events += 1
                issued += 1
                next_open += _gap(rng, load.rate, load.burstiness)
            else:
                next_open = math.inf
        if open_loop and (issued >= limit_n or next_open >= limit_t):
            next_open = math.inf
        while pending and pending[-1].arrival <= eng.now:
            r = pending.pop()
            # a client refused with 429 goes away; one refused with 400 (a prompt of
            # max_model_len or more) sends its next request at once
            if (not eng.arrive(r) and load.concurrency and r.prompt >= cfg.max_model_len
                    and issued < limit_n and r.arrival < limit_t):
                pending.append(new_req(r.arrival))  # the earliest: popped next
                issued += 1
            eng.stats.events += 1
        nxt = min(pending[-1].arrival if pending else math.inf, next_open)
        if not (eng.running or eng.waiting):
            if nxt == math.inf:
                break
            eng._tick(eng.now)
            eng.now = nxt
            eng._last_t = eng.now
            continue
        if not (eng.can_jump() and eng.jump(nxt)):
            eng.step()
        eng.stats.events += 1
        if eng.now - last_sample >= max(0.25, horizon / MAX_SERIES):
            last_sample = eng.now
            usage = 1 - eng.free / cfg.num_blocks if cfg.num_blocks else 0.0
            eng.stats.series.append((eng.now, usage, len(eng.running), len(eng.waiting)))
        # closed loop: every completion starts the client's next request
        if load.concurrency and len(eng.stats.completed) > done_seen:
            for r in eng.stats.completed[done_seen:]:
                if issued < limit_n and r.finish < limit_t:
                    pending.append(new_req(r.finish))
                    issued += 1
            done_seen = len(eng.stats.completed)
            pending.sort(key=lambda r: -r.arrival)
        if horizon and eng.now > drain_factor * horizon:
            break  # overloaded beyond recovery: stop rather than run for ever
    eng._tick(eng.now)
    eng.stats.sim_time = eng.now
    return eng.stats
