"""Writing ResourceClaims as kube-scheduler's DynamicResources PreBind does.

Two requests under optimistic concurrency: a merge patch that adds the
`resource.kubernetes.io/delete-protection` finalizer (with the cached
resourceVersion as precondition), then a merge patch of the status
subresource with the allocation and the `reservedFor` list, preconditioned
on the resourceVersion the first answer returned. A conflict (409) means
somebody else changed the claim: the error propagates, the pod's PreBind
fails and its cycle is retried with a fresh cache, so one device is never
allocated twice.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from ..api.dra import (
    API_VERSION,
    DELETE_PROTECTION_FINALIZER,
    Allocation,
    ConsumerRef,
    ResourceClaim,
    parse_resource_claim,
)
from .kube import RestClient, encode
from .ratelimit import TokenBucket

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
RELEASE_ATTEMPTS = 5


class ClaimWriter:
    def __init__(self, rest: RestClient, bucket: TokenBucket) -> None:
        self._rest = rest
        self._bucket = bucket
        self._releasing: dict[tuple[str, str, str], asyncio.Task[None]] = {}

    def _path(self, claim: ResourceClaim, status: bool = False) -> str:
        base = f"/apis/{API_VERSION}/namespaces/{claim.namespace}/resourceclaims/{claim.name}"
        return base + ("/status" if status else "")

    async def write_claim(
        self, claim: ResourceClaim, allocation: Allocation | None, consumer: ConsumerRef
    ) -> ResourceClaim:
        version = claim.resource_version
        if allocation is not None and DELETE_PROTECTION_FINALIZER not in claim.finalizers:
            await self._bucket.acquire()
            patch: dict[str, Any] = {
                "metadata": {
                    "resourceVersion": version,
                    "finalizers": [*claim.finalizers, DELETE_PROTECTION_FINALIZER],
                }
            }
            answer = json.loads(await self._rest.patch(self._path(claim), encode(patch), MERGE_PATCH))
            version = str((answer.get("metadata") or {}).get("resourceVersion", version))
        reserved = [r.to_api() for r in claim.reserved_for if r.uid != consumer.uid] + [consumer.to_api()]
        status: dict[str, Any] = {"reservedFor": reserved}
        if allocation is not None:
            status["allocation"] = allocation.to_api()
        await self._bucket.acquire()
        answer = await self._rest.patch(
            self._path(claim, status=True),
            encode({"metadata": {"resourceVersion": version}, "status": status}),
            MERGE_PATCH,
        )
        log.info(
            "claim %s/%s: %s for %s %s",
            claim.namespace,
            claim.name,
            f"allocated {len(allocation.results)} device(s)" if allocation is not None else "reserved",
            consumer.resource,
            consumer.name,
        )
        return parse_resource_claim(json.loads(answer))

    # --------------------------------------------------------------- release

    def release(self, claim: ResourceClaim, uid: str) -> None:
        """Take `uid` out of the claim's reservedFor, in the background; a
        claim left reserved for no one is deallocated and loses troupe's
        finalizer. Conflicts re-read the claim and retry."""
        key = (claim.namespace, claim.name, uid)
        if key in self._releasing:
            return
        task = asyncio.get_running_loop().create_task(self._release(claim, uid), name=f"release {claim.name}")
        self._releasing[key] = task
        task.add_done_callback(lambda _: self._releasing.pop(key, None))

    async def _release(self, claim: ResourceClaim, uid: str) -> None:
        current: ResourceClaim | None = claim
        for attempt in range(RELEASE_ATTEMPTS):
            try:
                if current is None:
                    await self._bucket.acquire()
                    current = parse_resource_claim(json.loads(await self._rest.request("GET", self._path(claim), b"")))
                await self._release_once(current, uid)
                return
            except ApiException as exc:
                if exc.status == 404:
                    return  # the claim is gone: nothing holds the devices
                if exc.status != 409 or attempt == RELEASE_ATTEMPTS - 1:
                    log.error("claim %s/%s: releasing %s failed: %s", claim.namespace, claim.name, uid, exc.reason)
                    return
                current = None  # somebody changed it: read it again
            except Exception:  # never let a background task die silently
                log.exception("claim %s/%s: releasing %s failed", claim.namespace, claim.name, uid)
                return

    async def _release_once(self, claim: ResourceClaim, uid: str) -> None:
        reserved = [r.to_api() for r in claim.reserved_for if r.uid != uid]
        version = claim.resource_version
        if len(reserved) != len(claim.reserved_for):
            status: dict[str, Any] = {"reservedFor": reserved or None}
            if not reserved:
                status["allocation"] = None
            await self._bucket.acquire()
            answer = json.loads(
                await self._rest.patch(
                    self._path(claim, status=True),
                    encode({"metadata": {"resourceVersion": version}, "status": status}),
                    MERGE_PATCH,
                )
            )
            version = str((answer.get("metadata") or {}).get("resourceVersion", version))
        if not reserved and DELETE_PROTECTION_FINALIZER in claim.finalizers:
            finalizers = [f for f in claim.finalizers if f != DELETE_PROTECTION_FINALIZER]
            await self._bucket.acquire()
            await self._rest.patch(
                self._path(claim),
                encode({"metadata": {"resourceVersion": version, "finalizers": finalizers or None}}),
                MERGE_PATCH,
            )
        log.info(
            "claim %s/%s: released by %s%s",
            claim.namespace,
            claim.name,
            uid,
            "; deallocated" if not reserved else "",
        )
