"""NodeUnschedulable: nodes with spec.unschedulable take only pods that tolerate
the `node.kubernetes.io/unschedulable:NoSchedule` taint (upstream)."""

from __future__ import annotations

from ..api.records import NodeInfo, PodInfo, Taint
from ..framework import events as E
from ..framework.interface import NodeFilterPlugin

_UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")
REASON = "node(s) were unschedulable"


class NodeUnschedulable(NodeFilterPlugin):
    name = "NodeUnschedulable"
    events = frozenset({E.NODE_ADD, E.NODE_TAINT})
    unresolvable = True  # preemption cannot make a node match

    def sign_pod(self, pod: PodInfo) -> object:
        return pod.tolerations

    def filter_node(self, pod: PodInfo, node: NodeInfo) -> str | None:
        if not node.unschedulable:
            return None
        if any(t.tolerates(_UNSCHEDULABLE_TAINT) for t in pod.tolerations):
            return None
        return REASON
