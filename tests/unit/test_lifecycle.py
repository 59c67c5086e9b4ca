"""PodGroup lifecycle in the live scheduler: template references, the sticky
Scheduled condition, and objects deleted while queued, in flight or binding."""

from __future__ import annotations

import asyncio
from typing import Any

from scheduler.api.config import SchedulerConfiguration
from scheduler.api.records import GroupKey
from scheduler.core.scheduler import Scheduler
from scheduler.plugins import in_tree_registry
from scheduler.queue.scheduling_queue import State, group_unit

from .test_runtime_scheduler import Recorder, drain, node, pod, podgroup, sched  # noqa: F401 (fixture)


def with_template_ref(body: dict[str, Any], workload: str, template: str) -> dict[str, Any]:
    body["spec"]["podGroupTemplateRef"] = {"workload": {"workloadName": workload, "podGroupTemplateName": template}}
    return body


def workload(name: str, *templates: str, ns: str = "ns") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-wl-{name}"},
        "spec": {"podGroupTemplates": [{"name": t, "schedulingPolicy": {"gang": {"minCount": 2}}} for t in templates]},
    }


def gang_of_two(s, name: str = "g", ref: tuple[str, str] | None = None) -> None:
    body = podgroup(name, 2)
    if ref:
        with_template_ref(body, *ref)
    s.on_podgroup(body)
    s.on_pod(pod(f"{name}-0", name))
    s.on_pod(pod(f"{name}-1", name))


def test_a_reference_to_a_missing_workload_is_a_scheduler_error_naming_it(sched):
    s, rec = sched
    s.on_node(node("a", cpu="4"))
    gang_of_two(s, ref=("trainer", "workers"))
    drain(s)
    assert rec.binds == []
    name, status, reason, message = rec.groups[-1]
    assert (name, status, reason) == ("g", "False", "SchedulerError")
    assert message == "spec.podGroupTemplateRef.workload.workloadName: Workload ns/trainer does not exist"
    assert rec.pods["g-0"] == f"PodGroup ns/g: {message}"
    # The Workload appears: the group is judged again at once, not after its backoff.
    s.on_workload(workload("trainer", "workers"))
    assert s.queue.unit(group_unit(GroupKey("ns", "g"))).state == State.ACTIVE
    drain(s)
    assert sorted(n for n, _ in rec.binds) == ["g-0", "g-1"]
    assert rec.groups[-1][1:3] == ("True", "Scheduled")


def test_a_reference_to_a_missing_template_lists_the_templates_there_are(sched):
    s, rec = sched
    s.on_node(node("a", cpu="4"))
    s.on_workload(workload("trainer", "driver", "workers"))
    gang_of_two(s, ref=("trainer", "worker"))
    drain(s)
    assert rec.binds == []
    assert rec.groups[-1][2:] == (
        "SchedulerError",
        (
            "spec.podGroupTemplateRef.workload.podGroupTemplateName: Workload ns/trainer has no "
            "podGroupTemplate named 'worker' (it has: driver, workers)"
        ),
    )


def test_an_invalid_workload_is_reported_not_crashed_on(sched):
    s, rec = sched
    s.on_node(node("a", cpu="4"))
    s.on_workload({"metadata": {"name": "trainer", "namespace": "ns"}, "spec": {"podGroupTemplates": []}})
    gang_of_two(s, ref=("trainer", "workers"))
    drain(s)
    assert rec.binds == []
    assert "Workload ns/trainer is invalid: spec.podGroupTemplates" in rec.groups[-1][3]


def scheduled_group(s, rec) -> None:
    """Gang g bound whole, its Scheduled=True condition seen back through the watch."""
    s.on_node(node("a", cpu="4"))
    gang_of_two(s)
    drain(s)
    for name, where in list(rec.binds):
        s.on_pod({**pod(name, "g"), "spec": {**pod(name, "g")["spec"], "nodeName": where}})
    body = podgroup("g", 2)
    body["status"] = {"conditions": [{"type": "PodGroupScheduled", "status": "True", "reason": "Scheduled"}]}
    s.on_podgroup(body)


def test_scheduled_stays_true_when_later_pods_do_not_fit(sched):
    s, rec = sched
    scheduled_group(s, rec)
    writes = len(rec.groups)
    s.on_pod(pod("g-2", "g", cpu="8"))
    drain(s)
    assert all(status == "True" for _, status, _, _ in rec.groups[writes:])  # never back to False
    assert "Insufficient cpu" in rec.pods["g-2"]


def test_scheduled_stays_true_on_a_later_scheduler_error_which_is_an_event(sched):
    s, rec = sched
    scheduled_group(s, rec)
    writes = len(rec.groups)
    s.on_pod(pod("g-other", "g", scheduler="default-scheduler"))
    s.on_pod(pod("g-2", "g"))
    drain(s)
    assert all(status == "True" for _, status, _, _ in rec.groups[writes:])
    assert "schedulerName" in rec.pods["g-2"]
    assert any(
        who == "g" and reason == "FailedScheduling" and "schedulerName" in note for who, reason, note in rec.events
    )


def test_a_pod_deleted_while_its_group_is_in_flight_is_not_placed(sched):
    s, rec = sched
    s.on_node(node("a", cpu="4"))
    s.on_podgroup(podgroup("g", 2))
    for i in range(3):
        s.on_pod(pod(f"g-{i}", "g"))
    popped = s.queue.pop_nowait()
    s.on_pod_deleted(pod("g-2", "g"))
    s.schedule_unit(popped)
    assert sorted(n for n, _ in rec.binds) == ["g-0", "g-1"]
    assert "uid-g-2" not in s.cache.pods and "uid-g-2" not in s.cache.assumed and "uid-g-2" not in s.queue


def test_a_podgroup_deleted_while_in_flight_binds_nothing_and_waits_again(sched):
    s, rec = sched
    s.on_node(node("a", cpu="4"))
    gang_of_two(s)
    popped = s.queue.pop_nowait()
    s.on_podgroup_deleted(podgroup("g", 2))
    s.schedule_unit(popped)
    assert rec.binds == [] and s.cache.assumed == {}
    unit = s.queue.unit(group_unit(GroupKey("ns", "g")))
    assert unit.state == State.GATED and len(unit.pods) == 2
    assert rec.pods["g-0"] == "waiting for PodGroup ns/g to be created"
    assert ("g-0", "FailedScheduling", "waiting for PodGroup ns/g to be created") in rec.events


def test_a_pod_deleted_while_binding_leaves_no_trace(sched):
    s, rec = sched
    s.on_node(node("a", cpu="2"))
    s.on_pod(pod("p", cpu="2"))
    drain(s)
    assert rec.binds == [("p", "a")] and "uid-p" in s.cache.assumed
    binding = s.cache.pods["uid-p"]  # what the binder holds while the deletion arrives
    s.on_pod_deleted(pod("p", cpu="2"))
    s.on_bind_failed(binding, "a", "Binding rejected: 404 Not Found")
    assert s.cache.pods == {} and s.cache.assumed == {} and len(s.queue) == 0
    # Its room is free: another pod takes it.
    s.on_pod(pod("q", cpu="2"))
    drain(s)
    assert rec.binds[-1] == ("q", "a")


async def test_a_gang_that_fills_within_the_report_delay_costs_no_writes():
    rec = Recorder()
    s = Scheduler(SchedulerConfiguration(), in_tree_registry(), binder=rec, writer=rec, report_delay=0.05)
    s.start_scheduling()
    s.on_node(node("a", cpu="4"))
    s.on_podgroup(podgroup("fast", 2))
    s.on_podgroup(podgroup("slow", 2))
    s.on_pod(pod("fast-0", "fast"))
    s.on_pod(pod("slow-0", "slow"))
    s.on_pod(pod("fast-1", "fast"))  # fast is complete before the delay ends
    await asyncio.sleep(0.1)
    assert "fast-0" not in rec.pods and not any(g == "fast" for g, *_ in rec.groups)
    assert rec.pods["slow-0"] == "waiting for pods of PodGroup ns/slow: minCount is 2"
    assert rec.groups[-1] == (
        "slow",
        "False",
        "Unschedulable",
        "waiting for pods of PodGroup ns/slow: minCount is 2, 1 exist",
    )
    # A pod arriving after the report is told too, once.
    s.on_podgroup(podgroup("slow", 3))
    s.on_pod(pod("slow-1", "slow"))
    await asyncio.sleep(0.1)
    assert rec.pods["slow-1"] == "waiting for pods of PodGroup ns/slow: minCount is 3"
    writes = rec.pod_writes
    await asyncio.sleep(0.1)
    assert rec.pod_writes == writes


def _delayed_sched(delay: float, max_wait: float) -> tuple[Scheduler, Recorder]:
    rec = Recorder()
    s = Scheduler(
        SchedulerConfiguration(),
        in_tree_registry(),
        binder=rec,
        writer=rec,
        report_delay=delay,
        report_max_delay=max_wait,
    )
    s.start_scheduling()
    s.on_node(node("a", cpu="100", pods="110"))
    return s, rec


async def test_a_gang_still_filling_reports_its_count_on_the_podgroup_and_tells_its_pods_once_it_stops():
    """Pods arriving every 20 ms with a 50 ms delay: for as long as they arrive,
    only the PodGroup's condition (with the live count) is written; 50 ms after
    the last one, each pod is told once."""
    s, rec = _delayed_sched(0.05, 30.0)
    s.on_podgroup(podgroup("g", 40))
    for i in range(15):
        s.on_pod(pod(f"g-{i}", "g"))
        await asyncio.sleep(0.02)
    assert rec.pod_writes == 0 and rec.events == []
    assert rec.groups, "the PodGroup says it waits while its pods arrive"
    assert rec.groups[-1][:3] == ("g", "False", "Unschedulable")
    assert rec.groups[-1][3].startswith("waiting for pods of PodGroup ns/g: minCount is 40, ")
    await asyncio.sleep(0.15)  # arrivals stopped
    assert rec.pod_writes == 15 and sorted(rec.pods) == sorted(f"g-{i}" for i in range(15))
    assert {note for _, _, note in rec.events} == {"waiting for pods of PodGroup ns/g: minCount is 40"}
    assert len(rec.events) == 15
    assert rec.groups[-1][3] == "waiting for pods of PodGroup ns/g: minCount is 40, 15 exist"


async def test_a_gang_that_never_stops_filling_tells_its_pods_after_the_maximum_wait():
    s, rec = _delayed_sched(0.05, 0.2)
    s.on_podgroup(podgroup("g", 100))
    for i in range(20):  # 400 ms of arrivals, every 20 ms
        s.on_pod(pod(f"g-{i}", "g"))
        await asyncio.sleep(0.02)
    told = rec.pod_writes
    assert told >= 5, "after report_max_delay the pods are told even though more keep arriving"
    await asyncio.sleep(0.15)
    assert rec.pod_writes == 20, "every pod is told exactly once"
    drain(s)
    assert rec.binds == []


async def test_a_gang_that_fills_while_reporting_its_count_binds_without_pod_writes():
    s, rec = _delayed_sched(0.05, 30.0)
    s.on_podgroup(podgroup("g", 8))
    for i in range(8):
        s.on_pod(pod(f"g-{i}", "g"))
        await asyncio.sleep(0.02)
    drain(s)
    assert len(rec.binds) == 8 and rec.pod_writes == 0
    await asyncio.sleep(0.1)  # a timer left behind writes nothing for a group no longer held
    assert rec.pod_writes == 0 and rec.events == []
