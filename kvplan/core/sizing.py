"""`size()`: a model, a GPU and vLLM engine arguments in; vLLM's KV-cache figures out.

Pure computation (no I/O). The order follows vLLM's own start-up: resolve dtypes and
defaults, build per-layer specs, pick the block size, group layers, measure the memory budget
per pipeline stage, size the block pool (minimum over workers), then check that one request
of `max_model_len` fits.
"""

from __future__ import annotations

import math
from dataclasses import field, replace
from functools import partial
from typing import Any

from kvplan.core import all2all as A2A
from kvplan.core import attnbackend as AB
from kvplan.core import backends as BK
from kvplan.core import blocks as B
from kvplan.core import kvformats as KF
from kvplan.core import memory as M
from kvplan.core import moekernel as MK
from kvplan.core import pooling as PL
from kvplan.core import quantcheck as QC
from kvplan.core import runner as RN
from kvplan.core.arch import (
    CHUNKED,
    CROSS,
    DSV4,
    FULL,
    GDN,
    KDA,
    LIGHTNING,
    MAMBA2,
    MINIMAX01,
    MLA,
    SLIDING,
    AttnLayer,
    ModelArch,
    StateLayer,
    longrope_default_len,
    max_model_len_of,
    normalize,
    release_layers,
    release_tie,
    tp_refusal,
    valid_tps,
)
from kvplan.core.config_types import check_field_types
from kvplan.core.dtypes import (
    canonical,
    dtype_bytes,
    modelopt_kv_dtype,
    quant_file_notes,
    resolve_kv_dtype,
    resolve_model_dtype,
)
from kvplan.core.eplb import check_eplb, eplb_state_bytes
from kvplan.core.kvspec import (
    INDEXER,
    KvDtypes,
    Spec,
    attn_bytes_per_token,
    choose_block_size,
    dsv4_specs,
    layer_specs,
    state_bytes,
)
from kvplan.core.mm import (
    DEFAULT_MM_LIMIT,
    GEMMA4,
    MISTRAL_NATIVE,
    PIXTRAL,
    QWEN2_VL,
    QWEN3_VL,
    EncoderProfile,
    PixelBytes,
    ProcessorPixels,
    encoder_profile,
    gemma4_frame_chunk,
    pixel_bytes,
    processor_pixels,
    towers_kept,
    towers_tp_sharded,
)
from kvplan.core.mmdecode import reserve
from kvplan.core.params import (
    act_order_scales,
    channel_scale_rows,
    channel_scaled,
    count_params,
    deepstack_buffer_bytes,
    expert_padding,
    fast_prefill_buffer_bytes,
    indexer_rope_cache,
    mla_rope_fp32,
    mlp_intermediate,
    moe_gated,
    moe_hidden,
    mrope_positions_factor,
    mxfp4_bias_extra,
    mxfp4_hopper_extra,
    nas_ffn_sizes,
    ple_buffer_bytes,
    rope_tables,
    topk_buffer_bytes,
    trtllm_bf16_experts,
    weight_bytes,
    wna16_held_delta,
)
from kvplan.core.pipeline import (
    EMBED_EVERY_STAGE,
    LM_HEAD_EVERY_STAGE,
    NO_PIPELINE,
    intermediate_tensor_bytes,
    pp_partition,
)
from kvplan.core.pooling import PoolerRead
from kvplan.core.record import record
from kvplan.core.specdec import mtp_checkpoint_bytes
from kvplan.core.tensors import TensorSummary
from kvplan.core.versions import (
    ABSENT_UNTIL,
    REMOVED_ARCHITECTURES,
    VllmVersion,
    cc_major,
    cc_tuple,
)
from kvplan.errors import BadInput, RefusedEverywhere
from kvplan.units import GiB, MiB, cdiv

TYPICAL_LENGTHS = (1024, 4096, 8192, 32768, 131072)
DRAFT_LEN_SOURCE = "the draft model's"  # max_model_len_source when a draft lowered it
DRAFT_LEN_REMEDY = ("the draft model caps --max-model-len here (vLLM lowers it to the "
                    "draft's context): a drafter with a longer one, or an EAGLE-style one, "
                    "serves them")
# The shortest --max-model-len a "does not fit" hint proposes with more TP (a choice, not an
# engine fact: a context under 4k tokens is rarely a serving option)
SHORTER_HINT_MIN_LEN = 4096
MAX_CAPTURE_SIZE = 1 << 20  # largest --max-cudagraph-capture-size sized (65,550 graphs)
NNODES_FROM = (0, 11, 1)  # `--nnodes` (`ParallelConfig.nnodes`) arrives in 0.11.1
# `config/model.py` `LogprobsMode` (0.10+)
LOGPROBS_MODES = ("raw_logprobs", "raw_logits", "processed_logprobs", "processed_logits")


@record(frozen=True)
class Gpu:
    """The accelerator facts sizing needs (a `gpus.yaml` entry or `--gpu-memory`)."""

    id: str
    name: str
    memory_bytes: int  # total memory the CUDA runtime reports
    compute_capability: str = "9.0"
    vendor: str = "nvidia"
    bandwidth_gbps: float = 0.0
    interconnect_gbps: float = 0.0  # NVLink / Infinity Fabric per GPU; 0 = PCIe only
    nvlink_domain: int = 8  # GPUs of a node that link fully connects (bridged cards: 2)
    gpus_per_node: int = 8  # GPUs one host holds (GB200 trays 4): beyond, ranks span nodes
    unified_memory: bool = False  # integrated GPU sharing the host's RAM (DGX Spark GB10)
    sm_count: int = 0  # streaming multiprocessors (0: not in the catalog)
    tflops: dict[str, float | None] = field(default_factory=dict)
    price_per_hour: float | None = None
    mig_profile: str = ""  # a MIG slice of the GPU ("3g.40gb"); "" for the whole GPU
    memory_note: str = ""  # why memory_bytes is an estimate ("" when a runtime printed it)
    catalog_id: str = ""  # the gpus.yaml entry it comes from ("" for --gpu-memory alone)
    assumed: bool = False  # compute capability and vendor are defaults, not known
    note: str = ""  # how the GPU was read: assumed architecture, a time-sliced GPU


@record(frozen=True)
class Model:
    """A model to size: its HF config and, where known, exact checkpoint bytes."""

    id: str
    config: dict[str, Any]
    weights_bytes: int | None = None
    weights_source: str = ""
    hf_quant_config: dict[str, Any] | None = None
    weights_layout: dict[str, Any] | None = None  # exact bytes by role (core/tensors.py)
    # a sentence-transformers checkpoint: modules.json and the config.json of each module
    # listed as Pooling, by path (`core/pooling.py st_pooling`); st_checked: the source
    # could show modules.json (a directory, the Hub), not a bare config.json or the catalog
    st_modules: list | None = None
    st_configs: dict[str, Any] | None = None
    st_checked: bool = False
    st_encoder: dict[str, Any] | None = None  # sentence_bert_config.json & co. (+ "file")
    # where the config comes from, named in its errors: a user catalog's entry and file, a
    # local config.json, a Hub repo's, "... with --hf-overrides"
    origin: str = ""

    @property
    def quant_file_for_kv(self) -> dict[str, Any] | None:
        """hf_quant_config.json as vLLM sees it: only when config.json has no top-level
        `quantization_config` (`transformers_utils/config.py get_config`: "ModelOpt 0.29.0
        and before saves the quantization config in a separate hf_quant_config.json"; the
        0.10.1-0.33 wheels), so config.json's KV scheme wins when both are present."""
        if not isinstance(self.hf_quant_config, dict) or \
                self.config.get("quantization_config") is not None:
            return None  # `get_config` reads the file when the key is absent or null
        inner = self.hf_quant_config.get("quantization")
        if isinstance(inner, dict) and inner.get("quant_algo") is None:
            return None  # a KV-only export: no quant_method, so vLLM runs it unquantized
        return self.hf_quant_config

    @property
    def quant_file(self) -> dict[str, Any] | None:
        """hf_quant_config.json as the weight loader sees it: `quant_file_for_kv`, or a
        modelopt_mixed config.json without its per-layer map, for which `get_quant_config`
        falls through to the file ("older ones keep it only in hf_quant_config.json")."""
        q = self.config.get("quantization_config")
        if (isinstance(q, dict) and isinstance(self.hf_quant_config, dict)
                and str(q.get("quant_algo", "")).upper() == "MIXED_PRECISION"
                and "quantized_layers" not in q):
            return self.hf_quant_config
        return self.quant_file_for_kv


@record
class EngineArgs:
    """vLLM engine arguments that change memory (vLLM's names and defaults)."""

    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1
    decode_context_parallel_size: int = 1  # -dcp: shards each request's KV over TP ranks
    cpu_offload_gb: float = 0.0  # --cpu-offload-gb: decoder weights kept in host memory (GiB)
    performance_mode: str = "balanced"  # --performance-mode (0.17+): throughput doubles defaults
    cudagraph_capture_sizes: tuple[int, ...] | None = None  # --cudagraph-capture-sizes
    max_cudagraph_capture_size: int | None = None  # --max-cudagraph-capture-size
    moe_backend: str = "auto"  # --moe-backend (vLLM 0.18+)
    mm_encoder_tp_mode: str = "weights"  # --mm-encoder-tp-mode (vLLM 0.10+): weights | data
    enable_expert_parallel: bool = False
    enable_eplb: bool = False  # --enable-eplb (expert parallel load balancing, core/eplb.py)
    eplb_num_redundant_experts: int = 0  # --eplb-config num_redundant_experts
    eplb_window_size: int = 1000  # --eplb-config window_size
    runner: str = "auto"  # --runner: auto | generate | pooling
    task: str | None = None  # --task (0.9-0.12): embed / classify / score / reward = pooling
    pooler: PoolerRead | None = None  # --pooler-config as the release reads it (vllm_pooler)
    convert: str = "auto"  # --convert: auto | none | embed | classify | reward
    kv_sharing_fast_prefill: bool = False  # --kv-sharing-fast-prefill (Gemma-3n / Gemma 4)
    nnodes: int = 1  # --nnodes (0.12+): the GPUs are spread over this many hosts
    enable_dbo: bool = False  # --enable-dbo (dual-batch overlap: 2 microbatches)
    ubatch_size: int = 1  # --ubatch-size (0.30+: microbatches when above 1)
    dbo_prefill_token_threshold: int = 512  # --dbo-prefill-token-threshold
    all2all_backend: str | None = None  # --all2all-backend (0.11.1+; core/all2all.py)
    all2all_backend_env: str | None = None  # VLLM_ALL2ALL_BACKEND (read by 0.9-0.15)
    deepep_buffer_mb: int = 1024  # VLLM_DEEPEP_BUFFER_SIZE_MB (0.11+)
    max_model_len: int | None = None  # None: from the config; -1: auto-fit (0.14+)
    kv_cache_dtype: str = "auto"
    # --kv-cache-dtype-skip-layers: layer indices and/or 'sliding_window' kept in the model
    # dtype under a quantized --kv-cache-dtype (core/kvquant.py)
    kv_cache_dtype_skip_layers: tuple[str, ...] = ()
    gpu_memory_utilization: float | None = None
    kv_cache_memory_bytes: int | None = None
    block_size: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    enforce_eager: bool = False
    cudagraph_mode: str | None = None  # --compilation-config cudagraph_mode (None: the default)
    compilation_mode: int | None = None  # --compilation-config mode (None: 3, VLLM_COMPILE)
    dtype: str = "auto"
    quantization: str | None = None
    allow_deprecated_quantization: bool = False  # --allow-deprecated-quantization (0.14+)
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool | None = None
    disable_hybrid_kv_cache_manager: bool = False
    num_gpu_blocks_override: int | None = None
    disable_custom_all_reduce: bool = False  # also what vLLM does when TP spans nodes
    flashinfer_sampler: bool | None = None  # VLLM_USE_FLASHINFER_SAMPLER (None: the default)
    async_scheduling: bool | None = None  # --[no-]async-scheduling (None: vLLM's default)
    return_sampling_mask: bool = False  # --return-sampling-mask (0.28+): no fused sampler
    logprobs_mode: str | None = None  # --logprobs-mode: processed_* modes do not fuse
    rocm_moe_padding: bool = True  # VLLM_ROCM_MOE_PADDING
    rocm_fp8_padding: bool = True  # VLLM_ROCM_FP8_PADDING
    rocm_aiter: bool = False  # VLLM_ROCM_USE_AITER
    rocm_aiter_moe: bool = True  # VLLM_ROCM_USE_AITER_MOE
    flashinfer_moe_fp8: bool = True  # VLLM_USE_FLASHINFER_MOE_FP8=0 takes FP8 MoE off FlashInfer
    estimate_cudagraphs: bool = True  # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS (0.20+ default 1)
    breakable_cudagraph: bool | None = None  # VLLM_USE_BREAKABLE_CUDAGRAPH (None: vLLM's default)
    allow_long_max_model_len: bool = False  # VLLM_ALLOW_LONG_MAX_MODEL_LEN
    attention_backend: str | None = None  # --attention-backend (0.13+; core/attnbackend.py)
    attention_backend_env: str | None = None  # VLLM_ATTENTION_BACKEND (read in 0.11-0.14)
    use_v1: bool | None = None  # VLLM_USE_V1 (None: unset; 0.8-0.10 fall back to V0 as needed)
    # 'serve' (vllm serve), 'llm' (offline LLM class) or 'engine' (AsyncLLMEngine / LLMEngine
    # built from EngineArgs directly, as RunPod's worker-vllm does)
    usage: str = "serve"
    mamba_cache_dtype: str = "auto"  # --mamba-cache-dtype: conv (and by default SSM) state
    mamba_ssm_cache_dtype: str = "auto"  # --mamba-ssm-cache-dtype: the SSM / recurrent state
    # --enable-lora: max_loras adapter slots of max_lora_rank on every wrapped layer (core/lora.py)
    enable_lora: bool = False
    max_loras: int = 1  # --max-loras (vLLM's default)
    max_lora_rank: int = 16  # --max-lora-rank (vLLM's default)
    fully_sharded_loras: bool = False  # --fully-sharded-loras
    cudagraph_specialize_lora: bool = True  # --compilation-config cudagraph_specialize_lora
    specialize_active_lora: bool = False  # --specialize-active-lora (0.16+): graphs per count
    dcp_q_replicate: bool = False  # --dcp-q-replicate (0.29+): MLA q_b_proj split TP/dcp ways
    dcp_q_replicate_env: bool | None = None  # VLLM_DCP_Q_REPLICATE (0.27+; wins when set)
    mm_processor_kwargs: dict[str, Any] | None = None  # --mm-processor-kwargs (JSON object)
    enable_prompt_embeds: bool = False  # --enable-prompt-embeds: V2's inputs_embeds buffer
    # -cc pass_config.fuse_allreduce_rms (False at -O0/-O1; None: vLLM's default, on)
    fuse_allreduce_rms: bool | None = None
    lora_target_modules: tuple[str, ...] | None = None  # --lora-target-modules (0.19+)
    speculative: Any = None  # --speculative-config as a core.specdec.SpecDecode
    # whose start-up rules apply: "vllm", or "sglang", whose pool `kvplan check` passes as a
    # given KV size (mem-fraction-static x total - weights) that vLLM's bounds do not govern
    engine: str = "vllm"
    skip_mm_profiling: bool = False  # --skip-mm-profiling: no vision encoder in the profile
    # --language-model-only (= --limit-mm-per-prompt 0 for every modality): the vision tower
    # is neither loaded nor profiled (0.33 `interfaces._mark_tower_model`; Qwen VL models
    # already skipped it in 0.10, `qwen2_5_vl.py`)
    language_model_only: bool = False
    # --limit-mm-per-prompt: items per prompt by modality; a tower whose modalities are all 0
    # is not built (`towers_kept`)
    limit_mm_per_prompt: dict[str, int] | None = None
    # its dummy-item sizes by modality (width, height, num_frames; 0.11.1+)
    mm_dummy_sizes: dict[str, dict[str, int]] | None = None
    # the API server's multimodal decoding, carved out of the KV cache (0.25+, `mmdecode`):
    # --mm-ipc-gpu-memory-gb, --api-server-count (None: vllm serve's default, the DP size),
    # --media-io-kwargs' "video" entry and VLLM_VIDEO_LOADER_BACKEND
    mm_ipc_gpu_memory_gb: float = 0.0
    api_server_count: int | None = None
    video_io: dict[str, Any] | None = None
    video_loader_backend: str | None = None
    pp_layer_partition: str | None = None  # VLLM_PP_LAYER_PARTITION: layers per stage

    @property
    def moe_ranks(self) -> int:
        """GPUs a MoE layer's routed experts are split over: TP x DP, by expert with
        expert parallelism, else by rows (`FusedMoEParallelConfig.make` flattens TP across
        DP)."""
        return self.tensor_parallel_size * self.data_parallel_size

    @property
    def expert_tp(self) -> int:
        """How each routed expert's intermediate is split: whole with expert parallelism,
        else over every MoE rank (`FusedMoEConfig.intermediate_size_per_partition`)."""
        return 1 if self.enable_expert_parallel else self.moe_ranks


@record
class SizeResult:
    """Everything `kvplan size` reports. JSON keys: see `to_json` and docs/json.md."""

    model: str
    gpu: str
    gpu_memory_bytes: int
    gpu_memory_estimated: bool  # the catalog's total is inferred, not a runtime print
    gpu_spec: Gpu  # the GPU as sized (compute capability, vendor, catalog entry)
    args: EngineArgs
    version: VllmVersion
    arch: ModelArch
    model_dtype: str
    kv_dtype: str
    max_model_len: int
    max_model_len_source: str
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    block_size_reason: str
    groups: list[B.Group]
    budget: M.Budget  # the stage that limits the pool
    weights_estimated: bool
    weights_total_bytes: int
    kv_bytes_per_token_per_gpu: int
    kv_bytes_per_token_replica: int
    kv_bytes_per_token_model: int
    state_bytes_per_request_per_gpu: int
    bytes_per_block: int
    num_gpu_blocks: int
    blocks_per_request: int
    max_concurrency: float
    kv_cache_tokens: int
    inflight_tokens: int
    fits: bool
    failure: str | None
    largest_max_model_len: int | None
    concurrency_at: dict[int, int]
    stages: list[dict[str, int]]
    notes: list[str] = field(default_factory=list)
    vision_profile: EncoderProfile | None = None  # the encoder's share of the profile run
    # vLLM 0.20+ caps max_num_seqs at the block count for Mamba / linear-attention models
    # under FULL decode CUDA graphs (None where the rule does not apply)
    max_num_seqs_limit: int | None = None
    cudagraph_graphs: int = 0  # graphs the CUDA-graph estimate counts (0 when none is subtracted)
    drafter_cudagraph_graphs: int = 0  # the drafter's own graphs in that estimate (V2, 0.29+)
    cudagraph_mode: str = "FULL_AND_PIECEWISE"  # the CUDA-graph mode vLLM runs
    breakable_cudagraph: bool = False  # graphs broken around attention, no torch.compile
    engine_note: str | None = None  # why this start runs on an engine other than the default
    model_runner_v2: bool = False  # the V1 engine's model runner V2 (`use_v2_model_runner`)
    rope_cache_bytes: int = 0  # the rotary cos/sin cache, part of the weights on every GPU
    quantization: str | None = None  # the method vLLM runs (core/quantcheck.py; None: 16-bit)
    attention_backend: str | None = None  # the backend the user forced (None: vLLM's choice)
    lora_bytes: int = 0  # LoRA adapter slots on the most loaded GPU, part of the weights
    lora_late: bool = False  # the slots come after the profile (V0 0.7), not in the weights
    draft_bytes: int = 0  # the speculative drafter's weights on the last stage's GPUs
    draft_layers: int = 0  # the drafter's cache-owning layers (in the KV figures)
    # what the load figure holds beyond the weights: ROCm's post-processing, CUDA's allocator
    # block rounding (`core/loadmem.py`)
    load_extra_bytes: int = 0
    moe_kernel: str | None = None  # fused-MoE kernel kind of the profile run (MoE models)
    moe_workspace_bytes: int = 0  # its scratch at the profile's token count
    moe_call_scratch_bytes: int = 0  # a kernel's own per-call buffers at that count (freed)
    moe_workspace_kept: bool = True  # the scratch stays allocated past the forward
    all2all_buffer_bytes: int = 0  # DeepEP's buffers per GPU, part of the non-torch memory
    pooling: bool = False  # vLLM's pooling runner (embedding / classification), not generate
    sampler_state_bytes: int = 0  # model runner V2's penalty / grammar state, in the activation
    # what vLLM allocates after sizing the KV cache without having budgeted it: CUDA graphs
    # it does not subtract, model runner V2's sampler warm-up before 0.33 and its state in
    # 0.24-0.26; it must fit in the headroom (total - requested)
    outside_budget_bytes: int = 0
    safe_gpu_memory_utilization: float | None = None  # set when the late allocations OOM
    # the most --kv-cache-memory-bytes the GPU holds beside weights, activations and graphs
    # (vLLM's "to fully utilize gpu memory" figure, before the CUDA context)
    kv_cache_memory_bytes_max: int = 0
    kv_dtypes: KvDtypes | None = None  # per-layer KV dtypes (quantized formats, skip layers)

    @property
    def usable_blocks(self) -> int:
        """Blocks requests can hold: V1 reserves the null block (`BlockPool`), V0 has none."""
        return max(self.num_gpu_blocks - 1, 0) if self.version.v1 else self.num_gpu_blocks

    @property
    def whole_prompt_limit(self) -> int | None:
        """vLLM 0.19.x with sliding-window or chunked-local groups: the longest prompt its
        whole-prompt admission check ever passes (`B.whole_prompt_limit` on the usable
        blocks), when a longer one is still under max_model_len; None otherwise. vLLM accepts
        a longer prompt, and its scheduler then stops the waiting queue at it for good."""
        if not (self.version.uncapped_prompt_check and self.groups and any(
                g.spec.kind in (SLIDING, CHUNKED) for g in self.groups)):
            return None
        n = B.whole_prompt_limit(self.groups, self.usable_blocks, self.max_model_len)
        return n if n < self.max_model_len - 1 else None

    @property
    def virtual_engines(self) -> int:
        """V0's schedulers: one per pipeline stage in flight, each over its share of the
        blocks (`Scheduler.__init__`: num_gpu_blocks //= pipeline_parallel_size); V1 one."""
        return 1 if self.version.v1 else self.args.pipeline_parallel_size

    @property
    def admission_blocks(self) -> int:
        """Blocks the scheduler admits new requests into (`blocks.admission_blocks`: V0
        keeps a 1 % watermark free at admission, per virtual engine; V1 has none)."""
        return B.admission_blocks(self.num_gpu_blocks, self.version.v1, self.virtual_engines)

    def to_json(self) -> dict[str, Any]:
        a = self.args
        b = self.budget
        return {
            "model": self.model,
            "gpu": self.gpu,
            "gpu_memory_bytes": self.gpu_memory_bytes,
            "gpu_memory_estimated": self.gpu_memory_estimated,
            "gpu_catalog_id": self.gpu_spec.catalog_id or None,
            "gpu_vendor": self.gpu_spec.vendor,
            "gpu_compute_capability": self.gpu_spec.compute_capability,
            "gpu_compute_capability_assumed": self.gpu_spec.assumed,
            "vllm_version": self.version.text,
            "engine": "v1" if self.version.v1 else "v0",
            "model_runner_v2": self.model_runner_v2,
            "tensor_parallel_size": a.tensor_parallel_size,
            "pipeline_parallel_size": a.pipeline_parallel_size,
            "data_parallel_size": a.data_parallel_size,
            "entrypoint": a.usage,
            "decode_context_parallel_size": a.decode_context_parallel_size,
            "gpus_per_replica": a.tensor_parallel_size * a.pipeline_parallel_size,
            "kv_cache_dtype": self.kv_dtype,
            "kv_cache_dtype_requested": a.kv_cache_dtype,
            "kv_cache_dtype_skip_layers": sorted(self.kv_dtypes.skip) if self.kv_dtypes else [],
            "dtype": self.model_dtype,
            "quantization": self.quantization,
            "attention_backend": self.attention_backend,
            "architecture": self.arch.family_label,
            "gpu_memory_utilization": b.utilization,
            "requested_memory_bytes": b.requested,
            "weights_bytes_per_gpu": b.weights,
            "weights_total_bytes": self.weights_total_bytes,
            "weights_estimated": self.weights_estimated,
            "rope_cache_bytes": self.rope_cache_bytes,
            "lora_bytes_per_gpu": self.lora_bytes,
            "speculative": {"method": a.speculative.method,
                            "num_speculative_tokens": a.speculative.num_speculative_tokens,
                            "draft_layers": self.draft_layers,
                            "draft_weights_bytes_per_gpu": self.draft_bytes}
            if a.speculative else None,
            "load_extra_bytes": self.load_extra_bytes,
            "activation_bytes": b.activation,
            "non_torch_bytes": b.non_torch,
            "cudagraph_bytes": b.cudagraph,
            "cudagraph_graphs": self.cudagraph_graphs,
            "drafter_cudagraph_graphs": self.drafter_cudagraph_graphs,
            "cudagraph_mode": self.cudagraph_mode,
            "breakable_cudagraph": self.breakable_cudagraph,
            "moe_kernel": self.moe_kernel,
            "moe_workspace_bytes": self.moe_workspace_bytes,
            "moe_call_scratch_bytes": self.moe_call_scratch_bytes,
            "moe_workspace_kept": self.moe_workspace_kept if self.moe_kernel else None,
            "all2all_buffer_bytes": self.all2all_buffer_bytes,
            "runner": "pooling" if self.pooling else "generate",
            "sampler_state_bytes": self.sampler_state_bytes,
            "outside_budget_bytes": self.outside_budget_bytes,
            "kv_cache_memory_bytes_max": self.kv_cache_memory_bytes_max,
            "safe_gpu_memory_utilization": self.safe_gpu_memory_utilization,
            "available_kv_bytes": b.available_kv,
            # per pipeline stage; the first stage's figures are what vLLM logs
            "pipeline_stages": [dict(x) for x in self.stages],
            "frontend_mm_reserved_bytes": b.frontend_reserved,
            "smallest_worker_shortfall_bytes": b.rank_deficit,
            "kv_pool_bytes": b.kv_pool,
            "kv_bytes_per_token": self.kv_bytes_per_token_replica,
            "kv_bytes_per_token_per_gpu": self.kv_bytes_per_token_per_gpu,
            "kv_bytes_per_token_model": self.kv_bytes_per_token_model,
            "state_bytes_per_request_per_gpu": self.state_bytes_per_request_per_gpu,
            "fixed_blocks_per_request": self.fixed_blocks_per_request,
            "block_size": self.block_size,
            "bytes_per_block": self.bytes_per_block,
            "num_kv_cache_groups": len(self.groups),
            "num_gpu_blocks": self.num_gpu_blocks,
            "usable_blocks": self.usable_blocks,
            "blocks_per_request": self.blocks_per_request,
            "inflight_tokens": self.inflight_tokens,
            "kv_cache_tokens": self.kv_cache_tokens,
            "kv_cache_tokens_per_cluster": self.kv_cache_tokens * a.data_parallel_size,
            "max_model_len": self.max_model_len,
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_concurrency": round(self.max_concurrency, 2),
            "concurrency_at": {str(k): v for k, v in self.concurrency_at.items()},
            "fits": self.fits,
            "failure": self.failure,
            "largest_max_model_len": self.largest_max_model_len,
            "max_num_seqs_limit": self.max_num_seqs_limit,
            "vision_profile": None if self.vision_profile is None else {
                "modality": self.vision_profile.modality,
                "items": self.vision_profile.items,
                "tokens_per_item": self.vision_profile.tokens_per_item,
                "encoder_peak_bytes": self.vision_profile.encoder_peak},
            "notes": self.notes,
        }

    @property
    def fixed_blocks_per_request(self) -> int:
        """Blocks a request holds whatever its length: Mamba states, and DeepSeek-V4's
        sliding-window and compressor-state groups (at admission)."""
        return sum(g.blocks_per_request(self.max_model_len, self.inflight_tokens)
                   for g in self.groups if g.spec.is_state or (
                       self.arch.packed_kv and g.block_size != self.block_size))


def _stall_note(groups: list[B.Group], usable: int, mml: int, version: VllmVersion) -> list[str]:
    """vLLM 0.19.x: prompts its whole-prompt admission check never passes
    (`B.whole_prompt_limit`), when some are under max_model_len."""
    n = B.whole_prompt_limit(groups, usable, mml)
    if n >= mml - 1:
        return []
    local = sum(g.spec.kind in (SLIDING, CHUNKED) for g in groups)
    return [f"vLLM {version.text}'s whole-prompt admission check charges each of the {local} "
            f"sliding-window groups the whole prompt, not its window "
            f"(`KVCacheManager.can_fit_full_sequence`): a prompt over {n:,} tokens never fits "
            f"the {usable:,} usable blocks, and the scheduler stops the waiting queue at it for "
            f"good, every request behind it included. --max-model-len {n + 1} has vLLM refuse "
            f"such prompts with HTTP 400 instead; vLLM 0.20+ charges only the window"]


# --- defaults --------------------------------------------------------------------------------

def derived_max_model_len(arch: ModelArch, version: VllmVersion) -> tuple[int, str]:
    """The longest max_model_len vLLM allows for the config, and where it comes from: before
    0.30 YaRN scales its original length (`arch.max_model_len_of`)."""
    if version.at_least(0, 30):
        return arch.max_position, arch.max_position_source
    n, src = max_model_len_of(arch.text_config, yarn_from_original=True,
                              model_max_length_wins=version.at_least(0, 8, 3))
    if not version.at_least(0, 6, 5):  # interleaved attention off, the length capped to the
        t = arch.text_config            # window (`ModelConfig.__init__`, 0.6.0-0.6.4)
        sw = t.get("sliding_window")
        w = min(sw) if isinstance(sw, list) and sw else sw if isinstance(sw, int) and (
            arch.model_type == "gemma2") else 0
        if w and w < n:
            return w, (f"the sliding window: vLLM {version.text} turns {arch.model_type}'s "
                       "interleaved attention off and caps the length to it")
    return n, src


def batch_defaults(gpu: Gpu, version: VllmVersion, usage: str, world_size: int) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) vLLM picks when the user sets neither.

    `EngineArgs.get_batch_defaults` (0.11.1+; `_set_default_args_v1` before): by device
    memory and name; A100s stay on the small tier from 0.9.0 (PR #17885). 0.8.0-0.8.3 take
    1,024 sequences on every GPU and the larger budget only for a device named H100 / H200
    (0.8.4 the 1,024 sequences only there too, 256 elsewhere);
    to 0.9.1 the engine context gets the same sequences, from 0.9.2 `SchedulerConfig`'s 128.
    """
    if not version.v1:
        return 2048, 256
    mem, name = gpu.memory_bytes, gpu.name.lower()
    serve = usage != "llm"
    if not version.at_least(0, 8, 5):  # `_set_default_args_v1` (0.8.0-0.8.4 wheels)
        big = "h100" in name or "h200" in name  # 0.8.4 sizes the sequences by it too
        return (2048 if usage == "engine" else (8192 if serve else 16384) if big
                else (2048 if serve else 8192)), (
            1024 if big or not version.at_least(0, 8, 4) else 256)
    if version.largest_batch_tier and mem >= 160 * GiB:
        return (2048, 128) if usage == "engine" else (16384, 1024)
    # GB10 (DGX Spark, unified memory) stays on the small tier: NVML has no memory info for
    # it, so `get_device_total_memory` raises and the defaults see 0 bytes (0.10-0.32; the
    # logs show 2,048 / 256), and 0.33 keeps it there on purpose ("has the memory but not
    # the compute of a large discrete GPU", `is_gb10`)
    gb10 = gpu.unified_memory or gpu.compute_capability == "12.1" and version.at_least(0, 33)
    big = mem >= 70 * GiB and not gb10 and ("a100" not in name or not version.at_least(0, 9))
    if usage == "engine":  # no usage-context entry: `SchedulerConfig.DEFAULT_MAX_NUM_*`
        return 2048, 128 if version.at_least(0, 9, 2) else (1024 if big else 256)
    if big:
        return (8192 if serve else 16384), 1024
    return (2048 if serve else 8192), 256


def v0_chunks_long_prompts(arch: ModelArch, a: EngineArgs, vendor: str,
                           version: VllmVersion) -> bool:
    """Whether the V0 engine turns chunked prefill on for a max_model_len over 32K
    (`create_engine_config` in 0.6.x/0.7.3, `_set_default_args_v0` in 0.8-0.10): not for a
    multimodal model, MLA (0.8+), ROCm (0.6.5+; its device type read "cuda" before), a model
    with a sliding window, speculative decoding or LoRA; without it the profile runs the
    whole max_model_len at once."""
    multimodal = arch.vision_config is not None or arch.audio_config is not None
    return not (multimodal or arch.is_mla and version.at_least(0, 8)
                or vendor != "nvidia" and version.at_least(0, 6, 5)  # ROCm: "cuda" before
                or SLIDING in arch.kinds or a.speculative or a.enable_lora)


def _draft_max_model_len(spec: Any, version: VllmVersion, v2: bool, mml: int, src: str,
                         notes: list[str]) -> tuple[int, str]:
    """A separate draft's max_model_len (`SpeculativeConfig._maybe_override_draft_max_model_len`:
    its config's, or the speculative config's own `max_model_len`, at most the target's) and
    the target's as vLLM leaves it: from 0.33 model runner V2 lowers it to a shorter draft's
    when the draft does not share the target's positions (`VllmConfig.
    _limit_max_model_len_to_draft`: draft_model, or a rope type that is more than a cache)."""
    from kvplan.core import specdec as SD

    da = SD.draft_arch(spec)
    if da is None or spec.method == "mtp":
        return mml, src
    own = derived_max_model_len(da, version)[0]
    if spec.max_model_len is not None:
        if spec.max_model_len > min(own, mml):
            raise BadInput(f"--speculative-config max_model_len {spec.max_model_len} is larger "
                           f"than the {'draft' if own < mml else 'target'} model's "
                           f"{min(own, mml)}; vLLM refuses it", flag="speculative_config")
        own = spec.max_model_len
    if own >= mml or not v2 or not version.at_least(0, 33) or SD.draft_shares_positions(
            spec, version):
        return mml, src
    notes.append(f"vLLM {version.text} lowers max_model_len from {mml:,} to the draft model's "
                 f"{own:,}: model runner V2 cannot skip speculation for longer sequences "
                 "(`_limit_max_model_len_to_draft`)")
    return own, f"{DRAFT_LEN_SOURCE}; {mml:,} from {src}"


def _dcp_specs(specs: list[Spec | None], dcp: int, version: VllmVersion
               ) -> list[Spec | None]:
    """Decode context parallelism: each rank keeps every `dcp`-th token of a request, so a
    block spans `block_size x dcp` tokens (`resolve_dcp_kv_block_size`); full attention and
    MLA only (vLLM 0.11 asserts it off for sliding windows). From 0.26 a hybrid's Mamba /
    linear-attention states stay whole on every rank (`HybridKVCacheCoordinator`: "DCP
    shards full-attention KV across ranks and replicates Mamba state")."""
    kinds = {s.kind for s in specs if s is not None}
    if SLIDING in kinds:  # `SlidingWindowSpec.max_memory_usage_bytes` (0.33)
        raise BadInput(f"vLLM refuses --decode-context-parallel-size {dcp} for a model with "
                       "sliding-window layers ('DCP not support sliding window')",
                       hint="drop -dcp", flag="decode_context_parallel_size")
    states = {s.kind for s in specs if s is not None and s.is_state}
    if kinds - {FULL, MLA, INDEXER} - (states if version.at_least(0, 26) else set()):
        raise BadInput(f"kvplan models --decode-context-parallel-size {dcp} for full-attention "
                       f"and MLA layers (and, from vLLM 0.26, beside Mamba / linear-attention "
                       f"states) only; this model also has {', '.join(sorted(kinds))}")
    return [s if s is None or s.is_state else replace(s, dcp=dcp) for s in specs]


def _validate_act_order(arch: ModelArch, version: VllmVersion) -> None:
    """0.30+ refuse group activation ordering: GPTQ `desc_act` with a group size
    (`gptq_utils.normalize_and_validate_gptq_desc_act`, for gptq/gptq_marlin and moe_wna16,
    its `dynamic` overrides included) and compressed-tensors `actorder` group/dynamic
    (`CompressedTensorsConfig._quantization_scheme_map_from_config`; `true` validates as
    group); the 0.30-0.33 wheels, absent in 0.29."""
    q = arch.quantization or {}
    if not version.at_least(0, 30) or not isinstance(q, dict):
        return
    method = str(q.get("quant_method", "")).lower()
    why = None
    if method == "gptq":
        gs = q.get("group_size")
        rules = [("", q)] + [(p, o) for p, o in (q.get("dynamic") or {}).items()
                             if isinstance(o, dict) and not str(p).startswith("-:")]
        for pattern, o in rules:
            if o.get("desc_act", q.get("desc_act")) and o.get("group_size", gs) != -1:
                why = ("GPTQ group activation ordering (desc_act=True)"
                       + (f", enabled by dynamic rule {pattern!r}," if pattern else ""))
                break
    elif method == "compressed-tensors":
        for g in (q.get("config_groups") or {}).values():
            order = ((g or {}).get("weights") or {}).get("actorder")
            if order is True or str(order).lower() in ("group", "dynamic"):
                why = (f"compressed-tensors group/dynamic activation ordering "
                       f"(actorder={order!r})")
                break
    if why:
        raise BadInput(f"vLLM {version.text} refuses this checkpoint: {why} is no longer "
                       "supported", hint="use a checkpoint without group activation ordering "
                       "(desc_act=False / actorder static or weight), or vLLM 0.29")


def _validate_fp8_blocks(model: Model, arch: ModelArch, a: EngineArgs,
                         version: VllmVersion) -> None:
    """Block-quantized FP8 checkpoints (`weight_block_size`): vLLM refuses a TP size that
    splits the MLP or expert intermediate into slices that are not whole quantization blocks
    (`Fp8MoEMethod.create_weights` / `validate_fp8_block_shape_moe`: "The output_size of gate's
    and up's weight = N is not divisible by weight quantization block_n"; `validate_fp8_block_
    shape` for the dense down projection); from 0.29 the experts take a finer block instead
    where one fits (`moekernel.fp8_moe_refined_block`)."""
    q = arch.quantization or {}
    block = q.get("weight_block_size")
    tp = a.tensor_parallel_size
    if (str(q.get("quant_method", "")).lower() != "fp8" or not block or len(block) != 2
            or model.hf_quant_config or (tp == 1 and a.expert_tp == 1)):
        return
    bn, bk = int(block[0]), int(block[1])
    experts_fp8 = str(arch.text_config.get("expert_dtype", "fp8")).lower() not in ("fp4",)
    parts = []  # (what, full intermediate, its TP split, whether expert parallelism avoids it)
    moe_i = arch.expert_intermediate_size
    if moe_i and experts_fp8 and not MK.fp8_moe_refined_block(arch, a, version):
        # without expert parallelism each expert is split over TP x DP (`moe_ranks`)
        parts.append(("the experts' intermediate", moe_i, a.expert_tp,
                      not a.enable_expert_parallel))
    dense = int(arch.text_config.get("intermediate_size") or 0)
    if dense and (not arch.num_experts or (arch.moe_intermediate_size and int(
            arch.text_config.get("first_k_dense_replace") or 0))):
        parts.append(("the MLP intermediate", dense, tp, False))

    def whole(n: int) -> bool:
        return n % bn == 0 and n % bk == 0

    dp = a.data_parallel_size
    for what, full, split, ep_fixes in parts:
        if not whole(full // split):
            over_dp = split > tp  # the experts split over TP x DP
            ok = [t for t in (1, 2, 4, 8, 16) if t < tp and whole(full // t)]
            hint = ("use fewer data-parallel ranks" if over_dp else
                    f"use --tensor-parallel-size {max(ok)}" if ok else
                    "use fewer GPUs per replica") + (
                ", or add --enable-expert-parallel" if ep_fixes else "")
            layout = (f"--tensor-parallel-size {tp} with --data-parallel-size {dp} (the "
                      "experts split over both)" if over_dp else f"--tensor-parallel-size {tp}")
            raise BadInput(f"vLLM rejects {layout} for this FP8 "
                           f"block-quantized checkpoint: {what} per GPU ({full // split}) is "
                           f"not a multiple of its {bn}x{bk} quantization blocks", hint=hint,
                           flag="tensor_parallel_size")


def _validate_parallel(arch: ModelArch, a: EngineArgs, version: VllmVersion) -> None:
    for name in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
                 "decode_context_parallel_size"):
        if getattr(a, name) < 1:
            raise BadInput(f"--{name.replace('_', '-')} must be >= 1")
    if a.usage == "llm" and a.data_parallel_size > 1 and version.at_least(0, 11, 1):
        # `LLM.__init__`: "LLM(data_parallel_size=N) is not supported for single-process
        # usage and may hang" (0.11.1-0.33)
        raise BadInput(f"vLLM {version.text}'s LLM class refuses data_parallel_size "
                       f"{a.data_parallel_size}", hint="serve with `vllm serve -dp`, or run one "
                       "LLM per GPU group", flag="data_parallel_size")
    if a.dcp_q_replicate and not version.at_least(0, 29):  # the flag arrives in 0.29
        raise BadInput(f"vLLM {version.text} has no --dcp-q-replicate ('unrecognized "
                       "arguments')", hint="on 0.27-0.28 set --env VLLM_DCP_Q_REPLICATE=1"
                       if version.at_least(0, 27) else "q-replication arrives in vLLM 0.27",
                       flag="dcp_q_replicate")
    _validate_nnodes(a, version)
    if a.num_gpu_blocks_override is not None and a.num_gpu_blocks_override < 1:
        raise BadInput(f"--num-gpu-blocks-override {a.num_gpu_blocks_override}: vLLM has no "
                       "free block to start with ('No free blocks available')",
                       hint="give at least 2 blocks, or drop it", flag="num_gpu_blocks_override")
    if a.kv_cache_memory_bytes is not None and a.kv_cache_memory_bytes < 0:
        raise BadInput("--kv-cache-memory-bytes must not be negative",
                       flag="kv_cache_memory_bytes")
    tp = a.tensor_parallel_size
    dcp = a.decode_context_parallel_size
    if dcp > 1 and not version.at_least(0, 10, 2):
        raise BadInput(f"vLLM {version.text} has no --decode-context-parallel-size",
                       hint="it arrived in 0.10.2")
    if tp % dcp:
        raise BadInput(f"vLLM rejects --decode-context-parallel-size {dcp}: "
                       f"--tensor-parallel-size {tp} is not divisible by it",
                       hint="DCP splits the TP group; use a divisor of the TP size")
    why = tp_refusal(arch, tp)
    if why:
        raise BadInput(f"vLLM rejects --tensor-parallel-size {tp}: {why}",
                       hint=f"use one of {', '.join(map(str, valid_tps(arch)))}")
    if a.pipeline_parallel_size > arch.num_layers:
        raise BadInput(f"--pipeline-parallel-size {a.pipeline_parallel_size} exceeds the "
                       f"model's {arch.num_layers} layers",
                       hint="give each stage at least one layer; use TP for more GPUs")
    no_pp = next((x for x in arch.architectures if x in NO_PIPELINE and (
        NO_PIPELINE[x] is None or not version.at_least(*NO_PIPELINE[x]))), None)
    if a.pipeline_parallel_size > 1 and no_pp:
        raise BadInput(f"vLLM refuses --pipeline-parallel-size {a.pipeline_parallel_size} for "
                       f"{no_pp} (\"Pipeline parallelism is not supported for this model\": "
                       "no SupportsPP)", hint="use tensor parallelism instead" + (
                           f", or vLLM {'.'.join(map(str, NO_PIPELINE[no_pp]))}+ which has it"
                           if NO_PIPELINE[no_pp] else ""), flag="pipeline_parallel_size")
    if a.gpu_memory_utilization is not None and not 0 < a.gpu_memory_utilization <= 1:
        raise BadInput("--gpu-memory-utilization must be in (0, 1]",
                       hint="it is a fraction of the GPU's total memory, e.g. 0.9")
    if a.block_size is not None and a.block_size < 1:
        raise BadInput("--block-size must be a positive integer")
    if not 0 <= a.cpu_offload_gb < math.inf:
        raise BadInput("--cpu-offload-gb must be a number >= 0")
    if not 0 <= a.mm_ipc_gpu_memory_gb < math.inf:
        raise BadInput("--mm-ipc-gpu-memory-gb must be a number >= 0")
    if a.api_server_count is not None and a.api_server_count < 0:
        raise BadInput("--api-server-count must be >= 0")
    if a.mm_ipc_gpu_memory_gb and not version.at_least(0, 25):
        raise BadInput(f"vLLM {version.text} has no --mm-ipc-gpu-memory-gb",
                       hint="it arrived in 0.25")
    for name in ("max_num_seqs", "max_num_batched_tokens"):
        v = getattr(a, name)
        if v is not None and v < 1:
            raise BadInput(f"--{name.replace('_', '-')} must be >= 1")


def _validate_nnodes(a: EngineArgs, version: VllmVersion) -> None:
    """`--nnodes` as `EngineArgs.create_engine_config` takes it: the flag arrives in 0.11.1,
    and the hosts must split the world (TP x PP x DP) evenly, an assertion in 0.11.1-0.26
    and a ValueError from 0.27 (the 0.11.1-0.33 wheels)."""
    nn = a.nnodes
    if nn < 1:
        raise BadInput(f"--nnodes must be at least 1, got {nn}", flag="nnodes")
    if nn == 1:
        return
    if not version.at_least(*NNODES_FROM):
        raise BadInput(f"vLLM {version.text} has no --nnodes ('unrecognized arguments')",
                       hint="it arrived in 0.11.1; earlier releases span hosts with Ray",
                       flag="nnodes")
    world = a.tensor_parallel_size * a.pipeline_parallel_size * a.data_parallel_size
    if world % nn:
        said = (f"'Invalid data-parallel launch options: `--nnodes {nn}` must evenly divide "
                f"the total world size ({world})'" if version.at_least(0, 27) else
                f"'world_size={world} must be divisible by nnodes={nn}.'")
        ok = [str(d) for d in range(1, world + 1) if world % d == 0]
        raise BadInput(f"vLLM {version.text} refuses --nnodes {nn} for {world} GPU"
                       f"{'s' * (world != 1)} (TP x PP x DP): {said}",
                       hint=f"use --nnodes {', '.join(ok[:-1]) + ' or ' if ok[:-1] else ''}"
                       f"{ok[-1]}, a divisor of the GPU count", flag="nnodes")


# --- weights ---------------------------------------------------------------------------------

# `models/deepseek_v2.py` `DeepseekV2MLAAttention` reads dcp_q_replicate (0.29+; the env
# var alone 0.27-0.28, and it wins when set 0.29+), and so does every model built on it
# (GLM-4.7-Flash's `Glm4MoeLiteMLAAttention`, LongCat-Flash, Mistral Large 3 through
# DeepseekV3ForCausalLM); GLM-5 and DeepSeek-V3.2 load the DSA package
# (`models/deepseek_v32`), whose CUDA and ROCm classes build a plain ColumnParallelLinear
Q_REPLICATE_ARCHS = ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM",
                     "KimiK25ForConditionalGeneration", "Glm4MoeLiteForCausalLM",
                     "LongcatFlashForCausalLM", "MistralLarge3ForCausalLM")


def mm_pixels(a: EngineArgs, version: VllmVersion, notes: list[str] | None = None,
              architectures: list[str] | tuple[str, ...] = (),
              native: bool = False) -> ProcessorPixels:
    """The dummy image / video frame `--mm-processor-kwargs` sets for the profile: Qwen VL
    from 0.17 (`get_merged_mm_kwargs`), per modality from 0.31; HF-format Mistral 3 from
    0.29 (`get_vision_encoder_info`; Mistral's own format takes mistral_common's size).
    0.12-0.16 build the processor without these per-call keys, so their profile keeps the
    defaults (vllm#27981); how 0.11 and earlier pass them to the processor is not modelled."""
    if not a.mm_processor_kwargs:
        return ProcessorPixels()
    pixtral = any(x in PIXTRAL for x in architectures)
    since = (0, 29) if pixtral else (0, 17)
    if pixtral and (native or "Mistral3ForConditionalGeneration" not in architectures) \
            or not version.at_least(*since):
        if notes is not None:
            notes.append(f"--mm-processor-kwargs: kvplan sizes vLLM {version.text}'s profile "
                         "with the processor's default largest image and video" + (
                             " (0.12-0.16 leave the profile at the defaults)"
                             if version.at_least(0, 12) and not pixtral else ""))
        return ProcessorPixels()
    if pixtral:  # only `size` (not Qwen's max_pixels alias); per modality in 0.33
        kw = a.mm_processor_kwargs
        scoped = kw.get("images_kwargs") if version.at_least(0, 33) else None
        edge = next((d["size"].get("longest_edge") for d in (scoped, kw)
                     if isinstance(d, dict) and isinstance(d.get("size"), dict)
                     and d["size"].get("longest_edge") is not None), None)
        if edge is not None and (isinstance(edge, bool) or not isinstance(edge, (int, float))
                                 or not 0 < edge < 1 << 20):
            raise BadInput(f"--mm-processor-kwargs size.longest_edge must be a positive "
                           f"number of pixels, got {edge!r}")
        return ProcessorPixels(edge=int(edge) if edge else None,
                               edge_floor=not version.at_least(0, 31))
    return processor_pixels(a.mm_processor_kwargs, scoped=version.at_least(0, 31))


def _q_groups(arch: ModelArch, a: EngineArgs, version: VllmVersion) -> int:
    """The DCP size an MLA q_b_proj is replicated over (1: split by TP as usual): with
    `--dcp-q-replicate` (or VLLM_DCP_Q_REPLICATE) and -dcp > 1 (prefill context parallelism,
    which turns it off, is not sized)."""
    asked = a.dcp_q_replicate_env if a.dcp_q_replicate_env is not None and version.at_least(
        0, 27) else a.dcp_q_replicate and version.at_least(0, 29)
    if not (asked and a.decode_context_parallel_size > 1
            and any(x in Q_REPLICATE_ARCHS for x in arch.architectures)):
        return 1
    return a.decode_context_parallel_size


def _mla_as_mha(arch: ModelArch, version: VllmVersion) -> ModelArch:
    """DeepSeek-V2/V3 where vLLM keeps no MLA cache (`VllmVersion.mla_cache`): every head's
    K and V, the config's KV heads of qk_nope + qk_rope, padded to 256 before 0.7.1
    (`ModelConfig.get_head_size`: "FlashAttention supports only head_size 32, 64, 128,
    256")."""
    t = arch.text_config
    hs = int(t.get("qk_nope_head_dim") or 0) + int(t.get("qk_rope_head_dim") or 0)
    hs = 256 if not version.at_least(0, 7, 1) else hs
    kv = int(t.get("num_key_value_heads") or arch.num_attention_heads)
    return replace(arch, layers=[AttnLayer(FULL, kv, hs, hs) if isinstance(x, AttnLayer)
                                 and x.kind == MLA else x for x in arch.layers])


def _weights_per_stage(model: Model, arch: ModelArch, a: EngineArgs, model_dtype: str,
                       stages: list[range], cc: str, *, mla_absorb: bool = True,
                       mistral_native: bool = False, fi_pad: float = 1.0,
                       fp32_router: bool = False, kv_unused: bool = False,
                       mxfp4_scales_kept: bool = False,
                       marlin_scales: tuple[float, float] = (0.0, 0.0),
                       towers_every_stage: bool = False, vendor: str = "nvidia",
                       release: tuple[int, int] = (0, 33),
                       indexer_wk_16bit: bool = False,
                       q_groups: int = 1, no_head: bool = False, ep_even: bool = True,
                       shared_whole: bool = False,
                       fp32_head: bool = False) -> tuple[list[int], int, bool]:
    """Weight bytes on the most loaded GPU of each stage, total bytes, estimated?

    Parameters are counted per part and per rank (TP-split, replicated, experts split by EP,
    K/V replicated past the head count); an exact checkpoint size rescales the estimate so
    the parts keep their proportions and the total matches the checkpoint. `fi_pad`: what
    FlashInfer's MoE kernels' padding multiplies the routed experts by (`moekernel.fi_expert_pad`);
    `fp32_router`: the routers are held in fp32 (Nemotron-H off Hopper/Blackwell);
    `fp32_head`: the LM head is cast to fp32 after it is built (MiniMax-Text-01's
    `self.lm_head.float()`);
    `kv_unused`: KV-sharing layers still allocate K/V projections (Gemma 4 up to 0.29);
    `marlin_scales`: bytes a block-FP8 weight gains on FP8 Marlin, (linears, experts)
    (`fp8_marlin_scales`), added after the rescaling as the load-time copy it is;
    `towers_every_stage`: the multimodal towers are built on every pipeline stage;
    `vendor`, `release`: what MXFP4 expert padding depends on (`expert_padding`);
    `indexer_wk_16bit`: a sparse-MLA indexer's quantized wk is upcast to the model dtype at
    load (0.20+ `wk_weights_proj`, `quant_config=None`), also after the rescaling.
    `q_groups`: `--dcp-q-replicate`'s DCP size, over which an MLA q_b_proj is split TP / dcp
    ways instead of TP (`DCPGroupColumnParallelLinear`), added after the rescaling too.
    Some models build the embedding or the LM head on every stage (`pipeline.py`).
    `no_head`: a pooling model, whose untied LM head vLLM does not build (`no_init_weights`
    in `adapters.py`), though the checkpoint may store it.
    `ep_even`: expert parallelism gives a remainder of experts one each to the first ranks
    (0.10.1+), else all to the last rank (`determine_expert_map`).
    `shared_whole`: sequence-parallel MoE builds the shared experts whole on every TP rank
    (`VllmVersion.sp_moe_shared_whole`).
    """
    tp = a.tensor_parallel_size
    ep = a.moe_ranks  # routed experts split by expert (EP) or by rows
    if a.enable_expert_parallel and not a.enable_eplb and arch.num_experts % ep:
        # the most loaded rank holds more than the average (EPLB needs them to divide)
        e = arch.num_experts
        ep = e / (-(-e // ep) if ep_even else e // ep + e % ep)
    embed_all = arch.model_type in EMBED_EVERY_STAGE
    head_all = arch.model_type in LM_HEAD_EVERY_STAGE
    pad = expert_padding(arch, a.expert_tp, a.quantization, cc, scales_kept=mxfp4_scales_kept,
                         vendor=vendor, release=release) * fi_pad * eplb_copies(arch, a)
    tower_tp = tp if towers_tp_sharded(  # ranks a tower is split over
        arch.architectures, mistral_native=mistral_native,
        encoder_dp=a.mm_encoder_tp_mode == "data") else 1
    d = dtype_bytes(model_dtype)
    quantized_ckpt = bool(arch.quantization or model.quant_file)
    fp32 = canonical(arch.config_dtype) == "float32" and not quantized_ckpt
    shrink = d / 4 if fp32 else 1.0  # fp32 checkpoint loaded as 16-bit
    # online quantization (`-q fp8` / `-q bitsandbytes` on a 16-bit checkpoint) shrinks the
    # linear layers as they load; embeddings, LM head and norms keep the model dtype
    online = online_exp = 1.0  # linear layers, routed experts (experts_int8, mxfp4: only them)
    if a.quantization and not quantized_ckpt:
        ob = weight_bytes(arch, d, a.quantization)
        online, online_exp = ob.linear / d, ob.expert / d
    pc = count_params(arch)
    # the checkpoint as stored (for scaling to its exact size), then online quantization
    wb = weight_bytes(arch, d, None, model.quant_file)
    # `MLACommonImpl.process_weights_after_loading` (V1): a quantized kv_b_proj is dequantized
    # into a 16-bit copy (the W_UK_T / W_UV views) kept next to it
    absorb = mla_absorb and wb.kv_b_bytes * online < d
    # AWQ / GPTQ as the chosen kernel holds it, less as stored (added after the rescaling);
    # `-q gptq` / `-q awq` pick ExLlama / AWQ's GEMM kernels, which keep the stored bytes
    wna16 = wna16_held_delta(arch, cc, vendor, release, a.expert_tp) if (
        arch.quantization and not model.quant_file
        and str(a.quantization or "").lower() not in ("gptq", "awq")) else (0.0, 0.0)
    # MXFP4 experts: fp32 biases (Hopper, SM100, ROCm), Hopper's padded swizzled scales
    mxfp4 = str(a.quantization or (arch.quantization or {}).get("quant_method", "")).lower()
    mx_extra = (mxfp4_hopper_extra(arch, a.expert_tp, release)
                 if vendor == "nvidia" and cc_major(cc) == 9
                 else mxfp4_bias_extra(arch, a.expert_tp, cc, vendor, release)) if (
        mxfp4 == "mxfp4" and arch.num_experts) else 0

    def fp8_share(b: float) -> float:  # the 1-byte part of a part priced at b a parameter
        return max(0.0, (d - b) / (d - 1)) if d > 1 else 0.0

    def mla_up(rng: range) -> float:
        up = sum(pc.layers[i].mla_up for i in rng) / tp * d if absorb else 0.0
        if marlin_scales[0] or marlin_scales[1]:  # FP8 Marlin's expanded group scales
            for i in rng:
                lp = pc.layers[i]
                lin = ((lp.split - lp.mlp - lp.state) * fp8_share(wb.linear)
                       + lp.mlp * fp8_share(wb.mlp_bytes)
                       + lp.state * fp8_share(wb.state_bytes)) / tp
                up += (lin * marlin_scales[0]
                       + lp.expert / ep * fp8_share(wb.expert) * marlin_scales[1])
        if wna16[0] or wna16[1]:
            for i in rng:
                lp = pc.layers[i]
                kv = lp.kv_proj * max(1, lp.kv_heads // tp) / lp.kv_heads if lp.kv_heads else 0
                lin = sum(n for n, b in (((lp.split - lp.mlp - lp.state) / tp + kv, wb.linear),
                                         (lp.mlp / tp, wb.mlp_bytes),
                                         (lp.state / tp, wb.state_bytes)) if b < d)
                up += lin * wna16[0] + lp.expert / ep * wna16[1] * (wb.expert < d)
        if mx_extra:
            local = arch.num_experts / (ep if a.enable_expert_parallel else 1)
            up += sum(local * mx_extra for i in rng if pc.layers[i].expert)
        up += sum(act_order_scales(arch, pc.layers[i], arch.layers[i], tp, release)
                  for i in rng)
        if q_groups > 1:  # each rank holds its DCP group's q heads
            up += sum(pc.layers[i].mla_q for i in rng) * (q_groups - 1) / tp * wb.linear
        if indexer_wk_16bit and wb.repl_bytes < d:  # hidden x index_head_dim, replicated
            wk = arch.hidden_size * int(arch.text_config.get("index_head_dim") or 128)
            up += sum(wk for i in rng if getattr(arch.layers[i], "indexer_bytes", 0)) * (
                d - wb.repl_bytes)
        return up

    keep_vision, keep_audio = towers_kept(arch.architectures, a.limit_mm_per_prompt,
                                          a.language_model_only)
    towers = pc.vision * keep_vision + pc.audio * keep_audio  # as loaded
    whole = pc.vision_whole * keep_vision if tower_tp > 1 else 0  # whole on every rank
    if model.weights_layout and len(model.weights_layout.get("layers", [])) == arch.num_layers:
        ts = TensorSummary.from_json(model.weights_layout)
        # the layout lumps the towers: dropped ones leave by the config's proportions
        tower = ts.vision * towers / (pc.vision + pc.audio) if pc.vision + pc.audio else 0
        tower_whole = ts.vision * whole / (pc.vision + pc.audio) if pc.vision + pc.audio else 0
        out = []
        for si, rng in enumerate(stages):
            b = 0.0
            for i in rng:
                lb, kvh = ts.layers[i], _kv_heads(arch.layers[i])
                b += lb.split / tp * online + lb.expert * pad / ep * online_exp + lb.replicated
                if shared_whole and lb.expert:  # the shared expert's other TP shares
                    b += pc.layers[i].mlp * wb.mlp_bytes * (1 - 1 / tp) * online
                b += (lb.kv * max(1, kvh // tp) / kvh if kvh else lb.kv / tp) * online
            if si == 0 or embed_all:
                b += ts.embed / tp
            if si == 0 or towers_every_stage:
                b += (tower - tower_whole) / tower_tp + tower_whole
            if si == len(stages) - 1:
                tied_copy = ts.embed if si and not embed_all else 0
                b += (0 if no_head else ts.lm_head or tied_copy) / tp * (
                    4 / d if fp32_head else 1) + ts.other_split
            elif head_all and not no_head:
                b += (ts.lm_head or 0) / tp
            out.append(int(b * shrink + mla_up(rng)))
        return out, int((ts.loaded - ts.vision + tower - (ts.lm_head if no_head else 0))
                        * shrink), False
    vision = towers
    per_stage = []
    for si, rng in enumerate(stages):
        attn = mlp = state = repl_lin = expert = other = head = 0.0
        for i in rng:
            lp = pc.layers[i]
            kv_local = lp.kv_proj * max(1, lp.kv_heads // tp) / lp.kv_heads if lp.kv_heads else 0
            attn += (lp.split - lp.mlp - lp.state + lp.kv_unused * kv_unused) / tp + kv_local
            repl_lin += lp.repl_quant
            mlp += lp.mlp if shared_whole and lp.expert else lp.mlp / tp
            state += lp.state / tp
            other += lp.replicated - lp.repl_quant
            expert += lp.expert / ep
        if fp32_router:  # the router rows are `replicated`, priced at 4 B instead
            other += sum(pc.layers[i].router for i in rng) * (4 / wb.other - 1)
        if si == 0 or embed_all:
            other += pc.embed / tp
        if si == 0 or towers_every_stage:
            other += (vision - whole) / tower_tp + whole
        if no_head:
            pass
        elif si == len(stages) - 1 and (pc.lm_head or (si and not embed_all)):
            head = (pc.lm_head or pc.embed) / tp
        elif si < len(stages) - 1 and head_all:
            head = pc.lm_head / tp
        per_stage.append(((attn * wb.linear + mlp * wb.mlp_bytes + state * wb.state_bytes
                           + repl_lin * wb.repl_bytes) * online,
                          expert * wb.expert * online_exp,
                          other * wb.other + head * (4 if fp32_head else wb.lm_head_bytes),
                          mla_up(rng)))
    # the checkpoint as stored: with every tower and the KV-sharing layers' K/V
    quantizable = (sum(x.split - x.mlp - x.state + x.kv_proj + x.kv_unused
                       for x in pc.layers) * wb.linear
                   + sum(x.repl_quant for x in pc.layers) * wb.repl_bytes
                   + sum(x.mlp for x in pc.layers) * wb.mlp_bytes
                   + sum(x.state for x in pc.layers) * wb.state_bytes + pc.experts * wb.expert)
    rest = ((pc.embed + pc.vision + pc.audio
             + sum(x.replicated - x.repl_quant for x in pc.layers))
            * wb.other
            + pc.lm_head * wb.lm_head_bytes)
    # the MTP modules a checkpoint carries, which vLLM skips unless it drafts with them (then
    # `specdec.draft_weight_bytes` adds them): stored, so part of an exact size
    mtp = mtp_checkpoint_bytes(arch, d, model.quant_file) if model.weights_bytes else 0
    est_total = quantizable + rest + mtp
    skipped = (pc.vision + pc.audio - vision) * wb.other + mtp + (
        0 if kv_unused else sum(x.kv_unused for x in pc.layers) * wb.linear * online) + (
        pc.lm_head * wb.lm_head_bytes if no_head else 0)
    experts = pc.experts * wb.expert
    scale, estimated = 1.0, True
    total = (quantizable - experts) * online + experts * online_exp + rest - skipped
    if model.weights_bytes:
        exact = int(model.weights_bytes * shrink)
        scale = exact / est_total if est_total else 1.0
        total, estimated = int(exact - skipped * scale), False
    # fp32 per-channel scales, 4 B an output row: in an exact size already, unless the
    # checkpoint is quantized online
    scales = [0.0] * len(stages)
    online_channel = bool(a.quantization) and not quantized_ckpt and channel_scaled(
        arch, a.quantization)
    if online_channel or (estimated and channel_scaled(arch)):
        shares = ((1.0,) * 5 if online_channel else tuple(fp8_share(x) for x in (
            wb.linear, wb.mlp_bytes, wb.state_bytes, wb.repl_bytes, wb.expert)))
        local = arch.num_experts / (ep if a.enable_expert_parallel else 1)
        scales = [4 * sum(channel_scale_rows(arch, pc.layers[i], tp=tp, local_experts=local,
                                             expert_tp=a.expert_tp, shares=shares,
                                             shared_whole=shared_whole) for i in rng)
                  for rng in stages]
    return ([int(scale * (w + e * pad + o) + up + c) for (w, e, o, up), c in
             zip(per_stage, scales)], int(total), estimated)


def _eplb_state(arch: ModelArch, model: Model, a: EngineArgs, version: VllmVersion,
                model_dtype: str, stages: list[range]) -> list[int]:
    """EPLB's state on one GPU of each stage (`eplb.eplb_state_bytes`), allocated after
    "Model loading took" and before the profile."""
    if not a.enable_eplb or not arch.num_experts:
        return [0] * len(stages)
    pc = count_params(arch)
    wb = weight_bytes(arch, dtype_bytes(model_dtype), None, model.quant_file)
    physical = arch.num_experts + a.eplb_num_redundant_experts
    out = []
    for rng in stages:
        moe = [pc.layers[i].expert for i in rng if pc.layers[i].expert]
        layer = (max(moe) / arch.num_experts) * -(-physical // a.moe_ranks) * wb.expert \
            if moe else 0
        out.append(eplb_state_bytes(moe_layers=len(moe), experts=arch.num_experts,
                                    redundant=a.eplb_num_redundant_experts,
                                    window=a.eplb_window_size, layer_expert_bytes=layer,
                                    buffer_kept=version.at_least(0, 14)))
    return out


def eplb_copies(arch: ModelArch, a: EngineArgs) -> float:
    """What EPLB's redundant experts multiply each rank's expert weights by: (experts +
    num_redundant_experts) physical experts over the EP ranks (`n_local_physical_experts`)."""
    if not a.enable_eplb or not arch.num_experts:
        return 1.0
    return (arch.num_experts + a.eplb_num_redundant_experts) / arch.num_experts


def fp8_marlin_scales(arch: ModelArch, model: Model, gpu: Gpu, version: VllmVersion,
                      d: int) -> tuple[float, float]:
    """Bytes per weight a block-FP8 checkpoint (`weight_block_size`) gains where vLLM runs it
    on FP8 Marlin, (linears, experts): `prepare_fp8_layer_for_marlin` /
    `prepare_fp8_moe_layer_for_marlin` turn the (N/bn, K/bk) fp32 block scales into (K/bk, N)
    group scales in the model dtype, d/bk bytes a weight (0.9+ wheels). Linears take Marlin
    below SM90 (CUTLASS block FP8 needs SM90; Ada only from 0.29, when
    `MarlinFP8ScaledMMLinearKernel.is_supported` drops its cc >= 8.9 guard), experts below
    SM89 (Triton's FP8 MoE needs `supports_fp8`)."""
    q = arch.quantization or {}
    block = q.get("weight_block_size")
    if (gpu.vendor != "nvidia" or model.quant_file or not version.at_least(0, 9)
            or str(q.get("quant_method", "")).lower() != "fp8"
            or not isinstance(block, list) or len(block) != 2):
        return 0.0, 0.0
    per, cc = d / int(block[1]), cc_tuple(gpu.compute_capability)
    linears = cc < (8, 9) or (cc < (9, 0) and version.at_least(0, 29))
    return (per if linears else 0.0), (per if cc < (8, 9) else 0.0)


def _engine(version: VllmVersion, arch: ModelArch, gpu: Gpu,
            a: EngineArgs, st_pooling: bool = False) -> tuple[VllmVersion, str | None]:
    """The engine generation this start runs on, and a note when it is not the release's
    default: 0.8-0.10 fall back to V0 for what V1 lacks (`VllmVersion.v0_fallback`), and
    `VLLM_USE_V1` picks or forbids it (`EngineArgs.create_engine_config`)."""
    v, why = version.text, ""
    if not version.at_least(0, 8):
        note = (f"VLLM_USE_V1=1: vLLM {v}'s experimental V1 engine is not modelled; sized "
                "as V0" if a.use_v1 else None)
        engine = version
    elif version.at_least(0, 11):
        if a.use_v1 is False and not version.at_least(0, 11, 1):
            raise BadInput(f"VLLM_USE_V1=0: vLLM {v} has no V0 engine and refuses to start",
                           hint="unset VLLM_USE_V1")
        # 0.11.1 dropped the variable (`envs.py`): it warns of an unknown one and runs V1
        return version, (f"VLLM_USE_V1=0: vLLM {v} no longer reads it (0.11.1+) and runs "
                         "V1" if a.use_v1 is False else None)
    else:
        fallback = version.v0_fallback(
            cc=gpu.compute_capability, vendor=gpu.vendor, kv_cache_dtype=a.kv_cache_dtype,
            architectures=arch.architectures, mla=MLA in arch.kinds,
            quantization=a.quantization, dtype=a.dtype, cpu_offload=a.cpu_offload_gb > 0,
            lora=a.enable_lora, pp=a.pipeline_parallel_size,
            pooling=a.runner != "generate" and (a.task in RN.POOLING_TASKS or st_pooling or any(
                x.endswith(RN.POOLING_SUFFIXES) for x in arch.architectures)))
        why, strict = fallback or ("", False)
        if a.use_v1 is not False:  # VLLM_USE_V1 unset or 1
            if not why:
                return version, None
            if a.use_v1:  # `_raise_or_fallback` refuses; `_warn_or_fallback` runs V1
                if strict:
                    raise BadInput(f"VLLM_USE_V1=1 with vLLM {v}: {why}, so vLLM refuses to "
                                   "start", hint="unset VLLM_USE_V1 to let it fall back to V0")
                return version, None
        engine = replace(version, engine_v0=True)
        note = (f"vLLM {v} runs this start on its V0 engine: "
                + (f"{why} (V1 falls back, `_is_v1_supported_oracle`)" if why
                   else "VLLM_USE_V1=0"))
    if arch.is_hybrid_state:
        first = version.first_v1(arch.architectures)
        # a release whose V1 serves the model: drop what moved this start to V0
        moved = version.at_least(0, 8) and version.v >= VllmVersion.of(first).v
        raise BadInput(f"vLLM {v} serves {'/'.join(arch.architectures) or arch.model_type} on "
                       "its V0 engine, whose separate Mamba state cache kvplan does not model",
                       hint=(f"its V1 engine serves it without this: {why}" if why
                             else "unset VLLM_USE_V1") if moved
                       else f"size it for vLLM {first} or later (V1)")
    return engine, note


def flashkda(arch: ModelArch, dts: KvDtypes, cc: str, vendor: str, version: VllmVersion) -> bool:
    """Whether Kimi-K3's KDA prefill runs FlashKDA, which keeps one prefill checkpoint state per
    request (`KimiK3DeltaAttention.get_kv_cache_spec`: `num_prefill_checkpoint_blocks=
    int(backend == "flashkda")`, the 0.29-0.33 wheels): `is_flashkda_supported` wants CUDA SM9x,
    SM10x or SM12x, 128-wide heads, bfloat16 activations, the gate's lower bound and (0.30+) a
    bfloat16 or float32 recurrent state; `auto` prefers it to Triton."""
    return (arch.kda_gate_bound and version.at_least(0, 29) and vendor == "nvidia"
            and cc_major(cc) in (9, 10, 12) and dts.conv == "bfloat16"
            and dts.ssm in ("bfloat16", "float32")
            and all(x.v_dim == 128 for x in arch.layers
                    if isinstance(x, StateLayer) and x.kind == KDA))


def release_registers(arch: ModelArch, config: dict, version: VllmVersion) -> str | None:
    """The release's model registry on the config's architectures: BadInput when the release
    does not have one yet (`ABSENT_UNTIL`), no longer runs it (`REMOVED_ARCHITECTURES`), or
    registers none and its Transformers backend cannot take them
    (`engines/vllm_archs.check`); the backend's note when it can, else None."""
    new = next((x for x in arch.architectures
                if x in ABSENT_UNTIL and version.v <= ABSENT_UNTIL[x]), None)
    if new:  # `ModelRegistry`: the architecture is not registered yet
        after = ".".join(map(str, ABSENT_UNTIL[new]))
        raise BadInput(f"vLLM {version.text} does not have {new} yet (its model registry "
                       f"lists it after {after})", hint="use a later --vllm-version",
                       flag="vllm_version")
    if arch.model_type == "nemotron_h" and arch.num_experts and not version.at_least(0, 12):
        raise BadInput(f"vLLM {version.text} builds no MoE ('E') layers for Nemotron-H "
                       "(nemotron_h.py, to 0.11)", hint="use --vllm-version 0.12 or later",
                       flag="vllm_version")
    gone = next((x for x in arch.architectures
                 if x in REMOVED_ARCHITECTURES and version.v > REMOVED_ARCHITECTURES[x]), None)
    if gone:  # `ModelRegistry`: "was supported in vLLM until v..., and is not supported anymore"
        last = ".".join(map(str, REMOVED_ARCHITECTURES[gone]))
        raise BadInput(f"vLLM {version.text} no longer runs {gone} (supported until {last})",
                       hint=f"use --vllm-version {last}")
    from kvplan.engines.vllm_archs import check

    # `ModelRegistry`: none registered -> the Transformers backend (a note) or a refusal
    return check(arch.architectures, config, version)


# --- main ------------------------------------------------------------------------------------

INT32_MAX = 2**31 - 1


def _or_none(f: Any, *args: Any) -> Any:
    """f(*args), or None where it refuses the input."""
    try:
        return f(*args)
    except BadInput:
        return None


def size(model: Model, gpu: Gpu, args: EngineArgs | None = None,
         vllm_version: str | None = None, *, hints: bool = True) -> SizeResult:
    """Size vLLM's KV cache for `model` on `gpu` with `args` (`hints`: when it does not fit,
    re-size with more TP / an FP8 KV cache to say what would)."""
    a = args or EngineArgs()
    if a.kv_cache_memory_bytes == 0:  # `if kv_cache_memory_bytes := ...`: 0 profiles as unset
        a = replace(a, kv_cache_memory_bytes=None)
    version = VllmVersion.of(vllm_version)
    try:
        arch = normalize(model.config)
    except BadInput as e:  # say which config (`Model.origin`)
        if not model.origin:
            raise
        raise type(e)(f"{model.origin}: {e.message}", hint=e.hint, flag=e.flag) from None
    if arch.is_sparse_mla and not version.at_least(0, 24):  # every layer built its indexer
        full = arch.indexer_bytes
        arch = replace(arch, layers=[replace(x, indexer_bytes=full) for x in arch.layers])
    st = PL.st_pooling(model.st_modules, model.st_configs, version)
    if model.hf_quant_config is not None:  # hf_quant_config.json (ModelOpt)
        if not isinstance(model.hf_quant_config, dict):
            raise BadInput("hf_quant_config.json is not a JSON object")
        check_field_types(model.hf_quant_config, "hf_quant_config.")
    # the model registry first: a release without the architecture refuses it whatever
    # engine a flag would move the start to
    registry_note = release_registers(arch, model.config, version)
    _check_modelopt_algo(model.quant_file_for_kv, version, a.quantization)
    version, engine_note = _engine(version, arch, gpu, a, st is not None and a.runner == "auto"
                                   and a.task in (None, "auto"))
    _validate_parallel(arch, a, version)
    check_eplb(enabled=a.enable_eplb, redundant=a.eplb_num_redundant_experts,
               expert_parallel=a.enable_expert_parallel,
               ranks=a.moe_ranks, experts=arch.num_experts,
               version_ok=version.at_least(0, 11), version=version.text)
    _validate_fp8_blocks(model, arch, a, version)
    _validate_act_order(arch, version)
    choices = version.block_size_choices()
    if a.block_size and choices and a.block_size not in choices:
        raise BadInput(f"vLLM {version.text} rejects --block-size {a.block_size}",
                       hint=f"use one of {', '.join(map(str, choices))}")
    aiter_note = None
    cdna3 = gpu.vendor == "amd" and gpu.compute_capability.startswith("gfx9") and \
        gpu.compute_capability not in ("gfx90a", "gfx908")
    if gpu.vendor == "amd" and not cdna3 and a.rocm_aiter and version.at_least(0, 19):
        # `is_aiter_found_and_supported`: MI300-class only from 0.19, whatever the variable
        if arch.num_experts and not (arch.quantization or model.quant_file or a.quantization) \
                and a.rocm_aiter_moe and version.at_least(0, 20) and not version.at_least(0, 31):
            raise BadInput(f"vLLM {version.text} refuses VLLM_ROCM_USE_AITER=1 for 16-bit "
                           f"experts on {gpu.name} ('Unquantized MoE backend ROCm AITER does "
                           "not support ... current device rocm')",
                           hint="drop VLLM_ROCM_USE_AITER (AITER needs an MI300-class GPU)",
                           flag="rocm_aiter")
        a = replace(a, rocm_aiter=False)
        aiter_note = (f"VLLM_ROCM_USE_AITER=1 does nothing on {gpu.name}: vLLM {version.text} "
                      "runs AITER on MI300-class GPUs only")
    rocm_blocks = gpu.vendor == "amd" and version.at_least(0, 18) and not (
        arch.is_mla and a.rocm_aiter and cdna3)  # AITER MLA takes any block
    if a.block_size and a.block_size % 16 and not arch.is_hybrid_state and (
            version.at_least(0, 21) or arch.is_mla and version.at_least(0, 18)
            or rocm_blocks) and (gpu.vendor == "nvidia" or rocm_blocks):
        # `get_valid_backends`: every attention backend takes multiples of 16 (FlexAttention
        # from 0.21; the MLA ones from 0.18; ROCm's from 0.18, 0.18 failing later with "No
        # common block size"): "No valid attention backend"
        raise BadInput(f"vLLM {version.text} has no attention backend for --block-size "
                       f"{a.block_size} ('block_size not supported')",
                       hint="use a multiple of 16", flag="block_size")
    notes: list[str] = list(arch.notes) + [n for n in (registry_note, engine_note, aiter_note)
                                           if n]
    if a.kv_cache_memory_bytes is not None and not version.at_least(0, 10, 2):
        notes.append(f"vLLM {version.text} has no --kv-cache-memory-bytes (it arrives in "
                     "0.10.2), so its `vllm serve` refuses the flag: sized as a start whose "
                     "profile left that much for the KV cache")
    tp, pp = a.tensor_parallel_size, a.pipeline_parallel_size
    if a.nnodes > 1:  # `ParallelConfig.nnodes`: the world over hosts
        gpu = replace(gpu, gpus_per_node=min(
            gpu.gpus_per_node, cdiv(tp * pp * a.data_parallel_size, a.nnodes)))
    cc = gpu.compute_capability

    # dtypes
    model_dtype = resolve_model_dtype(arch.config_dtype, a.dtype, cc, v1=version.v1,
                                      model_type=arch.model_type,
                                      fp16_checked=version.at_least(0, 9))
    ckpt_method = QC.checkpoint_method(arch.quantization, model.quant_file)

    def resolved(flag: str | None) -> str | None:
        return QC.resolve(flag, ckpt_method, version=version, cc=cc, vendor=gpu.vendor,
                          model_dtype=model_dtype, model_type=arch.model_type,
                          allow_deprecated=a.allow_deprecated_quantization)

    quant = resolved(a.quantization)
    if quant in QC.CLAIM_WHATEVER_THE_FLAG and a.quantization not in (None, quant):
        # the checkpoint's method claims it whatever --quantization says: the flag changes
        # nothing (review 24b F4: gpt-oss with -q fp8 crashed on B200, lost its MXFP4
        # padding on H100)
        notes.append(f"vLLM {version.text} loads this checkpoint as {quant} whatever "
                     f"--quantization says: {a.quantization} is ignored")
        a = replace(a, quantization=None)
    elif a.quantization is not None and ckpt_method and quant == _or_none(resolved, None):
        # a flag naming the method vLLM picks anyway (the JSON's `quantization` fed back:
        # gpt_oss_mxfp4, auto_gptq) is no flag (review 28: gpt-oss lost its MXFP4 padding)
        a = replace(a, quantization=None)
    mo_kv = modelopt_kv_dtype(arch.quantization, model.quant_file_for_kv,
                              config_json_from=version.modelopt_kv_auto,
                              hf_quant_from=version.modelopt_kv_auto,
                              nvfp4=version.at_least(0, 20))
    notes += quant_file_notes(model.config.get("quantization_config"), model.hf_quant_config,
                              mo_kv, a.kv_cache_dtype, nvfp4=version.at_least(0, 20))
    forced = AB.requested(a.attention_backend, a.attention_backend_env, version)
    if a.attention_backend_env and version.at_least(0, 15):
        notes.append(f"vLLM {version.text} no longer reads VLLM_ATTENTION_BACKEND (0.15+): "
                     "--attention-backend forces a backend")
    fb = AB.check(forced, kind="sparse" if arch.is_sparse_mla else "mla" if arch.is_mla
                  else "dense", kv_requested=a.kv_cache_dtype, cc=cc, vendor=gpu.vendor,
                  version=version, qk_nope=int(arch.text_config.get("qk_nope_head_dim") or 0)
                  ) if forced else None
    if forced == "FLASHMLA_SPARSE" and a.kv_cache_dtype in AB.FP8 and cc_major(cc) == 10:
        # `_canonicalize_sparse_mla_kv_cache_dtype`: FlashMLA-sparse stores fp8 as fp8_ds_mla
        a = replace(a, kv_cache_dtype="fp8_ds_mla")
        notes.append("FLASHMLA_SPARSE stores an fp8 cache in the fp8_ds_mla layout")
    sparse = None
    if DSV4 in arch.kinds:  # `_resolve_dsv4_kv_cache_dtype`: auto and fp8 -> fp8_ds_mla
        sparse = "auto+fp8"
    elif arch.is_sparse_mla:
        sparse = version.sparse_mla_kv(cc, max(1, arch.num_attention_heads // tp), gpu.vendor)
        BK.check_rocm_sparse_mla(requested_kv=a.kv_cache_dtype, block_size=a.block_size,
                                 vendor=gpu.vendor, version=version)
    kv = resolve_kv_dtype(
        KF.model_default_kv(arch, a.kv_cache_dtype, cc, gpu.vendor, version, notes),
        model_dtype, allowed=version.kv_cache_dtypes, modelopt_kv=mo_kv, sparse_mla=sparse)
    kv = KF.checkpoint_kv(kv, arch, a, version, notes, lambda req: resolve_kv_dtype(
        req, model_dtype, allowed=version.kv_cache_dtypes, modelopt_kv=None, sparse_mla=sparse))
    asked_kv = (a.kv_cache_dtype or "auto").lower()
    if asked_kv in ("float16", "bfloat16") and asked_kv != model_dtype and version.at_least(
            0, 33):  # `VllmConfig._reject_mismatched_float_kv_cache`
        raise RefusedEverywhere(
            f"vLLM {version.text} refuses --kv-cache-dtype {asked_kv} with the model dtype "
            f"{model_dtype} ('is incompatible')", hint="use --kv-cache-dtype auto" + (
                f" or {model_dtype}" if model_dtype in ("float16", "bfloat16") else ""),
            flag="kv_cache_dtype")
    if a.kv_cache_dtype == "fp8_inc" and version.at_least(0, 11):
        # Intel Gaudi's format: no CUDA or ROCm attention backend lists it in
        # `supported_kv_cache_dtypes` (the 0.11-0.33 wheels): "No valid attention backend"
        raise RefusedEverywhere(f"vLLM {version.text} has no attention backend for "
                                f"--kv-cache-dtype fp8_inc on {gpu.name} (it is Intel Gaudi's "
                                "format)", hint="use --kv-cache-dtype fp8", flag="kv_cache_dtype")
    if a.kv_cache_dtype == "fp8_ds_mla" and gpu.vendor == "amd" and version.at_least(0, 18):
        # only two CUDA sparse-MLA backends store it (`_canonicalize_sparse_mla_kv_cache_dtype`)
        raise BadInput(f"vLLM {version.text} on ROCm has no attention backend for "
                       "--kv-cache-dtype fp8_ds_mla", hint="use --kv-cache-dtype auto or fp8",
                       flag="kv_cache_dtype")
    mm_on = arch.vision_config is not None and towers_kept(
        arch.architectures, a.limit_mm_per_prompt, a.language_model_only)[0]
    BK.check_triton_fp8(arch, kv=kv, cc=cc, vendor=gpu.vendor, version=version,
                        multimodal=mm_on)
    BK.check_sparse_mla(arch, requested_kv=a.kv_cache_dtype, model_dtype=model_dtype, cc=cc,
                        vendor=gpu.vendor, version=version)
    if not forced:  # a forced backend's dtypes are `AB.check`'s
        BK.check_triton_mla_kv(arch, requested_kv=a.kv_cache_dtype, cc=cc, vendor=gpu.vendor,
                               version=version, rocm_aiter=a.rocm_aiter)
    if kv.startswith("fp8") and kv != "fp8_ds_mla" and cc_major(cc) < 8 and gpu.vendor == "nvidia":
        raise BadInput(f"--kv-cache-dtype {kv} needs compute capability 8.0+ "
                       f"({gpu.name} is {cc})", hint="use --kv-cache-dtype auto")
    if DSV4 in arch.kinds:
        if not version.at_least(0, 20):
            raise BadInput(f"DeepSeek-V4 is not served by vLLM {version.text}",
                           hint="kvplan models V4 from vLLM 0.20: use --vllm-version "
                                "0.20 or later")
        if kv != "fp8_ds_mla":
            raise BadInput(f"DeepSeek-V4's FlashMLA path stores only fp8_ds_mla, not {kv}",
                           hint="use --kv-cache-dtype auto or fp8")
        if a.kv_cache_dtype == "auto" and not version.at_least(0, 21):
            # 0.20.2 `DeepseekV4MLAAttention.__init__`: assert kv_cache_dtype.startswith("fp8")
            raise BadInput(f"vLLM {version.text} refuses DeepSeek-V4 with --kv-cache-dtype "
                           "auto (it asserts an fp8 cache)", hint="use --kv-cache-dtype fp8")
        notes.append("DeepSeek-V4 cache layout of vLLM 0.20-0.22: each block reserves every "
                     "full-MLA page size per layer tuple, and the logged concurrency weights "
                     "groups by page bytes, above what the block pool admits (the 'sequences "
                     "that fit' figures)" if version.dsv4_tuple_layout else
                     "DeepSeek-V4 cache layout of vLLM 0.23-0.26: sliding pages padded to the "
                     "MLA pages, each block reserves every page size times its largest count "
                     "in one group, and the logged concurrency weights groups by page bytes, "
                     "above what the block pool admits (the 'sequences that fit' figures)"
                     if version.dsv4_bucketed_layout else
                     "DeepSeek-V4 cache layout as vLLM 0.33 packs it (block-outermost groups)")
    # Mamba / linear-attention state dtypes (`MambaStateDtypeCalculator`, 0.33
    # `layers/mamba/mamba_utils.py`): the conv state in --mamba-cache-dtype (auto: the model's),
    # the SSM state in --mamba-ssm-cache-dtype, else the config's hint (NemotronH, Qwen3.5:
    # `models/config.py`), else the conv state's
    for flag, value in (("--mamba-cache-dtype", a.mamba_cache_dtype),
                        ("--mamba-ssm-cache-dtype", a.mamba_ssm_cache_dtype)):
        fld = flag[2:].replace("-", "_")
        if value not in ("auto", "float32", "float16", "bfloat16"):
            raise BadInput(f"{flag} {value!r} is not auto, float32, float16 or bfloat16",
                           flag=fld)
        if value != "auto" and not version.at_least(0, 10):
            raise BadInput(f"vLLM {version.text} has no {flag} (0.10+)", flag=fld)
    conv = model_dtype if a.mamba_cache_dtype == "auto" else a.mamba_cache_dtype
    hint = ssm_state_default(arch, version)
    ssm = a.mamba_ssm_cache_dtype if a.mamba_ssm_cache_dtype != "auto" else (
        hint if hint not in (None, "auto") else conv)
    if LIGHTNING in arch.state_kinds and a.mamba_cache_dtype == "float32" and \
            not version.at_least(0, 20, 1):
        # `linear_attention_state_dtype` (0.17-0.20.0): "fp32 state for minimax is not yet
        # supported"; the lightning state takes the conv dtype (--mamba-cache-dtype)
        raise BadInput(f"vLLM {version.text} refuses a float32 lightning-attention state "
                       "(\"fp32 state for minimax is not yet supported\"; 0.20.1+ accepts it)",
                       hint="leave --mamba-cache-dtype at auto", flag="mamba_cache_dtype")
    if KDA in arch.state_kinds and arch.kda_state_fixed:
        ssm = arch.kda_state_fixed
    elif KDA in arch.state_kinds:
        # `kda_state_dtype`: the recurrent state is float32 for auto; 0.30+ honours float32
        # and bfloat16 ("KDA recurrent state supports only auto, float32, and bfloat16"),
        # 0.29 and earlier always float32
        ssm = a.mamba_ssm_cache_dtype
        if ssm == "float16" and version.at_least(0, 30):
            raise BadInput("KDA's recurrent state supports only auto, float32 and bfloat16",
                           hint="use --mamba-ssm-cache-dtype bfloat16",
                           flag="mamba_ssm_cache_dtype")
        if ssm == "auto" or not version.at_least(0, 30):
            ssm = "float32"
    dts = KF.per_layer(KvDtypes(kv=kv, conv=conv, ssm=canonical(ssm)), arch, gpu, a,
                       version, model_dtype, notes, multimodal=mm_on)

    # lengths and batch defaults
    derived, derived_src = derived_max_model_len(arch, version)
    enc = model.st_encoder if version.at_least(0, 6, 4) else None
    if enc and "max_seq_length" in enc:  # `_get_and_verify_max_len`: replaces the derived one
        n = enc["max_seq_length"]
        if isinstance(n, bool) or not isinstance(n, (int, float)) or not 0 < n < 2**31:
            raise BadInput(f"{enc.get('file')} max_seq_length must be a positive integer, got "
                           f"{n!r}", hint="fix the sentence-transformers config")
        derived, derived_src = int(n), f"{enc.get('file')} max_seq_length (sentence-transformers)"
    mml_src = derived_src if enc and "max_seq_length" in enc else f"config {derived_src}"
    longrope = longrope_default_len(arch.text_config) if version.at_least(0, 11, 1) else None
    default_len = min(longrope, derived) if longrope else derived
    if a.max_model_len is None and longrope:
        mml = default_len
        mml_src = (f"config original_max_position_embeddings, LongRoPE's default (up to "
                   f"{derived} with --max-model-len)")
    elif a.max_model_len is None:
        mml = derived
    elif a.max_model_len == -1:
        if not version.auto_max_model_len:
            raise BadInput("--max-model-len -1/auto needs vLLM 0.14 or newer")
        # the search starts from the default length (`_get_and_verify_max_len`: LongRoPE's
        # original_max_position_embeddings for -1 too)
        mml, mml_src = default_len, "auto-fit"
    else:
        mml = a.max_model_len
        mml_src = "--max-model-len"
        cap = arch.text_config.get("model_max_length")  # the user may go up to it
        if mml > derived and a.allow_long_max_model_len:
            notes.append(f"VLLM_ALLOW_LONG_MAX_MODEL_LEN=1: max_model_len {mml} exceeds the "
                         f"model's {derived} ({derived_src}); vLLM starts, but outputs past "
                         "the trained length may be wrong")
        elif mml > derived and not (isinstance(cap, int) and mml <= cap):
            raise BadInput(
                f"--max-model-len {mml} exceeds the model's maximum of {derived} "
                f"({derived_src})",
                hint=f"use --max-model-len {derived} or less; vLLM allows more only with "
                     "--env VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")
        if mml < 1:
            raise BadInput("--max-model-len must be >= 1")
    if a.usage not in ("serve", "llm", "engine"):
        raise BadInput(f"--entrypoint {a.usage!r} is not serve, llm or engine", flag="usage")
    if gpu.mig_profile and tp * pp > 1:  # NVIDIA MIG user guide, "CUDA_VISIBLE_DEVICES"
        raise BadInput(f"tensor or pipeline parallelism across MIG slices ({gpu.mig_profile}): "
                       "a CUDA process enumerates one MIG instance, and instances have no "
                       "peer-to-peer access", hint="use one slice per engine (TP 1), a larger "
                       "profile or whole GPUs", flag="tensor_parallel_size")
    pooling = RN.pooling_runner(arch, a, version, notes, st)
    st_typed = None  # the checkpoint's Pooling module, when it alone names the types
    if pooling and st is not None:  # the checkpoint's pooling types, where the flag sets none
        if a.pooler is None or (a.pooler.seq is None and a.pooler.tok is None):
            st_typed = st
        a = replace(a, pooler=PL.merged(a.pooler, st))
    d_mnbt, d_seqs = batch_defaults(gpu, version, a.usage, tp * pp)
    asked = A2A.resolve(a.all2all_backend, a.all2all_backend_env, version.v, notes)
    if a.data_parallel_size > 1 and a.enable_expert_parallel and A2A.batched_dp(
            asked, version.v):  # `ParallelConfig.use_batched_dp_moe` (any model)
        d_mnbt = A2A.BATCHED_DP_TOKENS
    a2a = A2A.exchange_backend(arch, a, asked, version, notes)
    version.moe_backend_kind(a.moe_backend)  # a value vLLM rejects is bad input
    norm_backend = str(a.moe_backend or "auto").lower().replace("-", "_")  # as `arg_utils`
    if norm_backend != a.moe_backend:
        a = replace(a, moe_backend=norm_backend)
    if arch.num_experts and a.moe_backend != "auto" and version.at_least(0, 18):
        qa = arch.quantization or {}
        if MK.mega_moe(arch, a):  # `DeepseekV4MoE.__init__` / `_check_runtime_supported`
            fp4 = str(arch.text_config.get("expert_dtype", "fp4")) == "fp4" and weight_bytes(
                arch, 2, a.quantization, model.quant_file).expert < 0.75
            why, fix = (("requires expert parallel", "add --enable-expert-parallel")
                        if not a.enable_expert_parallel else
                        ("requires SM100 GPUs", "run it on B200 / B300 / GB200")
                        if cc_major(cc) != 10 or gpu.vendor != "nvidia" else
                        ("only supports fp4 experts", "use an FP4-expert checkpoint")
                        if not fp4 else ("", ""))
            if why:
                raise BadInput(f"vLLM refuses --moe-backend deep_gemm_mega_moe here: DeepSeek V4 "
                               f"MegaMoE {why}", hint=f"{fix}, or pick another --moe-backend",
                               flag="moe_backend")
        MK.check_moe_backend(a.moe_backend, version, cc, gpu.vendor, unquantized=quant is None,
                             mxfp4=quant in ("mxfp4", "gpt_oss_mxfp4"),
                             rocm_aiter=a.rocm_aiter,
                             block_fp8=str(qa.get("quant_method", "")).lower() == "fp8"
                             and bool(qa.get("weight_block_size")))
    if a.mm_encoder_tp_mode not in ("weights", "data"):
        raise BadInput(f"--mm-encoder-tp-mode {a.mm_encoder_tp_mode} is not weights or data",
                       flag="mm_encoder_tp_mode")
    if a.mm_encoder_tp_mode == "data" and not version.at_least(0, 10, 2):
        raise BadInput(f"vLLM {version.text} has no --mm-encoder-tp-mode (0.10.2+)",
                       flag="mm_encoder_tp_mode")
    for flag, on, since in (("--skip-mm-profiling", a.skip_mm_profiling, (0, 10, 1)),
                            ("--language-model-only", a.language_model_only, (0, 17))):
        if on and not version.at_least(*since):  # argparse: "unrecognized arguments"
            raise BadInput(f"vLLM {version.text} has no {flag} ('unrecognized arguments')",
                           hint=f"it arrived in {'.'.join(map(str, since))}",
                           flag=flag[2:].replace("-", "_"))
    for flag, n in (("max_num_batched_tokens", a.max_num_batched_tokens),
                    ("max_num_seqs", a.max_num_seqs)):
        if (n or 0) > INT32_MAX:  # `gpu_model_runner`: int32 input_ids / query_start_loc
            raise BadInput(f"--{flag.replace('_', '-')} {n:,} is more than vLLM indexes: a "
                           "batch's tokens and requests are counted in int32",
                           hint=f"give at most {INT32_MAX:,}", flag=flag)
    if a.max_cudagraph_capture_size is not None and a.max_cudagraph_capture_size < 1:
        raise BadInput("--max-cudagraph-capture-size must be at least 1",
                       flag="max_cudagraph_capture_size")
    if (a.max_cudagraph_capture_size or 0) > MAX_CAPTURE_SIZE:
        # the grid has a graph every 16 sizes: vLLM would capture 65,000+ graphs at start-up
        raise BadInput(f"--max-cudagraph-capture-size {a.max_cudagraph_capture_size:,} asks "
                       f"vLLM to capture about {a.max_cudagraph_capture_size // 16:,} CUDA "
                       "graphs at start-up, tens of milliseconds each",
                       hint=f"give at most {MAX_CAPTURE_SIZE:,}; vLLM's default is 512",
                       flag="max_cudagraph_capture_size")
    if a.performance_mode not in ("balanced", "interactivity", "throughput"):
        raise BadInput(f"--performance-mode {a.performance_mode!r} is not one of balanced, "
                       "interactivity, throughput")
    if a.performance_mode != "balanced" and not version.at_least(0, 17):
        raise BadInput(f"vLLM {version.text} has no --performance-mode",
                       hint="it is in 0.17.1 and later; 0.14.1 has none")
    if a.performance_mode == "throughput":  # `EngineArgs`: doubles both defaults
        d_mnbt, d_seqs = 2 * d_mnbt, 2 * d_seqs
    seqs = a.max_num_seqs or d_seqs
    chunked = a.enable_chunked_prefill
    chunked_arg, budget = None, None  # the flag `SchedulerConfig` is built with; a set budget
    if pooling:  # each release's own rule (`core/pooling.py`)
        chunked, chunked_arg, budget, a = RN.pooling_prefill(arch, a, version, mml, notes,
                                                     st_typed, model.st_checked)
    elif version.v1 and not version.at_least(0, 11, 1):
        # "V1 always uses chunked prefills": 0.8-0.11.0 set it for every generation model
        # (`_set_default_args_v1`; 0.11.0 `_set_default_args`), whatever the flag said
        if chunked is False:
            notes.append(f"vLLM {version.text} ignores --no-enable-chunked-prefill: its V1 "
                         "engine always chunks prefills (honoured from 0.11.1)")
        chunked = True
    elif chunked is None:
        chunked = version.v1 or mml > 32768 and v0_chunks_long_prompts(arch, a, gpu.vendor,
                                                                        version)
    if chunked_arg is None:
        chunked_arg = chunked
    # before 0.11.1 V1's `_set_default_args_v1` fills the default for the server and LLM
    # contexts (max_model_len when chunked prefill is off, 0.10.1-0.11.0); V0 and the engine
    # context leave it to `SchedulerConfig.__post_init__`, which also caps it at
    # max_num_seqs x max_model_len; 0.11.1+ `EngineArgs` caps every default (0.9.2-0.33
    # wheels). The budget follows the chunked-prefill flag as it stood then: 0.10.1-0.11.x
    # turn a pooling model's off later (`VllmConfig.__post_init__`)
    v1_filled = version.v1 and not version.at_least(0, 11, 1) and a.usage != "engine"
    if budget is not None:
        mnbt = budget
    elif a.max_num_batched_tokens:
        mnbt = a.max_num_batched_tokens
    else:
        if not chunked_arg:
            mnbt = mml if v1_filled else max(mml, d_mnbt)
        else:
            mnbt = d_mnbt
            if not version.v1 and not version.at_least(0, 6, 5):
                mnbt = 512  # 0.6.0-0.6.4.post1 `SchedulerConfig.__init__` (2,048 from 0.6.5)
        if (arch.vision_config or arch.audio_config) and not v1_filled and not (
                version.v1 and version.at_least(0, 11, 1)):
            # `SchedulerConfig`'s floor where it fills the budget (V0; V1's engine context to
            # 0.11): _MULTIMODAL_MODEL_MAX_NUM_BATCHED_TOKENS, 4,096 to 0.6.2, then 5,120
            mnbt = max(mnbt, 5120 if version.at_least(0, 6, 3) else 4096)
    if not a.max_num_batched_tokens and not v1_filled and budget is None:
        mnbt = min(seqs * mml, mnbt)
    if not a.max_num_batched_tokens and version.at_least(0, 22) and arch.mm_prefix_lm and \
            mm_on and arch.model_type.startswith("gemma4"):
        # a prefix-LM model takes one multimodal item in one batch: 0.22+ raise the default
        # budget to its largest item (`_get_min_mm_batched_tokens`); Gemma 4's is a 32-frame
        # video of 70 soft tokens + 8 markers a frame (`get_mm_max_tokens_per_item`)
        item = max(32 * (70 + 2 + 6), int(arch.vision_config.get("default_output_length") or 0))
        if item > mnbt:
            notes.append(f"vLLM raises max_num_batched_tokens from {mnbt} to {item} so one "
                         "Gemma 4 video fits a batch (prefix-LM multimodal input)")
            mnbt = min(seqs * mml, item)
    if a.max_num_seqs is None and version.v1 and version.at_least(0, 10, 1) and \
            a.usage != "engine":  # the usage-context default is capped at the budget
        seqs = min(seqs, mnbt)  # (`_set_default_args_v1` / `get_batch_defaults`, 0.10.1+)
    if mnbt < seqs:  # `SchedulerConfig.verify_max_model_len` (0.33; the same check in V0)
        given = (f"--max-num-batched-tokens {mnbt}" if a.max_num_batched_tokens else
                 f"the default max_num_batched_tokens {mnbt}" + (
                     f" ({asked}'s batched DP/EP default)"
                     if d_mnbt == A2A.BATCHED_DP_TOKENS == mnbt else ""))
        seqs_given = (f"--max-num-seqs {seqs}" if a.max_num_seqs else
                      f"the default max_num_seqs {seqs}")
        raise BadInput(f"{given} is smaller than {seqs_given}; vLLM refuses this",
                       hint=f"use --max-num-batched-tokens {seqs} or more, "
                       f"or --max-num-seqs {mnbt} or fewer",
                       flag="max_num_seqs" if a.max_num_seqs else "max_num_batched_tokens")
    if not chunked_arg and mnbt < mml and a.max_num_batched_tokens and budget is None:
        raise BadInput(f"--max-num-batched-tokens {mnbt} is smaller than --max-model-len {mml} "
                       "with chunked prefill off; vLLM refuses this",
                       hint="raise it or enable chunked prefill", flag="max_num_batched_tokens")

    # speculative decoding: the drafter's cache layers join the pool on the last stage
    spec = a.speculative
    k_spec, drafted = 0, []
    # the layers that keep a cache, the drafter's included
    karch = arch if version.mla_cache(quant) else _mla_as_mha(arch, version)
    karch = replace(karch, layers=release_layers(karch, version.v))
    tie = release_tie(arch, version.v)
    if tie != arch.tie_word_embeddings:
        notes.append(f"vLLM {version.text} builds the language model with the wrapper's "
                     f"tie_word_embeddings ({tie}), not its text config's")
        arch = replace(arch, tie_word_embeddings=tie)
    if spec:
        from kvplan.core import specdec as SD

        SD.check_version(spec, version)
        SD.check_args(spec, arch.vocab_size, a.tensor_parallel_size, version)
        spec = SD.resolved(spec, arch)
        a = replace(a, speculative=spec)  # vLLM's default k filled in
        if spec.method == SD.DSPARK:
            SD.check_dspark(arch, spec, version, a.pipeline_parallel_size)
        SD.check_scheduled_tokens(spec, version, mnbt, seqs, lora=a.enable_lora)
        k_spec, drafted = spec.num_speculative_tokens, SD.draft_layers(arch, spec)
        karch = replace(karch, layers=SD.widen_states(karch.layers, k_spec, version) + drafted)

    # Mamba prefix-caching mode and block size
    prefix = a.enable_prefix_caching
    if prefix is None:
        prefix = prefix_caching_default(arch, version)
    mode = _mamba_cache_mode(arch, bool(prefix), version)  # (not reused below)
    if mode == "all" and arch.attention_free:
        mode = attention_free_all_mode(version, a.block_size)
        if mode == "fails":
            raise BadInput(f"vLLM {version.text} fails at start with prefix caching on an "
                           "attention-free Mamba model without --block-size: its Mamba block "
                           "size is left unset (`MambaModelConfig`; `MambaSpec` block_size "
                           "None)", hint="give --block-size (e.g. 16) or "
                           "--no-enable-prefix-caching", flag="enable_prefix_caching")
        if mode == "none":
            notes.append(f"vLLM {version.text} sets this attention-free model's Mamba block "
                         "to max_model_len with prefix caching on (`MambaModelConfig`): one "
                         "state a request, and no shorter prefix is reused")
    align_mode = mode == "align" and version.at_least(0, 33)  # FlashInfer GDN checkpoint
    gdn_fi = cc_major(cc) >= 9 and gpu.vendor == "nvidia" and arch.gdn_flashinfer_checkpoint
    # a prefill checkpoint state per request in 'align' mode (`num_prefill_checkpoint_blocks`,
    # `MambaSpec.max_memory_usage_bytes`): FlashInfer's GDN prefill from 0.33, every Mamba2
    # mixer from 0.32 (`MambaMixer2.get_kv_cache_spec`)
    checkpoint = mode == "align" and ((align_mode and gdn_fi and GDN in arch.state_kinds) or (
        MAMBA2 in arch.state_kinds and version.at_least(0, 32)) or flashkda(
            arch, dts, cc, gpu.vendor, version))
    # states per request beside 'all' mode's one per block
    state_blocks = {"all": 0, "none": 1}.get(mode, 2 + int(checkpoint))
    if version.at_least(0, 16 if mode == "all" else 15):  # `MambaSpec.num_speculative_blocks`
        state_blocks += k_spec
    if mode != "none" and not chunked and (mode == "align" or version.at_least(0, 33)):
        raise BadInput("vLLM refuses Mamba prefix caching without chunked prefill (\"Chunked "
                       "prefill is required\", `MambaModelConfig`)",
                       hint="enable chunked prefill or add --no-enable-prefix-caching",
                       flag="enable_chunked_prefill")
    if mode == "all":
        notes.append("prefix caching keeps a Mamba state per block ('all' mode): state "
                     "layers need as many blocks as attention")
    v2 = version.v2_model_runner(arch.architectures, bool(arch.num_experts),
                                 arch.is_hybrid_state, gpu.vendor) or bool(
        spec and spec.method == SD.DSPARK)  # DSpark runs on model runner V2 only
    if pooling and not version.at_least(0, 29):
        v2 = False  # `_is_default_v2_model_runner_model`: generate runners only before 0.29
    v1_why = SD.v1_runner_reason(spec, version, a.pipeline_parallel_size) if spec and v2 else ""
    if v2 and a.enable_prompt_embeds and not version.at_least(0, 29):
        v1_why = "prompt embeds"  # 0.24-0.28 `_get_v2_model_runner_unsupported_features`
    if v2 and (a.enable_dbo or (a.ubatch_size > 1 and version.at_least(0, 30))):
        v1_why = "dual batch overlap"  # `_get_dbo_unsupported_features` (0.22+; ubatch 0.30+)
    if v2 and a.kv_sharing_fast_prefill and not version.at_least(0, 30):
        v1_why = "KV sharing fast prefill"  # 0.20-0.29 `_get_v2_model_runner_unsupported...`
    if v1_why:
        v2 = False
        notes.append(f"vLLM {version.text} runs {v1_why} on model runner V1 (\"Model Runner V2 "
                     "does not yet support\"), so kvplan sizes V1's profile")
    if spec:
        mml, mml_src = _draft_max_model_len(spec, version, v2, mml, mml_src, notes)
    if spec and a.kv_sharing_fast_prefill and spec.eagle_like and version.at_least(0, 10, 2):
        # `VllmConfig.__post_init__` (0.10.1 only warned that the flag did nothing yet)
        raise BadInput("vLLM refuses --kv-sharing-fast-prefill with EAGLE-style speculative "
                       "decoding (MTP included)", hint="drop one of the two",
                       flag="kv_sharing_fast_prefill")
    if spec and spec.kv_cache_dtype:
        dts = KF.draft_kv(dts, spec.kv_cache_dtype, arch, v2, version, model_dtype, notes)
    elif spec and spec.method == "draft_model" and dts.skip:
        dts = replace(dts, draft_from=len(arch.layers), draft_local=True)
    mla_block = AB.block_size(forced, fb, version) if fb and fb.kind != "dense" else \
        version.mla_block_size(cc, arch.is_sparse_mla, fp8_kv=kv.startswith("fp8"),
                               vendor=gpu.vendor,
                               qk_nope=int(arch.text_config.get("qk_nope_head_dim") or 1))
    user_bs = a.block_size
    if user_bs and arch.is_mla and version.mla_forces_block(user_bs, mla_block, cc, gpu.vendor):
        notes.append(f"vLLM {version.text} forces --block-size {user_bs} to {mla_block} for "
                     "its MLA backend")
        user_bs = mla_block
    composite = None if forced else BK.composite_backend(
        arch, kv=kv, cc=cc, vendor=gpu.vendor, version=version, multimodal=mm_on,
        dcp=a.decode_context_parallel_size)
    backend_bs = BK.preferred_block(arch, kv=kv, cc=cc, vendor=gpu.vendor, version=version,
                                    composite=composite, rocm_aiter=a.rocm_aiter,
                                    kept=bool(dts.skip)) if not forced else (
        (fb.block, f"{forced} prefers {fb.block}-token blocks")
        if fb and fb.kind == "dense" and fb.block != 16 else None)
    t = arch.text_config
    # 0.12-0.17 align hybrid blocks to 32 for 256-wide heads on data-centre Blackwell
    # (FlashInfer issue 1993; `HybridAttentionMambaModelConfig`: 10.0 in 0.12-0.13, the 10.x
    # family in 0.14-0.17)
    fi_1993 = (arch.is_hybrid_state and gpu.vendor == "nvidia" and version.at_least(0, 12)
               and not version.at_least(0, 18) and 256 in arch.attn_head_sizes
               and (cc_tuple(cc) == (10, 0) or (cc_major(cc) == 10 and version.at_least(0, 14))))
    # 0.17-0.31 align the block to the state shape the model class reports, which only
    # Nemotron-H widens for speculative decoding (`get_mamba_state_shape_from_config`), while
    # every `MambaMixer2` allocates the widened state (`get_state_shape`)
    narrow = (k_spec and MAMBA2 in arch.state_kinds and arch.model_type != "nemotron_h"
              and version.at_least(0, 17) and not version.at_least(0, 32))
    plan = choose_block_size(replace(karch, layers=arch.layers + drafted) if narrow else karch,
                             user_block_size=user_bs, mla_block=mla_block, tp=tp,
                             dt=dts, align_mode=align_mode, gdn_flashinfer=gdn_fi,
                             min_kernel_block=32 if fi_1993 else 16,
                             chunk=int(t.get("mamba_chunk_size") or t.get("chunk_size") or 2048)
                             if mode == "all" else 0,  # `get_mamba_chunk_size`
                             **({"default": backend_bs} if backend_bs else {}))
    if narrow and plan.mamba_page_padded:
        wide = max(state_bytes(x, tp, dts) for x in karch.layers if isinstance(x, StateLayer))
        if wide > plan.mamba_page_padded:  # `MambaSpec.page_size_bytes` asserts
            raise BadInput(f"vLLM {version.text} fails at start with speculative decoding on "
                           f"this Mamba2 hybrid: its state widened for k={k_spec} ({wide:,} B) "
                           f"outgrows the page aligned to the narrow state "
                           f"({plan.mamba_page_padded:,} B; AssertionError page_size_padded "
                           ">= page_size)", hint="use vLLM 0.32+ or no speculative decoding",
                           flag="speculative_config")
    if dts.skip and dts.kv != model_dtype and version.at_least(0, 25):
        if backend_bs:
            raise BadInput(f"kvplan does not size --kv-cache-dtype-skip-layers where the "
                           f"attention backend sets the block ({backend_bs[1]}): the kept "
                           "layers pad to a shared page (`_align_heterogeneous_kv_block_size`)",
                           hint="size without the skip list", flag="kv_cache_dtype_skip_layers")
        plan = KF.heterogeneous_block(plan, arch, dts, tp, cc, version)
    if mode == "align" and version.at_least(0, 17) and not version.at_least(0, 27) and \
            plan.block_size > mnbt:  # `VllmConfig.validate_block_size` (0.17.1-0.26.0)
        raise BadInput(f"vLLM {version.text} refuses Mamba 'align' prefix caching with a "
                       f"{plan.block_size}-token block above --max-num-batched-tokens {mnbt}",
                       hint=f"use --max-num-batched-tokens {plan.block_size} or more, or "
                            "--no-enable-prefix-caching", flag="max_num_batched_tokens")
    # vLLM decides on `attention_chunk_size` in the text config, which MiMo-V2-Flash also
    # carries without chunked layers (`VllmConfig.__post_init__`)
    # V0 (`ModelConfig` drops Gemma 2/3's interleaved window) and V1 before 0.9.1
    # (`unify_hybrid_kv_cache_specs` on every start) have no hybrid allocator
    disable_hybrid = a.disable_hybrid_kv_cache_manager or not version.hybrid_allocator or (
        arch.text_config.get("attention_chunk_size") is not None
        and not version.chunked_local_groups(bool(spec) and spec.eagle_like))
    if disable_hybrid and any(isinstance(x, AttnLayer) and x.kind in ("sliding", "chunked")
                              for x in arch.layers):
        notes.append("hybrid KV-cache manager off: local-attention layers are charged as full "
                     "attention")
    cross = [x for x in arch.layers if isinstance(x, AttnLayer) and x.kind == CROSS]
    if disable_hybrid and cross:
        notes.append(f"V0 keeps every layer's KV in each block, the {len(cross)} "
                     "cross-attention layers' too (`CacheEngine.get_cache_block_size`); an "
                     f"image request takes {cdiv(cross[0].encoder_len, plan.block_size):,} "
                     f"more blocks for its {cross[0].encoder_len:,} encoder tokens (the "
                     "tables count text only)")
    specs, spec_layer = layer_specs(karch, tp=tp, dt=dts, block=plan,
                                    inflight_state_blocks=state_blocks,
                                    all_states=mode == "all",
                                    disable_hybrid=disable_hybrid)
    if a.decode_context_parallel_size > 1:
        BK.check_dcp(arch, dcp=a.decode_context_parallel_size, tp=tp, kv=kv, cc=cc,
                     vendor=gpu.vendor, version=version)
        specs = _dcp_specs(specs, a.decode_context_parallel_size, version)
    if spec and version.at_least(0, 28) and SD.multi_module_mtp(arch, spec):
        # 0.28+ keep k - 1 more tokens inside every sliding window for a chain of MTP modules
        # (`SlidingWindowSpec.extra_retained_tokens`; 0.33 `num_prefill_lookahead_tokens`)
        specs = [replace(x, window=x.window + k_spec - 1) if x is not None and x.window
                 else x for x in specs]
    if arch.model_type in ("cohere2", "cohere2_moe") and version.at_least(0, 29):
        # commandr.py / cohere2_moe.py 0.29+: a sliding layer sees sliding_window + 1 tokens,
        # passed as its window ("The same +1 propagates into the KV-cache eviction formula")
        specs = [replace(x, window=x.window + 1) if x is not None and x.kind == SLIDING
                 else x for x in specs]
    old_v4 = arch.packed_kv and (version.dsv4_tuple_layout or version.dsv4_bucketed_layout)
    if old_v4:
        specs = B.tuple_padded(specs)
    groups = B.packed_groups(specs) if arch.packed_kv else B.make_groups(
        specs, version.group_max_ratio)
    bs = plan.block_size if arch.packed_kv else min(
        (g.block_size for g in groups if not g.spec.is_state), default=plan.block_size)
    v2_graphs, v2_fp32, v2_state, v2_mm = version.v2_profile() if v2 else (True, None, False,
                                                                          True)
    # pooling models schedule synchronously unless asked (`VllmConfig.__post_init__`, 0.20+)
    async_on = version.async_scheduling(False if pooling and a.async_scheduling is None
                                        else a.async_scheduling, v2,
                                        spec.method if spec else None,
                                        bool(spec and spec.unpadded), pp)
    inflight = mnbt * version.inflight_batches(pp, v2, async_on)

    # memory per pipeline stage
    stages = pp_partition(arch.num_layers, pp, a.pp_layer_partition,
                          rest_to_last=not version.at_least(0, 8))
    kv_stages = stages[:-1] + [range(stages[-1].start, stages[-1].stop + len(drafted))]
    stage_weights = partial(
        _weights_per_stage, model, arch, a, model_dtype, stages, cc, mla_absorb=version.v1,
        mistral_native=version.mistral_native_tower(model.id),
        fp32_router=version.fp32_router_model(arch.model_type, cc, gpu.vendor,
                                              arch.text_config),
        fp32_head=arch.model_type in MINIMAX01, kv_unused=version.kv_sharing_layers_keep_kv,
        mxfp4_scales_kept=not version.at_least(0, 25),
        marlin_scales=fp8_marlin_scales(arch, model, gpu, version, dtype_bytes(model_dtype)),
        q_groups=_q_groups(arch, a, version),
        # `_mark_tower_model` skips the towers past the first stage only under V2 from 0.33
        towers_every_stage=not (v2 and version.at_least(0, 33)),
        vendor=gpu.vendor, release=version.v[:2],
        indexer_wk_16bit=arch.is_sparse_mla and DSV4 not in arch.kinds
        and version.at_least(0, 20), no_head=pooling, ep_even=version.at_least(0, 10, 1),
        shared_whole=version.sp_moe_shared_whole(
            arch.architectures, tp=tp, dp=a.data_parallel_size, ep=a.enable_expert_parallel,
            backend=asked or A2A.default(version.v)))
    if not a.flashinfer_moe_fp8 and version.at_least(0, 24):
        notes.append(f"vLLM {version.text} no longer reads VLLM_USE_FLASHINFER_MOE_FP8 (gone "
                     "in 0.24), so it is sized as unset; --moe-backend triton moves FP8 "
                     "experts off FlashInfer")
    fi_pad, fi_what = MK.fi_expert_pad(arch, model, a, gpu, version)
    weights, weights_total, estimated = stage_weights(fi_pad=fi_pad)
    if fi_pad > 1:
        padding = max(weights) - max(stage_weights()[0])
        if padding >= 256 * MiB:
            notes.append(f"{fi_what}: {padding / GiB:.2f} GiB per GPU")
    # built on every GPU at load; MLA's stays fp32 where its custom op runs (no compilation)
    eager_ops = a.enforce_eager or a.compilation_mode not in (None, 3) or \
        version.breakable_cudagraph(arch.architectures, gpu.vendor, a.breakable_cudagraph)
    ropes = tuple(rope_tables(arch, dtype_bytes(model_dtype), mla_fp32=mla_rope_fp32(
        arch, version.v[:2], vendor=gpu.vendor, model_dtype=model_dtype, custom_ops=eager_ops),
        indexer_rope=indexer_rope_cache(arch, version.v[:2]),
        mrope_factor=mrope_positions_factor(arch, version.v), max_len=mml, release=version.v))
    rope = sum(x.nbytes for x in ropes)
    weights[0] += ple_buffer_bytes(arch, mnbt, dtype_bytes(model_dtype))
    if a.kv_sharing_fast_prefill:  # built with the model, so counted as it loads
        fast = fast_prefill_buffer_bytes(arch, mnbt, dtype_bytes(model_dtype), version.v[:2])
        weights = [w + fast for w in weights]
        if fast:
            notes.append(f"--kv-sharing-fast-prefill: {fast / MiB:.0f} MiB of buffers per GPU "
                         "(positions, hidden states and per-layer inputs for the batch); the "
                         "profile still runs every token through the KV-sharing layers, and "
                         "its CUDA graphs (two compiled pieces) are unmeasured")
    weights = [w + deepstack_buffer_bytes(arch, mnbt, dtype_bytes(model_dtype))
               for w in weights]
    weights = [w + topk_buffer_bytes(arch, mnbt) for w in weights]  # every stage's model
    extra, moe_padded = [0] * len(stages), False
    if gpu.vendor == "amd":  # the replay is imported where it applies only
        from kvplan.core.loadmem import rocm_load_extra

        extra, moe_padded = rocm_load_extra(model, arch, a, gpu, version, model_dtype, stages,
                                            ropes)
    elif gpu.vendor == "nvidia" and not model.weights_layout:
        from kvplan.core.loadmem import load_rounding

        extra = load_rounding(model, arch, a, version, model_dtype, stages, ropes)
    if a.rocm_aiter and gpu.vendor == "amd":
        notes.append("VLLM_ROCM_USE_AITER: kvplan models AITER's MoE weight shuffle, not its "
                     "attention and GEMM kernels' share of the profile run")
    weights = [w + rope + x for w, x in zip(weights, extra)]
    weights = [w + q for w, q in zip(weights, KF.load_buffers(
        arch, dts, a, stages, seqs, mnbt, cc, version, notes))]
    mla_load, mla_probe = BK.mla_backend_buffers(
        arch, cc=cc, vendor=gpu.vendor, version=version, forced=forced, kv=kv, tp=tp,
        dcp=a.decode_context_parallel_size)
    weights = [w + mla_load for w in weights]  # backend modules imported in every stage
    lora = _lora_bytes(arch, a, version, stages, dtype_bytes(model_dtype), notes, gpu.vendor)
    # V0 0.7 builds the slots after its profile (vLLM issue 14450); 0.8+ inside the load's
    # `DeviceMemoryProfiler` (PR 14469), and 0.6's non-torch term catches them
    lora_late = not version.v1 and version.at_least(0, 7) and not version.at_least(0, 8)
    late_lora = max(lora) if lora_late else 0
    if not lora_late:
        weights = [w + x for w, x in zip(weights, lora)]
    draft_bytes = 0
    if spec:
        draft_bytes, draft_est = SD.draft_weight_bytes(
            arch, spec, tp=tp, ep=a.moe_ranks,
            d=dtype_bytes(model_dtype), hf_quant=model.quant_file, version=version,
            pp=a.pipeline_parallel_size)
        draft_rope = SD.draft_rope_bytes(arch, spec, d=dtype_bytes(model_dtype),
                                         version=version, max_model_len=mml)
        rope += draft_rope  # reported with the target's (the drafter's is on the last stage)
        weights[-1] += draft_bytes + draft_rope
        notes.append(f"speculative decoding ({spec.method}, k={k_spec}): "
                     + (f"{len(drafted)} draft layer(s) join the KV cache; " if drafted else "")
                     + (f"the drafter loads {draft_bytes / GiB:.2f} GiB per GPU"
                        + (" (estimated)" if draft_est else "") + "; " if draft_bytes else "")
                     + "its share of the profile run's peak is not modelled")
    if max(extra) >= 64 * MiB and gpu.vendor == "amd":
        notes.append(f"ROCm: vLLM's weight post-processing adds {max(extra) / GiB:.2f} GiB per "
                     "GPU to the load figure (padded copies"
                     + (", and the blocks the caching allocator keeps after them, which ROCm "
                        "builds up to 0.20 count" if version.rocm_load_counts_cache else "")
                     + ")" + ("; VLLM_ROCM_MOE_PADDING=0 (--env) skips the MoE padding"
                              if moe_padded else ""))
    if estimated:
        notes.append("weights estimated from the config's parameter count (no checkpoint size "
                     "known)")
    if gpu.memory_note:
        notes.append(f"{gpu.memory_note}; --gpu-memory SIZE gives the one the GPU reports")
    if gpu.note:
        notes.append(gpu.note)
    if a.cpu_offload_gb:
        # `UVAOffloader.wrap_modules`: decoder-layer parameters move to pinned host memory,
        # parameter by parameter, until cpu_offload_gb GiB (per GPU) are offloaded
        off = int(a.cpu_offload_gb * GiB)
        # only decoder layers are wrapped: the embedding, LM head and rotary cache stay
        pc, wb = count_params(arch), weight_bytes(arch, dtype_bytes(model_dtype),
                                                   a.quantization, model.quant_file)
        embed = int(pc.embed / tp * wb.other)
        last = len(weights) - 1  # a tied head is the embedding, copied only past stage 0
        head = int(pc.lm_head / tp * wb.lm_head_bytes) if pc.lm_head else (
            embed if last else 0)
        weights = [w - min(off, max(0, w - rope - (embed if si == 0 else 0)
                                    - (head if si == last else 0)))
                   for si, w in enumerate(weights)]
        notes.append(f"--cpu-offload-gb {a.cpu_offload_gb:g}: up to {a.cpu_offload_gb:g} GiB of "
                     "weights per GPU stay in host memory and cross PCIe on every forward pass "
                     "(the throughput model does not count that)")
    util = a.gpu_memory_utilization or version.default_gpu_memory_utilization
    # the experts' intermediate: whole with expert parallelism, else split over TP x DP
    shape = replace(_activation_shape(arch, a.expert_tp, tp, model_dtype),
                    moe_split_caches=not version.at_least(0, 8))
    if shape.moe_intermediate_local:
        shape = MK.with_moe_kernel(shape, arch, model, a, gpu, version, a2a,
                                   mnbt if version.at_least(0, 20) else A2A.BATCHED_DP_TOKENS)
    late_slots = 0  # microbatch workspace slots first allocated after sizing
    ubatches = A2A.ubatches(a, asked, gpu, version, notes)
    if ubatches > 1 and shape.moe_intermediate_local:
        # the V1 profile splits its dummy batch only with DP > 1 and a budget at the prefill
        # threshold (`check_ubatch_thresholds`); V2 never splits it (a helper's reading of
        # the 0.33 runners)
        if not v2 and a.data_parallel_size > 1 and mnbt >= a.dbo_prefill_token_threshold:
            shape = replace(shape, ubatches=ubatches)
            notes.append(f"microbatching: the profile run splits its batch in {ubatches}, each "
                         "with its own MoE workspace slot and only the running one holding a "
                         "kernel's per-call buffers")
        elif shape.moe_kernel in M.BATCHED_KERNELS:
            late_slots = (ubatches - 1) * shape.moe_scratch_bytes(0, None)
            notes.append(f"microbatching: the profile run is not split (budget "
                         f"{mnbt:,} < --dbo-prefill-token-threshold "
                         f"{a.dbo_prefill_token_threshold}), so the other microbatch's "
                         f"{late_slots / GiB:.2f} GiB workspace slot comes after the KV cache "
                         "is sized, above gpu_memory_utilization")
    copies = "sampler_fp32_copies_v017" if version.at_least(0, 17) else "sampler_fp32_copies"
    # V1 only: V0's sampler takes FlashInfer only with VLLM_USE_FLASHINFER_SAMPLER=1 ("In V0,
    # None means False", `TopKTopPSampler`), a path kvplan does not model
    # V1's `TopKTopPSampler` takes FlashInfer when it is installed until 0.11.1 made it
    # opt-in (0.8.x with flashinfer < 0.2.3, 0.9+ with >= 0.2.3); the image note covers the
    # releases whose logs measured it (0.10-0.11.0)
    fi_flag = version.v1 and not version.at_least(0, 11, 1)
    fi_era = fi_flag and version.at_least(0, 10)
    if a.flashinfer_sampler and fi_flag:
        copies = "sampler_fp32_copies_flashinfer"  # 0.10-0.11.0 profile the selected sampler
    elif fi_era and gpu.vendor == "nvidia" and a.kv_cache_memory_bytes is None and \
            not pooling:
        saved = (M.const("sampler_fp32_copies") - M.const("sampler_fp32_copies_flashinfer")) \
            * min(mnbt, seqs) * arch.vocab_size * 4
        if saved >= GiB:
            notes.append(f"the vllm/vllm-openai image of this release samples through FlashInfer "
                         f"in the profile run, leaving {saved / GiB:.1f} GiB more KV cache than "
                         "a pip install without flashinfer: --flashinfer-sampler models it")

    profile_tokens, profile_reqs = SD.profile_batch(spec, v2, version, mnbt, seqs) if spec \
        else (mnbt, min(mnbt, seqs))
    attn_point = floor = built = 0  # built: reserved at model build (inside the load)
    t, heads_local = arch.text_config, max(arch.num_attention_heads // tp, 1)
    # sparse MLA has its own backends
    triton_mla = MLA in arch.kinds and not arch.is_sparse_mla and (
        forced == "TRITON_MLA" if forced else BK.triton_mla_runs(cc, gpu.vendor, a.rocm_aiter))
    if version.v1 and MLA in arch.kinds:  # the MLA layer's point: hidden copies + scratch
        nope = int(t.get("qk_nope_head_dim") or 0)
        attn_point = M.hidden_copies_bytes(shape, mnbt) + M.mla_profile_scratch(
            mml, seqs, bs, heads_local, nope + int(t.get("v_head_dim") or nope),
            dtype_bytes(model_dtype), seqs_floor=not version.at_least(0, 28))
        if arch.is_sparse_mla and version.at_least(0, 13):  # V3.2's indexer K gather
            floor = M.indexer_gather_bytes(mml, int(t.get("index_head_dim") or 128),
                                           factor_rule=version.at_least(0, 32),
                                           radix=version.at_least(0, 20))
            kv_lora = int(t.get("kv_lora_rank") or 512)
            q_head = kv_lora + int(t.get("qk_rope_head_dim") or 64)
            if kv == "fp8_ds_mla" and gpu.vendor == "nvidia" and cc_major(cc) in (9, 10):
                built = M.flashmla_sparse_bytes(  # FlashMLA-sparse stores it
                    mnbt, heads_local, mml, q_head=q_head, kv_lora_rank=kv_lora,
                    v031=version.at_least(0, 31), factor_rule=version.at_least(0, 32))
            elif BK.flashmla_sparse_runs(cc=cc, vendor=gpu.vendor, version=version, kv=kv,
                                         heads_local=heads_local, forced=forced):
                built = M.flashmla_sparse_bytes(mnbt, heads_local, 0, q_head=q_head,
                                                kv_lora_rank=kv_lora, query_only=True)
            floor = max(floor, built)
        if triton_mla and version.at_least(0, 25):
            logits = M.triton_mla_logits_bytes(
                seqs * (1 + k_spec if spec else 1), heads_local * a.decode_context_parallel_size,
                mml, gpu.sm_count, int(t.get("kv_lora_rank") or 0))
            if version.at_least(0, 33):  # reserved in the profile forward, so KV sizes around it
                floor = logits
            elif logits >= 256 * MiB:
                notes.append(f"Triton MLA reserves {logits / GiB:.2f} GiB for its split-KV "
                             "decode logits when its metadata builder is made, after the KV "
                             "cache is sized, on top of --gpu-memory-utilization (0.25-0.32; "
                             "0.33 sizes the KV cache around it)")
    elif MAMBA2 in arch.state_kinds and version.at_least(0, 20):
        m2 = next(st for x in arch.layers for st in (x, getattr(x, "parallel_state", None))
                  if isinstance(st, StateLayer) and st.kind == MAMBA2)
        attn_point = M.mamba2_profile_point(m2.intermediate, m2.n_groups, m2.d_state,
                                            m2.n_heads, arch.hidden_size, tp, profile_tokens,
                                            dtype_bytes(model_dtype))
    elif DSV4 in arch.kinds and any(getattr(x, "compress_ratio", 0) == 4 for x in arch.layers):
        attn_point, floor = M.dsv4_profile(t, tokens=mnbt, max_model_len=mml,
                                           heads_local=heads_local, tp=tp,
                                           v033=version.at_least(0, 33),
                                           nvidia=gpu.vendor == "nvidia",
                                           factor_rule=version.at_least(0, 32),
                                           topk_ints=gpu.vendor == "nvidia"
                                           and version.at_least(0, 27))

    sampler_copies = M.const(copies)
    if a.logprobs_mode not in (None, *LOGPROBS_MODES):
        raise BadInput(f"--logprobs-mode {a.logprobs_mode!r} is not one of vLLM's",
                       hint=", ".join(LOGPROBS_MODES), flag="logprobs_mode")
    if a.return_sampling_mask:  # `VllmConfig._verify_sampling_replay_config` (0.28+)
        why = ("exists from 0.28" if not version.at_least(0, 28) else
               "needs model runner V2" if not v2 else
               "refuses speculative decoding" if spec and not version.at_least(0, 30) else
               "needs --logprobs-mode processed_logprobs"
               if a.logprobs_mode != "processed_logprobs" else "")
        if why:
            raise BadInput(f"vLLM {version.text}'s --return-sampling-mask {why}",
                           hint="add --logprobs-mode processed_logprobs, or drop the mask",
                           flag="return_sampling_mask")
    # V2's sampler does not fuse when the warm-up's 5 logprobs are processed ones (0.24+;
    # processed_logits from 0.26) or with the mask (`Sampler.sample`)
    lp_mode = str(a.logprobs_mode or "")  # (`mode` is the Mamba cache mode)
    fused_ok = not (a.return_sampling_mask or lp_mode == "processed_logprobs"
                    or (lp_mode == "processed_logits" and version.at_least(0, 26)))
    if v2 and version.v2_flashinfer_sampler(cc, gpu.vendor, a.flashinfer_sampler,
                                            sm_count=gpu.sm_count, fused_ok=fused_ok):
        sampler_copies = M.const("sampler_fp32_copies_flashinfer")
    elif v2 and v2_fp32 is None and profile_reqs:
        # 0.33's warm-up pass without FlashInfer (ROCm; CUDA below SM80 or with it off): the
        # model-dtype logits, one fp32 copy the processors and `apply_top_k_top_p_triton`
        # work in place, and that kernel's cached [min(pow2(min(SMs, N)), SMs), vocab] fp32
        # rows (`_TRITON_BUFFER_CACHE`); gumbel sampling makes no [N, vocab] tensor
        sms = gpu.sm_count or profile_reqs
        rows = min(1 << max(0, (min(sms, profile_reqs) - 1).bit_length()), sms)
        sampler_copies = dtype_bytes(model_dtype) / 4 + 1 + rows / profile_reqs
    if v2_fp32 is not None:  # V2's greedy dummy sampler: the model-dtype logits (gathered
        # and reshaped at TP > 1: 2 + 1/TP copies) and 0.24-0.25's one fp32 copy, in fp32 units
        logits = 1.0 if tp == 1 else 2.0 + 1.0 / tp
        sampler_copies = (logits * dtype_bytes(model_dtype) + 4 * v2_fp32) / 4

    def lm_peak(sampler_reqs: int) -> int:
        # a pooling model runs its pooler, not the sampler: no vocab-sized logits
        return M.activation_peak(shape, profile_tokens, 0 if pooling else sampler_reqs,
                                 v1=version.v1,
                                 sampler_copies=sampler_copies,
                                 moe_chunk=version.moe_chunk, v024=version.at_least(0, 24),
                                 attn_point=attn_point, workspace_floor=floor)

    act = lm_peak(profile_reqs) - built  # the kept workspace's build-time part is in the load
    weights = [w + built for w in weights]
    # penalty and grammar state on the last stage, charged from 0.27
    sampler_state = M.v2_sampler_state_bytes(seqs, arch.vocab_size, 1 + k_spec) \
        if v2_state and not pooling else 0  # pooling builds no Sampler (`load_model`)
    # V2's `EncoderRunner.inputs_embeds` ([max_num_tokens, hidden] in the model dtype) for a
    # multimodal model whose towers run, allocated with the runner before the profile too
    # (0.29+: text-only models hold the same buffer with --enable-prompt-embeds,
    # `DefaultModelState.__init__`)
    mm_embeds = mnbt * arch.hidden_size * dtype_bytes(model_dtype) if v2_state and (
        (arch.vision_config and towers_kept(
            arch.architectures, a.limit_mm_per_prompt, a.language_model_only)[0])
        or (a.enable_prompt_embeds and version.at_least(0, 29))) else 0
    # with pipeline parallelism the encoder runner (and its buffer) lives on the first stage
    # (`encoder_cache` on `is_first_pp_rank`); prompt embeds' buffer on every stage
    vision_embeds = bool(arch.vision_config) and mm_embeds and v2 and pp > 1
    act += sampler_state + (0 if vision_embeds else mm_embeds)
    warm = late_lora + late_slots  # outside the budget: V0's LoRA slots, microbatch slots,
    # V2's top-k/top-p warm-up after
    # sizing, 0.24-0.26's state
    if v2 and v2_fp32 is not None and not pooling:
        fi = version.v2_flashinfer_sampler(cc, gpu.vendor, a.flashinfer_sampler, in_profile=False,
                                           sm_count=gpu.sm_count, fused_ok=fused_ok)
        warm = int(min(mnbt, seqs) * arch.vocab_size * 4 * M.const(
            "sampler_fp32_copies_flashinfer" if fi else copies)) + (
            0 if v2_state else M.v2_sampler_state_bytes(seqs, arch.vocab_size, 1 + k_spec))
        if warm >= 256 * MiB and a.kv_cache_memory_bytes is None:
            notes.append(f"model runner V2: {warm / GiB:.2f} GiB of sampler memory (its "
                         "warm-up after the KV cache is sized" + (
                             "" if v2_state else ", and its penalty / grammar state")
                         + ") sits above gpu_memory_utilization; leave that much free")
    if spec and v2 and spec.draft_sample == "probabilistic" and spec.method not in SD.NO_DRAFT:
        # `DraftModelSpeculator.__init__`: the cached proposal distribution [max_num_reqs, k,
        # vocab], fp32 to 0.27, the head dtype from 0.28 (`draft_logits_spec`); allocated
        # before the profile, so charged only where it counts `total_consumed` (0.27+)
        logits = seqs * k_spec * arch.vocab_size * (
            dtype_bytes(model_dtype) if version.at_least(0, 28) else 4)
        if version.at_least(0, 27):
            act += logits
        else:
            warm += logits
        notes.append(f"draft_sample_method probabilistic: the drafter keeps {logits / GiB:.2f} "
                     f"GiB of draft logits ({seqs} sequences x k={k_spec} x vocabulary)"
                     + ("" if version.at_least(0, 27) else
                        ", above gpu_memory_utilization in this release"))
    hidden = SD.hidden_buffer_bytes(spec, arch, v2, mnbt, dtype_bytes(model_dtype)) \
        if spec else 0
    if spec and v2 and version.at_least(0, 33) and not a.enforce_eager and \
            a.cudagraph_mode in (None, "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"):
        hidden += SD.dflash_aux_staging_bytes(spec, arch, seqs, mnbt, dtype_bytes(model_dtype))
    if hidden:  # the speculator's hidden-state buffer, allocated before the profile too
        if version.at_least(0, 27):
            act += hidden
        else:
            warm += hidden
    table = SD.ngram_token_table_bytes(spec, v2, version, seqs, mml) if spec else 0
    if table:  # allocated with the model runner, before the profile (as the draft logits)
        if version.at_least(0, 27):
            act += table
        else:
            warm += table
        notes.append(f"{spec.method} keeps a {table / GiB:.2f} GiB token table on the GPU "
                     f"({seqs} sequences x max_model_len {mml:,} x int32)" + (
                         "" if version.at_least(0, 27) else
                         ", above gpu_memory_utilization in this release"))
    tq = KF.turboquant_workspace(arch, dts, tp, seqs, mml, plan.block_size, model_dtype,
                                 version)
    warm += tq
    if tq:
        notes.append(f"TurboQuant's decode workspace ({tq / GiB:.2f} GiB) is "
                     + ("reserved after the profile" if version.at_least(0, 24) else
                        "grown after the profile (capture, first requests), up to")
                     + " above gpu_memory_utilization (read in the source)")
        if not version.at_least(0, 24) and not a.enforce_eager and a.cudagraph_mode != "NONE":
            # `capture_model` locks the workspace; 0.24 reserves it up front
            notes.append(f"vLLM {version.text} locks the workspace after CUDA-graph capture, so "
                         "the first request whose cached prefix outgrows it crashes ('Workspace "
                         "is locked but allocation from ... _continuation_prefill', vLLM issue "
                         "43357): use 0.24+ or --enforce-eager")
    if shape.moe_kernel.startswith("deepgemm") and a.moe_backend == "auto":
        notes.append("MoE scratch sized for DeepGEMM, which this release picks for block-FP8 "
                     "experts when the deep_gemm package is installed (the vllm/vllm-openai "
                     "image); without it vLLM runs Triton kernels with less scratch")
    # V1 runs the dummy sampler on the last pipeline stage only (`profile_run`:
    # `get_pp_group().is_last_rank`)
    act_inner = lm_peak(0) - built if version.v1 and pp > 1 else act
    if version.v1 and pp > 1:  # held on every stage: the n-gram token table (0.27+), and
        # prompt embeds' buffer (`DefaultModelState`)
        act_inner += (table if version.at_least(0, 27) else 0) + (
            0 if vision_embeds else mm_embeds)
    enc = None
    if mm_profiled(arch.architectures, version) and v2_mm and not a.skip_mm_profiling and \
            towers_kept(arch.architectures, a.limit_mm_per_prompt, a.language_model_only)[0]:
        native = version.mistral_native_tower(model.id)  # a whole tower on every rank
        pix = mm_pixels(a, version, notes, arch.architectures, native)
        enc = encoder_profile(arch.architectures, arch.vision_config,
                              tp=1 if native and any(x in MISTRAL_NATIVE for x in
                                                     arch.architectures) else tp,
                              max_model_len=mml, max_num_batched_tokens=mnbt, max_num_seqs=seqs,
                              text_hidden=arch.hidden_size, limits=a.limit_mm_per_prompt,
                              px=mm_pixel_bytes(arch.architectures, version, v2),
                              encoder_dp=a.mm_encoder_tp_mode == "data",
                              dense_mask=version.pixtral_dense_mask(cc),
                              merge=int(model.config.get("spatial_merge_size") or 2),
                              audio_tower=arch.audio_config is not None,
                              frame_chunk=gemma4_frame_chunk(
                                  arch.vision_config, gpu.memory_bytes,
                                  chunked=version.at_least(0, 22),
                                  video=(a.limit_mm_per_prompt or {}).get(
                                      "video", DEFAULT_MM_LIMIT) > 0,
                                  soft_tokens=pix.soft_tokens),
                              pixels=pix,
                              dummy_len=mml if version.at_least(0, 11) else mnbt,
                              sizes=a.mm_dummy_sizes if version.at_least(0, 11, 1) else None)
    gemma4_frames = any(x in GEMMA4 for x in arch.architectures) and all(
        m == "video" and set(o) <= {"num_frames"} for m, o in (a.mm_dummy_sizes or {}).items())
    if enc is not None and a.mm_dummy_sizes and version.at_least(0, 11, 1) and not any(
            x in QWEN2_VL + QWEN3_VL for x in arch.architectures) and not gemma4_frames:
        notes.append("--limit-mm-per-prompt's dummy width / height / num_frames shrink the "
                     "item vLLM profiles the encoder with; kvplan models that for the Qwen VL "
                     "families only and profiles this model's full-size item (its KV cache "
                     "estimate is low by up to the encoder peak)")
    if enc is None and v2_mm and not a.skip_mm_profiling and arch.vision_config is not None \
            and towers_kept(arch.architectures, a.limit_mm_per_prompt, a.language_model_only)[0]:
        # a release before kvplan models the profile, or a family it has no profile for
        # (Kimi-K2.5's MoonViT, LLaVA-Next, ...; review 25g)
        notes.append(f"the vision encoder's share of vLLM {version.text}'s profile run is not "
                     "modelled for this model (kvplan models Qwen VL, Gemma 3/4, Llama 4 and "
                     "Pixtral towers, from 0.20; the Qwen VL families from 0.8 on V1): the "
                     "activation peak may be low and the KV cache high; --skip-mm-profiling or "
                     "--language-model-only as vLLM's flags avoid it")
    act_first = act_inner + (mm_embeds if vision_embeds else 0)  # the first stage's (the
    # only one V2 profiles the encoder on)
    if enc is not None:  # `profile_run`: max(encoder peak, LM peak + pixels + outputs)
        # V2's sampler state exists from `load_model`, so it sits under the encoder's peak
        # too (last stage; V2 runs the encoder on the first, so only without PP)
        held = sampler_state + mm_embeds if not (v2 and pp > 1) else 0
        with_enc = [max(enc.encoder_peak + int(M.const("act_fixed_mib") * MiB) + held,
                        x + enc.held_for_lm) for x in (act, act_inner)]
        if v2 and pp > 1:  # V2 `profile_run`: the encoder only on `is_first_pp_rank`
            act_first = max(enc.encoder_peak + int(M.const("act_fixed_mib") * MiB) + (
                mm_embeds if vision_embeds else 0), act_first + enc.held_for_lm)
        else:
            act, act_inner = with_enc
            act_first = act_inner
        notes.append(f"the profile run also runs the vision encoder on {enc.items} "
                     f"{enc.modality} item(s) of {enc.tokens_per_item:,} tokens "
                     f"({enc.encoder_peak / GiB:.2f} GiB peak; --skip-mm-profiling skips it)")
    # breakable CUDA graphs: captured around attention without torch.compile (mode NONE)
    breakable = version.breakable_cudagraph(arch.architectures, gpu.vendor, a.breakable_cudagraph)
    compile_mode = 0 if breakable else a.compilation_mode
    if breakable and not a.enforce_eager:
        notes.append("breakable CUDA graphs (" + ("VLLM_USE_BREAKABLE_CUDAGRAPH=1" if
                     a.breakable_cudagraph else "vLLM's default for this architecture in "
                     f"{version.text}; VLLM_USE_BREAKABLE_CUDAGRAPH=0 opts out") +
                     "): no torch.compile, graphs kept")
    fi_ar = version.flashinfer_allreduce(
        gpu.compute_capability, tp=tp, pp=pp, dp=a.data_parallel_size,
        enforce_eager=a.enforce_eager or compile_mode not in (None, 3)
        or a.fuse_allreduce_rms is False,
        profile_allreduce_bytes=mnbt * arch.hidden_size * dtype_bytes(model_dtype)
    ) and version.fi_allreduce_charged
    # NCCL's P2P transport for the TP group's all-reduces: NVLink within a node (a TP group
    # past the NVLink domain, or across hosts unless 0.27+'s multi-node NVLink path runs on
    # Blackwell, takes the network); a pipeline-only start keeps the smaller term
    nvlink = gpu.interconnect_gbps > 0 and tp <= gpu.nvlink_domain
    hosts_ok = tp <= gpu.gpus_per_node or (version.at_least(0, 27) and cc_major(cc) == 10)
    nt = M.non_torch(tp, pp, nvlink and hosts_ok and tp > 1, fi_ar, rocm=gpu.vendor == "amd",
                     nvlink_tp8=gpu.vendor == "nvidia" and gpu.interconnect_gbps > 0
                     and gpu.nvlink_domain >= 8 and tp >= 8)
    a2a_bytes = A2A.deepep_buffers(a2a, arch, a, gpu, version, mnbt, notes) if a2a else 0
    if MK.mega_moe(arch, a):
        a2a_bytes += A2A.mega_moe_buffer(arch, a, version, mnbt, notes)
    nt += a2a_bytes
    if fi_ar:
        notes.append(f"non-torch memory includes "
                     f"{M.const('non_torch_fi_allreduce_mib') / 1024:.2f} GiB per GPU for vLLM's "
                     "FlashInfer all-reduce workspace (TP > 1 on Hopper / Blackwell, "
                     "0.17-0.26" + ("; measured on 0.18-0.20, absent on 0.30, unmeasured "
                                    "between: this release may leave that much more KV cache)"
                                    if version.at_least(0, 21) else ")"))
    if gpu.unified_memory and a.kv_cache_memory_bytes is None:
        # vLLM reads free memory as the host's available RAM on an integrated GPU
        # (`MemorySnapshot.measure`, `is_integrated_gpu`): host use moves the KV pool
        notes.append("unified memory: vLLM reads free memory as the host's available RAM "
                     "(0.12+) and counts the host's RAM growth during profiling as non-torch "
                     "memory, so the KV pool moves with what else runs (public GB10 starts "
                     "logged 1.8-7.3 GiB less than this estimate, more on a cold compile; "
                     "hosts report 119.6-121.7 GiB in all); --kv-cache-memory-bytes fixes it")
    if version.profile_pins_split_segments and a.kv_cache_memory_bytes is None:
        notes.append("vLLM 0.27-0.30 count an activation segment left split after the profile "
                     "run as used memory (fixed in 0.31): public starts lost up to 1.6 GiB of "
                     "KV cache per GPU to it, mostly at TP1; not in this estimate")
    if gpu.vendor == "amd" and a.kv_cache_memory_bytes is None:
        rocm = M.const("non_torch_rocm_mib") + (
            M.const("non_torch_rocm_tp8_mib") if tp * pp >= 8 else 0)
        notes.append(f"ROCm: non-torch memory includes the {rocm / 1024:.2f} GiB per GPU that "
                     "MI300X starts of vLLM's images hold beyond the CUDA terms; a 0.28 "
                     "source build held none (docs/methodology.md), and "
                     "--kv-cache-memory-bytes from a real start fixes it")
    if gpu.vendor == "amd" and tp >= 8:
        notes.append("ROCm TP8: vLLM gives every rank the smallest rank's block count, and "
                     "public MI300X TP8 starts had a rank about 0.42 GiB below the one they "
                     "log, so expect about that much less KV cache than shown")
    graph_mode = M.effective_cudagraph_mode(a.cudagraph_mode, compile_mode, a.enforce_eager,
                                            breakable=breakable,
                                            keep_full=version.at_least(0, 30),
                                            default_full=version.at_least(0, 11))
    if pooling and "FULL" in graph_mode:  # "Pooling models do not support full cudagraphs.
        graph_mode = "PIECEWISE"  # Overriding cudagraph_mode to PIECEWISE" (0.20-0.33)
    if asked == "deepep_high_throughput" and a.data_parallel_size > 1 and \
            version.at_least(0, 13) and graph_mode != "NONE":
        # `CompilationConfig.set_splitting_ops_for_v1`: DeepEP's high-throughput kernels
        # "are incompatible with CUDA Graphs" (0.13-0.33)
        graph_mode = "NONE"
        notes.append("vLLM captures no CUDA graphs with DeepEP high throughput and -dp > 1")
    if v2 and compile_mode == 1 and version.at_least(0, 32) and graph_mode != "NONE":
        # `_disable_cudagraphs_for_v2_stock_torch_compile` (0.32+): model runner V2 captures
        # no graphs under stock torch.compile
        graph_mode = "NONE"
        notes.append(f"vLLM {version.text} captures no CUDA graphs on model runner V2 with "
                     "stock torch.compile (compilation mode 1)")
    if "FULL" in graph_mode and (why := BK.full_graphs_refused(
            arch, composite, version, triton_mla=triton_mla and gpu.vendor == "nvidia")):
        # NEVER: PIECEWISE when attention is compiled piecewise (the default), else NONE
        graph_mode = "PIECEWISE" if "PIECEWISE" in graph_mode else "NONE"
        notes.append(why)
    if spec and "FULL" in graph_mode and forced == "CUTLASS_MLA":
        # UNIFORM_SINGLE_TOKEN_DECODE: "... is not supported with spec-decode ... PIECEWISE"
        graph_mode = "PIECEWISE"
        notes.append("CUTLASS_MLA takes full graphs for single-token decodes only: with "
                     "speculative decoding vLLM captures PIECEWISE graphs")
    if spec and "FULL" in graph_mode and cc_major(cc) == 12 and gpu.vendor == "nvidia":
        # FlashInfer (the default backend on SM12x) without TRT-LLM decode supports less than
        # UNIFORM_BATCH graphs: "... is not supported with spec-decode ... PIECEWISE"
        graph_mode = "PIECEWISE"
        notes.append("speculative decoding on this GPU's default attention backend "
                     "(FlashInfer): vLLM captures PIECEWISE graphs only")
    if (a.cudagraph_capture_sizes and a.max_cudagraph_capture_size is not None
            and graph_mode != "NONE" and version.at_least(0, 11, 1)):
        kept = [x for x in a.cudagraph_capture_sizes if x <= mnbt]
        if a.max_cudagraph_capture_size != (max(kept) if kept else 0):
            # `VllmConfig._set_cudagraph_sizes` (0.11.1-0.33)
            raise BadInput(f"vLLM {version.text} refuses --max-cudagraph-capture-size "
                           f"{a.max_cudagraph_capture_size} beside capture sizes whose largest "
                           f"kept is {max(kept) if kept else 0} ('should be consistent with "
                           "the max value of cudagraph_capture_sizes')",
                           hint="give one of the two", flag="max_cudagraph_capture_size")
    q_spec = 1 + k_spec if spec and version.at_least(0, 13) else 1
    grid = dict(ceiling=version.cudagraph_ceiling(gpu.compute_capability),
                interactivity=a.performance_mode == "interactivity",
                sizes=a.cudagraph_capture_sizes, max_size=a.max_cudagraph_capture_size or (
                    # V0 captures up to the first of 1, 2, 4, 8, 16, ... at or above
                    # max_num_seqs (`_BATCH_SIZES_TO_CAPTURE` / `batch_size_capture_list`)
                    (seqs if seqs <= 2 else 4 if seqs <= 4 else cdiv(seqs, 8) * 8)
                    if not version.v1 else
                    # gpt-oss raises the default to 1024 for every GPU, 0.13+ ("Overriding max
                    # cuda graph capture size to 1024 for performance", `GptOssForCausalLMConfig`)
                    1024 if "GptOssForCausalLM" in arch.architectures
                    and version.at_least(0, 13) and not a.cudagraph_capture_sizes else None),
                decode_q=q_spec, decode_tiers=version.at_least(0, 29),
                seqs_size=version.at_least(0, 31), step16=version.at_least(0, 12),
                budget_size=version.at_least(0, 20, 1))
    graphs = M.cudagraph_graphs(seqs, mnbt, mode=graph_mode, round_to_q=not v2, v2=v2, **grid)
    # V2's autoregressive drafters capture their own graphs (0.29+), measured in the probe
    draft_graphs = M.drafter_cudagraph_graphs(seqs, mnbt, graph_mode, k_spec, **grid) if (
        spec and v2 and version.at_least(0, 29) and (spec.method in ("eagle", "eagle3") or (
            spec.method == "mtp" and not SD.multi_module_mtp(arch, spec)))) else 0
    # V2's separate draft model (`StandaloneARSpeculator`, 0.31+) drafts without CUDA graphs:
    # its layers are in no capture
    draft_eager = bool(spec and v2 and spec.method == "draft_model" and version.at_least(0, 31))
    if a.enable_lora:  # one capture per LoRA case
        from kvplan.core.lora import graph_cases

        cases = graph_cases(a.cudagraph_specialize_lora, v2=v2,
                            at_least_012=version.at_least(0, 11, 1), max_loras=a.max_loras,
                            active_counts=a.specialize_active_lora and version.at_least(0, 16))
        if graphs and cases > 1:
            notes.append("LoRA: CUDA graphs are captured with and without active adapters "
                         + ("(twice the graphs)" if cases == 2 else
                            f"and per count of active adapters ({cases} times the graphs)"))
        graphs *= cases
    # per-GPU graph memory beside the per-layer estimate: DeepSeek-V4's C128 compressor's
    # stack growth (also in non-torch memory), the sparse indexer's decode logits
    stack = 0
    c128 = graphs and gpu.vendor == "nvidia" and any(
        getattr(x, "compress_ratio", 0) == 128 for x in arch.layers)
    if c128 and version.dsv4_stack_unmeasured and a.kv_cache_memory_bytes is None:
        notes.append("DeepSeek-V4 on vLLM 0.22-0.32: the C128 compressor kernel first runs in "
                     "the CUDA-graph probe, which this release counts in non-torch memory and "
                     "in the graph estimate; 0.20-0.21's kernel grew the CUDA stack by 1.74 GiB "
                     "on an H200 there (up to 3.5 GiB less KV cache), this release's CuTeDSL "
                     "kernel is unmeasured and not in this estimate")
    if c128 and version.dsv4_stack_counted_twice:
        stack = M.dsv4_stack_bytes(gpu.sm_count, gpu.compute_capability)
        nt += stack
        notes.append(f"DeepSeek-V4's C128 compressor kernel grows the CUDA stack by "
                     f"{stack / GiB:.2f} GiB per GPU during the graph probe; this release "
                     "counts it in non-torch memory and in the graph estimate" if stack else
                     "DeepSeek-V4 on this release: the CUDA stack its C128 compressor kernel "
                     "takes (1.74 GiB on a 132-SM H200, counted twice) is not in this estimate; "
                     "the GPU catalog has no SM count for it")
    if mla_probe and "FULL" in graph_mode and graphs:  # first touched by a FULL capture
        stack += mla_probe
    # a DeepSeek-V3.2-style indexer inside the FULL decode graphs (not broken out of them)
    # leaves its decode logits in the graph pool, counted once in the probe and the capture
    if (arch.is_sparse_mla and DSV4 not in arch.kinds and "FULL" in graph_mode and graphs
            and not breakable and gpu.vendor == "nvidia"):
        logits = M.indexer_decode_logits_bytes(M.largest_full_decode(seqs, mnbt, **grid), mml)
        stack += logits
        if logits >= 256 * MiB:
            notes.append(f"the sparse-MLA indexer's decode logits ({logits / GiB:.2f} GiB: the "
                         "largest FULL decode graph's rows x max_model_len x fp32) sit in the "
                         "CUDA-graph pool")
    stage_rows, pools = [], []
    best: tuple[int, M.Budget, int] | None = None
    profiled = version.subtracts_cudagraph(gpu.vendor) and graphs and v2_graphs

    def graph_estimate(rng: range) -> int:
        # graph nodes grow with depth in transformer blocks (mixer + FFN); the drafter's
        # layers (on the last stage) with its own graph count where it captures its own
        n_draft = max(0, rng.stop - stages[-1].stop) if draft_graphs or draft_eager else 0
        depth = len(rng) - n_draft
        depth = depth / 2 if arch.half_block_layers else depth
        return stack + M.cudagraph_estimate(
            depth, graphs, state_layers=arch.is_hybrid_state and graph_mode != "PIECEWISE"
            and not v2,  # V2's probe warms up on one-token decode batches
            rocm=gpu.vendor == "amd", draft_layer_graphs=n_draft * draft_graphs)

    # graphs captured after sizing and not subtracted (before 0.20, V2 before 0.29, or with
    # the estimate switched off), counted with the same estimate
    late_graphs = max(map(graph_estimate, kv_stages)) if graphs and not (
        profiled and a.estimate_cudagraphs) else 0
    dp_moe = a.data_parallel_size if arch.num_experts else 1
    if (gpu.vendor == "nvidia" and cc_major(cc) == 12 and arch.attention_sinks and profiled
            and a.estimate_cudagraphs and a.kv_cache_memory_bytes is None):
        # FA2 has no sinks on SM12x, so FlashInfer runs attention; its workspaces are first
        # allocated in the graph probe, as on data-centre Blackwell (read, unmeasured)
        notes.append("attention sinks on this GPU run on FlashInfer, whose 394-512 MiB "
                     "workspaces (and a 394 MiB decode buffer) are first allocated inside the "
                     "CUDA-graph probe and counted in vLLM's estimate; read in the source, "
                     "unmeasured, not in this estimate: expect up to about 0.9 GiB less KV cache")
    if (gpu.vendor == "nvidia" and ((8, 0) <= cc_tuple(cc) < (9, 0) or cc_major(cc) == 12)
            and kv.startswith("fp8") and not arch.is_mla and profiled and a.estimate_cudagraphs
            and a.kv_cache_memory_bytes is None):
        # FA2 stores no fp8 (`flash_attn_supports_kv_cache_dtype`), so FlashInfer runs the
        # attention; its workspace is first allocated in the graph probe (read, unmeasured;
        # a 0.28 RTX 5090 pair of starts shows fp8 KV 0.21 GiB short of auto)
        notes.append("an fp8 KV cache on Ampere/Ada/SM12x runs on FlashInfer (FlashAttention 2 "
                     "stores no fp8), whose 394 MiB workspace is first allocated inside the "
                     "CUDA-graph probe and counted in vLLM's estimate; read in the source, "
                     "unmeasured, not in this estimate: expect up to about 0.4 GiB less KV "
                     "cache")
    if gpu.vendor == "nvidia" and cc_major(cc) == 10 and a.kv_cache_memory_bytes is None:
        risks = []
        if profiled and a.estimate_cudagraphs and not arch.is_mla:
            risks.append("FlashInfer's 394 MiB attention workspaces, first allocated inside "
                         "the CUDA-graph probe and so counted in vLLM's graph estimate "
                         "(0.4-0.8 GiB)")
        # unquantized GELU experts (Gemma 4 26B-A4B) skip TRT-LLM for FlashInfer CUTLASS
        trtllm = trtllm_bf16_experts(arch) or bool(arch.quantization or model.quant_file)
        if (version.at_least(0, 30) and arch.num_experts and mnbt * dp_moe >= 16384 and trtllm
                and not shape.trtllm  # block FP8 / NVFP4: charged (`trtllm_call_scratch`)
                and shape.moe_kernel not in ("deepgemm_mega", *M.BATCHED_KERNELS)):
            # `prepare_moe` allocates per call through torch (tvm-ffi): at least its bf16
            # gemm2_output [tokens x top_k padded per tile, hidden]; the FP8 / FP4
            # intermediates and the tile padding come on top (FlashInfer 0.7.2.post1)
            rows = mnbt * dp_moe * (arch.experts_per_tok or 1)
            out = rows * (shape.moe_hidden or shape.hidden) * 2
            risks.append(f"the TRT-LLM fused-MoE kernel's per-call scratch, at least "
                         f"{out / GiB:.1f} GiB (its bf16 output for {rows:,} expert rows"
                         + (f"; every MoE layer here sees {mnbt * dp_moe:,} tokens, "
                            f"gathered over {dp_moe} DP ranks" if dp_moe > 1 else "") + ")")
        if version.at_least(0, 30) and tp > 1:
            risks.append("FlashInfer's all-reduce fusion workspace (about 0.75-1 GiB at "
                         "TP8), not charged from 0.30")
        if risks:
            notes.append("data-centre Blackwell, read in the source but unmeasured (no "
                         "public 0.30+ start prints it), not in this estimate: "
                         + "; ".join(risks) + "; expect up to that much less KV cache "
                         "(methodology, 'Not modelled')")
    if profiled and not a.estimate_cudagraphs:
        notes.append(f"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0: the CUDA graphs (about "
                     f"{late_graphs / GiB:.2f} GiB per GPU) are captured after the KV cache "
                     "is sized, above gpu_memory_utilization")
    headroom = gpu.memory_bytes - int(gpu.memory_bytes * util)
    safe = None
    if late_graphs + warm > headroom and a.kv_cache_memory_bytes is None and not gpu.unified_memory:
        safe = math.floor((gpu.memory_bytes - late_graphs - warm - 512 * MiB)
                          / gpu.memory_bytes * 100) / 100
        notes.append(f"OOM risk: {(late_graphs + warm) / GiB:.2f} GiB allocated after the KV "
                     f"cache is sized (CUDA graphs it does not subtract, warm-ups, workspaces) "
                     f"exceeds the {headroom / GiB:.2f} GiB gpu_memory_utilization {util:g} "
                     f"leaves; use --gpu-memory-utilization {safe:g} or less")
    frontend = reserve(version, multimodal=bool(arch.vision_config or arch.audio_config),
                       mm_ipc_gpu_memory_gb=a.mm_ipc_gpu_memory_gb,
                       api_servers=a.api_server_count if a.api_server_count is not None else (
                           1 if a.usage != "serve" else a.data_parallel_size),
                       video=a.video_io, loader_env=a.video_loader_backend)
    if frontend.total:
        notes.append(frontend.note())
    rank_deficit = 0  # ROCm TP8: the pool follows a worker below the one that logs
    if gpu.vendor == "amd" and tp * pp >= 8 and a.kv_cache_memory_bytes is None:
        rank_deficit = int(M.const("rocm_tp8_smallest_worker_mib") * MiB)
        notes.append(f"ROCm at {tp * pp} GPUs: every worker takes the smallest worker's block "
                     f"count, and MI300X TP8 starts' smallest worker held "
                     f"{rank_deficit / GiB:.2f} GiB less than the one that logs 'Available KV "
                     "cache memory' (empirical)")
    eplb_stage = _eplb_state(arch, model, a, version, model_dtype, stages)
    if a.enable_eplb:
        notes.append(f"EPLB: {a.eplb_num_redundant_experts} redundant experts (in the weights) "
                     f"and {max(eplb_stage) / GiB:.2f} GiB per GPU of rebalancing state (load "
                     "window, expert maps" + (", a one-layer expert buffer" if
                                              version.at_least(0, 14) else "") + ")")
    aux = SD.aux_layers(spec, arch) if spec and pp > 1 and version.at_least(0, 30) else []
    if aux and v2 and arch.model_type not in SD.AUX_OVER_PP:
        notes.append(f"vLLM {version.text} runs {spec.method} with pipeline parallelism only on "
                     "decoders whose aux hidden states cross stages (Llama, Qwen2/3 dense, "
                     "Sarvam from 0.32; `verify_supports_aux_hidden_states_over_pp`): this "
                     f"model ({arch.model_type}) is probably refused at start-up")
    non_kv = 0  # the largest stage's memory besides the KV cache (--kv-cache-memory-bytes)
    for si, rng in enumerate(kv_stages):  # the drafter's layers on the last stage
        graph = graph_estimate(rng) if profiled and a.estimate_cudagraphs else 0
        stage_act = act if si == len(stages) - 1 else act_first if si == 0 else act_inner
        if si and version.v1:  # the previous stage's output, received into persistent buffers
            stage_act += intermediate_tensor_bytes(arch.model_type, arch.hidden_size, mnbt,
                                                   dtype_bytes(model_dtype))
            if aux and v2 and si < len(stages):  # and the drafter's aux hidden states (V2)
                stage_act += SD.aux_stage_bytes(aux, rng.start, mnbt, arch.hidden_size,
                                                dtype_bytes(model_dtype))
        stage_act += eplb_stage[si] if si < len(eplb_stage) else 0
        non_kv = max(non_kv, weights[si] + stage_act + nt + max(graph, late_graphs) + warm)
        bud = M.budget(gpu.memory_bytes, util, weights[si], stage_act, nt, graph,
                       ceil_requested=version.requested_is_ceiled,
                       kv_cache_memory_bytes=a.kv_cache_memory_bytes,
                       frontend_reserved=frontend.total, rank_deficit=rank_deficit)
        layer_set = {k for k, li in enumerate(spec_layer) if li in rng}
        bpb = (B.bucketed_bytes_per_block if old_v4 and version.dsv4_bucketed_layout
               else B.tuple_bytes_per_block if old_v4 else B.bytes_per_block)(groups, layer_set)
        nblocks = max(bud.kv_pool, 0) // bpb if bpb else 0
        pools.append(bud.kv_pool)
        stage_rows.append({"stage": si, "layers": len(rng), "weights_bytes": weights[si],
                           "available_kv_bytes": bud.available_kv, "bytes_per_block": bpb,
                           "num_gpu_blocks": nblocks})
        if best is None or nblocks < best[0]:
            # DeepSeek-V4 before 0.29: the start-up check charges the tuple layout's bytes
            # per block (`_max_memory_usage_bytes_from_groups`), whatever the allocation
            check_bpb = (B.tuple_bytes_per_block(groups, layer_set)
                         if arch.packed_kv and not version.at_least(0, 29) else bpb)
            best = (nblocks, bud, bpb, check_bpb)
    assert best is not None
    num_blocks, bud, bpb, check_bpb = best
    global_check = pp > 1 and version.at_least(0, 14) and not version.at_least(0, 17, 1) \
        and not old_v4
    if global_check:
        # 0.14-0.16 check one request against the global groups, every stage's layers, in
        # the smallest worker's memory (`get_kv_cache_configs`; per worker from 0.17.1,
        # `_project_kv_cache_groups_to_worker`)
        check_bpb = B.bytes_per_block(groups, set(range(len(spec_layer))))
    if not groups:
        num_blocks = 1  # attention-free: vLLM keeps one dummy block
        notes.append("attention-free model: no KV cache, state only")
    if a.num_gpu_blocks_override is not None:
        num_blocks = a.num_gpu_blocks_override

    # the start-up check and the auto-fit
    per_layer_check = version.v1 and not version.at_least(0, 14)
    first_group = version.at_least(0, 14) and not version.at_least(0, 19)
    # 0.20.2+ check an override's blocks (`get_kv_cache_configs`: "Reflect that in
    # `available_memory`"), earlier releases the profiled pool; 0.29+ plan against the
    # usable blocks: the null block is reserved (`_check_enough_kv_cache_memory`)
    avail_for_check = min(pools) if global_check else bud.kv_pool
    if a.num_gpu_blocks_override is not None and version.at_least(0, 20, 2):
        avail_for_check = num_blocks * bpb
    if version.at_least(0, 29):
        avail_for_check -= bpb
    ve = 1 if version.v1 else pp  # V0: a scheduler per stage in flight, blocks // pp each
    if ve > 1 and version.at_least(0, 8):  # `raise_if_cache_size_invalid` (0.8.0-0.10.2)
        avail_for_check = num_blocks // ve * bpb
    start = mml  # the search runs up to the configured length
    largest = (B.estimate_max_model_len(groups, avail_for_check, start, inflight, check_bpb,
                                        per_layer=per_layer_check, first_group=first_group)
               if groups else start)
    # vLLM's own "to fully utilize gpu memory" suggestion leaves the same 150 MiB
    kv_max = max(gpu.memory_bytes - non_kv - M.REDUNDANCY_BUFFER, 0)
    fits, failure = True, None
    shorten = False  # the failure is the profile's peak or the KV cache: a shorter length may fit
    # with --kv-cache-memory-bytes vLLM compares nothing with the requested share (the
    # worker returns the given bytes after a compile-only profile run): the GPU bounds it
    if bud.weights > bud.requested and a.kv_cache_memory_bytes is None:
        fits = False
        failure = (f"weights need {bud.weights / GiB:.2f} GiB per GPU but only "
                   f"{bud.requested / GiB:.2f} GiB is requested "
                   f"({util:.2f} x {gpu.memory_bytes / GiB:.2f} GiB)")
    elif a.engine == "vllm" and a.kv_cache_memory_bytes is not None and \
            a.kv_cache_memory_bytes > kv_max:
        # vLLM allocates what it is told (no profile-based check) and runs out of memory
        fits, hints = False, False  # the failure names the size that fits
        failure = (f"--kv-cache-memory-bytes {a.kv_cache_memory_bytes / GiB:.2f} GiB does not fit "
                   f"beside {non_kv / GiB:.2f} GiB of weights, activations and graphs on the "
                   f"{gpu.memory_bytes / GiB:.2f} GiB GPU: vLLM runs out of memory allocating "
                   f"it; {kv_max / GiB:.2f} GiB at most")
    elif a.engine == "vllm" and a.num_gpu_blocks_override is not None and \
            num_blocks * bpb > max(kv_max, bud.kv_pool):
        # vLLM allocates the override's blocks whatever the profile found (`get_kv_cache_
        # configs` replaces num_blocks) and runs out of memory past what the GPU has left
        fits, hints = False, False
        failure = (f"--num-gpu-blocks-override {num_blocks:,} needs "
                   f"{num_blocks * bpb / GiB:.2f} GiB of KV cache beside {non_kv / GiB:.2f} GiB "
                   f"of weights, activations and graphs on the {gpu.memory_bytes / GiB:.2f} GiB "
                   f"GPU: vLLM runs out of memory allocating it; "
                   f"{max(kv_max, bud.kv_pool) // bpb:,} blocks at most")
    elif bud.available_kv <= 0:
        fits, shorten = False, a.max_model_len != -1
        failure = ("no memory left for the KV cache after weights, activations and graphs "
                   f"({bud.available_kv / GiB:.2f} GiB)" + (
                       f"; the expert-parallel buffers take {a2a_bytes / GiB:.2f} GiB"
                       if a2a_bytes >= GiB else ""))
    elif bud.kv_pool <= 0:
        fits, shorten = False, a.max_model_len != -1
        failure = (f"the API server's multimodal decoding reserves {frontend.total / GiB:.2f} "
                   f"GiB but only {bud.available_kv / GiB:.2f} GiB is available for the KV "
                   "cache; lower --mm-ipc-gpu-memory-gb or hw_decoders, or raise "
                   "--gpu-memory-utilization")
    elif a.max_model_len == -1:
        if largest <= 0:
            fits, failure = False, ("cannot auto-fit max_model_len: not enough GPU memory "
                                    "available to serve even a single token")
        else:
            mml = min(largest, start)
            mml_src = f"auto-fit (largest that fits, config allows {start})"
    elif groups:
        need = B.needed_bytes(groups, mml, inflight, check_bpb, per_layer=per_layer_check,
                              first_group=first_group)
        if need > avail_for_check:
            fits, shorten = False, True
            failure = (f"max_model_len {mml} needs {need / GiB:.2f} GiB of KV cache for one "
                       f"request but only {max(avail_for_check, 0) / GiB:.2f} GiB is available"
                       + (f" to each of V0's {ve} virtual engines (its blocks // PP)"
                          if ve > 1 and version.at_least(0, 8) else "") + "; "
                       + (f"the largest max_model_len that fits is {largest}" if largest
                          else "not even one token of context fits"))
    # `resolve_cudagraph_mode_and_sizes`: with FULL graphs every decoding Mamba sequence
    # needs its own block
    seqs_limit = (num_blocks if version.mamba_seqs_need_blocks and "FULL" in graph_mode
                  and any(g.spec.is_state for g in groups) else None)
    if seqs_limit is not None and seqs > seqs_limit > 0 and (fits or shorten):
        # after a length failure too: the shorter length alone would not start either
        fits = False
        failure = (f"{failure}; and " if failure else "") + (
            f"max_num_seqs ({seqs}) exceeds the available Mamba cache blocks "
            f"({num_blocks}): with FULL CUDA graphs every decoding sequence needs "
            f"one; use --max-num-seqs {num_blocks} or fewer (or --enforce-eager, or "
            "cudagraph_mode PIECEWISE in --compilation-config)")
    if not fits and hints and a2a_bytes >= GiB and a2a == "deepep_low_latency" and \
            a.max_num_batched_tokens and a.max_num_batched_tokens > A2A.BATCHED_DP_TOKENS:
        notes.append(f"DeepEP low latency's heap follows --max-num-batched-tokens: leave it at "
                     f"this backend's default, {A2A.BATCHED_DP_TOKENS}")
    elif not fits and hints:
        notes.append(_fit_hint(model, gpu, a, vllm_version, arch,
                               kv_bound=str(failure).startswith("max_model_len"),
                               shorten_below=mml if shorten else 0, named=largest))
    call = shape.fi_call_scratch_bytes(mnbt * shape.moe_dp)
    if hints and call >= GiB and mnbt // 2 >= max(seqs, 1024) and \
            a.kv_cache_memory_bytes is None:  # (vLLM wants mnbt >= max_num_seqs)
        try:
            half = size(model, gpu, replace(a, max_num_batched_tokens=mnbt // 2),
                        vllm_version, hints=False)
            gain = half.budget.available_kv - bud.available_kv
        except BadInput:
            gain = 0
        if gain >= GiB // 2:
            notes.append(f"the fused-MoE kernel allocates {call / GiB:.1f} GiB per call for the "
                         f"{mnbt * shape.moe_dp:,} tokens every MoE layer sees in the profile: "
                         f"--max-num-batched-tokens {mnbt // 2} gives {gain / GiB:.1f} GiB "
                         "more KV cache per GPU (long prompts then prefill in more steps)")

    bpr = B.blocks_per_request(groups, mml, inflight) if groups else 1
    conc = num_blocks / bpr if bpr else 0.0
    if old_v4:  # the figure vLLM logs; the block pool admits num_blocks / bpr
        conc = num_blocks / B.weighted_blocks_per_request(groups, mml, inflight)
    if not version.hybrid_allocator:  # V0 and V1 before 0.9.1 print tokens / max_model_len
        conc = num_blocks * bs / mml
    tokens = B.kv_cache_tokens(groups, num_blocks, mml, conc,
                               from_concurrency=version.kv_tokens_from_concurrency,
                               v1=version.v1, state_block=mml if mode == "none" else None)
    usable = B.admission_blocks(num_blocks, version.v1, ve)  # what admission lets in at once
    per_ve = usable // ve  # one scheduler's blocks less its watermark: a request stays in one
    if fits and ve > 1 and groups and bpr > per_ve:  # `can_allocate` returns NEVER past them
        notes.append(f"V0 splits the {num_blocks:,} blocks between its {ve} virtual engines "
                     f"(one scheduler per pipeline stage in flight, {num_blocks // ve:,} "
                     f"blocks each): a request of {mml:,} tokens is never scheduled; "
                     f"the longest one is {per_ve * bs:,} tokens")
    if hints and fits and version.uncapped_prompt_check and any(
            g.spec.kind in (SLIDING, CHUNKED) for g in groups):
        notes += _stall_note(groups, usable, mml, version)
    conc_at = {}
    for n in sorted(set(TYPICAL_LENGTHS) | {mml}):
        if n <= mml:
            r = B.blocks_per_request(groups, n, inflight) if groups else 1
            conc_at[n] = ve * (per_ve // r) if r else 0

    # per-token figures
    tok_memo: dict[tuple[int, str], float] = {}  # identical layers in one dtype cost the same
    tok = []
    for i, x in enumerate(karch.layers):
        key = (id(x), dts.for_layer(i, x))
        if key not in tok_memo:
            tok_memo[key] = _tok_bytes(x, tp, key[1], dts.rope_dim)
        tok.append(tok_memo[key])
    if old_v4:  # a token's share of a block: the tuple slots' pages, not the MLA group's
        share = bpb / B.full_page_sum(groups)
        tok = [t * share for t in tok]
    top_stage = max(range(pp), key=lambda s: sum(tok[i] for i in kv_stages[s]))
    per_gpu = round(sum(tok[i] for i in kv_stages[top_stage]))
    replica = round(sum(tok) * tp / a.decode_context_parallel_size)  # DCP: each token once
    logical = round(sum(_tok_bytes(x, 1, dts.for_layer(i, x), dts.rope_dim)
                        for i, x in enumerate(karch.layers)) if tp > 1 else sum(tok))
    state = sum(state_bytes(x, tp, dts) for i, x in enumerate(karch.layers)
                if isinstance(x, StateLayer) and i in kv_stages[top_stage])
    state += sum(state_bytes(x.parallel_state, tp, dts) for i, x in enumerate(karch.layers)
                 if isinstance(x, AttnLayer) and x.parallel_state and i in kv_stages[top_stage])
    return SizeResult(
        model=model.id, gpu=gpu.id, gpu_memory_bytes=gpu.memory_bytes,
        gpu_memory_estimated=bool(gpu.memory_note), gpu_spec=gpu, args=a, version=version,
        arch=arch, model_dtype=model_dtype, kv_dtype=kv, max_model_len=mml, quantization=quant,
        attention_backend=forced,
        max_model_len_source=mml_src, max_num_seqs=seqs, max_num_batched_tokens=mnbt,
        block_size=bs, block_size_reason=plan.reason, groups=groups, budget=bud,
        weights_estimated=estimated, weights_total_bytes=weights_total,
        kv_bytes_per_token_per_gpu=per_gpu, kv_bytes_per_token_replica=replica,
        kv_bytes_per_token_model=logical, state_bytes_per_request_per_gpu=state,
        bytes_per_block=bpb, num_gpu_blocks=num_blocks, blocks_per_request=bpr,
        max_concurrency=conc, kv_cache_tokens=tokens, inflight_tokens=inflight, fits=fits,
        failure=failure, largest_max_model_len=largest if groups else None,
        concurrency_at=conc_at, stages=stage_rows, notes=notes, vision_profile=enc,
        max_num_seqs_limit=seqs_limit,
        cudagraph_graphs=graphs if bud.cudagraph else 0, cudagraph_mode=graph_mode,
        drafter_cudagraph_graphs=draft_graphs if bud.cudagraph else 0,
        breakable_cudagraph=breakable and graph_mode != "NONE", model_runner_v2=v2,
        engine_note=engine_note,
        rope_cache_bytes=rope, lora_bytes=max(lora), lora_late=lora_late,
        draft_bytes=draft_bytes,
        draft_layers=len(drafted),
        load_extra_bytes=max(extra),
        moe_kernel=shape.moe_kernel if shape.moe_intermediate_local else None,
        # at the tokens the MoE layers see: DP > 1 gathers every DP rank's batch
        moe_workspace_bytes=shape.moe_scratch_bytes(mnbt * shape.moe_dp, version.moe_chunk),
        moe_call_scratch_bytes=call,
        moe_workspace_kept=shape.moe_kept and shape.moe_kernel != "functional",
        all2all_buffer_bytes=a2a_bytes, pooling=pooling,
        sampler_state_bytes=sampler_state, outside_budget_bytes=late_graphs + warm,
        safe_gpu_memory_utilization=safe, kv_cache_memory_bytes_max=kv_max, kv_dtypes=dts)


def _lora_bytes(arch: ModelArch, a: EngineArgs, version: VllmVersion, stages: list[range],
                d: int, notes: list[str], vendor: str) -> list[int]:
    """LoRA slot bytes on one GPU of each stage (allocated at load: in the weights)."""
    if not a.enable_lora:
        return [0] * len(stages)
    from kvplan.core.lora import (
        PACKED_PARTS,
        check_lora,
        embeddings_wrapped,
        lora_elems_per_stage,
        target_categories,
    )

    if a.lora_target_modules is not None and not version.at_least(0, 19):
        raise BadInput(f"vLLM {version.text} has no --lora-target-modules (0.19+)",
                       flag="lora_target_modules")
    tp = a.tensor_parallel_size
    ep = tp * a.data_parallel_size if a.enable_expert_parallel else 1
    emb = embeddings_wrapped(arch.architectures, version.v[:2])
    targets = target_categories(a.lora_target_modules, packed_parts=version.at_least(0, 20))
    if targets is not None and not version.at_least(0, 20) and (
            set(a.lora_target_modules or ()) & PACKED_PARTS):
        notes.append(f"vLLM {version.text} matches --lora-target-modules against the runtime "
                     "modules' own names (qkv_proj, gate_up_proj): "
                     + ", ".join(sorted(set(a.lora_target_modules) & PACKED_PARTS))
                     + " select nothing (0.20+ expands them)")
    elif targets is not None and not targets:  # vLLM wraps no module and says nothing
        notes.append(f"--lora-target-modules {','.join(a.lora_target_modules)} names none of "
                     "the modules kvplan counts (qkv_proj, o_proj, gate_up_proj, down_proj, "
                     "experts, ... and their parts), so it sizes no adapter weights; vLLM "
                     "wraps what the names match, and a name that matches nothing is silent")
    check_lora(arch, a.max_loras, a.max_lora_rank, rank_one=version.at_least(0, 11, 1),
               old_ranks=not version.at_least(0, 8),
               dsv4_lora=vendor == "nvidia" and version.at_least(0, 29), tp=tp,
               fully_sharded=a.fully_sharded_loras,
               ep_fs_refused=bool(arch.num_experts) and a.enable_expert_parallel
               and version.at_least(0, 21),
               head_wrapped=emb and (targets is None or "lm_head" in targets),
               vocab_limit=258048 if version.at_least(0, 17) else 257024)
    elems = lora_elems_per_stage(arch, stages, tp, ep, fully_sharded=a.fully_sharded_loras,
                                 experts=version.at_least(0, 12), embeddings=emb,
                                 targets=targets, gdn_slices=version.at_least(0, 20))
    out = [int(e * a.max_loras * a.max_lora_rank * d) for e in elems]
    notes.append(f"LoRA: {a.max_loras} adapter slot(s) of rank {a.max_lora_rank} take "
                 f"{max(out) / GiB:.2f} GiB per GPU " + (
                     "after the KV cache is sized (V0 0.7 builds them after its profile run, "
                     "vLLM issue 14450: they must fit in what gpu_memory_utilization leaves)"
                     if not version.v1 and version.at_least(0, 7) and not version.at_least(0, 8)
                     else "at load (in the weights)")
                 + "; the number of registered adapters does not matter, they wait in host "
                 "memory")
    return out


def mm_pixel_bytes(architectures: list[str], version: VllmVersion, v2: bool) -> PixelBytes:
    """`mm.pixel_bytes` for this release: `mm_device_do_normalize` is on by default and taken
    by Qwen2/2.5-VL from 0.28 and by Qwen3-VL/3.5/3.6 from 0.32
    (`supports_mm_device_do_normalize`); 0.28-0.29 Qwen2.5-VL normalised outside the tower."""
    qwen2 = any(x in QWEN2_VL for x in architectures)
    normalize_on_gpu = version.at_least(0, 28) if qwen2 else version.at_least(0, 32)
    return pixel_bytes(architectures, device_normalize=normalize_on_gpu, v2_runner=v2,
                       both_copies=qwen2 and not version.at_least(0, 30))


def ssm_state_default(arch: ModelArch, version: VllmVersion) -> str | None:
    """The SSM state dtype `auto` resolves to before the conv state's: the config's hint
    (Qwen3.5 `mamba_ssm_dtype`, Nemotron-H `mamba_ssm_cache_dtype`). Nemotron-H's hook
    (`NemotronHForCausalLMConfig.verify_and_update_config`) starts in 0.13 with float16 for
    a config without one, float32 from 0.20; 0.10-0.12 have none, so the state takes the
    model dtype (the 0.12.0, 0.13.0, 0.19.0 and 0.20.0 wheels)."""
    if arch.model_type != "nemotron_h":
        return arch.ssm_state_dtype
    if not version.at_least(0, 13):
        return None
    return arch.ssm_state_dtype or ("float32" if version.at_least(0, 20) else "float16")


def mm_profiled(architectures: list[str], version: VllmVersion) -> bool:
    """Whether kvplan models the vision encoder's share of the profile run: the Qwen VL
    families on V1 from 0.8 (V1's `profile_run` runs the encoder on its dummy items from
    0.8; their single dummy item fills the encoder budget, so 0.11's padding of outputs to
    the budget changes nothing; real H200/B200 starts of Qwen3-VL-30B at 0.13-0.19 hold the
    0.44 GiB it keeps), Gemma 3 from 0.20 (0.11 padded each of its 32 images' outputs to the
    budget). Other multimodal models before 0.20 are noted as not modelled."""
    if version.at_least(0, 20):
        return True
    return version.v1 and any(x in QWEN2_VL + QWEN3_VL for x in architectures)


def _check_modelopt_algo(q: dict[str, Any] | None, version: VllmVersion,
                         flag: str | None = None) -> None:
    """The quant_algo of a ModelOpt hf_quant_config.json that vLLM names a method for while
    it builds the model config, or refuses ("Unknown ModelOpt quant algo"):
    `_parse_quant_hf_config` 0.10.1-0.13 (FP8, NVFP4 as written), then
    `_normalize_quantization_config` (FP8, FP8_PER_CHANNEL_PER_TOKEN, FP8_PB_WO, NVFP4 in
    any case; MIXED_PRECISION from 0.33). Review 27. Both name it only for a file whose
    `producer` is modelopt (or, 0.33, a legacy `modelopt_quant_config`): another file gives
    no method, so the quantized weights load as 16-bit and the start fails (with
    `--quantization` the flag does not match: "does not match the quantization method").
    Before 0.10.1 `get_config` did not read the file (vLLM PR 22073): only `--quantization
    modelopt` / `modelopt_fp4` loads it (`get_quant_config` reads the method's file)."""
    inner = (q or {}).get("quantization")
    algo = inner.get("quant_algo") if isinstance(inner, dict) else None
    if algo is None:  # no file, or a KV-only export: 16-bit weights
        return
    if not version.at_least(0, 10, 1):
        if QC.given_flag(flag) is None:
            raise BadInput(f"vLLM {version.text} does not read hf_quant_config.json by itself "
                           "(0.10.1+ do): this ModelOpt checkpoint would load as 16-bit and "
                           "fail", hint=f"add --quantization {QC.checkpoint_method(None, q)}",
                           flag="quantization")
        return
    if ((q or {}).get("producer") or {}).get("name") != "modelopt" \
            and "modelopt_quant_config" not in inner:
        if str((q or {}).get("quant_method") or "").lower().startswith("modelopt"):
            return  # the file names its method itself: the ModelOpt classes claim it
        raise BadInput("hf_quant_config.json names no producer 'modelopt', so vLLM "
                       f"{version.text} takes no quantization method from it and cannot load "
                       "the ModelOpt checkpoint", hint='keep the "producer": {"name": '
                       '"modelopt", ...} block the export wrote')
    if version.at_least(0, 14):
        known = {"FP8", "FP8_PER_CHANNEL_PER_TOKEN", "FP8_PB_WO", "NVFP4"} | (
            {"MIXED_PRECISION"} if version.at_least(0, 33) else set())
        ok = str(algo).upper() in known
    else:
        ok = algo in ("FP8", "NVFP4")
    if not ok:
        raise BadInput(f"vLLM {version.text} refuses this ModelOpt export's hf_quant_config.json "
                       f"quant_algo {algo!r} (\"Unknown ModelOpt quant algo\", "
                       "`_normalize_quantization_config`)",
                       hint="use a release that knows the scheme, or a checkpoint exported with "
                            "its quantization_config in config.json")


def prefix_caching_default(arch: ModelArch, version: VllmVersion) -> bool:
    """Prefix caching when no flag says (`_set_default_chunked_prefill_and_prefix_caching_args`):
    on for V1 generation; hybrids only from 0.28; attention-free Mamba models off from 0.12
    (`is_prefix_caching_supported`: "Attention free models do not support prefix caching";
    0.11.x's `not is_hybrid` leaves it on)."""
    if arch.attention_free and arch.is_hybrid_state:
        return version.v1 and not version.at_least(0, 12)
    return version.mamba_prefix_caching_default if arch.is_hybrid_state else version.v1


def attention_free_all_mode(version: VllmVersion, user_block: int | None) -> str:
    """'all', 'none' or 'fails' for an attention-free Mamba model (Mamba, Mamba2,
    FalconMamba) with prefix caching. No attention page sets its Mamba block, which
    `MambaModelConfig.verify_and_update_config` copies from `cache_config.block_size`.
    0.11.1-0.11.2 set it to max_model_len first (one state a request: 'none' numbers);
    0.12-0.17 copy the block size before the platform fills it (`CacheConfig.block_size` is
    None until `check_and_update_config`), so without --block-size 0.12-0.14 fall back to
    max_model_len and 0.15-0.17 build `MambaSpec` with no block size (cdiv(max_model_len,
    None) fails); 0.18+ default it to 16 at construction (`_apply_block_size_default`)."""
    if version.at_least(0, 18) or (user_block and version.at_least(0, 12)):
        return "all"
    return "fails" if version.at_least(0, 15) else "none"


def _mamba_cache_mode(arch: ModelArch, prefix: bool, version: VllmVersion) -> str:
    """vLLM's `mamba_cache_mode` (`MambaModelConfig.verify_and_update_config`): 'none'
    without prefix caching; from 0.28 'align' (the default 'none' becomes it; 'all' only
    when asked for); 0.15-0.27 'all' for the Mamba1/2 families that support Mamba prefix
    caching and 'align' for the rest (GDN, KDA, short conv); 0.12-0.14 'all' for the former
    and prefix caching off for the rest; 0.11.1-0.11.2 the same on an explicit
    --enable-prefix-caching ("Its support for Mamba layers is experimental"); 0.11.0 off for
    every hybrid (wheels read: 0.11.0, 0.11.1, 0.12.0, 0.13.0, 0.14.1, 0.15.1, 0.16.0, 0.17.1,
    0.18.1, 0.20.2, 0.25.0, 0.27.1, 0.28.0, 0.32.0, 0.33.0)."""
    if not arch.is_hybrid_state or not prefix or not version.at_least(0, 11, 1):
        return "none"  # 0.11.0 turned prefix caching off for every Mamba hybrid
    if version.at_least(0, 28):
        return "align"
    if arch.state_kinds <= {"mamba1", "mamba2"} and not arch.mamba_prefix_unsupported:
        return "all"
    return "align" if version.mamba_align_mode else "none"


def _kv_heads(layer: Any) -> int:
    return layer.num_kv_heads if isinstance(layer, AttnLayer) and layer.kind != "mla" else 0


def _tok_bytes(layer: Any, tp: int, kv: str, rope_dim: int = 0) -> float:
    if not isinstance(layer, AttnLayer):
        return 0
    if layer.kind == DSV4:  # what a token adds: the compressed KV and indexer pages
        return sum(sp.page / sp.block_size for sp in dsv4_specs(layer, 256)
                   if sp.kind in (MLA, INDEXER))
    extra = layer.indexer_bytes
    return attn_bytes_per_token(layer, tp, kv, rope_dim) + extra


def _activation_shape(arch: ModelArch, expert_tp: int, tp: int,
                      model_dtype: str) -> M.ActivationShape:
    """`expert_tp`: how the experts' intermediate is split (1 with expert parallelism,
    which keeps experts whole)."""
    t = arch.text_config
    dense_i = max(int(t.get("intermediate_size_mlp") or 0), arch.intermediate_size,
                  *(nas_ffn_sizes(arch) or [0]))  # Nemotron-NAS: the widest block's FFN
    moe_i = arch.expert_intermediate_size
    if arch.num_experts and not arch.moe_intermediate_size:  # the MLP is the experts'
        dense_i = int(t.get("intermediate_size_mlp") or 0)
    elif arch.num_experts:  # the widest dense MLP or shared expert a layer builds: none in
        # an all-MoE model without shared experts (Qwen3-MoE's intermediate_size is unused)
        dense_i = max((mlp_intermediate(arch, lp) for lp in count_params(arch).layers),
                      default=0)
    return M.ActivationShape(hidden=arch.hidden_size, intermediate_local=cdiv(dense_i, tp),
                             moe_intermediate_local=cdiv(moe_i, expert_tp) if moe_i else 0,
                             top_k=arch.experts_per_tok or 1, vocab=arch.vocab_size,
                             act_bytes=dtype_bytes(model_dtype), moe_hidden=moe_hidden(arch),
                             moe_gated=moe_gated(arch))


def _fit_hint(model: Model, gpu: Gpu, a: EngineArgs, version: str | None,
              arch: ModelArch, *, kv_bound: bool = False, shorten_below: int = 0,
              named: int = 0) -> str:
    """The smallest change that makes vLLM start: fewer LoRA slots, more TP, then an FP8 KV
    cache; and, `shorten_below` a length whose profile peak or KV cache did not fit, the
    largest shorter --max-model-len that starts as asked, unless it is the `named` one the
    failure gives."""
    hint = _fit_hint_parallel(model, gpu, a, version, arch, kv_bound)
    util = _least_utilization(model, gpu, a, version)
    if util:
        hint = util + (f"; or with {hint.removeprefix('fits with ')}" if hint.startswith("fits")
                       else "")
    n, r = _largest_len(model, gpu, a, version, shorten_below, named) if shorten_below \
        else (0, None)
    if r is None or n == named:
        return hint
    same = f"--max-model-len {n} ({r.budget.available_kv / GiB:.1f} GiB of KV per GPU)"
    return f"{hint}; or with {same}" if hint.startswith("fits") else f"fits with {same}"


UTILIZATION_HINT_MAX = 95  # percent: the highest --gpu-memory-utilization a hint offers


def _least_utilization(model: Model, gpu: Gpu, a: EngineArgs, version: str | None) -> str:
    """With a --gpu-memory-utilization that leaves the start short: the least one, in whole
    hundredths up to UTILIZATION_HINT_MAX %, that starts with the other flags as asked."""
    if a.gpu_memory_utilization is None or a.kv_cache_memory_bytes is not None:
        return ""
    pct, best = _bisect(math.floor(a.gpu_memory_utilization * 100) + 1, UTILIZATION_HINT_MAX,
                        lambda p: _starts(model, gpu, a, version,
                                          gpu_memory_utilization=p / 100),
                        first=True)  # a start that fits fits with more memory too
    if best is None:
        return ""
    return (f"fits with --gpu-memory-utilization {pct / 100:.2f} "
            f"({best.budget.available_kv / GiB:.1f} GiB of KV per GPU)")


def _starts(model: Model, gpu: Gpu, a: EngineArgs, version: str | None,
            **change: Any) -> SizeResult | None:
    """The sizing with `change` applied to the flags when vLLM would start it (None when it
    refuses the flags or the start does not fit); no hints of its own."""
    try:
        r = size(model, gpu, replace(a, **change), version, hints=False)
    except BadInput:
        return None
    return r if r.fits else None


def _bisect(lo: int, hi: int, run: Any, *, first: bool = False
            ) -> tuple[int, SizeResult | None]:
    """Bisection over [lo, hi] for a monotone test: the last n (the first with `first`)
    whose `run(n)` gives a result, with that result; (lo, None) (hi with `first`) when the
    most favourable end gives none."""
    edge = hi if first else lo
    best = run(edge) if lo <= hi else None
    while best is not None and lo < hi:
        mid = (lo + hi) // 2 if first else (lo + hi + 1) // 2
        r = run(mid)
        if first:
            lo, hi, best = (lo, mid, r) if r is not None else (mid + 1, hi, best)
        else:
            lo, hi, best = (mid, hi, r) if r is not None else (lo, mid - 1, best)
    return (hi if first else lo) if best is not None else edge, best


def _largest_len(model: Model, gpu: Gpu, a: EngineArgs, version: str | None, below: int,
                 named: int) -> tuple[int, SizeResult | None]:
    """The largest --max-model-len under `below`, and at least SHORTER_HINT_MIN_LEN, that
    starts with the other flags as asked, found by bisection through the same sizing (a
    start fits at every shorter length). It can exceed the `named` largest the failure gives,
    which keeps the profile run of the asked length: a Qwen VL model profiles one video item
    as long as max_model_len allows (methodology §1)."""
    def run(n: int) -> SizeResult | None:
        return _starts(model, gpu, a, version, max_model_len=n)

    lo, hi = SHORTER_HINT_MIN_LEN, below - 1
    at = run(named) if named and lo <= named < below else None
    if at is not None and run(named + 1) is None:
        return named, at  # the named one is the largest: the peak does not shrink with it
    return _bisect(lo, hi, run)


def _most_slots(model: Model, gpu: Gpu, a: EngineArgs, version: str | None) -> int:
    """The most LoRA slots below --max-loras that start (0: not even one), by bisection:
    each slot costs the same, so a start that fits fits with fewer (review 24b F5: one sizing
    per slot count ran for minutes at --max-loras 100000)."""
    n, best = _bisect(1, a.max_loras - 1,
                      lambda k: _starts(model, gpu, a, version, max_loras=k))
    return n if best is not None else 0


def _fit_hint_parallel(model: Model, gpu: Gpu, a: EngineArgs, version: str | None,
                       arch: ModelArch, kv_bound: bool) -> str:
    """Fewer LoRA slots, more TP, then an FP8 KV cache."""
    lora, tries = "", []
    if a.enable_lora:  # slots cost in proportion: fewer, then one of a smaller rank
        from kvplan.core.lora import RANKS

        slots = _most_slots(model, gpu, a, version)
        tries = [("--max-loras", {"max_loras": slots})] if slots else [
            ("--max-loras 1 --max-lora-rank", {"max_loras": 1, "max_lora_rank": rk})
            for rk in reversed(RANKS[1:]) if rk < a.max_lora_rank]
    for flag, change in tries:
        r = size(model, gpu, replace(a, **change), version, hints=False)
        if r.fits:
            kv = r.budget.available_kv / GiB
            lora = f"fits with {flag} {list(change.values())[-1]} ({kv:.2f} GiB of KV per GPU)"
            break
    layout = _fit_hint_layout(model, gpu, a, version, arch, kv_bound)
    if lora:
        return lora + (f"; or {layout}" if layout.startswith("fits") else "")
    return layout


def _fit_hint_layout(model: Model, gpu: Gpu, a: EngineArgs, version: str | None,
                     arch: ModelArch, kv_bound: bool) -> str:
    online = ""  # FP8 weights quantized as they load, on the GPUs asked for
    if a.quantization is None and not (arch.quantization or model.quant_file):
        try:
            r = size(model, gpu, replace(a, quantization="fp8"), version, hints=False)
        except BadInput:  # a GPU or release that refuses it
            r = None
        if r is not None and r.fits:
            online = (f"--quantization fp8 ({r.budget.weights / GiB:.1f} GiB of weights and "
                      f"{r.budget.available_kv / GiB:.1f} GiB of KV per GPU)")
    shorter = ""  # a smaller TP whose weights fit when the context is shortened
    for tp in () if gpu.mig_profile else valid_tps(arch):  # no TP across MIG slices
        if tp <= a.tensor_parallel_size:
            continue
        try:
            r = size(model, gpu, replace(a, tensor_parallel_size=tp), version, hints=False)
        except BadInput:  # a layout vLLM refuses (an FP8 block split, say): try the next
            continue
        if r.fits:
            return (f"fits with --tensor-parallel-size {tp} ({r.budget.weights / GiB:.1f} GiB of "
                    f"weights and {r.budget.available_kv / GiB:.1f} GiB of KV per GPU)"
                    + (f"; or with {shorter}" if shorter else "")
                    + (f"; or with {online}" if online else ""))
        if (not (shorter or kv_bound)  # kv_bound: the asked TP's own largest length is given
                and (r.largest_max_model_len or 0) >= SHORTER_HINT_MIN_LEN):
            shorter = (f"--tensor-parallel-size {tp} --max-model-len "
                       f"{r.largest_max_model_len} ({r.budget.weights / GiB:.1f} GiB of weights "
                       "per GPU)")
    alt = f"; or with {shorter}" if shorter else ""
    if online:
        return f"fits with {online}{alt}"
    if a.kv_cache_dtype == "auto":
        try:
            r = size(model, gpu, replace(a, kv_cache_dtype="fp8"), version, hints=False)
        except BadInput:
            r = None
        if r is not None and r.fits:
            return f"fits with --kv-cache-dtype fp8{alt}"
    if shorter:
        return f"fits with {shorter}"
    if kv_bound:  # the weights fit; one request's KV cache does not
        return ("no TP up to 16" + (" and no fp8 KV cache" if a.kv_cache_dtype == "auto"
                                    else "") + " fits one request: lower --max-model-len to "
                "the largest that fits, or give the KV cache more memory")
    if gpu.mig_profile:
        return "does not fit on this MIG slice: use a larger profile or a quantized checkpoint"
    return "does not fit at TP up to 16: use a quantized checkpoint, a larger GPU or PP"

