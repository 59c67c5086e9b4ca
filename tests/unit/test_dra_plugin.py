"""DynamicResources in the scheduler core (no API): a gang's pods get
distinct devices through Reserve, a gang short of devices waits whole and
assumes nothing, allocated claims pin pods to their node, and claims are
released when their pods go (live, finished, deleted before the
reservation arrived, or while troupe was down)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.api.config import SchedulerConfiguration
from scheduler.api.dra import Allocation, AllocationResult
from scheduler.core.scheduler import Scheduler
from scheduler.framework.interface import CycleState
from scheduler.plugins import in_tree_registry
from scheduler.queue.scheduling_queue import State, unit_of

from .test_runtime_scheduler import Clock, Recorder, drain, node, pod, podgroup

DRIVER = "gpu.example.com"


class Releases:
    def __init__(self) -> None:
        self.released: list[tuple[str, str]] = []

    def release(self, claim: Any, uid: str) -> None:
        self.released.append((claim.name, uid))


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def s(clock: Clock) -> tuple[Scheduler, Recorder, Releases]:
    rec = Recorder()
    sched = Scheduler(SchedulerConfiguration(), in_tree_registry(), binder=rec, writer=rec, clock=clock, report_delay=0)
    sched.start_scheduling()
    releases = Releases()
    sched.claim_lifecycle = releases
    sched.on_device_class(
        {
            "metadata": {"name": DRIVER},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        }
    )
    return sched, rec, releases


def gpus(node_name: str, count: int) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{node_name}-gpus"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}"} for i in range(count)],
        },
    }


def claim(name: str, status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-claim-{name}", "resourceVersion": "1"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}},
        "status": status or {},
    }


def gpu_pod(name: str, claim_name: str, group: str | None = None) -> dict[str, Any]:
    body = pod(name, group, cpu="100m")
    body["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim_name}]
    return body


def test_a_gangs_pods_get_distinct_devices_and_spread_by_them(s) -> None:
    sched, rec, _ = s
    for n in ("a", "b"):
        sched.on_node(node(n, cpu="8"))
        sched.on_resource_slice(gpus(n, 2))
    sched.on_podgroup(podgroup("g", 4))
    for i in range(4):
        sched.on_resource_claim(claim(f"c{i}"))
        sched.on_pod(gpu_pod(f"p{i}", f"c{i}", "g"))
    drain(sched)
    assert sorted(n for _, n in rec.binds) == ["a", "a", "b", "b"]
    assumed = sched.cache.dra.assumed
    devices = {(r.pool, r.device) for a in assumed.values() for r in a.results}
    assert len(assumed) == 4 and len(devices) == 4
    node_of = dict(rec.binds)
    for i in range(4):
        allocation = assumed[("ns", f"c{i}")]
        assert allocation.results[0].pool == node_of[f"p{i}"]
        assert allocation.node_selector is not None and allocation.node_selector.matches(node_of[f"p{i}"], {})


def test_a_gang_short_of_devices_waits_whole_and_assumes_nothing(s) -> None:
    sched, rec, _ = s
    sched.on_node(node("a", cpu="8"))
    sched.on_resource_slice(gpus("a", 3))
    sched.on_podgroup(podgroup("g", 4))
    for i in range(4):
        sched.on_resource_claim(claim(f"c{i}"))
        sched.on_pod(gpu_pod(f"p{i}", f"c{i}", "g"))
    drain(sched)
    assert rec.binds == [] and sched.cache.dra.assumed == {}
    assert rec.groups[-1][1:3] == ("False", "Unschedulable")
    assert "cannot allocate all claims" in rec.groups[-1][3]


def test_a_missing_claim_waits_and_says_so_then_schedules_when_it_appears(s, clock: Clock) -> None:
    sched, rec, _ = s
    sched.on_node(node("a", cpu="8"))
    sched.on_resource_slice(gpus("a", 1))
    sched.on_pod(gpu_pod("solo", "later"))
    drain(sched)
    # Held at PreEnqueue (no cycle runs for it), saying what it waits for.
    assert rec.binds == [] and rec.pods["solo"] == "waiting for resourceclaim ns/later to be created"
    assert sched.queue.unit(unit_of(sched.cache.pods["uid-solo"])).state == State.GATED
    sched.on_resource_claim(claim("later"))  # the claim lets it in at once
    drain(sched)
    assert rec.binds == [("solo", "a")]


def test_an_allocated_claim_pins_its_pod_to_the_allocations_node(s) -> None:
    sched, rec, _ = s
    for n in ("a", "b"):
        sched.on_node(node(n, cpu="8"))
        sched.on_resource_slice(gpus(n, 1))
    allocated = {
        "allocation": {
            "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "b", "device": "gpu-0"}]},
            "nodeSelector": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]}]
            },
        }
    }
    sched.on_resource_claim(claim("c", allocated))
    sched.on_pod(gpu_pod("p", "c"))
    drain(sched)
    assert rec.binds == [("p", "b")] and sched.cache.dra.assumed == {}


def test_claims_are_released_when_their_pods_go(s) -> None:
    sched, _, releases = s
    sched.on_node(node("a", cpu="8"))
    reserved = {"reservedFor": [{"resource": "pods", "name": "p", "uid": "uid-p"}]}
    sched.on_pod(gpu_pod("p", "c") | {"spec": {**gpu_pod("p", "c")["spec"], "nodeName": "a"}})
    sched.synced.set()
    sched.on_resource_claim(claim("c", reserved))
    assert releases.released == []  # its pod runs
    sched.on_pod_deleted(pod("p"))
    assert releases.released == [("c", "uid-p")]
    # A reservation that arrives after its pod's deletion is released too.
    sched.on_resource_claim(claim("late", {"reservedFor": [{"resource": "pods", "name": "p", "uid": "uid-p"}]}))
    assert releases.released[-1] == ("late", "uid-p")
    # A pod the cache has never seen may be new (its watch lags): left alone, except by the startup sweep.
    sched.on_resource_claim(claim("other", {"reservedFor": [{"resource": "pods", "name": "q", "uid": "uid-q"}]}))
    assert ("other", "uid-q") not in releases.released
    sched.sweep_claims()
    assert ("other", "uid-q") in releases.released


def test_a_finished_pod_releases_its_claims(s) -> None:
    sched, _, releases = s
    sched.on_node(node("a", cpu="8"))
    body = gpu_pod("p", "c")
    body["spec"]["nodeName"] = "a"
    sched.on_pod(body)
    sched.synced.set()
    sched.on_resource_claim(claim("c", {"reservedFor": [{"resource": "pods", "name": "p", "uid": "uid-p"}]}))
    sched.on_pod({**body, "status": {"phase": "Succeeded"}})
    assert releases.released == [("c", "uid-p")]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 3), min_size=1, max_size=5),  # devices per node
    st.lists(st.integers(1, 2), min_size=1, max_size=3),  # the pod's claims: devices each
    st.integers(0, 6),  # claims allocated elsewhere first (devices in use)
)
def test_the_counted_filter_agrees_with_the_allocator_node_by_node(
    per_node: list[int], wanted: list[int], taken: int
) -> None:
    rec = Recorder()
    sched = Scheduler(SchedulerConfiguration(), in_tree_registry(), binder=rec, writer=rec, report_delay=0)
    sched.on_device_class({"metadata": {"name": DRIVER}, "spec": {}})
    for i, count in enumerate(per_node):
        sched.on_node(node(f"n{i}", cpu="8"))
        if count:
            sched.on_resource_slice(gpus(f"n{i}", count))
    store = sched.cache.dra
    # Devices in use: assumed for other claims, first devices first.
    homes = [d for devices in store.local_devices().values() for d in devices][:taken]
    for j, d in enumerate(homes):
        store.assume(("ns", f"other-{j}"), Allocation((AllocationResult("gpu", d.driver, d.pool, d.name),)))
    refs = []
    for j, count in enumerate(wanted):
        body = claim(f"c{j}")
        body["spec"]["devices"]["requests"][0]["exactly"]["count"] = count
        sched.on_resource_claim(body)
        refs.append({"name": f"r{j}", "resourceClaimName": f"c{j}"})
    body = pod("p", cpu="100m")
    body["spec"]["resourceClaims"] = refs
    sched.on_pod(body)
    fwk = sched.frameworks["troupe-scheduler"]
    plugin = next(p for p in fwk.filters if p.name == "DynamicResources")
    snapshot = sched.cache.snapshot()
    state = CycleState()
    assert fwk.run_pre_filters(state, sched.cache.pods["uid-p"], snapshot).ok
    counted = plugin.filter(state, sched.cache.pods["uid-p"], snapshot).feasible
    plugin._counting.free_counts = lambda *a: None  # type: ignore[method-assign]
    searched = plugin.filter(state, sched.cache.pods["uid-p"], snapshot).feasible
    assert counted.tolist() == searched.tolist()


class FakeWriter:
    """The runtime's ClaimWriter, in memory: records writes and releases."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, str, bool]] = []
        self.released: list[tuple[str, str]] = []

    async def write_claim(self, claim: Any, allocation: Any, consumer: Any) -> Any:
        self.writes.append((claim.name, consumer.uid, allocation is not None))
        return claim

    def release(self, claim: Any, uid: str) -> None:
        self.released.append((claim.name, uid))


async def test_prebind_writes_each_claim_and_unreserve_after_it_undoes_the_write(s) -> None:
    sched, rec, _ = s
    sched.on_node(node("a", cpu="8"))
    sched.on_resource_slice(gpus("a", 1))
    sched.on_resource_claim(claim("c"))
    sched.on_pod(gpu_pod("p", "c"))
    fwk = sched.frameworks["troupe-scheduler"]
    writer = FakeWriter()
    fwk.handle.claim_writer = writer
    # The binder is the Recorder: take the decision's assignment and run PreBind as the runtime binder would.
    popped = sched.queue.pop_nowait()
    decision = sched.schedule_unit(popped)
    assert decision is not None and [a.node for a in decision.assignments] == ["a"]
    a = decision.assignments[0]
    assert (await fwk.run_pre_bind(a.state, a.pod, a.node)).ok
    assert writer.writes == [("c", "uid-p", True)]
    sched.on_bind_failed(a.pod, a.node, "Binding rejected: 500")
    assert writer.released == [("c", "uid-p")]
    assert sched.cache.dra.assumed == {}


def test_a_selector_that_fails_on_a_device_names_the_expression(s) -> None:
    sched, rec, _ = s
    sched.on_node(node("a", cpu="8"))
    sched.on_resource_slice(gpus("a", 1))
    body = claim("c")
    body["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
        {"cel": {"expression": f'device.attributes["{DRIVER}"].model == "a100"'}}
    ]
    sched.on_resource_claim(body)
    sched.on_pod(gpu_pod("p", "c"))
    drain(sched)
    assert rec.binds == []
    assert f'selector "device.attributes["{DRIVER}"].model == "a100"": no such key' in rec.pods["p"], rec.pods


def test_reserve_refuses_a_node_the_groups_claim_does_not_reach(s) -> None:
    """A pod placed without seeing an earlier pod's allocation (a trial without
    Reserve) is refused at Reserve, never bound where its claim is unreachable."""
    sched, _, _ = s
    for n in ("a", "b"):
        sched.on_node(node(n, cpu="8"))
        sched.on_resource_slice(gpus(n, 1))
    sched.on_resource_claim(claim("shared"))
    sched.on_pod(gpu_pod("p0", "shared"))
    sched.on_pod(gpu_pod("p1", "shared"))
    fwk = sched.frameworks["troupe-scheduler"]
    snapshot = sched.cache.snapshot()
    states = []
    for name in ("p0", "p1"):
        state = CycleState()
        assert fwk.run_pre_filters(state, sched.cache.pods[f"uid-{name}"], snapshot).ok
        states.append(state)
    assert fwk.run_reserve(states[0], sched.cache.pods["uid-p0"], "a").ok  # allocates gpu-0 of node a
    refused = fwk.run_reserve(states[1], sched.cache.pods["uid-p1"], "b")
    assert not refused.ok and refused.message == "resourceclaim not available on the node"
    assert fwk.run_reserve(states[1], sched.cache.pods["uid-p1"], "a").ok


def low_holds_gpu_0_and_high_wants_it(sched: Scheduler) -> None:
    """Pod `low` runs on node a with claim c-low holding its gpu-0; pod
    `high` (priority 100) asks claim c-high for a GPU."""
    held = {
        "allocation": {"devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "a", "device": "gpu-0"}]}},
        "reservedFor": [{"resource": "pods", "name": "low", "uid": "uid-low"}],
    }
    sched.on_resource_claim(claim("c-low", held))
    low = gpu_pod("low", "c-low")
    low["spec"]["nodeName"] = "a"
    sched.on_pod(low)
    sched.on_resource_claim(claim("c-high"))
    high = gpu_pod("high", "c-high")
    high["spec"]["priority"] = 100
    sched.on_pod(high)


def test_a_high_priority_pod_preempts_the_pod_holding_the_only_gpu(s, clock: Clock) -> None:
    sched, rec, releases = s
    sched.on_node(node("a", cpu="8"))
    sched.on_resource_slice(gpus("a", 1))
    low_holds_gpu_0_and_high_wants_it(sched)
    drain(sched)
    assert list(rec.preempted) == ["low"], rec.pods  # cpu is plenty: only the device makes room
    assert rec.nominated == {"high": "a"}
    # The victim goes: troupe releases its claim, the watch shows the device free, the preemptor binds.
    sched.on_pod_deleted(pod("low"))
    assert ("c-low", "uid-low") in releases.released
    sched.on_resource_claim(claim("c-low"))
    clock.now += 10
    drain(sched)
    assert rec.binds == [("high", "a")]


def _group_claim_cluster(sched: Scheduler) -> None:
    """small: 2 cpu; big: 10 cpu, 5 used. Each has one GPU. The gang of 4 x 1
    cpu shares one group claim: only big holds all four, but the pods prefer
    small (a preferred node affinity), so the first pod alone goes there."""
    sched.on_node(node("small", cpu="2"))
    sched.on_node(node("big", cpu="10"))
    for n in ("small", "big"):
        sched.on_resource_slice(gpus(n, 1))
    sched.on_pod(pod("busy", cpu="5", node_name="big"))
    sched.on_resource_claim(claim("shared"))
    group = podgroup("g", 4)
    group["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "shared"}]
    sched.on_podgroup(group)
    for i in range(4):
        body = pod(f"g-{i}", "g", cpu="1")
        body["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "shared"}]
        body["spec"]["affinity"] = {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "preference": {
                            "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["small"]}]
                        },
                    }
                ]
            }
        }
        sched.on_pod(body)


def test_a_group_claims_device_is_chosen_with_the_placement_not_by_the_first_pod(s) -> None:
    sched, rec, _ = s
    _group_claim_cluster(sched)
    drain(sched)
    assert sorted(rec.binds) == [(f"g-{i}", "big") for i in range(4)], rec.groups
    allocation = sched.cache.dra.assumed[("ns", "shared")]
    assert [r.pool for r in allocation.results] == ["big"]
    assert rec.groups[-1][3] == "4 pod(s) placed in big"


def test_without_the_placement_the_first_pod_pins_the_group_claim_to_the_wrong_node(clock: Clock) -> None:
    rec = Recorder()
    config = SchedulerConfiguration.model_validate(
        {"profiles": [{"plugins": {"placementGenerate": {"disabled": [{"name": "DynamicResources"}]}}}]}
    )
    sched = Scheduler(config, in_tree_registry(), binder=rec, writer=rec, clock=clock, report_delay=0)
    sched.start_scheduling()
    sched.on_device_class({"metadata": {"name": DRIVER}, "spec": {}})
    _group_claim_cluster(sched)
    drain(sched)
    assert rec.binds == [] and rec.groups[-1][1:3] == ("False", "Unschedulable")
    assert rec.groups[-1][3].startswith("needs 4 pods, 2 fit"), rec.groups[-1]
