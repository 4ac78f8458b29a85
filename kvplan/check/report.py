"""Output of `kvplan check`: human (plain text, coloured on a TTY), JSON (docs/json.md),
GitHub workflow annotations and JUnit XML."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from xml.sax.saxutils import quoteattr

from kvplan.check.base import FAIL, PASS, SKIP, WARN, Finding, InputError, NothingToCheck
from kvplan.check.checks import Outcome
from kvplan.check.inputs import FileInfo
from kvplan.render.jsonout import dumps

FORMATS = ("human", "json", "github", "junit")
JSON_VERSION = 1
_RANK = {FAIL: 3, WARN: 2, PASS: 1, SKIP: 0}


@dataclass
class Report:
    outcomes: list[Outcome]
    files: list[FileInfo]
    strict: bool = False
    error: InputError | None = None  # the run's own bad input: nothing to check, --cmd

    def count(self, status: str) -> int:
        return sum(f.status == status for o in self.outcomes for f in o.findings)

    @property
    def errors(self) -> list[InputError]:
        return [i.error for i in self.files if i.error]

    @property
    def exit_code(self) -> int:
        if self.errors or self.error:
            return 2
        if self.count(FAIL) or (self.strict and self.count(WARN)):
            return 1
        return 0

    def summary(self) -> str:
        n = len(self.outcomes)
        return (f"{self.count(FAIL)} failed, {self.count(WARN)} warning"
                f"{'s' * (self.count(WARN) != 1)}, {self.count(PASS)} passed, "
                f"{self.count(SKIP)} skipped in {n} deployment{'s' * (n != 1)}"
                + (" (--strict: warnings fail)" if self.strict and self.count(WARN) else "")
                + (f"; {len(self.errors)} file{'s' * (len(self.errors) != 1)} not read"
                   if self.errors else ""))


def status_of(o: Outcome) -> str:
    return max((f.status for f in o.findings), key=_RANK.__getitem__, default=PASS)


def _ordered(o: Outcome) -> list[Finding]:
    return sorted(o.findings, key=lambda f: -_RANK[f.status])


# --- JSON ------------------------------------------------------------------------------------

def to_json(rep: Report) -> dict[str, Any]:
    deps = []
    for o in rep.outcomes:
        t, fx = o.target, o.facts
        decl = t.declared.workload
        deps.append({
            "name": t.name, "kind": t.kind, "file": t.loc.file, "line": t.loc.line,
            "status": status_of(o), "engine": fx.get("engine"), "model": fx.get("model"),
            "gpu": fx.get("gpu"), "gpus": fx.get("gpus"), "gpus_needed": fx.get("gpus_needed"),
            "replicas": t.replicas, "max_replicas": t.replicas_max,
            "vllm_version": fx.get("vllm_version"), "vllm_version_source": fx.get(
                "version_source"), "vllm_version_requested": fx.get("vllm_version_requested"),
            "workload": fx.get("workload") or (decl.preset or "chat" if decl else None),
            "rate": decl.rate if decl else None,
            "max_model_len": fx.get("max_model_len"), "max_num_seqs": fx.get("max_num_seqs"),
            "safe_max_num_seqs": fx.get("safe_max_num_seqs"),
            "replicas_needed": fx.get("replicas_needed"),
            "budget_starved": fx.get("budget_starved"),
            "kv_cache_tokens": fx.get("kv_cache_tokens"),
            "prefix_caching": fx.get("prefix_caching"),
            "checks": [f.to_json() for f in _ordered(o)],
        })
    return {
        "version": JSON_VERSION, "exit_code": rep.exit_code, "strict": rep.strict,
        "summary": {"deployments": len(rep.outcomes), "failed": rep.count(FAIL),
                    "warnings": rep.count(WARN), "passed": rep.count(PASS),
                    "skipped": rep.count(SKIP)},
        "files": [{"file": i.file, "deployments": i.targets, "note": i.note,
                   "error": _error_text(i.error) if i.error else None} for i in rep.files],
        "deployments": deps,
        "error": _error_text(rep.error) if rep.error else None,
    }


# --- human -----------------------------------------------------------------------------------

def _unread_tag(image: str | None) -> str:
    """Why an image's version tag did not give the release (`command.VLLM_IMAGES`)."""
    import re

    tag = image.rsplit("/", 1)[-1].partition(":")[2] if image and "@" not in image else ""
    if not re.match(r"v?\d+\.\d+", tag):
        return ""
    llmd = "/llm-d/" in image or image.startswith("llm-d/")
    return f": the tag of {image} is " + ("llm-d's release" if llmd else "not known to be") \
        + " vLLM's" * (not llmd) + (", not vLLM's" if llmd else " release")


def human(rep: Report, color: bool) -> str:
    from kvplan.render.term import Painter

    p = Painter(color)
    mark = {FAIL: p("FAIL", "red", "bold"), WARN: p("warn", "yellow"), PASS: p("ok  ", "green"),
            SKIP: p("skip", "dim")}
    lines = []
    for o in rep.outcomes:
        t, fx = o.target, o.facts
        where = f"{t.loc}  " if t.loc.file else ""
        bits = [fx.get("model") or "?", f"on {fx.get('gpu') or '?'}"]
        if fx.get("gpus"):
            bits[-1] += f" x{fx['gpus']}"
        bits.append(f"{fx.get('engine')}" + (f" {fx['vllm_version']}" + (
            f" (assumed{_unread_tag(t.image)}; set kvplan.io/vllm-version or --vllm-version)"
            if fx.get("version_source") == "default" else
            f" (for {fx['vllm_version_requested']}, newer than kvplan models)"
            if fx.get("vllm_version_requested") else "") if fx.get("engine") == "vllm" else ""))
        reps = f"{t.replicas}-{t.replicas_max}" if t.replicas_max else str(t.replicas)
        bits.append(f"{reps} replica{'s' * (reps != '1')}")
        w = t.declared.workload
        if w is not None:
            bits.append(f"{fx.get('workload') or w.preset or 'chat'}"
                        + (f" @ {w.rate:g} req/s" if w.rate else ""))
        lines.append(f"{where}{p(t.name, 'bold')} · " + " · ".join(bits))
        width = max(len(f.id) for f in o.findings) if o.findings else 0
        for f in _ordered(o):
            line = f"line {f.loc.line}" if f.loc.line and f.loc.file else ""
            lines.append(f"  {mark[f.status]} {f.id.ljust(width)}  {line:<9} {f.message}")
            if f.fix and f.status in (FAIL, WARN):
                lines.append(f"  {' ' * 4} {' ' * width}  {' ' * 9} {p('fix:', 'cyan')} {f.fix}")
        lines.append("")
    for i in rep.files:
        if i.note:
            lines.append(f"{i.file}: {i.note}")
        if i.error:
            lines.append(f"{p('error:', 'red', 'bold')} {_error_text(i.error, where=True)}")
    verdict = p("FAILED", "red", "bold") if rep.exit_code else p("passed", "green", "bold")
    lines.append(f"kvplan check {verdict}: {rep.summary()}")
    return "\n".join(lines) + "\n"


# --- GitHub workflow commands ----------------------------------------------------------------

def _gh_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gh_prop(s: str) -> str:
    return _gh_data(s).replace(":", "%3A").replace(",", "%2C")


def gh_line(level: str, message: str, file: str | None = None, line: int | None = None,
            col: int | None = None, title: str | None = None) -> str:
    props = []
    if file:
        props.append(f"file={_gh_prop(file)}")
        if line:
            props.append(f"line={line}")
            if col:
                props.append(f"col={col}")
    if title:
        props.append(f"title={_gh_prop(title)}")
    return f"::{level} {','.join(props)}::{_gh_data(message)}" if props else \
        f"::{level}::{_gh_data(message)}"


def github(rep: Report) -> str:
    out = []
    for o in rep.outcomes:
        for f in _ordered(o):
            if f.status not in (FAIL, WARN):
                continue
            level = "error" if f.status == FAIL or rep.strict else "warning"
            msg = f"{o.target.name}: {f.message}" + (f". Fix: {f.fix}" if f.fix else "")
            out.append(gh_line(level, msg, f.loc.file, f.loc.line, f.loc.col,
                               f"kvplan {f.id}"))
    for i in rep.files:
        if i.note:
            out.append(gh_line("notice", i.note, i.file, title="kvplan check"))
        if i.error:
            out.append(github_input_error(i.error).rstrip("\n"))
    out.append(f"kvplan check: {rep.summary()}")
    return "\n".join(out) + "\n"


def github_input_error(e: InputError) -> str:
    return gh_line("error", _error_text(e), e.file, e.line_no,
                   title="kvplan check: bad input") + "\n"


def _error_text(e: InputError, where: bool = False) -> str:
    """A file's input error as one line (`where`: with its file and line first)."""
    return (e.message if where else e.bare) + (f" ({e.hint})" if e.hint else "")


# --- JUnit XML -------------------------------------------------------------------------------

def junit(rep: Report) -> str:
    suites = []
    total = {"tests": 0, "failures": 0, "skipped": 0}
    for o in rep.outcomes:
        t = o.target
        by_id: dict[str, list[Finding]] = {}
        for f in o.findings:
            by_id.setdefault(f.id, []).append(f)
        cases = []
        fails = skips = 0
        for cid, fs in by_id.items():
            worst = max((f.status for f in fs), key=_RANK.__getitem__)
            first = next(f for f in fs if f.status == worst)
            cls = f"{t.loc.file or '--cmd'}:{t.name}"
            attrs = f"classname={quoteattr(cls)} name={quoteattr(cid)}"
            if first.loc.file:
                attrs += f" file={quoteattr(first.loc.file)}"
                if first.loc.line:
                    attrs += f' line="{first.loc.line}"'
            body = "\n".join(f"{f.loc}: {f.message}" + (f" (fix: {f.fix})" if f.fix else "")
                             for f in fs if f.status == worst)
            if worst == FAIL or (worst == WARN and rep.strict):
                fails += 1
                inner = (f"<failure message={quoteattr(first.message)} type={quoteattr(worst)}>"
                         f"{_esc(body)}</failure>")
            elif worst == SKIP:
                skips += 1
                inner = f"<skipped message={quoteattr(first.message)}/>"
            elif worst == WARN:
                inner = f"<system-out>{_esc('warning: ' + body)}</system-out>"
            else:
                inner = f"<system-out>{_esc(body)}</system-out>"
            cases.append(f"    <testcase {attrs}>{inner}</testcase>")
        total["tests"] += len(cases)
        total["failures"] += fails
        total["skipped"] += skips
        suites.append(f"  <testsuite name={quoteattr(t.name)} tests=\"{len(cases)}\" "
                      f"failures=\"{fails}\" errors=\"0\" skipped=\"{skips}\""
                      + (f" file={quoteattr(t.loc.file)}" if t.loc.file else "") + ">\n"
                      + "\n".join(cases) + "\n  </testsuite>")
    errors = 0
    if isinstance(rep.error, NothingToCheck):  # zero tests, the reason beside them
        suites.append(f"  <testsuite name=\"kvplan check\" tests=\"0\" failures=\"0\" "
                      f"errors=\"0\" skipped=\"0\"><system-out>"
                      f"{_esc(_error_text(rep.error))}</system-out></testsuite>")
    elif rep.error:  # a bad --cmd: one test in error, as a file that cannot be read
        errors, total["tests"] = 1, 1
        msg = _error_text(rep.error)
        suites.append(f"  <testsuite name=\"--cmd\" tests=\"1\" failures=\"0\" errors=\"1\" "
                      f"skipped=\"0\">\n    <testcase classname=\"--cmd\" name=\"input\"><error "
                      f"message={quoteattr(msg)} type=\"input\">{_esc(msg)}</error></testcase>\n"
                      "  </testsuite>")
    for i in rep.files:
        if i.error:
            errors += 1
            total["tests"] += 1
            msg = _error_text(i.error, where=True)
            suites.append(f"  <testsuite name={quoteattr(i.file)} tests=\"1\" failures=\"0\" "
                          f"errors=\"1\" skipped=\"0\">\n    <testcase classname="
                          f"{quoteattr(i.file)} name=\"input\"><error message="
                          f"{quoteattr(msg)} type=\"input\">{_esc(msg)}</error></testcase>\n"
                          "  </testsuite>")
        if i.note and not isinstance(rep.error, NothingToCheck):
            total["tests"] += 1
            total["skipped"] += 1
            suites.append(f"  <testsuite name={quoteattr(i.file)} tests=\"1\" failures=\"0\" "
                          f"errors=\"0\" skipped=\"1\">\n    <testcase classname="
                          f"{quoteattr(i.file)} name=\"nothing-to-check\"><skipped message="
                          f"{quoteattr(i.note)}/></testcase>\n  </testsuite>")
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<testsuites name="kvplan check" tests="{total["tests"]}" '
            f'failures="{total["failures"]}" errors="{errors}" skipped="{total["skipped"]}">\n'
            + "\n".join(suites) + "\n</testsuites>\n")


def _esc(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def render(rep: Report, fmt: str, color: bool = False) -> str:
    if fmt == "json":
        return dumps(to_json(rep))
    if fmt == "github":
        return github(rep)
    if fmt == "junit":
        return junit(rep)
    return human(rep, color)


def error_report(e: InputError, strict: bool = False) -> Report:
    """The report of a run that stopped on bad input: nothing to check (each input with its
    note), one file's error, or the run's own (a bad --cmd)."""
    if isinstance(e, NothingToCheck):
        return Report([], e.files, strict, error=e)
    if e.file:
        return Report([], [FileInfo(e.file, error=e)], strict)
    return Report([], [], strict, error=e)
