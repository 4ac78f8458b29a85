"""Normalise a Hugging Face `config.json` into the per-layer facts vLLM sizes KV from.

Follows vLLM 0.33 `transformers_utils/model_arch_config_convertor.py` (head size, KV heads,
layer types), `config/model.py` (dtype, max length) and each model's own code for which layers
build an attention or state cache. An unclassifiable config raises `UnsupportedArchitecture`
naming the fields it lacks -- never a silent guess.
"""

from __future__ import annotations

import json
from dataclasses import field, replace
from functools import cached_property
from typing import Any

from kvplan.core.config_types import check_field_types
from kvplan.core.memo import by_identity
from kvplan.core.record import record
from kvplan.errors import BadInput, UnsupportedArchitecture

# Layer kinds that own KV/state memory.
FULL, SLIDING, CHUNKED, MLA, CROSS = "full", "sliding", "chunked", "mla", "cross"
DSV4 = "dsv4"  # DeepSeek-V4: sliding-window MLA + compressed KV (+ indexer, compressor states)
MAMBA1, MAMBA2, GDN, KDA, SHORTCONV = "mamba1", "mamba2", "gdn", "kda", "shortconv"
LIGHTNING = "lightning"  # MiniMax-style lightning (linear) attention: one [heads, D, D] state
ATTENTION_KINDS = (FULL, SLIDING, CHUNKED, MLA, CROSS, DSV4)
STATE_KINDS = (MAMBA1, MAMBA2, GDN, KDA, SHORTCONV, LIGHTNING)


@record(frozen=True)
class AttnLayer:
    """One attention layer that owns a KV cache (before any parallel split)."""

    kind: str  # full | sliding | chunked | mla | cross
    num_kv_heads: int  # total KV heads (MLA: 1, never split)
    head_size: int  # K head size (MLA: kv_lora_rank + qk_rope_head_dim)
    head_size_v: int  # V head size (MLA: 0 -- one latent vector)
    window: int = 0  # sliding window or attention chunk size (tokens)
    indexer_bytes: int = 0  # DeepSeek-V3.2 sparse indexer cache, bytes/token (uint8)
    encoder_len: int = 0  # cross-attention: encoder tokens per request
    parallel_state: StateLayer | None = None  # Falcon-H1: a Mamba2 mixer beside attention
    compress_ratio: int = 0  # DeepSeek-V4: 1 = sliding window only, 4 = C4 (+ indexer), 128


@record(frozen=True)
class StateLayer:
    """One Mamba / linear-attention layer: a fixed recurrent state per request."""

    kind: str  # mamba1 | mamba2 | gdn | kda | shortconv | lightning
    # mamba1/mamba2: intermediate = expand*hidden (or heads*head_dim); shortconv: the conv
    # width (hidden); lightning: n_heads x head_dim; gdn/kda: the fields below
    intermediate: int = 0
    d_state: int = 0
    d_conv: int = 0
    n_groups: int = 0
    n_heads: int = 0
    head_dim: int = 0
    # the conv state does not widen with speculative tokens (PLaMo2's own mixer calls
    # `mamba2_state_shape` without num_spec)
    fixed_conv: bool = False
    # gated delta-net / Kimi delta attention
    k_heads: int = 0
    k_dim: int = 0
    v_heads: int = 0
    v_dim: int = 0


Layer = AttnLayer | StateLayer | None  # None: no cache (MLP-only, KV shared, attention-free)


@record
class ModelArch:
    """What sizing needs to know about a model, independent of GPU and flags."""

    model_type: str
    architectures: list[str]
    layers: list[Layer]
    num_attention_heads: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    config_dtype: str  # as written in the config ('bfloat16', 'float32', ...) or 'auto'
    max_position: int  # vLLM's derived max_model_len (before user override)
    max_position_source: str
    tie_word_embeddings: bool = False
    num_experts: int = 0
    experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    ssm_state_dtype: str | None = None  # model-default Mamba SSM state dtype override
    # Kimi-K3's KDA layers (`use_full_rank_gate` + `gate_lower_bound`): `KimiK3DeltaAttention`,
    # whose prefill may run FlashKDA (`is_flashkda_supported`)
    kda_gate_bound: bool = False
    # the GDN layers run FlashInfer's prefill with a checkpoint state (Qwen's GDN,
    # `QwenGatedDeltaNetAttention.get_prefill_checkpoint_alignment`, 0.33); OLMo's does not
    gdn_flashinfer_checkpoint: bool = False
    # the KDA recurrent state's dtype whatever --mamba-ssm-cache-dtype says (AliceAI calls
    # `kda_state_dtype` without the flag: float32)
    kda_state_fixed: str | None = None
    # the model class lacks `SupportsMambaPrefixCaching` (PLaMo2): 0.12-0.14 turn prefix caching
    # off, 0.15-0.27 use 'align' mode, as for the non-Mamba states
    mamba_prefix_unsupported: bool = False
    # layers from this index are caches of a later loop over the first ones' weights
    # (IQuest-LoopCoder: `loop_num` caches per layer); 0: every layer has its own weights
    loop_caches_from: int = 0
    sliding_all_layers: int = 0  # window copied to cache_config.sliding_window (Mistral-v0.1)
    # keys the config lacked that kvplan filled from the transformers class (`_TYPE_DEFAULTS`),
    # and whether the sliding/full plan is the class's own (no layer_types): releases that
    # load vLLM's own config class differ there (`release_layers`)
    defaulted: frozenset[str] = frozenset()
    built_plan: bool = False
    # granite-4.0-h / Nemotron-H blocks named as transformers 5.18+ saves them
    new_layer_names: bool = False
    # a multimodal wrapper's own tie flag (its config.json key, else its transformers-5 class
    # default), which vLLM 0.19.1+ copy into the text config (`release_tie`), and the text
    # config's own key
    root_tie: bool | None = None
    text_tie: bool | None = None
    is_mla: bool = False
    is_sparse_mla: bool = False  # DeepSeek-V3.2-style (fp8_ds_mla / indexer)
    kernel_block_size: int = 0  # the only block size the model's attention backend supports
    packed_kv: bool = False  # block-outermost KV layout: `_get_packed_kv_cache_groups`
    quantization: dict[str, Any] | None = None
    text_config: dict[str, Any] = field(default_factory=dict)
    vision_config: dict[str, Any] | None = None
    # images attend bidirectionally to their prefix (`is_mm_prefix_lm`, 0.29-0.33
    # model_arch_config_convertor.py): vLLM then prefers a Triton composite backend
    mm_prefix_lm: bool = False
    audio_config: dict[str, Any] | None = None
    # the text-side projector of a LLaVA-style wrapper (`mm_projector`): kind, input width,
    # bias, spatial merge, image-newline parameter
    mm_projector: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @cached_property
    def kinds(self) -> set[str]:
        return {layer.kind for layer in self.layers if layer is not None}

    @cached_property
    def state_kinds(self) -> set[str]:
        """Kinds of the per-request states, Falcon-H1's parallel Mamba2 mixers included."""
        return {x.kind for x in self.layers if isinstance(x, StateLayer)} | {
            x.parallel_state.kind for x in self.layers
            if isinstance(x, AttnLayer) and x.parallel_state is not None}

    @cached_property
    def attn_head_sizes(self) -> frozenset[int]:
        """The head sizes of the attention layers (Gemma 4: 256 and 512)."""
        return frozenset(x.head_size for x in self.layers if isinstance(x, AttnLayer))

    @property
    def indexer_bytes(self) -> int:
        """A sparse-MLA indexer's key bytes a token, on the layers that build one (0 without;
        IndexCache skips some layers from vLLM 0.24, `indexer_layers`)."""
        return max((getattr(x, "indexer_bytes", 0) for x in self.layers), default=0)

    @property
    def attention_sinks(self) -> bool:
        """Learned attention sinks (gpt-oss), which some attention backends refuse."""
        return self.model_type == "gpt_oss"

    @property
    def attention_free(self) -> bool:
        """vLLM's attention-free classes (`IsAttentionFree`: Mamba, Mamba2, FalconMamba); a
        hybrid whose pattern happens to hold no attention layer is still a hybrid."""
        return self.model_type in ("mamba", "mamba2", "falcon_mamba")

    @property
    def is_hybrid_state(self) -> bool:
        return bool(self.state_kinds)

    @property
    def half_block_layers(self) -> bool:
        """Each config layer is a mixer or an FFN alone, half a transformer block:
        Nemotron-H's `hybrid_override_pattern` (M, *, - and E layers)."""
        return self.model_type == "nemotron_h"

    @property
    def expert_intermediate_size(self) -> int:
        """One routed expert's intermediate size (the MLP's when the config gives none)."""
        return (self.moe_intermediate_size or self.intermediate_size) if self.num_experts else 0

    @property
    def family_label(self) -> str:
        k = self.kinds
        parts = []
        if DSV4 in k:
            parts.append("DeepSeek-V4 sliding-window + compressed MLA")
        if MLA in k:
            parts.append("MLA" + (" + sparse indexer" if self.is_sparse_mla else ""))
        if FULL in k:
            parts.append("full attention")
        if any(isinstance(x, AttnLayer) and x.kind not in (MLA, DSV4) and x.indexer_bytes
               for x in self.layers):
            parts.append("sparse index cache")
        if SLIDING in k:
            parts.append("sliding window")
        if CHUNKED in k:
            parts.append("chunked local attention")
        if CROSS in k:
            parts.append("cross attention")
        for s in STATE_KINDS:
            if s in self.state_kinds:
                parts.append({"mamba1": "Mamba1", "mamba2": "Mamba2", "gdn": "Gated DeltaNet",
                              "kda": "Kimi Delta Attention",
                              "shortconv": "short convolution",
                              "lightning": "lightning attention"}[s])
        if not parts:
            parts.append("attention-free")
        return " + ".join(parts)


# --- config helpers -------------------------------------------------------------------------

# Keys transformers' config classes default when a compact config.json omits them. Only
# values that change sizing, per model_type (transformers `configuration_*.py` defaults).
_TYPE_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma": {"head_dim": 256, "max_position_embeddings": 8192},
    "gemma2": {"head_dim": 256, "sliding_window": 4096,
               "max_position_embeddings": 8192, "vocab_size": 256000},
    "gemma3_text": {"head_dim": 256, "sliding_window": 4096,
                    "sliding_window_pattern": 6, "max_position_embeddings": 131072,
                    "vocab_size": 262208,
                    "num_key_value_heads": 4, "num_attention_heads": 8,
                    "rope_local_base_freq": 10000.0},
    "mistral": {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
                "max_position_embeddings": 4096 * 32, "sliding_window": 4096},
    "llama": {"max_position_embeddings": 2048},
    # transformers' class-default windows, which their layer plans (`_built_plan`) use
    "olmo3": {"sliding_window": 4096}, "cohere2": {"sliding_window": 4096},
    "exaone4": {"sliding_window": 4096}, "exaone_moe": {"sliding_window": 4096},
    "vaultgemma": {"sliding_window": 4096}, "cwm": {"sliding_window": 8192},
    "gemma3n_text": {"sliding_window": 512}, "gpt_oss": {"sliding_window": 128},
    "gemma4_text": {"sliding_window": 512}, "afmoe": {"sliding_window": 1024},
    "granite_swa": {"sliding_window": 128}, "granitemoe_swa": {"sliding_window": 128},
    "kolibri1": {"sliding_window": 513}, "muse_glimmer_text": {"sliding_window": 2048},
    # vLLM `Qwen3NextAttention`: `getattr(config, "attn_output_gate", True)` (Qwen3.5/3.6 reuse it)
    "qwen3_next": {"attn_output_gate": True},
    "qwen3_5_text": {"attn_output_gate": True},
    "qwen3_5_moe_text": {"attn_output_gate": True},
}

# vLLM picks the model class by architecture, and a remote-code config class carries its own
# model_type, so a config.json can omit the key (Edge0's BailingMoeV3 checkpoint). kvplan
# dispatches on model_type: the architectures whose layers or weights it reads by type.
_TYPE_OF_ARCH = {
    "BailingMoeV2_5ForCausalLM": "bailing_hybrid", "BailingMoeV3ForCausalLM": "bailing_hybrid",
    "BailingMoeV3VLForConditionalGeneration": "bailing_hybrid",
    "JambaForCausalLM": "jamba", "NemotronHForCausalLM": "nemotron_h",
    "FalconH1ForCausalLM": "falcon_h1", "GraniteMoeHybridForCausalLM": "granitemoehybrid",
    "BambaForCausalLM": "bamba", "Zamba2ForCausalLM": "zamba2", "MambaForCausalLM": "mamba",
    "FalconMambaForCausalLM": "falcon_mamba", "Mamba2ForCausalLM": "mamba2",
    "Qwen3NextForCausalLM": "qwen3_next", "Lfm2ForCausalLM": "lfm2",
    "Lfm2MoeForCausalLM": "lfm2_moe", "Plamo2ForCausalLM": "plamo2",
    "OlmoHybridForCausalLM": "olmo_hybrid", "AliceAIForCausalLM": "alice_ai",
    "MiniCPM3ForCausalLM": "minicpm3", "MiniMaxForCausalLM": "minimax",
    "MiniMaxText01ForCausalLM": "minimax_text_01", "MiniMaxM1ForCausalLM": "minimax_m1",
    "CohereForCausalLM": "cohere", "Cohere2ForCausalLM": "cohere2",
    "Starcoder2ForCausalLM": "starcoder2", "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3_text", "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3", "DeepseekV32ForCausalLM": "deepseek_v32",
}

# Model types whose config class defaults tie_word_embeddings to True: transformers' classes
# instantiated without arguments in 4.57.6 and 5.24.0 (the decoder models vLLM serves; csm,
# qwen2_5_omni and qwen3_vl_moe, True in 5.x only, are left out), and the remote-code classes
# of MiniCPM3 (native from transformers 5) and PLaMo2. transformers saves a config without
# the key when it holds that default (`to_diff_dict`), so StarCoder2, Cohere2 and MiniCPM3
# checkpoints are tied though their config.json never says so.
TIED_BY_DEFAULT = frozenset({
    "bloom", "cohere", "cohere2", "cohere2_moe", "ernie4_5", "ernie4_5_moe", "ernie4_5_vl_moe",
    "ernie4_5_vl_moe_text", "falcon", "falcon_mamba", "gemma", "gemma2", "gemma3",
    "gemma3_text", "gemma3n", "gemma3n_text", "gemma4", "gemma4_text", "gemma4_unified",
    "gemma4_unified_text", "diffusion_gemma", "diffusion_gemma_text", "got_ocr2", "gpt2",
    "gpt-sw3", "gpt_bigcode", "gpt_neo", "gpt_neox_japanese", "granite_docling_text",
    "granite_swa", "hunyuan_vl", "hunyuan_vl_text", "jetmoe", "lfm2", "lfm2_moe", "lfm2_vl",
    "lfm3", "lfm3_vl", "mamba", "minicpm3", "mpt", "opt", "paddleocr_vl", "paddleocr_vl_text",
    "paligemma", "plamo2", "recurrent_gemma", "smollm3", "starcoder2", "vaultgemma",
    "xglm", "youtu", "zamba", "zamba2", "zaya",
})
# model files that tie whatever the config says (review 27): commandr.py / cohere2_moe.py compute
# the logits from embed_tokens (asserting the flag through 0.28), lfm2.py / lfm2_moe.py tie
# unconditionally, gemma2.py (asserting the flag through 0.28) and gemma3n.py use embed_tokens
_ALWAYS_TIED = frozenset({"cohere", "cohere2", "cohere2_moe", "lfm2", "lfm2_moe", "gemma2",
                          "gemma3n", "gemma3n_text"})

# wrappers whose language model vLLM builds through `init_vllm_registered_model` /
# `with_hf_config`, which copies the wrapper's tie flag into the text config (review 27)
_COPIES_ROOT_TIE = frozenset({"gemma3", "llava", "llava_next", "internvl", "mistral3",
                              "pixtral", "paligemma", "qwen2_vl", "qwen2_5_vl", "qwen3_vl",
                              "qwen3_vl_moe", "lighton_ocr", "glmasr", "granite_speech",
                              "granite_speech_plus", "hyperclovax_vision_v2"})
# those whose transformers-5 class default for the flag differs from their text config's
# (each class instantiated without arguments, 5.24.0), used when config.json omits it
_ROOT_TIE_5X = {"mistral3": True, "internvl": True, "granite_speech": True,
                "granite_speech_plus": True, "lighton_ocr": True, "glmasr": True,
                "hyperclovax_vision_v2": True, "qwen3_vl_moe": False}
# model files asserting tie_word_embeddings (an explicit false stops the start): from, until
_ASSERTS_TIE = {"gemma": ((0, 6), (0, 29)), "gemma2": ((0, 6), (0, 29)),
                "cohere": ((0, 6), (0, 29)), "cohere2": ((0, 6), (0, 29)),
                "mpt": ((0, 6), (0, 29)), "cohere2_moe": ((0, 21), (0, 29)),
                "gemma3_text": ((0, 8), (0, 14))}
# ... and asserting it false (gpt_j.py `assert not config.tie_word_embeddings`, 0.6-0.33)
_ASSERTS_UNTIED = {"gptj": ((0, 6), (0, 34))}


def release_tie(arch: ModelArch, v: tuple[int, ...]) -> bool:
    """The tie flag vLLM builds the language model with. A wrapper in `_COPIES_ROOT_TIE`
    imposes its own flag (its transformers-5 class default when config.json omits it) from
    0.24 (`VllmConfig.with_hf_config`; 0.19.1-0.23 only under transformers 5, which a 0.20.0
    H200 start of Ministral-3-14B did not have: it loaded the untied head; vLLM issue
    51063: Mistral-Small-3.x tied); from 0.29 `maybe_untie_word_embeddings` unties a True
    one again when the checkpoint ships an lm_head, which an untied text config says it does.
    The text config's flag otherwise. The flag a model file asserts (`_ASSERTS_TIE`) being
    false, or true where it asserts an untied head (`_ASSERTS_UNTIED`), is refused."""
    mt, copied = arch.model_type, arch.root_tie is not None and v >= (0, 24)
    seen = arch.root_tie if copied else arch.text_tie
    span = _ASSERTS_TIE.get(mt)
    if span and span[0] <= v < span[1] and seen is False:
        raise BadInput(f"{mt}: vLLM {'.'.join(map(str, v))} asserts tie_word_embeddings, which "
                       "this config sets false (AssertionError at model build)",
                       hint="drop the key (the checkpoint is tied) or use vLLM 0.29+")
    span = _ASSERTS_UNTIED.get(mt)
    if span and span[0] <= v < span[1] and seen is True:
        raise BadInput(f"{mt}: vLLM {'.'.join(map(str, v))} asserts an untied LM head, which "
                       "this config ties (AssertionError at model build)",
                       hint="drop tie_word_embeddings (the checkpoint ships its lm_head)")
    if mt in _ALWAYS_TIED or not copied:
        return arch.tie_word_embeddings
    if not arch.root_tie:
        return False
    return arch.tie_word_embeddings if v >= (0, 29) else True


# transformers' config class defaults (4.57 configuration_llama.py / configuration_qwen2.py) for
# a wrapper's text config, which `to_diff_dict` saves without its default values (LLaVA-1.5's
# text_config names only its length, vocabulary and dtype); a top-level config.json with keys
# missing is refused instead
_WRAPPED_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
              "num_hidden_layers": 32, "num_attention_heads": 32},
    "qwen2": {"vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016,
              "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
              "max_position_embeddings": 32768},
}

MAX_LEN_KEYS = (
    "max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
    "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len",
)
# rope types whose factor is NOT applied to the derived length (vLLM config/model.py
# `_get_and_verify_max_len`).
_ROPE_NO_SCALE = {"su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling",
                  "mrope", "default", "proportional"}

_MLA_TYPES = {"deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "kimi_vl", "glm_moe_dsa",
              "deepseek_mtp", "glm4_moe_lite", "longcat_flash", "mistral_large_3", "bailing_moe_v2"}


def _loads(v: Any) -> Any:
    """Some exported configs hold JSON strings where objects belong; decode them."""
    if isinstance(v, str) and v[:1] in "[{":
        try:
            return json.loads(v)
        except ValueError:
            return v
    return v


def inner_text_config(config: dict[str, Any]) -> dict[str, Any] | None:
    """A wrapper's language-model config as config.json holds it (None: not a wrapper).

    Qwen2.5-Omni / Qwen3-Omni / Qwen3-ASR: `get_text_config` is the thinker's (vLLM builds
    the thinker only); other wrappers name it `text_config`, `llm_config`, ...
    """
    thinker = config.get("thinker_config")
    if isinstance(thinker, dict) and isinstance(thinker.get("text_config"), dict):
        return thinker["text_config"]
    return next((config[k] for k in ("text_config", "llm_config", "language_config",
                                     "text_model_config") if isinstance(config.get(k), dict)),
                None)


def text_config_of(config: dict[str, Any]) -> dict[str, Any]:
    """The language-model part: `text_config` / `llm_config` of multimodal wrappers.

    vLLM: `hf_config.get_text_config()` (transformers_utils/config.py `get_hf_text_config`).
    Keys of the wrapper the text config lacks (dtype, quantization) are inherited.
    """
    # `get_torch_dtype` / `_find_dtype`: the root config's dtype first, then the text config's
    # (0.8.1-0.8.4 and 0.9+; 0.6-0.8.0 read the text config's alone, 0.8.5 it first: the
    # label differs, `auto`'s 2 bytes do not)
    root_dtype = next((config[k] for k in ("dtype", "torch_dtype") if config.get(k) is not None),
                      None)
    inner = inner_text_config(config)
    thinker = config.get("thinker_config")
    if isinstance(thinker, dict) and inner is thinker.get("text_config"):
        # Qwen2.5-Omni / Qwen3-Omni / Qwen3-ASR: the thinker's quantization comes first (the
        # root's dtype, above)
        config = {**config, **{k: v for k, v in thinker.items() if k != "text_config"}}
    if inner is None:
        t = dict(config)
    else:
        t = dict(inner)
        for k in ("torch_dtype", "dtype", "quantization_config", "tie_word_embeddings",
                  "max_position_embeddings"):
            if k not in t and k in config:
                t[k] = config[k]
        t.setdefault("architectures", config.get("architectures", []))
        if root_dtype is not None:
            t["dtype"] = t["torch_dtype"] = root_dtype
    mt = t.get("model_type")
    if mt is None:
        t.pop("model_type", None)  # null reads as absent
        mt = next((_TYPE_OF_ARCH[a] for a in t.get("architectures") or []
                   if isinstance(a, str) and a in _TYPE_OF_ARCH), None)
        if mt:
            t["model_type"] = mt
    for k, v in (_TYPE_DEFAULTS.get(mt, {}) if isinstance(mt, str) else {}).items():
        t.setdefault(k, v)
    if inner is not None and isinstance(mt, str):
        for k, v in _WRAPPED_DEFAULTS.get(mt, {}).items():
            t.setdefault(k, v)
    return {k: _loads(v) for k, v in t.items()}


def _req(t: dict[str, Any], *keys: str, what: str | None = None) -> Any:
    for k in keys:
        if t.get(k) is not None:
            return t[k]
    mt = t.get("model_type", "?")
    raise UnsupportedArchitecture(
        f"config of model_type {mt!r} lacks {what or ' / '.join(keys)}",
        hint="pass a complete config.json or add the field to the catalog entry",
    )


def _int(t: dict[str, Any], *keys: str, default: int | None = None) -> int:
    for k in keys:
        v = t.get(k)
        if v is not None:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise BadInput(f"config field {k!r} must be a non-negative number, got {v!r}")
            return int(v)
    if default is not None:
        return default
    return int(_req(t, *keys))


_KV_HEAD_KEYS = ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num",
                 "num_attention_groups")


def _check_kv_heads(arch: ModelArch, t: dict[str, Any]) -> None:
    """Refuse KV heads vLLM builds no attention layer for: 0 (llama.py `LlamaAttention`'s
    `tp_size % total_num_kv_heads`, a ZeroDivisionError) or a count that does not divide the
    query heads (`Attention.__init__`: "num_heads (32) is not divisible by num_kv_heads (64)",
    asserted per rank in every release 0.6-0.33, which holds at every TP exactly when the
    totals divide)."""
    heads = arch.num_attention_heads
    key = next((k for k in _KV_HEAD_KEYS if t.get(k) is not None), "num_key_value_heads")
    for i, x in enumerate(arch.layers):
        if not isinstance(x, AttnLayer):
            continue
        kv = x.num_kv_heads
        if kv < 1:
            raise BadInput(f"config gives 0 KV heads ({key}, layer {i}): vLLM's attention "
                           "layer divides by the count (ZeroDivisionError)",
                           hint="give the model's KV head count, 1 or more")
        if heads and heads % kv:
            raise BadInput(f"config gives {kv} KV heads ({key}, layer {i}) for {heads} "
                           f"attention heads: vLLM refuses them ('num_heads ({heads}) is not "
                           f"divisible by num_kv_heads ({kv})')",
                           hint="the KV heads must divide the attention heads")


def tp_refusal(arch: ModelArch, tp: int) -> str | None:
    """Why vLLM cannot build `arch` at tensor-parallel size `tp` (None when it can): the query
    heads must divide (`ModelConfig.verify_with_parallel_config`), and every attention layer's
    KV heads must split evenly below `tp` or replicate evenly from it (`QKVParallelLinear`:
    `divide(total_num_kv_heads, tp)` / `divide(tp, total_num_kv_heads)`, whose assert says
    "8 is not divisible by 5"; 0.6-0.33). MLA keeps one latent on every rank: exempt. A
    Mamba2 mixer's heads must split evenly, and its groups too unless there is one."""
    heads = arch.num_attention_heads
    if heads and heads % tp:
        return f"{heads} attention heads are not divisible by {tp}"
    for kv in sorted({x.num_kv_heads for x in arch.layers if isinstance(x, AttnLayer)
                      and x.kind not in (MLA, DSV4)}):
        a, b = (kv, tp) if tp < kv else (tp, kv)
        if a % b:
            return f"its {kv} KV heads neither split nor replicate evenly over {tp} GPUs " \
                f"('{a} is not divisible by {b}')"
    if LIGHTNING in arch.state_kinds and arch.model_type == "bailing_hybrid":
        # `BailingMoELinearAttention.__init__` asserts tp <= group_norm_size and that it
        # divides it (0.17-0.33; the config class defaults the size to 1)
        gns = arch.text_config.get("group_norm_size")
        gns = 1 if gns is None else int(gns)
        if gns <= 0 or tp > gns or gns % tp:
            return f"its lightning attention's group_norm_size {gns} is not a multiple of {tp}"
    for s in {x for x in arch.layers if isinstance(x, StateLayer) and x.kind in (GDN, KDA)}:
        # `gated_delta_net_state_shape` / `kda_state_shape`: divide(v heads, tp) and the conv
        # width divide(2 k_heads k_dim + v_heads v_dim, tp)
        if s.v_heads % tp or (2 * s.k_heads * s.k_dim + s.v_heads * s.v_dim) % tp:
            return f"its linear-attention layers' {s.v_heads} heads do not split over {tp} " \
                f"('{s.v_heads} is not divisible by {tp}')"
    # `MambaMixer2.__init__` asserts (0.7-0.33): heads split evenly; groups too, or one group
    # replicated on every rank
    for m in {x if isinstance(x, StateLayer) else x.parallel_state for x in arch.layers
              if isinstance(x, StateLayer) or isinstance(x, AttnLayer) and x.parallel_state}:
        if m.kind != "mamba2":
            continue
        if m.n_heads % tp:
            return f"its Mamba2 mixer's {m.n_heads} heads are not divisible by {tp} " \
                "('Tensor parallel world size must divide num heads')"
        if m.n_groups % tp and m.n_groups != 1:
            return f"its Mamba2 mixer's {m.n_groups} groups are not divisible by {tp} " \
                "('If tensor parallel world size does not divide num_groups, then " \
                "num_groups must equal 1')"
    return None


def valid_tps(arch: ModelArch, upto: int = 16) -> list[int]:
    """The tensor-parallel sizes up to `upto` vLLM can build `arch` at."""
    return [tp for tp in range(1, upto + 1) if tp_refusal(arch, tp) is None]


def total_kv_heads(t: dict[str, Any]) -> int:
    """vLLM `get_total_num_kv_heads` incl. Falcon / GPTBigCode multi_query and aliases."""
    mt = t.get("model_type", "")
    falcon = mt in ("falcon", "RefinedWeb", "RefinedWebModel")
    if falcon and not t.get("new_decoder_architecture", False) and t.get("multi_query", False):
        return 1
    if mt == "gpt_bigcode" and t.get("multi_query", False):
        return 1
    if isinstance(t.get("attn_config"), dict) and "kv_n_heads" in t["attn_config"]:
        return int(t["attn_config"]["kv_n_heads"])  # DBRX / MPT
    for k in ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num",
              "num_attention_groups"):
        if t.get(k) is not None:
            return int(t[k])
    return _int(t, "num_attention_heads", "n_head", "num_heads")


# model files whose attention takes hidden // heads whatever the config's head_dim says
# (0.33 `self.head_dim = hidden_size // self.total_num_heads`: qwen2.py, qwen2_moe.py, olmoe.py,
# granitemoe.py, internlm2.py, minicpm.py, orion.py, stablelm.py, lfm2.py, lfm2_moe.py,
# jamba.py, granitemoehybrid.py, step1.py)
_HIDDEN_OVER_HEADS = frozenset({"qwen2", "qwen2_moe", "olmoe", "granitemoe", "internlm2",
                                "minicpm", "orion", "stablelm", "lfm2", "lfm2_moe", "jamba",
                                "granitemoehybrid", "step1",
                                # their attention classes reused (review 27): granitemoeshared
                                # .py's GraniteMoeAttention, mimo.py's and the Qwen2-VL /
                                # Qwen2.5-VL / Qwen2.5-Omni language models' Qwen2 layers
                                "granitemoeshared", "granitemoe_swa", "mimo", "qwen2_vl",
                                "qwen2_vl_text", "qwen2_5_vl", "qwen2_5_vl_text",
                                "qwen2_5_omni_text", "qwen2_5_omni_thinker"})


def head_size(t: dict[str, Any]) -> int:
    """vLLM `get_head_size`: head_dim if present and >0, else hidden // heads (always the
    latter for `_HIDDEN_OVER_HEADS`)."""
    for k in ("head_dim", "hidden_size_per_head", "attention_head_dim"):
        v = t.get(k)
        if isinstance(v, int) and v > 0 and t.get("model_type") not in _HIDDEN_OVER_HEADS:
            return v
    hidden = _int(t, "hidden_size", "n_embd", "d_model")
    heads = _int(t, "num_attention_heads", "n_head", "num_heads")
    if heads == 0 or hidden % heads:
        raise UnsupportedArchitecture(
            f"cannot derive head size: hidden_size {hidden} is not a multiple of "
            f"num_attention_heads {heads} and no head_dim is given")
    return hidden // heads


def max_model_len_of(t: dict[str, Any], *, yarn_from_original: bool = False,
                     model_max_length_wins: bool = True) -> tuple[int, str]:
    """vLLM `_get_and_verify_max_len`: min over the length keys, then rope scaling.
    `yarn_from_original` (before 0.30): YaRN scales original_max_position_embeddings by its
    factor, and only su / longrope / llama3 leave the length as it is; 0.30 (read in the
    0.30-0.33 wheels) takes YaRN's max_position_embeddings as already scaled.
    `model_max_length_wins` (0.8.3+, "For Command-R / Cohere, Cohere2 models"): a config's
    model_max_length replaces the minimum instead of joining it."""
    found = [(int(t[k]), k) for k in MAX_LEN_KEYS if isinstance(t.get(k), (int, float))]
    if not found:
        return 2048, "no length field in config (vLLM's 2048 default)"
    length, key = min(found)
    if length < 1:  # vLLM would derive a max_model_len of 0 and start nothing
        raise BadInput(f"config field '{key}' is {t[key]!r}: a model's length must be "
                       "positive", hint="fix the config, or give --hf-overrides a length")
    mml = t.get("model_max_length")
    if model_max_length_wins and isinstance(mml, (int, float)) and not isinstance(mml, bool) \
            and mml > 0:
        length, key = int(mml), "model_max_length"
    no_scale = {"su", "longrope", "llama3"} if yarn_from_original else _ROPE_NO_SCALE
    # `rope_scaling`, or transformers 5's `rope_parameters` (vLLM `patch_rope_parameters`),
    # which may hold one dict per layer type ("assumes all layer types have the same
    # scaling factor")
    field = "rope_scaling" if t.get("rope_scaling") else "rope_parameters"
    rs = t.get(field) or {}
    if isinstance(rs, dict) and rs and all(isinstance(v, dict) for v in rs.values()):
        rs = next((v for v in rs.values() if v.get("factor") and v.get(
            "rope_type", v.get("type", "")) not in no_scale), {})
    if isinstance(rs, dict) and rs:
        rtype = rs.get("rope_type", rs.get("type", ""))
        factor = rs.get("factor")
        orig = rs.get("original_max_position_embeddings")
        if yarn_from_original and rtype == "yarn" and isinstance(orig, (int, float)):
            length, key = int(orig), f"{field} original_max_position_embeddings"
        if (factor and rtype not in no_scale and "gemma3" not in t.get("model_type", "")
                and rtype):
            scaled = length * factor
            if not 0 < scaled < 2**53:
                raise BadInput(f"config field '{field}.factor' {factor!r} scales "
                               f"{key} {length} to {scaled:g} positions")
            return int(scaled), f"{key} x {field} factor {factor} ({rtype})"
    return length, key


def longrope_default_len(t: dict[str, Any]) -> int | None:
    """A LongRoPE checkpoint's default max_model_len, its original_max_position_embeddings
    (0.11.1+ `_get_and_verify_max_len`: "For LongRoPE, default to original_max_position_
    embeddings to avoid performance degradation for shorter sequences"; 'su' is LongRoPE's
    old name). None for other checkpoints."""
    for rs in (t.get("rope_scaling"), t.get("rope_parameters")):
        if isinstance(rs, dict) and rs.get("rope_type", rs.get("type")) in ("longrope", "su"):
            orig = t.get("original_max_position_embeddings")
            return int(orig) if isinstance(orig, (int, float)) and orig > 0 else None
    return None


# --- layer classification -------------------------------------------------------------------

def _attn(t: dict[str, Any], kind: str = FULL, *, heads: int | None = None,
          hs: int | None = None, hs_v: int | None = None, window: int = 0) -> AttnLayer:
    h = head_size(t) if hs is None else hs
    if h <= 0:
        raise BadInput(f"config (model_type {t.get('model_type')!r}) gives a head size of {h}",
                       hint="check hidden_size, num_attention_heads and head_dim")
    return AttnLayer(kind=kind, num_kv_heads=total_kv_heads(t) if heads is None else heads,
                     head_size=h, head_size_v=h if hs_v is None else hs_v, window=window)


def _sliding_layers_pattern(t: dict[str, Any], n: int) -> list[bool] | None:
    """Per-layer sliding flags from layer_types / sliding_window_pattern, the plan transformers'
    config class builds without them (`_built_plan`), or None."""
    lt = t.get("layer_types")
    mt = t.get("model_type", "")
    if isinstance(lt, list) and lt:
        if len(lt) < n:
            raise BadInput(f"layer_types has {len(lt)} entries for {n} layers")
        flags = [x in ("sliding_attention", "sliding", "local") for x in lt[:n]]
        if mt.startswith("gemma4") and flags:  # Gemma4TextConfig: the last layer is full
            flags[-1] = False
        return flags
    pattern = t.get("sliding_window_pattern")
    if isinstance(pattern, str) and t.get("sliding_window"):
        # EXAONE 4 writes "LLLG" beside layer_types; without them transformers' Exaone4Config
        # cannot build the layer types ((i + 1) % "LLLG" is a TypeError)
        raise BadInput("a letter sliding_window_pattern (EXAONE 4's 'LLLG') needs layer_types "
                       "in the config: transformers cannot build them from it",
                       hint="add layer_types as the checkpoint's config.json has them")
    built = _built_plan(t, mt, n)
    if built is not None:
        return built
    if mt == "gemma2":
        pattern = 2
    if isinstance(pattern, int) and pattern > 0 and t.get("sliding_window"):
        return [bool((i + 1) % pattern) for i in range(n)]
    return None


# model types whose transformers config class (5.16-5.20, which vLLM 0.33 loads; the 4.57 ones
# agree where they exist) builds a sliding/full plan when config.json has no layer_types,
# as (sliding-iff rule over layer i of n, its parameter and default); vLLM follows the plan
_PERIODIC = {  # sliding iff (i + 1) % P != 0
    "olmo3": (None, 4), "vaultgemma": (None, 2), "gpt_oss": (None, 2),
    "afmoe": ("global_attn_every_n_layers", 4), "cohere2": ("sliding_window_pattern", 4),
    "exaone4": ("sliding_window_pattern", 4), "exaone_moe": ("sliding_window_pattern", 4),
    "gemma3n_text": (None, 5), "gemma3n": (None, 5), "kolibri1": (None, 5)}
_FULL_FIRST_OF_4 = frozenset({"cwm", "granite_swa", "granitemoe_swa"})  # full iff i % 4 == 0
_ALL_FULL = frozenset({"laguna", "mellum", "step3p5", "step3p7", "cohere_compass_text",
                       "flint"})


def _built_plan(t: dict[str, Any], mt: str, n: int) -> list[bool] | None:
    """The plan transformers builds without layer_types (a helper's run of transformers
    5.20.2's config classes, session 26), or None where the config class builds none."""
    if mt in ("exaone4", "exaone_moe") and "sliding_window" in t and t["sliding_window"] is None:
        # `Exaone4Config`: a null window sets the pattern to 0, then (i + 1) % 0
        raise BadInput(f"{mt}: transformers cannot build layer_types for a null "
                       "sliding_window (ZeroDivisionError in its config class)",
                       hint="add layer_types, or a sliding_window")
    if mt in _PERIODIC:
        key, default = _PERIODIC[mt]
        p = t.get(key) if key else None
        p = p if isinstance(p, int) and not isinstance(p, bool) and p > 0 else default
        return [(i + 1) % p != 0 for i in range(n)]
    if mt.startswith("gemma4"):  # every sixth full, and the last
        return [(i + 1) % 6 != 0 and i != n - 1 for i in range(n)]
    if mt in _FULL_FIRST_OF_4:
        return [i % 4 != 0 for i in range(n)]
    if mt == "muse_glimmer_text":  # full every fourth counted back from the last layer
        return [(n - 1 - i) % 4 != 0 for i in range(n)]
    if mt == "cohere2_moe":  # a dense prefix (all full by default), then (j + 1) % P
        k = int(t.get("first_k_dense_replace") or 0)
        pre = int(t.get("prefix_dense_sliding_window_pattern") or 1)
        p = int(t.get("sliding_window_pattern") or 4)
        return [(i + 1) % pre != 0 if i < k else (i - k + 1) % p != 0 for i in range(n)]
    if mt in _ALL_FULL:
        return [False] * n
    if mt == "smollm3":  # the window on NoPE layers only, when switched on
        nope = t.get("no_rope_layers") or [int((i + 1) % int(
            t.get("no_rope_layer_interval") or 4) != 0) for i in range(n)]
        return [bool(t.get("use_sliding_window")) and i < len(nope) and nope[i] == 0
                for i in range(n)]
    return None


def indexer_layers(t: dict[str, Any], n: int) -> list[bool]:
    """Which of a sparse-MLA model's layers build an indexer (IndexCache, vLLM 0.24+
    `DeepseekV32Attention.__init__`): `index_topk_pattern` ('S' skips), else layer i skips when
    max(i - index_skip_topk_offset + 1, 0) % index_topk_freq != 0 (offset 2, freq 1 by
    default: every layer). GLM-5.2's freq 4, offset 3 keeps 21 of 78."""
    if t.get("model_type") == "hy_v4":
        return _hy_v4_indexers(t, n)
    pattern = t.get("index_topk_pattern")
    if isinstance(pattern, (str, list)) and pattern:
        return [i >= len(pattern) or pattern[i] != "S" for i in range(n)]
    freq = max(1, int(t.get("index_topk_freq") or 1))
    offset = int(t.get("index_skip_topk_offset", 2) or 0)
    return [max(i - offset + 1, 0) % freq == 0 for i in range(n)]


_HY_V4_SPARSE = ("sparse_attention", "sparse", "indexed_attention", "deepseek_sparse_attention")


def _hy_v4_indexers(t: dict[str, Any], n: int) -> list[bool]:
    """HY-V4 (vLLM 0.29-0.33 `models/hy_v4/nvidia/attention.py`): a layer builds an indexer
    when its `layer_types` entry is sparse and `indexer_types` marks it 'full' ('shared'
    reuses the top-k of the last full one; `compute_skip_topk_layers`). `HYV4Config`
    defaults: no layer_types (every layer dense MLA), indexer_types full at layer 0 and every
    fourth from 1. 0.29-0.31 do not count 'indexed_attention' as sparse (`hy_v4_before_032`)."""
    lt = t.get("layer_types") if isinstance(t.get("layer_types"), list) else []
    kinds = t.get("indexer_types")
    if kinds is None:
        kinds = ["full" if i == 0 or (i - 1) % 4 == 0 else "shared" for i in range(n)]
    if not isinstance(kinds, list) or len(kinds) != n or set(kinds) - {"full", "shared"}:
        raise BadInput(f"hy_v4: indexer_types must list 'full' or 'shared' for each of the {n} "
                       "layers (`compute_skip_topk_layers`)")
    return [i < len(lt) and lt[i] in _HY_V4_SPARSE and kinds[i] == "full" for i in range(n)]


def hy_v4_before_032(arch: ModelArch) -> list[Layer]:
    """HY-V4's layers in 0.29-0.31, whose `_SPARSE_LAYER_TYPES` lacks 'indexed_attention':
    such layers are dense MLA without an indexer."""
    lt = arch.text_config.get("layer_types") or []
    return [replace(x, indexer_bytes=0) if i < len(lt) and lt[i] == "indexed_attention"
            and isinstance(x, AttnLayer) else x for i, x in enumerate(arch.layers)]


def _mla_layer(t: dict[str, Any]) -> AttnLayer:
    kv_lora = _int(t, "kv_lora_rank")
    rope = _int(t, "qk_rope_head_dim")
    indexer = 0
    if t.get("index_head_dim"):
        d = int(t["index_head_dim"])
        indexer = d + d // 128 * 4  # DeepseekV32IndexerCache: fp8 values + fp32 scale per 128
    return AttnLayer(kind=MLA, num_kv_heads=1, head_size=kv_lora + rope, head_size_v=0,
                     indexer_bytes=indexer)


def _mamba2_layer(t: dict[str, Any], *, prefix: str = "mamba_") -> StateLayer:
    if prefix == "mamba_":  # granite-4.0-h / bamba / falcon-h1 names
        heads = _int(t, "mamba_n_heads", "mamba_num_heads")
        hd = _int(t, "mamba_d_head", "mamba_head_dim")
        expand = t.get("mamba_expand")
        inter = heads * hd if not expand else int(expand * _int(t, "hidden_size"))
        if t.get("mamba_d_ssm"):
            inter = int(t["mamba_d_ssm"])
        return StateLayer(kind=MAMBA2, intermediate=inter, d_state=_int(t, "mamba_d_state"),
                          d_conv=_int(t, "mamba_d_conv"),
                          n_groups=_int(t, "mamba_n_groups", default=1),
                          n_heads=heads, head_dim=hd)
    heads = _int(t, "mamba_num_heads")
    hd = _int(t, "mamba_head_dim")
    return StateLayer(kind=MAMBA2, intermediate=heads * hd, d_state=_int(t, "ssm_state_size"),
                      d_conv=_int(t, "conv_kernel"), n_groups=_int(t, "n_groups", default=1),
                      n_heads=heads, head_dim=hd)


def _gdn_layer(t: dict[str, Any]) -> StateLayer:
    return StateLayer(kind=GDN, k_heads=_int(t, "linear_num_key_heads"),
                      k_dim=_int(t, "linear_key_head_dim"),
                      v_heads=_int(t, "linear_num_value_heads"),
                      v_dim=_int(t, "linear_value_head_dim"),
                      d_conv=_int(t, "linear_conv_kernel_dim"))


_DSV4_TYPES = {"sliding_attention": 0, "compressed_sparse_attention": 4,
               "heavily_compressed_attention": 128}


def _dsv4_layers(t: dict[str, Any], arch: ModelArch, n: int) -> list[Layer]:
    """DeepSeek-V4 (vLLM 0.33 `models/deepseek_v4/attention.py` `DeepseekV4Attention`): every
    layer keeps a sliding-window MLA cache; `compress_ratios` 4 / 128 add a compressed KV cache
    and compressor states, and ratio 4 also an indexer. The MTP entry past
    `num_hidden_layers` is dropped (transformers `DeepseekV4Config`)."""
    ratios = t.get("compress_ratios")
    if ratios is None and isinstance(t.get("layer_types"), list):
        rates = {**_DSV4_TYPES, **(t.get("compress_rates") or {})}
        ratios = [rates.get(x, 0) for x in t["layer_types"]]
    ratios = _req({"compress_ratios": ratios, "model_type": "deepseek_v4"}, "compress_ratios")
    if len(ratios) < n:
        raise BadInput(f"compress_ratios has {len(ratios)} entries for {n} layers")
    hd = _int(t, "head_dim")
    idx = _int(t, "index_head_dim", default=128)
    window = _int(t, "sliding_window", default=128)
    arch.is_mla = arch.is_sparse_mla = arch.packed_kv = True
    arch.kernel_block_size = 256  # lcm of the V4 backends' block sizes (`update_block_size_...`)
    made: dict[int, AttnLayer] = {}
    out: list[Layer] = []
    for r in ratios[:n]:
        r = max(1, int(r))
        if r not in (1, 4, 128):
            raise UnsupportedArchitecture(f"DeepSeek-V4 compress ratio {r} is not modelled")
        out.append(made.setdefault(r, AttnLayer(
            kind=DSV4, num_kv_heads=1, head_size=hd, head_size_v=0, window=window,
            compress_ratio=r, indexer_bytes=idx + idx // 128 * 4 if r == 4 else 0)))
    return out


def _kimi_linear_layers(t: dict[str, Any], arch: ModelArch, n: int) -> list[Layer]:
    """Kimi Linear (Kimi-Linear-48B, Kimi-K3 text model): `linear_attn_config.kda_layers`
    (1-based) are KDA state layers, the others MLA (vLLM `models/kimi_linear.py`,
    `KimiLinearConfig.is_kda_layer`; state shape `MambaStateShapeCalculator.kda_state_shape`:
    q/k/v share head count and head dim)."""
    lac = _req(t, "linear_attn_config")
    if not isinstance(lac, dict):
        raise BadInput("linear_attn_config is not a mapping")
    kda_idx = set(_req(lac, "kda_layers", what="linear_attn_config.kda_layers"))
    heads = _int(lac, "num_heads")
    hd = _int(lac, "head_dim")
    kda = StateLayer(kind=KDA, k_heads=heads, k_dim=hd, v_heads=heads, v_dim=hd,
                     d_conv=_int(lac, "short_conv_kernel_size", default=4))
    arch.is_mla = True
    arch.kda_gate_bound = bool(lac.get("use_full_rank_gate")) and \
        lac.get("gate_lower_bound") is not None
    mla = _mla_layer(t)
    return [kda if i + 1 in kda_idx else mla for i in range(n)]


def zamba2_mamba(t: dict[str, Any]) -> StateLayer:
    """Zamba2's Mamba2 mixer (`Zamba2MambaDecoderLayer`), with `Zamba2Config`'s defaults."""
    inter = int(t.get("mamba_expand") or 2) * _int(t, "hidden_size")
    heads = _given(t, "n_mamba_heads", 8)
    return StateLayer(kind=MAMBA2, intermediate=inter, d_state=_given(t, "mamba_d_state", 64),
                      d_conv=_given(t, "mamba_d_conv", 4),
                      n_groups=_given(t, "mamba_ngroups", 1), n_heads=heads,
                      head_dim=inter // heads)


def _zamba2_layers(t: dict[str, Any], n: int) -> list[Layer]:
    """Zamba2 (vLLM 0.8-0.33 `zamba2.py`): every layer keeps a Mamba2 state; each 'hybrid'
    layer also runs a shared attention block with a KV cache of its own ("KV cache is unique
    for every attention layer"): all `num_attention_heads` heads (no GQA), head size
    2 x hidden / heads, as attention runs on [hidden, original embeddings]. transformers
    derives the head size and ids itself and raises the length to 16,384 with
    `use_long_context`."""
    plan = t.get("layers_block_type") or t.get("layer_types")
    if not isinstance(plan, list) or len(plan) < n:
        raise BadInput(f"zamba2: layers_block_type must name a block for each of the {n} layers")
    # transformers 5 saves the Mamba layers as 'linear_attention' (`remap_legacy_layer_types`)
    odd = sorted({str(x) for x in plan[:n]} - {"mamba", "linear_attention", "hybrid"})
    if odd:  # Zyphra's pre-transformers configs ('m' / 'g'), whose shared blocks vLLM's
        # `layer_type == "hybrid"` test would drop
        raise UnsupportedArchitecture(
            f"zamba2: layers_block_type has {', '.join(map(repr, odd))}; vLLM builds 'mamba' "
            "and 'hybrid' blocks", hint="use the checkpoint's transformers-format config "
                                        "(its current revision)")
    heads = _int(t, "num_attention_heads")
    hs = 2 * _int(t, "hidden_size") // heads
    _given(t, "num_mem_blocks", 1)
    mamba = zamba2_mamba(t)
    if hs <= 0 or mamba.head_dim <= 0:
        raise BadInput("zamba2: hidden_size is too small for its attention or Mamba heads",
                       hint="check hidden_size, num_attention_heads and n_mamba_heads")
    if t.get("use_long_context"):
        t["max_position_embeddings"] = 16384
    attn = AttnLayer(FULL, heads, hs, hs, parallel_state=mamba)
    return [attn if x == "hybrid" else mamba for x in plan[:n]]


MINIMAX01 = frozenset({"minimax", "minimax_text_01", "minimax_m1"})
MINIMAX01_ARCHS = frozenset({"MiniMaxForCausalLM", "MiniMaxText01ForCausalLM",
                              "MiniMaxM1ForCausalLM", "MiniMaxVL01ForConditionalGeneration"})


def _minimax01_layers(t: dict[str, Any], n: int) -> list[Layer]:
    """MiniMax-Text-01 / M1 (vLLM 0.8.3-0.23 `minimax_text_01.py`; V1 from 0.10.1): layer i is
    lightning attention where `attn_type_list` (or `decoder_attention_types`, or layer_types'
    'linear_attention') says 0, one [heads/TP, D, D] state (`linear_attention_state_shape`,
    no conv), else full attention of `num_key_value_heads`; no list: all full, but for
    transformers' `MiniMaxConfig` (model_type 'minimax'), which builds full / linear
    alternately. D = head_dim (the state shape reads `hf_config.head_dim`)."""
    plan = t.get("attn_type_list") or t.get("decoder_attention_types")
    if not plan and t.get("model_type") == "minimax" and not t.get("layer_types"):
        plan = [(i + 1) % 2 for i in range(n)]  # `MiniMaxConfig`: (i + 1) % 2 -> full
    if not plan and isinstance(t.get("layer_types"), list):
        names = {"linear_attention": 0, "full_attention": 1}
        odd = sorted({str(x) for x in t["layer_types"]} - set(names))
        if odd:
            raise BadInput(f"minimax: layer_types has {', '.join(map(repr, odd))} "
                           "(\"Unsupported layer type\")")
        plan = [names[x] for x in t["layer_types"]]
    if plan and not isinstance(plan, list):
        raise BadInput("minimax: attn_type_list must be a list of 0 (linear) / 1 (full)")
    plan = list(plan or [1] * n)
    if len(plan) < n or any(x not in (0, 1) for x in plan[:n]):
        raise BadInput(f"minimax: attn_type_list must give 0 (linear) or 1 (full) for each "
                       f"of the {n} layers")
    heads = _int(t, "num_attention_heads")
    hd = t.get("head_dim")
    if 0 in plan[:n] and not isinstance(hd, int):
        raise BadInput("minimax: the lightning layers' state needs head_dim "
                       "(`get_mamba_state_shape_from_config` reads hf_config.head_dim), "
                       f"which is {'null' if 'head_dim' in t else 'absent'}",
                       hint="add head_dim to the config")
    if "rotary_dim" in t and not isinstance(t["rotary_dim"], int):
        raise BadInput("minimax: rotary_dim is null (vLLM divides it by head_dim)",
                       hint="give rotary_dim or drop the key")
    hd = hd if isinstance(hd, int) else _int(t, "hidden_size") // heads
    lin = StateLayer(kind=LIGHTNING, n_heads=heads, head_dim=hd)
    full = _attn(t, hs=hd)
    return [full if x else lin for x in plan[:n]]


def _loop_coder_layers(t: dict[str, Any], arch: ModelArch, n: int) -> list[Layer]:
    """IQuest-LoopCoder (vLLM 0.14-0.33 `iquest_loopcoder.py` `LoopCoderAttention`): each of
    the n layers runs `loop_num` times (default 2) and registers a cache per loop, named
    layers.{loop x n + i}: the first loop's full, the later ones a `loop_window_size` window
    (default 64) beside the global attention over the first loop's cache. Head size hidden //
    heads whatever `head_dim` says."""
    if "loop_num" in t and t["loop_num"] is None:
        raise BadInput("IQuest-LoopCoder: loop_num is null (vLLM reads it as given: "
                       "range(None))", hint="give loop_num or drop the key (default 2)")
    loops = _given(t, "loop_num", 2)
    if loops > 64:
        raise BadInput(f"IQuest-LoopCoder: loop_num must be a small positive count, got {loops!r}",
                       hint="the released checkpoints loop twice")
    window = _given(t, "loop_window_size", 64)
    hs = _int(t, "hidden_size") // _int(t, "num_attention_heads")
    arch.loop_caches_from = n
    return [_attn(t, hs=hs)] * n + [_attn(t, SLIDING, hs=hs, window=window)] * (n * (loops - 1))


def _plamo2_layers(t: dict[str, Any], arch: ModelArch, n: int) -> list[Layer]:
    """PLaMo2 (vLLM 0.8.5-0.26 `plamo2.py` `is_mamba`): layer i is Mamba unless i %
    mamba_step == mamba_step // 2 (only the last layer is attention when there are no more
    layers than mamba_step // 2); attention is full (`attention_window_size` is not read).
    Its mixer's state is Mamba2's with no groups, whose conv does not widen for speculative
    tokens, and the class never supports Mamba prefix caching."""
    step = _given(t, "mamba_step", 2)
    if step < 2:
        raise BadInput(f"plamo2: vLLM asserts mamba_step > 1, got {step}")
    hd = _int(t, "hidden_size_per_head")
    heads = _int(t, "mamba_num_heads")
    arch.mamba_prefix_unsupported = True
    mamba = StateLayer(kind=MAMBA2, intermediate=heads * hd, d_state=_int(t, "mamba_d_state"),
                       d_conv=_int(t, "mamba_d_conv"), n_groups=0, n_heads=heads, head_dim=hd,
                       fixed_conv=True)
    attn = _attn(t, hs=hd)
    if n <= step // 2:
        return [mamba] * (n - 1) + [attn]
    return [attn if i % step == step // 2 else mamba for i in range(n)]


def _hybrid_plan(t: dict[str, Any], n: int, what: str) -> list[str]:
    """`layer_types` of a GDN/KDA hybrid whose other layers are full attention: every entry
    either 'linear_attention' or 'full_attention'."""
    lt = t.get("layer_types")
    if not isinstance(lt, list) or len(lt) < n:
        raise BadInput(f"{what}: layer_types must list a type for each of the {n} layers")
    odd = sorted({str(x) for x in lt[:n]} - _TF518_NAMES)
    if odd:
        raise UnsupportedArchitecture(f"{what}: layer_types has {', '.join(map(repr, odd))}, "
                                      "which vLLM's model does not build")
    return list(lt[:n])


_TF518_NAMES = frozenset({"linear_attention", "full_attention"})


def _tf518_names(plan: Any) -> bool:
    """Whether a hybrid's block list uses transformers 5.18+'s layer names."""
    return bool(_TF518_NAMES & {str(x) for x in plan})


def _given(t: dict[str, Any], key: str, default: int) -> int:
    """A config count that the config class defaults when absent (None); 0 is refused, as the
    model's shapes cannot be built from it."""
    v = t.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise BadInput(f"config field {key!r} must be a positive integer, got {v!r}")
    if v <= 0:
        raise BadInput(f"config field {key!r} must be positive, got {v}")
    return int(v)


def _olmo_hybrid_layers(t: dict[str, Any], n: int) -> list[Layer]:
    """OLMo Hybrid (vLLM 0.18-0.33 `models/olmo_hybrid.py`): 'linear_attention' layers are
    gated DeltaNet (`OlmoHybridGatedDeltaNetAttention`, the Qwen3-Next state shape), the
    others full attention of head size hidden // heads whatever `head_dim` says. Missing
    fields take `OlmoHybridConfig`'s defaults: KV and linear heads = attention heads, key dim
    int(0.75 x hidden / key heads), value dim twice it, kernel 4, every fourth layer full."""
    heads = _int(t, "num_attention_heads")
    hidden = _int(t, "hidden_size")
    if t.get("layer_types") is None:
        t["layer_types"] = ["full_attention" if i % 4 == 3 else "linear_attention"
                            for i in range(n)]
        if "full_attention" not in t["layer_types"]:
            t["layer_types"][-1] = "full_attention"
    legacy = {"mamba": "linear_attention", "attention": "full_attention"}
    if isinstance(t.get("layer_types"), list):  # `remap_legacy_layer_types` (transformers 5)
        t["layer_types"] = [legacy.get(x, x) for x in t["layer_types"]]
    plan = _hybrid_plan(t, n, "olmo_hybrid")
    kh = _given(t, "linear_num_key_heads", heads)
    kd = _given(t, "linear_key_head_dim", int(0.75 * hidden / kh))
    gdn = _gdn_layer({"linear_num_key_heads": kh, "linear_key_head_dim": kd,
                      "linear_num_value_heads": _given(t, "linear_num_value_heads", heads),
                      "linear_value_head_dim": _given(t, "linear_value_head_dim", 2 * kd),
                      "linear_conv_kernel_dim": _given(t, "linear_conv_kernel_dim", 4)})
    attn = _attn(t, hs=hidden // heads)
    return [gdn if x == "linear_attention" else attn for x in plan]


def _alice_ai_layers(t: dict[str, Any], arch: ModelArch, n: int) -> list[Layer]:
    """AliceAI (vLLM 0.33 `models/alice_ai.py`): 'linear_attention' layers are Kimi delta
    attention (`KimiGatedDeltaNetAttention`, `kda_state_shape`), the others Qwen3-Next gated
    full attention (`head_dim` 256 by `Qwen3NextConfig`'s default). The recurrent state is
    float32 whatever --mamba-ssm-cache-dtype says (`kda_state_dtype` called without it)."""
    plan = _hybrid_plan(t, n, "alice_ai")
    kh, vh = _int(t, "linear_num_key_heads"), _int(t, "linear_num_value_heads")
    kd, vd = _int(t, "linear_key_head_dim"), _int(t, "linear_value_head_dim")
    if (kh, kd) != (vh, vd):
        raise BadInput(f"alice_ai: vLLM's KDA layer needs as many key as value heads of one "
                       f"size (linear_num_key_heads {kh} / value {vh}, head dims {kd} / {vd})")
    if t.get("kda_allow_negative_eigenvalues"):
        raise BadInput("alice_ai: vLLM 0.33 requires kda_allow_negative_eigenvalues false "
                       "(`AliceAIForCausalLMConfig`)")
    block = t.get("block_attn_res_block_size")
    if isinstance(block, bool) or not isinstance(block, int) or block <= 0:
        raise BadInput("alice_ai: vLLM 0.33 requires a positive integer "
                       f"block_attn_res_block_size (`get_attn_res_block_size`), got {block!r}")
    if not (t.get("num_experts") or 0) > 0:
        raise BadInput("alice_ai: vLLM 0.33 requires sparse experts (num_experts > 0)")
    t.setdefault("head_dim", 256)
    t.setdefault("attn_output_gate", True)
    arch.kda_state_fixed = "float32"
    kda = StateLayer(kind=KDA, k_heads=kh, k_dim=kd, v_heads=vh, v_dim=vd,
                     d_conv=_int(t, "linear_conv_kernel_dim", default=4))
    attn = _attn(t)
    return [kda if x == "linear_attention" else attn for x in plan]


# Architectures of vLLM 0.33 whose cache layout kvplan does not model yet (read in the wheel):
# refused rather than sized as the generic decoder. Value: what the generic decoder would miss.
_UNMODELLED = {
    "DeepseekV41ForCausalLM": "sliding-window MLA cache, compressed KV on some layers and "
                              "compressor rings (vllm/models/deepseek_v41)",
    "Dots3NoteForCausalLM": "padded 1,088-wide MLA rows and window-limited layers "
                            "(vllm/models/dots3_note)",
    "Glm5NextForCausalLM": "Kimi delta attention states, an fp8 latent with a pooled indexer "
                           "and ring buffers (vllm/models/glm5next)",
    "InklingForCausalLM": "each layer's short-convolution state kept as a 4-token cache beside "
                          "its KV (vllm/models/inkling)",
    "LongcatFlashForCausalLM": "two MLA attentions and two dense MLPs in every layer beside "
                               "zero-computation experts (longcat_flash.py)",
    "LongcatFlashNgramForCausalLM": "two MLA attentions and two dense MLPs in every layer "
                                    "beside zero-computation experts, and n-gram embeddings "
                                    "(longcat_flash_ngram.py)",
    "Step5ForCausalLM": "the sparse layers' summary cache and tail ring, and per-type "
                        "attention settings (vllm/models/step5)",
    "Qwen4ExpForCausalLM": "gated DeltaNet states, a per-layer-embedding convolution state and "
                           "key rings (vllm/models/qwen4_exp)",
    "DoryForCausalLM": "per-loop caches of its recurrent layers and cache-free MLP layers "
                       "(dory.py)",
    "DomynEdgeForCausalLM": "per-layer windows (`window_sizes`, domyn_edge.py)",
    "HrmTextForCausalLM": "one cache per recurrence step (hrm_text.py: layers per stack x "
                          "H_cycles x (L_cycles + 1))",
    "WhisperForConditionalGeneration": "an encoder-decoder's self- and cross-attention caches "
                                       "(whisper.py: decoder_layers of each, the cross ones "
                                       "of max_source_positions encoder tokens)",
    "CohereAsrForConditionalGeneration": "an encoder-decoder's self- and cross-attention "
                                         "caches (cohere_asr.py)",
    "NemotronParseForConditionalGeneration": "an encoder-decoder's self- and cross-attention "
                                             "caches (nemotron_parse.py)",
    "VoxtralRealtimeGeneration": "the causal audio encoder's sliding-window caches in the KV "
                                 "pool (whisper_causal.py)",
}
for _a in ("Glm5Next", "Inkling", "Step5", "Qwen4Exp"):
    _UNMODELLED[f"{_a}ForConditionalGeneration"] = _UNMODELLED[f"{_a}ForCausalLM"]
# vLLM builds a Kimi-Linear config for these whatever the text config's model_type says
_KIMI_LINEAR = ("KimiLinearForCausalLM", "KimiK3ForConditionalGeneration")
_BAILING_V3 = ("BailingMoeV3ForCausalLM", "BailingMoeV3VLForConditionalGeneration")


def _bailing_hybrid_layers(t: dict[str, Any], arch: ModelArch, n: int) -> list[Layer]:
    """Ling/Ring hybrids (model_type bailing_hybrid), by architecture; their other layers are
    MLA (`is_deepseek_mla` lists bailing_hybrid, 0.17+). BailingMoeV2_5 (0.17-0.33
    `bailing_moe_linear.py`): layer i is lightning attention unless (i + 1) % layer_group_size
    == 0 (`is_linear_layer`; a missing group size makes every layer MLA), one [heads, D, D]
    state (`linear_attention_state_shape`). BailingMoeV3 (0.28-0.33) and its VL model
    (0.30-0.33; `bailing_moe_v3.py` `_is_kda_layer`): Kimi delta attention except every
    group's last layer and the layers past the last whole group, the recurrent state float32
    whatever --mamba-ssm-cache-dtype says (`kda_state_dtype` called without it; `no_kda_lora`
    must be true). A missing layer_group_size is vLLM's getattr default of 1; transformers 5's
    own BailingHybridConfig defaults it to 6 where it is installed. `layers_block_type`
    is not read by either."""
    heads, hidden = _int(t, "num_attention_heads"), _int(t, "hidden_size")
    d = int(t.get("head_dim") or hidden // heads)
    arch.is_mla = True
    mla = _mla_layer(t)
    if "BailingMoeV2_5ForCausalLM" in arch.architectures:
        g = int(t.get("layer_group_size") or 0) if "layer_group_size" in t else 1
        lin = StateLayer(kind=LIGHTNING, n_heads=heads, head_dim=d)
        return [lin if g > 0 and (i + 1) % g else mla for i in range(n)]
    if any(x in arch.architectures for x in _BAILING_V3):
        g = _int(t, "layer_group_size")
        if g <= 0:
            raise BadInput(f"bailing_hybrid: layer_group_size must be positive, got {g}")
        if t.get("no_kda_lora") is not True:
            raise BadInput("BailingMoeV3: vLLM requires no_kda_lora true (\"BailingMoeV3 KDA "
                           "currently expects no_kda_lora=True\", 0.28-0.33)")
        whole = n // g * g
        arch.kda_state_fixed = "float32"
        kda = StateLayer(kind=KDA, k_heads=heads, k_dim=d, v_heads=heads, v_dim=d,
                         d_conv=_int(t, "short_conv_kernel_size", default=4))
        return [mla if (i + 1) % g == 0 or i >= whole else kda for i in range(n)]
    raise UnsupportedArchitecture(
        f"model_type 'bailing_hybrid' ({', '.join(arch.architectures) or 'no architectures'}) "
        "is modelled for BailingMoeV2_5ForCausalLM and BailingMoeV3ForCausalLM only",
        hint="open an issue with the config.json; kvplan will not guess")


def _layers(t: dict[str, Any], arch: ModelArch) -> list[Layer]:  # noqa: C901 - a dispatch table
    mt = t.get("model_type", "")
    gap = next(((a, _UNMODELLED[a]) for a in arch.architectures if a in _UNMODELLED), None)
    if gap is None and ((arch.audio_config or {}).get("is_causal") and any(
            a.startswith("Voxtral") for a in arch.architectures) or str(
            (arch.audio_config or {}).get("model_type")).startswith("voxtral_realtime")):
        gap = ((arch.architectures or ["Voxtral Realtime"])[0], "the causal audio encoder's "
               "sliding-window caches in the KV pool (whisper_causal.py)")
    if gap is None and "PanguProMoEV2ForCausalLM" in arch.architectures and t.get(
            "param_sink_number"):
        gap = ("PanguProMoEV2ForCausalLM", "sink attention: a full-attention cache of "
               "qk_nope + qk_rope keys and v_channels values with sink slots (openpangu.py "
               "`StaticSinkAttention`)")
    if gap:
        raise UnsupportedArchitecture(f"kvplan does not model {gap[0]}'s cache yet ({gap[1]})",
                                      hint="open an issue with the config.json; kvplan will "
                                           "not size it as a plain decoder")
    if mt == "nemotron_h" and not t.get("hybrid_override_pattern") and isinstance(
            t.get("layers_block_type"), list):
        # newer Nemotron-H configs spell the pattern as a list of block names
        sym = {"mamba": "M", "attention": "*", "moe": "E", "mlp": "-",
               "linear_attention": "M", "full_attention": "*"}  # transformers 5.18+ names
        arch.new_layer_names = _tf518_names(t["layers_block_type"])
        try:
            t["hybrid_override_pattern"] = "".join(sym[x] for x in t["layers_block_type"])
        except KeyError as e:
            raise UnsupportedArchitecture(f"nemotron_h layers_block_type has unknown block {e}") \
                from None
    if t.get("num_hidden_layers") is None and isinstance(t.get("hybrid_override_pattern"), str):
        t["num_hidden_layers"] = len(t["hybrid_override_pattern"])  # Nemotron-H: one per layer
    n = _int(t, "num_hidden_layers", "n_layer", "num_layers", "n_layers")

    # --- Mamba / linear-attention hybrids ---
    if mt == "nemotron_h":
        pattern = _req(t, "hybrid_override_pattern")
        if len(pattern) != n:
            raise BadInput(f"hybrid_override_pattern has {len(pattern)} symbols for {n} layers")
        # the config's hint; the release decides the default (`sizing.ssm_state_default`)
        arch.ssm_state_dtype = t.get("mamba_ssm_cache_dtype") or None
        out: list[Layer] = []
        for ch in pattern:
            if ch == "*":
                out.append(_attn(t))
            elif ch == "M":
                out.append(_mamba2_layer(t, prefix=""))
            elif ch in "-E":
                out.append(None)
            else:
                raise UnsupportedArchitecture(f"unknown hybrid_override_pattern symbol {ch!r}")
        return out
    if mt in ("granitemoehybrid", "bamba"):
        lt = t.get("layer_types") or t.get("layers_block_type")
        if lt is None and mt == "bamba":
            attn_idx = set(t.get("attn_layer_indices") or [])
            lt = ["attention" if i in attn_idx else "mamba" for i in range(n)]
        lt = _req({"layer_types": lt, "model_type": mt}, "layer_types")
        # transformers 5.18+ saves "full_attention" / "linear_attention" (`remap_legacy_...`)
        arch.new_layer_names = _tf518_names(lt)
        return [_attn(t) if x in ("attention", "full_attention") else _mamba2_layer(t)
                for x in lt[:n]]
    if mt == "falcon_h1":
        # parallel hybrid: every layer runs attention AND a Mamba2 mixer -> both caches
        # (vLLM models/falcon_h1.py: FalconH1ParallelHybrid)
        return [replace(_attn(t), parallel_state=_mamba2_layer(t)) for _ in range(n)]
    if mt == "jamba":
        period, offset = _int(t, "attn_layer_period"), _int(t, "attn_layer_offset")
        m = StateLayer(kind=MAMBA1, intermediate=_int(t, "mamba_expand") * _int(t, "hidden_size"),
                       d_state=_int(t, "mamba_d_state"), d_conv=_int(t, "mamba_d_conv"))
        return [_attn(t) if i % period == offset else m for i in range(n)]
    if mt in ("falcon_mamba", "mamba"):
        inter = _int(t, "intermediate_size", default=2 * _int(t, "hidden_size"))
        return [StateLayer(kind=MAMBA1, intermediate=inter, d_state=_int(t, "state_size"),
                           d_conv=_int(t, "conv_kernel"))] * n
    if mt in ("mamba2",):
        if "expand" in t and t["expand"] is None:
            raise BadInput("mamba2: expand is null (Mamba2Config multiplies it by hidden_size)",
                           hint="give expand or drop the key (default 2)")
        inter = int(t.get("expand", 2) * _int(t, "hidden_size"))
        return [StateLayer(kind=MAMBA2, intermediate=inter, d_state=_int(t, "state_size"),
                           d_conv=_int(t, "conv_kernel"), n_groups=_int(t, "n_groups", default=1),
                           n_heads=_int(t, "num_heads"), head_dim=_int(t, "head_dim"))] * n
    if mt in ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "qwen3_5", "qwen3_5_moe"):
        lt = t.get("layer_types")
        if not lt:
            interval = _int(t, "full_attention_interval")
            lt = ["full_attention" if (i + 1) % interval == 0 else "linear_attention"
                  for i in range(n)]
        if mt.startswith("qwen3_5"):
            arch.ssm_state_dtype = t.get("mamba_ssm_dtype") or None
        arch.gdn_flashinfer_checkpoint = True
        gdn = _gdn_layer(t)
        return [_attn(t) if x == "full_attention" else gdn for x in lt[:n]]
    if mt == "kimi_linear" or isinstance(t.get("linear_attn_config"), dict) and any(
            a in arch.architectures for a in _KIMI_LINEAR):
        return _kimi_linear_layers(t, arch, n)
    if mt == "olmo_hybrid":
        return _olmo_hybrid_layers(t, n)
    if mt == "zamba2":
        return _zamba2_layers(t, n)
    if "IQuestLoopCoderForCausalLM" in arch.architectures:
        return _loop_coder_layers(t, arch, n)
    if mt == "plamo2":
        return _plamo2_layers(t, arch, n)
    if mt == "bailing_hybrid":
        return _bailing_hybrid_layers(t, arch, n)
    if mt == "alice_ai":
        return _alice_ai_layers(t, arch, n)
    if mt in ("lfm2", "lfm2_moe"):
        # LFM2: gated short-convolution layers keep a (conv_L_cache - 1, hidden/TP) state
        # (`Lfm2ForCausalLM.get_mamba_state_shape_from_config`, `short_conv_state_shape`)
        lt = t.get("layer_types")
        if not lt:
            full = set(_req(t, "full_attn_idxs", "layer_types"))
            lt = ["full_attention" if i in full else "conv" for i in range(n)]
        conv = StateLayer(kind=SHORTCONV, intermediate=_int(t, "hidden_size"),
                          d_conv=_int(t, "conv_L_cache"))
        return [_attn(t) if x == "full_attention" else conv for x in lt[:n]]
    if mt == "deepseek_v4" or "DeepseekV4ForCausalLM" in (t.get("architectures") or []):
        return _dsv4_layers(t, arch, n)  # also SGLang's `deepseek_ref` re-exports
    if mt in MINIMAX01 or any(a in MINIMAX01_ARCHS for a in arch.architectures):
        return _minimax01_layers(t, n)
    if mt == "mllama_vision":
        raise UnsupportedArchitecture(
            f"model_type {mt!r} ({', '.join(t.get('architectures') or [])}) uses a cache "
            "layout kvplan does not model yet",
            hint="open an issue with the config.json; kvplan will not guess")

    _refuse_unmodelled_layers(t, mt, n)
    if mt == "minicpm3":
        # MiniCPM3 (0.6.2-0.33 minicpm3.py): MLA-shaped projections, but the cache holds every
        # head's decompressed K and V (`Attention(num_local_heads, qk_head_dim,
        # num_kv_heads=num_local_heads)`); `is_deepseek_mla` does not list it
        hs = _int(t, "qk_nope_head_dim") + _int(t, "qk_rope_head_dim")
        _int(t, "kv_lora_rank")  # its projections need it
        return [_attn(t, heads=_int(t, "num_attention_heads"), hs=hs)] * n

    # --- MLA ---
    if t.get("kv_lora_rank") and (mt in _MLA_TYPES or "qk_rope_head_dim" in t):
        arch.is_mla = True
        layer = _mla_layer(t)
        arch.is_sparse_mla = layer.indexer_bytes > 0
        if arch.is_sparse_mla:
            bare = replace(layer, indexer_bytes=0)
            return [layer if keep else bare for keep in indexer_layers(t, n)]
        return [layer] * n

    # --- heterogeneous NAS blocks (Nemotron Super/Ultra, DeciLM) ---
    if mt in ("nemotron-nas", "deci"):
        blocks = _req(t, "block_configs")
        heads = _int(t, "num_attention_heads")
        out = []
        for b in blocks[:n]:
            a = b.get("attention", {})
            if a.get("no_op") or a.get("replace_with_linear"):
                out.append(None)
            else:
                out.append(_attn(t, heads=heads // int(a["n_heads_in_group"])))
        return out

    # --- cross-attention (Llama 3.2 Vision) ---
    if mt in ("mllama_text_model", "mllama"):
        cross = set(t.get("cross_attention_layers") or [])
        enc = arch.vision_config or {}
        tiles = int(enc.get("max_num_tiles") or 4)
        size = enc.get("image_size") or 560
        if not isinstance(size, int) or isinstance(size, bool):
            raise BadInput(f"config field 'vision_config.image_size' must be an integer, got "
                           f"{size!r}")
        patches = (size // int(enc.get("patch_size") or 14)) ** 2 + 1
        kv = total_kv_heads(t)
        hs = head_size(t)
        return [AttnLayer(CROSS, kv, hs, hs, encoder_len=tiles * patches) if i in cross
                else _attn(t) for i in range(n)]

    # --- sliding window / chunked local / full ---
    window = t.get("sliding_window") if isinstance(t.get("sliding_window"), int) else 0
    if t.get("use_sliding_window") is False:
        window = 0  # Qwen2/Qwen3: transformers sets sliding_window=None when switched off
    kv_shared = int(t.get("num_kv_shared_layers") or 0)
    global_hs = t.get("global_head_dim")
    global_kv = t.get("num_global_key_value_heads")

    if mt == "llama4_text" or t.get("attention_chunk_size") and mt.startswith("llama4"):
        chunk = _int(t, "attention_chunk_size")
        nope = t.get("no_rope_layers")
        if not nope:
            step = int(t.get("no_rope_layer_interval", 4))
            nope = [int((i + 1) % step != 0) for i in range(n)]  # 1 = uses RoPE -> local
        return [_attn(t, CHUNKED, window=chunk) if nope[i] else _attn(t) for i in range(n)]

    if mt == "mimo_v2_flash":
        pat = _req(t, "hybrid_layer_pattern")
        swa = _attn(t, SLIDING, heads=_int(t, "swa_num_key_value_heads"),
                    hs=_int(t, "swa_head_dim"), hs_v=_int(t, "swa_v_head_dim"),
                    window=_int(t, "sliding_window"))
        full = _attn(t, hs=_int(t, "head_dim"), hs_v=_int(t, "v_head_dim"))
        return [swa if p else full for p in pat[:n]]

    flags = _sliding_layers_pattern(t, n) if window else None
    if window and flags is None:
        arch.sliding_all_layers = window
        flags = [True] * n  # e.g. Mistral-7B-v0.1, Phi-3-mini, starcoder2: every layer SWA
    if flags is None:
        flags = [False] * n
    if t.get("use_sliding_window") and t.get("max_window_layers") is not None \
            and not t.get("layer_types"):
        mwl = int(t["max_window_layers"])  # Qwen2: layers >= max_window_layers use SWA
        if 0 < mwl < n and mt in ("qwen2", "qwen3"):
            # `Qwen2Model.__init__` (Qwen3Model inherits it) asserts on a partial window
            raise BadInput("vLLM refuses Qwen2/Qwen3 with a sliding window on some layers only "
                           f"(use_sliding_window with max_window_layers {mwl} < {n} layers: "
                           "\"Sliding window for some but all layers is not supported\")",
                           hint="set use_sliding_window false, or max_window_layers to the "
                                "layer count")
        flags = [i >= mwl for i in range(n)]
        arch.sliding_all_layers = 0
    hs_v = t.get("v_head_dim") if mt not in _MLA_TYPES else None
    windows = _per_layer_windows(t, n, window) if mt == "exaone_moe" else [window] * n
    out = []
    for i in range(n):
        if kv_shared and i >= n - kv_shared:
            out.append(None)  # reuses an earlier layer's KV (Gemma-3n / Gemma-4 edge models)
        elif flags[i] and windows[i]:
            out.append(_attn(t, SLIDING, window=windows[i], hs_v=hs_v))
        else:
            out.append(_attn(t, heads=global_kv, hs=global_hs,
                             hs_v=global_hs if global_hs else hs_v))
    sac = t.get("sparse_attention_config")
    if isinstance(sac, dict) and sac.get("use_sparse_attention"):
        out = _msa_layers(sac, out, arch)
    return out


# `layer_types` spellings of an attention layer the generic path sizes (transformers' names,
# and the older/other ones configs use); sparse attention keeps an indexer beside the cache,
# which only the MLA path models
_ATTN_SPELLINGS = frozenset({"full_attention", "sliding_attention", "attention", "full",
                             "sliding", "local", "global", "global_attention",
                             "local_attention"})
_SPARSE_SPELLINGS = frozenset({"deepseek_sparse_attention", "indexed_attention",
                               "qwen_sparse_attention", "sparse_attention", "sparse"})
# fields that describe a recurrent-state (Mamba, linear attention, short convolution) mixer or
# a hybrid layer plan; the architectures that use them are special-cased above
_STATE_FIELDS = ("layers_block_type", "hybrid_override_pattern", "hybrid_layer_ids",
                 "attn_layer_indices", "attn_type_list", "linear_attn_config",
                 "linear_num_value_heads", "linear_key_head_dim", "linear_num_heads",
                 "linear_head_dim", "mamba_d_state",
                 "mamba_n_heads", "ssm_state_size", "conv_L_cache", "full_attn_idxs")


def _refuse_unmodelled_layers(t: dict[str, Any], mt: str, n: int) -> None:
    """Refuse a config the attention paths below would size wrongly: layer types they do not
    know (a linear-attention or Mamba layer would be charged as attention) or a state mixer's
    fields on an architecture kvplan has no hybrid rule for -- never a silent guess."""
    if mt.startswith("llama4"):
        return  # llama4.py reads no layer_types; transformers writes 'chunked_attention' there
    lt = t.get("layer_types")
    allowed = _ATTN_SPELLINGS | (_SPARSE_SPELLINGS if t.get("kv_lora_rank") else frozenset())
    what = f"model_type {mt!r} ({', '.join(t.get('architectures') or []) or 'no architectures'})"
    hint = ("open an issue with the config.json; kvplan will not size these layers as "
            "attention")
    if isinstance(lt, list) and lt:
        odd = sorted({str(x) for x in lt[:n]} - allowed)
        if odd:
            where = [i for i, x in enumerate(lt[:n]) if str(x) in odd]
            shown = ", ".join(map(str, where[:6])) + (", ..." if len(where) > 6 else "")
            raise UnsupportedArchitecture(
                f"{what}: layer_types has {', '.join(map(repr, odd))} layers ({shown}), whose "
                "cache kvplan does not model for this architecture", hint=hint)
        return  # every layer is attention; stray state fields do not matter
    present = [k for k in _STATE_FIELDS if t.get(k) not in (None, [], "", 0)
               and not _all_attention(k, t[k])]
    if present:
        raise UnsupportedArchitecture(
            f"{what} has recurrent-state or hybrid-layer fields ({', '.join(present)}) that "
            "kvplan does not model for this architecture", hint=hint)


def _all_attention(key: str, value: Any) -> bool:
    """A layer plan that names only attention layers (MiniMax-M2's `attn_type_list` of 1s)."""
    if key == "attn_type_list":  # 1 = softmax attention, 0 = lightning (linear) attention
        return isinstance(value, list) and all(x == 1 for x in value)
    if key == "layers_block_type":
        return isinstance(value, list) and all(x == "attention" for x in value)
    return False


def release_layers(arch: ModelArch, v: tuple[int, ...]) -> list[Layer]:
    """The layers of a model whose config class is vLLM's own in some releases, where its
    plan or default window differs from transformers' (`_CONFIG_REGISTRY`; review 27):
    AFMoE 0.11.1-0.31 (`AfmoeConfig`: no layer_types builder, which afmoe.py indexes, and a
    2,048 default window), Step-3.5 0.15.1-0.32 (`Step3p5Attention`: layer i % 2 == 0 under
    the window without layer_types), Mellum 0.22.1-0.30 (`MellumConfig`: no builder, which
    mellum.py indexes); K-EXAONE (`uniform_windows`) and HY-V4 (`hy_v4_before_032`) before
    0.32; granite-4.0-h before 0.26 and Nemotron-H before 0.20 refuse the transformers 5.18
    layer names. Other models' layers as normalized."""
    mt, t = arch.model_type, arch.text_config
    if arch.new_layer_names and (mt == "granitemoehybrid" and v < (0, 26) or (
            mt == "nemotron_h" and v < (0, 20))):
        # granitemoehybrid.py knows the names from 0.26 (KeyError before); NemotronHConfig
        # accepts them from transformers 5.16.1, which releases before 0.20 (< 5) cannot load
        raise BadInput(f"{mt}: vLLM {'.'.join(map(str, v[:2]))} does not know the "
                       "'full_attention' / 'linear_attention' layer names transformers 5.18+ "
                       "saves", hint="use the older names ('attention' / 'mamba') or vLLM "
                       f"{'0.26' if mt == 'granitemoehybrid' else '0.20'}+")
    needs_list = (mt == "afmoe" and (0, 11, 1) <= v < (0, 32)) or (
        mt == "mellum" and (0, 22, 1) <= v < (0, 31))
    if needs_list and arch.built_plan:
        raise BadInput(f"{mt}: vLLM {'.'.join(map(str, v))}'s own config class builds no "
                       "layer_types, which the model indexes (TypeError at start)",
                       hint="add layer_types to the config")
    if mt == "afmoe" and (0, 11, 1) <= v < (0, 32) and "sliding_window" in arch.defaulted:
        return [replace(x, window=2048) if isinstance(x, AttnLayer) and x.kind == SLIDING
                else x for x in arch.layers]
    if mt == "step3p5" and (0, 15, 1) <= v < (0, 33) and arch.built_plan and t.get(
            "sliding_window"):
        w = int(t["sliding_window"])
        return [replace(x, kind=SLIDING, window=w) if isinstance(x, AttnLayer) and i % 2 == 0
                else x for i, x in enumerate(arch.layers)]
    if mt == "exaone_moe" and v < (0, 32):
        return uniform_windows(arch)  # `sliding_windows` unread before 0.32
    if mt == "hy_v4" and v < (0, 32):
        return hy_v4_before_032(arch)
    return arch.layers


def uniform_windows(arch: ModelArch) -> list[Layer]:
    """K-EXAONE's layers as releases before 0.32 build them (`Exaone4Attention`): every
    sliding layer of `layer_types` under `sliding_window`, `sliding_windows` unread."""
    t = arch.text_config
    flags = _sliding_layers_pattern(t, arch.num_layers) or [False] * arch.num_layers
    w = int(t.get("sliding_window") or 0)
    return [replace(x, kind=SLIDING, window=w) if w and f and isinstance(x, AttnLayer) else x
            for x, f in zip(arch.layers, flags)]


def _per_layer_windows(t: dict[str, Any], n: int, window: int) -> list[int]:
    """K-EXAONE's optional per-layer `sliding_windows` (exaone_moe.py 0.32-0.33: a sliding
    layer's window is its entry, none for a null one; `uniform_windows` before), else
    `sliding_window` on every layer."""
    ws = t.get("sliding_windows")
    if ws is None:
        return [window] * n
    if not isinstance(ws, list) or len(ws) < n or any(
            w is not None and (isinstance(w, bool) or not isinstance(w, int) or w < 0)
            for w in ws):
        raise BadInput(f"config field 'sliding_windows' must list a window (or null) for each "
                       f"of the {n} layers, got {ws!r}")
    return [int(w or 0) for w in ws[:n]]


def _msa_layers(sac: dict[str, Any], layers: list[Layer], arch: ModelArch) -> list[Layer]:
    """MiniMax-M3 sparse attention: each layer with `sparse_attention_freq[i] == 1` keeps a
    key-only index cache beside its KV (`MiniMaxM3IndexerCache`: one `sparse_index_dim`
    vector per token, bf16 by default, MLA-style so never split by TP), and the sparse backend
    supports only `sparse_block_size`-token blocks (`MiniMaxM3SparseBackend`, 128)."""
    freq = sac.get("sparse_attention_freq") or [1] * len(layers)
    extra = _int(sac, "sparse_index_dim") * 2
    arch.kernel_block_size = _int(sac, "sparse_block_size", default=128)
    sparse: dict[int, AttnLayer] = {}
    out: list[Layer] = []
    for i, x in enumerate(layers):
        if isinstance(x, AttnLayer) and i < len(freq) and freq[i]:
            x = sparse.setdefault(id(x), replace(x, indexer_bytes=extra))
        out.append(x)
    return out


def _lfm2_ff(t: dict[str, Any]) -> int:
    """LFM2's feed-forward width (`Lfm2MLP`: 2/3 of `block_ff_dim`, times the multiplier,
    rounded up to `block_multiple_of`, when `block_auto_adjust_ff_dim`)."""
    ff = t.get("block_ff_dim")
    if not isinstance(ff, int):
        return 0
    if t.get("block_auto_adjust_ff_dim"):
        ff = int(2 * ff / 3)
        ff = int(float(t.get("block_ffn_dim_multiplier") or 1.0) * ff)
        m = int(t.get("block_multiple_of") or 256)
        ff = m * -(-ff // m)
    return ff


# LLaVA-style wrappers and the projector vLLM builds between tower and text model (0.33
# llava.py `LlavaMultiModalProjector`, llava_next.py, mistral3.py `Mistral3MultiModalProjector`,
# gemma3_mm.py `Gemma3MultiModalProjector`); transformers' default projector bias per config
LLAVA_LIKE = {"LlavaForConditionalGeneration": ("llava", True),
              "LlavaNextForConditionalGeneration": ("llava_next", True),
              "Mistral3ForConditionalGeneration": ("mistral3", False),
              "Gemma3ForConditionalGeneration": ("gemma3", False)}


def mm_projector(config: dict[str, Any], vision: dict[str, Any] | None) -> dict[str, Any] | None:
    """The projector of a LLaVA-style wrapper, and how many tower layers vLLM builds
    (`init_vision_tower_for_llava`: up to the deepest `vision_feature_layer`, -2 of 24 = 23,
    `get_layer_index`; Gemma 3 builds the whole SigLIP tower)."""
    arch = next((a for a in config.get("architectures") or [] if a in LLAVA_LIKE), None)
    if arch is None or not vision:
        return None
    kind, bias = LLAVA_LIKE[arch]
    vh = vision.get("hidden_size")
    if not isinstance(vh, int) or isinstance(vh, bool) or vh <= 0:
        return None
    out: dict[str, Any] = {"kind": kind, "in": vh, "tower_layers": None,
                           "bias": bool(config.get("multimodal_projector_bias", bias)),
                           "merge": 0, "newline": kind == "llava_next"}
    feature = config.get("vision_feature_layer", -2 if kind.startswith("llava") else -1)
    n = vision.get("num_hidden_layers")
    if kind != "gemma3" and isinstance(n, int) and n > 0:
        picks = feature if isinstance(feature, list) else [feature]
        if picks and all(isinstance(x, int) and not isinstance(x, bool) for x in picks):
            out["tower_layers"] = max(min(n, n + x + 1 if x < 0 else x) for x in picks)
            if isinstance(feature, list) and kind == "llava_next":
                out["in"] = vh * len(picks)  # granite vision: the layers' features side by side
    if kind == "mistral3":
        merge = config.get("spatial_merge_size", 2)
        out["merge"] = merge if isinstance(merge, int) and merge > 0 else 2
    return out


# dense models whose MLP width comes from elsewhere: per-block FFNs (Nemotron-NAS), a shared
# MLP (granite 4 hybrids), a layer pattern (Nemotron-H), or none (Mamba)
_MLP_ELSEWHERE = frozenset({"nemotron-nas", "deci", "granitemoehybrid", "nemotron_h", "mamba",
                            "mamba2", "falcon_mamba"})
# models whose MLP vLLM sizes from the hidden size (4 x) rather than a config field
_FALCON = frozenset({"falcon", "RefinedWeb", "RefinedWebModel"})
_MLP_4H = _FALCON | {"bloom", "gpt2", "gpt_bigcode", "gptj"}


# `MM_PREFIX_LM_MODELS` (the top-level model_type), unchanged in the 0.29-0.33 wheels;
# Gemma 4 asks its text config instead (`Gemma4ModelArchConfigConvertor.is_mm_prefix_lm`)
MM_PREFIX_LM = ("bagel", "gemma3", "molmo2", "moondream3", "paligemma")


@by_identity()
def normalize(config: dict[str, Any]) -> ModelArch:
    """Turn a raw HF config (as loaded from config.json) into a `ModelArch` (memoised per
    config object; a `ModelArch` is never mutated after this returns)."""
    return _normalize(config)


def text_entry(v: Any) -> Any:
    """The text entry of a per-modality [text, vision] list (ERNIE-4.5-VL's experts)."""
    return v[0] if isinstance(v, list) and v else v


def _normalize(config: dict[str, Any]) -> ModelArch:
    if not isinstance(config, dict):
        raise BadInput("config is not a JSON object")
    check_field_types({k: _loads(v) for k, v in config.items()})
    if config.get("model_type") == "ultravox" and config.get("text_model_id"):
        # transformers_utils/configs/ultravox.py: `text_config` is `text_model_id`'s config
        tid = config["text_model_id"]
        raise UnsupportedArchitecture(
            f"Ultravox builds its language model from text_model_id {tid!r}, whose config "
            "this one does not hold", hint=f"size {tid} for the language model's KV cache")
    t = text_config_of(config)
    check_field_types(t)
    if not t.get("model_type") and not t.get("architectures"):
        raise UnsupportedArchitecture("config has neither model_type nor architectures",
                                      hint="is this a model's config.json?")
    mt = t.get("model_type", "")
    vision = config.get("vision_config") if isinstance(config.get("vision_config"), dict) else None
    if vision and any(isinstance(vision.get(k), list) for k in ("image_size", "patch_size")):
        # InternVL-hf / Molmo2 save [height, width]; the towers kvplan sizes are square
        vision = {**vision, **{k: vision[k][0] for k in ("image_size", "patch_size")
                               if isinstance(vision.get(k), list)}}
    projector = mm_projector(config, vision)
    if projector and projector.get("tower_layers") is not None:
        vision = {**vision, "num_hidden_layers": projector["tower_layers"]}
    hidden = _int(t, "hidden_size", "n_embd", "d_model")
    heads = _int(t, "num_attention_heads", "n_head", "num_heads", default=0)
    inter = (t.get("intermediate_size") or t.get("ffn_hidden_size") or t.get("n_inner")
             or t.get("ffn_dim") or _lfm2_ff(t))
    if isinstance(inter, list):  # Gemma 3n: one width per layer (`params.mlp_width`)
        inter = max(inter)
    if mt in _MLP_4H and isinstance(hidden, int):
        # vLLM's own width: falcon.py / bloom.py build 4 x hidden whatever the config says;
        # gpt2.py / gpt_bigcode.py / gpt_j.py take n_inner, else 4 x hidden
        inter = 4 * hidden if mt in _FALCON | {"bloom"} else (t.get("n_inner") or 4 * hidden)
    arch = ModelArch(
        model_type=mt,
        architectures=list(config.get("architectures") or t.get("architectures") or []),
        layers=[],
        num_attention_heads=heads,
        hidden_size=hidden,
        intermediate_size=int(inter) if isinstance(inter, (int, float)) else 0,
        vocab_size=0,  # set below, once the layers are known
        config_dtype=str(t.get("dtype") or t.get("torch_dtype") or "auto"),
        max_position=0,
        max_position_source="",
        tie_word_embeddings=bool(t.get("tie_word_embeddings", config.get(
            "tie_word_embeddings", t.get("tie_embedding",  # LFM2: tie_embedding
                                         mt in TIED_BY_DEFAULT)))
            # falcon.py: an unset (None) tie_word_embeddings means tied
            or (mt in _FALCON and t.get("tie_word_embeddings") is None)
            or mt in _ALWAYS_TIED),
        num_experts=int(t.get("num_local_experts") or t.get("num_experts")
                        or t.get("n_routed_experts") or text_entry(t.get("moe_num_experts"))
                        or 0),
        experts_per_tok=int(t.get("num_experts_per_tok") or t.get("experts_per_token")
                            or t.get("top_k_experts") or t.get("moe_top_k") or 0),
        moe_intermediate_size=int(text_entry(t.get("moe_intermediate_size")) or 0),
        shared_expert_intermediate_size=int(t.get("shared_expert_intermediate_size")
                                            or t.get("moe_shared_expert_intermediate_size")
                                            # vLLM llama4.py `Llama4MoE`: one shared expert
                                            # of intermediate_size in every MoE layer
                                            or (t.get("intermediate_size") if t.get(
                                                "model_type") == "llama4_text" else 0)
                                            or 0),
        quantization=t.get("quantization_config") or config.get("quantization_config"),
        text_config=t,
        vision_config=vision,
        audio_config=config.get("audio_config") if isinstance(config.get("audio_config"), dict)
        else None,
        mm_projector=projector,
    )
    arch.mm_prefix_lm = (t.get("use_bidirectional_attention") == "vision"
                         if str(config.get("model_type")).startswith("gemma4")
                         else bool(config["is_mm_prefix_lm"]) if "is_mm_prefix_lm" in config
                         else config.get("model_type") in MM_PREFIX_LM)
    arch.layers = _layers(t, arch)
    if not arch.layers:
        raise BadInput("config declares zero layers",
                       hint="num_hidden_layers (or the model's own layer key) must be 1 or more")
    inner = inner_text_config(config)
    raw = config if inner is None else inner
    arch.defaulted = frozenset(k for k in _TYPE_DEFAULTS.get(mt, {}) if k not in raw)
    text_tie = raw.get("tie_word_embeddings")
    arch.text_tie = text_tie if isinstance(text_tie, bool) else None
    if raw is not config and str(config.get("model_type")) in _COPIES_ROOT_TIE:
        root = config.get("tie_word_embeddings")
        arch.root_tie = root if isinstance(root, bool) else _ROOT_TIE_5X.get(
            str(config.get("model_type")))
    arch.built_plan = not t.get("layer_types") and _built_plan(t, mt, 1) is not None
    _check_kv_heads(arch, t)
    # the embedding and LM head: required (a wrapper may keep it at the top level)
    vocab_keys = ("vocab_size", "padded_vocab_size")
    arch.vocab_size = _int(t if any(t.get(k) is not None for k in vocab_keys) else config,
                           *vocab_keys)
    arch.max_position, arch.max_position_source = max_model_len_of(t)
    if arch.num_experts and arch.experts_per_tok > arch.num_experts:
        # a malformed config: the router picks k of E experts (vLLM's Python does not check
        # it; the top-k kernels index past the router's E columns)
        raise BadInput(f"config routes each token to {arch.experts_per_tok} experts of "
                       f"{arch.num_experts}", hint="the top-k (num_experts_per_tok) must not "
                       "exceed the expert count")
    if (not arch.num_experts and not arch.intermediate_size and mt not in _MLP_ELSEWHERE
            and any(isinstance(x, AttnLayer) for x in arch.layers)):
        # a dense model whose MLP width kvplan cannot read would be sized without its MLP
        raise UnsupportedArchitecture(
            f"config (model_type {mt!r}) gives no MLP width: none of intermediate_size, "
            "ffn_hidden_size, n_inner, ffn_dim", hint="add the field the model's vLLM "
            "implementation reads to the config (or kvplan models add)")
    return arch
