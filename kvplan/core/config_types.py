"""The JSON types real configs give the keys kvplan reads, checked before anything reads them.

A field of another type (`"num_key_value_heads": {}`, `"architectures": true`) is refused
naming the field, instead of failing somewhere in the arithmetic; null is always allowed.
The tables were checked on the 151 configs of ../shared/hf-configs and every catalog entry
(no false refusals), and `benchmarks/fuzz.py` corrupts config fields to keep them honest.
"""

from __future__ import annotations

import math
from typing import Any

from kvplan.errors import BadInput

_COUNT_KEYS = frozenset({
    "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
    "head_dim", "intermediate_size", "vocab_size", "max_position_embeddings", "sliding_window",
    "num_experts", "n_routed_experts", "num_local_experts", "moe_intermediate_size",
    "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
    "num_experts_per_tok", "first_k_dense_replace", "n_shared_experts",
    "shared_expert_intermediate_size", "index_head_dim", "index_n_heads", "index_topk",
    "index_topk_freq", "rotary_dim",
    "global_head_dim", "num_global_key_value_heads", "sliding_window_pattern",
    "attention_chunk_size", "max_window_layers", "num_kv_shared_layers",
    "hidden_size_per_layer_input", "vocab_size_per_layer_input", "linear_num_key_heads",
    "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
    "linear_conv_kernel_dim", "mamba_d_state", "mamba_d_conv", "mamba_expand",
    "mamba_n_heads", "mamba_d_head", "mamba_n_groups", "mamba_num_heads", "mamba_head_dim",
    "ssm_state_size", "conv_kernel", "n_groups", "full_attention_interval",
    "interleave_moe_layer_step", "decoder_sparse_step", "moe_latent_size", "swa_head_dim",
    "swa_num_key_value_heads", "swa_v_head_dim", "n_embd", "n_head", "n_layer", "d_model",
    "num_heads", "n_head_kv", "num_kv_heads", "multi_query_group_num", "num_attention_groups",
    "expand", "moe_shared_expert_intermediate_size", "shared_intermediate_size",
    "moe_num_experts", "num_shared_experts", "moe_top_k", "intermediate_size_mlp",
    "ffn_hidden_size", "n_inner", "block_ff_dim", "routed_expert_hidden_size", "o_lora_rank",
    "o_groups", "top_k_experts", "num_experts_per_token", "experts_per_token",
    "attn_layer_period", "attn_layer_offset", "num_nextn_predict_layers",
    "spatial_merge_size",
    # hybrid plans (Zamba2, PLaMo2, Ling/Ring, IQuest-LoopCoder)
    "group_norm_size", "layer_group_size", "adapter_rank", "num_mem_blocks", "n_mamba_heads",
    "mamba_ngroups", "mamba_step", "hidden_size_per_head", "loop_num", "loop_window_size",
    "short_conv_kernel_size", "chunk_size", "mamba_chunk_size", "num_dense_layers",
    # vision / audio towers, rope scaling, quantization
    "depth", "patch_size", "temporal_patch_size", "out_hidden_size", "in_channels",
    "num_position_embeddings", "position_embedding_size", "vt_hidden_size",
    "vt_intermediate_size", "vt_num_attention_heads", "vt_num_hidden_layers",
    "output_proj_dims", "original_max_position_embeddings", "bits", "w_bit", "num_bits",
    "hc_mult", "max_num_tiles", "image_size", "no_rope_layer_interval", "embed_dim",
    "kv_n_heads", "rope_dim", "conf_num_hidden_layers", "mamba_d_ssm",
    "default_output_length", "pooling_kernel_size", "projector_input_dim",
    "projector_output_dim", "vision_output_dim", "init_pos_emb_height", "init_pos_emb_width",
    "text_hidden_size", "target_hidden_size", "sparse_index_dim", "sparse_block_size",
    "sparse_topk_blocks",
    # drafters (DSpark, DFlash)
    "dspark_block_size", "markov_rank", "dspark_markov_rank", "n_mtp_layers"})
# (not head_dim: transformers saves DeepseekVLV2TextConfig's as 0, which vLLM 0.33's
# `get_head_size` and the models' `head_dim or hidden // heads` read as unset)
_POSITIVE_KEYS = frozenset({"hidden_size", "num_attention_heads", "vocab_size",
                            "global_head_dim", "n_embd", "n_head", "d_model", "num_heads",
                            # layer periods (taken modulo)
                            "full_attention_interval", "decoder_sparse_step",
                            "interleave_moe_layer_step", "attn_layer_period",
                            "sliding_window_pattern", "spatial_merge_size", "patch_size",
                            "no_rope_layer_interval", "image_size"})
# GPTQ writes -1 for per-channel groups; IndexCache's offset may be any integer
_INT_KEYS = frozenset({"group_size", "q_group_size", "index_skip_topk_offset"})
_NUMBER_KEYS = frozenset({"partial_rotary_factor", "rope_theta", "factor", "beta_fast",
                          "beta_slow", "mscale", "mscale_all_dim", "low_freq_factor",
                          "high_freq_factor", "compress_rope_theta", "rope_local_base_freq",
                          "mlp_ratio", "block_ffn_dim_multiplier"})
MAX_LAYERS = 10_000  # the deepest catalog models have 61-126 layers
MAX_ROPE_FACTOR = 1e4  # rope scaling factors in real configs: 4-64
_STR_KEYS = frozenset({"model_type", "torch_dtype", "dtype", "hidden_act",
                       "hybrid_override_pattern", "rope_type", "type", "quant_method",
                       "quant_algo", "fmt", "format", "activation_scheme", "moe_quant_algo",
                       "expert_dtype", "mamba_ssm_dtype", "mamba_ssm_cache_dtype",
                       "topk_method", "kv_cache_quant_algo"})
_LIST_KEYS = {"architectures": str, "layer_types": str, "layers_block_type": str,
              "mlp_only_layers": int, "no_rope_layers": int, "cross_attention_layers": int,
              "compress_ratios": int, "deepstack_visual_indexes": int,
              "fullatt_block_indexes": int, "weight_block_size": int, "mrope_section": int,
              "ignore": str, "modules_to_not_convert": str, "exclude_modules": str,
              "block_configs": dict, "hybrid_layer_pattern": int, "kda_layers": int,
              "attn_layer_indices": int, "sparse_attention_freq": int,
              "compress_rates": int, "merge_kernel_size": int, "target_layer_ids": int,
              "dspark_target_layer_ids": int}
# counts a model may give as a list: per modality, per layer, or [height, width]
_LISTABLE = frozenset({"moe_intermediate_size", "moe_num_experts", "intermediate_size",
                       "image_size", "patch_size"})
_KIND_NAMES = {str: "strings", int: "integers", dict: "objects"}
# objects, whose own fields are checked the same way
# objects whose entries are objects too (compressed-tensors' scheme groups)
_DICT_OF_DICTS = frozenset({"config_groups"})
_DICT_KEYS = frozenset({"quantization_config", "vision_config", "audio_config",
                        # a wrapper's language model (arch.text_config_of)
                        "text_config", "llm_config", "language_config", "thinker_config",
                        "text_model_config",
                        "rope_scaling", "rope_parameters", "attn_config",
                        "linear_attn_config", "full_attention", "sliding_attention",
                        "config_groups", "quantization", "producer",  # last two: ModelOpt
                        "weights", "input_activations",  # a config group's schemes
                        "sparse_attention_config", "dflash_config"})


def check_field_types(t: dict[str, Any], where: str = "") -> None:
    """Refuse a field whose JSON type no real config gives it, naming the field."""
    for k, v in t.items():
        name = where + k
        if v is None:
            continue
        if k in _LISTABLE and isinstance(v, list):
            # ERNIE-4.5-VL's [text, vision] experts, Gemma 3n's per-layer MLP widths,
            # InternVL-hf's [height, width] image and patch sizes
            lo = 1 if k in _POSITIVE_KEYS else 0
            if not v or any(isinstance(x, bool) or not isinstance(x, int) or x < lo for x in v):
                what = "positive" if lo else "non-negative"
                raise BadInput(f"config field {name!r} must be a {what} integer or a list of "
                               f"them, got {v!r}")
        elif k == "sliding_window_pattern" and isinstance(v, str):
            # EXAONE 4 writes it as letters ("LLLG": local, local, local, global)
            if not v or set(v) - set("LG"):
                raise BadInput(f"config field {name!r} must be a positive integer or a "
                               f"string of L (sliding) and G (global) layers, got {v!r}")
        elif k in _COUNT_KEYS or k in _INT_KEYS:
            lo = -2**53 if k in _INT_KEYS else 0
            # a float, even 32.0: no real config writes one, and vLLM builds tensor shapes
            # from the counts (`LlamaAttention`'s head_dim = hidden // heads becomes 128.0)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v < 2**53:
                raise BadInput(f"config field {name!r} must be a"
                               f"{'n' if lo else ' non-negative'} integer, got {v!r}")
            if v == 0 and k in _POSITIVE_KEYS:
                raise BadInput(f"config field {name!r} must be positive, got 0")
            if v == 0 and k in ("group_size", "q_group_size"):  # the loaders divide by it
                raise BadInput(f"config field {name!r} must be positive, or -1 for one "
                               "group per channel, got 0")
            if k in ("num_hidden_layers", "n_layer") and v > MAX_LAYERS:
                raise BadInput(f"config field {name!r} is {v}: not a plausible layer count "
                               f"(kvplan builds one entry per layer; it takes up to {MAX_LAYERS})")
        elif k in _NUMBER_KEYS and (isinstance(v, bool) or not isinstance(v, (int, float))
                                    or not math.isfinite(v)):
            raise BadInput(f"config field {name!r} must be a number, got {v!r}")
        elif k == "partial_rotary_factor" and not 0 < v <= 1:
            raise BadInput(f"config field {name!r} must be in (0, 1], got {v!r}")
        elif k == "factor" and not 0 < v <= MAX_ROPE_FACTOR:
            raise BadInput(f"config field {name!r} must be in (0, {MAX_ROPE_FACTOR:g}], "
                           f"got {v!r}")
        elif k in _STR_KEYS and not isinstance(v, str):
            raise BadInput(f"config field {name!r} must be a string, got {v!r}")
        elif k in _DICT_KEYS:
            if not isinstance(v, dict):
                raise BadInput(f"config field {name!r} must be an object, got {v!r}")
            if k in _DICT_OF_DICTS:  # every entry is itself an object
                for gk, g in v.items():
                    if g is not None and not isinstance(g, dict):
                        raise BadInput(f"config field {f'{name}.{gk}'!r} must be an "
                                       f"object, got {g!r}")
                    check_field_types(g or {}, f"{name}.{gk}.")
            check_field_types(v, f"{name}.")
        elif k in _LIST_KEYS:
            kind = _LIST_KEYS[k]
            if not isinstance(v, list) or not all(
                    isinstance(x, kind) and not isinstance(x, bool) for x in v):
                raise BadInput(f"config field {name!r} must be a list of "
                               f"{_KIND_NAMES[kind]}, got {v!r}")
            if k == "weight_block_size" and (len(v) != 2 or min(v) < 1):
                # fp8.py `Fp8Config`: "The quantization block size of weight must have 2
                # dimensions"; the block divides the weight's rows and columns
                raise BadInput(f"config field {name!r} must be two positive integers "
                               f"([rows, columns] of a weight block), got {v!r}")
