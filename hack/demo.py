#!/usr/bin/env python3
"""`make demo`: two training Jobs compete for room for one; troupe runs one whole.

Starts a throwaway control plane (etcd, kube-apiserver and
kube-controller-manager, no kubelet), installs troupe's CRDs and manifests
with kubectl, registers two simulated nodes with 2 CPUs each, starts troupe
with its ServiceAccount's permissions, and submits
examples/two-training-jobs.yaml: two batch/v1 Jobs of 4 one-CPU workers that
opt in with one annotation. troupe makes each Job's PodGroup (a gang of 4);
the Job controller makes the pods. Then it shows what a user would look at,
and what happens when an urgent Job with a higher PriorityClass arrives
(examples/urgent-job.yaml): the running gang is preempted whole. Then the
Jobs make way for two leader+workers replicas (examples/leader-workers.yaml:
each a CompositePodGroup over a leader PodGroup and a gang of workers) with
room for one: troupe places one tree whole, and the other's root says why it
waits.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from localcluster import ClusterStartError, ControlPlaneNotBuilt, LocalCluster  # noqa: E402
from troupe_process import TroupeProcess  # noqa: E402

NS = "demo"
JOBS = ("train-a", "train-b")  # batch/v1 Jobs; troupe names their PodGroups <job>-<uid prefix>
# The full resource name: plain `podgroups` is scheduling.k8s.io's where the cluster
# serves the native Workload API (docs/install.md). The short name `tpg` is troupe's too.
PODGROUPS = "podgroups.scheduling.troupe.dev"
# examples/leader-workers.yaml: each replica a CompositePodGroup (short name tcpg, troupe's
# own kind) over a 1-pod leader PodGroup and a gang of 3 workers.
REPLICAS = ("replica-a", "replica-b")
ROOT_CONDITION = "CompositePodGroupInitiallyScheduled"


def say(text: str) -> None:
    print(f"\n\033[1m==> {text}\033[0m", flush=True)


def show(cluster: LocalCluster, *args: str) -> None:
    print(f"$ kubectl {' '.join(args)}")
    print(cluster.kubectl(*args).stdout.rstrip())


def group_of(cluster: LocalCluster, job: str) -> str:
    """The PodGroup troupe made for a Job ("" until it exists)."""
    return cluster.kubectl(
        "get",
        PODGROUPS,
        "-n",
        NS,
        "-l",
        f"batch.kubernetes.io/job-name={job}",
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ).stdout.strip()


def group_reason(cluster: LocalCluster, job: str) -> str:
    name = group_of(cluster, job)
    if not name:
        return ""
    return cluster.kubectl(
        "get",
        PODGROUPS,
        "-n",
        NS,
        name,
        "-o",
        'jsonpath={.status.conditions[?(@.type=="PodGroupScheduled")].reason}',
    ).stdout


def wait_until(what: str, predicate, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise SystemExit(f"demo: timed out after {timeout:.0f}s waiting for {what}")


def has_condition(cluster: LocalCluster, job: str, type_: str) -> bool:
    pg = cluster.get_json(PODGROUPS, "-n", NS, group_of(cluster, job))
    return any(c["type"] == type_ for c in pg.get("status", {}).get("conditions", []))


def group_message(cluster: LocalCluster, job: str) -> str:
    name = group_of(cluster, job)
    if not name:
        return ""
    pg = cluster.get_json(PODGROUPS, "-n", NS, name)
    return next(
        (c.get("message", "") for c in pg.get("status", {}).get("conditions", []) if c["type"] == "PodGroupScheduled"),
        "",
    )


def terminating(cluster: LocalCluster) -> list[str]:
    """Pods with a deletionTimestamp: evicted, waiting for a kubelet that this demo has not."""
    pods = cluster.get_json("pods", "-n", NS)["items"]
    return [p["metadata"]["name"] for p in pods if p["metadata"].get("deletionTimestamp")]


def tables(cluster: LocalCluster) -> None:
    show(cluster, "get", "jobs", "-n", NS)
    show(cluster, "get", PODGROUPS, "-n", NS, "-L", "batch.kubernetes.io/job-name")
    show(
        cluster,
        "get",
        "pods",
        "-n",
        NS,
        "--sort-by=.metadata.name",
        "-o",
        "custom-columns=POD:.metadata.name,JOB:.metadata.labels.batch\\.kubernetes\\.io/job-name,"
        'NODE:.spec.nodeName,SCHEDULED:.status.conditions[?(@.type=="PodScheduled")].reason',
    )
    for job in (*JOBS, "urgent"):
        if name := group_of(cluster, job):  # a deleted Job's PodGroup went with it
            show(cluster, "get", PODGROUPS, name, "-n", NS, "-o", "jsonpath={.status.conditions}")


def finish(cluster: LocalCluster, job: str) -> None:
    """No kubelet here: end the Job's pods as kubelets would once the garbage collector deletes them."""
    cluster.kubectl(
        "delete", "pods", "-n", NS, "-l", f"batch.kubernetes.io/job-name={job}", "--grace-period=0", "--force"
    )


def replica_reason(cluster: LocalCluster, replica: str) -> str:
    return cluster.kubectl(
        "get",
        "tcpg",
        "-n",
        NS,
        replica,
        "-o",
        f'jsonpath={{.status.conditions[?(@.type=="{ROOT_CONDITION}")].reason}}',
    ).stdout


def namespace_empty(cluster: LocalCluster) -> bool:
    return not cluster.get_json("pods", "-n", NS)["items"] and not cluster.get_json(PODGROUPS, "-n", NS)["items"]


def leader_workers(cluster: LocalCluster) -> None:
    """Two leader+workers replicas, room for one: one tree bound whole, the other not at all."""
    say("the Jobs are done: the demo deletes them and, no kubelet here, ends their pods; both nodes are free again")
    show(cluster, "delete", "jobs", "--all", "-n", NS, "--wait=false")
    cluster.kubectl("delete", "pods", "--all", "-n", NS, "--grace-period=0", "--force", "--wait=false")
    wait_until("the Jobs' pods and PodGroups gone", lambda: namespace_empty(cluster))

    say(
        "two leader+workers replicas, room for one: each a CompositePodGroup, a gang of 2 groups "
        "(a 1-pod leader and a gang of 3 workers)"
    )
    show(cluster, "apply", "-f", str(ROOT / "examples" / "leader-workers.yaml"))
    wait_until(
        "one replica scheduled and the other unschedulable",
        lambda: sorted(replica_reason(cluster, r) for r in REPLICAS) == ["Scheduled", "Unschedulable"],
        timeout=30,
    )
    winner = next(r for r in REPLICAS if replica_reason(cluster, r) == "Scheduled")
    loser = next(r for r in REPLICAS if r != winner)
    say(f"troupe placed {winner}'s whole tree in one cycle; {loser} waits whole and its root says why")
    show(cluster, "get", "tcpg", "-n", NS)
    show(cluster, "get", "tpg", "-n", NS, "-o", "wide")
    show(
        cluster,
        "get",
        "pods",
        "-n",
        NS,
        "--sort-by=.metadata.name",
        "-o",
        "custom-columns=POD:.metadata.name,GROUP:.metadata.labels.scheduling\\.troupe\\.dev/pod-group,"
        'NODE:.spec.nodeName,SCHEDULED:.status.conditions[?(@.type=="PodScheduled")].reason',
    )
    for replica in (winner, loser):
        show(
            cluster,
            "get",
            "tcpg",
            "-n",
            NS,
            replica,
            "-o",
            'jsonpath={range .status.conditions[*]}{.type}={.status} {.reason}: {.message}{"\\n"}{end}',
        )
    bound = [
        p["metadata"]["name"]
        for p in cluster.get_json("pods", "-n", NS, "-l", f"app={loser}")["items"]
        if p["spec"].get("nodeName")
    ]
    if bound:
        raise SystemExit(f"demo: {loser} is waiting, yet its pods {bound} are bound")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the control plane and troupe running at the end and print the kubeconfig",
    )
    args = parser.parse_args()

    say("starting a throwaway control plane (etcd, kube-apiserver, kube-controller-manager)")
    try:
        cluster = LocalCluster()
        cluster.start()
    except (ControlPlaneNotBuilt, ClusterStartError) as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 1
    troupe: TroupeProcess | None = None
    try:
        print(f"ready in {cluster.startup_seconds:.1f}s at {cluster.server}")
        say("installing troupe: kubectl apply -f crds/ -f manifests/")
        show(cluster, "apply", "-f", str(ROOT / "crds"), "-f", str(ROOT / "manifests"))
        cluster.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")

        say("registering two simulated nodes with 2 CPUs each (room for 4 one-CPU workers)")
        show(cluster, "apply", "-f", str(ROOT / "examples" / "nodes.yaml"))

        say("starting troupe with the troupe-scheduler ServiceAccount's permissions")
        troupe = TroupeProcess(cluster.scheduler_kubeconfig, cluster.workdir).start()
        print(f"troupe is ready (log: {troupe.log_path})")

        say("submitting two training Jobs of 4 workers each; one annotation opts them in (gang of parallelism)")
        cluster.kubectl("create", "namespace", NS)
        show(cluster, "apply", "-f", str(ROOT / "examples" / "two-training-jobs.yaml"))
        wait_until(
            "one Job scheduled and the other unschedulable",
            lambda: sorted(group_reason(cluster, j) for j in JOBS) == ["Scheduled", "Unschedulable"],
        )
        say("troupe made each Job's PodGroup; one Job runs whole, the other waits whole and says why")
        tables(cluster)

        winner = next(j for j in JOBS if group_reason(cluster, j) == "Scheduled")
        loser = next(j for j in JOBS if j != winner)
        say(f"{winner} is deleted (its PodGroup and pods go with it): {loser} gets the room, all 4 pods at once")
        show(cluster, "delete", "job", "-n", NS, winner, "--wait=false")
        finish(cluster, winner)
        wait_until(f"{loser} scheduled", lambda: group_reason(cluster, loser) == "Scheduled")
        # The garbage collector learns of a new CRD within 30 s of its creation.
        wait_until(f"{winner}'s PodGroup garbage-collected", lambda: not group_of(cluster, winner), timeout=90)
        show(cluster, "get", PODGROUPS, "-n", NS, "-L", "batch.kubernetes.io/job-name")
        show(cluster, "get", "pods", "-n", NS, "-o", "wide")

        say(f"an urgent Job arrives with a higher PriorityClass: troupe preempts {loser} whole to make room")
        show(cluster, "apply", "-f", str(ROOT / "examples" / "urgent-job.yaml"))
        wait_until(f"{loser}'s pods terminating", lambda: len(terminating(cluster)) == 4)
        wait_until(f"{loser} marked DisruptionTarget", lambda: has_condition(cluster, loser, "DisruptionTarget"))
        wait_until("urgent told it waits for its victims", lambda: "waiting for" in group_message(cluster, "urgent"))
        show(
            cluster,
            "get",
            PODGROUPS,
            "-n",
            NS,
            group_of(cluster, loser),
            "-o",
            'jsonpath={range .status.conditions[?(@.type=="DisruptionTarget")]}{.type}={.status} {.reason}: {.message}{"\\n"}{end}',
        )
        show(
            cluster,
            "get",
            PODGROUPS,
            "-n",
            NS,
            group_of(cluster, "urgent"),
            "-o",
            'jsonpath={range .status.conditions[*]}{.type}={.status} {.reason}: {.message}{"\\n"}{end}',
        )
        say("no kubelet here: the demo ends the evicted pods as kubelets would; the urgent Job binds whole")
        cluster.kubectl(
            "delete", "pods", "-n", NS, *terminating(cluster), "--grace-period=0", "--force", "--wait=false"
        )
        wait_until("urgent scheduled", lambda: group_reason(cluster, "urgent") == "Scheduled")
        show(cluster, "get", "pods", "-n", NS, "-o", "wide")

        leader_workers(cluster)

        say("the two Jobs again without any cluster: troupe simulate (same core, a YAML file in, the placement out)")
        print("$ troupe simulate examples/simulate-two-jobs.yaml")
        sim = subprocess.run(
            [sys.executable, "-m", "scheduler", "simulate", str(ROOT / "examples" / "simulate-two-jobs.yaml")],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        print((sim.stdout + sim.stderr).rstrip())

        if args.keep:
            say("kept running; Ctrl-C stops everything")
            print(f"  export KUBECONFIG={cluster.admin_kubeconfig}")
            print(f"  export PATH={cluster.kubectl_path.parent}:$PATH")
            print(f"  kubectl get tcpg,tpg,pods -n {NS}")
            stop = threading.Event()
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
            signal.signal(signal.SIGINT, lambda *_: stop.set())
            stop.wait()
        return 0
    finally:
        say("tearing down")
        if troupe is not None:
            troupe.stop()
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
