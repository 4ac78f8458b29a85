"""Checkpoint tensors by role, from their names, to place exact bytes on each GPU.

vLLM shards a checkpoint by module: column/row-parallel linears and vocab embeddings split
across TP ranks, `ReplicatedLinear` (MLA `q_a_proj`/`kv_a_proj_with_mqa`, MoE routers) and norms
are whole on every rank, K/V projections are replicated once TP exceeds the KV heads, routed
experts split across the EP group, and pipeline stages own their layers (embeddings on the
first, LM head on the last). Multi-token-prediction layers past `num_hidden_layers` are not
loaded unless speculative decoding uses them. The roles are read from tensor names as far as
names allow; anything unrecognised counts as TP-split.
"""

from __future__ import annotations

import re
from dataclasses import field

from kvplan.core.record import record

_LAYER_RE = re.compile(r"(?:^|\.)(?:layers|h|blocks|layer)\.(\d+)\.")
_EXPERT_RE = re.compile(r"\.experts\.|block_sparse_moe\.experts|\.experts_(?:gate|up|down)")
_REPLICATED_RE = re.compile(
    r"norm|\.(?:gate|router)\.(?:weight|bias|e_score_correction_bias)$|\.router\.|"
    r"q_a_proj|kv_a_proj|e_score_correction_bias|rotary_emb|\.indexer\.(?:k_norm|weights_proj)")
_KV_RE = re.compile(r"\.(?:k_proj|v_proj)\.")
_EMBED_RE = re.compile(r"embed_tokens|\.wte\.|word_embeddings|tok_embeddings")
_HEAD_RE = re.compile(r"(?:^|\.)lm_head\.|(?:^|\.)output\.weight$")
_VISION_RE = re.compile(r"vision|visual|image_|multi_modal_projector|mm_projector|audio")


@record
class LayerBytes:
    split: int = 0
    replicated: int = 0
    expert: int = 0
    kv: int = 0


@record
class TensorSummary:
    """Exact checkpoint bytes by role (as stored; scales and zeros count with their weight)."""

    embed: int = 0
    lm_head: int = 0
    vision: int = 0
    other_split: int = 0  # final norm etc. outside decoder layers: counted on the last stage
    skipped: int = 0  # MTP / draft layers vLLM does not load without speculative decoding
    layers: list[LayerBytes] = field(default_factory=list)

    @property
    def loaded(self) -> int:
        return (self.embed + self.lm_head + self.vision + self.other_split
                + sum(x.split + x.replicated + x.expert + x.kv for x in self.layers))

    def to_json(self) -> dict:
        return {"embed": self.embed, "lm_head": self.lm_head, "vision": self.vision,
                "other": self.other_split, "skipped": self.skipped,
                "layers": [[x.split, x.replicated, x.expert, x.kv] for x in self.layers]}

    @classmethod
    def from_json(cls, d: dict) -> TensorSummary:
        return cls(embed=d["embed"], lm_head=d["lm_head"], vision=d["vision"],
                   other_split=d["other"], skipped=d["skipped"],
                   layers=[LayerBytes(*x) for x in d["layers"]])


def summarize(tensors: dict[str, int], num_layers: int) -> TensorSummary:
    """Group `{tensor name: bytes}` into roles and decoder layers."""
    s = TensorSummary(layers=[LayerBytes() for _ in range(num_layers)])
    for name, nbytes in tensors.items():
        if _VISION_RE.search(name) and not name.startswith("lm_head"):
            s.vision += nbytes
            continue
        m = _LAYER_RE.search(name)
        if m is None:
            if _EMBED_RE.search(name):
                s.embed += nbytes
            elif _HEAD_RE.search(name):
                s.lm_head += nbytes
            elif name.startswith(("mtp", "model.mtp")):
                s.skipped += nbytes
            else:
                s.other_split += nbytes
            continue
        i = int(m.group(1))
        if i >= num_layers:
            s.skipped += nbytes  # e.g. DeepSeek-V3's layer 61 (MTP)
            continue
        lb = s.layers[i]
        if _EXPERT_RE.search(name):
            lb.expert += nbytes
        elif _KV_RE.search(name):
            lb.kv += nbytes
        elif _REPLICATED_RE.search(name):
            lb.replicated += nbytes
        else:
            lb.split += nbytes
    return s
