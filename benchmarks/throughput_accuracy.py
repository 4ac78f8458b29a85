"""Accuracy of the step-time model against published vLLM measurements
(benchmarks/throughput_cases.yaml): single-stream decode tokens/s and throughput at a stated
concurrency. Target: median error <= 20 % on tokens/s.

    python benchmarks/throughput_accuracy.py [--write]    (--write updates docs/accuracy.md)
"""

from __future__ import annotations

import math
import re
import statistics
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from accuracy import gpu_id  # noqa: E402

from kvplan.core import capacity, perf  # noqa: E402
from kvplan.core.sizing import EngineArgs, size  # noqa: E402
from kvplan.core.workload import LengthDist, Workload  # noqa: E402
from kvplan.errors import KvplanError  # noqa: E402
from kvplan.sources.resolve import resolve_gpu, resolve_model  # noqa: E402

SHAREGPT = (220, 200)  # mean prompt / output tokens of vLLM's ShareGPT benchmark (Llama tok.)


def lengths(c: dict) -> tuple[LengthDist, LengthDist, str] | None:
    if c.get("input_len") and c.get("output_len"):
        return (LengthDist.fixed(int(c["input_len"])), LengthDist.fixed(int(c["output_len"])),
                "fixed")
    n = c.get("num_prompts")
    if n and c.get("total_input_tokens") and c.get("total_output_tokens"):
        pi, po = c["total_input_tokens"] / n, c["total_output_tokens"] / n
        sig = 0.8
        return (LengthDist.lognormal(pi / math.exp(sig ** 2 / 2), sig, "trace mean"),
                LengthDist.lognormal(po / math.exp(sig ** 2 / 2), sig, "trace mean"), "means")
    if "sharegpt" in str(c.get("dataset") or "").lower():
        sig = 0.8
        return (LengthDist.lognormal(SHAREGPT[0] / math.exp(sig ** 2 / 2), sig, "sharegpt"),
                LengthDist.lognormal(SHAREGPT[1] / math.exp(sig ** 2 / 2), sig, "sharegpt"),
                "sharegpt")
    return None


def measured_tps(c: dict, batch: int) -> float | None:
    m = c.get("measured") or {}
    for k in ("output_tokens_per_s",):
        if m.get(k):
            return float(m[k])
    for k in ("per_user_tokens_per_s", "output_tokens_per_s_per_request_approx",
              "per_user_tokens_per_s_approx"):
        if m.get(k):
            return float(m[k]) * batch
    return None


def model_max(model) -> int:
    from kvplan.core.arch import normalize

    return normalize(model.config).max_position


def evaluate(c: dict) -> dict:
    row = {"id": c["id"]}
    try:
        model = resolve_model(c["model"])
    except KvplanError:
        return {**row, "skip": "model not in catalog"}
    gid = gpu_id(c.get("gpu"))
    if not gid:
        return {**row, "skip": "GPU not in catalog"}
    gpu = resolve_gpu(gid)
    conc = c.get("concurrency") or c.get("batch_size")
    q = str(c.get("quantization") or "")
    args = EngineArgs(tensor_parallel_size=int(c.get("tensor_parallel_size") or 1),
                      kv_cache_dtype="fp8" if "fp8" in str(c.get("kv_cache_dtype") or "")
                      else "auto",
                      quantization="fp8" if "online" in q else None,
                      max_num_seqs=c.get("max_num_seqs"))
    ls = lengths(c)
    if ls is None:
        return {**row, "skip": "no lengths"}
    p, o, how = ls
    # benchmarks set --max-model-len to what the run needs; the published commands often
    # do not show it
    need = p.quantile(0.999) + o.quantile(0.999)
    args.max_model_len = min(model_max(model), max(4096, 1024 * math.ceil(need / 1024)))
    try:
        r = size(model, gpu, args, str(c.get("vllm_version") or "0.11")[:4]
                 if re.match(r"0\.\d", str(c.get("vllm_version") or "")) else "0.11",
                 hints=False)
        if r.max_model_len < need and args.max_model_len is None:
            pass
    except KvplanError as e:
        return {**row, "skip": f"size: {e.message}"}
    if not r.fits:
        return {**row, "skip": f"does not fit: {r.failure[:60]}"}
    wl = Workload("case", p, o).clip(r.max_model_len)
    if not isinstance(conc, int):
        return {**row, "skip": "a burst of requests at once (no steady state to compare)"}
    row["kind"] = "single" if conc == 1 else "concurrency"
    # more clients than the KV pool holds: the rest wait (or are preempted); the engine runs
    # at most the KV ceiling
    d = capacity.demand(r.groups, wl, r.max_model_len)
    running = max(1, min(conc, r.max_num_seqs, capacity.mean_ceiling(d, r.usable_blocks)))
    if running < conc:
        row["kind"] = "concurrency (KV-bound)"
    pm = perf.build(r, gpu)
    pt = perf.operating_point(pm, running, perf.traffic(wl), r.max_num_batched_tokens)
    meas = measured_tps(c, conc)
    if meas is None:
        return {**row, "skip": "no tokens/s measured"}
    row.update(batch=conc, pred=pt.output_tokens_per_s, meas=meas,
               err=100 * (pt.output_tokens_per_s - meas) / meas, lengths=how)
    tp = (c.get("measured") or {}).get("mean_tpot_ms") or (c.get("measured") or {}).get(
        "median_tpot_ms")
    if tp:
        row["tpot_err"] = 100 * (pt.tpot_ms - tp) / tp
    return row


def main() -> int:
    cases = yaml.safe_load((ROOT / "benchmarks" / "throughput_cases.yaml").read_text())
    rows = [evaluate(c) for c in cases]
    lines = ["| case | kind | batch | predicted tok/s | measured tok/s | error | note |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "skip" in r:
            lines.append(f"| {r['id']} |  |  |  |  |  | {r['skip']} |")
        else:
            lines.append(f"| {r['id']} | {r['kind']} | {r['batch']} | {r['pred']:,.0f} | "
                         f"{r['meas']:,.0f} | {r['err']:+.1f}% | {r['lengths']} lengths |")
    summary = ["| kind | cases | median abs error | mean signed error |", "|---|---|---|---|"]
    for kind in ("single", "concurrency", None):
        sel = [r for r in rows if "err" in r and (kind is None or r["kind"].startswith(kind))]
        if sel:
            errs = [r["err"] for r in sel]
            summary.append(f"| {kind or 'all'} | {len(sel)} | "
                           f"{statistics.median(abs(e) for e in errs):.1f}% | "
                           f"{statistics.mean(errs):+.1f}% |")
    table = "\n".join(summary + ["", *lines])
    print(table)
    if "--write" in sys.argv:
        from docs_table import write_section

        write_section(ROOT / "docs" / "accuracy.md", "throughput-table", table,
                      "\n## Throughput model against published measurements\n\n"
                      "`benchmarks/throughput_accuracy.py` compares the step-time model "
                      "(docs/recommend.md) with published vLLM results "
                      "(`benchmarks/throughput_cases.yaml`). Target: median error <= 20 % on "
                      "tokens/s.\n\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
