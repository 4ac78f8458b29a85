"""LoRA adapter slots (core/lora.py): hand-computed slot bytes, graphs, limits, real starts."""

import json

import pytest
from configs import DEEPSEEK_V4_FLASH, FALCON_7B, LLAMA31_8B, QWEN25_7B_INSTRUCT

from kvplan.core.arch import normalize
from kvplan.core.lora import lora_elems_per_stage
from kvplan.core.sizing import EngineArgs, Gpu, Model, size
from kvplan.errors import BadInput

H100 = Gpu("h100", "NVIDIA H100 80GB HBM3", 81089 << 20, "9.0")
MiB = 1 << 20
QWEN3_30B_A3B = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
                 "hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 32,
                 "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144,
                 "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
                 "vocab_size": 151936, "max_position_embeddings": 40960,
                 "torch_dtype": "bfloat16", "tie_word_embeddings": False}


def elems(config, tp=1, ep=1, pp_stages=None, **kw):
    arch = normalize(config)
    stages = pp_stages or [range(arch.num_layers)]
    kw = {"fully_sharded": False, "experts": True, "embeddings": False, **kw}
    return lora_elems_per_stage(arch, stages, tp, ep, **kw)


def test_dense_slot_elements_by_hand():
    # Qwen2.5-7B (H 3584, 28 heads of 128, 4 KV heads, I 18944, 28 layers), per slot and rank:
    # qkv A 3 x 3584, B 3584 + 2 x 4 x 128; o A 3584, B 3584 -> 22,528
    # gate_up A 2 x 3584, B 2 x 18944; down A 18944, B 3584 -> 67,584
    assert elems(QWEN25_7B_INSTRUCT) == [28 * (22528 + 67584)]  # 4.8125 MiB in bf16
    assert 2 * elems(QWEN25_7B_INSTRUCT)[0] == 4.8125 * MiB
    # TP2: A of column layers stays whole, B of row layers too; the rest halves
    # qkv 10752 + 1792 + 2 x 256, o 1792 + 3584, gate_up 7168 + 18944, down 9472 + 3584
    assert elems(QWEN25_7B_INSTRUCT, tp=2) == [28 * (18432 + 39168)]
    # --fully-sharded-loras splits those too
    assert elems(QWEN25_7B_INSTRUCT, tp=2, fully_sharded=True) == [28 * (
        5376 + 1792 + 512 + 1792 + 1792 + 3584 + 18944 + 9472 + 1792)]
    # Llama-3.1-8B: 5 MiB of layers, and its embedding + LM head (V 128256 + H 4096, twice)
    layers = 32 * (26624 + 55296)
    assert elems(LLAMA31_8B) == [layers]
    assert elems(LLAMA31_8B, embeddings=True) == [layers + 2 * (128256 + 4096)]
    # PP2: the embedding on the first stage, the LM head on the last
    assert elems(LLAMA31_8B, pp_stages=[range(16), range(16, 32)], embeddings=True) == [
        layers / 2 + 132352, layers / 2 + 132352]


def test_moe_experts_wrapped_from_012():
    # per layer: 128 experts x (2 x 2048 + 2 x 768 + 768 + 2048), router 2048 + 128, attention
    # qkv 3 x 2048 + 32 x 128 + 2 x 4 x 128, o 4096 + 2048
    attn, router, experts = 17408, 2176, 128 * 8448
    assert elems(QWEN3_30B_A3B) == [48 * (attn + router + experts)]
    assert elems(QWEN3_30B_A3B, experts=False) == [48 * (attn + router)]
    # expert parallel over 4 GPUs: 32 local experts at their full intermediate size
    assert elems(QWEN3_30B_A3B, tp=4, ep=4) == [48 * (
        6144 + 1024 + 256 + 1024 + 2048 + router + 32 * 8448)]


def test_lora_in_the_budget():
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    m, h100 = resolve_model("Qwen/Qwen2.5-7B-Instruct"), resolve_gpu("h100")
    base = size(m, h100, EngineArgs(max_model_len=4096), "0.23")
    r = size(m, h100, EngineArgs(max_model_len=4096, enable_lora=True, max_loras=10,
                                 max_lora_rank=8, gpu_memory_utilization=0.9), "0.23")
    assert r.lora_bytes == 80 * 4.8125 * MiB == r.budget.weights - base.budget.weights
    # the adapters' rank and slots (10 x 8) are inferred: the source gives rank 8, 10 adapters
    assert r.to_json()["lora_bytes_per_gpu"] == r.lora_bytes
    # 0.12+: every size is captured with and without active adapters
    assert r.cudagraph_graphs == 2 * base.cudagraph_graphs
    old = size(m, h100, EngineArgs(max_model_len=4096, enable_lora=True), "0.11")
    assert old.cudagraph_graphs == size(m, h100, EngineArgs(max_model_len=4096),
                                        "0.11").cudagraph_graphs
    off = size(m, h100, EngineArgs(max_model_len=4096, enable_lora=True,
                                   cudagraph_specialize_lora=False), "0.23")
    assert off.cudagraph_graphs == base.cudagraph_graphs
    twice = "captured with and without active adapters"
    assert any(twice in n for n in r.notes) and not any(twice in n for n in off.notes)
    eager = size(m, h100, EngineArgs(max_model_len=4096, enable_lora=True,
                                     enforce_eager=True), "0.23")
    assert eager.cudagraph_graphs == 0 and not any(twice in n for n in eager.notes)
    # vLLM 0.23 logged 53.34 GiB (stannum13, 'ten rank-8 LoRA registrations'); kvplan 53.27
    assert r.budget.available_kv / 2**30 == pytest.approx(53.34, abs=0.1)
    # --specialize-active-lora (0.16+): no adapter, then 1, 2, 4, 8 and 11 active at
    # max_loras 10 (`get_captured_lora_counts`): 6 cases instead of 2
    spec = size(m, h100, EngineArgs(max_model_len=4096, enable_lora=True, max_loras=10,
                                    max_lora_rank=8, specialize_active_lora=True), "0.23")
    assert spec.cudagraph_graphs == 6 * base.cudagraph_graphs
    assert any("6 times the graphs" in n for n in spec.notes)


def test_lora_limits():
    m = Model("qwen2.5-7b", QWEN25_7B_INSTRUCT)
    with pytest.raises(BadInput, match="--max-lora-rank 24 is not one vLLM accepts"):
        size(m, H100, EngineArgs(enable_lora=True, max_lora_rank=24, max_model_len=4096))
    with pytest.raises(BadInput, match="--max-lora-rank 1"):  # rank 1 from 0.12
        size(m, H100, EngineArgs(enable_lora=True, max_lora_rank=1, max_model_len=4096), "0.11")
    assert size(m, H100, EngineArgs(enable_lora=True, max_lora_rank=1, max_model_len=4096),
                "0.12").lora_bytes == 4.8125 * MiB / 2 * 2  # one slot of rank 1
    with pytest.raises(BadInput, match="--max-loras 0"):
        size(m, H100, EngineArgs(enable_lora=True, max_loras=0, max_model_len=4096))
    # DeepSeek-V4's NVIDIA class is SupportsLoRA from 0.29; Falcon's is not in 0.33
    v4 = EngineArgs(enable_lora=True, tensor_parallel_size=8, max_model_len=4096)
    with pytest.raises(BadInput, match="does not support LoRA for DeepSeek-V4"):
        size(Model("v4", DEEPSEEK_V4_FLASH), H100, v4, "0.28")
    assert size(Model("v4", DEEPSEEK_V4_FLASH), H100, v4, "0.29").lora_bytes > 0
    with pytest.raises(BadInput, match="does not support LoRA for FalconForCausalLM"):
        size(Model("falcon", FALCON_7B), H100, EngineArgs(enable_lora=True, max_model_len=2048))


def test_engine_entrypoint_defaults():
    # AsyncLLMEngine.from_engine_args: ENGINE_CONTEXT has no usage-context entry, so the
    # SchedulerConfig defaults apply: 2,048 tokens and 128 sequences, on any GPU
    m = Model("qwen2.5-7b", QWEN25_7B_INSTRUCT)
    r = size(m, H100, EngineArgs(max_model_len=4096, usage="engine"), "0.14")
    assert (r.max_num_batched_tokens, r.max_num_seqs) == (2048, 128)
    with pytest.raises(BadInput, match="not serve, llm or engine"):
        size(m, H100, EngineArgs(usage="worker"))


def test_fit_hint_cuts_slots_then_rank():
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    # Qwen3-30B-A3B's experts are wrapped (0.12+): 101 MiB per slot-rank, so 4 slots of rank
    # 256 are 101 GiB; one slot of rank 64 fits an H100
    r = size(resolve_model("Qwen/Qwen3-30B-A3B"), resolve_gpu("h100"), EngineArgs(
        enable_lora=True, max_loras=4, max_lora_rank=256, max_model_len=8192), "0.33")
    assert not r.fits and r.lora_bytes / 2**30 == pytest.approx(101.4, abs=0.1)
    assert any(n.startswith("fits with --max-loras 1 --max-lora-rank 64 (") for n in r.notes)


def test_v0_builds_slots_after_the_profile():
    # vLLM issue 14450: V0 loads the LoRA slots after sizing the KV cache
    m = Model("qwen2.5-7b", QWEN25_7B_INSTRUCT)
    base = size(m, H100, EngineArgs(max_model_len=4096), "0.7")
    r = size(m, H100, EngineArgs(max_model_len=4096, enable_lora=True, max_loras=4,
                                 max_lora_rank=64), "0.7")
    assert r.budget.weights == base.budget.weights
    assert r.outside_budget_bytes - base.outside_budget_bytes == 256 * 4.8125 * MiB


def test_target_modules_limit_the_slots():
    # --lora-target-modules q_proj v_proj wraps the packed qkv_proj only (vLLM 0.20+ wraps a
    # packed module when any part is named; 0.19 none): 28 x (3 x 3584 + 3584 + 2 x 512) per
    # slot-rank
    from kvplan.core.lora import target_categories

    assert target_categories(("q_proj", "v_proj")) == frozenset({"qkv"})
    assert target_categories(("o_proj", "down_proj", "experts")) == frozenset(
        {"o", "down", "experts"})
    assert target_categories(None) is None
    m = Model("qwen2.5-7b", QWEN25_7B_INSTRUCT)
    a = EngineArgs(max_model_len=4096, enable_lora=True, max_loras=4, max_lora_rank=64,
                   lora_target_modules=("q_proj", "v_proj"))
    r = size(m, H100, a, "0.20")
    assert r.lora_bytes == 256 * 28 * (3 * 3584 + 3584 + 2 * 512) * 2
    assert size(m, H100, a, "0.19").lora_bytes == 0
    with pytest.raises(BadInput, match="no --lora-target-modules"):
        size(m, H100, a, "0.18")


@pytest.mark.parametrize("model,extra,want", [
    # --fully-sharded-loras leaves the LM head's B at the whole vocabulary on every GPU
    # (`LogitsProcessorWithLoRA.create_lora_weights`); re-derived from the 0.33 wheel
    ("meta-llama/Llama-3.1-70B-Instruct", ["-tp", "4", "--fully-sharded-loras"], 449_118_208),
    ("meta-llama/Llama-3.1-8B-Instruct", ["-tp", "4", "--fully-sharded-loras"], 117_768_192),
    ("Qwen/Qwen3-30B-A3B", ["-tp", "4", "--fully-sharded-loras"], 1_740_472_320),
    # Qwen3-VL's language model declares embedding_modules (embed_tokens, lm_head wrapped),
    # and Qwen3-VL-MoE's fused 3D experts take one w13 LoRA-A each (`FusedMoE3DWithLoRA`)
    ("Qwen/Qwen3-VL-8B-Instruct", [], 389_120_000),
    ("Qwen/Qwen3-VL-30B-A3B-Instruct", ["-tp", "2"], 4_258_627_584),
])
def test_lora_slots_match_vllm_033(capsys, model, extra, want):
    from kvplan.cli import main

    assert main(["size", model, "--gpu", "h100", "--enable-lora", "--max-loras", "4",
                 "--max-lora-rank", "16", "--json", *extra]) in (0, 1)
    assert json.loads(capsys.readouterr().out)["lora_bytes_per_gpu"] == want


@pytest.mark.parametrize("extra,says", [
    (["Qwen/Qwen3-30B-A3B", "-tp", "2", "--enable-expert-parallel", "--fully-sharded-loras"],
     "expert-parallel together with --fully-sharded-loras"),
    (["meta-llama/Llama-3.1-8B-Instruct", "-tp", "2", "--fully-sharded-loras",
      "--max-lora-rank", "1"], "requires to divide it"),
])
def test_lora_set_ups_vllm_refuses(capsys, extra, says):
    from kvplan.cli import main

    assert main(["size", *extra, "--gpu", "h100", "--enable-lora"]) == 2
    assert says in capsys.readouterr().err


def test_lora_lm_head_vocabulary_limit():
    from kvplan.core.lora import check_lora

    big = normalize({**LLAMA31_8B, "vocab_size": 258_560})
    with pytest.raises(BadInput, match="up to 258,048"):
        check_lora(big, 4, 16, rank_one=True, dsv4_lora=False, head_wrapped=True)
    check_lora(big, 4, 16, rank_one=True, dsv4_lora=False, head_wrapped=False)


def test_gdn_lora_slices_and_v0_slot_placement():
    # Qwen3.5-27B: each GDN layer's in_proj_qkvz keeps an A per slice (4) and in_proj_ba
    # per slice (2), and conv1d (4 -> 10,240, a ColumnParallelLinear) is wrapped: 5 x 5,120
    # + 4 + 10,240 = 35,844 elements a layer per slot and unit of rank beyond one A (0.20+)
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    q = normalize(resolve_model("Qwen/Qwen3.5-27B").config)
    stages = [range(q.num_layers)]
    kw = dict(fully_sharded=False, experts=True, embeddings=True)
    plain, sliced = (lora_elems_per_stage(q, stages, 1, 1, gdn_slices=g, **kw)[0]
                     for g in (False, True))
    assert sliced - plain == 48 * (5 * 5120 + 4 + 10240)
    # V0 0.8+ builds the slots inside the load's memory profiler (PR 14469) and 0.6's
    # non-torch term catches them: in the budget; only 0.7 builds them after the profile
    m, t4 = resolve_model("meta-llama/Llama-3.1-8B-Instruct"), resolve_gpu("t4")
    lora = dict(enable_lora=True, max_loras=4, max_model_len=4096)
    for version, late in (("0.6.6", False), ("0.7.3", True), ("0.9.2", False)):
        r = size(m, t4, EngineArgs(**lora), version)
        assert r.lora_late == late and (r.outside_budget_bytes >= r.lora_bytes) == late


def test_embedding_lora_by_release():
    # Qwen3 declares `embedding_modules` from 0.16 (qwen3.py): embed_tokens and lm_head take
    # slots, A/B of 151,936 + 4,096 elements each per slot and unit of rank
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    m, h100 = resolve_model("Qwen/Qwen3-8B"), resolve_gpu("h100")
    a = EngineArgs(enable_lora=True, max_loras=4, max_lora_rank=64, max_model_len=8192)
    old, new = (size(m, h100, a, v).lora_bytes for v in ("0.15.1", "0.16"))
    assert new - old == 2 * (151936 + 4096) * 4 * 64 * 2


def test_lora_moves_unquantized_experts_off_flashinfer():
    # `select_unquantized_moe_backend`'s LoRA branch (0.24+): Triton, except the TRT-LLM LoRA
    # experts on SM100 (0.27+) when the intermediate per GPU is a multiple of 128
    # (Qwen3-30B-A3B: 768 at TP1 keeps FlashInfer, 192 at TP4 does not)
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    m, b200 = resolve_model("Qwen/Qwen3-30B-A3B"), resolve_gpu("b200")

    def kernel(tp, lora, version="0.33"):
        return size(m, b200, EngineArgs(tensor_parallel_size=tp, enable_lora=lora),
                    version).to_json()["moe_kernel"]

    assert (kernel(1, True), kernel(4, True), kernel(4, False)) == (
        "flashinfer", "modular", "flashinfer")
    assert kernel(1, True, "0.26") == "modular"  # before the TRT-LLM LoRA experts


def test_lora_with_a_drafter_needs_the_token_budget():
    # `create_engine_config` (0.12+): LoRA and speculative decoding need
    # max_num_batched_tokens >= max_num_seqs x (1 + k): 8,192 < 1,024 x 9 on an H100
    from kvplan.core.specdec import SpecDecode

    a = EngineArgs(enable_lora=True, speculative=SpecDecode("ngram", 8), max_model_len=8192)
    with pytest.raises(BadInput, match="9216"):
        size(Model("llama", LLAMA31_8B), H100, a)
    assert size(Model("llama", LLAMA31_8B), H100, EngineArgs(
        enable_lora=True, speculative=SpecDecode("ngram", 7), max_model_len=8192)).fits


def test_fewer_slots_hint_is_a_bisection(capsys):
    """review 24b F5: one sizing per slot count below --max-loras ran for minutes at 100,000
    (and built a list of 10^14 at 99,999,999,999,999); the hint names the most that start."""
    from kvplan.cli import main

    for slots in ("100000", "99999999999999"):
        assert main(["size", "llama-3.1-8b", "--gpu", "h100", "--enable-lora", "--max-loras",
                     slots]) == 1
        hint = capsys.readouterr().out.splitlines()[-1]
        assert hint == "note: fits with --max-loras 441 (16.03 GiB of KV per GPU)"
    assert main(["size", "llama-3.1-8b", "--gpu", "h100", "--enable-lora", "--max-loras",
                 "441"]) == 0
    assert main(["size", "llama-3.1-8b", "--gpu", "h100", "--enable-lora", "--max-loras",
                 "442"]) == 1


def test_packed_parts_select_nothing_before_0_20(capsys):
    """review 24f F4: 0.19's `is_in_target_modules` compares the runtime module's own name
    (qkv_proj), so q_proj / v_proj wrap nothing; 0.20 expands packed modules' parts."""
    import json

    from kvplan.cli import main

    base = ["size", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100", "--enable-lora",
            "--lora-target-modules", "q_proj,v_proj", "--json"]
    got = {}
    for v in ("0.19.0", "0.20.0"):
        assert main([*base, "--vllm-version", v]) == 0
        got[v] = json.loads(capsys.readouterr().out)
    assert got["0.19.0"]["lora_bytes_per_gpu"] == 0
    assert got["0.20.0"]["lora_bytes_per_gpu"] == 18874368  # the qkv stack, 1 slot of rank 16
    assert any("q_proj, v_proj select nothing" in n for n in got["0.19.0"]["notes"])


def test_target_modules_that_name_nothing_say_so(capsys):
    """Session 28's CLI fuzz: a bogus name sized 0.00 GiB of slots without a word."""
    from kvplan.cli import main

    code = main(["size", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100", "--enable-lora",
                 "--lora-target-modules", "bogus", "--json"])
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert code == 0 and any(n.startswith("--lora-target-modules bogus names none of the "
                                          "modules kvplan counts") for n in notes)

