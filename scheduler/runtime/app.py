"""`troupe run`: wire the scheduler to a cluster and run until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import copy
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import aiohttp
import kopf
from aiohttp import web
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from ..api.config import SchedulerConfiguration
from ..core.scheduler import Scheduler
from ..framework.registry import Registry
from .binder import Binder
from .capacity import CapacityRequests
from .claims import ClaimWriter
from .events import EVENT_CONNECTIONS, EventRecorder
from .handlers import INFORMED, Resource, build_registry, informer_for, operator_settings
from .health import start_health_server
from .informer import Informer
from .initial_sync import prime
from .jobs import JobController
from .kube import RestClient, connection_info, load_configuration, served_kubernetes
from .leaderelection import LeaderElector
from .ratelimit import TokenBucket
from .resync import Resync
from .sources import PodGroupSource, source_apis
from .status import StatusWriter

log = logging.getLogger(__name__)


async def _prime_until_done(
    scheduler: Scheduler,
    api_client: client.ApiClient,
    informers: dict[Resource, Informer],
    group_sources: list[PodGroupSource],
) -> None:
    """The served Kubernetes version, then the initial listing (the PodGroups
    of the other sources too, where served), retried (1 s doubling to 10 s)
    while the API server cannot answer."""
    delay = 1.0
    while True:
        try:
            if scheduler.kube_version is None:  # at start only: a later upgrade is seen at the next start
                scheduler.kube_version = await served_kubernetes(api_client)
                shown = ".".join(map(str, scheduler.kube_version or ())) or "not known (GET /version answered an error)"
                log.info("served Kubernetes: %s", shown)
            for source in group_sources:
                if source.informer is None:
                    await source.start()
            await prime(scheduler, api_client, informers)
            return
        except (TimeoutError, ApiException, aiohttp.ClientError, OSError, ValueError) as exc:
            status = getattr(exc, "status", None)
            first_line = str(exc).strip().splitlines()[0]
            if status == 429:  # e.g. a CRD established a moment ago: "storage is (re)initializing"
                log.info("initial listing: the API server asks to wait (%s); retrying in %.0fs", first_line, delay)
            else:
                hint = " (RBAC: kubectl apply -f manifests/)" if status in (401, 403) else ""
                log.error("initial listing failed%s: %s; retrying in %.0fs", hint, first_line, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)


def _events_know(events: EventRecorder) -> Callable[[str], None]:
    """Events about another source's PodGroup name the version the cluster serves."""

    def served(api_version: str) -> None:
        events.group_versions[api_version.partition("/")[0]] = api_version

    return served


@dataclass(slots=True)
class _Clients:
    """The API clients: one pool for binds, status writes and the two
    Informer watches (each holds a connection), with the client-side rate
    limit they share; and one of their own for Events. kopf's watches have
    their own."""

    cfg: client.Configuration
    api_client: client.ApiClient
    bucket: TokenBucket
    rest: RestClient
    event_api_client: client.ApiClient
    event_rest: RestClient

    async def close(self) -> None:
        await self.rest.close()
        await self.event_rest.close()
        await self.api_client.close()
        await self.event_api_client.close()


async def _connect(config: SchedulerConfiguration, kubeconfig: str | None) -> _Clients:
    """The two API clients, from the kubeconfig (or the in-cluster service account)."""
    cfg = await load_configuration(kubeconfig)
    cc = config.client_connection
    cfg.connection_pool_maxsize = max(cc.bind_concurrency + 8, 32)
    api_client = client.ApiClient(cfg)
    bucket = TokenBucket(cc.qps, cc.burst)
    rest = RestClient(api_client)
    # Events: a client of their own (as kube-scheduler's event client: its own
    # rate limit) with a small pool, so an Event never holds a connection a
    # bind needs; they wait while pods are being bound (runtime/events.py).
    event_cfg = copy.copy(cfg)  # shares the credentials (a refreshed token too)
    event_cfg.connection_pool_maxsize = EVENT_CONNECTIONS
    event_api_client = client.ApiClient(event_cfg)
    event_rest = RestClient(event_api_client)
    return _Clients(cfg, api_client, bucket, rest, event_api_client, event_rest)


@dataclass(slots=True)
class _Wiring:
    """The scheduler and what carries out its decisions."""

    scheduler: Scheduler
    events: EventRecorder
    writer: StatusWriter
    claim_writer: ClaimWriter
    capacity: CapacityRequests  # asks autoscalers for units' nodes (NodePools read by polling)
    elector: LeaderElector | None  # None: leader election is off


def _build_scheduler(config: SchedulerConfiguration, registry: Registry, clients: _Clients, identity: str) -> _Wiring:
    """The scheduler with its binder, status and Event writers, claim writer and
    (with leader election on) the elector that silences them while standing by."""
    cc = config.client_connection
    binder = Binder(clients.rest, clients.bucket, cc.bind_concurrency)
    events = EventRecorder(clients.event_rest, TokenBucket(cc.qps, cc.burst), binding=binder.binding)
    writer = StatusWriter(clients.rest, clients.bucket, events=events, binding=binder.binding)
    scheduler = Scheduler(config, registry, binder=binder, writer=writer)
    writer.members = scheduler.group_and_counts
    claim_writer = ClaimWriter(clients.rest, clients.bucket)
    for fwk in scheduler.frameworks.values():
        fwk.handle.claim_writer = claim_writer
    elector: LeaderElector | None = None
    if config.leader_election.leader_elect:
        # As client-go: the pod, plus a uuid.
        elector = LeaderElector(clients.rest, config.leader_election, f"{identity}_{uuid.uuid4()}")
        clients.rest.may_write = elector.may_act  # a standby, or a leader past its deadline, writes nothing
        clients.event_rest.may_write = elector.may_act
    return _Wiring(scheduler, events, writer, claim_writer, CapacityRequests(clients.rest, scheduler), elector)


def _health_check(config: SchedulerConfiguration, wiring: _Wiring) -> Callable[[], bool]:
    scheduler, elector = wiring.scheduler, wiring.elector

    def healthy() -> bool:
        # Stalled = work is waiting but no cycle ran for a long time (a standby runs none).
        return (
            (elector is not None and not elector.leading.is_set())
            or len(scheduler.queue) == 0
            or time.monotonic() - scheduler.last_cycle < config.stall_seconds
            or not scheduler.synced.is_set()
        )

    return healthy


async def _lead_then_schedule(wiring: _Wiring) -> None:
    # A standby keeps its cache warm (watches run) and starts here the
    # moment it holds the lease.
    scheduler = wiring.scheduler
    if wiring.elector is not None:
        await wiring.elector.leading.wait()
    scheduler.claim_lifecycle = wiring.claim_writer
    scheduler.capacity = wiring.capacity
    await wiring.capacity.poll_nodepools()  # before the first cycle: a gang must not be told Unschedulable first
    await wiring.capacity.adopt()  # stand-ins made before this replica led
    scheduler.sweep_claims()  # devices held by pods deleted while no replica led
    scheduler.sweep_group_status()  # groups bound whose condition was not written yet
    scheduler.sweep_nominations()  # room let go while this replica could not say so
    await scheduler.run()


@dataclass(slots=True)
class _Tasks:
    """What `troupe run` runs once the cache is synced."""

    loop: asyncio.Task[None]  # the scheduling loop
    capacity: asyncio.Task[None]  # NodePools, and the timeouts of the capacity asked
    election: asyncio.Task[None] | None
    watches: list[asyncio.Task[None]]  # the Informers', then the other sources' PodGroups
    resync: asyncio.Task[None] | None
    jobs: asyncio.Task[None]
    operator: asyncio.Task[None]  # kopf

    def waited(self) -> set[asyncio.Task[None]]:
        """The tasks whose end ends troupe (a resync that ends does not)."""
        return {self.loop, self.operator, self.jobs, self.capacity, *self.watches} | (
            {self.election} if self.election is not None else set()
        )

    def to_cancel(self) -> list[asyncio.Task[None]]:
        """Every task, the loop first, in the order they are cancelled at shutdown."""
        return [
            t
            for t in (self.loop, self.operator, self.resync, self.election, self.jobs, self.capacity, *self.watches)
            if t is not None
        ]


def _start_tasks(
    config: SchedulerConfiguration,
    wiring: _Wiring,
    clients: _Clients,
    informers: dict[Resource, Informer],
    group_sources: list[PodGroupSource],
    identity: str,
    resync_seconds: float,
) -> _Tasks:
    """The loop (waiting for the lease), the election, the watches, the resync,
    the Job integration and kopf, started in that order."""
    scheduler, elector = wiring.scheduler, wiring.elector
    loop_task = asyncio.create_task(_lead_then_schedule(wiring), name="scheduling loop")
    capacity = asyncio.create_task(wiring.capacity.run(), name="capacity requests")
    election = asyncio.create_task(elector.run(), name="leader election") if elector is not None else None
    watches = [asyncio.create_task(i.run(), name=f"watch {i.path}") for i in informers.values()]
    watches += [asyncio.create_task(s.run(), name=f"{s.source.name} PodGroups") for s in group_sources]
    resync = None
    if resync_seconds > 0:
        # Pods, Nodes and PodGroups need none: their Informers Replace on every relist.
        resync = asyncio.create_task(
            Resync(
                scheduler,
                clients.api_client,
                clients.bucket,
                resync_seconds,
                kinds=("workload", "compositepodgroup", "pdb"),
            ).run(),
            name="resync",
        )
    jobs = JobController(
        clients.rest, scheduler, wiring.events, leading=elector.may_act if elector is not None else lambda: True
    )
    job_task = asyncio.create_task(jobs.run(), name="job integration")
    cfg = clients.cfg
    operator = asyncio.create_task(
        kopf.operator(
            registry=build_registry(scheduler, lambda: connection_info(cfg), jobs),
            settings=operator_settings(config.watch),
            clusterwide=True,
            standalone=True,
            memo=kopf.Memo(scheduler=scheduler),
            # Else kopf names itself after getpass.getuser(), which fails for a
            # uid the image's /etc/passwd does not know (any runAsUser but 65532).
            identity=cast(Any, identity),  # kopf's Identity is a NewType of str, not exported
        ),
        name="kopf operator",
    )
    return _Tasks(loop_task, capacity, election, watches, resync, job_task, operator)


def _exit_code(done: set[asyncio.Task[None]], tasks: _Tasks) -> int:
    """0 for a clean stop; 1, with the reason logged, when a task that never
    returns on its own ended."""
    rc = 0
    if tasks.loop in done and not tasks.loop.cancelled() and tasks.loop.exception() is not None:
        log.error("scheduling loop crashed", exc_info=tasks.loop.exception())
        rc = 1
    election = tasks.election
    if election is not None and election in done and not election.cancelled():
        log.error("leader election: %s", election.exception())
        rc = 1
    if tasks.jobs in done and not tasks.jobs.cancelled():  # it never returns: a crash
        log.error("Job integration crashed", exc_info=tasks.jobs.exception())
        rc = 1
    if tasks.capacity in done and not tasks.capacity.cancelled():  # it never returns: a crash
        log.error("capacity requests crashed", exc_info=tasks.capacity.exception())
        rc = 1
    # kopf returns after SIGTERM/SIGINT; one that raised (or a watch) must
    # not pass for a clean stop, or troupe would exit 0 without a word.
    for task in done & {tasks.operator, *tasks.watches}:
        if not task.cancelled() and task.exception() is not None:
            log.error("%s crashed", task.get_name(), exc_info=task.exception())
            rc = 1
    return rc


async def _shutdown(tasks: _Tasks, wiring: _Wiring, health: web.AppRunner, clients: _Clients) -> None:
    """Every task cancelled, what is written flushed, the lease handed over, the connections closed."""
    running = tasks.to_cancel()
    for task in running:
        task.cancel()
    await asyncio.gather(*running, return_exceptions=True)
    await wiring.writer.flush(timeout=5)
    await wiring.writer.close()
    if wiring.elector is not None:
        await wiring.elector.release()  # a clean stop hands over at once
    await health.cleanup()
    await clients.close()


async def run(
    config: SchedulerConfiguration,
    registry: Registry,
    kubeconfig: str | None,
    resync_seconds: float = 300.0,
) -> int:
    """Wires the scheduler to the cluster (clients, scheduler and writers,
    health server, initial listing, tasks) and runs until SIGTERM/SIGINT or a
    task crashes; returns the exit code."""
    clients = await _connect(config, kubeconfig)
    identity = os.environ.get("POD_NAME") or socket.gethostname()  # this replica: its pod's name
    wiring = _build_scheduler(config, registry, clients, identity)
    scheduler = wiring.scheduler
    health = await start_health_server(
        config.health_bind_address, _health_check(config, wiring), scheduler.synced.is_set
    )
    log.info(
        "troupe starting: profiles %s, API %s, health on %s",
        ", ".join(scheduler.frameworks),
        clients.cfg.host,
        config.health_bind_address,
    )
    informers = {resource: informer_for(scheduler, clients.api_client, resource) for resource in INFORMED}
    group_sources = [
        PodGroupSource(
            scheduler,
            clients.api_client,
            clients.rest,
            api,
            on_served=_events_know(wiring.events),
            recheck=config.watch.discovery_seconds,
        )
        for api in source_apis(config.group_sources)
    ]
    await _prime_until_done(scheduler, clients.api_client, informers, group_sources)
    scheduler.synced.set()

    tasks = _start_tasks(config, wiring, clients, informers, group_sources, identity, resync_seconds)
    try:
        done, _ = await asyncio.wait(tasks.waited(), return_when=asyncio.FIRST_COMPLETED)
        rc = _exit_code(done, tasks)
    finally:
        await _shutdown(tasks, wiring, health, clients)
    log.info("troupe stopped")
    return rc
