"""Where a process's time goes: py-spy samples it for a while, and the samples are
folded into the functions that held the CPU (self time) and the calls that
contained them (inclusive time), as two small tables.

Used by the benchmarks (`--profile`); py-spy is a test extra. Samples are taken
without pausing the target (--nonblocking), so the profile does not slow it."""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
import sys
import tempfile


def actor_pid(actor_name: str, namespace: str) -> int:
    """The process id of a named Ray actor (asked of the actor itself: Ray's state
    API needs the dashboard, which local clusters run without)."""
    import ray
    actor = ray.get_actor(actor_name, namespace=namespace)
    return ray.get(actor.__ray_call__.remote(lambda _self: os.getpid()))


class Sampler:
    """py-spy on one process while the `with` body runs."""

    def __init__(self, pid: int, label: str, rate_hz: int = 200) -> None:
        self.pid, self.label, self.rate_hz = pid, label, rate_hz
        self._out = os.path.join(tempfile.mkdtemp(prefix="rafka-profile-"), "stacks.txt")
        self._process: subprocess.Popen | None = None

    def __enter__(self) -> Sampler:
        beside_python = os.path.join(os.path.dirname(sys.executable), "py-spy")   # the venv's
        py_spy = beside_python if os.path.exists(beside_python) else shutil.which("py-spy") or "py-spy"
        self._process = subprocess.Popen(
            [py_spy, "record", "--pid", str(self.pid), "--format", "raw", "--nonblocking", "--full-filenames", "--rate",
             str(self.rate_hz), "--output", self._out], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return self

    def __exit__(self, *exc) -> None:
        self._process.send_signal(2)   # py-spy writes its samples on SIGINT
        self._process.wait(timeout=60)

    def stacks(self) -> dict[tuple[str, ...], int]:
        folded: dict[tuple[str, ...], int] = collections.Counter()
        if not os.path.exists(self._out):
            return folded
        with open(self._out) as lines:
            for line in lines:
                stack, _, count = line.rstrip("\n").rpartition(" ")
                if stack and count.isdigit():
                    folded[tuple(stack.split(";"))] += int(count)
        return folded


def _function(frame: str) -> str:
    """'name (path/to/module.py:12)' -> 'module.py:name'."""
    name, _, where = frame.partition(" (")
    return f"{os.path.basename(where.split(':')[0])}:{name}" if where else name


# Leaves where a thread waits rather than works: an event loop in epoll, Ray's
# main thread in its C loop, a Python thread on a condition.
IDLE_LEAVES = frozenset({"selectors.py:EpollSelector.select", "worker.py:Worker.main_loop",
                         "threading.py:Condition.wait", "threading.py:Event.wait", "threading.py:Thread.join"})
LAYERS = (("rafka", "/rafka/"), ("kio (wire codec)", "/kio/"), ("ray", "/ray/"),
          ("asyncio", "/asyncio/"), ("pickling", "pickle"))


def _layer(frame: str) -> str:
    where = frame.partition(" (")[2]
    return next((name for name, marker in LAYERS if marker in where), "other")


def report(sampler: Sampler, top: int = 10) -> str:
    """Busy share, self time by layer (rafka, kio, ray, asyncio, pickling, other) and
    by function, over the samples where a thread was working, not waiting."""
    stacks = sampler.stacks()
    total = sum(stacks.values())
    if not total:
        return f"{sampler.label}: no samples (is py-spy allowed to attach? it needs ptrace)"
    busy = {stack: n for stack, n in stacks.items() if _function(stack[-1]) not in IDLE_LEAVES}
    busy_total = sum(busy.values()) or 1
    by_layer: collections.Counter = collections.Counter()
    by_function: collections.Counter = collections.Counter()
    for stack, count in busy.items():
        by_layer[_layer(stack[-1])] += count
        by_function[_function(stack[-1])] += count
    threads_sampled = total / (sampler.rate_hz or 1)
    lines = [f"{sampler.label}: {sum(busy.values())} busy of {total} samples "
             f"({threads_sampled:.0f} thread-seconds at {sampler.rate_hz} Hz)",
             "  busy time by layer: " + ", ".join(f"{name} {100 * n / busy_total:.0f}%"
                                                  for name, n in by_layer.most_common()),
             f"  {'busy %':>7}  function (self time)",
             *(f"  {100 * n / busy_total:>6.1f}%  {f}" for f, n in by_function.most_common(top))]
    return "\n".join(lines)
