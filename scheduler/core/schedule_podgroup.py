"""The PodGroup scheduling cycle: one snapshot, every pod of the group, one
atomic decision (upstream schedule_one_podgroup.go).

The default algorithm: for each pod in order (priority high first, then first
seen): Filter, Score, pick, assume into the snapshot, Reserve. Then Permit
looks at the whole group: for a gang, pods already bound plus those placed now
must reach `minCount`, or the cycle's placements are dropped (Unreserve) and
nothing binds. A basic group binds whatever fits.

With PlacementGenerate plugins in the profile, the group is tried in each
candidate placement (a subset of the nodes): the default algorithm runs inside
it on a forked snapshot (mark/restore), Permit judges it, PlacementScore
plugins score the feasible ones, and the best is applied (ties: the first
generated).

Pods left unplaced go to PostFilter: the pod's own for a pod that belongs to
no PodGroup, the group's for a PodGroup; a nominated node is carried in the
decision.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..api.constants import REASON_SCHEDULED, REASON_SCHEDULER_ERROR, REASON_UNSCHEDULABLE
from ..api.podgroup import PodGroup
from ..api.records import PodInfo
from ..cluster.snapshot import Snapshot
from ..framework.diagnosis import Diagnosis
from ..framework.framework import Framework
from ..framework.interface import Code, CycleState, GroupContext, Placement, PlacementAssignments, Status
from .schedule_one import schedule_pod

GroupKey = tuple[str, str]

# How many failed placements a message names (the rest are counted).
MAX_PLACEMENTS_IN_MESSAGE = 5


class Outcome(enum.StrEnum):
    """A cycle's outcome; the values are the PodGroupScheduled reasons."""

    SCHEDULED = REASON_SCHEDULED
    UNSCHEDULABLE = REASON_UNSCHEDULABLE
    SCHEDULER_ERROR = REASON_SCHEDULER_ERROR


@dataclass(frozen=True, slots=True)
class Assignment:
    """A pod placed on a node in this cycle, with the CycleState its plugins
    wrote (Unreserve and PreBind read it)."""

    pod: PodInfo
    node: str
    state: CycleState = field(default_factory=CycleState, compare=False)


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
    placement: str = ""  # the chosen placement's path ("" without PlacementGenerate plugins)

    @property
    def scheduled(self) -> bool:
        return self.outcome is Outcome.SCHEDULED

    @property
    def preemptor(self) -> str:
        """Who preempts, in messages: "PodGroup ns/name" or "pod ns/name"."""
        if self.group_key is not None:
            return f"PodGroup {self.group_key[0]}/{self.group_key[1]}"
        return f"pod {self.unplaced[0][0].key}" if self.unplaced else "pod"


@dataclass(slots=True)
class _Trial:
    """One run of the default algorithm over a set of pods."""

    assignments: list[Assignment] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    failures: list[tuple[PodInfo, str, Diagnosis | None]] = field(default_factory=list)  # pod, why, filter diagnosis


def order_pods(pods: Sequence[PodInfo], first_seen: dict[str, float]) -> list[PodInfo]:
    """Priority high first, then first seen, then name (so the order is total)."""
    return sorted(pods, key=lambda p: (-p.priority, first_seen.get(p.uid, 0.0), p.namespace, p.name))


def error_decision(group_key: GroupKey | None, pods: Sequence[PodInfo], message: str) -> GroupDecision:
    return GroupDecision(group_key, Outcome.SCHEDULER_ERROR, message, unplaced=[(p, message) for p in pods])


def schedule_group(
    fwk: Framework,
    snapshot: Snapshot,
    group_key: GroupKey | None,
    group: PodGroup | None,
    pods: Sequence[PodInfo],
    placed_before: int = 0,
) -> GroupDecision:
    """Places `pods` (already ordered) into `snapshot`. `placed_before` counts the
    group's pods bound or assumed before this cycle."""
    is_gang = group is not None and group.is_gang
    min_count = group.min_count if group is not None else 1
    ctx = GroupContext(group_key or ("", ""), pods, min_count, is_gang, placed_before, group=group)
    if fwk.placement_generate:
        return _schedule_in_placements(fwk, snapshot, group_key, ctx)
    trial = _place(fwk, snapshot, ctx, reserve=True)
    return _decide(fwk, snapshot, group_key, ctx, trial)


def _place(
    fwk: Framework,
    snapshot: Snapshot,
    ctx: GroupContext,
    reserve: bool,
    allowed: np.ndarray | None = None,
) -> _Trial:
    """The default algorithm: each pod in order, assumed into the snapshot
    (and reserved, with `reserve`) as it is placed."""
    trial = _Trial()
    vectors: dict[tuple[object, ...], np.ndarray] = {}
    pods = ctx.pods
    for i, pod in enumerate(pods):
        if ctx.is_gang and ctx.placed_before + len(trial.assignments) + (len(pods) - i) < ctx.min_count:
            break  # minCount is out of reach: the rest cannot change the answer
        state = CycleState()
        result = schedule_pod(fwk, pod, snapshot, state, allowed)
        if result.row is None:
            assert result.diagnosis is not None
            trial.failures.append((pod, result.diagnosis.message, result.diagnosis))
            continue
        vec = vectors.get(pod.spec_key)
        if vec is None:
            vec = vectors[pod.spec_key] = snapshot.request_vector(pod)[0]
        node = snapshot.names[result.row]
        if reserve and fwk.reserve:
            mark = snapshot.mark()
            snapshot.assume(result.row, vec, (pod.nonzero_cpu, pod.nonzero_memory), pod)
            status = fwk.run_reserve(state, pod, node)
            if not status.ok:
                snapshot.restore(mark)
                trial.failures.append(
                    (pod, f"{status.plugin}: {status.message}" if status.plugin else status.message, None)
                )
                continue
        else:
            snapshot.assume(result.row, vec, (pod.nonzero_cpu, pod.nonzero_memory), pod)
        trial.assignments.append(Assignment(pod, node, state))
        trial.rows.append(result.row)
    return trial


def _unreserve(fwk: Framework, assignments: Sequence[Assignment]) -> None:
    if fwk.reserve:
        for a in reversed(assignments):
            fwk.run_unreserve(a.state, a.pod, a.node)


def _decide(
    fwk: Framework,
    snapshot: Snapshot,
    group_key: GroupKey | None,
    ctx: GroupContext,
    trial: _Trial,
    placement: str = "",
) -> GroupDecision:
    """Permit over the trial's assignments, then the decision; unplaced pods go to PostFilter."""
    pods, placed_before, min_count = ctx.pods, ctx.placed_before, ctx.min_count
    ctx.placed_now = len(trial.assignments)
    placed_uids = {a.pod.uid for a in trial.assignments}
    failures = trial.failures
    first_failure = failures[0][1] if failures else None
    unresolvable = bool(failures) and all(d is not None and d.unresolvable for _, _, d in failures)
    permit = fwk.run_permit(ctx)
    rejecting = {name for _, _, d in failures if d is not None for name in d.plugins}
    if not permit.ok and permit.plugin:
        rejecting.add(permit.plugin)
    rejected_by = frozenset(rejecting) if rejecting else None
    wake_on = fwk.wake_events(rejected_by)

    if not permit.ok:
        _unreserve(fwk, trial.assignments)
        why = permit.message
        if first_failure is not None:
            why = f"{why}: {first_failure}"
        decision = GroupDecision(
            group_key,
            Outcome.UNSCHEDULABLE,
            why,
            unplaced=[(p, why) for p in pods],
            placed_before=placed_before,
            min_count=min_count,
            unresolvable=unresolvable,
            rejected_by=rejected_by,
            wake_on=wake_on,
            placement=placement,
        )
        _post_filter(fwk, snapshot, ctx, group_key, trial, decision)
        return decision

    failed_msgs = {p.uid: msg for p, msg, _ in failures}
    not_tried = "not tried: the group could not reach minCount"
    unplaced = [(p, failed_msgs.get(p.uid, not_tried)) for p in pods if p.uid not in placed_uids]
    total = placed_before + len(trial.assignments)
    # minCount is 1 for a basic group: it is scheduled once any of its pods is.
    if total >= min_count:
        outcome, message = Outcome.SCHEDULED, f"{total} pod(s) placed"
        if placement:
            message += f" in {placement}"
        if unplaced:
            message += f"; {len(unplaced)} more wait: {unplaced[0][1]}"
    else:
        outcome = Outcome.UNSCHEDULABLE
        message = f"{len(unplaced)} of {len(pods)} pod(s) could not be placed: {unplaced[0][1]}"
    decision = GroupDecision(
        group_key,
        outcome,
        message,
        trial.assignments,
        unplaced,
        placed_before=placed_before,
        min_count=min_count,
        unresolvable=unresolvable,
        rejected_by=rejected_by,
        wake_on=wake_on,
        placement=placement,
    )
    if unplaced:
        _post_filter(fwk, snapshot, ctx, group_key, trial, decision)
    return decision


def _post_filter(
    fwk: Framework,
    snapshot: Snapshot,
    ctx: GroupContext,
    group_key: GroupKey | None,
    trial: _Trial,
    decision: GroupDecision,
) -> None:
    """PostFilter for what stays unplaced: a lone pod's own, or the group's
    (with each unplaced pod's diagnosis). Nominations go into the decision."""
    if not fwk.post_filter or decision.unresolvable:
        return
    diagnoses = {p.uid: d for p, _, d in trial.failures if d is not None}
    if group_key is None:
        if not trial.failures or trial.failures[0][2] is None:
            return
        pod, _, diagnosis = trial.failures[0]
        assert diagnosis is not None
        decision.preemption_attempted = True
        result, status = fwk.run_post_filter(CycleState(), pod, snapshot, diagnosis)
        if status.ok and result is not None:
            if result.nominated_node:
                decision.nominations[pod.uid] = result.nominated_node
            _preemption(decision, result.victims, result.victim_groups, result.message)
        elif not status.ok:
            _tell(decision, status)
        return
    decision.preemption_attempted = True
    group_result, status = fwk.run_post_filter_group(CycleState(), ctx, snapshot, diagnoses)
    if status.ok and group_result is not None:
        decision.nominations.update(group_result.nominations)
        _preemption(decision, group_result.victims, group_result.victim_groups, group_result.message)
    elif not status.ok:
        _tell(decision, status)


def _preemption(decision: GroupDecision, victims: Sequence[PodInfo], groups: Sequence[GroupKey], message: str) -> None:
    """What PostFilter chose goes into the decision, and its message onto the
    waiting pods' (as upstream appends "preemption: ..." to the fit error)."""
    decision.victims.extend(victims)
    decision.victim_groups.extend(groups)
    if message:
        decision.preemption_message = message
        _append_preemption(decision, message)


def _tell(decision: GroupDecision, status: Status) -> None:
    """Why preemption did not help, after the fit error (upstream's "preemption: ..." suffix)."""
    if status.is_skip or not status.message:
        return
    _append_preemption(decision, f"{status.plugin}: {status.message}" if status.plugin else status.message)


def _append_preemption(decision: GroupDecision, text: str) -> None:
    decision.message = f"{decision.message}; preemption: {text}"
    decision.unplaced = [(p, f"{why}; preemption: {text}") for p, why in decision.unplaced]


def trial_place(
    fwk: Framework, snapshot: Snapshot, pods: Sequence[PodInfo], allowed: np.ndarray | None
) -> list[tuple[PodInfo, int]]:
    """The Handle's `place`: the default algorithm for `pods` in `snapshot`
    (within `allowed`), without Reserve, the snapshot restored afterwards."""
    ctx = GroupContext(("", ""), pods, 1, False, 0)
    mark = snapshot.mark()
    try:
        trial = _place(fwk, snapshot, ctx, reserve=False, allowed=allowed)
    finally:
        snapshot.restore(mark)
    return [(a.pod, row) for a, row in zip(trial.assignments, trial.rows)]


# ------------------------------------------------------------------ placements


def _schedule_in_placements(
    fwk: Framework, snapshot: Snapshot, group_key: GroupKey | None, ctx: GroupContext
) -> GroupDecision:
    """Try the group in each generated placement, score the feasible ones, apply the best."""
    state = CycleState()  # the group cycle's: generators and scorers share it
    placements, status = fwk.run_placement_generate(state, ctx, snapshot)
    if not status.ok:
        return _no_placement(group_key, ctx, status, [])
    proposals: list[PlacementAssignments] = []
    trials: list[_Trial] = []
    rejected: list[tuple[Placement, str]] = []
    for placement in placements:
        mark = snapshot.mark()
        trial = _place(fwk, snapshot, ctx, reserve=False, allowed=placement.nodes)
        ctx.placed_now = len(trial.assignments)
        permit = fwk.run_permit(ctx)
        snapshot.restore(mark)
        if permit.ok and trial.assignments:
            proposals.append(
                PlacementAssignments(placement, [(a.pod, r) for a, r in zip(trial.assignments, trial.rows)])
            )
            trials.append(trial)
        else:
            why = permit.message if not permit.ok else (trial.failures[0][1] if trial.failures else "no pod fits")
            rejected.append((placement, why))
    if not proposals:
        return _no_placement(group_key, ctx, Status.unschedulable(), rejected)
    scores, status = fwk.run_placement_scores(state, ctx, snapshot, proposals)
    if not status.ok:
        return _no_placement(group_key, ctx, status, rejected)
    best = int(np.argmax(scores))
    # Apply the winner as it was found (re-running the algorithm could sample
    # other nodes), reserving each pod now.
    chosen, found = proposals[best], trials[best]
    trial = _Trial(failures=list(found.failures))
    for a, row in zip(found.assignments, found.rows):
        vec = snapshot.request_vector(a.pod)[0]
        mark = snapshot.mark()
        snapshot.assume(row, vec, (a.pod.nonzero_cpu, a.pod.nonzero_memory), a.pod)
        if fwk.reserve:
            status = fwk.run_reserve(a.state, a.pod, a.node)
            if not status.ok:
                snapshot.restore(mark)
                trial.failures.append((a.pod, status.message, None))
                continue
        trial.assignments.append(a)
        trial.rows.append(row)
    return _decide(fwk, snapshot, group_key, ctx, trial, placement=chosen.placement.path or "the cluster")


def _no_placement(
    group_key: GroupKey | None,
    ctx: GroupContext,
    status: Status,
    rejected: Sequence[tuple[Placement, str]],
) -> GroupDecision:
    if status.code is Code.ERROR:
        return error_decision(group_key, ctx.pods, f"{status.plugin}: {status.message}")
    if rejected:
        named = [f"{p.path or 'the cluster'}: {why}" for p, why in rejected[:MAX_PLACEMENTS_IN_MESSAGE]]
        more = len(rejected) - len(named)
        why = f"no placement fits: {'; '.join(named)}" + (f"; and {more} more" if more > 0 else "")
    elif status.message:
        why = f"{status.plugin}: {status.message}" if status.plugin else status.message
    else:
        why = "no placement fits"
    return GroupDecision(
        group_key,
        Outcome.UNSCHEDULABLE,
        why,
        unplaced=[(p, why) for p in ctx.pods],
        placed_before=ctx.placed_before,
        min_count=ctx.min_count,
        rejected_by=frozenset({status.plugin}) if status.plugin else None,
    )
