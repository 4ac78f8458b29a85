"""Models from the Hub through huggingface_hub, against a real local HTTP server."""

import json
import time

import pytest
import yaml
from hubserver import FakeHub, Repo, safetensors_bytes, tensor_total

from kvplan import catalog
from kvplan.cli import main

CATALOG_ID = "meta-llama/Llama-3.1-8B-Instruct"
SHARD1 = {"model.embed_tokens.weight": ("BF16", [64, 32]),
          "model.layers.0.mlp.up_proj.weight": ("BF16", [32, 48])}
SHARD2 = {"lm_head.weight": ("BF16", [64, 32]), "model.norm.weight": ("F32", [32])}
SINGLE = {"w": ("BF16", [128, 64]), "scale": ("F32", [16])}


def catalog_config():
    return catalog.load("models", []).get(CATALOG_ID)[1]["config"]


def sharded_repo(**kw):
    index = {"metadata": {"total_size": tensor_total(SHARD1) + tensor_total(SHARD2)},
             "weight_map": {**{k: "model-00001-of-00002.safetensors" for k in SHARD1},
                            **{k: "model-00002-of-00002.safetensors" for k in SHARD2}}}
    return Repo(files={
        "config.json": json.dumps(catalog_config()).encode(),
        "model.safetensors.index.json": json.dumps(index).encode(),
        "model-00001-of-00002.safetensors": safetensors_bytes(SHARD1),
        "model-00002-of-00002.safetensors": safetensors_bytes(SHARD2),
    }, **kw)


@pytest.fixture
def hub(monkeypatch, tmp_path):
    h = FakeHub().start()
    monkeypatch.setenv("HF_ENDPOINT", h.url)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setenv("KVPLAN_CACHE", str(tmp_path / "kvplan"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setattr(c, "HF_HUB_OFFLINE", False)
    yield h
    h.stop()


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


ARGS = ("--gpu", "h100", "--max-model-len", "8192", "--kv-cache-memory-bytes", "40G", "--json")


def test_sharded_hub_model_matches_catalog_and_sums_headers(hub, capsys):
    hub.repos["acme/llama-copy"] = sharded_repo()
    code, out, err = run(capsys, "size", "acme/llama-copy", *ARGS)
    assert code == 0, err
    d = json.loads(out)
    code, out2, _ = run(capsys, "size", CATALOG_ID, *ARGS)
    c = json.loads(out2)
    for key in ("kv_bytes_per_token", "num_gpu_blocks", "kv_cache_tokens", "max_concurrency",
                "block_size", "max_model_len"):
        assert d[key] == c[key], key
    assert d["weights_total_bytes"] == tensor_total(SHARD1) + tensor_total(SHARD2)
    assert d["weights_estimated"] is False
    # no weights were downloaded: every safetensors GET was a ranged header read
    gets = [r for r in hub.repos["acme/llama-copy"].requests
            if r.startswith("GET model-0000")]
    assert len(gets) >= 2 and all("bytes=" in r for r in gets)


def test_single_file_checkpoint(hub, capsys):
    hub.repos["acme/single"] = Repo(files={"config.json": json.dumps(catalog_config()).encode(),
                                           "model.safetensors": safetensors_bytes(SINGLE)})
    code, out, err = run(capsys, "size", "acme/single", *ARGS)
    assert code == 0, err
    assert json.loads(out)["weights_total_bytes"] == tensor_total(SINGLE)


def test_no_safetensors_falls_back_to_estimate(hub, capsys):
    hub.repos["acme/bin-only"] = Repo(files={"config.json": json.dumps(catalog_config()).encode()})
    code, out, err = run(capsys, "size", "acme/bin-only", *ARGS)
    d = json.loads(out)
    assert code == 0, err
    assert d["weights_estimated"] is True
    assert any("estimated" in n for n in d["notes"])


def test_second_run_works_with_network_gone(hub, capsys, monkeypatch):
    hub.repos["acme/llama-copy"] = sharded_repo()
    code, first, err = run(capsys, "size", "acme/llama-copy", *ARGS)
    assert code == 0, err
    hub.stop()
    code, second, err = run(capsys, "size", "acme/llama-copy", *ARGS)
    assert code == 0, err
    assert json.loads(second) == json.loads(first)
    code, third, err = run(capsys, "size", "acme/llama-copy", "--offline", *ARGS)
    assert code == 0, err
    assert json.loads(third)["weights_total_bytes"] == json.loads(first)["weights_total_bytes"]


def test_offline_without_cache_says_what_to_do(hub, capsys):
    code, out, err = run(capsys, "size", "acme/never-seen", "--offline", *ARGS)
    assert code == 2 and out == ""
    assert "offline mode is on" in err and "kvplan models add acme/never-seen" in err


def test_gated_repo_without_and_with_token(hub, capsys, monkeypatch):
    secret = "hf_SeCrEtToKeN123"
    hub.repos["acme/gated"] = sharded_repo(gated_token=secret)
    code, _, err = run(capsys, "size", "acme/gated", *ARGS)
    assert code == 2
    assert "gated repo" in err and "accept the licence" in err and "HF_TOKEN" in err
    monkeypatch.setenv("HF_TOKEN", secret)
    code, out, err = run(capsys, "size", "acme/gated", *ARGS)
    assert code == 0, err
    assert secret not in out + err


def test_token_flag_is_used_and_never_printed(hub, capsys):
    secret = "hf_FlagToken456"
    hub.repos["acme/gated"] = sharded_repo(gated_token=secret)
    code, out, err = run(capsys, "size", "acme/gated", "--token", "hf_wrong", *ARGS)
    assert code == 2 and "hf_wrong" not in out + err
    code, out, err = run(capsys, "size", "acme/gated", "--token", secret, *ARGS)
    assert code == 0, err
    assert secret not in out + err
    # once cached, the local HF cache answers before the Hub (no token needed, no request)
    n = len(hub.repos["acme/gated"].requests)
    code, _, err = run(capsys, "size", "acme/gated", *ARGS)
    assert code == 0, err
    assert len(hub.repos["acme/gated"].requests) == n


def test_missing_repo_and_revision(hub, capsys):
    hub.repos["acme/llama-copy"] = sharded_repo()
    code, _, err = run(capsys, "size", "meta-llama/Llama-3.1-8B-Instruc", *ARGS)
    assert code == 2 and "no model meta-llama/Llama-3.1-8B-Instruc" in err
    assert "did you mean meta-llama/Llama-3.1-8B-Instruct" in err
    code, _, err = run(capsys, "size", "acme/llama-copy", "--revision", "v9", *ARGS)
    assert code == 2 and "revision 'v9' does not exist in acme/llama-copy" in err


def test_revision_by_branch(hub, capsys):
    hub.repos["acme/llama-copy"] = sharded_repo(branches=("main", "v1"))
    code, out, err = run(capsys, "size", "acme/llama-copy", "--revision", "v1", *ARGS)
    assert code == 0, err


def test_slow_hub_times_out_within_bound(hub, capsys, monkeypatch):
    monkeypatch.setenv("KVPLAN_HUB_TIMEOUT", "1")
    hub.repos["acme/slow"] = sharded_repo(delay=4)
    t = time.monotonic()
    code, _, err = run(capsys, "size", "acme/slow", *ARGS)
    assert code == 2 and "did not answer within 1 s" in err
    assert time.monotonic() - t < 3.5


def test_network_down(monkeypatch, capsys, tmp_path):
    import huggingface_hub.constants as c

    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path))
    code, _, err = run(capsys, "size", "acme/anything", *ARGS)
    assert code == 2 and "cannot reach http://127.0.0.1:9" in err and "--offline" in err


def test_truncated_and_lying_safetensors_headers(hub, capsys):
    cfg = json.dumps(catalog_config()).encode()
    hub.repos["acme/lying"] = Repo(files={"config.json": cfg,
                                          "model.safetensors": safetensors_bytes(SINGLE,
                                                                                 lie=10**9)})
    code, _, err = run(capsys, "size", "acme/lying", *ARGS)
    assert code == 2 and "safetensors header in acme/lying is malformed or truncated" in err
    good = safetensors_bytes(SINGLE)
    hub.repos["acme/truncated"] = Repo(files={"config.json": cfg, "model.safetensors": good[:40]})
    code, _, err = run(capsys, "size", "acme/truncated", *ARGS)
    assert code == 2 and "malformed or truncated" in err


def test_malformed_config_on_hub(hub, capsys):
    hub.repos["acme/broken"] = Repo(files={"config.json": b"{\"model_type\": "})
    code, _, err = run(capsys, "size", "acme/broken", *ARGS)
    assert code == 2 and "is not valid JSON" in err
    # the cached copy is the repo's: fixing it is not the user's way out
    assert err.endswith("(the repo's file is malformed: size a corrected copy (kvplan size "
                        "PATH to a config.json or model directory))\n")
    # a field error names the repo's file
    hub.repos["acme/bad-field"] = Repo(files={"config.json": json.dumps(
        {**catalog_config(), "num_hidden_layers": "32"}).encode()})
    code, _, err = run(capsys, "size", "acme/bad-field", *ARGS)
    assert code == 2 and err.startswith("kvplan: error: acme/bad-field's config.json: config "
                                        "field 'num_hidden_layers' must be a non-negative")


def test_malformed_hf_quant_config_on_hub(hub, capsys):
    """Found by fuzzing the Hub files: `"quantization": 5` was an internal error."""
    hub.repos["acme/bad-quant"] = Repo(files={
        "config.json": json.dumps(catalog_config()).encode(),
        "hf_quant_config.json": b'{"producer": {"name": "modelopt"}, "quantization": 5}',
        "model.safetensors": safetensors_bytes(SINGLE)})
    code, _, err = run(capsys, "size", "acme/bad-quant", "--gpu", "h100")
    assert code == 2
    assert "config field 'hf_quant_config.quantization' must be an object, got 5" in err
    # a file that is not JSON at all was dropped and the model sized as 16-bit (session 28's
    # CLI fuzz): vLLM's get_config json.loads it and fails
    hub.repos["acme/bad-quant-json"] = Repo(files={
        "config.json": json.dumps(catalog_config()).encode(),
        "hf_quant_config.json": b"{bad", "model.safetensors": safetensors_bytes(SINGLE)})
    code, out, err = run(capsys, "size", "acme/bad-quant-json", "--gpu", "h100")
    assert code == 2 and out == "" and "hf_quant_config of acme/bad-quant-json" in err
    assert "is not valid JSON" in err and err.count("\n") == 1


def test_remote_code_architecture_is_read_not_run(hub, capsys):
    cfg = {"architectures": ["MyOwnForCausalLM"], "model_type": "my_own",
           "auto_map": {"AutoModelForCausalLM": "modeling_my_own.MyOwnForCausalLM"},
           "hidden_size": 1024, "num_attention_heads": 8, "num_key_value_heads": 2,
           "num_hidden_layers": 4, "vocab_size": 1000, "intermediate_size": 2048,
           "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}
    hub.repos["acme/custom"] = Repo(files={"config.json": json.dumps(cfg).encode(),
                                           "modeling_my_own.py": b"raise SystemExit(99)"})
    code, out, err = run(capsys, "size", "acme/custom", *ARGS)
    assert code == 0, err
    assert json.loads(out)["kv_bytes_per_token"] == 4 * 2 * 2 * 128 * 2
    assert not any("modeling" in r for r in hub.repos["acme/custom"].requests)


def test_models_add_then_offline_use(hub, capsys, tmp_path, monkeypatch):
    hub.repos["acme/llama-copy"] = sharded_repo()
    site = tmp_path / "site.yaml"
    code, out, err = run(capsys, "models", "add", "acme/llama-copy", "--catalog", str(site),
                         "--alias", "my-llama")
    assert code == 0, err
    entry = yaml.safe_load(site.read_text())["models"]["acme/llama-copy"]
    assert entry["weights_bytes"] == tensor_total(SHARD1) + tensor_total(SHARD2)
    assert "bos_token_id" not in entry["config"]
    hub.stop()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, out, err = run(capsys, "size", "my-llama", "--catalog", str(site), *ARGS)
    assert code == 0, err
    assert json.loads(out)["weights_total_bytes"] == entry["weights_bytes"]


def test_models_export_for_air_gapped_site(capsys, tmp_path):
    out_file = tmp_path / "carry.yaml"
    code, out, err = run(capsys, "models", "export", "llama-3.1-8b-instruct", "qwen3-8b",
                         "-o", str(out_file))
    assert code == 0, err
    models = yaml.safe_load(out_file.read_text())["models"]
    assert set(models) == {CATALOG_ID, "Qwen/Qwen3-8B"}
    code, out, err = run(capsys, "size", CATALOG_ID, "--catalog", str(out_file), *ARGS)
    assert code == 0, err


def test_token_stored_by_hf_auth_login(hub, capsys, monkeypatch, tmp_path):
    import huggingface_hub.constants as c

    secret = "hf_StoredLogin789"
    hub.repos["acme/gated2"] = sharded_repo(gated_token=secret)
    token_file = tmp_path / "stored_token"
    token_file.write_text(secret)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(c, "HF_TOKEN_PATH", str(token_file))
    code, out, err = run(capsys, "size", "acme/gated2", *ARGS)
    assert code == 0, err
    assert secret not in out + err


def test_sentence_transformers_repo_on_the_hub(hub, capsys, tmp_path):
    """modules.json and the Pooling module's config come from the Hub as vLLM fetches them;
    the start is a pooling one (Qwen3-8B shapes, MEAN: a whole-prompt budget) at the
    sentence_bert_config.json length, from the cache once the network is gone, and from a
    `models add` entry."""
    from test_pooling import ST_MEAN, ST_MODULES

    cfg = catalog.load("models", []).get("Qwen/Qwen3-8B")[1]["config"]
    hub.repos["acme/qwen3-embed"] = Repo(files={
        "config.json": json.dumps(cfg).encode(), "modules.json": json.dumps(ST_MODULES).encode(),
        "1_Pooling/config.json": json.dumps(ST_MEAN).encode(),
        "sentence_bert_config.json": b'{"max_seq_length": 32768}',
        "model.safetensors": safetensors_bytes(SINGLE)})
    args = ("--gpu", "h100", "--json")  # max_model_len 32,768 from sentence_bert_config
    code, out, err = run(capsys, "size", "acme/qwen3-embed", *args)
    assert code == 0, err
    first = json.loads(out)
    assert first["runner"] == "pooling" and first["max_num_batched_tokens"] == 32768
    assert first["max_model_len"] == 32768  # (its tiny safetensors: not 396,848 tokens)
    site = tmp_path / "site.yaml"
    code, _, err = run(capsys, "models", "add", "acme/qwen3-embed", "--catalog", str(site))
    assert code == 0, err
    entry = yaml.safe_load(site.read_text())["models"]["acme/qwen3-embed"]
    assert entry["sentence_transformers"] == {
        "modules": ST_MODULES, "pooling": {"1_Pooling": ST_MEAN},
        "encoder": {"file": "sentence_bert_config.json", "max_seq_length": 32768}}
    hub.stop()
    code, out, err = run(capsys, "size", "acme/qwen3-embed", *args)
    assert code == 0, err
    assert json.loads(out)["kv_cache_tokens"] == first["kv_cache_tokens"]
    code, out, err = run(capsys, "size", "acme/qwen3-embed", "--catalog", str(site),
                         "--offline", *args)
    assert code == 0, err
    assert json.loads(out)["runner"] == "pooling" and json.loads(out)["max_model_len"] == 32768


def test_hub_repo_without_modules_json_is_generation(hub, capsys):
    hub.repos["acme/llama-copy"] = sharded_repo()
    code, out, err = run(capsys, "size", "acme/llama-copy", *ARGS)
    assert code == 0, err
    assert json.loads(out)["runner"] == "generate"
    assert any(r.startswith("HEAD modules.json") for r in hub.repos["acme/llama-copy"].requests)


def _write_dir(d, files):
    d.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (d / name).write_bytes(data)
    return str(d)


def test_model_directory_sums_only_the_shards_the_index_names(capsys, tmp_path):
    """vLLM's `filter_duplicate_safetensors_files`: Mistral repos ship consolidated.safetensors
    beside the HF shards; only the index's shards are loaded. A shard the index names but the
    directory lacks is a partial download: exit 2."""
    repo = sharded_repo()
    consolidated = safetensors_bytes({"layers.0.attention.wq.weight": ("BF16", [640, 640])})
    d = _write_dir(tmp_path / "mistral", {**repo.files, "consolidated.safetensors": consolidated})
    code, out, err = run(capsys, "size", d, *ARGS)
    assert code == 0, err
    assert json.loads(out)["weights_total_bytes"] == tensor_total(SHARD1) + tensor_total(SHARD2)
    # without an index the HF-format files are taken, not the Mistral-format one
    d2 = _write_dir(tmp_path / "noindex", {"config.json": repo.files["config.json"],
                                          "model.safetensors": safetensors_bytes(SINGLE),
                                          "consolidated.safetensors": consolidated})
    code, out, err = run(capsys, "size", d2, *ARGS)
    assert json.loads(out)["weights_total_bytes"] == tensor_total(SINGLE)
    del repo.files["model-00002-of-00002.safetensors"]
    d3 = _write_dir(tmp_path / "partial", repo.files)
    code, out, err = run(capsys, "size", d3, *ARGS)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert ("names 1 of 2 shards that are not there (model-00002-of-00002.safetensors): vLLM "
            "refuses a partial checkpoint") in err
    # a cached Hub snapshot that holds part of the shards is not used (the Hub's headers are)
    from kvplan.sources.hub import _cached_tensors

    assert _cached_tensors(tmp_path / "partial") is None
    assert _cached_tensors(tmp_path / "mistral") is not None


def test_unreadable_local_files_are_bad_input(capsys, tmp_path):
    cfg = json.dumps(catalog_config())
    (tmp_path / "utf16.json").write_bytes(cfg.encode("utf-16"))
    code, _, err = run(capsys, "size", str(tmp_path / "utf16.json"), "--gpu", "h100")
    assert code == 2 and "is not UTF-8 text (byte 0: b'\\xff')" in err
    d = tmp_path / "dangling"
    _write_dir(d, {"config.json": cfg.encode()})
    (d / "model.safetensors").symlink_to(tmp_path / "gone")
    code, _, err = run(capsys, "size", str(d), "--gpu", "h100")
    assert code == 2 and "cannot read safetensors file" in err and "No such file" in err
    (tmp_path / "cat.yaml").write_bytes("models: {}\n".encode("utf-16"))
    code, _, err = run(capsys, "gpus", "--catalog", str(tmp_path / "cat.yaml"))
    assert code == 2 and "is not UTF-8 text" in err


def test_transformers_offline_and_an_empty_timeout(monkeypatch):
    """review 24b F9: TRANSFORMERS_OFFLINE=1 is offline as vLLM's transformers loading is; an
    empty KVPLAN_HUB_TIMEOUT is the default, as unset."""
    from kvplan.sources import hub

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    assert hub.offline_env()
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "0")
    assert not hub.offline_env()
    monkeypatch.setenv("KVPLAN_HUB_TIMEOUT", "")
    assert hub.timeout() == hub.DEFAULT_TIMEOUT
