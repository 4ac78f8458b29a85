"""The engine simulation: conservation, completion, Little's law, determinism, the
preemption-free guarantee, and the collapse with and without the recommended cap."""

import json

import pytest
from configs import LLAMA31_8B

from kvplan.cli import main
from kvplan.core import perf
from kvplan.core.sizing import EngineArgs, Gpu, Model, size
from kvplan.core.workload import LengthDist, Workload, preset
from kvplan.sim.engine import Config
from kvplan.sim.report import knee_and_collapse, summary
from kvplan.sim.run import Load, simulate
from kvplan.sim.setup import engine_config

H100 = Gpu("h100", "NVIDIA H100 80GB HBM3", 81089 << 20, "9.0", bandwidth_gbps=3350,
           tflops={"bf16": 989}, interconnect_gbps=900)


def engine(mml=8192, **kw):
    r = size(Model("llama", LLAMA31_8B), H100, EngineArgs(max_model_len=mml, **kw))
    return r, perf.build(r, H100)


def small_pool(r, blocks, seqs):
    cfg = engine_config(r)
    cfg.num_blocks, cfg.max_num_seqs = blocks, seqs
    return cfg


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_tokens_conserved_and_every_request_completes():
    r, pm = engine()
    cfg = small_pool(r, 600, 64)  # 9,600 tokens: heavy preemption
    wl = preset("chat").clip(r.max_model_len)
    st = simulate(cfg, pm, wl, Load(rate=30, duration=60), seed=3)
    assert st.preemptions > 0 and st.recomputed_tokens > 0
    done = st.completed
    assert st.output_tokens == sum(q.output for q in done)  # none lost, none counted twice
    assert len({q.rid for q in done}) == len(done)
    issued = max(q.rid for q in done)
    assert len(done) + st.rejected == issued  # every admitted request finished
    assert all(q.finish >= q.first_token >= q.arrival for q in done)


def test_no_preemption_when_cap_times_longest_fits():
    r, pm = engine()
    wl = Workload("w", LengthDist.lognormal(800, 0.6, "p"), LengthDist.lognormal(300, 0.6, "o"))
    wl = wl.clip(r.max_model_len)
    longest = wl.prompt.max + wl.output.max
    cfg = engine_config(r)
    per_req = -(-longest // cfg.block_size)
    cfg.num_blocks = 10 * per_req  # exactly 10 of the longest requests fit
    cfg.max_num_seqs = 10
    st = simulate(cfg, pm, wl, Load(concurrency=40, requests=400), seed=1)
    assert st.preemptions == 0 and len(st.completed) == 400


def test_littles_law():
    r, pm = engine()
    wl = preset("chat").clip(r.max_model_len)
    st = simulate(engine_config(r), pm, wl, Load(rate=20, duration=120), seed=5)
    s = summary(st)
    lam = s["request_throughput_per_s"]
    w = sum(q.finish - q.arrival for q in st.completed) / len(st.completed)
    assert s["mean_in_system"] == pytest.approx(lam * w, rel=0.02)


def test_same_seed_same_result():
    r, pm = engine()
    wl = preset("rag").clip(r.max_model_len)
    a = summary(simulate(engine_config(r), pm, wl, Load(rate=10, duration=60), seed=9))
    b = summary(simulate(engine_config(r), pm, wl, Load(rate=10, duration=60), seed=9))
    c = summary(simulate(engine_config(r), pm, wl, Load(rate=10, duration=60), seed=10))
    assert a == b and a != c


def test_admission_cap_and_bounded_queue_reject():
    r, pm = engine()
    wl = preset("chat").clip(r.max_model_len)
    cfg = engine_config(r)
    cfg.max_num_seqs, cfg.queue_limit = 16, 5  # ample blocks: no preemption refills the queue
    st = simulate(cfg, pm, wl, Load(rate=50, duration=30), seed=2)
    assert st.rejected > 0 and st.preemptions == 0
    assert max(w for _, _, _, w in st.series) <= 5


def test_collapse_on_l4_and_fix_with_recommended_cap(capsys):
    # Llama-3.1-8B on an L4 with long generations, vLLM 0.18 admission (first chunk only)
    code, out, err = run(capsys, "simulate", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "l4",
                         "--workload", "reasoning", "--vllm-version", "0.18",
                         "--sweep", "concurrency=1:48", "--requests", "150", "--json")
    assert code == 0, err
    d = json.loads(out)
    pts = {p["concurrency"]: p for p in d["points"]}
    knee = pts[d["knee"]]
    assert d["collapse"] is not None and d["collapse"] > d["knee"]
    past = pts[d["collapse"]]
    assert past["output_tokens_per_s"] < knee["output_tokens_per_s"]
    assert past["preemptions"] > knee["preemptions"]
    capped = d["with_recommended_cap"]
    assert knee_and_collapse(capped, "concurrency")[1] is None  # no collapse with the cap


def test_single_run_json_contract(capsys):
    code, out, err = run(capsys, "simulate", "llama-3.1-8b-instruct", "--gpu", "h100",
                         "--max-model-len", "8192", "--rate", "5", "--duration", "30",
                         "--seed", "1", "--json")
    assert code == 0, err
    d = json.loads(out)
    for k in ("output_tokens_per_s", "requests_completed", "requests_rejected", "preemptions",
              "recomputed_tokens", "ttft_p50_s", "ttft_p99_s", "tpot_p50_ms", "tpot_p99_ms",
              "e2e_p50_s", "simulated_seconds"):
        assert k in d, k
    assert d["requests_completed"] > 100 and d["preemptions"] == 0


def test_sweep_rate_json(capsys):
    code, out, err = run(capsys, "simulate", "llama-3.1-8b-instruct", "--gpu", "h100",
                         "--max-model-len", "8192", "--sweep", "rate=2:20:3", "--duration",
                         "20", "--json", "--no-compare-cap")
    assert code == 0, err
    d = json.loads(out)
    assert [p["rate"] for p in d["points"]] == [2.0, 11.0, 20.0]
    assert "with_recommended_cap" not in d


@pytest.mark.parametrize("args,msg", [
    (("--sweep", "speed=1:4"), "cannot read --sweep"),
    (("--rate", "5", "--concurrency", "3"), "exclusive"),
    (("--rate", "0"), "--rate must be positive"),
])
def test_bad_simulate_input(capsys, args, msg):
    code, _, err = run(capsys, "simulate", "llama-3.1-8b-instruct", "--gpu", "h100", *args)
    assert code == 2 and msg in err


def test_config_dataclass_defaults():
    c = Config(num_blocks=10, block_size=16, groups_per_token_block=1, state_blocks=0,
               max_num_seqs=4, max_num_batched_tokens=2048, max_model_len=4096)
    assert c.reserve_full_prompt and c.queue_limit is None


def test_sweep_says_what_the_cap_costs_in_throughput(capsys):
    args = ["simulate", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "l4", "--workload",
            "reasoning", "--sweep", "concurrency=1:48", "--requests", "150"]
    code, out, err = run(capsys, *args, "--json")
    assert code == 0, err
    d = json.loads(out)
    peak = max(p["output_tokens_per_s"] for p in d["points"])
    capped = d["with_recommended_cap"][-1]["output_tokens_per_s"]
    assert capped < 0.9 * peak  # the safe cap on an L4 is far below the preempting peak
    code, out, err = run(capsys, *args)
    assert code == 0, err
    assert f"the cap gives up {1 - capped / peak:.0%} of the uncapped peak ({peak:,.1f}" in out
    assert "more replicas" in out


def test_simulate_sizes_lora_slots(capsys):
    # Qwen2.5-7B on an L4: 4 slots of rank 64 take 1.20 GiB of the pool (and graphs double)
    from kvplan.cli import main

    argv = ["simulate", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "l4", "--concurrency", "8",
            "--requests", "20", "--json"]
    assert main(argv) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(argv + ["--enable-lora", "--max-loras", "4", "--max-lora-rank", "64"]) == 0
    lora = json.loads(capsys.readouterr().out)
    assert lora["usable_blocks"] < plain["usable_blocks"]
    assert any("LoRA slots" in n for n in lora["notes"])


def test_engine_config_counts_all_mode_states_as_growing_groups():
    # Mamba prefix caching's 'all' mode (0.16, 3 speculative tokens): each of Nemotron-H's 4
    # Mamba groups holds a state per block plus 3, the attention group a block per block, so
    # the simulated engine's blocks for 8,192 tokens are kvplan size's per-request figure
    from configs import NEMOTRON_H_8B

    from kvplan.core.specdec import SpecDecode

    r = size(Model("nemotron-h", NEMOTRON_H_8B), H100, EngineArgs(
        max_model_len=8192, kv_cache_memory_bytes=1 << 30, enable_prefix_caching=True,
        speculative=SpecDecode("ngram", 3, None)), "0.16")
    cfg = engine_config(r)
    n = -(-8192 // r.block_size)
    assert (cfg.groups_per_token_block, cfg.state_blocks) == (5, 4 * 3)
    assert cfg.groups_per_token_block * n + cfg.state_blocks == r.blocks_per_request == 5 * n + 12
