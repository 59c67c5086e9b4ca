"""Volcano's `subGroupPolicy` scheduled as a tree of gangs (api/subgroups.py):
each sub-group of `subGroupSize` pods binds whole or not at all, at least
`minSubGroups` of each policy bind together with the pods `minMember` asks
beyond them, and the Volcano PodGroup carries the tree's status. Before
issue 46 the policy was read and named "not honoured": the pods were one
gang of `minMember`, and a sub-group could bind in part."""

from __future__ import annotations

from typing import Any

from scheduler.api.records import GroupKey
from scheduler.api.sources.volcano import parse_group
from scheduler.api.subgroup_policy import parse_policies
from scheduler.api.subgroups import leaf_key, skeleton

from .test_preemption import pod as lone_pod
from .test_runtime_scheduler import drain, node, sched  # noqa: F401 (fixture)

NS = "ns"
API = "scheduling.volcano.sh/v1beta1"
TASK = "volcano.sh/task-spec"
PARTITION = "volcano.sh/partition-id"


def worker_policy(size: int = 2, minimum: int = 2, **more: Any) -> dict[str, Any]:
    """What Volcano's job controller writes for a task with a partitionPolicy."""
    return {
        "name": "worker",
        "subGroupSize": size,
        "minSubGroups": minimum,
        "labelSelector": {"matchLabels": {TASK: "worker"}},
        "matchLabelKeys": [PARTITION],
        **more,
    }


def vc_group(name: str, min_member: int, policies: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    meta = {"name": name, "namespace": NS, "uid": f"uid-pg-{name}", "creationTimestamp": "2026-12-07T00:00:00Z"}
    return {
        "apiVersion": API,
        "kind": "PodGroup",
        "metadata": meta,
        "spec": {"minMember": min_member, "subGroupPolicy": policies, **spec},
    }


def vc_pod(
    name: str, group: str, task: str, partition: str = "", cpu: str = "1", node_name: str = ""
) -> dict[str, Any]:
    labels = {TASK: task}
    if partition:
        labels[PARTITION] = partition
    spec: dict[str, Any] = {
        "schedulerName": "troupe-scheduler",
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
    }
    if node_name:
        spec["nodeName"] = node_name
    meta = {
        "name": name,
        "namespace": NS,
        "uid": f"uid-{name}",
        "labels": labels,
        "annotations": {"scheduling.k8s.io/group-name": group, TASK: task},
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def job(s: Any, name: str = "job", partitions: int = 3, min_member: int = 5, minimum: int = 2) -> None:
    """A Volcano Job's PodGroup: a master (outside every policy) and workers
    in `partitions` sub-groups of 2."""
    # minTaskMember as the job controller writes it: the workers' counts their partitions
    per_task = {"master": 1, "worker": 2 * minimum}
    s.on_podgroup(vc_group(name, min_member, [worker_policy(minimum=minimum)], minTaskMember=per_task))
    s.on_pod(vc_pod(f"{name}-master-0", name, "master"))
    for p in range(partitions):
        for i in range(2):
            s.on_pod(vc_pod(f"{name}-worker-{p}-{i}", name, "worker", str(p)))


# ------------------------------------------------------------------ pure


def test_policies_parse_as_volcano_reads_them() -> None:
    policies, problems, notes = parse_policies(
        [worker_policy(networkTopology={"mode": "hard"}), {"name": "x", "subGroupSize": 0}]
    )
    assert problems == ["spec.subGroupPolicy[1].subGroupSize: 0 is less than 1"]
    assert notes == ["spec.subGroupPolicy[0].networkTopology: network topology (HyperNodes) is not honoured by troupe"]
    worker = policies[0]
    assert worker.sub_group_of({TASK: "worker", PARTITION: "1"}) == ("1",)
    assert worker.sub_group_of({TASK: "worker"}) is None  # no value: Volcano's default sub-job
    assert worker.sub_group_of({TASK: "ps", PARTITION: "1"}) is None
    assert policies[1].sub_group_of({TASK: "worker"}) is None  # no matchLabelKeys: takes no pod (as Volcano)


def test_the_tree_made_of_a_volcano_podgroup() -> None:
    group = parse_group(vc_group("job", 5, [worker_policy(), {"name": "eval", "matchLabelKeys": ["e"]}]))
    assert not any("subGroupPolicy" in note for note in group.ignored)  # honoured: no "not honoured" line
    made = {c.key.name: c for c in skeleton(group)}
    assert {k: c.min_group_count for k, c in made.items()} == {"job": 3, "job/worker": 2, "job/eval": 0, "job/*": 1}
    assert made["job"].key == group.key and made["job"].parent_key is None  # the root is the Volcano PodGroup
    assert all(c.made_from == group.key for c in made.values())
    key, leaf = leaf_key(group, {TASK: "worker", PARTITION: "0"})
    assert key == GroupKey(NS, "job/worker/0", "scheduling.volcano.sh") and leaf.min_count == 2
    key, leaf = leaf_key(group, {TASK: "master"})
    assert key.name == "job/*/pods" and leaf.min_count == 1  # minMember 5 = 2 x 2 workers + 1 more


def test_min_task_member_goes_to_the_pods_no_policy_takes() -> None:
    """Volcano's job controller counts a partitioned task's partitions in
    minTaskMember too; minSubGroups says that part, so only the other tasks'
    minimums stay, on the pods no policy takes."""
    body = vc_group("job", 5, [worker_policy()], minTaskMember={"master": 1, "worker": 4})
    _, leaf = leaf_key(parse_group(body), {TASK: "master"})
    assert leaf.min_per_task == {"master": 1}


def test_min_resources_with_sub_groups_is_named_not_checked() -> None:
    group = parse_group(vc_group("job", 5, [worker_policy()], minResources={"cpu": "5"}))
    assert any(note.startswith("spec.minResources: not checked with subGroupPolicy") for note in group.ignored)


# ------------------------------------------------------------ scheduling


def test_sub_groups_bind_whole_and_the_minimum_of_them_together(sched: Any, clock: Any) -> None:
    """3 CPU for a master and workers in 3 sub-groups of 2 (minSubGroups 2):
    the master and one whole sub-group fit, not two: nothing binds, and the
    PodGroup says which part failed. With 2 CPU more: master and two whole
    sub-groups bind, the third waits whole (no sub-group binds in part)."""
    s, rec = sched
    s.on_node(node("a", cpu="3"))
    job(s)
    drain(s)
    assert rec.binds == []
    name, status, reason, message = rec.groups[-1]
    assert (name, status, reason) == ("job", "False", "Unschedulable"), rec.groups
    assert "worker" in message, message
    assert not [g for g in rec.groups if "/" in g[0]]  # the made groups have no objects: nothing written to them
    s.on_node(node("b", cpu="2"))
    clock.now += 30  # past its backoff
    drain(s)
    bound = sorted(p for p, _ in rec.binds)
    assert "job-master-0" in bound and len(bound) == 5, bound
    partitions = {p.rsplit("-", 2)[1] for p in bound if "worker" in p}
    assert len(partitions) == 2 and all(f"job-worker-{q}-{i}" in bound for q in partitions for i in (0, 1)), bound
    assert rec.groups[-1][:3] == ("job", "True", "Scheduled"), rec.groups


def test_an_optional_policy_places_what_fits_of_it_without_holding_the_group(sched: Any, clock: Any) -> None:
    """minSubGroups 0: the workers' sub-groups are optional; the master binds
    alone, and a sub-group binds only whole."""
    s, rec = sched
    s.on_node(node("a", cpu="2"))
    job(s, min_member=1, minimum=0, partitions=2)
    drain(s)
    bound = sorted(p for p, _ in rec.binds)
    assert bound[0] == "job-master-0" and len(bound) == 1, bound  # 1 CPU left: no sub-group of 2 fits
    s.on_node(node("b", cpu="2"))
    clock.now += 30
    drain(s)
    workers = sorted(p for p, _ in rec.binds if "worker" in p)
    assert len(workers) in (2, 4) and len(workers) % 2 == 0, workers


def test_a_group_waits_for_its_sub_groups_to_exist(sched: Any, clock: Any) -> None:
    s, rec = sched
    s.on_node(node("a", cpu="8"))
    s.on_podgroup(vc_group("job", 4, [worker_policy()]))
    for i in range(2):
        s.on_pod(vc_pod(f"job-worker-0-{i}", "job", "worker", "0"))
    drain(s)
    assert rec.binds == []
    assert "waiting for PodGroup ns/job (scheduling.volcano.sh) tree" in rec.pods["job-worker-0-0"], rec.pods
    why = s.cache.tree_readiness(GroupKey(NS, "job", "scheduling.volcano.sh"))
    assert why is not None and "job/worker: needs 2 group(s) ready, 1 exist" in why, why
    name, status, reason, message = rec.groups[-1]  # the Volcano PodGroup says why its tree waits
    assert (name, status, reason) == ("job", "False", "Unschedulable") and "job/worker" in message, rec.groups
    for i in range(2):
        s.on_pod(vc_pod(f"job-worker-1-{i}", "job", "worker", "1"))
    clock.now += 30
    drain(s)
    assert len(rec.binds) == 4


def test_a_policy_added_later_remakes_the_tree_and_deleting_the_group_puts_pods_back(sched: Any) -> None:
    s, rec = sched
    s.on_podgroup(vc_group("job", 4, []))
    for p in range(2):
        for i in range(2):
            s.on_pod(vc_pod(f"job-worker-{p}-{i}", "job", "worker", str(p)))
    key = GroupKey(NS, "job", "scheduling.volcano.sh")
    assert {p.group for p in s.cache.pods.values()} == {key}
    s.on_podgroup(vc_group("job", 4, [worker_policy()]))
    assert {p.group.name for p in s.cache.pods.values() if p.group} == {"job/worker/0", "job/worker/1"}
    assert {p.tree for p in s.cache.pods.values()} == {key}
    assert s.cache.member_counts(key).pods == 4  # Volcano's counts: every sub-group's pods
    s.on_podgroup_deleted(vc_group("job", 4, [worker_policy()]))
    assert {(p.group, p.tree) for p in s.cache.pods.values()} == {(key, None)}
    assert not [k for k in s.cache.groups if k.name.startswith("job/")]
    assert not s.cache.composites
    s.on_node(node("a", cpu="8"))
    drain(s)
    assert rec.binds == [] and "to be created" in rec.pods["job-worker-0-0"], rec.pods


def test_a_sub_group_goes_with_its_last_pod(sched: Any) -> None:
    s, _ = sched
    s.on_podgroup(vc_group("job", 2, [worker_policy(minimum=1)]))
    body = vc_pod("job-worker-0-0", "job", "worker", "0")
    s.on_pod(body)
    assert GroupKey(NS, "job/worker/0", "scheduling.volcano.sh") in s.cache.groups
    s.on_pod_deleted(body)
    assert GroupKey(NS, "job/worker/0", "scheduling.volcano.sh") not in s.cache.groups


def _high_gang(s: Any, n: int) -> None:
    """A troupe gang of `n` 1-CPU pods at priority 1000."""
    body = {
        "apiVersion": "scheduling.troupe.dev/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "hi", "namespace": NS, "uid": "uid-pg-hi"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": n}}, "priority": 1000},
    }
    s.on_podgroup(body)
    for i in range(n):
        s.on_pod(lone_pod(f"hi-{i}", group="hi", priority=1000))


def _running_job(s: Any, partitions: int) -> None:
    """A Volcano job running on node a: minMember 3, its master and
    `partitions` worker sub-groups of 2 (at least 1), sub-group p started at minute p."""
    s.on_podgroup(vc_group("job", 3, [worker_policy(minimum=1)]))
    s.on_pod(vc_pod("job-master-0", "job", "master", node_name="a"))
    for p in range(partitions):
        for i in range(2):
            body = vc_pod(f"job-worker-{p}-{i}", "job", "worker", str(p), node_name="a")
            body["status"] = {"startTime": f"2026-12-07T00:0{p}:00Z", "phase": "Running"}
            s.on_pod(body)


def test_a_victim_job_loses_a_whole_sub_group_above_its_minimum_first(sched: Any) -> None:
    """A running Volcano job (a master, 3 worker sub-groups of 2; at least 1)
    fills node a. A higher-priority gang of 2 takes one whole sub-group
    above the minimum (the newest), not the job, and never half of two."""
    s, rec = sched
    s.on_node(node("a", cpu="7"))
    _running_job(s, partitions=3)
    _high_gang(s, 2)
    drain(s)
    assert sorted(rec.preempted) == ["job-worker-2-0", "job-worker-2-1"], rec.preempted
    assert "job" not in rec.disrupted  # shrunk, not taken whole


def test_a_victim_job_at_its_minimum_goes_whole(sched: Any) -> None:
    s, rec = sched
    s.on_node(node("a", cpu="3"))
    _running_job(s, partitions=1)
    _high_gang(s, 2)
    drain(s)
    assert sorted(rec.preempted) == ["job-master-0", "job-worker-0-0", "job-worker-0-1"], rec.preempted
    assert "job" in rec.disrupted  # DisruptionTarget on the Volcano PodGroup


def test_raising_min_sub_groups_keeps_what_runs_and_binds_the_new_sub_group_whole(sched: Any, clock: Any) -> None:
    """A job runs its master and one sub-group (minSubGroups 1); its policy
    is raised to 2 and a partition is added: nothing running is touched, the
    new sub-group binds whole, and the PodGroup stays Scheduled."""
    s, rec = sched
    s.on_node(node("a", cpu="3"))
    _running_job(s, partitions=1)
    s.on_podgroup(vc_group("job", 5, [worker_policy(minimum=2)]))
    for i in range(2):
        s.on_pod(vc_pod(f"job-worker-1-{i}", "job", "worker", "1"))
    drain(s)
    assert rec.binds == [] and rec.preempted == {}  # no room, and nothing running is evicted for it
    s.on_node(node("b", cpu="1"))
    clock.now += 30
    drain(s)
    assert rec.binds == []  # 1 CPU: the sub-group of 2 waits whole
    s.on_node(node("c", cpu="1"))
    clock.now += 30
    drain(s)
    assert sorted(p for p, _ in rec.binds) == ["job-worker-1-0", "job-worker-1-1"]
    assert rec.groups[-1][:3] == ("job", "True", "Scheduled"), rec.groups


def test_a_pod_relabelled_into_another_sub_group_leaves_no_empty_one_behind(sched: Any) -> None:
    s, _ = sched
    s.on_podgroup(vc_group("job", 2, [worker_policy(minimum=1)]))
    s.on_pod(vc_pod("job-worker-0", "job", "worker", "0"))
    s.on_pod(vc_pod("job-worker-0", "job", "worker", "1"))
    made = sorted(k.name for k in s.cache.groups if k.name.startswith("job/"))
    assert made == ["job/worker/1"]
