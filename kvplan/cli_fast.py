"""`kvplan size` command lines parsed without typer or click (about half of a run's wall time).

`size_kwargs` returns exactly the keyword arguments typer would pass `cli_size.run`, read from
the same definition (`cli_size.OPTIONS` and `run`'s signature), and follows click's parser:
a value option takes the next word whatever it is, `--name=value` for long names, the last of
a repeated option wins and repeatable ones collect. Anything else (help, `--`, an unknown or
malformed option, a missing or extra argument, a value that does not convert, a short option
with its value attached) returns None, and typer parses the line and reports its errors.
"""

import inspect
import math
from typing import Any, Optional

from kvplan import cli_size

_FLAG, _PAIR, _MANY = "flag", "pair", "many"
EMPTY_OK = ("token",)  # text options that may be empty: `--token "$HF_TOKEN"` unset, no token


def _finite(value: str) -> float:
    v = float(value)
    if not math.isfinite(v):  # typer's app refuses nan / inf (cli_app._strict_types)
        raise ValueError(value)
    return v


# how click converts each annotation run() uses
KINDS: dict[Any, Any] = {str: str, Optional[str]: str, int: int, Optional[int]: int,
                         float: _finite, Optional[float]: _finite, bool: _FLAG,
                         Optional[bool]: _PAIR, Optional[list[str]]: _MANY}


def _table() -> tuple[dict[str, Any], dict[str, tuple[str, Any, Any]]]:
    """(defaults by name, {flag: (name, kind, value a bare flag sets)})."""
    defaults: dict[str, Any] = {}
    flags: dict[str, tuple[str, Any, Any]] = {}
    for p in inspect.signature(cli_size.run).parameters.values():
        if p.name == "model":
            continue
        kind = KINDS[p.annotation]
        defaults[p.name] = p.default
        for decl in cli_size.OPTIONS[p.name][0]:
            if kind == _PAIR:
                on, off = decl.split("/")
                flags[on], flags[off] = (p.name, kind, True), (p.name, kind, False)
            else:
                flags[decl] = (p.name, kind, True)
    return defaults, flags


def _long(flag: str) -> bool:
    """click's long names: more than one character after the dashes (`-tp` is one)."""
    return len(flag.lstrip("-")) > 1


def size_kwargs(argv: list[str]) -> Optional[dict[str, Any]]:
    """run()'s keyword arguments for `size ...`, or None to leave the line to typer."""
    if argv[:1] != ["size"]:
        return None
    defaults, flags = _table()
    kwargs: dict[str, Any] = dict(defaults)
    model: Optional[str] = None
    words = argv[1:]
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if word[:1] != "-" or word == "-":
            if model is not None:
                return None  # an extra argument: typer's message
            model = word
            continue
        name, eq, value = word.partition("=")
        hit = flags.get(name if eq else word)
        if hit is None or (eq and not _long(name)):
            return None
        param, kind, bare = hit
        if kind in (_FLAG, _PAIR):
            if eq:
                return None  # "does not take a value"
            kwargs[param] = bare
            continue
        if not eq:
            if i == len(words):
                return None  # "requires an argument"
            value = words[i]
            i += 1
        if kind in (str, _MANY) and not value.strip() and param not in EMPTY_OK:
            return None  # refused by the typer app (cli_app._strict_types), in one place
        if kind == _MANY:
            kwargs[param] = [*(kwargs[param] or []), value]
            continue
        try:
            kwargs[param] = kind(value)
        except ValueError:
            return None
    if model is None:
        return None
    return {"model": model, **kwargs}
