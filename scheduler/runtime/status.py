"""Writing what the scheduler decided where users look: PodGroup conditions,
pod conditions and Events.

Writes are queued and done by a few workers so they never block the
scheduling loop; a newer write to the same object replaces a queued older
one; writes that would change nothing are skipped (as upstream, which patches
a pod condition only when it changes).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import socket
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException

from ..api import constants as C
from ..api.podgroup import PodGroup
from ..api.records import PodInfo
from . import failpoints
from .binder import REQUEST_TIMEOUT_SECONDS
from .binder import retry_after as _retry_after
from .kube import RestClient, encode
from .ratelimit import TokenBucket

log = logging.getLogger(__name__)

EVENT_DEDUPE_SECONDS = 600.0
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
MAX_NOTE = 1024


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class StatusWriter:
    def __init__(
        self,
        rest: RestClient,
        bucket: TokenBucket,
        event_bucket: TokenBucket | None = None,
        workers: int = 4,
    ) -> None:
        """`bucket` limits status writes (shared with binding, one client as
        kube-scheduler's); `event_bucket` limits Events, which kube-scheduler
        sends through a client of its own."""
        self._rest = rest
        self._bucket = bucket
        self._event_bucket = event_bucket or bucket
        self._pending: OrderedDict[tuple[str, ...], Callable[[], Awaitable[None]]] = OrderedDict()
        self._wakeup = asyncio.Event()
        self._writing: set[tuple[str, ...]] = set()
        self._workers = [asyncio.create_task(self._work(), name=f"status writer {i}") for i in range(workers)]
        self._pod_conditions: dict[str, tuple[str, str]] = {}
        self._events_seen: OrderedDict[tuple[str, str, str], float] = OrderedDict()
        self._busy = 0
        self.instance = f"troupe-scheduler-{socket.gethostname()}"

    # --------------------------------------------------------------- plumbing

    def _enqueue(self, key: tuple[str, ...], write: Callable[[], Awaitable[None]]) -> None:
        self._pending.pop(key, None)
        self._pending[key] = write
        self._wakeup.set()

    def _next(self) -> tuple[tuple[str, ...], Callable[[], Awaitable[None]]] | None:
        """The oldest queued write whose object has no write in flight: two
        writes to one object never run at once, so they land in order (a stale
        "waiting" condition cannot overtake the "scheduled" one)."""
        for key in self._pending:
            if key not in self._writing:
                return key, self._pending.pop(key)
        return None

    async def _work(self) -> None:
        while True:
            job = self._next()
            if job is None:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            key, write = job
            self._writing.add(key)
            self._busy += 1
            bucket = self._event_bucket if key[0] == "event" else self._bucket
            try:
                await bucket.acquire()
                failpoints.hit("status-write")
                await write()
            except ApiException as exc:
                if exc.status == 429:
                    # Throttled: wait as told, then write it again (unless a newer write replaced it).
                    bucket.pause(_retry_after(exc))
                    self._pending.setdefault(key, write)
                else:
                    log.warning("status write failed: %s %s", exc.status, exc.reason)
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                log.warning("status write failed: %s", exc)
            except Exception:  # never let a bad write kill a worker
                log.exception("status write failed")
            finally:
                self._busy -= 1
                self._writing.discard(key)
                if key in self._pending:
                    self._wakeup.set()  # a newer write to the same object waited for this one

    async def flush(self, timeout: float = 10.0) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (self._pending or self._busy) and loop.time() < deadline:
            await asyncio.sleep(0.05)

    async def close(self) -> None:
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)

    def forget_pod(self, uid: str) -> None:
        """The pod is placed or gone: drop what we remember and any queued condition write."""
        self._pod_conditions.pop(uid, None)
        self._pending.pop(("pod", uid), None)

    # ------------------------------------------------------------- PodGroups

    def group_condition(self, group: PodGroup, status: str, reason: str, message: str) -> None:
        current = group.condition(C.POD_GROUP_SCHEDULED)
        generation = group.metadata.generation
        if (
            current is not None
            and current.status == status
            and current.reason == reason
            and current.message == message
            and current.observed_generation == generation
        ):
            return
        transition = current.last_transition_time if current is not None and current.status == status else None
        condition = {
            "type": C.POD_GROUP_SCHEDULED,
            "status": status,
            "reason": reason,
            "message": message[:32768],
            "observedGeneration": generation,
            "lastTransitionTime": transition or now_rfc3339(),
        }
        others = [
            c.model_dump(by_alias=True, exclude_none=True)
            for c in group.status.conditions
            if c.type != C.POD_GROUP_SCHEDULED
        ]
        body = encode({"status": {"conditions": others + [condition]}})
        ns, name = group.key
        path = f"/apis/{C.GROUP}/{C.VERSION}/namespaces/{ns}/{C.PODGROUP_PLURAL}/{name}/status"

        async def write() -> None:
            try:
                await self._rest.patch(path, body, MERGE_PATCH, timeout=REQUEST_TIMEOUT_SECONDS)
            except ApiException as exc:
                if exc.status != 404:  # deleted meanwhile: nothing to report on
                    raise

        self._enqueue(("podgroup", ns, name), write)

    # ------------------------------------------------------------------ pods

    def pod_unschedulable(self, pod: PodInfo, message: str, still_waiting: Callable[[], bool] | None = None) -> None:
        """PodScheduled=False/Unschedulable. `still_waiting` is asked again just before
        the write, so a pod bound meanwhile never gets a stale condition."""
        if self._pod_conditions.get(pod.uid) == (C.REASON_UNSCHEDULABLE, message):
            return
        self._pod_conditions[pod.uid] = (C.REASON_UNSCHEDULABLE, message)
        body = encode(
            {
                "status": {
                    "conditions": [
                        {
                            "type": C.POD_SCHEDULED,
                            "status": "False",
                            "reason": C.REASON_UNSCHEDULABLE,
                            "message": message[:32768],
                            "lastProbeTime": None,
                            "lastTransitionTime": now_rfc3339(),
                        }
                    ]
                }
            }
        )
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status"

        async def write() -> None:
            if still_waiting is not None and not still_waiting():
                return
            try:
                await self._rest.patch(path, body, STRATEGIC_MERGE_PATCH, timeout=REQUEST_TIMEOUT_SECONDS)
            except ApiException as exc:
                if exc.status != 404:
                    raise

        self._enqueue(("pod", pod.uid), write)

    def nominate(self, pod: PodInfo, node: str) -> None:
        """status.nominatedNodeName: PostFilter made room for the pod on `node`."""
        body = encode({"status": {"nominatedNodeName": node}})
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status"

        async def write() -> None:
            try:
                await self._rest.patch(path, body, STRATEGIC_MERGE_PATCH, timeout=REQUEST_TIMEOUT_SECONDS)
            except ApiException as exc:
                if exc.status != 404:
                    raise

        self._enqueue(("nominate", pod.uid), write)

    # ---------------------------------------------------------------- events

    def event(self, regarding: dict[str, str], type_: str, reason: str, note: str, action: str) -> None:
        """An events.k8s.io/v1 Event; the same note on the same object is posted
        at most once per EVENT_DEDUPE_SECONDS."""
        loop_time = asyncio.get_running_loop().time()
        dedupe = (regarding.get("uid", "") or regarding["name"], reason, note)
        last = self._events_seen.get(dedupe)
        if last is not None and loop_time - last < EVENT_DEDUPE_SECONDS:
            return
        self._events_seen[dedupe] = loop_time
        self._events_seen.move_to_end(dedupe)
        while len(self._events_seen) > 50_000:
            self._events_seen.popitem(last=False)
        ns = regarding.get("namespace") or "default"
        body: dict[str, Any] = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            # Named as upstream's recorder names events: <object>.<unix nanos in hex>.
            "metadata": {"name": f"{regarding['name']}.{time.time_ns():x}", "namespace": ns},
            "eventTime": now_micro(),
            "reportingController": "troupe-scheduler",
            "reportingInstance": self.instance[:128],
            "action": action,
            "reason": reason,
            "note": note[:MAX_NOTE],
            "type": type_,
            "regarding": regarding,
        }

        path = f"/apis/events.k8s.io/v1/namespaces/{ns}/events"
        data = encode(body)

        async def write() -> None:
            await self._rest.post(path, data, timeout=REQUEST_TIMEOUT_SECONDS)

        self._enqueue(("event", *dedupe), write)

    def pod_event(self, pod: PodInfo, type_: str, reason: str, note: str, action: str) -> None:
        self.event(
            {"apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace, "name": pod.name, "uid": pod.uid},
            type_,
            reason,
            note,
            action,
        )

    def group_event(self, group: PodGroup, type_: str, reason: str, note: str, action: str) -> None:
        self.event(
            {
                "apiVersion": C.API_VERSION,
                "kind": "PodGroup",
                "namespace": group.metadata.namespace,
                "name": group.metadata.name,
                "uid": group.metadata.uid,
            },
            type_,
            reason,
            note,
            action,
        )
