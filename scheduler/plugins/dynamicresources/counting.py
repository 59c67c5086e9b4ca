"""Which devices match a request, and how many free ones each node has:
the DynamicResources Filter's common case counted per node instead of
searched, with the caches that make it cheap across cycles.

- `DeviceMatcher`: a request's class and own selectors against one device,
  cached per device, and shared by devices of equal content (driver,
  attributes, capacity: all CEL sees), so 40 000 identical GPUs cost one
  evaluation; valid for one store generation (slices and classes).
- `NodeCounts`: per snapshot row, the matching node-local devices and those
  in use; the in-use counts follow the store's usage log (a few devices per
  cycle) instead of being recounted.
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from typing import Any

import numpy as np

from ...api.dra import EXACT_COUNT, Device, DeviceRequest, NodeSelector, ResourceClaim
from ...cluster.dra import DeviceKey, DraStore
from ...cluster.snapshot import Snapshot
from .cel import SelectorError, compile_selector


class DeviceMatcher:
    def __init__(self, store: DraStore) -> None:
        self._store = store
        # (class, selectors, device) -> does the device match; valid for one store generation.
        self._matches: dict[tuple[str, tuple[str, ...], DeviceKey], bool] = {}
        self._by_content: dict[tuple[Any, ...], bool] = {}
        self._generation = -1

    def __call__(self, request: DeviceRequest, device: Device) -> bool:
        """Raises SelectorError when a selector fails on the device."""
        if self._generation != self._store.generation:
            self._matches.clear()
            self._by_content.clear()
            self._generation = self._store.generation
        key = (request.device_class, request.selectors, device.key)
        hit = self._matches.get(key)
        if hit is None:
            content = (
                request.device_class,
                request.selectors,
                device.driver,
                tuple(sorted(device.attributes.items())),
                tuple(sorted(device.capacity.items())),
            )
            hit = self._by_content.get(content)
            if hit is None:
                cls = self._store.classes.get(request.device_class)
                if cls is None:
                    hit = False
                else:
                    hit = all(compile_selector(e).matches(device) for e in (*cls.selectors, *request.selectors))
                self._by_content[content] = hit
            if len(self._matches) > 1_000_000:
                self._matches.clear()
                self._by_content.clear()
            self._matches[key] = hit
        return hit


class NodeCounts:
    def __init__(self, store: DraStore, matcher: DeviceMatcher) -> None:
        self._store = store
        self._matcher = matcher
        self._counts: dict[tuple[Any, ...], np.ndarray] = {}
        # (class, selectors, rows) -> (usage epoch, store generation, log position, used per row)
        self._used: dict[tuple[Any, ...], tuple[int, int, int, np.ndarray]] = {}

    def free_counts(
        self, pending: list[ResourceClaim], snapshot: Snapshot, freed: frozenset[tuple[str, str, str]] = frozenset()
    ) -> tuple[np.ndarray, int] | None:
        """The common case counted per node instead of searched: every
        pending request asks ExactCount of one kind of device (one class, the
        same selectors), no alternatives, no constraints, node-local devices
        only. Then a node fits exactly when it has that many free matching
        devices. None: not that case."""
        requests: list[DeviceRequest] = []
        for claim in pending:
            if claim.constraints:
                return None
            for slot in claim.requests:
                if len(slot.alternatives) != 1 or slot.alternatives[0].mode != EXACT_COUNT:
                    return None
                requests.append(slot.alternatives[0])
        kinds = {(r.device_class, r.selectors, r.tolerations) for r in requests}
        # Partitions of one device share its counters: not countable per node.
        if len(kinds) != 1 or self._store.nodes_with_devices() is None or self._store.partitioned:
            return None
        request = requests[0]
        try:
            matching = self._matching_rows(request, snapshot)
            used = self._used_rows(request, snapshot)
            if freed:
                used = used.copy()
                for device_key in freed:
                    home = self._store.home(device_key)
                    row = snapshot.row.get(home[1]) if home is not None else None
                    if home is not None and row is not None and self._usable(request, home[0]):
                        used[row] -= 1
        except SelectorError:
            return None  # node by node, so each node gets the selector's error
        return matching - used, sum(r.count for r in requests)

    def _usable(self, request: DeviceRequest, device: Device) -> bool:
        """The device matches the request, and no taint of it keeps it from the request."""
        return self._matcher(request, device) and request.untolerated(device) is None

    def _matching_rows(self, request: DeviceRequest, snapshot: Snapshot) -> np.ndarray:
        """Per row, the node-local devices matching the request's class and
        selectors whose taints it tolerates."""
        key = (
            request.device_class,
            request.selectors,
            request.tolerations,
            self._store.generation,
            snapshot.static_generation,
            len(snapshot),
        )
        hit = self._counts.get(key)
        if hit is None:
            counts = np.zeros(len(snapshot), dtype=np.int64)
            for node_name, devices in self._store.local_devices().items():
                row = snapshot.row.get(node_name)
                if row is not None:
                    counts[row] = sum(1 for d in devices if self._usable(request, d))
            if len(self._counts) > 64:
                self._counts.clear()
            hit = self._counts[key] = counts
        return hit

    def _used_rows(self, request: DeviceRequest, snapshot: Snapshot) -> np.ndarray:
        """Per row, the matching node-local devices in use: following the
        store's usage log since the last call (a few devices per cycle), or
        counted afresh after a new epoch, slices or classes changed."""
        store = self._store
        key = (request.device_class, request.selectors, request.tolerations, snapshot.static_generation, len(snapshot))
        hit = self._used.get(key)
        if hit is None or hit[0] != store.usage_epoch or hit[1] != store.generation:
            used = np.zeros(len(snapshot), dtype=np.int64)
            changes: Iterable[tuple[tuple[str, str, str], int]] = ((k, 1) for k in store.in_use())
        else:
            used = hit[3]
            changes = store.usage_log[hit[2] :]
        for device_key, sign in changes:
            home = store.home(device_key)
            if home is None:
                continue
            row = snapshot.row.get(home[1])
            if row is not None and self._usable(request, home[0]):
                used[row] += sign
        if len(self._used) > 64:
            self._used.clear()
        self._used[key] = (store.usage_epoch, store.generation, len(store.usage_log), used)
        return used


def freed_by_trial(store: DraStore, snapshot: Snapshot) -> frozenset[DeviceKey]:
    """Devices a preemption trial frees: those of claims reserved only
    for pods the trial removed from the snapshot (when the victims go,
    their claims are released)."""
    if not snapshot.removed:
        return frozenset()
    freed: set[tuple[str, str, str]] = set()
    for uid in snapshot.removed:
        for claim in store.reserved_for(uid):
            if claim.allocation is not None and all(r.uid in snapshot.removed for r in claim.reserved_for):
                freed |= claim.allocation.devices()
    return frozenset(freed)


def selector_rows(selector: NodeSelector, snapshot: Snapshot) -> np.ndarray:
    """Rows whose node the selector matches; a selector naming nodes
    (`metadata.name In [...]`, what a node-local allocation has) by lookup."""
    mask = np.zeros(len(snapshot), dtype=bool)
    names = selector.node_names()
    if names is not None:
        for name in names:
            row = snapshot.row.get(name)
            if row is not None:
                mask[row] = True
        return mask
    for row, node in enumerate(snapshot.nodes):
        if node is not None and selector.matches(node.name, node.labels):
            mask[row] = True
    return mask


class Without:
    """Devices in use, but for those a preemption trial frees."""

    def __init__(self, in_use: Container[tuple[str, str, str]], freed: frozenset[tuple[str, str, str]]) -> None:
        self.in_use, self.freed = in_use, freed

    def __contains__(self, key: object) -> bool:
        return key in self.in_use and key not in self.freed
