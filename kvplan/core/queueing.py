"""Queueing for admission control and replica counts: M/M/c (Erlang C) for the slots (the
token budget's M/G/1 queue is in `perf.first_token_times`).

Each replica runs up to `max_num_seqs` sequences at once; a request holds one of those
slots for its whole service time (prefill + output tokens x TPOT). Each replica is modelled
as c = max_num_seqs identical servers fed by Poisson arrivals at its share of the rate
(a load balancer spreads requests; each vLLM replica queues its own). Assumptions (stated
in docs/recommend.md): Poisson arrivals (bursty traffic is handled by the peak rate),
exponential service times (conservative for the tail), FCFS, no abandonment. With
`burstiness` b (gamma-distributed gaps of shape b), waits scale by (1 + 1/b) / 2
(Kingman's approximation for the arrival variability).
"""

from __future__ import annotations

import math

# a bounded queue without a TTFT SLO holds about this many service times of waiting
# (recommend's queue_depth_limit; diagnose's queue bound: 2 x the running batch)
QUEUE_SERVICE_TIMES = 2


def erlang_c(c: int, a: float) -> float:
    """Probability an arrival waits in an M/M/c queue with offered load a = lambda/mu."""
    if c <= 0:
        return 1.0
    if a >= c:
        return 1.0
    # stable recursion for Erlang B, then convert to C
    b = 1.0
    for k in range(1, c + 1):
        b = a * b / (k + a * b)
        if b < 1e-15 and k > a:  # B only falls from here on: P(wait) is 0 to double precision
            return 0.0
    rho = a / c
    return b / (1 - rho * (1 - b))


def wait_quantile(c: int, lam: float, service_s: float, q: float = 0.95,
                  burstiness: float = 1.0) -> float:
    """q-quantile of the queueing delay (seconds); inf when the queue is unstable."""
    if lam <= 0:
        return 0.0
    mu = 1.0 / service_s
    if lam >= c * mu:
        return math.inf
    pw = erlang_c(c, lam / mu)
    if pw <= 1 - q:
        return 0.0
    t = math.log(pw / (1 - q)) / (c * mu - lam)
    return t * (1 + 1 / max(burstiness, 1e-6)) / 2


def sojourn_quantile(delays: list[float], c: int, lam: float, service_s: float,
                     q: float = 0.95, burstiness: float = 1.0) -> float:
    """q-quantile of wait + D, where the wait W is the M/M/c queueing delay above
    (P(W > t) = P(wait) e^{-(c mu - lam) t}, stretched by Kingman's (1 + 1/b) / 2) and D,
    independent of it, is equally likely each of `delays` (a request's own time to its first
    token, over the prompt distribution): the t with mean_j P(W <= t - D_j) = q. inf when
    the queue is unstable."""
    if not delays:
        return wait_quantile(c, lam, service_s, q, burstiness)
    pw, theta = 0.0, 0.0
    if lam > 0:
        mu = 1.0 / service_s
        if lam >= c * mu:
            return math.inf
        pw = erlang_c(c, lam / mu)
        theta = (c * mu - lam) / ((1 + 1 / max(burstiness, 1e-6)) / 2)

    def cdf(t: float) -> float:
        return sum(0.0 if t < d else 1.0 - pw * math.exp(-theta * (t - d))
                   for d in delays) / len(delays)

    ds = sorted(delays)
    lo = ds[min(len(ds) - 1, max(0, math.ceil(q * len(ds)) - 1))]  # W = 0: D's own quantile
    if cdf(lo) >= q:
        return lo
    hi = ds[-1] + (math.log(pw / (1 - q)) / theta if pw > 1 - q else 0.0)
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if cdf(mid) >= q else (mid, hi)
    return hi

