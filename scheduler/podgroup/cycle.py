"""The PodGroup scheduling cycle: one snapshot, every pod of the group, one atomic decision.

For each pod in order (priority high first, then first seen): Filter, Score,
pick, assume into the snapshot. Then Permit looks at the whole group: for a
gang, pods already bound plus those placed now must reach `minCount`, or the
cycle's placements are dropped and nothing binds. A basic group binds
whatever fits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from ..api.constants import REASON_SCHEDULED, REASON_SCHEDULER_ERROR, REASON_UNSCHEDULABLE
from ..api.objects import PodInfo
from ..api.podgroup import PodGroup
from ..cluster.snapshot import Snapshot
from ..framework.algorithm import Diagnosis, schedule_pod
from ..framework.framework import Framework
from ..framework.interface import CycleState, GroupContext

GroupKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Placement:
    pod: PodInfo
    node: str


@dataclass(slots=True)
class GroupDecision:
    """What the cycle decided. `placements` are applied all together or not at all."""

    group_key: GroupKey | None  # None for a pod that belongs to no PodGroup
    outcome: str  # REASON_SCHEDULED | REASON_UNSCHEDULABLE | REASON_SCHEDULER_ERROR
    message: str
    placements: list[Placement] = field(default_factory=list)
    unplaced: list[tuple[PodInfo, str]] = field(default_factory=list)  # pod, why
    placed_before: int = 0
    min_count: int = 1
    unresolvable: bool = False
    # The plugins that rejected pods of this cycle (None: unknown), for the
    # queue: only events these plugins registered move the unit back.
    rejected_by: frozenset[str] | None = None
    wake_on: frozenset[str] | None = None  # the events those plugins registered (None: any)

    @property
    def scheduled(self) -> bool:
        return self.outcome == REASON_SCHEDULED


def order_pods(pods: Sequence[PodInfo], first_seen: dict[str, float]) -> list[PodInfo]:
    """Priority high first, then first seen, then name (so the order is total)."""
    return sorted(pods, key=lambda p: (-p.priority, first_seen.get(p.uid, 0.0), p.namespace, p.name))


def error_decision(group_key: GroupKey | None, pods: Sequence[PodInfo], message: str) -> GroupDecision:
    return GroupDecision(group_key, REASON_SCHEDULER_ERROR, message, unplaced=[(p, message) for p in pods])


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
    ctx = GroupContext(group_key or ("", ""), pods, min_count, is_gang, placed_before)
    placements: list[Placement] = []
    failures: list[tuple[PodInfo, Diagnosis]] = []
    vectors: dict[tuple, object] = {}

    for i, pod in enumerate(pods):
        if is_gang and placed_before + len(placements) + (len(pods) - i) < min_count:
            break  # minCount is out of reach: the rest cannot change the answer
        result = schedule_pod(fwk, pod, snapshot, CycleState())
        if result.row is None:
            assert result.diagnosis is not None
            failures.append((pod, result.diagnosis))
            continue
        vec = vectors.get(pod.spec_key)
        if vec is None:
            vec = vectors[pod.spec_key] = snapshot.request_vector(pod)[0]
        snapshot.assume(result.row, vec, (pod.nonzero_cpu, pod.nonzero_memory), pod)  # type: ignore[arg-type]
        placements.append(Placement(pod, snapshot.names[result.row]))

    ctx.placed_now = len(placements)
    placed_uids = {p.pod.uid for p in placements}
    first_failure = failures[0][1] if failures else None
    unresolvable = bool(failures) and all(d.unresolvable for _, d in failures)
    permit = fwk.run_permit(ctx)
    rejecting = {name for _, d in failures for name in d.plugins}
    if not permit.ok and permit.plugin:
        rejecting.add(permit.plugin)
    rejected_by = frozenset(rejecting) if rejecting else None
    wake_on = fwk.wake_events(rejected_by)

    if not permit.ok:
        why = permit.message
        if first_failure is not None:
            why = f"{why}: {first_failure.message}"
        return GroupDecision(
            group_key, REASON_UNSCHEDULABLE, why,
            unplaced=[(p, why) for p in pods],
            placed_before=placed_before, min_count=min_count, unresolvable=unresolvable,
        rejected_by=rejected_by, wake_on=wake_on,
        )

    failed_msgs = {p.uid: d.message for p, d in failures}
    not_tried = "not tried: the group could not reach minCount"
    unplaced = [(p, failed_msgs.get(p.uid, not_tried)) for p in pods if p.uid not in placed_uids]
    total = placed_before + len(placements)
    # minCount is 1 for a basic group: it is scheduled once any of its pods is.
    if total >= min_count:
        outcome, message = REASON_SCHEDULED, f"{total} pod(s) placed"
        if unplaced:
            message += f"; {len(unplaced)} more wait: {unplaced[0][1]}"
    else:
        outcome = REASON_UNSCHEDULABLE
        message = f"{len(unplaced)} of {len(pods)} pod(s) could not be placed: {unplaced[0][1]}"
    return GroupDecision(
        group_key, outcome, message, placements, unplaced,
        placed_before=placed_before, min_count=min_count, unresolvable=unresolvable,
        rejected_by=rejected_by, wake_on=wake_on,
    )
