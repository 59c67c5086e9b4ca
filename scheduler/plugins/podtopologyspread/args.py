"""PodTopologySpreadArgs: `defaultingType` and `defaultConstraints`,
validated as upstream's ValidatePodTopologySpreadArgs."""

from __future__ import annotations

from typing import Any, Mapping

from ...api.records import TopologySpreadConstraint
from .common import DO_NOT_SCHEDULE, HONOR, IGNORE, LABEL_HOSTNAME, LABEL_ZONE, SCHEDULE_ANYWAY

SYSTEM_DEFAULTING = "System"
LIST_DEFAULTING = "List"

SYSTEM_DEFAULT_CONSTRAINTS: tuple[TopologySpreadConstraint, ...] = (
    TopologySpreadConstraint(max_skew=3, topology_key=LABEL_HOSTNAME, when_unsatisfiable=SCHEDULE_ANYWAY, selector=None),
    TopologySpreadConstraint(max_skew=5, topology_key=LABEL_ZONE, when_unsatisfiable=SCHEDULE_ANYWAY, selector=None),
)


def parse_default_constraints(raw: Any) -> tuple[TopologySpreadConstraint, ...]:
    """PodTopologySpreadArgs.defaultConstraints, validated as upstream's
    ValidatePodTopologySpreadArgs (no labelSelector, no repeated key/action)."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ValueError("defaultConstraints: must be a list")
    out: list[TopologySpreadConstraint] = []
    errors: list[str] = []
    seen: set[tuple[str, str]] = set()
    for i, c in enumerate(raw):
        p = f"defaultConstraints[{i}]"
        if not isinstance(c, Mapping):
            errors.append(f"{p}: must be an object")
            continue
        try:
            max_skew = int(c.get("maxSkew") or 0)
        except (TypeError, ValueError):
            max_skew = 0
        if max_skew <= 0:
            errors.append(f"{p}.maxSkew: Invalid value: {c.get('maxSkew')!r}: not in valid range (0, inf)")
        key = str(c.get("topologyKey") or "")
        if not key:
            errors.append(f"{p}.topologyKey: Required value: can not be empty")
        action = str(c.get("whenUnsatisfiable") or "")
        if not action:
            errors.append(f"{p}.whenUnsatisfiable: Required value: can not be empty")
        elif action not in (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY):
            errors.append(f'{p}.whenUnsatisfiable: Unsupported value: "{action}": supported values: "DoNotSchedule", "ScheduleAnyway"')
        if c.get("labelSelector") is not None:
            errors.append(f"{p}.labelSelector: Forbidden: constraint must not define a selector, as they deduced for each pod")
        if (key, action) in seen:
            errors.append(f"defaultConstraints[{i}]: Duplicate value: \"{{{key}, {action}}}\"")
        seen.add((key, action))
        min_domains = c.get("minDomains")
        out.append(TopologySpreadConstraint(
            max_skew=max_skew,
            topology_key=key,
            when_unsatisfiable=action,
            selector=None,
            min_domains=int(min_domains) if min_domains is not None else None,
            node_affinity_policy=str(c.get("nodeAffinityPolicy") or HONOR),
            node_taints_policy=str(c.get("nodeTaintsPolicy") or IGNORE),
            match_label_keys=tuple(str(k) for k in c.get("matchLabelKeys") or ()),
        ))
    if errors:
        raise ValueError("; ".join(errors))
    return tuple(out)
