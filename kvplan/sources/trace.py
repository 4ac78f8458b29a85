"""Request traces: JSONL or CSV with prompt/output token counts (and optional arrival time),
as exported by benchmark tools (vLLM `bench serve`, genai-perf, guidellm) and gateways."""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path

from kvplan.errors import BadInput
from kvplan.sources.local import read_text

PROMPT_KEYS = ("prompt_tokens", "input_tokens", "prompt_len", "input_len", "num_prompt_tokens",
               "input_length", "prompt_length", "isl")
OUTPUT_KEYS = ("output_tokens", "completion_tokens", "output_len", "num_output_tokens",
               "output_length", "generated_tokens", "osl", "max_tokens")
TIME_KEYS = ("arrival_time", "timestamp", "time", "t", "start_time")
MAX_SPAN_S = 1e8  # about 3 years: longer is a unit mistake (ns timestamps span 3.6e12 an hour)


@dataclass(frozen=True)
class Trace:
    prompts: list[int]
    outputs: list[int]
    arrivals: list[float] | None  # seconds from the first request, sorted; the rows are
    # sorted with them (prompts[i] and outputs[i] arrive at arrivals[i])
    path: str = ""


def _pick(row: dict, keys: tuple[str, ...]) -> object | None:
    low = {str(k).strip().lower(): v for k, v in row.items()}
    for k in keys:
        if k in low and low[k] not in (None, ""):
            return low[k]
    return None


def read_trace(path: str) -> Trace:
    p = Path(path)
    text = read_text(p, "trace", "kvplan and vLLM's benchmarks")
    if not text.strip():
        raise BadInput(f"trace {path} is empty", hint="it needs one request per line or row")
    rows: list[dict]
    if p.suffix.lower() in (".jsonl", ".json", ".ndjson") or text.lstrip().startswith("{"):
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                raise BadInput(f"trace {path} line {n} is not valid JSON") from None
            if not isinstance(obj, dict):
                raise BadInput(f"trace {path} line {n} is not a JSON object")
            rows.append(obj)
    else:
        rows = list(csv.DictReader(io.StringIO(text)))
    prompts, outputs, times = [], [], []
    for n, row in enumerate(rows, 1):
        pv, ov, tv = _pick(row, PROMPT_KEYS), _pick(row, OUTPUT_KEYS), _pick(row, TIME_KEYS)
        if pv is None or ov is None:
            raise BadInput(f"trace {path} row {n} has no prompt/output token columns",
                           hint="name them prompt_tokens and output_tokens (or input_len / "
                                "output_len, completion_tokens)")
        try:
            pi, oi = int(float(pv)), int(float(ov))
        except (TypeError, ValueError, OverflowError):  # OverflowError: inf
            raise BadInput(f"trace {path} row {n}: token counts must be finite numbers "
                           f"(got prompt {pv!r}, output {ov!r})") from None
        if pi <= 0 or oi <= 0:
            raise BadInput(f"trace {path} row {n}: token counts must be positive "
                           f"(got prompt {pi}, output {oi})")
        prompts.append(pi)
        outputs.append(oi)
        if tv is not None:
            try:
                t = float(tv)
            except (TypeError, ValueError):
                t = math.nan
            if not math.isfinite(t):
                raise BadInput(f"trace {path} row {n}: arrival time must be a finite number, "
                               f"got {tv!r}")
            times.append(t)
    if not prompts:
        raise BadInput(f"trace {path} has no requests")
    arrivals = None
    if len(times) == len(prompts):
        # rows in time order, each keeping its own lengths: merged per-worker logs and rows
        # written at completion are not in arrival order (a stable sort keeps file order
        # among equal times)
        order = sorted(range(len(times)), key=times.__getitem__)
        t0 = times[order[0]]
        arrivals = [times[i] - t0 for i in order]
        prompts = [prompts[i] for i in order]
        outputs = [outputs[i] for i in order]
        if arrivals[-1] > MAX_SPAN_S:
            raise BadInput(f"trace {path}: its arrival times span {arrivals[-1]:.3g} s (over "
                           f"{MAX_SPAN_S / 3.15e7:.0f} years)",
                           hint="arrival times are read as seconds; convert milliseconds or "
                                "nanoseconds first")
    return Trace(prompts, outputs, arrivals, path)
