"""The binder's client side: retries, limits and what it reports, driven against a
small local HTTP server (aiohttp.web) that answers pods/binding the way the
script of each test says. This tests the client's logic (status handling,
Retry-After, the retry cap, the concurrency limit, the token bucket), not
Kubernetes behaviour; the real apiserver is in tests/integration/test_binding.py.

The Binder is given troupe's RestClient over a real kubernetes_asyncio
ApiClient pointed at the local server, as `troupe run` builds it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from aiohttp import web
from kubernetes_asyncio import client
from prometheus_client import REGISTRY

from scheduler.api.config import Profile, SchedulerConfiguration
from scheduler.api.parse import parse_pod
from scheduler.api.records import GroupKey
from scheduler.cluster.cache import ClusterCache
from scheduler.core.schedule_podgroup import Assignment
from scheduler.core.scheduler import Scheduler
from scheduler.framework.framework import Framework
from scheduler.framework.interface import CycleState, Handle, PreBindPlugin, ReservePlugin, Status
from scheduler.plugins import in_tree_registry
from scheduler.runtime.binder import MAX_RETRIES_429, Binder
from scheduler.runtime.kube import RestClient
from scheduler.runtime.ratelimit import TokenBucket

LABEL = "scheduling.troupe.dev/pod-group"

# A 409/429/500/404 answer reaches the binder as an ApiException only if someone
# raises one: kubernetes_asyncio does not for an answer it does not preload, so
# every answer once passed for a successful bind. The status tests below fail
# if RestClient's check goes missing.


# ---------------------------------------------------------------- the server


class FakeAPI:
    """Answers POST .../pods/{name}/binding from `script[name]` (a list of answers,
    the last one repeated): an int status, (status, headers), or "drop" (close the
    connection without answering). Records every request and the peak of requests
    in flight (each held `delay` seconds)."""

    def __init__(self) -> None:
        self.script: dict[str, list[Any]] = {}
        self.default: Any = 201
        self.delay = 0.0
        self.requests: list[tuple[str, float, dict[str, Any]]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.port = 0
        self._runner: web.AppRunner | None = None
        # GET pods/{name}: the node each pod is bound to ("" unbound); absent: 404.
        self.pods: dict[str, str] = {}
        self.gets: list[str] = []

    def times(self, name: str) -> list[float]:
        return [t for n, t, _ in self.requests if n == name]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        body = await request.json()
        loop = asyncio.get_running_loop()
        self.requests.append((name, loop.time(), body))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
            answers = self.script.get(name, [self.default])
            answer = answers[min(len(self.times(name)) - 1, len(answers) - 1)]
            if answer == "hang":
                await asyncio.sleep(2)  # answers only long after the client gave up
            if answer == "drop":
                assert request.transport is not None
                request.transport.close()
                return web.Response(status=500)  # never reaches the client
            status, headers = answer if isinstance(answer, tuple) else (answer, {})
            if status == 201:
                payload: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}
            else:
                payload = {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "code": status,
                    "message": f"scripted {status}",
                    "reason": "Scripted",
                }
            return web.json_response(payload, status=status, headers=headers)
        finally:
            self.in_flight -= 1

    async def _get_pod(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        self.gets.append(name)
        if name not in self.pods:
            return web.json_response({"kind": "Status", "code": 404, "reason": "NotFound"}, status=404)
        pod = {"metadata": {"name": name, "uid": f"uid-{name}"}, "spec": {"nodeName": self.pods[name]}}
        return web.json_response(pod)

    async def start(self) -> FakeAPI:
        app = web.Application()
        app.router.add_post("/api/v1/namespaces/{ns}/pods/{name}/binding", self._handle)
        app.router.add_get("/api/v1/namespaces/{ns}/pods/{name}", self._get_pod)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
async def server():
    s = await FakeAPI().start()
    yield s
    await s.stop()


@pytest.fixture
def fast_retry(monkeypatch):
    """Outage retries 50x faster (backoff 0.01 s doubling to 0.1 s)."""
    from scheduler.runtime import binder as binder_mod

    monkeypatch.setattr(binder_mod, "BIND_BACKOFF_INITIAL", 0.01)
    monkeypatch.setattr(binder_mod, "BIND_BACKOFF_MAX", 0.1)


@pytest.fixture
def no_bind_retry(monkeypatch):
    """A failure that would be retried through an outage fails at once (the old failure path)."""
    from scheduler.runtime import binder as binder_mod

    monkeypatch.setattr(binder_mod, "BIND_RETRY_SECONDS", 0.0)


@pytest.fixture
async def core(server):
    api_client = client.ApiClient(client.Configuration(host=f"http://127.0.0.1:{server.port}"))
    rest = RestClient(api_client)
    yield rest
    await rest.close()
    await api_client.close()


class Calls:
    def __init__(self) -> None:
        self.bound: list[tuple[str, str]] = []
        self.failed: list[tuple[str, str, str]] = []
        self.gone: list[str] = []
        self.elsewhere: list[tuple[str, str, str]] = []

    def on_bound(self, pod, node: str) -> None:
        self.bound.append((pod.name, node))

    def on_bind_failed(self, pod, node: str, message: str) -> None:
        self.failed.append((pod.name, node, message))

    def on_pod_gone(self, pod) -> None:
        self.gone.append(pod.name)

    def on_bound_elsewhere(self, pod, node: str, bound_to: str) -> None:
        self.elsewhere.append((pod.name, node, bound_to))


def pod_body(name: str, group: str | None = None, ns: str = "ns") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}", "labels": {LABEL: group} if group else {}},
        "spec": {
            "schedulerName": "troupe-scheduler",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
        },
    }


class Harness:
    """A Binder whose results go to `calls`."""

    def __init__(self, binder: Binder, calls: Calls) -> None:
        self.binder, self.calls = binder, calls

    def submit(self, pod, node: str) -> None:
        self.binder.submit(pod, node, self.calls)

    async def drain(self) -> None:
        await binds_done(self.binder)


async def binds_done(binder: Binder) -> None:
    """Until every submitted bind (and every PreBind, and the binds it submits)
    is done: the binder's `in_flight`, which Events wait on."""
    while binder.in_flight:
        await asyncio.sleep(0.005)


def make_binder(core, calls: Calls, concurrency: int = 4, qps: float = 1000, burst: int = 1000) -> Harness:
    return Harness(Binder(core, TokenBucket(qps, burst), concurrency), calls)


async def bind_all(binder: Harness, *names: str, node: str = "node-a", timeout: float = 20) -> None:
    for name in names:
        binder.submit(parse_pod(pod_body(name)), node)
    await asyncio.wait_for(binder.drain(), timeout)


# ------------------------------------------------------------ status handling


async def test_201_is_bound_and_the_binding_names_pod_uid_and_node(server, core):
    calls = Calls()
    await bind_all(make_binder(core, calls), "p", node="node-a")
    assert calls.bound == [("p", "node-a")] and calls.failed == []
    [(name, _, body)] = server.requests
    assert name == "p"
    assert body["metadata"] == {"name": "p", "namespace": "ns", "uid": "uid-p"}
    assert body["target"] == {"apiVersion": "v1", "kind": "Node", "name": "node-a"}


async def test_a_bind_refused_for_want_of_the_lease_is_dropped_quietly(server, core, caplog):
    """A leader that lost its lease exits to restart clean: its binds in the
    meantime are not sent, not reported as failed (no requeue, no Event),
    and no task ends with an exception nobody retrieves."""
    core.may_write = lambda: False
    calls = Calls()
    binder = make_binder(core, calls)
    with caplog.at_level(logging.WARNING):
        await binder.binder._bind(parse_pod(pod_body("p")), "node-a", calls)  # returns, does not raise
        await bind_all(binder, "q")
    assert server.requests == [] and calls.bound == [] and calls.failed == [] and calls.gone == []
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


async def test_a_bind_that_breaks_fails_its_pod_and_the_workers_go_on(server, core, monkeypatch, caplog):
    """A bug inside one bind fails that pod (unreserved and requeued by the
    core), never leaves it assumed for ever, and no worker dies of it: with
    one worker, the next pod still binds."""
    from scheduler.runtime import binder as binder_module

    real = binder_module.encode

    def encode(body):
        if body["metadata"]["name"] == "bad":
            raise RuntimeError("boom")
        return real(body)

    monkeypatch.setattr(binder_module, "encode", encode)
    calls = Calls()
    with caplog.at_level(logging.ERROR, logger="scheduler.runtime.binder"):
        await bind_all(make_binder(core, calls, concurrency=1), "bad", "good")
    assert calls.bound == [("good", "node-a")]
    assert calls.failed == [("bad", "node-a", "Binding failed: RuntimeError: boom")]
    assert "bind ns/bad: unexpected error" in caplog.text


async def test_409_bound_elsewhere_is_neither_bound_nor_failed(server, core, caplog):
    server.script["p"] = [409]
    server.pods["p"] = "node-b"  # someone else's placement: the watch brings it
    calls = Calls()
    with caplog.at_level(logging.INFO, logger="scheduler.runtime.binder"):
        await bind_all(make_binder(core, calls), "p")
    assert calls.bound == [] and calls.failed == [], "a 409 must not be reported as our binding nor as a failure"
    assert calls.elsewhere == [("p", "node-a", "node-b")]
    assert len(server.requests) == 1, "a 409 is not retried"
    assert server.gets == ["p"], "a 409 is checked against the pod, never assumed"
    assert "bind ns/p: already bound (409) to node-b, not node-a" in caplog.text


async def test_409_bound_to_its_node_is_bound(server, core):
    """E.g. a bind whose answer was lost, failed for good, requeued and placed on the same node."""
    server.script["p"] = [409]
    server.pods["p"] = "node-a"
    calls = Calls()
    await bind_all(make_binder(core, calls), "p")
    assert calls.bound == [("p", "node-a")] and calls.failed == []


async def test_409_for_a_pod_not_bound_is_retried(server, core, fast_retry):
    """kube-apiserver answers 409 when etcd fails the binding's update ("Operation cannot
    be fulfilled on pods/binding: rpc error: code = Unavailable"): not a binding, so
    neither assumed nor failed, but retried like an outage."""
    server.script["p"] = [409, 201]
    server.pods["p"] = ""
    calls = Calls()
    await bind_all(make_binder(core, calls), "p")
    assert calls.bound == [("p", "node-a")] and calls.failed == []
    assert len(server.requests) == 2 and server.gets == ["p"]


@pytest.mark.parametrize("status", [400, 422, 403])
async def test_a_rejection_fails_the_bind_once_without_retry(server, core, status):
    server.script["p"] = [status]
    calls = Calls()
    await bind_all(make_binder(core, calls), "p")
    assert calls.bound == []
    assert len(calls.failed) == 1
    name, node, message = calls.failed[0]
    assert (name, node) == ("p", "node-a")
    assert message.startswith(f"Binding rejected: {status}") and f"scripted {status}" in message, message
    assert len(server.requests) == 1


async def test_404_is_reported_as_gone_not_as_a_failure(server, core):
    server.script["p"] = [404]
    calls = Calls()
    await bind_all(make_binder(core, calls), "p")
    assert calls.gone == ["p"] and calls.bound == [] and calls.failed == []


@pytest.mark.parametrize("first", ["drop", 500, 503, 504])
async def test_an_outage_failure_is_retried_with_backoff_and_binds_without_a_failure(server, core, fast_retry, first):
    server.script["p"] = [first, first, 201]
    calls = Calls()
    await bind_all(make_binder(core, calls), "p")
    assert calls.bound == [("p", "node-a")] and calls.failed == [] and calls.gone == []
    times = server.times("p")
    assert len(times) == 3
    assert times[2] - times[1] >= times[1] - times[0] >= 0.009, "the retries back off"


async def test_an_outage_longer_than_the_retry_time_fails_the_bind(server, core, fast_retry, monkeypatch):
    from scheduler.runtime import binder as binder_mod

    monkeypatch.setattr(binder_mod, "BIND_RETRY_SECONDS", 0.5)
    server.script["p"] = [503]  # for ever
    calls = Calls()
    await bind_all(make_binder(core, calls), "p")
    assert calls.bound == [] and len(calls.failed) == 1
    assert calls.failed[0][2].startswith("Binding failed: 503") and "retried for" in calls.failed[0][2], calls.failed
    assert 3 <= len(server.requests) <= 12


async def test_a_retried_bind_answered_409_while_bound_to_its_node_is_bound(server, core, fast_retry, caplog):
    """The first attempt landed but its answer was lost: the retry's 409 is our own binding."""
    server.script["p"] = ["drop", 409]
    server.pods["p"] = "node-a"
    calls = Calls()
    with caplog.at_level(logging.INFO, logger="scheduler.runtime.binder"):
        await bind_all(make_binder(core, calls), "p")
    assert calls.bound == [("p", "node-a")] and calls.failed == [] and calls.gone == []
    assert server.gets == ["p"]
    assert "an earlier attempt landed" in caplog.text


async def test_a_retried_bind_answered_409_while_bound_elsewhere_is_neither_bound_nor_failed(server, core, fast_retry):
    server.script["p"] = [500, 409]
    server.pods["p"] = "node-b"  # someone else's binding: the watch brings it
    calls = Calls()
    await bind_all(make_binder(core, calls), "p")
    assert calls.bound == [] and calls.failed == [] and calls.gone == []
    assert calls.elsewhere == [("p", "node-a", "node-b")]


async def test_a_retried_bind_answered_409_for_a_pod_gone_is_gone(server, core, fast_retry):
    server.script["p"] = [504, 409]  # no entry in server.pods: GET answers 404
    calls = Calls()
    await bind_all(make_binder(core, calls), "p")
    assert calls.gone == ["p"] and calls.bound == [] and calls.failed == []


async def test_an_outage_logs_one_warning_for_all_binds_and_one_line_when_it_ends(server, core, fast_retry, caplog):
    names = [f"p-{i}" for i in range(10)]
    for name in names:
        server.script[name] = ["drop", "drop", 201]
    calls = Calls()
    with caplog.at_level(logging.DEBUG, logger="scheduler.runtime"):
        await bind_all(make_binder(core, calls, concurrency=10), *names)
    assert sorted(n for n, _ in calls.bound) == names and calls.failed == []
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage().split(":")[0] for r in warnings] == ["API server unreachable (binds)"], warnings
    infos = [
        r.getMessage() for r in caplog.records if r.levelno == logging.INFO and "reachable again" in r.getMessage()
    ]
    assert len(infos) == 1 and "request(s) failed" in infos[0], infos


async def test_an_answer_that_never_comes_fails_the_bind_after_the_timeout(server, core, monkeypatch, no_bind_retry):
    from scheduler.runtime import binder as binder_mod

    monkeypatch.setattr(binder_mod, "REQUEST_TIMEOUT_SECONDS", 0.5)
    server.script["p"] = ["hang"]
    calls = Calls()
    await bind_all(make_binder(core, calls), "p", timeout=5)
    assert calls.bound == [] and len(calls.failed) == 1
    assert calls.failed[0][2].startswith("Binding failed: TimeoutError"), calls.failed


# ------------------------------------------------------------------------ 429


async def test_429_waits_retry_after_then_binds(server, core, caplog):
    server.script["p"] = [(429, {"Retry-After": "1"}), 201]
    calls = Calls()
    with caplog.at_level(logging.INFO, logger="scheduler.runtime.binder"):
        await bind_all(make_binder(core, calls), "p")
    assert calls.bound == [("p", "node-a")] and calls.failed == []
    times = server.times("p")
    assert len(times) == 2, f"expected the 429 and one retry, the server saw {len(times)} request(s)"
    first, second = times
    assert 0.9 <= second - first < 3.0, f"retried {second - first:.2f}s after the 429 (Retry-After: 1)"
    assert "bind ns/p: throttled by the server, retrying in 1.0s" in caplog.text


async def test_429_pauses_every_bind_not_just_the_throttled_one(server, core):
    """Retry-After pauses the shared bucket: a bind submitted during the pause waits too."""
    server.script["p"] = [(429, {"Retry-After": "1"}), 201]
    calls = Calls()
    binder = make_binder(core, calls)
    binder.submit(parse_pod(pod_body("p")), "node-a")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while not server.requests and loop.time() < deadline:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)  # the 429 is answered and read
    await bind_all(binder, "q")
    assert sorted(calls.bound) == [("p", "node-a"), ("q", "node-a")]
    p_times, q_times = server.times("p"), server.times("q")
    assert len(p_times) == 2 and len(q_times) == 1, (p_times, q_times)
    p_first, q_time = p_times[0], q_times[0]
    assert q_time - p_first >= 0.9, f"q was sent {q_time - p_first:.2f}s after p's 429 (Retry-After: 1)"


async def test_429_is_retried_at_most_the_cap_then_fails(server, core):
    server.script["p"] = [(429, {"Retry-After": "0.1"})]  # forever
    calls = Calls()
    await bind_all(make_binder(core, calls), "p")
    assert calls.bound == []
    assert calls.failed == [("p", "node-a", "Binding failed: the API server kept answering 429 Too Many Requests")]
    assert len(server.requests) == MAX_RETRIES_429 + 1


# --------------------------------------------------------------------- limits


async def test_concurrency_limit_holds_at_the_server(server, core):
    server.delay = 0.05
    calls = Calls()
    names = [f"p-{i}" for i in range(12)]
    await bind_all(make_binder(core, calls, concurrency=3), *names)
    assert sorted(n for n, _ in calls.bound) == sorted(names)
    assert server.max_in_flight == 3, f"{server.max_in_flight} binds were in flight at once, the limit is 3"


async def test_token_bucket_limits_binds_to_qps_after_the_burst(server, core):
    calls = Calls()
    names = [f"p-{i}" for i in range(20)]
    loop = asyncio.get_running_loop()
    start = loop.time()
    await bind_all(make_binder(core, calls, concurrency=20, qps=10, burst=5), *names)
    assert len(calls.bound) == 20
    times = sorted(t for _, t, _ in server.requests)
    # 5 at once (the burst), then 15 more at 10/s: 1.5 s.
    assert times[4] - start < 0.4, f"the burst of 5 took {times[4] - start:.2f}s"
    assert times[-1] - start >= 1.4, f"20 binds at qps 10 / burst 5 took only {times[-1] - start:.2f}s"
    assert times[-1] - start < 3.0, f"20 binds at qps 10 / burst 5 took {times[-1] - start:.2f}s"


async def test_token_bucket_pause_blocks_acquire():
    bucket = TokenBucket(1000, 10)
    loop = asyncio.get_running_loop()
    bucket.pause(0.5)
    start = loop.time()
    await bucket.acquire()
    assert loop.time() - start >= 0.45


# ------------------------------------------- a failed bind goes back to the queue


def sched_with_binder(core) -> Scheduler:
    config = SchedulerConfiguration.model_validate(
        {"queue": {"podInitialBackoffSeconds": 0.1, "podMaxBackoffSeconds": 0.2}}
    )
    s = Scheduler(config, in_tree_registry(), binder=Binder(core, TokenBucket(1000, 1000), 4), report_delay=0)
    s.start_scheduling()
    return s


def node_body(name: str, cpu: str = "2") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": f"uid-{name}"},
        "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"}},
    }


def bindings(result: str) -> float:
    return REGISTRY.get_sample_value("troupe_pod_bindings_total", {"result": result}) or 0.0


async def cycle(s: Scheduler, timeout: float = 5) -> None:
    """One scheduling cycle (waiting out any backoff), then every bind it started."""
    s.schedule_unit(await asyncio.wait_for(s.queue.pop(), timeout))
    await asyncio.wait_for(binds_done(s.binder), timeout)  # type: ignore[arg-type]


async def _failed_bind_is_requeued_and_bound_on_retry(server, core, first_answer: Any) -> None:
    server.script["p"] = [first_answer, 201]
    s = sched_with_binder(core)
    s.on_node(node_body("a", cpu="1"))
    s.on_pod(pod_body("p"))
    bound0, failed0 = bindings("bound"), bindings("failed")
    await cycle(s)
    assert bindings("failed") - failed0 == 1 and bindings("bound") - bound0 == 0
    assert "uid-p" in s.queue, "a failed bind must return the pod to the queue"
    assert s.cache.placed_node("uid-p") == "", "a failed bind must free the room it was assumed into"
    await cycle(s)
    assert bindings("bound") - bound0 == 1
    assert [n for n, _, _ in server.requests] == ["p", "p"]
    assert all(b["target"]["name"] == "a" for _, _, b in server.requests)
    assert "uid-p" not in s.queue


async def test_dropped_bind_returns_the_pod_to_the_queue_and_it_is_bound_on_retry(server, core, no_bind_retry):
    await _failed_bind_is_requeued_and_bound_on_retry(server, core, "drop")


async def test_rejected_bind_returns_the_pod_to_the_queue_and_it_is_bound_on_retry(server, core):
    await _failed_bind_is_requeued_and_bound_on_retry(server, core, 422)


async def test_a_gang_member_whose_bind_failed_is_placed_alone_counting_the_bound_ones(server, core, no_bind_retry):
    """minCount 3: two binds succeed, one fails. The failed pod comes back alone;
    the next cycle counts the two bound pods toward minCount and binds it."""
    server.script["g-2"] = ["drop", 201]
    s = sched_with_binder(core)
    s.on_node(node_body("a", cpu="4"))
    s.on_podgroup(
        {
            "metadata": {"name": "g", "namespace": "ns", "uid": "uid-pg-g", "generation": 1},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 3}}},
        }
    )
    bodies = {f"g-{i}": pod_body(f"g-{i}", "g") for i in range(3)}
    for b in bodies.values():
        s.on_pod(b)
    await cycle(s)
    assert sorted(n for n, _, _ in server.requests) == ["g-0", "g-1", "g-2"]
    for name in ("g-0", "g-1"):  # the watch confirms the two bindings that worked
        s.on_pod({**bodies[name], "spec": {**bodies[name]["spec"], "nodeName": "a"}})
    assert "uid-g-2" in s.queue and "uid-g-0" not in s.queue
    assert len(s.cache.member_summary(GroupKey("ns", "g"))[1]) == 2  # bound, as the next cycle counts them
    await cycle(s)
    assert sorted(n for n, _, _ in server.requests) == ["g-0", "g-1", "g-2", "g-2"]
    assert "uid-g-2" not in s.queue


# ------------------------------------------------------------------ PreBind


class _GatePreBind(PreBindPlugin):
    """Refuses pods named in `refuse`; records how many binds the server had seen at each call."""

    name = "GatePreBind"
    refuse: set[str] = set()
    seen: list[tuple[str, int]] = []
    server: FakeAPI | None = None

    async def pre_bind(self, state: CycleState, pod, node: str) -> Status:
        await asyncio.sleep(0.01)
        assert self.server is not None
        self.seen.append((pod.name, len(self.server.requests)))
        return Status.unschedulable("not today") if pod.name in self.refuse else Status.success()


def _gated(server, core, monkeypatch) -> tuple[Framework, Binder, Calls, list[Assignment]]:
    """A profile with GatePreBind refusing "q", a binder, and assignments of p, q and r."""
    monkeypatch.setattr(_GatePreBind, "refuse", {"q"})
    monkeypatch.setattr(_GatePreBind, "seen", [])
    monkeypatch.setattr(_GatePreBind, "server", server)
    registry = in_tree_registry()
    registry.register(_GatePreBind)
    profile = Profile.model_validate({"plugins": {"preBind": {"enabled": [{"name": "GatePreBind"}]}}})
    fwk = Framework(profile, registry, Handle(ClusterCache()))
    binder = Binder(core, TokenBucket(1000, 1000), 4)
    assignments = [Assignment(parse_pod(pod_body(n)), "node-a") for n in ("p", "q", "r")]
    return fwk, binder, Calls(), assignments


async def test_prebind_runs_for_every_pod_before_any_bind_and_a_refusal_fails_only_its_pod(server, core, monkeypatch):
    fwk, binder, calls, assignments = _gated(server, core, monkeypatch)
    binder.bind(fwk, assignments, calls)
    await asyncio.wait_for(binds_done(binder), 10)
    assert sorted(_GatePreBind.seen) == [("p", 0), ("q", 0), ("r", 0)]  # no bind before the last PreBind
    assert sorted(calls.bound) == [("p", "node-a"), ("r", "node-a")]
    assert calls.failed == [("q", "node-a", "PreBind GatePreBind: not today")]
    assert sorted(name for name, _, _ in server.requests) == ["p", "r"]


@pytest.mark.parametrize("at_least, bound", [(2, ["p", "r"]), (3, [])])
async def test_a_prebind_failure_that_leaves_a_gang_below_minCount_binds_none_of_it(
    server, core, monkeypatch, at_least, bound
):
    fwk, binder, calls, assignments = _gated(server, core, monkeypatch)
    binder.bind(fwk, assignments, calls, at_least)
    await asyncio.wait_for(binds_done(binder), 10)
    assert sorted(p for p, _ in calls.bound) == bound
    assert sorted(name for name, _, _ in server.requests) == bound
    failed = {p: msg for p, _, msg in calls.failed}
    assert failed.pop("q") == "PreBind GatePreBind: not today"
    if not bound:  # the two that passed fail too, saying why
        assert set(failed) == {"p", "r"}
        assert failed["p"] == (
            "PreBind failed for 1 pod(s) of the group, 2 left, 3 needed to reach minCount "
            "(ns/q: PreBind GatePreBind: not today)"
        )
    else:
        assert failed == {}


# ---------------------------------------------------- 409: bound elsewhere


class _Holding(ReservePlugin):
    """Holds something per reserved pod until it is unreserved."""

    name = "Holding"
    held: set[str] = set()

    def reserve(self, state: CycleState, pod, node: str) -> Status:
        self.held.add(pod.uid)
        return Status.success()

    def unreserve(self, state: CycleState, pod, node: str) -> None:
        self.held.discard(pod.uid)


async def test_409_bound_elsewhere_releases_the_reservation_at_once(server, core, monkeypatch):
    """Someone else bound the pod: what troupe reserved for its own bind is
    released now (not when the pod is deleted), and the pod counts on the
    node it is bound to, not on the one troupe chose."""
    monkeypatch.setattr(_Holding, "held", set())
    registry = in_tree_registry()
    registry.register(_Holding)
    config = SchedulerConfiguration.model_validate(
        {
            "profiles": [
                {"schedulerName": "troupe-scheduler", "plugins": {"reserve": {"enabled": [{"name": "Holding"}]}}}
            ]
        }
    )
    s = Scheduler(config, registry, binder=Binder(core, TokenBucket(1000, 1000), 4), report_delay=0)
    s.start_scheduling()
    s.on_node(node_body("a", cpu="2"))
    s.on_node(node_body("b", cpu="2"))
    s.on_pod(pod_body("p"))
    server.script["p"] = [409]
    server.pods["p"] = "elsewhere"
    conflicts = bindings("conflict")
    s.schedule_unit(await asyncio.wait_for(s.queue.pop(), 5))
    chosen = s.cache.placed_node("uid-p")
    assert chosen in ("a", "b") and _Holding.held == {"uid-p"}
    server.pods["p"] = "b" if chosen == "a" else "a"  # the other node: someone else's placement
    await asyncio.wait_for(binds_done(s.binder), 5)  # type: ignore[arg-type]
    assert _Holding.held == set(), "the reservation must be released at the 409"
    assert "uid-p" not in s._reserved
    assert s.cache.placed_node("uid-p") == server.pods["p"]
    assert bindings("conflict") - conflicts == 1


async def test_annotations_go_on_the_binding(server, core):
    """A gang's protection from consolidation rides on its Bindings (the API
    server merges their annotations into the pod): no write of its own."""
    calls = Calls()
    binder = make_binder(core, calls)
    binder.binder.submit(parse_pod(pod_body("p")), "node-a", calls, {"karpenter.sh/do-not-disrupt": "true"})
    await asyncio.wait_for(binder.drain(), 20)
    [(_, _, body)] = server.requests
    assert body["metadata"]["annotations"] == {"karpenter.sh/do-not-disrupt": "true"}
