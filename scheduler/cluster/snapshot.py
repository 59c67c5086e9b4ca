"""A per-cycle, columnar copy of the cluster: nodes are rows, resources columns.

Taken once per group cycle. Placements found during the cycle are assumed
into the snapshot only, so a group that is rejected leaves no trace; the cache
learns about placements only when the decision is applied.

The resource columns are copies. The pod index (which pods run where) is the
cache's own, shared read-only: a cycle runs without yielding to the event
loop, so nothing changes it meanwhile; pods assumed during the cycle are kept
in `assumed` on top of it; pods removed for a trial (preemption asks "would
the pod fit without these?") are kept in `removed`.

Trials are undone with `mark()` / `restore(mark)` (upstream backs a node up
and restores it around a preemption trial): every change is journaled, and
restore undoes the changes after the mark in reverse, usage, counts and row
versions alike. A change that is not an append (a removal, a restore) gives
the snapshot a new `serial`, so state that plugins or caches keep by
"appended since I last looked" (`changed_rows`, `assumed`) starts over.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass

import numpy as np

from ..api.records import LabelSelector, NodeInfo, PodInfo
from ..api.resources import PODS
from .nodetable import NodeTable

PodPredicate = Callable[[PodInfo], bool]
_SERIALS = itertools.count(1)


@dataclass(frozen=True, slots=True)
class _Change:
    """One journaled change: `sign` +1 a pod assumed onto `row`, -1 one removed."""

    row: int
    requests: np.ndarray
    nonzero: tuple[int, int]
    pod: PodInfo | None
    sign: int
    old_version: int


@dataclass(frozen=True, slots=True)
class Mark:
    """Where `restore` goes back to."""

    journal: int
    assumed: int


def equality_label(selector: LabelSelector) -> tuple[str, str] | None:
    """A (key, value) every pod matching `selector` must carry, if there is one."""
    if selector.match_labels:
        return selector.match_labels[0]
    for r in selector.match_expressions:
        if r.operator == "In" and len(r.values) == 1:
            return (r.key, r.values[0])
    return None


class Snapshot:
    def __init__(
        self,
        table: NodeTable,
        pods_on_node: Mapping[str, Mapping[str, PodInfo]] | None = None,
        pods_with_affinity: Mapping[str, PodInfo] | None = None,
        namespace_labels: Mapping[str, Mapping[str, str]] | None = None,
        pods_by_label: Mapping[tuple[str, str], Mapping[str, PodInfo]] | None = None,
        pod_nodes: Mapping[str, str] | None = None,
    ) -> None:
        n = len(table.names)
        names, nodes, row, resources, column = table.frozen()
        self.names: list[str] = names
        self.nodes: list[NodeInfo | None] = nodes
        self.valid: np.ndarray = table.valid[:n].copy()
        self.alloc: np.ndarray = table.alloc[:n].copy()
        self.req: np.ndarray = table.req[:n].copy()
        self.nonzero: np.ndarray = table.nonzero[:n].copy()
        self.row_version: np.ndarray = table.row_version[:n].copy()
        self._versions = table.versions
        self.serial: int = next(_SERIALS)  # tells snapshots apart without keeping them alive
        self.resources: list[str] = resources
        self.column: dict[str, int] = column
        self.static_generation: int = table.static_generation
        self.num_nodes: int = int(self.valid.sum())
        self.row: Mapping[str, int] = row
        self.pods_on_node: Mapping[str, Mapping[str, PodInfo]] = pods_on_node or {}
        self.pods_with_affinity: Mapping[str, PodInfo] = pods_with_affinity or {}
        self.namespace_labels: Mapping[str, Mapping[str, str]] = namespace_labels or {}
        self.pods_by_label: Mapping[tuple[str, str], Mapping[str, PodInfo]] = pods_by_label or {}
        self._pod_nodes: Mapping[str, str] = pod_nodes or {}
        self.assumed: list[tuple[int, PodInfo]] = []  # placed in this cycle, in order
        # Every row whose usage changed since `serial` was drawn, in order: row
        # caches recompute just these while the serial stays the same.
        self.changed_rows: list[int] = []
        self.removed: set[str] = set()  # uids of running pods removed for a trial
        self._journal: list[_Change] = []
        self._counts: dict[Hashable, tuple[PodPredicate, np.ndarray]] = {}
        self._domains: dict[str, tuple[np.ndarray, list[str]]] = {}
        self._alloc_total: np.ndarray | None = None
        self._vectors: dict[Hashable, tuple[np.ndarray, tuple[str, ...]]] = {}  # a pod's requests -> request_vector
        self._table = table

    def __len__(self) -> int:
        return len(self.names)

    # -------------------------------------------------------------- resources

    def request_vector(self, pod: PodInfo) -> tuple[np.ndarray, tuple[str, ...]]:
        """The pod's requests over the snapshot's columns (one pod slot included),
        and the resources it asks for that no node in the snapshot offers.
        Made once per set of requests (a gang's pods share one) and read-only."""
        key = tuple(pod.requests.items())
        hit = self._vectors.get(key)
        if hit is not None:
            return hit
        vec = np.zeros(len(self.resources), dtype=np.int64)
        unknown = []
        for name, amount in pod.requests.items():
            col = self.column.get(name)
            if col is None:
                unknown.append(name)
            else:
                vec[col] = amount
        vec[self.column[PODS]] = 1
        vec.flags.writeable = False
        hit = self._vectors[key] = (vec, tuple(sorted(unknown)))
        return hit

    def assume(self, row: int, requests: np.ndarray, nonzero: tuple[int, int], pod: PodInfo | None = None) -> None:
        """Place a pod on `row` for the rest of the cycle."""
        self._journal.append(_Change(row, requests, nonzero, pod, +1, int(self.row_version[row])))
        self.req[row] += requests
        self.nonzero[row, 0] += nonzero[0]
        self.nonzero[row, 1] += nonzero[1]
        self.row_version[row] = next(self._versions)
        self.changed_rows.append(row)
        if pod is not None:
            self.assumed.append((row, pod))
            for predicate, counts in self._counts.values():
                if predicate(pod):
                    counts[row] += 1

    def hold(self, row: int, pod: PodInfo) -> None:
        """Count `pod`'s requests as used on `row` without placing it there:
        room nominated to a pod not bound yet (no affinity or spread counts it)."""
        self.assume(row, self.request_vector(pod)[0], (pod.nonzero_cpu, pod.nonzero_memory))

    def remove_pod(self, pod: PodInfo) -> bool:
        """Take a running pod (bound, or assumed before this cycle) off its node
        for the rest of the cycle, or until `restore`. False if it runs nowhere
        the snapshot knows, or is already removed."""
        node = self._pod_nodes.get(pod.uid)
        row = self.row.get(node) if node is not None else None
        if row is None or pod.uid in self.removed:
            return False
        vec, _ = self.request_vector(pod)
        nonzero = (pod.nonzero_cpu, pod.nonzero_memory)
        self._journal.append(_Change(row, vec, nonzero, pod, -1, int(self.row_version[row])))
        self.req[row] -= vec
        self.nonzero[row, 0] -= nonzero[0]
        self.nonzero[row, 1] -= nonzero[1]
        self.row_version[row] = next(self._versions)
        self.removed.add(pod.uid)
        for predicate, counts in self._counts.values():
            if predicate(pod):
                counts[row] -= 1
        self._new_serial()
        return True

    def mark(self) -> Mark:
        return Mark(len(self._journal), len(self.assumed))

    def restore(self, mark: Mark) -> None:
        """Undo every change since `mark` (assumed pods and removals), newest first."""
        if len(self._journal) == mark.journal:
            return
        for change in reversed(self._journal[mark.journal :]):
            row, sign = change.row, change.sign
            self.req[row] -= sign * change.requests
            self.nonzero[row, 0] -= sign * change.nonzero[0]
            self.nonzero[row, 1] -= sign * change.nonzero[1]
            self.row_version[row] = change.old_version  # the row is as it was: caches of it are valid again
            pod = change.pod
            if pod is None:
                continue
            if sign < 0:
                self.removed.discard(pod.uid)
            for predicate, counts in self._counts.values():
                if predicate(pod):
                    counts[row] -= sign
        del self._journal[mark.journal :]
        del self.assumed[mark.assumed :]
        self._new_serial()

    def _new_serial(self) -> None:
        """Not an append: whoever tracks the snapshot incrementally starts over."""
        self.serial = next(_SERIALS)
        self.changed_rows.clear()

    # ------------------------------------------------------------------- pods

    def pods_on_row(self, row: int) -> list[PodInfo]:
        """Running pods on the node of `row`, including those assumed in this cycle."""
        pods = [p for p in self.pods_on_node.get(self.names[row], {}).values() if p.uid not in self.removed]
        pods += [p for r, p in self.assumed if r == row]
        return pods

    def node_of(self, uid: str) -> str | None:
        """The node a running (bound or assumed before this cycle) pod is on;
        None once it is removed from this snapshot."""
        return None if uid in self.removed else self._pod_nodes.get(uid)

    def count_matching(
        self, key: Hashable, predicate: PodPredicate, selector: LabelSelector | None = None
    ) -> np.ndarray:
        """Per row, how many running pods satisfy `predicate` (assumed ones too).

        Computed once per snapshot and `key`, then kept current as pods are
        assumed. `key` must identify the predicate (e.g. the selector and
        namespaces it tests). If every pod the predicate accepts matches
        `selector`, pass it: a selector with an equality requirement
        (`app=x`, or `app In [x]`) visits only the pods carrying that label,
        not every running pod. Do not modify the result.
        """
        hit = self._counts.get(key)
        if hit is not None:
            return hit[1]
        counts = np.zeros(len(self.names), dtype=np.int64)
        label = equality_label(selector) if selector is not None else None
        if label is not None:
            for uid, pod in self.pods_by_label.get(label, {}).items():
                if uid in self.removed:
                    continue
                node = self._pod_nodes.get(uid)
                row = self.row.get(node) if node is not None else None
                if row is not None and predicate(pod):
                    counts[row] += 1
        else:
            for node, pods in self.pods_on_node.items():
                row = self.row.get(node)
                if row is None:
                    continue
                n = 0
                for pod in pods.values():
                    if predicate(pod) and pod.uid not in self.removed:
                        n += 1
                counts[row] = n
        for row, pod in self.assumed:
            if predicate(pod):
                counts[row] += 1
        self._counts[key] = (predicate, counts)
        return counts

    # --------------------------------------------------------------- topology

    def alloc_total(self) -> np.ndarray:
        """Allocatable summed over the nodes, per column (fixed for the snapshot's life)."""
        if self._alloc_total is None:
            # The table's total, cached there until a node changes (the snapshot's alloc is a copy of it).
            self._alloc_total = self._table.alloc_total()[: self.alloc.shape[1]].copy()
        return self._alloc_total

    def free_total(self) -> dict[str, int]:
        """Allocatable minus requested, each node's clipped at 0, summed over
        the nodes, per resource (coscheduling's CheckClusterResource)."""
        # Python ints: amounts that each fit an int64 column can add up beyond it.
        free = np.clip(self.alloc - self.req, 0, None)[self.valid].sum(axis=0, dtype=object)
        return {r: int(free[c]) for r, c in self.column.items() if c < free.shape[0]}

    def domains(self, topology_key: str) -> tuple[np.ndarray, list[str]]:
        """Row -> index into the list of values of node label `topology_key`
        (-1 for rows whose node lacks the label or does not exist)."""
        hit = self._domains.get(topology_key)
        if hit is None:
            hit = self._domains[topology_key] = self._table.domains(topology_key, len(self.names))
        return hit
