"""Saying why a unit held by PreEnqueue waits, without flooding the API.

A gang whose pods arrive within `delay` seconds is never reported at all.
While its pods keep arriving, only the PodGroup's condition (one write, the
live count) says so; each pod gets its event once no pod has arrived for
`delay`, or `max_delay` seconds after the unit was first held: a 5000-pod
gang filling for 15 s otherwise cost a write a pod, more than its binding.
Each pod is told the stable part of the message once, and again only when it
changes, so a gang of N pods arriving one by one costs O(N) writes.

A held pod gets no PodScheduled condition (writer.pod_waiting), as upstream
keeps it: autoscalers provision for PodScheduled=False/Unschedulable, and a
gang that cannot start yet must not get nodes (docs/autoscaling.md).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable

from ..api import constants as C
from ..api.composite import COMPOSITE_SCHEDULED, CompositePodGroup
from ..api.podgroup import PodGroup
from ..api.records import PodInfo
from ..cluster.cache import ClusterCache
from ..framework.interface import Status
from ..queue.scheduling_queue import SchedulingQueue, State, UnitKey
from .outputs import StatusWriter

log = logging.getLogger(__name__)


class WaitingReporter:
    def __init__(
        self,
        cache: ClusterCache,
        queue: SchedulingQueue,
        writer: StatusWriter,
        still_waiting: Callable[[str], Callable[[], bool]],
        delay: float = 0.0,
        max_delay: float = 30.0,
    ) -> None:
        """`still_waiting(uid)`: a check the writer runs before it writes a
        pod's condition. `delay` 0 reports at once (no running loop needed)."""
        self.cache = cache
        self.queue = queue
        self.writer = writer
        self.still_waiting = still_waiting
        self.delay = delay
        self.max_delay = max_delay
        self.enabled = False  # set once the initial listing is in the cache
        # What each waiting pod / gated unit was last told (so it is told once).
        self._pod_told: dict[str, str] = {}
        self._unit_told: dict[UnitKey, str] = {}
        self._gate_status: dict[UnitKey, Status] = {}
        self._timers: dict[UnitKey, asyncio.TimerHandle] = {}
        # Per held unit: when it was first held, when a pod last joined it (loop time).
        self._held_since: dict[UnitKey, float] = {}
        self._last_arrival: dict[UnitKey, float] = {}

    # ------------------------------------------------------------ bookkeeping

    def held(self, key: UnitKey, status: Status) -> None:
        """PreEnqueue holds the unit back, for this reason."""
        self._gate_status[key] = status

    def admitted(self, key: UnitKey) -> None:
        """PreEnqueue lets the unit in: forget what it was told."""
        self._gate_status.pop(key, None)
        self._unit_told.pop(key, None)
        self._held_since.pop(key, None)
        self._last_arrival.pop(key, None)

    def forget_pod(self, uid: str) -> None:
        self._pod_told.pop(uid, None)

    # -------------------------------------------------------------- reporting

    def report_if_gated(self, key: UnitKey, new_pod: PodInfo | None = None) -> None:
        """The unit changed (a pod joined, its PodGroup changed): if it is still
        held, report it now or after the delay. Before the initial listing is
        in, nothing is (start_scheduling reports every held unit then)."""
        if not self.enabled:
            return
        unit = self.queue.unit(key)
        if unit is None or unit.state != State.GATED:
            return
        if self.delay <= 0:
            self._report(key, new_pod)
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        self._held_since.setdefault(key, now)
        if new_pod is not None:
            self._last_arrival[key] = now
        if key not in self._timers:
            self._timers[key] = loop.call_later(self.delay, self._due, key)

    def _due(self, key: UnitKey) -> None:
        """The delay is over: if the unit is still held, report it; while pods
        still arrive (for at most `max_delay`), report only the PodGroup's
        count and look again once they stop."""
        self._timers.pop(key, None)
        unit = self.queue.unit(key)
        if unit is None or unit.state != State.GATED:
            self._held_since.pop(key, None)
            self._last_arrival.pop(key, None)
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        quiet = now - self._last_arrival.get(key, -math.inf)
        held = now - self._held_since.setdefault(key, now)
        if quiet < self.delay and held < self.max_delay:
            self._report(key, pods=False)
            self._timers[key] = loop.call_later(self.delay - quiet, self._due, key)
            return
        self._report(key, everyone=True)

    def _report(self, key: UnitKey, new_pod: PodInfo | None = None, everyone: bool = False, pods: bool = True) -> None:
        """Each pod gets the stable part of the message (`reasons[0]`, e.g.
        "waiting for pods of PodGroup ns/g: minCount is 4"); the PodGroup's
        condition gets the whole message, counts included (only that with
        `pods=False`)."""
        status = self._gate_status.get(key)
        unit = self.queue.unit(key)
        if status is None or unit is None or not self.enabled:
            return
        stable = status.reasons[0] if status.reasons else status.message
        if not pods:
            targets = []
        elif self._unit_told.get(key) != stable or everyone:
            self._unit_told[key] = stable
            targets = [q.pod for q in unit.pods.values()]
        elif new_pod is not None:
            targets = [new_pod]
        else:
            targets = []
        told = 0
        for pod in targets:
            if self._pod_told.get(pod.uid) != stable:
                self._pod_told[pod.uid] = stable
                self.writer.pod_waiting(pod, stable, self.still_waiting(pod.uid))
                self.writer.pod_event(pod, "Warning", C.EVENT_FAILED_SCHEDULING, stable, "Scheduling")
                told += 1
        if told and (key.is_group or key.is_tree):
            log.info("%d pod(s) of %s told why they wait: %s", told, key, status.message)
        self._report_group(key, status.message)

    def _report_group(self, key: UnitKey, message: str) -> None:
        """The unit's PodGroup, or its tree's root, says why it waits (the
        whole message), unless it was scheduled before."""
        group_key, tree_key = key.group_key, key.tree_key
        made = self.cache.composites.get(tree_key) if tree_key is not None else None
        if isinstance(made, CompositePodGroup) and made.made_from == tree_key:
            group_key, tree_key = tree_key, None  # a Volcano PodGroup's sub-groups: it says it
        if group_key is not None:
            group = self.cache.groups.get(group_key)
            if isinstance(group, PodGroup):
                current = group.condition(C.POD_GROUP_SCHEDULED)
                if current is None or current.status != "True":
                    self.writer.group_condition(group, "False", C.REASON_UNSCHEDULABLE, message)
        elif tree_key is not None:
            composite = self.cache.composites.get(tree_key)  # absent while it is the missing ancestor
            if isinstance(composite, CompositePodGroup):
                current = composite.condition(COMPOSITE_SCHEDULED)
                if current is None or current.status != "True":
                    self.writer.composite_condition(composite, "False", C.REASON_UNSCHEDULABLE, message)
