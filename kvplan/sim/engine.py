"""A discrete-event simulation of one vLLM-V1-style engine.

Scheduler semantics follow vLLM V1 (`v1/core/sched/scheduler.py`): each step first extends
the running requests (decodes, then prefill chunks) in scheduling order, allocating blocks
as sequences grow; when a block cannot be allocated the most recently scheduled request is
preempted by recompute (its blocks freed, pushed to the front of the waiting queue, its
prompt and generated tokens recomputed when rescheduled). Then waiting requests are admitted
FCFS while the token budget (max_num_batched_tokens) and max_num_seqs allow and the full
current prompt fits in free blocks (0.19+ `scheduler_reserve_full_isl`). A finished prefill
emits the first token at the end of its step. Step times come from `kvplan.core.perf`.

Speed: decoding requests advance lazily against a global decode counter, and block growth
is counted per residue class of the block boundary, so stretches of pure decoding are
jumped over in one move up to the next arrival, completion, or the step where the free
blocks would run out -- never token by token.

Block accounting: every attention group grows one block per `block_size` tokens (sliding
window groups are charged as full attention: conservative); Mamba states are a fixed number
of blocks per request, taken at admission.
"""

from __future__ import annotations

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
    prefix_hit: int = 0  # prompt tokens served from the prefix cache (first admission only)
    computed: int = 0  # tokens whose KV exists (prefill progress)
    generated: int = 0
    blocks: int = 0
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

    @property
    def tokens_needed(self) -> int:
        """Tokens to (re)compute before decoding: prompt + already generated output."""
        return self.prompt + self.generated


@dataclass
class Config:
    num_blocks: int  # usable blocks (num_gpu_blocks - 1)
    block_size: int
    groups_per_token_block: int  # attention groups: blocks added per block_size tokens
    state_blocks: int  # fixed blocks per request (Mamba states)
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    admission_cap: int | None = None  # requests in the engine (running + waiting)
    queue_limit: int | None = None  # waiting requests; more are rejected (HTTP 429)
    reserve_full_prompt: bool = True


@dataclass
class Stats:
    """What a run produced. Times in seconds."""

    completed: list[Request] = field(default_factory=list)
    rejected: int = 0
    preemptions: int = 0
    recomputed_tokens: int = 0
    output_tokens: int = 0
    steps: int = 0
    events: int = 0
    sim_time: float = 0.0
    # time series, sampled at every event: (time, kv usage 0-1, running, waiting)
    series: list[tuple[float, float, int, int]] = field(default_factory=list)
    area_in_system: float = 0.0  # integral of requests in the system over time


class Engine:
    def __init__(self, cfg: Config, perf: PerfModel):
        self.cfg = cfg
        self.perf = perf
        self.now = 0.0
        self.free = cfg.num_blocks
        self.waiting: deque[Request] = deque()
        self.running: OrderedDict[int, Request] = OrderedDict()  # scheduling order
        self.prefilling: set[int] = set()
        self.G = 0  # global decode counter
        self.dec_count = [0] * cfg.block_size  # decoding requests per residue class
        self.dec_n = 0
        self.dec_base_sum = 0  # sum of (tokens - G) over decoding requests
        self.heap: list[tuple[int, int, int]] = []  # (done_at, rid, epoch)
        self.stats = Stats()
        self._last_t = 0.0

    # --- blocks ---------------------------------------------------------------------------
    def blocks_for(self, tokens: int) -> int:
        c = self.cfg
        return c.groups_per_token_block * -(-max(tokens, 0) // c.block_size) + c.state_blocks

    def _residue(self, r: Request) -> int:
        # tokens = base + G; a new block is needed when (tokens - 1) % bs == 0, i.e. at
        # G = 1 - base (mod bs)
        return (1 - r.base) % self.cfg.block_size

    def crossings(self, k: int) -> int:
        """Blocks decoding requests allocate over the next k decode steps."""
        bs = self.cfg.block_size
        g = self.G
        n = 0
        for q, cnt in enumerate(self.dec_count):
            if cnt:
                n += cnt * ((g + k - q) // bs - (g - q) // bs)
        return n * self.cfg.groups_per_token_block

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

    def _stop_decoding(self, r: Request) -> None:
        """Materialise the lazy state and take r out of the decoding set."""
        r.computed = r.base + self.G
        r.generated = r.gbase + self.G
        r.blocks = self.blocks_for(r.computed)
        r.decoding = False
        r.epoch += 1
        self.dec_count[self._residue(r)] -= 1
        self.dec_n -= 1
        self.dec_base_sum -= r.base

    def _preempt_last(self) -> Request:
        rid, victim = self.running.popitem(last=True)
        if victim.decoding:
            self._stop_decoding(victim)
        self.prefilling.discard(rid)
        self.free += victim.blocks
        victim.blocks = 0
        victim.recomputed += victim.computed
        self.stats.recomputed_tokens += victim.computed
        victim.computed = 0
        victim.preemptions += 1
        self.stats.preemptions += 1
        self.waiting.appendleft(victim)
        return victim

    def _finish(self, r: Request, t: float) -> None:
        r.finish = t
        self.running.pop(r.rid, None)
        self.free += r.blocks
        r.blocks = 0
        self.stats.completed.append(r)

    # --- arrivals -------------------------------------------------------------------------
    def arrive(self, r: Request) -> bool:
        c = self.cfg
        self._tick(self.now)
        if r.prompt + r.output > c.max_model_len:
            r.output = max(1, c.max_model_len - r.prompt)
            if r.prompt >= c.max_model_len:
                self.stats.rejected += 1
                return False
        if c.admission_cap is not None and self.in_system() >= c.admission_cap:
            self.stats.rejected += 1
            return False
        if c.queue_limit is not None and len(self.waiting) >= c.queue_limit:
            self.stats.rejected += 1
            return False
        self.waiting.append(r)
        return True

    # --- one scheduler step ---------------------------------------------------------------
    def step(self) -> None:
        c = self.cfg
        budget = c.max_num_batched_tokens
        # 1. decodes: one token each; preempt from the back until the new blocks fit
        while True:
            need = self.crossings(1)
            if need <= self.free or not self.running:
                break
            self._preempt_last()
        self.free -= need
        budget -= self.dec_n
        decodes = self.dec_n
        # 2. running prefills (chunked) in scheduling order
        prefill_tokens = 0
        prefill_ctx = 0.0
        finished_prefill: list[Request] = []
        for rid in list(self.running):
            if rid not in self.prefilling or budget <= 0:
                continue
            r = self.running[rid]
            chunk = min(r.tokens_needed - r.computed, budget)
            need = self.blocks_for(r.computed + chunk) - r.blocks
            while need > self.free and self.running:
                victim = self._preempt_last()
                if victim is r:
                    break
            if r.rid not in self.running:
                break
            self.free -= need
            r.blocks += need
            r.computed += chunk
            budget -= chunk
            prefill_tokens += chunk
            prefill_ctx = max(prefill_ctx, r.computed)
            if r.computed >= r.tokens_needed:
                finished_prefill.append(r)
        # 3. admit waiting requests FCFS
        while self.waiting and budget > 0 and len(self.running) < c.max_num_seqs:
            r = self.waiting[0]
            if self.blocks_for(r.tokens_needed) > c.num_blocks:
                # can never fit, even in an empty pool (the null block takes one): vLLM
                # would stall on it; the simulation drops it and counts it as rejected
                self.waiting.popleft()
                self.stats.rejected += 1
                continue
            cached = r.prefix_hit if r.preemptions == 0 and r.computed == 0 else 0
            if c.reserve_full_prompt and self.blocks_for(r.tokens_needed) > self.free:
                break
            self.waiting.popleft()
            r.computed = cached
            r.admitted = r.admitted if r.admitted is not None else self.now
            chunk = min(r.tokens_needed - r.computed, budget)
            need = self.blocks_for(r.computed + chunk)
            if need > self.free:
                self.waiting.appendleft(r)
                break
            self.free -= need
            r.blocks = need
            r.computed += chunk
            budget -= chunk
            prefill_tokens += chunk
            prefill_ctx = max(prefill_ctx, r.computed)
            self.running[r.rid] = r
            if r.computed >= r.tokens_needed:
                finished_prefill.append(r)
            else:
                self.prefilling.add(r.rid)
        # 4. time passes
        ctx = (self.dec_base_sum / self.dec_n + self.G) if self.dec_n else 0.0
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
            self.prefilling.discard(r.rid)
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
        if self.prefilling or not self.dec_n:
            return False
        admissible = self.waiting and len(self.running) < self.cfg.max_num_seqs and (
            not self.cfg.reserve_full_prompt
            or self.blocks_for(self.waiting[0].tokens_needed) <= self.free)
        return not admissible

    def jump(self, until: float) -> bool:
        """Advance pure-decode steps up to (not past) time `until`, the next completion or
        the step where blocks would run out. Returns False if not even 2 steps fit."""
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
        if k < 2:
            return False
        lo, hi = 0, k  # largest k whose block growth fits
        if self.crossings(k) > self.free:
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if self.crossings(mid) <= self.free:
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
        t = self.now + k * dt_mid
        self._tick(t)
        self.now = t
        self.G += k
        self.stats.output_tokens += k * self.dec_n
        self.stats.steps += k
        return True
