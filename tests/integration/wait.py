"""Polling with a deadline: the only way integration tests wait.

    node = wait_for(lambda: cluster.get_json("node", name)["spec"].get("taints") is None,
                    timeout=10, message="taints cleared")

`predicate` is called until it returns something truthy, which is returned.
A falsy return value or an exception counts as "not yet" and is remembered;
at the deadline WaitTimeout (an AssertionError) is raised with the message,
the elapsed time, the number of attempts and the last observed value (the last
exception is chained as __cause__).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["WaitTimeout", "wait_for", "async_wait_for"]

_NOTHING = object()


class WaitTimeout(AssertionError):
    def __init__(self, message: str, last: Any) -> None:
        super().__init__(message)
        self.last = last


def _timeout_error(predicate: Callable, message: str | None, timeout: float, attempts: int, last: Any) -> WaitTimeout:
    what = message or getattr(predicate, "__qualname__", None) or repr(predicate)
    seen = "nothing (the predicate never returned)" if last is _NOTHING else repr(last)
    return WaitTimeout(
        f"timed out after {timeout:g}s ({attempts} attempts) waiting for: {what}; last observed: {seen}",
        None if last is _NOTHING else last,
    )


def wait_for(
    predicate: Callable[[], T],
    timeout: float = 30.0,
    interval: float = 0.1,
    message: str | None = None,
    *,
    ignore: tuple[type[BaseException], ...] = (Exception,),
) -> T:
    """Poll `predicate` until it returns a truthy value (returned) or raise WaitTimeout."""
    deadline = time.monotonic() + timeout
    attempts, last, last_exc = 0, _NOTHING, None
    while True:
        attempts += 1
        try:
            value = predicate()
        except ignore as exc:  # not yet; remember why
            last, last_exc = exc, exc
        else:
            if value:
                return value
            last, last_exc = value, None
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _timeout_error(predicate, message, timeout, attempts, last) from last_exc
        time.sleep(min(interval, remaining))


def holds(predicate: Callable[[], Any], seconds: float, interval: float = 0.1, message: str | None = None) -> None:
    """Assert that nothing happens: `predicate` stays truthy on every poll
    for `seconds`. Fails the moment it turns false, so a change in the window
    is caught even if it is undone before its end (a sleep followed by one
    assert would miss it)."""
    deadline = time.monotonic() + seconds
    polls = 0
    while True:
        polls += 1
        value = predicate()
        assert value, f"{message or getattr(predicate, '__name__', 'predicate')}: false at poll {polls}: {value!r}"
        if time.monotonic() >= deadline:
            return
        time.sleep(interval)


async def async_wait_for(
    predicate: Callable[[], T | Awaitable[T]],
    timeout: float = 30.0,
    interval: float = 0.1,
    message: str | None = None,
    *,
    ignore: tuple[type[BaseException], ...] = (Exception,),
) -> T:
    """wait_for for asyncio code; `predicate` may be a plain or an async callable."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    attempts, last, last_exc = 0, _NOTHING, None
    while True:
        attempts += 1
        try:
            value = predicate()
            if inspect.isawaitable(value):
                value = await value
        except ignore as exc:
            last, last_exc = exc, exc
        else:
            if value:
                return value
            last, last_exc = value, None
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise _timeout_error(predicate, message, timeout, attempts, last) from last_exc
        await asyncio.sleep(min(interval, remaining))
