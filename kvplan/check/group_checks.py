"""lws-group-consistent: the pods of one LeaderWorkerSet replica run one vLLM deployment
between them (a data-parallel group over the leader and the workers, `--headless` workers, or
one engine over `--nnodes` hosts), so every pod must start vLLM alike, and the ranks the pods
run must make up the group. A rank from the pod's LWS_WORKER_INDEX is read pod by pod
(`Target.pod_commands`); a value kvplan cannot resolve is left out, never failed, and the
pass says so.

The group's GPU count (`gpu-count-matches`) is redone here when the worker template runs an
engine too: the GPUs each pod's engine uses, summed over the group's pods.

The finding belongs to the group's entry (the leader's target, `inputs._link_groups`) and points
at the value to change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvplan.check.base import FAIL, PASS, SKIP, WARN, Loc, Target
from kvplan.check.checks import Outcome, apply_ignore, layout_unresolved
from kvplan.check.mapping import SGLANG_FIELDS, TGI_FIELDS, VLLM_FIELDS, Parsed, spelled

CID = "lws-group-consistent"
WHY = {
    "dp": "every pod of the group must start vLLM alike: the data-parallel group hangs at its "
          "handshake or fails at start-up",
    "nodes": "every pod of the group must start vLLM alike: the engine spread over the pods "
             "(--nnodes) hangs at its handshake or fails at start-up",
    "apart": "the pods run engines of their own (no data-parallel group or --nnodes joins "
             "them), so one group would serve two different deployments",
}
VARIABLES = "set from variables kvplan cannot resolve"


@dataclass
class Setting:
    value: Any  # None: the default
    shown: str  # as the message quotes it
    loc: Loc
    fix: str  # how to set this value on a pod
    short: str = ""  # as a pass lists it, when not `shown`
    explicit: bool = True  # set on the pod (not the release's or the model's default)
    instead: str = ""  # what another value replaces on this pod (an ignored variable)


def check(outcomes: list[Outcome]) -> None:
    """Add the group's finding to the entry of each LeaderWorkerSet group."""
    groups: dict[int, list[Outcome]] = {}
    for o in outcomes:
        if o.target.group is not None and o.parsed is not None:
            groups.setdefault(id(o.target.group), []).append(o)
    for os in groups.values():
        entry = next((o for o in os if not o.target.group_entry), None)
        if entry is None:
            continue
        members = [o for o in os if o is not entry]
        _group(entry, members)
        if members:
            _group_gpus(entry, members)
        apply_ignore(entry)


def who(t: Target) -> str:
    """How a message names the pod template: leader, worker, branch at line N."""
    if t.name.endswith(")"):
        return t.name[t.name.rindex("(") + 1:-1]
    return {"leader": "leader", "worker": "worker"}.get(t.role or "", "pods")


def _kind(os: list[Outcome]) -> str:
    """What joins the group's pods: a data-parallel group, one engine over --nnodes hosts, or
    nothing (each pod its own engine)."""
    if any(_int(o.parsed, "nnodes", 1) > 1 for o in os):
        return "nodes"
    if any(_int(o.parsed, "data_parallel_size", 1) > 1 or o.parsed.values.get("headless")
           for o in os):
        return "dp"
    return "apart"


def _group(entry: Outcome, members: list[Outcome]) -> None:
    p = entry.parsed
    spans = _dp_spans(p)
    if not members and not spans and _int(p, "nnodes", 1) <= 1:
        return  # one engine command, no group between the pods: nothing to do
    before = len(entry.findings)
    skipped: dict[str, str] = {}  # label -> why not compared
    ours, why_ours = _settings(entry)
    ew = who(entry.target)
    kind = _kind([entry, *members])
    for m in members:
        theirs, why_theirs = _settings(m)
        mw = who(m.target)
        for key, label in LABELS.items():
            a, b = ours.get(key), theirs.get(key)
            if a is None or b is None:
                reason = why_ours.get(key) or why_theirs.get(key)
                if reason:
                    skipped[label] = reason
                continue
            if a.value == b.value:
                continue
            if key == "all2all" and _ep_off(ours) and _ep_off(theirs):
                continue  # no expert parallelism: no tokens exchanged
            if key == "mml" and None in (a.value, b.value):
                skipped[label] = "the model's default is not known"
                continue
            why = {"model": "the pods would load different models",
                   "image": "the pods would run different vLLM builds, whose start-up "
                            "handshakes need not match"}.get(key, WHY[kind])
            if key == "all2all":
                why = "the pods exchange tokens differently and the group fails at start-up"
            if key == "all2all" and not a.explicit and b.explicit:
                # the leader runs the default (its variable ignored, or none set): change it
                line = f" (line {b.loc.line})" if b.loc.line else ""
                entry.add(CID, FAIL, f"{label} differs: the {ew} runs {a.shown}, the {mw} "
                          f"{b.shown}{line}: {why}", a.loc,
                          fix=f"{b.fix}{a.instead} (as the {mw})",
                          current=a.value, suggested=b.value)
                continue
            line = f" (line {a.loc.line})" if a.loc.line else ""
            verb = "runs" if key == "all2all" else "has"
            entry.add(CID, FAIL, f"{label} differs: the {mw} {verb} {b.shown}, the {ew} "
                      f"{a.shown}{line}: {why}", b.loc, fix=f"{a.fix} (as the {ew})",
                      current=b.value, suggested=a.value)
    ranks = _ranks(entry, members, skipped)
    nodes = _nodes(entry, members, skipped)
    if len(entry.findings) == before:
        agreed = [f"{label} {ours[k].short or ours[k].shown}" for k, label in LABELS.items()
                  if ours.get(k) is not None and label not in skipped and not (
                      k == "nnodes" and ours[k].value == 1) and not (
                      k == "all2all" and _ep_off(ours))]
        msg = (f"the {ew} and the {', '.join(sorted({who(m.target) for m in members}))} "
               f"agree: {', '.join(agreed)}" if members else "")
        for extra in (ranks, nodes):
            msg += ("; " if msg and extra else "") + (extra or "")
        by_reason: dict[str, list[str]] = {}
        for label, reason in skipped.items():
            by_reason.setdefault(reason, []).append(label)
        for reason, labels in by_reason.items():
            msg += ("; " if msg else "") + f"not compared: {', '.join(labels)} ({reason})"
        entry.add(CID, PASS, msg or "one pod template", p.cmd.loc)


def _ep_off(settings: dict[str, Setting | None]) -> bool:
    ep = settings.get("ep")
    return ep is not None and not ep.value


LABELS = {"model": "model", "image": "image", "dp": "--data-parallel-size",
          "tp": "--tensor-parallel-size", "pp": "--pipeline-parallel-size",
          "nnodes": "--nnodes", "ep": "expert parallelism", "all2all": "all-to-all backend",
          "mml": "--max-model-len"}


def _unknown(p: Parsed, fld: str) -> bool:
    """Set on the command line, but to a value kvplan could not read (a variable)."""
    table = {"vllm": VLLM_FIELDS, "sglang": SGLANG_FIELDS}.get(p.engine, TGI_FIELDS)
    return fld not in p.values and any(table.get(f.name or "") == fld for f in p.flags)


def _settings(o: Outcome) -> tuple[dict[str, Setting | None], dict[str, str]]:
    """The compared settings of one pod template, and why those left out are."""
    p, t = o.parsed, o.target
    out: dict[str, Setting | None] = {}
    why: dict[str, str] = {}
    model = t.model or p.model
    out["model"] = None if not model or "$" in model else Setting(
        model, model, t.model_loc or p.model_loc or p.cmd.loc, f"serve {model}")
    if model and "$" in model:
        why["model"] = VARIABLES
    out["image"] = None if not t.image or "$" in t.image else Setting(
        t.image, t.image, t.image_loc or t.loc, f"image: {t.image}")
    for key, fld in (("dp", "data_parallel_size"), ("tp", "tensor_parallel_size"),
                     ("pp", "pipeline_parallel_size"), ("nnodes", "nnodes")):
        name = spelled(p.engine, fld)
        if _unknown(p, fld):
            out[key], why[key] = None, VARIABLES
        else:
            v = p.values.get(fld) or 1
            out[key] = Setting(v, str(v), p.loc_of(fld), f"{name} {v}")
    if _unknown(p, "enable_expert_parallel"):
        out["ep"], why["ep"] = None, VARIABLES
    else:
        on = bool(p.values.get("enable_expert_parallel"))
        out["ep"] = Setting(on, "--enable-expert-parallel" if on else
                            "no --enable-expert-parallel", p.loc_of("enable_expert_parallel"),
                            "add --enable-expert-parallel" if on else
                            "remove --enable-expert-parallel", "on" if on else "off")
    out["all2all"], reason = _all2all(o)
    if reason:
        why["all2all"] = reason
    if _unknown(p, "max_model_len"):
        out["mml"], why["mml"] = None, VARIABLES
    elif "max_model_len" in p.values:
        v = p.values["max_model_len"]
        out["mml"] = Setting(v, str(v), p.loc_of("max_model_len"),
                             f"{spelled(p.engine, 'max_model_len')} {v}")
    elif o.facts.get("max_model_len") is not None:
        v = o.facts["max_model_len"]
        out["mml"] = Setting(v, f"{v} (the model's default)", p.cmd.loc,
                             f"{spelled(p.engine, 'max_model_len')} {v}", explicit=False)
    else:  # not set, and not sized: the same default as another pod's that sets none
        out["mml"] = Setting(None, "not set (the model's default)", p.cmd.loc,
                             f"no {spelled(p.engine, 'max_model_len')}", explicit=False)
    return out, why


def _all2all(o: Outcome) -> tuple[Setting | None, str | None]:
    """The all-to-all backend the pod runs: the flag, the variable where the release reads it
    (`core/all2all.effective`), else the release's default."""
    from kvplan.core import all2all as A2A
    from kvplan.core.versions import VllmVersion
    from kvplan.errors import BadInput

    p = o.parsed
    if p.engine != "vllm":
        return None, None
    env = p.cmd.env.get("VLLM_ALL2ALL_BACKEND")
    if _unknown(p, "all2all_backend") or (env is not None and env.value is None):
        return None, VARIABLES
    version = VllmVersion.of(o.facts.get("vllm_version") or "0.33")
    flag = p.values.get("all2all_backend")
    notes: list[str] = []
    try:
        backend, via = A2A.effective(flag, env.value if env else None, version.v, notes)
    except BadInput:
        return None, f"refused by vLLM {version.text}"
    if backend is None:
        return None, f"vLLM {version.text} has no all-to-all backends"
    flag_of = (f"--all2all-backend {backend}" if version.at_least(0, 11, 1) else
               f"VLLM_ALL2ALL_BACKEND={backend}")
    if via == "flag":
        return Setting(backend, backend, p.loc_of("all2all_backend"), flag_of), None
    if via == "env":
        return Setting(backend, f"{backend} (VLLM_ALL2ALL_BACKEND)", env.loc,
                       f"VLLM_ALL2ALL_BACKEND={backend}" if not version.at_least(0, 11, 1)
                       else flag_of, backend), None
    ignored = f": vLLM {version.text} does not read VLLM_ALL2ALL_BACKEND={env.value}" \
        if env is not None else ""
    return Setting(backend, f"{backend} (the release's default{ignored})",
                   env.loc if env is not None else p.cmd.loc, flag_of, backend,
                   explicit=False, instead=" in place of VLLM_ALL2ALL_BACKEND" if ignored
                   else ""), None


def _dp_spans(p: Parsed) -> bool:
    v = p.values
    return bool(v.get("data_parallel_size_local") and v.get("data_parallel_size") and
                v["data_parallel_size_local"] < v["data_parallel_size"])


def _int(p: Parsed, fld: str, default: int | None = None) -> int | None:
    v = p.values.get(fld)
    return v if isinstance(v, int) else default


# --- the ranks each pod runs -----------------------------------------------------------------

def _templates(entry: Outcome, members: list[Outcome]) -> dict[str, list[Outcome]]:
    """The pod templates: leader (1 pod), worker (size - 1), or one for every pod (size); a
    template whose script has branches is split between them in a way not known."""
    out: dict[str, list[Outcome]] = {}
    for o in [entry, *members]:
        out.setdefault(o.target.role or "pods", []).append(o)
    return out


def _pods(role: str, size: int) -> range:
    """The LWS_WORKER_INDEX of each pod of a template (a range: a group may be huge)."""
    return {"leader": range(1), "worker": range(1, size)}.get(role, range(size))


def _per_pod(o: Outcome, fld: str, default: int | None
             ) -> tuple[int | None, dict[int, int]] | None:
    """(the template's literal value, or None; the value on each pod read from the pod's own
    command when it depends on LWS_WORKER_INDEX). A flag not given takes `default`; None when
    it has none (not compared)."""
    p = o.parsed
    if fld in p.values:
        v = p.values[fld]
        return (v if isinstance(v, int) else None), {}
    if not _unknown(p, fld):
        return None if default is None else (default, {})
    from kvplan.check.checks import _registry
    from kvplan.check.mapping import parse

    reg = _registry(o.facts["vllm_version"]) if p.engine == "vllm" else None
    got: dict[int, int] = {}
    for i, cmd in o.target.pod_commands:
        v = parse(cmd, reg).values.get(fld) if cmd is not None else None
        if isinstance(v, int):
            got[i] = v
    return None, got


@dataclass
class _Span:
    lo: int
    hi: int  # exclusive
    label: str  # the worker, the worker pod with LWS_WORKER_INDEX 2, ...
    loc: Loc
    outcome: Outcome


def _spans(entry: Outcome, members: list[Outcome], fld: str, width: Any, default: int | None,
           skipped: dict[str, str], label: str, shared: Any) -> tuple[list[_Span], bool]:
    """The ranks each pod claims by `fld` (start + width), pod by pod where the value comes
    from LWS_WORKER_INDEX; `shared(o, value, pods)` reports a literal every pod of a
    multi-pod template shares. (spans, complete)."""
    size = entry.target.group.size
    out: list[_Span] = []
    complete = True
    for role, os in _templates(entry, members).items():
        pods = _pods(role, size)
        got = [(o, _per_pod(o, fld, default)) for o in os]
        if any(r is None for _, r in got):
            complete = False  # no default to read (the DP start rank over --nnodes hosts)
            continue
        read = [(o, r[0], r[1]) for o, r in got]
        if all(v is not None for _, v, _ in read):
            for o, v, _ in read:
                if len(pods) > 1 and len(os) == 1:
                    shared(o, v, len(pods))
                    complete = False
                else:
                    out.append(_Span(v, v + width(o), f"the {who(o.target)}",
                                     o.parsed.loc_of(fld), o))
            continue
        for i in pods:  # pod by pod: the template's branches must agree on the pod's value
            vals = {v if v is not None else each.get(i) for _, v, each in read}
            if len(vals) != 1 or None in vals:
                complete = False
                skipped[label] = VARIABLES if None in vals else \
                    "the script's branches give a pod different values"
                break
            (v,) = vals
            o = read[0][0]
            name = "the worker pod" if role == "worker" else "the pod"
            out.append(_Span(v, v + width(o), f"{name} with LWS_WORKER_INDEX {i}",
                             o.parsed.loc_of(fld), o))
    return out, complete


def _free(spans: list[_Span], skip: _Span, width: int, limit: int) -> int | None:
    """The lowest start of `width` ranks below `limit` no other span claims."""
    taken = [(s.lo, s.hi) for s in spans if s is not skip]
    for start in range(0, limit - width + 1):
        if all(start + width <= lo or start >= hi for lo, hi in taken):
            return start
    return None


def _ranks(entry: Outcome, members: list[Outcome], skipped: dict[str, str]) -> str | None:
    """Fail ranks past the DP size, pods that claim the same ranks and local sizes that do
    not add up to the DP size; the summary for a pass (None: nothing to say)."""
    p = entry.parsed
    dp = p.values.get("data_parallel_size")
    t = entry.target
    if not dp or not all(_int(o.parsed, "data_parallel_size_local") for o in [entry, *members]):
        return None
    size = t.group.size
    templates = _templates(entry, members)
    before = len(entry.findings)
    fld = "data_parallel_start_rank"

    def shared(o: Outcome, start: int, n: int) -> None:
        local = o.parsed.values["data_parallel_size_local"]
        run = f"run --data-parallel-start-rank {start}" if fld in o.parsed.values else \
            "run without --data-parallel-start-rank (rank 0)"
        entry.add(CID, FAIL, f"the {n} {'worker ' if o.target.role == 'worker' else ''}pods of "
                  f"the {who(o.target)} template all {run}: "
                  f"each claims ranks {start}-{start + local - 1} and the group never forms",
                  o.parsed.loc_of(fld), fix="give each pod its own start rank in a shell: "
                  "--data-parallel-start-rank $(( " + (
                      f"(LWS_WORKER_INDEX - 1) * {local} + {_leader_end(templates)}"
                      if o.target.role == "worker" and _leader_end(templates) not in (None, local)
                      else f"LWS_WORKER_INDEX * {local}") + " ))", current=start)

    spans, complete = _spans(entry, members, fld,
                             lambda o: o.parsed.values["data_parallel_size_local"],
                             0 if _int(p, "nnodes", 1) <= 1 else None, skipped,
                             "--data-parallel-start-rank", shared)
    # local sizes: the sum over the pods, when each template's branches agree on it
    parts, total = [], 0
    for role, os in templates.items():
        sizes = {o.parsed.values["data_parallel_size_local"] for o in os}
        if len(sizes) != 1:
            total = -1
            break
        (local,) = sizes
        n = len(_pods(role, size))
        total += n * local
        parts.append({"leader": f"{local} on the leader", "worker": f"{n} x {local} on the "
                      f"worker{'s' * (n != 1)}"}.get(role, f"{n} pods x {local}"))
    expr = " + ".join(parts)
    for s in spans:
        if s.hi <= dp:
            continue
        local = s.hi - s.lo
        free = _free(spans, s, local, dp)
        if free is None and total not in (-1, dp):
            continue  # the local sizes do not add up: reported below, with the fix
        entry.add(CID, FAIL, f"{s.label} runs data-parallel ranks {s.lo}-{s.hi - 1} "
                  f"(--data-parallel-start-rank {s.lo}, --data-parallel-size-local {local}), "
                  f"past --data-parallel-size {dp} (ranks 0-{dp - 1}): vLLM has no such rank "
                  "and the group never forms", s.loc,
                  fix=f"--data-parallel-start-rank {free}" if free is not None else
                  f"start ranks that give each pod its own ranks within 0-{dp - 1}",
                  current=s.lo, suggested=free)
    ordered = sorted(spans, key=lambda x: x.lo)
    for a, b in zip(ordered, ordered[1:]):
        if b.lo < a.hi:
            free = _free(spans, b, b.hi - b.lo, dp)
            entry.add(CID, FAIL, f"{b.label} runs data-parallel ranks {b.lo}-{b.hi - 1}, "
                      f"which {a.label} runs too ({a.lo}-{a.hi - 1}): the group never forms",
                      b.loc, fix=f"--data-parallel-start-rank {free}" if free is not None else
                      f"start ranks that give each pod its own ranks within 0-{dp - 1}",
                      current=b.lo, suggested=free)
    if total == -1:
        return None if len(entry.findings) == before else ""
    if total != dp:
        dpl = entry.parsed.set_by.get("data_parallel_size_local")
        locals_ = {o.parsed.values["data_parallel_size_local"] for o in [entry, *members]}
        one = next(iter(locals_))
        fix = (f"leaderWorkerTemplate.size: {dp // one}" if len(locals_) == 1 and
               dp % one == 0 else f"--data-parallel-size {total} on every pod, or "
               f"--data-parallel-size-local values that add up to {dp}")
        entry.add(CID, FAIL, f"the group's pods run {expr} = {total} data-parallel ranks but "
                  f"--data-parallel-size is {dp}: " + (
                      f"ranks {total}-{dp - 1} never start and the group waits for them"
                      if total < dp else f"{total - dp} of them have no place in the group"),
                  t.group.size_loc if fix.startswith("leader") else dpl.loc if dpl else
                  p.cmd.loc, fix=fix, current=total, suggested=dp)
    if len(entry.findings) != before:
        return ""
    per_pod = [s for s in spans if "LWS_WORKER_INDEX" in s.label]
    read = ""
    if complete and per_pod:
        read = " (start ranks " + ", ".join(
            str(s.lo) for s in sorted(spans, key=lambda x: x.lo)) + ", read pod by pod from " \
            "LWS_WORKER_INDEX)"
    return f"{expr} = {dp} data-parallel ranks{read}"


def _leader_end(templates: dict[str, list[Outcome]]) -> int | None:
    """Where the leader's ranks end, when it runs a literal start rank."""
    lead = templates.get("leader")
    if not lead or len(lead) != 1:
        return None
    q = lead[0].parsed
    start = _int(q, "data_parallel_start_rank", 0 if "data_parallel_start_rank" not in q.values
                 else None)
    return None if start is None else start + q.values["data_parallel_size_local"]


def _nodes(entry: Outcome, members: list[Outcome], skipped: dict[str, str]) -> str | None:
    """One engine over the group's pods (`--nnodes`, 0.11.1+): as many nodes as pods, a world
    size the nodes divide, and a node rank of its own for each pod, the leader's 0 (node 0
    opens the group at --master-addr). The summary for a pass (None: no --nnodes)."""
    p = entry.parsed
    nn = _int(p, "nnodes", 1)
    if nn is None or nn <= 1:
        return None
    t = entry.target
    size = t.group.size
    before = len(entry.findings)
    if nn != size:
        entry.add(CID, FAIL, f"--nnodes {nn} but the group has {size} pods "
                  f"(leaderWorkerTemplate.size): " + (
                      f"vLLM waits for {nn - size} node{'s' * (nn - size != 1)} that never join"
                      if nn > size else f"node ranks {nn} and up are refused (node_rank must be "
                      "less than nnodes)"), p.loc_of("nnodes"), fix=f"--nnodes {size}",
                  current=nn, suggested=size)
    world = (_int(p, "tensor_parallel_size", 1) or 1) * (
        _int(p, "pipeline_parallel_size", 1) or 1) * (_int(p, "data_parallel_size", 1) or 1)
    if world % nn:
        entry.add(CID, FAIL, f"the world size {world} (TP x PP x DP) is not divisible by "
                  f"--nnodes {nn}: vLLM refuses to start", p.loc_of("nnodes"), current=nn)
    fld = "node_rank"

    def shared(o: Outcome, rank: int, n: int) -> None:
        run = f"run --node-rank {rank}" if fld in o.parsed.values else \
            "run without --node-rank (rank 0)"
        entry.add(CID, FAIL, f"the {n} {'worker ' if o.target.role == 'worker' else ''}pods of "
                  f"the {who(o.target)} template all {run}: the nodes "
                  "need a rank each and the engine never starts", o.parsed.loc_of(fld),
                  fix="--node-rank $(LWS_WORKER_INDEX)", current=rank)

    spans, complete = _spans(entry, members, fld, lambda o: 1, 0, skipped, "--node-rank",
                             shared)
    for s in spans:
        if s.lo >= nn:
            free = _free(spans, s, 1, nn)
            entry.add(CID, FAIL, f"{s.label} runs --node-rank {s.lo}, not below --nnodes {nn}: "
                      "vLLM refuses to start", s.loc,
                      fix=f"--node-rank {free}" if free is not None else f"--nnodes {size}",
                      current=s.lo, suggested=free)
    ordered = sorted(spans, key=lambda x: x.lo)
    for a, b in zip(ordered, ordered[1:]):
        if b.lo == a.lo:
            free = _free(spans, b, 1, nn)
            entry.add(CID, FAIL, f"{b.label} runs --node-rank {b.lo}, as {a.label} does: "
                      + ("both act as node 0, the one that opens the group, and "
                         if b.lo == 0 else "") + "the engine never starts", b.loc,
                      fix=f"--node-rank {free}" if free is not None and b.outcome.target.role
                      != "pods" else "--node-rank $(LWS_WORKER_INDEX)", current=b.lo,
                      suggested=free)
    lead = next((s for s in spans if s.outcome is entry and s.label == "the leader"), None)
    master = next((f.value for f in p.flags if f.name == "--master-addr"), None) or ""
    if lead is not None and lead.lo != 0 and "LWS_LEADER_ADDRESS" in master and not any(
            s.lo == lead.lo and s is not lead for s in spans):
        entry.add(CID, FAIL, f"the leader runs --node-rank {lead.lo}: the pods reach node 0 "
                  f"at --master-addr {master}, the leader's address, where node 0 does not "
                  "run", lead.loc, fix="--node-rank 0",
                  current=lead.lo, suggested=0)
    if len(entry.findings) != before:
        return ""
    if not complete:
        return None
    ranks = ", ".join(f"{s.lo} ({s.label[4:]})" for s in sorted(spans, key=lambda x: x.lo))
    return f"node ranks {ranks} of --nnodes {nn}"


# --- gpu-count-matches over the group's pods ------------------------------------------------

def _use(p: Parsed) -> int | None:
    """The GPUs one pod's engine uses: TP x PP x local DP, or its share of an engine over
    --nnodes hosts (`local_world_size`)."""
    if layout_unresolved(p):
        return None
    v = p.values
    tp, pp = v.get("tensor_parallel_size") or 1, v.get("pipeline_parallel_size") or 1
    dp, nn = v.get("data_parallel_size") or 1, v.get("nnodes") or 1
    if nn > 1:
        return tp * pp * dp // nn
    return tp * pp * (v.get("data_parallel_size_local") or dp)


def _group_gpus(entry: Outcome, members: list[Outcome]) -> None:
    """gpu-count-matches for a group whose worker template runs an engine too: the GPUs the
    pods' engines use, summed over the pods, against the group's."""
    cid = "gpu-count-matches"
    t = entry.target
    have = t.gpu_count
    if have is None or any(f.id == cid and f.status == SKIP for f in entry.findings):
        return
    size = t.group.size
    layout = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "nnodes")
    if _kind([entry, *members]) != "apart" and any(
            o.parsed.values.get(k) != entry.parsed.values.get(k) for o in members
            for k in layout):
        return  # the pods disagree on the layout (lws-group-consistent): the leader's counts
    parts, need, fixes = [], 0, []
    loc = t.gpu_count_loc or t.loc
    for role, os in _templates(entry, members).items():
        uses = {_use(o.parsed) for o in os}
        if len(uses) != 1 or None in uses:
            return  # the template's branches run different layouts: left as it was
        (use,) = uses
        n = len(_pods(role, size))
        need += n * use
        parts.append({"leader": f"{use} on the leader", "worker": f"{n} x {use} on the "
                      f"worker{'s' * (n != 1)}"}.get(role, f"{n} pods x {use}"))
        pod = os[0].target
        if pod.pod_gpus is not None and pod.pod_gpus != use:
            fixes.append(f"{use} on the {who(pod)}" if role != "pods" else f"{use} per pod")
            loc = pod.gpu_count_loc or loc
    entry.findings = [f for f in entry.findings if f.id != cid]
    entry.facts["gpus_needed"] = need
    expr = " + ".join(parts) + f" = {need}"
    fix = f"nvidia.com/gpu: {'; '.join(fixes)}" if fixes else \
        f"give the group {need} GPU{'s' * (need != 1)}"
    if have < need:
        entry.add(cid, FAIL, f"the pods' engines need {expr} GPUs (TP x PP x local DP on each "
                  f"pod) but the group gets {have}: the engines cannot start", loc, fix=fix,
                  current=have, suggested=need)
    elif have > need:
        entry.add(cid, WARN, f"{have} GPUs allocated but the pods' engines use {expr} (TP x PP "
                  f"x local DP on each pod): {have - need} idle", loc, fix=fix, current=have,
                  suggested=need)
    else:
        entry.add(cid, PASS, f"the pods' engines use {expr} GPUs (TP x PP x local DP on each "
                  f"pod), the {have} allocated", loc, current=have)
