"""Rendering a simulation result: aligned tables for people, JSON for programs.

Both are deterministic: rows sorted by namespace/name, no times, no uids.
When a pod of the input uses ResourceClaims, each pod also shows its devices
(`driver/pool/device`, in the order of its `spec.resourceClaims`). When the
input has CompositePodGroups (trees of groups), a table of them comes first,
and each PodGroup of a tree names its parent; an input without trees prints
as it did before trees.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..api.composite import COMPOSITE_KIND
from ..api.quantity import format_units
from .runner import CompositeResult, GroupCondition, GroupResult, SimulationResult

NONE = "<none>"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """kubectl's layout: columns padded to the widest cell, 3 spaces apart, no trailing blanks."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    lines = []
    for row in [headers, *rows]:
        cells = [str(c).ljust(w) for c, w in zip(row, widths)]
        lines.append("   ".join(cells).rstrip())
    return lines


def render_table(result: SimulationResult) -> str:
    lines: list[str] = []
    if result.composites:
        lines += _composites_table(result)
        lines.append("")
    if result.groups:
        lines += _groups_table(result)
        lines.append("")
    if result.pods:
        lines += _pods_table(result)
        lines.append("")
    if result.capacity:
        lines += _capacity_table(result)
        lines.append("")
    lines.append(summary(result))
    return "\n".join(lines) + "\n"


def _capacity_table(result: SimulationResult) -> list[str]:
    """What would it take: per unit still waiting, the room troupe would ask
    an autoscaler for (its stand-in pods, in a cluster) and where."""
    rows = [
        (
            f"{p.unit.namespace}/{p.unit.name}",
            str(len(p.pods)),
            _requests(p.requests),
            p.domain,
            ",".join(p.pools),
        )
        for p in result.capacity
    ]
    return _table(("NEEDS NODES FOR", "PODS", "REQUESTS", "WHERE", "NODEPOOL"), rows)


def _requests(requests: Mapping[str, int]) -> str:
    return ",".join(f"{r}={format_units(r, v)}" for r, v in sorted(requests.items()) if v and r != "pods") or NONE


def _composites_table(result: SimulationResult) -> list[str]:
    """A row per CompositePodGroup. GROUPS is its children placed (a PodGroup
    with minCount pods bound, a CompositePodGroup with minGroupCount children
    placed) over minGroupCount (1 for a basic one), as PLACED/MIN is for a
    PodGroup's pods."""
    preempting = any(c.victims for c in result.composites)
    rows = []
    for c in result.composites:
        row = [
            f"{c.namespace}/{c.name}",
            c.policy or "-",
            f"{c.placed}/{c.min_group_count if c.min_group_count is not None else '-'}",
            c.parent or "-",
            _composite_reason(c, "-"),
        ]
        if preempting:
            row.append(str(len(c.victims)) if c.victims else "-")
        rows.append([*row, _composite_message(c)])
    headers = ["COMPOSITEPODGROUP", "POLICY", "GROUPS", "PARENT", "CONDITION", *(["VICTIMS"] if preempting else [])]
    return _table([*headers, "MESSAGE"], rows)


def _composite_reason(c: CompositeResult, default: str) -> str:
    """Its CompositePodGroupInitiallyScheduled reason, "Preempted" for a tree taken before it had one."""
    if c.condition is not None:
        return c.condition.reason
    return "Preempted" if c.preempted_by else default


def _composite_message(c: CompositeResult) -> str:
    if c.preempted_by:  # its tree is gone: what happened to it is the news
        message = f"preempted by {c.preempted_by} (DisruptionTarget)"
        return f"{message}; {c.condition.message}" if c.condition is not None else message
    if c.condition is not None:
        return c.condition.message
    if not c.children:
        return "no PodGroups or CompositePodGroups under it in the input"
    return "no pods under it in the input" if not c.pods else ""


def _groups_table(result: SimulationResult) -> list[str]:
    """A row per PodGroup; PARENT, PLACEMENT and VICTIMS only where some group has one."""
    # Victims of a tree are counted on its root, in the CompositePodGroup table.
    preempting = any(p.preempted_by and not p.preempted_by.startswith(f"{COMPOSITE_KIND} ") for p in result.pods)
    placing = any(g.placement for g in result.groups)  # topology constraints: the chosen domain
    in_trees = any(g.parent for g in result.groups)
    rows = []
    for g in result.groups:
        row = [
            f"{g.namespace}/{g.name}",
            g.policy or "-",
            str(g.pods),
            f"{g.placed}/{g.min_count if g.min_count is not None else '-'}",
        ]
        if in_trees:
            row.append(g.parent or "-")
        row.append(_group_reason(g, "-"))
        if placing:
            row.append(g.placement or "-")
        if preempting:
            row.append(str(len(g.victims)) if g.victims else "-")
        rows.append([*row, _group_message(g)])
    headers = ["PODGROUP", "POLICY", "PODS", "PLACED/MIN", *(["PARENT"] if in_trees else []), "CONDITION"]
    headers += ["PLACEMENT"] if placing else []
    return _table([*headers, *(["VICTIMS"] if preempting else []), "MESSAGE"], rows)


def _group_reason(g: GroupResult, default: str) -> str:
    """The group's PodGroupScheduled reason, "Preempted" for a group preempted before it had one."""
    if g.condition is not None:
        return g.condition.reason
    return "Preempted" if g.preempted_by else default


def _group_message(g: GroupResult) -> str:
    cond = g.condition
    if g.preempted_by:  # its pods are gone: what happened to it is the news
        message = f"preempted by {g.preempted_by} (DisruptionTarget)"
        if cond is not None:
            message += f"; {cond.message}"
        return message
    if g.shrunk:  # it lost pods but runs on (shrink before kill, or disruptionMode Pod)
        lost = "; ".join(f"{n} pod(s) preempted by {by}" for by, n in g.shrunk)
        message = f"shrunk: {lost}; {g.placed} running (minCount {g.min_count})"
        return f"{message}; {cond.message}" if cond is not None else message
    if cond is not None:
        return f"{cond.message}; {g.waiting}" if g.waiting else cond.message
    if g.waiting:  # a tree's leaf: its tree waits, and its pods say why
        return g.waiting
    return "no pods of this PodGroup in the input" if not g.pods else ""


def _pods_table(result: SimulationResult) -> list[str]:
    """A row per pod; DEVICES only where the input uses ResourceClaims."""
    devices = _uses_devices(result)
    rows = []
    for p in result.pods:
        row = [f"{p.namespace}/{p.name}", p.group or "-", p.node or NONE]
        if devices:
            row.append(",".join(d.path for d in p.devices) or "-")
        rows.append([*row, p.message])
    return _table(["POD", "GROUP", "NODE", *(["DEVICES"] if devices else []), "MESSAGE"], rows)


def summary(result: SimulationResult) -> str:
    pending = [p for p in result.pods if not p.running_before and not p.finished]
    placed = sum(1 for p in pending if p.placed)
    running = sum(1 for p in result.pods if p.running_before and not p.finished and not p.preempted_by)
    preempted = sum(1 for p in result.pods if p.preempted_by)
    text = f"{placed}/{len(pending)} pending pods placed"
    if running:
        text += f" ({running} already running)"
    if preempted:
        text += f"; {preempted} running pods preempted"
    if result.groups:
        text += f"; PodGroups: {_counts(_group_reason(g, 'no condition') for g in result.groups)}"
    if result.composites:
        text += f"; CompositePodGroups: {_counts(_composite_reason(c, 'no condition') for c in result.composites)}"
    return text + "."


def _counts(reasons: Iterable[str]) -> str:
    """How many groups end with each reason: "2 Scheduled, 1 Unschedulable"."""
    counts: dict[str, int] = {}
    for reason in reasons:
        counts[reason] = counts.get(reason, 0) + 1
    order = ["Scheduled", "Unschedulable", "SchedulerError", "Preempted"]
    parts = [f"{counts[r]} {r}" for r in sorted(counts, key=lambda r: (order.index(r) if r in order else 3, r))]
    return ", ".join(parts)


def _uses_devices(result: SimulationResult) -> bool:
    return any(p.uses_claims for p in result.pods)


def render_json(result: SimulationResult) -> str:
    devices = _uses_devices(result)
    pods: list[dict[str, Any]] = []
    for p in result.pods:
        pod: dict[str, Any] = {"namespace": p.namespace, "name": p.name, "node": p.node, "preemptedBy": p.preempted_by}
        if devices:
            pod["devices"] = [
                {"claim": d.claim, "request": d.request, "driver": d.driver, "pool": d.pool, "device": d.device}
                for d in p.devices
            ]
        pods.append(pod)
    groups: list[dict[str, Any]] = []
    for g in result.groups:
        group: dict[str, Any] = {
            "namespace": g.namespace,
            "name": g.name,
            "scheduled": g.scheduled,
            "reason": _reason(g.condition),
            "message": _message(g.condition),
            "victims": list(g.victims),
            "preemptedBy": g.preempted_by,
            "placement": g.placement,
            "apiGroup": g.api_group,
            "workload": g.workload,
        }
        if g.parent:  # a tree's leaf (the key is absent otherwise: inputs without trees print as before)
            group["parent"] = g.parent
        if g.shrunk:  # it lost pods to preemption but runs on (absent otherwise)
            group["shrunkBy"] = {by: n for by, n in g.shrunk}
        if g.waiting and g.scheduled:  # a scheduled gang's increment that waits, and why
            group["waiting"] = g.waiting
        groups.append(group)
    doc: dict[str, Any] = {"pods": pods, "podGroups": groups}
    if result.capacity:
        doc["capacity"] = [
            {
                "namespace": p.unit.namespace,
                "name": p.unit.name,
                "pods": [q.name for q in p.pods],
                "requests": {r: format_units(r, v) for r, v in sorted(p.requests.items()) if r != "pods"},
                "key": p.key,
                "value": p.value,
                "nodePools": list(p.pools),
            }
            for p in result.capacity
        ]
    if result.composites:
        doc["compositePodGroups"] = [
            {
                "namespace": c.namespace,
                "name": c.name,
                "parent": c.parent,
                "policy": c.policy,
                "minGroupCount": c.min_group_count,
                "scheduled": c.scheduled,
                "reason": _reason(c.condition),
                "message": _message(c.condition),
                "victims": list(c.victims),
                "preemptedBy": c.preempted_by,
                "apiGroup": c.api_group,
            }
            for c in result.composites
        ]
    return json.dumps(doc, indent=2) + "\n"


def _reason(cond: GroupCondition | None) -> str | None:
    return cond.reason if cond is not None else None


def _message(cond: GroupCondition | None) -> str | None:
    return cond.message if cond is not None else None
