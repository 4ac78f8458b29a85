"""`kvplan size` without typer (cli_fast): the same keyword arguments typer would pass, the
same output, and every line it does not take left to typer."""

import inspect
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvplan import cli_app, cli_size
from kvplan.cli import main
from kvplan.cli_fast import KINDS, size_kwargs


def typer_kwargs(argv, monkeypatch, capsys):
    """What typer passes cli_size.run for argv (None when it refuses the line)."""
    seen = []
    monkeypatch.setattr(cli_size, "run", lambda **kw: seen.append(kw) or 0)
    code = cli_app.invoke(list(argv))
    capsys.readouterr()
    monkeypatch.undo()
    assert (code == 0) == bool(seen), (argv, code)
    return seen[0] if seen else None


def test_definition_is_one_table_and_one_signature():
    params = inspect.signature(cli_size.run).parameters
    assert list(params)[0] == "model" and set(params) - {"model"} == set(cli_size.OPTIONS)
    assert all(p.annotation in KINDS for p in params.values())  # else the fast path breaks


TAKEN = [  # lines the fast path parses, as typer does
    ["size", "llama-3.1-8b", "--gpu", "h100"],
    ["size", "--gpu=h100", "llama-3.1-8b", "-tp", "2", "-pp=2", "--json"],
    ["size", "m", "-g", "l4", "--max-model-len", "-1", "--kv-cache-dtype", "fp8"],
    ["size", "m", "--gpu-memory-utilization", "0.85", "--cpu-offload-gb=1e1"],
    ["size", "m", "--max-num-seqs", " 64 ", "--block-size", "1_6", "--gpu", "--help"],
    ["size", "m", "--env", "A=1", "--env=B=2=3", "--catalog", "a.yaml", "--catalog", "b"],
    ["size", "m", "--enable-prefix-caching", "--no-enable-prefix-caching",
     "--no-async-scheduling", "--enable-chunked-prefill", "--enforce-eager", "--enforce-eager"],
    ["size", "m", "-tp", "2", "-tp", "4", "--gpu=l4", "-O", "3", "-cc", "{}", "-asc", "2"],
    ["size", "-", "--gpu", "h100"],
    ["size", "m", "-dp", "8", "-ep", "-sc", "{}", "--device-memory-utilization", "0.5", "-n", "2"],
]
LEFT = [  # lines typer parses (help, errors, click's odd forms)
    ["size"], ["size", "--help"], ["size", "m", "--help"], ["size", "m", "--gpu"],
    ["size", "m", "n"], ["size", "m", "--", "-x"], ["size", "m", "-O3"], ["size", "m", "-gh100"],
    ["size", "m", "-g=h100"], ["size", "m", "--json=1"], ["size", "m", "--nope"],
    ["size", "m", "-tp", "two"], ["size", "m", "-tp", "2.0"], ["size", "m", "--cpu-offload-gb",
                                                           "nan"],
    ["size", "m", "--gpu-memory-utilization", "inf"], ["--help"], ["models"], ["size", "-1"],
    ["size", "m", "--gpu="], ["size", "m", "--dtype", " "], ["size", "m", "--env", ""],
]


@pytest.mark.parametrize("argv", TAKEN, ids=str)
def test_fast_path_matches_typer(argv, monkeypatch, capsys):
    fast = size_kwargs(argv)
    assert fast is not None
    assert fast == typer_kwargs(argv, monkeypatch, capsys)


def test_fast_path_values():
    kw = size_kwargs(TAKEN[5])
    assert kw["env"] == ["A=1", "B=2=3"] and kw["catalog"] == ["a.yaml", "b"]
    kw = size_kwargs(TAKEN[6])
    assert kw["enable_prefix_caching"] is False and kw["async_scheduling"] is False
    assert kw["enable_chunked_prefill"] is True and kw["enable_expert_parallel"] is False
    kw = size_kwargs(TAKEN[7])
    assert kw["tensor_parallel_size"] == 4 and kw["gpu"] == "l4" and kw["optimization_level"] == "3"
    kw = size_kwargs(TAKEN[9])  # vLLM's other spellings (0.33's arg_utils)
    assert kw["enable_expert_parallel"] is True and kw["speculative_config"] == "{}"
    assert kw["gpu_memory_utilization"] == 0.5 and kw["nnodes"] == 2
    kw = size_kwargs(TAKEN[4])
    assert kw["max_num_seqs"] == 64 and kw["block_size"] == 16 and kw["gpu"] == "--help"


@pytest.mark.parametrize("argv", LEFT, ids=str)
def test_other_lines_go_to_typer(argv):
    assert size_kwargs(argv) is None


WORDS = ["m", "-", "--gpu", "-g", "h100", "-tp", "2", "-tp=3", "x", "--json", "--json=1",
         "--env", "A=1", "--no-enable-prefix-caching", "--cpu-offload-gb", "1.5", "nan",
         "--max-model-len", "-1", "32k", "--", "--help", "-O3", "-O", "--block-size=",
         "--enforce-eager", "--catalog", "-q", "fp8"]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(WORDS), max_size=8))
def test_any_line_fast_or_left(words):
    """Whatever the words, the fast path gives typer's arguments or leaves the line to it."""
    argv = ["size", *words]
    fast = size_kwargs(argv)
    if fast is not None:
        with pytest.MonkeyPatch.context() as mp:
            seen = []
            mp.setattr(cli_size, "run", lambda **kw: seen.append(kw) or 0)
            assert cli_app.invoke(argv) == 0
        assert seen == [fast]


@pytest.mark.parametrize("argv", [
    ["size", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100"],
    ["size", "deepseek-r1", "--gpu", "h200", "-tp", "8", "--json"],
    ["size", "Qwen/Qwen3-Next-80B-A3B-Thinking", "-g", "h100", "-tp=4", "--max-model-len", "32k"],
    ["size", "llama-3.1-70b", "--gpu", "l4"],  # exit 1: does not fit
    ["size", "nope-model", "--gpu", "h100"],  # exit 2: unknown model
])
def test_same_output_either_way(argv, capsys, monkeypatch):
    assert size_kwargs(argv) is not None
    fast = (main(argv), *capsys.readouterr())
    monkeypatch.setattr("kvplan.cli_fast.size_kwargs", lambda argv: None)
    slow = (main(argv), *capsys.readouterr())
    assert fast == slow
    assert fast[0] == {"nope-model": 2, "llama-3.1-70b": 1}.get(argv[1], 0)


def test_size_runs_without_typer_or_click():
    code = ("import sys; from kvplan.cli import main; "
            "rc = main(['size', 'llama-3.1-8b', '--gpu', 'h100', '--json']); "
            "print(rc, 'typer' in sys.modules, 'click' in sys.modules, file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stderr.split() == ["0", "False", "False"]
    assert '"num_gpu_blocks": 27847' in r.stdout


def test_one_letter_options_with_equals_as_argparse_reads_them(capsys):
    """vLLM's argparse reads `-O=3` as `-O 3`; click would take "=3" as the value (review
    25i). `kvplan.cli` splits such words before either parser, up to a `--`."""
    from kvplan.cli import _short_equals, main

    assert _short_equals(["size", "m", "-g=h100", "-O=3", "-tp=2", "--x=1", "--", "-q=fp8"]) \
        == ["size", "m", "-g", "h100", "-O", "3", "-tp=2", "--x=1", "--", "-q=fp8"]
    assert main(["size", "llama-3.1-8b-instruct", "-g=h100", "-O=0", "--json"]) == 0
    assert '"cudagraph_bytes": 0' in capsys.readouterr().out
