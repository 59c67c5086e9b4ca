"""The columnar node table the cache keeps up to date incrementally.

Rows are nodes, columns are resources. A row is created the first time a node
or a pod bound to it is seen (pods can arrive before their node), and is
recycled once neither the node nor any pod on it remains. `valid` marks rows
whose Node object exists.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

import numpy as np

from ..api.quantity import INT64_MAX
from ..api.records import NodeInfo
from ..api.resources import CPU, EPHEMERAL_STORAGE, MEMORY, PODS

BASE_RESOURCES = (CPU, MEMORY, EPHEMERAL_STORAGE, PODS)


class NodeTable:
    def __init__(self, capacity: int = 64) -> None:
        self.resources: list[str] = list(BASE_RESOURCES)
        self.column: dict[str, int] = {r: i for i, r in enumerate(self.resources)}
        self.names: list[str] = []
        self.row: dict[str, int] = {}
        self.nodes: list[NodeInfo | None] = []
        self._free: list[int] = []
        self.alloc = np.zeros((capacity, len(self.resources)), dtype=np.int64)
        self.req = np.zeros_like(self.alloc)
        self.nonzero = np.zeros((capacity, 2), dtype=np.int64)  # cpu, memory for scoring
        self.pod_count = np.zeros(capacity, dtype=np.int64)  # pods on the row (valid node or not)
        self.valid = np.zeros(capacity, dtype=bool)
        # A fresh number from one counter whenever a row's allocatable or usage
        # changes (snapshots draw from the same counter when they assume), so
        # equal versions mean equal rows: results that depend on one row only
        # (row-local plugins) are reused across cycles for unchanged rows.
        self.row_version = np.zeros(capacity, dtype=np.int64)
        self.versions = itertools.count(1)
        # Bumped whenever labels, taints or the set of nodes change: filters that
        # read only those (and the pod spec) may reuse results across cycles.
        self.static_generation = 0
        self._alloc_total: np.ndarray | None = None  # allocatable summed over nodes, until alloc changes
        self._domain_cache: dict[tuple[str, int, int], tuple[np.ndarray, list[str]]] = {}
        # Read-only copies of names/nodes/row/columns for snapshots, rebuilt only
        # after the rows, nodes or columns change (not on usage changes).
        self._frozen: tuple[list[str], list[NodeInfo | None], dict[str, int], list[str], dict[str, int]] | None = None

    # --------------------------------------------------------------- columns

    def frozen(self) -> tuple[list[str], list[NodeInfo | None], dict[str, int], list[str], dict[str, int]]:
        """(names, nodes, row, resources, column) as copies no one mutates: shared
        by every snapshot until the structure changes."""
        if self._frozen is None:
            self._frozen = (list(self.names), list(self.nodes), dict(self.row), list(self.resources), dict(self.column))
        return self._frozen

    def column_of(self, resource: str) -> int:
        col = self.column.get(resource)
        if col is None:
            self._frozen = None
            col = len(self.resources)
            self.resources.append(resource)
            self.column[resource] = col
            pad = np.zeros((self.alloc.shape[0], 1), dtype=np.int64)
            self.alloc = np.hstack([self.alloc, pad])
            self.req = np.hstack([self.req, pad.copy()])
        return col

    def vector(self, amounts: Mapping[str, int]) -> np.ndarray:
        """Amounts as a row over the current columns (adding columns as needed)."""
        cols = [(self.column_of(name), amount) for name, amount in amounts.items()]
        vec = np.zeros(len(self.resources), dtype=np.int64)
        for col, amount in cols:
            vec[col] = amount
        return vec

    # ------------------------------------------------------------------ rows

    def _grow(self) -> None:
        n = self.alloc.shape[0] * 2
        for name in ("alloc", "req", "nonzero"):
            old = getattr(self, name)
            new = np.zeros((n, old.shape[1]), dtype=old.dtype)
            new[: old.shape[0]] = old
            setattr(self, name, new)
        for name in ("pod_count", "valid", "row_version"):
            old = getattr(self, name)
            new = np.zeros(n, dtype=old.dtype)
            new[: old.shape[0]] = old
            setattr(self, name, new)

    def ensure_row(self, name: str) -> int:
        idx = self.row.get(name)
        if idx is not None:
            return idx
        if self._free:
            idx = self._free.pop()
            self.names[idx] = name
            self.nodes[idx] = None
        else:
            idx = len(self.names)
            if idx >= self.alloc.shape[0]:
                self._grow()
            self.names.append(name)
            self.nodes.append(None)
        self.row[name] = idx
        self.row_version[idx] = next(self.versions)
        self._frozen = None
        return idx

    def _maybe_release(self, idx: int) -> None:
        if self.nodes[idx] is None and self.pod_count[idx] == 0:
            del self.row[self.names[idx]]
            self.names[idx] = ""
            self.alloc[idx] = 0
            self.req[idx] = 0
            self.nonzero[idx] = 0
            self.row_version[idx] = next(self.versions)
            self._free.append(idx)
            self._frozen = None

    def alloc_total(self) -> np.ndarray:
        """Allocatable summed over every node, per column (rows without a node hold 0)."""
        if self._alloc_total is None or self._alloc_total.shape[0] != self.alloc.shape[1]:
            self._alloc_total = column_totals(self.alloc)
        return self._alloc_total

    def set_node(self, node: NodeInfo) -> None:
        idx = self.ensure_row(node.name)
        self._alloc_total = None
        old = self.nodes[idx]
        vec = self.vector(node.allocatable)
        self.alloc[idx] = 0
        self.alloc[idx, : vec.shape[0]] = vec
        self.nodes[idx] = node
        self.valid[idx] = True
        self.row_version[idx] = next(self.versions)
        self._frozen = None
        if (
            old is None
            or old.labels != node.labels
            or old.taints != node.taints
            or old.unschedulable != node.unschedulable
        ):
            self.static_generation += 1

    def remove_node(self, name: str) -> None:
        idx = self.row.get(name)
        if idx is None or self.nodes[idx] is None:
            return
        self.nodes[idx] = None
        self.valid[idx] = False
        self.alloc[idx] = 0
        self._alloc_total = None
        self.row_version[idx] = next(self.versions)
        self._frozen = None
        self.static_generation += 1
        self._maybe_release(idx)

    def add_usage(self, node_name: str, requests: np.ndarray, nonzero: tuple[int, int], sign: int) -> None:
        idx = self.ensure_row(node_name)
        self.req[idx, : requests.shape[0]] += sign * requests
        self.nonzero[idx, 0] += sign * nonzero[0]
        self.nonzero[idx, 1] += sign * nonzero[1]
        self.pod_count[idx] += sign
        self.row_version[idx] = next(self.versions)
        if sign < 0:
            self._maybe_release(idx)

    def domains(self, topology_key: str, n: int) -> tuple[np.ndarray, list[str]]:
        """Row -> index of the node's value for label `topology_key` (-1: none),
        and the values. Cached until labels or the set of nodes change."""
        ck = (topology_key, self.static_generation, n)
        hit = self._domain_cache.get(ck)
        if hit is not None:
            return hit
        if len(self._domain_cache) > 64:
            self._domain_cache.clear()
        index: dict[str, int] = {}
        ids = np.full(n, -1, dtype=np.int64)
        for i in range(n):
            node = self.nodes[i]
            if node is None or not self.valid[i]:
                continue
            value = node.labels.get(topology_key)
            if value is not None:
                ids[i] = index.setdefault(value, len(index))
        hit = self._domain_cache[ck] = (ids, list(index))
        return hit


def column_totals(matrix: np.ndarray) -> np.ndarray:
    """Each column summed, at most INT64_MAX: amounts that each fit an int64
    column can add up beyond it (two nodes of `pods: 5E`), and an int64 sum
    would wrap to a negative total."""
    exact = matrix.sum(axis=0, dtype=object)  # Python ints: no wrap
    return np.array([min(int(v), INT64_MAX) for v in np.atleast_1d(exact)], dtype=np.int64)
