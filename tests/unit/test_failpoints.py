"""scheduler/runtime/failpoints.py: TROUPE_FAILPOINTS parsing, pass counting, and
a real process SIGKILLing itself at the armed pass."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler.runtime import failpoints

ROOT = Path(__file__).resolve().parents[2]
KNOWN = "cycle-decided, bind-start, bind-done, status-write, bind-500, bind-lost, pod-condition-late"


# -------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    "spec, armed",
    [
        ("", {}),
        ("bind-done=3", {"bind-done": 3}),
        ("bind-done=3,cycle-decided=1", {"bind-done": 3, "cycle-decided": 1}),
        ("status-write", {"status-write": 1}),  # no count: the first pass
        ("bind-start=", {"bind-start": 1}),
        (" bind-done=2 , , status-write=4 ", {"bind-done": 2, "status-write": 4}),
        ("bind-done=1,bind-done=5", {"bind-done": 5}),  # the last one wins
    ],
)
def test_parse(spec, armed):
    assert failpoints._parse(spec) == armed


@pytest.mark.parametrize(
    "spec, message",
    [
        ("nope=1", f"TROUPE_FAILPOINTS: unknown point 'nope' (known: {KNOWN})"),
        ("bind_done=1", f"TROUPE_FAILPOINTS: unknown point 'bind_done' (known: {KNOWN})"),
        ("=2", f"TROUPE_FAILPOINTS: unknown point '' (known: {KNOWN})"),
        ("bind-done=1,Bind-Start=2", f"TROUPE_FAILPOINTS: unknown point 'Bind-Start' (known: {KNOWN})"),
        ("bind-done=x", "TROUPE_FAILPOINTS: 'bind-done=x': the count after '=' must be an integer"),
        ("bind-done=1.5", "TROUPE_FAILPOINTS: 'bind-done=1.5': the count after '=' must be an integer"),
    ],
)
def test_parse_errors_name_the_problem(spec, message):
    with pytest.raises(ValueError) as err:
        failpoints._parse(spec)
    assert str(err.value) == message


@pytest.mark.parametrize("spec", ["bind-done=0", "bind-done=-2"])
def test_parse_refuses_a_count_below_one(spec):
    with pytest.raises(ValueError) as err:
        failpoints._parse(spec)
    assert str(err.value) == f"TROUPE_FAILPOINTS: {spec!r}: the count after '=' must be at least 1"


# ------------------------------------------------------------------- counting


@pytest.fixture
def kills(monkeypatch):
    """Arm points by hand; os.kill is recorded instead of sent."""
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(failpoints, "_armed", {})
    monkeypatch.setattr(failpoints.os, "kill", lambda pid, sig: sent.append((pid, sig)))
    return sent


def test_unarmed_points_do_nothing(kills):
    for name in failpoints.POINTS:
        for _ in range(5):
            failpoints.hit(name)
    assert kills == []


def test_kills_at_the_nth_pass_of_its_own_point_only(kills, monkeypatch):
    monkeypatch.setattr(failpoints, "_armed", {"bind-done": 3})
    failpoints.hit("bind-done")
    failpoints.hit("bind-start")
    failpoints.hit("bind-done")
    failpoints.hit("cycle-decided")
    assert kills == []
    failpoints.hit("bind-done")
    assert kills == [(os.getpid(), signal.SIGKILL)]


def test_two_armed_points_count_separately(kills, monkeypatch):
    monkeypatch.setattr(failpoints, "_armed", {"bind-start": 2, "status-write": 1})
    failpoints.hit("bind-start")
    assert kills == []
    failpoints.hit("status-write")
    assert kills == [(os.getpid(), signal.SIGKILL)]


# ------------------------------------------------------------ a real process


CHILD = """
import sys
from scheduler.runtime import failpoints
for i in range(1, 6):
    print(f"pass {i}", flush=True)
    failpoints.hit(sys.argv[1])
print("survived", flush=True)
"""


def run_child(point: str, spec: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != failpoints.ENV}
    if spec is not None:
        env[failpoints.ENV] = spec
    return subprocess.run(
        [sys.executable, "-c", CHILD, point], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


def test_a_process_dies_by_sigkill_at_the_armed_pass():
    r = run_child("bind-done", "bind-done=3")
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stdout, r.stderr)
    assert r.stdout.splitlines() == ["pass 1", "pass 2", "pass 3"]
    assert "failpoint bind-done: killing the process (SIGKILL)" in r.stderr


def test_a_process_passing_other_points_survives():
    r = run_child("bind-start", "bind-done=1,status-write=1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "survived"
    r = run_child("bind-start", None)
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == "survived", r.stderr


def test_a_bad_spec_stops_the_process_at_import_with_the_message():
    r = run_child("bind-done", "bind-done=often")
    assert r.returncode == 1
    assert r.stdout == ""
    assert "TROUPE_FAILPOINTS: 'bind-done=often': the count after '=' must be an integer" in r.stderr


def test_troupe_run_with_a_bad_spec_exits_2_with_the_message():
    import os
    import subprocess
    import sys

    env = dict(os.environ, TROUPE_FAILPOINTS="bind-done=often")
    r = subprocess.run(
        [sys.executable, "-m", "scheduler", "run", "--kubeconfig", "/nonexistent"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == "troupe: TROUPE_FAILPOINTS: 'bind-done=often': the count after '=' must be an integer"
