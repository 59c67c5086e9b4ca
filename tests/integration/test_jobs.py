"""Jobs get their Workload and PodGroup from troupe: real Jobs, whose pods the
real kube-controller-manager (job, garbage-collector and namespace controllers)
creates, the real scheduler process running as its ServiceAccount.

There is no kubelet: a bound pod stays Pending on its node, and a deleted pod
stays Terminating until it is force-deleted, as a kubelet would confirm it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from objects import (
    bound,
    condition,
    events_for,
    pods_by_name,
    wait_condition,
    wait_pod_unschedulable,
    wait_pod_waiting,
)
from troupe_process import TroupeProcess, supervised
from wait import holds, wait_for

POLICY = "scheduling.troupe.dev/job-policy"
MIN_COUNT = "scheduling.troupe.dev/min-count"


@pytest.fixture(scope="module")
def troupe(installed, tmp_path_factory):
    yield from supervised(TroupeProcess(installed.scheduler_kubeconfig, tmp_path_factory.mktemp("troupe-jobs")))


def job(
    ns: str,
    name: str,
    parallelism: int,
    annotations: dict[str, str] | None = None,
    cpu: str = "1",
    indexed: bool = False,
    suspend: bool = False,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "parallelism": parallelism,
        "completions": parallelism,
        "backoffLimit": 100,  # deleted workers (no kubelet to fail them) must not fail the Job
        "suspend": suspend,
        "template": {
            "metadata": {"annotations": {POLICY: "gang"} if annotations is None else annotations},
            "spec": {
                "schedulerName": "troupe-scheduler",
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "worker",
                        "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": cpu, "memory": "100Mi"}},
                    }
                ],
            },
        },
    }
    if indexed:
        spec["completionMode"] = "Indexed"
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": ns}, "spec": spec}


def apply(cluster, *objects: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))


def group_of(cluster, ns: str, job_name: str) -> str:
    """The name troupe gives the Job's PodGroup: <job>-<first 8 hex digits of its uid>."""
    uid = cluster.get_json("job", "-n", ns, job_name)["metadata"]["uid"]
    return f"{job_name}-{uid.replace('-', '')[:8]}"


def job_pods(cluster, ns: str, job_name: str) -> dict[str, dict[str, Any]]:
    return {
        n: p
        for n, p in pods_by_name(cluster, ns).items()
        if p["metadata"].get("labels", {}).get("batch.kubernetes.io/job-name") == job_name
        and not p["metadata"].get("deletionTimestamp")
    }


def bound_of(cluster, ns: str, job_name: str) -> dict[str, str]:
    return {n: p["spec"]["nodeName"] for n, p in job_pods(cluster, ns, job_name).items() if p["spec"].get("nodeName")}


def kill_pods(cluster, ns: str, job_name: str) -> None:
    """What a kubelet would do for the pods the garbage collector deletes: let them go."""
    cluster.kubectl(
        "delete",
        "pods",
        "-n",
        ns,
        "-l",
        f"batch.kubernetes.io/job-name={job_name}",
        "--grace-period=0",
        "--force",
        "--wait=false",
        check=False,
    )


def gone(cluster, ns: str, job_name: str) -> bool:
    """Force-deletes the Job's pods (terminating ones too: a kubelet would end
    them) and says whether none is left."""
    kill_pods(cluster, ns, job_name)
    pods = cluster.get_json("pods", "-n", ns, "-l", f"batch.kubernetes.io/job-name={job_name}")["items"]
    return not pods


def podgroup_exists(cluster, ns: str, name: str) -> bool:
    out = cluster.kubectl("get", "podgroups", "-n", ns, "-o", "name", check=False)
    return f"podgroup.scheduling.troupe.dev/{name}" in out.stdout


def test_two_competing_jobs_one_runs_whole_the_other_waits_whole(installed, troupe, nodes, namespace):
    """The seeds' deadlock with Jobs: two 4-worker Jobs, room for one."""
    c, ns = installed, namespace
    nodes("node-a", cpu="2")
    nodes("node-b", cpu="2")
    apply(c, job(ns, "train-a", 4), job(ns, "train-b", 4))
    groups = {j: wait_for(lambda j=j: group_of(c, ns, j), message=f"Job {j}") for j in ("train-a", "train-b")}

    def one_runs_whole():
        a, b = bound_of(c, ns, "train-a"), bound_of(c, ns, "train-b")
        return (len(a), len(b)) in ((4, 0), (0, 4)) and ("train-a" if a else "train-b")

    winner = wait_for(one_runs_whole, timeout=60, message="one Job's 4 pods bound, none of the other's")
    loser = "train-b" if winner == "train-a" else "train-a"
    wait_condition(c, ns, groups[winner], "True", "Scheduled")
    waiting = wait_condition(c, ns, groups[loser], "False", "Unschedulable")
    assert "needs 4 pods" in waiting["message"], waiting
    for name in job_pods(c, ns, loser):
        wait_pod_unschedulable(c, ns, name)
    assert bound_of(c, ns, loser) == {}

    # The winner's Job is deleted: its pods go (the garbage collector; a
    # kubelet would confirm them), and the loser runs whole.
    c.kubectl("delete", "job", "-n", ns, winner, "--wait=false")
    wait_for(lambda: gone(c, ns, winner), timeout=60, message=f"{winner}'s pods gone")
    wait_for(lambda: len(bound_of(c, ns, loser)) == 4, timeout=60, message=f"{loser}'s 4 pods bound")
    wait_condition(c, ns, groups[loser], "True", "Scheduled")


def test_indexed_job_of_eight(installed, troupe, nodes, namespace):
    c, ns = installed, namespace
    for i in range(4):
        nodes(f"node-{i}", cpu="2")
    apply(c, job(ns, "indexed", 8, indexed=True))
    group = wait_for(lambda: group_of(c, ns, "indexed"))
    wait_for(lambda: len(bound_of(c, ns, "indexed")) == 8, timeout=90, message="8 indexed pods bound")
    pg = c.get_json("podgroup", "-n", ns, group)
    assert pg["spec"]["schedulingPolicy"] == {"gang": {"minCount": 8}}
    assert pg["spec"]["podGroupTemplateRef"] == {"workload": {"workloadName": group, "podGroupTemplateName": "workers"}}
    owner = pg["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("Job", "indexed", True)
    workload = c.get_json("workload", "-n", ns, group)
    assert workload["spec"]["controllerRef"] == {"apiGroup": "batch", "kind": "Job", "name": "indexed"}
    indexes = sorted(
        p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
        for p in job_pods(c, ns, "indexed").values()
    )
    assert indexes == [str(i) for i in range(8)]
    wait_condition(c, ns, group, "True", "Scheduled")
    created = [e for e in events_for(c, ns, "indexed") if e["reason"] == "PodGroupCreated"]
    assert created and "a gang of minCount 8" in created[0]["note"], created


def test_deleting_a_job_deletes_its_podgroup_and_workload(installed, troupe, nodes, namespace):
    c, ns = installed, namespace
    nodes("node-a", cpu="4")
    apply(c, job(ns, "short", 2))
    group = wait_for(lambda: group_of(c, ns, "short"))
    wait_for(lambda: podgroup_exists(c, ns, group), timeout=30, message="PodGroup created")
    wait_for(lambda: len(bound_of(c, ns, "short")) == 2, timeout=60)
    c.kubectl("delete", "job", "-n", ns, "short", "--wait=false")
    wait_for(lambda: not podgroup_exists(c, ns, group), timeout=60, message="PodGroup garbage-collected")
    wait_for(
        lambda: group not in c.kubectl("get", "workloads", "-n", ns, "-o", "name").stdout,
        timeout=60,
        message="Workload garbage-collected",
    )


def test_a_deleted_worker_is_replaced_and_rejoins_its_gang(installed, troupe, nodes, namespace):
    c, ns = installed, namespace
    nodes("node-a", cpu="2")
    nodes("node-b", cpu="2")
    apply(c, job(ns, "elastic", 4))
    group = wait_for(lambda: group_of(c, ns, "elastic"))
    first = wait_for(lambda: len(b := bound_of(c, ns, "elastic")) == 4 and b, timeout=60)
    victim = sorted(first)[0]
    c.kubectl("delete", "pod", "-n", ns, victim, "--grace-period=0", "--force")
    # The Job controller makes a new pod; it joins the PodGroup through its
    # ownerReference and binds alone, the 3 bound ones counting toward minCount 4.
    replaced = wait_for(
        lambda: len(b := bound_of(c, ns, "elastic")) == 4 and victim not in b and b,
        timeout=60,
        message="replacement bound",
    )
    assert set(first) - {victim} <= set(replaced)
    assert condition(c, ns, group)["status"] == "True"


def test_an_impossible_min_count_creates_nothing_and_says_why(installed, troupe, nodes, namespace):
    c, ns = installed, namespace
    nodes("node-a", cpu="8")
    apply(c, job(ns, "greedy", 4, annotations={POLICY: "gang", MIN_COUNT: "5"}, indexed=True))
    group = wait_for(lambda: group_of(c, ns, "greedy"))
    expected = f"{MIN_COUNT} is 5, more than the Job's parallelism 4: the gang could never be complete"
    warning = wait_for(
        lambda: [e for e in events_for(c, ns, "greedy") if e["reason"] == "InvalidSchedulingPolicy"],
        timeout=30,
        message="InvalidSchedulingPolicy event on the Job",
    )
    assert warning[0]["type"] == "Warning" and expected in warning[0]["note"], warning
    pods = wait_for(lambda: len(p := job_pods(c, ns, "greedy")) == 4 and p, timeout=60)
    for name in pods:
        wait_pod_waiting(c, ns, name, f"waiting for PodGroup {ns}/{group}, which troupe does not create: {expected}")
    blocked = wait_for(
        lambda: next(
            (
                x
                for x in c.get_json("job", "-n", ns, "greedy")["status"].get("conditions", [])
                if x["type"] == "SchedulingBlocked"
            ),
            None,
        ),
        timeout=30,
        message="SchedulingBlocked on the Job",
    )
    assert (blocked["status"], blocked["reason"], blocked["message"]) == ("True", "InvalidSchedulingPolicy", expected)
    assert not podgroup_exists(c, ns, group)
    assert group not in c.kubectl("get", "workloads", "-n", ns, "-o", "name").stdout
    assert bound(c, ns) == {}

    # Scaled to 5 (an Indexed Job may scale completions with parallelism):
    # the problem is gone, the condition says so, and the gang of 5 runs.
    c.kubectl("patch", "job", "-n", ns, "greedy", "--type=merge", "-p", '{"spec":{"parallelism":5,"completions":5}}')
    wait_for(lambda: len(bound_of(c, ns, "greedy")) == 5, timeout=60, message="5 pods bound once scaled")
    conditions = c.get_json("job", "-n", ns, "greedy")["status"].get("conditions", [])
    blocked = next(x for x in conditions if x["type"] == "SchedulingBlocked")
    assert (blocked["status"], blocked["reason"]) == ("False", "PodGroupCanBeMade"), blocked


def test_a_suspended_job_gets_no_podgroup_until_resumed_and_follows_parallelism(installed, troupe, nodes, namespace):
    c, ns = installed, namespace
    nodes("node-a", cpu="4")
    apply(c, job(ns, "later", 2, suspend=True, indexed=True))  # Indexed: completions may scale with parallelism
    group = wait_for(lambda: group_of(c, ns, "later"))
    wait_for(
        lambda: group in c.kubectl("get", "workloads", "-n", ns, "-o", "name").stdout, timeout=30, message="Workload"
    )
    assert not podgroup_exists(c, ns, group) and job_pods(c, ns, "later") == {}

    c.kubectl("patch", "job", "-n", ns, "later", "--type=merge", "-p", '{"spec":{"suspend":false}}')
    wait_for(lambda: len(bound_of(c, ns, "later")) == 2, timeout=60, message="2 pods bound after resume")
    assert c.get_json("podgroup", "-n", ns, group)["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}

    # Scaled up: the gang's minCount follows parallelism (patched in place;
    # the 2 bound pods count toward the new minCount of 3).
    c.kubectl("patch", "job", "-n", ns, "later", "--type=merge", "-p", '{"spec":{"parallelism":3,"completions":3}}')
    wait_for(
        lambda: c.get_json("podgroup", "-n", ns, group)["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}},
        timeout=30,
        message="minCount 3",
    )
    wait_for(lambda: len(bound_of(c, ns, "later")) == 3, timeout=60, message="3 pods bound after scaling")

    # Suspended again: the Job controller deletes the pods and troupe the PodGroup.
    c.kubectl("patch", "job", "-n", ns, "later", "--type=merge", "-p", '{"spec":{"suspend":true}}')
    wait_for(lambda: not podgroup_exists(c, ns, group), timeout=30, message="PodGroup deleted on suspend")


def test_a_scaled_job_is_resized_in_place_and_its_increment_binds_whole_or_waits_whole(
    installed, troupe, nodes, namespace
):
    """parallelism 2 -> 5 where 4 fit: minCount is patched in place (same
    PodGroup, status kept), and the 3 new pods wait together, none bound
    alone; 5 -> 4: the 2 pods left bind together. Nothing running moves."""
    c, ns = installed, namespace
    nodes("node-a", cpu="4")
    apply(c, job(ns, "elastic", 2, indexed=True))
    group = wait_for(lambda: group_of(c, ns, "elastic"))
    first = wait_for(lambda: len(bound_of(c, ns, "elastic")) == 2 and bound_of(c, ns, "elastic"), timeout=60)
    scheduled = wait_condition(c, ns, group, "True", "Scheduled")
    uid = c.get_json("podgroup", "-n", ns, group)["metadata"]["uid"]

    def scale(n: int) -> None:
        patch = json.dumps({"spec": {"parallelism": n, "completions": n}})
        c.kubectl("patch", "job", "-n", ns, "elastic", "--type=merge", "-p", patch)

    def min_count() -> int:
        stored = c.get_json("podgroup", "-n", ns, group)
        assert stored["metadata"]["uid"] == uid, "the PodGroup was replaced, not resized"
        return int(stored["spec"]["schedulingPolicy"]["gang"]["minCount"])

    scale(5)
    wait_for(lambda: min_count() == 5, timeout=30, message="minCount 5")
    wait_for(lambda: len(job_pods(c, ns, "elastic")) == 5, timeout=30, message="5 pods")
    new = sorted(set(job_pods(c, ns, "elastic")) - set(first))
    cond = wait_pod_unschedulable(c, ns, new[0], timeout=30)
    assert "needs 5 pods, 4 fit" in cond["message"], cond
    holds(lambda: bound_of(c, ns, "elastic") == first, seconds=5, message="no pod of the increment binds alone")
    resized = [e for e in events_for(c, ns, "elastic") if e.get("reason") == "PodGroupResized"]
    assert resized and "minCount 2 -> 5" in resized[-1]["note"], resized

    scale(4)
    wait_for(lambda: min_count() == 4, timeout=30, message="minCount 4")
    now = wait_for(lambda: len(bound_of(c, ns, "elastic")) == 4 and bound_of(c, ns, "elastic"), timeout=60)
    assert {n: now[n] for n in first} == first, "a running pod moved"
    kept = condition(c, ns, group)
    assert kept is not None and kept["status"] == "True"
    assert kept["lastTransitionTime"] == scheduled["lastTransitionTime"], (scheduled, kept)


def test_a_job_that_names_a_workload_gets_its_podgroup_from_that_template(installed, troupe, nodes, namespace):
    """The Workload is the user's (created after the Job: the Job's pods wait
    and say so until it exists); troupe makes only the PodGroup, from the
    template the Job names, and never deletes the Workload."""
    c, ns = installed, namespace
    nodes("node-a", cpu="4")
    annotations = {"scheduling.troupe.dev/workload": "shared", "scheduling.troupe.dev/pod-group-template": "workers"}
    apply(c, job(ns, "byo", 3, annotations=annotations))
    group = wait_for(lambda: group_of(c, ns, "byo"))
    pods = wait_for(lambda: len(p := job_pods(c, ns, "byo")) == 3 and p, timeout=60)
    wait_pod_waiting(
        c,
        ns,
        sorted(pods)[0],
        f"waiting for PodGroup {ns}/{group}, which troupe does not create: Workload {ns}/shared does not exist",
    )
    workload = {
        "apiVersion": "scheduling.troupe.dev/v1alpha2",
        "kind": "Workload",
        "metadata": {"name": "shared", "namespace": ns},
        "spec": {
            "podGroupTemplates": [
                {"name": "ps", "schedulingPolicy": {"basic": {}}},
                {"name": "workers", "schedulingPolicy": {"gang": {"minCount": 2}}},
            ]
        },
    }
    apply(c, workload)
    # Found on the next resync (every 15 s) at the latest.
    wait_for(lambda: len(bound_of(c, ns, "byo")) == 3, timeout=60, message="3 pods bound")
    pg = c.get_json("podgroup", "-n", ns, group)
    assert pg["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
    assert pg["spec"]["podGroupTemplateRef"] == {
        "workload": {"workloadName": "shared", "podGroupTemplateName": "workers"}
    }
    assert [o["kind"] for o in pg["metadata"]["ownerReferences"]] == ["Job"]
    assert c.kubectl("get", "workloads", "-n", ns, "-o", "name").stdout.split() == [
        "workload.scheduling.troupe.dev/shared"
    ]


def succeed(cluster, ns: str, pod_name: str) -> None:
    """What a kubelet reports when a worker exits 0."""
    cluster.kubectl(
        "patch",
        "pod",
        "-n",
        ns,
        pod_name,
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status":{"phase":"Succeeded"}}',
    )


def test_workers_that_succeed_leave_the_group_alone_and_a_late_replacement_still_binds(
    installed, troupe, nodes, namespace
):
    c, ns = installed, namespace
    nodes("node-a", cpu="2")
    nodes("node-b", cpu="2")
    apply(c, job(ns, "finishing", 4, indexed=True))
    group = wait_for(lambda: group_of(c, ns, "finishing"))
    pods = wait_for(lambda: len(b := bound_of(c, ns, "finishing")) == 4 and b, timeout=60)
    by_index = {
        p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]: n
        for n, p in job_pods(c, ns, "finishing").items()
        if n in pods
    }
    uid = c.get_json("podgroup", "-n", ns, group)["metadata"]["uid"]
    succeed(c, ns, by_index["0"])
    succeed(c, ns, by_index["1"])
    wait_for(lambda: c.get_json("job", "-n", ns, "finishing")["status"].get("succeeded") == 2, timeout=30)
    # Two pods done, two running: nothing waits, so the group is left alone
    # (the Job's status updates reach troupe within this window).
    holds(
        lambda: (
            (pg := c.get_json("podgroup", "-n", ns, group))["metadata"]["uid"] == uid
            and pg["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}
        ),
        seconds=3,
        message="the PodGroup of a Job with nothing waiting is left as it was",
    )

    # Worker 2 fails (deleted); the Job makes it again. Only 2 workers can
    # ever be live now, so minCount 4 would keep it waiting for ever: troupe
    # lowers the group's minCount to the 2 the Job can still run.
    c.kubectl("delete", "pod", "-n", ns, by_index["2"], "--grace-period=0", "--force")

    def replacement_bound() -> bool:
        running = {
            n
            for n, p in job_pods(c, ns, "finishing").items()
            if p["spec"].get("nodeName") and p["status"].get("phase") != "Succeeded"
        }
        return len(running) == 2 and by_index["3"] in running and by_index["2"] not in running

    wait_for(replacement_bound, timeout=90, message="the replacement of worker 2 bound next to worker 3")
    assert c.get_json("podgroup", "-n", ns, group)["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}


def test_a_job_that_opts_in_but_names_another_scheduler_is_told_so(installed, troupe, namespace):
    c, ns = installed, namespace
    body = job(ns, "elsewhere", 2)
    del body["spec"]["template"]["spec"]["schedulerName"]
    apply(c, body)
    group = wait_for(lambda: group_of(c, ns, "elsewhere"))

    def blocked():
        conditions = c.get_json("job", "-n", ns, "elsewhere")["status"].get("conditions", [])
        return next((x for x in conditions if x["type"] == "SchedulingBlocked"), None)

    condition = wait_for(blocked, timeout=30, message="SchedulingBlocked on the Job")
    assert condition["status"] == "True"
    assert condition["message"] == (
        "the pod template's schedulerName is 'default-scheduler': troupe schedules pods that name "
        "troupe-scheduler, so a PodGroup would not help"
    )
    assert not podgroup_exists(c, ns, group)


def test_a_basic_job_places_what_fits_pod_by_pod(installed, troupe, nodes, namespace):
    """basic: one PodGroup for the Job, but no all-or-nothing: 2 of 4 fit, 2 bind."""
    c, ns = installed, namespace
    nodes("node-a", cpu="2")
    apply(c, job(ns, "batch", 4, annotations={POLICY: "basic"}))
    group = wait_for(lambda: group_of(c, ns, "batch"))
    wait_for(lambda: len(bound_of(c, ns, "batch")) == 2, timeout=60, message="2 of 4 bound")
    assert c.get_json("podgroup", "-n", ns, group)["spec"]["schedulingPolicy"] == {"basic": {}}
    wait_condition(c, ns, group, "True", "Scheduled")
    waiting = [n for n in job_pods(c, ns, "batch") if n not in bound_of(c, ns, "batch")]
    assert len(waiting) == 2
    for name in waiting:
        wait_pod_unschedulable(c, ns, name)
