"""SchedulingGates: a pod with spec.schedulingGates is not tried until they are removed."""

from __future__ import annotations

from ..api.records import PodInfo
from ..framework.interface import PreEnqueuePlugin, Status


class SchedulingGates(PreEnqueuePlugin):
    name = "SchedulingGates"

    def pre_enqueue(self, pod: PodInfo) -> Status:
        if pod.scheduling_gates:
            return Status.unschedulable(
                f"waiting for scheduling gates: [{' '.join(pod.scheduling_gates)}]", plugin=self.name, resolvable=False
            )
        return Status.success()
