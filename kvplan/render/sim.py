"""Human output of `kvplan simulate` (and the optional PNG plot)."""

from __future__ import annotations

import sys

from kvplan.core import preemptfloor as floor
from kvplan.render.plan import bar_chart
from kvplan.render.term import Painter, table, use_color
from kvplan.units import fmt_int


def _fmt(x, n=2) -> str:
    return "-" if x is None else f"{x:,.{n}f}"


def _blocks(d: dict) -> str:
    """vLLM's num_gpu_blocks, as `size` and `recommend` print it, and the usable ones the
    simulation runs on (one is vLLM's null block)."""
    usable = d["usable_blocks"]
    return (f"{fmt_int(d.get('num_gpu_blocks', usable + 1))} blocks of {d['block_size']} "
            f"({fmt_int(usable)} usable)")


def _head(d: dict, p: Painter) -> list[str]:
    return [f"{p(d['model'], 'bold')} on {p(d['gpu'], 'bold')} TP{d['tensor_parallel_size']} · "
            f"workload {d['workload']} · max_model_len {fmt_int(d['max_model_len'])} · "
            f"{_blocks(d)} · max_num_seqs "
            f"{d['max_num_seqs']}"] + [p(f"note: {n}", "yellow") for n in d.get("notes", [])]


def _goodput(d: dict) -> str:
    """Goodput names its SLOs; with none it is every completed request (the completion
    rate), and says so."""
    slos = [f"TTFT ≤ {d['ttft_slo_s']:g} s" if d.get("ttft_slo_s") else "",
            f"TPOT ≤ {d['tpot_slo_ms']:g} ms" if d.get("tpot_slo_ms") else ""]
    slos = [x for x in slos if x]
    rate = f"{_fmt(d['goodput_requests_per_s'], 3)} req/s"
    if not slos:
        return f"{rate}: every completed request (no --ttft or --tpot given)"
    return f"{rate} within {' and '.join(slos)}"


def render_single(d: dict, stream=None) -> None:
    out = stream or sys.stdout
    p = Painter(use_color(out))
    lines = _head(d, p) + [""]
    rows = [
        ["output tokens/s", _fmt(d["output_tokens_per_s"], 1)],
        ["requests", f"{d['requests_completed']:,} completed, {d['requests_rejected']:,} "
                     "rejected" + (f" ({d['requests_too_long']:,} with prompts of "
                                   "max_model_len or more: HTTP 400)"
                                   if d.get("requests_too_long") else "")],
        ["goodput", _goodput(d)],
        ["TTFT", f"p50 {_fmt(d['ttft_p50_s'])} s · p95 {_fmt(d['ttft_p95_s'])} s · "
                 f"p99 {_fmt(d['ttft_p99_s'])} s"],
        ["TPOT", f"p50 {_fmt(d['tpot_p50_ms'], 1)} ms · p99 {_fmt(d['tpot_p99_ms'], 1)} ms"],
        ["end to end", f"p50 {_fmt(d['e2e_p50_s'])} s · p99 {_fmt(d['e2e_p99_s'])} s"],
        ["preemptions", f"{d['preemptions']:,} ({fmt_int(d['recomputed_tokens'])} tokens "
                        "recomputed)"],
        ["KV usage", f"mean {_fmt(d['kv_usage_mean'], 2)} · max {_fmt(d['kv_usage_max'], 2)}"],
        ["queue", f"up to {d['waiting_max']:,} waiting"],
        ["simulated", f"{_fmt(d['simulated_seconds'], 1)} s in {d['events']:,} events"],
    ]
    lines.append(table(rows))
    series = d.get("series") or []
    if series:
        step = max(1, len(series) // 24)
        chart = [(f"{t:,.0f}s", u * 100, f"{w} waiting" if w else "")
                 for t, u, _, w in series[::step]]
        lines += ["", p("KV usage (%) over time", "bold"), bar_chart(chart, p, 30)]
    verdict = _preemption_verdict(d)
    if verdict:
        lines.append(p("\n" + verdict[0], verdict[1]))
    out.write("\n".join(lines) + "\n")


def _preemption_verdict(d: dict) -> tuple[str, str] | None:
    """(line, colour) on a run's preemptions: lower the cap when it is above the
    recommended one; at or below it, within the planned risk or not (core/preemptfloor.py)."""
    n, done = d["preemptions"], d["requests_completed"]
    if not n:
        return None
    cap, rec = d["max_num_seqs"], d.get("recommended_max_num_seqs")
    share = floor.share_text(n, done, "completed")
    what = f"the engine preempted {n:,} time{'' if n == 1 else 's'}" + (
        f" ({share})" if share else "")
    if rec is None:
        return what, "red"
    if cap > rec:
        return (f"{what}: cap max_num_seqs at {rec} (kvplan recommend; now {cap}) and bound "
                "the queue", "red")
    at = f"at max_num_seqs {cap}, {'the' if cap == rec else 'below the'} recommended {rec}"
    if not d["preemptions_above_floor"]:
        return f"{what} {at}: within the planned risk ({floor.within_text(n, done)})", "green"
    return (f"{what} {at}, yet beyond the {floor.SHARE:.1%} of requests kvplan accepts: plan "
            "a lower risk (kvplan recommend --preempt-risk 0.001) or more KV per replica "
            "(--kv-cache-dtype fp8, a higher --gpu-memory-utilization)", "yellow")


def render_sweep(d: dict, stream=None) -> None:
    out = stream or sys.stdout
    p = Painter(use_color(out))
    axis = d["axis"]
    lines = _head(d, p) + [""]
    capped = d.get("with_recommended_cap")
    head = [axis, "tok/s", "TTFT p50 s", "TPOT p50 ms", "preempt", "recomputed"]
    if capped:
        head += ["|", "capped tok/s", "TTFT p50 s", "preempt", "429s"]
    rows = [head]
    for i, pt in enumerate(d["points"]):
        row = [str(pt[axis]), _fmt(pt["output_tokens_per_s"], 1), _fmt(pt["ttft_p50_s"]),
               _fmt(pt["tpot_p50_ms"], 1), fmt_int(pt["preemptions"]),
               fmt_int(pt["recomputed_tokens"])]
        if capped:
            c = capped[i]
            row += ["|", _fmt(c["output_tokens_per_s"], 1), _fmt(c["ttft_p50_s"]),
                    fmt_int(c["preemptions"]), fmt_int(c["requests_rejected"])]
        rows.append(row)
    lines.append(table(rows, align="rrrrrrlrrrr"))
    chart = []
    for pt in d["points"]:
        mark = []
        if pt[axis] == d["knee"]:
            mark.append("← knee")
        if pt[axis] == d["collapse"]:
            mark.append("← collapse")
        if pt[axis] == d.get("latency_collapse"):
            mark.append("← latency collapse")
        if pt["preemptions"] and not mark:
            mark.append("preempting")
        chart.append((str(pt[axis]), pt["output_tokens_per_s"], " ".join(mark)))
    lines += ["", p(f"output tokens/s by {axis}", "bold"), bar_chart(chart, p)]
    lines.append("")
    lines.append(f"knee at {axis} {p(str(d['knee']), 'green')}: past it more load adds "
                 "relatively less throughput than latency")
    if d["collapse"] is not None:
        lines.append(p(f"collapse at {axis} {d['collapse']}: throughput falls more than 10 % "
                       "below its peak while the engine preempts and recomputes", "red"))
    if d.get("latency_collapse") is not None:
        lines.append(p(f"latency collapse at {axis} {d['latency_collapse']}: median TTFT over "
                       "10x the knee's while the engine preempts", "red"))
    if d["collapse"] is None and d.get("latency_collapse") is None:
        lines.append("no collapse in this range")
    if capped:
        lines += _cap_lines(d, capped, p)
    out.write("\n".join(lines) + "\n")


def _cap_lines(d: dict, capped: list[dict], p: Painter) -> list[str]:
    """The recommended cap's run beside the uncapped one, worded by what the runs show: a
    fix only when the uncapped engine preempted."""
    axis, top, ctop = d["axis"], d["points"][-1], capped[-1]
    pre = sum(pt["preemptions"] for pt in d["points"])
    name = "the fix" if pre else "with the recommended cap"
    out = [p(f"{name} -- --max-num-seqs {d['recommended_max_num_seqs']} (kvplan recommend) and "
             f"at most {d.get('fix_queue_limit')} waiting (429 beyond): at {axis} {top[axis]}, "
             f"{ctop['output_tokens_per_s']:,.1f} tok/s, median TTFT {_fmt(ctop['ttft_p50_s'])} "
             f"s, {ctop['preemptions']:,} preemptions; uncapped: "
             f"{top['output_tokens_per_s']:,.1f} tok/s, median TTFT {_fmt(top['ttft_p50_s'])} s, "
             f"{top['preemptions']:,} preemptions", *(("green",) if pre else ()))]
    verdict = _cap_verdict(d, capped, pre, sum(c["preemptions"] for c in capped))
    return out + ([verdict] if verdict else [])


def _cap_verdict(d: dict, capped: list[dict], pre: int, cpre: int) -> str | None:
    """What the cap cost (throughput over 10 % below the uncapped peak, a higher median
    TTFT) against what it removed: no preemption to remove, all of them, or some."""
    peak = max(pt["output_tokens_per_s"] for pt in d["points"])
    cost = 1 - capped[-1]["output_tokens_per_s"] / peak
    paid = " and ".join(([f"gives up {cost:.0%} of the uncapped peak ({peak:,.1f} tok/s)"]
                         if cost > 0.1 else []) + _slower(d, capped))
    more = "; serve more load with more replicas (kvplan recommend --rate), not a higher cap"
    if not pre:
        return ("the uncapped engine preempted at no point of this range: the cap removes no "
                "preemption here" + (f", {paid}" if paid else "") + f"; max_num_seqs "
                f"{d['max_num_seqs']} ran this mix without preemption at these loads")
    if not paid:
        return None
    if cpre == 0:
        spiral = d["collapse"] is not None or d.get("latency_collapse") is not None
        return (f"the cap {paid} to keep every admitted request out of the preemption "
                f"{'spiral' if spiral else 'recomputes'} ({pre:,} preemptions uncapped over "
                f"the sweep, none capped){more}")
    if cpre < pre:
        return f"the cap {paid}, and cuts the sweep's preemptions from {pre:,} to {cpre:,}{more}"
    return (f"the cap {paid} without cutting preemptions ({pre:,} uncapped, {cpre:,} capped "
            "over the sweep)")


def _slower(d: dict, capped: list[dict]) -> list[str]:
    """'has a higher median TTFT at 4 of 10 points (from rate 0.5)' (over 10 % higher)."""
    axis = d["axis"]
    worse = [pt[axis] for pt, c in zip(d["points"], capped)
             if (c["ttft_p50_s"] or 0) > 1.1 * (pt["ttft_p50_s"] or 0)]
    if not worse:
        return []
    return [f"has a higher median TTFT at {len(worse)} of {len(capped)} points (from {axis} "
            f"{worse[0]})"]


def write_plot(d: dict, path: str) -> None:
    """PNG of the run (KV usage / queue) or the sweep (throughput, with and without cap)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        from kvplan.errors import BadInput

        raise BadInput("--plot needs matplotlib", hint="pip install 'kvplan[plot]'") from None
    fig, ax = plt.subplots(figsize=(8, 4.5))
    if "points" in d:
        axis = d["axis"]
        xs = [pt[axis] for pt in d["points"]]
        ax.plot(xs, [pt["output_tokens_per_s"] for pt in d["points"]], "o-", label="vLLM default")
        if d.get("with_recommended_cap"):
            ax.plot(xs, [pt["output_tokens_per_s"] for pt in d["with_recommended_cap"]], "s--",
                    label=f"max_num_seqs {d['recommended_max_num_seqs']}")
        ax.set_xscale("log" if axis == "concurrency" else "linear")
        ax.set_xlabel(axis)
        ax.set_ylabel("output tokens/s")
        ax.legend()
    else:
        t = [s[0] for s in d["series"]]
        ax.plot(t, [s[1] * 100 for s in d["series"]], label="KV usage %")
        ax.plot(t, [s[3] for s in d["series"]], label="waiting")
        ax.set_xlabel("simulated seconds")
        ax.legend()
    ax.set_title(f"{d['model']} on {d['gpu']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
