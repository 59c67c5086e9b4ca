"""PodDisruptionBudgets: parsing, which pods a PDB selects, and the watch
handlers that keep them in the cache (preemption weighs victims against them)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from scheduler.api.config import SchedulerConfiguration
from scheduler.api.parse import parse_pdb
from scheduler.api.records import LabelSelector, ObjectError, PodDisruptionBudgetInfo, Requirement
from scheduler.core.scheduler import Scheduler
from scheduler.plugins import in_tree_registry

from .builders import make_pod

_MISSING: Any = object()


def pdb_body(
    name: str = "budget",
    namespace: str = "default",
    selector: Any = _MISSING,
    allowed: Any = _MISSING,
    uid: str | None = None,
    disrupted: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"minAvailable": 1}
    if selector is not _MISSING:
        spec["selector"] = selector
    body: dict[str, Any] = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or f"pdb-uid-{namespace}-{name}"},
        "spec": spec,
    }
    status: dict[str, Any] = {}
    if allowed is not _MISSING:
        status["disruptionsAllowed"] = allowed
    if disrupted is not None:
        status["disruptedPods"] = disrupted
    if status:
        body["status"] = status
    return body


# ------------------------------------------------------------------ parsing


def test_parses_metadata_match_labels_and_disruptions_allowed():
    pdb = parse_pdb(pdb_body("b", "team", {"matchLabels": {"app": "web", "tier": "fe"}}, allowed=2))
    assert pdb == PodDisruptionBudgetInfo(
        namespace="team",
        name="b",
        uid="pdb-uid-team-b",
        selector=LabelSelector((("app", "web"), ("tier", "fe"))),
        disruptions_allowed=2,
    )
    assert pdb.key == ("team", "b")


def test_parses_match_expressions():
    pdb = parse_pdb(
        pdb_body(selector={"matchExpressions": [{"key": "app", "operator": "In", "values": ["a", "b"]}]}, allowed=1)
    )
    assert pdb.selector == LabelSelector((), (Requirement("app", "In", ("a", "b")),))


def test_an_empty_selector_selects_everything_and_a_missing_one_nothing():
    assert parse_pdb(pdb_body(selector={})).selector == LabelSelector()
    assert parse_pdb(pdb_body()).selector is None
    assert parse_pdb(pdb_body(selector=None)).selector is None


def test_a_missing_status_allows_no_disruption():
    assert parse_pdb(pdb_body(selector={})).disruptions_allowed == 0
    assert parse_pdb(pdb_body(selector={}, allowed=None)).disruptions_allowed == 0
    assert parse_pdb(pdb_body(selector={}, allowed=0)).disruptions_allowed == 0


def test_disrupted_pods_are_kept_by_name():
    pdb = parse_pdb(pdb_body(selector={}, allowed=0, disrupted={"p1": "2026-01-01T00:00:00Z"}))
    assert pdb.disrupted_pods == frozenset({"p1"})


def test_a_missing_namespace_is_default():
    body = pdb_body(selector={})
    del body["metadata"]["namespace"]
    assert parse_pdb(body).namespace == "default"


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"metadata": {"name": "b"}},
        {"metadata": {"uid": "u"}},
        pdb_body(selector={"matchLabels": ["not", "a", "map"]}),
        pdb_body(selector={}, allowed="many"),
    ],
    ids=["empty", "no-uid", "no-name", "bad-selector", "bad-allowed"],
)
def test_a_body_it_cannot_use_raises_object_error(body):
    with pytest.raises(ObjectError):
        parse_pdb(body)


# ------------------------------------------------------------------ selects


def test_selects_pods_of_its_namespace_whose_labels_match():
    pdb = parse_pdb(pdb_body(namespace="team", selector={"matchLabels": {"app": "web"}}, allowed=1))
    assert pdb.selects(make_pod("a", namespace="team", labels={"app": "web", "x": "y"}))
    assert not pdb.selects(make_pod("b", namespace="team", labels={"app": "db"}))
    assert not pdb.selects(make_pod("c", namespace="team"))
    assert not pdb.selects(make_pod("d", namespace="other", labels={"app": "web"}))


def test_an_empty_selector_selects_every_pod_of_its_namespace_only():
    pdb = parse_pdb(pdb_body(namespace="team", selector={}))
    assert pdb.selects(make_pod("a", namespace="team"))
    assert pdb.selects(make_pod("b", namespace="team", labels={"any": "thing"}))
    assert not pdb.selects(make_pod("c", namespace="other"))


def test_a_missing_selector_selects_nothing():
    pdb = parse_pdb(pdb_body(namespace="team"))
    assert not pdb.selects(make_pod("a", namespace="team"))


def test_match_expressions_select_as_label_selectors_do():
    pdb = parse_pdb(pdb_body(selector={"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["db"]}]}))
    assert pdb.selects(make_pod("a", labels={"app": "web"}))
    assert pdb.selects(make_pod("b"))
    assert not pdb.selects(make_pod("c", labels={"app": "db"}))


# ----------------------------------------------------------------- handlers


@pytest.fixture
def sched() -> Scheduler:
    return Scheduler(SchedulerConfiguration(), in_tree_registry())


def test_on_pdb_stores_and_replaces_by_namespace_and_name(sched):
    sched.on_pdb(pdb_body("b", "team", {}, allowed=1))
    sched.on_pdb(pdb_body("b", "other", {}, allowed=3))
    assert sched.cache.pdbs[("team", "b")].disruptions_allowed == 1
    sched.on_pdb(pdb_body("b", "team", {}, allowed=0))
    assert sched.cache.pdbs[("team", "b")].disruptions_allowed == 0
    assert sched.cache.pdbs[("other", "b")].disruptions_allowed == 3


def test_on_pdb_deleted_removes_it_and_an_unknown_one_is_fine(sched):
    sched.on_pdb(pdb_body("b", "team", {}, allowed=1))
    sched.on_pdb_deleted(pdb_body("b", "team"))
    sched.on_pdb_deleted(pdb_body("never-seen", "team"))
    assert sched.cache.pdbs == {}


def test_a_pdb_it_cannot_read_is_logged_not_raised_and_drops_the_older_version(sched, caplog):
    sched.on_pdb(pdb_body("b", "team", {}, allowed=1))
    with caplog.at_level(logging.WARNING):
        sched.on_pdb(pdb_body("b", "team", {"matchLabels": "oops"}, allowed=1))
        sched.on_pdb({"metadata": {"namespace": "team"}})
    assert sched.cache.pdbs == {}
    assert sum("ignoring PodDisruptionBudget team/b" in r.getMessage() for r in caplog.records) == 1


def test_forget_object_drops_a_pdb_as_its_deleted_event_would(sched):
    sched.on_pdb(pdb_body("b", "team", {}, allowed=1))
    sched.forget_object("pdb", "team", "b")
    assert ("team", "b") not in sched.cache.pdbs


def test_a_pdb_event_requeues_nothing(sched):
    sched.on_pod(
        {
            "metadata": {"name": "p", "namespace": "team", "uid": "u1"},
            "spec": {"schedulerName": "troupe-scheduler", "containers": [{"name": "c"}]},
        }
    )
    before = len(sched.queue)
    sched.on_pdb(pdb_body("b", "team", {}, allowed=1))
    assert len(sched.queue) == before
