"""Turn a vLLM start-up sweep database into accuracy cases (benchmarks/cases_sweep.yaml).

The source is `test_data/validation_db.json` of github.com/ashishkamra/vllm-memory-estimator
at commit 8b0e21d1ec49357383758a164129515209b37e7f (removed from that repository later): 281
records of Red Hat AI Inference Server and upstream vLLM starts (0.11.0-0.20.2, H200, B200,
MI300X), each with the run's command-line flags and the figures the author's script parsed
from the raw start-up log ("Model loading took", "Available KV cache memory", "GPU KV cache
size", "Maximum concurrency", "Graph capturing finished ... took"). Every run used
--no-enable-prefix-caching and --gpu-memory-utilization as recorded in its flags.

Run:  python benchmarks/import_sweep.py PATH/TO/validation_db.json > benchmarks/cases_sweep.yaml

Records already transcribed by hand as cases in cases.yaml (HAND) and exact duplicates
(same inputs and same printed figures) are left out. Checkpoints the offline
catalog lacks are sized as one of the same shape (`model_assumed`, listed in ASSUMED).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import yaml

SOURCE = ("https://github.com/ashishkamra/vllm-memory-estimator/blob/"
          "8b0e21d1ec49357383758a164129515209b37e7f/test_data/validation_db.json")

# llm-compressor FP8_DYNAMIC recipes from Red Hat's model cards (`ignore` verbatim); the
# case carries them as `quantization_config_assumed` on the assumed BF16 config
_FP8_DYNAMIC = {"quant_method": "compressed-tensors", "format": "float-quantized",
                "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
                    "num_bits": 8, "type": "float", "strategy": "channel", "dynamic": False,
                    "symmetric": True}, "input_activations": {
                    "num_bits": 8, "type": "float", "strategy": "token", "dynamic": True,
                    "symmetric": True}}}}
_QWEN35_MOE_IGNORE = ["re:.*lm_head", "re:visual.*", "re:model.visual.*", "re:.*mlp.gate$",
                      "re:.*embed_tokens$", "re:.*shared_expert_gate$",
                      "re:.*mlp\\.shared_expert$", "re:.*linear_attn.*"]
RECIPES = {
    "RedHatAI/Qwen3.5-122B-A10B-FP8-dynamic": _QWEN35_MOE_IGNORE,
    "RedHatAI/Qwen3.5-397B-A17B-FP8-dynamic": _QWEN35_MOE_IGNORE,
    "RedHatAI/Qwen3-Coder-Next-FP8-dynamic": ["re:.*lm_head", "re:.*mlp.gate$",
                                              "re:.*mlp.shared_expert_gate$",
                                              "re:.*linear_attn.*"],
    "RedHatAI/Qwen3-235B-A22B-FP8-dynamic": ["lm_head"],
}
# FP8_DYNAMIC checkpoints whose card gives no recipe but whose siblings' cards do: the
# sibling's ignore list (same publisher, same family, same release)
SIBLING_RECIPE = {"RedHatAI/Qwen3.5-35B-A3B-FP8-dynamic": (
    _QWEN35_MOE_IGNORE, "RedHatAI/Qwen3.5-122B-A10B-FP8-dynamic")}
# checkpoint -> (catalog entry of the same shape, online quantization to apply, why)
ASSUMED = {
    "deepseek-ai/DeepSeek-R1-0528": ("deepseek-ai/DeepSeek-R1", None, "same architecture"),
    "Qwen/Qwen3-235B-A22B-Instruct-2507": ("Qwen/Qwen3-235B-A22B", None, "same shapes"),
    "RedHatAI/Qwen3-235B-A22B-FP8-dynamic": (
        "Qwen/Qwen3-235B-A22B", "fp8", "FP8-dynamic checkpoint sized as online FP8"),
    "RedHatAI/Llama-4-Maverick-17B-128E-Instruct-FP8": (
        "meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8", None,
        "Meta's FP8 release re-hosted (its model card's examples load meta-llama's repo)"),
    "nvidia/Llama-3.3-70B-Instruct-FP8": (
        "RedHatAI/Llama-3.3-70B-Instruct-fp8-dynamic", None, "same FP8 weight layout"),
    "RedHatAI/Qwen3.5-35B-A3B-FP8-dynamic": (
        "Qwen/Qwen3.5-35B-A3B", "fp8",
        "FP8-dynamic checkpoint sized as online FP8 (its ignore list is not in the catalog)"),
    "RedHatAI/Qwen3.5-122B-A10B-FP8-dynamic": (
        "Qwen/Qwen3.5-122B-A10B", "fp8",
        "FP8-dynamic checkpoint sized as online FP8 (its ignore list is not in the catalog)"),
    "RedHatAI/Qwen3.5-397B-A17B-FP8-dynamic": (
        "Qwen/Qwen3.5-397B-A17B", "fp8",
        "FP8-dynamic checkpoint sized as online FP8 (its ignore list is not in the catalog)"),
    "RedHatAI/Qwen3-Coder-Next-FP8-dynamic": (
        "Qwen/Qwen3-Next-80B-A3B-Thinking", "fp8",
        "Qwen3-Next shapes; FP8-dynamic checkpoint sized as online FP8"),
    "RedHatAI/Ministral-3-14B-Instruct-2512": (
        "mistralai/Ministral-3-14B-Instruct-2512", None,
        "Red Hat's copy of Mistral's FP8 checkpoint (the log says quantization=fp8)"),
    "Qwen/Qwen3-VL-235B-A22B-Instruct-FP8": (
        "Qwen/Qwen3-VL-235B-A22B-Instruct", "fp8", "FP8 checkpoint sized as online FP8"),
}
# records cases.yaml holds as cases of their own (first 8 hex digits of the uuid)
HAND = {"60aeae69", "88e492a0", "0c94c96b", "564dc727", "ae4a7e0e", "5ac9216d", "da58c90d",
        "66ba6f71", "6292e504", "fdb13548", "92c29aef", "687e659a"}
GPUS = {"H200": "NVIDIA H200 (sweep accelerator 'H200')",
        "B200": "NVIDIA B200 (sweep accelerator 'B200')",
        "MI300X": "AMD Instinct MI300X (sweep accelerator 'MI300X')"}
FLAGS_KEPT = ("enable-expert-parallel", "language-model-only", "mm-encoder-tp-mode",
              "async-scheduling", "compilation-config")


def runtime_args(text: str) -> dict[str, str]:
    out = {}
    for part in (text or "").split(";"):
        k, _, v = part.strip().partition(":")
        if k.strip():
            out[k.strip()] = v.strip()
    return out


def to_case(uuid: str, rec: dict) -> dict:
    meta, cfg, mem = rec["csv_metadata"], rec["log_config"], rec["log_memory"]
    ra = runtime_args(meta.get("runtime_args"))
    model = cfg["model"]
    version = cfg["vllm_version"].lstrip("v")
    tp = int(ra.get("tensor-parallel-size") or cfg.get("tensor_parallel_size") or 1)
    short = re.sub(r"[^a-z0-9.]+", "-", model.split("/")[-1].lower()).strip("-")
    case = {
        "id": f"sweep-{short}-{meta['accelerator'].lower()}-tp{tp}-{uuid[:8]}",
        "source": SOURCE,
        "source_resolved": True,
        "evidence": "author_table",
        "engine": "vllm",
        "vllm_version": version,
        "model": model,
        "quantization": cfg.get("quantization"),
        "dtype": cfg.get("dtype"),
        "kv_cache_dtype": ra.get("kv-cache-dtype") or "auto",
        "gpu": GPUS[meta["accelerator"]],
        "num_gpus": tp,
        "tensor_parallel_size": tp,
        "pipeline_parallel_size": int(cfg.get("pipeline_parallel_size") or 1),
        "gpu_memory_utilization": float(ra["gpu-memory-utilization"]),
        "max_model_len": int(ra.get("max-model-len") or cfg["max_seq_len"]),
        "enforce_eager": bool(cfg.get("enforce_eager")),
        "enable_prefix_caching": False,
    }
    for flag, key in (("max-num-seqs", "max_num_seqs"),
                      ("max-num-batched-tokens", "max_num_batched_tokens"),
                      ("block-size", "block_size")):
        if flag in ra:
            case[key] = int(ra[flag])
    other = [f"--{k} {v}" if v != "True" else f"--{k}" for k, v in ra.items()
             if k in FLAGS_KEPT]
    if other:
        case["other_flags"] = " ".join(other)
    case["observed"] = {
        "kv_cache_tokens": mem["kv_cache_tokens"],
        "max_concurrency": {"tokens_per_request": mem["max_concurrency_tokens"],
                            "value": mem["max_concurrency_ratio"]},
        "available_kv_cache_gib": mem["available_kv_cache_gib"],
        "model_loading_gib": mem["model_load_gib"],
        "cudagraph_memory_gib": mem["cudagraph_gib"],
    }
    if version == "0.11.0":
        # the upstream v0.11.0 image ships flashinfer, and V1 then samples through it unless
        # VLLM_USE_FLASHINFER_SAMPLER=0 (`TopKTopPSampler`); 0.11.1 made it opt-in
        case["sampler"] = "flashinfer"
        case["inferred"] = ["sampler: flashinfer (upstream 0.11.0 image default)"]
    if model in ASSUMED:
        assumed, quant, why = ASSUMED[model]
        case["model_assumed"] = assumed
        if model in RECIPES:
            case["quantization_config_assumed"] = {**_FP8_DYNAMIC, "ignore": RECIPES[model]}
            why = "FP8_DYNAMIC with the ignore list of the model card's recipe"
        elif model in SIBLING_RECIPE:
            ignore, sibling = SIBLING_RECIPE[model]
            case["quantization_config_assumed"] = {**_FP8_DYNAMIC, "ignore": ignore}
            why = (f"FP8_DYNAMIC with the ignore list of {sibling}'s recipe (this card gives "
                   "none)")
        elif quant:
            case["quantization_assumed"] = quant
        case.setdefault("inferred", []).append(f"model_assumed: {why}")
    case["caveats"] = (f"Record {uuid}. runtime_args: {meta.get('runtime_args')}. Figures "
                       "parsed by the author's script from the raw log.")
    return case


def main() -> int:
    db = json.loads(Path(sys.argv[1]).read_text())
    seen, cases = set(), []
    for uuid, rec in db["records"].items():
        if uuid[:8] in HAND:
            continue
        case = to_case(uuid, rec)
        key = json.dumps({k: v for k, v in case.items() if k not in ("id", "caveats")},
                         sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        cases.append(case)
    cases.sort(key=lambda c: (c["gpu"], c["model"], c["tensor_parallel_size"],
                              [int(x) for x in re.findall(r"\d+", c["vllm_version"])[:3]]))
    print(__doc__.replace("\n", "\n# ").join(["# Generated by benchmarks/import_sweep.py.\n# ",
                                               "\n"]))
    print(yaml.safe_dump(cases, sort_keys=False, width=100, allow_unicode=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
