"""Volcano: `scheduling.volcano.sh/v1beta1` PodGroups, joined by the pod
annotation `scheduling.k8s.io/group-name` (same namespace). What KubeRay,
LeaderWorkerSet, the Spark operator and Kubeflow write for Volcano.

| field | troupe |
| --- | --- |
| `minMember` | a gang's `minCount` (0 or unset: basic) |
| `minTaskMember` | at least that many pods of each task bound with the gang; a pod's task is its `volcano.sh/task-spec` annotation or label (as Volcano's scheduler reads it) |
| `minResources` | the group is not placed while the cluster's free room cannot hold it; preemption and reservations act for it only where it would then bind |
| `priorityClassName` | the group's priority |
| `subGroupPolicy` | a tree of gangs under the group (api/subgroups.py): each sub-group of `subGroupSize` pods placed whole, at least `minSubGroups` of each policy, with the rest of `minMember` |
| `queue` (other than `default`), `networkTopology` (the group's or a policy's) | not honoured: named in every status message of the group |

Status, as Volcano's scheduler writes it (`framework/session.go` jobStatus,
`plugins/gang`): `phase` Pending, Inqueue (troupe has taken the group into
its queue: troupe has no Volcano queues and admits every group), Running
(bound + finished pods reach `minMember`), Completed (all of those
finished), Unknown (pods running while the rest cannot be placed); the
counts `running`/`succeeded`/`failed`; the conditions `Scheduled`
("tasks in gang are ready to be scheduled") and `Unschedulable`
(`NotEnoughResources`, troupe's message), with troupe's `DisruptionTarget`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import constants as C
from ..podgroup import PodGroup
from ..subgroup_policy import TASK, parse_policies
from . import foreign
from .base import AnnotationSource, GroupKind, Source
from .foreign import MemberCounts

GROUP = "scheduling.volcano.sh"
VERSIONS = ("v1beta1",)
PLURAL = "podgroups"
ANNOTATION = "scheduling.k8s.io/group-name"
TASK_KEY = TASK
SCHEDULED = "Scheduled"
UNSCHEDULABLE = "Unschedulable"
READY = "tasks in gang are ready to be scheduled"
NOT_ENOUGH_RESOURCES = "NotEnoughResources"
_READ = frozenset(("minMember", "minTaskMember", "minResources", "priorityClassName", "queue", "subGroupPolicy"))
_NOT_HONOURED = {"networkTopology": "network topology (HyperNodes) is not honoured by troupe"}
_STATUS = ("phase", "running", "succeeded", "failed")


class _VolcanoPods(AnnotationSource):
    """Volcano's annotation, and the pod's task as Volcano's scheduler reads it."""

    def pod_task(self, meta: Mapping[str, Any]) -> str:
        value = (meta.get("annotations") or {}).get(TASK_KEY) or (meta.get("labels") or {}).get(TASK_KEY)
        return str(value or "")


def _min_per_task(raw: Any) -> tuple[dict[str, int], list[str]]:
    if raw is None:
        return {}, []
    if not isinstance(raw, Mapping):
        return {}, ["spec.minTaskMember: not a map of task name to count"]
    out: dict[str, int] = {}
    problems = []
    for task, n in raw.items():
        try:
            if int(n) > 0:
                out[str(task)] = int(n)
        except (TypeError, ValueError):
            problems.append(f"spec.minTaskMember.{task}: {n!r} is not an integer")
    return out, problems


def parse_group(body: Mapping[str, Any]) -> PodGroup:
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    policy, problems = foreign.gang_policy(spec.get("minMember"), "spec.minMember")
    resources, more = foreign.min_resources(spec.get("minResources"), "spec.minResources")
    per_task, more2 = _min_per_task(spec.get("minTaskMember"))
    sub_groups, more3, ignored = parse_policies(spec.get("subGroupPolicy"))
    problems += more + more2 + more3
    if sub_groups and spec.get("minResources"):
        ignored.append("spec.minResources: not checked with subGroupPolicy (each sub-group is placed whole instead)")
    queue = spec.get("queue")
    if queue and queue != "default":
        ignored.append(f"spec.queue {queue!r}: troupe has no Volcano queues, the group is scheduled as if in 'default'")
    for field, why in _NOT_HONOURED.items():
        if spec.get(field):
            ignored.append(f"spec.{field}: {why}")
    ignored += [f"spec.{k}: a field troupe does not know" for k in spec if k not in _READ and k not in _NOT_HONOURED]
    out: dict[str, Any] = {"schedulingPolicy": policy}
    if spec.get("priorityClassName"):
        out["priorityClassName"] = spec["priorityClassName"]
    return PodGroup.model_validate(
        {
            "apiVersion": body.get("apiVersion"),
            "metadata": body.get("metadata") or {},
            "spec": out,
            "status": {"conditions": _import_conditions(status, tuple(ignored))},
            "problem": "; ".join(problems) or None,
            "min_resources": resources,
            "min_per_task": per_task,
            "ignored": tuple(ignored),
            "source_status": {k: status[k] for k in _STATUS if k in status},
            "sub_groups": sub_groups,
        }
    )


def _import_conditions(status: Mapping[str, Any], ignored: tuple[str, ...]) -> list[dict[str, Any]]:
    """Volcano's conditions as troupe's, the inverse of `export_status`, so
    that what troupe reads back is what it wrote (the StatusWriter compares
    them to skip writes that would change nothing): Scheduled=True is
    PodGroupScheduled True; Unschedulable=True is PodGroupScheduled False
    with its reason (NotEnoughResources is troupe's Unschedulable) and the
    message without the notes on `ignored` fields troupe appends; others as
    they are."""
    out = []
    for c in status.get("conditions") or ():
        if not isinstance(c, Mapping):
            continue
        kept = {k: c[k] for k in ("status", "reason", "message", "lastTransitionTime") if k in c}
        if c.get("type") in (SCHEDULED, UNSCHEDULABLE) and "message" in kept:
            kept["message"] = _without_notes(str(kept["message"]), ignored)
        if c.get("type") == SCHEDULED and c.get("status") == "True":
            out.append({**kept, "type": C.POD_GROUP_SCHEDULED, "reason": C.REASON_SCHEDULED})
        elif c.get("type") == UNSCHEDULABLE and c.get("status") == "True":
            reason = str(c.get("reason") or "")
            if reason in ("", NOT_ENOUGH_RESOURCES):
                reason = C.REASON_UNSCHEDULABLE
            out.append({**kept, "type": C.POD_GROUP_SCHEDULED, "status": "False", "reason": reason})
        elif c.get("type") not in (SCHEDULED, UNSCHEDULABLE):
            out.append({**kept, "type": c.get("type")})
    return out


def phase(group: PodGroup, counts: MemberCounts, unschedulable: bool, tried: bool) -> str:
    """Volcano's getPodGroupPhase: bound and finished pods against minMember."""
    if counts.running and unschedulable:
        return "Unknown"
    min_member = group.min_count if group.is_gang else 0
    scheduled = counts.bound + counts.succeeded + counts.failed
    if scheduled and scheduled >= min_member:
        return "Completed" if counts.succeeded + counts.failed == scheduled else "Running"
    current = str(group.source_status.get("phase") or "")
    return "Inqueue" if tried or current == "Inqueue" else "Pending"


def _notes(group: PodGroup, message: str) -> str:
    return "; ".join((message, *group.ignored)) if group.ignored else message


def _without_notes(message: str, ignored: tuple[str, ...]) -> str:
    """`message` as troupe wrote it, before `_notes` (the same notes: the
    spec, hence `ignored`, has not changed since)."""
    suffix = "; " + "; ".join(ignored) if ignored else ""
    return message[: -len(suffix)] if suffix and message.endswith(suffix) else message


def export_status(
    group: PodGroup, conditions: list[dict[str, Any]] | None, counts: MemberCounts, now: str
) -> dict[str, Any]:
    """Volcano's status fields; with `conditions` (troupe's), its conditions too."""
    # The scheduled condition being written, else the one the object has.
    status = next((c.get("status") for c in conditions or () if c.get("type") == C.POD_GROUP_SCHEDULED), None)
    if status is None:
        cached = group.condition(C.POD_GROUP_SCHEDULED)
        status = cached.status if cached is not None else None
    out: dict[str, Any] = {
        "phase": phase(group, counts, unschedulable=status == "False", tried=status is not None),
        **foreign.count_fields(counts),
    }
    if conditions is None:
        return out
    theirs: list[dict[str, Any]] = []
    for c in conditions:
        when = c.get("lastTransitionTime") or now
        if c.get("type") != C.POD_GROUP_SCHEDULED:
            theirs.append({k: c[k] for k in ("type", "status", "reason", "message", "lastTransitionTime") if k in c})
        elif c.get("status") == "True":
            theirs.append(
                {
                    "type": SCHEDULED,
                    "status": "True",
                    "reason": READY,
                    "message": _notes(group, str(c.get("message") or "")),
                    "lastTransitionTime": when,
                }
            )
            theirs.append({"type": UNSCHEDULABLE, "status": "False", "reason": READY, "lastTransitionTime": when})
        else:
            reason = NOT_ENOUGH_RESOURCES if c.get("reason") == C.REASON_UNSCHEDULABLE else str(c.get("reason") or "")
            theirs.append(
                {
                    "type": UNSCHEDULABLE,
                    "status": "True",
                    "reason": reason,
                    "message": _notes(group, str(c.get("message") or "")),
                    "lastTransitionTime": when,
                }
            )
    out["conditions"] = theirs
    return out


SOURCE = Source(
    name="volcano",
    api_group=GROUP,
    pods=_VolcanoPods(ANNOTATION),
    # Volcano's CRD has no status subresource: its scheduler updates the whole object.
    kinds=(GroupKind(GROUP, VERSIONS, "PodGroup", PLURAL, parse_group, writes_status=True, status_subresource=False),),
    help=f"{GROUP}/{VERSIONS[0]} (Volcano); pods join with the annotation {ANNOTATION}",
    not_served=f"install Volcano's PodGroup CRD ({GROUP}_{PLURAL}.yaml) to schedule its PodGroups",
    scheduler_names=("volcano",),
    export_members=export_status,
    counts_members=True,
)
