"""Which fused-MoE kernel a vLLM release runs for a model's experts, and what that kernel
adds: FlashInfer's padded expert rows (`fi_expert_pad`), the activation shape of the chosen
kernel (`with_moe_kernel`), the FlashInfer TRT-LLM class on the SM100 family
(`trtllm_experts`, by the router `get_routing_method_type` names: `moe_routing`,
`trtllm_routers`), and the --moe-backend values a release and device refuse
(`check_moe_backend`). Pure computation (no I/O); vLLM `model_executor/layers/fused_moe/`.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

from kvplan.core import all2all as A2A
from kvplan.core import memory as M
from kvplan.core.arch import DSV4, ModelArch
from kvplan.core.params import (
    fp8_tensor_experts,
    is_nvfp4,
    moe_gated,
    moe_hidden,
    mxfp4_padded_dims,
    trtllm_bf16_experts,
    weight_bytes,
)
from kvplan.core.versions import VllmVersion, cc_major
from kvplan.errors import BadInput
from kvplan.units import cdiv

if TYPE_CHECKING:
    from kvplan.core.sizing import EngineArgs, Gpu, Model


def fp8_moe_refined_block(arch: ModelArch, a: EngineArgs, version: VllmVersion) -> int:
    """The finer block vLLM 0.29+ re-scales block-FP8 experts to when TP splits their
    intermediate into partial blocks (`refine_fp8_moe_block_shape`: gcd(block_n, block_k,
    intermediate per rank, hidden) when at least 32; only Triton takes it), or 0."""
    q = arch.quantization or {}
    block = q.get("weight_block_size")
    if (not version.at_least(0, 29) or str(q.get("quant_method", "")).lower() != "fp8"
            or not isinstance(block, list) or len(block) != 2 or not arch.num_experts):
        return 0
    bn, bk = int(block[0]), int(block[1])
    local = arch.expert_intermediate_size // a.expert_tp
    if not local or (local % bn == 0 and (a.expert_tp == 1 or local % bk == 0)):
        return 0
    refine = math.gcd(bn, bk, local, moe_hidden(arch))
    return refine if refine >= 32 else 0


def check_moe_backend(backend: str, version: VllmVersion, cc: str, vendor: str, *,
                      unquantized: bool, mxfp4: bool, rocm_aiter: bool,
                      block_fp8: bool = False) -> None:
    """Refuse a --moe-backend the experts' oracle or the device rejects (0.18-0.33; the
    kernels' `_supports_current_device`):
    * 16-bit experts take triton, flashinfer_trtllm, flashinfer_cutlass, aiter (and
      batched_triton from 0.30) (`map_unquantized_backend`; humming falls through to auto
      from 0.25, marlin from 0.33); the TRT-LLM bf16 kernel runs on the SM100 family only;
    * MXFP4 experts have no cutlass (`map_mxfp4_backend`);
    * AITER runs only on ROCm CDNA3+ with VLLM_ROCM_USE_AITER=1 (`@if_aiter_supported`);
    * on ROCm FlashInfer, DeepGEMM, CUTLASS and Marlin kernels do not run."""
    b = (backend or "auto").lower().replace("-", "_")
    if b == "auto":
        return
    fall_through = {"humming"} if version.at_least(0, 25) else set()
    fall_through |= {"marlin"} if version.at_least(0, 33) else set()
    if unquantized:
        ok = {"triton", "flashinfer_trtllm", "flashinfer_cutlass", "aiter"} | fall_through
        ok |= {"batched_triton"} if version.at_least(0, 30) else set()
        if b not in ok:
            raise BadInput(f"vLLM {version.text} refuses --moe-backend {backend} for 16-bit "
                           "experts ('not supported for unquantized MoE')",
                           hint="use one of " + ", ".join(sorted(ok)), flag="moe_backend")
        if b == "flashinfer_trtllm" and not (vendor == "nvidia" and cc in ("10.0", "10.3")):
            raise BadInput(f"vLLM {version.text}'s FlashInfer TRT-LLM kernel for 16-bit "
                           f"experts runs on the B200/B300 family only, not {cc}",
                           hint="use --moe-backend triton", flag="moe_backend")
    if vendor == "nvidia" and b == "flashinfer_trtllm" and cc_major(cc) != 10:
        # `TrtLlm*ExpertsBase._supports_current_device`: the SM100 family only
        raise BadInput(f"vLLM {version.text}'s FlashInfer TRT-LLM MoE kernels run on the "
                       f"B200/B300 family only, not compute capability {cc}",
                       hint="use --moe-backend auto", flag="moe_backend")
    if vendor == "nvidia" and b == "flashinfer_cutlass" and block_fp8 and cc != "9.0":
        # `FlashInferExperts._supports_quant_scheme`: block FP8 on `is_device_capability(90)`
        raise BadInput(f"vLLM {version.text}'s FlashInfer CUTLASS MoE kernel takes block-FP8 "
                       f"experts on Hopper only, not compute capability {cc}",
                       hint="use --moe-backend auto", flag="moe_backend")
    if mxfp4 and b == "cutlass":
        raise BadInput(f"vLLM {version.text} has no cutlass kernel for MXFP4 experts",
                       hint="use --moe-backend triton", flag="moe_backend")
    cdna3 = vendor == "amd" and cc.startswith("gfx9") and cc not in ("gfx90a", "gfx908")
    if b.startswith("aiter") and not (cdna3 and rocm_aiter):
        raise BadInput(f"--moe-backend {backend} runs only on ROCm MI300-class GPUs with "
                       "VLLM_ROCM_USE_AITER=1 (vLLM: 'kernel does not support current device')",
                       hint="use --moe-backend triton, or add --env VLLM_ROCM_USE_AITER=1 "
                       "on an MI300X/MI325X/MI355X", flag="moe_backend")
    ok_rocm = {"triton"} | ({"batched_triton"} | fall_through if unquantized else set())
    if vendor == "amd" and not b.startswith("aiter") and b not in ok_rocm:
        raise BadInput(f"vLLM {version.text} on ROCm has no {backend} MoE kernel ('kernel does "
                       "not support current device rocm')", hint="use --moe-backend triton "
                       "or aiter (with VLLM_ROCM_USE_AITER=1)", flag="moe_backend")


def fi_moe_fp8(a: EngineArgs, version: VllmVersion) -> bool:
    """VLLM_USE_FLASHINFER_MOE_FP8 (0 takes static FP8 experts off FlashInfer), which vLLM
    reads up to 0.23 only (envs.py; gone in the 0.24.0 wheel)."""
    return a.flashinfer_moe_fp8 or version.at_least(0, 24)


def fi_expert_pad(arch: ModelArch, model: Model, a: EngineArgs, gpu: Gpu,
                  version: VllmVersion) -> tuple[float, str]:
    """What FlashInfer's MoE kernels' weight re-layout multiplies the routed experts by, and
    a note: the padded copies replace the weights (`prepare_fp8_moe_layer_for_fi`,
    `prepare_nvfp4_moe_layer_for_fi_or_cutlass`).
    * Static per-tensor FP8 experts (0.16+, SM90 / SM100 family): each rank's intermediate to
      `fi_fp8_moe_alignment` rows.
    * NVFP4 experts on FlashInfer TRT-LLM (first on the SM100 family): the intermediate to
      `fi_fp4_moe_alignment` rows and, from 0.20, the hidden side to 256.
    * 16-bit SiLU / ReLU² experts on TRT-LLM (SM100 family): the intermediate to 128
      (non-gated from 0.24, gated from 0.29; not with EPLB).
    * ROCm, 16-bit gated experts on AITER's CK MoE (VLLM_ROCM_USE_AITER=1, 0.32+): the
      intermediate to 64 up to 192 rows, else to 128 (`aiter_moe_intermediate_alignment`)."""
    if arch.num_experts and gpu.vendor == "amd":
        return _aiter_expert_pad(arch, model, a, version)
    if not arch.num_experts or gpu.vendor != "nvidia" or \
            version.moe_backend_kind(a.moe_backend) not in (None, "flashinfer"):
        return 1.0, ""
    cc, gated = gpu.compute_capability, moe_gated(arch)
    inter = arch.expert_intermediate_size // a.expert_tp
    hidden, rows, cols = moe_hidden(arch), 0, 0
    expert_bytes = weight_bytes(arch, 2, a.quantization, model.quant_file).expert
    if fi_moe_fp8(a, version) and version.fi_fp8_moe(cc) and fp8_tensor_experts(
            arch, model.quant_file):
        rows = version.fi_fp8_moe_alignment(gated)
        what = (f"FlashInfer's FP8 MoE kernels pad each GPU's expert rows to {rows}; "
                + ("--moe-backend triton" if version.at_least(0, 24)
                   else "VLLM_USE_FLASHINFER_MOE_FP8=0 (--env)")
                + " runs Triton's instead, without it")
    elif cc_major(cc) == 10 and is_nvfp4(expert_bytes):
        rows, cols = version.fi_fp4_moe_alignment(gated), version.fi_fp4_moe_hidden_alignment
        what = (f"FlashInfer's TRT-LLM NVFP4 MoE kernels pad each GPU's expert rows to {rows}"
                + (f" and the hidden side to {cols}" if cols else ""))
    elif (cc_major(cc) == 10 and expert_bytes == 2
          and version.fi_bf16_moe(cc, a.data_parallel_size) and not a.enable_eplb
          and a.moe_backend in ("auto", "flashinfer_trtllm") and trtllm_bf16_experts(arch)
          and version.at_least(0, 29 if gated else 24)):
        # 16-bit experts on TRT-LLM: the intermediate to 128 (`align_moe_weights_for_fi`,
        # non-gated from 0.24, gated from 0.29; 0.33 `maybe_roundup_sizes`)
        rows = 128
        what = "FlashInfer's TRT-LLM bf16 MoE kernel pads each GPU's expert rows to 128"
    if not rows or not inter:
        return 1.0, ""
    pad = cdiv(inter, rows) * rows / inter
    if cols:
        pad *= cdiv(hidden, cols) * cols / hidden
    return pad, what


def _aiter_expert_pad(arch: ModelArch, model: Model, a: EngineArgs,
                      version: VllmVersion) -> tuple[float, str]:
    """AITER's CK 2-stage MoE takes each GPU's intermediate in 64-wide tiles up to 192 rows
    and 128-wide above: from 0.32 vLLM allocates 16-bit experts already rounded up
    (`unquantized_round_up_hidden_size_and_intermediate_size`), where AITER is the unquantized
    MoE backend (ROCm's first, run when VLLM_ROCM_USE_AITER and _MOE are on; gated
    activations only, `AiterExperts`; not with LoRA's Triton experts)."""
    inter = arch.expert_intermediate_size // a.expert_tp
    aiter = a.moe_backend == "aiter" or (a.moe_backend == "auto" and a.rocm_aiter
                                         and a.rocm_aiter_moe)
    if not (version.at_least(0, 32) and aiter and inter and moe_gated(arch)
            and not a.enable_lora
            and weight_bytes(arch, 2, a.quantization, model.quant_file).expert == 2):
        return 1.0, ""
    rows = 64 if inter <= 192 else 128
    return cdiv(inter, rows) * rows / inter, (
        f"AITER's MoE kernel pads each GPU's expert rows to {rows}")


def with_moe_kernel(shape: M.ActivationShape, arch: ModelArch, model: Model, a: EngineArgs,
                    gpu: Gpu, version: VllmVersion, a2a: str | None = None,
                    ll_tokens: int = 0) -> M.ActivationShape:
    """The activation shape with the fused-MoE kernel this release picks for these experts
    (`VllmVersion.moe_kernel`) and the experts on one GPU; `a2a`: the all-to-all backend
    the MoE layers exchange tokens through (DeepEP low latency's batched experts,
    `ll_tokens` per DP rank)."""
    if a2a == "deepep_low_latency":
        return _batched_experts(shape, arch, model, a, gpu, ll_tokens)
    if mega_moe(arch, a):  # `DeepseekV4MegaMoEExperts`: no FusedMoE, no gather
        return replace(shape, moe_kernel="deepgemm_mega", moe_dp=1, moe_kept=False,
                       local_experts=arch.num_experts // a.moe_ranks)
    q = arch.quantization or {}
    qm = str(q.get("quant_method", "")).lower()
    expert_bytes = weight_bytes(arch, 2, a.quantization, model.quant_file).expert
    wna16 = qm in ("awq", "gptq", "awq_marlin", "gptq_marlin", "moe_wna16") or (
        qm == "compressed-tensors" and any(  # weight-only int groups (W4A16)
            (g or {}).get("weights", {}).get("type") == "int"
            and int((g or {}).get("weights", {}).get("num_bits") or 8) < 8
            and not (g or {}).get("input_activations")
            for g in (q.get("config_groups") or {}).values()))
    refined = fp8_moe_refined_block(arch, a, version)  # Triton only
    kernel = version.moe_kernel(
        gpu.compute_capability, moe_tp=a.expert_tp,
        fp8_block=qm == "fp8" and bool(q.get("weight_block_size")) and not refined,
        expert_parallel=a.enable_expert_parallel, vendor=gpu.vendor, backend=a.moe_backend,
        nvfp4=is_nvfp4(expert_bytes), mxfp4=qm == "mxfp4", wna16=wna16,
        fp8_tensor=fi_moe_fp8(a, version) and fp8_tensor_experts(arch, model.quant_file),
        unquantized=expert_bytes == 2, dp=a.data_parallel_size, eplb=a.enable_eplb,
        lora_triton=a.enable_lora and version.at_least(0, 24) and not (
            cc_major(gpu.compute_capability) == 10 and version.at_least(0, 27)
            and (arch.moe_intermediate_size or arch.intermediate_size) // a.expert_tp % 128
            == 0))
    physical = arch.num_experts + (a.eplb_num_redundant_experts if a.enable_eplb else 0)
    experts = physical // a.moe_ranks if a.enable_expert_parallel else arch.num_experts
    # with DP > 1 every MoE layer sees every DP rank's tokens, gathered unchunked
    # (`MoEPrepareAndFinalizeNaiveDPEPModular.prepare`, `DPMetadata.sp_local_sizes`), with
    # or without expert parallelism, and its kept workspace is sized for them
    # OpenAI's Triton MXFP4 kernel runs monolithic without all-to-all, DP or EPLB
    # (`OAITritonMxfp4ExpertsMonolithic._supports_parallel_config`, 0.20-0.33; a direct
    # `triton_kernel_moe_forward` call before): no shared workspace, scratch per call
    mono = kernel == "oai_triton" and not (a.enable_expert_parallel or a.enable_eplb
                                           or a.data_parallel_size > 1)
    # MXFP4 on Marlin (Ampere, Ada, SM12x): `MarlinExperts.workspace_shapes` takes the padded
    # intermediate (`marlin_moe_intermediate_size`) and the padded hidden the runner feeds it
    dims = mxfp4_padded_dims(arch, a.expert_tp, a.quantization, gpu.compute_capability,
                             vendor=gpu.vendor, release=version.v[:2]) if (
        gpu.vendor == "nvidia" and cc_major(gpu.compute_capability) in (8, 12)) else None
    if dims is not None:
        shape = replace(shape, moe_hidden=dims[0], moe_intermediate_local=dims[1])
    # block-FP8 experts that reach "flashinfer" on Hopper run FlashInfer's CUTLASS kernel
    # (FP8 experts: DeepSeek-V4's FP4 experts under a block-FP8 config take the MXFP4 path)
    block_fp8 = qm == "fp8" and bool(q.get("weight_block_size")) and expert_bytes >= 1
    major = cc_major(gpu.compute_capability)
    fi = kernel == "flashinfer" and gpu.vendor == "nvidia"
    fp8_tensor = fi and not block_fp8 and fp8_tensor_experts(arch, model.quant_file)
    trtllm, kept, copy_out = trtllm_experts(
        arch, a, version, fi and major == 10 and a.moe_backend in ("auto", "flashinfer_trtllm"),
        block_fp8, is_nvfp4(expert_bytes), fp8_tensor, qm == "mxfp4", expert_bytes == 2)
    if trtllm:
        mono = not kept
    local = arch.expert_intermediate_size // a.expert_tp
    fp8_rows = version.fi_fp8_moe_alignment(moe_gated(arch))  # as `fi_expert_pad`
    cut, tma, inter, fi_hidden = "", False, 0, 0
    if trtllm == "bf16":  # the intermediate padded to 128 (`fi_expert_pad`, 0.24/0.29+)
        pad_rows = 128 if version.at_least(0, 29 if moe_gated(arch) else 24) else 1
        inter = cdiv(local, pad_rows) * pad_rows
    elif trtllm == "mxfp4":  # the kernel's padded widths (`mxfp4_padded_dims`)
        fi_hidden, inter = mxfp4_padded_dims(arch, a.expert_tp, a.quantization,
                                             gpu.compute_capability, release=version.v[:2])
    elif trtllm == "fp8_tensor":  # its rows padded as on CUTLASS
        inter = cdiv(local, fp8_rows) * fp8_rows
    elif fi and block_fp8 and major == 9:
        cut = "fp8_block"
    elif fi and qm != "mxfp4" and (
            major in (9, 12) or (major == 10 and fp8_tensor and version.at_least(0, 20))):
        # FlashInfer CUTLASS (`FlashInferExperts`): per-tensor FP8 (padded rows), NVFP4 on
        # SM120, 16-bit experts where vLLM takes it
        if is_nvfp4(expert_bytes) and major == 12:
            cut = "nvfp4"
        elif expert_bytes == 2:
            cut = "bf16"
        elif fp8_tensor_experts(arch, model.quant_file):
            cut, inter = "fp8", cdiv(local, fp8_rows) * fp8_rows
        tma = cut == "nvfp4" or (cut != "" and gpu.compute_capability == "9.0")
    return replace(shape, local_experts=experts, moe_kernel=kernel,
                   moe_dp=a.data_parallel_size, moe_kept=not mono,
                   deepgemm_fp8_ws=version.at_least(0, 31),
                   trtllm=trtllm, global_experts=arch.num_experts,
                   trtllm_tile_192=version.at_least(0, 27), trtllm_copy_out=copy_out,
                   fi_cutlass=cut, fi_tma=tma, fi_inter=inter, fi_hidden=fi_hidden)


def mega_moe(arch: ModelArch, a: EngineArgs) -> bool:
    """DeepSeek-V4 with `--moe-backend deep_gemm_mega_moe` (0.20.2+): its MoE layers run
    `DeepseekV4MegaMoEExperts`, DeepGEMM's fused dispatch / GEMM / combine over a symmetric
    buffer (`all2all.mega_moe_buffer_bytes`), instead of a FusedMoE layer."""
    return DSV4 in arch.kinds and a.moe_backend == "deep_gemm_mega_moe"


def _batched_experts(shape: M.ActivationShape, arch: ModelArch, model: Model, a: EngineArgs,
                     gpu: Gpu, tokens: int) -> M.ActivationShape:
    """DeepEP low latency hands the experts a batched layout (`use_batched_activation_
    format`), which only the batched classes take (the oracles' `activation_format` check,
    0.33 `oracle/*.py`): block-FP8 experts run `BatchedDeepGemmExperts` (DeepGEMM, vendored
    from 0.27), dispatched in FP8 with fp32 scales per 128 columns (UE8M0 per 512 packed in
    int32 on Blackwell); NVFP4 experts on Blackwell `FlashInferCuteDSLBatchedExperts`, and
    the others `BatchedTritonExperts`, dispatched in bf16. The workspace stays in the shared
    buffer (kept); nothing is gathered. The hidden size is padded to the next one DeepEP
    takes (`maybe_roundup_layer_hidden_size`)."""
    q = arch.quantization or {}
    expert_bytes = weight_bytes(arch, 2, a.quantization, model.quant_file).expert
    block_fp8 = str(q.get("quant_method", "")).lower() == "fp8" and bool(
        q.get("weight_block_size")) and expert_bytes >= 1
    major = cc_major(gpu.compute_capability)
    kernel, dispatch, cols = "batched_triton", 2, 0
    hidden = A2A.ll_hidden(moe_hidden(arch))
    if block_fp8 and major in (9, 10):
        kernel, dispatch = "batched_deepgemm", 1
        cols = hidden // 512 if major == 10 else hidden // 128
    elif is_nvfp4(expert_bytes) and major == 10:
        kernel = "cutedsl_batched"
    physical = arch.num_experts + (a.eplb_num_redundant_experts if a.enable_eplb else 0)
    return replace(shape, local_experts=physical // a.moe_ranks, moe_kernel=kernel,
                   moe_dp=a.data_parallel_size, moe_kept=True, moe_hidden=hidden,
                   trtllm="", fi_cutlass="", ll_ranks=a.moe_ranks, ll_tokens=tokens,
                   ll_dispatch_bytes=dispatch, ll_scale_cols=cols)


def trtllm_experts(arch: ModelArch, a: EngineArgs, version: VllmVersion, sm100_fi: bool,
                   block_fp8: bool, nvfp4: bool, fp8_tensor: bool = False,
                   mxfp4: bool = False, bf16: bool = False) -> tuple[str, bool, bool]:
    """Which FlashInfer TRT-LLM experts class an SM100 profile runs (the vllm/vllm-openai
    image, read in the 0.16-0.33 wheels): (kind: "fp8_block" | "fp8_tensor" | "nvfp4" |
    "mxfp4" | "bf16" | "", whether its M x K workspace stays allocated (the modular class),
    whether FlashInfer's output is copied into it). A monolithic class keeps nothing; it
    runs for the routers its `_supports_routing_method` lists (`trtllm_routers`):
    * block FP8 (0.16+): else the modular class, which copies FlashInfer's output into its
      kept one in 0.18-0.20;
    * NVFP4 (0.16's function path, then): the modular class also when DP + EP gather
      through all-to-all or with EPLB (from 0.20 by router);
    * per-tensor FP8 (0.20+, a helper's reading of 0.33), without EPLB (else CUTLASS);
    * MXFP4 (gpt-oss, 0.20+): the modular class with DP or EPLB;
    * 16-bit SiLU / ReLU^2 experts (0.20+),
      without EPLB, also with DP over the default all-gather (else CUTLASS)."""
    def listed(kind: str) -> bool:
        return moe_routing(arch, version) in trtllm_routers(kind, version)

    if not sm100_fi:
        return "", True, False
    if block_fp8 and version.at_least(0, 16):
        modular = version.at_least(0, 18) and not listed("fp8")
        return "fp8_block", modular, modular and not version.at_least(0, 21)
    if nvfp4 and version.at_least(0, 16):
        return "nvfp4", (a.data_parallel_size > 1 and a.enable_expert_parallel) or \
            a.enable_eplb or (version.at_least(0, 20) and not listed("nvfp4")), False
    if mxfp4 and version.at_least(0, 20):  # `oracle/mxfp4.py`: FLASHINFER_TRTLLM_MXFP4_BF16
        return "mxfp4", a.data_parallel_size > 1 or a.enable_eplb, False
    if bf16 and version.at_least(0, 20) and not a.enable_eplb and trtllm_bf16_experts(
            arch) and listed("bf16"):
        return "bf16", False, False
    if fp8_tensor and version.at_least(0, 20) and not a.enable_eplb and listed("fp8_tensor"):
        return "fp8_tensor", False, False
    return "", True, False


def trtllm_routers(kind: str, version: VllmVersion) -> set[str]:
    """The routers a TRT-LLM monolithic class lists (`_supports_routing_method`, read in the
    0.18-0.33 wheels; Renormalize and RenormalizeNaive are always listed together): FP8
    (block and per-tensor) and NVFP4 DeepSeek-V3's grouped one, renormalised softmax from
    0.20, sigmoid-renorm and MiniMax-M2's from 0.21, plain sigmoid from 0.23 (per-tensor FP8
    and NVFP4 also Llama 4); 16-bit (0.20+) DeepSeek-V3's, Llama 4 and renormalised softmax,
    both sigmoids from 0.23, MiniMax-M2's from 0.32. An unlisted router takes the modular
    class (NVFP4's from any parallel layout), which keeps M x K."""
    if kind == "bf16":
        out = {"deepseek", "llama4", "renormalize"}
        if version.at_least(0, 32):
            out.add("minimax2")
    else:
        out = {"deepseek"} | ({"llama4"} if kind in ("fp8_tensor", "nvfp4") else set())
        if version.at_least(0, 20):
            out.add("renormalize")
        if version.at_least(0, 21):
            out |= {"minimax2", "sigmoid_renorm"}
    if version.at_least(0, 23):
        out |= {"sigmoid", "sigmoid_renorm"}
    return out


def moe_routing(arch: ModelArch, version: VllmVersion) -> str:
    """The router as vLLM's `get_routing_method_type` names it (`fused_moe/config.py`, read
    in the 0.18-0.33 wheels), from the config and the model family. A routing bias with
    sigmoid scores and expert groups is DeepSeek-V3's ("deepseek": DeepSeek-V3, GLM, Kimi,
    Nemotron-H); a bias without groups MiniMax-M2's from 0.21 (0.23-0.30 only at a routed
    scaling factor of 1, "unspecified" otherwise: Sarvam's 2.5); from 0.23 a biased router
    without renormalisation is "unspecified". Sigmoid without a bias: top-1 is Llama 4's
    before 0.23, renormalised "sigmoid_renorm" from 0.21, else "sigmoid" from 0.23 and
    "unspecified" before. Softmax with renormalised top-k "renormalize" (Qwen3, Mixtral),
    without it "default" (Qwen1.5-MoE, DeepSeek-V2-Lite, Jamba); Llama 4 and Gemma 4 route
    their own way; anything else "other" (DeepSeek-V4's sqrtsoftplus)."""
    t, archs = arch.text_config, " ".join(arch.architectures)
    if "Llama4" in archs:
        return "llama4"
    if "Gemma4" in archs:
        return "custom"
    if "Jamba" in archs:
        return "default"  # `jamba.py`: renormalize=False
    bias = bool(t.get("topk_method") == "noaux_tc" or t.get("use_routing_bias")
                or t.get("moe_router_enable_expert_bias") or t.get("use_moe_router_bias")
                or arch.model_type in ("nemotron_h", "glm4_moe_lite"))
    scoring = str(t.get("scoring_func") or ("sigmoid" if bias else "softmax")).lower()
    renorm = bool(t.get("norm_topk_prob", True))  # the models' default when absent
    top_k = t.get("num_experts_per_tok") or t.get("moe_topk") or t.get("top_k")
    if scoring == "sigmoid" and bias:
        if version.at_least(0, 23) and not renorm:
            return "unspecified"
        if t.get("n_group") or t.get("topk_group") or arch.model_type == "glm4_moe_lite":
            return "deepseek"
        scale = t.get("routed_scaling_factor") or t.get("moe_router_scaling_factor")
        if not version.at_least(0, 21) or (
                version.at_least(0, 23) and not version.at_least(0, 31)
                and scale not in (None, 1, 1.0)):
            return "unspecified"
        return "minimax2"
    if scoring == "sigmoid":
        if top_k == 1 and not version.at_least(0, 23):
            return "llama4"
        if renorm and version.at_least(0, 21):
            return "sigmoid_renorm"
        return "sigmoid" if version.at_least(0, 23) else "unspecified"
    if scoring == "softmax":
        return "renormalize" if renorm else "default"
    return "other"
