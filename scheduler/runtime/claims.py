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
import functools
import json
import logging
from collections.abc import Sequence
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from ..api.dra import (
    API_VERSION,
    DELETE_PROTECTION_FINALIZER,
    POD_CLAIM_NAME_ANNOTATION,
    Allocation,
    ConsumerRef,
    ResourceClaim,
    group_claim_name,
    parse_resource_claim,
)
from ..api.podgroup import PodGroup
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
        self._making: dict[str, asyncio.Task[None]] = {}  # PodGroup uid -> its claims being made

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

    # ----------------------------------------------------- PodGroup claims

    def make_group_claims(self, group: PodGroup, entries: Sequence[tuple[str, str]]) -> None:
        """One task per PodGroup, its entries one after another (each status
        patch carries the names recorded so far)."""
        uid = group.metadata.uid
        if uid in self._making:
            return
        task = asyncio.get_running_loop().create_task(
            self._make_group_claims(group, list(entries)), name=f"claims of {group.metadata.name}"
        )
        self._making[uid] = task
        task.add_done_callback(functools.partial(self._made, uid))

    def _made(self, uid: str, _: asyncio.Task[None]) -> None:
        self._making.pop(uid, None)

    async def _make_group_claims(self, group: PodGroup, entries: list[tuple[str, str]]) -> None:
        recorded = {s.name: s.resource_claim_name for s in group.status.resource_claim_statuses}
        for name, template in entries:
            made = await self._make_group_claim(group, name, template)
            if made is None:
                continue
            recorded[name] = made
            ns, group_name = group.metadata.namespace, group.metadata.name
            statuses = [{"name": n, **({"resourceClaimName": c} if c else {})} for n, c in recorded.items()]
            try:
                await self._bucket.acquire()
                await self._rest.patch(
                    f"/apis/{group.api_version}/namespaces/{ns}/podgroups/{group_name}/status",
                    encode({"status": {"resourceClaimStatuses": statuses}}),
                    MERGE_PATCH,
                )
            except ApiException as exc:
                log.error("PodGroup %s/%s: recording claim %s failed: %s", ns, group_name, made, exc.reason)

    async def _make_group_claim(self, group: PodGroup, name: str, template: str) -> str | None:
        """The claim's name once it exists (made now or before), or None."""
        ns, group_name, uid = group.metadata.namespace, group.metadata.name, group.metadata.uid
        claim_name = group_claim_name(group_name, name)
        base = f"/apis/{API_VERSION}/namespaces/{ns}"
        try:
            await self._bucket.acquire()
            body = json.loads(await self._rest.request("GET", f"{base}/resourceclaimtemplates/{template}", b""))
            template_spec = body.get("spec") or {}
            template_meta = template_spec.get("metadata") or {}
            claim = {
                "apiVersion": API_VERSION,
                "kind": "ResourceClaim",
                "metadata": {
                    "name": claim_name,
                    "namespace": ns,
                    "labels": template_meta.get("labels") or {},
                    "annotations": {**(template_meta.get("annotations") or {}), POD_CLAIM_NAME_ANNOTATION: name},
                    "ownerReferences": [
                        {
                            "apiVersion": group.api_version,
                            "kind": "PodGroup",
                            "name": group_name,
                            "uid": uid,
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": template_spec.get("spec") or {},
            }
            try:
                await self._bucket.acquire()
                await self._rest.post(f"{base}/resourceclaims", encode(claim))
                log.info("PodGroup %s/%s: claim %s made from template %s", ns, group_name, claim_name, template)
            except ApiException as exc:
                if exc.status != 409:
                    raise
                await self._bucket.acquire()
                existing = json.loads(await self._rest.request("GET", f"{base}/resourceclaims/{claim_name}", b""))
                owners = [o.get("uid") for o in (existing.get("metadata") or {}).get("ownerReferences") or ()]
                if uid not in owners:
                    log.error(
                        "PodGroup %s/%s: claim %s exists and is not the group's; its entry %s waits",
                        ns,
                        group_name,
                        claim_name,
                        name,
                    )
                    return None
            return claim_name
        except ApiException as exc:
            log.error(
                "PodGroup %s/%s: making claim %s from template %s failed: %s",
                ns,
                group_name,
                claim_name,
                template,
                exc.reason,
            )
        except Exception:  # never let a background task die silently
            log.exception("PodGroup %s/%s: making claim %s failed", ns, group_name, claim_name)
        return None

    def delete_group_claims(self, group_uid: str, claims: Sequence[ResourceClaim]) -> None:
        for claim in claims:
            asyncio.get_running_loop().create_task(
                self._delete_group_claim(group_uid, claim), name=f"delete {claim.name}"
            )

    async def _delete_group_claim(self, group_uid: str, claim: ResourceClaim) -> None:
        try:
            await self._release(claim, group_uid)  # deallocated and unprotected first
            await self._bucket.acquire()
            await self._rest.delete(
                self._path(claim), encode({"preconditions": {"uid": claim.uid}, "propagationPolicy": "Background"})
            )
            log.info("claim %s/%s deleted with its PodGroup", claim.namespace, claim.name)
        except ApiException as exc:
            if exc.status != 404:
                log.error("claim %s/%s: delete failed: %s", claim.namespace, claim.name, exc.reason)
        except Exception:
            log.exception("claim %s/%s: delete failed", claim.namespace, claim.name)
