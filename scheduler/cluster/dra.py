"""The DRA part of the cache: DeviceClasses, ResourceSlices, ResourceClaims,
and the allocations troupe has decided but the API has not shown yet.

A device is in use when any claim's `status.allocation` names it, or when
troupe assumed an allocation for a claim in a cycle (Reserve) that the watch
has not confirmed; the same two-phase idea as pods assumed onto nodes. No I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..api.dra import (
    POD_CLAIM_NAME_ANNOTATION,
    Allocation,
    Device,
    DeviceClass,
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
        self.claims: dict[ClaimKey, ResourceClaim] = {}
        # Allocations decided by troupe (claim -> allocation), until the
        # claim's status shows one, or the decision is dropped.
        self.assumed: dict[ClaimKey, Allocation] = {}
        # Bumped when what a device matches can change (slices or classes):
        # cached selector results are valid for one generation.
        self.generation = 0
        self._usable: list[ResourceSlice] | None = None
        self._by_node: dict[str, list[Device]] | None = None
        self._shared: list[ResourceSlice] | None = None
        self._homes: dict[DeviceKey, tuple[Device, str]] = {}  # node-local device -> (device, node)
        self._in_use: set[DeviceKey] | None = None
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

    def _slices_changed(self) -> None:
        self.generation += 1
        self._usable = self._by_node = self._shared = None

    def upsert_claim(self, claim: ResourceClaim) -> None:
        self._unindex(claim.key)
        self.claims[claim.key] = claim
        for ref in claim.reserved_for:
            self._consumers.setdefault(ref.uid, set()).add(claim.key)
        if claim.allocation is not None:
            self.assumed.pop(claim.key, None)  # the API shows it now
        self._in_use = None

    def remove_claim(self, key: ClaimKey) -> None:
        self._unindex(key)
        self.claims.pop(key, None)
        self.assumed.pop(key, None)
        self._in_use = None

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
        self.assumed[key] = allocation
        self._in_use = None

    def forget(self, key: ClaimKey) -> None:
        if self.assumed.pop(key, None) is not None:
            self._in_use = None

    # ----------------------------------------------------------------- reads

    def allocation(self, key: ClaimKey) -> Allocation | None:
        """The claim's allocation: in its status, or assumed by troupe."""
        claim = self.claims.get(key)
        if claim is not None and claim.allocation is not None:
            return claim.allocation
        return self.assumed.get(key)

    def in_use(self) -> set[DeviceKey]:
        """Devices allocated to any claim, or assumed for one."""
        if self._in_use is None:
            used: set[DeviceKey] = set()
            for claim in self.claims.values():
                if claim.allocation is not None:
                    used |= claim.allocation.devices()
            for allocation in self.assumed.values():
                used |= allocation.devices()
            self._in_use = used
        return self._in_use

    def usable_slices(self) -> list[ResourceSlice]:
        if self._usable is None:
            self._usable = pool_devices(list(self.slices.values()))
        return self._usable

    def _index(self) -> tuple[dict[str, list[Device]], list[ResourceSlice]]:
        if self._by_node is None or self._shared is None:
            by_node: dict[str, list[Device]] = {}
            shared: list[ResourceSlice] = []
            homes: dict[DeviceKey, tuple[Device, str]] = {}
            for s in sorted(self.usable_slices(), key=lambda s: (s.driver, s.pool, s.name)):
                if s.node_name:
                    by_node.setdefault(s.node_name, []).extend(s.devices)
                    for d in s.devices:
                        homes[d.key] = (d, s.node_name)
                else:
                    shared.append(s)
            self._by_node, self._shared, self._homes = by_node, shared, homes
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
        by_node, shared = self._index()
        if shared:
            return None
        return set(by_node)

    def slice_of(self, key: DeviceKey) -> ResourceSlice | None:
        for s in self.usable_slices():
            if s.driver == key[0] and s.pool == key[1] and any(d.name == key[2] for d in s.devices):
                return s
        return None
