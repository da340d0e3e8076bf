"""The loop's API writes, made in the background by a bounded set of writers, most urgent first.

A control cycle decides on cadence and queues what each decision has to write; it does not wait for
the API server. At most one write per service is queued or in flight at a time: a newer write for a
service replaces the one still queued for it (the latest wins), and a write in flight is never
joined by a second. Writes that act (a Deployment changed, an Event posted) go before status-only
writes, and the periodic refresh of a service's status goes last.

Bookkeeping happens on the event loop only; the writes themselves, blocking API calls, run in a
thread pool of as many threads as there are writers.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from tailguard.metrics.results import ServiceKey
from tailguard.reconcile.telemetry import Telemetry

log = logging.getLogger(__name__)

#: What a queued write was computed from (the loop's decision), for whoever may replace it.
T = TypeVar("T")


class Priority(enum.IntEnum):
    """Which writes go first when more are queued than the API server takes."""

    #: A Deployment scaled or resized, an Event posted: what an operator is for.
    ACT = 0
    #: Status that changed (a decision, a condition) and the level-based resync.
    STATUS = 1
    #: The periodic refresh of figures already shown: the first to wait, and to be replaced.
    REFRESH = 2

    @property
    def label(self) -> str:
        """As the metrics label it."""
        return self.name.lower()


@dataclass(eq=False)
class Write(Generic[T]):
    """One service's write, queued."""

    key: ServiceKey
    priority: Priority
    #: The blocking work (run in a writer thread): returns the number of API writes it made.
    run: Callable[[], int]
    #: Called on the event loop with the number of writes made, or with the exception raised.
    landed: Callable[[int | Exception], None]
    #: What it was computed from, when it may be replaced by a newer one (None: never replaced).
    source: T | None = None
    queued_at: float = field(default_factory=time.perf_counter)


class WriteQueue(Generic[T]):
    """Per-service writes by priority, made by up to ``writers`` writers at once."""

    def __init__(self, telemetry: Telemetry, *, writers: int) -> None:
        self.telemetry = telemetry
        self.writers = writers
        self._pool = ThreadPoolExecutor(max_workers=writers, thread_name_prefix="tailguard-write")
        self._lanes: dict[Priority, deque[Write[T]]] = {p: deque() for p in Priority}
        #: The one write queued per service; the lanes may still hold writes replaced or taken
        #: back since, skipped when popped.
        self._queued: dict[ServiceKey, Write[T]] = {}
        self._counts: dict[Priority, int] = dict.fromkeys(Priority, 0)
        self._in_flight: set[ServiceKey] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        # Each priority's series, looked up once (``labels()`` locks and validates at every call).
        self._depth = {p: telemetry.write_queue_depth.labels(p.label) for p in Priority}
        self._latency = {p: telemetry.write_latency.labels(p.label) for p in Priority}
        for priority in Priority:
            self._set_depth(priority)

    def busy(self, key: ServiceKey) -> bool:
        """A write for ``key`` is queued or in flight."""
        return key in self._queued or key in self._in_flight

    def in_flight(self, key: ServiceKey) -> bool:
        """A write for ``key`` has started and not landed."""
        return key in self._in_flight

    def queued(self, key: ServiceKey) -> Write[T] | None:
        """The write queued (not started) for ``key``, if any."""
        return self._queued.get(key)

    @property
    def depth(self) -> int:
        """Writes queued, not started."""
        return len(self._queued)

    @property
    def idle(self) -> bool:
        """Nothing queued and nothing in flight."""
        return not self._queued and not self._in_flight

    def submit(self, write: Write[T]) -> bool:
        """Queue ``write``, replacing the write still queued for its service (which keeps its place
        when the priority is the same); starts a writer if one is free. Must not be called for a
        service with a write in flight. Returns whether a queued write was replaced."""
        if write.key in self._in_flight:
            raise RuntimeError(f"a write for {write.key[0]}/{write.key[1]} is in flight")
        if self._closed:
            log.warning("shutting down: a write for %s/%s not made", *write.key)
            return False
        replaced = self._queued.get(write.key)
        if replaced is not None:
            self.telemetry.writes_coalesced.inc()
            if replaced.priority is write.priority:
                replaced.run, replaced.landed, replaced.source = write.run, write.landed, write.source
                return True
            write.queued_at = replaced.queued_at  # its wait counts from the first
            self.cancel(write.key)
        self._queued[write.key] = write
        self._lanes[write.priority].append(write)
        self._counts[write.priority] += 1
        self._set_depth(write.priority)
        self._start_writers()
        return replaced is not None

    def cancel(self, key: ServiceKey) -> Write[T] | None:
        """Take back the write queued (not started) for ``key``; None when there was none."""
        write = self._queued.pop(key, None)
        if write is not None:  # its lane keeps it until popped, then skips it
            self._counts[write.priority] -= 1
            self._set_depth(write.priority)
        return write

    async def flush(self) -> None:
        """Wait until every queued write has landed."""
        while self._tasks:
            await asyncio.wait(set(self._tasks))

    async def close(self, grace_s: float, acting_grace_s: float) -> None:
        """Stop: refreshes still queued are dropped at once (the next process makes its own), other
        status writes get ``grace_s`` to land, acting writes and those in flight ``acting_grace_s``.
        Writes queued after this are not made."""
        self._closed = True
        self._discard(lambda w: w.priority is Priority.REFRESH, "refresh")
        await self._wait(grace_s)
        self._discard(lambda w: w.priority is not Priority.ACT, "status")
        await self._wait(acting_grace_s)
        if not self.idle:
            log.error(
                "shutting down with %d acting writes not made and %d in flight",
                len(self._queued), len(self._in_flight),
            )  # fmt: skip
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _wait(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self._tasks and (left := deadline - time.monotonic()) > 0:
            await asyncio.wait(set(self._tasks), timeout=left)

    def _discard(self, which: Callable[[Write[T]], bool], what: str) -> None:
        dropped = [w for w in self._queued.values() if which(w)]
        for write in dropped:
            self.cancel(write.key)
        if dropped:
            log.info("shutting down: %d queued %s writes dropped", len(dropped), what)

    def _set_depth(self, priority: Priority) -> None:
        self._depth[priority].set(self._counts[priority])

    def _next(self) -> Write[T] | None:
        for lane in self._lanes.values():  # in priority order
            while lane:
                write = lane.popleft()
                if self._queued.get(write.key) is not write:
                    continue  # replaced or taken back
                del self._queued[write.key]
                self._counts[write.priority] -= 1
                self._set_depth(write.priority)
                return write
        return None

    def _start_writers(self) -> None:
        while len(self._tasks) < self.writers and len(self._tasks) < len(self._queued):
            task = asyncio.ensure_future(self._writer())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _writer(self) -> None:
        """Make queued writes, most urgent first, until none is left."""
        running = asyncio.get_running_loop()
        while (write := self._next()) is not None:
            self._in_flight.add(write.key)
            self.telemetry.writes_in_flight.inc()
            outcome: int | Exception
            try:
                outcome = await running.run_in_executor(self._pool, write.run)
            except Exception as exc:  # reported to its owner; the writer goes on
                outcome = exc
            finally:
                self._in_flight.discard(write.key)
                self.telemetry.writes_in_flight.dec()
                self._latency[write.priority].observe(time.perf_counter() - write.queued_at)
            try:
                write.landed(outcome)
            except Exception:
                log.exception("recording the write for %s/%s failed", *write.key)
