#!/usr/bin/env python3
"""What can be checked of the troupe-scheduler image without a container builder.

1. Statically: the Dockerfile's final stage runs as USER 65532:65532 with
   ENTRYPOINT ["troupe"], and every image reference and version label in
   manifests/*.yaml (and the Dockerfile's comment) carries pyproject.toml's
   version.
2. What the Dockerfile's build stage does, outside a container: copy what it
   COPYs from the context, `pip wheel --no-deps` it, and install the wheel with
   its dependencies into a fresh venv (in a directory of its own under /tmp).
3. What the runtime stage runs: `troupe --version` as uid/gid 65532, with the
   image's environment, and a `troupe simulate` of an example (fed on standard
   input: the checkout may not be readable by that uid).

The venv's interpreter must be one uid 65532 can run, as python:3.11-slim's
/usr/local/bin/python3.11 is in the image; one under a private directory
(pyenv's in /root, mode 700) is skipped with a note.

Needs root (setpriv changes the uid) and access to the package index. Prints
each step; exit status 0 when all passed, 1 otherwise.

usage: hack/image-check.py [--keep]   (--keep: leave the temporary directory)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPOSITORY = "ghcr.io/troupe-dev/troupe-scheduler"
UID = GID = 65532
RUN_AS = ["setpriv", f"--reuid={UID}", f"--regid={GID}", "--clear-groups"]
# The runtime stage's ENV, and no more: nothing of this process's environment
# (a venv, PYTHONPATH) may leak in.
IMAGE_ENV = {"HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", "LANG": "C.UTF-8"}
EXAMPLE = ROOT / "examples" / "simulate-two-jobs.yaml"
PIP_QUIET = ["--quiet", "--disable-pip-version-check"]
_troupe_env: dict[str, str] = {}  # IMAGE_ENV and the fresh venv's PATH, once it exists


class CheckFailed(Exception):
    pass


def say(message: str) -> None:
    print(f"image-check: {message}", flush=True)


def run(
    cmd: list[str], what: str, timeout: float = 300, *, as_troupe: bool = False, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`cmd`, its output captured; CheckFailed naming `what` and the output's tail if it
    fails. as_troupe: as uid/gid 65532 from /, with the image's environment only."""
    env, cwd = (_troupe_env, "/") if as_troupe else (None, None)
    if as_troupe:
        cmd = [*RUN_AS, *cmd]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, input=stdin, env=env, cwd=cwd)
    except subprocess.TimeoutExpired as exc:
        raise CheckFailed(f"{what}: no answer within {timeout:.0f}s: {' '.join(cmd)}") from exc
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise CheckFailed(f"{what} failed (exit {done.returncode}): {' '.join(cmd)}\n{tail}")
    return done


# ------------------------------------------------------------------ static


def version() -> str:
    found = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert isinstance(found, str)
    return found


def dockerfile_stages(text: str) -> list[list[tuple[str, str]]]:
    """The Dockerfile's instructions (KEYWORD, arguments), continuation lines
    joined and comments dropped, grouped by FROM."""
    stages: list[list[tuple[str, str]]] = []
    joined = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    for line in joined.splitlines():
        if not line.strip():
            continue
        keyword, _, args = line.strip().partition(" ")
        if keyword.upper() == "FROM":
            stages.append([])
        if stages:
            stages[-1].append((keyword.upper(), args.strip()))
    return stages


def static_problems(want: str, root: Path = ROOT) -> list[str]:
    """What in root's Dockerfile and manifests/*.yaml is not in line with version `want`."""
    problems: list[str] = []
    dockerfile = (root / "Dockerfile").read_text()
    stages = dockerfile_stages(dockerfile)
    final = stages[-1] if stages else []
    users = [args for keyword, args in final if keyword == "USER"]
    if users[-1:] != [f"{UID}:{GID}"]:
        problems.append(
            f"Dockerfile: the final stage's USER is {users[-1] if users else 'unset (root)'}, not {UID}:{GID}"
        )
    entrypoints = [args for keyword, args in final if keyword == "ENTRYPOINT"]
    try:
        entrypoint = json.loads(entrypoints[-1]) if entrypoints else None
    except json.JSONDecodeError:
        entrypoint = entrypoints[-1]
    if entrypoint != ["troupe"]:
        problems.append(f'Dockerfile: the final stage\'s ENTRYPOINT is {entrypoint!r}, not ["troupe"]')
    sources = [(Path("Dockerfile"), dockerfile)] + [
        (p.relative_to(root), p.read_text()) for p in sorted((root / "manifests").glob("*.yaml"))
    ]
    images = 0
    for path, text in sources:
        for tag in re.findall(re.escape(REPOSITORY) + r":([\w.-]+)", text):
            images += path.suffix == ".yaml"
            if tag != want:
                problems.append(f"{path}: {REPOSITORY}:{tag}, but pyproject.toml's version is {want}")
        for label in re.findall(r"app\.kubernetes\.io/version:\s*\"?([\w.-]+)", text):
            if label != want:
                problems.append(f"{path}: app.kubernetes.io/version {label}, but pyproject.toml's version is {want}")
    if not images:
        problems.append(f"manifests/*.yaml: no {REPOSITORY}:<tag> image")
    return problems


# ------------------------------------------------------------------ the wheel and the venv


def runnable_python() -> tuple[str, list[str]]:
    """A Python 3.11+ with venv that uid 65532 can run, and notes on the ones skipped."""
    notes: list[str] = []
    candidates = [
        getattr(sys, "_base_executable", sys.executable),
        shutil.which("python3.11"),
        "/usr/local/bin/python3.11",
        "/usr/bin/python3.11",
        shutil.which("python3"),
    ]
    seen: set[str] = set()
    for candidate in candidates:
        if not candidate or not os.path.exists(candidate):
            continue
        real = os.path.realpath(candidate)
        if real in seen:
            continue
        seen.add(real)
        # As root and as 65532 it must be the same Python: one whose stdlib the uid
        # cannot read may still start, on another libpython found by the loader.
        probe = "import sys, venv, ensurepip; print(sys.version, sys.prefix)"
        as_root = subprocess.run([real, "-c", probe], capture_output=True, text=True, timeout=60)
        done = subprocess.run([*RUN_AS, real, "-c", probe], capture_output=True, text=True, timeout=60, cwd="/")
        if done.returncode == 0 and done.stdout == as_root.stdout and sys_version_ok(done.stdout):
            return real, notes
        if done.returncode == 0:
            why = f"runs as {done.stdout.strip()!r}, as root {as_root.stdout.strip()!r}"
        else:
            why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        notes.append(f"{real}: not usable by uid {UID} ({why})")
    raise CheckFailed(
        f"no Python 3.11+ with venv and ensurepip that uid {UID} can run; tried: "
        + "; ".join(notes or ["none found"])
        + " (on Debian: apt-get install python3.11-venv)"
    )


def sys_version_ok(probe_output: str) -> bool:
    """Python 3.11 or later, from the probe's "<sys.version> <sys.prefix>"."""
    major, minor = (int(n) for n in probe_output.split(".")[:2])
    return (major, minor) >= (3, 11)


def copy_context(dest: Path) -> list[str]:
    """What the Dockerfile's first stage COPYs from the build context, copied to `dest`."""
    copied: list[str] = []
    for keyword, args in dockerfile_stages((ROOT / "Dockerfile").read_text())[0]:
        if keyword != "COPY" or "--from" in args:
            continue
        for source in args.split()[:-1]:
            if source.startswith("--"):
                continue
            src, target = ROOT / source, dest / source.rstrip("/")
            if src.is_dir():
                shutil.copytree(src, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                shutil.copy2(src, target)
            copied.append(source)
    if not copied:
        raise CheckFailed("Dockerfile: the build stage COPYs nothing from the context")
    return copied


def check(keep: bool) -> None:
    want = version()
    problems = static_problems(want)
    if problems:
        raise CheckFailed("static checks:\n  " + "\n  ".join(problems))
    say(f'Dockerfile: USER {UID}:{GID}, ENTRYPOINT ["troupe"]; manifests name {REPOSITORY}:{want}')
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        raise CheckFailed(f"needs root and setpriv (util-linux) to run troupe as uid {UID}")

    python, notes = runnable_python()
    for note in notes:
        say(f"skipped {note}")
    work = Path(tempfile.mkdtemp(prefix="troupe-image-check-"))
    work.chmod(0o755)  # mkdtemp's 0700 would keep uid 65532 out of the venv
    try:
        started = time.monotonic()
        venv = work / "venv"
        run([python, "-m", "venv", str(venv)], "python -m venv", timeout=120)
        say(f"fresh venv {venv} ({python})")
        context, dist = work / "context", work / "dist"
        context.mkdir()
        copied = copy_context(context)
        pip = str(venv / "bin" / "pip")
        run([pip, "wheel", *PIP_QUIET, "--no-deps", "--wheel-dir", str(dist), str(context)], "pip wheel")
        wheels = sorted(dist.glob("troupe-*.whl"))
        if [w.name for w in wheels] != [f"troupe-{want}-py3-none-any.whl"]:
            raise CheckFailed(f"pip wheel made {[w.name for w in wheels]}, not troupe-{want}-py3-none-any.whl")
        say(f"built {wheels[0].name} from {' '.join(copied)} (what the Dockerfile copies)")
        run([pip, "install", *PIP_QUIET, str(wheels[0])], "pip install of the wheel and its dependencies", timeout=600)
        say(f"installed it with its dependencies ({time.monotonic() - started:.0f}s so far)")

        _troupe_env.update(IMAGE_ENV, PATH=f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin")
        ids = run(["sh", "-c", "id -u; id -g; id -G"], "id", timeout=30, as_troupe=True).stdout.split()
        if ids != [str(UID), str(GID), str(GID)]:
            raise CheckFailed(f"setpriv ran as uid, gid, groups {ids}, not {UID}, {GID}, {GID}")
        out = run(["troupe", "--version"], f"troupe --version as uid {UID}", timeout=60, as_troupe=True)
        if out.stdout.strip() != f"troupe {want}":
            raise CheckFailed(f"troupe --version as uid {UID} printed {out.stdout.strip()!r}, not 'troupe {want}'")
        say(f"as uid/gid {UID}:{GID}: troupe --version -> {out.stdout.strip()}")
        where = run(
            ["python", "-c", "import scheduler; print(scheduler.__file__)"], "import scheduler", 60, as_troupe=True
        ).stdout.strip()
        if not where.startswith(str(venv)):
            raise CheckFailed(f"troupe ran from {where}, not from the fresh venv {venv}")
        sim = run(
            ["troupe", "simulate", "-"], f"troupe simulate as uid {UID}", 120, as_troupe=True, stdin=EXAMPLE.read_text()
        )
        summary = sim.stdout.strip().splitlines()[-1] if sim.stdout.strip() else ""
        if "pending pods placed" not in summary:
            raise CheckFailed(f"troupe simulate as uid {UID} printed no summary:\n{sim.stdout}{sim.stderr}")
        say(f"as uid {UID}: troupe simulate - < {EXAMPLE.relative_to(ROOT)} -> {summary}")
        say(f"ok ({time.monotonic() - started:.0f}s)")
    finally:
        if keep:
            say(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str]) -> int:
    try:
        check(keep="--keep" in argv)
    except CheckFailed as exc:
        print(f"image-check: FAILED: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
