"""The device buffers of expert parallelism's all-to-all backends (`--all2all-backend`).

With data parallelism and `--enable-expert-parallel` the MoE layers exchange tokens through
`vllm/distributed/device_communicators/all2all.py`. The default backend
(`allgather_reducescatter`, also `naive`, `passthrough` and, from 0.17, `pplx`) gathers
through NCCL and owns no buffer. DeepEP's managers create one `deep_ep.Buffer` per process
while the model loads (`maybe_make_prepare_finalize` -> `get_handle`), after the worker's
start-up memory snapshot and outside torch's allocator, so vLLM counts it as used memory
and it comes out of the KV cache (0.20-0.26 as non-torch memory, 0.27+ inside
`total_consumed`; read in the 0.11-0.33 wheels). Byte formulas: DeepEP commit 73b6ea4, the
one vLLM's `tools/ep_kernels` script installs (`csrc/deep_ep.cpp Buffer::Buffer`,
`csrc/config.hpp LowLatencyLayout`). DeepSeek-V4's `--moe-backend deep_gemm_mega_moe`
exchanges tokens through DeepGEMM's own symmetric buffer instead (`mega_moe_buffer_bytes`).
Pure computation.
"""

from __future__ import annotations

from kvplan.errors import BadInput
from kvplan.units import MiB, cdiv

# backends that own no device buffer of their own (the NCCL all-gather / reduce-scatter)
NO_BUFFER = ("allgather_reducescatter", "naive", "passthrough")
DEEPEP = ("deepep_high_throughput", "deepep_low_latency")
# `deep_ep.Buffer.__init__` on top of the NVLink buffer: barrier signals and pointer tables
# (8 x 4 + 8 x 8 + 8 x 8 B) in the same cudaMalloc, and a separate 32 MiB workspace
# (`NUM_WORKSPACE_BYTES`, `csrc/kernels/configs.cuh`)
DEEPEP_NVL_EXTRA_B = 160
DEEPEP_WORKSPACE_B = 32 * MiB
# DeepEP low latency takes only these hidden sizes; vLLM rounds a layer's up to the next
# (`DeepEPLLPrepareAndFinalize.SUPPORTED_HIDDEN_SIZES`, 0.20-0.33)
LL_HIDDEN_SIZES = (2048, 2560, 3072, 4096, 5120, 6144, 7168, 8192)
# `SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS_FOR_BATCHED_DP` (0.20+), and the tokens per
# DP rank DeepEP low latency was sized for before (`VLLM_MOE_DP_CHUNK_SIZE`, 0.11-0.19)
BATCHED_DP_TOKENS = 256


def backends(release: tuple[int, ...]) -> tuple[str, ...]:
    """The backend names a release takes: `All2AllBackend` (`config/parallel.py`; the
    `all2all_backend` Literal in 0.11.1-0.13) and VLLM_ALL2ALL_BACKEND's choices
    (`env_with_choices`, 0.11.0-0.15; before, the names `CudaCommunicator` knows: naive and
    pplx in 0.9.0, DeepEP's from 0.9.1), read in the 0.9-0.33 wheels."""
    out = ["naive", "pplx"]
    if release >= (0, 9, 1):
        out += ["deepep_high_throughput", "deepep_low_latency"]
    if release >= (0, 11):
        out += ["allgather_reducescatter", "flashinfer_all2allv"]
    if (0, 15) <= release < (0, 23):
        out.append("mori")
    if release >= (0, 18):
        out += ["nixl_ep", "flashinfer_nvlink_two_sided", "flashinfer_nvlink_one_sided"]
    if release >= (0, 23):
        out += ["mori_high_throughput", "mori_low_latency"]
    if release >= (0, 24):
        out.append("deepep_v2")
    if release >= (0, 31):
        out.append("moonep")
    if release >= (0, 32):
        out.append("passthrough")
    return tuple(out)


def resolve(flag: str | None, env: str | None, release: tuple[int, int, int],
            notes: list[str]) -> str | None:
    """The backend vLLM takes from `--all2all-backend` and VLLM_ALL2ALL_BACKEND: the variable
    alone to 0.11.0; the flag, else the variable, in 0.11.1-0.13; the variable over the flag
    in 0.14-0.15 (`ParallelConfig.__post_init__`, deprecated); the flag alone from 0.16. A
    name the release does not take is refused, as vLLM refuses it."""
    text = ".".join(map(str, release))
    if flag is not None and release < (0, 11, 1):
        raise BadInput(f"vLLM {text} has no --all2all-backend (0.11.1+)",
                       hint="set VLLM_ALL2ALL_BACKEND (--env) instead", flag="all2all_backend")
    if env is not None and not (0, 9) <= release < (0, 16):
        notes.append(f"VLLM_ALL2ALL_BACKEND is not read by vLLM {text}" + (
            " (use --all2all-backend)" if release >= (0, 16) else ""))
        env = None
    chosen, via = ((env, "VLLM_ALL2ALL_BACKEND") if env is not None and (
        release < (0, 11, 1) or release >= (0, 14) or flag is None)
        else (flag, "--all2all-backend"))
    if flag is not None and env is not None and flag != env:
        notes.append(f"vLLM {text} takes {via} {chosen} over the other setting")
    if chosen is not None and chosen not in backends(release):
        raise BadInput(f"{via} {chosen!r} is not one of vLLM {text}'s all-to-all backends",
                       hint="use one of " + ", ".join(backends(release)),
                       flag="all2all_backend")
    return chosen


def batched_dp(backend: str | None, release: tuple[int, ...]) -> bool:
    """`ParallelConfig.use_batched_dp_moe` (0.20+; the caller checks DP > 1 and EP): these
    backends default `max_num_batched_tokens` to 256 tokens."""
    return release >= (0, 20) and backend in ("deepep_low_latency", "nixl_ep")


def ll_hidden(hidden: int) -> int:
    """The hidden size DeepEP low latency is built for (`maybe_roundup_layer_hidden_size`);
    0 when the model's is larger than any it takes."""
    return next((h for h in LL_HIDDEN_SIZES if h >= hidden), 0)


def ll_rdma_bytes(tokens: int, hidden: int, experts: int) -> int:
    """`Buffer.get_low_latency_rdma_size_hint(tokens per rank, hidden, ranks, experts)`:
    `LowLatencyLayout`, double-buffered dispatch and combine send / receive areas (FP8
    dispatch messages with their scales, bf16 combine messages with LogFMT scales) and
    two 128-aligned signalling arrays, rounded up past 128 B. Independent of the rank
    count. DeepSeek-R1 at 256 tokens: 3,816,818,816 B."""
    scales = hidden // 128
    dispatch = 16 + max(2 * hidden, hidden + 4 * scales)
    combine = 4 * scales + 2 * hidden
    send = max(tokens * dispatch, experts * tokens * combine)
    recv = experts * tokens * max(dispatch, combine)
    total = 2 * send + 2 * recv + 2 * cdiv(4 * experts, 128) * 128
    return (total + 128) // 128 * 128


def _cuda_malloc(n: int) -> int:
    """What a cudaMalloc of n bytes takes on the device (2 MiB pages)."""
    return cdiv(n, 2 * MiB) * 2 * MiB


def buffer_bytes(backend: str, *, buffer_mb: int, internode: bool, tokens: int,
                 hidden: int, experts: int) -> tuple[int, int]:
    """Device bytes per GPU of a DeepEP backend's `deep_ep.Buffer` as (cudaMalloc'd,
    NVSHMEM heap requested); (0, 0) for the other backends:
    * high throughput (`DeepEPHTAll2AllManager`): the NVLink buffer of
      VLLM_DEEPEP_BUFFER_SIZE_MB (1,024 by default) and the workspace; across nodes
      (`self.internode`) as many bytes again in NVSHMEM's RDMA heap;
    * low latency (`DeepEPLLAll2AllManager`): the same NVLink buffer (allocated though unused)
      and workspace, and an RDMA heap of `ll_rdma_bytes` for `tokens` per DP rank and the
      experts (redundant ones included) at the rounded hidden size.
    NVSHMEM's rounding of its heap and its own state are not included."""
    if backend not in DEEPEP:
        return 0, 0
    nvl = buffer_mb * MiB
    cuda = _cuda_malloc(nvl + DEEPEP_NVL_EXTRA_B) + DEEPEP_WORKSPACE_B
    if backend == "deepep_high_throughput":
        return cuda, nvl if internode else 0
    return cuda, ll_rdma_bytes(tokens, ll_hidden(hidden) or hidden, experts)


def _align(n: int, a: int) -> int:
    return cdiv(n, a) * a


def mega_moe_buffer_bytes(*, ranks: int, experts: int, tokens: int, top_k: int, hidden: int,
                          intermediate: int) -> int:
    """DeepGEMM mega-MoE's symmetric buffer (`get_symm_buffer_size_for_mega_moe`, DeepGEMM
    2.5.0 as vLLM 0.25-0.26 vendor it: `csrc/apis/mega.hpp`, `layout/mega_moe.cuh`): one per
    process, shared by every MoE layer, for `tokens` per rank aligned to 384 (T), a token pool
    P = align(R.T.min(k, E/R) + 191.E/R, 384) and a scale pool of 16 P: the workspace and
    dispatch index, the FP8 input with its scales and top-k, the L1 (FP8 acts, UE8M0 scales
    per 32, top-k weights) and L2 pools, and the bf16 combine area k.T.H. `symm_mem.empty`
    maps it outside torch's caching allocator (2 MiB granules). DeepSeek-V4-Flash at 8 ranks
    and 8,192 tokens: 4,321,690,912 B."""
    t = _align(tokens, 384)
    local = experts // ranks
    pool = _align(ranks * t * min(top_k, local) + local * 191, 384)
    sf_pool = 16 * pool
    workspace = _align(32 + 16 * experts + 8 * local + 4 * _align(pool // 8, 2)
                       + 8 * (pool // 8) + 4 * local * ranks * ranks * t + 12 * pool, 16)
    inputs = t * hidden + t * hidden // 32 + 12 * top_k * t
    l1 = pool * hidden + sf_pool * hidden // 32 + 4 * pool
    l2 = pool * intermediate + sf_pool * intermediate // 32
    combine = 2 * top_k * t * hidden
    return workspace + inputs + l1 + l2 + combine
