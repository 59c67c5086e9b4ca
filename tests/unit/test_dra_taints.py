"""Device taints (Kubernetes 1.37, DRADeviceTaints and DRADeviceTaintRules
GA): a device tainted NoSchedule or NoExecute, by its ResourceSlice or by a
DeviceTaintRule, is not allocated to a request that does not tolerate the
taint (upstream taintPreventsAllocation / resourceclaim.ToleratesTaint);
None and unknown effects do not keep a device; the request's tolerations
are copied into the allocation result. Before, troupe did not read taints:
it handed out a device its driver had marked unusable."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pytest

from scheduler.api.dra import (
    ALL,
    Device,
    DeviceRequest,
    DeviceTaint,
    DeviceToleration,
    RequestSlot,
    ResourceClaim,
    parse_device_taint_rule,
    parse_resource_claim,
    parse_resource_slice,
)
from scheduler.cluster.dra import DraStore
from scheduler.plugins.dynamicresources.allocator import allocate

DRIVER = "gpu.example.com"
BROKEN = DeviceTaint("gpu.example.com/unhealthy", "ecc", "NoSchedule")


def gpu(name: str, *taints: DeviceTaint) -> Device:
    return Device(DRIVER, "node-0", name, {}, {f"{DRIVER}/memory": Decimal(80)}, taints)


def request(count: int = 1, mode: str = "ExactCount", *tolerations: DeviceToleration) -> ResourceClaim:
    r = DeviceRequest("gpu", "gpu", (), mode, count if mode != ALL else 0, tuple(tolerations))
    return ResourceClaim("default", "c", "uid-c", "1", (RequestSlot("gpu", (r,)),))


def anything(_request: DeviceRequest, _device: Device) -> bool:
    return True


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        (DeviceToleration("gpu.example.com/unhealthy", "Equal", "ecc"), True),
        (DeviceToleration("gpu.example.com/unhealthy", "Equal", "other"), False),
        (DeviceToleration("gpu.example.com/unhealthy", "Exists"), True),
        (DeviceToleration("", "Exists"), True),  # every key
        (DeviceToleration("gpu.example.com/unhealthy", "Exists", effect="NoExecute"), False),  # other effect
        (DeviceToleration("gpu.example.com/unhealthy", "Exists", effect="NoSchedule"), True),
        (DeviceToleration("other", "Exists"), False),
    ],
)
def test_tolerations_match_taints_as_upstream(toleration: DeviceToleration, tolerated: bool) -> None:
    assert toleration.tolerates(BROKEN) is tolerated


def test_a_tainted_device_is_skipped_and_the_message_says_which_taint() -> None:
    out = allocate([request(2)], [gpu("gpu-0", BROKEN), gpu("gpu-1")], set(), anything)
    assert out.results is None
    assert out.reason == (
        "gpu: 1 matching device(s) free, 2 more needed; "
        "1 matching device(s) tainted (device gpu-0: gpu.example.com/unhealthy=ecc:NoSchedule, not tolerated)"
    )
    out = allocate([request(1)], [gpu("gpu-0", BROKEN), gpu("gpu-1")], set(), anything)
    assert out.results is not None and [r.device for r in out.results[0]] == ["gpu-1"]


@pytest.mark.parametrize("effect", ["NoExecute", "NoSchedule"])
def test_no_schedule_and_no_execute_keep_a_device_none_and_unknown_effects_do_not(effect: str) -> None:
    kept = allocate([request()], [gpu("gpu-0", replace(BROKEN, effect=effect))], set(), anything)
    assert kept.results is None
    for harmless in ("None", "PreferNoSchedule", "SomethingNew"):
        out = allocate([request()], [gpu("gpu-0", replace(BROKEN, effect=harmless))], set(), anything)
        assert out.results is not None, harmless


def test_a_tolerating_request_gets_the_device_and_its_tolerations_are_recorded() -> None:
    toleration = DeviceToleration("gpu.example.com/unhealthy", "Exists")
    out = allocate([request(1, "ExactCount", toleration)], [gpu("gpu-0", BROKEN)], set(), anything)
    assert out.results is not None
    (result,) = out.results[0]
    assert result.device == "gpu-0" and result.tolerations == (toleration,)
    assert result.to_api()["tolerations"] == [{"key": "gpu.example.com/unhealthy", "operator": "Exists"}]


def test_allocation_mode_all_fails_on_a_tainted_matching_device() -> None:
    """As upstream: "all" counts every matching device, and one it may not have fails it."""
    out = allocate([request(0, ALL)], [gpu("gpu-0"), gpu("gpu-1", BROKEN)], set(), anything)
    assert out.results is None and "allocationMode All, but 1 matching device(s) tainted" in out.reason


def _slice(devices: list[dict]) -> dict:
    return {
        "metadata": {"name": "node-0-gpus"},
        "spec": {
            "driver": DRIVER,
            "nodeName": "node-0",
            "pool": {"name": "node-0", "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def test_slices_rules_and_claims_parse_taints_and_tolerations() -> None:
    s = parse_resource_slice(
        _slice([{"name": "gpu-0", "taints": [{"key": "k", "value": "v", "effect": "NoExecute"}]}, {"name": "gpu-1"}])
    )
    assert s.devices[0].taints == (DeviceTaint("k", "v", "NoExecute"),) and s.devices[1].taints == ()
    body = {
        "metadata": {"name": "c", "namespace": "default"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": "gpu",
                            "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute"}],
                        },
                    }
                ]
            }
        },
    }
    (slot,) = parse_resource_claim(body).requests
    assert slot.alternatives[0].tolerations == (DeviceToleration("k", "Exists", "", "NoExecute"),)
    rule = parse_device_taint_rule(
        {"metadata": {"name": "r"}, "spec": {"deviceSelector": {"pool": "node-0"}, "taint": {"key": "k"}}}
    )
    assert rule.applies_to(s.devices[0]) and rule.taint == DeviceTaint("k")


def test_device_taint_rules_put_their_taint_on_the_devices_they_pick() -> None:
    store = DraStore()
    store.upsert_slice(parse_resource_slice(_slice([{"name": "gpu-0"}, {"name": "gpu-1"}])))
    taint = {"key": "maintenance", "effect": "NoSchedule"}

    def rule(name: str, selector: dict | None) -> None:
        spec: dict = {"taint": taint}
        if selector is not None:
            spec["deviceSelector"] = selector
        store.upsert_taint_rule(parse_device_taint_rule({"metadata": {"name": name}, "spec": spec}))

    def tainted() -> list[str]:
        return [d.name for d in store.devices_for("node-0", {}) if d.taints]

    rule("none", None)  # no selector: no device
    assert tainted() == []
    rule("one", {"driver": DRIVER, "device": "gpu-1"})
    assert tainted() == ["gpu-1"]
    rule("all", {})  # an empty selector: every device
    assert tainted() == ["gpu-0", "gpu-1"]
    store.remove_taint_rule("all")
    store.remove_taint_rule("one")
    assert tainted() == []


# ------------------------------------------------------ in the scheduler core


from .test_dra_plugin import claim, gpu_pod, gpus, low_holds_gpu_0_and_high_wants_it, s  # noqa: E402, F401 (fixture)
from .test_runtime_scheduler import drain, node, podgroup  # noqa: E402


def _tainted(slice_body: dict, device: int, effect: str = "NoSchedule") -> dict:
    slice_body["spec"]["devices"][device]["taints"] = [{"key": "unhealthy", "effect": effect}]
    return slice_body


def test_a_gang_goes_around_tainted_devices_on_the_counted_path(s) -> None:
    """a: 2 GPUs, one tainted; b: 2 GPUs. A gang of 3, one GPU each: 2 on b and
    1 on a (not 2 on a), through the per-node counts the common case uses."""
    sched, rec, _ = s
    for n in ("a", "b"):
        sched.on_node(node(n, cpu="8"))
    sched.on_resource_slice(_tainted(gpus("a", 2), 0))
    sched.on_resource_slice(gpus("b", 2))
    sched.on_podgroup(podgroup("g", 3))
    for i in range(3):
        sched.on_resource_claim(claim(f"c{i}"))
        sched.on_pod(gpu_pod(f"p{i}", f"c{i}", "g"))
    drain(sched)
    assert sorted(n for _, n in rec.binds) == ["a", "b", "b"]
    devices = {(r.pool, r.device) for a in sched.cache.dra.assumed.values() for r in a.results}
    assert ("a", "gpu-0") not in devices


def test_a_device_taint_rule_keeps_a_device_and_its_removal_gives_it_back(s, clock) -> None:
    """One GPU, tainted by a DeviceTaintRule: the pod waits (upstream's
    node message); the rule deleted, it binds."""
    sched, rec, _ = s
    sched.on_node(node("a", cpu="8"))
    sched.on_resource_slice(gpus("a", 1))
    rule = {
        "metadata": {"name": "drain-a"},
        "spec": {"deviceSelector": {"pool": "a"}, "taint": {"key": "maintenance", "effect": "NoExecute"}},
    }
    sched.on_device_taint_rule(rule)
    sched.on_resource_claim(claim("c"))
    sched.on_pod(gpu_pod("p", "c"))
    drain(sched)
    assert rec.binds == [] and rec.pods["p"] == "0/1 nodes are available: 1 cannot allocate all claims.", rec.pods
    sched.on_device_taint_rule(rule, deleted=True)
    clock.now += 10
    drain(sched)
    assert rec.binds == [("p", "a")]


def test_evicting_the_user_of_a_tainted_device_frees_nothing(s) -> None:
    """The only GPU is in use by a low-priority pod and tainted: preempting
    that pod would not make it usable, so nothing is evicted."""
    sched, rec, _ = s
    sched.on_node(node("a", cpu="8"))
    sched.on_resource_slice(_tainted(gpus("a", 1), 0))
    low_holds_gpu_0_and_high_wants_it(sched)
    drain(sched)
    assert rec.preempted == {} and rec.binds == []
