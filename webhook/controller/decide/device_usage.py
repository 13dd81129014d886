"""What the devices allocated to claims consume: the pools' shared counters (partitionable devices) and
the capacity of devices that allow multiple allocations, with the claims of some pods left out (a gang
member's shape holds its own devices: Inventory.class_totals).

Every node's count asks for it, so it is worked out once per set of pods left out and kept: walking
every allocated device for each node made a full cluster's count quadratic (2,000 nodes with 12,000
devices allocated: 50 s for one count of the nodes, 97 ms once kept)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from webhook.controller.decide import device_capacity, device_counters
from webhook.controller.decide.device_lookup import DevicesById
from webhook.controller.decide.device_types import DeviceId, Pool

MAX_REMEMBERED = 8  # sets of pods left out whose usage is kept (a pass asks one or two)
Counters = dict[device_counters.CounterKey, Decimal]
Capacity = dict[DeviceId, dict[str, Decimal]]


@dataclass
class Usages:
    taken: Mapping[DeviceId, str]  # device -> the claim holding it
    shares: Mapping[DeviceId, list[tuple[str, device_capacity.Consumption]]]  # a shared device's claims
    owners: Mapping[str, str]  # claim -> uid of the pod it was made for
    consuming: DevicesById  # the devices that consume shared counters
    holders: frozenset[str]  # the pods whose own claims hold devices (Claims.allocated_pods)
    # by the pods left out (the gang members' uids: the index makes a new set of them at each node's
    # count, so by content, not identity: a node relabelled worked out every allocated device's counters
    # again, 40 ms with 15,000 allocated in bench/devices.py --allocated 3 --shape counters)
    _kept: dict[frozenset[str], tuple[Counters, Capacity]] = field(default_factory=dict)

    def of(self, left_out: Collection[str]) -> tuple[Counters, Capacity]:
        """(counters used, capacity used), read only: a caller that takes more writes over them
        (device_counters.written_over). Kept by those of the pods left out whose claims hold devices
        (leaving out any other changes nothing): the nodes' count and the devices check of a gang whose
        pods hold nothing yet ask one usage (15,000 allocated devices walked once, not twice, at a cold
        start)."""
        key = self.holders.intersection(left_out) if left_out else frozenset()
        kept = self._kept.get(key)
        if kept is not None:
            return kept
        capacity = self._capacity(key)
        counters = self._counters(key, capacity)
        self._kept[key] = (counters, capacity)
        while len(self._kept) > MAX_REMEMBERED:
            del self._kept[next(iter(self._kept))]  # the oldest
        return counters, capacity

    def _counters(self, left_out: Collection[str], capacity: Capacity) -> Counters:
        used: Counters = {}
        consumes = self.consuming.consumes
        for device_id, claim in self.taken.items():
            if not (left_out and self.owners.get(claim) in left_out):
                amounts = consumes(device_id)
                if amounts:
                    device_counters.take(device_id[0], device_id[1], amounts, used)
        # a shared device consumes its counters once, however many shares it has (allocateDevice's
        # skipCounterCheck)
        for device_id in capacity:
            amounts = consumes(device_id)
            if amounts:
                device_counters.take(device_id[0], device_id[1], amounts, used)
        return used

    def _capacity(self, left_out: Collection[str]) -> Capacity:
        used: Capacity = {}
        for device, shares in self.shares.items():
            for claim, amounts in shares:
                if not (left_out and self.owners.get(claim) in left_out):
                    device_capacity.add(used.setdefault(device, {}), amounts)
        return used

    def carry(self, before: Usages, gone: Sequence[Pool], came: Sequence[Pool]) -> None:
        """What `before` worked out, for claims that are the same (parsed once per version of their list)
        and pools that differ by `gone` and `came`: the part of those pools' devices taken out and put
        in, not every allocated device walked again (a slice republished, 15,000 allocated: 46 ms)."""
        if self.taken is not before.taken or self.shares is not before.shares or self.owners is not before.owners:
            return
        for left_out, (counters, capacity) in before._kept.items():
            counters = dict(counters)
            for pools, sign in ((gone, -1), (came, 1)):
                for device in (d for pool in pools for d in pool.consuming):
                    claim = self.taken.get(device.id)
                    # as _counters counts it: once held by a claim not left out, once more if shared
                    times = int(claim is not None and self.owners.get(claim) not in left_out) + int(
                        device.id in capacity
                    )
                    for _ in range(times):
                        device_counters.take(device.id[0], device.id[1], device.consumes, counters, sign)
            self._kept[left_out] = (counters, capacity)
