"""GPU memory vLLM 0.25+ carves out of the KV cache for the API server's multimodal decoding.

After it logs "Available KV cache memory", the worker hands the KV cache that figure minus a
frontend reservation (`reserve_mm_ipc_gpu_memory`, 0.27-0.33 `multimodal/gpu_ipc_memory.py`;
`Worker._reserve_mm_ipc_gpu_memory` in 0.25-0.26 `v1/worker/gpu_worker.py`), on both the
profiled and the `--kv-cache-memory-bytes` path, for multimodal models only:
    raw frames   int(--mm-ipc-gpu-memory-gb x GiB)  (shared by the API servers)
    decoders     api servers x (decoder bytes x hw decoders + 1.8 GiB CUDA context)
                 when the video loader or codec runs on the GPU.
The decoder term's constants (`video.py` 0.25-0.28, `video_decoders/pynvvideocodec.py`
0.29+): 128 MiB per decoder; 0.25-0.26 keep one decoder, 0.27+ `hw_decoders` (default 2)
for PyNvVideoCodec; 0.33 sizes a PyNvVideoCodec decoder as max(128 MiB, width x height x 3 x
2 surfaces) when `max_width` / `max_height` are set. GPU backends: `pynvvideocodec` (0.25+)
and the `deepstream` codec (0.28+, `register_gpu_codec`). If the reservation leaves nothing,
vLLM refuses to start.
"""

from __future__ import annotations

from typing import Any

from kvplan.core.record import record
from kvplan.errors import BadInput

GiB = 1 << 30
MiB = 1 << 20
DECODER_BYTES = 128 * MiB  # PYNVVIDEOCODEC_DECODER_GPU_MEMORY_BYTES
CUDA_CONTEXT_BYTES = int(1.8 * 1024 * MiB)  # PYNVVIDEOCODEC_CUDA_CONTEXT_BYTES
DEFAULT_HW_DECODERS = 2  # PYNVVIDEOCODEC_DEFAULT_HW_DECODERS (0.27+)
SURFACES = 2  # PYNVVIDEOCODEC_DECODER_CACHE_SIZE
PYNV = "pynvvideocodec"
DEFAULT_LOADER = "opencv"  # VLLM_VIDEO_LOADER_BACKEND's default


@record(frozen=True)
class FrontendReserve:
    raw_frames: int = 0
    decoders: int = 0

    @property
    def total(self) -> int:
        return self.raw_frames + self.decoders

    def note(self) -> str:
        parts = [f"{n / GiB:.2f} GiB {what}" for n, what in (
            (self.raw_frames, "--mm-ipc-gpu-memory-gb"),
            (self.decoders, "of GPU video decoders")) if n]
        return (f"the API server's multimodal decoding takes {self.total / GiB:.2f} GiB of the "
                f"KV cache after vLLM logs its size ({' + '.join(parts)})")


def reserve(version: Any, *, multimodal: bool, mm_ipc_gpu_memory_gb: float,
            api_servers: int, video: dict[str, Any] | None,
            loader_env: str | None) -> FrontendReserve:
    """What vLLM subtracts from the logged KV memory. `video`: `--media-io-kwargs`' "video"
    entry; `loader_env`: VLLM_VIDEO_LOADER_BACKEND."""
    if not multimodal or not version.at_least(0, 25):
        return FrontendReserve()
    raw = int(mm_ipc_gpu_memory_gb * GiB)
    video = video or {}
    loader = video.get("video_backend") or loader_env or DEFAULT_LOADER
    codec = video.get("backend")
    gpu_backends = {PYNV, "deepstream"} if version.at_least(0, 28) else {PYNV}
    if loader not in gpu_backends and codec not in gpu_backends:
        return FrontendReserve(raw, 0)
    pynv = PYNV in (loader, codec)
    hw, dec = 1, DECODER_BYTES
    if pynv and version.at_least(0, 27):
        hw = video.get("hw_decoders", DEFAULT_HW_DECODERS)
        if not _positive(hw):
            raise BadInput(f"--media-io-kwargs: hw_decoders {hw!r} is not a positive integer "
                           "(vLLM refuses it)")
    if pynv and version.at_least(0, 33):
        w, h = video.get("max_width"), video.get("max_height")
        if (w, h) != (None, None):
            if not (_positive(w) and _positive(h)):
                raise BadInput("--media-io-kwargs: max_width and max_height must be set "
                               "together, as positive integers (vLLM refuses otherwise)")
            dec = max(dec, w * h * 3 * SURFACES)
    return FrontendReserve(raw, max(1, api_servers) * (dec * hw + CUDA_CONTEXT_BYTES))


def _positive(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1
