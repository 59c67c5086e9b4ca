"""Prometheus metrics, named as upstream kube-scheduler's."""

from __future__ import annotations

import platform
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from .. import version

if TYPE_CHECKING:
    from ..api.records import PodInfo
    from ..queue.scheduling_queue import SchedulingQueue
    from .group_search import Assignment
    from .schedule_podgroup import GroupDecision

SCHEDULE_ATTEMPTS = Counter(
    "scheduler_schedule_attempts_total",
    "Number of attempts to schedule pods, by result (scheduled, unschedulable, error).",
    ["result", "profile"],
)
ATTEMPT_DURATION = Histogram(
    "scheduler_scheduling_attempt_duration_seconds",
    "Scheduling attempt latency (one PodGroup cycle: snapshot, algorithm, decision).",
    ["result"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
GROUP_WAIT = Histogram(
    "troupe_podgroup_wait_seconds",
    "For each cycle that placed pods of a PodGroup: from the creation of the oldest pod it placed to the cycle.",
    buckets=(1, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 28800, 86400),
)
QUEUE_INCOMING = Counter(
    "troupe_queue_moved_units_total",
    "Scheduling units (a PodGroup's pending pods, or a lone pod) moved out of the unschedulable pool "
    "(to active, or to backoff if theirs has not expired), by the cluster event that moved them.",
    ["event"],
)
RESYNC_DROPPED = Counter(
    "troupe_resync_dropped_objects_total",
    "Cached objects the periodic resync found deleted in the API (their DELETED event was missed).",
    ["kind"],
)
PREEMPTION_ATTEMPTS = Counter(
    "scheduler_preemption_attempts_total", "Total preemption attempts in the cluster till now"
)
PREEMPTION_VICTIMS = Histogram(
    "scheduler_preemption_victims",
    "Number of selected preemption victims",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
)
POD_BINDINGS = Counter("troupe_pod_bindings_total", "Bindings posted, by result.", ["result"])
BIND_DURATION = Histogram(
    "troupe_binding_duration_seconds",
    "One pod's bind, from its first POST to its outcome (retries through an API server or etcd outage "
    "included; the client rate limit's first wait not).",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
GROUP_DECISIONS = Counter("troupe_podgroup_decisions_total", "PodGroup cycle outcomes.", ["outcome"])
GROUP_STATUS_WRITES = Counter(
    "troupe_group_status_writes_total",
    "PodGroup status patches the API server accepted (a standby's refused writes and failed tries are not "
    "counted; writes that would change nothing are not sent), by the group's API group (source) and what they "
    "write: 'conditions' for a decision (and "
    "preemption's DisruptionTarget), 'counts' for the member counts and phase some sources keep.",
    ["source", "write"],
)
RESERVED_PODS = Gauge(
    "troupe_reserved_pods", "Pending pods nominated to reserved room (Reservation), waiting for running pods to finish."
)
RESERVED_ROOM = Gauge(
    "troupe_reserved_room",
    "Room held by reservations, by resource (cpu in cores, memory in bytes).",
    ["resource"],
)
RESERVATION_AGE = Gauge(
    "troupe_reservation_oldest_age_seconds", "How long the oldest reservation held now has been waiting for its room."
)
BUILD_INFO = Gauge("troupe_build_info", "Always 1; the labels say which troupe and Python run.", ["version", "python"])
BUILD_INFO.labels(version=version(), python=platform.python_version()).set(1)


class _QueueCollector(Collector):
    """scheduler_pending_pods and troupe_pending_oldest_age_seconds, read from
    the scheduler's queue when /metrics is scraped. Values set by the loop
    would go stale: it runs only when there is a unit to pop, so the last
    value before the queue empties would stay."""

    def __init__(self) -> None:
        self._queue: weakref.ref[SchedulingQueue] | None = None
        self._clock: Callable[[], float] = time.monotonic

    def watch(self, queue: SchedulingQueue, clock: Callable[[], float]) -> None:
        self._queue, self._clock = weakref.ref(queue), clock  # weak: a Scheduler a test dropped can go

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily(
                "scheduler_pending_pods",
                "Number of pending pods, by queue (active, backoff, unschedulable, gated, in-flight).",
                labels=["queue"],
            ),
            GaugeMetricFamily(
                "troupe_pending_oldest_age_seconds",
                "How long the longest-waiting scheduling unit (a PodGroup's pending pods, or a lone pod) of each "
                "queue has been pending, since this replica first saw its oldest pending pod (0: the queue is empty).",
                labels=["queue"],
            ),
        )

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return self._families()  # names only: the registry need not collect to register

    def collect(self) -> Iterable[GaugeMetricFamily]:
        pending, oldest = self._families()
        queue = self._queue() if self._queue is not None else None
        if queue is None:  # no loop yet, or a standby: nothing pending to report
            return pending, oldest
        now = self._clock()
        first_seen: dict[str, float] = {}
        for unit in queue.units():
            if unit.pods:
                state = unit.state.value
                first_seen[state] = min(first_seen.get(state, unit.first_seen), unit.first_seen)
        for state, count in queue.counts().items():  # every state, empty ones too
            pending.add_metric([state], count)
            oldest.add_metric([state], max(now - first_seen[state], 0.0) if state in first_seen else 0.0)
        return pending, oldest


QUEUE = _QueueCollector()
REGISTRY.register(QUEUE)

_RESULT = {"Scheduled": "scheduled", "Unschedulable": "unschedulable", "SchedulerError": "error"}
# Label children resolved once: .labels() costs more than the observation itself.
_DURATION = {r: ATTEMPT_DURATION.labels(result=r) for r in ("scheduled", "unschedulable", "error")}
_DECISIONS = {o: GROUP_DECISIONS.labels(outcome=o) for o in _RESULT}
_ATTEMPTS: dict[tuple[str, str], object] = {}


def _attempts(result: str, profile: str):  # type: ignore[no-untyped-def]
    child = _ATTEMPTS.get((result, profile))
    if child is None:
        child = _ATTEMPTS[(result, profile)] = SCHEDULE_ATTEMPTS.labels(result=result, profile=profile)
    return child


def observe_attempt(decision: GroupDecision, seconds: float, profile: str = "") -> None:
    result = _RESULT.get(decision.outcome, "error")
    _DURATION[result].observe(seconds)
    if decision.assignments:
        _attempts("scheduled", profile).inc(len(decision.assignments))
    if decision.unplaced:
        _attempts("unschedulable" if result != "error" else "error", profile).inc(len(decision.unplaced))
    (_DECISIONS.get(decision.outcome) or GROUP_DECISIONS.labels(outcome=decision.outcome)).inc()
    if decision.group_key is not None and decision.assignments:
        waited = _since_oldest(decision.assignments, time.time())
        if waited is not None:
            GROUP_WAIT.observe(waited)


def _since_oldest(assignments: list[Assignment], now: float) -> float | None:
    """Seconds from the oldest creationTimestamp of the placed pods to wall-clock
    `now` (at least 0: the API server's clock may run ahead); None without one."""
    # The API server writes one RFC 3339 form (second precision, "Z"), so the
    # smallest string is the oldest time and only it is parsed.
    oldest = min((a.pod.creation_timestamp for a in assignments if a.pod.creation_timestamp), default="")
    try:
        return max(now - datetime.fromisoformat(oldest).timestamp(), 0.0) if oldest else None
    except ValueError:
        return None


def observe_queue(queue: SchedulingQueue, clock: Callable[[], float] = time.monotonic) -> None:
    """Report this queue's pending pods (read when scraped). `clock` is the
    queue's; time.monotonic is the runtime's."""
    QUEUE.watch(queue, clock)


def observe_reservations(
    nominated: Mapping[str, tuple[str, PodInfo]],
    reserved: Mapping[str, tuple[float | None, float]],
    wall: Callable[[], float] = time.time,
) -> None:
    """Reserved pods, the room they hold and the oldest one's age, read from
    these (the scheduler's own) maps when /metrics is scraped, so they fall to
    0 when the last reservation ends even if no cycle runs after it."""

    def pods() -> list[PodInfo]:
        return [nominated[uid][1] for uid in list(reserved) if uid in nominated]

    RESERVED_PODS.set_function(lambda: len(pods()))
    RESERVED_ROOM.labels(resource="cpu").set_function(lambda: sum(p.requests.get("cpu", 0) for p in pods()) / 1000)
    RESERVED_ROOM.labels(resource="memory").set_function(lambda: sum(p.requests.get("memory", 0) for p in pods()))
    RESERVATION_AGE.set_function(lambda: max((wall() - since for _, since in list(reserved.values())), default=0.0))
