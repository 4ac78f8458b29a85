"""Whether a vLLM release runs a config's architectures (`vllm_archs.json`, every release's
model registry read off its wheel by `tools/vllm_archs.py`), and when it falls back to its
Transformers backend for one it does not register.

vLLM resolves `architectures` against `ModelRegistry` (model_executor/models/registry.py).
A name it lists runs; from 0.10.1 `_normalize_arch` also converts a name whose suffix says
its task (`FooForSequenceClassification`, `FooModel`: `iter_architecture_defaults`) to a
registered base (`FooForCausalLM`), 0.10.0 `get_model_architecture` only
`*ForSequenceClassification` to `*ForCausalLM`. When none is registered and `--model-impl` is
auto, vLLM falls back to the Transformers backend (0.7.2+): the first architecture (0.10.1+
`_try_resolve_transformers`; every one in 0.7.2-0.10.0, model_loader/utils.py
`resolve_transformers_arch`) must be a Transformers model class, or the config's `auto_map`
must name remote code for `AutoModel` (a key starting with AutoModel from 0.10.1; the remote
code needs --trust-remote-code, which 0.14+ checks before loading it), and the class must be
backend-compatible. Otherwise vLLM refuses to start: "Model architectures [...] are not
supported for now" (`_raise_for_unsupported`; 0.7.2-0.10.0 "Cannot find model module" or
"has no vLLM implementation"). Plugins and `--model-class-overrides` can register more names;
kvplan cannot see them.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from kvplan.errors import BadInput

DATA = Path(__file__).with_name("vllm_archs.json")
TRANSFORMERS_FROM = (0, 7, 2)  # model_executor/models/transformers.py
# `_SUFFIX_TO_DEFAULTS` (0.33 config/model.py), in its order: the first suffix a name ends with
# is replaced by each of them in turn
_SUFFIXES = ("ForCausalLM", "ForConditionalGeneration", "ChatModel", "LMHeadModel",
             "ForTextEncoding", "EmbeddingModel", "ForSequenceClassification",
             "ForTokenClassification", "ForAudioClassification", "ForImageClassification",
             "ForVideoClassification", "ClassificationModel", "ForRewardModeling", "RewardModel",
             "Model")
FALLBACK = "falls back to its Transformers backend"  # in the note `check` returns
# catalog configs (aiconfigurator's) that name an architecture as vLLM does not: the HF
# checkpoints vLLM runs say MiniMaxM3Sparse* and Step3p7ForConditionalGeneration
ALIASES = {"MiniMaxM3ForCausalLM": "MiniMaxM3SparseForCausalLM",
           "Step3p7FlashForCausalLM": "Step3p7ForConditionalGeneration"}


@lru_cache(maxsize=1)
def _data() -> dict:  # read on the first sizing, not at import
    import json

    return json.loads(DATA.read_text(encoding="utf-8"))


def _key(release: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", release)[:4])


@lru_cache(maxsize=1)
def _positions() -> dict[str, int]:
    return {r: i for i, r in enumerate(_data()["releases"])}


@lru_cache(maxsize=16)
def _at(v: tuple[int, int, int]) -> tuple[int, int]:
    """The read releases that stand for `v`: its own (a release and its post-releases), else
    the newest before and the oldest after it, either of which may be what `v` has."""
    keys = [_key(r)[:3] for r in _data()["releases"]]
    same = [i for i, k in enumerate(keys) if k == v]
    if same:
        return same[0], same[-1]
    lo = max((i for i, k in enumerate(keys) if k < v), default=0)
    return lo, min((i for i, k in enumerate(keys) if k > v), default=lo)


def _lists(name: str, at: tuple[int, int]) -> bool:
    spans = [_positions()[r] for r in _data()["archs"].get(name, ())]
    return any(a <= i <= b for a, b in zip(spans[::2], spans[1::2]) for i in at)


def _registered(v: tuple[int, int, int]) -> list[str]:
    at = _at(v)
    return [n for n in _data()["archs"] if _lists(n, at)]


@lru_cache(maxsize=1)
def _transformers() -> frozenset[str]:
    groups = _data()["transformers"]["suffixes"]
    return frozenset(p + s for s, prefixes in groups.items() for p in prefixes.split())


def added_after(name: str, v: tuple[int, int, int]) -> str | None:
    """The newest release lacking `name` before a later one lists it (None: none does)."""
    at = _at(v)[1]
    later = [_positions()[r] for r in _data()["archs"].get(ALIASES.get(name, name), ())[::2]
             if _positions()[r] > at]
    return _data()["releases"][min(later) - 1] if later else None


def runs(name: str, v: tuple[int, int, int]) -> bool:
    """Whether the registry of release `v` resolves `name` (after vLLM's suffix conversion)."""
    at, name = _at(v), ALIASES.get(name, name)
    if _lists(name, at):
        return True
    if v >= (0, 10, 1):  # `_normalize_arch`
        suffix = next((s for s in _SUFFIXES if name.endswith(s)), None)
        return suffix is not None and any(_lists(name.replace(suffix, s), at)
                                          for s in _SUFFIXES)
    return v >= (0, 10, 0) and name.endswith("ForSequenceClassification") and \
        _lists(name.replace("ForSequenceClassification", "ForCausalLM"), at)


def _fallback(name: str, auto_map: Any, v: tuple[int, int, int]) -> str | None:
    """How the Transformers backend would load `name`, or None when it cannot."""
    keys = list(auto_map) if isinstance(auto_map, dict) else []
    if "AutoModel" in keys or v >= (0, 10, 1) and any(k.startswith("AutoModel") for k in keys):
        return ("the config's auto_map names remote code for it (start with "
                "--trust-remote-code)")
    if name in _transformers():
        return f"transformers.{name}, given a Transformers release that has it"
    return None


def check(architectures: list[str], config: dict, version: Any) -> str | None:
    """None when release `version` (a `VllmVersion`) registers one of `architectures`; a note
    when it falls back to the Transformers backend; BadInput when it refuses to start."""
    if not architectures:
        return None
    v = version.v
    if any(runs(a, v) for a in architectures):
        return None
    auto_map = config.get("auto_map")
    how = [_fallback(a, auto_map, v) for a in (
        architectures if v < (0, 10, 1) else architectures[:1])]
    if v >= TRANSFORMERS_FROM and all(how):
        return (f"vLLM {version.text} registers no {'/'.join(architectures)} and {FALLBACK} "
                f"(--model-impl auto: {how[0]}; the class must "
                "be backend-compatible): sized as kvplan's generic decoder, the backend's "
                "memory may differ")
    name = next(a for a, h in zip(architectures, how) if not h) if v >= TRANSFORMERS_FROM \
        else architectures[0]
    before = added_after(name, v)
    if before:  # a later release registers it
        raise BadInput(f"vLLM {version.text} does not have {name} yet (its model registry "
                       f"lists it after {before})", hint="use a later --vllm-version",
                       flag="vllm_version")
    import difflib  # only a refusal needs it

    by_lower = {n.lower(): n for n in _registered(v)}
    near = [by_lower[n] for n in difflib.get_close_matches(name.lower(), by_lower, n=3,
                                                           cutoff=0)]
    why = ("no Transformers backend before 0.7.2" if v < TRANSFORMERS_FROM else
           "no Transformers class or auto_map AutoModel entry for the Transformers backend")
    if v < TRANSFORMERS_FROM or v >= (0, 10, 1):  # `_raise_for_unsupported`
        said = f"Model architectures {architectures} are not supported for now"
    elif v < (0, 8, 5):  # model_loader/utils.py `resolve_transformers_fallback`
        said = (f"{name} has no vLLM implementation and the Transformers implementation is "
                "not compatible")
    else:  # `resolve_transformers_arch`
        said = (f"Cannot find model module. '{name}' is not a registered model in the "
                "Transformers library")
    raise BadInput(f"vLLM {version.text} does not run {name}: its model registry does not list "
                   f"it and there is {why}, so vLLM refuses to start (\"{said}\")",
                   hint=f"nearest registered: {', '.join(near)}; fix config.json's "
                   "architectures or --hf-overrides '{\"architectures\": [...]}'")
