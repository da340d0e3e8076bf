"""kopf handlers that keep each InferenceService's Deployment, Service and status in line with its spec."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import kopf

from tailguard.api import GROUP, PLURAL, VERSION
from tailguard.k8s.cluster import ClusterAPI
from tailguard.reconcile.service import reconcile, write_status

_cluster: ClusterAPI | None = None


def configure(cluster: ClusterAPI) -> None:
    """Set the API adapter (called once before kopf starts)."""
    global _cluster
    _cluster = cluster


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _sync(body: kopf.Body, logger: logging.Logger | logging.LoggerAdapter[logging.Logger]) -> None:
    assert _cluster is not None, "configure() must run before the handlers"
    result = reconcile(body, _cluster, now=_now())
    write_status(_cluster, body, result)
    for note in result.events:
        kopf.event(body, type=note.type, reason=note.reason, message=note.message)
        logger.info("%s: %s", note.reason, note.message)


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
def on_spec(body: kopf.Body, logger: kopf.Logger, **_: Any) -> None:
    """Render and apply the children whenever the spec is new or changed."""
    _sync(body, logger)


@kopf.timer(GROUP, VERSION, PLURAL, interval=10.0, initial_delay=2.0)
def on_tick(body: kopf.Body, logger: kopf.Logger, **_: Any) -> None:
    """Level-based resync: revert hand edits to the children, refresh replica counts and conditions."""
    _sync(body, logger)
