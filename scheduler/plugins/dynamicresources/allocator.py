"""The structured-parameters allocator (upstream
k8s.io/dynamic-resource-allocation/structured): which devices, among those a
node can reach, satisfy every request of a set of ResourceClaims.

A depth-first search over the requests in claim order, each request's
devices picked one by one in a fixed device order (so the same input always
gives the same answer), backtracking when a later request or a
`matchAttribute` constraint cannot be met. `firstAvailable` alternatives are
tried in order. The search is bounded by a step budget; running out is a
failure with that reason, never a partial allocation.

Pure: no I/O, no cache. `matches(request, device)` says whether a device
satisfies a request's class and own selectors (the plugin caches it);
it may raise SelectorError, which fails the allocation for this node.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from ...api.dra import ALL, AllocationResult, AttributeValue, Device, DeviceRequest, RequestSlot, ResourceClaim
from ...api.quantity import format_units
from .cel import SelectorError

DeviceKey = tuple[str, str, str]
Matcher = Callable[[DeviceRequest, Device], bool]

# Device picks the search may try per allocation (upstream bounds its search by time).
MAX_STEPS = 20_000


@dataclass(slots=True)
class Outcome:
    """Per claim, the devices given to its requests (None: no allocation;
    `reason` says why)."""

    results: list[list[AllocationResult]] | None
    reason: str = ""
    steps: int = 0


@dataclass(slots=True)
class _Search:
    claims: Sequence[ResourceClaim]
    devices: Sequence[Device]
    in_use: Container[DeviceKey]
    matches: Matcher
    max_steps: int
    counters: CounterBook | None = None  # partitionable devices' shared counters
    steps: int = 0
    taken: set[DeviceKey] = field(default_factory=set)
    # Per claim, attribute -> value fixed by the first device of a matchAttribute constraint.
    fixed: list[dict[str, AttributeValue]] = field(default_factory=list)
    results: list[list[AllocationResult]] = field(default_factory=list)
    candidates: dict[DeviceRequest, list[Device]] = field(default_factory=dict)
    # Per request, the matching devices a taint keeps from it (not candidates).
    tainted: dict[DeviceRequest, list[Device]] = field(default_factory=dict)
    first_failure: str = ""

    def candidates_for(self, request: DeviceRequest) -> list[Device]:
        """The devices that match the request and whose taints it tolerates."""
        found = self.candidates.get(request)
        if found is None:
            matching = [d for d in self.devices if self.matches(request, d)]
            found = [d for d in matching if request.untolerated(d) is None]
            if len(found) < len(matching):
                self.tainted[request] = [d for d in matching if request.untolerated(d) is not None]
            self.candidates[request] = found
        return found

    def tainted_note(self, request: DeviceRequest) -> str:
        """What the request's taint check left out, for its message."""
        tainted = self.tainted.get(request)
        if not tainted:
            return ""
        taint = request.untolerated(tainted[0])
        return f"{len(tainted)} matching device(s) tainted (device {tainted[0].name}: {taint}, not tolerated)"


class BudgetExceeded(Exception):
    pass


PoolKey = tuple[str, str]  # (driver, pool)


class CounterBook:
    """Partitionable devices (upstream checkAvailableCounters): what each
    pool's shared counters have left, that is its counter sets less what
    the devices in use consume, less what this search has taken. A device
    that consumes counters fits only while every counter of its pool stays
    at or above zero."""

    def __init__(
        self,
        counter_sets: Callable[[PoolKey], Mapping[str, Mapping[str, Decimal]]],
        pool_devices: Callable[[PoolKey], Sequence[Device]],
        in_use: Container[DeviceKey],
    ) -> None:
        self._sets = counter_sets
        self._devices = pool_devices
        self._in_use = in_use
        self._left: dict[PoolKey, dict[tuple[str, str], Decimal]] = {}

    def _pool(self, pool: PoolKey) -> dict[tuple[str, str], Decimal]:
        left = self._left.get(pool)
        if left is None:
            left = {(s, c): v for s, counters in self._sets(pool).items() for c, v in counters.items()}
            for d in self._devices(pool):
                if d.key in self._in_use:
                    for key, value in _consumption(d):
                        if key in left:
                            left[key] -= value
            self._left[pool] = left
        return left

    def short(self, device: Device) -> str:
        """Why the device does not fit its pool's counters now, "" if it
        does. As upstream, every counter of the pool must stay at or above
        zero, not only those the device consumes (a pool overdrawn already,
        after its counters shrank, gives nothing more)."""
        left = self._pool((device.driver, device.pool))
        takes = dict(_consumption(device))
        for key, have in left.items():
            value = takes.get(key, Decimal(0))
            if have < value:
                shown, rest = _quantity(value), _quantity(max(have, Decimal(0)))
                if not value:
                    return f"device {device.name}: counter {key[0]}/{key[1]} of its pool is overdrawn"
                return f"device {device.name} needs {shown} of counter {key[0]}/{key[1]}, {rest} left"
        return ""

    def take(self, device: Device, sign: int = 1) -> None:
        left = self._pool((device.driver, device.pool))
        for key, value in _consumption(device):
            left[key] = left.get(key, Decimal(0)) - sign * value


def _quantity(value: Decimal) -> str:
    """A counter's amount as a driver would write it (80Gi, not 85899345920)."""
    if value == value.to_integral_value():
        return format_units("memory", int(value))  # binary suffixes where they divide it
    return str(value.normalize())


def _consumption(device: Device) -> list[tuple[tuple[str, str], Decimal]]:
    return [((s, c), v) for s, counters in device.consumes for c, v in counters]


def allocate(
    claims: Sequence[ResourceClaim],
    devices: Sequence[Device],
    in_use: Container[DeviceKey],
    matches: Matcher,
    max_steps: int = MAX_STEPS,
    counters: CounterBook | None = None,
) -> Outcome:
    """Devices for every request of every claim, or why there are none.
    `devices`: what the node reaches (complete pools only), `in_use`: devices
    allocated to any other claim; `counters`: the shared counters of pools
    with partitionable devices (None: no such pool)."""
    search = _Search(claims, devices, in_use, matches, max_steps, counters)
    search.fixed = [{} for _ in claims]
    search.results = [[] for _ in claims]
    slots = [(c, slot) for c, claim in enumerate(claims) for slot in claim.requests]
    try:
        found = _slot(search, slots, 0)
    except SelectorError as exc:
        return Outcome(None, str(exc), search.steps)
    except BudgetExceeded:
        return Outcome(None, f"the device search gave up after {search.steps} steps", search.steps)
    if not found:
        return Outcome(None, search.first_failure or "cannot allocate all claims", search.steps)
    return Outcome([list(r) for r in search.results], "", search.steps)


def _slot(search: _Search, slots: list[tuple[int, RequestSlot]], i: int) -> bool:
    if i == len(slots):
        return True
    c, slot = slots[i]
    for request in slot.alternatives:
        if request.mode == ALL:
            if _all_devices(search, slots, i, c, request):
                return True
        elif _pick(search, slots, i, c, request, request.count, 0):
            return True
    return False


def _constraint_ok(search: _Search, c: int, request: DeviceRequest, device: Device) -> list[str] | None:
    """Attributes this device newly fixes for the claim's constraints, or
    None when it breaks one."""
    newly: list[str] = []
    for constraint in search.claims[c].constraints:
        if not constraint.applies_to(request.name):
            continue
        value = device.attributes.get(constraint.attribute)
        if value is None:
            _note(search, f"device {device.name} lacks attribute {constraint.attribute} (matchAttribute)")
            return None
        fixed = search.fixed[c].get(constraint.attribute)
        if fixed is None:
            if constraint.attribute not in newly:
                newly.append(constraint.attribute)
        elif fixed != value:
            _note(search, f"devices differ in {constraint.attribute} (matchAttribute)")
            return None
    return newly


def _fits_counters(search: _Search, device: Device) -> bool:
    if search.counters is None or not device.consumes:
        return True
    why = search.counters.short(device)
    if why:
        _note(search, why)
    return not why


def _take(search: _Search, c: int, request: DeviceRequest, device: Device, newly: list[str]) -> None:
    if search.counters is not None and device.consumes:
        search.counters.take(device)
    for attribute in newly:
        search.fixed[c][attribute] = device.attributes[attribute]
    search.taken.add(device.key)
    search.results[c].append(
        AllocationResult(request.name, device.driver, device.pool, device.name, request.tolerations)
    )


def _untake(search: _Search, c: int, device: Device, newly: list[str]) -> None:
    if search.counters is not None and device.consumes:
        search.counters.take(device, -1)
    for attribute in newly:
        del search.fixed[c][attribute]
    search.taken.discard(device.key)
    search.results[c].pop()


def _pick(
    search: _Search, slots: list[tuple[int, RequestSlot]], i: int, c: int, request: DeviceRequest, left: int, start: int
) -> bool:
    """Choose `left` more devices for `request`, from candidate index `start`
    on (increasing indices: each set of devices is tried once)."""
    if left == 0:
        return _slot(search, slots, i + 1)
    candidates = search.candidates_for(request)
    free = sum(1 for d in candidates[start:] if d.key not in search.in_use and d.key not in search.taken)
    if free < left:
        note = search.tainted_note(request)
        _note(
            search,
            f"{request.name}: {free} matching device(s) free, {left} more needed" + (f"; {note}" if note else ""),
        )
        return False
    for j in range(start, len(candidates)):
        device = candidates[j]
        if device.key in search.in_use or device.key in search.taken:
            continue
        search.steps += 1
        if search.steps > search.max_steps:
            raise BudgetExceeded
        newly = _constraint_ok(search, c, request, device)
        if newly is None or not _fits_counters(search, device):
            continue
        _take(search, c, request, device, newly)
        if _pick(search, slots, i, c, request, left - 1, j + 1):
            return True
        _untake(search, c, device, newly)
    return False


def _all_devices(search: _Search, slots: list[tuple[int, RequestSlot]], i: int, c: int, request: DeviceRequest) -> bool:
    """allocationMode All: every matching device the node reaches, none of
    them in use; at least one."""
    candidates = search.candidates_for(request)
    if search.tainted.get(request):
        # Upstream's too: "all" counts every matching device, and a taint keeps one from it.
        _note(search, f"{request.name}: allocationMode All, but {search.tainted_note(request)}")
        return False
    if not candidates:
        _note(search, f"{request.name}: no matching device (allocationMode All)")
        return False
    busy = [d.name for d in candidates if d.key in search.in_use or d.key in search.taken]
    if busy:
        _note(search, f"{request.name}: allocationMode All, but {len(busy)} matching device(s) are allocated")
        return False
    done: list[tuple[Device, list[str]]] = []
    for device in candidates:
        search.steps += 1
        newly = _constraint_ok(search, c, request, device)
        if newly is None or not _fits_counters(search, device):
            break
        _take(search, c, request, device, newly)
        done.append((device, newly))
    else:
        if _slot(search, slots, i + 1):
            return True
    for device, newly in reversed(done):
        _untake(search, c, device, newly)
    return False


def _note(search: _Search, why: str) -> None:
    if not search.first_failure:
        search.first_failure = why
