"""The recommended max-num-seqs: `kvplan recommend`'s risk model (core/capacity.py) applied
to the KV footprint one running sequence has on the server.

The mean footprint is what the scrapes show (KV usage / running). Its spread comes from the
server's prompt and output length histograms when they hold enough requests, put through
the same steady-state picture `recommend` uses (a running request holds its prompt and a
uniform share of its output, long outputs over-represented), then scaled to the observed
mean; without them the footprint is taken as exponential (CV 1, the maximum-entropy law of
a positive quantity with a known mean). The cap is the largest N whose N footprints overflow
the pool with at most the preemption risk (1 %, as `recommend`): the margin over the mean
grows as the batch shrinks.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from kvplan.core import capacity
from kvplan.core.arch import FULL
from kvplan.core.blocks import Group
from kvplan.core.kvspec import Spec
from kvplan.core.workload import GRID, LengthDist, Workload
from kvplan.diagnose.metrics import Hist
from kvplan.diagnose.window import EngineWindow

RISK = 0.01  # kvplan recommend's default --preempt-risk
MAX_SEQS_CEILING = 4096
HIST_MIN_REQUESTS = 20  # finished requests a length histogram needs to give the shape
NOMINAL_UNITS = 100_000  # pool units when the pool size is unknown (the answer is a share)
UNBOUNDED = 1 << 40  # no max_model_len clipping: the footprint is scaled, not re-derived
FIT_TOLERANCE = 0.002  # the fitted mean footprint is within 0.2 % of the observed one


@dataclass(frozen=True)
class Recommendation:
    """A max-num-seqs from the KV one running sequence holds, its spread and the pool."""

    max_num_seqs: int
    kv_per_seq: float  # fraction of the pool one running sequence holds, on average
    tokens_per_seq: float | None
    pool_tokens: int | None
    pool_source: str | None
    engine: str
    risk: float = RISK
    shape: str = ""  # where the footprint's spread came from
    cv: float = 0.0  # coefficient of variation of one sequence's footprint
    overflow: float = 0.0  # P(max_num_seqs footprints overflow the pool), saddlepoint
    demand: capacity.Demand | None = field(default=None, repr=False, compare=False)
    usable: int = 0  # units of the pool at the recommended cap
    now_usable: int = 0  # units of the server's pool now (0: the same)
    now_pool_tokens: int | None = None  # the server's pool, when the cap is re-sized
    resized: bool = False  # sized on the pool vLLM leaves at the recommended cap

    @property
    def mean_usage(self) -> float:
        """The mean KV usage of a full batch at the recommended cap, on its pool."""
        return self.max_num_seqs * self.kv_per_seq * (self.now_usable or 1) / (
            self.usable or 1) if self.resized else self.max_num_seqs * self.kv_per_seq

    def overflow_at(self, n: int) -> float | None:
        """P(n footprints overflow the server's pool now), or None without a fitted demand."""
        if self.demand is None or n <= 0:
            return None
        return self.demand.overflow_prob(n, self.now_usable or self.usable)


@dataclass(frozen=True)
class Resize:
    """The pool vLLM leaves at another cap (it profiles max_num_seqs sequences): `pool_at(c)`
    is (blocks, block_size, tokens, source) at cap c, equal to the server's pool at `cap`."""

    cap: int
    pool_at: Callable[[int], tuple | None]


def hist_lengths(h: Hist, label: str) -> LengthDist | None:
    """GRID quantiles of a length histogram: uniform inside each bucket (as `tail_share`);
    the open top bucket is uniform from its lower bound with the mean `_sum` leaves it."""
    bins = [b for b in h.bins() if b[2] > 0]
    total = sum(k for _, _, k in bins)
    if total <= 0:
        return None
    finite = sum(k * (lo + hi) / 2 for lo, hi, k in bins if not math.isinf(hi))
    pts, below, i = [], 0.0, 0
    for j in range(GRID):
        q = (j + 0.5) / GRID * total
        while i < len(bins) - 1 and below + bins[i][2] < q:
            below += bins[i][2]
            i += 1
        lo, hi, k = bins[i]
        if math.isinf(hi):
            hi = 2 * max(lo, (h.sum - finite) / k) - lo
        pts.append(max(1, round(lo + min(1.0, (q - below) / k) * (hi - lo))))
    return LengthDist(tuple(sorted(pts)), label)


def exponential(mean: float) -> LengthDist:
    return LengthDist(tuple(max(1, round(-mean * math.log(1 - (i + 0.5) / GRID)))
                            for i in range(GRID)), f"exponential, mean {mean:.0f}")


def _shape(w: EngineWindow) -> tuple[LengthDist, LengthDist, bool, str] | None:
    """(prompt, output, scale the prompt too, description) from the length histograms."""
    p = w.hist("prompt_len", HIST_MIN_REQUESTS)
    g = w.hist("generation_len", HIST_MIN_REQUESTS)
    if not (p and g):
        return None
    pd, gd = hist_lengths(p[0], "prompt"), hist_lengths(g[0], "output")
    if pd is None or gd is None:
        return None
    scope = p[1] if p[1] == g[1] else f"prompts {p[1]}, outputs {g[1]}"
    return pd, gd, True, f"length histograms, {scope}"


def _scaled(d: LengthDist, c: float) -> LengthDist:
    return d if c == 1.0 else LengthDist(tuple(max(1, round(x * c)) for x in d.points),
                                         d.label)


def _fit(w: EngineWindow, target: float, block_size: int) -> tuple[capacity.Demand, str]:
    """The per-sequence block demand whose mean is `target` blocks."""
    groups = [Group((0,), (Spec(FULL, block_size, 1),))]
    got = _shape(w)
    if got is None:
        got = (LengthDist.fixed(1), exponential(target * block_size), False,
               "exponential: no length histograms")
    prompt, output, scale_prompt, shape = got
    c = 1.0
    for _ in range(8):
        wl = Workload(name="observed", prompt=_scaled(prompt, c) if scale_prompt else prompt,
                      output=_scaled(output, c))
        d = capacity.demand(groups, wl, UNBOUNDED)
        ratio = target / d.mean
        if abs(ratio - 1) <= FIT_TOLERANCE:
            break
        c *= ratio
    return d, shape


def _units(pool: tuple, kv_per_seq: float) -> tuple[int, int]:
    """(usable pool units, tokens per unit) the overflow is counted in."""
    blocks, bs, tokens, _ = pool
    if blocks and bs:  # V1's usage counts the blocks beside the null block (`get_usage`)
        return max(blocks - 1, 1), bs
    if tokens:
        return tokens, 1
    return max(NOMINAL_UNITS, math.ceil(64 / kv_per_seq)), 1


def recommend(w: EngineWindow, pool: tuple, risk: float = RISK,
              resize: Resize | None = None) -> Recommendation | None:
    """The largest cap whose batch overflows the pool with at most `risk`, for footprints
    of the observed mean (Σ KV usage / Σ running over scrapes with sequences running); with
    `resize`, on the pool vLLM leaves at that cap."""
    sum_kv = sum_r = 0.0
    for s in w.snaps:
        r, kv = s.gauges.get("running"), s.gauges.get("kv_cache_usage")
        if r is not None and kv is not None and r > 0:
            sum_r += r
            sum_kv += kv
    if sum_r <= 0 or sum_kv <= 0:
        return None
    per_seq = sum_kv / sum_r
    tokens = per_seq * pool[2] if pool[2] else None
    base = dict(kv_per_seq=per_seq, tokens_per_seq=tokens, engine=w.key, risk=risk)
    if per_seq * MAX_SEQS_CEILING <= 0.5:  # even the ceiling fills half the pool on average
        return Recommendation(MAX_SEQS_CEILING, shape="the ceiling fills at most half the pool",
                              pool_tokens=pool[2], pool_source=pool[3], **base)
    usable, bs = _units(pool, per_seq)
    d, shape = _fit(w, per_seq * usable, bs)
    n = max(1, capacity.safe_max_num_seqs(d, usable, risk, cap=MAX_SEQS_CEILING))
    at = pool
    if resize is not None and pool[0] and pool[1]:
        n, at = _on_own_pool(d, n, risk, resize) or (n, pool)
        at = at or pool
    at_usable = _units(at, per_seq)[0]
    var = sum((v - d.mean) ** 2 for v in d.samples) / len(d.samples)
    return Recommendation(n, shape=shape, cv=math.sqrt(var) / d.mean,
                          overflow=d.overflow_prob(n, at_usable), demand=d, usable=at_usable,
                          pool_tokens=at[2], pool_source=at[3], now_usable=usable,
                          now_pool_tokens=pool[2], resized=at is not pool, **base)


def _on_own_pool(d: capacity.Demand, n: int, risk: float, rs: Resize
                 ) -> tuple[int, tuple | None] | None:
    """(cap, its pool; None: the server's own): the largest cap that holds on the pool vLLM
    leaves at it (`capacity.fixed_point`, as `kvplan recommend` re-sizes its cap).
    Below the current cap the pool grows, above it it shrinks; None when the sizes do not
    bear that out."""
    pools: dict[int, tuple | None] = {}

    def holds(c: int) -> int:
        if c not in pools:
            pools[c] = rs.pool_at(c)
        p = pools[c]
        if not p or not p[0] or p[0] < 2:
            return 0
        return capacity.safe_max_num_seqs(d, p[0] - 1, risk, cap=MAX_SEQS_CEILING)

    lo, hi = (n, rs.cap - 1) if n < rs.cap else (rs.cap, n)
    c = capacity.fixed_point(holds, lo, hi)
    if c is None:
        return None
    return c, None if c == rs.cap else pools[c]
