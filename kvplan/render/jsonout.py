"""JSON output that strict parsers (jq, JavaScript, Go) accept: no NaN or Infinity."""

from __future__ import annotations

import json
import math
from typing import Any


def _finite(v: Any) -> Any:
    """`v` with every non-finite float written as the string a user types ('inf', 'nan')."""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v


def dumps(obj: Any, indent: int | None = 2) -> str:
    """`obj` as JSON text with a trailing newline (standard JSON: non-finite floats as
    strings)."""
    try:
        return json.dumps(obj, indent=indent, allow_nan=False) + "\n"
    except ValueError:  # rare: walk the object only when it holds NaN or Infinity
        return json.dumps(_finite(obj), indent=indent, allow_nan=False) + "\n"
