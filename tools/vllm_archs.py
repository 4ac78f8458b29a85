"""Write kvplan/engines/vllm_archs.json: the architectures each vLLM release's model registry
lists, and the Transformers model classes its Transformers backend can fall back to.

Usage: python tools/vllm_archs.py DIR [TRANSFORMERS_DIR ...]  (DIR/<version>/vllm/... holds
each release's Python files, e.g. from `pip download vllm==X --no-deps` and unzip '*.py';
each TRANSFORMERS_DIR holds transformers/models/auto/modeling_auto.py of one transformers
wheel). Reads, without importing vLLM, the names `_VLLM_MODELS` spreads
(`**_TEXT_GENERATION_MODELS`, `**_MULTIMODAL_MODELS`, ... in model_executor/models/registry.py
from 0.6.3; `_MODELS` in model_executor/models/__init__.py before) with `ast`. Every release
is read, patches too; each name is written as the first and last release that lists it (two
more for each time it left the registry and came back). The Transformers classes are the
names in modeling_auto.py's `*_MAPPING_NAMES` (the union over the wheels given), grouped by
suffix; without TRANSFORMERS_DIR the current file's are kept.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "kvplan/engines/vllm_archs.json"
FILES = (("model_executor/models/registry.py", "_VLLM_MODELS"),
         ("model_executor/models/__init__.py", "_MODELS"))
SUFFIXES = ("ForConditionalGeneration", "ForSequenceClassification", "ForTokenClassification",
            "ForQuestionAnswering", "ForImageClassification", "ForMultipleChoice",
            "ForCausalLM", "ForMaskedLM", "LMHeadModel", "Model")


def _key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v)[:4])


def _names(dicts: dict[str, ast.Dict], d: ast.Dict) -> set[str]:
    out: set[str] = set()
    for k, v in zip(d.keys, d.values):
        if isinstance(k, ast.Constant) and isinstance(k.value, str):
            out.add(k.value)
        elif k is None and isinstance(v, ast.Name) and v.id in dicts:
            out |= _names(dicts, dicts[v.id])  # `**_TEXT_GENERATION_MODELS`
        # `**{k: ... for k, ... in _TEXT_GENERATION_MODELS.items() ...}` re-lists its names
    return out


def registered(root: Path) -> set[str] | None:
    """The architecture names a release's registry lists (None: no registry found)."""
    for rel, top in FILES:
        path = root / "vllm" / rel
        if not path.is_file():
            continue
        dicts: dict[str, ast.Dict] = {}
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            target = node.targets[0] if isinstance(node, ast.Assign) else \
                node.target if isinstance(node, ast.AnnAssign) else None
            if isinstance(target, ast.Name) and isinstance(node.value, ast.Dict):
                dicts[target.id] = node.value
        if top in dicts:
            return _names(dicts, dicts[top])
    return None


def transformers_classes(dirs: list[Path]) -> set[str]:
    out: set[str] = set()
    for d in dirs:
        path = d / "transformers/models/auto/modeling_auto.py"
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) \
                    and node.targets[0].id.endswith("_MAPPING_NAMES"):
                out |= {c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant)
                        and isinstance(c.value, str) and c.value[:1].isupper()}
    return out


def main(src: Path, tf_dirs: list[Path]) -> None:
    releases, spans = [], {}
    for d in sorted(src.iterdir(), key=lambda p: _key(p.name)):
        got = registered(d) if re.fullmatch(r"[\d.]+(post\d+)?", d.name) else None
        if got is None:
            continue
        releases.append(d.name)
        for n in got:  # a name that left the registry and came back gets a second span
            s = spans.setdefault(n, [d.name, d.name])
            if s[-1] not in releases[-2:]:
                s += [d.name, d.name]
            s[-1] = d.name
    if tf_dirs:
        groups: dict[str, list[str]] = {}
        for n in sorted(transformers_classes(tf_dirs)):
            s = next((s for s in SUFFIXES if n.endswith(s) and n != s), "")
            groups.setdefault(s, []).append(n[:len(n) - len(s)])
        tf = {"from": " ".join(p.name for p in tf_dirs),
              "suffixes": {s: " ".join(p) for s, p in sorted(groups.items())}}
    else:
        tf = json.loads(OUT.read_text(encoding="utf-8"))["transformers"]
    body = ",\n".join(f" {json.dumps(n)}: {json.dumps(s)}" for n, s in sorted(spans.items()))
    OUT.write_text("{\"source\": " + json.dumps(" ".join(__doc__.split()))
                   + ",\n\"releases\": " + json.dumps(releases)
                   + ",\n\"transformers\": " + json.dumps(tf)
                   + ",\n\"archs\": {\n" + body + "\n}}\n", encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]])
