"""Request-time quotas (request_percentage) as Kafka's ClientRequestQuotaManager,
on a fake clock: what a request's handling records (100 a second of handling),
the throttle time (QuotaUtils' formula, at most one quota window), a greedy
client held to its share of the time; and protocol.throttling.HandlingTime,
which counts the time a request's steps run, never the time it waits."""

import asyncio

import pytest

from rafka.core.client_quotas import (CLIENT_ID, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE, USER, ClientQuotaManager,
                                      ClientQuotas, request_percentage_of)
from rafka.core.clock import FakeClock
from rafka.protocol.throttling import HandlingTime

pytestmark = pytest.mark.core

MS_NS = 1_000_000


def request_quota(percentage: float, *pairs) -> ClientQuotas:
    return ClientQuotas({frozenset(pairs or [(CLIENT_ID, None)]): {REQUEST_PERCENTAGE: percentage}})


def test_request_percentage_of__a_second_of_handling_is_a_hundred():
    assert request_percentage_of(1_000 * MS_NS) == pytest.approx(100.0)
    assert request_percentage_of(5 * MS_NS) == pytest.approx(0.5)


def test_throttle__kafka_formula__bounded_by_one_quota_window__byte_rates_not():
    """10% of a thread (100 ms a second) over Kafka's default window (11 samples of
    1 s, the rate over at least 10 s): 1 s of handling is the whole allowance;
    100 ms more is 10% over (a tenth of 10 s, bounded to the 1 s window); the
    same overrun of a byte rate is not bounded."""
    clock = FakeClock(now_ms=0)
    manager = ClientQuotaManager(REQUEST_PERCENTAGE)
    configured = request_quota(10.0)
    record = lambda ms: manager.record_and_get_throttle_time_ms(  # noqa: E731
        configured, "alice", "app", request_percentage_of(ms * MS_NS), clock.monotonic_ms())
    assert record(1_000) == 0
    assert record(100) == 1_000          # unbounded: (11 - 10) / 10 * 10 s = 1000 ms, the bound itself
    clock.advance(3_000)
    assert record(2_000) == 1_000        # unbounded: 20 s
    bytes_manager = ClientQuotaManager(PRODUCER_BYTE_RATE)
    assert bytes_manager.record_and_get_throttle_time_ms(
        ClientQuotas({frozenset({(CLIENT_ID, None)}): {PRODUCER_BYTE_RATE: 10.0}}), "alice", "app", 300.0, 0) == 20_000
    assert manager.throttle_time_max_ms == 1_000 and bytes_manager.throttle_time_max_ms is None


def test_throttle__quota_by_user__shared_by_its_clients__others_untouched():
    clock = FakeClock(now_ms=0)
    manager = ClientQuotaManager(REQUEST_PERCENTAGE, quota_window_num=2)
    configured = request_quota(5.0, (USER, "alice"))
    for client in ("a", "b"):   # 40 ms each: 8% of the 1 s window together
        last = manager.record_and_get_throttle_time_ms(configured, "alice", client, request_percentage_of(40 * MS_NS),
                                                       clock.monotonic_ms())
    assert last == 600                   # (8 - 5) / 5 * 1 s
    assert manager.record_and_get_throttle_time_ms(configured, "bob", "a", request_percentage_of(900 * MS_NS),
                                                   clock.monotonic_ms()) == 0


@pytest.mark.parametrize("handling_ms", [2, 20])
def test_greedy_client__held_to_its_share_of_the_time_within_10_percent(handling_ms):
    """A client that sends again as soon as its throttle time has passed (1 ms a
    round trip besides the handling), each request taking `handling_ms` of the
    broker's time, under 10% (100 ms a second) and Kafka's default window: over
    whole 11-second cycles the broker spent a tenth of the time on it."""
    clock = FakeClock(now_ms=0)
    manager = ClientQuotaManager(REQUEST_PERCENTAGE)
    configured = request_quota(10.0)
    handled_ms = 0
    while clock.monotonic_ms() < 33_000:
        clock.advance(handling_ms)
        handled_ms += handling_ms
        throttle_ms = manager.record_and_get_throttle_time_ms(
            configured, "u", "c", request_percentage_of(handling_ms * MS_NS), clock.monotonic_ms())
        assert throttle_ms <= 1_000
        clock.advance(1 + throttle_ms)
    assert abs(handled_ms / clock.monotonic_ms() / 0.10 - 1) <= 0.10


# --- HandlingTime: a request's steps, not its waits ------------------------------------

def test_handling_time__counts_the_steps__not_the_waits():
    clock = FakeClock(now_ms=0)

    async def scenario():
        answered = asyncio.get_running_loop().create_future()

        async def handle():
            clock.advance(5)                 # decode, authorize
            value = await answered           # relayed: waits on an actor's answer
            clock.advance(3)                 # merge, encode
            return value

        async def actor():
            await asyncio.sleep(0)
            clock.advance(100)               # someone else's time
            answered.set_result("answer")
        started_ns = clock.monotonic_ns()
        clock.advance(2)                     # the frame's parse, before the handling
        timing = HandlingTime(clock, started_ns)
        other = asyncio.ensure_future(actor())
        result = await timing.run(handle())
        await other
        return result, timing.busy_ns
    assert asyncio.run(scenario()) == ("answer", 10 * MS_NS)


def test_handling_time__an_error_and_a_cancellation_reach_the_handler__time_counted():
    clock = FakeClock(now_ms=0)
    seen = []

    async def scenario():
        async def failing():
            clock.advance(4)
            raise ValueError("bad request")

        timing = HandlingTime(clock)
        with pytest.raises(ValueError, match="bad request"):
            await timing.run(failing())
        assert timing.busy_ns == 4 * MS_NS

        async def parked():
            clock.advance(1)
            try:
                await asyncio.get_running_loop().create_future()   # never answered
            except asyncio.CancelledError:
                clock.advance(2)
                seen.append("cancelled")
                raise
        timing = HandlingTime(clock)
        task = asyncio.ensure_future(timing.run(parked()))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return timing.busy_ns
    assert asyncio.run(scenario()) == 3 * MS_NS and seen == ["cancelled"]
