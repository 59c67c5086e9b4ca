"""The watches of the group sources that are not troupe's own (api/sources).

The native Workload API (`scheduling.k8s.io` PodGroups) is served only where
the cluster enables it (`GenericWorkload`, `--runtime-config`). At start,
API discovery says which version to read (`v1beta1`, then `v1alpha3`, then
`v1alpha2`); its PodGroups then come through an Informer like troupe's own.
Where the API is not served, troupe logs one line, pods naming a native
PodGroup say why they wait, and discovery is asked again every
`RECHECK_SECONDS` (quietly): a cluster that starts serving the API later is
picked up without a restart.

Native Workloads are not watched: a native PodGroup carries its template's
policy itself (the controller copies it), so scheduling never needs its
Workload; `workloadRef` is read from the PodGroup for display.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from ..api.sources import native
from ..core.scheduler import Scheduler
from .handlers import group_informer
from .informer import Informer
from .kube import RestClient

log = logging.getLogger(__name__)

RECHECK_SECONDS = 60.0


async def served_version(rest: RestClient) -> tuple[str | None, str]:
    """The native PodGroup version troupe will read, or None and why not."""
    try:
        raw = await rest.request("GET", f"/apis/{native.GROUP}", b"")
    except ApiException as exc:
        if exc.status == 404:
            return None, f"{native.GROUP} is not served by this cluster"
        raise
    served = [v.get("version") for v in json.loads(raw).get("versions") or ()]
    with_podgroups = []
    for version in served:
        resources = json.loads(await rest.request("GET", f"/apis/{native.GROUP}/{version}", b""))
        if any(r.get("name") == native.PODGROUP_PLURAL for r in resources.get("resources") or ()):
            with_podgroups.append(str(version))
    for version in native.VERSIONS:
        if version in with_podgroups:
            return version, ""
    if with_podgroups:
        return None, (
            f"{native.GROUP} serves PodGroups in {', '.join(with_podgroups)}, which troupe does not speak "
            f"(it reads {', '.join(native.VERSIONS)})"
        )
    return None, (
        f"{native.GROUP} PodGroups are not served by this cluster (the native Workload API needs the "
        "GenericWorkload feature gate and --runtime-config)"
    )


class NativeSource:
    """Finds the served native version and runs its PodGroup Informer."""

    def __init__(
        self,
        scheduler: Scheduler,
        api: client.ApiClient,
        rest: RestClient,
        on_served: Callable[[str], None] = lambda _api_version: None,
        recheck: float = RECHECK_SECONDS,
    ) -> None:
        self._scheduler = scheduler
        self._api = api
        self._rest = rest
        self._on_served = on_served
        self._recheck = recheck
        self.informer: Informer | None = None
        self.version: str | None = None

    async def start(self) -> None:
        """Discovery once, before the initial listing is done: when served, its
        PodGroups are listed now (the cache is complete when troupe starts
        scheduling); when not, one line says so."""
        version, why = await served_version(self._rest)
        if version is None:
            log.info("native PodGroups are not read: %s; checking again every %.0fs", why, self._recheck)
            self._scheduler.on_source_problem(native.GROUP, why)
            return
        await self._serve(version)

    async def run(self) -> None:
        """Watch the served version; or, while none is, ask again now and then."""
        while self.informer is None:
            await asyncio.sleep(self._recheck)
            try:
                version, why = await served_version(self._rest)
            except (ApiException, aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
                log.debug("native API discovery failed: %s", exc)
                continue
            if version is not None:
                await self._serve(version)
            else:
                self._scheduler.on_source_problem(native.GROUP, why)
        await self.informer.run()

    async def _serve(self, version: str) -> None:
        api_version = f"{native.GROUP}/{version}"
        self.version = version
        self.informer = group_informer(
            self._scheduler, self._api, f"/apis/{api_version}/{native.PODGROUP_PLURAL}", native.GROUP
        )
        self._on_served(api_version)
        n = await _retrying(self.informer.relist)
        self._scheduler.on_source_problem(native.GROUP, None)
        log.info("native PodGroups: reading %s (%d listed)", api_version, n)


async def _retrying(call: Callable[[], Awaitable[int]]) -> int:
    delay = 1.0
    while True:
        try:
            return await call()
        except (ApiException, aiohttp.ClientError, TimeoutError, OSError) as exc:
            log.warning("listing native PodGroups failed (%s); retrying in %.0fs", exc, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)
