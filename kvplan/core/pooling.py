"""What a pooling model's pooling type does to chunked prefill, prefix caching and the token
budget, release by release (read in the 0.6.4-0.33 wheels), and the type a model class gives
when `--pooler-config` names none. `engines/vllm_pooler.py` reads the JSON.

* 0.6.5-0.9.1 (and any start on the V0 engine): the pooling runner never chunks prefills
  (`EngineArgs._set_default_args_v0` leaves the >32K default off for it and refuses an
  explicit --enable-chunked-prefill: "Chunked prefill is not supported for pooling models").
  0.8.0-0.9.1 run every pooling model on V0 (`_is_v1_supported_oracle`: "No Embedding Models
  so far"). 0.6.4 has no pooling rule.
* 0.9.2-0.11.x: only LAST pooling of a causal model chunks (`_set_default_args_v1`, 0.11.0
  `_set_default_args`, 0.11.1 `get_chunked_prefill_prefix_caching_defaults`: the defaults of
  both flags), and `VllmConfig.__post_init__` turns chunked prefill and prefix caching off for
  any other type whatever the flags said ("Only "last" pooling supports chunked prefill and
  prefix caching; disabling both"). 0.9.2 and 0.10.0 fill no default pooling type, so a model
  that `--override-pooler-config` (or a sentence-transformers Pooling module) gives none is
  not LAST; with chunked prefill off they set the budget to max_model_len, and for a type
  other than LAST `VllmConfig` sets it to max(max_model_len, 2048)
  (`DEFAULT_MAX_NUM_BATCHED_TOKENS`), whatever --max-num-batched-tokens said. 0.10.1-0.11.0
  take max_model_len as the server / LLM default budget when the requested chunked prefill is
  off, 0.11.1 max(max_model_len, the default) capped at max_num_seqs x max_model_len.
* 0.12+: `ModelConfig.is_chunked_prefill_supported` / `is_prefix_caching_supported` set only
  the defaults (`_set_default_chunked_prefill_and_prefix_caching_args`); an explicit
  --enable-chunked-prefill is honoured with a warning ("This model does not officially
  support chunked prefill"). A class whose default (sequence) pooling is CLS counts as
  encoder-only (`attn_type`) and takes neither; otherwise 0.12 refuses ALL / MEAN / STEP /
  CLS, 0.13 MEAN / STEP / CLS, 0.14+ a MEAN or CLS sequence pooling or a STEP token pooling.
  The budget is max(max_model_len, the default) when chunked prefill is off (0.11.1's rule).
"""

from __future__ import annotations

from kvplan.core.record import record
from kvplan.core.versions import VllmVersion

POOLING_TYPES = ("LAST", "ALL", "CLS", "STEP", "MEAN")  # `PoolingType` / `PoolingTypeStr`
SEQ_TYPES = ("CLS", "LAST", "MEAN")  # 0.14+ `SequencePoolingType`
TOK_TYPES = ("ALL", "STEP")  # 0.14+ `TokenPoolingType`
DEFAULT_BUDGET = 2048  # 0.9.2-0.11 `DEFAULT_MAX_NUM_BATCHED_TOKENS`

# registered classes whose `default_pooling_type` is not LAST (0.10.1-0.13: one type) or whose
# `default_seq_pooling_type` / `default_tok_pooling_type` are not LAST / ALL (0.14+):
# architecture -> (first release, the type to 0.13, the sequence type, the token type), read
# off the `@default_pooling_type` decorators and `registry.py` of the 0.10.1-0.33 wheels.
# `inspect_model_cls` reads the registered class, not `--convert`'s adapter, so a converted
# generative model (as_reward_model's ALL included) takes LAST.
ARCH_DEFAULTS: dict[str, tuple[tuple[int, int, int], str, str, str]] = {
    "Qwen2ForRewardModel": ((0, 10, 1), "ALL", "LAST", "ALL"),
    "InternLM2ForRewardModel": ((0, 10, 1), "ALL", "LAST", "ALL"),
    "Qwen2ForProcessRewardModel": ((0, 10, 1), "STEP", "LAST", "STEP"),
    "GritLM": ((0, 10, 2), "MEAN", "MEAN", "ALL"),  # registered to 0.28
    "ColQwen3": ((0, 17, 0), "CLS", "CLS", "ALL"),
    "OpsColQwen3Model": ((0, 17, 0), "CLS", "CLS", "ALL"),
    "Qwen3VLNemotronEmbedModel": ((0, 17, 0), "CLS", "CLS", "ALL"),
    "ColPaliForRetrieval": ((0, 18, 0), "CLS", "CLS", "ALL"),
    "ColQwen3_5": ((0, 19, 0), "CLS", "CLS", "ALL"),
    "EmbeddingGemma2Model": ((0, 32, 0), "MEAN", "MEAN", "ALL"),
}


@record(frozen=True)
class PoolerRead:
    """The pooling keys of `--pooler-config` as one release reads them."""

    seq: str | None = None  # `pooling_type` to 0.13, `seq_pooling_type` from 0.14
    tok: str | None = None  # `tok_pooling_type` (0.14+)
    ignored: tuple[str, ...] = ()  # keys the release drops without a word (0.9.2-0.15)


def model_defaults(architectures: list[str], version: VllmVersion) -> tuple[str | None, str]:
    """The pooling types the model class gives when the config names none (`ModelConfig`
    fills them from `_model_info` from 0.10.1; 0.9.2 / 0.10.0 fill none): (the one type to
    0.13, else the sequence type; the token type)."""
    if not version.at_least(0, 10, 1):
        return None, "ALL"
    for arch in architectures:
        hit = ARCH_DEFAULTS.get(arch)
        if hit and version.v >= hit[0] and not (arch == "GritLM" and version.at_least(0, 29)):
            return (hit[2], hit[3]) if version.at_least(0, 14) else (hit[1], "ALL")
    return "LAST", "ALL"


@record(frozen=True)
class Prefill:
    """What a release does with chunked prefill and prefix caching for a pooling model."""

    supported: bool  # the release's predicate: chunked prefill and prefix caching on
    forced: bool  # off whatever the flags said (0.9.2-0.11.x `VllmConfig.__post_init__`)
    pooling_type: str  # the type that decided, for notes ("none": unset)
    from_model: bool  # the type is the model class's default, not --pooler-config's
    encoder: bool = False  # 0.12+: the class's default CLS counts as encoder-only attention


def prefill(version: VllmVersion, architectures: list[str], pooler: PoolerRead | None) -> Prefill:
    """Each V1 release's predicate (module docstring) for a causal pooling model (kvplan
    refuses encoder-only attention earlier)."""
    pooler = pooler or PoolerRead()
    d_seq, d_tok = model_defaults(architectures, version)
    if version.at_least(0, 14):
        seq, tok = pooler.seq or d_seq, pooler.tok or d_tok
        encoder = d_seq == "CLS"  # `ModelConfig.attn_type`: the class's default, not the flag
        ok = not encoder and seq not in ("MEAN", "CLS") and tok != "STEP"
        shown = "STEP" if tok == "STEP" and seq not in ("MEAN", "CLS") else str(seq)
        return Prefill(ok, False, shown, pooler.seq is None and pooler.tok is None, encoder)
    pt = pooler.seq or d_seq
    if version.at_least(0, 12):
        ok = d_seq != "CLS" and pt in (("LAST", "ALL") if version.at_least(0, 13) else ("LAST",))
        return Prefill(ok, False, str(pt), pooler.seq is None, d_seq == "CLS")
    ok = pt == "LAST"  # 0.9.2-0.11.x: `pooling_type.lower() == "last"`
    return Prefill(ok, not ok, pt or "none", pooler.seq is None)


# sentence-transformers checkpoints (`transformers_utils/config.py get_pooling_config`, read
# in the 0.6.4-0.33 wheels): modules.json lists a Pooling module whose own config.json names
# the pooling mode. Module types the release looks for, from the release that first does:
ST_POOLING_MODULES = {
    "sentence_transformers.models.Pooling": (0, 6, 4),
    "sentence_transformers.sentence_transformer.modules.pooling.Pooling": (0, 30, 0),
}


# `get_sentence_transformer_tokenizer_config` (0.6.4-0.33): the first of these files that
# holds a non-empty object is the encoder config; its max_seq_length, when it has one,
# replaces the config's derived max_model_len (`_get_and_verify_max_len`), whatever the runner
ST_ENCODER_FILES = ("sentence_bert_config.json", "sentence_roberta_config.json",
                    "sentence_distilbert_config.json", "sentence_camembert_config.json",
                    "sentence_albert_config.json", "sentence_xlm-roberta_config.json",
                    "sentence_xlnet_config.json")


@record(frozen=True)
class StPooling:
    """What a release reads from a sentence-transformers checkpoint's Pooling module."""

    module: str  # the module's path in the repo (`1_Pooling`)
    read: PoolerRead  # the types it gives (the merge keeps --pooler-config's where set)
    key: str = ""  # the config key that decided (for notes)
    error: str = ""  # 0.10.1-0.13: a mode `get_pooling_config_name` raises on


def st_module(modules: list | None, version: VllmVersion) -> dict | None:
    """The Pooling entry of modules.json the release takes (`get_pooling_config`'s first
    match), or None."""
    for item in modules or []:
        first = ST_POOLING_MODULES.get(item.get("type")) if isinstance(item, dict) else None
        if first and version.v >= first and isinstance(item.get("path"), str):
            return item
    return None


def _mode_name(key: str) -> str:
    """`parse_pooling_type` (0.14+) / `get_pooling_config_name` (to 0.13) before the check:
    `pooling_mode_` dropped, cut at the first `_`, `lasttoken` read as LAST."""
    name = key.replace("pooling_mode_", "") if "pooling_mode_" in key else key
    name = name.split("_", 1)[0]
    return "LAST" if "lasttoken" in name else name.upper()


def st_pooling(modules: list | None, configs: dict[str, dict] | None,
               version: VllmVersion) -> StPooling | None:
    """The release's reading of the checkpoint's Pooling module (None: no module it takes).
    To 0.13 the first key set to true names the one type (unsupported names give none to
    0.10.0 and stop the start from 0.10.1); from 0.14 every true key is read in order, a
    later one of the same kind winning and the rest skipped; 0.30 adds `pooling_mode`
    given as a string."""
    if not version.at_least(0, 6, 4):
        return None
    item = st_module(modules, version)
    if item is None:
        return None
    cfg = (configs or {}).get(item["path"]) or {}
    path = item["path"]
    if not version.at_least(0, 14):
        key = next((k for k, val in cfg.items() if val is True), None)
        if key is None:
            return StPooling(path, PoolerRead())
        name = _mode_name(key)
        if name in POOLING_TYPES:
            return StPooling(path, PoolerRead(seq=name), key)
        err = (f"its Pooling module's first mode, {key}, is {name}, which vLLM "
               f"{version.text} does not support") if version.at_least(0, 10, 1) else ""
        return StPooling(path, PoolerRead(), key, err)
    seq = tok = None
    keys = []
    for k, val in cfg.items():
        if k == "pooling_mode" and isinstance(val, str) and version.at_least(0, 30):
            name = _mode_name(val)
        elif val is True:
            name = _mode_name(k)
        else:
            continue
        if name in SEQ_TYPES:
            seq = name
            keys.append(k)
        elif name in TOK_TYPES:
            tok = name
            keys.append(k)
    return StPooling(path, PoolerRead(seq=seq, tok=tok), ", ".join(keys))


def merged(user: PoolerRead | None, st: StPooling | None) -> PoolerRead | None:
    """`--pooler-config`'s types, the checkpoint's where it sets none (`ModelConfig`: "Only
    set values that are not overridden by the user")."""
    if st is None:
        return user
    user = user or PoolerRead()
    return PoolerRead(seq=user.seq or st.read.seq, tok=user.tok or st.read.tok,
                      ignored=user.ignored)
