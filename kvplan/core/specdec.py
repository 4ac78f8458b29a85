"""Speculative decoding (`--speculative-config`): what the drafter adds to vLLM's start-up.

* KV cache: every drafter attention layer registers in the same forward context as the
  target's, so `get_kv_cache_spec` gives it a spec and the planner puts it in the same pool
  and groups (`v1/worker/gpu_model_runner.py`, `v1/core/kv_cache_utils.py`). MTP adds
  `num_nextn_predict_layers` / `mtp_num_hidden_layers` layers shaped like the target's
  full-attention (or MLA) layer, whatever `num_speculative_tokens` is (the layers are reused);
  EAGLE / EAGLE-3 / DFlash / draft models add the draft config's layers; DSpark (0.25+, V2
  runner) adds DeepSeek-V4's `n_mtp_layers` sliding-window stages or its draft's layers. All
  of them sit on the last pipeline stage and are split by the target's TP.
* Mamba / linear-attention states: the conv state keeps `d_conv - 1 + k` columns
  (`MambaStateShapeCalculator`: GDN from 0.10.2, Mamba2 0.17, KDA 0.28, ShortConv 0.29; never
  Mamba1), and from 0.15 the start-up accounting reserves k more state blocks per request
  (`MambaSpec.num_speculative_blocks`). Both apply to ngram too.
* Weights: the drafter loads inside the same `DeviceMemoryProfiler` as the target, so "Model
  loading took" includes it. It shares the target's embedding; MTP also shares the LM head,
  DeepSeek / GLM MTP's own `shared_head.head` only from 0.16 (`_maybe_share_lm_head`).
* CUDA graphs: capture sizes scale with 1 + k (`core/memory.py cudagraph_capture_sizes`).

* Probabilistic draft sampling keeps a [max_num_seqs, k, vocab] logits cache on V2 (sized in
  `sizing`); 0.25-0.27 keep k - 1 token slots per request for DFlash / DSpark's parallel
  drafting (`check_scheduled_tokens`).

Not modelled: the drafter's share of the profile run's peak (0 to 1 GiB measured), its small
persistent buffers beside the hidden-state one (`hidden_buffer_bytes`) and medusa.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kvplan.core.arch import (
    DSV4,
    GDN,
    KDA,
    MAMBA2,
    SHORTCONV,
    AttnLayer,
    Layer,
    ModelArch,
    StateLayer,
    inner_text_config,
    normalize,
)
from kvplan.core.record import record
from kvplan.core.versions import VllmVersion
from kvplan.errors import BadInput

# method names vLLM maps to "mtp" ("deprecated and replaced with mtp",
# `SpeculativeConfig.__post_init__`) and the release whose `MTPModelTypes` first lists each
# (`SpeculativeMethod` / `MTPModelTypes`, read in the 0.9-0.33 wheels: deepseek_mtp from 0.9,
# ernie / qwen3_next from 0.10.2, "mtp" itself from 0.11); an older release's pydantic
# validation refuses the name
MTP_SINCE = {
    "deepseek_mtp": (0, 9), "mimo_mtp": (0, 11), "glm4_moe_mtp": (0, 11, 1),
    "ernie_mtp": (0, 10, 2), "qwen3_next_mtp": (0, 10, 2), "longcat_flash_mtp": (0, 11),
    "mtp": (0, 11), "pangu_ultra_moe_mtp": (0, 11, 1), "exaone_moe_mtp": (0, 14),
    "glm4_moe_lite_mtp": (0, 15), "step3p5_mtp": (0, 15, 1), "glm_ocr_mtp": (0, 16),
    "nemotron_h_mtp": (0, 17), "qwen3_5_mtp": (0, 17), "exaone4_5_mtp": (0, 20),
    "hy_v3_mtp": (0, 20), "mimo_v2_mtp": (0, 21), "minimax_m3_mtp": (0, 24),
    "bailing_hybrid_mtp": (0, 25), "inkling_mtp": (0, 26), "kimi_k3_mtp": (0, 27),
    "dots3_note_mtp": (0, 28), "bailing_hybrid_v3_mtp": (0, 28), "qwen4_exp_mtp": (0, 29),
    "hy_v4_mtp": (0, 29), "glm5_next_mtp": (0, 30), "step5_mtp": (0, 33)}
# Gemma 4's MTP (0.21+) is a query-only drafter reading the target's KV (`Gemma4Speculator`)
NOT_MODELLED = {"gemma4_mtp": "Gemma 4's query-only MTP drafter",
                "medusa": "medusa heads (removed in vLLM 0.33)",
                "mlp_speculator": "MLP speculators (removed in vLLM 0.33)"}
DRAFT_METHODS = ("eagle", "eagle3", "draft_model", "dflash")
DSPARK = "dspark"  # DeepSeek's block drafter: DeepSeek-V4's own mtp.* stages or a draft model
NO_DRAFT = ("ngram", "suffix", "ngram_gpu")
# methods `SpeculativeConfig.use_eagle` names (drafting from the target's hidden states)
EAGLE_LIKE = ("eagle", "eagle3", "mtp", "dflash", DSPARK)
# the release from which vLLM's V1 engine serves each method (`_is_v1_supported_oracle`:
# ngram, eagle and eagle3 in 0.8.5, deepseek_mtp in 0.9; earlier ones fell back to V0)
_SINCE = {"eagle": (0, 8, 5), "eagle3": (0, 8, 5), "mtp": (0, 9), "ngram": (0, 8, 5),
          "suffix": (0, 11, 1), "ngram_gpu": (0, 18), "draft_model": (0, 15), "dflash": (0, 20),
          DSPARK: (0, 25)}
_SPLIT_EH_PROJ = ("qwen3_next", "qwen3_5", "nemotron_h", "exaone")
SUFFIX_TREE_DEPTH = 24  # `suffix_decoding_max_tree_depth`'s default (0.11.1-0.33)
MAX_TOKENS = 4096  # kvplan's bound (vLLM sets none; real drafts propose 1-16 tokens)
# rope types whose parameters only size the cos/sin cache (`_CACHE_ONLY_ROPE_TYPES`, 0.27+)
_CACHE_ONLY_ROPE = frozenset({"default", "linear", "llama3", "ntk", "proportional"})
# conv-state widening by state kind: the release whose shape calculator adds k
_CONV_PLUS_K = {GDN: (0, 10, 2), MAMBA2: (0, 17), KDA: (0, 28), SHORTCONV: (0, 29)}


@record(frozen=True)
class SpecDecode:
    """A parsed `--speculative-config`: method, k and, for drafts, the draft model."""

    method: str  # mtp | eagle | eagle3 | draft_model | dflash | dspark | ngram | suffix | ngram_gpu
    num_speculative_tokens: int
    draft: Any = None  # core.sizing.Model of the draft (eagle, eagle3, draft_model, dflash)
    k_from_draft: bool = False  # DSpark's k taken from the draft's block size (vLLM 0.31+)
    draft_sample: str = "greedy"  # draft_sample_method (0.24+); probabilistic keeps logits
    kv_cache_dtype: str | None = None  # the draft's own KV dtype (0.26+, model runner V2)
    alias: str = ""  # the MTP method name as given (`deepseek_mtp`, ...), checked by release
    draft_tp: int | None = None  # draft_tensor_parallel_size (None: the target's)
    lookup: tuple[int | None, int | None] = (None, None)  # ngram prompt_lookup_min / _max
    heterogeneous_vocab: bool = False  # use_heterogeneous_vocab (a draft of another vocab)
    unpadded: bool = False  # disable_padded_drafter_batch (no async scheduling, 0.26+)
    max_model_len: int | None = None  # the draft's own (`speculative_max_model_len`)

    @property
    def eagle_like(self) -> bool:
        """Drafts from the target's hidden states (`SpeculativeConfig.use_eagle`)."""
        return self.method in EAGLE_LIKE


def speculators_layer_config(config: dict[str, Any]) -> dict[str, Any] | None:
    """The decoder config of a speculators-format draft (Red Hat's `*-speculator.eagle3`),
    as vLLM reads it (`transformers_utils/configs/speculators/base.py`:
    `transformer_layer_config` plus the top level's `draft_vocab_size`); None otherwise."""
    inner = config.get("transformer_layer_config")
    if not config.get("speculators_model_type") or not isinstance(inner, dict):
        return None
    out = dict(inner)
    if config.get("draft_vocab_size"):
        out["draft_vocab_size"] = config["draft_vocab_size"]
    return out


def speculators_defaults(config: dict[str, Any]) -> dict[str, Any]:
    """The method and k a speculators-format draft declares (`build_vllm_speculative_config`)."""
    kind = str(config.get("speculators_model_type") or "")
    methods = (config.get("speculators_config") or {}).get("proposal_methods") or [{}]
    k = methods[0].get("speculative_tokens") if isinstance(methods[0], dict) else None
    return {"method": {"peagle": "eagle3", "dflash2": "dflash"}.get(kind, kind),
            "num_speculative_tokens": k}


def from_config(cfg: dict[str, Any], draft: Any = None) -> SpecDecode:
    """A `--speculative-config` mapping (method, num_speculative_tokens) as a SpecDecode."""
    method = str(cfg.get("method") or "").strip().lower()
    if not method and not cfg.get("model"):  # `SpeculativeConfig.__post_init__`
        raise BadInput("vLLM refuses a speculative config without a method or a model "
                       "('num_speculative_tokens was provided but without speculative "
                       "model')", hint="add a method (e.g. ngram, mtp, eagle3) or a model",
                       flag="speculative_config")
    if not method:
        method = "draft_model"
    alias = method if method in MTP_SINCE else ""
    method = "mtp" if alias else method
    if method in NOT_MODELLED:
        raise BadInput(f"kvplan does not model {NOT_MODELLED[method]}", flag="speculative_config")
    if method not in DRAFT_METHODS + NO_DRAFT + ("mtp", DSPARK):
        raise BadInput(f"speculative method {cfg.get('method')!r} is not one kvplan models",
                       hint="mtp, eagle, eagle3, draft_model, dflash, dspark, ngram or suffix",
                       flag="speculative_config")
    k = cfg.get("num_speculative_tokens")
    k_from_draft = k is None and method == DSPARK and draft is not None
    if k_from_draft:
        k = _dspark_block(draft.config)  # 0.31+ default: the drafter's block size
    if k is None and method == "suffix":  # `_validate_suffix_decoding`: the tree depth
        k = int(cfg.get("suffix_decoding_max_tree_depth") or SUFFIX_TREE_DEPTH)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_TOKENS:
        # vLLM's default k is a draft config's `n_predict`; MTP without a "model" never
        # reaches it ("num_speculative_tokens must be provided", `_verify_args`, 0.11-0.33)
        raise BadInput(f"--speculative-config needs num_speculative_tokens from 1 to "
                       f"{MAX_TOKENS}, got {k!r}", flag="speculative_config")
    if method in DRAFT_METHODS and draft is None:
        raise BadInput(f"--speculative-config method {method} needs the draft \"model\"",
                       flag="speculative_config")
    sample = str(cfg.get("draft_sample_method") or "greedy").lower()
    if sample not in ("greedy", "probabilistic", "synthetic"):
        raise BadInput(f"--speculative-config draft_sample_method {sample!r} is not greedy, "
                       "probabilistic or synthetic", flag="speculative_config")
    kv = cfg.get("kv_cache_dtype")
    if kv is not None and not isinstance(kv, str):
        raise BadInput(f"--speculative-config kv_cache_dtype {kv!r} is not a dtype name",
                       flag="speculative_config")
    ints = {}
    for key in ("draft_tensor_parallel_size", "prompt_lookup_min", "prompt_lookup_max",
                "max_model_len"):
        v = cfg.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise BadInput(f"--speculative-config {key} {v!r} is not a positive integer",
                           flag="speculative_config")
        ints[key] = v
    return SpecDecode(method, k, draft if method in DRAFT_METHODS + (DSPARK,) else None,
                      k_from_draft, sample, kv.lower() if kv else None, alias,
                      draft_tp=ints["draft_tensor_parallel_size"],
                      lookup=(ints["prompt_lookup_min"], ints["prompt_lookup_max"]),
                      heterogeneous_vocab=bool(cfg.get("use_heterogeneous_vocab")),
                      unpadded=bool(cfg.get("disable_padded_drafter_batch")),
                      max_model_len=ints["max_model_len"])


def check_args(spec: SpecDecode, vocab: int, tp: int, version: VllmVersion) -> None:
    """`SpeculativeConfig`'s own checks: a draft's TP is 1 or the target's
    (`_verify_and_get_draft_tp`, 0.11+), exactly the target's for a draft model from 0.15
    (`_raise_if_draft_tp_mismatch`), and a draft model shares the target's vocabulary
    (`verify_equal_vocab_size_if_draft_model`, 0.15+); ngram's prompt_lookup_min is at most
    its max."""
    lo, hi = spec.lookup
    if lo is not None and hi is not None and lo > hi:
        raise BadInput(f"--speculative-config prompt_lookup_min={lo} must be <= "
                       f"prompt_lookup_max={hi}", flag="speculative_config")
    strict = spec.method == "draft_model" and spec.draft is not None and version.at_least(0, 15)
    if strict and spec.draft_tp is not None and spec.draft_tp != tp:  # the stricter rule first
        raise BadInput(f"vLLM {version.text} runs a draft model at the target's TP only "
                       f"(draft_tensor_parallel_size {spec.draft_tp}, tensor_parallel_size "
                       f"{tp})", hint=f"set draft_tensor_parallel_size to {tp} or drop it",
                       flag="speculative_config")
    if spec.draft_tp is not None and spec.draft_tp not in (1, tp) and version.at_least(0, 11):
        raise BadInput(f"--speculative-config draft_tensor_parallel_size={spec.draft_tp} can "
                       f"only be 1 or the target's {tp}", flag="speculative_config")
    if not strict:
        return
    from kvplan.core.arch import normalize

    dv = normalize(spec.draft.config).vocab_size
    if dv != vocab and not spec.heterogeneous_vocab:
        raise BadInput(f"the draft model's vocabulary ({dv}) differs from the target's "
                       f"({vocab}); vLLM refuses the pair ('should have the same vocabulary "
                       "size')", hint="pick a draft from the same model family",
                       flag="speculative_config")


def _dspark_block(config: dict[str, Any]) -> int | None:
    t = inner_text_config(config) or config
    n = t.get("dspark_block_size", t.get("block_size"))
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def resolved(spec: SpecDecode, arch: ModelArch) -> SpecDecode:
    """`spec` checked against the model's MTP layers: more tokens than MTP layers must be a
    multiple of them (`SpeculativeConfig.__post_init__`)."""
    if spec.method == DSPARK:
        if spec.draft is None and "dsv4" not in arch.kinds:
            raise BadInput("dspark without a draft \"model\" drafts from DeepSeek-V4's own "
                           f"mtp.* stages; {arch.model_type} has none", flag="speculative_config")
        return spec
    if spec.method != "mtp":
        return spec
    n = mtp_layer_count(arch)
    k = spec.num_speculative_tokens
    if k > n and k % n:
        raise BadInput(f"num_speculative_tokens {k} is not a multiple of the model's {n} MTP "
                       "layers; vLLM refuses it", flag="speculative_config")
    return spec


def check_version(spec: SpecDecode, version: VllmVersion) -> None:
    since = _SINCE[spec.method]
    if spec.alias and version.at_least(*since) and not version.at_least(*MTP_SINCE[spec.alias]):
        since = MTP_SINCE[spec.alias]
        known = "mtp" if version.at_least(0, 11) else "deepseek_mtp"  # the generic name
        raise BadInput(f"vLLM {version.text} does not know speculative method {spec.alias!r} ("
                       "added in " + ".".join(map(str, since)) + ")",
                       hint=f'use "method": "{known}" or a later --vllm-version',
                       flag="speculative_config")
    if not version.at_least(*since):
        raise BadInput(f"kvplan models {spec.method} speculative decoding from vLLM "
                       + ".".join(map(str, since)) + " (V1)", hint="use a later --vllm-version",
                       flag="speculative_config")


def mtp_layer_count(arch: ModelArch) -> int:
    t = arch.text_config
    n = t.get("num_nextn_predict_layers", t.get("mtp_num_hidden_layers"))
    if n is None and arch.model_type in ("qwen3_next",):  # `Qwen3NextMTP`: one layer
        n = 1
    if not n:
        raise BadInput(f"{arch.model_type} has no MTP layers (num_nextn_predict_layers / "
                       "mtp_num_hidden_layers)", hint="use ngram or an EAGLE draft",
                       flag="speculative_config")
    return int(n)


def _mtp_source(arch: ModelArch) -> int:
    """The index of the target layer an MTP module copies: the last full-attention, MLA or
    DeepSeek-V4 layer (Qwen3-Next / Qwen3.5's MTP layer is full attention next to GDN)."""
    for i in range(arch.num_layers - 1, -1, -1):
        x = arch.layers[i]
        if isinstance(x, AttnLayer) and x.kind in ("full", "mla", "dsv4"):
            return i
    raise BadInput(f"kvplan does not model the MTP module of {arch.model_type} (no full-"
                   "attention or MLA layer to copy)", flag="speculative_config")


def _mtp_layer(arch: ModelArch) -> AttnLayer:
    """The attention layer of an MTP module."""
    x = arch.layers[_mtp_source(arch)]
    if x.kind == "dsv4":  # past the compress-ratio list: sliding window only (`attention.py`)
        return replace(x, compress_ratio=1)
    if x.kind == "mla" and arch.is_sparse_mla:  # MTP layers always build their indexer
        x = replace(x, indexer_bytes=arch.indexer_bytes)
    return replace(x, parallel_state=None)


def dspark_stages(arch: ModelArch) -> int:
    """DeepSeek-V4's DSpark stages: `n_mtp_layers` (default 3) decoder layers built from the
    checkpoint's mtp.* weights, past `compress_ratios`, so sliding-window only
    (`DSparkDeepseekV4ForCausalLM`, 0.25+)."""
    return int(arch.text_config.get("n_mtp_layers") or 3)


def check_dspark(arch: ModelArch, spec: SpecDecode, version: VllmVersion, pp: int) -> None:
    """What vLLM refuses with DSpark: no k before 0.31 (`SpeculativeConfig.__post_init__`),
    pipeline parallelism before 0.30 (`load_dspark_model`) and, in 0.26-0.27, DeepSeek-V4
    with k below its `dspark_block_size`."""
    if spec.k_from_draft and not version.at_least(0, 31):
        raise BadInput(f"vLLM {version.text} needs num_speculative_tokens with dspark (0.31+ "
                       "take the draft's block size)", flag="speculative_config")
    if pp > 1 and not version.at_least(0, 30):
        raise BadInput(f"vLLM {version.text} does not run DSpark with pipeline parallelism "
                       "(0.30+)", flag="speculative_config")
    block = _dspark_block(arch.text_config) if spec.draft is None else None
    if (block and spec.num_speculative_tokens < block and version.at_least(0, 26)
            and not version.at_least(0, 28)):
        raise BadInput(f"DSpark requires num_speculative_tokens >= dspark_block_size ({block})"
                       f" in vLLM {version.text}", flag="speculative_config")


def v1_runner_reason(spec: SpecDecode, version: VllmVersion, pp: int) -> str:
    """Why vLLM runs this drafter on model runner V1 where V2 is the default ("Model Runner
    V2 does not yet support ...", `VllmConfig._get_v2_model_runner_unsupported_features`,
    the 0.29.0-0.33.0 wheels), or "": ngram / ngram_gpu 0.29-0.31, draft_model 0.29-0.30
    (0.29 lists the methods V2 runs), suffix throughout, EAGLE-3 with PP in 0.29."""
    m = spec.method
    if m == "suffix" or (m in ("ngram", "ngram_gpu") and not version.at_least(0, 32)) or (
            m == "draft_model" and not version.at_least(0, 31)):
        return f"speculative method '{m}'"
    if m == "eagle3" and pp > 1 and not version.at_least(0, 30):
        return "EAGLE3 with pipeline parallelism"
    return ""


def ngram_token_table_bytes(spec: SpecDecode, v2: bool, version: VllmVersion, seqs: int,
                            max_model_len: int) -> int:
    """The [max_num_seqs, max_model_len] int32 token table n-gram drafting scans on the GPU:
    V1's `token_ids_gpu_tensor` for ngram_gpu (0.18+, `GPUModelRunner.__init__`), V2's
    `RequestState.all_token_ids` held on the device rather than in UVA for ngram and
    ngram_gpu (0.32+, `use_dense_all_token_ids`); 0 otherwise."""
    if spec.method == "ngram_gpu" and not v2 or (
            v2 and spec.method in ("ngram", "ngram_gpu") and version.at_least(0, 32)):
        return seqs * max_model_len * 4
    return 0


# decoders whose aux hidden states cross pipeline stages (`supports_aux_hidden_states_over_pp`:
# LlamaModel, Qwen2Model and their subclasses; SarvamMLAModel from 0.32)
AUX_OVER_PP = ("llama", "mistral", "qwen2", "qwen3", "qwen2_vl", "qwen2_5_vl", "phi3")


def aux_layers(spec: SpecDecode | None, arch: ModelArch) -> list[int]:
    """The target layers whose hidden states an EAGLE-3 (with `use_aux_hidden_state`),
    DFlash or DSpark drafter reads (`requires_aux_hidden_states`): the draft config's ids
    (`eagle_aux_hidden_state_layer_ids`; DFlash's / DSpark's target ids + 1), else the
    model's default (2, L / 2, L - 3) (`get_eagle3_default_aux_hidden_state_layers`)."""
    if spec is None or spec.method not in ("eagle3", "dflash", DSPARK):
        return []
    da = draft_arch(spec)
    dt = da.text_config if da is not None else {}
    if spec.method == "eagle3" and not (dt.get("eagle_config") or {}).get(
            "use_aux_hidden_state", True):
        return []
    ids = dt.get("eagle_aux_hidden_state_layer_ids")
    if not ids:
        target = ((dt.get("dflash_config") or {}).get("target_layer_ids")
                  or dt.get("target_layer_ids") or dt.get("dspark_target_layer_ids"))
        ids = [int(i) + 1 for i in target] if target else None
    n = arch.num_layers
    return sorted(int(i) for i in (ids or (2, n // 2, n - 3)))


def aux_stage_bytes(layers: list[int], start: int, mnbt: int, hidden: int, d: int) -> int:
    """What a later pipeline stage's intermediate tensors add for the aux hidden states
    captured at or before its first layer (`reserve_aux_intermediate_tensor_slots`, model
    runner V2 0.30+): one [max_num_batched_tokens, hidden] each, in the model dtype."""
    import bisect

    return bisect.bisect_right(layers, start) * mnbt * hidden * d


def hidden_buffer_bytes(spec: SpecDecode, arch: ModelArch, v2: bool, mnbt: int,
                        d: int) -> int:
    """The draft's hidden-state buffer model runner V2 allocates with its speculator, before
    the profile: [max_num_batched_tokens, draft hidden] in the model dtype
    (`TargetDependentARSpeculator` / `DFlashSpeculator.__init__`, `autoregressive/` and
    `dspark/` in 0.26-0.31; EAGLE, EAGLE-3, MTP, DFlash, DSpark), widened by `hc_mult` for
    DeepSeek-V4's MTP, which takes the pre-hc_head residual. EAGLE-3 on Llama-3.1-8B at 8,192
    tokens: 64 MiB."""
    if not v2 or not spec.eagle_like:
        return 0
    da = draft_arch(spec)
    h = da.hidden_size if da is not None and spec.method != "mtp" else arch.hidden_size
    if spec.method == "mtp" and DSV4 in arch.kinds:
        h *= int(arch.text_config.get("hc_mult") or 1)
    return mnbt * h * d


def dflash_aux_staging_bytes(spec: SpecDecode, arch: ModelArch, seqs: int, mnbt: int,
                             d: int) -> int:
    """DFlash's FULL-graph staging of the target's aux hidden states (0.33
    `DFlashSpeculator.__init__` `_aux_staging`: [min(max_num_seqs x (k + 1), max_num_tokens),
    aux layers x hidden] in the model dtype, with FULL decode graphs), allocated before the
    profile."""
    da = draft_arch(spec)
    if spec.method != "dflash" or da is None:
        return 0
    dt = da.text_config
    aux = len((dt.get("dflash_config") or {}).get("target_layer_ids")
              or dt.get("target_layer_ids") or [])
    rows = min(seqs * (spec.num_speculative_tokens + 1), mnbt)
    return rows * aux * arch.hidden_size * d


def profile_batch(spec: SpecDecode | None, v2: bool, version: VllmVersion, mnbt: int,
                  seqs: int) -> tuple[int, int]:
    """The profile run's dummy batch (tokens, requests). From 0.31 V2's `_dummy_run` caps
    the requests so each keeps its drafter's queries (`num_query_per_req`: 1 + k for DFlash,
    k for DSpark drafting from its anchor, its default) and takes a draft model's correction
    slot per request from the tokens (`num_extra_query_per_req`); the 0.31.0-0.33.0 wheels.
    DFlash at k = 15 samples 8,192 // 16 = 512 dummy requests, not 1,024."""
    reqs = min(mnbt, seqs)
    if spec is None or not v2 or not version.at_least(0, 31):
        return mnbt, reqs
    k = spec.num_speculative_tokens
    anchor = spec.draft is None or (spec.draft.config or {}).get("sample_from_anchor", True)
    per_req = {"dflash": 1 + k, DSPARK: k if anchor else 1 + k}.get(spec.method, 1)
    reqs = min(reqs, mnbt // per_req)
    return (mnbt - reqs if spec.method == "draft_model" else mnbt), reqs


def parallel_draft_slots(spec: SpecDecode, version: VllmVersion) -> int:
    """Token slots per request 0.25-0.27 keep out of the budget for DFlash and DSpark, which
    draft in parallel (`max_num_new_slots_for_drafting`: k - 1); 0 otherwise (0.28+ draft in
    a separate pass)."""
    if spec.method not in ("dflash", DSPARK) or not version.at_least(0, 25) \
            or version.at_least(0, 28):
        return 0
    return spec.num_speculative_tokens - 1


def check_scheduled_tokens(spec: SpecDecode, version: VllmVersion, mnbt: int, seqs: int, *,
                           lora: bool = False) -> None:
    """vLLM refuses to start when the draft slots leave no scheduled tokens
    (`_set_max_num_scheduled_tokens`: max_num_batched_tokens - slots x max_num_seqs <= 0),
    and, with LoRA (0.11.1+, `EngineArgs.create_engine_config`: "Consider increasing
    max_num_batched_tokens or decreasing num_speculative_tokens"), when the budget is below
    max_num_seqs x (1 + k)."""
    slots = parallel_draft_slots(spec, version)
    if slots and mnbt - slots * seqs <= 0:
        raise BadInput(f"{spec.method} with k={spec.num_speculative_tokens} keeps {slots} draft "
                       f"slots per request: --max-num-batched-tokens {mnbt} leaves "
                       f"{mnbt - slots * seqs} scheduled tokens for {seqs} sequences, and vLLM "
                       f"{version.text} refuses to start",
                       hint=f"raise --max-num-batched-tokens above {slots * seqs} or lower "
                            "--max-num-seqs", flag="max_num_batched_tokens")
    need = seqs * (spec.num_speculative_tokens + 1)
    if lora and version.at_least(0, 11, 1) and mnbt < need:
        raise BadInput(f"vLLM refuses LoRA with speculative decoding when "
                       f"--max-num-batched-tokens {mnbt} is below --max-num-seqs {seqs} x "
                       f"(1 + k={spec.num_speculative_tokens}) = {need}",
                       hint="raise --max-num-batched-tokens or lower --max-num-seqs",
                       flag="max_num_batched_tokens")


def multi_module_mtp(arch: ModelArch, spec: SpecDecode) -> bool:
    """MTP drafting through more than one module (`SpeculativeConfig.use_multi_module_mtp`:
    min(MTP layers, k) > 1)."""
    return spec.method == "mtp" and min(mtp_layer_count(arch), spec.num_speculative_tokens) > 1


def draft_arch(spec: SpecDecode) -> ModelArch | None:
    return normalize(spec.draft.config) if spec.draft is not None else None


def draft_layers(arch: ModelArch, spec: SpecDecode) -> list[Layer]:
    """The drafter's cache-owning layers, appended after the target's."""
    if spec.method == "mtp":
        return [_mtp_layer(arch)] * mtp_layer_count(arch)
    if spec.method == DSPARK and spec.draft is None:
        return [_mtp_layer(arch)] * dspark_stages(arch)
    d = draft_arch(spec)
    if d is None:
        return []
    return [x for x in d.layers if isinstance(x, AttnLayer)]


def widen_states(layers: list[Layer], k: int, version: VllmVersion) -> list[Layer]:
    """State layers whose conv state grows by k columns in this release."""
    def wide(st: StateLayer) -> StateLayer:
        since = _CONV_PLUS_K.get(st.kind)
        grows = since and not st.fixed_conv and version.at_least(*since)
        return replace(st, d_conv=st.d_conv + k) if grows else st

    out: list[Layer] = []
    for x in layers:
        if isinstance(x, StateLayer):
            x = wide(x)
        elif isinstance(x, AttnLayer) and x.parallel_state is not None:
            x = replace(x, parallel_state=wide(x.parallel_state))
        out.append(x)
    return out


def _mtp_module_bytes(arch: ModelArch, d: int, hf_quant: dict[str, Any] | None, tp: int,
                      ep: int) -> float:
    """One MTP module on one GPU: the target's last full-attention layer (with its MLP or
    experts) at the checkpoint's bytes per parameter, in the model dtype when the
    quantization excludes `mtp` modules (NVIDIA's and Red Hat's NVFP4 releases), plus the
    2H x H projection that joins embedding and hidden state (whole on every rank unless the
    model splits it, `_SPLIT_EH_PROJ`)."""
    from kvplan.core.params import count_params, weight_bytes

    lp = count_params(arch).layers[_mtp_source(arch)]
    quant = hf_quant or arch.quantization or {}
    excluded = "mtp" in str({k: v for k, v in quant.items()
                             if k in ("exclude_modules", "ignore", "modules_to_not_convert",
                                      "ignored_layers", "quantization")})
    wb = weight_bytes(arch, d, None, hf_quant)
    lin, exp = (d, d) if excluded or not quant else (wb.linear, wb.expert)
    kv_local = lp.kv_proj * max(1, lp.kv_heads // tp) / lp.kv_heads if lp.kv_heads else 0
    return ((lp.split / tp + kv_local) * lin + lp.replicated * d + lp.expert / ep * exp
            + mtp_join_bytes(arch, tp, d, lin))


def mtp_join_bytes(arch: ModelArch, tp: int, d: int, linear_bytes: float) -> float:
    """The 2H -> H projection joining an MTP module's embedding and hidden state, on one GPU:
    TP-split (`ColumnParallelLinear` fc / eh_proj) in Qwen3-Next / Qwen3.5, Nemotron-H and
    EXAONE; a whole `nn.Linear` in the model dtype on every rank elsewhere (deepseek_mtp.py,
    glm4_moe_mtp.py, step3p5_mtp.py, 0.11-0.33), quantized `ReplicatedLinear`s for
    DeepSeek-V4 (e_proj / h_proj, deepseek_v4 mtp.py)."""
    h = arch.hidden_size
    if arch.model_type.startswith(_SPLIT_EH_PROJ):
        return 2 * h * h / tp * d
    return 2 * h * h * (linear_bytes if arch.model_type == "deepseek_v4" else d)


def mtp_checkpoint_bytes(arch: ModelArch, d: int, hf_quant: dict[str, Any] | None) -> int:
    """Bytes of the MTP modules a checkpoint stores beside the model (0 without any), which
    vLLM skips unless it drafts with them (`DeepseekV2ForCausalLM.load_weights`: layers past
    `num_hidden_layers`; Qwen3.5 / Qwen3-Next: `mtp.*`). DeepSeek-V3's layer 61 also keeps
    its own embedding and `shared_head.head` copies (the 14B-parameter MTP module of its
    685B total)."""
    t = arch.text_config
    n = t.get("num_nextn_predict_layers", t.get("mtp_num_hidden_layers"))
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        return 0
    own_vocab = 2 * arch.vocab_size * arch.hidden_size * d if arch.model_type.startswith(
        "deepseek") else 0
    return int(n * (_mtp_module_bytes(arch, d, hf_quant, 1, 1) + own_vocab))


def _rope_types(t: dict[str, Any]) -> set[str]:
    """The rope types of a config (`iter_rope_parameters`: one set, or one per layer type)."""
    rp = t.get("rope_scaling") or t.get("rope_parameters") or {}
    if not isinstance(rp, dict):
        return {"default"}
    sets = [v for v in rp.values() if isinstance(v, dict)] or [rp]
    return {str(x.get("rope_type") or x.get("type") or "default") for x in sets}


def draft_shares_positions(spec: SpecDecode, version: VllmVersion) -> bool:
    """Whether vLLM raises the draft's max_position_embeddings to the target's max_model_len
    (`SpeculativeConfig._maybe_override_draft_max_position_embeddings`): for EAGLE / EAGLE-3
    in 0.27-0.32; from 0.33 for every drafter but draft_model whose rope types only size the
    cos/sin cache (`draft_shares_target_positions`)."""
    da = draft_arch(spec)
    if da is None or not version.at_least(0, 27):
        return False
    if not version.at_least(0, 33):
        return spec.method in ("eagle", "eagle3")
    return spec.method != "draft_model" and _rope_types(da.text_config) <= _CACHE_ONLY_ROPE


def draft_rope_bytes(arch: ModelArch, spec: SpecDecode, *, d: int, version: VllmVersion,
                     max_model_len: int) -> int:
    """A draft model's own rotary cache: `get_rope` shares a cache only between equal ropes
    (theta, scaling, size, length), at the target's max_model_len where vLLM raises the
    draft's (`draft_shares_positions`). A config without rope_theta takes 10,000.
    EAGLE3-LLaMA3.1 beside Llama-3.1-8B at 131,072: 32 MiB (0 without a draft)."""
    from kvplan.core.params import rope_cache_bytes

    da = draft_arch(spec)
    if da is None:
        return 0
    t, target = da.text_config, arch.text_config
    length = int(t.get("max_position_embeddings") or 0)
    rp = t.get("rope_scaling") or t.get("rope_parameters") or {}
    if draft_shares_positions(spec, version) and length < max_model_len:
        length = max_model_len
    own = {**t, "rope_theta": t.get("rope_theta") or (rp.get("rope_theta") if isinstance(
        rp, dict) else None) or 10000.0, "max_position_embeddings": length}

    def key(c: dict[str, Any]) -> tuple:  # rope_scaling or transformers 5's rope_parameters
        scaling = c.get("rope_scaling") or c.get("rope_parameters") or {}
        scaling = {k: v for k, v in scaling.items() if k != "rope_theta"} if isinstance(
            scaling, dict) else {}
        if scaling.get("rope_type", scaling.get("type", "default")) == "default":
            scaling = {}
        theta = c.get("rope_theta") or (c.get("rope_parameters") or {}).get("rope_theta")
        return (float(theta or 10000.0), str(sorted(scaling.items())),
                int(c.get("max_position_embeddings") or 0))
    if key(own) == key(target) and da.layers and arch.layers and getattr(
            da.layers[0], "head_size", 0) == getattr(arch.layers[0], "head_size", 0):
        return 0
    return rope_cache_bytes(replace(da, text_config=own), d)


def draft_weight_bytes(arch: ModelArch, spec: SpecDecode, *, tp: int, ep: int, d: int,
                       hf_quant: dict[str, Any] | None, version: VllmVersion,
                       pp: int = 1) -> tuple[int, bool]:
    """Bytes the drafter adds on one GPU of the last stage, and whether they are estimated.

    MTP: n copies of the target's last full-attention layer (with its MLP or experts) plus
    the 2H x H projection that joins embedding and hidden state, in the model dtype when the
    checkpoint's quantization excludes `mtp` modules (NVIDIA's and Red Hat's NVFP4 releases)
    and at the checkpoint's bytes per parameter otherwise; DeepSeek / GLM MTP also keep their
    own vocab x hidden `shared_head.head` before 0.16. Drafts: the draft checkpoint less the
    embedding it shares with the target (and the LM head, unless EAGLE-3's own vocabulary).
    With pipeline parallelism the embedding is not shared (`_maybe_share_embeddings` only
    for a one-rank PP group; V2 `maybe_share_target_embed`, 0.28-0.33): the drafter on the
    last stage keeps its own, vocab-split over TP; the LM head is shared regardless.
    """
    from kvplan.core.params import count_params, weight_bytes

    h = arch.hidden_size
    if spec.method == DSPARK and spec.draft is None:  # DeepSeek-V4's own mtp.* stages
        lp = count_params(arch).layers[_mtp_source(arch)]
        wb = weight_bytes(arch, d, None, hf_quant)
        t = arch.text_config
        targets = len(t.get("dspark_target_layer_ids") or [0, 0, 0])
        rank = int(t.get("dspark_markov_rank") or 256)
        layer = lp.split / tp * wb.linear + lp.replicated * d + lp.expert / ep * wb.expert
        main_proj = targets * h * h * wb.linear  # replicated, the target's quantization
        split, whole = _markov(arch.vocab_size, rank, version)
        markov = (split / tp + whole) * d
        return int(dspark_stages(arch) * layer + main_proj + markov), True
    if spec.method == "mtp":
        head = arch.vocab_size * h / tp * d if (
            arch.model_type.startswith(("deepseek", "glm4_moe", "glm_moe"))
            and not version.at_least(0, 16)) else 0
        embed = arch.vocab_size * h / tp * d if pp > 1 else 0
        return int(mtp_layer_count(arch) * (_mtp_module_bytes(arch, d, hf_quant, tp, ep)
                                            + head) + embed), True
    da = draft_arch(spec)
    if da is None:
        return 0, False
    dpc = count_params(da)
    shared = 0
    if spec.method != "draft_model" and da.vocab_size == arch.vocab_size and da.hidden_size == h:
        shared += dpc.embed if pp == 1 else 0
        if spec.method != "eagle3" and not da.tie_word_embeddings:
            shared += dpc.lm_head
    embed_shared = shared > 0 and pp == 1
    draft_vocab = int(da.text_config.get("draft_vocab_size") or 0)
    if spec.method == "eagle3" and draft_vocab and dpc.lm_head:  # its own, smaller LM head
        shared += dpc.lm_head - draft_vocab * da.hidden_size
    split, whole = _head_extras(spec, da, version)
    # EAGLE-3's draft -> target token map, int64 (`draft_id_to_target_id`)
    d2t = 8 * draft_vocab if spec.method == "eagle3" and draft_vocab and (
        draft_vocab != arch.vocab_size) else 0
    if spec.draft.weights_bytes:  # the checkpoint holds the extras; only the split changes
        layout = spec.draft.weights_layout or {}
        total = spec.draft.weights_bytes - (layout.get("embed", 0) if embed_shared else 0)
        kept = whole * d + d2t
        return int((total - kept) / tp + kept), False
    return int((dpc.total - shared + split) * d / tp + whole * d + d2t), True


def _markov(vocab: int, rank: int, version: VllmVersion) -> tuple[int, int]:
    """DSpark's Markov head (`DSparkMarkovHead`): (TP-split, whole) parameters. w2 is a
    vocab-split `ParallelLMHead`; w1 a `VocabParallelEmbedding` in 0.25-0.26 and a whole
    `nn.Embedding` from 0.27 (the 0.25.0-0.33.0 wheels)."""
    if version.at_least(0, 27):
        return vocab * rank, vocab * rank
    return 2 * vocab * rank, 0


def _head_extras(spec: SpecDecode, da: ModelArch, version: VllmVersion) -> tuple[int, int]:
    """A draft head's own parameters beyond its decoder config: (TP-split, whole on every
    rank). The fc joining the target's hidden states is a `ReplicatedLinear` (an
    `nn.Linear` before 0.12): 2H -> H for EAGLE-1 (`llama_eagle.py`), 3 x the target's
    hidden -> H for EAGLE-3 (`llama_eagle3.py`, whose first layer's qkv also reads 2H),
    the target layers' hidden states -> H for DFlash and DSpark drafts (`qwen3_dflash.py`,
    `use_aux_hidden_state`), and DSpark's Markov head (`_markov`); the 0.25-0.33 wheels."""
    hd = da.hidden_size
    dt = da.text_config
    target_h = int(dt.get("target_hidden_size") or hd)
    if spec.method == "eagle":
        return 0, 2 * hd * hd
    if spec.method == "eagle3":
        first = next((x for x in da.layers if isinstance(x, AttnLayer)), None)
        qkv = (da.num_attention_heads * first.head_size + first.num_kv_heads
               * (first.head_size + first.head_size_v)) if first else 0
        return hd * qkv, 3 * target_h * hd
    if spec.method not in ("dflash", DSPARK):
        return 0, 0
    targets = len((dt.get("dflash_config") or {}).get("target_layer_ids") or dt.get(
        "target_layer_ids") or dt.get("dspark_target_layer_ids") or []) or (
        da.num_layers if spec.method == "dflash" else 0)
    if spec.method == "dflash":
        use_aux = dt.get("use_aux_hidden_state", True)
        return 0, targets * target_h * hd if use_aux else 0
    split, whole = _markov(da.vocab_size, int(dt.get("markov_rank") or dt.get(
        "dspark_markov_rank") or 256), version)
    return split, targets * target_h * hd + whole
