"""The shape of a catalog entry (docs/catalogs.md), checked for user catalog files.

A user entry with a field of the wrong type is refused naming file, entry and field, before
anything reads it; the tests hold the built-in files to the same table. Unknown keys are
allowed (they carry provenance); the config itself is checked by `core/config_types.py
check_field_types` when it is sized. Plain Python, not pydantic: `kvplan models add` writes
the default user catalog, which every run then loads, and importing pydantic would add about
90 ms to each `kvplan size` (benchmarks/speed.py measures 110 ms in all).
"""

from __future__ import annotations

import math
import re
from typing import Any

from kvplan.errors import BadInput

_STR, _INT, _NUM, _BOOL, _MAP, _STRS = "a string", "an integer", "a number", "true or false", \
    "a mapping", "a list of strings"
# field -> (kind, smallest value, required)
_FIELDS: dict[str, dict[str, tuple[str, float | None, bool]]] = {
    "models": {
        "aliases": (_STRS, None, False), "family": (_STR, None, False),
        "params": (_INT, 0, False), "weights_bytes": (_INT, 1, False),
        "weights_source": (_STR, None, False), "weights_layout": (_MAP, None, False),
        "config": (_MAP, None, True), "quant_config": (_MAP, None, False),
        "sentence_transformers": (_MAP, None, False)},
    "gpus": {
        "name": (_STR, None, False), "aliases": (_STRS, None, False),
        "vendor": (_STR, None, False), "memory_bytes": (_INT, 1, True),
        "marketed_gb": (_NUM, 0, False), "bandwidth_gbps": (_NUM, 0, False),
        "tflops": (_MAP, None, False), "interconnect_gbps": (_NUM, 0, False),
        "nvlink_domain": (_INT, 1, False), "gpus_per_node": (_INT, 1, False),
        "unified_memory": (_BOOL, None, False), "sm_count": (_INT, 0, False),
        "price_per_hour": (_NUM, 0, False), "mig": (_MAP, None, False),
        "mig_slices": (_INT, 1, False), "mig_estimated": (_STRS, None, False),
        "mig_sms": (_MAP, None, False),
        "memory_source": (_STR, None, False)},
}
VENDORS = ("nvidia", "amd")
MIG_PROFILE = r"\d+g\.\d+gb"  # a MIG GPU-instance profile name: 3g.40gb
_MIG_PROFILE = re.compile(MIG_PROFILE)
# NVIDIA's major.minor ("8.9"), or an AMD gfx target ("gfx942")
_CC = re.compile(r"\d+\.\d+|gfx[0-9a-f]+")
SCHEMA_VERSIONS = (1,)  # the catalog layouts this kvplan reads (docs/catalogs.md)


def check_file(data: dict[str, Any], origin: str) -> None:
    """Refuse a catalog file written for a layout this kvplan does not read."""
    v = data.get("schema_version")
    if v is not None and (isinstance(v, bool) or v not in SCHEMA_VERSIONS):
        raise BadInput(f"catalog {origin}: schema_version {v!r} is not one this kvplan reads "
                       f"({', '.join(map(str, SCHEMA_VERSIONS))})",
                       hint="write schema_version: 1 (docs/catalogs.md), or run the kvplan "
                       "that wrote the file")


def _fits(kind: str, v: Any) -> bool:
    if kind == _STR:
        return isinstance(v, str)
    if kind == _BOOL:
        return isinstance(v, bool)
    if kind == _MAP:
        return isinstance(v, dict)
    if kind == _STRS:
        return isinstance(v, list) and all(isinstance(x, str) for x in v)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    return isinstance(v, int) if kind == _INT else math.isfinite(v)


def check_entry(kind: str, key: str, entry: Any, origin: str) -> None:
    """Raise BadInput naming the first field of `entry` that does not fit its kind."""
    if not isinstance(entry, dict):
        raise BadInput(f"{kind} entry {key!r} in {origin} must be a mapping")

    def bad(field: str, what: str) -> BadInput:
        return BadInput(f"{kind} entry {key!r} in {origin}: {field} must be {what}, got "
                        f"{entry.get(field)!r}", hint="docs/catalogs.md describes each field")

    for field, (what, least, required) in _FIELDS[kind].items():
        v = entry.get(field)
        if v is None:
            if required:
                raise bad(field, what)
            continue
        if not _fits(what, v):
            raise bad(field, what)
        if least is not None and v < least:
            raise bad(field, f"{what} >= {least:g}")
    if kind == "gpus":
        if entry.get("vendor", "nvidia") not in VENDORS:
            raise bad("vendor", " or ".join(VENDORS))
        cc = entry.get("compute_capability")
        if cc is not None and (not isinstance(cc, (str, float)) or not _CC.fullmatch(str(cc))):
            raise bad("compute_capability", 'major.minor such as "9.0" (NVIDIA) or a gfx '
                      'target such as "gfx942" (AMD)')
        if cc is not None and str(cc).startswith("gfx") != (entry.get("vendor") == "amd"):
            raise BadInput(f"gpus entry {key!r} in {origin}: compute_capability {cc!r} is "
                           f"{'an AMD target' if str(cc).startswith('gfx') else 'NVIDIA'}'s but "
                           f"vendor is {entry.get('vendor', 'nvidia (the default)')}",
                           hint="set vendor: amd for a gfx target, nvidia for major.minor")
        for fld, kind, example, what in (("mig", _NUM, "3g.40gb", "its GiB"),
                                         ("mig_sms", _INT, "1g.10gb", "its SM count")):
            for prof, v in (entry.get(fld) or {}).items():
                if not (isinstance(prof, str) and _MIG_PROFILE.fullmatch(prof)
                        and _fits(kind, v) and v > 0):
                    raise BadInput(f"gpus entry {key!r} in {origin}: {fld} maps a profile such "
                                   f"as '{example}' to {what}, got {prof!r}: {v!r}",
                                   hint="docs/catalogs.md describes each field")
        for name, tf in (entry.get("tflops") or {}).items():
            if tf is not None and not (_fits(_NUM, tf) and tf >= 0):
                raise BadInput(f"gpus entry {key!r} in {origin}: tflops.{name} must be a "
                               f"number >= 0 or null, got {tf!r}")
