"""The Job integration: a Workload and a PodGroup for every Job that opts in.

For each `batch/v1` Job whose pod template carries
`scheduling.troupe.dev/job-policy` (api/jobs.py has the contract), the
leader makes, owned by the Job so the garbage collector deletes them with it:

1. the Workload `<job>-<uid8>`, one template (`workers`) with the policy;
2. the PodGroup of the same name from that template (`podGroupTemplateRef`),
   except while the Job is suspended (upstream deletes it then and makes it
   again on resume, KEP-5547);
3. when `parallelism` is scaled (so a gang's default `minCount`), or the
   template of the Workload the Job names changes its `minCount`, the new
   `minCount` patched in place on both, as upstream's Job controller does:
   status, reservations and bound pods stay. Until the patch is seen, the
   cache holds the Job's gang to the new size (`on_group_resizing`), so the
   pods the Job controller adds for it are placed as one increment, not one
   by one under the old minimum. Anything else that differs (never, for a
   Job's immutable template) is replaced: deleted, then created.

A Job whose annotations ask for something impossible (minCount above
parallelism, an unknown policy) gets a Warning Event and nothing else; its
pods wait and say why. A finished Job's group is left alone. Only the leader
writes; every replica keeps the Jobs it has seen, so a new leader reconciles
them all at once. Existence is read from the scheduler's cache (PodGroups and
Workloads are watched anyway), and a create that races with the watch meets
409 AlreadyExists, which counts as done.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException

from ..api import constants as C
from ..api.jobs import JobIntent, parse_job
from ..api.podgroup import (
    PodGroup,
    PodGroupSpec,
    PodGroupTemplate,
    Workload,
    WorkloadSpec,
    parse_podgroup,
    parse_workload,
)
from ..api.records import GroupKey
from ..core.scheduler import Scheduler
from . import outage
from .apitime import now_rfc3339
from .binder import REQUEST_TIMEOUT_SECONDS, api_message
from .events import EventRecorder
from .kube import NotLeading, RestClient, encode

log = logging.getLogger(__name__)

STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"  # Job conditions merge by type
MERGE_PATCH = "application/merge-patch+json"  # custom resources take no strategic merge
RESYNC_SECONDS = 15.0  # every Job is compared with the cache this often (a PodGroup deleted by hand comes back)
RETRY_INITIAL, RETRY_MAX = 1.0, 30.0
# After writing a Job's objects, how long to trust the write over a cache
# that does not show it yet (the watch is usually well under a second behind).
SETTLE_SECONDS = 10.0
SETTLE_POLL_SECONDS = 1.0
JobKey = tuple[str, str]  # (namespace, Job name)


def _job_key(body: Mapping[str, Any]) -> JobKey:
    meta = body.get("metadata") or {}
    return (str(meta.get("namespace") or "default"), str(meta.get("name") or ""))


def _path(kind_plural: str, namespace: str, name: str = "") -> str:
    base = f"/apis/{C.API_VERSION}/namespaces/{namespace}/{kind_plural}"
    return f"{base}/{name}" if name else base


class JobController:
    def __init__(
        self,
        rest: RestClient,
        scheduler: Scheduler,
        events: EventRecorder,
        leading: Callable[[], bool] = lambda: True,
    ) -> None:
        self._rest = rest
        self._scheduler = scheduler
        self._events = events
        self._leading = leading
        self._jobs: dict[JobKey, JobIntent] = {}
        self._dirty: set[JobKey] = set()
        self._wakeup = asyncio.Event()
        self._told: dict[JobKey, str] = {}  # the last problem or action announced per Job
        # The Job's PodGroup -> until when the cache may lag, and the specs
        # (Workload, PodGroup) it will show once it has caught up.
        self._wrote: dict[GroupKey, tuple[float, _Seen]] = {}
        self._blocked: dict[JobKey, str | None] = {}  # the SchedulingBlocked condition last written

    # ------------------------------------------------------------ watch events

    def on_job(self, body: Mapping[str, Any]) -> None:
        intent = parse_job(body)
        key = _job_key(body)
        old = self._jobs.get(key)
        if intent is None:
            if old is not None:  # cannot happen for a Job (its template is immutable), but a new one may reuse the name
                self.on_job_deleted(body)
            return
        if old is not None and old.uid != intent.uid:
            self._scheduler.on_group_problem(old.key, None)
        self._jobs[key] = intent
        if old != intent:
            self._dirty.add(key)
            self._wakeup.set()
            if old is not None and old.uid == intent.uid and old.min_count != intent.min_count:
                # Scaled up: its new pods wait for the new minCount; scaled back
                # down before that landed: they wait no longer.
                self._scheduler.on_group_resizing(intent.key, None if intent.problem else intent.min_count)

    def on_job_deleted(self, body: Mapping[str, Any]) -> None:
        key = _job_key(body)
        old = self._jobs.pop(key, None)
        self._dirty.discard(key)
        self._told.pop(key, None)
        self._blocked.pop(key, None)
        if old is not None:
            self._wrote.pop(old.key, None)
            self._scheduler.on_group_problem(old.key, None)  # its objects go with it (garbage collector)

    # -------------------------------------------------------------- reconcile

    async def run(self) -> None:
        """Reconcile Jobs as they change, and all of them every RESYNC_SECONDS,
        while this replica leads."""
        delay = RETRY_INITIAL
        while True:
            try:
                await asyncio.wait_for(self._wakeup.wait(), SETTLE_POLL_SECONDS if self._dirty else RESYNC_SECONDS)
            except TimeoutError:
                if not self._dirty:
                    self._dirty.update(self._jobs)
            self._wakeup.clear()
            if not self._leading():
                continue
            failed = False
            for key in sorted(self._dirty):
                intent = self._jobs.get(key)
                self._dirty.discard(key)
                if intent is None:
                    continue
                try:
                    await self.reconcile(intent)
                except NotLeading:
                    self._dirty.add(key)
                    break
                except (ApiException, aiohttp.ClientError, TimeoutError, OSError) as exc:
                    self._dirty.add(key)
                    self._wrote.pop(intent.key, None)  # nothing to wait for: retry after the backoff
                    failed = True
                    self._announce(
                        intent, "Warning", C.EVENT_FAILED_POD_GROUP_CREATE, f"cannot make its PodGroup: {_brief(exc)}"
                    )
                except Exception:  # a Job troupe does not understand must not stop the others
                    log.exception("Job %s/%s: reconcile failed", *key)
                    self._dirty.add(key)
                    self._wrote.pop(intent.key, None)
                    failed = True
            if failed:
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX)
                self._wakeup.set()
            else:
                delay = RETRY_INITIAL

    async def reconcile(self, intent: JobIntent) -> None:
        template, problem = self._template_or_problem(intent)
        self._scheduler.on_group_problem(intent.key, problem)
        await self._blocked_condition(intent, problem)
        if problem is not None:
            self._announce(intent, "Warning", C.EVENT_INVALID_JOB_SCHEDULING, problem)
            return
        if intent.finished:
            return  # its pods are done: the group stays as it is, for the record
        cache = self._scheduler.cache
        own = intent.workload_name is None  # troupe makes the Workload (else it is the user's)
        workload, group = cache.workloads.get(intent.key), cache.groups.get(intent.key)
        desired = intent.podgroup(template, self._gang_size(intent, group) if template is None else None)
        workload_ok = not own or (isinstance(workload, Workload) and workload.spec == _workload_spec(intent))
        group_ok = isinstance(group, PodGroup) and group.spec == parse_podgroup(desired).spec
        if workload_ok and (group is None if intent.suspended else group_ok):
            self._wrote.pop(intent.key, None)
            self._scheduler.on_group_resizing(intent.key, None)  # nothing (more) to wait for
            return
        if self._cache_lags(intent, (_spec(workload), _spec(group))):
            return
        expected = (
            _workload_spec(intent) if own else _spec(workload),
            None if intent.suspended else parse_podgroup(desired).spec,
        )
        self._wrote[intent.key] = (time.monotonic() + SETTLE_SECONDS, expected)
        if own and not workload_ok and await self._sync_workload(intent, workload, group):
            group, group_ok = None, False  # deleted with the Workload, to be made again
        await self._sync_group(intent, group, group_ok, desired)

    def _template_or_problem(self, intent: JobIntent) -> tuple[PodGroupTemplate | None, str | None]:
        """The template of the Workload the Job names (None: troupe's own), or
        why no PodGroup can be made for the Job."""
        if intent.problem is not None:
            return None, intent.problem
        if intent.scheduler_name not in self._scheduler.frameworks:
            return None, (
                f"the pod template's schedulerName is {intent.scheduler_name!r}: troupe schedules pods that name "
                f"{' or '.join(sorted(self._scheduler.frameworks))}, so a PodGroup would not help"
            )
        if intent.workload_name is not None:
            return self._named_template(intent)
        return None, None

    def _cache_lags(self, intent: JobIntent, seen: _Seen) -> bool:
        """What we wrote a moment ago is not in the cache yet: acting on the
        older view would undo it. Look again shortly. Once the cache shows
        what we wrote, the Job may change again at once (scaled twice in a row)."""
        until, expected = self._wrote.get(intent.key, (0.0, None))
        if time.monotonic() < until and seen != expected:
            self._dirty.add((intent.namespace, intent.name))
            return True
        return False

    async def _delete_for_new_policy(self, intent: JobIntent, workload: object, group: object) -> None:
        """The policy changed (parallelism scaled): the specs are immutable,
        so both are made again, the PodGroup first out and last in (a
        PodGroup whose Workload is missing is an error while it lasts)."""
        if group is not None:
            await self._delete("podgroups", intent, _uid(group))
        await self._delete("workloads", intent, _uid(workload))

    async def _sync_workload(self, intent: JobIntent, workload: object, group: object) -> bool:
        """troupe's Workload for the Job made what the intent asks: its
        templates' minCount patched where only that differs, else made
        again, after deleting it and the PodGroup (then True)."""
        if isinstance(workload, Workload) and _resized(workload.spec, _workload_spec(intent)):
            templates = intent.workload()["spec"]["podGroupTemplates"]
            await self._patch("workloads", intent, workload.metadata.uid, {"podGroupTemplates": templates})
            return False
        deleted = workload is not None
        if deleted:
            await self._delete_for_new_policy(intent, workload, group)
        await self._create("workloads", intent.workload())
        return deleted

    async def _sync_group(self, intent: JobIntent, group: object, group_ok: bool, desired: dict[str, Any]) -> None:
        """The Job's PodGroup made `desired` (replaced where it differs), or
        deleted while the Job is suspended."""
        if intent.suspended:
            if group is not None:
                await self._delete("podgroups", intent, _uid(group))
                self._announce(
                    intent,
                    "Normal",
                    C.EVENT_POD_GROUP_DELETED,
                    f"PodGroup {intent.group} deleted: the Job is suspended",
                )
            return
        if group_ok:
            return
        if isinstance(group, PodGroup) and _resized(group.spec, parse_podgroup(desired).spec):
            policy = desired["spec"]["schedulingPolicy"]
            await self._patch("podgroups", intent, group.metadata.uid, {"schedulingPolicy": policy})
            self._announce(
                intent,
                "Normal",
                C.EVENT_POD_GROUP_RESIZED,
                f"PodGroup {intent.group}: minCount {group.min_count} -> {policy['gang']['minCount']}",
            )
            return
        if group is not None:
            await self._delete("podgroups", intent, _uid(group))
        await self._create("podgroups", desired)
        self._announce(intent, "Normal", C.EVENT_POD_GROUP_CREATED, f"PodGroup {intent.group}: {_describe(desired)}")

    def _gang_size(self, intent: JobIntent, group: object) -> int:
        """minCount for the Job's PodGroup: the template's, unless pods have
        succeeded and a worker made again waits that the remaining pods could
        never join to minCount; then what the completions still to come allow
        (`floor`). A group already between the two is left alone while
        nothing waits."""
        if not isinstance(group, PodGroup) or not group.is_gang or intent.floor >= intent.min_count:
            return intent.min_count
        cache = self._scheduler.cache
        _, nodes = cache.member_summary(intent.key)
        waiting = cache.live_member_count(intent.key) - len(nodes)
        if waiting > 0:
            return intent.floor
        return group.min_count if intent.floor <= group.min_count <= intent.min_count else intent.min_count

    def _named_template(self, intent: JobIntent) -> tuple[PodGroupTemplate | None, str | None]:
        """The template of the Workload the Job names, or why there is none
        (looked at again on every resync: the Workload may come later)."""
        workload = self._scheduler.cache.workloads.get(GroupKey(intent.namespace, intent.workload_name or ""))
        if workload is None:
            return None, f"Workload {intent.namespace}/{intent.workload_name} does not exist"
        if not isinstance(workload, Workload):
            return None, f"Workload {intent.namespace}/{intent.workload_name} is invalid: {workload.message}"
        return intent.template_of(workload)

    async def _create(self, plural: str, body: dict[str, object]) -> None:
        meta = body["metadata"]
        assert isinstance(meta, dict)
        try:
            await self._rest.post(_path(plural, str(meta["namespace"])), encode(body), timeout=REQUEST_TIMEOUT_SECONDS)
        except ApiException as exc:
            if exc.status != 409:  # 409: made a moment ago, the watch has not told us yet
                raise

    async def _patch(self, plural: str, intent: JobIntent, uid: str, spec: dict[str, Any]) -> None:
        """A merge patch of the spec of the Job's object, only if it is still
        the one with `uid` (a uid that differs is refused: 409 or 422); one
        replaced or gone meanwhile is left to the next reconcile."""
        body = encode({"metadata": {"uid": uid}, "spec": spec})
        try:
            await self._rest.patch(
                _path(plural, intent.namespace, intent.group), body, MERGE_PATCH, timeout=REQUEST_TIMEOUT_SECONDS
            )
        except ApiException as exc:
            if exc.status not in (404, 409, 422):
                raise
            self._wrote.pop(intent.key, None)
            self._dirty.add((intent.namespace, intent.name))

    async def _delete(self, plural: str, intent: JobIntent, uid: str) -> None:
        options: dict[str, object] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if uid:
            options["preconditions"] = {"uid": uid}
        try:
            await self._rest.delete(
                _path(plural, intent.namespace, intent.group), encode(options), timeout=REQUEST_TIMEOUT_SECONDS
            )
        except ApiException as exc:
            if exc.status not in (404, 409):  # gone already, or replaced by a newer one
                raise

    async def _blocked_condition(self, intent: JobIntent, problem: str | None) -> None:
        """The Job's `SchedulingBlocked` condition (upstream's name for a Job
        whose scheduling objects cannot be made): True with the problem while
        there is one, False once it is gone; written only when it changes."""
        key = (intent.namespace, intent.name)
        if self._blocked.get(key) == problem or (problem is None and key not in self._blocked):
            return
        now = now_rfc3339()
        condition = {
            "type": C.JOB_SCHEDULING_BLOCKED,
            "status": "True" if problem else "False",
            "reason": C.EVENT_INVALID_JOB_SCHEDULING if problem else C.REASON_POD_GROUP_MADE,
            "message": problem or f"PodGroup {intent.group} can be made",
            "lastProbeTime": now,
            "lastTransitionTime": now,
        }
        path = f"/apis/batch/v1/namespaces/{intent.namespace}/jobs/{intent.name}/status"
        body = encode({"metadata": {"uid": intent.uid}, "status": {"conditions": [condition]}})
        await self._rest.patch(path, body, STRATEGIC_MERGE_PATCH, timeout=REQUEST_TIMEOUT_SECONDS)
        self._blocked[key] = problem

    def _announce(self, intent: JobIntent, type_: str, reason: str, note: str) -> None:
        """An Event on the Job, once per distinct note (Job events repeat often)."""
        key = (intent.namespace, intent.name)
        if self._told.get(key) == note:
            return
        self._told[key] = note
        if type_ == "Warning":
            log.warning("Job %s/%s: %s", intent.namespace, intent.name, note)
        else:
            log.info("Job %s/%s: %s", intent.namespace, intent.name, note)
        ref = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "namespace": intent.namespace,
            "name": intent.name,
            "uid": intent.uid,
        }
        self._events.event(ref, type_, reason, note, "Scheduling")


def _workload_spec(intent: JobIntent) -> WorkloadSpec:
    return parse_workload(intent.workload()).spec


def _resized(old: PodGroupSpec | WorkloadSpec, new: PodGroupSpec | WorkloadSpec) -> bool:
    """`new` differs from `old` in gang minCounts only (the one change the
    CRDs allow once created); both are gangs where either is."""
    if isinstance(old, PodGroupSpec) and isinstance(new, PodGroupSpec):
        return _same_but_size(old, new)
    if isinstance(old, WorkloadSpec) and isinstance(new, WorkloadSpec):
        a, b = old.pod_group_templates, new.pod_group_templates
        return (
            old.model_copy(update={"pod_group_templates": b}) == new
            and len(a) == len(b)
            and all(x.name == y.name and _same_but_size(x, y) for x, y in zip(a, b, strict=True))
        )
    return False


def _same_but_size(old: PodGroupSpec | PodGroupTemplate, new: PodGroupSpec | PodGroupTemplate) -> bool:
    gangs = old.scheduling_policy.gang is not None and new.scheduling_policy.gang is not None
    return gangs and old.model_copy(update={"scheduling_policy": new.scheduling_policy}) == new


# What the cache shows of a Job's objects: the Workload's and the PodGroup's
# specs (None: absent; the object itself where it could not be parsed).
_Seen = tuple[object, object]


def _spec(obj: object) -> object:
    return obj.spec if isinstance(obj, PodGroup | Workload) else obj


def _uid(obj: object) -> str:
    """The uid of a cached PodGroup or Workload ("" for one the cache could not parse)."""
    return obj.metadata.uid if isinstance(obj, PodGroup | Workload) else ""


def _describe(podgroup: dict[str, Any]) -> str:
    spec = podgroup["spec"]
    gang = spec["schedulingPolicy"].get("gang")
    what = f"a gang of minCount {gang['minCount']}" if gang else "basic: pod by pod, as one group"
    ref = spec["podGroupTemplateRef"]["workload"]
    return f"{what}, from Workload {ref['workloadName']} template {ref['podGroupTemplateName']}"


def _brief(exc: BaseException) -> str:
    return f"{exc.status} {api_message(exc)}" if isinstance(exc, ApiException) else outage.describe(exc)
