"""A lean API client for the end-to-end benchmark: aiohttp with the admin
token, JSON in and out, a few retries. Shared by the pod creator, the bind
watcher and the raw bind loop (bench/e2e_rawbind.py), so none of them pays
for kubernetes_asyncio's model (de)serialization."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

RETRY_STATUSES = {429, 500, 502, 503, 504}


@dataclass(frozen=True)
class Credentials:
    server: str
    token: str
    ca_pem: str

    @classmethod
    def from_kubeconfig(cls, path: str | Path) -> Credentials:
        """The first cluster and user of a token kubeconfig (what hack/localcluster writes)."""
        doc = yaml.safe_load(Path(path).read_text())
        ctx_name = doc.get("current-context")
        ctx = next((c["context"] for c in doc.get("contexts", []) if c["name"] == ctx_name), None)
        cluster = next(c["cluster"] for c in doc["clusters"] if ctx is None or c["name"] == ctx["cluster"])
        user = next(u["user"] for u in doc["users"] if ctx is None or u["name"] == ctx["user"])
        return cls(
            server=cluster["server"].rstrip("/"),
            token=user["token"],
            ca_pem=base64.b64decode(cluster["certificate-authority-data"]).decode(),
        )

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cadata=self.ca_pem)


class ApiError(RuntimeError):
    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:500]}")
        self.status = status
        self.body = body


class Kube:
    """``await kube.request("POST", "/api/v1/namespaces/x/pods", body)``: the
    decoded JSON reply, or ApiError. Retries 429/5xx and connection errors
    ``retries`` times with a short backoff (Retry-After honoured)."""

    def __init__(self, creds: Credentials, connections: int = 100, timeout: float = 120.0) -> None:
        self.creds = creds
        self._ssl = creds.ssl_context()
        self._headers = {"Authorization": f"Bearer {creds.token}", "Accept": "application/json"}
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._connections, ssl=self._ssl),
                headers=self._headers,
                timeout=self._timeout,
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        params: dict[str, str] | None = None,
        *,
        retries: int = 5,
        ok: tuple[int, ...] = (),
        decode: bool = True,
        content_type: str = "application/json",
    ) -> Any:
        """``ok``: extra statuses that are not errors (e.g. 409); the reply is
        then ``{"_status": code}``. ``decode=False`` skips reading the JSON reply."""
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        headers = {"Content-Type": content_type} if data is not None else None
        delay = 0.2
        for attempt in range(retries + 1):
            try:
                async with self.session.request(
                    method, self.creds.server + path, data=data, params=params, headers=headers
                ) as resp:
                    if resp.status < 300:
                        if not decode:
                            await resp.release()
                            return None
                        return await resp.json(content_type=None)
                    text = await resp.text()
                    if resp.status in ok:
                        return {"_status": resp.status}
                    if resp.status in RETRY_STATUSES and attempt < retries:
                        try:
                            wait = float(resp.headers.get("Retry-After", delay))
                        except ValueError:
                            wait = delay
                        await asyncio.sleep(min(max(wait, 0.05), 5.0))
                        delay = min(delay * 2, 5.0)
                        continue
                    raise ApiError(method, path, resp.status, text)
            except (TimeoutError, aiohttp.ClientConnectionError, aiohttp.ClientPayloadError):
                if attempt >= retries:
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
        raise AssertionError("unreachable")

    async def list_all(
        self, path: str, params: dict[str, str] | None = None, page: int = 5000
    ) -> tuple[list[dict], str]:
        """Every item of a (paginated) list, and the list's resourceVersion."""
        items: list[dict] = []
        cont = ""
        while True:
            p = dict(params or {}, limit=str(page))
            if cont:
                p["continue"] = cont
            reply = await self.request("GET", path, params=p)
            items.extend(reply.get("items") or [])
            cont = (reply.get("metadata") or {}).get("continue") or ""
            if not cont:
                return items, (reply.get("metadata") or {}).get("resourceVersion", "")


_REQUEST_LABEL = re.compile(r'(\w+)="([^"]*)"')


def parse_request_counts(text: str) -> dict[str, float]:
    """kube-apiserver's `apiserver_request_total` summed by "VERB resource[/subresource]" (every
    group, scope, code and component), from its /metrics text. Watches count as one request each
    (when opened), not per event."""
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels_text, _, value = line.rpartition(" ")
        labels = dict(_REQUEST_LABEL.findall(labels_text))
        what = labels.get("resource", "")
        if labels.get("subresource"):
            what += "/" + labels["subresource"]
        key = f"{labels.get('verb', '?')} {what}"
        counts[key] = counts.get(key, 0.0) + float(value)
    return counts


async def request_counts(kube: Kube) -> dict[str, float] | None:
    """parse_request_counts of the API server now; None if /metrics cannot be read."""
    try:
        async with kube.session.get(kube.creds.server + "/metrics") as resp:
            if resp.status != 200:
                return None
            return parse_request_counts(await resp.text())
    except (TimeoutError, aiohttp.ClientError):
        return None


def request_delta(before: dict[str, float] | None, after: dict[str, float] | None) -> dict[str, int] | None:
    """Requests made between two request_counts, by kind; kinds with none left out."""
    if before is None or after is None:
        return None
    delta = {k: int(round(v - before.get(k, 0.0))) for k, v in after.items()}
    return {k: n for k, n in sorted(delta.items()) if n > 0}
