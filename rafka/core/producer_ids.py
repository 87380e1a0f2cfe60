"""Producer ids for a transaction coordinator, handed out one by one from blocks
the controller allocates (Kafka's RPCProducerIdManager over AllocateProducerIds).

Why blocks: every new transactional id, and every producer id rotation, needs an
id no one else ever had; asking the controller for each would put a controller
round trip on InitProducerId. A block of `ProducerIdBlock.size` ids is taken
once; the next block is fetched in the background when 90% of the current one is
used (Kafka's PidPrefetchThreshold), so a busy coordinator rarely waits.

`claim()` is synchronous (the state machine's `new_producer_id` callable is):
with no id at hand it raises COORDINATOR_LOAD_IN_PROGRESS (retriable, what
Kafka answers while its manager waits for a block) and starts a fetch. A caller
that can wait awaits `ready()` first, then claims before its next await.

Invariants: an id is handed out at most once; ids only grow (a block that does
not start above every id handed out is refused, as Kafka refuses a non-monotonic
block); at most one block fetch is in flight and at most one block is held in
reserve. Pure asyncio over an injected `allocate_block`. Caller:
core.transaction_shard.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable

from rafka.core.errors import CoordinatorLoadInProgress

PREFETCH_THRESHOLD = 0.90


@dataclasses.dataclass(frozen=True)
class ProducerIdBlock:
    first_producer_id: int
    size: int

    def __post_init__(self) -> None:
        if self.first_producer_id < 0 or self.size <= 0:
            raise ValueError(f"not a producer id block: {self}")

    @property
    def last_producer_id(self) -> int:
        return self.first_producer_id + self.size - 1


class NonMonotonicProducerIdBlock(Exception):
    """A controller bug: a block that does not start above the ids handed out."""


class ProducerIdAllocator:
    def __init__(self, allocate_block: Callable[[], Awaitable[ProducerIdBlock]], *,
                 prefetch_threshold: float = PREFETCH_THRESHOLD) -> None:
        self._allocate_block = allocate_block
        self.prefetch_threshold = prefetch_threshold
        self._block: ProducerIdBlock | None = None
        self._next_id = 0                       # the next id of `_block` to hand out
        self._reserve: ProducerIdBlock | None = None
        self._fetch: asyncio.Task | None = None
        self._highest_id = -1                   # the highest id handed out or held

    @property
    def has_id(self) -> bool:
        return (self._block is not None and self._next_id <= self._block.last_producer_id) or self._reserve is not None

    def claim(self) -> int:
        if self._block is None or self._next_id > self._block.last_producer_id:
            if self._reserve is None:
                self._start_fetch()
                raise CoordinatorLoadInProgress("waiting for a new block of producer ids from the controller")
            self._block, self._reserve = self._reserve, None
            self._next_id = self._block.first_producer_id
        producer_id = self._next_id
        self._next_id += 1
        block = self._block
        if self._next_id - block.first_producer_id >= block.size * self.prefetch_threshold and self._reserve is None:
            self._start_fetch()
        return producer_id

    async def ready(self) -> None:
        """Returns once `claim()` has an id; raises the fetch's error if the
        controller could not give a block."""
        while not self.has_id:
            self._start_fetch()
            await asyncio.shield(self._fetch)   # a cancelled caller leaves the fetch running

    def _start_fetch(self) -> None:
        if self._fetch is None:
            self._fetch = asyncio.get_running_loop().create_task(self._fetch_block())
            self._fetch.add_done_callback(lambda task: task.cancelled() or task.exception())   # retrieved

    async def _fetch_block(self) -> None:
        try:
            block = await self._allocate_block()
            if block.first_producer_id <= self._highest_id:
                raise NonMonotonicProducerIdBlock(f"{block} does not start above id {self._highest_id}")
            self._highest_id = block.last_producer_id
            if self._block is None or self._next_id > self._block.last_producer_id:
                self._block, self._next_id = block, block.first_producer_id
            else:
                self._reserve = block
        finally:
            self._fetch = None
