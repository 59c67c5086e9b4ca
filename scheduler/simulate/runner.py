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

DRA objects go to the scheduler too. What troupe's claim writer would write
to the API is done by `Claims` on the claim bodies of the input, each written
claim coming back through the watch: PreBind's allocation and `reservedFor`
for each placed pod, the claims a PodGroup makes from its templates (with its
`status.resourceClaimStatuses`), and the release of a claim whose consumer is
gone (a preemption victim's devices are free for the preemptor).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from ..api import constants as C
from ..api.composite import COMPOSITE_KIND, COMPOSITE_SCHEDULED, REASON_INVALID, CompositePodGroup
from ..api.config import SchedulerConfiguration
from ..api.dra import (
    API_VERSION,
    DELETE_PROTECTION_FINALIZER,
    POD_CLAIM_NAME_ANNOTATION,
    Allocation,
    ConsumerRef,
    ResourceClaim,
    group_claim_name,
)
from ..api.nodepool import CapacityPlan
from ..api.podgroup import PodGroup
from ..api.records import GroupKey, NodeInfo, PodInfo
from ..api.sources import export_conditions, has_object, is_implied, pod_group
from ..cluster.cache import InvalidObject
from ..core.eventhandlers import group_key_of
from ..core.schedule_podgroup import GroupDecision
from ..core.scheduler import Scheduler
from ..framework.registry import Registry
from .loader import SimulationInput, claim_uid

# Objects in the order kopf's initial listing hands them over (a kind at a time).
# ResourceClaimTemplates are not watched: `Claims` reads them when a PodGroup needs one.
FEED_ORDER = (
    "Namespace",
    "Node",
    "NodePool",
    "PriorityClass",
    "DeviceClass",
    "ResourceSlice",
    "DeviceTaintRule",
    "ResourceClaim",
    "Workload",
    "CompositePodGroup",
    "PodGroup",
    "Pod",
)
ClaimKey = tuple[str, str]  # (namespace, name)
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
        self.groups: dict[GroupKey, GroupCondition] = {}
        self.composites: dict[GroupKey, GroupCondition] = {}  # CompositePodGroupInitiallyScheduled
        self.composite_writes: list[tuple[GroupKey, GroupCondition]] = []  # to feed back, in order
        self.disrupted_composites: dict[GroupKey, str] = {}  # victim CompositePodGroup -> DisruptionTarget message
        self.pods: dict[str, str] = {}  # uid -> PodScheduled=False message
        self.nominated: dict[str, str] = {}  # uid -> status.nominatedNodeName
        self.status_writes: list[tuple[GroupKey, GroupCondition]] = []  # to feed back, in order
        self.preempted: dict[str, str] = {}  # victim uid -> DisruptionTarget message (deleted by the runner)
        self.disrupted: dict[GroupKey, str] = {}  # victim PodGroup -> DisruptionTarget message
        self.group_notes: dict[GroupKey, str] = {}  # PodGroup -> its last FailedScheduling Event's note
        self.node_events: list[tuple[str, str, str]] = []  # (node, reason, note), in order

    def group_condition(self, group: PodGroup, status: str, reason: str, message: str) -> None:
        if group.made_from is not None:
            return  # a Volcano sub-group troupe made: its PodGroup says it
        cond = GroupCondition(status, reason, message)
        self.groups[group.key] = cond
        if has_object(group.api_version):  # a group made of its pods' labels (Kueue) has no status to feed back
            self.status_writes.append((group.key, cond))

    def group_members(self, group: PodGroup) -> None:
        pass  # a source's pod counts: the output's pods say them

    def composite_condition(self, composite: CompositePodGroup, status: str, reason: str, message: str) -> None:
        if composite.made_from is not None:
            return  # troupe's own (a Volcano PodGroup's sub-groups): its PodGroup says it
        cond = GroupCondition(status, reason, message)
        self.composites[composite.key] = cond
        self.composite_writes.append((composite.key, cond))

    def composite_event(self, composite: CompositePodGroup, type_: str, reason: str, note: str, action: str) -> None:
        pass

    def composite_disrupted(self, composite: CompositePodGroup, message: str) -> None:
        self.disrupted_composites[composite.key] = message

    def pod_unschedulable(
        self,
        pod: PodInfo,
        message: str,
        still_waiting: Callable[[], bool] | None = None,
        reason: str = "Unschedulable",
    ) -> None:
        if still_waiting is None or still_waiting():
            self.pods[pod.uid] = message

    def pod_waiting(self, pod: PodInfo, message: str, still_waiting: Callable[[], bool] | None = None) -> None:
        """(The API holds no condition for it; the output still says why.)"""
        self.pod_unschedulable(pod, message, still_waiting)

    def pod_event(self, pod: PodInfo, type_: str, reason: str, note: str, action: str) -> None:
        pass  # events repeat the conditions

    def group_event(self, group: PodGroup, type_: str, reason: str, note: str, action: str) -> None:
        if reason == C.EVENT_FAILED_SCHEDULING:  # a scheduled group's increment that waits: its condition stays
            self.group_notes[group.key] = note

    def node_event(self, node: NodeInfo, type_: str, reason: str, note: str, action: str) -> None:
        self.node_events.append((node.name, reason, note))  # the loader refuses such nodes; the unit tests read these

    def nominate(self, pod: PodInfo, node: str) -> None:
        self.nominated[pod.uid] = node

    def forget_pod(self, uid: str) -> None:
        self.pods.pop(uid, None)  # bound: the condition is the kubelet's now

    def preempt_pod(self, victim: PodInfo, message: str) -> None:
        self.preempted[victim.uid] = message

    def group_disrupted(self, group: PodGroup, message: str) -> None:
        self.disrupted[group.key] = message


class CapacityAsked:
    """The simulation's CapacityRequester: what troupe would ask autoscalers
    for, unit by unit (its stand-in pods, in a cluster)."""

    def __init__(self) -> None:
        self.plans: dict[GroupKey, CapacityPlan] = {}

    def ask(self, plan: CapacityPlan) -> None:
        self.plans[plan.unit] = plan

    def withdraw(self, unit: GroupKey) -> None:
        self.plans.pop(unit, None)


@dataclass(frozen=True, slots=True)
class DeviceResult:
    """A device allocated to one of a pod's claims (`status.allocation.devices.results[]`)."""

    claim: str  # the ResourceClaim, in the pod's namespace
    request: str
    driver: str
    pool: str
    device: str

    @property
    def path(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


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
    uses_claims: bool = False  # has spec.resourceClaims
    devices: tuple[DeviceResult, ...] = ()  # of its claims, while it has a node


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
    api_group: str = C.GROUP  # of its kind (GroupKey.source): troupe's, scheduling.k8s.io, scheduling.x-k8s.io, ...
    workload: str | None = None  # "<workload>/<template>" a native PodGroup names (display only)
    parent: str | None = None  # spec.parentCompositePodGroupName: the CompositePodGroup it is a child of
    # A tree's leaf that got no condition (its tree waits for a missing
    # ancestor or for its quorum): what its pods were told.
    waiting: str = ""
    shrunk: tuple[tuple[str, int], ...] = ()  # (preemptor, pods) it lost without being taken whole

    @property
    def scheduled(self) -> bool:
        return self.condition is not None and self.condition.status == "True"


@dataclass(frozen=True, slots=True)
class CompositeResult:
    """A CompositePodGroup and its CompositePodGroupInitiallyScheduled condition."""

    namespace: str
    name: str
    parent: str | None  # spec.parentCompositePodGroupName; None: a root
    policy: str | None  # "basic" | "gang"; None when the CompositePodGroup is invalid
    min_group_count: int | None  # a basic one: 1
    children: int  # PodGroups and CompositePodGroups that name it as their parent
    # Of those, placed at the end: a PodGroup with minCount pods bound (a basic
    # one: 1), a CompositePodGroup with minGroupCount children placed.
    placed: int
    pods: int  # pods of the input in its tree below it that can still run
    condition: GroupCondition | None  # None: it got no condition
    api_group: str = C.GROUP
    victims: tuple[str, ...] = ()  # pods (ns/name) its tree's preemption evicted (a root's)
    preempted_by: str | None = None  # its tree taken whole by this preemptor (disruptionMode: all; DisruptionTarget)

    @property
    def scheduled(self) -> bool:
        return self.condition is not None and self.condition.status == "True"


@dataclass(slots=True)
class SimulationResult:
    pods: list[PodResult]
    groups: list[GroupResult]
    rounds: int
    warnings: list[str] = field(default_factory=list)
    composites: list[CompositeResult] = field(default_factory=list)
    capacity: list[CapacityPlan] = field(default_factory=list)  # new nodes asked for units still waiting


def simulate(
    inp: SimulationInput, config: SchedulerConfiguration, registry: Registry, waited: float = 0.0
) -> SimulationResult:
    """Runs the scheduler over the input to a fixed point. Costs what the
    scheduler costs: one group cycle per unit per round. With `waited`, what
    still waits then gets one more cycle that many seconds later (a group
    that starves gets its reservation)."""
    run = _Simulation(inp, config, registry)
    run.feed(inp)
    warnings = list(inp.warnings) + run.not_ours_warnings(inp)
    run.start()
    rounds = 0
    q = config.queue
    # Each round places a pod or evicts one (victims are never recreated), so this bounds it.
    for _ in range(2 * len(run.pod_bodies) + 1):
        rounds += 1
        if run.one_round() == 0:
            break
        # Past every backoff and the unschedulable flush: everything left is retried.
        run.clock.now += max(q.pod_max_backoff_seconds, q.max_unschedulable_seconds) + 1.0
    if waited > 0:
        rounds += 1
        run.wait(waited)
    groups = _group_results(inp, run.sched, run.recorder, run.preemption, run.placements)
    return SimulationResult(
        _pod_results(inp, run.sched, run.recorder, run.placed, run.preemption),
        groups,
        rounds,
        warnings,
        _composite_results(inp, run.sched, run.recorder, groups, run.preemption),
        sorted(run.capacity.plans.values(), key=lambda p: (p.unit.namespace, p.unit.name)),
    )


class _Simulation:
    """The scheduler of one simulation, and the cluster around it: the fake
    clocks, the watch that hands it the input, and what the API and the
    kubelets would answer to its decisions (binds, status written back,
    claims, victims gone)."""

    def __init__(self, inp: SimulationInput, config: SchedulerConfiguration, registry: Registry) -> None:
        self.clock = FakeClock()
        self.recorder = Recorder()
        # The default binder binds nothing: binding is done below, as the cluster
        # would; reports are written at once (the fake clock has no timers).
        self.sched = Scheduler(config, registry, writer=self.recorder, clock=self.clock, report_delay=0)
        self.capacity = CapacityAsked()
        self.sched.capacity = self.capacity
        # Plugins that measure waiting (Reservation) see time pass only as
        # `waited` says: the rounds are retries, not time a user waits.
        self.waiting_clock = FakeClock()
        for fwk in self.sched.frameworks.values():
            fwk.handle.clock = self.waiting_clock
        self.groups = {group_key_of(o.body): o.body for o in inp.of_kind("PodGroup")}
        self.composite_bodies = {group_key_of(o.body): o.body for o in inp.of_kind(COMPOSITE_KIND)}
        templates = {(o.namespace, o.name): o.body for o in inp.of_kind("ResourceClaimTemplate")}
        self.claims = Claims(self.sched, self.groups, templates)
        self.sched.claim_lifecycle = self.claims
        self.pod_bodies: dict[str, dict[str, Any]] = {}
        self.placed: set[str] = set()
        self.preemption = Preemptions()
        self.placements: dict[GroupKey, str] = {}

    def feed(self, inp: SimulationInput) -> None:
        """The input through the handlers the watch calls, in the order of kopf's initial listing."""
        sched = self.sched
        handlers = {
            "Namespace": sched.on_namespace,
            "Node": sched.on_node,
            "NodePool": sched.on_nodepool,
            "PriorityClass": sched.on_priority_class,
            "Workload": sched.on_workload,
            "CompositePodGroup": sched.on_composite,
            "PodGroup": sched.on_podgroup,
            "Pod": sched.on_pod,
            "DeviceClass": sched.on_device_class,
            "ResourceSlice": sched.on_resource_slice,
            "DeviceTaintRule": sched.on_device_taint_rule,
            "ResourceClaim": self.claims.add,
        }
        for kind in FEED_ORDER:
            for obj in inp.of_kind(kind):
                if kind == "Pod":
                    self.pod_bodies[obj.body["metadata"]["uid"]] = obj.body
                    self.clock.now += POD_SPACING_SECONDS
                handlers[kind](obj.body)

    def not_ours_warnings(self, inp: SimulationInput) -> list[str]:
        """A pending pod that names no profile of the configuration: nothing places it."""
        warnings = []
        for obj in inp.of_kind("Pod"):
            pod = self.sched.cache.pods[obj.body["metadata"]["uid"]]
            if not pod.node_name and not pod.terminal and not self.sched.is_ours(pod):
                warnings.append(
                    f"{inp.source}: {obj.label}: warning: schedulerName {pod.scheduler_name} is not a profile of this "
                    f"configuration ({', '.join(sorted(self.sched.frameworks))}): nothing places it"
                )
        return warnings

    def start(self) -> None:
        """The cache is synced: as the runtime does, release what pods not in the
        input hold and make the PodGroups' claims; then, as Scheduler.run() does
        before its loop, judge every gate again and say why the gated units wait."""
        self.sched.synced.set()
        self.sched.sweep_claims()
        self.claims.settle()
        self.sched.start_scheduling()
        self.feed_back_status()
        self.claims.settle()

    def feed_back_status(self) -> None:
        """The status writes come back through the PodGroup watch."""
        writes, self.recorder.status_writes = self.recorder.status_writes, []
        for key, cond in writes:
            body = copy.deepcopy(self.groups[key])
            # In the vocabulary of the body's kind and version, as the runtime writes it.
            (written,) = export_conditions(
                str(body.get("apiVersion") or ""),
                [
                    {
                        "type": C.POD_GROUP_SCHEDULED,
                        "status": cond.status,
                        "reason": cond.reason,
                        "message": cond.message,
                    }
                ],
            )
            conditions = [
                c for c in (body.get("status") or {}).get("conditions") or [] if c.get("type") != written["type"]
            ]
            conditions.append(written)
            body["status"] = {**(body.get("status") or {}), "conditions": conditions}
            self.groups[key] = body
            self.sched.on_podgroup(body)
        composite_writes, self.recorder.composite_writes = self.recorder.composite_writes, []
        for key, cond in composite_writes:  # CompositePodGroupInitiallyScheduled, likewise
            body = copy.deepcopy(self.composite_bodies[key])
            written = {
                "type": COMPOSITE_SCHEDULED,
                "status": cond.status,
                "reason": cond.reason,
                "message": cond.message,
            }
            conditions = [
                c for c in (body.get("status") or {}).get("conditions") or [] if c.get("type") != COMPOSITE_SCHEDULED
            ]
            body["status"] = {**(body.get("status") or {}), "conditions": [*conditions, written]}
            self.composite_bodies[key] = body
            self.sched.on_composite(body)

    def one_round(self) -> int:
        """Every unit that is due gets its cycle; returns how many pods were placed or evicted."""
        placed_now = 0
        while (popped := self.sched.queue.pop_nowait()) is not None:
            decision = self.sched.schedule_unit(popped)
            if decision is None:
                continue
            self.feed_back_status()
            # Victims terminate and go, as the cluster's kubelets would finish them.
            placed_now += self.preemption.evict(self.sched, decision)
            self._record(decision)
            placed_now += self._bind(decision)
            self.claims.settle()
        return placed_now

    def _record(self, decision: GroupDecision) -> None:
        """What the output shows of a group's decision beyond its status."""
        tree = decision.tree
        if tree is not None:
            for leaf in tree.leaves.values():  # each of its PodGroups' domain
                if leaf.group_key is not None and leaf.assignments and leaf.placement:
                    self.placements[leaf.group_key] = leaf.placement
            for at, (outcome, message) in tree.composites.items():
                if isinstance(self.sched.cache.composites.get(at), InvalidObject):
                    # As for an invalid PodGroup (below): shown on it, not written.
                    reason = REASON_INVALID if tree.invalid else str(outcome)
                    self.recorder.composites[at] = GroupCondition("False", reason, message)
        key = decision.group_key
        if key is None:
            return
        if isinstance(self.sched.cache.groups.get(key), InvalidObject):
            # No status is written to a PodGroup the scheduler cannot read; in a
            # cluster its pods say why. The simulation shows it on the group.
            self.recorder.groups[key] = GroupCondition("False", decision.outcome, decision.message)
        if decision.assignments and decision.placement:
            self.placements[key] = decision.placement

    def _bind(self, decision: GroupDecision) -> int:
        """PreBind's claim writes for all the decision's pods, then each bound
        and back from the watch with its node, as the cluster would answer."""
        for a in decision.assignments:
            for claim_key, consumer in claims_of(self.sched, a.pod):
                self.claims.reserve(claim_key, consumer)
        for a in decision.assignments:
            uid = a.pod.uid
            self.sched.on_bound(a.pod, a.node)
            body = copy.deepcopy(self.pod_bodies[uid])
            body["spec"]["nodeName"] = a.node
            self.pod_bodies[uid] = body
            self.sched.on_pod(body)
            self.placed.add(uid)
        return len(decision.assignments)

    def wait(self, waited: float) -> None:
        """What still waits, `waited` seconds later: one more cycle each shows
        the room a reservation holds for a group that starves."""
        self.clock.now += waited
        self.waiting_clock.now += waited
        for unit in list(self.sched.queue.units()):
            self.sched.queue.activate(unit.key)
        self.one_round()


class Preemptions:
    """Victims evicted during the simulation, and by whom."""

    def __init__(self) -> None:
        self.by: dict[str, str] = {}  # victim uid -> preemptor
        self.victims: dict[str, list[str]] = {}  # preemptor -> victims (ns/name)
        self.groups: dict[GroupKey, str] = {}  # victim PodGroup -> preemptor
        # A PodGroup that lost pods without being taken whole (shrink before
        # kill, disruptionMode Pod) -> preemptor -> how many.
        self.shrunk: dict[GroupKey, dict[str, int]] = {}

    def evict(self, sched: Scheduler, decision: GroupDecision) -> int:
        if not decision.victims:
            return 0
        preemptor = decision.preemptor
        for victim in decision.victims:
            self.by[victim.uid] = preemptor
            if victim.group is not None and victim.group not in decision.victim_groups:
                lost = self.shrunk.setdefault(victim.group, {})
                lost[preemptor] = lost.get(preemptor, 0) + 1
            self.victims.setdefault(preemptor, []).append(victim.key)
            sched.on_pod_deleted({"metadata": {"namespace": victim.namespace, "name": victim.name, "uid": victim.uid}})
        for key in decision.victim_groups:
            self.groups[key] = preemptor
        return len(decision.victims)


class Claims:
    """The claim bodies of the simulation, written as troupe's claim writer
    and the API would write them; each write comes back to the scheduler
    through the watch (`on_resource_claim`, `on_podgroup`).

    It is the scheduler's `ClaimLifecycle` (scheduler/core/outputs.py). As in
    the runtime, where those are background tasks, what the scheduler asks
    is done after the handler that asked returns: the runner `settle()`s
    the requests between steps. `reserve` is PreBind's write, done at once."""

    def __init__(
        self, sched: Scheduler, groups: dict[GroupKey, dict[str, Any]], templates: dict[ClaimKey, dict[str, Any]]
    ) -> None:
        self.sched = sched
        self.bodies: dict[ClaimKey, dict[str, Any]] = {}
        self.groups = groups  # PodGroup bodies, shared with the runner's status writes
        self.templates = templates  # ResourceClaimTemplates of the input
        self._todo: list[Callable[[], None]] = []

    def add(self, body: dict[str, Any]) -> None:
        """A claim created (in the input, or from a template)."""
        meta = body["metadata"]
        self.bodies[(meta["namespace"], meta["name"])] = body
        self.sched.on_resource_claim(body)

    def _write(self, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        meta["resourceVersion"] = str(int(meta.get("resourceVersion") or 0) + 1)
        self.add(body)

    def settle(self) -> None:
        """Carries out the requests, and those they lead to."""
        while self._todo:
            todo, self._todo = self._todo, []
            for step in todo:
                step()

    # --------------------------------------------------------- PreBind

    def reserve(self, key: ClaimKey, consumer: ConsumerRef) -> None:
        """The allocation Reserve assumed, and `consumer` in `reservedFor`
        (with troupe's delete-protection finalizer), as PreBind writes them."""
        claim = self.sched.cache.dra.claims.get(key)
        body = self.bodies.get(key)
        if claim is None or body is None:
            return
        if claim.allocation is not None and any(r.uid == consumer.uid for r in claim.reserved_for):
            return  # written already (a claim the group's pods share)
        allocation = self.sched.cache.dra.assumed.get(key) if claim.allocation is None else None
        if claim.allocation is None and allocation is None:
            return  # nothing was allocated: nothing to write
        self._write(_reserved(body, allocation, consumer))

    # -------------------------------------------------- ClaimLifecycle

    def release(self, claim: ResourceClaim, uid: str) -> None:
        self._todo.append(partial(self._release, claim.key, uid))

    def make_group_claims(self, group: PodGroup, entries: Sequence[tuple[str, str]]) -> None:
        self._todo.append(partial(self._make_group_claims, group.key, tuple(entries)))

    def delete_group_claims(self, group_uid: str, claims: Sequence[ResourceClaim]) -> None:
        for claim in claims:
            self._todo.append(partial(self._delete, claim.key, group_uid))

    def _release(self, key: ClaimKey, uid: str) -> None:
        """`uid` out of `reservedFor`; a claim reserved for no one is
        deallocated and loses the finalizer (the runtime's `_release_once`)."""
        current = self.bodies.get(key)
        if current is None:
            return
        body = copy.deepcopy(current)
        meta = body["metadata"]
        status = body.get("status") or {}
        reserved = status.get("reservedFor") or []
        kept = [r for r in reserved if r.get("uid") != uid]
        finalizers = meta.get("finalizers") or []
        if len(kept) == len(reserved) and (kept or DELETE_PROTECTION_FINALIZER not in finalizers):
            return
        if kept:
            status["reservedFor"] = kept
        else:
            status.pop("reservedFor", None)
            if len(kept) != len(reserved):
                status.pop("allocation", None)
            meta["finalizers"] = [f for f in finalizers if f != DELETE_PROTECTION_FINALIZER]
            if not meta["finalizers"]:
                del meta["finalizers"]
        body["status"] = status
        self._write(body)

    def _delete(self, key: ClaimKey, group_uid: str) -> None:
        self._release(key, group_uid)
        body = self.bodies.pop(key, None)
        if body is not None:
            self.sched.on_resource_claim(body, deleted=True)

    def _make_group_claims(self, key: GroupKey, entries: tuple[tuple[str, str], ...]) -> None:
        """Each entry's claim, `<group>-<entry>` from its template, and the
        names in the PodGroup's `status.resourceClaimStatuses`. A missing
        template, or a claim of that name that is not the group's, leaves
        the entry waiting (the loader warned)."""
        group = self.groups.get(key)
        if group is None:
            return
        status = group.get("status") or {}
        recorded = {str(s.get("name")): s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or ()}
        before = dict(recorded)
        for entry, template_name in entries:
            claim_name = self._group_claim(key, group, entry, template_name)
            if claim_name is not None:
                recorded[entry] = claim_name
        if recorded != before:
            body = copy.deepcopy(group)
            statuses = [{"name": n, **({"resourceClaimName": c} if c else {})} for n, c in recorded.items()]
            body["status"] = {**status, "resourceClaimStatuses": statuses}
            self.groups[key] = body
            self.sched.on_podgroup(body)

    def _group_claim(self, key: GroupKey, group: dict[str, Any], entry: str, template_name: str) -> str | None:
        """The name of the group's claim for `entry`, made from its template
        if there is none yet; None when the entry waits (no template, or a
        claim of that name that is not the group's)."""
        ns, name = key.namespace, key.name
        uid = str(group["metadata"].get("uid") or "")
        claim_name = group_claim_name(name, entry)
        existing = self.bodies.get((ns, claim_name))
        template = self.templates.get((ns, template_name))
        if existing is None and template is not None:
            owner = {"apiVersion": group.get("apiVersion") or C.API_VERSION, "name": name, "uid": uid}
            self.add(_claim_from_template(template, ns, claim_name, entry, owner))
        elif existing is None or uid not in [o.get("uid") for o in existing["metadata"].get("ownerReferences") or ()]:
            return None
        return claim_name


def _reserved(body: dict[str, Any], allocation: Allocation | None, consumer: ConsumerRef) -> dict[str, Any]:
    """A copy of the claim `body` with `consumer` in `reservedFor` and, for an
    allocation just made, the allocation and troupe's delete-protection finalizer."""
    body = copy.deepcopy(body)
    meta = body["metadata"]
    status = body.get("status") or {}
    if allocation is not None:
        if DELETE_PROTECTION_FINALIZER not in (meta.get("finalizers") or ()):
            meta["finalizers"] = [*(meta.get("finalizers") or ()), DELETE_PROTECTION_FINALIZER]
        status["allocation"] = allocation.to_api()
    others = [r for r in status.get("reservedFor") or () if r.get("uid") != consumer.uid]
    status["reservedFor"] = [*others, consumer.to_api()]
    body["status"] = status
    return body


def _claim_from_template(
    template: dict[str, Any], namespace: str, name: str, entry: str, group: dict[str, str]
) -> dict[str, Any]:
    """The claim troupe makes for PodGroup `group` ({apiVersion, name, uid})
    from a template entry."""
    spec = template.get("spec") or {}
    meta = spec.get("metadata") or {}
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": claim_uid(namespace, name),
            "resourceVersion": "1",
            "labels": dict(meta.get("labels") or {}),
            "annotations": {**(meta.get("annotations") or {}), POD_CLAIM_NAME_ANNOTATION: entry},
            "ownerReferences": [
                {
                    "apiVersion": group["apiVersion"],
                    "kind": "PodGroup",
                    "name": group["name"],
                    "uid": group["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": copy.deepcopy(spec.get("spec") or {}),
    }


def claims_of(sched: Scheduler, pod: PodInfo) -> list[tuple[ClaimKey, ConsumerRef]]:
    """The ResourceClaims a pod uses, each with whom it is reserved for: its
    PodGroup for a claim the group lists (by name, or made from the template
    entry the pod names too), else the pod. A claim not made yet is left out."""
    group = sched.cache.groups.get(pod.group) if pod.group is not None else None
    group_ref, shared, made = _group_claims(sched, group)
    out: list[tuple[ClaimKey, ConsumerRef]] = []
    for ref in pod.resource_claims:
        name = ref.claim_name or made.get((ref.name, ref.template_name), "")
        if name:
            consumer = group_ref if group_ref is not None and name in shared else None
            out.append(((pod.namespace, name), consumer or ConsumerRef("pods", pod.name, pod.uid)))
    return out


def _group_claims(
    sched: Scheduler, group: PodGroup | InvalidObject | None
) -> tuple[ConsumerRef | None, set[str], dict[tuple[str, str], str]]:
    """(the group as a consumer, the names of the claims it lists, the claim
    made for each (entry, template)); (None, empty, empty) for a group with no claims."""
    shared: set[str] = set()
    made: dict[tuple[str, str], str] = {}
    if not isinstance(group, PodGroup) or not group.spec.resource_claims:
        return None, shared, made
    group_ref = ConsumerRef("podgroups", group.metadata.name, group.metadata.uid, api_group=group.key.source)
    owned = (
        sched.cache.dra.owned_by(group.metadata.uid)
        if any(e.resource_claim_template_name for e in group.spec.resource_claims)
        else {}
    )
    for e in group.spec.resource_claims:
        if e.resource_claim_name:
            shared.add(e.resource_claim_name)
        elif e.resource_claim_template_name and e.name in owned:
            made[(e.name, e.resource_claim_template_name)] = owned[e.name].name
            shared.add(owned[e.name].name)
    return group_ref, shared, made


def _devices(sched: Scheduler, pod: PodInfo) -> tuple[DeviceResult, ...]:
    out = []
    for key, _ in claims_of(sched, pod):
        allocation = sched.cache.dra.allocation(key)
        for r in allocation.results if allocation is not None else ():
            out.append(DeviceResult(key[1], r.request, r.driver, r.pool, r.device))
    return tuple(out)


def _pod_results(
    inp: SimulationInput, sched: Scheduler, recorder: Recorder, placed: set[str], preemption: Preemptions
) -> list[PodResult]:
    out = []
    for obj in inp.of_kind("Pod"):
        uid = obj.body["metadata"]["uid"]
        if uid in preemption.by:
            named = pod_group(obj.body["metadata"], obj.body.get("spec") or {})
            group = named.name if named is not None else None
            by = preemption.by[uid]
            uses = bool(obj.body["spec"].get("resourceClaims"))
            message = f"preempted by {by}"
            out.append(PodResult(obj.namespace, obj.name, group, None, message, False, True, False, by, uses))
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
                pod.namespace,
                pod.name,
                pod.group.name if pod.group is not None else None,
                node,
                message,
                uid in placed,
                running_before,
                pod.terminal,
                uses_claims=bool(pod.resource_claims),
                devices=_devices(sched, pod) if node is not None and not pod.terminal else (),
            )
        )
    return sorted(out, key=lambda p: (p.namespace, p.name))


def _own_condition(group: PodGroup) -> GroupCondition | None:
    """Where nothing was decided in the simulation: what the object already says."""
    own = group.condition(C.POD_GROUP_SCHEDULED)
    return GroupCondition(own.status, own.reason, own.message) if own is not None else None


def _waiting(
    recorder: Recorder,
    key: GroupKey,
    members: list[PodInfo],
    condition: GroupCondition | None,
    parent: str | None,
    placed: int,
) -> str:
    """What a group that got no condition of its own in a tree (its pods'
    message), or a scheduled gang whose increment waits (its Event), says."""
    if condition is None and parent is not None:
        return next((recorder.pods[p.uid] for p in members if p.uid in recorder.pods), "")
    if condition is not None and condition.status == "True" and placed < len(members):
        return recorder.group_notes.get(key, "")
    return ""


def _group_results(
    inp: SimulationInput,
    sched: Scheduler,
    recorder: Recorder,
    preemption: Preemptions,
    placements: dict[GroupKey, str],
) -> list[GroupResult]:
    out = []
    keys = [group_key_of(obj.body) for obj in inp.of_kind("PodGroup")]
    keys += [key for key in sched.cache.groups if is_implied(key)]  # Kueue: a group made of its pods
    for key in keys:
        group = sched.cache.groups.get(key)
        # A Volcano PodGroup's pods are in the sub-groups troupe made of it.
        members = [p for k in (key, *sched.cache.made_leaves(key)) for p in sched.cache.members(k) if not p.terminal]
        placed = sum(1 for p in members if sched.cache.placed_node(p.uid))
        condition = recorder.groups.get(key)
        policy = min_count = parent = None
        waiting = ""
        if isinstance(group, PodGroup):
            parent = group.spec.parent_composite_pod_group_name
            policy = "gang" if group.is_gang else "basic"
            min_count = group.min_count
            condition = condition or _own_condition(group)
            waiting = _waiting(recorder, key, members, condition, parent, placed)
        out.append(
            GroupResult(
                key.namespace,
                key.name,
                policy,
                min_count,
                len(members),
                placed,
                condition,
                tuple(preemption.victims.get(str(key), ())),
                preemption.groups.get(key),
                placements.get(key),
                key.source,
                group.workload_ref if isinstance(group, PodGroup) else None,
                parent,
                waiting,
                tuple(sorted(preemption.shrunk.get(key, {}).items())),
            )
        )
    return sorted(out, key=lambda g: (g.namespace, g.name))


def _composite_results(
    inp: SimulationInput,
    sched: Scheduler,
    recorder: Recorder,
    groups: Sequence[GroupResult],
    preemption: Preemptions,
) -> list[CompositeResult]:
    """Each CompositePodGroup of the input: its condition and how many of its
    children are placed (counted from the PodGroups' results, bottom up)."""
    cache = sched.cache
    leaves = {GroupKey(g.namespace, g.name, g.api_group): g for g in groups}

    def tally(key: GroupKey, seen: frozenset[GroupKey]) -> tuple[int, int]:
        """(children placed, pods below) of the CompositePodGroup `key`; a cycle counts nothing twice."""
        placed = pods = 0
        for leaf in cache.child_groups.get(key, ()):
            g = leaves.get(leaf)
            if g is not None:
                pods += g.pods
                placed += int(g.min_count is not None and g.placed >= g.min_count)
        for sub in cache.child_composites.get(key, ()):
            found = cache.composites.get(sub)
            if sub in seen or not isinstance(found, CompositePodGroup):
                continue
            sub_placed, sub_pods = tally(sub, seen | {sub})
            pods += sub_pods
            placed += int(sub_placed >= found.min_group_count)
        return placed, pods

    out = []
    for obj in inp.of_kind(COMPOSITE_KIND):
        key = GroupKey(obj.namespace, obj.name, str(obj.body.get("apiVersion") or "").partition("/")[0])
        found = cache.composites.get(key)
        composite = found if isinstance(found, CompositePodGroup) else None
        condition = recorder.composites.get(key)
        if condition is None and composite is not None:
            own = composite.condition(COMPOSITE_SCHEDULED)  # what the object already says
            if own is not None:
                condition = GroupCondition(own.status, own.reason, own.message)
        parent = composite.spec.parent_composite_pod_group_name if composite is not None else None
        if composite is None:  # invalid: its parent as written
            raw = (obj.body.get("spec") or {}).get("parentCompositePodGroupName")
            parent = raw if isinstance(raw, str) and raw else None
        placed, pods = tally(key, frozenset({key}))
        children = len(cache.child_groups.get(key, ())) + len(cache.child_composites.get(key, ()))
        out.append(
            CompositeResult(
                key.namespace,
                key.name,
                parent,
                None if composite is None else "gang" if composite.is_gang else "basic",
                None if composite is None else composite.min_group_count,
                children,
                placed,
                pods,
                condition,
                key.source,
                # A tree preempts as its root (GroupDecision.preemptor).
                tuple(preemption.victims.get(f"CompositePodGroup {key.namespace}/{key.name}", ())),
                preemption.groups.get(key),
            )
        )
    return sorted(out, key=lambda c: (c.namespace, c.name))
