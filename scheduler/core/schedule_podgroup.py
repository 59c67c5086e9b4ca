"""The PodGroup scheduling cycle: one snapshot, every pod of the group, one
atomic decision (upstream schedule_one_podgroup.go).

The default algorithm (`group_search`): for each pod in order (priority high
first, then first seen): Filter, Score, pick, assume into the snapshot,
Reserve; for a gang that order cannot place whose pods differ, a bounded
search. Then Permit looks at the whole group: for a gang, pods already bound
plus those placed now must reach `minCount`, or the cycle's placements are
dropped (Unreserve) and nothing binds. A basic group binds whatever fits.

Under the Placement algorithm (the default profile's), a group that the
PlacementGenerate plugins narrow (e.g. topology constraints: one candidate per
domain) is tried in each candidate placement and bound into the best
(`placement`); any other group takes the whole cluster directly.

Pods left unplaced go to PostFilter: the pod's own for a pod that belongs to
no PodGroup, the group's for a PodGroup; a nominated node is carried in the
decision.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from ..api.constants import REASON_SCHEDULED, REASON_SCHEDULER_ERROR, REASON_UNSCHEDULABLE
from ..api.nodepool import CapacityPlan
from ..api.podgroup import PodGroup
from ..api.records import GroupKey, PodInfo
from ..cluster.snapshot import Mark, Snapshot
from ..framework.framework import Framework
from ..framework.groupfit import min_resources_shortfall
from ..framework.interface import (
    Code,
    CycleState,
    GroupContext,
    GroupPostFilterResult,
    Placement,
    Reservation,
    Status,
)
from .group_search import Assignment, SearchBudget, Trial, apply_trial, place_group, unreserve
from .placement import choose_placement, is_whole_cluster, no_placement_message

if TYPE_CHECKING:
    from .schedule_tree import TreeResult

__all__ = [
    "Assignment",
    "GroupDecision",
    "Outcome",
    "decide_found",
    "error_decision",
    "order_pods",
    "post_filter",
    "schedule_group",
    "trial_place",
]


# A preemption trial's search budget, in passes over the group's pods.
PREEMPTION_SEARCH_ORDERS = 4


class Outcome(enum.StrEnum):
    """A cycle's outcome; the values are the PodGroupScheduled reasons."""

    SCHEDULED = REASON_SCHEDULED
    UNSCHEDULABLE = REASON_UNSCHEDULABLE
    SCHEDULER_ERROR = REASON_SCHEDULER_ERROR


@dataclass(slots=True)
class GroupDecision:
    """What the cycle decided. `assignments` are applied all together or not at all."""

    group_key: GroupKey | None  # None for a pod that belongs to no PodGroup
    outcome: Outcome
    message: str
    assignments: list[Assignment] = field(default_factory=list)
    unplaced: list[tuple[PodInfo, str]] = field(default_factory=list)  # pod, why
    placed_before: int = 0
    min_count: int = 1
    unresolvable: bool = False
    # The plugins that rejected pods of this cycle (None: unknown), for the
    # queue: only events these plugins registered move the unit back.
    rejected_by: frozenset[str] | None = None
    wake_on: frozenset[str] | None = None  # the events those plugins registered (None: any)
    nominations: dict[str, str] = field(default_factory=dict)  # pod uid -> node, from PostFilter
    # Preemption (PostFilter): pods to evict, PodGroups taken whole, and what the preemptor is told.
    victims: list[PodInfo] = field(default_factory=list)
    victim_groups: list[GroupKey] = field(default_factory=list)
    preemption_message: str = ""
    preemption_attempted: bool = False
    # A PostFilter reserved room for the unplaced pods (their nominations)
    # until running pods finish; nothing is evicted for it.
    reservation: Reservation | None = None
    # New nodes asked of an autoscaler for the whole unit (PostFilter
    # CapacityRequest); its pods then do not look provisionable themselves.
    capacity: CapacityPlan | None = None
    retry_within: float | None = None  # a PostFilter's "try again within this long" (CycleState.retry_within)
    placement: str = ""  # the chosen placement's label ("" when the group took the whole cluster)
    # A tree's cycle (core/schedule_tree.py): each group's outcome in it.
    tree: TreeResult | None = None
    # The error is the group's configuration (upstream's runtime validation:
    # pods of several schedulerNames, a tree that disagrees with its root),
    # which a native PodGroup says in its own word where served (composite.config_error_reason).
    config_error: bool = False

    @property
    def scheduled(self) -> bool:
        return self.outcome is Outcome.SCHEDULED

    @property
    def preemptor(self) -> str:
        """Who preempts, in messages: "PodGroup ns/name" or "pod ns/name"."""
        if self.group_key is not None:
            return str(self.group_key)
        if self.tree is not None:
            return f"CompositePodGroup {self.tree.root.namespace}/{self.tree.root.name}"
        return f"pod {self.unplaced[0][0].key}" if self.unplaced else "pod"


def order_pods(
    pods: Sequence[PodInfo], first_seen: dict[str, float], min_per_task: Mapping[str, int] | None = None
) -> list[PodInfo]:
    """Priority high first, then first seen, then name (so the order is total).
    Where the group asks a minimum per task (Volcano's minTaskMember), the
    first pods of each task up to its minimum go before all others, so that
    spare pods of one task do not take the room another task's minimum needs."""
    ordered = sorted(pods, key=lambda p: (-p.priority, first_seen.get(p.uid, 0.0), p.namespace, p.name))
    if not min_per_task:
        return ordered
    left = dict(min_per_task)
    needed: list[PodInfo] = []
    spare: list[PodInfo] = []
    for p in ordered:
        if left.get(p.task, 0) > 0:
            left[p.task] -= 1
            needed.append(p)
        else:
            spare.append(p)
    return needed + spare


def error_decision(
    group_key: GroupKey | None, pods: Sequence[PodInfo], message: str, config_error: bool = False
) -> GroupDecision:
    unplaced = [(p, message) for p in pods]
    return GroupDecision(group_key, Outcome.SCHEDULER_ERROR, message, unplaced=unplaced, config_error=config_error)


def schedule_group(
    fwk: Framework,
    snapshot: Snapshot,
    group_key: GroupKey | None,
    group: PodGroup | None,
    pods: Sequence[PodInfo],
    placed_before: int = 0,
    placed_nodes: Sequence[str] = (),
    backfill_only: Sequence[tuple[int, PodInfo]] = (),
    within: np.ndarray | None = None,
    in_tree: bool = False,
    budget: SearchBudget | None = None,
) -> GroupDecision:
    """Places `pods` (already ordered) into `snapshot`. `placed_before` counts the
    group's pods bound or assumed before this cycle, on `placed_nodes`;
    `backfill_only`, `within`, `in_tree`: GroupContext's; `budget`: the
    search's (None: the profile's searchSteps for this cycle)."""
    is_gang = group is not None and group.is_gang
    min_count = group.min_count if group is not None else 1
    ctx = GroupContext(
        group_key or GroupKey("", ""),
        pods,
        min_count,
        is_gang,
        placed_before,
        group=group,
        placed_nodes=tuple(placed_nodes),
        backfill_only=tuple(backfill_only),
        within=within,
        in_tree=in_tree,
    )
    short = _min_resources_shortfall(snapshot, group, min_count) if group is not None and not placed_before else ""
    if short:  # as coscheduling's PreFilter: not tried while the cluster cannot hold it
        # No plugin named: any cluster event (a pod gone, a node added) may free the room.
        return _no_placement(fwk, snapshot, group_key, ctx, Status.unschedulable(short), "")
    if fwk.placement_algorithm and group is not None:  # placements are for PodGroups, not lone pods
        return _schedule_in_placements(fwk, snapshot, group_key, ctx, budget)
    if ctx.topology_keys:
        why = (
            f"schedulingConstraints.topology cannot be honoured: profile {fwk.scheduler_name} uses the Default "
            "algorithm (set podGroupScheduling.algorithm: Placement)"
        )
        return _no_placement(fwk, snapshot, group_key, ctx, Status.unschedulable(why, resolvable=False), "")
    undo = snapshot.mark()
    trial = place_group(fwk, snapshot, ctx, reserve=True, allowed=within, budget=budget)
    return _decide(fwk, snapshot, group_key, ctx, trial, undo=undo)


def decide_found(
    fwk: Framework,
    snapshot: Snapshot,
    group_key: GroupKey,
    group: PodGroup,
    pods: Sequence[PodInfo],
    found: Trial,
    placed_nodes: Sequence[str] = (),
    within: np.ndarray | None = None,
    placement: str = "",
) -> GroupDecision:
    """A leaf's pods where a search over its whole tree placed them
    (`found`, on a snapshot restored since; `pods`: all of the leaf's waiting
    pods): assumed and reserved in the order found, then Permit and the
    decision, as its own cycle's."""
    ctx = GroupContext(
        group_key,
        pods,
        group.min_count,
        group.is_gang,
        len(placed_nodes),
        group=group,
        placed_nodes=tuple(placed_nodes),
        within=within,
        in_tree=True,
    )
    undo = snapshot.mark()
    trial = apply_trial(fwk, snapshot, found)
    return _decide(fwk, snapshot, group_key, ctx, trial, placement=placement, undo=undo)


def _min_resources_shortfall(snapshot: Snapshot, group: PodGroup, min_count: int) -> str:
    """Why the cluster's free room cannot hold the group's `minResources`
    (and `minCount` pod slots), or "" where it can or none are asked."""
    short = min_resources_shortfall(snapshot, group, min_count)
    return f"minResources: the cluster's free room cannot hold the group, it needs {short}" if short else ""


def _decide(
    fwk: Framework,
    snapshot: Snapshot,
    group_key: GroupKey | None,
    ctx: GroupContext,
    trial: Trial,
    placement: str = "",
    fallback: str = "",
    undo: Mark | None = None,
) -> GroupDecision:
    """Permit over the trial's assignments, then the decision; unplaced pods go to PostFilter.
    `undo`: the snapshot as it was before the trial, restored when nothing of
    it binds, so that PostFilter (preemption, reservations) sees the room the
    trial's pods took as free: they are the pods it places again."""
    ctx.placed_now = len(trial.assignments)
    ctx.placed_pods = tuple(a.pod for a in trial.assignments)
    permit = fwk.run_permit(ctx)
    rejected_by = _rejected_by(trial, permit)
    if permit.ok:
        assignments = trial.assignments
        outcome, message, unplaced = _permitted(ctx, trial, placement, fallback)
        if outcome is Outcome.UNSCHEDULABLE and undo is not None and trial.assignments:
            snapshot.restore(undo)
    else:
        unreserve(fwk, trial.assignments)
        if undo is not None:
            snapshot.restore(undo)
        first_failure = trial.failures[0][1] if trial.failures else None
        message = permit.message if first_failure is None else f"{permit.message}: {first_failure}"
        if trial.spent:  # not for want of room only: the search stopped for its budget
            message += f"; {trial.spent}"
        outcome, assignments, unplaced = Outcome.UNSCHEDULABLE, [], [(p, message) for p in ctx.pods]
    decision = GroupDecision(
        group_key,
        outcome,
        message,
        assignments,
        unplaced,
        placed_before=ctx.placed_before,
        min_count=ctx.min_count,
        unresolvable=_unresolvable(trial),
        rejected_by=rejected_by,
        wake_on=fwk.wake_events(rejected_by),
        placement=placement,
    )
    # PostFilter for what this cycle could not place, once it placed none of
    # it: a group that binds now (minCount reached, or a basic group's first
    # pods) leaves its other pods to the next cycle, which preempts or
    # reserves for them alone, as a tree's cycle does (a flat gang is a tree
    # of one): nothing is evicted or held for pods while their own siblings
    # are still being bound beside them.
    if not permit.ok or (unplaced and (outcome is not Outcome.SCHEDULED or not trial.assignments)):
        post_filter(fwk, snapshot, ctx, group_key, trial, decision)
    return decision


def _unresolvable(trial: Trial) -> bool:
    """Every pod that failed failed for a reason no preemption can remove."""
    failures = trial.failures
    return bool(failures) and all(d is not None and d.unresolvable for _, _, d in failures)


def _rejected_by(trial: Trial, permit: Status) -> frozenset[str] | None:
    """The plugins that rejected the trial's pods or Permit (None: none known)."""
    rejecting = {name for _, _, d in trial.failures if d is not None for name in d.plugins}
    if not permit.ok and permit.plugin:
        rejecting.add(permit.plugin)
    return frozenset(rejecting) if rejecting else None


def _permitted(
    ctx: GroupContext, trial: Trial, placement: str, fallback: str
) -> tuple[Outcome, str, list[tuple[PodInfo, str]]]:
    """(outcome, message, unplaced pods and why) of a trial Permit let through:
    scheduled once the group's pods reach minCount (1 for a basic group: it is
    scheduled once any of its pods is)."""
    placed_uids = {a.pod.uid for a in trial.assignments}
    failed_msgs = {p.uid: msg for p, msg, _ in trial.failures}
    not_tried = "not tried: the group could not reach minCount"
    unplaced = [(p, failed_msgs.get(p.uid, not_tried)) for p in ctx.pods if p.uid not in placed_uids]
    total = ctx.placed_before + len(trial.assignments)
    if total < ctx.min_count:
        spent = f"; {trial.spent}" if trial.spent else ""
        return (
            Outcome.UNSCHEDULABLE,
            f"{len(unplaced)} of {len(ctx.pods)} pod(s) could not be placed: {unplaced[0][1]}{spent}",
            unplaced,
        )
    message = f"{total} pod(s) placed"
    if placement:
        message += f" in {placement}"
    if fallback:  # a more preferred level had no domain that fits
        message += f" ({fallback})"
    if trial.how:  # the fixed order could not place the gang; the search did
        message += f" (search: {trial.how})"
    if unplaced:
        message += f"; {len(unplaced)} more wait: {unplaced[0][1]}"
    return Outcome.SCHEDULED, message, unplaced


def post_filter(
    fwk: Framework,
    snapshot: Snapshot,
    ctx: GroupContext,
    group_key: GroupKey | None,
    trial: Trial,
    decision: GroupDecision,
) -> None:
    """PostFilter for what stays unplaced: a lone pod's own, or the unit's
    (a PodGroup's, with each unplaced pod's diagnosis, or a whole tree's:
    `ctx.tree`). Nominations go into the decision."""
    if not fwk.post_filter or decision.unresolvable or ctx.in_tree:
        return
    for row, pod in ctx.backfill_only:  # others' reserved room: backfilled, never planned on
        snapshot.hold(row, pod)
    diagnoses = {p.uid: d for p, _, d in trial.failures if d is not None}
    if group_key is None:
        if not trial.failures or trial.failures[0][2] is None:
            return
        pod, _, diagnosis = trial.failures[0]
        assert diagnosis is not None
        decision.preemption_attempted = True
        state = CycleState()
        result, status = fwk.run_post_filter(state, pod, snapshot, diagnosis)
        decision.retry_within = state.retry_within
        if status.ok and result is not None:
            if result.nominated_node:
                decision.nominations[pod.uid] = result.nominated_node
            if result.reservation is not None:
                append_reservation(decision, result.reservation, result.message)
            else:
                _preemption(decision, result.victims, result.victim_groups, result.message)
        elif not status.ok:
            _tell(decision, status)
        return
    decision.preemption_attempted = True
    state = CycleState()
    group_result, status = fwk.run_post_filter_group(state, ctx, snapshot, diagnoses)
    decision.retry_within = state.retry_within
    if state.capacity_refused is not None:
        append_capacity(decision, *state.capacity_refused)
    if status.ok and group_result is not None:
        _group_post_filter_result(decision, group_result)
    elif not status.ok:
        _tell(decision, status)


def _group_post_filter_result(decision: GroupDecision, result: GroupPostFilterResult) -> None:
    """What a unit's PostFilter chose, into the decision: new nodes asked,
    room reserved, or victims."""
    decision.nominations.update(result.nominations)
    if result.capacity is not None:
        append_capacity(decision, result.capacity, result.message)
    elif result.reservation is not None:
        append_reservation(decision, result.reservation, result.message)
    else:
        _preemption(decision, result.victims, result.victim_groups, result.message)


def _preemption(decision: GroupDecision, victims: Sequence[PodInfo], groups: Sequence[GroupKey], message: str) -> None:
    """What PostFilter chose goes into the decision, and its message onto the
    waiting pods' (as upstream appends "preemption: ..." to the fit error)."""
    decision.victims.extend(victims)
    decision.victim_groups.extend(groups)
    if message:
        decision.preemption_message = message
        append_preemption(decision, message)


def append_reservation(decision: GroupDecision, reservation: Reservation, message: str) -> None:
    """Room held until running pods finish: said after the fit error."""
    decision.reservation = reservation
    decision.preemption_message = message
    decision.message = f"{decision.message}; {message}"
    decision.unplaced = [(p, f"{why}; {message}") for p, why in decision.unplaced]


def append_capacity(decision: GroupDecision, plan: CapacityPlan, message: str) -> None:
    """New nodes asked for the whole unit (or why none can be): said after the fit error."""
    decision.capacity = plan
    decision.preemption_message = message  # (what a Nominated Event on a pod holding a new node says)
    decision.message = f"{decision.message}; autoscaling: {message}"
    decision.unplaced = [(p, f"{why}; autoscaling: {message}") for p, why in decision.unplaced]


def _tell(decision: GroupDecision, status: Status) -> None:
    """Why preemption did not help, after the fit error (upstream's "preemption: ..." suffix)."""
    if status.is_skip or not status.message:
        return
    append_preemption(decision, f"{status.plugin}: {status.message}" if status.plugin else status.message)


def append_preemption(decision: GroupDecision, text: str) -> None:
    decision.message = f"{decision.message}; preemption: {text}"
    decision.unplaced = [(p, f"{why}; preemption: {text}") for p, why in decision.unplaced]


def trial_place(
    fwk: Framework,
    snapshot: Snapshot,
    pods: Sequence[PodInfo],
    allowed: np.ndarray | None,
    group: GroupContext | None = None,
    reasons: list[str] | None = None,
) -> list[tuple[PodInfo, int]]:
    """The Handle's `place`: where `pods` would go in `snapshot` (within
    `allowed`), without Reserve, the snapshot restored afterwards. With the
    group's context, as its cycle would place them: within its placements
    (e.g. one topology domain), with the search, and only if the cycle would
    bind them: its `minResources` fit the free room and Permit allows them
    (minCount, minTaskMember); otherwise nothing, and why in `reasons`."""
    if group is not None and group.tree is not None:
        return group.tree.place(snapshot, allowed, reasons)  # a tree is tried by its own cycle, all its pods
    ctx = group if group is not None else GroupContext(GroupKey("", ""), pods, 1, False, 0)
    if group is not None:
        ctx = replace(group, pods=pods)
        if group.group is not None and not group.placed_before:
            short = _min_resources_shortfall(snapshot, group.group, group.min_count)
            if short:
                if reasons is not None:
                    reasons.append(short)
                return []
    # Preemption asks this for many victim sets: the search gets room for the
    # other orders, not for a deep backtracking each time.
    budget = SearchBudget(min(fwk.search_steps, PREEMPTION_SEARCH_ORDERS * len(pods)))
    mark = snapshot.mark()
    try:
        placed, failure, no_placement = _trial(fwk, snapshot, ctx, allowed, budget, in_placements=group is not None)
    finally:
        snapshot.restore(mark)
    if group is None or (not placed and not budget.spent):
        return placed
    permit = fwk.run_permit(replace(ctx, placed_now=len(placed), placed_pods=tuple(p for p, _ in placed)))
    if not permit.ok:
        why = _why_not(ctx, permit, len(placed), failure, no_placement, budget)
        if reasons is not None and why:
            reasons.append(why)
        return []
    return placed


def _why_not(
    ctx: GroupContext, permit: Status, placed: int, failure: str, no_placement: str, budget: SearchBudget
) -> str:
    """Why a trial's group would not bind, where the caller must hear it:
    as many pods as it needs fit and Permit still says no (minTaskMember),
    or the search stopped on its budget (not known not to fit: said in its
    cycle's words). "" where fewer pods fit: "do not fit", the caller's word."""
    if placed >= ctx.need:
        return f"{permit.plugin}: {permit.message}" if permit.plugin else permit.message
    if budget.spent:
        short = no_placement or (f"{permit.message}: {failure}" if failure else permit.message)
        return f"{ctx.unit_name}: {short}; {budget.said()}"
    return ""


def _trial(
    fwk: Framework,
    snapshot: Snapshot,
    ctx: GroupContext,
    allowed: np.ndarray | None,
    budget: SearchBudget,
    in_placements: bool,
) -> tuple[list[tuple[PodInfo, int]], str, str]:
    """trial_place's placing, as the group's cycle would place it: the best
    placement of the first rank that has one (`choose_placement`), or the
    whole cluster, within `allowed`. Returns where its pods go (pod, row);
    the first reason a pod did not fit; and, where no placement held the
    group, why not, as its cycle says it ("" otherwise)."""
    if not in_placements or not fwk.placement_algorithm:
        trial = place_group(fwk, snapshot, ctx, reserve=False, allowed=allowed, budget=budget)
        return _pairs(trial), _first_failure(trial), ""
    state = CycleState()
    placements, status = fwk.run_placement_generate(state, ctx, snapshot)
    if not status.ok:
        return [], "", status.message or "no placement fits"
    if allowed is not None and not is_whole_cluster(placements):
        placements = _within(placements, allowed)
    if is_whole_cluster(placements):
        trial = place_group(fwk, snapshot, ctx, reserve=False, allowed=allowed, budget=budget)
        return _pairs(trial), _first_failure(trial), ""
    result = choose_placement(fwk, snapshot, ctx, placements, state, budget, reserve=False)
    if result.trial is None:
        return [], "", no_placement_message(ctx, result.rejected)
    return _pairs(result.trial), "", ""


def _pairs(trial: Trial) -> list[tuple[PodInfo, int]]:
    return [(a.pod, row) for a, row in zip(trial.assignments, trial.rows)]


def _first_failure(trial: Trial) -> str:
    return trial.failures[0][1] if trial.failures else ""


# ------------------------------------------------------------------ placements


def _schedule_in_placements(
    fwk: Framework, snapshot: Snapshot, group_key: GroupKey | None, ctx: GroupContext, budget: SearchBudget | None
) -> GroupDecision:
    """Candidate placements from the PlacementGenerate plugins; a group no
    generator narrows takes the whole cluster directly (today's path)."""
    state = CycleState()  # the group cycle's: generators and scorers share it
    placements, status = fwk.run_placement_generate(state, ctx, snapshot)
    if not status.ok:
        return _no_placement(fwk, snapshot, group_key, ctx, status, "")
    if ctx.within is not None and not is_whole_cluster(placements):
        placements = _within(placements, ctx.within)
        if not placements:
            why = "no domain of its topology key lies within the domain its CompositePodGroup was given"
            return _no_placement(fwk, snapshot, group_key, ctx, Status.unschedulable(why), "")
    if is_whole_cluster(placements):
        if ctx.topology_keys:
            return _no_placement(
                fwk,
                snapshot,
                group_key,
                ctx,
                Status.unschedulable(
                    f"schedulingConstraints.topology cannot be honoured: no PlacementGenerate plugin of profile "
                    f"{fwk.scheduler_name} handles it (enable TopologyPlacementGenerator)",
                    resolvable=False,
                ),
                "",
            )
        undo = snapshot.mark()
        trial = place_group(fwk, snapshot, ctx, reserve=True, allowed=ctx.within, budget=budget)
        return _decide(fwk, snapshot, group_key, ctx, trial, undo=undo)
    undo = snapshot.mark()
    budget = budget if budget is not None else SearchBudget(fwk.search_steps)
    result = choose_placement(fwk, snapshot, ctx, placements, state, budget)
    if result.trial is None or result.placement is None:
        if not result.status.ok:
            return _no_placement(fwk, snapshot, group_key, ctx, result.status, "")
        why = no_placement_message(ctx, result.rejected)
        spent = budget.said()
        return _no_placement(fwk, snapshot, group_key, ctx, Status.unschedulable(), f"{why}; {spent}" if spent else why)
    skipped = sorted(
        {r.placement.kind for r in result.rejected if r.placement.rank < result.placement.rank and r.placement.kind}
    )
    fallback = "; ".join(f"no {kind} domain fits" for kind in skipped)
    return _decide(
        fwk, snapshot, group_key, ctx, result.trial, placement=result.placement.label, fallback=fallback, undo=undo
    )


def _within(placements: Sequence[Placement], within: np.ndarray) -> list[Placement]:
    """The placements narrowed to `within` (a tree's domain), empty ones dropped."""
    out = []
    for p in placements:
        nodes = p.nodes & within
        if nodes.any():
            out.append(replace(p, nodes=nodes, free_room=None))
    return out


def _no_placement(
    fwk: Framework,
    snapshot: Snapshot,
    group_key: GroupKey | None,
    ctx: GroupContext,
    status: Status,
    why: str,
) -> GroupDecision:
    """No placement holds the group: Unschedulable (or SchedulerError on a
    plugin error); PostFilter may still find room by preemption."""
    if status.code is Code.ERROR:
        return error_decision(group_key, ctx.pods, f"{status.plugin}: {status.message}")
    if not why:
        why = (f"{status.plugin}: {status.message}" if status.plugin else status.message) or "no placement fits"
    unresolvable = status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    rejected_by = frozenset({status.plugin}) if status.plugin else None
    decision = GroupDecision(
        group_key,
        Outcome.UNSCHEDULABLE,
        why,
        unplaced=[(p, why) for p in ctx.pods],
        placed_before=ctx.placed_before,
        min_count=ctx.min_count,
        unresolvable=unresolvable,
        rejected_by=rejected_by,
        wake_on=fwk.wake_events(rejected_by),
    )
    post_filter(fwk, snapshot, ctx, group_key, Trial(), decision)
    return decision
