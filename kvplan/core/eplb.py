"""Expert parallel load balancing (`--enable-eplb`, `--eplb-config`): the redundant experts
every rank holds and the state vLLM keeps for rebalancing (0.33
`distributed/eplb/eplb_state.py EplbState.add_model`, the 0.11-0.33 wheels)."""

from __future__ import annotations

from typing import Any

from kvplan.errors import BadInput
from kvplan.units import parse_json_object

MAX_EXPERT_REDUNDANCY = 1023  # `EplbState.add_model`: slots per logical expert = 1,024


def parse_eplb_config(text: str, *, what: str = "--eplb-config") -> dict[str, Any]:
    """The `EngineArgs` fields an `--eplb-config` JSON sets (`EPLBConfig`: window_size > 0,
    num_redundant_experts >= 0; the rest does not change memory)."""
    raw = parse_json_object(text, what=what, hint='e.g. \'{"num_redundant_experts": 32}\'')
    out: dict[str, Any] = {}
    for key, field, low in (("num_redundant_experts", "eplb_num_redundant_experts", 0),
                            ("window_size", "eplb_window_size", 1)):
        if raw.get(key) is None:
            continue
        v = raw[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise BadInput(f"{what}: {key} {v!r} must be an integer >= {low}")
        out[field] = v
    return out


def check_eplb(*, enabled: bool, redundant: int, expert_parallel: bool, ranks: int,
               experts: int, version_ok: bool, version: str) -> None:
    """What vLLM's `ParallelConfig.__post_init__` refuses (0.33)."""
    if not enabled:
        if redundant:
            raise BadInput(f"num_redundant_experts is set to {redundant} but EPLB is not "
                           "enabled", hint="add --enable-eplb or drop it",
                           flag="enable_eplb")
        return
    if not version_ok:
        raise BadInput(f"kvplan models --enable-eplb from vLLM 0.11 (--eplb-config), not "
                       f"{version}", hint="use --vllm-version 0.11 or later", flag="enable_eplb")
    if not expert_parallel:
        raise BadInput("enable_expert_parallel must be True to use EPLB",
                       hint="add --enable-expert-parallel" if experts else
                       "EPLB balances MoE experts and this model has none: drop --enable-eplb",
                       flag="enable_eplb")
    if ranks <= 1:
        raise BadInput("EPLB requires tensor or data parallelism (TP x DP > 1)",
                       flag="enable_eplb")
    if redundant > MAX_EXPERT_REDUNDANCY:
        raise BadInput(f"num_redundant_experts {redundant} must be <= "
                       f"{MAX_EXPERT_REDUNDANCY}", flag="enable_eplb")
    if not experts:
        raise BadInput("--enable-eplb needs a mixture-of-experts model",
                       hint="drop --enable-eplb", flag="enable_eplb")


def eplb_state_bytes(*, moe_layers: int, experts: int, redundant: int, window: int,
                     layer_expert_bytes: float, buffer_kept: bool) -> int:
    """Bytes one GPU keeps for EPLB besides the redundant experts:
    * `logical_to_physical_map`: layers x experts x 1,024 slots, int64;
    * `expert_load_window`: window x layers x physical experts, int32; the load pass, the
      physical-to-logical map and replica counts (int32 / int64 per layer and expert);
    * from 0.14 `expert_buffer`: one layer's local experts (`torch.empty_like` of
      `expert_weights[0]`), `layer_expert_bytes`."""
    physical = experts + redundant
    maps = moe_layers * (experts * (MAX_EXPERT_REDUNDANCY + 1) * 8 + experts * 8
                         + physical * (8 + 4))
    window_b = window * moe_layers * physical * 4
    return int(maps + window_b + (layer_expert_bytes if buffer_kept else 0))
