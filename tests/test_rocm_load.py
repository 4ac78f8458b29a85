"""ROCm's load figure for unquantized MoE experts (core/loadmem.py), by hand."""

from kvplan.core.loadmem import rocm_moe_padding_bytes
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


def test_both_weights_padded():
    # rows of 4,096 B (w13) and 1,536 B (w2) are multiples of 512: both padded
    assert rocm_moe_padding_bytes(48, 128, 2048, 768, 2, cached=False) == 48 * (D13 + D2)
    # to 0.20 the padded w2 sits in the freed w13 (768 - 448 MiB stay reserved per layer)
    # and the last original w2 is still cached: 20.625 GiB in all
    full = rocm_moe_padding_bytes(48, 128, 2048, 768, 2, cached=True)
    assert full == 48 * (D13 + D2) + 48 * (S13 - S2 - D2) + S2 == 22_145_925_120


def test_one_weight_padded():
    # Qwen3-235B-A22B at TP4: w2 rows are 384 x 2 = 768 B, not padded; w13 rows 8,192 B are
    w13 = 128 * 768 * 4096 * 2
    assert rocm_moe_padding_bytes(94, 128, 4096, 384, 2, cached=True) == (
        94 * 128 * 768 * 256 + w13) == 3_170_893_824
    # neither padded: rows of 192 x 2 (w2) and an odd hidden size
    assert rocm_moe_padding_bytes(94, 128, 4100, 192, 2, cached=True) == 0


def test_size_adds_it_on_amd_by_release():
    def weights(gpu, version, **kw):
        return size(Model("m", QWEN3_30B_A3B), gpu, EngineArgs(max_model_len=8192, **kw),
                    version).budget.weights

    base = weights(H200, "0.18")
    assert weights(MI300X, "0.18") - base == 22_145_925_120  # device memory in use
    assert weights(MI300X, "0.24") - base == 48 * (D13 + D2)  # allocated memory from 0.21
    assert weights(MI300X, "0.30") == base  # 0.30 copies the padded view back
    # online FP8 experts go through Fp8MoEMethod, which does not pad
    assert weights(MI300X, "0.18", quantization="fp8") == weights(H200, "0.18",
                                                                 quantization="fp8")
    # TP2 halves the expert intermediate: w2 rows of 768 B are not padded
    assert weights(MI300X, "0.18", tensor_parallel_size=2) - weights(
        H200, "0.18", tensor_parallel_size=2) == 48 * 128 * 768 * 256 + 128 * 768 * 2048 * 2
