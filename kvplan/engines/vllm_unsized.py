"""vLLM `serve` flags that change GPU memory but that kvplan does not size, and flag
combinations vLLM refuses at start-up that `kvplan check` reports.

Classified by reading the 0.33.0 wheel (`engine/arg_utils.py`, `config/*.py` and where each
field is used); docs/check.md lists them. The other flags of vLLM's parser either map onto
kvplan's sizing inputs (`check/mapping.py` `VLLM_FIELDS`) or leave one engine start's GPU
memory unchanged (front end, logging, tokenizer, scheduling policy, host-memory caches).
"""

from __future__ import annotations

from collections.abc import Callable

# --mm-processor-kwargs keys that are sized, or that vLLM's profile does not read
SIZED_MM_KEYS = ("max_pixels", "min_pixels", "size", "images_kwargs", "videos_kwargs", "fps",
                 "num_frames", "do_sample_frames")


def _other_keys(value: str, *known: str) -> bool:
    """A JSON config flag with keys beyond those kvplan reads (unparsable: flag-values)."""
    import json

    try:
        cfg = json.loads(value)
    except ValueError:
        return False
    return isinstance(cfg, dict) and bool(set(cfg) - set(known))


# canonical flag -> (what kvplan sizes without, when the value makes it matter: None = any
# value but false). Phrases complete "sized without ...".
UNSIZED: dict[str, tuple[str, Callable[[str], bool] | None]] = {
    # allocators and offloading
    "--enable-sleep-mode": ("sleep mode's CuMemAllocator pool (--enable-sleep-mode)", None),
    "--enable-cumem-allocator": ("the CuMemAllocator pool (--enable-cumem-allocator)", None),
    "--cpu-offload-params": ("--cpu-offload-params, which offloads only matching parameters "
                             "(up to --cpu-offload-gb more may stay on the GPU)", None),
    "--offload-group-size": ("prefetch weight offloading (--offload-group-size: layers in "
                             "host memory, their GPU prefetch buffers)", lambda v: v != "0"),
    "--offload-backend": ("prefetch weight offloading (--offload-backend prefetch; vLLM then "
                          "ignores --cpu-offload-gb)", lambda v: v == "prefetch"),
    "--quantization-config": ("online quantization from --quantization-config (weight "
                              "bytes; kvplan reads --quantization)", None),
    "--load-format": ("--load-format's loader (tied embeddings kept tied, or weights mapped "
                      "from another process)",
                      lambda v: v in ("dummy", "sharded_state", "runai_streamer_sharded",
                                      "ipc_cache")),
    "--hf-config-path": ("the config at --hf-config-path (kvplan sizes the model's own)",
                         None),
    "--engram-config": ("--engram-config's Engram tables", None),
    # runners and samplers
    "--mm-encoder-only": ("--mm-encoder-only (an encoder-only instance: no language-model "
                          "KV cache)", None),
    "--watermark-config": ("the watermarking sampler (--watermark-config)", None),
    "--model-impl": ("--model-impl's model implementation",
                     lambda v: v not in ("auto", "vllm")),
    "--worker-cls": ("a custom worker class (--worker-cls)", lambda v: v != "auto"),
    "--distributed-executor-backend": ("the external launcher's model runner V1 with PP",
                                       lambda v: v == "external_launcher"),
    # buffers and layouts
    "--enable-mm-embeds": ("--enable-mm-embeds's embedding input path", None),
    "--enable-return-routed-experts": ("the routed-experts capture buffer", None),
    "--aux-output-config": ("the auxiliary-output capture buffer (--aux-output-config)", None),
    "--mm-processor-kwargs": ("--mm-processor-kwargs keys other than max_pixels / "
                              "size.longest_edge (Gemma 3's pan-and-scan crops, ...)",
                              lambda v: _other_keys(v, *SIZED_MM_KEYS)),
    "--use-replayssm": ("ReplaySSM's ring buffers in each Mamba2 state", None),
    "--attention-config": ("--attention-config keys other than backend (indexer cache "
                           "dtype, sparse-MLA workspace)", lambda v: _other_keys(v, "backend")),
    "--kernel-config": ("--kernel-config keys other than moe_backend (linear kernels)",
                        lambda v: _other_keys(v, "moe_backend")),
    "--enable-tower-connector-lora": ("LoRA slots on the vision tower and connector", None),
    "--enable-moe-shared-loras": ("shared MoE LoRA slots (smaller than kvplan's)", None),
    "--enable-mixed-moe-lora-format": ("the 2D MoE LoRA wrapper's slots", None),
    "--max-lora-cls-labels": ("LoRA classifier heads", None),
    "--enable-elastic-ep": ("elastic EP's all-to-all buffers sized for its largest DP", None),
    "--ec-transfer-config": ("the encoder-cache transfer connector", None),
    "--kv-offloading-size": ("the KV offloading connector's buffers (--kv-offloading-size, "
                             "a KV connector as --kv-transfer-config sets)", None),
}


def pool_neutral(release: tuple[int, int]) -> bool:
    """Releases whose CuMemAllocator pool leaves the KV budget as without it (a helper's
    reading of `device_allocator/cumem.py` and the workers): 0.14-0.16 (a `with A and B`
    slip kept the weights out of the pool, fixed by vLLM PR 32947) and 0.27+ (only small
    stranded free fragments, tens of MiB). 0.8-0.13 and 0.17-0.26 count the pool's loading
    or released segments differently (vLLM issues 37096, 40256: a larger budget, then OOM)."""
    return (0, 14) <= release < (0, 17) or release >= (0, 27)


def unsized(flags: list[tuple[str, str | None, bool]],
            release: tuple[int, int] | None = None) -> list[tuple[str, str]]:
    """(flag, phrase) for each given flag kvplan does not size in `release` (None: any).
    `flags`: (canonical name, value or None for a bare switch, negated)."""
    out: list[tuple[str, str]] = []
    for name, value, negated in flags:
        entry = UNSIZED.get(name)
        if entry is None or negated or any(n == name for n, _ in out):
            continue
        if name in ("--enable-sleep-mode", "--enable-cumem-allocator") and release \
                and pool_neutral(release):
            continue
        phrase, when = entry
        v = (value or "true").strip().lower()
        if v in ("false", "0", "none", "") and when is None:
            continue
        if when is not None and value is not None and not when(v):
            continue
        out.append((name, phrase))
    return out


def refusals(flags: dict[str, str | None], version: tuple[int, ...], vendor: str,
             tensor_parallel_size: int, max_num_seqs: int | None,
             all2all_backend: str | None) -> list[tuple[str, str, str]]:
    """(flag, what vLLM refuses, fix) for flag combinations `VllmConfig.__post_init__`
    rejects at start-up. `flags`: canonical name -> value (None for a bare switch; negated
    switches left out); `max_num_seqs` None: vLLM's default (never below TP)."""
    def on(name: str) -> bool:  # a switch given (bare, or with a value that is not off)
        return name in flags and str(flags[name]).lower() not in ("false", "0")

    out = []
    ubatch = flags.get("--ubatch-size")
    dbo = on("--enable-dbo")
    if dbo or (ubatch not in (None, "0", "1")):
        # `VllmConfig.__post_init__` (`use_ubatching`): DeepEP only; NIXL EP from 0.24;
        # ROCm's naive all-gather/reduce-scatter too in 0.33
        ok = ["deepep_low_latency", "deepep_high_throughput"]
        if version >= (0, 24):
            ok.append("nixl_ep")
        if vendor == "amd" and version >= (0, 33):
            ok.append("allgather_reducescatter")
        if (all2all_backend or "") not in ok:
            flag = "--enable-dbo" if dbo else "--ubatch-size"
            out.append((flag, f"{flag} (microbatching) runs only with the "
                        f"{', '.join(ok)} all-to-all backend"
                        f"{'s' if len(ok) > 1 else ''}, not "
                        f"{all2all_backend or 'the default'}",
                        (f"add --all2all-backend {ok[0]}" if version >= (0, 11, 1) else
                         f"set VLLM_ALL2ALL_BACKEND={ok[0]}")  # the flag is 0.11.1+
                        + f" (and install DeepEP), or remove {flag}"))
    # 0.30+ `ParallelConfig` validator: with microbatching, a threshold below the number of
    # microbatches (2 for DBO, else --ubatch-size)
    batches = 2 if dbo else int(ubatch) if ubatch and ubatch.isdigit() else 0
    for flag in ("--dbo-decode-token-threshold", "--dbo-prefill-token-threshold"):
        v = flags.get(flag)
        if (version >= (0, 30) and batches > 1 and v is not None and v.lstrip("-").isdigit()
                and int(v) < batches):
            out.append((flag, f"{flag} {v} is below the {batches} microbatches "
                        "(`ParallelConfig` validator)", f"{flag} {batches} or more"))
    dpl, dp = flags.get("--data-parallel-size-local"), flags.get("--data-parallel-size") or "1"
    if dpl is not None and dpl.isdigit():
        if version >= (0, 10, 1) and dp.isdigit() and int(dpl) > int(dp):
            # `ParallelConfig.__post_init__` (0.10.1+)
            out.append(("--data-parallel-size-local", f"data_parallel_size_local ({dpl}) "
                        f"must be <= data_parallel_size ({dp})",
                        f"--data-parallel-size-local {dp} or less (the ranks on this node)"))
        if int(dpl) == 0 and on("--headless"):  # `run_headless` (0.9+)
            out.append(("--data-parallel-size-local", "data_parallel_size_local must be > 0 "
                        "in headless mode", "give the engines this node runs, or drop "
                        "--headless on an API-only node"))
    v = flags.get("--max-num-active-seqs")
    if v is not None and v.lstrip("-").isdigit() and int(v) < 1:  # `Field(ge=1)`
        out.append(("--max-num-active-seqs", f"--max-num-active-seqs {v} must be at least 1",
                    "--max-num-active-seqs 1 or more, or remove it"))
    if version >= (0, 29) and on("--enable-batch-sharded-sampling"):
        why = []  # `VllmConfig._validate_batch_sharded_sampling`
        if tensor_parallel_size <= 1:
            why.append("tensor_parallel_size is 1, so there is nothing to shard")
        elif max_num_seqs is not None and max_num_seqs < tensor_parallel_size:
            why.append(f"max_num_seqs ({max_num_seqs}) is below tensor_parallel_size "
                       f"({tensor_parallel_size})")
        if str(flags.get("--max-logprobs", "")).strip() == "-1":
            why.append("max_logprobs is -1")
        if "--return-sampling-mask" in flags and version >= (0, 30):
            why.append("return_sampling_mask is set")
        if why:
            out.append(("--enable-batch-sharded-sampling", "batch-sharded sampling is not "
                        f"supported here: {'; '.join(why)}",
                        "remove --enable-batch-sharded-sampling"))
    return out
