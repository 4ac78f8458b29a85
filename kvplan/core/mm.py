"""The vision encoder's share of vLLM's profile run (Qwen2-VL / 2.5-VL / 3-VL / 3.5 / 3.6,
Gemma 3, Gemma 4, Llama 4).

vLLM 0.20.2 `GPUModelRunner.profile_run` first runs the encoder on the largest dummy item
(`MultiModalBudget`, `compute_mm_encoder_budget`), keeps the pixels and encoder outputs while
the language-model dummy forward runs, and measures the torch peak over both, so
    peak = max(encoder peak, LM peak + pixels + encoder outputs);
the V2 runner frees the pixels before the language model runs, and Qwen VL pixels reach the
GPU as uint8 where vLLM normalises them on the device (`pixel_bytes`).
The encoder peak counts the bf16 activations a ViT block keeps alive at once (FlashAttention
backend: linear in the patch count), in units U = patches x vision hidden x 2 B: attention
2 + 8/TP + 1 (+1 for the all-reduce output when TP > 1); MLP 5 + 3r/TP (+1) for Qwen2.5's
gated MLP, max(3 + 2r/TP, 4 + r/TP (+1)) for Qwen3-VL (r = intermediate / hidden); plus what
the whole run holds (pixels, Qwen3-VL's position embeddings and deepstack features). Gemma 3's
SigLIP tower (`siglip.py`, FlashAttention per image): attention 3 + 4/TP (+1), the MLP as
Qwen3-VL's, holding the patch embeddings and pixels; 256 pooled tokens per 896 x 896 image
(pan-and-scan off); Llama 4's tower is costed the same way on 17 tiles an image. These are
coefficients from reading the code, checked on two Qwen logs and
one Gemma 3 log (docs/methodology.md).
"""

from __future__ import annotations

import math
from typing import Any

from kvplan.core.record import record
from kvplan.errors import BadInput

QWEN2_VL = ("Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration")
QWEN3_VL = ("Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration",
            # Qwen3.5 / 3.6: Qwen3-VL's vision transformer, processing info and dummy inputs
            # (0.33 `models/qwen3_5.py`)
            "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration")
_QWEN2_MAX_PIXELS = 12845056  # Qwen2-VL image processor `max_pixels`
_QWEN3_LONGEST_EDGE = 16777216  # Qwen3-VL image processor `size.longest_edge` (pixels)
_QWEN3_VIDEO_LONGEST_EDGE = 25165824  # its video processor's (video_preprocessor_config.json)
_QWEN2_MAX_VIDEO_PAIRS = 7  # `_MAX_FRAMES_PER_VIDEO` = 14 frames, 2 per temporal patch
GEMMA3 = ("Gemma3ForConditionalGeneration",)
LLAMA4 = ("Llama4ForConditionalGeneration",)
_LLAMA4_MAX_TILES = 16  # the Llama 4 image processor's `max_patches` (preprocessor_config.json)
GEMMA4 = ("Gemma4ForConditionalGeneration",)
PIXTRAL = ("Mistral3ForConditionalGeneration", "PixtralForConditionalGeneration")
_GEMMA4_VIDEO_FRAMES, _GEMMA4_VIDEO_SOFT_TOKENS = 32, 70  # gemma4_mm.py `_VIDEO_MAX_*`
_GEMMA4_DUMMY_SIDE = 224  # the dummy image / frame (`get_dummy_mm_data`: size unset)
_GEMMA4_SOFT_TOKENS = (70, 140, 280, 560, 1120)  # gemma4_mm.py `_SUPPORTED_SOFT_TOKENS`
_GEMMA4_AUDIO_TOKENS = 750  # the processor's `audio_seq_length`
_GEMMA3_TOKENS_PER_IMAGE = 256  # `mm_tokens_per_image`: 4 x 4 average pooling of 64 x 64 patches


@record(frozen=True)
class EncoderProfile:
    tokens_per_item: int
    items: int
    modality: str
    encoder_peak: int  # bytes, while the encoder runs
    held_for_lm: int  # bytes still held during the language-model dummy run


# Wrappers whose towers vLLM builds from transformers (`AutoModel.from_config`) and runs
# whole on every TP rank (gemma3n_mm.py, gemma4_mm.py); other towers are TP-sharded
# (`mm_encoder_tp_mode` "weights", the default).
REPLICATED_TOWERS = {"Gemma3nForConditionalGeneration", "Gemma4ForConditionalGeneration"}


# the per-prompt limit of a modality --limit-mm-per-prompt does not list
# (`MultiModalConfig.get_limit_per_prompt`)
DEFAULT_MM_LIMIT = 999


# towers that also take video: a vision tower stays unless image and video are both limited
# to 0 (`get_supported_mm_limits` lists video; an unlisted one allows DEFAULT_MM_LIMIT)
VIDEO_TOWERS = QWEN2_VL + QWEN3_VL + ("Gemma4ForConditionalGeneration",)


def towers_kept(architectures: list[str], limits: dict[str, int] | None,
                language_model_only: bool) -> tuple[bool, bool]:
    """(vision tower, audio tower) allocated: vLLM builds a tower on the meta device, so not
    at all, when every modality it serves is limited to 0 (`_mark_tower_model`,
    `MultiModalConfig.get_limit_per_prompt`; `--language-model-only` limits them all)."""
    if language_model_only:
        return False, False
    if not limits:
        return True, True
    seen = ("image", "video") if any(a in VIDEO_TOWERS for a in architectures) else ("image",)
    return (any(limits.get(m, DEFAULT_MM_LIMIT) for m in seen),
            bool(limits.get("audio", DEFAULT_MM_LIMIT)))


def towers_tp_sharded(architectures: list[str], *, mistral_native: bool = False,
                      encoder_dp: bool = False) -> bool:
    """Whether TP ranks split the multimodal towers. `mistral_native`: a Mistral 3 (Pixtral)
    checkpoint served in Mistral's own format, whose `VisionTransformer` is built from plain
    `nn.Linear` layers in 0.12-0.19 (`VllmVersion.mistral_native_tower`). `encoder_dp`:
    `--mm-encoder-tp-mode data`, which hosts the whole tower on every rank for the models that
    support it (`supports_encoder_tp_data`; others fall back to "weights")."""
    if mistral_native and any(a in MISTRAL_NATIVE for a in architectures):
        return False
    if encoder_dp and any(a in ENCODER_TP_DATA for a in architectures):
        return False
    return not any(a in REPLICATED_TOWERS for a in architectures)


# `supports_encoder_tp_data = True` in vLLM 0.33 (`--mm-encoder-tp-mode data` honoured;
# Qwen3.5 / 3.6 inherit it from Qwen3-VL, qwen3_5.py 0.30-0.33)
ENCODER_TP_DATA = frozenset({
    "Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration",
    "Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration",
    "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration",
    "KimiK25ForConditionalGeneration", "KimiVLForConditionalGeneration",
    "Llama4ForConditionalGeneration", "Glm4vForConditionalGeneration",
    "Glm4vMoeForConditionalGeneration", "Step3VLForConditionalGeneration",
    "InternVLChatModel", "MiniCPMV", "Eagle2_5_VLForConditionalGeneration",
    "DotsOCRForCausalLM"})

# Pixtral-tower models vLLM loads in Mistral's format when the repo ships it (params.json)
MISTRAL_NATIVE = frozenset({"Mistral3ForConditionalGeneration",
                            "PixtralForConditionalGeneration"})


def _gelu_mlp_units(r: float, tp: int) -> float:
    """Peak of a ViT block's un-gated MLP (fc1 -> GELU -> fc2) in units U: input, residual,
    norm, fc1 and GELU outputs (3 + 2r/TP), or the fc2 output and its all-reduce."""
    return max(3 + 2 * r / tp, 4 + r / tp + (1 if tp > 1 else 0))


@record(frozen=True)
class PixelBytes:
    """Bytes per dummy pixel element (`during`: while the encoder runs; `after`: still held
    during the language-model dummy run), from `pixel_bytes`."""

    during: float = 2.0
    after: float = 2.0


def pixel_bytes(architectures: list[str], *, device_normalize: bool, v2_runner: bool,
                both_copies: bool = False) -> PixelBytes:
    """What the dummy pixels cost (`profile_run`).
    * `device_normalize` (`mm_device_do_normalize`, on by default for Qwen2/2.5-VL from 0.28
      and Qwen3-VL/3.5/3.6 from 0.32): the processor neither rescales nor normalises, so raw
      uint8 pixels reach the GPU (`mm_input_norm.py`) and the ViT's bf16 copy is dropped after
      the patch embedding (`qwen2_5_vl.py`, `qwen3_vl.py` 0.30+). `both_copies`: 0.28-0.29
      normalised them before the tower (`_process_image_input`), so the uint8 and the bf16
      copy are both held while it runs.
    * `v2_runner`: V2's `execute_mm_encoder` builds the GPU batch as a local, freed before
      the decoder's dummy run (`gpu/mm/encoder_runner.py`, 0.27-0.33); V1 keeps
      `batched_dummy_mm_inputs` until `profile_run` ends."""
    if not device_normalize or not any(a in QWEN2_VL + QWEN3_VL for a in architectures):
        return PixelBytes(2.0, 0.0 if v2_runner else 2.0)
    return PixelBytes(3.0 if both_copies else 1.0, 0.0 if v2_runner else 1.0)


@record(frozen=True)
class ProcessorPixels:
    """`--mm-processor-kwargs`' largest image and video frame, in pixels (None: the
    processor's default)."""

    image: int | None = None
    video: int | None = None
    edge: int | None = None  # HF-format Mistral 3's dummy side, `size.longest_edge` (0.29+)
    edge_floor: bool = False  # 0.29-0.30 round the merged patches down (`get_patch_grid_size`)
    soft_tokens: int | None = None  # Gemma 4's image `max_soft_tokens` (a supported value)


def processor_pixels(kwargs: dict[str, Any] | None, *, scoped: bool) -> ProcessorPixels:
    """What `--mm-processor-kwargs` gives the Qwen VL profile (0.17+): a flat `max_pixels`
    or `size.longest_edge` applies to images and videos alike; from 0.31 (`scoped`)
    `images_kwargs` / `videos_kwargs` override it per modality (0.32+
    `_merge_and_resolve_mm_processor_kwargs`, `_complete_mm_processor_size_aliases`).
    Other keys leave the profile alone (fps, num_frames and min_pixels below the dummy)."""

    def largest(d: Any, where: str) -> int | None:
        if not isinstance(d, dict):
            return None
        size = d.get("size")
        v = d.get("max_pixels")
        if v is None and isinstance(size, dict):
            v = size.get("longest_edge")
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 2 ** 40:
            raise BadInput(f"--mm-processor-kwargs {where}max_pixels / size.longest_edge must "
                           f"be a positive number of pixels, got {v!r}")
        return int(v)

    if kwargs is None:
        return ProcessorPixels()
    flat = largest(kwargs, "")
    # Gemma 4 (gemma4_mm.py `_get_max_soft_tokens`, 0.21+): top level, else images_kwargs;
    # `get_mm_max_tokens_per_item` takes it only when it is a supported budget
    soft = kwargs.get("max_soft_tokens")
    if soft is None and isinstance(kwargs.get("images_kwargs"), dict):
        soft = kwargs["images_kwargs"].get("max_soft_tokens")
    soft = soft if isinstance(soft, int) and soft in _GEMMA4_SOFT_TOKENS else None
    if not scoped:
        return ProcessorPixels(flat, flat, soft_tokens=soft)
    return ProcessorPixels(largest(kwargs.get("images_kwargs"), "images_kwargs.") or flat,
                           largest(kwargs.get("videos_kwargs"), "videos_kwargs.") or flat,
                           soft_tokens=soft)


def most_features(max_pixels: int, unit: int) -> tuple[int, int]:
    """(rows, columns) of merged patches in vLLM's dummy image
    (`get_image_size_with_most_features`, 0.14+): the largest n <= max_pixels // unit^2
    whose closest factor pair is within 200:1 (`closest_factor_pair`)."""
    n = max(1, max_pixels // unit ** 2)
    while n > 1:
        a = next(d for d in range(math.isqrt(n), 0, -1) if n % d == 0)
        if n // a <= 200 * a:
            return a, n // a
        n -= 1
    return 1, 1


def smart_resize_tokens(rows: int, cols: int, unit: int, max_pixels: int) -> int:
    """Merged patches of a rows x cols (in units) frame after the HF processor's
    `smart_resize` to at most `max_pixels` (Qwen2-VL's video frames)."""
    h, w = rows * unit, cols * unit
    if h * w <= max_pixels:
        return rows * cols
    beta = math.sqrt(h * w / max_pixels)
    return max(1, math.floor(h / beta / unit)) * max(1, math.floor(w / beta / unit))


def _qwen_dummy_tokens(rows: int, cols: int, unit: int, opt: dict[str, int], *, video: bool,
                       pairs: int, t_patch: int, max_pixels: int = 0) -> int:
    """Merged patches of a Qwen VL dummy item shrunk by `--limit-mm-per-prompt`'s options
    (`_get_dummy_images` / `_get_dummy_videos`: min(the full item's size, the option), then
    the processor's `smart_resize` to the nearest whole merged patch): `rows` x `cols` units
    a frame, `pairs` temporal patches of a video (num_frames / temporal_patch_size, rounded
    up, at most the full video's)."""
    h = min(rows * unit, opt.get("height") or rows * unit)
    w = min(cols * unit, opt.get("width") or cols * unit)
    if max(h, w) / min(h, w) > 200:  # the HF processor's `smart_resize` refuses it
        raise BadInput(f"--limit-mm-per-prompt's dummy of {w} x {h} pixels has an aspect ratio "
                       "over 200, which the Qwen VL processor refuses ('absolute aspect ratio "
                       "must be smaller than 200'), so vLLM's profile run fails",
                       hint="give width and height closer to each other",
                       flag="limit_mm_per_prompt")
    r, c = max(1, round(h / unit)), max(1, round(w / unit))
    per = smart_resize_tokens(r, c, unit, max_pixels) if max_pixels else r * c
    if not video:
        return per
    frames = opt.get("num_frames")
    n = min(pairs, -(-frames // t_patch)) if frames else pairs
    return per * max(1, n)


def _items(tokens: int, max_model_len: int, max_num_batched_tokens: int,
           max_num_seqs: int, limit: int = DEFAULT_MM_LIMIT) -> int:
    """Items the profile encodes at once (`MultiModalBudget._get_max_items`: the budget over
    one item, at most `max_num_seqs` prompts of `min(limit, max_model_len // tokens)`)."""
    if tokens < 1:  # a vision config whose patch outgrows its image
        raise BadInput("the vision config gives a dummy item of no tokens (check "
                       "vision_config's patch_size and image_size)")
    budget = max(max_num_batched_tokens, tokens)
    per_prompt = max(1, min(limit, max_model_len // tokens))
    return max(1, min(budget // tokens, max_num_seqs * per_prompt))


def _tiled_vit(vision: dict[str, Any], *, tp: int, tokens: int, tiles: int, patches: int,
               out_width: int, max_model_len: int, max_num_batched_tokens: int,
               max_num_seqs: int, limit: int, px: PixelBytes, embeddings: int = 0,
               modality: str = "image", pixel_patches: int = 0,
               ranks: int = 1) -> EncoderProfile | None:
    """A ViT that encodes every dummy item as `tiles` fixed tiles (or frames) of `patches`
    patches each (`pixel_patches` of them carrying pixels, default all), all items in one
    call (`GPUModelRunner.profile_run`); an item takes `tokens` of the budget and leaves
    `embeddings` (default `tokens`) of `out_width` held for the language model. `ranks`:
    the GPUs the tiles are dealt to with `--mm-encoder-tp-mode data`
    (`run_dp_sharded_vision_model`: ceil(tiles / ranks) each, not whole items; review 25g)."""
    d = int(vision.get("hidden_size") or 0)
    inter = int(vision.get("intermediate_size") or 0)
    patch = int(vision.get("patch_size") or 14)
    if not d or not inter or not patches:
        return None
    items = _items(tokens, max_model_len, max_num_batched_tokens, max_num_seqs, limit)
    total = -(-(items * tiles) // ranks) * patches
    r, extra = inter / d, (1 if tp > 1 else 0)
    attn = 3 + 4 / tp + extra  # input, LayerNorm output, q/k/v (sharded), attention output
    mlp = _gelu_mlp_units(r, tp)
    # patch embeddings kept for the loop, and the pixels (U is 2 B a vision-hidden element)
    held = 1 + 3 * patch * patch / d * px.during / 2
    pixels = items * tiles * (pixel_patches or patches) * 3 * patch * patch * px.after
    outputs = items * (embeddings or tokens) * out_width * 2
    return EncoderProfile(tokens_per_item=tokens, items=items, modality=modality,
                          encoder_peak=int(total * d * 2 * (max(attn, mlp) + held)),
                          held_for_lm=int(pixels + outputs))


def _gemma3(vision: dict[str, Any], *, text_hidden: int, **kw: Any) -> EncoderProfile | None:
    """Gemma 3: one 896 x 896 tile per dummy image (`Gemma3ProcessingInfo`, pan-and-scan off),
    256 pooled embeddings of the text width."""
    side = int(vision.get("image_size") or 896) // int(vision.get("patch_size") or 14)
    return _tiled_vit(vision, tokens=_GEMMA3_TOKENS_PER_IMAGE, tiles=1, patches=side * side,
                      out_width=text_hidden, **kw)


def _llama4(vision: dict[str, Any], *, text_hidden: int, **kw: Any) -> EncoderProfile | None:
    """Llama 4: the dummy image is 16 tiles high (`get_image_size_with_most_features`, the
    processor's `max_patches`), so 16 tiles plus the global one, each (336 / 14)^2 patches and
    a class token through the tower, pixel-shuffled to a quarter: 17 x 144 embeddings of the
    text width (mllama4.py `get_patch_per_chunk`; the tile separators carry none)."""
    side = int(vision.get("image_size") or 0) // int(vision.get("patch_size") or 14)
    ratio = float(vision.get("pixel_shuffle_ratio") or 0.5)
    per_tile = side * side // int(round(1 / ratio**2))
    tiles = _LLAMA4_MAX_TILES + 1
    return _tiled_vit(vision, tokens=tiles * per_tile, tiles=tiles, patches=side * side + 1,
                      out_width=text_hidden, pixel_patches=side * side, **kw)


def _pixtral(vision: dict[str, Any], *, tp: int, text_hidden: int, limit: int,
             max_model_len: int, max_num_batched_tokens: int, max_num_seqs: int,
             px: PixelBytes, dense_mask: bool, ranks: int = 1,
             merge: int = 2, longest_edge: int | None = None,
             edge_floor: bool = False) -> EncoderProfile | None:
    """Pixtral (Mistral-Small-3.x, Ministral-3; pixtral.py): the dummy image is image_size
    square (`get_image_size_with_most_features`), (side / merge)^2 embeddings of the text
    width, and every item's patches go through the tower as one packed sequence. Without
    xformers (0.12-0.28; from 0.10 on compute capability 10+, where it is not used)
    attention takes a dense [N, N] bf16 mask (transformers' `generate_block_attention_mask`
    into `scaled_dot_product_attention`); 0.29 moved to `MMEncoderAttention`. A block's peak
    is its gated MLP: input, residual, norm, gate_up (2r/TP) and SiluAndMul (r/TP), 4 + 3r/TP
    units, with about 3.15 more held (conv output, ln_pre, pixels). `longest_edge`: the
    dummy's side in pixels from `--mm-processor-kwargs` (HF-format Mistral 3, 0.29+
    `get_vision_encoder_info`), whose merged patches 0.29-0.30 round down (`edge_floor`)."""
    d = int(vision.get("hidden_size") or 0)
    inter = int(vision.get("intermediate_size") or 0)
    patch = int(vision.get("patch_size") or 14)
    side = -(-int(longest_edge or vision.get("image_size") or 0) // patch)
    if not d or not inter or not side:
        return None
    tokens = (side // merge if edge_floor else -(-side // merge)) ** 2
    items = _items(tokens, max_model_len, max_num_batched_tokens, max_num_seqs, limit)
    n = -(-items // ranks) * side * side
    units = 4 + 3 * inter / d / tp + (1 if tp > 1 else 0) + 3.15
    mask = n * n * 2 if dense_mask else 0
    pixels = items * side * side * 3 * patch * patch * px.after
    return EncoderProfile(tokens_per_item=tokens, items=items, modality="image",
                          encoder_peak=int(mask + n * d * 2 * units),
                          held_for_lm=int(pixels + items * tokens * text_hidden * 2))


def _gemma4_soft_tokens(vision: dict[str, Any], side: int, max_soft: int) -> int:
    """Soft tokens of a `side` x `side` image at `max_soft` tokens (gemma4_mm.py
    `_compute_num_soft_tokens`: resized to whole pooling units within max_soft x k^2 patches,
    k x k patches pooled to one)."""
    patch, k = int(vision.get("patch_size") or 16), int(vision.get("pooling_kernel_size") or 3)
    scale = math.sqrt(max_soft * k * k / ((side / patch) ** 2))
    target = max(patch * k, math.floor(side * scale / (patch * k)) * patch * k)
    return min((target // patch) ** 2 // (k * k), max_soft)


def _gemma4(vision: dict[str, Any], *, text_hidden: int, limits: dict[str, int],
            audio_tower: bool, frame_chunk: int | None, max_model_len: int,
            max_num_batched_tokens: int, max_num_seqs: int, px: PixelBytes,
            soft_tokens: int | None = None, frames_cap: int | None = None,
            **_: Any) -> EncoderProfile | None:
    """Gemma 4 (gemma4_mm.py, 0.21-0.33): the profiled item is a 32-frame video, 32 x (70
    soft tokens + 8 markers) of the budget (`get_mm_max_tokens_per_item`); with video off,
    the audio clip where there is an audio tower (750 tokens beat an image's 280; its dummy
    is one FFT window, `_dummy_audio_num_samples`, so the tower costs nothing: None), else an
    image of `default_output_length` (280) tokens. Dummy frames are 224 x 224, resized to 24
    x 24 patches for 70 soft tokens (64 embeddings), 48 x 48 for an image's 280 (256), each
    padded to max_soft x 3^2 patches. The HF tower (`AutoModel.from_config`, whole on every
    GPU) runs `frame_chunk` frames at a time (`_encoder_chunk`, 0.22+; one at a time in 0.21)
    while every frame's bf16 pixels and the earlier chunks' outputs stay alive; its peak is a
    layer's gated MLP (GeGLU: the activated gate, up and their product beside the input, the
    layer input, the residual and the norm output, 3r + 4 units of patches x hidden x 2 B)
    and the boolean attention mask. After the tower every frame is pooled to fp32 and
    projected to the text width (`_process_video_input`, `_process_image_input`)."""
    video = limits["video"] > 0
    image_soft = soft_tokens or int(vision.get("default_output_length") or 280)
    if not video and audio_tower and limits.get("audio", DEFAULT_MM_LIMIT) > 0 \
            and image_soft <= _GEMMA4_AUDIO_TOKENS:
        return None
    d, inter = int(vision.get("hidden_size") or 0), int(vision.get("intermediate_size") or 0)
    if not d or not inter:
        return None
    k2 = int(vision.get("pooling_kernel_size") or 3) ** 2
    patch = int(vision.get("patch_size") or 16)
    if video:  # `--limit-mm-per-prompt`'s num_frames caps the budget and the dummy (0.21+)
        frames = min(_GEMMA4_VIDEO_FRAMES, frames_cap or _GEMMA4_VIDEO_FRAMES)
        max_soft = _GEMMA4_VIDEO_SOFT_TOKENS
        tokens, modality = frames * (max_soft + 2 + 6), "video"
    else:  # `--mm-processor-kwargs` max_soft_tokens (`get_mm_max_tokens_per_item`)
        frames, max_soft = 1, image_soft
        tokens, modality = max_soft, "image"
    soft = _gemma4_soft_tokens(vision, _GEMMA4_DUMMY_SIDE, max_soft)
    n = max_soft * k2  # padded patches a frame
    items = _items(tokens, max_model_len, max_num_batched_tokens, max_num_seqs,
                   limits[modality])
    total = items * frames
    unit = n * d * 2
    t = int((3 * inter / d + 4) * unit) + n * n  # the MLP stage and the [n, n] bool mask
    p = n * 3 * patch * patch * px.during  # a frame's pixels
    chunk = min(total, frame_chunk or total)
    peak, done = 0, 0
    while done < total:
        step = min(chunk, total - done)
        peak = max(peak, step * t + total * p + done * unit)
        done += step
    # pooled fp32, its valid rows and the projection input in bf16, the text-width output
    post = total * (p + 2 * unit + soft * d * 4 + 2 * soft * d * 2 + soft * text_hidden * 2)
    return EncoderProfile(tokens_per_item=tokens, items=items, modality=modality,
                          encoder_peak=int(max(peak, post)),
                          held_for_lm=int(total * n * 3 * patch * patch * px.after
                                          + total * soft * text_hidden * 2))


def gemma4_frame_chunk(vision: dict[str, Any] | None, gpu_total: int, *,
                       chunked: bool, video: bool, soft_tokens: int | None = None) -> int | None:
    """Frames (or images) Gemma 4's tower takes at once: min(free / 2, total / 10) over the
    transient its patch embedder was sized for, 4 x position_embedding_size int64 a patch
    (`_encoder_chunk`, 0.22-0.33; free / 2 is the larger after a model loads, so total / 10);
    1 in 0.21 (frame by frame). None where unknown."""
    if not chunked:
        return 1
    if not vision or not gpu_total:
        return None
    k2 = int(vision.get("pooling_kernel_size") or 3) ** 2
    soft = _GEMMA4_VIDEO_SOFT_TOKENS if video else (
        soft_tokens or int(vision.get("default_output_length") or 280))
    cost = soft * k2 * 4 * int(vision.get("position_embedding_size") or 10240) * 8
    return max(1, gpu_total // 10 // cost)


def encoder_profile(architectures: list[str], vision: dict[str, Any] | None, *, tp: int,
                    max_model_len: int, max_num_batched_tokens: int,
                    max_num_seqs: int, text_hidden: int = 0,
                    limits: dict[str, int] | None = None,
                    px: PixelBytes = PixelBytes(), encoder_dp: bool = False,
                    dense_mask: bool = False, merge: int = 2, audio_tower: bool = False,
                    frame_chunk: int | None = None,
                    pixels: ProcessorPixels = ProcessorPixels(),
                    dummy_len: int | None = None,
                    sizes: dict[str, dict[str, int]] | None = None) -> EncoderProfile | None:
    """The encoder profile of a Qwen VL, Gemma 3/4, Llama 4 or Pixtral model (None for other
    models; `dense_mask`, `merge`: Pixtral's, `_pixtral`).
    `limits`: --limit-mm-per-prompt (an unlisted modality allows DEFAULT_MM_LIMIT); `px`:
    `pixel_bytes`. `encoder_dp` (`--mm-encoder-tp-mode data`, where the model supports it):
    every rank runs a whole tower on its share of the items (`run_dp_sharded_vision_model`,
    `get_load_balance_assignment`) and gathers all their outputs. Gemma 4's: whether it has
    an audio tower, and the frames its tower takes at once (`gemma4_frame_chunk`).
    `pixels`: the Qwen VL dummy image / video frame `--mm-processor-kwargs` sets
    (`processor_pixels`). `dummy_len`: the sequence length the dummy data is built for
    (`get_decoder_dummy_data(seq_len=...)`: max_model_len from 0.11, the token budget in
    0.8-0.10; default max_model_len), which bounds a Qwen2/2.5-VL video's frames. `sizes`:
    `--limit-mm-per-prompt`'s dummy width / height / num_frames by modality (0.11.1+), which
    shrink a Qwen VL dummy item (`_qwen_dummy_tokens`); the item count stays the full item's."""
    qwen2 = any(a in QWEN2_VL for a in architectures)
    qwen3 = any(a in QWEN3_VL for a in architectures)
    lim = {"image": DEFAULT_MM_LIMIT, "video": DEFAULT_MM_LIMIT, **(limits or {})}
    ranks = tp if encoder_dp and any(a in ENCODER_TP_DATA for a in architectures) else 1
    tp = 1 if ranks > 1 else tp
    kw = dict(tp=tp, max_model_len=max_model_len, max_num_batched_tokens=max_num_batched_tokens,
              max_num_seqs=max_num_seqs, px=px)
    if vision and any(a in GEMMA4 for a in architectures):
        return _gemma4(vision, text_hidden=text_hidden, limits=lim, audio_tower=audio_tower,
                       frame_chunk=frame_chunk, soft_tokens=pixels.soft_tokens,
                       frames_cap=((sizes or {}).get("video") or {}).get("num_frames"), **kw)
    if vision and any(a in PIXTRAL for a in architectures):
        return _pixtral(vision, text_hidden=text_hidden, limit=lim["image"], ranks=ranks,
                        dense_mask=dense_mask, merge=merge, longest_edge=pixels.edge,
                        edge_floor=pixels.edge_floor, **kw)
    tiled = _gemma3 if any(a in GEMMA3 for a in architectures) else (
        _llama4 if any(a in LLAMA4 for a in architectures) else None)
    if vision and tiled:
        return tiled(vision, text_hidden=text_hidden, limit=lim["image"], ranks=ranks, **kw)
    if not vision or not (qwen2 or qwen3):
        return None
    d = int(vision.get("hidden_size") or vision.get("embed_dim") or 0)
    inter = int(vision.get("intermediate_size") or 0)
    patch = int(vision.get("patch_size") or (16 if qwen3 else 14))
    merge = int(vision.get("spatial_merge_size") or 2)
    t_patch = int(vision.get("temporal_patch_size") or 2)
    out = int(vision.get("out_hidden_size") or 0)
    if not d or not inter:
        return None
    # at least one token: the processor resizes an image to a whole number of merged patches
    unit = patch * merge
    if qwen3:  # one 4096 x 4096 image; the 2-frame video (`get_max_video_tokens`: frames of
        # video longest_edge // temporal_patch_size pixels) is smaller by default
        rows, cols = most_features(pixels.image or _QWEN3_LONGEST_EDGE, unit)
        video = math.prod(most_features((pixels.video or _QWEN3_VIDEO_LONGEST_EDGE) // t_patch,
                                        unit))
        image = rows * cols
    else:  # the image, or a video of up to 7 frame pairs once max_model_len allows it; the
        # frames take the image's size, then the video settings (`_get_vision_info`)
        rows, cols = most_features(pixels.image or _QWEN2_MAX_PIXELS, unit)
        image = rows * cols
        pair = smart_resize_tokens(rows, cols, unit, pixels.video) if pixels.video else image
        video = pair * min(max((dummy_len or max_model_len) // pair, 1), _QWEN2_MAX_VIDEO_PAIRS)
    # the modality with the most tokens, video on a tie; one limited to 0 is not profiled
    # (`MultiModalBudget.get_modality_with_max_tokens`)
    modality = "video" if lim["image"] <= 0 or (lim["video"] > 0 and video >= image) \
        else "image"
    tokens = video if modality == "video" else image
    items = _items(tokens, max_model_len, max_num_batched_tokens, max_num_seqs,
                   lim[modality])
    opt = (sizes or {}).get(modality)
    if opt:  # the dummy the encoder runs on; the budget's item count stays the full item's
        pairs = 1
        if qwen3 and modality == "video":  # a 2-frame video, one temporal patch
            rows, cols = most_features((pixels.video or _QWEN3_VIDEO_LONGEST_EDGE) // t_patch,
                                       unit)
        elif modality == "video":
            pairs = video // pair
        tokens = _qwen_dummy_tokens(rows, cols, unit, opt, video=modality == "video",
                                    pairs=pairs, t_patch=t_patch,
                                    max_pixels=0 if qwen3 else pixels.video)
    patches = items * tokens * merge * merge
    u = -(-items // ranks) * tokens * merge * merge * d * 2
    r, extra = inter / d, (1 if tp > 1 else 0)
    attn = 2 + 8 / tp + 1 + extra
    pix = 3 * t_patch * patch * patch / d * px.during / 2  # the pixels, in U
    if qwen3:
        mlp = _gelu_mlp_units(r, tp)
        deep = len(vision.get("deepstack_visual_indexes") or [])
        held = 1 + pix + deep * out / (merge * merge * d) + 0.1
    else:
        mlp, deep = 5 + 3 * r / tp + extra, 0
        held = pix + 0.1
    pixels = patches * 3 * t_patch * patch * patch * px.after
    outputs = items * tokens * out * (1 + deep) * 2
    peak = u * (max(attn, mlp) + held)
    if ranks > 1:  # `run_dp_sharded_mrope_vision_model`: each rank's output padded to the
        # largest rank's and all-gathered; the items' embeddings are views of the gathered
        # tensor, so all of it stays in the encoder cache, and rank 0 holds its own padded
        # output beside it while it gathers (review 25g)
        local = -(-items // ranks) * tokens * out * (1 + deep) * 2
        outputs = ranks * local
        peak = max(peak, (1 + ranks) * local)
    return EncoderProfile(tokens_per_item=tokens, items=items, modality=modality,
                          encoder_peak=int(peak), held_for_lm=int(pixels + outputs))
