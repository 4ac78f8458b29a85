"""Throughput curve, safe max-num-seqs (checked by an independent Monte Carlo), replicas,
admission limits, emitted flags."""

import json
import math
import random

import pytest
from configs import GEMMA2_9B, LLAMA31_8B

from kvplan.cli import main
from kvplan.core import capacity, queueing
from kvplan.core.sizing import EngineArgs, Gpu, Model, size
from kvplan.core.workload import LengthDist, parse_lengths, preset
from kvplan.errors import BadInput

H100 = Gpu("h100", "NVIDIA H100 80GB HBM3", 81089 << 20, "9.0", bandwidth_gbps=3350,
           tflops={"bf16": 989})
L4 = Gpu("l4", "NVIDIA L4", 22518 << 20, "8.9", bandwidth_gbps=300, tflops={"bf16": 121})


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def independent_overflow(groups, wl, mml, n, usable, trials, rng):
    """Simulate n running sequences straight from the workload (not from kvplan's sample):
    a running request is caught in proportion to its output length, at a uniform age."""
    outs = wl.output.points
    total = sum(outs)
    over = 0
    for _ in range(trials):
        s = 0
        for _ in range(n):
            x = rng.random() * total
            acc = 0
            for o in outs:
                acc += o
                if acc >= x:
                    break
            p = min(wl.prompt.points[rng.randrange(len(wl.prompt.points))], mml - 1)
            tokens = min(mml, p + int(rng.random() * o))
            s += sum(g.blocks_per_request(tokens, 0) for g in groups)
        if s > usable:
            over += 1
    return over / trials


@pytest.mark.parametrize("cfg,gpu,mml,wl,avail", [
    (LLAMA31_8B, L4, 16384, "chat", None),
    (LLAMA31_8B, H100, 32768, "reasoning", 6 << 30),
    (GEMMA2_9B, H100, 8192, "rag", 8 << 30),
])
def test_safe_max_num_seqs_keeps_overflow_under_risk(cfg, gpu, mml, wl, avail):
    r = size(Model("m", cfg), gpu, EngineArgs(max_model_len=mml, kv_cache_memory_bytes=avail))
    w = preset(wl).clip(mml)
    d = capacity.demand(r.groups, w, mml)
    n = capacity.safe_max_num_seqs(d, r.usable_blocks, 0.01)
    assert n >= 2
    rng = random.Random(7)
    trials = 4000
    p_at = independent_overflow(r.groups, w, mml, n, r.usable_blocks, trials, rng)
    assert p_at <= 0.01 + 3 * (0.01 * 0.99 / trials) ** 0.5  # within MC noise of the risk
    # and it is not needlessly conservative: 30 % more sequences overflow far more often
    p_more = independent_overflow(r.groups, w, mml, int(n * 1.3) + 1, r.usable_blocks, 1500,
                                  rng)
    assert p_more > 0.01


def test_guaranteed_policy_is_worst_case():
    r = size(Model("m", LLAMA31_8B), H100, EngineArgs(max_model_len=8192,
                                                      kv_cache_memory_bytes=10 << 30))
    d = capacity.demand(r.groups, preset("chat").clip(8192), 8192)
    assert capacity.guaranteed_max_num_seqs(d, r.usable_blocks) == (5120 - 1) // 512


def test_erlang_c_known_values():
    assert queueing.erlang_c(2, 1.0) == pytest.approx(1 / 3)
    assert queueing.erlang_c(1, 0.5) == pytest.approx(0.5)  # M/M/1: P(wait) = rho
    # M/M/1 wait quantile: P(W > t) = rho e^{-(mu - lam) t}
    t = queueing.wait_quantile(1, 0.5, 1.0, 0.95)
    assert t == pytest.approx(2 * math.log(10))  # 0.5 e^{-0.5 t} = 0.05
    assert queueing.wait_quantile(4, 5.0, 1.0) == float("inf")


def test_length_parsing():
    d = parse_lengths("p50=800,p99=6000", "x")
    # 512-point quantile grid: the 0.99 point sits at q = 0.9893
    assert abs(d.quantile(0.5) - 800) <= 8 and abs(d.quantile(0.99) / 6000 - 1) < 0.03
    assert parse_lengths("fixed:512", "x").mean == 512
    assert abs(parse_lengths("800", "x").mean / 800 - 1) < 0.02
    for bad in ("-5", "0", "p99=10", "p50=800,p99=100", "lots", "fixed:0"):
        with pytest.raises(BadInput):
            parse_lengths(bad, "--prompt-tokens")
    assert LengthDist.empirical([1, 2, 3], "t").max == 3


def test_throughput_json_contract(capsys):
    code, out, err = run(capsys, "throughput", "llama-3.1-8b-instruct", "--gpu", "h100",
                         "--max-model-len", "16384", "--workload", "chat",
                         "--batch-sizes", "1,8,64", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert [p["batch_size"] for p in d["points"]] == [1, 8, 64]
    for p in d["points"]:
        assert {"batch_size", "output_tokens_per_s", "tpot_ms", "ttft_ms"} <= p.keys()
    tps = [p["output_tokens_per_s"] for p in d["points"]]
    assert tps == sorted(tps)  # more batch, more throughput below the ceiling
    assert d["kv_ceiling_batch_size"] > d["safe_max_num_seqs"] > 0
    assert 1 <= d["knee_batch_size"] <= d["kv_ceiling_batch_size"]


def test_recommend_json_contract_and_flags(capsys):
    code, out, err = run(capsys, "recommend", "meta-llama/Llama-3.1-8B-Instruct", "--gpu",
                         "h100", "--workload", "chat", "--rate", "20", "--json")
    assert code == 0, err
    d = json.loads(out)
    for k in ("max_num_seqs", "max_model_len", "replicas", "gpus_per_replica",
              "per_replica_output_tokens_per_s", "ttft_p95_s", "tpot_p50_ms",
              "queue_depth_limit", "cost_per_hour", "cost_per_million_output_tokens",
              "flags", "command"):
        assert k in d, k
    assert d["flags"][d["flags"].index("--max-num-seqs") + 1] == str(d["max_num_seqs"])
    assert d["command"].startswith("vllm serve meta-llama/Llama-3.1-8B-Instruct ")
    # capacity covers the rate at <= 80 % utilisation
    assert d["utilization"] <= 0.8 and d["replicas"] >= 1
    code, out2, _ = run(capsys, "recommend", "meta-llama/Llama-3.1-8B-Instruct", "--gpu",
                        "h100", "--workload", "chat", "--rate", "20", "--emit-flags")
    assert out2.strip() == " ".join(d["flags"])


def test_recommend_more_rate_more_replicas(capsys):
    res = []
    for rate in ("5", "50", "200"):
        _, out, _ = run(capsys, "recommend", "llama-3.1-8b-instruct", "--gpu", "h100",
                        "--rate", rate, "--json")
        res.append(json.loads(out)["replicas"])
    assert res[0] <= res[1] < res[2]


def test_recommend_sglang_and_tgi(capsys):
    _, out, _ = run(capsys, "recommend", "llama-3.1-8b-instruct", "--gpu", "h100", "--rate",
                    "10", "--engine", "sglang", "--emit-flags")
    assert "--mem-fraction-static" in out and "--max-running-requests" in out
    assert "--context-length" in out and "--chunked-prefill-size" in out
    _, out, _ = run(capsys, "recommend", "llama-3.1-8b-instruct", "--gpu", "h100", "--rate",
                    "10", "--engine", "tgi", "--emit-flags")
    for f in ("--max-concurrent-requests", "--max-total-tokens", "--max-batch-total-tokens",
              "--max-batch-prefill-tokens"):
        assert f in out


def test_impossible_tpot_says_what_is_achievable(capsys):
    code, _, err = run(capsys, "recommend", "llama-3.1-8b-instruct", "--gpu", "l4",
                       "--max-model-len", "8192", "--tpot", "1")
    assert code == 1
    assert "TPOT 1 ms is below the" in err and "a single sequence gets on l4" in err


def test_search_ranks_by_cost(capsys):
    code, out, err = run(capsys, "recommend", "llama-3.1-8b-instruct", "--gpu",
                         "h100,l40s,a100", "-tp", "auto", "--kv-cache-dtype", "auto|fp8",
                         "--rate", "20", "--max-model-len", "16384", "--json", "--top", "4")
    assert code == 0, err
    d = json.loads(out)
    costs = [d["cost_per_hour"]] + [a["cost_per_hour"] for a in d["alternatives"]]
    assert costs == sorted(costs)


def _brute_force(model, gpus, wl, t, kvs):
    """Every candidate planned on its own pool, sorted as `search` ranks."""
    from dataclasses import replace

    from kvplan.core import plan as P

    out = []
    for g in gpus:
        for tp in (1, 2, 4, 8):
            for kv in kvs:
                try:
                    q = P.plan_one(model, g, replace(EngineArgs(), tensor_parallel_size=tp,
                                                     kv_cache_dtype=kv), None, wl, t)
                except BadInput:
                    continue
                if q.feasible:
                    out.append(q)
    return sorted(out, key=P._rank_key)


@pytest.mark.parametrize("model,workload,rate", [
    ("meta-llama/Llama-3.1-8B-Instruct", "chat", 30),
    ("meta-llama/Llama-3.1-8B-Instruct", "chat", 50),
    ("meta-llama/Llama-3.1-70B-Instruct", "rag", 5),
])
def test_search_returns_the_cheapest_plans_on_their_own_pools(model, workload, rate):
    """review 22 #3: ranked after re-sizing, over every candidate that could still rank, so
    the result is the brute force's (re-sizing moves a cost either way: a cap below the
    default grows the pool, one above it shrinks it)."""
    from kvplan.core import plan as P
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    m = resolve_model(model, None)
    gpus = [resolve_gpu(g, None, None) for g in ("a40", "gh200", "a100-pcie-80gb", "l40s")]
    wl = preset(workload)
    wl.rate = rate
    t = P.Targets(rate=rate)
    everything = [P._rank_key(q) for q in _brute_force(m, gpus, wl, t, ["auto", "fp8"])]
    assert len(everything) > 12
    for limit in (1, 3, 12):
        plans, _ = P.search(m, gpus, EngineArgs(), None, wl, t, [1, 2, 4, 8],
                            ["auto", "fp8"], limit=limit)
        assert [P._rank_key(q) for q in plans] == everything[:limit]


def test_recommended_plan_does_not_depend_on_top(capsys):
    """The old search re-planned the first-pass top 3 only and never re-sorted: at 30 req/s it
    recommended an 8-GPU a40 plan at $3.92/h above a $2.98/h gh200 plan in its own table."""
    argv = ["recommend", "meta-llama/Llama-3.1-8B-Instruct", "--workload", "chat", "--rate",
            "30", "--gpu", "a40,gh200,a100-pcie-80gb", "-tp", "auto", "--kv-cache-dtype",
            "auto|fp8", "--json"]
    rows = {}
    for top in ("1", "3", "12"):
        code, out, err = run(capsys, *argv, "--top", top)
        assert code == 0, err
        d = json.loads(out)
        rows[top] = [d] + d["alternatives"]
        assert len(rows[top]) == int(top)
        keys = [(r["cost_per_hour"], r["total_gpus"], -r["per_replica_output_tokens_per_s"])
                for r in rows[top]]
        assert keys == sorted(keys)
    def pick(r):
        return (r["gpu"], r["tensor_parallel_size"], r["kv_cache_dtype"], r["max_num_seqs"])

    assert [pick(r) for r in rows["1"]] == [pick(r) for r in rows["12"][:1]]
    assert [pick(r) for r in rows["3"]] == [pick(r) for r in rows["12"][:3]]
    code, out, _ = run(capsys, *argv[:-1], "--top", "12")
    table = out.split("Alternatives (ranked by cost)")[1]
    costs = [float(line.split()[-2]) for line in table.splitlines()[2:14]]
    assert costs == sorted(costs) and len(costs) == 12


def test_users_per_gpu(capsys):
    code, out, err = run(capsys, "recommend", "llama-3.1-8b-instruct", "--gpu", "h100",
                         "--users", "2000", "--think-time", "20", "--max-model-len", "16384",
                         "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["users_per_gpu"] == pytest.approx(2000 / (d["replicas"] * d["gpus_per_replica"]),
                                              rel=0.01)


def test_trace_input(tmp_path, capsys):
    t = tmp_path / "t.jsonl"
    t.write_text("\n".join(json.dumps({"prompt_tokens": 500 + i, "output_tokens": 200,
                                       "timestamp": i * 0.1}) for i in range(50)))
    code, out, err = run(capsys, "recommend", "llama-3.1-8b-instruct", "--gpu", "h100",
                         "--trace", str(t), "--json", "--max-model-len", "8192")
    assert code == 0, err
    assert json.loads(out)["rate"] == pytest.approx(10.0)
    c = tmp_path / "t.csv"
    c.write_text("input_len,output_len\n100,20\n300,40\n")
    code, _, err = run(capsys, "throughput", "llama-3.1-8b-instruct", "--gpu", "h100",
                       "--trace", str(c), "--json", "--max-model-len", "8192")
    assert code == 0, err


def test_users_with_a_timed_trace_plan_on_the_users(tmp_path, capsys):
    """Review 23b #10: the trace's 10 req/s is not a second, unused rate beside --users."""
    t = tmp_path / "t.jsonl"
    t.write_text("\n".join(json.dumps({"prompt_tokens": 500, "output_tokens": 200,
                                       "timestamp": i * 0.1}) for i in range(50)))
    code, out, err = run(capsys, "recommend", "llama-3.1-8b-instruct", "--gpu", "h100",
                         "--trace", str(t), "--users", "100", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["rate"] is None and d["users_per_gpu"] == pytest.approx(100 / d["total_gpus"])


def test_trace_rows_are_sorted_with_their_arrival_times(tmp_path):
    """Review 23b #2: the times were sorted apart from their rows. A trace written at
    completion, out of order: each row keeps its own lengths at its own time."""
    from kvplan.sources.trace import read_trace

    t = tmp_path / "t.csv"
    t.write_text("prompt_tokens,output_tokens,timestamp\n"
                 "300,30,102.5\n100,10,100.0\n400,40,102.5\n200,20,101.0\n")
    tr = read_trace(str(t))
    assert tr.arrivals == [0.0, 1.0, 2.5, 2.5]
    assert tr.prompts == [100, 200, 300, 400]  # equal times keep the file's order
    assert tr.outputs == [10, 20, 30, 40]


@pytest.mark.parametrize("content,msg", [
    ("", "is empty"),
    ("{\"prompt_tokens\": 5}\n", "no prompt/output token columns"),
    ("{bad json\n", "is not valid JSON"),
    ("prompt_tokens,output_tokens\n-1,5\n", "must be positive"),
    # found by fuzzing: inf counts overflowed int(), an inf arrival time the simulator's clock
    ("prompt_tokens,output_tokens\ninf,5\n", "token counts must be finite numbers"),
    ("prompt_tokens,output_tokens,timestamp\n5,5,0\n6,6,inf\n",
     "row 2: arrival time must be a finite number, got 'inf'"),
    # nanosecond timestamps read as seconds: an hour spans 3.6e12 "seconds"
    ("prompt_tokens,output_tokens,timestamp\n5,5,1750000000000000000\n6,6,1750003600000000000\n",
     "arrival times span 3.6e+12 s"),
    # a Latin-1 file (an internal error before: the decode error is not an OSError)
    ("prompt_tokens,output_tokens\n5,5 \xe9\n", "is not UTF-8 text (byte 32: b'\\xe9')"),
])
def test_bad_traces(tmp_path, capsys, content, msg):
    t = tmp_path / ("t.jsonl" if content.startswith("{") else "t.csv")
    t.write_bytes(content.encode("latin-1"))
    code, _, err = run(capsys, "recommend", "llama-3.1-8b-instruct", "--gpu", "h100",
                       "--trace", str(t))
    assert code == 2 and msg in err and "Traceback" not in err


def test_an_absurd_ttft_slo_is_no_queue_limit_not_a_crash(capsys):
    """Found by fuzzing annotations: a 1e308 s TTFT SLO overflowed the queue limit."""
    code, out, err = run(capsys, "recommend", "llama-3.1-8b-instruct", "--gpu", "h100",
                         "--workload", "chat", "--rate", "5", "--ttft", "1e308", "--json")
    assert code == 0, err
    assert json.loads(out)["queue_depth_limit"] == 10**9


@pytest.mark.parametrize("args,msg", [
    (("--rate", "-3"), "--rate must be positive"),
    (("--prompt-tokens", "0"), "cannot read --prompt-tokens"),
    # a sigma or percentile whose tail overflows a float (an internal error before)
    (("--prompt-tokens", "lognormal:100:1000"), "cannot read --prompt-tokens"),
    (("--output-tokens", "p50=800,p99=inf"), "cannot read --output-tokens"),
    (("--workload", "chatt"), "did you mean chat"),
    (("--preempt-risk", "2"), "--preempt-risk must be between 0 and 1"),
    (("--policy", "yolo"), "is not risk or guaranteed"),
    # review 22 #9: bad input, not "no deployment meets the targets" (exit 1)
    (("--kv-cache-dtype", "fp9"),
     "--kv-cache-dtype fp9 is not accepted by vLLM 0.33 (did you mean fp8"),
    (("--kv-cache-dtype", "fp8|nvfp4|turboquant_4bit_nc|bogus"),
     "--kv-cache-dtype bogus is not accepted by vLLM 0.33 (choose one of auto, fp8,"),
    (("--kv-cache-dtype", "auto|nvfp4", "--vllm-version", "0.18"),
     "--kv-cache-dtype nvfp4 is not accepted by vLLM 0.18"),
    (("-tp", "3"), "vLLM rejects --tensor-parallel-size 3: 32 attention heads are not "
     "divisible by 3 (use one of 1, 2, 4, 8, 16)"),
    (("-tp", "2,6"), "vLLM rejects --tensor-parallel-size 6: 32 attention heads"),
    # review 22 #16: refused, not silently bent
    (("--top", "0"), "--top must be >= 1, got 0"),
    (("--rate", "5", "--peak-rate", "2"), "--peak-rate 2 is below --rate 5 req/s"),
    (("--rate", "5", "--emit-flags", "--json"), "--emit-flags and --json each choose what"),
    (("--rate", "5", "--emit-flags", "--emit-env"), "--emit-flags and --emit-env each"),
    # review 23b #10: the headline showed --rate while the fleet was sized for the users
    (("--users", "10000", "--rate", "1"), "--users and --rate are exclusive (a closed loop"),
    (("--rate", "5", "--burstiness", "0.001"), "--burstiness must be at least 0.01, got 0.001"),
])
def test_bad_plan_input(capsys, args, msg):
    code, out, err = run(capsys, "recommend", "llama-3.1-8b-instruct", "--gpu", "h100", *args)
    assert code == 2 and msg in err and out == ""
    assert err.count("\n") == 1 and "no deployment meets" not in err


def test_a_peak_below_the_traces_rate_is_refused(tmp_path, capsys):
    t = tmp_path / "t.jsonl"
    t.write_text("\n".join(json.dumps({"prompt_tokens": 500, "output_tokens": 200,
                                       "timestamp": i * 0.1}) for i in range(50)))
    code, _, err = run(capsys, "recommend", "llama-3.1-8b-instruct", "--gpu", "h100",
                       "--trace", str(t), "--peak-rate", "4")
    assert code == 2 and "--peak-rate 4 is below the trace's rate, 10 req/s" in err
    code, out, err = run(capsys, "recommend", "llama-3.1-8b-instruct", "--gpu", "h100",
                         "--rate", "5", "--peak-rate", "5", "--json")
    assert code == 0, err  # a peak equal to the rate is a flat load


def test_a_typo_in_a_kv_list_or_a_duplicate_is_not_a_rejected_candidate(capsys):
    code, out, err = run(capsys, "recommend", "llama-3.1-8b-instruct", "--gpu", "h100",
                         "--rate", "5", "--kv-cache-dtype", "fp8|FP8|fp8", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["kv_cache_dtype"] == "fp8" and d["rejected"] == []
    assert len(d["alternatives"]) == 0  # one candidate, not three


def test_no_fit_hint_names_the_largest_max_model_len(capsys):
    """review 22 #15: the failure names the largest length that fits; the hint offers it,
    and no SLO knob when no SLO was given."""
    import re

    code, out, err = run(capsys, "recommend", "meta-llama/Llama-3.1-70B-Instruct", "--gpu",
                         "h100", "-tp", "2", "--kv-cache-dtype", "fp8", "--workload", "rag",
                         "--rate", "5")
    assert code == 1 and out == ""
    n = re.search(r"the largest max_model_len that fits is (\d+)", err).group(1)
    hint = err[err.index(f"(--max-model-len {n} "):]
    assert hint == (f"(--max-model-len {n} fits on h100-sxm TP2 fp8 or allow more GPUs "
                    "(--gpu any, -tp auto))\n")  # no SLO was given; fp8 was tried
    assert "h100-sxm TP2 fp8: max_model_len 131072 needs" in err  # not "h100-sxm TP2:" twice
    code, out, _ = run(capsys, "recommend", "meta-llama/Llama-3.1-70B-Instruct", "--gpu",
                       "h100", "-tp", "2", "--kv-cache-dtype", "fp8", "--workload", "rag",
                       "--rate", "5", "--max-model-len", n, "--json")
    assert code == 0 and json.loads(out)["max_model_len"] == int(n)


@pytest.mark.parametrize("version", ["0.6", "0.8.5", "0.10.2", "0.11", "0.14", "0.18", "0.20.2",
                                     "0.33"])
def test_emitted_flags_exist_in_every_version(capsys, version):
    from kvplan.engines.vllm_registry import Registry

    code, out, err = run(capsys, "recommend", "meta-llama/Llama-3.1-8B-Instruct", "--gpu",
                         "h100", "-tp", "2", "--kv-cache-dtype", "fp8", "--rate", "20",
                         "--vllm-version", version, "--json")
    assert code == 0, err
    flags = json.loads(out)["flags"]
    reg = Registry(version)
    assert reg.unknown(flags) == []
    assert reg.lookup("--tensor-parallel-size").name == "--tensor-parallel-size"


def test_registry_spelling_rules():
    from kvplan.engines.vllm_registry import Registry

    r = Registry("0.33")
    assert r.lookup("-tp").name == "--tensor-parallel-size"
    assert r.lookup("--max_num_seqs").name == "--max-num-seqs"
    assert r.lookup("--no-enable-prefix-caching").negated
    assert r.lookup("--max-num-seq") is None or r.lookup("--max-num-seq").name
    assert r.lookup("--max-num-seqz") is None
    assert r.suggest("--max-num-seqz") == "--max-num-seqs"
    assert Registry("0.20").lookup("--watermark") is None  # 0.33 only
    assert Registry("0.14").lookup("--swap-space") is not None
    assert Registry("0.18").lookup("--swap-space") is None  # removed in 0.18


def test_length_advice_counts_the_qwen25_vl_video_profile():
    from kvplan import catalog
    from kvplan.core.plan import length_advice
    from kvplan.sources.resolve import model_from_entry

    m = model_from_entry(*catalog.load("models").get("Qwen/Qwen2.5-VL-7B-Instruct"))
    l40s = Gpu("l40s", "NVIDIA L40S", 47695611822, "8.9")
    r = size(m, l40s, EngineArgs(), "0.33")  # default max_model_len 128,000: a 7-pair video
    (first, *_) = length_advice(r, preset("chat"))
    assert "--max-model-len 14336" in first
    # 0.33 normalises Qwen2.5-VL pixels on the GPU (uint8): the 7-pair video's encoder peak is
    # 458,752 patches x 1,280 x 2 B x (5 + 3 x 3,420/1,280 + 3 x 2 x 14^2/1,280 / 2 + 0.1)
    # = 15.35 - 0.50 GiB, the one-image profile's a seventh of the patches
    assert "vision profile from 114,688 to 16,384 tokens, up to 12.7 GiB" in first
    r = size(m, l40s, EngineArgs(skip_mm_profiling=True), "0.33")
    assert "vision profile" not in length_advice(r, preset("chat"))[0]


def test_recommend_caps_max_num_seqs_at_the_mamba_block_count(capsys):
    # vLLM 0.20+ needs a KV block per decoding sequence of a Mamba / linear-attention model
    # under FULL graphs: the default 1,024 does not start, the plan sizes at the block count
    # (and its safe max-num-seqs stays below it: each request holds a block in every group)
    from configs import QWEN3_NEXT_80B

    from kvplan.core.plan import Targets, plan_one

    m = Model("qwen3-next", QWEN3_NEXT_80B)
    args = EngineArgs(tensor_parallel_size=4, max_model_len=8192, kv_cache_memory_bytes=1 << 30)
    r = size(m, H100, args, "0.29")
    assert not r.fits and r.max_num_seqs_limit == r.num_gpu_blocks < 1024
    p = plan_one(m, H100, args, "0.29", preset("chat").clip(8192), Targets(rate=1))
    assert 1 <= p.max_num_seqs <= r.num_gpu_blocks // len(r.groups)


def test_recommend_never_emits_more_seqs_than_the_token_budget_refills(capsys):
    # a small model on an L40S: the KV pool would hold ~2,900 sequences of 1,000 + 250
    # tokens, vLLM rejects max_num_seqs above max_num_batched_tokens (2,048 by default on a
    # < 70 GiB GPU), and with decodes first the budget refills at most
    # 2,048 x 250 / (1,000 + 249) = 409.9 running sequences (perf.unstarved_batch)
    code, out, err = run(capsys, "recommend", "Qwen/Qwen2.5-0.5B", "--gpu", "l40s",
                         "--max-model-len", "4096", "--prompt-tokens", "fixed:1000",
                         "--output-tokens", "fixed:250", "--rate", "50", "--json")
    d = json.loads(out)
    assert code == 0 and d["max_num_seqs"] == 409 < 2048 < d["safe_max_num_seqs"]
    assert "--max-num-seqs 409" in d["command"] and d["budget_limited"] is True
    assert any("max_num_batched_tokens (2048) >= max_num_seqs" in a for a in d["advice"])
    assert any(a.startswith("max_num_seqs 409 (not 2048): with max_num_batched_tokens 2048")
               for a in d["advice"])


def test_search_falls_back_to_expert_parallel_for_fp8_block_splits(capsys):
    # Qwen3-235B-FP8 at TP8 splits its 1,536-wide experts into 192-wide slices of 128x128
    # blocks, which vLLM 0.28 rejects; with expert parallelism the experts stay whole
    code, out, err = run(capsys, "recommend", "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "--gpu",
                         "h100", "-tp", "8", "--workload", "chat", "--rate", "20",
                         "--max-model-len", "32768", "--vllm-version", "0.28", "--json")
    d = json.loads(out)
    assert code == 0, err
    assert "--tensor-parallel-size 8 --enable-expert-parallel" in d["command"]
    # 0.29+ re-scale the experts to 64-wide blocks instead (`refine_fp8_moe_block_shape`)
    code, out, err = run(capsys, "recommend", "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "--gpu",
                         "h100", "-tp", "8", "--workload", "chat", "--rate", "20",
                         "--max-model-len", "32768", "--json")
    assert code == 0, err
    assert "--enable-expert-parallel" not in json.loads(out)["command"]


def test_recommend_sizes_the_pool_its_max_num_seqs_leaves(capsys):
    # --max-num-seqs 55 shrinks vLLM's profile: the dummy sampler runs 55 requests, not 1,024
    # (0.33: 3.9 fp32 buffers x 128,256 vocab each), and the graph grid ends at 110
    code, out, err = run(capsys, "recommend", "meta-llama/Llama-3.1-8B-Instruct", "--gpu",
                         "h100", "-w", "reasoning", "--rate", "2", "--tpot", "20", "--json")
    assert code == 0, err
    d = json.loads(out)
    n = d["max_num_seqs"]
    note = next(a for a in d["advice"] if "vLLM profiles" in a)
    assert f"--max-num-seqs {n} vLLM profiles {n} sequences instead of 1024" in note
    gained = float(note.split(": ")[1].split(" GiB")[0])

    def sized(*flags):
        _, o, _ = run(capsys, "size", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100",
                      "--max-model-len", str(d["max_model_len"]), "--json", *flags)
        return json.loads(o)

    default, capped = sized(), sized("--max-num-seqs", str(n))
    # the activation peak falls to the forward pass, the graph estimate to a 2n grid
    drop = (default["activation_bytes"] - capped["activation_bytes"]
            + default["cudagraph_bytes"] - capped["cudagraph_bytes"])
    assert abs(gained - drop / 2**30) <= 0.05
    assert capped["available_kv_bytes"] - default["available_kv_bytes"] == drop


def test_recommend_plans_lora_and_speculative_memory(capsys):
    # the LoRA slots shrink the pool (fewer safe sequences) and come back as flags
    base = ["recommend", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "l4", "--rate", "2", "--json"]
    assert main(base) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(base + ["--enable-lora", "--max-loras", "4", "--max-lora-rank", "32"]) == 0
    lora = json.loads(capsys.readouterr().out)
    assert lora["flags"][-5:] == ["--enable-lora", "--max-loras", "4", "--max-lora-rank", "32"]
    assert lora["safe_max_num_seqs"] < plain["safe_max_num_seqs"]
    assert any(a.startswith("LoRA: the adapter slots") for a in lora["advice"])
    assert main(["recommend", "nvidia/Qwen3.6-27B-NVFP4", "--gpu", "b200", "--rate", "2",
                 "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 2}',
                 "--emit-flags"]) == 0
    out = capsys.readouterr().out
    assert out.strip().endswith(
        """--speculative-config '{"method":"mtp","num_speculative_tokens":2}'""")
    assert main(base + ["--engine", "sglang", "--enable-lora"]) == 2


def test_recommend_keeps_dspark_draft_slots_inside_the_token_budget(capsys):
    # vLLM 0.25-0.27 keep k - 1 = 6 slots per request for DSpark's parallel drafting and
    # refuse to start when 8,192 - 6 x max_num_seqs <= 0: the plan stops at 1,365
    spec = '{"method":"dspark","num_speculative_tokens":7}'
    code, out, err = run(capsys, "recommend", "deepseek-ai/DeepSeek-V4-Flash", "--gpu", "b300",
                         "--speculative-config", spec, "--vllm-version", "0.26", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["max_num_seqs"] == (8192 - 1) // 6 == 1365
    code, out, err = run(capsys, "size", "deepseek-ai/DeepSeek-V4-Flash", "--gpu", "b300",
                         "--speculative-config", spec, "--vllm-version", "0.26",
                         "--max-num-seqs", "1366")
    assert code == 2 and "refuses to start" in err


def test_recommended_cap_is_safe_on_its_own_pool(capsys):
    # the cap first comes from the pool at vLLM's default 1,024 sequences (6 here); sized
    # again at the cap, the pool grows (a smaller profile and CUDA-graph grid) and the cap is
    # raised while the risk policy holds on the pool the raised cap leaves: 13, 8 replicas
    import json

    from kvplan.cli import main

    assert main(["recommend", "llama-3.1-70b-instruct", "--gpu", "h100", "-tp", "2",
                 "--kv-cache-dtype", "fp8", "--workload", "rag", "--rate", "5",
                 "--max-model-len", "32768", "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["max_num_seqs"] == rec["safe_max_num_seqs"] == 13
    assert rec["replicas"] == 8


def _own_pool_cap(m, gpu, args, version, wl, t, n):
    """The policy's cap on the pool vLLM leaves at --max-num-seqs n (-1: it does not start)."""
    from dataclasses import replace

    from kvplan.core.plan import policy_caps

    r = size(m, gpu, replace(args, max_num_seqs=n), version, hints=False)
    return policy_caps(r, wl.clip(r.max_model_len), t)[0] if r.fits else -1


def test_planned_cap_is_the_fixed_point_of_its_own_pool(monkeypatch):
    # Gemma-4-E4B on an L4 (32k, 0.9, vLLM 0.33, chat, 1 % risk): a larger --max-num-seqs
    # profiles a larger sampler and graph grid, so the pool and its safe cap shrink. The
    # default 256 holds 47; the pool at 47 holds 75, at 75 only 71. The plan used to stop at
    # 47 when 75 failed; the largest n whose own pool holds n is 71 (72 holds 71)
    import kvplan.core.plan as plan_mod
    from kvplan.core.plan import Targets, plan_one
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    m, l4 = resolve_model("google/gemma-4-E4B-it"), resolve_gpu("l4")
    args = EngineArgs(max_model_len=32768, gpu_memory_utilization=0.9)
    wl, t = preset("chat"), Targets(rate=1)
    table = {n: _own_pool_cap(m, l4, args, "0.33.0", wl, t, n)
             for n in (47, 56, 64, 70, 71, 72, 73, 75, 256)}
    assert table == {47: 75, 56: 74, 64: 73, 70: 72, 71: 71, 72: 71, 73: 71, 75: 71, 256: 47}
    calls = []
    real = plan_mod.size
    monkeypatch.setattr(plan_mod, "size", lambda *a, **k: calls.append(a[2]) or real(*a, **k))
    p = plan_one(m, l4, args, "0.33.0", wl, t)
    assert p.max_num_seqs == p.safe_seqs == 71 and p.result.args.max_num_seqs == 71
    assert p.result.usable_blocks == 14242
    # the default, the cap it holds (47), the cap 47's pool allows (75), 75's own figure
    # (71), which holds itself: four sizes of ~1 ms
    assert [a.max_num_seqs for a in calls] == [None, 47, 75, 71]


@pytest.mark.parametrize("model,gpu,kw,version,workload,targets", [
    ("google/gemma-4-E4B-it", "l4", {"max_model_len": 32768, "gpu_memory_utilization": 0.9},
     "0.33.0", "chat", {}),
    ("google/gemma-4-E4B-it", "l4", {"max_model_len": 32768}, "0.33.0", "chat",
     {"preempt_risk": 0.05}),
    ("meta-llama/Llama-3.1-70B-Instruct", "h100",
     {"tensor_parallel_size": 2, "kv_cache_dtype": "fp8", "max_model_len": 32768}, None, "rag",
     {}),
    ("meta-llama/Llama-3.1-8B-Instruct", "l4", {"max_model_len": 16384}, None, "chat", {}),
    ("Qwen/Qwen3-8B", "l4", {"max_model_len": 16384}, None, "rag", {"policy": "guaranteed"}),
    # above the default 256: the larger profile shrinks the pool, the cap comes down (286 on
    # the default pool, 285 on its own)
    ("Qwen/Qwen2.5-7B-Instruct", "l40s", {}, None, "chat", {}),
    # Mamba blocks: the default 1,024 does not start, the plan starts at the block count
    ("Qwen/Qwen3.5-27B", "h100", {"max_model_len": 8192}, None, "chat", {}),
])
def test_planned_cap_holds_on_its_pool_and_one_more_does_not(model, gpu, kw, version, workload,
                                                             targets):
    from kvplan.core.plan import Targets, plan_one
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    m, g = resolve_model(model), resolve_gpu(gpu)
    args, wl, t = EngineArgs(**kw), preset(workload), Targets(rate=1, **targets)
    p = plan_one(m, g, args, version, wl, t)
    n = p.max_num_seqs
    assert p.feasible and p.result.args.max_num_seqs == n
    assert _own_pool_cap(m, g, args, version, wl, t, n) >= n
    r = size(m, g, args, version, hints=False)
    if n + 1 <= min(r.max_num_batched_tokens, max(r.max_num_seqs, n)):
        assert _own_pool_cap(m, g, args, version, wl, t, n + 1) < n + 1

def test_mla_moe_at_tp_gets_the_data_parallel_kv_figure():
    # DeepSeek-R1 at TP8 on H200s keeps its 576-wide latent KV on all 8 ranks; as 8 DP
    # engines with EP each holds a pool of its own (sized by `size`, every term included)
    from kvplan.core.plan import dp_advice
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    m, h200 = resolve_model("deepseek-ai/DeepSeek-R1"), resolve_gpu("h200")
    tp8 = size(m, h200, EngineArgs(tensor_parallel_size=8), "0.33")
    dp8 = size(m, h200, EngineArgs(data_parallel_size=8, enable_expert_parallel=True), "0.33")
    (note,) = dp_advice(m, h200, tp8)
    assert f"8 engines of {dp8.kv_cache_tokens:,}, against {tp8.kv_cache_tokens:,}" in note
    assert f"{8 * dp8.kv_cache_tokens / tp8.kv_cache_tokens:.1f}x" in note
    # dense GQA models split their KV heads over TP: no such note
    llama = resolve_model("meta-llama/Llama-3.1-70B-Instruct")
    assert dp_advice(llama, h200, size(llama, h200, EngineArgs(tensor_parallel_size=4),
                                       "0.33")) == []


def test_prefix_cache_blocks_are_held_once():
    # the shared prefix leaves each request's demand and is held once, as long as the longest
    # running request's cached part: whole 16-token blocks of 80 % of the top rag prompt
    from dataclasses import replace

    r = size(Model("m", LLAMA31_8B), H100, EngineArgs(max_model_len=32768), "0.33")
    wl = preset("rag").clip(32768)
    top = min(wl.prompt.max, 32767)
    d0 = capacity.demand(r.groups, wl, 32768)
    d = capacity.demand(r.groups, replace(wl, prefix_hit=0.8), 32768)
    assert d0.shared == 0
    assert d.shared == math.ceil((min(int(top * 0.8), top - 1) // 16 * 16) / 16)
    assert d.mean < d0.mean  # each request keeps only its own blocks
    u = r.usable_blocks
    assert capacity.mean_ceiling(d, u) == int((u - d.shared) / d.mean)
    # the overflow tail is the same sum against the pool less the shared prefix
    n = capacity.safe_max_num_seqs(d, u, 0.01)
    assert d.overflow_prob(n, u) == replace(d, shared=0).overflow_prob(n, u - d.shared)


def test_emit_flags_warns_of_the_env_the_plan_needs_and_emit_env_prints_it(capsys):
    """review 22 #8: `vllm serve M $(... --emit-flags)` loses VLLM_ROCM_MOE_PADDING=0 (20.6 GiB
    of KV per MI300X here): said on stderr; --emit-env and JSON `env` carry it."""
    import shlex

    base = ["recommend", "Qwen/Qwen3-VL-30B-A3B-Instruct", "--gpu", "mi300x", "--vllm-version",
            "0.18", "--workload", "chat", "--rate", "5"]
    env = ["--env", "VLLM_ROCM_MOE_PADDING=0"]
    code, out, err = run(capsys, *base, *env, "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["env"] == ["VLLM_ROCM_MOE_PADDING=0"]
    assert d["command"] == shlex.join([*d["env"], "vllm", "serve", d["model"], *d["flags"]])
    code, flags, err = run(capsys, *base, *env, "--emit-flags")
    assert code == 0 and shlex.split(flags) == d["flags"]
    assert err == ("kvplan: warning: the plan was sized with VLLM_ROCM_MOE_PADDING=0 in vLLM's "
                   "environment, which --emit-flags does not print: start vLLM with it "
                   "(--emit-env prints it) or its pool is not the one planned\n")
    code, out, err = run(capsys, *base, *env, "--emit-env")
    assert (code, out, err) == (0, "VLLM_ROCM_MOE_PADDING=0\n", "")
    # sized without it: nothing to carry, nothing said
    code, out, err = run(capsys, *base, "--emit-env")
    assert (code, out, err) == (0, "", "")
    code, out, err = run(capsys, *base, "--emit-flags")
    assert code == 0 and out.startswith("--max-model-len ") and err == ""
    code, out, _ = run(capsys, *base, "--json")
    assert json.loads(out)["env"] == []


def test_recommend_wording_says_what_each_figure_is(capsys):
    """review 22 #15: served demand is not capacity; the admission line names the TTFT SLO
    only when one was given; the KV line says which figures are per GPU and per replica."""
    argv = ["recommend", "llama-3.1-70b-instruct", "--gpu", "h100", "-tp", "2",
            "--kv-cache-dtype", "fp8", "--workload", "rag", "--max-model-len", "32768"]
    code, out, err = run(capsys, *argv, "--rate", "5")
    assert code == 0, err
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")}
    code, js, _ = run(capsys, *argv, "--rate", "5", "--json")
    d = json.loads(js)
    r = size(_model("llama-3.1-70b-instruct"), _gpu("h100"),
             EngineArgs(tensor_parallel_size=2, kv_cache_dtype="fp8", max_model_len=32768,
                        max_num_seqs=d["max_num_seqs"]), None)
    assert (f"{r.budget.kv_pool / 2**30:.1f} GiB/GPU     fp8; {r.num_gpu_blocks:,} blocks of "
            f"{r.block_size} tokens per replica ({r.kv_cache_tokens:,} tokens as vLLM logs it, "
            "each block split over its 2 GPUs)") in rows["KV"]
    assert rows["served"].split()[1:] == [f"{d['daily_output_tokens'] / 1e9:.2f}", "B",
                                          "tok/day", "output", "tokens", "the",
                                          f"{d['replicas']}", "replicas", "serve", "at", "5",
                                          "req/s", "(the", "demand,", "not", "a", "ceiling)"]
    assert "capacity" not in rows
    assert rows["admission"].endswith("per replica; reject with 429 beyond (about two service "
                                      "times of queueing; --ttft sizes it to an SLO)")
    code, out, err = run(capsys, *argv, "--rate", "5", "--ttft", "5")
    assert code == 0, err
    assert "(keeps queueing inside the TTFT SLO)" in out
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    assert "  capacity " in out and "output tokens at 80% utilisation (no --rate given)" in out
    assert "  served " not in out


def _model(name):
    from kvplan.sources.resolve import resolve_model

    return resolve_model(name, None)


def _gpu(name):
    from kvplan.sources.resolve import resolve_gpu

    return resolve_gpu(name, None, None)


def test_no_fit_hint_offers_only_what_was_not_given(capsys):
    """An unreachable TTFT with --gpu any does not suggest --gpu any again."""
    code, out, err = run(capsys, "recommend", "qwen3-32b", "--gpu", "any", "--rate", "50",
                         "--ttft", "0.1")
    assert code == 1 and out == ""
    assert err.rstrip().endswith("relax --tpot/--ttft, allow more GPUs (-tp auto) or try "
                                 "--kv-cache-dtype 'auto|fp8')")
    assert "--gpu any," not in err


def test_tpot_at_the_planned_load_matches_the_simulator(capsys):
    """recommend's TPOT is the cap's (a full batch); at 5 req/s an H100 runs about 19
    sequences, and the simulator at that rate and cap measures the same TPOT p50 (11.05 ms
    over 120 s of arrivals; kvplan 11.3 ms)."""
    code, out, err = run(capsys, "recommend", "llama-3.1-8b", "--gpu", "h100", "--rate", "5",
                         "--max-model-len", "16k", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["tpot_p50_ms"] > 50 and d["running_at_rate"] == pytest.approx(19, abs=2)
    code, out, err = run(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--max-model-len",
                         "16k", "--max-num-seqs", str(d["max_num_seqs"]), "--rate", "5",
                         "--duration", "120", "--json")
    assert code == 0, err
    sim = json.loads(out)["tpot_p50_ms"]
    assert d["tpot_p50_ms_at_rate"] == pytest.approx(sim, rel=0.05)
    code, out, _ = run(capsys, "recommend", "llama-3.1-8b", "--gpu", "h100", "--max-model-len",
                       "16k", "--json")  # no rate: no planned load
    d = json.loads(out)
    assert d["tpot_p50_ms_at_rate"] is None and d["running_at_rate"] is None


def test_ttft_queues_per_replica(capsys):
    """Each replica queues its own requests: 12 L4s at cap 15 (chat, 8K, 5 req/s) get
    0.417 req/s each; one serves 0.536 req/s at the cap, a service time of 15 / 0.536 = 28.0 s,
    so 11.66 Erlang on 15 slots: Erlang C P(wait) = 0.27 and a wait p95 of
    ln(0.27 / 0.05) / (15 / 28.0 - 0.417) = 14.1 s (pooled over 180 slots it was about 1 s).
    A 2 s SLO takes 15 replicas, and the simulator at a replica's 1/3 req/s keeps 95 % of
    first tokens within it."""
    base = ("recommend", "llama-3.1-8b", "--gpu", "l4", "--max-model-len", "8K", "--workload",
            "chat", "--rate", "5", "--json")
    code, out, err = run(capsys, *base)
    d = json.loads(out)
    assert (d["replicas"], d["max_num_seqs"]) == (12, 15)
    assert d["per_replica_requests_per_s"] == pytest.approx(0.536, abs=0.001)
    assert d["ttft_p95_s"] == pytest.approx(14.1, abs=0.3)
    code, out, err = run(capsys, *base, "--ttft", "2")
    d = json.loads(out)
    assert (d["replicas"], d["max_num_seqs"]) == (15, 15) and d["ttft_p95_s"] <= 2
    code, out, err = run(capsys, "simulate", "llama-3.1-8b", "--gpu", "l4", "--max-model-len",
                         "8K", "--workload", "chat", "--max-num-seqs", "15", "--rate",
                         str(5 / 15), "--duration", "6000", "--ttft", "2", "--json")
    sim = json.loads(out)
    assert sim["goodput_requests_per_s"] >= 0.95 * sim["requests_completed"] / 6000 * 0.99


def test_served_part_of_a_workload_by_hand():
    """Review 23b #5. uniform:100:900 has quantile points round(100 + 800 (i + 0.5) / 512):
    the point is 500 or more from i = 256 (499.5 <= 100 + 800 x 256.5 / 512 = 500.8), so at
    max_model_len 500 vLLM refuses half of them; the served prompts run 101..499."""
    from kvplan.core.workload import Workload

    wl = Workload("u", parse_lengths("uniform:100:900", "p"), parse_lengths("fixed:800", "o"))
    assert wl.rejected_share(500) == 0.5
    served = wl.clip(500)
    assert (served.prompt.points[0], served.prompt.max) == (101, 499)
    assert served.output.max == 499  # outputs within max_model_len - 1
    assert wl.clip(901) is wl and wl.rejected_share(901) == 0.0
    assert wl.served_share(500) == 0.5
    with pytest.raises(BadInput, match=r"100.0% of the workload's requests have prompts of "
                       r"max_model_len \(100 tokens\) or more"):
        wl.served_share(100)
    # 100 + 800 (i + 0.5) / 512 >= 895.5 from i = 509: 3 of the 512 points
    assert wl.rejected_share(896) == 3 / 512


def test_recommend_plans_the_served_requests_and_says_how_many_are_refused(capsys):
    """agent at 8K: 308 of 512 prompt quantiles are 8,192 or more (log-normal p50 10,000,
    sigma ln 6 / 2.326 = 0.77: P = Phi(-ln(8192/10000)/0.77) = 0.60). The fleet is the one
    planned for the 204/512 x 1 = 0.3984375 req/s served."""
    common = ("llama-3.1-8b-instruct", "--gpu", "l4", "--max-model-len", "8192", "--workload",
              "agent", "--json")
    code, out, err = run(capsys, "recommend", *common, "--rate", "1")
    assert code == 0, err
    d = json.loads(out)
    assert d["rate"] == 1 and d["rejected_share"] == round(308 / 512, 4) == 0.6016
    assert d["served_rate"] == round(204 / 512, 4)
    assert d["advice"][0].startswith("60.2% of the requests have prompts of max_model_len "
                                     "(8,192 tokens) or more: vLLM answers them HTTP 400")
    assert "the fleet is planned for the other 39.8% (0.398 of 1 req/s)" in d["advice"][0]
    # the same plan as the served requests alone (a workload with no prompt refused) at the
    # served rate
    from kvplan.core.plan import Targets
    from kvplan.recommend import recommend
    from kvplan.sources.resolve import resolve_model

    served = recommend(resolve_model("llama-3.1-8b-instruct", None), "l4", "1", "auto",
                       EngineArgs(max_model_len=8192), None, preset("agent").clip(8192),
                       Targets(rate=204 / 512), "vllm", None).to_json()
    assert served["rejected_share"] == 0.0
    assert (d["replicas"], d["max_num_seqs"]) == (served["replicas"], served["max_num_seqs"])
    assert d["replicas"] == 5  # 14 when the refused 60 % were planned as 8,191-token prompts
    code, out, err = run(capsys, "recommend", "llama-3.1-8b-instruct", "--gpu", "h100",
                         "--prompt-tokens", "fixed:200000", "--output-tokens", "10", "--rate",
                         "5")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "100.0% of the workload's requests have prompts of max_model_len (131,072" in err
    assert "(p99 200,000 tokens)" in err


def test_throughput_reports_the_refused_share(capsys):
    common = ("llama-3.1-8b-instruct", "--gpu", "l4", "--max-model-len", "8192", "--json")
    code, out, err = run(capsys, "throughput", *common, "--workload", "agent")
    assert code == 0, err
    d = json.loads(out)
    assert d["rejected_share"] == 0.6016 and d["notes"][0].startswith("60.2% of the requests")
    code, out, err = run(capsys, "throughput", *common, "--prompt-tokens", "fixed:9000")
    assert code == 2 and "100.0% of the workload's requests" in err
    code, out, err = run(capsys, "throughput", *common, "--prompt-tokens", "fixed:8191")
    assert json.loads(out)["rejected_share"] == 0.0  # 8,191 + one output token fit


def _trace(tmp_path, name, rows):
    f = tmp_path / name
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(f)


def test_a_traces_refused_share_is_exact_in_every_command(capsys, tmp_path):
    """Review 23d #12: 999 rows of 1,000 tokens and one of 9,000, a second apart (999 gaps
    over 999 s: 1 req/s). At 8K vLLM refuses 1 row in 1,000; the 512 quantiles the lengths
    are kept as said 1/512 in recommend and throughput while simulate counted 1/1,000."""
    rows = [{"prompt_tokens": 9000 if i == 500 else 1000, "output_tokens": 100,
             "timestamp": i} for i in range(1000)]
    tr = _trace(tmp_path, "one_in_1000.jsonl", rows)
    common = ("llama-3.1-8b", "--gpu", "l4", "--max-model-len", "8192", "--trace", tr,
              "--json")
    code, out, err = run(capsys, "recommend", *common)
    d = json.loads(out)
    assert (d["rate"], d["rejected_share"], d["served_rate"]) == (1.0, 0.001, 0.999)
    assert d["advice"][0].startswith("0.1% of the requests")
    code, out, err = run(capsys, "throughput", *common)
    assert json.loads(out)["rejected_share"] == 0.001
    code, out, err = run(capsys, "simulate", *common)
    d = json.loads(out)
    assert (d["requests_too_long"], d["requests_completed"]) == (1, 999)
    assert any(n.startswith("0.1% of the requests") for n in d["notes"])


def test_recommend_plans_each_candidate_at_its_served_rate_in_one_search(capsys, monkeypatch):
    """Review 23d #9: with requests refused the search ran twice (once at the offered rate,
    then at the served one). Now each candidate is planned on the rate its own
    max_model_len serves, in one search: agent at 8K is still 5 L4s for the 204/512 x 1
    req/s served (the plan `test_recommend_plans_the_served_requests...` checks by hand)."""
    import kvplan.recommend as R

    calls = []
    search = R.search

    def counted(*a, **k):
        calls.append(1)
        return search(*a, **k)

    monkeypatch.setattr(R, "search", counted)
    code, out, err = run(capsys, "recommend", "llama-3.1-8b-instruct", "--gpu", "l4",
                         "--max-model-len", "8192", "--workload", "agent", "--rate", "1",
                         "--json")
    d = json.loads(out)
    assert len(calls) == 1
    assert (d["replicas"], d["max_num_seqs"], d["served_rate"]) == (5, 4, round(204 / 512, 4))


def test_alternatives_are_the_same_objects_and_show_what_they_refuse(capsys):
    """Review 23d #13: `alternatives` lacked rejected_share, served_rate, flags, env, command
    and advice, and an auto-fitted alternative refused traffic silently. agent (log-normal,
    p50 10,000, sigma ln 6 / 2.326 = 0.770): an L4 auto-fits about 29K tokens, where vLLM
    refuses P(prompt >= L) = 1 - Phi(ln(L / 10,000) / 0.770) of the requests, about 8 %."""
    from statistics import NormalDist

    argv = ("recommend", "llama-3.1-8b", "--gpu", "l4,h100", "--max-model-len", "auto",
            "--workload", "agent", "--rate", "5", "--top", "2")
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    d = json.loads(out)
    (alt,) = d["alternatives"]
    assert set(alt) == set(d) - {"alternatives", "rejected"}
    assert (d["gpu"], d["max_model_len"], d["rejected_share"]) == ("h100-sxm", 131072, 0.0)
    mml, share = alt["max_model_len"], alt["rejected_share"]
    hand = 1 - NormalDist().cdf(math.log(mml / 10000) / (math.log(6) / 2.3263))
    assert alt["gpu"] == "l4" and 25000 < mml < 34000
    assert share == pytest.approx(hand, abs=0.003)
    assert alt["served_rate"] == pytest.approx(5 * (1 - share), abs=0.001)
    assert f"--max-model-len {mml} " in alt["command"] and alt["flags"][:2] == [
        "--max-model-len", str(mml)]
    assert alt["advice"][0].startswith(f"{share:.1%} of the requests have prompts of "
                                       f"max_model_len ({mml:,} tokens)")
    code, out, err = run(capsys, *argv)
    assert "Alternatives (ranked by cost per request served)" in out
    assert "max-model-len  refused" in out and f"{share:.1%}" in out


def test_recommend_keeps_max_model_len_within_vllm_0_19s_admission_limit(capsys):
    """Review 23d #2: on 0.19 Gemma-3-12B's L40S pool admits prompts up to 44,320 tokens
    (tests/test_simulate.py); a longer one is accepted and stalls the queue for good. The
    plan emits 44,321, which refuses summarization's top quantile point (log-normal, p50
    6,000, sigma ln 5 / 2.326 = 0.692: P(prompt >= 44,321) = 1 - Phi(2.890) = 0.0019, 1 of
    512 points), and says why; 0.20.2 keeps the model's 131,072."""
    argv = ("recommend", "gemma-3-12b-it", "--gpu", "l40s", "--workload", "summarization",
            "--rate", "1", "--json")
    code, out, err = run(capsys, *argv, "--vllm-version", "0.19")
    assert code == 0, err
    d = json.loads(out)
    assert d["max_model_len"] == 44321 and "--max-model-len 44321" in d["command"]
    assert d["rejected_share"] == round(1 / 512, 4)
    assert "vLLM 0.20+ serves them at a longer --max-model-len" in d["advice"][0]
    assert any(a.startswith("--max-model-len 44321 (not 131,072): vLLM 0.19's whole-prompt "
                            "admission check") for a in d["advice"])
    assert not any("99.9 % of requests fit in" in a for a in d["advice"])
    code, out, err = run(capsys, *argv, "--vllm-version", "0.20.2")
    d = json.loads(out)
    assert d["max_model_len"] == 131072 and d["rejected_share"] == 0.0


def test_length_advice_reads_the_whole_workload(capsys, tmp_path):
    """Review 23d #7: 90 prompts of 300 tokens and 10 of 12,000 at 8K. vLLM refuses 10 %, and
    the advice said both "raise --max-model-len to serve them" and "99.9 % of requests fit in
    1,024 tokens" (the served 90 %). On the whole workload the 99.9 % length is 12,000 +
    100, over 8,192: no shorter length is advised. Chat at 131,072 still gets one: its top
    quantile point, Phi^-1(511.5/512) = 3.097, is 800 e^(0.8662 x 3.097) = 11,699 prompt
    tokens (sigma ln(6000/800)/2.326) plus 250 e^(0.6744 x 3.097) = 2,018 output, 13,717,
    rounded up to 14,336."""
    rows = [{"prompt_tokens": 12000 if i % 10 == 0 else 300, "output_tokens": 100,
             "timestamp": i} for i in range(100)]
    code, out, err = run(capsys, "recommend", "llama-3.1-8b", "--gpu", "l4", "--max-model-len",
                         "8192", "--trace", _trace(tmp_path, "bimodal.jsonl", rows), "--json")
    advice = json.loads(out)["advice"]
    assert advice[0].startswith("10.0% of the requests") and "raise --max-model-len" in advice[0]
    assert not any("99.9 % of requests" in a for a in advice)
    code, out, err = run(capsys, "recommend", "llama-3.1-8b", "--gpu", "h100", "--workload",
                         "chat", "--json")
    assert any(a.startswith("99.9 % of requests fit in 14,336 tokens: --max-model-len 14336")
               for a in json.loads(out)["advice"])


def test_peak_rate_reports_the_ttft_there(capsys):
    """Review 23d #11: a peak sizes the fleet for utilisation <= 1, and at 99 % the queue is
    long. Llama-3.1-8B, L4, 8K, chat at 5 req/s with an 8 req/s peak: 15 replicas of cap 15;
    the served peak 8 x 510/512 = 7.969 req/s is 0.531 a replica against the 0.536 one
    serves. Its TTFT p95 is at least the M/M/c wait's (Erlang C for c = 15 slots, P(W > t) =
    C e^-(c mu - lambda) t), and at most that plus a request's own first-token time."""
    from kvplan.core.plan import Targets
    from kvplan.recommend import recommend
    from kvplan.sources.resolve import resolve_model

    wl = preset("chat")
    rec = recommend(resolve_model("llama-3.1-8b", None), "l4", "1", "auto",
                    EngineArgs(max_model_len=8192), None, wl, Targets(rate=5, peak_rate=8),
                    "vllm", None)
    b = rec.best
    assert (b.replicas, b.max_num_seqs, b.served_peak_rate) == (15, 15, 8 * 510 / 512)
    c, lam = b.max_num_seqs, b.served_peak_rate / b.replicas
    mu = b.per_replica_rps / c
    a = lam / mu
    tail = a ** c / math.factorial(c) / (1 - a / c)
    erlang_c = tail / (sum(a ** k / math.factorial(k) for k in range(c)) + tail)
    w95 = math.log(erlang_c / 0.05) / (c * mu - lam)
    assert b.peak_utilization == pytest.approx(lam / b.per_replica_rps) == pytest.approx(
        0.991, abs=0.001)
    assert w95 <= b.peak_ttft_p95_s <= w95 + 2 and b.peak_ttft_p95_s > 100 * b.ttft_p95_s
    d = rec.to_json()
    assert (d["peak_utilization"], d["peak_ttft_p95_s"]) == (0.991, round(b.peak_ttft_p95_s, 3))
    assert any(x.startswith("at the peak (7.97 req/s) the 15 replicas run at 99% and TTFT p95 "
                            "is ") for x in d["advice"])
    code, out, err = run(capsys, "recommend", "llama-3.1-8b", "--gpu", "l4", "--max-model-len",
                         "8K", "--workload", "chat", "--rate", "5", "--json")
    d = json.loads(out)
    assert (d["peak_utilization"], d["peak_ttft_p95_s"]) == (None, None)


def test_recommend_json_keys_are_documented(capsys):
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "docs" / "json.md").read_text()
    section = text[text.index("## `kvplan recommend --json`"):]
    section = section[:section.index("\n## ", 5)]
    documented = set(re.findall(r"`([a-z0-9_]+)`", section))
    code, out, err = run(capsys, "recommend", "llama-3.1-8b", "--gpu", "l4,a10g", "--max-model-len",
                         "8K", "--workload", "chat", "--rate", "5", "--peak-rate", "6", "--json")
    d = json.loads(out)
    assert d["alternatives"] and set(d) - documented == set()
    assert set(d["alternatives"][0]) == set(d) - {"alternatives", "rejected"}


def test_trace_rates_are_rounded_and_an_untimed_trace_says_so(capsys, tmp_path):
    """Review 23d #14: 101 rows over 51.9650 s is 100 / 51.965 = 1.92437... req/s, printed
    to three digits; rows that share one time give no rate, and the plan says so."""
    rows = [{"prompt_tokens": 500, "output_tokens": 100, "timestamp": i * 0.51965}
            for i in range(101)]
    code, out, err = run(capsys, "recommend", "llama-3.1-8b", "--gpu", "l4", "--max-model-len",
                         "8192", "--trace", _trace(tmp_path, "timed.jsonl", rows))
    assert code == 0, err
    assert " for 1.92 req/s" in out and "1.924" not in out
    same = [{"prompt_tokens": 500, "output_tokens": 100, "timestamp": 7} for _ in range(3)]
    code, out, err = run(capsys, "recommend", "llama-3.1-8b", "--gpu", "l4", "--max-model-len",
                         "8192", "--trace", _trace(tmp_path, "same.jsonl", same), "--json")
    d = json.loads(out)
    assert d["rate"] is None and d["advice"][0] == (
        "the trace's arrival times are not used: its 3 rows all arrive at the same time, "
        "which gives no rate, so this is one replica's capacity (closed loop); give --rate to "
        "plan a fleet")


def test_prefix_hit_on_a_release_without_prefix_caching_by_default(capsys):
    """vLLM 0.6.x-0.7.x (V0) run without prefix caching unless --enable-prefix-caching is
    given (`EngineArgs.enable_prefix_caching`): the plan adds the flag so that the declared
    hit counts (RAG at 0.8 on an H100: cap 473, as 0.33's V1 plan with it on by default is
    493; without the hit 116)."""
    base = ("recommend", "llama-3.1-8b", "--gpu", "h100", "--workload", "rag", "--rate", "5",
            "--vllm-version", "0.6.6", "--json")
    code, out, err = run(capsys, *base, "--prefix-hit", "0.8")
    d = json.loads(out)
    assert d["max_num_seqs"] == 473 and d["flags"][-1] == "--enable-prefix-caching"
    assert any(a.startswith("--enable-prefix-caching is in the command: the workload's prefix "
                            "hit 0.8 needs it") for a in d["advice"])
    code, out, err = run(capsys, *base)
    d = json.loads(out)
    assert d["max_num_seqs"] == 116 and "--enable-prefix-caching" not in d["flags"]


def test_recommend_refuses_an_architecture_the_release_lacks_as_size_does(capsys):
    """One registry rule for both: gpt-oss on vLLM 0.8.5 is bad input in size and in
    recommend (was exit 1, 'no deployment meets the targets', under -tp auto)."""
    for argv in (("size", "gpt-oss-20b", "--gpu", "h100"),
                 ("recommend", "gpt-oss-20b", "--gpu", "h100", "-tp", "auto", "--rate", "3")):
        code, out, err = run(capsys, *argv, "--vllm-version", "0.8.5")
        assert code == 2 and out == ""
        assert "vLLM 0.8.5 does not have GptOssForCausalLM yet" in err
