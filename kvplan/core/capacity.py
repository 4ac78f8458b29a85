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
from collections.abc import Callable

from kvplan.core.blocks import Group
from kvplan.core.record import record
from kvplan.core.workload import Workload

SAMPLES = 4096
THETAS = 160
BIN_SPAN = 0.02
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


@record(frozen=True)
class Demand:
    """Per-running-sequence block demand, sampled in steady state."""

    samples: tuple[int, ...]
    mean: float
    worst: int  # blocks of a request at max_model_len (the guaranteed policy)
    log_mgf: tuple[tuple[float, float], ...]  # (theta, log E[exp(theta d)])
    hist: tuple[tuple[int, float], ...] = ()  # (value, probability)
    grid: tuple[tuple[float, float], ...] = ()  # (theta, tilted mean), increasing
    grid_means: tuple[float, ...] = ()
    # blocks of the common prompt prefix the running batch shares through the prefix cache,
    # held once (the longest one a request can hold); the demands above exclude it
    shared: int = 0

    def _tilted(self, theta: float) -> tuple[float, float, float]:
        """log M(theta), tilted mean and tilted variance, from the histogram."""
        top = self.hist[-1][0]
        exp = math.exp
        m0 = m1 = m2 = 0.0
        for v, p in self.hist:
            e = p * exp(theta * (v - top))
            ev = e * v
            m0 += e
            m1 += ev
            m2 += ev * v
        mean = m1 / m0
        return theta * top + math.log(m0), mean, max(m2 / m0 - mean * mean, 1e-12)

    def _solve(self, a: float) -> float:
        """theta with tilted mean a, interpolated on the precomputed (dense) grid."""
        i = bisect.bisect_left(self.grid_means, a)
        if i == 0:
            theta = self.grid[0][0]
        elif i >= len(self.grid):
            theta = self.grid[-1][0]
        else:
            (t0, m0), (t1, m1) = self.grid[i - 1], self.grid[i]
            theta = t0 + (t1 - t0) * (a - m0) / ((m1 - m0) or 1.0)
        return theta

    def overflow_prob(self, n: int, usable: int) -> float:
        """P(sum of n demands > usable), lattice saddlepoint approximation."""
        usable -= self.shared
        if n <= 0 or n * self.hist[-1][0] <= usable:
            return 0.0
        k = usable + 1  # overflow: S >= usable + 1
        a = k / n
        if a <= self.mean:
            return max(0.5, self.overflow_bound(n, usable + self.shared)
                       if a > self.mean else 1.0)
        theta = self._solve(a)
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
        usable -= self.shared
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
        usable -= self.shared
        s = self.samples
        over = 0
        for _ in range(trials):
            if sum(s[rng.randrange(len(s))] for _ in range(n)) > usable:
                over += 1
        return over / trials


_CACHE: dict[tuple, Demand] = {}


def demand(groups: list[Group], workload: Workload, max_model_len: int,
           seed: int = 0) -> Demand:
    """Sample the steady-state block demand of one running sequence (memoised: block counts
    depend only on each group's kind, block size and window, not on page bytes)."""
    wl = workload.clip(max_model_len)
    key = (tuple((g.spec.kind, g.spec.block_size, g.spec.window, g.spec.encoder_len,
                  g.spec.state_blocks, g.spec.all_states) for g in groups),
           wl.prompt.points, wl.output.points, wl.prefix_hit, max_model_len, seed)
    hit = _CACHE.get(key)
    if hit is None:
        if len(_CACHE) > 256:
            _CACHE.clear()
        hit = _CACHE[key] = _demand(groups, wl, max_model_len, seed)
    return hit


def _demand(groups: list[Group], wl: Workload, max_model_len: int, seed: int) -> Demand:
    rng = random.Random(seed)
    outs = wl.output.points
    cum, acc = [], 0
    for o in outs:  # size-biased: a request is seen in the batch in proportion to its length
        acc += o
        cum.append(acc)
    # prefix caching shares whole blocks of a prompt's cached part (at most prompt - 1
    # tokens: `KVCacheManager.get_computed_blocks`); the common prefix is held once, as long
    # as the longest running request's (evictable, so free, when nobody holds it)
    bs = max((g.spec.block_size for g in groups), default=1)

    def cached(p: int) -> int:
        return min(int(p * wl.prefix_hit), p - 1) // bs * bs if wl.prefix_hit else 0

    samples = []
    for _ in range(SAMPLES):
        o = outs[bisect.bisect_left(cum, rng.random() * acc)]
        p = wl.prompt.sample(rng)
        p = min(p, max_model_len - 1)
        age = int(rng.random() * o)
        tokens = min(max_model_len, p + age)
        samples.append(_group_blocks(groups, tokens - cached(p)) if groups else 1)
    top_prefix = cached(min(wl.prompt.max, max_model_len - 1))
    shared = _group_blocks(groups, top_prefix) if groups and top_prefix else 0
    samples.sort()
    top = samples[-1]
    mean = sum(samples) / len(samples)
    # the tail computations use a histogram with geometric bins (each at most BIN_SPAN wider
    # than its lower edge); every demand is rounded UP to its bin's largest member, so a
    # sequence's blocks are never under-counted (conservative by at most BIN_SPAN)
    counts: dict[int, int] = {}
    start = i = 0
    while i < len(samples):
        limit = samples[start] * (1 + BIN_SPAN) + 1
        while i < len(samples) and samples[i] <= limit:
            i += 1
        counts[samples[i - 1]] = i - start
        start = i
    hist = tuple((v, c / len(samples)) for v, c in sorted(counts.items()))
    top = hist[-1][0]
    lmgf, grid = [], []
    for k in range(1, THETAS + 1):
        theta = (k / THETAS) ** 2 * 40.0 / max(top, 1)
        m0 = m1 = 0.0
        for v, p in hist:
            e = p * math.exp(theta * (v - top))
            m0 += e
            m1 += e * v
        lmgf.append((theta, theta * top + math.log(m0)))
        grid.append((theta, m1 / m0))
    worst = _group_blocks(groups, max_model_len) if groups else 1
    return Demand(tuple(samples), mean, worst, tuple(lmgf), hist, tuple(grid),
                  tuple(m for _, m in grid), shared)


def safe_max_num_seqs(d: Demand, usable: int, risk: float, cap: int = 4096,
                      strict: bool = False) -> int:
    """Largest N whose overflow probability stays at or below `risk` (saddlepoint estimate;
    `strict` uses the Chernoff upper bound instead)."""
    prob = d.overflow_bound if strict else d.overflow_prob
    limit = risk if strict else risk / APPROX_MARGIN
    memo: dict[int, bool] = {}

    def ok(n: int) -> bool:
        if n not in memo:
            memo[n] = prob(n, usable) <= limit
        return memo[n]

    # start near the normal-approximation answer, bracket it, then bisect the bracket
    var = sum(p * (v - d.mean) ** 2 for v, p in d.hist)
    z = 2.326 if risk <= 0.01 else 1.645
    b = z * math.sqrt(var)
    guess = int(((-b + math.sqrt(b * b + 4 * d.mean * usable)) / (2 * d.mean)) ** 2) \
        if d.mean else cap
    guess = max(1, min(cap, guess))
    step = max(1, guess // 16)
    if ok(guess):  # walk up until it fails: the answer is in [lo, hi]
        lo, hi = guess, cap
        while lo + step <= cap:
            if not ok(lo + step):
                hi = lo + step - 1
                break
            lo += step
            step *= 2
    else:  # walk down until it holds
        lo, hi = 0, guess - 1
        probe = guess - step
        while probe >= 1:
            if ok(probe):
                lo = probe
                break
            hi = probe - 1
            step *= 2
            probe = guess - step
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def guaranteed_max_num_seqs(d: Demand, usable: int) -> int:
    """Every admitted sequence may reach max_model_len: no preemption ever."""
    return max(0, usable - d.shared) // d.worst if d.worst else 0


def mean_ceiling(d: Demand, usable: int) -> int:
    """Batch at which the pool is full on average: preemption starts around here."""
    return int(max(0, usable - d.shared) / d.mean) if d.mean else 0


def fixed_point(holds: Callable[[int], int], lo: int, hi: int) -> int | None:
    """The largest cap c in [lo, hi] with holds(c) >= c, for `holds` non-increasing (a larger
    --max-num-seqs leaves a smaller pool: a larger profile and graph grid), or None when lo
    does not hold. A cap that held bounds the answer by what it holds, a cap that failed by
    itself, and the failed cap's own figure is the next guess (then bisection, which bounds
    the worst case): a few sizings in all. `kvplan recommend` (plan._fixed_point) and
    `kvplan diagnose` (safecap) search the cap that holds on its own pool with it."""
    best, below, above, cand, guesses = None, lo - 1, hi + 1, lo, 0
    while below < cand < above:
        h = holds(cand)
        if h >= cand:
            best, below = cand, cand
            above = min(above, h + 1)  # a larger cap's smaller pool holds no more
            nxt = above - 1
        elif best is None:
            return None
        else:
            above = cand
            nxt = h  # a smaller cap's larger pool holds at least this
        guesses += 1
        if not below < nxt < above or guesses > 6:
            nxt = (below + above) // 2
        cand = nxt
    return best

