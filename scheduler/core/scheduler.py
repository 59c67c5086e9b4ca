"""The Scheduler: the cache, the queue and one framework per profile, the
scheduling loop, and applying each decision through the binder and the
status writer it was given (upstream scheduler.go and the apply half of
schedule_one.go). Event handling is in `eventhandlers`, the algorithms in
`schedule_one` / `schedule_podgroup`, waiting reports in `reporting`.

No I/O happens here: `runtime/` passes a binder and a writer that talk to the
API server, `simulate` and the tests pass ones that record or do nothing.
Everything runs on one asyncio loop, and a cycle (snapshot, algorithm,
decision) has no `await` inside, so no event can change the cache half-way
through a decision.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from functools import partial

from ..api import constants as C
from ..api.composite import COMPOSITE_SCHEDULED, CompositePodGroup, config_error_reason
from ..api.config import SchedulerConfiguration
from ..api.podgroup import PodGroup
from ..api.records import GroupKey, PodInfo
from ..api.sources import MemberCounts, enabled_sources
from ..cluster import tree as trees
from ..cluster.cache import ClusterCache, InvalidObject
from ..cluster.snapshot import Snapshot
from ..framework.framework import Framework
from ..framework.interface import Handle
from ..framework.registry import Registry
from ..queue.scheduling_queue import PoppedUnit, SchedulingQueue, UnitKey, unit_of
from . import metrics
from .eventhandlers import EventHandlers
from .outputs import Binder, CapacityRequester, ClaimLifecycle, NullBinder, NullWriter, StatusWriter
from .reporting import WaitingReporter
from .schedule_podgroup import (
    Assignment,
    GroupDecision,
    Outcome,
    error_decision,
    order_pods,
    schedule_group,
    trial_place,
)
from .schedule_tree import TreeResult, schedule_tree, tree_error

log = logging.getLogger(__name__)

# Backfill onto reserved room: a pod's activeDeadlineSeconds counts from its
# startTime, which its kubelet sets a moment after the bind; this much is
# allowed for that moment.
BACKFILL_START_SECONDS = 5.0


class Scheduler(EventHandlers):
    def __init__(
        self,
        config: SchedulerConfiguration,
        registry: Registry,
        *,
        binder: Binder | None = None,
        writer: StatusWriter | None = None,
        clock: Callable[[], float] = time.monotonic,
        report_delay: float | None = None,
        report_max_delay: float | None = None,
    ) -> None:
        """`binder` / `writer`: where decisions go (default: nowhere).
        `report_delay` / `report_max_delay` override the configuration's
        `waitingReport` (0: report at once, which needs no running loop)."""
        self.config = config
        self.sources = enabled_sources(config.group_sources)
        self.cache = ClusterCache()
        # Preemptors waiting for their victims, and pods nominated to reserved
        # room: uid -> (node, pod). Their room is held in later cycles of other
        # units of no higher priority (as upstream).
        self.nominated: dict[str, tuple[str, PodInfo]] = {}
        self.frameworks: dict[str, Framework] = {}
        for p in config.profiles:
            handle = Handle(self.cache, clock)  # one per profile: `place` runs that profile's plugins
            fwk = self.frameworks[p.scheduler_name] = Framework(p, registry, handle)
            handle.place = partial(trial_place, fwk)
            handle.nominated = self.nominated
        q = config.queue
        self.queue = SchedulingQueue(
            self._gate,
            initial_backoff=q.pod_initial_backoff_seconds,
            max_backoff=q.pod_max_backoff_seconds,
            max_unschedulable=q.max_unschedulable_seconds,
            clock=clock,
        )
        self.binder: Binder = binder if binder is not None else NullBinder()
        self.writer: StatusWriter = writer if writer is not None else NullWriter()
        wr = config.waiting_report
        self.reporter = WaitingReporter(
            self.cache,
            self.queue,
            self.writer,
            self.still_waiting,
            delay=wr.delay_seconds if report_delay is None else report_delay,
            max_delay=wr.max_delay_seconds if report_max_delay is None else report_max_delay,
        )
        self.synced = asyncio.Event()  # the initial listing is in the cache
        self.claim_lifecycle: ClaimLifecycle | None = None  # set by the runtime
        self.capacity: CapacityRequester | None = None  # set by the runtime (and simulate)
        self.gone_pods: OrderedDict[str, None] = OrderedDict()
        self.claim_waiters: dict[tuple[str, str], set[str]] = {}
        self.last_cycle = time.monotonic()
        # Pods reserved by Reserve plugins and not yet bound: uid -> (framework, assignment),
        # so that a failed bind or a deletion runs Unreserve.
        self._reserved: dict[str, tuple[Framework, Assignment]] = {}
        # Nominated pods whose room is a reservation (PostFilter's Reservation):
        # uid -> when the pods in the way on its node end at the latest (wall
        # clock; None: unknown), for backfill; and when it was reserved.
        self.reserved: dict[str, tuple[float | None, float]] = {}
        self.wall: Callable[[], float] = time.time
        # The served Kubernetes (major, minor), set by the runtime (None: not
        # known, as in `troupe simulate`): the reasons a native PodGroup's condition may use.
        self.kube_version: tuple[int, int] | None = None

    def group_and_counts(self, key: GroupKey) -> tuple[PodGroup | None, MemberCounts]:
        """For the status writer: the cached PodGroup and its pods' counts."""
        group = self.cache.groups.get(key)
        return (group if isinstance(group, PodGroup) else None), self.cache.member_counts(key)

    # ---------------------------------------------------------------- gating

    def _gate(self, key: UnitKey, pods: Iterable[PodInfo]) -> str | None:
        """PreEnqueue for a unit: the first pod a plugin holds back holds the unit back."""
        for pod in pods:
            fwk = self.frameworks.get(pod.scheduler_name)
            if fwk is None:
                continue
            status = fwk.run_pre_enqueue(pod)
            if not status.ok:
                self.reporter.held(key, status)
                if self.synced.is_set():  # before, a gate may judge on a partial listing
                    self.release_room(key)
                return status.message
        self.reporter.admitted(key)
        return None

    # ------------------------------------------------------------------ loop

    def start_scheduling(self) -> None:
        """The initial listing is in the cache: gates judged on partial data are
        judged again, and what still waits is reported."""
        self.synced.set()
        self.reporter.enabled = True
        metrics.observe_queue(self.queue)
        metrics.observe_reservations(self.nominated, self.reserved, self.wall)
        for unit in list(self.queue.units()):
            self.queue.activate(unit.key)
            self.reporter.report_if_gated(unit.key)

    async def run(self) -> None:
        await self.synced.wait()
        log.info("cache synced: %d nodes, %d pods; scheduling", self.cache.node_count, len(self.cache.pods))
        self.start_scheduling()  # the queue and reservation gauges are read from here on, when scraped
        while True:
            popped = await self.queue.pop()
            self.last_cycle = time.monotonic()
            self.schedule_unit(popped)
            await asyncio.sleep(0)  # let watch events in between cycles

    def schedule_unit(self, popped: PoppedUnit) -> GroupDecision | None:
        """One cycle for one unit: decide, then apply. None: nothing to decide."""
        start = time.perf_counter()
        fwk: Framework | None = None
        try:
            fwk, decision = self._decide(popped)
        except Exception as exc:  # a bug must not stop the scheduler or lose pods
            log.exception("scheduling %s failed", popped.key)
            pods = [p for p in (self.cache.pods.get(q.uid) for q in popped.pods) if p is not None]
            decision = error_decision(None, pods, f"internal error: {type(exc).__name__}: {exc}")
        if decision is None:
            return None
        self._apply(popped, fwk, decision)
        profile = popped.pods[0].scheduler_name if popped.pods else ""
        metrics.observe_attempt(decision, time.perf_counter() - start, profile)
        return decision

    def _decide(self, popped: PoppedUnit) -> tuple[Framework | None, GroupDecision | None]:
        pods = [p for p in (self.cache.pods.get(q.uid) for q in popped.pods) if p is not None and self.is_pending(p)]
        if not pods:
            self.queue.done(popped.key, [q.uid for q in popped.pods], unschedulable=False)
            return None, None
        if popped.key.is_tree:
            return self._decide_tree(popped, pods)
        group_key = popped.key.group_key
        group: PodGroup | None = None
        placed_nodes: list[str] = []
        if group_key is not None:
            found = self.cache.groups.get(group_key)
            if found is None:
                # Deleted after the unit was admitted: back to waiting.
                self.queue.done(popped.key, [], unschedulable=True)
                self.queue.regate(popped.key)
                self.reporter.report_if_gated(popped.key)
                return None, None
            if isinstance(found, InvalidObject):
                return None, error_decision(group_key, pods, f"{group_key} is invalid: {found.message}")
            group = found
            problem = group.problem or self._template_ref_problem(group)
            if problem:
                return None, error_decision(group_key, pods, problem)
            scheduler_names, placed_nodes = self.cache.member_summary(group_key)
            names = sorted(scheduler_names)
            if len(names) > 1:
                return None, error_decision(
                    group_key,
                    pods,
                    f"pods of {group_key} name different schedulerName values "
                    f"({', '.join(names)}); a group is placed by one scheduler",
                    config_error=True,
                )
        unreadable = _unreadable(group_key, pods)
        if unreadable is not None:
            return None, unreadable
        fwk = self.frameworks[pods[0].scheduler_name]
        ordered = order_pods(pods, popped.first_seen, group.min_per_task if group is not None else None)
        snapshot = self.cache.snapshot()
        backfill_only = self._hold_nominated(snapshot, ordered)
        return fwk, schedule_group(
            fwk, snapshot, group_key, group, ordered, len(placed_nodes), placed_nodes, backfill_only
        )

    def _decide_tree(self, popped: PoppedUnit, pods: list[PodInfo]) -> tuple[Framework | None, GroupDecision | None]:
        """A tree's cycle (core/schedule_tree.py): its root is the unit."""
        root = popped.key.tree_key
        assert root is not None
        tree = self.cache.tree(root)
        top, problem = trees.top_of(self.cache.composites, root)
        if tree is None or (top != root and problem is None):
            # Deleted, or given a parent, after the unit was admitted: back to waiting.
            self.queue.done(popped.key, [], unschedulable=True)
            self.queue.regate(popped.key)
            self.reporter.report_if_gated(popped.key)
            return None, None
        problem = problem or tree.problem or trees.mixed(tree, self.cache.priority_classes)
        if problem:
            return None, tree_error(tree, pods, problem, invalid=True)
        leaves = [leaf.key for leaf in tree.root.leaves()]
        names: set[str] = set()
        placed: dict[GroupKey, list[str]] = {}
        for leaf in leaves:
            leaf_names, placed[leaf] = self.cache.member_summary(leaf)
            names |= leaf_names
        names |= {p.scheduler_name for p in pods}
        if len(names) > 1:
            return None, tree_error(
                tree,
                pods,
                f"pods of {popped.key} name different schedulerName values ({', '.join(sorted(names))}); "
                "a tree is placed by one scheduler",
                config_error=True,
            )
        fwk = self.frameworks[pods[0].scheduler_name]
        pending = self._by_leaf(pods, popped.first_seen)
        snapshot = self.cache.snapshot()
        backfill_only = self._hold_nominated(snapshot, pods)
        # A leaf with a pod troupe cannot count is a SchedulerError, as a leaf with a problem.
        unreadable = {p.group: f"pod {p.key}: {p.problem}" for p in pods if p.problem and p.group is not None}

        def leaf_problem(group: PodGroup) -> str | None:
            return unreadable.get(group.key) or self._template_ref_problem(group)

        return fwk, schedule_tree(
            fwk,
            snapshot,
            tree,
            pending,
            placed,
            bool(fwk.post_filter),
            leaf_problem,
            backfill_only,
            self._own_nominated_rows(snapshot, pods),
        )

    def _by_leaf(self, pods: list[PodInfo], first_seen: dict[str, float]) -> dict[GroupKey, list[PodInfo]]:
        """A tree's waiting pods by leaf PodGroup, each leaf's in its cycle's order."""
        pending: dict[GroupKey, list[PodInfo]] = {}
        for pod in pods:
            if pod.group is not None:
                pending.setdefault(pod.group, []).append(pod)
        for leaf, members in pending.items():
            group = self.cache.groups.get(leaf)
            per_task = group.min_per_task if isinstance(group, PodGroup) else None
            pending[leaf] = order_pods(members, first_seen, per_task)
        return pending

    def _own_nominated_rows(self, snapshot: Snapshot, pods: list[PodInfo]) -> frozenset[int]:
        """The rows of the nodes nominated to `pods` (their unit's own held room)."""
        rows = (snapshot.row.get(self.nominated[p.uid][0]) for p in pods if p.uid in self.nominated)
        return frozenset(row for row in rows if row is not None)

    def _wake_displaced(self, assignments: list[Assignment]) -> None:
        """Pods placed (by higher priority, or beside) on nodes nominated to
        other units: those units are tried again now, so that a reservation
        whose room was taken moves at once rather than at the next cluster
        event (no event comes for room taken by a bind)."""
        nodes = {a.node for a in assignments}
        for node, pod in list(self.nominated.values()):
            if node in nodes:
                self.queue.activate(unit_of(pod))

    def _hold_nominated(self, snapshot: Snapshot, pods: list[PodInfo]) -> list[tuple[int, PodInfo]]:
        """Count the room of other units' nominated pods (waiting for their
        victims or reserved room) as used, unless this unit's priority is
        higher. Returns the reserved room left free for backfill (row, pod):
        held again before PostFilter."""
        if not self.nominated:
            return []
        own = {p.uid for p in pods}
        priority = max(p.priority for p in pods)
        ends = self._backfill_end(pods) if self.reserved else None
        backfill: list[tuple[int, PodInfo]] = []
        holders: dict[UnitKey, int] = {}
        for uid, (node, pod) in self.nominated.items():
            row = snapshot.row.get(node)
            if uid in own or row is None or self._holder_priority(pod, holders) < priority:
                continue
            if ends is not None and uid in self.reserved:
                free_at = self.reserved[uid][0]
                if free_at is not None and ends <= free_at:
                    backfill.append((row, pod))  # these pods end before the reserved room can be free anyway
                    continue
            snapshot.hold(row, pod)
        return backfill

    def _holder_priority(self, pod: PodInfo, known: dict[UnitKey, int]) -> int:
        """The priority of the unit `pod` waits in, as that unit's own cycle
        counts it when it preempts or reserves: the highest of its pods'
        (they share their root's or PodGroup's where one is set). A unit
        whose groups set none holds its room at that, not at each pod's own
        (else a unit of one priority could take the room of another of the
        same). `known`: the units worked out so far in this cycle."""
        unit = unit_of(pod)
        found = known.get(unit)
        if found is None:
            if pod.tree is not None:
                members = [p for leaf in self.cache.leaves_under(pod.tree) for p in self.cache.members(leaf)]
            elif pod.group is not None:
                members = list(self.cache.members(pod.group))
            else:
                members = []
            found = known[unit] = max([pod.priority, *(p.priority for p in members if not p.terminal)])
        return found

    def _backfill_end(self, pods: list[PodInfo]) -> float | None:
        """When all of `pods` will have ended at the latest if bound now (wall
        clock): their activeDeadlineSeconds from now, plus the time a kubelet
        takes to start them; None if any has no deadline."""
        if any(p.active_deadline_seconds is None for p in pods):
            return None
        return self.wall() + BACKFILL_START_SECONDS + max(p.active_deadline_seconds or 0 for p in pods)

    def _template_ref_problem(self, group: PodGroup) -> str | None:
        """A PodGroup that names its Workload template must name one that exists."""
        ref = group.spec.pod_group_template_ref
        if ref is None or ref.workload is None:
            return None
        ns, _, source = group.key
        wl_name, template = ref.workload.workload_name, ref.workload.pod_group_template_name
        where = "spec.podGroupTemplateRef.workload"
        workload = self.cache.workloads.get(GroupKey(ns, wl_name, source))
        if workload is None:
            return f"{where}.workloadName: Workload {ns}/{wl_name} does not exist"
        if isinstance(workload, InvalidObject):
            return f"{where}.workloadName: Workload {ns}/{wl_name} is invalid: {workload.message}"
        if workload.template(template) is None:
            known = ", ".join(t.name for t in workload.spec.pod_group_templates)
            return (
                f"{where}.podGroupTemplateName: Workload {ns}/{wl_name} has no podGroupTemplate "
                f"named {template!r} (it has: {known})"
            )
        return None

    # ----------------------------------------------------------------- apply

    def _apply(self, popped: PoppedUnit, fwk: Framework | None, decision: GroupDecision) -> None:
        # Assume first, all together: the next cycle must see this capacity used.
        assignments = decision.assignments
        for a in assignments:
            self.cache.assume(a.pod.uid, a.node)
            self.drop_nomination(a.pod.uid)
        if self.nominated and assignments:
            self._wake_displaced(assignments)
        if fwk is not None and fwk.reserve:
            for a in assignments:
                if fwk.reserves(a.state):
                    self._reserved[a.pod.uid] = (fwk, a)
        self.queue.done(
            popped.key,
            [a.pod.uid for a in assignments],
            unschedulable=bool(decision.unplaced),
            # An error that names what can fix it (wake_on) waits for that, not a backoff.
            error=decision.outcome is Outcome.SCHEDULER_ERROR and decision.wake_on is None,
            wake_on=decision.wake_on,
            # It holds reserved room, or waits for nodes it asked for (woken as they come).
            reset_backoff=decision.reservation is not None or bool(decision.capacity and decision.capacity.pools),
            retry_within=decision.retry_within,
        )
        if assignments:
            assert fwk is not None
            for a in assignments:
                self.writer.forget_pod(a.pod.uid)
            self.binder.bind(fwk, assignments, self, _pre_bind_floor(decision), self._protection(fwk, decision))
        if decision.preemption_attempted:
            metrics.PREEMPTION_ATTEMPTS.inc()
        if decision.victims:
            self._preempt(decision)
        group = self.cache.groups.get(decision.group_key) if decision.group_key else None
        if isinstance(group, PodGroup):
            self._write_group_status(group, decision)
        if decision.tree is not None:
            self._write_tree_status(decision.tree, bool(decision.assignments))
        self._tell_unplaced(decision)
        self._nominate(decision)
        self._ask_capacity(decision)

    def _protection(self, fwk: Framework, decision: GroupDecision) -> Mapping[str, str] | None:
        """The annotations that keep a gang's or a tree's pods from
        consolidation and scale-down (profile autoscaling.protectRunning):
        evicting one member restarts the whole job. The pods carry them for
        their life; preemption (troupe's) deletes them regardless."""
        if not fwk.protect_running:
            return None
        if decision.tree is not None:
            return C.PROTECT_RUNNING
        group = self.cache.groups.get(decision.group_key) if decision.group_key else None
        if isinstance(group, PodGroup) and group.is_gang and group.min_count > 1:
            return C.PROTECT_RUNNING
        return None

    def _ask_capacity(self, decision: GroupDecision) -> None:
        """New nodes for the unit, asked (or kept asked) while it waits for
        them, withdrawn once it asks no more (bound, or another answer)."""
        unit = decision.tree.root if decision.tree is not None else decision.group_key
        if unit is None:
            return
        plan = decision.capacity
        if plan is not None and plan.pools:
            self.cache.capacity_asked[unit] = plan
            if self.capacity is not None:
                self.capacity.ask(plan)
        elif self.cache.capacity_asked.pop(unit, None) is not None and self.capacity is not None:
            self.capacity.withdraw(unit)

    def unit_waits(self, key: GroupKey) -> bool:
        """The PodGroup or tree root `key` exists and has a pod not bound yet
        (what stands in for it may still be needed)."""
        if key in self.cache.composites:
            members = [p for leaf in self.cache.leaves_under(key) for p in self.cache.members(leaf)]
        elif key in self.cache.groups:
            members = list(self.cache.members(key))
        else:
            return False
        return any(not p.node_name and not p.terminal and not p.deleting for p in members)

    def retry_unit(self, key: GroupKey) -> None:
        """Try the unit of the group (or tree root) `key` again now (the
        capacity asked for it did not come)."""
        self.queue.activate(self.unit_of_asker(key))

    def _tell_unplaced(self, decision: GroupDecision) -> None:
        """Each pod left waiting: PodScheduled=False and a FailedScheduling
        Event. A unit that asked new nodes of an autoscaler (or that none can
        be made for whole) says PodGroupUnschedulable, not Unschedulable:
        autoscalers provision for each Unschedulable pod on its own."""
        for pod, why in decision.unplaced:
            message = why
            if decision.group_key is not None:
                message = f"{decision.group_key}: {why}"
            reason = C.REASON_SCHEDULER_ERROR if _errored(decision, pod) else C.REASON_UNSCHEDULABLE
            if decision.capacity is not None and reason == C.REASON_UNSCHEDULABLE:
                reason = C.REASON_POD_GROUP_UNSCHEDULABLE
            self.writer.pod_unschedulable(pod, message, self.still_waiting(pod.uid), reason)
            self.writer.pod_event(pod, "Warning", C.EVENT_FAILED_SCHEDULING, message, "Scheduling")

    def _preempt(self, decision: GroupDecision) -> None:
        """Carry out what PostFilter chose: DisruptionTarget and delete on each
        victim pod, DisruptionTarget on each PodGroup taken whole."""
        preemptor = decision.preemptor
        scheduler = decision.unplaced[0][0].scheduler_name if decision.unplaced else ""
        if decision.group_key is not None or decision.tree is not None:
            pod_message = f"{scheduler}: preempting to accommodate higher priority {preemptor}"
        else:
            pod_message = f"{scheduler}: preempting to accommodate a higher priority pod"  # upstream's text
        metrics.PREEMPTION_VICTIMS.observe(len(decision.victims))
        log.info("%s preempts %d pod(s): %s", preemptor, len(decision.victims), decision.preemption_message)
        for victim in decision.victims:
            self.writer.preempt_pod(victim, pod_message)
        for key in decision.victim_groups:
            message = f"preempted by {preemptor}, which has a higher priority"
            group = self.cache.groups.get(key)
            if isinstance(group, PodGroup):
                self.writer.group_disrupted(group, message)
            composite = self.cache.composites.get(key)  # a tree taken whole (disruptionMode: all)
            if isinstance(composite, CompositePodGroup):
                self.writer.composite_disrupted(composite, message)

    def _nominate(self, decision: GroupDecision) -> None:
        """The unplaced pods' nominations are what this decision says: new
        ones written, dropped ones cleared (their held room freed)."""
        reservation = decision.reservation
        moved = False
        for pod, _ in decision.unplaced:
            node = decision.nominations.get(pod.uid, "")
            held = self.nominated.get(pod.uid)
            if node:
                self.nominated[pod.uid] = (node, pod)
                if reservation is not None:
                    since = self.reserved.get(pod.uid, (None, self.wall()))[1]
                    self.reserved[pod.uid] = (reservation.free_at.get(node), since)
                else:
                    self.reserved.pop(pod.uid, None)
                if held is None or held[0] != node:
                    moved = True
                    self.writer.nominate(pod, node)
                    if reservation is None:
                        note = f"nominated to node {node}: {decision.preemption_message}"
                        self.writer.pod_event(pod, "Normal", C.EVENT_NOMINATED, note, "Preempting")
            elif held is not None:
                self.drop_nomination(pod.uid)
                self.writer.nominate(pod, "")
        if reservation is not None and moved:  # one Event per reservation chosen, on its group
            group = self.cache.groups.get(decision.group_key) if decision.group_key else None
            root = self.cache.composites.get(decision.tree.root) if decision.tree is not None else None
            if isinstance(root, CompositePodGroup) and root.made_from is not None:
                group = self.cache.groups.get(root.made_from)  # a Volcano PodGroup's sub-groups: on it
            note = decision.preemption_message
            if isinstance(group, PodGroup):
                self.writer.group_event(group, "Normal", C.EVENT_RESERVED, note, "Reserving")
            elif isinstance(root, CompositePodGroup):
                self.writer.composite_event(root, "Normal", C.EVENT_RESERVED, note, "Reserving")
            elif decision.unplaced:
                self.writer.pod_event(decision.unplaced[0][0], "Normal", C.EVENT_RESERVED, note, "Reserving")

    def _write_group_status(self, group: PodGroup, decision: GroupDecision) -> None:
        current = group.condition(C.POD_GROUP_SCHEDULED)
        if decision.scheduled:
            self.writer.group_condition(group, "True", C.REASON_SCHEDULED, decision.message)
        elif current is not None and current.status == "True":
            # Once scheduled, a group stays scheduled (as upstream, and through a
            # resize); pods that do not fit later say so on their own
            # conditions, errors and a gang's waiting increment in events.
            if decision.outcome is Outcome.SCHEDULER_ERROR:
                self.writer.group_event(group, "Warning", C.EVENT_FAILED_SCHEDULING, decision.message, "Scheduling")
            elif group.is_gang and decision.unplaced:
                note = f"{len(decision.unplaced)} more pod(s) wait: {decision.message}"
                self.writer.group_event(group, "Warning", C.EVENT_FAILED_SCHEDULING, note, "Scheduling")
        else:
            reason: str = decision.outcome
            if decision.config_error:  # in the served API's word where it has one (1.38: PodGroupError)
                reason = config_error_reason(group.api_version, self.kube_version)
            self.writer.group_condition(group, "False", reason, decision.message)
            self.writer.group_event(group, "Warning", C.EVENT_FAILED_SCHEDULING, decision.message, "Scheduling")

    def _write_made_root_status(self, key: GroupKey, outcome: Outcome, message: str, placed: bool) -> None:
        """The root of the tree troupe made of a Volcano PodGroup's
        sub-groups is that PodGroup: the tree's word is its status, kept (as
        a CompositePodGroup's) by a later cycle that places nothing."""
        group = self.cache.groups.get(key)
        if not isinstance(group, PodGroup):
            return
        current = group.condition(C.POD_GROUP_SCHEDULED)
        if placed or current is None or current.status != "True":
            self._write_group_status(group, GroupDecision(key, outcome, message))

    def _write_tree_status(self, tree: TreeResult, placed: bool) -> None:
        """Each PodGroup of the tree its own condition; each CompositePodGroup
        CompositePodGroupInitiallyScheduled, which stays True once True (as
        PodGroupInitiallyScheduled; a later cycle that places nothing keeps
        its word), with an Event when it is not."""
        for key, decision in tree.leaves.items():
            group = self.cache.groups.get(key)
            nothing_new = decision.scheduled and not decision.assignments and not decision.unplaced
            made = isinstance(group, PodGroup) and group.made_from is not None  # a Volcano sub-group: no object
            if isinstance(group, PodGroup) and not nothing_new and not made:  # a group placed before keeps its word
                self._write_group_status(group, decision)
        for key, (outcome, message) in tree.composites.items():
            composite = self.cache.composites.get(key)
            if not isinstance(composite, CompositePodGroup):
                continue
            if composite.made_from is not None:  # troupe's own (Volcano sub-groups): no object
                if key == composite.made_from:
                    self._write_made_root_status(key, outcome, message, placed)
                continue
            current = composite.condition(COMPOSITE_SCHEDULED)
            was = current is not None and current.status == "True"
            if outcome is Outcome.SCHEDULED:
                if placed or not was:
                    self.writer.composite_condition(composite, "True", C.REASON_SCHEDULED, message)
            elif not was:
                reason = str(outcome)
                if tree.invalid:
                    reason = composite.invalid_reason
                elif tree.config_error:
                    reason = composite.config_error_reason
                self.writer.composite_condition(composite, "False", reason, message)
                if key == tree.root:
                    self.writer.composite_event(composite, "Warning", C.EVENT_FAILED_SCHEDULING, message, "Scheduling")


def _pre_bind_floor(decision: GroupDecision) -> int:
    """How many of the decision's pods must pass PreBind for any to bind: a
    gang's up to minCount; a tree's, all of them (a tree holds by its groups'
    rules and its CompositePodGroups' minGroupCount at once, so the pods
    placed together bind together or not at all); a lone pod's or a basic
    group's, none."""
    if decision.tree is not None:
        return len(decision.assignments)
    if decision.group_key is not None:
        return max(decision.min_count - decision.placed_before, 0)
    return 0


def _unreadable(group_key: GroupKey | None, pods: list[PodInfo]) -> GroupDecision | None:
    """A unit with a pod troupe cannot count (a request out of range,
    PodInfo.problem) is a SchedulerError that names the field; no cluster
    event fixes it, so it waits for an update of its pods (wake_on: none)."""
    bad = next((p for p in pods if p.problem), None)
    if bad is None:
        return None
    message = f"pod {bad.key}: {bad.problem}"
    unplaced = [(p, p.problem or message) for p in pods]
    return GroupDecision(group_key, Outcome.SCHEDULER_ERROR, message, unplaced=unplaced, wake_on=frozenset())


def _errored(decision: GroupDecision, pod: PodInfo) -> bool:
    """The pod waits for an error (its group's, in a tree its own PodGroup's),
    not for room: PodScheduled=False with reason SchedulerError, as upstream."""
    if decision.tree is not None and pod.group is not None:
        leaf = decision.tree.leaves.get(pod.group)
        if leaf is not None:
            return leaf.outcome is Outcome.SCHEDULER_ERROR
    return decision.outcome is Outcome.SCHEDULER_ERROR
