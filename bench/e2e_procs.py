"""The three schedulers as child processes, one at a time, all with the admin
kubeconfig and the same client QPS/burst:

- troupe: ``python -m scheduler run --kubeconfig K --health-bind-address
  127.0.0.1:PORT --config CFG`` (optionally under ``python -m cProfile -o F``);
  ready when its /readyz answers 200 (its cache is synced).
- upstream: the built kube-scheduler v1.37.2 with ``--feature-gates=GenericWorkload=true``
  (``GenericWorkload=true,TopologyAwareWorkloadScheduling=true`` for shape t: that gate
  adds TopologyPlacementGenerator and PodGroupPodsCount to the default profile and
  switches PodGroup cycles to the placement algorithm) and a KubeSchedulerConfiguration (no leader election, the same QPS/burst);
  ready when its /readyz (which includes ``sched-handler-sync``) answers 200.
- raw: ``python -m bench.e2e_rawbind``; ready when it wrote its ready file.

Each child runs in its own session, gets SIGKILL if the benchmark dies
(PR_SET_PDEATHSIG), logs to ``<workdir>/<run>.log`` and is stopped with
SIGTERM (SIGKILL after 20 s).
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_CLK_TCK = os.sysconf("SC_CLK_TCK")

try:
    _LIBC = ctypes.CDLL(None, use_errno=True)
    _LIBC.prctl  # noqa: B018
except (OSError, AttributeError):
    _LIBC = None

_LIVE: set[Proc] = set()


@atexit.register
def _kill_all() -> None:
    for p in list(_LIVE):
        p.stop(grace=2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of a live process (not its children)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLK_TCK
    except (OSError, IndexError, ValueError):
        return None


def system_cpu_seconds() -> float | None:
    """CPU time used by everything on the machine so far (/proc/stat: all but idle and iowait)."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
        return (user + nice + system + irq + softirq + steal) / _CLK_TCK
    except (OSError, IndexError, ValueError):
        return None


def _http_status(url: str, insecure: bool = False) -> int:
    ctx = None
    if url.startswith("https"):
        ctx = ssl.create_default_context()
        if insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ctx))
    try:
        with opener.open(url, timeout=2) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0


class Proc:
    def __init__(
        self,
        name: str,
        cmd: list[str],
        log_path: Path,
        ready: Callable[[], bool],
        cwd: Path = ROOT,
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.cmd = cmd
        self.log_path = log_path
        self.ready = ready
        self.cwd = cwd
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.ready_seconds = 0.0

    def start(self, timeout: float) -> Proc:
        parent = os.getpid()

        def preexec() -> None:
            if _LIBC is not None:
                _LIBC.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
                if os.getppid() != parent:
                    os._exit(1)

        with open(self.log_path, "ab") as log:
            log.write(f"### {' '.join(self.cmd)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.cmd,
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
                preexec_fn=preexec if threading.current_thread() is threading.main_thread() else None,
            )
        _LIVE.add(self)
        self.started_at = time.monotonic()
        deadline = self.started_at + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.proc.returncode} before it was ready; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            if self.ready():
                self.ready_seconds = time.monotonic() - self.started_at
                return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{self.name} not ready after {timeout:.0f}s; log {self.log_path}:\n{self.log_tail()}")

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.proc.pid, sig)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def cpu(self) -> float | None:
        return cpu_seconds(self.proc.pid) if self.alive() else None

    def stop(self, grace: float = 20.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                pass
            except ProcessLookupError:
                pass
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)
        _LIVE.discard(self)
        return self.proc.returncode

    def log_tail(self, lines: int = 40, width: int = 400) -> str:
        try:
            tail = self.log_path.read_text(errors="replace").splitlines()[-lines:]
            return "\n".join(line if len(line) <= width else line[:width] + " [...]" for line in tail)
        except OSError:
            return "(no log)"


# --------------------------------------------------------------- factories


def troupe(
    workdir: Path,
    run: str,
    kubeconfig: Path,
    qps: float,
    burst: int,
    bind_concurrency: int,
    src: Path | None = None,
    profile: Path | None = None,
) -> Proc:
    port = free_port()
    cfg = workdir / f"{run}-config.yaml"
    cfg.write_text(
        "apiVersion: scheduling.troupe.dev/v1alpha1\n"
        "kind: SchedulerConfiguration\n"
        "profiles:\n- schedulerName: troupe-scheduler\n"
        f"clientConnection: {{qps: {qps:g}, burst: {burst}, bindConcurrency: {bind_concurrency}}}\n"
    )
    prefix = [sys.executable]
    if profile is not None:
        # cProfile in two phases (bench/e2e_cprofile.py): PROFILE.startup.prof up to SIGUSR1, PROFILE.run.prof after
        prefix += ["-m", "bench.e2e_cprofile", str(profile)]
    cmd = prefix + [
        "-m",
        "scheduler",
        "run",
        "--kubeconfig",
        str(kubeconfig),
        "--health-bind-address",
        f"127.0.0.1:{port}",
        "--config",
        str(cfg),
    ]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if src is not None:  # troupe from src (the cwd, first on sys.path); bench/ from this checkout
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(src), str(ROOT), env.get("PYTHONPATH", "")) if p)
    return Proc(
        run,
        cmd,
        workdir / f"{run}.log",
        lambda: _http_status(f"http://127.0.0.1:{port}/readyz") == 200,
        cwd=src or ROOT,
        env=env,
    )


def kube_scheduler(
    workdir: Path,
    run: str,
    binary: Path,
    kubeconfig: Path,
    qps: float,
    burst: int,
    feature_gates: str = "GenericWorkload=true",
) -> Proc:
    port = free_port()
    cfg = workdir / f"{run}-config.yaml"
    cfg.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\n"
        "kind: KubeSchedulerConfiguration\n"
        "leaderElection: {leaderElect: false}\n"
        f"clientConnection: {{kubeconfig: {kubeconfig}, qps: {qps:g}, burst: {burst}}}\n"
    )
    cmd = [
        str(binary),
        f"--config={cfg}",
        f"--feature-gates={feature_gates}",
        f"--secure-port={port}",
        "--bind-address=127.0.0.1",
        # no authentication-kubeconfig: /readyz is an always-allowed path, and
        # looking up extension-apiserver-authentication only logs errors here
        "--authentication-skip-lookup=true",
    ]
    return Proc(
        run, cmd, workdir / f"{run}.log", lambda: _http_status(f"https://127.0.0.1:{port}/readyz", insecure=True) == 200
    )


def raw_binder(
    workdir: Path,
    run: str,
    kubeconfig: Path,
    ns: str,
    qps: float,
    burst: int,
    concurrency: int,
    domain_size: int = 0,
    group_status: int = 0,
    tree: bool = False,
    podgroup_api: str = "",
    composite_api: str = "",
) -> Proc:
    ready = workdir / f"{run}.ready"
    ready.unlink(missing_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "bench.e2e_rawbind",
        "--kubeconfig",
        str(kubeconfig),
        "--namespace",
        ns,
        "--qps",
        f"{qps:g}",
        "--burst",
        str(burst),
        "--concurrency",
        str(concurrency),
        "--ready-file",
        str(ready),
    ]
    if domain_size:
        cmd += ["--domain-size", str(domain_size)]
    if group_status:
        cmd += ["--group-status", str(group_status)]
    if tree:
        cmd += ["--tree"]
    if podgroup_api:
        cmd += ["--podgroup-api", podgroup_api]
    if composite_api:
        cmd += ["--composite-api", composite_api]
    return Proc(run, cmd, workdir / f"{run}.log", ready.exists, env=dict(os.environ, PYTHONUNBUFFERED="1"))
