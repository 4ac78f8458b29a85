"""Human output of `kvplan size`: a memory waterfall and the KV figures vLLM would log."""

from __future__ import annotations

from kvplan.core.sizing import SizeResult
from kvplan.units import GiB, fmt_bytes, fmt_int, fmt_tokens

BAR = 36


def _bar(n: int, total: int, style: str) -> str:
    w = 0 if total <= 0 or n <= 0 else max(1, round(BAR * n / total))
    return f"[{style}]{'█' * w}[/]"


def render_size(r: SizeResult) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console(highlight=False)
    a, b = r.args, r.budget
    par = f"TP{a.tensor_parallel_size} PP{a.pipeline_parallel_size}"
    if a.data_parallel_size > 1:
        par += f" DP{a.data_parallel_size}"
    con.print(f"[bold]{r.model}[/] on [bold]{r.gpu}[/] · vLLM {r.version.text} · {par}")
    layers = sum(1 for x in r.arch.layers if x is not None)
    con.print(f"[dim]{r.arch.family_label} · {layers}/{r.arch.num_layers} layers keep a cache · "
              f"{r.model_dtype} weights · {r.kv_dtype} KV · block {r.block_size} "
              f"({r.block_size_reason})[/]")
    con.print()

    t = Table(title=f"Memory per GPU ({b.total / GiB:.2f} GiB total, "
                    f"gpu_memory_utilization {b.utilization:.2f})",
              title_justify="left", show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold", no_wrap=True)
    t.add_column(justify="right", no_wrap=True)
    t.add_column(no_wrap=True)
    kv = max(b.available_kv, 0)
    rows = [
        ("weights", b.weights, "blue", "estimated" if r.weights_estimated else "checkpoint"),
        ("activation peak", b.activation, "magenta", "profile run, empirical"),
        ("non-torch", b.non_torch, "magenta", "NCCL/cuBLAS, empirical"),
        ("CUDA graphs", b.cudagraph, "magenta",
         "empirical" if b.cudagraph else "not subtracted in this version / eager"),
        ("KV cache pool", kv, "green", "--kv-cache-memory-bytes" if b.kv_override else ""),
        ("headroom", b.headroom, "dim", f"1 - {b.utilization:.2f} left unused by vLLM"),
    ]
    for label, n, style, note in rows:
        t.add_row(label, fmt_bytes(n), f"{_bar(n, b.total, style)} [dim]{note}[/]")
    con.print(t)
    if b.available_kv < 0:
        con.print(f"[red]over budget by {fmt_bytes(-b.available_kv)}[/]")
    con.print()

    k = Table(title="KV cache", title_justify="left", show_header=False, box=None,
              pad_edge=False)
    k.add_column(style="bold", no_wrap=True)
    k.add_column()
    k.add_row("bytes per token", f"{fmt_bytes(r.kv_bytes_per_token_per_gpu)} per GPU · "
              f"{fmt_bytes(r.kv_bytes_per_token_replica)} per replica")
    if r.state_bytes_per_request_per_gpu:
        k.add_row("state per request", f"{fmt_bytes(r.state_bytes_per_request_per_gpu)} per GPU "
                  "(Mamba/linear-attention layers, fixed)")
    k.add_row("blocks", f"{fmt_int(r.num_gpu_blocks)} × {fmt_bytes(r.bytes_per_block)} "
              f"({r.block_size} tokens, {len(r.groups)} group{'s' if len(r.groups) != 1 else ''})"
              " · 1 null block")
    k.add_row("GPU KV cache size", f"{fmt_int(r.kv_cache_tokens)} tokens [dim](as vLLM logs it)[/]")
    k.add_row("max concurrency", f"{r.max_concurrency:.2f}x at {fmt_int(r.max_model_len)} tokens "
              f"[dim]({r.blocks_per_request} blocks/request)[/]")
    k.add_row("max_model_len", f"{fmt_int(r.max_model_len)} [dim]({r.max_model_len_source})[/]")
    k.add_row("scheduler", f"max_num_seqs {r.max_num_seqs} · max_num_batched_tokens "
              f"{fmt_int(r.max_num_batched_tokens)}")
    if a.data_parallel_size > 1:
        k.add_row("cluster", f"{a.data_parallel_size} engines × {fmt_int(r.kv_cache_tokens)} "
                  "tokens (each DP rank has its own pool)")
    con.print(k)
    con.print()

    if r.concurrency_at:
        c = Table(title="Full-length sequences that fit at once",
                  title_justify="left", box=None, pad_edge=False)
        c.add_column("context", style="bold")
        for n in r.concurrency_at:
            c.add_column(fmt_tokens(n), justify="right")
        c.add_row("sequences", *[fmt_int(v) for v in r.concurrency_at.values()])
        con.print(c)
        con.print()

    if r.fits:
        full = r.concurrency_at.get(r.max_model_len, 0)
        con.print(f"[green]fits[/]: vLLM would start; {fmt_int(full)} sequences of "
                  f"{fmt_int(r.max_model_len)} tokens fit, max_num_seqs is "
                  f"{fmt_int(r.max_num_seqs)}")
    else:
        con.print(f"[red bold]does not fit[/]: {r.failure}")
    for note in r.notes:
        con.print(f"[yellow]note[/]: {note}")
