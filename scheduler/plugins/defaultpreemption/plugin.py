"""DefaultPreemption (PostFilter): evict lower-priority pods so that a pod, or
a whole gang, fits. The plugin decides; the scheduler carries the decision
out (DisruptionTarget on victims and their PodGroups, deletes, nominations).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pydantic import Field, model_validator

from ...api.config import PluginArgs
from ...api.records import GroupKey, PodInfo
from ...cluster.snapshot import Snapshot
from ...framework.diagnosis import Diagnosis
from ...framework.groupfit import min_resources_shortfall
from ...framework.interface import (
    SEARCH_BUDGET_SPENT,
    Code,
    CycleState,
    GroupContext,
    GroupPostFilterResult,
    Handle,
    PostFilterPlugin,
    PostFilterResult,
    Status,
)
from .search import best, search_group, search_pod, without
from .victims import Unit, budgets, group_priority, unique_pods, victim_units


class DefaultPreemptionArgs(PluginArgs):
    """Upstream's DefaultPreemptionArgs, plus how long troupe waits for victims."""

    # How many nodes a lone pod's preemption examines: at least this share of
    # the nodes, and at least the absolute number (upstream's defaults).
    min_candidate_nodes_percentage: int = Field(default=10, ge=0, le=100, alias="minCandidateNodesPercentage")
    min_candidate_nodes_absolute: int = Field(default=100, ge=0, alias="minCandidateNodesAbsolute")
    # troupe: a preemptor waits this long for its victims to terminate before
    # it may choose others (a victim with a stuck finalizer must not wedge it).
    victim_wait_seconds: float = Field(default=60.0, ge=0, alias="victimWaitSeconds")

    @model_validator(mode="after")
    def _not_both_zero(self) -> DefaultPreemptionArgs:
        if self.min_candidate_nodes_percentage == 0 and self.min_candidate_nodes_absolute == 0:
            raise ValueError("minCandidateNodesPercentage and minCandidateNodesAbsolute cannot both be zero")
        return self


@dataclass(slots=True)
class _Pending:
    """A preemption under way: its victims and what the preemptor was nominated to."""

    victims: frozenset[str]  # pod uids
    nominations: dict[str, str]
    deadline: float


class DefaultPreemption(PostFilterPlugin):
    name = "DefaultPreemption"
    Args = DefaultPreemptionArgs

    def __init__(self, args: DefaultPreemptionArgs, handle: Handle) -> None:
        super().__init__(args, handle)
        self.args: DefaultPreemptionArgs = args
        self.clock: Callable[[], float] = time.monotonic
        self._pending: dict[str, _Pending] = {}  # preemptor (pod uid or group key) -> its preemption
        self._offset = 0  # where the next lone pod's candidate search starts (round robin)

    # ------------------------------------------------------------------ a pod

    def post_filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, diagnosis: Diagnosis
    ) -> tuple[PostFilterResult | None, Status]:
        place = self.handle.place
        if place is None:
            return None, Status.skip(self.name)
        if not pod.may_preempt:
            return None, Status.unschedulable("not eligible: preemptionPolicy is Never", plugin=self.name)
        waiting = self.waiting(pod.uid)
        if waiting is not None:
            node = waiting.nominations.get(pod.uid, "")
            return PostFilterResult(node, message=_waiting_message(self.left(waiting))), Status.success()
        cache = self.handle.cache
        units = victim_units(cache, snapshot, pod.priority)
        if not units:
            return None, Status.skip(self.name)  # nothing to evict: the fit error says it all
        rows = self._candidate_rows(snapshot, diagnosis)
        n = len(rows)
        limit = max(n * self.args.min_candidate_nodes_percentage // 100, self.args.min_candidate_nodes_absolute)
        start = self._offset % n if n else 0
        self._offset += 1
        pdbs = budgets(cache)
        found = search_pod(snapshot, place, pod, units, rows[start:] + rows[:start], max(limit, 1), pdbs)
        if not found:
            return None, Status.unschedulable(
                f"0/{snapshot.num_nodes} nodes are available: no node would fit the pod with lower-priority pods removed",
                plugin=self.name,
            )
        chosen = best(found, pdbs)
        node = snapshot.names[chosen.row]
        victims = unique_pods(chosen.victims)
        self.remember(pod.uid, victims, {pod.uid: node})
        return (
            PostFilterResult(
                node,
                victims=tuple(victims),
                victim_groups=_groups(chosen.victims),
                message=f"preempting {_describe(chosen.victims)} on node {node}; {_waiting_message(len(victims))}",
            ),
            Status.success(),
        )

    @staticmethod
    def _candidate_rows(snapshot: Snapshot, diagnosis: Diagnosis) -> list[int]:
        """Nodes where removing pods could help: not rejected as unresolvable (upstream's nodesWherePreemptionMightHelp)."""
        statuses = diagnosis.node_statuses()
        rows = []
        for row, name in enumerate(snapshot.names):
            if not snapshot.valid[row]:
                continue
            status = statuses.get(name)
            if status is not None and status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                continue
            rows.append(row)
        return rows

    # -------------------------------------------------------------- a PodGroup

    def post_filter_group(
        self, state: CycleState, group: GroupContext, snapshot: Snapshot, diagnoses: Mapping[str, Diagnosis]
    ) -> tuple[GroupPostFilterResult | None, Status]:
        place = self.handle.place
        if place is None:
            return None, Status.skip(self.name)
        pods = list(group.pods)
        never = _never(group)
        if never:
            return None, Status.unschedulable(f"not eligible: {never}", plugin=self.name)
        cache = self.handle.cache
        # A tree's pods carry its root's priority (a tree has one); without
        # one at the root or the PodGroup, the unit's highest pod's.
        priority = group_priority(group.group, pods, cache.priority_classes)
        units = victim_units(cache, snapshot, priority, exclude=group.members)
        short = self._min_resources_without(snapshot, group, units)
        if short:  # evicting could not make the group feasible: nothing is evicted
            return None, Status.unschedulable(
                f"minResources: even with every lower-priority pod removed the cluster's free room cannot "
                f"hold the group, it needs {short}",
                plugin=self.name,
            )
        if not group.is_gang:
            # A basic group's pods are independent: preempt for its first unplaced pod, as for a lone pod.
            for pod in pods:
                diagnosis = diagnoses.get(pod.uid)
                if diagnosis is not None:
                    result, status = self.post_filter(state, pod, snapshot, diagnosis)
                    if result is None:
                        return None, status
                    nominations = {pod.uid: result.nominated_node} if result.nominated_node else {}
                    return (
                        GroupPostFilterResult(nominations, result.victims, result.victim_groups, result.message),
                        status,
                    )
            return None, Status.skip(self.name)
        if any(not p.may_preempt for p in pods):
            return None, Status.unschedulable("not eligible: a pod has preemptionPolicy Never", plugin=self.name)
        key = group.unit_name
        waiting = self.waiting(key)
        if waiting is not None:
            return (
                GroupPostFilterResult(waiting.nominations, message=_waiting_message(self.left(waiting))),
                Status.success(),
            )
        needed = max(group.min_count - group.placed_before, 1)
        if not units:
            return None, Status.skip(self.name)  # nothing to evict: the fit error says it all
        pdbs = budgets(cache)
        choice = search_group(snapshot, place, pods, needed, units, pdbs, group=group)
        if choice is None:
            noun = "the tree" if group.tree is not None else "the gang"
            why = f"{noun} does not fit ({needed} pods) even with every lower-priority pod removed"
            reasons: list[str] = []
            without(snapshot, units, lambda: place(snapshot, pods, None, group, reasons))
            if reasons and SEARCH_BUDGET_SPENT in reasons[0]:  # not known not to fit: nothing is evicted
                why = f"no victims chosen: with every lower-priority pod removed, {reasons[0]}"
            elif reasons:  # its pods fit, but the group would still not bind (e.g. minTaskMember)
                why = f"{noun} could not bind even with every lower-priority pod removed: {reasons[0]}"
            return None, Status.unschedulable(why, plugin=self.name)
        nominations = {pod.uid: snapshot.names[row] for pod, row in choice.placed}
        victims = choice.pods
        self.remember(key, victims, nominations)
        return (
            GroupPostFilterResult(
                nominations,
                tuple(victims),
                _groups(choice.victims),
                f"preempting {_describe(choice.victims)}; {_waiting_message(len(victims))}",
            ),
            Status.success(),
        )

    def _min_resources_without(self, snapshot: Snapshot, group: GroupContext, units: list[Unit]) -> str:
        """What of the group's minResources the free room lacks with every
        candidate victim gone ("" where it would hold them)."""
        if group.group is None or not group.group.min_resources or group.placed_before:
            return ""
        found = group.group
        return without(snapshot, units, lambda: min_resources_shortfall(snapshot, found, group.min_count))

    # --------------------------------------------------------- waiting victims

    def remember(self, key: str, victims: list[PodInfo], nominations: dict[str, str]) -> None:
        """A preemption for `key` (a pod, a PodGroup, a tree) is under way."""
        self._pending[key] = _Pending(
            frozenset(p.uid for p in victims), nominations, self.clock() + self.args.victim_wait_seconds
        )

    def left(self, pending: _Pending) -> int:
        pods = self.handle.cache.pods
        return sum(1 for uid in pending.victims if uid in pods and not pods[uid].terminal)

    def waiting(self, key: str) -> _Pending | None:
        """The preemption under way for `key`, if its victims are still
        terminating and the wait has not run out (then no new victims: upstream
        waits for terminating victims too). Otherwise forgotten."""
        pending = self._pending.get(key)
        if pending is None:
            return None
        if self.left(pending) and self.clock() < pending.deadline:
            return pending
        del self._pending[key]
        return None


def _never(group: GroupContext) -> str:
    """Why the unit may not preempt by its group's (or tree's) own
    preemptionPolicy ("" where it may)."""
    if group.tree is not None:
        return group.tree.never
    if group.group is not None and group.group.spec.preemption_policy == "Never":
        return "the PodGroup's preemptionPolicy is Never"
    return ""


def _groups(units: list[Unit]) -> tuple[GroupKey, ...]:
    """The PodGroups, and the CompositePodGroups, taken whole (DisruptionTarget)."""
    return tuple(k for u in units for k in (u.group, u.composite) if k is not None)


def _describe(units: list[Unit]) -> str:
    pods = sum(u.size for u in units)
    groups = [u.name for u in units if u.group is not None]
    text = f"{pods} lower-priority pod(s)"
    shrunk: dict[GroupKey, int] = {}
    for u in units:
        if u.above_min_of is not None:
            shrunk[u.above_min_of] = shrunk.get(u.above_min_of, 0) + u.size
    notes = []
    if groups:
        notes.append("whole " + ", ".join(groups[:3]) + (f" and {len(groups) - 3} more" if len(groups) > 3 else ""))
    notes += [f"{n} above the minCount of {key}" for key, n in sorted(shrunk.items())[:3]]
    return text + (f" ({'; '.join(notes)})" if notes else "")


def _waiting_message(n: int) -> str:
    return f"waiting for {n} victim(s) to terminate"
