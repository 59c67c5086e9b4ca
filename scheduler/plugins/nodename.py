"""NodeName: a pod that names a node in spec.nodeName fits only there.

troupe queues only unbound pods, so this matters only for pods that set
`nodeName` after being queued; kept for parity with upstream's profile."""

from __future__ import annotations

from ..api.records import NodeInfo, PodInfo
from ..framework import events as E
from ..framework.interface import NodeFilterPlugin

REASON = "node(s) didn't match the requested node name"


class NodeName(NodeFilterPlugin):
    name = "NodeName"
    events = frozenset({E.NODE_ADD})
    unresolvable = True  # preemption cannot make a node match

    def sign_pod(self, pod: PodInfo) -> object:
        return pod.node_name

    def filter_node(self, pod: PodInfo, node: NodeInfo) -> str | None:
        if pod.node_name and pod.node_name != node.name:
            return REASON
        return None
