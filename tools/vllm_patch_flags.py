"""Write kvplan/engines/vllm_patch_flags.json: how each patch release's `vllm serve` flags
differ from its minor's recorded release in vllm_flags.json (one parser record a minor).

Usage: python tools/vllm_patch_flags.py DIR  (DIR/<version>/vllm/... holds each release's
Python files, e.g. from `pip download vllm==X --no-deps` and unzip '*.py'). Reads, without
importing vLLM, the option strings `add_argument` registers and the annotated fields of
`EngineArgs` / `FrontendArgs` (whose fields become flags) in engine/arg_utils.py and the
entrypoints; the same reading of two patches of one minor gives the flags one added or
removed; a minor without a record (0.7) is read against the record kvplan reads it with.
A flag some parser record has takes that record's parsing; a flag no record has (one only
in patches older than every record, such as 0.6.0-0.6.3's --max-context-len-to-capture)
counts when a literal `add_argument` call registers it, with the parsing that call gives
(`takes_value` from its `action` / `nargs`, its other option strings as aliases, `deprecated`
from `deprecated=True` or a help text that says so); an `EngineArgs` field alone does not
make a flag (several never become one).

A patch's entry is `{"record": minor, "lacks": [...], "has": {flag: info}}`, plus, where the
patch differs from its record, `deprecated` / `undeprecated` (flags its `add_argument` calls
mark deprecated or not, read the same way in both) and `kv_cache_dtypes` (its `CacheDType`
Literal, else the `--kv-cache-dtype` choices). `releases` lists every release read, so a
release listed without an entry has its record's flags.
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


_NO_VALUE = {"store_true", "store_false", "store_const", "count", "help", "version",
             "BooleanOptionalAction"}


def _text(node: ast.AST | None) -> str:
    """The literal text of a help string (implicit concatenation, `+`, f-string parts)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(_text(v) for v in node.values)
    if isinstance(node, ast.BinOp):
        return _text(node.left) + _text(node.right)
    return ""


def calls(root: Path) -> dict[str, dict]:
    """Each option string a literal `add_argument` call registers, with the parsing that
    call gives: takes_value, aliases (its other option strings), negations
    (BooleanOptionalAction), optional_value (nargs='?'), deprecated."""
    out: dict[str, dict] = {}
    for rel in FILES:
        path = root / "vllm" / rel
        if not path.is_file():
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "add_argument"):
                continue
            names = [a.value for a in node.args if isinstance(a, ast.Constant)
                     and isinstance(a.value, str) and a.value.startswith("-")]
            if not names:
                continue
            kw = {k.arg: k.value for k in node.keywords if k.arg}
            action = kw.get("action")
            act = (action.value if isinstance(action, ast.Constant) else action.attr
                   if isinstance(action, ast.Attribute) else action.id
                   if isinstance(action, ast.Name) else None)
            nargs = kw.get("nargs")
            nargs = nargs.value if isinstance(nargs, ast.Constant) else None
            info: dict = {"takes_value": act not in _NO_VALUE and nargs not in ("?", 0)}
            if nargs == "?":
                info["optional_value"] = True
            long = [n for n in names if n.startswith("--")]
            canon = long[0] if long else names[0]
            info["aliases"] = [n for n in names if n != canon]
            if act == "BooleanOptionalAction":
                info["negatable"] = True
                info["negations"] = ["--no-" + n[2:] for n in long]
            dep = kw.get("deprecated")
            if (isinstance(dep, ast.Constant) and dep.value is True) or \
                    "deprecated" in _text(kw.get("help")).lower():
                info["deprecated"] = True
            out.setdefault(canon, info)
    return out


def kv_cache_dtypes(root: Path) -> list[str] | None:
    """The names `--kv-cache-dtype` takes: the `CacheDType` Literal (config/cache.py from
    0.11, config/__init__.py in 0.10, config.py in 0.8.5-0.9), else the option's choices
    (0.6-0.8 arg_utils.py)."""
    for rel in ("config/cache.py", "config/__init__.py", "config.py"):
        path = root / "vllm" / rel
        if not path.is_file():
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and
                                                    t.id == "CacheDType" for t in node.targets):
                sl = node.value.slice if isinstance(node.value, ast.Subscript) else None
                elts = sl.elts if isinstance(sl, ast.Tuple) else [sl]
                return [e.value for e in elts if isinstance(e, ast.Constant)]
    path = root / "vllm/engine/arg_utils.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr == "add_argument" and any(
                    isinstance(a, ast.Constant) and a.value == "--kv-cache-dtype"
                    for a in node.args):
            ch = next((k.value for k in node.keywords if k.arg == "choices"), None)
            if isinstance(ch, (ast.List, ast.Tuple)):
                return [e.value for e in ch.elts if isinstance(e, ast.Constant)]
    return None


def _deprecated(root: Path) -> set[str]:
    return {f for f, i in calls(root).items() if i.get("deprecated")}


def main(src: Path) -> None:
    recs = json.loads(RECORD.read_text(encoding="utf-8"))["versions"]
    order = sorted(recs, key=_key)
    in_records = set().union(*(r["flags"] for r in recs.values()))

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

    patches, releases = {}, []
    for minor in order:
        rec = recs[minor]
        if not (src / rec["release"]).is_dir():
            continue
        base = src / rec["release"]
        have, known = options(base), set(rec["flags"])
        dep0, kv0 = _deprecated(base), kv_cache_dtypes(base)
        releases.append(rec["release"])
        for d in sorted(src.iterdir(), key=lambda p: _key(p.name)):
            if d.name == rec["release"] or record_of(d.name) != minor:
                continue
            releases.append(d.name)
            got, literal = options(d), calls(d)
            lacks = sorted((have - got) & known)
            extra = {}
            for f in sorted(got - have - known):
                if info(f, minor) is not None:
                    extra[f] = info(f, minor)
                elif f not in in_records and f in literal:  # only in patches before records
                    extra[f] = literal[f]
            entry: dict = {"record": minor, "lacks": lacks, "has": extra}
            flags = (known - set(lacks)) | set(extra)  # the patch's, as kvplan reads it
            dep = _deprecated(d)
            if (dep - dep0) & flags:
                entry["deprecated"] = sorted((dep - dep0) & flags)
            if (dep0 - dep) & flags:
                entry["undeprecated"] = sorted((dep0 - dep) & flags)
            kv = kv_cache_dtypes(d)
            if kv is not None and kv0 is not None and set(kv) != set(kv0):
                entry["kv_cache_dtypes"] = kv
            if lacks or extra or len(entry) > 3:
                patches[d.name] = entry
    out = {"source": "tools/vllm_patch_flags.py over the released wheels' Python files",
           "releases": sorted(releases, key=_key), "patches": patches}
    OUT.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
