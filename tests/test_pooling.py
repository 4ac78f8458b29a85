"""The pooling runner's chunked prefill, prefix caching and token budget as each vLLM
release decides them (`core/pooling.py`), and `--pooler-config` as each release reads it
(`engines/vllm_pooler.py`), read in the 0.6.4-0.33 wheels."""

import json

import pytest

from kvplan.cli import main
from kvplan.core.pooling import PoolerRead, model_defaults, prefill
from kvplan.core.sizing import EngineArgs, size
from kvplan.core.versions import VllmVersion
from kvplan.engines.vllm_pooler import ignored_note, read, renamed
from kvplan.errors import BadInput
from kvplan.sources.resolve import resolve_gpu, resolve_model

MEAN = '{"pooling_type": "MEAN"}'
# Qwen3-8B: 36 layers x 8 KV heads x 128 x 2 (K, V) x 2 B = 147,456 B a token, 2,359,296 B a
# 16-token block; the forward keeps 4 hidden (4,096) and 3 intermediate (12,288) bf16
# activations a token: 106,496 B, plus the fixed 64 MiB term
PER_TOKEN, BLOCK, FIXED = 106_496, 2_359_296, 64 * 2**20


def size_json(capsys, *argv, gpu="l4", mml="8192"):
    code = main(["size", "Qwen/Qwen3-8B", "--gpu", gpu, "--json", "--max-model-len", mml,
                 *argv])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else None), err


def figures(d):
    return d["activation_bytes"], d["kv_cache_tokens"], d["max_num_batched_tokens"]


def test_mean_pooling_turns_chunked_prefill_off_from_0_12(capsys):
    # the review's case (#10): 0.12 `is_chunked_prefill_supported` is False for MEAN, so
    # `_set_default_max_num_seqs_and_batched_tokens_args` raises the budget to max_model_len
    base = ("--convert", "embed", "--vllm-version", "0.12.0")
    _, last, _ = size_json(capsys, *base)
    _, mean, _ = size_json(capsys, *base, "--pooler-config", MEAN)
    assert figures(last) == (2048 * PER_TOKEN + FIXED, 38_512, 2048)  # was the MEAN figure
    assert figures(mean) == (8192 * PER_TOKEN + FIXED, 34_080, 8192)
    # the pool loses exactly the larger forward: 654,311,424 B, 2,130 blocks of 16 tokens
    assert last["kv_pool_bytes"] - mean["kv_pool_bytes"] == 6144 * PER_TOKEN
    assert mean["kv_pool_bytes"] // BLOCK * 16 == 34_080
    assert any("MEAN pooling: vLLM 0.12.0 turns chunked prefill and prefix caching off" in n
               for n in mean["notes"])


@pytest.mark.parametrize("version,config,chunked", [
    # 0.12 refuses all / mean / step / cls, 0.13 mean / step / cls, 0.14+ MEAN or CLS
    # sequence pooling or STEP token pooling (`ModelConfig.is_chunked_prefill_supported`)
    ("0.12.0", '{"pooling_type": "ALL"}', False),
    ("0.13.0", '{"pooling_type": "ALL"}', True),
    ("0.13.0", '{"pooling_type": "STEP"}', False),
    ("0.14.0", '{"pooling_type": "ALL"}', True),
    ("0.14.0", '{"seq_pooling_type": "MEAN"}', False),
    ("0.14.0", '{"tok_pooling_type": "STEP"}', False),
    ("0.19.0", '{"seq_pooling_type": "CLS"}', False),
    ("0.19.0", '{"pooling_type": "LAST"}', True),
    # 0.12 / 0.13 drop seq_pooling_type: LAST, the model's default
    ("0.12.0", '{"seq_pooling_type": "MEAN"}', True),
    ("0.13.0", '{"seq_pooling_type": "MEAN"}', True),
])
def test_each_release_predicate(capsys, version, config, chunked):
    code, d, err = size_json(capsys, "--runner", "pooling", "--vllm-version", version,
                             "--pooler-config", config)
    assert code == 0, err
    assert figures(d) == ((2048 * PER_TOKEN + FIXED, 38_512, 2048) if chunked else
                          (8192 * PER_TOKEN + FIXED, 34_080, 8192))


def test_seq_pooling_type_before_0_14_is_ignored_with_a_note(capsys):
    _, d, _ = size_json(capsys, "--runner", "pooling", "--vllm-version", "0.12.0",
                        "--pooler-config", '{"seq_pooling_type": "MEAN"}')
    assert any("vLLM 0.12.0 ignores --pooler-config 'seq_pooling_type'" in n
               and "use pooling_type before 0.14" in n for n in d["notes"])


def test_explicit_chunked_prefill(capsys):
    # 0.12+: the predicate sets only the default; the flag is honoured (a warning)
    _, on, _ = size_json(capsys, "--runner", "pooling", "--vllm-version", "0.12.0",
                         "--pooler-config", MEAN, "--enable-chunked-prefill")
    assert figures(on) == (2048 * PER_TOKEN + FIXED, 38_512, 2048)
    assert any("honours --enable-chunked-prefill" in n for n in on["notes"])
    # 0.10.1-0.11.x: `VllmConfig.__post_init__` turns it off after the budget was set from
    # the flag, so the budget stays the default and --max-num-batched-tokens 1024 passes
    _, forced, _ = size_json(capsys, "--runner", "pooling", "--vllm-version", "0.11.0",
                             "--pooler-config", MEAN, "--enable-chunked-prefill")
    assert forced["max_num_batched_tokens"] == 2048
    assert any("off whatever the flags say" in n for n in forced["notes"])
    code, small, err = size_json(capsys, "--runner", "pooling", "--vllm-version", "0.11.0",
                                 "--pooler-config", MEAN, "--enable-chunked-prefill",
                                 "--max-num-batched-tokens", "1024")
    assert code == 0 and small["max_num_batched_tokens"] == 1024, err
    # without the flag `SchedulerConfig` is built with chunked prefill off: refused
    for v in ("0.11.0", "0.12.0"):
        code, _, err = size_json(capsys, "--runner", "pooling", "--vllm-version", v,
                                 "--pooler-config", MEAN, "--max-num-batched-tokens", "1024")
        assert code == 2 and "smaller than --max-model-len 8192" in err


def test_budget_before_0_11_1(capsys):
    # 0.10.1-0.11.0 `_set_default_args`: max_model_len itself; 0.11.1+ max(it, the default)
    _, old, _ = size_json(capsys, "--runner", "pooling", "--vllm-version", "0.10.1",
                          "--pooler-config", MEAN, mml="1024")
    _, new, _ = size_json(capsys, "--runner", "pooling", "--vllm-version", "0.11.1",
                          "--pooler-config", MEAN, mml="1024")
    assert old["max_num_batched_tokens"] == 1024 and new["max_num_batched_tokens"] == 2048
    assert old["activation_bytes"] == 1024 * PER_TOKEN + FIXED


def _size(version, **kw):
    m, g = resolve_model("Qwen/Qwen3-8B"), resolve_gpu("l4")
    pc = kw.pop("pc", None)
    a = EngineArgs(max_model_len=kw.pop("mml", 8192), task="embed", pooler=read(pc, version),
                   **kw)
    return size(m, g, a, version)


def test_0_9_2_and_0_10_0_fill_no_pooling_type():
    # no default pooling type before 0.10.1: chunked prefill and prefix caching off unless
    # LAST is given; `VllmConfig` sets the budget to max(max_model_len, 2048) whatever the
    # flags said
    for v in ("0.9.2", "0.10.0"):
        r = _size(v)
        assert (r.kv_cache_tokens, r.max_num_batched_tokens) == (34_080, 8192)
        assert any("no pooling type" in n for n in r.notes)
        assert _size(v, pc='{"pooling_type": "LAST"}').max_num_batched_tokens == 2048
        assert _size(v, mml=1024).max_num_batched_tokens == 2048
        r = _size(v, pc=MEAN, enable_chunked_prefill=True, max_num_batched_tokens=1024)
        assert r.max_num_batched_tokens == 8192
        # LAST with chunked prefill off: `_set_default_args_v1` sets max_model_len
        r = _size(v, pc='{"pooling_type": "LAST"}', enable_chunked_prefill=False,
                  max_num_batched_tokens=1024)
        assert r.max_num_batched_tokens == 8192


def test_pooling_runs_on_v0_before_0_9_2():
    # `_is_v1_supported_oracle`: "No Embedding Models so far" (0.8.0-0.9.1); V0 refuses
    # chunked prefill for pooling models
    r = _size("0.9.1")
    assert r.version.engine_v0 and r.max_num_batched_tokens == 8192
    with pytest.raises(BadInput, match="Chunked prefill is not supported for pooling"):
        _size("0.9.1", enable_chunked_prefill=True)
    assert not _size("0.9.2").version.engine_v0


def test_hybrid_prefix_caching_default():
    # a LAST-pooled hybrid takes prefix caching by default (`is_prefix_caching_supported`'s
    # pooling branch), so its Mamba states follow 'align' mode; 0.26-0.27 keep hybrids'
    # opt-in (`and not model_config.is_hybrid`)
    m, g = resolve_model("Qwen/Qwen3.5-9B"), resolve_gpu("h100")
    a = EngineArgs(max_model_len=32768, runner="pooling")
    assert size(m, g, a, "0.25.0").kv_cache_tokens == 1_610_855  # 1,684,076 without
    assert size(m, g, a, "0.27.1").kv_cache_tokens == 1_684_076


def test_model_defaults():
    v = VllmVersion.of
    assert model_defaults(["Qwen3ForCausalLM"], v("0.12.0")) == ("LAST", "ALL")
    assert model_defaults(["Qwen3ForCausalLM"], v("0.10.0")) == (None, "ALL")
    assert model_defaults(["Qwen2ForProcessRewardModel"], v("0.13.0")) == ("STEP", "ALL")
    assert model_defaults(["Qwen2ForProcessRewardModel"], v("0.14.0")) == ("LAST", "STEP")
    assert model_defaults(["GritLM"], v("0.10.1")) == ("LAST", "ALL")  # no decorator yet
    assert model_defaults(["GritLM"], v("0.12.0")) == ("MEAN", "ALL")
    assert model_defaults(["ColQwen3"], v("0.20.0")) == ("CLS", "ALL")

    def ok(arch, version, pooler=None):
        return prefill(v(version), [arch], pooler).supported

    # reward models pool ALL: off in 0.10.1-0.12, on from 0.13
    assert not ok("Qwen2ForRewardModel", "0.12.0") and ok("Qwen2ForRewardModel", "0.13.0")
    assert ok("InternLM2ForRewardModel", "0.20.0")
    # STEP (process reward) is off everywhere; CLS by default counts as encoder-only
    assert not any(ok("Qwen2ForProcessRewardModel", x) for x in ("0.11.0", "0.13.0", "0.20.0"))
    assert not ok("ColQwen3", "0.20.0", PoolerRead(seq="LAST"))
    assert prefill(v("0.20.0"), ["ColQwen3"], None).encoder
    assert not ok("GritLM", "0.20.0") and ok("GritLM", "0.20.0", PoolerRead(seq="LAST"))
    assert prefill(v("0.11.0"), ["GritLM"], None).forced


@pytest.mark.parametrize("version,text,match", [
    ("0.33", "{seq_pooling_type:MEAN}", "is not a JSON object"),
    ("0.12", "[1]", "is not a JSON object"),
    ("0.20", '{"pooling_type": "MEANS"}', "is not one of"),
    ("0.11.0", '{"pooling_type": "mean"}', "when it builds the model's pooler"),
    ("0.12", '{"pooling_type": "mean"}', "matches exactly"),
    ("0.14", '{"seq_pooling_type": "ALL"}', "CLS, LAST, MEAN"),
    ("0.14", '{"pooling_type": "MEAN", "seq_pooling_type": "MEAN"}', "Cannot set both"),
    ("0.16", '{"normalize": true}', "forbids unknown keys"),
    ("0.8.5", '{"seq_pooling_type": "MEAN"}', "takes no such argument"),
])
def test_read_refuses_what_the_release_refuses(version, text, match):
    with pytest.raises(BadInput, match=match):
        read(text, version)


def test_read_keys_per_release():
    assert read('{"pooling_type": "MEAN"}', "0.9.2") == PoolerRead(seq="MEAN")
    assert read('{"pooling_type": "STEP"}', "0.14") == PoolerRead(tok="STEP")
    assert read('{"pooling_type": "CLS"}', "0.33") == PoolerRead(seq="CLS")
    got = read('{"seq_pooling_type": "MEAN", "normalize": true}', "0.13")
    assert got == PoolerRead(ignored=("seq_pooling_type",))
    assert renamed('{"seq_pooling_type": "MEAN", "normalize": true}', got) == \
        '{"pooling_type": "MEAN", "normalize": true}'
    assert "so the model's default pooling type applies" in ignored_note(got, "0.13")
    # 0.14-0.15 still drop unknown keys; 0.15 still knows normalize
    assert read('{"normalise": true}', "0.15").ignored == ("normalise",)
    assert read('{"normalize": true}', "0.15").ignored == ()
    with pytest.raises(BadInput, match="forbids unknown keys") as e:
        read('{"pooling_typ": "MEAN"}', "0.20")
    assert e.value.hint.startswith("did you mean pooling_type")
    assert read(None, "0.20") is None


def test_size_refuses_a_config_the_release_refuses(capsys):
    code, _, err = size_json(capsys, "--runner", "pooling", "--pooler-config",
                             '{"pooling_type": "mean"}')
    assert code == 2 and 'write "MEAN"' in err


# --- sentence-transformers checkpoints (`get_pooling_config`, 0.6.4-0.33) -------------------

ST_MODULES = [{"idx": 0, "name": "0", "path": "",
               "type": "sentence_transformers.models.Transformer"},
              {"idx": 1, "name": "1", "path": "1_Pooling",
               "type": "sentence_transformers.models.Pooling"},
              {"idx": 2, "name": "2", "path": "2_Normalize",
               "type": "sentence_transformers.models.Normalize"}]
# Qwen3-Embedding's 1_Pooling/config.json (key order as sentence-transformers writes it)
ST_LAST = {"word_embedding_dimension": 4096, "pooling_mode_cls_token": False,
           "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": False,
           "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_weightedmean_tokens": False,
           "pooling_mode_lasttoken": True, "include_prompt": True}
ST_MEAN = {**ST_LAST, "pooling_mode_mean_tokens": True, "pooling_mode_lasttoken": False}
ST_MAX_THEN_MEAN = {"pooling_mode_max_tokens": True, "pooling_mode_mean_tokens": True}


def st_dir(tmp_path, pooling, modules=ST_MODULES):
    from kvplan import catalog

    d = tmp_path / "qwen3-embed"
    (d / "1_Pooling").mkdir(parents=True)
    cfg = catalog.load("models", []).get("Qwen/Qwen3-8B")[1]["config"]
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "modules.json").write_text(json.dumps(modules))
    (d / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    return str(d)


@pytest.mark.parametrize("version,pooling,seq,tok", [
    ("0.13.0", ST_LAST, "LAST", None),
    ("0.14.0", ST_LAST, "LAST", None),  # include_prompt reads as INCLUDE: skipped
    ("0.11.0", ST_MEAN, "MEAN", None),
    ("0.10.0", ST_MAX_THEN_MEAN, None, None),  # MAX first: no type to 0.10.0
    ("0.14.0", ST_MAX_THEN_MEAN, "MEAN", None),  # every true key, MAX skipped
    ("0.29.0", {"pooling_mode": "mean"}, None, None),  # the string key from 0.30
    ("0.30.0", {"pooling_mode": "mean"}, "MEAN", None),
    ("0.30.0", {"pooling_mode_mean_sqrt_len_tokens": True}, "MEAN", None),  # cut at "_"
])
def test_st_pooling_per_release(version, pooling, seq, tok):
    from kvplan.core.pooling import st_pooling

    st = st_pooling(ST_MODULES, {"1_Pooling": pooling}, VllmVersion.of(version))
    assert st.module == "1_Pooling" and (st.read.seq, st.read.tok) == (seq, tok)
    assert st_pooling(ST_MODULES[:1], {}, VllmVersion.of(version)) is None  # no Pooling module
    newer = [{**ST_MODULES[1],
              "type": "sentence_transformers.sentence_transformer.modules.pooling.Pooling"}]
    assert (st_pooling(newer, {"1_Pooling": pooling}, VllmVersion.of(version)) is None) == (
        not VllmVersion.of(version).at_least(0, 30))


def test_st_checkpoint_runs_pooling_as_the_flags_would(capsys, tmp_path):
    """A Qwen3ForCausalLM directory with modules.json is a pooling start by default, sized
    to the token as the catalog model with --runner pooling and the Pooling module's type
    given as --pooler-config (H100, 32,768 tokens)."""
    for version, pooling, flag, tokens, mnbt in [
            ("0.33", ST_LAST, "LAST", 414_592, 8192), ("0.33", ST_MEAN, "MEAN", 396_848, 32768),
            ("0.12.0", ST_MEAN, "MEAN", 391_184, 32768)]:
        path = st_dir(tmp_path / f"{version}{flag}", pooling)
        args = ("--gpu", "h100", "--max-model-len", "32768", "--vllm-version", version, "--json")
        code, out, err = main(["size", path, *args]), *capsys.readouterr()
        assert code == 0, err
        d = json.loads(out)
        code = main(["size", "Qwen/Qwen3-8B", *args, "--runner", "pooling", "--pooler-config",
                     json.dumps({"pooling_type": flag})])
        ref = json.loads(capsys.readouterr()[0])
        assert (d["runner"], d["kv_cache_tokens"], d["max_num_batched_tokens"]) == (
            "pooling", tokens, mnbt) == (ref["runner"], ref["kv_cache_tokens"],
                                         ref["max_num_batched_tokens"])
        assert any(f"pooling type {flag}: the checkpoint's sentence-transformers Pooling "
                   "module (1_Pooling/config.json" in n for n in d["notes"])
    # --runner generate serves it as a generator (the catalog model's 390,624 tokens)
    assert main(["size", path, "--gpu", "h100", "--max-model-len", "32768", "--runner",
                 "generate", "--json"]) == 0
    assert json.loads(capsys.readouterr()[0])["kv_cache_tokens"] == 390_624
    # --pooler-config wins over the module: LAST keeps chunked prefill (0.12.0: 408,928)
    assert main(["size", path, "--gpu", "h100", "--max-model-len", "32768", "--vllm-version",
                 "0.12.0", "--pooler-config", '{"pooling_type": "LAST"}', "--json"]) == 0
    assert json.loads(capsys.readouterr()[0])["kv_cache_tokens"] == 408_928


def test_st_checkpoint_bad_input(capsys, tmp_path):
    # 0.10.1-0.13 raise on a first mode they do not support, before any runner is chosen
    path = st_dir(tmp_path / "max", ST_MAX_THEN_MEAN)
    assert main(["size", path, "--gpu", "h100", "--vllm-version", "0.11.0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pooling_mode_max_tokens, is MAX" in err
    assert "run vLLM 0.14 or newer" in err
    path = st_dir(tmp_path / "bad", ST_LAST, modules=[{"path": "1_Pooling"}])
    assert main(["size", path, "--gpu", "h100"]) == 2
    assert "modules.json" in capsys.readouterr().err
    path = st_dir(tmp_path / "notlist", ST_LAST, modules={"a": 1})
    assert main(["size", path, "--gpu", "h100"]) == 2
    assert "must hold a JSON array" in capsys.readouterr().err


def test_st_encoder_config_sets_max_model_len(capsys, tmp_path):
    """`get_sentence_transformer_tokenizer_config`: the first non-empty sentence_*_config.json
    with max_seq_length replaces the derived length (40,960 for Qwen3-8B), as the default
    and as the cap, for generation too."""
    path = st_dir(tmp_path, ST_MEAN)
    (tmp_path / "qwen3-embed" / "sentence_roberta_config.json").write_text(
        '{"max_seq_length": 4096}')
    (tmp_path / "qwen3-embed" / "sentence_bert_config.json").write_text(
        '{"max_seq_length": 8192, "do_lower_case": false}')
    assert main(["size", path, "--gpu", "h100", "--json"]) == 0
    d = json.loads(capsys.readouterr()[0])
    assert d["max_model_len"] == 8192 and d["max_num_batched_tokens"] == 8192  # MEAN
    assert main(["size", path, "--gpu", "h100", "--runner", "generate", "--max-model-len",
                 "16384"]) == 2
    err = capsys.readouterr().err
    assert "exceeds the model's maximum of 8192 (sentence_bert_config.json max_seq_length" in err
    (tmp_path / "qwen3-embed" / "sentence_bert_config.json").write_text('{"do_lower_case": 1}')
    assert main(["size", path, "--gpu", "h100", "--json"]) == 0  # first non-empty: no length
    assert json.loads(capsys.readouterr()[0])["max_model_len"] == 40960
    (tmp_path / "qwen3-embed" / "sentence_bert_config.json").write_text(
        '{"max_seq_length": "long"}')
    assert main(["size", path, "--gpu", "h100"]) == 2
    assert "max_seq_length must be a positive integer" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["recommend", "--gpu", "h100", "--workload", "chat", "--rate", "5"],
    ["simulate", "--gpu", "h100", "--workload", "chat", "--rate", "5", "--requests", "50"],
    ["simulate", "--gpu", "h100", "--sweep", "rate=1:5:2", "--no-compare-cap"],
    ["throughput", "--gpu", "h100"],
])
def test_generation_commands_refuse_a_pooling_model(tmp_path, capsys, argv):
    """Review 23d #4: a sentence-transformers checkpoint runs vLLM's pooling runner (as `size`
    says), where a request is one prefill and nothing decodes; recommend, simulate and
    throughput used to plan it as a 252-sequence text generator. One line, exit 2."""
    d = st_dir(tmp_path, ST_LAST)
    code = main([argv[0], d, "--max-model-len", "32768", *argv[1:]])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "runs on vLLM's pooling runner" in err and "kvplan size" in err
    code = main(["size", d, "--gpu", "h100", "--max-model-len", "32768", "--json"])
    assert code == 0 and json.loads(capsys.readouterr().out)["runner"] == "pooling"
