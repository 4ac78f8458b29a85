"""Prometheus text -> per-engine snapshots under one set of field names (vLLM V0/V1, SGLang).

Parsing is prometheus_client's text parser and nothing else. Sample names are looked up in the
tables below, preferred name first: a renamed metric (`gpu_cache_usage_perc` ->
`kv_cache_usage_perc`, `time_per_output_token_seconds` -> `inter_token_latency_seconds`)
feeds the same field, and the newer name wins when a server exports both. docs/diagnose.md
lists the names per version.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kvplan.errors import BadInput

GAUGES: dict[str, tuple[str, ...]] = {
    "running": ("vllm:num_requests_running", "sglang:num_running_reqs"),
    "waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs"),
    "swapped": ("vllm:num_requests_swapped",),
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
                       "sglang:token_usage"),
    "kv_pool_tokens": ("sglang:max_total_num_tokens",),
    "max_num_seqs": ("sglang:max_running_requests",),
    "prompt_tps_gauge": ("vllm:avg_prompt_throughput_toks_per_s",),
    "generation_tps_gauge": ("vllm:avg_generation_throughput_toks_per_s",
                             "sglang:gen_throughput"),
}
COUNTERS: dict[str, tuple[str, ...]] = {
    "preemptions": ("vllm:num_preemptions_total", "sglang:num_retracted_requests_total"),
    "prompt_tokens": ("vllm:prompt_tokens_total", "sglang:prompt_tokens_total"),
    "generation_tokens": ("vllm:generation_tokens_total", "sglang:generation_tokens_total"),
    "requests_finished": ("vllm:request_success_total", "sglang:num_requests_total"),
    "prefix_cache_queries": ("vllm:prefix_cache_queries_total",
                             "vllm:gpu_prefix_cache_queries_total"),
    "prefix_cache_hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
}
HISTOGRAMS: dict[str, tuple[str, ...]] = {
    "ttft": ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"),
    "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds",
            "sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
    "e2e": ("vllm:e2e_request_latency_seconds", "sglang:e2e_request_latency_seconds"),
    "queue_time": ("vllm:request_queue_time_seconds", "sglang:queue_time_seconds"),
    "prompt_len": ("vllm:request_prompt_tokens", "sglang:prompt_tokens_histogram"),
    "generation_len": ("vllm:request_generation_tokens", "sglang:generation_tokens_histogram"),
    "iteration_tokens": ("vllm:iteration_tokens_total",),
}
CACHE_CONFIG = "vllm:cache_config_info"
ENGINE_LABELS = ("engine", "dp_rank")  # vLLM V1 data parallel; SGLang DP attention
RANK_LABELS = ("tp_rank", "pp_rank", "moe_ep_rank", "attn_tp_rank")  # SGLang: rank 0 only
NOT_CONFIG = ("engine", "model_name")


def _lookup() -> dict[str, tuple[str, str, int, str]]:
    """Sample name -> (kind, field, preference rank, metric name)."""
    t: dict[str, tuple[str, str, int, str]] = {}
    for kind, table in (("gauge", GAUGES), ("counter", COUNTERS)):
        for fld, names in table.items():
            for rank, n in enumerate(names):
                t[n] = (kind, fld, rank, n)
    for fld, names in HISTOGRAMS.items():
        for rank, n in enumerate(names):
            for suffix in ("_bucket", "_sum", "_count"):
                t[n + suffix] = ("hist" + suffix, fld, rank, n)
    return t


LOOKUP = _lookup()


@dataclass
class Hist:
    """A cumulative Prometheus histogram: upper bound -> count, plus _sum and _count."""

    buckets: dict[float, float] = field(default_factory=dict)
    sum: float = 0.0
    count: float = 0.0

    def bins(self) -> list[tuple[float, float, float]]:
        """(lower, upper, observations) per bucket, upper bounds ascending."""
        out, lo, below = [], 0.0, 0.0
        for le in sorted(self.buckets):
            c = self.buckets[le]
            out.append((lo, le, max(c - below, 0.0)))
            lo, below = le, c
        return out

    def minus(self, old: Hist) -> Hist:
        """Observations since `old` (the newer histogram alone after a counter reset)."""
        if self.count < old.count or any(self.buckets.get(k, 0.0) < v
                                         for k, v in old.buckets.items()):
            return self
        return Hist({k: v - old.buckets.get(k, 0.0) for k, v in self.buckets.items()},
                    self.sum - old.sum, self.count - old.count)

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count > 0 else None


@dataclass
class Engine:
    """One engine's metrics in one scrape (a DP server has one per `engine` label)."""

    gauges: dict[str, float] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)
    hists: dict[str, Hist] = field(default_factory=dict)
    cache_config: dict[str, str] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)  # field -> metric name it came from
    exported: set[str] = field(default_factory=set)  # every metric name read, winners or not

    def config_int(self, key: str) -> int | None:
        try:
            return int(float(self.cache_config[key]))
        except (KeyError, ValueError, OverflowError):  # absent, not a number, inf
            return None


@dataclass
class Scrape:
    """One /metrics answer: engines by key ("0", "1", ...), its time and where it came from."""

    engines: dict[str, Engine]
    source: str
    server: str = "vllm"  # or "sglang"
    model_names: list[str] = field(default_factory=list)
    timestamp: float | None = None  # from the samples' own timestamps, if they carry any
    t: float = 0.0  # seconds, set by the reader (timestamps, receive time or file order)
    unix_time: float | None = None
    declared: bool = False  # vLLM/SGLang families declared (HELP/TYPE) but no samples yet


def _families(text: str, source: str) -> list:
    from prometheus_client.parser import text_string_to_metric_families

    try:
        return list(text_string_to_metric_families(text))
    except Exception as e:  # the parser raises ValueError and friends on bad lines
        msg = " ".join(str(e).split())[:160]
        raise BadInput(f"cannot read {source}: not Prometheus text format ({msg})",
                       hint="pass a /metrics URL or a saved scrape") from None


def _chunks(families: list) -> list[list]:
    """Split concatenated scrapes: a sample name+labels seen again starts the next scrape."""
    chunks: list[list] = [[]]
    seen: set = set()
    for fam in families:
        for s in fam.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            if key in seen:
                chunks.append([])
                seen = set()
            seen.add(key)
            chunks[-1].append(s)
    return [c for c in chunks if c] or [[]]


def parse(text: str, source: str = "<text>") -> list[Scrape]:
    """All scrapes in `text` (usually one), every field under its canonical name."""
    families = _families(text, source)
    out = [_scrape(c, source) for c in _chunks(families)]
    if not any(has_engine_metrics(s) for s in out):
        out = out[-1:]
        ours = [f for f in families if f.name.startswith(("vllm:", "sglang:"))]
        # declared only: HELP/TYPE lines without one sample (a V0 server before its first
        # request); samples of other families without the gauges are a partial scrape
        out[0].declared = bool(ours) and not any(f.samples for f in ours)
    return out


def _scrape(samples: list, source: str) -> Scrape:
    models = sorted({s.labels["model_name"] for s in samples if "model_name" in s.labels})
    raw: dict[str, dict] = {}
    stamps = [s.timestamp for s in samples if s.timestamp is not None]
    server = "vllm"
    for s in samples:
        if any(s.labels.get(r, "0") != "0" for r in RANK_LABELS):
            continue
        eng = next((s.labels[k] for k in ENGINE_LABELS if k in s.labels), "")
        if len(models) > 1 and "model_name" in s.labels:  # several models: keep them apart
            eng = f"{s.labels['model_name']}/{eng or '0'}"
        hit = LOOKUP.get(s.name)
        if hit is None and s.name != CACHE_CONFIG:
            continue
        slot = raw.setdefault(eng, {"vals": {}, "config": {}, "seen": set()})
        if hit is None:
            slot["config"].update({k: v for k, v in s.labels.items() if k not in NOT_CONFIG})
            continue
        kind, fld, rank, name = hit
        if name.startswith("sglang:"):
            server = "sglang"
        slot["seen"].add(name)
        _add(slot["vals"], kind, fld, rank, name, s, source)
    engines = {k: _resolve(v) for k, v in raw.items()}
    labelled = [k for k in engines if k]
    if labelled and "" in engines:  # unlabelled series (V0-style info) apply to every engine
        generic = engines.pop("")
        for k in labelled:
            _fold(engines[k], generic)
    elif "" in engines:
        engines["0"] = engines.pop("")
    engines = {k: engines[k] for k in sorted(engines, key=_engine_order)}
    return Scrape(engines=engines, source=source, server=server, model_names=models,
                  timestamp=max(stamps) if stamps else None)


def _engine_order(k: str):
    return (0, int(k), "") if k.isdigit() else (1, 0, k)


def _series(s) -> str:
    labels = ",".join(f'{k}="{v}"' for k, v in s.labels.items())
    return f"{s.name}{{{labels}}}" if labels else s.name


def _plausible(fld: str, v: float, s, source: str) -> None:
    """Gauges and counters vLLM/SGLang can export: finite, not negative, KV usage <= 1
    (`BlockPool.get_usage` is 1 - free / total; the HELP text: "1 means 100 percent")."""
    if not math.isfinite(v):
        what = "not a finite number"
    elif v < 0:
        what = "negative, which a count, a rate or a share cannot be"
    elif fld == "kv_cache_usage" and v > 1:
        what = "above 1, and KV cache usage is a fraction (1 = 100 %)"
    else:
        return
    raise BadInput(f"{_series(s)} is {v:g} in {source}: {what}",
                   hint="an exporter that rescales or relabels the series? point kvplan at "
                        "the server's own /metrics")


def _add(vals: dict, kind: str, fld: str, rank: int, name: str, s, source: str) -> None:
    try:
        v = float(s.value)
    except OverflowError:  # an integer beyond any float (prometheus_client keeps it exact)
        return
    if kind in ("gauge", "counter"):
        _plausible(fld, v, s, source)
    if kind == "hist_bucket":
        try:
            le = float(s.labels.get("le", "nan"))
        except ValueError:
            return
        if math.isnan(le) or not math.isfinite(v):
            return
        h = vals.setdefault(("hist", fld, rank), (name, Hist()))[1]
        h.buckets[le] = h.buckets.get(le, 0.0) + v
        return
    if not math.isfinite(v):
        return
    if kind in ("hist_sum", "hist_count"):
        h = vals.setdefault(("hist", fld, rank), (name, Hist()))[1]
        if kind == "hist_sum":
            h.sum += v
        else:
            h.count += v
    elif kind == "counter":  # summed over extra labels, e.g. finished_reason
        old = vals.get((kind, fld, rank), (name, 0.0))[1]
        vals[(kind, fld, rank)] = (name, old + v)
    else:  # gauges: the largest of duplicate series
        old = vals.get((kind, fld, rank), (name, -math.inf))[1]
        vals[(kind, fld, rank)] = (name, max(old, v))


def _resolve(slot: dict) -> Engine:
    e = Engine(cache_config=slot["config"], exported=slot["seen"])
    best: dict[tuple[str, str], int] = {}
    for (kind, fld, rank), (name, value) in slot["vals"].items():
        if best.get((kind, fld), 99) <= rank:
            continue
        best[(kind, fld)] = rank
        if kind == "hist":
            if value.count == 0 and value.buckets:
                value.count = value.buckets.get(math.inf, max(value.buckets.values()))
            e.hists[fld] = value
        else:
            (e.counters if kind == "counter" else e.gauges)[fld] = value
        e.names[fld] = name
    return e


def _fold(e: Engine, generic: Engine) -> None:
    for src, dst in ((generic.gauges, e.gauges), (generic.counters, e.counters),
                     (generic.hists, e.hists), (generic.cache_config, e.cache_config)):
        for k, v in src.items():
            dst.setdefault(k, v)
    for k, v in generic.names.items():
        e.names.setdefault(k, v)
    e.exported |= generic.exported


def has_engine_metrics(s: Scrape) -> bool:
    """True when the scrape holds at least one vLLM/SGLang field kvplan reads."""
    return any(e.gauges or e.counters or e.hists for e in s.engines.values())


SCHEDULER_GAUGES = ("running", "waiting", "kv_cache_usage")


def has_scheduler_gauges(s: Scrape) -> bool:
    """True when the scrape holds the scheduler's gauges every engine exports from start-up
    (requests running / waiting, KV cache usage): without them a verdict has no evidence."""
    return any(k in e.gauges for e in s.engines.values() for k in SCHEDULER_GAUGES)
