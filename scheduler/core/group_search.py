"""Placing a group's pods within a set of nodes: the default algorithm (each
pod in a fixed order, Filter/Score/pick, assumed into the snapshot), and the
search troupe adds where that order fails.

Upstream's default algorithm is greedy: a pod placed early can take the room
a later, larger or pickier pod needed, and a gang whose pods require affinity
to each other follows its first pod wherever that one went. Where the fixed
order falls short of minCount, `place_group` tries, in turn and within a step
budget (the profile's `podGroupScheduling.searchSteps`):

1. other orders: largest request first, then most constrained first (fewest
   feasible nodes);
2. for pods with required pod affinity to the group itself (topology key K):
   the fixed order inside each domain of K, most free room first;
3. for groups of at most MAX_BACKTRACK_PODS pods, a backtracking search
   over pods (most constrained first) and nodes (best fit first, at most
   MAX_BRANCH per pod), where nodes no pod of the group can tell apart (same
   free room, same labels the group refers to, no pods that matter) are
   tried once.

A group whose pods are all alike and have no affinity to each other keeps the
fixed order only (any order is the same for it), so it never pays for this.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..api.records import PodInfo
from ..cluster.snapshot import Snapshot
from ..framework.diagnosis import Diagnosis
from ..framework.framework import Framework
from ..framework.interface import SEARCH_BUDGET_SPENT, CycleState, GroupContext
from .schedule_one import schedule_pod

# Node classes tried per pod in the backtracking search: enough to be
# exhaustive on small clusters, bounded on large ones.
MAX_BRANCH = 16
# Larger groups get the other orders only (the search recurses once per pod).
MAX_BACKTRACK_PODS = 64


@dataclass(frozen=True, slots=True)
class Assignment:
    """A pod placed on a node in this cycle, with the CycleState its plugins
    wrote (Unreserve and PreBind read it)."""

    pod: PodInfo
    node: str
    state: CycleState = field(default_factory=CycleState, compare=False)


@dataclass(slots=True)
class Trial:
    """One run of the algorithm over a set of pods; its pods stay assumed in
    the snapshot until the caller restores it."""

    assignments: list[Assignment] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    failures: list[tuple[PodInfo, str, Diagnosis | None]] = field(default_factory=list)  # pod, why, filter diagnosis
    how: str = ""  # "" (the fixed order) or which search found it, for messages and tests
    spent: str = ""  # the search stopped for its budget, not for want of room: said after the reason


def reaches(ctx: GroupContext, trial: Trial) -> bool:
    """The trial places enough: minCount for a gang (with the pods placed
    before), every pod for any other group."""
    if ctx.is_gang:
        return ctx.placed_before + len(trial.assignments) >= ctx.min_count
    return len(trial.assignments) == len(ctx.pods)


class _Vectors:
    """Request vectors per pod spec, computed once per cycle."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self._by_spec: dict[Hashable, np.ndarray] = {}

    def __call__(self, pod: PodInfo) -> np.ndarray:
        vec = self._by_spec.get(pod.spec_key)
        if vec is None:
            vec = self._by_spec[pod.spec_key] = self.snapshot.request_vector(pod)[0]
        return vec


def place_in_order(
    fwk: Framework,
    snapshot: Snapshot,
    ctx: GroupContext,
    pods: Sequence[PodInfo],
    reserve: bool,
    allowed: np.ndarray | None = None,
) -> Trial:
    """The default algorithm: each pod in `pods`' order, assumed into the
    snapshot (and reserved, with `reserve`) as it is placed."""
    trial = Trial()
    vectors = _Vectors(snapshot)
    for i, pod in enumerate(pods):
        if ctx.is_gang and ctx.placed_before + len(trial.assignments) + (len(pods) - i) < ctx.min_count:
            break  # minCount is out of reach: the rest cannot change the answer
        state = CycleState()
        result = schedule_pod(fwk, pod, snapshot, state, allowed)
        if result.row is None:
            assert result.diagnosis is not None
            trial.failures.append((pod, result.diagnosis.message, result.diagnosis))
            continue
        vec = vectors(pod)
        node = snapshot.names[result.row]
        mark = snapshot.mark()
        snapshot.assume(result.row, vec, (pod.nonzero_cpu, pod.nonzero_memory), pod)
        if reserve and fwk.reserves(state):
            status = fwk.run_reserve(state, pod, node)
            if not status.ok:
                snapshot.restore(mark)
                trial.failures.append(
                    (pod, f"{status.plugin}: {status.message}" if status.plugin else status.message, None)
                )
                continue
        trial.assignments.append(Assignment(pod, node, state))
        trial.rows.append(result.row)
    return trial


def unreserve(fwk: Framework, assignments: Sequence[Assignment]) -> None:
    if fwk.reserve:
        for a in reversed(assignments):
            fwk.run_unreserve(a.state, a.pod, a.node)


def apply_trial(fwk: Framework, snapshot: Snapshot, found: Trial) -> Trial:
    """Assume and reserve what a trial found (on a snapshot restored since),
    as it was found: re-running the algorithm could pick other nodes."""
    trial = Trial(failures=list(found.failures), how=found.how)
    vectors = _Vectors(snapshot)
    for a, row in zip(found.assignments, found.rows):
        mark = snapshot.mark()
        snapshot.assume(row, vectors(a.pod), (a.pod.nonzero_cpu, a.pod.nonzero_memory), a.pod)
        if fwk.reserves(a.state):
            status = fwk.run_reserve(a.state, a.pod, a.node)
            if not status.ok:
                snapshot.restore(mark)
                trial.failures.append(
                    (a.pod, f"{status.plugin}: {status.message}" if status.plugin else status.message, None)
                )
                continue
        trial.assignments.append(a)
        trial.rows.append(row)
    return trial


@dataclass(slots=True)
class SearchBudget:
    """Pod placements the search may still try, shared by every candidate
    placement of one group cycle (so many domains do not multiply it)."""

    left: int
    spent: bool = False  # a search stopped on it
    total: int = field(init=False)  # what it started with

    def __post_init__(self) -> None:
        self.total = self.left

    def said(self) -> str:
        """What a trial that failed after the budget ran out says of it ("" where it did not)."""
        if not self.spent:
            return ""
        return (
            f"{SEARCH_BUDGET_SPENT} after {self.total} steps (podGroupScheduling.searchSteps), other orders not tried"
        )


def place_group(
    fwk: Framework,
    snapshot: Snapshot,
    ctx: GroupContext,
    reserve: bool,
    allowed: np.ndarray | None = None,
    budget: SearchBudget | None = None,
) -> Trial:
    """The fixed order; where it falls short of minCount and the group is one
    a fixed order can fail, the search (within `budget`; None: the profile's
    searchSteps). The found pods stay assumed (and reserved, with `reserve`)."""
    mark = snapshot.mark()
    trial = place_in_order(fwk, snapshot, ctx, ctx.pods, reserve, allowed)
    if budget is None:
        budget = SearchBudget(fwk.search_steps)
    if reaches(ctx, trial) or not ctx.is_gang or budget.left <= 0 or not searchable(ctx.pods):
        return trial
    if reserve:
        unreserve(fwk, trial.assignments)
    snapshot.restore(mark)
    found = GroupSearch(fwk, snapshot, ctx, allowed, budget).run()
    if found is None:
        # Nothing better: the fixed order's answer (and its reasons) stands,
        # and says when the search stopped for its budget.
        trial = place_in_order(fwk, snapshot, ctx, ctx.pods, reserve, allowed)
        trial.spent = budget.said()
        return trial
    if not reserve:
        return found
    snapshot.restore(mark)
    return apply_trial(fwk, snapshot, found)


def searchable(pods: Sequence[PodInfo]) -> bool:
    """Pods that differ from each other, or that require affinity to pods:
    the fixed order may miss a placement for them."""
    if len(pods) < 2:
        return False
    first = pods[0].spec_key
    return any(p.spec_key != first for p in pods) or any(p.pod_affinity for p in pods)


class _OutOfSteps(Exception):
    pass


class GroupSearch:
    """Steps 1-3 of the module docstring, sharing one step budget."""

    def __init__(
        self, fwk: Framework, snapshot: Snapshot, ctx: GroupContext, allowed: np.ndarray | None, budget: SearchBudget
    ) -> None:
        self.fwk, self.snapshot, self.ctx = fwk, snapshot, ctx
        self.allowed = allowed if allowed is not None else snapshot.valid
        self.budget = budget
        self.vectors = _Vectors(snapshot)
        self._dfs_order: list[PodInfo] = list(ctx.pods)
        self._class_keys: tuple[str, ...] | None = None

    def run(self) -> Trial | None:
        if not self._room_for_need():
            return None
        try:
            for how, pods in self._orders():
                found = self._in_order(pods, self.allowed, how)
                if found is not None:
                    return found
            for how, mask in self._affinity_domains():
                found = self._in_order(self.ctx.pods, mask, how)
                if found is not None:
                    return found
            if len(self.ctx.pods) <= MAX_BACKTRACK_PODS:
                return self._backtrack()
            return None
        except _OutOfSteps:
            return None

    # ------------------------------------------------------------ the budget

    def _step(self) -> None:
        self.budget.left -= 1
        if self.budget.left < 0:
            self.budget.spent = True
            raise _OutOfSteps

    def _room_for_need(self) -> bool:
        need = min(self.ctx.need, len(self.ctx.pods))
        return room_for(self.snapshot, self.allowed, [self.vectors(p) for p in self.ctx.pods], need)

    # ------------------------------------------------------------ 1. orders

    def _orders(self) -> list[tuple[str, list[PodInfo]]]:
        pods = list(self.ctx.pods)
        alloc = self.snapshot.alloc[self.allowed].max(axis=0).clip(min=1)
        share = {p.uid: float((self.vectors(p) / alloc).max()) for p in pods}
        largest = sorted(pods, key=lambda p: -share[p.uid])  # stable: the fixed order breaks ties
        counts = self._feasible_counts()
        constrained = sorted(pods, key=lambda p: (counts[p.uid], -share[p.uid]))
        self._dfs_order = constrained
        orders = [("largest first", largest)]
        if [p.uid for p in constrained] != [p.uid for p in largest]:
            orders.append(("most constrained first", constrained))
        return orders

    def _feasible_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        by_spec: dict[Hashable, int] = {}
        for pod in self.ctx.pods:
            n = by_spec.get(pod.spec_key) if not pod.pod_affinity else None
            if n is None:
                n = len(self._feasible_rows(pod, CycleState()))
                by_spec[pod.spec_key] = n
            counts[pod.uid] = n
        return counts

    def _feasible_rows(self, pod: PodInfo, state: CycleState) -> np.ndarray:
        fwk = self.fwk
        if not fwk.run_pre_filters(state, pod, self.snapshot).ok:
            return np.zeros(0, dtype=np.int64)
        feasible, _ = fwk.run_filters(state, pod, self.snapshot, self.allowed)
        return np.flatnonzero(feasible)

    def _in_order(self, pods: Sequence[PodInfo], allowed: np.ndarray, how: str) -> Trial | None:
        for _ in pods:
            self._step()
        mark = self.snapshot.mark()
        trial = place_in_order(self.fwk, self.snapshot, self.ctx, pods, reserve=False, allowed=allowed)
        if reaches(self.ctx, trial):
            trial.how = how
            return trial
        self.snapshot.restore(mark)
        return None

    # ------------------------------------------------ 2. affinity to the group

    def _affinity_domains(self) -> list[tuple[str, np.ndarray]]:
        """Per topology key that pods of the group require affinity to other
        pods of the group on: each domain of it (most free room first)."""
        keys: list[str] = []
        pods = self.ctx.pods
        for pod in pods:
            for term in pod.pod_affinity:
                if term.selector is None or term.topology_key in keys:
                    continue
                namespaces = term.namespaces or (pod.namespace,)
                if any(p.namespace in namespaces and term.selector.matches(p.labels) for p in pods):
                    keys.append(term.topology_key)
        out: list[tuple[str, np.ndarray]] = []
        snapshot = self.snapshot
        free = (snapshot.alloc - snapshot.req).clip(min=0)
        alloc_total = snapshot.alloc[snapshot.valid].sum(axis=0).clip(min=1)
        for key in keys:
            ids, values = snapshot.domains(key)
            within = self.allowed & (ids >= 0)
            room = np.zeros(len(values))
            for col in range(free.shape[1]):
                room += np.bincount(ids[within], weights=free[within, col], minlength=len(values)) / alloc_total[col]
            for d in sorted(range(len(values)), key=lambda d: (-room[d], d)):
                mask = within & (ids == d)
                if mask.any():
                    out.append((f"in {key}={values[d]}", mask))
        return out

    # ------------------------------------------------------- 3. backtracking

    def _backtrack(self) -> Trial | None:
        ctx, snapshot = self.ctx, self.snapshot
        pods = self._dfs_order
        need = min(ctx.need, len(pods))
        self._class_keys = label_keys(self.snapshot, self.ctx.pods, self.ctx.topology_keys)
        trial = Trial(how="backtracking")
        mark = snapshot.mark()
        if self._dfs(pods, 0, need, trial):
            return trial
        snapshot.restore(mark)
        return None

    def _dfs(self, pods: Sequence[PodInfo], i: int, need: int, trial: Trial) -> bool:
        placed = len(trial.assignments)
        if placed >= need:
            return True
        if i == len(pods) or placed + (len(pods) - i) < need:
            return False
        pod, snapshot = pods[i], self.snapshot
        state = CycleState()
        rows = self._feasible_rows(pod, state)
        vec = self.vectors(pod)
        for row in self._candidates(rows, vec):
            self._step()
            mark = snapshot.mark()
            snapshot.assume(row, vec, (pod.nonzero_cpu, pod.nonzero_memory), pod)
            trial.assignments.append(Assignment(pod, snapshot.names[row], state))
            trial.rows.append(row)
            if self._dfs(pods, i + 1, need, trial):
                return True
            trial.assignments.pop()
            trial.rows.pop()
            snapshot.restore(mark)  # as it was when `state` was computed: it stays valid
        # Leave this pod out (a gang may place fewer than all its pods).
        return self._dfs(pods, i + 1, need, trial)

    def _candidates(self, rows: np.ndarray, vec: np.ndarray) -> list[int]:
        return node_classes(self.snapshot, rows, vec, self._class_keys)


def room_for(snapshot: Snapshot, rows: np.ndarray, requests: Sequence[np.ndarray], need: int) -> bool:
    """A cheap necessary condition: the free room of `rows` (a mask),
    summed, holds the `need` smallest of `requests` in every resource."""
    free = (snapshot.alloc[rows] - snapshot.req[rows]).clip(min=0).sum(axis=0, dtype=np.float64)  # no int64 wrap
    smallest = np.sort(np.stack(requests), axis=0)[:need]
    return bool((smallest.sum(axis=0) <= free).all())


def label_keys(snapshot: Snapshot, pods: Sequence[PodInfo], topology_keys: Sequence[str]) -> tuple[str, ...] | None:
    """The node label keys `pods` can tell nodes apart by (with the
    `topology_keys` their groups are constrained on), or None when pods on a
    node matter (no node classes then)."""
    keys: set[str] = set(topology_keys)
    for pod in pods:
        if pod.pod_affinity or pod.pod_anti_affinity or pod.topology_spread or pod.host_ports:
            return None
        keys.update(pod.node_selector)
        for term in pod.required_affinity or ():
            keys.update(r.key for r in term.match_expressions)
            keys.update(r.key for r in term.match_fields)
    if snapshot.pods_with_affinity:
        return None
    return tuple(sorted(keys))


def node_classes(snapshot: Snapshot, rows: np.ndarray, vec: np.ndarray, keys: tuple[str, ...] | None) -> list[int]:
    """Of `rows`, one per class of nodes a pod asking `vec` cannot tell apart
    (same free room after it, same values of the label `keys`, same taints;
    None: every row its own class), best fit first (least free room left),
    at most MAX_BRANCH."""
    if len(rows) == 0:
        return []
    free_after = snapshot.alloc[rows] - snapshot.req[rows] - vec
    scale = snapshot.alloc[snapshot.valid].max(axis=0).clip(min=1)
    slack = (free_after / scale).sum(axis=1)
    order = np.lexsort((rows, slack))
    chosen: list[int] = []
    seen: set[Hashable] = set()
    for j in order.tolist():
        row = int(rows[j])
        key = _node_class(snapshot, keys, row, free_after[j])
        if key in seen:
            continue
        seen.add(key)
        chosen.append(row)
        if len(chosen) >= MAX_BRANCH:
            break
    return chosen


def _node_class(snapshot: Snapshot, keys: tuple[str, ...] | None, row: int, free_after: np.ndarray) -> Hashable:
    node = snapshot.nodes[row]
    if keys is None or node is None:
        return row
    return (
        tuple(free_after.tolist()),
        tuple(node.labels.get(k) for k in keys),
        node.taints,
        node.unschedulable,
        node.name if "metadata.name" in keys else "",
    )
