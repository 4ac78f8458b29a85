"""Rewrite a marked table section of a docs page (shared by the benchmark scripts)."""

from __future__ import annotations

from pathlib import Path


def write_section(doc: Path, name: str, table: str, intro: str = "") -> None:
    """Replace the text between `<!-- NAME:start -->` and `<!-- NAME:end -->` in `doc`,
    appending `intro` and the markers at the end if they are missing."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    text = doc.read_text()
    if start not in text:
        text += f"{intro}{start}\n{end}\n"
    head, _, rest = text.partition(start)
    _, _, tail = rest.partition(end)
    doc.write_text(f"{head}{start}\n{table}\n{end}{tail}")
