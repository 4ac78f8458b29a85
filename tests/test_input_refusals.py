"""Bad input found by the CLI fuzz review (session 28): one line, exit 2, what to fix."""

import pytest

from kvplan.cli import main

PLAN = """kvplan: 1
deployments:
  - name: chat
    model: meta-llama/Llama-3.1-8B-Instruct
    gpu: h100
    workload:
      preset: chat
{extra}"""


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def bad(capsys, *argv) -> str:
    """The one error line of a refused command line (exit 2, nothing on stdout)."""
    code, out, err = run(capsys, *argv)
    assert (code, out, err.count("\n")) == (2, "", 1), (code, out, err)
    return err


def test_peak_rate_without_a_rate_is_refused(capsys):
    err = bad(capsys, "recommend", "llama-3.1-8b-instruct", "-g", "h100", "--peak-rate", "50")
    assert "error: --peak-rate needs --rate (the sustained rate the fleet is sized on) (give " \
        "--rate (or --users) too" in err
    code, _, err = run(capsys, "recommend", "llama-3.1-8b-instruct", "-g", "h100",
                       "--users", "10", "--peak-rate", "50", "--json")
    assert code == 0, err  # the users give the sustained rate


@pytest.mark.parametrize("extra,line,msg", [
    ("      rate: 1\n      users: 10\n", 9,
     "deployments.0.workload.users: Value error, users and rate are exclusive"),
    ("      rate: 10\n      peak_rate: 1\n", 9,
     "deployments.0.workload.peak_rate: Value error, peak_rate 1 is below rate 10"),
    ("      peak_rate: 5\n", 8,
     "deployments.0.workload.peak_rate: Value error, peak_rate needs rate"),
])
def test_plan_workload_refuses_what_recommend_refuses(tmp_path, capsys, extra, line, msg):
    f = tmp_path / "plan.yaml"
    f.write_text(PLAN.format(extra=extra))
    assert f"error: {f}:{line}: {msg}" in bad(capsys, "check", f)


def test_annotations_refuse_users_with_a_rate(tmp_path, capsys):
    f = tmp_path / "c.yaml"
    f.write_text("services:\n  v:\n    image: vllm/vllm-openai:v0.11.0\n"
                 "    command: [--model, meta-llama/Llama-3.1-8B-Instruct]\n"
                 "    labels:\n      kvplan.io/rate: 5\n      kvplan.io/users: 10\n")
    assert f"error: {f}:7: kvplan.io/users: Value error, users and rate are exclusive" \
        in bad(capsys, "check", f, "-g", "h100")


K8S = """apiVersion: apps/v1
kind: Deployment
metadata: {{name: x}}
spec:
  replicas: {replicas}
  template:
    spec:
      containers:
        - name: v
          image: vllm/vllm-openai:v0.11.0
          command: [vllm, serve, meta-llama/Llama-3.1-8B-Instruct]
          resources: {{limits: {{nvidia.com/gpu: {gpus}}}}}
      nodeSelector: {{nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}}
"""


@pytest.mark.parametrize("replicas,gpus,line,msg", [
    (-2, 1, 5, "replicas -2 is negative (give 0 or more)"),
    (2, -1, 12, "nvidia.com/gpu -1 is negative (give 0 or more)"),
])
def test_negative_kubernetes_counts_are_refused(tmp_path, capsys, replicas, gpus, line, msg):
    f = tmp_path / "k.yaml"
    f.write_text(K8S.format(replicas=replicas, gpus=gpus))
    assert f"error: {f}:{line}: {msg}" in bad(capsys, "check", f)


@pytest.mark.parametrize("command,msg", [
    ("5", "command must be a string or a list of strings, not 5 (quote it if it is the "
     "command line)"),
    ("{a: 1}", "command must be a list of strings"),
])
def test_compose_command_must_be_text(tmp_path, capsys, command, msg):
    f = tmp_path / "compose.yaml"
    f.write_text(f"services:\n  v:\n    image: vllm/vllm-openai:v0.11.0\n"
                 f"    command: {command}\n")
    assert f"error: {f}:4: {msg}" in bad(capsys, "check", f)


def test_models_export_refuses_a_file_that_is_not_a_catalog(tmp_path, capsys):
    f = tmp_path / "plan.yaml"
    text = PLAN.format(extra="")
    f.write_text(text)
    err = bad(capsys, "models", "export", "llama-3.1-8b", "-o", f)
    assert err == f"kvplan: error: {f} is not a kvplan catalog (it has kvplan, deployments and " \
        "no models: or gpus:); nothing was written (name a new file or an existing catalog)\n"
    assert f.read_text() == text
    cat = tmp_path / "cat.yaml"  # a real catalog (gpus: only) is merged into
    cat.write_text("gpus:\n  mygpu:\n    name: My GPU\n    memory_bytes: 1000\n")
    code, out, err = run(capsys, "models", "export", "llama-3.1-8b", "-o", cat)
    assert (code, out) == (0, f"wrote 1 model(s) to {cat}\n"), err
    assert "mygpu:" in cat.read_text() and "  meta-llama/Llama-3.1-8B:" in cat.read_text()


@pytest.mark.parametrize("argv,msg", [
    (("http://[::1",), "error: cannot read URL 'http://[::1': Invalid IPv6 URL (e.g. "
     "http://host:8000 or http://[::1]:8000)"),
    (("http://[::1", "--json"), "error: cannot read URL 'http://[::1': Invalid IPv6 URL"),
    (("ftp://x/metrics", "--scrapes", "1"), "error: ftp://x/metrics: the ftp:// scheme is not "
     "supported (scrape an http:// or https:// URL, or pass saved scrape files)"),
])
def test_diagnose_refuses_malformed_and_unsupported_urls(capsys, argv, msg):
    assert msg in bad(capsys, "diagnose", *argv)


def test_hub_variables_are_named_when_bad(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    for v in ("nan", "-1", "0", "abc"):
        monkeypatch.setenv("KVPLAN_HUB_TIMEOUT", v)
        assert f"error: KVPLAN_HUB_TIMEOUT='{v}' must be a positive number of seconds (e.g. " \
            "KVPLAN_HUB_TIMEOUT=30, or unset it for 10)" in bad(capsys, "models", "add", "acme/x")
    monkeypatch.setenv("KVPLAN_HUB_TIMEOUT", "3")
    monkeypatch.setenv("HF_ENDPOINT", "http://[::1")
    assert "error: HF_ENDPOINT='http://[::1' is not an http:// or https:// URL (e.g. " \
        "HF_ENDPOINT=https://huggingface.co, or unset it)" in bad(
            capsys, "size", "acme/unknown-model", "-g", "h100", "--json")


def test_hub_errors_in_a_fresh_process(tmp_path):
    """huggingface_hub reads HF_ENDPOINT and HF_HUB_OFFLINE when it is imported."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1]),
           "HF_HOME": str(tmp_path / "hf"), "XDG_CONFIG_HOME": str(tmp_path / "config")}

    def kvplan(*argv, **extra):
        p = subprocess.run([sys.executable, "-m", "kvplan", *argv], env={**env, **extra},
                           capture_output=True, text=True, timeout=120)
        return p.returncode, p.stdout, p.stderr

    assert kvplan("size", "acme/unknown-model", "-g", "h100", "--json",
                  HF_ENDPOINT="http://[::1") == (
        2, "", "kvplan: error: HF_ENDPOINT='http://[::1' is not an http:// or https:// URL "
        "(e.g. HF_ENDPOINT=https://huggingface.co, or unset it)\n")
    assert kvplan("models", "add", "acme/x", HF_HUB_OFFLINE="1") == (
        2, "", "kvplan: error: cannot fetch acme/x from the Hub: offline mode is on "
        "(HF_HUB_OFFLINE) (unset HF_HUB_OFFLINE to fetch it; an air-gapped site uses a "
        "catalog `kvplan models export` wrote)\n")


@pytest.mark.parametrize("flags,line,msg", [
    ("\n      max-model-len: .nan", 7,
     "deployments.0.flags.max-model-len: Value error, must be a finite number, not nan"),
    ("\n      max-model-len: {a: 1}", 7, "deployments.0.flags.max-model-len: Value error, must be "
     "a string, number or boolean, not a mapping"),
    (" 5", 6, "deployments.0.flags: Value error, must be a list as on the command line or a "
     "mapping"),
    ("\n      - --max-model-len\n      - {a: 1}", 8,
     "deployments.0.flags.1: Input should be a valid string"),
])
def test_plan_flags_errors_name_the_flag(tmp_path, capsys, flags, line, msg):
    f = tmp_path / "plan.yaml"
    f.write_text(PLAN.format(extra="").replace("    workload:\n      preset: chat\n",
                                               f"    flags:{flags}\n"))
    assert f"error: {f}:{line}: {msg}" in bad(capsys, "check", f)


def test_a_deeply_nested_plan_names_the_file(tmp_path, capsys):
    f = tmp_path / "deep.yaml"
    f.write_text("kvplan: 1\ndeployments: " + "[" * 3000 + "]" * 3000 + "\n")
    assert bad(capsys, "check", f) == f"kvplan: error: {f}: nested too deeply to read " \
        "(hundreds of levels of lists or mappings) (a plan file or manifest needs a few " \
        "levels; check how it was generated)\n"


def test_an_empty_check_path_says_so(capsys):
    assert bad(capsys, "check", "") == "kvplan: error: a path to check is empty ('': an unset " \
        "shell variable?) (pass the YAML files, e.g. deploy/*.yaml, or --cmd)\n"


M = "llama-3.1-8b-instruct"
EMPTY = "is empty (an unset shell variable? give a value or leave the option out)\n"


@pytest.mark.parametrize("argv,flag", [
    (("size", M, "-g", "h100", "--gpu-memory", ""), "--gpu-memory"),
    (("size", M, "-g", "h100", "--vllm-version", ""), "--vllm-version"),
    (("size", M, "-g", "h100", "--kv-cache-dtype", ""), "--kv-cache-dtype"),
    (("size", M, "-g", "h100", "--dtype", " "), "--dtype"),
    (("size", M, "-g", "h100", "--max-num-batched-tokens", ""), "--max-num-batched-tokens"),
    (("size", M, "-g", "h100", "--kv-cache-dtype-skip-layers", ""),
     "--kv-cache-dtype-skip-layers"),
    (("size", M, "--gpu=", "--json"), "--gpu"),
    (("size", M, "-g", "h100", "--env", ""), "--env"),
    (("throughput", M, "-g", "h100", "--prompt-tokens", ""), "--prompt-tokens"),
    (("throughput", M, "-g", "h100", "--batch-sizes", ""), "--batch-sizes"),
    (("recommend", M, "-g", "h100", "-w", ""), "--workload"),
    (("simulate", M, "-g", "h100", "--sweep", ""), "--sweep"),
    (("check", "--cmd", ""), "--cmd"),
    (("diagnose", "x.prom", "--vllm-version", ""), "--vllm-version"),
    (("models", "export", M, "-o", ""), "--output"),
])
def test_an_empty_option_value_is_refused(capsys, argv, flag):
    assert bad(capsys, *argv) == f"kvplan: error: {flag} {EMPTY}"


def test_an_empty_token_is_no_token_and_an_empty_kv_list_is_refused(capsys):
    code, out, err = run(capsys, "size", M, "-g", "h100", "--token", "", "--json")
    assert code == 0 and '"fits": true' in out, err  # `--token "$HF_TOKEN"`, public model
    assert "error: --kv-cache-dtype '|' names no dtype (e.g. auto, fp8, or 'auto|fp8' to try " \
        "both)" in bad(capsys, "recommend", M, "-g", "h100", "--kv-cache-dtype", "|")


@pytest.mark.parametrize("args,msg", [
    (("--rate", "1e-300", "--requests", "200"), "200 requests at 1e-300 req/s arrive over about "
     "2e+302 s; kvplan simulates at most a week (604,800 s) (raise --rate or lower --requests; "
     "the rate is in requests per second)"),
    (("--rate", "5", "--duration", "1e-300"), "no request is expected in 1e-300 s of arrivals "
     "at 5 req/s (raise --duration to at least 0.2 s or --rate; the rate is in requests per "
     "second)"),
    (("--rate", "1e-9"), "no request is expected in 300 s of arrivals at 1e-09 req/s"),
    (("--concurrency", "10", "--duration", "1e7"), "--duration 1e+07 s is more than the week "
     "(604,800 s) kvplan simulates"),
    (("--sweep", "rate=0.001:0.01"), "no request is expected in 120 s of arrivals at 0.001 "
     "req/s"),
])
def test_simulate_refuses_empty_or_absurd_spans(capsys, args, msg):
    assert f"error: {msg}" in bad(capsys, "simulate", M, "-g", "h100", *args)


@pytest.mark.parametrize("sizes,msg", [
    ("99999999999999999999999999", "--batch-sizes 1e+26 is more than 65,536 sequences (a batch "
     "size counts running sequences, as --max-num-seqs: e.g. 1,8,64,256)"),
    ("1,65537", "--batch-sizes 65,537 is more than 65,536 sequences"),
    (",".join(str(i) for i in range(1, 302)), "--batch-sizes gives 301 rows; kvplan shows at "
     "most 200"),
])
def test_throughput_batch_sizes_are_capped(capsys, sizes, msg):
    assert f"error: {msg}" in bad(capsys, "throughput", M, "-g", "h100", "--batch-sizes", sizes)


def test_diagnose_shows_a_huge_counter_readably(tmp_path, capsys):
    a, b = tmp_path / "a.prom", tmp_path / "b.prom"
    a.write_text('vllm:num_preemptions_total{model_name="m"} 100\n'
                 'vllm:num_requests_running{model_name="m"} 5\n')
    b.write_text(a.read_text().replace(" 100\n", " 1e308\n"))
    code, out, err = run(capsys, "diagnose", a, b)
    assert code == 1, err
    assert "preemptions rose 100 → 1e+308 in 5.0 s (2e+307/s)" in out
    assert "preemptions  1e+308 in 5.0 s (2e+307/s)" in out
    code, out, _ = run(capsys, "diagnose", a, b, "--json")
    assert "preemptions rose 100 \\u2192 1e+308 in 5.0 s (2e+307/s)" in out


def test_diagnose_numbers_below_a_quadrillion_keep_their_digits():
    from kvplan.diagnose.findings import fixed, num

    assert (num(999_999_999_999_999), num(2.5), num(1e15)) == ("999,999,999,999,999", "2.5",
                                                              "1e+15")
    assert (fixed(2.5), fixed(-0.25, "+.2f"), fixed(3e20, "+.2f")) == ("2.50", "-0.25", "+3e+20")


def test_two_entries_of_one_catalog_claiming_a_name_are_refused(tmp_path, capsys):
    cfg = '{"model_type": "llama"}'
    f = tmp_path / "cat.yaml"
    f.write_text(f"models:\n  acme/x:\n    aliases: [llama-3.1-8b-instruct]\n    config: {cfg}\n"
                 f"  acme/y:\n    aliases: [Llama_3.1-8B-instruct]\n    config: {cfg}\n")
    assert bad(capsys, "size", M, "-g", "h100", "--catalog", f) == (
        f"kvplan: error: catalog {f}: models 'acme/x' and 'acme/y' both answer to the name "
        "'llama-3.1-8b-instruct' (each id, alias and name picks one entry; remove it from one "
        "of them)\n")


def test_an_ambiguous_name_fails_only_its_own_lookups(tmp_path, capsys):
    """Review 28: refusing the whole file broke every command, and `models add` wrote such
    files. Now only the ambiguous name is refused, a later file takes it over, and a name given
    again to `models add` moves to the new entry."""
    from kvplan import catalog

    cfg = '{"model_type": "llama"}'
    f = tmp_path / "cat.yaml"
    f.write_text(f"models:\n  acme/x:\n    aliases: [prod]\n    config: {cfg}\n"
                 f"  acme/y:\n    aliases: [prod]\n    config: {cfg}\n")
    code, _, err = run(capsys, "size", "qwen3-8b", "-g", "h100", "--catalog", str(f))
    assert code == 0, err
    assert "both answer to the name 'prod'" in bad(capsys, "size", "prod", "-g", "h100",
                                                    "--catalog", str(f))
    later = tmp_path / "later.yaml"
    later.write_text(f"models:\n  acme/z:\n    aliases: [prod]\n    config: {cfg}\n")
    assert catalog.load("models", [str(f), str(later)]).get("prod")[0] == "acme/z"
    w = tmp_path / "written.yaml"
    e = catalog.load("models").get("qwen3-8b")[1]
    catalog.write_models(w, {"org/a": {**e, "aliases": ["prod"]}})
    catalog.write_models(w, {"org/b": {**e, "aliases": ["prod", "b"]}})
    cat = catalog.load("models", [str(w)])
    assert cat.get("prod")[0] == "org/b" and cat.entry("org/a")["aliases"] == []
