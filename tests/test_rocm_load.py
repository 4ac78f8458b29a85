"""ROCm's load figure for unquantized MoE experts (core/loadmem.py), by hand."""

from configs import DEEPSEEK_V3

from kvplan.core.allocsim import Allocator
from kvplan.core.loadmem import Schemes, decoder_weights, load_extra
from kvplan.core.sizing import EngineArgs, Gpu, Model, size

MI300X = Gpu("mi300x", "AMD Instinct MI300X", 196592 << 20, "gfx942", vendor="amd",
             interconnect_gbps=896)
H200 = Gpu("h200-sxm", "NVIDIA H200", 143771 << 20, "9.0")
# Qwen3-30B-A3B's text layout (Qwen3-VL-30B-A3B has the same experts)
QWEN3_30B_A3B = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
    "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
    "head_dim": 128, "intermediate_size": 6144, "moe_intermediate_size": 768,
    "num_experts": 128, "num_experts_per_tok": 8, "vocab_size": 151936,
    "max_position_embeddings": 40960, "torch_dtype": "bfloat16",
}

# one layer on one GPU, bf16: w13 [128, 1536, 2048], w2 [128, 2048, 768]
S13, S2 = 128 * 1536 * 2048 * 2, 128 * 2048 * 768 * 2  # 768 and 384 MiB
D13, D2 = 128 * 1536 * 256, 128 * 2048 * 256  # 256 B more per row: 48 and 64 MiB
MiB = 1 << 20


def test_allocator_segments_split_and_release():
    a = Allocator()
    x = a.malloc(3 * MiB)  # 1-10 MiB: a 20 MiB segment, split (17 MiB free in it)
    y = a.malloc(5 * MiB)  # best fit: the 17 MiB rest of that segment
    assert a.reserved == 20 * MiB and a.allocated == 8 * MiB
    big = a.malloc(30 * MiB + 1)  # over 10 MiB: a segment of its own, rounded up to 2 MiB
    assert a.reserved == 52 * MiB and a.allocated == 8 * MiB + 30 * MiB + 512
    a.free(big)
    a.empty_cache()  # a wholly free segment goes back
    assert a.reserved == 20 * MiB
    a.free(x)
    a.empty_cache()  # the 20 MiB segment still holds y
    assert a.reserved == 20 * MiB
    a.free(y)  # merges with its free neighbours into one 20 MiB block
    z = a.malloc(19 * MiB)  # a later request takes it whole: a 1 MiB rest is not split off
    assert a.reserved == 20 * MiB and z.size == a.allocated == 20 * MiB
    small = a.malloc(100)  # up to 1 MiB: 512-byte blocks of a 2 MiB small segment
    assert small.size == 512 and a.reserved == 22 * MiB


def test_moe_padding_replayed_by_hand():
    def weights(gpu, version, **kw):
        return size(Model("m", QWEN3_30B_A3B), gpu, EngineArgs(max_model_len=8192, **kw),
                    version).budget.weights

    base = weights(H200, "0.18")
    # to 0.20 (device memory in use): per layer the padded w13 takes a new segment, the
    # padded w2 goes into the freed original w13, whose rest (768 - 448 MiB) stays reserved;
    # the last original w2 is still cached. With the kept padding: 20.625 GiB
    assert weights(MI300X, "0.18") - base == (
        48 * (D13 + D2) + 48 * (S13 - S2 - D2) + S2) == 22_145_925_120
    assert weights(MI300X, "0.24") - base == 48 * (D13 + D2)  # allocated memory from 0.21
    assert weights(MI300X, "0.30") == base  # 0.30 copies the padded view back
    # online FP8 experts go through Fp8MoEMethod, which does not pad; from 0.21 nothing
    # else of its load is counted
    assert weights(MI300X, "0.21", quantization="fp8") == weights(H200, "0.21",
                                                                 quantization="fp8")


def test_moe_padding_one_weight_padded():
    # Qwen3-235B-A22B at TP4: w2 rows are 384 x 2 = 768 B, not padded; w13 rows 8,192 B are
    w = decoder_weights([(None, 0, True)] * 94, {}, hidden=4096, heads=64, vocab=0, tp=4,
                        s=Schemes(2), first=False, last=False, experts=128,
                        expert_inter=384)
    # the padded w13 never fits a freed original w13 (each is released by the next pad's
    # empty_cache); only the last one stays cached
    assert load_extra(w, fnuz=True, cached=True, moe_kept=True) == (
        94 * 128 * 768 * 256 + 128 * 768 * 4096 * 2) == 3_170_893_824
    assert load_extra(w, fnuz=True, cached=False, moe_kept=True) == 94 * 128 * 768 * 256


MI355X = Gpu("mi355x", "AMD Instinct MI355X", 294896 << 20, "gfx950", vendor="amd",
             interconnect_gbps=1075)
R1_FP8 = {**DEEPSEEK_V3, "quantization_config": {
    "quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
    "weight_block_size": [128, 128]}}
LLAMA70B_FP8_DYNAMIC = {  # RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic: channel-wise weights
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8192,
    "intermediate_size": 28672, "num_attention_heads": 64, "num_hidden_layers": 80,
    "num_key_value_heads": 8, "max_position_embeddings": 131072, "vocab_size": 128256,
    "torch_dtype": "bfloat16", "quantization_config": {
        "quant_method": "compressed-tensors", "config_groups": {"group_0": {
            "targets": ["Linear"], "weights": {"num_bits": 8, "type": "float",
                                               "strategy": "channel", "dynamic": False},
            "input_activations": {"num_bits": 8, "type": "float", "strategy": "token",
                                  "dynamic": True}}}, "ignore": ["lm_head"]}}


def extra(cfg, gpu, version, **kw):
    """What the load figure adds on `gpu` against the same start on an H200 (less the
    MLA backend buffers CUDA imports there, `backends.mla_backend_buffers`)."""
    from kvplan.core.arch import normalize
    from kvplan.core.backends import mla_backend_buffers
    from kvplan.core.versions import VllmVersion

    def w(g):
        return size(Model("m", cfg), g, EngineArgs(max_model_len=8192, **kw),
                    version).budget.weights
    cuda_only = mla_backend_buffers(normalize(cfg), cc="9.0", vendor="nvidia",
                                    version=VllmVersion.of(version), forced=None, kv="auto",
                                    tp=kw.get("tensor_parallel_size", 1))[0]
    return w(gpu) - w(H200) + cuda_only


def test_fnuz_masks_of_channel_fp8():
    # channel-wise FP8 is not padded. Each weight's bool mask (one byte per element) is
    # freed into the cache: the first qkv's 80 MiB segment (then reused by o_proj's 64 MiB)
    # and the first gate_up's 448 MiB one (reused by every smaller mask) stay reserved
    assert extra(LLAMA70B_FP8_DYNAMIC, MI300X, "0.18") == (10240 + 2 * 28672) * 8192
    assert extra(LLAMA70B_FP8_DYNAMIC, MI300X, "0.21") == 0  # allocated memory from 0.21
    assert extra(LLAMA70B_FP8_DYNAMIC, MI355X, "0.18") == 0  # gfx950: OCP fp8, no conversion


def test_block_fp8_linear_padding_deepseek_r1_tp8():
    # per layer, rows x 256 B where a row is a multiple of 512 B: fused q_a+kv_a 2,112 rows
    # of 7,168 B, q_b 3,072 of 1,536 B, kv_b 4,096 of 512 B, o_proj 7,168 of 2,048 B
    attn = 61 * (2112 + 3072 + 4096 + 7168) * 256
    # dense gate_up 4,608 rows (x3 layers), shared-expert gate_up 512 rows (x58 layers);
    # the down projections' rows (2,304 and 256 B) are not multiples of 512
    mlp = 3 * 4608 * 256 + 58 * 512 * 256
    pad = attn + mlp
    assert pad == 267_993_088
    mask = 256 * 2 * 256 * 7168  # the MoE w13 on one GPU, one byte per element
    # allocated only from 0.21: the padding, and the allocator's block rounding of the
    # tensors held (a remainder of up to 1 MiB of a segment is not split off), as replayed
    r21 = extra(R1_FP8, MI300X, "0.21", tensor_parallel_size=8)
    r33 = extra(R1_FP8, MI355X, "0.33", tensor_parallel_size=8)
    # (the rotary cache's fp32 temporaries, freed, leave blocks later tensors fit into)
    assert (r21 - pad, r33 - pad) == (57_393_152, 72_925_184)
    assert r21 - pad < 61 * 8 * 2**20  # under 1 MiB a padded linear
    # to 0.20 the MoE masks and the leftovers of the padded small linears in 20 MiB segments
    # count too: 1.65 GiB in all as replayed (R1-0528 on MI300X logs 81.31 GiB at 0.11-0.18;
    # 1.68 before the rotary cache's freed fp32 temporaries were replayed, which later
    # tensors reuse)
    full = extra(R1_FP8, MI300X, "0.18", tensor_parallel_size=8)
    assert full - pad >= mask and full == 1_769_668_608


def test_env_switches_in_size_and_check(capsys):
    import json

    from kvplan.cli import main

    def size_json(*extra):
        code = main(["size", "Qwen/Qwen3-VL-30B-A3B-Instruct", "--gpu", "mi300x",
                     "--vllm-version", "0.18", "--max-model-len", "8192", "--json", *extra])
        out, err = capsys.readouterr()
        return code, (json.loads(out) if out else None), err

    _, on, _ = size_json()
    _, off, _ = size_json("--env", "VLLM_ROCM_MOE_PADDING=0", "--env", "VLLM_FOO=1")
    # without the padding only the allocator's slack of the tower's 20 MiB segments is left
    assert on["load_extra_bytes"] - off["load_extra_bytes"] > 20 * 2**30
    assert off["load_extra_bytes"] < 64 * 2**20
    assert on["available_kv_bytes"] + on["load_extra_bytes"] - off["load_extra_bytes"] \
        == off["available_kv_bytes"]
    assert "--env VLLM_FOO: not modelled, ignored" in off["notes"]
    assert any("VLLM_ROCM_MOE_PADDING=0" in n for n in on["notes"])
    code, _, err = size_json("--env", "VLLM_ROCM_MOE_PADDING=true")
    assert code == 2 and "vLLM reads it as an integer" in err
    # check reads the container's environment, and fails a value vLLM cannot parse
    cmd = "vllm serve Qwen/Qwen3-VL-30B-A3B-Instruct --max-model-len 8192"
    for env, status in (("VLLM_ROCM_MOE_PADDING=0 ", "pass"),
                        ("VLLM_ROCM_MOE_PADDING=true ", "fail")):
        main(["check", "--cmd", env + cmd, "--gpu", "mi300x", "--vllm-version", "0.18",
              "--format", "json"])
        dep = json.loads(capsys.readouterr()[0])["deployments"][0]
        fv = [c for c in dep["checks"] if c["id"] == "flag-values"]
        assert [c["status"] for c in fv] == [status]
        if status == "pass":  # sized without the padding, as `size --env` sizes it
            assert dep["kv_cache_tokens"] == off["kv_cache_tokens"]


def test_fp8_processing_path_by_checkpoint_format():
    from kvplan.core.loadmem import fp8_path

    def ct(strategy):
        return {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {
            "num_bits": 8, "type": "float", "strategy": strategy}}}}

    assert fp8_path({"quant_method": "fp8", "weight_block_size": [128, 128]}) == "block"
    assert fp8_path({"quant_method": "fp8"}) == "tensor"  # requantized, then padded
    assert [fp8_path(ct(x)) for x in ("channel", "tensor", "block")] == [
        "channel", "tensor", "block"]
    assert fp8_path({"quant_method": "modelopt"}) == "channel"  # not padded


def test_recommend_takes_env_and_puts_it_in_the_command(capsys):
    import json

    from kvplan.cli import main

    def rec(*extra):
        assert main(["recommend", "Qwen/Qwen3-VL-30B-A3B-Instruct", "--gpu", "mi300x",
                     "--vllm-version", "0.18", "--workload", "chat", "--rate", "5", "--json",
                     *extra]) == 0
        return json.loads(capsys.readouterr()[0])

    on, off = rec(), rec("--env", "VLLM_ROCM_MOE_PADDING=0")
    # 20.6 GiB more KV per GPU without the padded MoE copies: a higher safe cap
    assert off["max_num_seqs"] > on["max_num_seqs"]
    assert off["command"].startswith("VLLM_ROCM_MOE_PADDING=0 vllm serve ")
    assert on["command"].startswith("vllm serve ")
    # a variable kvplan does not model is said on stderr, keeping the JSON clean
    assert main(["recommend", "Qwen/Qwen3-VL-30B-A3B-Instruct", "--gpu", "mi300x",
                 "--workload", "chat", "--rate", "5", "--json", "--env", "VLLM_FOO=1"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) and "--env VLLM_FOO: not modelled, ignored" in err


def test_aiter_moe_shuffle_replaces_the_padded_weights():
    def extra(version, **kw):
        def w(gpu):
            return size(Model("m", QWEN3_30B_A3B), gpu, EngineArgs(max_model_len=8192, **kw),
                        version).budget.weights
        return w(MI300X) - w(H200)

    MiB = 1 << 20
    # VLLM_ROCM_USE_AITER=1: per layer the pads run, then `shuffle_weights` copies w13 and w2
    # into new tensors and the padded views are dropped. The next layer's padded w13 takes
    # the freed padded w13 (816 MiB) and `empty_cache()` releases the older original w13;
    # at the end the last padded w13 and the last original w13 (768 MiB, its padded w2
    # freed back into it) stay cached
    assert extra("0.18", rocm_aiter=True) == (816 + 768) * MiB
    assert extra("0.24", rocm_aiter=True) == 0  # nothing stays padded; allocated memory
    # without the padding only the last layer's originals stay cached
    assert extra("0.18", rocm_aiter=True, rocm_moe_padding=False) == (768 + 384) * MiB
    assert extra("0.18", rocm_aiter=True, rocm_aiter_moe=False) == 22_145_925_120


def test_rocm_tp8_pool_follows_the_smallest_worker():
    # 12 MI300X TP8 starts (DeepSeek-R1, Qwen3-235B, Llama-4-Maverick; 0.11.2-0.18) logged
    # 0.416-0.429 GiB more available memory than their block counts hold: every worker takes
    # the smallest worker's block count (`get_kv_cache_configs`). DeepSeek-R1 0.11.2: 87.09
    # GiB logged, 82,769 blocks of 16 x 70,272 B
    m = Model("r1", DEEPSEEK_V3)

    def run(tp, **kw):
        return size(m, MI300X, EngineArgs(tensor_parallel_size=tp, max_model_len=8192, **kw),
                    "0.11.2")

    r8 = run(8)
    assert r8.budget.available_kv - r8.budget.kv_pool == 430 << 20
    assert r8.to_json()["smallest_worker_shortfall_bytes"] == 430 << 20
    assert (round(87.09 * 2**30) - (430 << 20)) // (16 * 70272) == 82768  # logged 82,769
    assert run(4).budget.kv_pool == run(4).budget.available_kv
    given = run(8, kv_cache_memory_bytes=80 << 30)  # one figure for every worker
    assert given.budget.kv_pool == given.budget.available_kv


def test_gpt_oss_block_on_rocm_by_release_and_gfx():
    from kvplan.core.sizing import EngineArgs, size
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    oss = resolve_model("openai/gpt-oss-20b")

    def block(gpu, version, **kw):
        return size(oss, resolve_gpu(gpu), EngineArgs(**kw), version).block_size
    # ROCM_AITER_UNIFIED_ATTN (64) runs the sinks from 0.19 where aiter supports the GPU
    assert (block("mi300x", "0.18.1"), block("mi300x", "0.19.0")) == (16, 64)
    assert block("mi250x", "0.33") == 16  # gfx90a: no aiter, TRITON_ATTN
    # VLLM_ROCM_USE_AITER=1: ROCM_AITER_FA takes sinks (and 16) only from 0.23
    assert (block("mi300x", "0.22", rocm_aiter=True), block("mi300x", "0.23", rocm_aiter=True)) \
        == (64, 16)


def test_aiter_moe_rounds_each_gpus_intermediate_up_from_032():
    """`unquantized_round_up_hidden_size_and_intermediate_size` (0.32+): AITER's CK MoE takes
    an intermediate of at most 192 in 64-wide tiles, a larger one in 128-wide ones. Qwen3-30B-
    A3B at TP8: 768 / 8 = 96 rows -> 128, per layer w13 [128, 2 x 32, 2048] + w2 [128, 2048,
    32] bf16 more = 48 MiB, 2.25 GiB over 48 layers (review 25v #3); at TP1 768 is aligned."""
    def weights(version, tp, **kw):
        return size(Model("m", QWEN3_30B_A3B), MI300X,
                    EngineArgs(max_model_len=8192, tensor_parallel_size=tp, rocm_aiter=True,
                               **kw), version).budget.weights

    assert weights("0.32", 8) - weights("0.31", 8) == 48 * 128 * 2048 * 96 * 2
    assert weights("0.32", 8, rocm_aiter_moe=False) == weights("0.31", 8, rocm_aiter_moe=False)
    assert weights("0.32", 1) == weights("0.31", 1)


def test_rotary_cache_temporaries_stay_reserved_to_020():
    """Review 25c #3: `_compute_cos_sin_cache` runs on the GPU (the model is built under
    `with target_device`): t, freqs [N, d/2], cos, sin and their fp32 concatenation [N, d],
    then `.to(dtype)`; ROCm's load figure to 0.20 is memory in use, so the freed blocks no
    later weight reuses count. Llama-3.3-70B at TP1 on MI300X (128k x 128): freqs, cos and
    sin 32 MiB each and the 64 MiB concatenation (t, 512 KiB, in a 2 MiB small segment);
    the bf16 cache takes one 32 MiB block back, 130 MiB stay reserved."""
    from kvplan.core.allocsim import Allocator
    from kvplan.core.loadmem import ROPE, Weight, _rope

    a = Allocator()
    _rope(a, Weight(131072, 128, 2, ROPE))
    assert a.allocated == 32 << 20 and a.reserved - a.allocated == 130 << 20
