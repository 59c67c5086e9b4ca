"""`troupe --version`, scheduler.version() and the troupe_build_info gauge."""

from __future__ import annotations

import importlib.metadata
import platform
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

import scheduler
from scheduler import pyproject_version, version
from scheduler.cli import main

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT_VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


@pytest.fixture
def fresh_version() -> Iterator[None]:
    """version() looked up anew, and the cached value restored afterwards."""
    version.cache_clear()
    yield
    version.cache_clear()


def test_version_is_the_installed_distributions_and_pyprojects() -> None:
    assert version() == importlib.metadata.version("troupe") == PYPROJECT_VERSION
    assert scheduler.__version__ == version()


def test_module_has_no_other_lazy_attributes() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = scheduler.nope  # type: ignore[attr-defined]


def test_not_installed_falls_back_to_pyproject(monkeypatch: pytest.MonkeyPatch, fresh_version: None) -> None:
    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    assert version() == PYPROJECT_VERSION


def test_pyproject_version(tmp_path: Path) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text('[project]\nname = "x"\nversion = "9.8.7"\n')
    assert pyproject_version(path) == "9.8.7"
    path.write_text('[project]\nname = "x"\ndynamic = ["version"]\n')
    assert pyproject_version(path) is None
    path.write_text("[project\n")  # not TOML
    assert pyproject_version(path) is None
    assert pyproject_version(tmp_path / "missing.toml") is None


def test_cli_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == f"troupe {PYPROJECT_VERSION}\n"


def test_python_m_scheduler_version() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "scheduler", "--version"], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout == f"troupe {PYPROJECT_VERSION}\n"


def test_build_info_gauge() -> None:
    from scheduler.core import metrics  # noqa: F401  (registers the gauge)

    python = platform.python_version()
    assert python.startswith("3.")
    assert REGISTRY.get_sample_value("troupe_build_info", {"version": PYPROJECT_VERSION, "python": python}) == 1.0


async def test_build_info_on_the_schedulers_metrics_endpoint() -> None:
    # What `troupe run` imports and serves: runtime.app and its health server.
    from scheduler.runtime import app  # noqa: F401
    from scheduler.runtime.health import start_health_server

    runner = await start_health_server("127.0.0.1:0", lambda: True, lambda: True)
    try:
        host, port = runner.addresses[0][:2]
        async with aiohttp.ClientSession() as session, session.get(f"http://{host}:{port}/metrics") as resp:
            assert resp.status == 200
            body = await resp.text()
    finally:
        await runner.cleanup()
    samples = [s for f in text_string_to_metric_families(body) for s in f.samples if s.name == "troupe_build_info"]
    assert [(s.labels, s.value) for s in samples] == [
        ({"version": PYPROJECT_VERSION, "python": platform.python_version()}, 1.0)
    ]
