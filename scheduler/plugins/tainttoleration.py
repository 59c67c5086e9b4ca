"""TaintToleration: a node's NoSchedule/NoExecute taints must be tolerated;
untolerated PreferNoSchedule taints lower the score (upstream)."""

from __future__ import annotations

import numpy as np

from ..api.records import NodeInfo, PodInfo
from ..cluster.snapshot import Snapshot
from ..framework import events as E
from ..framework.interface import CycleState, NodeFilterPlugin, ScorePlugin

MAX_NODE_SCORE = 100


class TaintToleration(NodeFilterPlugin, ScorePlugin):
    name = "TaintToleration"
    events = frozenset({E.NODE_ADD, E.NODE_TAINT})
    unresolvable = True  # preemption cannot make a node match

    static_score = True

    def sign_pod(self, pod: PodInfo) -> object:
        return pod.tolerations

    def filter_node(self, pod: PodInfo, node: NodeInfo) -> str | None:
        for taint in node.taints:
            if taint.effect not in ("NoSchedule", "NoExecute"):
                continue
            if not any(t.tolerates(taint) for t in pod.tolerations):
                return f"node(s) had untolerated taint {taint}"
        return None

    def score(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, rows: np.ndarray) -> np.ndarray:
        # Upstream counts untolerated PreferNoSchedule taints, using only the
        # pod's tolerations with an empty or PreferNoSchedule effect.
        tols = [t for t in pod.tolerations if t.effect in ("", "PreferNoSchedule")]
        counts = np.zeros(len(rows), dtype=np.int64)
        for i, row in enumerate(rows):
            node = snapshot.nodes[row]
            if node is None or not node.taints:
                continue
            counts[i] = sum(
                1
                for taint in node.taints
                if taint.effect == "PreferNoSchedule" and not any(t.tolerates(taint) for t in tols)
            )
        return counts

    def normalize(self, scores: np.ndarray) -> np.ndarray:
        # Reverse: fewer intolerable taints is better (DefaultNormalizeScore reverse=true).
        top = int(scores.max()) if len(scores) else 0
        if top == 0:
            return np.full(len(scores), MAX_NODE_SCORE, dtype=np.int64)
        return MAX_NODE_SCORE - scores * MAX_NODE_SCORE // top
