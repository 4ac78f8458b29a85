"""`kvplan.io/` annotations (Kubernetes) and labels (docker-compose): the declared workload,
SLOs and overrides of a deployment. An unknown `kvplan.io/` key is an error, so a typo is
never silently ignored."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from pydantic import ValidationError

from kvplan.check.base import Declared, InputError, Loc, Target
from kvplan.check.planfile import CHECK_IDS, SloSpec, WorkloadSpec
from kvplan.errors import BadInput
from kvplan.sources.resolve import parse_gpu_memory

PREFIX = "kvplan.io/"
WORKLOAD_KEYS = {"workload": "preset", "prompt-tokens": "prompt_tokens",
                 "output-tokens": "output_tokens", "rate": "rate", "peak-rate": "peak_rate",
                 "burstiness": "burstiness", "users": "users", "think-time": "think_time",
                 "prefix-hit": "prefix_hit"}
SLO_KEYS = {"ttft": "ttft", "tpot": "tpot", "preempt-risk": "preempt_risk", "policy": "policy",
            "target-utilization": "target_utilization", "n-plus-one": "n_plus_one"}
OTHER_KEYS = ("gpu", "gpu-memory", "model", "vllm-version", "ignore")
KEYS = tuple(WORKLOAD_KEYS) + tuple(SLO_KEYS) + OTHER_KEYS


@dataclass
class Annotated:
    """What the `kvplan.io/` keys of one object say."""

    declared: Declared = field(default_factory=Declared)
    gpu: str | None = None
    gpu_memory: str | None = None
    model: str | None = None
    vllm_version: str | None = None
    ignore: set[str] = field(default_factory=set)
    locs: dict[str, Loc] = field(default_factory=dict)

    def apply(self, t: Target) -> None:
        """Set the declarations and overrides on a target."""
        t.declared, t.ignore = self.declared, set(self.ignore)
        if self.gpu:
            t.gpu, t.gpu_loc = self.gpu, self.locs["gpu"]
        if self.gpu_memory:
            t.gpu_memory = self.gpu_memory
        if self.model:
            t.model, t.model_loc = self.model, self.locs["model"]
        if self.vllm_version:
            t.vllm_version, t.version_source = self.vllm_version, "kvplan.io/vllm-version"
            t.version_loc = self.locs["vllm-version"]


def read(values: dict[str, tuple[str, Loc]], where: Loc) -> Annotated:
    """`values`: annotation key -> (value, location), any prefix; others are ignored."""
    a = Annotated()
    wl: dict[str, str] = {}
    slo: dict[str, str] = {}
    for key, (val, loc) in values.items():
        if not key.startswith(PREFIX):
            continue
        short = key[len(PREFIX):]
        a.locs[short] = loc
        if short in WORKLOAD_KEYS:
            wl[WORKLOAD_KEYS[short]] = val
        elif short in SLO_KEYS:
            slo[SLO_KEYS[short]] = val
        elif short == "gpu":
            a.gpu = val
        elif short == "gpu-memory":
            try:
                parse_gpu_memory(val, what=key)
            except BadInput as e:
                raise InputError(e.message, file=loc.file, line=loc.line,
                                 hint=e.hint) from None
            a.gpu_memory = val
        elif short == "model":
            a.model = val
        elif short == "vllm-version":
            a.vllm_version = val
        elif short == "ignore":
            a.ignore = {x.strip() for x in val.split(",") if x.strip()}
            bad = sorted(a.ignore - set(CHECK_IDS))
            if bad:
                raise InputError(f"{key}: unknown check id {bad[0]!r}", file=loc.file,
                                 line=loc.line, hint="ids: " + ", ".join(CHECK_IDS))
        else:
            close = difflib.get_close_matches(short, KEYS, n=1)
            raise InputError(f"unknown annotation {key!r}", file=loc.file, line=loc.line,
                             hint=f"did you mean {PREFIX}{close[0]}?" if close else
                             "known: " + ", ".join(PREFIX + k for k in KEYS))
    back = {v: k for k, v in {**WORKLOAD_KEYS, **SLO_KEYS}.items()}
    try:
        if wl:
            a.declared.workload = WorkloadSpec(**wl)
        a.declared.slo = SloSpec(**slo)
    except ValidationError as e:
        err = e.errors()[0]
        name = back.get(str(err["loc"][0]), str(err["loc"][0])) if err["loc"] else "?"
        loc = a.locs.get(name, where)
        raise InputError(f"{PREFIX}{name}: {err['msg']}", file=loc.file, line=loc.line) from None
    a.declared.loc = where
    return a
