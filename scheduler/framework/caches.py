"""Results of signed Filter and Score plugins, reused across pods and cycles.

Two kinds, both keyed by (plugin position, the plugin's `sign_pod`):

- static: the answer of a plugin that reads only the pod and the nodes'
  labels, taints and flags, for every row. Valid while the node table's
  static generation and row count are unchanged; flushed (reason
  `nodes-changed`) when they change.
- row-local: an answer per row, each valid while that row's version is
  unchanged (`RowResult`); stale rows are recomputed, not the whole array.

Each map is bounded (least recently used out first, reason `capacity`); every
flush and eviction is counted in `troupe_plugin_cache_flushes_total`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np
from prometheus_client import Counter

from ..cluster.snapshot import Snapshot
from .interface import FilterResult

FLUSHES = Counter(
    "troupe_plugin_cache_flushes_total",
    "Entries dropped from the plugin result caches, by cache and reason "
    "(nodes-changed: labels, taints or the set of nodes changed; capacity: the least recently used entry made room).",
    ["cache", "reason"],
)

STATIC_ENTRIES = 4096
ROW_LOCAL_ENTRIES = 256

V = TypeVar("V")


class BoundedCache(Generic[V]):
    """A dict with a size bound: the least recently used entry goes first."""

    def __init__(self, name: str, capacity: int) -> None:
        self.name = name
        self.capacity = capacity
        self._data: OrderedDict[Hashable, V] = OrderedDict()
        self._evicted = FLUSHES.labels(cache=name, reason="capacity")
        self._flushed = FLUSHES.labels(cache=name, reason="nodes-changed")

    def get(self, key: Hashable) -> V | None:
        value = self._data.get(key)
        if value is not None:
            self._data.move_to_end(key)
        return value

    def put(self, key: Hashable, value: V) -> V:
        self._data[key] = value
        if len(self._data) > self.capacity:
            self._data.popitem(last=False)
            self._evicted.inc()
        return value

    def flush(self) -> None:
        if self._data:
            self._flushed.inc(len(self._data))
            self._data.clear()

    def __len__(self) -> int:
        return len(self._data)

    def values(self) -> list[V]:
        return list(self._data.values())


@dataclass(slots=True)
class RowResult:
    """A row-local result for every row, valid for the rows whose version
    (NodeTable.row_version) is still `versions[row]`."""

    values: np.ndarray | None
    versions: np.ndarray | None
    columns: int = 0
    calls: int = 0
    result: FilterResult | None = None
    serial: int = 0  # the snapshot state `versions` was last brought up to date in
    seen: int = 0  # ... and how many of its changed_rows it had seen then

    def stale_rows(self, snapshot: Snapshot) -> np.ndarray | None:
        """Rows whose result must be recomputed; None when the whole array must
        be (the table grew, shrank or gained a resource column). Within one
        snapshot state only the rows changed since the last call can differ;
        otherwise rows are compared version by version."""
        if self.versions is None or len(self.versions) != len(snapshot) or self.columns != len(snapshot.resources):
            return None
        if self.serial == snapshot.serial:
            stale = np.array(sorted(set(snapshot.changed_rows[self.seen :])), dtype=np.int64)
        else:
            stale = np.flatnonzero(snapshot.row_version != self.versions)
        self.serial, self.seen = snapshot.serial, len(snapshot.changed_rows)
        return stale

    def synced(self, snapshot: Snapshot) -> None:
        self.versions = snapshot.row_version.copy()
        self.columns = len(snapshot.resources)
        self.serial, self.seen = snapshot.serial, len(snapshot.changed_rows)


class PluginCaches:
    """One profile's cached plugin results."""

    def __init__(self, static_entries: int = STATIC_ENTRIES, row_local_entries: int = ROW_LOCAL_ENTRIES) -> None:
        self.static_filters: BoundedCache[FilterResult] = BoundedCache("static-filter", static_entries)
        self.static_masks: BoundedCache[np.ndarray] = BoundedCache("static-mask", static_entries)
        # Per signature: every row's raw score, and whether it is the same on every node.
        self.static_scores: BoundedCache[tuple[np.ndarray, bool]] = BoundedCache("static-score", static_entries)
        self.row_filters: BoundedCache[RowResult] = BoundedCache("row-local-filter", row_local_entries)
        self.row_scores: BoundedCache[RowResult] = BoundedCache("row-local-score", row_local_entries)
        self._static_key: tuple[int, int] = (-1, -1)

    def check_static(self, snapshot: Snapshot) -> None:
        """Static results hold for one (static generation, row count)."""
        key = (snapshot.static_generation, len(snapshot))
        if key != self._static_key:
            self._static_key = key
            self.static_filters.flush()
            self.static_masks.flush()
            self.static_scores.flush()
