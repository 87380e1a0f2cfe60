"""The controller's pool of idle replica actors ("shells"), per broker.

Why: a replica actor is a Ray worker process, and starting one costs about 0.6
CPU-s (the interpreter, Ray, rafka's imports); a 12-partition RF3 topic is 36 of
them, 13 s on a 2-core machine (issue 27). A shell is that process made ahead of
time, on its broker, holding no replica; a topic takes shells and gives each its
replica with one actor call (`assign`), and the pool is made full again in the
background. The cost: an idle shell's memory (a Ray worker with rafka imported)
and Ray's own idle work per process; an idle shell runs no timer of its own.

What is bookkept here: the names, which shells are idle on which broker (ready:
it answered once, so its process runs; starting: made, not yet answered), and
how many to make so that each live broker holds `size_per_broker`. A shell
taken leaves the pool for good: it holds that replica until the replica goes,
then it is killed, never reused (no state of one replica leaks into another).

Names are `replica:b<broker>:<controller epoch>-<n>` (core.actor_names): a new
controller (a higher epoch) never makes a name an earlier one made, so a name
needs no record until it holds a replica (core.metadata's `replica_actor`).

Pure bookkeeping, no Ray, no clock. Caller: the controller actor only.
"""

from __future__ import annotations

from collections.abc import Iterable

from rafka.core.actor_names import broker_of_shell, replica_shell_name

# Bound: every idle shell is a process (~60-70 MB, and Ray's idle work).
MAX_POOL_SIZE_PER_BROKER = 64


class ReplicaPool:
    def __init__(self, *, size_per_broker: int, controller_epoch: int) -> None:
        if (isinstance(size_per_broker, bool) or not isinstance(size_per_broker, int)
                or not 0 <= size_per_broker <= MAX_POOL_SIZE_PER_BROKER):
            raise ValueError(f"replica_pool_size must be 0 to {MAX_POOL_SIZE_PER_BROKER} per broker, "
                             f"not {size_per_broker!r}")
        self.size_per_broker = size_per_broker
        self._controller_epoch = controller_epoch
        self._made = 0   # names made by this controller: the next one's n
        self._ready: dict[int, list[str]] = {}      # by broker, oldest first
        self._starting: dict[int, list[str]] = {}

    def new_name(self, broker_id: int) -> str:
        """A shell name never made before (for the pool, or for a replica the pool
        had no shell for)."""
        self._made += 1
        return replica_shell_name(broker_id, self._controller_epoch, self._made)

    def starting(self, name: str) -> None:
        """A shell made for the pool; not yet answered."""
        self._starting.setdefault(_broker(name), []).append(name)

    def adopt(self, name: str) -> None:
        """An idle shell that was running already (made by an earlier controller)."""
        if name not in self.idle(_broker(name)):
            self._ready.setdefault(_broker(name), []).append(name)

    def ready(self, name: str) -> bool:
        """The starting shell answered. False if it was taken or dropped meanwhile."""
        starting = self._starting.get(_broker(name), [])
        if name not in starting:
            return False
        starting.remove(name)
        self._ready.setdefault(_broker(name), []).append(name)
        return True

    def take(self, broker_id: int) -> str | None:
        """An idle shell of the broker, leaving the pool: a ready one if any (it
        takes its replica at once), else one still starting (started before any
        made now would be); None if the broker has none."""
        for shells in (self._ready.get(broker_id), self._starting.get(broker_id)):
            if shells:
                return shells.pop(0)
        return None

    def drop(self, name: str) -> None:
        """The shell is gone (died, killed, its making failed)."""
        for shells in (self._ready.get(_broker(name), []), self._starting.get(_broker(name), [])):
            if name in shells:
                shells.remove(name)

    def ready_names(self, broker_id: int) -> list[str]:
        """The broker's idle shells that answered (their processes run)."""
        return list(self._ready.get(broker_id, []))

    def idle(self, broker_id: int | None = None) -> list[str]:
        """The idle shells (of one broker, or all), ready ones first."""
        brokers = [broker_id] if broker_id is not None else sorted(set(self._ready) | set(self._starting))
        return [name for b in brokers for name in self._ready.get(b, []) + self._starting.get(b, [])]

    def missing(self, live_broker_ids: Iterable[int]) -> dict[int, int]:
        """How many shells to make now on each live broker to fill the pool (a
        broker that is down keeps what it has: Ray restarts them with it)."""
        wanted = {}
        for broker_id in sorted(set(live_broker_ids)):
            count = self.size_per_broker - len(self.idle(broker_id))
            if count > 0:
                wanted[broker_id] = count
        return wanted


def _broker(name: str) -> int:
    broker_id = broker_of_shell(name)
    if broker_id is None:
        raise ValueError(f"{name!r} is not a replica shell's name")
    return broker_id
