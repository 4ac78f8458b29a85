"""Deployment plans: safe max-num-seqs, replicas, admission limits and cost.

For one candidate (GPU, tensor parallelism, KV dtype) the planner sizes the KV pool
(`sizing.size`), samples the running batch's KV demand (`capacity`), takes the largest
max-num-seqs whose overflow (preemption) risk stays below the target and whose TPOT meets
the SLO, predicts throughput at that depth (`perf`), and sizes replicas and the admission
queue for the arrival rate with an M/M/c model (`queueing`). Candidates that meet every SLO
are ranked by cost.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import field, replace

from kvplan.core import capacity, perf, queueing
from kvplan.core.arch import CHUNKED, SLIDING, normalize
from kvplan.core.mm import encoder_profile
from kvplan.core.record import record
from kvplan.core.sizing import (
    EngineArgs,
    Gpu,
    Model,
    SizeResult,
    batch_defaults,
    mm_pixel_bytes,
    mm_pixels,
    size,
)
from kvplan.core.specdec import parallel_draft_slots
from kvplan.core.workload import Unserved, Workload
from kvplan.errors import BadInput, NotPlanned, RefusedEverywhere
from kvplan.units import GiB


@record
class Targets:
    """What the operator asks for."""

    rate: float | None = None  # sustained req/s
    peak_rate: float | None = None
    ttft_p95_s: float | None = None
    tpot_ms: float | None = None
    preempt_risk: float = 0.01
    policy: str = "risk"  # 'risk' | 'guaranteed'
    target_utilization: float = 0.8
    redundancy: int = 0  # extra replicas (N+1 = 1)


def served_targets(t: Targets, refused: float) -> Targets:
    """The targets for the requests vLLM serves: the rate and peak less the `refused` share
    (prompts of max_model_len or more get HTTP 400 and cost no engine time)."""
    if not refused:
        return t
    return replace(t, rate=t.rate * (1 - refused) if t.rate else None,
                   peak_rate=t.peak_rate * (1 - refused) if t.peak_rate else None)


@record
class Plan:
    result: SizeResult
    gpu: Gpu
    max_num_seqs: int
    max_model_len: int
    replicas: int
    per_replica_tokens_per_s: float
    tpot_p50_ms: float
    ttft_p95_s: float
    queue_depth_limit: int
    cost_per_hour: float | None
    cost_per_million: float | None
    point: perf.Point
    safe_seqs: int
    kv_ceiling: int
    guaranteed_seqs: int
    users_per_gpu: float | None = None
    daily_output_tokens: float = 0.0
    utilization: float = 0.0
    notes: list[str] = field(default_factory=list)
    feasible: bool = True
    why_not: str = ""
    per_replica_rps: float = 0.0
    budget_limited: bool = False  # the token budget, not the KV pool, bounds max_num_seqs
    tpot_at_rate_ms: float | None = None  # TPOT at the planned rate's batch (`point_at_rate`)
    running_at_rate: float | None = None  # that batch; None without a rate
    rejected_share: float = 0.0  # requests vLLM refuses for their length at max_model_len
    served_rate: float | None = None  # the rate planned (with `served`: what the length serves)
    served_peak_rate: float | None = None
    # at the peak rate, over the replicas without the --n-plus-one spare: TTFT p95 (inf when
    # a replica cannot keep up) and the utilisation; None without a peak
    peak_ttft_p95_s: float | None = None
    peak_utilization: float | None = None
    length_capped_from: int = 0  # the max_model_len asked for, when `stall_cap` lowered it

    @property
    def gpus_per_replica(self) -> int:
        a = self.result.args
        return a.tensor_parallel_size * a.pipeline_parallel_size

    @property
    def total_gpus(self) -> int:
        return self.gpus_per_replica * self.replicas


MAX_REPLICAS = 1_000_000  # beyond any fleet; the queueing maths overflows well above it


@record(frozen=True)
class Fleet:
    """Replicas for a rate, and what one replica serves."""

    replicas: int
    per_replica_rps: float
    rate: float | None
    wait95_s: float
    service_s: float
    ttft95_s: float = 0.0  # first token p95: the waits and the prefill, convolved
    prefill95_s: float = 0.0  # the prefill part alone (no queue), at the planned load
    peak_ttft95_s: float | None = None  # the same at the peak rate (inf: unstable)
    peak_utilization: float | None = None  # the peak rate / what the replicas serve


Latency = Callable[[float], "list[float] | None"]


def point_at_rate(lam: float, pt: perf.Point,
                  point: Callable[[int], perf.Point]) -> perf.Point:
    """The operating point a replica keeps at `lam` requests/s: by Little's law its batch
    b = lam x the service time at b, a fixed point reached from the cap's (`pt`, never
    above it); `point(b)` is the operating point at b. A mean-field estimate: the batch
    fluctuates around it."""
    b = max(1, min(int(pt.running), math.ceil(lam * pt.running / pt.requests_per_s)))
    p = point(b)
    for _ in range(8):  # b -> lam x s(b) is increasing: the iterates fall to it
        nb = max(1, min(b, math.ceil(lam * p.running / p.requests_per_s)))
        if nb >= b - 1:
            break
        b, p = nb, point(nb)
    return p


def latency_at(pm: perf.PerfModel, tr: perf.Traffic, pt: perf.Point,
               point: Callable[[int], perf.Point]) -> Latency:
    """lam (requests/s a replica gets) -> its first-token times with a free slot
    (`perf.first_token_times`), at the batch that share keeps running (`point_at_rate`)."""
    memo: dict[float, list[float] | None] = {}

    def latency(lam: float) -> list[float] | None:
        if lam not in memo:
            memo[lam] = perf.first_token_times(pm, tr, point_at_rate(lam, pt, point), lam)
        return memo[lam]

    return latency


def ttft_quantile(latency: Latency, rate: float, replicas: int, slots: int, service_s: float,
                  burstiness: float = 1.0, q: float = 0.95) -> float:
    """TTFT q-quantile at `rate` requests/s spread over `replicas` of `slots` slots: the
    M/M/c wait for one of a replica's slots at its share of the rate (c = slots: each vLLM
    replica queues its own requests, whatever the load balancer in front sends it;
    `queueing.sojourn_quantile`) convolved with a request's own time to its first token at
    that share (`latency`: the step in progress, the prompts queued ahead for the token
    budget, its own chunks and what rides with them). inf when a replica's budget cannot
    keep up."""
    lam = rate / replicas if rate else 0.0
    delays = latency(lam)
    if delays is None:
        return math.inf
    return queueing.sojourn_quantile(delays, slots, lam, service_s, q, burstiness)


def size_fleet(pt: perf.Point, n: int, out_mean: float, wl: Workload, t: Targets,
               latency: Latency | None = None) -> Fleet:
    """Smallest replica count that keeps utilisation under the target at the rate, is stable
    at the peak rate and keeps TTFT p95 within the SLO; + redundancy. One replica serves the
    operating point's requests/s (`pt.requests_per_s`: its output tokens/s / mean output,
    after any token-budget starvation) and keeps `pt.running` sequences, each for
    service_s = running / requests_per_s (Little's law): those are the M/M/c servers. TTFT
    p95 is `ttft_quantile`'s (with no `latency`, the mean prompt's prefill at the cap stands
    for every request). With `users`, the rate is users / (think time + service time). `n`
    and `out_mean` are kept for callers."""
    rps = pt.requests_per_s
    slots = max(1, int(pt.running or n))
    service_s = slots / rps
    lat: Latency = latency or (lambda lam: [pt.ttft_ms / 1000])
    rate = t.rate
    if wl.users:
        rate = wl.users / (wl.think_time_s + service_s)
    alone = ttft_quantile(lat, 0.0, 1, slots, service_s)  # an idle replica
    if not rate:
        return Fleet(1, rps, rate, 0.0, service_s, alone, alone)
    need = max(rate / (rps * t.target_utilization), (t.peak_rate or 0) / rps)
    if not need <= MAX_REPLICAS:  # inf too: a trace whose arrivals span 1e-323 s
        raise BadInput(f"{max(rate, t.peak_rate or 0):g} requests/s needs more than "
                       f"{MAX_REPLICAS:,} replicas of {rps:.3g} requests/s each",
                       hint="the rate is in requests per second; check its units")
    replicas = max(1, math.ceil(rate / (rps * t.target_utilization)))
    if t.peak_rate:
        replicas = max(replicas, math.ceil(t.peak_rate / rps))

    def ttft(k: int) -> float:
        return ttft_quantile(lat, rate, k, slots, service_s, wl.burstiness)

    ttft95 = ttft(replicas)
    if t.ttft_p95_s is not None and ttft95 > t.ttft_p95_s and alone <= t.ttft_p95_s:
        # more replicas lower every term (fewer requests each): the fewest that meet it
        # (none do when an idle replica misses it: the plan is then infeasible)
        lo, hi = replicas, replicas + 1
        while ttft(hi) > t.ttft_p95_s and hi < MAX_REPLICAS:
            lo, hi = hi, min(MAX_REPLICAS, 2 * hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if ttft(mid) <= t.ttft_p95_s else (mid, hi)
        replicas = hi
        ttft95 = ttft(replicas)
    wait95 = queueing.wait_quantile(slots, rate / replicas, service_s, 0.95, wl.burstiness)
    own = lat(rate / replicas)  # the first token with a free slot, at a replica's share
    prefill95 = queueing.sojourn_quantile(own, 1, 0.0, 1.0) if own else math.inf
    peak_ttft = peak_util = None
    if t.peak_rate:  # the peak sizes for stability (utilisation <= 1), not for latency
        peak_ttft = ttft_quantile(lat, t.peak_rate, replicas, slots, service_s,
                                  wl.burstiness)
        peak_util = t.peak_rate / (replicas * rps)
    return Fleet(replicas + t.redundancy, rps, rate, wait95, service_s, ttft95, prefill95,
                 peak_ttft, peak_util)


def plan_one(model: Model, gpu: Gpu, args: EngineArgs, version: str | None, wl: Workload,
             t: Targets, *, resize_pool: bool = True, raise_budget: bool = True,
             served: bool = False, stall_cap: bool = False) -> Plan:
    """The best plan for one candidate deployment. `resize_pool`: size the KV pool again at
    the max_num_seqs the plan emits (its cost and ranking do not depend on it, so `search`
    does this for the plans it returns only). `raise_budget`: when the token budget
    (max_num_batched_tokens, not set in `args`) cannot refill the batch the KV pool holds,
    also plan with it doubled, sized at that budget, while that serves more, and keep the
    plan with the fewest replicas (with no rate: the most requests/s per replica); a tie
    keeps the smaller budget (shorter steps). `served`: plan the rate (and peak) less the
    share vLLM refuses at the candidate's max_model_len. `stall_cap`: keep max_model_len
    within vLLM 0.19's whole-prompt admission limit (`_plan_at`)."""
    how = dict(served=served, stall_cap=stall_cap)
    best = _plan_at(model, gpu, args, version, wl, t, resize_pool, **how)
    if not (raise_budget and args.max_num_batched_tokens is None and best.budget_limited):
        return best
    rated = bool(t.rate or wl.users)

    def better(q: Plan, p: Plan) -> bool:
        if not q.feasible:
            return False
        if not p.feasible:
            return True
        if rated:
            return q.replicas < p.replicas
        return q.per_replica_rps > p.per_replica_rps

    prev, mnbt = best, best.result.max_num_batched_tokens
    while prev.budget_limited:  # each doubling lets the budget refill about twice the batch
        mnbt *= 2
        try:
            q = _plan_at(model, gpu, replace(args, max_num_batched_tokens=mnbt), version, wl,
                         t, resize_pool, **how)
        except BadInput:  # the larger profile leaves no room: stop at the last that fit
            break
        if better(q, best):
            best = q
        if not q.feasible or q.per_replica_rps <= prev.per_replica_rps:
            break  # compute-bound: a larger budget only lengthens the steps
        prev = q
    return best


def refuse_pooling(r: SizeResult) -> None:
    """Bad input for every candidate: vLLM runs the model with its pooling runner
    (`SizeResult.pooling`), where a request is one prefill and nothing decodes, while the
    planner, the throughput model and the simulator model text generation."""
    if r.pooling:
        raise NotPlanned(f"{r.model} runs on vLLM's pooling runner (embedding, scoring: one "
                         "prefill per request, no output tokens): kvplan's planner, throughput "
                         "model and simulator model text generation, so there is nothing to "
                         "plan", hint="`kvplan size` gives its KV pool, `kvplan check` its "
                         "flags")


def stall_note(r: SizeResult, asked: int, limit: int) -> str:
    """Why a plan's max_model_len is below the one asked for (`_plan_at`)."""
    local = sum(g.spec.kind in (SLIDING, CHUNKED) for g in r.groups)
    return (f"--max-model-len {r.max_model_len} (not {asked:,}): vLLM {r.version.text}'s "
            f"whole-prompt admission check charges each of the {local} sliding-window groups "
            f"the whole prompt, not its window (`KVCacheManager.can_fit_full_sequence`), so a "
            f"prompt over {limit:,} tokens never fits the pool and the scheduler stops the "
            f"waiting queue at it for good; at {r.max_model_len} vLLM answers such prompts "
            f"HTTP 400 instead (vLLM 0.20+ charges only the window)")


def _plan_at(model: Model, gpu: Gpu, args: EngineArgs, version: str | None, wl: Workload,
             t: Targets, resize_pool: bool, *, served: bool = False,
             stall_cap: bool = False) -> Plan:
    """`_plan_len`; with `stall_cap`, planned again at max_model_len = the whole-prompt
    admission limit + 1 while the plan's pool has one (`SizeResult.whole_prompt_limit`,
    vLLM 0.19.x sliding-window models: a longer prompt is accepted and never admitted)."""
    p = _plan_len(model, gpu, args, version, wl, t, resize_pool, served)
    asked, limit = p.max_model_len, p.result.whole_prompt_limit if stall_cap else None
    for _ in range(3):  # a shorter length leaves the pool as large or larger: one step
        if limit is None:
            break
        p = _plan_len(model, gpu, replace(args, max_model_len=limit + 1), version, wl, t,
                      resize_pool, served)
        limit = p.result.whole_prompt_limit
    if p.max_model_len < asked:
        p.notes.insert(0, stall_note(p.result, asked, p.max_model_len - 1))
        p.length_capped_from = asked
    return p


def _prefix_cache(model: Model, gpu: Gpu, args: EngineArgs, version: str | None,
                  wl: Workload, r: SizeResult) -> tuple[SizeResult, EngineArgs, Workload, str]:
    """A workload with a prefix hit on a release that runs without prefix caching by default
    (`core/prefixcache.py`: V0, hybrids before 0.28): planned with --enable-prefix-caching
    where the flag turns it on, else with the hit not counted; and the note that says so."""
    from kvplan.core.prefixcache import prefix_caching

    default_on, why = prefix_caching(replace(r, args=replace(r.args, enable_prefix_caching=None)))
    if default_on:
        return r, args, wl, ""
    if args.enable_prefix_caching is None:
        r2 = size(model, gpu, replace(args, enable_prefix_caching=True), version, hints=False)
        if r2.fits:
            r, args = r2, replace(args, enable_prefix_caching=True)
    if args.enable_prefix_caching and prefix_caching(r)[0]:
        return r, args, wl, (f"--enable-prefix-caching is in the command: the workload's "
                             f"prefix hit {wl.prefix_hit:g} needs it, and {why}")
    why = prefix_caching(r)[1] or why
    return r, args, replace(wl, prefix_hit=0.0), (
        f"the workload's prefix hit {wl.prefix_hit:g} is not counted: prefix caching is off "
        f"({why})")


def _plan_len(model: Model, gpu: Gpu, args: EngineArgs, version: str | None, wl: Workload,
              t: Targets, resize_pool: bool, served: bool) -> Plan:
    r = size(model, gpu, args, version, hints=False)
    unset = args.max_num_seqs is None  # the plan emits its own --max-num-seqs
    limit = r.max_num_seqs_limit  # vLLM 0.20+: Mamba models need a block per decoding seq
    if not r.fits and limit and r.max_num_seqs > limit:  # size at a max_num_seqs that starts
        # (the safe cap below stays under it: a request holds a block in every group)
        args = replace(args, max_num_seqs=limit)
        r = size(model, gpu, args, version, hints=False)
    if not r.fits:
        raise BadInput(f"{gpu.id} TP{args.tensor_parallel_size}: {r.failure}")
    refuse_pooling(r)
    if args.max_model_len == -1:  # the auto-fitted length the workload is clipped at: kept
        args = replace(args, max_model_len=r.max_model_len)  # when the cap re-sizes the pool
    share = wl.rejected_share(r.max_model_len)
    if served:  # the refused requests cost no engine time
        wl.served_share(r.max_model_len)  # `Unserved` when vLLM refuses nearly all
        t = served_targets(t, share)
    wl = wl.clip(r.max_model_len)
    cache_note = ""
    if wl.prefix_hit:  # the declared hit counts only where the release caches prefixes
        r, args, wl, cache_note = _prefix_cache(model, gpu, args, version, wl, r)
    d = capacity.demand(r.groups, wl, r.max_model_len)
    usable = r.admission_blocks
    guaranteed = capacity.guaranteed_max_num_seqs(d, usable)
    safe = capacity.safe_max_num_seqs(d, usable, t.preempt_risk)
    ceiling = capacity.mean_ceiling(d, usable)
    n = kv_n = guaranteed if t.policy == "guaranteed" else safe
    capacity_bound = True  # n is the policy's count, not cut by a scheduler limit or the SLO
    notes: list[str] = [cache_note] if cache_note else []
    if gpu.memory_note:  # the plan ranks this GPU on an inferred total
        notes.append(f"{gpu.id}: {gpu.memory_note}; --gpu-memory SIZE gives the one it reports")
    if r.args.speculative:  # capacity yes, speed no
        notes.append("speculative decoding: its draft layers and weights are in the KV figures; "
                     "the throughput and latency shown are without it (no acceptance model)")
    if r.args.enable_lora:
        notes.append("LoRA: the adapter slots are in the weights; the throughput shown is "
                     "without the LoRA kernels' cost")
    pm = perf.build(r, gpu)
    tr = perf.traffic(wl)
    o_mean = tr.out_mean
    mnbt = r.max_num_batched_tokens

    def point(b: int) -> perf.Point:
        return perf.operating_point(pm, b, tr, mnbt)

    if n > mnbt:  # `SchedulerConfig`: max_num_batched_tokens must be >= max_num_seqs
        notes.append(f"max_num_seqs {mnbt} (not {n}): vLLM needs max_num_batched_tokens "
                     f"({mnbt}) >= max_num_seqs; raise --max-num-batched-tokens to run more")
        n, capacity_bound = mnbt, False
    slots = parallel_draft_slots(r.args.speculative, r.version) if r.args.speculative else 0
    if slots and n * slots >= mnbt:  # 0.25-0.27 DFlash / DSpark: k - 1 slots per request
        cap = (mnbt - 1) // slots
        notes.append(f"max_num_seqs {cap} (not {n}): {r.args.speculative.method}'s {slots} "
                     f"draft slots per request must leave scheduled tokens in "
                     f"max_num_batched_tokens ({mnbt}); raise it to run more")
        n, capacity_bound = cap, False
    # the token budget refills at most this many running sequences (perf.unstarved_batch):
    # a larger cap only queues the rest behind the budget, on a pool sized for more
    refill = max(1, int(perf.unstarved_batch(tr, mnbt)))
    budget_limited = False
    d_mnbt = batch_defaults(gpu, r.version, r.args.usage, args.tensor_parallel_size
                            * args.pipeline_parallel_size)[0]
    if mnbt > d_mnbt and (short := int(perf.unstarved_batch(tr, d_mnbt))) < kv_n:
        notes.append(f"--max-num-batched-tokens {mnbt}: with vLLM's default {d_mnbt} the "
                     f"decodes leave prefill too few tokens to refill more than about {short} "
                     f"running sequences ({kv_n} fit the KV pool); the larger budget's "
                     "activation profile is in the pool shown")
    if n > refill:
        notes.append(f"max_num_seqs {refill} (not {n}): with max_num_batched_tokens {mnbt} "
                     f"the decodes of a larger batch leave too few tokens to prefill the "
                     f"requests that replace the finished ones, so no more than about "
                     f"{refill} run")
        n, capacity_bound, budget_limited = refill, False, True
    feasible, why = True, ""
    if n < 1:
        feasible, why = False, ("not one sequence fits with the required safety"
                                f" ({t.policy} policy)")
        n = 1
    if t.tpot_ms is not None:
        if point(1).tpot_ms > t.tpot_ms:
            feasible = False
            why = (f"TPOT {t.tpot_ms:g} ms is below the {point(1).tpot_ms:.1f} ms a single "
                   f"sequence gets on {gpu.id} TP{args.tensor_parallel_size}")
        elif point(n).tpot_ms > t.tpot_ms:
            lo, hi = 1, n
            while lo < hi:  # largest batch whose TPOT meets the SLO
                mid = (lo + hi + 1) // 2
                if point(mid).tpot_ms <= t.tpot_ms:
                    lo = mid
                else:
                    hi = mid - 1
            if lo < n:
                notes.append(f"max_num_seqs {lo} (not {n}) keeps TPOT within "
                             f"{t.tpot_ms:g} ms")
                capacity_bound, budget_limited = False, False
            n = lo
    if resize_pool and unset and n != r.max_num_seqs:
        # the emitted --max-num-seqs sets vLLM's profile (the dummy sampler runs n requests)
        # and its CUDA-graph grid (up to 2n): the cap must hold on the pool it leaves itself
        r0 = r

        def sized(c: int) -> SizeResult:
            return size(model, gpu, replace(args, max_num_seqs=c), version, hints=False)

        fit = None
        if n > r0.max_num_seqs:  # above the default: a larger profile, a smaller pool
            fit = _fixed_point(lambda c: r0 if c == r0.max_num_seqs else sized(c),
                               r0.max_num_seqs, n, wl, t)
        else:  # below it the pool grows: raise the cap while it holds on its own pool
            r2 = sized(n)
            if r2.fits and r2.budget.available_kv > r.budget.available_kv:
                top = n  # a scheduler limit, the budget or the SLO bound n: not raised past
                if capacity_bound:
                    top = max(n, min(mnbt, r0.max_num_seqs, refill,
                                     (mnbt - 1) // slots if slots else mnbt))
                    if t.tpot_ms is not None and point(top).tpot_ms > t.tpot_ms:
                        lo, hi = n, top  # n meets the SLO: the largest batch that does
                        while lo < hi:
                            mid = (lo + hi + 1) // 2
                            lo, hi = ((mid, hi) if point(mid).tpot_ms <= t.tpot_ms
                                      else (lo, mid - 1))
                        top = lo
                fit = _fixed_point(lambda c: r2 if c == n else sized(c), n, top, wl, t)
        if fit is not None:
            n, r, guaranteed, safe, ceiling = fit
        gain = r.budget.available_kv - r0.budget.available_kv
        if gain >= GiB // 4:
            notes.append(f"with --max-num-seqs {n} vLLM profiles {n} sequences instead of "
                         f"{r0.max_num_seqs} (and captures CUDA graphs only up to its "
                         f"grid): {gain / GiB:.1f} GiB more KV per GPU than at the default")
        if budget_limited and n < refill:  # its own pool holds fewer: the pool binds again
            budget_limited = False
    cache: dict[int, perf.Point] = {}

    def at(b: int) -> perf.Point:
        if b not in cache:
            cache[b] = point(b)
        return cache[b]

    pt = at(n)
    # the first-token times cost ~5 ms a rate: the search ranks without them unless a TTFT
    # SLO needs them (its plans are planned again, with them, before they are shown)
    latency = latency_at(pm, tr, pt, at) if resize_pool or t.ttft_p95_s is not None else None
    fleet = size_fleet(pt, n, o_mean, wl, t, latency)
    replicas, per_replica_rps, rate = fleet.replicas, fleet.per_replica_rps, fleet.rate
    service_s = fleet.service_s
    if t.ttft_p95_s is not None and fleet.ttft95_s > t.ttft_p95_s:
        idle = ttft_quantile(latency or (lambda lam: [pt.ttft_ms / 1000]), 0.0, 1, 1, service_s)
        feasible = False
        why = why or (f"TTFT p95 {t.ttft_p95_s:g} s is below the {idle:.2f} s that 95 % of "
                      f"requests take to their first token even on an idle replica of "
                      f"{gpu.id} TP{args.tensor_parallel_size} (their prefill)")
    budget = (t.ttft_p95_s - fleet.prefill95_s) if t.ttft_p95_s else (
        queueing.QUEUE_SERVICE_TIMES * service_s)
    queue_limit = max(1, int(min(budget * per_replica_rps, 1e9)))  # a 1e308 s SLO: no limit
    gpus_per_replica = args.tensor_parallel_size * args.pipeline_parallel_size
    price = gpu.price_per_hour
    cost = price * gpus_per_replica * replicas if price else None
    served_tps = (rate * o_mean) if rate else (pt.output_tokens_per_s * t.target_utilization)
    per_m = cost / (served_tps * 3600 / 1e6) if cost and served_tps else None
    util = (rate / (replicas * per_replica_rps)) if rate else t.target_utilization
    loaded = point_at_rate(rate / replicas, pt, at) if rate else None
    users_gpu = None
    if wl.users:
        users_gpu = wl.users / (replicas * gpus_per_replica)
    return Plan(result=r, gpu=gpu, max_num_seqs=n, max_model_len=r.max_model_len,
                replicas=replicas, per_replica_tokens_per_s=pt.output_tokens_per_s,
                tpot_p50_ms=pt.tpot_ms, ttft_p95_s=fleet.ttft95_s,
                queue_depth_limit=queue_limit, cost_per_hour=cost, cost_per_million=per_m,
                point=pt, safe_seqs=safe, kv_ceiling=ceiling, guaranteed_seqs=guaranteed,
                users_per_gpu=users_gpu,
                daily_output_tokens=pt.output_tokens_per_s * replicas * 86400 * min(util, 1),
                utilization=util, notes=notes, feasible=feasible, why_not=why,
                per_replica_rps=per_replica_rps, budget_limited=budget_limited,
                tpot_at_rate_ms=loaded.tpot_ms if loaded else None,
                running_at_rate=loaded.running if loaded else None, rejected_share=share,
                served_rate=t.rate, served_peak_rate=t.peak_rate,
                peak_ttft_p95_s=fleet.peak_ttft95_s, peak_utilization=fleet.peak_utilization)


def policy_caps(r: SizeResult, wl: Workload, t: Targets) -> tuple[int, int, int, int]:
    """(the policy's cap, guaranteed, safe at the risk target, mean ceiling) on r's pool."""
    d = capacity.demand(r.groups, wl, r.max_model_len)
    g = capacity.guaranteed_max_num_seqs(d, r.admission_blocks)
    s = capacity.safe_max_num_seqs(d, r.admission_blocks, t.preempt_risk)
    return (g if t.policy == "guaranteed" else s), g, s, capacity.mean_ceiling(
        d, r.usable_blocks)


def _fixed_point(sized: Callable[[int], SizeResult], start: int, top: int, wl: Workload,
                 t: Targets) -> tuple[int, SizeResult, int, int, int] | None:
    """The largest cap c in [start, top] whose own pool (`sized(c)`, the pool vLLM leaves at
    --max-num-seqs c) holds c under the policy (`capacity.fixed_point`): (c, result,
    guaranteed, safe, ceiling), or None when `start` does not hold."""
    seen: dict[int, tuple[SizeResult, tuple[int, int, int, int]]] = {}

    def holds(c: int) -> int:
        rc = sized(c)
        seen[c] = rc, policy_caps(rc, wl, t) if rc.fits else (-1, 0, 0, 0)
        return seen[c][1][0]

    c = capacity.fixed_point(holds, start, top)
    if c is None:
        return None
    rc, (_, g, s, ceil) = seen[c]
    return c, rc, g, s, ceil


def _vision_gain(r: SizeResult, cap: int) -> str:
    """Qwen2.5-VL profiles a video that grows with max_model_len: what a cap gives back."""
    now = r.vision_profile  # None when the profile run has no encoder
    if now is None:
        return ""
    then = encoder_profile(r.arch.architectures, r.arch.vision_config,
                           tp=r.args.tensor_parallel_size, max_model_len=cap,
                           max_num_batched_tokens=r.max_num_batched_tokens,
                           max_num_seqs=r.max_num_seqs, limits=r.args.limit_mm_per_prompt,
                           px=mm_pixel_bytes(r.arch.architectures, r.version,
                                             r.model_runner_v2),
                           pixels=mm_pixels(r.args, r.version, None, r.arch.architectures,
                                            r.version.mistral_native_tower(r.model)))
    if then is None or now.encoder_peak - then.encoder_peak < GiB // 4:
        return ""
    return (f"; it also shrinks vLLM's vision profile from {now.tokens_per_item:,} to "
            f"{then.tokens_per_item:,} tokens, up to "
            f"{(now.encoder_peak - then.encoder_peak) / GiB:.1f} GiB more KV per GPU")


def kv_format_advice(r: SizeResult) -> list[str]:
    """A quantized KV format (core/kvquant.py): the step-time model counts the bytes it reads,
    not the attention kernel's dequantisation."""
    from kvplan.core.kvquant import TURBOQUANT, is_quantized

    if not is_quantized(r.kv_dtype):
        return []
    measured = (" vLLM's TurboQuant PRs measured 0.37-0.55x bf16's request rate with "
                "turboquant_3bit_nc (38479: Qwen3-4B, H100) and 0.86x decode tokens/s with "
                "turboquant_k8v4 (40108: Gemma-4-E4B)." if r.kv_dtype in TURBOQUANT else "")
    return [f"{r.kv_dtype}: the throughput figures count the fewer KV bytes it reads, not its "
            f"dequantisation in the attention kernel, so they are an upper bound.{measured} "
            "Benchmark it before counting on the speed; its capacity is exact"]


def dp_advice(model: Model, gpu: Gpu, r: SizeResult) -> list[str]:
    """An MLA MoE model at TP > 1 keeps its whole latent KV on every TP rank (one KV head):
    the same GPUs run as data-parallel engines with expert parallelism hold one pool each
    (vLLM issue 51454: 7.7x the KV of TP8 for DeepSeek-V4-Flash on 8 B200s). Sized with
    `size`; the throughput model covers TP engines only."""
    a = r.args
    tp = a.tensor_parallel_size
    if not (r.arch.is_mla and r.arch.num_experts and tp > 1 and a.pipeline_parallel_size == 1
            and a.data_parallel_size == 1 and a.decode_context_parallel_size == 1):
        return []
    try:
        d = size(model, gpu, replace(a, tensor_parallel_size=1, data_parallel_size=tp,
                                     enable_expert_parallel=True), r.version.text, hints=False)
    except BadInput:
        return []
    total = d.kv_cache_tokens * tp
    if not d.fits or total < 1.2 * r.kv_cache_tokens:
        return []
    return [f"MLA keeps the whole latent KV on every TP rank: the same {tp} GPUs as "
            f"-dp {tp} --enable-expert-parallel hold {total / r.kv_cache_tokens:.1f}x the KV "
            f"tokens ({tp} engines of {d.kv_cache_tokens:,}, against {r.kv_cache_tokens:,}; "
            f"each engine a max_num_seqs of its own). Sized only: the throughput and latency "
            f"shown are TP{tp}'s, so benchmark the data-parallel decode before switching"]


def length_advice(r: SizeResult, wl: Workload, refused: float = 0.0) -> list[str]:
    """When a few long requests dominate KV: a max_model_len, an output cap, a long pool.
    On the whole workload, the requests vLLM refuses included (a `refused` share of them):
    no shorter max_model_len when some are refused (it would refuse more), no long pool
    for prompts that are refused anyway."""
    notes = []
    p999 = wl.prompt.quantile(0.999) + wl.output.quantile(0.999)
    cap = min(r.max_model_len, 1024 * math.ceil(p999 / 1024))
    if cap < r.max_model_len / 2 and not refused:
        notes.append(f"99.9 % of requests fit in {cap:,} tokens: --max-model-len {cap} "
                     f"(instead of {r.max_model_len:,}) bounds the worst case per sequence; "
                     "longer requests get a clear 400 instead of starving the pool"
                     + _vision_gain(r, cap))
    o = wl.output
    tail = sum(x for x in o.points if x > o.quantile(0.99)) / sum(o.points)
    if tail > 0.05:
        notes.append(f"the longest 1 % of outputs hold {tail:.0%} of generated KV: cap "
                     f"max_tokens at about {o.quantile(0.99):,} at the gateway")
    pr = wl.prompt
    long_share = sum(x for x in pr.points if x > pr.quantile(0.95)) / sum(pr.points)
    if long_share > 0.3 and pr.quantile(0.95) < r.max_model_len:
        notes.append(f"the longest 5 % of prompts carry {long_share:.0%} of prompt tokens: a "
                     f"separate long-context pool (prompts over {pr.quantile(0.95):,} tokens) "
                     "lets the main pool run more sequences")
    return notes


def peak_advice(p: Plan, t: Targets) -> list[str]:
    """--peak-rate sizes the fleet to stay stable at the peak (utilisation up to 1), not to
    keep its latency: say so when the peak pushes the replicas past the utilisation target
    or its TTFT p95 (`Plan.peak_ttft_p95_s`) misses --ttft."""
    ttft, util = p.peak_ttft_p95_s, p.peak_utilization
    if ttft is None or util is None:
        return []
    missed = t.ttft_p95_s is not None and ttft > t.ttft_p95_s
    if not (missed or util > t.target_utilization):
        return []
    rate = p.served_peak_rate or t.peak_rate
    at = f"{ttft:,.1f} s" if math.isfinite(ttft) else "unbounded (the queue grows)"
    return [f"at the peak ({rate:.3g} req/s) the {p.replicas - t.redundancy} replicas run at "
            f"{util:.0%} and TTFT p95 is {at}" + (f", over --ttft {t.ttft_p95_s:g} s" if missed
                                                  else "") +
            ": --peak-rate sizes the fleet to stay stable at the peak, not fast; plan --rate "
            "at the peak (with --ttft) to keep the latency there"]


def _rank_key(p: Plan) -> tuple[float, int, float]:
    """Cheapest per request served first: $/h / (1 - the share refused for its length), the
    $/h itself when nothing is refused (a plan that refuses more is planned on less traffic,
    not cheaper for it); then fewer GPUs, then more tokens/s per replica."""
    cost = p.cost_per_hour if p.cost_per_hour is not None else math.inf
    return (cost / (1 - p.rejected_share), p.total_gpus, -p.per_replica_tokens_per_s)


def _floor_key(p: Plan) -> tuple[float, int, float]:
    """A key no plan of p's candidate ranks ahead of, whatever its cap: one replica (the
    fewest a plan has) at the candidate's $/h with nothing refused, and no bound on its
    tokens/s."""
    g = p.gpus_per_replica
    price = p.gpu.price_per_hour
    return (price * g if price else math.inf, g, -math.inf)


def _reason(e: BadInput, gpu: Gpu, tp: int) -> str:
    """The message without the "GPU TPn: " `plan_one` puts first (the rejection names it)."""
    return e.message.removeprefix(f"{gpu.id} TP{tp}: ")


def search(model: Model, gpus: list[Gpu], base: EngineArgs, version: str | None,
           wl: Workload, t: Targets, tps: list[int], kv_dtypes: list[str],
           limit: int = 5, *, served: bool = False, stall_cap: bool = False,
           unserved: list[BadInput] | None = None) -> tuple[list[Plan], list[str]]:
    """Every (GPU, TP, KV dtype) candidate; the `limit` best feasible plans (`_rank_key`:
    cheapest per request served, fewer GPUs, more tokens/s), each planned on the pool its
    own --max-num-seqs leaves. `served`, `stall_cap`: as `plan_one`'s, per candidate (each plan
    at the rate its own max_model_len serves). `unserved` collects the candidates rejected
    because vLLM refuses nearly every request at their max_model_len (`Unserved`) or refuses
    them on any GPU (`RefusedEverywhere`: the KV dtype).

    The first pass plans every candidate on the default pool (`resize_pool=False`, one
    sizing each). Re-sizing moves a plan's cap, and so its replicas and cost, either way:
    a cap below the default grows the pool (a higher cap, usually fewer replicas), one above
    it shrinks the pool (a lower cap, sometimes more replicas), and the TTFT of a cap close
    to max_num_batched_tokens is not monotone in it either. So no first-pass cost bounds the
    re-sized one except the floor of one replica at the candidate's price (`_floor_key`).
    Candidates are re-planned in first-pass order (close to the final one, so the bar falls
    fast), skipping each whose floor cannot reach the `limit`-th best re-sized plan: the
    result is that of re-planning every candidate the first pass finds feasible."""
    first: list[tuple[Plan, str]] = []
    rejected: list[str] = []
    how = dict(served=served, stall_cap=stall_cap)

    def reject(e: BadInput, gpu: Gpu, tp: int, kv: str) -> None:
        rejected.append(f"{gpu.id} TP{tp} {kv}: {_reason(e, gpu, tp)}")
        # refused whole (no GPU count helps): the prompts vLLM refuses, a KV dtype it refuses
        if unserved is not None and isinstance(e, (Unserved, RefusedEverywhere)):
            unserved.append(e)

    for gpu in gpus:
        for tp in tps:
            for kv in kv_dtypes:
                a = replace(base, tensor_parallel_size=tp, kv_cache_dtype=kv)
                try:
                    p = plan_one(model, gpu, a, version, wl, t, resize_pool=False, **how)
                except NotPlanned:
                    raise
                except BadInput as e:
                    if (e.flag != "tensor_parallel_size" or a.enable_expert_parallel
                            or not normalize(model.config).num_experts):
                        reject(e, gpu, tp, kv)
                        continue
                    try:  # e.g. an FP8 expert-block split: expert parallelism keeps experts whole
                        a = replace(a, enable_expert_parallel=True)
                        p = plan_one(model, gpu, a, version, wl, t, resize_pool=False, **how)
                    except NotPlanned:
                        raise
                    except BadInput as e2:
                        reject(e2, gpu, tp, kv)
                        continue
                if p.feasible:
                    first.append((p, f"{gpu.id} TP{tp} {kv}"))
                else:
                    rejected.append(f"{gpu.id} TP{tp} {kv}: {p.why_not}")
    first.sort(key=lambda c: _rank_key(c[0]))
    best: list[Plan] = []
    for p, name in first:
        if len(best) >= limit and _floor_key(p) > _rank_key(best[-1]):
            continue  # ranks below the plans returned, whatever its re-sized cap
        # (the length asked for: a stall cap is found again, with its note)
        q = plan_one(model, p.gpu, replace(p.result.args, max_model_len=base.max_model_len),
                     version, wl, t, **how)
        if not q.feasible:  # e.g. a cap raised on the larger pool: a longer prefill than --ttft
            rejected.append(f"{name}: {q.why_not}")
            continue
        best.append(q)
        best.sort(key=_rank_key)  # stable: equal keys keep the first-pass order
        del best[limit:]
    return best, rejected
