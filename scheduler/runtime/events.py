"""Events: best-effort, and never ahead of a bind.

kube-scheduler hands its Events to a broadcaster whose queue holds 1000 and
drops what does not fit, and sends them through a client of its own. troupe
does the same and goes one step further, because on a busy API server an
Event costs about what a bind costs (measured end to end at 5000 nodes: with
one `Scheduled` Event per bound pod, half of the API server's work for troupe
went to Events):

- **A bounded queue** (`MAX_QUEUED_EVENTS`, upstream's `maxQueuedEvents`):
  an Event that does not fit is dropped and counted in
  `troupe_events_dropped_total`, with one log line per burst of drops.
- **Binds first.** While pods are being bound (a bind in flight, or one
  finished less than `BUSY_SECONDS` ago) Events go out at
  `BUSY_EVENTS_PER_SECOND`; at the client's event rate once binding pauses.
- **Conditions before Events.** While the status writer has PodGroup or pod
  conditions queued or in flight, Events trickle at the same rate: when a
  burst of binds ends, its groups' conditions are written first.
- **Connections of their own** (`EVENT_CONNECTIONS`): an Event never holds a
  connection a bind waits for.
- **No repeats:** the same note on the same object at most once per
  `EVENT_DEDUPE_SECONDS`.
- **Aggregated per PodGroup, as upstream's correlator aggregates similar
  events** (more than `AGGREGATE_AFTER` with the same reason within the
  window): the first `AGGREGATE_AFTER` pods of a PodGroup get their own
  `Scheduled` Event, the rest are counted in one `Scheduled` Event on the
  PodGroup, sent once and counting every pod bound until it leaves.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException
from prometheus_client import Counter

from ..api import constants as C
from ..api.podgroup import PodGroup
from ..api.records import GroupKey, NodeInfo, PodInfo
from . import failpoints, outage
from .apitime import now_micro
from .binder import REQUEST_TIMEOUT_SECONDS, api_message, retry_after
from .kube import NotLeading, RestClient, encode
from .ratelimit import TokenBucket

log = logging.getLogger(__name__)

MAX_QUEUED_EVENTS = 1000
BUSY_SECONDS = 1.0
BUSY_EVENTS_PER_SECOND = 5.0
EVENT_CONNECTIONS = 2
EVENT_DEDUPE_SECONDS = 600.0
AGGREGATE_AFTER = 10
MAX_NOTE = 1024
MAX_REMEMBERED = 50_000  # notes (dedupe) and PodGroups (aggregation) remembered

DROPPED = Counter(
    "troupe_events_dropped_total",
    "Events not posted because MAX_QUEUED_EVENTS were already waiting (binds go first).",
)

EventKey = tuple[str, ...]


@dataclass
class _GroupScheduled:
    """Scheduled Events of one PodGroup's pods within the window."""

    since: float
    own: int = 0  # pods that got an Event of their own
    combined: int = 0  # pods counted in the PodGroup's Event
    queued: bool = False  # the PodGroup's Event is waiting to be sent


class EventRecorder:
    def __init__(
        self,
        rest: RestClient,
        bucket: TokenBucket,
        binding: Callable[[float], bool] | None = None,
        max_queued: int = MAX_QUEUED_EVENTS,
        workers: int = EVENT_CONNECTIONS,
    ) -> None:
        """`rest` should have connections of its own; `bucket` is the event
        client's rate limit; `binding(seconds)` says whether a bind is in
        flight or finished within `seconds` (the binder's)."""
        self._rest = rest
        self._bucket = bucket
        self._busy_bucket = TokenBucket(BUSY_EVENTS_PER_SECOND, 1)
        self._binding = binding or (lambda _seconds: False)
        # Conditions before Events: while the status writer has writes queued
        # or in flight (it sets this), Events trickle as while binding, so a
        # burst's last PodGroup conditions are not written behind its Events.
        self.behind: Callable[[], bool] = lambda: False
        self._max_queued = max_queued
        self._pending: OrderedDict[EventKey, Callable[[], Awaitable[None]]] = OrderedDict()
        self._wakeup = asyncio.Event()
        self._seen: OrderedDict[EventKey, float] = OrderedDict()
        self._groups: OrderedDict[GroupKey, _GroupScheduled] = OrderedDict()
        # The apiVersion of each source's PodGroup kind (GroupKey.source ->
        # "group/version"), for Events about a group known by key only;
        # runtime/sources.py adds the native one when it is served.
        self.group_versions: dict[str, str] = {C.GROUP: C.API_VERSION}
        self._dropping = False
        self._failing = False
        self._busy = 0
        self.instance = f"troupe-scheduler-{socket.gethostname()}"[:128]
        self._workers = [asyncio.create_task(self._work(), name=f"event writer {i}") for i in range(workers)]

    # ---------------------------------------------------------------- public

    def event(self, regarding: dict[str, str], type_: str, reason: str, note: str, action: str) -> None:
        """An events.k8s.io/v1 Event about `regarding`, if it fits the queue
        and the same note on the same object was not posted in the last
        EVENT_DEDUPE_SECONDS."""
        now = time.monotonic()
        key = (regarding.get("uid", "") or regarding["name"], reason, note)
        last = self._seen.get(key)
        if last is not None and now - last < EVENT_DEDUPE_SECONDS:
            return
        if self._full(key):  # dropped: not worth the body (most are, while a large gang binds)
            self._drop()
            return
        body = self._body(regarding, type_, reason, note, action)
        if self._enqueue(key, lambda: self._post(regarding, body)):
            _remember(self._seen, key, now)

    def pod_event(self, pod: PodInfo, type_: str, reason: str, note: str, action: str) -> None:
        group = pod.group
        if reason == C.EVENT_SCHEDULED and group is not None and not self._own_event(group):
            return
        self.event(
            {"apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace, "name": pod.name, "uid": pod.uid},
            type_,
            reason,
            note,
            action,
        )

    def node_event(self, node: NodeInfo, type_: str, reason: str, note: str, action: str) -> None:
        """On a Node: cluster-scoped, so the Event goes to `default`, as upstream's recorder puts it."""
        regarding = {"apiVersion": "v1", "kind": "Node", "name": node.name}
        if node.uid:
            regarding["uid"] = node.uid
        self.event(regarding, type_, reason, note, action)

    def group_event(self, group: PodGroup, type_: str, reason: str, note: str, action: str) -> None:
        self.event(
            _group_ref(group.api_version, group.metadata.namespace, group.metadata.name, group.metadata.uid),
            type_,
            reason,
            note,
            action,
        )

    @property
    def queued(self) -> int:
        return len(self._pending)

    async def flush(self, timeout: float = 10.0) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (self._pending or self._busy) and loop.time() < deadline:
            await asyncio.sleep(0.05)

    async def close(self) -> None:
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)

    # ----------------------------------------------------------- aggregation

    def _own_event(self, key: GroupKey) -> bool:
        """Whether this bound pod of `group` gets a Scheduled Event of its
        own; if not, it is counted in its PodGroup's Event."""
        now = time.monotonic()
        state = self._groups.get(key)
        if state is None or now - state.since >= EVENT_DEDUPE_SECONDS:
            state = _GroupScheduled(since=now)
        _remember(self._groups, key, state)
        if state.own < AGGREGATE_AFTER:
            state.own += 1
            return True
        state.combined += 1
        if not state.queued:
            state.queued = self._enqueue(("scheduled", *key), lambda: self._post_combined(key, state))
        return False

    async def _post_combined(self, key: GroupKey, state: _GroupScheduled) -> None:
        # The note is written now, so it counts every pod bound while it waited.
        count, state.combined, state.queued = state.combined, 0, False
        api_version = self.group_versions.get(key.source, key.source)
        regarding = _group_ref(api_version, key.namespace, key.name, "")
        note = (
            f"Successfully assigned {count} more pod(s) of {key} "
            f"(combined from similar events: the first {AGGREGATE_AFTER} have their own Scheduled event)"
        )
        await self._post(regarding, self._body(regarding, "Normal", C.EVENT_SCHEDULED, note, "Binding"))

    # -------------------------------------------------------------- plumbing

    def _body(self, regarding: dict[str, str], type_: str, reason: str, note: str, action: str) -> dict[str, Any]:
        return {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            # Named as upstream's recorder names events: <object>.<unix nanos in hex>.
            "metadata": {"name": f"{regarding['name']}.{time.time_ns():x}", "namespace": _namespace(regarding)},
            "eventTime": now_micro(),
            "reportingController": "troupe-scheduler",
            "reportingInstance": self.instance,
            "action": action,
            "reason": reason,
            "note": note[:MAX_NOTE],
            "type": type_,
            "regarding": regarding,
        }

    async def _post(self, regarding: dict[str, str], body: dict[str, Any]) -> None:
        path = f"/apis/events.k8s.io/v1/namespaces/{_namespace(regarding)}/events"
        await self._rest.post(path, encode(body), timeout=REQUEST_TIMEOUT_SECONDS)

    def _full(self, key: EventKey) -> bool:
        return key not in self._pending and len(self._pending) >= self._max_queued

    def _drop(self) -> None:
        DROPPED.inc()
        if not self._dropping:
            self._dropping = True
            log.warning(
                "Events: %d waiting behind binds; dropping new ones until they are sent "
                "(troupe_events_dropped_total counts them)",
                len(self._pending),
            )

    def _enqueue(self, key: EventKey, send: Callable[[], Awaitable[None]]) -> bool:
        """Queue `send` unless the queue is full (then count it dropped)."""
        if self._full(key):
            self._drop()
            return False
        self._pending[key] = send
        self._wakeup.set()
        return True

    async def _work(self) -> None:
        while True:
            if not self._pending:
                self._dropping = False
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            # Binds first, then conditions: while pods are being bound or
            # status written, a trickle of Events only.
            if self._binding(BUSY_SECONDS) or self.behind():
                await self._busy_bucket.acquire()
            await self._bucket.acquire()
            if not self._pending:
                continue
            key, send = self._pending.popitem(last=False)
            self._busy += 1
            try:
                failpoints.hit("event-write")
                await send()
                self._failing = False
                outage.EVENTS.succeeded()
            except ApiException as exc:
                if exc.status == 429:  # throttled: wait as told, then send it again
                    self._bucket.pause(retry_after(exc))
                    self._pending.setdefault(key, send)
                elif outage.is_outage(exc):
                    outage.EVENTS.failed(exc)  # the outage's one line; this Event is lost (best-effort)
                else:
                    outage.EVENTS.succeeded()  # it answered
                    self._failed(f"{exc.status} {exc.reason}: {api_message(exc)}")
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                outage.EVENTS.failed(exc)
            except NotLeading:  # the lease was lost: the next leader writes what is still true
                log.debug("Event dropped: not leading")
            except Exception:  # never let a bad Event kill a worker
                log.exception("Event not posted")
            finally:
                self._busy -= 1

    def _failed(self, why: str) -> None:
        """Events are best-effort: one line when posting starts failing, not one per Event."""
        if not self._failing:
            self._failing = True
            log.warning("Event not posted (%s); later failures are logged at debug level until one succeeds", why)
        else:
            log.debug("Event not posted (%s)", why)


def _group_ref(api_version: str, namespace: str, name: str, uid: str) -> dict[str, str]:
    ref = {"apiVersion": api_version, "kind": "PodGroup", "namespace": namespace, "name": name}
    if uid:
        ref["uid"] = uid
    return ref


def _namespace(regarding: dict[str, str]) -> str:
    return regarding.get("namespace") or "default"


def _remember(memory: OrderedDict[Any, Any], key: Any, value: Any) -> None:
    memory[key] = value
    memory.move_to_end(key)
    while len(memory) > MAX_REMEMBERED:
        memory.popitem(last=False)
