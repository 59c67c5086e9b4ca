"""Topology-aware placement end to end: the real scheduler process, as its
ServiceAccount, against the real kube-apiserver with the real CRDs.

`spec.schedulingConstraints.topology` lists node-label keys, most preferred
first: a gang goes whole into one domain (label value) of the first key that
has a domain it fits, and must fit one domain of the last key, or it waits
and says which domains it tried. Each cluster here is built so that ignoring
the constraint gives a different placement (LeastAllocated and the default
spreading would use every node), and the controls show that premise on the
same nodes.

The module's troupe serves two profiles: `troupe-scheduler` (the defaults)
and `troupe-no-search` (`podGroupScheduling.searchSteps: 0`), the control for
the heterogeneous gang that only the search places.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from objects import bound, condition, create, events_for, pod, pod_condition, podgroup, wait_condition
from troupe_process import TroupeProcess, supervised
from wait import wait_for

pytestmark = pytest.mark.integration

ZONE = "topology.kubernetes.io/zone"
RACK = "example.com/rack"
NO_SEARCH = "troupe-no-search"

CONFIG = f"""
apiVersion: scheduling.troupe.dev/v1alpha1
kind: SchedulerConfiguration
profiles:
- schedulerName: troupe-scheduler
- schedulerName: {NO_SEARCH}
  podGroupScheduling: {{searchSteps: 0}}
"""


@pytest.fixture(scope="module")
def troupe(installed, tmp_path_factory):
    yield from supervised(
        TroupeProcess(installed.scheduler_kubeconfig, tmp_path_factory.mktemp("troupe"), config=CONFIG)
    )


# --------------------------------------------------------------------------- helpers


def topology_group(ns: str, name: str, min_count: int, *keys: str) -> dict[str, Any]:
    body = podgroup(ns, name, min_count)
    if keys:
        body["spec"]["schedulingConstraints"] = {"topology": [{"key": k} for k in keys]}
    return body


def members(ns: str, group: str, count: int, cpu: str = "1", start: int = 0, **kw: Any) -> list[dict[str, Any]]:
    return [pod(ns, f"{group}-{i}", group=group, cpu=cpu, **kw) for i in range(start, start + count)]


def node_labels(cluster) -> dict[str, dict[str, str]]:
    return {n["metadata"]["name"]: n["metadata"].get("labels", {}) for n in cluster.get_json("nodes")["items"]}


def wait_bound(cluster, ns: str, group: str, count: int, timeout: float = 30) -> dict[str, str]:
    """Waits until `count` pods of `group` are bound; returns pod -> node."""
    return wait_for(
        lambda: len(b := bound(cluster, ns, f"{group}-")) == count and b,
        timeout=timeout,
        message=f"{count} pods of {group} bound",
    )


def domains_of(cluster, placed: dict[str, str], key: str) -> set[str | None]:
    labels = node_labels(cluster)
    return {labels[node].get(key) for node in placed.values()}


def one_domain(cluster, placed: dict[str, str], key: str) -> str:
    """The one `key` domain all of `placed` is in (AssertionError if several)."""
    found = domains_of(cluster, placed, key)
    assert len(found) == 1 and None not in found, f"pods in {key} domains {found}: {placed}"
    return str(found.pop())


def wait_message(cluster, ns: str, group: str, prefix: str, timeout: float = 30) -> dict[str, Any]:
    """The PodGroupScheduled condition once its message starts with `prefix`
    (while a gang fills up, its condition counts the pods first)."""
    return wait_for(
        lambda: (c := condition(cluster, ns, group)) and c["message"].startswith(prefix) and c,
        timeout=timeout,
        message=f"PodGroup {group} message starting {prefix!r}",
    )


def one_of_orders(prefix: str, *clauses: str) -> set[str]:
    """`prefix` followed by the clauses joined with ", ", in either order (the
    order of domains that were not tried is the order troupe saw them)."""
    a, b = clauses
    return {prefix + a + ", " + b, prefix + b + ", " + a}


# --------------------------------------------------------------------------- one zone


def test_a_zone_constrained_gang_lands_in_one_zone(installed, troupe, nodes, namespace):
    c, ns = installed, namespace
    for z in "ab":
        for i in range(2):
            nodes(f"zone-{z}-{i}", cpu="4", labels={ZONE: f"zone-{z}"})

    # Control: the same gang without the constraint is spread over all four nodes, so both zones.
    create(c, topology_group(ns, "free", 4), *members(ns, "free", 4))
    free = wait_bound(c, ns, "free", 4)
    assert len(set(free.values())) == 4, free
    assert domains_of(c, free, ZONE) == {"zone-a", "zone-b"}, free
    wait_condition(c, ns, "free", "True", "Scheduled")

    # Each node now has 3 cpu free, each zone 6: the gang fits either zone (on both of its nodes).
    create(c, topology_group(ns, "zoned", 4, ZONE), *members(ns, "zoned", 4))
    zoned = wait_bound(c, ns, "zoned", 4)
    zone = one_domain(c, zoned, ZONE)
    cond = wait_condition(c, ns, "zoned", "True", "Scheduled")
    assert cond["message"] == f"4 pod(s) placed in {ZONE}={zone}", cond


# --------------------------------------------------------------------------- no domain fits


def test_a_gang_that_fits_only_across_zones_waits_until_one_zone_grows(installed, troupe, nodes, namespace):
    c, ns = installed, namespace
    for i in range(5):
        nodes(f"a-{i}", cpu="1", labels={ZONE: "zone-a"})
    for i in range(3):
        nodes(f"b-{i}", cpu="1", labels={ZONE: "zone-b"})
    create(c, topology_group(ns, "g", 8, ZONE), *members(ns, "g", 8))

    prefix = f"no {ZONE} domain fits 8 pods: "
    cond = wait_message(c, ns, "g", prefix)
    assert (cond["status"], cond["reason"]) == ("False", "Unschedulable"), cond
    expected = one_of_orders(
        prefix, "zone-a at most 5 fit (cpu: 8 needed, 5 free)", "zone-b at most 3 fit (cpu: 8 needed, 3 free)"
    )
    assert cond["message"] in expected, cond
    # The pods say the same, on their condition and in a FailedScheduling event.
    told = wait_for(
        lambda: (p := pod_condition(c, ns, "g-0")) and p["message"].startswith(f"PodGroup {ns}/g: no ") and p,
        timeout=30,
        message="g-0 told why",
    )
    assert (told["status"], told["reason"]) == ("False", "Unschedulable"), told
    assert told["message"] == f"PodGroup {ns}/g: {cond['message']}", told
    event = wait_for(
        lambda: next((e for e in events_for(c, ns, "g-0") if e["note"] == told["message"]), None),
        timeout=30,
        message="an event on g-0 with that message",
    )
    assert (event["type"], event["reason"]) == ("Warning", "FailedScheduling"), event
    assert bound(c, ns) == {}

    # Three more nodes in zone-a: 8 cpu there, the gang binds whole into it.
    for i in range(5, 8):
        nodes(f"a-{i}", cpu="1", labels={ZONE: "zone-a"})
    placed = wait_bound(c, ns, "g", 8)
    assert domains_of(c, placed, ZONE) == {"zone-a"}, placed
    assert len(set(placed.values())) == 8, placed
    cond = wait_condition(c, ns, "g", "True", "Scheduled")
    assert cond["message"] == f"8 pod(s) placed in {ZONE}=zone-a", cond


def test_a_domain_tried_reports_how_many_fit(installed, troupe, nodes, namespace):
    """zone-a has the cpu summed (9 for 8) but each node takes one pod: it is
    tried and 3 fit; zone-b is pruned by its sum without a trial."""
    c, ns = installed, namespace
    for i in range(3):
        nodes(f"a-{i}", cpu="3", labels={ZONE: "zone-a"})
    nodes("b-0", cpu="4", labels={ZONE: "zone-b"})
    create(c, topology_group(ns, "g", 4, ZONE), *members(ns, "g", 4, cpu="2"))
    prefix = f"no {ZONE} domain fits 4 pods: "
    cond = wait_message(c, ns, "g", prefix)
    assert (cond["status"], cond["reason"]) == ("False", "Unschedulable"), cond
    # Tried domains come first.
    assert cond["message"] == prefix + "zone-a 3 fit, zone-b at most 2 fit (cpu: 8 needed, 4 free)", cond
    assert bound(c, ns) == {}


# --------------------------------------------------------------------------- heterogeneous gangs


def node_cpu(placed: dict[str, str], cpu: dict[str, int]) -> dict[str, int]:
    used: dict[str, int] = {}
    for name, node in placed.items():
        used[node] = used.get(node, 0) + cpu[name]
    return used


def test_a_heterogeneous_gang_created_small_first_is_placed(installed, troupe, nodes, namespace):
    """The issue's gang: one 6-cpu pod and three 2-cpu pods on 2 x 8 cpu, the
    small pods first in the queue."""
    c, ns = installed, namespace
    nodes("n-0", cpu="8")
    nodes("n-1", cpu="8")
    create(c, topology_group(ns, "job", 4), *members(ns, "job", 3, cpu="2"))
    create(c, pod(ns, "job-big", group="job", cpu="6"))
    placed = wait_bound(c, ns, "job", 4)
    cpu = {"job-0": 2, "job-1": 2, "job-2": 2, "job-big": 6}
    assert all(v <= 8 for v in node_cpu(placed, cpu).values()), placed
    cond = wait_condition(c, ns, "job", "True", "Scheduled")
    assert cond["message"].startswith("4 pod(s) placed"), cond


def test_a_heterogeneous_gang_the_fixed_order_cannot_place_is_found_by_the_search(installed, troupe, nodes, namespace):
    """One 6-cpu pod and four 2-cpu pods on 2 x 8 cpu (14 of 16), the small pods
    first: the fixed order spreads them 2+2, leaving 4 cpu per node, and the big
    one fits nowhere. The search places all five."""
    c, ns = installed, namespace
    nodes("n-0", cpu="8")
    nodes("n-1", cpu="8")

    # Control: a profile without the search leaves the same gang unschedulable.
    create(c, topology_group(ns, "ctl", 5), *members(ns, "ctl", 4, cpu="2", scheduler=NO_SEARCH))
    create(c, pod(ns, "ctl-big", group="ctl", cpu="6", scheduler=NO_SEARCH))
    cond = wait_message(c, ns, "ctl", "needs 5 pods, 4 fit")
    assert (cond["status"], cond["reason"]) == ("False", "Unschedulable"), cond
    assert "Insufficient cpu" in cond["message"], cond
    assert bound(c, ns) == {}

    create(c, topology_group(ns, "job", 5), *members(ns, "job", 4, cpu="2"))
    create(c, pod(ns, "job-big", group="job", cpu="6"))
    placed = wait_bound(c, ns, "job", 5)
    cpu = {**{f"job-{i}": 2 for i in range(4)}, "job-big": 6}
    used = node_cpu(placed, cpu)
    assert sorted(used.values()) == [6, 8], (placed, used)
    cond = wait_condition(c, ns, "job", "True", "Scheduled")
    assert cond["message"].startswith("5 pod(s) placed (search: "), cond
    assert bound(c, ns, "ctl-") == {}  # the control has no room left, still nothing bound


# --------------------------------------------------------------------------- rack, then zone


def test_rack_then_zone(installed, troupe, nodes, namespace):
    """Two zones of two racks of two 2-cpu nodes (4 cpu a rack, 8 a zone).
    topology [rack, zone]: 9 pods fit nothing, 6 fit a zone but no rack,
    3 fit a rack."""
    c, ns = installed, namespace
    for z in "ab":
        for r in (1, 2):
            for i in range(2):
                nodes(f"{z}{r}-{i}", cpu="2", labels={ZONE: f"zone-{z}", RACK: f"rack-{z}{r}"})
    racks = [f"rack-{z}{r}" for z in "ab" for r in (1, 2)]

    create(c, topology_group(ns, "huge", 9, RACK, ZONE), *members(ns, "huge", 9))
    cond = wait_message(c, ns, "huge", f"no {RACK} domain fits 9 pods: ")
    assert (cond["status"], cond["reason"]) == ("False", "Unschedulable"), cond
    rack_clause, _, zone_clause = cond["message"].partition("; ")
    for rack in racks:
        assert f"{rack} at most 4 fit (cpu: 9 needed, 4 free)" in rack_clause, cond
    assert zone_clause in one_of_orders(
        f"no {ZONE} domain fits 9 pods: ",
        "zone-a at most 8 fit (cpu: 9 needed, 8 free)",
        "zone-b at most 8 fit (cpu: 9 needed, 8 free)",
    ), cond

    # 6 pods: no rack holds them, one zone does; they span its two racks.
    create(c, topology_group(ns, "wide", 6, RACK, ZONE), *members(ns, "wide", 6))
    wide = wait_bound(c, ns, "wide", 6)
    zone = one_domain(c, wide, ZONE)
    assert len(domains_of(c, wide, RACK)) == 2, wide
    cond = wait_condition(c, ns, "wide", "True", "Scheduled")
    assert cond["message"] == f"6 pod(s) placed in {ZONE}={zone} (no {RACK} domain fits)", cond

    # 3 pods: one rack holds them (only in the other zone now), so they stay in one rack,
    # where the zone alone would spread them over both racks of that zone.
    create(c, topology_group(ns, "narrow", 3, RACK, ZONE), *members(ns, "narrow", 3))
    narrow = wait_bound(c, ns, "narrow", 3)
    rack = one_domain(c, narrow, RACK)
    assert domains_of(c, narrow, ZONE) != {zone}, narrow
    cond = wait_condition(c, ns, "narrow", "True", "Scheduled")
    assert cond["message"] == f"3 pod(s) placed in {RACK}={rack}", cond
    assert bound(c, ns, "huge-") == {}


# --------------------------------------------------------------------------- growth in place


def _grow(cluster, ns: str, group: str, min_count: int, start: int, count: int) -> None:
    """What an elastic job's operator does: raise minCount, then add the pods."""
    patch = json.dumps({"spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}}})
    cluster.kubectl("patch", "-n", ns, "tpg", group, "--type=merge", "-p", patch)
    create(cluster, *members(ns, group, count, start=start))


def test_a_gang_grown_in_place_stays_in_its_rack_then_its_zone(installed, troupe, nodes, namespace):
    """zone-a: rack-a1 (2 x 2 cpu), rack-a2 (2 x 3 cpu); zone-b added later:
    rack-b1 (2 x 2 cpu). topology [rack, zone]: the gang's increments go
    where it runs, though rack-b1 would take the second whole and pack it
    tighter: 2 new pods into its rack, then 4 (its rack full) into its zone."""
    c, ns = installed, namespace
    for r, cpu in (("a1", "2"), ("a2", "3")):
        for i in range(2):
            nodes(f"{r}-{i}", cpu=cpu, labels={ZONE: "zone-a", RACK: f"rack-{r}"})
    create(c, topology_group(ns, "g", 2, RACK, ZONE), *members(ns, "g", 2))
    rack = one_domain(c, wait_bound(c, ns, "g", 2), RACK)
    scheduled = wait_condition(c, ns, "g", "True", "Scheduled")
    for i in range(2):
        nodes(f"b1-{i}", cpu="2", labels={ZONE: "zone-b", RACK: "rack-b1"})

    _grow(c, ns, "g", 4, 2, 2)
    placed = wait_bound(c, ns, "g", 4)
    assert one_domain(c, placed, RACK) == rack, placed

    _grow(c, ns, "g", 8, 4, 4)
    placed = wait_bound(c, ns, "g", 8)
    assert one_domain(c, placed, ZONE) == "zone-a", placed  # rack-b1 holds the 4 new pods, but not the gang
    kept = wait_message(c, ns, "g", f"8 pod(s) placed in {ZONE}=zone-a (no {RACK} domain fits)")
    assert (kept["status"], kept["lastTransitionTime"]) == ("True", scheduled["lastTransitionTime"]), kept


def test_an_increment_its_rack_cannot_hold_waits_whole_and_says_why(installed, troupe, nodes, namespace):
    """topology [rack] only: the increment may not leave the rack; it waits,
    none of it bound, and the group's Event and the pods say why."""
    c, ns = installed, namespace
    for r in ("r1", "r2"):
        for i in range(2):
            nodes(f"{r}-{i}", cpu="2", labels={RACK: f"rack-{r}"})
    create(c, topology_group(ns, "g", 2, RACK), *members(ns, "g", 2))
    rack = one_domain(c, wait_bound(c, ns, "g", 2), RACK)
    other = next(r for r in ("rack-r1", "rack-r2") if r != rack)

    _grow(c, ns, "g", 5, 2, 3)  # 3 more: 2 cpu left in its rack, 4 in the other
    prefix = f"PodGroup {ns}/g: no {RACK} domain fits 3 pods: {rack} at most 2 fit (cpu: 3 needed, 2 free)"
    told = wait_for(
        lambda: (p := pod_condition(c, ns, "g-2")) and p["message"].startswith(prefix) and p,
        timeout=30,
        message="g-2 told why",
    )
    assert other not in told["message"], told  # only the rack it runs in was proposed
    event = wait_for(
        lambda: next((e for e in events_for(c, ns, "g") if "3 more pod(s) wait" in e["note"]), None),
        timeout=30,
        message="an Event on the PodGroup",
    )
    assert event["type"] == "Warning" and f"no {RACK} domain fits 3 pods" in event["note"], event
    assert len(bound(c, ns, "g-")) == 2
    assert condition(c, ns, "g")["status"] == "True"  # it still runs: still scheduled


# --------------------------------------------------------------------------- CRD validation

KEYS5 = [{"key": k} for k in (RACK, "example.com/block", ZONE, "example.com/region", "example.com/planet")]


def _pg(name: str, topology: list[dict[str, str]]) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.troupe.dev/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}, "schedulingConstraints": {"topology": topology}},
    }


def _wl(name: str, topology: list[dict[str, str]]) -> dict[str, Any]:
    template = {
        "name": "workers",
        "schedulingPolicy": {"gang": {"minCount": 2}},
        "schedulingConstraints": {"topology": topology},
    }
    return {
        "apiVersion": "scheduling.troupe.dev/v1alpha2",
        "kind": "Workload",
        "metadata": {"name": name},
        "spec": {"podGroupTemplates": [template]},
    }


def _submit(cluster, ns: str, obj: dict[str, Any]):
    return cluster.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(obj), check=False)


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (
            _pg("five", KEYS5),
            ["spec.schedulingConstraints.topology: Too many: 5: must have at most 4 items"],
        ),
        (
            _pg("repeated", [{"key": RACK}, {"key": ZONE}, {"key": RACK}]),
            ["spec.schedulingConstraints.topology: Invalid value", "topology: each key may appear only once"],
        ),
        (
            _wl("five", KEYS5),
            ["spec.podGroupTemplates[0].schedulingConstraints.topology: Too many: 5: must have at most 4 items"],
        ),
        (
            _wl("repeated", [{"key": ZONE}, {"key": ZONE}]),
            [
                "spec.podGroupTemplates[0].schedulingConstraints.topology: Invalid value",
                "topology: each key may appear only once",
            ],
        ),
    ],
    ids=["pg-5-keys", "pg-repeated-key", "wl-5-keys", "wl-repeated-key"],
)
def test_crd_refuses_more_than_4_or_repeated_topology_keys(installed, namespace, obj, expected):
    res = _submit(installed, namespace, obj)
    assert res.returncode != 0, f"accepted but should be refused: {json.dumps(obj)}\n{res.stdout}"
    assert "is invalid" in res.stderr, res.stderr
    for text in expected:
        assert text in res.stderr, f"{text!r} not in:\n{res.stderr}"


def test_crd_accepts_up_to_4_unique_topology_keys(installed, namespace):
    for obj in (_pg("three", KEYS5[:3]), _pg("four", KEYS5[:4]), _wl("four", KEYS5[:4])):
        res = _submit(installed, namespace, obj)
        assert res.returncode == 0, res.stderr
        kind = obj["kind"].lower()
        stored = installed.get_json(f"{kind}s.scheduling.troupe.dev", "-n", namespace, obj["metadata"]["name"])
        assert stored["spec"] == obj["spec"]
