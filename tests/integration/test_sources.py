"""Each ecosystem group source against the real kube-apiserver and the real
troupe process, with objects shaped as the operators write them, on a
cluster that has crds/compat/ (troupe's copies of scheduler-plugins' and
Volcano's PodGroup CRDs) instead of those schedulers:

- scheduler-plugins (what the Kubeflow training-operator writes with
  `--gang-scheduler-name=troupe-scheduler`): competing gangs, `minResources`
  the cluster cannot hold, and the status its PodGroup controller would
  write following the pods' phases (set here by hand: there is no kubelet).
- Volcano (what LeaderWorkerSet and Spark write): `minTaskMember`, a queue
  troupe does not honour named in the message, its phase and conditions.
- Kueue plain pod groups: pods gated until admitted, then ungated one by one
  with the node selector Kueue injects; the group binds whole on it.

The compat CRDs themselves: the API server refuses a malformed object with
the field's name.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from objects import bound, create, events_for, node, pod, pod_condition, wait_pod_unschedulable, wait_pod_waiting
from troupe_process import TroupeProcess, supervised
from wait import wait_for

SP_API = "scheduling.x-k8s.io/v1alpha1"
SP_PG = "podgroups.scheduling.x-k8s.io"
SP_LABEL = "scheduling.x-k8s.io/pod-group"
VOLCANO_API = "scheduling.volcano.sh/v1beta1"
VOLCANO_PG = "podgroups.scheduling.volcano.sh"
VOLCANO_ANNOTATION = "scheduling.k8s.io/group-name"
VOLCANO_TASK = "volcano.sh/task-spec"
KUEUE_LABEL = "kueue.x-k8s.io/pod-group-name"
KUEUE_COUNT = "kueue.x-k8s.io/pod-group-total-count"
KUEUE_GATE = "kueue.x-k8s.io/admission"


@pytest.fixture(scope="module")
def troupe(compat_cluster, tmp_path_factory) -> Iterator[TroupeProcess]:
    """troupe with its default configuration: every group source on."""
    yield from supervised(TroupeProcess(compat_cluster.scheduler_kubeconfig, tmp_path_factory.mktemp("troupe-sources")))


@pytest.fixture
def ns(compat_cluster, namespace_in) -> str:
    return namespace_in(compat_cluster)


@pytest.fixture
def two_nodes(compat_cluster) -> Iterator[None]:
    """n1, n2 of 2 CPU: room for one gang of four 1-CPU pods."""
    c = compat_cluster
    c.kubectl("delete", "nodes", "--all", "--wait=false", check=False)
    create(c, node("n1", cpu="2"), node("n2", cpu="2"))
    yield
    c.kubectl("delete", "nodes", "--all", "--wait=false", check=False)


def member(
    ns: str, name: str, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None, **kw: Any
) -> dict[str, Any]:
    p = pod(ns, name, **kw)
    p["metadata"]["labels"] = labels or {}
    p["metadata"]["annotations"] = annotations or {}
    return p


def set_phase(c, ns: str, names: list[str], phase: str) -> None:
    """What a kubelet reports: the pods' phase, on their status subresource."""
    for n in names:
        c.kubectl(
            "patch",
            "pod",
            "-n",
            ns,
            n,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps({"status": {"phase": phase}}),
        )


def pg_status(c, resource: str, ns: str, name: str) -> dict[str, Any]:
    return c.get_json(resource, "-n", ns, name).get("status") or {}


def wait_status(c, resource: str, ns: str, name: str, want: dict[str, Any], timeout: float = 30) -> dict[str, Any]:
    """Waits until the PodGroup's status has every field of ``want``."""
    return wait_for(
        lambda: all((s := pg_status(c, resource, ns, name)).get(k) == v for k, v in want.items()) and s,
        timeout=timeout,
        message=f"{resource} {name}: status {want}",
    )


def group_events(c, ns: str, name: str, api_version: str) -> list[dict[str, Any]]:
    return [e for e in events_for(c, ns, name) if e["regarding"].get("apiVersion") == api_version]


def one_whole(c, ns: str, prefixes: tuple[str, str], size: int) -> tuple[str, str]:
    """Waits until one gang has all ``size`` pods bound; fails if both ever have bound pods."""

    def check():
        counts = {p: len(bound(c, ns, p + "-")) for p in prefixes}
        assert not all(counts.values()), f"both gangs partly bound (not gang-scheduled): {counts}"
        return size in counts.values() and counts

    counts = wait_for(check, timeout=30, message=f"one gang of {size} bound")
    winner = next(p for p, n in counts.items() if n == size)
    return winner, next(p for p in prefixes if p != winner)


# ---------------------------------------------------------- scheduler-plugins


def sp_podgroup(ns: str, name: str, min_member: int, cpu: str) -> dict[str, Any]:
    """As the training-operator writes it for a PyTorchJob (pkg/controller.v1/common/scheduling.go)."""
    return {
        "apiVersion": SP_API,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"minMember": min_member, "minResources": {"cpu": cpu, "memory": "1Gi"}, "scheduleTimeoutSeconds": 60},
    }


def test_scheduler_plugins_gangs_min_resources_and_status(compat_cluster, troupe, two_nodes, ns):
    """Two PodGroups of 4 and room for one: one bound whole, the other waits
    whole with a FailedScheduling Event on its PodGroup; a group whose minResources the
    cluster cannot hold is not tried and says so; phase and counts follow the
    pods as scheduler-plugins' controller has them follow."""
    c = compat_cluster
    objs = [sp_podgroup(ns, g, 4, "4") for g in ("ja", "jb")] + [sp_podgroup(ns, "huge", 1, "64")]
    objs += [member(ns, f"{g}-{i}", labels={SP_LABEL: g}) for g in ("ja", "jb") for i in range(4)]
    objs.append(member(ns, "huge-0", labels={SP_LABEL: "huge"}))
    create(c, *objs)

    winner, loser = one_whole(c, ns, ("ja", "jb"), 4)
    cond = wait_pod_unschedulable(c, ns, "huge-0")
    assert "minResources" in cond["message"] and "cpu 64" in cond["message"], cond
    wait_pod_unschedulable(c, ns, f"{loser}-0")
    assert not bound(c, ns, loser + "-") and not bound(c, ns, "huge-")

    # No pod runs yet (no kubelet): every group has its pods, so Scheduling.
    for g in ("ja", "jb", "huge"):
        s = wait_status(c, SP_PG, ns, g, {"phase": "Scheduling"})
        assert s.get("scheduleStartTime") and not s.get("running"), (g, s)
    wait_for(
        lambda: any(e["reason"] == "FailedScheduling" for e in group_events(c, ns, loser, SP_API)),
        timeout=30,
        message=f"a FailedScheduling Event on PodGroup {loser}",
    )
    wait_for(
        lambda: any(e["reason"] == "Scheduled" for e in events_for(c, ns, f"{winner}-0")),
        timeout=30,
        message=f"a Scheduled Event on pod {winner}-0",
    )

    names = [f"{winner}-{i}" for i in range(4)]
    set_phase(c, ns, names, "Running")
    wait_status(c, SP_PG, ns, winner, {"phase": "Running", "running": 4})
    set_phase(c, ns, names, "Succeeded")
    wait_status(c, SP_PG, ns, winner, {"phase": "Finished", "succeeded": 4, "running": 0})

    # Finished pods hold no room: the waiting gang is bound whole.
    wait_for(lambda: len(bound(c, ns, loser + "-")) == 4, timeout=30, message=f"{loser} bound whole")
    assert not bound(c, ns, "huge-")


def test_compat_crds_refuse_malformed_groups_naming_the_field(compat_cluster, ns):
    c = compat_cluster
    bad = sp_podgroup(ns, "bad", 0, "1")
    res = c.kubectl("create", "-f", "-", input=json.dumps(bad), check=False)
    assert res.returncode != 0 and "spec.minMember" in res.stderr, res.stderr
    bad = {
        "apiVersion": VOLCANO_API,
        "kind": "PodGroup",
        "metadata": {"name": "bad", "namespace": ns},
        "spec": {"minMember": 1, "minResources": {"cpu": "lots"}},
    }
    res = c.kubectl("create", "-f", "-", input=json.dumps(bad), check=False)
    assert res.returncode != 0 and "spec.minResources.cpu" in res.stderr, res.stderr


# -------------------------------------------------------------------- Volcano


def volcano_podgroup(ns: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": VOLCANO_API, "kind": "PodGroup", "metadata": {"name": name, "namespace": ns}, "spec": spec}


def test_volcano_min_task_member_unhonoured_fields_and_status(compat_cluster, troupe, two_nodes, ns):
    """minMember 2 with minTaskMember {ps: 1, worker: 2}: two workers alone
    are enough pods but not enough tasks, so nothing binds and the message
    names the task; the group's condition names the queue troupe does not
    honour too. With the
    ps pod the group binds whole, turns Running / Scheduled, and Completed
    once its pods succeed."""
    c = compat_cluster
    spec = {"minMember": 2, "minTaskMember": {"ps": 1, "worker": 2}, "queue": "gpu-team"}
    create(c, volcano_podgroup(ns, "tf", spec))

    def vpod(name: str, task: str) -> dict[str, Any]:
        return member(ns, name, annotations={VOLCANO_ANNOTATION: "tf", VOLCANO_TASK: task})

    create(c, vpod("tf-worker-0", "worker"), vpod("tf-worker-1", "worker"))
    cond = wait_for(
        lambda: (x := pod_condition(c, ns, "tf-worker-0")) and "ps" in x.get("message", "") and x,
        timeout=30,
        message="tf-worker-0 waits, naming task ps",
    )
    assert cond["status"] == "False" and cond["reason"] == "Unschedulable", cond
    s = wait_for(
        lambda: (
            (s := pg_status(c, VOLCANO_PG, ns, "tf")).get("phase") in ("Pending", "Inqueue")
            and s.get("conditions")
            and s
        ),
        timeout=30,
        message="Volcano PodGroup tf Pending with conditions",
    )
    unsched = next(x for x in s["conditions"] if x["type"] == "Unschedulable")
    assert unsched["status"] == "True" and unsched["reason"] == "NotEnoughResources", unsched
    assert "queue" in unsched["message"], unsched
    assert not bound(c, ns)

    create(c, vpod("tf-ps-0", "ps"))
    wait_for(lambda: len(bound(c, ns)) == 3, timeout=30, message="tf bound whole (ps and both workers)")
    s = wait_status(c, VOLCANO_PG, ns, "tf", {"phase": "Running"})
    assert any(x["type"] == "Scheduled" and x["status"] == "True" for x in s["conditions"]), s
    names = ["tf-ps-0", "tf-worker-0", "tf-worker-1"]
    set_phase(c, ns, names, "Running")
    wait_status(c, VOLCANO_PG, ns, "tf", {"phase": "Running", "running": 3})
    set_phase(c, ns, names, "Succeeded")
    wait_status(c, VOLCANO_PG, ns, "tf", {"phase": "Completed", "succeeded": 3})


def test_volcano_sub_groups_bind_whole_with_the_minimum_of_them(compat_cluster, troupe, two_nodes, ns):
    """subGroupPolicy as Volcano's job controller writes it for a task with a
    partitionPolicy (sub-groups of 2 workers by partition id, at least 1),
    with minMember 3 (the master, and one sub-group). Two 2-CPU nodes hold 4
    of the 5 one-CPU pods: the master and one whole sub-group bind, and the
    other sub-group waits whole, none of it bound (one gang of minMember 3
    would bind a fourth pod, splitting a sub-group). A third node: it binds
    whole too. The Volcano PodGroup carries the tree's status and counts."""
    c = compat_cluster
    policy = {
        "name": "worker",
        "subGroupSize": 2,
        "minSubGroups": 1,
        "labelSelector": {"matchLabels": {VOLCANO_TASK: "worker"}},
        "matchLabelKeys": ["volcano.sh/partition-id"],
    }
    create(c, volcano_podgroup(ns, "vj", {"minMember": 3, "subGroupPolicy": [policy]}))

    def vpod(name: str, task: str, partition: str = "") -> dict[str, Any]:
        labels = {VOLCANO_TASK: task, **({"volcano.sh/partition-id": partition} if partition else {})}
        return member(ns, name, labels=labels, annotations={VOLCANO_ANNOTATION: "vj", VOLCANO_TASK: task})

    create(c, vpod("vj-master-0", "master"))
    create(c, *[vpod(f"vj-worker-{p}-{i}", "worker", str(p)) for p in (0, 1) for i in (0, 1)])
    got = wait_for(lambda: len(b := bound(c, ns)) == 3 and b, timeout=30, message="master and one sub-group bound")
    workers = sorted(n for n in got if "worker" in n)
    part = workers[0].split("-")[2]
    assert "vj-master-0" in got and workers == [f"vj-worker-{part}-0", f"vj-worker-{part}-1"], got
    other = "1" if part == "0" else "0"
    cond = wait_pod_unschedulable(c, ns, f"vj-worker-{other}-0")
    assert f"vj/worker/{other}" in cond["message"], cond
    assert len(bound(c, ns)) == 3, "a sub-group bound in part"
    s = wait_status(c, VOLCANO_PG, ns, "vj", {"phase": "Running"})
    scheduled = next(x for x in s["conditions"] if x["type"] == "Scheduled")
    assert scheduled["status"] == "True" and "not honoured" not in scheduled.get("message", ""), scheduled
    create(c, node("n3", cpu="2"))
    wait_for(lambda: len(bound(c, ns)) == 5, timeout=30, message="the other sub-group bound whole")
    set_phase(c, ns, [*bound(c, ns)], "Running")
    wait_status(c, VOLCANO_PG, ns, "vj", {"phase": "Running", "running": 5})


# ---------------------------------------------------------------------- Kueue


def test_kueue_pod_group_waits_for_admission_and_binds_whole_on_its_flavor(compat_cluster, troupe, ns):
    """Three pods of a Kueue pod group, gated as Kueue creates them. Kueue
    admits by removing its gate and injecting its flavor's node selector;
    with two of three released nothing binds (a gang of 3); with the third
    all three bind, on the flavor's node only."""
    c = compat_cluster
    c.kubectl("delete", "nodes", "--all", "--wait=false", check=False)
    create(c, node("big", cpu="8", labels={"flavor": "spot"}), node("small", cpu="4", labels={"flavor": "on-demand"}))
    try:
        names = [f"q-{i}" for i in range(3)]
        pods = [member(ns, n, labels={KUEUE_LABEL: "q"}, annotations={KUEUE_COUNT: "3"}) for n in names]
        for p in pods:
            p["spec"]["schedulingGates"] = [{"name": KUEUE_GATE}]
        create(c, *pods)
        wait_for(
            lambda: all((x := pod_condition(c, ns, n)) and x.get("reason") == "SchedulingGated" for n in names),
            timeout=30,
            message="Kueue's pods SchedulingGated",
        )

        def admit(name: str) -> None:  # what Kueue's pod webhook does on admission
            patch = {"spec": {"schedulingGates": None, "nodeSelector": {"flavor": "on-demand"}}}
            c.kubectl("patch", "pod", "-n", ns, name, "--type=merge", "-p", json.dumps(patch))

        admit("q-0")
        admit("q-1")
        wait_pod_waiting(c, ns, "q-0")  # held whole: nothing for an autoscaler to provision
        assert not bound(c, ns)
        admit("q-2")
        placed = wait_for(lambda: len(b := bound(c, ns)) == 3 and b, timeout=30, message="q bound whole")
        assert set(placed.values()) == {"small"}, placed
    finally:
        c.kubectl("delete", "nodes", "--all", "--wait=false", check=False)
