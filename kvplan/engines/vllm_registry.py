"""Which `vllm serve` flags exist in which vLLM release (`vllm_flags.json`, read off each
release's own argparse parser; docs/vllm-flags.md), and how vLLM spells and parses them:
underscores may replace dashes, a unique prefix of a long option is accepted where the
release's parser allows abbreviations, `--no-x`/`--disable-x` negate boolean flags."""

from __future__ import annotations

import difflib
import json
import re
import shlex
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path

from kvplan.core.versions import VllmVersion
from kvplan.units import HUMAN_READABLE_FROM

DATA = Path(__file__).with_name("vllm_flags.json")
# how other patches of a minor differ from its record (tools/vllm_patch_flags.py)
PATCHES = Path(__file__).with_name("vllm_patch_flags.json")


@lru_cache(maxsize=1)
def _data() -> dict:
    return json.loads(DATA.read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def _patch_file() -> dict:
    return json.loads(PATCHES.read_text(encoding="utf-8"))


def _patches() -> dict:
    return _patch_file()["patches"]


def _order(release: str) -> tuple[int, ...]:
    """'0.10.1.1' -> (0, 10, 1, 1): patches of patches and .postN sort after their base."""
    return tuple(int(x) for x in re.findall(r"\d+", release)[:4])


@lru_cache(maxsize=1)
def releases() -> list[str]:
    """Every release whose flags kvplan read (the records and every other released patch
    from 0.6.0, tools/vllm_patch_flags.py), oldest first."""
    return sorted(_patch_file()["releases"], key=_order)


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


def _record_of(release: str) -> str:
    keys = recorded_versions()
    return ([k for k in keys if _order(k) <= _order(release)[:2]] or keys[:1])[-1]


class Registry:
    """The flags of one release: the newest recorded release not newer than the target, and
    for a patch given in full (`0.10.0`) whose flags differ from its minor's record, that
    patch's own (`vllm_patch_flags.json`: the flags it lacks or adds, and the ones its
    `add_argument` calls mark deprecated or not). `release` is the release read: the target
    when kvplan read its wheel (0.14.0 as itself, though its flags are 0.14.1's), else the
    nearest one read at or below it (0.11.9 as 0.11.2; a minor alone as its record)."""

    def __init__(self, version: str | None):
        v = VllmVersion.of(version)
        versions = _data()["versions"]
        best = _record_of(v.text)
        self.key = best
        record = versions[best]
        self.parser = record.get("parser", {})
        text, read = v.text, releases()
        if text.count(".") == 1:  # a minor alone: its record, else (0.7) its last patch
            text = record["release"] if text in versions else max(
                (k for k in read if k.startswith(text + ".")), key=_order,
                default=record["release"])
        elif text not in read:  # a patch kvplan did not read: the nearest read below it
            text = max((k for k in read if _record_of(k) == best and _order(k) <= _order(text)),
                       key=_order, default=record["release"])
        self.release = text
        self.flags: dict[str, dict] = dict(record["flags"])
        patch = _patches().get(text)
        if patch and patch["record"] == best:
            self.flags = {k: i for k, i in self.flags.items() if k not in patch["lacks"]}
            self.flags.update(patch["has"])
            for name in patch.get("deprecated", []):
                self.flags[name] = {**self.flags[name], "deprecated": True}
            for name in patch.get("undeprecated", []):
                self.flags[name] = {k: x for k, x in self.flags[name].items()
                                    if k != "deprecated"}
            if "kv_cache_dtypes" in patch:  # its CacheDType, where it differs from the record
                info = self.flags["--kv-cache-dtype"]
                key = "choices" if info.get("choices") else "known_values"
                self.flags["--kv-cache-dtype"] = {**info, key: patch["kv_cache_dtypes"]}
        for name, first in HUMAN_READABLE_FROM.items():  # a patch before its minor's record
            info = self.flags.get(name)
            if info and _order(text) < first and str(info.get("type")).startswith("human"):
                self.flags[name] = {**info, "type": "int"}
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


@cache
def registry(release: str) -> Registry:
    return Registry(release)


def history(spelled: str, release: str) -> tuple[str | None, str | None, str | None]:
    """Where a flag `release` rejects stands in the releases kvplan read, as (added,
    dropped, had): `added` the first release after `release` that accepts it, `dropped` the
    first release after the last one before `release` that had it, `had` that last one
    (0.11.2's --rope-theta: (None, '0.11.1', '0.11.0')). Accepted spellings, aliases and
    prefixes count as each release's parser reads them."""
    at, read = _order(release), releases()
    has = [r for r in read if registry(r).lookup(spelled) is not None]
    after = [r for r in has if _order(r) > at]
    before = [r for r in has if _order(r) < at]
    had = before[-1] if before else None
    dropped = next((r for r in read if _order(r) > _order(had)), None) if had else None
    return (after[0] if after else None), dropped, had


def dropped_after(spelled: str, release: str) -> str | None:
    """The first release read after `release` whose parser rejects `spelled`."""
    return next((r for r in releases() if _order(r) > _order(release)
                 and registry(r).lookup(spelled) is None), None)


# `--task` (0.6-0.12; deprecated from 0.10.1, gone in 0.13) as `--runner` / `--convert`
# (0.10.1+) give it: 0.10.1 `ModelConfig.__post_init__` (`_RUNNER_TASKS`, `_task_to_convert`:
# embed / embedding -> embed, classify, reward; score -> classify or embed by the
# architecture, which `--runner pooling` alone lets vLLM pick)
_TASK = {"embed": "--runner pooling --convert embed",
         "embedding": "--runner pooling --convert embed",
         "classify": "--runner pooling --convert classify",
         "reward": "--runner pooling --convert reward", "score": "--runner pooling",
         "generate": "--runner generate", "transcription": "--runner generate",
         "draft": "--runner draft"}
# deprecated or removed flags whose removal changes what vLLM does, and what the release's
# own deprecation names instead ({} is the flag's value)
_INSTEAD = {
    # 0.6.0-0.6.3.post1 `ModelConfig.__init__`: "`max_context_len_to_capture` is deprecated.
    # Use `max_seq_len_to_capture` instead." (a ValueError: the start fails)
    "--max-context-len-to-capture": "--max-seq-len-to-capture {}",
    # 0.6 help: "Deprecated, use --distributed-executor-backend=ray"
    "--worker-use-ray": "--distributed-executor-backend ray",
    # 0.11 `ModelConfig`: the deprecated override is read as --pooler-config
    "--override-pooler-config": "--pooler-config {}",
    # 0.10.1-0.12 `EngineArgs.create_model_config` warnings
    "--disable-mm-preprocessor-cache": "--mm-processor-cache-gb 0",
    "--enable-multimodal-encoder-data-parallel": "--mm-encoder-tp-mode data",
}


def instead(name: str, value: str | None, reg: Registry) -> str | None:
    """What to write in `reg`'s release instead of a deprecated or removed flag `name`
    (canonical spelling) given `value`, when removing it would change what vLLM does; None
    when removing it is right or the release lacks the replacement."""
    if name == "--task":
        use = _TASK.get((value or "").strip().lower()) if value and "$" not in value \
            else "--runner pooling --convert <embed|classify|reward>"
    elif name in ("--speculative-model", "--num-speculative-tokens"):
        # the V0 speculative flags (0.6-0.8.2) as `SpeculativeConfig` keys (0.8+ JSON)
        model = value if name == "--speculative-model" and value else "<draft model>"
        n = value if name == "--num-speculative-tokens" and value else "<n>"
        use = ("--speculative-config "
               + shlex.quote(f'{{"model": "{model}", "num_speculative_tokens": {n}}}'))
    else:
        use = _INSTEAD.get(name, "").replace("{}", shlex.quote(value or "")).strip() or None
    if use is None or "{}" in _INSTEAD.get(name, "") and not value:
        return None
    return use if reg.lookup(use.split()[0]) is not None else None


def _is_number(tok: str) -> bool:
    try:
        float(tok)
        return True
    except ValueError:
        return False


def missing_choice(flag: str, value: str, version: str | None
                   ) -> tuple[str, list[str], str] | None:
    """(release, its choices, when it had `value`: " (it had it up to 0.32)") when the
    release has no `value` for `flag` (argparse's choices, or the names vLLM validates
    later, as `vllm_flags.json` records them); None when it has it or lists no choices."""
    reg = Registry(version)
    info = reg.lookup(flag)
    known = [c for c in (info.choices if info else ()) if c != "None"]
    if not known or value in known or value == "None":
        return None
    keys = recorded_versions()
    seen = [i for i, k in enumerate(keys)
            if value in ((Registry(k).lookup(flag) or info).choices)]
    older = [i for i in seen if i < keys.index(reg.key)]
    when = (f" (it had it up to {keys[older[-1]]})" if older
            else f" (it has it from {keys[seen[0]]})" if seen else "")
    return reg.release, known, when


def check_choice(flag: str, value: str, version: str | None) -> None:
    """BadInput when the release has no `value` for `flag` (`missing_choice`); says when it
    existed."""
    from kvplan.errors import BadInput

    miss = missing_choice(flag, value, version)
    if miss is None:
        return
    release, known, when = miss
    close = difflib.get_close_matches(value.lower(), known, n=3, cutoff=0.6)
    raise BadInput(f"vLLM {release} has no {flag} {value}{when}",
                   hint=f"did you mean {' or '.join(close)}?" if close
                   else f"use one of {', '.join(known)}", flag=flag.lstrip("-").replace("-", "_"))
