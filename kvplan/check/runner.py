"""Run `kvplan check`: read the inputs, check every deployment, build the report."""

from __future__ import annotations

from kvplan.check import group_checks
from kvplan.check.base import NothingToCheck
from kvplan.check.checks import run
from kvplan.check.inputs import Defaults, load
from kvplan.check.report import Report


def check(paths: list[str], cmd: str | None, defaults: Defaults,
          catalogs: list[str] | None = None, strict: bool = False,
          allow_empty: bool = False) -> Report:
    """The report for `paths` and `--cmd`; InputError (exit 2) for bad input, including
    inputs with no engine command at all (unless `allow_empty`: then an empty report). A
    file that cannot be read is reported beside the others' findings (exit 2)."""
    if not paths and cmd is None:
        raise NothingToCheck("nothing to check: give deployment files or --cmd", [],
                             hint="e.g. kvplan check deploy/*.yaml, or --cmd 'vllm serve …' "
                                  "--gpu h100")
    targets, files = load(paths, cmd, defaults)
    errors = [i.error for i in files if i.error]
    if not targets and len(errors) == 1 and len(files) == 1:
        raise errors[0]
    if not targets and not errors and not allow_empty:
        shown = "; ".join(i.file + (f" (found: {', '.join(sorted(set(i.kinds)))})"
                                    if i.kinds else " (no Kubernetes, compose or plan file)")
                          for i in files) or "--cmd"
        raise NothingToCheck(f"nothing to check: no vLLM, SGLang or TGI command in {shown}",
                             files, hint="kvplan reads `vllm serve`, the OpenAI api_server, "
                             "SGLang and TGI commands in Kubernetes manifests, compose files "
                             "and plan files")
    outcomes = [run(t, catalogs) for t in targets]
    group_checks.check(outcomes)
    return Report(outcomes, files, strict)
