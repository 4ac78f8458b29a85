"""The built-in catalogs: schema, the fast scanner agrees with a full YAML parse."""

import yaml

from kvplan import catalog
from kvplan.core.arch import normalize
from kvplan.errors import KvplanError


def _full(kind):
    return yaml.safe_load(catalog.builtin_path(f"{kind}.yaml").read_text())[kind]


def test_scanner_matches_full_parse():
    for kind in ("models", "gpus"):
        full = _full(kind)
        cat = catalog.load(kind, [])
        assert list(cat.entries) == list(full)
        for key, entry in full.items():
            assert cat.entry(key) == entry
            for alias in entry.get("aliases") or []:
                assert cat.get(alias)[0] == key


def test_aliases_unique():
    for kind in ("models", "gpus"):
        seen = {}
        for key, entry in _full(kind).items():
            for n in [key, *(entry.get("aliases") or [])]:
                k = catalog._norm(n)
                assert seen.get(k, key) == key, (n, key, seen.get(k))
                seen[k] = key


def test_gpu_entries_complete():
    full = _full("gpus")
    assert len(full) >= 25
    for key, e in full.items():
        assert isinstance(e["memory_bytes"], int) and e["memory_bytes"] > 10 * 2**30, key
        assert e.get("memory_source"), key
        assert e.get("bandwidth_gbps"), key


def test_every_catalog_model_normalises_or_fails_cleanly():
    ok = 0
    for e in _full("models").values():
        try:
            normalize(e["config"])
            ok += 1
        except KvplanError:
            pass
    assert ok >= 60
