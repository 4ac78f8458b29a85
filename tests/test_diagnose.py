"""`kvplan diagnose` end to end: real /metrics text (shared samples and our own fixtures), a real
local HTTP server serving a sequence of scrapes per scenario, exit codes and the JSON contract.

Scrapes carry Prometheus sample timestamps 5 s apart, so rates are exact whatever the wall
clock does; every expected number below is worked out by hand in its comment.
"""

import io
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from metricsserver import MetricsServer, State, vllm_scrape

from kvplan.cli import main
from kvplan.diagnose import metrics as M
from kvplan.diagnose.window import increase, tail_share

FIXTURES = Path(__file__).parent / "fixtures" / "metrics"
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "vllm-metrics"
T0 = 1_750_000_000.0
DIAG_KEYS = {"verdict", "findings", "recommended_max_num_seqs", "recommendation", "observed",
             "engines", "scrapes", "server", "model_names", "metric_names", "cross_check",
             "notes", "vllm_version"}
OBSERVED_KEYS = {"preemptions_per_s", "kv_cache_usage", "running", "waiting", "max_num_seqs",
                 "num_gpu_blocks", "block_size", "requests_per_s", "arrivals_per_s",
                 "prompt_tokens_per_s", "generation_tokens_per_s", "window_s"}


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *argv):
    code, out, err = run(capsys, *argv, "--json")
    return code, (json.loads(out) if out else None), err


def series(states: list[dict], era: str = "v1", stamps: bool = True) -> list[str]:
    """One scrape per dict of engine -> State, 5 s apart."""
    return [vllm_scrape(s, era=era, timestamp=T0 + 5 * i if stamps else None)
            for i, s in enumerate(states)]


def finished(n: float) -> dict[str, float]:
    return {"stop": n, "length": 0, "abort": 0}


def erlang_tail(n: int, x: float) -> float:
    """P(Gamma(n, 1) > x) = P(Poisson(x) < n): n exponential footprints overflow x means."""
    term, total = math.exp(-x), 0.0
    for k in range(n):
        total += term
        term *= x / (k + 1)
    return total


def erlang_cap(kv_per_seq: float, risk: float = 0.01) -> int:
    """The cap recommend's risk model allows for exponential footprints (diagnose's shape
    without length histograms), by hand: the largest N with P(Gamma(N) > 1 / kv_per_seq)
    <= risk / 1.25 (capacity.APPROX_MARGIN) — continuous, so diagnose's blocks and
    2 %-rounded-up bins land at most ~3 % below it."""
    n = 1
    while erlang_tail(n + 1, 1 / kv_per_seq) <= risk / 1.25:
        n += 1
    return n


# --- scenarios -------------------------------------------------------------------------------

def healthy():
    # KV 45/50/55 %, 40-44 running, nothing waiting, 1,000 -> 1,100 requests in 10 s.
    return [{None: State(running=r, kv=kv, preemptions=7, finished=finished(f),
                         generation_tokens=g, prompt_tokens=p)}
            for r, kv, f, g, p in ((40, 0.45, 1000, 500_000, 1_000_000),
                                   (42, 0.50, 1050, 520_000, 1_050_000),
                                   (44, 0.55, 1100, 540_000, 1_100_000))]


def spiral(era_blocks: int | None = 5120):
    # KV pinned at 98 %, 256 running, preemptions 120 -> 300 -> 480, 2,000 -> 2,200 finished.
    return [{None: State(running=256, waiting=w, kv=0.98, preemptions=p,
                         finished=finished(f), blocks=era_blocks)}
            for w, p, f in ((40, 120, 2000), (50, 300, 2100), (61, 480, 2200))]


def queue_explosion():
    # 128 running (a cap), KV at 40 %, waiting 10 -> 40 -> 70, 10 completions/s.
    return [{None: State(running=128, waiting=w, kv=0.40, finished=finished(f))}
            for w, f in ((10, 1000), (40, 1050), (70, 1100))]


def hogging():
    # 100 running, KV 84-86 %; over the window 950 prompts in (500, 1000] and 50 in
    # (10000, 20000] (1,462,000 prompt tokens); outputs all in (100, 200].
    out = []
    for i, (kv, n_short, n_long, psum, n_gen, gsum) in enumerate((
            (0.84, 1900, 100, 2_924_000, 2000, 300_000),
            (0.85, 2375, 125, 3_655_000, 2500, 375_000),
            (0.86, 2850, 150, 4_386_000, 3000, 450_000))):
        out.append({None: State(running=100, kv=kv, finished=finished(1000 + 50 * i),
                                prompt_lens={1000: n_short, 20000: n_long}, prompt_sum=psum,
                                gen_lens={200: n_gen}, gen_sum=gsum)})
    return out


def underfed():
    # 6-8 running, KV 5-7 %, nothing waiting, no new preemptions.
    return [{None: State(running=r, kv=kv, preemptions=3, finished=finished(f))}
            for r, kv, f in ((6, 0.05, 100), (7, 0.06, 110), (8, 0.07, 120))]


def data_parallel():
    # engine 0: 60 running at 35 % KV; engine 1: 150 running at 97 % KV, preempting 10/s.
    return [{"0": State(running=60, kv=0.35, finished=finished(500 + 10 * i)),
             "1": State(running=150, kv=0.97, preemptions=10 + 50 * i,
                        finished=finished(400 + 10 * i))}
            for i in range(3)]


@pytest.fixture
def serve():
    servers = []

    def start(scrapes: list[str], **kw) -> str:
        s = MetricsServer({"/metrics": scrapes}, **kw).__enter__()
        servers.append(s)
        return s.url()

    yield start
    for s in servers:
        s.__exit__(None, None, None)


# --- the Done-when ---------------------------------------------------------------------

def test_done_when_preemption_spiral_named_with_evidence_and_cap(serve, capsys):
    url = serve(series(spiral()))
    code, out, err = run(capsys, "diagnose", url, "--interval", "0.01", "--max-num-seqs", "256")
    assert code == 1, err
    assert "UNHEALTHY" in out and "Preemption spiral" in out
    # 360 preemptions in 10 s = 36/s; 200 requests finished = 1.80 per request
    assert "preemptions rose 120 → 480 in 10.0 s (36.00/s, 1.80 per finished request)" in out
    assert "KV cache usage 98.0%" in out
    # one sequence holds 2.94 / 768 of the pool = 0.98 / 256 × 5,120 blocks × 16 = 313.6
    # tokens; no length histograms, so exponential footprints: Erlang gives 223
    # (erlang_cap(2.94 / 768)); blocks of 16 and bins rounded up give 219 (the old mean
    # target, floor(0.85 × 768 / 2.94), was 222)
    assert "lower --max-num-seqs to 219 (now 256, given; a full batch of 256 holds 98.0% of " \
        "the pool on average and overflows with over 10%)" in out
    assert "a running sequence holds 314 tokens of KV on average (CV 0.97, exponential: no " \
        "length histograms), so 219 of them overflow the 81,920-token pool with ≤ 1% " \
        "probability (mean KV usage 83.8%)" in out
    assert "Recommended --max-num-seqs: 219" in out
    assert "the KV pool was full in the window (usage up to 98.0%)" in out


def test_done_when_spiral_json(serve, capsys):
    url = serve(series(spiral()))
    code, d, _ = run_json(capsys, "diagnose", url, "--interval", "0.01")
    assert code == 1 and d.keys() >= DIAG_KEYS and d["observed"].keys() >= OBSERVED_KEYS
    assert d["verdict"] == "unhealthy"
    f = d["findings"][0]
    assert f["id"] == "preemption_spiral" and f["severity"] == "critical"
    assert f.keys() >= {"id", "severity", "title", "evidence", "fix"}
    assert f["data"]["0"] == {"preemptions": 360.0, "preemptions_per_s": 36.0,
                              "kv_cache_usage": 0.98, "counter_reset": False,
                              "requests_finished": 200.0, "preemptions_per_request": 1.8}
    assert d["recommended_max_num_seqs"] == 219
    r = d["recommendation"]
    assert (r["method"], r["preempt_risk"], r["footprint_shape"]) == (
        "risk", 0.01, "exponential: no length histograms")
    assert r["overflow_probability"] <= 0.01 / 1.25 and r["footprint_cv"] == 0.9652
    assert r["target_kv_cache_usage"] == round(219 * 2.94 / 768, 4)  # 0.8384
    o = d["observed"]
    assert o["preemptions_per_s"] == 36.0 and o["kv_cache_usage"] == 0.98
    assert o["running"] == 256 and o["waiting_last"] == 61
    assert o["num_gpu_blocks"] == 5120 and o["block_size"] == 16 and o["kv_pool_tokens"] == 81920
    assert o["requests_per_s"] == 20.0 and o["window_s"] == 10.0
    assert o["kv_tokens_per_running_seq"] == 313.6
    assert [s["t_s"] for s in d["scrapes"]] == [0.0, 5.0, 10.0]
    # waiting 40, 50, 61 at 0, 5, 10 s: least-squares slope 2.1/s, growth 21 >= 5
    q = next(x for x in d["findings"] if x["id"] == "queue_explosion")
    assert q["data"]["0"]["limit"] == "kv" and q["data"]["0"]["waiting_growth_per_s"] == 2.1


def test_done_when_healthy_says_so_and_exits_0(serve, capsys):
    url = serve(series(healthy()))
    code, out, err = run(capsys, "diagnose", url, "--interval", "0.01")
    assert code == 0, err
    assert "HEALTHY" in out and "UNHEALTHY" not in out
    assert "KV cache usage 45.0%–55.0% (mean 50.0%)" in out
    assert "running 40–44, waiting 0" in out and "0 preemptions in 10.0 s" in out
    # 100 requests and 40,000 output tokens in 10 s
    assert "10.00 requests/s, 4,000 output tokens/s" in out
    # 1.50 / 126 of the pool per sequence: Erlang 63, diagnose 62 (was floor(0.85 × 126 / 1.5)
    # = 71)
    assert "Recommended --max-num-seqs: 62" in out


def test_healthy_json(serve, capsys):
    code, d, _ = run_json(capsys, "diagnose", serve(series(healthy())), "--interval", "0.01")
    assert code == 0 and d["verdict"] == "healthy"
    assert [f["id"] for f in d["findings"]] == ["healthy"]
    assert d["findings"][0]["severity"] == "ok"
    assert d["recommended_max_num_seqs"] == 62
    assert d["observed"]["generation_tokens_per_s"] == 4000.0
    assert d["observed"]["prompt_tokens_per_s"] == 10000.0
    assert d["engines"][0]["findings"] == ["healthy"]


# --- the other findings ------------------------------------------------------------------------

def test_queue_explosion_cap_inferred(serve, capsys):
    code, d, _ = run_json(capsys, "diagnose", serve(series(queue_explosion())),
                          "--interval", "0.01")
    assert code == 1
    f = d["findings"][0]
    assert f["id"] == "queue_explosion" and f["severity"] == "critical"
    ev = " | ".join(f["evidence"])
    # waiting 10, 40, 70 at 0, 5, 10 s: slope 6/s; completions 100 in 10 s = 10/s
    assert "waiting grew 10 → 70 in 10.0 s (+6.00/s fitted)" in ev
    assert "running pinned at 128 = --max-num-seqs 128 (inferred" in ev
    assert "the server completes 10.00 requests/s; arrivals ≈ 16.00/s" in ev
    fixes = " | ".join(f["fix"])
    # 1.2 / 384 of the pool per sequence: Erlang 278; 16-block footprints, diagnose 271 (the
    # mean target said 272)
    assert "raise --max-num-seqs from 128 to 271: KV usage is only 40.0%" in fixes
    # ceil(16 / (0.8 × 10)) = 2 replicas; queue bound two service times, 2 × 128 running
    # (recommend's rule; it was 10 s of completions, 100)
    assert "add replicas: 2 servers" in fixes and "answer 429 past ~256 waiting" in fixes
    assert "(about two service times of queueing, as kvplan recommend bounds it)" in fixes
    assert f["data"]["0"]["replicas_needed"] == 2 and f["data"]["0"]["queue_limit"] == 256
    assert d["recommended_max_num_seqs"] == 271
    assert d["observed"]["max_num_seqs"] == 128
    assert d["observed"]["arrivals_per_s"] == 16.0


def test_queue_explosion_with_given_cap(serve, capsys):
    code, d, _ = run_json(capsys, "diagnose", serve(series(queue_explosion())),
                          "--interval", "0.01", "--max-num-seqs", "128")
    assert code == 1
    assert "running pinned at 128 = --max-num-seqs 128 (given)" in d["findings"][0]["evidence"]
    assert d["recommendation"]["current_max_num_seqs"] == 128


def test_long_requests_hogging_kv(serve, capsys):
    code, d, _ = run_json(capsys, "diagnose", serve(series(hogging())), "--interval", "0.01")
    assert code == 1
    assert [f["id"] for f in d["findings"]] == ["long_requests_hogging_kv"]
    f = d["findings"][0]
    # window: 1,000 prompts; the longest 5 % are the 50 in (10000, 20000], midpoint 15,000:
    # 750,000 of 1,462,000 prompt tokens = 51.3 %; outputs: 50 of 1,000 in (100, 200] at
    # 197.5 each = 6.6 % of 150,000, below 30 %
    assert f["evidence"][0] == ("the longest 5% of prompts (over ~10,000 tokens) carry 51% of "
                                "prompt tokens; the mean prompt is 1,462 tokens (1,000 "
                                "requests, window)")
    assert f["data"]["0"]["prompt"]["tail_share"] == round(750_000 / 1_462_000, 4)
    assert "output" not in f["data"]["0"]
    assert "KV cache usage mean 85.0%" in f["evidence"]
    assert "route prompts over ~10,240 tokens to a separate long-context pool" in f["fix"][0]
    # the length histograms give the spread: 5 % of prompts 20x the rest make one sequence's
    # footprint CV 2.04, so 69 (mean KV 58.7 %) where the mean target said 100
    # (test_histogram_shape_by_monte_carlo checks 69 independently)
    r = d["recommendation"]
    assert d["recommended_max_num_seqs"] == 69 and r["footprint_cv"] == 2.0357
    assert r["footprint_shape"] == "length histograms, window"


def test_underfed_against_given_cap(serve, capsys):
    code, d, _ = run_json(capsys, "diagnose", serve(series(underfed())), "--interval", "0.01",
                          "--max-num-seqs", "64")
    assert code == 1
    f = d["findings"][0]
    assert f["id"] == "under_fed" and f["severity"] == "warning"
    # mean 7 running of 64 = 10.9 % (the cap is below the 99 the pool holds)
    assert f["evidence"][0] == "running 6–8 (mean 7.0): 10.9% of --max-num-seqs 64 (given)"
    assert f["evidence"][1] == "KV cache usage at most 7.0%"
    assert "room for ~64 running sequences" in f["fix"][0]
    assert f["data"]["0"] == {"running": 7.0, "room": 64, "kv_cache_usage_max": 0.07}


@pytest.mark.parametrize("cap", [[], ["--max-num-seqs", "256"]])
def test_underfed_against_kv_room(serve, capsys, cap):
    code, d, _ = run_json(capsys, "diagnose", serve(series(underfed())), "--interval", "0.01",
                          *cap)
    assert code == 1
    # 0.18 / 21 of the pool per sequence: Erlang 91 = diagnose, below any larger cap;
    # 7 / 91 = 7.7 %
    assert d["recommended_max_num_seqs"] == 91
    assert d["findings"][0]["evidence"][0] == ("running 6–8 (mean 7.0): 7.7% of the ~91 "
                                               "sequences the KV pool holds at ≤ 1% overflow "
                                               "risk")


def test_data_parallel_engines(serve, capsys):
    code, d, _ = run_json(capsys, "diagnose", serve(series(data_parallel())),
                          "--interval", "0.01")
    assert code == 1
    f = d["findings"][0]
    assert f["id"] == "preemption_spiral" and f["engines"] == ["1"]
    assert f["evidence"][0] == "engine 1: preemptions rose 10 → 110 in 10.0 s (10.00/s, " \
                               "5.00 per finished request)"
    e0, e1 = d["engines"]
    assert (e0["engine"], e1["engine"]) == ("0", "1")
    assert e0["findings"] == ["healthy"] and e1["findings"] == ["preemption_spiral"]
    # engine 0: 1.05 / 180 per sequence, Erlang 141, diagnose 139; engine 1: 2.91 / 450,
    # Erlang 126, diagnose 124
    assert (e0["recommended_max_num_seqs"], e1["recommended_max_num_seqs"]) == (139, 124)
    assert d["recommended_max_num_seqs"] == 124 and d["recommendation"]["engine"] == "1"
    assert e1["preemptions_per_s"] == 10.0 and e0["preemptions_per_s"] == 0.0
    o = d["observed"]
    assert o["running"] == 210 and o["kv_cache_usage"] == 0.66 and o["requests_per_s"] == 4.0


def test_data_parallel_human_table(serve, capsys):
    code, out, _ = run(capsys, "diagnose", serve(series(data_parallel())), "--interval", "0.01")
    assert code == 1 and "Engines" in out
    assert "engine 1: KV cache usage 97.0%" in out


@pytest.mark.parametrize("era,name", [("v0", "vllm:gpu_cache_usage_perc"),
                                      ("v1", "vllm:kv_cache_usage_perc"),
                                      ("v1-0.10", "vllm:kv_cache_usage_perc")])
def test_spiral_under_each_name_era(serve, capsys, era, name):
    code, d, _ = run_json(capsys, "diagnose", serve(series(spiral(), era=era)),
                          "--interval", "0.01")
    assert code == 1 and d["findings"][0]["id"] == "preemption_spiral"
    assert d["metric_names"]["kv_cache_usage"] == name
    assert d["recommended_max_num_seqs"] == 219


def test_intermittent_preemption_below_full(serve, capsys):
    states = [{None: State(running=100, kv=0.70, preemptions=p, finished=finished(f))}
              for p, f in ((0, 100), (5, 150), (10, 200))]
    code, d, _ = run_json(capsys, "diagnose", serve(series(states)), "--interval", "0.01")
    assert code == 1
    f = d["findings"][0]
    assert f["id"] == "intermittent_preemption" and f["severity"] == "warning"
    # 10 in 10 s = 1/s, 0.10 per finished request; 2.1 / 300 per sequence: Erlang 115,
    # diagnose 114
    assert f["evidence"][0] == ("preemptions rose 0 → 10 in 10.0 s (1.00/s, 0.10 per finished "
                                "request)")
    assert d["recommended_max_num_seqs"] == 114


def test_spiral_that_starts_inside_the_window(serve, capsys):
    # one healthy scrape, then preemptions climbing while the pool reads 99-100 %: the mean
    # KV (83 %) is below 90 %, but the counter rose over intervals that end full, so it is a
    # spiral, and "below 90 % at scrape times" would be false (a user review's case)
    states = [{None: State(running=r, waiting=q, kv=k, preemptions=p, finished=finished(f))}
              for r, q, k, p, f in ((40, 0, 0.50, 0, 100), (60, 30, 0.99, 50, 110),
                                    (60, 80, 1.0, 400, 115))]
    code, d, _ = run_json(capsys, "diagnose", serve(series(states)), "--interval", "0.01")
    f = d["findings"][0]
    assert code == 1 and (f["id"], f["severity"]) == ("preemption_spiral", "critical")
    assert not any("below 90%" in e for x in d["findings"] for e in x["evidence"])


def test_standing_queue(serve, capsys):
    states = [{None: State(running=64, waiting=20, kv=0.5, finished=finished(f))}
              for f in (100, 150, 200)]
    code, d, _ = run_json(capsys, "diagnose", serve(series(states)), "--interval", "0.01",
                          "--max-num-seqs", "64")
    assert code == 1
    f = d["findings"][0]
    assert f["id"] == "standing_queue" and f["severity"] == "warning"
    assert f["evidence"][0] == "20 requests waiting in every scrape"


def test_counter_reset_between_scrapes(serve, capsys):
    # the server restarted between scrapes 2 and 3: 480 -> 30 counts 30 new preemptions
    states = spiral()
    states[2][None].preemptions = 30
    code, d, _ = run_json(capsys, "diagnose", serve(series(states)), "--interval", "0.01")
    assert d["observed"]["preemptions"] == 180 + 30


# --- inputs: files, stdin, --watch -------------------------------------------------------------

def test_files_without_timestamps_use_interval(tmp_path, capsys):
    paths = []
    for i, text in enumerate(series(spiral(), stamps=False)):
        p = tmp_path / f"scrape{i}.prom"
        p.write_text(text)
        paths.append(str(p))
    code, d, _ = run_json(capsys, "diagnose", *paths, "--interval", "5")
    assert code == 1 and d["findings"][0]["id"] == "preemption_spiral"
    assert d["observed"]["preemptions_per_s"] == 36.0
    assert any("carry no timestamps" in n for n in d["notes"])
    code, d, _ = run_json(capsys, "diagnose", *paths, "--interval", "10")
    assert d["observed"]["preemptions_per_s"] == 18.0


def test_extreme_values_are_read_not_crashed_on(tmp_path, capsys):
    """Found by fuzzing the shared samples: an integer beyond any float (prometheus_client
    keeps it exact) and a KV usage that underflows (1e-320 per running sequence) were
    internal errors. The first sample is dropped; the second caps the advice at the ceiling."""
    states = [{None: State(running=r, kv=kv, preemptions=7, finished=finished(f))}
              for r, kv, f in ((40, 1e-320, 1000), (42, 1e-320, 1050))]
    paths = []
    for i, text in enumerate(series(states)):
        if i == 0:
            big = '_total{model_name="meta-llama/Llama-3.1-8B"} '
            assert big + "7.0" in text
            text = text.replace(big + "7.0", big + "9" * 400)
        p = tmp_path / f"scrape{i}.prom"
        p.write_text(text)
        paths.append(str(p))
    code, d, err = run_json(capsys, "diagnose", *paths)
    assert code in (0, 1) and "internal error" not in err
    assert d["recommended_max_num_seqs"] == 4096  # MAX_SEQS_CEILING


def test_stdin_concatenated_scrapes(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(series(spiral()))))
    code, d, _ = run_json(capsys, "diagnose", "-")
    assert code == 1 and len(d["scrapes"]) == 3
    assert d["scrapes"][0]["source"] == "<stdin>" and d["scrapes"][2]["unix_time"] == T0 + 10
    assert d["observed"]["preemptions_per_s"] == 36.0


def test_watch_bounded_by_scrapes(serve, capsys):
    code, out, _ = run(capsys, "diagnose", serve(series(spiral())), "--watch", "--scrapes", "4",
                       "--interval", "0.01", "--json")
    lines = [json.loads(x) for x in out.splitlines()]
    # verdicts after scrapes 2, 3 and 4 (the server repeats its last scrape)
    assert len(lines) == 3 and code == 1
    assert [len(x["scrapes"]) for x in lines] == [2, 3, 4]
    assert all(x["findings"][0]["id"] == "preemption_spiral" for x in lines)


def test_watch_stops_on_ctrl_c(serve):
    url = serve(series(spiral()))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    p = subprocess.Popen([sys.executable, "-m", "kvplan", "diagnose", url, "--watch",
                          "--interval", "0.2", "--json"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    try:
        first = json.loads(p.stdout.readline())
        assert first["verdict"] == "unhealthy"
        p.send_signal(signal.SIGINT)
        t = time.monotonic()
        code = p.wait(timeout=10)
        assert time.monotonic() - t < 5
    finally:
        p.kill()
    assert code == 1  # the last verdict
    assert "Traceback" not in p.stderr.read()


# --- errors: exit 2, one line ------------------------------------------------------------------

def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_unreachable_url_exits_2_quickly(capsys):
    t = time.monotonic()
    code, out, err = run(capsys, "diagnose", f"http://127.0.0.1:{_closed_port()}/metrics",
                         "--timeout", "2")
    assert code == 2 and out == "" and time.monotonic() - t < 2
    assert err.startswith("kvplan: error: cannot reach http://127.0.0.1:")
    assert err.count("\n") == 1 and "Traceback" not in err


def test_silent_server_times_out(capsys):
    # a socket that accepts connections (backlog) but never answers
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    try:
        t = time.monotonic()
        code, _, err = run(capsys, "diagnose", f"http://127.0.0.1:{s.getsockname()[1]}",
                           "--timeout", "0.5")
        elapsed = time.monotonic() - t
    finally:
        s.close()
    assert code == 2 and 0.4 < elapsed < 2.0
    assert "no answer from http://127.0.0.1:" in err and "/metrics within 0.5 s" in err


def test_slow_server_times_out(serve, capsys):
    url = serve(series(healthy()), delay=3.0)
    t = time.monotonic()
    code, _, err = run(capsys, "diagnose", url, "--timeout", "0.5")
    assert code == 2 and time.monotonic() - t < 2.0 and "within 0.5 s" in err


def test_http_error_exits_2(serve, capsys):
    url = serve(series(healthy()))
    code, _, err = run(capsys, "diagnose", url.replace("/metrics", "/nope"))
    assert code == 2 and err.startswith("kvplan: error: HTTP 404")


@pytest.mark.parametrize("body,message", [
    ("<html><body>gateway</body></html>\n", "not Prometheus text format"),
    ('vllm:num_requests_running{model_name="m" 1\n', "not Prometheus text format"),
    ("vllm:num_requests_running abc\n", "not Prometheus text format"),
    ("process_open_fds 45.0\n", "no vLLM or SGLang metrics"),
    ("", "no vLLM or SGLang metrics"),
    # vLLM samples without the scheduler gauges a V1 engine exports from start-up: a partial
    # scrape, not an idle server (it was "HEALTHY", exit 0)
    ('vllm:request_decode_time_seconds_count{model_name="m"} 3.0\n',
     "no vLLM scheduler metrics (requests running, KV cache usage)"),
])
def test_malformed_or_foreign_text_exits_2(serve, capsys, body, message):
    code, out, err = run(capsys, "diagnose", serve([body]))
    assert code == 2 and out == "" and message in err and err.count("\n") == 1


def test_bad_files_and_options_exit_2(tmp_path, capsys):
    assert run(capsys, "diagnose", str(FIXTURES / "not-metrics.html"))[0] == 2
    code, _, err = run(capsys, "diagnose", str(tmp_path / "missing.prom"))
    assert code == 2 and "no such file" in err
    good = str(FIXTURES / "v0-0.6-busy.prom")
    for argv, msg in (([], "nothing to diagnose"),
                      ([good, "--watch"], "--watch needs a URL"),
                      ([good, "--scrapes", "2"], "--scrapes applies to a URL"),
                      ([good, "--model", "llama-3.1-8b-instruct"], "--model and --gpu"),
                      (["http://a", "http://b"], "give one URL"),
                      ([good, "--interval", "0"], "--interval must be a positive number"),
                      ([good, "--max-num-seqs", "0"], "--max-num-seqs must be >= 1")):
        code, _, err = run(capsys, "diagnose", *argv)
        assert code == 2 and msg in err, (argv, err)


def test_url_without_path_gets_metrics(serve, capsys):
    url = serve(series(healthy()))
    code, d, _ = run_json(capsys, "diagnose", url.removesuffix("/metrics"), "--interval", "0.01")
    assert code == 0 and d["scrapes"][0]["source"].endswith("/metrics")


# --- cross-check with kvplan size --------------------------------------------------------------

def test_cross_check_with_kvplan_size(serve, capsys):
    _, size, _ = run_json(capsys, "size", "llama-3.1-8b-instruct", "--gpu", "h100",
                          "--max-model-len", "32768", "--gpu-memory-utilization", "0.9")
    code, d, _ = run_json(capsys, "diagnose", serve(series(spiral())), "--interval", "0.01",
                          "--model", "llama-3.1-8b-instruct", "--gpu", "h100",
                          "--max-model-len", "32768")
    c = d["cross_check"]
    assert code == 1
    assert c["predicted_num_gpu_blocks"] == size["num_gpu_blocks"]
    assert c["observed_num_gpu_blocks"] == 5120
    assert c["blocks_ratio"] == round(5120 / size["num_gpu_blocks"], 4)
    assert c["gpu_memory_utilization"] == 0.9  # taken from cache_config_info
    # (5,120 − 1 null block) // 2,048 blocks per 32K request = 2
    assert c["blocks_per_request"] == 2048 and c["guaranteed_max_num_seqs"] == 2
    # -pp sizes the same pipeline (the smallest stage's blocks, as vLLM)
    _, size2, _ = run_json(capsys, "size", "llama-3.1-8b-instruct", "--gpu", "h100", "-pp",
                           "2", "--max-model-len", "32768", "--gpu-memory-utilization", "0.9")
    _, d2, _ = run_json(capsys, "diagnose", serve(series(spiral())), "--interval", "0.01",
                        "--model", "llama-3.1-8b-instruct", "--gpu", "h100", "-pp", "2",
                        "--max-model-len", "32768")
    assert d2["cross_check"]["pipeline_parallel_size"] == 2
    assert d2["cross_check"]["predicted_num_gpu_blocks"] == size2["num_gpu_blocks"]
    assert any("differs from kvplan size's prediction" in n for n in d["notes"])
    # without --max-num-seqs, the cap is vLLM's default on an H100 (1024)
    assert d["observed"]["max_num_seqs"] == size["max_num_seqs"] == 1024
    assert "lower --max-num-seqs to 219 (now 1024, vLLM default" in d["findings"][0]["fix"][0]
    assert d["cross_check"]["max_num_seqs"] is None


def test_cross_check_supplies_missing_pool(serve, capsys):
    _, size, _ = run_json(capsys, "size", "llama-3.1-8b-instruct", "--gpu", "h100",
                          "--max-model-len", "32768")
    code, d, _ = run_json(capsys, "diagnose", serve(series(spiral(era_blocks=None))),
                          "--interval", "0.01", "--model", "llama-3.1-8b-instruct",
                          "--gpu", "h100", "--max-model-len", "32768")
    assert d["observed"]["kv_pool_tokens"] == size["num_gpu_blocks"] * size["block_size"]
    # 0.98 / 256 of 27,847 blocks = 107 blocks per sequence: Erlang 223 on that pool (vLLM's
    # default cap, 1,024, leaves it), diagnose 221. At cap 227 vLLM profiles 227 sequences
    # and leaves 28,546 blocks (kvplan size --max-num-seqs 227), where Erlang allows 229
    # and diagnose, sizing the cap on the pool it leaves as recommend does, 227
    _, at, _ = run_json(capsys, "size", "llama-3.1-8b-instruct", "--gpu", "h100",
                        "--max-model-len", "32768", "--max-num-seqs", "227")
    r = d["recommendation"]
    assert at["num_gpu_blocks"] == 28546 and size["num_gpu_blocks"] == 27847
    assert erlang_cap(0.98 / 256 * 27847 / 27846) == 223
    assert erlang_cap(0.98 / 256 * 27847 / 28545) == 229
    assert d["recommended_max_num_seqs"] == 227
    assert r["pool_source"] == "kvplan size at max_num_seqs 227"
    assert (r["pool_tokens"], r["current_pool_tokens"]) == (28546 * 16, 27847 * 16)


def test_no_pool_is_a_note(serve, capsys):
    code, d, _ = run_json(capsys, "diagnose", serve(series(spiral(era_blocks=None))),
                          "--interval", "0.01")
    # pool unknown: the footprint is counted on a nominal 100,000-unit pool, nearly the
    # continuous Erlang answer (223)
    assert d["recommended_max_num_seqs"] == 221
    assert d["recommendation"]["kv_tokens_per_sequence"] is None
    assert any("no vllm:cache_config_info" in n for n in d["notes"])


# --- our fixtures in each server's format ------------------------------------------------------

def parse_file(name: str) -> M.Scrape:
    (s,) = M.parse((FIXTURES / name).read_text(), name)
    return s


def test_v0_fixture_names_and_unlabelled_cache_config(capsys):
    s = parse_file("v0-0.6-busy.prom")
    e = s.engines["0"]
    assert list(s.engines) == ["0"] and s.model_names == ["acme/chat-7b"]
    assert e.gauges == {"running": 24, "waiting": 0, "swapped": 2, "kv_cache_usage": 0.75}
    assert e.names["kv_cache_usage"] == "vllm:gpu_cache_usage_perc"
    assert e.names["itl"] == "vllm:time_per_output_token_seconds"
    assert e.counters["requests_finished"] == 2000  # summed over finished_reason
    assert e.hists["ttft"].count == 2000 and e.hists["ttft"].mean == 0.125
    assert e.config_int("num_gpu_blocks") == 2048 and e.config_int("block_size") == 16
    code, d, _ = run_json(capsys, "diagnose", str(FIXTURES / "v0-0.6-busy.prom"))
    # one scrape: levels only, healthy (nothing waiting, KV 75 %); 0.75 / 24 per sequence:
    # Erlang 19 = diagnose (the mean target said 27)
    assert code == 0 and d["recommended_max_num_seqs"] == 19
    assert d["findings"][0]["title"].startswith("Healthy at the only scrape")
    assert d["observed"]["kv_tokens_per_running_seq"] == 1024.0  # 0.75 × 32,768 / 24
    assert any("one scrape" in n for n in d["notes"])
    assert any("swapped to CPU" in n for n in d["notes"])


def test_v1_fixture_prefers_new_names_and_ignores_created():
    e = parse_file("v1-0.10-renamed.prom").engines["0"]
    assert e.names["kv_cache_usage"] == "vllm:kv_cache_usage_perc"
    assert e.names["prefix_cache_queries"] == "vllm:prefix_cache_queries_total"
    assert e.counters == {"prefix_cache_queries": 1000, "prefix_cache_hits": 250,
                          "preemptions": 0}
    assert e.config_int("block_size") == 64 and e.config_int("num_gpu_blocks") == 4000
    assert "engine" not in e.cache_config


def test_dp_fixture_engines_and_itl_rename():
    s = parse_file("v1-0.11-dp2.prom")
    assert list(s.engines) == ["0", "1"]
    e0, e1 = s.engines["0"], s.engines["1"]
    assert e0.names["itl"] == "vllm:inter_token_latency_seconds"
    assert e0.hists["itl"].sum == 13.223765562288463 and e1.hists["itl"].count == 243
    assert (e0.gauges["running"], e1.gauges["running"]) == (12, 3)
    assert e1.config_int("num_gpu_blocks") == 30000


def test_sglang_fixture(capsys):
    s = parse_file("sglang.prom")
    e = s.engines["0"]
    assert s.server == "sglang"
    assert e.gauges["running"] == 64  # the tp_rank="1" duplicate (999) is ignored
    assert e.gauges["kv_cache_usage"] == 0.4 and e.gauges["kv_pool_tokens"] == 160000
    assert e.names["preemptions"] == "sglang:num_retracted_requests_total"
    code, d, _ = run_json(capsys, "diagnose", str(FIXTURES / "sglang.prom"))
    # 0.4 / 64 per sequence: Erlang 130, diagnose 129 (counted in tokens: SGLang's pool);
    # 0.4 × 160,000 / 64 = 1,000 tokens per sequence
    assert code == 0 and d["server"] == "sglang" and d["recommended_max_num_seqs"] == 129
    assert d["recommendation"]["flag"] == "--max-running-requests"
    assert d["recommendation"]["kv_tokens_per_sequence"] == 1000.0


def test_server_with_no_requests_yet_is_healthy(capsys):
    code, d, _ = run_json(capsys, "diagnose", str(FIXTURES / "v0-0.5-no-requests.prom"))
    assert code == 0 and d["verdict"] == "healthy" and d["recommended_max_num_seqs"] is None
    assert "served no requests" in d["findings"][0]["evidence"][0]


# --- the real samples in ../shared/vllm-metrics (skipped in a clone without them) -------------

def _clean(text: str) -> str:
    """Undo what the copies note they added: shell prompts, '...' elisions, markdown."""
    keep = [ln.replace("**_", "").replace("_**", "").replace(",...}", "}")
            for ln in text.splitlines() if not ln.startswith("$ ") and ln.strip() != "..."]
    return "\n".join(keep) + "\n"


SAMPLE_FACTS = {
    "v0-2024-08-qwen2vl-cache-config-info.txt": lambda s: (
        s.model_names == ["qwenvl"]
        and s.engines["0"].config_int("num_gpu_blocks") == 2048
        and s.engines["0"].config_int("block_size") == 16
        and s.engines["0"].names["kv_cache_usage"] == "vllm:gpu_cache_usage_perc"),
    "v0-2024-09-v0.6-opt125m-ttft-tpot-histograms.txt": lambda s: (
        s.engines["0"].hists["ttft"].count == 1
        and s.engines["0"].hists["ttft"].sum == 9.322166442871094e-05
        and s.engines["0"].names["itl"] == "vllm:time_per_output_token_seconds"),
    "v0-2024-04-ibm-fork-bloom560m.txt": lambda s: (
        s.engines["0"].counters == {"prompt_tokens": 1196, "generation_tokens": 218152}),
    "v1-2025-03-v0.8-qwen25coder32b-router.txt": lambda s: (
        s.engines["0"].gauges == {"running": 0, "waiting": 0, "kv_cache_usage": 0}),
    "v1-2025-07-v0.10.0-glm45-deprecated-gpu-prefix.txt": lambda s: (
        list(s.engines) == ["0"]
        and s.engines["0"].gauges["kv_cache_usage"] == 9.75010481363281e-06
        and s.engines["0"].names["kv_cache_usage"] == "vllm:kv_cache_usage_perc"
        and s.engines["0"].counters["prefix_cache_queries"] == 32),
    "v1-2025-09-dp2-qwen3-8b-tpot-and-itl.txt": lambda s: (
        list(s.engines) == ["0", "1"]
        and s.engines["0"].hists["itl"].sum == 13.223765562288463
        and s.engines["1"].hists["itl"].sum == 3.8492672259453684
        and s.engines["1"].names["itl"] == "vllm:inter_token_latency_seconds"),
    "v1-docs-design-metrics-llama31-8b.txt": lambda s: (
        s.engines["0"].gauges["running"] == 8
        and s.engines["0"].counters["requests_finished"] == 132
        and s.engines["0"].config_int("block_size") == 16),
    "v1-docs-usage-metrics-iteration-tokens.txt": lambda s: (
        s.engines["0"].hists["iteration_tokens"].count == 3),
    "v0-2024-10-v0.5.4-help-type-only.txt": lambda s: s.declared and not s.engines,
    "v0-2023-12-pr1890-aioprometheus.txt": lambda s: not M.has_engine_metrics(s),
    "v1-2025-09-dp2-qwen3-8b-decode-time.txt": lambda s: not M.has_engine_metrics(s),
}


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/vllm-metrics not present")
def test_every_shared_sample_parses():
    names = sorted(p.name for p in SHARED.glob("*.txt"))
    assert names, "no samples"
    for name in names:
        scrapes = M.parse(_clean((SHARED / name).read_text()), name)
        assert len(scrapes) == 1, name
        check = SAMPLE_FACTS.get(name)
        assert check is None or check(scrapes[0]), name


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/vllm-metrics not present")
def test_shared_samples_diagnose(tmp_path, capsys):
    for name in ("v0-2024-08-qwen2vl-cache-config-info.txt",
                 "v1-2025-07-v0.10.0-glm45-deprecated-gpu-prefix.txt",
                 "v1-docs-design-metrics-llama31-8b.txt"):
        p = tmp_path / name
        p.write_text(_clean((SHARED / name).read_text()))
        code, d, err = run_json(capsys, "diagnose", str(p))
        assert code == 0 and d["verdict"] == "healthy", (name, err)


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/vllm-metrics not present")
def test_shared_partial_scrapes_are_bad_input(tmp_path, capsys):
    # latency histograms or token counters, no running/waiting/KV gauges: a server that has
    # served requests (243 TPOT observations on engine 1) is not evidence of health
    for name in ("v1-2025-09-dp2-qwen3-8b-tpot-and-itl.txt",
                 "v0-2024-04-ibm-fork-bloom560m.txt"):
        p = tmp_path / name
        p.write_text(_clean((SHARED / name).read_text()))
        code, out, err = run(capsys, "diagnose", str(p))
        assert code == 2 and out == "", name
        assert err.startswith("kvplan: error: no vLLM scheduler metrics (requests running, "
                              "KV cache usage) in "), name


# --- pure pieces -------------------------------------------------------------------------------

def test_tail_share_by_hand():
    h = M.Hist({1000.0: 950, 10000.0: 950, 20000.0: 1000, float("inf"): 1000}, sum=1_462_000,
               count=1000)
    share, start = tail_share(h, 0.05)
    assert share == pytest.approx(750_000 / 1_462_000) and start == 10000
    # a tail inside one bucket: 50 of 1,000 in (100, 200] -> the top 5 % sit in (195, 200]
    h = M.Hist({100.0: 0, 200.0: 1000, float("inf"): 1000}, sum=150_000, count=1000)
    share, start = tail_share(h, 0.05)
    assert share == pytest.approx(50 * 197.5 / 150_000) and start == pytest.approx(195)
    # the open top bucket takes what _sum leaves: 10 requests with 100,000 tokens over 1,000
    h = M.Hist({1000.0: 190, float("inf"): 200}, sum=190 * 500 + 100_000, count=200)
    share, start = tail_share(h, 0.05)
    assert share == pytest.approx(100_000 / 195_000) and start == 1000


def test_counter_increase_handles_resets():
    assert increase([10, 20, 5, 15]) == 10 + 5 + 10
    assert increase([3]) is None


def test_hist_delta_and_reset():
    old = M.Hist({1.0: 5, float("inf"): 10}, sum=20, count=10)
    new = M.Hist({1.0: 7, float("inf"): 15}, sum=31, count=15)
    d = new.minus(old)
    assert d.buckets == {1.0: 2, float("inf"): 5} and d.sum == 11 and d.count == 5
    restarted = M.Hist({1.0: 1, float("inf"): 2}, sum=3, count=2)
    assert restarted.minus(old) is restarted


def test_concatenated_scrapes_split_on_repeated_series():
    text = "".join(series(healthy()))
    scrapes = M.parse(text)
    assert len(scrapes) == 3
    assert [s.timestamp for s in scrapes] == [T0, T0 + 5, T0 + 10]
    assert [s.engines["0"].gauges["running"] for s in scrapes] == [40, 42, 44]


def test_cli_import_stays_light():
    code = ("import sys, kvplan.cli; print(any(m.startswith(('kvplan.diagnose', "
            "'prometheus_client', 'urllib.request')) for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False"


def test_version_note_dates_kv_cache_usage_perc_to_0_9_2():
    # v1/metrics/loggers.py exports vllm:kv_cache_usage_perc from 0.9.2 (not in 0.9.0/0.9.1)
    from kvplan.diagnose.names import version_notes

    name = {"vllm:kv_cache_usage_perc"}
    for v in ("0.8.5", "0.9.0", "0.9.1"):
        assert version_notes(v, name) == [
            "the server exports vllm:kv_cache_usage_perc, added in vLLM 0.9.2: it is newer "
            f"than --vllm-version {v}"]
    for v in ("0.9", "0.9.2", "0.10.1"):
        assert version_notes(v, name) == []
    assert version_notes("0.12", {"vllm:gpu_cache_usage_perc"}) != []
    assert version_notes("0.11.2", {"vllm:gpu_cache_usage_perc"}) == []


def test_a_partial_scrape_among_whole_ones_is_named(tmp_path, capsys):
    # the third scrape lost its running / waiting / KV gauges (a router answered, say): the
    # levels come from the other two, and the notes say so
    text = series(healthy())
    keep = "\n".join(ln for ln in text[2].splitlines()
                     if not ln.startswith(("vllm:num_requests", "vllm:kv_cache_usage_perc")))
    f = tmp_path / "m.prom"
    f.write_text(text[0] + text[1] + keep + "\n")
    code, d, err = run_json(capsys, "diagnose", str(f))
    assert code == 0, err
    assert ("scrape 3 of 3 carries no scheduler gauges (running, waiting, KV usage: a partial "
            "scrape or another process): those figures come from the other 2") in d["notes"]
    assert d["observed"]["running"] == 41.0  # (40 + 42) / 2


# --- review 23b: the recommendation's risk model, one scrape, impossible values -------------

def l4_cap14(kvs=(0.55, 0.58, 0.565)):
    # the reviewer's L4 scrape (prom/l4_cap14b.prom): recommend's plan for Llama-3.1-8B at 8K,
    # chat (cap 14, 2,152 blocks), saturated by 14 clients: KV 55-58 %, 3 waiting
    return [{None: State(running=14, waiting=3, kv=kv, finished=finished(1000 + 3 * i),
                         blocks=2152, gpu_memory_utilization=0.92)}
            for i, kv in enumerate(kvs)]


def test_erlang_bracket_of_every_recommendation():
    # without length histograms a footprint is exponential: N of them sum to Gamma(N), and
    # the cap is where P(Gamma(N) > pool) passes 1 % / 1.25; by hand, per fixture
    cases = {"spiral": (2.94 / 768, 223, 219), "healthy": (1.5 / 126, 63, 62),
             "queue": (1.2 / 384, 278, 271), "underfed": (0.18 / 21, 91, 91),
             "dp engine 0": (1.05 / 180, 141, 139), "dp engine 1": (2.91 / 450, 126, 124),
             "intermittent": (2.1 / 300, 115, 114), "v0 fixture": (0.75 / 24, 19, 19),
             "sglang": (0.4 / 64, 130, 129), "l4 cap 14": (1.695 / 42, 14, 14)}
    for name, (per_seq, erlang, got) in cases.items():
        assert erlang_cap(per_seq) == erlang, name
        assert 0.97 * erlang <= got <= erlang, name
    # the reviewer's L4: 14 sequences at 0.565 hold 0.7 % overflow risk, 15 would hold 1.4 %
    assert round(erlang_tail(14, 42 / 1.695), 4) == 0.0072
    assert round(erlang_tail(15, 42 / 1.695), 4) == 0.0138


def test_reviewer_l4_cap14_is_not_told_to_raise_its_cap(serve, capsys):
    # review 23b #6: the mean target advised 21 (floor(0.85 × 42 / 1.695)); at 21 the
    # simulator preempts. The risk model on the same footprint (1,390 tokens, exponential)
    # gives recommend's own cap, 14
    url = serve(series(l4_cap14()))
    code, d, err = run_json(capsys, "diagnose", url, "--interval", "0.01", "--max-num-seqs",
                            "14")
    assert code == 0 and d["verdict"] == "healthy", err
    r = d["recommendation"]
    assert d["recommended_max_num_seqs"] == 14 and r["current_max_num_seqs"] == 14
    assert r["kv_tokens_per_sequence"] == round(1.695 / 42 * 2152 * 16, 1)  # 1,389.6
    assert r["overflow_probability"] <= 0.008 and r["footprint_shape"].startswith("exponential")
    assert d["findings"][0]["fix"] == ["no change needed"]
    _, plan, _ = run_json(capsys, "recommend", "llama-3.1-8b", "--gpu", "l4",
                          "--max-model-len", "8K", "--workload", "chat", "--rate", "1")
    # recommend plans on the requests vLLM serves (0.39 % of chat's prompts reach 8K): 15
    assert plan["safe_max_num_seqs"] == 15 >= d["recommended_max_num_seqs"]
    # simulate at diagnose's cap (2,000 chat requests, 14 clients): no preemption; at the
    # mean target's 21 (21 clients): 79, and TTFT p99 8.70 s
    for cap, preempted in ((14, 0), (21, 79)):
        _, sim, _ = run_json(capsys, "simulate", "llama-3.1-8b", "--gpu", "l4",
                             "--max-model-len", "8K", "--workload", "chat", "--max-num-seqs",
                             str(cap), "--concurrency", str(cap), "--requests", "2000",
                             "--seed", "1")
        assert sim["preemptions"] == preempted, cap


def test_histogram_shape_by_monte_carlo(serve, capsys):
    """The hogging fixture's footprint, rebuilt by hand and summed by Monte Carlo: prompts
    uniform in (500, 1000] (95 %) or (10000, 20000] (5 %), outputs in (100, 200] seen in
    proportion to their length at a uniform age, scaled to the observed 0.0085 of the pool
    (2.55 / 300), in blocks of 16 of 5,119. 69 sequences overflow the pool less than 1 % of the
    time; 80 do more often than 1 %."""
    import random

    code, d, _ = run_json(capsys, "diagnose", serve(series(hogging())), "--interval", "0.01")
    assert d["recommended_max_num_seqs"] == 69
    rng = random.Random(7)
    raw = []
    for _ in range(20000):
        p = rng.uniform(500, 1000) if rng.random() < 0.95 else rng.uniform(10000, 20000)
        while True:  # length-biased output: accept o with probability o / 200
            o = rng.uniform(100, 200)
            if rng.random() < o / 200:
                break
        raw.append(p + rng.random() * o)
    target = 2.55 / 300 * 5119 * 16
    scale = target / (sum(raw) / len(raw))
    blocks = [math.ceil(x * scale / 16) for x in raw]
    c = target / 16 / (sum(blocks) / len(blocks))  # re-centre after rounding up to blocks
    blocks = [math.ceil(x * scale * c / 16) for x in raw]

    def overflow(n: int, trials: int = 20000) -> float:
        return sum(sum(rng.choices(blocks, k=n)) > 5119 for _ in range(trials)) / trials

    assert overflow(69) < 0.01 < overflow(80)


def test_one_scrape_saturated_is_not_healthy(tmp_path, capsys):
    # review 23b #8 (prom/one_full.prom): one scrape, 256 running, 120 waiting, KV 99 %,
    # 5,000 preemptions since start. It was "HEALTHY, no change needed", exit 0
    f = tmp_path / "one.prom"
    f.write_text(vllm_scrape({None: State(running=256, waiting=120, kv=0.99, preemptions=5000,
                                          finished=finished(1000), blocks=2048)}))
    code, d, _ = run_json(capsys, "diagnose", str(f))
    assert code == 1 and d["verdict"] == "unhealthy"
    (s,) = d["findings"]
    assert (s["id"], s["severity"]) == ("saturated", "warning")
    assert s["evidence"][:3] == [
        "120 requests waiting", "running 256 with KV cache usage at 99.0%: the pool is the limit",
        "5,000 preemptions since the server started (one scrape: when they happened is unknown)"]
    # 0.99 / 256 per sequence (127 tokens, 8 blocks): Erlang 221; diagnose 210, as capacity's
    # bins take small demands up by a whole block; below the 256 running
    assert s["fix"][0].startswith("lower --max-num-seqs to 210: ")
    assert s["data"]["0"] == {"waiting": 120.0, "kv_cache_usage": 0.99,
                              "preemptions_total": 5000.0, "limit": "kv"}
    assert erlang_cap(0.99 / 256) == 221
    # a full pool of a server that has preempted, nothing waiting: saturated too
    f.write_text(vllm_scrape({None: State(running=200, kv=0.95, preemptions=3)}))
    code, d, _ = run_json(capsys, "diagnose", str(f))
    assert code == 1 and d["findings"][0]["id"] == "saturated"
    assert d["findings"][0]["title"] == ("Saturated at the only scrape: the KV cache is full and "
                                         "the server preempts (levels, no trend)")
    # calm levels: healthy, but said to rest on one instant
    f.write_text(vllm_scrape({None: State(running=20, waiting=2, kv=0.4, preemptions=3)}))
    code, d, _ = run_json(capsys, "diagnose", str(f))
    assert code == 0 and d["findings"][0]["title"].startswith("Healthy at the only scrape")
    # two scrapes: the trend rules decide (standing_queue), not the levels rule
    two = "".join(series([{None: State(running=256, waiting=w, kv=0.99, blocks=2048)}
                          for w in (120, 121)]))
    f.write_text(two)
    code, d, _ = run_json(capsys, "diagnose", str(f))
    assert [x["id"] for x in d["findings"]] == ["standing_queue"]


@pytest.mark.parametrize("line,message", [
    ("vllm:kv_cache_usage_perc{model_name=\"m\"} 1.5",
     "vllm:kv_cache_usage_perc{model_name=\"m\"} is 1.5 in F: above 1, and KV cache usage is a "
     "fraction (1 = 100 %)"),
    ("vllm:kv_cache_usage_perc{model_name=\"m\"} -0.1",
     "vllm:kv_cache_usage_perc{model_name=\"m\"} is -0.1 in F: negative"),
    ("vllm:num_requests_running{model_name=\"m\"} -3",
     "vllm:num_requests_running{model_name=\"m\"} is -3 in F: negative, which a count, a rate "
     "or a share cannot be"),
    ("vllm:num_requests_waiting{model_name=\"m\"} -1",
     "vllm:num_requests_waiting{model_name=\"m\"} is -1 in F: negative"),
    ("vllm:num_requests_running{model_name=\"m\"} NaN",
     "vllm:num_requests_running{model_name=\"m\"} is nan in F: not a finite number"),
    ("vllm:kv_cache_usage_perc{model_name=\"m\"} +Inf",
     "vllm:kv_cache_usage_perc{model_name=\"m\"} is inf in F: not a finite number"),
    ("vllm:num_preemptions_total{model_name=\"m\"} -5",
     "vllm:num_preemptions_total{model_name=\"m\"} is -5 in F: negative"),
])
def test_impossible_values_exit_2(tmp_path, capsys, line, message):
    # review 23b #9: 1.5 gave "KV cache usage 150.0%" and a cap of 2, -3 "running -3", NaN
    # "a partial scrape, a router or another process"
    f = tmp_path / "bad.prom"
    ok = {"vllm:num_requests_running": 5, "vllm:kv_cache_usage_perc": 0.5}
    name = line.split("{")[0]
    f.write_text("".join(f'{k}{{model_name="m"}} {v}\n' for k, v in ok.items() if k != name)
                 + line + "\n")
    code, out, err = run(capsys, "diagnose", str(f))
    assert code == 2 and out == ""
    assert err.startswith("kvplan: error: " + message.replace("F", str(f), 1)), err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_absent_waiting_is_not_quoted_as_zero(tmp_path, capsys):
    # review 23b #9: a scrape without vllm:num_requests_waiting printed "waiting 0"
    f = tmp_path / "m.prom"
    f.write_text('vllm:num_requests_running{model_name="m"} 5\n'
                 'vllm:kv_cache_usage_perc{model_name="m"} 0.2\n')
    code, out, _ = run(capsys, "diagnose", str(f))
    assert code == 0 and "running 5\n" in out and "waiting 0" not in out
    assert "waiting " not in out


def test_vllm_version_and_risk_are_validated(tmp_path, capsys):
    # review 23b #13: --vllm-version abc ran silently; kvplan size exits 2
    f = tmp_path / "m.prom"
    f.write_text(series(healthy())[0])
    for v in ("abc", "99"):
        code, out, err = run(capsys, "diagnose", str(f), "--vllm-version", v)
        assert code == 2 and err == (f"kvplan: error: cannot read vLLM version '{v}' (use e.g. "
                                     "0.33 or 0.20.2)\n")
    for r in ("0", "1", "-0.5"):
        code, _, err = run(capsys, "diagnose", str(f), "--preempt-risk", r)
        assert code == 2 and "--preempt-risk must be between 0 and 1" in err
    assert run(capsys, "diagnose", str(f), "--preempt-risk", "nan")[0] == 2
    # a laxer risk admits more: 5 % on the healthy fixture (1.5 / 126 per sequence)
    _, d, _ = run_json(capsys, "diagnose", str(f), "--preempt-risk", "0.05")
    assert d["recommendation"]["preempt_risk"] == 0.05 and d["recommended_max_num_seqs"] > 62


def test_version_note_when_both_usage_names_are_exported(serve, capsys):
    # review 23b #13: a 0.9.2-0.11 server exports gpu_cache_usage_perc beside
    # kv_cache_usage_perc; the newer one wins the field, but the old one still dates it:
    # 0.12.0's v1/metrics/loggers.py no longer has it (0.11.2's does)
    url = serve(series(healthy(), era="v1-0.10"))
    code, d, _ = run_json(capsys, "diagnose", url, "--interval", "0.01", "--vllm-version", "0.12")
    assert d["metric_names"]["kv_cache_usage"] == "vllm:kv_cache_usage_perc"
    assert ("the server exports vllm:gpu_cache_usage_perc, removed in vLLM 0.12: it is older "
            "than --vllm-version 0.12") in d["notes"]
    url = serve(series(healthy(), era="v1-0.10"))
    code, d, _ = run_json(capsys, "diagnose", url, "--interval", "0.01", "--vllm-version",
                          "0.11.2")
    assert not any("--vllm-version" in n for n in d["notes"])


def test_counter_reset_is_named_not_quoted_as_a_rise(tmp_path, capsys):
    # review 23b #14 (prom/reset.prom): 500 -> 3 -> 4 printed "preemptions rose 500 → 4"
    states = [{None: State(running=40, kv=0.3, preemptions=p, finished=finished(f),
                           blocks=2048)} for p, f in ((500, 1000), (3, 5), (4, 10))]
    f = tmp_path / "reset.prom"
    f.write_text("".join(series(states)))
    code, d, _ = run_json(capsys, "diagnose", str(f))
    (p,) = [x for x in d["findings"] if x["id"] == "intermittent_preemption"]
    # increase: 3 after the restart + 1 = 4 in 10 s; finished 5 + 5 = 10: 0.40 per request
    assert p["evidence"][0] == ("+4 preemptions in 10.0 s (0.40/s, 0.40 per finished request); "
                                "the counter reset in the window (500 → 3: a server restart) and "
                                "counts from zero after it")
    assert p["data"]["0"]["counter_reset"] is True
    assert any(n.startswith("counters fell between scrapes (vllm:num_preemptions_total 500 → "
                            "3; vllm:request_success_total 1,000 → 5)") for n in d["notes"])


def test_cross_check_sizes_the_given_cap(serve, capsys):
    # review 23b #7: the cross-check sized vLLM's default cap (1,828 blocks on an L4 at 8K)
    # and called recommend's own pool (2,152 at --max-num-seqs 14) "+18 %, check other
    # processes on the GPU"
    _, size, _ = run_json(capsys, "size", "llama-3.1-8b", "--gpu", "l4", "--max-model-len",
                          "8K", "--max-num-seqs", "14")
    assert size["num_gpu_blocks"] == 2152
    code, d, _ = run_json(capsys, "diagnose", serve(series(l4_cap14())), "--interval", "0.01",
                          "--max-num-seqs", "14", "--model", "llama-3.1-8b", "--gpu", "l4",
                          "--max-model-len", "8K")
    c = d["cross_check"]
    assert c["predicted_num_gpu_blocks"] == 2152 == c["observed_num_gpu_blocks"]
    assert c["max_num_seqs"] == 14 and c["default_max_num_seqs"] is None
    assert not any("differs from kvplan size" in n for n in d["notes"])


# --- review 23d: the preemption floor, the cap on its own pool -------------------------------

def test_preemption_floor_poisson_by_hand():
    from kvplan.core import preemptfloor as fl

    # P(X >= 5 | 2.4) = 1 - e^-2.4 (1 + 2.4 + 2.88 + 2.304 + 1.3824) = 0.0959;
    # P(X >= 5 | 1) = 1 - e^-1 (1 + 1 + 1/2 + 1/6 + 1/24) = 0.00366; P(X >= 4 | 1) = 0.0190
    assert round(fl.poisson_tail(5, 2.4), 4) == 0.0959
    assert round(fl.poisson_tail(5, 1.0), 5) == 0.00366
    assert round(fl.poisson_tail(4, 1.0), 4) == 0.0190
    assert fl.poisson_tail(1, 0.0) == 0.0 and fl.poisson_tail(0, 5.0) == 1.0
    # the reviewer's two servers at recommend's cap: 1 in 3,202 and 5 in 2,406 are within
    # the 0.1 % floor; 5 in 1,000 and 2 in 100 (P(X >= 2 | 0.1) = 0.0047) are not
    assert not fl.excessive(1, 3202) and not fl.excessive(5, 2406)
    assert fl.excessive(5, 1000) and fl.excessive(2, 100) and not fl.excessive(1, 100)
    assert fl.excessive(1, None) and not fl.excessive(0, None)


def floor_states(preempted: tuple[int, int, int]):
    # 15 running (the cap), KV 40 %, 1,000 requests finished over the window
    return [{None: State(running=15, kv=0.40, preemptions=p, finished=finished(f),
                         blocks=2151)}
            for p, f in zip(preempted, (1000, 1500, 2000))]


def test_preemptions_within_the_floor_are_healthy(serve, capsys):
    # review 23d #5: one preemption anywhere in the window made the server UNHEALTHY.
    # 4 in 1,000 finished requests: a 0.1 % share gives 4 or more with 1.9 % probability
    code, d, _ = run_json(capsys, "diagnose", serve(series(floor_states((0, 2, 4)))),
                          "--interval", "0.01", "--max-num-seqs", "15")
    assert code == 0 and d["verdict"] == "healthy"
    f = d["findings"][0]
    assert f["id"] == "healthy" and f["title"].startswith("Healthy: preemptions within the floor")
    assert "4 preemptions in 10.0 s (0.40% of 1,000 finished requests): a 0.1% share gives 4 " \
        "or more with 2% probability, within the floor" in f["evidence"]
    assert d["observed"]["preemptions_per_request"] == 0.004
    assert d["observed"]["requests_finished"] == 1000
    # 5 in 1,000 (a 0.1 % share gives 5 or more with 0.37 % probability): a warning whose fix
    # does not contradict the recommendation. 0.4 / 15 of the pool a sequence, exponential
    # footprints: Erlang 24, diagnose 24, above the cap 15
    code, d, _ = run_json(capsys, "diagnose", serve(series(floor_states((0, 2, 5)))),
                          "--interval", "0.01", "--max-num-seqs", "15")
    f = d["findings"][0]
    assert code == 1 and f["id"] == "intermittent_preemption"
    assert erlang_cap(0.4 / 15) == 24 and d["recommended_max_num_seqs"] == 24
    assert f["evidence"][-1] == ("0.50% of 1,000 finished requests preempted: more than the "
                                 "0.1% diagnose accepts, beyond chance")
    assert f["fix"][0].startswith("--max-num-seqs 15 is not above the recommended 24, which "
                                  "rests on the footprint at scrape times")
    assert f["data"]["0"]["preemptions_per_request"] == 0.005


def test_reviewer_recommended_plan_at_its_rate_is_healthy(tmp_path, capsys, monkeypatch):
    # review 23d #5: recommend's plan (Llama-3.1-8B, L4, 8K, chat: cap 15 on 2,151 blocks) at
    # its planned 0.4167 req/s, simulated for 4,000 requests: one preemption in 7,777 s made
    # it UNHEALTHY ("enlarge the pool") while the recommendation was the cap itself
    from simscrape import simulated_scrapes

    text, st = simulated_scrapes(monkeypatch, "llama-3.1-8b", "l4", "8192", 15, 0.4167, 4000)
    assert st.preemptions == 1 and len(st.completed) == 3984
    f = tmp_path / "planned.prom"
    f.write_text(text)
    code, d, _ = run_json(capsys, "diagnose", str(f), "--max-num-seqs", "15")
    assert code == 0 and d["verdict"] == "healthy"
    assert d["recommended_max_num_seqs"] == 15 and d["findings"][0]["fix"] == ["no change needed"]
    assert "1 preemption in 7777.3 s (0.03% of 3,202 finished requests): at most the 0.1% " \
        "accepted" in d["findings"][0]["evidence"]
    # with --model/--gpu the cap is sized on the pool it leaves: the same 2,151 blocks, 15
    _, d2, _ = run_json(capsys, "diagnose", str(f), "--max-num-seqs", "15", "--model",
                        "llama-3.1-8b", "--gpu", "l4", "--max-model-len", "8192")
    assert d2["recommended_max_num_seqs"] == 15
    assert d2["recommendation"]["pool_source"] == "vllm:cache_config_info"


def test_reviewer_thrash_cap_sized_on_its_own_pool(tmp_path, capsys, monkeypatch):
    # review 23d #6: vLLM's default cap (256) leaves 1,820 blocks on an L4 at 8K; fed 0.6667
    # req/s it thrashes (680 preemptions). Diagnose sized the cap on those 1,820 blocks: 13,
    # below recommend's 15, though at 12-16 vLLM profiles fewer sequences and leaves 2,151
    # or 2,152 blocks
    from simscrape import simulated_scrapes

    text, st = simulated_scrapes(monkeypatch, "llama-3.1-8b", "l4", "8192", None, 0.6667, 3000)
    assert st.preemptions == 680
    f = tmp_path / "thrash.prom"
    f.write_text(text)
    _, size16, _ = run_json(capsys, "size", "llama-3.1-8b", "--gpu", "l4", "--max-model-len",
                            "8192", "--max-num-seqs", "16")
    assert size16["num_gpu_blocks"] == 2151
    code, d, _ = run_json(capsys, "diagnose", str(f), "--model", "llama-3.1-8b", "--gpu", "l4",
                          "--max-model-len", "8192")
    r = d["recommendation"]
    assert code == 1 and d["cross_check"]["predicted_num_gpu_blocks"] == 1820
    # 1,270 tokens a sequence (the pool is full: a lower bound; 1,333 before the simulated
    # victims found their cached blocks again) on 2,150 usable blocks: 16 hold with 0.41 %
    # risk on their own pool (2,151 blocks too)
    assert r["kv_tokens_per_sequence"] == 1270.3
    assert d["recommended_max_num_seqs"] == 16 and r["overflow_probability"] == 0.00412
    assert (r["pool_tokens"], r["current_pool_tokens"]) == (2151 * 16, 1820 * 16)
    assert r["pool_source"] == "kvplan size at max_num_seqs 16"
    assert "so 16 of them overflow the 34,416-token pool vLLM leaves at 16 (kvplan size; " \
        "29,120 now)" in d["findings"][0]["fix"][0]
    # the full-pool note's "upper bound" holds: 16 >= recommend's 15 on the same pool
    _, plan, _ = run_json(capsys, "recommend", "llama-3.1-8b", "--gpu", "l4", "--max-model-len",
                          "8K", "--workload", "chat", "--rate", "5")
    assert plan["max_num_seqs"] == 15 <= d["recommended_max_num_seqs"]
    # without --model/--gpu: the pool the old cap leaves, and a note that says so
    _, d3, _ = run_json(capsys, "diagnose", str(f), "--max-num-seqs", "256")
    assert d3["recommended_max_num_seqs"] == 13
    assert any(n.startswith("the recommendation is sized on the pool --max-num-seqs 256 leaves "
                            "(29,120 tokens)") for n in d3["notes"])


def test_fixed_point_by_hand():
    from kvplan.core.capacity import fixed_point

    # holds(c) = 100 - c // 2: 67 holds 67, 68 holds 66
    calls = []

    def holds(c):
        calls.append(c)
        return 100 - c // 2

    assert fixed_point(holds, 10, 200) == 67 and len(calls) <= 8
    assert fixed_point(holds, 10, 50) == 50
    assert fixed_point(lambda c: 5, 10, 50) is None
