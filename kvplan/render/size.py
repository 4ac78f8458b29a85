"""Human output of `kvplan size`: a memory waterfall and the KV figures vLLM would log."""

from __future__ import annotations

import sys

from kvplan.core.sizing import SizeResult
from kvplan.render.term import Painter, table, use_color
from kvplan.units import GiB, fmt_bytes, fmt_int, fmt_tokens

BAR = 32


# how `size` names each fused-MoE kernel kind (core/memory.py MOE_KERNELS)
_MOE_KERNEL_NAMES = {"functional": "Triton", "modular": "Triton/CUTLASS/Marlin",
                     "deepgemm_v011": "DeepGEMM", "deepgemm": "DeepGEMM",
                     "flashinfer": "FlashInfer", "oai_triton": "OpenAI Triton MXFP4",
                     "batched_deepgemm": "batched DeepGEMM", "batched_triton": "batched Triton",
                     "cutedsl_batched": "FlashInfer CuteDSL batched"}


def render_size(r: SizeResult, stream=None) -> None:
    out = stream or sys.stdout
    p = Painter(use_color(out))
    a, b = r.args, r.budget
    par = f"TP{a.tensor_parallel_size} PP{a.pipeline_parallel_size}"
    if a.data_parallel_size > 1:
        par += f" DP{a.data_parallel_size}"
    layers = sum(1 for x in r.arch.layers if x is not None)
    lines = [
        f"{p(r.model, 'bold')} on {p(r.gpu, 'bold')} · vLLM {r.version.text} · {par}",
        p(f"{r.arch.family_label} · {layers}/{r.arch.num_layers} layers keep a cache"
          + (f" (+{r.draft_layers} draft)" if r.draft_layers else "") + " · "
          + (f"{r.quantization} weights, {r.model_dtype} activations" if r.quantization
             else f"{r.model_dtype} weights")
          + f" · {r.kv_dtype} KV · block {r.block_size} "
          f"({r.block_size_reason})", "dim"),
        "",
        p(f"Memory per GPU: {b.total / GiB:.2f} GiB total, " + (
            "KV cache as given" if b.kv_override else
            f"gpu_memory_utilization {b.utilization:.2f}"), "bold"),
    ]
    kv = max(b.kv_pool, 0)
    free = b.total - b.weights - b.activation - b.non_torch - b.cudagraph - b.available_kv \
        - r.outside_budget_bytes
    rows = [
        ("weights", b.weights, "blue", ("estimated from the config" if r.weights_estimated
                                         else "checkpoint size") + (
            f" + {fmt_bytes(r.rope_cache_bytes)} rotary cache"
            if r.rope_cache_bytes >= 64 * 2**20 else "") + (
            f" + {fmt_bytes(r.load_extra_bytes)} held beyond the tensors"
            if r.load_extra_bytes >= 64 * 2**20 else "") + (
            f" + {fmt_bytes(r.lora_bytes)} LoRA slots"
            if r.lora_bytes and not r.lora_late
            else "") + (
            f" + {fmt_bytes(r.draft_bytes)} drafter" if r.draft_bytes else "")),
        ("activation peak", b.activation, "magenta", "profile run (empirical)" + (
            f"; MoE scratch {fmt_bytes(r.moe_workspace_bytes)} "
            f"({_MOE_KERNEL_NAMES[r.moe_kernel]}, "
            f"{'kept' if r.moe_workspace_kept else 'freed'})"
            if r.moe_kernel and r.moe_workspace_bytes else "") + (
            f" + {fmt_bytes(r.moe_call_scratch_bytes)} its own buffers per call"
            if r.moe_call_scratch_bytes else "") + (
            f"; sampler state {fmt_bytes(r.sampler_state_bytes)} (V2)"
            if r.sampler_state_bytes else "")),
        ("non-torch", b.non_torch, "magenta", "NCCL, cuBLAS (empirical)" + (
            f" + {fmt_bytes(r.all2all_buffer_bytes)} expert-parallel buffers"
            if r.all2all_buffer_bytes else "")),
        ("CUDA graphs", b.cudagraph, "magenta",
         f"estimate for {r.cudagraph_graphs} graphs" + (
             f", {r.cudagraph_mode}" if r.cudagraph_mode != "FULL_AND_PIECEWISE" else "")
         + " (empirical)" if b.cudagraph
         else "not subtracted" + (f" ({r.cudagraph_mode})" if r.cudagraph_mode == "NONE"
                                  and not r.args.enforce_eager else "")),
        ("KV cache pool", kv, "green", "--kv-cache-memory-bytes" if b.kv_override else ""),
        *([("frontend decode", b.frontend_reserved, "magenta",
            f"taken from the logged {fmt_bytes(b.available_kv)} for the API server's "
            "multimodal decoding")] if b.frontend_reserved else []),
        *([("smallest worker", b.rank_deficit, "magenta",
            f"taken from the logged {fmt_bytes(b.available_kv)}: every worker takes the "
            "smallest worker's blocks (empirical)")] if b.rank_deficit else []),
        ("headroom", b.headroom, "dim", f"the {1 - b.utilization:.2f} vLLM leaves unused" + (
            f"; {fmt_bytes(r.outside_budget_bytes)} of it taken after sizing"
            if r.outside_budget_bytes else "")) if not b.kv_override else
        # a given KV size is not bounded by gpu_memory_utilization: what is left is the GPU's
        ("free", max(free, 0), "dim", "left on the GPU beside a given KV cache"),
    ]
    styled, raw = [], []
    for label, n, colour, note in rows:
        w = 0 if b.total <= 0 or n <= 0 else min(BAR, max(1, round(BAR * n / b.total)))
        bar = "█" * w
        styled.append([label, fmt_bytes(n), p(bar, colour) + " " * (BAR - w), p(note, "dim")])
        raw.append([label, fmt_bytes(n), " " * BAR, note])
    lines.append(table(styled, raw, align="lr"))
    if b.available_kv < 0:
        lines.append(p(f"  over budget by {fmt_bytes(-b.available_kv)}", "red"))
    elif b.kv_override and free < 0:
        lines.append(p(f"  over the GPU by {fmt_bytes(-free)}", "red"))
    lines += ["", p("KV cache", "bold")]
    kv_rows = [
        ["bytes per token", f"{fmt_bytes(r.kv_bytes_per_token_per_gpu)} per GPU · "
                            f"{fmt_bytes(r.kv_bytes_per_token_replica)} per replica"
                            + _quantized_gain(r)],
    ]
    if r.state_bytes_per_request_per_gpu:
        kv_rows.append(["state per request", f"{fmt_bytes(r.state_bytes_per_request_per_gpu)} "
                        "per GPU (Mamba / linear attention, fixed)"])
    if r.arch.packed_kv:  # DeepSeek-V4: window and compressor-state groups, whatever the length
        fixed = r.fixed_blocks_per_request
        kv_rows.append(["fixed per request", f"{fmt_int(fixed)} blocks "
                        f"({fmt_bytes(fixed * r.bytes_per_block)}) for the sliding-window and "
                        "compressor-state groups at admission"])
    groups = f"{len(r.groups)} group{'s' if len(r.groups) != 1 else ''}"
    kv_rows += [
        ["blocks", f"{fmt_int(r.num_gpu_blocks)} × {fmt_bytes(r.bytes_per_block)} "
                   f"({r.block_size} tokens, {groups}; " + (
                       "1 null block)" if r.version.v1 else
                       f"V0 admits into {fmt_int(r.admission_blocks)}: 1 % kept free"
                       + (f" in each of {r.virtual_engines} virtual engines)"
                          if r.virtual_engines > 1 else ")"))],
        ["GPU KV cache size", f"{fmt_int(r.kv_cache_tokens)} tokens (as vLLM logs it)"],
        ["max concurrency", f"{r.max_concurrency:.2f}x at {fmt_int(r.max_model_len)} tokens "
                            f"({fmt_int(r.blocks_per_request)} blocks per request)"],
        ["max_model_len", f"{fmt_int(r.max_model_len)} ({r.max_model_len_source})"],
        ["scheduler", f"max_num_seqs {r.max_num_seqs} · max_num_batched_tokens "
                      f"{fmt_int(r.max_num_batched_tokens)}"],
    ]
    if len(r.stages) > 1:  # every worker takes the smallest stage's block count
        low = min(range(len(r.stages)), key=lambda i: r.stages[i]["num_gpu_blocks"])
        kv_rows.append(["pipeline stages", "/".join(str(s["layers"]) for s in r.stages)
                        + f" layers · stage {low} has the fewest blocks ("
                        + "/".join(fmt_int(s["num_gpu_blocks"]) for s in r.stages) + ")"])
    dcp = a.decode_context_parallel_size
    if dcp > 1:
        kv_rows.append(["decode context", f"-dcp {dcp}: each of {dcp} ranks keeps every "
                        f"{dcp}th token, so a block covers {fmt_int(r.block_size * dcp)} tokens "
                        "of a request"])
    if a.data_parallel_size > 1:
        kv_rows.append(["cluster", f"{a.data_parallel_size} engines × "
                        f"{fmt_int(r.kv_cache_tokens)} tokens (one pool per DP rank)"])
    lines.append(table(kv_rows))
    if r.concurrency_at:
        lines += ["", p("Full-length sequences that fit at once", "bold")]
        lines.append(table([["context", *[fmt_tokens(n) for n in r.concurrency_at]],
                            ["sequences", *[fmt_int(v) for v in r.concurrency_at.values()]]],
                           align="l" + "r" * len(r.concurrency_at)))
    lines.append("")
    if r.fits:
        full = r.concurrency_at.get(r.max_model_len, 0)
        seqs = "sequence" if full == 1 else "sequences"
        lines.append(f"{p('fits', 'green', 'bold')}: vLLM would start; {fmt_int(full)} {seqs} "
                     f"of {fmt_int(r.max_model_len)} tokens fit{'s' if full == 1 else ''}, "
                     "max_num_seqs is "
                     f"{fmt_int(r.max_num_seqs)}")
    else:
        lines.append(f"{p('does not fit', 'red', 'bold')}: {r.failure}")
    for note in r.notes:
        lines.append(f"{p('note', 'yellow')}: {note}")
    out.write("\n".join(lines) + "\n")


def _quantized_gain(r) -> str:
    """' · 3.56x fewer than bfloat16' for a quantized KV format (attention layers only)."""
    from kvplan.core.arch import AttnLayer
    from kvplan.core.kvquant import is_quantized
    from kvplan.core.kvspec import attn_bytes_per_token

    dts = r.kv_dtypes
    if dts is None or not is_quantized(r.kv_dtype):
        return ""
    tp = r.args.tensor_parallel_size
    attn = [(i, x) for i, x in enumerate(r.arch.layers) if isinstance(x, AttnLayer)]
    plain = sum(attn_bytes_per_token(x, tp, r.model_dtype) for _, x in attn)
    packed = sum(attn_bytes_per_token(x, tp, dts.for_layer(i, x), dts.rope_dim) for i, x in attn)
    return f" · {plain / packed:.2f}x fewer than {r.model_dtype}" if packed else ""
