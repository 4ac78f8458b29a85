"""Memory vLLM's "Model loading took" figure counts beyond the checkpoint's bytes.

On ROCm, vLLM pads unquantized fused-MoE weights after loading
(`UnquantizedFusedMoEMethod._maybe_pad_weight`, `VLLM_ROCM_MOE_PADDING=1` by default): a weight
whose rows are a multiple of 512 bytes is copied into a buffer 256 bytes wider per row
(`F.pad(...)[..., :-num_pad]`) and, up to vLLM 0.29, the parameter is re-bound to that view
(`layer.w13_weight.data = ...`), so the padding stays allocated; 0.30 copies the view back
into the original storage. Up to 0.20 ROCm also measures the load as device memory in use
(`RocmPlatform.get_current_memory_usage`: `mem_get_info` total - free), so what the caching
allocator keeps after the originals are freed counts as weights too. Wheels read: 0.10.2,
0.11.0-0.20.2 (mem_get_info), 0.21.0-0.33.0 (`max_memory_allocated`); 0.29.0 (`.data =`),
0.30.0-0.33.0 (`.data.copy_`).
"""

from __future__ import annotations

PAD_BYTES = 256  # `num_pad = 256 // weight.element_size()` elements per row
ROW_ALIGN = 512  # padded only when `stride(-2) * element_size() % 512 == 0`


def rocm_moe_padding_bytes(moe_layers: int, experts: int, hidden: int, inter: int,
                           elem_bytes: int, *, cached: bool) -> int:
    """Bytes the ROCm load figure adds for `moe_layers` layers of unquantized gated experts:
    w13 is [experts, 2 x inter, hidden] and w2 [experts, hidden, inter] on one GPU.

    The padded views stay the parameters (vLLM to 0.29): 256 B more per row each.
    `cached`: the figure is device memory in use (to 0.20). Per layer the allocator then
    (best fit, blocks split, `empty_cache()` inside each pad call releasing only whole free
    segments) takes a new segment for the padded w13, frees the original w13 and places the
    padded w2 inside it; the rest of that segment (w13 - padded w2) stays reserved for good,
    and the last layer's original w2 (w13 alone: the last original w13) is still cached.
    """
    if moe_layers <= 0:
        return 0
    s13, s2 = experts * 2 * inter * hidden * elem_bytes, experts * hidden * inter * elem_bytes
    pad13 = hidden * elem_bytes % ROW_ALIGN == 0
    pad2 = inter * elem_bytes % ROW_ALIGN == 0
    d13 = experts * 2 * inter * PAD_BYTES if pad13 else 0
    d2 = experts * hidden * PAD_BYTES if pad2 else 0
    total = moe_layers * (d13 + d2)
    if cached and pad13 and pad2:
        total += moe_layers * max(s13 - (s2 + d2), 0) + s2
    elif cached and (pad13 or pad2):
        total += s13 if pad13 else s2
    return total
