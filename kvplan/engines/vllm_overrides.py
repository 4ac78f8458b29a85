"""vLLM's `--hf-overrides` (and 0.6-0.11's `--rope-scaling` / `--rope-theta`): changes to the
model's HF config before anything is sized.

`ModelConfig.__post_init__` (0.33 `config/model.py`) splits the JSON object: flat values go
to `config.update()`, dict values to `_apply_dict_overrides`, which updates a nested
sub-config (`text_config`, ...) key by key and sets any other dict (`rope_scaling`) whole.
The common use is YaRN for a longer context, e.g. Qwen3's
`{"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings":
32768}}` with `--max-model-len 131072`.
"""

from __future__ import annotations

from typing import Any

from kvplan.units import parse_json_object

# dict-valued config entries that are sub-configs (PreTrainedConfig) in transformers;
# `quantization_config` is a plain dict there
_SUB_CONFIGS = ("text_config", "llm_config", "language_config", "text_model_config",
                "vision_config", "audio_config")


def parse_hf_overrides(text: str, *, what: str = "--hf-overrides") -> dict[str, Any]:
    """The JSON object `--hf-overrides` takes."""
    return parse_json_object(text, what=what, hint='e.g. --hf-overrides \'{"rope_scaling": '
                             '{"rope_type": "yarn", "factor": 4.0, '
                             '"original_max_position_embeddings": 32768}}\'')


def apply_hf_overrides(config: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`config` with `overrides` applied as vLLM applies them (a new dict)."""
    out = dict(config)
    for key, value in overrides.items():
        if isinstance(value, dict) and key in _SUB_CONFIGS and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}  # `_update_nested`: key by key
        else:
            out[key] = value
    return out
