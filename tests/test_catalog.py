"""The built-in catalogs: schema, the fast scanner agrees with a full YAML parse."""

import json

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


def test_warm_start_reads_the_cache_not_the_yaml(tmp_path, monkeypatch):
    import subprocess
    import sys

    monkeypatch.setenv("KVPLAN_CACHE", str(tmp_path))
    for kind in ("models", "gpus"):
        full = _full(kind)
        for _ in range(2):  # the first run fills the cache, the second reads it back
            cat = catalog.load(kind, [])
            assert all(cat.entry(key) == entry for key, entry in full.items())
    slots = sorted(p.name.split("-")[0] for p in (tmp_path / "catalog").iterdir())
    assert slots == ["gpus", "models"]
    # a warm `size` imports no YAML parser
    code = ("import sys; from kvplan.sources.resolve import resolve_gpu, resolve_model; "
            "resolve_model('llama-3.1-8b'); resolve_gpu('h100'); print('yaml' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**__import__("os").environ, "KVPLAN_CACHE": str(tmp_path)})
    assert run.stdout.strip() == "False", run.stderr


def test_a_changed_catalog_gets_a_new_slot_and_an_unwritable_cache_is_ignored(
        tmp_path, monkeypatch):
    import os

    src = tmp_path / "models.yaml"
    src.write_text("models:\n  a/b:\n    aliases: [ab]\n    config: {x: 1}\n")
    monkeypatch.setenv("KVPLAN_CACHE", str(tmp_path / "cache"))
    first = catalog._scan_cached(src, "models")
    assert first[0][0] == "a/b" and first[0][1].value() == {"aliases": ["ab"], "config": {"x": 1}}
    src.write_text("models:\n  a/b:\n    aliases: [ab]\n    config: {x: 22}\n")
    os.utime(src, ns=(1, 1))
    again = catalog._scan_cached(src, "models")
    assert again[0][1].value()["config"] == {"x": 22}
    assert len(list((tmp_path / "cache" / "catalog").iterdir())) == 1  # the old slot pruned
    monkeypatch.setenv("KVPLAN_CACHE", "/proc/kvplan-cannot-write-here")
    assert catalog._scan_cached(src, "models")[0][1].value()["config"] == {"x": 22}


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
        # bytes, not MiB or GiB: the smallest entry is an 8 GB laptop GPU
        assert isinstance(e["memory_bytes"], int) and e["memory_bytes"] > 6 * 2**30, key
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
    # model.safetensors.index.json total_size + the rotary cache (linear x4: 65,536 x 128 x 2 B)
    assert coder.budget.weights == 13481025536 + 16384 * 4 * 128 * 2

    fp8 = size(model_from_entry(*cat.get("qwen3-8b-fp8")), h100, args)
    # FP8 weights, KV still bf16: 36 layers x 8 KV heads x 128 x 2 x 2 B
    assert fp8.kv_bytes_per_token_per_gpu == 36 * 8 * 128 * 2 * 2 == 147456
    # estimate: q/k/v/o + gate/up/down at 1 B; embeddings, LM head (untied), layer norms,
    # q/k norms (2 x 128 per layer) and the final norm at 2 B
    linear = 36 * (4096 * (4096 + 2 * 1024 + 4096) + 3 * 4096 * 12288)
    rest = 2 * 151936 * 4096 + 36 * (2 * 4096 + 2 * 128) + 4096
    # + one fp32 `weight_scale_inv` per 128 x 128 block of every linear, + the rotary cache
    assert fp8.budget.weights == linear + linear * 4 // (128 * 128) + 2 * rest + 40960 * 128 * 2


def test_gemma4_e4b_it_and_31b_it_hand_computed():
    """google/gemma-4-E4B-it (KV sharing) and google/gemma-4-31B-it (split sliding/global
    geometry): KV bytes per token by hand from the catalog configs."""
    from kvplan.core.sizing import EngineArgs, Gpu, size
    from kvplan.sources.resolve import model_from_entry

    h100 = Gpu("h100-sxm", "NVIDIA H100 80GB HBM3", 81089 * (1 << 20), "9.0")
    args = EngineArgs(max_model_len=8192, kv_cache_memory_bytes=1 << 30)
    cat = catalog.load("models", [])

    e4b = size(model_from_entry(*cat.get("gemma-4-e4b-it")), h100, args)
    # 42 layers, the last 18 (24..41) reuse earlier KV -> layers 0..23 own a cache:
    # full at 5, 11, 17, 23 (4 layers), the other 20 sliding. 2 KV heads everywhere
    # (num_global_key_value_heads null); head_dim 256 sliding, global_head_dim 512 full; bf16 K+V
    assert sum(x is not None for x in e4b.arch.layers) == 24
    assert e4b.kv_bytes_per_token_per_gpu == 20 * 2 * 256 * 2 * 2 + 4 * 2 * 512 * 2 * 2 == 57344

    b31 = size(model_from_entry(*cat.get("gemma-4-31b-it")), h100, args)
    # 60 layers = (5 sliding + 1 full) x 10, no KV sharing: 50 sliding x 16 KV heads x 256
    # + 10 full x 4 global KV heads x 512, x 2 (K, V) x 2 B (bf16)
    assert b31.kv_bytes_per_token_per_gpu == 50 * 16 * 256 * 2 * 2 + 10 * 4 * 512 * 2 * 2 == 901120


def test_builtin_entries_fit_the_user_entry_table():
    """User catalog files are held to `catalog_schema`; so are the built-in ones, here."""
    from kvplan.catalog_schema import check_entry

    for kind in ("models", "gpus"):
        for key, entry in _full(kind).items():
            check_entry(kind, key, entry, "built-in")


def test_user_entries_of_the_wrong_shape_are_named(tmp_path, capsys):
    """Fuzzing user catalogs found 22 internal errors (aliases: 5, quant_config: 5,
    bandwidth_gbps: 'x', tflops: true, ...); each is now one line and exit 2."""
    from kvplan.cli import main

    gpu = {"name": "My GPU", "aliases": ["my-gpu"], "memory_bytes": 25769803776,
           "bandwidth_gbps": "x"}
    model = {"aliases": 5, "config": {"model_type": "llama"}}
    cases = [({"gpus": {"my-gpu": gpu}}, ["llama-3.1-8b", "--gpu", "my-gpu"],
              "gpus entry 'my-gpu' in {f}: bandwidth_gbps must be a number, got 'x'"),
             ({"gpus": {"my-gpu": {**gpu, "bandwidth_gbps": 900, "tflops": {"bf16": [1]}}}},
              ["llama-3.1-8b", "--gpu", "my-gpu"], "tflops.bf16 must be a number >= 0 or null"),
             ({"gpus": {"my-gpu": {**gpu, "bandwidth_gbps": 900, "mig": {"3g": 20}}}},
              ["llama-3.1-8b", "--gpu", "my-gpu"], "mig maps a profile such as '3g.40gb' to its "
              "GiB, got '3g': 20"),
             ({"gpus": {"my-gpu": {**gpu, "bandwidth_gbps": 900, "mig_slices": 0}}},
              ["llama-3.1-8b", "--gpu", "my-gpu"], "mig_slices must be an integer >= 1, got 0"),
             ({"models": {"me/m": model}}, ["me/m", "--gpu", "h100"],
              "models entry 'me/m' in {f}: aliases must be a list of strings, got 5"),
             ({"models": {"me/m": {"config": {}, "weights_bytes": 0}}}, ["me/m", "--gpu", "h100"],
              "weights_bytes must be an integer >= 1, got 0"),
             # review 23a #14: a capability cc_major() would read as anything
             ({"gpus": {"my-gpu": {**gpu, "bandwidth_gbps": 900,
                                   "compute_capability": "banana"}}},
              ["llama-3.1-8b", "--gpu", "my-gpu"], "gpus entry 'my-gpu' in {f}: "
              "compute_capability must be major.minor such as \"9.0\" (NVIDIA) or a gfx target "
              "such as \"gfx942\" (AMD), got 'banana'"),
             ({"gpus": {"my-gpu": {**gpu, "bandwidth_gbps": 900, "compute_capability": "8,9"}}},
              ["llama-3.1-8b", "--gpu", "my-gpu"], "got '8,9'"),
             ({"gpus": {"my-gpu": {**gpu, "bandwidth_gbps": 900, "compute_capability": 9}}},
              ["llama-3.1-8b", "--gpu", "my-gpu"], "got 9"),
             ({"gpus": {"my-gpu": {**gpu, "bandwidth_gbps": 900,
                                   "compute_capability": "gfx942"}}},
              ["llama-3.1-8b", "--gpu", "my-gpu"], "compute_capability 'gfx942' is an AMD "
              "target's but vendor is nvidia (the default)"),
             # a layout this kvplan does not read
             ({"schema_version": 2, "models": {}}, ["llama-3.1-8b", "--gpu", "h100"],
              "kvplan: error: catalog {f}: schema_version 2 is not one this kvplan reads (1)")]
    for n, (doc, argv, says) in enumerate(cases):
        f = tmp_path / f"cat{n}.yaml"
        f.write_text(yaml.safe_dump({"schema_version": 1, **doc}))
        code = main(["size", *argv, "--catalog", str(f)])
        err = capsys.readouterr().err
        assert code == 2 and says.format(f=f) in err and err.count("\n") == 1


def test_two_installations_keep_their_own_cache_slots(tmp_path, monkeypatch):
    # a venv and a pipx install of kvplan: each catalog file keeps its slot, so alternating
    # runs do not evict each other's cache (only a file's own older versions are pruned)
    monkeypatch.setenv("KVPLAN_CACHE", str(tmp_path / "cache"))
    files = []
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        f = tmp_path / name / "models.yaml"
        f.write_text("models:\n  a/b:\n    config: {x: 1}\n")
        files.append(f)
    for f in files:
        assert catalog._scan_cached(f, "models")[0][1].value() == {"config": {"x": 1}}
    slots = sorted(p.name for p in (tmp_path / "cache" / "catalog").iterdir())
    assert len(slots) == 2 and all((tmp_path / "cache" / "catalog" / s / "0.json").exists()
                                   for s in slots)


def test_a_user_gpu_without_compute_capability_says_what_it_assumes(tmp_path, capsys):
    # review 23a #6: the entry is sized as the Gpu default, NVIDIA 9.0, and says so; a YAML
    # float capability (8.9) is read as the string it spells
    from kvplan.cli import main

    f = tmp_path / "gpu.yaml"
    f.write_text(yaml.safe_dump({"schema_version": 1, "gpus": {"my-gpu": {
        "name": "My GPU", "memory_bytes": 48 << 30}}}))
    code = main(["size", "qwen3-4b", "--gpu", "my-gpu", "--catalog", str(f), "--json"])
    d = json.loads(capsys.readouterr().out)
    assert code == 0 and d["gpu_catalog_id"] == "my-gpu"
    assert (d["gpu_compute_capability"], d["gpu_compute_capability_assumed"]) == ("9.0", True)
    assert ("catalog GPU 'my-gpu' gives no compute_capability: modelled as NVIDIA compute "
            "capability 9.0 (Hopper), which picks the kernels, FP8 support and block sizes; "
            "pass --gpu NAME (with --gpu-memory SIZE) for another architecture") in d["notes"]
    f.write_text("schema_version: 1\ngpus:\n  my-gpu:\n    name: My GPU\n"
                 "    memory_bytes: 51539607552\n    compute_capability: 8.9\n")
    code = main(["size", "qwen3-4b", "--gpu", "my-gpu", "--catalog", str(f), "--json"])
    d = json.loads(capsys.readouterr().out)
    assert code == 0
    assert (d["gpu_compute_capability"], d["gpu_compute_capability_assumed"]) == ("8.9", False)


def test_catalog_paths_that_are_no_file_are_one_line(tmp_path, capsys):
    """review 24b F3/F9: a control character's ReaderError printed two lines; '' read as '.';
    an output directory was 'cannot read'."""
    from kvplan.cli import main

    bad = tmp_path / "ctl.yaml"
    bad.write_bytes(b"models:\n  acme/x:\n    aliases: [xx]\x01\n")
    cases = [
        (["size", "llama-3.1-8b", "--gpu", "h100", "--catalog", str(bad)],
         f"kvplan: error: catalog {bad} is not valid YAML: unacceptable character #x0001: "
         "control characters are not allowed\n"),
        (["size", "llama-3.1-8b", "--gpu", "h100", "--catalog", ""],  # all empty options
         "kvplan: error: --catalog is empty (an unset shell variable? give a value or leave "
         "the option out)\n"),
        (["size", "llama-3.1-8b", "--gpu", "h100", "--catalog", str(tmp_path)],
         f"kvplan: error: catalog {tmp_path} is a directory (name a catalog YAML file in "
         "it)\n"),
        (["models", "export", "llama-3.1-8b", "-o", str(tmp_path)],
         f"kvplan: error: cannot write catalog {tmp_path}: it is a directory (name a file, "
         f"e.g. {tmp_path / 'models.yaml'})\n"),
    ]
    for argv, err in cases:
        assert main(argv) == 2
        assert capsys.readouterr().err == err
