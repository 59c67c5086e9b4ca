"""manifests/monitoring/: the dashboard and the alerts use only metrics troupe
exports, parse, and say what to do; and the metrics added for them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY

# Everything /metrics serves (runtime.health: generate_latest() of the default
# registry) is registered once these are imported, as `troupe run` imports them.
import scheduler.framework.caches  # noqa: F401
import scheduler.runtime.app  # noqa: F401
import scheduler.runtime.events  # noqa: F401
import scheduler.runtime.leaderelection  # noqa: F401
from scheduler.api.records import GroupKey
from scheduler.core import metrics
from scheduler.core.group_search import Assignment
from scheduler.core.schedule_podgroup import GroupDecision, Outcome
from scheduler.queue.scheduling_queue import SchedulingQueue

from .builders import make_pod
from .conftest import FakeClock

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "manifests" / "monitoring"

# The series name(s) each family type is exposed under (prometheus_client names
# a counter family without its _total).
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "gaugehistogram": ("_bucket", "_gsum", "_gcount"),
    "summary": ("", "_sum", "_count", "_created"),
    "info": ("_info",),
    "stateset": ("",),
    "unknown": ("",),
}


def exported_series() -> set[str]:
    """Every series name troupe's /metrics can show, whether or not it has a sample yet
    (a labelled metric has none until a child is made)."""
    names: set[str] = set()
    for family in REGISTRY.collect():
        names.update(family.name + suffix for suffix in _SUFFIXES[family.type])
        names.update(sample.name for sample in family.samples)
    return names


# Aggregation operators may be followed by `by (...)` rather than their `(`.
_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset",
    "inf", "nan", "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk",
    "topk", "quantile", "limitk", "limit_ratio",
}  # fmt: skip
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"(?<![\w.:$])([a-zA-Z_:][\w:]*)(\s*\()?")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: not functions, aggregation
    operators, keywords, label names, label values, durations or numbers."""
    expr = _STRING.sub('""', expr)  # before the braces: a value may hold } or ]
    expr = re.sub(r"\{[^}]*\}", " ", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", " ", expr)  # ranges and subqueries
    expr = re.sub(r"\$\{?\w+\}?", " ", expr)  # Grafana variables
    expr = _GROUPING.sub(" ", expr)  # label names
    return {m.group(1) for m in _IDENT.finditer(expr) if m.group(2) is None and m.group(1).lower() not in _KEYWORDS}


def unknown_metrics(exprs: dict[str, str]) -> dict[str, set[str]]:
    """Where (a panel or alert) -> the names its expression uses that troupe does not export."""
    exported = exported_series()
    found = {where: metric_names(expr) - exported for where, expr in exprs.items()}
    return {where: names for where, names in found.items() if names}


def load_dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    return data


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))  # a collapsed row holds its panels
    return out


def dashboard_exprs() -> dict[str, str]:
    dash = load_dashboard()
    exprs = {
        f"panel {p['title']!r} target {t['refId']}": t["expr"]
        for p in panels(dash)
        for t in p.get("targets", [])
        if "expr" in t
    }
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            # label_values(METRIC{...}, LABEL): the LABEL is no metric.
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            match = re.fullmatch(r"label_values\((.*),\s*\w+\)", query)
            assert match, f"variable {var['name']}: unexpected query {query!r}"
            exprs[f"variable {var['name']}"] = match.group(1)
    return exprs


def load_rules() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    return data


def alerting_rules() -> list[dict[str, Any]]:
    return [rule for group in load_rules()["spec"]["groups"] for rule in group["rules"]]


# ------------------------------------------------------------------ the extractor


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("up", {"up"}),
        ('sum by (le) (rate(foo_bucket{a="b", c=~"$x"}[$__rate_interval]))', {"foo_bucket"}),
        ("histogram_quantile(0.99, sum(rate(a_bucket[5m])) by (le, queue))", {"a_bucket"}),
        ('max by (namespace, name) (leader{name="x"}) < 1 or absent(leader{name="x"})', {"leader"}),
        ("a / on (ns) group_left (version) b unless ignoring (x) c", {"a", "b", "c"}),
        ("sum without (pod) (x) > bool 1e3 and y offset 5m", {"x", "y"}),
        ('count by (version) (troupe_build_info{job=~"$job"})', {"troupe_build_info"}),
        ('z{label="a}b[c]"} + rate(q[5m:1m]) * Inf', {"z", "q"}),
        ("topk(5, foo:recorded:rate5m)", {"foo:recorded:rate5m"}),
    ],
)
def test_metric_names(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_unknown_metrics_are_caught() -> None:
    """The check can fail: an unknown name, and a known gauge under a histogram's suffix."""
    assert unknown_metrics(
        {
            "bogus": "sum(rate(troupe_no_such_metric_total[5m]))",
            "suffix": "histogram_quantile(0.9, rate(troupe_reserved_pods_bucket[5m]))",
            "fine": "rate(troupe_binding_duration_seconds_bucket[5m]) + troupe_pod_bindings_total",
        }
    ) == {"bogus": {"troupe_no_such_metric_total"}, "suffix": {"troupe_reserved_pods_bucket"}}


def test_exported_series_include_unobserved_labelled_metrics() -> None:
    exported = exported_series()
    for name in (
        "scheduler_schedule_attempts_total",
        "troupe_podgroup_wait_seconds_bucket",
        "troupe_podgroup_wait_seconds_count",
        "leader_election_master_status",
        "troupe_events_dropped_total",
        "troupe_build_info",
        "troupe_watch_relists_total",
        "troupe_api_outages_total",
    ):
        assert name in exported
    assert "troupe_events_dropped" not in exported  # a counter is exposed with _total only


# ------------------------------------------------------------------ the dashboard


def test_dashboard_uses_only_exported_metrics() -> None:
    exprs = dashboard_exprs()
    assert len(exprs) > 20
    for where, expr in exprs.items():
        assert metric_names(expr), f"{where}: no metric in {expr!r}"
    assert unknown_metrics(exprs) == {}


def test_dashboard_shows_what_the_issue_asks_for() -> None:
    used = set().union(*(metric_names(e) for e in dashboard_exprs().values()))
    assert used >= {
        "troupe_pod_bindings_total",  # throughput, bind failures
        "scheduler_schedule_attempts_total",
        "scheduler_pending_pods",
        "troupe_pending_oldest_age_seconds",
        "troupe_podgroup_wait_seconds_bucket",
        "troupe_binding_duration_seconds_bucket",
        "scheduler_preemption_attempts_total",
        "leader_election_master_status",
        "troupe_reserved_pods",
        "troupe_reservation_oldest_age_seconds",
        "troupe_events_dropped_total",
    }
    quantiles = [e for e in dashboard_exprs().values() if "troupe_podgroup_wait_seconds_bucket" in e]
    assert quantiles and all(e.startswith("histogram_quantile(") for e in quantiles)


def test_dashboard_is_well_formed() -> None:
    dash = load_dashboard()
    assert dash["uid"] == "troupe-scheduler" and dash["title"]
    all_panels = panels(dash)
    ids = [p["id"] for p in all_panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    variables = {v["name"] for v in dash["templating"]["list"]}
    assert {"datasource", "namespace", "job"} <= variables
    for p in all_panels:
        assert {"h", "w", "x", "y"} <= p["gridPos"].keys(), p["title"]
        assert p["gridPos"]["x"] + p["gridPos"]["w"] <= 24, p["title"]
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"] and p.get("description"), p["title"]
        for t in p["targets"]:
            # kube-scheduler exports scheduler_* and leader_election_master_status too.
            assert 'job=~"$job"' in t["expr"] and 'namespace=~"$namespace"' in t["expr"], (p["title"], t["expr"])


# ------------------------------------------------------------------ the alerts


def test_rules_use_only_exported_metrics() -> None:
    exprs = {f"alert {r['alert']}": r["expr"] for r in alerting_rules()}
    assert len(exprs) >= 5
    assert unknown_metrics(exprs) == {}


def test_rules_are_well_formed() -> None:
    doc = load_rules()
    assert doc["apiVersion"] == "monitoring.coreos.com/v1" and doc["kind"] == "PrometheusRule"
    assert doc["metadata"]["name"] and doc["metadata"]["namespace"] == "troupe-system"
    rules = alerting_rules()
    names = [r["alert"] for r in rules]
    assert len(names) == len(set(names))
    assert {"TroupeSchedulerDown", "TroupeNoLeader", "TroupePodGroupsWaitingLong", "TroupeBindsFailing"} <= set(names)
    assert {"TroupeEventsDropped"} <= set(names)
    for rule in rules:
        where = rule["alert"]
        assert re.fullmatch(r"\d+[smh]", str(rule.get("for", ""))), f"{where}: needs `for`"
        assert rule.get("labels", {}).get("severity") in {"critical", "warning", "info"}, where
        annotations = rule.get("annotations", {})
        assert len(annotations.get("summary", "")) > 10, f"{where}: needs a summary"
        assert len(annotations.get("description", "")) > 40, f"{where}: needs a description saying what to do"
        assert rule["expr"].count("(") == rule["expr"].count(")"), where


def test_no_leader_alert_selects_troupes_lease() -> None:
    """leader_election_master_status is kube-scheduler's name too: the alert names troupe's Lease."""
    config = yaml.safe_load((ROOT / "manifests" / "03-configmap.yaml").read_text())
    lease = yaml.safe_load(config["data"]["config.yaml"]).get("leaderElection", {}).get("resourceName", "")
    rule = next(r for r in alerting_rules() if r["alert"] == "TroupeNoLeader")
    assert f'name="{lease or "troupe-scheduler"}"' in rule["expr"]


# ------------------------------------------------------------------ scraping and packaging


def test_servicemonitor_matches_the_metrics_service() -> None:
    service = yaml.safe_load((ROOT / "manifests" / "05-service.yaml").read_text())
    monitor = yaml.safe_load((MONITORING / "servicemonitor.yaml").read_text())
    assert monitor["kind"] == "ServiceMonitor"
    assert monitor["metadata"]["namespace"] == service["metadata"]["namespace"]
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [service["metadata"]["namespace"]]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["jobLabel"] in service["metadata"]["labels"]
    ports = {p["name"] for p in service["spec"]["ports"]}
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["http-metrics"] and "http-metrics" in ports


def test_kustomization_names_existing_files() -> None:
    kustomization = yaml.safe_load((MONITORING / "kustomization.yaml").read_text())
    files = list(kustomization["resources"])
    for generator in kustomization["configMapGenerator"]:
        files += generator["files"]
        assert generator["options"]["labels"]["grafana_dashboard"] == "1"
    assert "grafana-dashboard.json" in files
    for name in files:
        assert (MONITORING / name).is_file(), name


# ------------------------------------------------------------------ the metrics added for them


def test_pending_gauges_are_read_from_the_queue_when_scraped(clock: FakeClock) -> None:
    held = GroupKey("default", "gang")
    queue = SchedulingQueue(lambda key, pods: "short of minCount" if key.group_key == held else None, clock=clock)
    queue.add(make_pod("lone-1"))  # active since 1000
    clock.advance(30)
    queue.add(make_pod("lone-2"))  # active since 1030
    queue.add(make_pod("g-0", group="gang"))  # gated since 1030
    clock.advance(10)
    metrics.observe_queue(queue, clock)

    def age(state: str) -> float | None:
        return REGISTRY.get_sample_value("troupe_pending_oldest_age_seconds", {"queue": state})

    def pending(state: str) -> float | None:
        return REGISTRY.get_sample_value("scheduler_pending_pods", {"queue": state})

    assert (age("active"), age("gated"), age("unschedulable"), age("backoff")) == (40.0, 10.0, 0.0, 0.0)
    assert (pending("active"), pending("gated")) == (2.0, 1.0)
    # No cycle reports again: a scrape still sees the time pass and the queue drain.
    clock.advance(20)
    assert age("active") == 60.0
    queue.delete("uid-default-lone-1")
    queue.delete("uid-default-lone-2")
    assert (age("active"), pending("active")) == (0.0, 0.0)


def test_pending_gauges_of_a_dropped_queue_are_gone(clock: FakeClock) -> None:
    queue = SchedulingQueue(lambda key, pods: None, clock=clock)
    queue.add(make_pod("p"))
    metrics.observe_queue(queue, clock)
    assert REGISTRY.get_sample_value("scheduler_pending_pods", {"queue": "active"}) == 1.0
    del queue  # e.g. a test's Scheduler: the weak reference does not keep it
    assert REGISTRY.get_sample_value("scheduler_pending_pods", {"queue": "active"}) is None


def test_group_wait_from_the_oldest_placed_pod() -> None:
    pods = [
        make_pod("w-0", group="g", creation_timestamp="2026-01-01T00:00:10Z"),
        make_pod("w-1", group="g", creation_timestamp="2026-01-01T00:00:00Z"),
        make_pod("w-2", group="g"),  # no creationTimestamp: not counted
    ]
    at = [Assignment(p, "node-1") for p in pods]
    start = 1767225600.0  # 2026-01-01T00:00:00Z
    assert metrics._since_oldest(at, start + 95) == 95.0
    assert metrics._since_oldest(at, start - 5) == 0.0  # the API server's clock ahead of ours
    assert metrics._since_oldest(at[2:], start) is None
    bad = [Assignment(make_pod("x", creation_timestamp="yesterday"), "node-1")]
    assert metrics._since_oldest(bad, start) is None


def test_group_wait_observed_for_placed_groups_only() -> None:
    def count() -> float:
        return REGISTRY.get_sample_value("troupe_podgroup_wait_seconds_count") or 0.0

    pod = make_pod("w-0", group="g", creation_timestamp="2026-01-01T00:00:00Z")
    before = count()
    placed = GroupDecision(GroupKey("default", "g"), Outcome.SCHEDULED, "", assignments=[Assignment(pod, "n")])
    metrics.observe_attempt(placed, 0.01)
    assert count() == before + 1
    lone = GroupDecision(None, Outcome.SCHEDULED, "", assignments=[Assignment(make_pod("p"), "n")])
    metrics.observe_attempt(lone, 0.01)
    waiting = GroupDecision(GroupKey("default", "g"), Outcome.UNSCHEDULABLE, "no room", unplaced=[(pod, "no room")])
    metrics.observe_attempt(waiting, 0.01)
    assert count() == before + 1
