"""Soak: randomized faults for a bounded time while gangs keep arriving (issue 14).

    python -m bench.soak --minutes 30 [--seed N] [--fault-every 5]

Not part of CI or `make test`. One control plane of its own (etcd +
kube-apiserver, hack/localcluster.py), two troupe replicas with leader
election (short leases), a steady stream of gangs (each deleted a few seconds
after it is fully bound, so the cluster stays small), and every few seconds a
fault drawn at random:

  leader-kill        SIGKILL the leader; start it again (as its Deployment would)
  apiserver-restart  kube-apiserver stopped (SIGTERM or SIGKILL), down 0-3 s, started again
  etcd-restart       etcd stopped (SIGTERM or SIGKILL), down 0-3 s, started again
  node-delete        a node deleted; its pods force-deleted (as the PodGC would) and
                     created again (as their controller would); the node back 3-8 s later
  pod-delete         a bound gang pod force-deleted and created again
  bind-500           the standby restarted with TROUPE_FAILPOINTS bind-500 (every 3rd
                     bind attempt answers 500) and bind-lost (every 4th bind lands but
                     its answer is lost), then made leader by a clean stop of the
                     leader; armed until that replica is next restarted

A replica that exits by itself is started again and counted (a leader that
cannot renew its lease through an outage exits, as kube-scheduler does).
hack/invariants.py checks at every observation: no pod bound twice, no gang
bound below minCount for longer than a bind retry takes, no node
overcommitted; at the end every pod must be bound. Prints a progress line
every 30 s and a final table; exits 1 on any violation.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "hack"))
from invariants import GROUP_LABEL, Observer, gang_objects, gang_pod  # noqa: E402
from localcluster import LocalCluster  # noqa: E402
from troupe_process import FAILPOINTS_ENV, TroupeProcess  # noqa: E402

CONFIG = """
apiVersion: scheduling.troupe.dev/v1alpha1
kind: SchedulerConfiguration
leaderElection:
  leaderElect: true
  leaseDuration: 3s
  renewDeadline: 2s
  retryPeriod: 250ms
"""
NAMESPACE = "soak"
FAULTS = ("leader-kill", "apiserver-restart", "etcd-restart", "node-delete", "pod-delete", "bind-500")
BIND_FAILPOINTS = "bind-500=3,bind-lost=4"
NODE_CPU = 4


def node_body(name: str) -> dict[str, Any]:
    alloc = {"cpu": str(NODE_CPU), "memory": "32Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"capacity": alloc, "allocatable": alloc},
    }


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.workdir = Path(tempfile.mkdtemp(prefix="troupe-soak-"))
        # durable: etcd is SIGKILLed, it must keep what it acknowledged; no
        # controller manager: the soak makes no Jobs (and it would share the 2 cores)
        self.cluster = LocalCluster(durable=True, controller_manager=False)
        self.obs = Observer(self.cluster, partial_grace=args.partial_grace, interval=1.0)
        self.replicas: dict[str, TroupeProcess] = {}
        self.survived: Counter[str] = Counter()
        self.failed_faults: Counter[str] = Counter()
        self.replica_exits = 0
        self.gangs: dict[str, tuple[int, float | None]] = {}  # name -> (size, fully bound since)
        self.deleting: set[str] = set()  # gangs done with, deleted (again) each tick until the API agrees
        # The workload thread deletes gangs; faults replace their pods: never both at once.
        self.gangs_lock = threading.Lock()
        self.created = 0
        self.kubectl_errors: set[str] = set()
        self.deleted = 0
        self.nodes_down: dict[str, float] = {}  # name -> when to add it back
        self.stop = threading.Event()

    # ------------------------------------------------------------ helpers

    def kubectl(self, *args: str, input: str | None = None) -> bool:
        try:
            r = self.cluster.kubectl(*args, "--request-timeout=10s", input=input, check=False, timeout=30)
        except subprocess.TimeoutExpired:
            return False
        if r.returncode != 0:
            why = (r.stderr or "").strip().splitlines()[-1:] or [f"exit {r.returncode}"]
            if why[0] not in self.kubectl_errors:  # each reason once: a stalled workload says why
                self.kubectl_errors.add(why[0])
                print(f"  kubectl {args[0]} failed: {why[0][:300]}", flush=True)
        return r.returncode == 0

    def apply(self, objects: list[dict[str, Any]]) -> bool:
        return self.kubectl(
            "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
        )

    def leader(self) -> str | None:
        for name, p in self.replicas.items():
            if p.returncode is None and p.metric("leader_election_master_status") == 1.0:
                return name
        return None

    def wait_leader(self, timeout: float = 30) -> str | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            name = self.leader()
            if name:
                return name
            time.sleep(0.25)
        return None

    def restart(self, name: str, env: dict[str, str] | None = None) -> None:
        p = self.replicas[name]
        p.kill()
        p.env = dict(env or {})
        p.start(wait_ready=False)

    def supervise(self) -> None:
        """A replica that exited by itself is started again, as its Deployment would."""
        for p in self.replicas.values():
            if p.returncode is not None:
                self.replica_exits += 1
                p.env = {}
                p.start(wait_ready=False)

    # ----------------------------------------------------------- workload

    def workload(self) -> None:
        """Keep about `--gangs` gangs; delete each a few seconds after it is fully bound.
        A gang whose creation failed (the API server away) is applied again with the
        same objects until it exists whole: a retry under the same name with another
        size would meet the PodGroup's immutable spec."""
        n = 0
        pending: tuple[str, int, list[dict[str, Any]]] | None = None
        while not self.stop.is_set():
            self.tick_gangs()
            if pending is None and len(self.gangs) + len(self.deleting) < self.args.gangs:
                size = self.rng.randint(2, 5)
                name = f"g{n}"
                n += 1
                cpu = f"{self.rng.choice((100, 200, 300))}m"
                pending = (name, size, gang_objects(NAMESPACE, name, size, cpu=cpu))
                self.obs.expect_gang(NAMESPACE, name, size)
            if pending is not None and self.apply(pending[2]):
                with self.gangs_lock:
                    self.gangs[pending[0]] = (pending[1], None)
                self.created += 1
                pending = None
            self.stop.wait(0.3)

    def tick_gangs(self) -> None:
        pods = self.obs.last_pods
        bound: Counter[str] = Counter()
        for p in pods:
            if p["spec"].get("nodeName") and p["metadata"]["namespace"] == NAMESPACE:
                bound[(p["metadata"].get("labels") or {}).get(GROUP_LABEL, "")] += 1
        now = time.monotonic()
        with self.gangs_lock:
            for name, (size, since) in list(self.gangs.items()):
                if bound[name] >= size:
                    if since is None:
                        self.gangs[name] = (size, now)
                    elif now - since > 5:
                        del self.gangs[name]  # no fault touches it from now on
                        self.obs.forget_gang(NAMESPACE, name)
                        self.deleting.add(name)
                elif since is not None:
                    self.gangs[name] = (size, None)
        for name in list(self.deleting):
            if self.delete_gang(name):
                self.deleting.discard(name)
                self.deleted += 1

    def delete_gang(self, name: str) -> bool:
        """Delete the gang's pods and PodGroup; False (tried again next tick) if the API refused."""
        return self.kubectl(
            "delete", "pods", "-n", NAMESPACE, "-l", f"{GROUP_LABEL}={name}", "--grace-period=0", "--force"
        ) and self.kubectl("delete", "podgroup", "-n", NAMESPACE, name, "--ignore-not-found")

    # -------------------------------------------------------------- faults

    def fault(self, kind: str) -> bool:
        c = self.cluster
        if kind == "leader-kill":
            leader = self.wait_leader(10)
            if leader is None:
                return False
            self.replicas[leader].kill()
            self.restart(leader)
            return True
        if kind == "apiserver-restart":
            c.restart_apiserver(down=self.rng.uniform(0, 3), graceful=self.rng.random() < 0.5)
            return True
        if kind == "etcd-restart":
            c.restart_etcd(down=self.rng.uniform(0, 3), graceful=self.rng.random() < 0.5)
            return True
        if kind == "node-delete":
            up = [n for n in self.node_names if n not in self.nodes_down]
            if len(up) <= 2:
                return False
            name = self.rng.choice(up)
            if not self.kubectl("delete", "node", name, "--wait=false"):
                return False
            self.nodes_down[name] = time.monotonic() + self.rng.uniform(3, 8)
            victims = [p for p in self.obs.last_pods if p["spec"].get("nodeName") == name]
            return self.replace_pods(victims)
        if kind == "pod-delete":
            bound = [
                p for p in self.obs.last_pods if p["spec"].get("nodeName") and p["metadata"]["namespace"] == NAMESPACE
            ]
            return bool(bound) and self.replace_pods([self.rng.choice(bound)])
        if kind == "bind-500":
            leader = self.wait_leader(10)
            if leader is None:
                return False
            standby = "b" if leader == "a" else "a"
            self.restart(standby, {FAILPOINTS_ENV: BIND_FAILPOINTS})
            self.wait_ready(standby)
            self.replicas[leader].stop()  # a clean stop releases the lease: the armed standby takes over
            self.replicas[leader].env = {}
            self.replicas[leader].start(wait_ready=False)
            return True
        raise ValueError(kind)

    def wait_ready(self, name: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.replicas[name].get("/readyz")[0] != 200:
            time.sleep(0.2)

    def replace_pods(self, pods: list[dict[str, Any]]) -> bool:
        """Force-delete the pods and create them again (their controller would).
        Both steps are retried through an API server restart; a pod already gone
        (deleted by an earlier fault, say) is created again all the same. Only a
        gang the workload is not deleting is touched (nothing would own its pods)."""
        with self.gangs_lock:
            pods = [p for p in pods if (p["metadata"].get("labels") or {}).get(GROUP_LABEL, "") in self.gangs]
            if not pods:
                return True
            for p in pods:
                self.obs.disrupt(p["metadata"]["namespace"], p["metadata"]["labels"][GROUP_LABEL])
            names = [p["metadata"]["name"] for p in pods]
            fresh = []
            for p in pods:
                group = p["metadata"]["labels"][GROUP_LABEL]
                index = int(p["metadata"]["name"].rsplit("-", 1)[1])
                cpu = p["spec"]["containers"][0]["resources"]["requests"]["cpu"]
                fresh.append(gang_pod(NAMESPACE, group, index, cpu=cpu))
            delete = ("delete", "pods", "-n", NAMESPACE, *names, "--grace-period=0", "--force", "--ignore-not-found")
            if not self.retry(lambda: self.kubectl(*delete)):
                return False  # nothing deleted for sure; nothing lost
            if self.retry(lambda: self.apply(fresh)):
                return True
            # The soak's own failure, not troupe's: the gang can never be whole again.
            groups = sorted({p["metadata"]["labels"][GROUP_LABEL] for p in pods})
            print(f"  soak: could not create {', '.join(names)} again; gangs {groups} no longer observed", flush=True)
            for group in groups:
                self.obs.forget_gang(NAMESPACE, group)
                self.gangs.pop(group, None)
                self.deleting.add(group)
            return False

    def retry(self, attempt: Any, seconds: float = 60.0) -> bool:
        deadline = time.monotonic() + seconds
        while not attempt():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.5)
        return True

    def readd_nodes(self, force: bool = False) -> None:
        now = time.monotonic()
        for name, when in list(self.nodes_down.items()):
            if (force or now >= when) and self.apply([node_body(name)]):
                del self.nodes_down[name]

    # ---------------------------------------------------------------- run

    def run(self) -> int:
        a = self.args
        c = self.cluster
        print(f"soak: {a.minutes:g} min, a fault every ~{a.fault_every:g}s, seed {a.seed}; logs in {self.workdir}")
        c.start(timeout=90)
        c.kubectl("apply", "-f", str(ROOT / "crds"), "-f", str(ROOT / "manifests"), timeout=120)
        c.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s", timeout=90)
        c.kubectl("create", "namespace", NAMESPACE)
        self.node_names = [f"node-{i}" for i in range(a.nodes)]
        self.apply([node_body(n) for n in self.node_names])
        for name in ("a", "b"):
            self.replicas[name] = TroupeProcess(c.scheduler_kubeconfig, self.workdir, config=CONFIG, name=name)
            self.replicas[name].start()
        self.obs.start()
        worker = threading.Thread(target=self.workload, name="workload", daemon=True)
        worker.start()
        t0 = time.monotonic()
        end = t0 + a.minutes * 60
        next_fault = t0 + a.fault_every
        next_report = t0 + 30
        try:
            while time.monotonic() < end:
                self.supervise()
                self.readd_nodes()
                now = time.monotonic()
                if now >= next_fault:
                    kind = self.rng.choice(FAULTS)
                    try:
                        ok = self.fault(kind)
                    except Exception as exc:  # noqa: BLE001 - a fault that could not be made is counted, not fatal
                        print(f"  fault {kind} could not be made: {exc}", flush=True)
                        ok = False
                    (self.survived if ok else self.failed_faults)[kind] += 1
                    next_fault = time.monotonic() + self.rng.uniform(0.5, 1.5) * a.fault_every
                if now >= next_report:
                    self.progress(now - t0)
                    next_report = now + 30
                time.sleep(0.5)
            print("soak: faults stop; waiting for every pod to be bound", flush=True)
            self.stop.set()
            worker.join(60)
            self.readd_nodes(force=True)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                self.supervise()
                left = self.obs.final_check(timeout=5)
                if not left:
                    break
            else:
                left = self.obs.final_check(timeout=1)
            if left:
                self.obs.violation(f"{len(left)} pod(s) left unbound at the end: {', '.join(left[:10])}")
        finally:
            self.stop.set()
            self.obs.stop()
            for p in self.replicas.values():
                p.kill()
            c.stop()
        return self.report(time.monotonic() - t0)

    def progress(self, elapsed: float) -> None:
        print(
            f"  {elapsed / 60:5.1f} min  faults {sum(self.survived.values()):3d}  "
            f"pods bound {len(self.obs.bound_uids):5d}  gangs active {len(self.gangs):2d}  "
            f"created {self.created}  replica exits {self.replica_exits}  "
            f"violations {len(self.obs.violations)}",
            flush=True,
        )

    def report(self, elapsed: float) -> int:
        print()
        print("| fault | survived | could not be made |\n| --- | --- | --- |")
        for kind in FAULTS:
            print(f"| {kind} | {self.survived[kind]} | {self.failed_faults[kind]} |")
        print()
        print("| measure | value |\n| --- | --- |")
        rows = [
            ("duration", f"{elapsed / 60:.1f} min"),
            ("faults survived", sum(self.survived.values())),
            ("gangs created / deleted", f"{self.created} / {self.deleted}"),
            ("pods bound", len(self.obs.bound_uids)),
            ("replica exits (restarted)", self.replica_exits),
            ("observations (failed polls)", f"{self.obs.observations} ({self.obs.poll_failures})"),
            ("pods seen unbound in an older list, then on their node again", self.obs.stale_reads),
            ("longest partial gang", f"{self.obs.max_partial_seconds:.1f} s"),
            ("invariant violations", len(self.obs.violations)),
        ]
        for k, v in rows:
            print(f"| {k} | {v} |")
        for v in self.obs.violations:
            print(f"VIOLATION {v}")
        print(f"troupe logs: {self.workdir}")
        return 1 if self.obs.violations else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="how long faults go on (30)")
    parser.add_argument("--fault-every", type=float, default=5.0, help="mean seconds between faults (5)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: the clock)")
    parser.add_argument("--nodes", type=int, default=6, help=f"nodes of {NODE_CPU} CPU (6)")
    parser.add_argument("--gangs", type=int, default=10, help="gangs kept alive at once (10)")
    parser.add_argument(
        "--partial-grace",
        type=float,
        default=75.0,
        help="seconds a gang may be seen bound below minCount (binds are retried through an outage for 60 s) (75)",
    )
    args = parser.parse_args(argv)
    if args.seed is None:
        args.seed = int(time.time())
    return Soak(args).run()


if __name__ == "__main__":
    sys.exit(main())
