"""Every extension point the configuration accepts is run; one that is not is
an error when the profile is built, never a silently ignored setting."""

from __future__ import annotations

import pytest

from scheduler.api.config import EXTENSION_POINTS, Profile, SchedulerConfiguration
from scheduler.cluster.cache import ClusterCache
from scheduler.framework import framework as framework_module
from scheduler.framework.framework import _POINT_TYPES, DEFAULT_PLUGINS, Framework, ProfileError
from scheduler.framework.interface import Handle
from scheduler.plugins import in_tree_registry


def test_every_accepted_point_has_a_runner_and_a_default_list() -> None:
    assert set(EXTENSION_POINTS) == set(_POINT_TYPES) == set(DEFAULT_PLUGINS)
    fwk = Framework(Profile(), in_tree_registry(), Handle(ClusterCache()))
    for attr in (
        "pre_enqueue",
        "pre_filter",
        "filters",
        "post_filter",
        "scores",
        "reserve",
        "permits",
        "pre_bind",
        "placement_generate",
        "placement_scores",
    ):
        assert isinstance(getattr(fwk, attr), list)
    # The configuration has a plugin set per point, under the point's name.
    plugins = SchedulerConfiguration().profiles[0].plugins
    for point in EXTENSION_POINTS:
        assert plugins.point(point).enabled == []


def test_a_point_without_a_runner_is_a_load_time_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(framework_module, "EXTENSION_POINTS", (*EXTENSION_POINTS, "bind"))
    with pytest.raises(
        ProfileError, match=r"^profile troupe-scheduler: plugins\.bind: this point is not run by troupe$"
    ):
        Framework(Profile(), in_tree_registry(), Handle(ClusterCache()))
