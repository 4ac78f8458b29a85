"""`kvplan diagnose` (registered on the main Typer app). Heavy imports stay inside the command."""

from __future__ import annotations

import os
import re
from typing import Optional

import typer

WATCH_WINDOW = 6  # scrapes a --watch verdict looks back over
DEFAULT_SCRAPES = 3


def _check(sources, interval, scrapes, timeout, watch, max_num_seqs, model, gpu, tp, mml, pp=1,
           version=None, risk=0.01):
    from kvplan.core.versions import read_release
    from kvplan.diagnose.scrape import is_url
    from kvplan.errors import BadInput

    if not sources:
        raise BadInput("nothing to diagnose", hint="pass a /metrics URL, saved scrape files, "
                       "or - for standard input")
    for name, v in (("--interval", interval), ("--timeout", timeout)):
        if not v > 0:
            raise BadInput(f"{name} must be a positive number of seconds")
    for name, v in (("--scrapes", scrapes), ("--max-num-seqs", max_num_seqs),
                    ("--tensor-parallel-size", tp), ("--pipeline-parallel-size", pp)):
        if v is not None and v < 1:
            raise BadInput(f"{name} must be >= 1")
    if version is not None:
        read_release(version)  # exit 2 on 'abc', as kvplan size
    if not 0 < risk < 1:
        raise BadInput("--preempt-risk must be between 0 and 1, e.g. 0.01")
    if (model is None) != (gpu is None):
        raise BadInput("--model and --gpu go together", hint="the cross-check with kvplan "
                       "size needs both")
    if model is None and (tp != 1 or pp != 1 or mml is not None):
        raise BadInput("-tp, -pp and --max-model-len describe the cross-check",
                       hint="pass --model and --gpu too")
    for s in sources:
        scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*)://", s)
        if scheme and not is_url(s) and not os.path.exists(s):
            raise BadInput(f"{s}: the {scheme[1]}:// scheme is not supported",
                           hint="scrape an http:// or https:// URL, or pass saved scrape files")
    urls = [s for s in sources if is_url(s)]
    if urls and len(sources) > 1:
        raise BadInput("give one URL, or files", hint="diagnose each server separately")
    if not urls and watch:
        raise BadInput("--watch needs a URL")
    if not urls and scrapes is not None:
        raise BadInput("--scrapes applies to a URL", hint="files are read once, in order")
    if sources.count("-") > 1:
        raise BadInput("standard input (-) can be read only once")
    return urls[0] if urls else None


def register(app: typer.Typer) -> None:
    """Add the command to `app`."""

    @app.command("diagnose")
    def diagnose_cmd(
        sources: Optional[list[str]] = typer.Argument(
            None, help="A /metrics URL, saved scrape files (in time order), or - for stdin."),
        interval: float = typer.Option(5.0, "--interval", help="Seconds between scrapes of a "
                                       "URL (and between files that carry no timestamps)."),
        scrapes: Optional[int] = typer.Option(None, "--scrapes", help="Scrapes of the URL "
                                              "(default 3; with --watch, no limit)."),
        timeout: float = typer.Option(5.0, "--timeout", help="Seconds a scrape may take "
                                      "before kvplan gives up (exit 2)."),
        watch: bool = typer.Option(False, "--watch", help="Keep scraping and update the "
                                   "verdict (until --scrapes or Ctrl-C)."),
        max_num_seqs: Optional[int] = typer.Option(None, "--max-num-seqs", help="The "
                                                   "server's cap, if known (else inferred)."),
        model: Optional[str] = typer.Option(None, "--model", help="Cross-check the pool with "
                                            "kvplan size (with --gpu)."),
        gpu: Optional[str] = typer.Option(None, "--gpu", "-g", help="GPU for the cross-check."),
        tensor_parallel_size: int = typer.Option(1, "--tensor-parallel-size", "-tp"),
        pipeline_parallel_size: int = typer.Option(1, "--pipeline-parallel-size", "-pp"),
        max_model_len: Optional[str] = typer.Option(None, "--max-model-len"),
        vllm_version: Optional[str] = typer.Option(None, "--vllm-version", help="The "
                                                   "server's vLLM release (checks the names)."),
        preempt_risk: float = typer.Option(0.01, "--preempt-risk", help="Accepted "
                                           "probability that a full batch at the recommended "
                                           "cap overflows the KV pool (as recommend)."),
        catalog: Optional[list[str]] = typer.Option(None, "--catalog"),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object (one per "
                                     "line with --watch)."),
    ) -> None:
        """Read a vLLM/SGLang server's /metrics and name the cause: preemption spiral, queue
        explosion, long requests hogging KV, under-fed server, or healthy.

        SOURCES: one /metrics URL, saved scrape files in time order, or - for stdin.
        Exit codes: 0 healthy, 1 unhealthy, 2 unreadable input or unreachable URL."""
        from kvplan.diagnose import scrape as S
        from kvplan.diagnose.analyse import Options, diagnose

        url = _check(sources, interval, scrapes, timeout, watch, max_num_seqs, model, gpu,
                     tensor_parallel_size, max_model_len, pipeline_parallel_size, vllm_version,
                     preempt_risk)
        opts = Options(max_num_seqs=max_num_seqs, vllm_version=vllm_version, interval=interval,
                       preempt_risk=preempt_risk)
        cross = _CrossCheck(model, gpu, tensor_parallel_size, max_model_len, vllm_version,
                            catalog, max_num_seqs, pipeline_parallel_size)
        if url is None:
            got, opts.timed = S.from_files(sources, interval)
            cross.apply(got, opts)
            d = diagnose(got, opts)
            _emit(d, as_json, pretty=True)
            raise typer.Exit(d.exit_code)
        url = S.metrics_url(url)
        count = scrapes if scrapes is not None else (None if watch else DEFAULT_SCRAPES)
        stream = S.scrape_url(url, count=count, interval=interval, timeout=timeout)
        if not watch:
            got = list(stream)
            cross.apply(got, opts)
            d = diagnose(got, opts)
            _emit(d, as_json, pretty=True)
            raise typer.Exit(d.exit_code)
        raise typer.Exit(_watch(stream, opts, cross, as_json, count))


class _CrossCheck:
    """Runs `kvplan size` once, when the first scrape's cache config is known."""

    def __init__(self, model, gpu, tp, mml, version, catalog, max_num_seqs, pp=1):
        self.args = (model, gpu, tp, mml, version, catalog, pp)
        self.given_cap = max_num_seqs
        self.done = model is None

    def apply(self, got, opts) -> None:
        if self.done or not got:
            return
        self.done = True
        from kvplan.diagnose.crosscheck import blocks_at, compare, sizer
        from kvplan.units import parse_vllm_int

        model, gpu, tp, mml, version, catalog, pp = self.args
        cfg = next((e.cache_config for s in reversed(got) for e in s.engines.values()
                    if e.cache_config), {})
        n = parse_vllm_int(mml, what="--max-model-len") if mml else None
        size_at, notes = sizer(model, gpu, tp=tp, max_model_len=n, vllm_version=version,
                               catalogs=catalog, cache_config=cfg, pp=pp)
        out, notes = compare(size_at(self.given_cap, True), cfg, tp, pp, self.given_cap,
                             notes)
        opts.cross_check = out
        opts.notes += notes
        if out["fits"] and out["predicted_num_gpu_blocks"] > 0:
            opts.size_pool = (out["predicted_num_gpu_blocks"], out["predicted_block_size"])
            opts.blocks_at = blocks_at(size_at, out["observed_block_size"])
        if self.given_cap is None:
            opts.default_max_num_seqs = out["default_max_num_seqs"]


def _emit(d, as_json: bool, pretty: bool) -> None:
    import sys

    if as_json:
        from kvplan.render.jsonout import dumps

        sys.stdout.write(dumps(d.to_json(), indent=2 if pretty else None))
    else:
        from kvplan.diagnose.render import render

        render(d)
    sys.stdout.flush()


def _watch(stream, opts, cross, as_json: bool, count: int | None) -> int:
    """Re-diagnose after every scrape over the last WATCH_WINDOW; Ctrl-C ends it. Returns the
    last verdict's exit code (130 if interrupted before the first verdict)."""
    import sys
    import time

    from kvplan.diagnose.analyse import diagnose

    got, code, need = [], 130, 1 if count == 1 else 2
    try:
        for s in stream:
            got = (got + [s])[-WATCH_WINDOW:]
            if len(got) < need:
                continue
            cross.apply(got, opts)
            d = diagnose(got, opts)
            if not as_json:
                sys.stdout.write(f"\n── {time.strftime('%H:%M:%S')} · scrape window of "
                                 f"{len(got)} ──\n")
            code = d.exit_code
            _emit(d, as_json, pretty=False)
    except KeyboardInterrupt:
        pass
    return code
