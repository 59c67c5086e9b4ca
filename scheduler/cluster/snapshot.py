"""A per-cycle, columnar copy of the cluster: nodes are rows, resources columns.

Taken once per group cycle. Placements found during the cycle are assumed
into the snapshot only, so a group that is rejected leaves no trace; the cache
learns about placements only when the decision is applied.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from ..api.objects import PODS, NodeInfo, PodInfo
from .nodetable import NodeTable


class Snapshot:
    def __init__(self, table: NodeTable) -> None:
        n = len(table.names)
        self.names: list[str] = list(table.names)
        self.nodes: list[NodeInfo | None] = list(table.nodes)
        self.valid: np.ndarray = table.valid[:n].copy()
        self.alloc: np.ndarray = table.alloc[:n].copy()
        self.req: np.ndarray = table.req[:n].copy()
        self.nonzero: np.ndarray = table.nonzero[:n].copy()
        self.resources: list[str] = list(table.resources)
        self.column: dict[str, int] = dict(table.column)
        self.static_generation: int = table.static_generation
        self.num_nodes: int = int(self.valid.sum())
        self.row: Mapping[str, int] = dict(table.row)

    def __len__(self) -> int:
        return len(self.names)

    def request_vector(self, pod: PodInfo) -> tuple[np.ndarray, tuple[str, ...]]:
        """The pod's requests over the snapshot's columns (one pod slot included),
        and the resources it asks for that no node in the snapshot offers."""
        vec = np.zeros(len(self.resources), dtype=np.int64)
        unknown = []
        for name, amount in pod.requests.items():
            col = self.column.get(name)
            if col is None:
                unknown.append(name)
            else:
                vec[col] = amount
        vec[self.column[PODS]] = 1
        return vec, tuple(sorted(unknown))

    def assume(self, row: int, requests: np.ndarray, nonzero: tuple[int, int]) -> None:
        self.req[row] += requests
        self.nonzero[row, 0] += nonzero[0]
        self.nonzero[row, 1] += nonzero[1]
