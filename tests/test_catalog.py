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


def test_added_entries_hand_computed():
    """deepseek-coder-6.7b-instruct (verbatim Hub config, safetensors total_size) and
    Qwen3-8B-FP8 (Qwen3-8B + Qwen's fp8 block): KV per token and weights by hand."""
    from kvplan.core.sizing import EngineArgs, Gpu, size
    from kvplan.sources.resolve import model_from_entry

    h100 = Gpu("h100-sxm", "NVIDIA H100 80GB HBM3", 81089 * (1 << 20), "9.0")
    args = EngineArgs(max_model_len=8192, kv_cache_memory_bytes=1 << 30)
    cat = catalog.load("models", [])

    coder = size(model_from_entry(*cat.get("deepseek-coder-6.7b")), h100, args)
    # 32 layers x 32 KV heads x 128 head dim x 2 (K, V) x 2 B (bf16)
    assert coder.kv_bytes_per_token_per_gpu == 32 * 32 * 128 * 2 * 2 == 524288
    assert coder.budget.weights == 13481025536  # model.safetensors.index.json total_size

    fp8 = size(model_from_entry(*cat.get("qwen3-8b-fp8")), h100, args)
    # FP8 weights, KV still bf16: 36 layers x 8 KV heads x 128 x 2 x 2 B
    assert fp8.kv_bytes_per_token_per_gpu == 36 * 8 * 128 * 2 * 2 == 147456
    # estimate: q/k/v/o + gate/up/down at 1 B; embeddings, LM head (untied), layer norms at 2 B
    linear = 36 * (4096 * (4096 + 2 * 1024 + 4096) + 3 * 4096 * 12288)
    rest = 2 * 151936 * 4096 + 36 * 2 * 4096
    assert fp8.budget.weights == linear + 2 * rest == 9435676672
