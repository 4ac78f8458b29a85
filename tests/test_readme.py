"""The README's example command lines run as shown (no network, no missing files)."""

import re
import shlex
from pathlib import Path

import pytest

from kvplan.cli import main

README = Path(__file__).resolve().parent.parent / "README.md"
# lines that need a server, a deployment file or a local checkpoint the README only names
NEEDS_SOMETHING_ELSE = ("http://", "deploy/", "./my-finetune")


def _example_lines() -> list[str]:
    text = README.read_text(encoding="utf-8")
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            inner = re.search(r"\$\((kvplan [^)]*)\)", line)  # flags=$(kvplan recommend ...)
            line = inner.group(1) if inner else line
            for part in line.split("&&"):
                part = part.strip()
                if part.startswith("kvplan ") and not any(s in part for s in NEEDS_SOMETHING_ELSE):
                    lines.append(part)
    return lines


def test_readme_has_the_examples():
    lines = _example_lines()
    assert len(lines) >= 18
    assert any(line.startswith("kvplan recommend") and "--emit-flags" in line for line in lines)


@pytest.mark.parametrize("line", _example_lines())
def test_readme_example_runs(capsys, line):
    argv = shlex.split(line, comments=True)[1:]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, f"{line}\n{err}"
    assert out.strip() and "error" not in err.lower()
