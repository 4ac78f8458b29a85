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
    passes = raw.get("pass_config")
    if isinstance(passes, dict) and passes.get("fuse_allreduce_rms") is not None:
        fuse = passes["fuse_allreduce_rms"]  # 0.17+: the FlashInfer all-reduce + RMSNorm pass
        if not isinstance(fuse, bool):
            raise BadInput(f"{what}: pass_config.fuse_allreduce_rms must be true or false, "
                           f"got {fuse!r}")
        out["fuse_allreduce_rms"] = fuse
    spec = raw.get("cudagraph_specialize_lora")
    if spec is not None:  # 0.12+: capture each size with and without active LoRA
        if not isinstance(spec, bool):
            raise BadInput(f"{what}: cudagraph_specialize_lora must be true or false, got "
                           f"{spec!r}")
        out["cudagraph_specialize_lora"] = spec
    return out


# `--optimization-level` / -O<n> (0.12+, `config/vllm.py OPTIMIZATION_LEVEL_TO_CONFIG`, read
# in the 0.12-0.33 wheels): O0 no compilation (mode NONE) and no graphs; O1 piecewise graphs
# and no all-reduce + RMSNorm fusion; O2 (the default) and O3 FULL_AND_PIECEWISE with it
OPTIMIZATION_LEVELS: dict[int, dict[str, Any]] = {
    0: {"compilation_mode": 0, "cudagraph_mode": "NONE", "fuse_allreduce_rms": False},
    1: {"cudagraph_mode": "PIECEWISE", "fuse_allreduce_rms": False}, 2: {}, 3: {}}


def optimization_level(value: Any, what: str = "--optimization-level",
                       version: str | None = None) -> dict[str, Any]:
    """The `EngineArgs` fields `-O<n>` sets: 0.12+ optimization levels; before 0.12 `-O` was
    `--compilation-config`, so `-O3` is compilation level 3 there."""
    from kvplan.core.versions import VllmVersion

    level = str(value).strip().upper().lstrip("O")
    if not level.isdigit() or int(level) not in OPTIMIZATION_LEVELS:
        raise BadInput(f"{what} {value!r} is not 0-3", hint="e.g. -O0 (eager, no compile)")
    if version is not None and not VllmVersion.of(version).at_least(0, 12):
        return {"compilation_mode": int(level)}
    return dict(OPTIMIZATION_LEVELS[int(level)])


def _mode(value: Any, what: str) -> int:
    s = str(value).strip().upper()
    if s in COMPILATION_MODES:
        return COMPILATION_MODES[s]
    if s.isdigit() and int(s) in COMPILATION_MODES.values():
        return int(s)
    raise BadInput(f"{what}: compilation mode {value!r} is not 0-3 or a mode name",
                   hint="one of " + ", ".join(COMPILATION_MODES))
