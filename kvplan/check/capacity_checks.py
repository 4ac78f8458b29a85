"""max-num-seqs-safe and replicas-cover-rate: the declared workload against the KV pool and
the fleet, with `kvplan recommend`'s planner (`core.plan.plan_one`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from kvplan.check.base import FAIL, PASS, SKIP, WARN
from kvplan.check.checks import group_engines
from kvplan.check.mapping import Parsed, spelled
from kvplan.check.sizing_checks import replicas_fix
from kvplan.errors import BadInput


def build_workload(spec: Any) -> Any:
    """A `core.workload.Workload` from a `planfile.WorkloadSpec` (validated already)."""
    from kvplan.core.workload import parse_lengths, preset

    wl = preset(spec.preset or "chat")
    if spec.prompt_tokens is not None:
        wl.prompt = parse_lengths(str(spec.prompt_tokens), "prompt_tokens")
    if spec.output_tokens is not None:
        wl.output = parse_lengths(str(spec.output_tokens), "output_tokens")
    if spec.prompt_tokens is not None or spec.output_tokens is not None:
        wl.name = spec.preset or "custom"
    wl.rate, wl.peak_rate, wl.burstiness = spec.rate, spec.peak_rate, spec.burstiness
    wl.users, wl.think_time_s, wl.prefix_hit = spec.users, spec.think_time, spec.prefix_hit
    return wl


def targets_of(slo: Any, wl: Any) -> Any:
    from kvplan.core.plan import Targets

    return Targets(rate=wl.rate, peak_rate=wl.peak_rate, ttft_p95_s=slo.ttft, tpot_ms=slo.tpot,
                   preempt_risk=slo.preempt_risk, policy=slo.policy,
                   target_utilization=slo.target_utilization,
                   redundancy=1 if slo.n_plus_one else 0)


def _point(plan: Any, n: int, wl: Any, gpu: Any) -> tuple[Any, Any]:
    """The operating point at the deployment's running cap n and its own token budget (the
    plan is made at the deployment's budget: `plan_one(raise_budget=False)`), and its
    first-token times at a rate (`plan.latency_at`), as `plan_one` builds them."""
    from kvplan.core import perf
    from kvplan.core.plan import latency_at

    r = plan.result
    pm = perf.build(r, gpu)
    tr = perf.traffic(wl.clip(r.max_model_len))
    cache: dict[int, Any] = {}

    def at(b: int) -> Any:
        if b not in cache:
            cache[b] = perf.operating_point(pm, b, tr, r.max_num_batched_tokens)
        return cache[b]

    pt = plan.point if n == plan.max_num_seqs else at(n)
    return pt, latency_at(pm, tr, pt, at)


def _replicas(pt: Any, latency: Any, n: int, wl: Any, tg: Any) -> tuple[int, float, float]:
    """(replicas, requests/s one replica serves, rate) exactly as `plan_one` sizes them."""
    from kvplan.core.plan import size_fleet

    o = wl.output.points
    f = size_fleet(pt, n, sum(o) / len(o), wl, tg, latency)
    return f.replicas, f.per_replica_rps, f.rate


def seqs_and_replicas(out: Any, p: Parsed, r: Any, model: Any, gpu: Any, version: str) -> None:
    from kvplan.core.plan import plan_one, served_targets

    t = out.target
    active = p.values.get("max_num_active_seqs")
    if active is not None and active > r.max_num_seqs:  # `SchedulerConfig` (0.31+)
        out.add("flag-values", FAIL, f"max_num_active_seqs ({active}) cannot be greater than "
                f"max_num_seqs ({r.max_num_seqs}): the engine refuses to start",
                p.loc_of("max_num_active_seqs"), fix=f"--max-num-active-seqs {r.max_num_seqs}",
                current=active, suggested=r.max_num_seqs)
    decl = t.declared
    name = spelled(p.engine, "max_num_seqs")
    loc = p.loc_of("max_num_seqs")
    over = out.facts.pop("max_num_seqs_over_blocks", None)
    if getattr(r, "pooling", False):  # an embedding / scoring server: nothing decodes
        why = ("pooling runner: each request is one prefill with no decode to preempt, so "
               "kvplan's generation workloads do not apply")
        out.add("max-num-seqs-safe", SKIP, why)
        out.add("replicas-cover-rate", SKIP, why)
        return
    if decl.workload is None:
        why = ("no workload declared: add the annotations kvplan.io/workload and "
               "kvplan.io/rate (plan file: workload:; --cmd: --workload/--rate)")
        if over:
            _over_blocks(out, p, over, over[1], name, loc)
        else:
            out.add("max-num-seqs-safe", SKIP, why)
        out.add("replicas-cover-rate", SKIP, why)
        return
    wl = build_workload(decl.workload)
    unserved = _unserved_prefix(wl, r, p, t)
    tg = targets_of(decl.slo, wl)
    refused = _refused(out, wl, r, p)
    if out.has("workload-fits-max-model-len", FAIL):
        why = "not planned: vLLM refuses nearly every request of the declared workload"
        out.add("max-num-seqs-safe", SKIP, why)
        out.add("replicas-cover-rate", SKIP, why)
        return
    tg = served_targets(tg, refused)  # the fleet serves what vLLM does not refuse
    # the suggestion is the cap `kvplan recommend` emits: planned as if unset, so the pool
    # is the one the fixed command gets (`plan_one` re-sizes it at the cap), unless only the
    # given cap lets the engine start
    try:  # at the deployment's own token budget: the check judges its flags
        plan = plan_one(model, gpu, replace(r.args, max_num_seqs=None), version, wl, tg,
                        raise_budget=False)
    except BadInput:
        plan = plan_one(model, gpu, r.args, version, wl, tg, raise_budget=False)
    at = ""
    if out.has("max-model-len-fits", FAIL):
        at = f" (with {spelled(p.engine, 'max_model_len')} {r.max_model_len})"
    out.facts.update(workload=wl.name, rate=wl.rate, safe_max_num_seqs=plan.max_num_seqs,
                     replicas_needed=None if t.group_entry else plan.replicas)
    safe = plan.max_num_seqs
    current = r.max_num_seqs
    given = "max_num_seqs" in p.values
    active = p.values.get("max_num_active_seqs")
    if active is not None and 1 <= active < current:  # 0.31+: the running batch's own cap
        current, given = active, True
        name, loc = "--max-num-active-seqs", p.loc_of("max_num_active_seqs")
    if not plan.feasible:
        out.add("max-num-seqs-safe", FAIL, f"no safe setting{at}: {plan.why_not}", loc,
                fix="use a larger GPU, more tensor parallelism, --kv-cache-dtype fp8 or relax "
                    "the SLOs", current=current)
        out.add("replicas-cover-rate", SKIP, "not planned: no feasible max-num-seqs")
        return
    # the running cap is judged on the pool its own command leaves (vLLM profiles
    # max_num_seqs sequences): a value above the planner's cap may still hold on its pool
    own = _own_cap(r, wl, tg, gpu)
    holds = current <= own.cap
    capped = active is not None and name == "--max-num-active-seqs"
    # the fix holds on its own pool: the planner's cap (a smaller --max-num-seqs leaves a
    # larger pool), or for --max-num-active-seqs the cap on the pool max_num_seqs leaves
    fix = own.cap if capped or safe >= current else safe
    pool = f"the pool that max-num-seqs {r.max_num_seqs} leaves" if capped else \
        f"the pool that {current} leaves"
    src = f"{name} {current}" if given else f"the default max-num-seqs {current}"
    n = current if holds else min(current, max(fix, 1))
    if over:
        _over_blocks(out, p, over, min(over[1], safe), name, loc)
        n = min(current, safe)
    elif p.engine == "tgi":
        out.add("max-num-seqs-safe", SKIP, "TGI reserves each request's tokens when it admits "
                "it, so it queues instead of preempting", loc)
        n = current if given else safe
    elif p.engine == "sglang" and not given:
        out.add("max-num-seqs-safe", SKIP, f"{name} not set: SGLang admits by its own "
                f"token estimate (the safe cap would be {safe})", loc, suggested=safe)
        n = min(current, safe)
    elif not holds:
        fixed = f"{name} {fix}"
        if fix < 1:  # not one sequence on this pool: the planner's cap on its larger pool
            fix = n = safe
            fixed = f"{spelled(p.engine, 'max_num_seqs')} {safe}" + (
                " (without --max-num-active-seqs)" if capped else "")
        out.add("max-num-seqs-safe", FAIL, f"{src} exceeds the safe {fix}{at} for the "
                f"declared {wl.name} workload: {_why(own, pool, tg, p.engine)}", loc,
                fix=fixed, current=current, suggested=fix)
    else:
        budget = r.max_num_batched_tokens
        cap, why = own.cap, ""
        if own.cap > budget >= current:  # the scheduler's token budget binds first
            cap, why = budget, (f" (max_num_batched_tokens {budget} caps it; the KV pool "
                                f"alone holds {own.cap})")
        if getattr(plan, "budget_limited", False) and safe < current:
            more = (f"past {safe} running the token budget cannot refill the batch, so "
                    f"kvplan recommend sets {safe}")
            why = f"{why[:-1]}; {more})" if why else f" ({more})"
        out.add("max-num-seqs-safe", PASS, f"{src} <= the safe {cap}{at} on {pool} for "
                f"the declared {wl.name} workload{why}", loc, current=current, suggested=safe)
    _replicas_check(out, plan, n, wl, tg, gpu, group_engines(p, t))
    if refused:
        _note(out, "replicas-cover-rate", f"{refused:.1%} of the declared rate is refused for "
              "its length and not planned")
    if unserved:
        _note(out, "max-num-seqs-safe", unserved)
        _note(out, "replicas-cover-rate", "the declared prefix-hit is not counted: prefix "
              "caching is off")


def _refused(out: Any, wl: Any, r: Any, p: Parsed) -> float:
    """The share of the declared workload's requests vLLM refuses for their length (a prompt
    of max_model_len or more: `Workload.rejected_share`), as `kvplan recommend` plans it:
    the served rate is planned. From 1 % `workload-fits-max-model-len` warns; nearly all
    refused fails it (nothing left to plan)."""
    from kvplan.core.workload import MAX_REJECTED

    share = wl.rejected_share(r.max_model_len)
    if not share:
        return 0.0
    cid, loc = "workload-fits-max-model-len", p.loc_of("max_model_len")
    mml = spelled(p.engine, "max_model_len")
    what = (f"{share:.1%} of the declared {wl.name} workload's prompts are {r.max_model_len:,} "
            f"tokens or more (p99 {wl.prompt.quantile(0.99):,}): vLLM answers them HTTP 400 "
            "('maximum context length')")
    if share >= MAX_REJECTED:
        out.add(cid, FAIL, f"{what}, so nothing is left to serve", loc,
                fix=f"{mml} above the prompts, or a workload the deployment serves")
    elif share >= 0.01:
        out.add(cid, WARN, f"{what}; the load checks plan the {1 - share:.1%} served", loc,
                fix=f"raise {mml} (or cap prompts at the gateway) to serve them")
    return share


def _unserved_prefix(wl: Any, r: Any, p: Parsed, t: Any) -> str:
    """A declared prefix-hit share counts only when the engine runs with prefix caching
    (`core/prefixcache.py`): else it is set to 0 in `wl`, and the note says why."""
    from kvplan.core.prefixcache import OFF_BY_FLAG, prefix_caching

    on, why = prefix_caching(r)
    if not wl.prefix_hit or on:
        return ""
    flag = p.set_by.get("enable_prefix_caching")
    if why == OFF_BY_FLAG and flag is not None:
        why = f"{flag.key} turns it off"
    name = "workload.prefix_hit" if t.kind == "plan deployment" else "kvplan.io/prefix-hit"
    hit, wl.prefix_hit = wl.prefix_hit, 0.0
    return f"{name} {hit:g} is not counted: prefix caching is off ({why})"


def _note(out: Any, cid: str, note: str) -> None:
    """Add `note` to the last finding of check `cid`."""
    f = next((f for f in reversed(out.findings) if f.id == cid), None)
    if f is not None:
        f.message += f"; {note}"


def _over_blocks(out: Any, p: Parsed, over: tuple[int, int], fix: int, name: str,
                 loc: Any) -> None:
    """vLLM 0.20+ refuses a Mamba / linear-attention model whose max_num_seqs exceeds the KV
    blocks under FULL decode CUDA graphs (`CompilationConfig`)."""
    current, blocks = over
    src = f"{name} {current}" if "max_num_seqs" in p.values else \
        f"the default max-num-seqs {current}"
    out.add("max-num-seqs-safe", FAIL, f"{src} exceeds the available Mamba cache blocks "
            f"({blocks}): with FULL CUDA graphs every decoding sequence of a Mamba/linear-"
            "attention model needs one, so the engine refuses to start", loc,
            fix=f"{name} {fix}", current=current, suggested=fix)


@dataclass(frozen=True)
class _Own:
    """The policy's cap on a sized pool, and what binds it."""

    cap: int  # the largest running batch the policy and the TPOT SLO allow on this pool
    kv: int  # the policy's cap alone (safe, or guaranteed under the guaranteed policy)
    tpot: int | None  # the largest batch whose TPOT meets the SLO (None: no SLO, or above)


def _own_cap(r: Any, wl: Any, tg: Any, gpu: Any) -> _Own:
    from kvplan.core import perf
    from kvplan.core.plan import policy_caps

    wlc = wl.clip(r.max_model_len)
    kv = policy_caps(r, wlc, tg)[0]
    if tg.tpot_ms is None or kv < 1:
        return _Own(kv, kv, None)
    pm = perf.build(r, gpu)
    tr = perf.traffic(wlc)

    def meets(b: int) -> bool:
        return perf.operating_point(pm, b, tr, r.max_num_batched_tokens).tpot_ms <= tg.tpot_ms

    if meets(kv):
        return _Own(kv, kv, None)
    lo, hi = 0, kv - 1  # the largest batch whose TPOT meets the SLO (0: not one)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if meets(mid) else (lo, mid - 1)
    return _Own(lo, kv, lo)


def _why(own: _Own, pool: str, tg: Any, engine: str) -> str:
    if own.tpot is not None:
        return f"past {own.tpot} sequences TPOT exceeds the {tg.tpot_ms:g} ms SLO"
    if tg.policy == "guaranteed":
        return (f"on {pool}, {own.kv} sequences of max_model_len fill the KV pool "
                "(guaranteed policy)")
    then = {"sglang": "SGLang retracts requests and recomputes them"}.get(
        engine, "vLLM preempts requests and recomputes them")
    return (f"on {pool}, past {own.kv} running sequences the batch overflows the KV pool "
            f"with more than {tg.preempt_risk:.0%} probability, and {then}")


def _replicas_check(out: Any, plan: Any, n: int, wl: Any, tg: Any, gpu: Any, dp: int) -> None:
    t = out.target
    cid = "replicas-cover-rate"
    if not tg.rate and not wl.users:
        out.add(cid, SKIP, "no rate declared: add the annotation kvplan.io/rate (requests/s)")
        out.facts["replicas_needed"] = None
        return
    if t.group_entry:  # another pod of a LeaderWorkerSet group: the group is the replica
        out.add(cid, SKIP, f"the group's replicas are checked on {t.group_entry}",
                t.replicas_loc or t.loc)
        out.facts["replicas_needed"] = None  # the group's is on its entry, counted once
        return
    pt, at = _point(plan, n, wl, gpu)
    needed, rps, rate = _replicas(pt, at, n, wl.clip(plan.result.max_model_len), tg)
    if n == plan.max_num_seqs:
        needed = plan.replicas
    pods = math.ceil(needed / dp)  # each pod runs its data-parallel engines
    out.facts["replicas_needed"] = pods  # in the unit of `replicas`: pods (LWS: groups)
    have = t.replicas_max or t.replicas
    loc = t.replicas_loc or t.loc
    slo = f" and TTFT p95 <= {tg.ttft_p95_s:g} s" if tg.ttft_p95_s else ""
    load = (f"{rate:,.0f}" if rate >= 100 else f"{rate:.3g}") + " req/s" + \
        (f" ({wl.users} users)" if wl.users else "")
    each = (f"one replica serves about {rps * dp:.1f} req/s at {n} sequences"
            f"{f' x {dp} engines' if dp > 1 else ''}")
    if pt.budget_starved:  # the cap is past what the token budget refills (perf.py)
        each += (f" (max_num_batched_tokens {plan.result.max_num_batched_tokens} keeps only "
                 f"about {pt.unstarved_batch} running: the decodes leave too few tokens to "
                 "prefill their replacements)")
    out.facts["budget_starved"] = pt.budget_starved
    out.facts["replicas"] = have
    if have < pods:
        out.add(cid, FAIL, f"{have} replica{'s' * (have != 1)} for {load}: {each}; "
                f"utilization <= {tg.target_utilization:.0%}{slo} needs {pods}", loc,
                fix=replicas_fix(t, pods), current=have, suggested=pods)
    else:
        scale = (f" (autoscaled {t.replicas}-{t.replicas_max}: the autoscaler must reach "
                 f"{pods})" if t.replicas_max else "")
        out.add(cid, PASS, f"{have} replica{' covers' if have == 1 else 's cover'} {load}; "
                f"{pods} needed{scale}", loc, current=have, suggested=pods)
