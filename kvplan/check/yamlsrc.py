"""YAML documents, and objects inside them, that remember where each value was written
(for line-accurate reports).

Documents are composed (`yaml.compose_all`) so every node keeps its start mark, then
constructed with the safe constructor, which also flattens `<<` merge keys in the node tree.
Duplicate keys are refused: YAML parsers silently keep the last one, so the file is ambiguous.

`helm template` output read from stdin names each document's template in a `# Source:`
comment; its locations are then that template's file and the line in Helm's rendering of it
(`helm_places`).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

from kvplan.check.base import InputError, Loc, Token
from kvplan.check.command import tokens_from_string
from kvplan.errors import yaml_problem

# the pure-Python loader: its marks index characters of the text (libyaml counts bytes)
_Loader = yaml.SafeLoader


@dataclass
class Doc:
    """One YAML document of a file: its data and its node tree."""

    file: str
    text: str
    node: yaml.Node
    data: Any
    place: Callable[[int], tuple[str, int]] | None = None  # line -> (file, line) shown

    def node_at(self, *path: Any, base: yaml.Node | None = None) -> yaml.Node | None:
        """The value node at `path` (mapping keys and sequence indexes), or None."""
        n = base if base is not None else self.node
        for key in path:
            n = child(n, key)
            if n is None:
                return None
        return n

    def loc(self, *path: Any, base: yaml.Node | None = None) -> Loc:
        """Where the value at `path` is written; the nearest existing parent if it is not."""
        n = base if base is not None else self.node
        best = n
        for key in path:
            n = child(n, key)
            if n is None:
                break
            best = n
        return self.loc_of(best)

    def key_loc(self, *path: Any, base: yaml.Node | None = None) -> Loc:
        """Where the key of the last element of `path` is written."""
        parent = self.node_at(*path[:-1], base=base)
        if isinstance(parent, yaml.MappingNode):
            for k, _ in reversed(parent.value):
                if isinstance(k, yaml.ScalarNode) and k.value == str(path[-1]):
                    return self.loc_of(k)
        return self.loc(*path, base=base)

    def loc_of(self, node: yaml.Node) -> Loc:
        m = node.start_mark
        file, line = self.at(m.line + 1)
        return Loc(file, line, m.column + 1)

    def at(self, line: int) -> tuple[str, int]:
        """The file and line to show for a line of the text."""
        return self.place(line) if self.place else (self.file, line)

    def raw(self, node: yaml.Node) -> str:
        """The source text of a node (quotes and block indicators included)."""
        return self.text[node.start_mark.index:node.end_mark.index]


def child(node: yaml.Node | None, key: Any) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for k, v in reversed(node.value):  # merged keys come first; explicit keys win
            if isinstance(k, yaml.ScalarNode) and k.value == str(key):
                return v
        return None
    if isinstance(node, yaml.SequenceNode) and isinstance(key, int):
        return node.value[key] if 0 <= key < len(node.value) else None
    return None


def _duplicates(node: yaml.Node, doc: Doc, seen: set[int]) -> None:
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        keys: dict[str, int] = {}
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode) and k.tag != "tag:yaml.org,2002:merge":
                file, line = doc.at(k.start_mark.line + 1)
                if k.value in keys:
                    raise InputError(
                        f"duplicate key {k.value!r} (also on line {keys[k.value]}); YAML "
                        "keeps only the last one, so the file is ambiguous",
                        file=file, line=line, hint="remove one of them")
                keys[k.value] = line
            _duplicates(v, doc, seen)
    elif isinstance(node, yaml.SequenceNode):
        for v in node.value:
            _duplicates(v, doc, seen)


_HELM_SOURCE = re.compile(r"# Source: (\S.*?)\s*$")


def helm_places(text: str, file: str = "<stdin>") -> Callable[[int], tuple[str, int]] | None:
    """For `helm template` output: line -> (template, line in Helm's rendering of that
    template), or None when the text names no template. Helm prints each manifest as
    `---`, `# Source: CHART/templates/X.yaml`, its content (`helm template`'s output; the
    same blocks `--output-dir` writes to that template's file, appending the manifests of a
    template in order, and `--show-only templates/X.yaml` prints), so a line of the
    manifest is its line in that file. Lines before the first block keep their own."""
    lines = text.splitlines()
    starts: list[int] = []  # the `---` line of each block (1-based)
    names: list[str] = []
    for n, line in enumerate(lines, 1):
        m = _HELM_SOURCE.match(line)
        if m:
            starts.append(n - 1)  # the `---` before it (a virtual one on line 0)
            names.append(m.group(1))
    if not starts:
        return None
    ends = starts[1:] + [len(lines) + 1]
    offsets, seen = [], {}  # the lines of a template's earlier blocks
    for name, a, b in zip(names, starts, ends):
        offsets.append(seen.get(name, 0))
        seen[name] = offsets[-1] + b - a

    def place(line: int) -> tuple[str, int]:
        i = bisect.bisect_right(starts, line) - 1
        if i < 0:
            return file, line
        return names[i], offsets[i] + line - starts[i] + 1

    return place


def load_docs(file: str, text: str, helm: bool = False) -> list[Doc]:
    """Every non-empty document of a YAML (or JSON) stream (`helm`: named after the templates
    of `helm template` output, `helm_places`)."""
    try:
        return _load_docs(file, text, helm)
    except RecursionError:  # the parser and constructor recurse once per level
        raise InputError("nested too deeply to read (hundreds of levels of lists or "
                         "mappings)", file=file,
                         hint="a plan file or manifest needs a few levels; check how it was "
                         "generated") from None


def _load_docs(file: str, text: str, helm: bool) -> list[Doc]:
    place = helm_places(text, file) if helm else None
    at = Doc(file, text, None, None, place).at
    try:
        nodes = [n for n in yaml.compose_all(text, Loader=_Loader) if n is not None]
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = yaml_problem(e)
        ctx = getattr(e, "context", None)
        cmark = getattr(e, "context_mark", None)
        if ctx and cmark is not None and (mark is None or cmark.line != mark.line):
            ctx += f" on line {at(cmark.line + 1)[1]}"
        where, line = at(mark.line + 1) if mark else (file, None)
        raise InputError(f"not valid YAML: {problem}" + (f" ({ctx})" if ctx else ""),
                         file=where, line=line,
                         hint="a Helm or Kustomize template must be rendered first "
                              "(helm template … | kvplan check -)" if "{{" in text else None
                         ) from None
    docs = []
    for n in nodes:
        doc = Doc(file, text, n, None, place)
        _duplicates(n, doc, set())
        try:
            doc.data = yaml.constructor.SafeConstructor().construct_document(n)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where, line = at(mark.line + 1) if mark else (file, None)
            raise InputError(f"not valid YAML: {yaml_problem(e)}", file=where,
                             line=line) from None
        docs.append(doc)
    return docs


@dataclass
class Obj:
    """A mapping inside a document, addressed by paths relative to its node."""

    doc: Doc
    node: yaml.Node
    data: Any

    def get(self, *path: Any, default: Any = None) -> Any:
        d = self.data
        for k in path:
            if isinstance(d, dict):
                d = d.get(k)
            elif isinstance(d, list) and isinstance(k, int) and 0 <= k < len(d):
                d = d[k]
            else:
                return default
            if d is None:
                return default
        return d

    def typed(self, *path: Any, kind: type = dict) -> Any:
        """The value at `path`, empty when absent; a value of another type is malformed."""
        v = self.get(*path)
        if v is None:
            return kind()
        if not isinstance(v, kind):
            loc = self.loc(*path)
            what = "a mapping" if kind is dict else "a list"
            raise InputError(f"{'.'.join(str(p) for p in path)} must be {what}",
                             file=loc.file, line=loc.line)
        return v

    def sub(self, *path: Any) -> Obj | None:
        n = self.doc.node_at(*path, base=self.node)
        d = self.get(*path)
        return Obj(self.doc, n, d) if n is not None and isinstance(d, (dict, list)) else None

    def loc(self, *path: Any) -> Loc:
        return self.doc.loc(*path, base=self.node)

    def key_loc(self, *path: Any) -> Loc:
        return self.doc.key_loc(*path, base=self.node)

    def string(self, *path: Any) -> str | None:
        """A string value, None when absent; another type is malformed."""
        v = self.get(*path)
        if v is not None and not isinstance(v, str):
            loc = self.loc(*path)
            raise InputError(f"{path[-1]} must be a string", file=loc.file, line=loc.line)
        return v

    def mapping(self, *path: Any) -> dict[str, tuple[str, Loc]]:
        """A string map (annotations, labels) with the location of each value."""
        d = self.get(*path)
        out: dict[str, tuple[str, Loc]] = {}
        if d is not None and not isinstance(d, (dict, list)):
            self.typed(*path)  # raises
        if isinstance(d, dict):
            for k, v in d.items():
                out[str(k)] = ("" if v is None else text_of(v), self.loc(*path, k))
        elif isinstance(d, list):  # compose labels: ["key=value", ...]
            for i, item in enumerate(d):
                k, _, v = str(item).partition("=")
                out[k] = (v, self.loc(*path, i))
        return out

    def tokens(self, *path: Any, split_strings: bool = False) -> list[Token]:
        n = self.doc.node_at(*path, base=self.node)
        if n is None:
            return []
        if isinstance(n, yaml.SequenceNode):
            out = []
            for item in n.value:
                if not isinstance(item, yaml.ScalarNode):
                    loc = self.doc.loc_of(item)
                    raise InputError(f"{path[-1]} items must be strings",
                                     file=loc.file, line=loc.line)
                out.append(Token(item.value, self.doc.loc_of(item), self.doc.raw(item)))
            return out
        if isinstance(n, yaml.ScalarNode) and (n.value == "" or n.tag.endswith(":null")):
            return []
        loc = self.doc.loc_of(n)
        if isinstance(n, yaml.ScalarNode) and split_strings:
            if not n.tag.endswith((":int", ":float", ":bool")):
                return tokens_from_string(n.value, loc, self.doc.raw(n))
            raise InputError(f"{path[-1]} must be a string or a list of strings, not "
                             f"{n.value}", file=loc.file, line=loc.line,
                             hint="quote it if it is the command line")
        raise InputError(f"{path[-1]} must be a list of strings", file=loc.file, line=loc.line)


def text_of(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def int_at(obj: Obj, *path: Any, what: str) -> int | None:
    v = obj.get(*path)
    if v is None:
        return None
    loc = obj.loc(*path)
    try:
        n = int(str(v))
    except ValueError:
        raise InputError(f"{what} {v!r} is not an integer", file=loc.file,
                         line=loc.line) from None
    if n < 0:  # replicas, GPU counts, sizes: the API server and compose refuse them
        raise InputError(f"{what} {n} is negative", file=loc.file, line=loc.line,
                         hint="give 0 or more")
    return n
