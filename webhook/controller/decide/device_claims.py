"""The cluster's ResourceClaims as an inventory reads them: which pod each was made for, the devices it
holds whole and its shares of devices that allow multiple allocations. Parsed once per version of the
claims' list and shared, never changed, by every inventory built while it holds: a slice republished
then costs its own pool, not every claim of the cluster parsed again (15,000 allocated claims: about
60 ms a pass, bench/devices.py --allocated 3)."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field

from webhook.controller.decide import device_capacity
from webhook.controller.decide.device_types import DeviceId, allocation_results
from webhook.gangs.model import Obj


@dataclass(frozen=True)
class Claims:
    by_name: dict[tuple[str, str], Obj] = field(default_factory=dict)  # (namespace, name) -> the claim
    owners: dict[str, str] = field(default_factory=dict)  # claim -> uid of the pod it was made for
    taken: dict[DeviceId, str] = field(default_factory=dict)  # device -> the claim holding it
    # a device allowing multiple allocations -> its shares: (the claim holding it, what it consumes)
    shares: dict[DeviceId, list[tuple[str, device_capacity.Consumption]]] = field(default_factory=dict)

    # worked out once per version of the list, not per inventory: every slice republished makes a new
    # inventory, and 15,000 held claims walked for each cost a steady pass 1-3 ms (bench/devices.py)
    @functools.cached_property
    def holding(self) -> frozenset[str]:
        """The claims that hold a device, whole or a share of it."""
        return frozenset({*self.taken.values(), *(claim for held in self.shares.values() for claim, _ in held)})

    @functools.cached_property
    def allocated_pods(self) -> frozenset[str]:
        """The uids of the pods whose own claims are allocated (kube-scheduler has placed them)."""
        holding = self.holding
        return frozenset({uid for claim, uid in self.owners.items() if claim in holding})

    @functools.cached_property
    def held_in_pool(self) -> dict[tuple[str, str], dict[str, str]]:
        """Each pool's devices held whole (by driver and pool): device name -> the claim holding it."""
        found: dict[tuple[str, str], dict[str, str]] = {}
        for (driver, pool, device), claim in self.taken.items():
            found.setdefault((driver, pool), {})[device] = claim
        return found

    @functools.cached_property
    def pools_shared(self) -> frozenset[tuple[str, str]]:
        """The pools (driver, pool) with a device that claims hold shares of."""
        return frozenset((driver, pool) for driver, pool, _ in self.shares)

    @functools.cached_property
    def by_pod(self) -> dict[str, list[str]]:
        """The claims made for each pod, by its uid."""
        found: dict[str, list[str]] = {}
        for claim, uid in self.owners.items():
            found.setdefault(uid, []).append(claim)
        return found

    @functools.cached_property
    def devices_held(self) -> dict[str, list[DeviceId]]:
        """What each allocated claim holds: its devices, and its shares of devices allowing several."""
        found: dict[str, list[DeviceId]] = {}
        for device, claim in [*self.taken.items(), *((d, c) for d, held in self.shares.items() for c, _ in held)]:
            found.setdefault(claim, []).append(device)
        return found


def claims_of(claims: Iterable[Obj]) -> Claims:
    found = Claims()
    for claim in claims:
        meta = claim.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        name = f"{key[0]}/{key[1]}"
        found.by_name[key] = claim
        owner = next((o for o in meta.get("ownerReferences") or [] if o.get("kind") == "Pod"), None)
        if owner is not None:
            found.owners[name] = str(owner.get("uid") or "")
        for device, share in allocation_results(claim):
            if share is None:
                found.taken[device] = name
            else:
                found.shares.setdefault(device, []).append((name, share))
    return found
