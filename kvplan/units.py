"""Parsing and formatting of sizes and token counts."""

from __future__ import annotations

import math
import re
from typing import Any

from kvplan.errors import BadInput

GiB = 1 << 30
MiB = 1 << 20

_BYTE_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "m": 10**6,
    "mb": 10**6,
    "g": 10**9,
    "gb": 10**9,
    "t": 10**12,
    "tb": 10**12,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
    # Kubernetes' binary quantity suffixes (24Gi), as node capacities are written
    "ki": 1 << 10,
    "mi": 1 << 20,
    "gi": 1 << 30,
    "ti": 1 << 40,
}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_bytes(text: str | int | float, *, what: str = "size") -> int:
    """Parse '24GiB', '80GB', '1.5e9', '60G' into bytes.

    Binary units need the 'i' (GiB, MiB, Kubernetes' Gi); 'G'/'GB' are decimal. vLLM's own
    suffix rule for
    `--kv-cache-memory-bytes` (upper-case single letter = binary) is applied by
    `parse_vllm_int`.
    """
    if isinstance(text, (int, float)):
        return int(text)
    m = _SIZE_RE.match(str(text))
    unit = m.group(2).lower() if m else None
    value = float(m.group(1)) * _BYTE_UNITS[unit] if m and unit in _BYTE_UNITS else math.nan
    if not math.isfinite(value):  # unreadable, or beyond any float ('1e400')
        raise BadInput(f"cannot read {what} {text!r}", hint="use e.g. 24GiB, 80GB or a byte count")
    return int(value)


_VLLM_SUFFIX = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
                "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
# the first release whose parser reads these flags with `human_readable_int` (32k, 32K);
# before it `type=int`: 0.6.0-0.8.3 `add_argument('--max-model-len', type=int)`, 0.8.4 the
# first with human_readable_int; `get_kwargs`' large-integer set gains max_num_batched_tokens
# in 0.9.1 (engine/arg_utils.py). --kv-cache-memory-bytes has it from its first release.
HUMAN_READABLE_FROM = {"--max-model-len": (0, 8, 4), "--max-num-batched-tokens": (0, 9, 1)}
_EXAMPLES = {"--kv-cache-memory-bytes": "a byte count such as 21474836480, 20G (= 20 GiB) or "
                                        "20g (= 20,000,000,000)"}


def parse_vllm_int(text: str | int, *, what: str, version: str | None = None) -> int:
    """Parse an integer the way vLLM's argument parser does.

    Lower-case suffixes are decimal (32k = 32,000), upper-case binary (32K = 32,768), decimals
    only with decimal suffixes (25.6k); vllm/utils/argparse_utils.py `human_readable_int`.
    With `version`, a flag that release still parses as a plain int refuses suffixes
    (`HUMAN_READABLE_FROM`); a minor alone (0.8) stands for its newest patch, as `check`'s
    flag records read it.
    """
    if isinstance(text, int):
        return text
    s = str(text).strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgtKMGT]?)", s)
    number, suffix = (m.group(1), m.group(2)) if m else ("", "")
    if suffix.isupper() and "." in number:  # `human_readable_int`'s own words
        raise BadInput(f"cannot read {what} {text!r}: decimals are not allowed with binary "
                       f"suffixes like {suffix}", hint=f"did you mean {number}{suffix.lower()}?")
    if not m or "." in number and not suffix:
        raise BadInput(f"cannot read {what} {text!r}", hint="use " + _EXAMPLES.get(
            what, "an integer such as 32768, 32K (=32768) or 32k (=32000)"))
    # exact integers without a suffix or with a binary one, a float product with a decimal
    # one (`human_readable_int`: int(value), int(number) * mult, int(float(number) * mult))
    value = int(float(number) * _VLLM_SUFFIX[suffix]) if suffix.islower() else \
        int(number) * _VLLM_SUFFIX.get(suffix, 1)
    first = HUMAN_READABLE_FROM.get(what)
    release = tuple(int(x) for x in re.findall(r"\d+", version or "")[:3])
    if suffix and first and release and release < first[:len(release)]:
        raise BadInput(f"vLLM {version} reads {what} as a plain integer ({text!r}: 'invalid "
                       "int value')", hint=f"write {value}; vLLM reads suffixes there from "
                       + ".".join(map(str, first)))
    return value


def parse_names(text: str | None) -> tuple[str, ...]:
    """A vLLM nargs="+" list of names (`--lora-target-modules`, `--kv-cache-dtype-skip-layers`),
    separated by spaces or commas; None or "" is the empty list."""
    return tuple((text or "").replace(",", " ").split())


def parse_int_list(text: str, *, what: str) -> tuple[int, ...]:
    """A list of positive integers, separated by commas or spaces ("1,2,4,8" or "1 2 4 8")."""
    parts = [x for x in re.split(r"[\s,]+", str(text).strip()) if x]
    if not parts or not all(x.isdigit() and int(x) > 0 for x in parts):
        raise BadInput(f"cannot read {what} {text!r}",
                       hint="use positive integers separated by commas, e.g. 1,2,4,8,16")
    return tuple(int(x) for x in parts)


def parse_mm_limits(text: str, *, what: str = "--limit-mm-per-prompt"
                    ) -> dict[str, int] | None:
    """vLLM's `--limit-mm-per-prompt`: JSON (`{"image": 2, "video": 0}`, or a modality's
    `{"count": N, ...}` as 0.10+ accepts) or 0.6's `image=2,video=0`; `{}`, vLLM's default,
    is None (no limit given)."""
    import json

    try:
        raw = json.loads(text)
        if raw == {}:
            return None
    except ValueError:
        raw = dict(kv.split("=", 1) for kv in str(text).split(",") if "=" in kv)
    if not isinstance(raw, dict) or not raw:
        raise BadInput(f"cannot read {what} {text!r}", hint="e.g. '{\"image\": 0, \"video\": 0}'")
    out = {}
    for k, v in raw.items():
        if isinstance(v, dict):  # 0.11.1+ dummy options: count defaults to 999
            extra = set(v) - {"count", *DUMMY_OPTIONS.get(str(k).strip(), ())}
            if extra and str(k).strip() in DUMMY_OPTIONS:  # `extra="forbid"` (vLLM 0.11.1+)
                raise BadInput(f"{what}: {k} takes no {', '.join(sorted(map(str, extra)))}",
                               hint=f"{k}'s options are count, "
                               + ", ".join(DUMMY_OPTIONS[str(k).strip()]))
            v = v.get("count", 999)
        try:
            out[str(k).strip()] = int(str(v).strip())
        except ValueError:
            raise BadInput(f"{what}: {k} = {v!r} is not a count",
                           hint="give each modality an integer") from None
        if out[str(k).strip()] < 0:  # vLLM 0.33 `BaseDummyOptions.count`: ge=0
            raise BadInput(f"{what}: {k} = {v!r} is negative", hint="0 turns a modality off")
    return out


MM_SIZE_KEYS = ("width", "height", "num_frames")
# each modality's dummy options besides count (vLLM 0.11.1+ `ImageDummyOptions`,
# `VideoDummyOptions`, `AudioDummyOptions`; other modalities take count alone, extras allowed)
DUMMY_OPTIONS = {"image": ("width", "height"), "video": ("num_frames", "width", "height"),
                 "audio": ("length",)}


def parse_mm_sizes(text: str) -> dict[str, dict[str, int]]:
    """The dummy-item sizes of a `--limit-mm-per-prompt` JSON by modality (0.11.1+
    `ImageDummyOptions` / `VideoDummyOptions`: width, height, num_frames, positive ints);
    the other options (an audio's length) are left out."""
    import json

    try:
        raw = json.loads(text)
    except ValueError:
        return {}
    out: dict[str, dict[str, int]] = {}
    for k, v in (raw.items() if isinstance(raw, dict) else []):
        if not isinstance(v, dict):
            continue
        for o in MM_SIZE_KEYS:
            x = v.get(o)
            if x is None:
                continue
            if isinstance(x, bool) or not isinstance(x, int) or x < 1:
                raise BadInput(f"--limit-mm-per-prompt: {k}.{o} = {x!r} is not a positive "
                               "integer", hint="e.g. '{\"video\": {\"count\": 1, "
                               "\"num_frames\": 8}}'")
            out.setdefault(str(k).strip(), {})[o] = x
    return out


def mm_size_options(text: str) -> list[str]:
    """The dummy-item size options of a `--limit-mm-per-prompt` JSON (0.11.1+: a modality's
    width, height, num_frames, length besides its count), as "video.width" names."""
    import json

    try:
        raw = json.loads(text)
    except ValueError:
        return []
    return [f"{k}.{o}" for k, v in (raw.items() if isinstance(raw, dict) else [])
            if isinstance(v, dict) for o in v if o != "count"]


def parse_video_io(text: str, *, what: str = "--media-io-kwargs") -> dict[str, Any]:
    """The "video" entry of vLLM's `--media-io-kwargs` JSON (empty when it has none)."""
    import json

    try:
        raw = json.loads(text)
    except ValueError:
        raw = None
    if not isinstance(raw, dict) or not isinstance(raw.get("video", {}), dict):
        raise BadInput(f"cannot read {what} {text!r}: vLLM takes a JSON object of objects",
                       hint="e.g. '{\"video\": {\"video_backend\": \"pynvvideocodec\"}}'")
    return raw.get("video") or {}


def parse_json_object(text: Any, *, what: str, hint: str) -> dict[str, Any]:
    """A flag's JSON object (a mapping is taken as given); `hint` shows a good one."""
    if isinstance(text, dict):
        return text
    import json

    try:
        raw = json.loads(str(text))
    except ValueError:
        raise BadInput(f"{what} {text!r} is not JSON", hint=hint) from None
    if not isinstance(raw, dict):
        raise BadInput(f"{what} must be a JSON object, got {text!r}")
    return raw


def cdiv(a: int, b: int) -> int:
    """Ceiling division for non-negative ints."""
    return -(-a // b)


def gib(n: float) -> float:
    return n / GiB


def fmt_bytes(n: float) -> str:
    """Human size in binary units, 2 decimals (as vLLM prints GiB)."""
    if n is None:
        return "-"
    a = abs(n)
    for unit, size in (("TiB", 1 << 40), ("GiB", GiB), ("MiB", MiB), ("KiB", 1 << 10)):
        if a >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


def fmt_int(n: int | float) -> str:
    return f"{int(n):,}"


def fmt_rate(x: float) -> str:
    """A request rate: three significant digits, whole numbers from 1,000 (1,234 not 1.23e+03)."""
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3g}"


def fmt_tokens(n: int) -> str:
    """Compact token count for tables: 131072 -> '128k', 4000 -> '4,000'."""
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024}k"
    return f"{n:,}"


def ceil_int(x: float) -> int:
    return int(math.ceil(x))
