"""The kvplan figures the docs quote still come out of kvplan (benchmarks/docs_figures.yaml)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import docs_figures  # noqa: E402


@pytest.mark.parametrize("entry", docs_figures.entries(),
                         ids=lambda e: f"{e['doc']}:{e['argv'][:60]}")
def test_doc_figure_is_current(entry):
    assert docs_figures.check(entry) is None


def test_template_filling():
    out = {"kv_cache_tokens": 1234567, "rope_cache_bytes": 131072000}
    assert docs_figures.fill("{kv_cache_tokens:,} tokens, {{x}}", out) == "1,234,567 tokens, {x}"
    assert docs_figures.fill("{rope_cache_bytes / MiB:.0f} MiB", out) == "125 MiB"
    with pytest.raises(ValueError):
        docs_figures.fill("{__import__('os')}", out)
