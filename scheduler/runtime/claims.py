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

import json
import logging
from typing import Any

from ..api.dra import API_VERSION, DELETE_PROTECTION_FINALIZER, Allocation, ConsumerRef, ResourceClaim
from .kube import RestClient, encode
from .ratelimit import TokenBucket

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"


class ClaimWriter:
    def __init__(self, rest: RestClient, bucket: TokenBucket) -> None:
        self._rest = rest
        self._bucket = bucket

    def _path(self, claim: ResourceClaim, status: bool = False) -> str:
        base = f"/apis/{API_VERSION}/namespaces/{claim.namespace}/resourceclaims/{claim.name}"
        return base + ("/status" if status else "")

    async def write_claim(self, claim: ResourceClaim, allocation: Allocation | None, consumer: ConsumerRef) -> None:
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
        await self._rest.patch(
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
