"""`--pooler-config`: the pooling type that changes sizing.

vLLM builds `PoolerConfig` from the JSON (`config/pooler.py`): `seq_pooling_type` (LAST,
MEAN, CLS, ...; `pooling_type` is its older spelling, still read in 0.20-0.33). MEAN and CLS
pooling turn chunked prefill and prefix caching off for a causal model
(`ModelConfig.is_chunked_prefill_supported`); the other keys do not change memory.
"""

from __future__ import annotations

import json

from kvplan.errors import BadInput


def pooling_type_of(text: str | None) -> str | None:
    """The sequence pooling type `--pooler-config` asks for (upper case), or None."""
    if text is None:
        return None
    try:
        raw = json.loads(text)
    except ValueError:
        raw = None
    if not isinstance(raw, dict):
        raise BadInput(f"--pooler-config {text!r} is not a JSON object",
                       hint='e.g. --pooler-config \'{"seq_pooling_type": "MEAN"}\'')
    value = raw.get("seq_pooling_type") or raw.get("pooling_type")
    if value is not None and not isinstance(value, str):
        raise BadInput(f"--pooler-config seq_pooling_type must be a string, got {value!r}")
    return value.upper() if value else None
