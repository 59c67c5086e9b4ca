"""The real scheduler as a subprocess (`python -m scheduler run`), with the
ServiceAccount's token identity, so the RBAC from manifests/ applies."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TroupeProcess:
    def __init__(self, kubeconfig: Path, workdir: Path, config: str | None = None, name: str = "troupe") -> None:
        self.kubeconfig = kubeconfig
        self.workdir = workdir
        self.config_text = config
        self.log_path = workdir / f"{name}.log"
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> "TroupeProcess":
        self.port = free_port()
        cmd = [
            sys.executable, "-m", "scheduler", "run",
            "--kubeconfig", str(self.kubeconfig),
            "--health-bind-address", f"127.0.0.1:{self.port}",
        ]
        if self.config_text is not None:
            cfg = self.workdir / f"{self.log_path.stem}-config.yaml"
            cfg.write_text(self.config_text)
            cmd += ["--config", str(cfg)]
        log = open(self.log_path, "ab")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"troupe exited with {self.proc.returncode}:\n{self.log_tail()}")
            if self.get("/readyz")[0] == 200:
                return self
            time.sleep(0.1)
        raise RuntimeError(f"troupe not ready after {timeout}s:\n{self.log_tail()}")

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError:
            return 0, ""

    def kill(self) -> None:
        """SIGKILL: no chance to clean up (a crash)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
