"""Trees of groups (CompositePodGroups) placed whole: upstream's
test/integration/scheduler/podgroup/cpg_test.go cases, each named after
upstream's, on troupe's own kinds through `troupe simulate` (the same core
as `troupe run`), plus what upstream does not do: status on each
CompositePodGroup, and trees laid out wrong."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.cli import main

API = "scheduling.troupe.dev/v1alpha2"
LABEL = "scheduling.troupe.dev/pod-group"
NS = "ns"


def node(name: str, cpu: int, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"cpu": str(cpu), "pods": "32"}},
    }


def policy(minimum: int | None) -> dict[str, Any]:
    return {"basic": {}} if minimum is None else {"gang": {"minCount": minimum}}


def cpg(name: str, min_groups: int | None, parent: str | None = None, key: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "workloadRef": {"workloadName": "w", "templateName": "t"},
        "schedulingPolicy": {"basic": {}} if min_groups is None else {"gang": {"minGroupCount": min_groups}},
    }
    if parent:
        spec["parentCompositePodGroupName"] = parent
    if key:
        spec["schedulingConstraints"] = {"topology": [{"key": key}]}
    return {"apiVersion": API, "kind": "CompositePodGroup", "metadata": {"name": name, "namespace": NS}, "spec": spec}


def pg(
    name: str, minimum: int | None, parent: str | None, cpus: list[int], key: str | None = None
) -> list[dict[str, Any]]:
    spec: dict[str, Any] = {"schedulingPolicy": policy(minimum)}
    if parent:
        spec["parentCompositePodGroupName"] = parent
    if key:
        spec["schedulingConstraints"] = {"topology": [{"key": key}]}
    out: list[dict[str, Any]] = [
        {"apiVersion": API, "kind": "PodGroup", "metadata": {"name": name, "namespace": NS}, "spec": spec}
    ]
    for i, cpu in enumerate(cpus):
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"{name}-pod-{i}", "namespace": NS, "labels": {LABEL: name}},
                "spec": {
                    "schedulerName": "troupe-scheduler",
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": str(cpu)}}}],
                },
            }
        )
    return out


PLACEMENT = (
    "apiVersion: scheduling.troupe.dev/v1alpha1\nkind: SchedulerConfiguration\n"
    "profiles:\n- schedulerName: troupe-scheduler\n  podGroupScheduling: {algorithm: Placement}\n"
)


def simulate(tmp_path: Path, capsys: pytest.CaptureFixture[str], docs: list[dict[str, Any]]) -> dict[str, Any]:
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    config = tmp_path / "config.yaml"
    config.write_text(PLACEMENT)
    rc = main(["simulate", str(path), "--output", "json", "--config", str(config)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return json.loads(out)


def table(tmp_path: Path, capsys: pytest.CaptureFixture[str], docs: list[dict[str, Any]]) -> str:
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    config = tmp_path / "config.yaml"
    config.write_text(PLACEMENT)
    rc = main(["simulate", str(path), "--config", str(config)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return out


def pod_lines(out: str, text: str) -> int:
    """The lines of the POD table that say `text`."""
    return sum(1 for line in out.splitlines() if line.split()[:1] and "-pod-" in line.split()[0] and text in line)


def placed(doc: dict[str, Any]) -> dict[str, bool]:
    """Each PodGroup: all of its pods placed (True), none (False)."""
    by_group: dict[str, list[bool]] = {}
    for p in doc["pods"]:
        by_group.setdefault(p["name"].rpartition("-pod-")[0], []).append(p["node"] is not None)
    for name, nodes in by_group.items():
        assert all(nodes) or not any(nodes), f"{name} placed in part: {nodes}"
    return {name: all(nodes) for name, nodes in by_group.items()}


def test_cpg_hierarchical_scheduling(tmp_path, capsys):
    docs = [node("n1", 20), cpg("cpg-root", 2)]
    docs += [cpg("cpg-sub1", 2, "cpg-root"), cpg("cpg-sub2", None, "cpg-root"), cpg("cpg-sub3", 2, "cpg-root")]
    docs += pg("pg1", 3, "cpg-sub1", [1, 1, 1]) + pg("pg2", 3, "cpg-sub1", [1, 1, 1])
    docs += pg("pg3", 3, "cpg-sub1", [100, 100, 100])
    docs += pg("pg4", None, "cpg-sub2", [1, 1, 1]) + pg("pg5", 3, "cpg-sub2", [1, 1, 1])
    docs += pg("pg6", 3, "cpg-sub3", [1, 1, 1]) + pg("pg7", 3, "cpg-sub3", [100, 100, 100])
    got = placed(simulate(tmp_path, capsys, docs))
    # pg6 fits, but its parent cpg-sub3 needs 2 of its groups and has 1.
    assert got == {"pg1": True, "pg2": True, "pg3": False, "pg4": True, "pg5": True, "pg6": False, "pg7": False}


def test_cpg_min_group_count(tmp_path, capsys):
    docs = [node("n1", 20), cpg("cpg-root", 2)]
    docs += pg("pg1", 3, "cpg-root", [1, 1, 1]) + pg("pg2", 3, "cpg-root", [1, 1, 1])
    docs += pg("pg3", 3, "cpg-root", [100, 1, 1])
    assert placed(simulate(tmp_path, capsys, docs)) == {"pg1": True, "pg2": True, "pg3": False}


def test_cpg_basic_with_gang_children(tmp_path, capsys):
    docs = [node("n1", 20), cpg("cpg-root", None)]
    docs += pg("pg1", 3, "cpg-root", [1, 1, 1]) + pg("pg2", 3, "cpg-root", [100, 1, 1])
    assert placed(simulate(tmp_path, capsys, docs)) == {"pg1": True, "pg2": False}


def test_cpg_basic_with_basic_children(tmp_path, capsys):
    docs = [node("n1", 20), cpg("cpg-root", None)]
    docs += pg("pg1", None, "cpg-root", [1, 1]) + pg("pg2", None, "cpg-root", [1, 1])
    assert placed(simulate(tmp_path, capsys, docs)) == {"pg1": True, "pg2": True}


def test_cpg_gang_with_basic_children(tmp_path, capsys):
    docs = [node("n1", 8), cpg("cpg-root", 2)]
    docs += pg("pg1", None, "cpg-root", [1, 1, 1]) + pg("pg2", None, "cpg-root", [1, 1, 1])
    docs += pg("pg3", None, "cpg-root", [10, 10, 10])
    assert placed(simulate(tmp_path, capsys, docs)) == {"pg1": True, "pg2": True, "pg3": False}


def test_cpg_basic_with_unschedulable_basic_children(tmp_path, capsys):
    docs = [node("n1", 20), cpg("cpg-root", None)]
    docs += pg("pg1", None, "cpg-root", [50, 50]) + pg("pg2", None, "cpg-root", [50, 50])
    assert placed(simulate(tmp_path, capsys, docs)) == {"pg1": False, "pg2": False}


def test_two_leader_worker_replicas_room_for_one_bind_one_whole(tmp_path, capsys):
    """The issue's case: two replicas (root gang over a 1-pod leader group and
    a 4-pod worker gang), room for one: one replica binds whole, the other
    nothing (troupe before: neither)."""
    docs = [node("n1", 5)]
    for r in ("a", "b"):
        docs += [cpg(f"replica-{r}", 2)]
        docs += pg(f"{r}-leader", 1, f"replica-{r}", [1]) + pg(f"{r}-workers", 4, f"replica-{r}", [1, 1, 1, 1])
    got = placed(simulate(tmp_path, capsys, docs))
    assert sorted(got.values()) == [False, False, True, True]
    assert got["a-leader"] == got["a-workers"] and got["b-leader"] == got["b-workers"]


def test_a_missing_parent_waits_and_says_which(tmp_path, capsys):
    docs = [node("n1", 20), *pg("pg1", 2, "nowhere", [1, 1])]
    assert placed(simulate(tmp_path, capsys, docs)) == {"pg1": False}
    assert pod_lines(table(tmp_path, capsys, docs), "waiting for CompositePodGroup ns/nowhere to be created") == 2


def test_a_tree_waits_for_its_quorum(tmp_path, capsys):
    # pg2 has 1 of its 3 pods: the root (2 of 2 groups) is not ready, nothing is tried.
    docs = [node("n1", 20), cpg("root", 2)]
    docs += pg("pg1", 2, "root", [1, 1])
    docs += pg("pg2", 3, "root", [1])
    assert placed(simulate(tmp_path, capsys, docs)) == {"pg1": False, "pg2": False}
    assert pod_lines(table(tmp_path, capsys, docs), "waiting for CompositePodGroup ns/root tree to meet quorum") == 3


def test_a_cycle_is_refused_not_scheduled(tmp_path, capsys):
    docs = [node("n1", 20), cpg("a", None, "b"), cpg("b", None, "a"), *pg("pg1", 1, "a", [1])]
    assert placed(simulate(tmp_path, capsys, docs)) == {"pg1": False}
    assert "cycle of parentCompositePodGroupName" in table(tmp_path, capsys, docs)


def test_too_deep_is_refused(tmp_path, capsys):
    docs = [node("n1", 20), cpg("c1", None), cpg("c2", None, "c1"), cpg("c3", None, "c2"), cpg("c4", None, "c3")]
    docs += pg("pg1", 1, "c4", [1])
    assert placed(simulate(tmp_path, capsys, docs)) == {"pg1": False}
    assert "more than 4 levels" in table(tmp_path, capsys, docs)


def test_nested_topology_root_in_one_zone_children_in_one_rack(tmp_path, capsys):
    """Upstream's cpg_tas case 4: root in one zone, each child in one rack."""
    nodes = [
        node("n1", 2, zone="z1", rack="r1"),
        node("n2", 2, zone="z1", rack="r2"),
        node("n3", 2, zone="z2", rack="r1"),
        node("n4", 2, zone="z2", rack="r1"),
    ]
    existing = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "existing-z2", "namespace": NS},
        "spec": {"nodeName": "n3", "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
    }
    docs = [*nodes, existing, cpg("root", 2, key="zone")]
    docs += pg("pg1", 2, "root", [1, 1], key="rack") + pg("pg2", 2, "root", [1, 1], key="rack")
    doc = simulate(tmp_path, capsys, docs)
    where = {p["name"]: p["node"] for p in doc["pods"] if "-pod-" in p["name"]}
    assert set(where.values()) <= {"n1", "n2"} and None not in where.values()
    assert where["pg1-pod-0"] == where["pg1-pod-1"] and where["pg2-pod-0"] == where["pg2-pod-1"]


def test_a_child_with_another_priority_than_its_root_is_refused(tmp_path, capsys):
    docs = [node("n1", 20), cpg("root", None)]
    child = pg("pg1", 1, "root", [1])
    child[0]["spec"]["priority"] = 5
    docs += child
    assert placed(simulate(tmp_path, capsys, docs)) == {"pg1": False}
    assert "has priority 5, its root none: a tree has one priority" in table(tmp_path, capsys, docs)


def test_composites_of_several_workloads_are_refused(tmp_path, capsys):
    sub = cpg("sub", None, "root")
    sub["spec"]["workloadRef"] = {"workloadName": "other", "templateName": "t"}
    docs = [node("n1", 20), cpg("root", None), sub, *pg("pg1", 1, "sub", [1])]
    assert placed(simulate(tmp_path, capsys, docs)) == {"pg1": False}
    assert "name several Workloads (other, w)" in table(tmp_path, capsys, docs)


def test_another_child_order_places_what_upstreams_fixed_order_misses(tmp_path, capsys):
    """Room for 4 pods. In upstream's order pg1 (basic, 3 pods) takes 3 and
    pg2 (a gang of 2) cannot fit: the root (2 of 2 groups) fails and nothing
    binds. With pg2 first, pg2 places 2 and pg1 2 of its 3: the root holds."""
    docs = [node("n1", 4), cpg("root", 2)]
    docs += pg("pg1", None, "root", [1, 1, 1]) + pg("pg2", 2, "root", [1, 1])
    doc = simulate(tmp_path, capsys, docs)
    nodes = {p["name"]: p["node"] for p in doc["pods"]}
    assert nodes["pg2-pod-0"] and nodes["pg2-pod-1"]
    assert sum(1 for name, n in nodes.items() if name.startswith("pg1") and n) == 2
    out = table(tmp_path, capsys, docs)
    assert "4/5 pending pods placed" in out, out


def test_each_childs_minimum_first_places_what_no_child_order_does(tmp_path, capsys):
    """Room for 5 pods of 1 CPU. root (3 of 3 groups) over pg1 (basic, 3
    pods of 1), pg2 (basic, 1 pod of 2) and pg3 (basic, 1 pod of 1): in every
    order of the children one of them places its extras first (pg1 takes 3,
    or pg2 and pg1 leave 0 for pg3) and a later one finds no room. Each
    child's minimum first (3 pods: 1 + 2 + 1 CPU), then pg1's extras: 1 more fits."""
    docs = [node("n1", 5), cpg("root", 3)]
    docs += pg("pg1", None, "root", [1, 1, 1]) + pg("pg2", None, "root", [2]) + pg("pg3", None, "root", [1])
    doc = simulate(tmp_path, capsys, docs)
    nodes = {p["name"]: p["node"] for p in doc["pods"]}
    assert nodes["pg2-pod-0"] and nodes["pg3-pod-0"]
    assert sum(1 for name, n in nodes.items() if name.startswith("pg1") and n) == 2
    (root,) = doc["compositePodGroups"]
    assert root["message"] == (
        "3 of 3 group(s) feasible, 3 pod(s) placed; 1 more pod(s) placed after the minimums "
        "(search: each child's minimum first)"
    ), root["message"]


def test_search_steps_zero_keeps_upstreams_order(tmp_path, capsys):
    docs = [node("n1", 4), cpg("root", 2)]
    docs += pg("pg1", None, "root", [1, 1, 1]) + pg("pg2", 2, "root", [1, 1])
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    config = tmp_path / "config.yaml"
    config.write_text(PLACEMENT.replace("{algorithm: Placement}", "{algorithm: Placement, searchSteps: 0}"))
    assert main(["simulate", str(path), "--output", "json", "--config", str(config)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert all(p["node"] is None for p in doc["pods"])


def priority_class(name: str, value: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value}


def running(name: str, node_name: str, cpu: int, priority: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "nodeName": node_name,
            "priorityClassName": priority,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": str(cpu)}}}],
        },
    }


def with_priority(docs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    for d in docs:
        if d["kind"] == "Pod":
            d["spec"]["priorityClassName"] = name
    return docs


def test_a_tree_preempts_lower_priority_pods_for_the_whole_tree(tmp_path, capsys):
    """Upstream's cpg_tas preemption case 1 without topology: 4 one-CPU low
    pods fill 2 of 3 nodes; the tree (2 gangs of 2) needs 4 CPUs: exactly
    the 2 low pods in the way... of the rest none is evicted."""
    docs = [node("n1", 2), node("n2", 2), node("n3", 2), priority_class("low", 10), priority_class("high", 100)]
    docs += [running(f"low-{i}", f"n{i // 2 + 1}", 1, "low") for i in range(4)]
    docs += [cpg("root", 2)]
    docs += with_priority(pg("pg1", 2, "root", [1, 1]) + pg("pg2", 2, "root", [1, 1]), "high")
    doc = simulate(tmp_path, capsys, docs)
    nodes = {p["name"]: p["node"] for p in doc["pods"]}
    assert all(nodes[f"pg{g}-pod-{i}"] for g in (1, 2) for i in (0, 1)), nodes
    evicted = sorted(p["name"] for p in doc["pods"] if p["preemptedBy"])
    assert len(evicted) == 2 and all(name.startswith("low-") for name in evicted), evicted


def test_a_tree_does_not_preempt_what_would_not_make_it_fit(tmp_path, capsys):
    docs = [node("n1", 2), priority_class("low", 10), priority_class("high", 100)]
    docs += [running("low-0", "n1", 1, "low")]
    docs += [cpg("root", 2)]
    docs += with_priority(pg("pg1", 2, "root", [1, 1]) + pg("pg2", 2, "root", [1, 1]), "high")
    doc = simulate(tmp_path, capsys, docs)
    assert not any(p["preemptedBy"] for p in doc["pods"])
    assert "the tree does not fit (4 pods) even with every lower-priority pod removed" in table(tmp_path, capsys, docs)


def test_a_lower_priority_tree_preempts_nothing(tmp_path, capsys):
    docs = [node("n1", 2), priority_class("low", 10), priority_class("high", 100)]
    docs += [running("high-0", "n1", 2, "high")]
    docs += [cpg("root", None)]
    docs += with_priority(pg("pg1", 1, "root", [1]), "low")
    doc = simulate(tmp_path, capsys, docs)
    assert not any(p["preemptedBy"] for p in doc["pods"])
    assert all(p["node"] in (None, "n1") for p in doc["pods"])


def test_a_tree_with_disruption_mode_all_is_preempted_whole(tmp_path, capsys):
    """A gang of 2 needs one node's room; the low tree runs on both nodes,
    below a CompositePodGroup with disruptionMode all: its 4 pods go
    together (a pod at a time would take 2 and leave the tree broken)."""
    docs = [node("n1", 2), node("n2", 2), priority_class("low", 10), priority_class("high", 100)]
    root = cpg("low-root", None)
    root["spec"]["disruptionMode"] = {"all": {}}
    docs += [root]
    for leaf, where in (("lpg1", "n1"), ("lpg2", "n2")):
        members = pg(leaf, None, "low-root", [1, 1])
        for d in members[1:]:
            d["spec"]["nodeName"] = where
        docs += with_priority(members, "low")
    docs += with_priority(pg("urgent", 2, None, [1, 1]), "high")
    doc = simulate(tmp_path, capsys, docs)
    evicted = sorted(p["name"] for p in doc["pods"] if p["preemptedBy"])
    assert evicted == ["lpg1-pod-0", "lpg1-pod-1", "lpg2-pod-0", "lpg2-pod-1"], evicted
    assert all(p["node"] for p in doc["pods"] if p["name"].startswith("urgent"))


def test_a_composite_falls_back_to_its_next_topology_key(tmp_path, capsys):
    """troupe's kind ranks up to 4 keys: no rack holds the tree (2+2 pods on
    2-CPU nodes, one node per rack), a zone does."""
    nodes = [
        node("n1", 2, zone="z1", rack="r1"),
        node("n2", 2, zone="z1", rack="r2"),
        node("n3", 1, zone="z2", rack="r3"),
    ]
    root = cpg("root", 2)
    root["spec"]["schedulingConstraints"] = {"topology": [{"key": "rack"}, {"key": "zone"}]}
    docs = [*nodes, root, *pg("pg1", 2, "root", [1, 1]), *pg("pg2", 2, "root", [1, 1])]
    doc = simulate(tmp_path, capsys, docs)
    assert {p["node"] for p in doc["pods"]} == {"n1", "n2"}


def test_a_native_tree_whose_root_says_never_does_not_preempt(tmp_path, capsys):
    docs = [node("n1", 2), priority_class("low", 10), priority_class("high", 100)]
    docs += [running("low-0", "n1", 2, "low")]
    root = {
        "apiVersion": "scheduling.k8s.io/v1alpha3",
        "kind": "CompositePodGroup",
        "metadata": {"name": "root", "namespace": NS},
        "spec": {
            "workloadRef": {"workloadName": "w", "templateName": "t"},
            "schedulingPolicy": {"basic": {}},
            "preemptionPolicy": "Never",
        },
    }
    leaf = {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "pg1", "namespace": NS},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": 1}},
            "parentCompositePodGroupName": "root",
            "workloadRef": {"workloadName": "w", "templateName": "t"},
        },
    }
    pod = pg("pg1", 1, None, [1])[1]
    pod["metadata"]["labels"] = {}
    pod["spec"]["schedulingGroup"] = {"podGroupName": "pg1"}
    pod["spec"]["priorityClassName"] = "high"
    doc = simulate(tmp_path, capsys, [*docs, root, leaf, pod])
    assert not any(p["preemptedBy"] for p in doc["pods"])
    assert "has preemptionPolicy Never" in table(tmp_path, capsys, [*docs, root, leaf, pod])


def test_a_leaf_naming_a_missing_workload_template_fails_alone(tmp_path, capsys):
    docs = [node("n1", 20), cpg("root", None)]
    bad = pg("pg1", 1, "root", [1])
    bad[0]["spec"]["podGroupTemplateRef"] = {"workload": {"workloadName": "nowhere", "podGroupTemplateName": "t"}}
    docs += bad + pg("pg2", 1, "root", [1])
    assert placed(simulate(tmp_path, capsys, docs)) == {"pg1": False, "pg2": True}
    assert "Workload ns/nowhere does not exist" in table(tmp_path, capsys, docs)


def test_full_racks_are_not_tried_and_say_so(tmp_path, capsys):
    """No rack has the free room the tree needs at the least: no rack is tried
    pod by pod, and the root says why."""
    nodes = [node("n1", 2, rack="r1"), node("n2", 2, rack="r2")]
    docs = [*nodes, cpg("root", 2, key="rack"), *pg("pg1", 2, "root", [1, 1]), *pg("pg2", 2, "root", [1, 1])]
    assert placed(simulate(tmp_path, capsys, docs)) == {"pg1": False, "pg2": False}
    assert "no rack domain has the free room the subtree needs at the least (cpu 4)" in table(tmp_path, capsys, docs)


def test_the_first_domain_that_places_everything_is_kept(tmp_path, capsys):
    nodes = [node("n1", 4, rack="r1"), node("n2", 4, rack="r2")]
    docs = [*nodes, cpg("root", 2, key="rack"), *pg("pg1", 2, "root", [1, 1]), *pg("pg2", 2, "root", [1, 1])]
    doc = simulate(tmp_path, capsys, docs)
    assert {p["node"] for p in doc["pods"]} == {"n1"}


def test_simulate_shows_the_reservation_a_starving_tree_would_get(tmp_path, capsys):
    busy = [running("busy-a", "a", 1, "low"), running("busy-b", "b", 1, "low")]
    docs = [node("a", 4), node("b", 4), priority_class("low", 0), *busy, cpg("rep", 2)]
    docs += pg("rep-leader", 1, "rep", [4]) + pg("rep-workers", 1, "rep", [4])
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    assert main(["simulate", str(path), "--waited", "120", "--output", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert placed(doc)["rep-leader"] is False
    root = next(c for c in doc["compositePodGroups"] if c["name"] == "rep")
    assert "reserved node(s) a, b for 2 pod(s); waiting for 2 running pod(s) to finish" in json.dumps(root)
