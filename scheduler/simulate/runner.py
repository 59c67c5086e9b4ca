"""Driving the live scheduler's core from a loaded input, with no cluster.

The objects go through the same `Scheduler` that `troupe run` uses, through
the same handlers the watch calls, in the order of kopf's initial listing (one
kind after another). The scheduler has no binder here: the runner binds each
placed pod the way the cluster would answer (`on_bound`, then the pod coming
back from the watch with `spec.nodeName`). Its status writer is a
`Recorder`, which keeps what a user would read from the cluster: the last
PodGroupScheduled condition of each group and the last PodScheduled message
of each pod. A condition written to a PodGroup comes back to the scheduler as
a watch event too (the scheduler reads it: a Scheduled group stays Scheduled).

Time is a fake clock. When no unit is active, the runner moves the clock past
every backoff and past `maxUnschedulableSeconds` (the periodic flush that
retries an unschedulable group in a cluster), and tries again; it stops after
a round that places nothing. Each productive round binds at least one pod, so
there are at most (pending pods + 1) rounds.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..api import constants as C
from ..api.config import SchedulerConfiguration
from ..api.podgroup import PodGroup
from ..api.records import PodInfo
from ..cluster.cache import InvalidObject
from ..core.schedule_podgroup import GroupDecision
from ..core.scheduler import Scheduler
from ..framework.registry import Registry
from .loader import SimulationInput

# Objects in the order kopf's initial listing hands them over (a kind at a time).
FEED_ORDER = ("Namespace", "Node", "PriorityClass", "Workload", "PodGroup", "Pod")
# Between two pods, so that first-seen order is file order (as `kubectl apply` creates them).
POD_SPACING_SECONDS = 0.001


class FakeClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


@dataclass(frozen=True, slots=True)
class GroupCondition:
    status: str  # "True" | "False"
    reason: str
    message: str


class Recorder:
    """The scheduler's status writer (`StatusWriter` in scheduler/core/outputs.py),
    keeping the last word per object instead of writing it."""

    def __init__(self) -> None:
        self.groups: dict[tuple[str, str], GroupCondition] = {}
        self.pods: dict[str, str] = {}  # uid -> PodScheduled=False message
        self.nominated: dict[str, str] = {}  # uid -> status.nominatedNodeName
        self.status_writes: list[tuple[tuple[str, str], GroupCondition]] = []  # to feed back, in order
        self.preempted: dict[str, str] = {}  # victim uid -> DisruptionTarget message (deleted by the runner)
        self.disrupted: dict[tuple[str, str], str] = {}  # victim PodGroup -> DisruptionTarget message

    def group_condition(self, group: PodGroup, status: str, reason: str, message: str) -> None:
        cond = GroupCondition(status, reason, message)
        self.groups[group.key] = cond
        self.status_writes.append((group.key, cond))

    def pod_unschedulable(self, pod: PodInfo, message: str, still_waiting: Callable[[], bool] | None = None) -> None:
        if still_waiting is None or still_waiting():
            self.pods[pod.uid] = message

    def pod_event(self, pod: PodInfo, type_: str, reason: str, note: str, action: str) -> None:
        pass  # events repeat the conditions

    def group_event(self, group: PodGroup, type_: str, reason: str, note: str, action: str) -> None:
        pass

    def nominate(self, pod: PodInfo, node: str) -> None:
        self.nominated[pod.uid] = node

    def forget_pod(self, uid: str) -> None:
        self.pods.pop(uid, None)  # bound: the condition is the kubelet's now

    def preempt_pod(self, victim: PodInfo, message: str) -> None:
        self.preempted[victim.uid] = message

    def group_disrupted(self, group: PodGroup, message: str) -> None:
        self.disrupted[group.key] = message


@dataclass(frozen=True, slots=True)
class PodResult:
    namespace: str
    name: str
    group: str | None  # the PodGroup label
    node: str | None  # None: not placed
    message: str  # why it is not placed, or what it was before the simulation
    placed: bool  # placed by this simulation
    running_before: bool  # had spec.nodeName in the input
    finished: bool  # phase Succeeded or Failed: not pending, uses no room
    preempted_by: str | None = None  # evicted for this preemptor ("PodGroup ns/name" or "pod ns/name")


@dataclass(frozen=True, slots=True)
class GroupResult:
    namespace: str
    name: str
    policy: str | None  # "basic" | "gang"; None when the PodGroup is invalid
    min_count: int | None
    pods: int  # members in the input that can still run (not Succeeded/Failed)
    placed: int  # of those, bound (before or by the simulation)
    condition: GroupCondition | None  # None: the group got no condition (no pods)
    victims: tuple[str, ...] = ()  # pods (ns/name) this group's preemption evicted
    preempted_by: str | None = None  # taken whole by this preemptor (DisruptionTarget)
    placement: str | None = None  # the domain its last placing cycle chose (`key=value`), if any

    @property
    def scheduled(self) -> bool:
        return self.condition is not None and self.condition.status == "True"


@dataclass(slots=True)
class SimulationResult:
    pods: list[PodResult]
    groups: list[GroupResult]
    rounds: int
    warnings: list[str] = field(default_factory=list)


def simulate(inp: SimulationInput, config: SchedulerConfiguration, registry: Registry) -> SimulationResult:
    """Runs the scheduler over the input to a fixed point. Costs what the
    scheduler costs: one group cycle per unit per round."""
    clock = FakeClock()
    recorder = Recorder()
    # The default binder binds nothing: binding is done below, as the cluster
    # would; reports are written at once (the fake clock has no timers).
    sched = Scheduler(config, registry, writer=recorder, clock=clock, report_delay=0)
    groups = {(o.namespace, o.name): o.body for o in inp.of_kind("PodGroup")}
    pod_bodies: dict[str, dict[str, Any]] = {}
    warnings = list(inp.warnings)

    handlers = {
        "Namespace": sched.on_namespace,
        "Node": sched.on_node,
        "PriorityClass": sched.on_priority_class,
        "Workload": sched.on_workload,
        "PodGroup": sched.on_podgroup,
        "Pod": sched.on_pod,
    }
    for kind in FEED_ORDER:
        for obj in inp.of_kind(kind):
            if kind == "Pod":
                pod_bodies[obj.body["metadata"]["uid"]] = obj.body
                clock.now += POD_SPACING_SECONDS
            handlers[kind](obj.body)

    for obj in inp.of_kind("Pod"):
        pod = sched.cache.pods[obj.body["metadata"]["uid"]]
        if not pod.node_name and not pod.terminal and not sched.is_ours(pod):
            warnings.append(
                f"{inp.source}: {obj.label}: warning: schedulerName {pod.scheduler_name} is not a profile of this "
                f"configuration ({', '.join(sorted(sched.frameworks))}): nothing places it"
            )

    def feed_back_status() -> None:
        """The status writes come back through the PodGroup watch."""
        writes, recorder.status_writes = recorder.status_writes, []
        for key, cond in writes:
            body = copy.deepcopy(groups[key])
            conditions = [
                c for c in (body.get("status") or {}).get("conditions") or [] if c.get("type") != C.POD_GROUP_SCHEDULED
            ]
            conditions.append(
                {"type": C.POD_GROUP_SCHEDULED, "status": cond.status, "reason": cond.reason, "message": cond.message}
            )
            body["status"] = {**(body.get("status") or {}), "conditions": conditions}
            groups[key] = body
            sched.on_podgroup(body)

    # The cache is synced: as Scheduler.run() does before its loop, judge every
    # gate again and say why the gated units wait.
    sched.start_scheduling()
    feed_back_status()

    placed: set[str] = set()
    preemption = Preemptions()
    rounds = 0
    # Each round places a pod or evicts one (victims are never recreated), so this bounds it.
    placements: dict[tuple[str, str], str] = {}
    for _ in range(2 * len(pod_bodies) + 1):
        rounds += 1
        placed_now = 0
        while (popped := sched.queue.pop_nowait()) is not None:
            decision = sched.schedule_unit(popped)
            if decision is None:
                continue
            feed_back_status()
            # Victims terminate and go, as the cluster's kubelets would finish them.
            placed_now += preemption.evict(sched, decision)
            key = decision.group_key
            if key is not None and isinstance(sched.cache.groups.get(key), InvalidObject):
                # No status is written to a PodGroup the scheduler cannot read; in a
                # cluster its pods say why. The simulation shows it on the group.
                recorder.groups[key] = GroupCondition("False", decision.outcome, decision.message)
            if key is not None and decision.assignments and decision.placement:
                placements[key] = decision.placement
            for a in decision.assignments:
                uid = a.pod.uid
                sched.on_bound(a.pod, a.node)
                body = copy.deepcopy(pod_bodies[uid])
                body["spec"]["nodeName"] = a.node
                pod_bodies[uid] = body
                sched.on_pod(body)
                placed.add(uid)
                placed_now += 1
        if placed_now == 0:
            break
        # Past every backoff and the unschedulable flush: everything left is retried.
        q = config.queue
        clock.now += max(q.pod_max_backoff_seconds, q.max_unschedulable_seconds) + 1.0

    return SimulationResult(
        _pod_results(inp, sched, recorder, placed, preemption),
        _group_results(inp, sched, recorder, preemption, placements),
        rounds,
        warnings,
    )


class Preemptions:
    """Victims evicted during the simulation, and by whom."""

    def __init__(self) -> None:
        self.by: dict[str, str] = {}  # victim uid -> preemptor
        self.victims: dict[str, list[str]] = {}  # preemptor -> victims (ns/name)
        self.groups: dict[tuple[str, str], str] = {}  # victim PodGroup -> preemptor

    def evict(self, sched: Scheduler, decision: GroupDecision) -> int:
        if not decision.victims:
            return 0
        preemptor = decision.preemptor
        for victim in decision.victims:
            self.by[victim.uid] = preemptor
            self.victims.setdefault(preemptor, []).append(victim.key)
            sched.on_pod_deleted({"metadata": {"namespace": victim.namespace, "name": victim.name, "uid": victim.uid}})
        for key in decision.victim_groups:
            self.groups[key] = preemptor
        return len(decision.victims)


def _pod_results(
    inp: SimulationInput, sched: Scheduler, recorder: Recorder, placed: set[str], preemption: Preemptions
) -> list[PodResult]:
    out = []
    for obj in inp.of_kind("Pod"):
        uid = obj.body["metadata"]["uid"]
        if uid in preemption.by:
            meta = obj.body["metadata"]
            group = (meta.get("labels") or {}).get(C.POD_GROUP_LABEL)
            by = preemption.by[uid]
            out.append(PodResult(obj.namespace, obj.name, group, None, f"preempted by {by}", False, True, False, by))
            continue
        pod = sched.cache.pods[uid]
        node = sched.cache.placed_node(uid) or None
        running_before = bool(obj.body.get("spec", {}).get("nodeName")) and uid not in placed
        if pod.terminal:
            message = f"phase {pod.phase}: uses no room"
        elif running_before:
            message = "running before the simulation"
        elif node is None and not sched.is_ours(pod):
            message = f"schedulerName {pod.scheduler_name}: not placed by this scheduler"
        elif node is None:
            message = recorder.pods.get(uid, "")
        else:
            message = ""
        out.append(
            PodResult(
                pod.namespace, pod.name, pod.group_name, node, message, uid in placed, running_before, pod.terminal
            )
        )
    return sorted(out, key=lambda p: (p.namespace, p.name))


def _group_results(
    inp: SimulationInput,
    sched: Scheduler,
    recorder: Recorder,
    preemption: Preemptions,
    placements: dict[tuple[str, str], str],
) -> list[GroupResult]:
    out = []
    for obj in inp.of_kind("PodGroup"):
        key = (obj.namespace, obj.name)
        group = sched.cache.groups.get(key)
        members = [p for p in sched.cache.members(key) if not p.terminal]
        placed = sum(1 for p in members if sched.cache.placed_node(p.uid))
        condition = recorder.groups.get(key)
        policy = min_count = None
        if isinstance(group, PodGroup):
            policy = "gang" if group.is_gang else "basic"
            min_count = group.min_count
            if condition is None:
                # Nothing was decided in the simulation: what the object already says.
                own = group.condition(C.POD_GROUP_SCHEDULED)
                if own is not None:
                    condition = GroupCondition(own.status, own.reason, own.message)
        out.append(
            GroupResult(
                obj.namespace,
                obj.name,
                policy,
                min_count,
                len(members),
                placed,
                condition,
                tuple(preemption.victims.get(f"PodGroup {obj.namespace}/{obj.name}", ())),
                preemption.groups.get(key),
                placements.get(key),
            )
        )
    return sorted(out, key=lambda g: (g.namespace, g.name))
