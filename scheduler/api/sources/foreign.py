"""What the gang schedulers of the batch ecosystem (scheduler-plugins'
coscheduling, Volcano) have in common, in troupe's terms: a `minMember`
gang, `minResources`, and status counts of the group's pods."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from ..records import ObjectError
from ..resources import resource_map


class MemberCounts(NamedTuple):
    """The group's pods as its source's status counts them."""

    pods: int = 0  # every pod of the group that exists, finished ones too
    bound: int = 0  # bound (or being bound) and not finished
    running: int = 0  # status.phase Running
    succeeded: int = 0
    failed: int = 0
    occupied_by: str = ""  # the first member's owners, as scheduler-plugins' controller writes them


def gang_policy(min_member: Any, where: str) -> tuple[dict[str, Any], list[str]]:
    """`minMember` as troupe's scheduling policy: a gang of that many, or
    basic where it is 0 or unset (nothing to wait for)."""
    try:
        n = int(min_member or 0)
    except (TypeError, ValueError):
        return {"basic": {}}, [f"{where}: {min_member!r} is not an integer"]
    if n < 0:
        return {"basic": {}}, [f"{where}: {n} is negative"]
    return ({"gang": {"minCount": n}} if n > 0 else {"basic": {}}), []


def min_resources(raw: Any, where: str) -> tuple[dict[str, int], list[str]]:
    if raw is None:
        return {}, []
    if not isinstance(raw, Mapping):
        return {}, [f"{where}: not a resource list"]
    try:
        return resource_map(raw, where), []
    except ObjectError as exc:
        return {}, [str(exc)]


def count_fields(counts: MemberCounts) -> dict[str, int]:
    return {"running": counts.running, "succeeded": counts.succeeded, "failed": counts.failed}
