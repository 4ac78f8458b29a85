"""Pipeline parallelism (core/pipeline.py and the per-stage budget in core/sizing.py),
re-derived from the vLLM 0.31-0.33 wheels."""

from kvplan.core.pipeline import intermediate_tensor_bytes, pp_partition
from kvplan.core.sizing import EngineArgs, size
from kvplan.sources.resolve import resolve_gpu, resolve_model


def _run(model, gpu, version="0.33", **kw):
    return size(resolve_model(model), resolve_gpu(gpu), EngineArgs(**kw), version)


def test_qwen3_moe_builds_embedding_and_lm_head_on_every_stage():
    # `Qwen3MoeModel.__init__` / `Qwen3MoeForCausalLM.__init__` have no PP-rank guard: each
    # of the four stages holds the 151,936 x 4,096 bf16 embedding and LM head. 94 layers
    # split 23/24/24/23 (`get_pp_indices`), so stage 1 holds exactly one layer more than 0.
    assert [len(r) for r in pp_partition(94, 4)] == [23, 24, 24, 23]
    r = _run("Qwen/Qwen3-235B-A22B-FP8", "h200", pipeline_parallel_size=4)
    s = r.stages
    # the last stage also holds the final norm (8 KiB)
    assert abs(s[0]["weights_bytes"] - s[3]["weights_bytes"]) < 1 << 20
    assert s[1]["weights_bytes"] == s[2]["weights_bytes"]
    embed = 151936 * 4096 * 2
    layers_only = s[1]["weights_bytes"] - 2 * embed  # 24 layers
    assert abs(s[0]["weights_bytes"] - 2 * embed - layers_only * 23 / 24) < 2 << 20
    # what vLLM 0.33 gives with the stage buffers too (a helper's re-derivation): 92,586
    # blocks, 1,481,376 tokens, 36.17x at 40,960
    assert (r.num_gpu_blocks, r.kv_cache_tokens, round(r.max_concurrency, 2)) == (
        92586, 1481376, 36.17)


def test_llama_keeps_embedding_on_the_first_stage_only():
    r = _run("meta-llama/Llama-3.3-70B-Instruct", "h100", tensor_parallel_size=2,
             pipeline_parallel_size=2)
    s0, s1 = r.stages
    # 40 layers each; stage 0 the embedding, stage 1 the LM head (same size, untied) and
    # the final norm
    assert 0 < s1["weights_bytes"] - s0["weights_bytes"] < 1 << 20
    # stage 1 receives stage 0's hidden states and residual: 2 x 8,192 x 8,192 x 2 B
    assert intermediate_tensor_bytes("llama", 8192, 8192, 2) == 256 << 20
    assert (r.num_gpu_blocks, r.kv_cache_tokens) == (29318, 469088)


def test_vision_tower_and_encoder_profile_by_stage():
    # Qwen3.5-27B PP2 on an H100: 0.31-0.32 build the vision tower on both stages
    # (`_mark_tower_model` has no PP guard); 0.33 under V2 skips it past the first. V2
    # profiles the encoder on the first stage only (`profile_run`: `is_first_pp_rank`).
    old = _run("Qwen/Qwen3.5-27B", "h100", "0.32", pipeline_parallel_size=2)
    new = _run("Qwen/Qwen3.5-27B", "h100", "0.33", pipeline_parallel_size=2)
    assert old.stages[0]["weights_bytes"] == new.stages[0]["weights_bytes"]
    assert old.stages[1]["weights_bytes"] > new.stages[1]["weights_bytes"]
    assert (old.kv_cache_tokens, new.kv_cache_tokens) == (1306876, 1249418)
    d = new.to_json()["pipeline_stages"]
    assert [x["stage"] for x in d] == [0, 1] and d[1]["num_gpu_blocks"] == 1549


def test_hidden_states_only_models_receive_one_buffer():
    assert intermediate_tensor_bytes("falcon", 8192, 2048, 2) == 2048 * 8192 * 2
    assert intermediate_tensor_bytes("qwen3_moe", 4096, 8192, 2) == 2 * 8192 * 4096 * 2
