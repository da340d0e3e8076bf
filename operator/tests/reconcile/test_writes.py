"""The loop's write queue: one write per service, most urgent first, bounded writers, shutdown."""

from __future__ import annotations

import asyncio
import threading

import pytest

from tailguard.metrics.results import ServiceKey
from tailguard.reconcile.telemetry import Telemetry
from tailguard.reconcile.writes import Priority, Write, WriteQueue


class Recorder:
    """Writes that note their service when made; the first one can be held until released."""

    def __init__(self) -> None:
        self.made: list[str] = []
        self.landed: list[tuple[str, int | Exception]] = []
        self.release = threading.Event()
        self.release.set()
        self.holding = threading.Event()

    def write(
        self, name: str, priority: Priority, *, source: str | None = None, hold: bool = False
    ) -> Write[str]:
        def run() -> int:
            if hold:
                self.holding.set()
                assert self.release.wait(10), "never released"
            self.made.append(name)
            return 1

        return Write(("ns", name), priority, run, lambda outcome: self.landed.append((name, outcome)), source)

    async def held(self) -> None:
        assert await asyncio.to_thread(self.holding.wait, 5), "the held write never started"


def _queue(writers: int = 1) -> tuple[WriteQueue[str], Telemetry]:
    telemetry = Telemetry()
    return WriteQueue(telemetry, writers=writers), telemetry


async def _hold_the_writer(queue: WriteQueue[str], rec: Recorder) -> None:
    rec.release.clear()
    queue.submit(rec.write("first", Priority.REFRESH, hold=True))
    await rec.held()


async def test_the_most_urgent_write_goes_first() -> None:
    queue, telemetry = _queue()
    rec = Recorder()
    await _hold_the_writer(queue, rec)
    queue.submit(rec.write("refresh", Priority.REFRESH))
    queue.submit(rec.write("status", Priority.STATUS))
    queue.submit(rec.write("act", Priority.ACT))
    assert telemetry.registry.get_sample_value("tailguard_write_queue_depth", {"priority": "refresh"}) == 1
    rec.release.set()
    await queue.flush()
    assert rec.made == ["first", "act", "status", "refresh"]
    assert [outcome for _, outcome in rec.landed] == [1, 1, 1, 1]
    assert queue.idle


async def test_a_newer_write_replaces_the_queued_one_and_keeps_its_place() -> None:
    queue, telemetry = _queue()
    rec = Recorder()
    await _hold_the_writer(queue, rec)
    queue.submit(rec.write("a", Priority.REFRESH, source="old"))
    queue.submit(rec.write("b", Priority.REFRESH))
    assert queue.submit(rec.write("a", Priority.REFRESH, source="new")) is True
    queued = queue.queued(("ns", "a"))
    assert queued is not None
    assert queued.source == "new"
    assert queue.depth == 2, "never two writes queued for one service"
    rec.release.set()
    await queue.flush()
    assert rec.made == ["first", "a", "b"], "made once, in the place of the first"
    assert telemetry.registry.get_sample_value("tailguard_writes_coalesced_total") == 1


async def test_a_replacement_that_acts_moves_ahead() -> None:
    queue, _ = _queue()
    rec = Recorder()
    await _hold_the_writer(queue, rec)
    queue.submit(rec.write("a", Priority.REFRESH))
    queue.submit(rec.write("b", Priority.STATUS))
    queue.submit(rec.write("a", Priority.ACT))
    rec.release.set()
    await queue.flush()
    assert rec.made == ["first", "a", "b"]


async def test_no_second_write_for_a_service_in_flight() -> None:
    queue, _ = _queue()
    rec = Recorder()
    await _hold_the_writer(queue, rec)
    assert queue.in_flight(("ns", "first"))
    with pytest.raises(RuntimeError, match="in flight"):
        queue.submit(rec.write("first", Priority.ACT))
    rec.release.set()
    await queue.flush()
    assert not queue.busy(("ns", "first"))


async def test_writers_are_bounded() -> None:
    queue, telemetry = _queue(writers=3)
    running, most = 0, 0
    lock = threading.Lock()
    gate = threading.Event()

    def run() -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        gate.wait(0.05)
        with lock:
            running -= 1
        return 1

    keys: list[ServiceKey] = [("ns", f"s{i}") for i in range(12)]
    for key in keys:
        queue.submit(Write(key, Priority.STATUS, run, lambda outcome: None))
    await queue.flush()
    assert most == 3
    assert (
        telemetry.registry.get_sample_value("tailguard_write_latency_seconds_count", {"priority": "status"})
        == 12
    )


async def test_a_failed_write_is_reported_and_the_writer_goes_on() -> None:
    queue, _ = _queue()
    outcomes: list[int | Exception] = []

    def boom() -> int:
        raise ValueError("the API server said no")

    queue.submit(Write(("ns", "a"), Priority.ACT, boom, outcomes.append))
    queue.submit(Write(("ns", "b"), Priority.ACT, lambda: 2, outcomes.append))
    await queue.flush()
    assert isinstance(outcomes[0], ValueError)
    assert outcomes[1] == 2


async def test_shutdown_drops_refreshes_and_lands_acting_writes() -> None:
    queue, _ = _queue()
    rec = Recorder()
    await _hold_the_writer(queue, rec)
    queue.submit(rec.write("refresh", Priority.REFRESH))
    queue.submit(rec.write("act", Priority.ACT))
    asyncio.get_running_loop().call_later(0.1, rec.release.set)  # the API server answers late
    await queue.close(grace_s=5, acting_grace_s=5)
    assert rec.made == ["first", "act"]
    assert queue.idle


async def test_shutdown_gives_status_writes_only_the_grace() -> None:
    queue, _ = _queue()
    rec = Recorder()
    await _hold_the_writer(queue, rec)
    queue.submit(rec.write("status", Priority.STATUS))
    queue.submit(rec.write("act", Priority.ACT))
    # The held write outlasts the grace: the status write is dropped, the acting one still made.
    asyncio.get_running_loop().call_later(0.3, rec.release.set)
    await queue.close(grace_s=0.05, acting_grace_s=5)
    assert rec.made == ["first", "act"]
