"""`python -m bench status-write`: what one write of each kind costs kube-apiserver.

The end-to-end benchmark is CPU-bound on a small machine: etcd,
kube-apiserver, the pod creator and the scheduler share the cores, so every
CPU-second the API server spends for a scheduler is throughput lost. This
measures, on a control plane of its own, the API server's and etcd's CPU per
request (from /proc, so TLS, authentication, admission, storage and the watch
cache are all in it) for the requests a gang scheduler makes: a pod's
binding, and the PodGroup status write that troupe (like kube-scheduler's
PostBind) makes once per group, in the three forms the API offers (merge
patch, JSON patch, PUT with resourceVersion). Pod and PodGroup creates are
measured too, for scale. Requests run `--concurrency` at a time; nothing
watches the objects.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hack import localcluster  # noqa: E402

NAMESPACE = "status-write"
GROUP_PATH = f"/apis/scheduling.troupe.dev/v1alpha2/namespaces/{NAMESPACE}/podgroups"
POD_PATH = f"/api/v1/namespaces/{NAMESPACE}/pods"


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _condition(message: str) -> dict[str, Any]:
    return {
        "type": "PodGroupScheduled",
        "status": "True",
        "reason": "Scheduled",
        "message": message,
        "lastTransitionTime": "2026-12-04T00:00:00Z",
        "observedGeneration": 1,
    }


def _pod(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"p{i}", "namespace": NAMESPACE, "labels": {"scheduling.troupe.dev/pod-group": f"g{i}"}},
        "spec": {
            "schedulerName": "troupe-scheduler",
            "containers": [
                {"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": "100m"}}}
            ],
        },
    }


async def _run(cluster: localcluster.LocalCluster, n: int, concurrency: int) -> list[tuple[str, float, float]]:
    assert cluster._apiserver is not None and cluster._etcd is not None
    apiserver, etcd = cluster._apiserver.pid, cluster._etcd.pid
    ctx = ssl.create_default_context(cafile=str(cluster.ca_path))
    rows: list[tuple[str, float, float]] = []
    gate = asyncio.Semaphore(concurrency)
    groups: dict[int, dict[str, Any]] = {}
    async with aiohttp.ClientSession(
        base_url=cluster.server,
        connector=aiohttp.TCPConnector(ssl=ctx, limit=concurrency),
        headers={"Authorization": f"Bearer {cluster.admin_token}"},
        trust_env=False,
    ) as session:

        async def request(method: str, path: str, body: Any, content_type: str = "application/json") -> Any:
            async with (
                gate,
                session.request(method, path, data=json.dumps(body), headers={"Content-Type": content_type}) as resp,
            ):
                text = await resp.text()
                if resp.status >= 300:
                    raise RuntimeError(f"{method} {path}: HTTP {resp.status}: {text[:300]}")
                return json.loads(text)

        async def measure(label: str, one: Callable[[int], Awaitable[None]]) -> None:
            await asyncio.sleep(1.0)  # let the previous round's watch-cache work settle
            a0, e0 = _cpu_seconds(apiserver), _cpu_seconds(etcd)
            await asyncio.gather(*(one(i) for i in range(n)))
            await asyncio.sleep(0.5)
            a1, e1 = _cpu_seconds(apiserver), _cpu_seconds(etcd)
            rows.append((label, 1000 * (a1 - a0) / n, 1000 * (e1 - e0) / n))
            print(f"  {label}: {rows[-1][1]:.2f} ms kube-apiserver, {rows[-1][2]:.2f} ms etcd", flush=True)

        async def create_group(i: int) -> None:
            groups[i] = await request(
                "POST",
                GROUP_PATH,
                {
                    "apiVersion": "scheduling.troupe.dev/v1alpha2",
                    "kind": "PodGroup",
                    "metadata": {"name": f"g{i}", "namespace": NAMESPACE},
                    "spec": {"schedulingPolicy": {"gang": {"minCount": 1}}},
                },
            )

        async def create_pod(i: int) -> None:
            await request("POST", POD_PATH, _pod(i))

        async def bind(i: int) -> None:
            binding = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": f"p{i}", "namespace": NAMESPACE},
                "target": {"apiVersion": "v1", "kind": "Node", "name": f"node-{i % 100}"},
            }
            await request("POST", f"{POD_PATH}/p{i}/binding", binding)

        def merge_patch(round_: int) -> Callable[[int], Awaitable[None]]:
            async def one(i: int) -> None:
                body = {"status": {"conditions": [_condition(f"1 pod(s) placed, merge {round_}")]}}
                groups[i] = await request("PATCH", f"{GROUP_PATH}/g{i}/status", body, "application/merge-patch+json")

            return one

        def json_patch(round_: int) -> Callable[[int], Awaitable[None]]:
            async def one(i: int) -> None:
                ops = [{"op": "replace", "path": "/status/conditions", "value": [_condition(f"json patch {round_}")]}]
                groups[i] = await request("PATCH", f"{GROUP_PATH}/g{i}/status", ops, "application/json-patch+json")

            return one

        def put(round_: int) -> Callable[[int], Awaitable[None]]:
            async def one(i: int) -> None:
                body = dict(groups[i], status={"conditions": [_condition(f"put {round_}")]})
                groups[i] = await request("PUT", f"{GROUP_PATH}/g{i}/status", body)

            return one

        await measure("PodGroup create", create_group)
        await measure("Pod create", create_pod)
        await measure("Pod binding (pods/binding)", bind)
        for round_ in range(2):
            await measure(f"PodGroup status, merge patch ({round_ + 1})", merge_patch(round_))
            await measure(f"PodGroup status, JSON patch ({round_ + 1})", json_patch(round_))
            await measure(f"PodGroup status, PUT with resourceVersion ({round_ + 1})", put(round_))
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench status-write",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        epilog="Prints a table: CPU milliseconds per request of kube-apiserver and etcd.",
    )
    p.add_argument("-n", type=int, default=1000, help="requests per kind (default 1000)")
    p.add_argument("--concurrency", type=int, default=16, help="requests in flight (default 16, as troupe binds)")
    p.add_argument("--workdir", type=Path, default=None, help="control plane state (default: a temporary directory)")
    args = p.parse_args(argv)
    print("starting etcd + kube-apiserver", flush=True)
    # No controller manager: its watches would be in the API server's CPU.
    cluster = localcluster.LocalCluster(workdir=args.workdir, controller_manager=False).start(timeout=120)
    try:
        cluster.kubectl("apply", "-f", str(ROOT / "crds"), timeout=120)
        cluster.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s", timeout=90)
        cluster.kubectl("create", "namespace", NAMESPACE)
        print(f"{args.n} requests of each kind, {args.concurrency} in flight", flush=True)
        rows = asyncio.run(_run(cluster, args.n, args.concurrency))
    finally:
        cluster.stop()
    bind_ms = next(ms for label, ms, _ in rows if label.startswith("Pod binding"))
    print("\n| request | kube-apiserver CPU ms | etcd CPU ms | ÷ a binding (kube-apiserver) |")
    print("| --- | --- | --- | --- |")
    for label, ms, etcd_ms in rows:
        print(f"| {label} | {ms:.2f} | {etcd_ms:.2f} | {ms / bind_ms:.1f}× |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
