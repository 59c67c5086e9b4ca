"""Label selectors and selector requirements as the API writes them (for
pods' terms in parse.py, and Volcano's subGroupPolicy in subgroup_policy.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .records import LabelSelector, Requirement


def requirements(raw: list[Mapping[str, Any]] | None) -> tuple[Requirement, ...]:
    return tuple(
        Requirement(str(r.get("key", "")), str(r.get("operator", "")), tuple(str(v) for v in r.get("values") or ()))
        for r in raw or ()
    )


def parse_label_selector(raw: Mapping[str, Any] | None) -> LabelSelector | None:
    if raw is None:
        return None
    return LabelSelector(
        tuple(sorted((str(k), str(v)) for k, v in (raw.get("matchLabels") or {}).items())),
        requirements(raw.get("matchExpressions")),
    )
