"""How many sequences can run at once before the KV pool overflows (and vLLM preempts).

The running batch in steady state: every running request holds its prompt plus what it has
generated so far. A request stays in the batch for a time proportional to its output length,
so the batch over-represents long generations (length-biased sampling); its age is uniform
over its output. Each running request's block demand is sampled from that picture. The
probability that N of them together exceed the usable blocks is the tail of a sum of iid
integers, computed with the lattice saddlepoint approximation (Lugannani-Rice with Daniels'
lattice correction) on the sample's exact moment generating function; it is accurate to a
few percent of the probability itself for any N. The Chernoff bound on the same function is
kept as a strict upper bound. The tests check both against an independent Monte Carlo.
"""

from __future__ import annotations

import bisect
import math
import random
from dataclasses import dataclass

from kvplan.core.blocks import Group
from kvplan.core.workload import Workload

SAMPLES = 4096
THETAS = 80
# The saddlepoint estimate is accurate to a few percent of the probability; the cap keeps a
# 25 % margin under the requested risk for that approximation error (docs/recommend.md).
APPROX_MARGIN = 1.25


def _group_blocks(groups: list[Group], tokens: int) -> int:
    """Blocks a running sequence of `tokens` tokens holds across all groups."""
    return sum(g.blocks_per_request(max(tokens, 1), 0) for g in groups)


def _phi(x: float) -> float:
    return math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def _upper_tail(x: float) -> float:
    return 0.5 * math.erfc(x / math.sqrt(2))


@dataclass(frozen=True)
class Demand:
    """Per-running-sequence block demand, sampled in steady state."""

    samples: tuple[int, ...]
    mean: float
    worst: int  # blocks of a request at max_model_len (the guaranteed policy)
    log_mgf: tuple[tuple[float, float], ...]  # (theta, log E[exp(theta d)])
    hist: tuple[tuple[int, float], ...] = ()  # (value, probability)

    def _tilted(self, theta: float) -> tuple[float, float, float]:
        """log M(theta), tilted mean and tilted variance, from the exact histogram."""
        top = self.hist[-1][0]
        m0 = m1 = m2 = 0.0
        for v, p in self.hist:
            e = p * math.exp(theta * (v - top))
            m0 += e
            m1 += e * v
            m2 += e * v * v
        mean = m1 / m0
        return theta * top + math.log(m0), mean, max(m2 / m0 - mean * mean, 1e-12)

    def overflow_prob(self, n: int, usable: int) -> float:
        """P(sum of n demands > usable), lattice saddlepoint approximation."""
        if n <= 0 or n * self.samples[-1] <= usable:
            return 0.0
        k = usable + 1  # overflow: S >= usable + 1
        a = k / n
        if a <= self.mean:
            return max(0.5, self.overflow_bound(n, usable) if a > self.mean else 1.0)
        lo, hi = 0.0, 1.0
        while self._tilted(hi)[1] < a and hi < 1e6:
            lo, hi = hi, hi * 2
        for _ in range(60):  # bisection on the monotone tilted mean
            mid = (lo + hi) / 2
            if self._tilted(mid)[1] < a:
                lo = mid
            else:
                hi = mid
        theta = (lo + hi) / 2
        lm, _, var = self._tilted(theta)
        big_k = n * lm
        w2 = 2 * (theta * k - big_k)
        if w2 <= 0:
            return 0.5
        w = math.sqrt(w2)
        u = (1 - math.exp(-theta)) * math.sqrt(n * var)
        p = _upper_tail(w) + _phi(w) * (1 / u - 1 / w)
        return min(1.0, max(p, 0.0))

    def overflow_bound(self, n: int, usable: int) -> float:
        """Chernoff: P(sum of n demands > usable) <= min_theta exp(n log M - theta usable)."""
        if n <= 0:
            return 0.0
        if n * self.samples[-1] <= usable:
            return 0.0  # even n copies of the largest sampled demand fit
        best = 0.0
        for theta, lm in self.log_mgf:
            best = min(best, n * lm - theta * (usable + 1))
        return math.exp(best)

    def overflow_mc(self, n: int, usable: int, trials: int, rng: random.Random) -> float:
        """Monte Carlo estimate of the same probability (independent of the bound)."""
        s = self.samples
        over = 0
        for _ in range(trials):
            if sum(s[rng.randrange(len(s))] for _ in range(n)) > usable:
                over += 1
        return over / trials


def demand(groups: list[Group], workload: Workload, max_model_len: int,
           seed: int = 0) -> Demand:
    """Sample the steady-state block demand of one running sequence."""
    wl = workload.clip(max_model_len)
    rng = random.Random(seed)
    outs = wl.output.points
    cum, acc = [], 0
    for o in outs:  # size-biased: a request is seen in the batch in proportion to its length
        acc += o
        cum.append(acc)
    samples = []
    for _ in range(SAMPLES):
        o = outs[bisect.bisect_left(cum, rng.random() * acc)]
        p = wl.prompt.sample(rng)
        p = min(p, max_model_len - 1)
        age = int(rng.random() * o)
        tokens = min(max_model_len, p + age)
        shared = int(p * wl.prefix_hit)
        samples.append(_group_blocks(groups, tokens - shared) if groups else 1)
    samples.sort()
    top = samples[-1]
    mean = sum(samples) / len(samples)
    counts: dict[int, int] = {}
    for v in samples:
        counts[v] = counts.get(v, 0) + 1
    hist = tuple((v, c / len(samples)) for v, c in sorted(counts.items()))
    lmgf = []
    for k in range(1, THETAS + 1):
        theta = (k / THETAS) ** 2 * 40.0 / max(top, 1)
        lse = theta * top + math.log(sum(p * math.exp(theta * (v - top)) for v, p in hist))
        lmgf.append((theta, lse))
    worst = _group_blocks(groups, max_model_len) if groups else 1
    return Demand(tuple(samples), mean, worst, tuple(lmgf), hist)


def safe_max_num_seqs(d: Demand, usable: int, risk: float, cap: int = 4096,
                      strict: bool = False) -> int:
    """Largest N whose overflow probability stays at or below `risk` (saddlepoint estimate;
    `strict` uses the Chernoff upper bound instead)."""
    prob = d.overflow_bound if strict else d.overflow_prob
    limit = risk if strict else risk / APPROX_MARGIN
    lo, hi = 0, cap
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if prob(mid, usable) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return lo


def guaranteed_max_num_seqs(d: Demand, usable: int) -> int:
    """Every admitted sequence may reach max_model_len: no preemption ever."""
    return usable // d.worst if d.worst else 0


def mean_ceiling(d: Demand, usable: int) -> int:
    """Batch at which the pool is full on average: preemption starts around here."""
    return int(usable / d.mean) if d.mean else 0
