"""Crash points for the recovery tests, in the spirit of etcd's gofail.

`TROUPE_FAILPOINTS="bind-done=3,cycle-decided=1"` makes the process SIGKILL
itself the 3rd time it passes `bind-done` (or the 1st time it passes
`cycle-decided`): no cleanup, no flush, exactly like an OOM kill or a node
loss at that moment. Unset (the normal case), `hit()` is one dict lookup.

Points (where a crash leaves the most interesting state behind):
  cycle-decided   a cycle assumed its placements; no bind is sent yet
  bind-start      a bind is about to be sent (earlier binds of the cycle may be done)
  bind-done       the API server accepted a bind; the scheduler has not recorded it
  status-write    a PodGroup/pod status write is about to be sent

Error points answer a request with an error instead of killing; they fire
on every Nth pass, not once (`bind-500=3`: every 3rd bind attempt):
  bind-500        the bind is not sent; it fails as if the server answered 500
  bind-lost       the bind is sent and lands, but its answer is lost (a 500
                  in its place): the retry must find the pod bound (409)

Delay points hold every pass for the armed number of milliseconds:
  pod-condition-late  a pod condition write, checked and about to be sent,
                      is held (so that a bind can land before it)
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal

log = logging.getLogger(__name__)

POINTS = ("cycle-decided", "bind-start", "bind-done", "status-write")
ERROR_POINTS = ("bind-500", "bind-lost")
DELAY_POINTS = ("pod-condition-late",)
ENV = "TROUPE_FAILPOINTS"


def _parse(spec: str) -> dict[str, int]:
    armed: dict[str, int] = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, _, count = item.partition("=")
        if name not in POINTS + ERROR_POINTS + DELAY_POINTS:
            known = ", ".join(POINTS + ERROR_POINTS + DELAY_POINTS)
            raise ValueError(f"{ENV}: unknown point {name!r} (known: {known})")
        try:
            armed[name] = int(count or "1")
        except ValueError:
            raise ValueError(f"{ENV}: {item!r}: the count after '=' must be an integer") from None
        if armed[name] < 1:
            raise ValueError(f"{ENV}: {item!r}: the count after '=' must be at least 1")
    return armed


_armed: dict[str, int] = _parse(os.environ.get(ENV, ""))
_passes: dict[str, int] = {}


def hit(name: str) -> None:
    """Count a pass through `name`; SIGKILL the process on the armed pass."""
    left = _armed.get(name)
    if left is None:
        return
    if left > 1:
        _armed[name] = left - 1
        return
    log.warning("failpoint %s: killing the process (SIGKILL)", name)
    for handler in logging.getLogger().handlers:
        handler.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def every(name: str) -> bool:
    """Count a pass through error point `name`; True on every Nth pass (armed `name=N`)."""
    period = _armed.get(name)
    if period is None:
        return False
    _passes[name] = n = _passes.get(name, 0) + 1
    return n % period == 0


async def delay(name: str) -> None:
    """Hold for the milliseconds delay point `name` is armed with (if it is)."""
    millis = _armed.get(name)
    if millis is not None:
        log.warning("failpoint %s: holding for %d ms", name, millis)
        await asyncio.sleep(millis / 1000)
        log.warning("failpoint %s: released", name)
