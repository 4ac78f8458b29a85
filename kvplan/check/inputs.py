"""Deployment files -> `Target`s: Kubernetes manifests (multi-document YAML; `kubernetes`),
docker-compose files (`compose`), kvplan plan files (`planfile`), start-up scripts and
Dockerfiles (`scripts`) and `--cmd` command lines.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path

from kvplan.check import compose, kubernetes, scripts
from kvplan.check.base import Declared, FileInfo, InputError, Loc, Target, Token
from kvplan.check.command import find_engine
from kvplan.check.planfile import SloSpec, WorkloadSpec, plan_targets
from kvplan.check.yamlsrc import Doc, Obj, load_docs


@dataclass
class Defaults:
    """Command-line values for what a file does not say."""

    gpu: str | None = None
    gpu_memory: str | None = None
    vllm_version: str | None = None
    workload: str | None = None
    rate: float | None = None


def read_text(path: str) -> tuple[str, str]:
    """(display name, text) of a file, or of stdin for '-'."""
    if path == "-":
        return "<stdin>", sys.stdin.read()
    if not path.strip():  # Path('') is the working directory
        raise InputError(f"a path to check is empty ({path!r}: an unset shell variable?)",
                         hint="pass the YAML files, e.g. deploy/*.yaml, or --cmd")
    p = Path(path)
    try:
        return path, p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("no such file", file=path) from None
    except IsADirectoryError:
        raise InputError("is a directory", file=path,
                         hint="pass the YAML files, e.g. deploy/*.yaml") from None
    except UnicodeDecodeError:
        raise InputError("is not UTF-8 text", file=path) from None
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror}", file=path) from None


def load(paths: list[str], cmd: str | None, defaults: Defaults) -> tuple[list[Target],
                                                                          list[FileInfo]]:
    """All targets in `paths` (and `--cmd`), with a note per file that had none."""
    docs: list[tuple[FileInfo, Doc]] = []
    infos = []
    targets: list[Target] = []
    for path in paths:
        info = FileInfo(path)
        try:
            name, text = read_text(path)
            info.file = name
            if scripts.is_dockerfile(name) or scripts.is_script(name, text):
                kind = "dockerfile" if scripts.is_dockerfile(name) else "script"
                t = (scripts.dockerfile_target if kind == "dockerfile" else
                     scripts.script_target)(name, text)
                info.kinds.append(kind)
                if t is not None:
                    info.targets += 1
                    targets.append(t)
            else:
                helm = load_docs(name, text, helm=path == "-")  # `helm template … | kvplan`
                info.sources = {d.loc_of(d.node).file for d in helm} - {name}
                docs += [(info, d) for d in helm]
        except InputError as e:  # one bad file does not hide the others' findings
            info.error = e
        infos.append(info)
    by_file: dict[int, list[Target]] = {}
    for info, d in docs:
        if info.error or not isinstance(d.data, dict):
            continue
        try:
            if isinstance(d.data.get("services"), dict) and "kind" not in d.data:
                info.kinds.append("compose")
                new = compose.targets(Obj(d, d.node, d.data))
            elif "kvplan" in d.data and "kind" not in d.data:
                info.kinds.append("plan")
                new = plan_targets(d)
            else:
                continue
        except InputError as e:
            info.error = e
            continue
        info.targets += len(new)
        by_file.setdefault(id(info), []).extend(new)
    targets += [t for i in infos if not i.error for t in by_file.get(id(i), [])]
    targets += _kubernetes_targets(docs, infos)
    order = {f: n for n, i in enumerate(infos) for f in (i.file, *sorted(i.sources))}
    targets.sort(key=lambda t: (order.get(t.loc.file, 0), t.loc.line or 0))
    if cmd is not None:
        targets.append(_cmd_target(cmd))
    targets = [b for t in targets for b in _branches(t)]
    _link_groups(targets)
    for t in targets:
        _apply_defaults(t, defaults)
    return targets, infos


def _branches(t: Target) -> list[Target]:
    """A target per engine command in the arms of a script's `if`/`case`: which one runs
    depends on where the script runs, so each is checked."""
    alts = t.command.alternatives
    if not alts:
        return [t]
    out = []
    for n, eng in enumerate([t.command, *alts], 1):
        where = f"branch at line {eng.loc.line}" if eng.loc.line else f"branch {n}"
        name = f"{t.name[:-1]}, {where})" if t.name.endswith(")") else f"{t.name} ({where})"
        pods = [(i, ([e, *e.alternatives])[n - 1]) for i, e in t.pod_commands
                if e is not None and len(e.alternatives) == len(alts)]
        b = replace(t, name=name, command=replace(eng, alternatives=[]),
                    pod_commands=pods if len(pods) == len(t.pod_commands) else [])
        if t.kind in ("script", "command"):
            b.loc = eng.loc
        out.append(b)
    return out


def _link_groups(targets: list[Target]) -> None:
    """The LeaderWorkerSet targets that share a group: the first of the leader's (else the
    first) holds the group's checks, the others name it."""
    groups: dict[int, list[Target]] = {}
    for t in targets:
        if t.group is not None:
            groups.setdefault(id(t.group), []).append(t)
    for ts in groups.values():
        entry = next((t for t in ts if t.role == "leader"), ts[0])
        for t in ts:
            t.group_entry = None if t is entry else entry.name


def _kubernetes_targets(docs: list[tuple[FileInfo, Doc]], infos: list[FileInfo]
                        ) -> list[Target]:
    """Kubernetes targets over every readable file (objects may refer to each other across
    files); a file whose objects are malformed is set aside with its error."""
    while True:
        try:
            return kubernetes.targets([(i, Obj(d, n, x)) for i, d in docs if not i.error
                                       for n, x in kubernetes.objects(d)])
        except InputError as e:
            bad = next((i for i in infos if not i.error and i.holds(e.file)), None)
            if bad is None:
                raise
            bad.error, bad.targets = e, 0


# --- --cmd and defaults ----------------------------------------------------------------------

def _cmd_target(cmd: str) -> Target:
    eng = find_engine([Token("sh"), Token("-c")], [Token(cmd)], {}, script_args=False)
    if eng is None:
        raise InputError(f"--cmd: no vllm serve, SGLang or TGI command in {cmd!r}",
                         hint="e.g. --cmd 'vllm serve meta-llama/Llama-3.1-8B-Instruct "
                              "--max-model-len 32768'")
    return Target(name="--cmd", kind="command", loc=Loc(), command=eng,
                  replicas_source="--cmd (one replica)", declared=Declared())


def _apply_defaults(t: Target, d: Defaults) -> None:
    if not t.gpu and not t.gpu_choices and d.gpu:
        t.gpu, t.gpu_loc = d.gpu, None
    if not t.gpu_memory and d.gpu_memory:
        t.gpu_memory = d.gpu_memory
    if not t.vllm_version and d.vllm_version:
        t.vllm_version, t.version_source = d.vllm_version, "--vllm-version"
    if t.declared.workload is None and (d.workload or d.rate):
        t.declared.workload = WorkloadSpec(preset=d.workload, rate=d.rate)
    if t.declared.slo is None:
        t.declared.slo = SloSpec()
