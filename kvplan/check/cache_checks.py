"""`compile-cache-persisted`: vLLM's torch.compile cache lives on a volume that outlives the pod.

vLLM keeps compiled graphs under `VLLM_CACHE_ROOT` (default `$XDG_CACHE_HOME/vllm`, else
`~/.cache/vllm`; `envs.py`). A start without them compiles cold: minutes of start-up, and the
compile runs inside the memory profile (`determine_available_memory` -> `profile_run`), whose
temporaries are charged as activation memory, so a cold start gets a smaller KV cache than a
warm one (vLLM issues 54122, 54383).
"""

from __future__ import annotations

import posixpath
from typing import Any

from kvplan.check.base import PASS, SKIP, WARN, Mount, Target

CID = "compile-cache-persisted"
DEFAULT_HOME = "/root"  # the vllm/vllm-openai images run as root
COLD = ("every new container compiles the model cold (minutes of start-up), and the "
        "compile's temporaries count in vLLM's memory profile, so a cold start gets less KV "
        "cache (vLLM issue 54383: 4.5 % on a 0.28 start)")


def cache_root(p: Any) -> str:
    """Where vLLM writes its compile cache in the container, as `envs.py` resolves it."""
    home = p.env_value("HOME") or DEFAULT_HOME
    root = p.env_value("VLLM_CACHE_ROOT")
    if not root:
        root = posixpath.join(p.env_value("XDG_CACHE_HOME") or posixpath.join(home, ".cache"),
                              "vllm")
    return posixpath.normpath(root.replace("~", home, 1) if root.startswith("~") else root)


def covering(mounts: list[Mount], path: str) -> Mount | None:
    """The innermost mount that holds `path`."""
    inside = [m for m in mounts if path == m.path or path.startswith(m.path.rstrip("/") + "/")]
    return max(inside, key=lambda m: len(m.path)) if inside else None


def check(out: Any, t: Target, p: Any) -> None:
    if p.engine != "vllm":
        out.add(CID, SKIP, "not vLLM: no torch.compile cache to keep")
        return
    if p.values.get("enforce_eager") or p.values.get("compilation_mode") == 0:
        out.add(CID, PASS, "no torch.compile (--enforce-eager or compilation mode 0): "
                "nothing to cache", p.loc_of("enforce_eager" if p.values.get("enforce_eager")
                                             else "compilation_mode"))
        return
    idle = not_compiled(p, out.facts.get("vllm_version"), out.facts.get("engine_v0"))
    if idle:
        out.add(CID, PASS, f"{idle}: nothing to cache", p.cmd.loc)
        return
    off = t.command.env.get("VLLM_DISABLE_COMPILE_CACHE")
    if off is not None and off.value and off.value.strip() not in ("", "0"):
        out.add(CID, WARN, f"VLLM_DISABLE_COMPILE_CACHE={off.value}: {COLD}", off.loc,
                fix="remove VLLM_DISABLE_COMPILE_CACHE and keep the cache on a volume")
        return
    if t.mounts is None:
        out.add(CID, SKIP, "the input does not describe the container's volumes")
        return
    root = cache_root(p)
    m = covering(t.mounts, root)
    fix = (f"mount a PersistentVolumeClaim or host path at {root} (or set VLLM_CACHE_ROOT to "
           "a path on one)")
    if m is None:
        out.add(CID, WARN, f"the vLLM compile cache {root} is not on a volume: {COLD}", t.loc,
                fix=fix)
    elif m.scope == "pod":
        out.add(CID, WARN, f"the vLLM compile cache {root} is on {described(m.kind)}, kept "
                "across container restarts but not for a new pod (rollouts, scale-out, node "
                f"moves): {COLD}", m.loc, fix=fix)
    elif m.scope == "container":
        out.add(CID, WARN, f"the vLLM compile cache {root} is on {described(m.kind)}, emptied "
                f"whenever the container restarts: {COLD}", m.loc, fix=fix)
    else:
        out.add(CID, PASS, f"the vLLM compile cache {root} is on {described(m.kind)} at "
                f"{m.path}", m.loc)


def not_compiled(p: Any, version: str | None, engine_v0: bool | None) -> str:
    """Why this start writes no torch.compile cache ("" when it does). Before 0.7.0 vLLM
    keeps none under VLLM_CACHE_ROOT (`compilation/backends.py` adds `torch_compile_cache`
    in 0.7.0). V1 compiles by default (PIECEWISE; 0.7.x `VllmConfig.__post_init__` only
    `if envs.VLLM_USE_V1`, whose default is "0" to 0.7.3 and "1" from 0.8.0); V0 compiles
    only when asked for with level 3 (`-O3`), its default being no compilation. A 0.8-0.10
    start on V0 (`engine_v0`, found by sizing; else from VLLM_USE_V1=0) likewise."""
    from kvplan.core.versions import VllmVersion

    v = VllmVersion.of(version)
    if not v.at_least(0, 7):
        return f"vLLM {v.text} keeps no torch.compile cache (V0 compiles nothing by default)"
    use_v1 = (p.env_value("VLLM_USE_V1") or "").strip()
    if v.at_least(0, 11) or p.values.get("compilation_mode") == 3:
        return ""
    if v.at_least(0, 8):
        if not engine_v0 and use_v1 != "0":
            return ""
        return (f"this start runs vLLM {v.text}'s V0 engine, which compiles nothing unless "
                "asked for (-O3)")
    if use_v1 == "1":
        return ""
    return f"vLLM {v.text} runs its V0 engine, which compiles nothing unless asked for (-O3)"


def described(kind: str) -> str:
    """'a named volume', 'an emptyDir volume', 'a tmpfs mount', ... for a `Mount.kind`."""
    noun = kind if kind.endswith(("volume", "mount")) else \
        f"{kind} mount" if kind in ("bind", "tmpfs", "npipe") else f"{kind} volume"
    return ("an " if noun[0].lower() in "aeiou" else "a ") + noun
