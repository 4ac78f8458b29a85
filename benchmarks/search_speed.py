"""Speed of the deployment search (target: <= 300 ms for up to 500 candidates).

Candidates: every catalog GPU x TP {1, 2, 4, 8, 16} x KV dtype {auto, fp8, fp8_e5m2}, for a
chat workload at 20 req/s with TTFT and TPOT SLOs. Reports the in-process wall time of
`plan.search` (cold: first call; warm: repeated) and of the whole CLI command.

    python benchmarks/search_speed.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kvplan import catalog  # noqa: E402
from kvplan.core import capacity  # noqa: E402
from kvplan.core.plan import Targets, search  # noqa: E402
from kvplan.core.sizing import EngineArgs  # noqa: E402
from kvplan.core.workload import preset  # noqa: E402
from kvplan.sources.resolve import gpu_from_entry, resolve_model  # noqa: E402


def main() -> int:
    gpus = [gpu_from_entry(k, e) for k, e in catalog.load("gpus").items()]
    tps, kvs = [1, 2, 4, 8, 16], ["auto", "fp8", "fp8_e5m2"]
    model = resolve_model("meta-llama/Llama-3.1-8B-Instruct")
    wl = preset("chat")
    t = Targets(rate=20, ttft_p95_s=2.0, tpot_ms=60)
    n = len(gpus) * len(tps) * len(kvs)
    base = EngineArgs(max_model_len=32768)
    times = []
    for i in range(5):
        if i == 0:
            capacity._CACHE.clear()
        t0 = time.perf_counter()
        plans, rejected = search(model, gpus, base, None, wl, t, tps, kvs)
        times.append((time.perf_counter() - t0) * 1000)
    print(f"candidates: {n} ({len(plans)} shown, {len(rejected)} rejected)")
    print(f"search, cold: {times[0]:.0f} ms; warm median: {sorted(times[1:])[1]:.0f} ms")
    exe = shutil.which("kvplan")
    cmd = ([exe] if exe else [sys.executable, "-m", "kvplan"]) + [
        "recommend", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "any", "-tp", "1,2,4,8,16",
        "--kv-cache-dtype", "auto|fp8|fp8_e5m2", "--rate", "20", "--ttft", "2", "--tpot", "60",
        "--max-model-len", "32768", "--json"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    walls = []
    for _ in range(5):
        t0 = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=False, env=env)
        walls.append((time.perf_counter() - t0) * 1000)
    print(f"whole command (incl. interpreter start): median {sorted(walls)[2]:.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
