"""One log line per API server outage, not one per pod or request.

Every component that talks to the API server (binder, informers and kopf's
watches, status writer, event recorder, resync, leader election) reports its connection-level
failures and its successes to an `Outage` of its own. The first failure logs
one WARNING ("API server unreachable (binds): <why>; retrying with backoff"),
later ones DEBUG; the first success after them one INFO ("API server
reachable again (binds) after 4.2s; 37 request(s) failed").

One tracker per component, because an outage does not look the same to all
of them: while etcd is down the watches may stay open (served from the API
server's watch cache) while every write fails, and a tracker shared by both
would flip between "down" and "up" on every request.

The trackers still make one WARNING per outage between them: a component
that finds the API server away while another has already said so (and is
still waiting) notes it at DEBUG. A failure soon after a recovery (the edges
of an outage are ragged: a watch reconnects, a write still gets a 503)
continues quietly too. Either is logged at WARNING only if it lasts
FLAP_SECONDS.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException
from prometheus_client import Counter

log = logging.getLogger(__name__)

FLAP_SECONDS = 10.0

OUTAGES = Counter(
    "troupe_api_outages_total",
    "API server outages as each component saw them: a request failed for want of the API server "
    "(or etcd) after the last one succeeded. Rising steadily: a flaky connection, an overloaded API server.",
    ["component"],
)

# What a request may fail with when the API server (or etcd behind it) is
# away or restarting: no answer at all, or a 5xx from a server that cannot
# reach its storage (500 "etcdserver: request timed out", 503 while not
# ready, 504 Timeout).
RETRYABLE_STATUS = frozenset({500, 502, 503, 504})


# What a restarted kube-apiserver answers for a few seconds, until its RBAC
# authorizer's informers have synced: 403 "cannot create resource
# pods/binding" for a request it will allow a moment later. Retried only
# while some component sees the API server away or just back (settling()).
RESTART_STATUS = frozenset({401, 403})


def is_outage(exc: BaseException) -> bool:
    """A failure that says nothing about the request itself: retry it later."""
    if isinstance(exc, ApiException):
        return exc.status in RETRYABLE_STATUS or (exc.status in RESTART_STATUS and settling())
    return isinstance(exc, (TimeoutError, asyncio.TimeoutError, aiohttp.ClientError, OSError))


def describe(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"{exc.status} {exc.reason}"
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


class Outage:
    """The outage state as one component sees it."""

    def __init__(self, component: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.component = component
        self._clock = clock
        self.down_since: float | None = None
        self.failures = 0  # requests failed in the current outage
        self._outages = OUTAGES.labels(component=component)  # outages seen (warned or not)
        self._warned = False
        self._up_since = -1e18  # when the last outage ended

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def down_for(self) -> float:
        """Seconds since the current outage began (0 when up)."""
        return 0.0 if self.down_since is None else self._clock() - self.down_since

    def failed(self, why: BaseException | str) -> None:
        now = self._clock()
        text = why if isinstance(why, str) else describe(why)
        self.failures += 1
        if self.down_since is None:
            self.down_since = now
            self._outages.inc()
            self._warned = now - self._up_since >= FLAP_SECONDS and not _announced(self)
            if self._warned:
                log.warning("API server unreachable (%s): %s; retrying with backoff", self.component, text)
                return
        elif not self._warned and now - self.down_since >= FLAP_SECONDS:
            self._warned = True
            log.warning(
                "API server unreachable (%s) for %.0fs: %s; retrying with backoff",
                self.component,
                now - self.down_since,
                text,
            )
            return
        log.debug("API server unreachable (%s): %s", self.component, text)

    async def backoff(self, exc: BaseException, give_up_after: float = 60.0) -> bool:
        """For a component that retries whole requests itself (the status
        writer): report the failure, wait a backoff that grows with the
        outage (1 s to 5 s), and say whether to retry (the outage is younger
        than `give_up_after`; older, the request is dropped)."""
        self.failed(exc)
        if self.down_for() > give_up_after:
            return False
        await asyncio.sleep(min(1.0 + self.failures / 4, 5.0))
        return True

    def settling(self) -> bool:
        """Away now, or back for less than FLAP_SECONDS."""
        return self.down_since is not None or self._clock() - self._up_since < FLAP_SECONDS

    def succeeded(self) -> None:
        if self.down_since is None:
            return
        now = self._clock()
        log.log(
            logging.INFO if self._warned else logging.DEBUG,
            "API server reachable again (%s) after %.1fs; %d request(s) failed",
            self.component,
            now - self.down_since,
            self.failures,
        )
        self.down_since = None
        self.failures = 0
        self._warned = False
        self._up_since = now


# One per component, shared by the modules that report to it.
BINDS = Outage("binds")
WATCHES = Outage("watches")
STATUS = Outage("status writes")
RESYNC = Outage("resync")
LEASE = Outage("leader election")
EVENTS = Outage("events")
TRACKERS = (BINDS, WATCHES, STATUS, RESYNC, LEASE, EVENTS)


def _announced(asking: Outage) -> bool:
    """Another component has logged this outage and still waits for its end."""
    return any(t is not asking and t.down and t._warned for t in TRACKERS)


def settling() -> bool:
    """Some component sees the API server away or only just back."""
    return any(t.settling() for t in TRACKERS)


class KopfRetryFilter(logging.Filter):
    """kopf logs an ERROR for every failed attempt of every request of every
    watched kind ("Request attempt #2/9 failed; will retry: GET ..."): during
    an outage that is dozens of lines. This filter (on the log handlers)
    reports them to WATCHES instead and drops them; everything else passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith("kopf") or record.levelno > logging.ERROR:
            return True
        message = record.getMessage()
        if message.startswith("Request attempt") and "failed; will retry" in message:
            WATCHES.failed(f"kopf: {message.rsplit(' -> ', 1)[-1]}")
            return False
        return True


def install_kopf_filter() -> None:
    """Put KopfRetryFilter on every handler of the root logger."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, KopfRetryFilter) for f in handler.filters):
            handler.addFilter(KopfRetryFilter())
