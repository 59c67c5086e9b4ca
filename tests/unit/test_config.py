"""The configuration file: SchedulerConfiguration / load_config and the profiles
a Framework builds from it.

Good files are loaded in-process and checked for what reaches the scheduler
(profiles = scheduler names, plugin sets with upstream's merge rules,
pluginConfig args, percentageOfNodesToScore, queue settings). Bad files go
through the real CLI (`python -m scheduler run --config F --kubeconfig
/nonexistent`) in a subprocess: exit status 2 before any connection is
attempted (before the runtime is even imported), and a message that names
the file and the field (and, for literals and unknown fields, the allowed
values)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from pydantic import ConfigDict

from scheduler.api.config import ConfigError, PluginArgs, SchedulerConfiguration, load_config
from scheduler.api.constants import DEFAULT_SCHEDULER_NAME
from scheduler.cli import check_config
from scheduler.core.schedule_one import schedule_pod
from scheduler.core.scheduler import Scheduler
from scheduler.framework.framework import DEFAULT_PLUGINS, Framework, ProfileError
from scheduler.framework.interface import CycleState, Handle, ScorePlugin
from scheduler.framework.registry import Registry
from scheduler.plugins import in_tree_registry

from .builders import make_cache, make_node, make_pod

HEADER = "apiVersion: scheduling.troupe.dev/v1alpha1\nkind: SchedulerConfiguration\n"


class EchoArgs(ScorePlugin):
    """A score plugin outside the default profile that keeps its args (any)."""

    class Args(PluginArgs):
        model_config = ConfigDict(extra="allow")

    name = "EchoArgs"

    def score(self, state: CycleState, pod: Any, snapshot: Any, rows: np.ndarray) -> np.ndarray:
        return np.zeros(len(rows), dtype=np.int64)


def registry() -> Registry:
    reg = in_tree_registry()
    reg.register(EchoArgs)
    return reg


def write(tmp_path: Path, text: str, name: str = "config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def frameworks(tmp_path: Path, text: str, cache: Any = None) -> dict[str, Framework]:
    config = load_config(write(tmp_path, text))
    handle = Handle(cache if cache is not None else make_cache())
    return {p.scheduler_name: Framework(p, registry(), handle) for p in config.profiles}


def only(tmp_path: Path, body: str) -> Framework:
    (fwk,) = frameworks(tmp_path, HEADER + body).values()
    return fwk


def defaults(point: str) -> list[tuple[str, int | None]]:
    return list(DEFAULT_PLUGINS[point])


def score_defaults() -> list[tuple[str, int]]:
    return [(n, w or 1) for n, w in DEFAULT_PLUGINS["score"]]


# ---------------------------------------------------------------- good files


def test_no_file_empty_file_and_header_only_are_the_defaults(tmp_path: Path) -> None:
    want = SchedulerConfiguration()
    assert load_config(None) == want
    assert load_config(write(tmp_path, "", "empty.yaml")) == want
    assert load_config(write(tmp_path, HEADER, "header.yaml")) == want
    assert [p.scheduler_name for p in want.profiles] == [DEFAULT_SCHEDULER_NAME]
    assert (want.queue.pod_initial_backoff_seconds, want.queue.pod_max_backoff_seconds) == (1.0, 10.0)
    assert want.queue.max_unschedulable_seconds == 300.0
    cc = want.client_connection
    assert (cc.qps, cc.burst, cc.bind_concurrency) == (50.0, 100, 16)
    assert want.profiles[0].percentage_of_nodes_to_score == 0  # adaptive


def test_queue_and_client_settings_reach_the_scheduler(tmp_path: Path) -> None:
    config = load_config(
        write(
            tmp_path,
            HEADER
            + """
queue: {podInitialBackoffSeconds: 2, podMaxBackoffSeconds: 20, maxUnschedulableSeconds: 60}
clientConnection: {qps: 5, burst: 10, bindConcurrency: 2}
healthBindAddress: 127.0.0.1:9999
""",
        )
    )
    sched = Scheduler(config, in_tree_registry())
    assert (sched.queue.initial_backoff, sched.queue.max_backoff, sched.queue.max_unschedulable) == (2.0, 20.0, 60.0)
    cc = config.client_connection
    assert (cc.qps, cc.burst, cc.bind_concurrency) == (5.0, 10, 2)
    assert config.health_bind_address == "127.0.0.1:9999"


def _node(name: str, cpu: str = "4") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": f"uid-{name}"},
        "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"}},
    }


def _pod(name: str, scheduler: str, node_name: str = "", cpu: str = "1") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
    }
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"}, "spec": spec}


def test_several_profiles_are_several_scheduler_names(tmp_path: Path) -> None:
    config = load_config(
        write(
            tmp_path,
            HEADER
            + """
profiles:
- schedulerName: troupe-scheduler
- schedulerName: troupe-first-fit
  plugins:
    score:
      disabled: [{name: "*"}]
""",
        )
    )
    sched = Scheduler(config, registry())
    assert list(sched.frameworks) == ["troupe-scheduler", "troupe-first-fit"]
    assert sched.frameworks["troupe-first-fit"].scores == []
    sched.on_node(_node("n0"))
    sched.on_node(_node("n1"))
    sched.on_pod(_pod("running", "default-scheduler", node_name="n0", cpu="2"))
    sched.on_pod(_pod("spread", "troupe-scheduler"))
    sched.on_pod(_pod("first", "troupe-first-fit"))
    sched.on_pod(_pod("theirs", "default-scheduler"))  # another scheduler's pod: never queued
    placed = {}
    while (popped := sched.queue.pop_nowait()) is not None:
        decision = sched.schedule_unit(popped)
        assert decision is not None
        placed.update({p.pod.name: p.node for p in decision.assignments})
    # LeastAllocated sends the default profile's pod to the empty node; the
    # profile without scores takes the first feasible node.
    assert placed == {"spread": "n1", "first": "n0"}


def test_operator_profiles_load_with_their_group_sources_on(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "config-ecosystem.yaml"
    names = [p.scheduler_name for p in load_config(example).profiles]  # every source on by default
    assert names == ["troupe-scheduler", "scheduler-plugins-scheduler", "volcano"]
    config = load_config(write(tmp_path, HEADER + "groupSources: [volcano]\nprofiles:\n- schedulerName: volcano\n"))
    assert (config.group_sources, [p.scheduler_name for p in config.profiles]) == (["volcano"], ["volcano"])


def test_simulate_refuses_an_operator_profile_whose_group_source_is_off(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from scheduler.cli import main

    config = write(tmp_path, HEADER + "groupSources: [native]\nprofiles:\n- schedulerName: volcano\n")
    assert main(["simulate", "--config", str(config), str(write(tmp_path, "", "in.yaml"))]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"troupe: {config}: invalid configuration:\n  profiles[0].schedulerName: 'volcano' is ")
    assert "add 'volcano' to groupSources or remove this profile" in err


@pytest.mark.parametrize(
    "plugins, point, want",
    [
        pytest.param("{}", "filter", defaults("filter"), id="defaults-filter"),
        pytest.param("{}", "score", score_defaults(), id="defaults-score"),
        pytest.param(
            "{filter: {disabled: [{name: TaintToleration}]}}",
            "filter",
            [p for p in defaults("filter") if p[0] != "TaintToleration"],
            id="disable-one",
        ),
        pytest.param(
            "{score: {disabled: [{name: '*'}], enabled: [{name: NodeResourcesFit, weight: 4}]}}",
            "score",
            [("NodeResourcesFit", 4)],
            id="disable-all-then-enable",
        ),
        pytest.param(
            "{score: {enabled: [{name: TaintToleration, weight: 7}]}}",
            "score",
            [(n, 7 if n == "TaintToleration" else w) for n, w in score_defaults()],
            id="reweight-in-place",
        ),
        pytest.param(
            "{score: {disabled: [{name: TaintToleration}], enabled: [{name: TaintToleration, weight: 7}]}}",
            "score",
            [p for p in score_defaults() if p[0] != "TaintToleration"] + [("TaintToleration", 7)],
            id="disable-and-enable-moves-to-the-end",
        ),
        pytest.param(
            "{score: {enabled: [{name: EchoArgs}]}}",
            "score",
            score_defaults() + [("EchoArgs", 1)],
            id="enabled-without-weight-is-1",
        ),
        pytest.param(
            "{score: {disabled: [{name: EchoArgs}]}}",
            "score",
            score_defaults(),
            id="disable-a-plugin-not-enabled",
        ),
        pytest.param(
            "{filter: {disabled: [{name: NodeUnschedulable}], enabled: [{name: NodeUnschedulable}]}}",
            "filter",
            [p for p in defaults("filter") if p[0] != "NodeUnschedulable"] + [("NodeUnschedulable", None)],
            id="filter-order-follows-enabled",
        ),
        pytest.param("{preEnqueue: {disabled: [{name: '*'}]}}", "preEnqueue", [], id="no-preenqueue"),
        pytest.param("{permit: {disabled: [{name: GangScheduling}]}}", "permit", [], id="no-permit"),
    ],
)
def test_plugin_sets(tmp_path: Path, plugins: str, point: str, want: list[tuple[str, int | None]]) -> None:
    fwk = only(tmp_path, f"profiles:\n- plugins: {plugins}\n")
    got: list[tuple[str, int | None]]
    if point == "score":
        got = [(s.plugin.name, s.weight) for s in fwk.scores]
    else:
        lists = {"filter": fwk.filters, "preEnqueue": fwk.pre_enqueue, "permit": fwk.permits}
        got = [(p.name, None) for p in lists[point]]
        want = [(n, None) for n, _ in want]
    assert got == want


def test_disabling_all_filters_lets_a_pod_onto_a_tainted_node(tmp_path: Path) -> None:
    cache = make_cache([make_node("tainted", taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}])])
    pod = make_pod("p", cpu="1")
    (default,) = frameworks(tmp_path, HEADER, cache).values()
    assert schedule_pod(default, pod, cache.snapshot()).row is None
    (none,) = frameworks(
        tmp_path, HEADER + "profiles:\n- plugins: {filter: {disabled: [{name: '*'}]}}\n", cache
    ).values()
    assert schedule_pod(none, pod, cache.snapshot()).row == 0


def test_plugin_config_args_reach_the_plugin(tmp_path: Path) -> None:
    fwk = only(
        tmp_path,
        """
profiles:
- plugins:
    score:
      enabled: [{name: EchoArgs, weight: 3}]
  pluginConfig:
  - name: EchoArgs
    args:
      nested: {list: [1, two, 3.5], flag: true}
      empty: {}
""",
    )
    assert fwk.plugins["EchoArgs"].args.model_dump() == {"nested": {"list": [1, "two", 3.5], "flag": True}, "empty": {}}


def test_plugin_config_of_a_plugin_at_two_points_is_one_instance(tmp_path: Path) -> None:
    fwk = only(
        tmp_path, "profiles:\n- pluginConfig: [{name: NodeResourcesFit, args: {ignoredResources: [example.com/foo]}}]\n"
    )
    fit_filter = next(p for p in fwk.filters if p.name == "NodeResourcesFit")
    fit_score = next(s.plugin for s in fwk.scores if s.plugin.name == "NodeResourcesFit")
    assert fit_filter is fit_score
    assert fit_filter.args.ignored_resources == ["example.com/foo"]  # type: ignore[attr-defined]


def test_plugin_config_changes_what_the_plugin_does(tmp_path: Path) -> None:
    nodes = [make_node("a", labels={"zone": "a"}), make_node("b", labels={"zone": "b"}, cpu="2")]
    existing = []
    cache = make_cache(nodes, existing)
    foo_pod = make_pod("foo", cpu="1", requests={"example.com/foo": "1"})
    plain = make_pod("plain", cpu="1")
    (default,) = frameworks(tmp_path, HEADER, cache).values()
    snap = cache.snapshot()
    assert snap.names[schedule_pod(default, plain, snap).row] == "a"  # emptier
    result = schedule_pod(default, foo_pod, snap)
    assert result.row is None and result.diagnosis is not None
    assert result.diagnosis.message == "0/2 nodes are available: 2 Insufficient example.com/foo."

    (configured,) = frameworks(
        tmp_path,
        HEADER
        + """
profiles:
- pluginConfig:
  - name: NodeResourcesFit
    args: {ignoredResources: [example.com/foo]}
  - name: NodeAffinity
    args:
      addedAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
          nodeSelectorTerms: [{matchExpressions: [{key: zone, operator: In, values: [b]}]}]
""",
        cache,
    ).values()
    snap = cache.snapshot()
    assert snap.names[schedule_pod(configured, plain, snap).row] == "b"
    assert snap.names[schedule_pod(configured, foo_pod, snap).row] == "b"
    big = make_pod("big", cpu="3")
    result = schedule_pod(configured, big, snap)
    assert result.diagnosis is not None
    assert result.diagnosis.message == (
        "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match scheduler-enforced node affinity."
    )


@pytest.mark.parametrize(
    "global_pct, profile_pct, nodes, want",
    [
        (None, None, 5000, 500),  # adaptive: 50 - 5000/125 = 10 %
        (None, None, 50, 50),  # fewer than 100 nodes: all
        (0, None, 1000, 420),  # 50 - 1000/125 = 42 %
        (30, None, 1000, 300),
        (30, 70, 1000, 700),  # the profile's value wins
        (50, 0, 1000, 420),  # an explicit 0 in the profile is adaptive, as upstream
        (5, None, 1000, 100),  # at least 100 nodes
        (100, None, 5000, 5000),
    ],
)
def test_percentage_of_nodes_to_score(
    tmp_path: Path, global_pct: int | None, profile_pct: int | None, nodes: int, want: int
) -> None:
    text = HEADER
    if global_pct is not None:
        text += f"percentageOfNodesToScore: {global_pct}\n"
    text += "profiles:\n- schedulerName: s\n"
    if profile_pct is not None:
        text += f"  percentageOfNodesToScore: {profile_pct}\n"
    fwk = frameworks(tmp_path, text)["s"]
    expected_pct = profile_pct if profile_pct is not None else (global_pct or 0)
    assert fwk.percentage_of_nodes_to_score == expected_pct
    assert fwk.num_nodes_to_score(nodes) == want


def test_percentage_global_and_per_profile_in_one_file(tmp_path: Path) -> None:
    fwks = frameworks(
        tmp_path,
        HEADER
        + """
percentageOfNodesToScore: 30
profiles:
- schedulerName: inherits
- schedulerName: own
  percentageOfNodesToScore: 70
""",
    )
    assert {n: f.percentage_of_nodes_to_score for n, f in fwks.items()} == {"inherits": 30, "own": 70}
    assert {n: f.num_nodes_to_score(1000) for n, f in fwks.items()} == {"inherits": 300, "own": 700}


# ------------------------------------------- bad files, in-process (fast)


PROFILE_KEYS = "schedulerName, percentageOfNodesToScore, plugins, pluginConfig, podGroupScheduling, autoscaling"
POINTS = "preEnqueue, preFilter, filter, postFilter, score, reserve, permit, preBind, placementGenerate, placementScore"
TOP_KEYS = "apiVersion, kind, profiles, percentageOfNodesToScore, queue, clientConnection, healthBindAddress, stallSeconds, waitingReport, watch, leaderElection, groupSources"


@pytest.mark.parametrize(
    "body, lines",
    [
        pytest.param(
            "profiles:\n- plugins: {score: {enabled: [{name: TaintToleration, weight: 0}]}}\n",
            ["profiles[0].plugins.score.enabled[0].weight: Input should be greater than or equal to 1"],
            id="weight-0",
        ),
        pytest.param(
            "profiles:\n- plugins: {score: {enabled: [{name: NodeAffinity}, {name: TaintToleration, weight: 101}]}}\n",
            ["profiles[0].plugins.score.enabled[1].weight: Input should be less than or equal to 100"],
            id="weight-101",
        ),
        pytest.param(
            "percentageOfNodesToScore: 150\n",
            ["percentageOfNodesToScore: Input should be less than or equal to 100"],
            id="pct-global",
        ),
        pytest.param(
            "profiles:\n- percentageOfNodesToScore: -1\n",
            ["profiles[0].percentageOfNodesToScore: Input should be greater than or equal to 0"],
            id="pct-profile",
        ),
        pytest.param(
            "profiles:\n- plugins: {scoer: {}}\n",
            [f"profiles[0].plugins.scoer: unknown field (did you mean score?); allowed: {POINTS}"],
            id="unknown-extension-point",
        ),
        pytest.param(
            "profiles:\n- schedulerName: a\n- schedulerNmae: b\n",
            [f"profiles[1].schedulerNmae: unknown field (did you mean schedulerName?); allowed: {PROFILE_KEYS}"],
            id="unknown-profile-field",
        ),
        pytest.param(
            "profiles:\n- plugins: {filter: {enabled: [{name: NodeName, wieght: 2}]}}\n",
            [
                "profiles[0].plugins.filter.enabled[0].wieght: unknown field (did you mean weight?); allowed: name, weight"
            ],
            id="unknown-ref-field",
        ),
        pytest.param(
            "profiles:\n- SchedulerName: a\n",
            [f"profiles[0].SchedulerName: unknown field (did you mean schedulerName?); allowed: {PROFILE_KEYS}"],
            id="wrong-case",
        ),
        pytest.param(
            "bogus: 1\n", [f"bogus: unknown field; allowed: {TOP_KEYS}"], id="unknown-top-level-no-suggestion"
        ),
        pytest.param(
            "queue: {podInitialBackoff: 2}\n",
            [
                "queue.podInitialBackoff: unknown field (did you mean podInitialBackoffSeconds?); allowed: "
                "podInitialBackoffSeconds, podMaxBackoffSeconds, maxUnschedulableSeconds"
            ],
            id="unknown-queue-field",
        ),
        pytest.param(
            "profiles: []\n", ["profiles: List should have at least 1 item after validation, not 0"], id="no-profiles"
        ),
        pytest.param(
            "profiles: {schedulerName: x}\n", ["profiles: Input should be a valid list"], id="profiles-not-a-list"
        ),
        pytest.param(
            "profiles:\n- plugins:\n  score: {}\n",  # mis-indented: plugins is null, score a profile key
            [
                "profiles[0].plugins: expected a mapping, got null",
                f"profiles[0].score: unknown field; allowed: {PROFILE_KEYS}",
            ],
            id="mis-indented",
        ),
        pytest.param(
            "profiles:\n- schedulerName: ''\n",
            ["profiles[0].schedulerName: String should have at least 1 character"],
            id="empty-name",
        ),
        pytest.param(
            "queue: {podInitialBackoffSeconds: soon}\n",
            ["queue.podInitialBackoffSeconds: Input should be a valid number, unable to parse string as a number"],
            id="not-a-number",
        ),
        pytest.param(
            "queue: {maxUnschedulableSeconds: 0}\n",
            ["queue.maxUnschedulableSeconds: Input should be greater than 0"],
            id="zero-flush",
        ),
        pytest.param(
            "queue: {podInitialBackoffSeconds: 5, podMaxBackoffSeconds: 2}\n",
            ["queue.podMaxBackoffSeconds (2) must be >= podInitialBackoffSeconds (5)"],
            id="max-below-initial",
        ),
        pytest.param(
            "queue: {podInitialBackoffSeconds: 0.5, podMaxBackoffSeconds: 0.25}\n",
            ["queue.podMaxBackoffSeconds (0.25) must be >= podInitialBackoffSeconds (0.5)"],
            id="max-below-initial-fractions",
        ),
        pytest.param(
            "clientConnection: {burst: 0}\n",
            ["clientConnection.burst: Input should be greater than or equal to 1"],
            id="burst-0",
        ),
        pytest.param(
            "profiles:\n- plugins: {score: {enabled: [{weight: 2}]}}\n",
            ["profiles[0].plugins.score.enabled[0].name: Field required"],
            id="no-name",
        ),
        pytest.param(
            "profiles:\n- schedulerName: a\n- schedulerName: b\n- schedulerName: a\n",
            ["profiles[2].schedulerName: duplicate value 'a' (already the schedulerName of profiles[0])"],
            id="duplicate-name",
        ),
        pytest.param(
            "profiles:\n- {}\n- schedulerName: troupe-scheduler\n",  # the default name counts
            [
                f"profiles[1].schedulerName: duplicate value '{DEFAULT_SCHEDULER_NAME}' "
                "(already the schedulerName of profiles[0])"
            ],
            id="duplicate-default-name",
        ),
        pytest.param(
            "profiles:\n- schedulerName: a\n- pluginConfig: [{name: NodeAffinity}, {name: EchoArgs}, {name: NodeAffinity}]\n",
            [
                "profiles[1].pluginConfig[2].name: repeated config for plugin 'NodeAffinity' "
                "(already configured by profiles[1].pluginConfig[0])"
            ],
            id="repeated-plugin-config",
        ),
        pytest.param(
            "groupSources: [native, kueue]\nprofiles:\n- {}\n- schedulerName: volcano\n",
            [
                "profiles[1].schedulerName: 'volcano' is the schedulerName operators set on pods whose PodGroups "
                "the group source 'volcano' reads, but groupSources leaves it out: this profile would place those "
                "pods one at a time, not as gangs; add 'volcano' to groupSources or remove this profile"
            ],
            id="operator-profile-source-off",
        ),
        pytest.param(
            "groupSources: []\nprofiles:\n- schedulerName: scheduler-plugins-scheduler\n",
            [
                "profiles[0].schedulerName: 'scheduler-plugins-scheduler' is the schedulerName operators set on "
                "pods whose PodGroups the group source 'scheduler-plugins' reads, but groupSources leaves it out: "
                "this profile would place those pods one at a time, not as gangs; add 'scheduler-plugins' to "
                "groupSources or remove this profile"
            ],
            id="operator-profile-no-sources",
        ),
        pytest.param(
            "apiVersion: v1\n",
            ["apiVersion: unsupported value 'v1'; allowed: 'scheduling.troupe.dev/v1alpha1'"],
            id="apiversion",
        ),
        pytest.param(
            "kind: KubeSchedulerConfiguration\n",
            ["kind: unsupported value 'KubeSchedulerConfiguration'; allowed: 'SchedulerConfiguration'"],
            id="kind",
        ),
    ],
)
def test_bad_values_name_the_field(tmp_path: Path, body: str, lines: list[str]) -> None:
    """Every problem of the file, one line each, `location: message` from the file's top."""
    # The cases that test a header line replace it.
    header = "".join(line for line in HEADER.splitlines(keepends=True) if not body.startswith(line.split(":")[0] + ":"))
    path = write(tmp_path, header + body, "bad.yaml")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == f"{path}: invalid configuration:\n" + "\n".join(f"  {line}" for line in lines)


def test_all_problems_are_reported_at_once(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
apiVersion: scheduling.troupe.dev/v1
kind: SchedulerConfiguration
profiles:
- schedulerNmae: x
  plugins: {score: {enabled: [{name: NodeAffinity, weight: 0}]}}
queue: {podMaxBackoffSeconds: 0}
""",
        "bad.yaml",
    )
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).splitlines() == [
        f"{path}: invalid configuration:",
        "  apiVersion: unsupported value 'scheduling.troupe.dev/v1'; allowed: 'scheduling.troupe.dev/v1alpha1'",
        "  profiles[0].plugins.score.enabled[0].weight: Input should be greater than or equal to 1",
        f"  profiles[0].schedulerNmae: unknown field (did you mean schedulerName?); allowed: {PROFILE_KEYS}",
        "  queue.podMaxBackoffSeconds: Input should be greater than 0",
    ]


def test_yaml_errors_name_the_file_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, HEADER + "profiles:\n- schedulerName: a\n  plugins: {score: }\n   x: 1\n", "bad.yaml")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert message.startswith(f"{path}: not valid YAML:\n  ")
    assert f'  in "{path}", line 6, column 4' in message.splitlines()[-1]
    assert all(line.startswith("  ") for line in message.splitlines()[1:])


def test_a_top_level_list_is_not_a_configuration(tmp_path: Path) -> None:
    path = write(tmp_path, "- profiles: []\n", "list.yaml")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == f"{path}: expected a mapping (a SchedulerConfiguration), got list"


def test_bad_plugin_args_are_profile_errors(tmp_path: Path) -> None:
    # A Framework built from a profile checks the args too, located from the profile.
    with pytest.raises(ProfileError) as err:
        only(
            tmp_path, "profiles:\n- pluginConfig: [{name: NodeResourcesFit, args: {scoringStrategy: {type: Bogus}}}]\n"
        )
    assert str(err.value) == (
        "profile troupe-scheduler: pluginConfig[0].args.scoringStrategy.type: unsupported value 'Bogus'; "
        "allowed: 'LeastAllocated', 'MostAllocated', 'RequestedToCapacityRatio'"
    )


def test_repeated_plugin_config_is_an_error(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        HEADER + "profiles:\n- pluginConfig: [{name: EchoArgs, args: {a: 1}}, {name: EchoArgs, args: {a: 2}}]\n",
    )
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == (
        f"{path}: invalid configuration:\n"
        "  profiles[0].pluginConfig[1].name: repeated config for plugin 'EchoArgs' (already configured by profiles[0].pluginConfig[0])"
    )


def test_plugin_config_of_an_unknown_plugin_is_an_error(tmp_path: Path) -> None:
    # A typo in pluginConfig[].name would otherwise leave the plugin at its defaults, silently.
    path = write(
        tmp_path,
        HEADER
        + """
profiles:
- schedulerName: a
- schedulerName: b
  pluginConfig: [{name: EchoArgs}, {name: NodeResourceFit, args: {}}]
""",
    )
    reg = registry()
    known = ", ".join(reg.names())
    with pytest.raises(ConfigError) as err:
        load_config(path, plugin_args=reg.args_models())
    assert str(err.value) == (
        f"{path}: invalid configuration:\n  profiles[1].pluginConfig[1].name: unknown plugin 'NodeResourceFit' (known: {known})"
    )
    # Without the models, the file loads; its Framework refuses the entry.
    config = load_config(path)
    with pytest.raises(ProfileError) as perr:
        check_config(config, reg)
    assert str(perr.value) == f"profile b: pluginConfig[1].name: unknown plugin 'NodeResourceFit' (known: {known})"
    check_config(config.model_copy(update={"profiles": config.profiles[:1]}), reg)  # the rest is fine


# ------------------------------------------- plugin args, from the file's top


def load_with_args(tmp_path: Path, body: str) -> SchedulerConfiguration:
    return load_config(write(tmp_path, HEADER + body, "args.yaml"), plugin_args=registry().args_models())


def problems(tmp_path: Path, body: str) -> list[str]:
    """load_config's lines for a file, with the registry's args models."""
    with pytest.raises(ConfigError) as err:
        load_with_args(tmp_path, body)
    head, *lines = str(err.value).splitlines()
    assert head == f"{tmp_path / 'args.yaml'}: invalid configuration:"
    assert all(line.startswith("  ") for line in lines)
    return [line[2:] for line in lines]


def test_a_bad_arg_names_its_path_from_the_top(tmp_path: Path) -> None:
    assert problems(
        tmp_path,
        """
profiles:
- pluginConfig:
  - name: NodeAffinity
    args: {}
  - name: NodeResourcesFit
    args: {scoringStrategy: {type: Foo}}
""",
    ) == [
        "profiles[0].pluginConfig[1].args.scoringStrategy.type: unsupported value 'Foo'; "
        "allowed: 'LeastAllocated', 'MostAllocated', 'RequestedToCapacityRatio'",
    ]


def test_several_bad_args_are_several_lines(tmp_path: Path) -> None:
    # Every entry of every profile, with the file's other problems: all at once.
    assert problems(
        tmp_path,
        """
profiles:
- pluginConfig:
  - name: NodeResourcesFit
    args:
      ignoredResourceGroups: [example.com/aa]
      scoringStrategy:
        type: RequestedToCapacityRatio
        resources: [{name: cpu, weight: 101}]
        requestedToCapacityRatio: {shape: [{utilization: 50, score: 5}, {utilization: 40, score: 11}]}
  - name: InterPodAffinity
    args: {hardPodAffinityWeight: 101, ignorePreferredTermsOfExistingPods: "yes"}
- schedulerName: second
  pluginConfig:
  - name: PodTopologySpread
    args: {defaultingType: List, defaultConstraints: [{maxSkew: 0, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}]}
  - name: NodeName
    args: {apiVersion: kubescheduler.config.k8s.io/v1, kind: NodeNameArgs, bogus: 1}
queue: {podMaxBackoffSeconds: 0}
""",
    ) == [
        "queue.podMaxBackoffSeconds: Input should be greater than 0",
        "profiles[0].pluginConfig[0].args.ignoredResourceGroups[0]: invalid value 'example.com/aa': "
        "resource group name can't contain '/'",
        "profiles[0].pluginConfig[0].args.scoringStrategy.resources[0].weight: invalid value 101: "
        "resource weight of cpu not in valid range (0, 100]",
        "profiles[0].pluginConfig[0].args.scoringStrategy.requestedToCapacityRatio.shape[1].score: invalid value 11: "
        "not in valid range [0, 10]",
        "profiles[0].pluginConfig[1].args.hardPodAffinityWeight: invalid value 101: not in valid range [0, 100]",
        "profiles[0].pluginConfig[1].args.ignorePreferredTermsOfExistingPods: Input should be a valid boolean",
        "profiles[1].pluginConfig[0].args.defaultConstraints[0].maxSkew: invalid value 0: not in valid range (0, inf)",
        "profiles[1].pluginConfig[1].args.bogus: unknown field; no fields are allowed here",
    ]


def test_args_are_checked_beside_the_profiles_other_problems(tmp_path: Path) -> None:
    assert problems(
        tmp_path,
        """
profiles:
- schedulerNmae: a
  pluginConfig: [{name: InterPodAffinity, args: {hardPodAffinityWeight: 101}}]
- schedulerName: b
  pluginConfig: [{name: InterPodAffinity, args: {hardPodAffinityWeight: 102}}, {name: Nope, args: 5}]
""",
    ) == [
        f"profiles[0].schedulerNmae: unknown field (did you mean schedulerName?); allowed: {PROFILE_KEYS}",
        "profiles[1].pluginConfig[1].args: Input should be a valid dictionary",
        "profiles[0].pluginConfig[0].args.hardPodAffinityWeight: invalid value 101: not in valid range [0, 100]",
        "profiles[1].pluginConfig[0].args.hardPodAffinityWeight: invalid value 102: not in valid range [0, 100]",
    ]


ARGS = """
profiles:
- pluginConfig:
  - name: NodeResourcesFit
    args:
      ignoredResources: [example.com/foo]
      scoringStrategy:
        type: RequestedToCapacityRatio
        resources: [{name: cpu, weight: 3}, {name: memory}]
        requestedToCapacityRatio: {shape: [{utilization: 0, score: 0}, {utilization: 100, score: 10}]}
  - name: NodeResourcesBalancedAllocation
    args: {resources: [{name: cpu, weight: 1}, {name: memory, weight: 0}]}
  - name: InterPodAffinity
    args: {hardPodAffinityWeight: 5, ignorePreferredTermsOfExistingPods: true}
  - name: PodTopologySpread
    args:
      defaultingType: List
      defaultConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: ScheduleAnyway}]
  - name: NodeAffinity
    args:
      addedAffinity:
        preferredDuringSchedulingIgnoredDuringExecution:
        - {weight: 10, preference: {matchExpressions: [{key: zone, operator: In, values: [b]}]}}
"""


def test_valid_args_round_trip_to_the_same_plugins(tmp_path: Path) -> None:
    """The args a Framework's plugins got, written back into a file (defaults
    filled in, nulls and all) and loaded again, are equal and place pods the same."""
    config = load_with_args(tmp_path, ARGS)
    fwk = Framework(config.profiles[0], registry(), Handle(make_cache()))
    names = [pc.name for pc in config.profiles[0].plugin_config]
    dumped = {
        "profiles": [
            {"pluginConfig": [{"name": n, "args": fwk.plugins[n].args.model_dump(by_alias=True)} for n in names]}
        ]
    }
    again = load_with_args(tmp_path, yaml.safe_dump(dumped))
    fwk2 = Framework(again.profiles[0], registry(), Handle(make_cache()))
    assert all(fwk2.plugins[n].args == fwk.plugins[n].args for n in names)
    fit = fwk.plugins["NodeResourcesFit"]
    assert (fit.strategy, fit.score_resources) == ("RequestedToCapacityRatio", [("cpu", 3), ("memory", 1)])  # type: ignore[attr-defined]

    nodes = [
        make_node("a", "8", "16Gi", labels={"zone": "a"}),
        make_node("b", "4", "8Gi", labels={"zone": "b"}),
        make_node("c", "8", "16Gi", labels={"zone": "c"}),
    ]
    existing = [make_pod("x", "3", "4Gi", node_name="c", phase="Running")]

    def place(profile: Any, pod: Any) -> str | None:
        cache = make_cache(nodes, existing)
        snap = cache.snapshot()
        row = schedule_pod(Framework(profile, registry(), Handle(cache)), pod, snap).row
        return None if row is None else snap.names[row]

    default = SchedulerConfiguration().profiles[0]
    for pod in (make_pod("p", "1", "1Gi"), make_pod("q", "2", "1Gi", requests={"example.com/foo": "1"})):
        want = place(config.profiles[0], pod)
        assert want is not None and want != place(default, pod)  # the args make a difference
        assert place(again.profiles[0], pod) == want


def test_a_plugin_enabled_without_its_required_args(tmp_path: Path) -> None:
    class Needy(ScorePlugin):
        class Args(PluginArgs):
            label: str

        name = "Needy"

    reg = registry()
    reg.register(Needy)
    config = load_config(
        write(tmp_path, HEADER + "profiles:\n- plugins: {score: {enabled: [{name: Needy}]}}\n"),
        plugin_args=reg.args_models(),
    )
    with pytest.raises(ProfileError) as err:
        check_config(config, reg)
    assert (
        str(err.value)
        == "profile troupe-scheduler: plugins.score: Needy has no pluginConfig entry: args.label: Field required"
    )


def test_plugins_get_their_args_model_not_a_mapping() -> None:
    from scheduler.plugins.interpodaffinity import InterPodAffinity

    with pytest.raises(TypeError, match=r"^InterPodAffinity: args must be a InterPodAffinityArgs, got dict$"):
        InterPodAffinity({"hardPodAffinityWeight": 2}, Handle(make_cache()))  # type: ignore[arg-type]


def test_check_config_builds_every_profile(tmp_path: Path) -> None:
    config = load_config(
        write(
            tmp_path,
            HEADER
            + """
profiles:
- schedulerName: a
- schedulerName: b
  plugins: {score: {enabled: [{name: Nope}]}}
""",
        )
    )
    with pytest.raises(ProfileError, match=r"^profile b: plugins\.score: unknown plugin 'Nope'"):
        check_config(config, registry())


# ------------------------------------------------ bad files, through the CLI

BAD_FILES: dict[str, tuple[str | None, list[str]]] = {
    # name: (file content, None = the file does not exist; regexes the stderr must match)
    "apiversion": (
        "apiVersion: scheduling.troupe.dev/v1\nkind: SchedulerConfiguration\n",
        [
            r"\Atroupe: apiversion\.yaml: invalid configuration:\n"
            r"  apiVersion: unsupported value 'scheduling\.troupe\.dev/v1'; allowed: 'scheduling\.troupe\.dev/v1alpha1'\n\Z",
        ],
    ),
    "kind": (
        "apiVersion: scheduling.troupe.dev/v1alpha1\nkind: KubeSchedulerConfiguration\n",
        [
            r"\Atroupe: kind\.yaml: invalid configuration:\n"
            r"  kind: unsupported value 'KubeSchedulerConfiguration'; allowed: 'SchedulerConfiguration'\n\Z",
        ],
    ),
    "typo": (
        HEADER + "profiles:\n- schedulerNmae: troupe-scheduler\n",
        [
            r"\Atroupe: typo\.yaml: invalid configuration:\n"
            r"  profiles\[0\]\.schedulerNmae: unknown field \(did you mean schedulerName\?\); "
            r"allowed: schedulerName, percentageOfNodesToScore, plugins, pluginConfig, podGroupScheduling, autoscaling\n\Z",
        ],
    ),
    "extension-point-typo": (
        HEADER + "profiles:\n- plugins: {scoer: {enabled: [{name: NodeAffinity}]}}\n",
        [
            r"^  profiles\[0\]\.plugins\.scoer: unknown field \(did you mean score\?\); allowed: preEnqueue, preFilter, "
            r"filter, postFilter, score, reserve, permit, preBind, placementGenerate, placementScore$",
        ],
    ),
    "negative-backoff": (
        HEADER + "queue: {podInitialBackoffSeconds: -1}\n",
        [
            r"^troupe: negative-backoff\.yaml: invalid configuration:$",
            r"^  queue\.podInitialBackoffSeconds: Input should be greater than 0$",
        ],
    ),
    "max-below-initial": (
        HEADER + "queue: {podInitialBackoffSeconds: 5, podMaxBackoffSeconds: 2}\n",
        [
            r"^troupe: max-below-initial\.yaml: invalid configuration:$",
            r"^  queue\.podMaxBackoffSeconds \(2\) must be >= podInitialBackoffSeconds \(5\)$",
        ],
    ),
    "duplicate-name": (
        HEADER + "profiles:\n- schedulerName: alpha\n- schedulerName: beta\n- schedulerName: alpha\n",
        [
            r"^troupe: duplicate-name\.yaml: invalid configuration:$",
            r"^  profiles\[2\]\.schedulerName: duplicate value 'alpha' \(already the schedulerName of profiles\[0\]\)$",
        ],
    ),
    "operator-profile-source-off": (
        HEADER + "groupSources: [native, kueue]\nprofiles:\n- schedulerName: troupe-scheduler\n"
        "- schedulerName: scheduler-plugins-scheduler\n",
        [
            r"\Atroupe: operator-profile-source-off\.yaml: invalid configuration:\n"
            r"  profiles\[1\]\.schedulerName: 'scheduler-plugins-scheduler' is the schedulerName operators set on "
            r"pods whose PodGroups the group source 'scheduler-plugins' reads, but groupSources leaves it out: .*; "
            r"add 'scheduler-plugins' to groupSources or remove this profile\n\Z",
        ],
    ),
    "repeated-plugin-config": (
        HEADER + "profiles:\n- pluginConfig: [{name: NodeAffinity}, {name: NodeAffinity}]\n",
        [
            r"^  profiles\[0\]\.pluginConfig\[1\]\.name: repeated config for plugin 'NodeAffinity' "
            r"\(already configured by profiles\[0\]\.pluginConfig\[0\]\)$",
        ],
    ),
    "unknown-plugin": (
        HEADER + "profiles:\n- plugins: {score: {enabled: [{name: NodeResourceFit}]}}\n",
        [
            r"\Atroupe: unknown-plugin\.yaml: profile troupe-scheduler: plugins\.score: unknown plugin 'NodeResourceFit' "
            r"\(known: (?P<known>.*)\)\n\Z",
        ],
    ),
    "unknown-plugin-config": (
        HEADER + "profiles:\n- schedulerName: a\n- pluginConfig: [{name: NodeResourceFit, args: {}}]\n",
        [
            r"\Atroupe: unknown-plugin-config\.yaml: invalid configuration:\n  profiles\[1\]\.pluginConfig\[0\]\.name: "
            r"unknown plugin 'NodeResourceFit' \(known: (?P<known>.*)\)\n\Z",
        ],
    ),
    "filter-only-at-score": (
        HEADER + "profiles:\n- plugins: {score: {enabled: [{name: NodeUnschedulable}]}}\n",
        [
            r"\Atroupe: filter-only-at-score\.yaml: profile troupe-scheduler: plugin NodeUnschedulable does not implement score\n\Z",
        ],
    ),
    "bad-plugin-args": (
        HEADER + "profiles:\n- pluginConfig: [{name: NodeResourcesFit, args: {scoringStrategy: {type: Bogus}}}]\n",
        [
            r"\Atroupe: bad-plugin-args\.yaml: invalid configuration:\n"
            r"  profiles\[0\]\.pluginConfig\[0\]\.args\.scoringStrategy\.type: unsupported value 'Bogus'; "
            r"allowed: 'LeastAllocated', 'MostAllocated', 'RequestedToCapacityRatio'\n\Z",
        ],
    ),
    "bad-plugin-args-and-more": (
        HEADER + "profiles:\n- pluginConfig: [{name: NodeAffinity}, {name: NodeResourcesFit, "
        "args: {ignoredResources: [a/b/c], scoringStrategy: {resources: [{name: cpu, weight: 0.5}]}}}]\n"
        "  plugins: {score: {enabled: [{name: NodeResourcesFit, weight: 0}]}}\n",
        [
            r"\Atroupe: bad-plugin-args-and-more\.yaml: invalid configuration:\n"
            r"  profiles\[0\]\.plugins\.score\.enabled\[0\]\.weight: Input should be greater than or equal to 1\n"
            r"  profiles\[0\]\.pluginConfig\[1\]\.args\.ignoredResources\[0\]: invalid value 'a/b/c': a valid label key .*\n"
            r"  profiles\[0\]\.pluginConfig\[1\]\.args\.scoringStrategy\.resources\[0\]\.weight: Input should be a valid integer\n\Z",
        ],
    ),
    "invalid-yaml": (
        HEADER + "profiles: [\n",
        [
            r"\Atroupe: invalid-yaml\.yaml: not valid YAML:\n",
            r"^    in \"invalid-yaml\.yaml\", line 4, column 1\n\Z",
        ],
    ),
    "missing": (None, [r"\Atroupe: missing\.yaml: cannot read: No such file or directory\n\Z"]),
    # The control: a good file gets past the configuration and fails on the kubeconfig.
    "good": (
        HEADER + "profiles:\n- schedulerName: alpha\n- schedulerName: beta\n",
        [
            r"^troupe: --kubeconfig /nonexistent: no such file$",
        ],
    ),
}
# The runtime's modules: a bad configuration is reported before they are imported.
RUNTIME_MODULES = ("kopf", "kubernetes_asyncio", "scheduler.runtime.app", "scheduler.runtime.kube")


# Run as `python -m` runs a module, several times in one interpreter: the
# CLI's imports (kopf, kubernetes_asyncio: ~1 s) are paid once, not per case.
DRIVER = r"""
import contextlib, io, json, logging, runpy, sys
results = {}
runtime = json.loads(sys.argv[2])
for name in json.loads(sys.argv[1]):
    args = ["run", "--config", name + ".yaml", "--kubeconfig", "/nonexistent"]
    sys.argv = ["python -m scheduler", *args]
    out, err = io.StringIO(), io.StringIO()
    logging.root.handlers.clear()  # basicConfig binds the stream of the case that calls it
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_module("scheduler", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    imported = sorted(m for m in runtime if m in sys.modules)
    results[name] = [args, code, out.getvalue(), err.getvalue(), imported]
print(json.dumps(results))
"""
# These also run as separate `python -m scheduler run ...` processes.
SEPARATE = ("typo", "good")


@pytest.fixture(scope="module")
def cli_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, subprocess.CompletedProcess[str]]:
    where = tmp_path_factory.mktemp("cli")
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("KUBECONFIG", None)
    for name, (content, _) in BAD_FILES.items():
        if content is not None:
            (where / f"{name}.yaml").write_text(content)

    def start(cmd: list[str]) -> subprocess.Popen[str]:
        return subprocess.Popen(cmd, cwd=where, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    # All started at once; the good file last, as it imports the runtime.
    driver = start(
        [
            sys.executable,
            "-c",
            DRIVER,
            json.dumps(sorted(BAD_FILES, key=lambda n: n == "good")),
            json.dumps(RUNTIME_MODULES),
        ]
    )
    separate = {
        name: start(
            [sys.executable, "-m", "scheduler", "run", "--config", f"{name}.yaml", "--kubeconfig", "/nonexistent"]
        )
        for name in SEPARATE
    }
    out, err = driver.communicate(timeout=120)
    assert driver.returncode == 0, err
    results = {}
    for name, (a, c, o, e, imported) in json.loads(out).items():
        results[name] = subprocess.CompletedProcess(a, c, o, e)
        results[name].runtime_imported = imported  # type: ignore[attr-defined]
    for name, proc in separate.items():
        o, e = proc.communicate(timeout=120)
        results[f"{name} (own process)"] = subprocess.CompletedProcess(proc.args, proc.returncode, o, e)
    return results


def test_own_process_and_in_driver_runs_agree(cli_results: dict[str, subprocess.CompletedProcess[str]]) -> None:
    for name in SEPARATE:
        own, driven = cli_results[f"{name} (own process)"], cli_results[name]
        assert (own.returncode, own.stdout, own.stderr) == (driven.returncode, driven.stdout, driven.stderr)


@pytest.mark.parametrize("case", [c for c in BAD_FILES if c != "good"] + ["typo (own process)"])
def test_bad_file_exits_2_before_connecting(
    cli_results: dict[str, subprocess.CompletedProcess[str]], case: str
) -> None:
    proc = cli_results[case]
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert "kubeconfig" not in proc.stderr  # it never got as far as the credentials
    if case in BAD_FILES:  # in the driver: the runtime was not even imported (a bad file exits at once)
        assert proc.runtime_imported == []  # type: ignore[attr-defined]
    for pattern in BAD_FILES[case.split(" ")[0]][1]:
        match = re.search(pattern, proc.stderr, re.M)
        assert match, f"{pattern!r} not in:\n{proc.stderr}"
        if "known" in match.groupdict():
            # The message lists every plugin the CLI could have used.
            reg = in_tree_registry()
            reg.load_entry_points()
            assert match["known"].split(", ") == reg.names()


@pytest.mark.parametrize("case", ["good", "good (own process)"])
def test_a_good_file_gets_as_far_as_the_kubeconfig(
    cli_results: dict[str, subprocess.CompletedProcess[str]], case: str
) -> None:
    proc = cli_results[case]
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", "troupe: --kubeconfig /nonexistent: no such file\n")
    if case == "good":  # the control for the check above
        assert proc.runtime_imported == list(RUNTIME_MODULES)  # type: ignore[attr-defined]


def test_leader_election_durations_are_upstreams_and_ordered() -> None:
    from scheduler.api.config import SchedulerConfiguration

    c = SchedulerConfiguration.model_validate(
        {
            "leaderElection": {
                "leaderElect": True,
                "leaseDuration": "1m30s",
                "renewDeadline": "500ms",
                "retryPeriod": 0.1,
            }
        }
    )
    le = c.leader_election
    assert (le.leader_elect, le.lease_duration, le.renew_deadline, le.retry_period) == (True, 90.0, 0.5, 0.1)
    assert (le.resource_namespace, le.resource_name) == ("troupe-system", "troupe-scheduler")
    for bad, where in (
        ({"renewDeadline": "15s"}, "renewDeadline (15s) must be < leaseDuration (15s)"),
        ({"retryPeriod": "10s"}, "retryPeriod (10s) must be < renewDeadline (10s)"),
        ({"leaseDuration": "15 seconds"}, "not a duration"),
    ):
        with pytest.raises(ValueError, match=re.escape(where)):
            SchedulerConfiguration.model_validate({"leaderElection": bad})
