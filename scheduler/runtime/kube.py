"""Connecting to the API server: one credential source for our client and kopf's."""

from __future__ import annotations

import inspect
import os
import re
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import kopf
import orjson
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.client.rest import RESTResponse


class ConnectError(Exception):
    pass


async def read_checked(resp: Any) -> bytes:
    """The body of a `_preload_content=False` answer, which kubernetes_asyncio
    hands back without looking at its status: raise ApiException for a
    non-2xx answer as it does for preloaded ones (else a 409, 429 or 500 would
    pass for success). Releases the connection."""
    try:
        data: bytes = await resp.read()
    finally:
        resp.release()
    if not 200 <= resp.status <= 299:
        # kubernetes_asyncio's own rest layer passes a RESTResponse here; its annotation says ClientResponse.
        raise ApiException(http_resp=RESTResponse(resp, data))  # type: ignore[arg-type]
    return data


class RestClient:
    """POST/PATCH/DELETE of an already-encoded JSON body, for the calls made
    once per pod (binds, Events, preemption victims) or per group (conditions).

    Two costs of the generic path are avoided, both measured with py-spy at
    5000 nodes:
    - kubernetes_asyncio's generated calls (parameter checks, a recursive
      sanitize of the body, header selection, json.dumps);
    - its session's `trust_env=True`, with which aiohttp reads the proxy
      variables and parses ~/.netrc in a worker thread on every request: a
      third of troupe's CPU went there.
    This session shares the ApiClient's connector (pool and TLS context) but
    resolves the proxy once, here, as the environment names it now. The
    Authorization header comes from the same Configuration on every call, so
    a refreshed token is used as the generated calls would use it. Errors are
    the library's ApiException.
    """

    def __init__(self, api_client: client.ApiClient) -> None:
        cfg = api_client.configuration
        rest = api_client.rest_client
        self._api_client = api_client
        self._host = (cfg.host or "").rstrip("/")
        self._session = aiohttp.ClientSession(
            connector=rest.pool_manager.connector,
            connector_owner=False,
            trust_env=False,
        )
        self._extra: dict[str, Any] = {}
        if rest.server_hostname:
            self._extra["server_hostname"] = rest.server_hostname
        proxy = cfg.proxy or _env_proxy(self._host)
        if proxy:
            self._extra["proxy"] = proxy
            if cfg.proxy_headers:
                self._extra["proxy_headers"] = cfg.proxy_headers

    async def close(self) -> None:
        await self._session.close()  # the connector stays open: the ApiClient owns it

    # Set under leader election: no write but the Lease's leaves this client
    # unless it says yes (a standby, or a leader past its renew deadline).
    may_write: Callable[[], bool] | None = None

    async def request(
        self, method: str, path: str, body: bytes, content_type: str = "application/json", timeout: float | None = None
    ) -> bytes:
        """The answer's body; ApiException for a non-2xx answer; NotLeading for
        a write while this replica may not act."""
        guard = self.may_write
        if guard is not None and method != "GET" and "/coordination.k8s.io/" not in path and not guard():
            raise NotLeading(f"{method} {path}: this replica does not hold the leader lease")
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        await self._api_client.update_params_for_auth(headers, [], ["BearerToken"])
        async with self._session.request(
            method,
            self._host + path,
            data=body,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=timeout),
            **self._extra,
        ) as resp:
            return await read_checked(resp)

    async def post(self, path: str, body: bytes, timeout: float | None = None) -> bytes:
        return await self.request("POST", path, body, timeout=timeout)

    async def patch(self, path: str, body: bytes, content_type: str, timeout: float | None = None) -> bytes:
        return await self.request("PATCH", path, body, content_type, timeout)

    async def delete(self, path: str, body: bytes = b"", timeout: float | None = None) -> bytes:
        """DELETE, with a DeleteOptions body (e.g. a uid precondition) when given."""
        return await self.request("DELETE", path, body, timeout=timeout)


class NotLeading(Exception):
    """A write refused because this replica is not (or no longer surely) the leader."""


def _env_proxy(url: str) -> str | None:
    """The proxy HTTPS_PROXY/HTTP_PROXY name for `url`, unless NO_PROXY exempts its host."""
    parts = urllib.parse.urlsplit(url)
    if parts.hostname and urllib.request.proxy_bypass(parts.hostname):
        return None
    return urllib.request.getproxies().get(parts.scheme) or None


def encode(body: Any) -> bytes:
    """Compact JSON, as the API server reads it."""
    return orjson.dumps(body)


async def list_paged(
    api: client.ApiClient,
    path: str,
    accept: str = "application/json",
    limit: int = 500,
    list_meta: dict[str, Any] | None = None,
) -> AsyncIterator[dict[str, Any]]:
    """The items of a LIST, page by page (a quorum read per page, every page
    from the first page's snapshot). Raises ApiException for an error answer
    (404 if the kind is not served) and ValueError for an answer that is not a
    list. `list_meta` gets each page's list metadata: after the last page its
    resourceVersion is the one to watch from."""
    cont = ""
    while True:
        query: list[tuple[str, Any]] = [("limit", limit)] + ([("continue", cont)] if cont else [])
        resp = await api.call_api(
            path,
            "GET",
            query_params=query,
            header_params={"Accept": accept},
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=60,
        )
        page = orjson.loads(await read_checked(resp))
        if not str(page.get("kind", "")).endswith("List"):
            raise ValueError(f"GET {path}: the answer is a {page.get('kind')!r}, not a list")
        if list_meta is not None:
            list_meta.update(page.get("metadata") or {})
        for item in page.get("items") or []:  # an empty list has "items": null
            yield item
        cont = (page.get("metadata") or {}).get("continue") or ""
        if not cont:
            return


async def served_kubernetes(api: client.ApiClient) -> tuple[int, int] | None:
    """The served Kubernetes (major, minor), from GET /version: which words
    the native API has where its versions do not say (1.38's PodGroupError).
    None where the answer is an error (a cluster that hides /version): then
    troupe uses the words every version has. Raises for no answer at all."""
    try:
        resp = await api.call_api(
            "/version",
            "GET",
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=30,
        )
        return kubernetes_version(orjson.loads(await read_checked(resp)))
    except (ApiException, orjson.JSONDecodeError):
        return None


def kubernetes_version(info: Mapping[str, Any]) -> tuple[int, int] | None:
    """(major, minor) of a /version answer; a provider's minor such as "38+"
    reads as 38; from gitVersion where those are empty; None where neither says."""
    major, minor = (re.match(r"\d+", str(info.get(k) or "")) for k in ("major", "minor"))
    if major is not None and minor is not None:
        return int(major[0]), int(minor[0])
    found = re.match(r"v(\d+)\.(\d+)", str(info.get("gitVersion") or ""))
    return (int(found[1]), int(found[2])) if found else None


async def load_configuration(kubeconfig: str | None) -> client.Configuration:
    """--kubeconfig, else in-cluster service account, else $KUBECONFIG / ~/.kube/config."""
    cfg = client.Configuration()
    try:
        if kubeconfig:
            if not Path(kubeconfig).is_file():
                raise ConnectError(f"--kubeconfig {kubeconfig}: no such file")
            await config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=cfg)
        else:
            await config.load_kube_config(client_configuration=cfg)
    except config.ConfigException as exc:
        raise ConnectError(
            f"cannot load Kubernetes credentials ({exc}); pass --kubeconfig FILE or run in a pod with a ServiceAccount"
        ) from None
    return cfg


async def connection_info(cfg: client.Configuration) -> kopf.ConnectionInfo:
    """The same credentials in the form kopf's login handler returns."""
    raw = cfg.get_api_key_with_prefix("BearerToken")
    header: str | None = await raw if inspect.isawaitable(raw) else raw
    scheme, token = None, None
    if header:
        parts = header.split(" ", 1)
        scheme, token = (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0])
    return kopf.ConnectionInfo(
        server=cfg.host or "",
        ca_path=cfg.ssl_ca_cert,
        insecure=not cfg.verify_ssl,
        scheme=scheme,
        token=token,
        certificate_path=cfg.cert_file,
        private_key_path=cfg.key_file,
    )
