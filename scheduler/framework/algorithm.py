"""Finding a node for one pod: PreFilter -> Filter -> Score -> pick.

Ties go to the lowest row, so the same input always gives the same answer
(upstream breaks ties at random; determinism is a troupe invariant).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..api.objects import PodInfo
from ..cluster.snapshot import Snapshot
from .framework import Framework
from .interface import CycleState, FilterResult

NO_NODE_AVAILABLE = "0/{n} nodes are available"


@dataclass(slots=True)
class Diagnosis:
    """Why a pod fits nowhere: upstream's FitError, reasons counted per node."""

    num_nodes: int
    reasons: dict[str, int] = field(default_factory=dict)
    pre_filter_message: str = ""
    unresolvable: bool = False  # preemption cannot help any node
    plugins: set[str] = field(default_factory=set)  # upstream's UnschedulablePlugins

    @property
    def message(self) -> str:
        # Upstream FitError.Error(): "count reason" strings sorted, comma separated.
        if self.num_nodes == 0 and not self.pre_filter_message:
            return "no nodes available to schedule pods"  # upstream ErrNoNodesAvailable
        msg = NO_NODE_AVAILABLE.format(n=self.num_nodes) + ":"
        if self.pre_filter_message:
            return f"{msg} {self.pre_filter_message}."
        parts = sorted(f"{count} {reason}" for reason, count in self.reasons.items())
        return f"{msg} {', '.join(parts)}." if parts else msg[:-1] + "."


@dataclass(slots=True)
class ScheduleResult:
    row: int | None
    diagnosis: Diagnosis | None = None


def diagnose(snapshot: Snapshot, trail: list[tuple[str, np.ndarray, FilterResult]]) -> Diagnosis:
    diag = Diagnosis(num_nodes=snapshot.num_nodes)
    all_unresolvable = True
    for plugin, seen, result in trail:
        rejected = seen & ~result.feasible
        if not rejected.any():
            continue
        diag.plugins.add(plugin)
        covered = np.zeros_like(rejected)
        for reason, mask in result.reasons:
            hit = rejected & mask
            count = int(hit.sum())
            if count:
                diag.reasons[reason] = diag.reasons.get(reason, 0) + count
                covered |= hit
                if reason not in result.unresolvable:
                    all_unresolvable = False
        leftover = int((rejected & ~covered).sum())
        if leftover:
            # A plugin rejected nodes without saying why; still count them.
            diag.reasons["node(s) were rejected by a filter"] = diag.reasons.get("node(s) were rejected by a filter", 0) + leftover
            all_unresolvable = False
    diag.unresolvable = all_unresolvable and bool(diag.reasons)
    return diag


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


def schedule_pod(fwk: Framework, pod: PodInfo, snapshot: Snapshot, state: CycleState | None = None) -> ScheduleResult:
    state = state if state is not None else CycleState()
    status = fwk.run_pre_filters(state, pod, snapshot)
    if not status.ok:
        plugins = {status.plugin} if status.plugin else set()
        return ScheduleResult(None, Diagnosis(snapshot.num_nodes, pre_filter_message=status.message, plugins=plugins))
    feasible, trail = fwk.run_filters(state, pod, snapshot)
    rows = np.flatnonzero(feasible)
    if len(rows) == 0:
        return ScheduleResult(None, diagnose(snapshot, trail))
    rows = sample_rows(fwk, rows, snapshot)
    if len(rows) == 1 or not fwk.scores:
        return ScheduleResult(int(rows[0]))
    scores = fwk.run_scores(state, pod, snapshot, rows)
    return ScheduleResult(int(rows[int(np.argmax(scores))]))
