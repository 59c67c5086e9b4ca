"""Prometheus metrics, named as upstream kube-scheduler's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from prometheus_client import Counter, Gauge, Histogram

if TYPE_CHECKING:
    from ..api.records import PodInfo
    from ..queue.scheduling_queue import SchedulingQueue
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
PENDING_PODS = Gauge(
    "scheduler_pending_pods",
    "Number of pending pods, by queue (active, backoff, unschedulable, gated, in-flight).",
    ["queue"],
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


def observe_queue(queue: SchedulingQueue) -> None:
    for state, count in queue.counts().items():
        PENDING_PODS.labels(queue=state).set(count)


def observe_reservations(
    nominated: Mapping[str, tuple[str, PodInfo]], reserved: Mapping[str, tuple[float | None, float]], now: float
) -> None:
    """Reserved pods, the room they hold and the oldest one's age (wall clock `now`)."""
    pods = [nominated[uid][1] for uid in reserved if uid in nominated]
    RESERVED_PODS.set(len(pods))
    RESERVED_ROOM.labels(resource="cpu").set(sum(p.requests.get("cpu", 0) for p in pods) / 1000)
    RESERVED_ROOM.labels(resource="memory").set(sum(p.requests.get("memory", 0) for p in pods))
    RESERVATION_AGE.set(max((now - since for _, since in reserved.values()), default=0.0))
