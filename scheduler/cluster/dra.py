"""The DRA part of the cache: DeviceClasses, ResourceSlices, ResourceClaims,
and the allocations troupe has decided but the API has not shown yet.

A device is in use when any claim's `status.allocation` names it, or when
troupe assumed an allocation for a claim in a cycle (Reserve) that the watch
has not confirmed; the same two-phase idea as pods assumed onto nodes. No I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from decimal import Decimal

from ..api.dra import (
    POD_CLAIM_NAME_ANNOTATION,
    Allocation,
    Device,
    DeviceClass,
    DeviceTaintRule,
    ResourceClaim,
    ResourceSlice,
    pool_devices,
)

DeviceKey = tuple[str, str, str]  # (driver, pool, device)
ClaimKey = tuple[str, str]  # (namespace, name)


class DraStore:
    def __init__(self) -> None:
        self.classes: dict[str, DeviceClass] = {}
        self.slices: dict[str, ResourceSlice] = {}
        self.taint_rules: dict[str, DeviceTaintRule] = {}  # their taints are on the devices they pick
        self.claims: dict[ClaimKey, ResourceClaim] = {}
        # Allocations decided by troupe (claim -> allocation), until the
        # claim's status shows one, or the decision is dropped.
        self.assumed: dict[ClaimKey, Allocation] = {}
        # Bumped when what a device matches can change (slices or classes):
        # cached selector results are valid for one generation.
        self.generation = 0
        self._usable: list[ResourceSlice] | None = None
        # Partitionable devices (sharedCounters): per (driver, pool), its counter
        # sets and its devices; pools whose counters do not add up, and why.
        self._counter_sets: dict[tuple[str, str], dict[str, Mapping[str, Decimal]]] = {}
        self._pool_devices: dict[tuple[str, str], list[Device]] = {}
        self.invalid_pools: dict[tuple[str, str], str] = {}
        self._by_node: dict[str, list[Device]] | None = None
        self._shared: list[ResourceSlice] | None = None
        self._homes: dict[DeviceKey, tuple[Device, str]] = {}  # node-local device -> (device, node)
        self._slice_of: dict[DeviceKey, ResourceSlice] = {}
        self._local_nodes: set[str] = set()
        # Devices in use -> how many allocations (in a claim's status, or
        # assumed) hold them; kept up to date change by change. Every change
        # of membership is logged, so per-node counts can follow it; the log
        # is cut (a new epoch) when it grows long.
        self._use: dict[DeviceKey, int] = {}
        self.usage_log: list[tuple[DeviceKey, int]] = []
        self.usage_epoch = 0
        # Consumer uid (pod, PodGroup) -> the claims whose reservedFor names it.
        self._consumers: dict[str, set[ClaimKey]] = {}

    # --------------------------------------------------------------- updates

    def upsert_class(self, cls: DeviceClass) -> None:
        self.classes[cls.name] = cls
        self.generation += 1

    def remove_class(self, name: str) -> None:
        if self.classes.pop(name, None) is not None:
            self.generation += 1

    def upsert_slice(self, s: ResourceSlice) -> None:
        self.slices[s.name] = s
        self._slices_changed()

    def remove_slice(self, name: str) -> None:
        if self.slices.pop(name, None) is not None:
            self._slices_changed()

    def upsert_taint_rule(self, rule: DeviceTaintRule) -> None:
        if self.taint_rules.get(rule.name) != rule:
            self.taint_rules[rule.name] = rule
            self._slices_changed()

    def remove_taint_rule(self, name: str) -> None:
        if self.taint_rules.pop(name, None) is not None:
            self._slices_changed()

    def _slices_changed(self) -> None:
        self.generation += 1
        self._usable = self._by_node = self._shared = None

    def upsert_claim(self, claim: ResourceClaim) -> None:
        self._unindex(claim.key)
        old = self.claims.get(claim.key)
        if old is not None and old.allocation is not None:
            self._hold(old.allocation, -1)
        self.claims[claim.key] = claim
        for ref in claim.reserved_for:
            self._consumers.setdefault(ref.uid, set()).add(claim.key)
        if claim.allocation is not None:
            self._hold(claim.allocation, +1)
            assumed = self.assumed.pop(claim.key, None)  # the API shows it now
            if assumed is not None:
                self._hold(assumed, -1)

    def remove_claim(self, key: ClaimKey) -> None:
        self._unindex(key)
        old = self.claims.pop(key, None)
        if old is not None and old.allocation is not None:
            self._hold(old.allocation, -1)
        self.forget(key)

    def _hold(self, allocation: Allocation, sign: int) -> None:
        for key in allocation.devices():
            count = self._use.get(key, 0) + sign
            if count > 0:
                self._use[key] = count
                if count == 1 and sign > 0:
                    self._log(key, +1)
            elif self._use.pop(key, None) is not None:
                self._log(key, -1)

    def _log(self, key: DeviceKey, sign: int) -> None:
        if len(self.usage_log) >= 100_000:
            self.usage_log = []
            self.usage_epoch += 1
        self.usage_log.append((key, sign))

    def _unindex(self, key: ClaimKey) -> None:
        old = self.claims.get(key)
        for ref in old.reserved_for if old is not None else ():
            keys = self._consumers.get(ref.uid)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._consumers[ref.uid]

    def owned_by(self, owner_uid: str) -> dict[str, ResourceClaim]:
        """Claims made for an owner (a PodGroup) from its templates, by the
        `spec.resourceClaims` name their annotation records."""
        out: dict[str, ResourceClaim] = {}
        for claim in self.claims.values():
            name = claim.annotations.get(POD_CLAIM_NAME_ANNOTATION)
            if name and owner_uid in claim.owner_uids:
                out[name] = claim
        return out

    def reserved_for(self, uid: str) -> list[ResourceClaim]:
        """The claims whose reservedFor names this consumer."""
        return [self.claims[k] for k in sorted(self._consumers.get(uid, ()))]

    def assume(self, key: ClaimKey, allocation: Allocation) -> None:
        self.forget(key)
        self.assumed[key] = allocation
        self._hold(allocation, +1)

    def forget(self, key: ClaimKey) -> None:
        old = self.assumed.pop(key, None)
        if old is not None:
            self._hold(old, -1)

    # ----------------------------------------------------------------- reads

    def allocation(self, key: ClaimKey) -> Allocation | None:
        """The claim's allocation: in its status, or assumed by troupe."""
        claim = self.claims.get(key)
        if claim is not None and claim.allocation is not None:
            return claim.allocation
        return self.assumed.get(key)

    def in_use(self) -> Mapping[DeviceKey, int]:
        """Devices allocated to any claim, or assumed for one (`key in`)."""
        return self._use

    def usable_slices(self) -> list[ResourceSlice]:
        """The slices of complete pools, their devices with the taints
        DeviceTaintRules put on them (upstream's ListWithDeviceTaintRules)."""
        if self._usable is None:
            usable = pool_devices(list(self.slices.values()))
            rules = sorted(self.taint_rules.values(), key=lambda r: r.name)
            usable = [_tainted(s, rules) for s in usable] if rules else usable
            self._usable = self._index_counters(usable)
        return self._usable

    def _index_counters(self, usable: list[ResourceSlice]) -> list[ResourceSlice]:
        """Each pool's counter sets and devices, for partitionable devices; the
        slices of pools whose counters are wrong are left out (upstream's
        pool is invalid then: nothing is allocated from it)."""
        sets: dict[tuple[str, str], dict[str, Mapping[str, Decimal]]] = {}
        devices: dict[tuple[str, str], list[Device]] = {}
        invalid: dict[tuple[str, str], str] = {}
        for s in usable:
            pool = (s.driver, s.pool)
            devices.setdefault(pool, []).extend(s.devices)
            for name, counters in s.shared_counters.items():
                if name in sets.setdefault(pool, {}):
                    invalid[pool] = f"duplicate counter set name {name}"
                sets[pool][name] = counters
        for pool, members in devices.items():
            for d in members:
                for set_name, consumed in d.consumes:
                    known = sets.get(pool, {}).get(set_name)
                    missing = [c for c, _ in consumed if known is None or c not in known]
                    if missing and pool not in invalid:
                        invalid[pool] = (
                            f"device {d.name} consumes {set_name}/{missing[0]}, which its pool does not define"
                        )
        self._counter_sets = {p: v for p, v in sets.items() if p not in invalid}
        self._pool_devices = {p: v for p, v in devices.items() if p not in invalid and p in self._counter_sets}
        self.invalid_pools = invalid
        return [s for s in usable if (s.driver, s.pool) not in invalid]

    def counter_sets(self, pool: tuple[str, str]) -> Mapping[str, Mapping[str, Decimal]]:
        """The pool's counter sets (sharedCounters), empty where it has none."""
        self.usable_slices()
        return self._counter_sets.get(pool, {})

    def partitioned_devices(self, pool: tuple[str, str]) -> list[Device]:
        """Every device of a pool with counter sets (whatever nodes reach them)."""
        self.usable_slices()
        return self._pool_devices.get(pool, [])

    @property
    def partitioned(self) -> bool:
        """Some pool shares counters among its devices (per-node counting does not hold)."""
        self.usable_slices()
        return bool(self._counter_sets)

    def _index(self) -> tuple[dict[str, list[Device]], list[ResourceSlice]]:
        if self._by_node is None or self._shared is None:
            by_node: dict[str, list[Device]] = {}
            shared: list[ResourceSlice] = []
            homes: dict[DeviceKey, tuple[Device, str]] = {}
            slice_of: dict[DeviceKey, ResourceSlice] = {}
            for s in sorted(self.usable_slices(), key=lambda s: (s.driver, s.pool, s.name)):
                for d in s.devices:
                    slice_of[d.key] = s
                if s.node_name:
                    by_node.setdefault(s.node_name, []).extend(s.devices)
                    for d in s.devices:
                        homes[d.key] = (d, s.node_name)
                else:
                    shared.append(s)
            self._by_node, self._shared, self._homes, self._slice_of = by_node, shared, homes, slice_of
            self._local_nodes = set(by_node)
        return self._by_node, self._shared

    def local_devices(self) -> dict[str, list[Device]]:
        """Node name -> the devices of its own slices (complete pools)."""
        return self._index()[0]

    def home(self, key: DeviceKey) -> tuple[Device, str] | None:
        """A node-local device and its node."""
        self._index()
        return self._homes.get(key)

    def devices_for(self, node_name: str, labels: Mapping[str, str]) -> list[Device]:
        """Devices of complete pools that `node_name` reaches: its own
        slices', then those of slices for many nodes (selector, allNodes)."""
        by_node, shared = self._index()
        devices = list(by_node.get(node_name, ()))
        for s in shared:
            if s.reaches(node_name, labels):
                devices.extend(s.devices)
        return devices

    def nodes_with_devices(self) -> set[str] | None:
        """Nodes that have node-local devices; None when some slice serves
        many nodes (then any node may reach devices)."""
        _, shared = self._index()
        if shared:
            return None
        return self._local_nodes

    def slice_of(self, key: DeviceKey) -> ResourceSlice | None:
        self._index()
        return self._slice_of.get(key)


def _tainted(s: ResourceSlice, rules: list[DeviceTaintRule]) -> ResourceSlice:
    """The slice with each rule's taint on the devices the rule picks."""
    devices = []
    changed = False
    for d in s.devices:
        extra = tuple(r.taint for r in rules if r.applies_to(d))
        if extra:
            d = replace(d, taints=d.taints + extra)
            changed = True
        devices.append(d)
    return replace(s, devices=tuple(devices)) if changed else s
