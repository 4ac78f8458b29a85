"""How many preemptions are too many: the floor `diagnose` and `simulate` judge a count by.

A V1 preemption costs its victim a recompute of its prompt and output so far, nothing else,
so the floor is a share of requests: at most one in 1,000 finished requests (SHARE) keeps
recomputes out of even a p99.9 latency. A count is flagged only when that share is unlikely
to have produced it: P(Poisson(SHARE × requests) ≥ count) < CHANCE. One preemption in 3,000
requests, or five in 2,400, is within the floor; five in 1,000, or two in 100, are not.
`kvplan recommend`'s caps at their planned load preempt 0-0.05 % of requests in the
simulator (docs/diagnose.md).
"""

from __future__ import annotations

import math

SHARE = 0.001  # preemptions per finished request accepted
CHANCE = 0.01  # a count is flagged when the accepted share gives it with less probability


def poisson_tail(k: float, lam: float) -> float:
    """P(X >= k) for X ~ Poisson(lam); k is rounded up to a whole count."""
    k = math.ceil(k)
    if k <= 0:
        return 1.0
    if lam <= 0:
        return 0.0
    if k <= lam:  # at or below the mean: at least about a half, never flagged
        return 1.0
    term = math.exp(k * math.log(lam) - lam - math.lgamma(k + 1))
    total, i = 0.0, k
    while term > 1e-18 * max(total, 1e-300):
        total += term
        i += 1
        term *= lam / i
    return min(1.0, total)


def excessive(preemptions: float, requests: float | None) -> bool:
    """True when `preemptions` among `requests` finished ones exceed the floor beyond chance
    (no count of requests: any preemption is)."""
    if preemptions <= 0:
        return False
    if requests is None:
        return True
    return poisson_tail(preemptions, SHARE * max(requests, 0.0)) < CHANCE


def within_text(preemptions: float, requests: float) -> str:
    """Why a count is within the floor: 'at most the 0.1 % accepted' or the chance that
    the accepted share gives as many."""
    lam = SHARE * requests
    if preemptions <= lam:
        return f"at most the {SHARE:.1%} accepted"
    return (f"a {SHARE:.1%} share gives {preemptions:,.0f} or more with "
            f"{poisson_tail(preemptions, lam):.0%} probability, within the floor")


def share_text(preemptions: float, requests: float | None, noun: str = "finished") -> str:
    """'0.03% of 3,190 finished requests' ('' without requests)."""
    if not requests:
        return ""
    return f"{preemptions / requests:.2%} of {requests:,.0f} {noun} requests"
