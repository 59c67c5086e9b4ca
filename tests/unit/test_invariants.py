"""hack/invariants.py's Observer, fed lists by hand: a pod bound to two nodes
is a violation at once; a pod seen unbound after being bound is one only if
it is not seen on its node again (the API may serve an older list right
after an etcd restart; nodeName itself cannot be unset). The soak's
reservation invariant: room held for a group that is gone is a violation
once the grace has passed."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack"))

from invariants import GROUP_LABEL, SOURCES, Observer, gang_objects, pod_gang  # noqa: E402

NODES = [
    {"metadata": {"name": n}, "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "10"}}} for n in "ab"
]


def pod(node: str, uid: str = "u1") -> dict:
    return {
        "metadata": {"name": "g-0", "namespace": "ns", "uid": uid, "labels": {GROUP_LABEL: "g"}},
        "spec": {"nodeName": node, "containers": [{"resources": {"requests": {"cpu": "1"}}}]},
        "status": {"phase": "Pending"},
    }


def test_bound_to_two_nodes_is_a_violation_at_once():
    obs = Observer(cluster=None)
    obs.check([pod("a")], NODES, 0.0)
    obs.check([pod("b")], NODES, 1.0)
    assert len(obs.violations) == 1 and "was bound to a, now b" in obs.violations[0]


def test_an_older_list_is_not_a_violation_when_the_pod_is_seen_on_its_node_again():
    obs = Observer(cluster=None)
    obs.check([pod("a")], NODES, 0.0)
    obs.check([pod("")], NODES, 1.0)
    obs.check([pod("a")], NODES, 2.0)
    obs.stop()
    assert obs.violations == [] and obs.stale_reads == 1


def test_unbound_for_good_after_being_bound_is_a_violation():
    obs = Observer(cluster=None)
    obs.check([pod("a")], NODES, 0.0)
    obs.check([pod("")], NODES, 1.0)
    obs.stop()
    assert len(obs.violations) == 1 and "was bound to a, then unbound" in obs.violations[0]


# ------------------------------------------------ reservations of gone groups


def gang_pods(source, name, size, nominated=None, count=None, uid_prefix="u"):
    out = []
    for i, o in enumerate(x for x in gang_objects("ns", name, size, cpu="1", source=source) if x["kind"] == "Pod"):
        if count is not None and i >= count:
            break
        o["metadata"]["uid"] = f"{uid_prefix}{name}{i}"
        o["status"] = {"nominatedNodeName": nominated} if nominated else {}
        out.append(o)
    return out


def test_sources_link():
    for s in SOURCES:
        ps = gang_pods(s, "x", 2)
        assert all(pod_gang(p) == (s, "x") for p in ps), s
    assert gang_objects("ns", "x", 2, source="kueue")[0]["kind"] == "Pod"
    assert gang_objects("ns", "x", 2, source="volcano")[0]["spec"] == {"minMember": 2}


def test_deleted_group_held_past_grace_is_violation():
    for s in ("troupe", "scheduler-plugins", "volcano"):
        obs = Observer(cluster=None, selector=None, reservations=True, release_grace=10)
        live = {(s, "ns", "g")}
        obs.check(gang_pods(s, "g", 2, "a"), NODES, 0.0, groups=live)
        assert not obs.gone
        obs.check(gang_pods(s, "g", 2, "a"), NODES, 1.0, groups=set())
        obs.check(gang_pods(s, "g", 2, "a"), NODES, 10.5, groups=set())
        assert obs.violations == []
        obs.check(gang_pods(s, "g", 2, "a"), NODES, 11.5, groups=set())
        assert len(obs.violations) == 1 and "PodGroup is gone" in obs.violations[0], obs.violations
        assert obs.leaked_nominations(), s


def test_released_in_time_records_release_seconds():
    obs = Observer(cluster=None, selector=None, reservations=True, release_grace=10)
    obs.check(gang_pods("volcano", "g", 2, "a"), NODES, 0.0, groups=set())
    obs.check(gang_pods("volcano", "g", 2), NODES, 4.0, groups=set())
    obs.check(gang_pods("volcano", "g", 2), NODES, 20.0, groups=set())
    assert obs.violations == [] and obs.release_seconds == [4.0]
    assert obs.leaked_nominations() == []


def test_fault_moves_deadline_up_to_max():
    obs = Observer(cluster=None, selector=None, reservations=True, release_grace=10, release_grace_max=60)
    obs.check(gang_pods("troupe", "g", 2, "a"), NODES, 0.0, groups=set())
    obs.fault_made(8.0)
    obs.check(gang_pods("troupe", "g", 2, "a"), NODES, 17.0, groups=set())
    assert obs.violations == []
    obs.check(gang_pods("troupe", "g", 2, "a"), NODES, 18.5, groups=set())
    assert len(obs.violations) == 1


def test_incomplete_gang_kueue_and_expected():
    obs = Observer(cluster=None, selector=None, reservations=True, release_grace=10)
    obs.expect_gang("ns", "s", 3, source="scheduler-plugins")
    live = {("scheduler-plugins", "ns", "s")}
    ps = gang_pods("kueue", "k", 3, "a", count=2) + gang_pods("scheduler-plugins", "s", 3, "b", count=2)
    obs.check(ps, NODES, 0.0, groups=live)
    obs.check(ps, NODES, 11.0, groups=live)
    assert len(obs.violations) == 2 and all("of minCount 3" in v for v in obs.violations), obs.violations


def test_off_by_default_and_whole_gang_nominated_is_fine():
    obs = Observer(cluster=None, selector=None)
    obs.check(gang_pods("troupe", "g", 2, "a"), NODES, 0.0, groups=set())
    obs.check(gang_pods("troupe", "g", 2, "a"), NODES, 100.0, groups=set())
    assert obs.violations == []
    obs = Observer(cluster=None, selector=None, reservations=True)
    obs.expect_gang("ns", "g", 2)
    obs.check(gang_pods("troupe", "g", 2, "a"), NODES, 0.0, groups={("troupe", "ns", "g")})
    obs.check(gang_pods("troupe", "g", 2, "a"), NODES, 100.0, groups={("troupe", "ns", "g")})
    assert obs.violations == []


def test_partial_gang_of_other_source():
    obs = Observer(cluster=None, selector=None, partial_grace=5)
    obs.expect_gang("ns", "v", 2, source="volcano")
    ps = gang_pods("volcano", "v", 2)
    ps[0]["spec"]["nodeName"] = "a"
    obs.check(ps, NODES, 0.0)
    obs.check(ps, NODES, 6.0)
    assert len(obs.violations) == 1 and "ns/v (volcano) has 1 of minCount 2" in obs.violations[0], obs.violations
    assert obs.unbound() == ["ns/v-1"]


def test_fault_under_way_excuses_until_made_then_grace_again():
    obs = Observer(cluster=None, selector=None, reservations=True, release_grace=10, release_grace_max=60)
    obs.check(gang_pods("troupe", "g", 2, "a"), NODES, 0.0, groups=set())
    obs.fault_started(9.0)
    obs.check(gang_pods("troupe", "g", 2, "a"), NODES, 12.0, groups=set())
    assert obs.violations == []
    obs.fault_made(13.0)
    obs.check(gang_pods("troupe", "g", 2, "a"), NODES, 22.0, groups=set())
    assert obs.violations == []
    obs.check(gang_pods("troupe", "g", 2, "a"), NODES, 23.5, groups=set())
    assert len(obs.violations) == 1


def test_a_fault_after_the_deadline_excuses_nothing_and_max_caps():
    obs = Observer(cluster=None, selector=None, reservations=True, release_grace=10, release_grace_max=60)
    obs.check(gang_pods("troupe", "g", 2, "a"), NODES, 0.0, groups=set())
    obs.fault_started(11.0)
    obs.check(gang_pods("troupe", "g", 2, "a"), NODES, 11.5, groups=set())
    assert len(obs.violations) == 1
    obs2 = Observer(cluster=None, selector=None, reservations=True, release_grace=10, release_grace_max=60)
    obs2.check(gang_pods("troupe", "g", 2, "a"), NODES, 0.0, groups=set())
    obs2.fault_started(5.0)
    obs2.check(gang_pods("troupe", "g", 2, "a"), NODES, 61.0, groups=set())
    assert len(obs2.violations) == 1


# ---------------------------------------------------- stand-ins (autoscaling)


def stand_in(unit: str, uid: str = "s1") -> dict:
    return {
        "metadata": {
            "name": f"{unit}-capacity-{uid}",
            "namespace": "ns",
            "uid": uid,
            "labels": {"scheduling.troupe.dev/stands-in-for": "owner-uid"},
            "annotations": {"scheduling.troupe.dev/unit": f"scheduling.troupe.dev ns/{unit}"},
        },
        "spec": {"containers": [{"resources": {"requests": {"cpu": "1"}}}]},
        "status": {},
    }


def test_a_stand_in_may_stay_while_its_unit_waits_and_not_long_after():
    """While a pod of its unit waits, a stand-in is needed; once none does
    (bound whole, or gone), it must go within the grace; it never counts as
    a pod left unbound."""
    obs = Observer(cluster=None, stand_in_grace=30.0)
    waiting = pod("")
    obs.check([waiting, stand_in("g")], NODES, 0.0)
    obs.check([waiting, stand_in("g")], NODES, 100.0)
    assert obs.violations == [] and obs.stand_ins_seen == 1
    assert not any("capacity" in u for u in obs.unbound())  # never a pod left unbound
    obs.check([pod("a"), stand_in("g")], NODES, 101.0)  # bound: from now on the stand-in is not needed
    obs.check([pod("a"), stand_in("g")], NODES, 120.0)
    assert obs.violations == []
    obs.check([pod("a"), stand_in("g")], NODES, 132.0)
    assert (
        len(obs.violations) == 1
        and "stand-in ns/g-capacity-s1 for scheduling.troupe.dev ns/g left behind" in (obs.violations[0])
    )
    assert obs.stand_ins_left == ["ns/g-capacity-s1"]
    obs.check([pod("a")], NODES, 140.0)
    assert obs.stand_ins_left == [] and len(obs.violations) == 1
