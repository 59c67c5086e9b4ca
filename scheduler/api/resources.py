"""Resource names and the arithmetic of a pod's effective requests (upstream
`resource.PodRequests`), in integer units (millicores, bytes, counts).

Every amount must fit the int64 columns of the node table (api/quantity.py).
Where the caller passes a `problems` list, a field out of range is left out
(as if absent) and said there, for the object to report; without one it is
an `ObjectError`, as any quantity troupe cannot read."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .quantity import INT64_MAX, INT64_MIN, QuantityError, QuantityRangeError, format_units, range_text, to_units
from .records import ObjectError

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"

# Requests assumed for scoring when a container asks for nothing, as upstream
# (pkg/scheduler/util: DefaultMilliCPURequest, DefaultMemoryRequest).
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024


def resource_map(raw: Mapping[str, Any] | None, where: str, problems: list[str] | None = None) -> dict[str, int]:
    """`where`'s resources in troupe's units; an amount out of range is left
    out and said in `problems` where it is given (else ObjectError)."""
    out: dict[str, int] = {}
    for name, value in (raw or {}).items():
        try:
            out[name] = to_units(name, value)
        except QuantityRangeError as exc:
            if problems is None:
                raise ObjectError(f"{where}.{name}: {exc}") from None
            problems.append(f"{where}.{name}: {exc}")
        except QuantityError as exc:
            raise ObjectError(f"{where}.{name}: {exc}") from None
    return out


def _add(into: dict[str, int], other: Mapping[str, int]) -> None:
    for k, v in other.items():
        into[k] = into.get(k, 0) + v


def _max(into: dict[str, int], other: Mapping[str, int]) -> None:
    for k, v in other.items():
        if v > into.get(k, 0):
            into[k] = v


def _nz(req: Mapping[str, int], resource: str) -> int:
    """A container's request for scoring: a missing (not a zero) request counts the default."""
    if resource in req:
        return req[resource]
    return DEFAULT_MILLI_CPU_REQUEST if resource == CPU else DEFAULT_MEMORY_REQUEST


def pod_requests(spec: Mapping[str, Any], problems: list[str] | None = None) -> tuple[dict[str, int], int, int]:
    """Effective requests of a pod as upstream `resource.PodRequests`.

    Returns (requests, nonzero_cpu, nonzero_memory). Regular containers and
    restartable init containers (sidecars) add up; each classic init container
    runs alone with the sidecars started before it, so the pod needs the max
    of that and the steady state. Pod overhead is added. Pod-level
    `spec.resources.requests` replaces the container sum for the resources it
    names (PodLevelResources).

    `problems`: where amounts out of range are said (see the module); a sum
    of amounts that each fit can be out of range too, and is left out the same way.
    """
    total: dict[str, int] = {}
    nz_cpu = nz_mem = 0
    for i, c in enumerate(spec.get("containers") or []):
        req = resource_map(
            (c.get("resources") or {}).get("requests"), f"spec.containers[{i}].resources.requests", problems
        )
        _add(total, req)
        nz_cpu += _nz(req, CPU)
        nz_mem += _nz(req, MEMORY)

    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    nz_init_cpu = nz_init_mem = 0
    nz_side_cpu = nz_side_mem = 0
    for i, c in enumerate(spec.get("initContainers") or []):
        req = resource_map(
            (c.get("resources") or {}).get("requests"), f"spec.initContainers[{i}].resources.requests", problems
        )
        if c.get("restartPolicy") == "Always":
            _add(sidecars, req)
            nz_side_cpu += _nz(req, CPU)
            nz_side_mem += _nz(req, MEMORY)
            # A sidecar is itself running alongside the sidecars before it.
            _max(init_peak, sidecars)
        else:
            running = dict(sidecars)
            _add(running, req)
            _max(init_peak, running)
            nz_init_cpu = max(nz_init_cpu, nz_side_cpu + (_nz(req, CPU)))
            nz_init_mem = max(nz_init_mem, nz_side_mem + (_nz(req, MEMORY)))
    _add(total, sidecars)
    _max(total, init_peak)
    nz_cpu = max(nz_cpu + nz_side_cpu, nz_init_cpu)
    nz_mem = max(nz_mem + nz_side_mem, nz_init_mem)

    pod_level = resource_map((spec.get("resources") or {}).get("requests"), "spec.resources.requests", problems)
    for k, v in pod_level.items():
        if k in (CPU, MEMORY) or k.startswith("hugepages-"):
            total[k] = v
    if CPU in pod_level:
        nz_cpu = pod_level[CPU] or DEFAULT_MILLI_CPU_REQUEST
    if MEMORY in pod_level:
        nz_mem = pod_level[MEMORY] or DEFAULT_MEMORY_REQUEST

    overhead = resource_map(spec.get("overhead"), "spec.overhead", problems)
    _add(total, overhead)
    nz_cpu += overhead.get(CPU, 0)
    nz_mem += overhead.get(MEMORY, 0)
    return _in_range({k: v for k, v in total.items() if v}, nz_cpu, nz_mem, problems)


def _in_range(
    requests: dict[str, int], nz_cpu: int, nz_mem: int, problems: list[str] | None
) -> tuple[dict[str, int], int, int]:
    """The pod's sums as they are, where they fit the int64 columns (a few
    ints: cheap next to the parse). A sum over the pod (containers, init
    containers, overhead) can be out of range though each amount fits: left
    out (cpu and memory then score as a pod asking none of them), and said."""
    if nz_cpu <= INT64_MAX and nz_mem <= INT64_MAX:
        for v in requests.values():
            if not INT64_MIN <= v <= INT64_MAX:
                break
        else:
            return requests, nz_cpu, nz_mem
    bad = {k: v for k, v in requests.items() if not INT64_MIN <= v <= INT64_MAX}
    if nz_cpu > INT64_MAX:
        bad.setdefault(CPU, nz_cpu)
    if nz_mem > INT64_MAX:
        bad.setdefault(MEMORY, nz_mem)
    said = [
        f"spec.containers[*].resources.requests.{k}: the pod's total (with init containers and overhead) "
        f"{format_units(k, v) if k == CPU else v} is out of range ({range_text(k, v > 0)})"
        for k, v in bad.items()
    ]
    if problems is None:
        raise ObjectError(said[0])
    problems.extend(said)
    requests = {k: v for k, v in requests.items() if k not in bad}
    if CPU in bad:
        nz_cpu = DEFAULT_MILLI_CPU_REQUEST
    if MEMORY in bad:
        nz_mem = DEFAULT_MEMORY_REQUEST
    return requests, nz_cpu, nz_mem
