"""`python -m bench e2e`: troupe, upstream kube-scheduler and a raw bind loop,
end to end, on one real control plane (`python -m bench e2e --help`).

Per node count: one etcd + kube-apiserver v1.37.2 (hack/localcluster.py) with
``--feature-gates=GenericWorkload=true``,
``--runtime-config=scheduling.k8s.io/v1beta1=true,scheduling.k8s.io/v1alpha3=true``
and ``--enable-priority-and-fairness=false``; troupe's CRDs; N Node objects.
The topology-aware shape t gets a control plane of its own (its nodes are
upstream's TAS nodes, 4 CPU in racks of 100) whose kube-apiserver also has
``TopologyAwareWorkloadScheduling=true``: without that gate the API server
drops ``spec.schedulingConstraints`` from native PodGroups. Shape l (trees
of groups: leader+workers replicas) gets another, on the same TAS nodes, whose
kube-apiserver and kube-scheduler also have ``CompositePodGroup=true``.
Then per shape, one after another on that API server and those nodes: troupe,
upstream, raw (bench/e2e_procs.py). Each run gets a fresh namespace, its
scheduler is started (and ready) before the first object is created, the
bind watcher (bench/e2e_watch.py) is open before the first create, the pod
creator (bench/e2e_workload.py) creates the shape, the run ends when every
pod is bound, the scheduler exits, or ``--timeout`` seconds pass after the
last create. The scheduler is stopped, then every pod of the namespace is
force-deleted (deletecollection, gracePeriodSeconds=0) and the benchmark
waits until none is left, so the next run starts on empty nodes.

Output: tables on stdout, bench/out/e2e-<timestamp>.json and .png, progress
on stderr; scheduler logs and configs in the run's workdir.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from . import e2e_procs as procs
from .e2e_cprofile import profile_text
from .e2e_kube import Credentials, Kube, request_counts, request_delta
from .e2e_report import (
    detail_table,
    latency_table,
    plot,
    requests_table,
    status_table,
    summarize,
    throughput_table,
    tree_table,
    variant_table,
)
from .e2e_watch import STATUS_POLL_SECONDS, BindWatcher, wait_for_status
from .e2e_workload import (
    EXTRA_SCHEDULERS,
    NATIVE_PODGROUP_API,
    QUICK_NODES,
    RAW_RUNS,
    SCHEDULERS,
    TROUPE_RUNS,
    Creation,
    Shape,
    create_nodes,
    create_workload,
    delete_all_pods,
    fits,
    flavor,
    group_name,
    nodes_per_rack,
    parse_shapes,
    partial_groups,
    scheduled_condition_type,
    topology_check,
)

ROOT = Path(__file__).resolve().parents[1]
OUT_DIR = Path(__file__).resolve().parent / "out"
sys.path.insert(0, str(ROOT / "hack"))
import localcluster  # noqa: E402

from scheduler.api.composite import COMPOSITE_SCHEDULED  # noqa: E402
from scheduler.runtime.status import MAX_WRITE_DELAY_SECONDS  # noqa: E402

APISERVER_ARGS = [
    "--feature-gates=GenericWorkload=true",
    # kube-scheduler 1.37 reads PodGroups through scheduling.k8s.io/v1beta1 (a
    # beta API, off by default); v1alpha3 serves the same objects
    "--runtime-config=scheduling.k8s.io/v1beta1=true,scheduling.k8s.io/v1alpha3=true",
    "--enable-priority-and-fairness=false",
    "--delete-collection-workers=4",  # only the cleanup between runs
]
DEFAULT_PLAN = "500:a,b 5000:a,b,c"

# Per node kind (Shape.node_kind): the feature gates of kube-apiserver and kube-scheduler.
# TopologyAwareWorkloadScheduling (alpha in 1.37, needs GenericWorkload): on the API server it keeps
# PodGroup spec.schedulingConstraints (dropped on create without it); on kube-scheduler it adds
# TopologyPlacementGenerator and PodGroupPodsCount to the default profile and runs every PodGroup cycle
# through the placement algorithm (one placement per domain of the key, each tried, the best kept).
FEATURE_GATES = {
    "default": "GenericWorkload=true",
    "tas": "GenericWorkload=true,TopologyAwareWorkloadScheduling=true",
    # shape l's trees: CompositePodGroup (alpha) serves v1alpha3 compositepodgroups and keeps PodGroups'
    # parentCompositePodGroupName (dropped on create without it); on kube-scheduler it makes the root the unit
    "tree": "GenericWorkload=true,TopologyAwareWorkloadScheduling=true,CompositePodGroup=true",
}


def apiserver_args(kind: str) -> list[str]:
    return [f"--feature-gates={FEATURE_GATES[kind]}", *APISERVER_ARGS[1:]]


EPILOG = f"""\
what is measured (client clock of this process):
  pods/s         pods bound / (last pod seen bound - first pod create returned)
  group latency  last pod of the group seen bound (pods watch, spec.nodeName set)
                 - the create of the group's last pod returned; p50 and p99 over groups
  creator pods/s pods created / (last create returned - first create sent); the
                 same creator, order and concurrency for all three runs
the three runs, one at a time on the same API server and nodes:
  troupe    python -m scheduler run, its CRD PodGroup + pod-group label
  upstream  kube-scheduler v1.37.2 --feature-gates=GenericWorkload=true (GangScheduling
            in the default profile), native scheduling.k8s.io/v1beta1 PodGroup +
            spec.schedulingGroup; shape t adds TopologyAwareWorkloadScheduling=true
            (on kube-apiserver too, in a control plane of its own)
  raw       bench/e2e_rawbind.py: watch unbound pods, POST pods/binding round-robin,
            no scheduling: the API server's limit for this client
all three use the admin kubeconfig (system:masters) and the same client QPS/burst;
API Priority and Fairness is off (--enable-priority-and-fairness=false).

shape t (750 gangs x 4, each PodGroup schedulingConstraints.topology[0].key = topology.kubernetes.io/rack,
on 4-CPU nodes in racks of 100) adds a column: gangs whose pods landed in more than one rack.
shape l (500 replicas, each a root CompositePodGroup gang minGroupCount 2 in one rack over a 1-pod leader
PodGroup and a 7-pod worker gang; TAS nodes; gates {FEATURE_GATES["tree"]}) adds a table per run:
partial replicas (some but not all pods bound at the end) and replicas not in one rack. Run troupe on the
native objects upstream gets with --schedulers troupe-native,upstream,raw (troupe: its own kinds).

default plan: {DEFAULT_PLAN!r} (shapes a, b at 500 and 5000 nodes, c at 5000);
--nodes/--shapes make a cross product instead; --quick: {QUICK_NODES} nodes, small shapes.
examples:
  python -m bench e2e --quick
  python -m bench e2e --nodes 5000 --shapes a,b,c=10x2000 --timeout 900
  python -m bench e2e --nodes 5000 --shapes t --schedulers raw,upstream,troupe
  python -m bench e2e --nodes 5000 --shapes l --raw-group-status --schedulers troupe-native,troupe,upstream,raw
  python -m bench e2e --plan '500:a 5000:b' --schedulers troupe,upstream --profile-troupe
"""


def log(msg: str) -> None:
    print(f"[e2e {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -------------------------------------------------------------------- plan


def build_plan(args: argparse.Namespace) -> list[tuple[int, list[Shape]]]:
    if args.plan and (args.nodes or args.shapes):
        raise SystemExit("python -m bench e2e: --plan cannot be combined with --nodes/--shapes")
    if args.quick and not (args.plan or args.nodes or args.shapes):
        return [(QUICK_NODES, parse_shapes("a,b,c", quick=True))]
    if args.nodes or args.shapes:
        nodes = [int(n) for n in (args.nodes or ("500,5000" if not args.quick else str(QUICK_NODES))).split(",") if n]
        shapes = parse_shapes(args.shapes or "a,b,c", args.quick)
        return [(n, shapes) for n in nodes]
    plan = []
    for part in (args.plan or DEFAULT_PLAN).replace(";", " ").split():
        n, _, s = part.partition(":")
        plan.append((int(n), parse_shapes(s or "a,b,c", args.quick)))
    return plan


# --------------------------------------------------------------------- run


def _admin_kube(cluster: Any, connections: int) -> Kube:
    return Kube(Credentials(cluster.server, cluster.admin_token, cluster.ca_path.read_text()), connections=connections)


def _pid_cpu(proc: Any) -> float | None:
    return procs.cpu_seconds(proc.pid) if proc is not None and proc.poll() is None else None


def _count_log_problems(path: Path, upto: int) -> int:
    """Error lines in the log before the scheduler was told to stop (shutdown noise is not counted)."""
    try:
        text = path.read_bytes()[:upto].decode(errors="replace")
    except OSError:
        return 0
    benign = ("The manifest file is empty",)  # kube-scheduler without a static manifest
    return sum(
        1
        for line in text.splitlines()
        if ("Traceback" in line or " ERROR " in line or line[:1] == "E" and line[1:5].isdigit())
        and not any(b in line for b in benign)
    )


async def one_run(
    cluster: Any,
    kube: Kube,
    nodes: int,
    shape: Shape,
    sched: str,
    args: argparse.Namespace,
    workdir: Path,
    profile: Path | None = None,
) -> dict[str, Any]:
    run = f"{nodes}n-{shape.key}-{sched}" + ("-cprofile" if profile else "")
    ns = f"e2e-{shape.key}-{sched}" + ("-cprofile" if profile else "")
    tag = f"[{run}]"
    await kube.request(
        "POST",
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        ok=(409,),
        decode=False,
    )
    kubeconfig = cluster.admin_kubeconfig
    if sched in TROUPE_RUNS:
        proc = procs.troupe(
            workdir, run, kubeconfig, args.qps, args.burst, args.bind_concurrency, args.troupe_src, profile
        )
    elif sched == "upstream":
        proc = procs.kube_scheduler(
            workdir, run, args.kube_scheduler, kubeconfig, args.qps, args.burst, FEATURE_GATES[shape.node_kind]
        )
    else:
        domain = nodes_per_rack(nodes) if shape.topology_key else 0
        objects = flavor(sched)  # whose PodGroups and CompositePodGroups get the status writes
        proc = procs.raw_binder(
            workdir,
            run,
            kubeconfig,
            ns,
            args.qps,
            args.burst,
            args.bind_concurrency,
            domain,
            group_status=shape.size if args.raw_group_status else 0,
            tree=shape.tree,
            podgroup_api=objects.podgroup_api,
            composite_api=objects.composite_api or "",
        )
    log(f"{tag} starting {sched} (log {proc.log_path})")
    try:
        proc.start(timeout=args.ready_timeout)
    except RuntimeError as exc:  # reported as a failed run; the benchmark goes on
        log(f"{tag} {str(exc).splitlines()[0][:300]}")
        result = {
            "run": run,
            "nodes": nodes,
            "shape": shape.key,
            "shape_label": shape.label(),
            "gangs": shape.gangs,
            "size": shape.size,
            "scheduler": sched,
            "profiled": profile is not None,
            "namespace": ns,
            "outcome": f"{sched} did not start: {str(exc).splitlines()[0][:200]}",
            "failed": True,
            **summarize([math.nan] * shape.pods, [math.nan] * shape.pods, shape.size),
            "creator_pods_per_s": math.nan,
            "scheduler_ready_s": time.monotonic() - proc.started_at,
            "log": str(proc.log_path),
            "log_problem_lines": _count_log_problems(proc.log_path, 1 << 40),
        }
        if profile is not None:
            result["profile"] = str(profile)
        return result
    if profile is not None:
        proc.signal(signal.SIGUSR1)  # start-up profile written; the run is profiled apart
        deadline = time.monotonic() + 60
        while not Path(f"{profile}.startup.prof").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # the dump is written, and the fresh profile enabled, in one signal handler
    log(
        f"{tag} {sched} ready in {proc.ready_seconds:.1f}s; creating {shape.gangs} PodGroups and {shape.pods} pods in {ns}"
    )

    watcher = BindWatcher(kube, ns, shape)
    await watcher.start()
    requests0 = await request_counts(kube)
    cpu0 = (proc.cpu(), _pid_cpu(cluster._apiserver), _pid_cpu(cluster._etcd))
    bench_cpu0 = time.process_time()
    sys_cpu0 = procs.system_cpu_seconds()
    creation = Creation(shape)
    ctask = asyncio.create_task(create_workload(kube, ns, shape, flavor(sched), args.create_concurrency, creation))
    outcome = "ok"
    t_start = time.monotonic()
    next_report = t_start + args.progress_every
    cpu1: tuple[float | None, ...] = (None, None, None)
    while True:
        await asyncio.sleep(0.2)
        now = time.monotonic()
        if ctask.done() and watcher.all_bound.is_set():
            break
        if not proc.alive():
            outcome = f"{sched} exited with {proc.proc.returncode}"
            break
        if watcher._task is not None and watcher._task.done():
            outcome = f"watch failed: {watcher.error!r}"
            break
        if ctask.done() and now - creation.finished > args.timeout:
            outcome = f"timeout: {watcher.bound}/{shape.pods} bound {args.timeout:.0f}s after the last create"
            break
        if not ctask.done() and now - t_start > 3 * args.timeout:  # the creator itself is stuck
            outcome = f"timeout: creator still running after {now - t_start:.0f}s, {watcher.bound}/{shape.pods} bound"
            break
        if now >= next_report:
            next_report = now + args.progress_every
            el = now - t_start
            log(
                f"{tag} {el:5.0f}s created {creation.pods_created}/{shape.pods}, bound {watcher.bound}/{shape.pods}, "
                f"groups done {sum(1 for t in watcher.group_done_at if t == t)}/{shape.gangs}"
            )
        cpu1 = (proc.cpu(), _pid_cpu(cluster._apiserver), _pid_cpu(cluster._etcd))
    cpu1 = (proc.cpu(), _pid_cpu(cluster._apiserver), _pid_cpu(cluster._etcd)) if proc.alive() else cpu1
    bench_cpu = time.process_time() - bench_cpu0
    sys_cpu1 = procs.system_cpu_seconds()
    wall = time.monotonic() - t_start
    requests = request_delta(requests0, await request_counts(kube))
    status = await _status_written(kube, sched, ns, shape, args, outcome, proc, cpu0[0])
    if not ctask.done():
        ctask.cancel()
    await asyncio.gather(ctask, return_exceptions=True)
    log_upto = proc.log_path.stat().st_size if proc.log_path.exists() else 0
    rc = proc.stop()
    await watcher.stop()

    s = summarize(creation.pod_created, watcher.bound_at, shape.size)
    s["partial_groups"] = partial_groups(shape, watcher.node_of)
    topology = None
    if shape.topology_key:
        topology = topology_check(shape, nodes, watcher.node_of)
        topology["stored"] = await _constraint_stored(kube, ns, sched, shape.tree)
    delta = [None if a is None or b is None else b - a for a, b in zip(cpu0, cpu1)]
    per_node = sorted(watcher.nodes.values())
    # CPU used on the machine during the run by anything that is not this run (other people's jobs on a shared box)
    other_cpu = None
    if sys_cpu0 is not None and sys_cpu1 is not None and None not in delta:
        other_cpu = max(0.0, (sys_cpu1 - sys_cpu0) - sum(delta) - bench_cpu)
    result: dict[str, Any] = {
        "run": run,
        "nodes": nodes,
        "shape": shape.key,
        "shape_label": shape.label(),
        "gangs": shape.gangs,
        "size": shape.size,
        "tree": shape.tree,
        "scheduler": sched,
        "profiled": profile is not None,
        "namespace": ns,
        "outcome": outcome,
        "failed": outcome != "ok" and not outcome.startswith("timeout"),
        **s,
        "creator_pods_per_s": creation.rate,
        "creator_errors": creation.errors[:20],
        "creator_error_count": len(creation.errors),
        "scheduler_cpu_s": delta[0],
        "apiserver_cpu_s": delta[1],
        "apiserver_ms_per_pod": 1000 * delta[1] / s["pods_bound"] if delta[1] is not None and s["pods_bound"] else None,
        "topology": topology,
        "etcd_cpu_s": delta[2],
        "bench_cpu_s": bench_cpu,
        "other_cpu_s": other_cpu,
        "wall_s": wall,
        "loadavg": os.getloadavg()[0],
        "scheduler_ready_s": proc.ready_seconds,
        "scheduler_exit": rc,
        "nodes_used": len(per_node),
        "max_pods_per_node": per_node[-1] if per_node else 0,
        "watch_relists": watcher.relists,
        "watch_events": watcher.events,
        "api_requests": requests,
        **status,
        "log": str(proc.log_path),
        "log_problem_lines": _count_log_problems(proc.log_path, log_upto),
    }
    if profile is not None:
        result["profile"] = str(profile)
    lat = f"p50 {s['latency_p50_s']:.3f}s p99 {s['latency_p99_s']:.3f}s" if s["groups_bound"] else "no group bound"
    log(
        f"{tag} {outcome}: {s['pods_bound']}/{shape.pods} bound, {s['pods_per_s']:.0f} pods/s, {lat}, "
        f"creator {creation.rate:.0f} pods/s, {s['pods_per_s_while_creating']:.0f} pods/s bound while it ran, drain {s['drain_s']:.2f}s after the last create, "
        f"{sched} CPU {delta[0] if delta[0] is not None else float('nan'):.1f}s"
    )
    if topology is not None:
        log(
            f"{tag} {topology['key']}: {topology['violations']} of {topology['gangs_with_bound_pods']} gangs with bound "
            f"pods span more than one domain (at most {topology['max_domains_per_gang']}); "
            f"{topology['domains_used']} domains used (gangs wholly in one: at most "
            f"{max(topology['gangs_per_domain'].values(), default=0)} in a domain); "
            f"constraint stored on the PodGroup: {topology['stored']}"
        )
    if creation.errors:
        log(f"{tag} creator errors ({len(creation.errors)}), first: {creation.errors[0]}")
    if outcome != "ok":
        log(f"{tag} see {proc.log_path}; tail:\n{proc.log_tail(15)}")
    secs = await delete_all_pods(kube, ns)
    log(f"{tag} pods deleted in {secs:.1f}s")
    return result


STATUS_WAIT_SECONDS = 60.0


async def _status_written(
    kube: Kube, sched: str, ns: str, shape: Shape, args: argparse.Namespace, outcome: str, proc: Any, cpu0: float | None
) -> dict[str, Any]:
    """Once every pod is bound: when every group of the run showed its scheduled condition (troupe writes
    status behind its binds, so some are still queued when the last pod is bound), and the scheduler's CPU
    by then. Only for runs that write conditions: troupe on its own and native objects, and the raw loop
    with --raw-group-status."""
    writes = sched in ("troupe", "troupe-native") or (sched in RAW_RUNS and args.raw_group_status)
    if outcome != "ok" or not writes:
        return {}
    fl = flavor(sched)
    paths = [
        (
            fl.podgroup_path.format(ns=ns),
            scheduled_condition_type(fl.podgroup_api),
            shape.gangs * (2 if shape.tree else 1),
        )
    ]
    if shape.tree and fl.composite_path:
        paths.append((fl.composite_path.format(ns=ns), COMPOSITE_SCHEDULED, shape.gangs))
    done = await wait_for_status(kube, paths, time.monotonic() + STATUS_WAIT_SECONDS)
    cpu = proc.cpu() if proc.alive() else None
    return {
        "status_done_at": done,  # monotonic; None: not all written within STATUS_WAIT_SECONDS
        "scheduler_cpu_to_status_s": cpu - cpu0 if done is not None and cpu is not None and cpu0 is not None else None,
    }


async def _constraint_stored(kube: Kube, ns: str, sched: str, tree: bool = False) -> bool | None:
    """Whether the API server kept spec.schedulingConstraints on the run's first PodGroup (for a tree
    shape its first CompositePodGroup; a kube-apiserver without TopologyAwareWorkloadScheduling drops
    it from native PodGroups)."""
    fl = flavor(sched)
    path = fl.composite_path if tree and fl.composite_path else fl.podgroup_path
    try:
        pg = await kube.request("GET", f"{path.format(ns=ns)}/{group_name(0)}", retries=2)
    except Exception:  # noqa: BLE001 - a report detail, not worth failing the run
        return None
    return bool(((pg.get("spec") or {}).get("schedulingConstraints") or {}).get("topology"))


async def _apiserver_idle(cluster: Any, seconds: float) -> float | None:
    """kube-apiserver's CPU seconds per second with nothing running (its own loops, the nodes'
    and CRDs' caches): what a slower run pays for its longer wall time, not per pod."""
    if seconds <= 0:
        return None
    c0, t0 = _pid_cpu(cluster._apiserver), time.monotonic()
    await asyncio.sleep(seconds)
    c1, t1 = _pid_cpu(cluster._apiserver), time.monotonic()
    return None if c0 is None or c1 is None else (c1 - c0) / (t1 - t0)


def _net_of_idle(run: dict[str, Any], idle: float | None) -> dict[str, Any]:
    """apiserver ms per pod bound, less the idle rate over the run's wall time."""
    run["apiserver_idle_cpu_per_s"] = idle
    cpu, wall, bound = run.get("apiserver_cpu_s"), run.get("wall_s"), run.get("pods_bound")
    if idle is not None and cpu is not None and wall and bound:
        run["apiserver_net_ms_per_pod"] = 1000 * (cpu - idle * wall) / bound
    return run


async def run_node_count(
    cluster: Any,
    nodes: int,
    shapes: list[Shape],
    args: argparse.Namespace,
    workdir: Path,
    runs: list[dict[str, Any]],
    save,
) -> None:
    kube = _admin_kube(cluster, connections=max(args.create_concurrency, args.node_create_concurrency) + 16)
    try:
        for res in (
            "podgroups",
            "workloads",
            "compositepodgroups",
        ):  # a just-Established CRD answers 429 "storage is (re)initializing" for a moment
            await kube.request("GET", f"/apis/scheduling.troupe.dev/v1alpha2/{res}", params={"limit": "1"}, retries=30)
        log(f"creating {nodes} nodes ({args.node_create_concurrency} in flight)")
        kind = shapes[0].node_kind if shapes else "default"
        secs = await create_nodes(kube, nodes, args.node_create_concurrency, log, kind)
        log(
            f"{nodes} {kind} nodes created in {secs:.1f}s ({nodes / secs:.0f}/s); status.allocatable stuck on create"
            + (f"; racks of {nodes_per_rack(nodes)}" if kind in ("tas", "tree") else "")
        )
        # warm-up: the first pod creates on a fresh API server are slower; nobody schedules these
        warm = Shape("warmup", 4, 50)
        await kube.request(
            "POST",
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "e2e-warmup"}},
            ok=(409,),
            decode=False,
        )
        c = await create_workload(kube, "e2e-warmup", warm, flavor("raw"), args.create_concurrency, Creation(warm))
        await delete_all_pods(kube, "e2e-warmup")
        log(f"warm-up: {warm.pods} pods created at {c.rate:.0f}/s and deleted")
        idle = await _apiserver_idle(cluster, args.idle_seconds)
        if idle is not None:
            log(
                f"kube-apiserver idle: {idle * 1000:.0f} ms CPU per second over {args.idle_seconds:.0f}s, nothing running"
            )
        for shape in shapes:
            why = fits(shape, nodes)
            if why:
                log(f"skipping shape {shape.label()} at {nodes} nodes: does not fit ({why})")
                continue
            for sched in args.schedulers:
                if shape.topology_key and sched == "troupe-coscheduling":
                    log(f"skipping {sched} on shape {shape.label()}: scheduler-plugins' PodGroup has no topology")
                    continue
                runs.append(_net_of_idle(await one_run(cluster, kube, nodes, shape, sched, args, workdir), idle))
                save()
            profiled = next((s for s in args.schedulers if s in TROUPE_RUNS), None)
            if args.profile_troupe and profiled:  # the first troupe run of the list, again under cProfile
                prof = workdir / f"{nodes}n-{shape.key}-{profiled}"
                runs.append(
                    _net_of_idle(
                        await one_run(cluster, kube, nodes, shape, profiled, args, workdir, profile=prof), idle
                    )
                )
                save()
    finally:
        await kube.close()


def report(meta: dict[str, Any], runs: list[dict[str, Any]], json_path: Path, png_path: Path) -> None:
    """Print the tables (and profiles) of a finished or loaded benchmark and write the plot."""
    print(f"# troupe vs kube-scheduler v{localcluster.K8S_VERSION} (GangScheduling) vs raw bind loop, end to end")
    if any(r.get("tree") for r in runs):
        print(
            "shape l: each replica a root CompositePodGroup (scheduling.k8s.io/v1alpha3 for troupe-native, upstream "
            "and raw; scheduling.troupe.dev for troupe), a gang minGroupCount 2 in one topology.kubernetes.io/rack, "
            "over a 1-pod leader PodGroup and a 7-pod worker gang; kube-scheduler and kube-apiserver run with "
            f"--feature-gates={FEATURE_GATES['tree']}; the raw loop binds each replica inside one rack"
            + (
                " and writes the status of each of its groups (the root CompositePodGroup and its two PodGroups) "
                "once its replica is bound."
                if meta.get("raw_group_status")
                else "."
            )
        )
    if any(r.get("topology") and not r.get("tree") for r in runs):
        print(
            "shape t: every PodGroup asks for one topology.kubernetes.io/rack; kube-scheduler and kube-apiserver run "
            f"with --feature-gates={FEATURE_GATES['tas']}; the raw loop binds each gang inside one rack "
            "(round-robin over its nodes); `not in one rack` counts the gangs whose pods landed in more than one."
        )
    print(
        f"API Priority and Fairness disabled (--enable-priority-and-fairness=false); all three run with the admin "
        f"kubeconfig, client QPS {meta['qps']:g} / burst {meta['burst']}; bind concurrency {meta['bind_concurrency']} "
        f"(troupe, raw; kube-scheduler binds asynchronously); creator: {meta['create_concurrency']} creates in flight, "
        f"groups one after another, PodGroup before its pods. {meta['cpus']} CPUs, shared by etcd, "
        f"kube-apiserver, the scheduler and this process."
    )
    if meta.get("raw_group_status"):
        print(
            "raw bind loop with --raw-group-status: it also writes each PodGroup's status (PodGroupScheduled=True, "
            "one merge patch) once the group's pods are bound, as troupe and kube-scheduler do."
        )
    print(
        f"troupe: {meta['troupe_src']}"
        + (
            f" (git {meta['troupe_rev']} = {meta.get('troupe_commit', '')[:10]})"
            if meta["troupe_rev"]
            else f" (working tree at {meta['git_head'][:10]}, "
            f"{len(meta['git_dirty_scheduler'])} changed files under scheduler/)"
        )
    )
    print()
    print("## Throughput: pods bound / (last bound - first created)")
    print(throughput_table(runs))
    print()
    print("## Group latency: all pods of the group bound - last pod of the group created (p50 / p99 over groups)")
    print(latency_table(runs))
    print()
    for variant, title in (
        (
            "troupe-native",
            "troupe on native objects (scheduling.k8s.io PodGroups, spec.schedulingGroup: what upstream gets)",
        ),
        ("troupe-coscheduling", "troupe on scheduler-plugins' objects (scheduling.x-k8s.io PodGroups and label)"),
    ):
        table = variant_table(runs, variant)
        if table is not None:
            print(f"## {title}")
            print(table)
            print()
    table = tree_table(runs)
    if table is not None:
        print("## Trees: per run; partial = replicas with some but not all pods bound at the end")
        print(table)
        print()
    table = status_table(runs)
    if table is not None:
        print(
            "## Group status: when every group showed its scheduled condition (troupe writes conditions behind "
            f"its binds, at most {MAX_WRITE_DELAY_SECONDS:g} s later while binding goes on; polled every "
            f"{STATUS_POLL_SECONDS:g} s once every pod is bound)"
        )
        print(table)
        print()
    print("## Every run")
    print(detail_table(runs))
    table = requests_table(runs)
    if table is not None:
        print()
        print(
            "## API requests per pod bound, by kind, while each run ran (kube-apiserver's apiserver_request_total: "
            "the creator's and this watcher's too, so compare the runs)"
        )
        print(table)
    for r in runs:
        for phase, what in (
            ("startup", f"start-up until /readyz ({r.get('scheduler_ready_s') or 0:.0f}s under cProfile)"),
            ("run", f"the run: {r['pods_bound']}/{r['pods']} bound, {r['pods_per_s'] or 0:.0f} pods/s under cProfile"),
        ):
            prof = Path(f"{r.get('profile')}.{phase}.prof")
            if not r.get("profile") or not prof.exists():
                continue
            text = profile_text(prof)
            txt = prof.with_suffix(".txt")
            txt.write_text(profile_text(prof, callers=True))
            print()
            print(f"## Profile of troupe, {r['run']}, {what} ({txt})")
            print(text)
    why = plot(runs, png_path) if runs else "no runs"
    print()
    print(f"JSON: {json_path}")
    print(f"plot: {png_path}" if why is None else f"plot: none ({why})")
    print(f"logs, configs: {meta['workdir']}")


def _git(*a: str) -> str:
    r = subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else ""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench e2e",
        description=__doc__.split("\n\n")[0],
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke run (about a minute): {QUICK_NODES} nodes, a=100x3, b=3x100, c=2x500, --timeout 60",
    )
    p.add_argument(
        "--plan", help=f"node counts with their shapes, e.g. '500:a,b 5000:a,b,c' (default {DEFAULT_PLAN!r})"
    )
    p.add_argument(
        "--nodes", help="comma-separated node counts (e.g. 500,5000); with --shapes: every shape at every count"
    )
    p.add_argument(
        "--shapes",
        help="comma-separated shapes: a (1000 gangs x 3), b (3 x 1000), c (10 x 5000), t (750 x 4, each gang "
        "in one rack: upstream's TopologyAwareScheduling shape, on nodes and a control plane of its own), l (500 "
        "leader+workers replicas, each a CompositePodGroup tree in one rack: 1 leader + a gang of 7 workers; TAS nodes, "
        "a control plane with the CompositePodGroup gate too), or "
        "KEY=GANGSxSIZE to resize, e.g. c=10x2000; a shape that does not fit the nodes is skipped",
    )
    p.add_argument(
        "--schedulers",
        default=",".join(SCHEDULERS),
        help="which runs, in this order (default troupe,upstream,raw; also troupe-native: troupe on the objects "
        "upstream gets, native PodGroups and spec.schedulingGroup; troupe-coscheduling: troupe on scheduler-plugins' "
        "PodGroups and label, as the Kubeflow training-operator writes them, not on shape t; raw-troupe: the raw loop "
        "on troupe's own kinds, the peer of the troupe run)",
    )
    p.add_argument(
        "--qps",
        type=float,
        default=1000.0,
        help="client QPS for all three (default 1000; kube-scheduler's own default is 50)",
    )
    p.add_argument(
        "--burst", type=int, default=1000, help="client burst for all three (default 1000; kube-scheduler's own is 100)"
    )
    p.add_argument(
        "--raw-group-status",
        action="store_true",
        help="the raw loop also writes each PodGroup's status once its pods are bound (PodGroupScheduled=True, "
        "one merge patch per group, as kube-scheduler's PostBind and troupe do): troupe÷raw then compares "
        "against binding plus the PodGroup contract's one write per group (shape l: per replica, its root "
        "CompositePodGroup and its two PodGroups)",
    )
    p.add_argument(
        "--bind-concurrency",
        type=int,
        default=16,
        help="binds in flight for troupe (clientConnection.bindConcurrency) and the raw loop (default 16, "
        "troupe's default; kube-scheduler binds asynchronously, limited only by QPS)",
    )
    p.add_argument("--create-concurrency", type=int, default=48, help="pod/PodGroup creates in flight (default 48)")
    p.add_argument("--node-create-concurrency", type=int, default=64, help="Node creates in flight (default 64)")
    p.add_argument(
        "--timeout",
        type=float,
        help="give up on a run this many seconds after its last create returned, "
        "and report how many pods got bound (default 600; 60 with --quick)",
    )
    p.add_argument(
        "--ready-timeout",
        type=float,
        default=600.0,
        help="seconds a scheduler may take to become ready (its cache synced) before the run counts as "
        "failed (default 600; troupe needs about 2 minutes at 5000 nodes, longer under cProfile)",
    )
    p.add_argument(
        "--idle-seconds",
        type=float,
        default=15.0,
        help="per control plane, measure kube-apiserver's idle CPU this long before the first run; the detail "
        "table then also shows apiserver ms per pod net of that idle rate over each run's wall time "
        "(default 15; 0: skip)",
    )
    p.add_argument(
        "--progress-every", type=float, default=5.0, help="seconds between progress lines on stderr (default 5)"
    )
    p.add_argument(
        "--profile-troupe",
        action="store_true",
        help="after each shape's runs, the first troupe run of --schedulers once more under cProfile "
        "(bench/e2e_cprofile.py: start-up "
        "until /readyz and the run are profiled apart); its numbers are reported separately and the top 25 "
        "cumulative / tottime entries of each phase are printed (and saved next to the logs)",
    )
    p.add_argument(
        "--troupe-src",
        type=Path,
        help="run troupe from this directory (one that contains scheduler/), e.g. a snapshot; default: this checkout",
    )
    p.add_argument(
        "--troupe-rev",
        help="run troupe from this git revision of this repository (git archive REV scheduler "
        "into the workdir), e.g. HEAD, so edits in the working tree do not change the benchmark",
    )
    p.add_argument(
        "--workdir",
        type=Path,
        help="where the control plane, logs, configs and profiles go "
        "(default bench/out/e2e-<timestamp>/; kept, etcd data removed at the end)",
    )
    p.add_argument("--keep-etcd", action="store_true", help="keep each control plane's etcd data in the workdir")
    p.add_argument(
        "--report",
        type=Path,
        metavar="JSON",
        help="run nothing: print the tables of an earlier bench/out/e2e-*.json and redraw its plot",
    )
    p.add_argument(
        "--apiserver-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra kube-apiserver flag (repeatable), added after the benchmark's own",
    )
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.report is not None:
        data = json.loads(args.report.read_text())
        report(data["meta"], data["runs"], args.report, args.report.with_suffix(".png"))
        return 0
    args.schedulers = [s for s in args.schedulers.split(",") if s]
    bad = [s for s in args.schedulers if s not in SCHEDULERS + EXTRA_SCHEDULERS]
    if bad:
        print(
            f"python -m bench e2e: unknown scheduler(s) {bad} (known: {', '.join(SCHEDULERS + EXTRA_SCHEDULERS)})",
            file=sys.stderr,
        )
        return 2
    if args.timeout is None:
        args.timeout = 60.0 if args.quick else 600.0
    try:
        plan = build_plan(args)
    except ValueError as exc:
        print(f"python -m bench e2e: {exc}", file=sys.stderr)
        return 2
    try:
        k8s_bin = localcluster.default_k8s_bin_dir()
        args.kube_scheduler = localcluster.find_binary(k8s_bin, "kube-scheduler")
        localcluster.find_binary(k8s_bin, "kube-apiserver")
        localcluster.find_binary(localcluster.default_etcd_bin_dir(), "etcd")
    except localcluster.ControlPlaneNotBuilt as exc:
        print(f"python -m bench e2e: {exc}", file=sys.stderr)
        return 1

    stamp = time.strftime("%Y%m%d-%H%M%S")
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    workdir = (args.workdir or OUT_DIR / f"e2e-{stamp}").resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    json_path, png_path = OUT_DIR / f"e2e-{stamp}.json", OUT_DIR / f"e2e-{stamp}.png"
    if args.troupe_rev:
        src = workdir / "troupe-src"
        shutil.rmtree(src, ignore_errors=True)
        src.mkdir()
        archive = subprocess.run(
            ["git", "archive", args.troupe_rev, "scheduler"], cwd=ROOT, capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
        args.troupe_src = src
    if args.troupe_src is not None:
        args.troupe_src = args.troupe_src.resolve()
        if not (args.troupe_src / "scheduler" / "__main__.py").exists():
            print(f"python -m bench e2e: {args.troupe_src} has no scheduler/__main__.py", file=sys.stderr)
            return 2

    meta = {
        "timestamp": stamp,
        "plan": [[n, [s.label() for s in shapes]] for n, shapes in plan],
        "schedulers": args.schedulers,
        "qps": args.qps,
        "burst": args.burst,
        "bind_concurrency": args.bind_concurrency,
        "create_concurrency": args.create_concurrency,
        "raw_group_status": args.raw_group_status,
        "timeout_s": args.timeout,
        "apiserver_args": APISERVER_ARGS + args.apiserver_arg,
        "apiserver_args_tas": apiserver_args("tas") + args.apiserver_arg,
        "feature_gates": FEATURE_GATES,
        "native_podgroup_api": NATIVE_PODGROUP_API,
        "kube_scheduler": str(args.kube_scheduler),
        "k8s_version": localcluster.K8S_VERSION,
        "etcd_version": localcluster.ETCD_VERSION,
        "troupe_src": str(args.troupe_src or ROOT),
        "troupe_rev": args.troupe_rev,
        "troupe_commit": _git("rev-parse", args.troupe_rev) if args.troupe_rev else "",
        "git_head": _git("rev-parse", "HEAD"),
        "git_dirty_scheduler": _git("status", "--porcelain", "scheduler").splitlines(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "workdir": str(workdir),
        "creator_order": "groups one after another; PodGroup before its pods",
    }
    runs: list[dict[str, Any]] = []

    def save() -> None:
        json_path.write_text(json.dumps(_clean({"meta": meta, "runs": runs}), indent=1, default=str))

    log(
        f"plan: {'; '.join(f'{n} nodes: ' + ', '.join(s.label() for s in sh) for n, sh in plan)}; "
        f"runs {','.join(args.schedulers)}; QPS {args.qps:g} / burst {args.burst}; workdir {workdir}"
    )
    log(
        f"troupe from {args.troupe_src or ROOT}"
        + (f" (git {args.troupe_rev})" if args.troupe_rev else " (working tree)")
    )
    t_all = time.monotonic()
    aborted = False
    try:
        for nodes, kind, shapes in _by_node_kind(plan):
            cwd = workdir / (f"cluster-{nodes}" if kind == "default" else f"cluster-{nodes}-{kind}")
            shutil.rmtree(cwd / "etcd", ignore_errors=True)
            cluster = localcluster.LocalCluster(
                workdir=cwd,
                extra_apiserver_args=apiserver_args(kind) + args.apiserver_arg,
                keep=True,
                controller_manager=False,  # no Jobs here; its GC would watch every pod and node
            )
            log(f"starting etcd + kube-apiserver for {nodes} {kind} nodes ({cwd})")
            cluster.start(timeout=120)
            try:
                cluster.kubectl("apply", "-f", str(ROOT / "crds"), "-f", str(ROOT / "crds" / "compat"), timeout=120)
                cluster.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s", timeout=90)
                asyncio.run(run_node_count(cluster, nodes, shapes, args, workdir, runs, save))
            finally:
                cluster.stop()
                if not args.keep_etcd:
                    shutil.rmtree(cwd / "etcd", ignore_errors=True)
    except KeyboardInterrupt:
        log("interrupted; reporting what ran")
    except Exception as exc:  # noqa: BLE001 - report what ran, then fail
        import traceback

        log(f"benchmark aborted: {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
        aborted = True
    finally:
        save()
    log(f"all runs done in {(time.monotonic() - t_all) / 60:.1f} min")

    report(meta, runs, json_path, png_path)
    return 0 if runs and not aborted and not any(r["failed"] for r in runs) else 1


def _by_node_kind(plan: list[tuple[int, list[Shape]]]) -> list[tuple[int, str, list[Shape]]]:
    """One control plane per node count and node kind (shape t's TAS nodes are not the others'),
    in plan order; the shapes of a kind keep their order."""
    out: list[tuple[int, str, list[Shape]]] = []
    for nodes, shapes in plan:
        kinds: dict[str, list[Shape]] = {}
        for shape in shapes:
            kinds.setdefault(shape.node_kind, []).append(shape)
        out.extend((nodes, kind, group) for kind, group in kinds.items())
    return out


def _clean(o: Any) -> Any:
    """JSON-safe: nan -> null (json.dumps would write NaN), paths -> str."""
    if isinstance(o, float):
        return None if math.isnan(o) or math.isinf(o) else o
    if isinstance(o, dict):
        return {k: _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    if isinstance(o, Path):
        return str(o)
    return o


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
