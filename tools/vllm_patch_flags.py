"""Write kvplan/engines/vllm_patch_flags.json: how each patch release's `vllm serve` flags
differ from its minor's recorded release in vllm_flags.json (one parser record a minor).

Usage: python tools/vllm_patch_flags.py DIR  (DIR/<version>/vllm/... holds each release's
Python files, e.g. from `pip download vllm==X --no-deps` and unzip '*.py'). Reads, without
importing vLLM, the option strings `add_argument` registers and the annotated fields of
`EngineArgs` / `FrontendArgs` (whose fields become flags) in engine/arg_utils.py and the
entrypoints; the same reading of two patches of one minor gives the flags one added or
removed; a minor without a record (0.7) is read against the record kvplan reads it with.
A flag counts only if some parser record has it (that record gives its parsing);
a patch's entry is `{"record": minor, "lacks": [...], "has": {flag: info}}`.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

ENGINES = Path(__file__).resolve().parent.parent / "kvplan/engines"
RECORD, OUT = ENGINES / "vllm_flags.json", ENGINES / "vllm_patch_flags.json"
FILES = ("engine/arg_utils.py", "entrypoints/openai/cli_args.py", "entrypoints/cli/serve.py",
         "entrypoints/openai/api_server.py")
CLASSES = {"engine/arg_utils.py": ("EngineArgs",),
           "entrypoints/openai/cli_args.py": ("FrontendArgs", "BaseFrontendArgs")}
_OPTION = re.compile(r"""add_argument\(\s*["'](--[a-z][a-z0-9-]*)"""
                     r"""|["'](--[a-z][a-z0-9-]*)["']\s*,""")


def _key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v)[:4])


def options(root: Path) -> set[str]:
    out: set[str] = set()
    for rel in FILES:
        path = root / "vllm" / rel
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        out |= {a or b for a, b in _OPTION.findall(text)}
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.name in CLASSES.get(rel, ()):
                out |= {"--" + b.target.id.replace("_", "-") for b in node.body
                        if isinstance(b, ast.AnnAssign) and isinstance(b.target, ast.Name)
                        and not b.target.id.startswith("_")}
    return out


def main(src: Path) -> None:
    recs = json.loads(RECORD.read_text(encoding="utf-8"))["versions"]
    order = sorted(recs, key=_key)

    def info(flag: str, minor: str) -> dict | None:
        """The flag's parsing in the nearest record: the next minor's, else an earlier one."""
        i = order.index(minor)
        for k in order[i + 1:] + order[:i][::-1]:
            if flag in recs[k]["flags"]:
                return recs[k]["flags"][flag]
        return None

    def record_of(release: str) -> str | None:  # the record kvplan reads a release with
        keys = [k for k in order if _key(k) <= _key(release)[:2]]
        return keys[-1] if keys else None

    patches = {}
    for minor in order:
        rec = recs[minor]
        if not (src / rec["release"]).is_dir():
            continue
        have, known = options(src / rec["release"]), set(rec["flags"])
        for d in sorted(src.iterdir(), key=lambda p: _key(p.name)):
            if d.name == rec["release"] or record_of(d.name) != minor:
                continue
            got = options(d)
            lacks = sorted((have - got) & known)
            extra = {f: info(f, minor) for f in sorted(got - have - known)
                     if info(f, minor) is not None}
            if lacks or extra:
                patches[d.name] = {"record": minor, "lacks": lacks, "has": extra}
    out = {"source": "tools/vllm_patch_flags.py over the released wheels' Python files",
           "patches": patches}
    OUT.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
