"""`kvplan check` (registered on the main Typer app). Heavy imports stay inside the command."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the command to `app`."""
