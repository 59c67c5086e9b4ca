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
from typing import Any, cast

import aiohttp
import kopf
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from ..api.config import SchedulerConfiguration
from ..core.scheduler import Scheduler
from ..framework.registry import Registry
from .binder import Binder
from .claims import ClaimWriter
from .events import EVENT_CONNECTIONS, EventRecorder
from .handlers import INFORMED, Resource, build_registry, informer_for, operator_settings
from .health import start_health_server
from .informer import Informer
from .initial_sync import prime
from .jobs import JobController
from .kube import RestClient, connection_info, load_configuration
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
    """The initial listing (the PodGroups of the other sources too, where
    served), retried (1 s doubling to 10 s) while the API server cannot answer."""
    delay = 1.0
    while True:
        try:
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


async def run(
    config: SchedulerConfiguration,
    registry: Registry,
    kubeconfig: str | None,
    resync_seconds: float = 300.0,
) -> int:
    cfg = await load_configuration(kubeconfig)
    cc = config.client_connection
    # One connection pool for binds, status writes and the two Informer
    # watches (each holds a connection); kopf's watches have their own.
    cfg.connection_pool_maxsize = max(cc.bind_concurrency + 8, 32)
    api_client = client.ApiClient(cfg)
    bucket = TokenBucket(cc.qps, cc.burst)
    rest = RestClient(api_client)
    binder = Binder(rest, bucket, cc.bind_concurrency)
    # Events: a client of their own (as kube-scheduler's event client: its own
    # rate limit) with a small pool, so an Event never holds a connection a
    # bind needs; they wait while pods are being bound (runtime/events.py).
    event_cfg = copy.copy(cfg)  # shares the credentials (a refreshed token too)
    event_cfg.connection_pool_maxsize = EVENT_CONNECTIONS
    event_api_client = client.ApiClient(event_cfg)
    event_rest = RestClient(event_api_client)
    events = EventRecorder(event_rest, TokenBucket(cc.qps, cc.burst), binding=binder.binding)
    writer = StatusWriter(rest, bucket, events=events, binding=binder.binding)
    scheduler = Scheduler(config, registry, binder=binder, writer=writer)
    writer.members = scheduler.group_and_counts
    claim_writer = ClaimWriter(rest, bucket)
    for fwk in scheduler.frameworks.values():
        fwk.handle.claim_writer = claim_writer
    name = os.environ.get("POD_NAME") or socket.gethostname()  # this replica: its pod's name
    elector: LeaderElector | None = None
    if config.leader_election.leader_elect:
        # As client-go: the pod, plus a uuid.
        elector = LeaderElector(rest, config.leader_election, f"{name}_{uuid.uuid4()}")
        rest.may_write = elector.may_act  # a standby, or a leader past its deadline, writes nothing
        event_rest.may_write = elector.may_act

    def healthy() -> bool:
        # Stalled = work is waiting but no cycle ran for a long time (a standby runs none).
        return (
            (elector is not None and not elector.leading.is_set())
            or len(scheduler.queue) == 0
            or time.monotonic() - scheduler.last_cycle < config.stall_seconds
            or not scheduler.synced.is_set()
        )

    health = await start_health_server(config.health_bind_address, healthy, scheduler.synced.is_set)
    log.info(
        "troupe starting: profiles %s, API %s, health on %s",
        ", ".join(scheduler.frameworks),
        cfg.host,
        config.health_bind_address,
    )
    informers = {resource: informer_for(scheduler, api_client, resource) for resource in INFORMED}
    group_sources = [
        PodGroupSource(
            scheduler, api_client, rest, api, on_served=_events_know(events), recheck=config.watch.discovery_seconds
        )
        for api in source_apis(config.group_sources)
    ]
    await _prime_until_done(scheduler, api_client, informers, group_sources)
    scheduler.synced.set()

    async def lead_then_schedule() -> None:
        # A standby keeps its cache warm (watches run) and starts here the
        # moment it holds the lease.
        if elector is not None:
            await elector.leading.wait()
        scheduler.claim_lifecycle = claim_writer
        scheduler.sweep_claims()  # devices held by pods deleted while no replica led
        scheduler.sweep_group_status()  # groups bound whose condition was not written yet
        scheduler.sweep_nominations()  # room let go while this replica could not say so
        await scheduler.run()

    loop_task = asyncio.create_task(lead_then_schedule(), name="scheduling loop")
    election = asyncio.create_task(elector.run(), name="leader election") if elector is not None else None
    watches = [asyncio.create_task(i.run(), name=f"watch {i.path}") for i in informers.values()]
    watches += [asyncio.create_task(s.run(), name=f"{s.source.name} PodGroups") for s in group_sources]
    resync = None
    if resync_seconds > 0:
        # Pods, Nodes and PodGroups need none: their Informers Replace on every relist.
        resync = asyncio.create_task(
            Resync(scheduler, api_client, bucket, resync_seconds, kinds=("workload", "pdb")).run(),
            name="resync",
        )
    jobs = JobController(rest, scheduler, events, leading=elector.may_act if elector is not None else lambda: True)
    job_task = asyncio.create_task(jobs.run(), name="job integration")
    operator = asyncio.create_task(
        kopf.operator(
            registry=build_registry(scheduler, lambda: connection_info(cfg), jobs),
            settings=operator_settings(config.watch),
            clusterwide=True,
            standalone=True,
            memo=kopf.Memo(scheduler=scheduler),
            # Else kopf names itself after getpass.getuser(), which fails for a
            # uid the image's /etc/passwd does not know (any runAsUser but 65532).
            identity=cast(Any, name),  # kopf's Identity is a NewType of str, not exported
        ),
        name="kopf operator",
    )
    rc = 0
    try:
        waited = {loop_task, operator, job_task, *watches} | ({election} if election is not None else set())
        done, _ = await asyncio.wait(waited, return_when=asyncio.FIRST_COMPLETED)
        if loop_task in done and not loop_task.cancelled() and loop_task.exception() is not None:
            log.error("scheduling loop crashed", exc_info=loop_task.exception())
            rc = 1
        if election is not None and election in done and not election.cancelled():
            log.error("leader election: %s", election.exception())
            rc = 1
        if job_task in done and not job_task.cancelled():  # it never returns: a crash
            log.error("Job integration crashed", exc_info=job_task.exception())
            rc = 1
        # kopf returns after SIGTERM/SIGINT; one that raised (or a watch) must
        # not pass for a clean stop, or troupe would exit 0 without a word.
        for task in done & {operator, *watches}:
            if not task.cancelled() and task.exception() is not None:
                log.error("%s crashed", task.get_name(), exc_info=task.exception())
                rc = 1
    finally:
        tasks = [t for t in (loop_task, operator, resync, election, job_task, *watches) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await writer.flush(timeout=5)
        await writer.close()
        if elector is not None:
            await elector.release()  # a clean stop hands over at once
        await health.cleanup()
        await rest.close()
        await event_rest.close()
        await api_client.close()
        await event_api_client.close()
    log.info("troupe stopped")
    return rc
