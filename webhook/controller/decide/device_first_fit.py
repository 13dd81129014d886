"""First-fit allocations: a claim's units each given the first device with room, in order. Exact where
kube-scheduler's backtracking has nothing to go back over; what kube-scheduler may find beyond it is said
where it is used (device_allocator.py)."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import TYPE_CHECKING

from webhook.controller.decide import device_capacity, device_counters
from webhook.controller.decide.device_types import DeviceId, Pool, Subrequest

if TYPE_CHECKING:
    from webhook.controller.decide.device_allocator import Allocator


def first_within_counters(
    allocator: Allocator, sub: Subrequest, pools: Sequence[Pool], also_taken: set[DeviceId]
) -> list[DeviceId] | None:
    """The first free device whose shared counters still hold what it consumes: one unit to place, so
    kube-scheduler's allocateOne has nothing to go back over (most partitions: one MIG slice a pod)."""
    totals, used, zero, extra = (
        allocator.inventory.counter_totals,
        allocator.counters_used(),
        Decimal(0),
        allocator.taken_counters(also_taken),
    )
    for pool in pools:
        for device in allocator.inventory.selected(sub, pool):
            if device.id in also_taken or not allocator.room(sub, device, None):
                continue
            driver, name = device.id[0], device.id[1]
            if all(
                (key := (driver, name, s, c)) in totals
                and totals[key] - used.get(key, zero) - extra.get(key, zero) >= amount
                for s, c, amount in device.consumes
            ):
                return [device.id]
    return None


def first_fit(
    allocator: Allocator,
    choice: Sequence[Subrequest],
    pools: Sequence[Pool],
    also_taken: set[DeviceId],
    use: dict[DeviceId, dict[str, Decimal]],
) -> list[DeviceId] | None:
    """Devices in order, each unit the first that has room. A shared device is never marked in use
    (allocateDevice), so another request of the claim may take it again while its capacity holds; one
    request's units take devices further on each (allocateOne's nextLocation, 1.36 and later). What it
    finds kube-scheduler finds too; it does not go back over its choices, so it may miss an allocation
    kube-scheduler's backtracking would find (the gang then waits, and says no devices are free)."""
    chosen: list[DeviceId] = []
    taken_here = set(also_taken)
    left = allocator.counters_left(also_taken, pools)
    for sub in choice:
        eligible = allocator.eligible(sub, pools, taken_here, use=use)
        if eligible is None:
            return None
        wanted, got = (len(eligible) if sub.all else sub.count), 0
        for device in eligible:
            if got >= wanted:
                break
            amounts = device_capacity.consumption(sub.capacity, device.capacities) or ()
            if device.shared and not allocator.room(sub, device, use):
                continue
            first_use = not device.shared or (device.id not in use and device.id not in allocator.capacity_used())
            if first_use and device.consumes and not device_counters.take_if_left(device, left):
                continue
            chosen.append(device.id)
            got += 1
            if device.shared:
                device_capacity.add(use.setdefault(device.id, {}), amounts)
            else:
                taken_here.add(device.id)
        if got < wanted:
            return None
    return chosen
