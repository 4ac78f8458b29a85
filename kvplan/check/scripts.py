"""Start-up scripts and Dockerfiles -> `Target`s.

A shell script (`*.sh`, `*.bash`, or any file starting with `#!`) is read as `sh -c` reads it,
with the variables it assigns beforehand (`command.shell_script`, as for a container's
`sh -c` script). A Dockerfile's final stage is read as Docker runs it:
ENTRYPOINT (exec or shell form) with CMD as its arguments, or the base image's entrypoint when
the file sets none (`vllm/vllm-openai` runs the OpenAI server), and the image tag gives the
vLLM release.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import PurePath

from kvplan.check.base import Declared, InputError, Loc, Target, Token
from kvplan.check.command import EnvVar, find_engine, set_version


def is_script(name: str, text: str) -> bool:
    return name.endswith((".sh", ".bash")) or text.startswith("#!")


def is_dockerfile(name: str) -> bool:
    base = PurePath(name).name.lower()
    return base == "dockerfile" or base.startswith("dockerfile.") or base.endswith(
        ".dockerfile") or base == "containerfile"


def script_target(name: str, text: str) -> Target | None:
    """The engine command a shell script runs, or None."""
    script = Token(text, Loc(name, 1, 1), raw=text)
    eng = find_engine([Token("sh"), Token("-c")], [script], {}, k8s_vars=False,
                      script_args=False)  # its arguments come when it runs
    if eng is None:
        return None
    return Target(name=PurePath(name).name, kind="script", loc=eng.loc, command=eng,
                  replicas_source="script (one replica)", declared=Declared())


def _instructions(text: str) -> list[tuple[int, str, str]]:
    """(line, INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[int, str, str]] = []
    buf, start = "", 0
    for n, line in enumerate(text.splitlines(), 1):
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if not buf:
            start = n
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        buf += line
        word, _, rest = buf.strip().partition(" ")
        out.append((start, word.upper(), rest.strip()))
        buf = ""
    return out


def _argv(rest: str, loc: Loc) -> list[Token]:
    """Exec form `["a", "b"]` as it is; shell form as `/bin/sh -c "..."`."""
    if rest.startswith("["):
        try:
            words = json.loads(rest)
        except json.JSONDecodeError:
            raise InputError("cannot read the exec-form list", file=loc.file, line=loc.line,
                             hint='write it as JSON, e.g. ["vllm", "serve", "MODEL"]') from None
        if not isinstance(words, list):
            raise InputError("the exec form must be a JSON list", file=loc.file, line=loc.line)
        return [Token(str(w), loc) for w in words]
    return [Token("/bin/sh", loc), Token("-c", loc), Token(rest, loc, raw=rest)]


_DF_VAR = re.compile(r"\\\$|\$\{([A-Za-z_]\w*)(?::([-+])([^}]*))?\}|\$([A-Za-z_]\w*)")
_DF_ARG = re.compile(r"([A-Za-z_]\w*)(?:=(\"[^\"]*\"|'[^']*'|\S*))?")


def _substitute(text: str, values: dict[str, str], whole: bool = True) -> str:
    """Docker's environment replacement in FROM, ARG and ENV: `$X`, `${X}`, `${X:-word}`,
    `${X:+word}` (`\\$` is a literal `$`). `whole`: `values` holds every variable in scope, so
    another is unset and empty (a FROM line sees the global ARGs only); else a variable it
    lacks may come from the base image's ENV and stays as written."""
    def sub(m: re.Match) -> str:
        if m.group(0) == "\\$":
            return "$"
        name = m.group(1) or m.group(4)
        if name not in values and not whole:
            return m.group(0)
        v = values.get(name, "")
        if m.group(2) == "-":
            return v or m.group(3)
        if m.group(2) == "+":
            return m.group(3) if v else ""
        return v

    return _DF_VAR.sub(sub, text)


def _args(rest: str, values: dict[str, str], outer: dict[str, str] | None = None
          ) -> dict[str, str]:
    """`ARG NAME[=default] ...`: each name's default, or the value `outer` gives it (a global
    ARG re-declared without a value inside a stage takes the global default). `outer` None:
    the global scope, where `values` holds every variable (`_substitute`'s `whole`)."""
    out = {}
    for name, default in _DF_ARG.findall(rest):
        if default:
            out[name] = _substitute(default.strip("\"'"), values, whole=outer is None)
        elif outer and name in outer:
            out[name] = outer[name]
    return out


@dataclass
class _Stage:
    """A build stage as the image it produces runs: its base, ENTRYPOINT, CMD and ENV."""

    image: str | None = None
    entry: list[Token] | None = None
    cmd: list[Token] | None = None
    env: dict[str, EnvVar] = field(default_factory=dict)
    via: str = ""  # the ARG defaults the FROM line took, for the version's source


def _final_stage(name: str, text: str) -> _Stage:
    """The final stage of a Dockerfile. An ARG before the first FROM is in scope for the FROM
    lines, with its default (no `--build-arg` is known here); a stage built FROM an earlier
    one (`FROM base`) starts from that stage's image, ENTRYPOINT, CMD and ENV."""
    globals_: dict[str, str] = {}
    stages: dict[str, _Stage] = {}
    st: _Stage | None = None
    args: dict[str, str] = {}
    for line, ins, rest in _instructions(text):
        loc = Loc(name, line, 1)
        if ins == "ARG":
            if st is None:
                globals_.update(_args(rest, globals_))
            else:
                args.update(_args(rest, {**args, **_env_values(st)}, globals_))
        elif ins == "FROM":
            words = [w for w in _substitute(rest, globals_).split() if not w.startswith("--")]
            base = words[0] if words else None
            used = [m.group(1) or m.group(4) for m in _DF_VAR.finditer(rest)
                    if (m.group(1) or m.group(4)) in globals_]
            parent = stages.get((base or "").lower())
            st = _Stage(parent.image, parent.entry, parent.cmd, dict(parent.env), parent.via) \
                if parent else _Stage(base, via=", ".join(
                    f"ARG {n}'s default {globals_[n]}" for n in dict.fromkeys(used)))
            args = {}
            if len(words) >= 3 and words[1].lower() == "as":
                stages[words[2].lower()] = st
        elif st is None:
            continue
        elif ins == "ENTRYPOINT":
            st.entry, st.cmd = _argv(rest, loc), None  # Docker resets CMD with a new ENTRYPOINT
        elif ins == "CMD":
            st.cmd = _argv(rest, loc)
        elif ins == "ENV":
            values = {**args, **_env_values(st)}
            pairs = re.findall(r"([A-Za-z_]\w*)=(\"[^\"]*\"|'[^']*'|\S+)", rest)
            if not pairs and " " in rest:
                k, v = rest.split(" ", 1)
                pairs = [(k, v)]
            for k, v in pairs:
                st.env[k] = EnvVar(v.strip("'") if v.startswith("'") else
                                   _substitute(v.strip('"'), values, whole=False), loc)
    return st or _Stage()


def _env_values(st: _Stage) -> dict[str, str]:
    return {k: v.value for k, v in st.env.items() if v.value is not None}


def dockerfile_target(name: str, text: str) -> Target | None:
    """The engine command the final stage of a Dockerfile runs, or None."""
    st = _final_stage(name, text)
    eng = find_engine(st.entry or [], st.cmd or [], st.env, image=st.image, k8s_vars=False)
    if eng is None:
        return None
    t = Target(name=PurePath(name).name, kind="dockerfile", loc=eng.loc, command=eng,
               replicas_source="Dockerfile (one replica)", declared=Declared())
    set_version(t, st.image, via=st.via)
    return t
