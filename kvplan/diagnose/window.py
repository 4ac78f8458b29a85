"""Levels, rates and histogram deltas of one engine over a window of scrapes (pure)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvplan.diagnose.metrics import Engine, Hist, Scrape


@dataclass(frozen=True)
class Level:
    """A gauge over the window: first, last, min, mean, max."""

    first: float
    last: float
    min: float
    mean: float
    max: float

    @classmethod
    def of(cls, values: list[float]) -> Level | None:
        if not values:
            return None
        return cls(values[0], values[-1], min(values), sum(values) / len(values), max(values))


def slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (t, value), per second; None without two distinct times."""
    if len(points) < 2:
        return None
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    den = sum((t - mt) ** 2 for t, _ in points)
    if den <= 0:
        return None
    return sum((t - mt) * (v - mv) for t, v in points) / den


def increase(values: list[float]) -> float | None:
    """Counter increase across samples; a drop is a restart from zero (as PromQL increase)."""
    if len(values) < 2:
        return None
    inc = 0.0
    for a, b in zip(values, values[1:]):
        inc += b - a if b >= a else b
    return inc


@dataclass
class EngineWindow:
    """One engine across the scrapes that contain it (times relative to the window start)."""

    key: str
    times: list[float]
    snaps: list[Engine]

    @property
    def last(self) -> Engine:
        return self.snaps[-1]

    @property
    def duration(self) -> float:
        return self.times[-1] - self.times[0] if len(self.times) > 1 else 0.0

    def points(self, fld: str) -> list[tuple[float, float]]:
        return [(t, s.gauges[fld]) for t, s in zip(self.times, self.snaps) if fld in s.gauges]

    def level(self, fld: str) -> Level | None:
        return Level.of([v for _, v in self.points(fld)])

    def slope(self, fld: str) -> float | None:
        return slope(self.points(fld))

    def counter(self, fld: str) -> tuple[float, float, float, float] | None:
        """(first, last, increase, seconds) of a counter, or None without two samples."""
        pts = [(t, s.counters[fld]) for t, s in zip(self.times, self.snaps)
               if fld in s.counters]
        inc = increase([v for _, v in pts])
        if inc is None:
            return None
        return pts[0][1], pts[-1][1], inc, pts[-1][0] - pts[0][0]

    def resets(self, fld: str) -> list[tuple[float, float]]:
        """(before, after) of each drop of a counter: a restart from zero."""
        vals = [s.counters[fld] for s in self.snaps if fld in s.counters]
        return [(a, b) for a, b in zip(vals, vals[1:]) if b < a]

    def rate(self, fld: str) -> float | None:
        c = self.counter(fld)
        if c is None or c[3] <= 0:
            return None
        return c[2] / c[3]

    def hist(self, fld: str, min_count: float = 1, since_start: bool = True
             ) -> tuple[Hist, str] | None:
        """The window's observations ("window"), or (with `since_start`) everything since the
        server started ("since start") when fewer than `min_count` fell inside the window."""
        hs = [s.hists[fld] for s in self.snaps if fld in s.hists]
        if not hs:
            return None
        if len(hs) > 1:
            d = hs[-1].minus(hs[0])
            if d.count >= min_count:
                return d, "window"
        if since_start and hs[-1].count >= min_count:
            return hs[-1], "since start"
        return None

    def pool(self) -> tuple[int | None, int | None, int | None]:
        """(num_gpu_blocks, block_size, pool tokens) from cache_config_info or SGLang."""
        e = self.last
        blocks, bs = e.config_int("num_gpu_blocks"), e.config_int("block_size")
        if blocks and bs:
            return blocks, bs, blocks * bs
        tokens = e.gauges.get("kv_pool_tokens")
        if tokens and tokens > 0:
            return None, None, int(tokens)
        return blocks, bs, None


def windows(scrapes: list[Scrape]) -> dict[str, EngineWindow]:
    """Engines of the last scrape, each with its snapshots across `scrapes`."""
    if not scrapes:
        return {}
    t0 = scrapes[0].t
    out: dict[str, EngineWindow] = {}
    for key in scrapes[-1].engines:
        ts, snaps = [], []
        for s in scrapes:
            if key in s.engines:
                ts.append(s.t - t0)
                snaps.append(s.engines[key])
        out[key] = EngineWindow(key, ts, snaps)
    return out


def tail_share(h: Hist, q: float) -> tuple[float, float] | None:
    """Share of a length histogram's total (its _sum) carried by its longest `q` of
    observations, and the length where that tail starts.

    Inside a bucket lengths are taken as uniform (a bucket's mean is its midpoint); the open
    top bucket gets whatever `_sum` leaves after the finite buckets, but at least its lower
    bound. A tail ending inside a bucket takes that bucket's upper part.
    """
    if h.count <= 0 or h.sum <= 0:
        return None
    bins = h.bins()
    finite = sum(k * (lo + hi) / 2 for lo, hi, k in bins if not math.isinf(hi))
    need, taken, tokens, start = q * h.count, 0.0, 0.0, 0.0
    for lo, hi, k in reversed(bins):
        if k <= 0:
            continue
        take = min(k, need - taken)
        if math.isinf(hi):
            tokens += take * max(lo, (h.sum - finite) / k)
            start = lo
        else:
            f = take / k
            tokens += take * (hi - f * (hi - lo) / 2)
            start = hi - f * (hi - lo)
        taken += take
        if taken >= need - 1e-9:
            break
    return min(tokens / h.sum, 1.0), start
