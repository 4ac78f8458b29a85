"""Find the engine command in what a container runs, and split it into flags.

Recognised: `vllm serve MODEL …`, `python -m vllm.entrypoints.openai.api_server --model …`,
`python -m sglang.launch_server …`, `text-generation-launcher …`, KServe's
`huggingfaceserver` (vLLM backend), and images whose entrypoint is one of these
(`vllm/vllm-openai`, `ghcr.io/huggingface/text-generation-inference`, `kserve/huggingfaceserver`)
when only arguments are given. Shell wrappers (`sh -c "…"`) are split into simple commands;
leading `VAR=value` words and launchers (`exec`, `env`, `dumb-init --`, `numactl …`, `uv run`;
`launchers.py`) are stripped. Every token keeps its file and line.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field, replace
from typing import Any

from kvplan.check.base import InputError, Loc, Target, Token
from kvplan.check.launchers import LAUNCHERS, unwrap
from kvplan.check.shellwords import (
    EXP,
    LIT,
    QEXP,
    QLIT,
    ShellSyntaxError,
    Word,
    after_eq,
    expand,
    lex,
)
from kvplan.core.versions import beyond_latest, read_release
from kvplan.errors import BadInput

SHELLS = {"sh", "bash", "dash", "zsh", "ash", "ksh"}
_K8S_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


@dataclass
class EnvVar:
    value: str | None  # None: from a secret, config map or field reference
    loc: Loc
    why: str | None = None  # why the value is not known, when not from a secret or config map
    lws: bool = False  # set by the LeaderWorkerSet controller (LWS_WORKER_INDEX, ...)


@dataclass
class EngineCommand:
    """An engine invocation: which engine, its argument tokens, and its environment."""

    engine: str  # vllm | sglang | tgi
    form: str  # vllm-serve | api-server | image | sglang | tgi | kserve
    args: list[Token]
    loc: Loc
    env: dict[str, EnvVar] = field(default_factory=dict)
    unresolved: list[Token] = field(default_factory=list)  # args with $(VAR) left in them
    why: dict[str, str] = field(default_factory=dict)  # variable -> why it is unknown
    # an unresolved argument -> the variables it needs (empty: computed as the script runs)
    refs: dict[str, list[str]] = field(default_factory=dict)
    # variables the LeaderWorkerSet controller sets, and the script's computed from them only
    lws: set[str] = field(default_factory=set)
    # engine commands in the other arms of the same `if`/`case` of a shell script: one of
    # them runs, which one depends on the pod (each is checked as its own target)
    alternatives: list[EngineCommand] = field(default_factory=list)
    # (argument, variables) for arguments a script gave from `${X:-default}` with X set
    # nowhere kvplan reads: checked with the default, which the environment may override
    defaulted: list[tuple[Token, list[str]]] = field(default_factory=list)
    # variable -> the unknown ones whose default gave its value, for the script's exported
    # variables (`export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}"`)
    env_defaulted: dict[str, list[str]] = field(default_factory=dict)
    # the words of a program kvplan does not know that runs the engine command (`my-init --`)
    launcher: list[Token] = field(default_factory=list)

    def needs(self, tok: Token) -> list[str]:
        """The variables an unresolved argument needs ([] when computed as the script runs)."""
        if tok.text in self.refs:
            return self.refs[tok.text]
        return [m.group(1) or m.group(2) or m.group(3) for m in _REF.finditer(tok.text)]

    def from_lws(self, tok: Token) -> bool:
        """Whether an unresolved argument needs only what the LeaderWorkerSet controller sets
        (the pod's LWS_WORKER_INDEX, the leader's address), directly or through the script."""
        names = self.needs(tok)
        return bool(names) and all(n in self.lws for n in names)


_REF = re.compile(r"\$\(([A-Za-z_][\w.-]*)\)|\$\{([A-Za-z_]\w*)[^}]*\}|\$([A-Za-z_]\w*)")


def expand_k8s(tok: Token, env: dict[str, EnvVar]) -> tuple[Token, bool]:
    """Kubernetes `$(VAR)` expansion of command/args from the container's env (`$$` escapes;
    an undefined or secret-sourced name stays as written and is reported unresolved)."""
    ok = True

    def sub(m: re.Match) -> str:
        nonlocal ok
        if m.group(0) == "$$":
            return "$"
        v = env.get(m.group(1))
        if v is None or v.value is None:
            ok = False
            return m.group(0)
        return v.value

    text = _K8S_VAR.sub(sub, tok.text)
    return (Token(text, tok.loc, tok.raw) if text != tok.text else tok), ok


def _locate(raw: str, base: Loc, words: list[str], alts: list[str] | None = None
            ) -> list[Loc]:
    """Locations of successive words inside a scalar's source text (`alts`: what to look for
    when a word is not found as written, e.g. without its quotes)."""
    out, cur, last = [], 0, base
    for n, w in enumerate(words):
        pos = raw.find(w, cur) if w else -1
        if pos < 0 and alts and alts[n]:
            w = alts[n]
            pos = raw.find(w, cur)
        if pos < 0 or base.line is None:
            out.append(last)
            continue
        line = base.line + raw.count("\n", 0, pos)
        nl = raw.rfind("\n", 0, pos)
        col = pos - nl if nl >= 0 else (base.col or 1) + pos
        last = Loc(base.file, line, col)
        out.append(last)
        cur = pos + len(w)
    return out


def shell_commands(script: Token) -> list[tuple[str, list[Token]]]:
    """Simple commands of a shell script (`;`, `&&`, `||`, `|`, `&`, newlines), each a list of
    words (`shellwords.Word`, with their quoting) with the separators before it; comments,
    redirections and here-documents dropped."""
    try:
        items = lex(script.text)
    except ShellSyntaxError as e:
        raise InputError(f"cannot split the shell command: {e}", file=script.loc.file,
                         line=script.loc.line) from None
    locs = _locate(script.raw or script.text, script.loc, [it.src for it in items],
                   [it.text for it in items])
    cmds: list[tuple[str, list[Token]]] = [("", [])]
    for it, loc in zip(items, locs):
        if it.kind == "op":
            cmds.append((it.text, []))
        elif it.kind == "word":
            cmds[-1][1].append(Word(it.text, loc, parts=it.parts))
    out: list[tuple[str, list[Token]]] = []
    pending = ""  # the separators before a command (blank lines between add up)
    for sp, c in cmds:
        pending += sp
        if c:
            out.append((pending, c))
            pending = ""
    return out


def _basename(s: str) -> str:
    return s.rsplit("/", 1)[-1]


def _strip_prefix(argv: list[Token], env: dict[str, EnvVar]) -> list[Token]:
    """The command behind `VAR=value` words and launchers (`launchers.unwrap`), with the
    environment they give it set in `env` (`env -i` clears it, `env -u NAME` unsets)."""
    u = unwrap(argv)
    if u.cleared:
        env.clear()
    for name in u.unset:
        env.pop(name, None)
    for a in u.assigned:
        k, v = a.text.split("=", 1)
        env[k] = EnvVar(v, a.loc)
    return u.rest


_PY_MODULES = {"vllm.entrypoints.openai.api_server": ("vllm", "api-server"),
               "vllm.entrypoints.api_server": ("vllm", "api-server"),
               "sglang.launch_server": ("sglang", "sglang"),
               "huggingfaceserver": ("vllm", "kserve")}


def _engine_of(argv: list[Token]) -> tuple[str, str, int] | None:
    """(engine, form, index of the first argument) if argv starts an engine."""
    if not argv:
        return None
    exe = _basename(argv[0].text)
    second = argv[1].text if len(argv) > 1 else ""
    if exe == "vllm" and second == "serve":
        return "vllm", "vllm-serve", 2
    if exe == "text-generation-launcher":
        return "tgi", "tgi", 1
    if exe == "sglang" and second == "serve":
        return "sglang", "sglang", 2
    if exe == "huggingfaceserver":
        return "vllm", "kserve", 1
    if re.fullmatch(r"python[0-9.]*", exe):
        mod, start = _python_module(argv)
        if mod == "vllm.entrypoints.cli.main" and start < len(argv) and \
                argv[start].text == "serve":
            return "vllm", "vllm-serve", start + 1
        if mod in _PY_MODULES:
            return (*_PY_MODULES[mod], start)
    return None


def _python_module(argv: list[Token]) -> tuple[str | None, int]:
    """(module, index of its first argument) of `python [options] -m MODULE …`, as CPython's
    option parser reads it: `-X opt` and `-W arg` take a value (attached or the next word),
    flags cluster (`-um M`), `-c` or a script ends the options with no module."""
    i = 1
    while i < len(argv):
        t = argv[i].text
        if not t.startswith("-") or t in ("-", "--"):
            return None, i  # a script, or stdin
        if t.startswith("--"):
            i += 1 + (t == "--check-hash-based-pycs")
            continue
        for k, c in enumerate(t[1:], 1):
            if c in "mcXW":
                value = t[k + 1:]
                if not value:
                    i += 1
                    value = argv[i].text if i < len(argv) else ""
                if c == "m":
                    return value, i + 1
                if c == "c":
                    return None, i
                break
        i += 1
    return None, i


# commands that take an engine command line as data, not as a command to run, and the known
# launchers (one left in place runs nothing: `command -v vllm`)
_NOT_LAUNCHERS = set(LAUNCHERS) | {
    "echo", "printf", "print", ":", "true", "false", "test", "[", "[[", "which", "type", "hash",
    "alias", "pgrep", "pkill", "kill", "killall", "grep", "egrep", "fgrep", "ps", "pip", "pip3",
    "huggingface-cli", "hf", "curl", "wget", "cat", "tee", "ls", "man", "help", "logger",
    "trap", "wait", "sleep", "read", "local", "declare", "readonly", "export", "unset", "set",
    "shift", "return", "exit", "cd", "mkdir", "rm", "cp", "mv", "touch", "chmod", "chown", "ln",
    "sed", "awk", "jq", "yq", "git", "vllm", "sglang"}
_ENGINE_EXES = re.compile(r"vllm|sglang|text-generation-launcher|huggingfaceserver|"
                          r"python[0-9.]*")


def _behind(cmd: list[Token]) -> int:
    """The index at which an engine command starts behind a program kvplan does not know
    (`my-launcher --opt vllm serve …`, an entrypoint script that execs its arguments); 0 when
    there is none."""
    if not cmd or _basename(cmd[0].text) in _NOT_LAUNCHERS:
        return 0
    return next((k for k in range(1, len(cmd)) if _ENGINE_EXES.fullmatch(
        _basename(cmd[k].text)) and _engine_of(cmd[k:])), 0)


def image_engine(image: str | None) -> tuple[str, str] | None:
    """The engine an image's entrypoint runs when the manifest gives only arguments."""
    if not image:
        return None
    repo = image.split("@", 1)[0].rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] \
        else image.split("@", 1)[0]
    name = repo.rsplit("/", 1)[-1].lower()
    if "huggingfaceserver" in name:
        return "vllm", "kserve"
    if "text-generation-inference" in name:
        return "tgi", "tgi"
    if "vllm" in name and "sglang" not in name:
        return "vllm", "image"
    return None


# The images whose bare version tag (`v0.10.2`, `v0.28.0-cu130`) is the vLLM release inside:
# the vLLM project's own (Docker Hub `vllm/`: vllm-openai, vllm-openai-rocm, ...) and AMD's
# (`rocm/vllm`, `rocm/vllm-dev`), matched on the repository path's end, so a registry
# mirror (`mirror.example.com/vllm/vllm-openai`) counts. Any other image's tag is its own
# product's release: llm-d's (`ghcr.io/llm-d/llm-d:v0.2.0` ships vLLM 0.10.x), KServe's
# (`kserve/huggingfaceserver:v0.15.2`), Red Hat AI Inference Server's (3.2.3) or a private
# build's.
VLLM_IMAGES = re.compile(r"(?:^|/)(?:vllm/vllm(?:-[a-z0-9]+)*|rocm/vllm(?:-dev)?)$")


def image_version(image: str | None) -> str | None:
    """The vLLM release an image's tag names: `vllm/vllm-openai:v0.10.2` -> '0.10.2';
    `rocm/vllm:rocm6.4.1_vllm_0.10.1_20250909` -> '0.10.1' (a tag that names vLLM, on any
    image). A digest after the tag (`vllm/vllm-openai:v0.11.0@sha256:…`, as Renovate and Flux
    pin) only pins that tag: Docker pulls by the digest and the tag names its release. None for
    `latest`, `nightly`, a digest alone, and a bare version tag on an image not in
    `VLLM_IMAGES`, whose tag is not vLLM's release (the release is then `--vllm-version`'s or
    assumed)."""
    image = (image or "").split("@", 1)[0]
    if not image:
        return None
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return None
    repo, tag = image.rsplit(":", 1)
    m = re.search(r"(?:^|[_-])vllm[_-]?v?(\d+\.\d+(?:\.\d+)?)", tag)
    if m is None and VLLM_IMAGES.search(repo.lower()):
        m = re.match(r"^v?(\d+\.\d+(?:\.\d+)?)", tag)
    return m.group(1) if m else None


def find_engine(command: list[Token], args: list[Token], env: dict[str, EnvVar],
                image: str | None = None, k8s_vars: bool = True,
                script_args: bool = True) -> EngineCommand | None:
    """The engine command a container runs (command + args, as Kubernetes joins them). Engine
    commands in different arms of one `if`/`case` of a shell script are alternatives: the
    first is returned with the others in its `alternatives`. Kubernetes' `$(VAR)` expansion
    substitutes within each item and never splits it; a shell script then splits its own
    unquoted expansions. `script_args`: the words after `sh -c SCRIPT` are all the script's
    arguments (False for a script file or --cmd, whose arguments come when it runs)."""
    env = dict(env)
    argv = [expand_k8s(t, env)[0] if k8s_vars else t for t in command + args]
    base_why = {k: v.why for k, v in env.items() if v.why and v.value is None}
    base_lws = {k for k, v in env.items() if v.lws and v.value is None}
    if not command:
        implied = image_engine(image)
        if implied and _engine_of(argv) is None:  # args may still start with the command
            return EngineCommand(implied[0], implied[1], argv, argv[0].loc if argv else Loc(),
                                 env, _unresolved(argv), dict(base_why), lws=set(base_lws))
    found: list[tuple[EngineCommand, tuple]] = []
    for sc in _nested(_simple_commands(argv, env, frozenset(env) if k8s_vars else frozenset(),
                                       script_args)):
        local_env = dict(sc.env)
        cmd = _strip_prefix(sc.words, local_env)
        hit = _engine_of(cmd)
        k = 0 if hit else _behind(cmd)  # behind a program kvplan does not know: checked,
        launcher, cmd = cmd[:k], cmd[k:]  # and flags-known says so
        hit = hit or _engine_of(cmd)
        if hit:
            engine, form, start = hit
            why = {**base_why, **sc.why}
            args_ = cmd[start:]
            unresolved = [t for t in args_ if id(t) in sc.unresolved] if sc.shell else \
                _unresolved(args_)
            ids = {id(t) for t in args_}
            found.append((EngineCommand(engine, form, args_, cmd[0].loc, local_env,
                                        unresolved, why, dict(sc.refs), base_lws | sc.lws,
                                        defaulted=[(t, n) for t, n in sc.defaulted
                                                   if id(t) in ids or not t.text],
                                        env_defaulted={k: n for k, n in sc.env_defaulted.items()
                                                       if local_env.get(k) is sc.env.get(k)},
                                        launcher=launcher),
                          sc.path))
    for i, (a, pa) in enumerate(found):
        for b, pb in found[i + 1:]:
            if not _exclusive(pa, pb):
                where = f" (lines {a.loc.line} and {b.loc.line})" if a.loc.line else ""
                raise InputError(f"two engine commands in one container{where}; kvplan cannot "
                                 "tell which one gets the GPUs",
                                 file=b.loc.file, line=b.loc.line,
                                 hint="run one engine per container")
    if not found:
        return None
    first = found[0][0]
    first.alternatives = [e for e, _ in found[1:]]
    return first


def _nested(cmds: list[_Cmd], depth: int = 0) -> list[_Cmd]:
    """The simple commands with a script's own `sh -c` (`exec bash -c "vllm serve …"`) read
    as its shell reads it: the inner script sees the exported variables only, and its
    commands run where the outer one does (their `if` arms nest)."""
    out = []
    for sc in cmds:
        env = dict(sc.env)
        words = _strip_prefix(sc.words, env) if sc.shell and depth < 3 else []
        if words and _basename(words[0].text) in SHELLS:
            inner = [replace(c, path=sc.path + c.path) for c in _simple_commands(words, env)]
            out += _nested(inner, depth + 1)
        else:
            out.append(sc)
    return out


def _exclusive(a: tuple, b: tuple) -> bool:
    """Whether two commands run in different arms of one `if`/`case` (`_Cmd.path`)."""
    for (ia, arm_a), (ib, arm_b) in zip(a, b):
        if ia != ib:
            return False
        if arm_a != arm_b:
            return True
    return False


def _unresolved(args: list[Token]) -> list[Token]:
    """Engine arguments still holding a variable reference after expansion."""
    return [t for t in args if re.search(r"\$[({A-Za-z_]", t.text)]


@dataclass
class _Cmd:
    """A simple command of a script, with what the script set before it runs."""

    words: list[Token]
    env: dict[str, EnvVar]  # the command's environment: the container's and what is exported
    path: tuple = ()  # ((id, arm), ...) of the `if`/`case` blocks it runs inside
    why: dict[str, str] = field(default_factory=dict)
    refs: dict[str, list[str]] = field(default_factory=dict)  # as `EngineCommand.refs`
    lws: set[str] = field(default_factory=set)  # as `EngineCommand.lws`
    shell: bool = False  # expanded by a shell: `unresolved` says which words kept a `$`
    unresolved: set[int] = field(default_factory=set)  # id() of the words left unexpanded
    defaulted: list = field(default_factory=list)  # as `EngineCommand.defaulted`
    env_defaulted: dict = field(default_factory=dict)  # as `EngineCommand.env_defaulted`


def _simple_commands(argv: list[Token], env: dict[str, EnvVar],
                     k8s: frozenset[str] = frozenset(), script_args: bool = True
                     ) -> list[_Cmd]:
    if not argv:
        return []
    shell_env = dict(env)
    words = _strip_prefix(argv, shell_env)  # a shell behind launchers: `tini -- sh -c …`
    if words and _basename(words[0].text) in SHELLS:
        inline = _inline_script(words)
        if inline is None:
            return []  # `sh FILE`: a script kvplan does not read
        script, params = inline
        return shell_script(script, shell_env, k8s, params if script_args else None)
    return [_Cmd(argv, dict(env))]


def _inline_script(argv: list[Token]) -> tuple[Token, list[Token]] | None:
    """(SCRIPT, [$0, $1, ...]) of `sh [options] -c SCRIPT [NAME [ARG...]]`, or None when the
    shell runs no inline script. POSIX `sh -c`: options may come before or after `-c` (`-o`
    takes a name, as bash's `-O`, `--rcfile`, `--init-file` take a value), `--` or `-` ends
    them, the first operand is the script, the next is `$0` (the shell's name without one)
    and the rest are `$1`…"""
    inline, i = False, 1
    while i < len(argv):
        t = argv[i].text
        if t in ("--", "-"):
            i += 1
            break
        if len(t) < 2 or t[0] not in "-+":
            break
        if t.startswith("--"):  # bash's long options
            i += 1 + (t in ("--rcfile", "--init-file"))
            continue
        inline = inline or (t[0] == "-" and "c" in t[1:])
        i += 1 + bool(set(t[1:]) & {"o", "O"})
    if not inline or i >= len(argv):
        return None
    return argv[i], (argv[i + 1:] or [argv[0]])


_OPENS = {"if": "if", "case": "case", "while": "loop", "until": "loop", "for": "loop",
          "select": "loop"}
_CLOSES = {"fi", "esac", "done"}
_NOISE = {"then", "do", "!", "{", "}"}
_DECLARE = {"export", "readonly", "declare", "local", "typeset"}
_ONE_VAR = re.compile(r"\$(?:\{[A-Za-z_]\w*\}|[A-Za-z_]\w*)")


def _assignment(w: Token) -> str | None:
    """NAME of an assignment word `NAME=value` (the name and `=` unquoted)."""
    head = w.parts[0] if isinstance(w, Word) and w.parts else (w.text, LIT)
    m = re.match(r"^([A-Za-z_]\w*)=", head[0])
    return m.group(1) if m and head[1] == LIT else None


def shell_script(script: Token, env: dict[str, EnvVar],
                 k8s: frozenset[str] = frozenset(),
                 params: list[Token] | None = None) -> list[_Cmd]:
    """The simple commands of a `sh -c` script, each with its words expanded from the
    variables the script assigned before it (`shellwords.expand`: an unquoted expansion is
    split into words, `$(( ... ))` is evaluated when its operands are known). An assignment
    at the top level sets its variable; one inside an `if`, `case` or loop, or after `&&`,
    `||` or `|`, may not run, so the variable is unresolved unless that assigns the value it
    already has; a value computed as the script runs (`$(...)`, backquotes, arithmetic on an
    unknown variable) is unresolved. A default for an empty variable (`if [ -z "$X" ]; then
    X=...; fi`, `[ -z "$X" ] && X=...`, `[ -n "$X" ] || X=...`) is applied, or not, by the
    variable's value when that is known. `k8s`: the container's variables, whose `$(NAME)`
    Kubernetes substitutes before the shell runs. `params`: the positional parameters (`$0`
    first; `sh -c SCRIPT NAME ARG…`), None when not known; `shift` and `set -- …` at the top
    level change them, in a branch they become unknown."""
    values: dict[str, EnvVar] = dict(env)  # value None: unresolved
    exported = set(env)
    why: dict[str, str] = {k: v.why for k, v in env.items() if v.why and v.value is None}
    lws = {k for k, v in env.items() if v.lws and v.value is None}

    dflt: dict[str, list[str]] = {}  # variable -> the unknown ones whose default it took

    def look(name: str) -> str | None:
        v = values.get(name)
        return None if v is None else v.value

    frames: list[list] = []  # [id, arm, kind, condition] of the open blocks
    ids = 0
    out: list[_Cmd] = []
    prev: list[str] = []  # the words of the command before
    for sep, words in shell_commands(script):
        if ";;" in sep and frames and frames[-1][2] == "case":
            frames[-1][1] += 1
        while words:  # keywords ahead of the command proper
            w = words[0].text
            if w in _OPENS:
                ids += 1
                frames.append([ids, 0, _OPENS[w], [x.text for x in words[1:]]])
            elif w in ("elif", "else") and frames:
                frames[-1][1] += 1
            elif w in _CLOSES and frames:
                frames.pop()
            elif not (w in _NOISE or w in ("elif", "else") or (
                    frames and frames[-1][2] == "case" and w.endswith(")"))):
                break
            words = words[1:]
        if not words:
            continue
        guard = None  # the emptiness test the command runs under, if that is all
        if frames and not any(c in sep for c in "&|"):
            f = frames[-1]
            if len(frames) == 1 and f[2] == "if" and f[1] == 0:
                guard = _empty_test(f[3])
        elif not frames and sep.strip(" \n") in ("&&", "||"):
            guard = _empty_test(prev)
            if guard and (guard[0] == "-z") != (sep.strip(" \n") == "&&"):
                guard = None
        prev = [x.text for x in words]
        maybe = bool(frames) or any(c in sep for c in "&|")
        first = words[0].text
        i = 1 if first in _DECLARE else 0
        while first in _DECLARE and i < len(words) and words[i].text.startswith("-"):
            i += 1
        assigned: list[tuple[str, str | None, Token, str, bool]] = []
        rest: list[Token] = []
        while i < len(words):
            w = words[i]
            name = _assignment(w)
            if name is None:
                if first in _DECLARE:  # `export NAME`
                    if re.fullmatch(r"[A-Za-z_]\w*", w.text) and first == "export":
                        exported.add(w.text)
                    i += 1
                    continue
                rest = words[i:]
                break
            e = expand(after_eq(w), look, split=False, k8s=k8s, is_set=values.__contains__,
                       params=_texts(params))
            line = f" (line {w.loc.line})" if w.loc.line else ""
            from_lws = bool(e.missing) and not e.computed and all(n in lws for n in e.missing)
            reason = ("computed when the script runs" if e.computed else
                      f"set per pod from {', '.join(e.missing)}" if from_lws else
                      f"set from {', '.join(e.missing)}, which kvplan cannot resolve") + line
            assigned.append((name, e.fields[0] if e.ok else None, w, reason, from_lws))
            if e.ok and (e.defaulted or _sources(w, dflt)):
                dflt[name] = list(dict.fromkeys(e.defaulted + _sources(w, dflt)))
            else:
                dflt.pop(name, None)
            i += 1
        if rest and first not in _DECLARE:
            if assigned:  # `VAR=value command`: for that command only
                rest = words
            sc = _command(rest, look, values, exported, frames, why, lws, k8s, dflt, params)
            if rest[0].text in ("shift", "set") and params is not None:
                moved = _set_params(sc.words, params)
                if moved is not params:
                    params = None if maybe or sc.unresolved else moved
                continue
            out.append(sc)
            continue
        for name, value, tok, reason, from_lws in assigned:
            old = values.get(name)
            if guard and guard[1] == name and old is not None and old.value is not None:
                if old.value != "":
                    continue  # `[ -z "$X" ]` is false: the default is not applied
                maybe = False
            if maybe and not (old is not None and old.value is not None and
                              old.value == value):
                lines = [x for x in (old.loc.line if old else None, tok.loc.line) if x]
                why[name] = ("assigned in a branch of the script" if not old else
                             "assigned different values in the script's branches") + (
                    f" (line{'s' * (len(set(lines)) > 1)} "
                    f"{' and '.join(str(x) for x in sorted(set(lines)))})" if lines else "")
                values[name] = EnvVar(None, tok.loc)
                lws.discard(name)
            elif not maybe:
                values[name] = EnvVar(value, tok.loc)
                if value is None:
                    why[name] = reason
                else:
                    why.pop(name, None)
                if from_lws:
                    lws.add(name)
                else:
                    lws.discard(name)
            if first == "export":
                exported.add(name)
    return out


def _texts(params: list[Token] | None) -> list[str] | None:
    return None if params is None else [t.text for t in params]


def _set_params(words: list[Token], params: list[Token]) -> list[Token]:
    """The positional parameters after `shift [N]` or `set [options] [--] ARG…` (`params`
    itself when the command leaves them: `set -euo pipefail`, a shift past the last, which
    bash refuses)."""
    if words[0].text == "shift":
        n = int(words[1].text) if len(words) > 1 and words[1].text.isdigit() else 1
        return params if n > len(params) - 1 else [params[0], *params[1 + n:]]
    i = 1
    while i < len(words):
        t = words[i].text
        if t in ("--", "-"):
            return [params[0], *words[i + 1:]]
        if len(t) < 2 or t[0] not in "-+":
            return [params[0], *words[i:]]
        i += 1 + ("o" in t[1:])  # `-o pipefail`
    return params


def _positional_words(w: Token, params: list[Token] | None) -> list[Token] | None:
    """The argument tokens, with their own locations, that a word standing for positional
    parameters alone (`"$@"`, `$1`, `"${2}"`) expands to, when that keeps them whole (quoted,
    or holding no blank); None otherwise."""
    parts = [p for p in getattr(w, "parts", ()) if p != ("", QLIT)]
    if params is None or len(parts) != 1 or parts[0][1] not in (EXP, QEXP):
        return None
    unit, how = parts[0]
    name = unit[2:-1] if unit.startswith("${") else unit[1:]
    if name in ("@", "*") and (how == EXP or name == "@"):
        picked = params[1:]
    elif name.isdigit() and 0 < int(name) < len(params):
        picked = [params[int(name)]]
    else:
        return None
    if how == EXP and any(c in t.text for t in picked for c in " \t\n"):
        return None  # split into fields: expanded as text
    return picked


def _empty_test(words: list[str]) -> tuple[str, str] | None:
    """('-z' | '-n', NAME) for `[ -z "$NAME" ]`, `[[ -n $NAME ]]`, `test -z "${NAME}"`."""
    w = list(words)
    if w and w[0] in ("[", "[[", "test"):
        w = w[1:]
    if w and w[-1] in ("]", "]]"):
        w = w[:-1]
    if len(w) == 2 and w[0] in ("-z", "-n") and _ONE_VAR.fullmatch(w[1]):
        return w[0], w[1].strip("${}")
    return None


def _sources(w: Token, dflt: dict[str, list[str]]) -> list[str]:
    """The defaulted variables behind the script variables a word refers to."""
    return [x for m in _REF.finditer(w.text) for x in dflt.get(m.group(2) or m.group(3) or "",
                                                               [])]


def _command(words: list[Token], look: Any, values: dict[str, EnvVar], exported: set[str],
             frames: list[list], why: dict[str, str], lws: set[str],
             k8s: frozenset[str], dflt: dict[str, list[str]] | None = None,
             params: list[Token] | None = None) -> _Cmd:
    """A simple command with its words expanded: an unquoted expansion of a known value is
    split into words (none for an empty one); a word kvplan cannot expand stays one word,
    as written. An unknown variable's written default is taken (`${X:-8192}`) and noted.
    `"$@"` and `$1` keep the argument tokens, located where the arguments are written."""
    expanded: list[Token] = []
    refs: dict[str, list[str]] = {}
    unresolved: set[int] = set()
    defaulted: list[tuple[Token, list[str]]] = []
    prefix = True  # the `VAR=value` words ahead of the command: not split
    for w in words:
        prefix = prefix and _assignment(w) is not None
        direct = None if prefix else _positional_words(w, params)
        if direct is not None:  # an argument Kubernetes left a `$(VAR)` in stays unresolved
            expanded += direct
            unresolved |= {id(t) for t in direct if _unresolved([t])}
            continue
        e = expand(w, look, split=not prefix, k8s=k8s, is_set=values.__contains__,
                   params=_texts(params))
        if e.ok:
            toks = [Token(f, w.loc) for f in e.fields]
            expanded += toks
            names = list(dict.fromkeys(e.defaulted + _sources(w, dflt or {})))
            if names:  # an empty default (`${EXTRA_ARGS:-}`) adds no word: noted as ""
                defaulted.append((toks[0] if toks else Token("", w.loc), names))
        else:
            tok = Token(e.fields[0], w.loc)
            expanded.append(tok)
            unresolved.add(id(tok))
            refs[e.fields[0]] = [] if e.computed else e.missing
    env = {k: v for k, v in values.items() if k in exported}
    return _Cmd(expanded, env, tuple((f[0], f[1]) for f in frames),
                {k: v for k, v in why.items()}, refs, set(lws), True, unresolved, defaulted,
                {k: dflt[k] for k in env if dflt and k in dflt})


def tokens_from_string(text: str, loc: Loc, raw: str | None = None) -> list[Token]:
    """A command given as one string (`--cmd`, a compose `command:` string): split as a shell
    would split words, each word located in the source."""
    s = re.sub(r"\\\r?\n", " ", text)
    try:
        words = shlex.split(s, comments=True)
    except ValueError as e:
        raise InputError(f"cannot split the command: {e}", file=loc.file,
                         line=loc.line) from None
    return [Token(w, x) for w, x in zip(words, _locate(raw or text, loc, words))]


def set_version(t: Target, image: str | None, via: str = "") -> None:
    """The vLLM release of the image tag, unless the target says otherwise (`via`: how the
    reference was built, e.g. a Dockerfile's ARG default). A `kvplan.io/vllm-version` that
    names another release than a vLLM image's tag is drift (the image is what runs): the
    image's release is checked and the conflict kept for a warning, unless that release is
    newer than kvplan models (the annotation is then the documented way to pick one)."""
    v = image_version(str(image) if image else None)
    if not v or t.command.engine != "vllm":
        return
    if t.vllm_version and (t.version_source != "kvplan.io/vllm-version" or beyond_latest(v)
                           or same_release(t.vllm_version, v)):
        return
    if t.vllm_version:
        t.version_conflict = (t.vllm_version, str(image))
    t.vllm_version = v
    t.version_source = f"image {image}" + (f" ({via})" if via else "")


def same_release(given: str, tagged: str) -> bool:
    """Whether a release as written (`0.20`, `0.20.2`, `v0.10.1.1`) covers the one an image
    tag names: the same minor, and the same patch when it gives one. An unreadable one is
    left to the version check, which reports it."""
    try:
        a, b = read_release(given), read_release(tagged)
    except BadInput:
        return True
    return a[:2] == b[:2] and a[2] in (None, b[2])
