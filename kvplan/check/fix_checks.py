"""Fixes checked against the other checks. A fix that changes --gpu-memory-utilization
resizes the KV pool, so it can make another check fail once applied (0.98 -> 0.92 on an L4
leaves too little for --max-model-len 40000). Such a fix is re-checked at the value it
suggests, and it names every other change the deployment then needs, so that applying it
passes."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kvplan.check.base import FAIL, SKIP, WARN, Finding
from kvplan.check.mapping import Parsed, spelled

RANGE, LATE, SHARED = ("gpu-memory-utilization-range", "late-allocations-fit",
                       "gpu-not-shared")
# the checks whose outcome depends on the pool a utilization leaves
SIZED = ("weights-fit", LATE, "max-model-len-fits", "max-num-seqs-safe", "replicas-cover-rate")
_RANK = {FAIL: 3, WARN: 2, "pass": 1, SKIP: 0}
# above 0.95 the range check warns: from its usual fix up to there, the first value that keeps
# every other check as it was (a larger pool than 0.92's may keep --max-model-len)
UPPER = 0.95


def check(out: Any, p: Parsed, version: str, catalogs: list[str] | None) -> None:
    """Re-check each --gpu-memory-utilization fix at the value it suggests; where another
    check would then fail, the fix also names that check's change and the message says so."""
    if p.engine == "tgi":
        return
    fixes = [f for f in out.findings if f.id in (RANGE, LATE, SHARED)
             and f.status in (WARN, FAIL) and isinstance(f.suggested, float)]
    late = next((f.suggested for f in fixes if f.id == LATE), None)
    for f in fixes:
        tried: list[tuple[float, list[Finding]]] = []
        for value in _candidates(f, late):
            broken = _broken(out, _recheck(out, p, version, catalogs, value), f.id)
            tried.append((value, broken))
            if not broken:
                break
        _rewrite(f, p, tried)


def _candidates(f: Finding, late: float | None) -> list[float]:
    """The values to try, in order: the usual fix, then (lowering from above 0.95) up to
    0.95; never above what late-allocations-fit asks for."""
    values = [f.suggested]
    if f.id == RANGE and f.current is not None and f.current > UPPER:
        step = round(f.suggested + 0.01, 2)
        while step <= UPPER + 1e-9:
            values.append(step)
            step = round(step + 0.01, 2)
    if late is not None and f.id == RANGE:
        values = sorted({min(v, late) for v in values})
    return values


def _recheck(out: Any, p: Parsed, version: str, catalogs: list[str] | None,
             value: float) -> Any:
    """The sized checks of the deployment with --gpu-memory-utilization `value`."""
    from kvplan.check import sizing_checks
    from kvplan.check.checks import Outcome

    again = Outcome(out.target)
    sizing_checks.run(again, replace(p, values={**p.values, "gpu_memory_utilization": value}),
                      version, catalogs)
    return again


def _broken(out: Any, again: Any, own: str) -> list[Finding]:
    """The findings of `again` that fail where `out`'s did not (or fail with another fix,
    which the first fix alone would not satisfy)."""
    ignored = out.target.ignore
    broken = []
    for cid in SIZED:
        if cid == own or cid in ignored:
            continue
        before = _worst(out.findings, cid)
        after = _worst(again.findings, cid)
        if after is None or after.status != FAIL:
            continue
        if before is None or _RANK[after.status] > _RANK[before.status] or \
                after.fix != before.fix:
            broken.append(after)
    return broken


def _worst(findings: list[Finding], cid: str) -> Finding | None:
    mine = [f for f in findings if f.id == cid]
    return max(mine, key=lambda f: _RANK[f.status]) if mine else None


def _rewrite(f: Finding, p: Parsed, tried: list[tuple[float, list[Finding]]]) -> None:
    """The fix at the first value that breaks nothing, else at the last (the largest pool)
    with the other checks' fixes; the message says why."""
    name = spelled(p.engine, "gpu_memory_utilization")
    value, broken = tried[-1]
    if value == f.suggested and not broken:
        return
    first_value, first_broken = tried[0]
    if not broken:  # a larger value than the usual fix keeps every other check passing
        f.message += (f"; at {first_value:g} {_ids(first_broken)} would fail, {value:g} is the "
                      "smallest value that keeps every other check as it is")
        f.fix, f.suggested = f"{name} {value:g}", value
        return
    flags = [b.fix for b in broken if b.fix and b.fix.startswith("-")]
    other = [b.fix for b in broken if b.fix and not b.fix.startswith("-")]
    if f.id == SHARED:  # one of two alternatives: the share, which needs the other changes
        f.message += f"; at {value:g} {_ids(broken)} would fail"
        f.fix = f"{f.fix[:-1]}, with {', '.join(flags + other)})"
        return
    most = f" (the most this check allows; {first_value:g} leaves less)" if len(tried) > 1 \
        else ""
    f.message += (f"; at {value:g}{most} {_ids(broken)} would fail, so the fix also sets "
                  + ", ".join(flags + other))
    f.fix = " ".join([f"{name} {value:g}", *flags]) + "".join(f"; {o}" for o in other)
    f.suggested = value


def _ids(broken: list[Finding]) -> str:
    return " and ".join(b.id for b in broken)
