"""The real scheduler as a subprocess (`python -m scheduler run`), with the
ServiceAccount's token identity, so the RBAC from manifests/ applies.

`env` adds environment variables for the process, e.g.
`{"TROUPE_FAILPOINTS": "bind-done=2"}` to make it SIGKILL itself at a chosen
point (scheduler/runtime/failpoints.py); TROUPE_FAILPOINTS is never inherited
from the caller's environment. A process expected to die by itself is started
with `start(wait_ready=False)` and awaited with `wait_exit()`.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FAILPOINTS_ENV = "TROUPE_FAILPOINTS"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_group(proc: subprocess.Popen, grace: float = 15.0) -> int | None:
    """SIGTERM to the process group started with `start_new_session`, then
    SIGKILL if it is still there after `grace` seconds; its exit code."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    return proc.returncode


class TroupeProcess:
    def __init__(
        self,
        kubeconfig: Path,
        workdir: Path,
        config: str | None = None,
        name: str = "troupe",
        env: dict[str, str] | None = None,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.workdir = workdir
        self.config_text = config
        self.env = dict(env or {})
        self.log_path = workdir / f"{name}.log"
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_offset = 0

    def start(self, timeout: float = 30.0, wait_ready: bool = True) -> TroupeProcess:
        """Start the process; with `wait_ready`, return once /readyz answers 200
        (RuntimeError with the log tail if it exits or is not ready in time)."""
        self.port = free_port()
        cmd = [
            sys.executable,
            "-m",
            "scheduler",
            "run",
            "--kubeconfig",
            str(self.kubeconfig),
            "--health-bind-address",
            f"127.0.0.1:{self.port}",
        ]
        if self.config_text is not None:
            cfg = self.workdir / f"{self.log_path.stem}-config.yaml"
            cfg.write_text(self.config_text)
            cmd += ["--config", str(cfg)]
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        env = {k: v for k, v in os.environ.items() if k != FAILPOINTS_ENV}
        env.update(self.env, PYTHONUNBUFFERED="1")
        with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        if not wait_ready:
            return self
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"troupe exited with {self.proc.returncode}:\n{self.log_tail()}")
            if self.get("/readyz")[0] == 200:
                return self
            time.sleep(0.1)
        raise RuntimeError(f"troupe not ready after {timeout}s:\n{self.log_tail()}")

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def wait_exit(self, timeout: float = 30.0) -> int:
        """Wait for the process to end by itself and return its exit status
        (negative: killed by that signal, -9 for SIGKILL). If it is still running
        after `timeout`, it is SIGKILLed and AssertionError (with the log tail) is raised."""
        assert self.proc is not None, "not started"
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"troupe still running after {timeout}s (killed now):\n{self.log_tail()}") from None

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError:
            return 0, ""

    def metric(self, name: str, **labels: str) -> float | None:
        """The value of one sample on /metrics (the sum over samples that carry at
        least `labels`); None if the process does not answer. A counter that was
        never incremented has no sample: 0.0."""
        status, text = self.get("/metrics")
        if status != 200:
            return None
        total = 0.0
        pattern = re.compile(rf"^{re.escape(name)}(?:\{{(.*)\}})?\s+(\S+)$")
        for line in text.splitlines():
            m = pattern.match(line)
            if not m:
                continue
            have = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(1) or ""))
            if all(have.get(k) == v for k, v in labels.items()):
                total += float(m.group(2))
        return total

    def pause(self) -> None:
        """SIGSTOP: the process is frozen (a stalled node, a long GC pause)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL: no chance to clean up (a crash)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> int | None:
        return None if self.proc is None else stop_group(self.proc)

    def log_text(self, this_run: bool = False) -> str:
        """The whole log, or (`this_run`) only what the latest start() wrote."""
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        return data[self._log_offset if this_run else 0 :].decode(errors="replace")

    def log_tail(self, lines: int = 60) -> str:
        text = self.log_text()
        return "\n".join(text.splitlines()[-lines:]) if text else "(no log)"


def supervised(proc: TroupeProcess) -> Iterator[TroupeProcess]:
    """For a pytest fixture (`yield from supervised(TroupeProcess(...))`):
    start `proc`, yield it, then stop it with SIGTERM. It must exit 0 and must
    not have logged a traceback (AssertionError); its log tail is printed."""
    proc.start()
    yield proc
    rc = proc.stop()
    print(proc.log_tail(200))
    assert rc == 0, f"troupe exited with {rc} on SIGTERM"
    assert "Traceback" not in proc.log_path.read_text(), "troupe logged a traceback"
