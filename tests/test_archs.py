"""Architectures a vLLM release's model registry does not list: refused as vLLM refuses them,
or sized with a note where vLLM falls back to its Transformers backend
(kvplan/engines/vllm_archs.py over vllm_archs.json, written by tools/vllm_archs.py)."""

import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from kvplan.cli import main
from kvplan.core.versions import ABSENT_UNTIL, REMOVED_ARCHITECTURES, VllmVersion
from kvplan.engines import vllm_archs as A
from kvplan.errors import BadInput

ROOT = Path(__file__).resolve().parent.parent
LLAMA = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
         "num_key_value_heads": 8, "num_hidden_layers": 32, "intermediate_size": 14336,
         "vocab_size": 128256, "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def size(capsys, tmp_path, arch, version, **extra):
    f = tmp_path / "config.json"
    f.write_text(json.dumps({"architectures": [arch], **LLAMA, **extra}))
    return run(capsys, "size", f, "--gpu", "h100", "--vllm-version", version, "--json")


def check(arch, version, config=None):
    return A.check([arch], config or {}, VllmVersion.of(version))


def refused(arch, version, config=None):
    with pytest.raises(BadInput) as e:
        check(arch, version, config)
    return e.value.line()


def test_made_up_architecture_is_refused_with_the_nearest_registered_names(capsys, tmp_path):
    code, out, err = size(capsys, tmp_path, "FooBarModel", "0.33")
    assert code == 2 and out == ""
    assert "vLLM 0.33 does not run FooBarModel" in err
    assert "\"Model architectures ['FooBarModel'] are not supported for now\"" in err
    assert "nearest registered: BertModel, RobertaModel, NomicBertModel" in err
    assert "--hf-overrides" in err
    # a misspelling finds its name; 0.6.0-0.6.2 read the registry of models/__init__.py
    assert "nearest registered: LlamaForCausalLM," in refused("LLamaForCausalLm", "0.9.2")
    assert "no Transformers backend before 0.7.2" in refused("FooBarModel", "0.6.0")


def test_an_architecture_a_later_release_adds_is_refused_on_an_older_one(capsys, tmp_path):
    # DeepSeek-V3 arrived in 0.6.6 (no Transformers backend to fall back to before 0.7.2)
    code, _, err = size(capsys, tmp_path, "DeepseekV3ForCausalLM", "0.6.5")
    assert code == 2
    assert "vLLM 0.6.5 does not have DeepseekV3ForCausalLM yet (its model registry lists it " \
           "after 0.6.5)" in err and "use a later --vllm-version" in err
    # DeepSeek's DSpark drafter is vLLM's own class (0.25+), not a Transformers one
    with pytest.raises(BadInput, match=r"does not have Qwen3DSparkModel yet .* after 0\.24\.0"):
        check("Qwen3DSparkModel", "0.24")
    assert check("Qwen3DSparkModel", "0.25") is None


def test_registered_architectures_pass_silently(capsys, tmp_path):
    for version in ("0.6.0", "0.10.1.1", "0.33"):
        code, out, err = size(capsys, tmp_path, "LlamaForCausalLM", version)
        assert code == 0, err
        assert not any("Transformers backend" in n for n in json.loads(out)["notes"])
    # a patch kvplan has not read counts what the releases beside it list: a 0.18.2 start of
    # Gemma 4 is sized (0.18.1 lacks it, 0.19.0 has it)
    assert check("Gemma4ForConditionalGeneration", "0.18.2") is None
    # the catalog's aiconfigurator names for what vLLM registers as MiniMaxM3Sparse*
    assert check("MiniMaxM3ForCausalLM", "0.24") is None


def test_suffix_conversion_and_the_transformers_backend_by_release():
    # vLLM registers BloomForCausalLM but no BloomForSequenceClassification: 0.10.1+
    # `_normalize_arch` and 0.10.0 `get_model_architecture` convert it; 0.7.2-0.9.2 fall
    # back to transformers.BloomForSequenceClassification; 0.7.1 has no backend
    assert check("BloomForSequenceClassification", "0.33") is None
    assert check("BloomForSequenceClassification", "0.10.0") is None
    note = check("BloomForSequenceClassification", "0.9.2")
    assert "falls back to its Transformers backend" in note
    assert "transformers.BloomForSequenceClassification" in note
    assert "nearest registered: BertForSequenceClassification," in refused(
        "BloomForSequenceClassification", "0.7.1")


def test_remote_code_falls_back_where_vllm_reads_its_auto_map(capsys, tmp_path):
    remote = {"auto_map": {"AutoConfig": "configuration_foo.FooConfig",
                           "AutoModelForCausalLM": "modeling_foo.FooBarModel"}}
    code, out, err = size(capsys, tmp_path, "FooBarModel", "0.33", **remote)
    assert code == 0, err
    note = next(n for n in json.loads(out)["notes"] if "Transformers backend" in n)
    assert "auto_map names remote code" in note and "--trust-remote-code" in note
    assert "generic decoder" in note
    # before 0.10.1 only the key AutoModel itself counts
    with pytest.raises(BadInput, match="Cannot find model module"):
        check("FooBarModel", "0.9.2", remote)
    assert check("FooBarModel", "0.9.2", {"auto_map": {"AutoModel": "m.FooBarModel"}})
    # 0.7.2-0.10.0 resolve every architecture; 0.10.1+ the first only
    two = ["FooBarModel", "MyOwnForCausalLM"]
    cfg = {"auto_map": {"AutoModel": "m.FooBarModel"}}
    assert A.check(two, cfg, VllmVersion.of("0.9.2"))
    with pytest.raises(BadInput):
        A.check(["FooBarModel", "BazModel"], {}, VllmVersion.of("0.8.3"))


def test_recommend_refuses_the_model_instead_of_every_candidate(capsys, tmp_path):
    cat = tmp_path / "cat.yaml"
    cat.write_text(yaml.safe_dump({"models": {"acme/foobar": {"config": {
        "architectures": ["FooBarModel"], **LLAMA}}}}))
    code, out, err = run(capsys, "recommend", "acme/foobar", "--catalog", cat, "--gpu", "h100")
    assert code == 2 and out == "" and "does not run FooBarModel" in err


def _check_json(capsys, cat, cmd, version):
    code, out, err = run(capsys, "check", "--catalog", cat, "--gpu", "h100", "--vllm-version",
                         version, "--cmd", cmd, "--format", "json")
    assert out, err
    dep = json.loads(out)["deployments"][0]
    return code, next(c for c in dep["checks"] if c["id"] == "sizing-inputs")


def test_check_fails_a_refused_architecture_and_warns_on_the_fallback(capsys, tmp_path):
    cat = tmp_path / "cat.yaml"
    cat.write_text(yaml.safe_dump({"models": {
        "acme/foobar": {"config": {"architectures": ["FooBarModel"], **LLAMA}},
        "acme/olmo3": {"config": {"architectures": ["Olmo3ForCausalLM"], **LLAMA}},
        "acme/dsv3": {"config": {"architectures": ["DeepseekV3ForCausalLM"], **LLAMA}}}}))
    code, c = _check_json(capsys, cat, "vllm serve acme/foobar", "0.33")
    assert code == 1 and c["status"] == "fail"
    assert "are not supported for now" in c["message"] and "BertModel" in c["fix"]
    # Olmo 3 is registered from 0.11.0; 0.10.2 runs transformers.Olmo3ForCausalLM
    code, c = _check_json(capsys, cat, "vllm serve acme/olmo3", "0.10.2")
    assert code == 0 and c["status"] == "warn"
    assert "falls back to its Transformers backend" in c["message"]
    code, c = _check_json(capsys, cat, "vllm serve acme/olmo3", "0.11")
    assert code == 0 and c["status"] == "pass"
    code, c = _check_json(capsys, cat, "vllm serve acme/dsv3", "0.6.5")
    assert code == 1 and c["status"] == "fail" and "does not have" in c["message"]
    assert "later --vllm-version" in c["fix"]


def test_the_record_agrees_with_kvplans_own_release_tables():
    data = json.loads(A.DATA.read_text())
    assert len(data["releases"]) == 65 and A.DATA.stat().st_size < 60_000
    key = A._key
    for name, newest_without in ABSENT_UNTIL.items():  # the catalog's late architectures
        first = data["archs"][A.ALIASES.get(name, name)][0]
        assert key(first)[:3] > newest_without, name
    for name, last in REMOVED_ARCHITECTURES.items():  # `_PREVIOUSLY_SUPPORTED_MODELS`
        assert key(data["archs"][name][-1])[:3] >= last, name


def test_every_catalog_model_is_registered_in_the_newest_release():
    from kvplan import catalog
    from kvplan.core.arch import normalize
    from kvplan.sources.resolve import model_from_entry

    latest = VllmVersion.of(None)
    for key, entry in catalog.load("models", []).items():
        m = model_from_entry(key, entry)
        names = normalize(m.config).architectures
        if any(x in REMOVED_ARCHITECTURES for x in names):  # refused before (Mllama)
            continue
        assert A.check(names, m.config, latest) is None, key


def _tool():
    spec = importlib.util.spec_from_file_location("vllm_archs_tool",
                                                  ROOT / "tools" / "vllm_archs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_tool_reads_both_registry_layouts_and_keeps_gaps(tmp_path):
    src = tmp_path / "src"

    def release(v, rel, text):
        f = src / v / "vllm" / "model_executor" / "models" / rel
        f.parent.mkdir(parents=True)
        f.write_text(text)

    release("0.6.0", "__init__.py", '_GENERATION_MODELS = {"AModel": ("a", "A")}\n'
            '_MODELS = {**_GENERATION_MODELS, "BModel": ("b", "B")}\n')
    release("0.6.3", "registry.py", '_TEXT_GENERATION_MODELS = {"AModel": ("a", "A")}\n'
            '_VLLM_MODELS = {**_TEXT_GENERATION_MODELS}\n')
    release("0.7.0", "registry.py", '_TEXT_GENERATION_MODELS = {"AModel": ("a", "A"), '
            '**{k: v for k, v in {}.items()}}\n_X: dict = {"BModel": ("b", "B")}\n'
            '_VLLM_MODELS = {**_TEXT_GENERATION_MODELS, **_X}\n')
    tf = tmp_path / "tf" / "transformers" / "models" / "auto"
    tf.mkdir(parents=True)
    (tf / "modeling_auto.py").write_text(
        'MODEL_FOR_CAUSAL_LM_MAPPING_NAMES = OrderedDict([("a", "AForCausalLM"), '
        '("b", ("BForCausalLM", "BModel"))])\n')
    tool = _tool()
    tool.OUT = tmp_path / "out.json"
    tool.main(src, [tmp_path / "tf"])
    got = json.loads(tool.OUT.read_text())
    assert got["releases"] == ["0.6.0", "0.6.3", "0.7.0"]
    assert got["archs"] == {"AModel": ["0.6.0", "0.7.0"],
                            "BModel": ["0.6.0", "0.6.0", "0.7.0", "0.7.0"]}
    assert got["transformers"]["suffixes"] == {"ForCausalLM": "A B", "Model": "B"}
    tool.main(src, [])  # without transformers wheels the file's names are kept
    assert json.loads(tool.OUT.read_text())["transformers"] == got["transformers"]
