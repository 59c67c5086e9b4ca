"""The scheduler's cache: nodes, every scheduler's pods, PodGroups, Workloads, PDBs.

Fed by the watch handlers; read by the scheduling loop through `snapshot()`.
Pods placed by troupe are *assumed* onto their node as soon as the decision is
made, so the next cycle sees the capacity as used before the API confirms the
binding; a failed binding is *forgotten*. No I/O here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from ..api.composite import CompositePodGroup
from ..api.nodepool import CapacityPlan, NodeTemplate
from ..api.podgroup import PodGroup, Workload
from ..api.records import GroupKey, NodeInfo, PodDisruptionBudgetInfo, PodInfo
from ..api.resources import PODS
from ..api.sources.foreign import MemberCounts
from . import tree as trees
from .dra import DraStore
from .nodetable import NodeTable
from .snapshot import Snapshot


@dataclass(frozen=True, slots=True)
class InvalidObject:
    """An object the scheduler read but cannot use; `message` says why."""

    message: str


@dataclass(slots=True)
class _Accounted:
    node: str
    vector: np.ndarray
    nonzero: tuple[int, int]


class ClusterCache:
    def __init__(self) -> None:
        self.table = NodeTable()
        self.pods: dict[str, PodInfo] = {}
        self.assumed: dict[str, str] = {}  # pod uid -> node, until the API confirms
        self._accounted: dict[str, _Accounted] = {}
        # Pods that run (bound or assumed, not terminal), by node: what
        # InterPodAffinity, PodTopologySpread and NodePorts look at.
        self.pods_on_node: dict[str, dict[str, PodInfo]] = {}
        self._indexed_node: dict[str, str] = {}
        self._indexed_pod: dict[str, PodInfo] = {}
        # Running pods by label (key, value): selectors with an equality
        # requirement count only these instead of every running pod.
        self.pods_by_label: dict[tuple[str, str], dict[str, PodInfo]] = {}
        # The running pods with pod (anti-)affinity terms (their terms constrain newcomers).
        self.pods_with_affinity: dict[str, PodInfo] = {}
        self.namespace_labels: dict[str, Mapping[str, str]] = {}
        self.groups: dict[GroupKey, PodGroup | InvalidObject] = {}
        self.workloads: dict[GroupKey, Workload | InvalidObject] = {}
        # Trees (cluster/tree.py): CompositePodGroups, and the children each
        # parent key has among the PodGroups and the CompositePodGroups.
        self.composites: dict[GroupKey, CompositePodGroup | InvalidObject] = {}
        self.child_groups: dict[GroupKey, set[GroupKey]] = {}
        self.child_composites: dict[GroupKey, set[GroupKey]] = {}
        # Why a PodGroup that pods name does not exist and will not be made
        # (an opted-in Job asks for one troupe cannot make: api/jobs.py), and
        # why no PodGroup of a whole source can be read (its API not served:
        # by GroupKey.source). For the pods that wait for them.
        self.group_problems: dict[GroupKey, str] = {}
        self.source_problems: dict[str, str] = {}
        # A gang whose minCount troupe is raising (its Job was scaled) -> the
        # new minCount, until the PodGroup shows it: its pods wait for it.
        self.resizing: dict[GroupKey, int] = {}
        self.priority_classes: dict[str, int] = {}
        # PodDisruptionBudgets by (namespace, name): what preemption weighs victims against.
        self.pdbs: dict[tuple[str, str], PodDisruptionBudgetInfo] = {}
        self._members: dict[GroupKey, set[str]] = {}
        self._live: dict[GroupKey, int] = {}  # members not terminal and not deleting
        self.dra = DraStore()  # DeviceClasses, ResourceSlices, ResourceClaims
        # Autoscaling (docs/autoscaling.md): the NodePools troupe may ask for
        # nodes, the capacity asked for each unit now (counted against the
        # pools' limits), and per unit the domains whose capacity did not come
        # in time ("key=value" -> until when, the scheduler's clock).
        self.node_templates: dict[str, NodeTemplate] = {}
        self.capacity_asked: dict[GroupKey, CapacityPlan] = {}
        self.capacity_failed: dict[GroupKey, dict[str, float]] = {}

    # ------------------------------------------------------------------ nodes

    def upsert_node(self, node: NodeInfo) -> None:
        self.table.set_node(node)

    def remove_node(self, name: str) -> None:
        self.table.remove_node(name)

    def node(self, name: str) -> NodeInfo | None:
        row = self.table.row.get(name)
        return None if row is None else self.table.nodes[row]

    @property
    def node_count(self) -> int:
        return int(self.table.valid[: len(self.table.names)].sum())

    # ------------------------------------------------------------------- pods

    def _account(self, uid: str) -> None:
        """Make the table and the per-node pod index reflect where pod `uid` runs
        (or that it runs nowhere)."""
        pod = self.pods.get(uid)
        node = ""
        if pod is not None and not pod.terminal:
            node = pod.node_name or self.assumed.get(uid, "")
        old = self._accounted.get(uid)
        if old is None or old.node != node:
            if old is not None:
                self.table.add_usage(old.node, old.vector, old.nonzero, -1)
                del self._accounted[uid]
            if node and pod is not None:
                requests = dict(pod.requests)
                requests[PODS] = 1
                vec = self.table.vector(requests)
                nonzero = (pod.nonzero_cpu, pod.nonzero_memory)
                self.table.add_usage(node, vec, nonzero, +1)
                self._accounted[uid] = _Accounted(node, vec, nonzero)
        self._reindex(uid, pod if node else None, node)

    def _reindex(self, uid: str, pod: PodInfo | None, node: str) -> None:
        old_node = self._indexed_node.pop(uid, None)
        old_pod = self._indexed_pod.pop(uid, None)
        if old_node is not None:
            on = self.pods_on_node[old_node]
            on.pop(uid, None)
            if not on:
                del self.pods_on_node[old_node]
        if old_pod is not None:
            for label in old_pod.labels.items():
                bucket = self.pods_by_label.get(label)
                if bucket is not None:
                    bucket.pop(uid, None)
                    if not bucket:
                        del self.pods_by_label[label]
        self.pods_with_affinity.pop(uid, None)
        if pod is None:
            return
        self.pods_on_node.setdefault(node, {})[uid] = pod
        self._indexed_node[uid] = node
        self._indexed_pod[uid] = pod
        for label in pod.labels.items():
            self.pods_by_label.setdefault(label, {})[uid] = pod
        if pod.has_pod_affinity_terms:
            self.pods_with_affinity[uid] = pod

    def node_of(self, uid: str) -> str | None:
        """The node a running (bound or assumed) pod is on."""
        return self._indexed_node.get(uid)

    def upsert_pod(self, pod: PodInfo) -> PodInfo | None:
        old = self.pods.get(pod.uid)
        if old is not None:
            self._count_live(old, -1)
        self._count_live(pod, +1)
        self.pods[pod.uid] = pod
        if pod.node_name:
            # The API's word replaces our assumption (it may even name another node).
            self.assumed.pop(pod.uid, None)
        if old is not None and old.group != pod.group:
            self._unlink(old)
        if pod.group is not None:
            self._members.setdefault(pod.group, set()).add(pod.uid)
        if old is not None and old.requests != pod.requests:
            self._drop_accounting(pod.uid)
        self._account(pod.uid)
        return old

    def remove_pod(self, uid: str) -> PodInfo | None:
        old = self.pods.pop(uid, None)
        self.assumed.pop(uid, None)
        self._account(uid)
        if old is not None:
            self._count_live(old, -1)
            self._unlink(old)
        return old

    def _count_live(self, pod: PodInfo, sign: int) -> None:
        if pod.group is not None and not pod.terminal and not pod.deleting:
            key = pod.group
            count = self._live.get(key, 0) + sign
            if count:
                self._live[key] = count
            else:
                self._live.pop(key, None)

    def _drop_accounting(self, uid: str) -> None:
        old = self._accounted.pop(uid, None)
        if old is not None:
            self.table.add_usage(old.node, old.vector, old.nonzero, -1)

    def _unlink(self, pod: PodInfo) -> None:
        if pod.group is not None:
            key = pod.group
            members = self._members.get(key)
            if members is not None:
                members.discard(pod.uid)
                if not members:
                    del self._members[key]

    def assume(self, uid: str, node: str) -> None:
        if uid in self.pods and not self.pods[uid].node_name:
            self.assumed[uid] = node
            self._account(uid)

    def forget(self, uid: str) -> None:
        if self.assumed.pop(uid, None) is not None:
            self._account(uid)

    def placed_node(self, uid: str) -> str:
        """Where the pod is bound or assumed, "" if nowhere."""
        pod = self.pods.get(uid)
        if pod is None:
            return ""
        return pod.node_name or self.assumed.get(uid, "")

    # ----------------------------------------------------------------- groups

    def upsert_group(self, key: GroupKey, group: PodGroup | InvalidObject) -> None:
        _relink(self.child_groups, key, trees.parent_of(self.groups.get(key)), trees.parent_of(group))
        self.groups[key] = group
        if key in self.resizing and not (isinstance(group, PodGroup) and group.min_count < self.resizing[key]):
            del self.resizing[key]  # the new minCount arrived (or the group cannot take it)

    def remove_group(self, key: GroupKey) -> None:
        _relink(self.child_groups, key, trees.parent_of(self.groups.pop(key, None)), None)
        self.resizing.pop(key, None)

    def upsert_composite(self, key: GroupKey, composite: CompositePodGroup | InvalidObject) -> None:
        _relink(self.child_composites, key, trees.parent_of(self.composites.get(key)), trees.parent_of(composite))
        self.composites[key] = composite

    def remove_composite(self, key: GroupKey) -> None:
        _relink(self.child_composites, key, trees.parent_of(self.composites.pop(key, None)), None)

    def top_of(self, key: GroupKey) -> tuple[GroupKey | None, str | None]:
        """The tree unit the PodGroup `key`'s pods wait in (cluster/tree.py
        `top_of`), None for a group in no tree; and the chain's problem."""
        parent = trees.parent_of(self.groups.get(key))
        if parent is None:
            return None, None
        return trees.top_of(self.composites, parent)

    def leaves_under(self, key: GroupKey) -> list[GroupKey]:
        """The PodGroups under the CompositePodGroup `key`, at any depth."""
        out: list[GroupKey] = []
        todo, seen = [key], set()
        while todo:
            at = todo.pop()
            if at in seen:
                continue
            seen.add(at)
            out.extend(sorted(self.child_groups.get(at, ())))
            todo.extend(self.child_composites.get(at, ()))
        return out

    def taken_whole_above(self, key: GroupKey) -> GroupKey | None:
        """The highest CompositePodGroup above the PodGroup `key` whose
        `disruptionMode` is all (troupe's `PodGroup`), or unset on a gang:
        preemption takes its whole tree below it together, or nothing of it
        (upstream's getHighestAllAncestor; upstream takes an unset mode as
        single, troupe as it takes a gang PodGroup: a gang left below
        minGroupCount is useless, so it is never cut). None where there is none."""
        found: GroupKey | None = None
        parent = trees.parent_of(self.groups.get(key))
        for _ in range(trees.MAX_DEPTH):
            composite = self.composites.get(parent) if parent is not None else None
            if not isinstance(composite, CompositePodGroup):
                break
            mode = composite.spec.disruption_mode
            if mode == "PodGroup" or (mode is None and composite.is_gang):
                found = parent
            parent = composite.parent_key
        return found

    def tree_readiness(self, root: GroupKey) -> str | None:
        """Why the tree under `root` is not ready to be tried (cluster/tree.py), None if it is."""
        return trees.readiness(
            root, self.groups, self.composites, self.child_groups, self.child_composites, self.live_member_count
        )

    def tree(self, root: GroupKey) -> trees.Tree | None:
        """The tree under the cached CompositePodGroup `root`."""
        if root not in self.composites:
            return None
        return trees.build(root, self.groups, self.composites, self.child_groups, self.child_composites)

    def upsert_workload(self, key: GroupKey, workload: Workload | InvalidObject) -> None:
        self.workloads[key] = workload

    def remove_workload(self, key: GroupKey) -> None:
        self.workloads.pop(key, None)

    def members(self, key: GroupKey) -> Iterator[PodInfo]:
        for uid in sorted(self._members.get(key, ())):
            yield self.pods[uid]

    def live_member_count(self, key: GroupKey) -> int:
        """Pods of the group that exist and can still run (not terminal, not deleting)."""
        return self._live.get(key, 0)

    def member_summary(self, key: GroupKey) -> tuple[set[str], list[str]]:
        """One pass over the group's running pods: the schedulerNames they name,
        and the nodes of those bound or assumed to a node (one per pod)."""
        names: set[str] = set()
        nodes: list[str] = []
        for uid in self._members.get(key, ()):
            p = self.pods[uid]
            if p.terminal:
                continue
            names.add(p.scheduler_name)
            node = p.node_name or self.assumed.get(uid, "")
            if node:
                nodes.append(node)
        return names, nodes

    def made_leaves(self, key: GroupKey) -> list[GroupKey]:
        """The sub-groups troupe made of the PodGroup `key` (a Volcano
        PodGroup with subGroupPolicy, api/subgroups.py): the leaves of the tree
        with its key, none where it has no such tree."""
        root = self.composites.get(key)
        if not isinstance(root, CompositePodGroup) or root.made_from != key:
            return []
        return self.leaves_under(key)

    def member_counts(self, key: GroupKey) -> MemberCounts:
        """The group's pods as a source's status counts them (one pass), those
        of the sub-groups troupe made of it too."""
        pods = bound = running = succeeded = failed = 0
        occupied_by = ""
        uids = [u for k in (key, *self.made_leaves(key)) for u in self._members.get(k, ())]
        for uid in uids:
            p = self.pods[uid]
            pods += 1
            if not occupied_by and p.owners:
                occupied_by = ",".join(sorted(f"{p.namespace}/{name}" for name in p.owners))
            if p.phase == "Running":
                running += 1
            elif p.phase == "Succeeded":
                succeeded += 1
            elif p.phase == "Failed":
                failed += 1
            if not p.terminal and (p.node_name or uid in self.assumed):
                bound += 1
        return MemberCounts(pods, bound, running, succeeded, failed, occupied_by)

    # --------------------------------------------------------------- snapshot

    def snapshot(self) -> Snapshot:
        return Snapshot(
            self.table,
            self.pods_on_node,
            self.pods_with_affinity,
            self.namespace_labels,
            self.pods_by_label,
            self._indexed_node,
        )


def _relink(children: dict[GroupKey, set[GroupKey]], key: GroupKey, old: GroupKey | None, new: GroupKey | None) -> None:
    """Move `key` from the children of `old` to those of `new`."""
    if old == new:
        return
    if old is not None:
        siblings = children.get(old)
        if siblings is not None:
            siblings.discard(key)
            if not siblings:
                del children[old]
    if new is not None:
        children.setdefault(new, set()).add(key)
