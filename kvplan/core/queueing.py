"""Queueing for admission control and replica counts: M/M/c (Erlang C).

Each replica runs up to `max_num_seqs` sequences at once; a request holds one of those
slots for its whole service time (prefill + output tokens x TPOT). The cluster is modelled
as c = replicas x max_num_seqs identical servers fed by Poisson arrivals. Assumptions (stated
in docs/recommend.md): Poisson arrivals (bursty traffic is handled by the peak rate),
exponential service times (conservative for the tail), FCFS, no abandonment. With
`burstiness` b (gamma-distributed gaps of shape b), waits scale by (1 + 1/b) / 2
(Kingman's approximation for the arrival variability).
"""

from __future__ import annotations

import math


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
