"""NodePorts: a pod's host ports must be free on the node (upstream
pkg/scheduler/framework/plugins/nodeports/node_ports.go).

A wanted (ip, protocol, port) conflicts with a port in use on the node by a
running or assumed pod when protocol and port are equal and either the IPs
are equal or one of them is 0.0.0.0 (upstream HostPortInfo.CheckConflict; an
empty IP means 0.0.0.0 and an empty protocol TCP). Pods placed earlier in the
same cycle (e.g. the other pods of a gang) count, through the snapshot's
`count_matching`, which is kept current as pods are assumed.

Differs from upstream: no separate PreFilter (a pod without host ports
returns early from Filter, which is what upstream's PreFilter Skip achieves);
the in-place-resize deferral is not modelled. Which container ports count
(containers and restartable init containers) is decided by the pod parser.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..api.records import HostPort, PodInfo
from ..cluster.snapshot import Snapshot
from ..framework import events as E
from ..framework.interface import CycleState, FilterPlugin, FilterResult

ERR_REASON = "node(s) didn't have free ports for the requested pod ports"
BIND_ALL = "0.0.0.0"  # upstream DefaultBindAllHostIP

PortKey = tuple[str, str, int]  # ip, protocol, port


def sanitize(hp: HostPort) -> PortKey:
    return (hp.ip or BIND_ALL, hp.protocol or "TCP", int(hp.port))


def conflicts(want: PortKey, used: PortKey) -> bool:
    """Upstream HostPortInfo.CheckConflict for one used port."""
    ip, protocol, port = want
    if port <= 0 or used[1] != protocol or used[2] != port:
        return False
    return ip == BIND_ALL or used[0] in (ip, BIND_ALL)


def uses_conflicting_port(want: PortKey) -> Callable[[PodInfo], bool]:
    def predicate(pod: PodInfo) -> bool:
        # Most pods have no host ports: this is one attribute read for them.
        return any(conflicts(want, sanitize(hp)) for hp in pod.host_ports)

    return predicate


class NodePorts(FilterPlugin):
    name = "NodePorts"
    events = frozenset({E.NODE_ADD, E.ASSIGNED_POD_DELETE})

    _all_rows: np.ndarray | None = None

    def _all(self, n: int) -> FilterResult:
        # Shared read-only mask: a pod without host ports costs O(1) here.
        if self._all_rows is None or len(self._all_rows) != n:
            mask = np.ones(n, dtype=bool)
            mask.flags.writeable = False
            self._all_rows = mask
        return FilterResult(self._all_rows)

    def filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> FilterResult:
        # Without host ports: O(1). With them: per distinct wanted port, one pass
        # over the running pods the first time in a snapshot (shared by every
        # pod of the cycle asking for the same port), then O(nodes) numpy.
        n = len(snapshot)
        if not pod.host_ports:
            return self._all(n)
        blocked = np.zeros(n, dtype=bool)
        for want in sorted({sanitize(hp) for hp in pod.host_ports if hp.port > 0}):
            counts = snapshot.count_matching(("NodePorts", *want), uses_conflicting_port(want))
            blocked |= counts > 0
        if not blocked.any():
            return self._all(n)
        return FilterResult(~blocked, [(ERR_REASON, blocked)])
