"""Volcano's `subGroupPolicy`: which sub-group of its PodGroup a pod is in.

As Volcano's scheduler reads it (pkg/scheduler/api/sub_job_info.go
getSubJobMatchValues): the first policy, in list order, whose
`labelSelector` selects the pod (no selector: every pod) and whose every
`matchLabelKeys` label the pod has with a non-empty value takes it; its
sub-group is those values (a policy without `matchLabelKeys` takes no pod:
Volcano keeps only pods with values). A pod no policy takes is in none (Volcano's
default sub-job). api/subgroups.py makes the tree troupe schedules of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .records import LabelSelector
from .selectors import parse_label_selector

TASK = "volcano.sh/task-spec"  # the label (or annotation) that names a pod's task in Volcano


@dataclass(frozen=True, slots=True)
class SubGroupPolicy:
    name: str  # the policy's name, or its index where it has none
    size: int  # subGroupSize: the pods of one sub-group, placed together or not at all
    min_sub_groups: int  # minSubGroups: the sub-groups that must be placed whole (0: none)
    selector: LabelSelector | None  # None: every pod of the group
    match_label_keys: tuple[str, ...]

    def sub_group_of(self, labels: Mapping[str, str]) -> tuple[str, ...] | None:
        """The pod's sub-group under this policy (its matchLabelKeys values),
        None where the policy does not take it."""
        if not self.match_label_keys:
            return None  # Volcano's too: a sub-group is named by its values, and this one has none
        if self.selector is not None and not self.selector.matches(labels):
            return None
        values = tuple(labels.get(k, "") for k in self.match_label_keys)
        return None if any(v == "" for v in values) else values


def _int(raw: Any, default: int, where: str, least: int, problems: list[str]) -> int:
    if raw is None:
        return default
    try:
        value = int(raw)
    except (TypeError, ValueError):
        problems.append(f"{where}: {raw!r} is not an integer")
        return default
    if value < least:
        problems.append(f"{where}: {value} is less than {least}")
        return default
    return value


def parse_policies(raw: Any) -> tuple[tuple[SubGroupPolicy, ...], list[str], list[str]]:
    """`spec.subGroupPolicy` read: the policies, what makes them unreadable
    (problems), and what of them troupe does not honour (notes)."""
    if not raw:
        return (), [], []
    if not isinstance(raw, list):
        return (), ["spec.subGroupPolicy: not a list"], []
    policies: list[SubGroupPolicy] = []
    problems: list[str] = []
    notes: list[str] = []
    names: set[str] = set()
    for i, item in enumerate(raw):
        where = f"spec.subGroupPolicy[{i}]"
        if not isinstance(item, Mapping):
            problems.append(f"{where}: not an object")
            continue
        name = str(item.get("name") or i)
        if name in names:
            problems.append(f"{where}.name: {name!r} is the name of another policy")
        names.add(name)
        selector = item.get("labelSelector")
        keys = item.get("matchLabelKeys") or []
        if selector is not None and not isinstance(selector, Mapping):
            problems.append(f"{where}.labelSelector: not a label selector")
            selector = None
        if not isinstance(keys, list):
            problems.append(f"{where}.matchLabelKeys: not a list of label keys")
            keys = []
        if item.get("networkTopology"):
            notes.append(f"{where}.networkTopology: network topology (HyperNodes) is not honoured by troupe")
        policies.append(
            SubGroupPolicy(
                name=name,
                size=_int(item.get("subGroupSize"), 1, f"{where}.subGroupSize", 1, problems),
                min_sub_groups=_int(item.get("minSubGroups"), 0, f"{where}.minSubGroups", 0, problems),
                selector=parse_label_selector(selector),
                match_label_keys=tuple(str(k) for k in keys),
            )
        )
    return tuple(policies), problems, notes
