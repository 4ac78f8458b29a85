"""`kvplan throughput` and `kvplan recommend` (registered on the main Typer app)."""

from __future__ import annotations

import sys
from typing import Optional

import typer

from kvplan.errors import BadInput
from kvplan.render.jsonout import dumps

# --- shared options ------------------------------------------------------------------------
WORKLOAD = typer.Option(None, "--workload", "-w", help="Preset: chat, rag, code, "
                        "summarization, reasoning, agent.")
PROMPT = typer.Option(None, "--prompt-tokens", help="Mean (800), percentiles "
                      "(p50=800,p99=6000), fixed:N, lognormal:MEDIAN:SIGMA, uniform:LO:HI.")
OUTPUT = typer.Option(None, "--output-tokens", help="As --prompt-tokens.")
TRACE = typer.Option(None, "--trace", help="JSONL/CSV with prompt/output token columns.")
RATE = typer.Option(None, "--rate", help="Sustained arrivals, requests/s.")
PEAK = typer.Option(None, "--peak-rate", help="Peak arrivals, requests/s.")
BURST = typer.Option(1.0, "--burstiness", help="Gamma shape of inter-arrival gaps (1 = "
                     "Poisson; < 1 burstier).")
USERS = typer.Option(None, "--users", help="Concurrent users (closed loop) instead of --rate.")
THINK = typer.Option(5.0, "--think-time", help="Seconds a user waits between requests.")
PREFIX = typer.Option(0.0, "--prefix-hit", help="Share of prompt tokens served from the "
                      "prefix cache (0-1).")
GPU = typer.Option(None, "--gpu", "-g", help="GPU id/alias/name, several (comma-separated) "
                   "or 'any'.")
GPU_ONE = typer.Option(None, "--gpu", "-g", help="GPU id/alias/name.")
VERSION = typer.Option(None, "--vllm-version")
MML = typer.Option(None, "--max-model-len")
KVD = typer.Option("auto", "--kv-cache-dtype", help="Names joined by | are each tried "
                   "('auto|fp8', 'fp8|nvfp4').")
KVD_ONE = typer.Option("auto", "--kv-cache-dtype", help="vLLM's --kv-cache-dtype.")
UTIL = typer.Option(None, "--gpu-memory-utilization")
MNBT = typer.Option(None, "--max-num-batched-tokens")
CATALOG = typer.Option(None, "--catalog")
LORA = typer.Option(False, "--enable-lora", help="vLLM's LoRA slots' memory (as `kvplan "
                    "size`), not the LoRA kernels' cost.")
MAX_LORAS = typer.Option(1, "--max-loras")
LORA_RANK = typer.Option(16, "--max-lora-rank")
SPEC = typer.Option(None, "--speculative-config", help="vLLM's JSON (as `kvplan size`): the "
                    "drafter's memory, not its speed-up.")
JSON_OPT = typer.Option(False, "--json")
ENV = typer.Option(None, "--env", help="NAME=VALUE of the server's environment (repeatable), "
                   "as `kvplan size --env`.")


MAX_BATCH, MAX_BATCH_ROWS = 65_536, 200  # throughput --batch-sizes: sequences, rows
MIN_BURSTINESS = 0.01  # gaps' CV 10: below it arrivals come as one instant's flood


def untimed_note(rows: int) -> str:
    """Why a timed trace gives no rate: one row, or every row at the same time."""
    what = ("its one row's arrival time gives" if rows == 1 else
            f"its {rows:,} rows all arrive at the same time, which gives")
    return (f"the trace's arrival times are not used: {what} no rate, so this is one "
            "replica's capacity (closed loop); give --rate to plan a fleet")


def build_workload(workload, prompt, output, trace, rate, peak, burst, users, think, prefix):
    """The workload of the length and arrival options; `trace` is a path or a read `Trace`."""
    from kvplan.core.workload import LengthDist, Workload, parse_lengths, preset

    if workload is None and prompt is None and output is None and trace is None:
        workload = "chat"
    if trace:
        given = [f for f, v in (("--workload", workload), ("--prompt-tokens", prompt),
                                ("--output-tokens", output)) if v is not None]
        if given:  # the trace's lengths win: say so rather than drop the option
            raise BadInput(f"--trace and {given[0]} both give the request lengths",
                           hint=f"drop {given[0]} (the trace's lengths are used) or the trace")
        from kvplan.sources.trace import Trace, read_trace

        tr = trace if isinstance(trace, Trace) else read_trace(trace)  # simulate reads it once
        wl = Workload(name=f"trace {tr.path}", prompt=LengthDist.empirical(tr.prompts, "trace"),
                      output=LengthDist.empirical(tr.outputs, "trace"))
        if rate is None and users is None and tr.arrivals:  # with --users, the users' rate
            if len(tr.arrivals) > 1 and tr.arrivals[-1] > 0:
                rate = (len(tr.arrivals) - 1) / tr.arrivals[-1]
            else:  # one instant: no rate to plan, and the output must say why
                wl.notes.append(untimed_note(len(tr.arrivals)))
    else:
        wl = preset(workload) if workload else preset("chat")
        if prompt:
            wl.prompt = parse_lengths(prompt, "--prompt-tokens")
        if output:
            wl.output = parse_lengths(output, "--output-tokens")
        if prompt or output:
            wl.name = workload or "custom"
    for name, v in (("--rate", rate), ("--peak-rate", peak)):
        if v is not None and v <= 0:
            raise BadInput(f"{name} must be positive")
    if not 0 <= prefix < 1:
        raise BadInput("--prefix-hit must be in [0, 1)")
    if not burst >= MIN_BURSTINESS:
        raise BadInput(f"--burstiness must be at least {MIN_BURSTINESS}, got {burst:g}",
                       hint="it is the gamma shape of the gaps between arrivals: 1 is Poisson, "
                       "0.1 very bursty (a gap's coefficient of variation 1/sqrt(b) ~ 3.2)")
    if users is not None and users < 1:
        raise BadInput("--users must be >= 1")
    if think < 0:
        raise BadInput("--think-time must be >= 0")
    wl.rate, wl.peak_rate, wl.burstiness = rate, peak, burst
    wl.users, wl.think_time_s, wl.prefix_hit = users, think, prefix
    return wl


def _args(mml, kvd, util, mnbt, tp=1, env=None, version=None):
    from kvplan.core.sizing import EngineArgs
    from kvplan.units import parse_vllm_int

    m = None
    if mml is not None:
        auto = str(mml).lower() in ("-1", "auto")
        m = -1 if auto else parse_vllm_int(mml, what="--max-model-len", version=version)
    a = EngineArgs(tensor_parallel_size=tp, max_model_len=m, kv_cache_dtype=kvd,
                   gpu_memory_utilization=util,
                   max_num_batched_tokens=parse_vllm_int(mnbt, what="--max-num-batched-tokens",
                                                         version=version)
                   if mnbt else None)
    from kvplan.core.versions import VllmVersion
    from kvplan.engines.vllm_env import apply_assignments

    note = apply_assignments(a, env, VllmVersion.of(version).v)
    if note:  # on stderr, so --json and --emit-flags output stays clean
        import sys

        sys.stderr.write(f"kvplan: note: {note}\n")
    return a


def _shell_env(env: list[str]) -> list[str]:
    """NAME=VALUE with the value shell-quoted where it needs it (a plain value, as every
    modelled variable takes, stays plain: a dotenv, $GITHUB_ENV and `docker --env-file` line)."""
    import shlex

    out = []
    for item in env:
        name, _, value = item.partition("=")
        out.append(f"{name}={shlex.quote(value)}")
    return out


def memory_extras(enable_lora: bool, max_loras: int, max_lora_rank: int,
                  speculative_config: str | None, catalog: list[str] | None,
                  version: str | None = None) -> dict:
    """The EngineArgs fields of --enable-lora ... and --speculative-config (the draft model
    resolved like MODEL, its keys checked against `version`'s SpeculativeConfig)."""
    extra: dict = {"enable_lora": enable_lora, "max_loras": max_loras,
                   "max_lora_rank": max_lora_rank}
    if speculative_config is not None:
        from kvplan.core.versions import LATEST
        from kvplan.engines.vllm_spec import speculative
        from kvplan.sources.resolve import resolve_model

        extra["speculative"] = speculative(speculative_config,
                                           lambda name: resolve_model(name, catalog),
                                           version=version or LATEST)
    return extra


def register(app: typer.Typer) -> None:
    @app.command("throughput")
    def throughput_cmd(
        model: str = typer.Argument(...), gpu: Optional[str] = GPU_ONE,
        tensor_parallel_size: int = typer.Option(1, "--tensor-parallel-size", "-tp"),
        max_model_len: Optional[str] = MML, kv_cache_dtype: str = KVD_ONE,
        gpu_memory_utilization: Optional[float] = UTIL,
        max_num_batched_tokens: Optional[str] = MNBT,
        batch_sizes: Optional[str] = typer.Option(None, "--batch-sizes",
                                                  help="e.g. 1,8,64 (default: 1 .. past "
                                                  "the KV ceiling)"),
        workload: Optional[str] = WORKLOAD, prompt_tokens: Optional[str] = PROMPT,
        output_tokens: Optional[str] = OUTPUT, trace: Optional[str] = TRACE,
        prefix_hit: float = PREFIX, vllm_version: Optional[str] = VERSION,
        env: Optional[list[str]] = ENV,
        catalog: Optional[list[str]] = CATALOG, as_json: bool = JSON_OPT,
    ) -> None:
        """Output tokens/s, TPOT and TTFT against batch depth; the knee and the KV ceiling."""
        from kvplan.core.throughput import curve
        from kvplan.sources.resolve import resolve_gpu, resolve_model

        wl = build_workload(workload, prompt_tokens, output_tokens, trace, None, None, 1.0,
                            None, 0.0, prefix_hit)
        sizes = None
        if batch_sizes:
            try:
                sizes = sorted({int(x) for x in batch_sizes.split(",") if x.strip()})
            except ValueError:
                raise BadInput(f"cannot read --batch-sizes {batch_sizes!r}",
                               hint="use e.g. 1,8,64") from None
            if not sizes or sizes[0] < 1:
                raise BadInput("--batch-sizes must be positive integers")
            if sizes[-1] > MAX_BATCH or len(sizes) > MAX_BATCH_ROWS:
                n = sizes[-1]
                big = (f"{n:,}" if n < 10**9 else f"{n:.3g}" if n < 10**300
                       else f"a {len(str(n))}-digit number") if n > MAX_BATCH else None
                raise BadInput(f"--batch-sizes {big} is more than {MAX_BATCH:,} sequences"
                               if big else f"--batch-sizes gives {len(sizes):,} rows; kvplan "
                               f"shows at most {MAX_BATCH_ROWS}", hint="a batch size counts "
                               "running sequences, as --max-num-seqs: e.g. 1,8,64,256")
        m = resolve_model(model, catalog)
        g = resolve_gpu(gpu, None, catalog)
        c = curve(m, g, _args(max_model_len, kv_cache_dtype, gpu_memory_utilization,
                              max_num_batched_tokens, tensor_parallel_size, env,
                              vllm_version),
                  vllm_version, wl, sizes)
        if as_json:
            sys.stdout.write(dumps(c.to_json()))
        else:
            from kvplan.render.plan import render_curve

            render_curve(c)

    @app.command("recommend")
    def recommend_cmd(
        model: str = typer.Argument(...), gpu: Optional[str] = GPU,
        tensor_parallel_size: str = typer.Option("1", "--tensor-parallel-size", "-tp",
                                                 help="N or auto"),
        max_model_len: Optional[str] = MML, kv_cache_dtype: str = KVD,
        gpu_memory_utilization: Optional[float] = UTIL,
        max_num_batched_tokens: Optional[str] = MNBT,
        workload: Optional[str] = WORKLOAD, prompt_tokens: Optional[str] = PROMPT,
        output_tokens: Optional[str] = OUTPUT, trace: Optional[str] = TRACE,
        rate: Optional[float] = RATE, peak_rate: Optional[float] = PEAK,
        burstiness: float = BURST, users: Optional[int] = USERS, think_time: float = THINK,
        prefix_hit: float = PREFIX,
        ttft: Optional[float] = typer.Option(None, "--ttft", help="p95 TTFT SLO, seconds."),
        tpot: Optional[float] = typer.Option(None, "--tpot", help="TPOT SLO, ms."),
        preempt_risk: float = typer.Option(0.01, "--preempt-risk"),
        policy: str = typer.Option("risk", "--policy", help="risk | guaranteed"),
        target_utilization: float = typer.Option(0.8, "--target-utilization"),
        n_plus_one: bool = typer.Option(False, "--n-plus-one", help="One spare replica."),
        engine: str = typer.Option("vllm", "--engine", help="vllm | sglang | tgi"),
        emit_flags: bool = typer.Option(False, "--emit-flags", help="Print only the engine "
                                        "flags, shell-quoted, on one line (exit 1 prints "
                                        "none: guard $(...) with || exit 1)."),
        emit_env: bool = typer.Option(False, "--emit-env", help="Print only the environment "
                                      "the plan was sized with, NAME=VALUE lines (none when "
                                      "it needs none)."),
        top: int = typer.Option(3, "--top", help="Deployments shown side by side (>= 1)."),
        enable_lora: bool = LORA, max_loras: int = MAX_LORAS, max_lora_rank: int = LORA_RANK,
        speculative_config: Optional[str] = SPEC,
        vllm_version: Optional[str] = VERSION, env: Optional[list[str]] = ENV,
        catalog: Optional[list[str]] = CATALOG, as_json: bool = JSON_OPT,
    ) -> None:
        """A deployment plan: safe max-num-seqs, replicas, admission limits, cost, command."""
        from kvplan.core.plan import Targets
        from kvplan.recommend import recommend
        from kvplan.sources.resolve import resolve_model
        from kvplan.units import fmt_rate

        if policy not in ("risk", "guaranteed"):
            raise BadInput(f"--policy {policy!r} is not risk or guaranteed")
        if engine not in ("vllm", "sglang", "tgi"):
            raise BadInput(f"--engine {engine!r} is not vllm, sglang or tgi")
        if not 0 < preempt_risk < 1:
            raise BadInput("--preempt-risk must be between 0 and 1, e.g. 0.01")
        if not 0 < target_utilization <= 1:
            raise BadInput("--target-utilization must be in (0, 1]")
        for name, v in (("--ttft", ttft), ("--tpot", tpot)):
            if v is not None and v <= 0:
                raise BadInput(f"{name} must be positive")
        if not kv_cache_dtype.replace("|", "").strip():  # '|': every name empty
            raise BadInput(f"--kv-cache-dtype {kv_cache_dtype!r} names no dtype",
                           hint="e.g. auto, fp8, or 'auto|fp8' to try both")
        if top < 1:
            raise BadInput(f"--top must be >= 1, got {top}", hint="it counts the deployments "
                           "shown, the recommended one first")
        chosen = [n for n, on in (("--emit-flags", emit_flags), ("--emit-env", emit_env),
                                  ("--json", as_json)) if on]
        if len(chosen) > 1:
            raise BadInput(f"{' and '.join(chosen)} each choose what is printed",
                           hint="give one; --json carries the flags, env and command")
        if users is not None and rate is not None:  # the planner sizes on the users' rate
            raise BadInput("--users and --rate are exclusive", hint="a closed loop of users "
                           "(their rate is users / (think time + service time)) or an open "
                           "loop at --rate")
        wl = build_workload(workload, prompt_tokens, output_tokens, trace, rate, peak_rate,
                            burstiness, users, think_time, prefix_hit)
        if wl.peak_rate is not None and wl.rate is None and wl.users is None:
            raise BadInput("--peak-rate needs --rate (the sustained rate the fleet is sized on)",
                           hint="give --rate (or --users) too, or --rate at the peak to size the "
                           "whole fleet there")
        if wl.peak_rate is not None and wl.rate is not None and wl.peak_rate < wl.rate:
            src = "--rate" if rate is not None else "the trace's rate,"
            raise BadInput(f"--peak-rate {wl.peak_rate:g} is below {src} {fmt_rate(wl.rate)} "
                           "req/s",
                           hint="the peak is the highest arrival rate to stay stable at: "
                           "give one at or above the sustained rate, or leave it out")
        t = Targets(rate=wl.rate, peak_rate=wl.peak_rate, ttft_p95_s=ttft, tpot_ms=tpot,
                    preempt_risk=preempt_risk, policy=policy,
                    target_utilization=target_utilization, redundancy=1 if n_plus_one else 0)
        m = resolve_model(model, catalog)
        base = _args(max_model_len, "auto", gpu_memory_utilization, max_num_batched_tokens,
                     env=env, version=vllm_version)
        if (enable_lora or speculative_config) and engine != "vllm":
            raise BadInput("--enable-lora and --speculative-config are sized for --engine vllm")
        for k, v in memory_extras(enable_lora, max_loras, max_lora_rank, speculative_config,
                                  catalog, vllm_version).items():
            setattr(base, k, v)
        rec = recommend(m, gpu, tensor_parallel_size, kv_cache_dtype, base, vllm_version, wl,
                        t, engine, catalog, top)
        if emit_flags:
            import shlex

            if rec.env:  # `vllm serve M $(...)` alone starts without them
                sys.stderr.write(f"kvplan: warning: the plan was sized with {' '.join(rec.env)} "
                                 "in vLLM's environment, which --emit-flags does not print: "
                                 "start vLLM with it (--emit-env prints it) or its pool is "
                                 "not the one planned\n")
            sys.stdout.write(shlex.join(rec.flags) + "\n")
        elif emit_env:
            sys.stdout.write("".join(f"{e}\n" for e in _shell_env(rec.env)))
        elif as_json:
            sys.stdout.write(dumps(rec.to_json()))
        else:
            from kvplan.render.plan import render_recommendation

            render_recommendation(rec)
