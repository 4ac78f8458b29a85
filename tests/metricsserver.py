"""Test helpers for `kvplan diagnose`: vLLM-format /metrics text built from a few numbers,
and a real local HTTP server that answers a sequence of scrapes per path."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# vLLM's request_prompt_tokens / request_generation_tokens buckets (1-2-5 up to max_model_len)
LEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 32768)


@dataclass
class State:
    """One engine at one instant; counters are cumulative, as the server exports them."""

    running: float = 0
    waiting: float = 0
    kv: float = 0.0
    preemptions: float = 0
    prompt_tokens: float = 0
    generation_tokens: float = 0
    finished: dict[str, float] = field(default_factory=lambda: {"stop": 0, "length": 0})
    prompt_lens: dict[float, float] = field(default_factory=dict)  # bucket upper -> count
    prompt_sum: float = 0
    gen_lens: dict[float, float] = field(default_factory=dict)
    gen_sum: float = 0
    queue_time: tuple[float, float] | None = None  # (sum, count)
    blocks: int | None = 5120
    block_size: int = 16
    gpu_memory_utilization: float = 0.9


def _labels(model: str, engine: str | None, extra: str = "") -> str:
    parts = ([f'engine="{engine}"'] if engine is not None else []) + (
        [extra] if extra else []) + [f'model_name="{model}"']
    return "{" + ",".join(parts) + "}"


def _le(bound: str) -> str:
    return f'le="{bound}"'


def _hist(lines, name, model, engine, counts: dict[float, float], total: float, ts):
    cum = 0.0
    for le in LEN_BUCKETS:
        cum += counts.get(le, 0)
        lines.append(f"{name}_bucket{_labels(model, engine, _le(f'{le}.0'))} {cum}{ts}")
    cum += counts.get(float("inf"), 0)
    lines.append(f"{name}_bucket{_labels(model, engine, _le('+Inf'))} {cum}{ts}")
    lines.append(f"{name}_sum{_labels(model, engine)} {total}{ts}")
    lines.append(f"{name}_count{_labels(model, engine)} {cum}{ts}")


def vllm_scrape(engines: dict[str | None, State], *, model: str = "meta-llama/Llama-3.1-8B",
                era: str = "v1", timestamp: float | None = None) -> str:
    """A /metrics answer. era: "v0" (gpu_cache_usage_perc, no engine label, swapped),
    "v1" (kv_cache_usage_perc), "v1-0.10" (both cache-usage names, deprecated one first)."""
    ts = f" {int(timestamp * 1000)}" if timestamp is not None else ""
    out: list[str] = []

    def fam(name, typ, helptext, values):
        out.append(f"# HELP {name} {helptext}")
        out.append(f"# TYPE {name} {typ}")
        for eng, val, extra in values:
            out.append(f"{name}{_labels(model, eng, extra)} {float(val)}{ts}")

    e = engines.items()
    fam("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
        [(k, s.running, "") for k, s in e])
    fam("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
        [(k, s.waiting, "") for k, s in e])
    if era == "v0":
        fam("vllm:num_requests_swapped", "gauge", "Number of requests swapped to CPU.",
            [(k, 0, "") for k, s in e])
    if era in ("v0", "v1-0.10"):
        fam("vllm:gpu_cache_usage_perc", "gauge", "GPU KV-cache usage. 1 means 100 percent "
            "usage.", [(k, s.kv, "") for k, s in e])
    if era != "v0":
        fam("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
            [(k, s.kv, "") for k, s in e])
    fam("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the "
        "engine.", [(k, s.preemptions, "") for k, s in e])
    fam("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
        [(k, s.prompt_tokens, "") for k, s in e])
    fam("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
        [(k, s.generation_tokens, "") for k, s in e])
    fam("vllm:request_success_total", "counter", "Count of successfully processed requests.",
        [(k, v, f'finished_reason="{r}"') for k, s in e for r, v in s.finished.items()])
    for name, attr, total in (("vllm:request_prompt_tokens", "prompt_lens", "prompt_sum"),
                              ("vllm:request_generation_tokens", "gen_lens", "gen_sum")):
        if not any(getattr(s, attr) for _, s in e):
            continue
        out.append(f"# HELP {name} Number of tokens per request.")
        out.append(f"# TYPE {name} histogram")
        for k, s in e:
            _hist(out, name, model, k, getattr(s, attr), getattr(s, total), ts)
    if any(s.queue_time for _, s in e):
        out.append("# TYPE vllm:request_queue_time_seconds histogram")
        for k, s in e:
            qs, qc = s.queue_time or (0, 0)
            out.append(f"vllm:request_queue_time_seconds_bucket{_labels(model, k, _le('+Inf'))} "
                       f"{qc}{ts}")
            out.append(f"vllm:request_queue_time_seconds_sum{_labels(model, k)} {qs}{ts}")
            out.append(f"vllm:request_queue_time_seconds_count{_labels(model, k)} {qc}{ts}")
    out.append("# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig")
    out.append("# TYPE vllm:cache_config_info gauge")
    for k, s in e:
        if s.blocks is None:
            continue
        eng = f'engine="{k}",' if k is not None and era != "v0" else ""
        out.append(f'vllm:cache_config_info{{block_size="{s.block_size}",cache_dtype="auto",'
                   f'enable_prefix_caching="True",{eng}gpu_memory_utilization='
                   f'"{s.gpu_memory_utilization}",'
                   f'num_cpu_blocks="None",num_gpu_blocks="{s.blocks}",'
                   f'num_gpu_blocks_override="None",sliding_window="None"}} 1.0{ts}')
    return "\n".join(out) + "\n"


def quiet_disconnects(handle_error):
    """`socketserver`'s error hook, silent when the client hung up first (a timed-out kvplan
    request): its traceback went to stderr, which a later test's capsys then read."""
    def handle(request, client_address):
        import sys

        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        handle_error(request, client_address)
    return handle


class MetricsServer:
    """http.server on 127.0.0.1, port 0, in a thread. `paths[path]` is a list of bodies: the
    n-th GET of a path gets the n-th body (the last one once they run out)."""

    def __init__(self, paths: dict[str, list[str]], delay: float = 0.0, status: int = 200):
        self.paths = paths
        self.delay = delay
        self.status = status
        self.hits: dict[str, int] = {}
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.server.handle_error = quiet_disconnects(self.server.handle_error)
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                       daemon=True)

    def url(self, path: str = "/metrics") -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def __enter__(self) -> MetricsServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self):
        srv = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                bodies = srv.paths.get(self.path)
                if srv.delay:
                    time.sleep(srv.delay)
                if bodies is None or srv.status != 200:
                    self.send_response(404 if bodies is None else srv.status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                n = srv.hits.get(self.path, 0)
                srv.hits[self.path] = n + 1
                body = bodies[min(n, len(bodies) - 1)].encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler
