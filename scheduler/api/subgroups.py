"""A Volcano PodGroup with `subGroupPolicy`, as the tree troupe schedules.

Volcano's rule (pkg/scheduler/api/job_info.go, plugins/gang): each
sub-group is a gang of `subGroupSize` pods; the group is ready when, for
each policy, `minSubGroups` of its sub-groups are, and `minMember` pods in
all are. troupe makes that a tree of groups with no API objects of their
own (`made_from` names the Volcano PodGroup), scheduled as any tree (one
cycle, all or nothing at the root, preemption and reservations for the
whole):

    PodGroup p (the root: needs every child below)
    ├── p/<policy>          one per policy: needs minSubGroups of its children (0: none)
    │   └── p/<policy>/<v>  one per sub-group (<v>: its matchLabelKeys values): a gang of subGroupSize
    └── p/*                 the pods no policy takes: needs its child if minMember asks for them
        └── p/*/pods        a gang of minMember - sum(minSubGroups x subGroupSize) (at least 1)

A name with "/" is no API object's, so a made group never meets a real one.
The root has the Volcano PodGroup's key: its status is the PodGroup's, in
Volcano's words. A composite that needs none of its children is always
feasible and places what fits of them, which is how an optional part rides
along under a root that needs all its children.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .composite import CompositePodGroup
from .podgroup import GangCompositeSchedulingPolicy, PodGroup
from .records import GroupKey
from .subgroup_policy import TASK, SubGroupPolicy

OTHERS = "*"  # the pods no policy takes (no policy name has "*": it is not a DNS label)
OTHERS_LEAF = "pods"


def tree_shape(group: object) -> tuple[Any, ...] | None:
    """What the tree troupe makes of `group` is made of (None: it makes none:
    not a PodGroup, no policies, one troupe cannot read or made itself): a
    change of it makes the tree again."""
    if not isinstance(group, PodGroup) or not group.sub_groups or group.problem or group.made_from is not None:
        return None
    spec = group.spec
    return (
        group.api_version,
        group.metadata.uid,
        group.metadata.creation_timestamp,
        group.sub_groups,
        group.min_count if group.is_gang else 0,
        tuple(sorted(group.min_per_task.items())),
        spec.priority_class_name,
        spec.priority,
    )


def policy_of(group: PodGroup, labels: Mapping[str, str]) -> tuple[SubGroupPolicy | None, tuple[str, ...]]:
    """The first policy that takes a pod with these labels, and its
    sub-group; (None, ()) where none does."""
    for policy in group.sub_groups:
        values = policy.sub_group_of(labels)
        if values is not None:
            return policy, values
    return None, ()


def leaf_name(group: PodGroup, policy: SubGroupPolicy | None, values: tuple[str, ...]) -> str:
    if policy is None:
        return f"{group.metadata.name}/{OTHERS}/{OTHERS_LEAF}"
    return f"{group.metadata.name}/{policy.name}/{'-'.join(values)}"


def others_min(group: PodGroup) -> int:
    """The pods outside every policy that minMember asks for: what it asks
    beyond the policies' minimums (0: none)."""
    if not group.is_gang:
        return 0
    return max(group.min_count - sum(p.min_sub_groups * p.size for p in group.sub_groups), 0)


def _meta(group: PodGroup, name: str) -> dict[str, Any]:
    m = group.metadata
    return {"name": name, "namespace": m.namespace, "uid": m.uid, "creationTimestamp": m.creation_timestamp}


def _composite(group: PodGroup, name: str, parent: str | None, needs: int) -> CompositePodGroup:
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minGroupCount": max(needs, 1)}}}
    if parent is None:  # the tree's priority is its root's
        spec["priorityClassName"] = group.spec.priority_class_name
        spec["priority"] = group.spec.priority
    else:
        spec["parentCompositePodGroupName"] = parent
    made = CompositePodGroup.model_validate(
        {"apiVersion": group.api_version, "metadata": _meta(group, name), "spec": spec, "made_from": group.key}
    )
    if needs == 0:
        # An optional part: needs none of its children (no API object can
        # say 0; this one is troupe's own).
        policy = made.spec.scheduling_policy.model_copy(
            update={"gang": GangCompositeSchedulingPolicy.model_construct(min_group_count=0)}
        )
        made = made.model_copy(update={"spec": made.spec.model_copy(update={"scheduling_policy": policy})})
    return made


def skeleton(group: PodGroup) -> list[CompositePodGroup]:
    """The tree's CompositePodGroups: the root (the Volcano PodGroup's key),
    one per policy, and one for the pods no policy takes. Its leaves come
    with their pods (`leaf`)."""
    name = group.metadata.name
    parts = [_composite(group, f"{name}/{p.name}", name, p.min_sub_groups) for p in group.sub_groups]
    parts.append(_composite(group, f"{name}/{OTHERS}", name, 1 if others_min(group) else 0))
    return [_composite(group, name, None, len(parts)), *parts]


def others_per_task(group: PodGroup) -> dict[str, int]:
    """minTaskMember for the pods no policy takes: the tasks no policy
    selects by its task label (Volcano's job controller gives each
    partitioned task a policy selecting `volcano.sh/task-spec: <task>`, and
    minTaskMember counts that task's partitions too: minSubGroups says it)."""
    selected = {v for p in group.sub_groups if p.selector is not None for k, v in p.selector.match_labels if k == TASK}
    return {task: n for task, n in group.min_per_task.items() if task not in selected}


def leaf(group: PodGroup, policy: SubGroupPolicy | None, values: tuple[str, ...]) -> PodGroup:
    """The sub-group's PodGroup: a gang of subGroupSize under its policy's
    composite; the pods no policy takes, a gang of what minMember asks of them
    (with what minTaskMember asks of their tasks)."""
    name = group.metadata.name
    parent = f"{name}/{OTHERS}" if policy is None else f"{name}/{policy.name}"
    size = max(others_min(group), 1) if policy is None else policy.size
    return PodGroup.model_validate(
        {
            "apiVersion": group.api_version,
            "metadata": _meta(group, leaf_name(group, policy, values)),
            "spec": {"schedulingPolicy": {"gang": {"minCount": size}}, "parentCompositePodGroupName": parent},
            "min_per_task": others_per_task(group) if policy is None else {},
            "made_from": group.key,
        }
    )


def leaf_key(group: PodGroup, labels: Mapping[str, str]) -> tuple[GroupKey, PodGroup]:
    """The key of the sub-group a pod with these labels is in, and its PodGroup."""
    policy, values = policy_of(group, labels)
    made = leaf(group, policy, values)
    return made.key, made
