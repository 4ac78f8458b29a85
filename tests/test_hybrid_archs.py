"""Hybrid architectures beyond the Nemotron-H / Jamba / Qwen3-Next families: OLMo Hybrid,
AliceAI, the Ling/Ring (bailing_hybrid) models, Zamba2 and PLaMo2. Hand-computed from the
state-shape functions each model calls (docs/methodology.md §1)."""

import pytest
from configs import ALICE_AI_80B, LING_30_FLASH, OLMO_HYBRID_7B, PLAMO2_1B, RING_25_1T, ZAMBA2_27B

from kvplan.core.arch import StateLayer, normalize, release_layers, valid_tps
from kvplan.core.params import count_params
from kvplan.core.sizing import EngineArgs, Gpu, Model, size
from kvplan.errors import BadInput

GiB = 1 << 30
H100 = Gpu("h100-sxm", "NVIDIA H100 80GB HBM3", 81089 * (1 << 20), "9.0")
B200 = Gpu("b200", "NVIDIA B200", 182642 * (1 << 20), "10.0")


def run(cfg, gpu=H100, version="0.33", **kw):
    kw.setdefault("kv_cache_memory_bytes", 8 * GiB)
    return size(Model("m", cfg), gpu, EngineArgs(**kw), version)


@pytest.mark.parametrize("tp", [1, 2])
def test_olmo_hybrid_gdn_and_attention(tp):
    r = run(OLMO_HYBRID_7B, tensor_parallel_size=tp)
    # 8 attention layers (3, 7, ..., 31) of 30/tp KV heads x (128 + 128) x 2 B; head size is
    # hidden // heads = 3,840 / 30
    assert r.kv_bytes_per_token_per_gpu == 8 * 30 // tp * 256 * 2 == 122880 // tp
    # 24 GDN layers: conv (2 x 30 x 96 + 30 x 192)/tp x 3 x 2 B + ssm 30/tp x 192 x 96 x 2 B
    assert r.state_bytes_per_request_per_gpu == 24 * (11520 // tp * 3 * 2 + 30 // tp * 192 * 96 * 2)
    assert r.state_bytes_per_request_per_gpu == 28200960 // tp
    assert r.arch.family_label == "full attention + Gated DeltaNet"


def test_olmo_hybrid_head_size_defaults_and_no_flashinfer_checkpoint():
    # a head_dim key does not change vLLM's hidden // heads; absent linear_* fields take
    # OlmoHybridConfig's defaults (key dim int(0.75 x 3,840 / 30) = 96, value dim 192)
    bare = {k: v for k, v in OLMO_HYBRID_7B.items() if not k.startswith("linear_")}
    for cfg in ({**OLMO_HYBRID_7B, "head_dim": 8}, bare):
        assert normalize(cfg).layers == normalize(OLMO_HYBRID_7B).layers
    # OLMo's GDN has no FlashInfer prefill checkpoint (Qwen's does, 0.33 on SM90+): no
    # 64-token alignment, two states per request in 'align' mode: 16 x cdiv(1,175,040,
    # 16 x 15,360) = 80 tokens a block
    r = run(OLMO_HYBRID_7B)
    assert r.block_size == 80
    assert r.blocks_per_request == 65536 // 80 + 1 + 2 * 3  # 3 GDN groups of 8
    assert valid_tps(normalize(OLMO_HYBRID_7B)) == [1, 2, 3, 5, 6, 10, 15]
    # no rotary cache while rope_theta is null; the parameters: transformers' 7.43 B less
    # the GDN's dt_bias, A_log and o_norm (252 a layer) kvplan leaves out
    assert r.rope_cache_bytes == 0
    assert count_params(normalize(OLMO_HYBRID_7B)).total == 7430870688 - 24 * 252


@pytest.mark.parametrize("tp", [1, 2])
def test_alice_ai_kda_float32_state(tp):
    r = run(ALICE_AI_80B, tensor_parallel_size=tp)
    assert r.kv_bytes_per_token_per_gpu == 12 * 2 * max(1, 2 // tp) * 256 * 2  # 24,576 at TP1
    # 36 KDA layers: conv 3 x 32 x 128 / tp x 3 x 2 B + recurrent 32/tp x 128 x 128 x 4 B
    per_layer = 12288 // tp * 3 * 2 + 32 // tp * 128 * 128 * 4
    assert r.state_bytes_per_request_per_gpu == 36 * per_layer == 78151680 // tp
    # AliceAI calls kda_state_dtype without --mamba-ssm-cache-dtype: bfloat16 does not shrink
    # the state and float16 is not refused
    for dt in ("bfloat16", "float16"):
        s = run(ALICE_AI_80B, tensor_parallel_size=tp, mamba_ssm_cache_dtype=dt)
        assert s.state_bytes_per_request_per_gpu == r.state_bytes_per_request_per_gpu


def test_alice_ai_refusals_and_parameters():
    with pytest.raises(BadInput, match="as many key as value heads"):
        normalize({**ALICE_AI_80B, "linear_value_head_dim": 64})
    with pytest.raises(BadInput, match="kda_allow_negative_eigenvalues"):
        normalize({**ALICE_AI_80B, "kda_allow_negative_eigenvalues": True})
    with pytest.raises(BadInput, match="does not have AliceAIForCausalLM"):
        run(ALICE_AI_80B, version="0.32")
    # the card's 81,286,433,408 less the MTP block vLLM drops = 79,635,961,472, less the small
    # parameters kvplan leaves out: per KDA layer dt_bias, A_log, o_norm (4,256), per layer
    # the router's correction bias, shared-expert gate and the residual projections/norms
    # (6,656), 4,096 more per layer after the first, q/k norms (512) per attention layer and
    # the final residual projection and norm (4,096)
    left_out = 36 * 4256 + 48 * 6656 + 47 * 4096 + 12 * 512 + 4096
    assert count_params(normalize(ALICE_AI_80B)).total == 79635961472 - left_out


def test_ring_lightning_attention_state():
    r = run(RING_25_1T, gpu=B200, tensor_parallel_size=8, kv_cache_memory_bytes=40 * GiB)
    # 10 MLA layers (7, 15, ..., 79) of 576 x 2 B, replicated; 70 lightning layers of one
    # [64/8, 128, 128] bf16 state, no conv state
    assert r.kv_bytes_per_token_per_gpu == 10 * 1152
    assert r.state_bytes_per_request_per_gpu == 70 * 8 * 128 * 128 * 2
    assert r.block_size == 256  # MLA's 128 x cdiv(262,144, 128 x 1,152)
    assert r.arch.family_label == "MLA + lightning attention"
    # --mamba-cache-dtype sets the state's dtype; float32 is refused before 0.20.1
    f = run(RING_25_1T, gpu=B200, tensor_parallel_size=8, kv_cache_memory_bytes=40 * GiB,
            mamba_cache_dtype="float32")
    assert f.state_bytes_per_request_per_gpu == 2 * r.state_bytes_per_request_per_gpu
    with pytest.raises(BadInput, match="fp32 state for minimax"):
        run(RING_25_1T, gpu=B200, version="0.20.0", tensor_parallel_size=8,
            mamba_cache_dtype="float32")
    # tp <= group_norm_size, which it must divide (`BailingMoELinearAttention`)
    assert valid_tps(normalize(RING_25_1T)) == [1, 2, 4, 8]
    assert valid_tps(normalize({**RING_25_1T, "group_norm_size": None})) == [1]
    # parameters from vLLM's shapes (a helper's count: 1,012,231,160,320 with the fp32 router
    # bias and the per-layer norms kvplan counts differently: 19,456)
    assert count_params(normalize(RING_25_1T)).total == 1012231160320 - 19456


@pytest.mark.parametrize("tp,block", [(1, 1920), (2, 1024)])
def test_ling_v3_kda_and_trailing_mla(tp, block):
    r = run(LING_30_FLASH, gpu=B200, tensor_parallel_size=tp, kv_cache_memory_bytes=40 * GiB)
    arch = normalize(LING_30_FLASH)
    mla = [i for i, x in enumerate(arch.layers) if x.kind == "mla"]
    assert mla == [5, 11, 17, 23, 29, 35, 41]
    assert r.kv_bytes_per_token_per_gpu == 7 * 1152
    per_layer = 12288 // tp * 3 * 2 + 32 // tp * 128 * 128 * 4  # recurrent state float32
    assert r.state_bytes_per_request_per_gpu == 35 * per_layer
    assert r.block_size == block  # 128 x cdiv(per_layer, 128 x 1,152)
    s = run(LING_30_FLASH, gpu=B200, tensor_parallel_size=tp, kv_cache_memory_bytes=40 * GiB,
            mamba_ssm_cache_dtype="bfloat16")
    assert s.state_bytes_per_request_per_gpu == r.state_bytes_per_request_per_gpu
    # 44 layers: the two past the last whole group of 6 are MLA
    odd = normalize({**LING_30_FLASH, "num_hidden_layers": 44})
    assert [i for i, x in enumerate(odd.layers) if x.kind == "mla"][-3:] == [41, 42, 43]


@pytest.mark.parametrize("tp", [1, 2])
def test_zamba2_shared_attention_keeps_a_cache_per_hybrid_layer(tp):
    r = run(ZAMBA2_27B, tensor_parallel_size=tp)
    # 9 hybrid layers, each its own cache: 32/tp heads (no GQA) of 2 x 2,560 / 32 = 160
    assert r.kv_bytes_per_token_per_gpu == 9 * 32 // tp * (160 + 160) * 2 == 184320 // tp
    # 54 Mamba2 states (the hybrid layers have one too): conv (5,120 + 2 x g' x 64)/tp x 3 x
    # 2 B with the one group padded to g' = tp, ssm 80/tp x 64 x 64 x 2 B
    conv = (5120 + 2 * tp * 64) // tp * 3 * 2
    assert r.state_bytes_per_request_per_gpu == 54 * (conv + 80 // tp * 64 * 64 * 2)
    assert r.state_bytes_per_request_per_gpu == {1: 37089792, 2: 18565632}[tp]


def test_zamba2_parameters_length_and_no_pipeline():
    # shared blocks counted once per num_mem_blocks, not per hybrid layer: 2,662,218,880
    # 16-bit units (54 mixers of 39,888,320 (A's 80 fp32 values as two units each), 9
    # linears and MLP adapters, 2 blocks of 170,401,280, the tied embedding and the final
    # norm, from vLLM's shapes)
    assert count_params(normalize(ZAMBA2_27B)).total == 2662218880
    # `add_bias_linear` gives the mixers their in/out projection biases
    assert count_params(normalize({**ZAMBA2_27B, "add_bias_linear": True})).total == (
        2662218880 + 54 * (5120 + (5120 + 2 * 64) + 80 + 2560))
    assert normalize({**ZAMBA2_27B, "use_long_context": True}).max_position == 16384
    with pytest.raises(BadInput, match="no SupportsPP"):
        run(ZAMBA2_27B, pipeline_parallel_size=2)
    with pytest.raises(BadInput, match="no SupportsPP"):
        run(ALICE_AI_80B, pipeline_parallel_size=2)


@pytest.mark.parametrize("tp", [1, 2])
def test_plamo2_alternating_mamba_without_groups(tp):
    r = run(PLAMO2_1B, version="0.26", tensor_parallel_size=tp, max_model_len=32768)
    # odd layers attention: 1 KV head (replicated) x (128 + 128) x 2 B; no sliding window
    assert r.kv_bytes_per_token_per_gpu == 8 * 512
    assert all(x.kind == "full" for x in r.arch.layers[1::2])
    # even layers: conv 32 x 128 / tp x 3 x 2 B (no B/C groups) + ssm 32/tp x 128 x 64 x 2 B
    assert r.state_bytes_per_request_per_gpu == 8 * (4096 // tp * 6 + 32 // tp * 128 * 64 * 2)
    assert count_params(normalize(PLAMO2_1B)).total == 1291441920
    # no Mamba prefix-caching support: with prefix caching 'align' (two states a request), not
    # 'all' (a state a block; 0.15-0.26)
    p = run(PLAMO2_1B, version="0.26", tensor_parallel_size=tp, max_model_len=32768,
            enable_prefix_caching=True)
    assert p.blocks_per_request == -(-32768 // p.block_size) + 2
    # its mixer's conv state does not widen with speculative tokens
    from kvplan.core.specdec import widen_states
    from kvplan.core.versions import VllmVersion

    wide = widen_states(r.arch.layers, 3, VllmVersion.of("0.26"))
    assert wide[0].d_conv == 4
    with pytest.raises(BadInput, match="no longer runs"):
        run(PLAMO2_1B, max_model_len=32768)


def test_review26_release_rules_and_refusals():
    # no SupportsPP by release: gpt-oss gained it in 0.10.2 (`GptOssForCausalLM(nn.Module)`
    # in 0.10.1), DeepSeek-V4 in 0.21
    gpt_oss = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss",
               "hidden_size": 2880, "num_hidden_layers": 24, "num_attention_heads": 64,
               "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 2880,
               "num_local_experts": 32, "num_experts_per_tok": 4, "vocab_size": 201088,
               "max_position_embeddings": 131072, "sliding_window": 128,
               "layer_types": ["sliding_attention", "full_attention"] * 12,
               "torch_dtype": "bfloat16"}
    with pytest.raises(BadInput, match="for GptOssForCausalLM") as e:
        run(gpt_oss, version="0.10.1", pipeline_parallel_size=2)
    assert e.value.hint.endswith("or vLLM 0.10.2+ which has it")
    assert run(gpt_oss, version="0.10.2", pipeline_parallel_size=2).block_size == 16
    # the float32 lightning refusal (0.17-0.20.0) is for the literal --mamba-cache-dtype; a
    # float32 model's auto state is built
    small = {**RING_25_1T, "num_hidden_layers": 8, "hidden_size": 1024, "num_attention_heads": 8,
             "num_key_value_heads": 8, "num_experts": 8, "vocab_size": 1000}
    r = run(small, version="0.18", dtype="float32")
    assert r.state_bytes_per_request_per_gpu == 7 * 8 * 128 * 128 * 4
    # linear-attention heads must split: 16 GDN value heads at TP 3
    olmo16 = {**OLMO_HYBRID_7B, "linear_num_key_heads": 16, "linear_num_value_heads": 16,
              "linear_key_head_dim": 128, "linear_value_head_dim": 256}
    assert valid_tps(normalize(olmo16)) == [1, 2]
    # configs vLLM refuses at model build
    with pytest.raises(BadInput, match="no_kda_lora"):
        normalize({**LING_30_FLASH, "no_kda_lora": False})
    with pytest.raises(BadInput, match="mamba_step > 1"):
        normalize({**PLAMO2_1B, "mamba_step": 1})
    with pytest.raises(BadInput, match="block_attn_res_block_size"):
        normalize({k: v for k, v in ALICE_AI_80B.items() if k != "block_attn_res_block_size"})
    with pytest.raises(BadInput, match="'n_mamba_heads' must be positive"):
        normalize({**ZAMBA2_27B, "n_mamba_heads": 0})
    assert valid_tps(normalize({**RING_25_1T, "group_norm_size": 0})) == []
    # OLMo Hybrid's legacy layer names, as transformers 5 remaps them
    legacy = {**OLMO_HYBRID_7B, "layer_types": ["mamba"] * 3 + ["attention"]}
    legacy["layer_types"] = legacy["layer_types"] * 8
    assert normalize(legacy).layers == normalize(OLMO_HYBRID_7B).layers


def test_review26_rotary_caches():
    # PLaMo2 always builds a rope over min(max_position_embeddings, max_model_len): 8,192 x 128
    # x 2 B, not 10,485,760 rows
    assert run(PLAMO2_1B, version="0.26", max_model_len=8192).rope_cache_bytes == 8192 * 128 * 2
    # Ring's lightning layers have their own neox rope (131,072 x 128) beside MLA's
    # (131,072 x 64), with theta 10,000 when the config names none
    r = run(RING_25_1T, gpu=B200, tensor_parallel_size=8, kv_cache_memory_bytes=40 * GiB)
    assert r.rope_cache_bytes == 131072 * 128 * 2 + 131072 * 64 * 2
    # OLMo Hybrid: transformers 5 fills rope_theta when absent, so vLLM builds one; an explicit
    # null turns it off
    bare = {k: v for k, v in OLMO_HYBRID_7B.items() if k != "rope_parameters"}
    assert run(bare).rope_cache_bytes == 65536 * 128 * 2


@pytest.mark.parametrize("cfg,field,value", [
    (PLAMO2_1B, "mamba_step", []), (ZAMBA2_27B, "n_mamba_heads", [1]),
    (ZAMBA2_27B, "hidden_size", 2), (RING_25_1T, "group_norm_size", ""),
    (ZAMBA2_27B, "adapter_rank", "x"), (OLMO_HYBRID_7B, "hidden_size", 2)])
def test_malformed_hybrid_fields_are_bad_input(cfg, field, value):
    # fuzzed values that raised TypeError / ZeroDivisionError (exit 3) before
    with pytest.raises(BadInput):
        run({**cfg, field: value})


def test_minimax_m1_lightning_and_softmax_layers():
    # MiniMaxAI/MiniMax-M1 config.json (a repository copy): a softmax layer after every 7
    # lightning layers (`attn_type_list`), 64 heads of 128, 8 KV heads; vLLM 0.10.1-0.23 V1
    cfg = {"architectures": ["MiniMaxM1ForCausalLM"], "model_type": "minimax_m1",
           "attn_type_list": ([0] * 7 + [1]) * 10, "head_dim": 128, "hidden_size": 6144,
           "intermediate_size": 9216, "max_position_embeddings": 10240000,
           "num_attention_heads": 64, "num_experts_per_tok": 2, "num_hidden_layers": 80,
           "num_key_value_heads": 8, "num_local_experts": 32, "rope_theta": 10000000,
           "rotary_dim": 64, "shared_intermediate_size": 0, "sliding_window": None,
           "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 200064}
    r = run(cfg, gpu=B200, version="0.23", tensor_parallel_size=8, max_model_len=131072,
            kv_cache_memory_bytes=16 * GiB)
    assert r.kv_bytes_per_token_per_gpu == 10 * 2 * 1 * 128 * 2  # 8 KV heads over 8 GPUs
    assert r.state_bytes_per_request_per_gpu == 70 * 8 * 128 * 128 * 2  # [64/8, 128, 128]
    assert r.block_size == 512  # 16 x cdiv(262,144, 16 x 512)
    # fp32 rotary cache of rotary_dim 64 over min(max_position_embeddings, max_model_len)
    assert r.rope_cache_bytes == 131072 * 64 * 4
    # 456 B parameters (the model card): experts, lightning and softmax attention, embeddings
    h = 6144
    assert count_params(normalize(cfg)).total == (
        80 * (32 * 3 * h * 9216 + h * 32 + 2 * h) + 70 * (5 * h * 8192 + 8192)
        + 10 * (h * 8192 + 2 * h * 1024 + 8192 * h) + 2 * 200064 * h + h)
    with pytest.raises(BadInput, match="V0 engine"):
        run(cfg, version="0.10.0", tensor_parallel_size=8, max_model_len=131072)
    with pytest.raises(BadInput, match="no longer runs"):
        run(cfg, tensor_parallel_size=8, max_model_len=131072)
    # review 27: no SupportsPP; the LM head cast to fp32 (`self.lm_head.float()`) and the
    # routers held in fp32, 2 more bytes each: 200,064 / 8 x 6,144 + 80 x 6,144 x 32 a GPU
    with pytest.raises(BadInput, match="Pipeline parallelism is not supported"):
        run(cfg, gpu=B200, version="0.23", tensor_parallel_size=4, pipeline_parallel_size=2,
            max_model_len=131072)
    plain = size(Model("m", cfg), B200, EngineArgs(tensor_parallel_size=8, max_model_len=131072,
                                                  kv_cache_memory_bytes=16 * GiB), "0.23")
    # 114,097,676,288 B with both in bf16 (the 456,089,655,296 parameters above, TP8)
    assert plain.to_json()["weights_bytes_per_gpu"] == 114097676288 + (
        200064 // 8 * h + 80 * h * 32) * 2 == 114436431872
    # transformers' MiniMaxConfig (model_type 'minimax') without a list builds full /
    # linear alternately: 40 softmax layers and 40 states
    hf = {k: v for k, v in cfg.items() if k != "attn_type_list"}
    hf.update(model_type="minimax", architectures=["MiniMaxForCausalLM"])
    kinds = [getattr(x, "kind", None) for x in normalize(hf).layers]
    assert kinds[:4] == ["full", "lightning", "full", "lightning"]
    assert kinds.count("lightning") == 40
    # the state shape reads hf_config.head_dim; a null rotary_dim is divided by it
    with pytest.raises(BadInput, match="needs head_dim"):
        normalize({k: v for k, v in cfg.items() if k != "head_dim"})
    with pytest.raises(BadInput, match="rotary_dim is null"):
        normalize({**cfg, "rotary_dim": None})


def test_a_config_without_model_type_is_classified_by_its_architecture():
    # vLLM picks the class by architecture (Edge0's BailingMoeV3 config.json has no
    # model_type): 7 MLA layers of 576 elements and 35 KDA states, not 42 MLA layers
    bare = {k: v for k, v in LING_30_FLASH.items() if k != "model_type"}
    a, b = normalize(bare), normalize(LING_30_FLASH)
    assert a.model_type == "bailing_hybrid" and a.layers == b.layers
    assert sum(isinstance(x, StateLayer) for x in a.layers) == 35


def test_release_dependent_rotary_caches():
    # review 27: the Ling/Ring ropes are fp32 in 0.17-0.20.0 (bailing_moe_linear.py `get_rope(
    # dtype=torch.float32)`); OLMo Hybrid without a rope key builds none before 0.32 (vLLM's
    # own OlmoHybridConfig leaves rope_parameters None)
    def rope(cfg, version, **kw):
        return run(cfg, version=version, **kw).rope_cache_bytes

    bf16 = rope(RING_25_1T, "0.20.1", tensor_parallel_size=8)
    assert rope(RING_25_1T, "0.18", tensor_parallel_size=8) == 2 * bf16
    bare = {k: v for k, v in OLMO_HYBRID_7B.items()
            if k not in ("rope_theta", "rope_scaling", "rope_parameters")}
    assert rope(bare, "0.31") == 0 and rope(bare, "0.32") > 0


def test_plans_of_vllms_own_config_classes_by_release():
    # review 27: AFMoE 0.12-0.31 and Mellum 0.23-0.30 load vLLM's own config class, which
    # builds no layer_types (the models index it); Step-3.5 0.16-0.32 puts even layers under
    # the window without a list; AFMoE's own default window is 2,048 (transformers' 1,024)
    base = {"hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 4,
            "head_dim": 128, "num_hidden_layers": 8, "intermediate_size": 8192,
            "vocab_size": 32000, "max_position_embeddings": 65536, "torch_dtype": "bfloat16"}
    afmoe = {**base, "model_type": "afmoe", "architectures": ["AfmoeForCausalLM"]}
    with pytest.raises(BadInput, match="builds no layer_types"):
        run(afmoe, version="0.31", max_model_len=32768)
    lt = ["sliding_attention"] * 3 + ["full_attention"]
    listed = {**afmoe, "layer_types": lt * 2}
    windows = {x.window for x in release_layers(normalize(listed), (0, 31, 0)) if x.window}
    assert windows == {2048}
    assert {x.window for x in normalize(listed).layers if x.window} == {1024}
    step = {**base, "model_type": "step3p5", "architectures": ["Step3p5ForCausalLM"],
            "sliding_window": 512}
    kinds = [x.kind for x in release_layers(normalize(step), (0, 31, 0))]
    assert kinds == ["sliding", "full"] * 4
    assert {x.kind for x in release_layers(normalize(step), (0, 33, 0))} == {"full"}
    mellum = {**base, "model_type": "mellum", "architectures": ["MellumForCausalLM"]}
    with pytest.raises(BadInput, match="builds no layer_types"):
        run(mellum, version="0.30", max_model_len=32768)
    run(mellum, version="0.31", max_model_len=32768)
    # EXAONE 4 with a null window and no list: transformers divides by a 0 pattern
    with pytest.raises(BadInput, match="null sliding_window"):
        normalize({**base, "model_type": "exaone4", "architectures": ["Exaone4ForCausalLM"],
                   "sliding_window": None})



def test_review27_names_heads_and_null_fields():
    base = {"hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 4,
            "num_hidden_layers": 4, "intermediate_size": 4096, "vocab_size": 32000,
            "max_position_embeddings": 32768, "torch_dtype": "bfloat16"}
    # granitemoehybrid.py knows transformers 5.18's layer names from 0.26 (a KeyError before)
    granite = {**base, "model_type": "granitemoehybrid",
               "architectures": ["GraniteMoeHybridForCausalLM"],
               "layer_types": ["linear_attention"] * 3 + ["full_attention"],
               "mamba_n_heads": 32, "mamba_d_head": 64, "mamba_d_state": 128,
               "mamba_n_groups": 1, "mamba_d_conv": 4, "mamba_expand": 2}
    with pytest.raises(BadInput, match="does not know"):
        run(granite, version="0.25", max_model_len=32768)
    assert run(granite, version="0.26", max_model_len=32768).fits
    # GraniteMoeShared / MiMo / Qwen2-VL's language model: head size hidden // heads (64),
    # whatever head_dim says
    for mt in ("granitemoeshared", "mimo", "qwen2_5_vl_text"):
        layer = normalize({**base, "model_type": mt, "head_dim": 128,
                           "architectures": ["X"]}).layers[0]
        assert layer.head_size == 64, mt
    # IQuest's loop_num read as given: range(None)
    with pytest.raises(BadInput, match="loop_num is null"):
        normalize({**base, "model_type": "iquest_loopcoder", "loop_num": None,
                   "architectures": ["IQuestLoopCoderForCausalLM"]})


def test_zamba2_legacy_block_names_and_rope():
    # Zyphra's pre-transformers configs name blocks 'm' / 'g': vLLM's `layer_type ==
    # "hybrid"` would drop the shared blocks, so kvplan refuses rather than size all Mamba
    from kvplan.errors import UnsupportedArchitecture

    legacy = {**ZAMBA2_27B, "layers_block_type": ["m" if x == "mamba" else "g"
                                                  for x in ZAMBA2_27B["layers_block_type"]]}
    with pytest.raises(UnsupportedArchitecture, match="'g', 'm'"):
        normalize(legacy)
    # zamba2.py builds a rotary table only with use_mem_rope
    assert run({**ZAMBA2_27B, "rope_theta": 10000}).rope_cache_bytes == 0
    assert run({**ZAMBA2_27B, "rope_theta": 10000, "use_mem_rope": True}).rope_cache_bytes > 0


def test_malformed_fields_of_the_new_families_are_bad_input():
    # a fuzz of the session-27 configs: each was an internal error
    from configs import FALCON_MAMBA_7B, MAMBA2_7B

    m1 = {"architectures": ["MiniMaxM1ForCausalLM"], "model_type": "minimax_m1",
          "attn_type_list": 1, "head_dim": 128, "hidden_size": 1024, "intermediate_size": 4096,
          "num_attention_heads": 8, "num_hidden_layers": 4, "num_key_value_heads": 8,
          "num_local_experts": 4, "num_experts_per_tok": 2, "vocab_size": 32000,
          "max_position_embeddings": 8192}
    with pytest.raises(BadInput, match="attn_type_list must be a list"):
        normalize(m1)
    with pytest.raises(BadInput, match="loop_num must be a small positive count"):
        normalize({"architectures": ["IQuestLoopCoderForCausalLM"], "hidden_size": 1024,
                   "num_attention_heads": 8, "num_hidden_layers": 4, "vocab_size": 32000,
                   "intermediate_size": 4096, "loop_num": 10**12})
    with pytest.raises(BadInput, match="dt rank"):
        count_params(normalize({**FALCON_MAMBA_7B, "time_step_rank": "x"}))
    assert count_params(normalize({**FALCON_MAMBA_7B, "time_step_rank": "auto"})).total == \
        7281053696  # 'auto': ceil(4,096 / 16) = 256, as the config class resolves it
    with pytest.raises(BadInput, match="chunk_size"):
        normalize({**MAMBA2_7B, "chunk_size": "x"})
    with pytest.raises(BadInput, match="expand is null"):
        normalize({**MAMBA2_7B, "expand": None})
    with pytest.raises(BadInput, match="num_dense_layers"):
        normalize({**MAMBA2_7B, "num_dense_layers": "full_attention"})


def test_review27b_defaults_names_and_ties():
    from configs import FALCON_MAMBA_7B, GEMMA2_9B, MAMBA2_7B

    from kvplan.core.prefixcache import prefix_caching

    # attention-free Mamba models: `is_prefix_caching_supported` is False (0.12+), so one
    # state a request by default, even from 0.28 where hybrids turn it on
    for v in ("0.20.2", "0.28", "0.33"):
        r = run(MAMBA2_7B, version=v, max_model_len=2048)
        assert r.blocks_per_request == 1, v
        assert prefix_caching(r) == (False, f"vLLM {r.version.text} keeps it off by default "
                                            "for attention-free Mamba models")
    assert run(FALCON_MAMBA_7B, version="0.33", max_model_len=2048).blocks_per_request == 1
    # transformers 5 saves Zamba2's Mamba layers as 'linear_attention': sized as 'mamba'
    renamed = {**ZAMBA2_27B, "layers_block_type": [
        "linear_attention" if x == "mamba" else x for x in ZAMBA2_27B["layers_block_type"]]}
    assert normalize(renamed).layers == normalize(ZAMBA2_27B).layers
    # vLLM's own config classes from the point release that registered them
    base = {"hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 4,
            "head_dim": 128, "num_hidden_layers": 8, "intermediate_size": 8192,
            "vocab_size": 32000, "max_position_embeddings": 65536, "torch_dtype": "bfloat16"}
    with pytest.raises(BadInput, match="builds no layer_types"):
        run({**base, "model_type": "afmoe", "architectures": ["AfmoeForCausalLM"]},
            version="0.11.1", max_model_len=32768)
    with pytest.raises(BadInput, match="builds no layer_types"):
        run({**base, "model_type": "mellum", "architectures": ["MellumForCausalLM"]},
            version="0.22.1", max_model_len=32768)
    step = {**base, "model_type": "step3p5", "architectures": ["Step3p5ForCausalLM"],
            "sliding_window": 512}
    assert [x.kind for x in release_layers(normalize(step), (0, 15, 1))][:2] == [
        "sliding", "full"]
    # model files that tie whatever the config says (gemma2.py, lfm2.py, commandr.py)
    assert normalize({**GEMMA2_9B, "tie_word_embeddings": False}).tie_word_embeddings
    # a wrapper's text config's flag counts (vLLM up to 0.23; the root's from 0.24, left alone)
    wrapped = {"architectures": ["LlavaForConditionalGeneration"], "model_type": "llava",
               "tie_word_embeddings": True,
               "text_config": {**{k: v for k, v in base.items() if k != "torch_dtype"},
                               "model_type": "llama", "tie_word_embeddings": False}}
    assert not normalize(wrapped).tie_word_embeddings
    # transformers' native MiniMaxForCausalLM is model_type 'minimax' (alternating plan)
    mm = {**base, "architectures": ["MiniMaxForCausalLM"], "num_local_experts": 4,
          "num_experts_per_tok": 2}
    assert normalize(mm).model_type == "minimax"
    # a Nemotron-H pattern without attention is still a hybrid (not vLLM's IsAttentionFree)
    from configs import NEMOTRON_H_8B

    assert not normalize({**NEMOTRON_H_8B, "hybrid_override_pattern": "M-M-M-M-"}).attention_free
    # AFMoE / LFM2-MoE: the first num_dense_layers layers hold a dense MLP, no experts
    afm = {**base, "model_type": "afmoe", "architectures": ["AfmoeForCausalLM"],
           "layer_types": ["full_attention"] * 8, "num_experts": 8, "num_experts_per_tok": 2,
           "moe_intermediate_size": 512, "num_dense_layers": 2}
    layers = count_params(normalize(afm)).layers
    assert [bool(x.expert) for x in layers] == [False] * 2 + [True] * 6
    # LongCat-Flash: two MLA attentions and two dense MLPs a layer, refused by name
    from kvplan.errors import UnsupportedArchitecture

    with pytest.raises(UnsupportedArchitecture, match="LongcatFlashForCausalLM"):
        normalize({**base, "architectures": ["LongcatFlashForCausalLM"],
                   "model_type": "longcat_flash"})

