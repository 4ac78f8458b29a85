"""The `kvplan` command line (Typer). Thin: parse, call the core, render.

Exit codes (docs/cli.md): 0 ok, 1 does not fit / check failed, 2 bad input, 3 internal error.
"""

import json
import math
import os
import sys
from dataclasses import replace
from typing import Any, Optional

import typer

from kvplan.engines.vllm_env import ENV_HELP, apply_assignments
from kvplan.errors import EXIT_BAD_INPUT, KvplanError

EXIT_INTERNAL = 3

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Capacity planning for LLM serving: vLLM KV-cache sizing and more.",
                  pretty_exceptions_enable=False)

CatalogOpt = typer.Option(None, "--catalog", help="Extra catalog YAML file (repeatable); "
                          "also KVPLAN_CATALOG.")


@app.command("size")
def size_cmd(
    model: str = typer.Argument(..., help="Catalog id/alias, HF repo id, config.json or "
                                "model directory."),
    gpu: Optional[str] = typer.Option(None, "--gpu", "-g", help="GPU id, alias, nvidia-smi name "
                                      "or GFD label (see `kvplan gpus`)."),
    gpu_memory: Optional[str] = typer.Option(None, "--gpu-memory", help="Total GPU memory "
                                             "as the CUDA runtime reports it, e.g. 24GiB."),
    tensor_parallel_size: int = typer.Option(1, "--tensor-parallel-size", "-tp"),
    pipeline_parallel_size: int = typer.Option(1, "--pipeline-parallel-size", "-pp"),
    data_parallel_size: int = typer.Option(1, "--data-parallel-size", "-dp"),
    decode_context_parallel_size: int = typer.Option(
        1, "--decode-context-parallel-size", "-dcp",
        help="Shard each request's KV cache over this many TP ranks (vLLM 0.10.2+)."),
    enable_expert_parallel: bool = typer.Option(False, "--enable-expert-parallel"),
    enable_eplb: bool = typer.Option(False, "--enable-eplb",
                                     help="Expert parallel load balancing (vLLM 0.11+)."),
    eplb_config: Optional[str] = typer.Option(
        None, "--eplb-config", help='As vLLM: JSON, e.g. \'{"num_redundant_experts": 32}\' '
        "(num_redundant_experts and window_size change memory)."),
    max_model_len: Optional[str] = typer.Option(None, "--max-model-len",
                                                help="32768, 32K (=32768), 32k (=32000), "
                                                "-1/auto to auto-fit."),
    kv_cache_dtype: str = typer.Option(
        "auto", "--kv-cache-dtype", help="auto, bfloat16, float16, fp8 (fp8_e4m3, fp8_e5m2; "
        "fp8_inc is Intel Gaudi's, refused on CUDA/ROCm), and from vLLM 0.20 the quantized "
        "formats: int8/fp8/int4_per_token_head, "
        "nvfp4, nvfp4_4over6, nvfp4_ds_mla, turboquant_k8v4/4bit_nc/k3v4_nc/3bit_nc, "
        "ultraquant_4bit, octave_* (docs/methodology.md §2b)."),
    kv_cache_dtype_skip_layers: Optional[str] = typer.Option(
        None, "--kv-cache-dtype-skip-layers", help="Layers kept in the model dtype, as vLLM's "
        "flag (0.19+): indices and/or sliding_window, commas or spaces ('0 1 30 31')."),
    gpu_memory_utilization: Optional[float] = typer.Option(None, "--gpu-memory-utilization"),
    kv_cache_memory_bytes: Optional[str] = typer.Option(None, "--kv-cache-memory-bytes",
                                                        help="Skip profiling: KV memory per "
                                                        "GPU (e.g. 60G = 60 GiB, as vLLM)."),
    block_size: Optional[int] = typer.Option(None, "--block-size"),
    max_num_seqs: Optional[int] = typer.Option(None, "--max-num-seqs"),
    max_num_batched_tokens: Optional[str] = typer.Option(None, "--max-num-batched-tokens"),
    enforce_eager: bool = typer.Option(False, "--enforce-eager"),
    dtype: str = typer.Option("auto", "--dtype"),
    quantization: Optional[str] = typer.Option(None, "--quantization", "-q",
                                               help="As vLLM: read from the checkpoint when "
                                               "unset; on a 16-bit checkpoint fp8 (and the "
                                               "other online methods) quantize as it loads."),
    attention_backend: Optional[str] = typer.Option(
        None, "--attention-backend", help="Force vLLM's attention backend (0.13+; "
        "VLLM_ATTENTION_BACKEND in --env for 0.11-0.14): FLASH_ATTN, FLASHINFER, TRITON_ATTN, "
        "FLEX_ATTENTION, TRITON_MLA, FLASH_ATTN_MLA, FLASHMLA, CUTLASS_MLA, FLASHINFER_MLA, "
        "FLASHMLA_SPARSE, FLASHINFER_MLA_SPARSE, ROCM_ATTN, ROCM_AITER_FA, "
        "ROCM_AITER_UNIFIED_ATTN, ROCM_AITER_MLA."),
    allow_deprecated_quantization: bool = typer.Option(
        False, "--allow-deprecated-quantization",
        help="vLLM 0.14+ refuses deprecated methods (fbgemm_fp8, ...) without it."),
    enable_prefix_caching: Optional[bool] = typer.Option(
        None, "--enable-prefix-caching/--no-enable-prefix-caching"),
    enable_chunked_prefill: Optional[bool] = typer.Option(
        None, "--enable-chunked-prefill/--no-enable-chunked-prefill",
        help="Off: the profile runs max(max_model_len, the default) tokens at once."),
    disable_hybrid_kv_cache_manager: bool = typer.Option(False,
                                                         "--disable-hybrid-kv-cache-manager"),
    num_gpu_blocks_override: Optional[int] = typer.Option(None, "--num-gpu-blocks-override"),
    disable_custom_all_reduce: bool = typer.Option(False, "--disable-custom-all-reduce",
                                                   help="Also what vLLM does when TP spans "
                                                   "nodes."),
    flashinfer_sampler: bool = typer.Option(False, "--flashinfer-sampler",
                                            help="vLLM V1 0.8-0.11.0 with flashinfer installed "
                                            "(the vllm/vllm-openai image; log: 'Using "
                                            "FlashInfer for top-p & top-k sampling') profiled "
                                            "the sampler through it: a smaller activation peak."),
    async_scheduling: Optional[bool] = typer.Option(
        None, "--async-scheduling/--no-async-scheduling",
        help="vLLM 0.26+: off, a sliding-window or chunked layer keeps blocks for PP batches "
        "in flight instead of PP + 1 (default: on, as vLLM turns it on)."),
    specialize_active_lora: bool = typer.Option(
        False, "--specialize-active-lora", help="vLLM 0.16+ with --enable-lora: CUDA graphs "
        "per power of 2 of active adapters (up to --max-loras), not only with and without."),
    dcp_q_replicate: bool = typer.Option(
        False, "--dcp-q-replicate", help="vLLM 0.29+ with -dcp on DeepSeek-V2/V3-family MLA: "
        "q_b_proj split TP/dcp ways, not TP (more weights per GPU)."),
    mm_processor_kwargs: Optional[str] = typer.Option(
        None, "--mm-processor-kwargs", help="JSON, as vLLM's flag: a Qwen VL max_pixels or "
        "size.longest_edge (flat, or in images_kwargs / videos_kwargs) sets the image and "
        "video vLLM 0.17+ profiles the vision encoder with."),
    enable_prompt_embeds: bool = typer.Option(
        False, "--enable-prompt-embeds", help="Model runner V2 (0.29+) keeps an "
        "inputs_embeds buffer [max-num-batched-tokens, hidden]; 0.24-0.28 run V1 instead."),
    return_sampling_mask: bool = typer.Option(
        False, "--return-sampling-mask", help="vLLM 0.28+: the sampler runs without "
        "FlashInfer's fused top-k/top-p (a smaller profile peak from 0.33)."),
    logprobs_mode: Optional[str] = typer.Option(
        None, "--logprobs-mode", help="raw_logprobs (default), raw_logits, "
        "processed_logprobs or processed_logits; the processed modes sample without "
        "FlashInfer (0.28+)."),
    skip_mm_profiling: bool = typer.Option(False, "--skip-mm-profiling",
                                           help="Multimodal models: leave the vision encoder "
                                           "out of the profile run (as vLLM's flag)."),
    mamba_cache_dtype: str = typer.Option("auto", "--mamba-cache-dtype", help="Mamba / "
                                          "linear-attention state dtype (auto, float32, "
                                          "float16, bfloat16)."),
    mamba_ssm_cache_dtype: str = typer.Option("auto", "--mamba-ssm-cache-dtype",
                                              help="Their SSM state alone (auto: the "
                                              "config's hint, else --mamba-cache-dtype)."),
    enable_lora: bool = typer.Option(False, "--enable-lora", help="LoRA adapter slots on every "
                                     "linear layer (their memory is counted in the weights)."),
    max_loras: int = typer.Option(1, "--max-loras", help="Adapter slots on the GPU (vLLM's "
                                  "default 1); registered adapters beyond it wait in host "
                                  "memory."),
    max_lora_rank: int = typer.Option(16, "--max-lora-rank", help="Rank of each slot."),
    fully_sharded_loras: bool = typer.Option(False, "--fully-sharded-loras"),
    lora_target_modules: Optional[str] = typer.Option(
        None, "--lora-target-modules", help="Modules given LoRA slots (vLLM 0.19+), e.g. "
        "'q_proj,v_proj' or 'o_proj down_proj'; default every linear layer."),
    speculative_config: Optional[str] = typer.Option(
        None, "--speculative-config", help="vLLM's JSON: method (mtp, eagle, eagle3, "
        "draft_model, dflash, dspark, ngram), num_speculative_tokens and the draft \"model\" "
        "(resolved like MODEL): its layers join the KV cache, its weights the load."),
    hf_overrides: Optional[str] = typer.Option(None, "--hf-overrides", help="JSON applied to "
                                               "the model's HF config, as vLLM applies it "
                                               "(e.g. YaRN rope_scaling for a longer context)."),
    entrypoint: str = typer.Option("serve", "--entrypoint", help="serve (vllm serve), llm "
                                   "(the offline LLM class: twice the token budget by "
                                   "default, one API process) or engine (AsyncLLMEngine "
                                   "from EngineArgs: 2,048 tokens, 128 sequences)."),
    performance_mode: str = typer.Option("balanced", "--performance-mode",
                                         help="balanced, interactivity or throughput (vLLM "
                                         "0.17+; throughput doubles the batch defaults)."),
    cudagraph_capture_sizes: Optional[str] = typer.Option(
        None, "--cudagraph-capture-sizes", help="Batch sizes to capture CUDA graphs for, as "
        "vLLM's flag (commas or spaces: 1,2,4,8); the graph estimate counts them."),
    max_cudagraph_capture_size: Optional[int] = typer.Option(
        None, "--max-cudagraph-capture-size", help="Largest CUDA-graph batch size (vLLM's "
        "flag; default min(2 x max_num_seqs, 512))."),
    mm_encoder_tp_mode: str = typer.Option("weights", "--mm-encoder-tp-mode",
                                           help="weights (split the vision tower over TP) or "
                                           "data (a whole tower on every rank), as vLLM's "
                                           "flag (0.10+)."),
    moe_backend: str = typer.Option("auto", "--moe-backend",
                                    help="MoE expert kernel, as vLLM's flag (0.18+): auto, "
                                    "triton, deep_gemm, cutlass, flashinfer_trtllm, "
                                    "flashinfer_cutlass, marlin, aiter, ..."),
    runner: str = typer.Option("auto", "--runner", help="auto, generate or pooling: the "
                               "pooling runner (embedding, reranking) has no LM head or "
                               "sampler"),
    convert: str = typer.Option("auto", "--convert", help="embed, classify or reward: run a "
                                "generative checkpoint as a pooling model"),
    pooler_config: Optional[str] = typer.Option(
        None, "--pooler-config", help="the pooler's JSON config, read as the release reads "
        "it: pooling_type (seq_pooling_type / tok_pooling_type from 0.14) decides chunked "
        "prefill"),
    nnodes: int = typer.Option(1, "--nnodes", help="hosts the GPUs are spread over (0.11.1+; "
                               "it must divide TP x PP x DP): TP past one host runs without "
                               "custom all-reduce"),
    kv_sharing_fast_prefill: bool = typer.Option(
        False, "--kv-sharing-fast-prefill", help="Gemma-3n / Gemma 4: the fast-prefill "
        "buffers (the profile still runs every token)"),
    enable_dbo: bool = typer.Option(False, "--enable-dbo", help="dual-batch overlap (with a "
                                    "DeepEP --all2all-backend): model runner V1, a workspace "
                                    "slot per microbatch"),
    ubatch_size: int = typer.Option(1, "--ubatch-size", help="microbatches per step, with a "
                                    "DeepEP --all2all-backend"),
    all2all_backend: Optional[str] = typer.Option(
        None, "--all2all-backend", help="expert parallelism's token exchange with -dp > 1 "
        "(0.11.1+): DeepEP's buffers (deepep_high_throughput, deepep_low_latency) come out "
        "of the KV cache; the default gathers through NCCL"),
    cpu_offload_gb: float = typer.Option(0.0, "--cpu-offload-gb",
                                         help="GiB of weights per GPU vLLM keeps in host "
                                         "memory (as vLLM's flag)."),
    language_model_only: bool = typer.Option(False, "--language-model-only",
                                             help="Multimodal models: text only, as vLLM's flag "
                                             "(or --limit-mm-per-prompt 0 for every "
                                             "modality): the vision tower is neither loaded nor "
                                             "profiled."),
    compilation_config: Optional[str] = typer.Option(
        None, "--compilation-config", "-cc", help="vLLM's compilation config (JSON): its "
        "cudagraph_mode (NONE, PIECEWISE, FULL, FULL_DECODE_ONLY, FULL_AND_PIECEWISE), mode "
        "(0-3) and capture sizes set the CUDA graphs vLLM captures and subtracts (0.20+)."),
    optimization_level: Optional[str] = typer.Option(
        None, "--optimization-level", "-O", help="vLLM's optimization level 0-3 (0.12+; -O0: "
        "no compilation, no CUDA graphs; -O1: piecewise graphs, no all-reduce fusion; -O2 "
        "the default). Before 0.12 -O is the compilation level."),
    limit_mm_per_prompt: Optional[str] = typer.Option(
        None, "--limit-mm-per-prompt", help="Items per prompt by modality, as vLLM's flag "
        "('{\"image\": 0, \"video\": 0}'): a tower whose modalities are all 0 is not loaded; "
        "an unlisted modality allows 999."),
    mm_ipc_gpu_memory_gb: float = typer.Option(
        0.0, "--mm-ipc-gpu-memory-gb", help="Multimodal models: GiB of GPU memory for the API "
        "server's decoded frames, as vLLM's flag (0.25+); vLLM takes it out of the KV cache."),
    api_server_count: Optional[int] = typer.Option(
        None, "--api-server-count", "-asc", help="API server processes (vllm serve's default: "
        "the DP size); each GPU video decoder's reservation is per process."),
    media_io_kwargs: Optional[str] = typer.Option(
        None, "--media-io-kwargs", help="vLLM's media I/O options (JSON); a \"video\" entry "
        "with video_backend or backend \"pynvvideocodec\" (also hw_decoders, max_width, "
        "max_height) decodes on the GPU, reserved out of the KV cache (0.25+)."),
    vllm_version: Optional[str] = typer.Option(None, "--vllm-version",
                                               help="Target vLLM release (default 0.33)."),
    env: Optional[list[str]] = typer.Option(None, "--env", help=ENV_HELP),
    catalog: Optional[list[str]] = CatalogOpt,
    revision: Optional[str] = typer.Option(None, "--revision", help="Hub branch, tag or commit."),
    token: Optional[str] = typer.Option(None, "--token", help="Hub token (default: HF_TOKEN or "
                                        "the `hf auth login` token). Never printed."),
    offline: bool = typer.Option(False, "--offline", help="Never touch the network (also "
                                 "HF_HUB_OFFLINE=1)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """KV-cache capacity of MODEL on GPU, computed the way vLLM computes it."""
    from kvplan.core.eplb import parse_eplb_config
    from kvplan.core.sizing import EngineArgs, size
    from kvplan.sources.resolve import resolve_gpu, resolve_model
    from kvplan.units import (
        parse_int_list,
        parse_json_object,
        parse_mm_limits,
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
        mm_ipc_gpu_memory_gb=mm_ipc_gpu_memory_gb, api_server_count=api_server_count,
        video_io=parse_video_io(media_io_kwargs) if media_io_kwargs is not None else None,
    )
    key_notes: list[str] = [n for n in [ignored_note(pooler, vllm_version)] if n]
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

        m = replace(m, config=apply_hf_overrides(m.config, parse_hf_overrides(hf_overrides)))
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
        sys.stdout.write(json.dumps(result.to_json(), indent=2) + "\n")
    else:
        from kvplan.render.size import render_size

        render_size(result)
    if not result.fits:
        raise typer.Exit(1)


models_app = typer.Typer(add_completion=False, rich_markup_mode=None,
                         help="The model catalog: list, add from the Hub, export for offline use.")
app.add_typer(models_app, name="models")


@models_app.callback(invoke_without_command=True)
def models_cmd(ctx: typer.Context, catalog: Optional[list[str]] = CatalogOpt,
               as_json: bool = typer.Option(False, "--json")) -> None:
    """List the catalog's models."""
    if ctx.invoked_subcommand is not None:
        return
    from kvplan import catalog as cat_mod
    from kvplan.render.tables import render_models

    cat = cat_mod.load("models", catalog)
    render_models(cat, as_json)


@models_app.command("add")
def models_add(
    repo_ids: list[str] = typer.Argument(..., help="Hub repo ids to add."),
    catalog: Optional[str] = typer.Option(None, "--catalog", help="Catalog file to write "
                                          "(default: ~/.config/kvplan/models.yaml)."),
    alias: Optional[list[str]] = typer.Option(None, "--alias", help="Alias for the (single) "
                                              "model; repeatable."),
    revision: Optional[str] = typer.Option(None, "--revision"),
    token: Optional[str] = typer.Option(None, "--token"),
) -> None:
    """Fetch config and exact weight bytes from the Hub into a user catalog file."""
    from kvplan import catalog as cat_mod
    from kvplan.sources.hub import load_hub

    if alias and len(repo_ids) > 1:
        raise typer.BadParameter("--alias needs exactly one repo id")
    entries = {}
    for rid in repo_ids:
        rec = load_hub(rid, revision=revision, token=token, offline=False)
        entries[rid] = cat_mod.entry_from_record(rec, alias)
    path = catalog or str(cat_mod.default_user_catalog())
    cat_mod.write_models(path, entries)
    for rid, e in entries.items():
        w = e.get("weights_bytes")
        sys.stdout.write(f"added {rid} to {path}"
                         + (f" ({w:,} weight bytes)" if w else " (weights will be estimated)")
                         + "\n")


@models_app.command("export")
def models_export(
    ids: list[str] = typer.Argument(..., help="Catalog ids/aliases or Hub repo ids."),
    output: str = typer.Option(..., "--output", "-o", help="Catalog file to write."),
    catalog: Optional[list[str]] = CatalogOpt,
    token: Optional[str] = typer.Option(None, "--token"),
) -> None:
    """Write catalog entries to a file to carry into a site without network."""
    from kvplan import catalog as cat_mod
    from kvplan.sources.hub import load_hub, looks_like_repo_id

    cat = cat_mod.load("models", catalog)
    entries = {}
    for name in ids:
        hit = cat.get(name)
        if hit:
            entries[hit[0]] = hit[1]
        elif looks_like_repo_id(name):
            entries[name] = cat_mod.entry_from_record(load_hub(name, token=token, offline=False))
        else:
            close = cat.suggestions(name)
            from kvplan.errors import BadInput

            raise BadInput(f"unknown model {name!r}",
                           hint=f"did you mean {', '.join(close)}?" if close else None)
    cat_mod.write_models(output, entries)
    sys.stdout.write(f"wrote {len(entries)} model(s) to {output}\n")


@app.command("gpus")
def gpus_cmd(catalog: Optional[list[str]] = CatalogOpt,
             as_json: bool = typer.Option(False, "--json")) -> None:
    """List the catalog's GPUs."""
    from kvplan import catalog as cat_mod
    from kvplan.render.tables import render_gpus

    cat = cat_mod.load("gpus", catalog)
    render_gpus(cat, as_json)


_registered = False


def full_app() -> typer.Typer:
    """The app with every command (the planning, check, simulate and diagnose modules)."""
    global _registered
    if not _registered:
        from kvplan import cli_check, cli_diagnose, cli_plan, cli_simulate

        for mod in (cli_plan, cli_check, cli_simulate, cli_diagnose):
            mod.register(app)
        _registered = True
    return app


def _app_for(argv: list[str]) -> typer.Typer:
    """`kvplan size ...` runs through an app holding that command alone: building the click
    commands of every subcommand costs about 10 ms of a ~140 ms run (benchmarks/speed.py)."""
    if argv[:1] == ["size"]:
        fast = typer.Typer(add_completion=False, rich_markup_mode=None,
                           pretty_exceptions_enable=False)
        fast.callback()(lambda: None)  # keeps `size` a subcommand
        fast.command("size")(size_cmd)
        return fast
    return full_app()


def _finite_floats(cmd: Any) -> None:
    """Every float option of `cmd` and its subcommands refuses nan and inf (click's FLOAT
    takes them, and they reach the arithmetic)."""
    import click

    class Finite(click.types.FloatParamType):
        def convert(self, value: Any, param: Any, ctx: Any) -> Any:
            v = super().convert(value, param, ctx)
            if not math.isfinite(v):
                self.fail(f"{value!r} is not a finite number", param, ctx)
            return v

    finite = Finite()
    for sub in getattr(cmd, "commands", {}).values():
        _finite_floats(sub)
    for p in cmd.params:
        if type(p.type) is click.types.FloatParamType:
            p.type = finite


def main(argv: list[str] | None = None) -> int:
    """Console entry point: one line on error, never a traceback (unless KVPLAN_DEBUG=1)."""
    debug = os.environ.get("KVPLAN_DEBUG") == "1"
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        # our apps render help without rich (rich_markup_mode=None), but typer 0.19 still
        # escapes "[default: ...]" for rich whenever rich is importable: "\[default: 1]"
        typer.core.HAS_RICH = False
        cmd = typer.main.get_command(_app_for(args))
        _finite_floats(cmd)
        rv = cmd.main(args=args, prog_name="kvplan", standalone_mode=False)
        return rv if isinstance(rv, int) else 0
    except KvplanError as e:
        if debug:
            raise
        sys.stderr.write(f"kvplan: error: {e.line()}\n")
        return e.exit_code
    except typer.Exit as e:
        return e.exit_code
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 0
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # noqa: BLE001 - last line of defence: no tracebacks for users
        import click

        if isinstance(e, click.exceptions.Abort):
            return 130
        if isinstance(e, click.ClickException):
            sys.stderr.write(f"kvplan: error: {e.format_message()}\n")
            return EXIT_BAD_INPUT
        if debug:
            raise
        sys.stderr.write(f"kvplan: internal error: {type(e).__name__}: {e} "
                         "(set KVPLAN_DEBUG=1 for a traceback and report it)\n")
        return EXIT_INTERNAL


def run() -> None:
    sys.exit(main())
