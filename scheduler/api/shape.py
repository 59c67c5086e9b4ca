"""Where an object's structure is not what Kubernetes allows, said by field.

The API server validates pods and nodes, so the scheduler only meets such
objects in files (`troupe simulate`) or from a broken client. Parsing does
not check every field on its way (it is the hot path); when it trips over a
wrong type, `shape_error` finds the first field whose type is wrong and says
what was expected there, instead of a Python error.

A shape is a dict (a map with these known keys, each with its own shape), a
one-item list (a list whose every item has that shape), `MAP` (a map of
anything), `SCALARS` (a map of strings or numbers), `QUANTITIES` (a map of
resource quantities) or `SCALAR`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MAP, SCALARS, QUANTITIES, SCALAR = "a map", "a map of strings", "a map of quantities", "a string or a number"

Shape = dict[str, Any] | list[Any] | str

_REQUIREMENTS = [{"values": [SCALAR]}]
_LABEL_SELECTOR = {"matchLabels": SCALARS, "matchExpressions": _REQUIREMENTS}
_NODE_TERM = {"matchExpressions": _REQUIREMENTS, "matchFields": _REQUIREMENTS}
_AFFINITY_TERM = {"labelSelector": _LABEL_SELECTOR, "namespaceSelector": _LABEL_SELECTOR, "namespaces": [SCALAR]}
_POD_AFFINITY = {
    "requiredDuringSchedulingIgnoredDuringExecution": [_AFFINITY_TERM],
    "preferredDuringSchedulingIgnoredDuringExecution": [{"podAffinityTerm": _AFFINITY_TERM}],
}
_CONTAINER = {
    "resources": {"requests": QUANTITIES, "limits": QUANTITIES},
    "ports": [MAP],
}

POD: Shape = {
    "metadata": {"labels": SCALARS, "annotations": SCALARS},
    "spec": {
        "containers": [_CONTAINER],
        "initContainers": [_CONTAINER],
        "overhead": QUANTITIES,
        "nodeSelector": SCALARS,
        "tolerations": [MAP],
        "schedulingGates": [MAP],
        "topologySpreadConstraints": [{"labelSelector": _LABEL_SELECTOR, "matchLabelKeys": [SCALAR]}],
        "resourceClaims": [MAP],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [_NODE_TERM]},
                "preferredDuringSchedulingIgnoredDuringExecution": [{"preference": _NODE_TERM}],
            },
            "podAffinity": _POD_AFFINITY,
            "podAntiAffinity": _POD_AFFINITY,
        },
    },
    "status": {"resourceClaimStatuses": [MAP], "conditions": [MAP]},
}

NODE: Shape = {
    "metadata": {"labels": SCALARS},
    "spec": {"taints": [MAP]},
    "status": {"allocatable": QUANTITIES, "capacity": QUANTITIES},
}


def _kind(value: Any) -> str:
    if isinstance(value, Mapping):
        return "a map"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return f"the string {value!r}"
    return repr(value)


def shape_error(value: Any, shape: Shape, path: str = "") -> str | None:
    """The first field of `value` (at `path`) whose type does not fit
    `shape`, with what was expected; None if all fit. Null is always fine
    (an unset field)."""
    if value is None:
        return None
    where = path or "the object"
    if isinstance(shape, list):
        if not isinstance(value, list):
            return f"{where}: expected a list, got {_kind(value)}"
        for i, item in enumerate(value):
            if (error := shape_error(item, shape[0], f"{path}[{i}]")) is not None:
                return error
        return None
    if shape == SCALAR:
        if isinstance(value, (Mapping, list)):
            return f"{where}: expected {SCALAR}, got {_kind(value)}"
        return None
    if not isinstance(value, Mapping):
        return f"{where}: expected {shape if isinstance(shape, str) else 'a map'}, got {_kind(value)}"
    if shape in (SCALARS, QUANTITIES):
        expected = "a quantity such as '500m' or '2Gi'" if shape == QUANTITIES else SCALAR
        for key, item in value.items():
            if isinstance(item, (Mapping, list)):
                return f"{path}.{key}: expected {expected}, got {_kind(item)}"
        return None
    if isinstance(shape, dict):
        for key, sub in shape.items():
            if (error := shape_error(value.get(key), sub, f"{path}.{key}" if path else key)) is not None:
                return error
    return None
