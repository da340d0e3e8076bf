"""The operator's feed of InferenceServices: the inventory kept current, each new spec handled once,
one run at a time per service, failures retried with the newest copy."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tailguard.handlers.services import RETRY_PAUSES_S, ServiceFeed, SpecQueue
from tailguard.reconcile.inventory import Inventory
from tg_testing import manifest


def _service(
    name: str = "chat", namespace: str = "team-a", generation: int = 1, rv: str = "1"
) -> dict[str, Any]:
    body = manifest()
    body["metadata"].update(name=name, namespace=namespace, generation=generation, resourceVersion=rv)
    return body


class _Recorder:
    """A spec handler that records what it was given and fails as often as told."""

    def __init__(self, failures: int = 0) -> None:
        self.handled: list[tuple[str, int, str]] = []
        self.failures = failures
        self.reports: list[str] = []
        self.gate: threading.Event | None = None
        self.entered = threading.Event()

    def handle(self, body: dict[str, Any]) -> None:
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(5), "the test never opened the gate"
        meta = body["metadata"]
        if self.failures:
            self.failures -= 1
            raise RuntimeError("the API server said no\nsecond line")
        self.handled.append((meta["name"], meta["generation"], meta["resourceVersion"]))

    def report(self, body: dict[str, Any], message: str) -> None:
        self.reports.append(f"{body['metadata']['name']}: {message}")


class _Pauses:
    """A sleep that records its pauses and returns at once."""

    def __init__(self) -> None:
        self.taken: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.taken.append(seconds)
        await asyncio.sleep(0)


async def _settle(queue: SpecQueue) -> None:
    for _ in range(500):
        if queue.busy == 0:
            return
        await asyncio.sleep(0.005)
    raise AssertionError("runs still busy")


def _feed(
    recorder: _Recorder, namespace: str | None = None
) -> tuple[ServiceFeed, SpecQueue, Inventory, _Pauses]:
    pauses = _Pauses()
    queue = SpecQueue(recorder.handle, recorder.report, ThreadPoolExecutor(2), sleep=pauses)
    inventory = Inventory()
    return ServiceFeed(inventory, queue, namespace), queue, inventory, pauses


async def test_the_first_list_handles_every_service_once_and_fills_the_inventory() -> None:
    recorder = _Recorder()
    feed, queue, inventory, _ = _feed(recorder)
    feed.listed([_service("a"), _service("b", generation=4)])
    await _settle(queue)
    assert sorted(recorder.handled) == [("a", 1, "1"), ("b", 4, "1")]
    assert inventory.keys() == [("team-a", "a"), ("team-a", "b")]


async def test_a_status_change_is_no_new_spec_and_a_new_generation_is() -> None:
    recorder = _Recorder()
    feed, queue, inventory, _ = _feed(recorder)
    feed.changed("ADDED", _service(rv="1"))
    await _settle(queue)
    feed.changed("MODIFIED", _service(rv="2"))  # the status written: same generation
    await _settle(queue)
    assert recorder.handled == [("chat", 1, "1")]
    body = inventory.body(("team-a", "chat"))
    assert body is not None
    assert body["metadata"]["resourceVersion"] == "2"
    feed.changed("MODIFIED", _service(generation=2, rv="3"))
    await _settle(queue)
    assert recorder.handled == [("chat", 1, "1"), ("chat", 2, "3")]


async def test_changes_during_a_run_make_one_more_run_with_the_newest_copy() -> None:
    recorder = _Recorder()
    recorder.gate = threading.Event()
    feed, queue, _, _ = _feed(recorder)
    feed.changed("ADDED", _service(rv="1"))
    await asyncio.to_thread(recorder.entered.wait, 5)
    feed.changed("MODIFIED", _service(generation=2, rv="2"))
    feed.changed("MODIFIED", _service(generation=3, rv="3"))
    feed.changed("MODIFIED", _service(generation=3, rv="4"))
    recorder.gate.set()
    await _settle(queue)
    assert recorder.handled == [("chat", 1, "1"), ("chat", 3, "4")]


async def test_a_copy_of_the_spec_in_hand_offered_during_its_run_is_not_run_again() -> None:
    recorder = _Recorder()
    recorder.gate = threading.Event()
    feed, queue, _, _ = _feed(recorder)
    feed.changed("ADDED", _service(rv="1"))
    await asyncio.to_thread(recorder.entered.wait, 5)
    feed.changed("MODIFIED", _service(rv="2"))  # its own status write, delivered during the run
    recorder.gate.set()
    await _settle(queue)
    assert recorder.handled == [("chat", 1, "1")]


async def test_a_failed_run_is_reported_and_retried_with_growing_pauses() -> None:
    recorder = _Recorder(failures=4)
    feed, queue, _, pauses = _feed(recorder)
    feed.changed("ADDED", _service())
    await _settle(queue)
    assert recorder.handled == [("chat", 1, "1")]
    assert pauses.taken == [*RETRY_PAUSES_S, RETRY_PAUSES_S[-1]]
    assert len(recorder.reports) == 4
    assert recorder.reports[0] == (
        "chat: applying the spec failed (RuntimeError: the API server said no); trying again in 5 s"
    )


async def test_a_retry_takes_the_copy_that_arrived_meanwhile() -> None:
    recorder = _Recorder(failures=1)
    pauses_seen = asyncio.Event()
    feed, queue, _, _ = _feed(recorder)

    async def pause(seconds: float) -> None:
        pauses_seen.set()
        await asyncio.sleep(0.05)

    queue._sleep = pause
    feed.changed("ADDED", _service(rv="1"))
    await pauses_seen.wait()
    feed.changed("MODIFIED", _service(generation=2, rv="2"))
    await _settle(queue)
    assert recorder.handled == [("chat", 2, "2")]


async def test_a_deleted_service_leaves_the_inventory_and_stops_retrying() -> None:
    recorder = _Recorder(failures=1000)
    feed, queue, inventory, pauses = _feed(recorder)
    feed.changed("ADDED", _service())
    for _ in range(200):
        if pauses.taken:
            break
        await asyncio.sleep(0.005)
    feed.changed("DELETED", _service())
    await _settle(queue)
    assert inventory.keys() == []
    await asyncio.sleep(0.05)  # a report already in its thread may still land
    tries = len(recorder.reports)
    await asyncio.sleep(0.1)
    assert len(recorder.reports) == tries
    # Created again, it is handled afresh.
    recorder.failures = 0
    feed.changed("ADDED", _service(rv="9"))
    await _settle(queue)
    assert recorder.handled == [("chat", 1, "9")]


async def test_a_relist_drops_what_is_gone_from_its_namespace_only() -> None:
    recorder = _Recorder()
    feed_a, queue, inventory, _ = _feed(recorder, namespace="team-a")
    feed_b = ServiceFeed(inventory, queue, "team-b")
    feed_a.listed([_service("a1", "team-a"), _service("a2", "team-a")])
    feed_b.listed([_service("b1", "team-b")])
    await _settle(queue)
    feed_a.listed([_service("a2", "team-a")])
    await _settle(queue)
    assert inventory.keys() == [("team-a", "a2"), ("team-b", "b1")]
    assert len(recorder.handled) == 3, "a relist handles only what changed"


async def test_close_cancels_waiting_retries() -> None:
    recorder = _Recorder(failures=1000)
    feed, queue, _, _ = _feed(recorder)
    never = asyncio.Event()

    async def pause(seconds: float) -> None:
        await never.wait()

    queue._sleep = pause
    feed.changed("ADDED", _service())
    for _ in range(200):
        if recorder.reports:
            break
        await asyncio.sleep(0.005)
    assert queue.busy == 1
    await queue.close()
    assert queue.busy == 0
