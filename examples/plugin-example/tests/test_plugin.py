"""Tests of the example plugins through troupe's Framework, registered by hand.

Run from this directory: `pytest` (pyproject.toml puts src/ on sys.path;
troupe must be importable, e.g. `pip install -e <troupe checkout>`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError
from troupe_example_plugin import NodeLabelArgs, PreferNodeLabel, RequireNodeLabel

from scheduler.api.config import Profile
from scheduler.api.parse import parse_node, parse_pod
from scheduler.cluster.cache import ClusterCache
from scheduler.core.schedule_one import schedule_pod
from scheduler.framework.framework import Framework, ProfileError
from scheduler.framework.interface import CycleState, Handle
from scheduler.framework.registry import Registry
from scheduler.plugins import in_tree_registry

POOL = "node.example.com/pool"


def node(name: str, labels: Mapping[str, str] | None = None, cpu: str = "4") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": dict(labels or {})},
        "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"}},
    }


def pod(name: str, cpu: str = "1", node_name: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "troupe-scheduler",
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}],
    }
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"}, "spec": spec}


def cluster(*nodes: dict[str, Any], running: tuple[dict[str, Any], ...] = ()) -> ClusterCache:
    cache = ClusterCache()
    for n in nodes:
        cache.upsert_node(parse_node(n))
    for p in running:
        cache.upsert_pod(parse_pod(p))
    return cache


def registry() -> Registry:
    reg = in_tree_registry()
    reg.register(PreferNodeLabel)
    reg.register(RequireNodeLabel)
    return reg


def framework(cache: ClusterCache, profile: Mapping[str, Any]) -> Framework:
    return Framework(Profile.model_validate(dict(profile)), registry(), Handle(cache))


def prefer(label: str = POOL, value: str | None = "gpu", weight: int = 5) -> dict[str, Any]:
    args: dict[str, Any] = {"label": label}
    if value is not None:
        args["value"] = value
    return {
        "plugins": {"score": {"enabled": [{"name": "PreferNodeLabel", "weight": weight}]}},
        "pluginConfig": [{"name": "PreferNodeLabel", "args": args}],
    }


def place(cache: ClusterCache, profile: Mapping[str, Any], p: dict[str, Any]) -> str | None:
    snap = cache.snapshot()
    result = schedule_pod(framework(cache, profile), parse_pod(p), snap)
    return None if result.row is None else snap.names[result.row]


# ---------------------------------------------------------------- arguments


@pytest.mark.parametrize(
    "args, problems",
    [
        ({}, [(("label",), "Field required")]),
        ({"label": ""}, [(("label",), "String should have at least 1 character")]),
        ({"label": POOL, "lable": "x"}, [(("lable",), "Extra inputs are not permitted")]),
        (
            {"label": POOL, "value": 3},
            [(("value",), "Input should be a valid string")],
        ),  # strict: quote numbers in YAML
        (
            {"label": 3, "value": True},
            [(("label",), "Input should be a valid string"), (("value",), "Input should be a valid string")],
        ),
    ],
)
def test_bad_args_are_validation_errors(args: dict[str, Any], problems: list[tuple[tuple[str, ...], str]]) -> None:
    with pytest.raises(ValidationError) as err:
        NodeLabelArgs.model_validate(args)
    assert [(e["loc"], e["msg"]) for e in err.value.errors()] == problems


def test_args_defaults_and_upstream_keys() -> None:
    args = NodeLabelArgs.model_validate({"label": POOL, "value": None, "apiVersion": "v1", "kind": "NodeLabelArgs"})
    assert (args.label, args.value) == (POOL, None)


def test_bad_args_are_profile_errors_with_their_path() -> None:
    profile = prefer()
    profile["pluginConfig"][0]["args"] = {"value": "gpu", "lable": POOL}
    with pytest.raises(ProfileError) as err:
        framework(ClusterCache(), profile)
    assert str(err.value).splitlines() == [
        "profile troupe-scheduler: pluginConfig[0].args.label: Field required",
        "profile troupe-scheduler: pluginConfig[0].args.lable: unknown field (did you mean label?); allowed: label, value",
    ]


def test_enabled_without_args_is_a_profile_error() -> None:
    profile = prefer()
    del profile["pluginConfig"]
    with pytest.raises(ProfileError) as err:
        framework(ClusterCache(), profile)
    assert str(err.value) == (
        "profile troupe-scheduler: plugins.score: PreferNodeLabel has no pluginConfig entry: args.label: Field required"
    )


# -------------------------------------------------------------------- score


@pytest.mark.parametrize(
    "value, want",
    [("gpu", [100, 0, 0, 0]), ("cpu", [0, 100, 0, 0]), (None, [100, 100, 0, 0]), ("tpu", [0, 0, 0, 0])],
)
def test_prefer_scores_matching_nodes_100(value: str | None, want: list[int]) -> None:
    cache = cluster(node("n0", {POOL: "gpu"}), node("n1", {POOL: "cpu"}), node("n2", {"other": "gpu"}), node("n3"))
    args = {"label": POOL} if value is None else {"label": POOL, "value": value}
    plugin = PreferNodeLabel(NodeLabelArgs.model_validate(args), Handle(cache))
    snap = cache.snapshot()
    rows = np.arange(len(snap))
    assert plugin.score(CycleState(), parse_pod(pod("p")), snap, rows).tolist() == want
    # A subset of rows gets the scores of those rows, in order.
    assert plugin.score(CycleState(), parse_pod(pod("p")), snap, np.array([3, 0])).tolist() == [want[3], want[0]]


def test_prefer_changes_the_placement() -> None:
    # n-free is emptier, so the default scores prefer it; n-gpu is labelled.
    cache = cluster(node("n-free"), node("n-gpu", {POOL: "gpu"}), running=(pod("busy", cpu="2", node_name="n-gpu"),))
    assert place(cache, {}, pod("p")) == "n-free"
    assert place(cache, prefer(weight=5), pod("p")) == "n-gpu"
    # The default scores favour n-free by less than 100 (LeastAllocated 81 vs
    # 50, BalancedAllocation 93 vs 75); the label adds 100 x weight to n-gpu.
    assert place(cache, prefer(weight=1), pod("p")) == "n-gpu"
    # A value no node has scores 0 everywhere: LeastAllocated decides again.
    assert place(cache, prefer(value="cpu"), pod("p")) == "n-free"


# ------------------------------------------------------------------- filter


def require(value: str | None = "gpu") -> dict[str, Any]:
    args: dict[str, Any] = {"label": POOL}
    if value is not None:
        args["value"] = value
    return {
        "plugins": {"filter": {"enabled": [{"name": "RequireNodeLabel"}]}},
        "pluginConfig": [{"name": "RequireNodeLabel", "args": args}],
    }


def test_require_keeps_only_labelled_nodes() -> None:
    cache = cluster(node("n-free"), node("n-cpu", {POOL: "cpu"}), node("n-gpu", {POOL: "gpu"}, cpu="2"))
    assert place(cache, require(), pod("p")) == "n-gpu"
    assert place(cache, require(value=None), pod("p")) == "n-cpu"  # emptier of the two labelled nodes


def test_require_reason_in_the_diagnosis() -> None:
    cache = cluster(node("n0"), node("n1", {POOL: "cpu"}), node("n2", {POOL: "gpu"}, cpu="1"))
    snap = cache.snapshot()
    result = schedule_pod(framework(cache, require()), parse_pod(pod("p", cpu="2")), snap)
    assert result.row is None and result.diagnosis is not None
    # A node rejected by one filter is not shown to the next (upstream): n2 is
    # short of cpu, n0 and n1 lack the label.
    assert result.diagnosis.message == (
        "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't have label node.example.com/pool=gpu."
    )
    assert not result.diagnosis.unresolvable  # preemption could free cpu on n2


def test_require_alone_is_unresolvable() -> None:
    cache = cluster(node("n0"), node("n1", {POOL: "cpu"}))
    result = schedule_pod(framework(cache, require()), parse_pod(pod("p")), cache.snapshot())
    assert result.diagnosis is not None and result.diagnosis.unresolvable
    assert result.diagnosis.message == "0/2 nodes are available: 2 node(s) didn't have label node.example.com/pool=gpu."


def test_filter_only_plugin_cannot_be_enabled_at_score() -> None:
    profile = require()
    profile["plugins"]["score"] = {"enabled": [{"name": "RequireNodeLabel"}]}
    with pytest.raises(ProfileError) as err:
        framework(ClusterCache(), profile)
    assert str(err.value) == "profile troupe-scheduler: plugin RequireNodeLabel does not implement score"
