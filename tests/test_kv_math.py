"""Hand-computed KV figures for each architecture family (docs/methodology.md shows the work)."""

import re
from dataclasses import replace

import pytest
from configs import (
    DEEPSEEK_V3,
    DEEPSEEK_V32,
    FALCON_7B,
    FALCON_H1_7B,
    GEMMA2_9B,
    GEMMA3_12B,
    GEMMA4_E2B,
    JAMBA_15_MINI,
    KIMI_LINEAR_48B,
    LFM2_12B,
    LLAMA31_8B,
    MISTRAL_7B_V01,
    NEMOTRON_H_8B,
    QWEN3_NEXT_80B,
    QWEN25_7B_INSTRUCT,
)

from kvplan.core.arch import normalize, tp_refusal, valid_tps
from kvplan.core.sizing import EngineArgs, Gpu, Model, size
from kvplan.core.specdec import SpecDecode
from kvplan.errors import BadInput

GiB = 1 << 30
H100 = Gpu("h100-sxm", "NVIDIA H100 80GB HBM3", 81089 * (1 << 20), "9.0")
L4 = Gpu("l4", "NVIDIA L4", 22518 * (1 << 20), "8.9")
T4 = Gpu("t4", "Tesla T4", 15095 * (1 << 20), "7.5")
H200 = Gpu("h200-sxm", "NVIDIA H200", 143771 * (1 << 20), "9.0")
B200 = Gpu("b200", "NVIDIA B200", 182642 * (1 << 20), "10.0")


def run(cfg, gpu=H100, version="0.33", **kw):
    return size(Model("m", cfg), gpu, EngineArgs(**kw), version)


# --- full attention -----------------------------------------------------------------------

def test_llama31_8b_per_token_and_blocks_v011():
    # 2 (K,V) x 8 heads x 128 x 2 B = 4,096 B/layer; x 32 layers = 131,072 B/token
    r = run(LLAMA31_8B, version="0.11", max_model_len=8192,
            kv_cache_memory_bytes=27996 * 2 * 1024 * 1024)
    assert r.kv_bytes_per_token_per_gpu == 131072
    assert r.bytes_per_block == 2 * 1024 * 1024  # 32 layers x 16 tokens x 4 KiB
    assert r.num_gpu_blocks == 27996
    assert r.kv_cache_tokens == 447936  # 27,996 x 16
    assert round(r.max_concurrency, 2) == 54.68  # 27,996 / 512
    assert r.concurrency_at[8192] == 54  # (27,996 - 1 null block) // 512


@pytest.mark.parametrize("tp,per_gpu,replica", [(1, 131072, 131072), (2, 65536, 131072),
                                                (8, 16384, 131072), (16, 16384, 262144)])
def test_llama_tp_replicates_kv_heads_past_head_count(tp, per_gpu, replica):
    cfg = {**LLAMA31_8B, "num_attention_heads": 32}
    r = run(cfg, tensor_parallel_size=tp, max_model_len=8192, kv_cache_memory_bytes=10 * GiB)
    assert r.kv_bytes_per_token_per_gpu == per_gpu
    assert r.kv_bytes_per_token_replica == replica


def test_fp8_kv_halves_bytes():
    r = run(LLAMA31_8B, kv_cache_dtype="fp8", max_model_len=8192, kv_cache_memory_bytes=GiB)
    assert r.kv_bytes_per_token_per_gpu == 65536
    assert r.num_gpu_blocks == GiB // (16 * 65536)


def test_qwen25_7b_gqa_and_disabled_sliding_window():
    r = run(QWEN25_7B_INSTRUCT, kv_cache_memory_bytes=GiB)
    assert r.kv_bytes_per_token_per_gpu == 57344  # 2 x 4 x 128 x 2 x 28
    assert r.arch.family_label == "full attention"  # use_sliding_window=false
    assert r.max_model_len == 32768


def test_falcon_multi_query_has_one_kv_head():
    r = run(FALCON_7B, kv_cache_memory_bytes=GiB)
    assert r.kv_bytes_per_token_per_gpu == 2 * 1 * 64 * 2 * 32  # head 4544/71 = 64


def test_tokens_formula_truncates_like_vllm_for_non_power_of_two_lengths():
    # 0.20.2+: int(num_blocks / cdiv(M, 16) * M); M = 20000 -> 1250 blocks per request
    r = run(LLAMA31_8B, max_model_len=20000, kv_cache_memory_bytes=1952 * 2 * 1024 * 1024)
    assert r.blocks_per_request == 1250
    assert r.kv_cache_tokens == int(1952 / 1250 * 20000)


# --- MLA ----------------------------------------------------------------------------------

@pytest.mark.parametrize("tp", [1, 8, 16])
def test_deepseek_v3_mla_latent_is_replicated(tp):
    r = run(DEEPSEEK_V3, tensor_parallel_size=tp, kv_cache_memory_bytes=40 * GiB)
    assert r.kv_bytes_per_token_per_gpu == 70272  # (512 + 64) x 2 B x 61 layers
    assert r.max_model_len == 163840  # yarn factor 40 not applied


def test_deepseek_v3_mla_block_size_by_version():
    def bs(version, gpu=H100, **kw):
        return run(DEEPSEEK_V3, gpu=gpu, version=version, kv_cache_memory_bytes=GiB,
                   **kw).block_size

    b200, mi300x = B200, Gpu("mi300x", "AMD Instinct MI300X", 192 * GiB, "gfx942", vendor="amd")
    # Hopper: FlashMLA's forced 64 to 0.17; from 0.18 the chosen backend's preferred size:
    # FA3-MLA's 16, FlashMLA's 64 with an fp8 cache (FA3-MLA stores none)
    assert (bs("0.17.1"), bs("0.18.1"), bs("0.20.2"), bs("0.33")) == (64, 16, 16, 16)
    assert bs("0.20.2", kv_cache_dtype="fp8") == 64
    # SM100: CUTLASS-MLA 128, FlashInfer-MLA 64 (0.15-0.17), then its preferred 32
    assert (bs("0.14.1", b200), bs("0.16", b200), bs("0.18.1", b200), bs("0.33", b200)) == (
        128, 64, 32, 32)
    assert bs("0.33", mi300x) == bs("0.33", L4) == 16  # Triton-MLA
    # to 0.17 the forced size overrides --block-size; from 0.18 the user's size is kept
    assert bs("0.17.1", block_size=16) == 64 and bs("0.18.1", block_size=32) == 32
    assert bs("0.16", B200, block_size=32) == 32 and bs("0.16", B200, block_size=16) == 64
    assert run(DEEPSEEK_V3, kv_cache_dtype="fp8", kv_cache_memory_bytes=GiB
               ).kv_bytes_per_token_per_gpu == 35136


def test_deepseek_v32_sparse_mla_with_indexer():
    # fp8 request -> fp8_ds_mla 656 B + indexer 132 B per layer
    r = run(DEEPSEEK_V32, version="0.16", kv_cache_dtype="fp8", kv_cache_memory_bytes=GiB)
    assert r.kv_dtype == "fp8_ds_mla"
    assert r.kv_bytes_per_token_per_gpu == 788 * 61 == 48068
    assert r.block_size == 64
    assert len(r.groups) == 1  # MLA + indexer: one uniform-type group
    # only 0.11.0 stored `auto` as fp8_ds_mla too
    assert run(DEEPSEEK_V32, version="0.11.0", kv_cache_memory_bytes=GiB
               ).kv_bytes_per_token_per_gpu == 48068
    # 0.11.1+: `auto` is bf16, 1,152 + 132 B per layer
    assert run(DEEPSEEK_V32, kv_cache_memory_bytes=GiB).kv_bytes_per_token_per_gpu == 78324


def test_deepseek_v32_kv_layout_matches_sweep_logs():
    # Real H200 TP8 starts (benchmarks/cases_sweep.yaml): 0.16.0 printed 42.19 GiB ->
    # 578,368 tokens, 0.18.0 41.76 GiB -> 572,480 (bf16 latent + indexer, 64-token blocks)
    for version, gib, tokens in (("0.16.0", 42.19, 578368), ("0.18.0", 41.76, 572480)):
        r = run(DEEPSEEK_V32, gpu=H200, version=version, tensor_parallel_size=8,
                max_model_len=8192, kv_cache_memory_bytes=round(gib * GiB))
        assert r.kv_cache_tokens == tokens
    # 0.18 on SM100 with <= 16 heads per rank: FlashInfer sparse MLA keeps plain fp8
    # (576 + 132 B); with 32 heads per rank FlashMLA sparse converts to fp8_ds_mla
    tp8 = run(DEEPSEEK_V32, gpu=B200, version="0.18.0", tensor_parallel_size=8,
              kv_cache_dtype="fp8", kv_cache_memory_bytes=GiB)
    assert (tp8.kv_dtype, tp8.kv_bytes_per_token_per_gpu) == ("fp8", 708 * 61)
    tp4 = run(DEEPSEEK_V32, gpu=B200, version="0.18.0", tensor_parallel_size=4,
              kv_cache_dtype="fp8", kv_cache_memory_bytes=GiB)
    assert tp4.kv_dtype == "fp8_ds_mla"


# --- sliding window -----------------------------------------------------------------------

def test_gemma2_two_groups_and_token_figures():
    avail = 50 * GiB
    old = run(GEMMA2_9B, version="0.11", kv_cache_memory_bytes=avail)
    assert old.model_dtype == "bfloat16"  # float32 checkpoint on sm90
    assert len(old.groups) == 2 and old.bytes_per_block == 21 * 131072 == 2752512
    assert old.num_gpu_blocks == 19504
    assert old.blocks_per_request == 512 + 513  # full + SWA cdiv(min(4095+8192, 8192), 16)+1
    assert old.kv_cache_tokens == 19504 // 2 * 16 == 156032
    new = run(GEMMA2_9B, version="0.33", kv_cache_memory_bytes=avail)
    assert new.kv_cache_tokens == int(19504 / 1025 * 8192) == 155879


def test_gemma3_12b_five_sliding_groups():
    r = run(GEMMA3_12B, kv_cache_memory_bytes=GiB)
    assert r.max_model_len == 131072  # gemma3 linear factor 8 not re-applied
    assert len(r.groups) == 6 and r.bytes_per_block == 8 * 131072
    # 0.33 in-flight tokens = 2 x 8192: 8,192 + 5 x (cdiv(1023 + 16384, 16) + 1)
    assert r.blocks_per_request == 13637


def test_mistral_v01_all_layers_sliding():
    blocks = 27996
    kw = dict(max_model_len=32768, kv_cache_memory_bytes=blocks * 2 * 1024 * 1024)
    old = run(MISTRAL_7B_V01, version="0.11", **kw)
    assert old.blocks_per_request == 769 and old.kv_cache_tokens == 447936
    assert round(old.max_concurrency, 2) == 36.41
    mid = run(MISTRAL_7B_V01, version="0.20.2", **kw)
    assert mid.kv_cache_tokens == int(blocks / 769 * 32768) == 1192942
    new = run(MISTRAL_7B_V01, version="0.33", **kw)
    assert new.blocks_per_request == 1281 and round(new.max_concurrency, 2) == 21.85
    assert new.kv_cache_tokens == 716138


def test_llama4_scout_chunked_groups_follow_vllms_default_by_release():
    from kvplan.core.specdec import SpecDecode
    from kvplan.sources.resolve import resolve_model

    scout = resolve_model("meta-llama/Llama-4-Scout-17B-16E-Instruct")
    kw = dict(tensor_parallel_size=4, max_model_len=131072, kv_cache_memory_bytes=20 << 30)
    # 48 layers at 2 KV heads x 128 per GPU: 16,384 B per layer per 16-token block; with the
    # groups, 12 layers share each tensor: 20 GiB / (12 x 16,384) = 109,226 blocks, and a
    # request needs 8,192 blocks of full attention plus 3 chunked groups of
    # cdiv(min(8,192 + 2 x 8,192, 131,072), 16) = 1,536
    on = size(scout, H100, EngineArgs(**kw))
    assert on.num_gpu_blocks == 109226 and on.blocks_per_request == 8192 + 3 * 1536
    assert round(on.max_concurrency, 2) == 8.53 and on.kv_cache_tokens == 1118474
    # ChunkedLocalAttentionBuilder takes no full graphs (NEVER, 0.11+): 51 piecewise sizes
    # up to 512 and no FULL decode ones (vLLM PR 26034's log: "setting cudagraph_mode=PIECEWISE")
    assert (on.cudagraph_mode, on.cudagraph_graphs) == ("PIECEWISE", 51)
    assert size(scout, H100, EngineArgs(**kw), "0.10.2").cudagraph_mode == "PIECEWISE"  # default
    # full-attention costing: 20 GiB / (48 x 16,384) = 27,306 blocks of 8,192 per request
    off = {"0.9.2": 27306, "0.10": 109226, "0.10.1": 27306, "0.13": 27306, "0.14": 109226}
    for version, blocks in off.items():
        r = size(scout, H100, EngineArgs(**kw), version)
        assert r.num_gpu_blocks == blocks, version
    ngram = size(scout, H100, EngineArgs(**kw, speculative=SpecDecode("ngram", 3, None)))
    assert ngram.num_gpu_blocks == 109226  # n-gram drafting keeps the groups; EAGLE does not
    from kvplan.core.versions import VllmVersion
    assert not VllmVersion.of("0.33").chunked_local_groups(eagle_drafter=True)
    # MiMo-V2-Flash's config has attention_chunk_size 128 and no chunked layer: an EAGLE-3
    # draft turns the manager off, so its 48 layers (+ the draft's) share one group:
    # 20 GiB / (48 x 10,240 + 8,192) = 42,974 blocks, 16,384 a request at 262,144 tokens
    from kvplan.sources.resolve import resolve_gpu
    mimo, h200 = resolve_model("XiaomiMiMo/MiMo-V2-Flash"), resolve_gpu("h200")
    from kvplan.engines.vllm_spec import speculative
    draft = speculative('{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", '
                        '"num_speculative_tokens": 3}', resolve_model)
    r = size(mimo, h200, EngineArgs(tensor_parallel_size=8, kv_cache_memory_bytes=20 << 30,
                                     speculative=draft))
    assert (r.num_gpu_blocks, r.blocks_per_request) == (42974, 16384)
    assert size(scout, H100, EngineArgs(**kw, disable_hybrid_kv_cache_manager=True)
                ).num_gpu_blocks == 27306


def test_gemma4_e2b_kv_sharing_and_real_log():
    # vLLM 0.21 on an L4, --enforce-eager, max_model_len 8192: logged 129.66x, 9.92 GiB
    r = run(GEMMA4_E2B, gpu=L4, version="0.21", max_model_len=8192, enforce_eager=True,
            kv_cache_memory_bytes=int(9.92 * GiB))
    assert sum(x is not None for x in r.arch.layers) == 15  # 20 layers reuse earlier KV
    assert r.bytes_per_block == 3 * 32768 and r.blocks_per_request == 836
    assert abs(r.max_concurrency / 129.66 - 1) < 0.005
    assert abs(r.kv_cache_tokens / 1062157 - 1) < 0.005


# --- Mamba / linear attention hybrids -----------------------------------------------------

@pytest.mark.parametrize("tp,block,pad_page", [(1, 544, 1114112), (2, 544, 557056),
                                               (4, 272, 278528), (8, 144, 147456)])
def test_qwen3_next_block_alignment_v020(tp, block, pad_page):
    r = run(QWEN3_NEXT_80B, version="0.20.2", tensor_parallel_size=tp, kv_cache_memory_bytes=GiB)
    assert r.block_size == block
    assert r.bytes_per_block == 12 * pad_page  # 1 attention + 3 GDN groups of 12 layers
    assert len(r.groups) == 4
    assert r.blocks_per_request == -(-262144 // block) + 3  # one state per GDN group


def test_qwen3_next_v033_align_mode_on_hopper():
    r = run(QWEN3_NEXT_80B, kv_cache_memory_bytes=GiB)
    assert r.block_size == 576  # lcm(16, 64) x cdiv(1,097,728, 64 x 2,048)
    assert r.blocks_per_request == 262144 // 576 + 1 + 3 * 3  # 2 states + 1 checkpoint


@pytest.mark.parametrize("tp,state", [(1, 311296), (2, 155648)])
def test_jamba_mamba1_state_and_block_80(tp, state):
    r = run(JAMBA_15_MINI, version="0.20.2", tensor_parallel_size=tp, kv_cache_memory_bytes=GiB)
    assert r.block_size == 80
    assert r.state_bytes_per_request_per_gpu == 28 * (80 * 4096 // tp) // 1 * 0 + 28 * state
    assert len(r.groups) == 8  # 1 attention + 7 Mamba groups of 4


def test_nemotron_h_mamba2_fp32_ssm_state():
    r = run(NEMOTRON_H_8B, version="0.20.2", kv_cache_memory_bytes=GiB, max_model_len=8192)
    # conv (8192 + 2*8*128) x 3 x 2 B + ssm 128 x 64 x 128 x 4 B (float32)
    assert r.state_bytes_per_request_per_gpu == 4 * (61440 + 4194304)
    assert r.block_size == 1040  # 16 x cdiv(4,255,744, 16 x 4,096)
    assert r.bytes_per_block == 1040 * 4096
    assert len(r.groups) == 5
    assert r.blocks_per_request == 8 + 4


def test_mamba_cache_dtype_flags():
    # --mamba-ssm-cache-dtype wins over NemotronH's float32 default: ssm 128 x 64 x 128 x 2 B
    r = run(NEMOTRON_H_8B, version="0.20.2", kv_cache_memory_bytes=GiB, max_model_len=8192,
            mamba_ssm_cache_dtype="bfloat16")
    assert r.state_bytes_per_request_per_gpu == 4 * (61440 + 2097152)
    # --mamba-cache-dtype float32 doubles the conv state; the SSM state keeps its float32
    r = run(NEMOTRON_H_8B, version="0.20.2", kv_cache_memory_bytes=GiB, max_model_len=8192,
            mamba_cache_dtype="float32")
    assert r.state_bytes_per_request_per_gpu == 4 * (2 * 61440 + 4194304)
    # Falcon-H1 has no hint: the SSM state follows --mamba-cache-dtype
    r = run(FALCON_H1_7B, version="0.20.2", kv_cache_memory_bytes=GiB,
            mamba_cache_dtype="float32")
    assert r.state_bytes_per_request_per_gpu == 44 * 2 * 1594368
    with pytest.raises(BadInput, match="not auto, float32, float16 or bfloat16"):
        run(FALCON_H1_7B, kv_cache_memory_bytes=GiB, mamba_ssm_cache_dtype="fp8")
    with pytest.raises(BadInput, match="has no --mamba-cache-dtype"):
        run(FALCON_H1_7B, version="0.9.2", kv_cache_memory_bytes=GiB, mamba_cache_dtype="float32")
    # 0.9.1 still served Falcon-H1 on V0 only (`SupportsV0Only`), whose Mamba cache is not modelled
    with pytest.raises(BadInput, match="V0 engine, whose separate Mamba state cache") as e:
        run(FALCON_H1_7B, version="0.9.1", kv_cache_memory_bytes=GiB)
    assert e.value.hint == "size it for vLLM 0.9.2 or later (V1)"


def test_falcon_h1_parallel_hybrid_has_attention_and_state_in_every_layer():
    r = run(FALCON_H1_7B, version="0.20.2", kv_cache_memory_bytes=GiB)
    # Mamba2 state: conv (3072 + 2*1*256) x 3 x 2 B + ssm 24 x 128 x 256 x 2 B = 1,594,368 B
    assert r.state_bytes_per_request_per_gpu == 44 * 1594368
    assert r.block_size == 784  # 16 x cdiv(1,594,368, 16 x 2,048)
    assert len(r.groups) == 2 and r.bytes_per_block == 44 * 784 * 2048
    assert r.blocks_per_request == -(-262144 // 784) + 1
    assert r.kv_bytes_per_token_per_gpu == 44 * 2048


@pytest.mark.parametrize("tp,block,state", [(1, 1920, 73728 + 2097152),
                                            (2, 1024, 36864 + 1048576)])
def test_kimi_linear_kda_state_and_mla_alignment(tp, block, state):
    r = run(KIMI_LINEAR_48B, version="0.20.2", tensor_parallel_size=tp,
            kv_cache_memory_bytes=GiB, max_model_len=131072)
    # KDA: conv (32x128 + 2x32x128)/tp x 3 x 2 B (bf16) + recurrent 32/tp x 128 x 128 x 4 B
    # (always float32); 20 KDA layers, 7 MLA layers (latent 576 x 2 B, replicated)
    assert r.state_bytes_per_request_per_gpu == 20 * state
    assert r.kv_bytes_per_token_per_gpu == 7 * 1152
    assert r.block_size == block  # 128 x cdiv(state, 128 x 1,152): MLA aligns to 128
    assert len(r.groups) == 4  # 1 MLA group of 7 + 3 KDA groups (7, 7, 6)
    assert r.bytes_per_block == 7 * block * 1152
    assert r.blocks_per_request == -(-131072 // block) + 3
    assert r.arch.family_label == "MLA + Kimi Delta Attention"


@pytest.mark.parametrize("tp", [1, 2])
def test_lfm2_short_convolution_state(tp):
    r = run(LFM2_12B, version="0.20.2", tensor_parallel_size=tp, kv_cache_memory_bytes=GiB,
            max_model_len=32768)
    # conv state (conv_L_cache - 1 = 2, 2048/tp) x 2 B in 10 layers; 6 attention layers of
    # 8/tp KV heads x (64 + 64) x 2 B per token
    assert r.state_bytes_per_request_per_gpu == 10 * 2 * 2048 // tp * 2
    assert r.kv_bytes_per_token_per_gpu == 6 * 8 // tp * 128 * 2
    assert r.block_size == 16  # one 16-token attention page already holds a conv state
    assert len(r.groups) == 3 and r.bytes_per_block == 6 * 16 * 2048 // tp
    assert r.blocks_per_request == 32768 // 16 + 2
    assert r.arch.family_label == "full attention + short convolution"


# --- memory budget, start-up check, errors ------------------------------------------------

def test_max_model_len_that_does_not_fit_reports_largest():
    r = run(LLAMA31_8B, kv_cache_memory_bytes=2 * GiB)  # 16,384 tokens of KV
    assert not r.fits
    # 0.33 keeps one block back for the check: 1,023 blocks x 16 tokens
    assert r.largest_max_model_len == 1023 * 16
    assert "largest max_model_len that fits is 16368" in r.failure


def test_auto_fit_max_model_len():
    r = run(LLAMA31_8B, max_model_len=-1, kv_cache_memory_bytes=2 * GiB)
    assert r.fits and r.max_model_len == 16368


def test_requested_memory_uses_total_times_utilization():
    r = run(LLAMA31_8B, gpu_memory_utilization=0.9, max_model_len=8192)
    assert r.budget.requested == -(-H100.memory_bytes * 9 // 10)
    assert r.budget.utilization == 0.9


def test_weights_that_do_not_fit_fail():
    r = run(DEEPSEEK_V3, max_model_len=8192)
    assert not r.fits and "weights need" in r.failure


def test_tp_must_divide_heads():
    with pytest.raises(BadInput, match="not divisible by 3"):
        run(LLAMA31_8B, tensor_parallel_size=3)


@pytest.mark.parametrize(("heads", "kv", "tp", "why"), [
    # review 24a F1: Qwen3-14B (40 / 8) at TP 5 and Qwen2.5-7B (28 / 4) at TP 7 passed the
    # query-head check, but `QKVParallelLinear`'s divide() fails building the model
    (40, 8, 5, "its 8 KV heads neither split nor replicate evenly over 5 GPUs "
     "('8 is not divisible by 5')"),
    (40, 8, 20, "('20 is not divisible by 8')"),
    (28, 4, 7, "('7 is not divisible by 4')"),
    (40, 8, 3, "40 attention heads are not divisible by 3"),
])
def test_tp_must_split_or_replicate_kv_heads(heads, kv, tp, why):
    cfg = {**QWEN25_7B_INSTRUCT, "num_attention_heads": heads, "num_key_value_heads": kv,
           "hidden_size": 128 * heads}
    with pytest.raises(BadInput, match=re.escape(why)):
        run(cfg, tensor_parallel_size=tp)
    assert valid_tps(normalize(cfg)) == {40: [1, 2, 4, 8], 28: [1, 2, 4]}[heads]


def test_tp_replicates_kv_heads_it_divides_and_mla_is_exempt():
    # 4 KV heads over 4 GPUs: one each (28 layers x K and V x 128 x 2 bytes)
    assert run(QWEN25_7B_INSTRUCT, tensor_parallel_size=4).kv_bytes_per_token_per_gpu == \
        28 * 2 * 128 * 2
    assert valid_tps(normalize({**LLAMA31_8B})) == [1, 2, 4, 8, 16]  # 16: each head twice
    assert tp_refusal(normalize(DEEPSEEK_V3), 16) is None  # one latent, on every rank


def test_max_model_len_above_model_limit():
    with pytest.raises(BadInput, match="exceeds the model's maximum of 131072"):
        run(LLAMA31_8B, max_model_len=200000)


def test_rope_parameters_scale_the_models_maximum():
    # transformers 5 configs carry `rope_parameters` (one dict, or one per layer type) where
    # older ones had `rope_scaling`; vLLM reads both (`patch_rope_parameters`). A 0.27.1
    # DGX Spark start with YaRN x3 over 262,144 (--hf-overrides) served 786,432 tokens
    from kvplan.core.arch import max_model_len_of

    yarn = {"rope_type": "yarn", "factor": 3.0, "original_max_position_embeddings": 262144}
    t = {"max_position_embeddings": 262144, "rope_parameters": yarn}
    assert max_model_len_of(t, yarn_from_original=True)[0] == 786432  # before 0.30
    assert max_model_len_of(t)[0] == 262144  # 0.30+: max_position_embeddings is scaled
    nested = {**t, "rope_parameters": {"full_attention": yarn,
                                       "sliding_attention": {"rope_type": "default"}}}
    assert max_model_len_of(nested, yarn_from_original=True)[0] == 786432


def test_bf16_refused_on_turing_and_fp32_checkpoint_runs_fp16():
    with pytest.raises(BadInput, match="compute capability 8.0"):
        run(LLAMA31_8B, gpu=T4, dtype="bfloat16")
    assert run(LLAMA31_8B, gpu=T4, kv_cache_memory_bytes=GiB).model_dtype == "float16"
    # Gemma 2/3 and GLM-4 refuse float16 from 0.9 (`_FLOAT16_NOT_SUPPORTED_MODELS`), so
    # `_resolve_auto_dtype` falls back to float32 where bfloat16 is missing: 4-byte KV
    g = run(GEMMA2_9B, gpu=T4, kv_cache_memory_bytes=GiB)
    assert g.model_dtype == g.kv_dtype == "float32"
    assert run(GEMMA2_9B, gpu=T4, version="0.8", kv_cache_memory_bytes=GiB
               ).model_dtype == "float16"
    with pytest.raises(BadInput, match="refuses --dtype float16 for model type 'gemma2'"):
        run(GEMMA2_9B, dtype="float16", kv_cache_memory_bytes=GiB)


def test_small_gpus_sample_without_flashinfer_from_031():
    # `flashinfer_sampler_supported()` (0.31-0.33 `topk_topp_sampler.py`): False on 16 SMs
    # or fewer (FlashInfer 0.7+ rejects multi-CTA top-k masking there). Qwen3-0.6B on an
    # L4 given 16 SMs: the 0.33 warm-up sampler drops from 3.5 logits buffers to 1.5 + the
    # kernel's 16 cached rows, u = 256 requests x 151,936 x 4 B
    from dataclasses import replace

    from kvplan.sources.resolve import resolve_gpu, resolve_model

    m, l4 = resolve_model("Qwen/Qwen3-0.6B"), resolve_gpu("l4")

    def act(sms, version="0.33"):
        return size(m, replace(l4, sm_count=sms), EngineArgs(), version).budget.activation

    u = 256 * 151936 * 4
    assert act(17) - act(16) == 2 * u - 16 * 151936 * 4 == 301441024
    assert act(17) == act(58)  # (0 = not known: taken as more)
    # an H100's 1g.10gb MIG slice has 16 SMs as `nvidia-smi mig -lgip` prints (not 132 / 7)
    assert resolve_gpu("NVIDIA-H100-80GB-HBM3-MIG-1g.10gb").sm_count == 16
    assert resolve_gpu("NVIDIA-H100-80GB-HBM3-MIG-3g.40gb").sm_count == 60


def test_sampling_masks_and_processed_logprobs_sample_without_flashinfer():
    # 0.28+ `Sampler.use_flashinfer = not return_sampling_mask and ...`, and
    # `fused_sampler_eligible` is False for processed logprobs (the warm-up asks for 5):
    # the 0.33 profile samples as with VLLM_USE_FLASHINFER_SAMPLER=0 (1.5 buffers + 132
    # cached rows, below the forward pass, which then sets the peak): Llama-3.1-8B on an
    # H100, 27,847 -> 28,292 blocks
    from kvplan.sources.resolve import resolve_gpu

    h100 = resolve_gpu("h100")

    def run33(**kw):
        return size(Model("m", LLAMA31_8B), h100, EngineArgs(**kw), "0.33")

    def act(**kw):
        return run33(**kw).budget.activation

    mask = dict(return_sampling_mask=True, logprobs_mode="processed_logprobs")
    assert act(**mask) == act(flashinfer_sampler=False) < act()
    assert (run33().num_gpu_blocks, run33(**mask).num_gpu_blocks) == (27847, 28292)
    assert act(logprobs_mode="processed_logits") == act(**mask)
    # `_verify_sampling_replay_config`: the mask needs processed_logprobs (0.28+)
    with pytest.raises(BadInput, match="return-sampling-mask needs --logprobs-mode"):
        act(return_sampling_mask=True)

    # before 0.33 the top-k/top-p warm-up runs after sizing: processed logprobs take it off
    # FlashInfer from 0.24 (processed_logits from 0.26), a larger late allocation
    def late(version, mode):
        return size(Model("m", LLAMA31_8B), h100, EngineArgs(logprobs_mode=mode),
                    version).outside_budget_bytes

    assert late("0.25", "processed_logprobs") > late("0.25", "processed_logits") == late(
        "0.25", "raw_logprobs")
    assert late("0.27", "processed_logits") == late("0.27", "processed_logprobs") > late(
        "0.27", "raw_logprobs")
    assert act(logprobs_mode="raw_logits") == act()
    with pytest.raises(BadInput, match="--logprobs-mode 'x' is not one of"):
        act(logprobs_mode="x")


def test_prompt_embeds_buffer_on_v2_and_v1_before_029():
    # 0.29+ `DefaultModelState.__init__`: --enable-prompt-embeds on a text-only model keeps
    # an inputs_embeds buffer [max_num_tokens, hidden] in the model dtype (8,192 x 4,096 x
    # 2 B for Llama-3.1-8B on an H100); 0.24-0.28 list prompt embeds among the features
    # model runner V2 lacks, so the start runs V1
    from kvplan.sources.resolve import resolve_gpu

    h100 = resolve_gpu("h100")

    def run_(version, **kw):
        return size(Model("m", LLAMA31_8B), h100, EngineArgs(**kw), version)

    on, off = run_("0.33", enable_prompt_embeds=True), run_("0.33")
    assert on.budget.activation - off.budget.activation == 8192 * 4096 * 2
    old = run_("0.28", enable_prompt_embeds=True)
    assert run_("0.28").model_runner_v2 and not old.model_runner_v2
    assert any("runs prompt embeds on model runner V1" in n for n in old.notes)


def test_dcp_q_replicate_holds_the_dcp_groups_q_heads():
    # 0.29+ `DeepseekV2MLAAttention`: with --dcp-q-replicate and -dcp > 1, q_b_proj is a
    # `DCPGroupColumnParallelLinear` split TP / dcp ways: DeepSeek-V3 at TP8 DCP8 holds the
    # whole 1,536 x (128 x 192) FP8 q_b_proj of 61 layers, 7/8 of it more than TP8 gives
    # (block scales: 4 B per 128 x 128)
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    m, h200 = resolve_model("deepseek-ai/DeepSeek-V3"), resolve_gpu("h200")
    kw = dict(tensor_parallel_size=8, decode_context_parallel_size=8)
    base = size(m, h200, EngineArgs(**kw), "0.33")
    qrep = size(m, h200, EngineArgs(dcp_q_replicate=True, **kw), "0.33")
    q_b = 1536 * 128 * 192 * 61
    extra = q_b * 7 / 8 * (1 + 4 / (128 * 128))
    assert abs(qrep.budget.weights - base.budget.weights - extra) < 1 << 20
    assert (base.kv_cache_tokens, qrep.kv_cache_tokens) == (5202816, 4973312)
    # no DCP, or a release before the flag: as before
    assert size(m, h200, EngineArgs(tensor_parallel_size=8, dcp_q_replicate=True), "0.33"
                ).budget.weights == size(m, h200, EngineArgs(tensor_parallel_size=8),
                                         "0.33").budget.weights
    with pytest.raises(BadInput, match="has no --dcp-q-replicate"):  # the flag is 0.29+
        size(m, h200, EngineArgs(dcp_q_replicate=True, **kw), "0.28")
    # VLLM_DCP_Q_REPLICATE: the only switch in 0.27-0.28, and it overrides the flag from 0.29
    env = size(m, h200, EngineArgs(dcp_q_replicate_env=True, **kw), "0.28").budget.weights
    assert abs(env - size(m, h200, EngineArgs(**kw), "0.28").budget.weights - extra) < 1 << 20
    assert size(m, h200, EngineArgs(dcp_q_replicate=True, dcp_q_replicate_env=False, **kw),
                "0.33").budget.weights == base.budget.weights
    # every model on DeepseekV2MLAAttention: GLM-4.7-Flash at TP4 DCP4 holds its whole
    # 768 x (20 x 256) bf16 q_b_proj of 47 layers, 3/4 more than TP4 gives
    g = resolve_model("zai-org/GLM-4.7-Flash")
    kw4 = dict(tensor_parallel_size=4, decode_context_parallel_size=4)
    assert size(g, h200, EngineArgs(dcp_q_replicate=True, **kw4), "0.33").budget.weights - \
        size(g, h200, EngineArgs(**kw4), "0.33").budget.weights == 768 * 20 * 256 * 47 * 2 * 3 // 4


def test_flashinfer_sampler_and_custom_all_reduce_terms():
    from kvplan.core import memory as M

    a = run(LLAMA31_8B, version="0.10.2", max_model_len=8192)
    b = run(LLAMA31_8B, version="0.10.2", max_model_len=8192, flashinfer_sampler=True)
    reqs, vocab = 1024, 128256  # H100 serve defaults: min(8192, 1024) dummy requests
    # the sampler dominates the profile peak: logits-sized fp32 buffers + fixed workspace +
    # the dummy run's hidden states, which `profile_run` deletes only after the sampler
    kept = 8192 * 4096 * 2
    assert a.budget.activation == int(reqs * vocab * 4 * 9.6 + 64 * 2**20) + kept
    assert b.budget.activation == int(reqs * vocab * 4 * 3.5 + 64 * 2**20) + kept
    # 0.11.0 still profiles the FlashInfer path; 0.11.1 made it opt-in
    assert run(LLAMA31_8B, version="0.11.0", max_model_len=8192, flashinfer_sampler=True
               ).budget.activation == b.budget.activation
    # 0.33's V2 profile samples warm-up requests through FlashInfer's fused top-k/top-p
    # (default on from compute capability 8.0): bf16 logits + fp32 copy + masked logits +
    # probs = 3.5 buffers, the flag or not; VLLM_USE_FLASHINFER_SAMPLER=0 takes V2's
    # in-place Triton top-k/top-p: the bf16 logits, one fp32 copy and the kernel's cached
    # [min(pow2(min(SMs, N)), SMs), vocab] fp32 rows (all N rows with no SM count), plus what
    # 0.24+ keeps (450 MiB)
    c = run(LLAMA31_8B, max_model_len=8192, flashinfer_sampler=True)
    assert c.budget.activation == run(LLAMA31_8B, max_model_len=8192).budget.activation
    # (0.33 runs every model on model runner V2, whose penalty and grammar state, [1,024 x
    # (128,256 + 2 x 4,008)] int32, the free-memory accounting charges)
    state = reqs * (vocab + 2 * 4008) * 4
    assert c.budget.activation == int(reqs * vocab * 4 * 3.5 + (64 + 450) * 2**20) + state \
        + kept
    off = run(LLAMA31_8B, max_model_len=8192, flashinfer_sampler=False)
    assert off.budget.activation == int(reqs * vocab * 4 * (0.5 + 1 + 1)
                                        + (64 + 450) * 2**20) + state + kept
    from kvplan.sources.resolve import resolve_gpu  # 132 SMs: 132 cached rows

    h100 = size(Model("m", LLAMA31_8B), resolve_gpu("h100"),
                EngineArgs(max_model_len=8192, flashinfer_sampler=False), "0.33")
    # (1.63 buffers, 0.86 GB: below the forward point, which then sets the peak)
    assert int(reqs * vocab * 4 * (0.5 + 1 + 132 / reqs)) < h100.budget.activation - state \
        < off.budget.activation - state
    assert c.sampler_state_bytes == state == 558170112
    # 0.27-0.32's V2 samples the greedy dummy requests in place: the bf16 logits, not 3.9 fp32
    # copies; the top-k/top-p warm-up runs after the KV cache is sized
    v027 = run(LLAMA31_8B, version="0.27", max_model_len=8192, max_num_batched_tokens=1024)
    assert v027.budget.activation == int(reqs * vocab * 2 + (64 + 450) * 2**20) + state \
        + 1024 * 4096 * 2
    assert any("sampler memory (its warm-up" in n for n in v027.notes)
    # 0.27-0.30 count split activation segments as used; 0.31 profiles with max_split 20 MiB
    pinned = "activation segment left split"
    assert any(pinned in n for n in v027.notes)
    assert not any(pinned in n for n in run(LLAMA31_8B, version="0.31", max_model_len=8192).notes)
    assert not any(pinned in n for n in run(LLAMA31_8B, version="0.26", max_model_len=8192).notes)
    assert run(LLAMA31_8B, version="0.19", max_model_len=8192).budget.activation == int(
        reqs * vocab * 4 * 3.9 + 64 * 2**20) + kept
    tp2 = dict(tensor_parallel_size=2, max_model_len=8192)
    nv = Gpu("h100", "NVIDIA H100 80GB HBM3", 81089 << 20, "9.0", interconnect_gbps=900)
    assert run(LLAMA31_8B, gpu=nv, version="0.16", **tp2).budget.non_torch == (
        130 + 420) * 2**20
    # --disable-custom-all-reduce moves nothing: vLLM builds custom all-reduce's buffers
    # before its memory snapshot, and NCCL keeps its NVLink P2P transport (review 25f)
    assert run(LLAMA31_8B, gpu=nv, version="0.16", disable_custom_all_reduce=True, **tp2
               ).budget.non_torch == M.non_torch(2, 1, True) == (130 + 420) * 2**20
    pcie = Gpu("l40s", "NVIDIA L40S", 48305 << 20, "8.9")
    assert run(LLAMA31_8B, gpu=pcie, version="0.16", **tp2).budget.non_torch == (
        130 + 100) * 2**20
    # 0.17-0.26: Hopper at TP > 1 also builds the FlashInfer all-reduce workspace inside the
    # profile (1.58 GiB measured on 0.19.0); from 0.30 it costs no KV cache (a 0.30.0 TP2
    # H100 study: the default, the trtllm backend and the fusion without graphs all match),
    # nor from 0.27, which builds it the same way (review 25f)
    assert run(LLAMA31_8B, gpu=nv, version="0.26", **tp2).budget.non_torch == (
        130 + 420 + 1620) * 2**20
    assert run(LLAMA31_8B, gpu=nv, version="0.27", **tp2).budget.non_torch == (
        130 + 420) * 2**20
    assert run(LLAMA31_8B, gpu=nv, version="0.30", **tp2).budget.non_torch == (
        130 + 420) * 2**20
    assert run(LLAMA31_8B, gpu=nv, **tp2).budget.non_torch == (130 + 420) * 2**20
    # TP8 over NVLink holds 430 MiB more (empirical; not over PCIe, not with PP alone)
    tp8 = dict(tensor_parallel_size=8, max_model_len=8192)
    assert run(LLAMA31_8B, gpu=nv, version="0.16", **tp8).budget.non_torch == (
        130 + 420 + 430) * 2**20
    pcie = Gpu("l40s", "NVIDIA L40S", 46068 << 20, "8.9")
    assert run(LLAMA31_8B, gpu=pcie, version="0.16", **tp8).budget.non_torch == (
        130 + 100) * 2**20
    assert run(LLAMA31_8B, gpu=nv, version="0.16", tensor_parallel_size=4,
               pipeline_parallel_size=2, max_model_len=8192).budget.non_torch == (
        130 + 420) * 2**20


def test_kv_cache_memory_bytes_beyond_the_gpu_does_not_start():
    # vLLM allocates --kv-cache-memory-bytes as told: weights + activation + non-torch +
    # graphs + that must fit the GPU, less the 150 MiB vLLM itself leaves when it suggests
    # the value "to fully utilize gpu memory"
    base = run(LLAMA31_8B, max_model_len=8192, kv_cache_memory_bytes=GiB)
    b = base.budget
    non_kv = b.weights + b.activation + b.non_torch + b.cudagraph
    room = H100.memory_bytes - non_kv - 150 * 2**20
    assert run(LLAMA31_8B, max_model_len=8192, kv_cache_memory_bytes=room).fits
    r = run(LLAMA31_8B, max_model_len=8192, kv_cache_memory_bytes=room + 2**20)
    assert not r.fits and f"{room / GiB:.2f} GiB at most" in r.failure
    # and nothing compares it with gpu_memory_utilization x total: 15 GiB of weights start
    # beside 10 GiB of KV cache at utilization 0.1 (7.92 GiB requested)
    assert run(LLAMA31_8B, max_model_len=8192, gpu_memory_utilization=0.1,
               kv_cache_memory_bytes=10 * GiB).fits
    assert not run(LLAMA31_8B, max_model_len=8192, gpu_memory_utilization=0.1).fits


def test_qwen25_7b_l4_profile_oom_real_start():
    # devinnicholson/llm-inference-benchmark, vLLM 0.21.0 on an L4: with 60,640 batched tokens
    # the profile run ran out of memory after loading 14.29 GiB; with 8,192 it started
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    def start(mnbt):
        return size(resolve_model("Qwen/Qwen2.5-7B-Instruct"), resolve_gpu("l4"),
                    EngineArgs(max_model_len=3628, max_num_batched_tokens=mnbt, max_num_seqs=16,
                               enforce_eager=True, dtype="float16"), "0.21.0")

    assert not start(60640).fits and start(8192).fits


def test_hf_overrides_as_vllm_applies_them():
    from kvplan.engines.vllm_overrides import apply_hf_overrides

    cfg = {"rope_scaling": {"rope_type": "linear", "factor": 2.0, "x": 1},
           "text_config": {"num_hidden_layers": 32, "hidden_size": 4096}, "head_dim": 128}
    out = apply_hf_overrides(cfg, {"rope_scaling": {"rope_type": "yarn", "factor": 4.0},
                                   "text_config": {"num_hidden_layers": 2}, "head_dim": 64})
    assert out["rope_scaling"] == {"rope_type": "yarn", "factor": 4.0}  # a dict: set whole
    assert out["text_config"] == {"num_hidden_layers": 2, "hidden_size": 4096}  # sub-config
    assert out["head_dim"] == 64 and cfg["head_dim"] == 128  # a copy


def test_yarn_max_len_by_release():
    yarn = {**QWEN25_7B_INSTRUCT, "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                   "original_max_position_embeddings": 32768}}
    assert run(yarn, version="0.29", max_model_len=131072).max_model_len == 131072
    with pytest.raises(BadInput, match="exceeds the model's maximum of 32768"):
        run(yarn, version="0.30", max_model_len=131072)


def test_rocm_non_torch():
    # MI300X starts hold 1.18 GiB more outside torch (0.9-0.18 images; 0.23, 0.29, 0.31
    # images: 1.0-1.4 GiB of consumed memory beyond weights and V2 sampler state), 1.79 GiB
    # more at TP8
    mi = Gpu("mi300x", "AMD Instinct MI300X", 196592 << 20, "gfx942", vendor="amd",
             interconnect_gbps=896)
    one = run(LLAMA31_8B, gpu=mi, version="0.18", max_model_len=8192)
    assert one.budget.non_torch == (130 + 1180) * 2**20
    eight = run(LLAMA31_8B, gpu=mi, version="0.18", max_model_len=8192, tensor_parallel_size=8)
    assert eight.budget.non_torch == (130 + 1180 + 1790 + 420) * 2**20
    assert run(LLAMA31_8B, gpu=mi, version="0.31", max_model_len=8192
               ).budget.non_torch == (130 + 1180) * 2**20


def test_gemma4_31b_mi300x_v031_real_start():
    # vllm/vllm-openai-rocm 0.31.1 dev image, virtualised MI300X (191.69 GiB), 32k context,
    # 16,384 batched tokens: "Available KV cache memory: 101.84 GiB", "Actual usage is 61.22
    # GiB for consumed memory (weights + non-torch)" with "Model loading took 58.99 GiB"
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    mi = replace(resolve_gpu("mi300x"), memory_bytes=round(191.69 * GiB))
    r = size(resolve_model("google/gemma-4-31B-it"), mi,
             EngineArgs(max_model_len=32768, max_num_batched_tokens=16384,
                        gpu_memory_utilization=0.9), "0.31.1")
    # -0.23: +0.13 until the V2 encoder runner's [16,384, 5,376] bf16 inputs buffer (0.16
    # GiB, `EncoderRunner.__init__`, read in the 0.31 and 0.33 wheels) was charged; this log's
    # consumed memory leaves no room for it, so the ROCm non-torch term may hold it already
    assert abs(r.budget.available_kv / GiB - 101.84) < 0.25
    # consumed = weights + non-torch + the V2 penalty/grammar state (1,024 x 262,144 vocab)
    consumed = r.budget.weights + r.budget.non_torch + r.sampler_state_bytes
    assert abs(consumed / GiB - 61.22) < 0.1  # 61.16 (61.33 with the inputs buffer)


def test_flashinfer_allreduce_workspace_rule():
    from kvplan.core.versions import VllmVersion as V

    def fi(v, cc="9.0", tp=2, pp=1, dp=1, eager=False, ar=0):
        return V.of(v).flashinfer_allreduce(cc, tp=tp, pp=pp, dp=dp, enforce_eager=eager,
                                            profile_allreduce_bytes=ar)

    # the all-reduce + RMSNorm fusion pass: on by default from 0.17 (off in 0.16.0)
    assert fi("0.17") and not fi("0.16") and not fi("0.19", tp=1)
    # fusion needs compilation, and PP = DP = 1 in 0.17-0.20, PP = 1 in 0.23 (review 25f)
    assert not fi("0.20", pp=2) and not fi("0.19", dp=2) and not fi("0.28", eager=True)
    assert fi("0.21", pp=2, dp=2) and not fi("0.23", pp=2) and fi("0.23", dp=2)
    assert fi("0.28", pp=2) and fi("0.29", pp=2)
    # without the pass (eager, mode 0) 0.29+ builds it inside the profile only if the profile's
    # [max_num_batched_tokens, hidden] all-reduce fits FlashInfer's limit: 64 MiB at TP2 and
    # 0.5 MiB at TP8 on Hopper, so 8,192 x 4,096 bf16 tokens qualify at TP2 only
    llama8b = 8192 * 4096 * 2
    assert fi("0.29", eager=True, ar=llama8b) and not fi("0.28", eager=True, ar=llama8b)
    assert not fi("0.29", eager=True, ar=8192 * 5120 * 2)
    assert not fi("0.33", tp=8, eager=True, ar=llama8b) and fi("0.33", tp=8, ar=llama8b)
    # B200 at TP8: MNNVL's tuned 128 MiB in 0.33 (1 MiB before); B300 64 MiB from 0.29
    v4 = 8192 * 7168 * 2
    assert fi("0.33", "10.0", tp=8, eager=True, ar=v4) and not fi("0.32", "10.0", tp=8,
                                                                    eager=True, ar=v4)
    assert fi("0.29", "10.3", tp=8, eager=True, ar=4096 * 7168 * 2)
    # Hopper and data-centre Blackwell (10.0; the whole SM100 family from 0.20) only
    assert fi("0.19", "10.0") and not fi("0.19", "10.3") and fi("0.20", "10.3")
    assert not fi("0.33", "8.0") and not fi("0.33", "12.0") and not fi("0.33", "gfx942")


def test_block_size_choices_before_018():
    with pytest.raises(BadInput, match="vLLM 0.11 rejects --block-size 256"):
        run(LLAMA31_8B, version="0.11", block_size=256, kv_cache_memory_bytes=GiB)
    assert run(LLAMA31_8B, version="0.14", block_size=256,
               kv_cache_memory_bytes=GiB).block_size == 256
    assert run(LLAMA31_8B, version="0.6", block_size=8,
               kv_cache_memory_bytes=GiB).block_size == 8


@pytest.mark.parametrize("tp,kv_heads", [(1, 4), (4, 1), (8, 1)])
def test_minimax_m3_sparse_index_cache_and_128_blocks(tp, kv_heads):
    from configs import MINIMAX_M3_TEXT

    r = run(MINIMAX_M3_TEXT, tensor_parallel_size=tp, kv_cache_memory_bytes=GiB,
            max_model_len=131072)
    # 60 layers x kv_heads x (128 + 128) x 2 B + 57 sparse layers x 128-dim bf16 index key
    # (never split by TP)
    assert r.kv_bytes_per_token_per_gpu == 60 * kv_heads * 256 * 2 + 57 * 256
    assert r.block_size == 128  # MiniMaxM3SparseBackend supports only 128-token blocks
    assert r.bytes_per_block == 128 * r.kv_bytes_per_token_per_gpu
    assert r.arch.family_label == "full attention + sparse index cache"
    with pytest.raises(BadInput, match="multiple of the 128-token blocks"):
        run(MINIMAX_M3_TEXT, tensor_parallel_size=tp, kv_cache_memory_bytes=GiB, block_size=16)


# --- DeepSeek-V4: packed (block-outermost) groups ---------------------------------------------



def test_deepseek_v4_flash_packed_groups_and_concurrency():
    from configs import DEEPSEEK_V4_FLASH

    r = run(DEEPSEEK_V4_FLASH, gpu=H200, tensor_parallel_size=8, max_model_len=131072,
            kv_cache_memory_bytes=40 * GiB)
    assert r.kv_dtype == "fp8_ds_mla" and r.block_size == 256
    # 5 groups: SWA (64-token blocks) split 22 + 21 layers (repeats = approx-gcd of
    # [43, 21, 20] >= 21 = 22); compressed KV + indexer K (256); C4 states (4); C128 states (8)
    assert sorted(g.block_size for g in r.groups) == [4, 8, 64, 64, 256]
    assert sorted(len(g.specs) for g in r.groups) == [20, 21, 22, 42, 62]
    # widest group: 21 C4 pages (64 x 584 -> 37,440) + 21 indexer pages (64 x 132 -> 8,640)
    # + 20 C128 pages (2 x 584 -> 1,728); pages padded to multiples of 576 B
    assert r.bytes_per_block == 21 * 37440 + 21 * 8640 + 20 * 1728 == 1002240
    assert r.num_gpu_blocks == 40 * GiB // 1002240 == 42853
    # per request: cdiv(M, 256) + 2 SWA groups x (cdiv(127 + T, 64) + 1)
    # + C4 states cdiv(7 + T, 4) + 1 + C128 states cdiv(127 + T, 8) + 1, T = 2 x 8,192
    assert r.blocks_per_request == 512 + 2 * 259 + 4099 + 2065 == 7194
    assert f"{r.max_concurrency:.2f}" == "5.96"
    assert r.kv_cache_tokens == int(42853 / 7194 * 131072) == 780765
    assert r.kv_bytes_per_token_per_gpu == 3915  # 21 x (146.25 + 33.75) + 20 x 6.75
    assert r.fixed_blocks_per_request == 2 * 259 + 4099 + 2065 == 6682


def test_deepseek_v4_flash_refused_start_of_022_offline_llm():
    # vllm-project/vllm#44376: LLM(DeepSeek-V4-Flash, TP2 + EP, fp8 KV, block 256, 30,000
    # tokens) on two GH200s: "(6.66 GiB KV cache is needed, which is larger than the available
    # KV cache memory (5.44 GiB) ... the estimated maximum model length is 13528"
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    def start(usage):
        return size(resolve_model("deepseek-ai/DeepSeek-V4-Flash"), resolve_gpu("gh200"),
                    EngineArgs(tensor_parallel_size=2, enable_expert_parallel=True,
                               kv_cache_dtype="fp8", block_size=256, max_model_len=30000,
                               gpu_memory_utilization=0.95, usage=usage,
                               kv_cache_memory_bytes=round(5.44 * GiB)), "0.22")

    r = start("llm")  # the LLM class doubles the token budget: 16,384 in-flight tokens
    assert not r.fits and "needs 6.66 GiB" in r.failure
    assert abs(r.largest_max_model_len - 13528) <= 10  # 13,524: 5.44 is rounded to 10 MiB
    assert start("serve").fits  # 8,192 in flight: one request needs 3.39 GiB


def test_deepseek_v4_pro_tuple_layout_of_0202_real_start():
    # vLLM 0.20.2, DeepSeek-V4-Pro TP8 on H200, fp8, --max-model-len 8192 (Red Hat sweep
    # record f645b14b): "Available KV cache memory: 13.85 GiB", "GPU KV cache size: 27,042
    # tokens", "Maximum concurrency for 8,192 tokens per request: 3.30x"
    from kvplan.sources.resolve import resolve_model

    r = size(resolve_model("deepseek-ai/DeepSeek-V4-Pro"), H200,
             EngineArgs(tensor_parallel_size=8, max_model_len=8192, kv_cache_dtype="fp8",
                        kv_cache_memory_bytes=int(13.85 * GiB)), "0.20.2")
    # `_get_kv_cache_config_deepseek_v4`: 31 layer tuples x one page of each full-MLA page
    # size (C128 KV 1,728 + indexer K 8,640 + C4 KV 37,440), not the widest group (0.33)
    assert r.bytes_per_block == 31 * (1728 + 8640 + 37440) == 1482048
    assert r.num_gpu_blocks == int(13.85 * GiB) // 1482048 == 10034
    # the compressor states' 32,832 B pages are padded to the 37,440 B MLA page; the logged
    # concurrency weights each group's blocks by its page bytes against the MLA group's
    weighted = -(-(32 * 1435968 + 129 * 31 * 37440 + 129 * 30 * 37440 + 1025 * 31 * 37440
                   + 2049 * 30 * (8640 + 37440)) // 1435968)
    assert weighted == 3039 and r.blocks_per_request == 3364  # block IDs a request holds
    assert f"{r.max_concurrency:.2f}" == "3.30"
    assert r.kv_cache_tokens == int(10034 / 3039 * 8192) == 27047  # 27,042 at 10,032 blocks
    assert r.kv_bytes_per_token_per_gpu == 5789  # 1,482,048 / 256
    with pytest.raises(BadInput, match="asserts an fp8 cache"):
        size(resolve_model("deepseek-ai/DeepSeek-V4-Pro"), H200,
             EngineArgs(tensor_parallel_size=8, max_model_len=8192,
                        kv_cache_memory_bytes=int(13.85 * GiB)), "0.20.2")


def test_deepseek_v4_refuses_bf16_kv_and_small_blocks():
    from configs import DEEPSEEK_V4_FLASH

    with pytest.raises(BadInput, match="only fp8_ds_mla"):
        run(DEEPSEEK_V4_FLASH, gpu=H200, tensor_parallel_size=8, kv_cache_dtype="bfloat16",
            kv_cache_memory_bytes=40 * GiB)
    with pytest.raises(BadInput, match="multiple of the 256"):
        run(DEEPSEEK_V4_FLASH, gpu=H200, tensor_parallel_size=8, block_size=64,
            kv_cache_memory_bytes=40 * GiB)


def test_mamba_cache_mode_with_prefix_caching_by_release():
    # 0.18-0.27 (`MambaModelConfig.verify_and_update_config`): Gated-DeltaNet -> 'align',
    # two states per group; Mamba2 families that support it -> 'all', a state per block
    r = run(QWEN3_NEXT_80B, version="0.20.2", kv_cache_memory_bytes=GiB,
            enable_prefix_caching=True)
    assert r.blocks_per_request == -(-262144 // r.block_size) + 3 * 2
    r = run(NEMOTRON_H_8B, version="0.20.2", kv_cache_memory_bytes=GiB, max_model_len=8192,
            enable_prefix_caching=True)
    # 'all' aligns to the Mamba kernel's chunk (128): a 4,255,744 B state over 4,096 B a
    # token is 1,039 tokens, 9 chunks = 1,152 (`_align_hybrid_block_size`; 1,040 without)
    assert r.block_size == 1152
    assert r.blocks_per_request == 5 * -(-8192 // 1152)  # attention + 4 Mamba groups
    r = run(NEMOTRON_H_8B, version="0.20.2", kv_cache_memory_bytes=GiB, max_model_len=8192,
            enable_prefix_caching=False)
    assert r.block_size == 1040
    # 0.12-0.14 turned prefix caching off for models without Mamba prefix caching; the
    # Mamba2 families kept it ('all')
    r = run(QWEN3_NEXT_80B, version="0.14", kv_cache_memory_bytes=GiB,
            enable_prefix_caching=True)
    assert r.blocks_per_request == -(-262144 // r.block_size) + 3
    r = run(NEMOTRON_H_8B, version="0.12", kv_cache_memory_bytes=GiB, max_model_len=8192,
            enable_prefix_caching=True)
    assert r.blocks_per_request == 5 * -(-8192 // r.block_size)
    # GDN 'align' from 0.15: two states a group
    r = run(QWEN3_NEXT_80B, version="0.15.1", kv_cache_memory_bytes=GiB,
            enable_prefix_caching=True)
    assert r.blocks_per_request == -(-262144 // r.block_size) + 3 * 2
    # 'all' with k speculative tokens holds k more blocks a Mamba group from 0.16
    spec = SpecDecode("ngram", 3, None)
    r = run(NEMOTRON_H_8B, version="0.16", kv_cache_memory_bytes=GiB, max_model_len=8192,
            enable_prefix_caching=True, speculative=spec)
    assert r.blocks_per_request == -(-8192 // r.block_size) + 4 * (-(-8192 // r.block_size) + 3)
    # 0.17.1-0.26 refuse an 'align' block above the token budget (`validate_block_size`)
    with pytest.raises(BadInput, match="above --max-num-batched-tokens 512"):
        run(QWEN3_NEXT_80B, version="0.25", kv_cache_memory_bytes=GiB,
            enable_prefix_caching=True, max_num_batched_tokens=512)
    assert run(QWEN3_NEXT_80B, version="0.27", kv_cache_memory_bytes=GiB,
               enable_prefix_caching=True, max_num_batched_tokens=512).fits is not None
    # align mode needs chunked prefill ("Chunked prefill is required", `MambaModelConfig`)
    with pytest.raises(BadInput, match="without chunked prefill"):
        run(QWEN3_NEXT_80B, version="0.33", kv_cache_memory_bytes=GiB,
            enable_chunked_prefill=False, max_num_batched_tokens=262144)


def test_explicit_mamba_prefix_caching_from_0111_and_attention_free_blocks():
    from configs import MAMBA2_7B

    # 0.11.1 brought experimental Mamba prefix caching on an explicit flag (0.11.0 turned it
    # off for every hybrid): the 'all' block aligned to the kernel's 128-token chunk. The
    # bf16 state, 3 x 10,240 conv + 128 x 64 x 128 SSM elements = 2,158,592 B, is 527 tokens
    # of 4,096 B attention: 5 chunks = 640 (16-aligned without prefix caching: 528)
    r = run(NEMOTRON_H_8B, version="0.11.1", kv_cache_memory_bytes=GiB, max_model_len=8192,
            enable_prefix_caching=True)
    assert r.block_size == 640 and r.blocks_per_request == 5 * -(-8192 // 640)
    r = run(NEMOTRON_H_8B, version="0.11.0", kv_cache_memory_bytes=GiB, max_model_len=8192,
            enable_prefix_caching=True)
    assert r.block_size == 528 and r.blocks_per_request == -(-8192 // 528) + 4
    # attention-free Mamba2: a state of 3 x (8,192 + 2 x 8 x 128) conv + 128 x 64 x 128 SSM
    # elements in bf16 a layer, 64 layers
    state = (3 * (8192 + 2 * 8 * 128) + 128 * 64 * 128) * 2
    assert state == 2158592
    mem = 100 * state * 64

    def mamba(version, **kw):
        return run(MAMBA2_7B, version=version, kv_cache_memory_bytes=mem,
                   enable_prefix_caching=True, **kw)

    # 0.18+: the 16-token default block (`_apply_block_size_default`), a state a block
    r = mamba("0.20.2")
    assert r.num_gpu_blocks == 100 and r.blocks_per_request == 2048 // 16
    # 0.11.1-0.14 without --block-size: the Mamba block is max_model_len, one state a request
    for v in ("0.11.1", "0.12.0", "0.14.1"):
        assert mamba(v).blocks_per_request == 1
    assert mamba("0.12.0", block_size=32).blocks_per_request == 2048 // 32
    assert mamba("0.11.1", block_size=32).blocks_per_request == 1  # set before the flag
    # 0.15-0.17 leave it None (`MambaSpec` block_size None): the start fails
    with pytest.raises(BadInput, match="left unset"):
        mamba("0.17.1")
    assert mamba("0.17.1", block_size=16).blocks_per_request == 128
    assert mamba("0.28.0").blocks_per_request == 2  # 'align' from 0.28


def test_hybrids_default_to_align_mode_from_028_and_mamba2_checkpoints_from_032():
    # 0.28+ turn prefix caching on for hybrids by default and make 'none' 'align'
    # (`_set_default_chunked_prefill_and_prefix_caching_args`, `MambaModelConfig`), where
    # 0.27 left it off: 4 Mamba groups x 1 state -> x 2
    attn = lambda r: -(-8192 // r.block_size)  # noqa: E731
    r = run(NEMOTRON_H_8B, version="0.27", kv_cache_memory_bytes=GiB, max_model_len=8192)
    assert r.blocks_per_request == attn(r) + 4 * 1
    r = run(NEMOTRON_H_8B, version="0.28", kv_cache_memory_bytes=GiB, max_model_len=8192)
    assert r.blocks_per_request == attn(r) + 4 * 2
    # 0.32+: `MambaMixer2.get_kv_cache_spec` adds a prefill checkpoint state per group
    for v in ("0.32", "0.33"):
        r = run(NEMOTRON_H_8B, version=v, kv_cache_memory_bytes=GiB, max_model_len=8192)
        assert r.blocks_per_request == attn(r) + 4 * 3
    r = run(NEMOTRON_H_8B, version="0.33", kv_cache_memory_bytes=GiB, max_model_len=8192,
            enable_prefix_caching=False)  # 'none': one state
    assert r.blocks_per_request == attn(r) + 4 * 1
    from kvplan.sources.resolve import resolve_model

    # Nemotron-3-Nano, 20 GiB at 32k on an H100 (re-derived from the 0.33 wheel): blocks of
    # 2,096 tokens, 1,667 of 12,877,824 B; 16 attention + 4 Mamba groups x 3 = 28 a request
    r = size(resolve_model("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"), H100,
             EngineArgs(kv_cache_memory_bytes=20 * GiB, max_model_len=32768), "0.33")
    assert (r.block_size, r.num_gpu_blocks, r.blocks_per_request) == (2096, 1667, 28)
    assert r.kv_cache_tokens == int(1667 / 28 * 32768) == 1_950_866


@pytest.mark.parametrize("version,ssm,want", [
    # (block, blocks, blocks per request, tokens), re-derived from the 0.28-0.33 wheels
    ("0.28", "auto", (768, 1011, 49, 676_090)),   # no checkpoint: 43 MLA + 3 groups x 2
    ("0.29", "auto", (768, 1011, 52, 637_085)),   # FlashKDA's checkpoint: 3 groups x 3
    ("0.33", "auto", (768, 1011, 52, 637_085)),
    ("0.33", "bfloat16", (384, 2022, 95, 697_441)),  # bf16 recurrent state (0.30+)
    ("0.29", "bfloat16", (768, 1011, 52, 637_085)),  # 0.29 keeps float32
])
def test_kimi_k3_flashkda_checkpoint_and_state_dtype(version, ssm, want):
    # Kimi-K3 at TP8 on an H200, 20 GiB at 32k: 69 KDA layers (96 heads x 128; per GPU a
    # conv state 4,608 x 3 x 2 B + a recurrent state 12 x 128 x 128 x 4 B = 814,080 B,
    # padded to a 768-token MLA page of 1,152 B a token) in 3 groups of 24, 24 MLA layers.
    # `KimiK3DeltaAttention.get_kv_cache_spec`: one prefill checkpoint block with FlashKDA
    # (SM9x/10x/12x, bf16, head 128) from 0.29; 0.30+ honour --mamba-ssm-cache-dtype
    from kvplan.sources.resolve import resolve_model

    r = size(resolve_model("moonshotai/Kimi-K3"), H200,
             EngineArgs(tensor_parallel_size=8, kv_cache_memory_bytes=20 * GiB,
                        max_model_len=32768, mamba_ssm_cache_dtype=ssm), version)
    assert (r.block_size, r.num_gpu_blocks, r.blocks_per_request, r.kv_cache_tokens) == want
    if ssm == "auto":
        assert r.bytes_per_block == 24 * 768 * 1152 == 21_233_664
        assert r.num_gpu_blocks == 20 * GiB // r.bytes_per_block


def test_kimi_k3_without_flashkda_keeps_two_states():
    from kvplan.sources.resolve import resolve_model

    m = resolve_model("moonshotai/Kimi-K3")
    a = EngineArgs(tensor_parallel_size=8, kv_cache_memory_bytes=20 * GiB, max_model_len=32768)
    r = size(m, L4, replace(a, pipeline_parallel_size=4), "0.33")  # SM89: Triton prefill
    assert r.blocks_per_request == 43 + 3 * 2
    with pytest.raises(BadInput, match="auto, float32 and bfloat16"):
        size(m, H200, replace(a, mamba_ssm_cache_dtype="float16"), "0.33")


def test_deepseek_v4_report_shows_the_fixed_per_request_blocks():
    import io

    from configs import DEEPSEEK_V4_FLASH

    from kvplan.render.size import render_size

    r = run(DEEPSEEK_V4_FLASH, gpu=H200, tensor_parallel_size=8, max_model_len=131072,
            kv_cache_memory_bytes=40 * GiB)
    out = io.StringIO()
    render_size(r, out)
    # 2 x 259 SWA + 4,099 C4-state + 2,065 C128-state blocks, 1,002,240 B each
    assert "fixed per request  6,682 blocks (6.24 GiB)" in out.getvalue()


def test_mamba_prefix_caching_off_before_014():
    r = run(NEMOTRON_H_8B, version="0.11", kv_cache_memory_bytes=GiB, max_model_len=8192,
            enable_prefix_caching=True)
    assert r.blocks_per_request == -(-8192 // r.block_size) + 4  # one state per Mamba group


def test_moe_workspace_stays_allocated_while_the_sampler_runs():
    # Qwen3-Next-80B-A3B (512 experts, top-10, expert intermediate 512, hidden 2048), TP1 on
    # an H100 with the serve defaults: 8,192 tokens, 1,024 dummy requests. 0.23+ runs its 16-bit
    # experts on Triton on Hopper: `TritonExperts` workspace per token: top_k x (max(512,
    # 2048) + max(2 x 512, 2048)) = 10 x 4,096 elements. The dummy run's hidden states,
    # 8,192 x 2,048, are held while the sampler runs too.
    ws = 8192 * 10 * 4096 * 2
    sampler = 1024 * 151936 * 4 * 3.9
    kept = 8192 * 2048 * 2
    r = run(QWEN3_NEXT_80B, version="0.23", max_model_len=8192, kv_cache_memory_bytes=GiB)
    assert r.budget.activation == int(ws + sampler + 64 * 2**20) + kept  # 450 MiB from 0.24
    # 0.20-0.22 put 16-bit experts on FlashInfer's CUTLASS kernel: one 8,192 x 2,048 buffer
    fi = run(QWEN3_NEXT_80B, version="0.20", max_model_len=8192, kv_cache_memory_bytes=GiB)
    assert (fi.moe_kernel, fi.moe_workspace_bytes) == ("flashinfer", 8192 * 2048 * 2)
    # 0.11 allocated the workspace per call: the peak is the larger of forward and sampler
    old = run(QWEN3_NEXT_80B, version="0.11", max_model_len=8192, kv_cache_memory_bytes=GiB)
    assert old.budget.activation == int(1024 * 151936 * 4 * 9.6 + 64 * 2**20) + kept
    # expert parallelism keeps experts whole, but the hidden size (2,048) bounds both
    # buffers here whether the intermediate is 512 (EP) or 128 (TP4)
    ep = run(QWEN3_NEXT_80B, version="0.23", max_model_len=8192, kv_cache_memory_bytes=GiB,
             tensor_parallel_size=4, enable_expert_parallel=True)
    tp = run(QWEN3_NEXT_80B, version="0.23", max_model_len=8192, kv_cache_memory_bytes=GiB,
             tensor_parallel_size=4)
    assert ep.budget.activation == tp.budget.activation


def test_decode_context_parallel_shards_tokens_not_memory():
    # vLLM 0.11 Kimi-K2-Thinking recipe on 8x H200 (TP8): 46.80 GiB of KV per GPU gives
    # 715,072 tokens, and with -dcp 8 "Multiplying the GPU KV cache size by the
    # dcp_world_size 8": 5,721,088 tokens (one 64-token block more in that run)
    kv = round(46.80 * GiB)
    base = run(DEEPSEEK_V3, version="0.11", tensor_parallel_size=8, max_model_len=163840,
               kv_cache_memory_bytes=kv)
    dcp = run(DEEPSEEK_V3, version="0.11", tensor_parallel_size=8, max_model_len=163840,
              kv_cache_memory_bytes=kv, decode_context_parallel_size=8)
    per_token = 61 * 576 * 2  # MLA latent, replicated on every TP rank: 70,272 B
    assert base.kv_bytes_per_token_per_gpu == dcp.kv_bytes_per_token_per_gpu == per_token
    assert base.num_gpu_blocks == dcp.num_gpu_blocks == kv // (64 * per_token) == 11173
    assert base.kv_cache_tokens == 11173 * 64 == 715072
    assert dcp.kv_cache_tokens == 8 * 715072
    # a request of 163,840 tokens needs 2,560 blocks, 320 with each rank holding 1/8
    assert (base.blocks_per_request, dcp.blocks_per_request) == (2560, 320)
    assert dcp.kv_bytes_per_token_replica == per_token  # each token stored once per replica
    with pytest.raises(BadInput, match="not divisible"):
        run(DEEPSEEK_V3, tensor_parallel_size=8, decode_context_parallel_size=3,
            kv_cache_memory_bytes=kv)
    with pytest.raises(BadInput, match="DCP not support sliding window"):
        run(GEMMA2_9B, tensor_parallel_size=16, decode_context_parallel_size=2,
            kv_cache_memory_bytes=GiB)
    # GQA (`verify_with_parallel_config`, 0.12+): TP above the KV heads, DCP <= TP / KV heads
    for tp, d, why in ((2, 2, "above the model's 8 KV heads"), (16, 4, "largest DCP")):
        with pytest.raises(BadInput, match=why):
            run(LLAMA31_8B, tensor_parallel_size=tp, decode_context_parallel_size=d,
                kv_cache_memory_bytes=GiB)
    with pytest.raises(BadInput, match="MLA's returns the decode LSE"):
        run(LLAMA31_8B, version="0.11", tensor_parallel_size=16, decode_context_parallel_size=2,
            kv_cache_memory_bytes=GiB)
    # 16 GPUs of Llama-3.1-8B: one KV head replicated a GPU, each request's tokens over 2
    r = run(LLAMA31_8B, tensor_parallel_size=16, decode_context_parallel_size=2,
            kv_cache_memory_bytes=GiB, max_model_len=8192)
    assert r.blocks_per_request == 8192 // 32
    # a hybrid from 0.26: the attention KV is sharded, the GDN states stay whole (Qwen3-Next
    # at TP4 on an H100: 820 attention blocks a request become cdiv(262,144, 640) = 410, so
    # a pool of 8,338 blocks holds 8,338 / 419 x 262,144 tokens)
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    nxt, h100 = resolve_model("Qwen/Qwen3-Next-80B-A3B-Instruct"), resolve_gpu("h100")
    r = size(nxt, h100, EngineArgs(tensor_parallel_size=4, decode_context_parallel_size=2))
    assert (r.blocks_per_request, r.num_gpu_blocks) == (410 + 9, 8338)
    assert r.kv_cache_tokens == int(8338 / 419 * 262144) == 5216603
    with pytest.raises(BadInput, match="from vLLM 0.26"):
        size(nxt, h100, EngineArgs(tensor_parallel_size=4, decode_context_parallel_size=2),
             "0.25")


def test_only_the_last_pipeline_stage_profiles_the_sampler():
    # V1 `profile_run` samples on the last PP rank only: Llama-3.1-8B PP2 on an H100 at 0.11
    # (1,024 dummy requests x 128,256 vocab x 9.6 buffers on stage 1; the 8,192-token forward
    # of 4 x 4096 + 3 x 14336 activations on stage 0)
    r = run(LLAMA31_8B, version="0.11", pipeline_parallel_size=2, max_model_len=8192)
    s0, s1 = r.stages
    sampler = int(1024 * 128256 * 4 * 9.6 + 64 * 2**20)
    forward = int(8192 * (4 * 4096 + 3 * 14336) * 2 + 64 * 2**20)
    # stage 1 also keeps the buffers it receives stage 0's output in (hidden states and
    # residual, 8,192 tokens x 4,096 x 2 B each: `make_empty_intermediate_tensors`), and its
    # own output hidden states (8,192 x 4,096 x 2 B) until its sampler has run
    received = 2 * 8192 * 4096 * 2
    kept = 8192 * 4096 * 2
    assert (s0["available_kv_bytes"] - s1["available_kv_bytes"]
            == s1["weights_bytes"] - s0["weights_bytes"] + sampler + received + kept - forward)
    # the last stage holds fewer blocks: it is reported
    assert r.budget.activation == sampler + received + kept


def test_sliding_window_in_flight_batches_by_release_and_runner():
    # `max_in_flight_tokens` = max_concurrent_batches x max_num_batched_tokens from 0.26
    # (async scheduling on): pp + 1 batches with model runner V2 (dense models from 0.26,
    # every model in 0.33), 2 (pp = 1) or pp with V1 (MoE and hybrid models in 0.26-0.32)
    def inflight(cfg, version, pp=1):
        return run(cfg, version=version, max_model_len=8192, max_num_batched_tokens=2048,
                   pipeline_parallel_size=pp, kv_cache_memory_bytes=8 * GiB).inflight_tokens

    assert inflight(GEMMA3_12B, "0.25") == 2048
    assert inflight(GEMMA3_12B, "0.28") == inflight(QWEN3_NEXT_80B, "0.28") == 2 * 2048
    assert inflight(GEMMA3_12B, "0.28", pp=2) == 3 * 2048  # dense: V2 runner
    assert inflight(QWEN3_NEXT_80B, "0.28", pp=2) == 2 * 2048  # hybrid MoE: V1 runner
    assert inflight(QWEN3_NEXT_80B, "0.33", pp=2) == 3 * 2048
    # --no-async-scheduling: pp batches (`max_concurrent_batches`)
    assert run(GEMMA3_12B, version="0.33", max_model_len=8192, max_num_batched_tokens=2048,
               kv_cache_memory_bytes=8 * GiB, async_scheduling=False).inflight_tokens == 2048


def test_no_async_scheduling_frees_sliding_window_blocks():
    # gpt-oss-20b on an H100 at 0.33: 150,576 usable blocks; a request needs 8,192 full
    # blocks + cdiv(127 + in-flight, 16) + 1 sliding ones: in-flight 2 x 8,192 -> 1,033,
    # without async scheduling 8,192 -> 521, so 16.32x -> 17.28x at 131,072 tokens
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    m, h100 = resolve_model("openai/gpt-oss-20b"), resolve_gpu("h100")
    on = size(m, h100, EngineArgs(), "0.33")
    off = size(m, h100, EngineArgs(async_scheduling=False), "0.33")
    assert on.num_gpu_blocks == off.num_gpu_blocks == 150577
    assert round(on.max_concurrency, 2) == round(150576 / (8192 + 1033), 2) == 16.32
    assert round(off.max_concurrency, 2) == round(150576 / (8192 + 521), 2) == 17.28
    assert (on.kv_cache_tokens, off.kv_cache_tokens) == (2139450, 2265170)
    assert (on.to_json()["inflight_tokens"], off.to_json()["inflight_tokens"]) == (16384, 8192)
    # a speculative method outside vLLM's async list turns it off by default on V1 and
    # refuses it when asked for (0.33: suffix runs on model runner V1)
    from kvplan.core.specdec import from_config

    sfx = from_config({"method": "suffix", "num_speculative_tokens": 4})
    with pytest.raises(BadInput, match="refuses --async-scheduling with suffix"):
        size(m, h100, EngineArgs(speculative=sfx, async_scheduling=True), "0.33")
    # disable_padded_drafter_batch turns it off too (0.26-0.32; 0.33 on model runner V1 only)
    ng = {"method": "ngram_gpu", "num_speculative_tokens": 3}
    unp = from_config({**ng, "disable_padded_drafter_batch": True})

    def inflight(spec, v, **kw):
        return size(m, h100, EngineArgs(speculative=spec, **kw), v).to_json()["inflight_tokens"]

    assert inflight(from_config(ng), "0.31") == inflight(unp, "0.33") == 16384
    assert inflight(unp, "0.31") == 8192
    with pytest.raises(BadInput, match="refuses --async-scheduling with disable_padded"):
        inflight(unp, "0.31", async_scheduling=True)
    with pytest.raises(BadInput, match="refuses --async-scheduling with disable_padded"):
        inflight(unp, "0.20", async_scheduling=True)  # refused from 0.11.1
    from kvplan.core.versions import VllmVersion

    with pytest.raises(BadInput, match="pipeline_parallel_size > 1"):  # 0.11.1-0.14
        VllmVersion.of("0.14").async_scheduling(True, False, None, pp=2)
    assert VllmVersion.of("0.15").async_scheduling(True, False, None, pp=2)


def test_hybrid_max_num_seqs_needs_a_block_each_with_full_cuda_graphs():
    # vLLM 0.20+: "max_num_seqs (N) exceeds available Mamba cache blocks (B)" -- a decoding
    # sequence of a Mamba / linear-attention model needs its own block under FULL graphs
    kw = dict(max_model_len=8192, kv_cache_memory_bytes=GiB, tensor_parallel_size=4)
    r = run(QWEN3_NEXT_80B, version="0.20", max_num_seqs=1024, **kw)
    assert r.num_gpu_blocks < 1024 and not r.fits
    assert (f"max_num_seqs (1024) exceeds the available Mamba cache blocks "
            f"({r.num_gpu_blocks})") in r.failure
    assert run(QWEN3_NEXT_80B, version="0.20", max_num_seqs=r.num_gpu_blocks, **kw).fits
    assert run(QWEN3_NEXT_80B, version="0.20", max_num_seqs=1024, enforce_eager=True,
               **kw).fits
    # only FULL graphs need it (`cudagraph_mode.has_full_cudagraphs()`): PIECEWISE starts
    assert run(QWEN3_NEXT_80B, version="0.33", max_num_seqs=1024, cudagraph_mode="PIECEWISE",
               **kw).fits
    assert run(QWEN3_NEXT_80B, version="0.19", max_num_seqs=1024, **kw).fits
    # review 24a F5: a length failure names this one too (the largest length alone failed)
    r = run(QWEN3_NEXT_80B, version="0.20", max_num_seqs=1024, max_model_len=262144,
            kv_cache_memory_bytes=GiB // 4, tensor_parallel_size=4)
    assert r.failure.startswith("max_model_len 262144 needs ") and r.failure.endswith(
        f"; and max_num_seqs (1024) exceeds the available Mamba cache blocks "
        f"({r.num_gpu_blocks}): with FULL CUDA graphs every decoding sequence needs one; use "
        f"--max-num-seqs {r.num_gpu_blocks} or fewer (or --enforce-eager, or cudagraph_mode "
        "PIECEWISE in --compilation-config)")
    assert run(QWEN3_NEXT_80B, version="0.20", max_num_seqs=r.num_gpu_blocks,
               max_model_len=r.largest_max_model_len, kv_cache_memory_bytes=GiB // 4,
               tensor_parallel_size=4).fits
    assert run(LLAMA31_8B, version="0.20", max_num_seqs=1024,
               max_model_len=8192, kv_cache_memory_bytes=3 * GiB // 2).fits  # 768 blocks, no Mamba


@pytest.mark.parametrize("seqs,mnbt,pw,full", [
    (256, 8192, 51, 35),  # the grids public 0.19-0.23 logs print: "PIECEWISE=51 (largest=512),
    (128, 2048, 35, 19),  # FULL=35 (largest=256)", "PIECEWISE=35 (largest=256), FULL=19"
    (8, 8192, 5, 4),  # "PIECEWISE=5 (largest=16), FULL=4 (largest=8)"
    (10, 8192, 6, 5),  # max_num_seqs joins the grid: 1, 2, 4, 8, 10, 16
])
def test_cudagraph_capture_grid(seqs, mnbt, pw, full):
    from kvplan.core import memory as M

    sizes = M.cudagraph_capture_sizes(seqs, mnbt)
    assert len(sizes) == pw and sum(1 for x in sizes if x <= seqs) == full
    assert M.cudagraph_graphs(seqs, mnbt) == pw + full


def test_cudagraph_estimate_follows_the_graph_count():
    from kvplan.core import memory as M
    from kvplan.core.versions import VllmVersion

    # T4, Qwen2.5-3B (36 layers), max_num_seqs 32: 11 + 7 graphs; a 0.31.0 log prints 0.11 GiB
    assert M.cudagraph_estimate(36, 18) == int((130 + 0.133 * 36 * 18) * 2**20)  # 0.21 GiB
    # hybrids pay the long first FULL capture (vLLM issue 50780) on top
    assert M.cudagraph_estimate(36, 18, state_layers=True) - M.cudagraph_estimate(36, 18) \
        == 300 << 20
    # data-centre Blackwell captures up to 1,024 from 0.30 (`is_device_capability_family(100)`)
    assert VllmVersion.of("0.30").cudagraph_ceiling("10.0") == 1024
    assert VllmVersion.of("0.27").cudagraph_ceiling("10.0") == 512
    assert VllmVersion.of("0.33").cudagraph_ceiling("12.0") == 512
    assert len(M.cudagraph_capture_sizes(1024, 16384, ceiling=1024)) == 3 + 31 + 49


def test_nemotron_h_moe_scratch_and_graph_depth(capsys):
    import json

    from kvplan.cli import main
    from kvplan.core import memory as M

    # Nemotron-3-Super: non-gated relu2 experts in a 1,024-wide latent space, 22 of 512, at
    # TP2 (1,344 rows per rank). Triton's workspaces are M.k x max(N, K) twice with N = I
    # (not 2I) and K the latent: 8,192 x 22 x (1,344 + 1,344) x 2 B
    shape = M.ActivationShape(hidden=4096, intermediate_local=1344, moe_intermediate_local=1344,
                              top_k=22, vocab=131072, act_bytes=2, moe_kernel="modular",
                              moe_hidden=1024, moe_gated=False)
    assert shape.moe_scratch_bytes(8192, None) == 8192 * 22 * 2688 * 2
    # FlashInfer CUTLASS (ModelOpt FP8 on Hopper from 0.16): one M x K buffer
    assert replace(shape, moe_kernel="flashinfer").moe_scratch_bytes(8192, None) == \
        8192 * 1024 * 2

    def size_json(*argv):
        assert main(["size", *argv, "--json"]) in (0, 1)
        return json.loads(capsys.readouterr()[0])

    d = size_json("nemotron-3-super-fp8", "--gpu", "h200", "-tp", "2", "--vllm-version",
                  "0.20.0", "--max-model-len", "8192", "--kv-cache-dtype", "fp8")
    assert d["moe_kernel"] == "flashinfer" and d["moe_workspace_bytes"] == 8192 * 1024 * 2
    # its 88 config layers are half blocks (a mixer or an FFN alone): 44 blocks deep for the
    # graph estimate, 102 graphs at 1,024 sequences, plus the hybrid's long first capture
    assert d["cudagraph_bytes"] == int((130 + 0.133 * 44 * 102 + 300) * 2**20)


def test_moe_kernel_scratch_by_version_deepseek_tp8():
    # DeepSeek-V3 shapes with block-FP8 experts at TP8 (local intermediate 256, 256
    # experts, top-8), 8,192 profile tokens and 1,024 dummy requests on an H200. The dummy
    # run's hidden states (8,192 x 7,168 bf16) are held while the sampler runs.
    cfg = {**DEEPSEEK_V3, "quantization_config": {"quant_method": "fp8",
                                                  "weight_block_size": [128, 128]}}
    sampler = 1024 * 129280 * 4
    kept = 8192 * 7168 * 2

    def act(version, gpu=H200):
        return run(cfg, gpu=gpu, version=version, tensor_parallel_size=8, max_model_len=8192,
                   kv_cache_memory_bytes=GiB).budget.activation

    # 0.11.2: DeepGEMM, rows padded per expert: ceil((65,536 + 256 x 127) / 128) x 128 =
    # 98,048; 98,048 x 512 + 98,048 x 7,168 + 8,192 x 7,168 bf16 elements stay allocated
    deepgemm = (98048 * 512 + 98048 * 7168 + 8192 * 7168) * 2
    assert deepgemm == 1623457792
    assert act("0.11.2") == int(deepgemm + sampler * 9.6 + 64 * 2**20) + kept
    # 0.13 at TP8: the Triton function, freed before the sampler runs
    assert act("0.13.0") == int(sampler * 9.6 + 64 * 2**20) + kept
    # 0.16: FlashInfer CUTLASS keeps one 8,192 x 7,168 buffer (its output reuses it)
    assert act("0.16.0") == int(8192 * 7168 * 2 + sampler * 9.6 + 64 * 2**20) + kept
    # 0.18: TritonExperts, 65,536 x (7,168 + 7,168) kept in the workspace manager
    triton = 65536 * (7168 + 7168) * 2
    assert act("0.18.0") == int(triton + sampler * 3.9 + 64 * 2**20) + kept
    # Blackwell 0.18: FlashInfer TRT-LLM, whose only buffer is its M x K output
    assert act("0.18.0", B200) == int(8192 * 7168 * 2 + sampler * 3.9 + 64 * 2**20) + kept


def test_flashinfer_image_note_for_010_to_0110():
    # 1,024 requests x 128,256 vocab x 4 B x (9.6 - 3.5) buffers = 2.98 GiB
    r = run(LLAMA31_8B, version="0.11.0", max_model_len=8192)
    assert any("--flashinfer-sampler" in n and "3.0 GiB" in n for n in r.notes)
    assert not any("--flashinfer-sampler" in n for n in run(LLAMA31_8B, version="0.11.1",
                                                            max_model_len=8192).notes)


def test_gpt_oss_mxfp4_scratch_on_hopper_is_oai_triton():
    # gpt-oss-20b shapes at TP4 on an H100 (0.19): 8,192 tokens x top-4 x 720 + 8,192 x 2,880
    from kvplan.sources.resolve import resolve_model

    r = size(resolve_model("openai/gpt-oss-20b"), H100, EngineArgs(
        tensor_parallel_size=4, max_model_len=8192, kv_cache_memory_bytes=GiB), "0.19.0")
    assert r.moe_kernel == "oai_triton"
    assert r.moe_workspace_bytes == (8192 * 4 * 720 + 8192 * 2880) * 2


def test_weight_only_int_moe_scratch_is_per_call_before_020():
    # Kimi-K2-style W4A16 experts (compressed-tensors int4): `fused_marlin_moe` allocates
    # per call until the 0.20 int_wna16 oracle; --mm-encoder-tp-mode is bad input when absent
    cfg = {**DEEPSEEK_V3, "quantization_config": {
        "quant_method": "compressed-tensors", "ignore": ["re:.*self_attn.*", "lm_head"],
        "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int", "group_size": 32}}}}}

    def kind(version):
        return run(cfg, gpu=H200, version=version, tensor_parallel_size=8, max_model_len=8192,
                   kv_cache_memory_bytes=GiB).moe_kernel

    assert (kind("0.18.0"), kind("0.20.2")) == ("functional", "modular")
    with pytest.raises(BadInput, match="mm-encoder-tp-mode"):
        run(cfg, gpu=H200, version="0.8", mm_encoder_tp_mode="data",
            kv_cache_memory_bytes=GiB)


def test_mla_profile_scratch_sets_the_forward_peak_at_few_sequences():
    # DeepSeek-R1 (block FP8) at TP8 on H200, 0.18, --max-num-seqs 64, 8,192 tokens.
    # Every MLA layer allocates [chunked_prefill_workspace_size, 16 heads, 128 + 128] bf16 in
    # the profile forward: min(max(8 x 8,192, 4 x 64 x 64), 65,536) = 65,536 rows = 512 MiB,
    # on top of the kept modular MoE workspace (8,192 x 8 rows x (7,168 + 7,168) x 2 B) and
    # the 4 hidden-sized copies (8,192 x 4 x 7,168 x 2 B)
    r1 = {**DEEPSEEK_V3, "quantization_config": {
        "quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}}
    r = run(r1, gpu=H200, version="0.18", tensor_parallel_size=8, max_model_len=8192,
            max_num_seqs=64, kv_cache_memory_bytes=GiB)
    moe = 8192 * 8 * (7168 + 7168) * 2
    assert r.moe_workspace_bytes == moe
    forward = 8192 * 4 * 7168 * 2 + moe + 65536 * 16 * 256 * 2
    sampler = 64 * 129280 * 4 * 3.9  # held + sampler: 1.87 GiB, below the MLA point
    assert forward > moe + sampler
    assert r.budget.activation == forward + 64 * 2**20 == 2_952_790_016


def test_deepseek_v4_profile_forward_peak_by_release():
    # DeepSeek-V4-Pro TP8 on H200, 8,192 tokens, 64 sequences (so the forward sets the peak).
    # Inside a C4 layer's indexer (0.20.2), per token: mHC stream 2 x 4 x 7,168, mixes
    # 4 x 4 x 5, normed input 2 x 7,168, output padded to 64 heads 2 x 64 x 512, q_a+kv and
    # normed copies 4 x 1,536 + 20 x 512, q 2 x 16 x 512, indexer kv/score 16 x 128, indexer
    # q bf16 + fp8 3 x 64 x 128, weights 6 x 64 = 197,072 B; plus the 512 MiB throw-away
    from kvplan.sources.resolve import resolve_model

    v4 = resolve_model("deepseek-ai/DeepSeek-V4-Pro")
    per_tok = (2 * 4 * 7168 + 4 * 4 * 5 + 2 * 7168 + 2 * 64 * 512 + 4 * 1536 + 20 * 512
               + 2 * 16 * 512 + 16 * 128 + 3 * 64 * 128 + 6 * 64)
    assert per_tok == 197072
    fixed = {"0.20.2": 64 * 2**20, "0.33": (64 + 450) * 2**20}  # act_v024_mib from 0.24
    for version, point in (("0.20.2", 8192 * per_tok + 512 * 2**20),
                           # 0.33 runs eagerly: two streams, the previous FFN output, a padded
                           # q, and at TP > 1 a second throw-away of 8 x T x topk
                           ("0.33", 8192 * 301600 + 512 * 2**20 + 8 * 8192 * 1024)):
        r = size(v4, H200, EngineArgs(tensor_parallel_size=8, max_model_len=8192,
                                      max_num_seqs=64, kv_cache_dtype="fp8",
                                      kv_cache_memory_bytes=GiB), version)
        # 0.33 runs V4 on model runner V2: its penalty / grammar state, 64 x (129,280 +
        # 2 x 4,040) x 4 B, is charged too
        state = 64 * (129280 + 2 * 4040) * 4 if version == "0.33" else 0
        assert r.budget.activation == r.moe_workspace_bytes + point + fixed[version] + state
    assert 8192 * per_tok + 512 * 2**20 == int(2051.625 * 2**20)


def test_deepseek_v4_workspace_reservations_grow_with_the_context():
    from kvplan.core import memory as M
    from kvplan.sources.resolve import resolve_model

    t = resolve_model("deepseek-ai/DeepSeek-V4-Flash").config
    # the indexer's K gather: 40 x L // 4 rows of 128 + 4 B (+ 1 MiB), in the same kept buffer
    # as the MoE scratch; at 1M tokens it is 1,321 MiB, above Flash's 768 MiB MoE scratch
    _, floor = M.dsv4_profile(t, tokens=8192, max_model_len=1048576, heads_local=8, tp=8,
                              v033=False, nvidia=True)
    assert floor == 1320 * 1048576 + 2**20
    # 0.33 sizes that buffer with factor 2 past 262,144 tokens: the prefill gather wins
    _, floor = M.dsv4_profile(t, tokens=8192, max_model_len=1048576, heads_local=8, tp=8,
                              v033=True, nvidia=True)
    assert floor == 4 * (1048576 // 4 + 128 + 8192) * 512 * 2 + 8192 * 640 * 4 + 4 * 8192
    # FlashMLA's top-k indices join the prefill gather on CUDA from 0.27 (`nvidia/flashmla.py`):
    # at 128,000 tokens 165,150,720 + 20,971,520 + 32,768 B pass the indexer's 170,008,576
    _, floor = M.dsv4_profile(t, tokens=8192, max_model_len=128000, heads_local=16, tp=4,
                              v033=False, nvidia=True, factor_rule=False, topk_ints=True)
    assert floor == 4 * (32000 + 128 + 8192) * 512 * 2 + 8192 * 640 * 4 + 4 * 8192 == 186155008


def test_deepseek_v4_stack_growth_counted_twice_in_020():
    # DeepSeek-V4's C128 compressor kernel needs 7,896 B of stack per thread; the driver grows
    # every resident thread's stack from ROUNDUP(1,024 + 512, 256) to ROUNDUP(7,896 + 512,
    # 256) B: 6,912 B x 2,048 threads x 132 SMs on an H200. 0.20.2 launches it first inside
    # the graph probe, so it lands in the graph estimate and again in non-torch memory.
    from kvplan.core import memory as M
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    assert M.dsv4_stack_bytes(132, "9.0") == 6912 * 2048 * 132 == 1868562432
    v4, h200 = resolve_model("deepseek-ai/DeepSeek-V4-Pro"), resolve_gpu("h200")
    assert h200.sm_count == 132

    def sized(version, **kw):
        return size(v4, h200, EngineArgs(tensor_parallel_size=8, max_model_len=8192,
                                          kv_cache_dtype="fp8", **kw), version)

    on, no_graphs = sized("0.20.2"), sized("0.20.2", cudagraph_mode="NONE")
    assert on.budget.non_torch - no_graphs.budget.non_torch == 1868562432
    assert on.budget.cudagraph == 1868562432 + int((130 + 0.133 * 61 * 102) * 2**20)
    assert sized("0.33").budget.non_torch == sized("0.33", cudagraph_mode="NONE"
                                                   ).budget.non_torch


def test_estimate_cudagraphs_off_leaves_the_graphs_above_the_budget(capsys):
    import json

    from kvplan.cli import main

    def sized(*extra):
        assert main(["size", "llama-3.1-8b-instruct", "--gpu", "h100", "--max-model-len",
                     "8192", "--json", *extra]) == 0
        return json.loads(capsys.readouterr()[0])

    on = sized()
    off = sized("--env", "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0")
    # 32 layers x 102 graphs: (130 + 0.133 x 32 x 102) MiB no longer subtracted
    assert on["cudagraph_bytes"] == int((130 + 0.133 * 32 * 102) * 2**20)
    assert off["cudagraph_bytes"] == 0
    assert off["available_kv_bytes"] - on["available_kv_bytes"] == on["cudagraph_bytes"]
    assert any("captured after the KV cache is sized" in n for n in off["notes"])


def test_breakable_cudagraphs_and_deepseek_v4_rope():
    # vLLM turns breakable CUDA graphs on for the architectures it lists (0.24+): compilation
    # mode NONE, so no compile-time FlashInfer all-reduce workspace, but the graphs stay
    from kvplan.core import memory as M
    from kvplan.core.arch import normalize
    from kvplan.core.params import rope_cache_bytes
    from kvplan.core.versions import VllmVersion as V
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    v4, h200 = resolve_model("deepseek-ai/DeepSeek-V4-Flash"), resolve_gpu("h200")

    def sized(version, **kw):
        return size(v4, h200, EngineArgs(tensor_parallel_size=8, max_model_len=8192, **kw),
                    version)

    auto, off = sized("0.33"), sized("0.33", breakable_cudagraph=False)
    assert auto.breakable_cudagraph and auto.cudagraph_mode == "FULL_AND_PIECEWISE"
    assert auto.cudagraph_graphs == off.cudagraph_graphs > 0
    # compiled (0.26, where the workspace still costs KV cache), the all-reduce + RMSNorm pass
    # builds it inside the profile (1,620 MiB); breakable, only a profile all-reduce under
    # 0.5 MiB would (TP8 on Hopper)
    assert auto.budget.non_torch == M.non_torch(8, 1, True, False, nvlink_tp8=True)
    auto26, off26 = sized("0.26"), sized("0.26", breakable_cudagraph=False)
    assert auto26.budget.non_torch == auto.budget.non_torch
    assert off26.budget.non_torch - auto26.budget.non_torch == 1620 * 2**20
    assert off.budget.non_torch == auto.budget.non_torch  # 0.30+: no charge either way
    assert not off.breakable_cudagraph
    assert not sized("0.20.2", kv_cache_dtype="fp8").breakable_cudagraph
    assert V.of("0.24").breakable_cudagraph(["DeepseekV4ForCausalLM"])
    assert not V.of("0.28").breakable_cudagraph(["DeepseekV32ForCausalLM"])
    assert V.of("0.29").breakable_cudagraph(["DeepseekV32ForCausalLM"])
    assert not V.of("0.29").breakable_cudagraph(["DeepseekV32ForCausalLM"], "amd")
    assert V.of("0.27").breakable_cudagraph(["LlamaForCausalLM"], env=True)
    assert not V.of("0.20").breakable_cudagraph(["LlamaForCausalLM"], env=True)
    # DeepSeek-V4's rotary caches: fp32, qk_rope_head_dim (64) wide, one per theta (plain and
    # compressed layers), each original 65,536 x factor 16 positions
    arch = normalize(v4.config)
    assert rope_cache_bytes(arch, 2) == 2 * 65536 * 16 * 64 * 4 == 536870912
    # V4-Pro's 61 layers all compress (ratios 4 and 128): one theta, one cache
    pro = normalize(resolve_model("deepseek-ai/DeepSeek-V4-Pro").config)
    assert rope_cache_bytes(pro, 2) == 65536 * 16 * 64 * 4 == 268435456


@pytest.mark.parametrize("ver,video,servers,expected_mib", [
    # before 0.25 there is no reservation
    ("0.24", {"video_backend": "pynvvideocodec"}, 1, 0),
    # 0.25-0.26: one retained decoder of 128 MiB + the 1.8 GiB CUDA context per API server
    ("0.25", {"video_backend": "pynvvideocodec", "hw_decoders": 4}, 2, 2 * (128 + 1843.2)),
    # 0.27+: hw_decoders decoders (default 2)
    ("0.27", {"backend": "pynvvideocodec"}, 1, 2 * 128 + 1843.2),
    ("0.32", {"video_backend": "pynvvideocodec", "hw_decoders": 3}, 1, 3 * 128 + 1843.2),
    # the deepstream codec counts as a GPU backend from 0.28, with one decoder
    ("0.27", {"backend": "deepstream"}, 1, 0),
    ("0.28", {"backend": "deepstream", "hw_decoders": 5}, 1, 128 + 1843.2),
    # 0.33: a decoder covers max_width x max_height x 3 B x 2 surfaces, at least 128 MiB
    ("0.33", {"video_backend": "pynvvideocodec", "max_width": 3840, "max_height": 2160}, 1,
     2 * 128 + 1843.2),
    ("0.33", {"video_backend": "pynvvideocodec", "max_width": 7680, "max_height": 4320}, 1,
     2 * 7680 * 4320 * 6 / 2**20 + 1843.2),
    ("0.33", {"video_backend": "opencv"}, 4, 0),
])
def test_frontend_decoder_reservation_by_release(ver, video, servers, expected_mib):
    from kvplan.core.mmdecode import reserve
    from kvplan.core.versions import VllmVersion

    r = reserve(VllmVersion.of(ver), multimodal=True, mm_ipc_gpu_memory_gb=0,
                api_servers=servers, video=video, loader_env=None)
    assert r.raw_frames == 0
    assert r.decoders == pytest.approx(expected_mib * 2**20, abs=1)


def test_frontend_reservation_rules():
    from kvplan.core.mmdecode import reserve
    from kvplan.core.versions import VllmVersion

    v = VllmVersion.of("0.33")
    # the raw-frame budget is int(GiB x value), shared by the API servers; the loader comes
    # from VLLM_VIDEO_LOADER_BACKEND when --media-io-kwargs names none
    r = reserve(v, multimodal=True, mm_ipc_gpu_memory_gb=1.5, api_servers=3, video=None,
                loader_env="pynvvideocodec")
    assert r.raw_frames == 1610612736
    assert r.decoders == 3 * (256 * 2**20 + int(1.8 * 1024 * 2**20))
    assert reserve(v, multimodal=False, mm_ipc_gpu_memory_gb=1.5, api_servers=1, video=None,
                   loader_env="pynvvideocodec").total == 0
    with pytest.raises(BadInput, match="set together"):
        reserve(v, multimodal=True, mm_ipc_gpu_memory_gb=0, api_servers=1,
                video={"backend": "pynvvideocodec", "max_width": 1920}, loader_env=None)


def test_group_size_rule_by_release():
    # gpt-oss-20b + an EAGLE-3 head: 12 sliding-window layers and 12 + 1 full-attention ones.
    # 0.18+ (13 < 1.5 x 12) and 0.12-0.17 (13 < 1.25 x 12) pad to (13 sw, 13 full): 2 groups;
    # 0.10/0.11 take the smallest bucket: (12 sw), (12 full), (1 full + 11 padding)
    from kvplan.core.blocks import make_groups
    from kvplan.core.kvspec import Spec
    from kvplan.core.versions import VllmVersion

    sw, full = Spec("sliding", 16, 16 * 1024, window=128), Spec("full", 16, 16 * 1024)
    specs = [sw, full] * 12 + [full]
    for v, n in (("0.11", 3), ("0.12", 2), ("0.18", 2)):
        assert len(make_groups(specs, VllmVersion.of(v).group_max_ratio)) == n, v
    # 10 vs 13: only 0.18+'s 1.5 pads the smaller bucket
    specs = [sw] * 10 + [full] * 13
    assert [len(make_groups(specs, VllmVersion.of(v).group_max_ratio))
            for v in ("0.17", "0.18")] == [3, 2]


def test_deepseek_v4_startup_check_before_029_charges_the_tuple_layout():
    # 0.23-0.28 `_max_memory_usage_bytes_from_groups` keeps a DeepSeek-V4 branch: a block
    # costs (largest per-page count in a group) x (the MLA pages' sum), 22 x 47,808 B for
    # Flash, checked against the whole pool; 0.29+ charge the stride and reserve the null
    # block. Auto-fit at 8 GiB (re-derived from the 0.27.1 and 0.29.0 code)
    from kvplan.sources.resolve import resolve_model

    flash = resolve_model("deepseek-ai/DeepSeek-V4-Flash")

    def fit(version, gib=8, mml=-1):
        return size(flash, H200, EngineArgs(tensor_parallel_size=8, kv_cache_dtype="fp8",
                                            max_model_len=mml,
                                            kv_cache_memory_bytes=round(gib * GiB)), version)

    assert fit("0.27.1").max_model_len == 380160
    assert fit("0.29").max_model_len == 483072
    r = fit("0.27.1", 10.3, 1048576)  # the 0.33 layout alone would take it
    assert not r.fits and "needs 10.56 GiB" in r.failure
    # the weights fit: the hint is about the context, not a quantized checkpoint
    assert "lower --max-model-len" in r.notes[-1] and "quantized" not in r.notes[-1]
    assert fit("0.29", 10.3, 1048576).fits


def test_glm5_stores_fp8_by_default_on_sm100_from_032():
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    m, b200 = resolve_model("zai-org/GLM-5-FP8"), resolve_gpu("b200")

    def kv(version, gpu=b200, dtype="auto"):
        return size(m, gpu, EngineArgs(tensor_parallel_size=8, max_model_len=32768,
                                       kv_cache_dtype=dtype), version)

    r = kv("0.33")  # `GlmMoeDsaForCausalLM.verify_and_update_config`
    # 78 sparse-MLA layers x (576 B plain fp8 on FLASHINFER_MLA_SPARSE + 132 B indexer key)
    assert r.kv_dtype == "fp8_e4m3" and r.kv_bytes_per_token_per_gpu == 78 * (576 + 132)
    assert any("GLM-5's KV cache as fp8" in n for n in r.notes)
    assert kv("0.31").kv_dtype == "bfloat16"  # not in 0.31
    assert kv("0.33", resolve_gpu("h200")).kv_dtype == "bfloat16"  # SM10x only
    assert kv("0.33", dtype="bfloat16").kv_dtype == "bfloat16"  # asked for


def test_gpt_oss_captures_up_to_1024_on_every_gpu():
    # `GptOssForCausalLMConfig` (0.13+): max capture size 1024 unless the user set sizes:
    # 1, 2, 4 + 31 steps of 8 + 49 steps of 16 from 256 = 83 sizes, x 2 (PIECEWISE + FULL,
    # max_num_seqs 1,024 on an H100)
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    m, h100 = resolve_model("openai/gpt-oss-120b"), resolve_gpu("h100")
    assert size(m, h100, EngineArgs(), "0.33").cudagraph_graphs == 166
    assert size(m, h100, EngineArgs(max_cudagraph_capture_size=512),
                "0.33").cudagraph_graphs == 102


def test_033_defaults_gb10_small_tier_rocm_v2_and_removed_architectures():
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    llama = resolve_model("meta-llama/Llama-3.1-8B-Instruct")
    # 0.33 `get_batch_defaults`: GB10 (cc 12.1) stays on the small tier despite its memory;
    # before, NVML has no memory info for it and the defaults see 0 bytes (the GB10 logs'
    # 2,048 tokens and 512-token capture grid)
    for version in ("0.33", "0.32", "0.20", "0.11"):
        r = size(llama, resolve_gpu("gb10"), EngineArgs(max_model_len=8192), version)
        assert (r.max_num_batched_tokens, r.max_num_seqs) == (2048, 256)
    # `ROCM_DEFAULT_MRV1_ARCHITECTURES` kept DeepSeek-V3.2 on V1 in 0.29-0.31 only
    v32, mi = resolve_model("deepseek-ai/DeepSeek-V3.2"), resolve_gpu("mi300x")
    a = EngineArgs(tensor_parallel_size=8, max_model_len=8192)
    assert not size(v32, mi, a, "0.31").model_runner_v2
    assert size(v32, mi, a, "0.32").model_runner_v2
    # and GLM-5 (`GlmMoeDsaForCausalLM`) in 0.30-0.31, not 0.29 (review 25v #6)
    glm5 = resolve_model("zai-org/GLM-5-FP8")
    assert [size(glm5, mi, a, v).model_runner_v2 for v in ("0.29", "0.30", "0.31", "0.32")] \
        == [True, False, False, True]
    # `_PREVIOUSLY_SUPPORTED_MODELS`: Mllama ran until 0.10.2
    vision = resolve_model("meta-llama/Llama-3.2-11B-Vision")
    with pytest.raises(BadInput, match="no longer runs MllamaForConditionalGeneration"):
        size(vision, H100, EngineArgs(max_model_len=8192), "0.11")
    assert size(vision, H100, EngineArgs(max_model_len=8192), "0.10.2").fits


def test_mllama_on_v0_keeps_every_layer_in_each_block():
    """review 24a F3: V0's `CacheEngine.get_cache_block_size` sums all 40 attention layers,
    the 8 cross-attention ones too, per 16-token block (was 5 V1-style groups, 12,024 blocks
    of 512 KiB: 5x the capacity)."""
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    vision = resolve_model("meta-llama/Llama-3.2-11B-Vision")
    r = size(vision, resolve_gpu("l40s"), EngineArgs(), "0.10.2")
    per_token = 40 * 2 * 8 * 128 * 2  # layers x K and V x 8 KV heads x 128 x bf16
    assert r.kv_bytes_per_token_per_gpu == per_token and len(r.groups) == 1
    assert r.bytes_per_block == 16 * per_token == 2621440
    assert r.num_gpu_blocks == r.budget.available_kv // 2621440 == 2404
    assert r.kv_cache_tokens == 2404 * 16 and round(r.max_concurrency, 2) == 0.29
    assert not r.fits and r.largest_max_model_len == 38464  # `raise_if_cache_size_invalid`
    assert "an image request takes 401 more blocks for its 6,404 encoder tokens" in \
        " ".join(r.notes)


def test_longrope_defaults_to_its_original_length_from_0111():
    # Phi-3-mini-128k: max_position_embeddings 131,072, original 4,096, rope type longrope
    cfg = {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "hidden_size": 3072,
           "num_attention_heads": 32, "num_key_value_heads": 32, "num_hidden_layers": 32,
           "intermediate_size": 8192, "vocab_size": 32064, "max_position_embeddings": 131072,
           "original_max_position_embeddings": 4096, "torch_dtype": "bfloat16",
           "rope_scaling": {"type": "longrope", "long_factor": [1.0] * 48,
                            "short_factor": [1.0] * 48}}
    m = Model("microsoft/Phi-3-mini-128k-instruct", cfg)
    assert size(m, H100, EngineArgs(), "0.11.1").max_model_len == 4096
    assert size(m, H100, EngineArgs(), "0.11").max_model_len == 131072
    assert size(m, H100, EngineArgs(max_model_len=65536), "0.33").max_model_len == 65536
    # `_get_and_verify_max_len`: -1 starts (and so stays) at original_max_position_embeddings
    r = size(m, H100, EngineArgs(max_model_len=-1), "0.33")
    assert r.fits and r.max_model_len == 4096


def test_gemma4_prefix_lm_raises_the_small_tier_token_budget():
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    # 0.22+ `_get_min_mm_batched_tokens`: one 32-frame video of 70 + 8 tokens a frame = 2,496
    # (vLLM logs "Raising max_num_batched_tokens from 2048 to 2496"); an A100 is on the
    # 2,048 tier, so 2 x 2,496 in-flight tokens hold sliding-window blocks
    m, a100 = resolve_model("google/gemma-4-31B-it"), resolve_gpu("a100-80gb")
    a = EngineArgs(max_model_len=32768, kv_cache_memory_bytes=10 << 30)
    r = size(m, a100, a, "0.33")
    assert r.max_num_batched_tokens == 2496 and r.kv_cache_tokens == 46_138
    assert size(m, a100, a, "0.21").max_num_batched_tokens == 2048
    assert size(m, a100, replace(a, language_model_only=True), "0.33"
                ).max_num_batched_tokens == 2048  # no prefix-LM mode without images
    assert size(resolve_model("google/gemma-4-E4B-it"), a100, a, "0.33"
                ).max_num_batched_tokens == 2048  # not a prefix-LM model


def test_default_token_budget_capped_at_seqs_times_length_from_012():
    # 0.12+ `EngineArgs._set_default_args`: min(max_num_seqs x max_model_len, default);
    # 0.9-0.11.0 V1 set the server default without the cap (only `SchedulerConfig`'s own
    # default, V0's and the engine context's, had it); 0.11.1 already caps (`get_batch_
    # defaults`). With chunked prefill off the budget is max(max_model_len, the default), but
    # 0.8-0.11.0 V1 turned chunked prefill on for every generation model whatever the flag
    kw = dict(max_model_len=1024, max_num_seqs=2, kv_cache_memory_bytes=GiB)
    assert run(LLAMA31_8B, version="0.12", **kw).max_num_batched_tokens == 2048
    assert run(LLAMA31_8B, version="0.11.1", **kw).max_num_batched_tokens == 2048
    assert run(LLAMA31_8B, version="0.11", **kw).max_num_batched_tokens == 8192
    assert run(LLAMA31_8B, version="0.11", usage="engine", **kw).max_num_batched_tokens == 2048
    off = dict(max_model_len=16384, enable_chunked_prefill=False, kv_cache_memory_bytes=GiB)
    forced = run(LLAMA31_8B, version="0.11", **off)
    assert forced.max_num_batched_tokens == 8192
    assert any("ignores --no-enable-chunked-prefill" in n for n in forced.notes)
    assert run(LLAMA31_8B, version="0.11.1", **off).max_num_batched_tokens == 16384
    off["max_model_len"] = 4096
    assert run(LLAMA31_8B, version="0.12", **off).max_num_batched_tokens == 8192


def test_batch_defaults_of_the_first_v1_releases():
    # 0.8.0/0.8.2 `_set_default_args_v1`: 1,024 sequences on every GPU, the 8,192 budget only
    # for a device named H100/H200; 0.8.5 tiers by memory without 0.9's A100 exclusion; the
    # engine context takes the same sequences until 0.9.2 gives it SchedulerConfig's 128
    from kvplan.core.sizing import batch_defaults
    from kvplan.core.versions import VllmVersion
    from kvplan.sources.resolve import resolve_gpu

    l40s, h20, a100, h100 = (resolve_gpu(g) for g in ("l40s", "h20", "a100-80gb", "h100"))
    v = VllmVersion.of
    assert batch_defaults(l40s, v("0.8.2"), "serve", 1) == (2048, 1024)
    assert batch_defaults(h20, v("0.8.2"), "serve", 1) == (2048, 1024)  # 96 GB, not "h100"
    assert batch_defaults(h100, v("0.8.2"), "llm", 1) == (16384, 1024)
    assert batch_defaults(a100, v("0.8.5"), "serve", 1) == (8192, 1024)
    assert batch_defaults(a100, v("0.9.0"), "serve", 1) == (2048, 256)
    assert batch_defaults(h100, v("0.9.1"), "engine", 1) == (2048, 1024)
    assert batch_defaults(l40s, v("0.9.1"), "engine", 1) == (2048, 256)
    assert batch_defaults(h100, v("0.9.2"), "engine", 1) == (2048, 128)


def test_v0_keeps_chunked_prefill_off_where_its_engine_args_say():
    # 0.6.6 `create_engine_config`: over 32K chunked prefill comes on by default, but not
    # with LoRA, a sliding window, speculative decoding, ROCm or a multimodal model; off, the
    # profile runs max(max_model_len, 2048) tokens at once
    kw = dict(kv_cache_memory_bytes=GiB)
    assert run(LLAMA31_8B, version="0.6.6", **kw).max_num_batched_tokens == 2048
    lora = run(LLAMA31_8B, version="0.6.6", enable_lora=True, **kw)
    assert lora.max_num_batched_tokens == 131072


def test_blackwell_trtllm_moe_note_only_where_trtllm_runs_the_experts():
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    b200 = resolve_gpu("b200")

    def risk(name, **kw):
        r = size(resolve_model(name), b200, EngineArgs(max_model_len=8192, **kw))
        return (any("TRT-LLM fused-MoE" in n for n in r.notes),
                r.to_json()["moe_call_scratch_bytes"] > 0)
    # SiLU experts take FlashInfer TRT-LLM first on SM100 (0.33 `_get_priority_backends`):
    # its per-call buffers are charged (`TrtLlmBf16ExpertsMonolithic`, also with DP); a
    # router it does not list (Qwen1.5-MoE's unrenormalised softmax) runs CUTLASS; Gemma 4's
    # gelu_tanh experts go to FlashInfer CUTLASS (TRT-LLM takes SiLU and ReLU^2)
    assert risk("Qwen/Qwen3-30B-A3B") == (False, True)
    assert risk("Qwen/Qwen3-30B-A3B", data_parallel_size=2) == (False, True)
    assert risk("google/gemma-4-26B-A4B") == (False, False)


def test_triton_mla_logits_reserved_in_the_033_profile():
    from kvplan.core.memory import triton_mla_logits_bytes
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    # 1,024 sequences x 16 heads (128 / TP8) x min(pow2(163,840 / 512) = 512, 2 x 304 CUs)
    # x 513 x 4 B on an MI300X
    assert triton_mla_logits_bytes(1024, 16, 163840, 304, 512) == 17213423616
    assert triton_mla_logits_bytes(256, 16, 131072, 108, 512) == 256 * 16 * 216 * 513 * 4
    r1, mi = resolve_model("deepseek-ai/DeepSeek-R1"), resolve_gpu("mi300x")
    a = EngineArgs(tensor_parallel_size=8)
    r = size(r1, mi, a)  # the reservation replaces the 3.76 GB MoE scratch in the workspace
    # (ROCm 0.21+ counts allocated memory: the allocator blocks R1's FP8 tensors hold too)
    # (and the fp32 block scales of its FP8 weights); 0.33's warm-up sampler pass without
    # FlashInfer: 1.5 logits buffers and 304 cached rows, as a helper derived from the wheel
    assert (r.num_gpu_blocks, r.kv_cache_tokens) == (65057, 1040912)
    old = size(r1, mi, a, "0.32")  # reserved after the KV cache is sized: a note
    assert old.kv_cache_tokens == 1232384 and any("16.03 GiB" in n for n in old.notes)
    # FlashMLA / FA3-MLA on an H200: no Triton-MLA reservation
    h200 = size(r1, resolve_gpu("h200"), a)
    assert not any("Triton MLA" in n for n in h200.notes)


def test_glm52_builds_an_indexer_on_21_of_78_layers_from_024():
    from kvplan.core.arch import indexer_layers
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    keep = indexer_layers({"index_topk_freq": 4, "index_skip_topk_offset": 3}, 78)
    assert [i for i, k in enumerate(keep) if k] == [0, 1, 2] + list(range(6, 78, 4))
    assert all(indexer_layers({}, 61))  # DeepSeek-V3.2: every layer
    m, h200 = resolve_model("zai-org/GLM-5.2-FP8"), resolve_gpu("h200")
    a = EngineArgs(tensor_parallel_size=8, kv_cache_memory_bytes=20 << 30)
    # 64-token blocks of 78 x 1,152 B of MLA latent + 21 x 132 B of indexer keys
    r = size(m, h200, a)
    assert r.bytes_per_block == 64 * (78 * 1152 + 21 * 132) and r.kv_cache_tokens == 231808
    assert size(m, h200, a, "0.23").bytes_per_block == 64 * 78 * (1152 + 132)


def test_sm100_sparse_mla_fp8_cache_stays_plain_fp8_from_019():
    from kvplan.core.versions import VllmVersion

    # `_get_backend_priorities`: 0.18 puts FLASHINFER_MLA_SPARSE (plain fp8) first only at
    # <= 16 heads a rank; 0.19+ for any fp8 cache, so 32 heads (TP4) stay 576 B, not 656
    assert VllmVersion.of("0.18").sparse_mla_kv("10.0", 32) == "fp8"
    assert VllmVersion.of("0.18").sparse_mla_kv("10.0", 16) == "none"
    assert VllmVersion.of("0.19").sparse_mla_kv("10.0", 32) == "none"
    assert VllmVersion.of("0.32").sparse_mla_kv("9.0", 32) == "fp8"  # Hopper: FlashMLA


def test_nemotron_h_ssm_state_default_by_release():
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    # no mamba_ssm_cache_dtype in the config: float16 in 0.13-0.19, float32 from 0.20
    # (`NemotronHForCausalLMConfig`); the state's bytes halve, so does the aligned block
    m, h100 = resolve_model("nvidia/Nemotron-H-56B-Base-8K"), resolve_gpu("h100")
    a = EngineArgs(tensor_parallel_size=8, kv_cache_memory_bytes=20 << 30)
    r = size(m, h100, a, "0.19")
    assert (r.block_size, r.num_gpu_blocks, round(r.max_concurrency, 1)) == (2080, 2016, 201.6)
    r = size(m, h100, a, "0.20.2")
    assert (r.block_size, r.num_gpu_blocks) == (4128, 1016)


def test_old_releases_without_the_hybrid_allocator_or_the_architecture():
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    h100 = resolve_gpu("h100")
    # V0 drops Gemma 2's interleaved window (all 42 layers a block); V1 before 0.9.1 unifies
    # every layer to full attention and prints tokens / max_model_len
    g2 = resolve_model("google/gemma-2-9b-it")
    r = size(g2, h100, EngineArgs(), "0.6.6")
    assert r.bytes_per_block == 16 * 42 * 2 * 8 * 256 * 2 and r.kv_cache_tokens == 160768
    r = size(resolve_model("mistralai/Mistral-7B-v0.1"), h100, EngineArgs(), "0.8.5")
    assert round(r.max_concurrency, 2) == round(r.kv_cache_tokens / 32768, 2) == 14.09
    assert len(size(g2, h100, EngineArgs(), "0.9.1").groups) == 2  # the hybrid allocator
    # the registry lists gpt-oss from 0.10.1, Gemma 3 from 0.8.0
    with pytest.raises(BadInput, match="does not have GptOssForCausalLM yet"):
        size(resolve_model("openai/gpt-oss-20b"), h100, EngineArgs(), "0.10.0")
    with pytest.raises(BadInput, match="Gemma3ForConditionalGeneration"):
        size(resolve_model("google/gemma-3-12b-it"), h100, EngineArgs(), "0.7.3")
    with pytest.raises(BadInput, match="no MoE"):  # Nemotron-3's 'E' blocks arrive in 0.12
        size(resolve_model("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"), h100, EngineArgs(),
             "0.11.2")
    # the catalog's MiniMax-M3 runs as MiniMaxM3Sparse* from 0.24, Step-3.7-Flash as
    # Step3p7ForConditionalGeneration from 0.23
    m3, step = resolve_model("MiniMaxAI/MiniMax-M3"), resolve_model("stepfun-ai/Step-3.7-Flash")
    h200 = resolve_gpu("h200")
    for model, absent in ((m3, "0.23"), (step, "0.22")):
        with pytest.raises(BadInput, match="does not have"):
            size(model, h200, EngineArgs(tensor_parallel_size=8), absent)
    # MiniMax-M3's sparse layers store NVFP4 only through the SM100 MSA backend (0.32+)
    nv = EngineArgs(tensor_parallel_size=8, kv_cache_dtype="nvfp4", max_model_len=131072,
                    kv_cache_memory_bytes=20 * GiB)
    with pytest.raises(BadInput, match="only with the SM100 MSA backend"):
        size(m3, h200, nv, "0.33")
    with pytest.raises(BadInput, match="no NVFP4 page for MiniMax-M3"):
        size(m3, resolve_gpu("b200"), nv, "0.31")
    assert size(m3, resolve_gpu("b200"), nv, "0.33").num_gpu_blocks == 7221


def test_sparse_indexer_k_gather_reserved_beside_the_moe_scratch():
    from kvplan.core.memory import indexer_gather_bytes
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    # 40 x 163,840 rows of 128 fp8 + 4 scale bytes, 256-aligned, + the 1 MiB radix scratch
    assert indexer_gather_bytes(163840, 128, factor_rule=True) == \
        163840 * 40 * 128 + 163840 * 40 * 4 + (1 << 20) == 866123776
    # 0.32+ above 262,144 tokens: factor 2, 16 x L rows
    assert indexer_gather_bytes(1 << 20, 128, factor_rule=True) == 16 * (1 << 20) * 132 + (1 << 20)
    # on a B200 (TRT-LLM MoE's 224 MiB kept scratch) the reservation is the larger user of
    # the workspace: 1,074,240 -> 1,066,176 tokens for DeepSeek-V3.2 at TP8 (1,065,472 with the
    # indexer's wk upcast to bf16 at load, 61 x 7,168 x 128 B more; 1,062,912 with the two
    # fp32 rope caches and the 64 MiB top-k index buffer, `topk_buffer_bytes`; 1,062,656
    # with the fp32 scales of its 128 x 128 FP8 blocks; 1,060,992 with CUTLASS-MLA's 128 MiB
    # import-time workspace, `mla_backend_buffers`; 1,050,624 now that the monolithic TRT-LLM
    # kernel keeps nothing but allocates 2,228,762,604 B per call at the MoE point)
    r = size(resolve_model("deepseek-ai/DeepSeek-V3.2"), resolve_gpu("b200"),
             EngineArgs(tensor_parallel_size=8))
    assert r.to_json()["moe_call_scratch_bytes"] == 2228762604
    assert r.kv_cache_tokens == 1050624


def test_kv_dtypes_no_backend_takes():
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    mi, h100 = resolve_gpu("mi300x"), resolve_gpu("h100")
    v32 = resolve_model("deepseek-ai/DeepSeek-V3.2")
    fp8 = EngineArgs(tensor_parallel_size=8, kv_cache_dtype="fp8")
    # ROCM_AITER_MLA_SPARSE lists fp8 only from 0.21
    with pytest.raises(BadInput, match="no fp8 KV cache for sparse MLA"):
        size(v32, mi, fp8, "0.20.2")
    assert size(v32, mi, fp8, "0.21").fits is not None
    with pytest.raises(BadInput, match="Intel Gaudi"):  # no CUDA/ROCm backend lists fp8_inc
        size(Model("m", LLAMA31_8B), h100, EngineArgs(kv_cache_dtype="fp8_inc"))
    with pytest.raises(BadInput, match="fp8_ds_mla"):
        size(resolve_model("deepseek-ai/DeepSeek-R1"), mi,
             EngineArgs(tensor_parallel_size=8, kv_cache_dtype="fp8_ds_mla"))
    # Triton-MLA, the only MLA backend on Ada / ROCm without AITER, lists auto (0.13),
    # bfloat16 (0.15) and fp8 (0.18) but never fp8_e5m2
    lite, l40s = resolve_model("deepseek-ai/DeepSeek-V2-Lite"), resolve_gpu("l40s")
    with pytest.raises(BadInput, match="TRITON_MLA"):
        size(lite, l40s, EngineArgs(kv_cache_dtype="fp8"), "0.15.1")
    assert size(lite, l40s, EngineArgs(kv_cache_dtype="fp8"), "0.18").fits is not None
    with pytest.raises(BadInput, match="fp8_e5m2"):
        size(lite, mi, EngineArgs(kv_cache_dtype="fp8_e5m2"))
    # Hopper sparse MLA with DCP: FLASHMLA_SPARSE (FA's sparse MLA refuses DCP) needs the
    # fp8_ds_mla cache ("DCP for FlashMLA sparse requires an fp8_ds_mla kv-cache", 0.29+)
    dcp = EngineArgs(tensor_parallel_size=8, decode_context_parallel_size=4)
    with pytest.raises(BadInput, match="decode context parallelism only on an fp8_ds_mla"):
        size(v32, resolve_gpu("h200"), dcp)
    # FLASHMLA_SPARSE's DCP: 16 local heads gathered over 4 ranks fit one 64-head kernel
    # (3,673,344 tokens), over 8 (128) they do not
    assert size(v32, resolve_gpu("h200"), replace(dcp, kv_cache_dtype="fp8")
                ).kv_cache_tokens == 3673344
    with pytest.raises(BadInput, match="within one 64-head decode kernel"):
        size(v32, resolve_gpu("h200"), replace(dcp, kv_cache_dtype="fp8",
                                               decode_context_parallel_size=8))


def test_flashmla_sparse_workspace_with_an_fp8_ds_mla_cache():
    from kvplan.core.memory import flashmla_sparse_bytes
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    # bf16 [8,192 x 16 x 576] + [5 x 163,840 x 576] + (0.31+) [8,192 x 64 x 576],
    # [8,192 x 64 x 512], [8,192 x 16 x 512], 2 B each
    full = 2 * (8192 * 16 * 576 + 819200 * 576 + 8192 * 64 * 576 + 8192 * 64 * 512
                + 8192 * 16 * 512)
    assert flashmla_sparse_bytes(8192, 16, 163840, q_head=576, kv_lora_rank=512, v031=True,
                                 factor_rule=True) == full == 2369781760
    assert flashmla_sparse_bytes(8192, 16, 163840, q_head=576, kv_lora_rank=512, v031=False,
                                 factor_rule=False) == 2 * (8192 * 16 * 576 + 819200 * 576)
    # larger than the H200's 1.75 GiB Triton MoE scratch at TP8: 935,296 -> 925,120 tokens
    # (923,904 with the indexer's wk upcast to bf16 at load, 920,768 with the rope caches,
    # the top-k index buffer and the FP8 block scales, 918,336 with the dummy run's hidden
    # states held while the sampler runs)
    r = size(resolve_model("deepseek-ai/DeepSeek-V3.2"), resolve_gpu("h200"),
             EngineArgs(tensor_parallel_size=8, kv_cache_dtype="fp8"))
    assert r.kv_cache_tokens == 918336


def test_flashmla_sparse_reserves_its_workspace_at_build(monkeypatch):
    """Review 25c #1: `FlashMLASparseImpl.__init__` reserves in the workspace manager, which
    exists from `init_device`, so "Model loading took" holds it; from 0.18 the bf16 query
    concat with any cache. DeepSeek-V3.2 TP8 on an H200 at 0.19 (auto: bf16 cache): 8,192 x
    16 x 576 x 2 B in the load, the same out of the activation, the pool unchanged (the
    sweep's seven 0.18-0.19 loads went from -0.23 % to -0.05 %)."""
    from kvplan.core import backends as BK
    from kvplan.core.versions import VllmVersion
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    m, h200 = resolve_model("deepseek-ai/DeepSeek-V3.2"), resolve_gpu("h200")
    a = EngineArgs(tensor_parallel_size=8, max_model_len=8192)
    r = size(m, h200, a, "0.19")
    monkeypatch.setattr(BK, "flashmla_sparse_runs", lambda **kw: False)
    q = size(m, h200, a, "0.19")
    assert r.budget.weights - q.budget.weights == 8192 * 16 * 576 * 2 == 150994944
    assert q.budget.activation - r.budget.activation == 150994944
    assert r.num_gpu_blocks == q.num_gpu_blocks
    monkeypatch.undo()
    # Hopper picks FlashAttention's sparse MLA first from 0.25; SM100 FlashMLA-sparse above
    # 16 heads a rank with a 16-bit cache
    run_ = BK.flashmla_sparse_runs
    v = VllmVersion.of
    assert run_(cc="9.0", vendor="nvidia", version=v("0.24"), kv="bfloat16", heads_local=16,
                forced=None)
    assert not run_(cc="9.0", vendor="nvidia", version=v("0.25"), kv="bfloat16",
                    heads_local=16, forced=None)
    assert not run_(cc="9.0", vendor="nvidia", version=v("0.17"), kv="bfloat16",
                    heads_local=16, forced=None)
    assert run_(cc="10.0", vendor="nvidia", version=v("0.33"), kv="bfloat16", heads_local=32,
                forced=None)
    assert not run_(cc="10.0", vendor="nvidia", version=v("0.33"), kv="bfloat16",
                    heads_local=16, forced=None)


def test_hybrid_blocks_align_to_32_for_256_wide_heads_on_blackwell_012_to_017():
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    # FlashInfer issue 1993 (`HybridAttentionMambaModelConfig`, 0.12-0.17): Qwen3-Next's
    # 256-wide heads on a B200 align the hybrid block to 32 tokens, 288 instead of 272
    m, b200 = resolve_model("Qwen/Qwen3-Next-80B-A3B-Instruct"), resolve_gpu("b200")
    a = EngineArgs(tensor_parallel_size=4, kv_cache_memory_bytes=20 << 30)
    assert size(m, b200, a, "0.14").block_size == 288
    assert size(m, b200, a, "0.18.1").block_size == 272


def test_a_config_without_a_vocabulary_is_refused():
    # the embedding and LM head need vocab_size; kvplan once read a missing one as 0 and
    # left 2 x 1.05B parameters out of a Llama-3-70B estimate
    cfg = {k: v for k, v in LLAMA31_8B.items() if k != "vocab_size"}
    with pytest.raises(BadInput, match="lacks vocab_size"):
        run(cfg)


def test_qwen2_partial_sliding_window_is_refused():
    # `Qwen2Model`: "Sliding window for some but all layers is not supported"
    cfg = {**QWEN25_7B_INSTRUCT, "use_sliding_window": True, "sliding_window": 4096,
           "max_window_layers": 14}
    with pytest.raises(BadInput, match="some layers only"):
        run(cfg, kv_cache_memory_bytes=GiB)


def test_start_up_check_with_a_block_override_and_auto_fit_bounds():
    # 0.29+ check an override's blocks less the null block (`get_kv_cache_configs`):
    # Llama-3.1-8B, 8,192 blocks of 16 tokens = 131,072 tokens, one of them held back
    kw = dict(max_model_len=131072, num_gpu_blocks_override=8192)
    r = run(LLAMA31_8B, version="0.33", **kw)
    assert not r.fits and r.largest_max_model_len == 131056
    r = run(LLAMA31_8B, version="0.33", max_model_len=-1, num_gpu_blocks_override=8192)
    assert r.fits and r.max_model_len == 131056
    # before 0.20.2 the check looks at the profiled pool, not the override
    r = run(LLAMA31_8B, version="0.19", max_model_len=131072, num_gpu_blocks_override=1000)
    assert r.fits and r.num_gpu_blocks == 1000


def test_014_to_018_check_the_first_group_only():
    # `_max_memory_usage_bytes_from_groups` 0.14-0.18: `any_spec = kv_cache_groups[0]`;
    # gpt-oss's first group is sliding (128-token window): 4 GiB passes at 131,072
    from kvplan.sources.resolve import resolve_model

    m = resolve_model("openai/gpt-oss-120b")
    a = EngineArgs(max_model_len=131072, kv_cache_memory_bytes=4 * GiB)
    assert size(m, H100, a, "0.17").fits
    assert not size(m, H100, a, "0.19").fits


def test_blackwell_block_fp8_with_eplb_leaves_trtllm_for_deepgemm():
    from kvplan.core.versions import VllmVersion

    v = VllmVersion.of("0.33")
    kw = dict(fp8_block=True, moe_tp=1, expert_parallel=True)
    assert v.moe_kernel("10.0", **kw) == "flashinfer"  # TRT-LLM, its own per-call scratch
    assert v.moe_kernel("10.0", eplb=True, **kw) == "deepgemm"  # TRT-LLM takes no EPLB


def test_hopper_block_fp8_moe_kernel_by_release():
    # 0.16 `select_fp8_moe_backend`: FlashInfer CUTLASS first in a fixed order; 0.17.1+
    # `_get_priority_backends`: Triton for TP, FlashInfer CUTLASS when ep_size > 1
    from kvplan.core.versions import VllmVersion

    kw = dict(fp8_block=True, moe_tp=4)
    assert VllmVersion.of("0.16").moe_kernel("9.0", expert_parallel=False, **kw) == "flashinfer"
    for v in ("0.17", "0.33"):
        assert VllmVersion.of(v).moe_kernel("9.0", expert_parallel=False, **kw) == "modular"
        assert VllmVersion.of(v).moe_kernel("9.0", expert_parallel=True, **kw) == "flashinfer"


def test_sparse_indexer_decode_logits_in_the_graph_pool():
    # a real 0.26.0 start of GLM-5.2-NVFP4 on 4x GB200 (TP4 + EP, fp8 KV, 819,200 tokens)
    # estimated 4.99 GiB of CUDA graphs: the largest FULL decode graph (512 rows) holds the
    # indexer's [512, 819,200] fp32 decode logits, 1,677,721,600 B, in the graph pool
    from kvplan.core.memory import indexer_decode_logits_bytes
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    assert indexer_decode_logits_bytes(512, 819200) == 512 * 819200 * 4 == 1677721600
    m, g = resolve_model("nvidia/GLM-5.2-NVFP4"), resolve_gpu("gb200")
    a = dict(tensor_parallel_size=4, enable_expert_parallel=True, kv_cache_dtype="fp8",
             gpu_memory_utilization=0.92)
    long, short = (size(m, g, EngineArgs(max_model_len=n, **a), "0.26") for n in (819200, 8192))
    assert long.budget.cudagraph - short.budget.cudagraph == 512 * (819200 - 8192) * 4
    # eager: no graphs, no logits in a pool
    assert size(m, g, EngineArgs(max_model_len=819200, enforce_eager=True, **a),
                "0.26").budget.cudagraph == 0


def test_mamba2_mixer_point_in_the_profile():
    # `MambaMixer2.forward` without attention metadata: in-projection output [T, 2I + 2GN +
    # heads], SSM output [T, I], two copies of the conv input [T, I + 2GN], residual and
    # normed input (2 H). Nemotron-3-Nano (I 4,096, 8 groups x 128, 64 heads, H 2,688) at
    # 8,192 tokens: 8,192 x 27,008 x 2 B, above the forward when the sampler is small
    from kvplan.core.memory import mamba2_profile_point
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    per_token = (2 * 4096 + 2 * 1024 + 64) + 4096 + 2 * (4096 + 2048) + 2 * 2688
    assert mamba2_profile_point(4096, 8, 128, 64, 2688, 1, 8192, 2) == 8192 * per_token * 2
    m, h200 = resolve_model("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"), resolve_gpu("h200")
    r = size(m, h200, EngineArgs(), "0.31")  # V2's greedy dummy sampler: the mixer sets it
    held = r.moe_workspace_bytes
    fixed = int((64 + 450) * 2**20)
    assert r.budget.activation - r.sampler_state_bytes == held + 8192 * per_token * 2 + fixed


def test_pp_start_up_check_counts_every_stage_in_014_to_016():
    # 0.14-0.16 `get_kv_cache_configs` check one request against the global groups (all 32
    # layers: 32 x 65,536 B a block x 8,192 blocks = 16 GiB at 131,072 tokens) in the
    # smallest worker's memory; 0.17.1+ per worker, where one stage's 16 layers need 8 GiB
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    m, l4 = resolve_model("meta-llama/Llama-3.1-8B-Instruct"), resolve_gpu("l4")
    old = size(m, l4, EngineArgs(pipeline_parallel_size=2), "0.14.1")
    assert not old.fits and "needs 16.00 GiB" in old.failure
    avail = min(s["available_kv_bytes"] for s in old.stages)
    blocks = avail // (32 * 65536)
    assert f"the largest max_model_len that fits is {blocks * 16}" in old.failure
    assert size(m, l4, EngineArgs(pipeline_parallel_size=2, max_model_len=-1),
                "0.14.1").max_model_len == blocks * 16
    assert size(m, l4, EngineArgs(pipeline_parallel_size=2), "0.18").fits


def test_model_max_length_replaces_the_derived_length_from_085():
    # Command-R / Cohere: `derive_max_model_len_and_key` (0.8.5+) takes model_max_length
    # over the minimum of the other keys; 0.8.2 kept it one term of the minimum
    from kvplan.core.arch import max_model_len_of

    cfg = {"model_type": "cohere", "max_position_embeddings": 8192, "model_max_length": 131072}
    assert max_model_len_of(cfg) == (131072, "model_max_length")
    assert max_model_len_of(cfg, model_max_length_wins=False) == (8192,
                                                                  "max_position_embeddings")
    # dynamic NTK scales the length like every type but su / longrope / llama3 (/ YaRN 0.30+)
    dyn = {"max_position_embeddings": 4096,
           "rope_scaling": {"type": "dynamic", "factor": 2.0,
                            "original_max_position_embeddings": 2048}}
    assert max_model_len_of(dyn)[0] == 8192


def test_deepgemm_first_workspace_in_fp8_bytes_from_031():
    from kvplan.core.memory import ActivationShape

    # Qwen3-30B-A3B-FP8 on one H100, 8,192 tokens: M.k = 65,536 rows, 128 local experts
    # padded to 128 rows each -> M_sum 81,792; K 2,048, N 1,536, A 768
    s = ActivationShape(hidden=2048, intermediate_local=6144, moe_intermediate_local=768,
                        top_k=8, vocab=151936, act_bytes=2, moe_kernel="deepgemm",
                        local_experts=128)
    assert s.moe_workspace(8192) == 81792 * (2048 + 2048)  # 0.13-0.30
    # 0.31+ `_fp8_workspace_shape`: 2,048 / 2 columns; the 8,192 x 2,048 output is smaller
    assert replace(s, deepgemm_fp8_ws=True).moe_scratch_bytes(8192, None) == \
        (81792 * 1024 + 81792 * 2048) * 2 == 502530048


def test_v2_runner_captures_no_graphs_under_stock_torch_compile_from_032():
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    m, h100 = resolve_model("meta-llama/Llama-3.1-8B-Instruct"), resolve_gpu("h100")
    a = EngineArgs(compilation_mode=1)
    r31, r32 = (size(m, h100, a, v) for v in ("0.31", "0.32"))
    assert r31.cudagraph_mode == "FULL_DECODE_ONLY" and r31.budget.cudagraph > 0
    assert r32.cudagraph_mode == "NONE" and r32.budget.cudagraph == 0


def test_triton_mla_takes_no_full_graphs_before_022():
    # `MLACommonMetadataBuilder` keeps NEVER for Triton-MLA to 0.21 (A100: its only MLA
    # backend), so vLLM captures the 51 PIECEWISE graphs only; 0.22's builder is UNIFORM_BATCH
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    m, a100 = resolve_model("deepseek-ai/DeepSeek-V2-Lite"), resolve_gpu("a100-80gb")
    r20, r22 = (size(m, a100, EngineArgs(), v) for v in ("0.20", "0.22"))
    assert (r20.cudagraph_mode, r20.cudagraph_graphs) == ("PIECEWISE", 51)
    assert (r22.cudagraph_mode, r22.cudagraph_graphs) == ("FULL_AND_PIECEWISE", 86)
    # (with the 128 MiB FlashInfer-MLA workspace its module allocates when 0.11.1-0.24's
    # backend selection imports it, `mla_backend_buffers`)
    assert r20.kv_cache_tokens == 1462000


def test_fp8_kv_on_ada_notes_flashinfer_workspace_in_graph_probe():
    # FlashAttention 2 stores no fp8, so vLLM runs FlashInfer; its 394 MiB workspace is first
    # touched in the 0.20+ CUDA-graph probe (a helper's reading of the 0.33 wheel), noted, not
    # charged; bf16 KV on FA2 or 0.19 (graphs not subtracted) carry no such note
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    m, l40s = resolve_model("Qwen/Qwen3-8B"), resolve_gpu("l40s")

    def noted(version, kv):
        r = size(m, l40s, EngineArgs(max_model_len=40960, kv_cache_dtype=kv), version)
        return any("fp8 KV cache on Ampere/Ada/SM12x runs on FlashInfer" in n for n in r.notes)
    assert noted("0.33", "fp8") and not noted("0.33", "auto") and not noted("0.19", "fp8")


def test_mla_backend_modules_allocate_at_import():
    # `get_valid_backends` (0.11.1+) imports every MLA backend of the list; cutlass_mla.py
    # allocates its 128 MiB SM100 workspace at import (every release), flashinfer_mla.py its
    # 128 MiB buffer (to 0.24, lazy from 0.25, then first used in the graph probe). A helper
    # derived each figure below by hand from the wheels
    from kvplan.core.arch import normalize
    from kvplan.core.backends import mla_backend_buffers
    from kvplan.core.versions import VllmVersion
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    r1 = resolve_model("deepseek-ai/DeepSeek-R1")
    arch = normalize(r1.config)
    mib = 1 << 20

    def bufs(cc, v, **kw):
        return mla_backend_buffers(arch, cc=cc, vendor="nvidia", version=VllmVersion.of(v),
                                   forced=kw.get("forced"), kv="auto", tp=8)
    assert bufs("9.0", "0.11.0") == (0, 0) and bufs("9.0", "0.18") == (128 * mib, 0)
    assert bufs("9.0", "0.25") == (0, 0)
    assert bufs("10.0", "0.11.0") == (128 * mib, 0)  # CUTLASS-MLA forced
    assert bufs("10.0", "0.12") == (256 * mib, 0) and bufs("10.0", "0.14") == (128 * mib, 0)
    assert bufs("10.0", "0.16") == (128 * mib, 0)  # FlashInfer-MLA forced (qk_nope 128)
    assert bufs("10.0", "0.18") == (256 * mib, 0)
    assert bufs("10.0", "0.33") == (128 * mib, 128 * mib)
    assert bufs("10.0", "0.33", forced="CUTLASS_MLA") == (128 * mib, 0)
    h200, b200 = resolve_gpu("h200"), resolve_gpu("b200")

    def blocks(gpu, v):
        return size(r1, gpu, EngineArgs(tensor_parallel_size=8, max_model_len=8192,
                                        gpu_memory_utilization=0.92,
                                        enable_prefix_caching=False), v).num_gpu_blocks
    # (B200: 37,978 with the M x K workspace the monolithic TRT-LLM MoE no longer keeps)
    assert (blocks(h200, "0.18"), blocks(b200, "0.18")) == (40641, 38031)
    lite = size(resolve_model("deepseek-ai/DeepSeek-V2-Lite"), resolve_gpu("a100-80gb"),
                EngineArgs(max_model_len=8192), "0.18")
    assert lite.num_gpu_blocks == 88615
    # (37,679 before the TRT-LLM MoE's per-call buffers, 2.08 GiB at 16,384 tokens, were
    # charged at the MoE point, where they now set the profile peak)
    assert size(r1, b200, EngineArgs(tensor_parallel_size=8, max_model_len=8192),
                "0.33").num_gpu_blocks == 37039


def test_hybrid_token_figure_without_prefix_caching_uses_max_model_len_blocks():
    # a real 0.17.1 start (Nemotron-3-Super FP8, H200 TP2, fp8 KV, 8,192 tokens, no prefix
    # caching, 64.72 GiB): the Mamba groups report max_model_len as their block size, so
    # "GPU KV cache size" is 4,078 // 6 groups x 8,192 = 5,562,368, not x 8,320 (a variable
    # of the logprobs-mode code shadowed the Mamba cache mode in session 19)
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    r = size(resolve_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8"), resolve_gpu("h200"),
             EngineArgs(tensor_parallel_size=2, kv_cache_dtype="fp8", max_model_len=8192,
                        enable_prefix_caching=False,
                        kv_cache_memory_bytes=int(64.72 * 2**30)), "0.17.1")
    assert (r.num_gpu_blocks, r.kv_cache_tokens) == (4078, 5_562_368)


def test_custom_all_reduce_needs_a_fully_connected_group_and_a_size_it_takes():
    # `CustomAllreduce.__init__`: off past two GPUs that NVLink does not fully connect
    # ("more than two PCIe-only GPUs"; bridged RTX 3090s pair up) and at world sizes outside
    # _SUPPORTED_WORLD_SIZES (2, 4, 6, 8; 16 from 0.27): NCCL's PCIe-class term instead
    from kvplan.sources.resolve import resolve_gpu

    def nt(gpu, tp, version="0.31"):  # (0.17-0.29 add FlashInfer's all-reduce workspace)
        return run(LLAMA31_8B, gpu=resolve_gpu(gpu), version=version, tensor_parallel_size=tp,
                   max_model_len=8192).budget.non_torch >> 20

    assert [nt("rtx-3090", tp) for tp in (2, 4, 8)] == [130 + 420, 130 + 100, 130 + 100]
    assert nt("h100", 4) == 130 + 420 and nt("h100", 8) == 130 + 420 + 430
    assert nt("a100-pcie-80gb", 4) == 130 + 100  # bridged pairs, as the 3090
    # a 4-way NVLink bridge fully connects H200 NVL quads
    assert nt("h200-nvl", 4, version="0.33") == 130 + 420
    # across hosts only 0.27+'s multi-node NVLink path runs it, on Blackwell in one NVLink
    # domain (GB200 NVL72 trays of 4): not over H200 hosts at TP16
    assert nt("h200", 16, version="0.33") == 130 + 100 + 430
    assert nt("gb200", 8, version="0.33") == 130 + 420 + 430
    assert nt("gb200", 8, version="0.26") == 130 + 100 + 430 + 1620  # (+ FlashInfer's, to 0.29)


def test_flashinfer_allreduce_only_at_the_tp_sizes_its_table_lists():
    # `PassConfig.flashinfer_max_size`: 2, 4, 8 (16 "mnnvl multi-node" on SM100/103 from
    # 0.25); Hopper at TP16 builds no FlashInfer all-reduce workspace
    from kvplan.core.versions import VllmVersion

    def fi(cc, tp, v):
        return VllmVersion.of(v).flashinfer_allreduce(cc, tp=tp, pp=1, dp=1,
                                                      enforce_eager=False)

    assert fi("9.0", 8, "0.26") and not fi("9.0", 16, "0.26")
    assert not fi("10.0", 16, "0.24") and fi("10.0", 16, "0.25")


def test_nnodes_spreads_the_world_over_hosts():
    # `--nnodes 2` (0.12+): TP8 over two hosts of 4 runs without custom all-reduce on Hopper
    from kvplan.sources.resolve import resolve_gpu

    def nt(nnodes):
        return run(LLAMA31_8B, gpu=resolve_gpu("h200"), version="0.33", tensor_parallel_size=8,
                   max_model_len=8192, nnodes=nnodes).budget.non_torch >> 20

    assert (nt(1), nt(2)) == (130 + 420 + 430, 130 + 100 + 430)
    with pytest.raises(BadInput, match="--nnodes"):
        nt(0)


@pytest.mark.parametrize("tp, nnodes, version, says", [
    # `EngineArgs.create_engine_config`: a ValueError from 0.27, an assertion in 0.11.1-0.26
    (8, 3, "0.33", "'Invalid data-parallel launch options: `--nnodes 3` must evenly divide "
                   "the total world size (8)' (use --nnodes 1, 2, 4 or 8,"),
    (2, 3, "0.27", "must evenly divide the total world size (2)' (use --nnodes 1 or 2,"),
    (1, 2, "0.33", "refuses --nnodes 2 for 1 GPU"),
    (8, 3, "0.26", "'world_size=8 must be divisible by nnodes=3.'"),
    (8, 3, "0.11.1", "'world_size=8 must be divisible by nnodes=3.'"),
    # the flag arrives in 0.11.1
    (8, 2, "0.11.0", "vLLM 0.11.0 has no --nnodes"),
])
def test_nnodes_must_divide_the_world(tp, nnodes, version, says):
    with pytest.raises(BadInput) as e:
        run(LLAMA31_8B, version=version, tensor_parallel_size=tp, nnodes=nnodes)
    assert says in e.value.line()
    # a divisor starts, from the flag's first release
    assert run(LLAMA31_8B, version="0.11.1", tensor_parallel_size=8, nnodes=2).fits


def test_kv_cache_size_line_from_concurrency_since_0201():
    """review 24a F4: 0.20.1's `_report_kv_cache_config` already logs int(max_concurrency x
    max_model_len), as 0.20.2; 0.20.0 the per-group block count (Gemma-2-9B, 2 groups)."""
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    gemma, l40s = resolve_model("google/gemma-2-9b-it"), resolve_gpu("l40s")
    new, old = (size(gemma, l40s, EngineArgs(), v) for v in ("0.20.1", "0.20.0"))
    assert new.num_gpu_blocks == old.num_gpu_blocks == 8541 and new.blocks_per_request == 897
    assert new.kv_cache_tokens == int(8541 / 897 * 8192) == 78002
    assert old.kv_cache_tokens == 8541 // 2 * 16 == 68320


def test_unmodelled_layer_types_are_refused_not_sized_as_attention():
    # a hybrid kvplan has no rule for: its linear-attention layers would have been charged as
    # 64 full-attention layers (Qwen3-Next's plan under an unknown model_type)
    from kvplan.errors import UnsupportedArchitecture

    hybrid = {**QWEN3_NEXT_80B, "model_type": "futurehybrid",
              "architectures": ["FutureHybridForCausalLM"]}
    hybrid.pop("full_attention_interval", None)
    hybrid["layer_types"] = ["linear_attention", "linear_attention", "linear_attention",
                             "full_attention"] * 12
    with pytest.raises(UnsupportedArchitecture,
                       match=r"layer_types has 'linear_attention' layers \(0, 1, 2, 4, 5, 6, "
                             r"\.\.\.\)"):
        normalize(hybrid)
    # state fields on an architecture without a hybrid rule
    zamba_like = {**LLAMA31_8B, "model_type": "futuremamba",
                  "layers_block_type": ["mamba", "hybrid"] * 16, "mamba_d_state": 64}
    with pytest.raises(UnsupportedArchitecture,
                       match=r"fields \(layers_block_type, mamba_d_state\)"):
        normalize(zamba_like)
    # sparse-attention spellings carry an indexer only the MLA path models
    with pytest.raises(UnsupportedArchitecture, match="'deepseek_sparse_attention'"):
        normalize({**LLAMA31_8B, "layer_types": ["deepseek_sparse_attention"] * 32})


def test_attention_only_layer_plans_still_size():
    # MiniMax-M2's attn_type_list of 1s (softmax attention on every layer), an all-attention
    # layers_block_type and transformers' layer_types spellings are plain attention
    base = normalize(LLAMA31_8B).layers
    for extra in ({"attn_type_list": [1] * 32}, {"layers_block_type": ["attention"] * 32},
                  {"layer_types": ["full_attention"] * 32, "mamba_d_state": 128}):
        assert normalize({**LLAMA31_8B, **extra}).layers == base


def test_minicpm3_caches_decompressed_heads_not_a_latent():
    # openbmb/MiniCPM3-4B (transformers' MiniCPM3Config defaults name it): MLA-shaped
    # projections, but minicpm3.py caches 40 heads of K and V, each qk_nope + qk_rope = 96
    cfg = {"architectures": ["MiniCPM3ForCausalLM"], "model_type": "minicpm3",
           "hidden_size": 2560, "num_hidden_layers": 62, "num_attention_heads": 40,
           "num_key_value_heads": 40, "kv_lora_rank": 256, "q_lora_rank": 768,
           "qk_nope_head_dim": 64, "qk_rope_head_dim": 32, "vocab_size": 73448,
           "intermediate_size": 6400, "max_position_embeddings": 32768,
           "tie_word_embeddings": True, "torch_dtype": "bfloat16"}
    for tp in (1, 2):
        r = run(cfg, tensor_parallel_size=tp, kv_cache_memory_bytes=GiB)
        assert r.kv_bytes_per_token_per_gpu == 62 * 40 // tp * (96 + 96) * 2  # 952,320 at TP1
    arch = normalize(cfg)
    assert not arch.is_mla and arch.family_label == "full attention"


def test_exaone4_letter_pattern():
    # LGAI-EXAONE/EXAONE-4.0-32B writes sliding_window_pattern "LLLG" beside layer_types:
    # 48 sliding (4,096) + 16 full layers of 8 x (128 + 128) x 2 B
    cfg = {"architectures": ["Exaone4ForCausalLM"], "model_type": "exaone4",
           "hidden_size": 5120, "num_hidden_layers": 64, "num_attention_heads": 40,
           "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 27392,
           "vocab_size": 102400, "max_position_embeddings": 131072, "sliding_window": 4096,
           "sliding_window_pattern": "LLLG",
           "layer_types": ["sliding_attention"] * 3 + ["full_attention"], "torch_dtype": "bfloat16"}
    cfg["layer_types"] = cfg["layer_types"] * 16
    arch = normalize(cfg)
    assert [x.kind for x in arch.layers[:4]] == ["sliding"] * 3 + ["full"]
    assert sum(x.kind == "sliding" for x in arch.layers) == 48
    assert run(cfg, kv_cache_memory_bytes=GiB).kv_bytes_per_token_per_gpu == 262144
    with pytest.raises(BadInput, match="string of L"):
        normalize({**cfg, "sliding_window_pattern": "LLX"})
    # without layer_types transformers' Exaone4Config cannot build them from the letters
    with pytest.raises(BadInput, match="needs layer_types"):
        normalize({k: v for k, v in cfg.items() if k != "layer_types"})


def test_kimi_k3_without_text_model_type():
    # vLLM builds the Kimi-Linear config for KimiK3ForConditionalGeneration whatever the text
    # config's model_type says: KDA layers stay state layers, not MLA
    from kvplan import catalog
    from kvplan.sources.resolve import model_from_entry

    m = model_from_entry(*catalog.load("models").get("moonshotai/Kimi-K3"))
    cfg = {**m.config, "text_config": {k: v for k, v in m.config["text_config"].items()
                                       if k != "model_type"}}
    assert normalize(cfg).layers == normalize(m.config).layers


@pytest.mark.parametrize("arch", ["Step5ForCausalLM", "InklingForConditionalGeneration",
                                  "DeepseekV41ForCausalLM", "HrmTextForCausalLM"])
def test_unmodelled_cache_layouts_are_refused(arch):
    # vLLM 0.33 gives these caches kvplan's layer kinds do not hold (summary caches, rings,
    # per-loop caches, ...): refused, never sized as a plain decoder
    from kvplan.errors import UnsupportedArchitecture

    with pytest.raises(UnsupportedArchitecture, match=f"does not model {arch}'s cache"):
        normalize({**LLAMA31_8B, "architectures": [arch]})
    sink = {**LLAMA31_8B, "architectures": ["PanguProMoEV2ForCausalLM"], "param_sink_number": 128}
    with pytest.raises(UnsupportedArchitecture, match="sink attention"):
        normalize(sink)


def test_hy_v4_indexers_follow_indexer_types():
    # HYV4Config's defaults (vLLM 0.29+): 34 MLA layers of 576 x 2 B; with every layer
    # 'indexed_attention', indexers (128 + 4 B a token) only where indexer_types says 'full':
    # layers 0, 1, 5, ..., 33 = 10
    cfg = {"model_type": "hy_v4", "architectures": ["HYV4ForCausalLM"], "vocab_size": 120832,
           "hidden_size": 2816, "intermediate_size": 6912, "moe_intermediate_size": 768,
           "num_hidden_layers": 34, "num_attention_heads": 32, "q_lora_rank": 1536,
           "kv_lora_rank": 512, "qk_nope_head_dim": 192, "qk_rope_head_dim": 64,
           "v_head_dim": 256, "n_routed_experts": 256, "n_shared_experts": 1,
           "num_experts_per_tok": 8, "index_topk": 2048, "index_head_dim": 128,
           "index_n_heads": 16, "max_position_embeddings": 262144, "torch_dtype": "bfloat16"}
    sparse = {**cfg, "layer_types": ["indexed_attention"] * 34}
    assert run(sparse, gpu=B200, kv_cache_memory_bytes=GiB).kv_bytes_per_token_per_gpu == \
        34 * 1152 + 10 * 132 == 40488
    # no layer_types: every layer dense MLA, no indexer; 0.29-0.31 do not count
    # 'indexed_attention' as sparse either
    assert run(cfg, gpu=B200, kv_cache_memory_bytes=GiB).kv_bytes_per_token_per_gpu == 34 * 1152
    assert run(sparse, gpu=B200, version="0.31", kv_cache_memory_bytes=GiB
               ).kv_bytes_per_token_per_gpu == 34 * 1152
    with pytest.raises(BadInput, match="indexer_types"):
        normalize({**sparse, "indexer_types": ["full"] * 33})


def test_cohere2_window_plus_one_from_029():
    # Command R7B: 24 sliding layers (4,096) + 8 full; from 0.29 commandr.py passes
    # sliding_window + 1 as the window, which the eviction formula uses too: a sliding layer
    # keeps cdiv(min(window - 1 + 8,192 in flight, 131,072), 16) + 1 blocks a request
    cfg = {"architectures": ["Cohere2ForCausalLM"], "model_type": "cohere2", "hidden_size": 4096,
           "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
           "intermediate_size": 14336, "vocab_size": 256000, "max_position_embeddings": 131072,
           "sliding_window": 4096, "sliding_window_pattern": 4, "torch_dtype": "bfloat16"}
    old = run(cfg, version="0.28", kv_cache_memory_bytes=8 * GiB, max_num_batched_tokens=8192)
    new = run(cfg, version="0.29", kv_cache_memory_bytes=8 * GiB, max_num_batched_tokens=8192)
    window = {g.spec.window for g in old.groups if g.spec.window}
    assert window == {4096} and {g.spec.window for g in new.groups if g.spec.window} == {4097}
    assert old.kv_bytes_per_token_per_gpu == new.kv_bytes_per_token_per_gpu == 32 * 4096


def test_exaone_moe_per_layer_windows():
    # K-EXAONE's `sliding_windows` (exaone_moe.py): each sliding layer's own window; a null
    # entry leaves the layer without one
    cfg = {"architectures": ["ExaoneMoeForCausalLM"], "model_type": "exaone_moe",
           "hidden_size": 2048, "num_hidden_layers": 4, "num_attention_heads": 16,
           "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 8192,
           "vocab_size": 1000, "max_position_embeddings": 32768, "sliding_window": 4096,
           "layer_types": ["sliding_attention"] * 3 + ["full_attention"],
           "sliding_windows": [128, 4096, None, None], "torch_dtype": "bfloat16"}
    arch = normalize(cfg)
    assert [(x.kind, x.window) for x in arch.layers] == [
        ("sliding", 128), ("sliding", 4096), ("full", 0), ("full", 0)]
    with pytest.raises(BadInput, match="sliding_windows"):
        normalize({**cfg, "sliding_windows": [128]})
    # 0.14-0.26 build it with Exaone4Attention, which reads sliding_window alone
    old = run(cfg, version="0.26", kv_cache_memory_bytes=GiB)
    assert {g.spec.window for g in old.groups} == {0, 4096}


def test_llava_text_config_takes_llama_defaults_and_llama4_layer_types_size():
    # llava-hf/llava-1.5-7b-hf saves its text_config without LlamaConfig's defaults (4,096
    # hidden, 32 layers of 32 heads): 32 x 32 x (128 + 128) x 2 B
    llava = {"architectures": ["LlavaForConditionalGeneration"], "model_type": "llava",
             "text_config": {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                             "max_position_embeddings": 4096, "vocab_size": 32064,
                             "torch_dtype": "float16"},
             "vision_config": {"hidden_size": 1024, "image_size": 336,
                               "intermediate_size": 4096, "model_type": "clip_vision_model",
                               "num_attention_heads": 16, "num_hidden_layers": 24,
                               "patch_size": 14},
             "torch_dtype": "float16"}
    assert run(llava, kv_cache_memory_bytes=GiB).kv_bytes_per_token_per_gpu == 524288
    # a top-level config missing them is still refused
    with pytest.raises(BadInput, match="lacks hidden_size"):
        normalize({"architectures": ["LlamaForCausalLM"], "model_type": "llama"})
    # transformers writes 'chunked_attention' layer_types into re-saved Llama 4 configs, which
    # llama4.py does not read: sized as before, not refused
    from kvplan import catalog
    from kvplan.sources.resolve import model_from_entry

    m = model_from_entry(*catalog.load("models").get("meta-llama/Llama-4-Scout-17B-16E-Instruct"))
    tc = m.config["text_config"]
    resaved = {**m.config, "text_config": {**tc, "layer_types": [
        "full_attention" if (i + 1) % 4 == 0 else "chunked_attention"
        for i in range(tc["num_hidden_layers"])]}}
    assert normalize(resaved).layers == normalize(m.config).layers


def test_iquest_loop_coder_keeps_a_cache_per_loop():
    # IQuest-Coder-V1-40B-Loop (a public port's verbatim config): 80 layers run twice; vLLM
    # registers 80 full caches (loop 0) and 80 sliding caches of 64 tokens (loop 1), each
    # 8 KV heads of hidden // heads = 128
    cfg = {"architectures": ["IQuestLoopCoderForCausalLM"], "model_type": "iquestloopcoder",
           "hidden_size": 5120, "num_hidden_layers": 80, "num_attention_heads": 40,
           "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 27648,
           "vocab_size": 76800, "max_position_embeddings": 131072, "loop_num": 2,
           "loop_window_size": 64, "torch_dtype": "bfloat16"}
    for tp in (1, 2):
        r = run(cfg, tensor_parallel_size=tp, kv_cache_memory_bytes=8 * GiB)
        assert r.kv_bytes_per_token_per_gpu == 160 * 8 // tp * 256 * 2  # 655,360 at TP1
        assert {g.spec.window for g in r.groups} == {0, 64}
    # weights once per layer, plus each layer's loop gate (128 -> 40 with bias)
    from kvplan.core.params import count_params

    h, layer = 5120, 5120 * (40 + 16) * 128 + 40 * 128 * 5120 + 3 * 5120 * 27648
    assert count_params(normalize(cfg)).total == (
        2 * 76800 * h + 80 * (layer + 2 * h + 129 * 40) + h)
    with pytest.raises(BadInput, match="no SupportsPP"):
        run(cfg, pipeline_parallel_size=2, kv_cache_memory_bytes=8 * GiB)


def test_layer_plans_transformers_builds_without_layer_types():
    # transformers' config classes (5.16-5.20, which vLLM 0.33 loads) build the sliding/full
    # plan a config.json leaves out, and vLLM follows it: every layer under the window was
    # kvplan's answer before (OLMo-3-7B at 64k on an H100: 5.62x concurrency, not 3.63x)
    base = {**LLAMA31_8B, "sliding_window": 4096}

    def kinds(mt, n=8, **extra):
        cfg = {**base, "model_type": mt, "num_hidden_layers": n, **extra}
        return "".join("S" if x.kind == "sliding" else "F" for x in normalize(cfg).layers)

    assert kinds("olmo3") == "SSSFSSSF"  # (i + 1) % 4
    assert kinds("cohere2") == "SSSFSSSF"  # sliding_window_pattern's default 4
    assert kinds("cohere2", sliding_window_pattern=2) == "SFSFSFSF"
    assert kinds("gpt_oss") == "SFSFSFSF"
    assert kinds("cwm") == "FSSSFSSS"  # full iff i % 4 == 0
    assert kinds("gemma4_text", n=14) == "SSSSSF" * 2 + "SF"  # every sixth and the last
    assert kinds("muse_glimmer_text", n=6) == "SFSSSF"  # counted back from the last layer
    assert kinds("cohere2_moe", first_k_dense_replace=2) == "FF" + "SSSF" + "SS"
    assert kinds("laguna") == "F" * 8
    # the class default window where config.json has none (OLMo 3: 4,096)
    olmo3 = {k: v for k, v in base.items() if k != "sliding_window"}
    arch = normalize({**olmo3, "model_type": "olmo3", "num_hidden_layers": 4})
    assert [(x.kind, x.window) for x in arch.layers][-2:] == [("sliding", 4096), ("full", 0)]
    # a given Gemma 4 list ends in a full layer whatever it says (Gemma4TextConfig)
    given = ["sliding_attention"] * 8
    assert kinds("gemma4_text", layer_types=given) == "S" * 7 + "F"


def test_transformers_518_layer_names_in_hybrids():
    # a config re-saved by transformers 5.18+ says full_attention / linear_attention: a
    # granite-4.0-h plan kept its attention layers (it had become all Mamba2), a Nemotron-H
    # layers_block_type sizes (it was refused)
    old = normalize(NEMOTRON_H_8B)
    names = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}
    new = {k: v for k, v in NEMOTRON_H_8B.items() if k != "hybrid_override_pattern"}
    new["layers_block_type"] = [names[c] for c in NEMOTRON_H_8B["hybrid_override_pattern"]]
    assert normalize(new).layers == old.layers
    granite = {"model_type": "granitemoehybrid", "architectures": ["GraniteMoeHybridForCausalLM"],
               "hidden_size": 1536, "num_hidden_layers": 4, "num_attention_heads": 12,
               "num_key_value_heads": 4, "intermediate_size": 512, "vocab_size": 1000,
               "mamba_n_heads": 48, "mamba_d_head": 64, "mamba_d_state": 128, "mamba_d_conv": 4,
               "mamba_n_groups": 1, "mamba_expand": 2, "max_position_embeddings": 4096,
               "layer_types": ["linear_attention", "full_attention"] * 2}
    assert [x.kind for x in normalize(granite).layers] == ["mamba2", "full"] * 2


def test_multimodal_wrappers_of_session_26_audit():
    # Qwen3-ASR-1.7B: the language model is thinker_config.text_config (vLLM builds the
    # thinker only): 28 layers x 8 x (128 + 128) x 2 B; the thinker's dtype applies
    asr = {"architectures": ["Qwen3ASRForConditionalGeneration"], "model_type": "qwen3_asr",
           "thinker_config": {"model_type": "qwen3_asr_thinker", "dtype": "bfloat16",
                              "text_config": {
                                  "model_type": "qwen3_asr_text", "hidden_size": 2048,
                                  "intermediate_size": 6144, "num_hidden_layers": 28,
                                  "num_attention_heads": 16, "num_key_value_heads": 8,
                                  "head_dim": 128, "vocab_size": 151936,
                                  "max_position_embeddings": 65536,
                                  "tie_word_embeddings": True}}}
    r = run(asr, kv_cache_memory_bytes=GiB)
    assert r.kv_bytes_per_token_per_gpu == 114688 and r.model_dtype == "bfloat16"
    # `get_torch_dtype` reads the root config's dtype before the text (thinker) config's
    assert normalize({**asr, "torch_dtype": "float16"}).config_dtype == "float16"
    # Gemma 3n saves intermediate_size as one width per layer: accepted and counted per layer
    g = {**GEMMA3_12B, "text_config": {**GEMMA3_12B["text_config"],
                                        "intermediate_size": [15360] * 24 + [7680] * 24}}
    from kvplan.core.params import count_params

    full, listed = count_params(normalize(GEMMA3_12B)), count_params(normalize(g))
    assert full.total - listed.total == 24 * 3 * 3840 * (15360 - 7680)
    # InternVL-hf / Molmo2 give [height, width] image and patch sizes
    vl = {**GEMMA3_12B, "vision_config": {**GEMMA3_12B.get("vision_config", {}),
                                           "model_type": "siglip_vision_model",
                                           "hidden_size": 1152, "num_hidden_layers": 27,
                                           "image_size": [896, 896], "patch_size": [14, 14]}}
    assert normalize(vl).vision_config["image_size"] == 896
    # refused with the reason: Ultravox's language model is text_model_id's; Whisper and the
    # causal Voxtral keep encoder caches kvplan does not model
    from kvplan.errors import UnsupportedArchitecture

    with pytest.raises(UnsupportedArchitecture, match="size meta-llama/Llama-3.1-8B"):
        try:
            normalize({"architectures": ["UltravoxModel"], "model_type": "ultravox",
                       "text_model_id": "meta-llama/Llama-3.1-8B-Instruct"})
        except UnsupportedArchitecture as e:
            raise UnsupportedArchitecture(f"{e} {e.hint}") from None
    with pytest.raises(UnsupportedArchitecture, match="WhisperForConditionalGeneration"):
        normalize({**LLAMA31_8B, "architectures": ["WhisperForConditionalGeneration"]})
    # PaliGemma 1's text config leaves the length to GemmaConfig's 8,192
    pali = {"architectures": ["PaliGemmaForConditionalGeneration"], "model_type": "paligemma",
            "text_config": {"model_type": "gemma", "hidden_size": 2048, "num_hidden_layers": 18,
                            "num_attention_heads": 8, "num_key_value_heads": 1,
                            "intermediate_size": 16384, "vocab_size": 257216}}
    assert normalize(pali).max_position == 8192


def test_model_files_that_ignore_head_dim():
    # qwen2.py and a dozen others take hidden // heads whatever head_dim says: a Qwen2.5-7B
    # config with head_dim 64 still keeps 28 x 4 x (128 + 128) x 2 B a token
    cfg = {**QWEN25_7B_INSTRUCT, "head_dim": 64}
    assert run(cfg, kv_cache_memory_bytes=GiB).kv_bytes_per_token_per_gpu == 28 * 4 * 256 * 2
    # Llama reads head_dim
    assert run({**LLAMA31_8B, "head_dim": 64},
               kv_cache_memory_bytes=GiB).kv_bytes_per_token_per_gpu == 32 * 8 * 128 * 2
