"""Keys of vLLM's --compilation-config / --speculative-config JSON, per release: refused
where the config class forbids extras (CompilationConfig 0.13+, SpeculativeConfig 0.16+),
noted as ignored before, dashes read as underscores in speculative keys from 0.26."""

import json

import pytest

from kvplan.cli import main
from kvplan.engines.vllm_config_keys import check_keys, known_fields, normalise_speculative
from kvplan.errors import BadInput


def test_fields_by_release():
    # CompilationConfig.level: present to 0.17 (deprecated), gone in 0.18; mode from 0.11
    assert "level" in known_fields("compilation", "0.17") and "mode" in known_fields(
        "compilation", "0.17")
    assert "level" not in known_fields("compilation", "0.18")
    assert known_fields("compilation", "0.9") is None  # not recorded: no check
    # SpeculativeConfig.tensor_parallel_size arrived in 0.15, kv_cache_dtype in 0.26
    assert "tensor_parallel_size" not in known_fields("speculative", "0.14")
    assert "tensor_parallel_size" in known_fields("speculative", "0.15")
    assert "kv_cache_dtype" in known_fields("speculative", "0.26")
    assert "kv_cache_dtype" not in known_fields("speculative", "0.25")


def test_refused_or_ignored():
    with pytest.raises(BadInput, match=r"'level' is not a CompilationConfig field in vLLM 0\.18"
                       ) as e:
        check_keys("compilation", {"level": 3}, "0.18", "-cc")
    assert e.value.hint == "did you mean mode?"
    assert check_keys("compilation", {"level": 3}, "0.17", "-cc") is None
    with pytest.raises(BadInput, match="'cudagraph_mod' is not"):
        check_keys("compilation", {"cudagraph_mod": "FULL"}, "0.13", "-cc")
    # 0.12 drops an unknown key silently (pydantic's default extra="ignore")
    assert check_keys("compilation", {"cudagraph_mod": "FULL"}, "0.12", "-cc") == (
        "-cc: vLLM 0.12 ignores 'cudagraph_mod' (not a CompilationConfig field)")
    assert check_keys("speculative", {"bogus": 1}, "0.15", "--sc") == (
        "--sc: vLLM 0.15 ignores 'bogus' (not a SpeculativeConfig field)")
    with pytest.raises(BadInput, match="'bogus' is not a SpeculativeConfig field in vLLM 0.16"):
        check_keys("speculative", {"method": "ngram", "bogus": 1}, "0.16", "--sc")


def test_speculative_dashes():
    raw = {"method": "ngram", "num-speculative-tokens": 3}
    assert normalise_speculative(raw, "0.25") == raw
    assert normalise_speculative(raw, "0.26") == {"method": "ngram", "num_speculative_tokens": 3}
    with pytest.raises(BadInput) as e:
        check_keys("speculative", raw, "0.25", "--sc")
    assert e.value.hint == "did you mean num_speculative_tokens?"


def test_size_cli(capsys):
    base = ["size", "llama-3.1-8b", "--gpu", "h100", "--offline", "--json"]
    assert main(base + ["-cc", '{"foo": 1}']) == 2
    assert "'foo' is not a CompilationConfig field in vLLM 0.33" in capsys.readouterr().err
    assert main(base + ["-cc", '{"foo": 1}', "--vllm-version", "0.12"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "--compilation-config: vLLM 0.12 ignores 'foo' (not a CompilationConfig field)" in \
        out["notes"]
    # 0.33 reads a dashed key as its field: the same 441,152 tokens as the underscore spelling
    sc = '{"method": "ngram", "num-speculative-tokens": 3, "prompt_lookup_max": 4}'
    assert main(base + ["--speculative-config", sc]) == 0
    dashed = json.loads(capsys.readouterr().out)["kv_cache_tokens"]
    assert main(base + ["--speculative-config", sc.replace("num-spec", "num_spec")]) == 0
    assert dashed == json.loads(capsys.readouterr().out)["kv_cache_tokens"] == 441_152


def test_check_fails_flag_values(capsys):
    code = main(["check", "--cmd", "vllm serve Qwen/Qwen3-8B --speculative-config "
                 "'{\"method\": \"ngram\", \"num_speculative_token\": 3}'", "--gpu", "h100",
                 "--format", "json"])
    rep = json.loads(capsys.readouterr().out)
    f = [c for c in rep["deployments"][0]["checks"] if c["id"] == "flag-values"]
    assert code == 1 and f[0]["status"] == "fail"
    assert "'num_speculative_token' is not a SpeculativeConfig field" in f[0]["message"]


def test_optimization_level(capsys):
    # 0.12+ OPTIMIZATION_LEVEL_TO_CONFIG: -O1 keeps compilation but captures piecewise graphs
    # and turns pass_config.fuse_allreduce_rms off, so 0.17-0.29 build no FlashInfer
    # all-reduce workspace: Llama-3.3-70B TP4 on H100s at 0.19 loses the 1,620 MiB charge
    # (2,170 -> 550 MiB non-torch); -cc given with it overrides the level's defaults
    def run(*extra):
        assert main(["size", "llama-3.3-70b", "--gpu", "h100", "-tp", "4", "--vllm-version",
                     "0.19", "--offline", "--json", *extra]) == 0
        d = json.loads(capsys.readouterr().out)
        return d["non_torch_bytes"] >> 20, d["cudagraph_mode"]

    assert run() == (2170, "FULL_AND_PIECEWISE")
    assert run("-O1") == (550, "PIECEWISE")
    assert run("-O0") == (550, "NONE")
    assert run("-O1", "-cc", '{"cudagraph_mode": "FULL_AND_PIECEWISE", "pass_config": '
               '{"fuse_allreduce_rms": true}}') == (2170, "FULL_AND_PIECEWISE")
    assert run("-cc", '{"pass_config": {"fuse_allreduce_rms": false}}') == (
        550, "FULL_AND_PIECEWISE")
    assert main(["size", "llama-3.3-70b", "--gpu", "h100", "-O5", "--offline"]) == 2
    assert "--optimization-level '5' is not 0-3" in capsys.readouterr().err
