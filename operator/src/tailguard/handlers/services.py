"""What the operator does with each change of an InferenceService: keep the inventory's copy
current, and hand each new spec (a new ``metadata.generation``) to the spec handler.

The handler runs in a worker thread, one run at a time per service: a change that arrives during
a run is handled by one more run after it, with the newest copy. A run that fails is retried with
the newest copy after a pause, and says so in the log and as a Warning Event. After the operator
starts, every service is handled once whatever its generation (its children are rendered with
this operator's settings, which may have changed).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass

from tailguard.k8s.cluster import Manifest
from tailguard.k8s.watch import error_line
from tailguard.metrics.results import ServiceKey
from tailguard.reconcile.inventory import Inventory, service_key

log = logging.getLogger(__name__)

#: Pauses before a failed run is tried again: the last one repeats.
RETRY_PAUSES_S = (5.0, 15.0, 60.0)


def generation(obj: Manifest) -> int | None:
    value = (obj.get("metadata") or {}).get("generation")
    return int(value) if value is not None else None


class SpecQueue:
    """Runs the spec handler for services whose spec it has not handled yet."""

    def __init__(
        self,
        handle: Callable[[Manifest], None],
        report_failure: Callable[[Manifest, str], None],
        executor: Executor,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._handle = handle
        self._report_failure = report_failure
        self._executor = executor
        self._sleep = sleep
        #: The generation each service's spec was last handled at (successfully).
        self._handled: dict[ServiceKey, int | None] = {}
        #: The newest copy of each service with a run started or wanted.
        self._newest: dict[ServiceKey, Manifest] = {}
        self._runs: dict[ServiceKey, asyncio.Task[None]] = {}

    def offer(self, obj: Manifest) -> None:
        """A copy of a service as the watch delivered it: handled when its generation is new."""
        key = service_key(obj)
        if self._handled_already(key, obj):
            return
        self._newest[key] = obj
        if key not in self._runs:
            self._runs[key] = asyncio.get_running_loop().create_task(self._run(key))

    def forget(self, key: ServiceKey) -> None:
        """The service is gone: stop trying, and handle it afresh should it come back."""
        self._handled.pop(key, None)
        self._newest.pop(key, None)
        run = self._runs.pop(key, None)
        if run is not None:
            run.cancel()

    @property
    def busy(self) -> int:
        """Services with a run in progress or waiting to retry."""
        return len(self._runs)

    async def close(self) -> None:
        """Cancel every run (a handler already in its thread finishes there)."""
        runs = list(self._runs.values())
        self._runs.clear()
        for run in runs:
            run.cancel()
        await asyncio.gather(*runs, return_exceptions=True)

    def _handled_already(self, key: ServiceKey, obj: Manifest) -> bool:
        return key in self._handled and self._handled[key] == generation(obj)

    async def _run(self, key: ServiceKey) -> None:
        loop = asyncio.get_running_loop()
        failures = 0
        try:
            while (obj := self._newest.pop(key, None)) is not None:
                if self._handled_already(key, obj):
                    continue  # a copy offered while its spec was being handled
                error = await loop.run_in_executor(self._executor, _attempt, self._handle, obj)
                if error is None:
                    self._handled[key] = generation(obj)
                    failures = 0
                    continue
                pause = RETRY_PAUSES_S[min(failures, len(RETRY_PAUSES_S) - 1)]
                failures += 1
                message = f"applying the spec failed ({error}); trying again in {pause:.0f} s"
                log.warning("%s/%s: %s", key[0], key[1], message)
                await loop.run_in_executor(self._executor, _attempt, self._report_failure, obj, message)
                self._newest.setdefault(key, obj)
                await self._sleep(pause)
        finally:
            if self._runs.get(key) is asyncio.current_task():
                del self._runs[key]


def _attempt(fn: Callable[..., None], *args: object) -> str | None:
    """Call ``fn``; what went wrong in one line, or None."""
    try:
        fn(*args)
    except Exception as exc:  # anything: the run is retried, and the operator lives on
        log.debug("handler failed", exc_info=True)
        return error_line(exc, limit=300)
    return None


@dataclass
class ServiceFeed:
    """The watch's sink for InferenceServices in one namespace (``None``: every namespace)."""

    inventory: Inventory
    specs: SpecQueue
    namespace: str | None = None

    def listed(self, objects: list[Manifest]) -> None:
        present = {service_key(obj) for obj in objects}
        known = self.inventory.keys()
        for key in known:
            if key not in present and (self.namespace is None or key[0] == self.namespace):
                self._gone(key)
        for obj in objects:
            self.changed("ADDED", obj)

    def changed(self, event_type: str, obj: Manifest) -> None:
        if event_type == "DELETED":
            self._gone(service_key(obj))
            return
        self.inventory.put_service(obj)
        self.specs.offer(obj)

    def _gone(self, key: ServiceKey) -> None:
        self.inventory.drop_service(key)
        self.specs.forget(key)
