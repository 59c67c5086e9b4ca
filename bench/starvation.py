"""`python -m bench starvation`: large gangs behind a stream of small work,
on a real kube-apiserver, side by side in one run:

  troupe      troupe with reservations (Reservation's starvationSeconds = --starvation)
  troupe-off  troupe with starvationSeconds: 0 (no reservations: troupe before them)
  upstream    kube-scheduler v1.37.2, GenericWorkload (its GangScheduling), native PodGroups

Every run gets the same load, on the same nodes, in a fresh namespace: a
stream of short 1-CPU pods and small gangs keeps the cluster busy, and
large gangs (all of the cluster's CPU by default) arrive at fixed times.
bench/kubelet.py's FakeKubelet starts bound pods and deletes them when their
runtime is over. Reported per scheduler: the large gangs' wait (created ->
all pods bound: p50, p99, max, and how many never started within the run),
the small pods' throughput (bound per second), the cluster's utilization
(running pods' CPU requests over the cluster's CPU, over the run), and the
most CPU any node ever ran (never above its allocatable).

The goal: every large gang starts within starvationSeconds + the time its
room takes to drain (the longest runtime in the load) + one scheduling
backoff (10 s), while utilization stays within 10 % of troupe-off.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from . import e2e_procs as procs
from .e2e_kube import Credentials, Kube
from .e2e_workload import IMAGE, NATIVE_PODGROUP_API, TROUPE_API_VERSION, TROUPE_SCHEDULER_NAME
from .kubelet import FakeKubelet, PodStream, pod_body

ROOT = Path(__file__).resolve().parents[1]
OUT_DIR = Path(__file__).resolve().parent / "out"
sys.path.insert(0, str(ROOT / "hack"))
import localcluster  # noqa: E402

SCHEDULERS = ("troupe", "troupe-off", "upstream")
BACKOFF = 10.0  # podMaxBackoffSeconds, troupe's and upstream's default
APISERVER_ARGS = [
    "--feature-gates=GenericWorkload=true",
    "--runtime-config=scheduling.k8s.io/v1beta1=true,scheduling.k8s.io/v1alpha3=true",
    "--enable-priority-and-fairness=false",
]


def log(msg: str) -> None:
    print(f"[starvation {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Load:
    nodes: int
    node_cpu: int
    duration: float  # seconds of load per run
    small_rate: float  # 1-CPU pods per second
    small_runtime: float
    small_gang_every: float  # a gang of 2 x 1 CPU every this many seconds
    small_gang_runtime: float
    large_every: float  # a large gang every this many seconds, the first at large_every / 3
    large_pods: int  # pods of node_cpu CPU each
    large_runtime: float

    @property
    def longest_runtime(self) -> float:
        return max(self.small_runtime, self.small_gang_runtime, self.large_runtime)


@dataclass(frozen=True)
class Flavor:
    scheduler_name: str
    podgroup_api: str
    native: bool  # spec.schedulingGroup (else troupe's label)

    def podgroup(self, ns: str, name: str, size: int) -> tuple[str, dict[str, Any]]:
        body = {
            "apiVersion": self.podgroup_api,
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"schedulingPolicy": {"gang": {"minCount": size}}},
        }
        return f"/apis/{self.podgroup_api}/namespaces/{ns}/podgroups", body

    def pod(self, ns: str, name: str, group: str, cpu: str, runtime: float) -> dict[str, Any]:
        from scheduler.api.constants import POD_GROUP_LABEL

        body = pod_body(ns, name, cpu, runtime, self.scheduler_name, None if self.native else (POD_GROUP_LABEL, group))
        body["spec"]["containers"][0]["image"] = IMAGE
        if self.native:
            body["spec"]["schedulingGroup"] = {"podGroupName": group}
        return body


FLAVORS = {
    "troupe": Flavor(TROUPE_SCHEDULER_NAME, TROUPE_API_VERSION, False),
    "troupe-off": Flavor(TROUPE_SCHEDULER_NAME, TROUPE_API_VERSION, False),
    "upstream": Flavor("default-scheduler", NATIVE_PODGROUP_API, True),
}


def node_body(i: int, cpu: int) -> dict[str, Any]:
    res = {"cpu": str(cpu), "memory": "64Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": f"node-{i}", "labels": {"kubernetes.io/hostname": f"node-{i}"}},
        "status": {
            "capacity": res,
            "allocatable": res,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "bench"}],
        },
    }


def troupe_config(starvation: float) -> str:
    return (
        "apiVersion: scheduling.troupe.dev/v1alpha1\n"
        "kind: SchedulerConfiguration\n"
        "profiles:\n- schedulerName: troupe-scheduler\n"
        "  pluginConfig:\n  - name: Reservation\n"
        f"    args: {{starvationSeconds: {starvation:g}}}\n"
        "clientConnection: {qps: 100, burst: 200, bindConcurrency: 16}\n"
    )


def start_scheduler(name: str, cluster: Any, workdir: Path, starvation: float) -> procs.Proc:
    if name == "upstream":
        binary = localcluster.find_binary(localcluster.default_k8s_bin_dir(), "kube-scheduler")
        return procs.kube_scheduler(workdir, name, binary, cluster.admin_kubeconfig, 100, 200).start(120)
    proc = procs.troupe(workdir, name, cluster.admin_kubeconfig, 100, 200, 16)
    cfg = workdir / f"{name}-config.yaml"
    cfg.write_text(troupe_config(starvation if name == "troupe" else 0))
    return proc.start(120)


async def gangs(
    kube: Kube,
    ns: str,
    flavor: Flavor,
    prefix: str,
    every: float,
    first: float,
    size: int,
    cpu: str,
    runtime: float,
    stop: asyncio.Event,
    created: dict[str, float],
    last: float = float("inf"),
) -> None:
    """A gang `<prefix>-<n>` of `size` pods every `every` seconds, the first
    after `first`, none later than `last` seconds."""
    t0 = time.monotonic()
    n, next_at = 0, t0 + first
    while next_at - t0 <= last:
        try:
            await asyncio.wait_for(stop.wait(), max(next_at - time.monotonic(), 0))
            return
        except TimeoutError:
            pass
        name = f"{prefix}-{n}"
        path, body = flavor.podgroup(ns, name, size)
        await kube.request("POST", path, body, decode=False)
        for i in range(size):
            pod = flavor.pod(ns, f"{name}-{i}", name, cpu, runtime)
            await kube.request("POST", f"/api/v1/namespaces/{ns}/pods", pod, decode=False)
        created[name] = time.monotonic()
        n += 1
        next_at += every


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, max(0, round(q * (len(values) - 1))))]


async def one_run(cluster: Any, name: str, load: Load, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    ns = f"starve-{name}"
    kube = Kube(Credentials.from_kubeconfig(cluster.admin_kubeconfig), connections=32)
    flavor = FLAVORS[name]
    try:
        ns_body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
        await kube.request("POST", "/api/v1/namespaces", ns_body, ok=(409,), decode=False)
        proc = start_scheduler(name, cluster, workdir, args.starvation)
        log(f"{name}: ready in {proc.ready_seconds:.1f}s; {load.duration:.0f}s of load")
        kubelet = FakeKubelet(kube, ns)
        stream = PodStream(kube, ns, load.small_rate, "1", load.small_runtime, flavor.scheduler_name)
        stop, stop_kubelet = asyncio.Event(), asyncio.Event()
        large: dict[str, float] = {}
        small_gangs: dict[str, float] = {}
        t0 = time.monotonic()
        tasks = [
            asyncio.create_task(kubelet.run(stop_kubelet)),
            asyncio.create_task(stream.run(stop)),
            asyncio.create_task(
                gangs(
                    kube,
                    ns,
                    flavor,
                    "sg",
                    load.small_gang_every,
                    1.0,
                    2,
                    "1",
                    load.small_gang_runtime,
                    stop,
                    small_gangs,
                )
            ),
            asyncio.create_task(
                gangs(
                    kube,
                    ns,
                    flavor,
                    "lg",
                    load.large_every,
                    load.large_every / 3,
                    load.large_pods,
                    str(load.node_cpu),
                    load.large_runtime,
                    stop,
                    large,
                    # none so late that it could not start within the bound before the run ends
                    last=load.duration - (args.starvation + load.longest_runtime + BACKOFF),
                )
            ),
        ]
        while time.monotonic() - t0 < load.duration:
            await asyncio.sleep(min(15.0, load.duration - (time.monotonic() - t0)))
            started = sum(1 for g in large if _gang_bound(kubelet, g, load.large_pods) is not None)
            log(
                f"{name}: {time.monotonic() - t0:.0f}s, {stream.created} small pods, large gangs {started}/{len(large)} started"
            )
            for t in tasks:
                if t.done():
                    t.result()
        stop.set()
        stop_kubelet.set()
        await asyncio.gather(*tasks)
        elapsed = time.monotonic() - t0
        cpu = proc.cpu()
        proc.stop()
        waiting = [g for g in large if _gang_bound(kubelet, g, load.large_pods) is None]
        why = await _why_waiting(kube, ns, waiting[0]) if waiting else None
    finally:
        await empty_namespace(kube, ns)
        await kube.close()

    waits, never = [], 0
    for g, created in large.items():
        bound = _gang_bound(kubelet, g, load.large_pods)
        if bound is None:
            never += 1
        else:
            waits.append(bound - created)
    small_bound = sum(1 for n in kubelet.bound_at if n.startswith("s-"))
    bound_limit = args.starvation + load.longest_runtime + BACKOFF
    return {
        "scheduler": name,
        "seconds": elapsed,
        "large_gangs": len(large),
        "large_never_started": never,
        "large_wait_p50": percentile(waits, 0.5),
        "large_wait_p99": percentile(waits, 0.99),
        "large_wait_max": max(waits) if waits else None,
        "large_within_bound": sum(1 for w in waits if w <= bound_limit),
        "bound_limit_seconds": bound_limit,
        "small_pods_bound_per_s": small_bound / elapsed,
        "utilization": kubelet.busy_cpu_seconds / (load.nodes * load.node_cpu * elapsed),
        "peak_node_cpu_milli": max(kubelet.peak_cpu_by_node.values(), default=0),
        "scheduler_cpu_seconds": cpu,
        "first_waiting_gang_says": why,
    }


async def _why_waiting(kube: Kube, ns: str, gang: str) -> str | None:
    """What the first pod of a gang that never started says (its PodScheduled condition)."""
    pod = await kube.request("GET", f"/api/v1/namespaces/{ns}/pods/{gang}-0", ok=(404,))
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled":
            return f"{gang}: {cond.get('reason')}: {cond.get('message')}"
    return f"{gang}: no PodScheduled condition"


def _gang_bound(kubelet: FakeKubelet, gang: str, size: int) -> float | None:
    times = [t for n, t in kubelet.bound_at.items() if n.startswith(f"{gang}-")]
    return max(times) if len(times) >= size else None


def start_plane(cwd: Path, apiserver_args: list[str], log: Callable[[str], None]) -> Any:
    """A fresh etcd + kube-apiserver (no kube-controller-manager) in `cwd`,
    with troupe's CRDs applied and Established; the caller stops it."""
    shutil.rmtree(cwd, ignore_errors=True)
    cluster = localcluster.LocalCluster(
        workdir=cwd, extra_apiserver_args=apiserver_args, keep=True, controller_manager=False
    )
    log(f"starting etcd + kube-apiserver ({cwd})")
    cluster.start(timeout=120)
    try:
        cluster.kubectl("apply", "-f", str(ROOT / "crds"), timeout=120)
        cluster.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s", timeout=90)
    except BaseException:
        cluster.stop()
        raise
    return cluster


async def empty_namespace(kube: Kube, ns: str) -> None:
    """Every pod of the namespace gone (force-deleted), so the next run starts on empty nodes."""
    body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
    await kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods", body, decode=False)
    for _ in range(300):
        items, _ = await kube.list_all(f"/api/v1/namespaces/{ns}/pods")
        if not items:
            return
        await asyncio.sleep(0.2)


def table(runs: list[dict[str, Any]], load: Load, node_cpu_milli: int) -> str:
    def f(v: Any, fmt: str = "{:.1f}") -> str:
        return "-" if v is None else fmt.format(v)

    head = (
        "| scheduler | large gangs started / arrived | never started | wait p50 / p99 / max (s) | "
        f"within bound | small pods bound/s | utilization | peak node CPU (of {node_cpu_milli}m) |"
    )
    rows = [head, "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in runs:
        started = r["large_gangs"] - r["large_never_started"]
        rows.append(
            f"| {r['scheduler']} | {started} / {r['large_gangs']} | {r['large_never_started']} | "
            f"{f(r['large_wait_p50'])} / {f(r['large_wait_p99'])} / {f(r['large_wait_max'])} | "
            f"{r['large_within_bound']} of {r['large_gangs']} (≤ {r['bound_limit_seconds']:.0f}s) | "
            f"{r['small_pods_bound_per_s']:.2f} | {r['utilization']:.0%} | {r['peak_node_cpu_milli']}m |"
        )
    by = {r["scheduler"]: r for r in runs}
    if "troupe" in by and "troupe-off" in by and by["troupe-off"]["utilization"]:
        ratio = by["troupe"]["utilization"] / by["troupe-off"]["utilization"]
        rows.append(f"\nutilization, troupe ÷ troupe-off: {ratio:.2f} (goal ≥ 0.90)")
    return "\n".join(rows) + "\n"


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m bench starvation",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    ap.add_argument("--schedulers", default=",".join(SCHEDULERS), help="comma-separated, run in this order")
    ap.add_argument("--starvation", type=float, default=30.0, help="troupe's starvationSeconds (default 30)")
    ap.add_argument("--nodes", type=int, default=6)
    ap.add_argument("--node-cpu", type=int, default=4)
    ap.add_argument("--duration", type=float, default=240.0, help="seconds of load per scheduler (default 240)")
    ap.add_argument("--small-rate", type=float, default=3.0, help="1-CPU pods per second (default 3)")
    ap.add_argument("--small-runtime", type=float, default=4.0)
    ap.add_argument("--large-every", type=float, default=60.0, help="seconds between large gangs (default 60)")
    ap.add_argument("--large-pods", type=int, default=0, help="pods of --node-cpu each (default: one per node)")
    ap.add_argument("--large-runtime", type=float, default=10.0)
    ap.add_argument("--workdir", type=Path, default=None)
    return ap


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    schedulers = [s for s in args.schedulers.split(",") if s]
    if bad := [s for s in schedulers if s not in SCHEDULERS]:
        print(
            f"python -m bench starvation: unknown scheduler(s) {bad} (known: {', '.join(SCHEDULERS)})", file=sys.stderr
        )
        return 2
    load = Load(
        nodes=args.nodes,
        node_cpu=args.node_cpu,
        duration=args.duration,
        small_rate=args.small_rate,
        small_runtime=args.small_runtime,
        small_gang_every=5.0,
        small_gang_runtime=6.0,
        large_every=args.large_every,
        large_pods=args.large_pods or args.nodes,
        large_runtime=args.large_runtime,
    )
    stamp = time.strftime("%Y%m%d-%H%M%S")
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    workdir = (args.workdir or OUT_DIR / f"starvation-{stamp}").resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    cluster = start_plane(workdir / "cluster", APISERVER_ARGS, log)
    runs: list[dict[str, Any]] = []
    try:

        async def all_runs() -> None:
            kube = Kube(Credentials.from_kubeconfig(cluster.admin_kubeconfig))
            try:
                for i in range(load.nodes):
                    await kube.request("POST", "/api/v1/nodes", node_body(i, load.node_cpu), ok=(409,), decode=False)
            finally:
                await kube.close()
            for name in schedulers:
                runs.append(await one_run(cluster, name, load, args, workdir))

        asyncio.run(all_runs())
    finally:
        cluster.stop()
    text = table(runs, load, load.node_cpu * 1000)
    print(text)
    out = OUT_DIR / f"starvation-{stamp}.json"
    out.write_text(json.dumps({"load": asdict(load), "starvation": args.starvation, "runs": runs}, indent=2))
    (OUT_DIR / f"starvation-{stamp}.md").write_text(text)
    log(f"results: {out}")
    return 0
