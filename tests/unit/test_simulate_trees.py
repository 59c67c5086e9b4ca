"""`troupe simulate` on trees of groups (CompositePodGroups): the example,
exact, on troupe's own kinds and the native v1alpha3 ones, and how the output
shows a tree (the COMPOSITEPODGROUP table, PARENT, GROUPS, the summary)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.cli import main

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "simulate-composite.yaml"
API = "scheduling.troupe.dev/v1alpha2"
NATIVE = "scheduling.k8s.io/v1alpha3"
LABEL = "scheduling.troupe.dev/pod-group"

WHY = "needs 2 of 2 group(s), 1 feasible: llm-1-workers: needs 4 pods, 2 fit: 0/2 nodes are available: 2 Insufficient cpu."
WORKERS_WHY = "needs 4 pods, 2 fit: 0/2 nodes are available: 2 Insufficient cpu."

EXAMPLE_TABLE = f"""\
COMPOSITEPODGROUP   POLICY   GROUPS   PARENT   CONDITION       MESSAGE
demo/llm-0          gang     2/2      -        Scheduled       2 of 2 group(s) feasible, 5 pod(s) placed
demo/llm-1          gang     0/2      -        Unschedulable   {WHY}

PODGROUP             POLICY   PODS   PLACED/MIN   PARENT   CONDITION       MESSAGE
demo/llm-0-leader    gang     1      1/1          llm-0    Scheduled       1 pod(s) placed
demo/llm-0-workers   gang     4      4/4          llm-0    Scheduled       4 pod(s) placed
demo/llm-1-leader    gang     1      0/1          llm-1    Unschedulable   CompositePodGroup demo/llm-1: {WHY}
demo/llm-1-workers   gang     4      0/4          llm-1    Unschedulable   {WORKERS_WHY}

POD                    GROUP           NODE     MESSAGE
demo/llm-0-leader      llm-0-leader    node-1
demo/llm-0-workers-0   llm-0-workers   node-2
demo/llm-0-workers-1   llm-0-workers   node-1
demo/llm-0-workers-2   llm-0-workers   node-2
demo/llm-0-workers-3   llm-0-workers   node-1
demo/llm-1-leader      llm-1-leader    <none>   PodGroup demo/llm-1-leader: CompositePodGroup demo/llm-1: {WHY}
demo/llm-1-workers-0   llm-1-workers   <none>   PodGroup demo/llm-1-workers: {WORKERS_WHY}
demo/llm-1-workers-1   llm-1-workers   <none>   PodGroup demo/llm-1-workers: {WORKERS_WHY}
demo/llm-1-workers-2   llm-1-workers   <none>   PodGroup demo/llm-1-workers: {WORKERS_WHY}
demo/llm-1-workers-3   llm-1-workers   <none>   PodGroup demo/llm-1-workers: {WORKERS_WHY}

5/10 pending pods placed; PodGroups: 2 Scheduled, 2 Unschedulable; CompositePodGroups: 1 Scheduled, 1 Unschedulable.
"""


def _group(name: str, parent: str, scheduled: bool, message: str, api_group: str, workload: str | None) -> dict:
    return {
        "namespace": "demo",
        "name": name,
        "scheduled": scheduled,
        "reason": "Scheduled" if scheduled else "Unschedulable",
        "message": message,
        "victims": [],
        "preemptedBy": None,
        "placement": None,
        "apiGroup": api_group,
        "workload": workload,
        "parent": parent,
    }


def _composite(name: str, scheduled: bool, message: str, api_group: str) -> dict:
    return {
        "namespace": "demo",
        "name": name,
        "parent": None,
        "policy": "gang",
        "minGroupCount": 2,
        "scheduled": scheduled,
        "reason": "Scheduled" if scheduled else "Unschedulable",
        "message": message,
        "victims": [],
        "preemptedBy": None,
        "apiGroup": api_group,
    }


def expected_json(api_group: str, native: bool) -> dict[str, Any]:
    nodes = {
        "llm-0-leader": "node-1",
        "llm-0-workers-0": "node-2",
        "llm-0-workers-1": "node-1",
        "llm-0-workers-2": "node-2",
        "llm-0-workers-3": "node-1",
        "llm-1-leader": None,
        **{f"llm-1-workers-{i}": None for i in range(4)},
    }

    def wl(role: str) -> str | None:
        return f"llm/{role}" if native else None

    return {
        "pods": [{"namespace": "demo", "name": n, "node": node, "preemptedBy": None} for n, node in nodes.items()],
        "podGroups": [
            _group("llm-0-leader", "llm-0", True, "1 pod(s) placed", api_group, wl("leader")),
            _group("llm-0-workers", "llm-0", True, "4 pod(s) placed", api_group, wl("workers")),
            _group("llm-1-leader", "llm-1", False, f"CompositePodGroup demo/llm-1: {WHY}", api_group, wl("leader")),
            _group("llm-1-workers", "llm-1", False, WORKERS_WHY, api_group, wl("workers")),
        ],
        "compositePodGroups": [
            _composite("llm-0", True, "2 of 2 group(s) feasible, 5 pod(s) placed", api_group),
            _composite("llm-1", False, WHY, api_group),
        ],
    }


def run(capsys: pytest.CaptureFixture[str], path: Path, *args: str) -> str:
    rc = main(["simulate", str(path), *args])
    out, err = capsys.readouterr()
    assert rc == 0 and err == "", err
    return out


def native(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The example in the native kinds of Kubernetes 1.37 (scheduling.k8s.io/v1alpha3):
    PodGroups name their template (workloadRef), pods their group in spec.schedulingGroup."""
    out = []
    for doc in copy.deepcopy(docs):
        if doc["kind"] in ("Workload", "CompositePodGroup"):
            doc["apiVersion"] = NATIVE
        elif doc["kind"] == "PodGroup":
            doc["apiVersion"] = NATIVE
            role = doc["metadata"]["name"].rpartition("-")[2]
            doc["spec"]["workloadRef"] = {"workloadName": "llm", "templateName": role}
        elif doc["kind"] == "Pod":
            group = doc["metadata"].pop("labels")[LABEL]
            doc["spec"]["schedulingGroup"] = {"podGroupName": group}
        out.append(doc)
    return out


def example_docs() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]


# ------------------------------------------------------------- the example


def test_example_table_is_exact(capsys):
    assert run(capsys, EXAMPLE) == EXAMPLE_TABLE


def test_example_json_is_exact(capsys):
    assert json.loads(run(capsys, EXAMPLE, "-o", "json")) == expected_json("scheduling.troupe.dev", native=False)


def test_example_in_native_v1alpha3_kinds_is_placed_the_same(capsys, tmp_path):
    path = tmp_path / "native.yaml"
    path.write_text(yaml.safe_dump_all(native(example_docs()), sort_keys=False))
    table = run(capsys, path)
    # The group tables and the summary are the example's; the pods name their native group.
    groups_part = EXAMPLE_TABLE.partition("\nPOD ")[0]
    assert table.partition("\nPOD ")[0] == groups_part
    assert table.splitlines()[-1] == EXAMPLE_TABLE.splitlines()[-1]
    assert f"PodGroup demo/llm-1-leader (scheduling.k8s.io): CompositePodGroup demo/llm-1: {WHY}" in table
    assert json.loads(run(capsys, path, "-o", "json")) == expected_json("scheduling.k8s.io", native=True)


# ------------------------------------------------------------ the output


def node(name: str, cpu: int, **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels} if labels else {"name": name}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": meta,
        "status": {"allocatable": {"cpu": str(cpu), "pods": "32"}},
    }


def cpg(name: str, min_groups: int | None, parent: str | None = None, key: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "workloadRef": {"workloadName": "w", "templateName": "t"},
        "schedulingPolicy": {"basic": {}} if min_groups is None else {"gang": {"minGroupCount": min_groups}},
    }
    if parent:
        spec["parentCompositePodGroupName"] = parent
    if key:
        spec["schedulingConstraints"] = {"topology": [{"key": key}]}
    return {"apiVersion": API, "kind": "CompositePodGroup", "metadata": {"name": name, "namespace": "ns"}, "spec": spec}


def pg(name: str, minimum: int | None, parent: str | None, cpus: list[int], key: str | None = None) -> list[dict]:
    spec: dict[str, Any] = {"schedulingPolicy": {"basic": {}} if minimum is None else {"gang": {"minCount": minimum}}}
    if parent:
        spec["parentCompositePodGroupName"] = parent
    if key:
        spec["schedulingConstraints"] = {"topology": [{"key": key}]}
    out: list[dict[str, Any]] = [
        {"apiVersion": API, "kind": "PodGroup", "metadata": {"name": name, "namespace": "ns"}, "spec": spec}
    ]
    for i, cpu in enumerate(cpus):
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"{name}-pod-{i}", "namespace": "ns", "labels": {LABEL: name}},
                "spec": {
                    "schedulerName": "troupe-scheduler",
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": str(cpu)}}}],
                },
            }
        )
    return out


def simulate(capsys, tmp_path: Path, docs: list[dict[str, Any]], *args: str) -> str:
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return run(capsys, path, *args)


def rows(table: str, header: str) -> dict[str, dict[str, str]]:
    """The rows of the table whose first column is `header`, by name, each by column."""
    lines = table.split("\n\n")
    block = next(b for b in lines if b.startswith(header)).splitlines()
    heads = re.split(r"\s{3,}", block[0])
    out = {}
    for line in block[1:]:
        cells = re.split(r"\s{3,}", line, maxsplit=len(heads) - 1)
        out[cells[0]] = dict(zip(heads, cells + [""] * (len(heads) - len(cells))))
    return out


def test_an_input_without_trees_has_no_tree_table_column_or_keys(capsys, tmp_path):
    docs = [node("n1", 4), *pg("g", 2, None, [1, 1])]
    table = simulate(capsys, tmp_path, docs)
    assert "COMPOSITEPODGROUP" not in table and "PARENT" not in table and "CompositePodGroups" not in table
    doc = json.loads(simulate(capsys, tmp_path, docs, "-o", "json"))
    assert set(doc) == {"pods", "podGroups"} and "parent" not in doc["podGroups"][0]


def test_groups_counts_the_children_placed_at_every_level(capsys, tmp_path):
    """Upstream's TestCPGHierarchicalScheduling: GROUPS is children placed /
    minGroupCount (a basic CompositePodGroup: 1), a sub-tree counting as
    placed with its own minGroupCount."""
    docs = [node("n1", 20), cpg("cpg-root", 2)]
    docs += [cpg("cpg-sub1", 2, "cpg-root"), cpg("cpg-sub2", None, "cpg-root"), cpg("cpg-sub3", 2, "cpg-root")]
    docs += pg("pg1", 3, "cpg-sub1", [1, 1, 1]) + pg("pg2", 3, "cpg-sub1", [1, 1, 1])
    docs += pg("pg3", 3, "cpg-sub1", [100, 100, 100])
    docs += pg("pg4", None, "cpg-sub2", [1, 1, 1]) + pg("pg5", 3, "cpg-sub2", [1, 1, 1])
    docs += pg("pg6", 3, "cpg-sub3", [1, 1, 1]) + pg("pg7", 3, "cpg-sub3", [100, 100, 100])
    table = simulate(capsys, tmp_path, docs)
    got = {k: (r["POLICY"], r["GROUPS"], r["PARENT"], r["CONDITION"]) for k, r in rows(table, "COMPOSITE").items()}
    assert got == {
        "ns/cpg-root": ("gang", "2/2", "-", "Scheduled"),
        "ns/cpg-sub1": ("gang", "2/2", "cpg-root", "Scheduled"),
        "ns/cpg-sub2": ("basic", "2/1", "cpg-root", "Scheduled"),
        "ns/cpg-sub3": ("gang", "0/2", "cpg-root", "Unschedulable"),
    }
    assert rows(table, "COMPOSITE")["ns/cpg-sub3"]["MESSAGE"].startswith("needs 2 of 2 group(s), 1 feasible: pg7: ")
    assert {k: r["PARENT"] for k, r in rows(table, "PODGROUP").items()}["ns/pg6"] == "cpg-sub3"
    assert table.endswith(
        "; PodGroups: 4 Scheduled, 3 Unschedulable; CompositePodGroups: 3 Scheduled, 1 Unschedulable.\n"
    )


def test_a_leaf_of_a_tree_that_waits_says_why_on_its_row(capsys, tmp_path):
    """No condition is written while the parent is missing; the row says what its pods were told."""
    docs = [node("n1", 20), *pg("pg1", 2, "nowhere", [1, 1])]
    table = simulate(capsys, tmp_path, docs)
    row = rows(table, "PODGROUP")["ns/pg1"]
    assert (row["PARENT"], row["CONDITION"]) == ("nowhere", "-")
    assert row["MESSAGE"] == "waiting for CompositePodGroup ns/nowhere to be created"
    assert "COMPOSITEPODGROUP" not in table
    (group,) = json.loads(simulate(capsys, tmp_path, docs, "-o", "json"))["podGroups"]
    assert (group["parent"], group["reason"], group["message"]) == ("nowhere", None, None)


def test_a_root_waiting_for_its_quorum_says_so(capsys, tmp_path):
    docs = [node("n1", 20), cpg("root", 2), *pg("pg1", 2, "root", [1, 1]), *pg("pg2", 3, "root", [1])]
    doc = json.loads(simulate(capsys, tmp_path, docs, "-o", "json"))
    (root,) = doc["compositePodGroups"]
    assert (root["scheduled"], root["reason"]) == (False, "Unschedulable")
    assert root["message"].startswith("waiting for CompositePodGroup ns/root tree to meet quorum")
    assert "pg2: minCount is 3, 1 exist" in root["message"]


def test_a_root_with_fewer_children_than_its_quorum_says_how_many_exist(capsys, tmp_path):
    # minGroupCount 2 and one child (the other deleted, or not made yet): not "2 of 1".
    docs = [node("n1", 20), cpg("root", 2), *pg("pg1", 2, "root", [1, 1])]
    doc = json.loads(simulate(capsys, tmp_path, docs, "-o", "json"))
    (root,) = doc["compositePodGroups"]
    assert "needs 2 group(s) ready, 1 exist, 1 ready" in root["message"], root["message"]


def test_trees_laid_out_wrong_are_invalid_on_every_composite(capsys, tmp_path):
    docs = [node("n1", 20), cpg("a", None, "b"), cpg("b", None, "a"), *pg("pg1", 1, "a", [1])]
    table = simulate(capsys, tmp_path, docs)
    got = {k: (r["PARENT"], r["CONDITION"]) for k, r in rows(table, "COMPOSITE").items()}
    assert got == {"ns/a": ("b", "Invalid"), "ns/b": ("a", "Invalid")}
    assert table.endswith("CompositePodGroups: 2 Invalid.\n")


def test_an_unreadable_composite_is_shown_invalid(capsys, tmp_path):
    bad = cpg("bad", 2)
    bad["spec"]["schedulingPolicy"] = {"gang": {"minGroupCount": 0}}
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all([node("n1", 20), bad, *pg("pg1", 1, "bad", [1])]))
    assert main(["simulate", str(path)]) == 0
    table = capsys.readouterr().out
    row = rows(table, "COMPOSITE")["ns/bad"]
    assert (row["POLICY"], row["GROUPS"], row["CONDITION"]) == ("-", "0/-", "Invalid")
    assert "minGroupCount" in row["MESSAGE"]


def test_a_composite_with_nothing_under_it(capsys, tmp_path):
    table = simulate(capsys, tmp_path, [node("n1", 20), cpg("lonely", 2)])
    row = rows(table, "COMPOSITE")["ns/lonely"]
    assert (row["GROUPS"], row["CONDITION"]) == ("0/2", "-")
    assert row["MESSAGE"] == "no PodGroups or CompositePodGroups under it in the input"
    assert table.endswith("0/0 pending pods placed; CompositePodGroups: 1 no condition.\n")


def test_each_leaf_shows_the_domain_it_went_to(capsys, tmp_path):
    """Upstream's cpg_tas case 4: the root in one zone, each child in one rack of it."""
    nodes = [
        node("n1", 2, zone="z1", rack="r1"),
        node("n2", 2, zone="z1", rack="r2"),
        node("n3", 2, zone="z2", rack="r1"),
        node("n4", 2, zone="z2", rack="r1"),
    ]
    existing = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "existing-z2", "namespace": "ns"},
        "spec": {"nodeName": "n3", "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
    }
    docs = [*nodes, existing, cpg("root", 2, key="zone")]
    docs += pg("pg1", 2, "root", [1, 1], key="rack") + pg("pg2", 2, "root", [1, 1], key="rack")
    table = simulate(capsys, tmp_path, docs)
    assert rows(table, "COMPOSITE")["ns/root"]["MESSAGE"] == "2 of 2 group(s) feasible in zone=z1, 4 pod(s) placed"
    assert {k: r["PLACEMENT"] for k, r in rows(table, "PODGROUP").items()} == {"ns/pg1": "rack=r1", "ns/pg2": "rack=r2"}


def test_a_tree_that_preempts_counts_its_victims_on_its_root(capsys, tmp_path):
    """Upstream's cpg_tas preemption case 1 without topology: the tree evicts
    the 2 low pods in its way; VICTIMS is on the root's row, not its PodGroups'."""
    classes = [
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": n}, "value": v}
        for n, v in (("low", 10), ("high", 100))
    ]
    low = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"low-{i}", "namespace": "ns"},
            "spec": {
                "nodeName": f"n{i // 2 + 1}",
                "priorityClassName": "low",
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
            },
        }
        for i in range(4)
    ]
    tree = [cpg("root", 2), *pg("pg1", 2, "root", [1, 1]), *pg("pg2", 2, "root", [1, 1])]
    for doc in tree:
        if doc["kind"] == "Pod":
            doc["spec"]["priorityClassName"] = "high"
    docs = [node("n1", 2), node("n2", 2), node("n3", 2), *classes, *low, *tree]
    table = simulate(capsys, tmp_path, docs)
    assert rows(table, "COMPOSITE")["ns/root"]["VICTIMS"] == "2"
    assert "VICTIMS" not in table.split("\n\n")[1]  # the PODGROUP table
    (root,) = json.loads(simulate(capsys, tmp_path, docs, "-o", "json"))["compositePodGroups"]
    assert len(root["victims"]) == 2 and all(v.startswith("ns/low-") for v in root["victims"])


def test_a_tree_taken_whole_shows_preempted_on_its_composite(capsys, tmp_path):
    """A running tree with disruptionMode all goes whole for a higher-priority gang."""
    classes = [
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": n}, "value": v}
        for n, v in (("low", 10), ("high", 100))
    ]
    root = cpg("old", 2)
    root["spec"]["disruptionMode"] = {"all": {}}
    tree = [root, *pg("a", 1, "old", [1]), *pg("b", 2, "old", [1, 1])]
    urgent = pg("urgent", 4, None, [1, 1, 1, 1])
    for doc in tree + urgent:
        if doc["kind"] == "Pod":
            doc["spec"]["priorityClassName"] = "high" if doc in urgent else "low"
            if doc in tree:
                doc["spec"]["nodeName"] = "n1"
    docs = [node("n1", 4), *classes, *tree, *urgent]
    table = simulate(capsys, tmp_path, docs)
    row = rows(table, "COMPOSITE")["ns/old"]
    assert (row["CONDITION"], row["MESSAGE"]) == ("Preempted", "preempted by PodGroup ns/urgent (DisruptionTarget)")
    assert table.endswith("CompositePodGroups: 1 Preempted.\n")
    (old,) = json.loads(simulate(capsys, tmp_path, docs, "-o", "json"))["compositePodGroups"]
    assert (old["preemptedBy"], old["reason"]) == ("PodGroup ns/urgent", None)
