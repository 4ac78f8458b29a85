"""Human output of `kvplan throughput` and `kvplan recommend`."""

from __future__ import annotations

import sys

from kvplan.render.term import Painter, table, use_color
from kvplan.units import fmt_int, fmt_rate

WIDTH = 40


def bar_chart(rows: list[tuple[str, float, str]], p: Painter, width: int = WIDTH) -> str:
    """Horizontal bars: (label, value, marker) -> text."""
    top = max((v for _, v, _ in rows), default=0) or 1
    lw = max(len(r[0]) for r in rows)
    out = []
    for label, v, mark in rows:
        w = max(1, round(width * v / top)) if v > 0 else 0
        colour = "red" if "preempt" in mark else ("green" if "knee" in mark else "cyan")
        out.append(f"  {label.rjust(lw)} {p('█' * w, colour)}{' ' * (width - w)} "
                   f"{fmt_int(v):>8}  {p(mark, 'yellow') if mark else ''}".rstrip())
    return "\n".join(out)


def render_curve(c, stream=None) -> None:
    out = stream or sys.stdout
    p = Painter(use_color(out))
    r = c.result
    lines = [f"{p(r.model, 'bold')} on {p(r.gpu, 'bold')} TP{r.args.tensor_parallel_size} · "
             f"vLLM {r.version.text} · workload {c.workload.name} "
             f"(prompt mean {c.workload.prompt.mean:,.0f}, output mean "
             f"{sum(c.workload.output.points) / len(c.workload.output.points):,.0f})", ""]
    rows, chart = [["batch", "output tok/s", "TPOT ms", "TTFT ms", ""]], []
    for pt in c.points:
        mark = []
        if pt.batch_size == c.knee:
            mark.append("← knee")
        if pt.batch_size == c.kv_ceiling:
            mark.append("← KV ceiling")
        if pt.batch_size == c.safe:
            mark.append("← safe --max-num-seqs")
        if pt.batch_size > c.kv_ceiling:
            mark.append("preempting")
        if pt.budget_starved:  # the token budget keeps fewer running (perf.unstarved_batch)
            mark.append(f"budget keeps {pt.unstarved_batch}")
        rows.append([str(pt.batch_size), fmt_int(pt.output_tokens_per_s), f"{pt.tpot_ms:.1f}",
                     f"{pt.ttft_ms:.0f}", " ".join(mark)])
        chart.append((str(pt.batch_size), pt.output_tokens_per_s, " ".join(mark)))
    lines.append(table(rows, align="rrrrl"))
    lines += ["", p("output tokens/s by batch depth", "bold"), bar_chart(chart, p), ""]
    lines.append(f"knee at batch {p(str(c.knee), 'green')}: beyond it more batch costs "
                 "relatively more latency than it adds throughput")
    lines.append(f"KV ceiling at batch {p(str(c.kv_ceiling), 'red')}: the running batch fills "
                 f"the pool on average; past it vLLM preempts, and the batch beyond the "
                 f"ceiling waits: tokens/s stay at the ceiling's at best and TTFT grows "
                 f"(before vLLM 0.19 recomputation costs more -- see `kvplan simulate`)")
    lines.append(f"safe --max-num-seqs {c.safe} (`kvplan recommend`'s: 1 % preemption risk on "
                 "the pool that cap leaves; `kvplan recommend` for replicas and SLOs)")
    lines += [f"{p('note', 'yellow')}: {n}" for n in c.notes()]
    out.write("\n".join(lines) + "\n")


def kv_detail(b) -> str:
    """The pool's dtype and blocks, with the unit each figure is in: blocks are the
    replica's (every GPU of it holds its share of each block), GiB are per GPU."""
    r = b.result
    g = b.gpus_per_replica
    per = f", each block split over its {g} GPUs" if g > 1 else ""
    return (f"{r.kv_dtype}; {fmt_int(r.num_gpu_blocks)} blocks of {r.block_size} tokens per "
            f"replica ({fmt_int(r.kv_cache_tokens)} tokens as vLLM logs it{per})")


def daily_row(b, rec) -> list[str]:
    """Output tokens a day: what the fleet serves at the rate, or one replica's at the
    target utilisation without one."""
    t = rec.targets
    value = f"{b.daily_output_tokens / 1e9:.2f} B tok/day"
    if t.rate or rec.workload.users:
        load = f"at {fmt_rate(t.rate)} req/s" if t.rate else f"for {rec.workload.users:,} users"
        who = "the replica serves" if b.replicas == 1 else f"the {b.replicas} replicas serve"
        return ["served", value, f"output tokens {who} {load} (the demand, not a ceiling)"]
    return ["capacity", value, f"output tokens at {t.target_utilization:.0%} utilisation "
            "(no --rate given)"]


def peak_rows(b) -> list[list[str]]:
    """TTFT p95 at --peak-rate (none without one): the steady state of a peak that lasts."""
    if b.peak_ttft_p95_s is None:
        return []
    x = b.peak_ttft_p95_s
    value = f"{x:,.2f} s" if x < float("inf") else "unbounded"
    return [["TTFT p95 peak", value, f"at {fmt_rate(b.served_peak_rate)} req/s: "
             f"{b.peak_utilization:.0%} utilised; the queue a lasting peak builds (a short one "
             "builds less)"]]


def alternatives_table(plans) -> str:
    """The plans side by side; their max_model_len and refused share when those differ."""
    lens = len({q.max_model_len for q in plans}) > 1
    refused = any(q.rejected_share for q in plans)
    alt = [["gpu", "TP", "KV", "seqs"] + (["max-model-len"] if lens else [])
           + (["refused"] if refused else [])
           + ["replicas", "GPUs", "tok/s/replica", "$/h", "$/1M tok"]]
    for q in plans:
        alt.append([q.gpu.id, str(q.result.args.tensor_parallel_size), q.result.kv_dtype,
                    str(q.max_num_seqs)] + ([fmt_int(q.max_model_len)] if lens else [])
                   + ([f"{q.rejected_share:.1%}"] if refused else [])
                   + [str(q.replicas), str(q.total_gpus), fmt_int(q.per_replica_tokens_per_s),
                      f"{q.cost_per_hour:,.2f}" if q.cost_per_hour else "-",
                      f"{q.cost_per_million:.3f}" if q.cost_per_million else "-"])
    return table(alt, align="lrlr" + "r" * (lens + refused) + "rrrrr")


def render_recommendation(rec, stream=None) -> None:
    out = stream or sys.stdout
    p = Painter(use_color(out))
    b = rec.best
    r = b.result
    t = rec.targets
    lines = [f"{p(rec.model.id, 'bold')} · workload {rec.workload.name} · vLLM "
             f"{r.version.text}", ""]
    asked = (rec.offered or t).rate  # the served part is in the advice and the served row
    load = (f"{fmt_rate(asked)} req/s" if asked else
            f"{rec.workload.users} users" if rec.workload.users else None)
    lines.append(p(f"Recommended: {b.replicas} × {b.gpu.id} TP{r.args.tensor_parallel_size} "
                   f"({b.total_gpus} GPU{'s' if b.total_gpus != 1 else ''})"
                   + (f" for {load}" if load else " (no --rate: one replica's capacity)"),
                   "bold", "green"))
    rows = [
        ["--max-num-seqs", f"{b.max_num_seqs}", f"{t.policy} policy; safe at "
         f"{t.preempt_risk:.0%} preemption risk: {b.safe_seqs}, guaranteed (every request at "
         f"max_model_len): {b.guaranteed_seqs}, pool full on average at {b.kv_ceiling}"],
        ["--max-model-len", fmt_int(b.max_model_len), ""],
        ["KV cache", f"{r.budget.kv_pool / 2**30:.1f} GiB/GPU", kv_detail(b)],
        ["throughput", f"{fmt_int(b.per_replica_tokens_per_s)} tok/s",
         f"per replica at batch {b.max_num_seqs}; {b.utilization:.0%} utilised"],
        ["TPOT p50", f"{b.tpot_p50_ms:.1f} ms", "; ".join(x for x in (
            f"SLO {t.tpot_ms:g} ms" if t.tpot_ms else "",
            f"at the cap (batch {b.max_num_seqs})" if b.tpot_at_rate_ms is None else
            f"at the cap (batch {b.max_num_seqs}); about {b.tpot_at_rate_ms:.1f} ms at the "
            f"planned load ({b.utilization * b.per_replica_rps:.3g} req/s a replica, about "
            f"{b.running_at_rate:.0f} running)") if x)],
        ["TTFT p95", f"{b.ttft_p95_s:.2f} s", (f"SLO {t.ttft_p95_s:g} s; " if t.ttft_p95_s
                                                else "") + "prefill + M/M/c queueing"],
        *peak_rows(b),
        ["admission", f"queue ≤ {b.queue_depth_limit}", "per replica; reject with 429 beyond "
         + ("(keeps queueing inside the TTFT SLO)" if t.ttft_p95_s else
            "(about two service times of queueing; --ttft sizes it to an SLO)")],
        ["cost", f"${b.cost_per_hour:,.2f}/h" if b.cost_per_hour else "-",
         f"${b.cost_per_million:.3f} per 1M output tokens" if b.cost_per_million else
         "no GPU price in the catalog"],
        daily_row(b, rec),
    ]
    if b.users_per_gpu:
        rows.append(["users per GPU", f"{b.users_per_gpu:.0f}", ""])
    lines.append(table(rows))
    lines += ["", p("Command", "bold"), "  " + rec.command, ""]
    if len(rec.plans) > 1:
        per = " per request served" if any(q.rejected_share for q in rec.plans) else ""
        lines.append(p(f"Alternatives (ranked by cost{per})", "bold"))
        lines += [alternatives_table(rec.plans), ""]
    for note in rec.advice + b.notes:
        lines.append(f"{p('advice', 'yellow')}: {note}")
    out.write("\n".join(lines) + "\n")
