"""Connecting to the API server: one credential source for our client and kopf's."""

from __future__ import annotations

import inspect
import os
from pathlib import Path
import json
from typing import Any, AsyncIterator

import kopf
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
        data = await resp.read()
    finally:
        resp.release()
    if not 200 <= resp.status <= 299:
        raise ApiException(http_resp=RESTResponse(resp, data))
    return data


async def list_paged(
    api: client.ApiClient, path: str, accept: str = "application/json", limit: int = 500,
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
            path, "GET", query_params=query, header_params={"Accept": accept},
            auth_settings=["BearerToken"], _preload_content=False, _request_timeout=60,
        )
        page = json.loads(await read_checked(resp))
        if not str(page.get("kind", "")).endswith("List"):
            raise ValueError(f"GET {path}: the answer is a {page.get('kind')!r}, not a list")
        if list_meta is not None:
            list_meta.update(page.get("metadata") or {})
        for item in page.get("items") or []:  # an empty list has "items": null
            yield item
        cont = (page.get("metadata") or {}).get("continue") or ""
        if not cont:
            return


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
    header = cfg.get_api_key_with_prefix("BearerToken")
    if inspect.isawaitable(header):
        header = await header
    scheme, token = None, None
    if header:
        parts = header.split(" ", 1)
        scheme, token = (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0])
    return kopf.ConnectionInfo(
        server=cfg.host,
        ca_path=cfg.ssl_ca_cert,
        insecure=not cfg.verify_ssl,
        scheme=scheme,
        token=token,
        certificate_path=cfg.cert_file,
        private_key_path=cfg.key_file,
    )
