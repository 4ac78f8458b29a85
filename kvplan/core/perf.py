"""Step-time model of one vLLM engine: how long a scheduler step takes at a batch depth.

A step reads every weight it touches plus the running sequences' KV cache and does the
matmul FLOPs of the tokens it processes; it costs the larger of the two at the GPU's
(efficiency-scaled) bandwidth and compute, plus tensor-parallel all-reduces and a fixed
per-step overhead (scheduler, sampler, launch). Prefill is chunked by
max_num_batched_tokens and shares steps with decodes (V1 chunked prefill). MoE layers read
only the experts the batch routes to; quantized weights and KV read fewer bytes. Efficiency
factors are empirical: `PERF` names each with its source and range (docs/throughput.md).
"""

from __future__ import annotations

import math

from kvplan.core.arch import AttnLayer, StateLayer
from kvplan.core.kvspec import attn_bytes_per_token, state_bytes
from kvplan.core.params import count_params
from kvplan.core.record import record
from kvplan.core.sizing import Gpu, SizeResult
from kvplan.core.versions import cc_major

# name -> (value, unit, source / range). One place for every empirical constant.
PERF: dict[str, tuple[float, str, str]] = {
    "bw_eff": (0.80, "x peak HBM bandwidth",
               "decode kernels stream weights at 75-85 % of peak on H100/A100 (published "
               "single-stream decode; benchmarks/throughput_cases.yaml)"),
    "flops_eff": (0.55, "x dense peak FLOP/s",
                  "large-batch prefill / decode GEMMs reach 50-65 % of dense peak"),
    "step_overhead_s": (0.0008, "s per step",
                        "scheduler, sampler and host<->device sync outside the layers"),
    "layer_overhead_s": (40e-6, "s per dense decoder layer per step",
                         "kernel launch/latency floor of ~10 kernels a layer under CUDA graphs; "
                         "fitted on single-stream TPOT of Qwen2-7B, Qwen3-1.7B (A100), Qwen3-8B "
                         "(H100), Qwen3-4B (RTX 4090): 1.2-3 ms above the bandwidth time"),
    "moe_layer_overhead_s": (110e-6, "s per MoE decoder layer per step",
                             "router, top-k, permute and grouped GEMMs: fitted on single-stream "
                             "TPOT of gpt-oss-20b (H100/H200/B200: 4.5-6.7 ms) and "
                             "Qwen3-30B-A3B (A100: 9.6 ms); 110-150 us a layer"),
    "seq_overhead_s": (15e-6, "s per running sequence per step",
                       "per-request scheduling, input preparation and output processing; "
                       "fitted on high-concurrency ITL (gpt-oss-20b at ~1,000 running: 45 ms; "
                       "range 10-30 us)"),
    "allreduce_latency_s": (12e-6, "s per all-reduce over NVLink (x3 over PCIe)",
                            "NCCL / custom all-reduce small-message latency"),
}


def perf(name: str) -> float:
    return PERF[name][0]


@record(frozen=True)
class PerfModel:
    """Everything the step-time model needs about one deployment (per GPU)."""

    dense_weight_bytes: float  # weights read every step (non-expert)
    expert_weight_bytes: float  # routed-expert weights if all were read
    experts: int
    top_k: int
    moe_layers: int
    active_params: float  # parameters one token touches, per GPU
    kv_full_per_token: float  # KV bytes per token of full-attention layers (per GPU)
    kv_window_per_token: float  # per token of sliding layers (capped at the window)
    window: int
    state_per_seq: float  # Mamba/linear-attention state bytes per sequence
    attn_flops_per_token_ctx: float  # 4 x q_heads x head_dim x attention layers (per GPU)
    bandwidth: float  # bytes/s effective
    flops: float  # FLOP/s effective
    tp: int
    pp: int
    hidden: int
    layers: int
    nvlink: bool

    def weight_bytes_read(self, tokens: int) -> float:
        if not self.experts or not self.expert_weight_bytes:
            return self.dense_weight_bytes + self.expert_weight_bytes
        hit = 1 - (1 - self.top_k / self.experts) ** max(tokens, 1)
        return self.dense_weight_bytes + self.expert_weight_bytes * hit

    def step_time(self, decodes: int, ctx_mean: float, prefill_tokens: float = 0.0,
                  prefill_ctx: float = 0.0) -> float:
        """Seconds for one scheduler step with `decodes` decoding sequences of mean context
        `ctx_mean` and `prefill_tokens` prompt tokens (attending to ~`prefill_ctx`)."""
        tokens = decodes + prefill_tokens
        kv = decodes * (self.kv_full_per_token * ctx_mean
                        + self.kv_window_per_token * min(ctx_mean, self.window or ctx_mean)
                        + 2 * self.state_per_seq)
        mem = (self.weight_bytes_read(int(tokens)) + kv) / self.bandwidth
        flops = 2 * self.active_params * tokens + self.attn_flops_per_token_ctx * (
            decodes * ctx_mean + prefill_tokens * prefill_ctx)
        comp = flops / self.flops
        comm = 0.0
        if self.tp > 1:
            lat = perf("allreduce_latency_s") * (1 if self.nvlink else 3)
            comm = 2 * self.layers / self.pp * lat
        dense_layers = (self.layers - self.moe_layers) / self.pp
        floor = (perf("step_overhead_s") + dense_layers * perf("layer_overhead_s")
                 + self.moe_layers / self.pp * perf("moe_layer_overhead_s")
                 + decodes * perf("seq_overhead_s"))
        return max(mem, comp) + comm + floor


def build(result: SizeResult, gpu: Gpu) -> PerfModel:
    """The step-time model for a sized deployment."""
    arch = result.arch
    tp, pp = result.args.tensor_parallel_size, result.args.pipeline_parallel_size
    pc = count_params(arch)
    # bytes a decode step reads: the weights, not the rotary cache (one row per position)
    weights = float(result.budget.weights - result.rope_cache_bytes)
    total = float(pc.total) or 1.0
    expert_share = pc.experts / total
    expert_bytes = weights * expert_share
    moe_layers = sum(1 for x in pc.layers if x.expert)
    k = arch.experts_per_tok or 1
    active = (total - pc.experts + (pc.experts * k / arch.num_experts if arch.num_experts
                                     else 0)) / (tp * pp)
    if not arch.tie_word_embeddings:
        active -= pc.embed / (tp * pp)  # the embedding lookup reads one row, not a GEMM
    full, window_b, window, state, attn_flops = _layer_terms(result)
    tflops = gpu.tflops or {}
    dtype_key = "fp8" if _fp8_compute(result, gpu) else "bf16"
    peak = (tflops.get(dtype_key) or tflops.get("bf16") or tflops.get("fp16") or 100) * 1e12
    bw = (gpu.bandwidth_gbps or 1000) * 1e9
    return PerfModel(
        dense_weight_bytes=weights - expert_bytes, expert_weight_bytes=expert_bytes,
        experts=arch.num_experts, top_k=k, moe_layers=moe_layers, active_params=active,
        kv_full_per_token=full, kv_window_per_token=window_b, window=window,
        state_per_seq=state, attn_flops_per_token_ctx=attn_flops,
        bandwidth=bw * perf("bw_eff"), flops=peak * perf("flops_eff"), tp=tp, pp=pp,
        hidden=arch.hidden_size, layers=arch.num_layers,
        nvlink=gpu.interconnect_gbps > 0 and tp <= gpu.nvlink_domain)


_TERMS: dict[tuple, tuple[object, tuple[float, float, int, float, float]]] = {}


def _layer_terms(result: SizeResult) -> tuple[float, float, int, float, float]:
    """Per-GPU KV bytes per token (full, windowed), the window, state bytes per sequence and
    attention FLOPs per token of context; depends only on the model, TP/PP and dtypes."""
    arch = result.arch
    tp, pp = result.args.tensor_parallel_size, result.args.pipeline_parallel_size
    dts = _dts(result)
    key = (id(arch), tp, pp, dts)
    hit = _TERMS.get(key)
    if hit is not None and hit[0] is arch:  # the arch held here keeps its id unique
        return hit[1]
    full = window_b = state = attn_flops = 0.0
    window = 0
    for i, layer in enumerate(arch.layers):
        if isinstance(layer, AttnLayer):
            b = attn_bytes_per_token(layer, tp, dts.for_layer(i, layer), dts.rope_dim) / pp
            if layer.kind in ("sliding", "chunked"):
                window_b += b
                window = max(window, layer.window)
            else:
                full += b
            q_heads = max(1, arch.num_attention_heads // tp)
            hd = layer.head_size if layer.kind != "mla" else (
                int(arch.text_config.get("qk_nope_head_dim") or 128)
                + int(arch.text_config.get("qk_rope_head_dim") or 64))
            attn_flops += 4 * q_heads * hd / pp
            if layer.parallel_state is not None:
                state += state_bytes(layer.parallel_state, tp, dts) / pp
        elif isinstance(layer, StateLayer):
            state += state_bytes(layer, tp, dts) / pp
    if len(_TERMS) > 256:
        _TERMS.clear()
    terms = (full, window_b, window, state, attn_flops)
    _TERMS[key] = (arch, terms)
    return terms


def _dts(result: SizeResult):
    from kvplan.core.dtypes import canonical
    from kvplan.core.kvspec import KvDtypes

    if result.kv_dtypes is not None:
        return result.kv_dtypes
    ssm = result.arch.ssm_state_dtype or result.model_dtype
    return KvDtypes(kv=result.kv_dtype, conv=result.model_dtype,
                    ssm=canonical(ssm) if ssm != "auto" else result.model_dtype)


def _fp8_compute(result: SizeResult, gpu: Gpu) -> bool:
    """FP8 GEMMs run at the FP8 rate on sm89+ when the weights are FP8/FP4."""
    q = result.arch.quantization or {}
    method = str(result.args.quantization or q.get("quant_method", "")).lower()
    return cc_major(gpu.compute_capability) >= 9 and method in (
        "fp8", "modelopt", "nvfp4", "compressed-tensors", "fbgemm_fp8")


@record(frozen=True)
class Point:
    """Steady state at one batch depth."""

    batch_size: int
    output_tokens_per_s: float
    tpot_ms: float
    ttft_ms: float
    step_s: float


def mean_context(prompt_mean: float, out_mean: float, out_sq_mean: float) -> float:
    """Mean context of a running sequence: prompt + age, age size-biased by output length."""
    return prompt_mean + (out_sq_mean / (2 * out_mean) if out_mean else 0.0)


def operating_point(pm: PerfModel, batch: int, prompt_mean: float, out_mean: float,
                    out_sq_mean: float, mnbt: int, prefix_hit: float = 0.0) -> Point:
    """Throughput and latency with `batch` sequences running (closed loop, steady state).

    Sustaining `batch` sequences needs `p = batch x prompt / output` prefill tokens per step
    (each request prefills once). While p fits in one chunk, a fraction of steps carries a
    chunk and the rest are pure decode; beyond that every step carries p tokens; past the
    token budget (max_num_batched_tokens - batch) the batch cannot be refilled as fast as it
    drains, and output falls to what the budget can prefill. TPOT is the mean step; TTFT the
    chunked prefill of a mean prompt (queueing is added by the capacity planner).
    """
    ctx = mean_context(prompt_mean, out_mean, out_sq_mean)
    fresh = max(prompt_mean * (1 - prefix_hit), 1.0)
    budget = max(mnbt - batch, min(mnbt, 256))
    per_chunk = min(fresh, budget)
    n_chunks = max(1, math.ceil(fresh / budget))
    need = batch * fresh / max(out_mean, 1.0)  # prefill tokens per step
    t_dec = pm.step_time(batch, ctx)
    t_mix = pm.step_time(batch, ctx, per_chunk, prompt_mean / 2)
    starved = 1.0
    if need <= per_chunk:
        f = need / per_chunk
        step = (1 - f) * t_dec + f * t_mix
    else:
        step = pm.step_time(batch, ctx, min(need, budget), prompt_mean / 2)
        if need > budget:
            starved = budget / need  # requests are prefilled slower than they finish
    return Point(batch, batch / step * starved, step * 1000, n_chunks * t_mix * 1000, step)
