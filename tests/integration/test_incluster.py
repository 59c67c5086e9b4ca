"""`troupe run` exactly as manifests/04-deployment.yaml runs it: two replicas
of its pod template, in-cluster credentials only, leader election from the
ConfigMap, a gang scheduled by the leader and another by the standby after the
leader is killed.

There is no kubelet or container runtime here, so the test is one, for the
parts troupe can tell apart (root; util-linux unshare, nsenter, setpriv; iproute2):

- Each replica is a pod sandbox: a "pause" process holds a network and UTS
  namespace (hostname = the pod's name). So both replicas serve the
  Deployment's containerPort as deployed, and the probes are sent to that port
  inside the pod. In each, the `kubernetes` Service's ClusterIP:port (read from
  the API server) answers, relayed to the API server as kube-proxy would, so
  troupe connects to KUBERNETES_SERVICE_HOST:PORT and checks the serving
  certificate against that IP.
- The container joins it with a PID namespace (troupe is PID 1, as with
  ENTRYPOINT ["troupe"] and no init) and a private mount namespace:
  every ConfigMap volume is a read-only tmpfs laid out as the kubelet lays it
  out (`..data` symlinks), at the Deployment's mountPath; the ServiceAccount
  volume likewise at /var/run/secrets/kubernetes.io/serviceaccount, with a
  token the API server issued for the Deployment's ServiceAccount, the CA and
  the namespace; an emptyDir is a fresh tmpfs; with readOnlyRootFilesystem,
  every other mount is read-only. Directories only root may enter (a Python
  built under /root) are masked but for the paths the interpreter needs.
- The process is the image's ENTRYPOINT with the container's args, the image's
  ENV (Dockerfile; its venv /opt/troupe is this checkout's venv, editable) and
  the container's env, plus what the kubelet adds (HOSTNAME, KUBERNETES_*), and
  nothing else: no kubeconfig, no KUBECONFIG. uid, gid and fsGroup come from
  the securityContext; no capabilities; no_new_privs.

Not emulated: seccomp, cgroup limits (memory use is compared with the limit
instead), the image's root filesystem (the host's is used, read-only).

The container side runs this file as a script (`enter-pod SPEC`), as root in
the new namespaces, before it execs setpriv and troupe.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import http.client
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import ssl
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from objects import bound, create, pod, podgroup, wait_condition
from wait import wait_for

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
# Where the kubelet mounts the ServiceAccount volume (kube-api-access-*), and
# where in-cluster clients read it.
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
IMAGE_VENV = "/opt/troupe"  # the Dockerfile's venv: this checkout's venv stands in for it
BASE_IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # python:3.11-slim's PATH
# What must not appear in a replica's log: refusals by RBAC or the filesystem, crashes, errors.
LOG_PROBLEMS = re.compile(r"forbidden|permission denied|unauthori[sz]ed|read-only file system|traceback", re.I)
LOG_LEVEL_PROBLEMS = re.compile(r"\b(ERROR|CRITICAL)\b")

T = TypeVar("T")

# --- Linux primitives (ctypes: Python 3.11 has no os.setns/os.unshare) ---------------

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
CLONE_NEWNET = 0x40000000
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC = 0x2, 0x4, 0x1000, 0x4000
SYS_MOUNT_SETATTR = 442  # the same number on every architecture (asm-generic)
AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = -100, 0x8000, 0x1
PR_SET_PDEATHSIG = 1


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64)]
    _fields_ += [("userns_fd", ctypes.c_uint64)]


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str, target: str, fstype: str | None, flags: int = 0, data: str | None = None) -> None:
    rc = _libc.mount(
        source.encode(), target.encode(), fstype.encode() if fstype else None, flags, (data or "").encode()
    )
    _check(rc, f"mount {source} on {target}")


def _read_only(path: str, on: bool = True, recursive: bool = False) -> None:
    """Set or clear the read-only flag of the mount(s) at `path`, and only that
    flag: mount_setattr(2) (a bind remount would reset nosuid, nodev, ...)."""
    attr = _MountAttr(MOUNT_ATTR_RDONLY if on else 0, 0 if on else MOUNT_ATTR_RDONLY, 0, 0)
    flags = AT_RECURSIVE if recursive else 0
    rc = _libc.syscall(
        ctypes.c_long(SYS_MOUNT_SETATTR),
        ctypes.c_int(AT_FDCWD),
        ctypes.c_char_p(path.encode()),
        ctypes.c_uint(flags),
        ctypes.byref(attr),
        ctypes.c_size_t(ctypes.sizeof(attr)),
    )
    _check(rc, f"mount_setattr {path}")


def in_netns(netns_fd: int, fn: Callable[[], T]) -> T:
    """fn() in a thread that joined the network namespace `netns_fd` (setns
    moves only the calling thread). A socket made there stays in that namespace
    whichever thread uses it later."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            _check(_libc.setns(netns_fd, CLONE_NEWNET), "setns")
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box["error"] = exc

    t = threading.Thread(target=run, name="in-netns")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


def _die_with_parent() -> None:
    """preexec_fn: SIGKILL when the test process dies (root processes only:
    a change of uid clears it, so troupe itself is killed by its group)."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


# --- the container side: run as `python test_incluster.py enter-pod SPEC` ------------


def _can_enter(path: str, uid: int, gids: set[int]) -> bool:
    st = os.stat(path)
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid in gids:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def _write_atomic_volume(path: str, files: dict[str, str], mode: int) -> None:
    """The kubelet's layout (AtomicWriter): a timestamped directory with the
    files, `..data` pointing at it, and one symlink per key."""
    stamp = time.strftime("..%Y_%m_%d_%H_%M_%S.000000001", time.gmtime())
    os.mkdir(os.path.join(path, stamp), 0o755)
    for key, text in files.items():
        f = os.path.join(path, stamp, key)
        Path(f).write_text(text)
        os.chmod(f, mode)
    os.symlink(stamp, os.path.join(path, "..data"))
    for key in files:
        os.symlink(os.path.join("..data", key), os.path.join(path, key))


def enter_pod(spec_path: str) -> None:
    """As root, in fresh mount and PID namespaces and the pod's network and
    UTS namespaces: make the container's filesystem, then exec troupe through
    setpriv as the container's user. See the module docstring."""
    spec = json.loads(Path(spec_path).read_text())
    os.umask(0o022)
    uid, gid, groups = spec["uid"], spec["gid"], spec["groups"]
    gids = {gid, *groups}
    expose = sorted({os.path.realpath(p) for p in spec["expose"]})
    fds = {p: os.open(p, os.O_PATH) for p in expose}  # before anything covers them

    def reexpose(mask: str) -> None:
        """Bind each exposed path below `mask` back in, read-only, with the
        directories above it created in the mask."""
        below = [p for p in expose if p.startswith(mask.rstrip("/") + "/")]
        for p in below:
            if any(q != p and p.startswith(q + "/") for q in below):
                continue  # inside another exposed path
            os.makedirs(p, exist_ok=True)
            _mount(f"/proc/self/fd/{fds[p]}", p, None, MS_BIND | MS_REC)
            _read_only(p, recursive=True)

    # Scratch for the overlays below (a fresh /dev/shm covers it at the end).
    _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700")
    for i, vol in enumerate(spec["volumes"]):
        target = os.path.realpath(vol["path"])  # /var/run -> /run
        if os.path.isdir(target):
            continue
        # A mount point that does not exist: overlay its deepest existing
        # ancestor (in this namespace only) so the directory can be made.
        parent = os.path.dirname(target)
        while not os.path.isdir(parent):
            parent = os.path.dirname(parent)
        assert parent != "/", f"will not overlay / for {target}"
        upper, work = f"/dev/shm/overlay-{i}/upper", f"/dev/shm/overlay-{i}/work"
        os.makedirs(upper)
        os.makedirs(work)
        _mount("overlay", parent, "overlay", 0, f"lowerdir={parent},upperdir={upper},workdir={work}")
        os.makedirs(target)
    for vol in spec["volumes"]:
        if "files" in vol:
            target = os.path.realpath(vol["path"])
            _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
            _write_atomic_volume(target, vol["files"], vol["mode"])
            if vol["readOnly"]:
                _read_only(target)
    masks: set[str] = set()
    for p in expose:
        parts = Path(p).parts
        for n in range(1, len(parts)):
            ancestor = str(Path(*parts[:n]))
            if not _can_enter(ancestor, uid, gids):
                masks.add(ancestor)
                break
    for mask in sorted(masks):
        _mount("tmpfs", mask, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
        reexpose(mask)
    if spec["readOnlyRootFilesystem"]:
        _read_only("/", recursive=True)
        _read_only("/proc", on=False)  # as a container's /proc
    _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")  # the runtime's private /dev/shm
    for vol in spec["volumes"]:
        if vol.get("emptyDir"):
            target = os.path.realpath(vol["path"])
            # emptyDir with fsGroup: group-owned by it, setgid, rwx for all.
            owner = f",gid={groups[0]}" if groups else ""
            _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={'2777' if groups else '0777'}{owner}")
            reexpose(target)  # e.g. a checkout under /tmp
    os.chdir(spec["workdir"])
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    setpriv = ["setpriv", f"--reuid={uid}", f"--regid={gid}"]
    setpriv.append("--groups=" + ",".join(map(str, groups)) if groups else "--clear-groups")
    if spec["noNewPrivs"]:
        setpriv.append("--no-new-privs")
    if spec["dropAllCapabilities"]:
        setpriv += ["--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all"]
    os.execvpe("setpriv", [*setpriv, "--", *spec["argv"]], spec["env"])


# --- the Deployment, as the kubelet would read it ------------------------------------


def manifest_objects() -> dict[tuple[str, str], dict[str, Any]]:
    """(kind, name) -> object, of every document in manifests/."""
    objs: dict[tuple[str, str], dict[str, Any]] = {}
    for f in sorted((ROOT / "manifests").glob("*.y*ml")):
        for doc in yaml.safe_load_all(f.read_text()):
            if doc:
                objs[(doc["kind"], doc["metadata"]["name"])] = doc
    return objs


def image_config() -> dict[str, Any]:
    """ENTRYPOINT, CMD, ENV, USER and WORKDIR of the Dockerfile's last stage."""
    logical: list[str] = []
    pending = ""
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.lstrip().startswith("#"):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        if (pending + line).strip():
            logical.append((pending + line).strip())
        pending = ""
    stage = logical[max(i for i, ln in enumerate(logical) if ln.upper().startswith("FROM ")) + 1 :]
    image: dict[str, Any] = {"Entrypoint": [], "Cmd": [], "Env": {}, "User": "0", "WorkingDir": "/"}
    for ln in stage:
        instr, _, rest = ln.partition(" ")
        instr = instr.upper()
        if instr == "ENV":
            for word in shlex.split(rest):
                k, _, v = word.partition("=")
                image["Env"][k] = v.replace("$PATH", image["Env"].get("PATH", BASE_IMAGE_PATH))
        elif instr in ("ENTRYPOINT", "CMD"):
            image["Entrypoint" if instr == "ENTRYPOINT" else "Cmd"] = json.loads(rest)  # exec form
        elif instr == "USER":
            image["User"] = rest.strip()
        elif instr == "WORKDIR":
            image["WorkingDir"] = rest.strip()
    return image


def pod_spec(
    objs: dict[tuple[str, str], dict[str, Any]], pod_name: str, token: str, ca: str, service: tuple[str, int]
) -> dict[str, Any]:
    """What enter_pod() makes of the Deployment's pod template for the pod `pod_name`."""
    deploy = next(o for (kind, _), o in objs.items() if kind == "Deployment")
    namespace = deploy["metadata"]["namespace"]
    pod_tpl = deploy["spec"]["template"]["spec"]
    (container,) = pod_tpl["containers"]
    image = image_config()
    psc, csc = pod_tpl.get("securityContext") or {}, container.get("securityContext") or {}
    user, _, group = image["User"].partition(":")
    uid = int(csc.get("runAsUser", psc.get("runAsUser", user)))
    gid = int(csc.get("runAsGroup", psc.get("runAsGroup", group or 0)))
    groups = ([psc["fsGroup"]] if "fsGroup" in psc else []) + list(psc.get("supplementalGroups") or [])
    assert uid != 0 or not (csc.get("runAsNonRoot") or psc.get("runAsNonRoot")), "runAsNonRoot with uid 0"

    fields = {"metadata.name": pod_name, "metadata.namespace": namespace}
    fields["spec.serviceAccountName"] = pod_tpl.get("serviceAccountName", "default")
    host, port = service
    assert f"{IMAGE_VENV}/bin" in image["Env"].get("PATH", ""), "the image's venv is not where this test expects it"
    env = {k: v.replace(IMAGE_VENV, sys.prefix) for k, v in image["Env"].items()}
    env.setdefault("PATH", BASE_IMAGE_PATH)
    env |= {
        "HOSTNAME": pod_name,
        "KUBERNETES_SERVICE_HOST": host,
        "KUBERNETES_SERVICE_PORT": str(port),
        "KUBERNETES_SERVICE_PORT_HTTPS": str(port),
        "KUBERNETES_PORT": f"tcp://{host}:{port}",
    }
    for var in container.get("env") or []:
        if "value" in var:
            env[var["name"]] = var["value"]
        else:
            env[var["name"]] = fields[var["valueFrom"]["fieldRef"]["fieldPath"]]  # KeyError: not emulated

    volumes: list[dict[str, Any]] = []
    by_name = {v["name"]: v for v in pod_tpl.get("volumes") or []}
    for mount in container.get("volumeMounts") or []:
        vol = by_name[mount["name"]]
        if "configMap" in vol:
            cm = objs[("ConfigMap", vol["configMap"]["name"])]
            assert cm["metadata"]["namespace"] == namespace
            mode = vol["configMap"].get("defaultMode", 0o644)
            volumes.append({"path": mount["mountPath"], "files": cm["data"], "mode": mode, "readOnly": True})
        elif "emptyDir" in vol:
            volumes.append({"path": mount["mountPath"], "emptyDir": True, "readOnly": mount.get("readOnly", False)})
        else:
            raise AssertionError(f"volume {vol['name']}: only configMap and emptyDir are emulated")
    if pod_tpl.get("automountServiceAccountToken", True):
        files = {"ca.crt": ca, "namespace": namespace, "token": token}
        volumes.append({"path": SA_DIR, "files": files, "mode": 0o644, "readOnly": True})

    command = container.get("command") or image["Entrypoint"]
    args = container["args"] if "args" in container else ([] if container.get("command") else image["Cmd"])
    return {
        "uid": uid,
        "gid": gid,
        "groups": groups,
        "noNewPrivs": csc.get("allowPrivilegeEscalation") is False,
        "dropAllCapabilities": "ALL" in ((csc.get("capabilities") or {}).get("drop") or []),
        "readOnlyRootFilesystem": bool(csc.get("readOnlyRootFilesystem")),
        "volumes": volumes,
        "env": env,
        "argv": [*command, *args],
        "workdir": container.get("workingDir") or image["WorkingDir"],
        # What the venv's interpreter and this editable install read.
        "expose": [str(ROOT), sys.prefix, sys.base_prefix, str(Path(os.path.realpath(sys.executable)).parents[1])],
    }


def named_port(container: dict[str, Any], port: int | str) -> int:
    if isinstance(port, int):
        return port
    return next(int(p["containerPort"]) for p in container.get("ports") or [] if p.get("name") == port)


# --- kube-proxy and the pod sandbox --------------------------------------------------


class ServiceProxy:
    """The Service's ClusterIP:port inside each pod's network namespace,
    relayed over TCP to the API server on the host's loopback (TLS end to end)."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.connections = 0
        self.loop = asyncio.new_event_loop()
        self._servers: list[asyncio.Server] = []
        self._thread = threading.Thread(target=self.loop.run_forever, name="service-proxy", daemon=True)
        self._thread.start()

    def serve_in(self, netns_fd: int, host: str, port: int) -> None:
        listener = in_netns(netns_fd, lambda: socket.create_server((host, port)))
        listener.setblocking(False)
        server = asyncio.run_coroutine_threadsafe(asyncio.start_server(self._relay, sock=listener), self.loop)
        self._servers.append(server.result(5))

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.close()
            return

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except OSError:
                pass
            finally:
                dst.close()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))

    def close(self) -> None:
        async def shutdown() -> None:
            for s in self._servers:
                s.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


class Pod:
    """One replica: a pause process holding the pod's network and UTS
    namespaces, and the container (enter_pod, then troupe) in them."""

    def __init__(self, name: str, spec: dict[str, Any], workdir: Path) -> None:
        self.name = name
        self.spec = spec
        self.log_path = workdir / f"{name}.log"
        self.spec_path = workdir / f"{name}.json"
        self.pause: subprocess.Popen[str] | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.netns = -1

    def start_sandbox(self, service: tuple[str, int], proxy: ServiceProxy) -> None:
        host, port = service
        script = 'hostname "$1" && ip link set lo up && ip addr add "$2/32" dev lo && echo ready && exec sleep infinity'
        self.pause = subprocess.Popen(
            ["unshare", "--net", "--uts", "--", "sh", "-c", script, "pause", self.name, host],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        assert self.pause.stdout is not None
        assert self.pause.stdout.readline().strip() == "ready", f"pod sandbox {self.name} did not start"
        self.netns = os.open(f"/proc/{self.pause.pid}/ns/net", os.O_RDONLY)
        proxy.serve_in(self.netns, host, port)

    def start(self, argv: list[str] | None = None) -> None:
        """The container, with the template's command (or `argv`)."""
        assert self.pause is not None
        spec = self.spec if argv is None else {**self.spec, "argv": argv}
        self.spec_path.write_text(json.dumps(spec))
        self.spec_path.chmod(0o600)  # it holds the token
        ns = f"/proc/{self.pause.pid}/ns"
        cmd = ["nsenter", f"--net={ns}/net", f"--uts={ns}/uts", "--"]
        cmd += ["unshare", "--mount-proc", "--pid", "--fork", "--propagation", "private", "--"]
        cmd += [sys.executable, str(Path(__file__).resolve()), "enter-pod", str(self.spec_path)]
        with open(self.log_path, "ab") as log:  # the container's log, as the kubelet keeps it
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd="/",
                env={"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )

    def container_pid(self) -> int:
        """The host's pid of the container's PID 1 (the child of `unshare --fork`),
        once it runs as the container's user."""

        def find() -> int | None:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited with {self.proc.returncode}:\n{self.log()}")
            children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
            if children and f"\t{self.spec['uid']}\t" in Path(f"/proc/{children[0]}/status").read_text():
                return int(children[0])
            return None

        return wait_for(find, timeout=10, message=f"{self.name}'s container runs", ignore=(OSError,))

    def get(self, port: int, path: str) -> tuple[int, str]:
        """GET http://127.0.0.1:port/path inside the pod; (0, "") if nothing answers."""
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=3)
        try:
            conn.sock = in_netns(self.netns, lambda: socket.create_connection(("127.0.0.1", port), timeout=3))
            conn.request("GET", path)
            resp = conn.getresponse()
            return resp.status, resp.read().decode(errors="replace")
        except (OSError, http.client.HTTPException):
            return 0, ""
        finally:
            conn.close()

    def answers(self, port: int, path: str) -> bool:
        """GET answers 200; AssertionError with the log if the container has exited."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited with {self.proc.returncode}:\n{self.log()}")
        return self.get(port, path)[0] == 200

    def metric(self, port: int, name: str, **labels: str) -> float | None:
        status, text = self.get(port, "/metrics")
        if status != 200:
            return None
        total = 0.0
        for m in re.finditer(rf"^{re.escape(name)}(?:\{{(.*)\}})?\s+(\S+)$", text, re.MULTILINE):
            have = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(1) or ""))
            if all(have.get(k) == v for k, v in labels.items()):
                total += float(m.group(2))
        return total

    def exec(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        """`kubectl exec`: argv in the running container's namespaces, as its user, with its env."""
        pid = self.container_pid()
        cmd = ["nsenter", f"--target={pid}", "--mount", "--uts", "--net", "--pid", "--"]
        cmd += ["setpriv", f"--reuid={self.spec['uid']}", f"--regid={self.spec['gid']}"]
        cmd += ["--groups=" + ",".join(map(str, self.spec["groups"])) if self.spec["groups"] else "--clear-groups"]
        cmd += ["--no-new-privs", "--bounding-set=-all", "--", *argv]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30, cwd="/", env=self.spec["env"])

    def kill(self) -> None:
        """SIGKILL the container (a crash or a lost node)."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(OSError):
                for child in Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split():
                    os.kill(int(child), signal.SIGKILL)  # PID 1 of the container: the rest of it goes too
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def terminate(self, grace: float = 30) -> int:
        """What the kubelet does to stop a container: SIGTERM to its PID 1; its exit status."""
        assert self.proc is not None
        os.kill(self.container_pid(), signal.SIGTERM)
        try:
            return self.proc.wait(grace)  # unshare --fork exits with its child's status
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.name} ignored SIGTERM for {grace}s:\n{self.log()}") from None

    def stop_sandbox(self) -> None:
        self.kill()
        if self.pause is not None and self.pause.poll() is None:
            self.pause.kill()
            self.pause.wait(10)
        if self.netns >= 0:
            os.close(self.netns)
            self.netns = -1

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"


@contextlib.contextmanager
def sandboxes(pods: list[Pod], service: tuple[str, int], upstream_port: int) -> Iterator[ServiceProxy]:
    proxy = ServiceProxy(upstream_port)
    try:
        for p in pods:
            p.start_sandbox(service, proxy)
        yield proxy
    finally:
        for p in pods:
            p.stop_sandbox()
        proxy.close()
        for p in pods:
            print(f"--- {p.name} (log tail) ---\n" + "\n".join(p.log().splitlines()[-40:]))


# --- the test ----------------------------------------------------------------------

WRITE_PROBE = """
import json, os, sys
writable = []
for d in sys.argv[1:]:
    try:
        fd = os.open(os.path.join(d, ".write-probe"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except OSError:
        continue
    os.close(fd)
    os.unlink(os.path.join(d, ".write-probe"))
    writable.append(d)
print(json.dumps(writable))
"""


def _status_fields(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (ln.partition(":") for ln in lines)}


def _bytes(quantity: str) -> int:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "K": 10**3, "M": 10**6, "G": 10**9}
    for suffix, factor in units.items():
        if quantity.endswith(suffix):
            return int(quantity[: -len(suffix)]) * factor
    return int(quantity)


def test_the_deployment_schedules_gangs_with_two_replicas_and_fails_over(installed, nodes, namespace, tmp_path):
    for tool in ("unshare", "nsenter", "setpriv", "ip", "hostname"):
        if not shutil.which(tool):
            pytest.fail(f"{tool} is needed to run troupe as in a pod (util-linux, iproute2)", pytrace=False)
    if os.geteuid() != 0:
        pytest.fail("running troupe as in a pod needs root (namespaces, mounts, setpriv)", pytrace=False)
    from scheduler.api.config import load_config

    c, ns = installed, namespace
    objs = manifest_objects()
    deploy = next(o for (kind, _), o in objs.items() if kind == "Deployment")
    system_ns = deploy["metadata"]["namespace"]
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    assert deploy["spec"]["replicas"] == 2

    # The Deployment's pod passes the namespace's PodSecurity level (restricted).
    pod_obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "troupe-dry-run", "namespace": system_ns}}
    pod_obj["spec"] = deploy["spec"]["template"]["spec"]
    dry = c.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(pod_obj))
    assert "Warning" not in dry.stderr, dry.stderr

    # The port the probes and the Service name is the one troupe serves with this configuration.
    port = named_port(container, container["readinessProbe"]["httpGet"]["port"])
    assert named_port(container, container["livenessProbe"]["httpGet"]["port"]) == port
    service = objs[("Service", "troupe-scheduler-metrics")]
    assert named_port(container, service["spec"]["ports"][0]["targetPort"]) == port

    # One token the API server issues for the ServiceAccount, as the kubelet asks for one.
    sa = deploy["spec"]["template"]["spec"]["serviceAccountName"]
    token = c.kubectl("create", "token", sa, "-n", system_ns, "--duration=1h").stdout.strip()
    whoami = json.loads(c.kubectl("auth", "whoami", f"--token={token}", "-o", "json").stdout)["status"]["userInfo"]
    assert whoami["username"] == f"system:serviceaccount:{system_ns}:{sa}"
    assert "authentication.kubernetes.io/credential-id" in whoami.get("extra", {}), "not a bound ServiceAccount token"

    kube_svc = c.get_json("service", "kubernetes", "-n", "default")["spec"]
    vip = (kube_svc["clusterIP"], next(int(p["port"]) for p in kube_svc["ports"] if p["name"] == "https"))
    api_port = int(c.server.rsplit(":", 1)[1])
    ca = c.ca_path.read_text()

    names = [f"{deploy['metadata']['name']}-{secrets.token_hex(5)}-{secrets.token_hex(3)[:5]}" for _ in range(2)]
    pods = [Pod(n, pod_spec(objs, n, token, ca, vip), tmp_path) for n in names]
    cfg_volume = next(v for v in pods[0].spec["volumes"] if "files" in v and v["path"] != SA_DIR)
    cfg_path = tmp_path / "config.yaml"  # the same file troupe reads, for what the code makes of it
    (cfg_key,) = cfg_volume["files"]
    cfg_path.write_text(cfg_volume["files"][cfg_key])
    config = load_config(str(cfg_path))
    assert int(config.health_bind_address.rpartition(":")[2]) == port
    election = config.leader_election
    assert election.leader_elect, "two replicas need leader election"
    assert objs[("Role", "troupe-scheduler-leader-election")]["metadata"]["namespace"] == election.resource_namespace
    scheduler_name = config.profiles[0].scheduler_name

    c.kubectl("delete", "lease", election.resource_name, "-n", election.resource_namespace, check=False)
    nodes("node-0", cpu="4")
    nodes("node-1", cpu="4")

    def holder() -> str:
        lease = c.get_json("lease", election.resource_name, "-n", election.resource_namespace)
        return str(lease["spec"].get("holderIdentity") or "")

    def leads(p: Pod) -> bool:
        return p.metric(port, "leader_election_master_status") == 1.0

    def gang(name: str) -> None:
        members = [pod(ns, f"{name}-{i}", group=name, cpu="1", scheduler=scheduler_name) for i in range(3)]
        create(c, podgroup(ns, name, 3), *members)

    with sandboxes(pods, vip, api_port) as proxy:
        # The Service IP is in the API server's certificate (checked as troupe checks it).
        ctx = ssl.create_default_context(cadata=ca)
        raw = in_netns(pods[0].netns, lambda: socket.create_connection(vip, timeout=5))
        with ctx.wrap_socket(raw, server_hostname=vip[0]):
            pass

        for p in pods:
            p.start()
        for p in pods:
            for probe in ("readinessProbe", "livenessProbe"):  # as the kubelet sends them, inside the pod
                path = container[probe]["httpGet"]["path"]
                wait_for(
                    lambda p=p, path=path: p.answers(port, path), timeout=40, message=f"{p.name} {path}", ignore=()
                )
        first = wait_for(holder, timeout=15, message="a replica holds the Lease")
        (leader,) = [p for p in pods if first.rpartition("_")[0] == p.name]
        (standby,) = [p for p in pods if p is not leader]
        wait_for(lambda: leads(leader), timeout=10, message="the Lease holder leads")
        assert standby.metric(port, "leader_election_master_status") == 0.0

        # Credentials: the token only; nothing but the emptyDir (and /dev/shm) is writable.
        for p in pods:
            assert f"API https://{vip[0]}:{vip[1]}," in p.log(), p.log()
            st = _status_fields(p.container_pid())
            assert st["Uid"].split() == [str(p.spec["uid"])] * 4 and st["Gid"].split() == [str(p.spec["gid"])] * 4
            assert st["Groups"].split() == [str(g) for g in p.spec["groups"]]
            assert int(st["CapEff"], 16) == int(st["CapBnd"], 16) == 0 and st["NoNewPrivs"] == "1"
        venv = os.path.realpath(sys.prefix)
        probe = [
            "/",
            "/etc",
            "/var",
            "/var/tmp",  # world-writable on the host: only readOnlyRootFilesystem keeps it so
            "/run",
            "/root",
            str(ROOT),
            venv,
            f"{venv}/bin",
            os.path.realpath(sys.base_prefix),
            SA_DIR,
            *[v["path"] for v in leader.spec["volumes"]],
            leader.spec["env"]["HOME"],
            "/dev/shm",
        ]
        run = leader.exec(["python", "-c", WRITE_PROBE, *probe])
        assert run.returncode == 0, run.stderr
        empty_dirs = {v["path"] for v in leader.spec["volumes"] if v.get("emptyDir")} | {"/dev/shm"}
        assert set(json.loads(run.stdout)) == {d for d in probe if d in empty_dirs}

        gang("one")
        wait_for(lambda: len(bound(c, ns)) == 3, timeout=20, message="gang one bound whole by the leader")
        wait_condition(c, ns, "one", "True", "Scheduled")
        assert leader.metric(port, "troupe_pod_bindings_total", result="bound") == 3
        assert (standby.metric(port, "troupe_pod_bindings_total", result="bound") or 0) == 0

        leader.kill()
        wait_for(
            lambda: leads(standby),
            timeout=election.lease_duration + 2 * election.retry_period + 10,
            message="the standby leads once the killed leader's lease runs out",
        )
        assert holder().rpartition("_")[0] == standby.name
        gang("two")
        wait_for(lambda: len(bound(c, ns, "two-")) == 3, timeout=20, message="gang two bound whole by the new leader")
        wait_condition(c, ns, "two", "True", "Scheduled")
        assert standby.metric(port, "troupe_pod_bindings_total", result="bound") == 3
        assert len(bound(c, ns)) == 6

        peak = _bytes(_status_fields(standby.container_pid())["VmHWM"].replace(" kB", "")) * 1024
        limit = container["resources"]["limits"]["memory"]
        assert peak < _bytes(limit), f"peak RSS {peak} B is over the Deployment's memory limit {limit}"

        # Stopped as the kubelet stops it: SIGTERM to PID 1; the Lease is handed back.
        assert standby.terminate() == 0, standby.log()
        assert f"lease {election.resource_name} released" in standby.log()
        assert holder() == ""
        assert proxy.connections > 0

    for p in pods:
        problems = [ln for ln in p.log().splitlines() if LOG_PROBLEMS.search(ln) or LOG_LEVEL_PROBLEMS.search(ln)]
        assert not problems, f"{p.name}:\n" + "\n".join(problems)


if __name__ == "__main__":
    if sys.argv[1:2] == ["enter-pod"]:
        enter_pod(sys.argv[2])
