"""GangScheduling: a gang waits until it can be tried whole, and binds whole or not at all.

PreEnqueue (as upstream's GangScheduling plugin): a pod of a PodGroup stays out
of the active queue until its PodGroup exists and, for a gang, at least
`minCount` of its pods exist. Permit: the group's pods already bound plus those
placed in this cycle must reach `minCount`; otherwise the cycle's placements
are discarded (the decision is atomic).
"""

from __future__ import annotations

from ..api.podgroup import PodGroup
from ..api.records import PodInfo
from ..framework.interface import GroupContext, PermitPlugin, PreEnqueuePlugin, Status


class GangScheduling(PreEnqueuePlugin, PermitPlugin):
    name = "GangScheduling"
    # Only more pods or a changed PodGroup help a short gang; the gate sees those.
    events = frozenset[str]()

    def pre_enqueue(self, pod: PodInfo) -> Status:
        key = pod.group
        if key is None:
            return Status.success()
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

    def permit(self, group: GroupContext) -> Status:
        if not group.is_gang:
            return Status.success()
        placed = group.placed_before + group.placed_now
        if placed >= group.min_count:
            return Status.success()
        return Status.unschedulable(f"needs {group.min_count} pods, {placed} fit", plugin=self.name)
