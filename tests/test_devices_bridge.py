"""The thread -> asyncio bridge, the pacer and the reconnect backoff."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from typing import Any

import pytest

from devices.backoff import backoff_delays
from devices.bridge import FrameBridge, start_producer
from devices.errors import BridgeClosed, BridgeOverflow, DeviceLost, EndOfStream
from devices.pacing import Pacer


async def _wait_for(predicate: object, timeout: float = 5.0) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.005)


def test_bridge_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        FrameBridge(0)
    with pytest.raises(ValueError):
        FrameBridge(1, "grow")  # type: ignore[arg-type]


async def test_items_then_end_of_stream_in_order() -> None:
    bridge: FrameBridge[int] = FrameBridge(4)

    def produce(b: FrameBridge[int]) -> None:
        for i in range(20):
            b.put(i)

    start_producer(bridge, produce, name="t")
    assert [i async for i in bridge] == list(range(20))
    with pytest.raises(EndOfStream):
        await bridge.get()
    assert bridge.statistics().finished


async def test_block_policy_applies_backpressure() -> None:
    bridge: FrameBridge[int] = FrameBridge(3, "block")
    produced: list[int] = []

    def produce(b: FrameBridge[int]) -> None:
        for i in range(10):
            b.put(i)
            produced.append(i)

    thread = start_producer(bridge, produce, name="t")
    await _wait_for(lambda: bridge.statistics().waiting == 1)
    stats = bridge.statistics()
    assert stats.buffered == 3 and len(produced) == 3 and stats.dropped == 0
    assert [i async for i in bridge] == list(range(10))  # lossless
    thread.join(2)
    assert not thread.is_alive()


async def test_drop_oldest_keeps_newest_and_counts() -> None:
    bridge: FrameBridge[int] = FrameBridge(3, "drop_oldest")
    for i in range(10):
        bridge.put(i)  # never blocks, even from the loop thread
    bridge.finish()
    assert bridge.statistics().dropped == 7
    assert [i async for i in bridge] == [7, 8, 9]


def test_fail_policy_raises_to_producer() -> None:
    bridge: FrameBridge[int] = FrameBridge(2, "fail")
    bridge.put(1)
    bridge.put(2)
    with pytest.raises(BridgeOverflow):
        bridge.put(3)


def test_block_put_times_out() -> None:
    bridge: FrameBridge[int] = FrameBridge(1)
    bridge.put(1)
    with pytest.raises(TimeoutError):
        bridge.put(2, timeout=0.05)


async def test_producer_exception_reaches_consumer_after_items() -> None:
    bridge: FrameBridge[int] = FrameBridge(8)
    boom = DeviceLost("v4l2:/dev/video0", OSError(19, "No such device"))

    def produce(b: FrameBridge[int]) -> None:
        b.put(1)
        b.put(2)
        raise boom

    start_producer(bridge, produce, name="t")
    got = [await bridge.get(), await bridge.get()]
    with pytest.raises(DeviceLost) as caught:
        await bridge.get()
    assert got == [1, 2] and caught.value is boom
    with pytest.raises(DeviceLost):  # sticky: never lost on a second look
        await bridge.get()


async def test_close_stops_a_blocked_producer_promptly() -> None:
    bridge: FrameBridge[int] = FrameBridge(1)
    outcome: list[str] = []

    def produce(b: FrameBridge[int]) -> None:
        try:
            while True:
                b.put(0)
        except BridgeClosed:
            outcome.append("closed")
            raise

    thread = start_producer(bridge, produce, name="t")
    await _wait_for(lambda: bridge.statistics().waiting == 1)
    started = time.monotonic()
    bridge.close()
    thread.join(2)
    assert not thread.is_alive() and time.monotonic() - started < 0.5
    assert outcome == ["closed"]
    with pytest.raises(BridgeClosed):
        await bridge.get()


async def test_close_wakes_a_pacing_sleep() -> None:
    bridge: FrameBridge[int] = FrameBridge(1)
    woke: list[bool] = []
    thread = threading.Thread(target=lambda: woke.append(bridge.wait_closed(30)))
    thread.start()
    bridge.close()
    thread.join(2)
    assert woke == [True]


async def test_get_is_cancellable_and_loses_nothing() -> None:
    bridge: FrameBridge[int] = FrameBridge(2)
    waiter = asyncio.create_task(bridge.get())
    await _wait_for(lambda: bridge.statistics().waiting_consumers == 1)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert bridge.statistics().waiting_consumers == 0
    bridge.put(5)
    assert await bridge.get() == 5


async def test_put_from_another_thread_wakes_a_waiting_consumer() -> None:
    bridge: FrameBridge[str] = FrameBridge(1)
    timer = threading.Timer(0.05, bridge.put, args=("hello",))
    timer.start()
    assert await asyncio.wait_for(bridge.get(), 2) == "hello"


# -- pacing --------------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> bool:
        self.sleeps.append(round(seconds, 6))
        self.now += seconds
        return False


def test_pacer_releases_by_pts_and_catches_up_without_sleeping() -> None:
    fake = FakeClock()
    pacer = Pacer(fake.sleep, fake.clock)
    pacer.wait_until(5.0)  # anchors: first item goes at once
    pacer.wait_until(5.5)
    fake.now += 2.0  # a slow consumer held the producer back
    pacer.wait_until(6.0)  # overdue: no sleep
    pacer.wait_until(8.0)
    assert fake.sleeps == [0.5, 0.5]


def test_pacer_raises_when_closed_mid_sleep() -> None:
    pacer = Pacer(lambda _s: True)
    pacer.wait_until(0.0)
    with pytest.raises(BridgeClosed):
        pacer.wait_until(1.0)


# -- backoff -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({}, [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]),
        ({"base": 1.0, "cap": 3.0}, [1.0, 2.0, 3.0, 3.0, 3.0, 3.0, 3.0]),
        ({"base": 0.1, "cap": 1.0, "factor": 3.0}, [0.1, 0.3, 0.9, 1.0, 1.0, 1.0, 1.0]),
    ],
)
def test_backoff_is_capped_exponential(kwargs: dict[str, Any], expected: list[float]) -> None:
    delays = backoff_delays(**kwargs)
    assert [round(next(delays), 9) for _ in expected] == expected


def test_backoff_jitter_stays_within_bounds_and_is_reproducible() -> None:
    first = backoff_delays(jitter=0.5, rng=random.Random(7))
    second = backoff_delays(jitter=0.5, rng=random.Random(7))
    a = [next(first) for _ in range(8)]
    assert a == [next(second) for _ in range(8)]
    plain = backoff_delays()
    for got in a:
        nominal = next(plain)
        assert nominal * 0.5 <= got <= nominal


@pytest.mark.parametrize(
    "kwargs",
    [{"base": 0}, {"base": 2.0, "cap": 1.0}, {"factor": 0.5}, {"jitter": 1.5}],
)
def test_backoff_rejects_bad_arguments(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        next(backoff_delays(**kwargs))
