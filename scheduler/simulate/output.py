"""Rendering a simulation result: aligned tables for people, JSON for programs.

Both are deterministic: rows sorted by namespace/name, no times, no uids.
When a pod of the input uses ResourceClaims, each pod also shows its devices
(`driver/pool/device`, in the order of its `spec.resourceClaims`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .runner import GroupResult, SimulationResult

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
    if result.groups:
        lines += _groups_table(result)
        lines.append("")
    if result.pods:
        lines += _pods_table(result)
        lines.append("")
    lines.append(summary(result))
    return "\n".join(lines) + "\n"


def _groups_table(result: SimulationResult) -> list[str]:
    """A row per PodGroup; PLACEMENT and VICTIMS only where some group has one."""
    preempting = any(p.preempted_by for p in result.pods)
    placing = any(g.placement for g in result.groups)  # topology constraints: the chosen domain
    rows = []
    for g in result.groups:
        row = [
            f"{g.namespace}/{g.name}",
            g.policy or "-",
            str(g.pods),
            f"{g.placed}/{g.min_count if g.min_count is not None else '-'}",
            _group_reason(g, "-"),
        ]
        if placing:
            row.append(g.placement or "-")
        if preempting:
            row.append(str(len(g.victims)) if g.victims else "-")
        rows.append([*row, _group_message(g)])
    headers = ["PODGROUP", "POLICY", "PODS", "PLACED/MIN", "CONDITION"]
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
    if cond is not None:
        return cond.message
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
        text += f"; PodGroups: {_group_counts(result.groups)}"
    return text + "."


def _group_counts(groups: Sequence[GroupResult]) -> str:
    """How many groups end with each reason: "2 Scheduled, 1 Unschedulable"."""
    counts: dict[str, int] = {}
    for g in groups:
        reason = _group_reason(g, "no condition")
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
    doc = {
        "pods": pods,
        "podGroups": [
            {
                "namespace": g.namespace,
                "name": g.name,
                "scheduled": g.scheduled,
                "reason": g.condition.reason if g.condition is not None else None,
                "message": g.condition.message if g.condition is not None else None,
                "victims": list(g.victims),
                "preemptedBy": g.preempted_by,
                "placement": g.placement,
                "apiGroup": g.api_group,
                "workload": g.workload,
            }
            for g in result.groups
        ],
    }
    return json.dumps(doc, indent=2) + "\n"
