"""From a resolved model and GPU to simulation runs: size the engine, build its config,
run, summarise. The recommended cap is the safe max-num-seqs of `kvplan recommend`."""

from __future__ import annotations

from kvplan.core import capacity, perf
from kvplan.core.sizing import EngineArgs, Gpu, Model, SizeResult, size
from kvplan.core.workload import Workload
from kvplan.errors import BadInput, DoesNotFit
from kvplan.sim.engine import Config
from kvplan.sim.report import SweepResult, knee_and_collapse, summary
from kvplan.sim.run import Load, simulate
from kvplan.units import parse_vllm_int


def sized(model: Model, gpu: Gpu, tp: int, mml: str | None, kv: str, util: float | None,
          mnbt: str | None, seqs: int | None, version: str | None,
          extra: dict | None = None) -> tuple[SizeResult, list[str]]:
    """`extra`: more EngineArgs fields (LoRA slots, a speculative config), whose memory the
    simulated engine gets and whose speed it does not."""
    notes: list[str] = []
    args = EngineArgs(tensor_parallel_size=tp, kv_cache_dtype=kv, gpu_memory_utilization=util,
                      max_num_seqs=seqs,
                      max_num_batched_tokens=parse_vllm_int(mnbt, what="--max-num-batched-tokens")
                      if mnbt else None, **(extra or {}))
    if args.enable_lora or args.speculative:
        notes.append("LoRA slots / the speculative drafter are in the memory; the step times "
                     "are without their kernels and without speculative decoding's speed-up")
    if mml is not None:
        args.max_model_len = -1 if str(mml).lower() in ("-1", "auto") else parse_vllm_int(
            mml, what="--max-model-len")
    r = size(model, gpu, args, version)
    if not r.fits and mml is None and r.largest_max_model_len:
        args.max_model_len = -1  # what `vllm serve --max-model-len auto` would start with
        r = size(model, gpu, args, version)
        notes.append(f"max_model_len auto-fit to {r.max_model_len:,} (the model's full length "
                     "does not fit; vLLM --max-model-len auto does the same)")
    if not r.fits:
        raise DoesNotFit(f"{r.model} on {r.gpu}: {r.failure}")
    return r, notes


def engine_config(r: SizeResult, seqs: int | None = None, admission_cap: int | None = None,
                  queue_limit: int | None = None) -> Config:
    # a group grows a block per block_size tokens unless it is a fixed set of Mamba states;
    # prefix caching's 'all' mode keeps a state per block as well as its fixed ones
    attn = [g for g in r.groups if not g.spec.is_state or g.spec.all_states]
    states = sum(g.spec.state_blocks for g in r.groups if g.spec.is_state)
    return Config(num_blocks=r.usable_blocks, block_size=r.block_size,
                  groups_per_token_block=max(1, len(attn)), state_blocks=states,
                  max_num_seqs=seqs or r.max_num_seqs,
                  max_num_batched_tokens=r.max_num_batched_tokens,
                  max_model_len=r.max_model_len, admission_cap=admission_cap,
                  queue_limit=queue_limit, reserve_full_prompt=r.version.at_least(0, 19))


def recommended_cap(r: SizeResult, wl: Workload) -> int:
    d = capacity.demand(r.groups, wl, r.max_model_len)
    return max(1, capacity.safe_max_num_seqs(d, r.usable_blocks, 0.01))


def _context(r: SizeResult, wl: Workload, notes: list[str]) -> dict:
    return {"model": r.model, "gpu": r.gpu, "tensor_parallel_size": r.args.tensor_parallel_size,
            "max_model_len": r.max_model_len, "max_num_seqs": r.max_num_seqs,
            "max_num_batched_tokens": r.max_num_batched_tokens,
            "usable_blocks": r.usable_blocks, "block_size": r.block_size,
            "workload": wl.name, "notes": notes}


def run_single(*, model, gpu, tp, mml, kv, util, mnbt, seqs, version, wl, seed, admission_cap,
               queue_limit, ttft, tpot, rate, burstiness, concurrency, duration, requests,
               trace, extra=None) -> dict:
    r, notes = sized(model, gpu, tp, mml, kv, util, mnbt, seqs, version, extra)
    cfg = engine_config(r, seqs, admission_cap, queue_limit)
    pm = perf.build(r, gpu)
    tr = None
    if trace:
        from kvplan.sources.trace import read_trace

        t = read_trace(trace)
        if t.arrivals is None:
            raise DoesNotFit(f"trace {trace} has no arrival times",
                             hint="add a timestamp column, or use --rate / --concurrency")
        tr = list(zip(t.arrivals, t.prompts, t.outputs))
    if not (rate or concurrency or tr):
        concurrency = max(1, recommended_cap(r, wl))
        notes.append(f"no load given: closed loop with {concurrency} clients (the recommended "
                     "cap)")
    load = Load(rate=rate, burstiness=burstiness, concurrency=concurrency, duration=duration,
                requests=requests, trace=tr)
    if duration is None and requests is None and not tr:
        if rate:
            load.duration = 300.0
        else:
            load.requests = max(200, 4 * (concurrency or 1))
    st = simulate(cfg, pm, wl.clip(r.max_model_len), bounded(load), seed)
    out = summary(st, ttft, tpot)
    out.update(_context(r, wl, notes))
    out["recommended_max_num_seqs"] = recommended_cap(r, wl)
    out["series"] = st.series
    return out


MAX_ARRIVALS = 1_000_000  # about 35 s of simulation on one core (~30k requests/s)


def bounded(load: Load) -> Load:
    """Refuse a load whose arrivals would take the simulator longer than anyone waits."""
    limits = [n for n in (load.requests, load.rate * load.duration
                          if load.rate and load.duration else None) if n is not None]
    if limits and min(limits) > MAX_ARRIVALS:
        raise BadInput(f"this load simulates {min(limits):,.0f} requests; kvplan simulates "
                       f"at most {MAX_ARRIVALS:,}", hint="lower --rate, --duration or "
                       "--requests; the rate is in requests per second")
    return load


def run_sweep(*, axis: str, values: list[float], compare_cap: bool, duration, requests,
              model, gpu, tp, mml, kv, util, mnbt, seqs, version, wl, seed, admission_cap,
              queue_limit, ttft, tpot, extra=None) -> SweepResult:
    r, notes = sized(model, gpu, tp, mml, kv, util, mnbt, seqs, version, extra)
    pm = perf.build(r, gpu)
    wlc = wl.clip(r.max_model_len)
    cap = recommended_cap(r, wlc)

    def one(v: float, engine_seqs: int | None, queue: int | None) -> dict:
        cfg = engine_config(r, engine_seqs, admission_cap, queue)
        if axis == "concurrency":
            n = int(v)
            load = Load(concurrency=n, requests=requests or max(200, 3 * n),
                        duration=duration)
        else:
            load = Load(rate=v, duration=duration or 120.0, requests=requests)
        st = simulate(cfg, pm, wlc, bounded(load), seed)
        s = summary(st, ttft, tpot)
        s[axis] = int(v) if axis == "concurrency" else round(v, 3)
        return s

    points = [one(v, seqs, queue_limit) for v in values]
    knee, collapse, latency = knee_and_collapse(points, axis)
    # the fix: the recommended cap and a bounded queue (429 beyond), as `kvplan recommend`
    # sets them when no TTFT SLO is given (two service times of waiting)
    fix_queue = queue_limit if queue_limit is not None else 2 * cap
    capped = [one(v, cap, fix_queue) for v in values] if compare_cap else None
    res = SweepResult(axis, points, capped, cap if compare_cap else None, knee, collapse,
                      latency, _context(r, wlc, notes))
    if compare_cap:
        res.context["fix_queue_limit"] = fix_queue  # type: ignore[index]
    return res
