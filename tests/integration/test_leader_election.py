"""Two troupe replicas with leader election on the real control plane: one
leads (holds the Lease) and schedules, the other keeps its cache warm and
takes over when the leader is killed (after the lease runs out) or stops
cleanly (at once: the lease is released). Durations are short here (lease
3 s, renew deadline 2 s, retry 0.25 s) so the tests are quick."""

from __future__ import annotations

import time

import pytest
from objects import bound, create, pod, podgroup
from troupe_process import TroupeProcess
from wait import wait_for

pytestmark = pytest.mark.integration

CONFIG = """
leaderElection:
  leaderElect: true
  leaseDuration: 3s
  renewDeadline: 2s
  retryPeriod: 250ms
"""


def leads(proc: TroupeProcess) -> bool:
    return proc.metric("leader_election_master_status") == 1.0


def gang(c, ns: str, name: str, size: int = 3) -> None:
    create(c, podgroup(ns, name, size), *[pod(ns, f"{name}-{i}", group=name, cpu="100m") for i in range(size)])


def lease_holder(c) -> str:
    lease = c.get_json("lease", "troupe-scheduler", "-n", "troupe-system")
    return str(lease["spec"].get("holderIdentity") or "")


@pytest.fixture
def replicas(installed, tmp_path):
    c = installed
    c.kubectl("delete", "lease", "troupe-scheduler", "-n", "troupe-system", check=False)
    procs: list[TroupeProcess] = []

    def start(name: str) -> TroupeProcess:
        proc = TroupeProcess(c.scheduler_kubeconfig, tmp_path, config=CONFIG, name=name).start()
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.kill()
    c.kubectl("delete", "lease", "troupe-scheduler", "-n", "troupe-system", check=False)


def test_only_the_leader_schedules_and_a_standby_takes_over_when_it_is_killed(installed, nodes, namespace, replicas):
    c, ns = installed, namespace
    nodes("node-0", cpu="8")
    a = replicas("a")
    wait_for(lambda: leads(a), timeout=10, message="a leads")
    b = replicas("b")  # ready (cache synced) but standing by
    assert b.get("/readyz")[0] == 200 and not leads(b)
    gang(c, ns, "one")
    wait_for(lambda: len(bound(c, ns)) == 3, timeout=20, message="gang one bound by the leader")
    assert (b.metric("troupe_pod_bindings_total", result="bound") or 0) == 0
    killed = time.monotonic()
    a.kill()
    wait_for(lambda: leads(b), timeout=10, message="b leads after a was killed")
    took = time.monotonic() - killed
    # b waits for the lease to run out (3 s by its own clock), then takes it at its next retry.
    assert took < 3 + 2, f"takeover took {took:.1f}s"
    gang(c, ns, "two")
    wait_for(lambda: len(bound(c, ns)) == 6, timeout=20, message="gang two bound by the new leader")
    assert b.metric("troupe_pod_bindings_total", result="bound") == 3


def test_a_leader_that_stops_cleanly_hands_over_at_once(installed, nodes, namespace, replicas):
    c, ns = installed, namespace
    nodes("node-0", cpu="8")
    a = replicas("a")
    wait_for(lambda: leads(a), timeout=10, message="a leads")
    b = replicas("b")
    stopped = time.monotonic()
    assert a.stop() == 0, a.log_tail()
    assert "lease troupe-scheduler released" in a.log_text()
    wait_for(lambda: leads(b), timeout=5, message="b leads after a stopped")
    assert time.monotonic() - stopped < 3, "the standby waited for the lease instead of taking the released one"
    gang(c, ns, "one")
    wait_for(lambda: len(bound(c, ns)) == 3, timeout=20, message="gang bound by b")
    assert lease_holder(c), "b holds the lease"


def test_a_paused_leader_does_not_bind_after_it_resumes(installed, nodes, namespace, replicas):
    """SIGSTOP the leader past its lease: the standby takes over; when the old
    leader resumes, it sends no bind (its renewal is too old) and exits."""
    c, ns = installed, namespace
    nodes("node-0", cpu="8")
    a = replicas("a")
    wait_for(lambda: leads(a), timeout=10, message="a leads")
    b = replicas("b")
    a.pause()
    wait_for(lambda: leads(b), timeout=10, message="b leads while a is paused")
    gang(c, ns, "one")
    wait_for(lambda: len(bound(c, ns)) == 3, timeout=20, message="gang bound by b")
    a.resume()
    wait_for(lambda: a.proc is not None and a.proc.poll() is not None, timeout=10, message="a exits")
    assert a.proc is not None and a.proc.returncode == 1, a.log_tail()
    assert "not renewed within 2s" in a.log_text(), a.log_tail()
    assert (b.metric("troupe_pod_bindings_total", result="bound") or 0) == 3


def test_only_the_leader_makes_job_podgroups_and_a_new_leader_takes_the_jobs_over(
    installed, nodes, namespace, replicas
):
    """The Job integration writes from the leader only; a Job created while
    the leader is dead is picked up by the standby once it holds the lease."""
    from test_jobs import apply, bound_of, group_of, job

    c, ns = installed, namespace
    nodes("node-0", cpu="8")
    a = replicas("a")
    wait_for(lambda: leads(a), timeout=10, message="a leads")
    b = replicas("b")
    apply(c, job(ns, "first", 2))
    wait_for(lambda: len(bound_of(c, ns, "first")) == 2, timeout=60, message="first Job bound by the leader")
    made = f"PodGroup {group_of(c, ns, 'first')}:"
    assert made in a.log_path.read_text() and made not in b.log_path.read_text()
    a.kill()
    apply(c, job(ns, "second", 2))  # nobody leads for up to a lease duration
    wait_for(lambda: leads(b), timeout=10, message="b leads after a was killed")
    wait_for(lambda: len(bound_of(c, ns, "second")) == 2, timeout=60, message="second Job bound by the new leader")
    assert f"PodGroup {group_of(c, ns, 'second')}:" in b.log_path.read_text()


def test_a_lease_namespace_that_does_not_exist_is_explained_once_and_leadership_follows_its_creation(
    installed, nodes, namespace, tmp_path
):
    # As a user running troupe by hand (admin credentials) with a namespace
    # that is not there: one message that says what to do, not a warning
    # every retry; once the namespace exists, the replica leads and schedules.
    c, ns = installed, namespace
    lease_ns = f"lease-{namespace}"
    config = CONFIG + f"  resourceNamespace: {lease_ns}\n"
    proc = TroupeProcess(c.admin_kubeconfig, tmp_path, config=config, name="no-namespace").start(wait_ready=False)
    try:
        said = f"namespace '{lease_ns}' does not exist. Create it (kubectl create namespace {lease_ns}"
        wait_for(lambda: said in proc.log_text(), timeout=20, message="the missing namespace explained")
        assert proc.metric("leader_election_master_status") == 0.0
        c.kubectl("create", "namespace", lease_ns)
        wait_for(lambda: leads(proc), timeout=40, message="leads once the namespace exists")
        # Every try until then failed the same way: said once, never as a warning per try.
        log = proc.log_text()
        assert log.count(said) == 1 and "writing lease failed" not in log, proc.log_tail()
        assert "the Lease can be written again" in log
        nodes("node-0", cpu="8")
        gang(c, ns, "after")
        wait_for(lambda: len(bound(c, ns, "after-")) == 3, timeout=30, message="the gang bound")
    finally:
        proc.kill()
        c.kubectl("delete", "namespace", lease_ns, "--wait=false", check=False)


def test_a_lease_the_service_account_may_not_write_is_explained_with_the_rbac_to_apply(installed, tmp_path):
    config = CONFIG + "  resourceNamespace: default\n"
    proc = TroupeProcess(installed.scheduler_kubeconfig, tmp_path, config=config, name="forbidden")
    proc.start(wait_ready=False)
    try:
        said = "is forbidden: the ServiceAccount needs get, create and update on leases in 'default'"
        wait_for(lambda: said in proc.log_text(), timeout=20, message="the missing permission explained")
        assert "manifests/02-rbac.yaml" in proc.log_text()
    finally:
        proc.kill()
