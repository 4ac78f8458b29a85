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

On fnuz GPUs (MI300X, MI325X) an FP8 checkpoint's weights are converted in place
(`normalize_e4m3fn_to_e4m3fnuz`: `weight_as_int8[weight_as_int8 == -128] = 0`), which builds
a one-byte bool mask per element; the caching allocator keeps the largest such block, and up
to 0.20 the load figure counts it.
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


def fnuz_mask_bytes(largest_fp8_numel: int) -> int:
    """The bool mask of the largest FP8 weight on one GPU (MoE w13 or a dense gate_up), kept
    cached after the e4m3fn -> e4m3fnuz conversion (`torch.bool`: one byte per element;
    `x[mask] = 0` dispatches to `masked_fill_`, so no index tensor is built)."""
    return largest_fp8_numel


def padded_rows_bytes(rows: int, row_bytes: int) -> int:
    """What `_maybe_pad_fp8_weight` keeps per FP8 linear weight of `rows` x `row_bytes` on one
    GPU (`VLLM_ROCM_FP8_PADDING=1`, every ROCm release read, 0.11.0-0.33.0): 256 B per row
    when a row is a multiple of 512 B."""
    return rows * PAD_BYTES if row_bytes % ROW_ALIGN == 0 else 0


def fp8_linear_padding_bytes(layers: list, t: dict, *, hidden: int, heads: int, tp: int,
                             attn: bool, mlp: bool) -> int:
    """Padding kept for the FP8 linear weights of `layers` on one TP rank: per-tensor and block
    FP8 (`process_fp8_weight_tensor_strategy` / `_block_strategy`; channel-wise FP8 is not
    padded). `layers` holds (AttnLayer | other, dense or shared-expert intermediate) pairs;
    `attn` / `mlp`: whether those parts are FP8 in the checkpoint. Weights are [out, in]; an
    unpadded layout is counted for the per-tensor path's transposed weight as well."""
    h, total = hidden, 0
    hl = max(heads // tp, 1)
    nope, rope = int(t.get("qk_nope_head_dim") or 0), int(t.get("qk_rope_head_dim") or 0)
    v_mla, q_lora = int(t.get("v_head_dim") or nope), int(t.get("q_lora_rank") or 0)
    kv_lora = int(t.get("kv_lora_rank") or 0)
    for layer, inter in layers:
        kind = getattr(layer, "kind", None)
        if attn and kind == "mla":
            a_rows = (q_lora if q_lora else 0) + kv_lora + rope  # fused q_a + kv_a, replicated
            total += padded_rows_bytes(a_rows, h)
            total += (padded_rows_bytes(hl * (nope + rope), q_lora) if q_lora
                      else padded_rows_bytes(hl * (nope + rope), h))
            total += padded_rows_bytes(hl * (nope + v_mla), kv_lora)
            total += padded_rows_bytes(h, hl * v_mla)
        elif attn and kind in ("full", "sliding", "chunked"):
            kvl = max(layer.num_kv_heads // tp, 1)
            total += padded_rows_bytes(hl * layer.head_size
                                       + kvl * (layer.head_size + layer.head_size_v), h)
            total += padded_rows_bytes(h, hl * layer.head_size_v)
        if mlp and inter:
            total += padded_rows_bytes(2 * (inter // tp), h)  # gate_up
            total += padded_rows_bytes(h, inter // tp)  # down
    return total


def fp8_padded_scheme(q: dict) -> bool:
    """Whether a checkpoint's FP8 linears go through the padded per-tensor / block paths:
    `fp8` (block or per-tensor) and compressed-tensors float8 with a tensor or block weight
    strategy; channel-wise schemes (FP8_DYNAMIC) are not padded."""
    method = str(q.get("quant_method", "")).lower()
    if method == "fp8":
        return True
    if method != "compressed-tensors":
        return False
    return any((g or {}).get("weights", {}).get("num_bits") == 8
               and (g or {}).get("weights", {}).get("type") == "float"
               and (g or {}).get("weights", {}).get("strategy") in ("tensor", "block")
               for g in (q.get("config_groups") or {}).values())
