"""`kvplan check` and `kvplan schema` (registered on the main Typer app). Heavy imports stay
inside the commands."""

from __future__ import annotations

import sys
from typing import Optional

import typer

from kvplan.errors import BadInput


def register(app: typer.Typer) -> None:
    """Add the commands to `app`."""

    @app.command("check")
    def check_cmd(
        files: Optional[list[str]] = typer.Argument(
            None, help="Kubernetes manifests, compose files or kvplan plan files ('-': stdin)."),
        cmd: Optional[str] = typer.Option(None, "--cmd", help="A command line to check, e.g. "
                                          "'vllm serve MODEL --max-model-len 32768'."),
        gpu: Optional[str] = typer.Option(None, "--gpu", "-g", help="GPU type where a file "
                                          "does not say (nodeSelector, kvplan.io/gpu)."),
        gpu_memory: Optional[str] = typer.Option(None, "--gpu-memory", help="The GPU's total "
                                                 "memory where a file does not say "
                                                 "(kvplan.io/gpu-memory), e.g. 19.5GiB for a "
                                                 "MIG slice the catalog lacks."),
        vllm_version: Optional[str] = typer.Option(None, "--vllm-version", help="Target vLLM "
                                                   "release where the image tag does not say "
                                                   "(default 0.33)."),
        fmt: str = typer.Option("human", "--format", "-f", help="human | json | github | "
                                "junit"),
        strict: bool = typer.Option(False, "--strict", help="Warnings fail too."),
        catalog: Optional[list[str]] = typer.Option(None, "--catalog", help="Extra catalog "
                                                    "YAML file (repeatable)."),
        workload: Optional[str] = typer.Option(None, "--workload", "-w", help="Workload preset "
                                               "where none is declared (annotations, plan)."),
        rate: Optional[float] = typer.Option(None, "--rate", help="Requests/s where none is "
                                             "declared."),
        allow_empty: bool = typer.Option(False, "--allow-empty", help="Files with no engine "
                                         "command are noted, not an error (pre-commit)."),
    ) -> None:
        """Check deployment files: would the engine start, and would it preempt under the
        declared load? Exit 0 pass, 1 a check failed, 2 bad input or nothing to check."""
        from kvplan.check.base import InputError
        from kvplan.check.inputs import Defaults
        from kvplan.check.planfile import PRESETS
        from kvplan.check.report import FORMATS, error_report, github_input_error, render
        from kvplan.check.runner import check
        from kvplan.render.term import use_color
        from kvplan.sources.resolve import parse_gpu_memory

        if fmt not in FORMATS:
            raise BadInput(f"--format {fmt!r} is not one of {', '.join(FORMATS)}")
        if workload is not None and workload.strip().lower() not in PRESETS:
            raise BadInput(f"unknown workload {workload!r}", hint="use one of "
                           + ", ".join(PRESETS))
        if rate is not None and rate <= 0:
            raise BadInput("--rate must be positive")
        if gpu_memory is not None:
            parse_gpu_memory(gpu_memory)
        defaults = Defaults(gpu=gpu, gpu_memory=gpu_memory, vllm_version=vllm_version,
                            workload=workload, rate=rate)
        try:
            rep = check(list(files or []), cmd, defaults, catalog, strict, allow_empty)
        except InputError as e:
            if fmt == "github":
                sys.stdout.write(github_input_error(e))
            elif fmt in ("json", "junit"):  # a CI report whatever went wrong
                sys.stdout.write(render(error_report(e, strict), fmt, False))
            raise
        sys.stdout.write(render(rep, fmt, use_color(sys.stdout)))
        if rep.exit_code:
            raise typer.Exit(rep.exit_code)

    @app.command("schema")
    def schema_cmd() -> None:
        """Print the JSON Schema of the kvplan plan file (`kvplan check plan.yaml`)."""
        from kvplan.check.planfile import json_schema
        from kvplan.render.jsonout import dumps

        sys.stdout.write(dumps(json_schema()))
