"""A quantity too large for troupe's int64 columns on the real API server
(issue 44, item 8), which accepts `pods: 100E` on a Node and `100E` cpu on a
pod: the object says which field is out of range, the scheduler keeps
running and scheduling the rest, and its log has one line, no traceback."""

from __future__ import annotations

import time

import pytest
from objects import bound, create, events_for, pod, pod_condition
from troupe_process import TroupeProcess, supervised
from wait import wait_for

CPU_LIMIT = "at most 9223372036854775807m"
BAD_PODS = "status.allocatable.pods: 100E is out of range (at most 9223372036854775807)"
BAD_CPU = f"spec.containers[0].resources.requests.cpu: 100E is out of range ({CPU_LIMIT})"


@pytest.fixture(scope="module")
def troupe(installed, tmp_path_factory):
    # supervised(): at the end, troupe must exit 0 and its log hold no traceback.
    yield from supervised(TroupeProcess(installed.scheduler_kubeconfig, tmp_path_factory.mktemp("troupe")))


def _lines(troupe: TroupeProcess, text: str) -> list[str]:
    return [line for line in troupe.log_text().splitlines() if text in line]


def test_a_node_offering_too_many_pods_gets_a_warning_event_and_others_are_used(
    installed, troupe, nodes, namespace
) -> None:
    c, ns = installed, namespace
    nodes("huge", cpu="4", pods="100E")
    nodes("ok", cpu="2")
    event = wait_for(
        lambda: next((e for e in events_for(c, "default", "huge") if e.get("reason") == "QuantityOutOfRange"), None),
        timeout=30,
        message="a QuantityOutOfRange Event on Node huge",
    )
    assert event["type"] == "Warning"
    assert event["regarding"]["kind"] == "Node"
    assert event["note"].startswith(f"{BAD_PODS}; troupe takes it as absent")
    create(c, pod(ns, "p-0"), pod(ns, "p-1"))
    assert wait_for(lambda: len(b := bound(c, ns)) == 2 and b, timeout=30, message="2 pods bound") == {
        "p-0": "ok",
        "p-1": "ok",
    }
    # A change that is not the field: no second line, no second Event.
    c.kubectl("label", "node", "huge", "x=y")
    time.sleep(2)
    assert len(_lines(troupe, "node huge:")) == 1
    assert len([e for e in events_for(c, "default", "huge") if e.get("reason") == "QuantityOutOfRange"]) == 1
    assert "Traceback" not in troupe.log_text()
    assert troupe.returncode is None


def test_a_pod_asking_for_too_much_cpu_says_which_field_and_others_bind(installed, troupe, nodes, namespace) -> None:
    c, ns = installed, namespace
    nodes("a", cpu="4")
    create(c, pod(ns, "bad", cpu="100E"), pod(ns, "good", cpu="1"))

    def scheduler_error():
        cond = pod_condition(c, ns, "bad")
        return cond and cond["status"] == "False" and cond.get("reason") == "SchedulerError" and cond

    cond = wait_for(scheduler_error, timeout=30, message="pod bad PodScheduled=False/SchedulerError")
    assert cond["message"] == BAD_CPU
    assert wait_for(lambda: bound(c, ns), timeout=30, message="good bound") == {"good": "a"}
    events = wait_for(
        lambda: [e for e in events_for(c, ns, "bad") if e.get("reason") == "FailedScheduling"],
        timeout=30,
        message="a FailedScheduling Event on pod bad",
    )
    assert [(e["type"], e["note"]) for e in events] == [("Warning", BAD_CPU)]
    # Not retried in a loop: no cluster event fixes it, only an update of the pod.
    errors = troupe.metric("scheduler_schedule_attempts_total", result="error")
    time.sleep(5)  # backoff would have retried it 2-3 times by now
    assert troupe.metric("scheduler_schedule_attempts_total", result="error") == errors
    create(c, pod(ns, "later", cpu="1"))
    assert wait_for(lambda: "later" in (b := bound(c, ns)) and b, timeout=30, message="later bound")["later"] == "a"
    said = _lines(troupe, f"pod {ns}/bad:")
    assert len(said) == 1 and said[0].endswith(f"pod {ns}/bad: {BAD_CPU}"), said
    assert "Traceback" not in troupe.log_text()
    assert troupe.returncode is None
