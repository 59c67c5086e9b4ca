"""`python -m bench autoscale`: gangs that need new nodes, behind the real
Karpenter, troupe beside upstream kube-scheduler (issue 45;
`python -m bench autoscale --help`).

Per scheduler run, a fresh control plane (hack/localcluster.py: etcd,
kube-apiserver and kube-controller-manager v1.37.2, with the gates and
runtime-config of bench/e2e.py's topology shapes, ``FEATURE_GATES["tas"]``),
so no node carries over from the run before: troupe's CRDs and Karpenter's,
kwok v0.8.0 as the nodes' kubelet and Karpenter v1.15.0 with its kwok
provider (tests/integration/karpenter.py: instance types c-2x/4x/8x, 1900m /
3900m / 7900m allocatable cpu, 2 GiB per cpu), one NodePool per rack
(``rack-r1``..: template label ``rack: rN``, consolidation WhenEmpty after
Never, no limits unless --pool-cpu-limit), and no other Node. Then the scheduler (troupe from this
work tree with its default configuration, or kube-scheduler v1.37.2 with
``GenericWorkload`` and ``TopologyAwareWorkloadScheduling`` on, as
bench/e2e_procs.py starts it; both with their default client QPS 50 /
burst 100 and the admin identity), and at once every PodGroup, then every
pod (or, with ``--arrival-seconds S``, gang i's PodGroup then its pods at
i × S s): ``--gangs`` gangs of ``--size`` pods (``--pod-cpu``, ``--pod-memory``),
each PodGroup a gang of minCount = size with a topology constraint on
``rack`` (troupe: its scheduling.troupe.dev/v1alpha2 PodGroup and the
pod-group label; upstream: a native scheduling.k8s.io/v1beta1 PodGroup with
the same ``schedulingConstraints.topology`` and ``spec.schedulingGroup``;
bench/e2e_workload.py's Flavor). The clock starts as the first create is
sent. Every 0.5 s the benchmark lists the namespace's pods, the NodeClaims
and the Nodes, until every pod is bound (then ``--settle`` seconds more, to
count NodeClaims still being made) or ``--timeout`` seconds pass after the
last gang is due to be created.

Output: a table on stdout (one column per scheduler), progress on stderr,
bench/out/autoscale-<timestamp>.json; the logs (scheduler, Karpenter, kwok,
control plane) and the namespace's Events (events.json) under
bench/out/autoscale-<timestamp>/.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from . import e2e_procs as procs
from .e2e import FEATURE_GATES, apiserver_args
from .e2e_kube import Credentials, Kube
from .e2e_workload import NATIVE_PODGROUP_API, flavor, parse_pod_name

ROOT = Path(__file__).resolve().parents[1]
OUT_DIR = Path(__file__).resolve().parent / "out"
for _p in (ROOT / "hack", ROOT / "tests" / "integration"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))
import localcluster  # noqa: E402
from karpenter import (  # noqa: E402
    INSTANCE_TYPE_LABEL,
    KARPENTER_VERSION,
    KWOK_VERSION,
    NODEPOOL_LABEL,
    Karpenter,
    Kwok,
    apply,
    install_karpenter_crds,
    instance_types,
    karpenter_build,
    kwok_build,
    kwok_nodeclass,
    nodepool,
)
from operators import OperatorNotBuilt  # noqa: E402

from scheduler.runtime.capacity import STANDS_IN_FOR  # noqa: E402

RACK = "rack"
SCHEDULERS = ("troupe", "upstream")
POLL_SECONDS = 0.5
# What the kwok provider keeps back of an instance type (kwok/cloudprovider/helpers.go: kube-reserved)
RESERVED_CPU_MILLI, RESERVED_MEMORY_MI = 100, 10

EPILOG = """\
columns of the table (one per scheduler; the last: troupe / upstream):
  all gangs bound       seconds from the first create sent until every pod was seen bound
                        (polled every 0.5 s); "timeout" if not within --timeout after the
                        last gang is due ((gangs - 1) × --arrival-seconds after the first)
  gangs bound whole     gangs with all their pods bound at the end
  nodes made            distinct NodeClaims seen over the run (and --settle seconds after
                        the last bind): every node Karpenter launched, kept or not
  nodes needed          per rack, the fewest nodes of the largest instance type offered
                        that hold the pods bound in that rack, summed over racks (with
                        the racks the scheduler chose); "fewest possible" puts every
                        gang in one rack: ceil(all pods / pods per largest node)
  made / needed         nodes made / nodes needed (its racks); target <= 1.05
  nodes left without a pod
                        nodes present at the end that hold none of the gangs' pods
  split gangs           gangs whose bound pods are on nodes of more than one rack (target 0)
  partial gangs         gangs with some but not all pods bound at the end (target 0)
  median gang wait      per gang, from its PodGroup's create to all its pods seen bound
the setup: one fresh control plane per scheduler run (no node carries over), Karpenter
v1.15.0 (kwok provider; types c-2x/4x/8x-amd64-linux, 1900m/3900m/7900m cpu allocatable)
and kwok v0.8.0 per run, NodePools rack-r1..rN (label rack: rN), no other Node.
troupe: this work tree, default configuration. upstream: kube-scheduler v1.37.2
--feature-gates=GenericWorkload=true,TopologyAwareWorkloadScheduling=true (GangScheduling
and the topology placement in its default profile), native PodGroups.
needs: make controlplane (etcd, kube-*) and make operators (Karpenter, kwok).
examples:
  python -m bench autoscale
  python -m bench autoscale --gangs 4 --timeout 120 --schedulers troupe
  python -m bench autoscale --arrival-seconds 2 --pool-cpu-limit 48
  python -m bench autoscale --report bench/out/autoscale-20261208-101010.json
"""


def log(msg: str) -> None:
    print(f"[autoscale {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ sizes


def parse_cpu_milli(q: str) -> int:
    return int(q[:-1]) if q.endswith("m") else int(float(q) * 1000)


def parse_memory_mi(q: str) -> int:
    units = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024, "Ti": 1024 * 1024, "M": 1e6 / 2**20, "G": 1e9 / 2**20}
    for suffix, factor in sorted(units.items(), key=lambda kv: -len(kv[0])):
        if q.endswith(suffix):
            return math.ceil(float(q[: -len(suffix)]) * factor)
    return math.ceil(int(q) / 2**20)


def pods_per_node(types: list[dict[str, Any]], cpu_milli: int, memory_mi: int) -> tuple[str, int]:
    """The instance type that holds the most of these pods (its allocatable: capacity less the
    provider's kube-reserved), and how many."""
    best = ("", 0)
    for t in types:
        r = t["resources"]
        cpu = parse_cpu_milli(r["cpu"]) - RESERVED_CPU_MILLI
        mem = parse_memory_mi(r["memory"]) - RESERVED_MEMORY_MI
        n = min(cpu // cpu_milli, mem // memory_mi, int(r["pods"]))
        if n > best[1]:
            best = (t["name"], n)
    return best


# ------------------------------------------------------------------ workload


def workload(sched: str, ns: str, gangs: int, size: int, cpu: str, memory: str) -> tuple[list, list]:
    """PodGroups (a gang of minCount size, in one rack) and pods, as bench/e2e_workload.py writes
    them for this scheduler, with these requests."""
    fl = flavor(sched)
    groups = [fl.podgroup(ns, g, size, RACK) for g in range(gangs)]
    pods = []
    for g in range(gangs):
        for i in range(size):
            body = fl.pod(ns, g, i)
            body["spec"]["containers"][0]["resources"] = {
                "requests": {"cpu": cpu, "memory": memory},
                "limits": {"cpu": cpu, "memory": memory},
            }
            pods.append(body)
    return groups, pods


# ------------------------------------------------------------------ one run


class Observed:
    """What the polls saw, on the benchmark's monotonic clock."""

    def __init__(self, gangs: int, size: int) -> None:
        self.gangs, self.size = gangs, size
        self.node_of: list[str | None] = [None] * (gangs * size)
        self.gang_bound_at: list[float | None] = [None] * gangs
        self.claims: dict[str, dict[str, Any]] = {}  # name -> first seen, pool, type
        self.nodes: dict[str, dict[str, Any]] = {}  # name -> rack, type, ready, first seen / ready
        self.stand_ins_max = 0
        self.stand_ins_now = 0
        self.stand_ins_seen: set[str] = set()
        self.reasons: Counter[str] = Counter()  # PodScheduled=False reasons, per pod (its latest seen)
        self._reason_of: dict[str, str] = {}
        self.first_claim_at: float | None = None
        self.first_ready_at: float | None = None
        self.polls = 0

    def bound(self) -> int:
        return sum(n is not None for n in self.node_of)

    def whole(self) -> int:
        return sum(t is not None for t in self.gang_bound_at)

    def take(self, now: float, pods: list[dict], claims: list[dict], nodes: list[dict]) -> None:
        self.polls += 1
        stand_ins = 0
        for p in pods:
            meta = p["metadata"]
            if STANDS_IN_FOR in (meta.get("labels") or {}):
                stand_ins += 1
                self.stand_ins_seen.add(meta["name"])
                continue
            gi = parse_pod_name(meta["name"])
            if gi is None or gi[0] >= self.gangs or gi[1] >= self.size:
                continue
            k = gi[0] * self.size + gi[1]
            node = (p.get("spec") or {}).get("nodeName")
            if node and self.node_of[k] is None:
                self.node_of[k] = node
            for c in (p.get("status") or {}).get("conditions") or []:
                if c.get("type") == "PodScheduled" and c.get("status") == "False":
                    reason = c.get("reason") or "?"
                    if self._reason_of.get(meta["name"]) != reason:
                        self._reason_of[meta["name"]] = reason
                        self.reasons[reason] += 1
        self.stand_ins_max = max(self.stand_ins_max, stand_ins)
        self.stand_ins_now = stand_ins
        for g in range(self.gangs):
            if self.gang_bound_at[g] is None and all(self.node_of[g * self.size : (g + 1) * self.size]):
                self.gang_bound_at[g] = now
        for c in claims:
            meta = c["metadata"]
            labels = meta.get("labels") or {}
            rec = self.claims.setdefault(meta["name"], {"first_seen": now})
            rec["nodepool"] = labels.get(NODEPOOL_LABEL, rec.get("nodepool"))
            rec["type"] = labels.get(INSTANCE_TYPE_LABEL) or rec.get("type")
            rec["node"] = (c.get("status") or {}).get("nodeName") or rec.get("node")
        if self.claims and self.first_claim_at is None:
            self.first_claim_at = now
        for n in nodes:
            meta = n["metadata"]
            labels = meta.get("labels") or {}
            if NODEPOOL_LABEL not in labels:
                continue
            rec = self.nodes.setdefault(meta["name"], {"first_seen": now})
            rec["rack"] = labels.get(RACK)
            rec["type"] = labels.get(INSTANCE_TYPE_LABEL)
            rec["nodepool"] = labels.get(NODEPOOL_LABEL)
            ready = any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (n.get("status") or {}).get("conditions") or []
            )
            taints = [t.get("key") for t in (n.get("spec") or {}).get("taints") or []]
            rec["tainted"] = taints
            if ready and not taints and "ready_at" not in rec:
                rec["ready_at"] = now
                if self.first_ready_at is None:
                    self.first_ready_at = now
            rec["present"] = True

    def usable_nodes(self) -> int:
        return sum(1 for r in self.nodes.values() if "ready_at" in r)


def analyse(obs: Observed, per_node: int) -> dict[str, Any]:
    size = obs.size
    rack_of_node = {n: r.get("rack") for n, r in obs.nodes.items()}
    split = partial = 0
    gangs_in_rack: Counter[str] = Counter()
    pods_in_rack: Counter[str] = Counter()
    for g in range(obs.gangs):
        placed = [n for n in obs.node_of[g * size : (g + 1) * size] if n is not None]
        racks = {rack_of_node.get(n) or f"<{n}>" for n in placed}
        if 0 < len(placed) < size:
            partial += 1
        if len(racks) > 1:
            split += 1
        elif len(racks) == 1 and len(placed) == size:
            gangs_in_rack[next(iter(racks))] += 1
        for n in placed:
            pods_in_rack[rack_of_node.get(n) or f"<{n}>"] += 1
    needed = sum(math.ceil(c / per_node) for c in pods_in_rack.values())
    fewest = math.ceil(obs.gangs * size / per_node)
    made = len(obs.claims)
    claims_by_rack = Counter((c.get("nodepool") or "?").removeprefix("rack-") for c in obs.claims.values())
    types = Counter(c.get("type") or "?" for c in obs.claims.values())
    nodes_used = {n for n in obs.node_of if n is not None}
    return {
        "gangs_bound_whole": obs.whole(),
        "pods_bound": obs.bound(),
        "split_gangs": split,
        "partial_gangs": partial,
        "gangs_per_rack": dict(sorted(gangs_in_rack.items())),
        "pods_per_rack": dict(sorted(pods_in_rack.items())),
        "nodes_made": made,
        "nodes_at_end": sum(1 for r in obs.nodes.values() if r.get("present")),
        "nodes_made_per_rack": dict(sorted(claims_by_rack.items())),
        "instance_types_made": dict(sorted(types.items())),
        "nodes_needed": needed,
        "nodes_needed_fewest": fewest,
        "made_per_needed": made / needed if needed else None,
        "made_per_fewest": made / fewest if fewest else None,
        "nodes_with_pods": len(nodes_used),
        "nodes_without_pods": sum(1 for n, r in obs.nodes.items() if r.get("present") and n not in nodes_used),
        "pods_per_node_largest": per_node,
        "stand_ins_max": obs.stand_ins_max,
        "stand_ins_made": len(obs.stand_ins_seen),
        "podscheduled_false_reasons": dict(obs.reasons),
    }


async def measure(
    cluster: Any, sched: str, proc: procs.Proc, ns: str, args: argparse.Namespace, per_node: int
) -> dict[str, Any]:
    kube = Kube(Credentials(cluster.server, cluster.admin_token, cluster.ca_path.read_text()), connections=32)
    try:
        await kube.request(
            "POST",
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
            ok=(409,),
            decode=False,
        )
        groups, pods = workload(sched, ns, args.gangs, args.size, args.pod_cpu, args.pod_memory)
        fl = flavor(sched)
        pg_path = fl.podgroup_path.format(ns=ns)
        pod_path = f"/api/v1/namespaces/{ns}/pods"
        obs = Observed(args.gangs, args.size)
        errors: list[str] = []
        sem = asyncio.Semaphore(16)

        async def create(path: str, body: dict) -> None:
            async with sem:
                try:
                    await kube.request("POST", path, body, ok=(409,), decode=False)
                except Exception as exc:  # noqa: BLE001 - reported
                    errors.append(f"{body['metadata']['name']}: {exc}")

        size, every = args.size, args.arrival_seconds
        gang_sent: list[float | None] = [None] * args.gangs  # when its PodGroup create was sent

        async def create_gang(g: int) -> None:
            gang_sent[g] = time.monotonic() - t0
            await create(pg_path, groups[g])
            await asyncio.gather(*(create(pod_path, b) for b in pods[g * size : (g + 1) * size]))

        async def create_all() -> float:
            if every <= 0:  # all at once: every PodGroup, then every pod
                gang_sent[:] = [0.0] * args.gangs
                await asyncio.gather(*(create(pg_path, b) for b in groups))
                await asyncio.gather(*(create(pod_path, b) for b in pods))
                return time.monotonic()
            started = []
            for g in range(args.gangs):  # gang g at t0 + g × every: its PodGroup, then its pods
                await asyncio.sleep(max(0.0, t0 + g * every - time.monotonic()))
                started.append(asyncio.create_task(create_gang(g)))
            await asyncio.gather(*started)
            return time.monotonic()

        # the timeout counts from when the last gang is due to be created
        deadline_s = args.timeout + max(0.0, every) * (args.gangs - 1)
        t0 = time.monotonic()
        ctask = asyncio.create_task(create_all())
        cpu0 = proc.cpu()
        outcome = "ok"
        all_bound_at: float | None = None
        next_report = t0 + args.progress_every
        claims_path = "/apis/karpenter.sh/v1/nodeclaims"
        while True:
            now = time.monotonic()
            pl, cl, nl = await asyncio.gather(
                kube.request("GET", pod_path),
                kube.request("GET", claims_path),
                kube.request("GET", "/api/v1/nodes"),
            )
            now = time.monotonic()
            obs.take(now - t0, pl.get("items") or [], cl.get("items") or [], nl.get("items") or [])
            if all_bound_at is None and obs.bound() == args.gangs * args.size:
                all_bound_at = now
                log(
                    f"[{sched}] every gang bound {now - t0:.1f}s after the first create; "
                    f"watching NodeClaims {args.settle:.0f}s more"
                )
            if all_bound_at is not None and now - all_bound_at >= args.settle:
                break
            if all_bound_at is None and now - t0 > deadline_s:
                outcome = (
                    f"timeout: {obs.whole()}/{args.gangs} gangs bound whole after {deadline_s:.0f}s"
                    f" (partial {analyse(obs, per_node)['partial_gangs']})"
                )
                break
            if not proc.alive():
                outcome = f"{sched} exited with {proc.proc.returncode}"
                break
            if now >= next_report:
                next_report = now + args.progress_every
                log(
                    f"[{sched}] {now - t0:5.1f}s "
                    + (f"gangs created {sum(t is not None for t in gang_sent)}/{args.gangs}, " if every > 0 else "")
                    + f"pods bound {obs.bound()}/{args.gangs * args.size}, gangs whole "
                    f"{obs.whole()}/{args.gangs}, NodeClaims {len(obs.claims)}, nodes usable {obs.usable_nodes()}"
                    + (f", stand-ins {obs.stand_ins_now}" if sched == "troupe" else "")
                    + (f", PodScheduled=False reasons {dict(obs.reasons)}" if obs.reasons else "")
                )
            await asyncio.sleep(max(0.0, POLL_SECONDS - (time.monotonic() - now)))
        created_at = await ctask if ctask.done() else None
        if not ctask.done():
            ctask.cancel()
        cpu1 = proc.cpu()
        events = await kube.request("GET", f"/api/v1/namespaces/{ns}/events")
        (Path(proc.log_path).parent / "events.json").write_text(json.dumps(events.get("items") or [], indent=1))
        res = analyse(obs, per_node)
        bound_times = sorted(t for t in obs.gang_bound_at if t is not None)
        waits = sorted(
            b - c for b, c in zip(obs.gang_bound_at, gang_sent, strict=True) if b is not None and c is not None
        )
        res.update(
            {
                "outcome": outcome,
                "all_bound_s": all_bound_at - t0 if all_bound_at is not None else None,
                "creates_done_s": created_at - t0 if created_at is not None else None,
                "create_errors": errors[:20],
                "first_nodeclaim_s": obs.first_claim_at,
                "first_node_usable_s": obs.first_ready_at,
                "gang_bound_s": bound_times,
                "gang_bound_median_s": bound_times[len(bound_times) // 2] if bound_times else None,
                "arrival_seconds": every,
                "timeout_total_s": deadline_s,
                "gang_sent_s": gang_sent,
                "gang_wait_s": [
                    None if b is None or c is None else b - c for b, c in zip(obs.gang_bound_at, gang_sent, strict=True)
                ],
                "gang_wait_median_s": waits[len(waits) // 2] if waits else None,
                "gang_wait_max_s": waits[-1] if waits else None,
                "nodeclaims_after_all_bound": sum(
                    1
                    for c in obs.claims.values()
                    if all_bound_at is not None and c["first_seen"] > all_bound_at - t0 + POLL_SECONDS
                ),
                "scheduler_cpu_s": cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else None,
                "claims": obs.claims,
                "nodes": obs.nodes,
                "node_of": obs.node_of,
                "polls": obs.polls,
            }
        )
        return res
    finally:
        await kube.close()


def wait_log(path: Path, needles: list[str], timeout: float) -> list[str]:
    """The needles not yet in the log after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        text = path.read_text(errors="replace") if path.exists() else ""
        missing = [n for n in needles if n not in text]
        if not missing or time.monotonic() > deadline:
            return missing
        time.sleep(0.2)


def one_run(sched: str, args: argparse.Namespace, workdir: Path, builds: tuple, per_node: int) -> dict[str, Any]:
    kbuild, wbuild = builds
    rundir = workdir / sched
    rundir.mkdir(parents=True, exist_ok=True)
    cwd = rundir / "cluster"
    shutil.rmtree(cwd, ignore_errors=True)
    gates = FEATURE_GATES["tas"]
    base = {"run": sched, "scheduler": sched, "gangs": args.gangs, "size": args.size, "workdir": str(rundir)}
    cluster = localcluster.LocalCluster(workdir=cwd, extra_apiserver_args=apiserver_args("tas"), keep=True)
    log(f"[{sched}] starting etcd + kube-apiserver + kube-controller-manager ({cwd})")
    t_setup = time.monotonic()
    cluster.start(timeout=120)
    started: list[Any] = []
    proc: procs.Proc | None = None
    try:
        cluster.kubectl("apply", "-f", str(ROOT / "crds"), timeout=120)
        install_karpenter_crds(cluster, kbuild)
        cluster.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s", timeout=90)
        plain = cluster.get_json("nodes")["items"]
        if plain:
            raise RuntimeError(f"the fresh cluster has {len(plain)} Nodes; Karpenter would simulate on them")
        kw = Kwok(wbuild, cluster, rundir).start(timeout=60)
        started.append(kw)
        limits = {"cpu": args.pool_cpu_limit} if args.pool_cpu_limit else None
        pools = [nodepool(f"rack-r{r}", {RACK: f"r{r}"}, limits=limits) for r in range(1, args.racks + 1)]
        apply(cluster, kwok_nodeclass("default"), *pools)
        kp = Karpenter(kbuild, cluster, rundir).start(timeout=90)
        started.append(kp)
        if sched == "troupe":
            port = procs.free_port()
            cmd = [
                sys.executable,
                "-m",
                "scheduler",
                "run",
                "--kubeconfig",
                str(cluster.admin_kubeconfig),
                "--health-bind-address",
                f"127.0.0.1:{port}",
            ]  # no --config: the defaults (client QPS 50, burst 100, as kube-scheduler's)
            proc = procs.Proc(
                "troupe",
                cmd,
                rundir / "troupe.log",
                lambda: procs._http_status(f"http://127.0.0.1:{port}/readyz") == 200,
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
            )
        else:
            proc = procs.kube_scheduler(
                rundir, "upstream", args.kube_scheduler, cluster.admin_kubeconfig, 50, 100, gates
            )
        log(f"[{sched}] starting {sched} (log {proc.log_path})")
        proc.start(timeout=120)
        if sched == "troupe":  # it reads NodePools every 5 s; the run starts once it knows them all
            missing = wait_log(proc.log_path, [f"NodePool {p['metadata']['name']}: troupe may ask" for p in pools], 60)
            if missing:
                raise RuntimeError(f"troupe did not read NodePools in 60 s: {missing}")
        setup_s = time.monotonic() - t_setup
        log(
            f"[{sched}] ready after {setup_s:.0f}s of setup; creating {args.gangs} PodGroups and "
            f"{args.gangs * args.size} pods ({args.pod_cpu} cpu, {args.pod_memory} each)"
        )
        res = asyncio.run(measure(cluster, sched, proc, f"autoscale-{sched}", args, per_node))
        res.update(base, setup_s=setup_s, log=str(proc.log_path), karpenter_log=str(kp.log_path))
        res["karpenter_cpu_s"] = procs.cpu_seconds(kp.proc.pid) if kp.running else None
        res["failed"] = not (res["outcome"] == "ok" or res["outcome"].startswith("timeout"))
        log(
            f"[{sched}] {res['outcome']}: all bound {fmt_s(res['all_bound_s'])}, "
            f"{res['gangs_bound_whole']}/{args.gangs} gangs whole, {res['nodes_made']} NodeClaims "
            f"({res['instance_types_made']}), needed {res['nodes_needed']} (fewest {res['nodes_needed_fewest']}), "
            f"split {res['split_gangs']}, partial {res['partial_gangs']}, gangs per rack {res['gangs_per_rack']}"
        )
        return res
    except Exception as exc:  # noqa: BLE001 - a failed run is reported, the next one still runs
        log(f"[{sched}] failed: {type(exc).__name__}: {str(exc)[:2000]}")
        return {**base, "outcome": f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}", "failed": True}
    finally:
        if proc is not None:
            proc.stop()
        for p in reversed(started):
            p.stop()
        cluster.stop()
        if not args.keep_etcd:
            shutil.rmtree(cwd / "etcd", ignore_errors=True)


# ------------------------------------------------------------------ report


def fmt_s(v: float | None) -> str:
    return "—" if v is None else f"{v:.1f} s"


def heading(meta: dict[str, Any]) -> str:
    limit = f", NodePool limits {meta['pool_cpu_limit']} cpu each" if meta.get("pool_cpu_limit") else ""
    if meta.get("arrival_seconds"):
        limit += f", gang i created at i × {meta['arrival_seconds']:g} s"
    return (
        f"## Autoscaling: {meta['gangs']} gangs × {meta['size']} pods ({meta['pod_cpu']} cpu, {meta['pod_memory']}), "
        f"each in one of {meta['racks']} racks{limit}, behind Karpenter v{meta['karpenter']} (kwok), from an empty "
        f"cluster ({meta['date']}, {meta['git_head']}"
        + (" + work tree" if meta.get("git_dirty_scheduler") else "")
        + (" + bench/ work tree" if meta.get("git_dirty_bench") and not meta.get("git_dirty_scheduler") else "")
        + ")"
    )


def report(meta: dict[str, Any], runs: list[dict[str, Any]]) -> str:
    by = {r["scheduler"]: r for r in runs}
    names = [s for s in meta["schedulers"] if s in by]
    two = "troupe" in by and "upstream" in by

    def cell(r: dict[str, Any], key: str) -> str:
        if r.get("failed") and key != "outcome":
            return "—"
        v = r.get(key)
        if key == "all_bound_s":
            total = r.get("timeout_total_s", meta["timeout_s"])
            return fmt_s(v) if v is not None else f"timeout ({total:.0f} s)"
        if key == "gangs_bound_whole":
            return f"{v} / {r['gangs']}"
        if key == "nodes_made":
            types = ", ".join(f"{n}× {t.removesuffix('-amd64-linux')}" for t, n in r["instance_types_made"].items())
            racks = ", ".join(f"{k}: {n}" for k, n in r["nodes_made_per_rack"].items())
            return f"{v} ({types}; {racks})"
        if key == "nodes_needed":
            return f"{v} (fewest possible {r['nodes_needed_fewest']})"
        if key == "made_per_needed":
            return "—" if v is None else f"{v:.2f} ({r['made_per_fewest']:.2f} of the fewest)"
        if key == "gangs_per_rack":
            return ", ".join(f"{k}: {n}" for k, n in v.items()) or "—"
        if key in ("first_nodeclaim_s", "first_node_usable_s", "gang_bound_median_s"):
            return fmt_s(v)
        if key == "gang_wait_median_s":
            return f"{fmt_s(v)} (max {fmt_s(r.get('gang_wait_max_s'))})" if v is not None else "—"
        if key == "creates_done_s":
            return fmt_s(v)
        if key == "scheduler_cpu_s":
            return "—" if v is None else f"{v:.1f} s"
        if key == "podscheduled_false_reasons":
            return ", ".join(f"{k} ({n})" for k, n in v.items()) or "none"
        return str(v)

    rows = [
        ("all gangs bound", "all_bound_s"),
        ("gangs bound whole", "gangs_bound_whole"),
        ("nodes made (NodeClaims)", "nodes_made"),
        ("nodes needed (its racks)", "nodes_needed"),
        ("made ÷ needed", "made_per_needed"),
        ("nodes left without a pod", "nodes_without_pods"),
        ("gangs split across racks", "split_gangs"),
        ("partial gangs", "partial_gangs"),
        ("gangs per rack", "gangs_per_rack"),
        ("first NodeClaim", "first_nodeclaim_s"),
        ("first node usable", "first_node_usable_s"),
        ("median gang bound", "gang_bound_median_s"),
        ("median gang wait (bound − created)", "gang_wait_median_s"),
        ("every create done", "creates_done_s"),
        ("pods' PodScheduled=False reasons", "podscheduled_false_reasons"),
        ("stand-in pods made", "stand_ins_made"),
        ("scheduler CPU", "scheduler_cpu_s"),
        ("outcome", "outcome"),
    ]
    head = "| | " + " | ".join(names) + (" | troupe ÷ upstream |" if two else " |")
    out = [head, "|" + " --- |" * (len(names) + 1 + (1 if two else 0))]
    for label, key in rows:
        cells = [cell(by[n], key) for n in names]
        ratio = ""
        if two:
            a, b = by["troupe"].get(key), by["upstream"].get(key)
            if (
                key in ("all_bound_s", "scheduler_cpu_s", "nodes_made")
                and a
                and b
                and not (by["troupe"].get("failed") or by["upstream"].get("failed"))
            ):
                ratio = f"{a / b:.2f}×"
        out.append(f"| {label} | " + " | ".join(cells) + (f" | {ratio} |" if two else " |"))
    return "\n".join(out)


def _git(*a: str) -> str:
    r = subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else ""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench autoscale",
        description=(
            "Gangs in one rack each, from an empty cluster, behind the real Karpenter (kwok provider): "
            "time until every gang is bound, nodes made / nodes needed, gangs split across racks and "
            "partial gangs, troupe beside upstream kube-scheduler v1.37.2 with its gang scheduling. "
            "Each run on a fresh control plane; runs one after another."
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--gangs", type=int, default=20, help="gangs (PodGroups) (default 20)")
    p.add_argument("--size", type=int, default=8, help="pods per gang, = its minCount (default 8)")
    p.add_argument("--racks", type=int, default=4, help="racks: one NodePool rack-rN per rack (default 4)")
    p.add_argument(
        "--pool-cpu-limit",
        help="each NodePool's spec.limits.cpu (default: none), e.g. 48: room for fewer gangs per rack than "
        "there are gangs, so Karpenter cannot put every pod in one pool",
    )
    p.add_argument("--pod-cpu", default="1", help="each pod's cpu request (and limit) (default 1)")
    p.add_argument("--pod-memory", default="1Gi", help="each pod's memory request (and limit) (default 1Gi)")
    p.add_argument("--schedulers", default=",".join(SCHEDULERS), help="runs, in this order (default troupe,upstream)")
    p.add_argument(
        "--arrival-seconds",
        type=float,
        default=0.0,
        metavar="S",
        help="create gang i (its PodGroup, then its pods) S × i seconds after the first create, so Karpenter "
        "sees the gangs in several batches (default 0: every PodGroup, then every pod, at once)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=240.0,
        help="seconds to give up after the last gang is due to be created, i.e. after the first create "
        "+ (gangs - 1) × --arrival-seconds (default 240)",
    )
    p.add_argument(
        "--settle",
        type=float,
        default=15.0,
        help="seconds to keep counting NodeClaims once every pod is bound (default 15; Karpenter batches "
        "for 1-3 s and reconsiders pending pods every 10 s)",
    )
    p.add_argument("--progress-every", type=float, default=5.0, help="seconds between progress lines (default 5)")
    p.add_argument("--workdir", type=Path, help="logs and control planes (default bench/out/autoscale-<timestamp>/)")
    p.add_argument("--keep-etcd", action="store_true", help="keep each control plane's etcd data")
    p.add_argument("--report", type=Path, metavar="JSON", help="run nothing: print the table of an earlier run")
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.report is not None:
        data = json.loads(args.report.read_text())
        print(heading(data["meta"]))
        print(report(data["meta"], data["runs"]))
        return 0
    args.schedulers = [s for s in args.schedulers.split(",") if s]
    bad = [s for s in args.schedulers if s not in SCHEDULERS]
    if bad or not args.schedulers:
        print(
            f"python -m bench autoscale: unknown scheduler(s) {bad} (known: {', '.join(SCHEDULERS)})", file=sys.stderr
        )
        return 2
    try:
        k8s_bin = localcluster.default_k8s_bin_dir()
        args.kube_scheduler = localcluster.find_binary(k8s_bin, "kube-scheduler")
        localcluster.find_binary(k8s_bin, "kube-apiserver")
        localcluster.find_binary(localcluster.default_etcd_bin_dir(), "etcd")
        builds = (karpenter_build(), kwok_build())
    except (localcluster.ControlPlaneNotBuilt, OperatorNotBuilt) as exc:
        print(f"python -m bench autoscale: {exc}", file=sys.stderr)
        return 1
    types = instance_types()
    cpu_milli, memory_mi = parse_cpu_milli(args.pod_cpu), parse_memory_mi(args.pod_memory)
    largest, per_node = pods_per_node(types, cpu_milli, memory_mi)
    if per_node == 0:
        print("python -m bench autoscale: a pod fits no instance type", file=sys.stderr)
        return 2

    stamp = time.strftime("%Y%m%d-%H%M%S")
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    workdir = (args.workdir or OUT_DIR / f"autoscale-{stamp}").resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    json_path = OUT_DIR / f"autoscale-{stamp}.json"
    meta = {
        "timestamp": stamp,
        "date": time.strftime("%Y-%m-%d"),
        "git_head": _git("rev-parse", "--short", "HEAD"),
        "git_dirty_scheduler": bool(_git("status", "--porcelain", "scheduler")),
        "git_dirty_bench": bool(_git("status", "--porcelain", "bench")),
        "schedulers": args.schedulers,
        "gangs": args.gangs,
        "size": args.size,
        "racks": args.racks,
        "pool_cpu_limit": args.pool_cpu_limit,
        "pod_cpu": args.pod_cpu,
        "pod_memory": args.pod_memory,
        "timeout_s": args.timeout,
        "arrival_seconds": args.arrival_seconds,
        "timeout_total_s": args.timeout + max(0.0, args.arrival_seconds) * (args.gangs - 1),
        "settle_s": args.settle,
        "largest_type": largest,
        "pods_per_largest_node": per_node,
        "instance_types": [t["name"] for t in types],
        "feature_gates_upstream": FEATURE_GATES["tas"],
        "apiserver_args": apiserver_args("tas"),
        "native_podgroup_api": NATIVE_PODGROUP_API,
        "karpenter": KARPENTER_VERSION,
        "kwok": KWOK_VERSION,
        "k8s_version": localcluster.K8S_VERSION,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "workdir": str(workdir),
    }
    log(
        f"{args.gangs} gangs x {args.size} pods ({args.pod_cpu} cpu, {args.pod_memory}), {args.racks} racks, "
        f"runs {','.join(args.schedulers)}; largest type {largest} holds {per_node} pods; workdir {workdir}"
    )
    runs: list[dict[str, Any]] = []

    def save() -> None:
        json_path.write_text(json.dumps({"meta": meta, "runs": runs}, indent=1, default=str))

    try:
        for sched in args.schedulers:
            runs.append(one_run(sched, args, workdir, builds, per_node))
            save()
    except KeyboardInterrupt:
        log("interrupted; reporting what ran")
    finally:
        save()
    print(heading(meta))
    print(report(meta, runs))
    print()
    print(f"JSON: {json_path}")
    print(f"logs: {workdir}")
    return 0 if runs and not any(r.get("failed") for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
