"""`kvplan simulate` (registered on the main Typer app). Heavy imports stay inside."""

from __future__ import annotations

import json
import sys
from typing import Optional

import typer

from kvplan.cli_plan import (
    CATALOG,
    JSON_OPT,
    KVD_ONE,
    LORA,
    LORA_RANK,
    MAX_LORAS,
    MML,
    MNBT,
    OUTPUT,
    PREFIX,
    PROMPT,
    SPEC,
    TRACE,
    UTIL,
    VERSION,
    WORKLOAD,
    build_workload,
    memory_extras,
)
from kvplan.errors import BadInput


def parse_sweep(spec: str) -> tuple[str, list[float]]:
    """`concurrency=1:1024` (geometric ladder) or `rate=1:50` / `rate=1:50:12` (points)."""
    try:
        axis, rng = spec.split("=", 1)
        axis = axis.strip().lower()
        parts = [float(x) for x in rng.split(":")]
        lo, hi = parts[0], parts[1]
        n = int(parts[2]) if len(parts) > 2 else None
    except (ValueError, IndexError):
        raise BadInput(f"cannot read --sweep {spec!r}",
                       hint="use concurrency=1:1024 or rate=1:50[:points]") from None
    if axis not in ("concurrency", "rate") or lo <= 0 or hi < lo:
        raise BadInput(f"cannot read --sweep {spec!r}",
                       hint="axis is concurrency or rate; bounds must be positive, low:high")
    if axis == "concurrency":
        vals, v = [], int(lo)
        while v < hi:
            vals.append(v)
            v = max(v + 1, int(round(v * 1.5)))
        return axis, [float(x) for x in sorted(set(vals + [int(hi)]))]
    n = n or 10
    return axis, [lo + (hi - lo) * i / (n - 1) for i in range(n)] if n > 1 else [lo]


def register(app: typer.Typer) -> None:
    @app.command("simulate")
    def simulate_cmd(
        model: str = typer.Argument(...),
        gpu: Optional[str] = typer.Option(None, "--gpu", "-g"),
        tensor_parallel_size: int = typer.Option(1, "--tensor-parallel-size", "-tp"),
        max_model_len: Optional[str] = MML, kv_cache_dtype: str = KVD_ONE,
        gpu_memory_utilization: Optional[float] = UTIL,
        max_num_batched_tokens: Optional[str] = MNBT,
        max_num_seqs: Optional[int] = typer.Option(None, "--max-num-seqs",
                                                   help="Engine cap (default: vLLM's)."),
        workload: Optional[str] = WORKLOAD, prompt_tokens: Optional[str] = PROMPT,
        output_tokens: Optional[str] = OUTPUT, trace: Optional[str] = TRACE,
        prefix_hit: float = PREFIX,
        rate: Optional[float] = typer.Option(None, "--rate", help="Open loop, req/s."),
        burstiness: float = typer.Option(1.0, "--burstiness"),
        concurrency: Optional[int] = typer.Option(None, "--concurrency",
                                                  help="Closed loop: N clients."),
        duration: Optional[float] = typer.Option(None, "--duration",
                                                 help="Seconds of arrivals."),
        requests: Optional[int] = typer.Option(None, "--requests"),
        seed: int = typer.Option(0, "--seed"),
        admission_cap: Optional[int] = typer.Option(None, "--admission-cap",
                                                    help="Max requests in the engine; "
                                                    "more are rejected (429)."),
        queue_limit: Optional[int] = typer.Option(None, "--queue-limit",
                                                  help="Max waiting requests; more are "
                                                  "rejected (429)."),
        sweep: Optional[str] = typer.Option(None, "--sweep",
                                            help="concurrency=1:1024 or rate=1:50[:n]"),
        compare_cap: bool = typer.Option(True, "--compare-cap/--no-compare-cap",
                                         help="Sweeps: also run with the recommended cap."),
        ttft: Optional[float] = typer.Option(None, "--ttft", help="Goodput TTFT SLO, s."),
        tpot: Optional[float] = typer.Option(None, "--tpot", help="Goodput TPOT SLO, ms."),
        plot: Optional[str] = typer.Option(None, "--plot", help="Write a PNG (needs the "
                                           "'plot' extra: pip install kvplan[plot])."),
        enable_lora: bool = LORA, max_loras: int = MAX_LORAS, max_lora_rank: int = LORA_RANK,
        speculative_config: Optional[str] = SPEC,
        vllm_version: Optional[str] = VERSION,
        catalog: Optional[list[str]] = CATALOG, as_json: bool = JSON_OPT,
    ) -> None:
        """Simulate one vLLM engine under load: throughput, latency, preemptions, collapse."""
        from kvplan.sim.setup import run_single, run_sweep
        from kvplan.sources.resolve import resolve_gpu, resolve_model

        for name, v in (("--rate", rate), ("--duration", duration), ("--ttft", ttft),
                        ("--tpot", tpot)):
            if v is not None and v <= 0:
                raise BadInput(f"{name} must be positive")
        for name, v in (("--concurrency", concurrency), ("--requests", requests),
                        ("--max-num-seqs", max_num_seqs), ("--admission-cap", admission_cap)):
            if v is not None and v < 1:
                raise BadInput(f"{name} must be >= 1")
        if queue_limit is not None and queue_limit < 0:
            raise BadInput("--queue-limit must be >= 0")
        if rate and concurrency:
            raise BadInput("--rate and --concurrency are exclusive",
                           hint="open loop (--rate) or closed loop (--concurrency)")
        tr = None
        if trace:
            from kvplan.sources.trace import read_trace

            tr = read_trace(trace)
        # the trace's lengths (recommended cap, sweeps, the fix) as recommend reads them
        wl = build_workload(workload, prompt_tokens, output_tokens, tr, rate, None,
                            burstiness, None, 0.0, prefix_hit)
        m = resolve_model(model, catalog)
        g = resolve_gpu(gpu, None, catalog)
        extra = memory_extras(enable_lora, max_loras, max_lora_rank, speculative_config,
                              catalog, vllm_version)
        common = dict(model=m, gpu=g, tp=tensor_parallel_size, mml=max_model_len, extra=extra,
                      kv=kv_cache_dtype, util=gpu_memory_utilization,
                      mnbt=max_num_batched_tokens, seqs=max_num_seqs, version=vllm_version,
                      wl=wl, seed=seed, admission_cap=admission_cap, queue_limit=queue_limit,
                      ttft=ttft, tpot=tpot)
        if sweep:
            axis, values = parse_sweep(sweep)
            res = run_sweep(axis=axis, values=values, compare_cap=compare_cap,
                            duration=duration, requests=requests, **common)
            out = res.to_json()
        else:
            res = run_single(rate=rate, burstiness=burstiness, concurrency=concurrency,
                             duration=duration, requests=requests, trace=tr, **common)
            out = res
        if plot:
            from kvplan.render.sim import write_plot

            write_plot(out, plot)
        if as_json:
            payload = {k: v for k, v in out.items() if k != "series"}
            sys.stdout.write(json.dumps(payload, indent=2) + "\n")
        else:
            from kvplan.render.sim import render_single, render_sweep

            (render_sweep if sweep else render_single)(out)
