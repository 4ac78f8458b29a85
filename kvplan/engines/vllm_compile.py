"""vLLM's `--compilation-config` (`-cc`): the parts that change memory, as `EngineArgs` fields.

vLLM (`config/compilation.py CompilationConfig`) takes a JSON object; kvplan reads its CUDA-graph
mode, its compilation mode (`mode`, formerly `level`) and its capture sizes. The rest (passes,
backends, custom ops) does not change the memory budget kvplan models.
"""

from __future__ import annotations

from typing import Any

from kvplan.core.memory import CUDAGRAPH_MODES
from kvplan.errors import BadInput
from kvplan.units import parse_json_object

# `CompilationMode`: 0 NONE, 1 STOCK_TORCH_COMPILE, 2 DYNAMO_TRACE_ONCE, 3 VLLM_COMPILE
COMPILATION_MODES = {"NONE": 0, "STOCK_TORCH_COMPILE": 1, "DYNAMO_TRACE_ONCE": 2,
                     "VLLM_COMPILE": 3}


def parse_compilation_config(text: str, *, what: str = "--compilation-config",
                             version: str | None = None,
                             notes: list[str] | None = None) -> dict[str, Any]:
    """The `EngineArgs` fields a `--compilation-config` JSON sets (a bare integer is the
    compilation mode, as vLLM accepts `-O3`). With `version`, keys the release's
    `CompilationConfig` lacks are refused (0.13+) or noted in `notes` as ignored."""
    s = str(text).strip()
    if s.isdigit():
        return {"compilation_mode": _mode(s, what)}
    raw = parse_json_object(s, what=what, hint='e.g. \'{"cudagraph_mode": "FULL_DECODE_ONLY"}\'')
    if version is not None:
        from kvplan.engines.vllm_config_keys import check_keys

        note = check_keys("compilation", raw, version, what)
        if note and notes is not None:
            notes.append(note)
    out: dict[str, Any] = {}
    if raw.get("cudagraph_mode") is not None:
        cg = str(raw["cudagraph_mode"]).strip().upper()
        if cg not in CUDAGRAPH_MODES:
            raise BadInput(f"{what}: cudagraph_mode {raw['cudagraph_mode']!r} is not a vLLM "
                           "CUDA-graph mode", hint="one of " + ", ".join(CUDAGRAPH_MODES))
        out["cudagraph_mode"] = cg
    level = raw.get("mode", raw.get("level"))
    if level is not None:
        out["compilation_mode"] = _mode(level, what)
    if raw.get("cudagraph_capture_sizes") is not None:
        sizes = raw["cudagraph_capture_sizes"]
        if not isinstance(sizes, list) or not all(isinstance(x, int) and x > 0 for x in sizes):
            raise BadInput(f"{what}: cudagraph_capture_sizes must be a list of positive "
                           "integers")
        out["cudagraph_capture_sizes"] = tuple(sizes)
    if raw.get("max_cudagraph_capture_size") is not None:
        size = raw["max_cudagraph_capture_size"]
        if isinstance(size, bool) or not (isinstance(size, int) or str(size).strip().isdigit()):
            raise BadInput(f"{what}: max_cudagraph_capture_size must be an integer, got "
                           f"{size!r}")
        out["max_cudagraph_capture_size"] = int(size)
    spec = raw.get("cudagraph_specialize_lora")
    if spec is not None:  # 0.12+: capture each size with and without active LoRA
        if not isinstance(spec, bool):
            raise BadInput(f"{what}: cudagraph_specialize_lora must be true or false, got "
                           f"{spec!r}")
        out["cudagraph_specialize_lora"] = spec
    return out


def _mode(value: Any, what: str) -> int:
    s = str(value).strip().upper()
    if s in COMPILATION_MODES:
        return COMPILATION_MODES[s]
    if s.isdigit() and int(s) in COMPILATION_MODES.values():
        return int(s)
    raise BadInput(f"{what}: compilation mode {value!r} is not 0-3 or a mode name",
                   hint="one of " + ", ".join(COMPILATION_MODES))
