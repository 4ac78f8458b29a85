"""lws-group-consistent: the pods of one LeaderWorkerSet replica run one vLLM deployment
between them (a data-parallel group over the leader and the workers, `--headless` workers), so
every pod must start vLLM alike, and the data-parallel ranks the pods run must make up the
group. A value kvplan cannot resolve (`--data-parallel-start-rank $START_RANK` from
LWS_WORKER_INDEX) is left out, never failed.

The finding belongs to the group's entry (the leader's target, `inputs._link_groups`) and points
at the value to change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvplan.check.base import FAIL, PASS, WARN, Loc, Target
from kvplan.check.checks import Outcome, apply_ignore
from kvplan.check.mapping import SGLANG_FIELDS, TGI_FIELDS, VLLM_FIELDS, Parsed, spelled

CID = "lws-group-consistent"
ALIKE = ("every pod of the group must start vLLM alike: the data-parallel group hangs at its "
         "handshake or fails at start-up")


@dataclass
class Setting:
    value: Any  # None: the default
    shown: str  # as the message quotes it
    loc: Loc
    fix: str  # how to set this value on a pod
    short: str = ""  # as a pass lists it, when not `shown`


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
        apply_ignore(entry)


def who(t: Target) -> str:
    """How a message names the pod template: leader, worker, branch at line N."""
    if t.name.endswith(")"):
        return t.name[t.name.rindex("(") + 1:-1]
    return {"leader": "leader", "worker": "worker"}.get(t.role or "", "pods")


def _group(entry: Outcome, members: list[Outcome]) -> None:
    p = entry.parsed
    spans = _dp_spans(p)
    if not members and not spans:
        return  # one engine command, no data-parallel group between the pods: nothing to do
    before = len(entry.findings)
    skipped: set[str] = set()
    ours = _settings(entry)
    ew = who(entry.target)
    for m in members:
        theirs = _settings(m)
        mw = who(m.target)
        for key, label in LABELS.items():
            a, b = ours.get(key), theirs.get(key)
            if a is None or b is None:
                skipped.add(label)
                continue
            if a.value == b.value:
                continue
            status = FAIL
            if key == "all2all" and (a.value is None or b.value is None):
                status = WARN  # one takes the release's default, which may be the other's
            why = {"model": "the pods would load different models",
                   "image": "the pods would run different vLLM builds, whose start-up "
                            "handshakes need not match"}.get(key, ALIKE)
            if status == WARN:
                why = ("unless that is the release's default, the pods exchange tokens "
                       "differently and the group fails at start-up")
            line = f" (line {a.loc.line})" if a.loc.line else ""
            entry.add(CID, status, f"{label} differs: the {mw} has {b.shown}, the {ew} "
                      f"{a.shown}{line}: {why}", b.loc, fix=f"{a.fix} (as the {ew})",
                      current=b.value, suggested=a.value)
    ranks = _ranks(entry, members)
    if len(entry.findings) == before:
        agreed = [f"{label} {ours[k].short or ours[k].shown}" for k, label in LABELS.items()
                  if ours.get(k) is not None and label not in skipped]
        msg = (f"the {ew} and the {', '.join(sorted({who(m.target) for m in members}))} "
               f"agree: {', '.join(agreed)}" if members else "")
        msg += ("; " if msg and ranks else "") + (ranks or "")
        if skipped:
            msg += f"; not compared: {', '.join(sorted(skipped))} (set from variables " \
                   "kvplan cannot resolve)"
        entry.add(CID, PASS, msg or "one pod template", p.cmd.loc)


LABELS = {"model": "model", "image": "image", "dp": "--data-parallel-size",
          "tp": "--tensor-parallel-size", "pp": "--pipeline-parallel-size",
          "ep": "expert parallelism", "all2all": "all-to-all backend",
          "mml": "--max-model-len"}


def _unknown(p: Parsed, fld: str) -> bool:
    """Set on the command line, but to a value kvplan could not read (a variable)."""
    table = {"vllm": VLLM_FIELDS, "sglang": SGLANG_FIELDS}.get(p.engine, TGI_FIELDS)
    return fld not in p.values and any(table.get(f.name or "") == fld for f in p.flags)


def _settings(o: Outcome) -> dict[str, Setting | None]:
    p, t = o.parsed, o.target
    out: dict[str, Setting | None] = {}
    model = t.model or p.model
    out["model"] = None if not model or "$" in model else Setting(
        model, model, t.model_loc or p.model_loc or p.cmd.loc, f"serve {model}")
    out["image"] = None if not t.image or "$" in t.image else Setting(
        t.image, t.image, t.image_loc or t.loc, f"image: {t.image}")
    for key, fld in (("dp", "data_parallel_size"), ("tp", "tensor_parallel_size"),
                     ("pp", "pipeline_parallel_size")):
        name = spelled(p.engine, fld)
        if _unknown(p, fld):
            out[key] = None
        else:
            v = p.values.get(fld) or 1
            out[key] = Setting(v, str(v), p.loc_of(fld), f"{name} {v}")
    if _unknown(p, "enable_expert_parallel"):
        out["ep"] = None
    else:
        on = bool(p.values.get("enable_expert_parallel"))
        out["ep"] = Setting(on, "--enable-expert-parallel" if on else
                            "no --enable-expert-parallel", p.loc_of("enable_expert_parallel"),
                            "add --enable-expert-parallel" if on else
                            "remove --enable-expert-parallel", "on" if on else "off")
    out["all2all"] = _all2all(o)
    if _unknown(p, "max_model_len"):
        out["mml"] = None
    else:
        v = p.values.get("max_model_len") or o.facts.get("max_model_len")
        given = "max_model_len" in p.values
        out["mml"] = None if v is None else Setting(
            v, str(v) if given else f"{v} (the model's default)", p.loc_of("max_model_len"),
            f"{spelled(p.engine, 'max_model_len')} {v}")
    return out


def _all2all(o: Outcome) -> Setting | None:
    p = o.parsed
    if p.engine != "vllm":
        return None
    env = p.cmd.env.get("VLLM_ALL2ALL_BACKEND")
    if _unknown(p, "all2all_backend") or (env is not None and env.value is None):
        return None
    from kvplan.check.sizing_checks import _all2all, _engine_args

    chosen = _all2all(p, _engine_args(p), o.facts.get("vllm_version") or "0.33") or None
    if chosen is None:
        return Setting(None, "(the release's default)", p.cmd.loc,
                       "remove --all2all-backend and VLLM_ALL2ALL_BACKEND")
    by_flag = p.values.get("all2all_backend") == chosen
    return Setting(chosen, chosen, p.loc_of("all2all_backend") if by_flag else env.loc,
                   f"--all2all-backend {chosen}" if by_flag else
                   f"VLLM_ALL2ALL_BACKEND={chosen}")


def _dp_spans(p: Parsed) -> bool:
    v = p.values
    return bool(v.get("data_parallel_size_local") and v.get("data_parallel_size") and
                v["data_parallel_size_local"] < v["data_parallel_size"])


def _start(p: Parsed) -> int | None:
    """A literal --data-parallel-start-rank (None: not given, or a variable)."""
    v = p.values.get("data_parallel_start_rank")
    return v if isinstance(v, int) else None


def _ranks(entry: Outcome, members: list[Outcome]) -> str | None:
    """Fail ranks past the DP size, pods that claim the same ranks and local sizes that do
    not add up to the DP size; the summary for a pass (None: nothing to say)."""
    p = entry.parsed
    dp = p.values.get("data_parallel_size")
    t = entry.target
    if not dp or not all(_int(o.parsed, "data_parallel_size_local") for o in [entry, *members]):
        return None
    size = t.group.size
    # the pod templates: leader (1 pod), worker (size - 1), or one for every pod (size);
    # a template whose script has branches splits its pods between them in a way not known
    templates: dict[str, list[Outcome]] = {}
    for o in [entry, *members]:
        templates.setdefault(o.target.role or "pods", []).append(o)
    pods = {"leader": 1, "worker": size - 1, "pods": size}
    before = len(entry.findings)
    spans: list[tuple[int, int, Outcome]] = []
    for role, os in templates.items():
        for o in os:
            q = o.parsed
            local, start = q.values["data_parallel_size_local"], _start(q)
            if start is None:
                continue
            loc = q.loc_of("data_parallel_start_rank")
            if start + local > dp:
                entry.add(CID, FAIL, f"the {who(o.target)} runs data-parallel ranks {start}-"
                          f"{start + local - 1} (--data-parallel-start-rank {start}, "
                          f"--data-parallel-size-local {local}), past --data-parallel-size "
                          f"{dp} (ranks 0-{dp - 1}): vLLM has no such rank and the group "
                          "never forms", loc, fix=f"--data-parallel-start-rank "
                          f"{max(0, dp - local)} or less", current=start,
                          suggested=max(0, dp - local))
            elif pods[role] > 1 and len(os) == 1:
                entry.add(CID, FAIL, f"the {pods[role]} {'worker ' if role == 'worker' else ''}"
                          f"pods of the {who(o.target)} template all run "
                          f"--data-parallel-start-rank {start}: each claims ranks {start}-"
                          f"{start + local - 1} and the group never forms", loc,
                          fix="give each pod its own start rank in a shell: "
                          f"--data-parallel-start-rank $(( LWS_WORKER_INDEX * {local} ))",
                          current=start)
            else:
                spans.append((start, start + local, o))
    spans.sort(key=lambda x: x[0])
    for (a0, a1, oa), (b0, b1, ob) in zip(spans, spans[1:]):
        if b0 < a1:
            q = ob.parsed
            entry.add(CID, FAIL, f"the {who(ob.target)} runs data-parallel ranks {b0}-{b1 - 1}, "
                      f"which the {who(oa.target)} runs too ({a0}-{a1 - 1}): the group never "
                      "forms", q.loc_of("data_parallel_start_rank"),
                      fix=f"--data-parallel-start-rank {a1}", current=b0, suggested=a1)
    # local sizes: the sum over the pods, when each template's branches agree on it
    parts, total = [], 0
    for role, os in templates.items():
        sizes = {o.parsed.values["data_parallel_size_local"] for o in os}
        if len(sizes) != 1:
            return None if len(entry.findings) == before else ""
        (local,) = sizes
        n = pods[role]
        total += n * local
        parts.append({"leader": f"{local} on the leader", "worker": f"{n} x {local} on the "
                      f"worker{'s' * (n != 1)}"}.get(role, f"{n} pods x {local}"))
    expr = " + ".join(parts)
    if total != dp:
        dpl = entry.parsed.set_by.get("data_parallel_size_local")
        locals_ = {o.parsed.values["data_parallel_size_local"] for o in [entry, *members]}
        fix = (f"leaderWorkerTemplate.size: {dp // next(iter(locals_))}"
               if len(locals_) == 1 and dp % next(iter(locals_)) == 0 else
               f"make the pods' --data-parallel-size-local add up to {dp}")
        entry.add(CID, FAIL, f"the group's pods run {expr} = {total} data-parallel ranks but "
                  f"--data-parallel-size is {dp}: " + (
                      f"ranks {total}-{dp - 1} never start and the group waits for them"
                      if total < dp else f"{total - dp} of them have no place in the group"),
                  t.group.size_loc if fix.startswith("leader") else dpl.loc if dpl else
                  p.cmd.loc, fix=fix, current=total, suggested=dp)
    if len(entry.findings) != before:
        return ""
    return f"{expr} = {dp} data-parallel ranks"


def _int(p: Parsed, fld: str) -> int | None:
    v = p.values.get(fld)
    return v if isinstance(v, int) else None
