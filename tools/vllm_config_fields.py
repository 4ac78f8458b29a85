"""Regenerate kvplan/engines/vllm_config_fields.json from unpacked vLLM wheels.

Usage: python tools/vllm_config_fields.py DIR  (DIR/<version>/vllm/... holds each release's
Python files, e.g. from `pip download vllm==X --no-deps` and unzip '*.py'). Reads the
annotated fields of `CompilationConfig` (config/compilation.py), `SpeculativeConfig`
(config/speculative.py) and `PoolerConfig` (config/pooler.py from 0.11; config/__init__.py in
0.10.1-0.10.2, config.py before) with `ast`, without importing vLLM; the newest patch of each
minor release is kept, and each field is written as the first and last minor release that
has it.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

CLASSES = {"compilation": (("config/compilation.py",), "CompilationConfig"),
           "speculative": (("config/speculative.py",), "SpeculativeConfig"),
           "pooler": (("config/pooler.py", "config/__init__.py", "config.py"), "PoolerConfig")}
OUT = Path(__file__).resolve().parent.parent / "kvplan/engines/vllm_config_fields.json"


def _key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split(".") if x.isdigit())


def fields(path: Path, cls: str) -> list[str] | None:
    if not path.is_file():
        return None
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            out = []
            for st in node.body:
                if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) \
                        and "ClassVar" not in ast.unparse(st.annotation):
                    out.append(st.target.id)
            return out
    return None


def main(root: Path) -> None:
    newest: dict[str, str] = {}
    for d in root.iterdir():
        if (d / "vllm").is_dir() and all(p.isdigit() for p in d.name.split(".")):
            minor = ".".join(d.name.split(".")[:2])
            if minor not in newest or _key(d.name) > _key(newest[minor]):
                newest[minor] = d.name
    data: dict = {"source": " ".join(__doc__.split()), "releases": {}}
    for kind, (rels, cls) in CLASSES.items():
        spans: dict[str, list[str]] = {}
        for minor in sorted(newest, key=_key):
            names = next((n for rel in rels
                          if (n := fields(root / newest[minor] / "vllm" / rel, cls)) is not None),
                         None)
            if names is None:
                continue
            data["releases"].setdefault(kind, []).append(newest[minor])
            for n in names:
                spans.setdefault(n, [minor, minor])[1] = minor
        data[kind] = dict(sorted(spans.items()))
    OUT.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
