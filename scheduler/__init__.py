"""troupe: a gang-aware secondary scheduler for Kubernetes."""

from __future__ import annotations

import functools
from pathlib import Path

DISTRIBUTION = "troupe"
UNKNOWN_VERSION = "0+unknown"


@functools.cache
def version() -> str:
    """troupe's version: the installed distribution's, else pyproject.toml's (a
    source checkout run without `pip install`), else UNKNOWN_VERSION.

    Looked up on first call, not at import: every `scheduler.*` import runs
    this module, and the metadata scan costs milliseconds."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version(DISTRIBUTION)
    except PackageNotFoundError:
        return pyproject_version(Path(__file__).resolve().parent.parent / "pyproject.toml") or UNKNOWN_VERSION


def pyproject_version(path: Path) -> str | None:
    """`project.version` of a pyproject.toml, or None when it has none (or is missing or broken)."""
    import tomllib

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return None
    project = data.get("project")
    found = project.get("version") if isinstance(project, dict) else None
    return found if isinstance(found, str) else None


def __getattr__(name: str) -> str:
    # `scheduler.__version__`, computed on first access (see version()).
    if name == "__version__":
        return version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
