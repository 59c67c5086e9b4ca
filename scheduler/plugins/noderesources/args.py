"""NodeResourcesFit and NodeResourcesBalancedAllocation args: parsing and
validation as upstream's ValidateNodeResourcesFitArgs and
ValidateNodeResourcesBalancedAllocationArgs, with their field-path messages."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ...api.resources import CPU, MEMORY

MAX_CUSTOM_PRIORITY_SCORE = 10  # upstream config.MaxCustomPriorityScore: shape scores are 0..10
MAX_UTILIZATION = 100
MAX_RESOURCE_WEIGHT = 100

LEAST_ALLOCATED = "LeastAllocated"
MOST_ALLOCATED = "MostAllocated"
REQUESTED_TO_CAPACITY_RATIO = "RequestedToCapacityRatio"
SCORING_STRATEGIES = (LEAST_ALLOCATED, MOST_ALLOCATED, REQUESTED_TO_CAPACITY_RATIO)

# Keys a pluginConfig args object may carry besides the plugin's own fields.
META_KEYS = ("apiVersion", "kind")


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


def validate_shape(raw: Any, path: str, errs: FieldErrors) -> list[tuple[int, int]]:
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
