"""Per-GPU KV-cache specs: what one block of one layer costs on one GPU.

Mirrors vLLM 0.33 `v1/kv_cache_interface.py` (`FullAttentionSpec`, `SlidingWindowSpec`,
`ChunkedLocalAttentionSpec`, `MLAAttentionSpec`, `CrossAttentionSpec`, `MambaSpec`),
`model_executor/layers/mamba/mamba_utils.py` (`MambaStateShapeCalculator`) and the hybrid
block-size alignment in `platforms/interface.py` `_align_hybrid_block_size`.
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache

from kvplan.core.arch import (
    CHUNKED,
    CROSS,
    DSV4,
    FULL,
    GDN,
    KDA,
    LIGHTNING,
    MAMBA1,
    MAMBA2,
    MLA,
    SHORTCONV,
    SLIDING,
    STATE_KINDS,
    AttnLayer,
    Layer,
    ModelArch,
    StateLayer,
)
from kvplan.core.dtypes import FP8_DS_MLA_BYTES_PER_TOKEN, dtype_bytes
from kvplan.core.kvquant import (
    NVFP4_DS_MLA,
    NVFP4_DS_MLA_BYTES,
    head_token_bytes,
    is_quantized,
)
from kvplan.core.record import record
from kvplan.errors import BadInput
from kvplan.units import cdiv

INDEXER = "indexer"  # DeepSeek-V3.2 indexer cache: an extra MLA-type layer per attention layer

# DeepSeek-V4 pages (vLLM 0.33 `models/deepseek_v4`, `v1/attention/backends/mla/sparse_swa.py`,
# `compressor.py`): fp8_ds_mla rows of 448 fp8 NoPE + 64 bf16 RoPE values + 8 scale bytes, every
# page rounded up to a multiple of 576 bytes (`_apply_alignment_padding`).
DSV4_ROW_BYTES = 584
DSV4_PAGE_ALIGN = 576
DSV4_SWA_BLOCK = 64  # `DeepseekV4SWACache`: fixed, ignores --block-size

# Mamba 'align' mode (prefix caching on) keeps 2 states per request, plus one prefill
# checkpoint for GDN layers on the FlashInfer prefill kernel (`MambaSpec.max_memory_usage_bytes`,
# `QwenGDNLinearAttention.get_kv_cache_spec`).
FLASHINFER_GDN_CHECKPOINT_ALIGNMENT = 64


@record(frozen=True)
class Spec:
    """One layer's cache spec on one GPU (vLLM `KVCacheSpec`)."""

    kind: str
    block_size: int  # tokens per block (state layers: the attention block size after alignment)
    real_page: int  # bytes of one block (attention) or one state (Mamba)
    page_padded: int = 0  # padded page (Mamba alignment, page unification); 0 = none
    window: int = 0
    encoder_len: int = 0
    state_blocks: int = 0  # Mamba: states held per request (beside the per-block ones)
    # Mamba prefix caching 'all' mode: a state per block too (`mamba_cache_mode` 'all'), and
    # from 0.16 `state_blocks` = the speculative blocks (`MambaSpec.num_speculative_blocks`)
    all_states: bool = False
    per_token: int = 0  # attention: bytes per token in this layer on this GPU
    dcp: int = 1  # decode context parallelism: a block's tokens are spread over this many ranks
    # attention: (KV heads on this GPU, K head size, V head size); vLLM's specs compare them,
    # so layers of equal pages but other head shapes (a draft model's) bucket apart
    shape: tuple[int, int, int] = ()

    @property
    def page(self) -> int:
        return self.page_padded or self.real_page

    @property
    def is_state(self) -> bool:
        return self.kind in STATE_KINDS

    @property
    def type_key(self) -> tuple:
        """Layers with equal type keys need the same number of blocks per request."""
        if self.is_state:
            return ("state", self.all_states, self.state_blocks)
        if self.kind in (FULL, MLA, INDEXER):
            return ("full", self.block_size)
        return (self.kind, self.window, self.encoder_len, self.block_size)

    def blocks_per_request(self, max_model_len: int, inflight: int) -> int:
        """Blocks one request needs at `max_model_len` (`max_memory_usage_bytes` / page)."""
        b = self.block_size
        if self.is_state:
            return (cdiv(max_model_len, b) if self.all_states else 0) + self.state_blocks
        if self.kind == SLIDING:
            return cdiv(min(self.window - 1 + inflight, max_model_len), b) + 1
        if self.kind == CHUNKED:
            return cdiv(min(self.window + inflight, max_model_len), b)
        if self.kind == CROSS:
            return cdiv(self.encoder_len, b)
        return cdiv(max_model_len, b * self.dcp)  # `AttentionSpec.max_num_blocks_per_req`


@record(frozen=True)
class KvDtypes:
    kv: str  # resolved kv cache dtype name ('bfloat16', 'fp8', 'fp8_ds_mla', 'nvfp4', ...)
    conv: str  # Mamba conv state dtype
    ssm: str  # Mamba SSM / recurrent state dtype
    # a quantized format's exceptions (core/kvquant.py): the model dtype, the layers kept in
    # it (--kv-cache-dtype-skip-layers and TurboQuant's boundary layers), the rotary width
    # (Octave) and the format sliding-window layers are sized as when that differs (int4 in
    # 0.25-0.27, whose SlidingWindowSpec has no int4 branch: the 8-bit size)
    model: str = ""
    skip: frozenset[int] = frozenset()
    rope_dim: int = 0
    sliding_kv: str = ""
    # a speculative drafter's own KV dtype (`speculative_config.kv_cache_dtype`) for the
    # layers from `draft_from` on (the drafter's, appended after the target's)
    draft_kv: str = ""
    draft_from: int = 0
    # a separate draft model's layers are named from 0 again ("draft_model.model.layers.0"),
    # so the skip list matches them by their own index (`Attention.__init__`,
    # `extract_layer_index`; the draft shares the target's cache config)
    draft_local: bool = False

    def for_layer(self, index: int, layer: Layer) -> str:
        """The KV dtype layer `index` stores (only attention layers store one)."""
        if self.draft_from and index >= self.draft_from:
            if self.draft_kv:
                return self.draft_kv
            if self.draft_local:
                index -= self.draft_from
        if index in self.skip:
            return self.model
        if self.sliding_kv and getattr(layer, "kind", "") == SLIDING:
            return self.sliding_kv
        return self.kv


def kv_heads_per_gpu(total: int, tp: int) -> int:
    """`ModelConfig.get_num_kv_heads`: max(1, total // tp) -- replicated past the head count."""
    return max(1, total // tp)


@lru_cache(maxsize=4096)
def attn_bytes_per_token(layer: AttnLayer, tp: int, kv: str, rope_dim: int = 0) -> int:
    """Bytes one token costs in one attention layer on one GPU."""
    if layer.kind == MLA:
        if kv == "fp8_ds_mla":
            return FP8_DS_MLA_BYTES_PER_TOKEN
        if kv == NVFP4_DS_MLA:
            return NVFP4_DS_MLA_BYTES
        return layer.head_size * dtype_bytes(kv)  # latent replicated on every TP rank
    heads = kv_heads_per_gpu(layer.num_kv_heads, tp)
    if is_quantized(kv):
        return heads * head_token_bytes(kv, layer.head_size, layer.head_size_v, rope_dim)
    return heads * (layer.head_size + layer.head_size_v) * dtype_bytes(kv)


def state_bytes(layer: StateLayer, tp: int, dt: KvDtypes) -> int:
    """Bytes of one Mamba/GDN/KDA state on one GPU (`MambaStateShapeCalculator`, 0.33)."""
    conv_b, ssm_b = dtype_bytes(dt.conv), dtype_bytes(dt.ssm)
    width = layer.d_conv - 1
    if layer.kind == MAMBA1:
        inter = layer.intermediate // tp
        return inter * width * conv_b + inter * layer.d_state * ssm_b
    if layer.kind == MAMBA2:
        g = layer.n_groups
        n_groups = g + (0 if g % tp == 0 else tp - g)  # groups padded up to a multiple of TP
        conv_dim = (layer.intermediate + 2 * n_groups * layer.d_state) // tp
        return (conv_dim * width * conv_b
                + (layer.n_heads // tp) * layer.head_dim * layer.d_state * ssm_b)
    if layer.kind == GDN:
        conv_dim = (2 * layer.k_heads * layer.k_dim + layer.v_heads * layer.v_dim) // tp
        return (conv_dim * width * conv_b
                + (layer.v_heads // tp) * layer.v_dim * layer.k_dim * ssm_b)
    if layer.kind == SHORTCONV:  # `short_conv_state_shape`: the conv state only
        return layer.intermediate // tp * width * conv_b
    if layer.kind == LIGHTNING:  # `linear_attention_state_shape`: no conv state; the state in
        # `linear_attention_state_dtype`'s --mamba-cache-dtype, else the model dtype (dt.conv)
        return (layer.n_heads // tp) * layer.head_dim * layer.head_dim * conv_b
    if layer.kind == KDA:  # `kda_state_dtype`: the recurrent state in dt.ssm (float32 for auto)
        conv_dim = (layer.v_heads * layer.v_dim + 2 * layer.k_heads * layer.k_dim) // tp
        return (conv_dim * width * conv_b
                + (layer.v_heads // tp) * layer.v_dim * layer.v_dim * ssm_b)
    raise BadInput(f"unknown state layer kind {layer.kind}")


@record(frozen=True)
class BlockPlan:
    """The block size vLLM settles on and why."""

    block_size: int
    reason: str
    mamba_page_padded: int = 0
    # 0.25+ with layers kept in the model dtype (`skip_page_size_padded`): every sliding-window
    # page is padded to this shared page, its block chosen per (KV dtype, head shape)
    skip_page_padded: int = 0
    sliding_blocks: tuple[tuple[tuple, int], ...] = ()


def choose_block_size(arch: ModelArch, *, user_block_size: int | None, mla_block: int,
                      tp: int, dt: KvDtypes, align_mode: bool, gdn_flashinfer: bool,
                      min_kernel_block: int = 16, chunk: int = 0,
                      default: tuple[int, str] = (16, "vLLM default")) -> BlockPlan:
    """Block size after backend preference and hybrid Mamba alignment.

    Phase 1: user `--block-size` wins, else the MLA backend's forced size, else `default`
    (16, or the attention backend's preference: `core/backends.py`).
    Phase 2 (hybrid state models): raise it so one attention page >= one state page
    (`_align_hybrid_block_size`); the state page is then padded to the attention page.
    `chunk` ('all' mode, 0.12-0.27): whole multiples of lcm(the Mamba kernel's chunk, the
    alignment) (`HybridAttentionMambaModelConfig`, then `_align_hybrid_block_size`).
    """
    if user_block_size:
        bs, why = user_block_size, "--block-size"
        if arch.kernel_block_size and bs % arch.kernel_block_size:
            raise BadInput(f"--block-size {bs} is not a multiple of the {arch.kernel_block_size}"
                           "-token blocks this model's sparse attention backend requires",
                           hint=f"use --block-size {arch.kernel_block_size}")
    elif arch.kernel_block_size:
        bs, why = arch.kernel_block_size, "the sparse attention backend's block size"
    elif arch.is_mla:
        bs, why = mla_block, "MLA backend block size"
    else:
        bs, why = default
    attns = [x for x in arch.layers if isinstance(x, AttnLayer)]
    states = [x for x in arch.layers if isinstance(x, StateLayer)] + [
        x.parallel_state for x in attns if x.parallel_state is not None]
    if not states or not attns:
        return BlockPlan(bs, why)
    mamba_page = max(state_bytes(s, tp, dt) for s in states)
    first = next(i for i, x in enumerate(arch.layers) if isinstance(x, AttnLayer))
    attn_1tok = attn_bytes_per_token(attns[0], tp, dt.for_layer(first, attns[0]), dt.rope_dim)
    align = max(min_kernel_block, bs)
    if arch.is_mla:
        align = max(align, 128)
    if align_mode and gdn_flashinfer and any(s.kind == GDN for s in states):
        align = math.lcm(align, FLASHINFER_GDN_CHECKPOINT_ALIGNMENT)
    if chunk:
        step = math.lcm(chunk, align)
        need = step * cdiv(cdiv(mamba_page, attn_1tok), step)
    else:
        need = align * cdiv(mamba_page, align * attn_1tok)
    need = min_kernel_block * cdiv(need, min_kernel_block)
    if bs < need:
        bs, why = need, "raised so one attention page holds one Mamba state"
    return BlockPlan(bs, why, mamba_page_padded=bs * attn_1tok)


def _dsv4_pad(n: int) -> int:
    return cdiv(n, DSV4_PAGE_ALIGN) * DSV4_PAGE_ALIGN


def dsv4_specs(layer: AttnLayer, bs: int) -> list[Spec]:
    """The caches one DeepSeek-V4 layer registers, in registration order: indexer K and the
    indexer compressor state (C4), the sliding-window cache, the compressed KV, and the main
    compressor state (`CompressorStateCache`: float32 [kv, score] state of 2*coff*dim per token,
    coff = 2 for C4; block 4 for C4, 8 for C128; window coff*ratio). Nothing is split by TP."""
    r, out = layer.compress_ratio, []

    def spec(kind: str, block: int, real: int, window: int = 0) -> Spec:
        padded = _dsv4_pad(real)
        return Spec(kind, block, real, page_padded=padded if padded > real else 0,
                    window=window, per_token=padded // block)

    if r == 4:
        out.append(spec(INDEXER, bs, bs // 4 * layer.indexer_bytes))
        out.append(spec(SLIDING, 4, 4 * 2 * 2 * 128 * 4, window=8))
    out.append(spec(SLIDING, DSV4_SWA_BLOCK, DSV4_SWA_BLOCK * DSV4_ROW_BYTES,
                    window=layer.window))
    if r > 1:
        coff, block = (2, 4) if r == 4 else (1, 8)
        out.append(spec(MLA, bs, bs // r * DSV4_ROW_BYTES))
        out.append(spec(SLIDING, block, block * 2 * coff * layer.head_size * 4,
                        window=coff * r))
    return out


def layer_specs(arch: ModelArch, *, tp: int, dt: KvDtypes, block: BlockPlan,
                inflight_state_blocks: int, all_states: bool = False,
                disable_hybrid: bool = False) -> tuple[list[Spec | None], list[int]]:
    """The cache specs in layer order (None where a layer keeps no cache), and the index of
    the layer that owns each one.

    A layer can own several specs: DeepSeek-V3.2's indexer follows its MLA spec, Falcon-H1's
    Mamba2 state its attention spec, and a DeepSeek-V4 layer registers up to five caches.
    """
    out: list[Spec | None] = []
    owners: list[int] = []
    # identical layer objects in the same KV dtype give identical specs
    memo: dict[tuple[int, str], list[Spec | None]] = {}
    for i, layer in enumerate(arch.layers):
        kv = dt.for_layer(i, layer)
        specs = memo.get((id(layer), kv))
        if specs is None:
            specs = memo[id(layer), kv] = _specs_of(layer, tp, dt, block, (
                inflight_state_blocks, all_states), disable_hybrid, kv)
        out.extend(specs)
        owners.extend([i] * len(specs))
    return out, owners


def _specs_of(layer: AttnLayer | StateLayer | None, tp: int, dt: KvDtypes, block: BlockPlan,
              states: tuple[int, bool], disable_hybrid: bool, kv: str) -> list[Spec | None]:
    """The specs one layer registers (`kv`: the KV dtype it stores, `KvDtypes.for_layer`;
    `states`: a state layer's fixed states per request and whether it keeps one per block)."""
    bs = block.block_size

    def state(st: StateLayer) -> Spec:
        real = state_bytes(st, tp, dt)
        return Spec(st.kind, bs, real, page_padded=block.mamba_page_padded
                    if block.mamba_page_padded > real else 0, state_blocks=states[0],
                    all_states=states[1])

    if layer is None:
        return [None]
    if isinstance(layer, StateLayer):
        return [state(layer)]
    if layer.kind == DSV4:
        return list(dsv4_specs(layer, bs))
    per_tok = attn_bytes_per_token(layer, tp, kv, dt.rope_dim)
    kind = layer.kind
    if disable_hybrid and kind in (SLIDING, CHUNKED):
        kind = FULL  # `unify_hybrid_kv_cache_specs`: local layers cost as full attention
    elif disable_hybrid and kind == CROSS:
        # Mllama runs on V0 only, whose `CacheEngine` gives every attention layer, cross
        # included, a slot in each block (`get_cache_block_size`: all layers of the model):
        # one block table, the decoder's tokens (an image's come from the same blocks)
        kind = FULL
    shape = (max(1, layer.num_kv_heads // tp), layer.head_size, layer.head_size_v)
    if kind == SLIDING and block.skip_page_padded:  # `Attention.get_kv_cache_spec`, 0.25+
        sw = dict(block.sliding_blocks)[(kv, *shape)]
        return [Spec(kind, sw, sw * per_tok, page_padded=block.skip_page_padded,
                     window=layer.window, per_token=per_tok, shape=shape)]
    out: list[Spec | None] = [Spec(kind, bs, bs * per_tok, window=layer.window,
                                   encoder_len=layer.encoder_len if kind == CROSS else 0,
                                   per_token=per_tok,
                                   shape=shape)]
    if layer.indexer_bytes:
        out.append(Spec(INDEXER, bs, bs * layer.indexer_bytes, per_token=layer.indexer_bytes))
    if layer.parallel_state is not None:
        out.append(state(layer.parallel_state))
    return out


def unify_pages(specs: list[Spec]) -> list[Spec]:
    """`unify_kv_cache_spec_page_size`: scale smaller attention blocks or pad to the max page."""
    pages = {s.page for s in specs}
    if len(pages) <= 1:
        return specs
    top = max(pages)
    out = []
    for s in specs:
        if s.page == top:
            out.append(s)
        elif s.is_state:
            out.append(replace(s, page_padded=top))
        elif top % s.page == 0 and s.page_padded:
            # vLLM scales the block but keeps the padded page, which its own assert refuses
            raise BadInput("vLLM cannot unify this KV cache: a sliding-window page padded to "
                           "the shared page of the layers kept in the model dtype is smaller "
                           "than another layer's page (`unify_kv_cache_spec_page_size` "
                           "asserts); it fails to start",
                           hint="drop --kv-cache-dtype-skip-layers / the quantized "
                                "--kv-cache-dtype, or use fp8", flag="kv_cache_dtype")
        elif top % s.page == 0:
            ratio = top // s.page
            out.append(replace(s, block_size=s.block_size * ratio, real_page=s.real_page * ratio))
        elif s.kind != MLA:
            out.append(replace(s, page_padded=top))
        else:
            raise BadInput("MLA layers with page sizes that do not divide each other cannot be "
                           "unified (vLLM raises NotImplementedError here too)")
    return out
