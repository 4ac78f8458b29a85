"""`kvplan models` and `kvplan gpus` listings."""

from __future__ import annotations

import sys

from kvplan.catalog import Catalog
from kvplan.render.jsonout import dumps
from kvplan.units import GiB


def render_models(cat: Catalog, as_json: bool) -> None:
    from kvplan.core.arch import inner_text_config

    rows = []
    for key, e in sorted(cat.items()):
        cfg = e.get("config") or {}
        t = inner_text_config(cfg) or cfg
        rows.append({
            "id": key,
            "aliases": list(e.get("aliases") or []),
            "family": e.get("family", ""),
            "model_type": t.get("model_type", cfg.get("model_type", "")),
            "weights_bytes": e.get("weights_bytes"),
            "source": cat.origin[key],
        })
    if as_json:
        sys.stdout.write(dumps(rows))
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{len(rows)} models", title_justify="left")
    for col in ("id", "aliases", "family", "model_type", "weights"):
        t.add_column(col, overflow="fold")
    for r in rows:
        w = f"{r['weights_bytes'] / GiB:.1f} GiB" if r["weights_bytes"] else "estimated"
        t.add_row(r["id"], ", ".join(r["aliases"][:3]), r["family"], r["model_type"], w)
    _console(Console).print(t)


def render_gpus(cat: Catalog, as_json: bool) -> None:
    from kvplan.sources.resolve import gpu_from_entry, mig_bytes

    rows = []
    for key, e in sorted(cat.items()):
        g = gpu_from_entry(key, e)
        rows.append({
            "id": key,
            "name": e.get("name", key),
            "aliases": list(e.get("aliases") or []),
            "memory_bytes": e.get("memory_bytes"),
            "bandwidth_gbps": e.get("bandwidth_gbps"),
            "tflops_bf16": (e.get("tflops") or {}).get("bf16"),
            "price_per_hour": e.get("price_per_hour"),
            "compute_capability": g.compute_capability,
            "interconnect_gbps": g.interconnect_gbps,
            "nvlink_domain": g.nvlink_domain,
            "gpus_per_node": g.gpus_per_node,
            "mig_profiles": {k: mig_bytes(v) for k, v in (e.get("mig") or {}).items()},
            "source": cat.origin[key],
        })
    if as_json:
        sys.stdout.write(dumps(rows))
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{len(rows)} GPUs", title_justify="left")
    for col in ("id", "aliases", "name", "memory (CUDA)", "GB/s", "bf16 TFLOP/s", "$/h"):
        t.add_column(col, overflow="fold")
    for r in rows:
        mem = f"{r['memory_bytes'] / GiB:.2f} GiB" if r["memory_bytes"] else "-"
        t.add_row(r["id"], ", ".join(r["aliases"][:3]), r["name"], mem,
                  str(r["bandwidth_gbps"] or "-"), str(r["tflops_bf16"] or "-"),
                  f"{r['price_per_hour']:.2f}" if r["price_per_hour"] else "-")
    _console(Console).print(t)


def _console(cls):
    """Piped output (CI logs, grep) gets whole ids: Rich would fit 80 columns by cutting
    cells with an ellipsis. A closed pipe raises BrokenPipeError for the entry point to
    report (`cli.EXIT_PIPE`), not Rich's own exit 1 ("does not fit")."""
    class Quiet(cls):
        def on_broken_pipe(self) -> None:
            raise BrokenPipeError

    return Quiet() if sys.stdout.isatty() else Quiet(width=400)
