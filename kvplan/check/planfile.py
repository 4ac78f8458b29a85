"""The kvplan plan file (pydantic v2): deployments with model, GPU, engine flags or command,
replicas, declared workload and SLOs. `kvplan schema` prints its JSON Schema.

The same `WorkloadSpec` and `SloSpec` validate the `kvplan.io/` annotations of manifests.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal, Union

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

PRESETS = ("chat", "rag", "code", "summarization", "reasoning", "agent")
CHECK_IDS = ("flags-known", "flag-values", "sizing-inputs", "weights-fit", "max-model-len-fits",
             "max-num-seqs-safe", "replicas-cover-rate", "gpu-memory-utilization-range",
             "tensor-parallel-valid", "gpu-count-matches", "late-allocations-fit",
             "compile-cache-persisted", "release-modelled", "lws-group-consistent",
             "gpu-not-shared", "workload-fits-max-model-len")

Lengths = Union[int, str]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)


class WorkloadSpec(_Strict):
    """The traffic a deployment must serve (as `kvplan recommend`'s workload options)."""

    preset: str | None = Field(None, description="chat, rag, code, summarization, reasoning "
                               "or agent (docs/workload.md); chat when no lengths are given")
    prompt_tokens: Lengths | None = Field(None, description="Mean (800), percentiles "
                                          "(p50=800,p99=6000), fixed:N, lognormal:MEDIAN:SIGMA "
                                          "or uniform:LO:HI")
    output_tokens: Lengths | None = Field(None, description="As prompt_tokens")
    rate: float | None = Field(None, gt=0, description="Sustained arrivals, requests/s")
    users: int | None = Field(None, ge=1, description="Concurrent users (closed loop) instead "
                              "of rate")
    peak_rate: float | None = Field(None, gt=0, description="Peak arrivals, requests/s "
                                    "(with rate or users, at or above rate)")
    burstiness: float = Field(1.0, gt=0, description="Gamma shape of inter-arrival gaps "
                              "(1 = Poisson)")
    think_time: float = Field(5.0, ge=0, description="Seconds a user waits between requests")
    prefix_hit: float = Field(0.0, ge=0, lt=1, description="Share of prompt tokens served "
                              "from the prefix cache")

    @field_validator("preset")
    @classmethod
    def _preset(cls, v: str | None) -> str | None:
        if v is not None and v.strip().lower() not in PRESETS:
            import difflib

            close = difflib.get_close_matches(v.strip().lower(), PRESETS, n=1)
            raise ValueError(f"unknown workload {v!r}" + (f"; did you mean {close[0]}?"
                                                           if close else
                                                           f"; use one of {', '.join(PRESETS)}"))
        return v.strip().lower() if v else v

    @field_validator("users")
    @classmethod
    def _users(cls, v: int | None, info: ValidationInfo) -> int | None:
        if v is not None and info.data.get("rate") is not None:  # as `recommend` refuses
            raise ValueError("users and rate are exclusive: a closed loop of users or an open "
                             "loop at rate; give one")
        return v

    @field_validator("peak_rate")
    @classmethod
    def _peak(cls, v: float | None, info: ValidationInfo) -> float | None:
        rate = info.data.get("rate")
        if v is not None and rate is None and info.data.get("users") is None:
            raise ValueError("peak_rate needs rate (the sustained rate the fleet is sized on) "
                             "or users")
        if v is not None and rate is not None and v < rate:
            raise ValueError(f"peak_rate {v:g} is below rate {rate:g}: the peak is the highest "
                             "arrival rate to stay stable at; give one at or above rate, or "
                             "leave it out")
        return v

    @field_validator("prompt_tokens", "output_tokens")
    @classmethod
    def _lengths(cls, v: Lengths | None) -> Lengths | None:
        if v is not None:
            from kvplan.core.workload import parse_lengths
            from kvplan.errors import BadInput

            try:
                parse_lengths(str(v), "lengths")
            except BadInput as e:
                raise ValueError(f"cannot read {v!r}: {e.hint}") from None
        return v


class SloSpec(_Strict):
    """Service-level objectives and the planning policy (as `kvplan recommend`)."""

    ttft: float | None = Field(None, gt=0, description="p95 time to first token, seconds")
    tpot: float | None = Field(None, gt=0, description="Time per output token, ms")
    preempt_risk: float = Field(0.01, gt=0, lt=1, description="Accepted probability that "
                                "the running batch overflows the KV pool")
    policy: Literal["risk", "guaranteed"] = "risk"
    target_utilization: float = Field(0.8, gt=0, le=1)
    n_plus_one: bool = Field(False, description="One spare replica")


Scalar = Union[bool, int, float, str, None]


def _flag_value(v: object) -> object:
    """A `flags:` mapping's value: a string, a finite number, a boolean or null."""
    if isinstance(v, float) and not math.isfinite(v):
        raise ValueError(f"must be a finite number, not {v}")
    if v is not None and not isinstance(v, (bool, int, float, str)):
        kind = {dict: "a mapping", list: "a list"}.get(type(v), type(v).__name__)
        raise ValueError(f"must be a string, number or boolean, not {kind}")
    return v


FlagValue = Annotated[Scalar, BeforeValidator(_flag_value)]


class DeploymentSpec(_Strict):
    """One deployment: what runs (engine command, or model + flags), where, and for what load."""

    name: str = Field(..., min_length=1)
    engine: Literal["vllm", "sglang", "tgi"] | None = Field(
        None, description="Default vllm; read off `command` when given")
    model: str | None = Field(None, description="Hub id or catalog id; overrides the command's "
                              "model for sizing (e.g. when it is a path inside the container)")
    command: str | list[str] | None = Field(None, description="The full launch command, e.g. "
                                            "'vllm serve MODEL --max-model-len 32768'")
    flags: list[str] | dict[str, FlagValue] | None = Field(
        None, description="Engine flags after the command: a list as on the command line, "
                          "or a mapping {max-model-len: 32768, enforce-eager: true}")
    env: dict[str, Scalar] = Field(default_factory=dict, description="Environment, e.g. "
                                   "VLLM_ALLOW_LONG_MAX_MODEL_LEN")
    gpu: str | None = Field(None, description="GPU id, alias, nvidia-smi name or GFD label")
    gpu_memory: str | None = Field(None, description="The GPU's total memory, e.g. 19.5GiB; "
                                   "overrides the catalog's (a MIG slice, a GPU not in it)")
    gpus: int | None = Field(None, ge=1, description="GPUs per replica (checked against "
                             "tensor x pipeline x data parallel size)")
    replicas: int = Field(1, ge=1)
    vllm_version: str | None = None
    workload: WorkloadSpec | None = None
    slo: SloSpec = Field(default_factory=SloSpec)
    ignore: list[str] = Field(default_factory=list, description="Check ids not to run")

    @field_validator("workload", mode="before")
    @classmethod
    def _workload_name(cls, v: object) -> object:
        return {"preset": v} if isinstance(v, str) else v

    @field_validator("flags", mode="before")
    @classmethod
    def _flags(cls, v: object) -> object:
        if v is not None and not isinstance(v, (list, dict)):
            raise ValueError("must be a list as on the command line or a mapping "
                             "{max-model-len: 32768, enforce-eager: true}")
        return v

    @field_validator("gpu_memory")
    @classmethod
    def _gpu_memory(cls, v: str | None) -> str | None:
        if v is not None:
            from kvplan.errors import BadInput
            from kvplan.sources.resolve import parse_gpu_memory

            try:
                parse_gpu_memory(v, what="gpu_memory")
            except BadInput as e:
                raise ValueError(f"{e.message}: {e.hint}") from None
        return v

    @field_validator("ignore")
    @classmethod
    def _ignore(cls, v: list[str]) -> list[str]:
        bad = [x for x in v if x not in CHECK_IDS]
        if bad:
            raise ValueError(f"unknown check id {bad[0]!r}; ids: {', '.join(CHECK_IDS)}")
        return v

    @model_validator(mode="after")
    def _what_runs(self) -> DeploymentSpec:
        if self.command is None and self.model is None:
            raise ValueError("give a command or a model")
        return self


class PlanFile(_Strict):
    """A kvplan plan file: `kvplan check plan.yaml`."""

    model_config = ConfigDict(extra="forbid", title="kvplan plan file", allow_inf_nan=False)

    kvplan: Literal[1] = Field(..., description="Plan file format version; this key marks "
                               "a YAML file as a kvplan plan file")
    vllm_version: str | None = Field(None, description="Default target vLLM release")
    deployments: list[DeploymentSpec] = Field(..., min_length=1)


def json_schema() -> dict:
    """The plan file's JSON Schema (`kvplan schema`)."""
    s = PlanFile.model_json_schema()
    s["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return s


def _error_path(doc, loc: tuple) -> list:
    """A pydantic error location without union-member tags, as far as the data goes."""
    path, d = [], doc.data
    for p in loc:
        found = (isinstance(d, dict) and p in d) or (
            isinstance(d, list) and isinstance(p, int) and p < len(d))
        if found:
            d = d[p]
            path.append(p)
    return path


def plan_targets(doc) -> list:
    """The deployments of a plan file (a `yamlsrc.Doc`) as check targets."""
    from pydantic import ValidationError

    from kvplan.check.base import Declared, InputError, Target, Token
    from kvplan.check.command import EnvVar, find_engine, tokens_from_string

    try:
        plan = PlanFile.model_validate(doc.data)
    except ValidationError as e:
        # of the first field's errors (a union's branches), the one that goes furthest into
        # the data (a mapping's value, not "Input should be a valid list" of the list branch)
        errs = e.errors()
        first = _error_path(doc, errs[0]["loc"])
        err = max((x for x in errs if _error_path(doc, x["loc"])[:len(first)] == first),
                  key=lambda x: len(_error_path(doc, x["loc"])))
        path = _error_path(doc, err["loc"])
        where = doc.loc(*path)
        shown = ".".join(str(p) for p in path) or "plan file"
        raise InputError(f"{shown}: {err['msg']}", file=where.file, line=where.line,
                         hint="see `kvplan schema`") from None
    out = []
    for i, d in enumerate(plan.deployments):
        base = ("deployments", i)

        def seq(*path, _base=base):
            n = doc.node_at(*_base, *path)
            toks = []
            for item in n.value:
                toks += tokens_from_string(item.value, doc.loc_of(item), doc.raw(item))
            return toks

        if isinstance(d.command, str):
            n = doc.node_at(*base, "command")
            argv = tokens_from_string(d.command, doc.loc_of(n), doc.raw(n))
        elif d.command is not None:
            argv = seq("command")
        else:
            ml = doc.loc(*base, "model")
            head = {"vllm": ["vllm", "serve", d.model],
                    "sglang": ["python", "-m", "sglang.launch_server", "--model-path", d.model],
                    "tgi": ["text-generation-launcher", "--model-id", d.model]}
            argv = [Token(str(x), ml) for x in head[d.engine or "vllm"]]
        if isinstance(d.flags, list):
            argv += seq("flags")
        elif isinstance(d.flags, dict):
            for k, v in d.flags.items():
                key = k if k.startswith("-") else "--" + k
                kl = doc.key_loc(*base, "flags", k)
                if v is True or v is None:
                    argv.append(Token(key, kl))
                elif v is False:
                    argv.append(Token("--no-" + key.lstrip("-"), kl))
                else:
                    argv += [Token(key, kl), Token(str(v), doc.loc(*base, "flags", k))]
        env = {k: EnvVar(str(v).lower() if isinstance(v, bool) else str(v),
                         doc.loc(*base, "env", k)) for k, v in d.env.items() if v is not None}
        eng = find_engine(argv, [], env, k8s_vars=False)
        where = doc.loc(*base, "command") if d.command is not None else doc.loc(*base)
        if eng is None:
            raise InputError(f"deployments[{i}] ({d.name}): the command is not vllm serve, "
                             "SGLang or TGI", file=where.file, line=where.line)
        if d.engine and eng.engine != d.engine:
            raise InputError(f"deployments[{i}] ({d.name}): engine {d.engine} but the command "
                             f"runs {eng.engine}", file=where.file, line=where.line)
        t = Target(name=f"plan/{d.name}", kind="plan deployment", loc=doc.loc(*base, "name"),
                   command=eng, gpu=d.gpu, gpu_loc=doc.loc(*base, "gpu") if d.gpu else None,
                   gpu_memory=d.gpu_memory,
                   gpu_count=d.gpus, gpu_count_loc=doc.loc(*base, "gpus") if d.gpus else None,
                   replicas=d.replicas, replicas_loc=doc.key_loc(*base, "replicas"),
                   replicas_source="replicas", model=d.model,
                   model_loc=doc.loc(*base, "model") if d.model else None,
                   vllm_version=d.vllm_version or plan.vllm_version,
                   version_source="plan file" if d.vllm_version or plan.vllm_version else "",
                   declared=Declared(workload=d.workload, slo=d.slo,
                                     loc=doc.loc(*base, "workload")),
                   ignore=set(d.ignore))
        out.append(t)
    return out
