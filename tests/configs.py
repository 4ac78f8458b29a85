"""Model config fields as published in the models' HF config.json files, trimmed to what
sizing reads, so the core tests need no catalog or network. NEMOTRON_H_8B keeps
Nemotron-H-8B's layer shapes but only 8 layers, to keep the hand computation short."""

LLAMA31_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "max_position_embeddings": 131072, "vocab_size": 128256,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}
QWEN25_7B_INSTRUCT = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
    "intermediate_size": 18944, "num_attention_heads": 28, "num_hidden_layers": 28,
    "num_key_value_heads": 4, "max_position_embeddings": 32768, "vocab_size": 152064,
    "sliding_window": 131072, "use_sliding_window": False, "max_window_layers": 28,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
    "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_attention_heads": 128,
    "num_key_value_heads": 128, "num_hidden_layers": 61, "kv_lora_rank": 512,
    "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
    "first_k_dense_replace": 3, "moe_layer_freq": 1, "max_position_embeddings": 163840,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                     "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                     "type": "yarn"},
    "vocab_size": 129280, "torch_dtype": "bfloat16", "topk_method": "noaux_tc",
}
DEEPSEEK_V32 = {**DEEPSEEK_V3, "architectures": ["DeepseekV32ForCausalLM"],
                "model_type": "deepseek_v32", "index_head_dim": 128, "index_n_heads": 64,
                "index_topk": 2048}
GEMMA2_9B = {
    "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "head_dim": 256,
    "hidden_size": 3584, "intermediate_size": 14336, "max_position_embeddings": 8192,
    "num_attention_heads": 16, "num_hidden_layers": 42, "num_key_value_heads": 8,
    "sliding_window": 4096, "torch_dtype": "float32", "vocab_size": 256000,
}
GEMMA3_12B = {
    "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
    "text_config": {"hidden_size": 3840, "intermediate_size": 15360, "model_type": "gemma3_text",
                    "num_attention_heads": 16, "num_hidden_layers": 48,
                    "num_key_value_heads": 8, "rope_scaling": {"factor": 8.0,
                                                               "rope_type": "linear"},
                    "sliding_window": 1024},
    "torch_dtype": "bfloat16",
    "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
                      "num_hidden_layers": 27, "patch_size": 14},
}
MISTRAL_7B_V01 = {
    "architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 4096,
    "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "max_position_embeddings": 32768, "sliding_window": 4096,
    "rope_theta": 10000.0, "vocab_size": 32000, "torch_dtype": "bfloat16",
}
QWEN3_NEXT_80B = {
    "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "hidden_size": 2048,
    "head_dim": 256, "intermediate_size": 5120, "moe_intermediate_size": 512,
    "num_attention_heads": 16, "num_key_value_heads": 2, "num_hidden_layers": 48,
    "full_attention_interval": 4, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
    "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_value_head_dim": 128,
    "num_experts": 512, "num_experts_per_tok": 10, "shared_expert_intermediate_size": 512,
    "max_position_embeddings": 262144, "vocab_size": 151936, "torch_dtype": "bfloat16",
}
JAMBA_15_MINI = {
    "architectures": ["JambaForCausalLM"], "model_type": "jamba", "hidden_size": 4096,
    "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
    "num_hidden_layers": 32, "attn_layer_period": 8, "attn_layer_offset": 4,
    "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_dt_rank": 256,
    "num_experts": 16, "num_experts_per_tok": 2, "expert_layer_period": 2,
    "expert_layer_offset": 1, "max_position_embeddings": 262144, "vocab_size": 65536,
    "torch_dtype": "bfloat16",
}
GEMMA4_E2B = {
    "architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
    "text_config": {
        "model_type": "gemma4_text", "head_dim": 256, "global_head_dim": 512,
        "hidden_size": 1536, "intermediate_size": 6144, "num_attention_heads": 8,
        "num_hidden_layers": 35, "num_key_value_heads": 1, "num_kv_shared_layers": 20,
        "sliding_window": 512, "max_position_embeddings": 131072, "vocab_size": 262144,
        "layer_types": (["sliding_attention"] * 4 + ["full_attention"]) * 7,
    },
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
}
FALCON_7B = {
    "architectures": ["FalconForCausalLM"], "model_type": "falcon", "hidden_size": 4544,
    "num_attention_heads": 71, "num_hidden_layers": 32, "multi_query": True,
    "new_decoder_architecture": False, "parallel_attn": True, "vocab_size": 65024,
    "torch_dtype": "bfloat16",
}
NEMOTRON_H_8B = {
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "hidden_size": 4096,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
    "num_hidden_layers": 8, "hybrid_override_pattern": "M-M*M-M-",
    "mamba_num_heads": 128, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8,
    "conv_kernel": 4, "chunk_size": 128, "intermediate_size": 21504,
    "max_position_embeddings": 8192, "vocab_size": 131072, "torch_dtype": "bfloat16",
}
FALCON_H1_7B = {
    "architectures": ["FalconH1ForCausalLM"], "model_type": "falcon_h1", "hidden_size": 3072,
    "intermediate_size": 12288, "num_attention_heads": 12, "num_key_value_heads": 2,
    "head_dim": 256, "num_hidden_layers": 44, "mamba_d_ssm": 3072, "mamba_n_heads": 24,
    "mamba_d_head": 128, "mamba_n_groups": 1, "mamba_d_state": 256, "mamba_d_conv": 4,
    "mamba_expand": 2, "max_position_embeddings": 262144, "vocab_size": 130049,
    "torch_dtype": "bfloat16",
}
KIMI_LINEAR_48B = {  # Kimi-Linear-48B-A3B layout: 27 layers, every 4th (and the last) MLA
    "architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear",
    "hidden_size": 2304, "intermediate_size": 9216, "moe_intermediate_size": 1024,
    "num_attention_heads": 32, "num_key_value_heads": 32, "num_hidden_layers": 27,
    "kv_lora_rank": 512, "q_lora_rank": None, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "v_head_dim": 128, "num_experts": 256, "num_experts_per_token": 8, "num_shared_experts": 1,
    "first_k_dense_replace": 1, "moe_layer_freq": 1, "vocab_size": 163840,
    "max_position_embeddings": 1048576, "torch_dtype": "bfloat16",
    "linear_attn_config": {"full_attn_layers": [4, 8, 12, 16, 20, 24, 27],
                           "kda_layers": [i for i in range(1, 27) if i % 4],
                           "num_heads": 32, "head_dim": 128, "short_conv_kernel_size": 4},
}
LFM2_12B = {  # LiquidAI/LFM2-1.2B layout: 10 short-convolution + 6 attention layers
    "architectures": ["Lfm2ForCausalLM"], "model_type": "lfm2", "hidden_size": 2048,
    "block_ff_dim": 12288, "block_auto_adjust_ff_dim": True, "block_ffn_dim_multiplier": 1.0,
    "block_multiple_of": 256, "conv_L_cache": 3, "full_attn_idxs": [2, 5, 8, 10, 12, 14],
    "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 16,
    "max_position_embeddings": 128000, "vocab_size": 65536, "tie_embedding": True,
    "torch_dtype": "bfloat16",
}
MINIMAX_M3_TEXT = {  # MiniMax-M3 text model: 3 dense + 57 MSA sparse layers (index cache)
    "architectures": ["MiniMaxM3SparseForCausalLM"], "model_type": "minimax_m3",
    "hidden_size": 6144, "intermediate_size": 3072, "num_hidden_layers": 60,
    "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 128,
    "num_local_experts": 128, "num_experts_per_tok": 4, "vocab_size": 200064,
    "max_position_embeddings": 1048576, "dtype": "bfloat16",
    "sparse_attention_config": {"use_sparse_attention": True, "sparse_index_dim": 128,
                                "sparse_num_index_heads": 4, "sparse_block_size": 128,
                                "sparse_attention_freq": [0, 0, 0] + [1] * 57},
}
DEEPSEEK_V4_FLASH = {  # deepseek-ai/DeepSeek-V4-Flash (KV-relevant fields of its config.json)
    "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4",
    "hidden_size": 4096, "num_hidden_layers": 43, "num_attention_heads": 64,
    "num_key_value_heads": 1, "head_dim": 512, "qk_rope_head_dim": 64, "q_lora_rank": 1024,
    "o_lora_rank": 1024, "o_groups": 8, "index_head_dim": 128, "index_n_heads": 64,
    "sliding_window": 128, "moe_intermediate_size": 2048, "n_routed_experts": 256,
    "n_shared_experts": 1, "num_experts_per_tok": 6, "vocab_size": 129280,
    "max_position_embeddings": 1048576, "torch_dtype": "bfloat16", "expert_dtype": "fp4",
    "rope_scaling": {"type": "yarn", "factor": 16, "original_max_position_embeddings": 65536},
    "compress_ratios": [0, 0] + [4, 128] * 20 + [4, 0],  # 43 layers + the MTP entry
    "quantization_config": {"quant_method": "fp8", "fmt": "e4m3",
                            "weight_block_size": [128, 128]},
}
# allenai/Olmo-Hybrid-7B: the model card's table, OLMo-core's pretraining script and
# transformers' OlmoHybridConfig defaults (which name this checkpoint) agree; no RoPE
OLMO_HYBRID_7B = {
    "architectures": ["OlmoHybridForCausalLM"], "model_type": "olmo_hybrid", "hidden_size": 3840,
    "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 30,
    "num_key_value_heads": 30, "layer_types": ["linear_attention"] * 3 + ["full_attention"],
    "linear_num_key_heads": 30, "linear_num_value_heads": 30, "linear_key_head_dim": 96,
    "linear_value_head_dim": 192, "linear_conv_kernel_dim": 4, "vocab_size": 100352,
    "max_position_embeddings": 65536, "rope_parameters": {"rope_theta": None},
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}
OLMO_HYBRID_7B["layer_types"] = OLMO_HYBRID_7B["layer_types"] * 8
# yandex/AliceAI-Foundation-80B-A3B-Base, from its model card's table and the config class's
# defaults (Qwen3NextConfig); the parameter count reproduces the card's 81,286,433,408
ALICE_AI_80B = {
    "architectures": ["AliceAIForCausalLM"], "model_type": "alice_ai", "hidden_size": 2048,
    "num_hidden_layers": 48, "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 12,
    "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
    "partial_rotary_factor": 0.25, "linear_num_key_heads": 32, "linear_num_value_heads": 32,
    "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
    "num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512, "vocab_size": 129024,
    "max_position_embeddings": 262144, "rope_theta": 1000000.0, "tie_word_embeddings": False,
    "kda_allow_negative_eigenvalues": False, "block_attn_res_block_size": 4,
    "torch_dtype": "bfloat16",
}
# inclusionAI/Ring-2.5-1T (BailingMoeV2_5): a transformers BailingHybridConfig's defaults that
# name the checkpoint; head_dim 128, the only value its weight shapes allow
RING_25_1T = {
    "architectures": ["BailingMoeV2_5ForCausalLM"], "model_type": "bailing_hybrid",
    "num_hidden_layers": 80, "hidden_size": 8192, "num_attention_heads": 64,
    "num_key_value_heads": 64, "head_dim": 128, "layer_group_size": 8, "group_norm_size": 8,
    "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
    "v_head_dim": 128, "intermediate_size": 18432, "moe_intermediate_size": 2048,
    "moe_shared_expert_intermediate_size": 2048, "num_experts": 256, "num_shared_experts": 1,
    "num_experts_per_tok": 8, "first_k_dense_replace": 4, "vocab_size": 157184,
    "max_position_embeddings": 131072, "tie_word_embeddings": False, "use_qk_norm": True,
    "torch_dtype": "bfloat16",
}
# inclusionAI/Ling-3.0-flash (BailingMoeV3): the config facts a port pins against the real
# safetensors index (MLA layers 5, 11, ..., 41)
LING_30_FLASH = {
    "architectures": ["BailingMoeV3ForCausalLM"], "model_type": "bailing_hybrid",
    "num_hidden_layers": 42, "hidden_size": 2560, "num_attention_heads": 32,
    "num_key_value_heads": 32, "head_dim": 128, "layer_group_size": 6,
    "short_conv_kernel_size": 4, "no_kda_lora": True, "kv_lora_rank": 512, "q_lora_rank": None,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "intermediate_size": 6144, "moe_intermediate_size": 768,
    "moe_shared_expert_intermediate_size": 768, "num_experts": 512, "num_shared_experts": 1,
    "num_experts_per_tok": 8, "first_k_dense_replace": 2, "vocab_size": 157184,
    "max_position_embeddings": 262144, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}
# Zyphra/Zamba2-2.7B: Zyphra's standalone checkpoint config (Zyphra/Zamba2 config.json and
# mamba_config.py) in transformers' key names; hybrid (shared attention) layers as listed there
ZAMBA2_27B = {
    "architectures": ["Zamba2ForCausalLM"], "model_type": "zamba2", "hidden_size": 2560,
    "num_hidden_layers": 54,
    "layers_block_type": ["hybrid" if i in (6, 12, 18, 24, 30, 36, 42, 47, 51) else "mamba"
                          for i in range(54)],
    "mamba_d_state": 64, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_ngroups": 1,
    "n_mamba_heads": 80, "num_attention_heads": 32, "num_key_value_heads": 32,
    "intermediate_size": 10240, "num_mem_blocks": 2, "use_shared_attention_adapter": False,
    "adapter_rank": 128, "vocab_size": 32000, "max_position_embeddings": 4096,
    "tie_word_embeddings": True, "torch_dtype": "bfloat16",
}
# pfnet/plamo-2-1b, as two independent ports copy the checkpoint's config
PLAMO2_1B = {
    "architectures": ["Plamo2ForCausalLM"], "model_type": "plamo2", "hidden_size": 2048,
    "num_hidden_layers": 16, "num_attention_heads": 16, "num_key_value_heads": 1,
    "hidden_size_per_head": 128, "max_position_embeddings": 10485760,
    "attention_window_size": 2048, "mamba_d_state": 64, "mamba_d_conv": 4,
    "mamba_num_heads": 32, "mamba_step": 2, "intermediate_size": 8192, "vocab_size": 100000,
    "tie_word_embeddings": True, "torch_dtype": "bfloat16",
}
MAMBA2_7B = {  # an attention-free Mamba2 of Mamba-Codestral-7B's layout
    "architectures": ["Mamba2ForCausalLM"], "model_type": "mamba2", "hidden_size": 4096,
    "num_hidden_layers": 64, "num_heads": 128, "head_dim": 64, "state_size": 128,
    "n_groups": 8, "expand": 2, "conv_kernel": 4, "chunk_size": 256, "vocab_size": 32768,
    "torch_dtype": "bfloat16", "tie_word_embeddings": False,
}
FALCON_MAMBA_7B = {  # tiiuae/falcon-mamba-7b's layout (Mamba1, weight-free B/C/dt norms)
    "architectures": ["FalconMambaForCausalLM"], "model_type": "falcon_mamba",
    "hidden_size": 4096, "intermediate_size": 8192, "expand": 16, "num_hidden_layers": 64,
    "state_size": 16, "conv_kernel": 4, "time_step_rank": 256, "use_conv_bias": True,
    "use_bias": False, "vocab_size": 65024, "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
}
