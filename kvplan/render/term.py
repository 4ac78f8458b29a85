"""Minimal terminal styling for the hot path (`kvplan size` must start in < 150 ms, and
importing rich costs ~30 ms). Colour only on a TTY and never with NO_COLOR set."""

from __future__ import annotations

import os
import sys

_CODES = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "blue": "34",
          "magenta": "35", "cyan": "36"}


def use_color(stream=None) -> bool:
    s = stream or sys.stdout
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return bool(getattr(s, "isatty", lambda: False)())


class Painter:
    def __init__(self, color: bool):
        self.color = color

    def __call__(self, text: str, *styles: str) -> str:
        if not self.color or not styles:
            return text
        codes = ";".join(_CODES[s] for s in styles)
        return f"\033[{codes}m{text}\033[0m"


def table(rows: list[list[str]], raw: list[list[str]] | None = None, indent: str = "  ",
          align: str = "") -> str:
    """Columns padded by their visible width (`raw` holds the unstyled text when styled)."""
    plain = raw or rows
    widths = [max(len(r[i]) for r in plain) for i in range(len(plain[0]))]
    out = []
    for r, p in zip(rows, plain):
        cells = []
        for i, (cell, vis) in enumerate(zip(r, p)):
            pad = " " * (widths[i] - len(vis))
            right = i < len(align) and align[i] == "r"
            cells.append(pad + cell if right else cell + pad)
        out.append(indent + "  ".join(cells).rstrip())
    return "\n".join(out)
