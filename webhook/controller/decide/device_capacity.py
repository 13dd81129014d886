"""Consumable capacity (DRAConsumableCapacity, beta and on by default in Kubernetes 1.36): a device that
allows multiple allocations is shared by claims, each consuming part of its capacity, as kube-scheduler's
allocator counts it (k8s.io/dynamic-resource-allocation structured/internal/incubating:
consumable_capacity.go, allocator_incubating.go CmpRequestOverCapacity; the scheduler plugin's
allocateddevices.go for what allocated claims hold).

- a request's `capacity.requests` names capacities of the device; one the device does not define makes
  the device unselectable for it;
- what a request consumes of each capacity the device defines: its own amount, rounded up by the
  capacity's `requestPolicy` (`validRange` from `min` in `step`s, or the next of `validValues`); a
  capacity it does not name consumes the policy's `default`, or the whole `value` when there is none;
- an amount over `validRange.max`, or above every valid value, violates the policy: not this device;
- the device fits while, for every capacity, what its allocations consume plus this request's is at most
  `value`; a device that does not allow multiple allocations is taken whole, the request still has to
  fit in it;
- a shared device's allocations are `status.allocation.devices.results` entries with a `shareID`; their
  `consumedCapacity` is what they hold; an `adminAccess` result holds nothing.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from webhook import resources

if TYPE_CHECKING:
    from webhook.controller.decide.device_types import Device, DeviceId, Subrequest

Consumption = tuple[tuple[str, Decimal], ...]  # (capacity name, amount), in the device's order


@dataclass(frozen=True)
class Capacity:
    name: str
    value: Decimal
    default: Decimal | None = None
    valid_values: tuple[Decimal, ...] = ()
    minimum: Decimal | None = None
    maximum: Decimal | None = None
    step: Decimal | None = None


def capacities(raw: Any) -> tuple[Capacity, ...]:
    """A device's `capacity` map; raises ValueError naming an unreadable quantity."""
    found = []
    for name, entry in raw.items() if isinstance(raw, Mapping) else ():
        if not isinstance(entry, Mapping):
            continue
        policy: Mapping[str, Any] = _object(entry.get("requestPolicy"))
        valid_range: Mapping[str, Any] = _object(policy.get("validRange"))
        found.append(
            Capacity(
                str(name),
                _quantity(entry.get("value"), name, "value"),
                _optional(policy.get("default"), name, "requestPolicy.default"),
                tuple(_quantity(v, name, "requestPolicy.validValues") for v in policy.get("validValues") or []),
                _optional(valid_range.get("min"), name, "requestPolicy.validRange.min"),
                _optional(valid_range.get("max"), name, "requestPolicy.validRange.max"),
                _optional(valid_range.get("step"), name, "requestPolicy.validRange.step"),
            )
        )
    return tuple(found)


def requested(raw: Any) -> Consumption:
    """A request's `capacity.requests`; raises ValueError naming an unreadable quantity."""
    asked = (raw or {}).get("requests") if isinstance(raw, Mapping) else None
    return tuple(
        (str(name), _quantity(amount, name, "capacity.requests"))
        for name, amount in (asked.items() if isinstance(asked, Mapping) else ())
    )


@functools.lru_cache(maxsize=4096)
def consumption(asked: Consumption, device: tuple[Capacity, ...]) -> Consumption | None:
    """What a request consumes of each of the device's capacities; None when it cannot be allocated
    there (a capacity the device does not define, or a policy violated)."""
    wanted = dict(asked)
    if any(name not in {c.name for c in device} for name in wanted):
        return None
    found = []
    for capacity in device:
        amount = _consumed(wanted.get(capacity.name), capacity)
        if _violates(amount, capacity):
            return None
        found.append((capacity.name, amount))
    return tuple(found)


def fits(amounts: Consumption, device: Sequence[Capacity], used: Mapping[str, Decimal]) -> bool:
    limits = {c.name: c.value for c in device}
    return all(used.get(name, Decimal(0)) + amount <= limits[name] for name, amount in amounts)


def add(used: dict[str, Decimal], amounts: Consumption) -> None:
    for name, amount in amounts:
        used[name] = used.get(name, Decimal(0)) + amount


def added(used: Mapping[str, Decimal], amounts: Consumption) -> dict[str, Decimal]:
    """`used` with `amounts` added, a new map (`used` may be shared)."""
    found = dict(used)
    add(found, amounts)
    return found


def claims_held(
    devices: Sequence[Device], sub: Subrequest, used: Mapping[DeviceId, Mapping[str, Decimal]], limit: int
) -> int:
    """How many claims of one request (`sub`: its count and capacity requests) these free devices hold, a
    shared one serving as many claims as its capacity holds: what allocating the claim again and again
    finds, device by device, when nothing ties the units together (no constraint, counter or `All`). One
    claim's units take distinct devices (allocateOne's nextLocation, 1.36 and later): each claim the
    first `count` devices with room, in order, where a shared device may serve more than one claim."""
    consumed, times = _consumption_per_map(sub.capacity), []
    for device in devices:
        amounts = consumed(device.capacities)
        if amounts is None:
            continue
        if not device.shared:
            times.append(int(fits(amounts, device.capacities, {})))
            continue
        times.append(times_fitting(amounts, device.capacities, used.get(device.id, {}), limit))
    if sub.count == 1 or max(times, default=0) <= 1:  # each device serves one unit: any `count` of them do
        return min(limit, sum(times) // sub.count)
    claims, left = 0, [t for t in times if t]
    while claims < limit and len(left) >= sub.count:  # the first `count` devices with room take one claim
        left = [t - 1 for t in left[: sub.count]] + left[sub.count :]
        left = [t for t in left if t]
        claims += 1
    return claims


def units_of(
    devices: Sequence[Device], used: Mapping[DeviceId, Mapping[str, Decimal]], limit: int
) -> dict[DeviceId, int]:
    """Each device's units for requests without capacity requests: one taken whole, or as many more as a
    shared one holds, each consuming its default, else all of it (none where its default breaks its own
    policy), at most `limit`."""
    consumed, found = _consumption_per_map(()), {}
    for device in devices:
        if not device.shared:
            found[device.id] = 1
            continue
        amounts = consumed(device.capacities)
        left = used.get(device.id, {})
        found[device.id] = 0 if amounts is None else times_fitting(amounts, device.capacities, left, limit)
    return found


def _consumption_per_map(wanted: Consumption) -> Callable[[Sequence[Capacity]], Consumption | None]:
    """`consumption` of `wanted`, worked out once per capacity map (a model's devices share one object:
    device_parsed.py) for as long as the caller holds the devices."""
    seen: dict[int, Consumption | None] = {}

    def consumed(device: Sequence[Capacity]) -> Consumption | None:
        key = id(device)
        if key not in seen:
            seen[key] = consumption(wanted, device)
        return seen[key]

    return consumed


def times_fitting(amounts: Consumption, device: Sequence[Capacity], used: Mapping[str, Decimal], limit: int) -> int:
    """How many times `amounts` fit in what the device has left, one after the other (`fits`, then `add`),
    at most `limit`: a division per capacity (40,000 devices of four shares each were taken share by
    share at a cold count)."""
    limits, count = {c.name: c.value for c in device}, limit
    for name, amount in amounts:
        left = limits[name] - used.get(name, Decimal(0))
        if left < amount:
            return 0
        if amount > 0:
            count = min(count, int(left // amount))
    return count


def _consumed(asked: Decimal | None, capacity: Capacity) -> Decimal:
    """calculateConsumedCapacity."""
    if asked is None:
        return capacity.default if capacity.default is not None else capacity.value
    if capacity.minimum is not None:
        if asked < capacity.minimum:
            return capacity.minimum
        if capacity.step is None or capacity.step <= 0:
            return asked
        # upstream rounds in whole units (Quantity.Value() rounds up)
        start, step = math.ceil(capacity.minimum), math.ceil(capacity.step)
        steps = -(-(math.ceil(asked) - start) // step)
        return Decimal(start + step * steps)
    for value in capacity.valid_values:
        if asked <= value:
            return value
    return asked


def _violates(amount: Decimal, capacity: Capacity) -> bool:
    """violatesPolicy, after rounding: over the range's max, or no valid value."""
    if capacity.default is not None and amount == capacity.default:
        return False
    if capacity.minimum is not None or capacity.maximum is not None or capacity.step is not None:
        return capacity.maximum is not None and amount > capacity.maximum
    return bool(capacity.valid_values) and amount not in capacity.valid_values


def _object(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _quantity(value: Any, name: Any, field: str) -> Decimal:
    try:
        return resources.parse(value)
    except ValueError:
        raise ValueError(f"capacity {name}: unreadable {field} {value!r}") from None


def _optional(value: Any, name: Any, field: str) -> Decimal | None:
    return None if value is None else _quantity(value, name, field)
