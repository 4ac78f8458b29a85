"""Per-release defaults read in each release's source (review 24d): MLA before 0.7.3, MLA
block sizes, V1's fallbacks, batch defaults, long-context rules and the capture grid."""

import re

import pytest

from kvplan.core.memory import cudagraph_capture_sizes
from kvplan.core.sizing import EngineArgs, size
from kvplan.errors import BadInput
from kvplan.sources.resolve import resolve_gpu, resolve_model


def run(model, gpu, version, **kw):
    return size(resolve_model(model), resolve_gpu(gpu), EngineArgs(**kw), version)


def test_deepseek_keeps_every_head_before_mla():
    """F1: no MLA before 0.7.1 (`get_head_size` pads 192 to 256, the config's KV heads);
    0.7.1-0.7.2 only unquantized, fp8 or compressed-tensors."""
    lite = "deepseek-ai/DeepSeek-V2-Lite"
    assert run(lite, "h100", "0.6.6").kv_bytes_per_token_per_gpu == 27 * 2 * 16 * 256 * 2
    assert run(lite, "h100", "0.7.0").kv_bytes_per_token_per_gpu == 442368
    assert run(lite, "h100", "0.7.1").kv_bytes_per_token_per_gpu == 27 * (512 + 64) * 2
    v3 = run("deepseek-ai/DeepSeek-V3", "h200", "0.6.6", tensor_parallel_size=8)
    assert v3.kv_bytes_per_token_per_gpu == 61 * 2 * (128 // 8) * 256 * 2 == 999424


@pytest.mark.parametrize(("gpu", "version", "extra", "block"), [
    ("h200", "0.7.3", {}, 16),  # F2: FlashMLA's 64 arrives in 0.8.0
    ("h200", "0.8.0", {}, 64),
    ("b200", "0.10.0", {}, 16),  # F10: CUTLASS-MLA's 128 by default from 0.10.1
    ("b200", "0.10.1", {}, 128),
    ("h100", "0.10.2", {"block_size": 128}, 64),  # F11: `block_size != 64` forces it to 0.11
    ("h100", "0.12.0", {"block_size": 128}, 128),  # `% 64` from 0.12
])
def test_mla_block_sizes(gpu, version, extra, block):
    r = run("deepseek-ai/DeepSeek-R1", gpu, version, tensor_parallel_size=8, **extra)
    assert r.block_size == block


def test_v1_fallbacks_and_batch_defaults_of_0_8():
    """F3: 0.8.0-0.8.5 leave V1 off on ROCm; F9: Gemma 3 VL is V0-only in 0.8.0; F4: 0.8.4
    gives 1,024 sequences only to a device named H100 / H200."""
    r = run("meta-llama/Llama-3.1-8B-Instruct", "mi300x", "0.8.5")
    assert r.version.engine_v0 and r.max_num_seqs == 256
    assert "V1 is off by default on AMD GPUs" in r.notes[0]
    assert not run("meta-llama/Llama-3.1-8B-Instruct", "mi300x", "0.9.0").version.engine_v0
    assert run("google/gemma-3-27b-it", "h100", "0.8.0").version.engine_v0
    assert not run("google/gemma-3-27b-it", "h100", "0.8.1").version.engine_v0
    seqs = {g: run("meta-llama/Llama-3.1-8B-Instruct", g, "0.8.4").max_num_seqs
            for g in ("h100", "a100-80gb", "l4")}
    assert seqs == {"h100": 1024, "a100-80gb": 256, "l4": 256}
    assert run("meta-llama/Llama-3.1-8B-Instruct", "l4", "0.8.3").max_num_seqs == 1024


def test_long_context_rules_of_0_6():
    """F5: ROCm chunks prompts over 32K up to 0.6.4 (device type "cuda"); F6: 0.6.0-0.6.4 cap
    Gemma 2 at its 4,096-token window."""
    r = run("meta-llama/Llama-3.1-8B-Instruct", "mi300x", "0.6.4")
    assert r.max_num_batched_tokens == 512
    assert run("meta-llama/Llama-3.1-8B-Instruct", "mi300x", "0.6.5").max_num_batched_tokens \
        == 131072
    assert run("google/gemma-2-9b-it", "h100", "0.6.4").max_model_len == 4096
    assert run("google/gemma-2-9b-it", "h100", "0.6.5").max_model_len == 8192
    with pytest.raises(BadInput, match="exceeds the model's maximum of 4096"):
        run("google/gemma-2-9b-it", "h100", "0.6.4", max_model_len=8192)


def test_budget_below_the_default_sequences():
    """F7: the default max_num_seqs is capped at the budget only from 0.10.1 (V1)."""
    with pytest.raises(BadInput, match=re.escape(
            "--max-num-batched-tokens 512 is smaller than the default max_num_seqs 1024")):
        run("meta-llama/Llama-3.1-8B-Instruct", "h100", "0.10.0", max_num_batched_tokens=512)
    assert run("meta-llama/Llama-3.1-8B-Instruct", "h100", "0.10.1",
               max_num_batched_tokens=512).max_num_seqs == 512


def test_v0_multimodal_budget_floor():
    """F8: V0's `SchedulerConfig` raises a multimodal model's budget to 5,120 (4,096 to
    0.6.2)."""
    r = run("Qwen/Qwen2.5-VL-7B-Instruct", "h100", "0.7.3", max_model_len=4096)
    assert not r.version.v1 and r.max_num_batched_tokens == 5120


def test_capture_grid_before_0_12_and_the_budget_size():
    """F12: steps of 8 up to 512 before 0.12 (67 sizes); the token budget joins from 0.20.1."""
    old = cudagraph_capture_sizes(256, 8192, step16=False, budget_size=False)
    assert len(old) == 67 and old[-2:] == [504, 512]
    assert 300 not in cudagraph_capture_sizes(256, 300, budget_size=False)
    assert 300 in cudagraph_capture_sizes(256, 300, budget_size=True)


def test_model_max_length_wins_from_0_8_3():
    """F13: "For Command-R / Cohere, Cohere2 / Aya Vision models" (0.8.3's
    `_get_and_verify_max_len`): model_max_length replaces the minimum of the length keys."""
    from configs import LLAMA31_8B

    from kvplan.core.arch import normalize
    from kvplan.core.sizing import derived_max_model_len
    from kvplan.core.versions import VllmVersion

    arch = normalize({**LLAMA31_8B, "rope_scaling": None, "max_position_embeddings": 8192,
                      "model_max_length": 131072})
    assert derived_max_model_len(arch, VllmVersion.of("0.8.3"))[0] == 131072
    assert derived_max_model_len(arch, VllmVersion.of("0.8.2"))[0] == 8192


def test_moe_scratch_by_release():
    """Review 24e F2/F3/F4: 0.6-0.7's `fused_experts_impl` keeps caches 1 and 3 apart;
    `VLLM_FUSED_MOE_CHUNK_SIZE` defaults to 16,384 from 0.12.0 (32,768 before); an all-MoE
    model without shared experts has no dense-MLP activation."""
    mix = "mistralai/Mixtral-8x7B-Instruct-v0.1"
    r = run(mix, "h100", "0.6.6", tensor_parallel_size=2)
    # 32,768-token chunk x top-2 rows x (N 14,336 + K 4,096 + N/2 7,168) x 2 B
    assert r.to_json()["moe_workspace_bytes"] == 65536 * (14336 + 4096 + 7168) * 2
    kw = dict(tensor_parallel_size=2, max_num_batched_tokens=32768, max_num_seqs=64)
    assert run(mix, "h100", "0.12.0", **kw).to_json()["moe_workspace_bytes"] == \
        32768 * (14336 + 7168) * 2 == 1409286144  # 16,384 tokens x 2 rows x (N + N/2)
    q = run("Qwen/Qwen3-30B-A3B", "h100", "0.13.0", max_num_batched_tokens=32768,
            max_num_seqs=64)
    assert q.budget.activation == 1342177280  # no 3 x 6,144-wide dense term (448 MiB)


def test_unmodelled_encoder_profile_is_noted():
    """Review 24e F6: Gemma 3's encoder profile is modelled from 0.20 only; 0.11 says so."""
    r = run("google/gemma-3-27b-it", "h100", "0.11.0")
    assert r.vision_profile is None and any(
        n.startswith("the vision encoder's share of vLLM 0.11.0's profile run is not modelled")
        for n in r.notes)
    assert not any("is not modelled" in n for n in run("google/gemma-3-27b-it", "h100",
                                                        "0.20.2").notes)


@pytest.mark.parametrize(("version", "method", "ok"), [
    # review 24f F3: `SpeculativeMethod` lists deepseek_mtp from 0.9, qwen3_next_mtp from
    # 0.10.2, "mtp" from 0.11, glm4_moe_mtp from 0.11.1
    ("0.9.2", "deepseek_mtp", True), ("0.9.2", "mtp", False), ("0.10.2", "mtp", False),
    ("0.11.0", "mtp", True), ("0.11.0", "deepseek_mtp", True), ("0.11.0", "glm4_moe_mtp", False),
    ("0.11.1", "glm4_moe_mtp", True),
])
def test_mtp_method_names_by_release(version, method, ok):
    spec = f'{{"method": "{method}", "num_speculative_tokens": 1}}'
    from kvplan.core.versions import LATEST
    from kvplan.engines.vllm_spec import speculative

    def go():
        a = EngineArgs(tensor_parallel_size=8)
        a.speculative = speculative(spec, resolve_model, version=version or LATEST, notes=[])
        return size(resolve_model("deepseek-ai/DeepSeek-R1"), resolve_gpu("h200"), a, version)

    if ok:
        assert go().fits
    else:
        with pytest.raises(BadInput, match=f"does not know speculative method '{method}'"):
            go()


def test_lora_ranks_and_flags_by_release():
    """Review 24f F5/F6/F8: ranks 8-256 to 0.7, 320/512 from 0.8, 1 from 0.11.1;
    --language-model-only from 0.17, --skip-mm-profiling from 0.10.1."""
    lora = dict(enable_lora=True, max_model_len=4096)
    with pytest.raises(BadInput, match="--max-lora-rank 320 is not one vLLM accepts"):
        run("meta-llama/Llama-3.1-8B-Instruct", "h100", "0.7.3", max_lora_rank=320, **lora)
    assert run("meta-llama/Llama-3.1-8B-Instruct", "h100", "0.8.5", max_lora_rank=320, **lora)
    assert run("meta-llama/Llama-3.1-8B-Instruct", "h100", "0.11.1", max_lora_rank=1, **lora)
    with pytest.raises(BadInput, match="has no --language-model-only"):
        run("Qwen/Qwen2.5-VL-7B-Instruct", "h100", "0.16.0", language_model_only=True)
    with pytest.raises(BadInput, match="has no --skip-mm-profiling"):
        run("Qwen/Qwen2.5-VL-7B-Instruct", "h100", "0.10.0", skip_mm_profiling=True)


def test_dummy_size_options_shrink_the_qwen_vl_profile(capsys):
    """Review 24f F1 / 25g #2: --limit-mm-per-prompt's width / height / num_frames shrink
    vLLM's dummy item (0.11.1+ `_get_dummy_videos`: min(full size, option), then
    `smart_resize` to whole merged patches) while the budget counts the full item. Qwen2.5-VL-7B
    on an L40S, 8 frames at 640 x 480: 476 x 644 pixels, 17 x 23 = 391 tokens a frame pair,
    4 pairs = 1,564 tokens, not the 114,688-token video (9.59 -> 23.47 GiB of KV memory)."""
    import json

    from kvplan.cli import main

    opts = '{"video": {"count": 1, "num_frames": 8, "width": 640, "height": 480}}'
    assert main(["size", "Qwen/Qwen2.5-VL-7B-Instruct", "--gpu", "l40s", "--json",
                 "--limit-mm-per-prompt", opts]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["vision_profile"]["tokens_per_item"] == 17 * 23 * 4 == 1564
    assert d["vision_profile"]["items"] == 1 and d["kv_cache_tokens"] == 439440
    # before 0.11.1 the options do not exist: the full video
    assert main(["size", "Qwen/Qwen2.5-VL-7B-Instruct", "--gpu", "l40s", "--json",
                 "--vllm-version", "0.11.0", "--limit-mm-per-prompt", opts]) in (0, 1)
    assert json.loads(capsys.readouterr().out)["vision_profile"]["tokens_per_item"] == 114688
    # a family kvplan does not shrink is said so
    assert main(["size", "google/gemma-3-27b-it", "--gpu", "h100", "--max-model-len", "32768",
                 "--limit-mm-per-prompt",
                 '{"image": {"count": 1, "width": 256, "height": 256}}']) == 0
    assert "kvplan models that for the Qwen VL families only" in capsys.readouterr().out


def test_dummy_sizes_reach_check_and_are_validated(capsys):
    import json

    from kvplan.cli import main

    opts = '{"video": {"count": 1, "num_frames": 8, "width": 640, "height": 480}}'
    assert main(["check", "--gpu", "l40s", "--format", "json", "--cmd",
                 f"vllm serve Qwen/Qwen2.5-VL-7B-Instruct --limit-mm-per-prompt '{opts}'"]) == 0
    assert json.loads(capsys.readouterr().out)["deployments"][0]["kv_cache_tokens"] == 439440
    assert main(["size", "Qwen/Qwen2.5-VL-7B-Instruct", "--gpu", "l40s",
                 "--limit-mm-per-prompt", '{"video": {"count": 1, "num_frames": 0}}']) == 2
    assert "video.num_frames = 0 is not a positive integer" in capsys.readouterr().err


def test_dummy_options_as_vllm_validates_them():
    """0.11.1+ `BaseDummyOptions.count` defaults to 999 and the image / video / audio options
    forbid other keys (`extra="forbid"`; review 25i)."""
    from kvplan.units import parse_mm_limits, parse_mm_sizes

    assert parse_mm_limits('{"video": {"num_frames": 8}}') == {"video": 999}
    assert parse_mm_limits('{"video": {}}') == {"video": 999}
    assert parse_mm_sizes('{"video": {"num_frames": 8}}') == {"video": {"num_frames": 8}}
    for bad, says in (('{"video": {"count": 1, "foo": 3}}', "video takes no foo"),
                      ('{"image": {"count": 2, "num_frames": 4}}', "image takes no num_frames")):
        with pytest.raises(BadInput, match=says):
            parse_mm_limits(bad)
    assert parse_mm_limits('{"custom": {"count": 2, "anything": 1}}') == {"custom": 2}
