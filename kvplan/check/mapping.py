"""Engine arguments as the engine's parser reads them, mapped onto kvplan's `EngineArgs`.

vLLM flags are resolved with the target release's parser data (`Registry`: aliases,
negations, underscores, unique prefixes); SGLang and TGI flags that change memory or
scheduling map onto the same fields (docs/check.md lists them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from kvplan.check.base import Loc, Token
from kvplan.check.command import EngineCommand
from kvplan.errors import BadInput
from kvplan.units import (
    parse_int_list,
    parse_mm_limits,
    parse_mm_sizes,
    parse_names,
    parse_video_io,
    parse_vllm_int,
)

# vLLM canonical flag -> EngineArgs field
VLLM_FIELDS = {
    "--tensor-parallel-size": "tensor_parallel_size",
    "--pipeline-parallel-size": "pipeline_parallel_size",
    "--data-parallel-size": "data_parallel_size",
    "--decode-context-parallel-size": "decode_context_parallel_size",
    "--enable-expert-parallel": "enable_expert_parallel",
    "--max-model-len": "max_model_len",
    "--kv-cache-dtype": "kv_cache_dtype",
    "--gpu-memory-utilization": "gpu_memory_utilization",
    "--kv-cache-memory-bytes": "kv_cache_memory_bytes",
    "--block-size": "block_size",
    "--max-num-seqs": "max_num_seqs",
    "--max-num-batched-tokens": "max_num_batched_tokens",
    "--enforce-eager": "enforce_eager",
    "--enable-lora": "enable_lora", "--max-loras": "max_loras",  # LoRA slots (core/lora.py)
    "--max-lora-rank": "max_lora_rank", "--fully-sharded-loras": "fully_sharded_loras",
    "--lora-target-modules": "lora_target_modules",
    "--specialize-active-lora": "specialize_active_lora",  # graphs per active-adapter count
    "--max-num-active-seqs": "max_num_active_seqs",  # 0.31+: caps the running batch
    "--enable-prompt-embeds": "enable_prompt_embeds",  # V2's inputs_embeds buffer (0.29+)
    "--dcp-q-replicate": "dcp_q_replicate",  # MLA q_b_proj split TP/dcp ways
    "--mm-processor-kwargs": "mm_processor_kwargs",  # the profile's dummy image / video
    # --speculative-config is sized when kvplan can resolve it (sizing_checks._speculative);
    # the rest are sized without, with a warning: a draft model's weights and KV layers, a
    # connector's buffers come out of the KV cache
    "--speculative-config": "speculative_config", "--speculative-model": "speculative_config",
    "--spec-method": "spec_method", "--spec-model": "spec_model",  # 0.24+: merged into
    "--spec-tokens": "spec_tokens",  # the speculative config (sizing_checks._speculative)
    "--kv-cache-dtype-skip-layers": "kv_cache_dtype_skip_layers",
    "--disable-sliding-window": "disable_sliding_window", "--enable-eplb": "enable_eplb",
    "--eplb-config": "eplb_config",  # num_redundant_experts, window_size (`core/eplb.py`)
    "--prefill-context-parallel-size": "prefill_context_parallel_size",
    "--kv-transfer-config": "kv_transfer_config", "--all2all-backend": "all2all_backend",
    "--enable-dbo": "enable_dbo", "--ubatch-size": "ubatch_size",  # microbatching
    "--runner": "runner", "--convert": "convert",  # the pooling runner
    "--task": "task",  # 0.9-0.12: embed / classify / score / reward run the pooling runner
    "--pooler-config": "pooler_config",  # its pooling type (`engines/vllm_pooler.py`)
    "--override-pooler-config": "pooler_config",  # 0.6-0.11's spelling (wins in 0.11)
    "--kv-sharing-fast-prefill": "kv_sharing_fast_prefill",  # Gemma-3n / 4 buffers
    "--nnodes": "nnodes",  # hosts the world spans (custom all-reduce, DeepEP internode)
    "--dbo-prefill-token-threshold": "dbo_prefill_token_threshold",
    "--attention-backend": "attention_backend",  # sized as vLLM's default choice (a warning)
    "--data-parallel-size-local": "data_parallel_size_local",  # this node's DP ranks
    # where this node's ranks start (lws-group-consistent; not sized)
    "--data-parallel-start-rank": "data_parallel_start_rank",
    "--node-rank": "node_rank",  # this host's place among --nnodes (lws-group-consistent)
    "--mamba-cache-dtype": "mamba_cache_dtype", "--mamba-ssm-cache-dtype": "mamba_ssm_cache_dtype",
    # applied to the model's config before sizing (`engines/vllm_overrides.py`); 0.6-0.11's
    # --rope-scaling / --rope-theta are overrides of those two keys
    "--hf-overrides": "hf_overrides", "--rope-scaling": "hf_overrides",
    "--rope-theta": "hf_overrides",
    "--dtype": "dtype",
    "--quantization": "quantization",
    "--allow-deprecated-quantization": "allow_deprecated_quantization",  # 0.30+ (quantcheck)
    "--async-scheduling": "async_scheduling",  # in-flight blocks of sliding-window layers
    # the V2 sampler's fused FlashInfer path (0.28+), whose peak the 0.33 profile holds
    "--return-sampling-mask": "return_sampling_mask", "--logprobs-mode": "logprobs_mode",
    "--enable-prefix-caching": "enable_prefix_caching",
    "--enable-chunked-prefill": "enable_chunked_prefill",
    "--disable-hybrid-kv-cache-manager": "disable_hybrid_kv_cache_manager",
    "--num-gpu-blocks-override": "num_gpu_blocks_override",
    "--disable-custom-all-reduce": "disable_custom_all_reduce",
    "--skip-mm-profiling": "skip_mm_profiling",
    "--language-model-only": "language_model_only",
    "--cpu-offload-gb": "cpu_offload_gb",
    "--performance-mode": "performance_mode",
    "--cudagraph-capture-sizes": "cudagraph_capture_sizes",
    "--max-cudagraph-capture-size": "max_cudagraph_capture_size",
    "--moe-backend": "moe_backend",
    # JSON configs whose `backend` / `moe_backend` keys are those two flags (`_json_aliases`)
    "--attention-config": "attention_config", "--kernel-config": "kernel_config",
    "--mm-encoder-tp-mode": "mm_encoder_tp_mode",
    "--limit-mm-per-prompt": "limit_mm_per_prompt",  # towers limited to 0 are not built
    # the API server's multimodal decoding, carved out of the KV cache (`core/mmdecode.py`)
    "--mm-ipc-gpu-memory-gb": "mm_ipc_gpu_memory_gb",
    "--api-server-count": "api_server_count",
    "--media-io-kwargs": "video_io",
    "--headless": "headless",  # no API servers here: the engine counts one
    # set cudagraph_mode / compilation_mode / capture sizes (`_compilation`)
    "--compilation-config": "compilation_config",
    "--optimization-level": "optimization_level",
}
# SGLang (`python -m sglang.launch_server`, server_args.py) flag -> field
SGLANG_FIELDS = {
    "--model-path": "model", "--model": "model",
    "--tp-size": "tensor_parallel_size", "--tp": "tensor_parallel_size",
    "--tensor-parallel-size": "tensor_parallel_size",
    "--dp-size": "data_parallel_size", "--dp": "data_parallel_size",
    "--data-parallel-size": "data_parallel_size",
    "--pp-size": "pipeline_parallel_size", "--pipeline-parallel-size": "pipeline_parallel_size",
    "--context-length": "max_model_len",
    "--max-running-requests": "max_num_seqs",
    "--mem-fraction-static": "gpu_memory_utilization",
    "--chunked-prefill-size": "max_num_batched_tokens",
    "--kv-cache-dtype": "kv_cache_dtype",
    "--quantization": "quantization",
    "--dtype": "dtype",
    "--page-size": "block_size",
    "--disable-radix-cache": "enable_prefix_caching",
    "--disable-cuda-graph": "enforce_eager",
    "--max-total-tokens": "max_total_tokens",
    "--lora-paths": "lora_adapters", "--enable-lora": "enable_lora",  # not sized
    "--speculative-algorithm": "speculative_algorithm",  # warned: the draft is not sized
}
SGLANG_BOOL = {"--enable-lora", "--disable-radix-cache", "--disable-cuda-graph",
               "--trust-remote-code",
               "--enable-torch-compile", "--enable-dp-attention", "--skip-tokenizer-init",
               "--enable-metrics", "--log-requests", "--enable-mixed-chunk",
               "--disable-overlap-schedule", "--enable-ep-moe", "--is-embedding",
               "--disable-custom-all-reduce", "--enable-p2p-check", "--enable-cache-report",
               "--show-time-cost", "--enable-deepep-moe", "--enable-two-batch-overlap"}
# TGI (`text-generation-launcher`, clap; every flag also reads the upper-case env var)
TGI_FIELDS = {
    "--model-id": "model",
    "--num-shard": "tensor_parallel_size",
    "--max-total-tokens": "max_model_len",
    "--max-batch-size": "max_num_seqs",
    "--cuda-memory-fraction": "gpu_memory_utilization",
    "--max-batch-prefill-tokens": "max_num_batched_tokens",
    "--kv-cache-dtype": "kv_cache_dtype",
    "--quantize": "quantization",
    "--dtype": "dtype",
    "--lora-adapters": "lora_adapters",  # not sized
    "--speculate": "speculative_algorithm",  # warned: medusa / n-gram speculation
}
TGI_BOOL = {"--trust-remote-code", "--disable-custom-kernels", "--json-output",
            "--disable-grammar-support", "--enable-prefill-logprobs", "--disable-usage-stats",
            "--disable-crash-reports"}
# KServe huggingfaceserver's own options (its parser also carries vLLM's)
KSERVE_OWN = {"--model_id", "--model_dir", "--model_name", "--backend", "--task", "--max_length",
              "--disable_lower_case", "--disable_special_tokens", "--trust_remote_code",
              "--tensor_input_names", "--return_token_type_ids", "--return_probabilities",
              "--disable_log_requests", "--model_revision", "--tokenizer_revision",
              "--http_port", "--grpc_port", "--workers", "--max_threads", "--enable_grpc",
              "--predictor_host", "--configure_logging", "--log_config_file",
              "--access_log_format", "--enable_latency_logging", "--enable_docs_url",
              "--max_asyncio_workers", "--return_raw_logits", "--pooling_task",
              "--predictor_protocol", "--predictor_use_ssl", "--predictor_request_timeout_seconds",
              "--predictor_request_retries", "--predictor_health_check"}
# how each field is spelled in each engine (for messages and fixes)
SPELLING = {
    "vllm": {v: k for k, v in VLLM_FIELDS.items()},
    "sglang": {"tensor_parallel_size": "--tp-size", "data_parallel_size": "--dp-size",
               "pipeline_parallel_size": "--pp-size", "max_model_len": "--context-length",
               "max_num_seqs": "--max-running-requests",
               "gpu_memory_utilization": "--mem-fraction-static",
               "max_num_batched_tokens": "--chunked-prefill-size",
               "kv_cache_dtype": "--kv-cache-dtype"},
    "tgi": {"tensor_parallel_size": "--num-shard", "max_model_len": "--max-total-tokens",
            "max_num_seqs": "--max-batch-size", "gpu_memory_utilization": "--cuda-memory-fraction",
            "max_num_batched_tokens": "--max-batch-prefill-tokens",
            "kv_cache_dtype": "--kv-cache-dtype"},
}
_KV_DTYPES = {"fp8_e4m3fn": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2",
              "fp8": "fp8", "bf16": "bfloat16", "bfloat16": "bfloat16", "auto": "auto",
              "float16": "float16", "fp16": "float16",
              # SGLang's FP4 cache (`MHATokenToKVPoolFP4`): packed e2m1 values + one byte of
              # scale per 16, the bytes of vLLM's nvfp4 page
              "fp4_e2m1": "nvfp4"}


def spelled(engine: str, fld: str) -> str:
    return SPELLING.get(engine, {}).get(fld) or "--" + fld.replace("_", "-")


@dataclass
class FlagUse:
    """One option as written, and what the engine's parser makes of it."""

    tok: Token
    key: str  # the option as written, without '=value'
    value: str | None = None
    value_tok: Token | None = None
    name: str | None = None  # canonical option (None: unknown to the parser)
    negated: bool = False
    abbreviated: bool = False  # accepted only as a unique prefix of `name`

    @property
    def loc(self) -> Loc:
        return self.tok.loc


@dataclass
class Parsed:
    """An engine command read as its parser reads it, mapped to sizing inputs."""

    cmd: EngineCommand
    flags: list[FlagUse] = field(default_factory=list)
    extra: list[Token] = field(default_factory=list)  # positionals the parser rejects
    model: str | None = None
    model_loc: Loc | None = None
    values: dict[str, Any] = field(default_factory=dict)  # EngineArgs field -> value
    set_by: dict[str, FlagUse] = field(default_factory=dict)
    errors: list[tuple[FlagUse, str]] = field(default_factory=list)  # values the parser rejects
    repeated: list[tuple[FlagUse, FlagUse]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    config_file: FlagUse | None = None

    @property
    def engine(self) -> str:
        return self.cmd.engine

    def env_value(self, name: str) -> str | None:
        """The value of a variable in the command's environment (None: unset, or from a
        secret or config map)."""
        ev = self.cmd.env.get(name)
        return ev.value if ev is not None else None

    def loc_of(self, fld: str) -> Loc:
        """Where the flag that set `fld` is written (the command when it is not set)."""
        f = self.set_by.get(fld)
        return f.loc if f else self.cmd.loc


def _spelling(key: str) -> str:
    return "--" + key[2:].replace("_", "-") if key.startswith("--") else key


_EXACT: dict[str, set[str]] = {}


def _exact(reg: Any) -> set[str]:
    """Every full spelling the release's parser registers (names, aliases, negations)."""
    if reg.release not in _EXACT:
        _EXACT[reg.release] = {x for name, info in reg.flags.items()
                           for x in (name, *info.get("aliases", []), *info.get("negations", []))}
    return _EXACT[reg.release]


def _is_number(s: str) -> bool:
    return bool(re.fullmatch(r"-?\d+(\.\d+)?([eE][-+]?\d+)?", s))


def _is_flag(s: str) -> bool:
    return s.startswith("-") and len(s) > 1 and not _is_number(s)


def _bool(text: str | None) -> bool | None:
    if text is None:
        return True
    t = text.strip().lower()
    if t in ("1", "true", "yes", "on"):
        return True
    if t in ("0", "false", "no", "off"):
        return False
    return None


def split_flags(cmd: EngineCommand, reg: Any) -> tuple[list[FlagUse], list[Token]]:
    """Options and positionals, consuming values as the parser would (`reg`: a vLLM
    `Registry`, or None for SGLang/TGI, where a following non-option word is the value)."""
    toks = cmd.args
    flags: list[FlagUse] = []
    pos: list[Token] = []
    i = 0
    while i < len(toks):
        t = toks[i]
        s = t.text
        i += 1
        if s == "--":
            pos.extend(toks[i:])
            break
        if not _is_flag(s):
            pos.append(t)
            continue
        key, eq, val = s.partition("=")
        f = FlagUse(t, key, val if eq else None)
        nxt = toks[i] if i < len(toks) else None
        takes, multiple, optional = True, False, False
        if reg is not None and cmd.form == "kserve" and key in KSERVE_OWN:
            f.name = key
        elif reg is not None:
            o = re.fullmatch(r"-O=?(\d*)", s)
            if o:  # -O3 / -O=3 / -O 3 (docs/vllm-flags.md)
                modern = "--optimization-level" in reg.flags
                f.name = "--optimization-level" if modern else "--compilation-config"
                f.value = o.group(1) or None
                takes = not f.value and nxt is not None and nxt.text.isdigit()
            else:
                hit = reg.lookup(key)
                if hit is not None:
                    f.name, f.negated = hit.name, hit.negated
                    f.abbreviated = _spelling(key) not in _exact(reg) and "." not in key
                    info = reg.flags[hit.name]
                    takes = bool(info.get("takes_value")) and not hit.negated
                    multiple = bool(info.get("multiple"))
                    optional = bool(info.get("optional_value"))
                else:
                    takes = nxt is not None and not _is_flag(nxt.text)
        else:
            norm = "--" + key.lstrip("-").replace("_", "-") if key.startswith("--") else key
            f.name = norm
            bools = SGLANG_BOOL if cmd.engine == "sglang" else TGI_BOOL
            takes = norm not in bools and nxt is not None and not _is_flag(nxt.text)
        if f.value is None and (takes or optional) and nxt is not None:
            if multiple:
                vals = []
                while i < len(toks) and not _is_flag(toks[i].text):
                    vals.append(toks[i])
                    i += 1
                if vals:
                    f.value, f.value_tok = " ".join(v.text for v in vals), vals[0]
            elif not _is_flag(nxt.text) or (takes and _is_number(nxt.text)):
                f.value, f.value_tok = nxt.text, nxt
                i += 1
        flags.append(f)
    return flags, pos


def _convert(fld: str, text: str, typ: str | None, what: str) -> Any:
    """A value as the parser converts it (BadInput when the parser would refuse it)."""
    auto = text.strip().lower() in ("-1", "auto")
    if typ == "human_readable_int_or_auto" and auto:
        return -1
    if fld == "max_model_len" and auto and typ == "human_readable_int":
        raise BadInput(f"{what} {text} needs vLLM 0.14 or newer")
    if typ in ("human_readable_int", "human_readable_int_or_auto"):
        return parse_vllm_int(text, what=what)
    if typ == "int":
        try:
            return int(text)
        except ValueError:
            raise BadInput(f"{what} {text!r} is not an integer") from None
    if typ == "float":
        try:
            return float(text)
        except ValueError:
            raise BadInput(f"{what} {text!r} is not a number") from None
    return text


INT_FIELDS = {"tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
              "data_parallel_size_local", "data_parallel_start_rank",
              "decode_context_parallel_size",
              "block_size", "max_num_seqs", "num_gpu_blocks_override", "max_total_tokens",
              "max_loras", "max_lora_rank", "max_num_active_seqs", "ubatch_size", "nnodes",
              "node_rank",
              "dbo_prefill_token_threshold"}
HR_FIELDS = {"max_model_len", "max_num_batched_tokens"}
BOOL_FIELDS = {"enable_expert_parallel", "enforce_eager", "enable_prefix_caching",
               "enable_chunked_prefill", "disable_hybrid_kv_cache_manager",
               "disable_custom_all_reduce", "skip_mm_profiling", "language_model_only",
               "headless", "enable_lora", "disable_sliding_window", "enable_eplb",
               "fully_sharded_loras", "allow_deprecated_quantization", "async_scheduling",
               "return_sampling_mask", "specialize_active_lora", "enable_prompt_embeds",
               "dcp_q_replicate", "enable_dbo", "kv_sharing_fast_prefill"}


def parse(cmd: EngineCommand, reg: Any) -> Parsed:
    """Read `cmd` as its engine would: flags, model, sizing values, rejected values."""
    p = Parsed(cmd)
    p.flags, pos = split_flags(cmd, reg)
    if reg is not None:
        p.flags = _merge_dotted(p.flags)
    seen: dict[str, FlagUse] = {}
    for f in p.flags:
        if f.name is None:
            continue
        info = reg.flags.get(f.name, {}) if reg is not None else {}
        if f.name in seen and not (info.get("multiple") or info.get("repeatable")):
            p.repeated.append((seen[f.name], f))
        seen[f.name] = f
        if reg is not None and f.name == "--config":
            p.config_file = f
        errors = len(p.errors)
        _validate_value(p, f, info)
        if len(p.errors) == errors:  # a value the parser rejects does not reach the engine
            _map(p, f, info, reg)
    _json_aliases(p)
    _model(p, pos)
    if cmd.engine == "tgi":
        _tgi_env(p)
    return p


def _merge_dotted(flags: list[FlagUse]) -> list[FlagUse]:
    """vLLM's `FlexibleArgumentParser` (0.33 `utils/argparse_utils.py`): `--json-flag.key.sub
    VALUE` builds `{"key": {"sub": VALUE}}` (VALUE as JSON, else a human-readable integer,
    else the string; `key+` a comma list), and every dotted use of one flag merges into one
    object, which vLLM appends after the other arguments: it replaces a plain `--json-flag
    '{...}'` wherever that stands."""
    import json

    from kvplan.units import parse_vllm_int

    def update(into: dict, new: dict) -> None:
        for k, v in new.items():
            if isinstance(v, dict) and isinstance(into.get(k), dict):
                update(into[k], v)
            elif isinstance(v, list) and isinstance(into.get(k), list):
                into[k] += v
            else:
                into[k] = v

    merged: dict[str, tuple[FlagUse, dict]] = {}
    out, dotted = [], []
    for f in flags:
        _, dot, rest = f.key.partition(".")
        if not (dot and rest and f.name and f.key.startswith("--")):
            out.append(f)
            continue
        raw = f.value or ""
        value: Any
        if rest.endswith("+"):
            rest, value = rest[:-1], raw.split(",")
        else:
            try:
                value = json.loads(raw)
            except ValueError:
                try:
                    value = parse_vllm_int(raw, what=f.key)
                except BadInput:
                    value = raw
        for k in reversed(rest.split(".")):
            value = {k: value}
        if f.name in merged:
            update(merged[f.name][1], value)
        else:
            merged[f.name] = (f, value)
            dotted.append(f)
    for f, obj in merged.values():
        f.value = json.dumps(obj)
    return out + dotted  # appended after every other argument, so they win over a plain use


JSON_ALIASES = {  # config flag -> (its key, the flag that sets the same, both is an error)
    "attention_config": ("backend", "attention_backend", True),  # 0.20+ `create_engine_config`
    "kernel_config": ("moe_backend", "moe_backend", False),  # --moe-backend wins
}


def _json_aliases(p: Parsed) -> None:
    """`--attention-config '{"backend": X}'` is `--attention-backend X` and
    `--kernel-config '{"moe_backend": X}'` is `--moe-backend X` (0.33 `create_engine_config`:
    both attention spellings at once are refused)."""
    import json

    for fld, (key, target, exclusive) in JSON_ALIASES.items():
        f = p.set_by.pop(fld, None)
        raw = p.values.pop(fld, None)
        if f is None:
            continue
        try:
            cfg = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            cfg = None
        if not isinstance(cfg, dict):
            p.errors.append((f, f"{f.key} must be a JSON object"))
            continue
        if cfg.get(key) is None:
            continue
        if target in p.values and (exclusive or p.values[target] != "auto"):
            if exclusive:
                p.errors.append((f, f"{p.set_by[target].key} and {f.key}'s {key} are "
                                    "mutually exclusive"))
            continue
        p.values[target], p.set_by[target] = str(cfg[key]), f


def _validate_value(p: Parsed, f: FlagUse, info: dict) -> None:
    typ, what = info.get("type"), f.key
    if f.value is None:
        if info.get("takes_value") and not f.negated:
            p.errors.append((f, f"{f.key} expects a value"))
        return
    if info.get("takes_value") is False and not info.get("optional_value"):
        # argparse: a flag with nargs=0 (store_true, BooleanOptionalAction) given `=VALUE`
        off = (info.get("negations") or [None])[0]
        p.errors.append((f, f"argument {f.key}: ignored explicit argument {f.value!r} (a "
                            f"switch: write {f.key}" + (f", or {off} to turn it off)" if off
                                                        else ", or leave it out)")))
        return
    choices = info.get("choices")
    if f.name == "--quantization" and not choices:  # 0.9+: `_verify_quantization`'s names
        choices = [c for c in info.get("known_values") or () if c != "None"]
        if choices and f.value not in choices and f.value != "None":
            p.errors.append((f, f"Unknown quantization method: {f.value} (vLLM's names: "
                                f"{', '.join(choices)})"))
            return
        choices = None
    if choices and f.value not in choices:
        p.errors.append((f, f"{f.key} {f.value!r} is not one of: {', '.join(choices)}"))
        return
    try:
        if typ in ("int", "float", "human_readable_int", "human_readable_int_or_auto"):
            for v in (f.value.split() if info.get("multiple") else [f.value]):  # nargs="+"
                _convert("", v, typ, what)
        elif typ == "bool_string" and _bool(f.value) is None:
            raise BadInput(f"{what} {f.value!r} is not true or false")
    except BadInput as e:
        p.errors.append((f, e.message))


def _map(p: Parsed, f: FlagUse, info: dict, reg: Any) -> None:
    engine = p.engine
    table = VLLM_FIELDS if engine == "vllm" else SGLANG_FIELDS if engine == "sglang" \
        else TGI_FIELDS
    fld = table.get(f.name or "")
    if engine == "vllm" and f.name in ("--model", "--model_id"):
        fld = "model"
    if fld is None:
        return
    if fld == "model":
        if f.value is not None:
            p.model, p.model_loc = f.value, (f.value_tok or f.tok).loc
            p.set_by["model"] = f
        return
    try:
        if fld in BOOL_FIELDS:
            v = _bool(f.value)
            if v is None:
                raise BadInput(f"{f.key} {f.value!r} is not true or false")
            v = v != f.negated
            if f.name in ("--disable-radix-cache",):
                v = not v  # SGLang: disable-radix-cache = prefix caching off
            value: Any = v
        elif f.value is None:
            return
        elif fld == "cudagraph_capture_sizes":
            value = parse_int_list(f.value, what=f.key)
        elif fld in ("kv_cache_dtype_skip_layers", "lora_target_modules"):  # nargs="+"
            value = parse_names(f.value)
        elif fld == "limit_mm_per_prompt":
            value = parse_mm_limits(f.value, what=f.key)
            p.values["mm_dummy_sizes"] = parse_mm_sizes(f.value) or None
        elif fld == "video_io":
            value = parse_video_io(f.value, what=f.key)
        elif fld == "hf_overrides":
            from kvplan.engines.vllm_overrides import parse_hf_overrides

            if f.name == "--rope-theta":
                new = {"rope_theta": _convert("", f.value, "float", f.key)}
            elif f.name == "--rope-scaling":
                new = {"rope_scaling": parse_hf_overrides(f.value, what=f.key)}
            else:
                new = parse_hf_overrides(f.value, what=f.key)
            value = {**(p.values.get("hf_overrides") or {}), **new}
        elif fld in ("compilation_config", "optimization_level"):
            for name, v in _compilation(fld, f, reg.release if reg else None,
                                        p.notes).items():
                p.values[name], p.set_by[name] = v, f
            return
        elif fld == "speculative_config" and engine == "vllm" and reg is not None \
                and str(f.value).lstrip().startswith("{"):
            from kvplan.engines.vllm_config_keys import check_keys, normalise_speculative
            from kvplan.engines.vllm_spec import parse_speculative_config

            raw = normalise_speculative(parse_speculative_config(f.value, what=f.key),
                                        reg.release)
            check_keys("speculative", raw, reg.release, f.key)
            value = f.value
        elif fld == "pooler_config" and engine == "vllm":
            from kvplan.engines.vllm_pooler import read

            prior = p.set_by.get(fld)
            if prior is not None and prior.name == "--override-pooler-config":
                return  # 0.11 `ModelConfig`: the deprecated override replaces --pooler-config
            read(f.value, reg.release if reg is not None else None, what=f.key)
            value = f.value
        elif fld == "mm_processor_kwargs":
            from kvplan.units import parse_json_object

            value = parse_json_object(f.value, what=f.key,
                                      hint='e.g. \'{"max_pixels": 1003520}\'')
        elif fld == "eplb_config":
            from kvplan.core.eplb import parse_eplb_config

            for name, v in parse_eplb_config(f.value, what=f.key).items():
                p.values[name], p.set_by[name] = v, f
            return
        elif fld == "kv_cache_dtype" and engine != "vllm":
            value = _KV_DTYPES.get(f.value.lower(), f.value)
        elif fld == "quantization" and engine == "tgi":
            q = f.value.lower()
            value = q if q in ("fp8", "bitsandbytes") else None
            if value is None:
                return  # awq/gptq/marlin...: the checkpoint carries its quantization
        else:
            typ = info.get("type") if engine == "vllm" else (
                "int" if fld in INT_FIELDS | HR_FIELDS else
                "float" if fld == "gpu_memory_utilization" else None)
            value = _convert(fld, f.value, typ, f.key)
    except BadInput as e:
        if not any(x is f for x, _ in p.errors):
            p.errors.append((f, e.message))
        return
    p.values[fld] = value
    p.set_by[fld] = f


def _compilation(fld: str, f: FlagUse, version: str | None,
                 notes: list[str]) -> dict[str, Any]:
    """The `EngineArgs` fields a `--compilation-config` or `--optimization-level` sets (its
    keys checked against `version`'s CompilationConfig)."""
    from kvplan.engines.vllm_compile import parse_compilation_config

    if fld == "compilation_config":
        return parse_compilation_config(f.value or "", what=f.key, version=version,
                                        notes=notes)
    from kvplan.engines.vllm_compile import optimization_level

    return optimization_level(f.value or "", f.key, version)


def _model(p: Parsed, pos: list[Token]) -> None:
    """`vllm serve MODEL`: the first positional is the model (it wins over `--model`); any
    other positional is rejected by vLLM's parser."""
    if p.cmd.form in ("vllm-serve", "image") and pos:
        p.model, p.model_loc = pos[0].text, pos[0].loc
        pos = pos[1:]
    p.extra = list(pos) if p.engine == "vllm" else []


def _tgi_env(p: Parsed) -> None:
    """TGI reads every option from its upper-case environment variable too."""
    for flag, fld in TGI_FIELDS.items():
        var = flag[2:].upper().replace("-", "_")
        ev = p.cmd.env.get(var)
        if ev is None or ev.value is None or fld in p.set_by or (fld == "model" and p.model):
            continue
        f = FlagUse(Token(ev.value, ev.loc), flag, ev.value, Token(ev.value, ev.loc), flag)
        _map(p, f, {}, None)
