"""Which vLLM releases export a metric name, to check a server against --vllm-version.

First and last releases are read from `v1/metrics/loggers.py` and `engine/metrics.py` of the
0.6.0-0.33.0 sources: the `kv_cache_usage_perc` / `prefix_cache_*` names appear in 0.9.2,
the `gpu_*` names they replace are in 0.11.2 and gone from 0.12.0.
"""

from __future__ import annotations

from kvplan.core.versions import read_release

# exported name -> (first release that has it, last release that has it); None: open
RELEASES: dict[str, tuple[tuple[int, int, int] | None, tuple[int, int, int] | None]] = {
    "vllm:kv_cache_usage_perc": ((0, 9, 2), None),
    "vllm:prefix_cache_queries_total": ((0, 9, 2), None),
    "vllm:prefix_cache_hits_total": ((0, 9, 2), None),
    "vllm:gpu_cache_usage_perc": (None, (0, 11, 99)),
    "vllm:gpu_prefix_cache_queries_total": (None, (0, 11, 99)),
    "vllm:gpu_prefix_cache_hits_total": (None, (0, 11, 99)),
}


def _text(v: tuple[int, int, int]) -> str:
    return f"{v[0]}.{v[1]}" + (f".{v[2]}" if v[2] else "")


def version_notes(version: str, exported: set[str]) -> list[str]:
    """A note for each exported name the release `version` cannot export (a bare '0.9' is
    any 0.9.x, so it may be 0.9.2)."""
    major, minor, patch = read_release(version)
    lo = (major, minor, patch or 0)
    hi = (major, minor, patch if patch is not None else 99)
    newer: dict[tuple, list[str]] = {}
    older: dict[tuple, list[str]] = {}
    for name in sorted(exported & RELEASES.keys()):
        first, last = RELEASES[name]
        if first and hi < first:
            newer.setdefault(first, []).append(name)
        elif last and lo > last:
            older.setdefault(last, []).append(name)
    notes = [f"the server exports {' and '.join(names)}, added in vLLM {_text(first)}: it is "
             f"newer than --vllm-version {version}" for first, names in newer.items()]
    notes += [f"the server exports {' and '.join(names)}, removed in vLLM {last[0]}."
              f"{last[1] + 1}: it is older than --vllm-version {version}"
              for last, names in older.items()]
    return notes
