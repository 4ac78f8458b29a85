"""Quantized KV-cache formats of vLLM 0.20+: `--kv-cache-dtype` values beyond fp8.

What each format stores per token, which attention backend takes it on which GPU, the layers
vLLM keeps in the model dtype, and the memory the format adds outside the KV pool. Read in
the vLLM 0.20.2-0.33.0 wheels (methodology §2b):
* `config/cache.py` `CacheDType` (which release accepts which name);
* `v1/kv_cache_interface.py` `AttentionSpec.page_size_bytes` (0.20-0.27: scales and the NVFP4
  packing in the spec classes) and the backends' `customize_spec` from 0.28 (`triton_attn.py`,
  `flashinfer.py`, `turboquant_attn.py`, `ultraquant_attn.py`, `rocm_octave_attn.py`);
* `model_executor/layers/quantization/turboquant/config.py` (`TurboQuantConfig` slot sizes,
  `get_boundary_skip_layers`), `v1/attention/ops/rocm_octave.py` (`OctaveFormat`),
  `v1/attention/ops/ultraquant/format.py` (`slot_size`);
* `platforms/interface.py` `_align_heterogeneous_kv_block_size` (0.25+) and
  `model_executor/layers/attention/attention.py` (the layers kept in the model dtype).
"""

from __future__ import annotations

import math

from kvplan.errors import BadInput

PER_TOKEN_HEAD = ("int8_per_token_head", "fp8_per_token_head", "int4_per_token_head")
NVFP4 = ("nvfp4", "nvfp4_4over6")
TURBOQUANT = ("turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc",
              "turboquant_3bit_nc")
OCTAVE = ("octave_k3v4", "octave_k3v3", "octave_k3v3_compact")
ULTRAQUANT = "ultraquant_4bit"
NVFP4_DS_MLA = "nvfp4_ds_mla"
NVFP4_DS_MLA_BYTES = 352  # 256 B e2m1 NoPE + 64 B e4m3 RoPE + 32 B e4m3 scales (flashmla_sparse)

# first release whose `CacheDType` lists the name
SINCE: dict[str, tuple[int, int]] = {
    **{k: (0, 20) for k in ("int8_per_token_head", "fp8_per_token_head", "nvfp4", *TURBOQUANT)},
    "int4_per_token_head": (0, 25), "nvfp4_4over6": (0, 28), NVFP4_DS_MLA: (0, 30),
    ULTRAQUANT: (0, 32), **{k: (0, 33) for k in OCTAVE},
}
# TurboQuant presets (`TQ_PRESETS`): key bits (8 = FP8 keys), value bits
_TQ_BITS = {"turboquant_k8v4": (8, 4), "turboquant_4bit_nc": (4, 4),
            "turboquant_k3v4_nc": (3, 4), "turboquant_3bit_nc": (3, 3)}
TQ_DECODE_SPLITS = 32  # `tq_max_kv_splits_for_cuda_graph` default


def is_quantized(kv: str) -> bool:
    """A format of this module (fp8 and the 16-bit names are plain element dtypes)."""
    return kv in SINCE


def accepted(version_at_least) -> tuple[str, ...]:
    """The names a release accepts (`version_at_least(major, minor)`)."""
    return tuple(k for k, v in SINCE.items() if version_at_least(*v))


def tq_slot(kv: str, head_size: int) -> int:
    """Bytes of one KV head's K and V for one token (`slot_size_aligned`): FP8 keys or
    Lloyd-Max codes + a 2-byte norm, value codes + a 4-byte scale/zero, rounded up to even."""
    kb, vb = _TQ_BITS[kv]
    key = head_size if kb == 8 else math.ceil(head_size * kb / 8) + 2
    s = key + math.ceil(head_size * vb / 8) + 4
    return s + s % 2


def octave_slot(kv: str, head_size: int, rope_dim: int) -> int:
    """`OctaveFormat.slot_bytes`: 4-bit RoPE part (not in compact), 3-bit NoPE keys, 3/4-bit
    values and fp16 scales, rounded up to 8 bytes (4 in compact)."""
    compact = kv.endswith("_compact")
    v_bits = 4 if kv == "octave_k3v4" else 3
    wide = 0 if compact else rope_dim
    raw = (wide * 4 // 8 + (head_size - wide) * 3 // 8 + head_size * v_bits // 8
           + 2 * ((1 if compact else head_size // 64) + 1))
    align = 4 if compact else 8
    return -(-raw // align) * align


def head_token_bytes(kv: str, head_size: int, head_size_v: int, rope_dim: int = 0) -> int:
    """Bytes one KV head of one token costs in one attention layer (K and V together)."""
    if kv in ("int8_per_token_head", "fp8_per_token_head"):
        return head_size + head_size_v + 8  # one fp32 scale each for K and V, inline
    if kv == "int4_per_token_head":
        return head_size // 2 + head_size_v // 2 + 8  # zero-point hidden in the scale
    if kv in NVFP4:  # `nvfp4_kv_cache_full_dim`: e2m1 data + one fp8 scale per 16 values
        return head_size // 2 + head_size // 16 + head_size_v // 2 + head_size_v // 16
    if kv in _TQ_BITS:
        return tq_slot(kv, head_size)
    if kv in OCTAVE:
        return octave_slot(kv, head_size, rope_dim)
    if kv == ULTRAQUANT:  # FP4 codes + one UE8M0 scale per 32 values, K and V
        return head_size + head_size // 16
    raise BadInput(f"--kv-cache-dtype {kv} has no per-head layout")


def boundary_skip(kv: str, num_layers: int, hybrid: bool, version_at_least) -> list[int]:
    """Layers TurboQuant (and UltraQuant, 0.32+) keep in the model dtype by default
    (`get_boundary_skip_layers`): the first and last min(2, L // 2) decoder layers of a
    dense model; none in a hybrid (Mamba / linear-attention) model from 0.21."""
    if not (kv in _TQ_BITS or (kv == ULTRAQUANT and version_at_least(0, 32))):
        return []
    if hybrid:
        if not version_at_least(0, 21):
            raise BadInput(f"vLLM 0.20 refuses --kv-cache-dtype {kv} for hybrid (attention + "
                           "Mamba) models", hint="use vLLM 0.21 or later")
        return []
    n = min(2, num_layers // 2)
    return sorted(set(range(n)) | set(range(num_layers - n, num_layers)))


def check_supported(kv: str, *, version_at_least, vendor: str, cc: str, is_mla: bool,
                    sparse_mla: bool, sinks: bool, has_sliding: bool,
                    head_sizes: set[tuple[int, int]], rope_dim: int, dcp: int,
                    model_dtype: str, vtext: str) -> None:
    """Refuse what vLLM refuses ('No valid attention backend found ...'), one line each.
    `cc`: the compute capability, a gfx name on ROCm."""
    from kvplan.core.versions import cc_major as major_of

    cc_major = major_of(cc)
    def no(why: str, hint: str = "use --kv-cache-dtype auto or fp8") -> BadInput:
        return BadInput(f"vLLM {vtext} has no attention backend for --kv-cache-dtype {kv} "
                        f"here: {why}", hint=hint, flag="kv_cache_dtype")

    if kv == NVFP4_DS_MLA:
        if not sparse_mla:
            raise no("FLASHMLA_SPARSE stores it for sparse MLA models (DeepSeek-V3.2 style) "
                     "only")
        if vendor != "nvidia" or cc_major != 10:
            raise no("FLASHMLA_SPARSE takes nvfp4_ds_mla on SM100 (Blackwell) only",
                     hint="use --kv-cache-dtype fp8 (fp8_ds_mla)")
        return
    if is_mla:
        raise no("no MLA backend stores it", hint="use --kv-cache-dtype auto, fp8 or, for "
                 "sparse MLA on Blackwell (0.30+), nvfp4_ds_mla")
    if dcp > 1 and (kv not in PER_TOKEN_HEAD + NVFP4 or (
            kv in PER_TOKEN_HEAD) or (kv in NVFP4 and cc_major != 10)):
        raise no("its backend does not support decode context parallelism",
                 hint="drop -dcp or use another --kv-cache-dtype")
    if kv in PER_TOKEN_HEAD:
        if min(h for h, _ in head_sizes) < 32:
            raise no("TRITON_ATTN needs head size 32 or more")
        return
    if kv in NVFP4:
        if vendor != "nvidia":
            raise no("FlashInfer (NVIDIA only) stores NVFP4")
        if not version_at_least(0, 21):
            raise no("FlashInfer's metadata builder raises 'nvfp4 KV cache is not yet "
                     "supported' in 0.20", hint="use vLLM 0.21 or later")
        if any(h != v for h, v in head_sizes) and version_at_least(0, 28):
            raise no("FlashInfer asserts equal K and V head sizes for NVFP4")
        sizes = {64, 128, 256} | ({512} if version_at_least(0, 22) else set())
        odd = sorted({h for h, _ in head_sizes} - sizes)
        if odd:
            raise no(f"FlashInfer supports head sizes {', '.join(map(str, sorted(sizes)))}, "
                     f"not {odd[0]}")
        sm100 = cc_major == 10
        if kv == "nvfp4_4over6" and not sm100:
            raise no("nvfp4_4over6 needs FlashInfer's trtllm-gen store (SM100)",
                     hint="use --kv-cache-dtype nvfp4 or fp8")
        if version_at_least(0, 25) and not sm100:
            if not version_at_least(0, 32) or cc_major not in (8, 9, 12):
                raise no("FlashInfer takes NVFP4 KV on SM100 only before 0.32 (0.32+ also "
                         "SM80/90/120)", hint="use fp8, or vLLM 0.32+ on Ampere/Hopper/RTX "
                         "Blackwell")
            if 64 in {h for h, _ in head_sizes}:
                raise no("fa2 prefill misreads an NVFP4 KV cache at head_size 64 (off SM100)")
            if sinks:
                raise no("the sink prefill wrapper cannot read an NVFP4 KV cache (off SM100)")
        return
    if sinks:
        raise no("its backend does not support attention sinks")
    if kv in _TQ_BITS:
        return
    if kv == ULTRAQUANT:
        if vendor != "amd":
            raise no("the ULTRAQUANT backend is ROCm only")
        if model_dtype != "bfloat16":
            raise no("ULTRAQUANT runs bfloat16 models only")
        if any(h % 32 for h, _ in head_sizes):
            raise no("UltraQuant needs a head size that is a multiple of 32")
        return
    # Octave
    if vendor != "amd" or not (cc == "gfx942" or cc.startswith("gfx11")):
        raise no("ROCM_OCTAVE runs on RDNA3 and CDNA3 (MI300X/MI325X) only")
    if {h for h, _ in head_sizes} != {256} or rope_dim != 64:
        raise no("ROCM_OCTAVE kernels need head_size 256 and 64 rotary dims")
    if has_sliding:
        raise no("ROCM_OCTAVE does not support sliding window")


def hetero_block_size(block_size: int, primary_tok: int, padded_tok: int,
                      mamba_page_padded: int = 0, smallest_kernel_block: int = 16) -> int:
    """`_align_heterogeneous_kv_block_size` (0.25+, when layers are kept in the model dtype):
    the smallest kernel-aligned block whose quantized ('primary') page covers a model-dtype
    page of one kernel block (and any padded Mamba page)."""
    if padded_tok <= primary_tok:
        return block_size
    align = max(smallest_kernel_block, block_size)
    required = max(padded_tok * smallest_kernel_block, mamba_page_padded)
    return max(block_size, align * -(-required // (align * primary_tok)))

