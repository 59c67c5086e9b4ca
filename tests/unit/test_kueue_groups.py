"""Kueue's plain pod groups in the live scheduler: the group's size is the
count its pods agree on (Kueue's rule, api/sources/kueue.py), the same in
whatever order their events arrive; pods that disagree are the group's
problem, said as a SchedulerError; and a change of the size requeues the
group's unit, which nothing else would."""

from __future__ import annotations

from itertools import permutations
from typing import Any

import pytest

from scheduler.api.podgroup import PodGroup
from scheduler.api.records import GroupKey
from scheduler.api.sources import kueue
from scheduler.core.scheduler import Scheduler
from scheduler.queue.scheduling_queue import State, group_unit

from .builders import pod_body
from .test_runtime_scheduler import Recorder, drain, node, sched  # noqa: F401 (fixture)

KEY = GroupKey("ns", "q", kueue.GROUP)


def kueue_pod(name: str, total: str | None, *, phase: str | None = None, version: str = "1") -> dict[str, Any]:
    """A pod of Kueue's group ns/q declaring `total` (None: no annotation)."""
    body = pod_body(name, "1", namespace="ns", labels={kueue.LABEL: "q"}, phase=phase, resource_version=version)
    body["metadata"]["annotations"] = {kueue.TOTAL_COUNT: total} if total is not None else {}
    return body


def implied(s: Scheduler) -> PodGroup:
    group = s.cache.groups[KEY]
    assert isinstance(group, PodGroup)
    return group


DISAGREEING = [kueue_pod("a", "3"), kueue_pod("b", "3"), kueue_pod("c", "4")]


@pytest.mark.parametrize("order", list(permutations(range(3))))
def test_pods_that_disagree_are_the_groups_problem_whatever_the_event_order(sched, order):
    s, rec = sched
    for i in order:
        s.on_pod(DISAGREEING[i])
    s.on_pod(kueue_pod("a", "3", version="2"))  # an update of a pod that declares 3 does not make it 3
    group = implied(s)
    assert group.problem == (
        "pods a and c declare different kueue.x-k8s.io/pod-group-total-count values (3 != 4): "
        "Kueue makes no Workload for such a group"
    )
    s.on_node(node("n1", cpu="8"))
    drain(s)
    assert rec.binds == []
    assert group.problem in rec.pods["a"]  # said as the cycle's SchedulerError


def test_a_failed_pod_does_not_count_as_kueue_skips_it(sched):
    s, _ = sched
    s.on_pod(kueue_pod("a", "2"))
    s.on_pod(kueue_pod("b", "2"))
    s.on_pod(kueue_pod("old", "5", phase="Failed"))  # a failed try with another count
    assert (implied(s).min_count, implied(s).problem) == (2, None)


def test_a_pod_without_a_count_is_the_groups_problem(sched):
    s, _ = sched
    s.on_pod(kueue_pod("a", "2"))
    s.on_pod(kueue_pod("b", None))
    assert implied(s).problem == (
        "pod b: annotation kueue.x-k8s.io/pod-group-total-count missing or not a positive count: "
        "Kueue makes no Workload for such a group"
    )
    s.on_pod_deleted(kueue_pod("b", None))
    assert (implied(s).min_count, implied(s).problem) == (2, None)


def test_deleting_the_pod_that_disagrees_requeues_the_group_at_its_size(sched, clock):
    s, rec = sched
    s.on_node(node("n1", cpu="3"))
    for name in "abc":
        s.on_pod(kueue_pod(name, "3"))
    s.on_pod(kueue_pod("d", "4"))
    drain(s)
    assert rec.binds == [] and "different" in rec.pods["a"]  # backing off after the SchedulerError
    s.on_pod_deleted(kueue_pod("d", "4"))
    assert (implied(s).min_count, implied(s).problem) == (3, None)
    drain(s)  # the same instant: no backoff waited out, no other event
    assert sorted(name for name, _ in rec.binds) == ["a", "b", "c"]


def test_a_change_of_the_declared_size_requeues_the_unit(sched, clock):
    s, rec = sched
    s.on_node(node("n1", cpu="3"))
    for name in "abcd":
        s.on_pod(kueue_pod(name, "4"))
    drain(s)
    unit = s.queue.unit(group_unit(KEY))
    assert rec.binds == [] and unit is not None and unit.state == State.UNSCHEDULABLE  # 4 do not fit in 3 CPUs
    # The group is resized to 3, one pod's update at a time, each followed by
    # whatever cycles the queue offers; the clock does not move.
    for name in "abcd":
        s.on_pod(kueue_pod(name, "3", version="2"))
        drain(s)
        if name != "d":
            assert rec.binds == []
    assert (implied(s).min_count, implied(s).problem) == (3, None)
    assert len(rec.binds) == 3  # the unit was requeued by the change alone
