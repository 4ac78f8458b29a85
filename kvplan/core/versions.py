"""What changes kvplan's numbers between vLLM releases.

Each switch cites the release where it was observed in vLLM's own source (wheels read:
0.6.6, 0.10.2, 0.11.0, 0.12.0, 0.14.1, 0.16.0, 0.17.1, 0.18.1, 0.19.1, 0.20.0, 0.20.2, 0.33.0;
see docs/methodology.md). Releases between two read wheels take the older behaviour unless
noted; that boundary is stated in docs/methodology.md.
"""

from __future__ import annotations

import re

from kvplan.core.record import record
from kvplan.errors import BadInput

LATEST = "0.33"
# FlashInfer all-reduce size limits in MB, by compute capability and TP size (one node)
_FI_AR_MAX_MB = {"90": {2: 64, 4: 2, 8: 0.5}, "100": {2: 64, 4: 32, 8: 1, 16: 64},
                 "103": {2: 64, 4: 64, 8: 4, 16: 64}, "107": {2: 64, 4: 64, 8: 2}}
_FI_MNNVL_MAX_MB_029 = {("103", 4): 80, ("103", 8): 64}
_FI_MNNVL_MAX_MB_033 = {("100", 8): 128, ("103", 4): 80, ("103", 8): 128}
# architectures vLLM runs with breakable CUDA graphs unless VLLM_USE_BREAKABLE_CUDAGRAPH is set
_V4 = {"DeepseekV4ForCausalLM", "DeepSeekV4MTPModel", "MiniMaxM3SparseForCausalLM",
       "MiniMaxM3SparseForConditionalGeneration"}
_INKLING = {"InklingForCausalLM", "InklingForConditionalGeneration"}
_KIMI = {"KimiK3ForConditionalGeneration", "KimiK3MTPModel", "KimiLinearForCausalLM"}
BREAKABLE_024 = (((0, 27), _V4 | _INKLING | _KIMI), ((0, 26), _V4 | _INKLING), ((0, 24), _V4))
BREAKABLE_029 = _V4 | _INKLING | _KIMI | {
    "DeepseekV32ForCausalLM", "DeepseekV32MTPModel", "Dots3NoteForCausalLM", "Dots3NoteMTPModel",
    "GlmMoeDsaForCausalLM", "HYV4ForCausalLM", "HYV4MTPModel"}
BREAKABLE_033 = BREAKABLE_029 | {
    "AliceAIForCausalLM", "BeamForCausalLM", "DeepseekV4ForConditionalGeneration",
    "DeepseekV41ForCausalLM", "Glm5NextForCausalLM", "Glm5NextForConditionalGeneration",
    "Glm5NextMTPModel", "MuseSpark1xForCausalLM", "MuseSparkForConditionalGeneration",
    "Qwen4ExpForCausalLM", "Qwen4ExpForConditionalGeneration", "Qwen4ExpMTP",
    "Step5ForCausalLM", "Step5ForConditionalGeneration"}
SUPPORTED_RANGE = ("0.6", "0.33")


_RELEASE = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")  # tolerates 0.11.0rc1, v0.8.5.post1


def read_release(text: str) -> tuple[int, int, int | None]:
    """'0.20.2' -> (0, 20, 2); '0.9' -> (0, 9, None): the form only, any release."""
    m = _RELEASE.match(str(text).strip())
    if not m:
        raise BadInput(f"cannot read vLLM version {text!r}", hint="use e.g. 0.33 or 0.20.2")
    return int(m.group(1)), int(m.group(2)), int(m.group(3)) if m.group(3) else None


def parse_version(text: str) -> tuple[int, int, int]:
    """'0.20.2' -> (0, 20, 2); '0.33' -> (0, 33, 0); tolerates '0.11.0rc1', 'v0.8.5.post1'."""
    major, minor, patch = read_release(text)
    v = (major, minor, patch or 0)
    lo, hi = parse_version_bounds()
    if not lo <= v[:2] <= hi:
        raise BadInput(f"vLLM version {text} is outside the modelled range "
                       f"{SUPPORTED_RANGE[0]}-{SUPPORTED_RANGE[1]}")
    return v


def beyond_latest(text: str | None) -> bool:
    """A release newer than the newest kvplan models ('0.34.0' while LATEST is 0.33)."""
    m = _RELEASE.match(str(text or "").strip())
    return bool(m) and (int(m.group(1)), int(m.group(2))) > parse_version_bounds()[1]


def parse_version_bounds() -> tuple[tuple[int, int], tuple[int, int]]:
    lo = tuple(int(x) for x in SUPPORTED_RANGE[0].split("."))
    hi = tuple(int(x) for x in SUPPORTED_RANGE[1].split("."))
    return lo, hi  # type: ignore[return-value]


# `DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES` (config/vllm.py): 0.24 lists these only; from 0.25
# the MoE architectures listed by release join the dense ones (0.24.0-0.28.0 wheels)
V2_RUNNER_ARCHS_024 = frozenset({
    "Qwen3ForCausalLM", "DeepseekV2ForCausalLM", "Qwen2MoeForCausalLM", "GraniteMoeForCausalLM",
    "LlamaForCausalLM", "MistralForCausalLM"})
_V2_RUNNER_MOE = (  # (first release, architectures), cumulative
    ((0, 25), {"DeepseekV2ForCausalLM", "Qwen2MoeForCausalLM", "GraniteMoeForCausalLM"}),
    ((0, 26), {"InklingForCausalLM", "InklingForConditionalGeneration",
               "LongcatFlashNgramForCausalLM"}),
    ((0, 27), {"KimiK3ForConditionalGeneration"}),
    ((0, 28), {"DeepseekV4ForCausalLM"}),
)


# `SupportsV0Only` generative classes by registry name: the first release whose V1 serves
# them (read in the 0.8.5, 0.9.0, 0.9.1, 0.9.2, 0.10.0, 0.10.1 and 0.10.2 wheels)
_V0_ONLY_UNTIL = {
    **dict.fromkeys(("JambaForCausalLM", "MambaForCausalLM", "FalconMambaForCausalLM",
                     "MiniMaxForCausalLM", "MiniMaxText01ForCausalLM",
                     "MiniMaxM1ForCausalLM"), (0, 10, 1)),
    **dict.fromkeys(("BambaForCausalLM", "Mamba2ForCausalLM", "Zamba2ForCausalLM",
                     "FalconH1ForCausalLM", "GraniteMoeHybridForCausalLM",
                     "NemotronHForCausalLM"), (0, 9, 2)),
    "Plamo2ForCausalLM": (0, 10, 2),
    "Gemma3ForConditionalGeneration": (0, 8, 1),  # gemma3_mm.py `SupportsV0Only` in 0.8.0
    **dict.fromkeys(("Phi4FlashForCausalLM", "MllamaForConditionalGeneration"), (0, 11, 0)),
}

# catalog architectures a release's model registry does not list yet, with the newest
# release read that lacks them (`_TEXT_GENERATION_MODELS` / `_MULTIMODAL_MODELS` in the
# registry.py of the 0.6.6-0.33.0 wheels; a release between two read ones may have it)
ABSENT_UNTIL = {
    "Qwen2_5_VLForConditionalGeneration": (0, 6, 6), "Gemma3ForConditionalGeneration": (0, 7, 3),
    "Llama4ForConditionalGeneration": (0, 8, 2), "KimiVLForConditionalGeneration": (0, 8, 2),
    "Mistral3ForConditionalGeneration": (0, 8, 2), "Qwen3ForCausalLM": (0, 8, 2),
    "Qwen3MoeForCausalLM": (0, 8, 2), "GraniteMoeHybridForCausalLM": (0, 8, 5),
    "MiMoForCausalLM": (0, 8, 5), "NemotronHForCausalLM": (0, 9, 0),
    "GptOssForCausalLM": (0, 10, 0), "Qwen3NextForCausalLM": (0, 10, 1),
    "DeepseekV32ForCausalLM": (0, 10, 2), "Qwen3VLForConditionalGeneration": (0, 10, 2),
    "Qwen3VLMoeForConditionalGeneration": (0, 10, 2), "MiniMaxM2ForCausalLM": (0, 11, 0),
    "MiMoV2FlashForCausalLM": (0, 13, 0), "Glm4MoeLiteForCausalLM": (0, 14, 1),
    "KimiK25ForConditionalGeneration": (0, 14, 1), "GlmMoeDsaForCausalLM": (0, 15, 1),
    "Qwen3_5ForConditionalGeneration": (0, 16, 0),
    "Qwen3_5MoeForConditionalGeneration": (0, 16, 0), "SarvamMLAForCausalLM": (0, 17, 1),
    "Gemma4ForConditionalGeneration": (0, 18, 1), "DeepseekV4ForCausalLM": (0, 19, 0),
    "KimiK3ForConditionalGeneration": (0, 26, 0),
    # the catalog's aiconfigurator configs name MiniMax-M3 and Step-3.7-Flash so; vLLM runs
    # them as MiniMaxM3Sparse* (0.24+) and Step3p7ForConditionalGeneration (0.23+)
    "MiniMaxM3ForCausalLM": (0, 23, 0), "Step3p7FlashForCausalLM": (0, 22, 0),
}

# architectures vLLM dropped, with the last release that ran them
# (`_PREVIOUSLY_SUPPORTED_MODELS`, 0.33 model_executor/models/registry.py)
REMOVED_ARCHITECTURES = {
    "Phi3SmallForCausalLM": (0, 9, 2), "MotifForCausalLM": (0, 10, 2),
    "Phi4FlashForCausalLM": (0, 10, 2), "DonutForConditionalGeneration": (0, 10, 2),
    "MllamaForConditionalGeneration": (0, 10, 2), "Phi4MultimodalForCausalLM": (0, 12, 0),
    "JAISLMHeadModel": (0, 22, 0), **dict.fromkeys((
        "ErnieModel", "InternLM2VEForCausalLM", "QWenLMHeadModel",
        "QwenVLForConditionalGeneration", "InternLMForCausalLM", "XverseForCausalLM",
        "Dots1ForCausalLM", "BambaForCausalLM", "MiniMaxForCausalLM",
        "MiniMaxText01ForCausalLM", "MiniMaxM1ForCausalLM",
        "MiniMaxVL01ForConditionalGeneration", "BaiChuanForCausalLM", "BaichuanForCausalLM",
        "Tarsier2ForConditionalGeneration"), (0, 23, 0)),
    **dict.fromkeys(("AquilaModel", "AquilaForCausalLM", "Grok1ModelForCausalLM",
                     "Grok1ForCausalLM", "TarsierForConditionalGeneration",
                     "MantisForConditionalGeneration", "AyaVisionForConditionalGeneration"),
                    (0, 24, 0)),
    **dict.fromkeys(("TeleChatForCausalLM", "PersimmonForCausalLM", "FuyuForCausalLM"),
                    (0, 25, 0)),
    **dict.fromkeys(("Plamo2ForCausalLM", "OuroForCausalLM"), (0, 26, 0)),
    **dict.fromkeys(("ArcticForCausalLM", "ChameleonForConditionalGeneration",
                     "Fairseq2LlamaForCausalLM", "HCXVisionForCausalLM", "MPTForCausalLM",
                     "MptForCausalLM", "RWForCausalLM", "StableLMEpochForCausalLM"),
                    (0, 28, 0)),
}

# kept on the V1 runner on ROCm in 0.29-0.31 (`ROCM_DEFAULT_MRV1_ARCHITECTURES`, gone in 0.32;
# GLM-5's sparse MLA joined it in 0.30)
_V1_ON_ROCM = frozenset({"DeepseekV32ForCausalLM", "DeepseekV4ForCausalLM"})
_V1_ON_ROCM_030 = _V1_ON_ROCM | {"GlmMoeDsaForCausalLM"}

# `--moe-backend` values (vLLM 0.33 `config/kernel.py MoEBackend`; 0.18 had the first nine)
MOE_BACKENDS = ("auto", "triton", "deep_gemm", "cutlass", "flashinfer_trtllm",
                "flashinfer_cutlass", "flashinfer_cutedsl", "marlin", "aiter", "batched_triton",
                "deep_gemm_mega_moe", "flashinfer_moe_ep_cutedsl", "flashinfer_b12x", "b12x",
                "flashinfer_moe_ep_mega_deep_gemm", "humming", "triton_unfused",
                "aiter_mega_moe", "aiter_triton_mxfp4_bf16", "aiter_triton_mxfp4_mxfp4",
                "flydsl", "hpc", "emulation", "rdna3")


# `use_sequence_parallel_moe`'s backends (0.11-0.33 config/parallel.py; naive to 0.19)
_SP_MOE_BACKENDS = frozenset({
    "allgather_reducescatter", "naive", "deepep_high_throughput", "deepep_low_latency",
    "deepep_v2", "mori", "mori_high_throughput", "mori_low_latency", "nixl_ep",
    "flashinfer_nvlink_one_sided", "passthrough"})
# architectures whose shared experts sequence-parallel MoE builds whole, from a release
_SP_SHARED_WHOLE = {
    **dict.fromkeys(("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM",
                     "GlmMoeDsaForCausalLM", "MistralLarge3ForCausalLM",
                     "KimiK25ForConditionalGeneration", "Llama4ForConditionalGeneration",
                     "Llama4ForCausalLM"), (0, 11, 0)),
    "NemotronHForCausalLM": (0, 11, 1),
    **dict.fromkeys(("Qwen3NextForCausalLM", "Qwen3_5MoeForCausalLM",
                     "Qwen3_5MoeForConditionalGeneration"), (0, 20, 0)),
}


@record(frozen=True)
class VllmVersion:
    """Feature switches of one vLLM release."""

    text: str
    v: tuple[int, int, int]
    engine_v0: bool = False  # 0.8-0.10 fell back to (or were told to use) the V0 engine

    @classmethod
    def of(cls, text: str | None) -> VllmVersion:
        text = (str(text).strip().lstrip("vV") if text is not None else "") or LATEST
        return cls(text=text, v=parse_version(text))

    def at_least(self, major: int, minor: int, patch: int = 0) -> bool:
        return self.v >= (major, minor, patch)

    # --- engine generation ---
    @property
    def v1(self) -> bool:
        """V1 engine is the default from 0.8.0 (V0 removed in 0.11.0), unless this start fell
        back to V0 (`v0_fallback`, `engine_v0`)."""
        return self.at_least(0, 8) and not self.engine_v0

    def v0_fallback(self, *, cc: str, vendor: str, kv_cache_dtype: str,
                    architectures: list[str], mla: bool, quantization: str | None = None,
                    dtype: str = "auto", cpu_offload: bool = False, lora: bool = False,
                    pp: int = 1, pooling: bool = False) -> tuple[str, bool] | None:
        """Why vLLM 0.8.0-0.10.2 runs this start on its V0 engine instead of V1, and whether
        `VLLM_USE_V1=1` makes that a refusal (`_raise_or_fallback`) rather than an
        experimental V1 start (`_warn_or_fallback`); None when V1 runs it.
        `EngineArgs._is_v1_supported_oracle`, read in the 0.8.0-0.8.5,
        0.9.0, 0.9.1, 0.9.2, 0.10.0, 0.10.1 and 0.10.2 wheels:
        * compute capability below 8.0 (V100, T4), 0.8.0-0.10.1;
        * any --kv-cache-dtype other than auto in 0.8.0/0.8.1; from 0.8.2 one V1 can store:
          fp8 through FlashAttention 3 (Hopper) only, in 0.10.0/0.10.1 anything on SM100
          (`is_kv_cache_dtype_supported`), in 0.10.2 also any 16-bit name and MLA's fp8
          (FlashMLA / CUTLASS MLA); ROCm takes every dtype from 0.9;
        * a model class marked `SupportsV0Only` (`_V0_ONLY_UNTIL`): Jamba, Mamba and
          MiniMax-Text-01 to 0.10.0; Bamba, Mamba2, Zamba2, Falcon-H1, granite-4.0-h and
          Nemotron-H to 0.9.1; Plamo2 to 0.10.1; Phi-4-mini-flash and Llama 3.2 Vision
          (mllama) throughout;
        * --quantization bitsandbytes to 0.8.2, gguf to 0.8.5 (`V1_UNSUPPORTED_QUANT`);
          --dtype float32 to 0.9.1 (`V1_SUPPORTED_DTYPES`); --cpu-offload-gb to 0.8.2;
        * --enable-lora and pipeline parallelism to 0.8.2 ("off by default": VLLM_USE_V1=1
          runs them on V1); in 0.8.3-0.8.5 pipeline parallelism without the Ray executor
          (kvplan takes vLLM's default executor, not Ray);
        * a pooling model (embedding, classification, reward: `task not in ["generate"]`,
          "No Embedding Models so far") to 0.9.1;
        * any GPU but NVIDIA's (ROCm) in 0.8.0-0.8.5 ("Non-CUDA is supported on V1, but off
          by default": VLLM_USE_V1=1 runs it on V1)."""
        if not self.at_least(0, 8) or self.at_least(0, 11):
            return None
        nvidia, early = vendor == "nvidia", not self.at_least(0, 8, 3)
        kvd = (kv_cache_dtype or "auto").lower()
        quant = (quantization or "").lower()
        strict = [
            (nvidia and self.v < (0, 10, 2) and cc_major(cc) < 8,
             f"compute capability {cc} is below V1's 8.0"),
            (kvd != "auto" and not self._v1_stores_kv(kvd, cc, nvidia, mla),
             f"--kv-cache-dtype {kv_cache_dtype} is not one V1 stores on this GPU"),
            (quant == "gguf" and not self.at_least(0, 9) or quant == "bitsandbytes" and early,
             f"--quantization {quant} is not served by V1"),
            (str(dtype).lower() in ("float32", "float") and self.v < (0, 9, 2),
             "--dtype float32 is not served by V1"),
            (cpu_offload and early, "--cpu-offload-gb is not served by V1"),
            (pp > 1 and not early and not self.at_least(0, 9),
             "pipeline parallelism without the Ray executor is not served by V1"),
            (pooling and self.v < (0, 9, 2), "a pooling model is not served by V1"),
        ]
        strict += [(self.v < until, f"{arch} is a V0-only model class")
                   for arch in architectures if (until := _V0_ONLY_UNTIL.get(arch))]
        for hit, why in strict:
            if hit:
                return why, True
        if early and (lora or pp > 1):
            return ("--enable-lora" if lora else "pipeline parallelism") + " is off by " \
                "default on V1", False
        if not nvidia and not self.at_least(0, 9):  # "Non-CUDA is supported on V1, but off
            return f"V1 is off by default on {vendor.upper()} GPUs", False  # by default"
        return None

    @staticmethod
    def first_v1(architectures: list[str]) -> str:
        """The first release whose V1 engine serves these architectures."""
        v = max([_V0_ONLY_UNTIL.get(a, (0, 8, 0)) for a in architectures] or [(0, 8, 0)])
        return ".".join(map(str, v[:2] if v[2] == 0 else v))

    def _v1_stores_kv(self, kvd: str, cc: str, nvidia: bool, mla: bool) -> bool:
        if not self.at_least(0, 8, 2):
            return False
        if not nvidia:
            return self.at_least(0, 9)
        if self.at_least(0, 10) and cc == "10.0":
            return True
        if self.at_least(0, 10, 2) and (mla or not kvd.startswith("fp8")):
            return True
        return kvd.startswith("fp8") and cc_major(cc) == 9

    # --- memory budget ---
    @property
    def default_gpu_memory_utilization(self) -> float:
        """`CacheConfig.gpu_memory_utilization`: 0.90, 0.92 from 0.20.0."""
        return 0.92 if self.at_least(0, 20) else 0.90

    def sp_moe_shared_whole(self, architectures: list[str], *, tp: int, dp: int, ep: bool,
                            backend: str | None) -> bool:
        """Sequence-parallel MoE (`ParallelConfig.use_sequence_parallel_moe`, 0.11+: expert
        parallelism, TP > 1 and DP > 1 over one of the backends it lists, the default among
        them) builds the shared experts of these models whole on every TP rank
        (`disable_tp=is_sequence_parallel`): deepseek_v2.py's `DeepseekV2MoE` and llama4.py
        from 0.11.0, nemotron_h.py from 0.11.1, Qwen3-Next / Qwen3.5 (qwen2_moe.py's MLP)
        from 0.20.0."""
        if not (ep and tp > 1 and dp > 1 and self.at_least(0, 11)):
            return False
        if (backend or "allgather_reducescatter") not in _SP_MOE_BACKENDS:
            return False
        return any(self.at_least(*_SP_SHARED_WHOLE[x]) for x in architectures
                   if x in _SP_SHARED_WHOLE)

    @property
    def mamba_seqs_need_blocks(self) -> bool:
        """With FULL decode CUDA graphs, vLLM refuses to start a Mamba/linear-attention model
        whose max_num_seqs exceeds the KV-cache blocks ("max_num_seqs (N) exceeds available
        Mamba cache blocks", `CompilationConfig` cudagraph checks): in the 0.20.2 wheel, not
        in 0.19.0."""
        return self.at_least(0, 20)

    def moe_kernel(self, compute_capability: str, *, fp8_block: bool, moe_tp: int,
                   expert_parallel: bool, vendor: str = "nvidia", backend: str = "auto",
                   nvfp4: bool = False, mxfp4: bool = False, wna16: bool = False,
                   fp8_tensor: bool = False, unquantized: bool = False, dp: int = 1,
                   eplb: bool = False, lora_triton: bool = False) -> str:
        """Which fused-MoE experts kernel the profile run uses (`memory.MOE_KERNELS`), read
        in the 0.11.0-0.19.0 wheels:
        * 0.11.0: `fused_experts_impl`, scratch allocated per call; with expert parallelism
          `FusedMoEModularKernel`, whose class-level `SharedResizableBuffer`s keep it.
        * 0.11.1+ on Hopper with block-FP8 experts: DeepGEMM (`get_fp8_moe_backend`; E8M0
          scales skip the N <= 512 shape check) through that modular kernel (0.12 is
          assumed to match 0.11.2).
        * 0.13: the Triton function again, except DeepGEMM for block FP8 at MoE TP < 8
          (`moe_use_deep_gemm = False` when tp_size >= 8), now in the `WorkspaceManager`.
        * 0.14+: every MoE goes through the modular kernel and the `WorkspaceManager`
          (`TritonExperts`; Marlin's buffers have the same size). Block FP8 on Hopper:
          DeepGEMM below TP 8 (0.14-0.15), FlashInfer CUTLASS (0.16, first in the
          fixed order), Triton for TP and FlashInfer CUTLASS for EP (0.17+
          `_get_priority_backends`, read in the 0.17.1 wheel); on Blackwell FlashInfer
          TRT-LLM (0.16+). MXFP4 experts
          (gpt-oss): OpenAI's Triton kernels on Hopper and ROCm (`get_mxfp4_backend`, then
          `_get_priority_backends_for_gpt_oss` without AITER), FlashInfer on SM100, Marlin
          below.
          Weight-only int experts (AWQ, GPTQ, compressed-tensors W4A16) call the Marlin
          function, which allocates per call, until `oracle/int_wna16.py` (absent in the
          0.19.0 wheel, present in 0.20.2) moves them to the modular kernel.
        * 0.20+: unquantized experts go to FlashInfer (`fi_bf16_moe`); with LoRA they take
          Triton (`lora_triton`: `select_unquantized_moe_backend`'s LoRA branch, 0.24+,
          except its TRT-LLM LoRA experts on SM100 from 0.27 when the intermediate per GPU
          is a multiple of 128).
        * 0.16+: static per-tensor FP8 experts (ModelOpt FP8) go to FlashInfer's CUTLASS
          kernel on SM90 and the SM100/110/120 families (`select_fp8_moe_backend`:
          FLASHINFER_TRTLLM, then FLASHINFER_CUTLASS, whose `_supports_quant_scheme` takes
          (kFp8StaticTensorSym, kFp8StaticTensorSym); 0.16-0.20.2 wheels).
        DeepGEMM needs the `deep_gemm` package, which the vllm/vllm-openai image ships.
        `--moe-backend` (0.18+, `config/kernel.py MoEBackend`) picks the kernel instead:
        CUTLASS and Marlin keep buffers the size of Triton's; AITER sizes its own."""
        chosen = self.moe_backend_kind(backend)
        if chosen == "modular" and mxfp4 and str(backend).lower() == "triton" \
                and self.at_least(0, 19):
            return "oai_triton"  # `map_mxfp4_backend`: triton is OpenAI's Triton kernel
        if chosen and not (mxfp4 and not self.at_least(0, 19)):  # 0.18 ignores it for MXFP4
            return chosen
        if vendor == "amd" and mxfp4 and self.at_least(0, 14):
            return "oai_triton"  # ROCm runs MXFP4 experts on OpenAI's Triton kernels too
        if vendor != "nvidia":  # the DeepGEMM / FlashInfer picks are CUDA's
            fp8_block = nvfp4 = mxfp4 = False
        major = cc_major(compute_capability)
        if nvfp4 and major in (10, 12) and self.at_least(0, 11):
            return "flashinfer"  # NVFP4 experts on Blackwell: FlashInfer first (`oracle/nvfp4.py`)
        if mxfp4 and self.at_least(0, 14):  # `get_mxfp4_backend`: FlashInfer on SM100, OpenAI's
            if major == 10:                 # Triton kernels on SM90, Marlin below
                return "flashinfer"
            if major == 9:
                return "oai_triton"
        if (fp8_tensor and self.fi_fp8_moe(compute_capability)) or (
                unquantized and self.fi_bf16_moe(compute_capability, dp) and not lora_triton):
            return "flashinfer"
        hopper_fp8 = fp8_block and major == 9
        if wna16 and not self.at_least(0, 20):
            return "functional"  # `fused_marlin_moe` allocates per call until the 0.20 oracle
        if not self.at_least(0, 14):
            if hopper_fp8 and self.at_least(0, 11, 1) and (moe_tp < 8
                                                           or not self.at_least(0, 13)):
                return "deepgemm" if self.at_least(0, 13) else "deepgemm_v011"
            # with expert parallelism the modular kernel runs on CUDA, its buffers kept from
            # 0.11 (`SharedResizableBuffer`; per call in 0.10.2); an MI300X 0.11.2 TP4+EP
            # start shows no kept buffers
            kept = expert_parallel and vendor == "nvidia" and self.at_least(0, 11)
            return "modular" if kept else "functional"
        if hopper_fp8:
            if not self.at_least(0, 16):
                return "deepgemm" if moe_tp < 8 else "modular"
            if not self.at_least(0, 17) or expert_parallel:
                return "flashinfer"
        if fp8_block and major == 10 and self.at_least(0, 16):
            # FLASHINFER_TRTLLM first (Blackwell only; sizes its own scratch), which takes no
            # EPLB: DeepGEMM then (`_get_priority_backends`, the vllm/vllm-openai image)
            return "deepgemm" if eplb else "flashinfer"
        return "modular"

    def fi_fp8_moe(self, compute_capability: str) -> bool:
        """Whether static per-tensor FP8 experts run on FlashInfer's MoE kernels: vLLM 0.16+
        on SM90 and the SM100/110/120 families (`FlashInferExperts._supports_current_device`;
        flashinfer is a dependency of the CUDA wheel)."""
        cc = compute_capability or ""
        return self.at_least(0, 16) and (cc == "9.0" or cc_major(cc) in (10, 11, 12))

    def fi_fp4_moe_alignment(self, gated: bool) -> int:
        """Rows FlashInfer's TRT-LLM NVFP4 MoE path pads each rank's expert intermediate to
        (`prepare_nvfp4_moe_layer_for_fi_or_cutlass` -> `align_fp4_moe_weights_for_fi`): 128
        for non-gated activations, which it takes from 0.17 (PR 33506; before, they ran on
        other kernels); 16 for gated ones, 64 from 0.26 (0.18-0.25, 0.26, 0.32 and 0.33
        wheels)."""
        if not gated:
            return 128 if self.at_least(0, 17) else 0
        return 64 if self.at_least(0, 26) else 16

    @property
    def fi_fp4_moe_hidden_alignment(self) -> int:
        """The hidden side the TRT-LLM NVFP4 MoE path pads to (`align_trtllm_fp4_moe_hidden_
        dim_for_fi` / `trtllm_nvfp4_hidden_alignment`): 256 from 0.20 (in the 0.20.2 and 0.33
        wheels, absent in 0.19); 0 (none) before."""
        return 256 if self.at_least(0, 20) else 0

    def fp32_router_model(self, model_type: str, compute_capability: str,
                          vendor: str = "nvidia", config: dict | None = None) -> bool:
        """Whether this model's MoE routers are held in fp32 on every platform (review 27):
        `GateLinear(params_dtype=torch.float32)` or an fp32 `nn.Linear` in MiniMax-M2/M3 and
        MiniMax-Text-01 (every release that has them), ERNIE 4.5 and ERNIE-4.5-VL (0.11.1+),
        GLM-4 MoE and GLM-4.5V (0.10.1+), GLM-4.7-Flash (0.15+), AFMoE (0.11.1+), Step-3.5 /
        3.7 (`FP32ReplicatedLinear`, 0.15.1+), HY-V3 (0.20+), HY-V4 (0.29+); by the config:
        Ling 2.0 (`router_dtype: fp32`, 0.11+), the Ling/Ring hybrids (unset or fp32, 0.17+;
        BailingMoeV3 always), MiMo-V2-Flash (`moe_router_dtype`, default float32, 0.14+),
        Sarvam-MLA (`router_dtype`, default fp32, 0.18-0.30). The rows priced are each
        MoE layer's gates (`LayerParams.router`, ERNIE-4.5-VL's vision gate too).
        Nemotron-H's `force_fp32_compute` off its specialised kernels (`fp32_router`)."""
        c = config or {}
        if model_type == "nemotron_h":
            return self.fp32_router(compute_capability, vendor)
        if model_type == "bailing_moe":
            return self.at_least(0, 11) and c.get("router_dtype") == "fp32"
        if model_type == "bailing_hybrid":  # BailingMoeV3's gate is fp32 whatever it says
            return self.at_least(0, 17) and (c.get("router_dtype", "fp32") == "fp32" or any(
                a.startswith("BailingMoeV3") for a in c.get("architectures") or []))
        if model_type == "mimo_v2_flash":  # an explicit null: the model dtype
            return self.at_least(0, 14) and c.get("moe_router_dtype", "float32") == "float32"
        if model_type == "sarvam_mla":  # `router_dtype` default fp32 (0.18-0.30)
            return (0, 18) <= self.v < (0, 31) and c.get("router_dtype", "fp32") == "fp32"
        since = {"minimax_m2": (0, 0), "minimax_m3": (0, 0), "minimax": (0, 0),
                 "minimax_text_01": (0, 0), "minimax_m1": (0, 0), "ernie4_5_moe": (0, 11, 1),
                 "ernie4_5_vl_moe": (0, 11, 1), "ernie4_5_vl_moe_text": (0, 11, 1),
                 "ernie4_5_moe_vl": (0, 11, 1), "glm4_moe": (0, 10, 1),
                 "glm4v_moe": (0, 10, 1), "glm4v_moe_text": (0, 10, 1),
                 "glm4_moe_lite": (0, 15), "afmoe": (0, 11, 1), "step3p5": (0, 15, 1),
                 "step3p7": (0, 15, 1), "hy_v3": (0, 20), "hy_v4": (0, 29)}.get(model_type)
        return since is not None and self.at_least(*since)

    def fp32_router(self, compute_capability: str, vendor: str = "nvidia") -> bool:
        """Whether Nemotron-H's router weight is fp32: `GateLinear(force_fp32_compute=True)`
        keeps the model dtype only on CUDA SM90 / the SM100 family (its specialised kernels,
        0.17+, PR 35121); before 0.17 a `ReplicatedLinear(params_dtype=torch.float32)`."""
        cc = compute_capability or ""
        fast = vendor == "nvidia" and (cc == "9.0" or cc_major(cc) == 10)
        return not (fast and self.at_least(0, 17))

    @property
    def dsv4_stack_counted_twice(self) -> bool:
        """DeepSeek-V4's C128 compressor kernel first launches in the CUDA-graph probe's
        warm-up (the profile forward returns early without metadata), so the stack growth it
        causes lands in the first FULL capture's sample and again in the non-torch increase,
        measured after the probe (0.20.2 `gpu_worker.determine_available_memory`). Read in
        0.20.2 and 0.21.0 (the same Triton kernel, `deepseek_compressor.py`). From 0.22.1
        NVIDIA runs a CuTeDSL kernel through the same two counts (`dsv4_stack_unmeasured`)."""
        return self.at_least(0, 20) and not self.at_least(0, 22)

    @property
    def dsv4_stack_unmeasured(self) -> bool:
        """0.22-0.32 count a first compressor launch inside the graph probe twice as 0.20-0.21
        do (read in 0.22.1-0.26.0), but launch a CuTeDSL kernel whose stack need is unknown;
        0.33 probes the graphs after `memory_profiling` has measured, so once."""
        return self.at_least(0, 22) and not self.at_least(0, 33)

    @property
    def kv_sharing_layers_keep_kv(self) -> bool:
        """Gemma 4's KV-sharing layers allocate K/V projections (a full `qkv_proj`) up to
        0.29; 0.30 builds `q_proj` alone (gemma4.py in the 0.21-0.29 / 0.30-0.33 wheels)."""
        return not self.at_least(0, 30)

    @property
    def uncapped_prompt_check(self) -> bool:
        """The V1 whole-prompt admission check charges a sliding-window or chunked-local
        group the whole prompt, cdiv(prompt, block_size) blocks: 0.19.x
        (`KVCacheManager.can_fit_full_sequence`, new in 0.19.0; the scheduler `break`s at a
        waiting request that fails it, so one that never fits stops the queue for good).
        0.20.0 caps every `get_num_blocks_to_allocate` at `max_admission_blocks_per_request`
        (single_type_kv_cache_manager.py), 0.20.2 the admission check only
        (`apply_admission_cap`)."""
        return self.v1 and self.at_least(0, 19) and not self.at_least(0, 20)

    @property
    def hybrid_allocator(self) -> bool:
        """V1 from 0.9.1 groups sliding-window and full layers apart; V1 before it unifies
        every layer to full attention (`unify_hybrid_kv_cache_specs`) and prints concurrency
        as tokens / max_model_len, and V0 drops Gemma 2/3's interleaved window
        (`ModelConfig`; the 0.6.6, 0.8.0, 0.9.0 and 0.9.1 wheels)."""
        return self.v1 and self.at_least(0, 9, 1)

    def chunked_local_groups(self, eagle_drafter: bool) -> bool:
        """Whether Llama 4's chunked-local layers keep their own KV groups by default.
        Before 0.10 they are full-attention layers (no `ChunkedLocalAttentionSpec`); an
        EAGLE-style drafter (`SpeculativeConfig.use_eagle`) always turns the hybrid manager
        off; 0.10.1-0.13 turn it off unless VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1,
        whose default becomes 1 in 0.14 (`VllmConfig.__post_init__`, envs.py; wheels read:
        0.9.2, 0.10.0, 0.10.1, 0.12, 0.13, 0.14, 0.33)."""
        if eagle_drafter or not self.at_least(0, 10):
            return False
        return self.at_least(0, 14) or not self.at_least(0, 10, 1)

    def fi_bf16_moe(self, compute_capability: str, dp: int = 1) -> bool:
        """Whether unquantized (16-bit) experts run on FlashInfer's MoE kernels: from 0.20
        (`oracle/unquantized.py _get_priority_backends`: FLASHINFER_TRTLLM, FLASHINFER_CUTLASS,
        then Triton on CUDA; 0.19 needed VLLM_USE_FLASHINFER_MOE_FP16=1). The CUTLASS kernel
        takes 16-bit experts on SM90 and the SM100/110/120 families, TRT-LLM's on SM100.
        0.23 puts both behind Triton on Hopper (slower there; 0.23.0 and 0.33 wheels), and data
        parallelism puts CUTLASS behind Triton (a Qwen3.5 DEP crash)."""
        cc = compute_capability or ""
        major = cc_major(cc)
        if not self.at_least(0, 20):
            return False
        if cc == "9.0":
            return dp == 1 and not self.at_least(0, 23)
        return major == 10 or (major in (11, 12) and dp == 1)

    def fi_fp8_moe_alignment(self, gated: bool) -> int:
        """Rows the FlashInfer FP8 MoE path pads each rank's expert intermediate to
        (`prepare_fp8_moe_layer_for_fi` -> `align_fp8_moe_weights_for_fi`, the padded copies
        replacing the weights): 16; 128 for non-gated activations from 0.17 (PR 33506; 0.17.1,
        0.18, 0.19, 0.20.2 and 0.33 wheels)."""
        return 128 if not gated and self.at_least(0, 17) else 16

    def moe_backend_kind(self, backend: str | None) -> str | None:
        """The `memory.MOE_KERNELS` kind of an explicit `--moe-backend` (None for auto);
        rejects what vLLM rejects."""
        b = (backend or "auto").lower().replace("-", "_")
        if b == "auto":
            return None
        if b not in MOE_BACKENDS:
            raise BadInput(f"--moe-backend {backend} is not a vLLM MoE backend",
                           hint="choose one of " + ", ".join(MOE_BACKENDS))
        if not self.at_least(0, 18):
            raise BadInput(f"vLLM {self.text} has no --moe-backend (0.18+)",
                           hint="drop it, or set VLLM_USE_DEEP_GEMM / "
                                "VLLM_USE_FLASHINFER_MOE_FP8 as that release reads")
        if b.startswith("deep_gemm"):
            return "deepgemm"
        if "flashinfer" in b or "b12x" in b:
            return "flashinfer"
        return "functional" if b.startswith("aiter") else "modular"

    def mistral_native_tower(self, model_id: str) -> bool:
        """A Pixtral tower replicated on every TP rank: from 0.12 `get_config` tries Mistral's
        format first when params.json exists ("First check for Mistral", absent in 0.11.2),
        and its `VisionTransformer` is plain `nn.Linear` through 0.19 (TP-parallel linears
        in the 0.20.2 wheel). Mistral's own repos (mistralai/) ship params.json. Real
        Ministral-3-14B-Reasoning starts at 0.13 TP4/TP8 log 0.8 GiB per GPU more than a
        split 0.82 GiB tower allows."""
        return (self.at_least(0, 12) and not self.at_least(0, 20)
                and model_id.lower().startswith("mistralai/"))

    @property
    def moe_chunk(self) -> int | None:
        """`VLLM_FUSED_MOE_CHUNK_SIZE`: 32768 tokens to 0.11, 16384 in 0.12-0.17 (envs.py's
        default), gone in 0.18 (the modular kernel no longer chunks)."""
        if self.at_least(0, 18):
            return None
        return 16384 if self.at_least(0, 12) else 32768

    @property
    def dsv4_tuple_layout(self) -> bool:
        """DeepSeek-V4 before 0.23 (0.20.2 `kv_cache_utils._get_kv_cache_config_deepseek_v4`;
        a v0.22-tagged start matches it): every tuple slot reserves each distinct page of the
        full-MLA group, sliding pages are padded up to those pages, and "Maximum concurrency"
        weights each group's blocks by its page bytes. 0.33 packs block-outermost groups."""
        return not self.at_least(0, 23)

    @property
    def dsv4_bucketed_layout(self) -> bool:
        """DeepSeek-V4 in 0.23-0.26 (read in the 0.23.0-0.26.0 wheels): the same padded
        sliding pages and page-weighted "Maximum concurrency" as before 0.23, but a block ID
        reserves each page size times its largest count in one group
        (`blocks.bucketed_bytes_per_block`). From 0.27 the pages are not padded (0.27/0.28
        then taken as 0.33's layout)."""
        return self.at_least(0, 23) and not self.at_least(0, 27)

    @property
    def rocm_moe_padding_kept(self) -> bool:
        """ROCm re-binds unquantized MoE weights to their padded views up to 0.29; 0.30 copies
        them back (`UnquantizedFusedMoEMethod.process_weights_after_loading`)."""
        return not self.at_least(0, 30)

    @property
    def rocm_load_counts_cache(self) -> bool:
        """ROCm measures the model load as device memory in use up to 0.20 (`mem_get_info`),
        as allocated memory from 0.21 (`RocmPlatform.get_current_memory_usage`)."""
        return not self.at_least(0, 21)

    def subtracts_cudagraph(self, vendor: str = "nvidia") -> bool:
        """`VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS` defaults to 1 from 0.20.0; the worker
        profiles graphs on CUDA only (`not is_rocm()` in 0.20.2, `is_cuda()` in 0.24/0.25)
        and on ROCm too from 0.26 (`is_cuda_alike()`)."""
        return self.at_least(0, 26) if vendor == "amd" else self.at_least(0, 20)

    def flashinfer_allreduce(self, compute_capability: str, *, tp: int, pp: int, dp: int,
                             enforce_eager: bool, profile_allreduce_bytes: int = 0) -> bool:
        """Whether vLLM builds its FlashInfer all-reduce workspace on each GPU inside the
        memory profile.
        * From 0.17 (absent in 0.16.0), the default -O2 fuses all-reduce + RMSNorm through
          FlashInfer (`enable_allreduce_rms_fusion`); the compile pass builds the workspace.
          It needs TP > 1 on compute capability 9.0 or 10.0 (the whole SM100 family from
          0.20) and compilation on, so not with --enforce-eager or compilation mode 0; in
          0.17-0.20 also PP = DP = 1, in 0.23 PP = 1 (`_fusion_pp_dp_ok`).
        * From 0.29 (off in the 0.28.0 wheel), standalone all-reduces go through it too
          (`VLLM_ALLREDUCE_USE_FLASHINFER` defaults to 1), eager included, but only for inputs
          no larger than its maximum size (`FlashInferAllReduce.should_use_fi_ar`), and the
          workspace is created lazily by the first such all-reduce. The profile forward
          all-reduces [max_num_batched_tokens, hidden] (`profile_allreduce_bytes`), so
          without the compile pass the workspace is built inside the profile only when that
          fits (`fi_allreduce_max_bytes`)."""
        cc = compute_capability or ""
        sm = cc == "9.0" or cc == "10.0" or (cc.startswith("10.") and self.at_least(0, 20))
        if tp < 2 or not sm or not self.at_least(0, 17):
            return False
        # the fusion pass takes the TP sizes its table lists (`PassConfig.flashinfer_max_size`:
        # FI_SUPPORTED_WORLD_SIZES and FI_ALLREDUCE_FUSION_MAX_SIZE_MB; 16, "mnnvl
        # multi-node", on SM100 / SM103 from 0.25; SM107 from 0.29)
        fused = tp in _FI_AR_MAX_MB.get(cc.replace(".", ""), {}) and (
            tp < 16 or self.at_least(0, 25)) and (cc != "10.7" or self.at_least(0, 29))
        if fused and not enforce_eager and self._fusion_pp_dp_ok(pp, dp):
            return True
        return self.at_least(0, 29) and 0 < profile_allreduce_bytes <= self.fi_allreduce_max_bytes(
            cc, tp)

    def _fusion_pp_dp_ok(self, pp: int, dp: int) -> bool:
        """`enable_allreduce_rms_fusion`'s parallel conditions: PP = DP = 1 in 0.17-0.20,
        none in 0.21-0.22, PP = 1 in 0.23, none from 0.24 (the wheels, review 25f)."""
        if not self.at_least(0, 21):
            return pp == 1 and dp == 1
        return pp == 1 if self.v[:2] == (0, 23) else True

    @property
    def fi_allreduce_charged(self) -> bool:
        """Whether building the FlashInfer all-reduce workspace costs KV cache. Measured:
        1.58 GiB per GPU at TP2/TP4 on 0.19.0 H100 logs and the 0.18-0.20.2 H200/B200 sweep
        (FlashInfer 0.6.6/0.6.8 rounded its three buffers to 512 MiB each); nothing on 0.30.0
        (2x H100, Llama-3.1-8B TP2: the default, the trtllm backend, and the fusion without
        CUDA graphs all leave the KV cache of an eager start less the graphs), nor on a
        0.31.1 TP8 H100 start (1.38 GiB held beyond the weights in all). 0.27-0.29 build it
        as 0.30 does (`flashinfer_all_reduce.py`, `AllReduceFusionPass`, `memory_profiling`
        unchanged; their FlashInfer pins 0.6.16-0.6.18 allocate the multicast workspace the
        same way, review 25f), so they take 0.30's measured nothing; 0.21-0.26 keep the
        charge, no start measuring them."""
        return not self.at_least(0, 27)

    def breakable_cudagraph(self, architectures: list[str], vendor: str = "nvidia",
                            env: bool | None = None) -> bool:
        """Whether vLLM runs breakable CUDA graphs, which set compilation mode NONE (no
        torch.compile) and keep piecewise graphs (`VllmConfig._maybe_enable_breakable_
        cudagraph`). `VLLM_USE_BREAKABLE_CUDAGRAPH` (`env`) decides when set; unset, vLLM turns
        it on for the architectures it lists: read in the 0.24.0-0.29.0 and 0.33.0 wheels
        (absent in 0.20.2; releases between take the older list); on ROCm from 0.30 only
        DeepseekV41ForCausalLM (`default_breakable_cudagraph_architectures`, 0.30-0.33)."""
        if not self.at_least(0, 24):
            return False
        if env is not None:
            return env
        if vendor == "amd" and self.at_least(0, 30):  # ROCm lists only V4.1 from 0.30
            listed = {"DeepseekV41ForCausalLM"}
        elif self.at_least(0, 33):
            listed = BREAKABLE_033
        elif self.at_least(0, 29):
            listed = BREAKABLE_029 - ({"DeepseekV32ForCausalLM", "DeepseekV32MTPModel"}
                                      if vendor == "amd" else set())
        else:
            listed = next(v for k, v in BREAKABLE_024 if self.at_least(*k))
        return any(a in listed for a in architectures)

    def fi_allreduce_max_bytes(self, compute_capability: str, tp: int) -> int:
        """The largest input FlashInfer's standalone all-reduce takes on one node: the
        per-capability table (`FI_ALLREDUCE_FUSION_MAX_SIZE_MB`, equal in the 0.29.0 and
        0.33.0 wheels), or the MNNVL backend's tuned size (`FI_MNNVL_ALLREDUCE_MAX_SIZE_MB`:
        0.29.0 has SM103 only, 0.33.0 adds B200 at TP8; releases between take 0.29's)."""
        key = compute_capability.replace(".", "")
        tuned = (_FI_MNNVL_MAX_MB_033 if self.at_least(0, 33) else _FI_MNNVL_MAX_MB_029)
        mb = tuned.get((key, tp)) or _FI_AR_MAX_MB.get(key, {}).get(tp, 0)
        return int(mb * (1 << 20))

    def cudagraph_ceiling(self, compute_capability: str) -> int:
        """Largest default capture size: 1024 on data-centre Blackwell (SM100 family) from
        0.28 (`_set_cudagraph_sizes`; in the 0.28.0 wheel, absent in 0.27.1), else 512."""
        return 1024 if self.at_least(0, 28) and cc_major(compute_capability) == 10 else 512

    @property
    def requested_is_ceiled(self) -> bool:
        """`request_memory` (v1/worker/utils.py, 0.14+): `math.ceil(total * util)`; 0.13 and
        earlier a float product in gpu_worker.py (0.13.0-0.33.0 wheels)."""
        return self.at_least(0, 14)

    # --- KV accounting ---
    @property
    def kv_tokens_from_concurrency(self) -> bool:
        """'GPU KV cache size' = int(max_concurrency * max_model_len) from 0.20.1
        (`_report_kv_cache_config`, kv_cache_utils.py: the 0.20.1 and 0.20.2 wheels agree;
        0.20.0 has the per-group block formula)."""
        return self.at_least(0, 20, 1)

    def inflight_batches(self, pp: int, v2_runner: bool, async_scheduling: bool = True) -> int:
        """Batches of `max_num_batched_tokens` a sliding-window or chunked layer must keep
        blocks for (`VllmConfig.max_in_flight_tokens` = `max_concurrent_batches` x the token
        budget, from 0.26): with async scheduling pp + 1 on model runner V2, 2 (pp = 1) or pp
        on V1; without it pp. Up to 0.25 one batch."""
        if not self.at_least(0, 26):
            return 1
        if not async_scheduling:
            return pp
        return pp + 1 if v2_runner else (2 if pp == 1 else pp)

    def async_scheduling(self, requested: bool | None, v2_runner: bool,
                         spec_method: str | None, unpadded: bool = False,
                         pp: int = 1) -> bool:
        """Whether the start schedules asynchronously (`VllmConfig.__post_init__`, read in the
        0.26-0.33 wheels). `--no-async-scheduling` turns it off; by default it is on except
        with a speculative method outside EAGLE/MTP/DFlash, ngram_gpu, DSpark and (0.28+)
        draft_model, or with `disable_padded_drafter_batch` (refused beside an explicit
        --async-scheduling from 0.11.1), both of which 0.33 applies to model runner V1 only
        (suffix; V2 runs the rest), and (0.31+) with PP > 1 on model runner V1; asked for
        beside such a method or the unpadded drafter batch (or with PP > 1: 0.11.1-0.14, and
        0.33 on V1), vLLM refuses to start. (Pooling runners and executors without async
        support are not modelled.)"""
        ok = {"mtp", "eagle", "eagle3", "dflash", "ngram_gpu", "dspark", "draft_model"}
        if not self.at_least(0, 28):
            ok.discard("draft_model")  # (0.26-0.27 allow it only when asked for)
        v1_rules = not (self.at_least(0, 33) and v2_runner)
        clash = spec_method is not None and spec_method not in ok and v1_rules
        why = f"{spec_method} speculative decoding" if clash and spec_method != "draft_model" \
            else ""
        if spec_method is not None and unpadded and v1_rules and self.at_least(0, 11, 1):
            clash, why = True, "disable_padded_drafter_batch"
        if pp > 1 and not v2_runner and self.at_least(0, 31):
            clash = True
            why = why or ("pipeline parallelism on model runner V1" if self.at_least(0, 33)
                          else "")
        if pp > 1 and self.at_least(0, 11, 1) and not self.at_least(0, 15):
            why = why or "pipeline_parallel_size > 1"  # 0.11.1-0.14 ("not yet compatible")
        if requested and why:
            raise BadInput(f"vLLM {self.text} refuses --async-scheduling with {why}",
                           hint="drop --async-scheduling", flag="async_scheduling")
        if requested is not None:
            return requested
        return not clash

    def v2_model_runner(self, architectures: list[str], moe: bool, hybrid: bool,
                        vendor: str = "nvidia") -> bool:
        """Model runner V2 by default (`VllmConfig.use_v2_model_runner`, read in the 0.24-0.33
        wheels): every model from 0.29 (on ROCm DeepSeek-V3.2/V4 stay on V1 in 0.29-0.31);
        from 0.25 the generate models that are neither MoE nor hybrid, and the listed MoE
        architectures; in 0.24 the listed architectures only; V1 before."""
        if self.at_least(0, 29):
            kept = _V1_ON_ROCM_030 if self.at_least(0, 30) else _V1_ON_ROCM
            return not (vendor == "amd" and not self.at_least(0, 32)
                        and any(a in kept for a in architectures))
        if self.at_least(0, 25):
            listed = set().union(*(names for since, names in _V2_RUNNER_MOE
                                   if self.at_least(*since)))
            return any(a in listed for a in architectures) or not (moe or hybrid)
        if self.at_least(0, 24):
            return any(a in V2_RUNNER_ARCHS_024 for a in architectures)
        return False

    def v2_profile(self) -> tuple[bool, float | None, bool, bool]:
        """How the V2 runner's start-up profile differs from V1's (`gpu/model_runner.py`,
        0.24-0.33 wheels): (graph estimate measured, fp32 logits copies its dummy sampler
        makes besides the model-dtype logits (None: V1's top-k/top-p path), sampler state
        charged, multimodal encoder profiled).
        * `profile_cudagraph_memory` returns 0 up to 0.28; 0.29 measures the graphs.
        * The dummy requests are greedy: 0.24-0.25 still copy the logits to fp32 once, 0.26-0.32
          sample in place; 0.33 adds a warm-up-parameter pass ("the profiled peak must too")
          through V2's sampler: FlashInfer's fused top-k/top-p where it runs
          (`v2_flashinfer_sampler`), else its in-place Triton top-k/top-p (1.5 logits buffers
          and the kernel's per-SM cached rows). Before 0.33 that peak comes
          after the KV cache is sized (`warmup_kernels`), above gpu_memory_utilization.
        * The penalty and grammar state ([max_num_seqs, vocab] + 2 x [max_num_seqs, vocab/32]
          int32) is allocated after "Model loading took"; 0.24-0.26 count non-KV memory as
          weights + torch peak + non-torch growth and miss it, 0.27 charges the free-memory drop.
        * No encoder profile before 0.27."""
        if self.at_least(0, 33):
            return True, None, True, True
        return (self.at_least(0, 29), 0.0 if self.at_least(0, 26) else 1.0,
                self.at_least(0, 27), self.at_least(0, 27))

    @property
    def profile_pins_split_segments(self) -> bool:
        """0.27-0.30 charge the drop in free device memory over the profile run
        (`memory_profiling`: `total_consumed`), with the allocator free to split any cached
        block. A persistent allocation carved from a freed activation block keeps the whole
        segment past `empty_cache()`, so it is counted as used. 0.31 profiles under
        `max_split_size_mb=20` (`Worker._scoped_allocator_max_split` around `profile_run`)
        so large blocks stay whole and releasable."""
        return self.at_least(0, 27) and not self.at_least(0, 31)

    def pixtral_dense_mask(self, compute_capability: str) -> bool:
        """Pixtral's tower attends with a dense [N, N] mask where xformers is not used
        (pixtral.py `USE_XFORMERS_OPS`): the wheels require xformers up to 0.11, and it is
        skipped on compute capability 10+; 0.29 moved to the mask-free `MMEncoderAttention`
        (read in the 0.9.2-0.33 wheels and their Requires-Dist)."""
        if self.at_least(0, 29):
            return False
        return self.at_least(0, 12) or (self.at_least(0, 10) and cc_major(compute_capability)
                                        >= 10)

    def v2_flashinfer_sampler(self, compute_capability: str, vendor: str = "nvidia",
                              env: bool | None = None, *, in_profile: bool = True,
                              sm_count: int = 0, fused_ok: bool = True) -> bool:
        """0.33's profile samples the warm-up requests (top-k 50, top-p 0.9) through V2's
        sampler, which takes FlashInfer's fused top-k/top-p kernel when
        `flashinfer_sampler_supported()`: CUDA, `VLLM_USE_FLASHINFER_SAMPLER` not 0 (default
        on), compute capability 8.0-12.1 (`FlashInferBackend.supports_compute_capability`).
        Its peak is the model-dtype logits + an fp32 copy + the top-k-masked logits + the
        probabilities (`gpu/sample/sampler.py`, `flashinfer_sample`). Before 0.33 V2 profiles
        greedy requests only; `in_profile=False` asks about the sampler itself, which takes
        FlashInfer on the same terms from 0.24 (`Sampler.use_flashinfer`, the 0.24-0.32
        wheels), as in the top-k/top-p warm-up after the KV cache is sized. From 0.31 a GPU
        of 16 SMs or fewer samples without it (`flashinfer_sampler_supported`: FlashInfer 0.7+
        rejects multi-CTA top-k masking there; `sm_count` 0: not known, taken as more).
        `fused_ok` False: `--return-sampling-mask` (0.28+) or a processed `--logprobs-mode`
        (the warm-up requests ask for 5 logprobs), with which the sampler does not fuse
        (`Sampler.use_flashinfer`, `fused_sampler_eligible`; the caller applies the gates)."""
        if not self.at_least(0, 33 if in_profile else 24) or vendor != "nvidia" or env is False:
            return False
        if not fused_ok:
            return False
        if 0 < sm_count <= 16 and self.at_least(0, 31):
            return False
        return (8, 0) <= cc_tuple(compute_capability) <= (12, 1)

    @property
    def custom_all_reduce_sizes(self) -> tuple[int, ...]:
        """TP sizes vLLM's custom all-reduce runs at (`CustomAllreduce._SUPPORTED_WORLD_SIZES`,
        0.8.5-0.33 wheels; 16 from 0.27). It is also off past two GPUs that NVLink does not
        fully connect ("not supported on more than two PCIe-only GPUs",
        `CudaPlatform.is_fully_connected`): `Gpu.nvlink_domain`."""
        return (2, 4, 6, 8, 16) if self.at_least(0, 27) else (2, 4, 6, 8)

    @property
    def mamba_align_mode(self) -> bool:
        """`mamba_cache_mode`: with prefix caching on, Mamba1/2 models that support it keep a
        state per block ('all'), the others 2 states ('align') -- read in 0.15.1, 0.16.0,
        0.17.1, 0.18.1 and 0.20.2. 0.12-0.14 had only the first kind and turned prefix
        caching off for the rest."""
        return self.at_least(0, 15)

    @property
    def mamba_prefix_caching_default(self) -> bool:
        """Hybrid models: prefix caching (Mamba 'align' mode) on by default from 0.28
        (`_set_default_chunked_prefill_and_prefix_caching_args` takes
        `is_prefix_caching_supported`, true for generative hybrids from 0.26; 0.26-0.27 kept
        hybrids out of the default; read in the 0.25.0-0.33.0 wheels)."""
        return self.at_least(0, 28)

    @property
    def largest_batch_tier(self) -> bool:
        """>=160 GiB devices get mnbt 16384 for `vllm serve` (`get_batch_defaults`; in the
        0.28.0 wheel, absent in 0.27.1; a 0.29.1 MI300X log's token count needs it)."""
        return self.at_least(0, 28)

    @property
    def auto_max_model_len(self) -> bool:
        """`--max-model-len -1` (and 'auto' in 0.33) auto-fit, from 0.14."""
        return self.at_least(0, 14)

    @property
    def kv_cache_dtypes(self) -> tuple[str, ...]:
        """The `--kv-cache-dtype` names the release's parser accepts: its `CacheDType`
        Literal (config/cache.py from 0.11, config/__init__.py in 0.10, config.py in
        0.8.5-0.9), before that the option's argparse choices (0.6-0.8 arg_utils.py), read in
        every wheel 0.6.0-0.33.0 (tools/vllm_patch_flags.py keeps the patches that differ):
        auto / fp8 / fp8_e4m3 / fp8_e5m2 to 0.9, + fp8_inc 0.10.0, + bfloat16 0.11.0,
        + fp8_ds_mla 0.11.1, + float16 0.18.0, + the quantized formats from 0.20
        (core/kvquant.py)."""
        names = ["auto", "fp8", "fp8_e4m3", "fp8_e5m2"]
        for name, since in (("fp8_inc", (0, 10)), ("bfloat16", (0, 11)),
                            ("fp8_ds_mla", (0, 11, 1)), ("float16", (0, 18))):
            if self.at_least(*since):
                names.append(name)
        if self.at_least(0, 20):
            from kvplan.core.kvquant import accepted  # the quantized formats (core/kvquant.py)

            names += accepted(self.at_least)
        return tuple(names)

    @property
    def modelopt_kv_auto(self) -> bool:
        """`auto` takes a ModelOpt checkpoint's KV scheme (`resolve_kv_cache_dtype_string`,
        `engine/arg_utils.py`: from 0.14.0, absent in the 0.13.0 wheel), from config.json's
        `quantization_config` or from hf_quant_config.json, which `get_config` folds into it
        and `_normalize_quantization_config` gives its 'modelopt' quant_method in place while
        the model config is built, before the resolver runs (review 27)."""
        return self.at_least(0, 14)

    def sparse_mla_kv(self, compute_capability: str, local_heads: int,
                      vendor: str = "nvidia") -> str:
        """Which requested KV dtypes DeepSeek-V3.2's sparse MLA stores as `fp8_ds_mla`
        (656 B per token per layer instead of 576 for plain fp8 or 1,152 for bf16):
        "auto+fp8" (both), "fp8" (fp8 values only) or "none".
        * 0.11.0 `DeepseekV32ForCausalLM.verify_and_update_config`: `auto` and fp8.
        * 0.11.1-0.17: the same hook converts fp8 values only (the 0.11.2-0.17.1 wheels).
        * 0.18+: the hook no longer converts; `MLAAttention` does when the backend is
          FLASHMLA_SPARSE. On SM100 FLASHINFER_MLA_SPARSE (plain fp8) comes first when a
          rank has <= 16 heads (0.18 `_get_backend_priorities`) and, from 0.19, for any
          fp8 cache whatever the head count (the 0.19-0.33 wheels); from 0.24 on SM12x
          FLASHINFER_MLA_SPARSE_SM120 converts `auto`, fp8 and fp8_e4m3
          (`_canonicalize_sparse_mla_kv_cache_dtype`, the 0.24-0.33 wheels).
        * ROCm from 0.18: ROCM_AITER_MLA_SPARSE keeps plain fp8
          (`_canonicalize_sparse_mla_kv_cache_dtype` converts for the CUDA sparse backends
          only; before 0.18 `RocmPlatform.get_attn_backend_cls` refused fp8).
        Sweep logs agree: V3.2 with `auto` at 0.16-0.19 on H200/B200 stores bf16, and an
        NVFP4 checkpoint's fp8 cache at TP8 on B200 with 0.18 is plain fp8."""
        if not self.at_least(0, 11, 1):
            return "auto+fp8"
        if not self.at_least(0, 18):
            return "fp8"
        if vendor == "amd":
            return "none"
        major = cc_major(compute_capability)
        if major == 10 and (self.at_least(0, 19) or local_heads <= 16):
            return "none"
        if major == 12 and self.at_least(0, 24):
            return "auto+fp8"
        return "fp8"

    def block_size_choices(self) -> tuple[int, ...]:
        """`--block-size` values argparse accepts (`CacheConfig.BlockSize` Literal): 8-128
        in 0.6, 1-128 from 0.8, 1-256 in 0.14; from 0.18 any int, checked by the backend.
        Empty = no fixed list."""
        if self.at_least(0, 18):
            return ()
        if self.at_least(0, 14):
            return (1, 8, 16, 32, 64, 128, 256)
        if self.at_least(0, 8):
            return (1, 8, 16, 32, 64, 128)
        return (8, 16, 32, 64, 128)

    @property
    def group_max_ratio(self) -> float | None:
        """Hybrid grouping: buckets under this multiple of the smallest share the largest's
        group size (`_get_kv_cache_groups_uniform_page_size`: 1.5 from 0.18, 1.25 in
        0.12-0.17, none before: the smallest bucket's count)."""
        if self.at_least(0, 18):
            return 1.5
        return 1.25 if self.at_least(0, 12) else None

    def mla_cache(self, quantization: str | None) -> bool:
        """Whether DeepSeek-V2/V3 keep an MLA (latent) cache: not before 0.7.1 (no MLA; a
        plain cache of every head); in 0.7.1-0.7.2 only unquantized or with fp8 /
        compressed-tensors ("MLA is not supported with %s quantization. Disabling MLA.",
        `ModelConfig.use_mla`); always from 0.7.3 (VLLM_MLA_DISABLE is not modelled)."""
        if self.at_least(0, 7, 3):
            return True
        return self.at_least(0, 7, 1) and quantization in (None, "fp8", "compressed-tensors")

    def mla_block_size(self, compute_capability: str, sparse: bool, *, fp8_kv: bool = False,
                       qk_nope: int = 128, vendor: str = "nvidia") -> int:
        """Block size of the default MLA backend (no --block-size). Read in the 0.8.5-0.33.0
        wheels with a helper: up to 0.17 `CudaPlatform.check_and_update_config` forces it;
        from 0.18 `Platform.update_block_size_for_backend` takes the chosen backend's
        `get_preferred_block_size(16)` (its smallest supported size when 16 is not one).
        * Hopper: 16 before 0.8 (Triton-MLA); FlashMLA's 64 from 0.8 to 0.17 (FA3-MLA runs on
          it from 0.12); from 0.18 FA3-MLA's 16 with a 16-bit cache and FlashMLA's 64 with fp8
          (FA3-MLA stores no fp8).
        * SM100: Triton-MLA's 16 to 0.10.0; CUTLASS-MLA's 128 on 10.0 from 0.10.1 (every 10.x from
          0.13); FlashInfer-MLA's 64 in 0.15-0.17 when qk_nope_head_dim is 128; from 0.18
          FlashInfer-MLA's 32 (its [32, 64]) for qk_nope 64 or 128 (and 192 from 0.19), else
          CUTLASS's 128.
        * Other NVIDIA (Ampere, Ada, SM12x) and ROCm: Triton-MLA's 16.
        * Sparse MLA (DeepSeek-V3.2, GLM-5): 64 (its indexer cache's backend); on ROCm 16
          from 0.18 (ROCM_AITER_MLA_SPARSE and the indexer list 1, [1, 64] or [1,
          MultipleOf(16)], so 16 is supported and kept); before it block 1 only
          (`RocmPlatform.get_attn_backend_cls` asserts it; sizing refuses other sizes).
        """
        if sparse:
            return 16 if vendor == "amd" and self.at_least(0, 18) else 64
        if vendor != "nvidia":
            return 16
        major, cc = cc_major(compute_capability), cc_tuple(compute_capability)
        if major == 9:  # FlashMLA from 0.8.0 (0.6-0.7 Triton-MLA or no MLA: the default 16)
            return 16 if self.at_least(0, 18) and not fp8_kv or not self.at_least(0, 8) else 64
        if major != 10 or not self.at_least(0, 10, 1):  # 0.10.0: CUTLASS-MLA only when asked
            return 16
        if self.at_least(0, 18):
            return 32 if qk_nope in ((64, 128, 192) if self.at_least(0, 19) else (64, 128)) \
                else 128
        if self.at_least(0, 15) and qk_nope == 128:
            return 64
        return 128 if cc == (10, 0) or self.at_least(0, 13) else 16

    def mla_forces_block(self, user_block: int, mla_block: int, compute_capability: str,
                         vendor: str) -> bool:
        """Up to 0.17 `check_and_update_config` forces the MLA backend's size over a
        --block-size that is not a multiple of it ("Forcing kv cache block size to 64 for
        FlashMLA backend"; FlashInfer-MLA keeps 32); 0.8-0.11 over any other size
        (`block_size != 64` / `!= 128`); from 0.18 the user's size is kept."""
        if vendor != "nvidia" or mla_block <= 16 or self.at_least(0, 18):
            return False
        if not self.at_least(0, 12):
            return user_block != mla_block
        return (user_block % mla_block != 0
                and not (user_block == 32 and mla_block == 64
                         and cc_major(compute_capability) == 10))


def fp8_fnuz(cc: str | None) -> bool:
    """MI300-series GPUs (gfx94x) use the fnuz FP8 format (`RocmPlatform.is_fp8_fnuz`)."""
    return str(cc or "").startswith("gfx94")


def cc_tuple(cc: str | None) -> tuple[int, int]:
    """(major, minor) of a compute capability string; (0, 0) when it is not one."""
    m = re.match(r"(\d+)\.(\d+)", cc or "")
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def cc_major(cc: str | None) -> int:
    """Major compute capability; AMD gfx9xx (CDNA, bf16 + fp8 capable) counts as 9."""
    text = str(cc or "")
    if text.startswith("gfx"):
        return 9
    try:
        return int(text.split(".")[0])
    except ValueError:
        return 0
