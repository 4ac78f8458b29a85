"""Find the engine command in what a container runs, and split it into flags.

Recognised: `vllm serve MODEL …`, `python -m vllm.entrypoints.openai.api_server --model …`,
`python -m sglang.launch_server …`, `text-generation-launcher …`, KServe's
`huggingfaceserver` (vLLM backend), and images whose entrypoint is one of these
(`vllm/vllm-openai`, `ghcr.io/huggingface/text-generation-inference`, `kserve/huggingfaceserver`)
when only arguments are given. Shell wrappers (`sh -c "…"`) are split into simple commands;
leading `VAR=value`, `exec`, `env`, `nohup` are stripped. Every token keeps its file and line.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from kvplan.check.base import InputError, Loc, Target, Token

SHELLS = {"sh", "bash", "dash", "zsh", "ash", "ksh"}
WRAPPERS = {"exec", "env", "nohup", "time", "command"}
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_K8S_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_SH_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


@dataclass
class EnvVar:
    value: str | None  # None: from a secret, config map or field reference
    loc: Loc


@dataclass
class EngineCommand:
    """An engine invocation: which engine, its argument tokens, and its environment."""

    engine: str  # vllm | sglang | tgi
    form: str  # vllm-serve | api-server | image | sglang | tgi | kserve
    args: list[Token]
    loc: Loc
    env: dict[str, EnvVar] = field(default_factory=dict)
    unresolved: list[Token] = field(default_factory=list)  # args with $(VAR) left in them


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


def expand_shell(text: str, env: dict[str, EnvVar]) -> tuple[str, bool]:
    ok = True

    def sub(m: re.Match) -> str:
        nonlocal ok
        v = env.get(m.group(1) or m.group(2))
        if v is None or v.value is None:
            ok = False
            return m.group(0)
        return v.value

    return _SH_VAR.sub(sub, text), ok


def _locate(raw: str, base: Loc, words: list[str]) -> list[Loc]:
    """Locations of successive words inside a scalar's source text."""
    out, cur, last = [], 0, base
    for w in words:
        pos = raw.find(w, cur) if w else -1
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


def split_shell(script: Token) -> list[list[Token]]:
    """Simple commands of a shell script (`;`, `&&`, `||`, `|`, `&`, newlines), each a list of
    words; comments and redirections dropped."""
    s = re.sub(r"\\\r?\n", " ", script.text)
    lex = shlex.shlex(s, posix=True, punctuation_chars=";&|\n")
    lex.whitespace, lex.whitespace_split, lex.commenters = " \t\r", True, ""
    try:
        words = list(lex)
    except ValueError as e:
        raise InputError(f"cannot split the shell command: {e}", file=script.loc.file,
                         line=script.loc.line) from None
    locs = _locate(script.raw or script.text, script.loc, words)
    cmds: list[list[Token]] = [[]]
    comment = False
    skip_next = False
    for w, loc in zip(words, locs):
        if w and set(w) <= set(";&|\n"):
            comment = False
            if w != "&" or not (cmds[-1] and re.fullmatch(r"\d*>", cmds[-1][-1].text)):
                cmds.append([])
                continue
        if comment:
            continue
        if w.startswith("#"):
            comment = True
            continue
        if skip_next:
            skip_next = False
            continue
        if re.fullmatch(r"\d*(>>?|<)", w):  # redirection with a separate target
            skip_next = True
            continue
        if re.match(r"^\d*(>>?|<)", w):
            continue
        cmds[-1].append(Token(w, loc))
    return [c for c in cmds if c]


def _basename(s: str) -> str:
    return s.rsplit("/", 1)[-1]


def _strip_prefix(argv: list[Token], env: dict[str, EnvVar]) -> list[Token]:
    i = 0
    while i < len(argv):
        t = argv[i].text
        if _ASSIGN.match(t):
            k, v = t.split("=", 1)
            env[k] = EnvVar(v, argv[i].loc)
        elif _basename(t) in WRAPPERS or (i and argv[i - 1].text == "env" and t.startswith("-")):
            pass
        else:
            break
        i += 1
    return argv[i:]


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
        for i in range(1, len(argv) - 1):
            if argv[i].text == "-m":
                mod = argv[i + 1].text
                if mod in ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server"):
                    return "vllm", "api-server", i + 2
                if mod == "vllm.entrypoints.cli.main" and i + 2 < len(argv) and \
                        argv[i + 2].text == "serve":
                    return "vllm", "vllm-serve", i + 3
                if mod == "sglang.launch_server":
                    return "sglang", "sglang", i + 2
                if mod == "huggingfaceserver":
                    return "vllm", "kserve", i + 2
                return None
            if not argv[i].text.startswith("-"):
                return None  # python script.py
    return None


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


def image_version(image: str | None) -> str | None:
    """`vllm/vllm-openai:v0.10.2` -> '0.10.2'; `rocm/vllm:rocm6.4.1_vllm_0.10.1_20250909` ->
    '0.10.1'. None for `latest`, `nightly`, digests, other tags, and Red Hat AI Inference
    Server images, whose tag is the product's release (3.2.3), not vLLM's."""
    if not image or "@" in image or "/rhaiis/" in image:
        return None
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return None
    tag = last.split(":", 1)[1]
    m = re.search(r"(?:^|[_-])vllm[_-]?v?(\d+\.\d+(?:\.\d+)?)", tag) or \
        re.match(r"^v?(\d+\.\d+(?:\.\d+)?)", tag)
    return m.group(1) if m else None


def find_engine(command: list[Token], args: list[Token], env: dict[str, EnvVar],
                image: str | None = None, k8s_vars: bool = True) -> EngineCommand | None:
    """The engine command a container runs (command + args, as Kubernetes joins them)."""
    env = dict(env)
    argv = [expand_k8s(t, env)[0] if k8s_vars else t for t in command + args]
    if not command:
        implied = image_engine(image)
        if implied and _engine_of(argv) is None:  # args may still start with the command
            return EngineCommand(implied[0], implied[1], argv, argv[0].loc if argv else Loc(),
                                 env, _unresolved(argv))
    found: list[EngineCommand] = []
    for cmd in _simple_commands(argv, env):
        local_env = dict(env)
        cmd = _strip_prefix(cmd, local_env)
        hit = _engine_of(cmd)
        if hit:
            engine, form, start = hit
            found.append(EngineCommand(engine, form, cmd[start:], cmd[0].loc, local_env,
                                       _unresolved(cmd[start:])))
    if len(found) > 1:
        a, b = found[0], found[1]
        where = f" (lines {a.loc.line} and {b.loc.line})" if a.loc.line else ""
        raise InputError(f"two engine commands in one container{where}; kvplan cannot tell "
                         "which one gets the GPUs",
                         file=b.loc.file, line=b.loc.line,
                         hint="run one engine per container")
    return found[0] if found else None


def _unresolved(args: list[Token]) -> list[Token]:
    """Engine arguments still holding a variable reference after expansion."""
    return [t for t in args if re.search(r"\$[({A-Za-z_]", t.text)]


def _simple_commands(argv: list[Token], env: dict[str, EnvVar]) -> list[list[Token]]:
    if not argv:
        return []
    if _basename(argv[0].text) in SHELLS:
        for i, t in enumerate(argv[1:], 1):
            if re.fullmatch(r"-[a-z]*c[a-z]*", t.text) and i + 1 < len(argv):
                out = []
                for c in split_shell(argv[i + 1]):
                    words = []
                    for w in c:
                        words.append(Token(expand_shell(w.text, env)[0], w.loc))
                    out.append(words)
                return out
        return []
    return [argv]


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


def set_version(t: Target, image: str | None) -> None:
    """The vLLM release of the image tag, unless the target says otherwise."""
    v = image_version(str(image) if image else None)
    if v and not t.vllm_version and t.command.engine == "vllm":
        t.vllm_version, t.version_source = v, f"image {image}"
