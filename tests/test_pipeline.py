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
    # blocks, 1,481,376 tokens, 36.17x at 40,960; 92,567 with the fp32 scales of the 128 x 128
    # FP8 blocks (another helper's count: 14.3 MB at TP4, so 3.6 MB per stage); 92,994 with
    # NCCL's 100 MiB in place of the TP group's custom all-reduce 420 (PP only)
    assert (r.num_gpu_blocks, r.kv_cache_tokens, round(r.max_concurrency, 2)) == (
        92994, 1487904, 36.33)


def test_llama_keeps_embedding_on_the_first_stage_only():
    r = _run("meta-llama/Llama-3.3-70B-Instruct", "h100", tensor_parallel_size=2,
             pipeline_parallel_size=2)
    s0, s1 = r.stages
    # 40 layers each; stage 0 the embedding, stage 1 the LM head (same size, untied) and
    # the final norm
    assert 0 < s1["weights_bytes"] - s0["weights_bytes"] < 1 << 20
    # stage 1 receives stage 0's hidden states and residual: 2 x 8,192 x 8,192 x 2 B
    assert intermediate_tensor_bytes("llama", 8192, 8192, 2) == 256 << 20
    assert (r.num_gpu_blocks, r.kv_cache_tokens) == (29216, 467456)


def test_vision_tower_and_encoder_profile_by_stage():
    # Qwen3.5-27B PP2 on an H100: 0.31-0.32 build the vision tower on both stages
    # (`_mark_tower_model` has no PP guard); 0.33 under V2 skips it past the first. V2
    # profiles the encoder on the first stage only (`profile_run`: `is_first_pp_rank`).
    old = _run("Qwen/Qwen3.5-27B", "h100", "0.32", pipeline_parallel_size=2)
    new = _run("Qwen/Qwen3.5-27B", "h100", "0.33", pipeline_parallel_size=2)
    assert old.stages[0]["weights_bytes"] == new.stages[0]["weights_bytes"]
    assert old.stages[1]["weights_bytes"] > new.stages[1]["weights_bytes"]
    # (V2's encoder-runner inputs buffer, [8,192, 5,120] bf16, on the first stage, where the
    # encoder cache is: `encoder_cache` only `is_first_pp_rank`, 0.27-0.33; review 25k)
    # (PP only: NCCL's 100 MiB, no custom all-reduce)
    assert (old.kv_cache_tokens, new.kv_cache_tokens) == (1316870, 1256678)
    d = new.to_json()["pipeline_stages"]
    assert [x["stage"] for x in d] == [0, 1] and d[1]["num_gpu_blocks"] == 1558
    assert d[0]["num_gpu_blocks"] == 1740


def test_pipeline_only_starts_have_no_custom_all_reduce():
    # `CudaCommunicator.__init__` builds the custom all-reduce for the TP group only: PP2 at
    # TP1 charges the 130 MiB base + NCCL's 100 MiB, PP2 x TP2 the NVLink 420 MiB
    pp = _run("Qwen/Qwen3-8B", "h100", pipeline_parallel_size=2).to_json()
    both = _run("Qwen/Qwen3-8B", "h100", pipeline_parallel_size=2,
                tensor_parallel_size=2).to_json()
    assert pp["non_torch_bytes"] == (130 + 100) << 20
    assert both["non_torch_bytes"] == (130 + 420) << 20


def test_hidden_states_only_models_receive_one_buffer():
    assert intermediate_tensor_bytes("falcon", 8192, 2048, 2) == 2048 * 8192 * 2
    assert intermediate_tensor_bytes("qwen3_moe", 4096, 8192, 2) == 2 * 8192 * 4096 * 2


def test_every_stage_modules_and_the_drafter_embedding_under_pp():
    # ChatGLM builds its embedding and output layer on every stage (`chatglm.py`, 0.9.2-0.33):
    # 151,552 x 4,096 x 2 B more on each of GLM-4-9B-Chat's two stages
    from kvplan.core.sizing import EngineArgs, size
    from kvplan.core.specdec import SpecDecode
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    glm = resolve_model("zai-org/GLM-4-9B-Chat")
    one = size(glm, resolve_gpu("l40s"), EngineArgs(max_model_len=8192))
    two = size(glm, resolve_gpu("l40s"), EngineArgs(max_model_len=8192, pipeline_parallel_size=2))
    table = 151552 * 4096 * 2
    per_stage = [s["weights_bytes"] for s in two.stages]
    assert abs(sum(per_stage) - (one.budget.weights + 2 * table)) < 1 << 20
    # a drafter under PP keeps its own embedding (`_maybe_share_embeddings` shares it only for
    # a one-rank PP group): Qwen3.5-27B's MTP layer on the last stage, 248,320 x 5,120 x 2 B
    q = resolve_model("Qwen/Qwen3.5-27B")
    mtp = SpecDecode("mtp", 1)
    r1, r2 = (size(q, resolve_gpu("h100"), EngineArgs(pipeline_parallel_size=pp, speculative=mtp))
              for pp in (1, 2))
    assert r2.draft_bytes - r1.draft_bytes == 248320 * 5120 * 2


def test_vllm_pp_layer_partition():
    # `get_pp_indices`: VLLM_PP_LAYER_PARTITION sets the layers per stage; vLLM refuses a
    # list whose length is not the PP size or whose sum is not the layer count
    import pytest

    from kvplan.errors import BadInput

    assert [len(r) for r in pp_partition(80, 4, "24,24,16,16")] == [24, 24, 16, 16]
    assert [len(r) for r in pp_partition(80, 3)] == [27, 27, 26]  # 0.8+: middle stages first
    assert [len(r) for r in pp_partition(80, 3, rest_to_last=True)] == [26, 26, 28]  # 0.6-0.7
    with pytest.raises(BadInput, match="names 3 stages, the pipeline has 4"):
        pp_partition(80, 4, "20,20,40")
    with pytest.raises(BadInput, match="adds up to 76 layers, the model has 80"):
        pp_partition(80, 4, "20,20,20,16")
    with pytest.raises(BadInput, match="not a comma-separated list"):
        pp_partition(80, 2, "40;40")
    # a stage without layers was sized as 0 blocks that "fit" (session 28's CLI fuzz)
    with pytest.raises(BadInput, match="gives stage 1 no layers"):
        pp_partition(80, 2, "80,0")
    with pytest.raises(BadInput, match="has a negative layer count"):
        pp_partition(80, 2, "81,-1")
    even = _run("meta-llama/Llama-3.3-70B-Instruct", "h100", pipeline_parallel_size=4)
    same = _run("meta-llama/Llama-3.3-70B-Instruct", "h100", pipeline_parallel_size=4,
                pp_layer_partition="20,20,20,20")
    assert same.stages == even.stages
    r = _run("meta-llama/Llama-3.3-70B-Instruct", "h100", pipeline_parallel_size=4,
             pp_layer_partition="24,24,16,16")
    assert [s["layers"] for s in r.stages] == [24, 24, 16, 16]
    # four more Llama-70B layers on stage 0: 855,654,400 parameters each (q/o 8,192^2, k/v
    # 8,192 x 1,024, gate/up/down 8,192 x 28,672, two norms) in bf16, every tensor a whole
    # number of 2 MiB segments
    assert r.stages[0]["weights_bytes"] - even.stages[0]["weights_bytes"] == \
        4 * 855_654_400 * 2
    # stage 0 is now the smallest pool: its 24 layers at 24 x 2 x 8 x 128 x 2 B a token
    assert r.num_gpu_blocks == min(s["num_gpu_blocks"] for s in r.stages) == \
        r.stages[0]["num_gpu_blocks"]
    assert r.kv_bytes_per_token_per_gpu == 24 * 2 * 8 * 128 * 2
    old = _run("meta-llama/Llama-3.3-70B-Instruct", "h100", version="0.7.3",
               pipeline_parallel_size=3)
    assert [s["layers"] for s in old.stages] == [26, 26, 28]


def test_pp_layer_partition_from_env(capsys):
    import json

    from kvplan.cli import main

    argv = ["size", "llama-3.3-70b", "--gpu", "h100", "-pp", "4", "--offline", "--json"]
    assert main(argv + ["--env", "VLLM_PP_LAYER_PARTITION=24,24,16,16"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [s["layers"] for s in out["pipeline_stages"]] == [24, 24, 16, 16]
    assert main(argv + ["--env", "VLLM_PP_LAYER_PARTITION=40,40"]) == 2
    assert "names 2 stages, the pipeline has 4" in capsys.readouterr().err


def test_v0_splits_the_blocks_between_its_virtual_engines():
    """review 24a F2: V0 runs a scheduler per pipeline stage in flight over num_gpu_blocks
    // pp blocks (`Scheduler.__init__`, 0.6-0.10.2), and 0.8.0-0.10.2 check max_model_len
    against that share (`raise_if_cache_size_invalid`): Llama-3.1-8B on L4s at PP2."""
    r = _run("meta-llama/Llama-3.1-8B-Instruct", "l4", "0.8.5", pipeline_parallel_size=2)
    assert r.version.engine_v0 and r.num_gpu_blocks == 11079 and r.virtual_engines == 2
    assert not r.fits and r.largest_max_model_len == 5539 * 16 == 88624
    assert "available to each of V0's 2 virtual engines" in r.failure
    assert r.admission_blocks == 2 * (5539 - 55)  # each keeps its own 1 % watermark
    # the log's concurrency is the whole pool's; a request stays in one engine
    assert round(r.max_concurrency, 2) == 1.35 and r.concurrency_at[1024] == 2 * (5484 // 64)
    # 0.7.3 checks the whole pool, so it starts, but no full-length request is ever scheduled
    r = _run("meta-llama/Llama-3.1-8B-Instruct", "l4", "0.7.3", pipeline_parallel_size=2)
    assert r.fits and r.concurrency_at[131072] == 0
    assert r.notes[-1].endswith("a request of 131,072 tokens is never scheduled; the longest "
                                "one is 87,744 tokens")
    r = _run("meta-llama/Llama-3.1-8B-Instruct", "l4", pipeline_parallel_size=2)  # V1: one pool
    assert r.virtual_engines == 1 and r.admission_blocks == r.num_gpu_blocks - 1


def test_aux_hidden_states_cross_the_stages(monkeypatch):
    """Model runner V2 (0.30+) with EAGLE-3 / DFlash / DSpark and PP: a later stage's
    intermediate tensors add one [max_num_batched_tokens, hidden] per aux layer at or before
    its first layer (`reserve_aux_intermediate_tensor_slots`; default layers 2, L / 2, L - 3;
    review 25k). Llama-3.1-8B PP2 (stage 1 from layer 16): layers 2 and 16, 2 x 8,192 x
    4,096 x 2 B = 128 MiB on the limiting stage."""
    from kvplan.core.sizing import EngineArgs, size
    from kvplan.core.specdec import SpecDecode, aux_layers, aux_stage_bytes
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    m = resolve_model("meta-llama/Llama-3.1-8B-Instruct")
    head = SpecDecode("eagle3", 3, resolve_model("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"))
    from kvplan.core.arch import normalize
    layers = aux_layers(head, normalize(m.config))
    assert layers == [2, 16, 29]
    assert aux_stage_bytes(layers, 16, 8192, 4096, 2) == 2 * 8192 * 4096 * 2
    h100 = resolve_gpu("h100")
    a = EngineArgs(pipeline_parallel_size=2, speculative=head)
    r33 = size(m, h100, a, "0.33")
    assert not any("aux hidden states" in n for n in r33.notes)  # Llama carries them
    # 128 MiB over stage 1's 17 x 16 x 4,096 B blocks (16 layers and the draft's): 120 fewer
    import kvplan.core.specdec as SD
    monkeypatch.setattr(SD, "aux_layers", lambda spec, arch: [])
    without = size(m, h100, a, "0.33")
    assert r33.stages[1]["bytes_per_block"] == 17 * 16 * 4096
    assert without.stages[1]["num_gpu_blocks"] - r33.stages[1]["num_gpu_blocks"] == 120
    monkeypatch.undo()
    # a decoder without `supports_aux_hidden_states_over_pp` is probably refused: noted
    q = size(resolve_model("Qwen/Qwen3-30B-A3B"), h100, EngineArgs(
        pipeline_parallel_size=2, speculative=SpecDecode(
            "dspark", 7, resolve_model("deepseek-ai/dspark_qwen3_8b_block7"))), "0.33")
    assert any("(qwen3_moe) is probably refused" in n for n in q.notes)
