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
