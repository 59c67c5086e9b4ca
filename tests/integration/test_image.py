"""`make image` and `make image-check`: no control plane needed.

`make image` builds with whichever of docker, podman and buildah can: where an
engine answers (asked by the test itself) it must build and tag the image,
where none does it must refuse with exit status 2 and say what is missing.
Fake builders on PATH check both paths on any machine. `make image-check` installs
the wheel into a fresh venv and runs `troupe --version` as uid 65532 (root
only: it uses setpriv)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
IMAGE = f"ghcr.io/troupe-dev/troupe-scheduler:{VERSION}"
BUILDERS = ("docker", "podman", "buildah")
# What hack/image.sh runs besides the builders (and bash itself).
SCRIPT_TOOLS = ("dirname", "sed", "head", "tail", "grep", "timeout")


@pytest.fixture(scope="module")
def controlplane_binaries() -> dict[str, Path]:
    """Replaces conftest's autouse check of the control-plane binaries: none is used here."""
    return {}


def image_sh(path: str, builders: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": path}
    env.pop("TROUPE_IMAGE", None)
    if builders is not None:
        env["TROUPE_IMAGE_BUILDERS"] = builders
    bash = shutil.which("bash")
    assert bash
    return subprocess.run(
        [bash, str(ROOT / "hack" / "image.sh")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def fake_builder(bin_dir: Path, name: str, body: str) -> Path:
    """A shell script `name` in bin_dir that logs its arguments and working directory to bin_dir/<name>.log."""
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text(f'#!/bin/sh\necho "$(pwd) $*" >> "{bin_dir}/{name}.log"\n{body}\n')
    path.chmod(0o755)
    return path


def only_tools(bin_dir: Path) -> str:
    """A PATH of bin_dir holding links to the script's tools, and no builder."""
    bin_dir.mkdir(exist_ok=True)
    for tool in SCRIPT_TOOLS:
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


# ------------------------------------------------------------------ make image, for real


def usable_builder(path: str) -> str | None:
    """The first of BUILDERS on `path` whose engine answers `<tool> info`, asked
    here rather than read from the script's output: what `make image` must use."""
    for tool in BUILDERS:
        found = shutil.which(tool, path=path)
        if found is None:
            continue
        try:
            if subprocess.run([found, "info"], capture_output=True, timeout=30).returncode == 0:
                return tool
        except subprocess.TimeoutExpired:
            continue
    return None


def make_image(path: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": path}
    for name in ("TROUPE_IMAGE", "TROUPE_IMAGE_BUILDERS"):
        env.pop(name, None)
    return subprocess.run(
        ["make", "--no-print-directory", "image"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800
    )


def test_make_image_does_what_this_machine_allows() -> None:
    """Where an engine answers, `make image` builds and tags the image with it;
    where none does (here: a docker client without a daemon), it refuses with
    exit status 2 and says what each builder lacks. Which case applies is
    decided by asking the builders, not by how `make image` ended."""
    path = os.environ["PATH"]
    tool = usable_builder(path)
    done = make_image(path)
    out = done.stdout + done.stderr
    if tool is not None:
        assert done.returncode == 0, out
        assert f"make image: building {IMAGE} from Dockerfile with {tool} (" in done.stdout, out
        if tool == "buildah":
            listed = subprocess.run(["buildah", "images", "--quiet", IMAGE], capture_output=True, text=True)
            assert listed.returncode == 0 and listed.stdout.strip(), out
        else:
            inspect = subprocess.run([tool, "image", "inspect", IMAGE], capture_output=True, text=True)
            assert inspect.returncode == 0, inspect.stderr
        assert f"make image: built {IMAGE} (" in done.stdout, out
        return
    # No engine answers: the script's exit status 2 (make reports it), and each builder's lack named.
    assert done.returncode == 2, out
    assert re.search(r"\[Makefile:\d+: image\] Error 2", done.stderr), out
    assert "building" not in done.stdout, out  # no builder was asked to build
    assert f"make image: cannot build {IMAGE}: no usable container builder." in done.stderr, out
    lacks = [line for line in done.stderr.splitlines() if line.startswith("  ")]
    expected = []
    for name in BUILDERS:
        found = shutil.which(name, path=path)
        if found is None:
            expected.append(f"  {name}: not installed")
        elif name == "docker":
            expected.append(f"  docker: installed ({found}), but no engine answers (docker info: ")
        else:
            expected.append(f"  {name}: installed ({found}), but cannot run ({name} info: ")
    assert len(lacks) == len(expected) and all(line.startswith(want) for line, want in zip(lacks, expected)), lacks
    assert "Start the Docker daemon" in out and "install podman or buildah" in out


def test_make_image_builds_with_an_engine_that_answers(tmp_path: Path) -> None:
    """A docker whose engine answers, first on PATH (a fake that logs its
    calls): `make image` asks it `info`, builds the repository's Dockerfile
    with the tag manifests/04-deployment.yaml names, and checks that the tag
    names an image."""
    bin_dir = tmp_path / "bin"
    fake_builder(
        bin_dir,
        "docker",
        'case "$1" in info) exit 0;; build) echo "STEP 1/2: FROM python";; image) echo "sha256:0123abcd";; esac',
    )
    path = f"{bin_dir}:{os.environ['PATH']}"
    assert usable_builder(path) == "docker"
    (bin_dir / "docker.log").unlink()  # the probe's own `info`
    done = make_image(path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (bin_dir / "docker.log").read_text().splitlines() == [
        f"{ROOT} info",
        f"{ROOT} build --tag {IMAGE} --file Dockerfile .",
        f"{ROOT} image inspect --format {{{{.Id}}}} {IMAGE}",
    ]
    assert f"make image: building {IMAGE} from Dockerfile with docker ({bin_dir}/docker)" in done.stdout
    assert f"make image: built {IMAGE} (sha256:0123abcd) in " in done.stdout


# ------------------------------------------------------------------ hack/image.sh, with fake builders


def test_docker_client_without_engine_is_refused(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    fake_builder(
        bin_dir,
        "docker",
        'if [ "$1" = info ]; then echo "Client:"; '
        'echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?" >&2; '
        "exit 1; fi; exit 99",
    )
    done = image_sh(f"{bin_dir}:{os.environ['PATH']}", builders="docker")
    assert done.returncode == 2, done.stderr
    assert (
        f"  docker: installed ({bin_dir}/docker), but no engine answers (docker info: Cannot connect to the Docker "
        "daemon at unix:///var/run/docker.sock. Is the docker daemon running?)"
    ) in done.stderr
    assert "Start the Docker daemon" in done.stderr and "install podman or buildah" in done.stderr
    assert (bin_dir / "docker.log").read_text().split("\n")[0].endswith(" info")  # never tried to build


def test_no_builder_installed(tmp_path: Path) -> None:
    done = image_sh(only_tools(tmp_path / "bin"))
    assert done.returncode == 2, done.stdout + done.stderr
    assert [line for line in done.stderr.splitlines() if line.startswith("  ")] == [
        "  docker: not installed",
        "  podman: not installed",
        "  buildah: not installed",
    ]
    assert "make image-check" in done.stderr  # what can still be checked


@pytest.mark.parametrize(("tool", "verb"), [("docker", "build"), ("podman", "build"), ("buildah", "bud")])
def test_a_working_builder_builds_and_tags(tmp_path: Path, tool: str, verb: str) -> None:
    bin_dir = tmp_path / "bin"
    inspect = 'if [ "$1" = images ]; then echo 0123abcd; fi' if tool == "buildah" else 'echo "sha256:0123abcd"'
    fake_builder(
        bin_dir, tool, f'case "$1" in info) exit 0;; {verb}) echo "STEP 1/2: FROM python";; *) {inspect};; esac'
    )
    done = image_sh(f"{bin_dir}:{only_tools(tmp_path / 'tools')}", builders=tool)
    assert done.returncode == 0, done.stdout + done.stderr
    calls = (bin_dir / f"{tool}.log").read_text().splitlines()
    assert calls[0] == f"{ROOT} info"
    assert calls[1] == f"{ROOT} {verb} --tag {IMAGE} --file Dockerfile ."
    assert f"make image: building {IMAGE} from Dockerfile with {tool}" in done.stdout
    assert "STEP 1/2" in done.stdout  # the builder's own progress shows
    assert f"make image: built {IMAGE} (" in done.stdout


def test_a_build_that_leaves_no_image_fails(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    fake_builder(bin_dir, "podman", 'case "$1" in info|build) exit 0;; *) exit 0;; esac')  # inspect prints nothing
    done = image_sh(f"{bin_dir}:{only_tools(tmp_path / 'tools')}", builders="podman")
    assert done.returncode == 1
    assert "names no image" in done.stderr


# ------------------------------------------------------------------ make image-check


def load_image_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("image_check", ROOT / "hack" / "image-check.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_static_checks_catch_root_user_and_stale_tags(tmp_path: Path) -> None:
    check = load_image_check()
    assert check.static_problems(VERSION) == []
    (tmp_path / "manifests").mkdir()
    dockerfile = (ROOT / "Dockerfile").read_text()
    (tmp_path / "Dockerfile").write_text(
        dockerfile.replace("USER 65532:65532", "USER root").replace('ENTRYPOINT ["troupe"]', 'ENTRYPOINT ["sh"]')
    )
    deployment = (ROOT / "manifests" / "04-deployment.yaml").read_text()
    (tmp_path / "manifests" / "04-deployment.yaml").write_text(deployment.replace(f":{VERSION}", ":0.0.9"))
    problems = "\n".join(check.static_problems(VERSION, tmp_path))
    assert "USER is root, not 65532:65532" in problems
    assert "ENTRYPOINT is ['sh']" in problems
    assert (
        f"manifests/04-deployment.yaml: ghcr.io/troupe-dev/troupe-scheduler:0.0.9, but pyproject.toml's version is {VERSION}"
        in problems
    )


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_make_image_check() -> None:
    """The wheel, in a fresh venv, runs `troupe --version` as uid/gid 65532 (about 25 s: pip installs the dependencies)."""
    done = subprocess.run(
        ["make", "--no-print-directory", "image-check"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert f"built troupe-{VERSION}-py3-none-any.whl" in out
    assert f"as uid/gid 65532:65532: troupe --version -> troupe {VERSION}" in out
    assert "pending pods placed" in out
    assert "image-check: ok" in out
