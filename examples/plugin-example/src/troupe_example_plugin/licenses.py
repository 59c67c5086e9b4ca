"""Reserve/Unreserve and PreBind: a pod labelled `example.com/license: NAME`
needs a seat of that license while it runs.

- Reserve takes a seat in the plugin's memory when the pod is placed in a
  cycle, so the next pod of the same cycle (or of the next cycle, before any
  bind has happened) sees it gone. No seat left: the pod does not fit.
- Unreserve gives the seat back when the placement is dropped: the gang did
  not reach minCount, PreBind or the bind failed, or the pod was deleted.
- PreBind checks the seat out of the license server (the one point that may
  do I/O; here an in-process `LicenseServer`, in real life an API call). A
  refusal fails that pod's binding: troupe unreserves and requeues it.

Seats are counted per scheduler process (`LicenseServer.seats`); a real
plugin would also release seats when pods finish.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from scheduler.api.records import PodInfo
from scheduler.framework.interface import CycleState, Handle, PreBindPlugin, ReservePlugin, Status

LICENSE_LABEL = "example.com/license"
_STATE_KEY = "LicenseSeats/reserved"


class LicenseServer:
    """Seats per license name; `refuse` names pods whose checkout fails."""

    def __init__(self, seats: dict[str, int]) -> None:
        self.seats = dict(seats)
        self.checked_out: dict[str, str] = {}  # pod uid -> license
        self.refuse: set[str] = set()  # pod names

    async def checkout(self, pod: PodInfo, license_name: str) -> bool:
        await asyncio.sleep(0)  # a real server is a network round trip away
        if pod.name in self.refuse:
            return False
        self.checked_out[pod.uid] = license_name
        return True


class LicenseSeats(ReservePlugin, PreBindPlugin):
    name = "LicenseSeats"
    # One server for the process (a real plugin would build a client from its args).
    server: ClassVar[LicenseServer] = LicenseServer({})

    def __init__(self, args: Any, handle: Handle) -> None:
        super().__init__(args, handle)
        self.in_use: dict[str, int] = {}  # license -> seats reserved or checked out

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        name = pod.labels.get(LICENSE_LABEL)
        if name is None:
            return Status.success()
        if self.in_use.get(name, 0) >= self.server.seats.get(name, 0):
            return Status.unschedulable(f"no seat of license {name} left ({self.server.seats.get(name, 0)} in all)")
        self.in_use[name] = self.in_use.get(name, 0) + 1
        state[_STATE_KEY] = name  # CycleState is per pod: Unreserve and PreBind read it
        return Status.success()

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        name = state.pop(_STATE_KEY, None)  # idempotent: a second call finds nothing
        if name is not None:
            self.in_use[name] -= 1

    async def pre_bind(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        name = state.get(_STATE_KEY)
        if name is None:
            return Status.success()
        if not await self.server.checkout(pod, name):
            return Status.unschedulable(f"the license server refused a seat of {name}")
        return Status.success()
