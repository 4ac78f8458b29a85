"""Traffic: request length distributions, arrivals, presets.

A length distribution is kept as a fixed grid of quantiles (deterministic, fast, no numpy):
from a mean, from percentiles (`p50=800,p99=6000`, a log-normal through them), from a named
family, or from a trace's empirical samples. Presets are named engineering defaults; their
sources and ranges are in docs/workload.md.
"""

from __future__ import annotations

import bisect
import math
import random
import re
from dataclasses import field

from kvplan.core.record import record
from kvplan.errors import BadInput

GRID = 512  # quantiles kept per distribution
MAX_REJECTED = 0.99  # a workload vLLM refuses this share of, or more, is bad input
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
    """A token-length distribution as GRID equally weighted quantile points; an empirical
    one (a trace's) also keeps its sorted sample, `values`, so shares of it are exact."""

    points: tuple[int, ...]
    label: str
    values: tuple[int, ...] = ()

    @property
    def mean(self) -> float:
        return sum(self.points) / len(self.points)

    def quantile(self, q: float) -> int:
        i = min(len(self.points) - 1, max(0, int(q * len(self.points))))
        return self.points[i]

    @property
    def max(self) -> int:
        return self.points[-1]

    def share_at_least(self, n: int) -> float:
        """The share of the distribution at n or more: of the sample when there is one (one
        row in 1,000 is 0.001, not the 1/512 of the quantile grid)."""
        if self.values:
            return (len(self.values) - bisect.bisect_left(self.values, n)) / len(self.values)
        return sum(1 for x in self.points if x >= n) / len(self.points)

    def below(self, n: int) -> LengthDist | None:
        """The distribution of the values under n (None when there is none)."""
        if self.values:
            cut = bisect.bisect_left(self.values, n)
            if cut == len(self.values):
                return self
            return LengthDist.empirical(list(self.values[:cut]), self.label) if cut else None
        kept = [x for x in self.points if x < n]
        if len(kept) == len(self.points):
            return self
        return LengthDist.empirical(kept, self.label) if kept else None

    def clipped(self, lo: int, hi: int) -> LengthDist:
        if self.points[0] >= lo and self.points[-1] <= hi:
            return self
        return LengthDist(tuple(min(hi, max(lo, x)) for x in self.points), self.label,
                          tuple(min(hi, max(lo, x)) for x in self.values))

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
        return cls(pts, label, tuple(v))


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

    def rejected_share(self, max_model_len: int) -> float:
        """The share of requests vLLM refuses with HTTP 400: a prompt of max_model_len tokens
        or more leaves no room for one output token. The OpenAI server checks it before the
        engine (`OpenAIServing._validate_input`, 0.6.0 serving_engine.py to 0.19.0
        openai/engine/serving.py: `token_num >= max_model_len`); 0.33 refuses a prompt over
        it in `renderers/params.py` `_token_len_check` and one of exactly it in
        `v1/engine/input_processor.py` `_validate_prompt_len` (`prompt_len ==
        max_prompt_len` for generation). A client's own max_tokens can refuse more (prompt
        + max_tokens > max_model_len); kvplan's output lengths are what is generated."""
        return self.prompt.share_at_least(max_model_len)

    def clip(self, max_model_len: int) -> Workload:
        """The requests the server serves, as it sees them: prompts under max_model_len (the
        rest are refused: `rejected_share`) and outputs of at most max_model_len - 1 (vLLM's
        default max_tokens is max_model_len - prompt, which the capacity model and the
        simulator apply per request). When no prompt is under it, the prompts are clamped
        to max_model_len - 1 instead, so a caller that does not check `rejected_share`
        still gets a workload (recommend, throughput and simulate refuse it first)."""
        p = self.prompt.below(max_model_len) or self.prompt.clipped(1, max_model_len - 1)
        o = self.output.clipped(1, max_model_len - 1)
        if p is self.prompt and o is self.output:
            return self
        return Workload(**{**self.__dict__, "prompt": p, "output": o})

    def served_share(self, max_model_len: int, what: str = "the workload") -> float:
        """1 - `rejected_share`, refusing (bad input) a workload vLLM would refuse nearly
        whole: MAX_REJECTED of its requests or more."""
        share = self.rejected_share(max_model_len)
        refuse_unserved(share, max_model_len, self.prompt.quantile(0.99), what)
        return 1 - share


class Unserved(BadInput):
    """vLLM would refuse nearly all of the requests for their length (`refuse_unserved`)."""


def refuse_unserved(share: float, max_model_len: int, p99: int, what: str) -> None:
    """Bad input when vLLM would refuse MAX_REJECTED of the requests or more."""
    if share >= MAX_REJECTED:
        raise Unserved(f"{share:.1%} of {what}'s requests have prompts of max_model_len "
                       f"({max_model_len:,} tokens) or more, which vLLM refuses (HTTP 400): "
                       "there is nothing to plan", hint=f"a max_model_len above the prompts "
                       f"(p99 {p99:,} tokens): --max-model-len, or a model or GPU that holds "
                       "that context")


def rejected_note(share: float, max_model_len: int, fate: str = "they are not planned",
                  remedy: str | None = None) -> str:
    """The advice line of a workload with prompts vLLM refuses."""
    return (f"{share:.1%} of the requests have prompts of max_model_len ({max_model_len:,} "
            f"tokens) or more: vLLM answers them HTTP 400 ('maximum context length'), so "
            f"{fate}; " + (remedy or "raise --max-model-len (or cap prompts at the gateway) "
                           "to serve them"))


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
