"""One registry of group sources (api/sources/registry.py): everything that
lists the sources reads it, so a new source is one module plus one registry
line. Proved with a toy source defined here only: adding it to the registry
is the only change, and parsing, status export, configuration, the runtime's
watches, `troupe simulate`, --help and the RBAC check all know it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.api import sources
from scheduler.api.config import ConfigError, SchedulerConfiguration, load_config
from scheduler.api.podgroup import PodGroup
from scheduler.api.records import GroupKey
from scheduler.api.sources import registry
from scheduler.api.sources.base import GroupKind, LabelSource, Source
from scheduler.cli import main
from scheduler.runtime.sources import source_apis

ROOT = Path(__file__).resolve().parents[2]
RBAC = ROOT / "manifests" / "02-rbac.yaml"

# ------------------------------------------------------------------ the toy

TOY_GROUP = "toy.example.dev"
TOY_LABEL = f"{TOY_GROUP}/crew"


def parse_toy(body: Mapping[str, Any]) -> PodGroup:
    """A ToyGroup `{spec: {size: N}}` is a gang of N (0: basic)."""
    size = int((body.get("spec") or {}).get("size") or 0)
    policy = {"gang": {"minCount": size}} if size else {"basic": {}}
    return PodGroup.model_validate(
        {
            "apiVersion": body.get("apiVersion"),
            "metadata": body.get("metadata") or {},
            "spec": {"schedulingPolicy": policy},
        }
    )


TOY = Source(
    name="toy",
    api_group=TOY_GROUP,
    pods=LabelSource(TOY_LABEL),
    kinds=(GroupKind(TOY_GROUP, ("v2", "v1"), "PodGroup", "crews", parse_toy, writes_status=True),),
    help=f"{TOY_GROUP}/v2 crews (a toy); pods join with the label {TOY_LABEL}",
    not_served="install the toy's CRD",
    scheduler_names=("toy-scheduler",),
)


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> Source:
    """The registry with the toy last: the one line a new source adds."""
    monkeypatch.setattr(registry, "SOURCES", (*registry.SOURCES, TOY))
    return TOY


def crew(name: str, size: int, version: str = "v2") -> dict[str, Any]:
    return {
        "apiVersion": f"{TOY_GROUP}/{version}",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"size": size},
    }


def test_pods_join_a_toy_group(toy: Source) -> None:
    meta = {"namespace": "ns", "labels": {TOY_LABEL: "c"}}
    assert sources.pod_group(meta, {}) == GroupKey("ns", "c", TOY_GROUP)
    # Rule order: an earlier source's link wins.
    both = {**meta, "labels": {**meta["labels"], "scheduling.troupe.dev/pod-group": "t"}}
    assert sources.pod_group(both, {}) == GroupKey("ns", "t", "scheduling.troupe.dev")
    # Off unless groupSources names it (it is optional).
    assert sources.pod_group(meta, {}, sources.enabled_sources(["native"])) is None
    assert sources.pod_group(meta, {}, sources.enabled_sources(["toy"])) == GroupKey("ns", "c", TOY_GROUP)


def test_a_toy_group_is_parsed_and_its_status_written(toy: Source) -> None:
    group = sources.parse_group(crew("c", 3))
    assert (group.key, group.spec.scheduling_policy.gang.min_count) == (GroupKey("ns", "c", TOY_GROUP), 3)
    conditions = [{"type": "PodGroupScheduled", "status": "True", "reason": "Scheduled"}]
    assert sources.export_status(group, conditions, sources.MemberCounts(), "now") == {"conditions": conditions}
    assert sources.status_path(f"{TOY_GROUP}/v2", "ns", "c") == f"/apis/{TOY_GROUP}/v2/namespaces/ns/crews/c/status"
    assert sources.has_object(f"{TOY_GROUP}/v2") and not sources.counts_members(f"{TOY_GROUP}/v2")
    assert not sources.is_implied(group.key)


def test_configuration_names_the_toy(toy: Source, tmp_path: Path) -> None:
    assert "toy" in SchedulerConfiguration().group_sources  # on by default, as every optional source
    header = "apiVersion: scheduling.troupe.dev/v1alpha1\nkind: SchedulerConfiguration\n"
    path = tmp_path / "c.yaml"
    path.write_text(header + "groupSources: [native]\nprofiles:\n- schedulerName: toy-scheduler\n")
    with pytest.raises(ConfigError, match="add 'toy' to groupSources"):
        load_config(path)
    path.write_text(header + "groupSources: [toy]\nprofiles:\n- schedulerName: toy-scheduler\n")
    assert load_config(path).group_sources == ["toy"]


def test_unknown_group_source_names_what_is_read(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "apiVersion: scheduling.troupe.dev/v1alpha1\nkind: SchedulerConfiguration\ngroupSources: [native, toy]\n"
    )
    with pytest.raises(
        ConfigError, match=r"groupSources\[1\]: 'toy' is not a group source troupe reads \(it reads 'native', "
    ):
        load_config(path)


def test_the_runtime_discovers_and_watches_the_toy(toy: Source) -> None:
    apis = {a.name: a for a in source_apis(SchedulerConfiguration().group_sources)}
    assert (apis["toy"].group, apis["toy"].versions, apis["toy"].plural, apis["toy"].not_served) == (
        TOY_GROUP,
        ("v2", "v1"),
        "crews",
        "install the toy's CRD",
    )
    assert "toy" not in {a.name for a in source_apis(["native"])}


def test_simulate_places_a_toy_gang(toy: Source, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1"},
        "status": {"allocatable": {"cpu": "4", "pods": "110"}},
    }
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"w{i}", "namespace": "ns", "labels": {TOY_LABEL: "c"}},
            "spec": {
                "schedulerName": "troupe-scheduler",
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
            },
        }
        for i in range(3)
    ]
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all([node, crew("c", 3, "v1"), *pods]))
    assert main(["simulate", str(path), "--output", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(g["name"], g["scheduled"]) for g in out["podGroups"]] == [("c", True)]
    assert {p["node"] for p in out["pods"]} == {"n1"}


def test_help_lists_the_toy(toy: Source, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "  toy " in text and TOY_LABEL in text
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    assert f"{TOY_GROUP}/v2" in capsys.readouterr().out


# ------------------------------------------------------------------ RBAC


def _granted() -> set[tuple[str, str, str]]:
    """(API group, resource, verb) the ClusterRole grants."""
    role = next(d for d in yaml.safe_load_all(RBAC.read_text()) if d["kind"] == "ClusterRole")
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def _required(all_sources: tuple[Source, ...]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for s in all_sources
        for kind in s.kinds
        for group, resource, verbs in kind.rbac()
        for verb in verbs
    }


def test_the_manifest_grants_what_every_source_needs() -> None:
    missing = _required(registry.SOURCES) - _granted()
    assert not missing, f"manifests/02-rbac.yaml lacks, for the group sources: {sorted(missing)}"


def test_the_manifest_grants_nothing_on_group_kinds_no_source_reads() -> None:
    # Beyond the registry's needs, troupe's own kinds are also made and
    # resized and deleted for Jobs (create, patch, delete) and their status read back.
    needed = (
        _required(registry.SOURCES)
        | {("scheduling.troupe.dev", r, v) for r in ("podgroups", "workloads") for v in ("create", "patch", "delete")}
        | {("scheduling.troupe.dev", "podgroups/status", v) for v in ("get", "update")}
    )
    kinds = {(k.group, k.plural) for s in registry.SOURCES for k in s.kinds}
    extra = {(g, r, v) for g, r, v in _granted() if (g, r.partition("/")[0]) in kinds and (g, r, v) not in needed}
    assert not extra, f"manifests/02-rbac.yaml grants on group kinds more than the sources need: {sorted(extra)}"


def test_a_new_sources_rules_are_demanded(toy: Source) -> None:
    # The check above fails for a source added without its rules.
    missing = _required(registry.SOURCES) - _granted()
    assert missing == {(TOY_GROUP, "crews", v) for v in ("get", "list", "watch")} | {
        (TOY_GROUP, "crews/status", "patch")
    }
