"""Pure helpers of the end-to-end benchmark (bench/e2e_*.py): no API server."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # bench/ is not an installed package
    sys.path.insert(0, str(ROOT))

from bench.e2e_kube import parse_request_counts, request_delta  # noqa: E402
from bench.e2e_report import (  # noqa: E402
    latency_table,
    percentile,
    requests_table,
    status_rate,
    status_table,
    summarize,
    throughput_table,
    tree_table,
    variant_table,
)
from bench.e2e_watch import scheduled_condition  # noqa: E402
from bench.e2e_workload import (  # noqa: E402
    FULL_SHAPES,
    QUICK_SHAPES,
    Shape,
    fits,
    flavor,
    group_name,
    parse_pod_name,
    parse_shapes,
    partial_groups,
    pod_name,
    scheduled_condition_type,
)

nan = math.nan


def test_percentile_interpolates_like_numpy():
    xs = [4.0, 1.0, 3.0, 2.0]
    assert percentile(xs, 0) == 1.0
    assert percentile(xs, 100) == 4.0
    assert percentile(xs, 50) == 2.5
    assert percentile(xs, 99) == pytest.approx(3.97)
    assert percentile([7.0], 99) == 7.0


def test_percentile_ignores_nan_and_empty_is_nan():
    assert percentile([nan, 2.0, nan], 50) == 2.0
    assert math.isnan(percentile([], 50))
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_summarize_rate_and_group_latency():
    # 2 groups of 2: created at 0,1 | 2,3; bound at 1.5,2 | 3.5,5
    s = summarize([0.0, 1.0, 2.0, 3.0], [1.5, 2.0, 3.5, 5.0], size=2)
    assert s["pods_bound"] == 4 and s["groups_bound"] == 2
    assert s["pods_per_s"] == pytest.approx(4 / 5.0)
    assert s["drain_s"] == pytest.approx(2.0)
    # latencies: 2 - 1 = 1, 5 - 3 = 2
    assert s["latency_p50_s"] == pytest.approx(1.5)
    assert s["latency_max_s"] == pytest.approx(2.0)


def test_summarize_incomplete_groups_are_left_out():
    s = summarize([0.0, 1.0, 2.0, 3.0], [1.5, 2.0, 3.5, nan], size=2)
    assert s["pods_bound"] == 3 and s["groups_bound"] == 1
    assert s["latency_p99_s"] == pytest.approx(1.0)
    nothing = summarize([0.0, 1.0], [nan, nan], size=2)
    assert nothing["pods_bound"] == 0 and math.isnan(nothing["pods_per_s"]) and math.isnan(nothing["latency_p50_s"])


def test_parse_shapes_defaults_overrides_and_errors():
    assert parse_shapes("a,b,c", quick=False) == [FULL_SHAPES["a"], FULL_SHAPES["b"], FULL_SHAPES["c"]]
    assert parse_shapes("b", quick=True) == [QUICK_SHAPES["b"]]
    assert parse_shapes("a, c=10x2000", quick=False) == [FULL_SHAPES["a"], Shape("c", 10, 2000)]
    for bad in ("z", "c=10", "c=0x5", "A"):
        with pytest.raises(ValueError):
            parse_shapes(bad, quick=False)


def test_fits_counts_pod_slots():
    assert fits(FULL_SHAPES["c"], 5000) is None  # 10 per node
    assert fits(FULL_SHAPES["c"], 500) is None  # 100 per node <= 110, 10 CPU <= 32
    assert "pods" in fits(FULL_SHAPES["c"], 400)


def test_pod_names_round_trip_and_sort_in_creation_order():
    assert parse_pod_name(pod_name(12, 345)) == (12, 345)
    assert parse_pod_name("something-else") is None
    names = [pod_name(g, i) for g in range(3) for i in range(12)]
    assert names == sorted(names)
    assert group_name(7) == "g00007"


def test_flavors_differ_only_in_what_each_scheduler_reads():
    t, u, r = (flavor(s).pod("ns", 1, 2) for s in ("troupe", "upstream", "raw"))
    assert t["spec"]["schedulerName"] == "troupe-scheduler"
    assert t["metadata"]["labels"] == {"scheduling.troupe.dev/pod-group": "g00001"}
    assert "schedulingGroup" not in t["spec"]
    assert (
        u["spec"]["schedulingGroup"] == {"podGroupName": "g00001"} and u["spec"]["schedulerName"] == "default-scheduler"
    )
    assert (
        r["spec"]["schedulingGroup"] == u["spec"]["schedulingGroup"]
        and r["spec"]["schedulerName"] != "default-scheduler"
    )
    assert t["spec"]["containers"] == u["spec"]["containers"] == r["spec"]["containers"]
    pg = flavor("upstream").podgroup("ns", 1, 3)
    assert pg["apiVersion"] == "scheduling.k8s.io/v1beta1" and pg["spec"]["schedulingPolicy"] == {
        "gang": {"minCount": 3}
    }
    assert flavor("troupe").podgroup("ns", 1, 3)["apiVersion"] == "scheduling.troupe.dev/v1alpha2"


def test_coscheduling_flavor_is_what_the_training_operator_writes():
    """scheduler-plugins' PodGroup (spec.minMember) and label, troupe's scheduler name, the same containers."""
    f = flavor("troupe-coscheduling")
    p = f.pod("ns", 1, 2)
    assert p["metadata"]["labels"] == {"scheduling.x-k8s.io/pod-group": "g00001"}
    assert p["spec"]["schedulerName"] == "troupe-scheduler" and "schedulingGroup" not in p["spec"]
    assert p["spec"]["containers"] == flavor("troupe").pod("ns", 1, 2)["spec"]["containers"]
    pg = f.podgroup("ns", 1, 3)
    assert pg["apiVersion"] == "scheduling.x-k8s.io/v1alpha1" and pg["spec"] == {"minMember": 3}
    assert f.podgroup_path.format(ns="ns") == "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/ns/podgroups"
    with pytest.raises(ValueError, match="topology"):
        f.podgroup("ns", 1, 3, topology_key="topology.kubernetes.io/rack")


def _run(sched: str, pods_per_s: float, bound: int = 6, p99: float = 1.0) -> dict:
    return {
        "nodes": 500,
        "shape": "a",
        "shape_label": "a: 2 gangs x 3",
        "scheduler": sched,
        "pods": 6,
        "pods_bound": bound,
        "groups": 2,
        "groups_bound": 2 if bound == 6 else 1,
        "pods_per_s": pods_per_s,
        "latency_p50_s": 0.5,
        "latency_p99_s": p99,
        "creator_pods_per_s": 400.0,
        "failed": False,
    }


def test_tables_side_by_side_with_ratios_and_timeouts():
    runs = [_run("troupe", 800.0, p99=0.5), _run("upstream", 400.0, p99=1.0), _run("raw", 1000.0, p99=0.25)]
    t = throughput_table(runs)
    lines = t.splitlines()
    assert len(lines) == 3 and lines[0].startswith("| nodes")
    assert "| 800 " in lines[2] and "2.00x" in lines[2] and "0.80x" in lines[2] and "400/400/400" in lines[2]
    lat = latency_table(runs)
    assert "500 ms / 500 ms" in lat and "0.50x" in lat and "2.00x" in lat
    runs[1] = _run("upstream", 300.0, bound=4)
    t = throughput_table(runs)
    assert "TIMEOUT 4/6 bound" in t
    assert t.splitlines()[2].count(" - ") == 1  # no troupe÷upstream ratio against an incomplete run


def test_variant_table_compares_a_source_with_troupe_own_crds_and_upstream():
    runs = [_run("troupe", 800.0, p99=0.5), _run("upstream", 400.0, p99=1.0)]
    assert variant_table(runs, "troupe-coscheduling") is None
    runs.append(_run("troupe-coscheduling", 760.0, p99=0.6))
    table = variant_table(runs, "troupe-coscheduling")
    assert table is not None
    head, _, row = table.splitlines()
    assert "scheduler-plugins÷troupe (own CRDs)" in head
    assert "0.95x" in row and "1.20x" in row and "1.90x" in row and "0.60x" in row


def test_tree_shape_l_native_objects_differ_only_in_scheduler_name():
    """Shape l: a root CompositePodGroup (gang of 2, one rack) over a 1-pod leader and a 7-pod worker
    gang; troupe-native, upstream and raw get the same native objects, troupe its own kinds."""
    shape = FULL_SHAPES["l"]
    assert (shape.gangs, shape.size, shape.leaders, shape.node_kind) == (500, 8, 1, "tree")
    assert shape.label() == "l: 500 replicas x (1 leader + 7 workers) in one rack"
    assert parse_shapes("l=50x8", quick=False)[0].leaders == 1
    assert fits(shape, 5000) is None
    assert [shape.child_of(i) for i in range(3)] == ["leader", "workers", "workers"]
    n, u = flavor("troupe-native"), flavor("upstream")
    root = u.composite("ns", 3, 2, "topology.kubernetes.io/rack")
    assert root == n.composite("ns", 3, 2, "topology.kubernetes.io/rack")
    assert root["apiVersion"] == "scheduling.k8s.io/v1alpha3" and root["metadata"]["name"] == "g00003"
    assert root["spec"]["schedulingPolicy"] == {"gang": {"minGroupCount": 2}}
    assert root["spec"]["schedulingConstraints"] == {"topology": [{"key": "topology.kubernetes.io/rack"}]}
    leaf = u.child_podgroup("ns", 3, "workers", 7)
    assert leaf == n.child_podgroup("ns", 3, "workers", 7)
    assert leaf["metadata"]["name"] == "g00003-workers" and leaf["apiVersion"] == "scheduling.k8s.io/v1beta1"
    assert leaf["spec"]["parentCompositePodGroupName"] == "g00003" and leaf["spec"]["workloadRef"]
    assert leaf["spec"]["schedulingPolicy"] == {"gang": {"minCount": 7}} and "schedulingConstraints" not in leaf["spec"]
    pu, pn = u.pod("ns", 3, 1, "g00003-workers"), n.pod("ns", 3, 1, "g00003-workers")
    assert pu["spec"]["schedulingGroup"] == {"podGroupName": "g00003-workers"}
    assert {**pu["spec"], "schedulerName": ""} == {**pn["spec"], "schedulerName": ""}
    own = flavor("troupe")
    assert own.composite("ns", 3, 2, None)["apiVersion"] == "scheduling.troupe.dev/v1alpha2"
    mine = own.child_podgroup("ns", 3, "leader", 1)
    assert mine["spec"]["parentCompositePodGroupName"] == "g00003" and "workloadRef" not in mine["spec"]
    with pytest.raises(ValueError):
        flavor("troupe-coscheduling").composite("ns", 3, 2, None)


def test_partial_groups_and_tree_table():
    shape = Shape("l", 3, 2, "topology.kubernetes.io/rack", leaders=1)
    assert partial_groups(shape, ["n1", "n1", "n1", None, None, None]) == 1
    runs = []
    for sched, rate in (("troupe-native", 600.0), ("upstream", 100.0), ("raw", 800.0)):
        r = _run(sched, rate)
        r.update(shape="l", tree=True, partial_groups=0, topology={"violations": 0, "stored": True})
        runs.append(r)
    assert tree_table(runs[:0]) is None
    head, _, native, up, raw = tree_table(runs).splitlines()
    assert "partial replicas" in head
    assert "troupe (native objects)" in native and "6.00x" in native and "0.75x" in native
    assert "8.00x" in raw and "| 0 " in up


def test_tree_table_divides_each_troupe_run_by_the_raw_loop_on_the_same_objects():
    """troupe on its own kinds is divided by raw-troupe (the raw loop on those kinds), troupe on native
    objects by the native raw loop; raw-troupe gets troupe's CRDs under the raw loop's schedulerName."""
    runs = []
    for sched, rate in (("troupe-native", 600.0), ("troupe", 540.0), ("raw", 800.0), ("raw-troupe", 600.0)):
        r = _run(sched, rate)
        r.update(shape="l", tree=True, partial_groups=0, topology={"violations": 0, "stored": True})
        runs.append(r)
    rows = {line.split("|")[3].strip(): line for line in tree_table(runs).splitlines()[2:]}
    assert "0.75x" in rows["troupe (native objects)"]
    assert "0.90x" in rows["troupe"]
    assert "raw bind (troupe's kinds)" in rows
    own, raw_own = flavor("troupe"), flavor("raw-troupe")
    assert raw_own.podgroup_api == own.podgroup_api == "scheduling.troupe.dev/v1alpha2"
    assert raw_own.composite_api == own.composite_api and raw_own.group_label == own.group_label
    assert raw_own.pod("ns", 1, 0)["spec"]["schedulerName"] == flavor("raw").scheduler_name


METRICS = """# HELP apiserver_request_total Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} 40
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 42
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="scheduling.troupe.dev",resource="podgroups",scope="resource",subresource="status",verb="PATCH",version="v1alpha1"} 10
apiserver_request_latencies_total{verb="POST"} 7
"""


def test_request_counts_by_verb_and_resource_and_per_pod_table():
    before = parse_request_counts(METRICS)
    assert before == {"POST pods/binding": 42.0, "POST pods": 42.0, "PATCH podgroups/status": 10.0}
    after = dict(before, **{"POST pods/binding": 142.0, "POST pods": 142.0, "GET nodes": 1.0})
    delta = request_delta(before, after)
    assert delta == {"GET nodes": 1, "POST pods": 100, "POST pods/binding": 100}
    assert request_delta(None, after) is None
    runs = [
        {"run": "5000n-l-troupe", "pods_bound": 100, "api_requests": delta},
        {
            "run": "5000n-l-raw",
            "pods_bound": 50,
            "api_requests": {"POST pods/binding": 50, "PATCH podgroups/status": 5},
        },
        {"run": "not counted", "pods_bound": 10, "api_requests": None},
    ]
    table = requests_table(runs)
    assert table is not None
    lines = table.splitlines()
    assert "5000n-l-troupe" in lines[0] and "not counted" not in lines[0]
    row = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in lines[2:]}
    assert row["POST pods/binding"] == ["1.00", "1.00"]
    assert row["PATCH podgroups/status"] == ["0.00", "0.10"]
    assert row["GET nodes"] == ["0.01", "0.00"]
    assert row["all"] == ["2.01", "1.10"]
    assert requests_table([runs[2]]) is None


def test_status_table_counts_pods_per_second_to_the_last_condition():
    assert scheduled_condition(
        {"status": {"conditions": [{"type": "PodGroupScheduled", "status": "True"}]}}, "PodGroupScheduled"
    )
    assert not scheduled_condition(
        {"status": {"conditions": [{"type": "PodGroupScheduled", "status": "False"}]}}, "PodGroupScheduled"
    )
    assert not scheduled_condition({"status": {}}, "PodGroupScheduled")

    def run(sched: str, done: float | None, cpu: float | None = None) -> dict:
        return {
            "nodes": 5000,
            "shape": "l",
            "shape_label": "l: tree",
            "scheduler": sched,
            "run": f"5000n-l-{sched}",
            "pods_bound": 100,
            "first_created_at": 10.0,
            "last_bound_at": 20.0,
            "status_done_at": done,
            "scheduler_cpu_to_status_s": cpu,
        }

    troupe, raw = run("troupe", 30.0, 2.5), run("raw-troupe", 20.0)
    assert status_rate(troupe) == 5.0 and status_rate(raw) == 10.0
    assert status_rate(run("troupe", None)) is None
    table = status_table([troupe, raw, {**run("upstream", None), "status_done_at": None}])
    assert table is not None
    lines = table.splitlines()
    assert "10.00 s" in lines[2] and "| 5 " in lines[2] and "0.50x" in lines[2] and "2.5" in lines[2]
    assert "not all within the wait" in lines[4]
    no_status = run("upstream", None)
    del no_status["status_done_at"]
    assert status_table([no_status]) is None


def test_the_scheduled_condition_is_the_one_troupe_writes_on_each_kind():
    assert scheduled_condition_type("scheduling.k8s.io/v1beta1") == "PodGroupInitiallyScheduled"
    assert scheduled_condition_type("scheduling.k8s.io/v1alpha3") == "PodGroupInitiallyScheduled"
    assert scheduled_condition_type("scheduling.k8s.io/v1alpha2") == "PodGroupScheduled"
    assert scheduled_condition_type(flavor("troupe").podgroup_api) == "PodGroupScheduled"
