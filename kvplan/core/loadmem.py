"""Memory vLLM's ROCm "Model loading took" figure counts beyond the checkpoint's bytes.

vLLM post-processes weights after loading (`process_weights_after_loading`, module by
module), and on ROCm that allocates:
* unquantized fused-MoE weights are padded (`UnquantizedFusedMoEMethod._maybe_pad_weight`,
  `VLLM_ROCM_MOE_PADDING=1`): a weight whose rows are a multiple of 512 B is copied into a
  buffer 256 B wider per row (`F.pad(...)[..., :-num_pad]`, then `empty_cache()`). Up to
  0.29 the parameter is re-bound to that view (`.data = `), so the padding stays
  allocated; 0.30 copies it back (`.data.copy_`).
* per-tensor and block FP8 linears are padded the same way (`_maybe_pad_fp8_weight`,
  `VLLM_ROCM_FP8_PADDING=1`, every release read); per-tensor ones are first dequantized to
  fp16 and requantized shard by shard to one scale (`requantize_with_max_scale`).
* on fnuz GPUs (MI300X/MI325X, `is_fp8_fnuz`) FP8 weights are converted in place
  (`normalize_e4m3fn_to_e4m3fnuz`: `w[w == -128] = 0`, a one-byte bool mask per element).
* online FP8 (`-q fp8` of a 16-bit checkpoint) quantizes each loaded 16-bit weight into a
  new tensor and drops the original.
* with `VLLM_ROCM_USE_AITER=1`, AITER's fused MoE copies each layer's w13 and w2 into its
  shuffled layout after the pads (`rocm_aiter_ops.shuffle_weights`) and drops the padded ones.
* MLA dequantizes a quantized kv_b_proj into a kept 16-bit copy, after every linear.
Up to 0.20 ROCm measures the load as device memory in use (`get_current_memory_usage`:
`mem_get_info` total - free; `max_memory_allocated` from 0.21), so what the caching
allocator keeps reserved after those temporaries counts too. kvplan replays the sequence
through a model of the allocator (core/allocsim.py). Wheels read: 0.10.2, 0.11.0-0.20.2
(mem_get_info), 0.21.0-0.33.0; 0.29.0 (`.data =`), 0.30.0-0.33.0 (`.data.copy_`).
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from kvplan.core.allocsim import Allocator
from kvplan.core.dtypes import dtype_bytes
from kvplan.core.mm import towers_kept, towers_tp_sharded
from kvplan.core.params import count_params, mlp_intermediate, vision_shape, weight_bytes
from kvplan.core.record import record
from kvplan.core.versions import fp8_fnuz

if TYPE_CHECKING:
    from kvplan.core.arch import ModelArch
    from kvplan.core.sizing import EngineArgs, Gpu, Model
    from kvplan.core.versions import VllmVersion

PAD_BYTES = 256  # `num_pad = 256 // weight.element_size()` elements per row
ROW_ALIGN = 512  # padded only when `stride(-2) * element_size() % 512 == 0`

# how a weight is post-processed
PLAIN, MOE, FP8_PAD, FP8_TENSOR, FP8_MASK, ONLINE, KEPT_AFTER, ROPE, YARN_ROPE = (
    "plain", "moe", "fp8_pad", "fp8_tensor", "fp8_mask", "online", "kept_after", "rope",
    "yarn_rope")
PADDED = ("block", "tensor")  # FP8 paths whose linears `_maybe_pad_fp8_weight` pads


@record(frozen=True)
class Weight:
    """One parameter above 1 MiB on one GPU, in creation order: `rows` x `row` elements of
    `elem` bytes (experts: all experts' rows). `shards`: rows of each logical shard a
    per-tensor FP8 weight is requantized by."""

    rows: int
    row: int
    elem: int
    kind: str = PLAIN
    shards: tuple[int, ...] = ()

    @property
    def nbytes(self) -> int:
        return self.rows * self.row * self.elem

    @property
    def pad(self) -> int:
        return self.rows * PAD_BYTES if self.row * self.elem % ROW_ALIGN == 0 else 0


def _rope(a: Allocator, w: Weight) -> int:
    """A rotary cache as `_compute_cos_sin_cache` builds it on the GPU (the model is built
    under `with target_device`): positions t, freqs [N, d/2], cos, sin (YaRN: each through a
    temporary before `* mscale`) and their fp32 concatenation [N, d], freed on return but the
    last, which `.to(dtype)` copies into the cache kept; the freed blocks stay reserved."""
    n, half = w.rows, w.rows * w.row // 2 * 4
    temps = [a.malloc(n * 4), a.malloc(half)]
    for _ in range(2):  # cos, sin
        tmp = a.malloc(half) if w.kind == YARN_ROPE else None
        temps.append(a.malloc(half))
        if tmp is not None:
            a.free(tmp)
    cat = a.malloc(2 * half)
    for x in temps:
        a.free(x)
    kept = a.malloc(w.nbytes)
    a.free(cat)
    return kept


@lru_cache(maxsize=32)
def load_extra(weights: tuple[Weight, ...], *, fnuz: bool, cached: bool, moe_kept: bool,
               fp8_pad: bool = True, moe_shuffle: bool = False) -> int:
    """Bytes the load figure holds beyond the weights: padding kept, the allocator's block
    rounding of the tensors held (`block_rounding`), plus (`cached`, to 0.20) what it keeps
    reserved once every weight is processed. `moe_kept` / `fp8_pad`:
    MoE padding kept as the parameter, FP8 linears padded (the two ROCm padding switches).
    `moe_shuffle`: AITER's fused MoE then copies each layer's w13 and w2 into its shuffled
    layout and drops the padded ones."""
    a = Allocator()
    live = [_rope(a, w) if w.kind in (ROPE, YARN_ROPE) else a.malloc(w.nbytes)
            for w in weights if w.kind != KEPT_AFTER]
    sizes = [w.nbytes for w in weights if w.kind != KEPT_AFTER]  # what each now holds
    kept = 0

    def pad(i: int, w: Weight) -> None:
        nonlocal kept
        padded = a.malloc(w.nbytes + w.pad)
        a.empty_cache()  # inside `_maybe_pad_weight`, while the original is still bound
        a.free(live[i])
        live[i], sizes[i] = padded, w.nbytes + w.pad
        kept += w.pad

    order = [x for x in weights if x.kind != KEPT_AFTER]
    w13: int | None = None  # a layer's w13, waiting for its w2
    for i, w in enumerate(order):
        if w.kind == MOE and moe_kept and w.pad:
            pad(i, w)
        if w.kind == MOE and moe_shuffle:
            if w13 is None:
                w13 = i
                continue
            pair, w13 = (w13, i), None
            copies = [a.malloc(order[j].nbytes) for j in pair]
            for j, c in zip(pair, copies):
                a.free(live[j])
                live[j], sizes[j] = c, order[j].nbytes
                kept -= order[j].pad if moe_kept else 0
        if w.kind == ONLINE:  # `scaled_fp8_quant` of the 16-bit weight, which is dropped
            q = a.malloc(w.rows * w.row)
            a.free(live[i])
            live[i], sizes[i] = q, w.rows * w.row
        if w.kind in (FP8_PAD, FP8_TENSOR, FP8_MASK) and fnuz:
            a.free(a.malloc(w.rows * w.row))  # the bool mask
        if w.kind == FP8_TENSOR:  # `per_tensor_dequantize` + `scaled_fp8_quant` per shard
            dq = None
            for rows in w.shards:
                n = rows * w.row
                fake = a.malloc(2 * n)
                new_dq = a.malloc(2 * n)
                a.free(fake)
                if dq is not None:
                    a.free(dq)
                dq = new_dq
                a.free(a.malloc(n))
            if dq is not None:
                a.free(dq)
        if w.kind in (FP8_PAD, FP8_TENSOR) and w.pad and fp8_pad:
            pad(i, w)
    for w in weights:
        if w.kind == KEPT_AFTER:
            a.malloc(w.nbytes)
            sizes.append(w.nbytes)
    rounding = a.allocated - sum(map(Allocator.rounded, sizes))
    return kept + rounding + (a.reserved - a.allocated if cached else 0)


def fp8_path(q: dict) -> str:
    """How a checkpoint's FP8 linears are processed: 'block' or 'tensor' (padded; per-tensor
    weights are also requantized to one scale) for `fp8` and compressed-tensors float8 with
    a block or tensor weight strategy, else 'channel' (FP8_DYNAMIC and the rest: the fnuz
    conversion only)."""
    method = str(q.get("quant_method", "")).lower()
    if method == "fp8":
        return "block" if q.get("weight_block_size") else "tensor"
    if method != "compressed-tensors":
        return "channel"
    strategies = {w.get("strategy") for g in (q.get("config_groups") or {}).values()
                  for w in [(g or {}).get("weights") or {}]
                  if w.get("num_bits") == 8 and w.get("type") == "float"}
    return "tensor" if "tensor" in strategies else "block" if "block" in strategies \
        else "channel"


@record(frozen=True)
class Schemes:
    """How each part of a checkpoint is stored: `d` model-dtype bytes; per part None
    (16-bit), the FP8 path ('block', 'tensor', 'channel'), or 'online' (`-q fp8` of a 16-bit
    checkpoint: loaded 16-bit, quantized after loading)."""

    d: int
    attn: str | None = None
    mlp: str | None = None
    expert: str | None = None


def _lin(rows: int, row: int, s: Schemes, part: str | None,
         shards: tuple[int, ...] = ()) -> Weight:
    if part is None:
        return Weight(rows, row, s.d)
    if part == ONLINE:
        return Weight(rows, row, s.d, ONLINE)
    if part == "channel":
        return Weight(rows, row, 1, FP8_MASK)
    if part == "tensor":
        return Weight(rows, row, 1, FP8_TENSOR, shards or (rows,))
    return Weight(rows, row, 1, FP8_PAD)


def decoder_weights(layers: list, t: dict, *, hidden: int, heads: int, vocab: int, tp: int,
                    s: Schemes, first: bool, last: bool, lm_head: bool = True, experts: int = 0,
                    expert_inter: int = 0, mla_kept: bool = False,
                    tower: tuple[int, int, int, bool] | None = None,
                    tower_tp: int = 1, ropes: tuple = ()) -> tuple[Weight, ...]:
    """The large parameters of one pipeline stage on one TP rank, in vLLM's creation (and
    processing) order. `layers`: (cache layer, dense / shared-expert intermediate, has
    routed experts) per decoder layer. Attention is modelled for GQA/MQA and MLA; the
    linears of other mixers are left out. `tower`: a ViT's (hidden, intermediate, blocks,
    gated MLP), created first and split over `tower_tp` ranks. `ropes`: the rotary caches
    (`params.rope_tables`), made by the first attention layer after its projections
    (`get_rope`)."""
    h, hl = hidden, max(heads // tp, 1)
    nope, rope = int(t.get("qk_nope_head_dim") or 0), int(t.get("qk_rope_head_dim") or 0)
    v_mla, q_lora = int(t.get("v_head_dim") or nope), int(t.get("q_lora_rank") or 0)
    kv_lora = int(t.get("kv_lora_rank") or 0)
    out: list[Weight] = []
    if first and tower:
        vh, vi, blocks, vgated = tower
        vt = tower_tp
        out += [Weight(3 * vh // vt, vh, s.d), Weight(vh, vh // vt, s.d),
                Weight((2 if vgated else 1) * vi // vt, vh, s.d), Weight(vh, vi // vt, s.d)
                ] * blocks
    if first:
        out.append(Weight(-(-vocab // tp), h, s.d))
    after: list[Weight] = []
    for layer, inter, moe in layers:
        kind = getattr(layer, "kind", None)
        if kind == "mla":
            if q_lora:  # fused q_a + kv_a (replicated), then q_b
                out += [_lin(q_lora + kv_lora + rope, h, s, s.attn),
                        _lin(hl * (nope + rope), q_lora, s, s.attn)]
            else:
                out += [_lin(hl * (nope + rope), h, s, s.attn),
                        _lin(kv_lora + rope, h, s, s.attn)]
            out += [_lin(hl * (nope + v_mla), kv_lora, s, s.attn),
                    _lin(h, hl * v_mla, s, s.attn)]
            if mla_kept:
                after.append(Weight(hl * (nope + v_mla), kv_lora, s.d, KEPT_AFTER))
        elif kind in ("full", "sliding", "chunked"):
            kvl, hd, hv = max(layer.num_kv_heads // tp, 1), layer.head_size, layer.head_size_v
            out += [_lin(hl * hd + kvl * (hd + hv), h, s, s.attn, (hl * hd, kvl * hd, kvl * hv)),
                    _lin(h, hl * hv, s, s.attn)]
        if ropes and kind in ("mla", "full", "sliding", "chunked"):
            out += [Weight(r.positions, r.dim, r.width, YARN_ROPE if r.yarn else ROPE)
                    for r in ropes]
            ropes = ()
        routed = bool(moe and experts and expert_inter)
        if routed:
            out.append(Weight(experts, h, s.d))  # router
        if inter:  # the dense MLP, or the shared expert (registered before the experts)
            il = inter // tp
            out += [_lin(2 * il, h, s, s.mlp, (il, il)), _lin(h, il, s, s.mlp)]
        if routed:
            kind = {None: MOE, ONLINE: ONLINE}.get(s.expert, FP8_MASK)
            elem = 1 if kind == FP8_MASK else s.d
            out += [Weight(experts * 2 * expert_inter, h, elem, kind),
                    Weight(experts * h, expert_inter, elem, kind)]
    if last and lm_head:
        out.append(Weight(-(-vocab // tp), h, s.d))
    return tuple(w for w in out + after if w.nbytes > 1 << 20)


def _stage_weights(model: Model, arch: ModelArch, a: EngineArgs, version: VllmVersion,
                   model_dtype: str, stages: list[range], *, ropes: tuple = ()
                   ) -> list[tuple[Weight, ...]]:
    """Each stage's large parameters on one rank (`decoder_weights`)."""
    d = dtype_bytes(model_dtype)
    tp, h, ep_on = a.tensor_parallel_size, arch.hidden_size, a.enable_expert_parallel
    wb = weight_bytes(arch, d, a.quantization, model.quant_file)
    serialized = bool(arch.quantization or model.quant_file)
    path = fp8_path(arch.quantization or {})

    def part(b: float) -> str | None:  # FP8 (1 B, with a block checkpoint's fp32 scales)
        return None if not 1 <= b < 1.01 else path if serialized else "online"

    schemes = Schemes(d, part(wb.linear), part(wb.mlp_bytes), part(wb.expert))
    moe_i = arch.expert_intermediate_size
    gated = arch.num_experts * 3 * moe_i * h
    pc = count_params(arch).layers
    mla_kept = version.v1 and wb.kv_b_bytes < d
    tower = (vision_shape(arch.vision_config) if arch.vision_config and towers_kept(
        arch.architectures, a.limit_mm_per_prompt, a.language_model_only)[0] else None)
    tower_tp = tp if towers_tp_sharded(arch.architectures, mistral_native=version.
                                       mistral_native_tower(model.id),
                                       encoder_dp=a.mm_encoder_tp_mode == "data") else 1
    out = [decoder_weights(
        [(arch.layers[i], mlp_intermediate(arch, pc[i]), pc[i].expert == gated)
         for i in rng], arch.text_config, hidden=h, heads=arch.num_attention_heads,
        vocab=arch.vocab_size, tp=tp, s=schemes, first=si == 0,
        last=si == len(stages) - 1, lm_head=not arch.tie_word_embeddings,
        experts=arch.num_experts // (a.moe_ranks if ep_on else 1),
        expert_inter=moe_i // a.expert_tp, mla_kept=mla_kept,
        tower=tower, tower_tp=tower_tp, ropes=ropes) for si, rng in enumerate(stages)]
    return out


def rocm_load_extra(model: Model, arch: ModelArch, a: EngineArgs, gpu: Gpu,
                    version: VllmVersion, model_dtype: str, stages: list[range],
                    ropes: tuple = ()) -> tuple[list[int], bool]:
    """Per stage, what ROCm's load figure adds to the weights on an AMD `gpu`: the
    post-processing of the weights replayed through the caching allocator; and whether
    unquantized MoE weights stay padded."""
    d = dtype_bytes(model_dtype)
    # AITER's fused MoE (gfx9) replaces the padded views with shuffled copies
    # (`rocm_aiter_ops.shuffle_weights`: `.data =` to 0.13, `replace_parameter` from 0.14)
    shuffle = a.rocm_aiter and a.rocm_aiter_moe and gpu.compute_capability.startswith("gfx9")
    moe_kept = version.rocm_moe_padding_kept and a.rocm_moe_padding
    wb = weight_bytes(arch, d, a.quantization, model.quant_file)
    moe_padded = bool(arch.num_experts) and wb.expert == d and moe_kept and not shuffle
    serialized = bool(arch.quantization or model.quant_file)
    path = fp8_path(arch.quantization or {})
    fp8_pad = a.rocm_fp8_padding and serialized and path in PADDED and (
        1 <= wb.linear < 1.01 or 1 <= wb.mlp_bytes < 1.01)  # FP8 (with its block scales)
    if not version.rocm_load_counts_cache and not (fp8_pad or moe_padded):
        # nothing kept, and the load is allocated memory, as on CUDA
        return load_rounding(model, arch, a, version, model_dtype, stages, ropes), False
    stage_ws = _stage_weights(model, arch, a, version, model_dtype, stages, ropes=ropes)
    return [load_extra(ws, fnuz=fp8_fnuz(gpu.compute_capability),
                       cached=version.rocm_load_counts_cache, moe_kept=moe_kept,
                       fp8_pad=a.rocm_fp8_padding, moe_shuffle=shuffle)
            for ws in stage_ws], moe_padded


@lru_cache(maxsize=32)
def block_rounding(weights: tuple[Weight, ...]) -> int:
    """What the caching allocator charges beyond the requests when `weights` are created in
    order: a request over 10 MiB takes a segment of its own rounded up to 2 MiB, and a
    remainder of 1 MiB or less is not split off, so it counts in `allocated` ("Model loading
    took" is `max_memory_allocated`)."""
    a = Allocator()
    for w in weights:
        a.malloc(w.nbytes)
    return a.allocated - sum(Allocator.rounded(w.nbytes) for w in weights)


def load_rounding(model: Model, arch: ModelArch, a: EngineArgs, version: VllmVersion,
                  model_dtype: str, stages: list[range], ropes: tuple) -> list[int]:
    """Per stage, the allocator's block rounding of a 16-bit checkpoint's parameters where
    the load figure is allocated memory (CUDA, ROCm from 0.21; `block_rounding`): 0-164 MiB,
    e.g. 57 MiB for Qwen2.5-7B (hidden 3584) and none for hidden 4096 / 8192 models, whose
    tensors are 2 MiB multiples. Quantized checkpoints, whose kernels repack after loading,
    are left at 0 (on ROCm the post-processing replay counts theirs)."""
    if arch.quantization or model.quant_file or a.quantization:
        return [0] * len(stages)
    stage_ws = _stage_weights(model, arch, a, version, model_dtype, stages, ropes=ropes)
    return [block_rounding(ws) for ws in stage_ws]
