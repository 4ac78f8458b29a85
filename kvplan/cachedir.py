"""Where kvplan keeps what it can recompute: `KVPLAN_CACHE`, else `$XDG_CACHE_HOME/kvplan`,
else `~/.cache/kvplan`. Every writer ignores a read-only or missing cache."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    return Path(os.environ.get("KVPLAN_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "kvplan"))
