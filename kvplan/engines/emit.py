"""Engine command lines from a plan: `vllm serve`, SGLang and TGI equivalents.

Only flags that differ from the engine's defaults are emitted, spelled as the target vLLM
version spells them (`kvplan/engines/vllm_flags.json`).
"""

from __future__ import annotations

import json
import shlex

from kvplan.core.plan import Plan
from kvplan.errors import BadInput
from kvplan.units import GiB


def vllm_flags(p: Plan) -> list[str]:
    r = p.result
    a = r.args
    f: list[str] = []
    if a.tensor_parallel_size > 1:
        f += ["--tensor-parallel-size", str(a.tensor_parallel_size)]
    if a.pipeline_parallel_size > 1:
        f += ["--pipeline-parallel-size", str(a.pipeline_parallel_size)]
    if a.data_parallel_size > 1:
        f += ["--data-parallel-size", str(a.data_parallel_size)]
    if a.enable_expert_parallel:
        f += ["--enable-expert-parallel"]
    f += ["--max-model-len", str(p.max_model_len), "--max-num-seqs", str(p.max_num_seqs)]
    if a.max_num_batched_tokens:
        f += ["--max-num-batched-tokens", str(a.max_num_batched_tokens)]
    if a.gpu_memory_utilization is not None:
        f += ["--gpu-memory-utilization", f"{a.gpu_memory_utilization:g}"]
    if a.kv_cache_dtype != "auto":
        f += ["--kv-cache-dtype", a.kv_cache_dtype]
    if a.kv_cache_dtype_skip_layers:
        f += ["--kv-cache-dtype-skip-layers", *a.kv_cache_dtype_skip_layers]
    if a.quantization:
        f += ["--quantization", a.quantization]
    if a.dtype != "auto":
        f += ["--dtype", a.dtype]
    if a.enable_prefix_caching:  # set by the plan only where the release's default is off
        f += ["--enable-prefix-caching"]
    if a.enforce_eager:
        f += ["--enforce-eager"]
    if a.block_size:
        f += ["--block-size", str(a.block_size)]
    if a.enable_lora:
        f += ["--enable-lora"]
        if a.max_loras != 1:
            f += ["--max-loras", str(a.max_loras)]
        if a.max_lora_rank != 16:
            f += ["--max-lora-rank", str(a.max_lora_rank)]
        if a.fully_sharded_loras:
            f += ["--fully-sharded-loras"]
    if a.speculative:
        s = a.speculative
        cfg = {"method": s.method, "num_speculative_tokens": s.num_speculative_tokens}
        if s.draft is not None:
            cfg["model"] = s.draft.id
        f += ["--speculative-config", json.dumps(cfg, separators=(",", ":"))]
    return f


def sglang_flags(p: Plan) -> list[str]:
    """SGLang: mem-fraction-static sized so weights + the same KV pool fit
    (`_profile_available_bytes`: KV = free_after_load - free_before_load x (1 - mfs))."""
    r = p.result
    total = r.budget.total
    mfs = min(0.95, (r.budget.weights + max(r.budget.kv_pool, 0)) / total)
    f = ["--tp-size", str(r.args.tensor_parallel_size),
         "--mem-fraction-static", f"{mfs:.3f}",
         "--max-running-requests", str(p.max_num_seqs),
         "--context-length", str(p.max_model_len),
         "--chunked-prefill-size", str(r.max_num_batched_tokens)]
    if r.kv_dtype.startswith("fp8"):
        f += ["--kv-cache-dtype", "fp8_e4m3"]
    return f


def tgi_flags(p: Plan) -> list[str]:
    r = p.result
    kv_tokens = r.usable_blocks * r.block_size
    f = ["--num-shard", str(r.args.tensor_parallel_size),
         "--max-concurrent-requests", str(p.max_num_seqs + p.queue_depth_limit),
         "--max-total-tokens", str(p.max_model_len),
         "--max-input-tokens", str(p.max_model_len - 1),
         "--max-batch-total-tokens", str(kv_tokens),
         "--max-batch-prefill-tokens", str(r.max_num_batched_tokens)]
    if r.kv_dtype.startswith("fp8"):
        f += ["--kv-cache-dtype", "fp8_e4m3"]
    return f


def flags_for(p: Plan, engine: str) -> list[str]:
    from kvplan.core.kvquant import is_quantized

    if engine != "vllm" and is_quantized(p.result.kv_dtype):
        raise BadInput(f"{engine} has no {p.result.kv_dtype} KV cache (a vLLM format), so this "
                       "plan's pool does not carry over", hint="plan with --kv-cache-dtype "
                       "auto or fp8 for that engine")
    return {"vllm": vllm_flags, "sglang": sglang_flags, "tgi": tgi_flags}[engine](p)


def command_for(p: Plan, engine: str, model_id: str) -> str:
    flags = flags_for(p, engine)
    if engine == "vllm":
        from kvplan.engines.vllm_env import env_for

        head = [*env_for(p.result.args), "vllm", "serve", model_id]
    elif engine == "sglang":
        head = ["python", "-m", "sglang.launch_server", "--model-path", model_id]
    else:
        head = ["text-generation-launcher", "--model-id", model_id]
    return shlex.join(head + flags)


def kv_gib(p: Plan) -> float:
    return p.result.budget.kv_pool / GiB
