"""NodeResourcesFit: does the pod's request fit the node's free allocatable; scores
by `scoringStrategy` (LeastAllocated, MostAllocated, RequestedToCapacityRatio).

Upstream semantics (pkg/scheduler/framework/plugins/noderesources: fit.go,
resource_allocation.go, least_allocated.go, most_allocated.go,
requested_to_capacity_ratio.go, helper/shape_score.go):

- Filter: a resource the pod requests nothing of is not checked; "Too many
  pods" when the node's pod slots are used up; extended resources a node does
  not offer are insufficient there; `ignoredResources` /
  `ignoredResourceGroups` skip extended resources managed elsewhere.
- Score: cpu and memory use the non-zero requests (containers asking nothing
  count 100m / 200Mi) of the node and the pod; ephemeral-storage and scalar
  resources (extended, hugepages, prefixed native, attachable volumes) use the
  real requests; a scalar resource the pod requests none of is left out, and
  so is any resource a node has no allocatable of (upstream leaves "pods" and
  unknown unprefixed names out the same way).
- Args are defaulted as the v1 config API does (no strategy: LeastAllocated;
  no resources: cpu and memory; weight missing or 0: 1) and validated as
  upstream's ValidateNodeResourcesFitArgs, with its field-path messages.

Differs from upstream: a `scoringStrategy` without `type` means LeastAllocated
(upstream's v1 API rejects the empty type); no DRA-backed extended resources;
no ScorePlacement (the placement algorithm is not here yet).

The resource-allocation helpers here (`resource_allocation`, `go_div`) are
shared with NodeResourcesBalancedAllocation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Mapping, Sequence

import numpy as np

from ..api.records import PodInfo
from ..api.resources import CPU, EPHEMERAL_STORAGE, MEMORY, PODS
from ..cluster.snapshot import Snapshot
from ..framework.interface import CycleState, FilterPlugin, FilterResult, Handle, ScorePlugin
from ..framework import events as E

MAX_NODE_SCORE = 100
MAX_CUSTOM_PRIORITY_SCORE = 10  # upstream config.MaxCustomPriorityScore: shape scores are 0..10
MAX_UTILIZATION = 100
MAX_RESOURCE_WEIGHT = 100

LEAST_ALLOCATED = "LeastAllocated"
MOST_ALLOCATED = "MostAllocated"
REQUESTED_TO_CAPACITY_RATIO = "RequestedToCapacityRatio"
SCORING_STRATEGIES = (LEAST_ALLOCATED, MOST_ALLOCATED, REQUESTED_TO_CAPACITY_RATIO)

# Keys a pluginConfig args object may carry besides the plugin's own fields.
_META_KEYS = ("apiVersion", "kind")

Scorer = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


# ------------------------------------------------------------ validation


def go_quote(value: Any) -> str:
    """How field.Error renders a bad value: strings quoted, numbers bare."""
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class FieldErrors(list[str]):
    """An upstream field.ErrorList: `raise_if_any` gives its ToAggregate() text."""

    def invalid(self, path: str, value: Any, detail: str) -> None:
        self.append(f"{path}: Invalid value: {go_quote(value)}: {detail}")

    def required(self, path: str, detail: str) -> None:
        self.append(f"{path}: Required value: {detail}")

    def forbidden(self, path: str, detail: str) -> None:
        self.append(f"{path}: Forbidden: {detail}")

    def duplicate(self, path: str, value: Any) -> None:
        self.append(f"{path}: Duplicate value: {go_quote(value)}")

    def not_supported(self, path: str, value: Any, supported: Sequence[str]) -> None:
        self.append(f"{path}: Unsupported value: {go_quote(value)}: supported values: {', '.join(go_quote(s) for s in supported)}")

    def unknown_fields(self, obj: Mapping[str, Any], path: str, allowed: Sequence[str]) -> None:
        # Upstream decodes plugin args strictly: a misspelt field is an error.
        for key in obj:
            if key not in allowed:
                self.append(f"{path + '.' if path else ''}{key}: unknown field")

    def raise_if_any(self) -> None:
        if len(self) == 1:
            raise ValueError(self[0])
        if self:
            raise ValueError("[" + ", ".join(self) + "]")


def as_mapping(value: Any, path: str, errs: FieldErrors) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        errs.invalid(path, str(value), "must be an object")
        return {}
    return value


def as_list(value: Any, path: str, errs: FieldErrors) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        errs.invalid(path, str(value), "must be a list")
        return []
    return list(value)


def as_int(value: Any, path: str, errs: FieldErrors, default: int = 0) -> int | None:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        errs.invalid(path, str(value), "must be an integer")
        return None
    return value


@dataclass(frozen=True, slots=True)
class ResourceSpec:
    name: str
    weight: int


DEFAULT_RESOURCES = (ResourceSpec(CPU, 1), ResourceSpec(MEMORY, 1))


def parse_resource_specs(raw: Any, path: str, errs: FieldErrors) -> list[ResourceSpec]:
    """`[{name, weight}]` with the v1 defaults: none given -> cpu and memory,
    weight missing or 0 -> 1. Weights are left for the caller to validate."""
    items = as_list(raw, path, errs)
    if not items:
        return list(DEFAULT_RESOURCES)
    specs = []
    for i, item in enumerate(items):
        where = f"{path}[{i}]"
        item = as_mapping(item, where, errs)
        errs.unknown_fields(item, where, ("name", "weight"))
        name = item.get("name")
        if not isinstance(name, str) or not name:
            errs.required(f"{where}.name", "must be a resource name")
            continue
        weight = as_int(item.get("weight"), f"{where}.weight", errs)
        if weight is None:
            continue
        specs.append(ResourceSpec(name, weight or 1))
    return specs


_LABEL_KEY_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_KEY_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
    "character (e.g. 'MyName', or 'my.name', or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)


def label_key_errors(value: str) -> list[str]:
    """Upstream validation.IsQualifiedName (metav1validation.ValidateLabelName)."""
    parts = value.split("/")
    if len(parts) > 2:
        return ["a valid label key " + _LABEL_KEY_MSG + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"]
    errs = []
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errs.append("prefix part must be non-empty")
        elif len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix):
            errs.append("prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
                        "'-' or '.', and must start and end with an alphanumeric character")
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part must be no more than 63 bytes")
    if not _LABEL_KEY_NAME.match(name):
        errs.append("name part " + _LABEL_KEY_MSG)
    return errs


def _validate_shape(raw: Any, path: str, errs: FieldErrors) -> list[tuple[int, int]]:
    """Upstream validateFunctionShape: at least one point, utilization strictly
    increasing, utilization in [0, 100], score in [0, 10]."""
    items = as_list(raw, path, errs)
    if not items:
        errs.required(path, "at least one point must be specified")
        return []
    points: list[tuple[int, int]] = []
    for i, item in enumerate(items):
        where = f"{path}[{i}]"
        item = as_mapping(item, where, errs)
        errs.unknown_fields(item, where, ("utilization", "score"))
        u = as_int(item.get("utilization"), f"{where}.utilization", errs)
        s = as_int(item.get("score"), f"{where}.score", errs)
        points.append((u if u is not None else 0, s if s is not None else 0))
    for i in range(1, len(points)):
        if points[i - 1][0] >= points[i][0]:
            errs.invalid(f"{path}[{i}].utilization", points[i][0], "values must be sorted in increasing order")
            break
    for i, (u, s) in enumerate(points):
        if not 0 <= u <= MAX_UTILIZATION:
            errs.invalid(f"{path}[{i}].utilization", u, f"not in valid range [0, {MAX_UTILIZATION}]")
        if not 0 <= s <= MAX_CUSTOM_PRIORITY_SCORE:
            errs.invalid(f"{path}[{i}].score", s, f"not in valid range [0, {MAX_CUSTOM_PRIORITY_SCORE}]")
    return points


# ------------------------------------------------------ resource allocation


def go_div(a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray:
    """Go's integer division (truncates toward zero; numpy's // floors)."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q)


def is_scalar_resource(name: str) -> bool:
    """Upstream schedutil.IsScalarResourceName: extended (prefixed, not
    *kubernetes.io/), hugepages-*, prefixed native (*kubernetes.io/*),
    attachable-volumes-*. Those are left out of scoring when the pod asks none."""
    if name.startswith("hugepages-") or name.startswith("attachable-volumes-"):
        return True
    return "/" in name and not name.startswith("requests.")


def pod_request(pod: PodInfo, resource: str, use_requested: bool) -> int:
    """Upstream calculatePodResourceRequest: non-zero cpu/memory unless `use_requested`."""
    if not use_requested:
        if resource == CPU:
            return pod.nonzero_cpu
        if resource == MEMORY:
            return pod.nonzero_memory
    return int(pod.requests.get(resource, 0))


def resource_allocation(
    pod: PodInfo, snapshot: Snapshot, rows: np.ndarray, specs: Sequence[ResourceSpec], use_requested: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Upstream calculateNodeAllocatableRequest over `rows` at once.

    Returns (pod_requests[k], requested[n, k], allocated[n, k], allocatable[n, k])
    for the k configured resources; allocatable is 0 where upstream leaves the
    entry out (scorers skip those). Costs O(n * k), numpy only.
    """
    n, k = len(rows), len(specs)
    pod_req = np.zeros(k, dtype=np.int64)
    allocated = np.zeros((n, k), dtype=np.int64)
    allocatable = np.zeros((n, k), dtype=np.int64)
    for j, spec in enumerate(specs):
        name = spec.name
        amount = pod_request(pod, name, use_requested)
        pod_req[j] = amount
        if amount == 0 and is_scalar_resource(name):
            continue
        if name not in (CPU, MEMORY, EPHEMERAL_STORAGE) and not is_scalar_resource(name):
            continue  # "pods" and unknown unprefixed names: not in upstream's scalar map
        col = snapshot.column.get(name)
        if col is None:
            continue  # no node offers it
        allocatable[:, j] = snapshot.alloc[rows, col]
        if name in (CPU, MEMORY) and not use_requested:
            allocated[:, j] = snapshot.nonzero[rows, 0 if name == CPU else 1]
        else:
            allocated[:, j] = snapshot.req[rows, col]
    has = allocatable > 0
    allocated = np.where(has, allocated, 0)
    requested = np.where(has, allocated + pod_req, 0)
    return pod_req, requested, allocated, allocatable


def _weighted_mean(scores: np.ndarray, use: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: sum(score * weight) and sum(weight) over the entries in `use`."""
    w = np.where(use, weights[None, :], 0)
    return (scores * w).sum(axis=1), w.sum(axis=1)


def least_allocated_scorer(weights: np.ndarray) -> Scorer:
    """least_allocated.go: mean over resources of (capacity-requested)*100/capacity."""

    def score(requested: np.ndarray, allocated: np.ndarray, allocatable: np.ndarray) -> np.ndarray:
        has = allocatable > 0
        cap = np.where(has, allocatable, 1)
        s = np.where(requested > allocatable, 0, (allocatable - requested) * MAX_NODE_SCORE // cap)
        total, wsum = _weighted_mean(s, has, weights)
        return np.where(wsum > 0, total // np.maximum(wsum, 1), 0)

    return score


def most_allocated_scorer(weights: np.ndarray) -> Scorer:
    """most_allocated.go: mean over resources of min(requested, capacity)*100/capacity."""

    def score(requested: np.ndarray, allocated: np.ndarray, allocatable: np.ndarray) -> np.ndarray:
        has = allocatable > 0
        cap = np.where(has, allocatable, 1)
        s = np.minimum(requested, allocatable) * MAX_NODE_SCORE // cap
        total, wsum = _weighted_mean(s, has, weights)
        return np.where(wsum > 0, total // np.maximum(wsum, 1), 0)

    return score


def broken_linear(shape: Sequence[tuple[int, int]], p: int) -> int:
    """Upstream helper.BuildBrokenLinearFunction, Go integer arithmetic included."""
    for i, (u, s) in enumerate(shape):
        if p <= u:
            if i == 0:
                return shape[0][1]
            u0, s0 = shape[i - 1]
            return s0 + int(go_div((s - s0) * (p - u0), u - u0))
    return shape[-1][1]


def requested_to_capacity_ratio_scorer(weights: np.ndarray, shape: Sequence[tuple[int, int]]) -> Scorer:
    """requested_to_capacity_ratio.go: the shape (scores 0..10, scaled to 0..100)
    applied to each resource's utilization; resources scoring 0 are left out of
    the weighted mean, which is rounded (math.Round)."""
    scaled = [(u, s * (MAX_NODE_SCORE // MAX_CUSTOM_PRIORITY_SCORE)) for u, s in shape]
    # Utilization is an integer in 0..100 (over capacity counts as 100): a table.
    table = np.array([broken_linear(scaled, p) for p in range(MAX_UTILIZATION + 1)], dtype=np.int64)

    def score(requested: np.ndarray, allocated: np.ndarray, allocatable: np.ndarray) -> np.ndarray:
        has = allocatable > 0
        cap = np.where(has, allocatable, 1)
        util = np.where(requested > allocatable, MAX_UTILIZATION, requested * MAX_UTILIZATION // cap)
        s = table[np.clip(util, 0, MAX_UTILIZATION)]
        total, wsum = _weighted_mean(s, has & (s > 0), weights)
        # math.Round of a non-negative ratio: half rounds up.
        return np.where(wsum > 0, (2 * total + wsum) // np.maximum(2 * wsum, 1), 0)

    return score


def cpu_memory_rows(state: CycleState, snapshot: Snapshot, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """(allocatable, requested, non-zero requested) of cpu and memory for `rows`,
    and whether every row has both: gathered once per pod and shared by the
    resource scorers (NodeTable keeps cpu, memory in columns 0, 1)."""
    hit = state.get("noderesources/cpu-memory")
    if hit is not None and hit[0] is rows:
        return hit[1]
    alloc = snapshot.alloc[rows, :2]
    out = (alloc, snapshot.req[rows, :2], snapshot.nonzero[rows], bool((alloc > 0).all()))
    state["noderesources/cpu-memory"] = (rows, out)
    return out


def least_allocated_cpu_memory(
    pod: PodInfo, snapshot: Snapshot, rows: np.ndarray, weights: np.ndarray, state: CycleState | None = None,
) -> np.ndarray | None:
    """LeastAllocated over exactly cpu and memory (the default): the same
    numbers as the general path in a few array operations. None when a row
    lacks cpu or memory allocatable (the general path handles that)."""
    alloc, _, nonzero, complete = cpu_memory_rows(state if state is not None else CycleState(), snapshot, rows)
    if not complete:
        return None
    requested = nonzero + np.array([pod.nonzero_cpu, pod.nonzero_memory], dtype=np.int64)
    per = np.where(requested > alloc, 0, (alloc - requested) * MAX_NODE_SCORE // alloc)
    return (per * weights).sum(axis=1) // int(weights.sum())


# ------------------------------------------------------------------ plugin


def requests_sign(pod: PodInfo) -> Hashable:
    """The part of a pod the resource plugins read: its requests, and the
    non-zero cpu/memory the scores count for containers asking nothing."""
    return tuple(sorted(pod.requests.items())), pod.nonzero_cpu, pod.nonzero_memory


class NodeResourcesFit(FilterPlugin, ScorePlugin):
    name = "NodeResourcesFit"
    events = frozenset({E.NODE_ADD, E.NODE_ALLOCATABLE, E.ASSIGNED_POD_DELETE, E.ASSIGNED_POD_SCALE_DOWN})
    row_local = True  # a node's fit and score depend on its own usage only

    def __init__(self, args: Mapping[str, Any], handle: Handle) -> None:
        super().__init__(args, handle)
        errs = FieldErrors()
        errs.unknown_fields(args, "", ("ignoredResources", "ignoredResourceGroups", "scoringStrategy", *_META_KEYS))
        ignored = [str(r) for r in as_list(args.get("ignoredResources"), "ignoredResources", errs)]
        for i, res in enumerate(ignored):
            for msg in label_key_errors(res):
                errs.invalid(f"ignoredResources[{i}]", res, msg)
        groups = [str(g) for g in as_list(args.get("ignoredResourceGroups"), "ignoredResourceGroups", errs)]
        for i, group in enumerate(groups):
            if "/" in group:
                errs.invalid(f"ignoredResourceGroups[{i}]", group, "resource group name can't contain '/'")
            for msg in label_key_errors(group):
                errs.invalid(f"ignoredResourceGroups[{i}]", group, msg)
        self.ignored = set(ignored)
        self.ignored_groups = set(groups)

        path = "scoringStrategy"
        strategy = as_mapping(args.get(path), path, errs)
        errs.unknown_fields(strategy, path, ("type", "resources", "requestedToCapacityRatio"))
        self.strategy = strategy.get("type") or LEAST_ALLOCATED
        if self.strategy not in SCORING_STRATEGIES:
            errs.not_supported(f"{path}.type", self.strategy, SCORING_STRATEGIES)
        specs = parse_resource_specs(strategy.get("resources"), f"{path}.resources", errs)
        for i, spec in enumerate(specs):
            if not 0 < spec.weight <= MAX_RESOURCE_WEIGHT:
                errs.invalid(f"{path}.resources[{i}].weight", spec.weight,
                             f"resource weight of {spec.name} not in valid range (0, {MAX_RESOURCE_WEIGHT}]")
        rtcr_path = f"{path}.requestedToCapacityRatio"
        rtcr = strategy.get("requestedToCapacityRatio")
        shape: list[tuple[int, int]] = []
        if self.strategy == REQUESTED_TO_CAPACITY_RATIO:
            if rtcr is None:
                errs.required(rtcr_path, "must be specified when type is RequestedToCapacityRatio")
            else:
                rtcr = as_mapping(rtcr, rtcr_path, errs)
                errs.unknown_fields(rtcr, rtcr_path, ("shape",))
                shape = _validate_shape(rtcr.get("shape"), f"{rtcr_path}.shape", errs)
        elif rtcr is not None:
            errs.forbidden(rtcr_path, "must be nil when type is not RequestedToCapacityRatio")
        errs.raise_if_any()

        self.resources: list[ResourceSpec] = specs
        self.score_resources = [(s.name, s.weight) for s in specs]
        weights = np.array([s.weight for s in specs], dtype=np.int64)
        self._weights = weights
        # The default configuration gets a shorter path with the same results.
        self._cpu_memory_least_allocated = self.strategy == LEAST_ALLOCATED and [s.name for s in specs] == [CPU, MEMORY]
        if self.strategy == MOST_ALLOCATED:
            self._scorer = most_allocated_scorer(weights)
        elif self.strategy == REQUESTED_TO_CAPACITY_RATIO:
            self._scorer = requested_to_capacity_ratio_scorer(weights, shape)
        else:
            self._scorer = least_allocated_scorer(weights)

    def sign_pod(self, pod: PodInfo) -> Hashable:
        """The fit and the score read the pod's requests only (and the
        non-zero defaults the score puts in for containers asking nothing)."""
        return requests_sign(pod)

    def _checked(self, resource: str) -> bool:
        # Upstream skips ignored resources only if they are extended resources
        # (v1helper.IsExtendedResourceName): not *kubernetes.io/*, not unprefixed.
        if "/" not in resource or "kubernetes.io/" in resource or resource.startswith("requests."):
            return True
        return resource not in self.ignored and resource.split("/", 1)[0] not in self.ignored_groups

    def _checked_columns(self, vec: np.ndarray, snapshot: Snapshot) -> list[int]:
        """The columns the pod requests and this plugin checks."""
        return [c for c in np.flatnonzero(vec) if self._checked(snapshot.resources[c])]

    def filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> FilterResult:
        # One (nodes x requested resources) comparison, numpy only; the
        # per-reason masks are column views, only built when a node is short.
        vec, unknown = snapshot.request_vector(pod)
        n = len(snapshot)
        cols = self._checked_columns(vec, snapshot)
        short = snapshot.req[:, cols] + vec[cols] > snapshot.alloc[:, cols]
        bad = short.any(axis=1)
        reasons: list[tuple[str, np.ndarray]] = []
        if bad.any():
            for j, col in enumerate(cols):
                resource = snapshot.resources[col]
                reasons.append(("Too many pods" if resource == PODS else f"Insufficient {resource}", short[:, j]))
        feasible = ~bad
        for resource in unknown:
            if self._checked(resource):
                feasible[:] = False
                reasons.append((f"Insufficient {resource}", np.ones(n, dtype=bool)))
        return FilterResult(feasible, reasons)

    def filter_rows(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, rows: np.ndarray) -> np.ndarray:
        vec, unknown = snapshot.request_vector(pod)
        if any(self._checked(r) for r in unknown):
            return np.zeros(len(rows), dtype=bool)
        cols = self._checked_columns(vec, snapshot)
        return ~(snapshot.req[rows][:, cols] + vec[cols] > snapshot.alloc[rows][:, cols]).any(axis=1)

    def score(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, rows: np.ndarray) -> np.ndarray:
        # O(len(rows) * configured resources), numpy only.
        if self._cpu_memory_least_allocated:
            fast = least_allocated_cpu_memory(pod, snapshot, rows, self._weights, state)
            if fast is not None:
                return fast
        _, requested, allocated, allocatable = resource_allocation(pod, snapshot, rows, self.resources, use_requested=False)
        return self._scorer(requested, allocated, allocatable)
