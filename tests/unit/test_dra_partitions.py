"""Partitionable devices (Kubernetes 1.36 beta, on by default;
DRAPartitionableDevices): a pool's `sharedCounters` and its devices'
`consumesCounters`. A device is allocated only while every counter of its
pool, less what allocated devices and this allocation consume, stays at or
above zero (upstream checkAvailableCounters): a whole GPU and its halves
never run at once. Before, troupe ignored the counters and handed out a
GPU and its partitions together."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from typing import Any

from scheduler.api.dra import DeviceRequest, RequestSlot, ResourceClaim, parse_resource_slice
from scheduler.cluster.dra import DraStore
from scheduler.plugins.dynamicresources.allocator import CounterBook, allocate

from .test_dra_plugin import claim, gpu_pod, s  # noqa: F401 (fixture)
from .test_runtime_scheduler import drain, node

DRIVER = "gpu.example.com"


def counters(node_name: str, memory: str = "80Gi") -> dict[str, Any]:
    """The slice with the GPU's counter set (a slice has devices or counters)."""
    return {
        "metadata": {"name": f"{node_name}-counters"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 2},
            "sharedCounters": [{"name": "gpu-0", "counters": {"memory": {"value": memory}}}],
        },
    }


def partitions(node_name: str, consumes: str = "gpu-0") -> dict[str, Any]:
    """gpu-0 whole (80Gi of its counter) and its two halves (40Gi each)."""

    def device(name: str, size: str, memory: str) -> dict[str, Any]:
        return {
            "name": name,
            "attributes": {"size": {"string": size}},
            "consumesCounters": [{"counterSet": consumes, "counters": {"memory": {"value": memory}}}],
        }

    return {
        "metadata": {"name": f"{node_name}-gpus"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 2},
            "devices": [
                device("gpu-0", "full", "80Gi"),
                device("gpu-0-a", "half", "40Gi"),
                device("gpu-0-b", "half", "40Gi"),
            ],
        },
    }


def store(*slices: dict[str, Any]) -> DraStore:
    out = DraStore()
    for body in slices:
        out.upsert_slice(parse_resource_slice(body))
    return out


def sized(size: str, count: int = 1) -> ResourceClaim:
    r = DeviceRequest("gpu", size, (), "ExactCount", count)
    return ResourceClaim("default", f"c-{size}", f"uid-{size}", "1", (RequestSlot("gpu", (r,)),))


def by_size(request: Any, device: Any) -> bool:
    return device.attributes.get(f"{DRIVER}/size") == request.device_class


def run(st: DraStore, claims: list[ResourceClaim], in_use: set[Any] | None = None) -> Any:
    used = in_use or set()
    book = CounterBook(st.counter_sets, st.partitioned_devices, used)
    return allocate(claims, st.devices_for("node-0", {}), used, by_size, counters=book)


def test_a_whole_gpu_and_its_halves_are_never_allocated_together() -> None:
    st = store(counters("node-0"), partitions("node-0"))
    assert st.partitioned
    both = run(st, [sized("half", 2)])
    assert both.results is not None and [r.device for r in both.results[0]] == ["gpu-0-a", "gpu-0-b"]
    out = run(st, [sized("full"), sized("half")])
    assert out.results is None and out.reason == "device gpu-0-a needs 40Gi of counter gpu-0/memory, 0 left"


def test_counters_consumed_by_devices_in_use_are_not_there() -> None:
    st = store(counters("node-0"), partitions("node-0"))
    half_in_use = {(DRIVER, "node-0", "gpu-0-a")}
    assert run(st, [sized("full")], half_in_use).results is None
    out = run(st, [sized("half")], half_in_use)
    assert out.results is not None and out.results[0][0].device == "gpu-0-b"


def test_an_overdrawn_counter_blocks_its_whole_pool_as_upstream() -> None:
    """The pool's counters shrank under allocated devices (80Gi -> 40Gi
    with the whole GPU allocated): no device of the pool fits, even one that
    consumes another counter set."""
    body = counters("node-0", memory="40Gi")
    body["spec"]["sharedCounters"].append({"name": "gpu-1", "counters": {"memory": {"value": "80Gi"}}})
    st = store(body, partitions("node-0"))
    other = replace(st.devices_for("node-0", {})[1], name="gpu-1-a", consumes=(("gpu-1", (("memory", Decimal(1)),)),))
    book = CounterBook(
        st.counter_sets, lambda pool: [*st.partitioned_devices(pool), other], {(DRIVER, "node-0", "gpu-0")}
    )
    assert book.short(other) == "device gpu-1-a: counter gpu-0/memory of its pool is overdrawn"


def test_a_pool_whose_devices_consume_an_unknown_counter_is_not_allocated_from() -> None:
    st = store(counters("node-0"), partitions("node-0", consumes="gpu-9"))
    assert st.devices_for("node-0", {}) == [] and "consumes gpu-9/memory" in st.invalid_pools[(DRIVER, "node-0")]


def test_two_pods_get_the_two_halves_and_a_whole_gpu_waits(s, clock) -> None:
    """In the scheduler: two pods each claim a half (by selector), a third
    the whole GPU: the halves bind, the whole waits until one half is gone."""
    sched, rec, _ = s
    sched.on_node(node("a", cpu="8"))
    for body in (counters("a"), partitions("a")):
        sched.on_resource_slice(body)

    def sized_claim(name: str, size: str) -> dict[str, Any]:
        body = claim(name)
        expression = f'device.attributes["{DRIVER}"].size == "{size}"'
        body["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [{"cel": {"expression": expression}}]
        return body

    for name, size in (("h0", "half"), ("h1", "half"), ("w", "full")):
        sched.on_resource_claim(sized_claim(name, size))
        sched.on_pod(gpu_pod(name, name))
    drain(sched)
    assert sorted(p for p, _ in rec.binds) == ["h0", "h1"], rec.pods
    devices = {r.device for a in sched.cache.dra.assumed.values() for r in a.results}
    assert devices == {"gpu-0-a", "gpu-0-b"}
