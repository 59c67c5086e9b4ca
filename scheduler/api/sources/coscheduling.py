"""scheduler-plugins' coscheduling: `scheduling.x-k8s.io/v1alpha1` PodGroups,
joined by the pod label `scheduling.x-k8s.io/pod-group` (same namespace).
What the Kubeflow training-operator, Trainer v2, the Spark operator and
KubeRay write when told to use scheduler-plugins.

| field | troupe |
| --- | --- |
| `minMember` | a gang's `minCount` (0 or unset: basic) |
| `minResources` | the group is not placed while the cluster's free room (summed over nodes, as coscheduling's PreFilter) cannot hold it, plus `minMember` pods; preemption and reservations act for it only where it would then bind |
| `scheduleTimeoutSeconds` | how long coscheduling lets pods placed one by one hold their nodes at Permit while their siblings are placed; troupe places a gang in one cycle and binds it whole or not at all, so no pod ever holds room while its gang waits: the timeout is always met, and nothing is released or backed off for it |

Status, as scheduler-plugins' PodGroup controller computes it
(`pkg/controllers/podgroup_controller.go`): `phase` Pending (fewer pods
than `minMember`), Scheduling, Running (`running + succeeded >= minMember`),
Finished, Failed; the counts `running`/`succeeded`/`failed`; and
`scheduleStartTime`, set when troupe first tries the group. The CRD has no
conditions: why a group waits is on its Events and its pods' conditions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..podgroup import PodGroup
from . import foreign
from .base import GroupKind, LabelSource, Source
from .foreign import MemberCounts

GROUP = "scheduling.x-k8s.io"
VERSIONS = ("v1alpha1",)
PLURAL = "podgroups"
LABEL = f"{GROUP}/pod-group"
_SPEC = frozenset(("minMember", "minResources", "scheduleTimeoutSeconds"))
_STATUS = ("phase", "running", "succeeded", "failed", "scheduleStartTime", "occupiedBy")
FINAL = ("Finished", "Failed")


def parse_group(body: Mapping[str, Any]) -> PodGroup:
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    policy, problems = foreign.gang_policy(spec.get("minMember"), "spec.minMember")
    resources, more = foreign.min_resources(spec.get("minResources"), "spec.minResources")
    problems += more
    unknown = [f"spec.{k}" for k in spec if k not in _SPEC]
    ignored = tuple(f"{k}: a field troupe does not know" for k in unknown)
    return PodGroup.model_validate(
        {
            "apiVersion": body.get("apiVersion"),
            "metadata": body.get("metadata") or {},
            "spec": {"schedulingPolicy": policy},
            "problem": "; ".join(problems) or None,
            "min_resources": resources,
            "ignored": ignored,
            "source_status": {k: status[k] for k in _STATUS if k in status},
        }
    )


def phase(group: PodGroup, counts: MemberCounts) -> str:
    """The controller's phase for these counts (its reconcile, run to rest)."""
    current = str(group.source_status.get("phase") or "")
    if current in FINAL:
        return current  # final: the controller stops reconciling
    min_member = group.min_count if group.is_gang else 0
    if counts.pods < min_member or counts.pods == 0:
        return "Pending"
    done = counts.running + counts.succeeded
    result = "Running" if done >= min_member else "Scheduling"
    if counts.failed and counts.failed + done >= min_member:
        result = "Failed"
    if min_member and counts.succeeded >= min_member:
        result = "Finished"
    return result


def export_status(
    group: PodGroup, conditions: list[dict[str, Any]] | None, counts: MemberCounts, now: str
) -> dict[str, Any]:
    """The status fields troupe maintains (no conditions: the CRD has none)."""
    out: dict[str, Any] = {"phase": phase(group, counts), **foreign.count_fields(counts)}
    if conditions is not None and not group.source_status.get("scheduleStartTime"):
        out["scheduleStartTime"] = now  # the first time troupe tried (and reported on) the group
    if counts.occupied_by and not group.source_status.get("occupiedBy") and out["phase"] != "Pending":
        # Set once, when the group has its minMember pods: who the group is for ("ns/owner").
        out["occupiedBy"] = counts.occupied_by
    return out


SOURCE = Source(
    name="scheduler-plugins",
    api_group=GROUP,
    pods=LabelSource(LABEL),
    kinds=(GroupKind(GROUP, VERSIONS, "PodGroup", PLURAL, parse_group, writes_status=True),),
    help=f"{GROUP}/{VERSIONS[0]} (scheduler-plugins); pods join with the label {LABEL}",
    not_served=f"install scheduler-plugins' PodGroup CRD ({GROUP}_{PLURAL}.yaml) to schedule its PodGroups",
    scheduler_names=("scheduler-plugins-scheduler",),
    export_members=export_status,
    counts_members=True,
)
