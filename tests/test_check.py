"""`kvplan check` end to end on manifests written the way users write them
(tests/fixtures/check/): every check failing and passing, line numbers, output formats,
bad input and files with nothing to check."""

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kvplan.cli import main

FIX = Path(__file__).parent / "fixtures" / "check"


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def check_json(capsys, *argv):
    code, out, err = run(capsys, "check", *argv, "--format", "json")
    assert out, err
    return code, json.loads(out)


def by_id(dep):
    out = {}
    for c in dep["checks"]:
        out.setdefault(c["id"], []).append(c)
    return out


def one(dep, cid):
    got = by_id(dep)[cid]
    assert len(got) == 1, got
    return got[0]


def line_of(path, text, start=1):
    """1-based line of the first line at or after `start` containing `text`."""
    lines = Path(path).read_text().splitlines()
    for i in range(start - 1, len(lines)):
        if text in lines[i]:
            return i + 1
    raise AssertionError(f"{text!r} not in {path}")


def recommend(capsys, *argv):
    code, out, err = run(capsys, "recommend", *argv, "--json")
    assert code == 0, err
    return json.loads(out)


# --- the issue's "Done when" -----------------------------------------------------------------

def test_done_when_llama_8b_on_one_h100(capsys, tmp_path):
    src = FIX / "deployment-llama-chat.yaml"
    code, rep = check_json(capsys, src)
    assert code == 1 and rep["exit_code"] == 1
    (dep,) = rep["deployments"]
    assert dep["model"] == "meta-llama/Llama-3.1-8B-Instruct" and dep["gpu"] == "h100-sxm"
    assert dep["gpus"] == 1 and dep["workload"] == "chat" and dep["rate"] == 40
    failed = {c["id"] for c in dep["checks"] if c["status"] == "fail"}
    assert failed == {"max-num-seqs-safe", "replicas-cover-rate"}

    rec = recommend(capsys, "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100",
                    "--workload", "chat", "--rate", "40")
    seqs = one(dep, "max-num-seqs-safe")
    assert seqs["current"] == 1024 and seqs["suggested"] == rec["max_num_seqs"]
    assert seqs["fix"] == f"--max-num-seqs {rec['max_num_seqs']}"
    assert seqs["line"] == line_of(src, "- --max-num-seqs")
    reps = one(dep, "replicas-cover-rate")
    assert reps["current"] == 1 and reps["suggested"] == rec["replicas"]
    assert reps["fix"] == f"spec.replicas: {rec['replicas']}"
    assert reps["line"] == line_of(src, "replicas: 1")
    mml = one(dep, "max-model-len-fits")
    assert mml["status"] == "pass" and mml["current"] == 131072

    # the same file with the values `kvplan recommend` gives passes
    text = src.read_text()
    text = text.replace('- "131072"', f'- "{rec["max_model_len"]}"')
    text = text.replace('- "1024"', f'- "{rec["max_num_seqs"]}"')
    text = text.replace("replicas: 1", f"replicas: {rec['replicas']}")
    fixed = tmp_path / "deployment.yaml"
    fixed.write_text(text)
    code, rep = check_json(capsys, fixed)
    assert code == 0, rep
    assert {c["status"] for c in rep["deployments"][0]["checks"]} == {"pass"}

    # malformed input: exit 2, one line, no traceback
    code, out, err = run(capsys, "check", FIX / "malformed.yaml")
    assert code == 2 and out == ""
    assert err == (f"kvplan: error: {FIX / 'malformed.yaml'}:12: not valid YAML: expected ',' "
                   "or ']', but got '<scalar>' (while parsing a flow sequence on line 11)\n")


# --- line numbers ----------------------------------------------------------------------------

def _annotations(out):
    rows = []
    for line in out.splitlines():
        m = re.match(r"::(error|warning|notice) (.*?)::(.*)$", line)
        if m:
            props = dict(p.split("=", 1) for p in m.group(2).split(","))
            rows.append((m.group(1), props, m.group(3)))
    return rows


def test_github_annotations_point_at_the_offending_flag(capsys):
    src = FIX / "deployment-llama-chat.yaml"
    code, out, _ = run(capsys, "check", src, "--format", "github")
    assert code == 1
    rows = _annotations(out)
    assert [(lvl, p["line"], p["title"]) for lvl, p, _ in rows] == [
        ("error", str(line_of(src, "- --max-num-seqs")), "kvplan max-num-seqs-safe"),
        ("error", str(line_of(src, "replicas: 1")), "kvplan replicas-cover-rate"),
    ]
    assert all(p["file"] == str(src) for _, p, _ in rows)
    assert rows[0][1]["col"] == "15"  # the '-' of "- --max-num-seqs" is at column 13
    assert "1%25 probability" in rows[0][2]  # '%' escaped as GitHub requires
    assert out.splitlines()[-1].startswith("kvplan check: 2 failed")


def test_line_numbers_inside_a_shell_block_scalar(capsys, tmp_path):
    src = FIX / "deployment-shell-script.yaml"
    text = src.read_text().replace("--max-num-seqs 32", "--max-num-seqs 1024")
    f = tmp_path / "shell.yaml"
    f.write_text(text)
    code, out, _ = run(capsys, "check", f, "--format", "github")
    assert code == 1
    (row,) = [r for r in _annotations(out) if r[0] == "error"]
    assert row[1]["line"] == str(line_of(f, "--max-num-seqs 1024"))
    assert row[1]["title"] == "kvplan max-num-seqs-safe"
    # above the token budget (2,048 on an L40S) vLLM refuses the flag itself
    f.write_text(src.read_text().replace("--max-num-seqs 32", "--max-num-seqs 4096"))
    code, rep = check_json(capsys, f)
    bad = [c for c in rep["deployments"][0]["checks"]
           if c["id"] == "flag-values" and c["status"] == "fail"]
    assert code == 1 and len(bad) == 1 and bad[0]["line"] == line_of(f, "--max-num-seqs 4096")
    assert bad[0]["message"].startswith("the default max_num_batched_tokens 2048 is smaller than "
                                        "--max-num-seqs 4096")


def test_line_numbers_in_a_folded_compose_command(capsys):
    src = FIX / "compose.yaml"
    code, rep = check_json(capsys, src)
    vllm = next(d for d in rep["deployments"] if d["name"] == "service/vllm")
    assert one(vllm, "max-model-len-fits")["line"] == line_of(src, "--max-model-len 40960")
    assert one(vllm, "max-num-seqs-safe")["line"] == line_of(src, "--max-num-seqs 64")
    # the GPU reservation comes from the x-gpu anchor
    assert one(vllm, "gpu-count-matches")["line"] == line_of(src, "- driver: nvidia")


def test_unknown_flags_suggest_the_closest(capsys):
    src = FIX / "pod-typos.yaml"
    code, rep = check_json(capsys, src)
    assert code == 1
    flags = by_id(rep["deployments"][0])["flags-known"]
    fails = [(c["current"], c["suggested"], c["line"]) for c in flags if c["status"] == "fail"]
    assert fails == [("--max-model-length", "--max-model-len", line_of(src, "--max-model-len")),
                     ("--gpu-memory-utilisation", "--gpu-memory-utilization",
                      line_of(src, "--gpu-memory-utilisation"))]
    assert [c["fix"] for c in flags if c["status"] == "fail"] == [
        "use --max-model-len", "use --gpu-memory-utilization"]
    # argparse accepts a unique prefix: a warning, not a failure
    (warn,) = [c for c in flags if c["status"] == "warn"]
    assert warn["current"] == "--max-num-seq" and warn["suggested"] == "--max-num-seqs"


def test_flag_removed_in_the_target_release(capsys):
    code, rep = check_json(capsys, FIX / "deployment-model-path.yaml")
    dep = rep["deployments"][0]
    assert dep["vllm_version"] == "0.18.1"  # from the image tag
    f = one(dep, "flags-known")
    assert f["status"] == "fail" and f["current"] == "--swap-space"
    # the first release that dropped it and the last that had it, as patches
    assert "(vLLM 0.18.0 dropped it; 0.17.1 had it)" in f["message"]
    assert f["fix"] == "remove --swap-space"
    code, rep = check_json(capsys, FIX / "deployment-model-path.yaml", "--vllm-version", "0.14")
    assert rep["deployments"][0]["vllm_version"] == "0.18.1"  # the image wins over the default


# --- files with nothing to check and bad input ----------------------------------------------

def test_nothing_to_check_exits_2(capsys):
    code, out, err = run(capsys, "check", FIX / "no-engine.yaml")
    assert code == 2 and out == ""
    assert "nothing to check: no vLLM, SGLang or TGI command in" in err
    assert "(found: ConfigMap, Deployment)" in err and err.count("\n") == 1


def test_nothing_to_check_still_prints_the_json_object_and_the_junit_file(capsys):
    # review 23c #4: `-f json | jq` and the Action's JUnit file need a report at exit 2
    code, rep = check_json(capsys, FIX / "no-engine.yaml")
    assert code == rep["exit_code"] == 2 and rep["deployments"] == []
    assert rep["summary"] == {"deployments": 0, "failed": 0, "warnings": 0, "passed": 0,
                              "skipped": 0}
    (f,) = rep["files"]
    assert f["note"] == "nothing to check: no vLLM, SGLang or TGI command (found: ConfigMap, " \
        "Deployment)" and f["error"] is None
    assert rep["error"].startswith("nothing to check: no vLLM, SGLang or TGI command in ")
    code, out, err = run(capsys, "check", FIX / "no-engine.yaml", "--format", "junit")
    root = ET.fromstring(out)
    assert code == 2 and err.startswith("kvplan: error: nothing to check")
    assert root.tag == "testsuites" and root.get("tests") == "0" and root.get("errors") == "0"
    assert root.find("testsuite").get("tests") == "0"
    assert "nothing to check" in root.find("testsuite/system-out").text
    code, rep = check_json(capsys)  # no inputs at all (the Action's glob matched nothing)
    assert code == rep["exit_code"] == 2 and rep["files"] == [] and rep["deployments"] == []
    assert rep["error"].startswith("nothing to check: give deployment files or --cmd")
    code, out, _ = run(capsys, "check", "--format", "junit")
    assert code == 2 and ET.fromstring(out).get("tests") == "0"
    code, rep = check_json(capsys, "--cmd", "echo hello")  # a bad --cmd: the run's error
    assert code == rep["exit_code"] == 2 and rep["error"].startswith(
        "--cmd: no vllm serve, SGLang or TGI command in 'echo hello'")
    code, out, _ = run(capsys, "check", "--cmd", "echo hello", "--format", "junit")
    root = ET.fromstring(out)
    assert code == 2 and root.get("tests") == "1" and root.get("errors") == "1"


def test_nothing_to_check_beside_a_real_deployment_is_a_note(capsys):
    code, rep = check_json(capsys, FIX / "no-engine.yaml", FIX / "deployment-l4-long-context.yaml")
    assert code == 1
    notes = {Path(f["file"]).name: f["note"] for f in rep["files"]}
    assert notes["no-engine.yaml"].startswith("nothing to check")
    assert notes["deployment-l4-long-context.yaml"] is None
    code, out, _ = run(capsys, "check", FIX / "no-engine.yaml", "--allow-empty")
    assert code == 0 and "nothing to check" in out


@pytest.mark.parametrize("name,message", [
    ("duplicate-args.yaml", "duplicate-args.yaml:13: duplicate key 'args' (also on line 9)"),
    ("annotation-typo.yaml", "annotation-typo.yaml:7: unknown annotation 'kvplan.io/rat' "
                             "(did you mean kvplan.io/rate?)"),
    ("missing.yaml", "missing.yaml: no such file"),
])
def test_bad_input_exits_2_with_one_line(capsys, name, message):
    code, out, err = run(capsys, "check", FIX / name)
    assert code == 2 and out == "" and message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_a_bad_file_does_not_hide_the_others(capsys):
    # every readable file is still checked; the bad ones are listed and the run exits 2
    good = FIX / "deployment-l4-long-context.yaml"
    code, out, _ = run(capsys, "check", good, FIX / "malformed.yaml", FIX / "missing.yaml")
    assert code == 2 and "weights-fit" in out
    assert f"error: {FIX / 'malformed.yaml'}:12: not valid YAML" in out
    assert f"error: {FIX / 'missing.yaml'}: no such file" in out
    assert out.rstrip().endswith("2 files not read")
    code, rep = check_json(capsys, good, FIX / "annotation-typo.yaml")
    assert code == rep["exit_code"] == 2 and len(rep["deployments"]) == 1
    errors = {Path(f["file"]).name: f["error"] for f in rep["files"]}
    assert errors == {good.name: None, "annotation-typo.yaml": "unknown annotation "
                      "'kvplan.io/rat' (did you mean kvplan.io/rate?)"}
    code, out, _ = run(capsys, "check", good, FIX / "malformed.yaml", "--format", "junit")
    assert code == 2 and 'errors="1"' in out and "<error message=" in out


def test_a_bad_file_beside_one_without_an_engine_reports_both(capsys):
    code, rep = check_json(capsys, FIX / "no-engine.yaml", FIX / "missing.yaml")
    files = {Path(f["file"]).name: f for f in rep["files"]}
    assert code == 2 and files["missing.yaml"]["error"] == "no such file"
    assert files["no-engine.yaml"]["note"].startswith("nothing to check")


def test_one_bad_file_still_gives_a_ci_report(capsys):
    code, rep = check_json(capsys, FIX / "missing.yaml")
    assert code == rep["exit_code"] == 2 and rep["files"][0]["error"] == "no such file"
    code, out, err = run(capsys, "check", FIX / "malformed.yaml", "--format", "junit")
    assert code == 2 and 'errors="1"' in out and "not valid YAML" in err


def test_bad_input_in_github_format_is_an_annotation(capsys):
    code, out, err = run(capsys, "check", FIX / "malformed.yaml", "--format", "github")
    assert code == 2 and "not valid YAML" in err
    ((lvl, props, msg),) = _annotations(out)
    assert lvl == "error" and props["line"] == "12" and msg.startswith("not valid YAML")


def test_bad_annotation_value(capsys, tmp_path):
    f = tmp_path / "d.yaml"
    f.write_text((FIX / "deployment-llama-chat.yaml").read_text().replace(
        'kvplan.io/rate: "40"', 'kvplan.io/rate: "fast"'))
    code, _, err = run(capsys, "check", f)
    assert code == 2 and f"{f}:11: kvplan.io/rate: Input should be a valid number" in err


@pytest.mark.parametrize("written,kind,shown", [
    ('kvplan.io/rate: 40', "number", "40"),
    ('kvplan.io/n-plus-one: true', "bool", "true"),
    ('prometheus.io/port: 8000', "number", "8000"),  # any annotation: the object is refused
])
def test_unquoted_annotation_is_refused_as_the_api_server_refuses_it(capsys, tmp_path, written,
                                                                     kind, shown):
    # review 23c #17: metadata.annotations is map[string]string; kubectl apply fails with
    # "cannot unmarshal number into Go struct field ObjectMeta.metadata.annotations"
    f = tmp_path / "d.yaml"
    f.write_text((FIX / "deployment-llama-chat.yaml").read_text().replace(
        'kvplan.io/rate: "40"', written))
    code, out, err = run(capsys, "check", f)
    key = written.split(":")[0]
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err == (f"kvplan: error: {f}:11: annotation {key}: {shown} is not a string, and the "
                   "Kubernetes API refuses the object (annotations are map[string]string: "
                   f"\"cannot unmarshal {kind} into Go struct field ObjectMeta.metadata."
                   f"annotations of type string\") (quote it: {key}: \"{shown}\")\n")


def test_not_a_list_command_is_bad_input(capsys, tmp_path):
    f = tmp_path / "pod.yaml"
    f.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n"
                 "    - name: c\n      image: vllm/vllm-openai\n"
                 "      command: vllm serve Qwen/Qwen3-8B\n")
    code, _, err = run(capsys, "check", f)
    assert code == 2 and f"{f}:8: command must be a list of strings" in err


def test_no_files_and_no_cmd(capsys):
    code, _, err = run(capsys, "check")
    assert code == 2 and "nothing to check: give deployment files or --cmd" in err


# --- each check failing and passing ----------------------------------------------------------

def test_flag_values(capsys):
    code, rep = check_json(capsys, "--cmd", "vllm serve Qwen/Qwen3-8B --max-num-seqs lots "
                           "--max-model-len 32k --kv-cache-dtype bfloat16",
                           "--gpu", "h100", "--vllm-version", "0.10.2")
    f = by_id(rep["deployments"][0])["flag-values"]
    assert [(c["status"], c["current"]) for c in f] == [("fail", "lots"), ("fail", "bfloat16")]
    assert f[0]["fix"] == "give --max-num-seqs a plain integer"
    assert f[1]["fix"] == "use one of auto, fp8, fp8_e4m3, fp8_e5m2, fp8_inc"
    # 32k is a human-readable int from 0.8.4; before, --max-model-len takes a plain integer
    # (0.8.0-0.8.3 `type=int`, which the 0.8 record, 0.8.5's parser, does not show), and
    # --max-num-batched-tokens from 0.9.1 (units.HUMAN_READABLE_FROM)
    assert rep["deployments"][0]["max_model_len"] == 32000
    for version, flag, bad in (("0.6", "--max-model-len", "32k"),
                               ("0.8.3", "--max-model-len", "32k"),
                               ("0.9.0", "--max-num-batched-tokens", "8k")):
        code, rep = check_json(capsys, "--cmd", "vllm serve meta-llama/Llama-3.1-8B-Instruct "
                               f"{flag} {bad}", "--gpu", "h100", "--vllm-version", version)
        f = one(rep["deployments"][0], "flag-values")
        assert f["status"] == "fail" and f"'{bad}' is not an integer" in f["message"]
    code, rep = check_json(capsys, "--cmd", "vllm serve meta-llama/Llama-3.1-8B-Instruct "
                           "--max-model-len 32k", "--gpu", "h100", "--vllm-version", "0.8.4")
    assert one(rep["deployments"][0], "flag-values")["status"] == "pass"
    code, rep = check_json(capsys, "--cmd", "vllm serve Qwen/Qwen3-8B --max-model-len 32K",
                           "--gpu", "h100")
    assert one(rep["deployments"][0], "flag-values")["status"] == "pass"
    assert rep["deployments"][0]["max_model_len"] == 32768
    # 0.9+ take any --quantization string at parse time and refuse an unknown name in
    # `_verify_quantization`; a 16-bit checkpoint takes only the online methods
    code, rep = check_json(capsys, "--cmd", "vllm serve Qwen/Qwen3-8B -q bitsandbytes",
                           "--gpu", "l40s")
    f = one(rep["deployments"][0], "flag-values")
    assert f["status"] == "fail" and "Unknown quantization method: bitsandbytes" in f["message"]
    code, rep = check_json(capsys, "--cmd", "vllm serve Qwen/Qwen3-8B -q awq", "--gpu", "l40s")
    f = one(rep["deployments"][0], "flag-values")
    assert f["status"] == "fail" and "'Cannot find the config file for awq'" in f["message"]


def test_sizing_inputs(capsys):
    code, rep = check_json(capsys, "--cmd", "vllm serve /models/llama", "--gpu", "l4")
    f = one(rep["deployments"][0], "sizing-inputs")
    assert f["status"] == "fail" and "'/models/llama' is a path inside the container" in \
        f["message"]
    code, rep = check_json(capsys, "--cmd", "vllm serve Qwen/Qwen3-8B")
    f = one(rep["deployments"][0], "sizing-inputs")
    assert f["status"] == "fail" and f["message"] == "cannot size: no GPU type"
    assert code == 1
    # a quantized KV cache dtype (0.20+) is sized: NVFP4 on a B200 (SM100)
    code, rep = check_json(capsys, "--cmd", "vllm serve Qwen/Qwen3-8B --kv-cache-dtype nvfp4",
                           "--gpu", "b200")
    dep = rep["deployments"][0]
    assert one(dep, "sizing-inputs")["status"] == "pass"
    assert one(dep, "flag-values")["status"] == "pass"
    # ... and refused where vLLM has no backend for it (NVFP4 off SM100 before 0.32)
    code, rep = check_json(capsys, "--cmd", "vllm serve Qwen/Qwen3-8B --kv-cache-dtype nvfp4",
                           "--gpu", "h100", "--vllm-version", "0.31")
    f = one(rep["deployments"][0], "flag-values")
    assert f["status"] == "fail" and "no attention backend for --kv-cache-dtype nvfp4" in \
        f["message"]
    # the annotation names the model the path holds
    code, rep = check_json(capsys, FIX / "deployment-model-path.yaml")
    dep = rep["deployments"][0]
    assert one(dep, "sizing-inputs")["status"] == "pass"
    assert dep["model"] == "google/gemma-2-9b-it" and dep["gpu"] == "a10g"
    r = one(dep, "replicas-cover-rate")
    assert r["status"] == "skip" and r["message"].startswith("ignored (kvplan.io/ignore)")


def test_weights_fit(capsys, tmp_path):
    src = FIX / "deployment-70b-one-gpu.yaml"
    code, rep = check_json(capsys, src)
    dep = rep["deployments"][0]
    w = one(dep, "weights-fit")
    # 70.6 B params x 2 bytes + the 32 MiB rotary cache, GiB
    assert w["status"] == "fail" and w["current"] == 131.45
    assert w["fix"].startswith("--tensor-parallel-size 4 on 4 GPUs")
    assert one(dep, "max-model-len-fits")["status"] == "skip"
    # the fix agrees with `kvplan size`: TP 2 still does not fit, TP 4 does
    for tp, want in (("2", 1), ("4", 0)):
        c, _, _ = run(capsys, "size", "meta-llama/Llama-3.1-70B-Instruct", "--gpu", "h100",
                      "-tp", tp, "--max-model-len", "32768", "--json")
        assert c == want
    f = src.read_text().replace("- --max-model-len=32768",
                                "- --max-model-len=32768\n            - -tp=4").replace(
        "nvidia.com/gpu: 1", "nvidia.com/gpu: 4")
    p = tmp_path / "tp4.yaml"
    p.write_text(f)
    code, rep = check_json(capsys, p)
    assert code == 0 and one(rep["deployments"][0], "weights-fit")["status"] == "pass"


def test_max_model_len_fits_and_the_largest_that_fits(capsys, tmp_path):
    src = FIX / "deployment-l4-long-context.yaml"
    code, rep = check_json(capsys, src)
    dep = rep["deployments"][0]
    m = one(dep, "max-model-len-fits")
    _, out, _ = run(capsys, "size", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "l4",
                    "--max-model-len", "131072", "--max-num-seqs", "8",
                    "--gpu-memory-utilization", "0.9", "--json")
    largest = json.loads(out)["largest_max_model_len"]
    assert m["status"] == "fail" and m["current"] == 131072  # 128K = 131,072 as vLLM reads it
    assert m["suggested"] == largest and m["fix"] == f"--max-model-len {largest}"
    assert m["line"] == line_of(src, "--max-model-len=128K")
    # the other checks are planned at the length that fits
    assert "(with --max-model-len" in one(dep, "max-num-seqs-safe")["message"]
    f = tmp_path / "fixed.yaml"
    f.write_text(src.read_text().replace("128K", str(largest)))
    _, rep = check_json(capsys, f)
    assert one(rep["deployments"][0], "max-model-len-fits")["status"] == "pass"


def test_max_model_len_above_the_models_maximum(capsys, tmp_path):
    # Qwen2.5-7B allows 32,768; VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 lets 64k through
    src = FIX / "deployment-shell-script.yaml"
    code, rep = check_json(capsys, src)
    assert code == 0
    dep = rep["deployments"][0]
    assert dep["max_model_len"] == 64000 and dep["vllm_version"] == "0.10.2"
    f = tmp_path / "no-env.yaml"
    f.write_text(src.read_text().replace("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "VLLM_LOGGING_LEVEL"))
    code, rep = check_json(capsys, f)
    m = one(rep["deployments"][0], "max-model-len-fits")
    assert code == 1 and m["status"] == "fail" and m["suggested"] == 32768
    assert m["fix"] == ("--max-model-len 32768 (or set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 if the "
                        "model really handles more)")
    assert m["line"] == line_of(f, "--max-model-len 64k")


def test_max_num_seqs_needs_a_declared_workload(capsys):
    code, rep = check_json(capsys, "--cmd", "vllm serve Qwen/Qwen3-8B --max-num-seqs 1024",
                           "--gpu", "h100")
    s = one(rep["deployments"][0], "max-num-seqs-safe")
    assert code == 0 and s["status"] == "skip" and "no workload declared" in s["message"]
    code, rep = check_json(capsys, "--cmd", "vllm serve Qwen/Qwen3-8B --max-num-seqs 1024",
                           "--gpu", "h100", "--workload", "reasoning")
    s = one(rep["deployments"][0], "max-num-seqs-safe")
    rec = recommend(capsys, "Qwen/Qwen3-8B", "--gpu", "h100", "--workload", "reasoning")
    assert code == 1 and s["status"] == "fail" and s["suggested"] == rec["max_num_seqs"]


def test_vllm_default_max_num_seqs_is_checked(capsys):
    src = FIX / "lws-405b.yaml"
    code, rep = check_json(capsys, src)
    dep = rep["deployments"][0]
    s = one(dep, "max-num-seqs-safe")
    assert s["status"] == "fail" and s["current"] == 1024  # vLLM's default on an H100
    assert s["message"].startswith("the default max-num-seqs 1024 exceeds the safe")
    assert s["line"] == line_of(src, "python3 -m vllm.entrypoints")


def test_replicas_cover_rate_with_an_autoscaler(capsys, tmp_path):
    src = FIX / "deployment-hpa.yaml"
    code, rep = check_json(capsys, src)
    dep = rep["deployments"][0]
    assert dep["replicas"] == 1 and dep["max_replicas"] == 2
    r = one(dep, "replicas-cover-rate")
    assert r["status"] == "fail" and r["current"] == 2 and r["suggested"] == 3
    assert r["fix"] == "maxReplicas: 3" and r["line"] == line_of(src, "maxReplicas: 2")
    f = tmp_path / "hpa.yaml"
    f.write_text(src.read_text().replace("maxReplicas: 2", "maxReplicas: 4"))
    code, rep = check_json(capsys, f)
    r = one(rep["deployments"][0], "replicas-cover-rate")
    assert code == 0 and r["status"] == "pass"
    assert "the autoscaler must reach 3" in r["message"]


def test_prefix_hit_counts_only_with_prefix_caching_on(capsys, tmp_path):
    # review 23c #2: with --no-enable-prefix-caching, or a V0 release that has it off by
    # default, no prompt token is served from the cache: the prefix-hit share is 0
    src = FIX / "deployment-rag-prefix.yaml"
    note = "kvplan.io/prefix-hit 0.8 is not counted: prefix caching is off ("

    def seqs_reps(path):
        code, rep = check_json(capsys, path)
        dep = rep["deployments"][0]
        return code, dep, one(dep, "max-num-seqs-safe"), one(dep, "replicas-cover-rate")

    code, dep, s, r = seqs_reps(src)  # the same as a declared prefix-hit of 0
    assert code == 1 and dep["prefix_caching"] is False
    assert s["status"] == "fail" and s["suggested"] == 51 and s["fix"] == "--max-num-seqs 51"
    assert s["message"].endswith(note + "--no-enable-prefix-caching turns it off)")
    assert r["status"] == "fail" and r["suggested"] == 6 and r["message"].endswith(
        "; the declared prefix-hit is not counted: prefix caching is off")
    f = tmp_path / "on.yaml"
    f.write_text(src.read_text().replace("            - --no-enable-prefix-caching\n", ""))
    code, dep, s, r = seqs_reps(f)  # V1's default: the hits free blocks
    assert dep["prefix_caching"] is True and s["status"] == "pass" and "214" in s["message"]
    assert "not counted" not in s["message"] and r["suggested"] == 4
    f.write_text(src.read_text().replace('"0.8"', '"0"'))
    assert seqs_reps(f)[2]["suggested"] == 51
    old = src.read_text().replace("            - --no-enable-prefix-caching\n", "").replace(
        "v0.20.2", "v0.6.3")
    f.write_text(old)  # 0.6.3: EngineArgs.enable_prefix_caching = False
    code, dep, s, r = seqs_reps(f)
    assert dep["prefix_caching"] is False and s["suggested"] == 41 and r["suggested"] == 6
    assert s["message"].endswith(note + "vLLM 0.6.3 (V0) runs without it unless "
                                 "--enable-prefix-caching is given)")
    f.write_text(old.replace('"0.8"', '"0"'))
    assert seqs_reps(f)[2]["suggested"] == 41
    f.write_text(old.replace("- --max-num-seqs", "- --enable-prefix-caching\n            "
                             "- --max-num-seqs"))
    code, dep, s, r = seqs_reps(f)  # asked for: counted
    assert dep["prefix_caching"] is True and s["status"] == "pass" and r["suggested"] == 4


def test_prefix_caching_as_each_release_decides():
    from kvplan.core.prefixcache import prefix_caching
    from kvplan.core.sizing import EngineArgs, Model, size
    from kvplan.sources.resolve import resolve_gpu
    from tests.configs import LLAMA31_8B, NEMOTRON_H_8B

    l40s, t4 = resolve_gpu("l40s"), resolve_gpu("t4")

    def on(version, gpu=l40s, cfg=LLAMA31_8B, **kw):
        return prefix_caching(size(Model("m", cfg), gpu,
                                   EngineArgs(**{"max_model_len": 8192, **kw}), version))

    assert on("0.6.3") == (False, "vLLM 0.6.3 (V0) runs without it unless "
                                  "--enable-prefix-caching is given")
    assert on("0.6.3", enable_prefix_caching=True) == (True, "")
    assert on("0.7.3", use_v1=True)[0] and not on("0.7.3")[0]  # bool(envs.VLLM_USE_V1)
    assert on("0.8.5") == (True, "") and on("0.20.2") == (True, "")
    assert on("0.9.2", gpu=t4, dtype="float16") == (  # sm75: V1 falls back to V0
        False, "vLLM 0.9.2 runs this start on its V0 engine, where it is off unless "
               "--enable-prefix-caching is given")
    assert on("0.33", enable_prefix_caching=False)[0] is False
    assert on("0.20.2", cfg=NEMOTRON_H_8B) == (  # hybrids: opt-in before 0.28
        False, "vLLM 0.20.2 keeps it off by default for hybrid (Mamba / linear-attention) "
                "models (on from 0.28)")
    assert on("0.20.2", cfg=NEMOTRON_H_8B, enable_prefix_caching=True) == (True, "")
    assert on("0.28.0", cfg=NEMOTRON_H_8B) == (True, "")
    # 0.11.1-0.11.2 on an explicit flag; 0.11.0 off whatever the flags say
    assert on("0.11.1", cfg=NEMOTRON_H_8B, enable_prefix_caching=True) == (True, "")
    assert on("0.11.0", cfg=NEMOTRON_H_8B, enable_prefix_caching=True) == (
        False, "vLLM 0.11.0 turns it off for this hybrid model")
    # an attention-free Mamba model's one block of max_model_len (0.11.1-0.14)
    from tests.configs import MAMBA2_7B
    assert on("0.12.0", cfg=MAMBA2_7B, enable_prefix_caching=True, max_model_len=2048) == (
        False, "vLLM 0.12.0 gives this attention-free model one Mamba block of "
               "max_model_len tokens, so no prefix is reused")


def test_a_time_sliced_gpu_warns_that_a_second_pod_fails_vllms_start_up_check(capsys,
                                                                             tmp_path):
    # review 23c #9: GFD's -SHARED label; the resolver's note reaches check's output
    src = (FIX / "deployment-llama-chat.yaml").read_text()
    f = tmp_path / "shared.yaml"

    def shared(text):
        f.write_text(text)
        code, rep = check_json(capsys, f)
        return [c for c in rep["deployments"][0]["checks"] if c["id"] == "gpu-not-shared"]

    assert shared(src) == []  # a dedicated GPU: nothing to say
    label = "NVIDIA-H100-80GB-HBM3-SHARED"
    sliced = src.replace("NVIDIA-H100-80GB-HBM3", label)
    (w,) = shared(sliced)
    assert w["status"] == "warn" and w["line"] == line_of(f, label) and w["current"] == 0.92
    assert w["message"] == (
        f"{label} is a time-sliced GPU (GPU feature discovery's -SHARED label): the pods "
        "scheduled on it share its 79.2 GiB, and these checks size one engine with all of "
        "it; at --gpu-memory-utilization 0.92 a second vLLM pod on the same GPU fails vLLM's "
        "start-up check, which wants that share free (\"Free memory on device ... on startup "
        "is less than desired GPU memory utilization\", v1/worker/utils.py); at 0.47 "
        "max-num-seqs-safe and replicas-cover-rate would fail")
    # the share is checked against the others (review 23c #10): a smaller pool, more pods
    assert w["fix"] == ("schedule it on a dedicated GPU (the product label without -SHARED), "
                        "or give each pod that shares the GPU its share of it "
                        "(--gpu-memory-utilization 0.47 for two, with --max-num-seqs 93, "
                        "spec.replicas: 4)")
    code, out, _ = run(capsys, "check", f, "--format", "github")
    assert f"::warning file={f},line={w['line']}" in out and "gpu-not-shared" in out
    halved = sliced.replace('- "8000"', '- "8000"\n            - --gpu-memory-utilization=0.47')
    (p,) = shared(halved)
    assert p["status"] == "pass" and p["message"] == (
        f"{label} is time-sliced: each vLLM pod on it takes --gpu-memory-utilization 0.47 of "
        "its memory, so 2 fit")
    code, rep = check_json(capsys, f)  # the fix applied: its other changes are the others'
    fixes = {c["id"]: c["fix"] for c in rep["deployments"][0]["checks"] if c["fix"]}
    assert fixes == {"max-num-seqs-safe": "--max-num-seqs 93",
                     "replicas-cover-rate": "spec.replicas: 4"}
    r = one(rep["deployments"][0], "gpu-memory-utilization-range")  # not idle: shared
    assert r["status"] == "pass" and r["message"] == ("--gpu-memory-utilization 0.47 on a "
                                                      "time-sliced GPU: the rest is left to "
                                                      "the pods that share it")
    (old,) = shared(sliced.replace("vllm-openai:latest", "vllm-openai:v0.8.5"))
    assert (  # no start-up check of the free memory before 0.9.1
        "; at --gpu-memory-utilization 0.9 a second vLLM pod on the same GPU finds the first "
        "one's memory taken and runs out of memory loading the model or its KV cache (vLLM "
        "0.8.5 does not check the free memory at start-up); ") in old["message"]


def test_replicas_from_a_keda_scaled_object(capsys, tmp_path):
    # review 23c #8: KEDA owns the replicas of its target; replicas: 0 is scale-from-zero
    src = FIX / "deployment-keda.yaml"
    code, rep = check_json(capsys, src)
    dep = rep["deployments"][0]
    assert code == 0 and dep["replicas"] == 0 and dep["max_replicas"] == 4
    r = one(dep, "replicas-cover-rate")
    assert r["status"] == "pass" and r["line"] == line_of(src, "maxReplicaCount: 4")
    assert r["message"] == ("4 replicas cover 20 req/s; 2 needed (autoscaled 0-4: the "
                            "autoscaler must reach 2)")
    f = tmp_path / "keda.yaml"
    f.write_text(src.read_text().replace("maxReplicaCount: 4", "maxReplicaCount: 1"))
    code, rep = check_json(capsys, f)
    r = one(rep["deployments"][0], "replicas-cover-rate")
    assert code == 1 and r["status"] == "fail" and r["current"] == 1 and r["suggested"] == 2
    assert r["fix"] == "maxReplicaCount: 2 (ScaledObject/llama-chat)"
    assert r["line"] == line_of(f, "maxReplicaCount: 1")
    f.write_text(src.read_text().replace("  maxReplicaCount: 4\n", ""))  # KEDA's default 100
    code, rep = check_json(capsys, f)
    assert code == 0 and rep["deployments"][0]["max_replicas"] == 100
    f.write_text(src.read_text().split("---")[0])  # without KEDA, 0 replicas serve nothing
    code, rep = check_json(capsys, f)
    r = one(rep["deployments"][0], "replicas-cover-rate")
    assert code == 1 and r["fix"] == "spec.replicas: 2" and r["current"] == 0


def test_a_utilization_fix_is_checked_against_the_other_checks(capsys):
    # review 23c #10: 0.98 -> 0.92 on an L4 leaves 33,376 tokens, too few for 40000
    def rng(mml, gmu, *extra):
        code, rep = check_json(capsys, "--cmd", f"vllm serve meta-llama/Llama-3.1-8B-Instruct "
                               f"--max-model-len {mml} --gpu-memory-utilization {gmu}",
                               "--gpu", "l4", "--vllm-version", "0.20.2", *extra)
        return code, one(rep["deployments"][0], "gpu-memory-utilization-range")

    oom = ("--gpu-memory-utilization 0.98 leaves under 5 % of the GPU for the CUDA context, "
           "NCCL buffers and fragmentation outside the engine's accounting: OOM risk")
    code, f = rng(40000, 0.98)  # not at 0.92-0.95: the largest pool, and the length it holds
    assert f["status"] == "warn" and f["suggested"] == 0.95
    assert f["fix"] == "--gpu-memory-utilization 0.95 --max-model-len 38784"
    assert f["message"] == oom + ("; at 0.95 (the most this check allows; 0.92 leaves less) "
                                  "max-model-len-fits would fail, so the fix also sets "
                                  "--max-model-len 38784")
    code, f = rng(38784, 0.95)  # the fix applied: every check passes
    assert code == 0 and f["status"] == "pass"
    code, f = rng(36000, 0.98)  # 0.94 keeps the length: no other change
    assert f["fix"] == "--gpu-memory-utilization 0.94" and f["suggested"] == 0.94
    assert f["message"] == oom + ("; at 0.92 max-model-len-fits would fail, 0.94 is the "
                                  "smallest value that keeps every other check as it is")
    assert rng(36000, 0.94)[0] == 0
    code, f = rng(30000, 0.98)  # 0.92 breaks nothing: the usual fix
    assert f["fix"] == "--gpu-memory-utilization 0.92" and f["message"] == oom
    code, f = rng(60000, 0.99, "--workload", "chat", "--rate", "3")  # the load checks too
    assert f["fix"] == ("--gpu-memory-utilization 0.95 --max-model-len 38784 "
                        "--max-num-seqs 19")
    assert "max-model-len-fits and max-num-seqs-safe would fail" in f["message"]


def test_gpu_memory_utilization_range(capsys):
    base = "vllm serve Qwen/Qwen2.5-0.5B --max-model-len 8192"
    cases = [("0.99", "warn", 0), ("1.5", "fail", 1), ("0.3", "warn", 0), ("0.9", "pass", 0)]
    for v, status, want in cases:
        code, rep = check_json(capsys, "--cmd", f"{base} --gpu-memory-utilization {v}",
                               "--gpu", "l4")
        f = one(rep["deployments"][0], "gpu-memory-utilization-range")
        assert (f["status"], code) == (status, want), v
    code, _, _ = run(capsys, "check", "--cmd", f"{base} --gpu-memory-utilization 0.99",
                     "--gpu", "l4", "--strict")
    assert code == 1


def test_tensor_parallel_valid_and_gpu_count(capsys):
    src = FIX / "deployment-tp3.yaml"
    code, rep = check_json(capsys, src)
    dep = rep["deployments"][0]
    assert dep["gpu"] == "l4"  # GKE accelerator label
    tp = one(dep, "tensor-parallel-valid")
    assert tp["status"] == "fail" and tp["current"] == 3 and tp["suggested"] == 2
    assert tp["fix"] == "--tensor-parallel-size 2 (valid: 1, 2, 4, 8, 16)"
    assert tp["line"] == line_of(src, '"--tensor-parallel-size", "3"')
    g = one(dep, "gpu-count-matches")
    assert g["status"] == "warn" and g["current"] == 4 and g["suggested"] == 3
    code, rep = check_json(capsys, FIX / "deployment-no-gpu-limit.yaml")
    g = one(rep["deployments"][0], "gpu-count-matches")
    assert code == 1 and g["status"] == "fail"
    assert g["fix"] == "resources.limits: nvidia.com/gpu: 1"
    code, rep = check_json(capsys, FIX / "lws-405b.yaml")
    dep = rep["deployments"][0]
    assert dep["gpus"] == 16 and dep["gpus_needed"] == 16  # 2 pods x 8, TP 8 x PP 2
    assert one(dep, "gpu-count-matches")["status"] == "pass"
    assert one(dep, "tensor-parallel-valid")["status"] == "pass"


def test_kv_cache_memory_bytes_beyond_the_gpu(capsys):
    # vLLM allocates --kv-cache-memory-bytes as given: 78 GiB beside Qwen3-4B's 7.5 GiB of
    # weights and its profile on an 79.19 GiB H100 runs out of memory at start-up
    cmd = "vllm serve Qwen/Qwen3-4B --kv-cache-memory-bytes {}"
    code, rep = check_json(capsys, "--cmd", cmd.format("78G"), "--gpu", "h100")
    f = one(rep["deployments"][0], "weights-fit")
    code2, out, _ = run(capsys, "size", "qwen3-4b", "--gpu", "h100", "--json")
    kv_max = json.loads(out)["kv_cache_memory_bytes_max"]
    assert code == 1 and f["status"] == "fail" and f["suggested"] == kv_max
    assert f["fix"].startswith(f"--kv-cache-memory-bytes {kv_max} or less")
    assert 67 * 2**30 < kv_max < 68 * 2**30
    code, rep = check_json(capsys, "--cmd", cmd.format(kv_max), "--gpu", "h100")
    assert code == 0 and one(rep["deployments"][0], "weights-fit")["status"] == "pass"
    # a low utilization does not shrink a given KV cache (no "unused" warning), and the 15 GiB
    # of Llama-3.1-8B start beside 10 GiB of it though 0.1 x 79.19 GiB is less
    code, rep = check_json(capsys, "--cmd", "vllm serve meta-llama/Llama-3.1-8B-Instruct "
                           "--gpu-memory-utilization 0.1 --kv-cache-memory-bytes 10G "
                           "--max-model-len 32768", "--gpu", "h100")
    dep = rep["deployments"][0]
    assert code == 0 and one(dep, "gpu-memory-utilization-range")["status"] == "pass"
    assert one(dep, "weights-fit")["status"] == "pass"


def test_lora_slots_are_sized(capsys):
    # stannum13/adapter-cache-tradeoffs, vLLM 0.23 on an L4 (its launcher's rank 64, one slot
    # per adapter): 5 adapters started, 10 failed with "No available memory for cache blocks".
    # Each rank-64 slot of Qwen2.5-7B is 64 x 4.8125 MiB = 308 MiB; graphs are captured twice
    cmd = ("vllm serve Qwen/Qwen2.5-7B-Instruct --enable-lora --max-loras {} --max-lora-rank 64 "
           "--gpu-memory-utilization 0.85 --max-model-len 4096")
    code, rep = check_json(capsys, "--cmd", cmd.format(5), "--gpu", "l4", "--vllm-version", "0.23")
    assert code == 0 and one(rep["deployments"][0], "max-model-len-fits")["status"] == "pass"
    code, rep = check_json(capsys, "--cmd", cmd.format(10), "--gpu", "l4",
                           "--vllm-version", "0.23")
    f = one(rep["deployments"][0], "weights-fit")
    assert code == 1 and f["status"] == "fail" and "--max-loras 8" in f["fix"]
    for cmd in ("python -m sglang.launch_server --model-path Qwen/Qwen3-8B --lora-paths a=b/c",
                "python -m sglang.launch_server --model-path Qwen/Qwen3-8B --enable-lora",
                "text-generation-launcher --model-id Qwen/Qwen3-8B --lora-adapters a/b"):
        code, rep = check_json(capsys, "--cmd", cmd, "--gpu", "h100")
        f = one(rep["deployments"][0], "sizing-inputs")
        assert code == 1 and f["status"] == "fail" and "LoRA memory pool" in f["message"], cmd


def test_speculative_config_is_sized(capsys):
    # MTP on a GDN hybrid: its layer joins the KV cache and its weights the load, so the
    # deployment holds fewer tokens, and sizing-inputs does not warn
    base = ("vllm serve nvidia/Qwen3.6-27B-NVFP4 --max-model-len 65536 --kv-cache-dtype fp8 "
            "--max-num-seqs 16")
    code, rep = check_json(capsys, "--cmd", base, "--gpu", "b200")
    plain = rep["deployments"][0]
    code, rep = check_json(capsys, "--cmd", base + " --speculative-config "
                           "'{\"method\": \"mtp\", \"num_speculative_tokens\": 2}'",
                           "--gpu", "b200")
    mtp = rep["deployments"][0]
    assert code == 0 and one(mtp, "sizing-inputs")["status"] == "pass"
    assert mtp["kv_cache_tokens"] < plain["kv_cache_tokens"]
    # a draft kvplan cannot resolve still warns, with the reason
    code, rep = check_json(capsys, "--cmd", base + " --speculative-config "
                           "'{\"method\": \"medusa\", \"num_speculative_tokens\": 2}'",
                           "--gpu", "b200")
    f = one(rep["deployments"][0], "sizing-inputs")
    assert f["status"] == "warn" and "medusa" in f["message"]
    # SGLang's and TGI's speculation is not sized: a warning, not silence
    for cmd in ("python -m sglang.launch_server --model-path Qwen/Qwen3-8B "
                "--speculative-algorithm EAGLE3 --speculative-draft-model-path x/y",
                "text-generation-launcher --model-id Qwen/Qwen3-8B --speculate 3"):
        code, rep = check_json(capsys, "--cmd", cmd, "--gpu", "h100")
        f = one(rep["deployments"][0], "sizing-inputs")
        assert f["status"] == "warn" and "speculative decoding" in f["message"], cmd


def test_speculative_decoding_and_connectors_warn(capsys):
    # sized, but a draft model's weights and KV layers (or a connector's buffers) come out of
    # the KV cache: a warning says the pool is smaller than found
    for flag in ("--speculative-config '{\"method\": \"eagle3\", \"model\": \"x/y\", "
                 "\"num_speculative_tokens\": 3}'",
                 "--kv-transfer-config '{\"kv_connector\": \"LMCacheConnectorV1\", "
                 "\"kv_role\": \"kv_both\"}'"):
        code, rep = check_json(capsys, "--cmd", "vllm serve meta-llama/Llama-3.1-8B-Instruct "
                               f"--max-model-len 16384 {flag}", "--gpu", "h100")
        dep = rep["deployments"][0]
        f = one(dep, "sizing-inputs")
        assert code == 0 and f["status"] == "warn" and "come out of the KV cache" in f["message"]
        assert one(dep, "max-model-len-fits")["status"] == "pass"
    # all-to-all backends under DP + expert parallelism, by flag or by 0.9-0.15's environment
    # variable: DeepEP's buffers are sized (its activations are the all-gather path's), other
    # backends' are not; without DP there is no all-to-all
    base = ("vllm serve Qwen/Qwen3-30B-A3B --max-model-len 16384 --enable-expert-parallel "
            "-dp 2")
    for cmd, version in ((f"{base} --all2all-backend deepep_low_latency", "0.33"),
                         (f"VLLM_ALL2ALL_BACKEND=deepep_high_throughput {base}", "0.14")):
        code, rep = check_json(capsys, "--cmd", cmd, "--gpu", "h100", "--vllm-version", version)
        f = one(rep["deployments"][0], "sizing-inputs")
        assert f["status"] == "warn" and "NVSHMEM's rounding" in f["message"]
        assert ("DeepEP's MoE activations" in f["message"]) == ("high_throughput" in cmd)
    code, rep = check_json(capsys, "--cmd", f"{base} --all2all-backend nixl_ep", "--gpu", "h100")
    f = one(rep["deployments"][0], "sizing-inputs")
    assert f["status"] == "warn" and "the nixl_ep all-to-all buffers" in f["message"]
    for cmd in (base, base.replace(" -dp 2", " --all2all-backend deepep_low_latency")):
        code, rep = check_json(capsys, "--cmd", cmd, "--gpu", "h100")
        assert one(rep["deployments"][0], "sizing-inputs")["status"] == "pass"
    # 0.33's speculative shorthand and the other flags sized without
    for extra, says in (("--spec-method eagle3 --spec-model x/y --spec-tokens 3",
                         "speculative draft model"),
                        ("--disable-sliding-window", "--disable-sliding-window"),
                        ("--prefill-context-parallel-size 2", "the KV cache differs"),
                        ("--attention-backend FLASH_ATTN_MLA_SPARSE_FA4",
                         "attention backend FLASH_ATTN_MLA_SPARSE_FA4")):
        code, rep = check_json(capsys, "--cmd", f"{base} {extra}", "--gpu", "h100")
        f = one(rep["deployments"][0], "sizing-inputs")
        assert f["status"] == "warn" and says in f["message"], extra
    # a backend kvplan models is sized with it (core/attnbackend.py)
    code, rep = check_json(capsys, "--cmd", f"{base} --attention-backend FLASHINFER",
                           "--gpu", "h100")
    assert one(rep["deployments"][0], "sizing-inputs")["status"] == "pass"


def test_eplb_is_sized(capsys):
    # --enable-eplb with --eplb-config: the redundant experts and the rebalancing state are
    # in the budget, so nothing is left unsized
    cmd = ("vllm serve Qwen/Qwen3-30B-A3B --max-model-len 16384 --enable-expert-parallel "
           "-dp 2 --enable-eplb --eplb-config '{\"num_redundant_experts\": 16}'")
    code, rep = check_json(capsys, "--cmd", cmd, "--gpu", "h100")
    assert code == 0
    assert one(rep["deployments"][0], "sizing-inputs")["status"] == "pass"


def test_hf_overrides_yarn_recipe(capsys):
    # Qwen3's YaRN recipe: before 0.30 vLLM scales original_max_position_embeddings by the
    # factor (32,768 x 4); 0.30+ take YaRN's max_position_embeddings (40,960) as scaled
    cmd = ("vllm serve Qwen/Qwen3-8B --hf-overrides '{\"rope_scaling\": {\"rope_type\": "
           "\"yarn\", \"factor\": 4.0, \"original_max_position_embeddings\": 32768}}' "
           "--max-model-len 131072")
    code, rep = check_json(capsys, "--cmd", cmd, "--gpu", "h100", "--vllm-version", "0.29")
    assert code == 0 and one(rep["deployments"][0], "max-model-len-fits")["status"] == "pass"
    code, rep = check_json(capsys, "--cmd", cmd, "--gpu", "h100", "--vllm-version", "0.33")
    f = one(rep["deployments"][0], "max-model-len-fits")
    assert code == 1 and f["suggested"] == 40960
    # 0.6-0.11 spelled it --rope-scaling
    code, rep = check_json(capsys, "--cmd", cmd.replace("--hf-overrides '{\"rope_scaling\": ",
                                                        "--rope-scaling '").replace("}}'", "}'"),
                           "--gpu", "h100", "--vllm-version", "0.9")
    assert code == 0 and one(rep["deployments"][0], "max-model-len-fits")["status"] == "pass"


def test_mamba_state_dtype_flags(capsys):
    # a float32 SSM state holds fewer tokens in the same pool; a dtype vLLM rejects fails
    def tokens(extra):
        code, rep = check_json(capsys, "--cmd", "vllm serve Qwen/Qwen3-Next-80B-A3B-Thinking "
                               f"-tp 4 --max-model-len 65536 {extra}", "--gpu", "h100")
        return code, rep["deployments"][0]

    _, base = tokens("")
    _, fp32 = tokens("--mamba-ssm-cache-dtype float32")
    assert fp32["kv_cache_tokens"] < base["kv_cache_tokens"]
    code, bad = tokens("--mamba-ssm-cache-dtype fp8")
    assert code == 1 and one(bad, "flag-values")["status"] == "fail"


def test_multi_node_data_parallel_counts_local_ranks(capsys, tmp_path):
    # --data-parallel-size 4 --data-parallel-size-local 2: this node runs 2 of the 4 ranks
    f = tmp_path / "dp.yaml"
    f.write_text("""apiVersion: apps/v1
kind: Deployment
metadata: {name: dp}
spec:
  selector: {matchLabels: {app: dp}}
  template:
    metadata: {labels: {app: dp}}
    spec:
      nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
      containers:
        - name: vllm
          image: vllm/vllm-openai:v0.33.0
          command: ["vllm", "serve", "Qwen/Qwen3-30B-A3B", "-dp", "4", "-dpl", "2",
                    "--enable-expert-parallel", "--max-model-len", "32768"]
          resources: {limits: {nvidia.com/gpu: 2}}
""")
    code, rep = check_json(capsys, f)
    g = one(rep["deployments"][0], "gpu-count-matches")
    assert g["status"] == "pass" and "TP x PP x local DP = 2" in g["message"]
    f.write_text(f.read_text().replace('"-dpl", "2",', ""))
    code, rep = check_json(capsys, f)
    assert one(rep["deployments"][0], "gpu-count-matches")["status"] == "fail"


def test_amd_gpu_operator_labels(capsys):
    # amd.com/gpu.product-name (nodeSelector) and beta.amd.com/gpu.product-name (affinity),
    # as the AMD GPU operator's labeller writes them; amd.com/gpu counts the GPUs
    code, rep = check_json(capsys, FIX / "deployment-rocm.yaml")
    bare, vf = rep["deployments"]
    assert code == 0 and (bare["gpu"], vf["gpu"]) == ("mi300x", "mi300x-vf")
    assert one(bare, "gpu-count-matches")["status"] == "pass"
    # the virtual function reports 0.29 GiB less: 0.92 x that less KV cache
    assert one(bare, "weights-fit")["message"].endswith("153.78 GiB left for the KV cache")
    assert one(vf, "weights-fit")["message"].endswith("153.51 GiB left for the KV cache")


def test_mig_slice_sized_with_its_memory(capsys, tmp_path):
    # GFD's mixed-strategy label names the slice, nvidia.com/mig-3g.20gb counts as the GPU,
    # kvplan.io/gpu-memory overrides the catalog's 19.50 GiB
    src = FIX / "deployment-mig.yaml"
    code, rep = check_json(capsys, src)
    dep = rep["deployments"][0]
    assert code == 0 and dep["gpu"] == "a100-sxm4-40gb-mig-3g.20gb (19.4GiB)"
    assert one(dep, "gpu-count-matches")["status"] == "pass"
    bare = tmp_path / "mig.yaml"
    bare.write_text(src.read_text().replace("    kvplan.io/gpu-memory: 19.4GiB\n", ""))
    code, rep = check_json(capsys, bare)
    assert code == 0 and rep["deployments"][0]["gpu"] == "a100-sxm4-40gb-mig-3g.20gb"
    # a profile without a catalog figure: one clear failure naming the way out
    b200 = tmp_path / "b200.yaml"
    b200.write_text(bare.read_text().replace("NVIDIA-A100-SXM4-40GB-MIG-3g.20gb",
                                             "NVIDIA-B200-MIG-3g.90gb"))
    code, rep = check_json(capsys, b200)
    f = one(rep["deployments"][0], "sizing-inputs")
    assert code == 1 and f["status"] == "fail" and "MIG slice (3g.90gb)" in f["message"]
    assert "kvplan.io/gpu-memory" in f["fix"]
    code, rep = check_json(capsys, b200, "--gpu-memory", "88GiB")
    assert code == 0 and rep["deployments"][0]["gpu"] == "b200-mig-3g.90gb (88GiB)"
    # a value that is not a size: bad input at the annotation's line, or the flag's
    bad = tmp_path / "bad.yaml"
    bad.write_text(src.read_text().replace("gpu-memory: 19.4GiB", "gpu-memory: lots"))
    code, _, err = run(capsys, "check", bad)
    assert code == 2 and f"{bad}:8: cannot read kvplan.io/gpu-memory 'lots'" in err
    for value in ("lots", "0", "-5GiB"):
        code, _, err = run(capsys, "check", bare, "--gpu-memory", value)
        assert code == 2 and "--gpu-memory" in err and "Traceback" not in err


# --- inputs ----------------------------------------------------------------------------------

def test_shell_script_with_k8s_variables(capsys):
    code, rep = check_json(capsys, FIX / "deployment-shell-script.yaml")
    dep = rep["deployments"][0]
    assert dep["name"] == "Deployment/qwen-long" and dep["model"] == "Qwen/Qwen2.5-7B-Instruct"
    assert dep["gpus"] == 2 and dep["gpus_needed"] == 2 and dep["replicas"] == 2
    assert dep["gpu"] == "l40s" and dep["workload"] == "rag" and dep["rate"] == 2


def test_api_server_form_with_underscores_and_two_gpu_types(capsys):
    src = FIX / "statefulset-api-server.yaml"
    code, rep = check_json(capsys, src)
    dep = rep["deployments"][0]
    assert code == 0 and dep["model"] == "mistralai/Mistral-7B-v0.3"
    assert dep["max_model_len"] == 32768 and dep["max_num_seqs"] == 64
    assert dep["vllm_version"] == "0.8.5"
    assert dep["gpu"] == "h100-sxm"  # of A100-80GB and H100 the one with less memory
    assert "checked on the smallest" in one(dep, "sizing-inputs")["message"]
    g = one(dep, "gpu-memory-utilization-range")
    assert g["current"] == 0.92 and g["line"] == line_of(src, "--gpu_memory_utilization=0.92")


def test_kserve_runtime_and_builtin_server(capsys):
    src = FIX / "kserve.yaml"
    code, rep = check_json(capsys, src)
    names = [d["name"] for d in rep["deployments"]]
    assert names == ["InferenceService/granite", "InferenceService/qwen-hf"]
    granite, qwen = rep["deployments"]
    assert granite["model"] == "ibm-granite/granite-3.1-8b-instruct"  # from storageUri hf://
    assert granite["vllm_version"] == "0.20" and granite["gpu"] == "a10g"
    # flags of the runtime are located in the runtime, those of the service in the service
    assert one(granite, "flags-known")["line"] == line_of(src, '"python", "-m"')
    assert one(granite, "max-num-seqs-safe")["line"] == line_of(src, "--max-num-seqs=512")
    assert one(granite, "replicas-cover-rate")["fix"].startswith("minReplicas: ")
    assert qwen["model"] == "Qwen/Qwen2.5-3B-Instruct" and qwen["gpu"] == "l4"
    assert one(qwen, "flags-known")["status"] == "pass"  # --model_name/--model_id are KServe's
    assert one(qwen, "gpu-memory-utilization-range")["status"] == "warn"


def test_serving_runtime_alone_is_a_template(capsys, tmp_path):
    text = (FIX / "kserve.yaml").read_text().split("---")[0]
    f = tmp_path / "runtime.yaml"
    f.write_text(text)
    code, rep = check_json(capsys, f)
    dep = rep["deployments"][0]
    assert code == 0 and dep["name"] == "ServingRuntime/vllm-runtime"
    assert one(dep, "sizing-inputs")["status"] == "skip"
    assert one(dep, "flags-known")["status"] == "pass"


def test_compose_services(capsys):
    code, rep = check_json(capsys, FIX / "compose.yaml")
    deps = {d["name"]: d for d in rep["deployments"]}
    assert list(deps) == ["service/vllm", "service/sglang", "service/tgi"]  # not redis
    vllm, sgl, tgi = deps.values()
    assert vllm["model"] == "Qwen/Qwen3-8B" and vllm["vllm_version"] == "0.14.1"
    assert vllm["gpu"] == "l40s" and vllm["gpus"] == 1
    assert sgl["engine"] == "sglang" and one(sgl, "flags-known")["status"] == "skip"
    m = one(sgl, "max-model-len-fits")
    assert m["status"] == "fail" and m["suggested"] == 40960
    assert m["fix"].startswith("--context-length 40960 (or set "
                               "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1")
    assert tgi["engine"] == "tgi" and tgi["model"] == "Qwen/Qwen2.5-7B-Instruct"
    assert tgi["max_model_len"] == 8192  # MAX_TOTAL_TOKENS from the environment
    g = one(tgi, "gpu-count-matches")
    assert g["status"] == "fail" and g["fix"] == \
        "deploy.resources.reservations.devices[].count: 2"


def test_sglang_pool_matches_recommend_engine_sglang(capsys):
    rec = recommend(capsys, "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100", "--engine",
                    "sglang", "--workload", "chat", "--rate", "20")
    cmd = rec["command"]
    code, rep = check_json(capsys, "--cmd", cmd, "--gpu", "h100", "--workload", "chat",
                           "--rate", "20")
    dep = rep["deployments"][0]
    assert dep["engine"] == "sglang"
    s = one(dep, "max-num-seqs-safe")
    assert s["current"] == rec["max_num_seqs"] and s["status"] == "pass"
    assert one(dep, "max-model-len-fits")["current"] == rec["max_model_len"]
    # one --cmd is one replica; the plan needs rec["replicas"]
    r = one(dep, "replicas-cover-rate")
    assert code == 1 and r["status"] == "fail" and r["suggested"] == rec["replicas"] == 2
    # SGLang's pool (0.95 x 79.19 - 7.50 GiB of tensors - 54 MiB of allocator blocks) is not
    # held to vLLM's --kv-cache-memory-bytes bound, which would leave room for vLLM's profile
    code, rep = check_json(capsys, "--cmd", "python -m sglang.launch_server --model-path "
                           "Qwen/Qwen3-4B --mem-fraction-static 0.95", "--gpu", "h100")
    w = one(rep["deployments"][0], "weights-fit")
    assert code == 0 and w["status"] == "pass" and "67.67 GiB left" in w["message"]


def test_plan_file(capsys):
    src = FIX / "plan.yaml"
    code, rep = check_json(capsys, src)
    chat, summ = rep["deployments"]
    assert chat["name"] == "plan/chat" and {c["status"] for c in chat["checks"]
                                            if c["id"] != "compile-cache-persisted"} == {"pass"}
    # a plan file says nothing of volumes
    assert one(chat, "compile-cache-persisted")["status"] == "skip"
    s = one(summ, "max-num-seqs-safe")
    assert code == 1 and s["status"] == "fail" and s["line"] == line_of(src, "command: vllm")
    assert one(summ, "replicas-cover-rate")["status"] == "skip"  # no rate declared


def test_plan_file_errors_name_the_line(capsys, tmp_path):
    f = tmp_path / "plan.yaml"
    f.write_text((FIX / "plan.yaml").read_text().replace("replicas: 3", "replicas: 0"))
    code, _, err = run(capsys, "check", f)
    assert code == 2 and f"{f}:9: deployments.0.replicas: Input should be greater than or " \
        "equal to 1 (see `kvplan schema`)" in err
    f.write_text((FIX / "plan.yaml").read_text().replace("preset: chat", "preset: chatty"))
    code, _, err = run(capsys, "check", f)
    assert code == 2 and "unknown workload 'chatty'; did you mean chat?" in err
    f.write_text((FIX / "plan.yaml").read_text().replace("replicas: 3",
                                                          "replicas: 3\n    gpu_memory: lots"))
    code, _, err = run(capsys, "check", f)
    assert code == 2 and f"{f}:10: deployments.0.gpu_memory: Value error, cannot read " \
        "gpu_memory 'lots'" in err


def test_schema(capsys):
    code, out, _ = run(capsys, "schema")
    s = json.loads(out)
    assert code == 0 and s["title"] == "kvplan plan file"
    assert s["required"] == ["kvplan", "deployments"]
    dep = s["$defs"]["DeploymentSpec"]
    assert {"name", "model", "command", "flags", "gpu", "replicas", "workload", "slo"} <= \
        set(dep["properties"])
    assert dep["additionalProperties"] is False


# --- output formats --------------------------------------------------------------------------

def test_json_contract(capsys):
    code, rep = check_json(capsys, FIX / "deployment-llama-chat.yaml")
    assert set(rep) == {"version", "exit_code", "strict", "summary", "files", "deployments",
                        "error"}
    assert rep["error"] is None
    assert rep["summary"] == {"deployments": 1, "failed": 2, "warnings": 0, "passed": 10,
                              "skipped": 0}
    dep = rep["deployments"][0]
    assert {"name", "kind", "file", "line", "status", "engine", "model", "gpu", "gpus",
            "replicas", "vllm_version", "workload", "rate", "checks"} <= set(dep)
    assert set(dep["checks"][0]) == {"id", "status", "message", "fix", "file", "line",
                                     "column", "current", "suggested"}
    assert [c["status"] for c in dep["checks"]][:2] == ["fail", "fail"]  # failures first


def test_junit(capsys):
    code, out, _ = run(capsys, "check", FIX / "deployment-llama-chat.yaml",
                       FIX / "pod-typos.yaml", "--format", "junit")
    assert code == 1
    root = ET.fromstring(out)
    assert root.tag == "testsuites" and root.get("failures") == "3"
    suites = {s.get("name"): s for s in root}
    chat = suites["Deployment/llama-8b-chat"]
    assert chat.get("tests") == "12" and chat.get("failures") == "2"
    case = next(c for c in chat if c.get("name") == "max-num-seqs-safe")
    assert case.find("failure") is not None and "fix: --max-num-seqs" in case.find("failure").text
    typos = suites["Pod/vllm-scratch"]
    assert typos.get("skipped") == "2"  # no workload declared


def test_human_output(capsys):
    code, out, _ = run(capsys, "check", FIX / "deployment-llama-chat.yaml")
    assert code == 1
    assert "Deployment/llama-8b-chat" in out and "FAIL max-num-seqs-safe" in out
    assert "fix: --max-num-seqs" in out and "fix: spec.replicas:" in out
    assert out.rstrip().endswith("2 failed, 0 warnings, 10 passed, 0 skipped in 1 deployment")


def test_list_cronjob_daemonset_json_and_tgi_env(capsys):
    code, rep = check_json(capsys, FIX / "list-cronjob-tgi.json", "--gpu", "l4")
    cron, tgi = rep["deployments"]
    assert cron["name"] == "CronJob/nightly-eval" and cron["gpu"] == "a100-sxm4-80gb"
    assert cron["vllm_version"] == "0.11.0" and cron["model"] == "Qwen/Qwen3-14B"
    assert one(cron, "flags-known")["status"] == "pass"  # -O3 is vLLM's shorthand
    assert tgi["name"] == "DaemonSet/tgi" and tgi["gpu"] == "l4"  # --gpu fills in
    assert tgi["model"] == "mistralai/Mistral-7B-v0.3"  # MODEL_ID
    m = one(tgi, "max-model-len-fits")
    assert m["status"] == "fail" and m["fix"] == "--max-total-tokens 32768"


def test_two_engines_in_one_container_is_ambiguous(capsys):
    code, _, err = run(capsys, "check", "--cmd", "vllm serve a & vllm serve b", "--gpu", "l4")
    assert code == 2 and "two engine commands in one container" in err


@pytest.mark.parametrize("name,facts,failed", [
    ("statefulset-qwen-32b.yaml",  # pod-template annotations, a folded `sh -c` script
     {"model": "Qwen/Qwen2.5-32B", "gpu": "a100-sxm4-80gb", "gpus": 2, "gpus_needed": 2,
      "vllm_version": "0.20.2", "workload": "rag", "rate": 1.5, "max_num_seqs": 128},
     {"max-num-seqs-safe", "replicas-cover-rate"}),
    ("lws-70b-l40s.yaml",  # worker template only: 2 pods x 4 GPUs = TP 4 x PP 2
     {"model": "meta-llama/Llama-3.1-70B-Instruct", "gpu": "l40s", "gpus": 8,
      "gpus_needed": 8, "replicas": 2, "max_model_len": 8192}, set()),
    ("compose-api-server.yaml",  # entrypoint override; CUDA_VISIBLE_DEVICES=0,1 of `count: all`
     {"model": "Qwen/Qwen2.5-14B", "gpu": "l4", "gpus": 2, "gpus_needed": 2,
      "vllm_version": "0.10.2", "max_model_len": 8000, "workload": "code"},
     {"max-num-seqs-safe", "replicas-cover-rate"}),
    ("kserve-custom-container.yaml",
     {"model": "microsoft/phi-4", "gpu": "h100-sxm", "replicas": 1, "max_replicas": 4,
      "max_model_len": 16384}, set()),
    ("pod-inline-env.yaml",  # VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 before `exec vllm serve`
     {"model": "Qwen/Qwen2.5-7B-Instruct", "gpu": "h200-sxm", "max_model_len": 65536}, set()),
])
def test_more_manifests(capsys, name, facts, failed):
    code, rep = check_json(capsys, FIX / name)
    (dep,) = rep["deployments"]
    assert {k: dep[k] for k in facts} == facts
    assert {c["id"] for c in dep["checks"] if c["status"] == "fail"} == failed
    assert code == (1 if failed else 0)


def test_plan_file_with_sglang_and_tgi(capsys):
    src = FIX / "plan-sglang-tgi.yaml"
    code, rep = check_json(capsys, src)
    sgl, tgi = rep["deployments"]
    assert code == 0 and sgl["engine"] == "sglang" and tgi["engine"] == "tgi"
    s = one(sgl, "max-num-seqs-safe")
    assert s["status"] == "pass" and s["current"] == 64
    assert s["line"] == line_of(src, "--max-running-requests 64")
    assert one(sgl, "replicas-cover-rate")["status"] == "pass"
    assert tgi["max_model_len"] == 16384
    g = one(tgi, "gpu-memory-utilization-range")
    assert g["status"] == "pass" and g["current"] == 0.95 and g["line"] == line_of(
        src, "cuda-memory-fraction")


# --- start-up scripts and Dockerfiles --------------------------------------------------------

def test_shell_script_with_its_own_variables(capsys):
    src = FIX / "start-vllm.sh"
    code, rep = check_json(capsys, src, "--gpu", "h100", "--workload", "chat", "--rate", "40")
    assert code == 1
    (dep,) = rep["deployments"]
    assert dep["model"] == "meta-llama/Llama-3.1-8B-Instruct" and dep["vllm_version"] == "0.33"
    rec = recommend(capsys, "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100",
                    "--workload", "chat", "--rate", "40", "--gpu-memory-utilization", "0.95")
    seqs = one(dep, "max-num-seqs-safe")
    assert seqs["current"] == 1024 and seqs["suggested"] == rec["max_num_seqs"]
    assert seqs["line"] == line_of(src, "--max-num-seqs")
    assert one(dep, "max-model-len-fits")["current"] == 131072  # ${MAX_LEN} expanded
    assert one(dep, "max-model-len-fits")["line"] == line_of(src, "--max-model-len")
    assert one(dep, "gpu-count-matches")["status"] == "skip"  # a script requests no GPUs


def test_dockerfile_final_stage_image_entrypoint_and_cmd(capsys):
    src = FIX / "Dockerfile.vllm"
    code, rep = check_json(capsys, src, "--gpu", "h100", "--workload", "chat", "--rate", "40")
    assert code == 1
    (dep,) = rep["deployments"]
    assert dep["vllm_version"] == "0.11.0"  # from the image tag of the final stage
    rec = recommend(capsys, "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100", "--workload",
                    "chat", "--rate", "40", "--vllm-version", "0.11.0")
    seqs = one(dep, "max-num-seqs-safe")
    assert seqs["current"] == 1024 and seqs["suggested"] == rec["max_num_seqs"]
    assert seqs["line"] == line_of(src, "CMD [")


def test_dockerfile_shell_form_entrypoint_sglang(capsys):
    code, rep = check_json(capsys, FIX / "Dockerfile.sglang", "--gpu", "h100")
    (dep,) = rep["deployments"]
    assert dep["model"] == "Qwen/Qwen3-8B" and dep["engine"] == "sglang"


def test_dockerfile_with_a_broken_exec_form_exits_2(capsys, tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text('FROM vllm/vllm-openai:v0.11.0\nCMD ["--model", "x",\n')
    code, out, err = run(capsys, "check", bad, "--gpu", "h100")
    assert code == 2 and "cannot read the exec-form list" in err and ":2:" in err


def test_limit_mm_per_prompt_zero_is_language_model_only(capsys):
    # all modality limits 0 = --language-model-only: no vision tower, no encoder profile
    # (Qwen2.5-VL-7B on an L4 at 0.33: the 128k-token video profile alone exhausts the KV)
    cmd = "vllm serve Qwen/Qwen2.5-VL-7B-Instruct"
    _, rep = check_json(capsys, "--cmd", cmd, "--gpu", "l4")
    assert rep["deployments"][0]["kv_cache_tokens"] == 0
    for flags in ("--limit-mm-per-prompt '{\"image\":0,\"video\":0}'", "--language-model-only",
                  "--limit-mm-per-prompt '{\"image\":{\"count\":0},\"video\":0}'"):
        _, rep = check_json(capsys, "--cmd", f"{cmd} {flags}", "--gpu", "l4")
        # (0.33's V2 penalty / grammar state: 256 x (152,064 + 2 x 4,752) x 4 B = 2,880
        # tokens of 57,344 B less than the 82,032 before it was counted; its FlashInfer
        # warm-up sampler, 3.5 logits-sized fp32 buffers instead of 3.9: 0.4 x 256 x 152,064
        # x 4 B = 62.3 MB, 1,088 tokens more; the allocator blocks the 3584-wide tensors hold,
        # 57 MiB, 1,056 fewer; the dummy run's hidden states held while the sampler runs,
        # 2,048 x 3,584 x 2 B = 14 MiB, 256 fewer; the MRoPE cache at 4 x 128,000 positions,
        # 125 MiB instead of 31.25, 1,728 fewer)
        assert rep["deployments"][0]["kv_cache_tokens"] == 77200, flags
    _, rep = check_json(capsys, "--cmd", f"{cmd} --limit-mm-per-prompt '{{\"image\":1}}'",
                        "--gpu", "l4")
    assert rep["deployments"][0]["kv_cache_tokens"] == 0


def test_decode_context_parallel_in_a_command(capsys):
    # -dcp 8 on TP8: the same KV memory per GPU holds 8x the tokens
    base = "vllm serve moonshotai/Kimi-K2-Thinking -tp 8 --max-model-len 131072"
    _, one = check_json(capsys, "--cmd", base, "--gpu", "h200")
    _, eight = check_json(capsys, "--cmd", f"{base} -dcp 8", "--gpu", "h200")
    t1, t8 = (r["deployments"][0]["kv_cache_tokens"] for r in (one, eight))
    assert abs(t8 - 8 * t1) <= 8 * 16  # 0.33 logs int(concurrency x max_model_len)


def test_hybrid_default_max_num_seqs_over_the_blocks(capsys):
    # vLLM 0.20+ refuses a Mamba / linear-attention model whose max_num_seqs exceeds the KV
    # blocks under FULL decode graphs; a public 0.29 Qwen3.8-27B log failed the same way
    # ("max_num_seqs (1024) exceeds available Mamba cache blocks (635)")
    cmd = "vllm serve Qwen/Qwen3.5-27B --max-model-len 8192"
    code, rep = check_json(capsys, "--cmd", cmd, "--gpu", "rtx-pro-6000", "--vllm-version",
                           "0.29")
    dep = rep["deployments"][0]
    f = one(dep, "max-num-seqs-safe")
    assert code == 1 and f["status"] == "fail" and f["current"] == 1024
    assert f["fix"] == f"--max-num-seqs {f['suggested']}" and f["suggested"] < 1024
    assert "the engine refuses to start" in f["message"]
    assert one(dep, "max-model-len-fits")["status"] == "pass"
    code, rep = check_json(capsys, "--cmd", f"{cmd} --enforce-eager", "--gpu", "rtx-pro-6000",
                           "--vllm-version", "0.29")
    assert one(rep["deployments"][0], "max-num-seqs-safe")["status"] == "skip"


def test_fp8_block_tp_split_fails_tensor_parallel_valid(capsys):
    # vLLM 0.28 refuses the split; 0.29+ re-scale the experts to 64-wide blocks (below)
    cmd = "vllm serve Qwen/Qwen3-235B-A22B-Instruct-2507-FP8 -tp 8"
    code, rep = check_json(capsys, "--cmd", cmd, "--gpu", "h100", "--vllm-version", "0.28")
    f = one(rep["deployments"][0], "tensor-parallel-valid")
    assert code == 1 and f["status"] == "fail"
    assert "experts' intermediate per GPU (192)" in f["message"]
    assert f["fix"] == "use --tensor-parallel-size 4, or add --enable-expert-parallel"
    code, rep = check_json(capsys, "--cmd", f"{cmd} --enable-expert-parallel", "--gpu", "h200")
    assert one(rep["deployments"][0], "tensor-parallel-valid")["status"] == "pass"
    # `refine_fp8_moe_block_shape` (0.29+): gcd(128, 128, 192, 4,096) = 64 >= 32, on Triton
    code, rep = check_json(capsys, "--cmd", cmd, "--gpu", "h100")
    assert one(rep["deployments"][0], "tensor-parallel-valid")["status"] == "pass"


def test_tp_that_does_not_split_the_kv_heads_fails(capsys):
    """review 24a F1: Qwen3-14B's 8 KV heads do not split over 5 GPUs (QKVParallelLinear)."""
    code, rep = check_json(capsys, "--cmd", "vllm serve Qwen/Qwen3-14B -tp 5", "--gpu", "h100")
    f = one(rep["deployments"][0], "tensor-parallel-valid")
    assert code == 1 and f["status"] == "fail" and (f["current"], f["suggested"]) == (5, 4)
    assert f["message"] == ("--tensor-parallel-size 5: its 8 KV heads neither split nor "
                            "replicate evenly over 5 GPUs ('8 is not divisible by 5'), so the "
                            "engine refuses to start")
    assert f["fix"] == "--tensor-parallel-size 4 (valid: 1, 2, 4, 8)"


def _deployment(capsys, cmd: str, gpu: str) -> dict:
    _, rep = check_json(capsys, "--cmd", cmd, "--gpu", gpu)
    return rep["deployments"][0]


def test_cudagraph_capture_flags_reach_the_sizing(capsys):
    # a smaller capture grid leaves more KV cache; nargs="+" values are read one by one
    def tokens(flags):
        return _deployment(capsys, f"vllm serve Qwen/Qwen2.5-1.5B-Instruct {flags}", "l4")

    default = tokens("")["kv_cache_tokens"]
    small = tokens("--cudagraph-capture-sizes 1 2 4 8")["kv_cache_tokens"]
    # 86 default graphs -> 8: 78 x 28 layers x 0.133 MiB more KV at 28 KiB per token
    gained = 78 * 28 * 0.133 * 2**20 / (28 * 1024)
    assert abs(small - default - gained) <= 16  # one block
    assert tokens("--max-cudagraph-capture-size 16")["kv_cache_tokens"] > default
    bad = tokens("--cudagraph-capture-sizes 1 x")
    assert any(c["id"] == "flag-values" and c["status"] == "fail" for c in bad["checks"])


def test_moe_backend_flag_reaches_the_sizing(capsys):
    def dep(flags):
        return _deployment(capsys, f"vllm serve deepseek-ai/DeepSeek-R1 -tp 8 {flags}", "h200")

    more = dep("--moe-backend flashinfer_cutlass")["kv_cache_tokens"]
    assert more > dep("")["kv_cache_tokens"]
    bad = dep("--moe-backend nope")
    assert any(c["status"] == "fail" and "--moe-backend nope" in c.get("message", "")
               for c in bad["checks"])


def test_compilation_config_sets_the_graphs_vllm_captures(capsys):
    # DeepSeek-R1 at TP8 on H200, 0.20.2 (graphs subtracted): FULL_DECODE_ONLY captures the 51
    # decode sizes up to 512 and no piecewise graphs; -O0 / mode 0 captures none
    base = "vllm serve deepseek-ai/DeepSeek-R1 -tp 8 --max-model-len 32768"

    def tokens(flags):
        _, rep = check_json(capsys, "--cmd", f"{base} {flags}", "--gpu", "h200",
                            "--vllm-version", "0.20.2")
        return rep["deployments"][0]["kv_cache_tokens"]

    def sized(*flags):
        _, out, _ = run(capsys, "size", "deepseek-ai/DeepSeek-R1", "--gpu", "h200", "-tp",
                        "8", "--max-model-len", "32768", "--vllm-version", "0.20.2", "--json",
                        *flags)
        return json.loads(out)

    decode = sized("-cc", '{"cudagraph_mode": "FULL_DECODE_ONLY"}')
    default = sized()
    assert (default["cudagraph_mode"], default["cudagraph_graphs"]) == ("FULL_AND_PIECEWISE", 102)
    assert (decode["cudagraph_mode"], decode["cudagraph_graphs"]) == ("FULL_DECODE_ONLY", 51)
    assert decode["cudagraph_bytes"] == int((130 + 0.133 * 61 * 51) * 2**20)
    assert tokens("--compilation-config '{\"cudagraph_mode\": \"FULL_DECODE_ONLY\"}'") == \
        decode["kv_cache_tokens"] > default["kv_cache_tokens"] == tokens("")
    # no vLLM compilation: piecewise graphs are impossible, so the default mode becomes NONE
    none = sized("-cc", '{"mode": 0}')
    assert (none["cudagraph_mode"], none["cudagraph_bytes"]) == ("NONE", 0)
    assert tokens("-O0") == none["kv_cache_tokens"]
    code, _, err = run(capsys, "size", "deepseek-ai/DeepSeek-R1", "--gpu", "h200", "-tp", "8",
                       "-cc", '{"cudagraph_mode": "half"}')
    assert code == 2 and "cudagraph_mode 'half'" in err


def test_late_allocations_fit_warns_when_the_headroom_is_too_small(capsys):
    # vLLM 0.27 runs Llama on model runner V2: its CUDA graphs are not subtracted (0.55 GiB)
    # and its sampler warm-up through FlashInfer (1,024 x 128,256 x 4 B x 3.5 = 1.71 GiB)
    # comes after sizing: 2.26 GiB, more than the 1.58 GiB a 0.98 utilization leaves on an H100
    base = "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 8192"

    def late(flags, version="0.27"):
        _, rep = check_json(capsys, "--cmd", f"{base} {flags}", "--gpu", "h100",
                            "--vllm-version", version)
        return next(c for c in rep["deployments"][0]["checks"]
                    if c["id"] == "late-allocations-fit")

    warn = late("--gpu-memory-utilization 0.98")
    assert warn["status"] == "warn" and "2.26 GiB" in warn["message"]
    assert warn["suggested"] == 0.96
    assert late("--gpu-memory-utilization 0.92")["status"] == "pass"
    # 0.33 profiles the warm-up and subtracts the graphs: nothing is left outside
    ok = late("--gpu-memory-utilization 0.98", version="0.33")
    assert ok["status"] == "pass" and "nothing" in ok["message"]


def test_compile_cache_persisted_follows_the_volume_and_the_cache_root(capsys, tmp_path):
    src = (FIX / "deployment-llama-chat.yaml").read_text()

    def cache(text, name="deployment.yaml"):
        f = tmp_path / name
        f.write_text(text)
        _, rep = check_json(capsys, f)
        return one(rep["deployments"][0], "compile-cache-persisted")

    kept = cache(src)  # a claim at /root/.cache holds /root/.cache/vllm
    assert kept["status"] == "pass" and "persistentVolumeClaim" in kept["message"]
    assert kept["line"] == line_of(tmp_path / "deployment.yaml", "- name: cache  #")
    # only the Hugging Face downloads are kept: every new pod compiles cold
    hf = cache(src.replace("mountPath: /root/.cache", "mountPath: /root/.cache/huggingface"))
    assert hf["status"] == "warn" and "/root/.cache/vllm is not on a volume" in hf["message"]
    assert hf["fix"].startswith("mount a PersistentVolumeClaim or host path at /root/.cache/vllm")
    # an emptyDir survives container restarts, not a new pod
    pod = cache(src.replace("persistentVolumeClaim:\n            claimName: llama-8b-cache",
                            "emptyDir: {}"))
    assert pod["status"] == "warn" and "emptyDir volume" in pod["message"]
    # VLLM_CACHE_ROOT moves the cache off the claim
    env = "          env:\n            - name: VLLM_CACHE_ROOT\n              value: /tmp/vllm\n"
    moved = cache(src.replace("          env:\n", env, 1))
    assert moved["status"] == "warn" and "/tmp/vllm is not on a volume" in moved["message"]
    # no torch.compile, nothing to keep
    eager = cache(src.replace('- "8000"', '- "8000"\n            - --enforce-eager'))
    assert eager["status"] == "pass" and "--enforce-eager" in eager["message"]
    # a StatefulSet's volumeClaimTemplates are claims
    sts = src.replace("kind: Deployment", "kind: StatefulSet").replace(
        "        - name: cache\n          persistentVolumeClaim:\n"
        "            claimName: llama-8b-cache\n", "") + (
        "  volumeClaimTemplates:\n    - metadata:\n        name: cache\n"
        "      spec:\n        accessModes: [ReadWriteOnce]\n")
    assert "volumeClaimTemplate" in cache(sts, "sts.yaml")["message"]
    # compose: a bind mount keeps it, tmpfs does not
    compose = ("services:\n  llm:\n    image: vllm/vllm-openai:v0.28.0\n"
               "    command: [meta-llama/Llama-3.1-8B-Instruct, --max-model-len, '8192']\n"
               "    volumes:\n      - ./cache:/root/.cache\n")
    bind = cache(compose, "compose.yaml")
    assert bind["status"] == "pass" and "is on a bind mount at /root/.cache" in bind["message"]
    named = cache(compose.replace("./cache:", "cache:"), "compose.yaml")
    assert named["message"].endswith("is on a named volume at /root/.cache")
    tmpfs = compose.replace("    volumes:\n      - ./cache:/root/.cache\n",
                            "    tmpfs:\n      - /root/.cache\n")
    t = cache(tmpfs, "compose.yaml")
    assert t["status"] == "warn" and "emptied whenever the container restarts" in t["message"]
    # --cmd says nothing about volumes
    _, rep = check_json(capsys, "--cmd", "vllm serve meta-llama/Llama-3.1-8B-Instruct",
                        "--gpu", "h100")
    assert one(rep["deployments"][0], "compile-cache-persisted")["status"] == "skip"


@pytest.mark.parametrize("tag,extra,env,gpu,status,message", [
    ("v0.6.3.post1", "", "", "l40s", "pass", "vLLM 0.6.3 keeps no torch.compile cache (V0 "
     "compiles nothing by default): nothing to cache"),
    ("v0.7.3", "", "", "l40s", "pass", "vLLM 0.7.3 runs its V0 engine, which compiles nothing "
     "unless asked for (-O3): nothing to cache"),
    ("v0.7.3", "", "VLLM_USE_V1=1", "l40s", "warn", None),  # V1: PIECEWISE compilation
    ("v0.7.3", ", -O3", "", "l40s", "warn", None),
    ("v0.8.5", "", "", "l40s", "warn", None),  # V1 by default from 0.8.0
    ("v0.9.2", "", "VLLM_USE_V1=0", "l40s", "pass", "this start runs vLLM 0.9.2's V0 engine, "
     "which compiles nothing unless asked for (-O3): nothing to cache"),
    ("v0.9.2", ", --dtype, half", "", "t4", "pass", "this start runs vLLM 0.9.2's V0 "
     "engine, which compiles nothing unless asked for (-O3): nothing to cache"),  # sm75
])
def test_compile_cache_only_where_the_release_compiles(capsys, tmp_path, tag, extra, env, gpu,
                                                       status, message):
    # review 23c #11: V0 (0.6-0.7 by default, 0.8-0.10 on fallback) runs without torch.compile
    f = tmp_path / "compose.yaml"
    f.write_text(f"services:\n  llm:\n    image: vllm/vllm-openai:{tag}\n"
                 f"    command: [Qwen/Qwen2.5-0.5B, --max-model-len, '8192'{extra}]\n"
                 + (f"    environment: [{env}]\n" if env else "")
                 + f"    labels: {{kvplan.io/gpu: {gpu}}}\n    tmpfs:\n      - /root/.cache\n")
    _, rep = check_json(capsys, f)
    c = one(rep["deployments"][0], "compile-cache-persisted")
    assert c["status"] == status
    if message:
        assert c["message"] == message and c["line"] == line_of(f, "command:")
    else:
        assert "emptied whenever the container restarts" in c["message"]


def test_frontend_video_decoding_is_taken_from_the_kv_cache(capsys):
    """--mm-ipc-gpu-memory-gb 4 and VLLM_VIDEO_LOADER_BACKEND=pynvvideocodec with two API
    servers on vLLM 0.33: 4 GiB + 2 x (2 x 128 MiB + 1.8 GiB) leave the logged KV memory."""
    code, rep = check_json(capsys, FIX / "compose-video-decode.yaml")
    assert code == 0
    d = rep["deployments"][0]
    fit = one(d, "weights-fit")
    assert fit["status"] == "pass"
    assert "8.10 GiB of the logged 22.64 GiB go to the API server's multimodal decoding" in \
        fit["message"]
    # 22.64 - 8.10 = 14.54 GiB at 56 KiB per token, in 16-token blocks less the null block
    # (V2's sampler state for 64 sequences, 41 MB, and its encoder runner's 2,048-token
    # inputs buffer sit under the encoder's profile peak)
    assert "the pool holds 272,224 tokens" in one(d, "max-model-len-fits")["message"]


@pytest.mark.parametrize("version,status,says", [
    ("0.28.0", "pass", "2 flags known to vLLM 0.28.0"),
    ("0.25", "pass", "known to vLLM 0.25.1"),
    ("0.24.0", "fail", "unknown flag --mm-ipc-gpu-memory-gb for vLLM 0.24.0"),
])
def test_every_minor_release_has_its_own_flags(capsys, version, status, says):
    """--mm-ipc-gpu-memory-gb arrived in 0.25: each minor release from 0.9 to 0.33 is read
    with its own parser's flags (before, 0.21-0.32 fell back to 0.20.2's and called it
    unknown)."""
    code, rep = check_json(capsys, "--cmd", "vllm serve Qwen/Qwen2.5-VL-7B-Instruct "
                           "--mm-ipc-gpu-memory-gb 2 --max-model-len 8192", "--gpu", "h100",
                           "--vllm-version", version)
    f = one(rep["deployments"][0], "flags-known")
    assert f["status"] == status and says in f["message"]
    if status == "fail":
        assert f["message"].endswith("(vLLM 0.25.0 added it)")
        # a flag added later gets no look-alike suggestion
        assert f["fix"] == "remove --mm-ipc-gpu-memory-gb, or run vLLM 0.25.0 or later"


def test_serve_rejects_model_flag_before_0_12(capsys):
    """0.6-0.11 `FlexibleArgumentParser.parse_args` raises when the exact token `--model`
    follows `serve`; `--model=X` passes, and 0.12+ accepts both with a warning."""
    cmd = "vllm serve {}meta-llama/Llama-3.1-8B-Instruct --max-model-len 8k"

    def known(flag, version):
        _, rep = check_json(capsys, "--cmd", cmd.format(flag), "--gpu", "h100",
                            "--vllm-version", version)
        return one(rep["deployments"][0], "flags-known")

    f = known("--model ", "0.11")
    assert f["status"] == "fail" and "vllm serve in vLLM 0.11.0 rejects --model" in f["message"]
    assert known("--model ", "0.12")["status"] == "pass"
    assert known("--model=", "0.11")["status"] == "pass"


@pytest.mark.parametrize("image,version", [
    ("vllm/vllm-openai:v0.10.2", "0.10.2"),
    ("vllm/vllm-openai:v0.28.0-cu130", "0.28.0"),
    ("vllm/vllm-openai:v0.10.1.1", "0.10.1"),
    ("rocm/vllm:rocm6.4.1_vllm_0.10.1_20250909", "0.10.1"),  # AMD's images name it inside
    ("vllm/vllm-openai:latest", None),
    ("vllm/vllm-openai:nightly-01d4d1ad375dc5854779c593eee093bcebb0cada", None),
    ("vllm/vllm-openai@sha256:0123", None),
    # a digest pins the tag (Renovate, Flux): the tag still names the release
    ("vllm/vllm-openai:v0.11.0@sha256:" + "0123456789abcdef" * 4, "0.11.0"),
    ("localhost:5000/vllm/vllm-openai:v0.10.2@sha256:0123", "0.10.2"),
    # Red Hat AI Inference Server: the tag is the product's release, not vLLM's
    ("registry.redhat.io/rhaiis/vllm-cuda-rhel9:3.2.3", None),
])
def test_image_tags_give_the_vllm_release(image, version):
    from kvplan.check.command import image_version

    assert image_version(image) == version


def test_an_assumed_release_is_said_in_the_header(capsys):
    code = main(["check", "--cmd", "vllm serve meta-llama/Llama-3.1-8B-Instruct "
                 "--max-model-len 8k", "--gpu", "h100"])
    out = capsys.readouterr().out
    assert code == 0
    assert "vllm 0.33 (assumed; set kvplan.io/vllm-version or --vllm-version)" in out


def test_a_release_newer_than_modelled_is_checked_as_the_newest_and_said(capsys):
    """A CI job must not break the day vLLM 0.34 ships: the deployment is checked as 0.33
    with a warning, and a flag 0.33 lacks only warns (it may be new)."""
    code, rep = check_json(capsys, "--cmd", "vllm serve meta-llama/Llama-3.1-8B-Instruct "
                           "--max-model-len 8k --brand-new-flag 3", "--gpu", "h100",
                           "--vllm-version", "0.34.0")
    assert code == 0
    d = rep["deployments"][0]
    assert d["vllm_version"] == "0.33" and d["vllm_version_requested"] == "0.34.0"
    rel = one(d, "release-modelled")
    assert rel["status"] == "warn" and "newer than the newest release kvplan models" in \
        rel["message"]
    flag = one(d, "flags-known")
    assert flag["status"] == "warn" and "unless the newer release added it" in flag["message"]
    # an older release than modelled is still bad input
    code, _, err = run(capsys, "check", "--cmd", "vllm serve meta-llama/Llama-3.1-8B-Instruct",
                       "--gpu", "h100", "--vllm-version", "0.5.4")
    assert code == 2 and "outside the modelled range 0.6-0.33" in err


def test_check_says_when_vllm_falls_back_to_v0(capsys):
    # vLLM 0.9.2 serves an fp8 KV cache on an L40S (FlashAttention 2) only on its V0 engine
    code, rep = check_json(capsys, "--cmd", "vllm serve Qwen/Qwen2.5-7B-Instruct "
                           "--kv-cache-dtype fp8 --max-model-len 8192", "--gpu", "l40s",
                           "--vllm-version", "0.9.2")
    msg = one(rep["deployments"][0], "sizing-inputs")["message"]
    assert "runs this start on its V0 engine: --kv-cache-dtype fp8" in msg


def test_allow_deprecated_quantization_reaches_the_sizing(capsys, tmp_path):
    # vLLM 0.30+ `ModelConfig._verify_quantization` refuses fbgemm_fp8 unless
    # --allow-deprecated-quantization is given; check read the flag but did not pass it on
    import yaml

    from kvplan.sources.resolve import resolve_model

    cfg = dict(resolve_model("meta-llama/Llama-3.1-8B-Instruct").config)
    cfg["quantization_config"] = {"quant_method": "fbgemm_fp8",
                                  "modules_to_not_convert": ["lm_head"]}
    cat = tmp_path / "cat.yaml"
    cat.write_text(yaml.safe_dump({"models": {"t/llama-fbgemm": {"config": cfg}}}))
    base = ["--catalog", cat, "--gpu", "h100", "--cmd"]
    code, d = check_json(capsys, *base, "vllm serve t/llama-fbgemm")
    v = one(d["deployments"][0], "flag-values")
    assert code == 1 and v["status"] == "fail" and "fbgemm_fp8" in v["message"]
    code, d = check_json(capsys, *base, "vllm serve t/llama-fbgemm --allow-deprecated-quantization")
    assert code == 0 and one(d["deployments"][0], "flag-values")["status"] == "pass"


def _cmd(capsys, flags, gpu="h100"):
    return check_json(capsys, "--gpu", gpu, "--cmd",
                      "vllm serve meta-llama/Llama-3.1-8B-Instruct " + flags)


def test_microbatching_needs_deepep_and_batch_sharded_sampling_needs_tp(capsys):
    # 0.33 `VllmConfig.__post_init__`: --enable-dbo / --ubatch-size > 1 run only with the
    # DeepEP or NIXL EP all-to-all backends on CUDA; `_validate_batch_sharded_sampling`
    # (0.29+) refuses TP 1
    for flags in ("--enable-dbo", "--ubatch-size 2"):
        code, d = _cmd(capsys, flags)
        v = one(d["deployments"][0], "flag-values")
        assert code == 1 and v["status"] == "fail" and "deepep_low_latency" in v["message"]
    code, d = _cmd(capsys, "--enable-dbo --enable-expert-parallel "
                   "--all2all-backend deepep_low_latency")
    dep = d["deployments"][0]
    assert one(dep, "flag-values")["status"] == "pass"
    assert one(dep, "sizing-inputs")["status"] == "pass"  # sized (dense: nothing to split)
    code, d = _cmd(capsys, "--enable-batch-sharded-sampling")
    v = one(d["deployments"][0], "flag-values")
    assert code == 1 and "tensor_parallel_size is 1" in v["message"]
    code, d = _cmd(capsys, "--enable-batch-sharded-sampling -tp 2")
    assert one(d["deployments"][0], "flag-values")["status"] == "pass"
    # thresholds count only with microbatching (0.30+): below the microbatches refused
    code, d = _cmd(capsys, "--dbo-decode-token-threshold 1")
    assert one(d["deployments"][0], "flag-values")["status"] == "pass"
    code, d = _cmd(capsys, "--ubatch-size 4 --dbo-decode-token-threshold 3 "
                   "--all2all-backend deepep_low_latency --enable-expert-parallel")
    v = one(d["deployments"][0], "flag-values")
    assert "--dbo-decode-token-threshold 3 is below the 4 microbatches" in v["message"]


def test_memory_flags_kvplan_does_not_size_are_named(capsys):
    # classified in the 0.33.0 wheel (engines/vllm_unsized.py): sizing-inputs warns
    code, d = _cmd(capsys, "--kv-offloading-size 40")
    s = one(d["deployments"][0], "sizing-inputs")
    assert s["status"] == "warn" and "KV offloading connector" in s["message"]
    assert "come out of the KV cache" in s["message"]
    # sleep mode's pool moves the budget in 0.8-0.13 and 0.17-0.26 only (vLLM issues 37096,
    # 40256); the pooling runner is sized
    sleep = ("vllm serve meta-llama/Llama-3.1-8B-Instruct --enable-sleep-mode --runner pooling "
             "--load-format safetensors")
    code, d = check_json(capsys, "--gpu", "h100", "--cmd", sleep, "--vllm-version", "0.20")
    s = one(d["deployments"][0], "sizing-inputs")["message"]
    assert "CuMemAllocator" in s and "pooling runner" not in s and "--load-format" not in s
    assert "the KV cache differs" in s
    code, d = check_json(capsys, "--gpu", "h100", "--cmd", sleep)
    assert one(d["deployments"][0], "sizing-inputs")["status"] == "pass"
    code, d = _cmd(capsys, "--runner generate --nnodes 1 --no-enable-prompt-embeds")
    assert one(d["deployments"][0], "sizing-inputs")["status"] == "pass"


def test_spec_flags_fill_the_speculative_config(capsys):
    # 0.24+ `EngineArgs.create_speculative_config`: --spec-method/--spec-model/--spec-tokens
    # set the JSON's keys; the same key in both is refused
    code, d = _cmd(capsys, "--spec-method ngram --spec-tokens 3")
    dep = d["deployments"][0]
    assert one(dep, "sizing-inputs")["status"] == "pass"
    assert "441,152 tokens" in one(dep, "max-model-len-fits")["message"]  # as k = 3 sizes
    code, d = _cmd(capsys, "--speculative-config '{\"method\": \"ngram\"}' --spec-tokens 3")
    assert "441,152 tokens" in one(d["deployments"][0], "max-model-len-fits")["message"]
    code, d = _cmd(capsys, "--speculative-config '{\"method\": \"ngram\", "
                   "\"num_speculative_tokens\": 4}' --spec-tokens 3")
    v = one(d["deployments"][0], "flag-values")
    assert code == 1 and "mutually exclusive" in v["message"]
    code, d = _cmd(capsys, "--spec-tokens 3")  # no method, no model: vLLM refuses
    v = one(d["deployments"][0], "flag-values")
    assert code == 1 and "without a method or a model" in v["message"]


def test_json_config_aliases_of_backend_flags(capsys):
    # 0.33 `create_engine_config`: --attention-config's backend is --attention-backend (both
    # at once refused); --kernel-config's moe_backend is --moe-backend
    def refusal(flags):  # FLASHMLA serves MLA models only: vLLM refuses it for Llama
        code, d = _cmd(capsys, flags, gpu="l40s")
        return [c["message"] for c in d["deployments"][0]["checks"] if c["status"] == "fail"]

    assert refusal("--attention-config '{\"backend\": \"FLASHMLA\"}'") == refusal(
        "--attention-backend FLASHMLA") != []
    code, d = _cmd(capsys, "--attention-backend FLASH_ATTN "
                   "--attention-config '{\"backend\": \"FLASHINFER\"}'")
    assert code == 1 and "mutually exclusive" in one(d["deployments"][0], "flag-values")[
        "message"]
    code, d = _cmd(capsys, "--attention-config '{\"backend\": \"FLASHINFER\", "
                   "\"indexer_kv_dtype\": \"fp8\"}'")
    assert "keys other than backend" in one(d["deployments"][0], "sizing-inputs")["message"]


def test_max_num_seqs_judged_on_the_pool_it_leaves(capsys):
    # Gemma-4-E4B on an L4 (32k, 0.9, chat, 1 % risk; tests/test_plan.py has the table): the
    # pool at 64 holds 73, so 64 passes although the plan's cap is 71; 73 holds only 71 on
    # its pool and fails, quoting 71 and the fix 71, which passes on its own pool (72 holds
    # 71 too)
    def seqs(flags):
        cmd = ("vllm serve google/gemma-4-E4B-it --max-model-len 32768 "
               f"--gpu-memory-utilization 0.9 {flags}")
        code, d = check_json(capsys, "--cmd", cmd, "-g", "l4", "-w", "chat", "--rate", "1",
                             "--vllm-version", "0.33.0")
        return one(d["deployments"][0], "max-num-seqs-safe")

    ok = seqs("--max-num-seqs 64")
    assert ok["status"] == "pass" and ok["current"] == 64 and ok["suggested"] == 71
    assert ok["message"] == ("--max-num-seqs 64 <= the safe 73 on the pool that 64 leaves "
                             "for the declared chat workload")
    bad = seqs("--max-num-seqs 73")
    assert bad["status"] == "fail" and bad["suggested"] == 71
    assert bad["fix"] == "--max-num-seqs 71"
    assert bad["message"].startswith(
        "--max-num-seqs 73 exceeds the safe 71 for the declared chat workload: on the pool "
        "that 73 leaves, past 71 running sequences the batch overflows the KV pool")
    assert seqs("--max-num-seqs 72")["status"] == "fail"
    assert seqs("--max-num-seqs 71")["status"] == "pass"
    default = seqs("")
    assert default["status"] == "fail" and default["fix"] == "--max-num-seqs 71"
    assert default["message"].startswith(
        "the default max-num-seqs 256 exceeds the safe 71 for the declared chat workload: on "
        "the pool that 256 leaves, past 47 running sequences")
    # --max-num-active-seqs keeps the pool max_num_seqs (256) leaves: its fix is that pool's
    active = seqs("--max-num-active-seqs 60")
    assert active["status"] == "fail" and active["fix"] == "--max-num-active-seqs 47"
    assert "on the pool that max-num-seqs 256 leaves, past 47 running" in active["message"]
    assert seqs("--max-num-active-seqs 47")["status"] == "pass"


def test_unset_max_num_seqs_passes_as_the_default(capsys):
    # Qwen2.5-7B on an L40S: the default 256 leaves a pool that holds 286 chat sequences
    code, d = check_json(capsys, "--cmd", "vllm serve Qwen/Qwen2.5-7B-Instruct", "-g", "l40s",
                         "-w", "chat", "--rate", "1")
    s = one(d["deployments"][0], "max-num-seqs-safe")
    assert s["status"] == "pass" and s["message"].startswith(
        "the default max-num-seqs 256 <= the safe 286 on the pool that 256 leaves")
    # set to the planner's figure on the default pool it leaves a smaller pool: 285
    code, d = check_json(capsys, "--cmd", "vllm serve Qwen/Qwen2.5-7B-Instruct "
                         "--max-num-seqs 286", "-g", "l40s", "-w", "chat", "--rate", "1")
    s = one(d["deployments"][0], "max-num-seqs-safe")
    assert s["status"] == "fail" and s["fix"] == "--max-num-seqs 285"
    assert "on the pool that 286 leaves, past 285 running sequences" in s["message"]

def test_max_num_active_seqs_caps_the_running_batch(capsys):
    # 0.31+ --max-num-active-seqs caps RUNNING below max_num_seqs (buffers and graphs stay
    # sized by max_num_seqs); `SchedulerConfig` refuses it above max_num_seqs
    base = ["--gpu", "h100", "--workload", "chat", "--rate", "1", "--cmd",
            "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 32k "]
    code, d = check_json(capsys, *base[:-1], base[-1])
    safe = one(d["deployments"][0], "max-num-seqs-safe")
    assert safe["status"] == "fail" and safe["current"] == 1024  # the H100 default
    code, d = check_json(capsys, *base[:-1], base[-1] + "--max-num-active-seqs 64")
    ok = one(d["deployments"][0], "max-num-seqs-safe")
    assert ok["status"] == "pass" and ok["current"] == 64
    assert ok["message"].startswith("--max-num-active-seqs 64 <= the safe")
    code, d = check_json(capsys, *base[:-1], base[-1] + "--max-num-active-seqs 0")
    assert code == 1 and "must be at least 1" in one(d["deployments"][0], "flag-values")[
        "message"]
    code, d = check_json(capsys, *base[:-1], base[-1] + "--max-num-active-seqs 2000")
    v = one(d["deployments"][0], "flag-values")
    assert code == 1 and "cannot be greater than max_num_seqs (1024)" in v["message"]


def test_mm_processor_kwargs_reach_the_encoder_profile(capsys):
    base = "vllm serve Qwen/Qwen2.5-VL-7B-Instruct "
    code, d = check_json(capsys, "--gpu", "h100", "--cmd",
                         base + "--mm-processor-kwargs '{\"max_pixels\": 1003520}'")
    dep = d["deployments"][0]
    assert "997,664 tokens" in one(dep, "max-model-len-fits")["message"]
    assert one(dep, "sizing-inputs")["status"] == "pass"
    code, d = check_json(capsys, "--gpu", "h100", "--cmd",
                         base + "--mm-processor-kwargs '{\"do_pan_and_scan\": true}'")
    assert "pan-and-scan" in one(d["deployments"][0], "sizing-inputs")["message"]


def test_dotted_json_flags_are_rebuilt_as_vllm_rebuilds_them(capsys):
    # `FlexibleArgumentParser`: `--flag.key VALUE` builds {"key": VALUE} (JSON, else a
    # human-readable int, else the string); several dotted uses of one flag merge
    def pool(flags):
        code, d = _cmd(capsys, flags)
        dep = d["deployments"][0]
        assert one(dep, "flag-values")["status"] == "pass", flags
        return one(dep, "max-model-len-fits")["message"]

    assert pool("--speculative-config.method ngram "
                "--speculative-config.num_speculative_tokens 3") == pool(
        "--speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 3}'")
    assert pool("--compilation-config.cudagraph_mode=PIECEWISE") == pool(
        "-cc '{\"cudagraph_mode\": \"PIECEWISE\"}'")
    assert "max_model_len 65536" in pool("--hf-overrides.max_position_embeddings 64K")
    # --moe-backend auto leaves --kernel-config's moe_backend in force (`create_engine_config`):
    code, d = _cmd(capsys, "--moe-backend auto --kernel-config.moe_backend bogus")
    assert code == 1
    assert "--moe-backend bogus is not a vLLM MoE backend" in one(
        d["deployments"][0], "sizing-inputs")["message"]


def test_switch_given_a_value_is_refused_as_argparse_refuses_it(capsys):
    # store_true / BooleanOptionalAction have nargs=0: argparse errors "ignored explicit
    # argument" on `--enforce-eager=false` (FlexibleArgumentParser passes `=` through as is)
    code, d = _cmd(capsys, "--enforce-eager=false")
    v = one(d["deployments"][0], "flag-values")
    assert code == 1 and v["status"] == "fail"
    assert "ignored explicit argument 'false'" in v["message"]
    assert "--no-enforce-eager to turn it off" in v["message"]
    code, d = _cmd(capsys, "--no-enable-prefix-caching --enforce-eager")
    assert one(d["deployments"][0], "flag-values")["status"] == "pass"
    # 0.6's --enable-chunked-prefill took an optional value (nargs="?")
    code, d = check_json(capsys, "--gpu", "h100", "--vllm-version", "0.6.4", "--cmd",
                         "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 8192 "
                         "--enable-chunked-prefill=true")
    assert one(d["deployments"][0], "flag-values")["status"] == "pass"


def test_dotted_json_keys_replace_a_plain_json_flag_wherever_it_stands(capsys):
    # vLLM appends the merged dotted object after every other argument
    flags = ("--speculative-config.method ngram --speculative-config.num_speculative_tokens 5 "
             "--speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 2}'")
    code, d = _cmd(capsys, flags)
    dep = d["deployments"][0]
    code, alone = _cmd(capsys, "--speculative-config.method ngram "
                               "--speculative-config.num_speculative_tokens 5")
    assert dep["kv_cache_tokens"] == alone["deployments"][0]["kv_cache_tokens"]
    assert "--speculative-config.* keys replace" in one(dep, "flags-known")["message"]


def test_env_values_fail_only_where_the_release_reads_them(capsys):
    # VLLM_DCP_Q_REPLICATE is parsed as an integer from 0.27 (`envs.py`); 0.20 does not know it
    cmd = ("VLLM_DCP_Q_REPLICATE=true vllm serve meta-llama/Llama-3.1-8B-Instruct "
           "--max-model-len 8192")

    def values(version):
        _, rep = check_json(capsys, "--cmd", cmd, "--gpu", "h100", "--vllm-version", version)
        return next(c for c in rep["deployments"][0]["checks"] if c["id"] == "flag-values")

    old = values("0.20")
    assert old["status"] == "warn" and old["message"] == (
        "VLLM_DCP_Q_REPLICATE='true' is not read by vLLM 0.20.2 (it warns of an unknown "
        "variable)")
    assert values("0.30")["status"] == "fail"


def test_a_flag_of_a_later_patch_than_the_record_is_a_warning(capsys):
    # the 0.11 parser record is 0.11.0's; 0.11.1 added --all2all-backend (0.11.1 arg_utils)
    cmd = ("vllm serve Qwen/Qwen3-30B-A3B -dp 4 --enable-expert-parallel "
           "--all2all-backend deepep_low_latency")
    code, rep = check_json(capsys, "--cmd", cmd, "--gpu", "h100", "--vllm-version", "0.11.1")
    f = next(c for c in rep["deployments"][0]["checks"] if c["id"] == "flags-known")
    assert f["status"] == "pass" and f["message"] == "3 flags known to vLLM 0.11.1"
    # a patch kvplan has no record of is read as the nearest recorded one below it
    code, rep = check_json(capsys, "--cmd", cmd + " --kv-cache-metrics", "--gpu", "h100",
                           "--vllm-version", "0.11.9")
    f = next(c for c in rep["deployments"][0]["checks"] if c["id"] == "flags-known")
    assert f["status"] == "warn" and "for vLLM 0.11.2" in f["message"] and \
        "unless 0.11.9, a later patch" in f["message"]  # 0.12 has it
    code, rep = check_json(capsys, "--cmd", cmd, "--gpu", "h100", "--vllm-version", "0.11.0")
    f = next(c for c in rep["deployments"][0]["checks"] if c["id"] == "flags-known")
    assert f["status"] == "fail"


def test_task_embed_runs_the_pooling_runner(capsys):
    # 0.9-0.12's --task embed picks the pooling runner: no LM head in the weights
    base = "vllm serve Qwen/Qwen3-8B --max-model-len 8192"
    _, gen = check_json(capsys, "--cmd", base, "--gpu", "h100", "--vllm-version", "0.11")
    _, emb = check_json(capsys, "--cmd", base + " --task embed", "--gpu", "h100",
                        "--vllm-version", "0.11")

    def weights(rep):
        msg = next(c for c in rep["deployments"][0]["checks"] if c["id"] == "weights-fit")
        return float(msg["message"].split("weights ")[1].split(" GiB")[0])

    assert weights(gen) - weights(emb) == pytest.approx(151936 * 4096 * 2 / 2**30, abs=0.01)


def _wide_ep_lws(tmp_path, annotations=""):
    """A wide-EP LeaderWorkerSet: 2 pods x 8 H200s run DeepSeek-R1 at DP 16 (8 local ranks
    each), one template for every pod."""
    f = tmp_path / "lws.yaml"
    f.write_text(
        "apiVersion: leaderworkerset.x-k8s.io/v1\nkind: LeaderWorkerSet\n"
        f"metadata:\n  name: wide-ep\n{annotations}"
        "spec:\n  replicas: 1\n  leaderWorkerTemplate:\n"
        "    size: 2\n    workerTemplate:\n      spec:\n"
        "        nodeSelector: {nvidia.com/gpu.product: NVIDIA-H200}\n"
        "        containers:\n        - name: vllm\n          image: vllm/vllm-openai:v0.33.0\n"
        "          command: [vllm, serve, deepseek-ai/DeepSeek-R1]\n"
        "          args: [--data-parallel-size, '16', --data-parallel-size-local, '8',"
        " --enable-expert-parallel, --max-model-len, '32768']\n"
        "          resources: {limits: {nvidia.com/gpu: 8}}\n")
    return f


def test_leaderworkerset_data_parallel_across_pods(capsys, tmp_path):
    code, rep = check_json(capsys, str(_wide_ep_lws(tmp_path)))
    g = next(c for c in rep["deployments"][0]["checks"] if c["id"] == "gpu-count-matches")
    assert g["status"] == "pass" and g["message"] == "TP x PP x DP = 16 uses the 16 GPUs allocated"


def test_leaderworkerset_replica_runs_the_whole_dp_group(capsys, tmp_path):
    # one LWS replica is the whole DP 16 group, so replicas needed = engines needed / 16
    f = _wide_ep_lws(tmp_path, "  annotations: {kvplan.io/workload: chat, kvplan.io/rate: '400'}\n")
    _, rep = check_json(capsys, str(f))
    r = next(c for c in rep["deployments"][0]["checks"] if c["id"] == "replicas-cover-rate")
    # 8.54 req/s an engine at 80 % utilisation: 59 engines, 4 groups of 16
    assert "x 16 engines; utilization <= 80% needs 4" in r["message"] and r["suggested"] == 4
    assert rep["deployments"][0]["replicas_needed"] == 4  # groups, the unit of `replicas`
    # the same group as one container per node would need 2x the pods
    g = f.read_text().replace("leaderworkerset.x-k8s.io/v1", "apps/v1").replace(
        "LeaderWorkerSet", "Deployment").replace("  leaderWorkerTemplate:\n    size: 2\n"
                                                 "    workerTemplate:\n", "  template:\n")
    f.write_text(g)
    _, dep = check_json(capsys, str(f))
    r2 = next(c for c in dep["deployments"][0]["checks"] if c["id"] == "replicas-cover-rate")
    assert "x 8 engines" in r2["message"] and r2["suggested"] == 8  # 59 engines / 8


def test_pooling_server_skips_generation_capacity(capsys):
    cmd = ("vllm serve Qwen/Qwen3-8B --runner pooling --max-model-len 8192 "
           "--max-num-seqs 1024")
    _, rep = check_json(capsys, "--cmd", cmd, "--gpu", "h100", "--workload", "chat",
                        "--rate", "50")
    st = {c["id"]: c for c in rep["deployments"][0]["checks"]}
    for cid in ("max-num-seqs-safe", "replicas-cover-rate"):
        assert st[cid]["status"] == "skip" and "pooling runner" in st[cid]["message"]


def test_fast_prefill_refused_beside_eagle_even_with_the_draft_unresolved(capsys):
    # `VllmConfig.__post_init__` refuses the pair from the method alone (0.10.2+; dspark 0.25+)
    base = ("vllm serve google/gemma-4-E4B-it --kv-sharing-fast-prefill --max-model-len 32768 "
            "--speculative-config '{\"method\": \"%s\", \"model\": \"nobody/draft\", "
            "\"num_speculative_tokens\": 3}'")
    for method in ("eagle3", "dflash"):
        code, rep = check_json(capsys, "--cmd", base % method, "--gpu", "l4")
        fv = [c for c in rep["deployments"][0]["checks"] if c["id"] == "flag-values"]
        assert code == 1 and fv[0]["status"] == "fail"
        assert "refuses --kv-sharing-fast-prefill with EAGLE-style" in fv[0]["message"]
    code, rep = check_json(capsys, "--cmd", base % "draft_model", "--gpu", "l4")
    assert code == 0


def test_data_parallel_local_size_refusals(capsys):
    base = "vllm serve deepseek-ai/DeepSeek-R1 --enable-expert-parallel "

    def fails(extra):
        code, rep = check_json(capsys, "--cmd", base + extra, "--gpu", "h200")
        return [c for c in rep["deployments"][0]["checks"]
                if c["id"] == "flag-values" and c["status"] == "fail"]

    # `ParallelConfig.__post_init__` (0.10.1+) and `run_headless` (0.9+)
    f = fails("-dp 16 -dpl 32")
    assert f[0]["message"].startswith("data_parallel_size_local (32) must be <= "
                                      "data_parallel_size (16)")
    assert fails("-dp 16 -dpl 0 --headless")[0]["message"].startswith(
        "data_parallel_size_local must be > 0 in headless mode")
    assert fails("-dp 16 -dpl 8") == [] and fails("-dp 16 -dpl 0") == []


def test_microbatching_fix_follows_the_release(capsys):
    cmd = ("vllm serve deepseek-ai/DeepSeek-R1 -dp 8 --enable-expert-parallel --enable-dbo "
           "--max-model-len 16384")

    def fv(*argv):
        _, rep = check_json(capsys, *argv, "--gpu", "h200")
        return next(c for c in rep["deployments"][0]["checks"] if c["id"] == "flag-values")

    # 0.11 has no --all2all-backend: the backend comes from the environment
    assert fv("--cmd", cmd, "--vllm-version", "0.11.0")["fix"].startswith(
        "set VLLM_ALL2ALL_BACKEND=deepep_low_latency")
    # 0.17 no longer reads the variable (`envs.py`), so the upgrade is the reason
    f = fv("--cmd", "VLLM_ALL2ALL_BACKEND=deepep_low_latency " + cmd, "--vllm-version", "0.17.1")
    assert f["status"] == "fail" and "vLLM 0.17.1 no longer reads VLLM_ALL2ALL_BACKEND" in \
        f["message"] and f["fix"].startswith("add --all2all-backend deepep_low_latency")
    assert fv("--cmd", "VLLM_ALL2ALL_BACKEND=deepep_low_latency " + cmd,
              "--vllm-version", "0.11.0")["status"] == "pass"


def test_model_newer_than_the_image_names_the_image(capsys, tmp_path):
    f = tmp_path / "g4.yaml"
    f.write_text("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: g4}\nspec:\n"
                 "  template:\n    spec:\n      nodeSelector: {nvidia.com/gpu.product: NVIDIA-L4}\n"
                 "      containers:\n      - name: vllm\n        image: vllm/vllm-openai:v0.17.1\n"
                 "        args: [--model, google/gemma-4-E4B-it, --max-model-len, '8192']\n"
                 "        resources: {limits: {nvidia.com/gpu: 1}}\n")
    code, rep = check_json(capsys, str(f))
    s = next(c for c in rep["deployments"][0]["checks"] if c["id"] == "sizing-inputs")
    assert code == 1 and s["status"] == "fail"
    assert s["message"].startswith("cannot size: vLLM 0.17.1 does not have "
                                   "Gemma4ForConditionalGeneration yet")
    assert s["fix"] == ("run a vLLM image newer than 0.18.1 (this one is "
                        "vllm/vllm-openai:v0.17.1)")


def test_low_utilization_with_sleep_mode_is_a_colocated_trainer(capsys):
    base = "vllm serve Qwen/Qwen3-8B --gpu-memory-utilization 0.4 --max-model-len 8192"

    def g(cmd):
        _, rep = check_json(capsys, "--cmd", cmd, "--gpu", "h100")
        return next(c for c in rep["deployments"][0]["checks"]
                    if c["id"] == "gpu-memory-utilization-range")

    assert g(base)["status"] == "warn" and g(base)["suggested"] == 0.9
    s = g(base + " --enable-sleep-mode")
    assert s["status"] == "pass" and "colocated" in s["message"]


def test_flags_checked_against_the_images_own_patch(capsys):
    # 0.10.1 added --skip-mm-profiling; 0.11.1 added --all2all-backend and dropped --rope-theta
    # (tools/vllm_patch_flags.py over the wheels); a minor given alone is its recorded release
    def fk(cmd, version):
        _, rep = check_json(capsys, "--cmd", "vllm serve Qwen/Qwen3-8B --max-model-len 8192 "
                            + cmd, "--gpu", "l4", "--vllm-version", version)
        return [c for c in rep["deployments"][0]["checks"] if c["id"] == "flags-known"]

    f = fk("--skip-mm-profiling", "0.10.0")[0]
    assert f["status"] == "fail" and f["message"].endswith("(vLLM 0.10.1 added it)")
    assert f["fix"] == "remove --skip-mm-profiling, or run vLLM 0.10.1 or later"
    assert fk("--skip-mm-profiling", "0.10.1")[0]["message"] == \
        "2 flags known to vLLM 0.10.1"
    assert fk("--all2all-backend naive", "0.11")[0]["message"].endswith(
        "(vLLM 0.11.1 added it)")
    assert fk("--all2all-backend naive", "0.11.1")[0]["status"] == "pass"
    f = fk("--rope-theta 1000000", "0.11.1")[0]
    assert f["status"] == "fail" and "(vLLM 0.11.1 dropped it; 0.11.0 had it)" in f["message"]
    assert fk("--rope-theta 1000000", "0.11.0")[0]["status"] == "pass"


def test_batched_dp_default_token_budget_named_as_a_default(capsys):
    cmd = ("vllm serve deepseek-ai/DeepSeek-R1 -dp 8 --enable-expert-parallel "
           "--all2all-backend deepep_low_latency --max-num-seqs 512")
    code, rep = check_json(capsys, "--cmd", cmd, "--gpu", "h200")
    f = next(c for c in rep["deployments"][0]["checks"] if c["id"] == "flag-values")
    assert code == 1 and f["message"].startswith(
        "the default max_num_batched_tokens 256 (deepep_low_latency's batched DP/EP default) "
        "is smaller than --max-num-seqs 512")
# --- LeaderWorkerSet groups: the worker template, lws-group-consistent ----------------------

def lws_variant(tmp_path, **subs):
    """lws-wide-ep-worker.yaml with the worker's args made consistent, then `subs` applied
    (old text -> new text)."""
    src = (FIX / "lws-wide-ep-worker.yaml").read_text()
    src = src.replace('"--data-parallel-size", "32"', '"--data-parallel-size", "16"').replace(
        '"--headless", "--all2all-backend", "deepep_high_throughput"',
        '"--headless", "--enable-expert-parallel", "--all2all-backend", "deepep_low_latency"'
    ).replace('"163840", "--gpu-memory-utilization", "1.5",\n'
              '                 "--this-flag-does-not-exist"]', '"32768"]')
    for old, new in subs.items():
        assert old in src, old
        src = src.replace(old, new)
    f = tmp_path / "lws.yaml"
    f.write_text(src)
    return f


def test_lws_worker_template_is_checked(capsys):
    src = FIX / "lws-wide-ep-worker.yaml"
    code, rep = check_json(capsys, src)
    assert code == 1
    lead, work = rep["deployments"]
    assert lead["name"] == "LeaderWorkerSet/r1-wide-ep (leader)" and lead["gpus"] == 16
    assert work["name"] == "LeaderWorkerSet/r1-wide-ep (worker)" and work["gpus"] == 8
    fk = one(work, "flags-known")
    assert fk["status"] == "fail" and fk["current"] == "--this-flag-does-not-exist"
    assert fk["line"] == line_of(src, "--this-flag-does-not-exist")
    gmu = one(work, "gpu-memory-utilization-range")
    assert (gmu["status"], gmu["current"], gmu["suggested"]) == ("fail", 1.5, 0.9)
    # the group's capacity is the leader's: not reported twice
    g = one(work, "gpu-count-matches")
    assert g["status"] == "skip" and g["message"] == (
        "counted for the whole group on LeaderWorkerSet/r1-wide-ep (leader): the leader's "
        "GPUs + (size - 1) x the worker's")
    assert one(lead, "gpu-count-matches")["status"] == "pass"
    assert "lws-group-consistent" not in by_id(work)
    got = {(c["current"], c["suggested"], c["line"], c["fix"]) for c in
           by_id(lead)["lws-group-consistent"]}
    assert got == {
        (32, 16, line_of(src, '"--data-parallel-size", "32"'),
         "--data-parallel-size 16 (as the leader)"),
        (False, True, line_of(src, 'command: ["vllm"', line_of(src, "workerTemplate")),
         "add --enable-expert-parallel (as the leader)"),
        ("deepep_high_throughput", "deepep_low_latency", line_of(src, "deepep_high"),
         "--all2all-backend deepep_low_latency (as the leader)"),
        (163840, 32768, line_of(src, '"163840"'), "--max-model-len 32768 (as the leader)")}
    dp = next(c for c in by_id(lead)["lws-group-consistent"] if c["current"] == 32)
    assert dp["status"] == "fail" and dp["message"].startswith(
        "--data-parallel-size differs: the worker has 32, the leader 16 (line 20): every pod "
        "of the group must start vLLM alike")


def test_lws_consistent_group_passes(capsys, tmp_path):
    code, rep = check_json(capsys, lws_variant(tmp_path))
    assert code == 0
    lead, work = rep["deployments"]
    c = one(lead, "lws-group-consistent")
    assert c["status"] == "pass" and c["message"] == (
        "the leader and the worker agree: model deepseek-ai/DeepSeek-R1, image "
        "vllm/vllm-openai:v0.33.0, --data-parallel-size 16, --tensor-parallel-size 1, "
        "--pipeline-parallel-size 1, expert parallelism on, all-to-all backend "
        "deepep_low_latency, --max-model-len 32768; 8 on the leader + 1 x 8 on the worker "
        "= 16 data-parallel ranks")
    # the worker is sized on its own: --headless runs no API server
    assert one(work, "weights-fit")["status"] == "pass"
    assert work["kv_cache_tokens"] == lead["kv_cache_tokens"] > 0


@pytest.mark.parametrize("subs,status,current,suggested,message", [
    ({'"--data-parallel-start-rank", "8"': '"--data-parallel-start-rank", "12"'}, "fail", 12, 8,
     "the worker runs data-parallel ranks 12-19 (--data-parallel-start-rank 12, "
     "--data-parallel-size-local 8), past --data-parallel-size 16 (ranks 0-15): vLLM has no "
     "such rank and the group never forms"),
    ({'"--data-parallel-start-rank", "8"': '"--data-parallel-start-rank", "4"'}, "fail", 4, 8,
     "the worker runs data-parallel ranks 4-11, which the leader runs too (0-7): the group "
     "never forms"),
    ({'"--data-parallel-size-local", "8",\n                 "--data-parallel-start-rank", "8"':
      '"--data-parallel-size-local", "4",\n                 "--data-parallel-start-rank", "8"'},
     "fail", 12, 16, "the group's pods run 8 on the leader + 1 x 4 on the worker = 12 "
     "data-parallel ranks but --data-parallel-size is 16: ranks 12-15 never start and the "
     "group waits for them"),
    ({"image: vllm/vllm-openai:v0.33.0\n          command: [\"vllm\", \"serve\", \"deepseek-ai/"
      "DeepSeek-R1\"]\n          args: [\"--data-parallel-size\", \"16\", \"--data-parallel-size"
      "-local\", \"8\",\n                 \"--data-parallel-start-rank\", \"8\"":
      "image: vllm/vllm-openai:v0.32.0\n          command: [\"vllm\", \"serve\", \"deepseek-ai/"
      "DeepSeek-R1\"]\n          args: [\"--data-parallel-size\", \"16\", \"--data-parallel-size"
      "-local\", \"8\",\n                 \"--data-parallel-start-rank\", \"8\""},
     "fail", "vllm/vllm-openai:v0.32.0", "vllm/vllm-openai:v0.33.0",
     "image differs: the worker has vllm/vllm-openai:v0.32.0, the leader "
     "vllm/vllm-openai:v0.33.0 (line 18): the pods would run different vLLM builds, whose "
     "start-up handshakes need not match"),
    # the leader takes 0.33's default backend: the leader is the one to change
    ({'\n                 "--enable-expert-parallel", "--all2all-backend", "deepep_low_latency",':
      '\n                 "--enable-expert-parallel",'}, "fail", "allgather_reducescatter",
     "deepep_low_latency",
     "all-to-all backend differs: the leader runs allgather_reducescatter (the release's "
     "default), the worker deepep_low_latency (line 34): the pods exchange tokens differently "
     "and the group fails at start-up"),
])
def test_lws_group_inconsistencies(capsys, tmp_path, subs, status, current, suggested, message):
    _, rep = check_json(capsys, lws_variant(tmp_path, **subs))
    c = one(rep["deployments"][0], "lws-group-consistent")
    assert (c["status"], c["current"], c["suggested"], c["message"]) == (
        status, current, suggested, message)


def test_lws_shared_literal_start_rank(capsys, tmp_path):
    # size 3: both worker pods run the worker template's literal start rank 8
    f = lws_variant(tmp_path, **{"size: 2": "size: 3"})
    code, rep = check_json(capsys, f)
    got = by_id(rep["deployments"][0])["lws-group-consistent"]
    assert code == 1 and [c["status"] for c in got] == ["fail", "fail"]
    assert got[0]["message"] == ("the 2 worker pods of the worker template all run "
                                 "--data-parallel-start-rank 8: each claims ranks 8-15 and "
                                 "the group never forms")
    assert got[0]["fix"] == ("give each pod its own start rank in a shell: "
                             "--data-parallel-start-rank $(( LWS_WORKER_INDEX * 8 ))")
    assert got[1]["message"].startswith("the group's pods run 8 on the leader + 2 x 8 on the "
                                        "workers = 24 data-parallel ranks but "
                                        "--data-parallel-size is 16: 8 of them have no place")
    assert (got[1]["fix"], got[1]["line"]) == ("leaderWorkerTemplate.size: 2",
                                               line_of(f, "size: 3"))


def test_lws_unresolved_values_are_not_failures(capsys, tmp_path):
    # a start rank and a length from variables kvplan cannot resolve
    f = lws_variant(tmp_path, **{
        '"--data-parallel-start-rank", "8"': '"--data-parallel-start-rank", "$(START_RANK)"',
        '"--headless", "--enable-expert-parallel", "--all2all-backend", "deepep_low_latency",\n'
        '                 "--max-model-len", "32768"]':
        '"--headless", "--enable-expert-parallel", "--all2all-backend", "deepep_low_latency",\n'
        '                 "--max-model-len", "$(MAX_LEN)"]'})
    code, rep = check_json(capsys, f)
    c = one(rep["deployments"][0], "lws-group-consistent")
    assert c["status"] == "pass" and c["message"].endswith(
        "= 16 data-parallel ranks; not compared: --max-model-len, --data-parallel-start-rank "
        "(set from variables kvplan cannot resolve)")
    assert code == 0


def test_lws_of_size_one_runs_no_worker(capsys, tmp_path):
    # size 1: the group is the leader alone, and the worker template never runs
    code, rep = check_json(capsys, lws_variant(tmp_path, **{
        "size: 2": "size: 1", '"--data-parallel-size", "16"': '"--data-parallel-size", "8"'}))
    (dep,) = rep["deployments"]
    assert dep["name"] == "LeaderWorkerSet/r1-wide-ep" and dep["gpus"] == 8
    assert "lws-group-consistent" not in by_id(dep) and code == 0


def test_lws_group_check_can_be_ignored(capsys, tmp_path):
    f = tmp_path / "lws.yaml"
    f.write_text((FIX / "lws-wide-ep-worker.yaml").read_text().replace(
        "  name: r1-wide-ep\n",
        "  name: r1-wide-ep\n  annotations: {kvplan.io/ignore: lws-group-consistent}\n"))
    _, rep = check_json(capsys, f)
    got = by_id(rep["deployments"][0])["lws-group-consistent"]
    assert {c["status"] for c in got} == {"skip"} and len(got) == 4
    assert got[0]["message"].startswith("ignored (kvplan.io/ignore): ")


def test_lws_script_branches_are_alternatives(capsys):
    src = FIX / "lws-script-branches.yaml"
    code, rep = check_json(capsys, src)
    first, second = rep["deployments"]
    l1, l2 = line_of(src, "exec vllm serve"), line_of(src, "exec vllm serve", 27)
    assert first["name"] == f"LeaderWorkerSet/kimi-k2 (branch at line {l1})"
    assert second["name"] == f"LeaderWorkerSet/kimi-k2 (branch at line {l2})"
    # each arm is checked: both run the default max-num-seqs
    s1, s2 = one(first, "max-num-seqs-safe"), one(second, "max-num-seqs-safe")
    assert s1["status"] == s2["status"] == "fail" and s1["suggested"] == s2["suggested"]
    assert (s1["line"], s2["line"]) == (l1, l2)
    assert one(first, "replicas-cover-rate")["status"] == "pass"
    assert one(second, "replicas-cover-rate")["message"] == (
        f"the group's replicas are checked on LeaderWorkerSet/kimi-k2 (branch at line {l1})")
    c = one(first, "lws-group-consistent")
    assert c["status"] == "pass" and c["message"].startswith(
        f"the branch at line {l1} and the branch at line {l2} agree: model "
        "moonshotai/Kimi-K2-Instruct")
    # START_RANK=$(( ${LWS_WORKER_INDEX:-0} * 4 )), read pod by pod: not a warning
    assert c["message"].endswith("; 4 pods x 4 = 16 data-parallel ranks (start ranks 0, 4, "
                                 "8, 12, read pod by pod from LWS_WORKER_INDEX)")
    assert one(first, "flags-known")["message"] == "6 flags known to vLLM 0.33.0"


def test_lws_huge_group_is_read_without_listing_its_pods(capsys, tmp_path):
    """fuzz seed 2501: size 10^12 listed every pod index (MemoryError, exit 3)."""
    f = tmp_path / "lws.yaml"
    f.write_text((FIX / "lws-script-branches.yaml").read_text().replace(
        "size: 4\n", "size: 1000000000000\n"))
    code, rep = check_json(capsys, f)
    c = one(rep["deployments"][0], "lws-group-consistent")
    assert code == 1 and c["status"] == "fail"
    assert "1000000000000 pods x 4 = 4000000000000 data-parallel ranks but " \
        "--data-parallel-size is 16" in c["message"]


def test_headless_variable_is_a_warning_not_a_failure(capsys):
    src = FIX / "lws-headless-var.yaml"
    code, rep = check_json(capsys, src)
    (dep,) = rep["deployments"]
    assert code == 0 and dep["max_model_len"] == 65536  # MAX_LEN assigned by the script
    got = [c for c in by_id(dep)["flags-known"] if "$HEADLESS" in c["message"]]
    assert [c["status"] for c in got] == ["warn"]
    lines = line_of(src, 'HEADLESS=""'), line_of(src, 'then HEADLESS=')
    assert got[0]["message"] == (
        "'$HEADLESS' refers to a variable kvplan cannot resolve (HEADLESS is assigned "
        f"different values in the script's branches (lines {lines[0]} and {lines[1]})); the "
        "arguments it expands to are not checked")
    c = one(dep, "lws-group-consistent")
    assert c["message"] == ("4 pods x 4 = 16 data-parallel ranks (start ranks 0, 4, 8, 12, "
                            "read pod by pod from LWS_WORKER_INDEX)")


def test_script_variables_in_a_container(capsys, tmp_path):
    src = (FIX / "lws-headless-var.yaml").read_text()
    f = tmp_path / "h.yaml"
    f.write_text(src.replace(
        '            if [ "${LWS_WORKER_INDEX:-0}" -ne 0 ]; then HEADLESS="--headless"; fi\n', ""))
    code, rep = check_json(capsys, f)
    dep = rep["deployments"][0]
    assert not [c for c in dep["checks"] if "HEADLESS" in c["message"]]
    # $START_RANK is read pod by pod (lws-group-consistent): no flag left to warn about
    assert one(dep, "flags-known")["message"] == "6 flags known to vLLM 0.33.0"
    # an unquoted empty variable stands for no word; a set one for its value
    f.write_text(src.replace('HEADLESS=""\n', 'HEADLESS="--headless"\n').replace(
        '            if [ "${LWS_WORKER_INDEX:-0}" -ne 0 ]; then HEADLESS="--headless"; fi\n', ""))
    code, rep = check_json(capsys, f)
    assert one(rep["deployments"][0], "flags-known")["message"] == \
        "7 flags known to vLLM 0.33.0"


def test_engine_commands_in_if_arms_of_a_deployment(capsys, tmp_path):
    f = tmp_path / "d.yaml"
    f.write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: qwen}\nspec:\n  template:\n"
        "    spec:\n      nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}\n"
        "      containers:\n      - name: vllm\n        image: vllm/vllm-openai:v0.33.0\n"
        "        command: [sh, -c]\n        args:\n        - |\n"
        "          if [ \"$BIG\" = 1 ]; then\n"
        "            exec vllm serve Qwen/Qwen3-8B -tp 2 --max-model-len 32768\n"
        "          else\n"
        "            exec vllm serve Qwen/Qwen3-8B --max-model-len 32768\n"
        "          fi\n"
        "        resources: {limits: {nvidia.com/gpu: 2}}\n")
    code, rep = check_json(capsys, f)
    a, b = rep["deployments"]
    assert (a["name"], b["name"]) == ("Deployment/qwen (branch at line 15)",
                                      "Deployment/qwen (branch at line 17)")
    ga, gb = one(a, "gpu-count-matches"), one(b, "gpu-count-matches")
    assert ga["status"] == "pass" and (gb["status"], gb["current"], gb["suggested"]) == (
        "warn", 2, 1)
    # a command after the `if`, not in an arm: two engines at once, as before
    f.write_text(f.read_text().replace("          fi\n", "          fi\n"
                                       "          vllm serve Qwen/Qwen3-4B\n"))
    code, _, err = run(capsys, "check", f)
    assert code == 2 and "two engine commands in one container (lines 15 and 19)" in err


def test_shell_script_variables():
    from kvplan.check.base import Loc, Token
    from kvplan.check.command import EnvVar, find_engine

    def engine(script, env=None):
        return find_engine([Token("sh"), Token("-c")], [Token(script)], env or {})

    e = engine("X=1; [ -n \"$Y\" ] && X=2; vllm serve m --max-model-len $X")
    assert [t.text for t in e.unresolved] == ["$X"]
    assert e.why["X"] == "assigned different values in the script's branches"
    e = engine("X=1; [ -n \"$Y\" ] && X=1; vllm serve m --max-model-len $X")
    assert e.args[-1].text == "1" and not e.unresolved  # the same value either way
    e = engine("export CUDA_VISIBLE_DEVICES=0,1\nFOO=1\nexport BAR\nBAR=2\nvllm serve m")
    assert set(e.env) == {"CUDA_VISIBLE_DEVICES", "BAR"}  # only what is exported
    e = engine("N=$(nproc)\nvllm serve m -tp $N")
    assert e.why["N"] == "computed when the script runs"
    e = engine('case "$R" in\n  a) vllm serve m -tp 1 ;;\n  *) vllm serve m -tp 2 ;;\nesac')
    assert [x.args[-1].text for x in [e, *e.alternatives]] == ["1", "2"]
    # a default for an empty variable follows the variable's known value
    model = {"MODEL": EnvVar("Qwen/Qwen3-8B", Loc())}
    for script in ('if [ -z "$MODEL" ]; then MODEL=x/y; fi\nvllm serve $MODEL',
                   '[ -z "${MODEL}" ] && MODEL=x/y\nvllm serve $MODEL',
                   '[ -n "$MODEL" ] || MODEL=x/y\nvllm serve $MODEL'):
        assert engine(script, model).args[0].text == "Qwen/Qwen3-8B", script
        assert engine(script, {"MODEL": EnvVar("", Loc())}).args[0].text == "x/y", script
        assert engine(script, {"MODEL": EnvVar(None, Loc())}).args[0].text == "$MODEL"


def test_script_gpu_count_from_exported_visible_devices(capsys, tmp_path):
    f = tmp_path / "start.sh"
    f.write_text("#!/bin/sh\nexport CUDA_VISIBLE_DEVICES=0,1\n"
                 "exec vllm serve Qwen/Qwen3-8B -tp 4 --max-model-len 8192\n")
    code, rep = check_json(capsys, f, "--gpu", "h100")
    g = one(rep["deployments"][0], "gpu-count-matches")
    assert (g["status"], g["current"], g["suggested"], g["line"]) == ("fail", 2, 4, 2)
    assert g["fix"] == "list 4 devices in CUDA_VISIBLE_DEVICES"
    f.write_text(f.read_text().replace("export CUDA", "CUDA"))  # not exported: vLLM sees all
    code, rep = check_json(capsys, f, "--gpu", "h100")
    g = one(rep["deployments"][0], "gpu-count-matches")
    assert g["status"] == "skip" and g["message"] == (
        "TP x PP x DP = 4; the GPU count is not given")
def test_pooler_config_as_the_release_reads_it(capsys):
    # #8: vLLM's argparse type (`parse_dataclass`) refuses a --pooler-config that is not JSON
    def flag(cmd, version="0.33"):
        code, d = check_json(capsys, "--gpu", "l4", "--vllm-version", version, "--cmd",
                             "vllm serve Qwen/Qwen3-8B --max-model-len 8192 " + cmd)
        return code, one(d["deployments"][0], "flag-values"), d["deployments"][0]

    code, v, _ = flag("--runner pooling --pooler-config '{seq_pooling_type:MEAN}'")
    assert code == 1 and v["status"] == "fail" and "is not a JSON object" in v["message"]
    assert "the engine refuses to start" in v["message"] and "pooling_type" in v["fix"]
    code, v, _ = flag("--runner pooling --pooler-config '{\"pooling_type\": \"MEANS\"}'")
    assert code == 1 and v["status"] == "fail" and "'MEANS' is not one of" in v["message"]
    code, v, _ = flag("--runner pooling --pooler-config '{\"pooling_type\": \"mean\"}'", "0.11")
    assert code == 1 and v["fix"] == 'write "MEAN"'
    # 0.12 / 0.13's pydantic PoolerConfig drops seq_pooling_type: LAST pooling is sized, and
    # flag-values warns with the key the release reads
    code, v, dep = flag("--runner pooling --pooler-config '{\"seq_pooling_type\": \"MEAN\"}'",
                        "0.12")
    assert code == 0 and v["status"] == "warn" and "use pooling_type before 0.14" in v["message"]
    assert v["suggested"] == '{"pooling_type": "MEAN"}'
    assert "38,512 tokens" in one(dep, "max-model-len-fits")["message"]  # LAST: 2,048 budget
    code, v, dep = flag("--runner pooling --pooler-config '{\"pooling_type\": \"MEAN\"}'",
                        "0.12")
    assert v["status"] == "pass" and "34,080 tokens" in one(dep, "max-model-len-fits")["message"]
    # 0.16+ forbid unknown keys; 0.10's --override-pooler-config is read the same way
    code, v, _ = flag("--runner pooling --pooler-config '{\"normalize\": true}'", "0.16")
    assert code == 1 and "forbids unknown keys" in v["message"]
    code, v, dep = flag("--task embed --override-pooler-config '{\"pooling_type\": \"MEAN\"}'",
                        "0.10")
    assert v["status"] == "pass" and "34,080 tokens" in one(dep, "max-model-len-fits")["message"]


def test_a_sized_flag_from_an_unresolved_variable_is_not_sized(capsys):
    # sized as DP 1, DeepSeek-R1's experts would not fit: a false FAIL; the variable is warned
    code, rep = check_json(capsys, "--cmd", "vllm serve deepseek-ai/DeepSeek-R1 "
                           "--data-parallel-size $DP --enable-expert-parallel", "--gpu", "h200")
    st = {c["id"]: c for c in rep["deployments"][0]["checks"]}
    assert code == 0 and st["weights-fit"]["status"] == "skip"
    assert st["weights-fit"]["message"] == ("not sized: --data-parallel-size is $DP, which "
                                            "kvplan cannot resolve (give it literally, or in "
                                            "the container's env)")
    assert st["flags-known"]["status"] == "warn"
    _, rep = check_json(capsys, "--cmd", "vllm serve Qwen/Qwen3-8B --kv-cache-dtype $KVD",
                        "--gpu", "h100")
    assert [c["status"] for c in rep["deployments"][0]["checks"]
            if c["id"] == "flag-values"] == ["pass"]


# --- flags per patch: the release named, early-0.6 flags, deprecations (review 22b) --------

def _flags_known(capsys, version, flag, env=""):
    code, rep = check_json(capsys, "--cmd", f"{env}vllm serve meta-llama/Llama-3.1-8B-Instruct "
                           f"--max-model-len 8192 {flag}", "--gpu", "h100",
                           "--vllm-version", version)
    return code, by_id(rep["deployments"][0])["flags-known"]


@pytest.mark.parametrize("version,flag,says,fix", [
    # each arg_utils.py: 0.11.1 dropped --rope-theta (0.11.2 did not)
    ("0.11.2", "--rope-theta 1000", "(vLLM 0.11.1 dropped it; 0.11.0 had it)",
     "remove --rope-theta"),
    # -dcp (--decode-context-parallel-size) is absent in 0.10.0-0.10.1.1
    ("0.10.1", "-dcp 1", "(vLLM 0.10.2 added it)", "remove -dcp, or run vLLM 0.10.2 or later"),
    ("0.6.5", "--generation-config auto", "(vLLM 0.6.6 added it)",
     "remove --generation-config, or run vLLM 0.6.6 or later"),
    ("0.8.3", "--speculative-model x", "(vLLM 0.8.3 dropped it; 0.8.2 had it)",
     "use --speculative-config '{\"model\": \"x\", \"num_speculative_tokens\": <n>}' "
     "instead"),
    ("0.10.2", "--enable-prompt-adapter", "(vLLM 0.10.2 dropped it; 0.10.1.1 had it)",
     "remove --enable-prompt-adapter"),
    # gone in 0.17-0.32, back in 0.33 as the negation of --enable-log-requests
    ("0.20.2", "--disable-log-requests",
     "(vLLM 0.17.0 dropped it; 0.16.0 had it; 0.33.0 has it again)",
     "remove --disable-log-requests (request logging is off by default from vLLM 0.10.1; "
     "--enable-log-requests turns it on)"),
    # only in 0.6.0-0.6.3.post1 / 0.6.0-0.6.1, before every parser record
    ("0.6.4", "--max-context-len-to-capture 8192",
     "(vLLM 0.6.4 dropped it; 0.6.3.post1 had it)", "use --max-seq-len-to-capture 8192 instead"),
    ("0.6.2", "--engine-use-ray", "(vLLM 0.6.1.post2 dropped it; 0.6.1 had it)",
     "remove --engine-use-ray"),
])
def test_flag_messages_name_the_patch_that_added_or_dropped_it(capsys, version, flag, says,
                                                               fix):
    code, (f,) = _flags_known(capsys, version, flag)
    assert code == 1 and f["status"] == "fail"
    assert f["message"] == (f"unknown flag {flag.split()[0]} for vLLM {version}: `vllm serve` "
                            f"exits with 'unrecognized arguments' {says}")
    assert f["fix"] == fix


def test_the_patch_that_adds_a_flag_accepts_it(capsys):
    assert _flags_known(capsys, "0.6.6", "--generation-config auto")[1][0]["status"] == "pass"
    assert _flags_known(capsys, "0.10.2", "-dcp 1")[1][0]["status"] == "pass"
    assert _flags_known(capsys, "0.8.2", "--speculative-model x --num-speculative-tokens 3"
                        )[1][0]["status"] == "pass"


def test_flags_only_in_early_06_patches_are_known_and_refused_at_start(capsys):
    # 0.6.0-0.6.3.post1 register --max-context-len-to-capture (type=int: 8192 is its value,
    # not a stray argument), and `ModelConfig.__init__` raises when it is given
    code, (f,) = _flags_known(capsys, "0.6.3", "--max-context-len-to-capture 8192")
    assert code == 1 and f["status"] == "fail"
    assert f["message"] == (
        "--max-context-len-to-capture is deprecated in vLLM 0.6.3 (0.6.4 drops it) and the "
        "engine refuses to start with it (its ModelConfig raises \"`max_context_len_to_capture`"
        " is deprecated\")")
    assert f["fix"] == "use --max-seq-len-to-capture 8192 instead"
    # 0.6.0-0.6.1 --engine-use-ray (store_true): `AsyncLLMEngine` raises unless
    # VLLM_ALLOW_ENGINE_USE_RAY is 1 or true
    code, (f,) = _flags_known(capsys, "0.6.1", "--engine-use-ray")
    assert code == 1 and f["status"] == "fail" and f["fix"] == (
        "remove --engine-use-ray, or set VLLM_ALLOW_ENGINE_USE_RAY=1")
    code, (f,) = _flags_known(capsys, "0.6.1", "--engine-use-ray",
                              env="VLLM_ALLOW_ENGINE_USE_RAY=1 ")
    assert code == 0 and f["status"] == "warn" and f["message"] == (
        "--engine-use-ray is deprecated in vLLM 0.6.1 (0.6.1.post2 drops it)")


@pytest.mark.parametrize("version", ["0.10.1", "0.12.0"])
def test_task_embed_is_replaced_by_the_pooling_runner_not_removed(capsys, version):
    # 0.10.1 `ModelConfig.__post_init__` maps a pooling task to `--runner pooling --convert
    # X`; removing --task would serve Qwen3 (a causal LM) as a generator
    code, (f,) = _flags_known(capsys, version, "--task embed")
    assert code == 0 and f["status"] == "warn"
    assert f["message"] == f"--task is deprecated in vLLM {version} (0.13.0 drops it)"
    assert f["fix"] == "use --runner pooling --convert embed instead"
    assert f["suggested"] == "--runner pooling --convert embed"
    _, (f,) = _flags_known(capsys, version, "--task classify")
    assert f["fix"] == "use --runner pooling --convert classify instead"
    _, (f,) = _flags_known(capsys, version, "--task score")  # classify or embed by the model
    assert f["fix"] == "use --runner pooling instead"


def test_task_before_its_deprecation_and_after_its_removal(capsys):
    # 0.10.0 has no --runner / --convert and does not mark --task deprecated
    assert _flags_known(capsys, "0.10.0", "--task embed")[1][0]["status"] == "pass"
    code, (f,) = _flags_known(capsys, "0.13.0", "--task embed")
    assert code == 1 and f["status"] == "fail"
    assert f["message"].endswith("(vLLM 0.13.0 dropped it; 0.12.0 had it)")
    assert f["fix"] == "use --runner pooling --convert embed instead"  # not -asc
    # the fix applied: a pooling deployment, whose generation checks are skipped
    code, rep = check_json(capsys, "--cmd", "vllm serve Qwen/Qwen3-0.6B --runner pooling "
                           "--convert embed --max-model-len 8192", "--gpu", "l4",
                           "--vllm-version", "0.13.0", "--workload", "chat", "--rate", "50")
    d = rep["deployments"][0]
    assert code == 0 and one(d, "flags-known")["status"] == "pass"
    assert one(d, "max-num-seqs-safe")["status"] == "skip"


def test_disable_log_requests_is_deprecated_from_0_10_1_only(capsys):
    # 0.10.0 `arg_utils.py`: a plain store_true, requests logged by default; 0.10.1 adds
    # --enable-log-requests (default off) and deprecates the old flag
    for version in ("0.9.2", "0.10.0"):
        assert _flags_known(capsys, version, "--disable-log-requests")[1][0]["status"] == "pass"
    code, (f,) = _flags_known(capsys, "0.10.1", "--disable-log-requests")
    assert code == 0 and f["status"] == "warn"
    assert f["message"] == "--disable-log-requests is deprecated in vLLM 0.10.1 (0.17.0 drops it)"
    assert f["fix"] == ("remove --disable-log-requests (request logging is off by default from "
                        "vLLM 0.10.1; --enable-log-requests turns it on)")


def test_other_deprecated_flags_name_their_replacement(capsys):
    _, (f,) = _flags_known(capsys, "0.11", "--override-pooler-config '{\"pooling_type\": "
                           "\"MEAN\"}'")
    assert f["fix"] == "use --pooler-config '{\"pooling_type\": \"MEAN\"}' instead"
    _, (f,) = _flags_known(capsys, "0.6", "--worker-use-ray")
    assert f["fix"] == "use --distributed-executor-backend ray instead"


def test_pooler_messages_name_the_deployments_release(capsys):
    # the 0.14 / 0.15 records are 0.14.1 / 0.15.1; 0.14.0 and 0.15.0 are read as themselves
    def values(version, cfg):
        _, rep = check_json(capsys, "--cmd", "vllm serve Qwen/Qwen3-0.6B --runner pooling "
                            f"--max-model-len 8192 --pooler-config '{cfg}'", "--gpu", "l4",
                            "--vllm-version", version)
        d = rep["deployments"][0]
        return one(d, "flag-values")["message"], one(d, "flags-known")["message"]

    v, k = values("0.14.0", '{"pooling_type": "MEAN", "seq_pooling_type": "MEAN"}')
    assert "which vLLM 0.14.0 refuses" in v and k == "3 flags known to vLLM 0.14.0"
    v, _ = values("0.15.0", '{"pooling_type": "MEAN", "foo": 1}')
    assert v.startswith("vLLM 0.15.0 ignores --pooler-config 'foo'")
    v, _ = values("0.15", '{"pooling_type": "MEAN", "foo": 1}')  # a minor alone: its record
    assert v.startswith("vLLM 0.15.1 ignores")


def test_registry_reads_each_release_it_has_read_as_itself():
    from kvplan.engines.vllm_registry import Registry

    assert Registry("0.14.0").release == "0.14.0" and Registry("0.14").release == "0.14.1"
    assert Registry("0.11.9").release == "0.11.2"  # not released: the nearest read below
    assert Registry("0.7").release == "0.7.3"
    assert Registry("0.10.0").lookup("--disable-log-requests").deprecated is False
    assert Registry("0.10.1").lookup("--disable-log-requests").deprecated is True
    assert Registry("0.6.3").lookup("--max-context-len-to-capture").takes_value is True
    assert Registry("0.6.4").lookup("--max-context-len-to-capture") is None


@pytest.mark.parametrize("version,status", [("0.11.0", "fail"), ("0.11.1", "pass"),
                                            ("0.19", "pass")])
def test_fp8_ds_mla_is_a_kv_dtype_from_0_11_1(capsys, version, status):
    # `CacheDType` (config/cache.py) lists fp8_ds_mla from 0.11.1; the 0.11 record is 0.11.0's
    _, rep = check_json(capsys, "--cmd", "vllm serve deepseek-ai/DeepSeek-V3.2 -tp 8 "
                        "--max-model-len 8192 --kv-cache-dtype fp8_ds_mla", "--gpu", "h200",
                        "--vllm-version", version)
    assert one(rep["deployments"][0], "flag-values")["status"] == status


# --- image tags: only vLLM's own images give the release -----------------------------------

@pytest.mark.parametrize("image,version", [
    ("vllm/vllm-openai-rocm:v0.28.0", "0.28.0"),
    ("docker.io/vllm/vllm-openai:v0.11.1", "0.11.1"),
    ("mirror.example.com:5000/vllm/vllm-openai:v0.11.1", "0.11.1"),  # a registry mirror
    ("rocm/vllm:v0.14.0_amd_dev", "0.14.0"),
    ("rocm/vllm:rocm6.3.1_instinct_vllm0.8.3_20250415", "0.8.3"),
    # not vLLM's release: llm-d's, KServe's, a private build's
    ("ghcr.io/llm-d/llm-d:v0.2.0", None),
    ("ghcr.io/llm-d/llm-d:v0.8.0", None),
    ("ghcr.io/llm-d/llm-d-cuda:v0.3.0", None),
    ("kserve/huggingfaceserver:v0.15.2", None),
    ("myregistry.io/inference/server:v0.9.0", None),
])
def test_only_vllm_images_tags_give_the_release(image, version):
    from kvplan.check.command import image_version

    assert image_version(image) == version


def test_an_llm_d_image_tag_is_not_read_as_the_vllm_release(capsys, tmp_path):
    src = tmp_path / "llmd.yaml"
    src.write_text("""\
apiVersion: apps/v1
kind: Deployment
metadata: {name: decode}
spec:
  template:
    spec:
      containers:
      - name: vllm
        image: ghcr.io/llm-d/llm-d:v0.2.0
        command: ["vllm", "serve", "Qwen/Qwen3-8B", "--max-model-len", "8192"]
        resources: {limits: {nvidia.com/gpu: 1}}
""")
    # v0.2.0 was refused as a vLLM release outside the modelled range (exit 2)
    code, out, err = run(capsys, "check", src, "--gpu", "h100")
    assert code == 0, err
    assert ("vllm 0.33 (assumed; set kvplan.io/vllm-version or --vllm-version)") in out
    code, rep = check_json(capsys, src, "--gpu", "h100", "--vllm-version", "0.10.1")
    d = rep["deployments"][0]
    assert (d["vllm_version"], d["vllm_version_source"]) == ("0.10.1", "--vllm-version")


def test_an_unread_tag_is_named_in_the_header_where_the_image_is_known(capsys, tmp_path):
    src = lws_variant(tmp_path, **{"vllm/vllm-openai:v0.33.0": "ghcr.io/llm-d/llm-d:v0.8.0"})
    code, out, err = run(capsys, "check", src)
    assert "vllm 0.33 (assumed: the tag of ghcr.io/llm-d/llm-d:v0.8.0 is llm-d's release, " \
           "not vLLM's; set kvplan.io/vllm-version or --vllm-version)" in out


# --- shell words, LeaderWorkerSet variables and groups (review 22b) -------------------------

def test_shell_words_as_sh_splits_and_expands_them():
    from kvplan.check.base import Token
    from kvplan.check.shellwords import arith, expand, lex

    def words(script, **known):
        out = []
        for it in lex(script):
            if it.kind == "word":
                from kvplan.check.shellwords import Word

                e = expand(Word(it.text, parts=it.parts), known.get)
                out.append(e.fields if e.ok else ("?", *e.fields))
        return out

    args = "--max-model-len 8192 --enforce-eager"
    assert words("serve $ARGS", ARGS=args) == [["serve"], args.split()]
    assert words('serve "$ARGS" ${ARGS}', ARGS=args) == [["serve"], [args], args.split()]
    assert words("serve $EMPTY \"$EMPTY\" ''", EMPTY="") == [["serve"], [], [""], [""]]
    assert words("--x=$A", A="1 2") == [["--x=1", "2"]]
    # arithmetic and command substitution are one word, however many spaces they hold
    assert words("-dp $(( LWS_GROUP_SIZE * DPL )) -dpl $((DPL))", LWS_GROUP_SIZE="2",
                 DPL="8") == [["-dp"], ["16"], ["-dpl"], ["8"]]
    assert words("$(( N * 8 )) $( cat /x ) `hostname`") == [
        ("?", "$(( N * 8 ))"), ("?", "$( cat /x )"), ("?", "`hostname`")]
    assert words("${I:-0} ${I:-0}", I="") == [["0"], ["0"]]
    assert words("${I:-0}", I="3") == [["3"]]
    assert [it.kind for it in lex("a 2>&1 >/dev/null | b # c\nd <<EOF\nx y\nEOF\ne")] == [
        "word", "skip", "skip", "op", "word", "skip", "op", "word", "skip", "op", "skip",
        "skip", "word"]
    assert arith("8 + (I - 1) * 4", {"I": "3"}.get)[0] == 16
    assert arith("-7 / 2", {}.get)[0] == -3 and arith("-7 % 2", {}.get)[0] == -1
    assert arith("I * 8", {}.get) == (None, ["I"], False)
    assert arith("1 << 2", {}.get) == (None, [], True)  # not evaluated: left unresolved
    assert expand(Token("$X"), {"X": "a b"}.get).fields == ["$X"]  # a word as written


def test_unquoted_variable_of_several_flags_is_split(capsys, tmp_path):
    # review 22b #2: ARGS holds two flags; sh passes them as three words, "$ARGS" as one
    f = tmp_path / "s2.sh"
    f.write_text('#!/bin/sh\nARGS="--max-model-len 8192 --enforce-eager"\n'
                 "export CUDA_VISIBLE_DEVICES=0\n"
                 "exec vllm serve meta-llama/Llama-3.1-8B-Instruct $ARGS --max-num-seqs 64\n")
    code, rep = check_json(capsys, f, "--gpu", "l4", "--vllm-version", "0.11.0")
    (dep,) = rep["deployments"]
    assert code == 0 and dep["max_model_len"] == 8192
    assert one(dep, "flags-known")["message"] == "3 flags known to vLLM 0.11.0"
    assert one(dep, "max-model-len-fits")["status"] == "pass"
    f.write_text(f.read_text().replace(" $ARGS ", ' "$ARGS" '))
    code, rep = check_json(capsys, f, "--gpu", "l4", "--vllm-version", "0.11.0")
    fk = one(rep["deployments"][0], "flags-known")
    assert code == 1 and fk["status"] == "fail" and fk["current"] == \
        "--max-model-len 8192 --enforce-eager"
    # a container's env value in a `sh -c` script is split too
    d = tmp_path / "d.yaml"
    d.write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  template:\n"
        "    spec:\n      nodeSelector: {nvidia.com/gpu.product: NVIDIA-L4}\n"
        "      containers:\n      - name: vllm\n        image: vllm/vllm-openai:v0.11.0\n"
        "        env:\n        - {name: EXTRA_ARGS, value: \"--max-model-len 8192 "
        "--enforce-eager\"}\n"
        "        command: [/bin/sh, -c]\n        args:\n        - |\n"
        "          vllm serve meta-llama/Llama-3.1-8B-Instruct $EXTRA_ARGS --max-num-seqs 64\n"
        "        resources: {limits: {nvidia.com/gpu: 1}}\n")
    code, rep = check_json(capsys, d)
    assert code == 0 and rep["deployments"][0]["max_model_len"] == 8192
    # Kubernetes' $(VAR) in an args item substitutes within the item: one argument
    d.write_text(d.read_text().replace(
        "        command: [/bin/sh, -c]\n        args:\n        - |\n"
        "          vllm serve meta-llama/Llama-3.1-8B-Instruct $EXTRA_ARGS --max-num-seqs 64\n",
        "        args: [meta-llama/Llama-3.1-8B-Instruct, $(EXTRA_ARGS)]\n"))
    code, rep = check_json(capsys, d)
    fk = one(rep["deployments"][0], "flags-known")
    assert code == 1 and fk["current"] == "--max-model-len 8192 --enforce-eager"


def test_arithmetic_is_one_word(capsys, tmp_path):
    # review 22b #3: `$(( … ))` with spaces is one word, computed from known values
    code, rep = check_json(capsys, "--gpu", "h100", "--vllm-version", "0.12", "--cmd",
                           "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 8192 "
                           "--data-parallel-size $(( 2 * 1 ))")
    dep = rep["deployments"][0]
    assert code == 0 and one(dep, "gpu-count-matches")["message"] == (
        "TP x PP x DP = 2; the GPU count is not given")
    code, rep = check_json(capsys, "--gpu", "h100", "--cmd",
                           "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 8192 "
                           "--max-num-seqs $( cat /etc/seqs ) -tp $(( N * 2 ))")
    st = by_id(rep["deployments"][0])
    assert [c["message"] for c in st["flags-known"]] == [
        "'$( cat /etc/seqs )' is computed when the script runs; that value is not checked",
        "'$(( N * 2 ))' refers to a variable kvplan cannot resolve (a secret, config map or "
        "host variable); that value is not checked"]
    assert st["gpu-count-matches"][0]["message"] == (
        "not counted: -tp is $(( N * 2 )), which kvplan cannot resolve")
    # kvplan's own fix for a shared start rank, applied as written (review 22b's
    # fixapplied.yaml, at size 3)
    f = tmp_path / "fix.yaml"
    f.write_text(
        "apiVersion: leaderworkerset.x-k8s.io/v1\nkind: LeaderWorkerSet\nmetadata: {name: rk}\n"
        "spec:\n  leaderWorkerTemplate:\n    size: 3\n    leaderTemplate:\n      spec:\n"
        "        nodeSelector: {nvidia.com/gpu.product: NVIDIA-H200}\n        containers:\n"
        "        - name: vllm\n          image: vllm/vllm-openai:v0.12.0\n"
        "          command: [vllm, serve, deepseek-ai/DeepSeek-R1]\n          args: [-dp, '24', "
        "-dpl, '8', --data-parallel-start-rank, '0', --enable-expert-parallel, "
        "--max-model-len, '8192']\n          resources: {limits: {nvidia.com/gpu: 8}}\n"
        "    workerTemplate:\n      spec:\n"
        "        nodeSelector: {nvidia.com/gpu.product: NVIDIA-H200}\n        containers:\n"
        "        - name: vllm\n          image: vllm/vllm-openai:v0.12.0\n"
        "          command: [bash, -c]\n          args: ['exec vllm serve deepseek-ai/DeepSeek-R1 "
        "-dp 24 -dpl 8 --data-parallel-start-rank $(( LWS_WORKER_INDEX * 8 )) --headless "
        "--enable-expert-parallel --max-model-len 8192']\n"
        "          resources: {limits: {nvidia.com/gpu: 8}}\n")
    code, rep = check_json(capsys, f)
    lead, work = rep["deployments"]
    assert one(work, "flags-known")["message"] == "6 flags known to vLLM 0.12.0"
    c = one(lead, "lws-group-consistent")
    assert code == 0 and c["status"] == "pass" and c["message"].endswith(
        "8 on the leader + 2 x 8 on the workers = 24 data-parallel ranks (start ranks 0, 8, "
        "16, read pod by pod from LWS_WORKER_INDEX)")


def test_llm_d_decode_group_is_resolved_from_lws_variables(capsys):
    # review 22b #3, #6, #16: LWS_GROUP_SIZE is the group's size, so the DP size is 2 x 8;
    # the start ranks are read pod by pod; LWS_LEADER_ADDRESS is no secret
    src = FIX / "lws-llmd-decode.yaml"
    code, rep = check_json(capsys, src)
    first, second = rep["deployments"]
    assert first["gpus"] == 16 and first["kv_cache_tokens"] > 0
    for dep in (first, second):
        assert one(dep, "flags-known")["status"] == "pass"
        assert one(dep, "weights-fit")["status"] == "pass"
    g = one(first, "gpu-count-matches")
    assert (g["status"], g["message"]) == ("pass", (
        "the pods' engines use 2 pods x 8 = 16 GPUs (TP x PP x local DP on each pod), the 16 "
        "allocated"))
    c = one(first, "lws-group-consistent")
    assert c["status"] == "pass" and "not compared" not in c["message"]
    assert "--data-parallel-size 16," in c["message"] and c["message"].endswith(
        "; 2 pods x 8 = 16 data-parallel ranks (start ranks 0, 8, read pod by pod from "
        "LWS_WORKER_INDEX)")
    assert "--max-model-len 163840 (the model's default)" in c["message"]
    # the group's replicas: counted once, on the group's entry
    assert first["replicas_needed"] == 1 and second["replicas_needed"] is None


def test_gpu_count_skips_a_layout_from_a_variable(capsys, tmp_path):
    # review 22b #6: a DP size kvplan cannot resolve: no "8 idle" with a fix that halves the
    # group
    f = tmp_path / "l.yaml"
    f.write_text((FIX / "lws-llmd-decode.yaml").read_text().replace(
        "$((LWS_GROUP_SIZE * DP_SIZE_LOCAL))", "$DP_SIZE").replace(
        "          env:\n", "          env:\n          - {name: DP_SIZE, valueFrom: "
        "{configMapKeyRef: {name: dp, key: size}}}\n"))
    code, rep = check_json(capsys, f)
    g = one(rep["deployments"][0], "gpu-count-matches")
    assert (g["status"], g["message"], g["current"]) == (
        "skip", "not counted: --data-parallel-size is $DP_SIZE, which kvplan cannot resolve", 16)


@pytest.mark.parametrize("leader_env,leader_flag,worker_flag,status,message,fix", [
    # 0.17 no longer reads the variable: the leader runs the default, the worker DeepEP
    (["VLLM_ALL2ALL_BACKEND", "deepep_low_latency"], None, "deepep_low_latency", "fail",
     "all-to-all backend differs: the leader runs allgather_reducescatter (the release's "
     "default: vLLM 0.17.1 does not read VLLM_ALL2ALL_BACKEND=deepep_low_latency), the worker "
     "deepep_low_latency (line 25): the pods exchange tokens differently and the group fails "
     "at start-up", "--all2all-backend deepep_low_latency in place of VLLM_ALL2ALL_BACKEND (as "
     "the worker)"),
    # the leader spells out the default the worker takes
    (None, "allgather_reducescatter", None, "pass", None, None),
    # the worker names another backend than the leader's
    (None, "deepep_high_throughput", "deepep_low_latency", "fail",
     "all-to-all backend differs: the worker runs deepep_low_latency, the leader "
     "deepep_high_throughput (line 15): the pods exchange tokens differently and the group "
     "fails at start-up", "--all2all-backend deepep_high_throughput (as the leader)"),
])
def test_lws_all2all_backend_as_each_release_resolves_it(capsys, tmp_path, leader_env,
                                                         leader_flag, worker_flag, status,
                                                         message, fix):
    # review 22b #4
    def args(*extra):
        return ', '.join(f'"{a}"' for a in extra)

    env = f"\n          env: [{{name: {leader_env[0]}, value: {leader_env[1]}}}]" \
        if leader_env else ""
    lflag = ["--all2all-backend", leader_flag] if leader_flag else []
    wflag = ["--all2all-backend", worker_flag] if worker_flag else []
    f = tmp_path / "a.yaml"
    f.write_text(
        "apiVersion: leaderworkerset.x-k8s.io/v1\nkind: LeaderWorkerSet\nmetadata: {name: mm}\n"
        "spec:\n  replicas: 1\n  leaderWorkerTemplate:\n    size: 2\n    leaderTemplate:\n"
        "      spec:\n        nodeSelector: {nvidia.com/gpu.product: NVIDIA-H200}\n"
        "        containers:\n        - name: vllm\n          image: vllm/vllm-openai:v0.17.1"
        f"{env}\n          command: [vllm, serve, deepseek-ai/DeepSeek-R1]\n"
        "          args: [" + args("-dp", "16", "-dpl", "8", "--enable-expert-parallel",
                                   "--max-model-len", "8192", *lflag) + "]\n"
        "          resources: {limits: {nvidia.com/gpu: 8}}\n    workerTemplate:\n"
        "      spec:\n        nodeSelector: {nvidia.com/gpu.product: NVIDIA-H200}\n"
        "        containers:\n        - name: vllm\n          image: vllm/vllm-openai:v0.17.1\n"
        "          command: [vllm, serve, deepseek-ai/DeepSeek-R1]\n"
        "          args: [" + args("-dp", "16", "-dpl", "8", "--data-parallel-start-rank", "8",
                                   "--headless", "--enable-expert-parallel", "--max-model-len",
                                   "8192", *wflag) + "]\n"
        "          resources: {limits: {nvidia.com/gpu: 8}}\n")
    code, rep = check_json(capsys, f)
    c = one(rep["deployments"][0], "lws-group-consistent")
    assert c["status"] == status
    if status == "pass":
        assert "all-to-all backend allgather_reducescatter" in c["message"] and code == 0
    else:
        assert (c["message"], c["fix"]) == (message, fix) and code == 1
    if leader_env:  # the finding points at the leader's ignored variable
        assert (c["line"], c["current"], c["suggested"]) == (
            line_of(f, "VLLM_ALL2ALL_BACKEND"), "allgather_reducescatter", "deepep_low_latency")


def test_lws_all2all_variable_read_by_0_11_1_agrees_with_the_flag(capsys, tmp_path):
    # 0.11.1 reads VLLM_ALL2ALL_BACKEND when the flag is unset: leader and worker agree
    f = lws_variant(tmp_path, **{
        "v0.33.0": "v0.11.1",
        '\n                 "--enable-expert-parallel", "--all2all-backend", "deepep_low_latency",':
        '\n                 "--enable-expert-parallel",',
        'command: ["vllm", "serve", "deepseek-ai/DeepSeek-R1"]\n          args: '
        '["--data-parallel-size", "16", "--data-parallel-size-local", "8",\n'
        '                 "--data-parallel-start-rank", "0"':
        'env: [{name: VLLM_ALL2ALL_BACKEND, value: deepep_low_latency}]\n'
        '          command: ["vllm", "serve", "deepseek-ai/DeepSeek-R1"]\n          args: '
        '["--data-parallel-size", "16", "--data-parallel-size-local", "8",\n'
        '                 "--data-parallel-start-rank", "0"'})
    code, rep = check_json(capsys, f)
    c = one(rep["deployments"][0], "lws-group-consistent")
    assert c["status"] == "pass" and "all-to-all backend deepep_low_latency" in c["message"]


def test_lws_worker_replicas_needed_is_the_groups(capsys, tmp_path):
    # review 22b #5: the worker's entry carries no replica count of its own engines
    f = lws_variant(tmp_path, **{"  name: r1-wide-ep\n": "  name: r1-wide-ep\n  annotations: "
                                 "{kvplan.io/workload: chat, kvplan.io/rate: '300'}\n"})
    code, rep = check_json(capsys, f)
    lead, work = rep["deployments"]
    # DeepEP LL's 256-token budget keeps about 55 of the 256 running: 5 groups for 300 req/s
    assert lead["replicas_needed"] == one(lead, "replicas-cover-rate")["suggested"] == 5
    assert work["replicas_needed"] is None
    assert one(work, "replicas-cover-rate")["status"] == "skip"
    # review 22b #16: the cap quoted is the one applied (DeepEP LL's 256-token budget)
    s = one(lead, "max-num-seqs-safe")
    # the cap `kvplan recommend` would emit: the batch that budget keeps refilled
    assert s["suggested"] == lead["safe_max_num_seqs"] == 55
    assert s["message"].endswith("past 55 running the token budget cannot refill the batch, "
                                 "so kvplan recommend sets 55)")
    assert s["message"].startswith(
        "the default max-num-seqs 256 <= the safe 256 on the pool that 256 leaves for the "
        "declared chat workload (max_num_batched_tokens 256 caps it; the KV pool alone holds ")


def test_lws_nnodes_and_node_ranks(capsys, tmp_path):
    # review 22b #7: one engine over the group's pods (--nnodes, 0.11.1+)
    src = FIX / "lws-nnodes.yaml"
    code, rep = check_json(capsys, src)
    lead, work = rep["deployments"]
    c = one(lead, "lws-group-consistent")
    assert code == 0 and c["status"] == "pass" and c["message"].endswith(
        "--nnodes 2, expert parallelism off, --max-model-len 32768; node ranks 0 (leader), 1 "
        "(worker pod with LWS_WORKER_INDEX 1) of --nnodes 2")
    assert one(work, "flags-known")["status"] == "pass"  # $(LWS_...) are the controller's
    assert one(lead, "gpu-count-matches")["message"] == (
        "the pods' engines use 4 on the leader + 1 x 4 on the worker = 8 GPUs (TP x PP x local "
        "DP on each pod), the 8 allocated")

    def group(**subs):
        f = tmp_path / "n.yaml"
        text = src.read_text()
        for old, new in subs.items():
            assert old in text, old
            text = text.replace(old, new)
        f.write_text(text)
        _, rep = check_json(capsys, f)
        return f, by_id(rep["deployments"][0])["lws-group-consistent"]

    # the worker's --nnodes and node rank as the review's nnodes-bad.yaml
    f, got = group(**{'"--nnodes", "2", "--node-rank", "$(LWS_WORKER_INDEX)"':
                      '"--nnodes", "3", "--node-rank", "0"'})
    assert [(c["status"], c["message"], c["fix"]) for c in got] == [
        ("fail", "--nnodes differs: the worker has 3, the leader 2 (line 18): every pod of the "
         "group must start vLLM alike: the engine spread over the pods (--nnodes) hangs at its "
         "handshake or fails at start-up", "--nnodes 2 (as the leader)"),
        ("fail", "the worker runs --node-rank 0, as the leader does: both act as node 0, the "
         "one that opens the group, and the engine never starts", "--node-rank 1")]
    # a literal rank every worker pod shares, and --nnodes short of the group
    f, got = group(**{"size: 2": "size: 3",
                      '"--node-rank", "$(LWS_WORKER_INDEX)"': '"--node-rank", "1"'})
    assert [(c["message"], c["fix"]) for c in got] == [
        ("--nnodes 2 but the group has 3 pods (leaderWorkerTemplate.size): node ranks 2 and "
         "up are refused (node_rank must be less than nnodes)", "--nnodes 3"),
        ("the 2 worker pods of the worker template all run --node-rank 1: the nodes need a "
         "rank each and the engine never starts", "--node-rank $(LWS_WORKER_INDEX)")]
    assert got[0]["line"] == line_of(f, '"--nnodes", "2"')
    # ranks from LWS_WORKER_INDEX past --nnodes
    _, got = group(**{"size: 2": "size: 3"})
    assert [c["message"] for c in got][-1] == (
        "the worker pod with LWS_WORKER_INDEX 2 runs --node-rank 2, not below --nnodes 2: vLLM "
        "refuses to start")
    # the leader is not node 0, though the pods reach node 0 at the leader's address
    _, got = group(**{'"--nnodes", "2", "--node-rank", "0"': '"--nnodes", "2", "--node-rank", '
                      '"1"', '"--node-rank", "$(LWS_WORKER_INDEX)"': '"--node-rank", "0"'})
    assert [c["message"] for c in got] == [
        "the leader runs --node-rank 1: the pods reach node 0 at --master-addr "
        "$(LWS_LEADER_ADDRESS), the leader's address, where node 0 does not run"]


def test_lws_group_messages(capsys, tmp_path):
    # review 22b #16: a rank fix that stays clear of the leader's ranks
    f = lws_variant(tmp_path, **{'"--data-parallel-size", "16"': '"--data-parallel-size", "12"'})
    code, rep = check_json(capsys, f)
    got = by_id(rep["deployments"][0])["lws-group-consistent"]
    assert [(c["message"], c["fix"]) for c in got] == [
        ("the group's pods run 8 on the leader + 1 x 8 on the worker = 16 data-parallel ranks "
         "but --data-parallel-size is 12: 4 of them have no place in the group",
         "--data-parallel-size 16 on every pod, or --data-parallel-size-local values that add "
         "up to 12")]
    # two pods that run engines of their own: no data-parallel group to hang, and the GPUs
    # each pod's engine uses
    f = tmp_path / "s.yaml"
    f.write_text(
        "apiVersion: leaderworkerset.x-k8s.io/v1\nkind: LeaderWorkerSet\nmetadata: {name: s}\n"
        "spec:\n  leaderWorkerTemplate:\n    size: 2\n    leaderTemplate:\n      spec:\n"
        "        nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}\n"
        "        containers:\n        - name: vllm\n          image: vllm/vllm-openai:v0.10.2\n"
        "          command: [vllm, serve, meta-llama/Llama-3.1-8B-Instruct]\n"
        "          args: [--max-model-len, '32768']\n"
        "          resources: {limits: {nvidia.com/gpu: 1}}\n    workerTemplate:\n      spec:\n"
        "        containers:\n        - name: vllm\n          image: vllm/vllm-openai:v0.10.2\n"
        "          command: [vllm, serve, meta-llama/Llama-3.1-8B-Instruct]\n"
        "          args: [-tp, '4', --max-model-len, '32768']\n"
        "          resources: {limits: {nvidia.com/gpu: 4}}\n")
    code, rep = check_json(capsys, f)
    lead = rep["deployments"][0]
    c = one(lead, "lws-group-consistent")
    assert c["message"] == (
        "--tensor-parallel-size differs: the worker has 4, the leader 1 (line 13): the pods "
        "run engines of their own (no data-parallel group or --nnodes joins them), so one "
        "group would serve two different deployments")
    g = one(lead, "gpu-count-matches")
    assert (g["status"], g["message"]) == ("pass", (
        "the pods' engines use 1 on the leader + 1 x 4 on the worker = 5 GPUs (TP x PP x local "
        "DP on each pod), the 5 allocated"))
    f.write_text(f.read_text().replace("nvidia.com/gpu: 4}", "nvidia.com/gpu: 8}"))
    _, rep = check_json(capsys, f)
    g = one(rep["deployments"][0], "gpu-count-matches")
    assert (g["status"], g["fix"], g["line"]) == ("warn", "nvidia.com/gpu: 4 on the worker",
                                                  line_of(f, "nvidia.com/gpu: 8"))


def test_lws_variables_are_named_as_the_controllers(capsys, tmp_path):
    # review 22b #16: LWS_* are set by the LeaderWorkerSet controller, not secrets; the
    # leader's address as a flag's value is not a warning
    f = lws_variant(tmp_path, **{'"--data-parallel-rpc-port", "5555",\n                 '
                                 '"--headless"': '"--data-parallel-address", '
                                 '"$(LWS_LEADER_ADDRESS)", "--headless"',
                                 '"--data-parallel-start-rank", "8"':
                                 '"--data-parallel-start-rank", "$(SECRET_RANK)"'})
    code, rep = check_json(capsys, f)
    work = rep["deployments"][1]
    fk = one(work, "flags-known")
    assert fk["message"] == ("'$(SECRET_RANK)' refers to a variable kvplan cannot resolve (a "
                             "secret, config map or host variable); that value is not checked")
    f.write_text(f.read_text().replace('"$(SECRET_RANK)"', '"$(LWS_WORKER_INDEX)0"'))
    code, rep = check_json(capsys, f)
    fk = one(rep["deployments"][1], "flags-known")
    assert fk["status"] == "pass"  # read pod by pod: LWS_WORKER_INDEX 1 -> rank 10
    c = one(rep["deployments"][0], "lws-group-consistent")
    assert c["message"] == (
        "the worker pod with LWS_WORKER_INDEX 1 runs data-parallel ranks 10-17 "
        "(--data-parallel-start-rank 10, --data-parallel-size-local 8), past "
        "--data-parallel-size 16 (ranks 0-15): vLLM has no such rank and the group never forms")
    assert (c["fix"], c["current"], c["suggested"]) == ("--data-parallel-start-rank 8", 10, 8)
    code, rep = check_json(capsys, "--gpu", "h100", "--cmd", "vllm serve "
                           "meta-llama/Llama-3.1-8B-Instruct $LWS_LEADER_ADDRESS")
    # outside a LeaderWorkerSet the name means nothing to kvplan
    assert "(a secret, config map or host variable)" in one(
        rep["deployments"][0], "flags-known")["message"]


def test_script_line_numbers_in_an_else_arm(capsys, tmp_path):
    # review 22b #15: the assignment's own line, after `else` and a comment
    f = tmp_path / "start.sh"
    f.write_text('#!/bin/bash\nMODEL=meta-llama/Llama-3.1-8B-Instruct\n'
                 'if [ "$ROLE" = "a" ]; then\n  EXTRA=""\nelse\n  # comment\n'
                 '  EXTRA="--enforce-eager"\nfi\nexport CUDA_VISIBLE_DEVICES=0\n'
                 'exec vllm serve $MODEL --max-model-len 8192 $EXTRA\n')
    code, rep = check_json(capsys, f, "--gpu", "l4")
    fk = one(rep["deployments"][0], "flags-known")
    assert fk["message"] == (
        "'$EXTRA' refers to a variable kvplan cannot resolve (EXTRA is assigned different "
        "values in the script's branches (lines 4 and 7)); the arguments it expands to are "
        "not checked") and fk["line"] == 10


def test_unbalanced_arithmetic_in_a_script_is_not_an_internal_error(capsys, tmp_path):
    # found by fuzzing the shell reader: "$((" whose inside does not close was exit 3
    f = tmp_path / "start.sh"
    f.write_text('#!/bin/sh\nX=$(({;\n);$(-))\n'
                 "vllm serve Qwen/Qwen3-8B --max-model-len 8192 $((1 + 2))\n")
    code, out, err = run(capsys, "check", str(f), "--gpu", "h100")
    assert code in (0, 1, 2) and "internal error" not in err


def test_script_defaults_of_unset_variables_are_checked_with_a_warning(capsys, tmp_path):
    """`${X:-8192}` with X set nowhere kvplan reads is checked with its default, as sh
    expands it when X is unset, and a warning names the variables the environment may set;
    a variable the container's env sets (a secret, the pod's LWS_WORKER_INDEX) keeps the
    word unresolved."""
    from kvplan.check.shellwords import Word, expand, lex

    def exp(text, is_set=None, **known):
        it = lex(text)[0]
        return expand(Word(it.text, parts=it.parts), known.get, is_set=is_set)

    e = exp("${LEN:-16384}")
    assert (e.fields, e.ok, e.defaulted) == (["16384"], True, ["LEN"])
    assert exp("${LEN-1}").fields == ["1"] and exp("${LEN:=2}").fields == ["2"]
    assert exp("${LEN:-16384}", LEN="8192").defaulted == []  # known: no default
    e = exp("${LEN:-16384}", is_set={"LEN"}.__contains__)
    assert (e.ok, e.missing) == (False, ["LEN"])  # set to a value kvplan does not know
    e = exp("$(( ${N:-2} * 128 ))")
    assert (e.fields, e.defaulted) == (["256"], ["N"])
    assert exp("${A:-$B}").missing == ["A", "B"]  # a default kvplan cannot expand either
    # review 23d #3: the default's quotes are removed, and a quoted default is one field
    assert exp('${MML:-"8192"}').fields == ["8192"] == exp("${MML:-'8192'}").fields
    assert exp('${EXTRA:-"a b c"}').fields == ["a b c"]
    assert exp("${EXTRA:-a b}").fields == ["a", "b"]
    f = tmp_path / "run.sh"
    f.write_text("#!/bin/bash\nLEN=${MAX_LEN:-32768}\n"
                 "exec vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len $LEN "
                 "--max-num-seqs $(( ${SCALE:-2} * 128 )) ${EXTRA_ARGS:-}\n")
    code, rep = check_json(capsys, f, "--gpu", "h100")
    dep = rep["deployments"][0]
    w = one(dep, "flags-known")
    assert (w["status"], w["line"]) == ("warn", 3)
    assert w["message"] == (
        "checked with the script's defaults (32768 from MAX_LEN, 256 from SCALE, nothing "
        "from EXTRA_ARGS): neither the script nor the container's env sets MAX_LEN, SCALE, "
        "EXTRA_ARGS; an environment that sets them runs other values")
    # sized with the defaults: 32,768 tokens on an H100 (was skipped as unresolved)
    assert one(dep, "max-model-len-fits")["status"] == "pass"
    assert "--max-model-len 32768 fits" in one(dep, "max-model-len-fits")["message"]


def test_refused_prompts_are_planned_as_recommend_plans_them(capsys):
    """review 23d #1: agent at 8K refuses 60.2 % of the prompts (HTTP 400); recommend plans 5
    L4s for the 0.398 req/s served, and check of that plan's command now asks for the same 5
    (it asked for 12 at the full 1 req/s) and warns of the refused share."""
    code, out, _ = run(capsys, "recommend", "llama-3.1-8b", "--gpu", "l4", "--max-model-len",
                       "8K", "--workload", "agent", "--rate", "1", "--json")
    plan = json.loads(out)
    assert (plan["replicas"], plan["max_num_seqs"], plan["rejected_share"]) == (5, 4, 0.6016)
    code, rep = check_json(capsys, "--cmd", "vllm serve meta-llama/Llama-3.1-8B --max-model-len "
                           "8192 --max-num-seqs 4", "--gpu", "l4", "--workload", "agent",
                           "--rate", "1")
    dep = rep["deployments"][0]
    assert dep["replicas_needed"] == 5
    w = one(dep, "workload-fits-max-model-len")
    assert w["status"] == "warn" and w["message"].startswith(
        "60.2% of the declared agent workload's prompts are 8,192 tokens or more")
    assert "60.2% of the declared rate is refused" in one(dep, "replicas-cover-rate")["message"]
    # nearly all refused: nothing to plan
    code, rep = check_json(capsys, "--cmd", "vllm serve meta-llama/Llama-3.1-8B --max-model-len "
                           "1024", "--gpu", "l4", "--workload", "agent", "--rate", "1")
    dep = rep["deployments"][0]
    assert one(dep, "workload-fits-max-model-len")["status"] == "fail"
    assert one(dep, "replicas-cover-rate")["status"] == "skip"


# --- review 23c: how deployments are read ------------------------------------------------------

def test_a_digest_pinned_tag_gives_the_release(capsys):
    """`image: vllm/vllm-openai:v0.11.0@sha256:…` runs 0.11.0: --swap-space (0.11.0
    `engine/arg_utils.py`; 0.18.0 dropped it) is known, not a failure against 0.33."""
    src = FIX / "deployment-digest-pinned.yaml"
    code, rep = check_json(capsys, src)
    (dep,) = rep["deployments"]
    assert dep["vllm_version"] == "0.11.0"
    assert dep["vllm_version_source"] == ("image vllm/vllm-openai:v0.11.0@sha256:"
                                          + "0123456789abcdef" * 4)
    known = one(dep, "flags-known")
    assert known["status"] == "pass" and known["message"] == "3 flags known to vLLM 0.11.0"
    assert code == 0


def test_a_dockerfile_arg_default_names_the_image_tag(capsys):
    """`ARG VLLM_VERSION=v0.11.0` before the first FROM is in scope for `FROM
    …:${VLLM_VERSION}` (Docker's ARG/FROM rule); `FROM serve` keeps that stage's image, ENV
    (MAX_LEN from the stage's ARG default) and ENTRYPOINT."""
    src = FIX / "Dockerfile.vllm-arg"
    code, rep = check_json(capsys, src, "--gpu", "l40s")
    (dep,) = rep["deployments"]
    assert dep["vllm_version"] == "0.11.0"
    assert dep["vllm_version_source"] == (
        "image docker.io/vllm/vllm-openai:v0.11.0 (ARG REGISTRY's default docker.io, "
        "ARG VLLM_VERSION's default v0.11.0)")
    assert one(dep, "flags-known")["message"] == "4 flags known to vLLM 0.11.0"
    mml = one(dep, "max-model-len-fits")
    assert mml["status"] == "pass" and mml["current"] == 32768
    # the ENTRYPOINT's "$@" is the final stage's CMD (after "--", which is $0)
    util = one(dep, "gpu-memory-utilization-range")
    assert util["status"] == "warn" and util["current"] == 0.97
    assert util["line"] == line_of(src, 'CMD ["--max-num-seqs"')
    assert code == 0


def test_sh_c_arguments_are_the_scripts_positional_parameters(capsys):
    """`command: [/bin/sh, -c, SCRIPT, --]` + `args:`: POSIX `sh -c SCRIPT NAME ARG…` sets $0 to
    NAME (`--`) and $1… to the args, so "$@" is the args list, each flag located where it is
    written. vLLM refuses both: 500000 > Qwen2.5-7B's 32768, and TP 4 on one GPU."""
    src = FIX / "deployment-sh-dollar-at.yaml"
    code, rep = check_json(capsys, src)
    (dep,) = rep["deployments"]
    assert code == 1
    known = one(dep, "flags-known")
    assert known["status"] == "pass" and known["message"] == "3 flags known to vLLM 0.20.2"
    mml = one(dep, "max-model-len-fits")
    assert mml["status"] == "fail" and mml["line"] == line_of(src, "- --max-model-len=500000")
    assert mml["message"] == ("--max-model-len 500000 exceeds the model's maximum of 32768 "
                              "(max_position_embeddings): the engine refuses to start")
    gpus = one(dep, "gpu-count-matches")
    assert gpus["status"] == "fail" and (gpus["current"], gpus["suggested"]) == (1, 4)
    assert one(dep, "tensor-parallel-valid")["line"] == line_of(src, "--tensor-parallel-size=4")


POD = """apiVersion: v1
kind: Pod
metadata: {{name: p}}
spec:
  nodeSelector: {{nvidia.com/gpu.product: NVIDIA-L40S}}
  containers:
    - name: vllm
      image: vllm/vllm-openai:v0.20.2
      command: {command}
      resources: {{limits: {{nvidia.com/gpu: 1}}}}
"""


@pytest.mark.parametrize("command,model,known,max_len", [
    # `shift` drops the model from "$@"; $1 read before it
    (["bash", "-c", 'm=$1; shift; exec vllm serve "$m" --max-model-len 16k "$@"', "entry",
      "Qwen/Qwen2.5-7B-Instruct", "--max-num-seqs", "64"],
     "Qwen/Qwen2.5-7B-Instruct", "2 flags known to vLLM 0.20.2", 16000),
    # bash options after -c, "${1}" and `set --` replacing the parameters (the old
    # --max-num-seqs 512 is gone)
    (["bash", "-c", "-e", 'set -euo pipefail; set -- "${1}" --max-model-len 8192; '
      'exec vllm serve "$@"', "x", "Qwen/Qwen2.5-7B-Instruct", "--max-num-seqs", "512"],
     "Qwen/Qwen2.5-7B-Instruct", "1 flag known to vLLM 0.20.2", 8192),
    # no arguments after the script: "$@" is no word at all, not a value to warn about
    (["sh", "-c", 'exec vllm serve Qwen/Qwen2.5-7B-Instruct "$@"'],
     "Qwen/Qwen2.5-7B-Instruct", "no flags to check", 32768),
    # a shift inside a branch may not run: the parameters are not known after it
    (["sh", "-c", 'if [ -n "$DEBUG" ]; then shift; fi; exec vllm serve "$@"', "--",
      "Qwen/Qwen2.5-7B-Instruct"], "$@",
     "'$@' is computed when the script runs; that value is not checked", None),
])
def test_positional_parameters_follow_shift_and_set(capsys, tmp_path, command, model, known,
                                                    max_len):
    f = tmp_path / "pod.yaml"
    f.write_text(POD.format(command=json.dumps(command)))
    _, rep = check_json(capsys, f)
    (dep,) = rep["deployments"]
    assert dep["model"] == model and dep["max_model_len"] == max_len
    assert [c["message"] for c in by_id(dep)["flags-known"]] == [known]


def test_a_script_files_arguments_are_not_known(capsys, tmp_path):
    """A start-up script is run with arguments kvplan does not see: its "$@" stays a
    warning, as before."""
    f = tmp_path / "start.sh"
    f.write_text('#!/bin/sh\nexec vllm serve Qwen/Qwen2.5-7B-Instruct "$@"\n')
    _, rep = check_json(capsys, f, "--gpu", "l40s")
    known = by_id(rep["deployments"][0])["flags-known"]
    assert [k["message"] for k in known] == [
        "'$@' is computed when the script runs; the arguments it expands to are not checked"]


def test_vllm_behind_launchers_is_checked(capsys):
    """`dumb-init --` and `tini -g -- bash -c 'exec numactl … python3 -X faulthandler -m …'`
    run vLLM: each is checked, not reported as nothing to check."""
    src = FIX / "deployment-launchers.yaml"
    code, rep = check_json(capsys, src)
    assert code == 1
    init, numa = rep["deployments"]
    assert init["name"] == "Deployment/qwen-dumb-init"
    mml = one(init, "max-model-len-fits")
    assert mml["status"] == "fail" and mml["current"] == 500000
    assert mml["line"] == line_of(src, '"dumb-init", "--", "vllm"')
    gpus = one(init, "gpu-count-matches")
    assert (gpus["status"], gpus["current"], gpus["suggested"]) == ("fail", 1, 4)
    assert numa["name"] == "StatefulSet/llama-numa"
    assert numa["model"] == "meta-llama/Llama-3.1-8B-Instruct"  # the api_server's --model
    mml = one(numa, "max-model-len-fits")
    assert (mml["status"], mml["suggested"]) == ("fail", 28032)
    assert mml["line"] == line_of(src, "- --max-model-len")  # the flag's line
    assert one(numa, "flags-known")["message"] == "2 flags known to vLLM 0.11.0"


@pytest.mark.parametrize("launcher", [
    "tini -s -e 143 --", "numactl -N 0 -m0 --physcpubind 0-15", "stdbuf -oL -e L",
    "timeout -k 30s --signal=TERM 3600", "nice -n 5 taskset -c 0-7", "nice -10",
    "sudo -E -u vllm", "uv run --with flashinfer-python --no-sync --",
    "uv --directory /app run --python 3.12", "uvx --from 'vllm==0.11.0'",
    "env -u HF_TOKEN VLLM_LOGGING_LEVEL=DEBUG", "exec -a vllm-server", "nohup time -p",
])
def test_launcher_options_are_read_as_their_parsers_read_them(capsys, launcher):
    cmd = f"{launcher} vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 500000"
    _, rep = check_json(capsys, "--cmd", cmd, "--gpu", "l40s", "--vllm-version", "0.11.0")
    (dep,) = rep["deployments"]
    assert dep["model"] == "Qwen/Qwen2.5-7B-Instruct"
    assert one(dep, "flags-known")["message"] == "1 flag known to vLLM 0.11.0"
    assert one(dep, "max-model-len-fits")["current"] == 500000


@pytest.mark.parametrize("cmd,known", [
    # uv run -m M runs python -m M: the api_server, whose model is --model
    ("uv run -m vllm.entrypoints.openai.api_server --model Qwen/Qwen2.5-7B-Instruct",
     "1 flag known to vLLM 0.33.0"),
    ("python3 -u -X faulthandler -W ignore -m vllm.entrypoints.openai.api_server "
     "--model Qwen/Qwen2.5-7B-Instruct", "1 flag known to vLLM 0.33.0"),
    # `vllm serve`, whose model is positional
    ("python -Xdev -um vllm.entrypoints.cli.main serve Qwen/Qwen2.5-7B-Instruct",
     "no flags to check"),
])
def test_python_and_uv_module_forms(capsys, cmd, known):
    _, rep = check_json(capsys, "--cmd", cmd, "--gpu", "l40s")
    (dep,) = rep["deployments"]
    assert dep["model"] == "Qwen/Qwen2.5-7B-Instruct"
    assert one(dep, "flags-known")["message"] == known


def test_env_i_clears_the_containers_environment(capsys, tmp_path):
    """`env -i` starts the command with only the variables it names: the container's
    CUDA_VISIBLE_DEVICES=0 does not reach vLLM, the one after `env -i` does."""
    f = tmp_path / "pod.yaml"
    f.write_text(POD.format(command=json.dumps(
        ["env", "-i", "CUDA_VISIBLE_DEVICES=0,1", "vllm", "serve", "Qwen/Qwen2.5-7B-Instruct",
         "-tp", "2"])).replace("nvidia.com/gpu: 1", "nvidia.com/gpu: 2") +
        "      env: [{name: CUDA_VISIBLE_DEVICES, value: '0'}]\n")
    _, rep = check_json(capsys, f)
    gpus = one(rep["deployments"][0], "gpu-count-matches")
    assert gpus["status"] == "pass"
    assert gpus["message"] == "TP x PP x DP = 2 uses the 2 GPUs allocated"


def test_an_unknown_launcher_is_checked_through_and_warned(capsys):
    """A program kvplan does not know that runs `vllm serve …` (an image's entrypoint script
    that execs its arguments): the command is checked, and flags-known says how."""
    code, rep = check_json(capsys, "--cmd", "/opt/entrypoint.sh --wait-for-model vllm serve "
                           "Qwen/Qwen2.5-7B-Instruct --max-model-len 500000", "--gpu", "l40s")
    (dep,) = rep["deployments"]
    assert code == 1 and one(dep, "max-model-len-fits")["status"] == "fail"
    known = one(dep, "flags-known")
    assert known["status"] == "warn" and known["current"] == "/opt/entrypoint.sh --wait-for-model"
    assert known["message"] == (
        "the engine command runs behind '/opt/entrypoint.sh --wait-for-model', which kvplan "
        "does not know: checked as if it runs the command after it unchanged")


@pytest.mark.parametrize("cmd", [
    "command -v vllm serve Qwen/Qwen2.5-7B-Instruct",  # prints the path, runs nothing
    "echo vllm serve Qwen/Qwen2.5-7B-Instruct",
    "numactl --hardware vllm serve Qwen/Qwen2.5-7B-Instruct",
])
def test_commands_that_only_name_the_engine_run_nothing(capsys, cmd):
    code, _, err = run(capsys, "check", "--cmd", cmd, "--gpu", "l40s")
    assert code == 2 and err.startswith("kvplan: error: --cmd: no vllm serve, SGLang or TGI")


def test_a_stale_vllm_version_annotation_yields_to_the_image_tag(capsys):
    """The image's tag is the release that runs: an annotation that names another is drift,
    warned about on its line, and the flags are checked against 0.20.2."""
    src = FIX / "deployment-stale-vllm-version.yaml"
    code, rep = check_json(capsys, src)
    (dep,) = rep["deployments"]
    assert code == 1
    assert (dep["vllm_version"], dep["vllm_version_source"]) == (
        "0.20.2", "image vllm/vllm-openai:v0.20.2")
    drift = one(dep, "release-modelled")
    assert drift["status"] == "warn" and drift["line"] == line_of(src, "kvplan.io/vllm-version")
    assert drift["message"] == ("kvplan.io/vllm-version 0.9.2 disagrees with the image "
                                "vllm/vllm-openai:v0.20.2, which runs vLLM 0.20.2: checked "
                                "against 0.20.2")
    assert (drift["current"], drift["suggested"]) == ("0.9.2", "0.20.2")
    failed = [c["current"] for c in by_id(dep)["flags-known"] if c["status"] == "fail"]
    assert failed == ["--disable-log-requests", "--swap-space"]


@pytest.mark.parametrize("annotation,image,checked,warned", [
    ("0.20", "vllm/vllm-openai:v0.20.2", "0.20", False),  # the same minor, no patch given
    ("0.10.1.1", "vllm/vllm-openai:v0.10.1.1", "0.10.1.1", False),
    ("0.11.0", "registry.example.com/ai/vllm-server:v2.0.1", "0.11.0", False),  # its own tag
    ("0.33.0", "vllm/vllm-openai:v0.34.0", "0.33.0", False),  # the documented way to pick
    ("0.11.0", "vllm/vllm-openai:v0.11.1", "0.11.1", True),  # a patch apart
])
def test_the_annotation_wins_where_the_tag_does_not_name_what_runs(
        capsys, tmp_path, annotation, image, checked, warned):
    f = tmp_path / "d.yaml"
    f.write_text((FIX / "deployment-stale-vllm-version.yaml").read_text()
                 .replace('"0.9.2"', f'"{annotation}"')
                 .replace("vllm/vllm-openai:v0.20.2", image)
                 .replace("            - --disable-log-requests\n", "")
                 .replace("            - --swap-space=16\n", ""))
    _, rep = check_json(capsys, f)
    (dep,) = rep["deployments"]
    assert dep["vllm_version"] == checked
    assert ("release-modelled" in by_id(dep) and
            by_id(dep)["release-modelled"][0]["message"].startswith("kvplan.io/")) == warned


def test_compose_service_gpus_attribute(capsys):
    """compose-spec `gpus`: device requests count as deploy.resources.reservations.devices
    do; `all` is the host's GPUs, not counted."""
    src = FIX / "compose-gpus.yaml"
    code, rep = check_json(capsys, src)
    one_gpu, pair, every = (one(d, "gpu-count-matches") for d in rep["deployments"])
    assert code == 1
    assert (one_gpu["status"], one_gpu["current"], one_gpu["suggested"]) == ("fail", 1, 2)
    assert one_gpu["line"] == line_of(src, "- driver: nvidia")
    assert one_gpu["message"] == ("TP x PP x DP = 2 needs 2 GPUs but the container gets 1: "
                                  "the engine cannot start")
    assert pair["status"] == "pass" and pair["current"] == 2
    assert every["status"] == "skip" and every["line"] == line_of(src, "gpus: all")


def test_compose_count_minus_one_is_all(capsys, tmp_path):
    """Review 28: compose-go reads `count: -1` as Docker's "all devices" (DeviceRequest.Count
    -1), so it is the host's GPUs, not a negative count (refused since the CLI fuzz)."""
    f = tmp_path / "compose.yaml"
    f.write_text((FIX / "compose-gpus.yaml").read_text().replace("gpus: all",
                                                                "gpus: [{count: -1}]"))
    code, rep = check_json(capsys, f)
    every = [one(d, "gpu-count-matches") for d in rep["deployments"]][2]
    assert code == 1 and every["status"] == "skip"


def test_compose_gpus_as_a_number_is_refused(capsys, tmp_path):
    """`gpus: 1` is not Compose: its schema takes `all` or a list of device requests, and
    `docker compose` refuses the file (compose-go validates before it transforms)."""
    f = tmp_path / "compose.yaml"
    f.write_text((FIX / "compose-gpus.yaml").read_text().replace("gpus: all", "gpus: 1"))
    code, _, err = run(capsys, "check", f)
    line = line_of(f, "gpus: 1")
    assert code == 2 and err.splitlines()[0] == (
        f"kvplan: error: {f}:{line}: gpus: 1 is not valid Compose: `gpus` is `all` or a list of "
        "device requests, and docker compose refuses the file (gpus: [{count: 1}], or gpus: "
        "all)")


def test_a_tp_fix_names_the_device_list_it_needs(capsys):
    """Qwen2.5-14B's 27.59 GiB of weights do not fit one L4: the fix is TP 2 on 2 GPUs, and the
    script's CUDA_VISIBLE_DEVICES default shows the engine one, so the fix names it too (else
    gpu-count-matches fails next); the defaults warning lists it with the flags' defaults."""
    src = FIX / "start-qwen-14b.sh"
    code, rep = check_json(capsys, src, "--gpu", "l4", "--vllm-version", "0.11.0")
    (dep,) = rep["deployments"]
    assert code == 1
    w = one(dep, "weights-fit")
    cvd = line_of(src, "export CUDA_VISIBLE_DEVICES")
    assert w["status"] == "fail" and w["fix"] == (
        "--tensor-parallel-size 2 on 2 GPUs (14.0 GiB of weights and 4.1 GiB of KV per GPU), "
        f"and list 2 devices in CUDA_VISIBLE_DEVICES (line {cvd}: the script's default 0 "
        "shows the engine 1 GPU)")
    (dflt,) = [c for c in by_id(dep)["flags-known"] if "defaults" in c["message"]]
    assert dflt["message"] == (
        "checked with the script's defaults (Qwen/Qwen2.5-14B from MODEL, 1 from TP, 32768 "
        "from MAX_LEN, 0.90 from GPU_UTIL, 0 from CUDA_VISIBLE_DEVICES): neither the script "
        "nor the container's env sets MODEL, TP, MAX_LEN, GPU_UTIL, CUDA_VISIBLE_DEVICES; an "
        "environment that sets them runs other values")


def test_a_tp_fix_names_a_literal_device_list(capsys):
    _, rep = check_json(capsys, "--cmd", "CUDA_VISIBLE_DEVICES=3 vllm serve Qwen/Qwen2.5-14B "
                        "--max-model-len 32768 --gpu-memory-utilization 0.9", "--gpu", "l4",
                        "--vllm-version", "0.11.0")
    w = one(rep["deployments"][0], "weights-fit")
    assert w["fix"].endswith(", and list 2 devices in CUDA_VISIBLE_DEVICES (3 shows the engine "
                             "1 GPU)")
    assert not [c for c in by_id(rep["deployments"][0])["flags-known"]
                if "defaults" in c["message"]]


def test_the_header_names_the_gpu_when_the_model_is_not_known(capsys):
    """The GPU comes from the nodeSelector, whatever the model: `on l4 x1`, not `on ? x1`."""
    src = FIX / "deployment-config-file.yaml"
    code, out, _ = run(capsys, "check", src)
    assert code == 1
    assert f"{src}:17  Deployment/cfg · ? · on l4 x1 · vllm 0.20.2 · 1 replica · chat @ 20 req/s" \
        in out
    _, rep = check_json(capsys, src)
    (dep,) = rep["deployments"]
    assert (dep["model"], dep["gpu"]) == (None, "l4")


def test_gpus_are_not_counted_when_a_config_file_may_set_the_layout(capsys):
    """vLLM takes TP/PP/DP from --config unless the command line gives them (cli > config >
    defaults): gpu-count-matches is skipped and says why, not passed on an assumed TP 1."""
    src = FIX / "deployment-config-file.yaml"
    _, rep = check_json(capsys, src)
    gpus = one(rep["deployments"][0], "gpu-count-matches")
    assert gpus["status"] == "skip" and gpus["line"] == line_of(src, "nvidia.com/gpu: 1")
    assert gpus["message"] == (
        "not counted: --config /etc/vllm/config.yaml may set --tensor-parallel-size, "
        "--pipeline-parallel-size, --data-parallel-size, which kvplan does not read (the "
        "command line wins over the file: give them there to have the GPUs counted)")
    _, rep = check_json(capsys, "--cmd", "CUDA_VISIBLE_DEVICES=0 vllm serve "
                        "meta-llama/Llama-3.1-8B-Instruct --config /etc/vllm/c.yaml -tp 2 "
                        "-pp 1 -dp 1", "--gpu", "l4")
    gpus = one(rep["deployments"][0], "gpu-count-matches")
    assert gpus["status"] == "fail" and (gpus["current"], gpus["suggested"]) == (1, 2)


def test_helm_template_on_stdin_is_located_in_its_templates(capsys, monkeypatch):
    """`helm template … | kvplan check -`: each document is named after its `# Source:`
    template, at its line in Helm's rendering of that template (what `helm template
    --show-only templates/deployment.yaml` prints and `--output-dir` writes: a template's
    manifests one after the other, each from its `---`)."""
    import io

    text = (FIX / "helm-rendered.yaml").read_text()
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    code, out, _ = run(capsys, "check", "-", "--format", "github")
    assert code == 1
    # the second Deployment: stdin line 53 is line 16 of its block, which follows the first
    # block's 22 lines in the template's rendering
    rendered = "".join(
        block for block in re.split(r"(?m)^(?=---$)", text)
        if "# Source: inference/templates/deployment.yaml" in block).splitlines()
    line = next(n for n, s in enumerate(rendered, 1) if '"500000"' in s)
    assert line == 38
    assert (f"::error file=inference/templates/deployment.yaml,line={line},col=57,"
            "title=kvplan max-model-len-fits::Deployment/qwen-long: --max-model-len 500000 "
            "exceeds the model's maximum of 32768") in out
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    _, rep = check_json(capsys, "-")
    assert [(d["file"], d["line"]) for d in rep["deployments"]] == [
        ("inference/templates/deployment.yaml", 6),
        ("inference/templates/deployment.yaml", 28)]
    assert rep["files"][0]["file"] == "<stdin>" and rep["files"][0]["deployments"] == 2


def test_a_rendered_file_keeps_its_own_lines(capsys):
    """A file (not stdin) is where the user reads the lines: no renaming."""
    src = FIX / "helm-rendered.yaml"
    _, rep = check_json(capsys, src)
    assert [(d["file"], d["line"]) for d in rep["deployments"]] == [
        (str(src), line_of(src, "name: qwen-chat")), (str(src), line_of(src, "name: qwen-long"))]


def test_bad_input_on_stdin_names_its_template(capsys, monkeypatch):
    import io

    text = (FIX / "helm-rendered.yaml").read_text().replace("kvplan.io/rate:", "kvplan.io/rat:")
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    code, _, err = run(capsys, "check", "-")
    assert code == 2 and err.splitlines()[0] == (
        "kvplan: error: inference/templates/deployment.yaml:9: unknown annotation "
        "'kvplan.io/rat' (did you mean kvplan.io/rate?)")


def test_a_shell_inside_a_script_is_read_as_it_runs(capsys, tmp_path):
    """`exec bash -c "…"` inside a container's script: the outer shell expands the double-quoted
    script (LEN), the inner one sees only exported variables and the container's (TP), and its
    `"$@"` is the words after it."""
    f = tmp_path / "pod.yaml"
    script = ('export MODEL=Qwen/Qwen2.5-7B-Instruct\nLEN=500000\n'
              'exec bash -c "vllm serve $MODEL --max-model-len $LEN -tp \\$TP \\"\\$@\\"" '
              'inner --max-num-seqs 8')
    f.write_text(POD.format(command=json.dumps(["sh", "-c", script])) +
                 "      env: [{name: TP, value: '2'}]\n")
    code, rep = check_json(capsys, f)
    (dep,) = rep["deployments"]
    assert code == 1 and dep["model"] == "Qwen/Qwen2.5-7B-Instruct"
    assert one(dep, "flags-known")["message"] == "3 flags known to vLLM 0.20.2"
    assert one(dep, "max-model-len-fits")["current"] == 500000
    gpus = one(dep, "gpu-count-matches")
    assert (gpus["status"], gpus["current"], gpus["suggested"]) == ("fail", 1, 2)


def test_a_prompt_vllm_0_19_never_admits_fails_max_model_len_fits(capsys):
    """review 23d #2(b): on 0.19.x a sliding-window model's whole-prompt admission check
    charges every group the whole prompt; past the pool's limit the scheduler stops the
    queue at that prompt for good. Gemma-3-12B on an L40S at the default 131,072 tokens:
    42,256 at vLLM's default cap; 0.20.0 caps the check."""
    code, rep = check_json(capsys, "--cmd", "vllm serve google/gemma-3-12b-it", "--gpu", "l40s",
                           "--vllm-version", "0.19.0")
    f = one(rep["deployments"][0], "max-model-len-fits")
    assert (f["status"], f["suggested"]) == ("fail", 42_257)
    assert "never admits a prompt over 42,256 tokens" in f["message"]
    code, rep = check_json(capsys, "--cmd", "vllm serve google/gemma-3-12b-it --max-model-len "
                           "42257", "--gpu", "l40s", "--vllm-version", "0.19.0")
    assert one(rep["deployments"][0], "max-model-len-fits")["status"] == "pass"
    code, rep = check_json(capsys, "--cmd", "vllm serve google/gemma-3-12b-it", "--gpu", "l40s",
                           "--vllm-version", "0.20.0")
    assert one(rep["deployments"][0], "max-model-len-fits")["status"] == "pass"


def test_a_draft_models_shorter_context_is_a_warning(capsys):
    """0.33 lowers --max-model-len to a separate draft's (`_limit_max_model_len_to_draft`):
    Llama-3.1-70B at 131,072 with a Meta-Llama-3-8B draft_model starts at 8,192."""
    spec = ('{"method": "draft_model", "model": "meta-llama/Meta-Llama-3-8B-Instruct", '
            '"num_speculative_tokens": 4}')
    cmd = f"vllm serve meta-llama/Llama-3.1-70B-Instruct -tp 4 --max-model-len 131072 " \
          f"--speculative-config '{spec}'"
    code, rep = check_json(capsys, "--cmd", cmd, "--gpu", "h100")
    c = one(rep["deployments"][0], "max-model-len-fits")
    assert code == 0 and c["status"] == "warn" and c["current"] == 131072
    assert c["suggested"] == 8192 and "starts as 8,192" in c["message"]
    code, rep = check_json(capsys, "--cmd", cmd, "--gpu", "h100", "--vllm-version", "0.32")
    assert one(rep["deployments"][0], "max-model-len-fits")["status"] == "pass"


def test_a_draft_lowering_the_default_length_is_a_warning_too(capsys):
    spec = ('{"method": "draft_model", "model": "meta-llama/Meta-Llama-3-8B-Instruct", '
            '"num_speculative_tokens": 4}')
    code, rep = check_json(capsys, "--gpu", "h100", "--cmd",
                           f"vllm serve meta-llama/Llama-3.1-70B-Instruct -tp 4 "
                           f"--speculative-config '{spec}'")
    c = one(rep["deployments"][0], "max-model-len-fits")
    assert c["status"] == "warn" and c["suggested"] == 8192
    assert c["message"].startswith("the model's default max_model_len (131,072 from config "
                                   "max_position_embeddings) starts as 8,192")


@pytest.mark.parametrize("value", ["inf", "nan"])
def test_json_is_standard_with_a_non_finite_flag(capsys, value):
    """Session 28's CLI fuzz: a `--gpu-memory-utilization inf` wrote `"current": Infinity`,
    which jq and JavaScript refuse; non-finite floats are written as the strings typed."""
    code, out, _ = run(capsys, "check", "--cmd", "vllm serve meta-llama/Llama-3.1-8B-Instruct "
                       f"--gpu-memory-utilization {value}", "-g", "h100", "-f", "json")

    def refuse(c):
        raise ValueError(c)

    doc = json.loads(out, parse_constant=refuse)
    assert code == 1 and value in [c.get("current") for d in doc["deployments"]
                                   for c in d["checks"]]
