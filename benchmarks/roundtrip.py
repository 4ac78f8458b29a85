"""recommend -> check round trip: every plan `kvplan recommend` emits must pass `kvplan check`.

For each model x GPU x vLLM release x workload, the plan's command, environment, replica count
and GPUs are written as a Kubernetes Deployment (with a persistent compile cache and the
workload's annotations) and checked. A failure or warning on kvplan's own plan is a
disagreement between the planner and the gate, printed with its check ids.

    python benchmarks/roundtrip.py            # 90 plans (about 1.5 minutes on 2 cores)
    python benchmarks/roundtrip.py --quick    # 8 plans
    python benchmarks/roundtrip.py --prefix-hit 0.6 --versions 0.6.6,0.8.5,0.25.0
"""

from __future__ import annotations

import argparse
import itertools
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

MODELS = ["meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-32B", "google/gemma-3-12b-it",
          "openai/gpt-oss-20b", "Qwen/Qwen3-30B-A3B"]
GPUS = ["h100", "l40s", "a100-80gb"]
VERSIONS = ["0.11.0", "0.20.2", "0.33.0"]
WORKLOADS = [("chat", 10.0), ("rag", 3.0)]


def kvplan(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvplan", *argv], capture_output=True,
                          text=True)


def manifest(plan: dict, gpu: str, version: str, workload: str, rate: float,
             prefix_hit: float) -> str:
    """The plan as a Deployment: its command (split from `command`), its `env`, replicas and
    TP x PP GPUs, a PersistentVolumeClaim at vLLM's cache root."""
    argv = shlex.split(plan["command"])
    at = argv.index("vllm")
    env = [{"name": e.split("=", 1)[0], "value": e.split("=", 1)[1]} for e in argv[:at]]
    ann = {"kvplan.io/gpu": gpu, "kvplan.io/workload": workload, "kvplan.io/rate": f"{rate:g}"}
    if prefix_hit:
        ann["kvplan.io/prefix-hit"] = f"{prefix_hit:g}"
    gpus = plan["gpus_per_replica"]
    return "\n".join([
        "apiVersion: apps/v1", "kind: Deployment",
        f"metadata: {{name: plan, annotations: {json.dumps(ann)}}}",
        f"spec:\n  replicas: {plan['replicas']}\n  template:\n    spec:\n      containers:",
        f"      - name: vllm\n        image: vllm/vllm-openai:v{version}",
        f"        command: {json.dumps(argv[at:])}\n        env: {json.dumps(env)}",
        f"        resources: {{limits: {{nvidia.com/gpu: \"{gpus}\"}}}}",
        "        volumeMounts: [{name: cache, mountPath: /root/.cache/vllm}]",
        "      volumes: [{name: cache, persistentVolumeClaim: {claimName: cache}}]", ""])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="two models, two GPUs, one release")
    ap.add_argument("--versions", help="comma-separated vLLM releases")
    ap.add_argument("--prefix-hit", type=float, default=0.0)
    args = ap.parse_args()
    models, gpus, versions = MODELS, GPUS, VERSIONS
    if args.quick:
        models, gpus, versions = MODELS[:2], GPUS[:2], VERSIONS[-1:]
    if args.versions:
        versions = args.versions.split(",")
    planned = disagree = 0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "plan.yaml"
        for m, g, v, (w, rate) in itertools.product(models, gpus, versions, WORKLOADS):
            r = kvplan("recommend", m, "--gpu", g, "-tp", "auto", "--workload", w, "--rate",
                       f"{rate:g}", "--prefix-hit", f"{args.prefix_hit:g}", "--vllm-version", v,
                       "--json")
            if r.returncode != 0:  # no plan (the release lacks the model, nothing fits)
                continue
            plan = json.loads(r.stdout)
            path.write_text(manifest(plan, g, v, w, rate, args.prefix_hit))
            c = kvplan("check", str(path), "--format", "json")
            planned += 1
            rep = json.loads(c.stdout) if c.stdout.strip() else {"deployments": []}
            bad = [(f["status"], f["id"], f["message"][:140]) for d in rep["deployments"]
                   for f in d["checks"] if f["status"] in ("fail", "warn")]
            if bad or c.returncode != 0:
                disagree += 1
                print(f"{m} {g} {v} {w}: exit {c.returncode}", *bad, sep="\n  ")
    print(f"{planned} plans checked, {disagree} where check disagrees with recommend")
    return 1 if disagree else 0


if __name__ == "__main__":
    sys.exit(main())
