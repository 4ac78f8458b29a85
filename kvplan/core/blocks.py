"""KV-cache groups, block counts, per-request blocks, concurrency and the logged token figure.

Follows vLLM 0.33 `v1/core/kv_cache_planning.py` (`get_kv_cache_groups`,
`_get_kv_cache_groups_uniform_page_size`, `_get_kv_cache_bytes_per_block`,
`_estimate_max_model_len_from_groups`) and `v1/core/kv_cache_utils.py`
(`get_max_concurrency_for_kv_cache_config`, the "GPU KV cache size" report), with the
pre-0.20.2 token formula.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace

from kvplan.core.arch import CHUNKED, SLIDING
from kvplan.core.kvspec import Spec, unify_pages
from kvplan.core.record import record
from kvplan.units import cdiv


def watermark_blocks(num_blocks: int, v1: bool) -> int:
    """Blocks the scheduler keeps free at admission: V0's block manager a 1 % watermark
    (`BlockSpaceManager(watermark=0.01)`, `can_allocate`: free - required >=
    int(0.01 x num_gpu_blocks)); V1 none."""
    return 0 if v1 else int(0.01 * num_blocks)


def admission_blocks(num_blocks: int, v1: bool, virtual_engines: int = 1) -> int:
    """Blocks new requests are admitted into: V1 all but the null block (`BlockPool`), V0
    all but its watermark (V0 has no null block). V0 with pipeline parallelism runs one
    scheduler per stage in flight, each over `num_gpu_blocks // pp` blocks with its own
    watermark (`Scheduler.__init__`, 0.6-0.10.2): their sum."""
    if v1:
        return max(num_blocks - 1, 0)
    n = num_blocks // virtual_engines
    return virtual_engines * (n - watermark_blocks(n, v1))


@record(frozen=True)
class Group:
    """One KV-cache group: layers sharing a block table (indices into the spec list)."""

    layer_ids: tuple[int, ...]
    specs: tuple[Spec, ...]

    @property
    def page_sum(self) -> int:
        return sum(s.page for s in self.specs)

    @property
    def spec(self) -> Spec:
        return self.specs[0]

    def blocks_per_request(self, max_model_len: int, inflight: int) -> int:
        return self.spec.blocks_per_request(max_model_len, inflight)

    @property
    def block_size(self) -> int:
        return self.spec.block_size


def make_groups(specs: list[Spec | None], max_ratio: float | None = 1.5) -> list[Group]:
    """Group layers the way vLLM's hybrid KV-cache manager does: the group size is the
    smallest bucket's layer count, or the largest's when it is under `max_ratio` times the
    smallest (`_get_kv_cache_groups_uniform_page_size`; None: no such rule)."""
    present = [(i, s) for i, s in enumerate(specs) if s is not None]
    if not present:
        return []  # attention-free model
    distinct = {s for _, s in present}
    if len(distinct) == 1 or len({s.type_key for _, s in present}) == 1:
        # uniform spec, or uniform type with different page sizes (UniformTypeKVCacheSpecs)
        ids, ss = zip(*present)
        return [Group(tuple(ids), tuple(ss))]
    unified = unify_pages([s for _, s in present])
    present = [(i, u) for (i, _), u in zip(present, unified)]
    buckets: OrderedDict[Spec, list[int]] = OrderedDict()
    by_id = dict(present)
    for i, s in present:
        buckets.setdefault(s, []).append(i)
    sizes = [len(v) for v in buckets.values()]
    group_size = min(sizes)
    if max_ratio is not None and max(sizes) < group_size * max_ratio:
        group_size = max(sizes)
    groups = []
    for ids in buckets.values():
        n = cdiv(len(ids), group_size)
        for g in range(n):
            sub = tuple(ids[g::n])
            groups.append(Group(sub, tuple(by_id[i] for i in sub)))
    return groups


def _approximate_gcd(values: list[int], lower_bound: int) -> int:
    """`_approximate_gcd`: the chunk d in [lower_bound, max] with the least total round-up
    padding (ties: the larger d)."""
    lo, hi = max(1, lower_bound), max(values)
    if lo > hi:
        return lo
    best, best_pad = lo, None
    for d in range(lo, hi + 1):
        pad = sum((d - x % d) % d for x in values)
        if best_pad is None or pad <= best_pad:
            best, best_pad = d, pad
    return best


def packed_groups(specs: list[Spec | None]) -> list[Group]:
    """Groups for the block-outermost layout (`_get_packed_kv_cache_groups`, 0.33): layers
    are bucketed by uniform type (kind, block size, window); a bucket whose page sizes have
    equal layer counts repeats a pattern and is split into groups of the same number of
    repeats (chosen by `_approximate_gcd`); state buckets are capped to the states one block
    already holds. Pages are not unified: a block ID reserves the widest group's bytes."""
    buckets: OrderedDict[tuple, list[tuple[int, Spec]]] = OrderedDict()
    for i, s in enumerate(specs):
        if s is not None:
            buckets.setdefault(s.type_key, []).append((i, s))
    rows = []
    for members in buckets.values():
        pages: OrderedDict[int, list[int]] = OrderedDict()
        for i, s in members:
            pages.setdefault(s.page, []).append(i)
        balanced = len({len(v) for v in pages.values()}) == 1
        rows.append((members, pages, balanced, max(len(v) for v in pages.values())))
    min_rep = max((m for _, p, b, m in rows if b and len(p) > 1), default=0)
    rep = _approximate_gcd([m for _, _, b, m in rows if b], min_rep) if min_rep else None

    def n_groups(balanced: bool, most: int) -> int:
        return cdiv(most, rep) if balanced and rep else 1

    def is_state(members: list[tuple[int, Spec]]) -> bool:
        s = members[0][1]
        return s.is_state or (rep is None and s.kind == SLIDING)

    def widest(pages: OrderedDict[int, list[int]], n: int) -> int:
        return sum(cdiv(len(ids), n) * page for page, ids in pages.items())

    anchor = max(widest(p, len(m) if is_state(m) else n_groups(b, most))
                 for m, p, b, most in rows)
    by_id = {i: s for i, s in enumerate(specs) if s is not None}
    groups = []
    for members, pages, balanced, most in rows:
        n = n_groups(balanced, most)
        if anchor and is_state(members):
            n = max(n, cdiv(len(members), max(anchor // members[0][1].page, 1)))
        if n == 1:
            ids = tuple(i for i, _ in members)
            groups.append(Group(ids, tuple(by_id[i] for i in ids)))
            continue
        repeats = list(zip(*pages.values()))
        for g in range(n):
            ids = tuple(i for rp in repeats[g::n] for i in rp)
            groups.append(Group(ids, tuple(by_id[i] for i in ids)))
    return groups


def bytes_per_block(groups: list[Group], layer_filter: set[int] | None = None) -> int:
    """Bytes one block ID reserves: the widest group's summed pages (per pipeline stage)."""
    best = 0
    for g in groups:
        total = sum(s.page for i, s in zip(g.layer_ids, g.specs)
                    if layer_filter is None or i in layer_filter)
        best = max(best, total)
    return best


def blocks_per_request(groups: list[Group], max_model_len: int, inflight: int) -> int:
    """Sum over groups of the blocks one request needs (`get_max_concurrency_...`)."""
    return sum(g.blocks_per_request(max_model_len, inflight) for g in groups)


def whole_prompt_limit(groups: list[Group], usable: int, max_model_len: int) -> int:
    """The longest prompt, under max_model_len, whose whole-prompt admission check passes in
    an empty pool of `usable` blocks when every attention group is charged
    cdiv(prompt, block_size) (vLLM 0.19's `can_fit_full_sequence`: sliding-window and
    chunked-local groups uncapped; `VllmVersion.uncapped_prompt_check`) and a state group its
    fixed blocks."""
    def need(p: int) -> int:
        return sum(cdiv(p, g.block_size) if g.spec.kind in (SLIDING, CHUNKED)
                   else g.blocks_per_request(p, 0) for g in groups)

    lo, hi = 0, max_model_len - 1  # need is non-decreasing in the prompt
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if need(mid) <= usable else (lo, mid - 1)
    return lo


def needed_bytes(groups: list[Group], max_model_len: int, inflight: int, bpb: int,
                 *, per_layer: bool, first_group: bool = False) -> int:
    """KV bytes one request of `max_model_len` needs (the startup check).

    0.19+: sum over groups of blocks x bytes_per_block (charges hybrid padding layers);
    0.14-0.18 (`first_group`): the first group's blocks only, times bytes_per_block
    (`_max_memory_usage_bytes_from_groups`: `any_spec = kv_cache_groups[0].kv_cache_spec`);
    0.11/0.12: sum over layers of each layer's own worst case (`per_layer=True`).
    """
    if per_layer:
        return sum(s.blocks_per_request(max_model_len, inflight) * s.page
                   for g in groups for s in g.specs)
    if first_group and groups:
        return groups[0].blocks_per_request(max_model_len, inflight) * bpb
    return blocks_per_request(groups, max_model_len, inflight) * bpb


def estimate_max_model_len(groups: list[Group], available: int, upper: int, inflight: int,
                           bpb: int, *, per_layer: bool, first_group: bool = False) -> int:
    """Largest max_model_len up to `upper` (the configured length) whose single request
    fits `available` (vLLM's binary search)."""
    def fits(n: int) -> bool:
        return needed_bytes(groups, n, inflight, bpb, per_layer=per_layer,
                            first_group=first_group) <= available

    if not fits(1):
        return 0
    lo, hi, best = 1, upper, 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if fits(mid):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


def kv_cache_tokens(groups: list[Group], num_blocks: int, max_model_len: int,
                    concurrency: float, *, from_concurrency: bool, v1: bool,
                    state_block: int | None = None) -> int:
    """The "GPU KV cache size: N tokens" figure vLLM logs.

    0.20.1+: int(max_concurrency * max_model_len) (same float expression as vLLM);
    0.11-0.20.0: num_blocks // num_groups * min(group block sizes), times the decode context
    parallel size ("Multiplying the GPU KV cache size by the dcp_world_size");
    V0: blocks x block size. `state_block`: the block size Mamba groups report when it is
    not the attention one (max_model_len without Mamba prefix caching, `mamba_block_size`);
    Nemotron-3-Super starts at max_model_len 8,192 print 8,192 x blocks, not 8,320 x.
    """
    if not groups:
        return 0
    if from_concurrency:
        return int(concurrency * max_model_len)
    sizes = [g.block_size for g in groups if not g.spec.is_state]
    if state_block and len(sizes) < len(groups):
        sizes.append(state_block)
    min_bs = min(sizes) if sizes else groups[0].block_size
    if not v1:
        return num_blocks * min_bs
    return num_blocks // len(groups) * min_bs * groups[0].spec.dcp


# --- DeepSeek-V4 before vLLM 0.27 (0.20.2-0.26 `v1/core/kv_cache_utils.py`) ----------------

def _is_full(s: Spec) -> bool:
    return s.type_key[0] == "full"


def tuple_padded(specs: list[Spec | None]) -> list[Spec | None]:
    """`_get_kv_cache_groups_uniform_groups`: each sliding-window-type page is raised to the
    smallest page of the full (MLA / indexer) layers that holds it (V4's compressor states:
    32,832 -> 37,440 B)."""
    full = sorted({s.page for s in specs if s is not None and _is_full(s)})
    out: list[Spec | None] = []
    for s in specs:
        if s is not None and not _is_full(s):
            up = next((p for p in full if p >= s.page), s.page)
            if up != s.page:
                s = replace(s, page_padded=up)
        out.append(s)
    return out


def tuple_bytes_per_block(groups: list[Group], layer_filter: set[int] | None = None) -> int:
    """`_get_kv_cache_config_deepseek_v4`: a block ID reserves, for every layer-tuple slot,
    one page of each distinct full-group page size; the slots are the longest per-page run
    of any group (per pipeline stage with `layer_filter`)."""
    full_pages = sorted({s.page for g in groups for s in g.specs if _is_full(s)})
    slots = 0
    for g in groups:
        runs: dict[int, int] = {}
        for i, s in zip(g.layer_ids, g.specs):
            if layer_filter is None or i in layer_filter:
                runs[s.page] = runs.get(s.page, 0) + 1
        slots = max([slots, *runs.values()])
    return slots * sum(full_pages)


def bucketed_bytes_per_block(groups: list[Group], layer_filter: set[int] | None = None) -> int:
    """DeepSeek-V4 in 0.23-0.26 (`_bucket_layers_by_page_size`, `_get_kv_cache_config_packed`;
    0.23 `_get_kv_cache_config_deepseek_v4` gives the same bytes): a block ID reserves, for
    each (padded) page size, that page times its largest count in any one group (per pipeline
    stage with `layer_filter`). V4-Flash: 37,440 x 22 + 8,640 x 21 + 1,728 x 20 = 1,039,680 B."""
    most: dict[int, int] = {}
    for g in groups:
        runs: dict[int, int] = {}
        for i, s in zip(g.layer_ids, g.specs):
            if layer_filter is None or i in layer_filter:
                runs[s.page] = runs.get(s.page, 0) + 1
        for page, n in runs.items():
            most[page] = max(most.get(page, 0), n)
    return sum(page * n for page, n in most.items())


def full_page_sum(groups: list[Group]) -> int:
    """The full-attention (MLA / indexer) group's page sum: the bytes a block holds there."""
    return max((g.page_sum for g in groups if _is_full(g.spec)), default=0)


def weighted_blocks_per_request(groups: list[Group], max_model_len: int, inflight: int) -> int:
    """`get_max_concurrency_for_kv_cache_config` (0.20.2): each group's blocks weighted by its
    page bytes against the full-MLA group's, cdiv(sum pages_g x P_g, P_full)."""
    full = full_page_sum(groups)
    total = sum(g.blocks_per_request(max_model_len, inflight) * g.page_sum for g in groups)
    return cdiv(total, full) if full else blocks_per_request(groups, max_model_len, inflight)
