"""GPU memory of vLLM's LoRA adapter slots (`--enable-lora`).

vLLM wraps every linear layer (and, for models that declare `embedding_modules`, the
embedding and LM head) and gives each a zero-filled stack of `max_loras` adapter slots of rank
`max_lora_rank` in the model dtype (`vllm/lora/layers/*.py` `create_lora_weights`, called
from `LoRAModelManager._create_lora_modules` inside `GPUModelRunner.load_model`, so "Model
loading took" includes them). Per wrapped module and slot, per unit of rank:

* column-parallel (qkv, gate_up, q_b, kv_b, up): A holds the full input (one row per packed
  slice), B the rank's share of the output;
* row-parallel (o, down): A the rank's share of the input, B the full output (replicated on
  every TP rank unless `--fully-sharded-loras`, which also splits the column A by TP);
* replicated (MoE router, MLA q_a / kv_a): input + output;
* routed experts (0.12+, `FusedMoEWithLoRA`): per local expert, w13's A and B and w2's;
* embedding: A the full vocabulary, B the hidden size; LM head: the reverse.

Adapters registered with `--lora-modules` live in host memory until a request uses one, so
only `max_loras` and `max_lora_rank` matter at start-up. The profile run's dummy adapters are
built on the CPU, and the LoRA kernels' transient buffers (fp32 [slices, tokens, rank]) are
under 0.01 GiB for ranks up to 64, so neither is modelled.
"""

from __future__ import annotations

from collections.abc import Callable

from kvplan.core.arch import GDN, AttnLayer, ModelArch, StateLayer
from kvplan.core.params import count_params, mlp_intermediate, moe_gated
from kvplan.errors import BadInput

# LoRAConfig.max_lora_rank's allowed values (vllm/config/lora.py `MaxLoRARanks`; 1 from 0.12)
RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)

# architectures whose model class declares `embedding_modules`, so vLLM also wraps
# embed_tokens and lm_head (vLLM 0.33 `model_executor/models/*.py`; Qwen2, Gemma and, from
# 0.16, MistralForCausalLM do not)
EMBEDDING_LORA = frozenset({
    "ApertusForCausalLM", "Cohere2ForCausalLM", "CohereForCausalLM", "DeciLMForCausalLM",
    "Ernie4_5ForCausalLM", "Exaone4ForCausalLM", "ExaoneForCausalLM", "ExaoneMoEForCausalLM",
    "FalconH1ForCausalLM", "GraniteForCausalLM", "GraniteMoeForCausalLM",
    "GraniteMoeHybridForCausalLM", "GraniteMoeSharedForCausalLM", "InternLM3ForCausalLM",
    "JambaForCausalLM", "Lfm2ForCausalLM", "Lfm2MoeForCausalLM", "Llama4ForCausalLM",
    "LlamaForCausalLM", "MiniCPM3ForCausalLM", "MiniCPMForCausalLM", "MixtralForCausalLM",
    "NemotronForCausalLM", "NemotronHForCausalLM", "Phi3ForCausalLM", "PhiMoEForCausalLM",
    "Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM",
    "SolarForCausalLM",
    # multimodal wrappers whose language model declares them: `get_supported_lora_modules`
    # collects `embedding_modules` from every submodule (`lora/utils.py`, 0.12+)
    "Llama4ForConditionalGeneration", "Qwen3VLForConditionalGeneration",
    "Qwen3VLMoeForConditionalGeneration", "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MoeForConditionalGeneration"})

# MoE models whose experts are one fused 3D weight (`is_3d_moe_weight`): vLLM wraps them with
# `FusedMoE3DWithLoRA`, one w13 LoRA-A per expert instead of one each for w1 and w3
# (`LoRAModelManager._is_3d_moe_model`, 0.33 `lora/layers/fused_moe.py`)
THREE_D_MOE = frozenset({
    "GptOssForCausalLM", "InternS1ProForConditionalGeneration",
    "Qwen3OmniMoeThinkerForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration",
    "Qwen3_5MoeForConditionalGeneration"})


# generative architectures of vLLM 0.33's registry whose model classes are not SupportsLoRA
# (`model_executor/models/registry.py` and the classes' bases, `models/` included): vLLM
# refuses --enable-lora for them; releases before 0.33 are taken to support no more
NO_LORA = frozenset({
    "AriaForConditionalGeneration", "BailingMoeV2_5ForCausalLM", "BailingMoeV3ForCausalLM",
    "BailingMoeV3VLForConditionalGeneration", "BeamForCausalLM", "BeeForConditionalGeneration",
    "BloomForCausalLM", "Cohere2MoeForCausalLM", "Cohere2VisionForConditionalGeneration",
    "CohereAsrForConditionalGeneration", "Cosmos3EdgeForConditionalGeneration",
    "DbrxForCausalLM", "DeepseekV41ForCausalLM", "DeepseekVLV2ForCausalLM",
    "DomynEdgeForCausalLM", "DoryForCausalLM", "Dots3NoteForCausalLM", "FalconForCausalLM",
    "FalconMambaForCausalLM", "FireRedASR2ForConditionalGeneration", "FlintForCausalLM",
    "FunASRForConditionalGeneration", "FunAudioChatForConditionalGeneration",
    "GPTJForCausalLM", "Gemma3nForCausalLM", "Gemma3nForConditionalGeneration",
    "Glm5NextForCausalLM", "HCXVisionV2ForCausalLM", "HrmTextForCausalLM",
    "IQuestLoopCoderForCausalLM", "KananaVForConditionalGeneration",
    "KimiK25ForConditionalGeneration", "KimiK3ForConditionalGeneration",
    "KimiLinearForCausalLM", "KimiVLForConditionalGeneration",
    "LlavaOnevision2ForConditionalGeneration", "LlavaOnevisionForConditionalGeneration",
    "Mamba2ForCausalLM", "MambaForCausalLM", "MiMoV2FlashForCausalLM", "MiMoV2ForCausalLM",
    "MiMoV2OmniForCausalLM", "MiniMaxM3SparseForCausalLM",
    "MiniMaxM3SparseForConditionalGeneration", "Moondream3ForCausalLM",
    "MoonshotKimiaForCausalLM", "MossTranscribeDiarizeForConditionalGeneration",
    "NemotronParseForConditionalGeneration", "OrionForCausalLM", "Ovis2_6ForCausalLM",
    "Ovis2_6_MoeForCausalLM", "PaddleOCRVLForConditionalGeneration", "Phi3VForCausalLM",
    "Phi4ForCausalLMV", "Qwen2AudioForConditionalGeneration", "RForConditionalGeneration",
    "RadioMBartPrefixForCausalLM", "StableLmForCausalLM", "Step1ForCausalLM",
    "Step3TextForCausalLM", "Step3VLForConditionalGeneration", "Step3p5ForCausalLM",
    "Step3p7ForConditionalGeneration", "StepVLForConditionalGeneration", "Zamba2ForCausalLM"})


# the release whose model class first declares `embedding_modules`, where later than 0.12
# (qwen3.py, qwen3_moe.py from 0.16; qwen3_5.py from 0.29; the 0.12-0.33 wheels)
EMBEDDING_LORA_SINCE = {
    **dict.fromkeys(("Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "Qwen3VLForConditionalGeneration",
                     "Qwen3VLMoeForConditionalGeneration"), (0, 16)),
    **dict.fromkeys(("Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM",
                     "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"),
                    (0, 29))}


def embeddings_wrapped(architectures: list[str], release: tuple[int, int]) -> bool:
    """Whether vLLM wraps embed_tokens and lm_head (`EMBEDDING_LORA`, from the release in
    `EMBEDDING_LORA_SINCE`); MistralForCausalLM ran as LlamaForCausalLM before 0.15, whose
    own class declares none."""
    archs = set(architectures)
    return any(release >= EMBEDDING_LORA_SINCE.get(x, (0, 0)) for x in archs & EMBEDDING_LORA
               ) or (release < (0, 15) and "MistralForCausalLM" in archs)


def check_lora(arch: ModelArch, max_loras: int, rank: int, *, rank_one: bool,
               dsv4_lora: bool, old_ranks: bool = False, tp: int = 1, fully_sharded: bool = False,
               ep_fs_refused: bool = False, head_wrapped: bool = False,
               vocab_limit: int = 258048) -> None:
    """Raise BadInput for a LoRA set-up vLLM refuses (`dsv4_lora`: this release and GPU's
    DeepSeek-V4 class is SupportsLoRA, NVIDIA's from 0.29). Ranks: 8-256 to 0.7
    (`old_ranks`), 320 and 512 from 0.8, 1 from 0.11.1 (`rank_one`; `MaxLoRARanks`).
    * --fully-sharded-loras splits the rank over TP (`divide(max_lora_rank, tp_size)`);
    * with expert parallelism on a MoE model (`ep_fs_refused`: 0.21+ `_verify_ep_fs`);
    * an LM head under LoRA (`head_wrapped`) takes vocabularies up to `vocab_limit`
      (`LogitsProcessorWithLoRA.create_lora_weights`: 257,024 to 0.16, 258,048 from 0.17)."""
    if max_loras < 1:
        raise BadInput(f"--max-loras {max_loras} must be >= 1", flag="max_loras")
    allowed = RANKS if rank_one else RANKS[1:] if not old_ranks else RANKS[1:-2]
    if rank not in allowed:
        raise BadInput(f"--max-lora-rank {rank} is not one vLLM accepts",
                       hint="use one of " + ", ".join(map(str, allowed)), flag="max_lora_rank")
    if fully_sharded and rank % tp:
        raise BadInput(f"--fully-sharded-loras splits --max-lora-rank {rank} over "
                       f"{tp} GPUs, which vLLM requires to divide it",
                       hint=f"use a rank divisible by {tp}", flag="max_lora_rank")
    if fully_sharded and ep_fs_refused:
        raise BadInput("vLLM's fused-MoE LoRA does not support --enable-expert-parallel "
                       "together with --fully-sharded-loras",
                       hint="drop one of them", flag="fully_sharded_loras")
    if head_wrapped and arch.vocab_size > vocab_limit:
        raise BadInput(f"vLLM's LoRA LM head takes vocabularies up to {vocab_limit:,}; this "
                       f"model's is {arch.vocab_size:,}", hint="drop --enable-lora",
                       flag="enable_lora")
    dsv4 = any(isinstance(x, AttnLayer) and x.kind == "dsv4" for x in arch.layers)
    no = sorted(set(arch.architectures) & NO_LORA)
    if no or (dsv4 and not dsv4_lora):
        name = no[0] if no else "DeepSeek-V4 on this release and GPU (NVIDIA from 0.29)"
        raise BadInput(f"vLLM does not support LoRA for {name} (its model class is not "
                       "SupportsLoRA)", hint="drop --enable-lora", flag="enable_lora")


# `--lora-target-modules` (0.19+) names module suffixes; a packed module is wrapped when it
# or any of its parts is named (`lora/utils.py is_in_target_modules`). The categories kvplan
# counts, by the names that select them:
_CATEGORY = {
    **dict.fromkeys(("qkv_proj", "q_proj", "k_proj", "v_proj", "q_a_proj", "q_b_proj",
                     "kv_a_proj_with_mqa", "kv_b_proj", "fused_qkv_a_proj"), "qkv"),
    "o_proj": "o",
    **dict.fromkeys(("gate_up_proj", "gate_proj", "up_proj"), "gate_up"),
    "down_proj": "down",
    "gate": "router",
    **dict.fromkeys(("in_proj", "out_proj", "in_proj_qkvz", "in_proj_ba", "in_proj_qkv"),
                    "mixer"),
    "embed_tokens": "embed", "lm_head": "lm_head"}
# routed experts: the fused `experts` module, or their projections' names (an approximation)
_EXPERT_NAMES = frozenset({"experts", "gate_proj", "up_proj", "down_proj", "gate_up_proj"})


# the checkpoint names vLLM packs into one runtime module (qkv_proj, gate_up_proj)
PACKED_PARTS = frozenset({"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"})


def target_categories(targets: list[str] | tuple[str, ...] | None, *,
                      packed_parts: bool = True) -> frozenset[str] | None:
    """What `--lora-target-modules` wraps, as kvplan's categories (None: everything).
    `packed_parts` (0.20+, `is_in_target_modules`' `packed_modules_mapping`): a packed
    module's parts (q_proj, gate_proj, ...) select it; 0.19 matches the runtime module's own
    name only, so they select nothing."""
    if targets is None:
        return None
    names = {str(x).strip() for x in targets if str(x).strip()}
    if not packed_parts:
        names -= PACKED_PARTS
    cats = {_CATEGORY[n] for n in names if n in _CATEGORY}
    if names & _EXPERT_NAMES:
        cats.add("experts")
    return frozenset(cats)


def _attn_elems(t: dict, arch: ModelArch, x: AttnLayer, tp: int, fs: bool,
                want: Callable[[str], bool]) -> float:
    """A + B elements of one attention block's wrapped linears, per slot and unit of rank."""
    h, heads = arch.hidden_size, arch.num_attention_heads
    col_a = 1 / tp if fs else 1.0  # --fully-sharded-loras splits A of column layers
    row_b = 1 / tp if fs else 1.0  # ... and B of row layers
    if x.kind == "mla":
        nope, rope = int(t.get("qk_nope_head_dim") or 0), int(t.get("qk_rope_head_dim") or 0)
        v, kv_lora = int(t.get("v_head_dim") or nope), int(t["kv_lora_rank"])
        q_lora = int(t.get("q_lora_rank") or 0)
        qkv = (h + kv_lora + rope)  # kv_a (replicated)
        if q_lora:  # q_a (replicated) and q_b (column)
            qkv += h + q_lora + q_lora * col_a + heads * (nope + rope) / tp
        else:
            qkv += h * col_a + heads * (nope + rope) / tp
        qkv += kv_lora * col_a + heads * (nope + v) / tp  # kv_b (column)
        o = heads * v / tp + h * row_b  # o (row)
    else:
        gate = 2 if t.get("attn_output_gate") or t.get("attention_output_gate") else 1
        kv_local = max(1, x.num_kv_heads // tp)
        qkv = 3 * h * col_a + heads * x.head_size * gate / tp + kv_local * (
            x.head_size + x.head_size_v)
        o = heads * x.head_size_v / tp + h * row_b
    return qkv * want("qkv") + o * want("o")


def _gdn_extra(arch: ModelArch, x: StateLayer, tp: int, col_a: float) -> float:
    """What a Gated-DeltaNet layer's LoRA slots hold beyond one A for its in-projections:
    `MergedColumnParallelLinearWithLoRA` keeps an A per output slice, Qwen3.5/3.6's
    `in_proj_qkvz` has 4 (key, key, value, value) and `in_proj_ba` 2 (`create_qkvz_proj`,
    `gqa_interleaved_layout=False`; Qwen3-Next's interleaved projections have one each), and
    `conv1d` is a `ColumnParallelLinear` (conv kernel -> conv_dim), so it is wrapped too
    (`qwen_gdn_linear_attn.py`, the 0.20-0.33 wheels). Qwen3.5-27B: 35,836 elements a layer
    per slot and unit of rank."""
    conv_dim = 2 * x.k_heads * x.k_dim + x.v_heads * x.v_dim
    slices = 0 if arch.model_type.startswith("qwen3_next") else 5  # 6 A's, 1 counted
    return (slices * arch.hidden_size + x.d_conv) * col_a + conv_dim / tp


def lora_elems_per_stage(arch: ModelArch, stages: list[range], tp: int, ep: int, *,
                         fully_sharded: bool, experts: bool, embeddings: bool,
                         targets: frozenset[str] | None = None,
                         gdn_slices: bool = False) -> list[float]:
    """Slot elements on one GPU of each pipeline stage, per adapter slot and unit of rank.
    `experts`: routed experts are wrapped (0.12+); `embeddings`: embed_tokens / lm_head are;
    `targets`: `target_categories` of --lora-target-modules (None: every module);
    `gdn_slices`: Gated-DeltaNet in-projections take an A per packed slice and `conv1d` is
    wrapped (`_gdn_extra`, 0.20+)."""
    t, h = arch.text_config, arch.hidden_size
    pc = count_params(arch)
    col_a, row_b = (1 / tp, 1 / tp) if fully_sharded else (1.0, 1.0)
    s13 = 2 if moe_gated(arch) else 1
    three_d = bool(set(arch.architectures) & THREE_D_MOE)

    def want(cat: str) -> bool:
        return targets is None or cat in targets

    per_layer = []
    for x, lp in zip(arch.layers, pc.layers):
        n = 0.0
        if isinstance(x, AttnLayer) and x.kind != "dsv4":
            n += _attn_elems(t, arch, x, tp, fully_sharded, want)
        elif isinstance(x, AttnLayer) and want("qkv"):  # DeepSeek-V4's low-rank projections,
            attn = lp.split - lp.mlp - lp.state  # as one column and one row layer
            n += h * col_a + h * row_b + attn / h / tp  # (an approximation)
        mixer = lp.state  # Mamba / linear-attention in and out projections
        if (mixer or isinstance(x, StateLayer)) and want("mixer"):
            n += h * col_a + h * row_b + mixer / h / tp
            if gdn_slices and isinstance(x, StateLayer) and x.kind == GDN:
                n += _gdn_extra(arch, x, tp, col_a)
        inter = mlp_intermediate(arch, lp)
        if inter:  # dense MLP or shared expert: gate_up (column) and down (row)
            n += (s13 * h * col_a + s13 * inter / tp) * want("gate_up")
            n += (inter / tp + h * row_b) * want("down")
        if lp.expert:
            n += (h + arch.num_experts) * want("router")  # ReplicatedLinear
            if experts and want("experts"):
                moe_i = arch.moe_intermediate_size or arch.intermediate_size
                i_pp = moe_i if ep > 1 else moe_i / tp
                a13 = 1 if three_d else s13  # w13's LoRA-A: one for a fused 3D weight
                n += arch.num_experts / ep * (a13 * h * col_a + s13 * i_pp + i_pp + h * row_b)
        per_layer.append(n)
    out = [sum(per_layer[i] for i in rng) for rng in stages]
    if embeddings and want("embed"):
        out[0] += arch.vocab_size + h  # embedding: A [V, r], B [H, r]
    if embeddings and want("lm_head"):  # LM head: A [r, H], B [V, r], whole on every GPU
        out[-1] += h + arch.vocab_size  # (`LogitsProcessorWithLoRA` has no sharded form)
    return out


def graph_cases(v1_specialize: bool, *, v2: bool, at_least_012: bool, max_loras: int = 1,
                active_counts: bool = False) -> int:
    """CUDA graphs are captured once per LoRA case: with and without active adapters (0.11.1+
    `cudagraph_specialize_lora`, `cudagraph_dispatcher._get_lora_cases`; model runner V2
    always), once before 0.11.1 (`at_least_012`). `active_counts`
    (`--specialize-active-lora`, 0.16+, with `cudagraph_specialize_lora` on): no adapter,
    then every power of 2 of active adapters up to max_loras and max_loras + 1
    (`lora/utils.py` `get_captured_lora_counts`; V2's `get_lora_capture_cases`)."""
    if not at_least_012:
        return 1
    if active_counts and v1_specialize:
        return 1 + sum(1 for n in range(1, max_loras + 2)
                       if n & (n - 1) == 0 or n == max_loras + 1)
    return 2 if v2 or v1_specialize else 1
