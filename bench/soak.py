"""Soak: randomized faults for a bounded time while gangs and trees keep arriving (issues 14, 34, 44).

    python -m bench.soak --minutes 30 [--seed N] [--fault-every 5]

Not part of CI or `make test`. One control plane of its own (etcd +
kube-apiserver, hack/localcluster.py, with crds/compat/), two troupe replicas
with leader election (short leases) and reservations after 3 s of
starvation, a steady stream of gangs from every group source that has no
controller to run (troupe's PodGroups, scheduler-plugins' and Volcano's
PodGroups, Kueue's plain pod groups; each gang deleted a few seconds after it
is fully bound, so the cluster stays small), about `--trees` trees of
troupe's CompositePodGroups beside them (deleted the same way), and every
few seconds a fault drawn at random:

  leader-kill        SIGKILL the leader; start it again (as its Deployment would)
  apiserver-restart  kube-apiserver stopped (SIGTERM or SIGKILL), down 0-3 s, started again
  etcd-restart       etcd stopped (SIGTERM or SIGKILL), down 0-3 s, started again
  node-delete        a node deleted; its pods force-deleted (as the PodGC would) and
                     created again (as their controller would); the node back 3-8 s later
  pod-delete         a bound pod of a gang or tree force-deleted and created again
  bind-500           the standby restarted with TROUPE_FAILPOINTS bind-500 (every 3rd
                     bind attempt answers 500) and bind-lost (every 4th bind lands but
                     its answer is lost), then made leader by a clean stop of the
                     leader; armed until that replica is next restarted

The trees (`scheduling.troupe.dev/v1alpha2` CompositePodGroups, leaf
PodGroups naming their parent, pods of 100-300m): half leader+workers (a
root gang of minGroupCount 2 over a leader PodGroup, gang minCount 1, and a
workers PodGroup, gang minCount 1-4; the root in one zone or rack, or
anywhere), half nested (depth 2-4 with the PodGroups, CompositePodGroups of
1-3 children, gangs of a random minGroupCount or basic, leaves of 1-3 pods,
gangs of all their pods or basic, about 8 pods; some levels with a topology
key, zone or rack above, rack or host below). Nodes node-<i> are in rack
r<i//2> of zone z<i//4>. Every fault applies to trees as to gangs.

Besides the stream, starving gangs: long-running holder pods (1 CPU, 20-60 s)
keep a little of every node busy, and gangs of two pods that each need
nearly a whole node (of any source) cannot fit while they run. They starve
past starvationSeconds and get a reservation (their pods nominated); then,
by a plan drawn when each is made, the soak deletes the group (its PodGroup,
or every pod of a Kueue group) or one member pod (created again 15-25 s
later, as its controller would) while it starves, or leaves it to bind. The
pods of a deleted PodGroup stay (they wait for a group that is gone) until
the soak deletes them after the check. Half the starving units are
trees (`--trees` 0: none), two BIG_CPU pods each, leader+workers or
root (gang 2, in one zone or not) -> {mid (gang 1) -> leaf, leaf}; their
plans: a member pod deleted (created again 15-25 s later), a leaf PodGroup,
the CompositePodGroup below the root, or the root deleted while they
starve, or left to bind; what is left of a tree is deleted after the check.

A replica that exits by itself is started again and counted (a leader that
cannot renew its lease through an outage exits, as kube-scheduler does).
hack/invariants.py checks at every observation: no pod bound twice, no gang
bound below minCount for longer than a bind retry takes, no tree bound below
minGroupCount at any level for as long (a CompositePodGroup with pods bound
under it has minGroupCount children bound, each by its own rule), no node
overcommitted, no room held (`status.nominatedNodeName`) for a group whose
PodGroup is gone or that has fewer pods than minCount, nor for a tree member
whose ancestor CompositePodGroup or root is gone or whose tree is no longer
ready (short of minGroupCount ready children), past a grace; and (with
--nodepools, on by default: a Karpenter NodePool per zone, no Karpenter,
each limited to 6 cpu so that a starving unit is refused new nodes and
reserved for, while the stream's units ask for nodes that never come) no
pod that stands in for a unit waiting for new nodes outlives its need by
more than 90 s, none left at the end. At the
end every pod must be bound, no pod nominated for a group that is gone, and
the leader's reservation gauges 0 once nothing is pending. Prints a
progress line every 30 s and final tables (faults, scenarios, trees created
and fully bound by shape, group status writes per source); exits 1 on any
violation.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "hack"))
from invariants import (  # noqa: E402
    COMPOSITE,
    COMPOSITE_API,
    COMPOSITE_RESOURCE,
    SOURCES,
    Observer,
    TreeNode,
    TreeShape,
    gang_objects,
    gang_pod,
    pod_gang,
    tree_objects,
)
from localcluster import LocalCluster  # noqa: E402
from troupe_process import FAILPOINTS_ENV, TroupeProcess  # noqa: E402

from .e2e_kube import Credentials  # noqa: E402
from .soak_metrics import ApiServerPatches, ReplicaCounters  # noqa: E402
from .soak_watch import GroupWatch  # noqa: E402

STARVATION = 3  # Reservation's starvationSeconds: reservations happen within the run
# With --nodepools: a Karpenter NodePool per zone and no Karpenter. Units that
# wait ask for nodes (stand-in pods) that never come: their stand-ins are made,
# time out after this, are asked elsewhere, and must all go with the need.
CAPACITY_TIMEOUT = 20
# Each NodePool's cpu limit: room to ask for the stream's units (at most 1.5
# cpu each), never for a starving one (2 × BIG_CPU), which CapacityRequest
# then refuses, so Reservation holds room for it as without NodePools.
NODEPOOL_CPU_LIMIT = "6"
KARPENTER_DIR = Path(
    os.environ.get("TROUPE_KARPENTER_DIR")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "troupe" / "karpenter-v1.15.0"
)
CONFIG = f"""
apiVersion: scheduling.troupe.dev/v1alpha1
kind: SchedulerConfiguration
leaderElection:
  leaderElect: true
  leaseDuration: 3s
  renewDeadline: 2s
  retryPeriod: 250ms
profiles:
- schedulerName: troupe-scheduler
  pluginConfig:
  - name: Reservation
    args: {{starvationSeconds: {STARVATION}}}
  - name: CapacityRequest
    args: {{timeoutSeconds: {CAPACITY_TIMEOUT}}}
"""
NAMESPACE = "soak"
FAULTS = ("leader-kill", "apiserver-restart", "etcd-restart", "node-delete", "pod-delete", "bind-500")
# Faults after which troupe cannot write for a while (no leader, or no API):
# a group seen gone gets its release grace again from the end of the fault.
STALLING_FAULTS = frozenset(("leader-kill", "apiserver-restart", "etcd-restart", "bind-500"))
BIND_FAILPOINTS = "bind-500=3,bind-lost=4"
NODE_CPU = 4
# The stream's sources, troupe's own twice as often as each of the others.
STREAM_SOURCES = ("troupe", "troupe", "scheduler-plugins", "volcano", "kueue")
PREFIX = {"troupe": "g", "scheduler-plugins": "sp", "volcano": "vc", "kueue": "kq"}
GANG_LABEL = "soak.troupe.dev/gang"  # on every soak gang's pods, whatever its source links them by
HOLDER_LABEL = "soak.troupe.dev/holder"
HOLDER_CPU = "1"
BIG_CPU = "3500m"  # more than a node with a holder on it has free
PLANS = ("delete-group", "delete-group", "delete-member", "keep")
TREE = "tree"  # the id's source of a tree of troupe's kinds (its name: its root's)
# A starving tree's plans; delete-mid only where the tree has a CompositePodGroup below its root.
TREE_PLANS = ("delete-member", "delete-leaf", "delete-mid", "delete-root", "keep")
ZONE_KEY, RACK_KEY, HOST_KEY = "topology.kubernetes.io/zone", "soak.troupe.dev/rack", "kubernetes.io/hostname"
TOPOLOGY_KEYS = (ZONE_KEY, RACK_KEY, HOST_KEY)  # coarsest first: a tree's keys get finer going down
MAX_TREE_PODS = 8  # a nested tree's pods, about
WRITES = "troupe_group_status_writes_total"
ATTEMPTS = "scheduler_schedule_attempts_total"
DECISIONS = "troupe_podgroup_decisions_total"
RESERVATION_GAUGES = (
    ("troupe_reserved_pods", {}),
    ("troupe_reserved_room", {"resource": "cpu"}),
    ("troupe_reserved_room", {"resource": "memory"}),
    ("troupe_reservation_oldest_age_seconds", {}),
)


def node_body(name: str) -> dict[str, Any]:
    """node-<i>: in rack r<i // 2> of zone z<i // 4> (racks nest in zones), for the trees' topology keys."""
    alloc = {"cpu": str(NODE_CPU), "memory": "32Gi", "pods": "110"}
    i = int(name.rsplit("-", 1)[1])
    labels = {HOST_KEY: name, RACK_KEY: f"r{i // 2}", ZONE_KEY: f"z{i // 4}"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {"capacity": alloc, "allocatable": alloc},
    }


def holder_body(name: str) -> dict[str, Any]:
    pod = gang_pod(NAMESPACE, name, 0, cpu=HOLDER_CPU)  # a lone pod: unlinked below
    pod["metadata"] = {"name": name, "namespace": NAMESPACE, "labels": {HOLDER_LABEL: "true"}}
    return pod


def marked(objects: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """The soak's label on the gang's pods: one selector for every source."""
    for o in objects:
        if o["kind"] == "Pod":
            o["metadata"].setdefault("labels", {})[GANG_LABEL] = name
    return objects


def leader_workers(root: str, workers: int, key: str | None = None, size: int | None = None) -> TreeShape:
    """root (gang, minGroupCount 2) -> <root>-leader (gang minCount 1, 1 pod) + <root>-workers (gang
    minCount `workers`, as many pods)."""
    return TreeShape(
        root,
        {root: TreeNode(None, 2, key=key)},
        {f"{root}-leader": TreeNode(root, 1, 1), f"{root}-workers": TreeNode(root, workers, size or workers)},
    )


def nested_tree(rng: random.Random, root: str) -> TreeShape:
    """A random tree of depth 2-4 (the PodGroups included): CompositePodGroups
    of 1-3 children (the root 2-3), each a gang of a random minGroupCount or
    basic; leaves of 1-3 pods, gangs of all their pods or basic; about
    MAX_TREE_PODS pods. Some levels have a topology key, each finer than the
    one above it (a CompositePodGroup zone or rack, a PodGroup rack or host)."""
    depth = rng.randint(2, 4)
    composites: dict[str, TreeNode] = {}
    leaves: dict[str, TreeNode] = {}
    budget = MAX_TREE_PODS

    def key_below(rank: int, finest: int) -> tuple[str | None, int]:
        if rank < finest and rng.random() < 0.12:
            r = rng.randint(rank + 1, finest)
            return TOPOLOGY_KEYS[r], r
        return None, rank

    def leaf(name: str, parent: str, rank: int) -> None:
        nonlocal budget
        size = max(1, min(rng.randint(1, 3), budget))
        budget -= size
        key, _ = key_below(max(rank, 0), 2)  # a rack or a host, not a zone of its own
        leaves[name] = TreeNode(parent, None if rng.random() < 0.2 else size, size, key)

    def composite(name: str, parent: str | None, level: int, rank: int) -> None:
        key, rank = key_below(rank, 1)
        n = rng.randint(2, 3) if parent is None else rng.randint(1, 2)
        if budget <= 2:
            n = 1
        minimum = None if rng.random() < 0.2 else rng.randint(1, n)
        composites[name] = TreeNode(parent, minimum, key=key)  # before its children: parents first
        for i in range(n):
            child = f"{name}-{'abc'[i]}"
            if level + 1 < depth and (i == 0 or (budget > 2 and rng.random() < 0.4)):
                composite(child, name, level + 1, rank)
            else:
                leaf(child, name, rank)

    composite(root, None, 1, -1)
    return TreeShape(root, composites, leaves)


def starving_tree(rng: random.Random, root: str) -> TreeShape:
    """Two pods of BIG_CPU, one per leaf: a leader+workers tree, or
    root (gang 2, in one zone or not) -> {<root>-m (gang 1) -> <root>-m-a, <root>-c}."""
    if rng.random() < 0.5:
        return leader_workers(root, 1)
    key = ZONE_KEY if rng.random() < 0.5 else None
    return TreeShape(
        root,
        {root: TreeNode(None, 2, key=key), f"{root}-m": TreeNode(root, 1)},
        {f"{root}-m-a": TreeNode(f"{root}-m", 1, 1), f"{root}-c": TreeNode(root, 1, 1)},
    )


def tree_kind(shape: TreeShape) -> str:
    """How the report names the tree's shape."""
    keyed = any(n.key for n in (*shape.composites.values(), *shape.leaves.values()))
    lw = set(shape.leaves) == {f"{shape.root}-leader", f"{shape.root}-workers"}
    return ("leader+workers" if lw else f"nested, depth {shape.depth()}") + (", topology" if keyed else "")


GangId = tuple[str, str]  # source, name (a tree: TREE, its root's name)


@dataclass
class SoakGang:
    source: str
    name: str
    size: int
    cpu: str
    created_at: float
    plan: str | None = None  # a starving gang's: delete-group, delete-member or keep; None: the stream's
    done: bool = False  # the plan carried out (or given up: the gang bound first, or the run ended)
    bound_since: float | None = None
    ever_bound: bool = False
    nominated_at: float | None = None  # first seen with a pod nominated (a reservation)
    act_at: float | None = None  # when to carry out the plan
    recreate: dict[str, Any] | None = None  # a deleted member, to be created again at recreate_at
    recreate_at: float = 0.0
    tree: TreeShape | None = None  # a tree of troupe's kinds (source TREE, name its root's, size its pods)

    @property
    def id(self) -> GangId:
        return self.source, self.name

    @property
    def kind(self) -> str:
        return "gang" if self.tree is None else "tree"

    def pod(self, index: int, group: str | None = None) -> dict[str, Any]:
        """Its pod `index` (of its leaf `group`, a tree's), as its controller would create it (again)."""
        if self.tree is not None:
            return marked([gang_pod(NAMESPACE, group or "", index, cpu=self.cpu)], self.name)[0]
        pod = gang_pod(NAMESPACE, self.name, index, cpu=self.cpu, source=self.source, size=self.size)
        return marked([pod], self.name)[0]

    def fresh(self, pod: dict[str, Any]) -> dict[str, Any]:
        """`pod` (of this gang or tree) as its controller would create it again."""
        index = int(pod["metadata"]["name"].rsplit("-", 1)[1])
        return self.pod(index, (pod_gang(pod) or ("", ""))[1])

    def objects(self) -> list[dict[str, Any]]:
        """What the soak applies: the group objects, then the pods; a tree's all
        carry the soak's label (deleted by it)."""
        if self.tree is None:
            return marked(gang_objects(NAMESPACE, self.name, self.size, cpu=self.cpu, source=self.source), self.name)
        objects = tree_objects(NAMESPACE, self.tree, cpu=self.cpu)
        for o in objects:
            o["metadata"].setdefault("labels", {})[GANG_LABEL] = self.name
        return objects


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.workdir = Path(tempfile.mkdtemp(prefix="troupe-soak-"))
        # durable: etcd is SIGKILLed, it must keep what it acknowledged; no
        # controller manager: the soak makes no Jobs (and it would share the 2 cores)
        self.cluster = LocalCluster(durable=True, controller_manager=False)
        self.watch: GroupWatch | None = None
        self.api_patches: ApiServerPatches | None = None
        self.obs = Observer(
            self.cluster,
            partial_grace=args.partial_grace,
            interval=1.0,
            selector=None,  # every pod: holders count on their nodes, every source's gangs are seen
            reservations=True,
            live_groups=lambda: self.watch.live() if self.watch is not None else None,
            release_grace=args.release_grace,
        )
        self.replicas: dict[str, TroupeProcess] = {}
        self.counters = ReplicaCounters((WRITES, ATTEMPTS, DECISIONS))
        self.survived: Counter[str] = Counter()
        self.failed_faults: Counter[str] = Counter()
        self.replica_exits = 0
        self.gangs: dict[GangId, SoakGang] = {}
        self.deleting: set[GangId] = set()  # gangs done with, deleted (again) each tick until the API agrees
        self.orphans: dict[GangId, float] = {}  # PodGroup deleted while starving -> when; its pods still exist
        # The workload thread deletes gangs; faults replace their pods: never both at once.
        self.gangs_lock = threading.Lock()
        self.created: Counter[str] = Counter()
        self.tree_created: Counter[str] = Counter()  # by tree_row
        self.tree_bound: Counter[str] = Counter()  # trees seen fully bound, by tree_row
        self.starving_created: Counter[str] = Counter()
        self.scenarios: Counter[str] = Counter()
        self.kubectl_errors: set[str] = set()
        self.deleted = 0
        self.holders: dict[str, float] = {}  # holder pod -> when to delete it
        self.holders_created = 0
        self.nodes_down: dict[str, float] = {}  # name -> when to add it back
        self.next_starving = 0.0
        self.draining = threading.Event()  # no new work; plans not yet carried out are given up
        self.leaked: list[str] = []
        self.leaked_count: int | None = None
        self.end_gauges: dict[str, float | None] = {}
        self.end_pending: float | None = None
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

    def force_delete(self, *selector_or_names: str) -> bool:
        return self.kubectl(
            "delete", "pods", "-n", NAMESPACE, *selector_or_names, "--grace-period=0", "--force", "--ignore-not-found"
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

    def scrape(self) -> None:
        for p in self.replicas.values():
            self.counters.scrape(p)

    def last_scrape(self, name: str) -> None:
        """What the replica counted, before the soak kills or stops it (a few
        tries: a busy replica may be slow to answer)."""
        for _ in range(3):
            if self.counters.scrape(self.replicas[name]) or self.replicas[name].returncode is not None:
                return

    def kill(self, name: str) -> None:
        self.last_scrape(name)
        self.replicas[name].kill()

    def restart(self, name: str, env: dict[str, str] | None = None) -> None:
        p = self.replicas[name]
        self.kill(name)
        p.env = dict(env or {})
        p.start(wait_ready=False)

    def supervise(self) -> None:
        """A replica that exited by itself is started again, as its Deployment would."""
        for p in self.replicas.values():
            if p.returncode is not None:
                self.replica_exits += 1
                p.env = {}
                p.start(wait_ready=False)

    def pods_of(self, gang: GangId) -> list[dict[str, Any]]:
        """The gang's (or tree's) pods in the last observation, by the soak's label."""
        return [
            p
            for p in self.obs.last_pods
            if p["metadata"]["namespace"] == NAMESPACE
            and (p["metadata"].get("labels") or {}).get(GANG_LABEL) == gang[1]
            and not p["metadata"].get("deletionTimestamp")
        ]

    # ----------------------------------------------------------- workload

    def workload(self) -> None:
        """Keep about `--gangs` gangs of the stream; delete each a few seconds
        after it is fully bound; the holders and the starving gangs beside them.
        A gang whose creation failed (the API server away) is applied again with
        the same objects until it exists whole: a retry under the same name with
        another size would meet the PodGroup's immutable spec."""
        n = 0
        pending: SoakGang | None = None
        objects: list[dict[str, Any]] = []
        while not self.stop.is_set():
            self.tick_gangs()
            self.tick_holders()
            self.tick_starving()
            self.tick_orphans()
            with self.gangs_lock:
                stream = Counter(g.kind for g in self.gangs.values() if g.plan is None)
            stream.update("tree" if gid[0] == TREE else "gang" for gid in self.deleting)
            if pending is None and not self.draining.is_set():
                if self.starving_due():  # first: the stream, ever short of a gang or two, would starve it
                    if self.args.trees and self.rng.random() < 0.5:
                        pending = self.new_tree(n, starving=True)
                    else:
                        source = self.rng.choice(tuple(SOURCES))
                        plan = self.rng.choice(PLANS)
                        pending = SoakGang(source, f"{PREFIX[source]}{n}", 2, BIG_CPU, time.monotonic(), plan=plan)
                    self.next_starving = time.monotonic() + self.rng.uniform(5, 15)
                elif stream["tree"] < self.args.trees:  # before the gangs: the stream is ever short of one
                    pending = self.new_tree(n, starving=False)
                elif stream["gang"] < self.args.gangs:
                    source = self.rng.choice(STREAM_SOURCES)
                    cpu = f"{self.rng.choice((100, 200, 300))}m"
                    pending = SoakGang(source, f"{PREFIX[source]}{n}", self.rng.randint(2, 5), cpu, time.monotonic())
                if pending is not None:
                    n += 1
                    objects = pending.objects()
                    if pending.tree is not None:
                        self.obs.expect_tree(NAMESPACE, pending.tree)
                    else:
                        self.obs.expect_gang(NAMESPACE, pending.name, pending.size, source=pending.source)
            if pending is not None and self.apply(objects):
                pending.created_at = time.monotonic()
                with self.gangs_lock:
                    self.gangs[pending.id] = pending
                (self.created if pending.plan is None else self.starving_created)[pending.source] += 1
                if pending.tree is not None:
                    self.tree_created[self.tree_row(pending)] += 1
                pending = None
            self.stop.wait(0.3)

    def new_tree(self, n: int, starving: bool) -> SoakGang:
        """A tree of the stream (leader+workers or nested, 100-300m pods) or a
        starving one (two BIG_CPU pods) with its plan."""
        root = f"t{n}"
        if starving:
            shape = starving_tree(self.rng, root)
            plans = [p for p in TREE_PLANS if p != "delete-mid" or len(shape.composites) > 1]
            plan: str | None = self.rng.choice(plans)
            cpu = BIG_CPU
        elif self.rng.random() < 0.5:
            key = self.rng.choice((None, None, ZONE_KEY, RACK_KEY))
            shape, plan, cpu = leader_workers(root, self.rng.randint(1, 4), key), None, ""
        else:
            shape, plan, cpu = nested_tree(self.rng, root), None, ""
        cpu = cpu or f"{self.rng.choice((100, 200, 300))}m"
        return SoakGang(TREE, root, shape.pods, cpu, time.monotonic(), plan=plan, tree=shape)

    @staticmethod
    def tree_row(g: SoakGang) -> str:
        assert g.tree is not None
        return ("starving " if g.plan is not None else "") + tree_kind(g.tree)

    def forget(self, g: SoakGang) -> None:
        """The observer stops expecting the gang or tree (deleted on purpose)."""
        if g.tree is not None:
            self.obs.forget_tree(NAMESPACE, g.name)
        else:
            self.obs.forget_gang(NAMESPACE, g.name, source=g.source)

    def starving_due(self) -> bool:
        starving = sum(1 for g in self.gangs.values() if g.plan is not None and g.bound_since is None)
        return self.args.starving > 0 and starving < self.args.starving and time.monotonic() >= self.next_starving

    def tick_gangs(self, delete: bool = True) -> None:
        """Note the gangs and trees seen fully bound; delete each 5 s after (with `delete`)."""
        bound: Counter[str] = Counter()  # by the soak's label: a gang's name, or a tree's root
        for p in self.obs.last_pods:
            name = (p["metadata"].get("labels") or {}).get(GANG_LABEL)
            if name is not None and p["spec"].get("nodeName") and p["metadata"]["namespace"] == NAMESPACE:
                bound[name] += 1
        now = time.monotonic()
        with self.gangs_lock:
            for gid, g in list(self.gangs.items()):
                if bound[g.name] >= g.size and g.recreate is None:
                    if g.bound_since is None:
                        g.bound_since = now
                        if g.plan is not None and not g.ever_bound:
                            self.count_bound(g)
                        if g.tree is not None and not g.ever_bound:
                            self.tree_bound[self.tree_row(g)] += 1
                        g.ever_bound = True
                    elif now - g.bound_since > 5 and delete:
                        del self.gangs[gid]  # no fault touches it from now on
                        self.forget(g)
                        self.deleting.add(gid)
                elif g.bound_since is not None:
                    g.bound_since = None
        for gid in list(self.deleting) if delete else ():
            if self.delete_gang(gid):
                self.deleting.discard(gid)
                self.deleted += 1

    def count_bound(self, g: SoakGang) -> None:
        if g.plan == "keep":
            self.scenarios[f"starving {g.kind} left to bind: bound"] += 1
        elif g.done and g.plan == "delete-member":
            self.scenarios[f"starving {g.kind} bound after its member came back"] += 1
        elif not g.done:
            self.scenarios[f"starving {g.kind} bound before its {g.plan} (not carried out)"] += 1
            g.done = True

    def delete_gang(self, gid: GangId) -> bool:
        """Delete the gang's pods and group object (a tree's: every PodGroup and
        CompositePodGroup left); False (tried again next tick) if the API refused."""
        name = gid[1]
        if not self.force_delete("-l", f"{GANG_LABEL}={name}"):
            return False
        if gid[0] == TREE:
            kinds = f"{SOURCES['troupe'].resource},{COMPOSITE_RESOURCE}"
            return self.kubectl(
                "delete", kinds, "-n", NAMESPACE, "-l", f"{GANG_LABEL}={name}", "--ignore-not-found", "--wait=false"
            )
        source = SOURCES[gid[0]]
        return source.resource is None or self.kubectl(
            "delete", source.resource, "-n", NAMESPACE, name, "--ignore-not-found", "--wait=false"
        )

    def tick_holders(self) -> None:
        """Keep `--holders` long-running lone pods; none once draining."""
        now = time.monotonic()
        for name, until in list(self.holders.items()):
            if (now >= until or self.draining.is_set()) and self.force_delete(name):
                del self.holders[name]
        if self.draining.is_set():
            return
        while len(self.holders) < self.args.holders:
            name = f"hold-{self.holders_created}"
            if not self.apply([holder_body(name)]):
                return
            self.holders_created += 1
            self.holders[name] = now + self.rng.uniform(20, 60)

    def tick_starving(self) -> None:
        """Carry out each starving gang's plan: once it is seen nominated (a
        reservation), after 0-3 s; or after 30 s of waiting without one."""
        now = time.monotonic()
        with self.gangs_lock:
            gangs = [g for g in self.gangs.values() if g.plan is not None]
        for g in gangs:
            if g.recreate is not None:
                if (now >= g.recreate_at or self.draining.is_set()) and self.apply([g.recreate]):
                    g.recreate = None
                continue
            if g.plan == "keep" or g.done or g.ever_bound:
                continue
            if self.draining.is_set():
                g.done = True  # the run ends: let it bind
                self.scenarios[f"starving {g.kind}'s {g.plan} not carried out: the run ended"] += 1
                continue
            if g.nominated_at is None and any(
                (p.get("status") or {}).get("nominatedNodeName") for p in self.pods_of(g.id)
            ):
                g.nominated_at = now
                g.act_at = now + self.rng.uniform(0, 3)
            if g.act_at is None and now - g.created_at > 30:
                g.act_at = now
            if g.act_at is not None and now >= g.act_at:
                self.act(g, now)

    def act(self, g: SoakGang, now: float) -> None:
        state = "reserved" if g.nominated_at is not None else "waiting, no reservation seen"
        if g.tree is not None:
            self.act_tree(g, g.tree, now, state)
            return
        source = SOURCES[g.source]
        if g.plan == "delete-group":
            if source.resource is not None:
                if not self.kubectl("delete", source.resource, "-n", NAMESPACE, g.name, "--ignore-not-found"):
                    return  # again next tick
                self.orphans[g.id] = now  # its pods stay: checked, then deleted by tick_orphans
            elif not self.force_delete("-l", f"{GANG_LABEL}={g.name}"):  # Kueue: the group is its pods
                return
            with self.gangs_lock:
                self.gangs.pop(g.id, None)
            self.obs.forget_gang(NAMESPACE, g.name, source=g.source)
            self.scenarios[f"group deleted while starving ({state})"] += 1
            print(
                f"  {time.strftime('%H:%M:%S')} soak: {g.source} group {g.name} deleted while starving ({state})",
                flush=True,
            )
        else:  # delete-member
            index = self.rng.randrange(g.size)
            if not self.force_delete(f"{g.name}-{index}"):
                return
            self.obs.disrupt(NAMESPACE, g.name, seconds=300, source=g.source)
            g.recreate = g.pod(index)
            g.recreate_at = now + self.rng.uniform(15, 25)
            self.scenarios[f"member deleted while starving ({state})"] += 1
            print(
                f"  {time.strftime('%H:%M:%S')} soak: {g.source} gang {g.name}: pod {index} deleted while starving ({state})",
                flush=True,
            )
        g.done = True

    def act_tree(self, g: SoakGang, shape: TreeShape, now: float, state: str) -> None:
        """A starving tree's plan: a member pod deleted (created again 15-25 s
        later), or a leaf PodGroup, a CompositePodGroup below the root, or the
        root deleted (the rest left, checked, then deleted by tick_orphans)."""
        stamp = time.strftime("%H:%M:%S")
        if g.plan == "delete-member":
            leaf, index = self.rng.choice([(leaf, i) for leaf, n in shape.leaves.items() for i in range(n.size)])
            if not self.force_delete(f"{leaf}-{index}"):
                return
            self.obs.disrupt(NAMESPACE, leaf, seconds=300)
            g.recreate = g.pod(index, leaf)
            g.recreate_at = now + self.rng.uniform(15, 25)
            self.scenarios[f"tree member deleted while starving ({state})"] += 1
            print(f"  {stamp} soak: tree {g.name}: pod {leaf}-{index} deleted while starving ({state})", flush=True)
            g.done = True
            return
        if g.plan == "delete-leaf":
            what, resource, name = (
                "leaf PodGroup",
                SOURCES["troupe"].resource or "",
                self.rng.choice(list(shape.leaves)),
            )
        elif g.plan == "delete-mid":
            mids = [c for c in shape.composites if c != shape.root]
            what, resource, name = "CompositePodGroup below the root", COMPOSITE_RESOURCE, self.rng.choice(mids)
        else:  # delete-root
            what, resource, name = "root CompositePodGroup", COMPOSITE_RESOURCE, shape.root
        if not self.kubectl("delete", resource, "-n", NAMESPACE, name, "--ignore-not-found"):
            return  # again next tick
        self.orphans[g.id] = now  # the rest stays: checked, then deleted by tick_orphans
        with self.gangs_lock:
            self.gangs.pop(g.id, None)
        self.forget(g)
        self.scenarios[f"tree {what} deleted while starving ({state})"] += 1
        print(f"  {stamp} soak: tree {g.name}: {what} {name} deleted while starving ({state})", flush=True)
        g.done = True

    def tick_orphans(self) -> None:
        """Delete the pods of a deleted PodGroup once the observer has seen their
        room released (and had time to see it taken again), or well past the grace."""
        now = time.monotonic()
        for gid, since in list(self.orphans.items()):
            held = any((p.get("status") or {}).get("nominatedNodeName") for p in self.pods_of(gid))
            settled = now - since > 2 * self.args.release_grace and not held
            if not (settled or now - since > self.obs.release_grace_max + 5):
                continue
            if self.delete_gang(gid) if gid[0] == TREE else self.force_delete("-l", f"{GANG_LABEL}={gid[1]}"):
                del self.orphans[gid]

    def drained(self) -> bool:
        with self.gangs_lock:
            recreating = any(g.recreate is not None for g in self.gangs.values())
        return not (self.orphans or self.deleting or self.holders or recreating)

    # -------------------------------------------------------------- faults

    def fault(self, kind: str) -> bool:
        c = self.cluster
        if kind == "leader-kill":
            leader = self.wait_leader(10)
            if leader is None:
                return False
            self.restart(leader)
            return True
        if kind == "apiserver-restart":
            if self.api_patches is not None:
                self.api_patches.scrape()  # its counters restart with it
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
            holders = [p["metadata"]["name"] for p in victims if p["metadata"]["name"] in self.holders]
            if holders:  # as the PodGC would; tick_holders makes others
                self.force_delete(*holders)
            return self.replace_pods(victims)
        if kind == "pod-delete":
            bound = [
                p
                for p in self.obs.last_pods
                if p["spec"].get("nodeName") and p["metadata"]["namespace"] == NAMESPACE and pod_gang(p) is not None
            ]
            return bool(bound) and self.replace_pods([self.rng.choice(bound)])
        if kind == "bind-500":
            leader = self.wait_leader(10)
            if leader is None:
                return False
            standby = "b" if leader == "a" else "a"
            self.restart(standby, {FAILPOINTS_ENV: BIND_FAILPOINTS})
            self.wait_ready(standby)
            self.last_scrape(leader)  # (writes it flushes while stopping are not counted)
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
        gang the workload is not deleting is touched (nothing would own its pods).
        A tree's pod is its tree's (by the soak's label): the tree is excused."""
        with self.gangs_lock:
            by_name = {g.name: g for g in self.gangs.values()}
            gangs = {id(p): by_name.get((p["metadata"].get("labels") or {}).get(GANG_LABEL, "")) for p in pods}
            pods = [p for p in pods if gangs[id(p)] is not None]
            if not pods:
                return True
            fresh = []
            for p in pods:
                g = gangs[id(p)]
                assert g is not None
                source, group = pod_gang(p) or (g.source, g.name)
                self.obs.disrupt(NAMESPACE, group, source=source)  # a tree's leaf: the tree too
                fresh.append(g.fresh(p))
            names = [p["metadata"]["name"] for p in pods]
            if not self.retry(lambda: self.force_delete(*names)):
                return False  # nothing deleted for sure; nothing lost
            if self.retry(lambda: self.apply(fresh)):
                return True
            # The soak's own failure, not troupe's: the gang can never be whole again.
            lost = sorted({g.id for g in gangs.values() if g is not None})
            print(f"  soak: could not create {', '.join(names)} again; gangs {lost} no longer observed", flush=True)
            for gid in lost:
                g = self.gangs.pop(gid, None)
                if g is not None:
                    self.forget(g)
                self.deleting.add(gid)
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
        crds, compat = str(ROOT / "crds"), str(ROOT / "crds" / "compat")
        c.kubectl("apply", "-f", crds, "-f", compat, "-f", str(ROOT / "manifests"), timeout=120)
        c.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s", timeout=90)
        c.kubectl("create", "namespace", NAMESPACE)
        creds = Credentials.from_kubeconfig(c.admin_kubeconfig)
        resources = {s.name: f"/apis/{s.api_version}/podgroups" for s in SOURCES.values() if s.api_version}
        resources[COMPOSITE] = f"/apis/{COMPOSITE_API}/compositepodgroups"  # trees: which exist (and their writes)
        self.watch = GroupWatch(creds, resources).start()
        self.api_patches = api_patches = ApiServerPatches(creds, ("podgroups", "compositepodgroups"))
        self.node_names = [f"node-{i}" for i in range(a.nodes)]
        self.apply([node_body(n) for n in self.node_names])
        if a.nodepools:
            self.add_nodepools()
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
        next_scrape = next_api_scrape = t0
        try:
            while time.monotonic() < end:
                self.supervise()
                self.readd_nodes()
                now = time.monotonic()
                if now >= next_scrape:
                    self.scrape()
                    next_scrape = now + 2
                if now >= next_api_scrape:
                    api_patches.scrape()  # (the soak's restarts of it scrape it first)
                    next_api_scrape = now + 15
                if now >= next_fault:
                    kind = self.rng.choice(a.faults)
                    if kind in STALLING_FAULTS:
                        self.obs.fault_started()
                    try:
                        ok = self.fault(kind)
                    except Exception as exc:  # noqa: BLE001 - a fault that could not be made is counted, not fatal
                        print(f"  fault {kind} could not be made: {exc}", flush=True)
                        ok = False
                    if kind in STALLING_FAULTS:
                        self.obs.fault_made()
                    (self.survived if ok else self.failed_faults)[kind] += 1
                    next_fault = time.monotonic() + self.rng.uniform(0.5, 1.5) * a.fault_every
                if now >= next_report:
                    self.progress(now - t0)
                    next_report = now + 30
                time.sleep(0.5)
            print(
                "soak: faults stop; holders go; waiting for every gang to be bound and every deletion done", flush=True
            )
            self.draining.set()
            self.readd_nodes(force=True)
            deadline = time.monotonic() + 180
            left: list[str] = []
            while time.monotonic() < deadline:
                self.supervise()
                self.scrape()
                left = self.obs.final_check(timeout=5)
                if not left and self.drained():
                    break
            else:
                left = self.obs.final_check(timeout=1)
                if not self.drained():
                    print(
                        f"  soak: not drained: orphans {sorted(self.orphans)}, holders {len(self.holders)}", flush=True
                    )
            self.stop.set()
            worker.join(60)
            self.tick_gangs(delete=False)  # those bound since the workload's last look count as bound
            if left:
                self.obs.violation(f"{len(left)} pod(s) left unbound at the end: {', '.join(left[:10])}")
            self.end_reservations()
            self.end_stand_ins()
        finally:
            self.stop.set()
            self.obs.stop()
            self.scrape()
            if self.api_patches is not None:
                self.api_patches.scrape()
            if self.watch is not None:
                self.watch.stop()
            for p in self.replicas.values():
                p.kill()
            c.stop()
        return self.report(time.monotonic() - t0)

    def add_nodepools(self) -> None:
        """A NodePool per zone (its CRD from `make operators`' Karpenter build), and no Karpenter."""
        crd = KARPENTER_DIR / "crds" / "karpenter.sh_nodepools.yaml"
        if not crd.is_file():
            raise SystemExit(f"soak: --nodepools needs {crd}: run `make operators` (or pass --no-nodepools)")
        self.cluster.kubectl("apply", "--server-side", "-f", str(crd), timeout=120)
        self.cluster.kubectl("wait", "--for=condition=Established", "crd/nodepools.karpenter.sh", timeout=90)
        zones = sorted({node_body(n)["metadata"]["labels"][ZONE_KEY] for n in self.node_names})
        pools = [
            {
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodePool",
                "metadata": {"name": f"zone-{z}"},
                "spec": {
                    "limits": {"cpu": NODEPOOL_CPU_LIMIT},
                    "template": {
                        "metadata": {"labels": {ZONE_KEY: z}},
                        "spec": {
                            "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "none"},
                            "requirements": [],
                        },
                    },
                },
            }
            for z in zones
        ]
        self.apply(pools)

    def end_stand_ins(self) -> None:
        """The end invariant of autoscaling: no stand-in left once nothing waits
        (they go within the Observer's stand-in grace)."""
        deadline = time.monotonic() + self.obs.stand_in_grace + 30
        while time.monotonic() < deadline and (self.obs.poll() or True) and self.obs.stand_ins_left:
            time.sleep(2)
        if self.obs.stand_ins_left:
            self.obs.violation(
                f"{len(self.obs.stand_ins_left)} stand-in pod(s) left at the end: {', '.join(self.obs.stand_ins_left[:5])}"
            )

    def end_reservations(self) -> None:
        """The new end invariant: nothing pending, and no room held. No pod
        nominated for a group that is gone; the leader's reservation gauges 0
        once its queue is empty."""
        self.obs.poll()
        self.leaked = self.obs.leaked_nominations()
        for pod in self.leaked:
            self.obs.violation(f"leaked reservation at the end: pod {pod}")
        deadline = time.monotonic() + 60
        pending: float | None = None
        while time.monotonic() < deadline:
            self.supervise()
            leader = self.wait_leader(10)
            if leader is None:
                continue
            p = self.replicas[leader]
            pending = p.metric("scheduler_pending_pods")
            gauges = {_sample(n, labels): p.metric(n, **labels) for n, labels in RESERVATION_GAUGES}
            if (pending == 0 and not any(gauges.values())) or time.monotonic() > deadline - 1:
                self.end_gauges = gauges
                break
            time.sleep(1)
        self.end_pending = pending
        if pending is None or pending > 0:
            self.obs.violation(f"the leader reports {pending} pod(s) pending at the end (all should be bound or gone)")
        held = {k: v for k, v in self.end_gauges.items() if v}
        if held:
            self.obs.violation(f"leaked reservation at the end: the leader's gauges {held} with {pending} pending")
        self.leaked_count = len(self.leaked) + int(self.end_gauges.get("troupe_reserved_pods") or 0)

    def progress(self, elapsed: float) -> None:
        deleted_starving = sum(v for k, v in self.scenarios.items() if "while starving" in k)
        print(
            f"  {elapsed / 60:5.1f} min  faults {sum(self.survived.values()):3d}  "
            f"pods bound {len(self.obs.bound_uids):5d}  gangs active {len(self.gangs):2d}  "
            f"trees bound {sum(self.tree_bound.values())}/{sum(self.tree_created.values())}  "
            f"created {sum(self.created.values())}+{sum(self.starving_created.values())} starving  "
            f"deleted while starving {deleted_starving}  pods nominated {len(self.obs.nominated_uids)}  "
            f"replica exits {self.replica_exits}  violations {len(self.obs.violations)}",
            flush=True,
        )

    def report(self, elapsed: float) -> int:
        print()
        print("| fault | survived | could not be made |\n| --- | --- | --- |")
        for kind in FAULTS:
            print(f"| {kind} | {self.survived[kind]} | {self.failed_faults[kind]} |")
        print()
        print("| scenario | count |\n| --- | --- |")
        print(f"| holder pods (1 CPU, 20-60 s) | {self.holders_created} |")
        for name in sorted(self.scenarios):
            print(f"| {name} | {self.scenarios[name]} |")
        released = self.obs.release_seconds
        print(
            f"| room released after a group or member deletion (n, median / max s) | {len(released)}"
            + (f", {median(released):.1f} / {max(released):.1f} |" if released else " |")
        )
        print()
        self.report_trees()
        print()
        self.report_sources()
        print()
        print("| measure | value |\n| --- | --- |")
        writes = self.received()
        attempts = self.counters.total(ATTEMPTS) or 0.0
        decisions = self.counters.total(DECISIONS) or 0.0
        rows = [
            ("duration", f"{elapsed / 60:.1f} min"),
            ("faults survived", sum(self.survived.values())),
            (
                "gangs and trees created (stream + starving) / deleted",
                f"{sum(self.created.values())} + {sum(self.starving_created.values())} / {self.deleted}",
            ),
            ("pods bound", len(self.obs.bound_uids)),
            ("pods seen nominated (reservations)", len(self.obs.nominated_uids)),
            ("pods first seen bound while their PodGroup was gone", _listed(self.obs.bound_while_gone)),
            ("replica exits (restarted)", self.replica_exits),
            ("observations (failed polls)", f"{self.obs.observations} ({self.obs.poll_failures})"),
            ("metrics scrapes (failed)", f"{self.counters.scrapes} ({self.counters.failures})"),
            ("pods seen unbound in an older list, then on their node again", self.obs.stale_reads),
            ("longest partial gang", f"{self.obs.max_partial_seconds:.1f} s"),
            ("longest tree bound below minGroupCount (any level)", f"{self.obs.max_tree_partial_seconds:.1f} s"),
            ("trees bound below minGroupCount past the grace", self.obs.tree_partial_violations),
            (
                "room held for a gone group past the grace (during the run; of them tree members)",
                f"{self.obs.held_violations} ({self.obs.tree_held_violations})",
            ),
            ("leaked reservations at the end", _num(self.leaked_count)),
            (
                "stand-in pods seen (autoscaling; --nodepools) / left at the end",
                f"{self.obs.stands_ins_seen_text()}" if self.args.nodepools else "- (no NodePools)",
            ),
            ("leader at the end: pending pods / reservation gauges", self.end_summary()),
            (
                "group status PATCHes received (sent by troupe) / group decisions / schedule attempts (pods)",
                f"{_num(writes)} ({_num(self.counters.total(WRITES))}) / {decisions:.0f} / {attempts:.0f}",
            ),
            (
                "group status writes per decision / per attempt",
                f"{_ratio(writes, decisions)} / {_ratio(writes, attempts)}",
            ),
            ("invariant violations", len(self.obs.violations)),
        ]
        for k, v in rows:
            print(f"| {k} | {v} |")
        for v in self.obs.violations:
            print(f"VIOLATION {v}")
        for end in self.obs.held_ends:
            print(f"  held room ended: {end}")
        print(f"troupe logs: {self.workdir}")
        return 1 if self.obs.violations else 0

    def report_trees(self) -> None:
        """Trees by shape: created, and seen fully bound (every pod)."""
        print("| trees of troupe's CompositePodGroups | created | fully bound |\n| --- | --- | --- |")
        for row in sorted(self.tree_created):
            print(f"| {row} | {self.tree_created[row]} | {self.tree_bound[row]} |")
        print(f"| all | {sum(self.tree_created.values())} | {sum(self.tree_bound.values())} |")

    def end_summary(self) -> str:
        gauges = self.end_gauges
        if not gauges:
            return "n/a"
        return f"{_num(self.end_pending)} / " + ", ".join(f"{k} {_num(v)}" for k, v in gauges.items())

    def received(self, source: str | None = None) -> float | None:
        """Group object PATCHes kube-apiserver received, of one source (COMPOSITE:
        troupe's CompositePodGroups) or all."""
        if self.api_patches is None:
            return None
        groups = [s.api_group for s in SOURCES.values() if s.api_version and source in (None, s.name)]
        counts = [self.api_patches.patches(g) for g in groups]
        if source in (None, COMPOSITE):
            counts.append(self.api_patches.patches(COMPOSITE_API.split("/")[0], resource="compositepodgroups"))
        return None if None in counts else sum(c or 0.0 for c in counts)

    def report_sources(self) -> None:
        """Group status writes per source: the PATCHes kube-apiserver received
        and those troupe says it sent (its counter, summed over replicas and
        restarts), against the status changes the API server stored (the watch)."""
        watch = self.watch
        print(
            "| source | gangs (stream + starving) | status PATCHes received | troupe_group_status_writes_total (conditions + counts) "
            "| status changes stored | writes per change |\n| --- | --- | --- | --- | --- | --- |"
        )
        for s in SOURCES.values():
            gangs = f"{self.created[s.name]} + {self.starving_created[s.name]}"
            if s.api_version is None:
                print(f"| {s.name} | {gangs} | - (no group object) | - | - | - |")
                continue
            sent = self.counters.total(WRITES, source=s.api_group)
            split = ""
            if sent is not None:
                conditions = self.counters.total(WRITES, source=s.api_group, write="conditions")
                split = (
                    f" ({_num(conditions)} + {_num(self.counters.total(WRITES, source=s.api_group, write='counts'))})"
                )
            received = self.received(s.name)
            changes = watch.changes[s.name] if watch is not None else None
            gaps = f" ({watch.relists[s.name]} relists)" if watch is not None and watch.relists[s.name] else ""
            print(
                f"| {s.name} | {gangs} | {_num(received)} | {_num(sent)}{split} | {_num(changes)}{gaps} "
                f"| {_ratio(received, changes)} |"
            )
        # troupe counts its CompositePodGroup writes with its PodGroups' (one source label): "in troupe's".
        received = self.received(COMPOSITE)
        changes = watch.changes[COMPOSITE] if watch is not None else None
        gaps = f" ({watch.relists[COMPOSITE]} relists)" if watch is not None and watch.relists[COMPOSITE] else ""
        print(
            f"| troupe CompositePodGroups (trees) | {self.created[TREE]} + {self.starving_created[TREE]} "
            f"| {_num(received)} | (in troupe's) | {_num(changes)}{gaps} | {_ratio(received, changes)} |"
        )


def _listed(items: list[str]) -> str:
    return f"{len(items)}" + (f" ({', '.join(items[:6])}{', ...' if len(items) > 6 else ''})" if items else "")


def _sample(name: str, labels: dict[str, str]) -> str:
    return name + ("{" + ",".join(f"{k}={v}" for k, v in labels.items()) + "}" if labels else "")


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:g}"


def _ratio(a: float | None, b: float | None) -> str:
    return "n/a" if a is None or not b else f"{a / b:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="how long faults go on (30)")
    parser.add_argument("--fault-every", type=float, default=5.0, help="mean seconds between faults (5)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: the clock)")
    parser.add_argument(
        "--faults", default=",".join(FAULTS), help=f"the fault kinds to draw from, comma-separated ({','.join(FAULTS)})"
    )
    parser.add_argument("--nodes", type=int, default=6, help=f"nodes of {NODE_CPU} CPU (6)")
    parser.add_argument("--gangs", type=int, default=10, help="gangs of the stream kept alive at once (10)")
    parser.add_argument(
        "--trees", type=int, default=3, help="trees of the stream kept alive at once; 0: no trees, starving none (3)"
    )
    parser.add_argument(
        "--starving", type=int, default=2, help="starving gangs or trees at once (half of them trees), 0: none (2)"
    )
    parser.add_argument(
        "--holders", type=int, default=None, help="long-running holder pods (one per node; none without --starving)"
    )
    parser.add_argument(
        "--partial-grace",
        type=float,
        default=75.0,
        help="seconds a gang may be seen bound below minCount, a tree's CompositePodGroup below minGroupCount "
        "(binds are retried through an outage for 60 s) (75)",
    )
    parser.add_argument(
        "--nodepools",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="a Karpenter NodePool per zone (no Karpenter): waiting units make stand-in pods that never get "
        f"nodes, time out after {CAPACITY_TIMEOUT} s, and must all go (needs `make operators`) (on)",
    )
    parser.add_argument(
        "--release-grace",
        type=float,
        default=10.0,
        help="seconds a gone group's pods may stay nominated (a fault before then gives it this again, "
        "up to 60 s) (10)",
    )
    args = parser.parse_args(argv)
    if args.seed is None:
        args.seed = int(time.time())
    args.faults = tuple(f for f in args.faults.split(",") if f)
    if not args.faults or set(args.faults) - set(FAULTS):
        parser.error(f"--faults: choose from {', '.join(FAULTS)}")
    if args.holders is None:
        args.holders = args.nodes if args.starving else 0
    return Soak(args).run()


if __name__ == "__main__":
    sys.exit(main())
