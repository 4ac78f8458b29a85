"""`kvplan throughput`: its safe cap is `kvplan recommend`'s, and its points past the KV
ceiling hold the ceiling's throughput while the extra clients wait (as `simulate` shows)."""

import json

import pytest

from kvplan.cli import main
from kvplan.core.workload import preset

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_safe_cap_is_recommends_and_passes_check(capsys):
    # A40 TP4 fp8 chat: above vLLM's default 256 a larger cap leaves a smaller pool; the cap
    # on the default pool (1518) fails `check` on its own pool, recommend's fixed point holds
    m = [LLAMA, "--gpu", "a40", "-tp", "4", "--kv-cache-dtype", "fp8", "--workload", "chat"]
    code, out, err = run(capsys, "throughput", *m, "--json")
    assert code == 0, err
    thr = json.loads(out)
    code, out, err = run(capsys, "recommend", *m, "--json")
    assert code == 0, err
    rec = json.loads(out)
    assert thr["safe_max_num_seqs"] == rec["max_num_seqs"] == 1403
    assert thr["kv_ceiling_batch_size"] == rec["kv_ceiling_batch_size"]
    cmd = (f"vllm serve {LLAMA} -tp 4 --kv-cache-dtype fp8 --max-num-seqs "
           f"{thr['safe_max_num_seqs']}")
    code, out, err = run(capsys, "check", "--cmd", cmd, "--gpu", "a40", "--workload", "chat")
    line = next(x for x in out.splitlines() if "max-num-seqs-safe" in x)
    assert line.split()[0] == "ok", line


def test_points_past_the_ceiling_hold_its_throughput_and_queue(capsys):
    # L40S rag: past the ceiling c the pool holds c sequences; b clients in a closed loop wait
    # (b - c) x service / c before their prefill (the response-time law)
    m = [LLAMA, "--gpu", "l40s", "--workload", "rag", "--json"]
    code, out, err = run(capsys, "throughput", *m)
    assert code == 0, err
    c = json.loads(out)["kv_ceiling_batch_size"]
    code, out, err = run(capsys, "throughput", *m, "--batch-sizes", f"{c},{c + 29},{2 * c}")
    assert code == 0, err
    at, past, double = json.loads(out)["points"]
    assert not at["preempting"] and past["preempting"] and double["preempting"]
    for p in (past, double):
        assert p["output_tokens_per_s"] == at["output_tokens_per_s"]
        assert p["tpot_ms"] == at["tpot_ms"]
    o = preset("rag").clip(131072).output.points
    service_ms = at["ttft_ms"] + sum(o) / len(o) * at["tpot_ms"]
    assert double["ttft_ms"] == pytest.approx(at["ttft_ms"] + service_ms, rel=1e-3)
    assert past["ttft_ms"] == pytest.approx(at["ttft_ms"] + 29 * service_ms / c, rel=1e-3)


def test_past_the_ceiling_agrees_with_the_simulator(capsys):
    # vLLM 0.33 (full-prompt admission): 87 closed-loop clients on the L40S rag pool run at
    # about the ceiling's throughput, and wait about as long as the curve says
    m = [LLAMA, "--gpu", "l40s", "--workload", "rag", "--json"]
    code, out, err = run(capsys, "throughput", *m, "--batch-sizes", "87")
    assert code == 0, err
    pt = json.loads(out)["points"][0]
    code, out, err = run(capsys, "simulate", *m, "--concurrency", "87", "--requests", "1000")
    assert code == 0, err
    sim = json.loads(out)
    assert sim["preemptions"] > 0  # past the ceiling
    assert sim["output_tokens_per_s"] == pytest.approx(pt["output_tokens_per_s"], rel=0.1)
    assert sim["ttft_p50_s"] == pytest.approx(pt["ttft_ms"] / 1000, rel=0.25)


def test_the_summary_batches_are_rows_of_the_table(capsys):
    """Review 23b #14: 'knee at batch 24' named a batch the table (18, 27) did not have.
    Llama-3.1-8B on an L4 at 8K, chat: the default ladder 1, 2, 4, 8, 12, 18, 27, 36 gains
    the safe cap (15) and the knee = KV ceiling (24); --batch-sizes rows stay the user's."""
    m = [LLAMA, "--gpu", "l4", "--max-model-len", "8192", "--workload", "chat"]
    code, out, err = run(capsys, "throughput", *m, "--json")
    assert code == 0, err
    d = json.loads(out)
    assert (d["knee_batch_size"], d["kv_ceiling_batch_size"], d["safe_max_num_seqs"]) == \
        (24, 24, 15)
    assert [p["batch_size"] for p in d["points"]] == [1, 2, 4, 8, 12, 15, 18, 24, 27, 36]
    code, out, err = run(capsys, "throughput", *m)
    rows = {line.split()[0]: line for line in out.splitlines()
            if line.strip() and line.split()[0].isdigit()}
    assert rows["24"].endswith("← knee ← KV ceiling")
    assert rows["15"].endswith("← safe --max-num-seqs")
    code, out, err = run(capsys, "throughput", *m, "--batch-sizes", "1,8", "--json")
    assert [p["batch_size"] for p in json.loads(out)["points"]] == [1, 8]
