"""`kvplan size`: its options (vLLM's spelling) and what it runs, without typer.

The option table and `run`'s signature are the command's one definition: the typer app
(`kvplan.cli_app`) builds its click command from them, and `kvplan.cli_fast` parses the usual
command lines from them without importing typer or click (about half of a run's wall time).
"""

import sys
from dataclasses import replace
from typing import Optional

from kvplan.engines.vllm_env import ENV_HELP, apply_assignments

MODEL_HELP = "Catalog id/alias, HF repo id, config.json or model directory."

# option name -> (its flags, as vLLM spells them; help). Types and defaults: run()'s signature.
OPTIONS: dict[str, tuple[tuple[str, ...], Optional[str]]] = {
    "gpu": (("--gpu", "-g"),
        "GPU id, alias, nvidia-smi name or GFD label (see `kvplan gpus`)."),
    "gpu_memory": (("--gpu-memory",),
        "Total GPU memory as the CUDA runtime reports it, e.g. 24GiB."),
    "tensor_parallel_size": (("--tensor-parallel-size", "-tp"), None),
    "pipeline_parallel_size": (("--pipeline-parallel-size", "-pp"), None),
    "data_parallel_size": (("--data-parallel-size", "-dp"), None),
    "decode_context_parallel_size": (("--decode-context-parallel-size", "-dcp"),
        "Shard each request's KV cache over this many TP ranks (vLLM 0.10.2+)."),
    "enable_expert_parallel": (("--enable-expert-parallel", "-ep"), None),
    "enable_eplb": (("--enable-eplb",),
        "Expert parallel load balancing (vLLM 0.11+)."),
    "eplb_config": (("--eplb-config",),
        "As vLLM: JSON, e.g. '{\"num_redundant_experts\": 32}' (num_redundant_experts and "
        "window_size change memory)."),
    "max_model_len": (("--max-model-len",),
        "32768, 32K (=32768), 32k (=32000), -1/auto to auto-fit."),
    "kv_cache_dtype": (("--kv-cache-dtype",),
        "auto, bfloat16, float16, fp8 (fp8_e4m3, fp8_e5m2; fp8_inc is Intel Gaudi's, "
        "refused on CUDA/ROCm), and from vLLM 0.20 the quantized formats: "
        "int8/fp8/int4_per_token_head, nvfp4, nvfp4_4over6, nvfp4_ds_mla, "
        "turboquant_k8v4/4bit_nc/k3v4_nc/3bit_nc, ultraquant_4bit, octave_* "
        "(docs/methodology.md §2b)."),
    "kv_cache_dtype_skip_layers": (("--kv-cache-dtype-skip-layers",),
        "Layers kept in the model dtype, as vLLM's flag (0.19+): indices and/or "
        "sliding_window, commas or spaces ('0 1 30 31')."),
    "gpu_memory_utilization": (("--gpu-memory-utilization", "--device-memory-utilization"),
        None),
    "kv_cache_memory_bytes": (("--kv-cache-memory-bytes",),
        "Skip profiling: KV memory per GPU (e.g. 60G = 60 GiB, as vLLM)."),
    "block_size": (("--block-size",), None),
    "max_num_seqs": (("--max-num-seqs",), None),
    "max_num_batched_tokens": (("--max-num-batched-tokens",), None),
    "enforce_eager": (("--enforce-eager",), None),
    "dtype": (("--dtype",), None),
    "quantization": (("--quantization", "-q"),
        "As vLLM: read from the checkpoint when unset; on a 16-bit checkpoint fp8 (and the "
        "other online methods) quantize as it loads."),
    "attention_backend": (("--attention-backend",),
        "Force vLLM's attention backend (0.13+; VLLM_ATTENTION_BACKEND in --env for "
        "0.11-0.14): FLASH_ATTN, FLASHINFER, TRITON_ATTN, FLEX_ATTENTION, TRITON_MLA, "
        "FLASH_ATTN_MLA, FLASHMLA, CUTLASS_MLA, FLASHINFER_MLA, FLASHMLA_SPARSE, "
        "FLASHINFER_MLA_SPARSE, ROCM_ATTN, ROCM_AITER_FA, ROCM_AITER_UNIFIED_ATTN, "
        "ROCM_AITER_MLA."),
    "allow_deprecated_quantization": (("--allow-deprecated-quantization",),
        "vLLM 0.14+ refuses deprecated methods (fbgemm_fp8, ...) without it."),
    "enable_prefix_caching": (("--enable-prefix-caching/--no-enable-prefix-caching",), None),
    "enable_chunked_prefill": (("--enable-chunked-prefill/--no-enable-chunked-prefill",),
        "Off: the profile runs max(max_model_len, the default) tokens at once."),
    "disable_hybrid_kv_cache_manager": (("--disable-hybrid-kv-cache-manager",), None),
    "num_gpu_blocks_override": (("--num-gpu-blocks-override",), None),
    "disable_custom_all_reduce": (("--disable-custom-all-reduce",),
        "Accepted; moves no memory kvplan models (vLLM builds custom all-reduce's buffers "
        "before its memory snapshot)."),
    "flashinfer_sampler": (("--flashinfer-sampler",),
        "vLLM V1 0.8-0.11.0 with flashinfer installed (the vllm/vllm-openai image; log: "
        "'Using FlashInfer for top-p & top-k sampling') profiled the sampler through it: a "
        "smaller activation peak."),
    "async_scheduling": (("--async-scheduling/--no-async-scheduling",),
        "vLLM 0.26+: off, a sliding-window or chunked layer keeps blocks for PP batches in "
        "flight instead of PP + 1 (default: on, as vLLM turns it on)."),
    "specialize_active_lora": (("--specialize-active-lora",),
        "vLLM 0.16+ with --enable-lora: CUDA graphs per power of 2 of active adapters (up "
        "to --max-loras), not only with and without."),
    "dcp_q_replicate": (("--dcp-q-replicate",),
        "vLLM 0.29+ with -dcp on DeepSeek-V2/V3-family MLA: q_b_proj split TP/dcp ways, not"
        " TP (more weights per GPU)."),
    "mm_processor_kwargs": (("--mm-processor-kwargs",),
        "JSON, as vLLM's flag: a Qwen VL max_pixels or size.longest_edge (flat, or in "
        "images_kwargs / videos_kwargs) sets the image and video vLLM 0.17+ profiles the "
        "vision encoder with."),
    "enable_prompt_embeds": (("--enable-prompt-embeds",),
        "Model runner V2 (0.29+) keeps an inputs_embeds buffer [max-num-batched-tokens, "
        "hidden]; 0.24-0.28 run V1 instead."),
    "return_sampling_mask": (("--return-sampling-mask",),
        "vLLM 0.28+: the sampler runs without FlashInfer's fused top-k/top-p (a smaller "
        "profile peak from 0.33)."),
    "logprobs_mode": (("--logprobs-mode",),
        "raw_logprobs (default), raw_logits, processed_logprobs or processed_logits; the "
        "processed modes sample without FlashInfer (0.28+)."),
    "skip_mm_profiling": (("--skip-mm-profiling",),
        "Multimodal models: leave the vision encoder out of the profile run (as vLLM's "
        "flag)."),
    "mamba_cache_dtype": (("--mamba-cache-dtype",),
        "Mamba / linear-attention state dtype (auto, float32, float16, bfloat16)."),
    "mamba_ssm_cache_dtype": (("--mamba-ssm-cache-dtype",),
        "Their SSM state alone (auto: the config's hint, else --mamba-cache-dtype)."),
    "enable_lora": (("--enable-lora",),
        "LoRA adapter slots on every linear layer (their memory is counted in the weights)."),
    "max_loras": (("--max-loras",),
        "Adapter slots on the GPU (vLLM's default 1); registered adapters beyond it wait in"
        " host memory."),
    "max_lora_rank": (("--max-lora-rank",),
        "Rank of each slot."),
    "fully_sharded_loras": (("--fully-sharded-loras",), None),
    "lora_target_modules": (("--lora-target-modules",),
        "Modules given LoRA slots (vLLM 0.19+), e.g. 'q_proj,v_proj' or 'o_proj down_proj';"
        " default every linear layer."),
    "speculative_config": (("--speculative-config", "-sc"),
        "vLLM's JSON: method (mtp, eagle, eagle3, draft_model, dflash, dspark, ngram), "
        "num_speculative_tokens and the draft \"model\" (resolved like MODEL): its layers "
        "join the KV cache, its weights the load."),
    "hf_overrides": (("--hf-overrides",),
        "JSON applied to the model's HF config, as vLLM applies it (e.g. YaRN rope_scaling "
        "for a longer context)."),
    "entrypoint": (("--entrypoint",),
        "serve (vllm serve), llm (the offline LLM class: twice the token budget by default,"
        " one API process) or engine (AsyncLLMEngine from EngineArgs: 2,048 tokens, 128 "
        "sequences)."),
    "performance_mode": (("--performance-mode",),
        "balanced, interactivity or throughput (vLLM 0.17+; throughput doubles the batch "
        "defaults)."),
    "cudagraph_capture_sizes": (("--cudagraph-capture-sizes",),
        "Batch sizes to capture CUDA graphs for, as vLLM's flag (commas or spaces: "
        "1,2,4,8); the graph estimate counts them."),
    "max_cudagraph_capture_size": (("--max-cudagraph-capture-size",),
        "Largest CUDA-graph batch size (vLLM's flag; default min(2 x max_num_seqs, 512))."),
    "mm_encoder_tp_mode": (("--mm-encoder-tp-mode",),
        "weights (split the vision tower over TP) or data (a whole tower on every rank), as"
        " vLLM's flag (0.10+)."),
    "moe_backend": (("--moe-backend",),
        "MoE expert kernel, as vLLM's flag (0.18+): auto, triton, deep_gemm, cutlass, "
        "flashinfer_trtllm, flashinfer_cutlass, marlin, aiter, ..."),
    "runner": (("--runner",),
        "auto, generate or pooling: the pooling runner (embedding, reranking) has no LM "
        "head or sampler"),
    "convert": (("--convert",),
        "embed, classify or reward: run a generative checkpoint as a pooling model"),
    "pooler_config": (("--pooler-config",),
        "the pooler's JSON config, read as the release reads it: pooling_type "
        "(seq_pooling_type / tok_pooling_type from 0.14) decides chunked prefill"),
    "nnodes": (("--nnodes", "-n"),
        "hosts the GPUs are spread over (0.11.1+; it must divide TP x PP x DP): TP past one"
        " host runs without custom all-reduce"),
    "kv_sharing_fast_prefill": (("--kv-sharing-fast-prefill",),
        "Gemma-3n / Gemma 4: the fast-prefill buffers (the profile still runs every token)"),
    "enable_dbo": (("--enable-dbo",),
        "dual-batch overlap (with a DeepEP --all2all-backend): model runner V1, a workspace"
        " slot per microbatch"),
    "ubatch_size": (("--ubatch-size",),
        "microbatches per step, with a DeepEP --all2all-backend"),
    "all2all_backend": (("--all2all-backend",),
        "expert parallelism's token exchange with -dp > 1 (0.11.1+): DeepEP's buffers "
        "(deepep_high_throughput, deepep_low_latency) come out of the KV cache; the default"
        " gathers through NCCL"),
    "cpu_offload_gb": (("--cpu-offload-gb",),
        "GiB of weights per GPU vLLM keeps in host memory (as vLLM's flag)."),
    "language_model_only": (("--language-model-only",),
        "Multimodal models: text only, as vLLM's flag (or --limit-mm-per-prompt 0 for every"
        " modality): the vision tower is neither loaded nor profiled."),
    "compilation_config": (("--compilation-config", "-cc"),
        "vLLM's compilation config (JSON): its cudagraph_mode (NONE, PIECEWISE, FULL, "
        "FULL_DECODE_ONLY, FULL_AND_PIECEWISE), mode (0-3) and capture sizes set the CUDA "
        "graphs vLLM captures and subtracts (0.20+)."),
    "optimization_level": (("--optimization-level", "-O"),
        "vLLM's optimization level 0-3 (0.12+; -O0: no compilation, no CUDA graphs; -O1: "
        "piecewise graphs, no all-reduce fusion; -O2 the default). Before 0.12 -O is the "
        "compilation level."),
    "limit_mm_per_prompt": (("--limit-mm-per-prompt",),
        "Items per prompt by modality, as vLLM's flag ('{\"image\": 0, \"video\": 0}'): a tower"
        " whose modalities are all 0 is not loaded; an unlisted modality allows 999."),
    "mm_ipc_gpu_memory_gb": (("--mm-ipc-gpu-memory-gb",),
        "Multimodal models: GiB of GPU memory for the API server's decoded frames, as "
        "vLLM's flag (0.25+); vLLM takes it out of the KV cache."),
    "api_server_count": (("--api-server-count", "-asc"),
        "API server processes (vllm serve's default: the DP size); each GPU video decoder's"
        " reservation is per process."),
    "media_io_kwargs": (("--media-io-kwargs",),
        "vLLM's media I/O options (JSON); a \"video\" entry with video_backend or backend "
        "\"pynvvideocodec\" (also hw_decoders, max_width, max_height) decodes on the GPU, "
        "reserved out of the KV cache (0.25+)."),
    "vllm_version": (("--vllm-version",),
        "Target vLLM release (default 0.33)."),
    "env": (("--env",), ENV_HELP),
    "catalog": (("--catalog",),
        "Extra catalog YAML file (repeatable); also KVPLAN_CATALOG."),
    "revision": (("--revision",),
        "Hub branch, tag or commit."),
    "token": (("--token",),
        "Hub token (default: HF_TOKEN or the `hf auth login` token). Never printed."),
    "offline": (("--offline",),
        "Never touch the network (also HF_HUB_OFFLINE=1)."),
    "as_json": (("--json",),
        "Print one JSON object."),
}


def run(
    model: str,
    gpu: Optional[str] = None,
    gpu_memory: Optional[str] = None,
    tensor_parallel_size: int = 1,
    pipeline_parallel_size: int = 1,
    data_parallel_size: int = 1,
    decode_context_parallel_size: int = 1,
    enable_expert_parallel: bool = False,
    enable_eplb: bool = False,
    eplb_config: Optional[str] = None,
    max_model_len: Optional[str] = None,
    kv_cache_dtype: str = "auto",
    kv_cache_dtype_skip_layers: Optional[str] = None,
    gpu_memory_utilization: Optional[float] = None,
    kv_cache_memory_bytes: Optional[str] = None,
    block_size: Optional[int] = None,
    max_num_seqs: Optional[int] = None,
    max_num_batched_tokens: Optional[str] = None,
    enforce_eager: bool = False,
    dtype: str = "auto",
    quantization: Optional[str] = None,
    attention_backend: Optional[str] = None,
    allow_deprecated_quantization: bool = False,
    enable_prefix_caching: Optional[bool] = None,
    enable_chunked_prefill: Optional[bool] = None,
    disable_hybrid_kv_cache_manager: bool = False,
    num_gpu_blocks_override: Optional[int] = None,
    disable_custom_all_reduce: bool = False,
    flashinfer_sampler: bool = False,
    async_scheduling: Optional[bool] = None,
    specialize_active_lora: bool = False,
    dcp_q_replicate: bool = False,
    mm_processor_kwargs: Optional[str] = None,
    enable_prompt_embeds: bool = False,
    return_sampling_mask: bool = False,
    logprobs_mode: Optional[str] = None,
    skip_mm_profiling: bool = False,
    mamba_cache_dtype: str = "auto",
    mamba_ssm_cache_dtype: str = "auto",
    enable_lora: bool = False,
    max_loras: int = 1,
    max_lora_rank: int = 16,
    fully_sharded_loras: bool = False,
    lora_target_modules: Optional[str] = None,
    speculative_config: Optional[str] = None,
    hf_overrides: Optional[str] = None,
    entrypoint: str = "serve",
    performance_mode: str = "balanced",
    cudagraph_capture_sizes: Optional[str] = None,
    max_cudagraph_capture_size: Optional[int] = None,
    mm_encoder_tp_mode: str = "weights",
    moe_backend: str = "auto",
    runner: str = "auto",
    convert: str = "auto",
    pooler_config: Optional[str] = None,
    nnodes: int = 1,
    kv_sharing_fast_prefill: bool = False,
    enable_dbo: bool = False,
    ubatch_size: int = 1,
    all2all_backend: Optional[str] = None,
    cpu_offload_gb: float = 0.0,
    language_model_only: bool = False,
    compilation_config: Optional[str] = None,
    optimization_level: Optional[str] = None,
    limit_mm_per_prompt: Optional[str] = None,
    mm_ipc_gpu_memory_gb: float = 0.0,
    api_server_count: Optional[int] = None,
    media_io_kwargs: Optional[str] = None,
    vllm_version: Optional[str] = None,
    env: Optional[list[str]] = None,
    catalog: Optional[list[str]] = None,
    revision: Optional[str] = None,
    token: Optional[str] = None,
    offline: bool = False,
    as_json: bool = False,
) -> int:
    """KV-cache capacity of MODEL on GPU, computed the way vLLM computes it."""
    from kvplan.core.eplb import parse_eplb_config
    from kvplan.core.sizing import EngineArgs, size
    from kvplan.sources.resolve import resolve_gpu, resolve_model
    from kvplan.units import (
        MM_SIZE_KEYS,
        mm_size_options,
        parse_int_list,
        parse_json_object,
        parse_mm_limits,
        parse_mm_sizes,
        parse_names,
        parse_video_io,
        parse_vllm_int,
    )

    mml = None
    if max_model_len is not None:
        mml = -1 if max_model_len.strip().lower() in ("-1", "auto") else parse_vllm_int(
            max_model_len, what="--max-model-len", version=vllm_version)
    kvb = None
    if kv_cache_memory_bytes is not None:
        kvb = parse_vllm_int(kv_cache_memory_bytes, what="--kv-cache-memory-bytes")
    if quantization is not None:
        from kvplan.engines.vllm_registry import check_choice

        check_choice("--quantization", quantization, vllm_version)
    from kvplan.engines.vllm_pooler import ignored_note, read

    pooler = read(pooler_config, vllm_version)
    args = EngineArgs(
        tensor_parallel_size=tensor_parallel_size,
        pipeline_parallel_size=pipeline_parallel_size,
        data_parallel_size=data_parallel_size,
        decode_context_parallel_size=decode_context_parallel_size,
        enable_expert_parallel=enable_expert_parallel, enable_eplb=enable_eplb,
        **(parse_eplb_config(eplb_config) if eplb_config is not None else {}),
        max_model_len=mml, kv_cache_dtype=kv_cache_dtype,
        kv_cache_dtype_skip_layers=parse_names(kv_cache_dtype_skip_layers),
        gpu_memory_utilization=gpu_memory_utilization, kv_cache_memory_bytes=kvb,
        block_size=block_size, max_num_seqs=max_num_seqs,
        max_num_batched_tokens=parse_vllm_int(max_num_batched_tokens,
                                              what="--max-num-batched-tokens",
                                              version=vllm_version)
        if max_num_batched_tokens else None,
        enforce_eager=enforce_eager, dtype=dtype, quantization=quantization,
        allow_deprecated_quantization=allow_deprecated_quantization,
        attention_backend=attention_backend,
        enable_prefix_caching=enable_prefix_caching,
        enable_chunked_prefill=enable_chunked_prefill, usage=entrypoint,
        enable_lora=enable_lora, max_loras=max_loras, max_lora_rank=max_lora_rank,
        fully_sharded_loras=fully_sharded_loras,
        lora_target_modules=parse_names(lora_target_modules)
        if lora_target_modules is not None else None,
        mamba_cache_dtype=mamba_cache_dtype, mamba_ssm_cache_dtype=mamba_ssm_cache_dtype,
        disable_hybrid_kv_cache_manager=disable_hybrid_kv_cache_manager,
        num_gpu_blocks_override=num_gpu_blocks_override,
        disable_custom_all_reduce=disable_custom_all_reduce,
        flashinfer_sampler=flashinfer_sampler or None, skip_mm_profiling=skip_mm_profiling,
        async_scheduling=async_scheduling, return_sampling_mask=return_sampling_mask,
        specialize_active_lora=specialize_active_lora, enable_prompt_embeds=enable_prompt_embeds,
        dcp_q_replicate=dcp_q_replicate,
        mm_processor_kwargs=parse_json_object(mm_processor_kwargs, what="--mm-processor-kwargs",
                                              hint='e.g. \'{"max_pixels": 1003520}\'')
        if mm_processor_kwargs is not None else None,
        logprobs_mode=logprobs_mode,
        language_model_only=language_model_only, cpu_offload_gb=cpu_offload_gb,
        performance_mode=performance_mode,
        cudagraph_capture_sizes=parse_int_list(cudagraph_capture_sizes,
                                               what="--cudagraph-capture-sizes")
        if cudagraph_capture_sizes is not None else None,
        max_cudagraph_capture_size=max_cudagraph_capture_size, moe_backend=moe_backend,
        all2all_backend=all2all_backend, enable_dbo=enable_dbo, ubatch_size=ubatch_size,
        runner=runner, convert=convert, pooler=pooler,
        kv_sharing_fast_prefill=kv_sharing_fast_prefill, nnodes=nnodes,
        mm_encoder_tp_mode=mm_encoder_tp_mode,
        limit_mm_per_prompt=parse_mm_limits(limit_mm_per_prompt)
        if limit_mm_per_prompt is not None else None,
        mm_dummy_sizes=parse_mm_sizes(limit_mm_per_prompt) or None
        if limit_mm_per_prompt is not None else None,
        mm_ipc_gpu_memory_gb=mm_ipc_gpu_memory_gb, api_server_count=api_server_count,
        video_io=parse_video_io(media_io_kwargs) if media_io_kwargs is not None else None,
    )
    key_notes: list[str] = [n for n in [ignored_note(pooler, vllm_version)] if n]
    if limit_mm_per_prompt is not None and (sized := [
            o for o in mm_size_options(limit_mm_per_prompt)
            if o.split(".")[-1] not in MM_SIZE_KEYS]):
        key_notes.append(f"--limit-mm-per-prompt's {', '.join(sized)} are not modelled")
    if optimization_level is not None:
        from kvplan.engines.vllm_compile import optimization_level as opt_level

        for name, value in opt_level(optimization_level, version=vllm_version).items():
            setattr(args, name, value)
    if compilation_config is not None:
        from kvplan.core.versions import LATEST, VllmVersion
        from kvplan.engines.vllm_compile import parse_compilation_config
        from kvplan.errors import BadInput

        for name, value in parse_compilation_config(
                compilation_config, version=vllm_version or LATEST, notes=key_notes).items():
            if name in ("cudagraph_capture_sizes", "max_cudagraph_capture_size") and \
                    getattr(args, name) is not None and VllmVersion.of(vllm_version).at_least(
                        0, 11, 1):  # `create_engine_config` (0.11.1-0.33)
                flag = "--" + name.replace("_", "-")
                raise BadInput(f"{flag} and --compilation-config's {name} are mutually "
                               "exclusive (vLLM refuses both)", hint="give it once")
            setattr(args, name, value)
    from kvplan.core.versions import VllmVersion

    env_note = apply_assignments(args, env, VllmVersion.of(vllm_version).v)
    m = resolve_model(model, catalog, revision=revision, token=token,
                      offline=True if offline else None)
    if hf_overrides is not None:
        from kvplan.engines.vllm_overrides import apply_hf_overrides, parse_hf_overrides

        m = replace(m, config=apply_hf_overrides(m.config, parse_hf_overrides(hf_overrides)),
                    origin=f"{m.origin or m.id} with --hf-overrides")
    if speculative_config is not None:
        from kvplan.core.versions import LATEST
        from kvplan.engines.vllm_spec import speculative

        args.speculative = speculative(speculative_config, lambda name: resolve_model(
            name, catalog, token=token, offline=True if offline else None),
            version=vllm_version or LATEST, notes=key_notes)
    g = resolve_gpu(gpu, gpu_memory, catalog)
    result = size(m, g, args, vllm_version)
    result.notes.extend(key_notes)
    if env_note:
        result.notes.append(env_note)
    if as_json:
        from kvplan.render.jsonout import dumps

        sys.stdout.write(dumps(result.to_json()))
    else:
        from kvplan.render.size import render_size

        render_size(result)
    if not result.fits:
        return 1
    return 0
