"""Which keys vLLM's `--compilation-config` and `--speculative-config` JSON objects accept in
each release (`vllm_config_fields.json`, the annotated fields of `CompilationConfig` and
`SpeculativeConfig` read off each wheel by `tools/vllm_config_fields.py`).

vLLM builds both as pydantic dataclasses. `CompilationConfig` forbids extra keys from 0.13
(`config/compilation.py`, `ConfigDict(extra="forbid")`, then the `config` decorator of
`config/utils.py`), `SpeculativeConfig` from 0.16 (the `config` decorator's default; built by
`EngineArgs.create_speculative_config` as `SpeculativeConfig(**dict)`): an unknown key stops
the start with "Unexpected keyword argument". Earlier releases drop it silently. From 0.26
`create_speculative_config` turns dashes in the speculative keys into underscores.
"""

from __future__ import annotations

import difflib
import json
from functools import lru_cache
from pathlib import Path

from kvplan.core.versions import VllmVersion
from kvplan.errors import BadInput

DATA = Path(__file__).with_name("vllm_config_fields.json")
CLASSES = {"compilation": "CompilationConfig", "speculative": "SpeculativeConfig"}
FORBID_FROM = {"compilation": (0, 13), "speculative": (0, 16)}
SPEC_DASHES_FROM = (0, 26)
RENAMED = {"level": "mode"}  # CompilationConfig.level: deprecated 0.11, removed 0.18


@lru_cache(maxsize=1)
def _data() -> dict:
    return json.loads(DATA.read_text(encoding="utf-8"))


def _minor(s: str) -> tuple[int, int]:
    a, b = s.split(".")[:2]
    return int(a), int(b)


def known_fields(kind: str, version: str | None) -> list[str] | None:
    """The fields of the release's config class; None before the first recorded release."""
    data = _data()
    v = VllmVersion.of(version).v[:2]
    if v < _minor(data["releases"][kind][0]):
        return None
    return sorted(n for n, (lo, hi) in data[kind].items() if _minor(lo) <= v <= _minor(hi))


def normalise_speculative(raw: dict, version: str | None) -> dict:
    """The speculative keys as the release reads them (dashes -> underscores from 0.26)."""
    if VllmVersion.of(version).v[:2] < SPEC_DASHES_FROM:
        return raw
    return {str(k).replace("-", "_"): v for k, v in raw.items()}


def check_keys(kind: str, raw: dict, version: str | None, what: str) -> str | None:
    """Refuse keys the release's config class forbids; a note naming the keys a release that
    drops them ignores (None when every key is a field or the release is not recorded)."""
    fields = known_fields(kind, version)
    if fields is None:
        return None
    unknown = [str(k) for k in raw if str(k) not in fields]
    if not unknown:
        return None
    v = VllmVersion.of(version)
    name = unknown[0]
    if v.v[:2] >= FORBID_FROM[kind]:
        close = [RENAMED[name]] if name in RENAMED and RENAMED[name] in fields else \
            difflib.get_close_matches(name, fields, n=2, cutoff=0.6)
        if kind == "speculative" and "-" in name and v.v[:2] < SPEC_DASHES_FROM:
            close = [name.replace("-", "_")]
        raise BadInput(f"{what}: {name!r} is not a {CLASSES[kind]} field in vLLM {v.text} "
                       "(vLLM refuses unknown keys)",
                       hint=f"did you mean {' or '.join(close)}?" if close
                       else "see vLLM's docs for this release's fields")
    return (f"{what}: vLLM {v.text} ignores {', '.join(map(repr, unknown))} (not a "
            f"{CLASSES[kind]} field)")
