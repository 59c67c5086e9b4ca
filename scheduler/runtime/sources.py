"""The watches of the group sources whose PodGroups are not troupe's own
(api/sources: the kinds a source marks `discovered`): today the native
Workload API, scheduler-plugins and Volcano.

Each is served only where the cluster has it (the native API behind its
feature gate, the others where their CRD is installed). At start, API
discovery says which version to read (the source's preferred first); its
PodGroups then come through an Informer like troupe's own. Where none is
served, troupe logs one line, pods naming such a PodGroup say why they
wait, and discovery is asked again every `watch.discoverySeconds`
(quietly): a source installed later is picked up without a restart.

Native Workloads are not watched: a native PodGroup carries its template's
policy itself (the controller copies it), so scheduling never needs its
Workload; `workloadRef` is read from the PodGroup for display. Kueue's pod
groups have no object and need no watch (api/sources/kueue.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from ..api import sources
from ..core.scheduler import Scheduler
from .handlers import group_informer
from .informer import Informer
from .kube import RestClient

log = logging.getLogger(__name__)

RECHECK_SECONDS = 60.0


@dataclass(frozen=True)
class SourceAPI:
    """Where a source's PodGroups are served, and what to say when they are not."""

    name: str  # as in `groupSources` and the log lines: "native", "scheduler-plugins", ...
    group: str
    versions: tuple[str, ...]  # the versions troupe speaks, preferred first
    plural: str
    not_served: str  # why none is served, and what to do
    kind: str = "PodGroup"  # or "CompositePodGroup"


def source_apis(names: Sequence[str]) -> list[SourceAPI]:
    """The kinds to discover and watch, of the group sources `names` turns on
    (the registry, api/sources/registry.py)."""
    return [
        SourceAPI(source.name, kind.group, kind.versions, kind.plural, source.not_served, kind.kind)
        for source, kind in sources.discovered_kinds(names)
    ]


async def served_version(rest: RestClient, api: SourceAPI) -> tuple[str | None, str]:
    """The version of `api`'s PodGroups troupe will read, or None and why not."""
    try:
        raw = await rest.request("GET", f"/apis/{api.group}", b"")
    except ApiException as exc:
        if exc.status == 404:
            return None, f"{api.group} is not served by this cluster ({api.not_served})"
        raise
    served = [v.get("version") for v in json.loads(raw).get("versions") or ()]
    with_podgroups = []
    for version in served:
        resources = json.loads(await rest.request("GET", f"/apis/{api.group}/{version}", b""))
        if any(r.get("name") == api.plural for r in resources.get("resources") or ()):
            with_podgroups.append(str(version))
    for version in api.versions:
        if version in with_podgroups:
            return version, ""
    if with_podgroups:
        return None, (
            f"{api.group} serves {api.kind}s in {', '.join(with_podgroups)}, which troupe does not speak "
            f"(it reads {', '.join(api.versions)})"
        )
    return None, f"{api.group} {api.kind}s are not served by this cluster ({api.not_served})"


class PodGroupSource:
    """Finds the served version of one source's PodGroups and runs their Informer."""

    def __init__(
        self,
        scheduler: Scheduler,
        api: client.ApiClient,
        rest: RestClient,
        source: SourceAPI,
        on_served: Callable[[str], None] = lambda _api_version: None,
        recheck: float = RECHECK_SECONDS,
    ) -> None:
        self._scheduler = scheduler
        self._api = api
        self._rest = rest
        self.source = source
        self._on_served = on_served
        self._recheck = recheck
        self.informer: Informer | None = None
        self.version: str | None = None

    async def start(self) -> None:
        """Discovery once, before the initial listing is done: when served, its
        PodGroups are listed now (the cache is complete when troupe starts
        scheduling); when not, one line says so."""
        version, why = await served_version(self._rest, self.source)
        if version is None:
            log.info(
                "%s %ss are not read: %s; checking again every %.0fs",
                self.source.name,
                self.source.kind,
                why,
                self._recheck,
            )
            self._problem(why)
            return
        await self._serve(version)

    async def run(self) -> None:
        """Watch the served version; or, while none is, ask again now and then."""
        while self.informer is None:
            await asyncio.sleep(self._recheck)
            try:
                version, why = await served_version(self._rest, self.source)
            except (ApiException, aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
                log.debug("%s API discovery failed: %s", self.source.name, exc)
                continue
            if version is not None:
                await self._serve(version)
            else:
                self._problem(why)
        await self.informer.run()

    async def _serve(self, version: str) -> None:
        api_version = f"{self.source.group}/{version}"
        self.version = version
        self.informer = group_informer(
            self._scheduler,
            self._api,
            f"/apis/{api_version}/{self.source.plural}",
            self.source.group,
            self.source.kind,
        )
        if self.source.kind == "PodGroup":
            self._on_served(api_version)
        n = await _retrying(self.informer.relist, self.source.name)
        self._problem(None)
        log.info("%s %ss: reading %s (%d listed)", self.source.name, self.source.kind, api_version, n)

    def _problem(self, why: str | None) -> None:
        """The source's PodGroups cannot be read (None: they can): their pods
        say so. A CompositePodGroup kind not served (an alpha gate off) leaves
        the source's PodGroups as they are; pods naming a parent wait for it."""
        if self.source.kind == "PodGroup":
            self._scheduler.on_source_problem(self.source.group, why)


async def _retrying(call: Callable[[], Awaitable[int]], name: str) -> int:
    delay = 1.0
    while True:
        try:
            return await call()
        except (ApiException, aiohttp.ClientError, TimeoutError, OSError) as exc:
            log.warning("listing %s PodGroups failed (%s); retrying in %.0fs", name, exc, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)
