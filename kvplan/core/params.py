"""Parameter counts from a config, split the way vLLM shards weights across GPUs.

Used when no exact checkpoint size is known (the output then says "estimated"), and to split
an exact checkpoint size across tensor/pipeline/expert-parallel ranks in proportion.
Module layout: the standard HF modules per family (embeddings, attention incl. MLA
projections, dense MLP, MoE experts + router + shared experts, Mamba2/GDN mixers, norms,
LM head unless tied). vLLM shards column/row-parallel linears and vocab embeddings by TP,
keeps `ReplicatedLinear` (MLA q_a/kv_a, routers) and norms whole, replicates K/V
projections past the KV-head count, and splits experts by the EP size.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import field, replace
from functools import lru_cache

from kvplan.core.arch import (
    DSV4,
    MINIMAX01,
    MLA,
    SLIDING,
    AttnLayer,
    ModelArch,
    StateLayer,
    text_entry,
)
from kvplan.core.memo import by_identity
from kvplan.core.record import record
from kvplan.core.versions import cc_major

# vLLM qwen2.py / qwen2_moe.py: `QKVParallelLinear(..., bias=True)` without a config switch
_QKV_BIAS = {"qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl", "qwen2_5_vl_text", "qwen2_vl_text"}
_NON_GATED = {"phi", "starcoder2", "gpt_bigcode", "falcon", "gpt2", "gpt_neox", "opt", "bloom",
              "mpt", "stablelm"}


NVFP4_BYTES = 0.5 + 1 / 16  # 4-bit values + one fp8 scale per 16
MXFP4_BYTES = 0.5 + 1 / 32  # 4-bit values + one e8m0 scale per 32


def is_nvfp4(bytes_per_param: float) -> bool:
    """Whether a part's bytes per parameter are NVFP4's."""
    return abs(bytes_per_param - NVFP4_BYTES) < 1e-9



def _width(vc: dict, key: str, default: int) -> int:
    """A vision-config width: `default` when absent (transformers' default), bad input when
    null (vLLM cannot build a layer of no width)."""
    v = vc.get(key, default)
    if v is None:
        from kvplan.errors import BadInput

        raise BadInput(f"config field 'vision_config.{key}' is null: vLLM cannot build the "
                       "vision projector", hint="give its width or drop the key")
    return int(v)

@record
class LayerParams:
    split: int = 0  # sharded by TP
    replicated: int = 0  # whole on every TP rank
    expert: int = 0  # routed experts: sharded by TP (or EP)
    kv_proj: int = 0  # K/V projection params (replicated past the KV-head count)
    kv_heads: int = 0
    mlp: int = 0  # of `split`: dense-MLP / shared-expert params (quantized apart in mixed ckpts)
    state: int = 0  # of `split`: Mamba / linear-attention mixer params
    repl_quant: int = 0  # of `replicated`: whole-on-every-rank linears the checkpoint quantizes
    mla_up: int = 0  # MLA kv_b_proj params: vLLM keeps a dequantized 16-bit copy of quantized ones
    mla_q: int = 0  # of `split`: MLA q_b_proj (or q_proj) params (--dcp-q-replicate)
    kv_unused: int = 0  # K/V projections of a KV-sharing layer (Gemma 4: allocated to 0.29)
    router: int = 0  # of `replicated`: the MoE gates' rows (fp32 in some models)


@record
class ParamCount:
    embed: int
    lm_head: int
    layers: list[LayerParams] = field(default_factory=list)
    vision: int = 0  # the vision encoder and its projector
    audio: int = 0  # the audio encoder
    vision_whole: int = 0  # of `vision`: what vLLM keeps whole on every TP rank (`tower_whole`)

    @property
    def total(self) -> int:
        return (self.embed + self.lm_head + self.vision + self.audio
                + sum(x.split + x.replicated + x.expert + x.kv_proj for x in self.layers))

    @property
    def experts(self) -> int:
        return sum(x.expert for x in self.layers)


def _is_moe_layer(t: dict, i: int, n_experts: int) -> bool:
    if not n_experts:
        return False
    # DeepSeek's first_k_dense_replace; AFMoE's / LFM2-MoE's num_dense_layers (afmoe.py,
    # lfm2_moe.py: `layer_idx < config.num_dense_layers` is a dense MLP)
    if i < int(t.get("first_k_dense_replace") or t.get("num_dense_layers") or 0):
        return False
    if i in set(t.get("mlp_only_layers") or []):
        return False
    if any(k in t for k in ("moe_layer_start_index", "moe_layer_end_index",
                            "moe_layer_interval")):
        # ERNIE 4.5 (ernie45_moe.py; the VL model's lists give the text experts first):
        # (i + 1) % interval == 0 and start <= i <= end
        start, end = (text_entry(t.get(k))
                      for k in ("moe_layer_start_index", "moe_layer_end_index"))
        end = int(t.get("num_hidden_layers") or 0) - 1 if end is None else end
        step = int(t.get("moe_layer_interval") or 1)
        return (i + 1) % step == 0 and int(start or 0) <= i <= end
    if t.get("expert_layer_period"):  # Jamba: transformers `JambaConfig.layers_num_experts`
        return i % int(t["expert_layer_period"]) == int(t.get("expert_layer_offset") or 0)
    freq = t.get("moe_layer_freq")
    if isinstance(freq, list):
        return bool(freq[i]) if i < len(freq) else True
    step = int(t.get("decoder_sparse_step") or t.get("interleave_moe_layer_step") or 1)
    if isinstance(freq, int) and freq > 1:
        step = freq
    return (i + 1) % step == 0


def _second_experts(t: dict, i: int, h: int) -> int:
    """ERNIE-4.5-VL's vision experts (ernie45_vl_moe.py): `moe_num_experts[1]` experts of
    `moe_intermediate_size[1]` on the layers of `moe_layer_start_index[1]` ..
    `moe_layer_end_index[1]`, beside the text experts."""
    n, w = t.get("moe_num_experts"), t.get("moe_intermediate_size")
    if not (isinstance(n, list) and isinstance(w, list) and len(n) > 1 and len(w) > 1):
        return 0
    start, end = t.get("moe_layer_start_index"), t.get("moe_layer_end_index")
    lo = start[1] if isinstance(start, list) and len(start) > 1 else 0
    hi = end[1] if isinstance(end, list) and len(end) > 1 else int(
        t.get("num_hidden_layers") or 0) - 1
    return n[1] * 3 * h * w[1] if lo <= i <= hi else 0


def mlp_width(arch: ModelArch, i: int) -> int:
    """Layer i's dense MLP width: Gemma 3n lists one per layer (gemma3n.py reads
    `intermediate_size[layer]`), others give one."""
    w = arch.text_config.get("intermediate_size")
    return int(w[i]) if isinstance(w, list) and i < len(w) else arch.intermediate_size


def _mla_replicated_linear(t: dict, h: int, indexer: bool) -> int:
    """Replicated MLA projections that are linear layers (quantized with the checkpoint):
    q_a and kv_a (vLLM `fused_qkv_a_proj` / `ReplicatedLinear`), and DeepSeek-V3.2's indexer
    wq_b and wk (its `weights_proj` is built unquantized)."""
    kv_lora, rope = int(t["kv_lora_rank"]), int(t.get("qk_rope_head_dim") or 0)
    q_lora = int(t.get("q_lora_rank") or 0)
    n = h * (kv_lora + rope) + h * q_lora
    if indexer:
        d = int(t.get("index_head_dim") or 128)
        n += q_lora * d * int(t.get("index_n_heads") or 64) + h * d
    return n


def _attn_params(t: dict, arch: ModelArch, layer: AttnLayer) -> tuple[int, int, int]:
    """(split, replicated, kv_proj) params of one attention block."""
    h = arch.hidden_size
    heads = arch.num_attention_heads
    if layer.kind == "dsv4":  # `DeepseekV4Attention`: fused wq_a+wkv (replicated), wq_b,
        d, ql = layer.head_size, int(t.get("q_lora_rank") or 0)  # grouped low-rank wo_a/wo_b
        g, ol = int(t.get("o_groups") or 1), int(t.get("o_lora_rank") or 0)
        repl = h * (ql + d)
        split = ql * heads * d + heads * d * ol + g * ol * h
        r = layer.compress_ratio
        if r > 1:  # compressor: kv and gate projections of coff x head_dim
            repl += 2 * h * (2 if r == 4 else 1) * d
        if r == 4:  # indexer: q projection, k, head weights, its own compressor
            n_idx, d_idx = int(t.get("index_n_heads") or 64), int(t.get("index_head_dim") or 128)
            repl += ql * n_idx * d_idx + h * d_idx + h * n_idx + 2 * h * 2 * d_idx
        return split, repl, 0
    if layer.kind == "mla" or arch.model_type == "minicpm3":  # MiniCPM3: MLA's projections
        nope = int(t.get("qk_nope_head_dim") or 0)
        rope = int(t.get("qk_rope_head_dim") or 0)
        v = int(t.get("v_head_dim") or nope)
        kv_lora = int(t["kv_lora_rank"])
        q_lora = int(t.get("q_lora_rank") or 0)
        repl = h * (kv_lora + rope) + kv_lora
        split = kv_lora * heads * (nope + v) + heads * v * h
        if q_lora:
            repl += h * q_lora + q_lora
            split += q_lora * heads * (nope + rope)
        else:
            split += h * heads * (nope + rope)
        if layer.indexer_bytes:
            d = int(t.get("index_head_dim") or 128)
            repl += h * int(t.get("index_n_heads") or 64) + h * d + q_lora * d * int(
                t.get("index_n_heads") or 64)
        return split, repl, 0
    hd, hv = layer.head_size, layer.head_size_v
    # an output gate doubles q_proj (vLLM qwen3_next.py `Qwen3NextAttention`: heads x (1 + gate))
    gate = 1 if t.get("attn_output_gate") or t.get("attention_output_gate") else 0
    split = h * heads * hd * (1 + gate) + heads * hv * h
    kv = h * layer.num_kv_heads * (hd + hv)
    if t.get("attention_bias", arch.model_type in _QKV_BIAS):  # q/k/v biases
        split += heads * hd
        kv += layer.num_kv_heads * (hd + hv)
    # Qwen3 / Gemma 3 q_norm and k_norm: one RMSNorm weight of head_dim each, replicated
    qk_norm = 2 * hd if arch.model_type.startswith(("qwen3", "gemma3")) else 0
    if arch.model_type in ("olmo_hybrid", "plamo2"):  # q_norm / k_norm over all heads
        qk_norm = (heads + layer.num_kv_heads) * hd
    return split, qk_norm, kv


def _mamba1_params(layer: StateLayer, h: int, t: dict) -> int:
    """vLLM's `MambaMixer` (mamba_mixer.py; Jamba, Mamba, Falcon-Mamba): in_proj h -> 2I,
    conv1d I x d_conv (+ bias), x_proj I -> R + 2N, dt_proj R -> I with bias, A [I, N] in
    fp32 (counted twice, as 16-bit units), D [I], out_proj I -> h (+ biases with use_bias),
    and Jamba's dt/B/C RMSNorms. R: `mamba_dt_rank` / `time_step_rank`. Jamba-1.5-Mini: a
    helper's count from the 0.33 wheel."""
    i, n = layer.intermediate, layer.d_state
    r = t.get("mamba_dt_rank") or t.get("time_step_rank") or "auto"
    if r == "auto":  # `JambaConfig` / `MambaConfig`: ceil(hidden / 16)
        r = -(-h // 16)
    if not isinstance(r, int) or isinstance(r, bool) or r < 1:
        from kvplan.errors import BadInput

        raise BadInput(f"the Mamba dt rank (mamba_dt_rank / time_step_rank) must be a positive "
                       f"integer or 'auto', got {r!r}")
    conv_bias = bool(t.get("mamba_conv_bias", t.get("use_conv_bias", True)))
    bias = bool(t.get("mamba_proj_bias", t.get("use_bias", False)))
    out = (h * 2 * i + i * layer.d_conv + (i if conv_bias else 0) + i * (r + 2 * n)
           + r * i + i + 2 * i * n + i + i * h + (3 * i + h if bias else 0))
    return out + (r + 2 * n if t.get("model_type") == "jamba" else 0)


def _state_params(layer: StateLayer, h: int, full_rank_gate: bool = False,
                  t: dict | None = None) -> int:
    if layer.kind == "mamba1" and t is not None:
        return _mamba1_params(layer, h, t)
    if layer.kind == "lightning":  # qkv, output gate, out projection, gate norm; Ling's q/k
        inner = layer.n_heads * layer.head_dim  # norms (bailing_linear_attn.py `use_qk_norm`)
        qk = 2 * layer.head_dim if t is not None and t.get("use_qk_norm") else 0
        return 5 * h * inner + inner + qk
    if layer.kind == "shortconv":  # LFM2: in_proj (3 x hidden), out_proj, depthwise conv
        return 4 * h * h + h * layer.d_conv
    if layer.kind == "kda":  # q/k/v/o, forget and output gates (low-rank unless full-rank),
        hd = layer.v_heads * layer.v_dim  # beta projection, three short convolutions
        gates = 2 * (h * hd if full_rank_gate else h * layer.v_dim + layer.v_dim * hd)
        return 4 * h * hd + gates + h * layer.v_heads + 3 * hd * layer.d_conv
    if layer.kind == "gdn":
        kd, vd = layer.k_heads * layer.k_dim, layer.v_heads * layer.v_dim
        return h * (2 * kd + 2 * vd) + h * 2 * layer.v_heads + vd * h + (2 * kd + vd) * layer.d_conv
    ng = max(layer.n_groups, 1)
    inter = layer.intermediate
    conv_dim = inter + 2 * ng * layer.d_state
    out = h * (inter + conv_dim + layer.n_heads) + conv_dim * layer.d_conv + inter * h
    return out + (_mamba2_small(layer, h, t) if t is not None else 0)


def _conv_bias(t: dict) -> int:
    """1 when a Mamba2 mixer's conv1d has a bias (`use_conv_bias` / `mamba_conv_bias`)."""
    return int(bool(t.get("use_conv_bias", t.get("mamba_conv_bias", True))))


def _mamba2_small(layer: StateLayer, h: int, t: dict) -> int:
    """`MambaMixer2`'s parameters beside its projections and conv weight: the conv bias
    (`use_conv_bias` / `mamba_conv_bias`), A in fp32 (as two 16-bit units), D and dt_bias a
    head each, the gated norm's weight (Falcon-H1 only with `mamba_rms_norm`) and the
    projection biases (`use_bias` / `mamba_proj_bias`)."""
    inter, heads = layer.intermediate, layer.n_heads
    conv_dim = inter + 2 * max(layer.n_groups, 1) * layer.d_state
    conv_bias = _conv_bias(t)
    bias = t.get("use_bias", t.get("mamba_proj_bias", False))
    norm = t.get("mamba_rms_norm", False) if t.get("model_type") == "falcon_h1" else True
    return ((conv_dim if conv_bias else 0) + 4 * heads + (inter if norm else 0)
            + (inter + conv_dim + heads + h if bias else 0))


def _one_group_whole(layer: StateLayer, h: int, lp: LayerParams, conv_bias: int = 0) -> None:
    """A Mamba2 mixer with one group keeps its B and C projections (in_proj rows and conv
    channels) whole on every TP rank: `MambaMixer2` pads the groups to the TP size
    (`extra_groups_for_head_shards`, 0.6-0.33), so they move from `split` to `replicated`."""
    if layer.kind != "mamba2" or layer.n_groups != 1:
        return
    bc = 2 * layer.d_state * (h + layer.d_conv + conv_bias)
    lp.state -= bc
    lp.split -= bc
    lp.replicated += bc
    lp.repl_quant += bc


def nas_ffn_sizes(arch: ModelArch) -> list[int] | None:
    """Each block's MLP intermediate size in a Nemotron-NAS / DeciLM model (0: no FFN):
    `block_configs[i].ffn`, `ffn_mult` -> int(2 x mult x hidden / 3) rounded up to 256
    (nemotron_nas.py `_ffn_mult_to_intermediate_size`, 0.8.5-0.33), else its
    `intermediate_size`; None for other models."""
    if arch.model_type not in ("nemotron-nas", "deci"):
        return None
    h, out = arch.hidden_size, []
    for b in (arch.text_config.get("block_configs") or [])[:arch.num_layers]:
        f = b.get("ffn") or {}
        if f.get("no_op"):
            out.append(0)
        elif f.get("ffn_mult") is not None:
            n = int(2 * float(f["ffn_mult"]) * h / 3)
            out.append(-(-n // 256) * 256)
        else:
            out.append(int(f.get("intermediate_size") or 0))
    return out + [0] * (arch.num_layers - len(out))


def mlp_intermediate(arch: ModelArch, lp: LayerParams) -> int:
    """The dense-MLP (or shared-expert) intermediate size behind a layer's `mlp` count."""
    per = (2 if arch.model_type in _NON_GATED else 3) * arch.hidden_size
    return lp.mlp // per if per else 0


# attention-free Mamba models: a layer is the mixer and its norm, no MLP (mamba.py,
# mamba2.py), though MambaConfig / FalconMambaConfig carry intermediate_size (the mixer's);
# Nemotron-H's half-block layers hold one norm too
_MIXER_ONLY = frozenset({"mamba", "falcon_mamba", "mamba2"})


@by_identity()
def count_params(arch: ModelArch) -> ParamCount:
    """Estimate parameters from the config (exact for standard Llama/Qwen/Mixtral layouts);
    memoised per `ModelArch`."""
    return _count_params(arch)


def _zamba2_params(arch: ModelArch) -> ParamCount:
    """Zamba2 (zamba2.py): every layer a Mamba2 mixer (`_state_params`) and its input norm;
    each hybrid layer adds a replicated `linear` h x h and an MLP adapter (h x r + r x 2F;
    with `use_shared_attention_adapter` three q/k/v adapters of 2h x r + r x 2h); the
    `num_mem_blocks` shared blocks (attention over 2h with its norm, o_proj 2h x h, the
    pre-FF norm and the gated MLP) exist once each and are placed at the first hybrid
    layers. The LM head is tied (`tie_weights`)."""
    t, h = arch.text_config, arch.hidden_size
    r, f = int(t.get("adapter_rank") or 128), arch.intermediate_size or 4 * h
    a = 2 * h
    blocks = int(t.get("num_mem_blocks") or 1)
    # `MambaMixer2(use_conv_bias=config.use_conv_bias, use_bias=config.add_bias_linear)`
    mixer = {**t, "use_bias": bool(t.get("add_bias_linear", False))}
    pc = ParamCount(embed=arch.vocab_size * h, lm_head=0)
    k = 0
    for layer in arch.layers:
        m = layer.parallel_state if isinstance(layer, AttnLayer) else layer
        lp = LayerParams(replicated=h)
        lp.state = _state_params(m, h, t=mixer)
        lp.split += lp.state
        _one_group_whole(m, h, lp, _conv_bias(mixer))
        if isinstance(layer, AttnLayer):
            lp.replicated += h * h
            lp.split += h * r + r * 2 * f + (
                3 * (a * r + r * a) if t.get("use_shared_attention_adapter") else 0)
            if k < blocks:
                lp.replicated += a + h
                lp.split += a * a + a * h
                lp.kv_proj, lp.kv_heads = 2 * a * a, layer.num_kv_heads
                lp.mlp = 3 * h * f
                lp.split += lp.mlp
            k += 1
        pc.layers.append(lp)
    if pc.layers:
        pc.layers[-1].replicated += h
    return pc


def _plamo2_mixer(m: StateLayer, h: int) -> int:
    """PLaMo2's `Plamo2MambaMixer`: in_proj h x 2I, conv1d (no bias), bcdt_proj I x (R + 2N),
    dt_proj R x heads, A / D / dt_bias, out_proj, and the dt / B / C norms; R = max(64,
    h / 16)."""
    i, n, rank = m.intermediate, m.d_state, max(64, h // 16)
    return (2 * h * i + i * m.d_conv + i * (rank + 2 * n) + rank * m.n_heads + 3 * m.n_heads
            + i * h + rank + 2 * n)


def _count_params(arch: ModelArch) -> ParamCount:
    if arch.model_type == "zamba2":
        return _zamba2_params(arch)
    t = arch.text_config
    h = arch.hidden_size
    embed = arch.vocab_size * h
    pc = ParamCount(embed=embed, lm_head=0 if arch.tie_word_embeddings else embed)
    gated = arch.model_type not in _NON_GATED
    n_exp = arch.num_experts
    moe_i = arch.moe_intermediate_size or arch.intermediate_size
    n_shared = int(t.get("n_shared_experts") or t.get("num_shared_experts")
                   or t.get("moe_num_shared_experts") or 0)
    shared_i = arch.shared_expert_intermediate_size or (
        n_shared * moe_i if n_shared else int(t.get("shared_intermediate_size") or 0))
    pattern = t.get("hybrid_override_pattern") if arch.model_type == "nemotron_h" else None
    kv_shared_from = arch.num_layers - int(t.get("num_kv_shared_layers") or 0)
    ple = int(t.get("hidden_size_per_layer_input") or 0)
    nas = nas_ffn_sizes(arch)
    for i, layer in enumerate(arch.layers):
        if arch.loop_caches_from and i >= arch.loop_caches_from:
            pc.layers.append(LayerParams())  # a later loop's cache: the weights are shared
            continue
        # two norms; Gemma 2/3 sandwich each block with two more (pre/post-feedforward)
        lp = LayerParams(replicated=(4 if arch.model_type in _FOUR_NORMS else 1 if (
            arch.model_type in _MIXER_ONLY or arch.half_block_layers) else 2) * h)
        if isinstance(layer, AttnLayer):
            if layer.parallel_state is not None:
                lp.state = _state_params(layer.parallel_state, h, t=t)
                lp.split += lp.state
                _one_group_whole(layer.parallel_state, h, lp, _conv_bias(t))
            s, r, kv = _attn_params(t, arch, layer)
            lp.split += s
            lp.replicated += r
            if layer.kind == "mla":
                lp.repl_quant = _mla_replicated_linear(t, h, bool(layer.indexer_bytes))
                lp.mla_up = int(t["kv_lora_rank"]) * arch.num_attention_heads * (
                    int(t.get("qk_nope_head_dim") or 0)
                    + int(t.get("v_head_dim") or t.get("qk_nope_head_dim") or 0))
                lp.mla_q = (int(t.get("q_lora_rank") or 0) or h) * arch.num_attention_heads * (
                    int(t.get("qk_nope_head_dim") or 0) + int(t.get("qk_rope_head_dim") or 0))
            lp.kv_proj = kv
            lp.kv_heads = layer.num_kv_heads
        elif isinstance(layer, StateLayer) and arch.model_type == "plamo2":
            lp.state = _plamo2_mixer(layer, h)
            lp.split += lp.state
        elif isinstance(layer, StateLayer):
            lp.state = _state_params(layer, h, t=t, full_rank_gate=bool((t.get(
                "linear_attn_config") or {}).get("use_full_rank_gate") or (
                    arch.model_type == "bailing_hybrid" and t.get("no_kda_lora"))))
            lp.split += lp.state
            _one_group_whole(layer, h, lp, _conv_bias(t))
        elif arch.model_type.startswith("gemma4") and kv_shared_from <= i:
            _kv_sharing_attn(t, arch, i, lp)
        if ple:  # `per_layer_input_gate` (h -> ple), `per_layer_projection` (ple -> h)
            lp.replicated += 2 * h * ple  # are ReplicatedLinear (gemma4.py, 0.21-0.33)
        if pattern is not None:
            sym = pattern[i]
            if sym == "-":
                lp.mlp = 2 * h * arch.intermediate_size
            elif sym == "E":
                latent = int(t.get("moe_latent_size") or h)  # experts work in a latent space
                lp.expert += n_exp * 2 * latent * moe_i
                lp.router = h * n_exp
                lp.replicated += lp.router
                lp.mlp = 2 * h * shared_i
                if latent != h:  # `NemotronHMoE`: fc1/fc2_latent_proj are ReplicatedLinear,
                    lp.replicated += 2 * h * latent  # 16-bit in NVIDIA's FP8/NVFP4 releases
            lp.split += lp.mlp
            pc.layers.append(lp)
            continue
        if arch.model_type in _MIXER_ONLY:
            pass  # `MambaDecoderLayer` / `Mamba2DecoderLayer`: the mixer and one norm
        elif arch.model_type in ("granitemoehybrid",) and not n_exp:
            inter = int(t.get("shared_intermediate_size") or arch.intermediate_size)
            lp.mlp = 3 * h * inter
        elif _is_moe_layer(t, i, n_exp):
            latent = int(t.get("routed_expert_hidden_size") or h)  # Kimi-K3 latent experts
            second = _second_experts(t, i, h)
            lp.expert += n_exp * 3 * latent * moe_i + second
            # the gate, and ERNIE-4.5-VL's vision-expert gate beside it
            lp.router = h * n_exp + (h * t["moe_num_experts"][1] if second else 0)
            lp.replicated += lp.router
            if t.get("topk_method") == "noaux_tc":  # DeepSeek-V3 e_score_correction_bias
                lp.replicated += n_exp
            lp.mlp = 3 * h * shared_i + (h if shared_i and arch.model_type.startswith(
                "qwen") else 0) + (2 * h * latent if latent != h else 0)
            if arch.model_type.startswith("gemma4"):  # `Gemma4DecoderLayer`: a dense MLP
                lp.mlp += 3 * h * arch.intermediate_size  # next to the experts in every layer
        elif nas is not None:  # Nemotron-NAS / DeciLM: each block's own FFN (or none)
            lp.mlp = 3 * h * nas[i]
            lp.replicated -= h * ((layer is None) + (nas[i] == 0))  # norms of no-op parts
        else:
            # MiniMax-M3's dense layers: `dense_intermediate_size` (minimax_m3/nvidia/model.py)
            inter = int(t.get("intermediate_size_mlp") or (
                t.get("dense_intermediate_size") if n_exp else None) or mlp_width(arch, i))
            if t.get("use_double_wide_mlp") and layer is None:
                inter *= 2  # Gemma-3n/4: KV-sharing layers carry a double-width MLP
            lp.mlp = (3 if gated else 2) * h * inter
        lp.split += lp.mlp
        if arch.loop_caches_from:  # `LoopGateProjection`: head_dim -> heads with bias
            lp.split += (layer.head_size + 1) * arch.num_attention_heads
        pc.layers.append(lp)
    if pc.layers:  # the final norm, on the last pipeline stage (Falcon's LayerNorm: + bias)
        pc.layers[-1].replicated += h * (2 if arch.model_type in ("falcon", "RefinedWeb",
                                                                  "RefinedWebModel") else 1)
    if ple:  # Gemma-3n/4 per-layer embeddings: one vocab x ple table per layer + projection
        vocab_ple = int(t.get("vocab_size_per_layer_input") or arch.vocab_size)
        pc.embed += vocab_ple * ple * arch.num_layers + h * ple * arch.num_layers
    if arch.vision_config:
        pc.vision = _vision_params(arch.vision_config, arch.hidden_size) + projector_params(
            arch.mm_projector, arch.hidden_size)
        pc.vision_whole = tower_whole(arch.vision_config, arch.mm_projector, arch.hidden_size)
    if arch.audio_config:
        pc.audio = _audio_params(arch.audio_config)
    return pc


def _kv_sharing_attn(t: dict, arch: ModelArch, i: int, lp: LayerParams) -> None:
    """A Gemma 4 KV-sharing layer keeps no KV cache but vLLM still builds its attention
    (`Gemma4Attention`): q_proj, o_proj and q_norm always; K/V (qkv_proj, k_norm) too up to
    0.29, `kv_unused` (0.30 builds `q_proj` alone and drops the checkpoint's k/v; gemma4.py
    in the 0.21-0.29 and 0.30-0.33 wheels). Full-attention layers use global_head_dim."""
    types = t.get("layer_types") or []
    full = i < len(types) and types[i] == "full_attention"
    hd = int((t.get("global_head_dim") if full else None) or t.get("head_dim") or 0)
    h, heads = arch.hidden_size, arch.num_attention_heads
    lp.split += 2 * h * heads * hd
    lp.replicated += hd
    lp.kv_unused = 2 * h * int(t.get("num_key_value_heads") or 1) * hd + hd


def _audio_params(ac: dict) -> int:
    """A conformer audio encoder (Gemma 3n / Gemma 4 `audio_config`): per block two 4x
    feed-forward modules (16 h²), attention with q/k/v/out and a relative-position
    projection (5 h²) and a light convolution (3 h²), plus the projection to
    `output_proj_dims`. An estimate: the subsampling convolutions are left out."""
    h = int(ac.get("hidden_size") or 0)
    n = int(ac.get("num_hidden_layers") or ac.get("conf_num_hidden_layers") or 0)
    return n * 24 * h * h + h * int(ac.get("output_proj_dims") or 0)


def vision_shape(vc: dict) -> tuple[int, int, int, bool]:
    """A ViT tower's (hidden, intermediate, blocks, gated MLP). Gemma 4's tower has a gated
    GELU MLP (gate, up and down; transformers `Gemma4VisionMLP`)."""
    vh = int(vc.get("embed_dim") or vc.get("hidden_size") or vc.get("vt_hidden_size") or 0)
    vi = int(vc.get("intermediate_size") or vc.get("vt_intermediate_size")
             or float(vc.get("mlp_ratio") or 4) * vh)
    vl = int(vc.get("num_hidden_layers") or vc.get("depth") or vc.get("vt_num_hidden_layers") or 0)
    gated = str(vc.get("hidden_act", "")).lower() in ("silu", "swiglu") or \
        vc.get("model_type") == "gemma4_vision"
    return vh, vi, vl, gated


def _vision_params(vc: dict, text_hidden: int) -> int:
    """A ViT tower: blocks (attention 4d², a 2- or 3-matrix MLP, biases, two LayerNorms), patch
    and learned position embeddings, Qwen-VL's patch merger(s) (vLLM qwen2_5_vl.py /
    qwen3_vl.py: one `merger` plus one per `deepstack_visual_indexes` entry) and Llama 4's
    pixel-shuffle adapter and projector (mllama4.py `Llama4VisionPixelShuffleMLP`: intermediate
    -> projector_input_dim -> projector_output_dim; `Llama4MultiModalProjector`:
    vision_output_dim -> the text hidden size; 61M parameters), and MoonViT's position table
    and patch-merging projector (Kimi-VL, Kimi-K2.5: 59M parameters). LLaVA-style wrappers'
    projectors: `projector_params`."""
    vh, vi, vl, gated = vision_shape(vc)  # gated: Qwen2.5-VL, Pixtral
    # biases and norms: qkv, proj and MLP biases; two LayerNorms, or RMSNorms when gated
    small = 7 * vh + 2 * vi if gated else 9 * vh + vi
    if vc.get("model_type") == "pixtral":  # no biases: two RMSNorms (pixtral.py), + ln_pre
        small = 2 * vh
    n = vl * (4 * vh * vh + (3 if gated else 2) * vh * vi + small)
    if vc.get("model_type") == "pixtral":
        n += vh
    patch = int(vc.get("patch_size") or 0)
    if patch:
        frames = int(vc.get("temporal_patch_size") or 1)
        n += int(vc.get("in_channels") or 3) * frames * patch**2 * vh
        if vc.get("num_position_embeddings"):
            n += int(vc["num_position_embeddings"]) * vh
        elif vc.get("position_embedding_size"):  # Gemma 4: one table per image axis
            n += 2 * int(vc["position_embedding_size"]) * vh
        elif vc.get("image_size") and vc.get("model_type") != "pixtral":  # Pixtral: 2-D RoPE
            n += (int(vc["image_size"]) // patch) ** 2 * vh
    if vc.get("model_type") == "llama4_vision_model":
        # transformers' `Llama4VisionConfig` defaults fill absent keys; null is no width
        pin, pout, vout = (_width(vc, k, d) for k, d in (
            ("projector_input_dim", 4096), ("projector_output_dim", 4096),
            ("vision_output_dim", 7680)))
        n += vi * pin + pin * pout + vout * text_hidden
        n += 2 * vh  # the class embedding and its position
    kernel = vc.get("merge_kernel_size")
    if isinstance(kernel, list) and len(kernel) == 2 and all(
            isinstance(k, int) and not isinstance(k, bool) and k > 0 for k in kernel):
        # MoonViT (Kimi-VL, Kimi-K2.5 / K3): a 2-D position table [h, w, d]
        # and the patch-merging projector: LayerNorm, then Linear(m, m) and Linear(m, text)
        # with biases over m = kh x kw x d (kimi_vl.py `KimiVLMultiModalProjector`,
        # kimi_k25_vit.py `KimiK25MultiModalProjector`; ReplicatedLinear)
        def count(key: str) -> int:
            v = vc.get(key)
            return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0
        n += count("init_pos_emb_height") * count("init_pos_emb_width") * vh
        m, text = kernel[0] * kernel[1] * vh, count("text_hidden_size") or text_hidden
        n += 2 * vh + m * m + m + m * text + text
    merge = int(vc.get("spatial_merge_size") or 0)
    out = int(vc.get("out_hidden_size") or (vc.get("hidden_size") if vc.get("embed_dim") else 0)
              or 0)
    if merge and out:
        m = merge * merge * vh
        n += (1 + len(vc.get("deepstack_visual_indexes") or [])) * (m * m + m * out + m + out + vh)
    return n


def projector_params(p: dict | None, text: int) -> int:
    """A LLaVA-style wrapper's projector (`arch.mm_projector`): LLaVA's linear_1 (tower ->
    text) and linear_2 (text -> text) with their biases, plus LLaVA-Next's image_newline;
    Mistral 3's RMSNorm and patch merger (merge² x d -> d, no bias) before them (35.65M
    parameters for Mistral-Small-3.1: 1,024 x 4 -> 1,024 -> 5,120 -> 5,120); Gemma 3's
    [vision, text] projection and its norm. vLLM splits LLaVA's and Mistral 3's linears over
    TP (Column/RowParallelLinear) and keeps the rest whole."""
    if not p:
        return 0
    vin = int(p["in"])
    if p["kind"] == "gemma3":
        return vin * text + vin
    n = vin * text + text * text + (2 * text if p["bias"] else 0)
    if p["kind"] == "mistral3":
        n += vin + p["merge"] ** 2 * vin * vin
    return n + (text if p["newline"] else 0)


def tower_whole(vc: dict, p: dict | None, text: int) -> int:
    """The projector parameters vLLM builds whole on every TP rank while the tower beside them
    is split (0.33 wheel): MoonViT's patch-merging projector (`ReplicatedLinear`,
    kimi_vl.py / kimi_k25_vit.py; 54.2M parameters for Kimi-K2.5, 108 MB in bf16 on every
    GPU), Mistral 3's patch merger (`nn.Linear`; its two linears are TP-split) and Gemma 3's
    projection (`nn.Parameter`)."""
    kernel = vc.get("merge_kernel_size")
    if isinstance(kernel, list) and len(kernel) == 2 and all(
            isinstance(k, int) and not isinstance(k, bool) and k > 0 for k in kernel):
        vh = vision_shape(vc)[0]
        out = vc.get("text_hidden_size")
        out = out if isinstance(out, int) and not isinstance(out, bool) and out > 0 else text
        m = kernel[0] * kernel[1] * vh
        return 2 * vh + m * m + m + m * out + out
    if not p:
        return 0
    vin = int(p["in"])
    if p["kind"] == "gemma3":
        return vin * text + vin
    if p["kind"] == "mistral3":
        return vin + p["merge"] ** 2 * vin * vin
    return 0


def topk_buffer_bytes(arch: ModelArch, max_num_batched_tokens: int) -> int:
    """The top-k index buffer a sparse-attention model reserves at build for its indexer
    layers to share: [max_num_batched_tokens, index_topk] int32 on every GPU
    (`topk_indices_buffer`: deepseek_v2.py 0.11-0.33, deepseek_v4.py 0.20+, the 0.24+
    deepseek_v32 / deepseek_v4 / glm5 model files). DeepSeek-V3.2 at 8,192 tokens: 64 MiB."""
    topk = arch.text_config.get("index_topk")
    if not arch.is_sparse_mla or not isinstance(topk, int) or isinstance(topk, bool) or topk <= 0:
        return 0
    return max_num_batched_tokens * topk * 4


def deepstack_buffer_bytes(arch: ModelArch, max_num_batched_tokens: int,
                           dtype_bytes: int) -> int:
    """Qwen3-VL's deepstack input buffers, built with the model (qwen3_vl.py
    `deepstack_input_embeds`: one [max_num_batched_tokens, text hidden] tensor per
    `deepstack_visual_indexes` entry, 0.11-0.33): 3 x 8,192 x 4,096 x 2 B = 192 MiB for
    Qwen3-VL-8B; none for Qwen3.5, whose list is empty."""
    levels = (arch.vision_config or {}).get("deepstack_visual_indexes")
    if not isinstance(levels, list) or not any(
            a.startswith("Qwen3VL") for a in arch.architectures):
        return 0
    return len(levels) * max_num_batched_tokens * arch.hidden_size * dtype_bytes


def ple_buffer_bytes(arch: ModelArch, max_num_batched_tokens: int, dtype_bytes: int) -> int:
    """Gemma 4's wrapper allocates its per-layer-input buffer at load, on the embedding's GPU
    (`Gemma4ForConditionalGeneration.__init__`: `per_layer_embeddings = torch.zeros(
    max_num_batched_tokens, layers, ple)` in the model dtype, 0.21-0.33)."""
    ple = int(arch.text_config.get("hidden_size_per_layer_input") or 0)
    if not ple or "Gemma4ForConditionalGeneration" not in arch.architectures:
        return 0
    return max_num_batched_tokens * arch.num_layers * ple * dtype_bytes


def fast_prefill_buffer_bytes(arch: ModelArch, max_num_batched_tokens: int, dtype_bytes: int,
                              release: tuple[int, int]) -> int:
    """`--kv-sharing-fast-prefill`'s buffers, built with the text model (a helper's reading
    of `Gemma4Model.__init__`, 0.20-0.33, and `Gemma3nTextModel.__init__`, 0.11+): int64
    positions, the hidden states (Gemma-3n: x altup_num_inputs) and, with per-layer inputs,
    [tokens, layers, ple], for the token budget N. Other models allocate nothing (the
    runner's N int32 logits indices aside)."""
    n, t = max_num_batched_tokens, arch.text_config
    ple = int(t.get("hidden_size_per_layer_input") or 0)
    if arch.model_type in ("gemma4", "gemma4_text") and release >= (0, 20):
        width = 1
    elif arch.model_type in ("gemma3n", "gemma3n_text") and release >= (0, 11):
        width = int(t.get("altup_num_inputs") or 1)
    else:
        return 0
    return n * 8 + n * arch.hidden_size * width * dtype_bytes + \
        n * arch.num_layers * ple * dtype_bytes


# attention without rotary embeddings although the config carries a rope_theta:
# `NemotronHAttention` creates no rotary embedding (nemotron_h.py, 0.16-0.20.2 wheels)
_NO_ROPE = {"nemotron_h"}
# models whose code builds a rope (theta 10,000) even when the config names none: transformers 5
# fills rope_theta for OLMo Hybrid (vLLM 0.32+); PLaMo2's and the Ling/Ring layers' `get_rope`
# default it
_ALWAYS_ROPE = frozenset({"plamo2", "olmo_hybrid", "bailing_hybrid"}) | MINIMAX01


# decoder layers with four RMSNorms (gemma2.py / gemma3.py `Gemma2DecoderLayer`: input,
# post-attention, pre- and post-feedforward)
_FOUR_NORMS = frozenset({"gemma2", "gemma3_text", "gemma3", "plamo2"})
# models whose vLLM implementation rotates the config's `rotary_dim` (gpt_j.py; minimax_m2.py
# as partial_rotary_factor = rotary_dim / head_dim, 0.12-0.33)
_ROTARY_DIM = frozenset({"gptj", "minimax_m2"})


def mrope_positions_factor(arch: ModelArch, release: tuple[int, ...]) -> int:
    """How many times max_position_embeddings an MRoPE cache covers: 4 from 0.7.2, as Qwen2.5-VL's
    video positions run past the token count (`MRotaryEmbedding.cache_max_position_num`);
    from 0.32 Qwen3-VL / Qwen3.5 pass 1 unless video pruning is on, which kvplan does not
    model (qwen3_vl.py `mrope_positions_factor`, used by qwen3_vl_moe.py and qwen3_5.py)."""
    if release < (0, 7, 2):
        return 1
    one = arch.model_type.startswith(("qwen3_vl", "qwen3_5")) or any(
        a.startswith(("Qwen3VL", "Qwen3_5")) for a in arch.architectures)
    return 1 if one and release >= (0, 32) else 4


def rope_cache_bytes(arch: ModelArch, dtype_bytes: int, *, mla_fp32: bool = False,
                     indexer_rope: bool = False, mrope_factor: int = 1) -> int:
    """The rotary cos/sin cache vLLM builds on every GPU at load ("Model loading took" counts
    it): [length, rotary_dim] in the model dtype, one per distinct rope, since `get_rope`
    shares equal ones (rotary_embedding/base.py `_compute_cos_sin_cache`).

    MLA's `DeepseekScalingRotaryEmbedding` keeps its cache in fp32 for FlashInfer's kernel
    when its custom op is on (`mla_fp32`: `mla_rope_fp32`); a sparse-MLA indexer with a
    different NeoX style gets a cache of its own (`indexer_rope`: `indexer_rope_cache`).

    The length is max_position_embeddings, times the factor for linear scaling. YaRN uses the
    original length times the factor, and longrope adds the original length. Gemma 3 keeps a
    local and a global cache, and per-layer-type ropes (Gemma 4) use each type's head size,
    all of it for the "proportional" type (gemma4_rope.py). Llama 4's 10M positions cost 2.5
    GiB per GPU, and Gemma 3's global cache, scaled 8x, costs 512 MiB. gpt-oss builds its
    cache in fp32 (32 MiB); MiMo-V2-Flash has a second one for `swa_rope_theta`. An MRoPE
    (`mrope_section`, default or YaRN) covers `mrope_factor` times its length
    (`mrope_positions_factor`): Qwen2.5-VL-7B's 128,000 x 4 positions, 125 MiB."""
    return sum(x.nbytes for x in rope_tables(arch, dtype_bytes, mla_fp32=mla_fp32,
                                             indexer_rope=indexer_rope,
                                             mrope_factor=mrope_factor))


@record(frozen=True)
class RopeTable:
    """One rotary cos/sin cache: [positions, dim] of `width`-byte elements; `yarn`: its
    cos and sin are scaled (a temporary each, `YaRNScalingRotaryEmbedding`)."""

    positions: int
    dim: int
    width: int
    yarn: bool = False

    @property
    def nbytes(self) -> int:
        return self.positions * self.dim * self.width


def rope_tables(arch: ModelArch, dtype_bytes: int, *, mla_fp32: bool = False,
                indexer_rope: bool = False, mrope_factor: int = 1,
                max_len: int = 0, release: tuple[int, ...] = (0, 33)) -> list[RopeTable]:
    """The caches `rope_cache_bytes` sums, one per distinct rope. `max_len`: the start's
    max_model_len, which bounds PLaMo2's."""
    t = arch.text_config
    attn = [x for x in arch.layers if isinstance(x, AttnLayer)]
    named = any(k in t for k in ("rope_theta", "rope_scaling", "rope_parameters"))
    if not attn or t.get("alibi") or arch.model_type in _NO_ROPE or not (
            named or arch.model_type in _ALWAYS_ROPE):
        return []
    if arch.model_type == "zamba2" and not t.get("use_mem_rope"):
        return []  # zamba2.py: a rope only with use_mem_rope (transformers' default False)
    if arch.model_type == "olmo_hybrid" and not named and release < (0, 32):
        # 0.18-0.31 load vLLM's own `OlmoHybridConfig`, which leaves rope_parameters None
        # without a rope key (no rotary embedding); transformers' class fills theta from 0.32
        return []
    if arch.model_type == "bailing_hybrid" and (0, 17) <= release < (0, 20, 1):
        dtype_bytes = 4  # bailing_moe_linear.py 0.17-0.20.0: both ropes `dtype=torch.float32`
    max_pos = int(t.get("max_position_embeddings") or 0)
    rp = t.get("rope_parameters") or t.get("rope_scaling") or {}
    if arch.model_type == "plamo2":  # plamo2.py: over min(max_position_embeddings, max_len)
        length = min(max_pos, max_len) if max_len else max_pos
        return [RopeTable(length, attn[0].head_size, dtype_bytes, False)]
    if arch.model_type in MINIMAX01:
        # minimax_text_01.py: fp32, rotary_dim of head_dim, over min(max_position_embeddings,
        # max_model_len) (the model copies max_model_len into its config)
        length = min(max_pos, max_len) if max_len else max_pos
        dim = int(t.get("rotary_dim") or attn[0].head_size)
        return [RopeTable(length, dim, 4, False)]
    if arch.model_type == "olmo_hybrid" and "rope_theta" in {**t, **rp} and (
            rp.get("rope_theta") if "rope_theta" in rp else t.get("rope_theta")) is None:
        return []  # olmo_hybrid.py: no rotary embedding while rope_theta is None
    lightning = [x for x in arch.layers if isinstance(x, StateLayer) and x.kind == "lightning"
                 and arch.model_type == "bailing_hybrid"]
    if lightning:  # `BailingMoELinearAttention`: its own neox rope over max_position_embeddings
        part = float(rp.get("partial_rotary_factor") or t.get("partial_rotary_factor") or 1)
        extra = [RopeTable(max_pos, int(lightning[0].head_dim * part), dtype_bytes, False)]
        return extra + rope_tables(replace(arch, layers=[x for x in arch.layers
                                                         if x not in lightning]),
                                   dtype_bytes, mla_fp32=mla_fp32, indexer_rope=indexer_rope,
                                   mrope_factor=mrope_factor, max_len=max_len,
                                   release=release)
    if attn[0].kind == DSV4:
        # DeepSeek-V4: fp32 caches of qk_rope_head_dim columns, one for the uncompressed
        # layers (rope_theta) if any and one for the compressed ones (compress_rope_theta), each of
        # original x factor = 1M positions (`DeepseekV4ScalingRotaryEmbedding`; 0.20.2
        # deepseek_v4.py, 0.33 deepseek_v4/common/rope.py)
        length = int(int(rp.get("original_max_position_embeddings") or max_pos)
                     * float(rp.get("factor") or 1.0))
        thetas = {t.get("compress_rope_theta") if getattr(x, "compress_ratio", 0) > 1
                  else t.get("rope_theta") for x in attn}
        return [RopeTable(length, int(t.get("qk_rope_head_dim") or 0), 4, True)] * len(thetas)
    by_type = {k: v for k, v in rp.items() if isinstance(v, dict)}  # per layer type
    ropes = [(k.split("_")[0], v) for k, v in by_type.items()] or [("", rp)]
    if (t.get("rope_local_base_freq") or t.get("swa_rope_theta")) and not by_type:
        # Gemma 3: the sliding layers' unscaled local rope; MiMo-V2-Flash: `swa_rope_theta`
        ropes.append((SLIDING, {}))
    if arch.model_type == "gpt_oss":  # `get_rope(..., dtype=torch.float32)` (gpt_oss.py)
        dtype_bytes = 4
    out = []
    for kind, r in ropes:
        layer = next((x for x in attn if x.kind == kind), attn[0])
        rtype = str(r.get("rope_type") or r.get("type") or "default")
        width = dtype_bytes
        if layer.kind == MLA:
            dim = int(t.get("qk_rope_head_dim") or 0)
            # deepseek_v2.py turns a scaled rope into `DeepseekScalingRotaryEmbedding`
            # ("deepseek_yarn"; not "deepseek_llama_scaling", attention_factor 1.0)
            if mla_fp32 and rtype != "default" and r.get("attention_factor") != 1.0:
                width = 4
        elif rtype == "proportional":
            dim = layer.head_size
        elif arch.model_type in _ROTARY_DIM and t.get("rotary_dim"):
            dim = int(t["rotary_dim"])
        else:
            part = float(r.get("partial_rotary_factor") or t.get("partial_rotary_factor") or 1)
            dim = int(r.get("rope_dim") or layer.head_size * part)
        scale = float(r.get("factor") or 1.0)
        original = int(r.get("original_max_position_embeddings") or max_pos)
        length = {"linear": max_pos * scale, "longrope": max_pos + original,
                  "su": max_pos + original, "yarn": original * scale,
                  "deepseek_yarn": original * scale}.get(rtype, max_pos)
        if "mrope_section" in r and rtype in ("default", "mrope", "yarn"):
            length *= mrope_factor  # `get_rope` builds an MRotaryEmbedding for these
        yarn = rtype in ("yarn", "deepseek_yarn") or (mla_fp32 and width == 4)
        out += [RopeTable(int(length), dim, width, yarn)] * (
            2 if indexer_rope and layer.kind == MLA else 1)
    return out


def mla_rope_fp32(arch: ModelArch, release: tuple[int, int], *, vendor: str, model_dtype: str,
                  custom_ops: bool) -> bool:
    """Whether MLA's rope cache stays fp32: `DeepseekScalingRotaryEmbedding.use_flashinfer`
    (0.16-0.33) holds when the op is enabled (`custom_ops`: compilation off, i.e.
    --enforce-eager, -O0 or breakable CUDA graphs, where `custom_ops` defaults to "all"),
    on CUDA, for a 16-bit model with a rope dim FlashInfer takes (64, 128, 256, 512), and
    then `RotaryEmbedding.__init__` skips `cache.to(dtype)`. FlashInfer is taken as installed
    (vLLM's images and wheels)."""
    dim = int(arch.text_config.get("qk_rope_head_dim") or 0)
    return (arch.is_mla and release >= (0, 16) and custom_ops and vendor == "nvidia"
            and model_dtype in ("bfloat16", "float16") and dim in (64, 128, 256, 512))


def indexer_rope_cache(arch: ModelArch, release: tuple[int, int]) -> bool:
    """A sparse-MLA indexer's own rope (deepseek_v2.py / deepseek_v32 `indexer_rope_emb`,
    0.12-0.33): NeoX style unless `indexer_rope_interleave` (0.13+; always in 0.12), while
    the attention's is not, so `get_rope` builds a second cache (DeepSeek-V3.2; GLM-5 sets
    the interleave and shares one)."""
    if not arch.is_sparse_mla or release < (0, 12):
        return False
    return release < (0, 13) or not arch.text_config.get("indexer_rope_interleave", False)


@record(frozen=True)
class WeightBytes:
    """Stored bytes per parameter for each part of a (possibly quantized) checkpoint."""

    linear: float  # attention / mixer projections (and the MLPs unless `mlp` is set)
    expert: float  # routed-expert projections
    other: float  # embeddings, norms, vision tower (and the LM head unless `lm_head` is set)
    mlp: float | None = None  # dense-MLP / shared-expert projections, where they differ
    lm_head: float | None = None  # a quantized LM head
    state: float | None = None  # Mamba / linear-attention mixer projections, where they differ
    repl: float | None = None  # replicated linears (MLA q_a / kv_a, V3.2 indexer) if different
    kv_b: float | None = None  # MLA kv_b_proj, if it differs from the attention projections

    def _or(self, value: float | None, default: float) -> float:
        return default if value is None else value

    mlp_bytes = property(lambda self: self._or(self.mlp, self.linear))
    state_bytes = property(lambda self: self._or(self.state, self.linear))
    repl_bytes = property(lambda self: self._or(self.repl, self.linear))
    kv_b_bytes = property(lambda self: self._or(self.kv_b, self.linear))
    lm_head_bytes = property(lambda self: self._or(self.lm_head, self.other))


def weight_bytes(arch: ModelArch, model_dtype_bytes: int,
                 quantization: str | None = None,
                 hf_quant: dict | None = None) -> WeightBytes:
    """Bytes per parameter by part, from `quantization_config`, ModelOpt's
    `hf_quant_config.json`, or `--quantization` (online quantization of a 16-bit checkpoint).

    AWQ/GPTQ: bits/8 plus an fp16 scale and a packed zero point per group (`wna16_stored`;
    what vLLM holds after repacking is `wna16_held_delta`); FP8: 1 byte, plus a block
    checkpoint's fp32 scale per block (128 x 128: 0.024 %; channel scales are negligible);
    NVFP4: 4 bits + an fp8 scale per 16; MXFP4: 4 bits + a scale per 32, routed experts only
    (gpt-oss); bitsandbytes: 4-bit NF4 (+ absmax per 64) unless 8-bit. Embeddings, LM head
    and norms stay in the model dtype.
    """
    q = dict(arch.quantization or {})
    if hf_quant:  # the file as the loader reads it (`Model.quant_file`) comes first
        q = {"quant_method": "modelopt", **(hf_quant.get("quantization") or hf_quant)}
    method = str(quantization or q.get("quant_method", "")).lower()
    d = float(model_dtype_bytes)
    bits = q.get("bits") or q.get("w_bit")
    lin: float = d
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin", "auto_awq", "auto_gptq",
                  "moe_wna16") and bits:  # moe_wna16: the same packed checkpoint
        lin = wna16_stored(q, bits)
    elif method in ("fp8", "fbgemm_fp8", "ptpc_fp8", "fp8_per_tensor", "fp8_per_block",
                    "fp8_per_channel", "int8_per_channel_weight_only"):
        lin = 1.0
        block = q.get("weight_block_size")  # a block-FP8 checkpoint's fp32 `weight_scale_inv`
        if method == "fp8" and not quantization and isinstance(block, list) and \
                len(block) == 2 and all(isinstance(b, int) and not isinstance(b, bool)
                                        and b > 0 for b in block):
            lin += 4 / (block[0] * block[1])
    elif method == "mxfp8":  # 8-bit values + one e8m0 scale per 32
        lin = 1.0 + 1 / 32
    elif method == "nvfp4_per_token":
        lin = NVFP4_BYTES
    elif method == "experts_int8":  # `ExpertsInt8Config`: the routed experts only
        return WeightBytes(linear=d, expert=experts_int8_bytes(arch), other=d)
    elif method.startswith("modelopt"):
        algo = str(q.get("quant_algo", "FP8")).upper()
        if algo == "MIXED_PRECISION" and q.get("quantized_layers"):
            return _modelopt_mixed(q, d)
        lin = _modelopt_bytes(algo, q.get("group_size"))
        # hf_quant_config.json's `exclude_modules`, or config.json's `ignore` (vLLM reads
        # either: `ModelOptQuantConfigBase.from_config`, fnmatch patterns both)
        excluded = q.get("exclude_modules") or q.get("ignore")
        if excluded:
            return _mixed_by_ignore(ignored_fractions(excluded, arch, globs=True), lin, d)
    elif method in ("nvfp4",):
        lin = NVFP4_BYTES
    elif method == "mxfp4":
        return WeightBytes(linear=d, expert=MXFP4_BYTES, other=d)
    elif method == "bitsandbytes":
        lin = 1.0 if q.get("load_in_8bit") else 0.5 + 4 / 64
    elif method == "compressed-tensors":
        for g in (q.get("config_groups") or {}).values():
            w = (g or {}).get("weights") or {}
            nb = w.get("num_bits")
            if nb:
                gs = int(w.get("group_size") or 0)
                if nb == 4 and w.get("type") == "float":
                    lin = 0.5 + 1 / (gs or 16)  # NVFP4: one fp8 scale per group
                elif nb < 8:
                    lin = nb / 8 + (2 / gs if gs else 0) + (nb / 8 / gs if gs and not
                                                            w.get("symmetric", True) else 0)
                else:
                    lin = nb / 8
                break
        if q.get("ignore"):
            return _mixed_by_ignore(ignored_fractions(q["ignore"], arch), lin, d)
    if str(arch.text_config.get("expert_dtype", "")).lower() == "fp4":
        # DeepSeek-V4 (`models/deepseek_v4/quant_config.py`): MXFP4 routed experts
        return WeightBytes(linear=lin, expert=MXFP4_BYTES, other=d)
    return WeightBytes(linear=lin, expert=lin, other=d)


# Module names that stand for each part of layer {i}, across the HF families kvplan sizes
_PART_MODULES = {
    "attn": ("self_attn.q_proj", "self_attn.o_proj", "self_attn.qkv_proj",
             "self_attn.q_a_proj", "self_attn.kv_a_proj_with_mqa", "self_attn.kv_b_proj",
             "self_attn.q_b_proj", "attention.wqkv", "attn.c_attn",
             "mixer.q_proj", "mixer.o_proj"),  # the last two: Nemotron-H attention layers
    "state": ("linear_attn.in_proj_qkvz", "linear_attn.in_proj_qkv", "linear_attn.out_proj",
              "mixer.in_proj", "mixer.out_proj", "mamba.in_proj", "mamba.out_proj",
              "self_attn.f_a_proj", "self_attn.b_proj"),  # the last two: Kimi's KDA layers
    "mlp": ("mlp.gate_proj", "mlp.down_proj", "mlp.shared_expert.gate_proj",
            "mlp.shared_experts.gate_proj", "feed_forward.gate_proj",
            "feed_forward.shared_expert.gate_proj", "mixer.shared_experts.up_proj"),
    "expert": ("mlp.experts.0.gate_proj", "mlp.experts.0.down_proj",
               "feed_forward.experts.0.gate_proj", "mixer.experts.0.up_proj",
               "block_sparse_moe.experts.0.w1"),
}
_LAYER_PREFIXES = ("model.layers.{i}.", "model.language_model.layers.{i}.",
                   "language_model.model.layers.{i}.", "backbone.layers.{i}.")


def _part_modules(arch: ModelArch) -> dict[str, list[tuple[str, float]]]:
    """Module names per part of a layer, with a weight each. MLA parts are weighted by their
    parameter counts (a checkpoint may keep q_b/kv_b 16-bit and quantize o_proj); elsewhere
    one matching name marks the part (weight 0 = any-match)."""
    parts = {k: [(m, 0.0) for m in v] for k, v in _PART_MODULES.items()}
    if arch.model_type.startswith("gemma4"):  # experts beside the MLP (gemma4.py `.experts`)
        parts["expert"] = [("experts.0.gate_proj", 0.0)]
    parts["mla_a"], parts["kv_b"] = [], []
    t = arch.text_config
    if any(isinstance(x, AttnLayer) and x.kind == MLA for x in arch.layers):
        h, heads = arch.hidden_size, arch.num_attention_heads
        nope, rope = int(t.get("qk_nope_head_dim") or 0), int(t.get("qk_rope_head_dim") or 0)
        v, kv_lora = int(t.get("v_head_dim") or nope), int(t["kv_lora_rank"])
        q_lora = int(t.get("q_lora_rank") or 0)
        d, n = int(t.get("index_head_dim") or 128), int(t.get("index_n_heads") or 64)
        parts["attn"] = [("self_attn.q_b_proj", q_lora * heads * (nope + rope)) if q_lora
                         else ("self_attn.q_proj", h * heads * (nope + rope)),
                         ("self_attn.kv_b_proj", kv_lora * heads * (nope + v)),
                         ("self_attn.o_proj", heads * v * h)]
        parts["mla_a"] = [("self_attn.q_a_proj", h * q_lora),
                          ("self_attn.kv_a_proj_with_mqa", h * (kv_lora + rope))]
        parts["kv_b"] = [("self_attn.kv_b_proj", 1.0)]
        if arch.is_sparse_mla:  # DeepSeek-V3.2's indexer
            parts["mla_a"] += [("self_attn.indexer.wq_b", q_lora * d * n),
                               ("self_attn.indexer.wk", h * d)]
    return parts


def ignored_fractions(ignore: list, arch: ModelArch, *, globs: bool = False) -> dict[str, float]:
    """Share of each part (attention, MLA replicated projections, mixer, MLP, experts) that
    an ignore list leaves unquantized, over the layers that have it, weighted by each layer's
    parameters of that part (a hybrid's four attention layers are all its attention).
    compressed-tensors (vLLM `compressed_tensors/utils.py should_ignore_layer`): 're:'-prefixed
    entries are regular expressions matched from the start of the module name, the rest exact
    names. `globs`: ModelOpt `exclude_modules`, fnmatch patterns (`modelopt.py
    is_layer_excluded`)."""
    exact, prefixes, regs = set(), [], []
    for x in map(str, ignore):
        if globs:
            body = x[:-1] if x.endswith("*") else x
            if any(c in body for c in "*?["):
                regs.append(fnmatch.translate(x))
            elif body != x:
                prefixes.append(body)  # "name*": a prefix, as most ModelOpt entries are
            else:
                exact.add(x)
        elif x.startswith("re:"):
            regs.append(x[3:])
        else:
            exact.add(x)
    pc = count_params(arch).layers
    sizes = {"attn": [x.split - x.mlp - x.state + x.kv_proj for x in pc],
             "state": [x.state for x in pc], "mlp": [x.mlp for x in pc],
             "expert": [x.expert for x in pc], "mla_a": [x.repl_quant for x in pc],
             "kv_b": [x.mla_up for x in pc]}
    parts = tuple((part, tuple(mods), tuple(sizes[part])) for part, mods in
                  _part_modules(arch).items())
    moe_layers = tuple(bool(x.expert) for x in pc)
    return dict(_fractions(frozenset(exact), tuple(prefixes), tuple(regs), parts, moe_layers))


@lru_cache(maxsize=64)
def _fractions(exact: frozenset[str], prefixes: tuple[str, ...], regs: tuple[str, ...],
               parts: tuple, moe_layers: tuple[bool, ...]) -> tuple[tuple[str, float], ...]:
    # one alternation, matched from the start like each entry (`re.match`)
    any_re = re.compile("|".join(f"(?:{r})" for r in regs)) if regs else None

    def hit(mod: str, i: int) -> bool:
        for name in (pre.format(i=i) + mod for pre in _LAYER_PREFIXES):
            if (name in exact or name.startswith(prefixes)
                    or (any_re is not None and any_re.match(name))):
                return True
        return False

    out = []
    for part, all_mods, sizes in parts:
        total = sum(w for _, w in all_mods)
        done = weight = 0.0
        for i, n in enumerate(sizes):
            if not n:
                continue
            mods = all_mods
            if part == "mlp":  # an MoE layer's MLP is its shared expert, a dense layer's not
                mods = [x for x in all_mods if ("shared" in x[0]) == moe_layers[i]] or mods
            if total:  # within a layer, weighted by module size
                share = sum(w * hit(m, i) for m, w in mods) / total
            else:
                share = float(any(hit(m, i) for m, _ in mods))
            done, weight = done + n * share, weight + n
        out.append((part, done / weight if weight else 0.0))
    return tuple(out)


def _mixed_by_ignore(f: dict[str, float], lin: float, d: float) -> WeightBytes:
    mix = {part: f[part] * d + (1 - f[part]) * lin for part in f}
    return WeightBytes(linear=mix["attn"], expert=mix["expert"], other=d, mlp=mix["mlp"],
                       state=mix["state"], repl=mix["mla_a"], kv_b=mix["kv_b"])


def _modelopt_bytes(algo: str, group_size: int | None = None) -> float:
    """Stored bytes per weight of one ModelOpt `quant_algo`."""
    algo = algo.upper()
    if "FP4" in algo:  # NVFP4, W4A16_NVFP4, W4A8_NVFP4_FP8: e2m1 + an fp8 scale per 16
        return 0.5 + 1 / int(group_size or 16)
    if algo.startswith("MXFP8"):  # e4m3 + an e8m0 scale per 32
        return 1 + 1 / 32
    if "W4" in algo or "INT4" in algo:  # W4A8_AWQ / W4A16_AWQ: int4 + an fp16 scale per group
        return 0.5 + 2 / int(group_size or 128)
    return 1.0  # FP8, FP8_PB_WO, INT8 (W8A8 SmoothQuant): one byte, scales negligible


_ROUTED_RE = re.compile(r"\.experts(\.|$)")  # `mlp.experts` (fused) or `experts.7.w1`
_MLP_RE = re.compile(r"(shared_experts?|(^|\.)(gate_up_proj|gate_proj|up_proj|down_proj|w[123]|"
                     r"fc[12]|c_fc|dense_h_to_4h|dense_4h_to_h))(\.|\*|$)")
_EXCLUDED_ATTN_RE = re.compile(r"(self_attn|attention|linear_attn|mixer|\battn)$")
_EXCLUDED_PROJ_RE = re.compile(r"_proj$")  # both matched after trailing `*` / `.` are cut


def _modelopt_mixed(q: dict, d: float) -> WeightBytes:
    """ModelOpt `MIXED_PRECISION`: each listed module names its own `quant_algo`; modules
    that are not listed and the `exclude_modules` stay in the model dtype. Bytes per weight
    are the mean over the listed modules of each part -- routed experts, MLP / shared-expert
    projections, attention / mixer projections, LM head -- with each excluded projection
    counted once in the model dtype (an excluded attention block as its four projections, an
    excluded MLP as its three). Names do not give module sizes, so within a part this is an
    estimate; a real checkpoint's safetensors headers replace it."""
    parts: dict[str, list[float]] = {"expert": [], "mlp": [], "linear": [], "lm_head": []}

    def part(name: str) -> str:
        if name.rsplit(".", 1)[-1] in ("lm_head", "head") and "layers" not in name:
            return "lm_head"
        if _ROUTED_RE.search(name):
            return "expert"
        return "mlp" if _MLP_RE.search(name) else "linear"

    for name, spec in q["quantized_layers"].items():
        if isinstance(spec, dict):
            parts[part(name)].append(
                _modelopt_bytes(str(spec.get("quant_algo", "")), spec.get("group_size")))
    for pat in q.get("exclude_modules") or []:
        pat = str(pat).rstrip("*").rstrip(".")
        if part(pat) == "lm_head":
            parts["lm_head"].append(d)
        elif _MLP_RE.search(pat + "."):
            parts["mlp"].extend([d] * (1 if _EXCLUDED_PROJ_RE.search(pat) else 3))
        elif "." in pat and _EXCLUDED_ATTN_RE.search(pat):
            parts["linear"].extend([d] * 4)
        elif _EXCLUDED_PROJ_RE.search(pat):
            parts["linear"].append(d)

    def mean(xs: list[float]) -> float | None:
        return sum(xs) / len(xs) if xs else None

    lin = mean(parts["linear"]) or d
    return WeightBytes(linear=lin, expert=mean(parts["expert"]) or lin, other=d,
                       mlp=mean(parts["mlp"]), lm_head=mean(parts["lm_head"]))


def experts_int8_bytes(arch: ModelArch) -> float:
    """Bytes per routed-expert parameter under online int8 (`Int8OnlineMoEMethod`,
    online/int8.py): 1 B, plus an fp32 scale per output row of w13 and w2."""
    h, i = moe_hidden(arch), arch.expert_intermediate_size or arch.intermediate_size
    w13 = 2 * i if moe_gated(arch) else i
    return 1.0 + 4 * (w13 + h) / max(1, w13 * h + h * i)


def moe_gated(arch: ModelArch) -> bool:
    """Whether the routed experts' activation is gated (w13 holds gate and up): not for
    Nemotron-H's relu2 experts (`NemotronHMoE`: `is_act_and_mul=False`, w13 is [E, I, K])."""
    return arch.model_type != "nemotron_h"


def trtllm_bf16_experts(arch: ModelArch) -> bool:
    """Whether FlashInfer's TRT-LLM kernel takes these 16-bit experts' activation: SiLU
    (gated) or ReLU² (non-gated) only (`TrtLlmBf16Experts._supports_activation`, 0.24-0.33);
    Gemma 4's gelu_tanh experts go to FlashInfer CUTLASS instead."""
    if not moe_gated(arch):
        return True  # Nemotron-H's relu2
    t = arch.text_config
    act = str(t.get("hidden_activation") or t.get("hidden_act") or "silu").lower()
    return act in ("silu", "swiglu", "swish")


def moe_hidden(arch: ModelArch) -> int:
    """The width the routed experts take in and give out: Nemotron-3's latent MoE projects
    the hidden state to `moe_latent_size` first (`SharedFusedMoE(hidden_size=...)`)."""
    return int(arch.text_config.get("moe_latent_size") or arch.hidden_size)


def fp8_tensor_experts(arch: ModelArch, hf_quant: dict | None = None) -> bool:
    """Whether the checkpoint's experts are FP8 with static per-tensor weight and input
    scales, vLLM's (kFp8StaticTensorSym, kFp8StaticTensorSym) MoE scheme: ModelOpt FP8,
    `fp8` with static activations and no weight blocks, compressed-tensors float8 with tensor
    strategies and static input activations."""
    algo = str(((hf_quant or {}).get("quantization") or {}).get("quant_algo", "")).upper()
    q = arch.quantization or {}
    method = str(q.get("quant_method", "")).lower()
    if algo == "FP8" or (method == "modelopt" and str(q.get("quant_algo", "")).upper() == "FP8"):
        return True
    if method == "fp8":
        return not q.get("weight_block_size") and q.get("activation_scheme") == "static"
    if method != "compressed-tensors":
        return False
    for g in (q.get("config_groups") or {}).values():
        w, x = (g or {}).get("weights") or {}, (g or {}).get("input_activations") or {}
        if all(v.get("num_bits") == 8 and v.get("type") == "float" and v.get("strategy")
               == "tensor" and not v.get("dynamic") for v in (w, x)):
            return True
    return False


CHANNEL_METHODS = ("fbgemm_fp8", "fp8_per_channel", "ptpc_fp8")


def channel_scaled(arch: ModelArch, quantization: str | None = None) -> bool:
    """Whether the 8-bit linears carry an fp32 scale per output row: compressed-tensors
    weights with strategy "channel" (`CompressedTensorsW8A8Fp8` / `W8A8Int8` create a
    `ChannelQuantScaleParameter [rows, 1]`; the MoE method `w13_weight_scale [E, 2I, 1]`,
    `w2_weight_scale [E, H, 1]`), FBGEMM FP8 and the per-channel online methods."""
    q = arch.quantization or {}
    method = str(quantization or q.get("quant_method", "")).lower()
    if method in CHANNEL_METHODS:
        return True
    if method != "compressed-tensors" or quantization:
        return False
    return any(((g or {}).get("weights") or {}).get("num_bits") == 8
               and ((g or {}).get("weights") or {}).get("strategy") == "channel"
               for g in (q.get("config_groups") or {}).values())


def channel_scale_rows(arch: ModelArch, lp: LayerParams, *, tp: int, local_experts: float,
                       expert_tp: int, shares: tuple[float, float, float, float, float],
                       shared_whole: bool = False) -> float:
    """Output rows of one layer's channel-scaled linears on one GPU, each quantized part
    weighted by its quantized share (attention, MLP, mixer, replicated, experts): a
    column-parallel linear's rows split over TP (params / hidden), a row-parallel one
    (o_proj, down_proj, out_proj) keeps all `hidden` rows on every rank; a routed expert has
    2I / expert-TP + hidden rows (gated)."""
    h = arch.hidden_size
    if not h:
        return 0.0
    attn, mlp, state, repl, expert = shares
    kv_local = lp.kv_proj * max(1, lp.kv_heads // tp) / lp.kv_heads if lp.kv_heads else 0
    q_o = lp.split - lp.mlp - lp.state  # q (column) + o (row), about equal in size
    rows = attn * ((q_o / 2 / tp + kv_local) / h + h) if q_o else 0.0
    if lp.mlp:  # gate/up column, down row (or whole on every rank)
        rows += mlp * (2 * lp.mlp / 3 / h / (1 if shared_whole and lp.expert else tp) + h)
    if lp.state:
        rows += state * (lp.state / 2 / h / tp + h)
    rows += repl * lp.repl_quant / h
    if lp.expert and arch.num_experts:
        i = arch.expert_intermediate_size or arch.intermediate_size
        gated = moe_gated(arch)
        rows += expert * local_experts * ((2 if gated else 1) * i / expert_tp + moe_hidden(arch))
    return rows


def _wna16_method(q: dict) -> str:
    """awq / gptq whichever kernel the checkpoint names (`*_marlin` is the same format)."""
    return str(q.get("quant_method", "")).lower().removesuffix("_marlin")


def _wna16_group(q: dict) -> int:
    return int(q.get("group_size") or q.get("q_group_size") or 128)


def wna16_stored(q: dict, bits: int) -> float:
    """An AWQ / GPTQ checkpoint's bytes per weight: `bits` packed into int32, an fp16 scale
    and a `bits`-wide zero point (packed int32 `qzeros`) per group (channelwise: none)."""
    g = _wna16_group(q)
    return bits / 8 + ((2 + bits / 8) / g if g > 0 else 0.0)


def wna16_held_delta(arch: ModelArch, cc: str, vendor: str, release: tuple[int, int],
                     expert_tp: int) -> tuple[float, float]:
    """What an AWQ / GPTQ weight holds after vLLM repacks it, less what it stored, in bytes per
    weight: (linears, routed experts). Read in the 0.11, 0.19, 0.20, 0.25, 0.30 and 0.33
    wheels (`choose_mp_linear_kernel`, `kernels/linear/mixed_precision/{marlin,machete}.py`,
    `gptq_marlin.py`, `awq_marlin.py` / `auto_awq.py`, `moe_wna16.py`):
    * Linears take Machete on compute capability 9.0 (groups -1/64/128; AWQ from 0.19,
      Marlin before) and Marlin elsewhere. Marlin frees a symmetric GPTQ layer's zero points
      (`marlin_make_empty_g_idx`: -bits/8/g); Machete turns AWQ's packed zeros into an fp16
      [K/g, N] tensor (`-w_s * zp`: +(2 - bits/8)/g) and keeps GPTQ as loaded.
    * Routed experts on Marlin MoE (the per-rank intermediate a multiple of max(64, g)): a
      GPTQ layer's zero points are made in the model dtype at N/8 columns up to 0.26 (0.25/g
      instead of 0.5/g) and kept as int32 from 0.27. Otherwise `MoeWNA16Method` halves the
      group until it divides the intermediate and hidden sizes and keeps no zero points for
      symmetric GPTQ (Qwen3-30B-A3B at TP8: groups of 32).
    ROCm kernels and asymmetric GPTQ are taken as stored; act-order's full-K scales on row
    layers at TP > 1 are `act_order_scales`."""
    q = arch.quantization or {}
    method = _wna16_method(q)
    bits = q.get("bits") or q.get("w_bit")
    g = _wna16_group(q)
    if method not in ("awq", "gptq") or not bits or vendor != "nvidia" or g <= 0:
        return 0.0, 0.0
    sym = method == "gptq" and q.get("sym", True)
    zeros = bits / 8 / g  # a packed zero point per group, per weight
    machete = cc == "9.0" and g in (64, 128) and (method == "gptq" or release >= (0, 19))
    if machete:
        lin = (2 / g - zeros) if method == "awq" else 0.0
    else:
        lin = -zeros if sym else 0.0
    expert = 0.0
    inter = (arch.moe_intermediate_size or arch.intermediate_size) // max(expert_tp, 1)
    if sym and arch.num_experts and inter:
        if inter % max(64, g) == 0:  # Marlin MoE
            expert = -zeros / 2 if release < (0, 27) else 0.0
        else:
            g2 = g
            while g2 > 1 and (inter % g2 or arch.hidden_size % g2):
                g2 //= 2
            expert = 2 / g2 - 2 / g - zeros
    return lin, expert


def act_order_scales(arch: ModelArch, lp: LayerParams, layer: object, tp: int,
                     release: tuple[int, int]) -> int:
    """Bytes a GPTQ act-order (`desc_act`) layer holds per rank beyond its TP share of the
    scales, to 0.29: `marlin_repeat_scales_on_all_ranks` (act_order, or channelwise on a row
    layer; 0.6-0.29 marlin_utils.py) loads the whole-K fp16 scales of the row-parallel
    o_proj and down_proj on every rank (ExLlama's `-q gptq` path does the same). Zero points
    (kept by ExLlama and asymmetric GPTQ) and routed experts are not counted. Llama-3-70B
    GPTQ at TP8: 917,504 + 3,211,264 B a layer."""
    q = arch.quantization or {}
    g = _wna16_group(q)
    if (tp <= 1 or release >= (0, 30) or not q.get("desc_act") or g <= 0
            or _wna16_method(q) != "gptq"):
        return 0
    h = arch.hidden_size
    ks = []
    if isinstance(layer, AttnLayer) and layer.kind not in (MLA, DSV4):
        ks.append(arch.num_attention_heads * layer.head_size)  # o_proj
    inter = mlp_intermediate(arch, lp)
    if inter:
        ks.append(inter)  # down_proj (a dense MLP or the shared expert)
    return int(sum(k // g * h * 2 * (1 - 1 / tp) for k in ks))


def mxfp4_hopper_extra(arch: ModelArch, expert_tp: int, release: tuple[int, int]) -> int:
    """Bytes an MXFP4 expert holds on Hopper's Triton path beyond its padded weights, per
    expert and layer (the 0.11 and 0.28-0.33 wheels): the w13 / w2 biases widened to fp32
    (`convert_gpt_oss_weight_to_mxfp4_moe_kernel_format`, then `replace_parameter`), the
    swizzled block scales with their group count padded to a multiple of 4 (0.26+,
    `_swizzle_mxfp4`) and their rows to 256 (`HopperMXScaleLayout`, 8 warps), and w2's
    packed rows to 32 bytes (`HopperMXValueLayout`). gpt-oss-120b at TP1: 64,000 B, 0.27 GiB
    in all (0.20 GiB before 0.26)."""
    def up(n: int, m: int) -> int:
        return -(-n // m) * m

    h = arch.hidden_size
    inter = up((arch.moe_intermediate_size or arch.intermediate_size) // expert_tp, 64)
    k13, k2 = h // 32, inter // 32
    k13p, k2p = (up(k13, 4), up(k2, 4)) if release >= (0, 26) else (k13, k2)
    scales = (up(2 * inter, 256) * k13p - 2 * inter * k13) + (up(h, 256) * k2p - h * k2)
    biases = (2 * inter + h) * 2
    return scales + biases + h * (up(inter // 2, 32) - inter // 2)


def mxfp4_bias_extra(arch: ModelArch, expert_tp: int, cc: str, vendor: str,
                     release: tuple[int, int]) -> int:
    """Bytes an MXFP4 expert gains per layer where vLLM widens its w13 / w2 biases to fp32
    and the kernel is not Hopper's (`mxfp4_hopper_extra`): FlashInfer's TRT-LLM kernels on
    SM100 and the Triton / AITER kernels on ROCm (`convert_gpt_oss_weight_to_mxfp4_moe_
    kernel_format`, 0.20-0.33 fused_moe/oracle/mxfp4.py; `Mxfp4MoEMethod.
    process_weights_after_loading` in 0.11-0.19), over the padded widths `expert_padding`
    gives. Marlin (Ampere, Ada, SM12x) keeps them bf16. gpt-oss-120b on one B200 at 0.33:
    (2 x 2,944 + 3,072) x 2 B = 17,920 B, 79 MiB over 128 experts and 36 layers."""
    def up(n: int, m: int) -> int:
        return -(-n // m) * m

    h = arch.hidden_size
    inter = (arch.moe_intermediate_size or arch.intermediate_size) // expert_tp
    if vendor == "amd":
        m = 128 if (0, 12) <= release < (0, 19) and cc != "gfx950" else 256
        hp, ip = up(h, m), up(inter, m)
    elif cc_major(cc) == 10:
        hp, ip = up(h, 256), up(inter, 128 if release >= (0, 27) else 256)
    else:
        return 0
    return (2 * ip + hp) * 2


def expert_padding(arch: ModelArch, tp: int, quantization: str | None = None,
                   cc: str = "9.0", scales_kept: bool = False, *, vendor: str = "nvidia",
                   release: tuple[int, int] = (0, 33)) -> float:
    """The byte multiplier for MXFP4 routed experts as vLLM holds them
    (`mxfp4_round_up_hidden_size_and_intermediate_size`, 0.19-0.33; `Mxfp4MoEMethod.
    create_weights` before; wheels 0.11-0.33):
    * Ampere (Marlin): hidden to a multiple of 256, the per-rank intermediate to 128.
    * Blackwell (TRT-LLM): hidden to 256, the intermediate to 256 up to 0.26, 128 from 0.27.
    * Hopper (OpenAI's Triton `matmul_ogs`): the intermediate to 64, the hidden as it is.
      Up to 0.24 the original block scales stayed beside their swizzled copies
      (`scales_kept`; 0.25 `del layer.w13_weight_scale`), one more byte per 32 weights.
    * ROCm (OpenAI's Triton kernels, or AITER): both to 256; 0.12-0.18 to 128 except on
      gfx950 (`get_padding_alignment`). gpt-oss-120b's 2,880 becomes 3,072: +7.8 GiB at TP1.
    Real Hopper loads of gpt-oss-20b/120b with 0.11: 13.47/64.38 GiB."""
    dims = mxfp4_padded_dims(arch, tp, quantization, cc, vendor=vendor, release=release)
    if dims is None:
        return 1.0
    (h, hp), (inter, ip) = (arch.hidden_size, dims[0]), (
        (arch.moe_intermediate_size or arch.intermediate_size) // tp, dims[1])
    # Hopper: 0.5 B a weight + a 1-byte scale per 32, the scale held twice up to 0.24
    kept = (0.5 + 2 / 32) / (0.5 + 1 / 32) if scales_kept and cc_major(cc) == 9 and \
        vendor != "amd" else 1.0
    return (hp / h) * (ip / inter) * kept


def mxfp4_padded_dims(arch: ModelArch, tp: int, quantization: str | None = None,
                      cc: str = "9.0", *, vendor: str = "nvidia",
                      release: tuple[int, int] = (0, 33)) -> tuple[int, int] | None:
    """(hidden, per-rank intermediate) of MXFP4 experts as vLLM pads them for the kernel
    (`expert_padding`), which also sizes the kernel's workspace (None: not MXFP4 experts)."""
    method = str(quantization or (arch.quantization or {}).get("quant_method", "")).lower()
    if method != "mxfp4" or not arch.num_experts:
        return None
    h = arch.hidden_size
    inter = (arch.moe_intermediate_size or arch.intermediate_size) // tp
    if not h or not inter:
        return None

    def up(n: int, m: int) -> int:
        return -(-n // m) * m
    if vendor == "amd":
        m = 128 if (0, 12) <= release < (0, 19) and cc != "gfx950" else 256
        return up(h, m), up(inter, m)
    major = cc_major(cc)
    if major == 9:
        return h, up(inter, 64)
    if major == 10:
        return up(h, 256), up(inter, 128 if release >= (0, 27) else 256)
    return up(h, 256), up(inter, 128)
