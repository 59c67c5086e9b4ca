"""The example third-party plugin package (examples/plugin-example) through the
real entry-point mechanism, without pip-installing it: its src/ and a
generated `*.dist-info` (METADATA + entry_points.txt, built from the
package's own pyproject.toml) go on sys.path, where importlib.metadata finds
them as it finds an installed distribution."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import tomllib
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.api.config import ConfigError, load_config
from scheduler.cluster.cache import ClusterCache
from scheduler.core.scheduler import Scheduler
from scheduler.framework.framework import DEFAULT_PLUGINS, Framework, ProfileError
from scheduler.framework.interface import Handle
from scheduler.framework.registry import ENTRY_POINT_GROUP
from scheduler.plugins import in_tree_registry

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "plugin-example"
MODULE = "troupe_example_plugin"
POOL = "node.example.com/pool"
LABEL = "scheduling.troupe.dev/pod-group"


def _dist_info(site: Path) -> Path:
    """What `pip install` would leave in site-packages, minus the files."""
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]
    eps = project["entry-points"][ENTRY_POINT_GROUP]
    dist = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    (dist / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\n" + "".join(f"{name} = {target}\n" for name, target in eps.items())
    )
    return dist


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The example package "installed" on sys.path for this test only."""
    site = tmp_path / "site"
    _dist_info(site)
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    monkeypatch.syspath_prepend(str(EXAMPLE / "src"))
    monkeypatch.syspath_prepend(str(site))  # also invalidates the import caches
    yield site
    sys.modules.pop(MODULE, None)
    importlib.invalidate_caches()


def _config_file(tmp_path: Path, args: dict[str, Any] | None = None, weight: int = 5) -> Path:
    raw = {
        "apiVersion": "scheduling.troupe.dev/v1alpha1",
        "kind": "SchedulerConfiguration",
        "profiles": [
            {
                "schedulerName": "troupe-scheduler",
                "plugins": {
                    "filter": {"enabled": [{"name": "RequireNodeLabel"}]},
                    "score": {"enabled": [{"name": "PreferNodeLabel", "weight": weight}]},
                },
                "pluginConfig": [
                    {"name": "RequireNodeLabel", "args": {"label": POOL}},
                    {"name": "PreferNodeLabel", "args": args if args is not None else {"label": POOL, "value": "gpu"}},
                ],
            }
        ],
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_entry_points_of_the_package_are_found(site: Path) -> None:
    found = {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}
    assert found["PreferNodeLabel"] == "troupe_example_plugin:PreferNodeLabel"
    assert found["RequireNodeLabel"] == "troupe_example_plugin:RequireNodeLabel"

    registry = in_tree_registry()
    in_tree = set(registry.names())
    registry.load_entry_points()
    assert set(registry.names()) - in_tree == {
        "PreferNodeLabel",
        "RequireNodeLabel",
        "NominateResourceFit",
        "RackPlacement",
        "FewestNodes",
        "LicenseSeats",
    }
    cls = registry.get("PreferNodeLabel")
    assert cls is not None and cls.__module__ == MODULE
    # Loaded from the example's source, not from some installed copy.
    assert Path(sys.modules[MODULE].__file__ or "").is_relative_to(EXAMPLE / "src")


def test_without_the_entry_point_the_plugin_is_unknown(tmp_path: Path) -> None:
    config = load_config(_config_file(tmp_path))
    registry = in_tree_registry()
    with pytest.raises(ProfileError) as err:
        Framework(config.profiles[0], registry, Handle(ClusterCache()))
    known = ", ".join(registry.names())
    assert str(err.value).splitlines() == [
        f"profile troupe-scheduler: pluginConfig[0].name: unknown plugin 'RequireNodeLabel' (known: {known})",
        f"profile troupe-scheduler: pluginConfig[1].name: unknown plugin 'PreferNodeLabel' (known: {known})",
    ]
    with pytest.raises(ConfigError) as cerr:
        load_config(_config_file(tmp_path), plugin_args=registry.args_models())
    assert str(cerr.value).splitlines()[1:] == [
        f"  profiles[0].pluginConfig[0].name: unknown plugin 'RequireNodeLabel' (known: {known})",
        f"  profiles[0].pluginConfig[1].name: unknown plugin 'PreferNodeLabel' (known: {known})",
    ]


def test_a_config_file_enabling_it_builds_a_framework(site: Path, tmp_path: Path) -> None:
    config = load_config(_config_file(tmp_path))
    registry = in_tree_registry()
    registry.load_entry_points()
    fwk = Framework(config.profiles[0], registry, Handle(ClusterCache()))
    # Appended after the defaults, as upstream merges enabled plugins.
    assert [p.name for p in fwk.filters] == [n for n, _ in DEFAULT_PLUGINS["filter"]] + ["RequireNodeLabel"]
    assert [(s.plugin.name, s.weight) for s in fwk.scores] == [(n, w or 1) for n, w in DEFAULT_PLUGINS["score"]] + [
        ("PreferNodeLabel", 5)
    ]
    prefer = fwk.plugins["PreferNodeLabel"]
    assert (prefer.label, prefer.value) == (POOL, "gpu")  # type: ignore[attr-defined]
    assert fwk.plugins["RequireNodeLabel"].value is None  # type: ignore[attr-defined]


def _node(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": labels},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
    }


def _pod(name: str, group: str | None = None, node_name: str = "", cpu: str = "1") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "troupe-scheduler",
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}],
    }
    if node_name:
        spec["nodeName"] = node_name
    labels = {LABEL: group} if group else {}
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": labels}, "spec": spec}


def _placements(config_path: Path | None, load_plugins: bool) -> dict[str, str]:
    """A gang of two through the live Scheduler (no binder, no writer)."""
    registry = in_tree_registry()
    if load_plugins:
        registry.load_entry_points()
    sched = Scheduler(load_config(config_path), registry)
    sched.on_node(_node("n-free", {POOL: "cpu"}))
    sched.on_node(_node("n-gpu", {POOL: "gpu"}))
    sched.on_node(_node("n-unlabelled", {}))
    sched.on_pod(_pod("busy", node_name="n-gpu", cpu="2"))  # n-gpu is fuller: LeastAllocated prefers n-free
    sched.on_podgroup(
        {
            "metadata": {"name": "g", "namespace": "ns", "uid": "uid-g", "generation": 1},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
        }
    )
    sched.on_pod(_pod("p0", group="g"))
    sched.on_pod(_pod("p1", group="g"))
    popped = sched.queue.pop_nowait()
    assert popped is not None
    decision = sched.schedule_unit(popped)
    assert decision is not None and decision.scheduled
    assert sched.queue.pop_nowait() is None
    return {p.pod.name: p.node for p in decision.assignments}


def test_the_plugin_changes_the_placement(site: Path, tmp_path: Path) -> None:
    # Default profile: LeastAllocated spreads the gang over the two emptiest nodes.
    assert _placements(None, load_plugins=True) == {"p0": "n-free", "p1": "n-unlabelled"}
    # PreferNodeLabel (weight 5) pulls both to the gpu node; RequireNodeLabel
    # keeps them off the unlabelled one whatever the scores.
    assert _placements(_config_file(tmp_path), load_plugins=True) == {"p0": "n-gpu", "p1": "n-gpu"}
    # A value no node has: the label filter still applies, the score does not.
    other = tmp_path / "other"
    other.mkdir()
    assert _placements(_config_file(other, {"label": POOL, "value": "tpu"}), load_plugins=True) == {
        "p0": "n-free",
        "p1": "n-free",
    }


def _cli(configs: list[Path], pythonpath: list[Path]) -> list[subprocess.CompletedProcess[str]]:
    """`python -m scheduler run --config C --kubeconfig /nonexistent` for each C, all at once."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in pythonpath)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "scheduler", "run", "--config", str(c), "--kubeconfig", "/nonexistent"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for c in configs
    ]
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return done


def test_the_cli_loads_the_plugin(site: Path, tmp_path: Path) -> None:
    good = _config_file(tmp_path)
    bad_dir = tmp_path / "bad"
    bad_dir.mkdir()
    bad = _config_file(bad_dir, {"value": "gpu"})
    with_plugin = [site, EXAMPLE / "src"]
    # Accepted: the plugins are loaded, and the only complaint is the missing
    # kubeconfig (the configuration was checked before connecting).
    proc, bad_proc = _cli([good, bad], with_plugin)
    lines = proc.stderr.strip().splitlines()
    assert (proc.returncode, lines[-1]) == (2, "troupe: --kubeconfig /nonexistent: no such file")
    assert any(
        line.endswith("loaded plugin PreferNodeLabel from troupe_example_plugin:PreferNodeLabel") for line in lines
    )
    assert bad_proc.returncode == 2
    assert bad_proc.stderr.strip().splitlines()[-2:] == [
        f"troupe: {bad}: invalid configuration:",
        "  profiles[0].pluginConfig[1].args.label: Field required",
    ]


def test_the_example_package_tests_pass() -> None:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_plugin.py"],
        cwd=EXAMPLE,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    passed = re.search(r"(\d+) passed", proc.stdout)
    assert passed is not None and int(passed.group(1)) >= 10, proc.stdout
    assert "failed" not in proc.stdout and "error" not in proc.stdout.lower()
