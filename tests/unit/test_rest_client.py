"""RestClient, troupe's path for binds, Events and status writes, against a
small local HTTP server: what it sends (method, path, body, content type,
the Configuration's token) and how it reports an error answer."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aiohttp import web
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from scheduler.runtime.kube import RestClient, _env_proxy, encode, kubernetes_version, served_kubernetes


@pytest.fixture
async def server():
    seen: list[dict[str, Any]] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append(
            {
                "method": request.method,
                "path": request.path,
                "body": await request.read(),
                "content_type": request.headers.get("Content-Type"),
                "authorization": request.headers.get("Authorization"),
            }
        )
        if request.path == "/version":
            return web.json_response({"major": "1", "minor": "38", "gitVersion": "v1.38.0-beta.0"})
        if request.path.endswith("/missing"):
            return web.json_response(
                {"kind": "Status", "code": 404, "reason": "NotFound", "message": "gone"}, status=404
            )
        return web.json_response({"kind": "Status", "code": 201}, status=201)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}", seen
    await runner.cleanup()


async def test_sends_the_encoded_body_with_the_configurations_token(server):
    url, seen = server
    cfg = client.Configuration(host=url)
    cfg.api_key = {"BearerToken": "t0k"}
    cfg.api_key_prefix = {"BearerToken": "Bearer"}
    api = client.ApiClient(cfg)
    rest = RestClient(api)
    try:
        await rest.post("/api/v1/namespaces/ns/pods/p/binding", encode({"a": [1, 2]}))
        cfg.api_key["BearerToken"] = "refreshed"  # a refresh hook would do this
        await rest.patch("/apis/x/v1/namespaces/ns/things/t/status", b'{"status":{}}', "application/merge-patch+json")
    finally:
        await rest.close()
        await api.close()
    assert [(s["method"], s["path"]) for s in seen] == [
        ("POST", "/api/v1/namespaces/ns/pods/p/binding"),
        ("PATCH", "/apis/x/v1/namespaces/ns/things/t/status"),
    ]
    assert json.loads(seen[0]["body"]) == {"a": [1, 2]} and seen[0]["content_type"] == "application/json"
    assert seen[1]["content_type"] == "application/merge-patch+json"
    assert [s["authorization"] for s in seen] == ["Bearer t0k", "Bearer refreshed"]


async def test_an_error_answer_raises_apiexception_with_status_and_body(server):
    url, _ = server
    api = client.ApiClient(client.Configuration(host=url))
    rest = RestClient(api)
    try:
        with pytest.raises(ApiException) as info:
            await rest.post("/api/v1/missing", b"{}")
    finally:
        await rest.close()
        await api.close()
    assert info.value.status == 404 and json.loads(info.value.body)["message"] == "gone"


async def test_closing_it_leaves_the_api_clients_connections_open(server):
    url, seen = server
    api = client.ApiClient(client.Configuration(host=url))
    rest = RestClient(api)
    await rest.post("/a", b"{}")
    await rest.close()
    assert not api.rest_client.pool_manager.connector.closed
    await api.close()


async def test_the_served_kubernetes_version_is_read_from_slash_version(server):
    url, seen = server
    api = client.ApiClient(client.Configuration(host=url))
    try:
        assert await served_kubernetes(api) == (1, 38)
    finally:
        await api.close()
    assert [(s["method"], s["path"]) for s in seen] == [("GET", "/version")]


@pytest.mark.parametrize(
    ("info", "version"),
    [
        ({"major": "1", "minor": "38", "gitVersion": "v1.38.0-beta.0"}, (1, 38)),
        ({"major": "1", "minor": "37+", "gitVersion": "v1.37.2-eks-abc"}, (1, 37)),  # a provider's build
        ({"major": "", "minor": "", "gitVersion": "v1.38.1"}, (1, 38)),
        ({"kind": "Status"}, None),
    ],
)
def test_a_version_answer_reads_as_major_and_minor(info, version):
    assert kubernetes_version(info) == version


def test_the_proxy_is_taken_from_the_environment_unless_no_proxy_exempts_the_host(monkeypatch):
    for var in (
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "NO_PROXY",
        "no_proxy",
        "ALL_PROXY",
        "all_proxy",
    ):
        monkeypatch.delenv(var, raising=False)
    assert _env_proxy("https://api.example:6443") is None
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    assert _env_proxy("https://api.example:6443") == "http://proxy.example:3128"
    monkeypatch.setenv("NO_PROXY", "api.example")
    assert _env_proxy("https://api.example:6443") is None
