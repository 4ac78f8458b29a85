"""The KV dtype a start stores, layer by layer: what a checkpoint's quantization does to
`--kv-cache-dtype`, the quantized formats' refusals and kept layers, the block size and the
buffers they add (formulas in `core/kvquant.py`; methodology §2 and §2b)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from kvplan.core import kvquant as Q
from kvplan.core.arch import AttnLayer, ModelArch
from kvplan.core.dtypes import dtype_bytes
from kvplan.core.kvspec import BlockPlan, KvDtypes, kv_heads_per_gpu
from kvplan.core.versions import VllmVersion, cc_major
from kvplan.errors import BadInput
from kvplan.units import GiB, MiB, cdiv


def model_default_kv(arch: ModelArch, requested: str, cc: str, vendor: str,
                     version: VllmVersion, notes: list[str]) -> str:
    """A model's own default for `--kv-cache-dtype auto`: GLM-5 (`GlmMoeDsaForCausalLM`)
    stores fp8_e4m3 on SM10x from 0.32 (`GlmMoeDsaForCausalLM.verify_and_update_config`,
    models/config.py; absent in the 0.31.0 wheel)."""
    if requested == "auto" and "GlmMoeDsaForCausalLM" in arch.architectures and \
            vendor == "nvidia" and cc_major(cc) == 10 and version.at_least(0, 32):
        notes.append(f"vLLM {version.text} stores GLM-5's KV cache as fp8 on SM10x when "
                     "--kv-cache-dtype is auto (ask for bfloat16 to keep 16 bits)")
        return "fp8_e4m3"
    return requested


def checkpoint_kv(kv: str, arch: ModelArch, a: Any, version: VllmVersion, notes: list[str],
                  resolve: Callable[[str], str]) -> str:
    """What the checkpoint's quantization makes of the resolved KV dtype (`Attention.__init__`):
    * fp8_e5m2 with an FP8-quantized checkpoint (fp8, ModelOpt, quark, compressed-tensors;
      online `-q fp8` too) is refused, "fp8_e5m2 kv-cache is not supported with fp8
      checkpoints"; compressed-tensors without a kv_cache_scheme is exempt from 0.24;
    * a compressed-tensors checkpoint with a kv_cache_scheme stores fp8 (`resolve("fp8")`)
      from 0.15 ("llm-compressor mdls need to set cache_dtype to 'fp8' manually"; absent in
      the 0.14.1 wheel), whatever was asked up to 0.21 and for `auto` only from 0.22 (the
      0.20.2 and 0.22.1 wheels)."""
    q = arch.quantization or {}
    method = str(q.get("quant_method") or a.quantization or "").lower()
    scheme = isinstance(q.get("kv_cache_scheme"), dict)
    if kv == "fp8_e5m2" and (method in ("fp8", "quark") or method.startswith("modelopt") or (
            method == "compressed-tensors" and (scheme or not version.at_least(0, 24)))):
        raise BadInput("vLLM refuses --kv-cache-dtype fp8_e5m2 with an FP8-quantized "
                       f"checkpoint ({method}): 'fp8_e5m2 kv-cache is not supported with fp8 "
                       "checkpoints'", hint="use --kv-cache-dtype fp8 (e4m3)",
                       flag="kv_cache_dtype")
    if not (method == "compressed-tensors" and scheme and version.at_least(0, 15) and (
            a.kv_cache_dtype == "auto" or not version.at_least(0, 22))):
        return kv
    if a.kv_cache_dtype != "auto" and not kv.startswith("fp8"):
        notes.append(f"vLLM {version.text} stores this checkpoint's KV cache as fp8 (its "
                     f"kv_cache_scheme), not the requested {a.kv_cache_dtype}")
    return resolve("fp8")


def _backend_refusals(kv: str, arch: ModelArch, attn: list, kept: list[int], gpu: Any,
                      version: VllmVersion, multimodal: bool) -> None:
    """Starts vLLM 0.26-0.33 refuse once the layers kept in the model dtype are known
    (read in the 0.33 wheel with a helper; the same code in the releases named):
    * TurboQuant (and UltraQuant from 0.32) has no sliding-window support
      (`supports_sliding_window` is False: "No valid attention backend"), 0.26+;
    * kept layers and quantized layers must share a KV layout (`get_supported_kv_cache_
      layouts`, 0.29+): FlashInfer (SM10x) declares LBHNC/BLHNC and ROCM_ATTN LHBNC/LBHNC,
      TurboQuant and UltraQuant only LBNHC ("No KV cache layout satisfies every supported
      set"); ROCm's selector filters layouts for TurboQuant from 0.31, never for UltraQuant;
    * FlashInfer, the only NVFP4 backend, has no multimodal-prefix attention
      (`supports_mm_prefix`), so a prefix-LM model with images on has no backend;
    * a kept first layer of such a model runs a Triton composite whose `customize_spec`
      refuses a per-token-head primary spec ("Composite backends require the same KV cache
      spec", `_align_heterogeneous_kv_block_size`, 0.30+ on SM10x, 0.31+ on SM90)."""
    from kvplan.core.backends import composite_backend

    v, fmt = version.text, kv
    sw_free = kv in Q.TURBOQUANT or (kv == Q.ULTRAQUANT and version.at_least(0, 32))
    if sw_free and version.at_least(0, 26) and any(
            x.kind == "sliding" and i not in kept for i, x in attn):
        raise BadInput(f"vLLM {v} has no attention backend for --kv-cache-dtype {fmt} on "
                       "sliding-window layers (`supports_sliding_window`)",
                       hint="keep them with --kv-cache-dtype-skip-layers sliding_window, or "
                            "use fp8", flag="kv_cache_dtype")
    cc, amd = cc_major(gpu.compute_capability), gpu.vendor == "amd"
    layout = None
    if kept and version.at_least(0, 29):
        rocm_attn = amd and ((kv in Q.TURBOQUANT and not version.at_least(0, 31)) or (
            kv == Q.ULTRAQUANT and version.at_least(0, 32)))
        if kv in Q.TURBOQUANT and gpu.vendor == "nvidia" and cc == 10:
            layout = "FLASHINFER (LBHNC/BLHNC)"
        elif rocm_attn:
            layout = "ROCM_ATTN (LHBNC/LBHNC)"
    if layout:
        raise BadInput(f"vLLM {v} fails at start-up with --kv-cache-dtype {fmt}: the layers "
                       f"kept in the model dtype run {layout}, its backend reads only LBNHC "
                       "('No KV cache layout satisfies every supported set')",
                       hint="use fp8, a hybrid model (no boundary layers) or another GPU",
                       flag="kv_cache_dtype")
    mm_prefix = arch.mm_prefix_lm and multimodal and gpu.vendor == "nvidia"
    if mm_prefix and kv in Q.NVFP4:
        raise BadInput(f"vLLM {v} has no attention backend for --kv-cache-dtype {fmt} here: "
                       "FlashInfer, the only NVFP4 backend, has no multimodal-prefix "
                       "attention", hint="use a per-token-head format, fp8, or "
                       "--language-model-only", flag="kv_cache_dtype")
    if mm_prefix and kv in Q.PER_TOKEN_HEAD and attn and attn[0][0] in kept and \
            composite_backend(arch, kv="auto", cc=gpu.compute_capability, vendor=gpu.vendor,
                              version=version, multimodal=True, dcp=1):
        raise BadInput(f"vLLM {v} fails at start-up: the kept first layer runs a Triton "
                       f"composite backend, which refuses the {fmt} cache spec ('Composite "
                       "backends require the same KV cache spec')",
                       hint="keep a later layer, not the first, or use fp8",
                       flag="kv_cache_dtype_skip_layers")


def per_layer(dts: KvDtypes, arch: ModelArch, gpu: Any, a: Any, version: VllmVersion,
              model_dtype: str, notes: list[str], *, multimodal: bool = False) -> KvDtypes:
    """A quantized --kv-cache-dtype (core/kvquant.py) and --kv-cache-dtype-skip-layers:
    refuse what vLLM refuses and settle which layers stay in the model dtype
    (`Attention.__init__`: a listed index, or 'sliding_window' for windowed layers).
    `multimodal`: the towers are on, so a prefix-LM model's layers ask for `use_mm_prefix`."""
    kv, flag = dts.kv, "kv_cache_dtype_skip_layers"
    user = [str(x).strip() for x in a.kv_cache_dtype_skip_layers if str(x).strip()]
    if user and not version.at_least(0, 19):
        raise BadInput(f"vLLM {version.text} has no --kv-cache-dtype-skip-layers (0.19+)",
                       flag=flag)
    bad = [x for x in user if x != "sliding_window" and not (x.isascii() and x.isdigit())]
    if bad:
        raise BadInput(f"--kv-cache-dtype-skip-layers {bad[0]!r} is not a layer index or "
                       "sliding_window", hint="give layer numbers from 0 (e.g. 0,1,31) or "
                       "sliding_window", flag=flag)
    past = sorted(int(x) for x in user if x.isdigit() and int(x) >= arch.num_layers)
    if past and a.speculative is None:  # `Attention.__init__` matches layer names: past the
        # end only a drafter's layers (MTP's are numbered after the model's) can match
        notes.append(f"--kv-cache-dtype-skip-layers {','.join(map(str, past))}: the model has "
                     f"layers 0-{arch.num_layers - 1}: vLLM matches no layer there and "
                     "quantizes as if it were not listed")
    attn = [(i, x) for i, x in enumerate(arch.layers[:arch.num_layers])
            if isinstance(x, AttnLayer)]
    windowed = any(x.kind in ("sliding", "chunked") for _, x in attn)
    cc, rope = cc_major(gpu.compute_capability), rope_dim(arch)
    if Q.is_quantized(kv) and a.engine != "vllm":  # SGLang's fp4_e2m1 (check/mapping.py)
        if arch.is_mla:
            raise BadInput(f"kvplan does not model {a.engine}'s FP4 MLA cache",
                           hint="size with --kv-cache-dtype auto or fp8_e4m3")
    elif Q.is_quantized(kv):
        Q.check_supported(
            kv, version_at_least=version.at_least, vendor=gpu.vendor,
            cc=gpu.compute_capability or "", is_mla=arch.is_mla,
            sparse_mla=arch.is_sparse_mla, sinks=arch.attention_sinks,
            has_sliding=windowed, head_sizes={(x.head_size, x.head_size_v) for _, x in attn},
            rope_dim=rope, dcp=a.decode_context_parallel_size, model_dtype=model_dtype,
            vtext=version.text)
        sac = arch.text_config.get("sparse_attention_config")
        if kv in Q.NVFP4 and isinstance(sac, dict) and sac.get("use_sparse_attention"):
            _check_msa_nvfp4(kv, sac, cc, gpu.vendor, version)
        if kv in Q.PER_TOKEN_HEAD + Q.NVFP4 and cc == 9 and not version.at_least(0, 22):
            notes.append(f"vLLM {version.text} lets FLASH_ATTN (FlashAttention 3) claim {kv} on "
                         "Hopper, whose cache view does not fit this page (read in the source, "
                         "not seen in a log): pass --attention-backend "
                         + ("TRITON_ATTN" if kv in Q.PER_TOKEN_HEAD else "FLASHINFER"))
        if kv in Q.NVFP4 and cc != 10 and not version.at_least(0, 25):
            notes.append(f"vLLM {version.text} runs NVFP4 KV through FlashInfer's trtllm-gen "
                         "kernels, built for SM100; off Blackwell data-centre GPUs expect a "
                         "failure at the first forward (read in the source)")
        if kv in Q.TURBOQUANT and windowed and not version.at_least(0, 28):
            raise BadInput(f"vLLM {version.text} sizes TurboQuant's sliding-window and chunked "
                           "layers as plain uint8 pages its backend cannot read (the "
                           "TurboQuant spec covers full attention until 0.28)",
                           hint="use vLLM 0.28 or later, or --kv-cache-dtype fp8",
                           flag="kv_cache_dtype")
    if "sliding_window" in user and kv in Q.TURBOQUANT and not version.at_least(0, 32):
        raise BadInput(f"vLLM {version.text} sorts TurboQuant's skip list as integers and "
                       "fails on 'sliding_window' (fixed in 0.32)",
                       hint="list the sliding-window layers' indices instead", flag=flag)
    skip = {int(x) for x in user if x.isdigit()}
    auto = Q.boundary_skip(kv, arch.num_layers, arch.is_hybrid_state, version.at_least)
    skip |= set(auto)
    skip_sw = "sliding_window" in user
    if arch.is_mla and not version.at_least(0, 26):
        skip, skip_sw = set(), False  # MLA layers read the index list from 0.26
    kept = sorted(i for i, x in attn if i in skip or (skip_sw and x.kind == "sliding"))
    if Q.is_quantized(kv) and a.engine == "vllm":
        _backend_refusals(kv, arch, attn, kept, gpu, version, multimodal)
    if kept and kv != model_dtype:
        if version.at_least(0, 25) and (arch.is_hybrid_state or (windowed and (
                gpu.vendor != "nvidia" or any(x.kind == "chunked" for _, x in attn)
                or (cc == 10 and arch.mm_prefix_lm)))):
            raise BadInput("kvplan does not size a skip list beside Mamba layers, chunked "
                           "layers, or sliding-window layers on ROCm or (for multimodal "
                           "prefix models, TRITON_FLASHINFER) data-centre Blackwell on vLLM "
                           f"{version.text}: they pad to a shared page "
                           "(`_align_heterogeneous_kv_block_size`)",
                           hint="size with --kv-cache-dtype auto or fp8, or a full-attention "
                                "model", flag=flag)
        fmt = "TurboQuant" if kv in Q.TURBOQUANT else "UltraQuant"
        why = (f"{fmt}'s boundary layers" if auto and not user else
               "--kv-cache-dtype-skip-layers" if not auto else
               f"{fmt}'s boundary layers and --kv-cache-dtype-skip-layers")
        shown = ", ".join(map(str, kept[:8])) + (" ..." if len(kept) > 8 else "")
        notes.append(f"{len(kept)} of {len(attn)} attention layers keep a {model_dtype} KV "
                     f"cache ({why}): {shown}")
    sliding_kv = ("int8_per_token_head" if kv == "int4_per_token_head"
                  and not version.at_least(0, 28) else "")
    if sliding_kv and windowed:
        notes.append(f"vLLM {version.text}'s SlidingWindowSpec has no int4 branch: the "
                     "sliding-window layers are budgeted at the 8-bit size, which Triton's "
                     "int4 cache view does not match (read in the source; 0.28 fixed it)")
    return replace(dts, model=model_dtype, skip=frozenset(kept),
                   rope_dim=rope if kv in Q.OCTAVE else 0, sliding_kv=sliding_kv)


def rope_dim(arch: ModelArch) -> int:
    """Rotary dims of the first attention layer (`rope_dim_from_hf_config`)."""
    t = arch.text_config
    rp = t.get("rope_parameters") if isinstance(t.get("rope_parameters"), dict) else {}
    part = float(rp.get("partial_rotary_factor") or t.get("partial_rotary_factor") or 1)
    head = next((x.head_size for x in arch.layers if isinstance(x, AttnLayer)), 0)
    return int(head * part)


def heterogeneous_block(plan: BlockPlan, arch: ModelArch, dts: KvDtypes, tp: int, cc: str,
                         version: VllmVersion) -> BlockPlan:
    """0.25+: layers kept in the model dtype share the block pool with the quantized ones,
    so `_align_heterogeneous_kv_block_size` raises the block until the quantized page covers
    a model-dtype page of one kernel block (16 tokens). The quantized page per token is the
    spec class's up to 0.27 (no TurboQuant branch: uint8 K and V) and, from 0.28, the first
    attention layer's backend's packing (a layer kept in the model dtype has a plain backend,
    which packs only NVFP4, on SM100 through FlashInfer). The page is built from the model's
    whole-model head size and KV heads (`get_head_size`, `get_num_kv_heads`), which for a
    model whose layers differ are the largest (Gemma 4: 512, `max(head_dim,
    global_head_dim)` in its 0.19-0.27 convertor, `ModelArchitectureConfig.from_layers` from
    0.28)."""
    attn = [(i, x) for i, x in enumerate(arch.layers) if isinstance(x, AttnLayer)]
    i = attn[0][0]  # the first layer's backend aligns (`backend_classes[0]`)
    heads = kv_heads_per_gpu(max(x.num_kv_heads for _, x in attn), tp)
    hs = max(arch.attn_head_sizes)
    kv, plain = dts.kv, 2 * heads * hs  # one byte per element
    if not version.at_least(0, 28):
        packs = kv in Q.PER_TOKEN_HEAD + Q.NVFP4
    elif i in dts.skip:
        packs = kv in Q.NVFP4 and cc_major(cc) == 10
    else:
        packs = Q.is_quantized(kv)
    primary = heads * Q.head_token_bytes(kv, hs, hs, dts.rope_dim) if packs else plain
    padded = 2 * heads * hs * dtype_bytes(dts.model)
    if padded <= primary:
        return plan
    bs = Q.hetero_block_size(plan.block_size, primary, padded, plan.mamba_page_padded)
    shared = bs * primary  # `skip_page_size_padded`: every sliding-window page pads to it
    sliding = tuple(_sliding_block(x, dts.for_layer(j, x), tp, shared, cc, version, dts)
                    for j, x in enumerate(arch.layers)
                    if isinstance(x, AttnLayer) and x.kind == "sliding")
    return replace(plan, block_size=bs, skip_page_padded=shared, sliding_blocks=sliding,
                   reason=plan.reason if bs == plan.block_size else
                   f"raised so the {kv} page covers a {dts.model} page of one kernel block")


def _sliding_block(x: AttnLayer, kv: str, tp: int, shared: int, cc: str,
                   version: VllmVersion, dts: KvDtypes) -> tuple[tuple, int]:
    """A sliding-window layer's block under the shared page (`_largest_kernel_block_within`):
    the largest kernel block of its backend whose page fits. Kernel blocks: TurboQuant
    16/32/64/128; FlashInfer (NVFP4, compute capability below 8.0, and every non-Triton layer
    on data-centre Blackwell, its first backend) 16/32/64 (its trtllm-gen pages of 128-1024
    are offered only under a current vLLM config, which `get_kv_cache_spec` runs without,
    0.25-0.33); FlashAttention and Triton any multiple of 16,
    expanded to the largest that fits from 0.30 (0.25-0.29 take the base, 16). The page per
    token is the unpadded spec's, without the per-token-head scales up to 0.27
    (`real_page_size_bytes`); the full page must still fit (vLLM asserts)."""
    from kvplan.core.kvspec import attn_bytes_per_token

    heads = kv_heads_per_gpu(x.num_kv_heads, tp)
    full = attn_bytes_per_token(x, tp, kv, dts.rope_dim)
    tok = 2 * heads * x.head_size if (kv in Q.PER_TOKEN_HEAD and not version.at_least(0, 28)
                                      ) else full
    major = cc_major(cc)
    if kv in Q.TURBOQUANT:
        cands = [16, 32, 64, 128]
    elif kv in Q.NVFP4 or major < 8 or (major == 10 and kv not in Q.PER_TOKEN_HEAD):
        cands = [16, 32, 64]
    else:
        cands = [max(16, shared // tok // 16 * 16) if version.at_least(0, 30) else 16]
    fitting = [b for b in cands if b * tok <= shared]
    block = max(fitting) if fitting else min(cands)
    if block * full > shared:
        raise BadInput(f"vLLM cannot pad a {kv} sliding-window page of {block} tokens to the "
                       f"{shared:,}-byte shared page (`page_size_padded` asserts); it fails to "
                       "start", hint="drop --kv-cache-dtype-skip-layers or use vLLM 0.28+",
                       flag="kv_cache_dtype_skip_layers")
    return (kv, heads, x.head_size, x.head_size_v), block


def load_buffers(arch: ModelArch, dts: KvDtypes, a: Any, stages: list[range], seqs: int,
                 mnbt: int, cc: str, version: VllmVersion, notes: list[str]) -> list[int]:
    """Buffers a quantized KV format's layers allocate while the model is built, so inside
    "Model loading took" (per stage): TurboQuant's decode buffers in 0.20 (fp32
    [max_num_seqs, heads, 32, D + 1] + [.., D] + [..]: `Attention._init_turboquant_buffers`;
    0.21+ share a lazily grown workspace) and FlashInfer's FP8 output buffer for NVFP4
    ([max_num_batched_tokens, heads, D]: `FlashInferImpl._nvfp4_fp8_out`, every NVFP4 layer
    in 0.21-0.31, SM100 only from 0.32)."""
    kv, tp = dts.kv, a.tensor_parallel_size
    q_heads = max(1, arch.num_attention_heads // tp)
    if kv in Q.TURBOQUANT and not version.at_least(0, 21):
        def per_layer(d: int) -> int:
            return 4 * seqs * q_heads * (Q.TQ_DECODE_SPLITS * (d + 1) + d + 1)
        what = f"TurboQuant's decode buffers (max_num_seqs {seqs})"
    elif kv in Q.NVFP4 and (cc_major(cc) == 10 or not version.at_least(0, 32)):
        def per_layer(d: int) -> int:
            return mnbt * q_heads * d
        what = f"FlashInfer's FP8 output buffers (max_num_batched_tokens {mnbt:,})"
    else:
        return [0] * len(stages)
    out = [sum(per_layer(x.head_size) for i, x in enumerate(arch.layers)
               if i in st and isinstance(x, AttnLayer) and i not in dts.skip)
           for st in stages]
    if max(out) >= 64 * MiB:
        notes.append(f"{what}: {max(out) / GiB:.2f} GiB per GPU, allocated with the model "
                     "(in vLLM's 'Model loading took')")
    return out


def turboquant_workspace(arch: ModelArch, dts: KvDtypes, tp: int, seqs: int, mml: int,
                         block_size: int, model_dtype: str, version: VllmVersion) -> int:
    """`TurboQuantMetadataBuilder._reserve_workspace` (0.24+; 0.21-0.23 grow the shared
    workspace to the same buffers lazily, in capture and on requests): the larger of the
    split-KV decode buffers (fp32 [max_num_seqs, heads, 32, D + 1], [.., D] in the model dtype,
    fp32 [..]) and the continuation-prefill copy (2 x fp16 [1, KV heads, max_model_len - 1
    rounded up to the block, D]), each piece rounded to 256 bytes; built once the backends
    are initialised, after the profile's peak is read."""
    if dts.kv not in Q.TURBOQUANT or not version.at_least(0, 21):
        return 0  # 0.20's buffers are per layer, in the load (`load_buffers`)
    x = next((x for i, x in enumerate(arch.layers) if isinstance(x, AttnLayer)
              and i not in dts.skip), None)
    if x is None:  # every layer kept in the model dtype: no TurboQuant backend is built
        return 0
    q, d = max(1, arch.num_attention_heads // tp), x.head_size

    def r256(n: int) -> int:
        return -(-n // 256) * 256
    decode = (r256(seqs * q * Q.TQ_DECODE_SPLITS * (d + 1) * 4)
              + r256(seqs * q * d * dtype_bytes(model_dtype)) + r256(seqs * q * 4))
    rows = cdiv(max(mml - 1, 0), block_size) * block_size
    cont = 2 * r256(kv_heads_per_gpu(x.num_kv_heads, tp) * rows * d * 2)
    return max(decode, cont)


def draft_kv(dts: KvDtypes, asked: str, arch: ModelArch, v2: bool, version: VllmVersion,
             model_dtype: str, notes: list[str]) -> KvDtypes:
    """`speculative_config.kv_cache_dtype` (0.26+): the drafter's layers store this dtype;
    model runner V2 applies it (`spec_decode/{eagle,dflash,dspark}/utils.py`), V1 ignores
    it."""
    from kvplan.core.dtypes import resolve_kv_dtype

    if not version.at_least(0, 26):
        raise BadInput(f"vLLM {version.text}'s --speculative-config has no kv_cache_dtype "
                       "(0.26+)", flag="speculative_config")
    kv = resolve_kv_dtype(asked, model_dtype, allowed=version.kv_cache_dtypes, modelopt_kv=None)
    if not v2:
        notes.append("the speculative kv_cache_dtype is read by model runner V2 only; this "
                     "model runs V1, so the drafter keeps the target's KV dtype")
        return dts
    return replace(dts, draft_kv=kv, draft_from=len(arch.layers))


def _check_msa_nvfp4(kv: str, sac: dict[str, Any], cc: int, vendor: str,
                     version: VllmVersion) -> None:
    """MiniMax-M3's sparse layers store NVFP4 only through the SM100 MSA backend
    (`MiniMaxM3SparseMSANvfp4Backend`, 0.32+): `select_main_backend_and_impl_cls` raises
    "supports an NVFP4 KV cache only with the SM100 MSA backend" elsewhere, and for a top-k
    block count other than 4, 8, 16 or 32; before 0.32 the sparse backend stores bfloat16
    and fp8 only (the 0.24-0.33 wheels)."""
    topk = sac.get("sparse_topk_blocks")
    if not version.at_least(0, 32):
        why = f"vLLM {version.text} has no NVFP4 page for MiniMax-M3's sparse layers (0.32+)"
    elif kv != "nvfp4":
        why = f"MiniMax-M3's sparse attention takes only the 'nvfp4' format, not {kv}"
    elif vendor != "nvidia" or cc != 10:
        why = "MiniMax-M3's sparse attention stores NVFP4 only with the SM100 MSA backend"
    elif topk not in (4, 8, 16, 32):
        why = (f"MiniMax-M3's MSA backend runs top-k block counts 4, 8, 16 and 32, not "
               f"{topk}, so its NVFP4 cache is refused")
    else:
        return
    raise BadInput(why, hint="use --kv-cache-dtype fp8 or auto", flag="kv_cache_dtype")
