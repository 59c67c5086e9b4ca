#!/usr/bin/env python3
"""`make demo`: two training jobs compete for room for one; troupe runs one whole.

Starts a throwaway control plane (etcd + kube-apiserver, no kubelet), installs
troupe's CRDs and manifests with kubectl, registers two simulated nodes with
2 CPUs each, starts troupe with its ServiceAccount's permissions, and submits
examples/two-training-jobs.yaml: two gangs of 4 one-CPU workers, minCount 4,
created interleaved. Then it shows what a user would look at, and what
happens when an urgent job with a higher PriorityClass arrives
(examples/urgent-job.yaml): the running gang is preempted whole.
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
JOBS = ("train-a", "train-b")


def say(text: str) -> None:
    print(f"\n\033[1m==> {text}\033[0m", flush=True)


def show(cluster: LocalCluster, *args: str) -> None:
    print(f"$ kubectl {' '.join(args)}")
    print(cluster.kubectl(*args).stdout.rstrip())


def group_reason(cluster: LocalCluster, name: str) -> str:
    return cluster.kubectl(
        "get",
        "podgroup",
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


def has_condition(cluster: LocalCluster, name: str, type_: str) -> bool:
    pg = cluster.get_json("podgroup", "-n", NS, name)
    return any(c["type"] == type_ for c in pg.get("status", {}).get("conditions", []))


def group_message(cluster: LocalCluster, name: str) -> str:
    pg = cluster.get_json("podgroup", "-n", NS, name)
    return next(
        (c.get("message", "") for c in pg.get("status", {}).get("conditions", []) if c["type"] == "PodGroupScheduled"),
        "",
    )


def terminating(cluster: LocalCluster) -> list[str]:
    """Pods with a deletionTimestamp: evicted, waiting for a kubelet that this demo has not."""
    pods = cluster.get_json("pods", "-n", NS)["items"]
    return [p["metadata"]["name"] for p in pods if p["metadata"].get("deletionTimestamp")]


def tables(cluster: LocalCluster) -> None:
    show(cluster, "get", "podgroups", "-n", NS)
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
    for job in JOBS:
        show(cluster, "get", "podgroup", job, "-n", NS, "-o", "jsonpath={.status.conditions}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the control plane and troupe running at the end and print the kubeconfig",
    )
    args = parser.parse_args()

    say("starting a throwaway control plane (etcd + kube-apiserver)")
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

        say("submitting two training jobs: 4 workers each, gang minCount 4, pods created interleaved")
        cluster.kubectl("create", "namespace", NS)
        show(cluster, "apply", "-f", str(ROOT / "examples" / "two-training-jobs.yaml"))
        wait_until(
            "one job scheduled and the other unschedulable",
            lambda: sorted(group_reason(cluster, j) for j in JOBS) == ["Scheduled", "Unschedulable"],
        )
        say("one job runs whole; the other waits whole and says why (no pod holds a node it cannot use)")
        tables(cluster)

        winner = next(j for j in JOBS if group_reason(cluster, j) == "Scheduled")
        loser = next(j for j in JOBS if j != winner)
        say(f"{winner} finishes (its pods are deleted): {loser} gets the room, all 4 pods at once")
        cluster.kubectl("delete", "pods", "-n", NS, "-l", f"app={winner}", "--grace-period=0", "--force")
        wait_until(f"{loser} scheduled", lambda: group_reason(cluster, loser) == "Scheduled")
        show(cluster, "get", "pods", "-n", NS, "-o", "wide")

        say(f"an urgent job arrives with a higher PriorityClass: troupe preempts {loser} whole to make room")
        show(cluster, "apply", "-f", str(ROOT / "examples" / "urgent-job.yaml"))
        wait_until(f"{loser}'s pods terminating", lambda: len(terminating(cluster)) == 4)
        wait_until(f"{loser} marked DisruptionTarget", lambda: has_condition(cluster, loser, "DisruptionTarget"))
        wait_until("urgent told it waits for its victims", lambda: "waiting for" in group_message(cluster, "urgent"))
        show(
            cluster,
            "get",
            "podgroup",
            "-n",
            NS,
            loser,
            "-o",
            'jsonpath={range .status.conditions[?(@.type=="DisruptionTarget")]}{.type}={.status} {.reason}: {.message}{"\\n"}{end}',
        )
        show(
            cluster,
            "get",
            "podgroup",
            "-n",
            NS,
            "urgent",
            "-o",
            'jsonpath={range .status.conditions[*]}{.type}={.status} {.reason}: {.message}{"\\n"}{end}',
        )
        say("no kubelet here: the demo finishes the terminating pods as kubelets would; the urgent job binds whole")
        cluster.kubectl("delete", "pods", "-n", NS, *terminating(cluster), "--grace-period=0", "--force")
        wait_until("urgent scheduled", lambda: group_reason(cluster, "urgent") == "Scheduled")
        show(cluster, "get", "pods", "-n", NS, "-o", "wide")

        say("the same without any cluster: troupe simulate (same core, a YAML file in, the placement out)")
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
            print(f"  kubectl get podgroups -n {NS}")
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
