"""A discrete-event simulation of one vLLM engine: V1 (0.8+) or the V0 engine.

V1 (`v1/core/sched/scheduler.py Scheduler.schedule`): each step first extends the running
requests (decodes, then prefill chunks) in scheduling order, allocating blocks as sequences
grow; when a block cannot be allocated the most recently scheduled request is preempted by
recompute (its blocks freed, pushed to the front of the waiting queue, its prompt and
generated tokens recomputed when rescheduled). Only a step that preempted nothing then admits
waiting requests (the waiting loop sits under `if not preempted_reqs:` in every V1 release,
0.8-0.33), FCFS while the token budget (max_num_batched_tokens) and max_num_seqs allow and
the blocks fit: the first chunk before 0.19, the full current prompt from 0.19
(`scheduler_reserve_full_isl`, `KVCacheManager.allocate_slots` `full_sequence_must_fit`).

V0 (`core/scheduler.py`, `core/block_manager.py`, 0.6-0.10): admission allocates the whole
sequence (prompt plus generated tokens) and needs it free beyond a watermark of 1 % of the
blocks (`can_allocate`: a sequence that can never fit is ignored). Without chunked prefill
(the V0 default up to max_model_len 32K) a step either prefills whole prompts or decodes,
never both (`_schedule_default`); with it, decodes and chunks share steps and the step's
victims rejoin the queue after its admissions (`_schedule_chunked_prefill`). A decoding
request needs a free block to be touched (`can_append_slots`), modelled as one block kept
free at decode time. Preemption is by recompute from the back of the running queue.

Prefix caching (V1 `KVCacheManager.get_computed_blocks` / `BlockPool`): the `prefix_hit`
share of each prompt is a common prefix, cached in whole blocks and capped at prompt - 1
tokens. Its blocks are shared and ref-counted: charged once however many running requests
hold them; when no running request holds a block it stays cached but counts as free
(evictable), and is evicted -- tail first, after the pool's other free blocks -- only when an
allocation needs it. A request that hits an evictable block takes it out of the free count
(`get_num_blocks_to_allocate`: `num_evictable_blocks`). A request holding the whole cached
prefix extends it as it computes (blocks are cached when scheduled, `cache_blocks`); one that
does not keeps its further prefix blocks as its own copies. A preempted request hits the
shared prefix again on readmission, and its own blocks as far as the free queue has not
evicted them (`_own_hit`; full-attention models). V0 serves no prefix-cache hits (prefix
caching is off by default).

A finished prefill emits the first token at the end of its step. Step times come from
`kvplan.core.perf`.

Speed: decoding requests advance lazily against a global decode counter, and block growth
is counted per residue class of the block boundary, so stretches of pure decoding are
jumped over in one move up to the next arrival, completion, or the step where the free
blocks would run out -- never token by token.

Block accounting (`v1/core/single_type_kv_cache_manager.py`): a full-attention group holds
a block per `block_size` tokens; Mamba states are a fixed number of blocks per request, taken
at admission. A sliding-window or chunked-local group (vLLM 0.9.1+ with the hybrid
allocator; kvplan's sizing charges them as full attention where vLLM does) holds only the
blocks its window still reads: before each allocation `remove_skipped_blocks` frees the
blocks wholly before `get_num_skipped_tokens(processed)` -- `processed - window + 1` for a
sliding window, the start of the current chunk for chunked local attention -- and the table
grows to `cdiv(tokens, block_size)`. `processed` is the request's computed tokens; from 0.26
minus the tokens still in flight (`num_in_flight_tokens`: with async scheduling the previous
step's), so a prefill chunk's predecessor stays held one step longer. The whole-prompt
admission check charges such a group `cdiv(prompt, block_size)` blocks in 0.19.x, capped
from 0.20.0 at `max_admission_blocks_per_request` (in every `get_num_blocks_to_allocate`;
0.20.2 in the admission check only, `apply_admission_cap`; kvplan's
`Spec.blocks_per_request`). In decode the frees are counted per residue class like the
allocations (sliding) or as one event per chunk boundary (chunked).
"""

from __future__ import annotations

import bisect
import heapq
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from kvplan.core.perf import PerfModel


@dataclass
class Request:
    rid: int
    arrival: float
    prompt: int
    output: int
    prefix_hit: int = 0  # prompt tokens the workload serves from the prefix cache
    computed: int = 0  # tokens whose KV exists (prefill progress)
    generated: int = 0
    blocks: int = 0  # blocks the request holds alone (the shared prefix's are not here)
    first_token: float | None = None
    finish: float | None = None
    admitted: float | None = None
    preemptions: int = 0
    recomputed: int = 0
    # lazy decode state: tokens = base + G, generated = gbase + G
    base: int = 0
    gbase: int = 0
    decoding: bool = False
    done_at: int = 0  # decode counter value at completion
    epoch: int = 0  # bumped when the request leaves the decoding set (lazy heap deletion)
    prefix_blocks: int = 0  # its part of the common prefix, in whole blocks of tokens
    shared: int = 0  # prefix token-blocks it holds in the shared cache
    lost: int = 0  # tokens computed before its last preemption
    act: int = 0  # sliding classes whose out-of-window frees count for it (bit mask)
    lag: int = 0  # tokens scheduled for it in step `sched_at` (a prefill chunk)
    sched_at: int = -1
    defer: int = 0  # blocks its last prefill step holds into decode, freed at step `defer_due`
    defer_due: int = 0
    # a victim's own cached blocks in the free queue: (position just past them, full token-
    # blocks beyond the shared prefix, the shared extent they follow)
    cached: tuple[int, int, int] | None = None

    @property
    def tokens_needed(self) -> int:
        """Tokens to (re)compute before decoding: prompt + already generated output."""
        return self.prompt + self.generated


@dataclass(frozen=True)
class Local:
    """`count` sliding-window (or chunked-local) groups of one window and block size.
    `cap`: the blocks per group the capped admission check charges at most (0.20+
    `max_admission_blocks_per_request`)."""

    window: int
    block_size: int
    count: int
    chunked: bool = False
    cap: int = 0

    def skipped(self, processed: int) -> int:
        """Blocks wholly before the window once `processed` tokens are processed
        (`get_num_skipped_tokens` // block_size)."""
        if processed <= 0:
            return 0
        if self.chunked:
            return processed // self.window * self.window // self.block_size
        return max(0, processed - self.window + 1) // self.block_size


@dataclass
class Config:
    num_blocks: int  # usable blocks (V1: num_gpu_blocks - 1 for the null block)
    block_size: int
    groups_per_token_block: int  # full-attention groups: blocks added per block_size tokens
    state_blocks: int  # fixed blocks per request (Mamba states)
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    admission_cap: int | None = None  # requests in the engine (running + waiting)
    queue_limit: int | None = None  # waiting requests; more are rejected (HTTP 429)
    reserve_full_prompt: bool = True  # V1 0.19+: the whole prompt must fit to admit
    v0: bool = False  # the V0 engine's scheduler and block manager
    chunked_prefill: bool = True  # V0 only (V1 always chunks generation prefills)
    watermark_blocks: int = 0  # V0: int(0.01 x num_gpu_blocks) kept free at admission
    prefix_caching: bool = True  # whether `prefix_hit` is served from the cache
    local: tuple[Local, ...] = ()  # sliding-window / chunked-local groups (V1 0.9.1+)
    local_lag: bool = False  # 0.26+ with a step in flight: frees on the processed tokens
    local_admission_cap: bool = False  # 0.20+ `max_admission_blocks_per_request`


@dataclass
class Stats:
    """What a run produced. Times in seconds."""

    completed: list[Request] = field(default_factory=list)
    rejected: int = 0
    too_long: int = 0  # of `rejected`: a prompt of max_model_len or more (HTTP 400)
    never_admitted: int = 0  # of `rejected`: V1 prompts no empty pool admits (vLLM stalls)
    preemptions: int = 0
    recomputed_tokens: int = 0
    output_tokens: int = 0
    steps: int = 0
    events: int = 0
    sim_time: float = 0.0
    # time series, sampled at every event: (time, kv usage 0-1, running, waiting)
    series: list[tuple[float, float, int, int]] = field(default_factory=list)
    area_in_system: float = 0.0  # integral of requests in the system over time


def _hits(g: int, k: int, q: int, b: int) -> int:
    """Decode counter values G' in (g, g + k] with G' = q (mod b)."""
    return (g + k - q) // b - (g - q) // b


class Engine:
    def __init__(self, cfg: Config, perf: PerfModel):
        self.cfg = cfg
        self.perf = perf
        self.now = 0.0
        self.free = cfg.num_blocks  # free blocks, evictable cached prefix blocks included
        # the free queue's positions (`BlockPool`: frees append, allocations pop the oldest):
        # blocks appended beyond the initial pool, and cached blocks hits took out of it
        self.freed_total = 0
        self.taken_total = 0
        # position intervals victims took back out of the queue (holes the head skips), and
        # the size of those already behind it
        self.holes: list[tuple[int, int]] = []
        self.hole_base = 0
        # a victim's own blocks stay cached until evicted (V1 prefix caching; full-attention
        # models: a local window's or a state's blocks do not serve a hit alone)
        self.victim_cache = cfg.prefix_caching and not cfg.v0 and not cfg.local \
            and not cfg.state_blocks
        self.waiting: deque[Request] = deque()
        self.running: OrderedDict[int, Request] = OrderedDict()  # scheduling order
        # requests part-way through a prefill, in scheduling order (admission order, as in
        # `running`: both lose a victim from the back and gain a readmission at the back)
        self.prefilling: dict[int, None] = {}
        self.G = 0  # global decode counter
        self.dec_count = [0] * cfg.block_size  # decoding requests per residue class
        self.dec_n = 0
        self.dec_base_sum = 0  # sum of (tokens - G) over decoding requests
        self.heap: list[tuple[int, int, int]] = []  # (done_at, rid, epoch)
        self.stats = Stats()
        self._last_t = 0.0
        # the shared prefix cache, in token-blocks (x nf full-attention blocks each):
        # the first p_held are held by running requests, up to p_cached are still cached
        self.p_held = 0
        self.p_cached = 0
        self.p_holders: dict[int, int] = {}  # shared extent -> running requests holding it
        # V0 keeps a touched block free for each decode (`can_append_slots`)
        self.reserve = 1 if cfg.v0 else 0
        # --- local (sliding-window / chunked) groups ---
        self.nf = cfg.groups_per_token_block
        self.bs, self.states = cfg.block_size, cfg.state_blocks
        self.lag = 1 if cfg.local_lag else 0  # a decode's previous token is still in flight
        self.locals = cfg.local
        per: dict[int, int] = {}  # block size -> local groups allocating per that many tokens
        for cl in cfg.local:
            per[cl.block_size] = per.get(cl.block_size, 0) + cl.count
        self.g_alloc = self.nf + per.pop(cfg.block_size, 0)  # groups at the engine's size
        # other block sizes: (size, groups, decoding requests by allocation residue)
        self.other = [(b, n, [0] * b) for b, n in per.items()]
        # sliding classes: (window + lag, block size, groups, free residue offset, requests
        # counted as freeing, by allocation residue)
        self.swa = [(cl.window + self.lag, cl.block_size, cl.count,
                     (cl.window + self.lag - 1) % cl.block_size, [0] * cl.block_size)
                    for cl in cfg.local if not cl.chunked]
        self.swa_min_bs = min((x[1] for x in self.swa), default=0)
        self.swa_active = 0  # sum over freeing requests of their sliding groups
        self.chunked = [cl for cl in cfg.local if cl.chunked]
        self.pending: list[tuple[int, int, int, int]] = []  # (G it starts freeing, rid, epoch, j)
        self.drops: list[tuple[int, int, int, int, int]] = []  # (G, rid, epoch, class, chunk)
        self.deferring: list[Request] = []

    # --- blocks ---------------------------------------------------------------------------
    def hold(self, tokens: int, processed: int) -> int:
        """Blocks a request holds with `tokens` slots after freeing the blocks that left its
        local windows at `processed` tokens (shared prefix blocks included)."""
        n = self.nf * -(-tokens // self.bs) + self.states
        for cl in self.locals:
            n += cl.count * (-(-tokens // cl.block_size) - cl.skipped(processed))
        return n

    def blocks_for(self, tokens: int) -> int:
        """Blocks of `tokens` with nothing freed (V0's whole-sequence allocation)."""
        return self.hold(tokens, 0)

    def _skipped(self, processed: int) -> int:
        return sum(cl.count * cl.skipped(processed) for cl in self.locals)

    def full_need(self, tokens: int, s: int, capped: bool) -> int:
        """`allocate_slots(full_sequence_must_fit)`: blocks to hold `tokens` after a hit of
        `s` prefix token-blocks (its evictable full-attention blocks apart). A local group
        needs its table less the hit (`get_num_blocks_to_allocate`, capped at `cap` with
        `apply_admission_cap`), plus the hit's in-window blocks it takes from the cache."""
        c = self.cfg
        need = self.nf * (-(-tokens // c.block_size) - s) + c.state_blocks
        hit = s * c.block_size
        for cl in self.locals:
            req = -(-tokens // cl.block_size)
            if capped:
                req = min(req, cl.cap)
            sc = hit // cl.block_size
            need += cl.count * (max(req - sc, 0) + sc - cl.skipped(hit))
        return need

    def never_fits(self, tokens: int) -> bool:
        """The whole-prompt check could never pass (vLLM stalls), or, before 0.19, the
        request's blocks exceed the pool (sliding groups at their admission cap)."""
        c = self.cfg
        if not self.locals:
            return self.nf * -(-tokens // c.block_size) + c.state_blocks > c.num_blocks
        capped = c.local_admission_cap or not c.reserve_full_prompt
        return self.full_need(tokens, 0, capped) > c.num_blocks

    def _lag(self, r: Request) -> int:
        """Tokens of r still in flight (0.26+ async: its chunk of the previous step)."""
        return r.lag if self.lag and r.sched_at == self.stats.steps else 0

    def _residue(self, r: Request) -> int:
        # tokens = base + G; a new block is needed when (tokens - 1) % bs == 0, i.e. at
        # G = 1 - base (mod bs)
        return (1 - r.base) % self.cfg.block_size

    def crossings(self, k: int, frees: bool = True) -> int:
        """Net blocks decoding requests allocate over the next k decode steps: block
        boundaries crossed, less sliding-window blocks freed (chunk boundaries apart)."""
        g = self.G
        bs = self.bs
        n = 0
        for q, cnt in enumerate(self.dec_count):
            if cnt:
                n += cnt * ((g + k - q) // bs - (g - q) // bs)
        n *= self.g_alloc
        if not self.locals:
            return n
        for b, m, counts in self.other:
            x = 0
            for q, cnt in enumerate(counts):
                if cnt:
                    x += cnt * _hits(g, k, q, b)
            n += m * x
        if frees:
            for _, b, m, d, act in self.swa:
                x = 0
                for q, cnt in enumerate(act):
                    if cnt:
                        x += cnt * _hits(g, k, q + d, b)
                n -= m * x
        return n

    def bound(self, k: int) -> int:
        """The most blocks decoding requests hold beyond now at any of the next k steps: a
        freeing sliding group frees one block per block it allocates, so it is at most one
        block up, and only if its next allocation comes before its next free."""
        if not self.swa:
            return self.crossings(k)
        n = self.crossings(k, frees=False)
        g = self.G
        for _, b, m, d, act in self.swa:
            x = 0
            for q, cnt in enumerate(act):
                if cnt:
                    first = (q - g - 1) % b + 1
                    up = first <= k and first < (q + d - g - 1) % b + 1
                    x += cnt * (_hits(g, k, q, b) - up)
            n -= m * x
        return n

    # --- the shared prefix ----------------------------------------------------------------
    def _share(self, r: Request, s: int) -> None:
        """r now holds the first s prefix token-blocks (the caller charged any new ones)."""
        old = r.shared
        if old == s:
            return
        holders = self.p_holders
        if old:
            n = holders[old] - 1
            if n:
                holders[old] = n
            else:
                del holders[old]
        if s:
            holders[s] = holders.get(s, 0) + 1
        r.shared = s
        if s > self.p_held:
            self.p_held = s
        elif old == self.p_held and old not in holders:
            # the last holder of the tail left: its blocks are cached, free and evictable
            held = max(holders) if holders else 0
            self.free += self.nf * (self.p_held - held)
            self.freed_total += self.nf * (self.p_held - held)
            self.p_held = held

    def _evict(self) -> None:
        """Allocations take evictable prefix blocks last, the tail first."""
        if self.nf:
            self.p_cached = max(self.p_held, min(
                self.p_cached, self.p_held + max(self.free, 0) // self.nf))

    def _extend(self, r: Request) -> None:
        """r holds the whole cached prefix and has computed more of it: its new full prefix
        blocks join the cache (shared from now on)."""
        e = min(r.prefix_blocks, r.computed // self.cfg.block_size)
        if e > r.shared == self.p_cached:
            r.blocks -= self.nf * (e - r.shared)
            self._share(r, e)
            self.p_cached = e

    def _hit(self, r: Request) -> tuple[int, int]:
        """(prefix token-blocks r finds cached, evictable blocks it takes from the free
        count)."""
        s = min(r.prefix_blocks, self.p_cached)
        return s, self.nf * max(0, s - self.p_held)

    def _own_hit(self, r: Request, s: int) -> int:
        """Token-blocks of a victim's own prefix still cached past the `s` shared ones it
        hits (`get_computed_blocks` stops at the first miss): the free queue evicts the
        oldest freed first, so its blocks survive until the allocations since reach them
        (`_head`; the shared prefix's evictable blocks a hit takes are not placed in the
        queue: a slight overcount)."""
        v = r.cached
        if v is None or s < v[2]:
            return 0
        end, own, _ = v
        cap = (r.tokens_needed - 1) // self.cfg.block_size - s  # at most tokens - 1
        return max(0, min(own, (end - self._head()) // self.nf, cap))

    def _head(self) -> int:
        """The free queue's head position: its pops so far, past the holes victims' hits
        left below it."""
        p = self.cfg.num_blocks + self.freed_total - self.free - self.taken_total \
            + self.hole_base
        while self.holes and self.holes[0][0] < p:
            a, b = self.holes.pop(0)
            self.hole_base += b - a
            p += b - a
        return p

    # --- bookkeeping ----------------------------------------------------------------------
    def in_system(self) -> int:
        return len(self.running) + len(self.waiting)

    def _tick(self, t: float) -> None:
        self.stats.area_in_system += self.in_system() * (t - self._last_t)
        self._last_t = t

    def _start_decoding(self, r: Request) -> None:
        r.decoding = True
        tokens = r.computed
        r.base = tokens - self.G
        r.gbase = r.generated - self.G
        r.done_at = self.G + (r.output - r.generated)
        r.epoch += 1
        self.dec_count[self._residue(r)] += 1
        self.dec_n += 1
        self.dec_base_sum += r.base
        heapq.heappush(self.heap, (r.done_at, r.rid, r.epoch))
        if self.locals:
            self._start_local(r)

    def _start_local(self, r: Request) -> None:
        """Enter r's local groups into the lazy count: from here on it holds
        `hold(t, t - 1 - lag)` at t tokens. What its last prefill step holds beyond that is
        freed now, or (0.26+ async, the chunk still in flight) in part after the next step."""
        t, a = r.computed, self.lag
        for b, _, counts in self.other:
            counts[(1 - r.base) % b] += 1
        for j, (w, b, m, _, act) in enumerate(self.swa):
            if t >= w:  # its next block boundary past the window frees a block
                act[(1 - r.base) % b] += 1
                r.act |= 1 << j
                self.swa_active += m
            else:
                heapq.heappush(self.pending, (w - r.base, r.rid, r.epoch, j))
        for i, cl in enumerate(self.chunked):
            n = max(0, t - 1 - a) // cl.window + 1  # the next chunk boundary's free
            heapq.heappush(self.drops, (n * cl.window + 1 + a - r.base, r.rid, r.epoch, i, n))
        lazy = self.hold(t, t - 1 - a) - self.nf * r.shared
        # vLLM frees the rest at the first decode step (on t - lag processed tokens: the last
        # chunk is in flight) and the second (on t). Freed now, as nothing runs before the
        # next step: all of it without a lag; with one, all but the second step's (`defer`),
        # less the block per group the lazy count's first step frees a step before vLLM
        # (negative then: the pool shows it taken until that step frees it)
        later = self._skipped(t - 1) - self._skipped(t - r.lag) if a else 0
        self.free += r.blocks - lazy - later
        self.freed_total += r.blocks - lazy - later
        r.blocks = lazy
        if later > 0:
            r.defer, r.defer_due = later, self.stats.steps + 2
            self.deferring.append(r)

    def _release_deferred(self, step: int) -> None:
        """Free the deferred blocks due by `step`."""
        keep = []
        for r in self.deferring:
            if r.defer and r.defer_due <= step:
                self.free += r.defer
                self.freed_total += r.defer
                r.defer = 0
            if r.defer:
                keep.append(r)
        self.deferring = keep

    def _activate(self) -> None:
        """Sliding groups whose window is full start freeing a block per block."""
        while self.pending and self.pending[0][0] <= self.G:
            _, rid, epoch, j = heapq.heappop(self.pending)
            r = self.running.get(rid)
            if r is None or r.epoch != epoch or not r.decoding:
                continue
            _, b, m, _, act = self.swa[j]
            act[(1 - r.base) % b] += 1
            r.act |= 1 << j
            self.swa_active += m

    def _due_drops(self) -> list[tuple[Request, tuple]]:
        """Chunk boundaries reached at the next decode step (valid entries)."""
        due = []
        while self.drops and self.drops[0][0] <= self.G + 1:
            e = heapq.heappop(self.drops)
            r = self.running.get(e[1])
            if r is not None and r.epoch == e[2] and r.decoding:
                due.append((r, e))
        return due

    def _drop_blocks(self, e: tuple) -> int:
        cl = self.chunked[e[3]]
        n, b = e[4], cl.block_size
        return cl.count * (n * cl.window // b - (n - 1) * cl.window // b)

    def _stop_decoding(self, r: Request) -> None:
        """Materialise the lazy state and take r out of the decoding set."""
        r.computed = r.base + self.G
        r.generated = r.gbase + self.G
        r.blocks = self.hold(r.computed, r.computed - 1 - self.lag) - self.nf * r.shared
        r.decoding = False
        r.epoch += 1
        self.dec_count[self._residue(r)] -= 1
        self.dec_n -= 1
        self.dec_base_sum -= r.base
        if self.locals:
            for b, _, counts in self.other:
                counts[(1 - r.base) % b] -= 1
            if r.act:
                for j, (_, b, m, _, act) in enumerate(self.swa):
                    if r.act >> j & 1:
                        act[(1 - r.base) % b] -= 1
                        self.swa_active -= m
                r.act = 0

    def _release(self, r: Request) -> None:
        self.free += r.blocks + r.defer
        self.freed_total += r.blocks + r.defer
        r.blocks = r.defer = 0
        if r.shared:
            self._share(r, 0)

    def _preempt_last(self) -> Request:
        rid, victim = self.running.popitem(last=True)
        if victim.decoding:
            self._stop_decoding(victim)
        self.prefilling.pop(rid, None)
        if self.victim_cache:  # `free_blocks(reversed)`: its tail first, its first block last
            own = victim.computed // self.cfg.block_size - victim.shared
            end = self.cfg.num_blocks + self.freed_total + victim.blocks + victim.defer
            victim.cached = (end, own, victim.shared) if own > 0 else None
        self._release(victim)
        victim.lost = victim.computed
        victim.computed = 0
        victim.preemptions += 1
        self.stats.preemptions += 1
        self.waiting.appendleft(victim)
        return victim

    def _finish(self, r: Request, t: float) -> None:
        r.finish = t
        self.running.pop(r.rid, None)
        self._release(r)
        self.stats.completed.append(r)

    def _reject_head(self, stalls: bool = False) -> None:
        self.waiting.popleft()
        self.stats.rejected += 1
        self.stats.never_admitted += stalls

    def _start(self, r: Request, computed: int) -> None:
        """Charge a readmitted request's recomputation; r is about to run."""
        if r.lost:
            recomputed = max(0, r.lost - computed)
            r.recomputed += recomputed
            self.stats.recomputed_tokens += recomputed
            r.lost = 0
        if r.admitted is None:
            r.admitted = self.now

    # --- arrivals -------------------------------------------------------------------------
    def arrive(self, r: Request) -> bool:
        c = self.cfg
        self._tick(self.now)
        if r.prompt + r.output > c.max_model_len:
            r.output = max(1, c.max_model_len - r.prompt)
            if r.prompt >= c.max_model_len:
                self.stats.rejected += 1
                self.stats.too_long += 1
                return False
        if c.admission_cap is not None and self.in_system() >= c.admission_cap:
            self.stats.rejected += 1
            return False
        if c.queue_limit is not None and len(self.waiting) >= c.queue_limit:
            self.stats.rejected += 1
            return False
        if r.prefix_hit and c.prefix_caching:  # whole blocks, at most prompt - 1 tokens
            r.prefix_blocks = min(r.prefix_hit, r.prompt - 1) // c.block_size
        self.waiting.append(r)
        return True

    # --- one scheduler step ---------------------------------------------------------------
    def step(self) -> None:
        c = self.cfg
        if c.v0 and not c.chunked_prefill:
            self._step_v0_unchunked()
            return
        budget = c.max_num_batched_tokens
        preempted = self.stats.preemptions
        # 1. decodes: one token each; preempt from the back until the new blocks fit
        self._room_for_decodes()
        if self.p_cached > self.p_held:
            self._evict()
        budget -= self.dec_n
        decodes = self.dec_n
        # 2. running prefills (chunked) in scheduling order
        prefill_tokens = 0
        prefill_ctx = 0
        finished_prefill: list[Request] = []
        nf = self.nf
        now = self.stats.steps + 1
        for rid in list(self.prefilling):
            if budget <= 0:
                break
            r = self.running.get(rid)
            if r is None:  # preempted earlier in this loop
                continue
            chunk = min(r.tokens_needed - r.computed, budget)
            if c.v0:  # V0 allocated the whole sequence at admission: nothing more to take
                need = max(0, self.blocks_for(r.computed + chunk) - nf * r.shared - r.blocks)
            else:  # frees what left the windows, then grows the tables (may be negative)
                need = self.hold(r.computed + chunk, r.computed - self._lag(r)) \
                    - nf * r.shared - r.blocks
            while need > self.free and self.running:
                victim = self._preempt_last()
                if victim is r:
                    break
            if r.rid not in self.running:
                break
            self.free -= need
            r.blocks += need
            r.computed += chunk
            r.lag, r.sched_at = chunk, now
            if r.prefix_blocks > r.shared:
                self._extend(r)
            budget -= chunk
            prefill_tokens += chunk
            prefill_ctx = max(prefill_ctx, r.computed)
            if r.computed >= r.tokens_needed:
                finished_prefill.append(r)
        if self.p_cached > self.p_held:
            self._evict()
        # 3. admit waiting requests
        preempted = self.stats.preemptions - preempted
        if c.v0:
            # `_schedule_chunked_prefill`: this step's victims rejoin the queue after the
            # new prefills are scheduled (`waiting.extendleft(preempted)`)
            held = [self.waiting.popleft() for _ in range(preempted)]
            budget, prefill_tokens, prefill_ctx = self._admit_v0(
                budget, prefill_tokens, prefill_ctx, finished_prefill, chunking=True)
            self.waiting.extendleft(reversed(held))
        elif not preempted:  # V1: `if not preempted_reqs:` guards the waiting loop
            prefill_tokens, prefill_ctx = self._admit_v1(
                budget, prefill_tokens, prefill_ctx, finished_prefill)
        self._advance(decodes, prefill_tokens, prefill_ctx, finished_prefill)

    def _admit_v1(self, budget: int, prefill_tokens: int, prefill_ctx: int,
                  finished_prefill: list[Request]) -> tuple[int, int]:
        """FCFS while the budget and max_num_seqs allow and the blocks fit
        (`KVCacheManager.allocate_slots`)."""
        c = self.cfg
        nf, bs = self.nf, c.block_size
        now = self.stats.steps + 1
        local = self.locals
        while self.waiting and budget > 0 and len(self.running) < c.max_num_seqs:
            r = self.waiting[0]
            tokens = r.tokens_needed
            full = 0 if local else nf * -(-tokens // bs) + c.state_blocks
            if self.never_fits(tokens) if local else full > c.num_blocks:
                # can never fit, even in an empty pool (the null block takes one): vLLM
                # would stall on it; the simulation drops it and counts it as rejected
                self._reject_head(stalls=True)
                continue
            s, touched = self._hit(r) if r.prefix_blocks else (0, 0)
            own = self._own_hit(r, s) if r.cached else 0
            touched += nf * own
            if c.reserve_full_prompt and (self.full_need(tokens, s, c.local_admission_cap)
                                          if local else full - nf * (s + own)) + touched \
                    > self.free:
                break
            hit = (s + own) * bs
            chunk = min(tokens - hit, budget)
            need = self.hold(hit + chunk, hit) - nf * (s + own)
            if need + touched > self.free:
                break
            self.waiting.popleft()
            self._start(r, hit)
            self.free -= need + touched
            self.taken_total += touched
            if own:  # its first `own` token-blocks, appended last
                bisect.insort(self.holes, (r.cached[0] - nf * own, r.cached[0]))
            r.blocks, r.cached = need + nf * own, None
            if s:
                self._share(r, s)
            r.computed = hit + chunk
            r.lag, r.sched_at = chunk, now
            if r.prefix_blocks > r.shared:
                self._extend(r)
            if self.p_cached > self.p_held:
                self._evict()
            budget -= chunk
            prefill_tokens += chunk
            prefill_ctx = max(prefill_ctx, r.computed)
            self.running[r.rid] = r
            if r.computed >= r.tokens_needed:
                finished_prefill.append(r)
            else:
                self.prefilling[r.rid] = None
        return prefill_tokens, prefill_ctx

    def _admit_v0(self, budget: int, prefill_tokens: int, prefill_ctx: int,
                  finished_prefill: list[Request], chunking: bool) -> tuple[int, int, int]:
        """V0 `_schedule_prefills`: FCFS while `can_allocate` says OK -- the whole sequence
        (prompt + generated) fits with the watermark to spare -- and the budget and
        max_num_seqs allow. Without chunking the whole prompt must fit the budget."""
        c = self.cfg
        wm = c.watermark_blocks
        while self.waiting and len(self.running) < c.max_num_seqs:
            r = self.waiting[0]
            n = r.tokens_needed
            need = self.blocks_for(n)
            if c.num_blocks - need < wm or (not chunking and n > c.max_num_batched_tokens):
                self._reject_head()  # AllocStatus.NEVER / over the prompt limit: ignored
                continue
            if self.free - need < wm or budget <= 0:  # AllocStatus.LATER
                break
            chunk = min(n, budget) if chunking else n
            if chunk > budget:
                break
            self.waiting.popleft()
            self._start(r, 0)
            self.free -= need
            r.blocks = need
            r.computed = chunk
            budget -= chunk
            prefill_tokens += chunk
            prefill_ctx = max(prefill_ctx, chunk)
            self.running[r.rid] = r
            if chunk >= n:
                finished_prefill.append(r)
            else:
                self.prefilling[r.rid] = None
        return budget, prefill_tokens, prefill_ctx

    def _room_for_decodes(self) -> None:
        """Take the blocks one more token of every running request needs, preempting from
        the back (`_preempt_last`) until they fit."""
        if not self.locals:
            while True:
                need = self.crossings(1)
                if need + (self.reserve if self.dec_n else 0) <= self.free or not self.running:
                    break
                self._preempt_last()
            self.free -= need
            return
        # local groups: what left the windows is freed before the tables grow
        self._release_deferred(self.stats.steps + 1)
        self._activate()
        due = self._due_drops()
        while True:
            need = self.crossings(1) - sum(self._drop_blocks(e) for r, e in due
                                           if r.decoding and r.epoch == e[2])
            if need + (self.reserve if self.dec_n else 0) <= self.free or not self.running:
                break
            self._preempt_last()
        self.free -= need
        for r, e in due:
            if r.decoding and r.epoch == e[2]:
                w = self.chunked[e[3]].window
                heapq.heappush(self.drops, (e[0] + w, r.rid, r.epoch, e[3], e[4] + 1))

    def _step_v0_unchunked(self) -> None:
        """V0 `_schedule_default`: prefill whole prompts if any waiting request can start;
        otherwise one decode step for the running requests, preempting from the back."""
        finished_prefill: list[Request] = []
        _, prefill_tokens, prefill_ctx = self._admit_v0(
            self.cfg.max_num_batched_tokens, 0, 0, finished_prefill, chunking=False)
        decodes = 0
        if not finished_prefill:
            self._room_for_decodes()
            decodes = self.dec_n
        self._advance(decodes, prefill_tokens, prefill_ctx, finished_prefill)

    def _advance(self, decodes: int, prefill_tokens: int, prefill_ctx: int,
                 finished_prefill: list[Request]) -> None:
        # 4. time passes
        ctx = (self.dec_base_sum / self.dec_n + self.G) if decodes else 0.0
        dt = self.perf.step_time(decodes, ctx, prefill_tokens, prefill_ctx / 2)
        t = self.now + dt
        self._tick(t)
        self.now = t
        self.stats.steps += 1
        if decodes:
            self.G += 1
        self.stats.output_tokens += decodes
        # 5. completions of decoders, first tokens of finished prefills
        self._complete_decoders()
        for r in finished_prefill:
            self.prefilling.pop(r.rid, None)
            if r.first_token is None:
                r.first_token = t
            r.generated += 1
            self.stats.output_tokens += 1
            if r.generated >= r.output:
                self._finish(r, t)
            else:
                self._start_decoding(r)

    def _complete_decoders(self) -> None:
        while self.heap and self.heap[0][0] <= self.G:
            done_at, rid, epoch = heapq.heappop(self.heap)
            r = self.running.get(rid)
            if r is None or r.epoch != epoch or not r.decoding:
                continue
            self._stop_decoding(r)
            self._finish(r, self.now)

    # --- fast path ------------------------------------------------------------------------
    def can_jump(self) -> bool:
        """Whether the next steps are pure decodes: nothing prefilling and no waiting request
        a step would admit (or drop as never fitting), even with the blocks sliding windows
        and deferred frees may give back meanwhile."""
        if self.prefilling or not self.dec_n:
            return False
        c = self.cfg
        if not self.waiting or len(self.running) >= c.max_num_seqs:
            return True
        r = self.waiting[0]
        budget = c.max_num_batched_tokens - self.dec_n  # what a step leaves for prefills
        if c.v0:
            full = self.blocks_for(r.tokens_needed)
            if c.num_blocks - full < c.watermark_blocks:
                return False
            return full + c.watermark_blocks > self.free or (c.chunked_prefill and budget <= 0)
        tokens = r.tokens_needed
        s, touched = self._hit(r) if r.prefix_blocks else (0, 0)
        own = self._own_hit(r, s) if r.cached else 0
        s, touched = s + own, touched + self.nf * own
        if self.locals:
            if self.never_fits(tokens):
                return False
            free = self.free + self.swa_active + sum(q.defer for q in self.deferring)
            if c.reserve_full_prompt:
                return self.full_need(tokens, s, c.local_admission_cap) + touched > free \
                    or budget <= 0
        else:
            full = self.nf * -(-tokens // c.block_size) + c.state_blocks
            if full > c.num_blocks:
                return False
            free = self.free
            if c.reserve_full_prompt:
                return full - self.nf * s + touched > free or budget <= 0
        if budget <= 0:
            return True
        hit = s * c.block_size
        chunk = min(tokens - hit, budget)
        return self.hold(hit + chunk, hit) - self.nf * s + touched > free

    def jump(self, until: float) -> bool:
        """Advance pure-decode steps up to (not past) time `until`, the next completion or
        the step where blocks would run out. Returns False if not even 2 steps fit."""
        if self.locals:
            self._activate()
        # next completion
        while self.heap:
            done_at, rid, epoch = self.heap[0]
            r = self.running.get(rid)
            if r is None or r.epoch != epoch or not r.decoding:
                heapq.heappop(self.heap)
                continue
            break
        k_done = (self.heap[0][0] - self.G) if self.heap else 10**9
        ctx = self.dec_base_sum / self.dec_n + self.G
        dt = self.perf.step_time(self.dec_n, ctx)
        k_time = int(min((until - self.now) / dt, 1e9))  # inf when `until` is
        k = min(k_done - 1, k_time, 100_000)
        free = self.free - self.reserve
        if self.locals:
            k = min(k, self._local_limit())
            free += sum(r.defer for r in self.deferring if r.defer_due <= self.stats.steps + 1)
        if k < 2:
            return False
        lo, hi = 0, k  # largest k whose block growth fits
        if self.bound(k) > free:
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if self.bound(mid) <= free:
                    lo = mid
                else:
                    hi = mid - 1
            k = lo
        if k < 2:
            return False
        dt_mid = self.perf.step_time(self.dec_n, ctx + k / 2)
        while k >= 2 and self.now + k * dt_mid > until:  # contexts grow: steps get longer
            k = int((until - self.now) / dt_mid)
            dt_mid = self.perf.step_time(self.dec_n, ctx + k / 2)
        if k < 2:
            return False
        self.free -= self.crossings(k)
        if self.deferring:
            self._release_deferred(self.stats.steps + k)
        if self.p_cached > self.p_held:
            self._evict()
        t = self.now + k * dt_mid
        self._tick(t)
        self.now = t
        self.G += k
        self.stats.output_tokens += k * self.dec_n
        self.stats.steps += k
        return True

    def _local_limit(self) -> int:
        """Steps a jump may take before a chunk boundary frees blocks or a sliding window
        fills (its frees then start; the lazy count needs them)."""
        k = 10**9
        while self.drops:
            _, rid, epoch, _, _ = self.drops[0]
            r = self.running.get(rid)
            if r is not None and r.epoch == epoch and r.decoding:
                k = self.drops[0][0] - self.G - 1
                break
            heapq.heappop(self.drops)
        while self.pending:
            _, rid, epoch, _ = self.pending[0]
            r = self.running.get(rid)
            if r is not None and r.epoch == epoch and r.decoding:
                k = min(k, self.pending[0][0] + self.swa_min_bs - 1 - self.G)
                break
            heapq.heappop(self.pending)
        return k
