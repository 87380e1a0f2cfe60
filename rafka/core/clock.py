"""Time, passed in. Every timeout, roll and expiry in rafka/core reads a clock handed
to it, so tests move time with FakeClock.advance() instead of sleeping."""

from __future__ import annotations

import time


class SystemClock:
    def now_ms(self) -> int:
        """Wall-clock milliseconds since the epoch (record timestamps, retention)."""
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        """Monotonic milliseconds (timeouts, lag timers)."""
        return time.monotonic_ns() // 1_000_000

    def monotonic_ns(self) -> int:
        """Monotonic nanoseconds (the time a request's handling takes)."""
        return time.monotonic_ns()


class FakeClock:
    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self._now_ns = now_ms * 1_000_000

    def now_ms(self) -> int:
        return self._now_ns // 1_000_000

    def monotonic_ms(self) -> int:
        return self._now_ns // 1_000_000

    def monotonic_ns(self) -> int:
        return self._now_ns

    def advance(self, ms: float) -> None:
        if ms < 0:
            raise ValueError("a clock does not go back")
        self._now_ns += round(ms * 1_000_000)
