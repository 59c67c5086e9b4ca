"""An example third-party plugin package for troupe.

Two plugins, found by troupe through the `troupe.plugins` entry-point group
(see ../../pyproject.toml) and enabled in the SchedulerConfiguration:

- `PreferNodeLabel` (Score): 100 on nodes whose label `label` has the value
  `value` (or, without `value`, that have the label at all), 0 elsewhere.
  Written the columnar way: one vectorized comparison over the snapshot's rows.
- `RequireNodeLabel` (Filter): rejects nodes without that label (value).
  Written the simple way: a per-node `filter_node`, vectorized by troupe.

Both take `NodeLabelArgs` (`label`, optional `value`): a pydantic model that
each declares as its `Args`; troupe validates the configuration against it
and passes the instance to the constructor.

Both read only node labels, never node usage or the pod, so both are
*static*: troupe computes them once per set of node labels and reuses the
result for every pod (`sign_pod` returns a constant because the answer does
not depend on the pod).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np
from pydantic import Field

from scheduler.api.config import PluginArgs
from scheduler.api.records import NodeInfo, PodInfo
from scheduler.cluster.snapshot import Snapshot
from scheduler.framework.interface import CycleState, Handle, NodeFilterPlugin, ScorePlugin

__all__ = ["NodeLabelArgs", "PreferNodeLabel", "RequireNodeLabel"]
__version__ = "0.1.0"

MAX_NODE_SCORE = 100


class NodeLabelArgs(PluginArgs):
    """`{label: str, value?: str}`. troupe validates the pluginConfig args
    against this model and reports each problem with its path from the file's
    top (`profiles[0].pluginConfig[1].args.label: Field required`). PluginArgs
    makes unknown keys errors, so a typo does not silently change what the
    plugin does, and types strict, so `value: 3` must be quoted in YAML."""

    label: str = Field(min_length=1, description="the node label key, e.g. node.example.com/pool")
    value: str | None = None


class PreferNodeLabel(ScorePlugin):
    name = "PreferNodeLabel"
    Args = NodeLabelArgs
    static_score = True  # reads node labels only

    def __init__(self, args: NodeLabelArgs, handle: Handle) -> None:
        super().__init__(args, handle)
        self.label, self.value = args.label, args.value

    def sign_pod(self, pod: PodInfo) -> Hashable:
        return ()  # the same scores for every pod

    def score(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, rows: np.ndarray) -> np.ndarray:
        # O(len(rows)) numpy; `domains` (row -> index of the label's value, -1
        # without the label) is built once per label and set of nodes, O(nodes).
        ids, values = snapshot.domains(self.label)
        ids = ids[rows]
        if self.value is None:
            match = ids >= 0
        elif self.value in values:
            match = ids == values.index(self.value)
        else:
            match = np.zeros(len(rows), dtype=bool)
        return np.where(match, MAX_NODE_SCORE, 0).astype(np.int64)


class RequireNodeLabel(NodeFilterPlugin):
    name = "RequireNodeLabel"
    Args = NodeLabelArgs

    def __init__(self, args: NodeLabelArgs, handle: Handle) -> None:
        super().__init__(args, handle)
        self.label, self.value = args.label, args.value
        want = self.label if self.value is None else f"{self.label}={self.value}"
        self.reason = f"node(s) didn't have label {want}"

    def sign_pod(self, pod: PodInfo) -> Hashable:
        return ()  # the same answer for every pod: computed once per set of node labels

    def filter_node(self, pod: PodInfo, node: NodeInfo) -> str | None:
        # O(1) per node; troupe runs it over all nodes once per label change.
        have = node.labels.get(self.label)
        if have is None or (self.value is not None and have != self.value):
            return self.reason
        return None

    def unresolvable_reasons(self, reasons: Mapping[str, Any]) -> frozenset[str]:
        return frozenset(reasons)  # preempting pods cannot add a label to a node
