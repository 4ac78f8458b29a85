"""vLLM's `--speculative-config` JSON -> `core.specdec.SpecDecode` (the draft model resolved
through the caller's model resolver: catalog, local path or the Hub)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvplan.units import parse_json_object


def parse_speculative_config(text: Any, *, what: str = "--speculative-config") -> dict[str, Any]:
    """The JSON object vLLM takes (a mapping is taken as given)."""
    return parse_json_object(text, what=what,
                             hint='e.g. \'{"method": "mtp", "num_speculative_tokens": 2}\'')


def speculative(text: Any, resolve_model: Callable[[str], Any], *,
                what: str = "--speculative-config", version: str | None = None,
                notes: list[str] | None = None) -> Any:
    """A SpecDecode for `text`; `resolve_model(name)` loads the draft model when one is
    named (EAGLE heads, draft models). With `version`, the keys are read as that release
    reads them (dashes 0.26+) and keys its `SpeculativeConfig` lacks are refused (0.16+) or
    noted in `notes` as ignored."""
    from dataclasses import replace

    from kvplan.core.specdec import (
        NO_DRAFT,
        from_config,
        speculators_defaults,
        speculators_layer_config,
    )

    cfg = parse_speculative_config(text, what=what)
    if version is not None:
        from kvplan.engines.vllm_config_keys import check_keys, normalise_speculative

        cfg = normalise_speculative(cfg, version)
        note = check_keys("speculative", cfg, version, what)
        if note and notes is not None:
            notes.append(note)
    if cfg.get("quantization") and notes is not None:  # the draft's own `ModelConfig`
        notes.append(f"--speculative-config quantization {cfg['quantization']!r} is not "
                     "modelled: the drafter is sized as its checkpoint stores it")
    draft = None
    name = cfg.get("model")
    method = str(cfg.get("method") or "").lower()
    if name and method not in NO_DRAFT and "mtp" not in method:
        draft = resolve_model(str(name))
        inner = speculators_layer_config(draft.config)
        if inner is not None:  # a speculators-format checkpoint: its decoder, its defaults
            defaults = speculators_defaults(draft.config)
            cfg = {**{k: v for k, v in defaults.items() if v is not None}, **cfg}
            draft = replace(draft, config=inner)
    return from_config(cfg, draft)
