"""The Karpenter harness itself (tests/integration/karpenter.py): the real
Karpenter v1.15.0 (kwok cloud provider) provisions a Node for a pod marked
Unschedulable, the real kwok v0.8.0 keeps that Node Ready and runs the pod
bound to it, and Karpenter removes the Node once it is empty. troupe does
not run: the test writes what a scheduler would (the Unschedulable
condition, the Binding).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

import pytest
from karpenter import (
    INITIALIZED_LABEL,
    INSTANCE_TYPE_LABEL,
    KWOK_NODE_KEY,
    REGISTERED_LABEL,
    UNREGISTERED_TAINT,
    ZONE_LABEL,
    apply,
    bind,
    karpenter_nodes,
    kwok_nodeclass,
    mark_unschedulable,
    node_lease,
    node_ready,
    nodeclaims,
    nodepool,
)
from objects import create, events_for, node, pod
from wait import WaitTimeout, holds, wait_for

pytestmark = pytest.mark.integration

T = TypeVar("T")
POOL = "rack-r1"
# kube-controller-manager's --node-monitor-grace-period default (1.37: 50 s,
# pkg/controller/nodelifecycle/config/v1alpha1/defaults.go); hack/localcluster.py
# sets no such flag (and runs no node lifecycle controller at all).
NODE_MONITOR_GRACE = 50.0
HOSTNAME = "kubernetes.io/hostname"
READY_BEYOND_GRACE = 60.0


def _ts(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


def _taint_keys(node: dict[str, Any]) -> set[str]:
    return {t["key"] for t in node["spec"].get("taints") or []}


def test_provisions_keeps_ready_runs_and_consolidates(karpenter_cluster, kwok, karpenter, namespace_in) -> None:
    c = karpenter_cluster
    ns = namespace_in(c)
    seen: dict[str, float] = {}

    def wait(what: str, predicate: Callable[[], T], timeout: float) -> T:
        try:
            value = wait_for(predicate, timeout=timeout, interval=0.2, message=what)
        except WaitTimeout as e:
            raise AssertionError(
                f"{e}\n--- karpenter log ---\n{karpenter.log_tail(40)}\n--- kwok log ---\n{kwok.log_tail(20)}"
            ) from e
        seen[what] = time.monotonic() - t0
        return value

    apply(c, kwok_nodeclass("default"), nodepool(POOL, {"rack": "r1"}, [], consolidation_policy="WhenEmpty"))
    # A Node as the other tests make them: kwok must leave it alone. Tainted:
    # Karpenter's simulation places pending pods on every node, its own or not,
    # Ready or not, and provisions nothing for a pod an untainted plain node fits.
    create(c, node("plain-node", taints=[{"key": "troupe.test/plain", "effect": "NoSchedule"}]))
    create(c, pod(ns, "p", cpu="1"))
    t0 = time.monotonic()
    mark_unschedulable(c, ns, "p")

    claim = wait("nodeclaim", lambda: nodeclaims(c, POOL), timeout=60)[0]
    assert claim["metadata"]["labels"]["rack"] == "r1"
    made = wait("node", lambda: karpenter_nodes(c, POOL), timeout=60)[0]
    name = made["metadata"]["name"]
    labels = made["metadata"]["labels"]
    assert labels["rack"] == "r1" and labels[KWOK_NODE_KEY] == "fake", labels
    assert made["metadata"]["annotations"][KWOK_NODE_KEY] == "fake"
    assert labels[INSTANCE_TYPE_LABEL] == "c-2x-amd64-linux", labels  # the cheapest that holds 1 cpu
    assert labels[ZONE_LABEL].startswith("test-zone-"), labels
    # The provider's quirks: hostname label = the NodeClaim's name, capacity = the requests it was made for.
    assert name.startswith(f"kwok-{claim['metadata']['name']}-") and labels[HOSTNAME] == claim["metadata"]["name"]
    assert made["status"]["allocatable"]["cpu"] == "1900m" and made["status"]["capacity"]["cpu"] == "1"

    def get_node() -> dict[str, Any]:
        return c.get_json("node", name)

    wait("registered", lambda: REGISTERED_LABEL in (n := get_node())["metadata"]["labels"]
         and UNREGISTERED_TAINT not in _taint_keys(n), timeout=60)  # fmt: skip
    wait("ready", lambda: node_ready(get_node()), timeout=60)
    wait("initialized", lambda: INITIALIZED_LABEL in get_node()["metadata"]["labels"], timeout=60)

    # What Karpenter wrote on the pending pod meanwhile.
    pending = c.get_json("pod", "-n", ns, "p")
    nominated = pending["status"].get("nominatedNodeName")
    pod_events = sorted({(e.get("reportingController"), e.get("reason")) for e in events_for(c, ns, "p")}, key=str)

    # Pods Karpenter must not provision for: PodScheduled=False with another
    # reason, and no condition at all (3 cpu: the c-2x node cannot hold them).
    create(c, pod(ns, "other-reason", cpu="3"), pod(ns, "no-condition", cpu="3"))
    patch = {"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulerError"}]}}
    c.kubectl("patch", "pod", "-n", ns, "other-reason", "--subresource=status", "-p", json.dumps(patch))

    # Ready, and heartbeating as a node lifecycle controller needs (its Lease
    # renewed within the grace period), until well past that period; and no
    # second NodeClaim, neither for the pending pod (the node is nominated for
    # it) nor for the two others.
    created = _ts(get_node()["metadata"]["creationTimestamp"])

    def healthy() -> bool:
        n, lease = get_node(), node_lease(c, name)
        age = time.time() - _ts(lease["spec"]["renewTime"])
        claims = [x["metadata"]["name"] for x in nodeclaims(c)]
        ok = node_ready(n) and age < NODE_MONITOR_GRACE and len(claims) == 1
        assert ok, f"Ready={node_ready(n)}, Lease renewed {age:.1f}s ago, NodeClaims {claims}\n{karpenter.log_tail(20)}"
        return True

    hold_for = created + NODE_MONITOR_GRACE + READY_BEYOND_GRACE + 1 - time.time()
    holds(healthy, seconds=hold_for, interval=1.0, message="node Ready with a fresh Lease, one NodeClaim")
    assert not [p for p in ("other-reason", "no-condition") if c.get_json("pod", "-n", ns, p)["spec"].get("nodeName")]
    plain = c.get_json("node", "plain-node")
    assert not plain.get("status", {}).get("conditions"), plain["status"]
    assert c.kubectl("get", "lease", "-n", "kube-node-lease", "plain-node", check=False).returncode != 0
    c.kubectl("delete", "node", "plain-node")
    c.kubectl("delete", "pod", "-n", ns, "other-reason", "no-condition", "--grace-period=0", "--force")

    # A scheduler binds the pod; kwok runs it.
    t_bind = time.monotonic()
    bind(c, ns, "p", name)
    running = wait("running", lambda: (p := c.get_json("pod", "-n", ns, "p"))["status"].get("phase") == "Running"
                   and p, timeout=30)  # fmt: skip
    bind_to_running = time.monotonic() - t_bind
    assert running["spec"]["nodeName"] == name
    assert any(x["type"] == "Ready" and x["status"] == "True" for x in running["status"]["conditions"])

    # Empty again: WhenEmptyOrUnderutilized after 0 s removes the node.
    c.kubectl(
        "patch", "nodepool", POOL, "--type=merge",
        "-p", json.dumps({"spec": {"disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized",
                                                  "consolidateAfter": "0s"}}}),
    )  # fmt: skip
    c.kubectl("delete", "pod", "-n", ns, "p", "--wait=false")
    t_delete = time.monotonic()
    wait("pod gone", lambda: not c.get_json("pods", "-n", ns)["items"], timeout=30)
    wait("node gone", lambda: not karpenter_nodes(c, POOL), timeout=120)
    wait("nodeclaim gone", lambda: not nodeclaims(c, POOL), timeout=60)
    empty_to_gone = time.monotonic() - t_delete
    disrupted = [e for e in c.get_json("events.v1.events.k8s.io", "-A")["items"] if e.get("regarding", {}).get("name")
                 == name and e.get("reason") in ("DisruptionLaunching", "DisruptionTerminating", "Unconsolidatable")]  # fmt: skip

    print(
        f"karpenter harness: {', '.join(f'{k} {v:.1f}s' for k, v in seen.items())}; bind->Running "
        f"{bind_to_running:.1f}s; delete->node gone {empty_to_gone:.1f}s; pending pod nominatedNodeName="
        f"{nominated!r} events={pod_events}; node events {[(e['reason'], e.get('note')) for e in disrupted]}"
    )
    c.kubectl("delete", "nodepool", POOL, "--wait=false")
