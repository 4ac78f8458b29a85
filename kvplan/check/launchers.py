"""Programs that run the engine command after options of their own: `exec`, `env`, `nohup`,
`time`, `command`, the containers' init processes (`dumb-init --`, `tini --`), `numactl
--cpunodebind=0`, `taskset -c 0-7`, `stdbuf -oL`, `timeout 3600`, `nice -n 5`, `sudo -E`
and `uv run` / `uvx`. `unwrap` reads each as its option parser does (getopt with `+`: options
end at the first operand or `--`; a short option's value may be attached, `-oL`, or the next
word), so that `command.find_engine` finds the command they run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kvplan.check.base import Token

ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True)
class Launcher:
    """How a launcher's arguments precede the command it runs."""

    short: str = ""  # short options that take a value (getopt's `x:`)
    long: tuple[str, ...] = ()  # long options that take a value (`--opt VALUE` or `--opt=VALUE`)
    operands: int = 0  # operands before the command: timeout's DURATION, taskset's mask
    idle: str = ""  # short options with which it runs no command (`command -v`, `numactl -H`)
    quits: tuple[str, ...] = ()  # long ones (besides --help and --version)
    assigns: bool = False  # NAME=VALUE words before the command set its environment
    sub: tuple[tuple[str, ...], ...] = ()  # the subcommand that runs a command (`uv run`)
    module: bool = False  # `-m`/`--module` runs a Python module (`uv run -m M` = python -m M)
    env: bool = False  # env's `-i` and `-u NAME` change the command's environment


_UV = ("--allow-insecure-host", "--trusted-host", "--cache-dir", "--color", "--config-file",
       "--config-setting", "--config-settings", "--default-index", "--directory", "--env-file",
       "--exclude-newer", "--exclude-newer-package", "--extra", "--extra-index-url",
       "--find-links", "--fork-strategy", "--group", "--index", "--index-strategy",
       "--index-url", "--keyring-provider", "--link-mode", "--no-binary-package",
       "--no-build-isolation-package", "--no-build-package", "--no-extra", "--no-group",
       "--only-group", "--package", "--prerelease", "--project", "--python",
       "--python-platform", "--refresh-package", "--reinstall-package", "--resolution",
       "--upgrade-package", "--with", "--with-editable", "--with-requirements", "--from",
       "--constraints", "--overrides", "--build-constraints")

# Option tables from each program's parser: POSIX `exec`/`command`, bash's `exec -a NAME` and
# `time -p`, GNU time (`-f`, `-o`); coreutils env ("+iu:0C:S:v"), nice ("+n:"), timeout
# ("+k:s:v"), stdbuf ("+i:o:e:"); util-linux taskset ("+apchV", then the mask); numactl's
# `opts` (numactl.c); sudo(8); dumb-init (`-r s:r`); tini (`-p SIG`, `-e CODE`); uv's CLI
# reference for `uv run` and `uv tool run` (uvx).
LAUNCHERS: dict[str, Launcher] = {
    "exec": Launcher(short="a"),
    "command": Launcher(idle="vV"),
    "time": Launcher(short="fo", long=("--format", "--output")),
    "nohup": Launcher(),
    "env": Launcher(short="uCS", long=("--unset", "--chdir", "--split-string"), assigns=True,
                    env=True),
    "nice": Launcher(short="n", long=("--adjustment",)),
    "timeout": Launcher(short="ks", long=("--kill-after", "--signal"), operands=1),
    "stdbuf": Launcher(short="ioe", long=("--input", "--output", "--error")),
    "taskset": Launcher(operands=1, idle="p"),
    "numactl": Launcher(short="iwpPcNCmSfoLMI", idle="sH", quits=("--show", "--hardware"),
                        long=(
        "--interleave", "--weighted-interleave", "--preferred", "--preferred-many", "--cpubind",
        "--cpunodebind", "--physcpubind", "--membind", "--shm", "--file", "--offset",
        "--length", "--shmmode", "--shmid")),
    "sudo": Launcher(short="ugCDprtTUR", idle="lvKVe", assigns=True, quits=(
        "--list", "--validate", "--remove-timestamp", "--reset-timestamp", "--edit"), long=(
        "--user", "--group", "--close-from", "--chdir", "--host", "--prompt", "--role",
        "--type", "--command-timeout", "--other-user", "--chroot")),
    "dumb-init": Launcher(short="r", long=("--rewrite",)),
    "tini": Launcher(short="pe"),
    "tini-static": Launcher(short="pe"),
    "uv": Launcher(short="CfipP", long=_UV, sub=(("run",), ("tool", "run")), module=True),
    "uvx": Launcher(short="CfipP", long=_UV),
}


@dataclass
class Unwrapped:
    """The command a launcher chain runs, and what the chain does to its environment."""

    rest: list[Token]
    assigned: list[Token] = field(default_factory=list)  # NAME=VALUE, in order
    unset: list[str] = field(default_factory=list)  # env -u NAME
    cleared: bool = False  # env -i: only `assigned` reaches the command


def unwrap(argv: list[Token]) -> Unwrapped:
    """Strip leading `NAME=VALUE` words and the launchers (with their options and operands)
    ahead of a command. A launcher given an option with which it runs nothing (`command -v
    vllm`) is left in place, so nothing is found behind it."""
    out = Unwrapped(argv)
    i = _assignments(argv, 0, out)
    while i < len(argv):
        spec = LAUNCHERS.get(argv[i].text.rsplit("/", 1)[-1])
        j = None if spec is None else _after(argv, i + 1, spec, out)
        if j is None:
            break
        i = j
    out.rest = out.rest if out.rest is not argv else argv[i:]
    return out


def _assignments(argv: list[Token], i: int, out: Unwrapped) -> int:
    while i < len(argv) and ASSIGN.match(argv[i].text):
        out.assigned.append(argv[i])
        i += 1
    return i


def _after(argv: list[Token], i: int, spec: Launcher, out: Unwrapped) -> int | None:
    """The index of the command after one launcher's options and operands (`argv[i]` is its
    first argument), or None when it runs none."""
    i, module = _options(argv, i, spec, out)
    if i is None:
        return None
    if spec.sub:
        sub = next((s for s in spec.sub if [t.text for t in argv[i:i + len(s)]] == list(s)),
                   None)
        if sub is None:
            return None  # `uv pip …`: no command to run
        i, module = _options(argv, i + len(sub), spec, out)
        if i is None:
            return None
    i += spec.operands
    if spec.assigns:
        i = _assignments(argv, i, out)
    if module and i < len(argv):  # `uv run -m M` runs `python -m M`
        loc = argv[i].loc
        out.rest = [Token("python", loc), Token("-m", loc), *argv[i:]]
    return i


def _options(argv: list[Token], i: int, spec: Launcher, out: Unwrapped
             ) -> tuple[int | None, bool]:
    """(index past the options, whether `-m`/`--module` was given), or (None, False) for an
    option with which the launcher runs nothing."""
    module = False
    while i < len(argv):
        t = argv[i].text
        if t == "--":
            return i + 1, module
        if t.startswith("--"):
            name, eq, value = t.partition("=")
            if name in ("--help", "--version", *spec.quits):
                return None, False
            if not eq and name in spec.long:
                value, i = (argv[i + 1].text if i + 1 < len(argv) else ""), i + 1
            if spec.env:
                _env_option(name, value, out)
            module = module or (spec.module and name == "--module")
        elif t == "-" and spec.env:  # `env -`: as -i
            _env_option("-i", "", out)
        elif len(t) > 1 and t[0] == "-":
            for k, c in enumerate(t[1:], 1):
                if c in spec.idle:
                    return None, False
                if c in spec.short:
                    value = t[k + 1:]
                    if not value:
                        value, i = (argv[i + 1].text if i + 1 < len(argv) else ""), i + 1
                    if spec.env:
                        _env_option("-" + c, value, out)
                    break
                if spec.env:
                    _env_option("-" + c, "", out)
                module = module or (spec.module and c == "m")
        else:
            return i, module
        i += 1
    return i, module


def _env_option(name: str, value: str, out: Unwrapped) -> None:
    """What env's `-i` and `-u NAME` do to the command's environment."""
    if name in ("-i", "--ignore-environment"):
        out.assigned, out.cleared = [], True
    elif name in ("-u", "--unset") and value and "=" not in value:
        out.unset.append(value)
        out.assigned = [a for a in out.assigned if not a.text.startswith(value + "=")]
