"""hack/invariants.py's Observer, fed lists by hand: a pod bound to two nodes
is a violation at once; a pod seen unbound after being bound is one only if
it is not seen on its node again (the API may serve an older list right
after an etcd restart; nodeName itself cannot be unset)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack"))

from invariants import GROUP_LABEL, Observer  # noqa: E402

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
