"""From a resolved model and GPU to simulation runs: size the engine, build its config,
run, summarise. The recommended cap is the --max-num-seqs `kvplan recommend` emits
(`core.plan.plan_one`, on the pool vLLM leaves at that cap)."""

from __future__ import annotations

from dataclasses import replace

from kvplan.core import perf
from kvplan.core.arch import CHUNKED, SLIDING
from kvplan.core.blocks import watermark_blocks
from kvplan.core.plan import refuse_pooling
from kvplan.core.prefixcache import prefix_caching
from kvplan.core.sizing import (
    EngineArgs,
    Gpu,
    Model,
    SizeResult,
    size,
    v0_chunks_long_prompts,
)
from kvplan.core.workload import Workload
from kvplan.errors import BadInput, DoesNotFit
from kvplan.sim.engine import Config, Local
from kvplan.sim.report import SweepResult, knee_and_collapse, summary
from kvplan.sim.run import Load, simulate
from kvplan.units import parse_vllm_int


def sized(model: Model, gpu: Gpu, tp: int, mml: str | None, kv: str, util: float | None,
          mnbt: str | None, seqs: int | None, version: str | None,
          extra: dict | None = None, env: list[str] | None = None
          ) -> tuple[SizeResult, list[str], EngineArgs]:
    """The engine as vLLM starts it, the notes, and the arguments it was sized with.
    `extra`: more EngineArgs fields (LoRA slots, a speculative config), whose memory the
    simulated engine gets and whose speed it does not; `env`: `--env NAME=VALUE` items, read
    as `kvplan size`, `recommend` and `throughput` read them (`apply_assignments`)."""
    from kvplan.core.versions import VllmVersion
    from kvplan.engines.vllm_env import apply_assignments

    notes: list[str] = []
    args = EngineArgs(tensor_parallel_size=tp, kv_cache_dtype=kv, gpu_memory_utilization=util,
                      max_num_seqs=seqs,
                      max_num_batched_tokens=parse_vllm_int(mnbt, what="--max-num-batched-tokens",
                                                            version=version)
                      if mnbt else None, **(extra or {}))
    env_note = apply_assignments(args, env, VllmVersion.of(version).v)
    if env_note:
        notes.append(env_note)
    if args.enable_lora or args.speculative:
        notes.append("LoRA slots / the speculative drafter are in the memory; the step times "
                     "are without their kernels and without speculative decoding's speed-up")
    if mml is not None:
        args.max_model_len = -1 if str(mml).lower() in ("-1", "auto") else parse_vllm_int(
            mml, what="--max-model-len", version=version)
    r = size(model, gpu, args, version)
    if not r.fits and mml is None and r.largest_max_model_len and r.version.at_least(0, 14):
        args.max_model_len = -1  # what `vllm serve --max-model-len auto` would start with
        r = size(model, gpu, args, version)
        notes.append(f"max_model_len auto-fit to {r.max_model_len:,} (the model's full length "
                     "does not fit; vLLM --max-model-len auto does the same)")
    if not r.fits:
        hint = None
        if mml is None and r.largest_max_model_len:  # as `kvplan size` reports it
            hint = (f"vLLM {r.version.text} has no --max-model-len auto (0.14+): simulate "
                    f"--max-model-len {r.largest_max_model_len} or less")
        raise DoesNotFit(f"{r.model} on {r.gpu}: {r.failure}", hint=hint)
    refuse_pooling(r)  # nothing decodes: no generation to simulate
    return r, notes, args


def v0_chunked_prefill(r: SizeResult, vendor: str = "nvidia") -> bool:
    """Whether the V0 engine chunks prefills: the flag, else on for max_model_len over 32K
    where V0 allows it (0.6.6 `create_engine_config`, 0.8-0.10 `_set_default_args_v0`)."""
    asked = r.args.enable_chunked_prefill
    if asked is not None:
        return bool(asked)
    return r.max_model_len > 32768 and v0_chunks_long_prompts(r.arch, r.args, vendor,
                                                               r.version)


def engine_config(r: SizeResult, seqs: int | None = None, admission_cap: int | None = None,
                  queue_limit: int | None = None, vendor: str = "nvidia") -> Config:
    v0 = not r.version.v1
    full, local = _groups(r)
    # V0 has no null block; its block manager keeps 1 % of the blocks free at admission
    # (`BlockSpaceManager(watermark=0.01)`: `int(watermark * num_gpu_blocks)`)
    blocks = r.usable_blocks
    return Config(num_blocks=blocks, block_size=r.block_size,
                  groups_per_token_block=full if full or local else 1,
                  state_blocks=sum(g.spec.state_blocks for g in r.groups if g.spec.is_state),
                  max_num_seqs=seqs or r.max_num_seqs,
                  max_num_batched_tokens=r.max_num_batched_tokens,
                  max_model_len=r.max_model_len, admission_cap=admission_cap,
                  queue_limit=queue_limit, reserve_full_prompt=r.version.at_least(0, 19),
                  v0=v0, chunked_prefill=not v0 or v0_chunked_prefill(r, vendor),
                  watermark_blocks=watermark_blocks(r.num_gpu_blocks, not v0),
                  prefix_caching=prefix_caching(r)[0],  # as the release decides it
                  local=local,
                  # 0.26+ free on the processed tokens (`num_in_flight_tokens`): a step is
                  # in flight when two or more batches are (`inflight_batches`)
                  local_lag=r.version.at_least(0, 26)
                  and r.inflight_tokens >= 2 * r.max_num_batched_tokens,
                  local_admission_cap=r.version.at_least(0, 20))


def _groups(r: SizeResult) -> tuple[int, tuple[Local, ...]]:
    """The groups that hold a block per block_size tokens (full attention, and Mamba's 'all'
    prefix-caching mode, a state per block beside its fixed ones), and the sliding-window /
    chunked-local groups by (window, block size). Local groups exist only where kvplan's
    sizing keeps them (V1 0.9.1+ with the hybrid allocator; chunked ones in 0.10.0 and 0.14+):
    elsewhere vLLM unifies them to full attention and their specs say so. Each one's `cap` is
    its startup figure, `Spec.blocks_per_request(max_model_len, inflight_tokens)`
    (`max_admission_blocks_per_request`)."""
    full = 0
    local: dict[tuple[bool, int, int], list[int]] = {}
    for g in r.groups:
        s = g.spec
        if s.is_state:
            full += s.all_states
        elif s.kind in (SLIDING, CHUNKED):
            key = (s.kind == CHUNKED, s.window, s.block_size)
            n = local.setdefault(key, [0, s.blocks_per_request(r.max_model_len,
                                                               r.inflight_tokens)])
            n[0] += 1
        else:
            full += 1
    return full, tuple(Local(window=w, block_size=b, count=n, chunked=ch, cap=cap)
                       for (ch, w, b), (n, cap) in local.items())


def engine_notes(cfg: Config, r: SizeResult, wl: Workload) -> list[str]:
    notes = []
    if cfg.v0:
        why = r.engine_note or f"vLLM {r.version.text} runs the V0 engine"
        notes.append(f"{why}; simulated as V0: a request starts only when its whole sequence "
                     f"fits with {cfg.watermark_blocks:,} blocks (1 %) to spare" + (
                         "" if cfg.chunked_prefill else "; without chunked prefill a step "
                         "prefills or decodes, not both"))
    on, why = prefix_caching(r)
    if wl.prefix_hit and not on:
        notes.append(f"--prefix-hit ignored: prefix caching is off ({why})")
    elif wl.prefix_hit and cfg.v0:  # the engine models V1's block pool only
        notes.append("--prefix-hit ignored: V0's prefix cache (on with --enable-prefix-caching)"
                     " is not simulated, so every prompt is computed and held whole "
                     "(conservative against kvplan recommend's plan, which counts the hit)")
    return notes


def recommended(model: Model, gpu: Gpu, args: EngineArgs, version: str | None,
                wl: Workload):
    """`kvplan recommend`'s plan for this deployment at its defaults (1 % preemption risk,
    no SLO): its --max-num-seqs and the pool vLLM leaves at that cap (`plan.result`)."""
    from kvplan.core.plan import Targets, plan_one

    return plan_one(model, gpu, replace(args, max_num_seqs=None), version, wl, Targets())


def _context(r: SizeResult, wl: Workload, notes: list[str]) -> dict:
    return {"model": r.model, "gpu": r.gpu, "tensor_parallel_size": r.args.tensor_parallel_size,
            "max_model_len": r.max_model_len, "max_num_seqs": r.max_num_seqs,
            "max_num_batched_tokens": r.max_num_batched_tokens,
            # the engine's blocks: V0 has no null block
            "usable_blocks": r.usable_blocks,
            "block_size": r.block_size,
            "workload": wl.name, "notes": notes}


def active_cap(r: SizeResult, active: int | None) -> int | None:
    """`--max-num-active-seqs` (0.31+ `SchedulerConfig.max_num_active_seqs`): the scheduler
    admits no more running requests than this, while the pool stays sized for
    max_num_seqs; vLLM refuses one above max_num_seqs."""
    if active is None:
        return None
    if not r.version.at_least(0, 31):
        raise BadInput(f"vLLM {r.version.text} has no --max-num-active-seqs (0.31+)")
    if active > r.max_num_seqs:
        raise BadInput(f"max_num_active_seqs ({active}) cannot be greater than max_num_seqs "
                       f"({r.max_num_seqs}); vLLM refuses it",
                       hint=f"use --max-num-active-seqs {r.max_num_seqs} or less")
    return active


def run_single(*, model, gpu, tp, mml, kv, util, mnbt, seqs, version, wl, seed, admission_cap,
               queue_limit, ttft, tpot, rate, burstiness, concurrency, duration, requests,
               trace=None, extra=None, env=None, active=None) -> dict:
    """One run. `trace` (a read `sources.trace.Trace`, whose lengths `wl` holds): replayed
    at its own arrival times, whole unless --requests or --duration cut it; with --rate or
    --concurrency its lengths are sent at that load instead."""
    r, notes, args = sized(model, gpu, tp, mml, kv, util, mnbt, seqs, version, extra,
                            env)
    cfg = engine_config(r, active_cap(r, active) or seqs, admission_cap, queue_limit,
                        gpu.vendor)
    notes += engine_notes(cfg, r, wl)
    pm = perf.build(r, gpu)
    tr = None
    if trace is not None and (rate or concurrency):
        if trace.arrivals is not None:
            notes.append(f"{'--rate' if rate else '--concurrency'}: the trace's request "
                         "lengths at that load; its own arrival times are not replayed")
    elif trace is not None:
        if trace.arrivals is None:
            raise BadInput(f"trace {trace.path} has no arrival times, so it cannot be "
                           "replayed", hint="add a timestamp column, or give --rate or "
                           "--concurrency to send its lengths at that load")
        tr = replayed(trace, duration, requests, notes)
    notes += too_long_notes(wl, r, tr)  # bad input before any planning
    cap = max(1, recommended(model, gpu, args, version, wl).max_num_seqs)
    if not (rate or concurrency or tr):
        concurrency = cap
        notes.append(f"no load given: closed loop with {concurrency} clients (the recommended "
                     "cap)")
    load = Load(rate=rate, burstiness=burstiness, concurrency=concurrency, duration=duration,
                requests=requests, trace=tr)
    if duration is None and requests is None and not tr:
        if rate:
            load.duration = 300.0
        else:
            load.requests = max(200, 4 * (concurrency or 1))
    elif concurrency and requests is None and not tr:  # a closed loop over a --duration: its
        load.requests = MAX_ARRIVALS  # arrivals follow its completions, so cap them
    # unclipped: the engine refuses a prompt of max_model_len or more as vLLM does
    st = simulate(cfg, pm, wl, bounded(load), seed)
    if load.requests == MAX_ARRIVALS and requests is None and not tr \
            and st.sim_time < (load.duration or 0):
        notes.append(f"the closed loop stopped after {MAX_ARRIVALS:,} requests, "
                     f"{st.sim_time:,.0f} s into the --duration (kvplan simulates at most "
                     f"{MAX_ARRIVALS:,})")
    out = summary(st, ttft, tpot)
    notes += never_admitted_notes(r, st.never_admitted)
    out.update(_context(r, wl, notes))
    out["ttft_slo_s"], out["tpot_slo_ms"] = ttft, tpot  # goodput's SLOs (null: not given)
    out["recommended_max_num_seqs"] = cap
    out["series"] = st.series
    return out


MAX_ARRIVALS = 1_000_000  # about 35 s of simulation on one core (~30k requests/s)


MAX_SPAN_S = 7 * 86400  # a week of arrivals: past it the rate's units are wrong


def bounded(load: Load) -> Load:
    """Refuse a load whose arrivals would take the simulator longer than anyone waits, that
    spans more than MAX_SPAN_S, or whose open loop expects no request at all."""
    n = arrivals_of(load)
    if n > MAX_ARRIVALS:
        raise BadInput(f"this load simulates {n:,.0f} requests; kvplan simulates "
                       f"at most {MAX_ARRIVALS:,}", hint="lower --rate, --duration or "
                       "--requests; the rate is in requests per second")
    spans(load)
    return load


def spans(load: Load) -> None:
    """Bad input when the arrivals span more than MAX_SPAN_S, or an open loop's rate x
    duration expects less than one request (an empty run)."""
    units = "the rate is in requests per second"
    if load.duration is not None and load.duration > MAX_SPAN_S:
        raise BadInput(f"--duration {load.duration:,.3g} s is more than the week "
                       f"({MAX_SPAN_S:,} s) kvplan simulates", hint="give seconds of arrivals")
    if not load.rate or load.trace is not None:
        return
    if load.duration is not None and load.rate * load.duration < 1:
        raise BadInput(f"no request is expected in {load.duration:,.3g} s of arrivals at "
                       f"{load.rate:,.3g} req/s", hint=f"raise --duration to at least "
                       f"{1 / load.rate:,.3g} s or --rate; {units}")
    if load.duration is None and load.requests and load.requests / load.rate > MAX_SPAN_S:
        raise BadInput(f"{load.requests:,} requests at {load.rate:,.3g} req/s arrive over about "
                       f"{load.requests / load.rate:,.3g} s; kvplan simulates at most a week "
                       f"({MAX_SPAN_S:,} s)", hint=f"raise --rate or lower --requests; {units}")


def too_long_notes(wl: Workload, r: SizeResult,
                   rows: list[tuple[float, int, int]] | None = None) -> list[str]:
    """The share of requests vLLM refuses for their prompt's length (of a replayed trace's
    rows, else of the workload); bad input when that is nearly all of them."""
    from kvplan.core.sizing import DRAFT_LEN_REMEDY, DRAFT_LEN_SOURCE
    from kvplan.core.workload import refuse_unserved, rejected_note

    max_model_len = r.max_model_len

    if rows is not None:
        prompts = sorted(p for _, p, _ in rows)
        share = sum(1 for p in prompts if p >= max_model_len) / len(prompts) if rows else 0.0
        p99 = prompts[min(len(prompts) - 1, int(0.99 * len(prompts)))] if rows else 0
        refuse_unserved(share, max_model_len, p99, "the trace")
    else:
        share = 1 - wl.served_share(max_model_len)
    if not share:
        return []
    remedy = DRAFT_LEN_REMEDY if r.max_model_len_source.startswith(DRAFT_LEN_SOURCE) else None
    return [rejected_note(share, max_model_len, "the run refuses them too (requests_too_long, "
                          "part of requests_rejected) and the recommended cap is the served "
                          "requests'", remedy=remedy)]


def never_admitted_notes(r: SizeResult, n: int) -> list[str]:
    """Why `n` requests were dropped at admission: prompts vLLM's whole-prompt check never
    passes (0.19.x sliding-window models: `SizeResult.whole_prompt_limit`)."""
    if not n:
        return []
    lim = r.whole_prompt_limit
    why = (f"over {lim:,} tokens: vLLM {r.version.text}'s whole-prompt admission check "
           f"charges each of the {len(r.groups)} KV-cache groups, sliding-window ones "
           f"included, the whole prompt against {r.usable_blocks:,} blocks" if lim else
           "more blocks than the whole pool holds")
    fix = (f"; --max-model-len {lim + 1} has vLLM refuse them with HTTP 400 instead, and "
           "vLLM 0.20+ charges a sliding window only its window" if lim else "")
    return [f"{n:,} request{'s' if n != 1 else ''} can never be admitted ({why}): vLLM "
            "accepts such a request and its scheduler stops the waiting queue at it for good, "
            "so every request behind it stalls too (the run drops them and serves the rest: "
            f"requests_never_admitted, part of requests_rejected){fix}"]


def replayed(trace, duration: float | None, requests: int | None,
             notes: list[str]) -> list[tuple[float, int, int]]:
    """The trace's (arrival, prompt, output) rows a run replays: all of them, or those
    --duration and --requests keep (a note says how many of how many)."""
    rows = list(zip(trace.arrivals, trace.prompts, trace.outputs))
    total = len(rows)
    if duration is not None:
        rows = [x for x in rows if x[0] < duration]
    if requests is not None:
        rows = rows[:requests]
    if len(rows) > MAX_ARRIVALS:
        raise BadInput(f"trace {trace.path} has {len(rows):,} requests to replay; kvplan "
                       f"simulates at most {MAX_ARRIVALS:,}", hint=f"replay a part with "
                       f"--requests {MAX_ARRIVALS} or --duration")
    span = rows[-1][0] if rows else 0.0
    if len(rows) < total:
        why = " and ".join(f for f, v in (("--duration", duration), ("--requests", requests))
                           if v is not None)
        notes.append(f"replayed the first {len(rows):,} of the trace's {total:,} requests "
                     f"({why}), {span:,.1f} s of arrivals")
    else:
        notes.append(f"replayed all {total:,} requests of the trace, {span:,.1f} s of "
                     "arrivals")
    return rows


def sweep_loads(axis: str, values: list[float], duration: float | None,
                requests: int | None) -> list[Load]:
    """Each point's load: a closed loop of N clients for `requests` (3 per client, at least
    200), or `rate` for `duration` (120 s) or `requests`."""
    if axis == "concurrency":
        return [Load(concurrency=int(v), requests=requests or max(200, 3 * int(v)),
                     duration=duration) for v in values]
    return [Load(rate=v, duration=duration or 120.0, requests=requests) for v in values]


def arrivals_of(load: Load) -> float:
    """The most arrivals a load issues (its request count, or rate x duration)."""
    limits = [n for n in (load.requests, load.rate * load.duration
                          if load.rate and load.duration else None) if n is not None]
    return min(limits) if limits else 0.0


def bounded_sweep(loads: list[Load], runs: int) -> None:
    """Refuse a sweep whose points together simulate more than MAX_ARRIVALS, before the first
    point runs (`runs`: 2 with the fix's sweep beside)."""
    for x in loads:
        spans(x)
    total = runs * sum(arrivals_of(x) for x in loads)
    if total > MAX_ARRIVALS:
        fix = " (the points and the fix's run of each)" if runs > 1 else ""
        raise BadInput(f"this sweep simulates {total:,.0f} requests{fix}; kvplan simulates "
                       f"at most {MAX_ARRIVALS:,}", hint="narrow the --sweep range, give "
                       "fewer points, or lower --requests or --duration")


def run_sweep(*, axis: str, values: list[float], compare_cap: bool, duration, requests,
              model, gpu, tp, mml, kv, util, mnbt, seqs, version, wl, seed, admission_cap,
              queue_limit, ttft, tpot, extra=None, env=None, active=None) -> SweepResult:
    loads = sweep_loads(axis, values, duration, requests)
    bounded_sweep(loads, 2 if compare_cap else 1)
    r, notes, args = sized(model, gpu, tp, mml, kv, util, mnbt, seqs, version, extra,
                            env)
    pm = perf.build(r, gpu)
    notes += too_long_notes(wl, r)
    notes += engine_notes(engine_config(r, vendor=gpu.vendor), r, wl)
    plan = recommended(model, gpu, args, version, wl) if compare_cap else None
    cap = max(1, plan.max_num_seqs) if plan else None

    def one(v: float, load: Load, engine_seqs: int | None, queue: int | None,
            rr: SizeResult = r, pmr: perf.PerfModel = pm) -> dict:
        cfg = engine_config(rr, engine_seqs, admission_cap, queue, gpu.vendor)
        st = simulate(cfg, pmr, wl, bounded(load), seed)  # the engine refuses long prompts
        s = summary(st, ttft, tpot)
        s[axis] = int(v) if axis == "concurrency" else round(v, 3)
        return s

    points = [one(v, ld, active_cap(r, active) or seqs, queue_limit)
              for v, ld in zip(values, loads)]
    notes += never_admitted_notes(r, sum(p["requests_never_admitted"] for p in points))
    knee, collapse, latency = knee_and_collapse(points, axis)
    # the fix: the recommended cap on the pool vLLM leaves at it, and a bounded queue (429
    # beyond): two waiting requests per slot when no --queue-limit is given
    capped, fix_queue = None, None
    if plan is not None:
        fix_queue = queue_limit if queue_limit is not None else 2 * cap
        fix_pm = perf.build(plan.result, gpu)
        capped = [one(v, ld, cap, fix_queue, plan.result, fix_pm)
                  for v, ld in zip(values, loads)]
    res = SweepResult(axis, points, capped, cap, knee, collapse, latency,
                      _context(r, wl, notes))
    res.context["ttft_slo_s"], res.context["tpot_slo_ms"] = ttft, tpot  # type: ignore[index]
    if plan is not None:
        res.context["fix_queue_limit"] = fix_queue  # type: ignore[index]
        res.context["fix_usable_blocks"] = engine_config(  # type: ignore[index]
            plan.result, cap, vendor=gpu.vendor).num_blocks
    return res
