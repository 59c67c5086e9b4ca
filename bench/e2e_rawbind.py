"""The raw bind loop: the physical limit of binding on this API server.

``python -m bench.e2e_rawbind --kubeconfig K --namespace NS [...]`` lists the
nodes once, watches the namespace's unbound pods
(``fieldSelector=spec.nodeName=``) and POSTs ``pods/binding`` for every pod
with its schedulerName, to the next node round-robin. No scheduling, no gang
rule, no status writes, no events. With ``--domain-size N`` (shape t: the
nodes, sorted by name, are racks of N) the pods of group g go round-robin
over the nodes of rack g % racks, so each gang stays in one rack, as a
topology-aware scheduler must place it (the check then counts 0 for raw).
With ``--group-status SIZE`` it also writes each group's status once its
SIZE pods are bound (``PodGroupScheduled=True``, as kube-scheduler's PostBind
and troupe do): the raw loop plus the one write per group that any
scheduler keeping the PodGroup contract pays; with ``--tree`` (shape l) the
group's SIZE pods are a replica and the write goes to each of its groups:
the two leaf PodGroups, ``gNNNNN-leader`` and ``gNNNNN-workers``, and the
root CompositePodGroup ``gNNNNN`` (``CompositePodGroupInitiallyScheduled``:
kube-scheduler writes none, troupe and the CompositePodGroup contract do).
It uses the same client limits as troupe's
binder: a ``scheduler.runtime.ratelimit.TokenBucket`` (QPS/burst) and a fixed
number of binds in flight (troupe's ``bindConcurrency``). HTTP is plain
aiohttp (bench/e2e_kube.py), not kubernetes_asyncio.

It runs as its own process, as the two schedulers do, and touches the
``--ready-file`` once its watch is open. SIGTERM stops it; it prints
``bound N, conflicts N, errors N`` at exit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from pathlib import Path

import aiohttp

from scheduler.api.composite import COMPOSITE_SCHEDULED
from scheduler.runtime.ratelimit import TokenBucket

from .e2e_kube import ApiError, Credentials, Kube
from .e2e_workload import (
    NATIVE_COMPOSITE_API,
    NATIVE_PODGROUP_API,
    RAW_SCHEDULER_NAME,
    child_name,
    group_name,
    parse_pod_name,
    scheduled_condition_type,
)

TREE_CHILDREN = ("leader", "workers")  # shape l's leaf PodGroups per replica


class RawBinder:
    def __init__(
        self, kube: Kube, ns: str, scheduler_name: str, qps: float, burst: int, concurrency: int, domain_size: int = 0
    ) -> None:
        self.kube = kube
        self.ns = ns
        self.scheduler_name = scheduler_name
        self.bucket = TokenBucket(qps, burst)
        self.concurrency = concurrency
        self.queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        self.seen: set[str] = set()
        self.nodes: list[str] = []
        self.next_node = 0
        self.domain_size = domain_size
        self.next_in_domain: dict[int, int] = {}
        self.bound = self.conflicts = self.errors = 0
        self.rv = ""
        self.podgroup_api = NATIVE_PODGROUP_API  # --podgroup-api: whose PodGroups' status to write
        self.composite_api = NATIVE_COMPOSITE_API  # --composite-api: and whose CompositePodGroups' (--tree)
        self.group_size = 0  # --group-status: write a group's status once this many of its pods are bound
        self.tree = False  # --tree: write the status of the replica's leaf PodGroups instead
        self.bound_in_group: dict[int, int] = {}
        self.status_writes = 0
        self.status_tasks: set[asyncio.Task[None]] = set()

    def offer(self, pod: dict) -> None:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        if spec.get("nodeName") or spec.get("schedulerName") != self.scheduler_name or meta.get("deletionTimestamp"):
            return
        uid = meta["uid"]
        if uid in self.seen:
            return
        self.seen.add(uid)
        self.queue.put_nowait((meta["name"], uid))

    def pick(self, name: str) -> str:
        group = parse_pod_name(name)
        if self.domain_size and group is not None and len(self.nodes) >= self.domain_size:
            domain = group[0] % (len(self.nodes) // self.domain_size)
            k = self.next_in_domain.get(domain, 0)
            self.next_in_domain[domain] = k + 1
            return self.nodes[domain * self.domain_size + k % self.domain_size]
        node = self.nodes[self.next_node % len(self.nodes)]
        self.next_node += 1
        return node

    async def bind_worker(self) -> None:
        path = f"/api/v1/namespaces/{self.ns}/pods/{{}}/binding"
        while True:
            name, uid = await self.queue.get()
            node = self.pick(name)
            body = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": name, "namespace": self.ns, "uid": uid},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            }
            await self.bucket.acquire()
            try:
                r = await self.kube.request("POST", path.format(name), body, ok=(409,), decode=False)
                if r is not None:
                    self.conflicts += 1
                else:
                    self.bound += 1
                    self.group_bound(name)
            except (TimeoutError, ApiError, aiohttp.ClientError) as exc:
                self.errors += 1
                print(f"bind {name} -> {node}: {exc}", file=sys.stderr, flush=True)

    def group_bound(self, name: str) -> None:
        """Count the bind; the group's last one starts its status write (beside the binds, as troupe's)."""
        parsed = parse_pod_name(name)
        if not self.group_size or parsed is None:
            return
        g = parsed[0]
        self.bound_in_group[g] = n = self.bound_in_group.get(g, 0) + 1
        if n == self.group_size:
            podgroups = f"/apis/{self.podgroup_api}/namespaces/{self.ns}/podgroups"
            scheduled = scheduled_condition_type(self.podgroup_api)
            writes = [(f"{podgroups}/{group_name(g)}/status", scheduled)]
            if self.tree:
                composites = f"/apis/{self.composite_api}/namespaces/{self.ns}/compositepodgroups"
                writes = [(f"{podgroups}/{child_name(g, c)}/status", scheduled) for c in TREE_CHILDREN]
                writes.append((f"{composites}/{group_name(g)}/status", COMPOSITE_SCHEDULED))
            for path, type_ in writes:
                task = asyncio.create_task(self.write_group_status(path, type_, n))
                self.status_tasks.add(task)
                task.add_done_callback(self.status_tasks.discard)

    async def write_group_status(self, path: str, type_: str, n: int) -> None:
        condition = {
            "type": type_,
            "status": "True",
            "reason": "Scheduled",
            "message": f"{n} pod(s) bound",
            "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        await self.bucket.acquire()
        try:
            await self.kube.request(
                "PATCH",
                path,
                {"status": {"conditions": [condition]}},
                content_type="application/merge-patch+json",
                decode=False,
            )
            self.status_writes += 1
        except (TimeoutError, ApiError, aiohttp.ClientError) as exc:
            self.errors += 1
            print(f"status {path}: {exc}", file=sys.stderr, flush=True)

    async def list_pods(self) -> None:
        items, self.rv = await self.kube.list_all(
            f"/api/v1/namespaces/{self.ns}/pods", params={"fieldSelector": "spec.nodeName="}
        )
        for pod in items:
            self.offer(pod)

    async def watch(self, ready_file: Path | None) -> None:
        url = f"{self.kube.creds.server}/api/v1/namespaces/{self.ns}/pods"
        while True:
            params = {
                "watch": "1",
                "fieldSelector": "spec.nodeName=",
                "resourceVersion": self.rv,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": "3600",
            }
            async with self.kube.session.get(
                url, params=params, timeout=aiohttp.ClientTimeout(total=None, sock_read=None)
            ) as resp:
                if resp.status == 410:
                    await self.list_pods()
                    continue
                if resp.status != 200:
                    raise RuntimeError(f"watch: HTTP {resp.status}: {(await resp.text())[:300]}")
                if ready_file is not None:
                    ready_file.write_text("ready\n")
                    ready_file = None
                buf = b""
                gone = False
                async for chunk in resp.content.iter_any():
                    buf += chunk
                    *lines, buf = buf.split(b"\n")
                    for line in lines:
                        if not line:
                            continue
                        ev = json.loads(line)
                        obj = ev.get("object") or {}
                        if ev.get("type") == "ERROR":
                            if obj.get("code") == 410:
                                gone = True
                                break
                            raise RuntimeError(f"watch error: {obj}")
                        rv = (obj.get("metadata") or {}).get("resourceVersion")
                        if rv:
                            self.rv = rv
                        if ev.get("type") in ("ADDED", "MODIFIED"):
                            self.offer(obj)
                    if gone:
                        break
                if gone:
                    await self.list_pods()

    async def run(self, ready_file: Path | None) -> None:
        nodes, _ = await self.kube.list_all("/api/v1/nodes")
        self.nodes = sorted(n["metadata"]["name"] for n in nodes)
        if not self.nodes:
            raise RuntimeError("no nodes")
        await self.list_pods()
        workers = [asyncio.create_task(self.bind_worker()) for _ in range(self.concurrency)]
        try:
            await self.watch(ready_file)
        finally:
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)


async def amain(args: argparse.Namespace) -> int:
    kube = Kube(Credentials.from_kubeconfig(args.kubeconfig), connections=args.concurrency + 4)
    binder = RawBinder(
        kube, args.namespace, args.scheduler_name, args.qps, args.burst, args.concurrency, args.domain_size
    )
    binder.group_size = args.group_status
    binder.tree = args.tree
    binder.podgroup_api = args.podgroup_api
    binder.composite_api = args.composite_api
    task = asyncio.create_task(binder.run(args.ready_file))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    rc = 0
    try:
        await task
    except asyncio.CancelledError:
        pass
    except Exception as exc:  # noqa: BLE001
        print(f"raw binder failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        rc = 1
    finally:
        await kube.close()
    print(
        f"raw binder: bound {binder.bound}, conflicts {binder.conflicts}, errors {binder.errors}, "
        f"nodes {len(binder.nodes)}, group status writes {binder.status_writes}",
        flush=True,
    )
    return rc


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.e2e_rawbind", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--kubeconfig", required=True, help="token kubeconfig (the benchmark passes the admin one)")
    p.add_argument("--namespace", required=True, help="namespace whose pods to bind")
    p.add_argument(
        "--scheduler-name",
        default=RAW_SCHEDULER_NAME,
        help=f"bind only pods with this schedulerName ({RAW_SCHEDULER_NAME})",
    )
    p.add_argument("--qps", type=float, default=1000.0, help="client-side QPS of the token bucket (1000)")
    p.add_argument("--burst", type=int, default=1000, help="token bucket burst (1000)")
    p.add_argument("--concurrency", type=int, default=16, help="binds in flight (16, troupe's bindConcurrency default)")
    p.add_argument("--ready-file", type=Path, help="written once the watch is open")
    p.add_argument(
        "--domain-size",
        type=int,
        default=0,
        metavar="N",
        help="nodes (sorted by name) form domains of N: group g's pods go to domain g %% domains (0: plain round-robin)",
    )
    p.add_argument(
        "--group-status",
        type=int,
        default=0,
        metavar="SIZE",
        help="write each PodGroup's status (PodGroupScheduled=True) once SIZE of its pods are bound (0: never)",
    )
    p.add_argument(
        "--tree",
        action="store_true",
        help="with --group-status: a group is a replica of shape l; write the status of its leaf PodGroups "
        "gNNNNN-leader and gNNNNN-workers and of its root CompositePodGroup gNNNNN (one write each)",
    )
    p.add_argument(
        "--podgroup-api",
        default=NATIVE_PODGROUP_API,
        help=f"group/version of the PodGroups whose status --group-status writes ({NATIVE_PODGROUP_API}; "
        "troupe's own for the raw-troupe run)",
    )
    p.add_argument(
        "--composite-api",
        default=NATIVE_COMPOSITE_API,
        help=f"group/version of the CompositePodGroups --tree writes ({NATIVE_COMPOSITE_API}; troupe's own for "
        "the raw-troupe run)",
    )
    return asyncio.run(amain(p.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
