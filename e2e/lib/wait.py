"""Waiting for a condition, with a timeout that says what was awaited and what was last seen."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeoutError(AssertionError):
    """A wait ran out. An AssertionError, so pytest shows it as a test failure with its message."""


def wait_for(
    what: str,
    probe: Callable[[], T | None],
    *,
    timeout: float = 30.0,
    interval: float = 0.5,
    details: Callable[[], str] | None = None,
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """Call ``probe`` until it returns a truthy value and return that value.

    On timeout raise :class:`WaitTimeoutError` naming ``what``, the last value ``probe`` returned (or the
    last exception it raised, for the types in ``ignore``) and, when given, ``details()`` (e.g. the
    object's status or the operator's log).
    """
    deadline = time.monotonic() + timeout
    last: object = None
    last_exc: BaseException | None = None
    attempts = 0
    while True:
        attempts += 1
        try:
            value = probe()
            last, last_exc = value, None
            if value:
                return value
        except ignore as exc:
            last_exc = exc
        if time.monotonic() >= deadline:
            seen = f"last error {last_exc!r}" if last_exc is not None else f"last value {last!r}"
            msg = f"timed out after {timeout:g}s ({attempts} checks) waiting for {what}; {seen}"
            if details is not None:
                try:
                    msg += "\n" + details()
                except Exception as exc:  # details are best effort
                    msg += f"\n(details unavailable: {exc!r})"
            raise WaitTimeoutError(msg)
        time.sleep(interval)


def stays(
    what: str,
    probe: Callable[[], T],
    *,
    duration: float,
    interval: float = 0.5,
    details: Callable[[], str] | None = None,
) -> T:
    """Check that ``probe`` stays truthy for ``duration`` seconds (e.g. "no second Deployment appears")."""
    deadline = time.monotonic() + duration
    while True:
        value = probe()
        if not value:
            msg = f"expected {what} to hold for {duration:g}s, but it stopped holding: got {value!r}"
            if details is not None:
                msg += "\n" + details()
            raise AssertionError(msg)
        if time.monotonic() >= deadline:
            return value
        time.sleep(interval)
