"""A model of PyTorch's caching allocator, enough to replay vLLM's weight post-processing.

Follows `c10/cuda/CUDACachingAllocator.cpp` (the HIP build is the same code): sizes are
rounded up to 512 B; requests up to 1 MiB come from 2 MiB segments of the small pool, up to
10 MiB from 20 MiB segments of the large pool, larger ones from a segment of their own rounded
up to 2 MiB. A request takes the smallest free block of its pool that fits (`get_free_block`,
no `max_split_size` by default), split when the rest exceeds 1 MiB (512 B in the small pool);
a freed block merges with free neighbours of its segment; `empty_cache()` releases only
segments that are wholly free. `reserved` is what the device sees in use.
"""

from __future__ import annotations

import bisect
import itertools

from kvplan.core.record import record

KB, MB = 1024, 1024 * 1024
MIN_BLOCK, SMALL_SIZE, SMALL_BUFFER = 512, MB, 2 * MB
LARGE_BUFFER, MIN_LARGE_ALLOC, ROUND_LARGE = 20 * MB, 10 * MB, 2 * MB


@record(eq=False)
class _Block:
    addr: int
    size: int
    small: bool
    free: bool = True
    prev: _Block | None = None
    next: _Block | None = None


class Allocator:
    """Caching-allocator bookkeeping: `malloc` returns a handle for `free`."""

    def __init__(self) -> None:
        self._free: dict[bool, list[tuple[int, int, _Block]]] = {True: [], False: []}
        self._addr = itertools.count(step=1 << 40)  # segments never touch
        self.reserved = 0
        self.allocated = 0

    @staticmethod
    def rounded(size: int) -> int:
        """A request's size as the allocator counts it: a multiple of 512 B."""
        return max(MIN_BLOCK, -(-size // MIN_BLOCK) * MIN_BLOCK)

    def _insert(self, b: _Block) -> None:
        bisect.insort(self._free[b.small], (b.size, b.addr, b))

    def _remove(self, b: _Block) -> None:
        lst = self._free[b.small]
        del lst[bisect.bisect_left(lst, (b.size, b.addr), key=lambda x: (x[0], x[1]))]

    def malloc(self, size: int) -> _Block:
        size = self.rounded(size)
        small = size <= SMALL_SIZE
        lst = self._free[small]
        i = bisect.bisect_left(lst, (size, -1), key=lambda x: (x[0], x[1]))
        if i < len(lst):
            b = lst.pop(i)[2]
        else:
            seg = (SMALL_BUFFER if small else LARGE_BUFFER if size < MIN_LARGE_ALLOC
                   else -(-size // ROUND_LARGE) * ROUND_LARGE)
            b = _Block(next(self._addr), seg, small)
            self.reserved += seg
        rest = b.size - size
        if rest >= MIN_BLOCK if small else rest > SMALL_SIZE:
            tail = _Block(b.addr + size, rest, small, prev=b, next=b.next)
            if b.next:
                b.next.prev = tail
            b.next, b.size = tail, size
            self._insert(tail)
        b.free = False
        self.allocated += b.size
        return b

    def free(self, b: _Block) -> None:
        b.free = True
        self.allocated -= b.size
        for nb in (b.prev, b.next):
            if nb is not None and nb.free:
                self._remove(nb)
                if nb is b.prev:
                    nb.size += b.size
                    nb.next = b.next
                    if b.next:
                        b.next.prev = nb
                    b = nb
                else:
                    b.size += nb.size
                    b.next = nb.next
                    if nb.next:
                        nb.next.prev = b
        self._insert(b)

    def empty_cache(self) -> None:
        for small in (True, False):
            keep = []
            for entry in self._free[small]:
                b = entry[2]
                if b.prev is None and b.next is None:
                    self.reserved -= b.size
                else:
                    keep.append(entry)
            self._free[small] = keep
