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
    eng = find_engine([Token("sh"), Token("-c")], [script], {}, k8s_vars=False)
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


def dockerfile_target(name: str, text: str) -> Target | None:
    """The engine command the final stage of a Dockerfile runs, or None."""
    image, entry, cmd, env = None, None, None, {}
    for line, ins, rest in _instructions(text):
        loc = Loc(name, line, 1)
        if ins == "FROM":
            image = next((w for w in rest.split() if not w.startswith("--")), None)
            entry, cmd, env = None, None, {}  # a new stage starts afresh
        elif ins == "ENTRYPOINT":
            entry, cmd = _argv(rest, loc), None  # Docker resets CMD with a new ENTRYPOINT
        elif ins == "CMD":
            cmd = _argv(rest, loc)
        elif ins == "ENV":
            pairs = re.findall(r"([A-Za-z_]\w*)=(\"[^\"]*\"|'[^']*'|\S+)", rest)
            if not pairs and " " in rest:
                k, v = rest.split(" ", 1)
                pairs = [(k, v)]
            for k, v in pairs:
                env[k] = EnvVar(v.strip("\"'"), loc)
    eng = find_engine(entry or [], cmd or [], env, image=image, k8s_vars=False)
    if eng is None:
        return None
    t = Target(name=PurePath(name).name, kind="dockerfile", loc=eng.loc, command=eng,
               replicas_source="Dockerfile (one replica)", declared=Declared())
    set_version(t, image)
    return t
