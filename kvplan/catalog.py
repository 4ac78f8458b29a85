"""The offline catalogs: built-in `models.yaml` / `gpus.yaml` plus user catalog files.

User files come from `--catalog FILE` (repeatable) and `KVPLAN_CATALOG` (paths separated by
the OS path separator); a user entry with the same key replaces the built-in one. A catalog
file may hold `models:`, `gpus:` or both. Schema: docs/catalogs.md.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import field
from functools import cache
from pathlib import Path
from typing import Any

from kvplan.core.record import record
from kvplan.errors import BadInput, yaml_problem

ENV_VAR = "KVPLAN_CATALOG"


def builtin_path(name: str) -> Path:
    """Packaged copy inside the wheel, else the repository root (editable installs)."""
    packaged = Path(__file__).parent / "data" / name
    if packaged.exists():
        return packaged
    return Path(__file__).resolve().parent.parent / name


@cache
def _load_yaml(path: str, mtime: float) -> dict[str, Any]:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.load(f, Loader=loader)
    except OSError as e:
        raise BadInput(f"cannot read catalog {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise BadInput(f"catalog {path} is not UTF-8 text", hint="save it as UTF-8") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise BadInput(f"catalog {path}{where} is not valid YAML: {yaml_problem(e)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise BadInput(f"catalog {path} must be a mapping with 'models:' and/or 'gpus:'")
    return data


def load_file(path: str | Path) -> dict[str, Any]:
    if not str(path).strip():
        raise BadInput("a catalog path is empty (--catalog '' or an empty KVPLAN_CATALOG "
                       "entry)", hint="name a catalog YAML file")
    p = Path(path)
    if not p.exists():
        raise BadInput(f"catalog file {p} does not exist")
    if p.is_dir():
        raise BadInput(f"catalog {p} is a directory", hint="name a catalog YAML file in it")
    return _load_yaml(str(p), p.stat().st_mtime)


_TOP_RE = re.compile(r"^([A-Za-z_][\w-]*):")
_ENTRY_RE = re.compile(r"""^  (?:"([^"]+)"|'([^']+)'|([^\s#"'][^:]*?)):\s*(?:#.*)?$""")
_ALIAS_RE = re.compile(r"^    aliases:\s*(\[.*\])\s*(?:#.*)?$")
_CACHE_FORMAT = 2  # bump when the cached index or entry layout changes


class _Lazy:
    """An entry of a catalog file that is parsed only when asked for. `text` gives its YAML
    (the entry's lines, dedented to the top level); `cached` is where its parsed value is
    kept between runs (None: nowhere), so a warm start needs no YAML parser."""

    __slots__ = ("key", "text", "cached", "_value")

    def __init__(self, key: str, text: Callable[[], str], cached: str | None = None):
        self.key, self.text, self.cached, self._value = key, text, cached, None

    def value(self) -> dict[str, Any]:
        if self._value is None:
            self._value = _read_json(Path(self.cached)) if self.cached else None
        if self._value is None:
            import yaml

            loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
            data = yaml.load(self.text(), Loader=loader) or {}
            self._value = data.get(self.key) if isinstance(data, dict) else None
            if not isinstance(self._value, dict):
                raise BadInput(f"catalog entry {self.key!r} is not a mapping")
            if self.cached:
                _write_json(Path(self.cached), self._value)
        return self._value


def scan_section(text: str, kind: str) -> list[tuple[str, int, int, list[str]]] | None:
    """Index the entries of one section without parsing YAML (fast start-up): (key, first
    and end character offsets of its lines, names).

    Works on files laid out like the built-in catalogs (2-space entry keys, 4-space fields,
    flow-style alias lists); returns None for any other layout so the caller parses fully.
    """
    heads: list[tuple[int, str, list[str]]] = []
    inside, stop, pos = False, len(text), 0
    for line in text.split("\n"):
        start, pos = pos, pos + len(line) + 1
        if not line or line[0] == "#":
            continue
        if line[0] != " ":
            if inside:
                stop = start
                break
            inside = line.startswith(kind + ":")
            continue
        if not inside:
            continue
        if line[2] != " ":
            if line[2] == "#":
                continue
            m = _ENTRY_RE.match(line)
            if not m:
                return None
            heads.append((start, next(g for g in m.groups() if g is not None).strip(), []))
        elif line.startswith("    aliases:"):
            a = _ALIAS_RE.match(line)
            if not a or not heads:
                return None
            heads[-1][2].extend(_flow_list(a.group(1)))
        elif line.startswith("    name:") and heads:
            heads[-1][2].append(line[9:].strip().strip("\"'"))
    return [(key, i, heads[n + 1][0] if n + 1 < len(heads) else stop, names)
            for n, (i, key, names) in enumerate(heads)]


def _dedent(text: str, start: int, end: int) -> str:
    return "\n".join(x[2:] for x in text[start:end].split("\n"))


def _read_json(path: Path) -> Any:
    import json

    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None


def _write_json(path: Path, value: Any) -> None:
    import json

    try:  # written aside and renamed, so a reader never sees half a file
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(value))
        os.replace(tmp, path)
    except (OSError, TypeError, ValueError):
        pass  # a read-only cache only costs the next run the YAML parse


def _prune(slot: Path) -> None:
    """Remove the slots of earlier versions of the same catalog file (best effort); other
    files' slots, such as another installation's, stay."""
    import shutil

    try:  # (the second pattern: slots of kvplan's earlier one-hash naming)
        kind = slot.name.split("-")[0]
        for old in [*slot.parent.glob(slot.name.rsplit("-", 1)[0] + "-*"),
                    *slot.parent.glob(kind + "-" + "?" * 8)]:
            if old != slot:
                shutil.rmtree(old, ignore_errors=True)
    except OSError:
        pass


def _scan_cached(path: Path, kind: str) -> list[tuple[str, _Lazy, list[str]]] | None:
    """`scan_section` of a catalog file, its index and parsed entries kept in the cache
    under the file's path, size and modification time (a changed file gets a new slot). The
    names come back normalised (`_norm`), the key first."""
    import zlib

    from kvplan.cachedir import cache_root

    try:
        st = path.stat()
    except OSError:
        return None
    where = f"{path.resolve()}|{kind}"
    ident = f"{_CACHE_FORMAT}|{where}|{st.st_size}|{st.st_mtime_ns}"
    slot = (cache_root() / "catalog"
            / f"{kind}-{zlib.crc32(where.encode()):08x}-{zlib.crc32(ident.encode()):08x}")
    index = _read_json(slot / "index.json")
    text: list[str] = []

    def source() -> str:
        if not text:
            try:
                text.append(path.read_text(encoding="utf-8"))
            except UnicodeDecodeError:
                raise BadInput(f"catalog {path} is not UTF-8 text",
                               hint="save it as UTF-8") from None
        return text[0]

    if not (isinstance(index, dict) and index.get("ident") == ident):
        scanned = scan_section(source(), kind)
        if scanned is None:
            return None
        index = {"ident": ident, "entries": [(key, start, end, [_norm(n) for n in [key, *names]])
                                             for key, start, end, names in scanned]}
        _prune(slot)
        _write_json(slot / "index.json", index)
    out = []
    where = os.path.join(str(slot), "")  # plain strings: 250 Path joins cost ~2 ms a run
    for n, (key, start, end, names) in enumerate(index["entries"]):
        def entry_text(start: int = start, end: int = end) -> str:
            return _dedent(source(), start, end)

        out.append((key, _Lazy(key, entry_text, f"{where}{n}.json"), names))
    return out


def _flow_list(text: str) -> list[str]:
    inner = text.strip()[1:-1]
    items = re.findall(r'"((?:[^"\\]|\\.)*)"|\'([^\']*)\'|([^,\s][^,]*)', inner)
    return [next(x for x in item if x).strip() for item in items if any(item)]


_SEP_RE = re.compile(r"[\s_\-]+")


def _norm(s: str) -> str:
    """Case-, space-, dash- and underscore-insensitive key."""
    return _SEP_RE.sub("-", str(s).strip().lower())


@record
class Catalog:
    """Merged entries of one kind ('models' or 'gpus') with an alias index."""

    kind: str
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    origin: dict[str, str] = field(default_factory=dict)
    _index: dict[str, str] = field(default_factory=dict)
    shadowed: dict[str, str] = field(default_factory=dict)  # a name -> the entry it meant before
    # a name two entries of one file answer to -> (the first, the second, the file): an error
    # when that name is looked up, not when the file loads (unrelated names still work)
    ambiguous: dict[str, tuple[str, str, str]] = field(default_factory=dict)

    def add(self, key: str, entry: dict[str, Any] | _Lazy, origin: str,
            names: list[str] | None = None, normalised: bool = False) -> None:
        """One entry under `key` and its names (`normalised`: already `_norm`ed, the key
        among them; the cached index's form)."""
        if isinstance(entry, dict):
            names = [*(entry.get("aliases") or []), *([entry["name"]] if entry.get("name")
                                                      else [])]
        elif not isinstance(entry, _Lazy):
            raise BadInput(f"{self.kind} entry {key!r} in {origin} must be a mapping")
        self.entries[key] = entry
        self.origin[key] = origin
        for n in (names or []) if normalised else [key, *(names or [])]:
            n = n if normalised else _norm(n)
            before = self._index.get(n)
            if before is not None and before != key:
                self.shadowed[n] = before
                if self.origin.get(before) == origin:
                    self.ambiguous[n] = (before, key, origin)
            if n in self.ambiguous and self.ambiguous[n][2] != origin:
                del self.ambiguous[n]  # a later file takes the name over
            self._index[n] = key

    def entry(self, key: str) -> dict[str, Any]:
        e = self.entries[key]
        if isinstance(e, _Lazy):
            e = self.entries[key] = e.value()
        return e

    def items(self) -> list[tuple[str, dict[str, Any]]]:
        return [(k, self.entry(k)) for k in self.entries]

    def get(self, name: str) -> tuple[str, dict[str, Any]] | None:
        amb = self.ambiguous.get(_norm(name))
        if amb:
            raise BadInput(f"catalog {amb[2]}: {self.kind[:-1]}s {amb[0]!r} and {amb[1]!r} both "
                           f"answer to the name {_norm(name)!r}", hint="each id, alias and "
                           "name picks one entry; remove it from one of them")
        key = self._index.get(_norm(name))
        if key is None:
            return None
        return key, self.entry(key)

    def provenance(self, name: str) -> str:
        """Where a user file's entry for `name` comes from ("" for a built-in one)."""
        key = self._index.get(_norm(name))
        src = self.origin.get(key or "", "")
        if not key or src == str(builtin_path(f"{self.kind}.yaml")):
            return ""
        prev = self.shadowed.get(_norm(name))
        return (f"catalog {self.kind[:-1]} {key!r} in {src}"
                + (f", whose name {name!r} hides {prev!r}" if prev else ""))

    def suggestions(self, name: str, n: int = 3) -> list[str]:
        import difflib  # only an unknown name needs it

        pool = {_norm(k): k for k in self.entries}
        pool.update({a: self._index[a] for a in self._index})
        hits = difflib.get_close_matches(_norm(name), list(pool), n=n * 2, cutoff=0.5)
        out: list[str] = []
        for h in hits:
            k = pool[h] if h in pool else self._index[h]
            if k not in out:
                out.append(k)
        return out[:n]


def user_catalog_paths(extra: list[str] | None = None) -> list[str]:
    """The default user file (if it exists), then KVPLAN_CATALOG, then --catalog files."""
    paths = [p for p in os.environ.get(ENV_VAR, "").split(os.pathsep) if p]
    home = default_user_catalog()
    first = [str(home)] if home.exists() and str(home) not in paths else []
    return first + paths + list(extra or [])


def load(kind: str, extra: list[str] | None = None) -> Catalog:
    """Built-in entries, then user files in order (later files win)."""
    cat = Catalog(kind)
    builtin = builtin_path(f"{kind}.yaml")
    sources = ([str(builtin)] if builtin.exists() else []) + user_catalog_paths(extra)
    for src in sources:
        if src == str(builtin):
            scanned = _scan_cached(Path(src), kind)
            if scanned is not None:
                for key, lazy, names in scanned:
                    cat.add(key, lazy, src, names, normalised=True)
                continue
        data = load_file(src)
        from kvplan.catalog_schema import check_entry, check_file

        check_file(data, src)
        section = data.get(kind) or {}
        if not isinstance(section, dict):
            raise BadInput(f"'{kind}:' in catalog {src} must be a mapping of id -> entry")

        for key, entry in section.items():
            check_entry(kind, str(key), entry, src)
            cat.add(str(key), entry, src)
    return cat


# Config keys that never change sizing; dropped when kvplan writes a catalog entry (`auto_map`
# is kept: it decides whether vLLM falls back to its Transformers backend, engines/vllm_archs).
DROP_CONFIG_KEYS = {
    "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id",
    "initializer_range", "transformers_version", "_name_or_path", "id2label",
    "label2id", "use_cache", "attention_dropout", "hidden_dropout", "embd_pdrop", "resid_pdrop",
    "output_attentions", "output_hidden_states", "return_dict", "chat_template",
    "tokenizer_class", "torchscript", "problem_type", "task_specific_params",
}


def trim_config(config: dict[str, Any]) -> dict[str, Any]:
    """The config without keys that never change sizing (recursively into sub-configs)."""
    out: dict[str, Any] = {}
    for k, v in config.items():
        if k in DROP_CONFIG_KEYS:
            continue
        out[k] = trim_config(v) if isinstance(v, dict) and k.endswith("_config") else v
    return out


def entry_from_record(rec: dict[str, Any], aliases: list[str] | None = None) -> dict[str, Any]:
    """A `models.yaml` entry for a fetched model record (docs/catalogs.md)."""
    from kvplan.core.arch import inner_text_config

    cfg = rec["config"]
    t = inner_text_config(cfg) or cfg
    entry: dict[str, Any] = {"aliases": list(aliases or []),
                             "family": str(t.get("model_type") or cfg.get("model_type", ""))}
    if rec.get("weights_bytes"):
        entry["weights_bytes"] = int(rec["weights_bytes"])
        entry["weights_source"] = rec.get("weights_source", "")
    if rec.get("weights_layout"):
        entry["weights_layout"] = rec["weights_layout"]
    entry["config"] = trim_config(cfg)
    if rec.get("quant_config"):
        entry["quant_config"] = rec["quant_config"]
    if rec.get("st_checked"):  # the Hub showed whether modules.json exists
        entry["sentence_transformers"] = {"modules": rec.get("st_modules") or [],
                                          "pooling": rec.get("st_configs") or {}}
        if rec.get("st_encoder"):
            entry["sentence_transformers"]["encoder"] = rec["st_encoder"]
    return entry


def write_models(path: str | Path, entries: dict[str, dict[str, Any]]) -> int:
    """Merge `entries` into the `models:` section of a user catalog file (created if needed)."""
    import yaml

    p = Path(path).expanduser()
    if p.is_dir():
        raise BadInput(f"cannot write catalog {p}: it is a directory",
                       hint=f"name a file, e.g. {p / 'models.yaml'}")
    data: dict[str, Any] = dict(load_file(p)) if p.exists() else {}
    other = [str(k) for k in data if k != "schema_version"]
    if other and "models" not in data and "gpus" not in data:  # a plan file, a manifest
        raise BadInput(f"{p} is not a kvplan catalog (it has {', '.join(other[:3])}"
                       f"{', ...' if len(other) > 3 else ''} and no models: or gpus:); "
                       "nothing was written", hint="name a new file or an existing catalog")
    models = dict(data.get("models") or {})
    for key, entry in entries.items():  # a name given again moves to the new entry
        taken = {_norm(x) for x in [key, *(entry.get("aliases") or [])]}
        for name, old in list(models.items()):
            if name != key and isinstance(old, dict) and old.get("aliases"):
                kept = [a for a in old["aliases"] if _norm(a) not in taken]
                if kept != old["aliases"]:
                    models[name] = {**old, "aliases": kept}
    models.update(entries)
    data["schema_version"] = data.get("schema_version", 1)
    data["models"] = models
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(yaml.safe_dump(data, sort_keys=False, width=100), encoding="utf-8")
    except OSError as e:
        raise BadInput(f"cannot write catalog {p}: {e.strerror}") from None
    _load_yaml.cache_clear()
    return len(entries)


def default_user_catalog() -> Path:
    """Where `kvplan models add` writes without --catalog: the first KVPLAN_CATALOG file, else
    ~/.config/kvplan/models.yaml (picked up automatically by `load`)."""
    env = [x for x in os.environ.get(ENV_VAR, "").split(os.pathsep) if x]
    if env:
        return Path(env[0])
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    return Path(base) / "kvplan" / "models.yaml"
