"""Accuracy of `kvplan size` against real vLLM start-up figures (benchmarks/cases.yaml).

Three comparisons per case, where the log has the numbers:
  A. KV given: --kv-cache-memory-bytes = the logged "Available KV cache memory"; compare
     blocks, "GPU KV cache size" tokens and "Maximum concurrency" (target: <= 0.5 %).
  B. End to end from the GPU's memory and the utilization: available KV bytes (target:
     within 0.75 GiB) and KV tokens (target: median error <= 3 %).
  C. Weights against "Model loading took" (target: within 2 %).

Run:  python benchmarks/accuracy.py            (prints the table)
      python benchmarks/accuracy.py --write    (also rewrites the table in docs/accuracy.md)
"""

from __future__ import annotations

import re
import statistics
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from kvplan.core.sizing import EngineArgs, size  # noqa: E402
from kvplan.core.versions import VllmVersion  # noqa: E402
from kvplan.errors import KvplanError  # noqa: E402
from kvplan.sources.resolve import resolve_gpu, resolve_model  # noqa: E402

GiB = 1 << 30

# How the free-text GPU field of a case maps onto a catalog id (first match wins).
GPU_PATTERNS = [
    (r"H100.*(NVL)", "h100-nvl"), (r"H100.*PCIe", "h100-pcie"), (r"H100", "h100-sxm"),
    (r"H200", "h200-sxm"), (r"H20\b", "h20"), (r"GB10|DGX Spark", "gb10"),
    (r"A100.*40", "a100-sxm4-40gb"), (r"A100", "a100-sxm4-80gb"),
    (r"L40S", "l40s"), (r"\bL4\b", "l4"), (r"A10G", "a10g"),
    (r"RTX 3090", "rtx-3090"), (r"RTX 4070 Laptop", "rtx-4070-laptop"), (r"RTX 4080", "rtx-4080"),
    (r"RTX 4090", "rtx-4090"),
    (r"RTX 5090", "rtx-5090"),
    (r"RTX PRO 6000", "rtx-pro-6000"), (r"RTX A6000", "rtx-a6000"), (r"T4", "t4"),
    (r"MI300X", "mi300x"),
    (r"B200", "b200"),
]


def gpu_id(text: str | None) -> str | None:
    for pat, gid in GPU_PATTERNS:
        if text and re.search(pat, text):
            return gid
    return None


def version_of(case: dict) -> str:
    v = case.get("vllm_version")
    if v:
        m = re.match(r"v?(\d+\.\d+(?:\.\d+)?)", str(v))
        if m and not str(v).startswith("0.1.dev"):
            return m.group(1)
    if case.get("vllm_version_assumed"):
        return str(case["vllm_version_assumed"])  # inferred by the case (see its comment)
    obs = case.get("observed") or {}
    if "cpu_blocks" in obs or "gpu_blocks" in obs:
        return "0.6"
    return "0.11"  # undated V1 logs: the era most public logs come from (documented)


def args_of(case: dict, version: str) -> EngineArgs:
    bs = case.get("block_size")
    choices = VllmVersion.of(version).block_size_choices()
    if bs and choices and bs not in choices:
        bs = None  # a block size the engine chose (hybrid alignment), not a flag it accepts
    a = EngineArgs(
        tensor_parallel_size=int(case.get("tensor_parallel_size") or 1),
        pipeline_parallel_size=int(case.get("pipeline_parallel_size") or 1),
        max_model_len=case.get("max_model_len"),
        kv_cache_dtype=str(case.get("kv_cache_dtype") or "auto"),
        gpu_memory_utilization=None if "gpu_memory_utilization" in (case.get("inferred") or [])
        else case.get("gpu_memory_utilization"),
        max_num_seqs=case.get("max_num_seqs"),
        max_num_batched_tokens=case.get("max_num_batched_tokens"),
        enforce_eager=bool(case.get("enforce_eager")),
        block_size=bs,
    )
    q = str(case.get("quantization") or "")
    if q in ("fp8",) and "fp8" not in case["model"].lower():
        a.quantization = "fp8"  # online FP8 quantization of a 16-bit checkpoint
    if case.get("enable_prefix_caching") is not None:
        a.enable_prefix_caching = bool(case["enable_prefix_caching"])
    flags = str(case.get("other_flags") or "")
    m = re.search(r"(?:--decode-context-parallel-size|-dcp)[ =](\d+)", flags)
    if m:
        a.decode_context_parallel_size = int(m.group(1))
    if "--enable-expert-parallel" in flags:
        a.enable_expert_parallel = True
    a.flashinfer_sampler = case.get("sampler") == "flashinfer"
    a.language_model_only = bool(re.search(r"language[_-]model[_-]only", flags, re.I))
    a.disable_custom_all_reduce = bool(case.get("custom_all_reduce_disabled"))
    return a


def pct(pred: float, obs: float) -> float:
    return 100.0 * (pred - obs) / obs


def evaluate(case: dict) -> dict:
    obs = case.get("observed") or {}
    row: dict = {"id": case["id"], "version": version_of(case)}
    skip = []
    try:  # `model_assumed`: a checkpoint the catalog lacks, sized as one of the same shape
        model = resolve_model(case.get("model_assumed") or case["model"])
    except KvplanError as e:
        return {**row, "skip": f"model: {e.message}"}
    gid = gpu_id(case.get("gpu"))
    if case.get("other_flags") and re.search(r"eagle|speculative|lmcache|cpu-offload",
                                             str(case.get("other_flags")), re.I):
        skip.append("speculative decoding / connector / offload changes the pool")
    conc = obs.get("max_concurrency") or {}
    avail = obs.get("available_kv_cache_gib")
    version = row["version"]
    # A. KV given
    if avail and (obs.get("kv_cache_tokens") or conc or obs.get("gpu_blocks")) and not skip:
        a = args_of(case, version)
        a.kv_cache_memory_bytes = round(avail * GiB)
        gpu = resolve_gpu(gid) if gid else resolve_gpu(None, f"{80}GiB")
        try:
            r = size(model, gpu, a, version)
            if obs.get("kv_cache_tokens"):
                row["A_tokens_err"] = pct(r.kv_cache_tokens, obs["kv_cache_tokens"])
            if conc.get("value"):
                row["A_conc_err"] = pct(r.max_concurrency, conc["value"])
            if obs.get("gpu_blocks"):
                row["A_blocks_err"] = pct(r.num_gpu_blocks, obs["gpu_blocks"])
        except KvplanError as e:
            row["A_error"] = e.message
    # B. end to end
    if case.get("b_skip"):
        skip.append(f"B not compared: {case['b_skip']}")
    elif gid and not skip:
        try:
            r = size(model, resolve_gpu(gid), args_of(case, version), version)
            row["weights_gib"] = r.budget.weights / GiB
            if avail is not None:
                row["B_avail_gib_err"] = r.budget.available_kv / GiB - avail
            tokens_obs = obs.get("kv_cache_tokens") or (
                obs["gpu_blocks"] * 16 if obs.get("gpu_blocks") else None)
            if tokens_obs and r.fits:
                row["B_tokens_err"] = pct(r.kv_cache_tokens, tokens_obs)
            if obs.get("model_loading_gib"):
                key = "C_weights_est_err" if r.weights_estimated else "C_weights_err"
                row[key] = pct(r.budget.weights / GiB, obs["model_loading_gib"])
        except KvplanError as e:
            row["B_error"] = e.message
    elif not gid:
        skip.append(f"GPU {case.get('gpu')!r} not in the catalog")
    if skip:
        row["skip"] = "; ".join(skip)
    return row


def fmt(v, unit="%"):
    if v is None:
        return ""
    return f"{v:+.2f}{unit}" if unit == "%" else f"{v:+.2f}"


def main() -> int:
    cases = yaml.safe_load((ROOT / "benchmarks" / "cases.yaml").read_text())
    rows = [evaluate(c) for c in cases]
    lines = ["| case | vLLM | A tokens | A concurrency | A blocks | B avail (GiB) | "
             "B tokens | C weights | note |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append("| {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
            r["id"], r["version"], fmt(r.get("A_tokens_err")), fmt(r.get("A_conc_err")),
            fmt(r.get("A_blocks_err")), fmt(r.get("B_avail_gib_err"), ""),
            fmt(r.get("B_tokens_err")),
            fmt(r.get("C_weights_err")) or (fmt(r.get("C_weights_est_err")) + " (est.)"
                                            if "C_weights_est_err" in r else ""),
            r.get("skip") or r.get("A_error") or r.get("B_error") or ""))

    def col(k):
        return [abs(r[k]) for r in rows if k in r]

    summary = []
    for k, label, target in (("A_tokens_err", "A: KV tokens, KV given", "<= 0.5 %"),
                             ("A_conc_err", "A: max concurrency, KV given", "<= 0.5 %"),
                             ("A_blocks_err", "A: blocks, KV given", "<= 0.5 %"),
                             ("B_avail_gib_err", "B: available KV (GiB)", "<= 0.75 GiB each"),
                             ("B_tokens_err", "B: KV tokens end to end", "median <= 3 %"),
                             ("C_weights_err", "C: weights vs Model loading took, exact "
                              "checkpoint size", "<= 2 %"),
                             ("C_weights_est_err", "C: weights vs Model loading took, "
                              "estimated from the config", "(estimate)")):
        v = col(k)
        if v:
            summary.append(f"| {label} | {len(v)} | {statistics.median(v):.2f} | "
                           f"{max(v):.2f} | {target} |")
    table = "\n".join(["| comparison | cases | median abs err | max abs err | target |",
                       "|---|---|---|---|---|", *summary, "", *lines])
    print(table)
    if "--write" in sys.argv:
        from docs_table import write_section

        write_section(ROOT / "docs" / "accuracy.md", "accuracy-table", table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
