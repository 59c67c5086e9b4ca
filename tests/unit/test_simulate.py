"""`troupe simulate`: the CLI run in-process on the example and on small inputs."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.api.config import SchedulerConfiguration
from scheduler.cli import main
from scheduler.plugins import in_tree_registry
from scheduler.simulate import load_text, simulate

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "simulate-two-jobs.yaml"
LABEL = "scheduling.troupe.dev/pod-group"


# ----------------------------------------------------------------- builders


def node(name: str, cpu: str = "2", pods: str | None = "110") -> dict[str, Any]:
    alloc: dict[str, Any] = {"cpu": cpu, "memory": "8Gi"}
    if pods is not None:
        alloc["pods"] = pods
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": {"allocatable": alloc}}


def pod(name: str, group: str | None = None, cpu: str = "1", ns: str = "ns", **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if group:
        meta["labels"] = {LABEL: group}
    body_spec = {
        "schedulerName": "troupe-scheduler",
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
    }
    body_spec.update(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body_spec}


def podgroup(name: str, min_count: int | None = None, ns: str = "ns", policy: Any = None) -> dict[str, Any]:
    if policy is None:
        policy = {"gang": {"minCount": min_count}} if min_count else {"basic": {}}
    return {
        "apiVersion": "scheduling.troupe.dev/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"schedulingPolicy": policy},
    }


def priority_class(name: str, value: Any, global_default: bool = False) -> dict[str, Any]:
    body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value}
    if global_default:
        body["globalDefault"] = True
    return body


def gang(name: str, n: int, min_count: int | None = None, cpu: str = "1", **spec: Any) -> list[dict[str, Any]]:
    return [podgroup(name, min_count or n)] + [pod(f"{name}-{i}", name, cpu, **spec) for i in range(n)]


def dump(docs: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False)


def run(
    capsys, tmp_path: Path, text: str | list[dict[str, Any]], *args: str, name: str = "in.yaml"
) -> tuple[int, str, str]:
    path = tmp_path / name
    path.write_text(text if isinstance(text, str) else dump(text))
    rc = main(["simulate", str(path), *args])
    out, err = capsys.readouterr()
    return rc, out, err.replace(str(path), name)


def run_json(capsys, tmp_path: Path, docs: list[dict[str, Any]], *args: str) -> dict[str, Any]:
    rc, out, err = run(capsys, tmp_path, docs, "--output", "json", *args)
    assert rc == 0, err
    return json.loads(out)


def nodes_of(doc: dict[str, Any]) -> dict[str, str | None]:
    return {f"{p['namespace']}/{p['name']}": p["node"] for p in doc["pods"]}


def groups_of(doc: dict[str, Any]) -> dict[str, tuple[bool, str | None, str | None]]:
    return {f"{g['namespace']}/{g['name']}": (g["scheduled"], g["reason"], g["message"]) for g in doc["podGroups"]}


# ---------------------------------------------------------------- the example


EXAMPLE_TABLE = """\
PODGROUP       POLICY   PODS   PLACED/MIN   CONDITION       MESSAGE
demo/train-a   gang     4      4/4          Scheduled       4 pod(s) placed
demo/train-b   gang     4      0/4          Unschedulable   needs 4 pods, 0 fit: 0/2 nodes are available: 2 Insufficient cpu.

POD                     GROUP     NODE     MESSAGE
demo/train-a-worker-0   train-a   node-1
demo/train-a-worker-1   train-a   node-2
demo/train-a-worker-2   train-a   node-1
demo/train-a-worker-3   train-a   node-2
demo/train-b-worker-0   train-b   <none>   PodGroup demo/train-b: needs 4 pods, 0 fit: 0/2 nodes are available: 2 Insufficient cpu.
demo/train-b-worker-1   train-b   <none>   PodGroup demo/train-b: needs 4 pods, 0 fit: 0/2 nodes are available: 2 Insufficient cpu.
demo/train-b-worker-2   train-b   <none>   PodGroup demo/train-b: needs 4 pods, 0 fit: 0/2 nodes are available: 2 Insufficient cpu.
demo/train-b-worker-3   train-b   <none>   PodGroup demo/train-b: needs 4 pods, 0 fit: 0/2 nodes are available: 2 Insufficient cpu.

4/8 pending pods placed; PodGroups: 1 Scheduled, 1 Unschedulable.
"""


def test_example_table_is_exact(capsys):
    assert main(["simulate", str(EXAMPLE)]) == 0
    out, err = capsys.readouterr()
    assert out == EXAMPLE_TABLE
    assert err == ""


def test_example_json_places_one_gang_whole_and_none_of_the_other(capsys):
    assert main(["simulate", str(EXAMPLE), "--output", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    groups = groups_of(doc)
    assert [k for k, (scheduled, _, _) in groups.items() if scheduled] == ["demo/train-a"]
    assert groups["demo/train-b"] == (
        False,
        "Unschedulable",
        "needs 4 pods, 0 fit: 0/2 nodes are available: 2 Insufficient cpu.",
    )
    nodes = nodes_of(doc)
    assert all(nodes[f"demo/train-a-worker-{i}"] in ("node-1", "node-2") for i in range(4))
    assert all(nodes[f"demo/train-b-worker-{i}"] is None for i in range(4))
    # 2 x 2 CPU: each node holds exactly two workers.
    assert sorted(v for v in nodes.values() if v) == ["node-1", "node-1", "node-2", "node-2"]


def test_priority_example(capsys):
    assert main(["simulate", str(EXAMPLE.with_name("simulate-priority.yaml")), "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {k: v[0] for k, v in groups_of(doc).items()} == {"demo/batch": False, "demo/train": True, "demo/web": True}
    assert [k for k, v in nodes_of(doc).items() if v] == [
        "demo/db",
        "demo/train-0",
        "demo/train-1",
        "demo/train-2",
        "demo/web-0",
    ]


def test_json_schema_is_exact(capsys, tmp_path):
    doc = run_json(
        capsys, tmp_path, [node("n1", cpu="1"), *gang("g", 1), pod("zz-single", cpu="2"), pod("a-single", ns="aa")]
    )
    assert doc == {
        "pods": [
            {"namespace": "aa", "name": "a-single", "node": None, "preemptedBy": None},
            {"namespace": "ns", "name": "g-0", "node": "n1", "preemptedBy": None},
            {"namespace": "ns", "name": "zz-single", "node": None, "preemptedBy": None},
        ],
        "podGroups": [
            {
                "namespace": "ns",
                "name": "g",
                "scheduled": True,
                "reason": "Scheduled",
                "message": "1 pod(s) placed",
                "victims": [],
                "preemptedBy": None,
                "placement": None,
                "apiGroup": "scheduling.troupe.dev",
                "workload": None,
            },
        ],
    }


def test_output_is_deterministic(capsys, tmp_path):
    docs = [node(f"n{i}", cpu="3") for i in range(3)] + gang("a", 4) + gang("b", 3) + gang("c", 5, min_count=2)
    docs += [pod(f"s{i}", cpu="500m") for i in range(4)]
    first = run(capsys, tmp_path, docs)
    second = run(capsys, tmp_path, docs)
    first_json = run(capsys, tmp_path, docs, "-o", "json")
    second_json = run(capsys, tmp_path, docs, "-o", "json")
    assert first == second and first[0] == 0
    assert first_json == second_json


def test_stdin(capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(EXAMPLE.read_text()))
    assert main(["simulate", "-"]) == 0
    assert capsys.readouterr().out == EXAMPLE_TABLE


def test_help_explains_file_and_shows_an_example(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "FILE is a multi-document YAML" in out
    assert '"-" reads standard input' in out
    assert "$ troupe simulate examples/simulate-two-jobs.yaml" in out
    assert "exit status: 0 when the simulation ran" in out


# ------------------------------------------------------------------ behaviour


def test_gang_deadlock_resolved_exactly_one_group_placed(capsys, tmp_path):
    # Three gangs of 3, room for 4: one runs whole, no group is split.
    doc = run_json(capsys, tmp_path, [node("n1"), node("n2")] + gang("x", 3) + gang("y", 3) + gang("z", 3))
    groups = groups_of(doc)
    assert [k for k, v in groups.items() if v[0]] == ["ns/x"]
    assert groups["ns/y"] == (
        False,
        "Unschedulable",
        "needs 3 pods, 1 fit: 0/2 nodes are available: 2 Insufficient cpu.",
    )
    placed = {k.split("/")[1].split("-")[0] for k, v in nodes_of(doc).items() if v}
    assert placed == {"x"}


def test_basic_policy_places_what_fits(capsys, tmp_path):
    rc, out, err = run(capsys, tmp_path, [node("n1"), podgroup("web")] + [pod(f"web-{i}", "web") for i in range(3)])
    assert rc == 0 and err == ""
    assert out.splitlines()[:2] == [
        "PODGROUP   POLICY   PODS   PLACED/MIN   CONDITION   MESSAGE",
        "ns/web     basic    3      2/1          Scheduled   2 pod(s) placed; 1 more wait: 0/1 nodes are available: 1 Insufficient cpu.",
    ]
    assert "ns/web-2   web     <none>   PodGroup ns/web: 0/1 nodes are available: 1 Insufficient cpu." in out
    assert out.splitlines()[-1] == "2/3 pending pods placed; PodGroups: 1 Scheduled."


def test_running_pods_use_room(capsys, tmp_path):
    # Another scheduler's pod already runs on n1 with 1 CPU: a gang of 2 x 1 CPU no longer fits.
    running = pod("db", cpu="1", nodeName="n1", schedulerName="default-scheduler")
    rc, out, err = run(capsys, tmp_path, [node("n1"), running] + gang("g", 2) + [pod("small", cpu="1")])
    assert rc == 0 and err == ""
    lines = out.splitlines()
    # First try: 1 of 2 fits, nothing binds; then "small" takes the last CPU, and
    # the retry after the flush (the last word, what the cluster shows) finds 0.
    assert (
        lines[1]
        == "ns/g       gang     2      0/2          Unschedulable   needs 2 pods, 0 fit: 0/1 nodes are available: 1 Insufficient cpu."
    )
    assert "ns/db      -       n1       running before the simulation" in lines
    assert "ns/small   -       n1" in lines
    assert lines[-1] == "1/3 pending pods placed (1 already running); PodGroups: 1 Unschedulable."


def test_running_members_count_toward_min_count(capsys, tmp_path):
    docs = [node("n1", cpu="3"), podgroup("g", 3), pod("g-0", "g", nodeName="n1"), pod("g-1", "g"), pod("g-2", "g")]
    doc = run_json(capsys, tmp_path, docs)
    assert groups_of(doc)["ns/g"] == (True, "Scheduled", "3 pod(s) placed")
    assert set(nodes_of(doc).values()) == {"n1"}


def test_priority_class_orders_groups(capsys, tmp_path):
    # "low" comes first in the file; "high" wins the room because of its PriorityClass.
    docs = [node("n1"), priority_class("hi", 1000), priority_class("lo", 10)]
    docs += gang("low", 2, priorityClassName="lo") + gang("high", 2, priorityClassName="hi")
    assert [k for k, v in groups_of(run_json(capsys, tmp_path, docs)).items() if v[0]] == ["ns/high"]
    # Without priorities the first in the file wins: the order above is the PriorityClass's doing.
    plain = [node("n1")] + gang("low", 2) + gang("high", 2)
    assert [k for k, v in groups_of(run_json(capsys, tmp_path, plain)).items() if v[0]] == ["ns/low"]


def test_global_default_priority_class_applies_to_pods_without_one(capsys, tmp_path):
    docs = [node("n1"), priority_class("zero", 0), priority_class("default", 500, global_default=True)]
    docs += gang("named", 2, priorityClassName="zero") + gang("unnamed", 2)
    assert [k for k, v in groups_of(run_json(capsys, tmp_path, docs)).items() if v[0]] == ["ns/unnamed"]
    inp = load_text(dump(docs), "in.yaml")
    spec = next(o.body["spec"] for o in inp.of_kind("Pod") if o.name == "unnamed-0")
    assert (spec["priorityClassName"], spec["priority"]) == ("default", 500)


def test_builtin_priority_classes_resolve(capsys, tmp_path):
    docs = [node("n1")] + gang("a", 2) + gang("b", 2, priorityClassName="system-cluster-critical")
    assert [k for k, v in groups_of(run_json(capsys, tmp_path, docs)).items() if v[0]] == ["ns/b"]


def test_a_request_of_the_wrong_type_names_the_field_not_a_python_error(capsys, tmp_path):
    bad = pod("p")
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = []
    rc, out, err = run(capsys, tmp_path, [node("n1"), bad])
    assert rc == 2 and out == ""
    assert err == (
        "in.yaml: document 2 (Pod ns/p): spec.containers[0].resources.requests.cpu: "
        "invalid quantity []: expected a number or a string such as '500m' or '2Gi'\n"
    )


def test_invalid_podgroup_is_a_scheduler_error_not_an_input_error(capsys, tmp_path):
    rc, out, err = run(
        capsys, tmp_path, [node("n1"), podgroup("g", policy={"gang": {"minCount": 0}}), pod("g-0", "g")], "-o", "json"
    )
    assert rc == 0
    assert err == (
        "in.yaml: document 2 (PodGroup ns/g): warning: invalid PodGroup: spec.schedulingPolicy.gang.minCount: "
        "Input should be greater than or equal to 1; the scheduler reports it as SchedulerError, as it would in a cluster\n"
    )
    assert json.loads(out) == {
        "pods": [{"namespace": "ns", "name": "g-0", "node": None, "preemptedBy": None}],
        "podGroups": [
            {
                "namespace": "ns",
                "name": "g",
                "scheduled": False,
                "reason": "SchedulerError",
                "message": "PodGroup ns/g is invalid: spec.schedulingPolicy.gang.minCount: Input should be greater than or equal to 1",
                "victims": [],
                "preemptedBy": None,
                "placement": None,
                "apiGroup": "scheduling.troupe.dev",
                "workload": None,
            }
        ],
    }


def test_gang_short_of_min_count_says_what_it_waits_for(capsys, tmp_path):
    rc, out, _ = run(capsys, tmp_path, [node("n1"), podgroup("g", 3), pod("g-0", "g"), pod("g-1", "g")])
    assert rc == 0
    assert (
        "ns/g       gang     2      0/3          Unschedulable   waiting for pods of PodGroup ns/g: minCount is 3, 2 exist"
        in out
    )
    assert "ns/g-0   g       <none>   waiting for pods of PodGroup ns/g: minCount is 3" in out


def test_podgroup_without_pods_has_no_condition(capsys, tmp_path):
    doc = run_json(capsys, tmp_path, [node("n1"), podgroup("g", 2)])
    assert doc == {
        "pods": [],
        "podGroups": [
            {
                "namespace": "ns",
                "name": "g",
                "scheduled": False,
                "reason": None,
                "message": None,
                "victims": [],
                "preemptedBy": None,
                "placement": None,
                "apiGroup": "scheduling.troupe.dev",
                "workload": None,
            }
        ],
    }
    rc, out, _ = run(capsys, tmp_path, [node("n1"), podgroup("g", 2)])
    assert (
        out.splitlines()[1]
        == "ns/g       gang     0      0/2          -           no pods of this PodGroup in the input"
    )


def test_list_wrapper_and_skipped_kinds(capsys, tmp_path):
    docs = [
        {"apiVersion": "v1", "kind": "List", "items": [node("n1"), pod("p")]},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "ns"}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}},
    ]
    rc, out, err = run(capsys, tmp_path, docs, "-o", "json")
    assert rc == 0
    assert nodes_of(json.loads(out)) == {"ns/p": "n1"}
    assert err.splitlines() == [
        "in.yaml: document 2 (Deployment ns/web): warning: kind Deployment is not simulated; skipped "
        "(list its Pods instead: the simulation runs no controllers)",
        "in.yaml: document 3 (ConfigMap cm): warning: kind ConfigMap is not simulated; skipped",
    ]


def test_namespaces_are_read_and_names_do_not_collide(capsys, tmp_path):
    docs = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a-b", "labels": {"team": "x"}}},
        node("n1"),
        pod("c", ns="a-b"),
        pod("b-c", ns="a"),
    ]
    rc, out, err = run(capsys, tmp_path, docs, "-o", "json")
    assert (rc, err) == (0, "")
    assert nodes_of(json.loads(out)) == {"a/b-c": "n1", "a-b/c": "n1"}


def test_pods_nothing_places_are_reported(capsys, tmp_path):
    docs = [node("n1"), pod("other", schedulerName="default-scheduler"), pod("lost", "nogroup")]
    rc, out, err = run(capsys, tmp_path, docs)
    assert rc == 0
    assert err.splitlines() == [
        "in.yaml: document 3 (Pod ns/lost): warning: names PodGroup ns/nogroup, which is not in the input: "
        "the pod waits for it to be created",
        "in.yaml: document 2 (Pod ns/other): warning: schedulerName default-scheduler is not a profile of this "
        "configuration (troupe-scheduler): nothing places it",
    ]
    assert "ns/lost    nogroup   <none>   waiting for PodGroup ns/nogroup to be created" in out
    assert "ns/other   -         <none>   schedulerName default-scheduler: not placed by this scheduler" in out


def test_node_without_pods_allocatable_warns(capsys, tmp_path):
    rc, out, err = run(capsys, tmp_path, [node("n1", pods=None), pod("p")])
    assert rc == 0
    assert err == (
        "in.yaml: document 1 (Node n1): warning: status.allocatable has no 'pods' (the kubelet reports it, "
        "usually 110): no pod fits on this node\n"
    )
    assert "ns/p   -       <none>   0/1 nodes are available: 1 Too many pods." in out


def test_config_selects_the_profile(capsys, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("profiles:\n- schedulerName: other\n")
    doc = run_json(capsys, tmp_path, [node("n1"), pod("p"), pod("q", schedulerName="other")], "--config", str(config))
    assert nodes_of(doc) == {"ns/p": None, "ns/q": "n1"}


def test_simulation_terminates_and_stops_after_a_round_that_places_nothing():
    # A gang that never fits, in backoff/unschedulable forever in a cluster: the
    # simulation retries it once after the flush and stops.
    inp = load_text(dump([node("n1")] + gang("big", 2, cpu="2") + [pod("s")]), "in.yaml")
    result = simulate(inp, SchedulerConfiguration(), in_tree_registry())
    assert result.rounds == 2
    assert [(p.name, p.node) for p in result.pods] == [("big-0", None), ("big-1", None), ("s", "n1")]


def test_scheduled_group_stays_scheduled_across_retries():
    # 3 pods, minCount 2, room for 2: the third is retried after the group is
    # Scheduled; the condition stays Scheduled (it came back through the watch).
    inp = load_text(dump([node("n1")] + gang("g", 3, min_count=2)), "in.yaml")
    result = simulate(inp, SchedulerConfiguration(), in_tree_registry())
    assert result.rounds == 2
    (group,) = result.groups
    assert (group.scheduled, group.placed, group.condition.message) == (
        True,
        2,
        "2 pod(s) placed; 1 more wait: 0/1 nodes are available: 1 Insufficient cpu.",
    )


# ------------------------------------------------------------------ bad input


QTY = "kind: Pod\nmetadata: {name: p1}\nspec:\n  containers:\n  - name: c\n    resources: {requests: {cpu: lots}}\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            dump([node("n1"), {"kind": "Namespace", "metadata": {"name": "x"}}]) + "---\n" + QTY,
            "in.yaml: document 3 (Pod default/p1): spec.containers[0].resources.requests.cpu: invalid quantity 'lots'",
        ),
        (
            "kind: Pod\nmetadata:\n  name: x\n   bad: 1\n",
            "in.yaml: line 4, column 7: YAML syntax error: mapping values are not allowed here",
        ),
        (
            "kind: Node\nmetadata: {name: [a\n",
            "in.yaml: line 3, column 1: YAML syntax error: expected ',' or ']', but got '<stream end>' "
            "(while parsing a flow sequence)",
        ),
        ("---\n---\n- a\n", "in.yaml: document 2: expected a mapping (a Kubernetes object), got a list"),
        ("metadata: {name: a}\n", "in.yaml: document 1: kind is required"),
        ("kind: Pod\nmetadata: {namespace: x}\n", "in.yaml: document 1 (Pod): metadata.name is required"),
        ("kind: 3\n", "in.yaml: document 1: kind must be a string, got 3"),
        (
            "kind: Pod\nmetadata: {name: p}\nspec: [1]\n",
            "in.yaml: document 1 (Pod default/p): spec must be a mapping, got a list",
        ),
        (dump([node("n1"), pod("p"), node("n2"), pod("p")]), "in.yaml: document 4 (Pod ns/p): duplicate of document 2"),
        (
            dump([{"kind": "List", "items": [node("n1"), node("n1")]}]),
            "in.yaml: document 1, items[1] (Node n1): duplicate of document 1, items[0]",
        ),
        (
            dump(
                [
                    {
                        "kind": "List",
                        "items": [
                            node("n1"),
                            {"kind": "Pod", "metadata": {"name": "p"}, "spec": {"overhead": {"memory": "1Q"}}},
                        ],
                    }
                ]
            ),
            "in.yaml: document 1, items[1] (Pod default/p): spec.overhead.memory: invalid quantity '1Q': unknown suffix 'Q'",
        ),
        (dump([{"kind": "List", "items": "x"}]), "in.yaml: document 1 (List): items must be a list, got a string"),
        (
            dump([{"kind": "Node", "metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "x"}}}]),
            "in.yaml: document 1 (Node n1): status.allocatable.cpu: invalid quantity 'x'",
        ),
        (
            dump([node("n1"), pod("p", priorityClassName="high")]),
            "in.yaml: document 2 (Pod ns/p): spec.priorityClassName: no PriorityClass with name high was found",
        ),
        (
            dump([priority_class("high", 100), pod("p", priorityClassName="high", priority=5)]),
            "in.yaml: document 2 (Pod ns/p): spec.priority: the integer value of priority (5) must not be provided in pod "
            "spec; priority admission controller computed 100 from the given PriorityClass name",
        ),
        (
            dump([pod("p", priority=5)]),
            "in.yaml: document 1 (Pod ns/p): spec.priority: the integer value of priority (5) must not be provided in pod "
            "spec; priority admission controller computed 0 from the given PriorityClass name",
        ),
        (
            dump([priority_class("a", 1, True), priority_class("b", 2, True)]),
            "in.yaml: document 2 (PriorityClass b): globalDefault: PriorityClass a is already marked as default. "
            "Only one default can exist",
        ),
        (
            dump([priority_class("a", "high")]),
            "in.yaml: document 1 (PriorityClass a): value: must be an integer, got 'high'",
        ),
        (
            dump([{"kind": "PriorityClass", "metadata": {"name": "a"}}]),
            "in.yaml: document 1 (PriorityClass a): value: Required value",
        ),
        (
            dump([priority_class("a", 2_000_000_000)]),
            "in.yaml: document 1 (PriorityClass a): value: Forbidden: maximum allowed value of a user defined priority "
            "is 1000000000",
        ),
        (
            dump([node("n1"), pod("p", nodeName="n9")]),
            "in.yaml: document 2 (Pod ns/p): spec.nodeName: no Node named n9 in the input",
        ),
    ],
)
def test_bad_input_names_document_and_field(capsys, tmp_path, text, message):
    rc, out, err = run(capsys, tmp_path, text)
    assert (rc, out, err) == (2, "", message + "\n")


def test_unreadable_file(capsys, tmp_path):
    assert main(["simulate", str(tmp_path / "missing.yaml")]) == 2
    assert capsys.readouterr().err == f"{tmp_path / 'missing.yaml'}: cannot read: No such file or directory\n"


def test_bad_config_is_exit_2(capsys, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(
        "profiles:\n- schedulerName: troupe-scheduler\n  plugins:\n    filter:\n      enabled: [{name: Nope}]\n"
    )
    rc, out, err = run(capsys, tmp_path, [node("n1")], "--config", str(config))
    assert (rc, out) == (2, "")
    assert err.startswith(f"troupe: {config}: profile troupe-scheduler: plugins.filter: unknown plugin 'Nope' (known: ")
    config.write_text("bogus: 1\n")
    rc, out, err = run(capsys, tmp_path, [node("n1")], "--config", str(config))
    assert (rc, out, err) == (
        2,
        "",
        f"troupe: {config}: invalid configuration:\n  bogus: unknown field; allowed: "
        "apiVersion, kind, profiles, percentageOfNodesToScore, queue, clientConnection, "
        "healthBindAddress, stallSeconds, waitingReport, watch, leaderElection, groupSources\n",
    )


def test_simulate_shows_what_a_high_priority_gang_would_evict(capsys, tmp_path):
    """A low gang runs on both nodes; a high gang of the same size arrives: the
    low gang is evicted whole (VICTIMS, preemptedBy) and the high gang placed."""
    docs = [priority_class("low", 10), priority_class("high", 1000), node("n1"), node("n2")]
    docs += [podgroup("low", 2)] + [
        pod(f"low-{i}", "low", "2", nodeName=f"n{i + 1}", priorityClassName="low") for i in range(2)
    ]
    docs += [podgroup("high", 2)] + [pod(f"high-{i}", "high", "2", priorityClassName="high") for i in range(2)]
    doc = run_json(capsys, tmp_path, docs)
    groups = {g["name"]: g for g in doc["podGroups"]}
    assert groups["high"]["scheduled"] and groups["high"]["victims"] == ["ns/low-0", "ns/low-1"]
    assert groups["low"]["preemptedBy"] == "PodGroup ns/high" and groups["low"]["victims"] == []
    pods = {p["name"]: p for p in doc["pods"]}
    assert {pods[f"low-{i}"]["preemptedBy"] for i in range(2)} == {"PodGroup ns/high"}
    assert sorted(pods[f"high-{i}"]["node"] for i in range(2)) == ["n1", "n2"]
    rc, out, _ = run(capsys, tmp_path, docs)
    assert rc == 0
    header = out.splitlines()[0].split()
    assert header == ["PODGROUP", "POLICY", "PODS", "PLACED/MIN", "CONDITION", "VICTIMS", "MESSAGE"]
    assert "preempted by PodGroup ns/high" in out
    low_row = (
        "ns/low     gang     0      0/2          Preempted   -         preempted by PodGroup ns/high (DisruptionTarget)"
    )
    assert low_row in out.splitlines()
    summary = "2/2 pending pods placed; 2 running pods preempted; PodGroups: 1 Scheduled, 1 Preempted."
    assert out.rstrip().endswith(summary)


def test_simulate_names_the_domain_each_constrained_group_went_to(capsys, tmp_path):
    zone = "topology.kubernetes.io/zone"

    def zoned(name: str, z: str, cpu: str) -> dict[str, Any]:
        body = node(name, cpu=cpu)
        body["metadata"]["labels"] = {zone: z}
        return body

    def constrained(name: str, n: int, cpu: str) -> list[dict[str, Any]]:
        docs = gang(name, n, cpu=cpu)
        docs[0]["spec"]["schedulingConstraints"] = {"topology": [{"key": zone}]}
        return docs

    docs = [zoned("a1", "zone-a", "4"), zoned("a2", "zone-a", "4"), zoned("b1", "zone-b", "4")]
    docs += constrained("train", 2, "4") + constrained("huge", 4, "4") + gang("free", 1)
    rc, out, _ = run(capsys, tmp_path, docs)
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].split() == ["PODGROUP", "POLICY", "PODS", "PLACED/MIN", "CONDITION", "PLACEMENT", "MESSAGE"]
    rows = {line.split()[0]: line for line in lines[1:4]}
    assert f"{zone}=zone-a" in rows["ns/train"] and "2 pod(s) placed in" in rows["ns/train"]
    assert f"no {zone} domain fits 4 pods" in rows["ns/huge"] and " - " in rows["ns/huge"]
    doc = run_json(capsys, tmp_path, docs)
    assert {g["name"]: g["placement"] for g in doc["podGroups"]} == {
        "free": None,
        "huge": None,
        "train": f"{zone}=zone-a",
    }


def test_topology_example(capsys):
    example = EXAMPLE.parent / "simulate-topology.yaml"
    assert main(["simulate", str(example), "--output", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    groups = {g["name"]: g for g in doc["podGroups"]}
    nodes = nodes_of(doc)
    assert groups["mixed"]["placement"] == "topology.kubernetes.io/zone=zone-c"
    assert groups["mixed"]["message"].endswith("(search: largest first)")
    assert groups["allreduce"]["placement"] == "example.com/rack=r1"
    assert groups["wide"]["placement"] == "topology.kubernetes.io/zone=zone-a"
    assert {nodes[f"ml/wide-{i}"][:2] for i in range(5)} == {"r1", "r2"}  # spans racks, one zone
    assert not groups["too-wide"]["scheduled"]
    assert groups["too-wide"]["message"].startswith("no topology.kubernetes.io/zone domain fits 8 pods: ")


def test_resize_example(capsys):
    """A gang grown in place lands in its rack; one its rack cannot hold
    waits whole and stays Scheduled, saying why; a gang above its minimum
    loses its newest pods to a preemptor and keeps running."""
    example = EXAMPLE.parent / "simulate-resize.yaml"
    assert main(["simulate", str(example), "--output", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    groups = {g["name"]: g for g in doc["podGroups"]}
    nodes = nodes_of(doc)
    assert groups["train"]["placement"] == "example.com/rack=r1"
    assert {nodes[f"demo/train-{i}"][:2] for i in range(6)} == {"r1"}
    stuck = groups["stuck"]
    assert stuck["scheduled"] and nodes["demo/stuck-4"] is None and nodes["demo/stuck-5"] is None
    assert stuck["waiting"].startswith("2 more pod(s) wait: no example.com/rack domain fits 2 pods: r2 at most 1 fit")
    assert groups["elastic"]["shrunkBy"] == {"pod demo/urgent": 2} and groups["elastic"]["preemptedBy"] is None
    preempted = {p["name"] for p in doc["pods"] if p["preemptedBy"]}
    assert preempted == {"elastic-2", "elastic-3"}  # the newest two, above minCount 2
    assert main(["simulate", str(example)]) == 0
    table = capsys.readouterr().out
    assert "shrunk: 2 pod(s) preempted by pod demo/urgent; 2 running (minCount 2)" in table


def test_volcano_subgroups_example(capsys):
    """A Volcano PodGroup with subGroupPolicy: the master and one whole
    sub-group bind, the other sub-group waits whole; the PodGroup counts
    every sub-group's pods and is Scheduled."""
    example = EXAMPLE.parent / "simulate-volcano-subgroups.yaml"
    assert main(["simulate", str(example), "--output", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (group,) = doc["podGroups"]
    assert group["scheduled"] and group["message"] == "2 of 2 group(s) feasible, 3 pod(s) placed", group
    nodes = nodes_of(doc)
    assert nodes["team/train-master-0"] is not None
    placed = {p for p in (0, 1) if all(nodes[f"team/train-worker-{p}-{i}"] for i in (0, 1))}
    waiting = {p for p in (0, 1) if not any(nodes[f"team/train-worker-{p}-{i}"] for i in (0, 1))}
    assert len(placed) == 1 and len(waiting) == 1, nodes  # one whole, one none: no sub-group in part
    assert main(["simulate", str(example)]) == 0
    assert "team/train   gang     5      3/3          Scheduled" in capsys.readouterr().out


# ------------------------------------------------------------------------ Jobs


def _job(name: str, parallelism: int, annotations: dict[str, str] | None, **spec: Any) -> dict[str, Any]:
    template: dict[str, Any] = {
        "spec": {
            "schedulerName": "troupe-scheduler",
            "containers": [{"name": "w", "resources": {"requests": {"cpu": "1"}}}],
        }
    }
    if annotations is not None:
        template["metadata"] = {"annotations": annotations}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"parallelism": parallelism, "completions": parallelism, "template": template, **spec},
    }


def test_jobs_that_opt_in_become_their_podgroup_and_pods(capsys, tmp_path):
    gang = {"scheduling.troupe.dev/job-policy": "gang"}
    doc = run_json(
        capsys,
        tmp_path,
        [node("n1"), node("n2"), _job("a", 4, gang), _job("b", 4, gang, completionMode="Indexed")],
    )
    groups = groups_of(doc)
    assert len(groups) == 2 and sorted(g[0] for g in groups.values()) == [False, True]
    names = sorted(groups)
    assert names[0].startswith("ns/a-") and names[1].startswith("ns/b-")
    placed = nodes_of(doc)
    assert sorted(placed) == [f"ns/{j}-{i}" for j in "ab" for i in range(4)]
    winner = "a" if groups[names[0]][0] else "b"
    assert all(placed[f"ns/{winner}-{i}"] for i in range(4))
    # The same file gives the same PodGroup names.
    assert sorted(groups_of(run_json(capsys, tmp_path, [node("n1"), _job("a", 4, gang)]))) == [names[0]]


def test_jobs_that_cannot_be_expanded_are_skipped_with_the_reason(capsys, tmp_path):
    docs = [
        node("n1"),
        _job("plain", 2, None),
        _job("greedy", 2, {"scheduling.troupe.dev/job-policy": "gang", "scheduling.troupe.dev/min-count": "3"}),
        _job("later", 2, {"scheduling.troupe.dev/job-policy": "gang"}, suspend=True),
    ]
    rc, out, err = run(capsys, tmp_path, docs)
    assert rc == 0
    assert "(Job ns/plain): warning: kind Job is not simulated; skipped (it does not opt in" in err
    assert (
        "(Job ns/greedy): warning: scheduling.troupe.dev/min-count is 3, more than the Job's parallelism 2: "
        "the gang could never be complete; skipped" in err
    )
    assert "(Job ns/later): warning: the Job is suspended: it has no pods and no PodGroup; skipped" in err
