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
`exchange_backend`, `ubatches`, `deepep_buffers` and `mega_moe_buffer` apply them to a start
(engine arguments, GPU, release), with the notes `size` prints. Pure computation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvplan.core.params import moe_hidden
from kvplan.core.versions import cc_major
from kvplan.errors import BadInput
from kvplan.units import GiB, MiB, cdiv

if TYPE_CHECKING:
    from kvplan.core.arch import ModelArch
    from kvplan.core.sizing import EngineArgs, Gpu
    from kvplan.core.versions import VllmVersion

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


def default(release: tuple[int, ...]) -> str | None:
    """The backend a release runs when neither `--all2all-backend` nor VLLM_ALL2ALL_BACKEND
    (where read) sets one: the variable's default `naive` in 0.9-0.10, `allgather_reducescatter`
    from 0.11 (`envs.py`; `ParallelConfig.all2all_backend` from 0.14); None before 0.9."""
    if release < (0, 9):
        return None
    return "naive" if release < (0, 11) else "allgather_reducescatter"


def effective(flag: str | None, env: str | None, release: tuple[int, int, int],
              notes: list[str]) -> tuple[str | None, str]:
    """(the backend the start runs, what chose it: flag | env | default) for the flag and the
    variable as `resolve` reads them; pplx runs allgather_reducescatter from 0.17."""
    chosen = resolve(flag, env, release, notes)
    read = env if (0, 9) <= release < (0, 16) else None
    via = "env" if read is not None and (
        release < (0, 11, 1) or release >= (0, 14) or flag is None) else \
        "flag" if flag is not None else "default"
    backend = chosen or default(release)
    if backend == "pplx" and release >= (0, 17):
        backend = "allgather_reducescatter"
    return backend, via


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


def exchange_backend(arch: ModelArch, a: EngineArgs, asked: str | None,
                     version: VllmVersion, notes: list[str]) -> str | None:
    """The all-to-all backend with buffers of its own the MoE layers exchange tokens through,
    or None (`FusedMoEParallelConfig.use_all2all_kernels`: DP > 1 with expert parallelism;
    vLLM's default gathers through NCCL). From 0.17 `pplx` maps to
    `allgather_reducescatter` (`ParallelConfig`, with a warning)."""
    if not asked or not (arch.num_experts and a.data_parallel_size > 1
                         and a.enable_expert_parallel):
        if asked and asked not in NO_BUFFER:
            notes.append(f"all-to-all backend {asked}: used only with -dp > 1 and "
                         "--enable-expert-parallel on an MoE model, no buffers to size here")
        return None
    if asked == "pplx" and version.at_least(0, 17):
        notes.append(f"vLLM {version.text} has no pplx kernels and runs "
                     "allgather_reducescatter instead")
        return None
    return None if asked in NO_BUFFER else asked


def ubatches(a: EngineArgs, backend: str | None, gpu: Gpu, version: VllmVersion,
             notes: list[str]) -> int:
    """Microbatches per step (`ParallelConfig.num_ubatches`, 0.20+: 2 with --enable-dbo,
    else --ubatch-size), 1 without; refused as `VllmConfig.__post_init__` refuses
    microbatching with an all-to-all backend other than DeepEP's (NIXL-EP from 0.24,
    ROCm's all-gather in 0.33)."""
    if a.ubatch_size not in (0, 1) and not version.at_least(0, 14):  # argparse
        raise BadInput(f"vLLM {version.text} has no --ubatch-size (0.14+; 'unrecognized "
                       "arguments')", hint="use --enable-dbo for two microbatches",
                       flag="ubatch_size")
    if a.ubatch_size < 0:  # `ParallelConfig.ubatch_size: Field(default=0, ge=0)`
        raise BadInput(f"--ubatch-size must be 0 or more, got {a.ubatch_size} (vLLM's "
                       "ParallelConfig refuses it)", hint="give 0 (no microbatching) or the "
                       "microbatches per step", flag="ubatch_size")
    n = 2 if a.enable_dbo else a.ubatch_size
    if n <= 1 or not version.at_least(0, 11):
        return 1
    ok = ["deepep_low_latency", "deepep_high_throughput"]
    if version.at_least(0, 24):
        ok.append("nixl_ep")
    if gpu.vendor == "amd" and version.at_least(0, 33):
        ok.append("allgather_reducescatter")
    if (backend or "") not in ok:
        flag = "--enable-dbo" if a.enable_dbo else "--ubatch-size"
        raise BadInput(f"{flag} (microbatching) runs only with the {', '.join(ok)} all-to-all "
                       f"backends, not {backend or 'the default'} (vLLM refuses it)",
                       hint=f"add --all2all-backend {ok[0]}, or remove {flag}",
                       flag="enable_dbo" if a.enable_dbo else "ubatch_size")
    if not version.at_least(0, 20):
        notes.append(f"microbatching in vLLM {version.text}: its profile is sized as one batch "
                     "(the runners were read from 0.20)")
        return 1
    return n


def deepep_buffers(backend: str, arch: ModelArch, a: EngineArgs, gpu: Gpu,
                   version: VllmVersion, mnbt: int, notes: list[str]) -> int:
    """Device bytes per GPU of the all-to-all backend's buffers (`buffer_bytes`), with the
    notes that say what is not sized. DeepEP low latency is sized for the scheduler's token
    budget per DP rank from 0.20 (`FusedMoEConfig.max_num_tokens`), for
    VLLM_MOE_DP_CHUNK_SIZE's 256 before; its ranks span hosts past `Gpu.gpus_per_node`."""
    if backend not in DEEPEP:
        notes.append(f"--all2all-backend {backend}: its own device buffers are not sized "
                     "(they come out of the KV cache: the pool is smaller than this)")
        return 0
    hidden = moe_hidden(arch)
    if backend == "deepep_low_latency" and not ll_hidden(hidden):
        raise BadInput(f"DeepEP low latency takes hidden sizes up to "
                       f"{LL_HIDDEN_SIZES[-1]}, not {hidden} (vLLM refuses it)",
                       hint="use --all2all-backend deepep_high_throughput",
                       flag="all2all_backend")
    ep = a.tensor_parallel_size * a.data_parallel_size
    internode = ep > gpu.gpus_per_node
    experts = arch.num_experts + (a.eplb_num_redundant_experts if a.enable_eplb else 0)
    tokens = mnbt if version.at_least(0, 20) else BATCHED_DP_TOKENS
    buffer_mb = a.deepep_buffer_mb if version.at_least(0, 11) else 1024  # hard-coded before
    if buffer_mb != a.deepep_buffer_mb:
        notes.append(f"VLLM_DEEPEP_BUFFER_SIZE_MB is not read by vLLM {version.text}: DeepEP's "
                     "buffer is 1,024 MiB")
    cuda, heap = buffer_bytes(backend, buffer_mb=buffer_mb, internode=internode,
                                  tokens=tokens, hidden=hidden, experts=experts)
    out = cuda + heap
    parts = [f"the {buffer_mb} MiB NVLink buffer and 32 MiB workspace"]
    if heap:
        parts.append(f"{heap / GiB:.2f} GiB of NVSHMEM heap; NVSHMEM rounds it to 512 MiB "
                     "granules and keeps its own state, about 0.5-1.1 GiB more (DeepEP issue "
                     "510), not included")
    notes.append(f"non-torch memory includes {out / GiB:.2f} GiB per GPU of DeepEP buffers "
                 f"({backend}: {', '.join(parts)})")
    if backend == "deepep_high_throughput":
        notes.append("the MoE activations of DeepEP's high-throughput path are sized as the "
                     "all-gather path's (the ranks that host the profile's experts)" + (
                         ", though on Blackwell vLLM runs DeepGEMM or Triton on the rows each "
                         "rank receives instead of FlashInfer's TRT-LLM kernels"
                         if cc_major(gpu.compute_capability) == 10 else ""))
    if backend == "deepep_low_latency" and str(
            (arch.quantization or {}).get("quant_method", "")).lower() == "mxfp4":
        notes.append("MXFP4 experts under DeepEP low latency run vLLM's batched Marlin (or "
                     "Humming) kernel: their workspace is sized with BatchedTriton's shapes")
    if backend == "deepep_low_latency" and version.at_least(0, 20) and \
            tokens > BATCHED_DP_TOKENS:
        floor = ll_rdma_bytes(BATCHED_DP_TOKENS, ll_hidden(hidden), experts)
        notes.append(f"DeepEP low latency sizes its NVSHMEM heap for the scheduler's "
                     f"{tokens:,}-token budget per DP rank: {heap / GiB:.2f} GiB (at "
                     f"{BATCHED_DP_TOKENS} tokens, this backend's default budget, "
                     f"{floor / GiB:.2f} GiB)")
    return out


def mega_moe_buffer(arch: ModelArch, a: EngineArgs, version: VllmVersion, mnbt: int,
                    notes: list[str]) -> int:
    """DeepSeek-V4's mega-MoE symmetric buffer per GPU (`mega_moe_buffer_bytes`):
    made in the profile forward, outside torch (non-torch memory), for the scheduler's
    token budget on every EP rank (`DeepseekV4MegaMoEExperts.get_symm_buffer`, 0.25)."""
    t = arch.text_config
    out = mega_moe_buffer_bytes(
        ranks=a.moe_ranks, experts=arch.num_experts, tokens=mnbt,
        top_k=int(t.get("num_experts_per_tok") or 1), hidden=arch.hidden_size,
        intermediate=arch.expert_intermediate_size)
    out = cdiv(out, 2 * MiB) * 2 * MiB
    layout = version.at_least(0, 25) and not version.at_least(0, 27)
    notes.append(f"non-torch memory includes {out / GiB:.2f} GiB per GPU of DeepGEMM mega-MoE's "
                 f"symmetric buffer ({mnbt:,} tokens on each of {a.moe_ranks} EP ranks; it "
                 "replaces the fused-MoE workspace and the DP gather)" + (
                     "" if layout else f"; its layout is DeepGEMM 2.5.0's (vLLM 0.25-0.26), "
                     f"which vLLM {version.text} may have changed"))
    return out
