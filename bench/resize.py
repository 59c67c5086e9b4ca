"""`python -m bench resize`: a running gang grown again and again, under
background load, on a real kube-apiserver; troupe beside upstream
kube-scheduler in one run (issue 46).

Per scheduler, in a fresh namespace on the same nodes (``--racks`` racks of
``--nodes-per-rack`` nodes of ``--node-cpu`` CPU, label ``rack``):

1. a PodGroup, a gang of minCount ``--size`` with a topology constraint on
   ``rack``, and its pods (``--pod-cpu`` each, never ending); the clock
   waits until all are bound, and their rack is the running domain;
2. ``--increments`` times: the PodGroup's minCount raised by ``--step``
   (a merge patch, as an elastic job's operator does), then ``--step`` new
   pods created; the time to bind the increment runs from the patch to the
   last of its pods seen bound; the next increment starts once it is bound
   (or after ``--timeout`` s);
3. meanwhile a stream of short lone pods (``--load-rate`` per second of
   ``--load-cpu`` CPU for ``--load-runtime`` s) keeps the scheduler busy.

bench/kubelet.py's FakeKubelet starts bound pods and ends the short ones.
troupe runs from this work tree with its default configuration and its own
PodGroup (scheduling.troupe.dev); upstream is kube-scheduler v1.37.2 with
``GenericWorkload`` and ``TopologyAwareWorkloadScheduling`` on, scheduling a
native scheduling.k8s.io/v1beta1 PodGroup (minCount mutable since 1.37)
with the same constraint. Both with client QPS 100 / burst 200.

Reported per scheduler: increments bound, time per increment (p50 / p99 /
max), the gang's pods placed outside its running rack (target 0), and
the scheduler's CPU seconds. Output: a table on stdout, progress on
stderr, bench/out/resize-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from . import e2e_procs as procs
from .e2e import apiserver_args
from .e2e_kube import Credentials, Kube
from .kubelet import MERGE_PATCH, FakeKubelet, PodStream
from .starvation import FLAVORS, Flavor, empty_namespace, percentile, start_plane

ROOT = Path(__file__).resolve().parents[1]
OUT_DIR = Path(__file__).resolve().parent / "out"
sys.path.insert(0, str(ROOT / "hack"))
import localcluster  # noqa: E402

SCHEDULERS = ("troupe", "upstream")
RACK = "rack"
NEVER = 10**6  # the gang's pods' runtime: they do not end during the run


def log(msg: str) -> None:
    print(f"[resize {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def node_body(rack: int, i: int, cpu: int) -> dict[str, Any]:
    name = f"r{rack}-n{i}"
    res = {"cpu": str(cpu), "memory": "256Gi", "pods": "250"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, RACK: f"r{rack}"}},
        "status": {
            "capacity": res,
            "allocatable": res,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "bench"}],
        },
    }


def start_scheduler(name: str, cluster: Any, workdir: Path) -> procs.Proc:
    if name == "upstream":
        binary = localcluster.find_binary(localcluster.default_k8s_bin_dir(), "kube-scheduler")
        gates = "GenericWorkload=true,TopologyAwareWorkloadScheduling=true"
        return procs.kube_scheduler(workdir, name, binary, cluster.admin_kubeconfig, 100, 200, gates).start(120)
    return procs.troupe(workdir, name, cluster.admin_kubeconfig, 100, 200, 16).start(120)


async def wait_bound(kubelet: FakeKubelet, names: list[str], timeout: float) -> float | None:
    """When the last of `names` was first seen bound (monotonic), or None after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(n in kubelet.bound_at for n in names):
            return max(kubelet.bound_at[n] for n in names)
        await asyncio.sleep(0.05)
    return None


async def grow(
    kube: Kube, kubelet: FakeKubelet, ns: str, flavor: Flavor, args: argparse.Namespace
) -> tuple[list[float | None], int]:
    """The gang made, then grown `args.increments` times; returns each
    increment's time to bind (None: not within the timeout) and how many
    pods were created in all."""
    path, body = flavor.podgroup(ns, "gang", args.size)
    body["spec"]["schedulingConstraints"] = {"topology": [{"key": RACK}]}
    await kube.request("POST", path, body, decode=False)
    pods = f"/api/v1/namespaces/{ns}/pods"
    names = [f"gang-{i}" for i in range(args.size)]
    for n in names:
        await kube.request("POST", pods, flavor.pod(ns, n, "gang", args.pod_cpu, NEVER), decode=False)
    if await wait_bound(kubelet, names, 120) is None:
        raise RuntimeError(f"the gang of {args.size} was not bound within 120 s")
    times: list[float | None] = []
    total = args.size
    for k in range(1, args.increments + 1):
        new = [f"gang-{i}" for i in range(total, total + args.step)]
        total += args.step
        t0 = time.monotonic()
        patch = {"spec": {"schedulingPolicy": {"gang": {"minCount": total}}}}
        await kube.request("PATCH", f"{path}/gang", patch, content_type=MERGE_PATCH, decode=False)
        for n in new:
            await kube.request("POST", pods, flavor.pod(ns, n, "gang", args.pod_cpu, NEVER), decode=False)
        done = await wait_bound(kubelet, new, args.timeout)
        times.append(None if done is None else done - t0)
        if k % 10 == 0:
            log(f"{k}/{args.increments} increments, last {_s(times[-1])}")
    return times, total


async def outside(kube: Kube, ns: str, first: int) -> tuple[str, int, int]:
    """The rack most of the first `first` pods run in, and how many of the
    gang's bound pods are outside it; and how many are bound."""
    nodes, _ = await kube.list_all("/api/v1/nodes")
    rack_of = {n["metadata"]["name"]: n["metadata"]["labels"].get(RACK) for n in nodes}
    items, _ = await kube.list_all(f"/api/v1/namespaces/{ns}/pods")
    placed = {
        p["metadata"]["name"]: rack_of.get(p["spec"]["nodeName"])
        for p in items
        if p["metadata"]["name"].startswith("gang-") and p["spec"].get("nodeName")
    }
    initial = Counter(r for n, r in placed.items() if int(n.split("-")[1]) < first)
    home = initial.most_common(1)[0][0] if initial else ""
    return str(home), sum(1 for r in placed.values() if r != home), len(placed)


async def one_run(cluster: Any, name: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    ns = f"resize-{name}"
    kube = Kube(Credentials.from_kubeconfig(cluster.admin_kubeconfig), connections=32)
    flavor = FLAVORS[name]
    try:
        ns_body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
        await kube.request("POST", "/api/v1/namespaces", ns_body, ok=(409,), decode=False)
        proc = start_scheduler(name, cluster, workdir)
        log(f"{name}: ready in {proc.ready_seconds:.1f}s")
        kubelet = FakeKubelet(kube, ns, poll=0.05)
        stream = PodStream(kube, ns, args.load_rate, args.load_cpu, args.load_runtime, flavor.scheduler_name)
        stop, stop_kubelet = asyncio.Event(), asyncio.Event()
        tasks = [asyncio.create_task(kubelet.run(stop_kubelet)), asyncio.create_task(stream.run(stop))]
        t0 = time.monotonic()
        try:
            times, total = await grow(kube, kubelet, ns, flavor, args)
        finally:
            stop.set()
            stop_kubelet.set()
            await asyncio.gather(*tasks)
        elapsed = time.monotonic() - t0
        cpu = proc.cpu()
        proc.stop()
        home, out, bound = await outside(kube, ns, args.size)
        load_bound = sum(1 for n in kubelet.bound_at if n.startswith("s-"))
    finally:
        await empty_namespace(kube, ns)
        await kube.close()
    done = [t for t in times if t is not None]
    return {
        "scheduler": name,
        "seconds": elapsed,
        "increments": len(times),
        "increments_bound": len(done),
        "increment_p50": percentile(done, 0.5),
        "increment_p99": percentile(done, 0.99),
        "increment_max": max(done) if done else None,
        "increment_seconds": times,
        "gang_pods": total,
        "gang_pods_bound": bound,
        "running_rack": home,
        "pods_outside_rack": out,
        "load_pods_created": stream.created,
        "load_pods_bound": load_bound,
        "scheduler_cpu_seconds": cpu,
    }


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def table(runs: list[dict[str, Any]], args: argparse.Namespace) -> str:
    head = (
        f"A gang of {args.size} x {args.pod_cpu} CPU (topology: one rack) grown by {args.step} pods "
        f"{args.increments} times; {args.racks} racks x {args.nodes_per_rack} nodes x {args.node_cpu} CPU; "
        f"load {args.load_rate:g} pods/s x {args.load_cpu} CPU x {args.load_runtime:g} s\n\n"
    )
    rows = [
        "| scheduler | increments bound | time per increment p50 / p99 / max (s) | gang pods outside its rack "
        "| gang pods bound | load pods bound / created | scheduler CPU (s) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in runs:
        rows.append(
            f"| {r['scheduler']} | {r['increments_bound']} / {r['increments']} | "
            f"{_s(r['increment_p50'])} / {_s(r['increment_p99'])} / {_s(r['increment_max'])} | "
            f"{r['pods_outside_rack']} (rack {r['running_rack']}) | {r['gang_pods_bound']} / {r['gang_pods']} | "
            f"{r['load_pods_bound']} / {r['load_pods_created']} | {_s(r['scheduler_cpu_seconds'])} |"
        )
    by = {r["scheduler"]: r for r in runs}
    text = head + "\n".join(rows) + "\n"
    t, u = by.get("troupe"), by.get("upstream")
    if t and u and t["increment_p50"] and u["increment_p50"]:
        text += f"\ntime per increment p50, troupe ÷ upstream: {t['increment_p50'] / u['increment_p50']:.2f}\n"
    return text


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m bench resize",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    ap.add_argument("--schedulers", default=",".join(SCHEDULERS), help="comma-separated, run in this order")
    ap.add_argument("--racks", type=int, default=4)
    ap.add_argument("--nodes-per-rack", type=int, default=8)
    ap.add_argument("--node-cpu", type=int, default=16)
    ap.add_argument("--size", type=int, default=64, help="the gang's pods to begin with (default 64)")
    ap.add_argument("--step", type=int, default=8, help="pods per increment (default 8)")
    ap.add_argument("--increments", type=int, default=50, help="how many increments (default 50)")
    ap.add_argument("--pod-cpu", default="250m", help="each gang pod's CPU request (default 250m)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds an increment may take (default 60)")
    ap.add_argument("--load-rate", type=float, default=4.0, help="background pods per second (default 4)")
    ap.add_argument("--load-cpu", default="500m")
    ap.add_argument("--load-runtime", type=float, default=5.0)
    ap.add_argument("--workdir", type=Path, default=None)
    return ap


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    schedulers = [s for s in args.schedulers.split(",") if s]
    if bad := [s for s in schedulers if s not in SCHEDULERS]:
        print(f"python -m bench resize: unknown scheduler(s) {bad} (known: {', '.join(SCHEDULERS)})", file=sys.stderr)
        return 2
    stamp = time.strftime("%Y%m%d-%H%M%S")
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    workdir = (args.workdir or OUT_DIR / f"resize-{stamp}").resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    cluster = start_plane(workdir / "cluster", apiserver_args("tas"), log)
    runs: list[dict[str, Any]] = []
    try:

        async def all_runs() -> None:
            kube = Kube(Credentials.from_kubeconfig(cluster.admin_kubeconfig))
            try:
                for r in range(args.racks):
                    for i in range(args.nodes_per_rack):
                        body = node_body(r, i, args.node_cpu)
                        await kube.request("POST", "/api/v1/nodes", body, ok=(409,), decode=False)
            finally:
                await kube.close()
            for name in schedulers:
                runs.append(await one_run(cluster, name, args, workdir))

        asyncio.run(all_runs())
    finally:
        cluster.stop()
    text = table(runs, args)
    print(text)
    out = OUT_DIR / f"resize-{stamp}.json"
    out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "runs": runs}, indent=2))
    (OUT_DIR / f"resize-{stamp}.md").write_text(text)
    log(f"results: {out}")
    return 0
