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
from bisect import bisect_left, bisect_right
from itertools import accumulate

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

    def step_parts(self, decodes: int, ctx_mean: float, prefill_tokens: float = 0.0,
                   prefill_ctx: float = 0.0) -> tuple[float, float, float]:
        """(memory time, compute time, fixed time) of a step; it takes
        max(memory, compute) + fixed (`step_time`)."""
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
        return mem, comp, comm + floor

    def step_time(self, decodes: int, ctx_mean: float, prefill_tokens: float = 0.0,
                  prefill_ctx: float = 0.0) -> float:
        """Seconds for one scheduler step with `decodes` decoding sequences of mean context
        `ctx_mean` and `prefill_tokens` prompt tokens (attending to ~`prefill_ctx`)."""
        mem, comp, fixed = self.step_parts(decodes, ctx_mean, prefill_tokens, prefill_ctx)
        return max(mem, comp) + fixed


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


STRATA = 8  # equal-probability strata a prompt-length distribution is kept as
TTFT_POINTS = 32  # prompt quantiles whose first-token times make the TTFT distribution
CLT_K = 32  # from this many prompts in one step on, their sum is taken as normal
TAIL = 1e-7  # Poisson mass left out of a step's admissions


@record(frozen=True)
class Traffic:
    """What the steady state needs about the requests. A prompt's prefill is its fresh
    (uncached) tokens; their causal attention spans the positions before each of them,
    (p^2 - cached^2) / 2 token-contexts in all (`attn`)."""

    prompt_mean: float  # whole prompt, cached part included (the decode context)
    out_mean: float
    out_sq_mean: float
    strata: tuple[float, ...]  # fresh tokens of STRATA equal-probability prompt strata
    grid: tuple[tuple[float, float], ...]  # (fresh tokens, attention) at TTFT_POINTS strata
    fresh_mean: float
    attn_per_token: float  # token-weighted attention context of a prefilled token


def _prefill_work(p: float, hit: float) -> tuple[float, float]:
    cached = min(p * hit, p - 1.0)  # vLLM computes at least the last prompt token
    return p - cached, (p * p - cached * cached) / 2


def _blocks(values: list, n: int) -> list:
    """Sorted, equally likely `values` as n block means (the mean is kept exactly)."""
    b = len(values) / n
    out = []
    for j in range(n):
        blk = values[round(j * b):round((j + 1) * b)] or values[-1:]
        if isinstance(blk[0], tuple):
            out.append(tuple(sum(v[i] for v in blk) / len(blk) for i in range(len(blk[0]))))
        else:
            out.append(sum(blk) / len(blk))
    return out


_TRAFFIC: dict[tuple, Traffic] = {}


def traffic(wl) -> Traffic:
    """The step-time model's view of a (clipped) `workload.Workload`."""
    key = (wl.prompt.points, wl.output.points, wl.prefix_hit)
    hit = _TRAFFIC.get(key)
    if hit is not None:
        return hit
    pts, o = wl.prompt.points, wl.output.points
    work = sorted(_prefill_work(float(p), wl.prefix_hit) for p in pts)
    fresh = sum(x for x, _ in work) / len(work)
    tr = Traffic(prompt_mean=sum(pts) / len(pts), out_mean=sum(o) / len(o),
                 out_sq_mean=sum(x * x for x in o) / len(o),
                 strata=tuple(_blocks([x for x, _ in work], min(STRATA, len(work)))),
                 grid=tuple(_blocks(work, min(TTFT_POINTS, len(work)))), fresh_mean=fresh,
                 attn_per_token=sum(a for _, a in work) / len(work) / fresh)
    if len(_TRAFFIC) > 64:
        _TRAFFIC.clear()
    _TRAFFIC[key] = tr
    return tr


def fixed_traffic(prompt: float, out_mean: float, out_sq_mean: float | None = None,
                  prefix_hit: float = 0.0) -> Traffic:
    """Every prompt `prompt` tokens long (hand-checkable cases and published benchmarks)."""
    x, a = _prefill_work(float(prompt), prefix_hit)
    return Traffic(prompt_mean=float(prompt), out_mean=out_mean,
                   out_sq_mean=out_sq_mean if out_sq_mean is not None else out_mean ** 2,
                   strata=(x,), grid=((x, a),), fresh_mean=x, attn_per_token=a / x)


_SUMS: dict[tuple, list[list[float]]] = {}


def _sum_of(strata: tuple[float, ...], k: int) -> list[float]:
    """The sum of k independent draws of `strata`, as STRATA equally likely values."""
    sums = _SUMS.get(strata)
    if sums is None:
        if len(_SUMS) > 512:
            _SUMS.clear()
        sums = _SUMS[strata] = [[0.0], list(strata)]
    if k >= CLT_K:
        n = len(strata)
        mx = sum(strata) / n
        sd = math.sqrt(k * sum((x - mx) ** 2 for x in strata) / n)
        return [max(0.0, k * mx + sd * z) for z in _Z]
    while len(sums) <= k:  # equally likely pairs: sorted, averaged in blocks of equal count
        sums.append(_blocks(sorted(x1 + x2 for x1 in sums[-1] for x2 in strata), STRATA))
    return sums[k]


def _normal_points() -> list[float]:
    from kvplan.core.workload import _norm_ppf

    return [_norm_ppf((j + 0.5) / STRATA) for j in range(STRATA)]


_Z = _normal_points()
_PIECES: dict[tuple, tuple[tuple[float, ...], float]] = {}


def _pieces(tr: Traffic, room: int) -> tuple[tuple[float, ...], float]:
    """The prefill chunks requests bring to steps with `room` prompt tokens: a prompt longer
    than the room arrives as consecutive chunks of `room` (V1 chunked prefill), each in a
    step of its own. (The chunks as STRATA equally likely values, chunks per request.)"""
    if tr.strata[-1] <= room:
        return tr.strata, 1.0
    key = (tr.strata, room)
    hit = _PIECES.get(key)
    if hit is None:
        chunks = []
        for x in tr.strata:
            full, rest = divmod(x, room)
            chunks += [float(room)] * int(full) + ([rest] if rest > 1e-9 else [])
        chunks.sort()
        per = len(chunks) / len(tr.strata)
        # the chunks, equally likely, as STRATA values (the strata are equally likely, so a
        # stratum's chunks each carry 1 / (STRATA x per) of the mass)
        hit = (tuple(_blocks(chunks, STRATA)) if len(chunks) >= STRATA else tuple(chunks), per)
        if len(_PIECES) > 4096:
            _PIECES.clear()
        _PIECES[key] = hit
    return hit


def _admissions(strata: tuple[float, ...], m: float) -> list[tuple[float, list[float]]]:
    """(probability, equally likely prompt-token loads) of one step, by how many chunks it
    admits. Each running sequence finishes at its own pace, so the completions that free
    slots -- and the admissions that refill them -- are the superposition of many
    independent renewal processes: Poisson, mean m a step (Palm-Khintchine)."""
    if m <= 0:
        return [(1.0, [0.0])]
    out = [(math.exp(-m), [0.0])]
    sd = math.sqrt(m)
    k = 1 if m < 50 else max(1, int(m - 8 * sd))
    pk = math.exp(-m + k * math.log(m) - math.lgamma(k + 1))
    left = 1.0 - out[0][0] if k == 1 else 1.0
    while left > TAIL and k <= m + 12 * sd + 12:
        out.append((pk, _sum_of(strata, k)))
        left -= pk
        k += 1
        pk *= m / k
    return out


@record(frozen=True)
class Point:
    """Steady state with `batch_size` as max_num_seqs and a queue that never empties.

    `running` is the batch the engine actually keeps: the cap, or fewer when the token budget
    cannot refill the batch as fast as it drains (`budget_starved`; `unstarved_batch` is the
    largest batch it keeps full). `decodes`, `ctx` and `room` (prompt tokens a step has
    room for) describe its steps for `first_token_times`."""

    batch_size: int
    output_tokens_per_s: float
    tpot_ms: float
    ttft_ms: float  # a mean prompt's first token at this batch, with no queue
    step_s: float
    running: float = 0.0
    requests_per_s: float = 0.0
    budget_starved: bool = False
    unstarved_batch: int = 0
    decodes: int = 0
    ctx: float = 0.0
    room: int = 0


def mean_context(prompt_mean: float, out_mean: float, out_sq_mean: float) -> float:
    """Mean context of a running sequence: prompt + age, age size-biased by output length."""
    return prompt_mean + (out_sq_mean / (2 * out_mean) if out_mean else 0.0)


def _prefill_steps(tr: Traffic, room: float) -> float:
    """Mean steps a request spends prefilling when a step has `room` prompt tokens for it."""
    g = tr.grid
    if g[-1][0] <= room:
        return 1.0
    i = bisect_right(g, (room, math.inf))  # the prompts longer than the room (grid sorted)
    return 1.0 + sum(math.ceil(x / room - 1e-9) - 1 for x, _ in g[i:]) / len(g)


def unstarved_batch(tr: Traffic, mnbt: int) -> float:
    """The largest running batch the token budget keeps full. vLLM V1 schedules the running
    requests' decodes first (a token each), then prefill chunks up to max_num_batched_tokens.
    A request costs its fresh prompt plus (output - 1) decode tokens of budget (the step that
    finishes its prefill emits the first token), so the budget starts at most
    r = mnbt / (fresh + output - 1) requests a step; each holds a slot for its prefill steps
    plus output - 1 decode steps: r x (prefill steps + output - 1) running sequences."""
    od = max(tr.out_mean - 1.0, 0.0)
    r = mnbt / (tr.fresh_mean + od)
    return r * (_prefill_steps(tr, max(mnbt - r * od, 1.0)) + od)


class _StepCurve:
    """Step time against the step's prompt tokens L (decodes and contexts fixed), as
    `PerfModel.step_time` gives it, piecewise linear between knots: max(memory, compute) +
    fixed is flat (dense weights) or concave (the MoE experts a step hits) while
    memory-bound and linear in L once compute-bound, so a knot at the crossover makes it
    exact for dense models, and knots at 1, 2, 4, ... tokens below it follow the experts."""

    def __init__(self, pm: PerfModel, d: int, ctx: float, actx: float, room: float):
        def parts(L: float) -> tuple[float, float, float]:
            return pm.step_parts(d, ctx, L, actx)

        m0, c0, _ = parts(0.0)
        m1, c1, _ = parts(room)
        if c0 >= m0:
            cross = 0.0
        elif c1 <= m1:
            cross = room
        elif not pm.expert_weight_bytes:  # dense: memory time does not change with L
            cross = (m0 - c0) * room / (c1 - c0)
        else:
            lo, hi = 0.0, room
            for _ in range(40):  # memory - compute falls with L
                mid = (lo + hi) / 2
                mm, cc, _ = parts(mid)
                lo, hi = (mid, hi) if cc < mm else (lo, mid)
                if hi - lo < 0.5:
                    break
            cross = (lo + hi) / 2
        knots = {0.0, cross, float(room)}
        if pm.expert_weight_bytes:  # the experts a step's tokens hit saturate within a few
            # hundred tokens: knots doubling from one token resolve that concave rise
            knots |= {float(2 ** i) for i in range(int(math.log2(max(cross, 1.0))) + 1)}
        xs = sorted(x for x in knots if x <= room)
        ts = [pm.step_time(d, ctx, x, actx) for x in xs]
        self.xs, self.ts, self.room = xs, ts, room
        self.slopes = [(ts[i + 1] - ts[i]) / (xs[i + 1] - xs[i]) for i in range(len(xs) - 1)]
        self.slope = self.slopes[-1] if self.slopes else 0.0

    def __call__(self, load: float) -> float:
        if load >= self.room:  # more than fits: the rest spills into later steps at this rate
            return self.ts[-1] + self.slope * (load - self.room)
        i = bisect_right(self.xs, load) - 1
        return self.ts[i] + self.slopes[i] * (load - self.xs[i])


def operating_point(pm: PerfModel, batch: int, tr: Traffic, mnbt: int) -> Point:
    """Throughput and latency of one engine with max_num_seqs `batch` and requests always
    waiting (closed loop).

    A slot cycles through k prefill steps and (output - 1) decode steps, so r = running /
    (k + output - 1) requests start a step and d = r (output - 1) sequences decode in it. A
    step's prompt tokens are those of the Poisson(r) requests admitted in it (as chunks of at
    most room = max_num_batched_tokens - d, `_pieces`), and the mean step averages
    `PerfModel.step_time` over that load: a step that admits nothing is pure decode
    (memory-bound), one that admits several is compute-bound. A load past the room spills
    into later steps at the full step's marginal cost (an upper bound: a spill into a
    memory-bound step costs less). A step emits r x output tokens. TPOT is the mean step a
    request decodes in: the pure-decode step plus the other running - 1 requests' share of
    the prefill load (its own prefill comes before its first token).
    Past `unstarved_batch` the budget cannot refill the batch as fast as it drains, and the
    engine runs that many, whatever the cap.
    """
    od = max(tr.out_mean - 1.0, 0.0)
    n_star = unstarved_batch(tr, mnbt)
    starved = batch > n_star
    running = min(float(max(batch, 1)), max(n_star, 1.0))
    k = 1.0
    for _ in range(8):  # prefill steps and decodes depend on each other (monotone, 2-3 turns)
        room = max(mnbt - running * od / (k + od), 1.0)
        k2 = _prefill_steps(tr, room)
        if k2 == k:
            break
        k = k2
    r = running / (k + od)  # requests started (and finished) per step
    d = round(r * od)
    room = max(mnbt - d, 1)
    ctx = mean_context(tr.prompt_mean, tr.out_mean, tr.out_sq_mean)
    curve = _StepCurve(pm, d, ctx, tr.attn_per_token, room)
    pieces, per_request = _pieces(tr, room)
    e0 = e1 = e2 = 0.0
    xs, ts, slopes, top, spill = curve.xs, curve.ts, curve.slopes, curve.room, curve.slope
    for pk, loads in _admissions(pieces, r * per_request):
        w = pk / len(loads)
        for load in loads:  # curve(load), inlined: the planner's hot spot
            if load >= top:
                t = ts[-1] + spill * (load - top)
            else:
                i = bisect_right(xs, load) - 1
                t = ts[i] + slopes[i] * (load - xs[i])
            e0 += w
            e1 += w * t
            e2 += w * t * t
    step = e1 / e0
    e2 /= e0
    residual = e2 / (2 * step)  # an arrival at a random time waits out the step in progress
    first = residual + _own_prefill(curve, tr.fresh_mean, min(r * tr.fresh_mean, room))
    # a request's own prefill steps lie before its first token: its decodes ride with the
    # other running - 1 requests' prefills only (pure decode steps at batch 1; review 28)
    tpot = step - (step - curve(0.0)) / running
    return Point(batch_size=batch, output_tokens_per_s=r * tr.out_mean / step,
                 tpot_ms=tpot * 1000, ttft_ms=first * 1000, step_s=step, running=running,
                 requests_per_s=r / step, budget_starved=starved, unstarved_batch=int(n_star),
                 decodes=d, ctx=ctx, room=room)


def _own_prefill(curve: _StepCurve, fresh: float, co: float) -> float:
    """A prompt's prefill steps: chunks of at most the room, each riding with `co` other
    prompt tokens (and the decodes, in the curve)."""
    t, done = 0.0, 0.0
    while done < fresh - 1e-9:
        chunk = min(fresh - done, curve.room)
        t += curve(min(chunk + co, curve.room))
        done += chunk
    return t


def _weighted_blocks(pts: list[tuple[float, float]], n: int) -> list[float]:
    """Sorted (value, weight) pairs as n equally likely values: the conditional means of n
    slices of equal weight (prefix sums; a pair straddling a cut is split)."""
    cw = list(accumulate(w for _, w in pts))
    cx = list(accumulate(x * w for x, w in pts))
    total = cw[-1]
    size = total / n
    out, last = [], 0.0
    for j in range(1, n + 1):
        m = total * j / n
        i = bisect_left(cw, m)
        if i >= len(cw):
            cur = cx[-1]
        else:
            cur = (cx[i - 1] if i else 0.0) + (m - (cw[i - 1] if i else 0.0)) * pts[i][0]
        out.append((cur - last) / size)
        last = cur
    return out


BUDGET_POINTS = 16  # equally likely values the wait for the token budget is kept as
_RESIDUAL: dict[tuple, tuple[float, ...]] = {}


def _residual(tr: Traffic) -> tuple[float, ...]:
    """The prompt tokens still ahead of an arrival in the prompt being prefilled: the
    equilibrium residual of the fresh prompt length (density P(X > x) / E[X]: a prompt is
    found with probability ~ its length, at a uniform point of it), as STRATA values."""
    hit = _RESIDUAL.get(tr.grid)
    if hit is None:
        tot = sum(x for x, _ in tr.grid)
        pts = sorted((u * x, x / tot / 4) for x, _ in tr.grid for u in (.125, .375, .625, .875))
        hit = tuple(_weighted_blocks(pts, STRATA))
        if len(_RESIDUAL) > 64:
            _RESIDUAL.clear()
        _RESIDUAL[tr.grid] = hit
    return hit


def _budget_wait(tr: Traffic, token_s: float, lam: float) -> tuple[float, list[float]] | None:
    """The wait for the token budget at `lam` requests/s: (its probability, the wait then as
    BUDGET_POINTS equally likely seconds); None when the budget cannot keep up. vLLM
    prefills waiting prompts first come, first served, up to the room a step: one server of
    prompt tokens, `token_s` a token when it is busy. With Poisson arrivals that is M/G/1,
    whose wait is exactly a geometric number N (P(N = n) = (1 - rho) rho^n, rho = lam x mean
    prefill) of independent residual prefills (Benes' formula)."""
    rho = lam * tr.fresh_mean * token_s
    if rho >= 1:
        return None
    if rho <= 0:
        return 0.0, [0.0]
    res = _residual(tr)
    pts: list[tuple[float, float]] = []
    pn, n = 1 - rho, 1
    while True:
        pn *= rho
        vals = _sum_of(res, n)
        pts += [(v * token_s, pn / len(vals)) for v in vals]
        if pn < TAIL * rho:
            break
        n += 1
    pts.sort()
    return rho, _weighted_blocks(pts, BUDGET_POINTS)


def first_token_times(pm: PerfModel, tr: Traffic, pt: Point, lam: float) -> list[float] | None:
    """Seconds from a request's arrival at a free slot to its first token at `lam`
    requests/s, with the steps of `pt` (the batch that rate keeps running), as TTFT_POINTS
    equally likely values; None when the token budget cannot keep up.

    It lands in a step in progress -- of the steps `pt` runs, one of length t with
    probability ~ t x P(t) (as 4 strata) -- at a uniform point (quartile midpoints) and waits
    the rest. The prompts queued for the budget ahead of it take the M/G/1 wait
    (`_budget_wait`). Its own chunks then run, the first in a step that also prefills the
    prompts that arrived during the one it waited for (Poisson, lam x t of them, as 4
    strata), each riding with the decodes."""
    curve = _StepCurve(pm, pt.decodes, pt.ctx, tr.attn_per_token, pt.room)
    room = curve.room
    wait = _budget_wait(tr, curve(room) / room, lam)
    if wait is None:
        return None
    r = pt.requests_per_s * pt.step_s  # requests a step at `pt`
    pieces, per_request = _pieces(tr, room)
    steps = sorted((curve(x), pk / len(loads) * curve(x))
                   for pk, loads in _admissions(pieces, r * per_request) for x in loads)
    others = min(r * tr.fresh_mean, room)
    vals: list[tuple[float, float]] = []
    for t_cur in _weighted_blocks(steps, 4):
        arriving = _weighted_blocks(sorted((x, pk / len(loads)) for pk, loads in _admissions(
            tr.strata, lam * t_cur) for x in loads), 4)
        for co in arriving:
            co = min(co, room)
            for x, _ in tr.grid:
                own = curve(min(x + co, room))
                if x > room:  # the later chunks ride with the mean prefill of a step
                    own += _own_prefill(curve, x - room, others)
                vals += [(0.25 * t_cur + own, 1.0), (0.75 * t_cur + own, 1.0)]
    vals.sort()
    own_times = _weighted_blocks(vals, TTFT_POINTS)
    p, waits = wait
    if p <= 0:
        return own_times
    n = len(own_times)
    both = sorted([(v, (1 - p) / n) for v in own_times]
                  + [(v + w, p / (n * len(waits))) for v in own_times for w in waits])
    return _weighted_blocks(both, TTFT_POINTS)
