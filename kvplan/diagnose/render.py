"""Human output of `kvplan diagnose`: the verdict, each finding with evidence and fix, the
recommended cap and the observed figures."""

from __future__ import annotations

import sys

from kvplan.diagnose.analyse import Diagnosis
from kvplan.diagnose.findings import fixed, num, pct, prob, span, span_mean
from kvplan.diagnose.window import Level
from kvplan.render.term import Painter, table, use_color

MARK = {"critical": ("✗", "red"), "warning": ("!", "yellow"), "ok": ("✓", "green")}


def _opt(x, fmt) -> str | None:
    return None if x is None else fmt(x)


def _observed_rows(d: Diagnosis) -> list[list[str]]:
    o, rows = d.observed, []
    if o["kv_cache_usage"] is not None:
        kv = Level(0, 0, o["kv_cache_usage_min"], o["kv_cache_usage"], o["kv_cache_usage_max"])
        rows.append(["KV cache usage", span_mean(kv, pct)])
    if o["running"] is not None:
        cap = (f" · max-num-seqs {o['max_num_seqs']} ({o['max_num_seqs_source']})"
               if o["max_num_seqs"] else "")
        run = Level(0, 0, o["running_min"], o["running"], o["running_max"])
        mean = f" (mean {run.mean:.1f})" if run.min != run.max else ""
        rows.append(["running", f"{span(run)}{mean}{cap}"])
    if o["waiting"] is not None:
        g = o["waiting_growth_per_s"]
        wait = Level(0, o["waiting_last"], o["waiting_min"], o["waiting"], o["waiting_max"])
        last = f", last {num(wait.last)}" if wait.min != wait.max else ""
        rows.append(["waiting", f"{span(wait)}{last}" + (f" ({fixed(g, '+.2f')}/s)" if g else "")])
    if o["preemptions_per_s"] is not None:
        share = (f"; {o['preemptions_per_request']:.2%} of finished requests"
                 if o.get("preemptions_per_request") is not None else "")
        rows.append(["preemptions", f"{num(o['preemptions'])} in {o['window_s']:.1f} s "
                     f"({fixed(o['preemptions_per_s'])}/s{share})"])
    if o["requests_per_s"] is not None:
        rows.append(["requests", f"{fixed(o['requests_per_s'])}/s completed"])
    toks = [x for x in (_opt(o["prompt_tokens_per_s"], lambda v: f"{num(v)} prompt/s"),
                        _opt(o["generation_tokens_per_s"], lambda v: f"{num(v)} output/s")) if x]
    if toks:
        rows.append(["tokens", " · ".join(toks)])
    lat = [x for x in (_opt(o["ttft_mean_s"], lambda v: f"TTFT {v:.3f} s"),
                       _opt(o["itl_mean_s"], lambda v: f"ITL {v * 1000:.1f} ms"),
                       _opt(o["queue_time_mean_s"], lambda v: f"queue {v:.2f} s")) if x]
    if lat:
        rows.append(["latency (mean)", " · ".join(lat)])
    if o["prefix_cache_hit_rate"] is not None:
        rows.append(["prefix cache hits", pct(o["prefix_cache_hit_rate"])])
    if o["kv_pool_tokens"]:
        blocks = (f"{o['num_gpu_blocks']:,} blocks × {o['block_size']} = "
                  if o["num_gpu_blocks"] and o["block_size"] else "")
        rows.append(["KV pool", f"{blocks}{o['kv_pool_tokens']:,} tokens per engine "
                     f"({o['kv_pool_source']})"])
    return rows


def _engine_rows(d: Diagnosis) -> list[list[str]]:
    rows = [["engine", "running", "waiting", "KV", "preempt/s", "rec. cap", "findings"]]
    for e in d.engines:
        rows.append([e["engine"], _opt(e["running"], lambda v: f"{v:.1f}") or "-",
                     _opt(e["waiting"], lambda v: f"{v:.1f}") or "-",
                     _opt(e["kv_cache_usage"], pct) or "-",
                     _opt(e["preemptions_per_s"], lambda v: f"{v:.2f}") or "-",
                     str(e["recommended_max_num_seqs"] or "-"), ", ".join(e["findings"])])
    return rows


def render(d: Diagnosis, stream=None) -> None:
    out = stream or sys.stdout
    p = Painter(use_color(out))
    o = d.observed
    who = "SGLang" if d.server == "sglang" else "vLLM"
    model = f" · {', '.join(d.model_names)}" if d.model_names else ""
    n = len(d.scrapes)
    lines = [p(f"kvplan diagnose · {who}{model} · {n} scrape{'s' if n != 1 else ''}"
               + (f" over {o['window_s']:.1f} s" if n > 1 else ""), "dim")]
    bad = d.verdict != "healthy"
    lines.append(p(d.verdict.upper(), "red" if bad else "green", "bold"))
    for f in d.findings:
        mark, colour = MARK[f.severity]
        lines += ["", f"{p(mark, colour, 'bold')} {p(f.title, 'bold')} "
                  + p(f"[{f.id}, {f.severity}]", "dim")]
        for i, e in enumerate(f.evidence):
            lines.append(f"    {'evidence' if i == 0 else '        '}  {e}")
        for i, x in enumerate(f.fix):
            lines.append(f"    {'fix' if i == 0 else '   '}       {x}")
    rec = d.recommendation
    if rec:
        flag = "--max-running-requests" if d.server == "sglang" else "--max-num-seqs"
        at = (f" at {rec.max_num_seqs} (kvplan size; {rec.now_pool_tokens:,} now)"
              if rec.resized else "")
        per = (f"{num(rec.tokens_per_seq)} tokens of KV per running sequence, pool "
               f"{rec.pool_tokens:,} tokens{at}" if rec.tokens_per_seq and rec.pool_tokens
               else f"{pct(rec.kv_per_seq)} of the pool per running sequence")
        spread = (f"; CV {rec.cv:.2f}, {rec.shape}; overflow risk {prob(rec.overflow)} "
                  f"≤ {rec.risk:.0%}" if rec.demand is not None else "")
        where = f", engine {rec.engine}" if len(d.engines) > 1 else ""
        lines += ["", f"{p('Recommended ' + flag, 'bold')}: {p(str(rec.max_num_seqs), 'bold')} "
                  + p(f"({per}{spread}; mean KV usage {pct(rec.mean_usage)}{where})", "dim")]
    rows = _observed_rows(d)
    if rows:
        lines += ["", p("Observed", "bold"), table(rows)]
    if len(d.engines) > 1:
        lines += ["", p("Engines", "bold"), table(_engine_rows(d), align="lrrrrr")]
    c = d.cross_check
    if c:
        obs = (f"{c['observed_num_gpu_blocks']:,} on the server"
               if c["observed_num_gpu_blocks"] else "not reported by the server")
        lines += ["", p("Cross-check with kvplan size", "bold"), table([
            ["deployment", f"{c['model']} on {c['gpu']}, TP{c['tensor_parallel_size']}, "
                           f"vLLM {c['vllm_version']}"],
            ["KV blocks", f"{c['predicted_num_gpu_blocks']:,} predicted, {obs}"],
            ["max_model_len", f"{c['max_model_len']:,}: {c['blocks_per_request']:,} blocks per "
                              f"request; {c['guaranteed_max_num_seqs']} such requests always "
                              "fit (a cap that never preempts)"],
        ])]
    for note in d.notes:
        lines.append(f"{p('note', 'yellow')}: {note}")
    out.write("\n".join(lines) + "\n")
