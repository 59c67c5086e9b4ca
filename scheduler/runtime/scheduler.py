"""The live scheduler: turns watch events into cache and queue updates, runs
the single scheduling loop, and applies decisions through the binder and the
status writer.

Everything here runs on one asyncio loop. A cycle (snapshot, algorithm,
decision) has no `await` inside, so no event can change the cache half-way
through a decision.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Any, Callable, Iterable, Mapping, Protocol

from pydantic import ValidationError

from ..api import constants as C
from ..api.config import SchedulerConfiguration
from ..api.objects import ObjectError, PodInfo, parse_node, parse_pod
from ..api.podgroup import PodGroup, describe_validation_error, parse_podgroup, parse_workload
from ..cluster.cache import ClusterCache, InvalidObject
from ..framework.framework import Framework
from ..framework.interface import Handle
from ..framework.registry import Registry
from ..podgroup.cycle import GroupDecision, error_decision, order_pods, schedule_group
from ..framework.interface import Status
from ..queue.scheduling_queue import PoppedUnit, SchedulingQueue, State, UnitKey, group_unit, unit_of
from ..framework import events as E
from . import failpoints, metrics

log = logging.getLogger(__name__)


class BinderLike(Protocol):
    def submit(self, pod: PodInfo, node: str) -> None: ...


class WriterLike(Protocol):
    def group_condition(self, group: PodGroup, status: str, reason: str, message: str) -> None: ...
    def pod_unschedulable(self, pod: PodInfo, message: str, still_waiting: Callable[[], bool] | None = None) -> None: ...
    def pod_event(self, pod: PodInfo, type_: str, reason: str, note: str, action: str) -> None: ...
    def group_event(self, group: PodGroup, type_: str, reason: str, note: str, action: str) -> None: ...
    def forget_pod(self, uid: str) -> None: ...


class Scheduler:
    def __init__(
        self,
        config: SchedulerConfiguration,
        registry: Registry,
        clock: Callable[[], float] = time.monotonic,
        gated_report_delay: float = 0.0,
        gated_report_max: float = 30.0,
    ) -> None:
        """`gated_report_delay`: a unit held by PreEnqueue is told why only once
        it has been held this many seconds (on the running loop): a gang whose
        pods arrive within that time costs no status writes at all. While its
        pods keep arriving, only the PodGroup's condition (one write, the live
        count) says so; each pod gets its condition and event once no pod has
        arrived for `gated_report_delay`, or `gated_report_max` seconds after
        the unit was first held: a 5000-pod gang filling for 15 s otherwise
        cost two writes a pod, more than its binding."""
        self.config = config
        self.cache = ClusterCache()
        handle = Handle(self.cache)
        self.frameworks: dict[str, Framework] = {
            p.scheduler_name: Framework(p, registry, handle) for p in config.profiles
        }
        q = config.queue
        self.queue = SchedulingQueue(
            self._gate,
            initial_backoff=q.pod_initial_backoff_seconds,
            max_backoff=q.pod_max_backoff_seconds,
            max_unschedulable=q.max_unschedulable_seconds,
            clock=clock,
        )
        self.binder: BinderLike | None = None
        self.writer: WriterLike | None = None
        self.synced = asyncio.Event()  # the initial listing is in the cache
        self.last_cycle = time.monotonic()
        # What each waiting pod / gated unit was last told (so it is told once).
        self._gated_reported: dict[str, str] = {}
        self._unit_reported: dict[UnitKey, str] = {}
        self._gate_status: dict[UnitKey, Status] = {}
        self.gated_report_delay = gated_report_delay
        self.gated_report_max = gated_report_max
        self._report_timers: dict[UnitKey, asyncio.TimerHandle] = {}
        # Per held unit: when it was first held, when a pod last joined it (loop time).
        self._held_since: dict[UnitKey, float] = {}
        self._last_arrival: dict[UnitKey, float] = {}

    # ------------------------------------------------------------- helpers

    def is_ours(self, pod: PodInfo) -> bool:
        return pod.scheduler_name in self.frameworks

    def is_pending(self, pod: PodInfo) -> bool:
        """Ours, unbound, alive, and not being bound right now: a pod assumed
        onto a node stays out of the queue until the watch confirms the binding
        (or the bind fails and it is requeued), whatever other updates arrive."""
        return (
            self.is_ours(pod) and not pod.node_name and not pod.terminal and not pod.deleting
            and pod.uid not in self.cache.assumed
        )

    def still_waiting(self, uid: str) -> Callable[[], bool]:
        """For the status writer: is the pod still unplaced when its condition is written?"""

        def check() -> bool:
            pod = self.cache.pods.get(uid)
            return pod is not None and self.is_pending(pod)

        return check

    def _gate(self, key: UnitKey, pods: Iterable[PodInfo]) -> str | None:
        """PreEnqueue for a unit: the first pod a plugin holds back holds the unit back."""
        for pod in pods:
            fwk = self.frameworks.get(pod.scheduler_name)
            if fwk is None:
                continue
            status = fwk.run_pre_enqueue(pod)
            if not status.ok:
                self._gate_status[key] = status
                return status.message
        self._gate_status.pop(key, None)
        self._unit_reported.pop(key, None)
        self._held_since.pop(key, None)
        self._last_arrival.pop(key, None)
        return None

    def _report_waiting(
        self, key: UnitKey, new_pod: PodInfo | None = None, everyone: bool = False, pods: bool = True,
    ) -> None:
        """Say why a gated unit waits. Each pod gets the stable part of the
        message (`reasons[0]`, e.g. "waiting for pods of PodGroup ns/g: minCount
        is 4") once, and again only when it changes, so a gang of N pods
        arriving one by one costs O(N) writes, not O(N^2). The PodGroup's
        condition gets the whole message, counts included (only that with
        `pods=False`)."""
        status = self._gate_status.get(key)
        unit = self.queue.unit(key)
        if status is None or unit is None or self.writer is None or not self.synced.is_set():
            return
        stable = status.reasons[0] if status.reasons else status.message
        if not pods:
            targets = []
        elif self._unit_reported.get(key) != stable or everyone:
            self._unit_reported[key] = stable
            targets = [q.pod for q in unit.pods.values()]
        elif new_pod is not None:
            targets = [new_pod]
        else:
            targets = []
        told = 0
        for pod in targets:
            if self._gated_reported.get(pod.uid) != stable:
                self._gated_reported[pod.uid] = stable
                self.writer.pod_unschedulable(pod, stable, self.still_waiting(pod.uid))
                self.writer.pod_event(pod, "Warning", C.EVENT_FAILED_SCHEDULING, stable, "Scheduling")
                told += 1
        if key[0] == "group":
            if told:
                log.info("%d pod(s) of PodGroup %s/%s told why they wait: %s", told, key[1], key[2], status.message)
            group = self.cache.groups.get((key[1], key[2]))
            if isinstance(group, PodGroup):
                current = group.condition(C.POD_GROUP_SCHEDULED)
                if current is None or current.status != "True":
                    self.writer.group_condition(group, "False", C.REASON_UNSCHEDULABLE, status.message)

    def _report_if_gated(self, key: UnitKey, new_pod: PodInfo | None = None) -> None:
        unit = self.queue.unit(key)
        if unit is None or unit.state != State.GATED:
            return
        if self.gated_report_delay <= 0:
            self._report_waiting(key, new_pod)
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        self._held_since.setdefault(key, now)
        if new_pod is not None:
            self._last_arrival[key] = now
        if key not in self._report_timers:
            self._report_timers[key] = loop.call_later(self.gated_report_delay, self._report_due, key)

    def _report_due(self, key: UnitKey) -> None:
        """The delay is over: if the unit is still held, report it (each pod at
        most once per message, as without a delay); while pods still arrive
        (and for at most `gated_report_max`), report only the PodGroup's count
        and look again once they stop."""
        self._report_timers.pop(key, None)
        unit = self.queue.unit(key)
        if unit is None or unit.state != State.GATED:
            self._held_since.pop(key, None)
            self._last_arrival.pop(key, None)
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        quiet = now - self._last_arrival.get(key, -math.inf)
        held = now - self._held_since.setdefault(key, now)
        if quiet < self.gated_report_delay and held < self.gated_report_max:
            self._report_waiting(key, pods=False)
            self._report_timers[key] = loop.call_later(self.gated_report_delay - quiet, self._report_due, key)
            return
        self._report_waiting(key, everyone=True)

    # --------------------------------------------------------------- events

    def on_pod(self, body: Mapping[str, Any]) -> None:
        try:
            pod = parse_pod(body)
        except ObjectError as exc:
            meta = body.get("metadata") or {}
            log.warning("ignoring pod %s/%s: %s", meta.get("namespace"), meta.get("name"), exc)
            return
        old = self.cache.upsert_pod(pod)
        for event in E.pod_update_events(old, pod):
            self._cluster_event(event)
        if self.is_pending(pod):
            self.queue.add(pod)
            self._report_if_gated(unit_of(pod), pod)
        else:
            self.queue.delete(pod.uid)
            self._gated_reported.pop(pod.uid, None)
        if pod.group_name and (old is None or old.group_name != pod.group_name or old.terminal != pod.terminal):
            # Membership changed: the gang may now have minCount pods.
            key = group_unit(pod.namespace, pod.group_name)
            self.queue.activate(key)
            self._report_if_gated(key)

    def on_pod_deleted(self, body: Mapping[str, Any]) -> None:
        uid = str((body.get("metadata") or {}).get("uid") or "")
        held_room = bool(self.cache.placed_node(uid))  # bound, or assumed while binding
        old = self.cache.remove_pod(uid)
        self.queue.delete(uid)
        self._gated_reported.pop(uid, None)
        if self.writer is not None:
            self.writer.forget_pod(uid)
        if old is None:
            return
        if held_room and not old.terminal:
            self._cluster_event(E.ASSIGNED_POD_DELETE)
        if old.group_name:
            key = group_unit(old.namespace, old.group_name)
            self.queue.regate(key)
            self._report_if_gated(key)

    def on_node(self, body: Mapping[str, Any]) -> None:
        try:
            node = parse_node(body)
        except ObjectError as exc:
            log.warning("ignoring node %s: %s", (body.get("metadata") or {}).get("name"), exc)
            return
        old = self.cache.node(node.name)
        if old == node:
            return  # a heartbeat: nothing the scheduler reads changed
        self.cache.upsert_node(node)
        for event in [E.NODE_ADD] if old is None else E.node_update_events(old, node):
            self._cluster_event(event)

    def on_node_deleted(self, body: Mapping[str, Any]) -> None:
        name = str((body.get("metadata") or {}).get("name") or "")
        if self.cache.node(name) is not None:
            self.cache.remove_node(name)
            self._cluster_event(E.NODE_DELETE)

    def _cluster_event(self, event: str) -> None:
        moved = self.queue.move_for_event(event)
        if moved:
            metrics.QUEUE_INCOMING.labels(event=event).inc(moved)

    def on_podgroup(self, body: Mapping[str, Any]) -> None:
        key = _object_key(body)
        try:
            group: PodGroup | InvalidObject = parse_podgroup(body)
        except ValidationError as exc:
            group = InvalidObject(describe_validation_error(exc))
            log.warning("PodGroup %s/%s is invalid: %s", *key, group.message)
        old = self.cache.groups.get(key)
        self.cache.upsert_group(key, group)
        if isinstance(old, PodGroup) and isinstance(group, PodGroup) and old.spec == group.spec:
            return  # only our own status write came back
        self.queue.activate(group_unit(*key))
        self._report_if_gated(group_unit(*key))

    def on_podgroup_deleted(self, body: Mapping[str, Any]) -> None:
        key = _object_key(body)
        self.cache.remove_group(key)
        self.queue.regate(group_unit(*key))
        self._report_if_gated(group_unit(*key))

    def on_workload(self, body: Mapping[str, Any]) -> None:
        key = _object_key(body)
        try:
            self.cache.upsert_workload(key, parse_workload(body))
        except ValidationError as exc:
            self.cache.upsert_workload(key, InvalidObject(describe_validation_error(exc)))
        self._activate_groups_of_workload(key)

    def on_workload_deleted(self, body: Mapping[str, Any]) -> None:
        key = _object_key(body)
        self.cache.remove_workload(key)
        self._activate_groups_of_workload(key)

    def _activate_groups_of_workload(self, key: tuple[str, str]) -> None:
        """PodGroups naming this Workload are judged again (Workload events are rare: a scan is fine)."""
        for (ns, name), group in list(self.cache.groups.items()):
            if not isinstance(group, PodGroup) or ns != key[0]:
                continue
            ref = group.spec.pod_group_template_ref
            if ref is not None and ref.workload is not None and ref.workload.workload_name == key[1]:
                self.queue.activate(group_unit(ns, name), skip_backoff=True)

    def on_namespace(self, body: Mapping[str, Any], deleted: bool = False) -> None:
        meta = body.get("metadata") or {}
        name = str(meta.get("name") or "")
        if deleted:
            self.cache.namespace_labels.pop(name, None)
        else:
            self.cache.namespace_labels[name] = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}

    def on_priority_class(self, body: Mapping[str, Any], deleted: bool = False) -> None:
        name = str((body.get("metadata") or {}).get("name") or "")
        if deleted:
            self.cache.priority_classes.pop(name, None)
        else:
            try:
                self.cache.priority_classes[name] = int(body.get("value") or 0)
            except (TypeError, ValueError):
                log.warning("ignoring PriorityClass %s: value is not an integer", name)

    # ----------------------------------------------------------------- loop

    def start_scheduling(self) -> None:
        """The initial listing is in the cache: gates judged on partial data are
        judged again, and what still waits is reported."""
        self.synced.set()
        for unit in list(self.queue.units()):
            self.queue.activate(unit.key)
            self._report_if_gated(unit.key)

    async def run(self) -> None:
        await self.synced.wait()
        log.info("cache synced: %d nodes, %d pods; scheduling", self.cache.node_count, len(self.cache.pods))
        self.start_scheduling()
        gauges_at = 0.0
        while True:
            popped = await self.queue.pop()
            self.last_cycle = time.monotonic()
            self.schedule_unit(popped)
            if self.last_cycle - gauges_at >= 1.0:  # O(units): not after every cycle
                gauges_at = self.last_cycle
                metrics.observe_queue(self.queue)
            await asyncio.sleep(0)  # let watch events in between cycles

    def schedule_unit(self, popped: PoppedUnit) -> GroupDecision | None:
        start = time.perf_counter()
        try:
            decision = self._decide(popped)
        except Exception as exc:  # a bug must not stop the scheduler or lose pods
            log.exception("scheduling %s failed", popped.key)
            pods = [p for p in (self.cache.pods.get(q.uid) for q in popped.pods) if p is not None]
            decision = error_decision(None, pods, f"internal error: {type(exc).__name__}: {exc}")
        if decision is None:
            return None
        self._apply(popped, decision)
        profile = popped.pods[0].scheduler_name if popped.pods else ""
        metrics.observe_attempt(decision, time.perf_counter() - start, profile)
        return decision

    def _decide(self, popped: PoppedUnit) -> GroupDecision | None:
        pods = [p for p in (self.cache.pods.get(q.uid) for q in popped.pods) if p is not None and self.is_pending(p)]
        group_key = (popped.key[1], popped.key[2]) if popped.key[0] == "group" else None
        if not pods:
            self.queue.done(popped.key, [q.uid for q in popped.pods], unschedulable=False)
            return None
        group: PodGroup | None = None
        if group_key is not None:
            found = self.cache.groups.get(group_key)
            if found is None:
                # Deleted after the unit was admitted: back to waiting.
                self.queue.done(popped.key, [], unschedulable=True)
                self.queue.regate(popped.key)
                self._report_if_gated(popped.key)
                return None
            if isinstance(found, InvalidObject):
                return error_decision(group_key, pods, f"PodGroup {group_key[0]}/{group_key[1]} is invalid: {found.message}")
            group = found
            problem = self._template_ref_problem(group)
            if problem:
                return error_decision(group_key, pods, problem)
            scheduler_names, placed_before = self.cache.member_summary(group_key)
            names = sorted(scheduler_names)
            if len(names) > 1:
                return error_decision(
                    group_key, pods,
                    f"pods of PodGroup {group_key[0]}/{group_key[1]} name different schedulerName values "
                    f"({', '.join(names)}); a group is placed by one scheduler",
                )
        else:
            placed_before = 0
        fwk = self.frameworks[pods[0].scheduler_name]
        ordered = order_pods(pods, popped.first_seen)
        return schedule_group(fwk, self.cache.snapshot(), group_key, group, ordered, placed_before)

    def _template_ref_problem(self, group: PodGroup) -> str | None:
        """A PodGroup that names its Workload template must name one that exists."""
        ref = group.spec.pod_group_template_ref
        if ref is None or ref.workload is None:
            return None
        ns, name = group.key
        wl_name, template = ref.workload.workload_name, ref.workload.pod_group_template_name
        where = "spec.podGroupTemplateRef.workload"
        workload = self.cache.workloads.get((ns, wl_name))
        if workload is None:
            return f"{where}.workloadName: Workload {ns}/{wl_name} does not exist"
        if isinstance(workload, InvalidObject):
            return f"{where}.workloadName: Workload {ns}/{wl_name} is invalid: {workload.message}"
        if workload.template(template) is None:
            known = ", ".join(t.name for t in workload.spec.pod_group_templates)
            return (f"{where}.podGroupTemplateName: Workload {ns}/{wl_name} has no podGroupTemplate "
                    f"named {template!r} (it has: {known})")
        return None

    def _apply(self, popped: PoppedUnit, decision: GroupDecision) -> None:
        # Assume first, all together: the next cycle must see this capacity used.
        for placement in decision.placements:
            self.cache.assume(placement.pod.uid, placement.node)
        self.queue.done(
            popped.key,
            [p.pod.uid for p in decision.placements],
            unschedulable=bool(decision.unplaced),
            error=decision.outcome == C.REASON_SCHEDULER_ERROR,
            wake_on=decision.wake_on,
        )
        if decision.placements:
            failpoints.hit("cycle-decided")
        if self.binder is not None:
            for placement in decision.placements:
                if self.writer is not None:
                    self.writer.forget_pod(placement.pod.uid)
                self.binder.submit(placement.pod, placement.node)
        if self.writer is None:
            return
        group = self.cache.groups.get(decision.group_key) if decision.group_key else None
        if isinstance(group, PodGroup):
            self._write_group_status(group, decision)
        for pod, why in decision.unplaced:
            message = why
            if decision.group_key is not None:
                message = f"PodGroup {decision.group_key[0]}/{decision.group_key[1]}: {why}"
            self.writer.pod_unschedulable(pod, message, self.still_waiting(pod.uid))
            self.writer.pod_event(pod, "Warning", C.EVENT_FAILED_SCHEDULING, message, "Scheduling")

    def _write_group_status(self, group: PodGroup, decision: GroupDecision) -> None:
        assert self.writer is not None
        current = group.condition(C.POD_GROUP_SCHEDULED)
        if decision.scheduled:
            self.writer.group_condition(group, "True", C.REASON_SCHEDULED, decision.message)
        elif current is not None and current.status == "True":
            # Once scheduled, a group stays scheduled (as upstream); pods that do
            # not fit later say so on their own conditions, and errors in events.
            if decision.outcome == C.REASON_SCHEDULER_ERROR:
                self.writer.group_event(group, "Warning", C.EVENT_FAILED_SCHEDULING, decision.message, "Scheduling")
        else:
            self.writer.group_condition(group, "False", decision.outcome, decision.message)
            self.writer.group_event(group, "Warning", C.EVENT_FAILED_SCHEDULING, decision.message, "Scheduling")

    # --------------------------------------------------------------- binder

    def on_bound(self, pod: PodInfo, node: str) -> None:
        metrics.POD_BINDINGS.labels(result="bound").inc()
        self._gated_reported.pop(pod.uid, None)
        if self.writer is not None:
            self.writer.forget_pod(pod.uid)
            self.writer.pod_event(
                pod, "Normal", C.EVENT_SCHEDULED, f"Successfully assigned {pod.namespace}/{pod.name} to {node}", "Binding"
            )

    def on_bind_failed(self, pod: PodInfo, node: str, message: str) -> None:
        metrics.POD_BINDINGS.labels(result="failed").inc()
        log.warning("bind %s -> %s: %s", pod.key, node, message)
        self.cache.forget(pod.uid)
        current = self.cache.pods.get(pod.uid)
        if current is not None and self.is_pending(current):
            self.queue.requeue(current)
        if self.writer is not None and current is not None:
            self.writer.pod_event(current, "Warning", C.EVENT_FAILED_SCHEDULING, message, "Binding")
        self._cluster_event(E.ASSIGNED_POD_DELETE)  # the room it held is free again

    def on_pod_gone(self, pod: PodInfo) -> None:
        """The API says the pod does not exist (its bind got 404): forget it as if
        its DELETED event had arrived (the watch may have missed it)."""
        metrics.POD_BINDINGS.labels(result="gone").inc()
        self.forget_object("pod", pod.namespace, pod.name, pod.uid)

    def forget_object(self, kind: str, namespace: str, name: str, uid: str = "") -> None:
        """Drop an object the API no longer has, through the same path as its DELETED event."""
        body = {"metadata": {"namespace": namespace, "name": name, "uid": uid}}
        {
            "pod": self.on_pod_deleted,
            "node": self.on_node_deleted,
            "podgroup": self.on_podgroup_deleted,
            "workload": self.on_workload_deleted,
        }[kind](body)


def _object_key(body: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, name) of a namespaced object body."""
    meta = body.get("metadata") or {}
    return (str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
