"""vLLM's memory budget: what is left for the KV cache after weights, activations and graphs.

`available_kv = requested - weights - activation_peak - non_torch - cudagraph_estimate`
with `requested = total_memory * gpu_memory_utilization` (vLLM 0.33 `v1/worker/gpu_worker.py`
`determine_available_memory`; `utils/mem_utils.py` memory profiler). Weights come from the
checkpoint; the other three terms depend on kernels, torch.compile, NCCL and the driver and
cannot be read from a config, so they are empirical models fitted to real vLLM startup logs
(benchmarks/cases.yaml). Every constant below is named, with its source and the range it was
fitted on, in `EMPIRICAL`; docs/methodology.md explains the fit.
"""

from __future__ import annotations

import math
from typing import Any

from kvplan.core.record import record
from kvplan.units import GiB, MiB, cdiv

# name -> (value, unit, source / fitted range). One place for every empirical constant.
EMPIRICAL: dict[str, tuple[float, str, str]] = {
    "act_hidden_copies": (
        4.0, "x hidden per token",
        "residual, normed input, attention output and all-reduce buffer live at the MLP peak"),
    "act_mlp_copies": (
        3.0, "x local intermediate per token",
        "gate_up output (2 I/TP) + activation output (I/TP) at the MLP peak"),
    "sampler_fp32_copies": (
        9.6, "x num_reqs x vocab x 4 B (vLLM 0.8-0.16)",
        "the dummy sampler run (gpu_model_runner `_dummy_sampler_run`) dominates the V1 peak: "
        "fitted on 9 real V1 logs (torch peak 1.40-7.38 GiB, vocab 128k-201k, 256-1024 "
        "requests, H100/H200/L40S, vLLM 0.10-0.11): 9.5-9.9 fp32 logits-sized buffers"),
    "sampler_fp32_copies_flashinfer": (
        3.5, "x num_reqs x vocab x 4 B (vLLM 0.10-0.11.0 with the FlashInfer sampler)",
        "0.10-0.11.0 profile the sampler once, through FlashInfer's top-k/top-p kernel when "
        "flashinfer is installed (TopKTopPSampler; log 'Using FlashInfer for top-p & top-k "
        "sampling'): bf16 logits (0.5) + fp32 copy + top-k-masked logits + probs = 3.5 by the "
        "code. Real logs: 3.1-4.0 buffers on three upstream 0.11.0 H200 starts (Llama-3.3-70B "
        "FP8 TP4, DeepSeek-R1 TP8, Qwen3-235B FP8 TP4+EP; 1,024 requests); five 0.10.1 A100 "
        "logs with 256 requests bound it only loosely (1.7-2.5). 0.11.1 made the sampler "
        "opt-in; 0.33's V2 warm-up sampler takes the same FlashInfer path by default on "
        "compute capability 8.0-12.1"),
    "sampler_fp32_copies_v017": (
        3.9, "x num_reqs x vocab x 4 B (vLLM 0.17+)",
        "0.17 samples top-k/top-p with a Triton kernel for batches >= 8 "
        "(`apply_top_k_top_p_triton`: absent in the 0.16.0 wheel, present in 0.17.1 through "
        "0.26; 0.24+ samples through FlashInfer first and warms this path second, same peak) "
        "instead of a full sort: bf16 logits + fp32 copy + probs + exponential noise = 3.5 "
        "buffers by the code; fitted on five 0.19.0 logs of one project (Llama-3.1-8B fp16 and "
        "W8A8 on A100-40GB, RTX A6000, H100 NVL; 256-1024 requests): 3.3-4.4 buffers; eager "
        "0.20.0 and 0.28.0 logs: 3.2-4.2"),
    "act_v024_mib": (
        450.0, "MiB from vLLM 0.24",
        "what the 0.24+ language-model profile keeps allocated beyond the forward, MoE-workspace "
        "and sampler terms, not found in the code (0.27+ prints it inside 'consumed memory "
        "(weights + non-torch)'): residuals of 0.3-0.7 GiB on 0.24-0.31 logs (Qwen3-Coder-30B "
        "4xL40S 0.24, Qwen3-235B TP4 and TP4+EP on RTX PRO 6000 0.27.1, Qwen3-14B L40S 0.28, "
        "Llama-3.1-8B A100 0.31). Not before 0.24: the 0.19.0 -> 0.20.2 profile code adds "
        "nothing but the graph deduction, and the 16 collected 0.20-0.23 starts (H200 sweep and "
        "Red Hat logs, RTX PRO 6000 eager, L4) show none (median -0.1 GiB without it, -0.5 with "
        "it). Inside the language-model phase, so a larger vision-encoder peak hides it"),
    "act_fixed_mib": (
        64.0, "MiB",
        "cuBLAS/attention workspaces and allocator rounding, independent of batch size"),
    "non_torch_base_mib": (
        130.0, "MiB",
        "non-torch increase at TP=1 on data-centre GPUs (real logs: 0.13-0.14 GiB on H100; "
        "0.02-0.06 GiB on consumer cards)"),
    "non_torch_nvlink_tp_mib": (
        420.0, "MiB when TP*PP > 1 over NVLink",
        "what NCCL's P2P transport allocates inside the profile (custom all-reduce's IPC "
        "buffers come before the snapshot, review 25f); real logs: 0.54-0.55 GiB at TP2 on "
        "H100, 1.38 GiB at TP2 on H200 with vLLM 0.10.2; two 0.10.1 A100-80GB TP2 starts on "
        "one node differ by 0.32 GiB of it, the one whose P2P test failed lower; a 0.30 TP2 "
        "H100 study suggests less (about 0.1 GiB beyond TP1), not refitted on one study"),
    "non_torch_pcie_tp_mib": (
        100.0, "MiB when TP*PP > 1 over PCIe",
        "NCCL without an NVLink P2P path (real logs: 0.21 GiB TP8 L40S, 0.25 GiB TP2 RTX "
        "4090)"),
    "non_torch_fi_allreduce_mib": (
        1620.0, "MiB per GPU when vLLM builds its FlashInfer all-reduce workspace",
        "TP > 1 on Hopper / data-centre Blackwell, 0.17-0.26 (versions.flashinfer_allreduce, "
        "fi_allreduce_charged; a 0.30.0 TP2 H100 study shows none, and 0.27-0.29 build it "
        "the same way): "
        "0.19.0 H100 SXM logs print 2.06-2.10 GiB of non-torch memory at TP2 (6 logs) and "
        "2.13-2.21 GiB at TP4 (5 logs), 1.58 GiB above the NVLink TP term on average, against "
        "0.24-0.25 GiB at TP1 and 0.54-0.55 GiB at TP2 with 0.11"),
    "non_torch_rocm_mib": (
        1180.0, "MiB per GPU on ROCm",
        "what MI300X starts hold beyond the CUDA-fitted terms, weights taken as logged: "
        "+1.0 to +1.6 GiB (median 1.2) on 22 starts at TP1-TP4 of Llama-3.3-70B (BF16, FP8), "
        "Qwen3-235B and Qwen3-VL-30B with vLLM 0.11.2-0.18 (Red Hat AI Inference Server "
        "sweep, benchmarks/cases_sweep.yaml), +1.35 and +1.38 GiB on a 0.11.0 TP1 and a 0.9.2 "
        "TP2 log; 1.03-1.17 GiB of consumed memory beyond weights and the V2 sampler state "
        "on 0.31 vllm-openai-rocm starts of Gemma 4 E2B, E4B and 31B (2.5 for the 26B-A4B "
        "MoE, 1.4 for E2B at 0.29), +0.95 GiB on a 0.23 start. A 0.28 source build (torch "
        "2.12.1+rocm7.2) held none"),
    "non_torch_rocm_tp8_mib": (
        1790.0, "MiB per GPU more on ROCm at TP*PP >= 8",
        "RCCL over 8 xGMI peers: TP8 MI300X starts of DeepSeek-R1 (0.11.2-0.18, 7 starts) "
        "and Qwen3-235B (0.11.2, 2) hold +2.8 to +3.0 GiB beyond the CUDA terms, 1.75 GiB "
        "more than TP1-TP4"),
    "rocm_tp8_smallest_worker_mib": (
        430.0, "MiB less KV memory on the smallest of 8 MI300X workers",
        "every worker takes the smallest worker's block count (`get_kv_cache_configs`); the "
        "12 MI300X TP8 starts of the Red Hat sweep (DeepSeek-R1, Qwen3-235B BF16 and FP8, "
        "Llama-4-Maverick BF16 and FP8; 0.11.2-0.18) logged 0.416-0.429 GiB more available "
        "memory than their block counts hold; TP1-TP4 MI300X and NVIDIA TP8 starts show none"),
    "non_torch_nvlink_tp8_mib": (
        430.0, "MiB per GPU more at TP >= 8 over NVLink (NVIDIA)",
        "TP8 starts on NVSwitch H200/B200 (54 starts, 0.11.0-0.20.0: DeepSeek-R1, V3.2, "
        "V3.2-NVFP4, Kimi-K2.5, Maverick, Ministral-3, MiniMax-M2.5) leave a median 0.545 GiB "
        "less KV than the TP1-TP4 terms predict, against 0.12 GiB at TP2/TP4 (69 starts): "
        "the difference. Candidate cause: the torch.distributed NCCL communicator of the TP "
        "group, created lazily by the first all-gather inside the profile window, with "
        "buffers that grow with the rank count. Range of the TP8 residuals: -0.10 (MiniMax) "
        "to +0.91; 40 of the 54 starts are MLA MoE models"),
    "cudagraph_base_mib": (
        130.0, "MiB",
        "CUDA-graph estimate subtracted from 0.20 on, fixed part (first capture, pool): fitted "
        "with the next constant on 15 printed 0.19-0.31 estimates (0.09-0.79 GiB, 5-86 graphs, "
        "28-64 layers); with the hybrid term, the 16 rows in docs/accuracy.md fall within "
        "-0.19 to +0.44 GiB"),
    "cudagraph_per_layer_graph_mib": (
        0.133, "MiB per decoder layer per captured graph",
        "each captured batch size adds its kernels' graph nodes, i.e. depth x graphs"),
    "cudagraph_rocm_factor": (
        6.8, "x the CUDA estimate on ROCm (HIP graphs)",
        "MI300X graph pools against this CUDA model: 6.8-7.4 x on four 0.18 Red Hat starts "
        "(DeepSeek-R1 TP8, Llama-3.3-70B BF16 and FP8, Qwen3-VL-30B; 'Graph capturing "
        "finished' after KV allocation) and 6.5-7.0 x on the five estimates 0.29/0.31 print on "
        "a virtualised MI300X (Gemma 4); median of the nine 6.8. A 0.28 source build whose "
        "whole non-weight memory is 2.6 GiB disagrees (docs/accuracy.md)"),
    "cudagraph_state_layers_mib": (
        300.0, "MiB for Mamba / Gated-DeltaNet hybrids",
        "the first FULL capture of a hybrid warms up with a long sequence (vLLM issue 50780): "
        "10 printed estimates of Qwen3.5/3.6/3.8 hybrids run -0.15 to +0.72 GiB above the two "
        "terms above (median 0.29)"),
}


def const(name: str) -> float:
    return EMPIRICAL[name][0]


# Fused-MoE expert kernels, by how they take scratch space (`VllmVersion.moe_kernel`).
MOE_KERNELS = ("functional", "modular", "deepgemm_v011", "deepgemm", "flashinfer",
               "oai_triton", "batched_deepgemm", "batched_triton", "cutedsl_batched",
               "deepgemm_mega")
BATCHED_KERNELS = ("batched_deepgemm", "batched_triton", "cutedsl_batched")


@record(frozen=True)
class ActivationShape:
    """The model shape terms the activation peak depends on (per GPU)."""

    hidden: int
    intermediate_local: int  # dense MLP intermediate / TP (largest layer)
    moe_intermediate_local: int  # expert intermediate / TP (0 for dense)
    top_k: int
    vocab: int
    act_bytes: int  # activation dtype bytes
    moe_kernel: str = "functional"  # one of MOE_KERNELS
    moe_split_caches: bool = False  # 0.6-0.7: `fused_experts_impl`'s three separate caches
    local_experts: int = 0  # experts on one GPU (DeepGEMM pads every expert's rows)
    moe_hidden: int = 0  # K, the experts' input width (a latent MoE's; 0: `hidden`)
    moe_gated: bool = True  # w13 holds gate and up (N = 2 x intermediate)
    moe_dp: int = 1  # data-parallel ranks whose tokens every MoE layer gathers
    # the scratch stays in the shared workspace after the forward (a monolithic kernel
    # allocates its own per call)
    moe_kept: bool = True
    deepgemm_fp8_ws: bool = False  # 0.31+: DeepGEMM's first workspace sized in FP8 bytes
    # FlashInfer's TRT-LLM kernel on SM100 ("fp8_block" / "nvfp4"; "" otherwise), the global
    # expert count its row padding takes, its NVFP4 tile ladder (192 from FlashInfer 0.6.16),
    # and FlashInfer's own output copied into the kept one (0.18-0.19 modular FP8)
    trtllm: str = ""
    global_experts: int = 0
    trtllm_tile_192: bool = False
    trtllm_copy_out: bool = False
    # FlashInfer CUTLASS: "fp8_block" (Hopper) | "bf16" | "fp8" (per-tensor) | "nvfp4" ("":
    # none), whether its TMA warp-specialised GEMMs run (SM90 bf16 / FP8, FP4), and the
    # intermediate as vLLM padded it for the kernel (0: `moe_intermediate_local`)
    fi_cutlass: str = ""
    fi_tma: bool = False
    fi_inter: int = 0
    fi_hidden: int = 0  # the hidden width as padded for the kernel (0: `moe_hidden` / `hidden`)
    # DeepEP low latency's batched experts (`BATCHED_KERNELS`): the DP ranks, the tokens per
    # rank its buffers are shaped for, the dispatched activation's bytes per element and the
    # 4-byte scale columns per token (fp32 H / 128 on Hopper, UE8M0 H / 512 on Blackwell)
    ll_ranks: int = 0
    ll_tokens: int = 0
    ll_dispatch_bytes: int = 2
    ll_scale_cols: int = 0
    # microbatches the profile run splits the batch into (dual-batch overlap): each keeps
    # its own workspace slot, and only the running one holds a kernel's per-call buffers
    ubatches: int = 1

    def moe_workspace(self, tokens: int) -> int:
        """Elements of fused-MoE scratch for `tokens` tokens, N = 2 x local expert
        intermediate (1 x for non-gated experts), K = the experts' input width, A = the
        activation's output (N / 2 gated, N not), M x top_k rows:
        * functional (`fused_experts_impl`, per call): M.k x max(N, K) + M.k x A (0.8+;
          M.k x (N + K) + M.k x A with 0.6-0.7's separate caches, `moe_split_caches`);
        * modular (`TritonExperts.workspace_shapes`): M.k x max(A, K) + M.k x max(N, K);
        * DeepGEMM (`DeepGemmExperts.workspace_shapes`) on M_sum rows, every local expert's
          rows padded to 128 (`compute_aligned_M`): 0.11.x M_sum x N + M_sum x max(A, K) +
          an M x K output, 0.13-0.30 M_sum x max(A, K) + M_sum x max(N, K); 0.31+ size the
          first by its FP8 bytes ("Size it by bytes", `_fp8_workspace_shape`: max(A, K) / 2
          16-bit elements), which the M x K output may exceed (the manager reserves the
          larger, `_allocate_buffers`);
        * FlashInfer CUTLASS (`FlashInferExperts`): an M x K workspace that the output reuses
          (`FusedMoEModularKernel._allocate_buffers`: one buffer of the larger; NVFP4's M x
          2K output is over the packed K, hidden / 2);
        * OpenAI's Triton MXFP4 kernels (`OAITritonExperts`): M.k x A and an M x K output."""
        i, k = self.moe_intermediate_local, self.top_k
        h = self.moe_hidden or self.hidden
        if not i:
            return 0
        n, act = (2 * i, i) if self.moe_gated else (i, i)
        if self.moe_kernel in BATCHED_KERNELS:
            return self.ll_workspace(h, n)
        if self.moe_kernel == "deepgemm_mega":  # its symmetric buffer is outside torch
            return 0
        rows = tokens * k
        if self.moe_kernel == "functional":  # caches 1 and 3 share one buffer from 0.8
            return rows * ((n + h if self.moe_split_caches else max(n, h)) + act)
        if self.moe_kernel == "modular":
            return rows * (max(act, h) + max(n, h))
        if self.moe_kernel == "flashinfer":
            return tokens * h
        if self.moe_kernel == "oai_triton":
            return rows * act + tokens * h
        m_sum = -(-(rows + self.local_experts * 127) // 128) * 128
        if self.moe_kernel == "deepgemm_v011":
            return m_sum * n + m_sum * max(act, h) + tokens * h
        if self.deepgemm_fp8_ws:
            ws1 = m_sum * -(-max(act, h) // self.act_bytes)
            return max(ws1, tokens * h) + m_sum * max(n, h)
        return m_sum * (max(act, h) + max(n, h))

    def ll_workspace(self, h: int, n: int) -> int:
        """DeepEP low latency's batched experts, shaped for every local expert receiving R =
        ranks x tokens per rank (`workspace_shapes`): BatchedDeepGemm / BatchedTriton
        (E, R, max(K, N)) shared with the (E, R, K) output, and (E, R, N / 2); CuteDSL's
        batched NVFP4 kernel (E, R, K) and (E, R, N)."""
        rows = self.local_experts * self.ll_ranks * self.ll_tokens
        if self.moe_kernel == "cutedsl_batched":
            return rows * (h + n)
        return rows * (max(h, n) + n // 2)

    def ll_call_bytes(self) -> int:
        """What DeepEP low latency's dispatch returns into the expert call (`low_latency_
        dispatch`, freed after the layer): `packed_recv_x` [E, R, K] in the dispatched dtype
        with its scales, `src_info` [E, R] int32, `layout_range` [E, ranks] int64, the counts,
        the modular kernel's [T, K] output, and BatchedDeepGemm's FP8 re-quantized activation
        with fp32 scales ([E, R, I], [E, R, I / 128])."""
        e, r = self.local_experts, self.ll_ranks * self.ll_tokens
        h = self.moe_hidden or self.hidden
        out = (e * r * (h * self.ll_dispatch_bytes + 4 * self.ll_scale_cols + 4)
               + 8 * e * self.ll_ranks + 4 * e + self.ll_tokens * h * self.act_bytes)
        if self.moe_kernel == "batched_deepgemm":
            i = self.moe_intermediate_local
            out += e * r * i + 4 * e * r * cdiv(i, 128)
        return out

    def fi_call_scratch_bytes(self, tokens: int) -> int:
        """The buffers FlashInfer's fused-MoE kernels allocate on every call: vLLM never hands
        them a workspace, so they allocate through tvm-ffi's environment allocator, i.e.
        torch's caching allocator (`getWorkspaceInfo` -> `alloc_tensor`, FlashInfer
        0.6.3-0.7.2.post1, the releases vLLM 0.16-0.33 pin), and free them on return: inside
        the profile's peak, not kept. TRT-LLM (`trtllm_call_scratch_bytes`), CUTLASS's
        non-block paths (`cutlass_call_scratch_bytes`) or, for block-FP8 experts on Hopper,
        `CutlassMoeFCRunner::getWorkspaceDeviceBufferSizes`' DeepSeek block path for n =
        tokens x top_k rows: the permuted input / FC2 output (2nK), the gated FC1 output
        (4nI), the FP8 copy of the input and its scales (nK + nK/32), four int32 row maps
        (16n), the per-expert row map (4 x local experts x tokens) and the Python wrapper's
        `experts_to_token_score` (as much again). DeepSeek-R1 at `-dp 8 -ep` on H200s
        (65,536 gathered tokens): 15,711,862,784 B; vLLM issue 47127 shows the same
        formula's 26.21 GiB failing in `profile_run`."""
        if self.trtllm:
            return self.trtllm_call_scratch_bytes(tokens)
        if not self.fi_cutlass or not self.moe_intermediate_local:
            return 0
        if self.fi_cutlass != "fp8_block":
            return self.cutlass_call_scratch_bytes(tokens)
        k, i = self.moe_hidden or self.hidden, self.moe_intermediate_local
        return (self.top_k * tokens * (16 + 3 * k + 4 * i + k // 32)
                + 8 * self.local_experts * tokens)

    def cutlass_call_scratch_bytes(self, tokens: int) -> int:
        """FlashInfer CUTLASS's per-call workspace on the non-block paths
        (`CutlassMoeFCRunner::getWorkspaceDeviceBufferSizes`, FlashInfer 0.6.3-0.7.2.post1;
        vLLM passes no `workspace_buffer`, so the binding allocates it through torch and frees
        it on return), for n = tokens x top_k rows, T the input's bytes (bf16 2, per-tensor
        FP8 1, NVFP4 1/2: vLLM quantizes before the call), I the padded intermediate:
        overlapped GEMM inputs max(nKT, 2nK, nIT if a GLU buffer), overlapped outputs
        max(2 x GLU, 2nK, nIT) (GLU = 2nI gated; nI non-gated when FP8 or a TMA kernel with
        a non-bf16 input), NVFP4's activation scale factors, the row maps and expert
        counters, the binding's source-to-destination map, and the Python wrapper's
        `experts_to_token_score`. Nemotron-3-Super FP8 at `-dp 2 -ep` on H200s:
        2,946,014,848 B."""
        k, i = self.moe_hidden or self.hidden, self.fi_inter or self.moe_intermediate_local
        if not i:
            return 0
        e, m = self.local_experts, tokens
        n = m * self.top_k
        t2 = {"bf16": 4, "fp8": 2, "nvfp4": 1}[self.fi_cutlass]  # input bytes x 2
        glu = 2 * n * i if self.moe_gated else (
            n * i if self.fi_cutlass == "fp8" or (self.fi_tma and self.fi_cutlass != "bf16")
            else 0)
        fc1 = n * i * t2 // 2
        inputs = max(n * k * t2 // 2, 2 * n * k, fc1 if glu else 0)
        outputs = max(2 * glu, 2 * n * k, fc1) if glu else fc1
        sf = 0
        if self.fi_cutlass == "nvfp4":  # `fp4_act_scale`, 128 x 64 scale-factor atoms
            r = min(n, m * e)
            sf = max(_a128(r + 127 * e) * (cdiv(g, 64) * 64) // 16 for g in (k, i))
        tpb = next((b for b in (32, 64, 128, 256, 512, 1024) if cdiv(m, b) * e <= b), 1024)
        nb = cdiv(m, tpb)
        small = (_a128(4 * n) * (3 if self.fi_tma else 2) + 2 * _a128(4 * e * nb)
                 + _a128(4 * e * m) + _a128(8 * (e + 1)) + 2 * _a128(8 * e))
        return _a128(inputs) + _a128(outputs) + _a128(sf) + small + _a128(4 * n) + 4 * e * m

    def trtllm_rows(self, tokens: int) -> tuple[int, int]:
        """(tile, padded expert rows P) of FlashInfer's TRT-LLM MoE when no autotune has run
        (the profile comes before `kernel_warmup`; vLLM passes no `tile_tokens_dim`):
        `selectDefaultTileN` takes the tile below the first one at or above the rows per
        local expert (the first tile if that is the first; the last if none is), and
        `getMaxPermutedPaddedCount` pads over the global experts: P = t x (min(E, n) +
        floor((n - min(E, n)) / t)), n = tokens x top_k (FlashInfer 0.6.3-0.7.2.post1)."""
        ladder = [8, 16, 32, 64, 128]  # DeepSeek FP8 and per-tensor FP8
        if self.trtllm == "mxfp4":  # MXFP4 weights with bf16 activations
            ladder = [8, 16, 32, 64]
        if self.trtllm == "nvfp4":
            ladder += [192, 256] if self.trtllm_tile_192 else [256]
        n = tokens * self.top_k
        avg = n / max(1, self.local_experts)
        at = next((j for j, t in enumerate(ladder) if t >= avg), len(ladder) - 1)
        tile = ladder[max(0, at - 1)]
        first = min(self.global_experts, n)
        return tile, tile * (first + (n - first) // tile)

    def trtllm_call_scratch_bytes(self, tokens: int) -> int:
        """What FlashInfer's TRT-LLM MoE launcher allocates per call (`prepare_moe`,
        `prepare_routing_common`; torch-allocated through tvm-ffi, freed on return), for P
        padded rows, I the per-rank intermediate, K the hidden size: block FP8 P x (3I +
        3I/32 + 2K) (the 2I FP8 FC1 output and its fp32 block scales, the I FP8 activation
        and scales, the bf16 FC2 output), NVFP4 P x I/2 + its 128-row swizzled scale factors
        + 2K x P, plus the routing buffers (8n + 4(P + 1) + 4E + 4 max(2E, 512) + 8 P/t + 8,
        and 2n of bf16 expert weights); `workspace_fc1/fc2` are empty for these unfused
        activations. DeepSeek-R1 at `-dp 8 -ep` on B200s (131,072 tokens, tile 64):
        22,024,441,836 B."""
        i, k, e = self.fi_inter or self.moe_intermediate_local, self.fi_hidden or \
            self.moe_hidden or self.hidden, self.global_experts
        if not i:
            return 0
        n = tokens * self.top_k
        tile, p = self.trtllm_rows(tokens)
        if self.trtllm == "fp8_block":
            body = p * (3 * i + 3 * i // 32 + 2 * k)
        elif self.trtllm in ("mxfp4", "bf16"):  # bf16 FC1 (I after the activation), FC2
            body = p * (2 * i + 2 * k)
        elif self.trtllm == "fp8_tensor":  # `Fp8PerTensorLauncher::prepare_moe`: a 2I FC1
            # output (even non-gated) and its fp32 scales over P + E rows, the bf16 FC2 output
            body = (p + e) * (2 * i + cdiv(2 * i, 128) * 4) + p * 2 * k
        else:
            body = p * i // 2 + cdiv(p, 128) * 128 * cdiv(i // 16, 4) * 4 + 2 * k * p
        routing = 8 * n + 4 * (p + 1) + 4 * e + 4 * max(2 * e, 512) + 8 * (p // tile) + 8 \
            + 2 * n
        copy_out = tokens * k * self.act_bytes if self.trtllm_copy_out else 0
        return body + routing + copy_out

    def trtllm_inputs_bytes(self, tokens: int) -> int:
        """vLLM's quantized MoE input at the MoE point on the TRT-LLM path (in place of the
        bf16 gathered input): block FP8 M x K + its fp32 scales and their transposed copy
        (`_apply_block_scale`), NVFP4 M x K/2 + 128-row swizzled K/16 scales (a second
        swizzled copy and the top-k ids / weights when DP gathers them, `naive_dp_ep.py`);
        with DP the gathered bf16 router logits (M x experts) come along."""
        k, e = self.moe_hidden or self.hidden, self.global_experts
        if self.trtllm == "fp8_block":
            q = tokens * k + 2 * (tokens * k // 32)
        elif self.trtllm == "fp8_tensor":
            q = tokens * k
        elif self.trtllm in ("mxfp4", "bf16"):  # bf16 in; gathered as such under DP
            q = tokens * k * self.act_bytes if self.moe_dp > 1 else 0
        else:
            sf = cdiv(tokens, 128) * 128 * k // 16
            q = tokens * k // 2 + sf + ((sf + 8 * tokens * self.top_k) if self.moe_dp > 1
                                        else 0)
        logits = tokens * e * 2 if self.moe_dp > 1 and self.trtllm in ("fp8_block",
                                                                         "fp8_tensor") else 0
        return q + logits

    def moe_scratch_bytes(self, tokens: int, chunk: int | None) -> int:
        """Bytes of fused-MoE scratch when `tokens` go through in chunks of `chunk`."""
        return self.moe_workspace(min(tokens, chunk or tokens)) * self.act_bytes


def mla_profile_scratch(max_model_len: int, max_num_seqs: int, block_size: int,
                        heads_local: int, up_dim: int, act_bytes: int, *,
                        seqs_floor: bool) -> int:
    """The throw-away tensor every MLA layer allocates in the profile forward
    (`MLAAttention.forward_impl` with no metadata: "simulate to worse case output size for
    `self.kv_b_proj(kv_c_normed)`", [chunked_prefill_workspace_size, heads, nope + v]).
    `determine_chunked_prefill_workspace_size`: min(max(8 x max_model_len, 4 x max_num_seqs x
    block), 65,536) tokens, at least max_num_seqs x block before 0.28 (`seqs_floor`; 0.18.0,
    0.27.0), rounded up to the block from 0.28 (`align_mla_chunked_context_workspace_size`).
    512 MiB for DeepSeek-R1 at TP8 (65,536 x 16 heads x 256 x 2 B); freed before the next
    layer."""
    ws = min(max(8 * max_model_len, 4 * max_num_seqs * block_size), 64 * 1024)
    ws = max(ws, max_num_seqs * block_size) if seqs_floor else \
        -(-max(ws, block_size) // block_size) * block_size
    return ws * heads_local * up_dim * act_bytes


def _a128(n: int) -> int:
    """FlashInfer's workspace aligns every buffer to 128 bytes (`kCudaMemAlign`)."""
    return cdiv(n, 128) * 128


def _r256(n: int) -> int:
    """`WorkspaceManager.get_simultaneous` rounds every view up to 256 bytes."""
    return -(-n // 256) * 256


def triton_mla_logits_bytes(rows: int, heads: int, max_model_len: int, sm_count: int,
                            kv_lora_rank: int) -> int:
    """Triton-MLA's split-KV decode logits, reserved in the shared workspace at their worst
    case (`_reserve_attn_logits_workspace`, triton_mla.py 0.25-0.33): fp32 [rows (max_num_seqs
    x the decode query length), heads (x DCP), splits, kv_lora_rank + 1], splits = min(the
    power of 2 at or above max_model_len / 512, 2 x the SM/CU count) (`_compute_num_kv_splits`;
    uncapped when the catalog has no SM count). DeepSeek-R1 on an MI300X at TP8 and 163,840
    tokens: 1,024 x 16 x 512 x 513 x 4 B = 16.0 GiB."""
    splits = 1 << max(0, (max(1, max_model_len // 512) - 1).bit_length())
    if sm_count:
        splits = min(splits, 2 * sm_count)
    return rows * heads * splits * (kv_lora_rank + 1) * 4


def indexer_gather_bytes(max_model_len: int, head_dim: int, *, factor_rule: bool,
                         compress: int = 1, radix: bool = True) -> int:
    """The sparse indexer's K-gather reservation in the shared workspace, made in the
    profile forward (`sparse_attn_indexer`, 0.13+): `get_max_prefill_buffer_size` // the
    compress ratio rows of head_dim fp8 values and a 4-byte scale, each 256-aligned, and
    the 1 MiB radix top-k scratch (0.20+). Rows: 40 x max_model_len to 0.31; from 0.32
    8 x factor x max_model_len, factor 5 up to 262,144 tokens, else 2
    (`sparse_mla_prefill_workspace_factor`). DeepSeek-V3.2 at 163,840 tokens: 826 MiB."""
    length = max_model_len
    rows = (8 * (5 if length <= 262144 else 2) if factor_rule else 40) * length // compress

    return _r256(rows * head_dim) + _r256(rows * 4) + (MiB if radix else 0)


def flashmla_sparse_bytes(tokens: int, heads_local: int, max_model_len: int, *,
                          q_head: int, kv_lora_rank: int, v031: bool = False,
                          factor_rule: bool = False, query_only: bool = False) -> int:
    """FlashMLA-sparse's reservation in the shared workspace (`FlashMLASparseImpl.__init__`,
    at model build: the workspace manager exists from `init_device`, so "Model loading took"
    holds it): the bf16 query concat [max_num_batched_tokens, heads, q_head] (with any cache
    from 0.18, `query_only`), and with an fp8_ds_mla cache (0.13+) the prefill gather
    [factor x max_model_len, q_head] (factor 5; from 0.32 2 above 262,144 tokens); 0.31 adds
    the prefill query buffers [tokens, heads padded to 64, q_head / kv_lora_rank] and
    [tokens, heads, kv_lora_rank]. DeepSeek-V3.2 at TP8 on an H200 with 0.33: 2.21 GiB."""
    if query_only:
        return _r256(2 * tokens * heads_local * q_head)
    factor = 2 if factor_rule and max_model_len > 262144 else 5
    parts = [tokens * heads_local * q_head, factor * max_model_len * q_head]
    if v031:
        padded = -(-heads_local // 64) * 64
        parts += [tokens * padded * q_head, tokens * padded * kv_lora_rank,
                  tokens * heads_local * kv_lora_rank]
    return sum(_r256(2 * x) for x in parts)


def dsv4_profile(t: dict, *, tokens: int, max_model_len: int, heads_local: int, tp: int,
                 v033: bool, nvidia: bool, factor_rule: bool | None = None,
                 topk_ints: bool | None = None) -> tuple[int, int]:
    """DeepSeek-V4's profile forward: (bytes alive at its peak besides the shared workspace,
    the shared workspace's attention / indexer reservations).

    The peak is inside a C4 layer's indexer, at the throw-away `torch.empty` of
    `VLLM_SPARSE_INDEXER_MAX_LOGITS_MB` (512 MiB): the mHC residual stream (hc x hidden),
    its mixes, the normed input, the output padded to FlashMLA's 64 / 128 heads, the fused
    q_a+kv projection, both compressors' fp32 kv/score, the indexer's q (bf16 and fp8) and
    weights. 0.20.2 (`deepseek_v4_attention.py attention_impl`, `sparse_attn_indexer.py`)
    runs under torch.compile; 0.33 (`models/deepseek_v4`, eager) also keeps the previous
    layer's stream and FFN output, pads q in the profile (`_fused_qnorm_rope_kv_insert`)
    and, at TP > 1 on CUDA, makes a second throw-away of 8 x tokens x index_topk
    (`_reserve_row_shard_exchange_transient`).
    The reservations (`WorkspaceManager.get_simultaneous`, views of the one buffer the MoE
    scratch uses, kept): the prefill gather 4 x (ceil(L/4) + window + T) x head_dim x 2 B
    (`topk_ints`, FlashMLA on CUDA from 0.27, default `v033`: with T x roundup(topk + 128,
    128) x 4 + 4T of top-k indices, `nvidia/flashmla.py`) and the indexer's K gather
    (`indexer_gather_bytes` with compress ratio 4; `factor_rule`: 0.32+, default `v033`)."""
    h, hc = int(t.get("hidden_size") or 0), int(t.get("hc_mult") or 1)
    d_head, q = int(t.get("head_dim") or 0), int(t.get("q_lora_rank") or 0)
    n, d = int(t.get("index_n_heads") or 64), int(t.get("index_head_dim") or 128)
    topk, window = int(t.get("index_topk") or 0), int(t.get("sliding_window") or 128)
    pad = 64 if heads_local <= 64 else 128
    throwaway = 512 * MiB  # VLLM_SPARSE_INDEXER_MAX_LOGITS_MB

    length = max_model_len
    if v033:
        per_tok = (4 * hc * h + 8 * hc * (1 + hc) + 4 * h + 4 * pad * d_head + 4 * q
                   + 20 * d_head + 16 * d + n * d + 6 * n)
        point = tokens * per_tok + throwaway + (8 * tokens * topk if tp > 1 and nvidia else 0)
    else:
        per_tok = (2 * hc * h + 4 * hc * (1 + hc) + 2 * h + 2 * pad * d_head + 4 * q
                   + 20 * d_head + 2 * heads_local * d_head + 16 * d + 3 * n * d + 6 * n)
        point = tokens * per_tok + throwaway
    gather = 4 * (-(-length // 4) + window + tokens) * d_head * 2
    if v033 if topk_ints is None else topk_ints:
        gather = (_r256(gather) + _r256(tokens * -(-(topk + 128) // 128) * 128 * 4)
                  + _r256(4 * tokens))
    indexer = indexer_gather_bytes(length, d, compress=4,
                                   factor_rule=v033 if factor_rule is None else factor_rule)
    return point, max(gather, indexer)


def mamba2_profile_point(intermediate: int, n_groups: int, d_state: int, n_heads: int,
                         hidden: int, tp: int, tokens: int, act_bytes: int) -> int:
    """A Mamba2 mixer's peak in the profile run (`MambaMixer2.forward` / `conv_ssm_forward`,
    the 0.20 and 0.28-0.33 wheels): the in-projection output [T, 2I + 2GN + heads] and the
    SSM output [T, I] are alive while, without attention metadata, the op copies the conv
    input twice ([T, I + 2GN]: the transposed `clone()` and `.contiguous()`), beside the
    decoder layer's residual and normed input (2 H). I, heads and the groups (padded to a
    multiple of TP) are per GPU. Nemotron-3-Nano at 8,192 tokens: 0.41 GiB."""
    g = n_groups + (0 if n_groups % tp == 0 else tp - n_groups)
    i, gn, h = intermediate // tp, g * d_state // tp, n_heads // tp
    per_token = (2 * i + 2 * gn + h) + i + 2 * (i + 2 * gn) + 2 * hidden
    return tokens * per_token * act_bytes


def hidden_copies_bytes(shape: ActivationShape, tokens: int) -> float:
    """The hidden-sized activations alive in the forward (`act_hidden_copies` per token)."""
    return tokens * const("act_hidden_copies") * shape.hidden * shape.act_bytes


def activation_peak(shape: ActivationShape, max_num_batched_tokens: int, max_num_seqs: int,
                    *, v1: bool, sampler_copies: float | None = None,
                    moe_chunk: int | None = None, v024: bool = False,
                    attn_point: int = 0, workspace_floor: int = 0) -> int:
    """Peak torch memory of the profile run above the weights (empirical model).

    The profile run forwards `max_num_batched_tokens` tokens split over
    `min(max_num_batched_tokens, max_num_seqs)` dummy requests, then samples one token per
    request (`gpu_model_runner.profile_run`). V0 profiled `max_num_seqs` sequences the same way.
    The fused-MoE workspace covers `moe_chunk` tokens at a time (`VLLM_FUSED_MOE_CHUNK_SIZE`
    up to 0.17); every kernel but the functional one keeps it allocated (0.11
    `SharedResizableBuffer`, 0.13+ `WorkspaceManager`), so it is still there while the
    sampler runs. `v024` adds what 0.24+ keeps after the profile. `attn_point`: what an
    attention layer holds at its own peak besides the kept scratch (`mla_profile_scratch`,
    `dsv4_profile`); `workspace_floor`: attention reservations in the same kept buffer,
    which is as large as its largest user.
    """
    tokens = max_num_batched_tokens
    reqs = min(tokens, max_num_seqs)
    dense = const("act_mlp_copies") * shape.intermediate_local * tokens
    moe_tokens = tokens * shape.moe_dp  # DP > 1: the MoE input gathered over the DP ranks
    moe = shape.moe_scratch_bytes(moe_tokens, moe_chunk)
    gathered = (moe_tokens * (shape.moe_hidden or shape.hidden) * shape.act_bytes
                if shape.moe_dp > 1 and shape.moe_intermediate_local
                and shape.moe_kernel != "deepgemm_mega" else 0)
    if shape.trtllm and shape.moe_intermediate_local:  # quantized before the kernel
        gathered = shape.trtllm_inputs_bytes(moe_tokens)
    if shape.moe_kernel in BATCHED_KERNELS:  # DeepEP low latency: received, not gathered
        gathered = shape.ll_call_bytes()
        moe *= shape.ubatches  # a full-size slot per microbatch
    # freed on return: not held; one microbatch's worth when the profile is split
    call = shape.fi_call_scratch_bytes(moe_tokens // max(shape.ubatches, 1))
    forward = hidden_copies_bytes(shape, tokens) + max(dense * shape.act_bytes,
                                                       moe + gathered + call)
    copies = const("sampler_fp32_copies") if sampler_copies is None else sampler_copies
    sampler = reqs * shape.vocab * 4 * copies
    held = max(moe if shape.moe_kernel != "functional" and shape.moe_kept else 0,
               workspace_floor)
    if attn_point:
        forward = max(forward, held + attn_point)
    # V1's `profile_run` keeps the dummy run's hidden states [tokens, hidden] until the
    # dummy sampler has run (`del hidden_states` after it; 0.8-0.33)
    kept_hidden = tokens * shape.hidden * shape.act_bytes if v1 else 0
    fixed = const("act_fixed_mib") + (const("act_v024_mib") if v024 else 0.0)
    return int(max(forward, held + kept_hidden + sampler) + fixed * MiB)


# per-thread stack of DeepSeek-V4's C128 compressor kernel (`_fused_kv_compress_norm_rope_
# insert_sparse_attn`, num_warps 4): 7,896 B in the cubin Triton 3.5.1 / 3.6.0 build for
# sm_90a (`cuobjdump`: REG:32 STACK:7896; the 0.33 source is the same), compiled offline
DSV4_C128_STACK_B = 7896


def threads_per_sm(compute_capability: str) -> int:
    """Resident threads per SM (CUDA's maxThreadsPerMultiProcessor by compute capability)."""
    major, _, minor = (compute_capability or "0.0").partition(".")
    if major in ("8", "12") and minor not in ("0", ""):
        return 1536  # 8.6, 8.7, 8.9 and the 12.x consumer / workstation Blackwells
    return {"7": 1024 if minor == "5" else 2048, "12": 1536}.get(major, 2048)


def dsv4_stack_bytes(sm_count: int, compute_capability: str) -> int:
    """Device memory the CUDA driver adds when DeepSeek-V4's C128 compressor kernel first
    launches: it raises the per-thread stack limit to fit the kernel and backs it for every
    resident thread, never shrinking it (`CU_LIMIT_STACK_SIZE`). ROUNDUP(stack + 512, 256)
    against the default ROUNDUP(1,024 + 512, 256), times threads per SM, times SMs: 1.74 GiB
    on a 132-SM H200."""
    def slot(stack: int) -> int:
        return cdiv(stack + 512, 256) * 256

    grow = slot(DSV4_C128_STACK_B) - slot(1024)
    return grow * threads_per_sm(compute_capability) * sm_count


def v2_sampler_state_bytes(max_num_seqs: int, vocab: int, decode_q: int = 1) -> int:
    """The V2 runner's sampler state (`PenaltiesState`: output_bin_counts [seqs, vocab] and
    prompt_bin_mask [seqs, vocab/32]; `StructuredOutputsWorker.grammar_bitmask` [seqs x the
    decode query length (1 + k with speculative decoding), vocab/32]; int32, on the last
    stage): 0.616 GiB at 1,024 x 151,936."""
    words = cdiv(vocab, 32)
    return max_num_seqs * (vocab + words + decode_q * words) * 4


def non_torch(tp: int, pp: int, nvlink_p2p: bool, fi_allreduce: bool = False,
              rocm: bool = False, nvlink_tp8: bool = False) -> int:
    """Memory outside the torch allocator that grows during profiling (empirical).
    `nvlink_p2p`: the ranks reach each other over NVLink within a node, so NCCL takes its
    P2P transport (a P2P-less or cross-node group: SHM / network, less on the GPU). vLLM's
    own communicators (custom all-reduce's IPC buffers, symmetric memory, pynccl) are built
    in `init_worker_distributed_environment`, before the memory snapshot, so
    `--disable-custom-all-reduce` moves nothing here. `fi_allreduce`: the FlashInfer
    all-reduce workspace is built inside the profile. `rocm`: the extra that MI300X starts
    of vLLM's images show. `nvlink_tp8`: the extra of TP >= 8 over NVLink."""
    extra = 0.0
    if rocm:
        extra += const("non_torch_rocm_mib")
        if tp * pp >= 8:
            extra += const("non_torch_rocm_tp8_mib")
    if tp * pp > 1:
        extra += const("non_torch_nvlink_tp_mib" if nvlink_p2p else "non_torch_pcie_tp_mib")
    if fi_allreduce:
        extra += const("non_torch_fi_allreduce_mib")
    if nvlink_tp8:
        extra += const("non_torch_nvlink_tp8_mib")
    return int((const("non_torch_base_mib") + extra) * MiB)


def _size_grid(top: int, step16: bool = True) -> set[int]:
    """vLLM's capture grid up to `top`: 1, 2, 4, steps of 8 below 256, steps of 16 from 256
    (0.12+; steps of 8 throughout before, `batch_size_capture_list`)."""
    return ({i for i in (1, 2, 4) if i <= top} | set(range(8, min(top + 1, 256), 8))
            | set(range(256, top + 1, 16 if step16 else 8)))


def cudagraph_capture_sizes(max_num_seqs: int, max_num_batched_tokens: int, *,
                            ceiling: int = 512, interactivity: bool = False,
                            sizes: tuple[int, ...] | None = None,
                            max_size: int | None = None, decode_q: int = 1,
                            decode_tiers: bool = False, seqs_size: bool = True,
                            step16: bool = True, budget_size: bool = True) -> list[int]:
    """The batch sizes vLLM captures (0.33 `config/vllm.py` `_set_cudagraph_sizes`).
    `--cudagraph-capture-sizes` (`sizes`) are taken as given, up to the token budget. By
    default the grid goes up to min(2 x max_num_seqs x decode_q, ceiling,
    max_num_batched_tokens), or to `--max-cudagraph-capture-size` (`max_size`): 1, 2, 4, then
    steps of 8 below 256 and 16 from 256 (`step16`, 0.12+; 8 throughout before; every size
    to 32 with --performance-mode interactivity); the token budget is added where it falls
    inside (`budget_size`, 0.20.1+). With speculative
    decoding a decode step carries `decode_q` = 1 + k tokens per sequence. When vLLM
    computes the default (no `max_size`):
    * `decode_tiers` (0.29+, decode_q > 1): n x decode_q for every request count n of the
      same grid up to min(max_num_seqs, ceiling) plus that count itself
      (`uniform_decode_sizes`), within the ceiling and the token budget;
    * `seqs_size` (decode_q == 1): max_num_seqs itself (0.31+: `elif max_num_seqs <=
      max_cudagraph_capture_size`; not in 0.12-0.30)."""
    if sizes:
        return sorted({x for x in sizes if x <= max_num_batched_tokens})
    top0 = max_size or min(max_num_seqs * decode_q * 2, ceiling)
    top = min(top0, max_num_batched_tokens)
    grid = _size_grid(top, step16)
    if interactivity:
        grid |= set(range(1, min(top, 32) + 1))
    if budget_size and max_num_batched_tokens <= top:  # 0.20.1+ ("ensure max_num_tokens is
        grid.add(max_num_batched_tokens)  # captured")
    if not max_size and decode_q > 1 and decode_tiers:
        r = min(max_num_seqs, ceiling)
        counts = _size_grid(r) | {r}
        grid |= {n * decode_q for n in counts
                 if n * decode_q <= top0 and n * decode_q <= max_num_batched_tokens}
    elif not max_size and decode_q == 1 and seqs_size and max_num_seqs <= top:
        grid.add(max_num_seqs)
    return sorted(grid)


# `CUDAGraphMode`: NONE, PIECEWISE, FULL, FULL_DECODE_ONLY (FULL, NONE), FULL_AND_PIECEWISE
CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")


def effective_cudagraph_mode(cudagraph_mode: str | None, compilation_mode: int | None,
                             enforce_eager: bool, *, breakable: bool = False,
                             keep_full: bool = False, default_full: bool = True) -> str:
    """The CUDA-graph mode vLLM runs: FULL_AND_PIECEWISE by default from 0.11, PIECEWISE
    before (`default_full`; `VllmConfig.__post_init__`, 0.10.2/0.11.0 wheels), NONE with
    --enforce-eager. Piecewise graphs need vLLM's compilation (they split the compiled graph):
    without it (mode != 3) a piecewise mode becomes NONE ("Cudagraph mode ... is not
    compatible with compilation mode ... Overriding to NONE", 0.20.2), or from 0.30
    (`keep_full`) loses only its piecewise part, FULL_AND_PIECEWISE becoming FULL_DECODE_ONLY
    (`_normalize_piecewise_cudagraph_mode`, `CUDAGraphMode.without_piecewise`). Breakable
    graphs, which split around attention without it, keep the mode
    (`not VLLM_USE_BREAKABLE_CUDAGRAPH` in that condition)."""
    if enforce_eager:
        return "NONE"
    mode = cudagraph_mode or ("FULL_AND_PIECEWISE" if default_full else "PIECEWISE")
    if (not breakable and compilation_mode is not None and compilation_mode != 3
            and "PIECEWISE" in mode):
        return "FULL_DECODE_ONLY" if keep_full and mode == "FULL_AND_PIECEWISE" else "NONE"
    return mode


def cudagraph_graphs(max_num_seqs: int, max_num_batched_tokens: int,
                     mode: str = "FULL_AND_PIECEWISE", *, round_to_q: bool = False,
                     v2: bool = False, **grid: Any) -> int:
    """Graphs vLLM captures for the target model: under FULL_AND_PIECEWISE (the default) a
    PIECEWISE graph per size and a FULL one per pure-decode size up to max_num_seqs;
    FULL_DECODE_ONLY the decode ones; PIECEWISE one per size; NONE none.
    Speculative decoding (`decode_q` = 1 + k > 1):
    * V1 (`CudagraphDispatcher`): with FULL decode graphs the sizes are rounded up to
      multiples of 1 + k (`round_to_q`, 0.12+: `adjust_cudagraph_sizes_for_spec_decode`),
      and the decode ones span 1 + k to max_num_seqs x (1 + k) (`initialize_cudagraph_keys`);
    * V2 (`v2`, `CudaGraphManager._init_candidates`; the rounding runs only `if not
      use_v2_model_runner`): a PIECEWISE graph per unrounded size, a FULL one per distinct
      size rounded up to 1 + k, up to max_num_seqs x (1 + k) and the largest size."""
    if mode == "NONE":
        return 0
    sizes = cudagraph_capture_sizes(max_num_seqs, max_num_batched_tokens, **grid)
    q = grid.get("decode_q", 1)
    if v2 and sizes:
        top = min(max(sizes), max_num_seqs * q)
        decode = len({cdiv(x, q) * q for x in sizes} & set(range(1, top + 1)))
    else:
        if q > 1 and round_to_q and mode != "PIECEWISE" and sizes:
            top = max(sizes)
            sizes = sorted({cdiv(x, q) * q for x in sizes} - set(range(top + 1, top + q)))
        decode = sum(1 for x in sizes if q <= x <= max_num_seqs * q)
    pieces = len(sizes)
    return {"FULL_DECODE_ONLY": decode, "FULL_AND_PIECEWISE": pieces + decode}.get(
        mode, pieces)


def largest_full_decode(max_num_seqs: int, max_num_batched_tokens: int, **grid: Any) -> int:
    """Tokens of the largest FULL decode graph (`cudagraph_graphs`' decode sizes): the
    largest capture size up to max_num_seqs x (1 + k)."""
    q = grid.get("decode_q", 1)
    sizes = cudagraph_capture_sizes(max_num_seqs, max_num_batched_tokens, **grid)
    return max((cdiv(x, q) * q for x in sizes if cdiv(x, q) * q <= max_num_seqs * q),
               default=0)


def indexer_decode_logits_bytes(rows: int, max_model_len: int) -> int:
    """The sparse-MLA indexer's decode logits, [rows, align(max_model_len, 256)] fp32, which
    DeepGEMM's `fp8_paged_mqa_logits` allocates inside a FULL decode graph and so in the
    graph pool (`sparse_attn_indexer` decode branch, the 0.20-0.33 wheels; DeepGEMM
    `csrc/apis/attention.hpp`). Every indexer layer and smaller graph reuses the one block:
    GLM-5.2 at 819,200 tokens and 512 decode rows, 1.56 GiB."""
    return rows * cdiv(max_model_len, 256) * 256 * 4


def drafter_cudagraph_graphs(max_num_seqs: int, max_num_batched_tokens: int,
                             mode: str, k: int, **grid: Any) -> int:
    """Graphs V2's autoregressive drafters (EAGLE, EAGLE-3, single-module MTP) capture
    (`TargetDependentARSpeculator.init_cudagraph_manager`, 0.29-0.33): a prefill manager
    with the target's mode and sizes at 1 + k tokens a request, and for k >= 2 a decode
    manager of FULL graphs at one token a request (FULL_DECODE_ONLY; none when the target
    has no FULL graphs; `capture` returns early for k = 1)."""
    if mode == "NONE" or k < 1:
        return 0
    grid = {**grid, "decode_q": 1 + k}
    prefill = cudagraph_graphs(max_num_seqs, max_num_batched_tokens, mode, v2=True, **grid)
    if k < 2 or "FULL" not in mode:
        return prefill
    sizes = cudagraph_capture_sizes(max_num_seqs, max_num_batched_tokens, **grid)
    return prefill + sum(1 for x in sizes if x <= max_num_seqs)


def cudagraph_estimate(num_layers_on_gpu: float, num_graphs: int, *,
                       state_layers: bool = False, rocm: bool = False,
                       draft_layer_graphs: float = 0.0) -> int:
    """CUDA-graph memory vLLM 0.20+ subtracts before sizing KV (empirical per layer and
    graph). V1 measures the first capture plus (n - 1) x one more per mode; V2
    (`profile_cudagraph_memory`, 0.29+) captures every PIECEWISE graph and every drafter
    graph and extrapolates only the target's FULL graphs from its two largest. The drafter's
    graphs add `draft_layer_graphs` (its layers x its graphs). HIP graphs (`rocm`) take
    `cudagraph_rocm_factor` times as much."""
    mib = (const("cudagraph_base_mib") + const("cudagraph_per_layer_graph_mib")
           * (num_layers_on_gpu * num_graphs + draft_layer_graphs))
    if state_layers:
        mib += const("cudagraph_state_layers_mib")
    if rocm:
        mib *= const("cudagraph_rocm_factor")
    return int(mib * MiB)


@record(frozen=True)
class Budget:
    """One GPU's memory waterfall (bytes)."""

    total: int
    utilization: float
    requested: int
    weights: int
    activation: int
    non_torch: int
    cudagraph: int
    available_kv: int  # what vLLM logs as "Available KV cache memory"
    kv_override: bool = False
    frontend_reserved: int = 0  # carved out after the log line (`mmdecode`)
    rank_deficit: int = 0  # the smallest worker's shortfall against the logging one

    @property
    def kv_pool(self) -> int:
        """What the KV cache gets: the logged figure less the frontend's reservation and,
        as every worker takes the smallest worker's block count (`get_kv_cache_configs`),
        that worker's shortfall."""
        return self.available_kv - self.frontend_reserved - self.rank_deficit

    @property
    def headroom(self) -> int:
        """Memory vLLM leaves unused by design: total - requested."""
        return self.total - self.requested


# what vLLM leaves free when it suggests --kv-cache-memory-bytes "to fully utilize gpu
# memory" (`redundancy_buffer_memory`, gpu_worker.py 0.20-0.33): profiling may undercount
REDUNDANCY_BUFFER = 150 * MiB


def budget(total: int, utilization: float, weights: int, activation: int, non_torch_b: int,
           cudagraph: int, *, ceil_requested: bool, kv_cache_memory_bytes: int | None,
           frontend_reserved: int = 0, rank_deficit: int = 0) -> Budget:
    requested = math.ceil(total * utilization) if ceil_requested else int(total * utilization)
    if kv_cache_memory_bytes is not None:
        return Budget(total, utilization, requested, weights, activation, non_torch_b, cudagraph,
                      int(kv_cache_memory_bytes), kv_override=True,
                      frontend_reserved=frontend_reserved)
    avail = requested - weights - activation - non_torch_b - cudagraph
    return Budget(total, utilization, requested, weights, activation, non_torch_b, cudagraph,
                  avail, frontend_reserved=frontend_reserved, rank_deficit=rank_deficit)


def gib(n: int) -> float:
    return n / GiB
