"""Speed of `kvplan simulate` (target: one simulated hour at 20 req/s, 1,000-token prompts,
300-token outputs, Llama-3.1-8B on an H100, in <= 5 s wall on one core, i.e. >= 700x faster
than real time). Reports simulated seconds per wall second and events per second.

    python benchmarks/sim_speed.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kvplan.core import perf  # noqa: E402
from kvplan.core.sizing import EngineArgs, size  # noqa: E402
from kvplan.core.workload import LengthDist, Workload  # noqa: E402
from kvplan.sim.run import Load, simulate  # noqa: E402
from kvplan.sim.setup import engine_config  # noqa: E402
from kvplan.sources.resolve import resolve_gpu, resolve_model  # noqa: E402


def main() -> int:
    gpu = resolve_gpu("h100")
    r = size(resolve_model("meta-llama/Llama-3.1-8B-Instruct"), gpu,
             EngineArgs(max_model_len=8192))
    pm = perf.build(r, gpu)
    wl = Workload("fixed", LengthDist.fixed(1000), LengthDist.fixed(300))
    walls = []
    for seed in range(3):
        t = time.perf_counter()
        st = simulate(engine_config(r), pm, wl, Load(rate=20, duration=3600), seed=seed)
        walls.append(time.perf_counter() - t)
    w = sorted(walls)[1]
    print(f"simulated {st.sim_time:,.0f} s ({len(st.completed):,} requests, {st.steps:,} steps, "
          f"{st.events:,} events, {st.preemptions:,} preemptions)")
    print(f"wall: median {w:.2f} s of 3 runs -> {st.sim_time / w:,.0f} simulated s per wall s, "
          f"{st.events / w:,.0f} events/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
