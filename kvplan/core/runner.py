"""Which runner vLLM runs a start with (generation or pooling, `ModelConfig._get_runner_type`)
and, for the pooling runner, chunked prefill, prefix caching and the token budget as each
release decides them (`core/pooling.py` holds the per-release pooling-type rules). `a` is
`sizing.EngineArgs`."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kvplan.core import pooling as PL
from kvplan.core.arch import ModelArch
from kvplan.core.versions import VllmVersion
from kvplan.errors import BadInput

# architecture suffixes vLLM runs as pooling models by default (`_SUFFIX_TO_DEFAULTS`; an
# unregistered `*Model` too, but registered ones such as MistralModel map to generation)
POOLING_SUFFIXES = ("ForSequenceClassification", "ForTokenClassification", "ForRewardModeling",
                    "RewardModel", "EmbeddingModel")
POOLING_TASKS = ("embed", "embedding", "classify", "score", "reward")  # --task (to 0.12)
# architectures whose vLLM classes build every attention layer as encoder-only
# (`AttentionType.ENCODER_ONLY` in bert.py, bert_with_rope.py, roberta.py, modernbert.py,
# colbert.py, openai_privacy_filter.py; 0.33 `registry.py`), so no KV cache exists: BERT,
# RoBERTa / XLM-R (bge-m3, bge-reranker), GTE, Nomic, ModernBERT, ColBERT
ENCODER_ONLY = frozenset({
    "BertModel", "BertForMaskedLM", "BertSpladeSparseEmbeddingModel", "BgeM3EmbeddingModel",
    "GteModel", "GteNewModel", "NomicBertModel", "ModernBertModel", "RobertaForMaskedLM",
    "RobertaModel", "XLMRobertaModel", "HF_ColBERT", "ColBERTModernBertModel",
    "ColBERTJinaRobertaModel", "BertForTokenClassification", "ModernBertForTokenClassification",
    "OpenAIPrivacyFilterForTokenClassification", "RobertaForTokenClassification",
    "XLMRobertaForTokenClassification", "BertForSequenceClassification",
    "GteNewForSequenceClassification", "ModernBertForSequenceClassification",
    "RobertaForSequenceClassification", "XLMRobertaForSequenceClassification",
    # decoders vLLM turns bidirectional (`models/config.py` sets `is_causal = False`)
    "LlamaBidirectionalModel", "LlamaBidirectionalForSequenceClassification",
    "VoyageQwen3BidirectionalEmbedModel", "LlamaNemotronVLModel",
    "LlamaNemotronVLForSequenceClassification"})


def pooling_runner(arch: ModelArch, a: Any, version: VllmVersion, notes: list[str],
             st: PL.StPooling | None = None) -> bool:
    """Whether vLLM runs the model with its pooling runner (`ModelConfig._get_runner_type`,
    read in the 0.20-0.33 wheels): `--runner pooling`, a `--convert` other than auto / none,
    or by default a pooling architecture or a sentence-transformers checkpoint (`st`:
    modules.json with a Pooling module, whatever the architecture: `_get_default_runner_type`
    0.10.1+, `_get_preferred_task` 0.6.5-0.10.0). Encoder-only attention keeps no KV cache."""
    if a.runner not in ("auto", "generate", "pooling"):
        raise BadInput(f"--runner {a.runner!r} is not auto, generate or pooling", flag="runner")
    converts = ("auto", "none", "embed", "classify") + (
        () if version.at_least(0, 16) else ("reward",))  # `ConvertType` (reward to 0.15)
    if a.convert not in converts:
        raise BadInput(f"--convert {a.convert!r} is not one of vLLM {version.text}'s: "
                       + ", ".join(converts), flag="convert")
    if (a.runner, a.convert) != ("auto", "auto") and not version.at_least(0, 10, 1):
        raise BadInput(f"vLLM {version.text} has no --runner / --convert (0.10.1+)",
                       hint="its --task embed / classify / score / reward picks pooling",
                       flag="runner")
    encoder = next((x for x in arch.architectures if x in ENCODER_ONLY or (
        x == "Gemma3TextModel" and arch.text_config.get("use_bidirectional_attention"))),
        None)  # EmbeddingGemma: `Gemma3TextModelConfig` makes it bidirectional
    if arch.model_type == "new" and "NewModel" in arch.architectures:
        # gte-*-v1.5 / gte-multilingual ship Alibaba's remote `NewModel`, which vLLM does not
        # register: its docs pass the architecture vLLM serves them as
        raise BadInput("NewModel (Alibaba's GTE, model_type 'new') is an encoder-only model: "
                       "vLLM serves it as GteNewModel, keeps no KV cache and sizes no pool, so "
                       "there is nothing to plan", hint="vLLM runs it with --hf-overrides "
                       "'{\"architectures\": [\"GteNewModel\"]}'; its memory is the weights "
                       "and the batch's activations")
    if encoder:  # a pooling model whatever the flags: `--runner generate` fails in vLLM too
        raise BadInput(f"{encoder} is an encoder-only model (vLLM builds its attention as "
                       "ENCODER_ONLY): vLLM keeps no KV cache for it and sizes no pool, so "
                       "there is nothing to plan", hint="its memory is the weights and the "
                       "batch's activations")
    if a.runner == "generate":
        return False
    auto = a.runner == "auto" and a.task in (None, "auto")  # the release picks the runner
    if st is not None and st.error and (auto or a.runner == "pooling" or a.task in
                                        POOLING_TASKS or a.convert not in ("auto", "none")):
        raise BadInput(f"vLLM {version.text} stops at start on this sentence-transformers "
                       f"checkpoint: {st.error} (`get_pooling_config_name` raises "
                       "NotImplementedError)", hint="run vLLM 0.14 or newer, which skips "
                       f"it, or set a supported mode in {st.module}/config.json")
    by_st = auto and st is not None and version.at_least(0, 6, 5)
    pooling = a.runner == "pooling" or a.convert not in ("auto", "none") or (
        a.task in POOLING_TASKS) or by_st or any(
        x.endswith(POOLING_SUFFIXES) for x in arch.architectures)
    if by_st and not any(x.endswith(POOLING_SUFFIXES) for x in arch.architectures):
        notes.append(f"a sentence-transformers checkpoint (modules.json lists {st.module}): "
                     f"vLLM {version.text} runs it with the pooling runner by default "
                     + ("(--runner generate serves it as a generator)" if version.at_least(
                         0, 10, 1) else "(--task generate serves it as a generator)"))
    if pooling and arch.text_config.get("is_causal") is False:
        raise BadInput("encoder-only attention (is_causal: false): vLLM keeps no KV cache for "
                       "this pooling model and sizes no pool, so there is nothing to plan",
                       hint="its memory is the weights and the batch's activations")
    if pooling:
        notes.append("pooling runner: no LM head, sampler or sampler state, no full CUDA graphs, "
                     "synchronous scheduling by default; kvplan's fixed activation terms were "
                     "fitted on generation starts")
    return pooling


def pooling_prefill(arch: ModelArch, a: Any, version: VllmVersion, mml: int,
                     notes: list[str], st: PL.StPooling | None = None,
                     st_checked: bool = False) -> tuple[bool, bool, int | None, Any]:
    """Chunked prefill and prefix caching for a pooling model as the release decides
    (`core/pooling.py`): (chunked prefill on, the flag `SchedulerConfig` is built with, a
    budget the release sets whatever the flags (0.9.2 / 0.10.0), the arguments with prefix
    caching resolved)."""
    asked, v = a.enable_chunked_prefill, version.text
    if not version.v1:  # V0 (every pooling start to 0.9.1): `_set_default_args_v0`
        if asked and version.at_least(0, 6, 5):
            raise BadInput(f"vLLM {v} refuses --enable-chunked-prefill for a pooling model "
                           "(its V0 engine: \"Chunked prefill is not supported for pooling "
                           "models\")", hint="drop --enable-chunked-prefill",
                           flag="enable_chunked_prefill")
        return False, False, None, a
    rule = PL.prefill(version, arch.architectures, a.pooler)
    arg = rule.supported if asked is None else asked
    on = arg and not rule.forced
    if a.enable_prefix_caching is None or rule.forced:
        # 0.26-0.27 keep hybrids' prefix caching opt-in, pooling ones too
        # (`_set_default_chunked_prefill_and_prefix_caching_args`: `and not is_hybrid`)
        a = replace(a, enable_prefix_caching=rule.supported and not (
            arch.is_hybrid_state and version.at_least(0, 26) and not version.at_least(0, 28)))
    budget = None
    if not version.at_least(0, 10, 1):  # 0.9.2 / 0.10.0: `_set_default_args_v1`, `VllmConfig`
        budget = max(mml, PL.DEFAULT_BUDGET) if rule.forced else None if arg else mml
    t = rule.pooling_type
    if rule.from_model and t != "none" and not st_checked:
        notes.append(f"pooling type {t}: the model class's default (a sentence-transformers "
                     "checkpoint's Pooling module sets its own, which kvplan reads only from "
                     "a model directory or the Hub: give it with --pooler-config)")
    elif st is not None and st.key and not rule.from_model and t != "none":
        notes.append(f"pooling type {t}: the checkpoint's sentence-transformers Pooling module "
                     f"({st.module}/config.json: {st.key}) where --pooler-config sets none")
    why = (f"no pooling type (vLLM {v} fills no default; 0.10.1+ take the model's)"
           if t == "none" else "the class's default CLS pooling (encoder-only attention to "
           "`ModelConfig.attn_type`)" if rule.encoder else f"{t} pooling")
    if rule.forced and asked:
        notes.append(f"{why}: vLLM {v} turns chunked prefill and prefix caching off whatever "
                     "the flags say (`VllmConfig.__post_init__`)")
    elif not rule.supported and asked:
        notes.append(f"{why}: vLLM {v} does not support chunked prefill here but honours "
                     "--enable-chunked-prefill (it warns the engine may crash or return "
                     "wrong outputs)")
    elif not rule.supported and asked is None:
        notes.append(f"{why}: vLLM {v} turns chunked prefill and prefix caching off, so the "
                     "token budget covers a whole prompt")
    return on, arg, budget, a
