"""Why a pod fits nowhere: upstream's FitError / Diagnosis, over the columnar snapshot.

Counts per reason make the message (`0/5 nodes are available: 2 node(s) had
untolerated taint {gpu: true}, 3 Insufficient cpu.`); the filter trail behind
them answers, node by node, what each node said (upstream's NodeToStatus),
which is what a PostFilter reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..cluster.snapshot import Snapshot
from .interface import Code, FilterResult, Status

NO_NODE_AVAILABLE = "0/{n} nodes are available"
REJECTED_WITHOUT_REASON = "node(s) were rejected by a filter"

# (plugin name, the rows it saw, what it answered), in filter order.
FilterTrail = list[tuple[str, np.ndarray, FilterResult]]


@dataclass(slots=True)
class Diagnosis:
    num_nodes: int
    reasons: dict[str, int] = field(default_factory=dict)
    pre_filter_message: str = ""
    pre_filter_plugin: str = ""
    unresolvable: bool = False  # preemption cannot help any node
    plugins: set[str] = field(default_factory=set)  # upstream's UnschedulablePlugins
    trail: FilterTrail = field(default_factory=list)
    names: list[str] = field(default_factory=list)  # row -> node name (the snapshot's)

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

    def node_statuses(self) -> dict[str, Status]:
        """Node name -> the status of the first filter that rejected it (its
        reasons from that filter). A PreFilter rejection rejects every node
        with the same status. O(nodes x filters); only a PostFilter asks."""
        out: dict[str, Status] = {}
        if self.pre_filter_message:
            status = Status(
                Code.UNSCHEDULABLE_AND_UNRESOLVABLE if self.unresolvable else Code.UNSCHEDULABLE,
                (self.pre_filter_message,),
                self.pre_filter_plugin,
            )
            return {name: status for name in self.names if name}
        for plugin, seen, result in self.trail:
            rejected = np.flatnonzero(seen & ~result.feasible)
            for row in rejected:
                name = self.names[row]
                if name in out:
                    continue
                reasons = tuple(reason for reason, mask in result.reasons if mask[row]) or (REJECTED_WITHOUT_REASON,)
                hard = all(reason in result.unresolvable for reason in reasons)
                code = Code.UNSCHEDULABLE_AND_UNRESOLVABLE if hard else Code.UNSCHEDULABLE
                out[name] = Status(code, reasons, plugin)
        return out


def diagnose(snapshot: Snapshot, trail: FilterTrail, allowed: np.ndarray | None = None) -> Diagnosis:
    """Counts the trail's rejections per reason. With `allowed` (a placement's
    nodes), nodes outside it are counted under one reason of their own."""
    diag = Diagnosis(num_nodes=snapshot.num_nodes, trail=trail, names=snapshot.names)
    all_unresolvable = True
    if allowed is not None:
        outside = int((snapshot.valid & ~allowed).sum())
        if outside:
            diag.reasons["node(s) were outside the placement"] = outside
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
            diag.reasons[REJECTED_WITHOUT_REASON] = diag.reasons.get(REJECTED_WITHOUT_REASON, 0) + leftover
            all_unresolvable = False
    diag.unresolvable = all_unresolvable and bool(diag.reasons)
    return diag
