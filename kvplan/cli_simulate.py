"""`kvplan simulate` (registered on the main Typer app). Heavy imports stay inside."""

from __future__ import annotations

import sys
from typing import Optional

import typer

from kvplan.cli_plan import (
    CATALOG,
    ENV,
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

MAX_SWEEP_POINTS = 50  # each point is a whole run (twice with the fix)


def parse_sweep(spec: str) -> tuple[str, list[float]]:
    """`concurrency=1:1024` (a geometric ladder, x1.5), `concurrency=1:1024:8` (8 geometric
    points), `rate=1:50` (10 points) or `rate=1:50:12`. Bounds are finite and positive (whole
    clients for concurrency), low <= high, N a whole number >= 1 (1 only when low = high);
    at most MAX_SWEEP_POINTS distinct points."""
    import math

    hint = "use concurrency=1:1024[:points] or rate=1:50[:points]"
    try:
        axis, rng = spec.split("=", 1)
        axis = axis.strip().lower()
        parts = [float(x) for x in rng.split(":")]
    except ValueError:
        raise BadInput(f"cannot read --sweep {spec!r}", hint=hint) from None
    if axis not in ("concurrency", "rate"):
        raise BadInput(f"cannot read --sweep {spec!r}: the axis is concurrency or rate",
                       hint=hint)
    if len(parts) not in (2, 3):
        raise BadInput(f"cannot read --sweep {spec!r}: give LOW:HIGH or LOW:HIGH:POINTS",
                       hint=hint)
    lo, hi = parts[0], parts[1]
    if not all(math.isfinite(x) for x in parts):
        raise BadInput(f"--sweep {spec!r}: bounds and points must be finite numbers",
                       hint=hint)
    if lo <= 0 or hi < lo:
        raise BadInput(f"--sweep {spec!r}: the bounds must be positive, low <= high",
                       hint=hint)
    if axis == "concurrency" and not (lo >= 1 and lo == int(lo) and hi == int(hi)):
        raise BadInput(f"--sweep {spec!r}: concurrency counts whole clients, from 1",
                       hint="e.g. concurrency=1:1024")
    n = None
    if len(parts) == 3:
        n = parts[2]
        if n != int(n) or n < 1 or (n == 1 and hi > lo):
            raise BadInput(f"--sweep {spec!r}: the number of points must be a whole number, "
                           f"at least 2 between two bounds (1 when low = high), got {n:g}",
                           hint=hint)
        n = int(n)
        if n > MAX_SWEEP_POINTS:
            raise BadInput(f"--sweep {spec!r} has {n:,} points; kvplan sweeps at most "
                           f"{MAX_SWEEP_POINTS}", hint="each point is a whole simulation: "
                           f"give {MAX_SWEEP_POINTS} points or fewer")
    if axis == "concurrency":
        lo_i, hi_i = int(lo), int(hi)
        if n is not None:
            vals = {round(lo_i * (hi_i / lo_i) ** (i / (n - 1))) for i in range(n)} \
                if n > 1 else {lo_i}
        else:
            vals, v = {hi_i}, lo_i
            while v < hi_i and len(vals) <= MAX_SWEEP_POINTS:
                vals.add(v)
                v = max(v + 1, int(round(v * 1.5)))
            if len(vals) > MAX_SWEEP_POINTS:
                raise BadInput(f"--sweep {spec!r}: the ladder x1.5 from {lo_i:,} to {hi_i:,} "
                               f"has more than {MAX_SWEEP_POINTS} points", hint="narrow the "
                               f"range or give the points: concurrency={lo_i}:{hi_i}:20")
        return axis, [float(x) for x in sorted(vals)]
    n = 10 if n is None else n
    vals = [lo + (hi - lo) * i / (n - 1) for i in range(n)] if n > 1 else [lo]
    return axis, sorted(set(vals))


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
        max_num_active_seqs: Optional[int] = typer.Option(
            None, "--max-num-active-seqs", help="vLLM 0.31+: caps the running batch below "
            "--max-num-seqs, which still sizes the pool."),
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
        enable_prefix_caching: Optional[bool] = typer.Option(
            None, "--enable-prefix-caching/--no-enable-prefix-caching",
            help="vLLM's flag (default: the release's); --prefix-hit counts only with it on."),
        vllm_version: Optional[str] = VERSION, env: Optional[list[str]] = ENV,
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
                        ("--max-num-seqs", max_num_seqs), ("--admission-cap", admission_cap),
                        ("--max-num-active-seqs", max_num_active_seqs)):
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
        if enable_prefix_caching is not None:
            extra["enable_prefix_caching"] = enable_prefix_caching
        common = dict(model=m, gpu=g, tp=tensor_parallel_size, mml=max_model_len, extra=extra,
                      kv=kv_cache_dtype, util=gpu_memory_utilization,
                      mnbt=max_num_batched_tokens, seqs=max_num_seqs, version=vllm_version,
                      wl=wl, seed=seed, admission_cap=admission_cap, queue_limit=queue_limit,
                      ttft=ttft, tpot=tpot, env=env, active=max_num_active_seqs)
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
            from kvplan.render.jsonout import dumps

            payload = {k: v for k, v in out.items() if k != "series"}
            sys.stdout.write(dumps(payload))
        else:
            from kvplan.render.sim import render_single, render_sweep

            (render_sweep if sweep else render_single)(out)
