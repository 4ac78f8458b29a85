"""The vision encoder's share of the profile run (kvplan/core/mm.py)."""

from kvplan import catalog
from kvplan.core.mm import encoder_profile
from kvplan.core.sizing import EngineArgs, Gpu, Model, size
from kvplan.sources.resolve import model_from_entry

GiB = 1 << 30
A100 = Gpu("a100-sxm4-80gb", "NVIDIA A100-SXM4-80GB", 81050 * (1 << 20), "8.0")


def _model(name: str) -> Model:
    return model_from_entry(*catalog.load("models").get(name))


def _profile(m: Model, max_model_len: int, max_num_batched_tokens: int, max_num_seqs: int):
    return encoder_profile(m.config["architectures"], m.config["vision_config"], tp=1,
                           max_model_len=max_model_len,
                           max_num_batched_tokens=max_num_batched_tokens,
                           max_num_seqs=max_num_seqs,
                           text_hidden=m.config.get("text_config", {}).get("hidden_size", 0))


def test_qwen25_vl_profiles_a_video_at_the_default_length():
    # vLLM 0.23.0 log: "Encoder cache will be initialized with a budget of 114688 tokens,
    # and profiled with 1 video items" (Qwen2.5-VL-7B, max_model_len 128000)
    m = _model("Qwen/Qwen2.5-VL-7B-Instruct")
    p = _profile(m, 128000, 2048, 256)
    assert (p.tokens_per_item, p.items, p.modality) == (114688, 1, "video")
    # 458,752 patches x 1,280 x 2 B = U; peak = U x (5 + 3 x 3420/1280 + 0.919 + 0.1)
    u = 458752 * 1280 * 2
    assert abs(p.encoder_peak - u * (5 + 3 * 3420 / 1280 + 3 * 2 * 14 * 14 / 1280 + 0.1)) < 2
    assert round(p.encoder_peak / GiB, 2) == 15.35
    # below 32,768 tokens of context the profile is one 16,384-token item
    p = _profile(m, 16384, 2048, 256)
    assert p.tokens_per_item == 16384


def test_qwen25_vl_log_that_runs_out_of_kv_memory():
    # Same log: util 0.22 on an 80 GB card, "Model loading took 15.67 GiB", "Estimated CUDA
    # graph memory: 0.53 GiB", "Available KV cache memory: -14.28 GiB". With the logged
    # weights kvplan lands within 0.1 GiB; vLLM refuses to start either way.
    m = _model("Qwen/Qwen2.5-VL-7B-Instruct")
    r = size(m, A100, EngineArgs(gpu_memory_utilization=0.22), "0.23.0")
    assert not r.fits
    logged_weights = 15.67 * GiB
    avail = r.budget.available_kv - (logged_weights - r.budget.weights)
    assert abs(avail / GiB - -14.28) < 0.1
    r = size(m, A100, EngineArgs(gpu_memory_utilization=0.22, skip_mm_profiling=True), "0.23.0")
    assert r.budget.available_kv > 0  # --skip-mm-profiling: the LM peak only


def test_qwen3_vl_one_image_and_deepstack():
    m = _model("Qwen/Qwen3-VL-30B-A3B-Instruct")
    p = _profile(m, 32768, 8192, 4)
    assert (p.tokens_per_item, p.items, p.modality) == (16384, 1, "image")
    assert round(p.encoder_peak / GiB, 2) == 2.08  # 65,536 patches, 14.8 U
    assert encoder_profile(["LlamaForCausalLM"], None, tp=1, max_model_len=8192,
                           max_num_batched_tokens=8192, max_num_seqs=256) is None


def test_vision_profile_json(capsys):
    import json

    from kvplan.cli import main

    # Qwen3-VL-8B: the same ViT as 30B-A3B, 4,096-wide deepstack outputs (3 x 1.333 U more)
    assert main(["size", "Qwen/Qwen3-VL-8B-Instruct", "--gpu", "h100", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["vision_profile"] == {"modality": "image", "items": 1, "tokens_per_item": 16384,
                                   "encoder_peak_bytes": d["vision_profile"]["encoder_peak_bytes"]}
    # 0.32+ normalise Qwen3-VL pixels on the GPU: uint8 pixels, 3 x 2 x 16^2 / 1,152 x 1/2 U
    # (65,536 patches x 1,152 x 2 B = U) = 100,663,296 B below the bf16 ones of 0.31
    assert round(d["vision_profile"]["encoder_peak_bytes"] / GiB, 2) == 2.17
    assert main(["size", "Qwen/Qwen3-VL-8B-Instruct", "--gpu", "h100", "--json",
                 "--vllm-version", "0.31"]) == 0
    old = json.loads(capsys.readouterr().out)["vision_profile"]["encoder_peak_bytes"]
    assert round(old / GiB, 2) == 2.26
    assert old - d["vision_profile"]["encoder_peak_bytes"] == 100_663_296
    assert main(["size", "Qwen/Qwen3-VL-8B-Instruct", "--gpu", "h100", "--json",
                 "--skip-mm-profiling"]) == 0
    assert json.loads(capsys.readouterr().out)["vision_profile"] is None


def test_qwen36_uses_the_qwen3_vl_encoder_and_language_model_only_drops_it():
    # Qwen3.5/3.6 reuse Qwen3-VL's vision transformer and dummy inputs (vLLM models/qwen3_5.py)
    m = _model("nvidia/Qwen3.6-35B-A3B-NVFP4")
    p = _profile(m, 131072, 8192, 1)
    assert (p.tokens_per_item, p.items, p.modality) == (16384, 1, "image")
    # 65,536 patches x 1,152 x 2 B = U; attention 2 + 8 + 1 = 11 U beats the MLP
    # (3 + 2 x 4304/1152 = 10.47 U); held: pixels 3 x 2 x 16 x 16 / 1152 + pos. emb. 1 + 0.1
    u = 65536 * 1152 * 2
    assert abs(p.encoder_peak - u * (11 + 1 + 1536 / 1152 + 0.1)) < 2
    # --language-model-only: the tower is neither loaded nor profiled
    a = EngineArgs(max_model_len=131072, max_num_seqs=1, max_num_batched_tokens=8192)
    full = size(m, A100, a, "0.24.0")
    text = size(m, A100, EngineArgs(**{**a.__dict__, "language_model_only": True}), "0.24.0")
    # blocks (attention, GELU MLP 1152 -> 4304, biases, two LayerNorms), patch embedding
    # 3 x 2 x 16 x 16, 2,304 position embeddings, one merger 4,608 -> 4,608 -> 2,048 with its
    # biases and norm; bf16
    vh, vi = 1152, 4304
    blocks = 27 * (4 * vh * vh + 2 * vh * vi + 9 * vh + vi)
    merger = 4608 * 4608 + 4608 * 2048 + 4608 + 2048 + vh
    tower = (blocks + 3 * 2 * 16 * 16 * vh + 2304 * vh + merger) * 2
    assert tower == 893_137_888
    assert full.budget.weights - text.budget.weights == tower
    assert full.vision_profile is not None and text.vision_profile is None


def test_gemma3_siglip_profile():
    # vLLM 0.23.0 MI300X log: "Encoder cache will be initialized with a budget of 8192
    # tokens, and profiled with 32 image items" (gemma-3-4b-it, max_model_len 8192)
    m = _model("google/gemma-3-4b-it")
    p = _profile(m, 8192, 8192, 1024)
    assert (p.tokens_per_item, p.items, p.modality) == (256, 32, "image")
    # 32 x 64 x 64 patches x 1,152 x 2 B = U; the MLP (3 + 2 x 4304/1152 = 10.47 U) beats
    # attention (3 + 4 = 7 U); held: patch embeddings 1 U + bf16 pixels 3 x 14 x 14 / 1152
    u = 32 * 4096 * 1152 * 2
    assert abs(p.encoder_peak - u * (3 + 2 * 4304 / 1152 + 1 + 588 / 1152)) < 2
    assert round(p.encoder_peak / GiB, 2) == 3.37
    # held while the language model runs: pixels + 32 x 256 pooled tokens x 2,560 x 2 B
    assert p.held_for_lm == 32 * 4096 * 588 * 2 + 32 * 256 * 2560 * 2


def test_llama4_profile_holds_17_tiles_of_embeddings_per_image():
    # mllama4.py: a 16:1 dummy image is 16 tiles + the global one, (336/14)^2 = 576 patches
    # (+ the class token) each, pixel-shuffled by 0.5 to 144 embeddings of width 5,120
    m = _model("meta-llama/Llama-4-Scout-17B-16E-Instruct")
    for mnbt, items in ((8192, 3), (16384, 6)):  # H100's and B200's default budgets
        p = _profile(m, 131072, mnbt, 1024)
        assert (p.tokens_per_item, p.items, p.modality) == (17 * 144, items, "image")
        outputs, pixels = items * 17 * 144 * 5120 * 2, items * 17 * 3 * 336 * 336 * 2
        assert p.held_for_lm == outputs + pixels  # V1 keeps the bf16 pixels too
    assert outputs == 150405120  # 0.14 GiB on a B200
    # 6 x 17 x 577 patches x 1,408 x 2 B = U; MLP ratio 4: max(3 + 8, 4 + 4) + the patch
    # embeddings and pixels held: U x (11 + 1 + 3 x 14^2 / 1408)
    u = 6 * 17 * 577 * 1408 * 2
    assert abs(p.encoder_peak - u * (11 + 1 + 3 * 196 / 1408)) < 2


def test_gemma4_profiles_32_frame_videos_of_64_embeddings_a_frame():
    # gemma4_mm.py: a 224 x 224 dummy frame scaled for 70 soft tokens: sqrt(630 / 196) x 224
    # floors to 8 pooling units of 48 px = 24 x 24 patches, 64 embeddings; an item takes
    # 32 x (70 + 8) = 2,496 of the budget (the 0.31.1 MI300X log: "6 video items" at 16,384)
    m = _model("google/gemma-4-31B-it")
    for mnbt, items in ((8192, 3), (16384, 6), (2496, 1)):
        p = _profile(m, 32768, mnbt, 256)
        assert (p.tokens_per_item, p.items, p.modality) == (2496, items, "video")
        outputs = items * 32 * 64 * 5376 * 2
        # every frame's pixels, padded to 630 patches, in bf16
        assert p.held_for_lm == outputs + items * 32 * 630 * 3 * 16 * 16 * 2
    assert outputs == 22020096  # one video's embeddings: 21 MiB
    # frames padded to 630 patches x 1,152 wide through the whole (untouched by TP) HF tower,
    # all at once here: a layer's GeGLU MLP (3r + 4 units, r = 4304 / 1152) and the 630 x 630
    # bool mask per frame, beside every frame's pixels
    u, r = 630 * 1152 * 2, 4304 / 1152
    t, px = int((3 * r + 4) * u) + 630 * 630, 630 * 768 * 2
    assert p.encoder_peak == 32 * t + 32 * px
    # video limited to 0 and no audio tower: a 280-token image (2,520 padded patches), whose
    # 224 x 224 dummy gives 256 embeddings
    p = encoder_profile(m.config["architectures"], m.config["vision_config"], tp=1,
                        max_model_len=32768, max_num_batched_tokens=8192, max_num_seqs=256,
                        text_hidden=5376, limits={"video": 0})
    assert (p.tokens_per_item, p.items, p.modality) == (280, 29, "image")
    assert p.held_for_lm == 29 * 256 * 5376 * 2 + 29 * 2520 * 3 * 256 * 2


def test_gemma4_tower_takes_frames_in_chunks_and_audio_wins_without_video():
    from kvplan.core.mm import gemma4_frame_chunk

    e2b = _model("google/gemma-4-E2B")
    vision = e2b.config["vision_config"]
    # `_encoder_chunk` (0.22+): total / 10 over 630 x 4 x 10,240 int64 a frame; an L4
    # (23,612,293,120 B) takes 11 frames, frame by frame in 0.21
    assert gemma4_frame_chunk(vision, 23612293120, chunked=True, video=True) == 11
    assert gemma4_frame_chunk(vision, 23612293120, chunked=False, video=True) == 1
    p = encoder_profile(e2b.config["architectures"], vision, tp=1, max_model_len=16384,
                        max_num_batched_tokens=2048, max_num_seqs=8, text_hidden=1536,
                        audio_tower=True, frame_chunk=11)
    # chunks of 11, 11, 10 frames: the second peaks with all 32 frames' pixels and the
    # first chunk's outputs alive (0.20 GiB; the real 0.28 L4 start logs 0.22 in all)
    u = 630 * 768 * 2
    t, px = int(16 * u) + 630 * 630, 630 * 768 * 2
    assert p.encoder_peak == 11 * t + 32 * px + 11 * u
    assert round(p.encoder_peak / 2**30, 2) == 0.20
    # video off: the audio item (750 tokens) outweighs an image's 280, and its dummy clip is
    # one FFT window, so the tower costs nothing
    assert encoder_profile(e2b.config["architectures"], vision, tp=1, max_model_len=16384,
                           max_num_batched_tokens=2048, max_num_seqs=8, text_hidden=1536,
                           limits={"video": 0}, audio_tower=True) is None


def test_encoder_profile_by_release():
    # Qwen VL on V1 from 0.8 (review 24e F1: 0.8-0.10's `profile_run` runs the encoder too;
    # one dummy item fills the budget); Gemma 3 from 0.20 only
    h200 = Gpu("h200", "NVIDIA H200", 143771 << 20, "9.0")

    def prof(name, version):
        return size(_model(name), h200, EngineArgs(max_model_len=8192,
                                                   kv_cache_memory_bytes=GiB),
                    version).vision_profile

    assert prof("Qwen/Qwen3-VL-30B-A3B-Instruct", "0.13.0") is not None
    p = prof("Qwen/Qwen2.5-VL-7B-Instruct", "0.10.2")
    # a one-frame video of the 16,384-token budget (the reviewer's derivation)
    assert (p.modality, p.items, p.tokens_per_item) == ("video", 1, 16384)
    assert prof("Qwen/Qwen2.5-VL-7B-Instruct", "0.7.3") is None  # V0: not modelled (noted)
    assert prof("google/gemma-3-27b-it", "0.13.0") is None
    assert prof("google/gemma-3-27b-it", "0.20.2") is not None


def test_pixel_bytes_by_runner_and_release():
    from kvplan.core.mm import PixelBytes, pixel_bytes
    from kvplan.core.sizing import mm_pixel_bytes
    from kvplan.core.versions import VllmVersion

    qwen25, qwen3 = ["Qwen2_5_VLForConditionalGeneration"], ["Qwen3VLForConditionalGeneration"]
    v = VllmVersion.of
    # V1 keeps the batched pixels through the decoder run; V2 frees them with the encoder batch
    assert mm_pixel_bytes(qwen25, v("0.20.2"), False) == PixelBytes(2, 2)
    assert mm_pixel_bytes(qwen25, v("0.28"), True) == PixelBytes(3, 0)  # uint8 + bf16 copy
    assert mm_pixel_bytes(qwen25, v("0.30"), True) == PixelBytes(1, 0)  # uint8 into the tower
    assert mm_pixel_bytes(qwen3, v("0.31"), True) == PixelBytes(2, 0)
    assert mm_pixel_bytes(qwen3, v("0.32"), False) == PixelBytes(1, 1)
    assert pixel_bytes(["Gemma3ForConditionalGeneration"], device_normalize=True,
                       v2_runner=True) == PixelBytes(2, 0)


def test_v2_holds_only_the_encoder_outputs_for_the_language_model_run():
    # Qwen3-VL-30B-A3B at 0.33 on an H100 (V2): the language model's peak plus the outputs
    # (16,384 tokens x 2,048 x (1 + 3 deepstack) x 2 B = 268,435,456 B); the 65,536 x 1,536
    # bf16 pixels (201,326,592 B) are gone. --skip-mm-profiling gives the LM peak alone.
    m = _model("Qwen/Qwen3-VL-30B-A3B-Instruct")
    h100 = Gpu("h100", "NVIDIA H100 80GB HBM3", 81089 * (1 << 20), "9.0")
    on = size(m, h100, EngineArgs(), "0.33")
    off = size(m, h100, EngineArgs(skip_mm_profiling=True), "0.33")
    assert on.vision_profile.held_for_lm == 16384 * 2048 * 4 * 2 == 268_435_456
    assert on.budget.activation - off.budget.activation == 268_435_456


def test_limit_mm_per_prompt_moves_the_profiled_item():
    # Qwen2.5-VL with video off profiles one 16,384-token image, not the 114,688-token video
    m = _model("Qwen/Qwen2.5-VL-7B-Instruct")
    p = encoder_profile(m.config["architectures"], m.config["vision_config"], tp=1,
                        max_model_len=128000, max_num_batched_tokens=8192, max_num_seqs=256,
                        limits={"video": 0})
    assert (p.tokens_per_item, p.items, p.modality) == (16384, 1, "image")
    # Gemma 3 at one image a prompt: max_num_seqs prompts of one image (`_get_max_items`)
    g = _model("google/gemma-3-12b-it")
    p = encoder_profile(g.config["architectures"], g.config["vision_config"], tp=1,
                        max_model_len=131072, max_num_batched_tokens=8192, max_num_seqs=4,
                        text_hidden=3840, limits={"image": 1})
    assert (p.tokens_per_item, p.items) == (256, 4)
    p = encoder_profile(g.config["architectures"], g.config["vision_config"], tp=1,
                        max_model_len=131072, max_num_batched_tokens=8192, max_num_seqs=4,
                        text_hidden=3840)
    assert p.items == 32  # 8,192 // 256
    # Qwen3-VL with images off profiles its 2-frame video: longest_edge 25,165,824 / 2 pixels
    # a frame, (16 x 2)^2 pixels a token: 12,288 tokens from 49,152 two-frame patches
    q = _model("Qwen/Qwen3-VL-30B-A3B-Instruct")
    p = encoder_profile(q.config["architectures"], q.config["vision_config"], tp=1,
                        max_model_len=32768, max_num_batched_tokens=8192, max_num_seqs=4,
                        limits={"image": 0})
    assert (p.tokens_per_item, p.items, p.modality) == (12288, 1, "video")


def test_encoder_data_parallel_runs_a_whole_tower_per_rank():
    # --mm-encoder-tp-mode data: each rank runs an unsharded tower on its share of the items
    # (`run_dp_sharded_mrope_vision_model`), so Qwen2.5-VL-7B's one 114,688-token video costs
    # the TP1 peak on rank 0 at TP2, and the tower's weights sit whole on every GPU
    m = _model("Qwen/Qwen2.5-VL-7B-Instruct")
    kw = dict(max_model_len=128000, max_num_batched_tokens=2048, max_num_seqs=256)
    arch, vision = m.config["architectures"], m.config["vision_config"]
    one = encoder_profile(arch, vision, tp=1, **kw)
    dp = encoder_profile(arch, vision, tp=2, encoder_dp=True, **kw)
    split = encoder_profile(arch, vision, tp=2, **kw)
    assert dp.encoder_peak == one.encoder_peak > split.encoder_peak
    # Qwen3.5 inherits `supports_encoder_tp_data` from Qwen3-VL: its 0.86 GiB tower is whole
    # on both GPUs at TP2 (half of it was counted before)
    q = _model("Qwen/Qwen3.5-27B")
    h100 = Gpu("h100", "NVIDIA H100 80GB HBM3", 81089 << 20, "9.0")
    r = [size(q, h100, EngineArgs(tensor_parallel_size=2, mm_encoder_tp_mode=mode))
         for mode in ("weights", "data")]
    from kvplan.core.arch import normalize
    from kvplan.core.params import count_params

    half = count_params(normalize(q.config)).vision  # 2 B a parameter, over 2 GPUs
    assert (r[1].budget.weights - r[1].load_extra_bytes) - (
        r[0].budget.weights - r[0].load_extra_bytes) == half == 460727792


def test_pixtral_dense_mask_until_029():
    # Mistral-Small-3.1 on a B200 (16,384 batched tokens): 5 dummy 1540 x 1540 images, 12,100
    # patches each, one packed sequence of N = 60,500 through the tower. 0.12-0.28 attend
    # with a dense [N, N] bf16 mask (no xformers; never on cc 10): 7.32 GB more than 0.29's
    # mask-free attention. The block peak: (4 + 3 x 4096/1024 + 3.15) x N x 1,024 x 2 B
    m = _model("mistralai/Mistral-Small-3.1-24B-Instruct-2503")
    b200 = Gpu("b200", "NVIDIA B200", 183359 << 20, "10.0")
    block = int(60500 * 1024 * 2 * (4 + 12 + 3.15))
    for version, mask in (("0.28", 60500 ** 2 * 2), ("0.30", 0)):
        p = size(m, b200, EngineArgs(), version).vision_profile
        assert (p.items, p.tokens_per_item) == (5, 3025)
        assert p.encoder_peak == mask + block
    # a real 0.20 H200 start of Ministral-3-14B (sweep) moved from +0.09 to +0.00 GiB


def test_v2_sampler_state_sits_under_the_encoder_peak():
    # model runner V2 allocates its penalty / grammar state at load (`Sampler` ->
    # `PenaltiesState`, the grammar bitmask), so when the vision encoder sets the profile
    # peak the state is still charged: Qwen2.5-VL-7B on an L4 at 16k with 0.33 holds 256 x
    # (152,064 + 2 x 4,752) x 4 B = 165,445,632 B of it (a helper's hand derivation from the
    # 0.33 wheel: 2,094 blocks, 33,504 tokens; 2,274 / 36,384 without it; 2,078 / 33,248 with
    # the V2 encoder runner's [2,048, 3,584] bf16 inputs buffer, which another helper found;
    # 1,971 / 31,536 with the MRoPE cache at 4 x 128,000 positions, 94 MiB more)
    from kvplan.sources.resolve import resolve_gpu

    m = _model("Qwen/Qwen2.5-VL-7B-Instruct")
    r = size(m, resolve_gpu("l4"), EngineArgs(max_model_len=16384), "0.33")
    assert (r.num_gpu_blocks, r.kv_cache_tokens) == (1971, 31536)
    lm = size(m, resolve_gpu("l4"), EngineArgs(max_model_len=16384, skip_mm_profiling=True),
              "0.33")
    assert r.to_json()["sampler_state_bytes"] == lm.to_json()["sampler_state_bytes"] == \
        256 * (152064 + 2 * 4752) * 4


def test_processor_kwargs_set_the_dummy_image_and_video():
    # 0.33 `Qwen2VLProcessingInfo.get_image_size_with_most_features`: N = max_pixels // 28^2
    # merged patches, the largest n <= N whose closest factor pair is within 200:1; video
    # frames take the image's size, resized with the video settings; 7 frame pairs at most
    from kvplan.core.mm import most_features, processor_pixels, smart_resize_tokens
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    assert most_features(1003520, 28) == (32, 40)  # 1,280 = 32 x 40
    assert most_features(1279 * 784, 28) == (18, 71)  # 1,279 is prime: 1,278 = 18 x 71
    # a 3,584 x 3,584 frame to at most 1,003,520 pixels: 35 x 35 merged patches
    assert smart_resize_tokens(128, 128, 28, 1003520) == 1225
    flat = {"max_pixels": 1003520}
    assert processor_pixels(flat, scoped=True) == processor_pixels(flat, scoped=False)
    scoped = {"max_pixels": 2000000, "videos_kwargs": {"size": {"longest_edge": 1003520}}}
    assert (processor_pixels(scoped, scoped=True).video,
            processor_pixels(scoped, scoped=False).video) == (1003520, 2000000)
    h100 = resolve_gpu("h100")

    def prof(model, kw, version="0.33"):
        r = size(resolve_model(model), h100, EngineArgs(mm_processor_kwargs=kw), version)
        v = r.vision_profile
        return v.modality, v.items, v.tokens_per_item, r.kv_cache_tokens

    qwen25 = "Qwen/Qwen2.5-VL-7B-Instruct"
    assert prof(qwen25, None)[:3] == ("video", 1, 7 * 16384)
    # one video of 7 pairs x 1,280 tokens: 769,760 -> 997,664 KV tokens
    assert prof(qwen25, flat) == ("video", 1, 8960, 997664)
    # only the video shrinks (7 x 1,225 = 8,575): the 16,384-token image wins
    assert prof(qwen25, {"videos_kwargs": {"max_pixels": 1003520}})[:3] == ("image", 1, 16384)
    assert prof(qwen25, {"max_pixels": 12845056, "fps": 1})[:3] == ("video", 1, 114688)
    # 0.12-0.16 build the processor without the per-call keys: the defaults
    assert prof(qwen25, flat, "0.14")[2] == 114688
    # Qwen3-VL: image 1,024 (32 x 32 at 1,048,576 px), video 2 frames of 524,288 px: 512;
    # the larger wins, video on a tie, 8 images fill the 8,192-token budget
    qwen3 = "Qwen/Qwen3-VL-8B-Instruct"
    big = {"size": {"longest_edge": 1048576, "shortest_edge": 65536}}
    assert prof(qwen3, big)[:3] == ("image", 8, 1024)
    assert prof(qwen3, {"images_kwargs": big})[:3] == ("video", 1, 12288)
    # HF-format Mistral 3 (0.29+): the dummy side, ceil(1,024 / 28)^2 = 1,369 tokens
    mistral = "mistralai/Mistral-Small-3.1-24B-Instruct-2503"
    assert prof(mistral, {"size": {"longest_edge": 1024}})[:3] == ("image", 5, 1369)
    # Qwen's max_pixels is no Mistral key; 0.29-0.30 round the merged patches down
    # (`get_patch_grid_size`): 73 patches -> 36, not 37
    assert prof(mistral, {"max_pixels": 1003520})[2] == 3025
    assert (prof(mistral, {"size": {"longest_edge": 1010}})[2],
            prof(mistral, {"size": {"longest_edge": 1010}}, "0.30")[2]) == (1369, 1296)
    # an explicit null max_pixels leaves size.longest_edge in force (`_get_vision_size`)
    assert processor_pixels({"max_pixels": None, "size": {"longest_edge": 1003520}},
                            scoped=True).image == 1003520


def test_data_parallel_encoder_keeps_the_gathered_outputs():
    """`run_dp_sharded_mrope_vision_model` (0.11-0.33): each rank's output is padded to the
    largest rank's and all-gathered, and the items' embeddings are views of the gathered
    tensor, so the encoder cache holds TP x that block (review 25g). Qwen3-VL-8B, TP4, data
    mode, one 16,384-token image: 4 x 16,384 x 4,096 x (1 + 3 deepstack) x 2 B = 2 GiB held,
    and rank 0 peaks at its own 512 MiB beside the 2 GiB it gathers."""
    from kvplan.core.arch import normalize
    from kvplan.sources.resolve import resolve_model

    m = resolve_model("Qwen/Qwen3-VL-8B-Instruct")
    arch = normalize(m.config)
    kw = dict(tp=4, max_model_len=262144, max_num_batched_tokens=8192, max_num_seqs=1024,
              text_hidden=4096)
    p = encoder_profile(arch.architectures, arch.vision_config, encoder_dp=True, **kw)
    one = 16384 * 4096 * 4 * 2
    assert (p.items, p.tokens_per_item) == (1, 16384)
    assert p.held_for_lm - encoder_profile(arch.architectures, arch.vision_config,
                                           **kw).held_for_lm == 3 * one
    assert p.encoder_peak == 5 * one == 2684354560


def test_a_tower_without_a_modelled_profile_is_noted():
    """Kimi-K2.5's MoonViT runs in vLLM's encoder profile (a 3000 x 3000 dummy image), which
    kvplan does not model: the output says so from 0.20 too (review 25g)."""
    from kvplan.sources.resolve import resolve_gpu, resolve_model

    r = size(resolve_model("moonshotai/Kimi-K2.5"), resolve_gpu("h200"),
             EngineArgs(tensor_parallel_size=8, max_model_len=8192))
    assert r.vision_profile is None
    assert any("vision encoder's share of vLLM 0.33's profile run is not modelled" in n
               for n in r.notes)


def test_llama4_data_mode_deals_tiles_not_images():
    """`run_dp_sharded_vision_model` gives each rank ceil(tiles / TP) of the dummy images'
    tiles (3 images x 17 tiles = 51: 13 at TP4, 7 at TP8), not whole images (17 each;
    review 25g): the encoder peak scales with them."""
    from kvplan.core.arch import normalize
    from kvplan.sources.resolve import resolve_model

    arch = normalize(resolve_model("meta-llama/Llama-4-Scout-17B-16E-Instruct").config)
    kw = dict(max_model_len=32768, max_num_batched_tokens=8192, max_num_seqs=256,
              text_hidden=5120, encoder_dp=True)
    p4, p8 = (encoder_profile(arch.architectures, arch.vision_config, tp=t, **kw)
              for t in (4, 8))
    assert (p4.items, p8.items) == (3, 3)
    assert p4.encoder_peak * 7 == p8.encoder_peak * 13


def test_gemma4_soft_tokens_and_video_frames():
    """gemma4_mm.py (0.21-0.33): `--mm-processor-kwargs` max_soft_tokens (a supported budget,
    top level or images_kwargs) sets an image's tokens, and an image of 1,120 beats the audio
    clip's 750; `--limit-mm-per-prompt`'s video num_frames caps the 32-frame dummy and its
    budget (78 tokens a frame; review 25g #4)."""
    from kvplan.core.arch import normalize
    from kvplan.core.mm import processor_pixels
    from kvplan.sources.resolve import resolve_model

    assert processor_pixels({"max_soft_tokens": 1120}, scoped=True).soft_tokens == 1120
    assert processor_pixels({"images_kwargs": {"max_soft_tokens": 560}},
                            scoped=True).soft_tokens == 560
    assert processor_pixels({"max_soft_tokens": 1000}, scoped=True).soft_tokens is None
    e4b = normalize(resolve_model("google/gemma-4-E4B-it").config)
    kw = dict(tp=1, max_model_len=32768, max_num_batched_tokens=8192, max_num_seqs=256,
              text_hidden=e4b.hidden_size, audio_tower=True, limits={"video": 0})
    assert encoder_profile(e4b.architectures, e4b.vision_config, **kw) is None  # audio wins
    p = encoder_profile(e4b.architectures, e4b.vision_config,
                        pixels=processor_pixels({"max_soft_tokens": 1120}, scoped=True), **kw)
    assert (p.modality, p.tokens_per_item, p.items) == ("image", 1120, 7)
    v = encoder_profile(e4b.architectures, e4b.vision_config, sizes={"video": {"num_frames": 8}},
                        **{**kw, "limits": None})
    assert (v.modality, v.tokens_per_item, v.items) == ("video", 8 * 78, 8192 // 624)


def test_an_empty_limit_mm_per_prompt_is_the_default(capsys):
    """Review 28 (metamorphic tests): `{}` is vLLM's own default for the flag, refused before."""
    import json

    from kvplan.cli import main

    argv = ["size", "Qwen/Qwen2.5-VL-7B-Instruct", "--gpu", "h100", "--max-model-len", "8192",
            "--json"]
    assert main(argv) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(argv + ["--limit-mm-per-prompt", "{}"]) == 0
    given = json.loads(capsys.readouterr().out)
    assert (given["kv_cache_tokens"], given["activation_bytes"]) == (
        plain["kv_cache_tokens"], plain["activation_bytes"])
