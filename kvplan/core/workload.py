"""Traffic: request length distributions, arrivals, presets.

A length distribution is kept as a fixed grid of quantiles (deterministic, fast, no numpy):
from a mean, from percentiles (`p50=800,p99=6000`, a log-normal through them), from a named
family, or from a trace's empirical samples. Presets are named engineering defaults; their
sources and ranges are in docs/workload.md.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import field

from kvplan.core.record import record
from kvplan.errors import BadInput

GRID = 512  # quantiles kept per distribution
Z99 = 2.3263478740408408  # standard normal 0.99 quantile


def _norm_ppf(p: float) -> float:
    """Inverse standard normal CDF (Acklam's rational approximation, |error| < 1.2e-9)."""
    a = [-3.969683028665376e01, 2.209460984245205e02, -2.759285104469687e02,
         1.383577518672690e02, -3.066479806614716e01, 2.506628277459239e00]
    b = [-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02,
         6.680131188771972e01, -1.328068155288572e01]
    c = [-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00,
         -2.549732539343734e00, 4.374664141464968e00, 2.938163982698783e00]
    d = [7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00,
         3.754408661907416e00]
    lo = 0.02425
    if p < lo:
        q = math.sqrt(-2 * math.log(p))
        return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / \
            ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1)
    if p > 1 - lo:
        return -_norm_ppf(1 - p)
    q = p - 0.5
    r = q * q
    return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q / \
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1)


@record(frozen=True)
class LengthDist:
    """A token-length distribution as GRID equally weighted quantile points."""

    points: tuple[int, ...]
    label: str

    @property
    def mean(self) -> float:
        return sum(self.points) / len(self.points)

    def quantile(self, q: float) -> int:
        i = min(len(self.points) - 1, max(0, int(q * len(self.points))))
        return self.points[i]

    @property
    def max(self) -> int:
        return self.points[-1]

    def clipped(self, lo: int, hi: int) -> LengthDist:
        if self.points[0] >= lo and self.points[-1] <= hi:
            return self
        return LengthDist(tuple(min(hi, max(lo, x)) for x in self.points), self.label)

    def sample(self, rng: random.Random) -> int:
        return self.points[rng.randrange(len(self.points))]

    @classmethod
    def lognormal(cls, median: float, sigma: float, label: str) -> LengthDist:
        pts = tuple(max(1, round(median * math.exp(sigma * _norm_ppf((i + 0.5) / GRID))))
                    for i in range(GRID))
        return cls(pts, label)

    @classmethod
    def fixed(cls, n: int, label: str | None = None) -> LengthDist:
        return cls((n,) * GRID, label or f"fixed {n}")

    @classmethod
    def empirical(cls, values: list[int], label: str) -> LengthDist:
        if not values:
            raise BadInput("an empty sample has no length distribution")
        v = sorted(values)
        pts = tuple(v[min(len(v) - 1, int((i + 0.5) / GRID * len(v)))] for i in range(GRID))
        return cls(pts, label)


def parse_lengths(text: str, what: str) -> LengthDist:
    """`800` (mean, log-normal with sigma 0.8), `p50=800,p99=6000`, `fixed:512`,
    `lognormal:800:0.9` (median, sigma), `uniform:100:900`."""
    s = str(text).strip().lower()
    try:
        if re.fullmatch(r"\d+(\.\d+)?", s):
            mean = float(s)
            if mean <= 0:
                raise ValueError
            sigma = 0.8
            return LengthDist.lognormal(mean / math.exp(sigma ** 2 / 2), sigma,
                                        f"mean {mean:g} (log-normal, sigma {sigma})")
        if s.startswith("fixed:"):
            n = int(s.split(":")[1])
            if n <= 0:
                raise ValueError
            return LengthDist.fixed(n)
        if s.startswith("lognormal:"):
            _, med, sig = s.split(":")
            if float(med) <= 0 or float(sig) < 0:
                raise ValueError
            return LengthDist.lognormal(float(med), float(sig), f"log-normal median {med}")
        if s.startswith("uniform:"):
            _, lo, hi = s.split(":")
            lo_i, hi_i = int(lo), int(hi)
            if not 0 < lo_i <= hi_i:
                raise ValueError
            pts = tuple(round(lo_i + (hi_i - lo_i) * (i + 0.5) / GRID) for i in range(GRID))
            return LengthDist(pts, f"uniform {lo_i}-{hi_i}")
        pcts = dict(kv.split("=") for kv in s.split(","))
        vals = {int(k.lstrip("p")): float(v) for k, v in pcts.items()}
        if 50 not in vals or any(v <= 0 for v in vals.values()):
            raise ValueError
        med = vals[50]
        high = [(p, v) for p, v in vals.items() if p > 50]
        if not high:
            raise ValueError
        p, v = max(high)
        if v < med:
            raise ValueError
        sigma = math.log(v / med) / _norm_ppf(p / 100)
        return LengthDist.lognormal(med, sigma, f"p50={med:g}, p{p}={v:g} (log-normal)")
    except (ValueError, KeyError, IndexError, OverflowError):  # Overflow: lognormal:100:1000
        raise BadInput(f"cannot read {what} {text!r}",
                       hint="use a positive mean (800), percentiles (p50=800,p99=6000), "
                            "fixed:N, lognormal:MEDIAN:SIGMA or uniform:LO:HI") from None


# name -> (prompt median, prompt p99, output median, output p99): docs/workload.md
PRESETS: dict[str, tuple[int, int, int, int]] = {
    "chat": (800, 6000, 250, 1200),
    "rag": (3000, 8000, 250, 800),
    "code": (1500, 12000, 300, 2000),
    "summarization": (6000, 30000, 400, 1200),
    "reasoning": (600, 4000, 3000, 16000),
    "agent": (10000, 60000, 300, 2000),
}


@record
class Workload:
    """Request lengths, arrivals and cache reuse of the traffic a deployment must serve."""

    name: str
    prompt: LengthDist
    output: LengthDist
    rate: float | None = None  # sustained requests/s
    peak_rate: float | None = None
    burstiness: float = 1.0  # gamma shape of inter-arrival gaps; 1 = Poisson
    users: int | None = None
    think_time_s: float = 0.0
    prefix_hit: float = 0.0  # share of prompt tokens served from the prefix cache
    notes: list[str] = field(default_factory=list)

    def clip(self, max_model_len: int) -> Workload:
        """Lengths as the server sees them: prompt + output <= max_model_len."""
        p = self.prompt.clipped(1, max_model_len - 1)
        o = self.output.clipped(1, max_model_len - 1)
        if p is self.prompt and o is self.output:
            return self
        return Workload(**{**self.__dict__, "prompt": p, "output": o})


def preset(name: str) -> Workload:
    key = name.strip().lower()
    if key not in PRESETS:
        import difflib

        close = difflib.get_close_matches(key, list(PRESETS), n=1)
        raise BadInput(f"unknown workload {name!r}",
                       hint=f"did you mean {close[0]}?" if close else
                       "choose one of " + ", ".join(PRESETS))
    pm, pp, om, op = PRESETS[key]
    p = LengthDist.lognormal(pm, math.log(pp / pm) / Z99, f"{key} prompt p50={pm} p99={pp}")
    o = LengthDist.lognormal(om, math.log(op / om) / Z99, f"{key} output p50={om} p99={op}")
    return Workload(name=key, prompt=p, output=o)
