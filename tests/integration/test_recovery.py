"""Crash recovery: the real scheduler process SIGKILLed at chosen points of a
cycle (TROUPE_FAILPOINTS, scheduler/runtime/failpoints.py) and at random
moments while it binds, then restarted. After the restart it must rebuild its
state from the API alone, bind nothing twice, count the pods already bound
toward minCount, and never overcommit a node.

"Bound exactly once" is checked from both sides: the API (every pod ends with a
nodeName, and a pod bound at the kill keeps its node), and the restarted
process (its troupe_pod_bindings_total{result="bound"} equals the number of
pods that were unbound at the kill, and it logged no 409 "already bound").
"""

from __future__ import annotations

import os
import random
from decimal import Decimal

import pytest
from objects import (
    bound,  # noqa: F401 (fixture)
    create,
    events_for,
    force_delete,
    pod,
    podgroup,
    pods_by_name,
    wait_condition,
    wait_pod_waiting,
)
from troupe_process import TroupeProcess
from wait import wait_for

from scheduler.api.quantity import parse_quantity

# One bind at a time: what is bound at a kill is then exactly determined by the failpoint's pass.
SERIAL_BINDS = """
apiVersion: scheduling.troupe.dev/v1alpha1
kind: SchedulerConfiguration
clientConnection: {qps: 200, burst: 200, bindConcurrency: 1}
"""

ALREADY_BOUND = "already bound (409)"


# ------------------------------------------------------------------- helpers


def settled_bound(cluster, ns: str) -> dict[str, str]:
    """pod -> node as the API has it once it stopped changing (two reads in a row
    agree): a bind the killed process sent may land a moment after it died."""
    last: list[dict[str, str]] = []

    def stable() -> tuple[dict[str, str]] | None:
        now = bound(cluster, ns)
        same = bool(last) and last[-1] == now
        last.append(now)
        return (now,) if same else None

    return wait_for(stable, timeout=10, interval=0.2, message="the bound pods to stop changing")[0]


def bindings(proc: TroupeProcess) -> float:
    value = proc.metric("troupe_pod_bindings_total", result="bound")
    assert value is not None, f"no /metrics from troupe:\n{proc.log_tail()}"
    return value


def assert_no_node_overcommitted(cluster) -> None:
    """Every node holds at most its allocatable cpu, memory and pod count (all namespaces)."""
    alloc = {n["metadata"]["name"]: n["status"]["allocatable"] for n in cluster.get_json("nodes")["items"]}
    used: dict[str, dict[str, Decimal]] = {
        name: {"cpu": Decimal(0), "memory": Decimal(0), "pods": Decimal(0)} for name in alloc
    }
    for p in cluster.get_json("pods", "--all-namespaces")["items"]:
        node_name = p["spec"].get("nodeName")
        if not node_name or node_name not in used or p.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue
        used[node_name]["pods"] += 1
        for c in p["spec"]["containers"]:
            for res, q in (c.get("resources", {}).get("requests") or {}).items():
                if res in ("cpu", "memory"):
                    used[node_name][res] += parse_quantity(q)
    over = {
        name: {
            r: f"{used[name][r]} > {alloc[name][r]}"
            for r in used[name]
            if used[name][r] > parse_quantity(alloc[name][r])
        }
        for name in alloc
    }
    over = {k: v for k, v in over.items() if v}
    assert not over, f"nodes over their allocatable: {over}"


def assert_clean_log(proc: TroupeProcess, this_run: bool = True) -> None:
    text = proc.log_text(this_run=this_run)
    assert ALREADY_BOUND not in text, f"troupe tried to bind an already bound pod:\n{proc.log_tail(100)}"
    assert "Traceback" not in text, f"troupe logged a traceback:\n{proc.log_tail(100)}"


def run_until_failpoint(
    cluster, tmp_path, spec: str, name: str = "crashing", config: str | None = SERIAL_BINDS
) -> TroupeProcess:
    """Start troupe with `spec` armed and wait for it to SIGKILL itself there."""
    proc = TroupeProcess(
        cluster.scheduler_kubeconfig, tmp_path, config=config, name=name, env={"TROUPE_FAILPOINTS": spec}
    )
    proc.start(wait_ready=False)
    rc = proc.wait_exit(timeout=30)
    point = spec.split("=")[0]
    assert rc == -9, f"troupe with {spec} exited with {rc}, not by SIGKILL:\n{proc.log_tail()}"
    assert f"failpoint {point}: killing the process (SIGKILL)" in proc.log_text(), proc.log_tail()
    return proc


def restart(cluster, tmp_path, name: str = "restarted", config: str | None = None) -> TroupeProcess:
    return TroupeProcess(cluster.scheduler_kubeconfig, tmp_path, config=config, name=name).start()


def stop_clean(proc: TroupeProcess) -> None:
    rc = proc.stop()
    assert rc == 0, f"troupe exited with {rc} on SIGTERM:\n{proc.log_tail()}"


def wait_all_bound(cluster, ns: str, count: int, timeout: float = 30) -> dict[str, str]:
    return wait_for(
        lambda: len(b := bound(cluster, ns)) == count and b, timeout=timeout, message=f"all {count} pods bound"
    )


def assert_kept_nodes(before: dict[str, str], after: dict[str, str]) -> None:
    moved = {p: (n, after.get(p)) for p, n in before.items() if after.get(p) != n}
    assert not moved, f"pods bound before the kill changed node (or vanished): {moved}"


def assert_restart_bound_exactly(proc: TroupeProcess, expected: int) -> None:
    """The restarted process bound `expected` pods, no more and no fewer."""
    wait_for(
        lambda: bindings(proc) == expected,
        timeout=10,
        message=f"troupe_pod_bindings_total{{result=bound}} == {expected}",
    )
    assert_clean_log(proc)


# --------------------------------------------------- kills at each failpoint

GANG = 6  # minCount = pods = 6, 1 CPU each, on 3 nodes x 2 CPU: exactly full


@pytest.mark.parametrize(
    "spec, bound_at_kill",
    [
        ("cycle-decided=1", 0),  # decided and assumed, nothing sent
        ("bind-start=3", 2),  # two binds done, the third about to be sent
        ("bind-done=2", 2),  # the API accepted the second bind, troupe never recorded it
        ("bind-done=5", 5),  # one pod left: 5 bound must count toward minCount 6
        # The group's condition about to be written: status writes wait for binds, so all are bound.
        ("status-write=1", GANG),
    ],
)
def test_kill_at_failpoint_then_restart_completes_the_gang(installed, nodes, namespace, tmp_path, spec, bound_at_kill):
    c, ns = installed, namespace
    for i in range(3):
        nodes(f"node-{i}", cpu="2")
    create(c, podgroup(ns, "train", GANG), *[pod(ns, f"train-{i}", group="train") for i in range(GANG)])

    crashed = run_until_failpoint(c, tmp_path, spec)
    at_kill = settled_bound(c, ns)
    print(f"{spec}: bound at the kill: {sorted(at_kill)}")
    if bound_at_kill is not None:
        assert len(at_kill) == bound_at_kill, f"{spec}: expected {bound_at_kill} bound at the kill, got {at_kill}"
    if bound_at_kill != GANG:
        assert len(at_kill) < GANG, f"{spec}: everything was bound before the kill; the test proves nothing"
    if spec.startswith("bind-done"):
        # The pending pods alone are fewer than minCount: the restart must count the bound ones.
        assert len(at_kill) >= 1, f"{spec}: nothing bound at the kill"
    assert_clean_log(crashed, this_run=False)
    assert_no_node_overcommitted(c)

    proc = restart(c, tmp_path)
    try:
        final = wait_all_bound(c, ns, GANG)
        assert_kept_nodes(at_kill, final)
        wait_condition(c, ns, "train", "True", "Scheduled")
        assert_restart_bound_exactly(proc, GANG - len(at_kill))
        # One cycle for the pending pods, and it found minCount reached (bound + placed now);
        # none when nothing was left to bind (the condition is written all the same).
        decisions = {
            o: proc.metric("troupe_podgroup_decisions_total", outcome=o)
            for o in ("Scheduled", "Unschedulable", "SchedulerError")
        }
        scheduled = 0 if len(at_kill) == GANG else 1
        assert decisions == {"Scheduled": scheduled, "Unschedulable": 0, "SchedulerError": 0}, decisions
        assert_no_node_overcommitted(c)
    finally:
        stop_clean(proc)


# --------------------------------------------------- kills at random moments


def test_kills_at_random_moments_while_binding(installed, nodes, namespace, tmp_path):
    """3 gangs x 40 pods (minCount 40) on nodes with room for exactly all of them;
    SIGKILL 3 times after a random number of binds, then run to the end."""
    c, ns = installed, namespace
    seed = int(os.environ.get("TROUPE_TEST_SEED") or random.randrange(2**32))
    print(f"random kill test seed: {seed} (TROUPE_TEST_SEED={seed} repeats it)")
    rng = random.Random(seed)
    gangs, size = ("a", "b", "c"), 40
    for i in range(12):
        nodes(f"node-{i}", cpu="10")
    create(c, *[podgroup(ns, g, size) for g in gangs])
    create(c, *[pod(ns, f"{g}-{i}", group=g) for g in gangs for i in range(size)])
    total = len(gangs) * size
    # Slow binding (default bindConcurrency 16 behind 10 QPS) and a kill chosen by progress,
    # not by time: each run is killed once its own binds reach a random count of 1..15,
    # so even a poll that notices late (a loaded machine) leaves work for the next run.
    config = "clientConnection: {qps: 10, burst: 5}\n"

    history: list[dict[str, str]] = [{}]
    for run in range(3):
        target = rng.randint(1, 15)
        proc = restart(c, tmp_path, name=f"run-{run}", config=config)
        try:
            wait_for(
                lambda proc=proc, target=target: bindings(proc) >= target,
                timeout=30,
                interval=0.02,
                message=f"run {run}: {target} binds done",
            )
        finally:
            proc.kill()
        assert proc.returncode == -9
        assert_clean_log(proc)
        now = settled_bound(c, ns)
        assert_kept_nodes(history[-1], now)
        assert_no_node_overcommitted(c)
        per_gang = {g: sum(1 for p in now if p.startswith(f"{g}-")) for g in gangs}
        print(f"seed {seed} run {run}: killed after {target}+ binds; bound per gang: {per_gang}")
        history.append(now)

    before_final = history[-1]
    assert len(before_final) < total, f"seed {seed}: everything was bound before the final run"
    proc = restart(c, tmp_path, name="final", config=config)
    try:
        final = wait_all_bound(c, ns, total, timeout=120)
        assert_kept_nodes(before_final, final)
        for g in gangs:
            wait_condition(c, ns, g, "True", "Scheduled")
        assert_restart_bound_exactly(proc, total - len(before_final))
        assert_no_node_overcommitted(c)
    finally:
        stop_clean(proc)


# ------------------------------------------- objects deleted while troupe is down


def test_bound_pods_deleted_while_down_free_their_room(installed, nodes, namespace, tmp_path):
    """A gang waits for room; troupe dies; pods holding that room are deleted; the
    restarted troupe sees the room from the API and places the waiting gang."""
    c, ns = installed, namespace
    nodes("node-0", cpu="2")
    nodes("node-1", cpu="2")
    create(c, podgroup(ns, "first", 4), *[pod(ns, f"first-{i}", group="first") for i in range(4)])
    proc = restart(c, tmp_path, name="before")
    try:
        wait_all_bound(c, ns, 4)
        create(c, podgroup(ns, "second", 2), *[pod(ns, f"second-{i}", group="second") for i in range(2)])
        cond = wait_condition(c, ns, "second", "False", "Unschedulable")
        assert "needs 2 pods, 0 fit" in cond["message"], cond
    finally:
        proc.kill()
    kept = bound(c, ns)
    force_delete(c, ns, "first-0", "first-1")
    wait_for(lambda: not ({"first-0", "first-1"} & set(pods_by_name(c, ns))), message="first-0/1 gone")

    proc = restart(c, tmp_path)
    try:
        placed = wait_for(
            lambda: len(b := bound(c, ns, "second")) == 2 and b,
            timeout=30,
            message="the waiting gang bound in the freed room",
        )
        assert_kept_nodes({p: n for p, n in kept.items() if p in ("first-2", "first-3")}, bound(c, ns))
        wait_condition(c, ns, "second", "True", "Scheduled")
        assert_restart_bound_exactly(proc, 2)
        assert_no_node_overcommitted(c)
        assert sorted(placed) == ["second-0", "second-1"]
    finally:
        stop_clean(proc)


def test_pod_deleted_after_the_decision_while_down(installed, nodes, namespace, tmp_path):
    """troupe decides to place all 4 pods of a gang (minCount 3) and dies before
    binding; one pod is deleted meanwhile. The restarted troupe binds the 3 that
    exist and never refers to the deleted one."""
    c, ns = installed, namespace
    nodes("node-0", cpu="4")
    create(c, podgroup(ns, "keep", 3), *[pod(ns, f"keep-{i}", group="keep") for i in range(4)])
    run_until_failpoint(c, tmp_path, "cycle-decided=1")
    assert bound(c, ns) == {}
    force_delete(c, ns, "keep-3")
    wait_for(lambda: "keep-3" not in pods_by_name(c, ns), message="keep-3 gone")

    proc = restart(c, tmp_path)
    try:
        wait_for(
            lambda: sorted(bound(c, ns)) == ["keep-0", "keep-1", "keep-2"],
            timeout=30,
            message="the 3 remaining pods bound",
        )
        wait_condition(c, ns, "keep", "True", "Scheduled")
        assert_restart_bound_exactly(proc, 3)
        assert "keep-3" not in proc.log_text(this_run=True), proc.log_tail()
        assert not [e for e in events_for(c, ns, "keep-3")], "an event was posted for the deleted pod"
    finally:
        stop_clean(proc)


def test_podgroup_deleted_while_down_makes_its_pods_wait_again(installed, nodes, namespace, tmp_path):
    """troupe decides to place a gang and dies before binding; the PodGroup is
    deleted meanwhile. After the restart its pods wait for the PodGroup (as a pod
    of a missing group does) and nothing is bound, until the group is back."""
    c, ns = installed, namespace
    nodes("node-0", cpu="4")
    create(c, podgroup(ns, "gone", 2), pod(ns, "gone-0", group="gone"), pod(ns, "gone-1", group="gone"))
    run_until_failpoint(c, tmp_path, "cycle-decided=1")
    c.kubectl("delete", "podgroup", "-n", ns, "gone")

    proc = restart(c, tmp_path)
    try:
        waiting = f"waiting for PodGroup {ns}/gone to be created"
        for name in ("gone-0", "gone-1"):
            wait_pod_waiting(c, ns, name, waiting)
        events = wait_for(
            lambda: [e for e in events_for(c, ns, "gone-0") if e["note"] == waiting],
            message="the waiting event on gone-0",
        )
        assert events[0]["reason"] == "FailedScheduling", events[0]
        assert bound(c, ns) == {}
        assert bindings(proc) == 0
        create(c, podgroup(ns, "gone", 2))
        wait_all_bound(c, ns, 2)
        wait_condition(c, ns, "gone", "True", "Scheduled")
        assert_restart_bound_exactly(proc, 2)
    finally:
        stop_clean(proc)
