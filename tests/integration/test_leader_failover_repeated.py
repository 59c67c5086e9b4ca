"""Repeated leader kills (issue 14): two replicas with leader election, gangs
created at a steady pace, and the leader SIGKILLed three times, the killed
replica started again each time (as its Deployment would). Checked at every
observation (hack/invariants.py) and at the end: no pod bound twice, no gang
bound below minCount beyond a takeover, no node overcommitted, every pod
bound, and the surviving replica never exits."""

from __future__ import annotations

import threading
import time

import pytest
from invariants import Observer, apply_until_done, gang_objects
from test_leader_election import CONFIG, leads
from troupe_process import TroupeProcess
from wait import wait_for

pytestmark = pytest.mark.integration

GANGS, SIZE, KILLS = 15, 3, 3


def test_the_leader_killed_three_times_while_gangs_arrive(installed, nodes, namespace, tmp_path):
    c, ns = installed, namespace
    for i in range(3):
        nodes(f"node-{i}", cpu="4")
    c.kubectl("delete", "lease", "troupe-scheduler", "-n", "troupe-system", check=False)
    replicas = {name: TroupeProcess(c.scheduler_kubeconfig, tmp_path, config=CONFIG, name=name) for name in "ab"}
    obs = Observer(c, partial_grace=20.0, interval=0.3)
    try:
        replicas["a"].start()
        wait_for(lambda: leads(replicas["a"]), timeout=10, message="a leads")
        replicas["b"].start()
        obs.start()
        done, errors = threading.Event(), []

        def creator() -> None:
            try:
                for g in range(GANGS):
                    obs.expect_gang(ns, f"g{g}", SIZE)
                    apply_until_done(c, gang_objects(ns, f"g{g}", SIZE), timeout=60)
                    time.sleep(0.4)
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                errors.append(exc)
            finally:
                done.set()

        threading.Thread(target=creator, daemon=True).start()
        for kill in range(KILLS):
            time.sleep(1.5)
            leader = wait_for(
                lambda: next((n for n, p in replicas.items() if leads(p)), None), timeout=10, message="a leader"
            )
            other = "b" if leader == "a" else "a"
            replicas[leader].kill()
            wait_for(lambda o=other: leads(replicas[o]), timeout=10, message=f"{other} leads after kill {kill + 1}")
            replicas[leader].start()  # the Deployment starts it again: a standby now
        assert done.wait(60) and not errors, errors
        left = obs.final_check(timeout=30, expected_pods=GANGS * SIZE)
        assert not left, f"pods left unbound: {left[:10]} ({len(left)})"
    finally:
        obs.stop()
        alive = {n: p.returncode for n, p in replicas.items()}
        for p in replicas.values():
            p.kill()
        c.kubectl("delete", "lease", "troupe-scheduler", "-n", "troupe-system", check=False)
    assert obs.violations == [], obs.violations
    assert alive == {"a": None, "b": None}, f"a replica exited: {alive}"
    print(f"{KILLS} leader kills; {obs.observations} observations; longest partial gang {obs.max_partial_seconds:.1f}s")
