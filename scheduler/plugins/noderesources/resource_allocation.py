"""What the resource scorers read of a pod and of the nodes (upstream
noderesources/resource_allocation.go), shared by NodeResourcesFit and
NodeResourcesBalancedAllocation."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from ...api.records import PodInfo
from ...api.resources import CPU, EPHEMERAL_STORAGE, MEMORY
from ...cluster.snapshot import Snapshot
from ...framework.interface import CycleState
from .args import ResourceSpec

MAX_NODE_SCORE = 100


def go_div(a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray:
    """Go's integer division (truncates toward zero; numpy's // floors)."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    q = np.abs(a) // np.abs(b)
    out: np.ndarray = np.where((a < 0) != (b < 0), -q, q)
    return out


def is_scalar_resource(name: str) -> bool:
    """Upstream schedutil.IsScalarResourceName: extended (prefixed, not
    *kubernetes.io/), hugepages-*, prefixed native (*kubernetes.io/*),
    attachable-volumes-*. Those are left out of scoring when the pod asks none."""
    if name.startswith("hugepages-") or name.startswith("attachable-volumes-"):
        return True
    return "/" in name and not name.startswith("requests.")


def pod_request(pod: PodInfo, resource: str, use_requested: bool) -> int:
    """Upstream calculatePodResourceRequest: non-zero cpu/memory unless `use_requested`."""
    if not use_requested:
        if resource == CPU:
            return pod.nonzero_cpu
        if resource == MEMORY:
            return pod.nonzero_memory
    return int(pod.requests.get(resource, 0))


def resource_allocation(
    pod: PodInfo,
    snapshot: Snapshot,
    rows: np.ndarray,
    specs: Sequence[ResourceSpec],
    use_requested: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Upstream calculateNodeAllocatableRequest over `rows` at once.

    Returns (pod_requests[k], requested[n, k], allocated[n, k], allocatable[n, k])
    for the k configured resources; allocatable is 0 where upstream leaves the
    entry out (scorers skip those). Costs O(n * k), numpy only.
    """
    n, k = len(rows), len(specs)
    pod_req = np.zeros(k, dtype=np.int64)
    allocated = np.zeros((n, k), dtype=np.int64)
    allocatable = np.zeros((n, k), dtype=np.int64)
    for j, spec in enumerate(specs):
        name = spec.name
        amount = pod_request(pod, name, use_requested)
        pod_req[j] = amount
        if amount == 0 and is_scalar_resource(name):
            continue
        if name not in (CPU, MEMORY, EPHEMERAL_STORAGE) and not is_scalar_resource(name):
            continue  # "pods" and unknown unprefixed names: not in upstream's scalar map
        col = snapshot.column.get(name)
        if col is None:
            continue  # no node offers it
        allocatable[:, j] = snapshot.alloc[rows, col]
        if name in (CPU, MEMORY) and not use_requested:
            allocated[:, j] = snapshot.nonzero[rows, 0 if name == CPU else 1]
        else:
            allocated[:, j] = snapshot.req[rows, col]
    has = allocatable > 0
    allocated = np.where(has, allocated, 0)
    requested = np.where(has, allocated + pod_req, 0)
    return pod_req, requested, allocated, allocatable


def cpu_memory_rows(
    state: CycleState, snapshot: Snapshot, rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """(allocatable, requested, non-zero requested) of cpu and memory for `rows`,
    and whether every row has both: gathered once per pod and shared by the
    resource scorers (NodeTable keeps cpu, memory in columns 0, 1)."""
    hit = state.get("noderesources/cpu-memory")
    if hit is not None and hit[0] is rows:
        cached: tuple[np.ndarray, np.ndarray, np.ndarray, bool] = hit[1]
        return cached
    alloc = snapshot.alloc[rows, :2]
    out = (alloc, snapshot.req[rows, :2], snapshot.nonzero[rows], bool((alloc > 0).all()))
    state["noderesources/cpu-memory"] = (rows, out)
    return out


def requests_sign(pod: PodInfo) -> Hashable:
    """The part of a pod the resource plugins read: its requests, and the
    non-zero cpu/memory the scores count for containers asking nothing."""
    return tuple(sorted(pod.requests.items())), pod.nonzero_cpu, pod.nonzero_memory
