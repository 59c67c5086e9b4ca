"""Writing what the scheduler decided where users look: PodGroup conditions,
pod conditions and Events.

Writes are queued and done by a few workers so they never block the
scheduling loop; a newer write to the same object replaces a queued older
one; writes that would change nothing are skipped (as upstream, which patches
a pod condition only when it changes; a PodGroup's compared as its own kind
keeps it, after the watch's round trip: `_shown`). Preemption victims are written here
too: their DisruptionTarget condition, then their deletion.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException

from ..api import constants as C
from ..api import sources
from ..api.composite import COMPOSITE_KIND, COMPOSITE_PLURAL, COMPOSITE_SCHEDULED, CompositePodGroup
from ..api.podgroup import PodGroup
from ..api.records import GroupKey, NodeInfo, PodInfo
from ..api.sources import MemberCounts
from ..core import metrics
from . import failpoints, outage
from .apitime import now_rfc3339
from .binder import REQUEST_TIMEOUT_SECONDS
from .binder import retry_after as _retry_after
from .events import EventRecorder
from .kube import NotLeading, RestClient, encode
from .ratelimit import TokenBucket

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
MAX_MESSAGE = 32768
# PodGroups whose conditions troupe remembers having written (see _group_write).
MAX_GROUP_RECORDS = 10_000
DELETE_OPTIONS = "DeleteOptions"
# While pods are being bound, a status write waits for binding to pause, but
# no longer than this after it was queued (binds first: runtime/events.py).
MAX_WRITE_DELAY_SECONDS = 5.0
# Binding has paused once no bind is in flight and none ended this recently.
# Shorter than the Events' BUSY_SECONDS: when a burst of binds ends, its
# groups' conditions go out first (measured at 5000 nodes, shape l: the last
# condition came 1.9-2.9 s after the last bind with a 1 s pause).
QUIET_SECONDS = 0.2
# Preemption's writes (nominatedNodeName, the victims' DisruptionTarget and
# deletion) do not wait: a higher-priority pod waits for them, and they are
# rare (nothing else fits).
URGENT = frozenset({"preempt", "nominate"})
# A pod condition patch refused because the pod changed (409) is tried again
# against the pod as it is now, at most this many times in all.
POD_CONDITION_TRIES = 3


# The victim (or the nominated pod) is not there any more: 404, or 409 when
# the uid precondition names an older pod of that name.
_VICTIM_GONE = (404, 409)


def _uid_refused(exc: ApiException) -> bool:
    """The API refused a patch because its metadata.uid is not the object's
    (422, metadata.uid is immutable): the name belongs to another pod now."""
    if exc.status != 422:
        return False
    try:
        causes = json.loads(exc.body or b"{}").get("details", {}).get("causes") or []
    except (ValueError, AttributeError):
        return False
    return any(c.get("field") == "metadata.uid" for c in causes if isinstance(c, dict))


def _same(condition: dict[str, Any], status: str, reason: str, message: str) -> bool:
    return (
        condition.get("status") == status and condition.get("reason") == reason and condition.get("message") == message
    )


def _shown(group: PodGroup, condition: dict[str, Any]) -> list[dict[str, Any]]:
    """`condition` as the group's object keeps it: in its source's vocabulary
    and with only the fields its kind has (api/sources). Volcano's conditions
    have no observedGeneration, and its CRD, having no status subresource,
    bumps metadata.generation with every status write; scheduler-plugins'
    PodGroup has no conditions at all. lastTransitionTime is not part of a
    decision."""
    exported = sources.export_status(group, [condition], MemberCounts(), "").get("conditions") or ()
    return [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in exported]


def _unchanged(group: PodGroup, current: dict[str, Any] | None, condition: dict[str, Any]) -> bool:
    """Writing `condition` would change nothing the group's object shows:
    compared as the source keeps both, after the watch's round trip (the
    source's import of what troupe wrote, or troupe's own record of it)."""
    return current is not None and _shown(group, current) == _shown(group, condition)


class StatusWriter:
    def __init__(
        self,
        rest: RestClient,
        bucket: TokenBucket,
        events: EventRecorder | None = None,
        workers: int = 4,
        binding: Callable[[float], bool] | None = None,
        members: Callable[[GroupKey], tuple[PodGroup | None, MemberCounts]] | None = None,
    ) -> None:
        """`bucket` limits status writes (shared with binding, one client as
        kube-scheduler's); Events go through `events` (by default one on the
        same client and bucket); `binding(seconds)`: a bind is in flight or
        finished within `seconds` (the binder's), and writes wait for it;
        `members(key)`: the cached PodGroup and the counts of its pods, read
        when a write runs (for sources whose status counts pods)."""
        self._rest = rest
        self._bucket = bucket
        self.events = events or EventRecorder(rest, bucket)
        self._binding = binding or (lambda _seconds: False)
        self._pending: OrderedDict[tuple[str, ...], Callable[[], Awaitable[None]]] = OrderedDict()
        self._since: dict[tuple[str, ...], float] = {}  # when a pending write was first queued
        self._urgent: set[tuple[str, ...]] = set()  # pending keys of URGENT kinds
        self._wakeup = asyncio.Event()
        self._writing: set[tuple[str, ...]] = set()
        self._workers = [asyncio.create_task(self._work(), name=f"status writer {i}") for i in range(workers)]
        self._pod_conditions: dict[str, tuple[str, str]] = {}
        # (namespace, name) -> (uid, {condition type: the condition as troupe last queued it})
        self._group_conditions: OrderedDict[GroupKey, tuple[str, dict[str, dict[str, Any]]]] = OrderedDict()
        # CompositePodGroup -> (uid, condition type -> the condition troupe wrote last)
        self._composite_written: OrderedDict[GroupKey, tuple[str, dict[str, dict[str, Any]]]] = OrderedDict()
        self.members = members or (lambda _key: (None, MemberCounts()))
        # Source status fields (phase, counts) last written: key -> (uid, fields).
        self._source_fields: OrderedDict[GroupKey, tuple[str, dict[str, Any]]] = OrderedDict()
        self._busy = 0
        self.events.behind = self.writing

    def writing(self) -> bool:
        """Writes are queued or in flight (Events wait for them: events.py)."""
        return bool(self._pending) or self._busy > 0

    # --------------------------------------------------------------- plumbing

    def _enqueue(self, key: tuple[str, ...], write: Callable[[], Awaitable[None]]) -> None:
        # A newer write to the same object takes the queued one's place (and age).
        self._since.setdefault(key, time.monotonic())
        self._pending[key] = write
        if key[0] in URGENT:
            self._urgent.add(key)
        self._wakeup.set()

    def _requeue(self, key: tuple[str, ...], write: Callable[[], Awaitable[None]]) -> None:
        """A failed write goes back in the queue, unless a newer write to the same object replaced it."""
        if key not in self._pending:
            self._enqueue(key, write)

    async def _behind_binds(self) -> None:
        """Binds first: while pods are being bound, writes wait, each at most
        MAX_WRITE_DELAY_SECONDS after it was queued. On a saturated API server
        a PodGroup status patch costs at least what a bind costs."""
        while self._pending and not self._urgent and self._binding(QUIET_SECONDS):
            oldest = next(iter(self._pending))
            if time.monotonic() - self._since.get(oldest, 0.0) >= MAX_WRITE_DELAY_SECONDS:
                return
            await asyncio.sleep(0.05)

    def _next(self) -> tuple[tuple[str, ...], Callable[[], Awaitable[None]]] | None:
        """Preemption's writes first, then the oldest queued write whose object
        has no write in flight: two writes to one object never run at once, so
        they land in order (a stale "waiting" condition cannot overtake the
        "scheduled" one)."""
        for key in sorted(self._urgent) if self._urgent else ():
            if key not in self._writing and key in self._pending:
                self._urgent.discard(key)
                self._since.pop(key, None)
                return key, self._pending.pop(key)
        for key in self._pending:
            if key not in self._writing:
                self._urgent.discard(key)
                self._since.pop(key, None)
                return key, self._pending.pop(key)
        return None

    async def _work(self) -> None:
        while True:
            await self._behind_binds()
            job = self._next()
            if job is None:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            key, write = job
            self._writing.add(key)
            self._busy += 1
            try:
                await self._bucket.acquire()
                failpoints.hit("status-write")
                await write()
                outage.STATUS.succeeded()
            except ApiException as exc:
                if exc.status == 429:  # throttled: wait as told, then write it again
                    self._bucket.pause(_retry_after(exc))
                    self._requeue(key, write)
                elif outage.is_outage(exc):
                    if await outage.STATUS.backoff(exc):  # away: write it again later
                        self._requeue(key, write)
                else:
                    outage.STATUS.succeeded()  # it answered
                    log.warning("status write failed: %s %s", exc.status, exc.reason)
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                if await outage.STATUS.backoff(exc):
                    self._requeue(key, write)
            except NotLeading:  # the lease was lost: the next leader writes what is still true
                log.debug("status write dropped: not leading")
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
        await self.events.flush(max(deadline - loop.time(), 0.0))

    async def close(self) -> None:
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        await self.events.close()

    def forget_pod(self, uid: str) -> None:
        """The pod is placed or gone: drop what we remember and any queued condition write."""
        self._pod_conditions.pop(uid, None)
        self._pending.pop(("pod", uid), None)
        self._since.pop(("pod", uid), None)

    # ------------------------------------------------------------- PodGroups

    def group_condition(self, group: PodGroup, status: str, reason: str, message: str) -> None:
        if not _has_object(group):
            return  # a group made of its pods' labels (Kueue): its pods say it
        current = self._group_current(group, C.POD_GROUP_SCHEDULED)
        transition = (
            current.get("lastTransitionTime") if current is not None and current.get("status") == status else None
        )
        condition = {
            "type": C.POD_GROUP_SCHEDULED,
            "status": status,
            "reason": reason,
            "message": message[:MAX_MESSAGE],
            "observedGeneration": group.metadata.generation,
            "lastTransitionTime": transition or now_rfc3339(),
        }
        if not _unchanged(group, current, condition):
            self._group_write(group, condition)

    def group_disrupted(self, group: PodGroup, message: str) -> None:
        """DisruptionTarget=True (PreemptionByScheduler) in the PodGroup's
        status, next to its PodGroupScheduled condition, and a Preempted Event."""
        message = message[:MAX_MESSAGE]
        current = self._group_current(group, C.DISRUPTION_TARGET)
        transition = (
            current.get("lastTransitionTime") if current is not None and current.get("status") == "True" else None
        )
        condition = {
            "type": C.DISRUPTION_TARGET,
            "status": "True",
            "reason": C.REASON_PREEMPTION_BY_SCHEDULER,
            "message": message,
            "observedGeneration": group.metadata.generation,
            "lastTransitionTime": transition or now_rfc3339(),
        }
        if not _unchanged(group, current, condition):
            self._group_write(group, condition)
        self.group_event(group, "Normal", C.EVENT_PREEMPTED, message, "Preempting")

    def _group_owned(self, group: PodGroup) -> dict[str, dict[str, Any]]:
        """The conditions troupe queued or wrote for this PodGroup that the
        cached `group` does not show yet (the watch lags our writes)."""
        entry = self._group_conditions.get(group.key)
        if entry is None:
            return {}
        uid, owned = entry
        if uid != group.metadata.uid:  # another PodGroup of the same name
            del self._group_conditions[group.key]
            return {}
        for type_, written in list(owned.items()):
            cached = group.condition(type_)
            if cached is not None and _same(written, cached.status, cached.reason, cached.message):
                del owned[type_]  # the cache has caught up: it is the reference again
        if not owned:
            del self._group_conditions[group.key]
        return owned

    def _group_current(self, group: PodGroup, type_: str) -> dict[str, Any] | None:
        """A condition as it is or will be once our queued writes land."""
        owned = self._group_owned(group).get(type_)
        if owned is not None:
            return owned
        cached = group.condition(type_)
        return None if cached is None else cached.model_dump(by_alias=True, exclude_none=True)

    def _group_write(self, group: PodGroup, condition: dict[str, Any]) -> None:
        """Patch status.conditions with `condition` in place of its type.

        A merge patch replaces the whole list (CRDs take no strategic merge),
        so the list sent is the cached one with every condition troupe has
        queued or written and the cache does not show yet: PodGroupScheduled
        and DisruptionTarget written a moment apart do not erase each other,
        and one queued write replacing another (same key) loses neither."""
        if not _has_object(group):
            return
        key = group.key
        ns, name = group.metadata.namespace, group.metadata.name
        owned = dict(self._group_owned(group))
        owned[condition["type"]] = condition
        self._group_conditions[key] = (group.metadata.uid, owned)
        self._group_conditions.move_to_end(key)
        while len(self._group_conditions) > MAX_GROUP_RECORDS:  # long caught up, or the group is gone
            self._group_conditions.popitem(last=False)
        conditions = [
            owned.get(c.type) or c.model_dump(by_alias=True, exclude_none=True) for c in group.status.conditions
        ]
        cached_types = {c.type for c in group.status.conditions}
        conditions += [c for type_, c in owned.items() if type_ not in cached_types]
        path = sources.status_path(group.api_version, ns, name)
        now = now_rfc3339()

        async def write() -> None:
            # In the vocabulary of the PodGroup's own kind and version, with
            # the source's counts as they are now (api/sources).
            cached, counts = None, MemberCounts()
            if sources.counts_members(group.api_version):
                cached, counts = self.members(key)
            status = sources.export_status(cached or group, conditions, counts, now)
            if "conditions" not in status and not self._fields_changed(cached or group, status):
                return  # the kind keeps no conditions (scheduler-plugins'), and its fields are as they are
            noted = self._note_source_fields(cached or group, status)
            body = encode({"status": status})
            try:
                await self._rest.patch(path, body, MERGE_PATCH, timeout=REQUEST_TIMEOUT_SECONDS)
                metrics.GROUP_STATUS_WRITES.labels(source=key.source, write="conditions").inc()
            except ApiException as exc:
                if exc.status == 404:  # deleted meanwhile: nothing to report on
                    return
                self._unnote_source_fields(key, noted)
                if exc.status != 429:  # 429: the worker writes it again
                    self._forget_group_write(key, condition)
                raise
            except BaseException:
                self._unnote_source_fields(key, noted)
                self._forget_group_write(key, condition)
                raise

        self._enqueue(("podgroup", *key), write)

    # ---------------------------------------------------- CompositePodGroups

    def composite_condition(self, composite: CompositePodGroup, status: str, reason: str, message: str) -> None:
        """CompositePodGroupInitiallyScheduled on a CompositePodGroup (upstream's
        scheduler writes none; troupe says why a tree waits)."""
        if _has_object(composite):
            self._composite_write(composite, COMPOSITE_SCHEDULED, status, reason, message)

    def composite_disrupted(self, composite: CompositePodGroup, message: str) -> None:
        """DisruptionTarget=True (PreemptionByScheduler) on a CompositePodGroup
        whose tree was preempted whole, and a Preempted Event."""
        if not _has_object(composite):
            return
        self._composite_write(composite, C.DISRUPTION_TARGET, "True", C.REASON_PREEMPTION_BY_SCHEDULER, message)
        self.composite_event(composite, "Normal", C.EVENT_PREEMPTED, message[:MAX_MESSAGE], "Preempting")

    def _composite_write(
        self, composite: CompositePodGroup, type_: str, status: str, reason: str, message: str
    ) -> None:
        """Merge-patch the composite's conditions: the cached ones, with the
        ones troupe wrote and the cache does not show yet, and this one (as
        `_group_write` does for PodGroups)."""
        key = composite.key
        message = message[:MAX_MESSAGE]
        entry = self._composite_written.get(key)
        owned = dict(entry[1]) if entry is not None and entry[0] == composite.metadata.uid else {}
        cached = composite.condition(type_)
        current = owned.get(type_) or (None if cached is None else cached.model_dump(by_alias=True, exclude_none=True))
        if current is not None and _same(current, status, reason, message):
            return
        transition = (
            current.get("lastTransitionTime") if current is not None and current.get("status") == status else None
        )
        condition: dict[str, Any] = {
            "type": type_,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": transition or now_rfc3339(),
        }
        if composite.metadata.generation:  # a native object may have none (omitempty)
            condition["observedGeneration"] = composite.metadata.generation
        owned[type_] = condition
        self._composite_written[key] = (composite.metadata.uid, owned)
        self._composite_written.move_to_end(key)
        while len(self._composite_written) > MAX_GROUP_RECORDS:
            self._composite_written.popitem(last=False)
        conditions = [
            owned.get(c.type) or c.model_dump(by_alias=True, exclude_none=True) for c in composite.status.conditions
        ]
        cached_types = {c.type for c in composite.status.conditions}
        conditions += [c for t, c in owned.items() if t not in cached_types]
        kind = sources.group_kind(composite.api_version, COMPOSITE_KIND)
        plural = kind.plural if kind is not None else COMPOSITE_PLURAL
        ns, name = composite.metadata.namespace, composite.metadata.name
        path = f"/apis/{composite.api_version}/namespaces/{ns}/{plural}/{name}/status"
        body = encode({"status": {"conditions": conditions}})

        async def write() -> None:
            try:
                await self._rest.patch(path, body, MERGE_PATCH, timeout=REQUEST_TIMEOUT_SECONDS)
                metrics.GROUP_STATUS_WRITES.labels(source=key.source, write="conditions").inc()
            except ApiException as exc:
                if exc.status == 404:  # deleted meanwhile
                    return
                if exc.status != 429:
                    self._composite_written.pop(key, None)
                raise
            except BaseException:
                self._composite_written.pop(key, None)
                raise

        self._enqueue(("compositepodgroup", *key), write)

    def composite_event(self, composite: CompositePodGroup, type_: str, reason: str, note: str, action: str) -> None:
        if not _has_object(composite):
            return
        meta = composite.metadata
        regarding = {
            "apiVersion": composite.api_version,
            "kind": COMPOSITE_KIND,
            "namespace": meta.namespace,
            "name": meta.name,
            "uid": meta.uid,
        }
        self.events.event(regarding, type_, reason, note, action)

    def group_members(self, group: PodGroup) -> None:
        """A pod of `group` changed (bound, running, finished, gone): for a
        source whose status counts its pods, write the counts and phase. Read
        when the write runs, so a burst of pod events is one write."""
        if not sources.counts_members(group.api_version) or not _has_object(group):
            return
        key = group.key
        path = sources.status_path(group.api_version, key.namespace, key.name)

        async def write() -> None:
            cached, counts = self.members(key)
            if cached is None or cached.metadata.uid != group.metadata.uid:
                return  # gone, or another PodGroup of that name now
            fields = sources.export_status(cached, None, counts, now_rfc3339())
            if not self._fields_changed(cached, fields):
                return
            noted = self._note_source_fields(cached, fields)
            try:
                await self._rest.patch(path, encode({"status": fields}), MERGE_PATCH, timeout=REQUEST_TIMEOUT_SECONDS)
                metrics.GROUP_STATUS_WRITES.labels(source=key.source, write="counts").inc()
            except ApiException as exc:
                if exc.status == 404:
                    return
                # Not written (429 included: written again, and then compared with what the API has).
                self._unnote_source_fields(key, noted)
                raise
            except BaseException:
                self._unnote_source_fields(key, noted)
                raise

        self._enqueue(("podgroup-members", *key), write)

    def _fields_changed(self, group: PodGroup, fields: dict[str, Any]) -> bool:
        """`fields` differ from what troupe last wrote (or, if nothing, from the cache)."""
        written = self._source_fields.get(group.key)
        base = written[1] if written is not None and written[0] == group.metadata.uid else group.source_status
        return any(base.get(k) != v for k, v in fields.items() if k != "conditions")

    def _note_source_fields(self, group: PodGroup, status: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
        """Remember the source fields (phase, counts) of a write being sent;
        what is remembered, for `_unnote_source_fields` if it fails."""
        fields = {k: v for k, v in status.items() if k not in ("conditions", "resourceClaimStatuses")}
        if not fields:
            return None
        noted = self._source_fields[group.key] = (group.metadata.uid, fields)
        self._source_fields.move_to_end(group.key)
        while len(self._source_fields) > MAX_GROUP_RECORDS:
            self._source_fields.popitem(last=False)
        return noted

    def _unnote_source_fields(self, key: GroupKey, noted: tuple[str, dict[str, Any]] | None) -> None:
        """The write did not land: compare with the cache again (unless a later write noted its own)."""
        if noted is not None and self._source_fields.get(key) is noted:
            del self._source_fields[key]

    def _forget_group_write(self, key: GroupKey, condition: dict[str, Any]) -> None:
        """A group write failed: the condition it set is not in the API, so the
        next call compares with the cache again (and writes)."""
        entry = self._group_conditions.get(key)
        if entry is not None and entry[1].get(condition["type"]) is condition:
            del entry[1][condition["type"]]
            if not entry[1]:
                del self._group_conditions[key]

    # ------------------------------------------------------------------ pods

    def pod_unschedulable(
        self,
        pod: PodInfo,
        message: str,
        still_waiting: Callable[[], bool] | None = None,
        reason: str = C.REASON_UNSCHEDULABLE,
    ) -> None:
        """PodScheduled=False/Unschedulable (or SchedulerError, as upstream
        words an error), never on a bound pod (see _pod_condition)."""
        if self._pod_conditions.get(pod.uid) == (reason, message):
            return
        condition = {
            "type": C.POD_SCHEDULED,
            "status": "False",
            "reason": reason,
            "message": message[:MAX_MESSAGE],
            "lastProbeTime": None,
            "lastTransitionTime": now_rfc3339(),
        }
        self._pod_condition(pod, (reason, message), condition, still_waiting)

    def pod_waiting(self, pod: PodInfo, message: str, still_waiting: Callable[[], bool] | None = None) -> None:
        """The pod is held before its cycle (PreEnqueue: its gang short of
        minCount, its group or a claim missing, a gate): no PodScheduled
        condition, as upstream 1.37 keeps such pods. Autoscalers provision for
        PodScheduled=False/Unschedulable only (Karpenter's IsProvisionable,
        cluster-autoscaler's unschedulable-pod lister), so one left from an
        earlier cycle is withdrawn. `message` is said by the caller's Event."""
        told = self._pod_conditions.get(pod.uid)
        reason = told[0] if told is not None else pod.unscheduled_reason
        if reason != C.REASON_UNSCHEDULABLE:
            return
        self._pod_condition(pod, ("", ""), {"type": C.POD_SCHEDULED, "$patch": "delete"}, still_waiting)

    def _pod_condition(
        self,
        pod: PodInfo,
        told: tuple[str, str],
        condition: dict[str, Any],
        still_waiting: Callable[[], bool] | None,
    ) -> None:
        """Queue the patch of the pod's PodScheduled condition (`told`: its
        reason and message, remembered so the same is not written twice).

        `still_waiting` is asked again just before the write (the cache's
        view), and the patch carries the pod's resourceVersion as a
        precondition (the API server's view): a bind that lands while the
        write is queued or in flight changes it, the patch is refused (409),
        and the pod as it is now decides whether the condition still holds.
        Without it a write sent before the bind and applied after it would
        turn the bind's PodScheduled=True back to False."""
        self._pod_conditions[pod.uid] = told
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}"

        async def write() -> None:
            if still_waiting is not None and not still_waiting():
                return
            version: str | None = pod.resource_version
            await failpoints.delay("pod-condition-late")
            for _ in range(POD_CONDITION_TRIES):
                body: dict[str, Any] = {"status": {"conditions": [condition]}}
                if version:
                    body["metadata"] = {"uid": pod.uid, "resourceVersion": version}
                try:
                    await self._rest.patch(
                        path + "/status", encode(body), STRATEGIC_MERGE_PATCH, timeout=REQUEST_TIMEOUT_SECONDS
                    )
                    return
                except ApiException as exc:
                    if exc.status == 404 or _uid_refused(exc):
                        return  # gone, or the name belongs to another pod now
                    if exc.status != 409:
                        raise
                version = await self._unbound_version(path, pod.uid)
                if version is None:
                    log.info(
                        "pod %s/%s: bound or gone before its condition was written; not written",
                        pod.namespace,
                        pod.name,
                    )
                    return
            # Changed on every try: forget it, so the pod's next attempt writes it.
            if self._pod_conditions.get(pod.uid) == told:
                del self._pod_conditions[pod.uid]
            log.debug("pod %s/%s: changed on every try; its next attempt writes it", pod.namespace, pod.name)

        self._enqueue(("pod", pod.uid), write)

    async def _unbound_version(self, path: str, uid: str) -> str | None:
        """The pod's resourceVersion if it is still this pod, unbound and not
        being deleted; None otherwise."""
        try:
            raw = await self._rest.request("GET", path, b"", timeout=REQUEST_TIMEOUT_SECONDS)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        obj = json.loads(raw)
        meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
        if meta.get("uid") != uid or meta.get("deletionTimestamp") or spec.get("nodeName"):
            return None
        return str(meta.get("resourceVersion") or "") or None

    def nominate(self, pod: PodInfo, node: str) -> None:
        """status.nominatedNodeName: PostFilter made room for the pod on `node`
        ("": the nomination is dropped).

        Only for this incarnation of the pod: the patch carries its uid, which
        the API refuses (422 on metadata.uid) once the name belongs to another
        pod. A replacement of the same name would otherwise be nominated, and
        hold room, for a decision about a pod that is gone (and a scheduler
        started later adopts what it finds)."""
        body = encode({"metadata": {"uid": pod.uid}, "status": {"nominatedNodeName": node}})
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status"

        async def write() -> None:
            try:
                await self._rest.patch(path, body, STRATEGIC_MERGE_PATCH, timeout=REQUEST_TIMEOUT_SECONDS)
            except ApiException as exc:
                if exc.status in _VICTIM_GONE or _uid_refused(exc):
                    return  # gone, or the name belongs to another pod now
                raise

        self._enqueue(("nominate", pod.uid), write)

    def preempt_pod(self, victim: PodInfo, message: str) -> None:
        """A victim: DisruptionTarget=True (PreemptionByScheduler) on the pod,
        then DELETE with its uid as precondition (only this incarnation; its own
        grace period), then a Preempted Event, in upstream's order. A pod
        already gone (404) or replaced by another of its name (409 to the
        delete, 422 on metadata.uid to the patch) is done.

        Queued under a key of its own, ("preempt", uid): the pod's condition
        writes use ("pod", uid), which a newer PodScheduled write replaces and
        `forget_pod` (on bind, on deletion) drops; neither may cancel an
        eviction. Both kinds patch pods/status with a strategic merge, which
        merges conditions by type, so running side by side they keep each
        other's condition. A second preemption of the same victim replaces the
        queued one: the same deletion."""
        message = message[:MAX_MESSAGE]
        condition = encode(
            {
                # A uid in the patch makes the API refuse it if the name now
                # belongs to another pod: that one is not our victim.
                "metadata": {"uid": victim.uid},
                "status": {
                    "conditions": [
                        {
                            "type": C.DISRUPTION_TARGET,
                            "status": "True",
                            "reason": C.REASON_PREEMPTION_BY_SCHEDULER,
                            "message": message,
                            "lastTransitionTime": now_rfc3339(),
                        }
                    ]
                },
            }
        )
        options = encode({"kind": DELETE_OPTIONS, "apiVersion": "v1", "preconditions": {"uid": victim.uid}})
        path = f"/api/v1/namespaces/{victim.namespace}/pods/{victim.name}"

        async def write() -> None:
            try:
                await self._rest.patch(
                    f"{path}/status", condition, STRATEGIC_MERGE_PATCH, timeout=REQUEST_TIMEOUT_SECONDS
                )
            except ApiException as exc:
                if exc.status in _VICTIM_GONE or _uid_refused(exc):
                    return
                raise
            await self._bucket.acquire()  # a second request: it takes its own token
            try:
                await self._rest.delete(path, options, timeout=REQUEST_TIMEOUT_SECONDS)
            except ApiException as exc:
                if exc.status in _VICTIM_GONE:
                    return
                raise
            self.pod_event(victim, "Normal", C.EVENT_PREEMPTED, message, "Preempting")

        self._enqueue(("preempt", victim.uid), write)

    # ---------------------------------------------------------------- events

    def pod_event(self, pod: PodInfo, type_: str, reason: str, note: str, action: str) -> None:
        self.events.pod_event(pod, type_, reason, note, action)

    def node_event(self, node: NodeInfo, type_: str, reason: str, note: str, action: str) -> None:
        self.events.node_event(node, type_, reason, note, action)

    def group_event(self, group: PodGroup, type_: str, reason: str, note: str, action: str) -> None:
        if _has_object(group):  # a Kueue pod group, a Volcano sub-group: no object to regard
            self.events.group_event(group, type_, reason, note, action)


def _has_object(obj: PodGroup | CompositePodGroup) -> bool:
    """The group is an API object that takes status and Events: not one made
    of its pods' labels (Kueue) or by troupe (a Volcano sub-group)."""
    return obj.made_from is None and sources.has_object(obj.api_version)
