"""Wall time of `kvplan size` on catalog models (target: <= 150 ms on a 2-core machine).

Runs the installed console script (falls back to `python -m kvplan`) N times per model and
prints the median and worst wall time with the catalog cache warm (the usual case: the first
run after an install or a catalog edit fills it) and with no usable cache (every run scans
the YAML), the interpreter's own start-up, and the in-process time of the core alone.

    python benchmarks/speed.py [N]
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CASES = [
    ["meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100"],
    ["deepseek-ai/DeepSeek-R1", "--gpu", "h200", "-tp", "8"],
    ["Qwen/Qwen3-Next-80B-A3B-Thinking", "--gpu", "h100", "-tp", "4"],
    ["google/gemma-3-27b-it", "--gpu", "l40s", "--json"],
    # a ModelOpt checkpoint with a 300-entry exclude list (per-part quantization matching)
    ["nvidia/DeepSeek-V3.2-NVFP4", "--gpu", "b200", "-tp", "8"],
]


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    exe = shutil.which("kvplan")
    base = [exe] if exe else [sys.executable, "-m", "kvplan"]
    # Installed packages carry compiled bytecode; measure that, not a compile on every run.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for case in CASES:  # warm the bytecode, and refuse to time a command that fails
        r = subprocess.run([*base, "size", *case], env=env, capture_output=True, text=True,
                           check=False)
        if r.returncode not in (0, 1) or not r.stdout.strip():  # 1 = "does not fit"
            tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
            raise SystemExit(f"{' '.join(base)} size {' '.join(case)} failed: {tail}")
    print(f"command: {' '.join(base)} size ...   runs per case: {n}")
    print("| case | median ms | max ms | no cache: median ms |\n|---|---|---|---|")
    no_cache = {**env, "KVPLAN_CACHE": os.devnull}  # a file: nothing can be written under it

    def wall(cmd: list[str], e: dict[str, str]) -> list[float]:
        out = []
        for _ in range(n):
            t = time.perf_counter()
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           check=False, env=e)
            out.append((time.perf_counter() - t) * 1000)
        return out

    for case in CASES:
        warm, cold = wall([*base, "size", *case], env), wall([*base, "size", *case], no_cache)
        print(f"| {' '.join(case)} | {statistics.median(warm):.0f} | {max(warm):.0f} | "
              f"{statistics.median(cold):.0f} |")
    print(f"\n`python -c pass`: {statistics.median(wall([sys.executable, '-c', 'pass'], env)):.0f}"
          " ms median")

    from kvplan.core.sizing import size
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    m, g = resolve_model("meta-llama/Llama-3.1-8B-Instruct"), resolve_gpu("h100")
    t = time.perf_counter()
    for _ in range(200):
        size(m, g)
    print(f"\ncore size() in process: {(time.perf_counter() - t) / 200 * 1000:.2f} ms per call")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
