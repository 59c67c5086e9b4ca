"""The extension points around the per-pod algorithm, each driven through the
Scheduler's cycle with a plugin of the example package (examples/plugin-example):
PostFilter (NominateResourceFit), PlacementGenerate/PlacementScore
(RackPlacement, FewestNodes), Reserve/Unreserve and PreBind (LicenseSeats).

The binder here runs the framework's PreBind and then reports the bind, as
runtime/binder.py does without the HTTP (that part is tests/unit/test_binder.py).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from scheduler.api.config import SchedulerConfiguration
from scheduler.core.outputs import BindResults
from scheduler.core.schedule_podgroup import Assignment
from scheduler.core.scheduler import Scheduler
from scheduler.framework.framework import Framework
from scheduler.framework.registry import Registry
from scheduler.plugins import in_tree_registry

EXAMPLE_SRC = Path(__file__).resolve().parents[2] / "examples" / "plugin-example" / "src"
LABEL = "scheduling.troupe.dev/pod-group"


@pytest.fixture(scope="module")
def example() -> Iterator[Any]:
    """The example package's modules, imported from its source tree."""
    sys.path.insert(0, str(EXAMPLE_SRC))
    try:
        from troupe_example_plugin import licenses, nominate, placement

        yield type("Example", (), {"licenses": licenses, "nominate": nominate, "placement": placement})
    finally:
        sys.path.remove(str(EXAMPLE_SRC))
        for name in [m for m in sys.modules if m.startswith("troupe_example_plugin")]:
            del sys.modules[name]


# ------------------------------------------------------------------ harness


class Recorder:
    """Status writer: what a user would read."""

    def __init__(self) -> None:
        self.groups: dict[str, tuple[str, str, str]] = {}
        self.pods: dict[str, str] = {}
        self.nominated: dict[str, str] = {}

    def group_condition(self, group: Any, status: str, reason: str, message: str) -> None:
        self.groups[group.metadata.name] = (status, reason, message)

    def group_members(self, group: Any) -> None:
        pass

    def pod_unschedulable(
        self, pod: Any, message: str, still_waiting: Any = None, reason: str = "Unschedulable"
    ) -> None:
        self.pods[pod.name] = message

    def pod_waiting(self, pod: Any, message: str, still_waiting: Any = None) -> None:
        self.pods[pod.name] = message

    def pod_event(self, *args: Any) -> None:
        pass

    def group_event(self, *args: Any) -> None:
        pass

    def nominate(self, pod: Any, node: str) -> None:
        self.nominated[pod.name] = node

    def forget_pod(self, uid: str) -> None:
        pass


class PreBindingBinder:
    """PreBind for every pod of the decision, then "bind" the ones that passed."""

    def __init__(self, hold: bool = False) -> None:
        self.hold = hold  # True: never finish (a bind in flight)
        self.bound: list[tuple[str, str]] = []
        self.tasks: list[asyncio.Task[None]] = []

    def bind(
        self,
        fwk: Framework,
        assignments: Sequence[Assignment],
        results: BindResults,
        at_least: int = 0,
        annotations: Any = None,
    ) -> None:
        if self.hold:
            return

        async def run() -> None:
            for a in assignments:
                status = await fwk.run_pre_bind(a.state, a.pod, a.node)
                if status.ok:
                    self.bound.append((a.pod.name, a.node))
                    results.on_bound(a.pod, a.node)
                else:
                    results.on_bind_failed(a.pod, a.node, f"PreBind {status.plugin}: {status.message}")

        self.tasks.append(asyncio.ensure_future(run()))

    async def drain(self) -> None:
        await asyncio.gather(*self.tasks)


def node(name: str, cpu: int, labels: dict[str, str] | None = None, tainted: bool = False) -> dict[str, Any]:
    spec = {"taints": [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]} if tainted else {}
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": labels or {}},
        "spec": spec,
        "status": {"allocatable": {"cpu": str(cpu), "memory": "64Gi", "pods": "110"}},
    }


def pod(name: str, group: str | None = None, cpu: int = 1, labels: dict[str, str] | None = None) -> dict[str, Any]:
    all_labels = dict(labels or {})
    if group:
        all_labels[LABEL] = group
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": all_labels},
        "spec": {
            "schedulerName": "troupe-scheduler",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": str(cpu)}}}],
        },
    }


def podgroup(name: str, min_count: int | None) -> dict[str, Any]:
    policy = {"gang": {"minCount": min_count}} if min_count else {"basic": {}}
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-pg-{name}", "generation": 1},
        "spec": {"schedulingPolicy": policy},
    }


def scheduler(plugins: dict[str, list[str]], classes: Sequence[type], binder: Any = None) -> tuple[Scheduler, Recorder]:
    registry: Registry = in_tree_registry()
    for cls in classes:
        registry.register(cls)
    config = SchedulerConfiguration.model_validate(
        {
            "profiles": [
                {
                    "schedulerName": "troupe-scheduler",
                    # The examples' placement plugins replace the in-tree ones.
                    "plugins": {
                        point: {
                            "enabled": [{"name": n} for n in names],
                            "disabled": [{"name": "*"}] if point.startswith("placement") else [],
                        }
                        for point, names in plugins.items()
                    },
                }
            ]
        }
    )
    rec = Recorder()
    s = Scheduler(config, registry, binder=binder, writer=rec, report_delay=0)
    s.start_scheduling()
    return s, rec


def cycle(s: Scheduler) -> Any:
    popped = s.queue.pop_nowait()
    assert popped is not None
    return s.schedule_unit(popped)


# --------------------------------------------------------------- PostFilter


def test_post_filter_nominates_a_node_for_a_pod_that_fits_nowhere(example: Any) -> None:
    s, rec = scheduler({"postFilter": ["NominateResourceFit"]}, [example.nominate.NominateResourceFit])
    s.on_node(node("a", 4, tainted=True))  # room, but a taint: not a resource problem
    s.on_node(node("c", 1))
    s.on_node(node("b", 1))
    s.on_pod(pod("big", cpu=2))
    d = cycle(s)
    assert not d.scheduled and d.assignments == []
    assert d.nominations == {"uid-big": "b"}  # the first by name of the nodes only short of cpu
    assert rec.nominated == {"big": "b"}
    assert rec.pods["big"].startswith("0/3 nodes are available: 1 node(s) had untolerated taint")


def test_post_filter_that_finds_nothing_nominates_nothing(example: Any) -> None:
    s, rec = scheduler({"postFilter": ["NominateResourceFit"]}, [example.nominate.NominateResourceFit])
    s.on_node(node("a", 4, tainted=True))
    s.on_pod(pod("p"))
    d = cycle(s)
    assert not d.scheduled and d.nominations == {} and rec.nominated == {}


def test_group_post_filter_gets_every_unplaced_pods_diagnosis(example: Any) -> None:
    s, rec = scheduler({"postFilter": ["NominateResourceFit"]}, [example.nominate.NominateResourceFit])
    s.on_node(node("a", 1))
    s.on_node(node("b", 1))
    s.on_podgroup(podgroup("g", 3))
    for i in range(3):
        s.on_pod(pod(f"g-{i}", "g"))
    d = cycle(s)
    assert not d.scheduled and d.assignments == []
    # The first two fit; the third is the one with a diagnosis (both nodes short of cpu).
    assert d.nominations == {"uid-g-2": "a"} and rec.nominated == {"g-2": "a"}
    assert rec.groups["g"][:2] == ("False", "Unschedulable")


# ---------------------------------------------------------------- Placement


def _racks(s: Scheduler) -> None:
    """zone z1: rack r1 = n1 (8 cpu); rack r2 = n2..n5 (1 cpu each). zone z2: rack r3 = n6, n7 (2 cpu each)."""
    s.on_node(node("n1", 8, {"example.com/zone": "z1", "example.com/rack": "r1"}))
    for i in range(2, 6):
        s.on_node(node(f"n{i}", 1, {"example.com/zone": "z1", "example.com/rack": "r2"}))
    for i in (6, 7):
        s.on_node(node(f"n{i}", 2, {"example.com/zone": "z2", "example.com/rack": "r3"}))


def _placement_scheduler(example: Any) -> tuple[Scheduler, Recorder]:
    class ZonePlacement(example.placement.RackPlacement):  # type: ignore[misc,name-defined]
        name = "ZonePlacement"
        label = "example.com/zone"

    s, rec = scheduler(
        {"placementGenerate": ["ZonePlacement", "RackPlacement"], "placementScore": ["FewestNodes"]},
        [ZonePlacement, example.placement.RackPlacement, example.placement.FewestNodes],
    )
    _racks(s)
    return s, rec


def test_placement_puts_the_gang_in_the_best_scored_rack_of_a_zone(example: Any) -> None:
    s, rec = _placement_scheduler(example)
    s.on_podgroup(podgroup("g", 4))
    for i in range(4):
        s.on_pod(pod(f"g-{i}", "g"))
    d = cycle(s)
    # Every rack holds 4 cpu; the default algorithm spreads over 1 node in r1,
    # 4 in r2 and 2 in r3: FewestNodes picks r1, named with its parent zone.
    assert d.scheduled and d.placement == "zone=z1/rack=r1"
    assert sorted(a.node for a in d.assignments) == ["n1"] * 4
    assert rec.groups["g"] == ("True", "Scheduled", "4 pod(s) placed in zone=z1/rack=r1")
    # The trials in the other racks left nothing behind in the cache.
    assert sorted(s.cache.assumed.values()) == ["n1"] * 4


def test_a_rack_that_passes_the_generator_but_not_the_algorithm_is_named(example: Any) -> None:
    s, rec = _placement_scheduler(example)
    s.on_node(node("n8", 1, {"example.com/zone": "z1", "example.com/rack": "r1"}))  # r1: 9 cpu on 2 nodes
    s.on_podgroup(podgroup("g", 3))
    for i in range(3):
        s.on_pod(pod(f"g-{i}", "g", cpu=3))
    d = cycle(s)
    # 9 cpu needed: only r1 is proposed; two pods fit on n1, the third nowhere.
    assert not d.scheduled and d.assignments == []
    assert d.message.startswith("no placement fits: zone=z1/rack=r1: ")
    assert s.cache.assumed == {}


def test_a_generator_with_no_candidate_says_why(example: Any) -> None:
    s, rec = _placement_scheduler(example)
    s.on_podgroup(podgroup("g", 10))
    for i in range(10):
        s.on_pod(pod(f"g-{i}", "g"))
    d = cycle(s)
    assert not d.scheduled
    assert rec.groups["g"] == ("False", "Unschedulable", "RackPlacement: no example.com/rack value has 10000m cpu free")


# ---------------------------------------------------------- Reserve, PreBind


@pytest.fixture
def seats(example: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    server = example.licenses.LicenseServer({"matlab": 2})
    monkeypatch.setattr(example.licenses.LicenseSeats, "server", server)
    return server


def _license_scheduler(example: Any, binder: Any) -> tuple[Scheduler, Recorder, Any]:
    s, rec = scheduler(
        {"reserve": ["LicenseSeats"], "preBind": ["LicenseSeats"]}, [example.licenses.LicenseSeats], binder=binder
    )
    s.on_node(node("a", 16))
    return s, rec, s.frameworks["troupe-scheduler"].plugins["LicenseSeats"]


MATLAB = {"example.com/license": "matlab"}


async def test_a_gang_that_cannot_reserve_minCount_seats_gives_back_what_it_took(example: Any, seats: Any) -> None:
    binder = PreBindingBinder()
    s, rec, plugin = _license_scheduler(example, binder)
    s.on_podgroup(podgroup("g", 3))
    for i in range(3):
        s.on_pod(pod(f"g-{i}", "g", labels=MATLAB))
    d = cycle(s)
    assert not d.scheduled and d.assignments == [] and binder.tasks == []
    assert "LicenseSeats: no seat of license matlab left (2 in all)" in d.message
    assert plugin.in_use == {"matlab": 0}  # Unreserve ran for the two it had reserved


async def test_a_basic_group_binds_the_pods_that_got_a_seat_after_prebind(example: Any, seats: Any) -> None:
    binder = PreBindingBinder()
    s, rec, plugin = _license_scheduler(example, binder)
    s.on_podgroup(podgroup("g", None))
    for i in range(3):
        s.on_pod(pod(f"g-{i}", "g", labels=MATLAB))
    d = cycle(s)
    assert d.scheduled and [a.pod.name for a in d.assignments] == ["g-0", "g-1"]
    assert rec.pods["g-2"] == "PodGroup ns/g: LicenseSeats: no seat of license matlab left (2 in all)"
    await binder.drain()
    assert binder.bound == [("g-0", "a"), ("g-1", "a")]
    assert sorted(seats.checked_out) == ["uid-g-0", "uid-g-1"] and plugin.in_use == {"matlab": 2}


async def test_a_prebind_failure_unreserves_and_requeues_the_pod(example: Any, seats: Any) -> None:
    binder = PreBindingBinder()
    s, rec, plugin = _license_scheduler(example, binder)
    seats.refuse.add("p1")
    s.on_pod(pod("p0", labels=MATLAB))
    s.on_pod(pod("p1", labels=MATLAB))
    cycle(s)
    cycle(s)
    assert plugin.in_use == {"matlab": 2}  # both reserved before either PreBind ran
    await binder.drain()
    assert binder.bound == [("p0", "a")]
    assert plugin.in_use == {"matlab": 1}  # p1's seat came back
    assert "uid-p1" in s.queue and "uid-p1" not in s.cache.assumed


async def test_a_reserved_pod_deleted_before_its_bind_gives_its_seat_back(example: Any, seats: Any) -> None:
    s, rec, plugin = _license_scheduler(example, PreBindingBinder(hold=True))
    body = pod("p0", labels=MATLAB)
    s.on_pod(body)
    cycle(s)
    assert plugin.in_use == {"matlab": 1}
    s.on_pod_deleted(body)
    assert plugin.in_use == {"matlab": 0}
    s.on_pod_deleted(body)  # a second DELETED (resync) must not unreserve twice
    assert plugin.in_use == {"matlab": 0}
