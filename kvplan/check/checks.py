"""The checks of `kvplan check`: each has a stable id, a rule, and a one-line fix on failure.

`run(target)` reads the engine command as the engine's parser would, checks the flags, then
sizes the deployment with kvplan's model of vLLM (`sizing_checks`). docs/check.md has the
table of ids and rules.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from kvplan.check.base import FAIL, PASS, SKIP, WARN, Finding, InputError, Loc, Target
from kvplan.check.mapping import Parsed, parse, spelled
from kvplan.errors import BadInput

CHECKS: dict[str, str] = {
    "flags-known": "every flag exists in the target vLLM release's `vllm serve` parser "
                   "(a typo is a failure with the closest flag suggested)",
    "flag-values": "every value parses as the engine parses it (integers, 32k/32K suffixes, "
                   "choices)",
    "sizing-inputs": "kvplan knows the model and the GPU type, so the deployment can be sized",
    "weights-fit": "the weights fit in gpu_memory_utilization x GPU memory with room for a KV "
                   "cache",
    "max-model-len-fits": "one request of max_model_len fits the KV pool (else vLLM refuses to "
                          "start)",
    "max-num-seqs-safe": "max-num-seqs is within the safe limit for the declared workload "
                         "(else the running batch preempts)",
    "replicas-cover-rate": "the replicas serve the declared request rate within the target "
                           "utilization and TTFT SLO",
    "gpu-memory-utilization-range": "gpu_memory_utilization is in [0.5, 0.95] (warning "
                                    "outside, failure outside (0, 1])",
    "tensor-parallel-valid": "the tensor parallel size divides the model's attention heads "
                             "(and pipeline stages do not exceed its layers)",
    "gpu-count-matches": "the GPUs the container gets equal TP x PP x DP",
    "compile-cache-persisted": "vLLM's torch.compile cache (VLLM_CACHE_ROOT, default "
                               "~/.cache/vllm) is on a volume that outlives the pod (a cold "
                               "compile takes minutes and shrinks the KV cache)",
    "release-modelled": "the deployment's vLLM release is one kvplan models (a newer one is "
                        "checked as the newest, with a warning), and kvplan.io/vllm-version "
                        "agrees with a vLLM image's tag",
    "late-allocations-fit": "what vLLM allocates after sizing the KV cache without budgeting "
                            "it (CUDA graphs it does not subtract, model runner V2's sampler "
                            "warm-up) fits in the memory gpu_memory_utilization leaves",
    "gpu-not-shared": "a time-sliced GPU (GPU feature discovery's -SHARED label) leaves each "
                      "pod that shares it the memory its gpu_memory_utilization asks for "
                      "(reported only for such GPUs)",
    "workload-fits-max-model-len": "the declared workload's prompts are under max_model_len "
                                   "(reported only when 1 % or more are not: vLLM answers "
                                   "them HTTP 400)",
    "lws-group-consistent": "the pods of a LeaderWorkerSet group start vLLM alike (model, "
                            "image, DP, TP, PP, expert parallel, all-to-all backend, "
                            "max-model-len) and their data-parallel ranks make up the group",
}


@dataclass
class Outcome:
    """All findings for one target, and the facts the checks resolved."""

    target: Target
    findings: list[Finding] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    parsed: Parsed | None = None  # the command as the engine's parser reads it

    def add(self, id_: str, status: str, message: str, loc: Loc | None = None,
            fix: str | None = None, current: Any = None, suggested: Any = None) -> Finding:
        f = Finding(id_, status, message, loc or self.target.loc, fix, current, suggested)
        if status in (FAIL, WARN):  # a later finding overrules the check's earlier pass
            self.findings = [g for g in self.findings if not (g.id == id_ and g.status == PASS)]
        self.findings.append(f)
        return f

    def has(self, id_: str, status: str) -> bool:
        return any(f.id == id_ and f.status == status for f in self.findings)


def _registry(key: str):
    from kvplan.engines.vllm_registry import registry

    return registry(key)


def run(t: Target, catalogs: list[str] | None = None) -> Outcome:
    """Every check on one target."""
    from kvplan.check import cache_checks, fix_checks, sizing_checks
    from kvplan.core.versions import LATEST, VllmVersion, beyond_latest
    from kvplan.errors import BadInput

    out = Outcome(t)
    engine = t.command.engine
    newer = engine == "vllm" and beyond_latest(t.vllm_version)
    if newer:  # a release out after kvplan's: checked as the newest it models, and said so
        out.add("release-modelled", WARN, f"vLLM {t.vllm_version} ({t.version_source}) is "
                f"newer than the newest release kvplan models ({LATEST}); checked as {LATEST}: "
                "flags it added are only warned about and its memory changes are not sized",
                t.loc, fix="upgrade kvplan, or set kvplan.io/vllm-version to the release to "
                "check against", current=t.vllm_version, suggested=LATEST)
    if t.version_conflict:  # a stale annotation: the image's release is what runs
        given, image = t.version_conflict
        out.add("release-modelled", WARN, f"kvplan.io/vllm-version {given} disagrees with the "
                f"image {image}, which runs vLLM {t.vllm_version}: checked against "
                f"{t.vllm_version}", t.version_loc or t.loc,
                fix=f'kvplan.io/vllm-version: "{t.vllm_version}", or remove it (the image tag '
                "gives the release)", current=given, suggested=t.vllm_version)
    try:
        version = VllmVersion.of(LATEST if newer else t.vllm_version)
    except BadInput as e:
        raise InputError(f"{e.message} ({t.version_source or 'vLLM version'})",
                         file=t.loc.file, line=t.loc.line,
                         hint="set the annotation kvplan.io/vllm-version or --vllm-version"
                         ) from None
    reg = _registry(version.text) if engine == "vllm" else None
    p = parse(t.command, reg)
    out.parsed = p
    if newer:
        out.facts["vllm_version_requested"] = t.vllm_version
    out.facts.update(engine=engine, form=t.command.form, vllm_version=version.text,
                     vllm_release=reg.release if reg else None,
                     version_source=t.version_source or "default")
    flags_known(out, p, reg, lenient=newer, target=version.text)
    flag_values(out, p, reg)
    utilization_range(out, p, version.default_gpu_memory_utilization)
    sizing_checks.run(out, p, version.text, catalogs)
    fix_checks.check(out, p, version.text, catalogs)
    gpu_count(out, p)
    cache_checks.check(out, t, p)
    apply_ignore(out)
    return out


def apply_ignore(out: Outcome) -> None:
    """The checks the target's kvplan.io/ignore names, reported as skipped."""
    for f in out.findings:
        if f.id in out.target.ignore and not f.message.startswith(IGNORED):
            f.status, f.message = SKIP, f"{IGNORED}{f.message}"
            f.fix = None


IGNORED = "ignored (kvplan.io/ignore): "


def flags_known(out: Outcome, p: Parsed, reg: Any, lenient: bool = False,
                target: str | None = None) -> None:
    """`lenient`: the target runs a release newer than `reg`'s, so an unknown flag may be new
    in it (a warning, not a failure). A later patch of the recorded minor (`target` 0.11.1
    against the 0.11.0 record) gets the same benefit for flags a later minor has."""
    if reg is None:
        names = {"sglang": "SGLang", "tgi": "TGI"}[p.engine]
        out.add("flags-known", SKIP, f"{names} flags are not validated (kvplan records vLLM's "
                "parser only); the flags that map onto vLLM's are read", p.cmd.loc)
        return
    from kvplan.core.versions import parse_version
    from kvplan.engines.vllm_registry import history, instead

    before = len(out.findings)
    for f in p.flags:
        if f.name is not None:
            continue
        spelt = "--" + f.key.lstrip("-").split("=", 1)[0].replace("_", "-") \
            if f.key.startswith("--") else f.key
        added, dropped, had = history(f.key, reg.release)
        later = bool(added) and not had  # only releases after this one have it
        hint = None if added or had else reg.suggest(f.key)  # a look-alike is not what was meant
        why = ""
        if had:
            why = f" (vLLM {dropped} dropped it; {had} had it" + (
                f"; {added} has it again)" if added else ")")
        elif added:
            why = f" (vLLM {added} added it)"
        patch = later and target is not None and \
            parse_version(target) > parse_version(reg.release)
        use = instead(spelt, f.value, reg)
        out.add("flags-known", WARN if lenient or patch else FAIL, f"unknown flag {f.key} for "
                f"vLLM {reg.release}: `vllm serve` exits with 'unrecognized arguments'{why}" + (
                    " unless the newer release added it" if lenient else
                    f" unless {target}, a later patch than kvplan's record, added it"
                    if patch else ""), f.loc,
                fix=f"use {use} instead" if use else f"use {hint}" if hint else
                f"remove {f.key}" + (f", or run vLLM {added} or later" if later else
                                     f" ({_SAFE_TO_DROP[spelt]})" if spelt in _SAFE_TO_DROP
                                     else ""),
                current=f.key, suggested=use or hint)
    unresolved = {id(tok) for tok in p.cmd.unresolved}
    for tok in p.extra:
        if id(tok) in unresolved or _VAR.search(tok.text):  # may expand to flags, or to
            # nothing: warned about below
            continue
        out.add("flags-known", FAIL, f"unexpected argument {tok.text!r}: vLLM's parser rejects "
                "it", tok.loc, fix="remove it, or put it after the flag it belongs to",
                current=tok.text)
    model_flag = p.set_by.get("model")
    rejects = str(reg.parser.get("model_option", "")).startswith("rejected")
    # 0.6-0.11 `FlexibleArgumentParser.parse_args`: `any(arg == '--model' ...)` after
    # `serve`, so `--model=X` passes
    if model_flag and p.cmd.form == "vllm-serve" and rejects and model_flag.tok.text == "--model":
        out.add("flags-known", FAIL, f"vllm serve in vLLM {reg.release} rejects --model",
                model_flag.loc, fix=f"vllm serve {p.model} … (the model is positional)")
    for f in p.flags:
        if f.abbreviated:
            out.add("flags-known", WARN, f"{f.key} is accepted only as an abbreviation of "
                    f"{f.name}; a new flag with the same prefix in a later release makes it "
                    "ambiguous and vLLM refuses to start", f.loc, fix=f"use {f.name}",
                    current=f.key, suggested=f.name)
        if f.name and reg.flags.get(f.name, {}).get("deprecated"):
            _deprecated(out, f, reg)
    for first, again in p.repeated:
        where = f" (also line {first.loc.line})" if first.loc.line else ""
        if "." in again.key and "." not in first.key:  # `FlexibleArgumentParser`
            msg = (f"{again.key.split('.')[0]}.* keys replace {first.key} '{{...}}'{where}: "
                   "vLLM applies the dotted form after every other argument")
        else:
            msg = f"{again.key} is given twice{where}; vLLM uses the last value"
        out.add("flags-known", WARN, msg, again.loc, fix=f"keep one {again.name}")
    if p.cmd.launcher:  # `my-init --opt vllm serve …`: a program kvplan does not read
        words = " ".join(t.text for t in p.cmd.launcher)
        out.add("flags-known", WARN, f"the engine command runs behind {words!r}, which kvplan "
                "does not know: checked as if it runs the command after it unchanged",
                p.cmd.launcher[0].loc, fix="run the engine directly, or behind a launcher "
                "kvplan reads (dumb-init, tini, numactl, taskset, stdbuf, timeout, nice, env, "
                "sudo, uv run; docs/check.md)", current=words)
    if p.config_file:
        out.add("flags-known", WARN, f"options in --config {p.config_file.value} are not read "
                "by kvplan", p.config_file.loc, fix="put the memory and scheduling flags on "
                "the command line")
    alone = {id(tok) for tok in p.extra}
    for tok in p.cmd.unresolved:
        if id(tok) not in alone and p.cmd.from_lws(tok):
            continue  # the leader's address, or a rank from the pod's LWS_WORKER_INDEX:
            # set on every pod (lws-group-consistent reads the ranks pod by pod)
        what = "the arguments it expands to are" if id(tok) in alone else "that value is"
        names = p.cmd.needs(tok)
        why = [f"{n} is {p.cmd.why[n]}" for n in names if n in p.cmd.why]
        if not names:
            out.add("flags-known", WARN, f"{tok.text!r} is computed when the script runs; "
                    f"{what} not checked", tok.loc, fix="give the value literally to have it "
                    "checked")
            continue
        out.add("flags-known", WARN, f"{tok.text!r} refers to a variable kvplan cannot resolve "
                + (f"({'; '.join(why)})" if why else "(a secret, config map or host variable)")
                + f"; {what} not checked", tok.loc,
                fix="give the value literally to have it checked" if why else
                "give the value literally, or in the container's env")
    used = [(t.text or "nothing", ns, t.loc) for t, ns in p.cmd.defaulted] + [
        (p.cmd.env[var].value, ns, p.cmd.env[var].loc)
        for var, ns in p.cmd.env_defaulted.items() if var in env_read(p)]
    if used:  # `${X:-8192}` with X set nowhere kvplan reads: its default, in an argument
        # or in a variable of the engine's environment kvplan reads (CUDA_VISIBLE_DEVICES)
        names = list(dict.fromkeys(n for _, ns, _ in used for n in ns))
        vals = ", ".join(f"{v} from {'/'.join(ns)}" for v, ns, _ in used[:6]) + (
            ", ..." if len(used) > 6 else "")
        many = len(names) > 1
        out.add("flags-known", WARN, f"checked with the script's default{'s' * many} ({vals}):"
                f" neither the script nor the container's env sets {', '.join(names)}; an "
                f"environment that sets {'them' if many else 'it'} runs other values",
                used[0][2], fix="set the variable in the container's env (or the value "
                "literally) so that kvplan checks what runs")
    if len(out.findings) == before:
        n = len(p.flags)
        out.add("flags-known", PASS, f"{n} flag{'s' * (n != 1)} known to vLLM {reg.release}"
                if n else "no flags to check", p.cmd.loc)


def env_read(p: Parsed) -> set[str]:
    """The variables of the engine's environment that the checks read: the visible devices,
    the modelled vLLM variables (`engines/vllm_env.py`), the long-context switches, the
    backends, the compile cache's root, and for TGI its options' variables."""
    from kvplan.check.mapping import TGI_FIELDS
    from kvplan.engines.vllm_env import ENV_FIELDS

    out = {"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "VLLM_ALLOW_LONG_MAX_MODEL_LEN",
           "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "VLLM_ATTENTION_BACKEND",
           "VLLM_ALL2ALL_BACKEND", "VLLM_CACHE_ROOT", "XDG_CACHE_HOME", "HOME",
           "VLLM_DISABLE_COMPILE_CACHE", *ENV_FIELDS}
    if p.engine == "tgi":
        out |= {f[2:].upper().replace("-", "_") for f in TGI_FIELDS}
    return out


# deprecated or removed flags whose removal keeps what vLLM does, and why
_SAFE_TO_DROP = {
    # `AsyncEngineArgs.enable_log_requests` defaults to False from 0.10.1 (0.10.1-0.33
    # arg_utils.py); 0.10.0 and before log requests unless --disable-log-requests is given
    "--disable-log-requests": "request logging is off by default from vLLM 0.10.1; "
                              "--enable-log-requests turns it on",
}
# deprecated flags vLLM still parses but refuses at start-up, unless `env` says otherwise
_REFUSED = {
    # 0.6.0-0.6.3.post1 `ModelConfig.__init__` raises ValueError when it is given
    "--max-context-len-to-capture": ("its ModelConfig raises \"`max_context_len_to_capture` is "
                                     "deprecated\"", None),
    # 0.6.0-0.6.1 `AsyncLLMEngine.__init__` raises unless VLLM_ALLOW_ENGINE_USE_RAY is set
    "--engine-use-ray": ("its AsyncLLMEngine raises \"`--engine-use-ray` is deprecated\"",
                         "VLLM_ALLOW_ENGINE_USE_RAY"),
}


def _deprecated(out: Outcome, f: Any, reg: Any) -> None:
    """A flag the release marks deprecated: a warning with what to write instead (removing
    --task embed would turn an embedding server into a generator), or a failure where the
    release refuses it at start-up."""
    from kvplan.engines.vllm_registry import dropped_after, instead

    use = instead(f.name, f.value, reg)
    gone = dropped_after(f.name, reg.release)
    when = f" ({gone} drops it)" if gone else ""
    fix = f"use {use} instead" if use else f"remove {f.key}" + (
        f" ({_SAFE_TO_DROP[f.name]})" if f.name in _SAFE_TO_DROP else "")
    refused = _REFUSED.get(f.name)
    if refused and not f.negated:
        why, var = refused
        ev = out.target.command.env.get(var) if var else None
        allowed = ev is not None and (ev.value is None  # unresolved: it may allow it
                                      or ev.value.strip().lower() in ("1", "true"))
        if not allowed:
            out.add("flags-known", FAIL, f"{f.key} is deprecated in vLLM {reg.release}{when} "
                    f"and the engine refuses to start with it ({why})", f.loc,
                    fix=fix + (f", or set {var}=1" if var else ""), current=f.key,
                    suggested=use)
            return
    out.add("flags-known", WARN, f"{f.key} is deprecated in vLLM {reg.release}{when}", f.loc,
            fix=fix, current=f.key, suggested=use)


_VAR = re.compile(r"\$\(([A-Za-z_][\w.-]*)\)|\$\{([A-Za-z_]\w*)[^}]*\}|\$([A-Za-z_]\w*)")


def flag_values(out: Outcome, p: Parsed, reg: Any) -> None:
    before = len(out.findings)
    unresolved = {tok.text for tok in p.cmd.unresolved}
    for f, msg in p.errors:
        if f.value and (f.value in unresolved or "$" in f.value):
            continue  # reported by flags-known
        out.add("flag-values", FAIL, f"{msg}: the engine refuses to start", f.loc,
                fix=_value_fix(f, reg), current=f.value)
    if reg is not None:
        f = p.set_by.get("kv_cache_dtype")
        known = reg.flags.get("--kv-cache-dtype", {}).get("known_values")
        if f and known and f.value not in known and "$" not in f.value:
            out.add("flag-values", WARN, f"--kv-cache-dtype {f.value!r} is not one of vLLM "
                    f"{reg.release}'s values (a plugin may add it)", f.loc,
                    fix=f"use one of {', '.join(known[:6])}", current=f.value)
    if p.engine == "vllm" and p.set_by.get("pooler_config") is not None:
        from kvplan.engines.vllm_pooler import ignored_note, read, renamed

        f, release = p.set_by["pooler_config"], reg.release if reg is not None else None
        pooler = read(f.value, release, what=f.key)  # a refused value is in p.errors
        note = ignored_note(pooler, release, what=f.key)
        if note:
            fixed = renamed(f.value or "", pooler)
            out.add("flag-values", WARN, note, f.loc,
                    fix=f"{f.key} '{fixed}'" if fixed else f"remove {pooler.ignored[0]!r}",
                    current=f.value, suggested=fixed)
    if p.engine == "vllm":
        from kvplan.core.versions import parse_version
        from kvplan.engines.vllm_env import ENV_FIELDS, parse_value, read_by

        for var in ENV_FIELDS:
            ev = p.cmd.env.get(var)
            if ev is None or ev.value is None:
                continue
            try:
                parse_value(var, ev.value)
            except BadInput as e:
                if reg is None or read_by(var, parse_version(reg.release)):
                    out.add("flag-values", FAIL, f"{e.message}", ev.loc, fix=e.hint,
                            current=ev.value)
                else:  # parsed only where read: an unknown variable to this release
                    out.add("flag-values", WARN, f"{var}={ev.value!r} is not read by vLLM "
                            f"{reg.release} (it warns of an unknown variable)", ev.loc,
                            fix=f"remove {var}", current=ev.value)
    if len(out.findings) == before:
        out.add("flag-values", PASS, "every value parses", p.cmd.loc)


def _value_fix(f: Any, reg: Any) -> str:
    info = reg.flags.get(f.name or "", {}) if reg is not None else {}
    if f.name in ("--pooler-config", "--override-pooler-config"):
        from kvplan.engines.vllm_pooler import read

        try:
            read(f.value, reg.release if reg is not None else None, what=f.key)
        except BadInput as e:
            return e.hint or f"fix the value of {f.key}"
    if info.get("choices"):
        return f"use one of {', '.join(info['choices'])}"
    if info.get("type", "").startswith("human_readable_int"):
        return f"give {f.key} an integer such as 32768, 32K (=32768) or 32k (=32000)"
    if info.get("type") == "int":
        return f"give {f.key} a plain integer"
    if info.get("type") == "float":
        return f"give {f.key} a number"
    return f"fix the value of {f.key}"


def utilization_range(out: Outcome, p: Parsed, default: float) -> None:
    fld, cid = "gpu_memory_utilization", "gpu-memory-utilization-range"
    name = spelled(p.engine, fld)
    v = p.values.get(fld)
    loc = p.loc_of(fld)
    if v is None:
        what = f"vLLM's default {default:g}" if p.engine == "vllm" else "the engine's default"
        out.add(cid, PASS, f"{name} not set ({what})", loc)
        return
    if not 0 < v <= 1:
        out.add(cid, FAIL, f"{name} {v:g} is outside (0, 1]: the engine refuses to start", loc,
                fix=f"{name} 0.9", current=v, suggested=0.9)
    elif p.engine == "tgi":
        out.add(cid, PASS, f"{name} {v:g}", loc, current=v)
    elif v > 0.95:
        out.add(cid, WARN, f"{name} {v:g} leaves under 5 % of the GPU for the CUDA context, "
                "NCCL buffers and fragmentation outside the engine's accounting: OOM risk", loc,
                fix=f"{name} 0.92", current=v, suggested=0.92)
    elif p.engine == "vllm" and p.values.get("kv_cache_memory_bytes") is not None:
        # the KV cache is the given size; vLLM only checks the requested share is free
        out.add(cid, PASS, f"{name} {v:g} (the KV cache is --kv-cache-memory-bytes, which "
                "vLLM sizes without it)", loc, current=v)
    elif v < 0.5 and any(f.name == "--enable-sleep-mode" and not f.negated for f in p.flags):
        out.add(cid, PASS, f"{name} {v:g} with --enable-sleep-mode: the rest of the GPU is "
                "left to a colocated process (an RL trainer)", loc, current=v)
    elif v < 0.5 and shared_gpu(out.target):
        out.add(cid, PASS, f"{name} {v:g} on a time-sliced GPU: the rest is left to the pods "
                "that share it", loc, current=v)
    elif v < 0.5:
        out.add(cid, WARN, f"{name} {v:g} leaves {1 - v:.0%} of the GPU unused by the KV "
                "cache (fine only if another process shares the GPU)", loc,
                fix=f"{name} 0.9", current=v, suggested=0.9)
    else:
        out.add(cid, PASS, f"{name} {v:g} is in [0.5, 0.95]", loc, current=v)


def shared_gpu(t: Target) -> str | None:
    """The time-sliced GPU label (GFD's `<product>-SHARED`) the target may run on, if any."""
    from kvplan.sources.resolve import time_sliced

    return next((n for n in ([t.gpu] if t.gpu else t.gpu_choices) if n and time_sliced(n)),
                None)


def local_engines(p: Parsed) -> int:
    """Data-parallel engines this container runs: --data-parallel-size-local when a DP group
    spans nodes (each node runs its share), else --data-parallel-size."""
    v = p.values
    dp = v.get("data_parallel_size_local") or v.get("data_parallel_size") or 1
    if p.engine == "sglang" and any(f.name == "--enable-dp-attention" for f in p.flags):
        dp = 1
    return dp


def group_engines(p: Parsed, t: Target) -> int:
    """Data-parallel engines one replica runs: a LeaderWorkerSet's pods run the whole DP group
    between them (--data-parallel-size-local per pod), one container its local share."""
    v = p.values
    if t.kind == "LeaderWorkerSet" and v.get("data_parallel_size_local") and \
            v.get("data_parallel_size"):
        return v["data_parallel_size"]
    return local_engines(p)


def gpus_needed(p: Parsed) -> int:
    v = p.values
    tp = v.get("tensor_parallel_size") or 1
    pp = v.get("pipeline_parallel_size") or 1
    nn = v.get("nnodes") or 1
    if p.engine == "vllm" and nn > 1:  # one engine over hosts: this one's share
        return max(1, tp * pp * (v.get("data_parallel_size") or 1) // nn)
    return tp * pp * local_engines(p)


_LAYOUT = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
           "data_parallel_size_local", "nnodes")


def layout_unresolved(p: Parsed) -> Any:
    """The flag of the parallel layout (TP, PP, DP, local DP, --nnodes) whose value is a
    variable kvplan cannot resolve, or None."""
    from kvplan.check.mapping import SGLANG_FIELDS, TGI_FIELDS, VLLM_FIELDS

    table = {"vllm": VLLM_FIELDS, "sglang": SGLANG_FIELDS}.get(p.engine, TGI_FIELDS)
    unresolved = {tok.text for tok in p.cmd.unresolved}
    return next((f for f in p.flags if table.get(f.name or "") in _LAYOUT and f.value and
                 table[f.name] not in p.values and (f.value in unresolved or "$" in f.value)),
                None)


def _layout_in_config(p: Parsed) -> list[str]:
    """The parallel-layout flags a `--config FILE` may set because the command line does not:
    vLLM inserts the file's options before the command line's, so a flag given there wins
    (`FlexibleArgumentParser._pull_args_from_config`: "cli > config > defaults"; vllm/utils.py
    in 0.6-0.9, vllm/utils/__init__.py in 0.10-0.11.0, vllm/utils/argparse_utils.py from
    0.11.1)."""
    if p.config_file is None:
        return []
    layout = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")
    return [spelled(p.engine, f) for f in layout if f not in p.values]


def _visible_devices(p: Parsed) -> tuple[int | None, Loc | None, str]:
    """The devices a CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES list shows the engine."""
    for var in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"):
        ev = p.cmd.env.get(var)
        if ev and ev.value and all(x.strip().isdigit() for x in ev.value.split(",")):
            return len(ev.value.split(",")), ev.loc, var
    return None, None, ""


def gpu_count(out: Outcome, p: Parsed) -> None:
    t = out.target
    cid = "gpu-count-matches"
    need = gpus_needed(p)
    v = p.values
    group = group_engines(p, t) != local_engines(p)  # the pods share one DP group
    if t.kind == "LeaderWorkerSet" and p.engine == "vllm" and (v.get("nnodes") or 1) > 1:
        group = True  # one engine over the group's pods: its whole world
    if group:
        need = (v.get("tensor_parallel_size") or 1) * (v.get("pipeline_parallel_size") or 1) \
            * group_engines(p, t)
    have, loc = t.gpu_count, t.gpu_count_loc
    if t.group_entry:  # another pod of a LeaderWorkerSet group: counted with the group's
        out.facts["gpus"] = have
        how = "size x the pod's GPUs" if t.role == "pods" else \
            "the leader's GPUs + (size - 1) x the worker's"
        out.add(cid, SKIP, f"counted for the whole group on {t.group_entry}: {how}",
                loc or t.loc, current=have)
        return
    unknown = layout_unresolved(p)
    if unknown is not None:  # the layout is not known: neither idle nor missing GPUs are
        out.add(cid, SKIP, f"not counted: {unknown.key} is {unknown.value}, which kvplan "
                "cannot resolve", loc or t.loc, current=have)
        out.facts["gpus"] = have
        return
    unread = _layout_in_config(p)
    if unread:  # the file may set the layout: neither idle nor missing GPUs are known
        out.add(cid, SKIP, f"not counted: --config {p.config_file.value} may set "
                f"{', '.join(unread)}, which kvplan does not read (the command line wins over "
                "the file: give them there to have the GPUs counted)", loc or t.loc,
                current=have)
        out.facts["gpus"] = have
        return
    vis, vloc, var = _visible_devices(p)
    fix = _gpu_fix(t, need, p)
    if vis is not None and (have is None or vis < have):
        have, loc = vis, vloc
        fix = f"list {need} device{'s' * (need != 1)} in {var}"
    loc = loc or t.loc
    parallel = f"TP x PP x DP = {need}" if group or not v.get("data_parallel_size_local") \
        else f"TP x PP x local DP = {need}"
    out.facts["gpus_needed"] = need
    out.facts["gpus"] = have
    if have is None:
        if t.kind in ("command", "script", "dockerfile", "plan deployment",
                      "compose service") or t.template:
            out.add(cid, SKIP, f"{parallel}; the GPU count is not given", loc)
        else:
            out.add(cid, FAIL, f"{parallel} but the container requests no GPU: Kubernetes "
                    "gives it none and the engine cannot start", loc,
                    fix=f"resources.limits: nvidia.com/gpu: {need}", suggested=need)
    elif have < need:
        out.add(cid, FAIL, f"{parallel} needs {need} GPUs but the "
                f"{'replica' if t.kind == 'LeaderWorkerSet' else 'container'} gets {have}: "
                "the engine cannot start", loc, fix=fix, current=have, suggested=need)
    elif have > need:
        out.add(cid, WARN, f"{have} GPUs allocated but {parallel} uses {need}: "
                f"{have - need} idle", loc, fix=fix, current=have, suggested=need)
    else:
        out.add(cid, PASS, f"{parallel} uses the {have} GPU{'s' * (have != 1)} allocated",
                loc, current=have)


def _gpu_fix(t: Target, need: int, p: Parsed) -> str:
    if t.kind == "compose service":
        return f"deploy.resources.reservations.devices[].count: {need}"
    if t.kind == "plan deployment":
        return f"gpus: {need}"
    if t.kind == "LeaderWorkerSet":
        return f"give the group {need} GPU{'s' * (need != 1)}" + (
            " (size x nvidia.com/gpu per pod)" if t.role == "pods" else
            " (the leader's nvidia.com/gpu + (size - 1) x the worker's)")
    return f"resources.limits: nvidia.com/gpu: {need}"
