"""GangScheduling: a gang waits until it can be tried whole, and binds whole or not at all.

PreEnqueue (as upstream's GangScheduling plugin): a pod of a PodGroup stays out
of the active queue until its PodGroup exists and, for a gang, at least
`minCount` of its pods exist. Permit: the group's pods already bound plus those
placed in this cycle must reach `minCount`, and, where the group asks a
minimum per task (Volcano's `minTaskMember`), that many of each task;
otherwise the cycle's placements are discarded (the decision is atomic).
"""

from __future__ import annotations

from collections import Counter

from ..api.composite import CompositePodGroup
from ..api.podgroup import PodGroup
from ..api.records import GroupKey, PodInfo
from ..framework.interface import GroupContext, PermitPlugin, PreEnqueuePlugin, Status


class GangScheduling(PreEnqueuePlugin, PermitPlugin):
    name = "GangScheduling"
    # Only more pods or a changed PodGroup help a short gang; the gate sees those.
    events = frozenset[str]()

    def pre_enqueue(self, pod: PodInfo) -> Status:
        key = pod.group
        if key is None:
            return Status.success()
        if pod.tree is not None and key in self.handle.cache.groups:
            return self._tree_ready(pod.tree)
        cache = self.handle.cache
        group = cache.groups.get(key)
        if group is None:
            problem = cache.source_problems.get(key.source)
            if problem is not None:  # no PodGroup of its kind can be read here
                return Status.unschedulable(f"waiting for {key}: {problem}", plugin=self.name)
            problem = cache.group_problems.get(key)
            if problem is not None:  # e.g. its Job asks for a group troupe cannot make
                return Status.unschedulable(
                    f"waiting for {key}, which troupe does not create: {problem}", plugin=self.name
                )
            return Status.unschedulable(f"waiting for {key} to be created", plugin=self.name)
        if not isinstance(group, PodGroup) or not group.is_gang or group.problem:
            return Status.success()  # an invalid group or one with a problem: the cycle reports it
        resizing = cache.resizing.get(key)
        if resizing is not None:
            return Status.unschedulable(
                f"waiting for {key}: its minCount is being raised from {group.min_count} to {resizing}",
                plugin=self.name,
            )
        have = cache.live_member_count(key)
        if have < group.min_count:
            # Two reasons: the first never changes while the gang fills up (it
            # goes on every pod), the second is the live count (for the group).
            return Status.unschedulable(
                f"waiting for pods of {key}: minCount is {group.min_count}",
                f"{have} exist",
                plugin=self.name,
            )
        return Status.success()

    def _tree_ready(self, root: GroupKey) -> Status:
        """A pod of a tree waits until the whole tree is ready (cluster/tree.py)."""
        cache = self.handle.cache
        composite = cache.composites.get(root)
        made = isinstance(composite, CompositePodGroup) and composite.made_from is not None  # Volcano sub-groups
        where = str(root) if made else f"CompositePodGroup {root.namespace}/{root.name}"
        if root not in cache.composites:
            return Status.unschedulable(f"waiting for {where} to be created", plugin=self.name)
        why = cache.tree_readiness(root)
        if why is not None:
            return Status.unschedulable(f"waiting for {where} tree to meet quorum", why, plugin=self.name)
        return Status.success()

    def permit(self, group: GroupContext) -> Status:
        if not group.is_gang:
            return Status.success()
        placed = group.placed_before + group.placed_now
        if placed < group.min_count:
            return Status.unschedulable(f"needs {group.min_count} pods, {placed} fit", plugin=self.name)
        if group.group is not None and group.group.min_per_task:
            return self._tasks(group)
        return Status.success()

    def _tasks(self, group: GroupContext) -> Status:
        """Every task has its minimum among the pods bound and placed now."""
        assert group.group is not None
        cache = self.handle.cache
        have = Counter(p.task for p in group.placed_pods)
        for p in cache.members(group.key):
            if not p.terminal and (p.node_name or p.uid in cache.assumed):
                have[p.task] += 1
        short = [
            f"task {task}: needs {n}, {have[task]} fit"
            for task, n in sorted(group.group.min_per_task.items())
            if have[task] < n
        ]
        if short:
            return Status.unschedulable("minTaskMember: " + "; ".join(short), plugin=self.name)
        return Status.success()
