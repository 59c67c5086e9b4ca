"""A quantity too large for troupe's int64 columns (issue 44, item 8): the
object says which field, the rest is scheduled, nothing crashes.

The API server takes `100E` cpu (10^23 millicores) or `pods: 100E`; the node
table keeps millicores, bytes and counts in int64 columns. A pod asking for
such an amount is a SchedulerError naming the field (and is not retried until
it changes); a node offering it has that field taken as absent and a Warning
Event naming it; `troupe simulate` refuses such an input with one line."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.api.config import SchedulerConfiguration
from scheduler.api.parse import parse_node, parse_pod
from scheduler.api.quantity import QuantityError, format_units, to_units
from scheduler.api.records import ObjectError
from scheduler.api.resources import pod_requests
from scheduler.cli import main
from scheduler.core.scheduler import Scheduler
from scheduler.plugins import in_tree_registry

from .test_runtime_scheduler import Recorder, drain, node, pod, podgroup

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "simulate-two-jobs.yaml"
INT64_MAX = 2**63 - 1
CPU_LIMIT = "at most 9223372036854775807m"
COUNT_LIMIT = "at most 9223372036854775807"
BAD_CPU = f"spec.containers[0].resources.requests.cpu: 100E is out of range ({CPU_LIMIT})"
BAD_PODS = f"status.allocatable.pods: 100E is out of range ({COUNT_LIMIT})"
API = "scheduling.troupe.dev/v1alpha2"


# ------------------------------------------------------------------ quantities


@pytest.mark.parametrize(
    ("resource", "value", "message"),
    [
        ("cpu", "100E", f"100E is out of range ({CPU_LIMIT})"),
        ("cpu", "9223372036854775808m", f"9223372036854775808m is out of range ({CPU_LIMIT})"),
        ("cpu", "-100E", "-100E is out of range (at least -9223372036854775808m)"),
        ("memory", "1e308", f"1e308 is out of range ({COUNT_LIMIT})"),
        ("memory", "8Ei", f"8Ei is out of range ({COUNT_LIMIT})"),
        ("pods", "100E", f"100E is out of range ({COUNT_LIMIT})"),
        ("example.com/gpu", "1e19", f"1e19 is out of range ({COUNT_LIMIT})"),
        ("memory", 1e308, f"1e+308 is out of range ({COUNT_LIMIT})"),  # a YAML float (simulate)
        ("memory", float("inf"), f"inf is out of range ({COUNT_LIMIT})"),
        ("memory", "1e999999999", f"1e999999999 is out of range ({COUNT_LIMIT})"),
    ],
)
def test_an_amount_beyond_int64_is_out_of_range(resource: str, value: Any, message: str) -> None:
    with pytest.raises(QuantityError) as exc:
        to_units(resource, value)
    assert str(exc.value) == message


def test_a_huge_exponent_is_refused_at_once_not_expanded() -> None:
    """10^999999999 as an int would take minutes and gigabytes."""
    start = time.perf_counter()
    for value in ("1e999999999", "9e999999", "1e999999999E"):
        with pytest.raises(QuantityError):
            to_units("memory", value)
    assert time.perf_counter() - start < 1.0


def test_nan_is_an_invalid_quantity_not_a_crash() -> None:
    with pytest.raises(QuantityError, match="invalid quantity nan"):
        to_units("memory", float("nan"))


@pytest.mark.parametrize(
    ("resource", "value", "units"),
    [
        ("cpu", "9223372036854775807m", INT64_MAX),
        ("cpu", "9223372036854775.807", INT64_MAX),
        ("cpu", "9223372036854775.8065", INT64_MAX),  # rounded up, to the limit
        ("memory", "9223372036854775807", INT64_MAX),
        ("memory", "7Ei", 7 * 2**60),
        ("pods", "9E", 9 * 10**18),
        ("cpu", "500m", 500),
        ("cpu", "0.0001", 1),
        ("memory", "1Gi", 2**30),
        ("memory", "1e3", 1000),
        ("cpu", "-1", -1000),
        ("memory", "-9223372036854775808", -(2**63)),
    ],
)
def test_amounts_that_fit_are_as_before(resource: str, value: str, units: int) -> None:
    assert to_units(resource, value) == units


# ----------------------------------------------------------------- parsing


def _pod_body(requests: list[dict[str, str]], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {
            "schedulerName": "troupe-scheduler",
            "containers": [{"name": f"c{i}", "resources": {"requests": r}} for i, r in enumerate(requests)],
            **spec,
        },
    }


def test_a_pod_asking_too_much_carries_the_field_and_its_requests_fit_the_columns() -> None:
    p = parse_pod(_pod_body([{"cpu": "100E", "memory": "1Gi"}]))
    assert p.problem == BAD_CPU
    assert p.requests == {"memory": 2**30}  # the field out of range is left out: nothing overflows later
    assert p.nonzero_cpu == 100 and p.nonzero_memory == 2**30
    same = parse_pod(_pod_body([{"cpu": "200E", "memory": "1Gi"}]))
    assert same.spec_key != p.spec_key  # an update of the bad field is judged again


def test_a_pod_that_fits_has_no_problem_and_the_same_record_as_before() -> None:
    p = parse_pod(_pod_body([{"cpu": "2", "memory": "1Gi"}, {"cpu": "9223372036854773.8", "memory": "1"}]))
    assert p.problem == ""
    assert p.requests == {"cpu": 9223372036854775800, "memory": 2**30 + 1}  # the sum fits, just


def test_amounts_that_each_fit_but_add_up_beyond_int64_name_the_total() -> None:
    p = parse_pod(_pod_body([{"memory": "5E"}, {"memory": "5E"}]))
    assert p.problem == (
        "spec.containers[*].resources.requests.memory: the pod's total (with init containers and overhead) "
        f"10000000000000000000 is out of range ({COUNT_LIMIT})"
    )
    assert "memory" not in p.requests and p.nonzero_memory <= INT64_MAX


@pytest.mark.parametrize(
    ("where", "spec"),
    [
        (
            "spec.initContainers[0].resources.requests.cpu",
            {"initContainers": [{"name": "i", "resources": {"requests": {"cpu": "100E"}}}]},
        ),
        ("spec.overhead.cpu", {"overhead": {"cpu": "100E"}}),
        ("spec.resources.requests.cpu", {"resources": {"requests": {"cpu": "100E"}}}),
    ],
)
def test_every_request_field_is_named(where: str, spec: dict[str, Any]) -> None:
    p = parse_pod(_pod_body([{"cpu": "1"}], **spec))
    assert p.problem == f"{where}: 100E is out of range ({CPU_LIMIT})"
    assert all(v <= INT64_MAX for v in p.requests.values())


def test_pod_requests_without_a_problem_list_raise_object_error_as_before() -> None:
    with pytest.raises(ObjectError, match=r"spec.containers\[0\].resources.requests.cpu: 100E is out of range"):
        pod_requests({"containers": [{"resources": {"requests": {"cpu": "100E"}}}]})


def test_a_node_offering_too_much_has_the_field_taken_as_absent() -> None:
    n = parse_node(node("big", cpu="4", pods="100E"))
    assert n.problem == BAD_PODS
    assert n.allocatable == {"cpu": 4000, "memory": 8 * 2**30}
    only_capacity = {"metadata": {"name": "c"}, "status": {"capacity": {"cpu": "100E"}}}
    assert parse_node(only_capacity).problem == f"status.capacity.cpu: 100E is out of range ({CPU_LIMIT})"
    assert parse_node(node("ok")).problem == ""


# ------------------------------------------------------------- the scheduler


class Writer(Recorder):
    """The unit tests' recorder, with each pod's reason and the Node events."""

    def __init__(self) -> None:
        super().__init__()
        self.reasons: dict[str, str] = {}
        self.node_events: list[tuple[str, str, str, str]] = []

    def pod_unschedulable(self, pod, message, still_waiting=None, reason="Unschedulable") -> None:
        super().pod_unschedulable(pod, message, still_waiting, reason)
        self.reasons[pod.name] = reason

    def node_event(self, node, type_, reason, note, action) -> None:
        self.node_events.append((node.name, type_, reason, note))


@pytest.fixture
def sched(clock):
    rec = Writer()
    s = Scheduler(SchedulerConfiguration(), in_tree_registry(), binder=rec, writer=rec, clock=clock, report_delay=0)
    s.start_scheduling()
    return s, rec


def _no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_lone_pod_asking_too_much_is_a_scheduler_error_naming_the_field(sched, clock, caplog) -> None:
    s, rec = sched
    s.on_node(node("a", cpu="4"))
    s.on_pod(pod("bad", cpu="100E"))
    s.on_pod(pod("good", cpu="1"))
    drain(s)
    assert rec.binds == [("good", "a")]
    assert rec.pods["bad"] == BAD_CPU
    assert rec.reasons["bad"] == "SchedulerError"
    assert ("bad", "FailedScheduling", BAD_CPU) in rec.events
    _no_traceback(caplog)
    assert [r.getMessage() for r in caplog.records if "bad" in r.getMessage()] == [f"pod ns/bad: {BAD_CPU}"]


def test_it_is_not_retried_until_it_changes(sched, clock, caplog) -> None:
    s, rec = sched
    s.on_node(node("a", cpu="4"))
    s.on_pod(pod("bad", cpu="100E"))
    assert drain(s) == 1
    for _ in range(5):  # past every backoff: no cluster event can fix it
        clock.now += 20
        s.on_node(node(f"n{clock.now:.0f}", cpu="4"))
        assert drain(s) == 0
    s.on_pod(pod("bad", cpu="200E"))  # still out of range: judged again, says the new value
    assert drain(s) == 1
    assert rec.pods["bad"] == BAD_CPU.replace("100E", "200E")
    s.on_pod(pod("bad", cpu="1"))  # fixed
    clock.now += 20
    assert drain(s) == 1
    assert [b for b in rec.binds if b[0] == "bad"] == [("bad", "a")]
    _no_traceback(caplog)


def test_a_gang_with_one_such_pod_is_a_scheduler_error_and_binds_nothing(sched, caplog) -> None:
    s, rec = sched
    s.on_node(node("a", cpu="8"))
    s.on_podgroup(podgroup("g", 3))
    s.on_pod(pod("g-0", "g"))
    s.on_pod(pod("g-1", "g", cpu="100E"))
    s.on_pod(pod("g-2", "g"))
    s.on_pod(pod("lone"))
    drain(s)
    assert rec.binds == [("lone", "a")]
    why = f"pod ns/g-1: {BAD_CPU}"
    assert rec.groups[-1] == ("g", "False", "SchedulerError", why)
    assert rec.pods == {
        "g-0": f"PodGroup ns/g: {why}",
        "g-1": f"PodGroup ns/g: {BAD_CPU}",
        "g-2": f"PodGroup ns/g: {why}",
    }
    assert {rec.reasons[f"g-{i}"] for i in range(3)} == {"SchedulerError"}
    _no_traceback(caplog)


def test_a_tree_with_one_such_pod_reports_its_leaf_and_binds_nothing(sched, caplog) -> None:
    s, rec = sched
    s.on_node(node("a", cpu="8"))
    s.on_composite(
        {
            "apiVersion": API,
            "kind": "CompositePodGroup",
            "metadata": {"name": "root", "namespace": "ns", "uid": "uid-root", "generation": 1},
            "spec": {"schedulingPolicy": {"gang": {"minGroupCount": 2}}},
        }
    )
    for leaf in ("x", "y"):
        body = podgroup(leaf, 1)
        body["apiVersion"] = API
        body["spec"]["parentCompositePodGroupName"] = "root"
        s.on_podgroup(body)
    s.on_pod(pod("x-0", "x"))
    s.on_pod(pod("y-0", "y", cpu="100E"))
    s.on_pod(pod("lone"))
    drain(s)
    assert rec.binds == [("lone", "a")]
    assert ("y", "False", "SchedulerError", f"pod ns/y-0: {BAD_CPU}") in rec.groups
    assert rec.reasons["y-0"] == "SchedulerError" and BAD_CPU in rec.pods["y-0"]
    assert "x-0" in rec.pods  # its tree cannot be placed without y
    _no_traceback(caplog)


def test_a_bound_pod_asking_too_much_is_counted_without_that_field(sched, caplog) -> None:
    """Bound by someone else (spec.nodeName): the node's other room is still counted and used."""
    s, rec = sched
    s.on_node(node("a", cpu="4"))
    s.on_pod(pod("running", cpu="100E", node_name="a", scheduler="other"))
    body = pod("running-2", cpu="1", node_name="a", scheduler="other")
    body["spec"]["containers"].append({"name": "d", "resources": {"requests": {"memory": "1e308"}}})
    s.on_pod(body)
    s.on_pod(pod("new", cpu="3"))
    drain(s)
    assert rec.binds == [("new", "a")]
    s.on_pod(pod("more", cpu="1"))  # 1 (running-2) + 3 (new): full
    drain(s)
    assert rec.binds == [("new", "a")] and "Insufficient cpu" in rec.pods["more"]
    _no_traceback(caplog)


def test_a_nominated_pod_asking_too_much_does_not_break_other_cycles(sched, caplog) -> None:
    """Its nomination (from an earlier leader) is held in every other unit's cycle."""
    s, rec = sched
    s.on_node(node("a", cpu="4"))
    body = pod("bad", cpu="100E")
    body["status"] = {"nominatedNodeName": "a"}
    s.on_pod(body)
    s.on_pod(pod("good"))
    drain(s)
    assert ("good", "a") in rec.binds
    assert rec.pods["bad"] == BAD_CPU
    _no_traceback(caplog)


def test_a_node_offering_too_much_gets_one_warning_event_per_change(sched, caplog) -> None:
    s, rec = sched
    s.on_node(node("big", cpu="4", pods="100E"))
    s.on_node(node("big", cpu="4", pods="100E"))  # a resync: nothing new
    s.on_node(node("ok", cpu="1"))
    note = f"{BAD_PODS}; troupe takes it as absent: no pod that asks for it is placed on this node"
    assert rec.node_events == [("big", "Warning", "QuantityOutOfRange", note)]
    assert [r.getMessage() for r in caplog.records if "big" in r.getMessage()] == [f"node big: {note}"]
    s.on_pod(pod("p-0", cpu="1"))
    s.on_pod(pod("p-1", cpu="1"))
    drain(s)
    assert rec.binds == [("p-0", "ok")]  # no pod slot on big: every pod takes one
    assert rec.pods["p-1"] == "0/2 nodes are available: 1 Insufficient cpu, 1 Too many pods."
    s.on_node(node("big", cpu="100E", pods="100E"))  # another field too: said again, once
    s.on_node(node("big", cpu="100E", pods="100E"))
    assert len(rec.node_events) == 2
    assert rec.node_events[-1][3].startswith(
        f"status.allocatable.cpu: 100E is out of range ({CPU_LIMIT}); {BAD_PODS}; troupe takes it as absent"
    )
    _no_traceback(caplog)


def test_a_node_with_cpu_out_of_range_takes_only_pods_that_ask_no_cpu(sched, caplog) -> None:
    s, rec = sched
    s.on_node(node("big", cpu="100E", pods="10"))
    s.on_pod(pod("asks-cpu", cpu="1"))
    s.on_pod(pod("asks-none", cpu="0"))
    drain(s)
    assert rec.binds == [("asks-none", "big")]
    assert rec.pods["asks-cpu"] == "0/1 nodes are available: 1 Insufficient cpu."
    _no_traceback(caplog)


def test_a_node_that_went_bad_loses_the_field_it_had(sched, clock) -> None:
    s, rec = sched
    s.on_node(node("a", cpu="4"))
    s.on_node(node("a", cpu="4", pods="100E"))
    s.on_pod(pod("p"))
    drain(s)
    assert rec.binds == [] and "Too many pods" in rec.pods["p"]
    s.on_node(node("a", cpu="4"))  # fixed
    clock.now += 20
    drain(s)
    assert rec.binds == [("p", "a")]


# ---------------------------------------------------------------- simulate


def _example() -> list[dict[str, Any]]:
    return list(yaml.safe_load_all(EXAMPLE.read_text()))


def _mutated(path: list[Any], value: Any) -> list[dict[str, Any]]:
    docs = _example()
    target: Any = docs
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return docs


WORKER = [4, "spec", "containers", 0, "resources", "requests"]


@pytest.mark.parametrize(
    ("path", "value", "line"),
    [
        (
            [*WORKER, "memory"],
            "1e308",
            "in.yaml: document 5 (Pod demo/train-a-worker-0): spec.containers[0].resources.requests.memory: "
            f"1e308 is out of range ({COUNT_LIMIT})",
        ),
        (
            [*WORKER, "cpu"],
            "100E",
            f"in.yaml: document 5 (Pod demo/train-a-worker-0): {BAD_CPU}",
        ),
        (
            [0, "status", "allocatable", "pods"],
            "100E",
            f"in.yaml: document 1 (Node node-1): {BAD_PODS}",
        ),
        (
            [*WORKER, "memory"],
            1.0e308,  # a YAML float, not a string
            "in.yaml: document 5 (Pod demo/train-a-worker-0): spec.containers[0].resources.requests.memory: "
            f"1e+308 is out of range ({COUNT_LIMIT})",
        ),
    ],
)
def test_simulate_refuses_the_mutated_example_with_one_line(capsys, tmp_path, path, value, line) -> None:
    """Mutations of examples/simulate-two-jobs.yaml that crashed the core."""
    src = tmp_path / "in.yaml"
    src.write_text(yaml.safe_dump_all(_mutated(path, value), sort_keys=False))
    rc = main(["simulate", str(src)])
    out, err = capsys.readouterr()
    assert (rc, out, err.replace(str(src), "in.yaml")) == (2, "", line + "\n")


def test_simulate_refuses_a_job_whose_template_asks_too_much(capsys, tmp_path) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "demo"},
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "template": {
                "metadata": {"annotations": {"scheduling.troupe.dev/job-policy": "gang"}},
                "spec": {
                    "schedulerName": "troupe-scheduler",
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": "100E"}}}],
                },
            },
        },
    }
    src = tmp_path / "in.yaml"
    src.write_text(yaml.safe_dump_all([*_example()[:2], job], sort_keys=False))
    rc = main(["simulate", str(src)])
    out, err = capsys.readouterr()
    assert (rc, out) == (2, "")
    assert err.replace(str(src), "in.yaml") == (f"in.yaml: document 3, from Job demo/j (Pod demo/j-0): {BAD_CPU}\n")


def test_the_unmutated_example_still_runs(capsys) -> None:
    rc = main(["simulate", str(EXAMPLE)])
    out, err = capsys.readouterr()
    assert rc == 0 and "4/8 pending pods placed" in out and err == ""


def test_amounts_that_each_fit_are_summed_without_wrapping(capsys, tmp_path) -> None:
    """Two nodes of `pods: 5E` (each fits an int64 column; together they do
    not): the cluster's free room is summed exactly, so a scheduler-plugins
    PodGroup with `minResources` binds. Before, the total wrapped to a
    negative pod count and the group waited, "the cluster's free room
    cannot hold the group"."""
    nodes = [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": n},
         "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "5E"}}}
        for n in ("n1", "n2")
    ]  # fmt: skip
    group = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "demo"}, "spec": {"minMember": 2, "minResources": {"cpu": "2"}},
    }  # fmt: skip
    pods = [
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": f"g-{i}", "namespace": "demo", "labels": {"scheduling.x-k8s.io/pod-group": "g"}},
         "spec": {"schedulerName": "troupe-scheduler",
                  "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}
        for i in range(2)
    ]  # fmt: skip
    src = tmp_path / "in.yaml"
    src.write_text(yaml.safe_dump_all([*nodes, group, *pods], sort_keys=False))
    rc = main(["simulate", str(src)])
    out, err = capsys.readouterr()
    assert rc == 0 and "2/2 pending pods placed" in out, out + err


@pytest.mark.parametrize(
    ("resource", "amount", "shown"),
    [("pods", 1024, "1024"), ("nvidia.com/gpu", 2048, "2048"), ("memory", 1024, "1Ki"),
     ("ephemeral-storage", 3 * 2**30, "3Gi"), ("hugepages-2Mi", 2**21, "2Mi"), ("cpu", 1500, "1500m")],
)  # fmt: skip
def test_counts_are_shown_as_counts_and_bytes_with_binary_suffixes(resource: str, amount: int, shown: str) -> None:
    """In messages ("it needs pods 1024 (free 3)"): before, any amount that
    divides by 1024 took a binary suffix, so 1024 pods read "1Ki"."""
    assert format_units(resource, amount) == shown
