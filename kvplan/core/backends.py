"""Where vLLM's choice of attention backend moves the KV block size of a non-MLA model
(`Platform.update_block_size_for_backend`, phase 1: `_preferred_block_size_for_backends`,
which asks the backend every attention layer shares for its preferred size). MLA backends'
sizes are `VllmVersion.mla_block_size`; hybrid Mamba alignment is `choose_block_size`."""

from __future__ import annotations

from kvplan.core.arch import DSV4, AttnLayer, ModelArch
from kvplan.core.versions import VllmVersion, cc_major, cc_tuple
from kvplan.errors import BadInput

# KV dtypes both halves of a Triton composite accept (`supports_kv_cache_dtype`: Triton's
# and FlashInfer's/FlashAttention's lists intersected, 0.30-0.33 wheels)
COMPOSITE_KV = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2")
# KV dtypes ROCM_AITER_UNIFIED_ATTN stores (`supported_kv_cache_dtypes`, 0.20.2-0.33.0;
# 0.25.0 alone lists neither float16 nor fp8_e5m2, `AITER_UNIFIED_KV_025`)
AITER_UNIFIED_KV = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2")
AITER_UNIFIED_KV_025 = ("auto", "bfloat16", "fp8", "fp8_e4m3")
# the head sizes the composites take (`create_composite_attention_backend(head_sizes=...)`)
COMPOSITE_HEADS = frozenset({256, 512})


def preferred_block(arch: ModelArch, *, kv: str, cc: str, vendor: str, version: VllmVersion,
                    composite: str | None, rocm_aiter: bool = False, kept: bool = False
                    ) -> tuple[int, str] | None:
    """The block size a backend imposes where it is not vLLM's 16, with vLLM's reason;
    None otherwise. `kv` is the resolved KV dtype; `composite`: the Triton composite the
    model runs (`composite_backend`); `rocm_aiter`: VLLM_ROCM_USE_AITER=1; `kept`: some
    layers stay in the model dtype (a second backend).

    * 0.19+ on ROCm: a model with attention sinks (gpt-oss), which ROCM_ATTN refuses
      (`supports_sink`), runs ROCM_AITER_UNIFIED_ATTN wherever aiter is installed (the
      vllm-openai-rocm image; `is_aiter_found_and_supported` ignores the environment but
      needs CDNA3+, so not on an MI250X), whose `get_preferred_block_size` is 64
      (`_get_backend_priorities`, rocm.py, the same in the 0.19.0-0.33.0 wheels). With
      VLLM_ROCM_USE_AITER=1 ROCM_AITER_FA comes first and keeps 16 once it takes sinks
      (0.23); without aiter TRITON_ATTN keeps 16, and so does a per-token-head cache,
      which that backend does not take (its `supported_kv_cache_dtypes`).
    * 0.32+ on ROCm: UltraQuant's backend prefers 64-token blocks ("FlyDSL D=256 decode
      geometry requires a 64-token KV block") when it is the only attention backend (no
      layer kept); the hybrid Mamba alignment then builds on 64.

    * 0.30+ on data-centre Blackwell (SM10x): a multimodal prefix-LM model whose heads are
      all 256 or 512 wide (Gemma 3 4B/12B, Gemma 4 31B/26B-A4B, PaliGemma 2) runs the
      TRITON_FLASHINFER composite, whose only kernel block is 64 (`triton_flashinfer.py`,
      `kernel_block_sizes=(64,)`), so `AttentionBackend.get_preferred_block_size` returns
      64. The composites support no decode context parallelism.
    * 0.31+ on Hopper (SM9x) with an fp8 cache: a model whose widest head is 512 (Gemma 4;
      `ModelArchitectureConfig.from_layers` takes the max over layers) runs FlashAttention 4
      on those layers, whose SM90 FP8 kernel uses 64-token pages
      (`FlashAttentionBackend._get_sm90_fa4_fp8_kv_block_size`, spec-less in
      `get_preferred_block_size`; the TRITON_FLASH_ATTN composite inherits it).
    Page unification then doubles the block of the group with the smaller page."""
    if arch.is_mla:
        return None
    if vendor == "amd":
        aiter_fa_sinks = rocm_aiter and version.at_least(0, 23)  # ROCM_AITER_FA's sinks
        unified_kv = AITER_UNIFIED_KV_025 if version.at_least(0, 25) and not \
            version.at_least(0, 26) else AITER_UNIFIED_KV
        if arch.attention_sinks and version.at_least(0, 19) and not aiter_fa_sinks and \
                kv in unified_kv and cc != "gfx90a":
            return 64, "ROCM_AITER_UNIFIED_ATTN, ROCm's backend for attention sinks, " \
                       "prefers 64-token blocks"
        if kv == "ultraquant_4bit" and version.at_least(0, 32) and not kept:
            return 64, "ULTRAQUANT's FlyDSL decode kernel takes 64-token blocks"
        return None
    if vendor != "nvidia" or not arch.attn_head_sizes:
        return None
    if composite == "TRITON_FLASHINFER":
        return 64, "TRITON_FLASHINFER, the multimodal prefix-LM backend on SM10x, takes " \
                   "64-token blocks only"
    if cc_major(cc) == 9 and version.at_least(0, 31) and kv in ("fp8", "fp8_e4m3") and \
            max(arch.attn_head_sizes) == 512:
        return 64, "FlashAttention 4's SM90 FP8 kernel for 512-wide heads uses 64-token pages"
    return None


def composite_backend(arch: ModelArch, *, kv: str, cc: str, vendor: str,
                      version: VllmVersion, multimodal: bool, dcp: int) -> str | None:
    """The Triton composite a multimodal prefix-LM model with images on and 256/512-wide
    heads runs (`_get_backend_priorities` puts it first): TRITON_FLASHINFER on SM10x from
    0.30, TRITON_FLASH_ATTN on SM90 from 0.31 (0.30's FA4-only causal route takes no
    256-wide heads there). None elsewhere; the composites support no DCP."""
    if vendor != "nvidia" or not (arch.mm_prefix_lm and multimodal) or dcp != 1 or \
            arch.is_mla or kv not in COMPOSITE_KV:
        return None
    if not arch.attn_head_sizes or not arch.attn_head_sizes <= COMPOSITE_HEADS:
        return None
    major = cc_major(cc)
    if major == 10 and version.at_least(0, 30):
        return "TRITON_FLASHINFER"
    if major == 9 and version.at_least(0, 31):
        return "TRITON_FLASH_ATTN"
    return None


def full_graphs_refused(arch: ModelArch, composite: str | None, version: VllmVersion, *,
                        triton_mla: bool = False) -> str | None:
    """Why an attention backend reports no full-graph support (NEVER), or None; vLLM then
    captures PIECEWISE graphs only (`resolve_cudagraph_mode_and_sizes`, 0.11+ in
    `_check_and_update_cudagraph_mode`).
    * Llama 4's chunked-local layers: `ChunkedLocalAttentionBuilder` is NEVER from 0.11
      (chunked_local_attention.py; 0.10 took the underlying backend's support).
    * A composite's image-prefix routing when a sliding window is not clamped for image
      prefixes (`MMPrefixAttentionRouting.get_cudagraph_support`, `_has_unclamped_window`,
      0.30-0.33): Gemma 3's sliding layers set no `mm_prefix_clamp_sliding_window`
      (gemma3.py), Gemma 4's do.
    * Triton-MLA (`triton_mla`: it runs the MLA layers) 0.11-0.21: its builder keeps the
      base class's NEVER (`MLACommonMetadataBuilder`; `TritonMLAMetadataBuilder`, UNIFORM_BATCH,
      arrives in 0.22)."""
    kinds = {x.kind for x in arch.layers if isinstance(x, AttnLayer)}
    if triton_mla and version.at_least(0, 11) and not version.at_least(0, 22):
        return ("Triton-MLA takes no full CUDA graphs before vLLM 0.22: vLLM captures "
                "PIECEWISE graphs only")
    if "chunked" in kinds and version.at_least(0, 11):
        return ("Llama 4's chunked local attention takes no full CUDA graphs: vLLM captures "
                "PIECEWISE graphs only")
    if composite is not None and arch.model_type.startswith("gemma3") and "sliding" in kinds:
        return ("this model's image-prefix attention backend takes no full CUDA graphs "
                "(Gemma 3's sliding windows are not clamped): vLLM captures PIECEWISE "
                "graphs only")
    return None


# head sizes FlashInfer's attention takes (`FlashInferBackend.get_supported_head_sizes`)
FLASHINFER_HEADS = frozenset({64, 128, 256, 512})


def check_triton_fp8(arch: ModelArch, *, kv: str, cc: str, vendor: str,
                     version: VllmVersion, multimodal: bool) -> None:
    """Refuse what vLLM 0.27+ refuses: an fp8 KV cache on Ampere (SM80/86/87). FlashAttention
    2 stores no fp8 (`flash_attn_supports_kv_cache_dtype`), so fp8 needs FlashInfer; where
    FlashInfer cannot take the layers, Triton does, and its fp8 path "requires SM89+"
    (`TritonAttentionImpl`/`TritonMLAImpl.__init__`, 0.25/0.26+; read in the 0.27.1-0.33.0
    wheels)."""
    if vendor != "nvidia" or not kv.startswith("fp8") or not version.at_least(0, 27):
        return
    if not (8, 0) <= cc_tuple(cc) < (8, 9):
        return
    heads = arch.attn_head_sizes
    if arch.is_mla:
        why = "MLA runs on Triton-MLA there"
    elif arch.attention_sinks:
        why = "FlashInfer takes attention sinks on SM90/SM100/SM120 only"
    elif heads - FLASHINFER_HEADS:
        why = (f"FlashInfer takes head sizes 64/128/256/512, not "
               f"{min(heads - FLASHINFER_HEADS)}")
    elif arch.model_type.startswith("gemma4") and len(heads) > 1:
        why = "Gemma 4 runs on Triton without FlashAttention 4 (`Gemma4Config`)"
    elif arch.mm_prefix_lm and multimodal:
        why = "FlashInfer has no multimodal-prefix attention"
    else:
        return
    raise BadInput(f"vLLM {version.text} refuses an fp8 KV cache for this model on compute "
                   f"capability {cc}: {why}, and Triton's fp8 cache 'requires SM89+'",
                   hint="use --kv-cache-dtype auto (or an Ada/Hopper GPU)", flag="kv_cache_dtype")


# the KV dtypes TRITON_MLA lists (`supported_kv_cache_dtypes`), by the release that
# introduced the list (the 0.13.0, 0.15.1 and 0.18.0 wheels; unchanged to 0.33)
TRITON_MLA_KV = (((0, 18), ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3")),
                 ((0, 15), ("auto", "bfloat16")), ((0, 13), ("auto",)))


def triton_mla_runs(cc: str, vendor: str, rocm_aiter: bool) -> bool:
    """Whether Triton-MLA is the MLA backend: on ROCm without VLLM_ROCM_USE_AITER, and on
    NVIDIA GPUs other than Hopper and data-centre Blackwell (`VllmVersion.mla_block_size`;
    Ampere, Ada, SM12x)."""
    return not rocm_aiter if vendor == "amd" else cc_major(cc) not in (9, 10)


def check_triton_mla_kv(arch: ModelArch, *, requested_kv: str, cc: str, vendor: str,
                        version: VllmVersion, rocm_aiter: bool) -> None:
    """Refuse a KV dtype Triton-MLA does not list where it is the only MLA backend (Ampere,
    Ada, SM12x, and ROCm without VLLM_ROCM_USE_AITER): "No valid attention backend". Only
    `auto` in 0.13-0.14, bfloat16 too in 0.15-0.17, float16 / fp8 / fp8_e4m3 from 0.18;
    fp8_e5m2 never, and from 0.12 no CUDA MLA backend takes it."""
    if not arch.is_mla or arch.is_sparse_mla or DSV4 in arch.kinds:
        return
    kv = (requested_kv or "auto").lower()
    if kv == "fp8_e5m2" and vendor == "nvidia" and version.at_least(0, 12):
        # no CUDA MLA backend lists it (FLASH_ATTN_MLA, FLASHMLA, CUTLASS_MLA, FLASHINFER_MLA,
        # TRITON_MLA `supported_kv_cache_dtypes`, the 0.12-0.33 wheels)
        raise BadInput(f"vLLM {version.text} has no MLA attention backend for --kv-cache-dtype "
                       "fp8_e5m2", hint="use --kv-cache-dtype fp8 (e4m3) or auto",
                       flag="kv_cache_dtype")
    if vendor not in ("amd", "nvidia") or not triton_mla_runs(cc, vendor, rocm_aiter):
        return
    allowed = next((kv for since, kv in TRITON_MLA_KV if version.at_least(*since)), None)
    if allowed is None or kv in allowed:
        return
    raise BadInput(f"vLLM {version.text}'s MLA backend on this GPU (TRITON_MLA) takes no "
                   f"--kv-cache-dtype {kv} (it lists {', '.join(allowed)})",
                   hint="use --kv-cache-dtype auto" + (
                       " or fp8" if "fp8" in allowed else ""), flag="kv_cache_dtype")


# the KV dtypes FLASHINFER_MLA_SPARSE_SM120 accepts (`supports_combination`), all stored as
# the packed fp8_ds_mla layout (`_canonicalize_sparse_mla_kv_cache_dtype`)
SM120_SPARSE_KV = ("auto", "fp8", "fp8_e4m3", "fp8_ds_mla")


def check_sparse_mla(arch: ModelArch, *, requested_kv: str, model_dtype: str, cc: str,
                     vendor: str, version: VllmVersion) -> None:
    """Refuse a DeepSeek-V3.2-style sparse MLA model (V3.2, GLM-5) on an NVIDIA GPU where
    vLLM has no attention backend for it. FlashMLA's sparse kernels
    (FLASHMLA_SPARSE, and FlashInfer's and FlashAttention's sparse variants) run on SM90 and
    SM100 only (`supports_compute_capability`); SM12x has FLASHINFER_MLA_SPARSE_SM120 from
    0.24, which takes bfloat16 models with `index_topk` 2048 and stores only fp8_ds_mla
    (its impl raises "requires the packed fp8_ds_mla KV cache layout"; the 0.24-0.33
    wheels). DeepSeek-V4 has its own backends and is not judged here."""
    if vendor != "nvidia" or not arch.is_sparse_mla or DSV4 in arch.kinds:
        return
    major = cc_major(cc)
    if major in (9, 10):
        return
    if major != 12 or not version.at_least(0, 24):
        raise BadInput(f"vLLM {version.text} has no sparse MLA backend for compute capability "
                       f"{cc} (FlashMLA's sparse kernels run on SM90/SM100"
                       + (", FLASHINFER_MLA_SPARSE_SM120 arrives in 0.24)" if major == 12
                          else ")"),
                       hint="use vLLM 0.24 or later" if major == 12
                       else "use a Hopper or data-centre Blackwell GPU")
    name = "vLLM's SM12x sparse MLA backend (FLASHINFER_MLA_SPARSE_SM120)"
    if (requested_kv or "auto").lower() not in SM120_SPARSE_KV:
        raise BadInput(f"{name} stores only the packed fp8_ds_mla cache, not {requested_kv}",
                       hint="use --kv-cache-dtype auto or fp8", flag="kv_cache_dtype")
    if model_dtype != "bfloat16":
        raise BadInput(f"{name} runs bfloat16 models only, not {model_dtype}",
                       hint="use --dtype bfloat16", flag="dtype")
    topk = arch.text_config.get("index_topk")
    if topk is not None and int(topk) != 2048:
        raise BadInput(f"{name} requires index_topk 2048; this model has {topk}",
                       hint="use a Hopper or data-centre Blackwell GPU")


def check_rocm_sparse_mla(*, requested_kv: str, block_size: int | None, vendor: str,
                          version: VllmVersion) -> None:
    """Refuse what ROCM_AITER_MLA_SPARSE cannot run: fp8 caches before 0.21 ("doesn't
    support fp8 kv_cache_dtype", 0.14.1-0.17.1 `get_attn_backend_cls`; from 0.18 its
    `supported_kv_cache_dtypes` lists auto, float16 and bfloat16, fp8 / fp8_e4m3 from 0.21)
    and a block size other than 1 before 0.18 ("Sparse MLA backend on ROCm only supports
    block size 1 for now"; the 0.14.1-0.33 wheels)."""
    if vendor != "amd":
        return
    rocm_fp8 = ("fp8", "fp8_e4m3") if version.at_least(0, 21) else ()
    if requested_kv.startswith("fp8") and requested_kv not in rocm_fp8:
        raise BadInput(f"vLLM {version.text} on ROCm has no {requested_kv} KV cache for "
                       "sparse MLA (ROCM_AITER_MLA_SPARSE)",
                       hint="use --kv-cache-dtype auto" + (
                           " or fp8" if rocm_fp8 else " or vLLM 0.21+ for fp8"),
                       flag="kv_cache_dtype")
    if not version.at_least(0, 18) and block_size != 1:
        raise BadInput(f"vLLM {version.text} on ROCm runs sparse MLA with block size 1 only",
                       hint="use --block-size 1 or vLLM 0.18+", flag="block_size")


def check_dcp(arch: ModelArch, *, dcp: int, tp: int, kv: str, cc: str, vendor: str,
              version: VllmVersion) -> None:
    """Refuse decode context parallelism where vLLM does (read in the 0.10.2-0.33 wheels):
    * GQA / MQA / MHA models (`ModelConfig.verify_with_parallel_config`, an assert in
      0.12-0.26, a ValueError from 0.27): TP above the KV heads, DCP at most TP / KV heads,
      and query heads per KV head divisible by DCP; before 0.12 no non-MLA backend returns
      the decode LSE DCP needs, nor do ROCm's or those below compute capability 8.0.
    * Sparse MLA: not on ROCm (`ROCM_AITER_MLA_SPARSE.supports_dcp` False); on Hopper 0.28
      neither sparse backend returns the LSE; on Hopper from 0.29 FLASHMLA_SPARSE takes only
      an fp8_ds_mla cache, and wherever it runs (fp8_ds_mla) the local heads must be under
      32 and pad with their DCP-gathered count to one decode kernel (local x DCP <= 64),
      and GLM-5's a2a DCP default is refused in 0.29-0.32 ("only validated with the default
      'ag_rs' DCP comm backend")."""
    if dcp <= 1:
        return
    hint = "drop -dcp, or use a size vLLM accepts"

    def no(why: str) -> BadInput:
        return BadInput(f"vLLM {version.text} refuses --decode-context-parallel-size {dcp} "
                        f"here: {why}", hint=hint, flag="decode_context_parallel_size")

    if not arch.is_mla:
        if not version.at_least(0, 12):
            raise no("no attention backend but MLA's returns the decode LSE DCP needs "
                     "(0.12+ for other models)")
        if vendor != "nvidia" or cc_major(cc) < 8:
            raise no("its attention backends on this GPU (Triton / ROCm) do not support DCP")
        attn = next((x for x in arch.layers if isinstance(x, AttnLayer)), None)
        kvh, heads = (attn.num_kv_heads if attn else 0), arch.num_attention_heads
        if kvh and tp <= kvh:
            raise no(f"DCP for GQA/MQA needs --tensor-parallel-size ({tp}) above the model's "
                     f"{kvh} KV heads")
        if kvh and dcp > tp // kvh:
            raise no(f"the largest DCP for TP {tp} and {kvh} KV heads is {tp // kvh}")
        if kvh and heads and (heads // kvh) % dcp:
            raise no(f"the {heads // kvh} query heads per KV head are not divisible by it")
        return
    if not arch.is_sparse_mla or DSV4 in arch.kinds:
        return
    if vendor == "amd":
        raise no("ROCm's sparse MLA backend (ROCM_AITER_MLA_SPARSE) does not support DCP")
    major = cc_major(cc)
    if major == 9 and version.at_least(0, 28) and not version.at_least(0, 29):
        raise no("neither Hopper sparse MLA backend returns the decode LSE DCP needs")
    if major == 9 and kv != "fp8_ds_mla" and version.at_least(0, 29):
        # FlashAttention's sparse MLA refuses DCP, so FLASHMLA_SPARSE runs, whose
        # `__init__` raises: "DCP for FlashMLA sparse requires an fp8_ds_mla kv-cache"
        raise BadInput(f"vLLM {version.text} on Hopper runs sparse MLA with decode context "
                       "parallelism only on an fp8_ds_mla cache",
                       hint="add --kv-cache-dtype fp8, or drop -dcp",
                       flag="decode_context_parallel_size")
    if kv == "fp8_ds_mla" and version.at_least(0, 29):  # FLASHMLA_SPARSE
        local = max(1, arch.num_attention_heads // tp)
        if local >= 32 or local * dcp > 64:
            raise no(f"FlashMLA sparse needs the {local} local heads under 32 and, gathered "
                     f"over DCP ({local * dcp}), within one 64-head decode kernel")
        if "GlmMoeDsaForCausalLM" in arch.architectures and not version.at_least(0, 33):
            raise no("GLM-5 defaults to the a2a DCP backend, which FlashMLA sparse refuses "
                     "(vLLM's --dcp-comm-backend ag_rs, not modelled, avoids it)")


def flashmla_sparse_runs(*, cc: str, vendor: str, version: VllmVersion, kv: str,
                         heads_local: int, forced: str | None) -> bool:
    """Whether FLASHMLA_SPARSE serves a sparse MLA model (V3.2, GLM-5) whose cache is not
    fp8_ds_mla, where from 0.18 it reserves its bf16 query concat at build
    (`FlashMLASparseImpl.__init__`): when forced; on Hopper before 0.25, from which
    FLASH_ATTN_MLA_SPARSE comes first; on SM100 for a 16-bit cache above 16 heads a rank
    (FlashInfer's sparse MLA, from 0.33 FA4's, comes first at 16 or fewer, and for any fp8
    cache from 0.19; `_get_backend_priorities`, the 0.18-0.33 wheels)."""
    if vendor != "nvidia" or not version.at_least(0, 18):
        return False
    if forced:
        return forced == "FLASHMLA_SPARSE"
    major = cc_major(cc)
    if major == 9:
        return not version.at_least(0, 25)
    return major == 10 and kv in ("bfloat16", "float16") and heads_local > 16


_MLA_WS = 128 << 20  # CUTLASS-MLA's `SM100Workspace`, FlashInfer-MLA's workspace buffer
_FI_SPARSE_WS = 394 << 20  # FlashInfer-MLA-sparse from 0.25 (`VLLM_FLASHINFER_WORKSPACE_...`)


def mla_backend_buffers(arch: ModelArch, *, cc: str, vendor: str, version: VllmVersion,
                        forced: str | None, kv: str, tp: int, dcp: int = 1) -> tuple[int, int]:
    """MLA backend buffers vLLM allocates outside the layers, per GPU: (at import, inside
    "Model loading took"; first used in the CUDA-graph probe). Read in the 0.11.0-0.33.0
    wheels by a helper:
    * `get_valid_backends` (0.11.1+) imports every class of the priority list, and two
      modules allocate at import: `cutlass_mla.py`'s `g_sm100_workspace` (128 MiB, every
      release) and `flashinfer_mla.py`'s `g_fi_workspace` (128 MiB, 0.11-0.24; lazy from
      0.25). Every MLA list names FlashInfer-MLA; only SM100's names CUTLASS-MLA. SM100 dense
      MLA was forced to CUTLASS-MLA in 0.11.0 and 0.13-0.14 and to FlashInfer-MLA in
      0.15-0.17 (qk_nope 128), so only that module loads; SM12x has its own list from 0.24.
    * From 0.25 FlashInfer-MLA's 128 MiB (256 with DCP, its LSE) and FlashInfer-MLA-sparse's
      394 MiB (128 MiB in 0.17-0.24) are created at the first decode with metadata, the
      graph probe's first FULL capture, so they sit in the graph estimate."""
    if vendor != "nvidia" or not arch.is_mla or DSV4 in arch.kinds:
        return 0, 0
    v, sm100, sparse = version.v[:2], cc_major(cc) == 10, arch.is_sparse_mla
    nope = int(arch.text_config.get("qk_nope_head_dim") or 0)
    fi_at_import = v <= (0, 24)
    if forced:
        load = _MLA_WS if forced == "CUTLASS_MLA" or (
            forced == "FLASHINFER_MLA" and fi_at_import) else 0
    elif v < (0, 11) or v == (0, 11) and version.v[2] == 0:  # no import loop in 0.11.0
        load = _MLA_WS if sm100 and not sparse else 0
    elif not sm100:
        load = _MLA_WS if fi_at_import and not (cc_major(cc) == 12 and v >= (0, 24)) else 0
    elif not sparse and ((0, 13) <= v <= (0, 14) or ((0, 15) <= v <= (0, 17) and nope == 128)):
        load = _MLA_WS  # the forced backend's module only
    else:
        load = _MLA_WS * (2 if fi_at_import else 1)
    probe = 0
    if sm100 and v >= (0, 20):
        fp8 = kv.startswith("fp8")
        if sparse and forced in (None, "FLASHINFER_MLA_SPARSE") and (
                fp8 or (arch.num_attention_heads // max(tp, 1) <= 16 and v < (0, 33))):
            probe = _FI_SPARSE_WS if v >= (0, 25) else _MLA_WS
        elif not sparse and v >= (0, 25) and (forced == "FLASHINFER_MLA" or (
                forced is None and nope == 128)):  # first in SM100's dense MLA list
            probe = _MLA_WS * (2 if dcp > 1 else 1)
    return load, probe
