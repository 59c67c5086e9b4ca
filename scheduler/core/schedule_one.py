"""Finding a node for one pod: PreFilter -> Filter -> Score -> pick (upstream schedule_one.go).

Ties go to the lowest row, so the same input always gives the same answer
(upstream breaks ties at random; determinism is a troupe invariant).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..api.records import PodInfo
from ..cluster.snapshot import Snapshot
from ..framework.diagnosis import Diagnosis, diagnose
from ..framework.framework import Framework
from ..framework.interface import Code, CycleState


@dataclass(slots=True)
class ScheduleResult:
    row: int | None
    diagnosis: Diagnosis | None = None


def sample_rows(fwk: Framework, rows: np.ndarray, snapshot: Snapshot) -> np.ndarray:
    """percentageOfNodesToScore: score only the first k feasible nodes, starting
    where the previous pod stopped (upstream's nextStartNodeIndex), so large
    clusters are not scored whole for every pod and load still rotates."""
    k = fwk.num_nodes_to_score(snapshot.num_nodes)
    if len(rows) <= k:
        return rows
    n = len(snapshot)
    split = int(np.searchsorted(rows, fwk.next_start_row % n))
    chosen = np.concatenate([rows[split:], rows[:split]])[:k]
    fwk.next_start_row = (int(chosen[-1]) + 1) % n
    return chosen


def schedule_pod(
    fwk: Framework,
    pod: PodInfo,
    snapshot: Snapshot,
    state: CycleState | None = None,
    allowed: np.ndarray | None = None,
) -> ScheduleResult:
    """The best row for `pod` (within `allowed`, a placement's rows, if given)."""
    state = state if state is not None else CycleState()
    status = fwk.run_pre_filters(state, pod, snapshot)
    if not status.ok:
        plugins = {status.plugin} if status.plugin else set()
        diagnosis = Diagnosis(
            snapshot.num_nodes,
            pre_filter_message=status.message,
            pre_filter_plugin=status.plugin,
            unresolvable=status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            plugins=plugins,
            names=snapshot.names,
        )
        return ScheduleResult(None, diagnosis)
    feasible, trail = fwk.run_filters(state, pod, snapshot, allowed)
    rows = np.flatnonzero(feasible)
    if len(rows) == 0:
        return ScheduleResult(None, diagnose(snapshot, trail, allowed))
    rows = sample_rows(fwk, rows, snapshot)
    if len(rows) == 1 or not fwk.scores:
        return ScheduleResult(int(rows[0]))
    scores = fwk.run_scores(state, pod, snapshot, rows)
    return ScheduleResult(int(rows[int(np.argmax(scores))]))
