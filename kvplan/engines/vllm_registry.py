"""Which `vllm serve` flags exist in which vLLM release (`vllm_flags.json`, read off each
release's own argparse parser; docs/vllm-flags.md), and how vLLM spells and parses them:
underscores may replace dashes, a unique prefix of a long option is accepted where the
release's parser allows abbreviations, `--no-x`/`--disable-x` negate boolean flags."""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from kvplan.core.versions import VllmVersion

DATA = Path(__file__).with_name("vllm_flags.json")
# how other patches of a minor differ from its record (tools/vllm_patch_flags.py)
PATCHES = Path(__file__).with_name("vllm_patch_flags.json")


@lru_cache(maxsize=1)
def _data() -> dict:
    return json.loads(DATA.read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def _patches() -> dict:
    return json.loads(PATCHES.read_text(encoding="utf-8"))["patches"]


@dataclass(frozen=True)
class Flag:
    name: str  # canonical spelling
    takes_value: bool
    spelled: str  # how the user wrote it
    negated: bool = False
    deprecated: bool = False
    choices: tuple[str, ...] = ()


def recorded_versions() -> list[str]:
    """The releases with recorded flags, oldest first ('0.6', ..., '0.33')."""
    return sorted(_data()["versions"], key=lambda k: tuple(int(x) for x in k.split(".")))


class Registry:
    """The flags of one release: the newest recorded release not newer than the target, and
    for a patch given in full (`0.10.0`) whose flags differ from its minor's record, that
    patch's own (`later` names the patch that adds a flag it lacks, `removed` the last
    release that had a flag the patch dropped)."""

    def __init__(self, version: str | None):
        v = VllmVersion.of(version)
        versions = _data()["versions"]
        keys = sorted(versions, key=lambda k: tuple(int(x) for x in k.split(".")))
        best = keys[0]
        for k in keys:
            if tuple(int(x) for x in k.split(".")) <= v.v[:2]:
                best = k
        self.key = best
        self.release = versions[best]["release"]
        self.parser = versions[best].get("parser", {})
        self.flags: dict[str, dict] = versions[best]["flags"]
        self.later: dict[str, str] = {}
        self.removed: dict[str, str] = {}  # flag -> the last release of the minor with it
        text = v.text
        if text.count(".") == 1 and text not in versions:  # a minor without a record (0.7):
            text = max((k for k in _patches() if k.startswith(text + ".")),  # its last patch
                       key=lambda k: VllmVersion.of(k).v, default=text)
        elif text.count(".") >= 2 and text not in _patches():  # an unrecorded patch: the
            text = max((k for k, e in _patches().items() if e["record"] == best  # nearest
                        and VllmVersion.of(k).v <= v.v), key=lambda k: VllmVersion.of(k).v,
                       default=self.release)  # release at or below it, record included
            if VllmVersion.of(text).v < VllmVersion.of(self.release).v <= v.v:
                text = self.release
        patch = _patches().get(text) if text.count(".") >= 2 else None
        if patch and patch["record"] == best:
            self.release, v = text, VllmVersion.of(text)
            self.flags = {k: i for k, i in self.flags.items() if k not in patch["lacks"]}
            self.flags.update(patch["has"])
            newer = sorted((k for k, e in _patches().items() if e["record"] == best
                            and VllmVersion.of(k).v > v.v), key=lambda k: VllmVersion.of(k).v)
            record = versions[best]["release"]
            for flag in patch["lacks"]:
                if v.v > VllmVersion.of(record).v:  # dropped after the record
                    self.removed[flag] = record
                else:
                    self.later[flag] = next((k for k in newer
                                             if flag not in _patches()[k]["lacks"]), record)
        at = VllmVersion.of(self.release).v
        for k, e in sorted(_patches().items(), key=lambda kv: VllmVersion.of(kv[0]).v):
            if e["record"] == best and VllmVersion.of(k).v > at:  # after the record
                for flag in e["has"]:
                    if flag not in self.flags:
                        self.later.setdefault(flag, k)
        self._spell: dict[str, tuple[str, bool]] = {}
        for name, info in self.flags.items():
            self._spell[name] = (name, False)
            for a in info.get("aliases", []):
                self._spell[a] = (name, False)
            for n in info.get("negations", []):
                self._spell[n] = (name, True)

    def lookup(self, spelled: str) -> Flag | None:
        """Resolve a flag as vLLM's parser would, or None if the parser rejects it."""
        s = spelled.split("=", 1)[0]
        if s.startswith("--") and "." in s and self.parser.get("dotted_json_args"):
            s = s.split(".", 1)[0]  # --compilation-config.level 3
        cands = [s]
        if s.startswith("--"):
            cands.append("--" + s[2:].replace("_", "-"))
        for c in cands:
            hit = self._spell.get(c)
            if hit:
                return self._flag(hit[0], spelled, hit[1])
        if s.startswith("--") and self.parser.get("prefix_abbreviations_ok", True):
            norm = "--" + s[2:].replace("_", "-")
            matches = {self._spell[k][0] for k in self._spell if k.startswith(norm)}
            if len(matches) == 1:
                name = matches.pop()
                return self._flag(name, spelled, False)
        return None

    def _flag(self, name: str, spelled: str, negated: bool) -> Flag:
        info = self.flags[name]
        return Flag(name, bool(info.get("takes_value")) and not negated, spelled, negated,
                    bool(info.get("deprecated")),
                    tuple(str(x) for x in info.get("choices") or info.get("known_values") or ()))

    def suggest(self, spelled: str) -> str | None:
        s = "--" + spelled.split("=", 1)[0].lstrip("-").replace("_", "-")
        close = difflib.get_close_matches(s, list(self._spell), n=1, cutoff=0.6)
        return close[0] if close else None

    def unknown(self, flags: list[str]) -> list[str]:
        """Flags (tokens starting with '-') this release's parser would reject."""
        return [f for f in flags if f.startswith("-") and not _is_number(f)
                and self.lookup(f) is None]


def _is_number(tok: str) -> bool:
    try:
        float(tok)
        return True
    except ValueError:
        return False


def check_choice(flag: str, value: str, version: str | None) -> None:
    """BadInput when the release has no `value` for `flag` (argparse's choices, or the names
    vLLM validates later, as `vllm_flags.json` records them); says when it existed."""
    from kvplan.errors import BadInput

    reg = Registry(version)
    info = reg.lookup(flag)
    known = [c for c in (info.choices if info else ()) if c != "None"]
    if not known or value in known or value == "None":
        return
    keys = recorded_versions()
    seen = [i for i, k in enumerate(keys)
            if value in ((Registry(k).lookup(flag) or info).choices)]
    older = [i for i in seen if i < keys.index(reg.key)]
    when = (f" (it had it up to {keys[older[-1]]})" if older
            else f" (it has it from {keys[seen[0]]})" if seen else "")
    close = difflib.get_close_matches(value.lower(), known, n=3, cutoff=0.6)
    raise BadInput(f"vLLM {reg.release} has no {flag} {value}{when}",
                   hint=f"did you mean {' or '.join(close)}?" if close
                   else f"use one of {', '.join(known)}", flag=flag.lstrip("-").replace("-", "_"))
