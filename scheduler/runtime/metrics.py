"""Prometheus metrics, named as upstream kube-scheduler's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import Counter, Gauge, Histogram

if TYPE_CHECKING:
    from ..podgroup.cycle import GroupDecision
    from ..queue.scheduling_queue import SchedulingQueue

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
POD_BINDINGS = Counter("troupe_pod_bindings_total", "Bindings posted, by result.", ["result"])
GROUP_DECISIONS = Counter("troupe_podgroup_decisions_total", "PodGroup cycle outcomes.", ["outcome"])

_RESULT = {"Scheduled": "scheduled", "Unschedulable": "unschedulable", "SchedulerError": "error"}


def observe_attempt(decision: "GroupDecision", seconds: float, profile: str = "") -> None:
    result = _RESULT.get(decision.outcome, "error")
    ATTEMPT_DURATION.labels(result=result).observe(seconds)
    if decision.placements:
        SCHEDULE_ATTEMPTS.labels(result="scheduled", profile=profile).inc(len(decision.placements))
    if decision.unplaced:
        SCHEDULE_ATTEMPTS.labels(result="unschedulable" if result != "error" else "error", profile=profile).inc(len(decision.unplaced))
    GROUP_DECISIONS.labels(outcome=decision.outcome).inc()


def observe_queue(queue: "SchedulingQueue") -> None:
    for state, count in queue.counts().items():
        PENDING_PODS.labels(queue=state).set(count)
