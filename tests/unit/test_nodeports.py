"""NodePorts. Cases follow upstream v1.37 nodeports/node_ports_test.go
(TestNodePorts, TestFits); ports are written as there, "PROTOCOL/IP/PORT".
Gang behaviour goes through scheduler.core.schedule_podgroup.schedule_group."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from scheduler.api.config import Profile
from scheduler.api.constants import REASON_SCHEDULED, REASON_UNSCHEDULABLE
from scheduler.api.parse import parse_pod
from scheduler.api.records import NodeInfo, PodInfo
from scheduler.core.schedule_one import schedule_pod
from scheduler.core.schedule_podgroup import schedule_group
from scheduler.framework.framework import Framework
from scheduler.framework.interface import CycleState, Handle
from scheduler.plugins import in_tree_registry
from scheduler.plugins.nodeports import ERR_REASON, NodePorts

from .builders import make_cache, make_group, make_node, pod_body

MSG = "node(s) didn't have free ports for the requested pod ports"


def ports(*specs: str) -> list[dict[str, Any]]:
    out = []
    for spec in specs:
        protocol, ip, port = spec.split("/")
        p: dict[str, Any] = {"containerPort": int(port), "hostPort": int(port)}
        if protocol:
            p["protocol"] = protocol
        if ip:
            p["hostIP"] = ip
        out.append(p)
    return out


def port_pod(
    name: str,
    *specs: str,
    node: str = "",
    group: str | None = None,
    phase: str | None = None,
    init: Sequence[dict[str, Any]] | None = None,
) -> PodInfo:
    """upstream newPod(host, "PROTO/IP/PORT"...): one container with those ports."""
    c: dict[str, Any] = {"name": "c", "image": "registry.k8s.io/pause:3.10"}
    if specs:
        c["ports"] = ports(*specs)
    body = pod_body(
        name,
        containers=[c],
        init_containers=init,
        node_name=node,
        group=group,
        phase=phase or ("Running" if node else None),
    )
    return parse_pod(body)


def framework(cache) -> Framework:
    registry = in_tree_registry()
    registry.register(NodePorts)
    prof = Profile.model_validate({"plugins": {"filter": {"enabled": [{"name": "NodePorts"}]}}})
    return Framework(prof, registry, Handle(cache))


def fits(pod: PodInfo, existing: Sequence[PodInfo] = (), nodes: Sequence[NodeInfo] | None = None) -> bool:
    """The NodePorts filter alone on node m1 holding `existing`."""
    nodes = list(nodes or [make_node("m1")])
    cache = make_cache(nodes, existing)
    plugin = framework(cache).plugins["NodePorts"]
    snap = cache.snapshot()
    result = plugin.filter(CycleState(), pod, snap)
    ok = bool(result.feasible[snap.row["m1"]])
    if not ok:
        assert [(reason, bool(mask[snap.row["m1"]])) for reason, mask in result.reasons] == [(MSG, True)]
    return ok


def on_m1(*specs: str) -> list[PodInfo]:
    return [port_pod("existing", *specs, node="m1")]


# ============================================================ TestNodePorts


@pytest.mark.parametrize(
    "want, used, ok",
    [
        (["UDP/127.0.0.1/8080"], ["UDP/127.0.0.1/9090"], True),  # other port
        (["UDP/127.0.0.1/8080"], ["UDP/127.0.0.1/8080"], False),  # same udp port
        (["TCP/127.0.0.1/8080"], ["TCP/127.0.0.1/8080"], False),  # same tcp port
        (["TCP/127.0.0.1/8080"], ["TCP/127.0.0.2/8080"], True),  # different host ip
        (["UDP/127.0.0.1/8080"], ["TCP/127.0.0.1/8080"], True),  # different protocol
        (["UDP/127.0.0.1/8000", "UDP/127.0.0.1/8080"], ["UDP/127.0.0.1/8080"], False),  # second udp port conflict
        (
            ["TCP/127.0.0.1/8001", "UDP/127.0.0.1/8080"],
            ["TCP/127.0.0.1/8001", "UDP/127.0.0.1/8081"],
            False,
        ),  # first tcp port conflict
        (["TCP/0.0.0.0/8001"], ["TCP/127.0.0.1/8001"], False),  # conflict due to 0.0.0.0 hostIP
        (["TCP/10.0.10.10/8001", "TCP/0.0.0.0/8001"], ["TCP/127.0.0.1/8001"], False),  # TCP conflict due to 0.0.0.0
        (["TCP/127.0.0.1/8001"], ["TCP/0.0.0.0/8001"], False),  # second tcp port conflict to 0.0.0.0
        (["UDP/127.0.0.1/8001"], ["TCP/0.0.0.0/8001"], True),  # second different protocol
        (["UDP/127.0.0.1/8001"], ["TCP/0.0.0.0/8001", "UDP/0.0.0.0/8001"], False),  # UDP conflict due to 0.0.0.0
    ],
)
def test_node_ports(want, used, ok):
    assert fits(port_pod("p", *want), on_m1(*used)) is ok


# ================================================================= TestFits


@pytest.mark.parametrize(
    "want, used, ok",
    [
        (["TCP/127.0.0.1/80"], ["TCP/127.0.0.1/9090"], True),
        (
            ["TCP/127.0.0.1/80", "TCP/127.0.1.1/80", "TCP/127.0.1.1/90", "TCP/127.0.1.1/100"],
            ["TCP/127.0.0.1/9090", "TCP/127.0.0.1/9191", "TCP/127.0.1.1/8080"],
            True,
        ),
        (["TCP/127.0.0.1/80"], ["UDP/127.0.0.1/80"], True),
        (["TCP/127.0.0.1/80"], ["TCP/127.0.0.1/80"], False),
        (
            ["TCP/127.0.0.1/80", "TCP/127.0.1.1/80", "TCP/127.0.1.1/90", "TCP/127.0.1.1/100"],
            ["TCP/127.0.0.1/9090", "TCP/127.0.1.1/90", "TCP/127.0.1.1/8080"],
            False,
        ),
    ],
)
def test_fits(want, used, ok):
    assert fits(port_pod("p", *want), on_m1(*used)) is ok


def test_pod_without_host_ports_costs_nothing():
    # Upstream's PreFilter Skip: every node fits, no pass over the running pods.
    cache = make_cache([make_node("m1"), make_node("m2")], on_m1("TCP/0.0.0.0/8080"))
    plugin = framework(cache).plugins["NodePorts"]
    snap = cache.snapshot()
    calls: list[Any] = []
    snap.count_matching = lambda key, pred: calls.append(key)  # type: ignore[method-assign]
    first = plugin.filter(CycleState(), port_pod("a"), snap)
    second = plugin.filter(CycleState(), port_pod("b"), snap)
    assert calls == []
    assert first.feasible is second.feasible and first.feasible.all() and len(first.feasible) == 2
    assert not first.feasible.flags.writeable


def test_empty_protocol_and_ip_default_to_tcp_and_all_addresses():
    assert not fits(port_pod("p", "//8080"), on_m1("TCP/10.1.2.3/8080"))
    assert fits(port_pod("p", "//8080"), on_m1("UDP/10.1.2.3/8080"))
    assert not fits(port_pod("p", "TCP/10.1.2.3/8080"), on_m1("//8080"))


def test_container_port_without_host_port_uses_nothing():
    c = {"name": "c", "image": "x", "ports": [{"containerPort": 8080}]}
    existing = parse_pod(pod_body("e", containers=[c], node_name="m1", phase="Running"))
    assert existing.host_ports == ()
    assert fits(port_pod("p", "TCP/0.0.0.0/8080"), [existing])


def test_sidecar_init_container_host_port_conflicts():
    init = [{"name": "side", "image": "x", "restartPolicy": "Always", "ports": ports("TCP//8001")}]
    pod = parse_pod(pod_body("p", containers=[{"name": "c", "image": "x"}], init_containers=init))
    assert not fits(pod, on_m1("TCP/0.0.0.0/8001"))


def test_non_sidecar_init_container_host_port_is_ignored():
    init = [{"name": "init", "image": "x", "ports": ports("TCP//8001")}]
    pod = parse_pod(pod_body("p", containers=[{"name": "c", "image": "x"}], init_containers=init))
    assert fits(pod, on_m1("TCP/0.0.0.0/8001"))


def test_terminal_pods_release_their_ports():
    done = port_pod("done", "TCP/0.0.0.0/8080", node="m1", phase="Succeeded")
    assert fits(port_pod("p", "TCP/0.0.0.0/8080"), [done])


def test_other_schedulers_pods_hold_ports():
    other = parse_pod(
        pod_body(
            "o",
            containers=[{"name": "c", "image": "x", "ports": ports("TCP//9000")}],
            node_name="m1",
            phase="Running",
            scheduler_name="default-scheduler",
        )
    )
    assert not fits(port_pod("p", "TCP/0.0.0.0/9000"), [other])


# ================================================= through the algorithm


def test_fit_error_message():
    nodes = [make_node("n1"), make_node("n2"), make_node("n3")]
    existing = [port_pod("e1", "TCP//80", node="n1"), port_pod("e2", "TCP/10.0.0.1/80", node="n2")]
    cache = make_cache(nodes, existing)
    fwk = framework(cache)
    snap = cache.snapshot()
    assert snap.names[schedule_pod(fwk, port_pod("p", "TCP/0.0.0.0/80"), snap).row] == "n3"
    cache = make_cache(nodes[:2], existing)
    result = schedule_pod(framework(cache), port_pod("q", "TCP/10.0.0.1/80", "TCP/0.0.0.0/443"), cache.snapshot())
    assert result.row is None and result.diagnosis is not None
    assert result.diagnosis.message == f"0/2 nodes are available: 2 {MSG}."
    assert not result.diagnosis.unresolvable  # preemption could free the port, as upstream


def gang(n: int, port: str = "TCP//8080") -> list[PodInfo]:
    return [port_pod(f"w{i}", port, group="g") for i in range(n)]


def run_gang(pods: Sequence[PodInfo], min_count: int, nodes: Sequence[NodeInfo], existing: Sequence[PodInfo] = ()):
    cache = make_cache(nodes, existing)
    fwk = framework(cache)
    snap = cache.snapshot()
    evaluated: list[str] = []
    real = snap.count_matching

    def spy(key, predicate, selector=None):  # count predicate evaluations: the passes over running pods
        if key[0] != "NodePorts":
            return real(key, predicate, selector)

        def counted(pod: PodInfo) -> bool:
            evaluated.append(pod.name)
            return predicate(pod)

        return real(key, counted, selector)

    snap.count_matching = spy  # type: ignore[method-assign]
    group = make_group("g", min_count)
    return schedule_group(fwk, snap, group.key, group, pods), evaluated


def test_gang_members_block_each_others_host_port():
    nodes = [make_node("a"), make_node("b")]
    decision, _ = run_gang(gang(3), 3, nodes)
    assert decision.outcome == REASON_UNSCHEDULABLE and not decision.assignments
    decision, _ = run_gang(gang(3), 2, nodes)
    assert decision.outcome == REASON_SCHEDULED
    assert sorted(p.node for p in decision.assignments) == ["a", "b"]
    assert [(p.name, why) for p, why in decision.unplaced] == [("w2", f"0/2 nodes are available: 2 {ERR_REASON}.")]


def test_gang_shares_one_pass_over_running_pods():
    nodes = [make_node(f"n{i}") for i in range(4)]
    existing = [port_pod(f"e{i}", "TCP//9000", node=f"n{i}") for i in range(3)]  # other port
    decision, evaluated = run_gang(gang(4), 4, nodes, existing)
    assert decision.scheduled and len({p.node for p in decision.assignments}) == 4
    # One pass over the 3 running pods for the shared key, then one check per
    # assumed pod (the snapshot keeps the count current), never a pass per pod.
    assert sorted(evaluated) == ["e0", "e1", "e2", "w0", "w1", "w2", "w3"]


def test_gang_with_distinct_ports_fits_on_fewer_nodes():
    nodes = [make_node("a"), make_node("b")]
    pods = [port_pod(f"w{i}", f"TCP//{8000 + i}", group="g") for i in range(3)]
    decision, _ = run_gang(pods, 3, nodes)
    assert decision.scheduled and len(decision.assignments) == 3
