"""The docs' quoted kvplan figures against kvplan's output now (benchmarks/docs_figures.yaml).

Each entry names a doc, a text template and the kvplan command line that gives it; the
command runs in-process with --json and the template, filled from its output, must appear
in the doc (line breaks in the doc as in the template). A figure that moved is listed with
the doc's nearest line and the text it should now read.

Run:  python benchmarks/docs_figures.py        (exit 1 when a figure is stale)
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import re
import shlex
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
FIELD = re.compile(r"\{([^{}:]+)(?::([^{}]*))?\}")
NAMES = {"GiB": 1 << 30, "MiB": 1 << 20}
OPS = (ast.Expression, ast.BinOp, ast.Name, ast.Load, ast.Constant, ast.Div, ast.Mult,
       ast.Add, ast.Sub, ast.FloorDiv)


def _value(expr: str, out: dict) -> object:
    tree = ast.parse(expr.strip(), mode="eval")
    if not all(isinstance(n, OPS) for n in ast.walk(tree)):
        raise ValueError(f"only keys, numbers and + - * / // in a template: {expr!r}")
    return eval(compile(tree, "<template>", "eval"), {"__builtins__": {}}, {**NAMES, **out})


def fill(template: str, out: dict) -> str:
    """The template with each `{expr:spec}` formatted from the command's JSON output."""
    parts = template.replace("{{", "\0").replace("}}", "\1")
    text = FIELD.sub(lambda m: format(_value(m.group(1), out), m.group(2) or ""), parts)
    return text.replace("\0", "{").replace("\1", "}")


def run_json(argv: str) -> dict:
    from kvplan.cli import main

    buf, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
        code = main(shlex.split(argv, posix=True) + ["--json"])
    if code not in (0, 1) or not buf.getvalue().strip():
        raise RuntimeError(f"kvplan {argv}: exit {code}: {err.getvalue().strip()}")
    return json.loads(buf.getvalue())


def entries() -> list[dict]:
    return yaml.safe_load((ROOT / "benchmarks" / "docs_figures.yaml").read_text())


def check(entry: dict) -> str | None:
    """None when the doc holds the filled text, else what to change."""
    doc = (ROOT / entry["doc"]).read_text(encoding="utf-8")
    want = fill(entry["text"], run_json(entry["argv"]))
    if want in doc:
        return None
    anchor = FIELD.split(entry["text"])[0].strip() or entry["text"][:20]
    line = next((i for i, s in enumerate(doc.splitlines(), 1) if anchor.split("\n")[0] in s),
                None)
    return f"{entry['doc']}:{line or '?'}: should read {want!r} (kvplan {entry['argv']})"


def main() -> int:
    stale = [m for m in map(check, entries()) if m]
    for m in stale:
        print(m)
    print(f"{len(entries())} figures, {len(stale)} stale")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
