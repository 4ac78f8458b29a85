"""`--pooler-config` (0.11+; `--override-pooler-config` in 0.6-0.11.x) as each vLLM release
reads it into `PoolerConfig` (`EngineArgs.add_cli_args` builds the argparse type); what the
pooling type then does is `core/pooling.py`'s.

* Not a JSON object: refused by the argparse type in every release (0.6-0.8
  `PoolerConfig.from_json`, 0.9.0-0.9.1 `get_kwargs`'s `dataclass_init`, 0.9.2+
  `parse_dataclass`), so vLLM exits before it starts.
* Keys: a plain dataclass built as `PoolerConfig(**json)` to 0.9.1 (an unknown key is a
  TypeError: refused); a pydantic dataclass validated by `TypeAdapter(...).validate_json` from
  0.9.2, which drops unknown keys silently until the `config` decorator forbids them (0.16+,
  `ConfigDict(extra="forbid")`: refused). The fields of each minor release are read off the
  wheels into `vllm_config_fields.json` (`tools/vllm_config_fields.py`).
* The pooling type: one `pooling_type` to 0.13 (LAST, ALL, CLS, STEP, MEAN, matched exactly:
  a `PoolingTypeStr` Literal from 0.12; before, `PoolingType[name]` when the model's pooler is
  built, so "mean" stops the start at load). 0.14 splits it into `seq_pooling_type` (CLS,
  LAST, MEAN) and `tok_pooling_type` (ALL, STEP); `pooling_type` is still read (not
  deprecated in 0.14-0.33) and fills the one its value belongs to, and giving it beside
  either is refused (`PoolerConfig.__post_init__`: "Cannot set both"). So 0.12 / 0.13 read
  `{"seq_pooling_type": "MEAN"}` as no type at all (LAST pooling for most models), and
  `pooling_type` works in every release.
"""

from __future__ import annotations

import difflib
import json

from kvplan.core.pooling import POOLING_TYPES, SEQ_TYPES, TOK_TYPES, PoolerRead
from kvplan.core.versions import VllmVersion
from kvplan.errors import BadInput

EXAMPLE = '--pooler-config \'{"pooling_type": "MEAN"}\''


def _fields(version: VllmVersion) -> list[str]:
    from kvplan.engines.vllm_config_keys import known_fields

    return known_fields("pooler", version.text) or []


def read(text: str | None, version: VllmVersion | str | None, *,
         what: str = "--pooler-config") -> PoolerRead | None:
    """`text` as `version` reads it (None when not given); BadInput for a value that stops
    that release's start, with the fix as its hint."""
    if text is None:
        return None
    version = version if isinstance(version, VllmVersion) else VllmVersion.of(version)
    try:
        raw = json.loads(text)
    except ValueError:
        raw = None
    if not isinstance(raw, dict):
        raise BadInput(f"{what} {text!r} is not a JSON object, which vLLM's argument parser "
                       "refuses", hint=f"write valid JSON (quoted keys and strings), e.g. "
                       f"{EXAMPLE}", flag="pooler_config")
    fields = _fields(version)
    unknown = tuple(str(k) for k in raw if str(k) not in fields)
    if unknown and (version.at_least(0, 16) or not version.at_least(0, 9, 2)):
        name = unknown[0]
        close = difflib.get_close_matches(name, fields, n=2, cutoff=0.8)
        why = ("its PoolerConfig forbids unknown keys" if version.at_least(0, 16) else
               "its PoolerConfig(**json) takes no such argument")
        raise BadInput(f"{what} key {name!r} is not a PoolerConfig field in vLLM "
                       f"{version.text} ({why})",
                       hint="use pooling_type (seq_pooling_type arrived in 0.14)"
                       if name in ("seq_pooling_type", "tok_pooling_type") else
                       f"did you mean {' or '.join(close)}?" if close else
                       f"remove {name!r} (the release's keys: {', '.join(fields)})",
                       flag="pooler_config")
    when = "" if version.at_least(0, 12) else ", when it builds the model's pooler"

    def value(key: str, allowed: tuple[str, ...]) -> str | None:
        v = raw.get(key)
        if v is None or key in unknown:
            return None
        if not isinstance(v, str) or v not in allowed:
            up = str(v).upper() if isinstance(v, str) else ""
            raise BadInput(f"{what} {key} {v!r} is not one of vLLM {version.text}'s "
                           f"{', '.join(allowed)}, which it matches exactly{when}",
                           hint=f'write "{up}"' if up in allowed else
                           f"use one of {', '.join(allowed)}", flag="pooler_config")
        return v

    pt = value("pooling_type", POOLING_TYPES)
    if not version.at_least(0, 14):
        return PoolerRead(seq=pt, ignored=unknown)
    seq, tok = value("seq_pooling_type", SEQ_TYPES), value("tok_pooling_type", TOK_TYPES)
    if pt is not None:  # `PoolerConfig.__post_init__`
        if seq is not None or tok is not None:
            other = "seq_pooling_type" if seq is not None else "tok_pooling_type"
            raise BadInput(f"{what} sets both pooling_type and {other}, which vLLM "
                           f"{version.text} refuses (\"Cannot set both\")",
                           hint=f"keep one of them, e.g. {EXAMPLE}", flag="pooler_config")
        seq, tok = (pt, None) if pt in SEQ_TYPES else (None, pt)
    return PoolerRead(seq=seq, tok=tok, ignored=unknown)


def ignored_note(pooler: PoolerRead | None, version: VllmVersion | str | None, *,
                 what: str = "--pooler-config") -> str | None:
    """What a release that drops unknown keys (0.9.2-0.15) leaves out; None when nothing."""
    if pooler is None or not pooler.ignored:
        return None
    version = version if isinstance(version, VllmVersion) else VllmVersion.of(version)
    keys = ", ".join(map(repr, pooler.ignored))
    typed = any(k in ("seq_pooling_type", "tok_pooling_type") for k in pooler.ignored)
    return (f"vLLM {version.text} ignores {what} {keys} (not a PoolerConfig field; its "
            "pydantic dataclass drops unknown keys)" + (
                (", so the model's default pooling type applies" if version.at_least(0, 10, 1)
                 else ", so it reads no pooling type") + ": use pooling_type before 0.14"
                if typed else ""))


def renamed(text: str, pooler: PoolerRead | None) -> str | None:
    """The JSON a release before 0.14 reads as meant: `seq_pooling_type` (else
    `tok_pooling_type`) given as `pooling_type`, the other ignored keys left out; None when no
    pooling key was ignored."""
    if pooler is None:
        return None
    raw = json.loads(text)
    key = next((k for k in ("seq_pooling_type", "tok_pooling_type")
                if k in pooler.ignored and raw.get(k) is not None), None)
    if key is None or raw.get("pooling_type") is not None:
        return None
    out = {("pooling_type" if k == key else k): v for k, v in raw.items()
           if k == key or k not in pooler.ignored}
    return json.dumps(out)
