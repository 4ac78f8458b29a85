"""Robustness: corrupt real inputs at random and count internal errors (exit 3).

Every kind of input kvplan reads gets one value replaced by one of another type or an extreme
one: a catalog model's config field (top level, text config or a nested object), a user
catalog entry's field, a line of a /metrics scrape (tests/fixtures/metrics), a trace row, a
`vllm serve` command line, a `--gpu` name (MIG slices too) with a `--gpu-memory`, a manifest,
a shell script or a Dockerfile (tests/fixtures/check)
for `kvplan check`, and a model's files on the test suite's local Hub server. kvplan
must answer each with a result, "does not fit" or one line of bad input; anything else is
listed with its input. Seeds are fixed, so a run is repeatable; memory is capped at 4 GiB
per process (a layer count of 1e12 once exhausted it).

Run:  python benchmarks/fuzz.py [--rounds N] [--seed S]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import random
import resource
import shlex
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvplan.cli import main  # noqa: E402

VALUES = [0, -1, 1.5, "8", "", None, True, [], {}, [1], {"a": 1}, 10**12, 10**30, "nan",
          "inf", 1e308, 5e-324]


def crash(argv: list[str]) -> str | None:
    """What kvplan said when `argv` was an internal error (exit 3) or raised; None when it
    answered with a result, "does not fit" or bad input."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except BaseException as e:  # noqa: BLE001 - what we are looking for
            return repr(e)
    return (err.getvalue().strip() or "exit 3") if code == 3 else None


MUTATIONS = 1  # values corrupted per config (--mutations)


def configs(rng: random.Random, tmp: Path, rounds: int) -> list[str]:
    models = yaml.safe_load((ROOT / "models.yaml").read_text())["models"]
    out = []
    for _ in range(rounds):
        cfg = copy.deepcopy(models[rng.choice(sorted(models))]["config"])
        for _ in range(MUTATIONS):
            tgt = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) \
                and rng.random() < .5 else cfg
            nested = [v for v in tgt.values() if isinstance(v, dict) and v]
            if nested and rng.random() < .3:
                tgt = rng.choice(nested)
            if not tgt:
                continue
            key = rng.choice(sorted(tgt))
            tgt[key] = copy.deepcopy(rng.choice(VALUES))
        (tmp / "config.json").write_text(json.dumps(cfg))
        said = crash(["size", str(tmp / "config.json"), "--gpu", rng.choice(
            ["h100", "l4", "b200", "mi300x"]), "-tp", rng.choice(["1", "2", "8"])])
        if said:
            out.append(f"config {key}={tgt[key]!r}: {said}")
    return out


def catalogs(rng: random.Random, tmp: Path, rounds: int) -> list[str]:
    models = yaml.safe_load((ROOT / "models.yaml").read_text())["models"]
    gpus = yaml.safe_load((ROOT / "gpus.yaml").read_text())["gpus"]
    out = []
    for _ in range(rounds):
        if rng.random() < .5:
            e = copy.deepcopy(models[rng.choice(sorted(models))])
            key = rng.choice(sorted(k for k in e if k != "config"))
            doc, argv = {"models": {"me/m": e}}, ["size", "me/m", "--gpu", "h100"]
        else:
            e = copy.deepcopy(gpus[rng.choice(sorted(gpus))])
            key = rng.choice(sorted(e))
            e["aliases"] = ["my-gpu"]
            doc, argv = {"gpus": {"my-gpu": e}}, ["size", "llama-3.1-8b", "--gpu", "my-gpu"]
        e[key] = copy.deepcopy(rng.choice(VALUES))
        f = tmp / "catalog.yaml"
        f.write_text(yaml.safe_dump({"schema_version": 1, **doc}))
        said = crash([*argv, "--catalog", str(f)])
        if said:
            out.append(f"catalog {key}={e[key]!r}: {said}")
    return out


def scrapes(rng: random.Random, tmp: Path, rounds: int) -> list[str]:
    files = sorted((ROOT / "tests" / "fixtures" / "metrics").glob("*.prom"))
    junk = ["NaN", "+Inf", "-Inf", "-1", "1e308", "x", "", "{", "}", '"', "0", "1e-320",
            "9" * 400]
    out = []
    for _ in range(rounds):
        paths = []
        for j, src in enumerate(rng.sample(files, k=rng.choice([1, 2]))):
            lines = src.read_text().split("\n")
            for _ in range(rng.randint(1, 6)):
                i = rng.randrange(len(lines))
                toks = lines[i].split(" ")
                toks[rng.randrange(len(toks))] = rng.choice(junk)
                lines[i] = " ".join(toks)
            p = tmp / f"scrape{j}.prom"
            p.write_text("\n".join(lines))
            paths.append(str(p))
        said = crash(["diagnose", *paths])
        if said:
            out.append(f"diagnose {[Path(p).name for p in paths]}: {said}")
    return out


def traces(rng: random.Random, tmp: Path, rounds: int) -> list[str]:
    out = []
    for _ in range(rounds):
        rows = [{"prompt_tokens": rng.randint(10, 4000), "output_tokens": rng.randint(1, 800),
                 "timestamp": i * rng.random()} for i in range(rng.randint(1, 30))]
        row = rng.choice(rows)
        key = rng.choice(sorted(row))
        row[key] = copy.deepcopy(rng.choice(VALUES))
        f = tmp / "trace.jsonl"
        f.write_text("\n".join(json.dumps(r) for r in rows))
        cmd = rng.choice(["recommend", "simulate", "throughput"])
        said = crash([cmd, "llama-3.1-8b", "--gpu", "h100", "--trace", str(f)])
        if said:
            out.append(f"{cmd} trace {key}={row[key]!r}: {said}")
    return out


def commands(rng: random.Random, tmp: Path, rounds: int) -> list[str]:
    flags = ["-tp", "--max-model-len", "--kv-cache-dtype", "--gpu-memory-utilization",
             "--max-num-seqs", "--max-num-batched-tokens", "--block-size", "--enforce-eager",
             "-cc", "-O", "--limit-mm-per-prompt", "--media-io-kwargs",
             "--mm-ipc-gpu-memory-gb", "--api-server-count", "--cpu-offload-gb", "-dp", "-pp",
             "--quantization", "--kv-cache-memory-bytes", "--cudagraph-capture-sizes",
             "--model", "--decode-context-parallel-size", "--hf-overrides", "--rope-scaling",
             "--mamba-ssm-cache-dtype", "--mamba-cache-dtype", "-dpl", "--enable-lora",
             "--all2all-backend", "--enable-expert-parallel", "--max-loras", "--max-lora-rank",
             "--fully-sharded-loras", "--speculative-config", "--lora-target-modules",
             "--kv-cache-dtype-skip-layers", "--async-scheduling", "--no-async-scheduling",
             "--return-sampling-mask", "--logprobs-mode", "--specialize-active-lora",
             "--enable-prompt-embeds", "--dcp-q-replicate", "--max-num-active-seqs",
             "--spec-method", "--spec-model", "--spec-tokens", "--attention-config",
             "--kernel-config", "--enable-dbo", "--ubatch-size", "--kv-offloading-size",
             "--enable-batch-sharded-sampling", "--dbo-decode-token-threshold",
             "--allow-deprecated-quantization", "--runner", "--nnodes",
             "--mm-processor-kwargs"]
    values = ["1", "0", "-1", "8", "3", "auto", "1e9", "nan", "inf", "32k", "{", "{}",
              '{"cudagraph_mode": 5}', '{"max_cudagraph_capture_size": "x"}', '{"video": []}',
              "[1]", "fp8", "bogus", "", "1.5", '{"num_hidden_layers": "x"}',
              '{"rope_scaling": {"rope_type": "yarn", "factor": 1e308}}',
              '{"max_position_embeddings": -1}', '{"text_config": 5}', "float32",
              '{"rope_scaling": 5}', "deepep_low_latency", "deepep_high_throughput", "nixl_ep",
              "9" * 20, "'", "--", '{"method": "mtp", "num_speculative_tokens": 2}',
              '{"method": "eagle3", "model": "qwen3-0.6b", "num_speculative_tokens": 1e9}',
              '{"method": "ngram", "num_speculative_tokens": 4}', '{"method": "mtp"}',
              '{"model": "nope/nope", "num_speculative_tokens": 2}', "64", "512",
              "q_proj v_proj", "experts", "lm_head,embed_tokens",
              '{"method": "dspark", "num_speculative_tokens": 7}',
              '{"method": "dspark", "model": "deepseek-ai/dspark_qwen3_8b_block7"}',
              "nvfp4", "turboquant_4bit_nc", "int4_per_token_head", "octave_k3v4",
              "ultraquant_4bit", "nvfp4_ds_mla", "0 1 sliding_window", "31,x",
              "processed_logits", '{"backend": "FLASHINFER"}', '{"backend": 5}',
              '{"moe_backend": "triton", "x": 1}', "ngram", "suffix", "pooling",
              '{"max_pixels": 1003520}', '{"max_pixels": "x"}', '{"images_kwargs": 5}',
              '{"size": {"longest_edge": 0}}', '{"videos_kwargs": {"max_pixels": 1e30}}']
    model_ids = ["meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-VL-7B-Instruct",
                 "Qwen/Qwen3-VL-8B-Instruct", "mistralai/Mistral-Small-3.1-24B-Instruct-2503",
                 "nvidia/Qwen3.6-27B-NVFP4", "Qwen/Qwen3-30B-A3B",
                 "deepseek-ai/DeepSeek-R1", "ibm-granite/granite-4.0-h-small", "nope/nope",
                 "deepseek-ai/DeepSeek-V4-Flash", "ai21labs/AI21-Jamba-1.5-Mini"]
    out = []
    for _ in range(rounds):
        toks = ["vllm", "serve", rng.choice(model_ids)]
        for _ in range(rng.randint(0, 6)):
            toks += [rng.choice(flags), rng.choice(values)]
        cmd = " ".join(shlex.quote(t) for t in toks)
        said = crash(["check", "--cmd", cmd, "--gpu", rng.choice(["h100", "l4", "mi300x", "b200"]),
                         "--vllm-version", rng.choice(["0.33", "0.28", "0.20", "0.11",
                                                       "0.9.2", "0.26"]),
                      *rng.choice([[], ["--workload", "chat", "--rate", "5"]])])
        if said:
            out.append(f"check {cmd}: {said}")
        env = rng.choice(["VLLM_USE_V1=0", "VLLM_USE_V1=1", "VLLM_USE_V1=x", "VLLM_USE_V1=",
                          "VLLM_DEEPEP_BUFFER_SIZE_MB=0", "VLLM_DEEPEP_BUFFER_SIZE_MB=x",
                          "VLLM_ALL2ALL_BACKEND=deepep_low_latency"])
        argv = ["size", toks[2], "--gpu", rng.choice(["v100-32gb", "l40s", "h100", "b200"]),
                "--env", env, "--vllm-version", rng.choice(["0.7.3", "0.8.5", "0.10.1", "0.33"]),
                *toks[3:5]]
        said = crash(argv)
        if said:
            out.append(f"{' '.join(argv)}: {said}")
    return out


def gpu_names(rng: random.Random, tmp: Path, rounds: int) -> list[str]:
    """--gpu as nvidia-smi, rocm-smi or a node label might spell it (MIG slices included),
    cut or padded at random, with a --gpu-memory of any shape."""
    gpus = yaml.safe_load((ROOT / "gpus.yaml").read_text())["gpus"]
    names = [n for e in gpus.values() for n in [e["name"], *e.get("aliases", [])]]
    slices = ["-MIG-3g.20gb", " MIG 1g.10gb+me", "_MIG_7g.80gb", "-MIG-0g.0gb", "-MIG-99g.1gb",
              " MIG 2g.48gb-me", "-MIG-", ""]
    memory = [None, "19.5GiB", "0", "-1", "nan", "1e400", "1e30TiB", "lots", "1", "16TiB"]
    out = []
    for _ in range(rounds):
        name = rng.choice(names).replace(" ", rng.choice([" ", "-", "_"])) + rng.choice(slices)
        if rng.random() < 0.2:
            name = name[:rng.randrange(len(name) + 1)]
        mem = rng.choice(memory)
        more = ["--gpu-memory", mem] if mem is not None else []
        for argv in (["size", "qwen3-4b", "--gpu", name, *more],
                     ["check", "--cmd", "vllm serve Qwen/Qwen3-4B", "--gpu", name, *more]):
            said = crash(argv)
            if said:
                out.append(f"{' '.join(argv)}: {said}")
    return out


def manifests(rng: random.Random, tmp: Path, rounds: int) -> list[str]:
    fixtures = sorted((ROOT / "tests" / "fixtures" / "check").glob("*.yaml"))
    out = []
    for _ in range(rounds):
        src = rng.choice(fixtures)
        try:
            docs = list(yaml.safe_load_all(src.read_text()))
        except yaml.YAMLError:
            continue  # the malformed-YAML fixture
        docs = [d for d in docs if isinstance(d, (dict, list))]
        if not docs:
            continue
        doc = rng.choice(docs)
        spots, stack = [], [(doc, ())]
        while stack:
            o, path = stack.pop()
            items = o.items() if isinstance(o, dict) else enumerate(o) \
                if isinstance(o, list) else ()
            for k, v in items:
                spots.append((o, k, path + (k,)))
                stack.append((v, path + (k,)))
        if not spots:
            continue
        parent, key, path = rng.choice(spots)
        parent[key] = copy.deepcopy(rng.choice(VALUES))
        f = tmp / src.name
        f.write_text(yaml.safe_dump_all(docs))
        said = crash(["check", str(f)])
        if said:
            out.append(f"check {src.name} {'.'.join(map(str, path))}={parent[key]!r}: "
                       f"{said}")
    return out


def scripts(rng: random.Random, tmp: Path, rounds: int) -> list[str]:
    """Shell scripts and Dockerfiles (tests/fixtures/check) with characters inserted or cut:
    quotes, expansions, separators, instruction words."""
    fixtures = sorted((ROOT / "tests" / "fixtures" / "check").glob("Dockerfile*")) + sorted(
        (ROOT / "tests" / "fixtures" / "check").glob("*.sh"))
    junk = ['"', "'", "\\", "$(", "${", "}", "`", "&&", "|", ";", "\n", "#", "=", "$X",
            "${VAR:-8}", "ENV", "CMD", "[", "]", '"]', "exec", "vllm", "serve", "-tp", "nan"]
    out = []
    for _ in range(rounds):
        src = rng.choice(fixtures)
        text = src.read_text()
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(text) + 1)
            if rng.random() < .6:
                text = text[:i] + rng.choice(junk) + text[i:]
            else:
                text = text[:i] + text[i + rng.randint(1, 12):]
        f = tmp / src.name
        f.write_text(text)
        said = crash(["check", str(f), "--gpu", "h100"])
        if said:
            out.append(f"check {src.name} (mutated): {said}")
    return out


def hub_files(rng: random.Random, tmp: Path, rounds: int) -> list[str]:
    """A model's files served by the test suite's local Hub (tests/hubserver.py): the shard
    index, hf_quant_config.json and a safetensors header corrupted."""
    import os
    import struct

    sys.path.insert(0, str(ROOT / "tests"))
    from hubserver import FakeHub, Repo, safetensors_bytes, tensor_total

    hub = FakeHub().start()
    os.environ.update(HF_ENDPOINT=hub.url, HF_HOME=str(tmp / "hf"),
                      HF_HUB_CACHE=str(tmp / "hf" / "hub"), KVPLAN_CACHE=str(tmp / "kv"))
    import huggingface_hub.constants as c

    c.HF_HUB_CACHE, c.HF_HUB_OFFLINE = str(tmp / "hf" / "hub"), False
    models = yaml.safe_load((ROOT / "models.yaml").read_text())["models"]
    cfg = json.dumps(models["meta-llama/Llama-3.1-8B-Instruct"]["config"]).encode()
    shards = [{"model.embed_tokens.weight": ("BF16", [64, 32])},
              {"lm_head.weight": ("BF16", [64, 32]), "model.norm.weight": ("F32", [32])}]
    out = []
    for n in range(rounds):
        files = {"config.json": cfg}
        kind = rng.choice(["index", "quant", "header"])
        if kind == "index":
            names = [f"model-0000{i + 1}-of-00002.safetensors" for i in range(2)]
            index: dict = {"metadata": {"total_size": sum(map(tensor_total, shards))},
                           "weight_map": {k: f for f, sh in zip(names, shards) for k in sh}}
            spot = rng.choice(["metadata", "weight_map", "total_size"])
            value = copy.deepcopy(rng.choice(VALUES))
            (index["metadata"] if spot == "total_size" else index)[spot] = value
            files["model.safetensors.index.json"] = json.dumps(index).encode()
            files.update({f: safetensors_bytes(sh) for f, sh in zip(names, shards)})
            what = f"index {spot}={value!r}"
        elif kind == "quant":
            value = rng.choice([*VALUES, {"quantization": 5}, {"quantization": {"quant_algo": 5}},
                                {"quantization": {"exclude_modules": "lm_head"}}])
            files["hf_quant_config.json"] = json.dumps(value).encode()
            files["model.safetensors"] = safetensors_bytes(shards[0])
            what = f"hf_quant_config {value!r}"
        else:
            field = rng.choice(["dtype", "shape", "data_offsets"])
            value = rng.choice([*VALUES, "F99", [-1, 5], [2**62, 2**62]])
            head = {"w": {"dtype": "BF16", "shape": [128, 64], "data_offsets": [0, 16384]},
                    "__metadata__": {"format": "pt"}}
            head["w"][field] = value
            raw = json.dumps(head).encode()
            raw += b" " * (-len(raw) % 8)
            files["model.safetensors"] = struct.pack("<Q", len(raw)) + raw + b"\0" * 16384
            what = f"safetensors header {field}={value!r}"
        hub.repos[f"fuzz/m{n}"] = Repo(files=files)
        said = crash(["size", f"fuzz/m{n}", "--gpu", "h100"])
        if said:
            out.append(f"hub {what}: {said}")
    hub.stop()
    return out


def main_() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=200, help="inputs per kind")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mutations", type=int, default=1, help="values corrupted per config")
    a = ap.parse_args()
    global MUTATIONS
    MUTATIONS = a.mutations
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    total = 0
    with tempfile.TemporaryDirectory() as d:
        for name, fn in (("config fields", configs), ("catalog entries", catalogs),
                         ("/metrics scrapes", scrapes), ("traces", traces),
                         ("check command lines", commands), ("GPU names", gpu_names),
                         ("check manifests", manifests),
                         ("check scripts and Dockerfiles", scripts),
                         ("Hub files", hub_files)):
            found = fn(random.Random(a.seed), Path(d), a.rounds)
            total += len(found)
            print(f"{name}: {a.rounds} inputs, {len(found)} internal errors")
            for f in found[:10]:
                print("  " + f[:300])
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main_())
