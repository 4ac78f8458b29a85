"""Pipeline parallelism: how vLLM splits the layers and what each stage holds beyond them
(read in the 0.9.2-0.33.0 wheels)."""

from __future__ import annotations

# Text models whose vLLM implementation builds the embedding (`VocabParallelEmbedding`) or the
# LM head (`ParallelLMHead`) on every pipeline stage, without the `is_first_rank` /
# `is_last_rank` guard Llama, dense Qwen and DeepSeek use (0.33 `model_executor/models/`:
# e.g. `qwen3_moe.py Qwen3MoeModel.__init__`, `mixtral.py`, `nemotron_h.py`, `gpt_oss.py`,
# `chatglm.py`'s embedding and output layer, `qwen3_5.py` for the embedding only; unchanged
# since 0.9 for Qwen3-MoE and ChatGLM).
EMBED_EVERY_STAGE = frozenset({
    "bloom", "chatglm", "cohere", "cohere2", "dbrx", "falcon", "gemma", "gemma2", "gemma3_text",
    "gemma3n_text", "gemma4_text", "gpt_oss", "gptj", "granitemoe", "granitemoehybrid",
    "granitemoeshared", "internlm2", "jamba", "lfm2", "lfm2_moe", "mamba", "mamba2",
    "minicpm", "mixtral", "nemotron_h", "olmoe", "opt", "orion", "phimoe", "qwen2_moe",
    "qwen3_5_moe_text", "qwen3_5_text", "qwen3_moe", "qwen3_next", "qwen3_vl_moe_text",
    "stablelm", "zamba2"})
LM_HEAD_EVERY_STAGE = frozenset({
    "bloom", "chatglm", "dbrx", "falcon", "gemma", "gemma3_text", "gemma4_text", "gpt_oss", "gptj",
    "granitemoe", "granitemoehybrid", "granitemoeshared", "internlm2", "jamba", "mamba",
    "mamba2", "minicpm", "mixtral", "nemotron_h", "olmoe", "opt", "orion", "phimoe",
    "qwen2_moe", "qwen3_moe", "qwen3_next", "qwen3_vl_moe_text", "stablelm", "zamba2"})
# models whose stages pass only `hidden_states` (`make_empty_intermediate_tensors_factory
# (["hidden_states"], ...)`); the others pass the residual too
HIDDEN_ONLY = frozenset({"bloom", "chatglm", "dbrx", "falcon", "falcon_h1", "gpt2", "gptj",
                         "moondream3", "olmo_hybrid", "opt", "orion", "stablelm", "step3p5"})


# model classes without `SupportsPP`, which `ModelConfig.verify_with_parallel_config` refuses
# with pipeline parallelism: the release that added it, None for never (an AST scan of every
# read wheel's registered classes and their bases, review 26)
NO_PIPELINE: dict[str, tuple[int, ...] | None] = {
    "AliceAIForCausalLM": None, "Zamba2ForCausalLM": None, "Mamba2ForCausalLM": None,
    "Gemma3nForCausalLM": None, "Gemma3nForConditionalGeneration": None,
    "IQuestLoopCoderForCausalLM": None, "MiniMaxForCausalLM": None,
    "MiniMaxText01ForCausalLM": None, "MiniMaxM1ForCausalLM": None,
    "DeepseekV4ForCausalLM": (0, 21), "GptOssForCausalLM": (0, 10, 2),
    "HunYuanMoEV1ForCausalLM": (0, 10, 2), "HunYuanDenseV1ForCausalLM": (0, 10, 2)}


def pp_partition(num_layers: int, pp: int, partition: str | None = None, *,
                 rest_to_last: bool = False) -> list[range]:
    """`distributed/utils.py get_pp_indices`: the remainder goes to stages -2, -3, ... (0.8+;
    to the last stage before, `rest_to_last`); `partition` is VLLM_PP_LAYER_PARTITION
    ("20,20,24": layers per stage), which vLLM checks against the stage and layer counts."""
    if partition is not None:
        parts = parse_partition(partition, num_layers, pp)
    else:
        parts = [num_layers // pp] * pp
        if rest_to_last:
            parts[-1] += num_layers % pp
        else:
            for i in range(2, num_layers % pp + 2):
                parts[-i] += 1
    out, start = [], 0
    for p in parts:
        out.append(range(start, start + p))
        start += p
    return out


def parse_partition(text: str, num_layers: int, pp: int) -> list[int]:
    """VLLM_PP_LAYER_PARTITION as `get_pp_indices` reads it (a ValueError there stops the
    start; 0.6-0.33 alike)."""
    from kvplan.errors import BadInput

    what = f"VLLM_PP_LAYER_PARTITION={text!r}"
    try:
        parts = [int(x) for x in str(text).split(",")]
    except ValueError:
        raise BadInput(f"{what} is not a comma-separated list of layer counts (vLLM: "
                       "'Invalid partition string')", hint="e.g. 20,20,20,20") from None
    if len(parts) != pp:
        raise BadInput(f"{what} names {len(parts)} stages, the pipeline has {pp} "
                       "(vLLM refuses it)", hint=f"give {pp} layer counts")
    if sum(parts) != num_layers:
        raise BadInput(f"{what} adds up to {sum(parts)} layers, the model has {num_layers} "
                       "(vLLM refuses it)", hint=f"make the counts add up to {num_layers}")
    if min(parts) < 0:  # vLLM would build a negative range and fail later
        raise BadInput(f"{what} has a negative layer count",
                       hint="give every stage a count of 1 or more")
    if min(parts) == 0:  # a stage of PPMissingLayers: no cache of its own to size
        raise BadInput(f"{what} gives stage {parts.index(0)} no layers, whose KV cache kvplan "
                       "cannot size", hint="give every stage at least one layer")
    return parts


def intermediate_tensor_bytes(model_type: str, hidden_size: int, max_num_batched_tokens: int,
                              dtype_bytes: int) -> int:
    """What every stage after the first keeps to receive the previous stage's output: the
    model's `make_empty_intermediate_tensors(batch_size=max_num_tokens)` in the model dtype,
    persistent (V1 `_dummy_run` creates it inside the profile; V2 `load_model` after "Model
    loading took"): hidden states and, for most models, the residual."""
    keys = 1 if model_type in HIDDEN_ONLY else 2
    return keys * max_num_batched_tokens * hidden_size * dtype_bytes
