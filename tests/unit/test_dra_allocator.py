"""The structured-parameters allocator: requests, firstAvailable,
matchAttribute, allocationMode All, devices in use; and a property test
against a brute-force reference on small inventories."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.api.dra import (
    ALL,
    Device,
    DeviceRequest,
    MatchConstraint,
    RequestSlot,
    ResourceClaim,
)
from scheduler.plugins.dynamicresources.allocator import allocate

DRIVER = "gpu.example.com"


def gpu(name: str, model: str = "a100", numa: int = 0, pool: str = "node-0") -> Device:
    return Device(
        DRIVER, pool, name, {f"{DRIVER}/model": model, f"{DRIVER}/numa": numa}, {f"{DRIVER}/memory": Decimal(80)}
    )


def claim(name: str, *slots: RequestSlot, constraints: Sequence[MatchConstraint] = ()) -> ResourceClaim:
    return ResourceClaim("default", name, f"uid-{name}", "1", tuple(slots), tuple(constraints))


def exactly(name: str, count: int = 1, model: str | None = None, mode: str = "ExactCount") -> RequestSlot:
    # The "selector" of these tests: the model named in the class name ("gpu" matches any).
    return RequestSlot(name, (DeviceRequest(name, model or "gpu", (), mode, count if mode != ALL else 0),))


def by_model(request: DeviceRequest, device: Device) -> bool:
    return request.device_class == "gpu" or device.attributes.get(f"{DRIVER}/model") == request.device_class


def devices_of(outcome_results: list[list[object]] | None) -> list[list[str]]:
    assert outcome_results is not None
    return [[r.device for r in results] for results in outcome_results]  # type: ignore[attr-defined]


def test_exact_counts_take_distinct_devices_in_order() -> None:
    inventory = [gpu(f"gpu-{i}") for i in range(4)]
    out = allocate([claim("a", exactly("r", 2)), claim("b", exactly("r", 1))], inventory, set(), by_model)
    assert devices_of(out.results) == [["gpu-0", "gpu-1"], ["gpu-2"]]


def test_devices_in_use_are_skipped_and_too_few_fail_with_a_reason() -> None:
    inventory = [gpu(f"gpu-{i}") for i in range(3)]
    used = {inventory[0].key}
    out = allocate([claim("a", exactly("r", 2))], inventory, used, by_model)
    assert devices_of(out.results) == [["gpu-1", "gpu-2"]]
    out = allocate([claim("a", exactly("r", 3))], inventory, used, by_model)
    assert out.results is None and "2 matching device(s) free, 3 more needed" in out.reason


def test_first_available_falls_back_in_order() -> None:
    inventory = [gpu("gpu-0", "t4"), gpu("gpu-1", "t4")]
    slot = RequestSlot(
        "r", (DeviceRequest("r/big", "a100", (), "ExactCount", 1), DeviceRequest("r/small", "t4", (), "ExactCount", 2))
    )
    out = allocate([claim("a", slot)], inventory, set(), by_model)
    assert out.results is not None and [(r.request, r.device) for r in out.results[0]] == [
        ("r/small", "gpu-0"),
        ("r/small", "gpu-1"),
    ]


def test_match_attribute_backtracks_to_a_consistent_set() -> None:
    # The first two devices differ in numa; only gpu-1 and gpu-2 share one.
    inventory = [gpu("gpu-0", numa=0), gpu("gpu-1", numa=1), gpu("gpu-2", numa=1)]
    c = claim("a", exactly("r", 2), constraints=[MatchConstraint(f"{DRIVER}/numa")])
    out = allocate([c], inventory, set(), by_model)
    assert devices_of(out.results) == [["gpu-1", "gpu-2"]]


def test_match_attribute_across_requests_and_missing_attribute() -> None:
    inventory = [gpu("gpu-0", numa=0), gpu("gpu-1", numa=1), Device(DRIVER, "node-0", "nic-0", {}, {})]
    c = claim("a", exactly("x"), exactly("y"), constraints=[MatchConstraint(f"{DRIVER}/numa", ("x", "y"))])
    out = allocate([c], inventory, set(), by_model)
    assert out.results is None  # two requests of one numa need two devices of one numa: none exist


def test_allocation_mode_all_needs_every_matching_device_free() -> None:
    inventory = [gpu("gpu-0"), gpu("gpu-1"), gpu("gpu-2", "t4")]
    out = allocate([claim("a", exactly("r", model="a100", mode=ALL))], inventory, set(), by_model)
    assert devices_of(out.results) == [["gpu-0", "gpu-1"]]
    out = allocate([claim("a", exactly("r", model="a100", mode=ALL))], inventory, {inventory[1].key}, by_model)
    assert out.results is None and "allocationMode All" in out.reason


def test_the_step_budget_fails_cleanly() -> None:
    inventory = [gpu(f"gpu-{i}", numa=i) for i in range(12)]  # no two share a numa
    c = claim("a", exactly("r", 2), constraints=[MatchConstraint(f"{DRIVER}/numa")])
    out = allocate([c], inventory, set(), by_model, max_steps=10)
    assert out.results is None and "gave up after" in out.reason


# ------------------------------------------------------------------ property


def _reference(claims: list[ResourceClaim], inventory: list[Device], used: set[tuple[str, str, str]]) -> bool:
    """Brute force: every way to give each (exact, single-alternative) request
    `count` distinct free matching devices; constraints checked at the end."""
    slots = [(ci, s.alternatives[0]) for ci, c in enumerate(claims) for s in c.requests]
    free = [d for d in inventory if d.key not in used]

    def rec(i: int, taken: list[tuple[int, str, Device]]) -> bool:
        if i == len(slots):
            for ci, c in enumerate(claims):
                for con in c.constraints:
                    values = [
                        d.attributes.get(con.attribute) for cj, req, d in taken if cj == ci and con.applies_to(req)
                    ]
                    if any(v is None for v in values) or len(set(values)) > 1:
                        return False
            return True
        ci, req = slots[i]
        names = {d.key for _, _, d in taken}
        options = [d for d in free if d.key not in names and by_model(req, d)]
        for combo in itertools.combinations(options, req.count):
            if rec(i + 1, taken + [(ci, req.name, d) for d in combo]):
                return True
        return False

    return rec(0, [])


models = st.sampled_from(["a100", "t4"])


@st.composite
def problems(draw: st.DrawFn) -> tuple[list[ResourceClaim], list[Device], set[tuple[str, str, str]]]:
    n = draw(st.integers(1, 7))
    inventory = [gpu(f"gpu-{i}", draw(models), draw(st.integers(0, 2))) for i in range(n)]
    used = {d.key for d in inventory if draw(st.booleans()) and draw(st.booleans())}
    claims = []
    for c in range(draw(st.integers(1, 3))):
        slots = [
            exactly(f"r{r}", draw(st.integers(1, 3)), draw(st.sampled_from([None, "a100", "t4"])))
            for r in range(draw(st.integers(1, 2)))
        ]
        constraints = [MatchConstraint(f"{DRIVER}/numa")] if draw(st.booleans()) else []
        claims.append(claim(f"c{c}", *slots, constraints=constraints))
    return claims, inventory, used


@settings(max_examples=400, deadline=None)
@given(problems())
def test_the_allocator_finds_an_allocation_whenever_one_exists_and_every_one_is_valid(
    problem: tuple[list[ResourceClaim], list[Device], set[tuple[str, str, str]]],
) -> None:
    claims, inventory, used = problem
    out = allocate(claims, inventory, used, by_model, max_steps=10**6)
    assert (out.results is not None) == _reference(claims, inventory, used), out.reason
    if out.results is None:
        return
    by_key = {(d.driver, d.pool, d.name): d for d in inventory}
    seen: set[tuple[str, str, str]] = set()
    for c, results in zip(claims, out.results):
        for slot in c.requests:
            req = slot.alternatives[0]
            got = [r for r in results if r.request == req.name]
            assert len(got) == req.count
            for r in got:
                key = (r.driver, r.pool, r.device)
                assert key not in used and key not in seen and by_model(req, by_key[key])
                seen.add(key)
        for con in c.constraints:
            values = {by_key[(r.driver, r.pool, r.device)].attributes.get(con.attribute) for r in results}
            assert len(values) == 1 and None not in values
