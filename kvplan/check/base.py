"""Shared types of `kvplan check`: locations, tokens, findings and input errors."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvplan.errors import BadInput

PASS, FAIL, WARN, SKIP = "pass", "fail", "warn", "skip"


class InputError(BadInput):
    """Unreadable, malformed or ambiguous input (exit 2), with the file and line."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 hint: str | None = None):
        where = f"{file}:{line}: " if file and line else (f"{file}: " if file else "")
        super().__init__(where + message, hint=hint)
        self.file, self.line_no, self.bare = file, line, message


class NothingToCheck(InputError):
    """No vLLM, SGLang or TGI command in any input (exit 2): `files` are the inputs read,
    each with its note, so a JSON or JUnit report can still name them."""

    def __init__(self, message: str, files: list[FileInfo], hint: str | None = None):
        super().__init__(message, hint=hint)
        self.files = files


@dataclass(frozen=True)
class Loc:
    """Where something was written: file (None for --cmd), 1-based line and column."""

    file: str | None = None
    line: int | None = None
    col: int | None = None

    def __str__(self) -> str:
        if not self.file:
            return "--cmd"
        return f"{self.file}:{self.line}" if self.line else self.file


@dataclass(frozen=True)
class Token:
    """One word of a command line and where it was written."""

    text: str
    loc: Loc = Loc()
    raw: str | None = None  # the YAML scalar's source text, to locate words inside it


@dataclass
class Finding:
    """The outcome of one check on one deployment."""

    id: str
    status: str  # pass | fail | warn | skip
    message: str
    loc: Loc
    fix: str | None = None
    current: Any = None
    suggested: Any = None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "status": self.status, "message": self.message,
                "fix": self.fix, "file": self.loc.file, "line": self.loc.line,
                "column": self.loc.col, "current": self.current, "suggested": self.suggested}


@dataclass(frozen=True)
class Mount:
    """A writable directory the container keeps: where, and how long it lives."""

    path: str
    scope: str  # persistent (claim, host path, bind, volume) | pod (emptyDir) | container (tmpfs)
    kind: str  # the volume's type as written (persistentVolumeClaim, emptyDir, bind, ...)
    loc: Loc = Loc()


@dataclass
class Declared:
    """Workload and SLOs declared for a deployment (annotations or the plan file)."""

    workload: Any = None  # planfile.WorkloadSpec or None
    slo: Any = None  # planfile.SloSpec
    loc: Loc = Loc()


@dataclass
class PodGroup:
    """The pods of one LeaderWorkerSet replica, which its targets (the leader's and the
    workers' engine commands, each arm of a script's `if`) run between them."""

    name: str  # LeaderWorkerSet/NAME
    size: int  # pods a replica: the leader and size - 1 workers
    size_loc: Loc = Loc()


@dataclass
class Target:
    """One engine deployment to check, as read from a file or --cmd."""

    name: str  # e.g. Deployment/llama (container vllm)
    kind: str
    loc: Loc
    command: Any  # command.EngineCommand
    gpu: str | None = None
    gpu_loc: Loc | None = None
    gpu_memory: str | None = None  # a GPU's total memory (a MIG slice, a custom board)
    gpu_choices: list[str] = field(default_factory=list)  # several allowed node types
    gpu_count: int | None = None  # GPUs per replica (all pods of a group)
    gpu_count_loc: Loc | None = None
    replicas: int = 1  # fixed count, or the autoscaler's minimum
    replicas_max: int | None = None  # the autoscaler's maximum
    replicas_loc: Loc | None = None
    replicas_source: str = "default"
    model: str | None = None  # kvplan.io/model or plan file `model:` override
    model_loc: Loc | None = None
    model_hint: str | None = None  # KServe storageUri hf://…: used when the command's model
    model_hint_loc: Loc | None = None  # is a path inside the container
    vllm_version: str | None = None
    version_source: str = ""
    version_loc: Loc | None = None  # where kvplan.io/vllm-version is written
    # (kvplan.io/vllm-version, image) when the annotation disagrees with the release the
    # image's tag names, which is checked instead
    version_conflict: tuple[str, str] | None = None
    declared: Declared = field(default_factory=Declared)
    ignore: set[str] = field(default_factory=set)
    template: bool = False  # a ServingRuntime: size only when annotated
    mounts: list[Mount] | None = None  # None: the input does not describe volumes
    image: str | None = None
    image_loc: Loc | None = None
    group: PodGroup | None = None  # a LeaderWorkerSet's pods
    role: str | None = None  # in a group: leader | worker | pods (one template for all)
    group_entry: str | None = None  # the target that holds the group's checks, if not this
    pod_gpus: int | None = None  # in a group: the GPUs of one pod of this template
    # in a group, when the command depends on the pod's LWS_WORKER_INDEX: (index, the engine
    # command that pod runs) for each pod of the template
    pod_commands: list[tuple[int, Any]] = field(default_factory=list)


@dataclass
class FileInfo:
    file: str
    kinds: list[str] = field(default_factory=list)
    targets: int = 0
    error: InputError | None = None  # unreadable or malformed: not checked (exit 2)
    sources: set[str] = field(default_factory=set)  # the Helm templates its documents name

    def holds(self, file: str | None) -> bool:
        """Whether a location's file is this input (or a template rendered into it)."""
        return file == self.file or file in self.sources

    @property
    def note(self) -> str | None:
        if self.targets or self.error:
            return None
        seen = f" (found: {', '.join(sorted(set(self.kinds)))})" if self.kinds else ""
        return f"nothing to check: no vLLM, SGLang or TGI command{seen}"
