"""Shell words as `sh` reads them, for the scripts `kvplan check` reads (`command.shell_script`).

`lex` splits a script into words and operators (`;`, `;;`, `&&`, `||`, `|`, `&`, newlines),
dropping comments, redirections (with their targets) and here-documents. A word keeps its
quoting: each part is literal or an expansion, quoted or not, and an expansion is one unit
however many spaces it holds (`$(( LWS_WORKER_INDEX * 8 ))`, `$( cat /etc/x )`, backquotes,
`${X:-0}`).

`expand` does what the shell does with a word: parameter expansion from the known values
(`$X`, `${X}`, `${X:-word}`, `${X-word}`, `${X:=word}`; an unknown variable with a default
takes it, as if unset, and is listed in `defaulted`), arithmetic expansion when every
operand is known (`$(( LWS_GROUP_SIZE * 8 ))`), and field splitting of the unquoted
expansions on spaces, tabs and newlines (`ARGS="--max-model-len 8192 --enforce-eager";
vllm serve M $ARGS` passes three arguments, `"$ARGS"` one). A command substitution, or a
value kvplan does not know, leaves the word unresolved: one word, as written.

The positional parameters (`params`: `$0`, then `$1`…) are known when the script is run as
`sh -c SCRIPT NAME ARG…` with known arguments (POSIX `sh`: the operand after the script is
`$0`, the rest `$1`…): `"$@"` becomes one field per argument (none when there are none, even
quoted), `"$*"` one field, and unquoted `$@`/`$*` are split. Without them (a script file, whose
arguments come when it runs) they stay unresolved, as computed.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from kvplan.check.base import Token

# parts: (text, how): u unquoted literal, q quoted literal, U unquoted expansion, D quoted one
LIT, QLIT, EXP, QEXP = "u", "q", "U", "D"
_NAME = re.compile(r"[A-Za-z_]\w*")
_IFS = " \t\n"


@dataclass(frozen=True)
class Word(Token):
    """A shell word: `text` without its quotes (as written otherwise), and its parts."""

    parts: tuple[tuple[str, str], ...] = ()


@dataclass
class Item:
    kind: str  # word | op | skip (a comment, a redirection and its target)
    text: str
    src: str  # as written, to locate it in the source
    parts: tuple[tuple[str, str], ...] = ()


class ShellSyntaxError(ValueError):
    pass


def _close(s: str, i: int, open_: str, close: str) -> int:
    """The index of the `close` matching the `open_` at s[i], skipping quoted text."""
    depth, j, n = 0, i, len(s)
    while j < n:
        c = s[j]
        if c == "\\":
            j += 2
            continue
        if c == "'" and open_ == "(":
            k = s.find("'", j + 1)
            j = (k if k >= 0 else n) + 1
            continue
        if c == '"' and open_ == "(":
            j = _dq_end(s, j) + 1
            continue
        if c == open_:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return j
        j += 1
    raise ShellSyntaxError(f"no closing {close!r}")


def _dq_end(s: str, i: int) -> int:
    """The index of the double quote closing the one at s[i]."""
    j = i + 1
    while j < len(s):
        c = s[j]
        if c == "\\":
            j += 2
            continue
        if c == "$" and s[j + 1:j + 2] in ("(", "{"):
            j = _dollar_end(s, j)
            continue
        if c == "`":
            k = s.find("`", j + 1)
            if k < 0:
                raise ShellSyntaxError("no closing backquote")
            j = k + 1
            continue
        if c == '"':
            return j
        j += 1
    raise ShellSyntaxError("no closing quotation")


def _dollar_end(s: str, i: int) -> int:
    """The end (exclusive) of the expansion starting with the `$` at s[i]; i + 1 for a `$`
    that starts none."""
    nxt = s[i + 1:i + 2]
    if nxt == "(":
        return _close(s, i + 1, "(", ")") + 1
    if nxt == "{":
        return _close(s, i + 1, "{", "}") + 1
    m = _NAME.match(s, i + 1)
    if m:
        return m.end()
    if nxt and (nxt.isdigit() or nxt in "@*#?$!-"):
        return i + 2
    return i + 1


_STOP = set(" \t\r\n;&|<>")


def _word(s: str, i: int) -> tuple[tuple[tuple[str, str], ...], int]:
    """The parts of the word starting at s[i], and where it ends."""
    parts: list[tuple[str, str]] = []

    def push(text: str, how: str) -> None:
        if parts and parts[-1][1] == how and how in (LIT, QLIT):
            parts[-1] = (parts[-1][0] + text, how)
        else:
            parts.append((text, how))

    n = len(s)
    while i < n:
        c = s[i]
        if c in _STOP:
            break
        if c == "\\":
            if s[i + 1:i + 2] == "\n":  # a line continuation
                i += 2
            elif i + 1 < n:
                push(s[i + 1], QLIT)
                i += 2
            else:
                push("\\", LIT)
                i += 1
        elif c == "'":
            k = s.find("'", i + 1)
            if k < 0:
                raise ShellSyntaxError("no closing quotation")
            push(s[i + 1:k], QLIT)
            i = k + 1
        elif c == '"':
            end = _dq_end(s, i)
            push("", QLIT)  # "" is a word of its own
            j = i + 1
            while j < end:
                d = s[j]
                if d == "\\" and s[j + 1:j + 2] in ('"', "\\", "$", "`", "\n"):
                    if s[j + 1] != "\n":
                        push(s[j + 1], QLIT)
                    j += 2
                elif d == "$" and _dollar_end(s, j) > j + 1:
                    k = _dollar_end(s, j)
                    parts.append((s[j:k], QEXP))
                    j = k
                elif d == "`":
                    k = s.index("`", j + 1) + 1
                    parts.append((s[j:k], QEXP))
                    j = k
                else:
                    push(d, QLIT)
                    j += 1
            i = end + 1
        elif c == "$" and _dollar_end(s, i) > i + 1:
            k = _dollar_end(s, i)
            parts.append((s[i:k], EXP))
            i = k
        elif c == "`":
            k = s.find("`", i + 1)
            if k < 0:
                raise ShellSyntaxError("no closing backquote")
            parts.append((s[i:k + 1], EXP))
            i = k + 1
        else:
            push(c, LIT)
            i += 1
    return tuple(parts), i


_REDIR = re.compile(r"\d*(>>|>&|>\||<<-|<<|<&|<>|>|<)|&>>|&>")


def lex(s: str) -> list[Item]:
    """The words, operators and skipped text of a script (ShellSyntaxError when a quote or
    an expansion is not closed)."""
    out: list[Item] = []
    heredocs: list[tuple[str, bool]] = []
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c in " \t\r":
            i += 1
        elif c == "\\" and s[i + 1:i + 2] == "\n":
            i += 2
        elif c == "\n":
            out.append(Item("op", "\n", "\n"))
            i += 1
            for delim, strip in heredocs:  # the here-document's lines, to its delimiter
                while i < n:
                    end = s.find("\n", i)
                    end = n if end < 0 else end
                    line = s[i:end]
                    out.append(Item("skip", line, line))
                    i = end + 1
                    if (line.lstrip("\t") if strip else line) == delim:
                        break
            heredocs = []
        elif c == "#":
            end = s.find("\n", i)
            end = n if end < 0 else end
            out.append(Item("skip", s[i:end], s[i:end]))
            i = end
        elif c in ";|":  # ; ;; | ||
            op = c * 2 if s[i + 1:i + 2] == c else c
            out.append(Item("op", op, op))
            i += len(op)
        elif _REDIR.match(s, i) and (c != "&" or s[i + 1:i + 2] == ">"):
            m = _REDIR.match(s, i)
            op, j = m.group(0), m.end()
            if op.endswith("&") and re.match(r"\d+|-", s[j:]):  # 2>&1, >&-
                j = re.match(r"\d+|-", s[j:]).end() + j
                out.append(Item("skip", s[i:j], s[i:j]))
                i = j
                continue
            while j < n and s[j] in " \t":
                j += 1
            parts, k = _word(s, j)
            if op.startswith("<<") or op.lstrip("0123456789").startswith("<<"):
                heredocs.append(("".join(t for t, _ in parts), op.endswith("-")))
            out.append(Item("skip", s[i:k], s[i:k]))
            i = k
        elif c == "&":
            op = "&&" if s[i + 1:i + 2] == "&" else "&"
            out.append(Item("op", op, op))
            i += len(op)
        else:
            parts, k = _word(s, i)
            if k == i:  # a stray character the rules above do not take
                parts, k = ((c, LIT),), i + 1
            out.append(Item("word", "".join(t for t, _ in parts), s[i:k], parts))
            i = k
    return out


# --- expansion ---------------------------------------------------------------------------

Look = Callable[[str], "str | None"]  # a variable's value; None when not known


@dataclass
class Expanded:
    """A word after expansion: the fields it becomes when every expansion is known, else one
    field with the known ones substituted and the others as written."""

    fields: list[str]
    missing: list[str] = field(default_factory=list)  # variables whose value is not known
    computed: bool = False  # a command substitution, or arithmetic kvplan does not evaluate
    # variables kvplan does not know whose written default it took (`${X:-8192}`): the
    # environment the script runs in may set them
    defaulted: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.missing and not self.computed


def positional(name: str, params: list[str]) -> str | None:
    """`$0`, `$1`…, `$#`, `$@`/`$*` (joined by spaces) from the parameters (`params[0]` is
    `$0`); None for a positional parameter past the last (unset)."""
    if name == "#":
        return str(len(params) - 1)
    if name in ("@", "*"):
        return " ".join(params[1:])
    n = int(name)
    return params[n] if n < len(params) else None


_SPECIAL = re.compile(r"\d+|[@*#]")


class Quoted(str):
    """An expansion's value that came from quoted text (`${X:-"a b"}`): not field-split."""


def _default_parts(word: str) -> tuple[tuple[str, str], ...]:
    """The parts of the word in `${X:-word}`: quotes removed as sh removes them (`"8192"`
    and `'8192'` are 8192), blanks outside quotes kept as literal text (split later, with
    the rest of an unquoted expansion)."""
    parts: list[tuple[str, str]] = []
    i = 0
    while i < len(word):
        if word[i] in _IFS:
            j = i
            while j < len(word) and word[j] in _IFS:
                j += 1
            parts.append((word[i:j], LIT))
            i = j
            continue
        try:
            got, k = _word(word, i)
        except ShellSyntaxError:  # an unbalanced quote: the text as written
            return ((word[i:], LIT),) if not parts else (*parts, (word[i:], LIT))
        if k == i:  # an operator character, literal inside the braces
            parts.append((word[i], LIT))
            k = i + 1
        parts.extend(got)
        i = k
    return tuple(parts)


def _default(word: str, look: Look, k8s: frozenset[str], is_set: Callable[[str], bool],
             params: list[str] | None) -> Expanded:
    """`word` of `${X:-word}` expanded (not split); its value is `Quoted` when every part of
    it was quoted, so that the unquoted `${X:-"a b"}` stays one field, as in sh."""
    parts = _default_parts(word)
    e = expand(Word(word, parts=parts), look, split=False, k8s=k8s, is_set=is_set,
               params=params)
    if e.ok and parts and all(how in (QLIT, QEXP) for _, how in parts):
        e.fields = [Quoted(e.fields[0])]
    return e


def _param(unit: str, look: Look, k8s: frozenset[str], defaulted: list[str],
           is_set: Callable[[str], bool], params: list[str] | None = None
           ) -> tuple[str | None, list[str], bool]:
    """(value, missing, computed) of one `$…` unit; `defaulted` gets the unknown variables
    whose default (`${X:-word}`, `${X-word}`, `${X:=word}`) it took, as for an unset one.
    `params`: the positional parameters, None when not known (see the module's doc)."""
    if unit.startswith("$(("):
        v, missing, computed = arith(unit[3:-2], look, k8s, defaulted=defaulted,
                                     is_set=is_set, params=params)
        return (None if v is None else str(v)), missing, computed
    if unit.startswith("`"):
        return None, [], True
    if unit.startswith("$("):
        inner = unit[2:-1].strip()
        if inner in k8s:  # Kubernetes substitutes $(VAR) of the container's env first
            v = look(inner)
            return v, ([] if v is not None else [inner]), False
        return None, [], True
    if unit.startswith("${"):
        body = unit[2:-1]
        m = re.fullmatch(r"([A-Za-z_]\w*|\d+|[@*#])(?:(:?)([-=])(.*))?", body, re.S)
        if not m:
            return None, [], True
        name, colon, op, word = m.groups()
        if _SPECIAL.fullmatch(name):
            if params is None or op == "=":  # sh cannot assign a positional parameter
                return None, [], True
            v = positional(name, params)
            if op and (v is None or (colon and v == "")):
                e = _default(word, look, k8s, is_set, params)
                return (e.fields[0] if e.ok else None), e.missing, e.computed
            return v or "", [], False
        v = look(name)
        if v is None and (not op or is_set(name)):  # set, to a value kvplan does not know
            return None, [name], False
        if op and (v is None or (v == "" if colon else False)):
            e = _default(word, look, k8s, is_set, params)
            if v is None and e.ok:
                defaulted += [x for x in (name, *e.defaulted) if x not in defaulted]
            elif e.ok:
                defaulted += [x for x in e.defaulted if x not in defaulted]
            return (e.fields[0] if e.ok else None), (
                e.missing if v is not None or e.ok else [name, *e.missing]), e.computed
        return v, [], False
    name = unit[1:]
    if not _NAME.fullmatch(name):
        if params is not None and _SPECIAL.fullmatch(name):
            return positional(name, params) or "", [], False
        return None, [], True  # $$, $!, $?, and $1, $@ without the arguments: as it runs
    v = look(name)
    return v, ([] if v is not None else [name]), False


def expand(word: Token, look: Look, split: bool = True,
           k8s: frozenset[str] = frozenset(),
           is_set: Callable[[str], bool] | None = None,
           params: list[str] | None = None) -> Expanded:
    """`word` as the shell expands it (`split`: field splitting, off for assignments).
    `k8s`: the names whose `$(NAME)` Kubernetes substitutes before the shell runs. `is_set`:
    whether a variable `look` does not know is set all the same (a secret, the pod's
    LWS_WORKER_INDEX), so that its `${X:-word}` default does not apply; by default, none.
    `params`: the positional parameters (`$0` first), None when not known."""
    is_set = is_set or (lambda name: False)
    parts = word.parts if isinstance(word, Word) else ((word.text, LIT),)
    pieces: list[tuple[str | None, bool, bool]] = []  # (text, splittable, quoted); None:
    # a field break inside "$@"
    missing: list[str] = []
    defaulted: list[str] = []
    computed = False
    quoted_at = False  # a "$@" that may make no field at all
    for text, how in parts:
        if how in (LIT, QLIT):
            pieces.append((text, False, how == QLIT))
            continue
        if how == QEXP and params is not None and text in ("$@", "${@}"):
            for n, arg in enumerate(params[1:]):  # one field per argument
                pieces += [(None, False, True)] * bool(n) + [(arg, False, True)]
            quoted_at = quoted_at or len(params) == 1
            continue
        v, miss, comp = _param(text, look, k8s, defaulted, is_set, params)
        missing += [m for m in miss if m not in missing]
        computed = computed or comp
        if v is None:
            pieces.append((text, False, True))
        else:
            quoted = isinstance(v, Quoted)  # `${X:-"a b"}`: its quotes keep it whole
            pieces.append((v, how == EXP and not quoted, how == QEXP or quoted))
    if missing or computed or not split:
        return Expanded(["".join(" " if p[0] is None else p[0] for p in pieces)], missing,
                        computed, [] if missing or computed else defaulted)
    if quoted_at and not any(p[0] for p in pieces):  # "$@" without arguments: no field
        return Expanded([], defaulted=defaulted)
    fields: list[str] = []
    buf, started = "", False
    for text, splittable, quoted in pieces:
        if text is None:
            fields.append(buf)
            buf, started = "", True
            continue
        if not splittable:
            buf += text
            started = started or quoted or bool(text)
            continue
        for ch in text:
            if ch in _IFS:
                if started:
                    fields.append(buf)
                buf, started = "", False
            else:
                buf += ch
                started = True
    if started:
        fields.append(buf)
    return Expanded(fields, defaulted=defaulted)


def after_eq(word: Token) -> Token:
    """The value of an assignment word `NAME=value`, with its parts."""
    if not isinstance(word, Word):
        return Token(word.text.split("=", 1)[1], word.loc)
    parts = list(word.parts)
    first, how = parts[0]
    rest = first.split("=", 1)[1]
    value = ([(rest, how)] if rest else []) + parts[1:]
    return Word("".join(t for t, _ in value), word.loc, parts=tuple(value))


# --- arithmetic --------------------------------------------------------------------------

_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
        ast.Mult: lambda a, b: a * b}


def _div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _eval(node: ast.AST) -> int:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and \
            not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _eval(node.operand)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp):
        a, b = _eval(node.left), _eval(node.right)
        if type(node.op) in _OPS:
            return _OPS[type(node.op)](a, b)
        if isinstance(node.op, (ast.Div, ast.Mod)) and b:
            q = _div(a, b)
            return q if isinstance(node.op, ast.Div) else a - b * q
    raise ValueError("not evaluated")


def arith(expr: str, look: Look, k8s: frozenset[str] = frozenset(), depth: int = 0,
          defaulted: list[str] | None = None,
          is_set: Callable[[str], bool] | None = None,
          params: list[str] | None = None) -> tuple[int | None, list[str], bool]:
    """(value, missing, computed) of `$(( expr ))`: + - * / % and parentheses over integers
    and variables (a variable's value is itself evaluated; an empty one is 0). `defaulted`
    gets the unknown variables whose written default it took."""
    missing: list[str] = []
    try:
        parts = _word_all(expr)
    except ShellSyntaxError:  # not arithmetic sh would evaluate: left unresolved
        return None, [], True
    e = expand(Word(expr, parts=parts), look, split=False, k8s=k8s, is_set=is_set,
               params=params)
    if not e.ok:
        return None, e.missing, e.computed
    if defaulted is not None:
        defaulted += [x for x in e.defaulted if x not in defaulted]
    text = e.fields[0]

    def name(m: re.Match) -> str:
        v = look(m.group(0))
        if v is None:
            missing.append(m.group(0))
            return "0"
        if not v.strip():
            return "0"
        if re.fullmatch(r"\s*-?\d+\s*", v):
            return f"({v.strip()})"
        if depth < 4:
            n, miss, _ = arith(v, look, k8s, depth + 1, defaulted, is_set)
            missing.extend(miss)
            return "0" if n is None else f"({n})"
        return "0"

    text = re.sub(r"(?<![\w$])[A-Za-z_]\w*", name, text)
    if missing:
        return None, list(dict.fromkeys(missing)), False
    if re.search(r"\b0\d", text):  # an octal constant: not evaluated here
        return None, [], True
    try:
        return _eval(ast.parse(text.strip(), mode="eval")), [], False
    except (SyntaxError, ValueError, RecursionError):
        return None, [], True


def _word_all(s: str) -> tuple[tuple[str, str], ...]:
    """The parts of an arithmetic expression: its `$…` expansions and the text between."""
    parts: list[tuple[str, str]] = []
    i = 0
    while i < len(s):
        if s[i] == "$" and _dollar_end(s, i) > i + 1:
            k = _dollar_end(s, i)
            parts.append((s[i:k], QEXP))
            i = k
        else:
            j = s.find("$", i + 1)
            j = len(s) if j < 0 else j
            parts.append((s[i:j], QLIT))
            i = j
    return tuple(parts)
