"""The simulated engine's KV block pool, kept the way vLLM v1's BlockPool keeps it (vllm/v1/core/block_pool.py).

    pool = BlockPool(97)
    pool.allocate(3)                   # three private blocks, taken from the front of the free queue
    pool.cache([h1, h2], 2)            # two of them now hold full blocks of known content (hashes)
    pool.release([h1, h2], 1)          # the request ends: its blocks join the back of the free queue

Every free block waits in one queue, least recently freed first, whether it still holds cached content
or not; an allocation takes blocks from the front, and a block taken that still held content is evicted
(its hash forgotten). A request frees its blocks tail first, so its last blocks are evicted before its
first ones. A cached block that a new request hits is taken out of the queue while it is held.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict


class BlockPool:
    """Blocks in use (cached ones by reference count, private ones by number) and the free queue."""

    def __init__(self, blocks: int) -> None:
        self.blocks = blocks
        self.refs: dict[int, int] = {}  # cached blocks in use -> how many requests hold them
        self.private = 0  # blocks in use whose content is not (yet) cached
        self.evicted = 0
        self._empty = itertools.count(-1, -1)  # keys of free blocks without content (never a hash here)
        self.free: OrderedDict[int, None] = OrderedDict((next(self._empty), None) for _ in range(blocks))

    def in_use(self) -> int:
        """Blocks held by requests."""
        return len(self.refs) + self.private

    def is_cached(self, block: int) -> bool:
        """The block's content is in the cache (held, or free and not yet evicted)."""
        return block in self.refs or block in self.free

    def lookup(self, hashes: list[int]) -> list[int]:
        """The leading blocks of `hashes` found in the cache (a miss ends the hit: the hashes chain)."""
        return list(itertools.takewhile(self.is_cached, hashes))

    def evictable(self, hashes: list[int]) -> int:
        """How many of these cached blocks sit in the free queue (holding them takes them out of it)."""
        return sum(block in self.free for block in hashes)

    def hold(self, hashes: list[int]) -> None:
        """A request holds these cached blocks: out of the free queue, one reference more."""
        for block in hashes:
            self.free.pop(block, None)
            self.refs[block] = self.refs.get(block, 0) + 1

    def allocate(self, count: int) -> bool:
        """Take `count` private blocks from the front of the free queue, evicting what they held; False if
        fewer are free (nothing is taken then)."""
        if count > len(self.free):
            return False
        for _ in range(count):
            block, _ = self.free.popitem(last=False)
            if block >= 0:
                self.evicted += 1
        self.private += count
        return True

    def cache(self, hashes: list[int]) -> None:
        """One private block per hash now holds that content. Content already cached elsewhere is held
        instead, and the duplicate private block is freed."""
        for block in hashes:
            self.private -= 1
            if self.is_cached(block):
                self.hold([block])
                self.free[next(self._empty)] = None
            else:
                self.refs[block] = 1

    def release(self, hashes: list[int], private: int) -> None:
        """A request gives back its cached blocks (in order) and `private` tail blocks, tail first."""
        self.private -= private
        for _ in range(private):
            self.free[next(self._empty)] = None
        for block in reversed(hashes):
            self.refs[block] -= 1
            if self.refs[block] == 0:
                del self.refs[block]
                self.free[block] = None
