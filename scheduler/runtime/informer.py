"""A lean list+watch for the two kinds that carry the load: Pods and Nodes.

kopf runs a worker task, a cause, a handler registry lookup and a patch per
event; at tens of thousands of pods that was the biggest part of troupe's CPU
(about a quarter of it, measured with cProfile at 5000 nodes), more than the
scheduling. This is client-go's reflector, reduced to what troupe needs:

- `relist()`: a paged LIST (every page from one snapshot), each item upserted,
  then a Replace: whatever the cache holds of the kind that the listing does
  not (deleted while no watch was open) goes through the delete handler. So a
  410 Gone or a broken watch loses nothing, without waiting for a resync.
- `run()`: WATCH from the listing's resourceVersion with bookmarks (so the
  version stays fresh on a quiet kind and a reconnect rarely needs a relist),
  reconnect from the last version after a timeout or a dropped connection,
  relist after 410 Gone.

Bodies are plain dicts from `orjson.loads` (about 2.5x as fast as the
standard library's on a pod, and every pod event is decoded); handlers keep only what they parse
out of them, never the whole body (memory grows with every pod of the cluster). Nothing is ever written to the
watched objects.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable, Mapping
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from prometheus_client import Counter

from . import outage
from .kube import list_paged, read_checked

log = logging.getLogger(__name__)

Body = Mapping[str, Any]

# Defaults of the configuration's `watch` settings: the server ends a watch
# after `timeout` (it would anyway, after 30-60 min); the client gives up on a
# connection silent for `read_timeout`: with bookmarks (about one a minute) a
# live watch is never that quiet.
WATCH_TIMEOUT_SECONDS = 300
WATCH_READ_TIMEOUT = 330.0
CONNECT_TIMEOUT = 30.0
RETRY_INITIAL, RETRY_MAX = 0.5, 30.0

RELISTS = Counter(
    "troupe_watch_relists_total",
    "Full listings of a kind (pods, nodes, PodGroups) by troupe's informer: one at the start, then one per watch that "
    "expired (410 Gone). Each lists every object of the kind; rising steadily: watches keep expiring.",
    ["kind"],
)


class WatchExpired(Exception):
    """The server no longer has the version we watch from (410 Gone): relist."""


class Informer:
    def __init__(
        self,
        api: client.ApiClient,
        path: str,
        kind: str,
        upsert: Callable[[Body], None],
        delete: Callable[[Body], None],
        cached_keys: Callable[[], set[Hashable]],
        key_of: Callable[[Body], Hashable],
        tombstone: Callable[[Hashable], Body],
        timeout: int = WATCH_TIMEOUT_SECONDS,
        read_timeout: float = WATCH_READ_TIMEOUT,
    ) -> None:
        """`cached_keys`: the keys the cache holds of this kind, as `key_of`
        gives them for an object's metadata; `tombstone(key)` is the body the
        delete handler gets for an object that vanished between two listings."""
        self._api = api
        self.path = path
        self.kind = kind
        self._upsert = upsert
        self._delete = delete
        self._cached_keys = cached_keys
        self._key_of = key_of
        self._tombstone = tombstone
        self._timeout = timeout
        self._read_timeout = read_timeout
        self.resource_version = ""
        self._relists = RELISTS.labels(kind=kind)

    # -------------------------------------------------------------- listing

    async def relist(self) -> int:
        """LIST every page, upsert each item, then Replace: delete what the
        listing lacks. Returns the number of items listed."""
        listed: set[Hashable] = set()
        n = 0
        list_meta: dict[str, Any] = {}
        async for item in list_paged(self._api, self.path, list_meta=list_meta):
            meta = item.get("metadata") or {}
            listed.add(self._key_of(meta))
            self._handle(self._upsert, item)
            n += 1
        # Only this informer adds objects of its kind to the cache and its
        # watch is not running now, so a key the listing lacks was deleted.
        gone = [key for key in self._cached_keys() if key not in listed]
        for key in gone:
            log.info("%s %s was deleted while no watch was open; dropping it", self.kind, key)
            self._handle(self._delete, self._tombstone(key))
        self.resource_version = str(list_meta.get("resourceVersion") or "")
        self._relists.inc()
        outage.WATCHES.succeeded()
        return n

    # ------------------------------------------------------------- watching

    async def run(self) -> None:
        """Watch for ever (cancel to stop). Call after `relist()`."""
        delay = RETRY_INITIAL
        while True:
            try:
                if not self.resource_version:
                    await self.relist()
                await self._watch()
                delay = RETRY_INITIAL  # a watch that ended normally: reconnect at once
            except WatchExpired:
                log.info("watch of %s expired (410 Gone); listing again", self.path)
                self.resource_version = ""
            except asyncio.CancelledError:
                raise
            except (TimeoutError, ApiException, aiohttp.ClientError, OSError, ValueError) as exc:
                # One line per outage for all watches, not one per retry. A 429
                # too: a restarted API server refuses a CRD's watch while that
                # kind's storage initializes.
                if outage.is_outage(exc) or (isinstance(exc, ApiException) and exc.status == 429):
                    outage.WATCHES.failed(f"watch of {self.path}: {_short(exc)}")
                else:
                    log.warning("watch of %s failed (%s); retrying in %.1fs", self.path, _short(exc), delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX)

    async def _watch(self) -> None:
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", self.resource_version),
            ("timeoutSeconds", self._timeout),
        ]
        resp = await self._api.call_api(
            self.path,
            "GET",
            query_params=query,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=aiohttp.ClientTimeout(sock_connect=CONNECT_TIMEOUT, sock_read=self._read_timeout),
        )
        if not 200 <= resp.status <= 299:
            try:
                await read_checked(resp)  # raises ApiException
            except ApiException as exc:
                if exc.status == 410:  # as the ERROR event below
                    outage.WATCHES.succeeded()
                    raise WatchExpired() from None
                raise
        outage.WATCHES.succeeded()
        try:
            rest = b""
            # One JSON event per line. Lines are split here, not by
            # StreamReader.readline, whose 64 KiB limit a large Pod can exceed.
            async for chunk in resp.content.iter_any():
                lines = (rest + chunk).split(b"\n")
                rest = lines.pop()
                for line in lines:
                    if line.strip():
                        self._on_line(line)
        finally:
            resp.release()

    def _on_line(self, line: bytes) -> None:
        event = orjson.loads(line)
        type_, obj = event.get("type"), event.get("object") or {}
        if type_ == "ERROR":
            if obj.get("code") == 410:
                raise WatchExpired()
            raise ValueError(f"watch error: {obj.get('code')} {obj.get('reason')}: {obj.get('message')}")
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if type_ in ("ADDED", "MODIFIED"):
            self._handle(self._upsert, obj)
        elif type_ == "DELETED":
            self._handle(self._delete, obj)
        elif type_ != "BOOKMARK":
            log.warning("watch of %s: unknown event type %r ignored", self.path, type_)
        if version:
            self.resource_version = version

    def _handle(self, handler: Callable[[Body], None], body: Body) -> None:
        try:
            handler(body)
        except Exception:  # an object we do not understand must not stop the watch
            meta = body.get("metadata") or {}
            log.exception("cannot handle %s %s/%s", self.kind, meta.get("namespace", ""), meta.get("name", ""))


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
