"""Partitionable devices (beta and on by default in Kubernetes 1.36): devices that share the counters of a
physical one, as kube-scheduler's allocator counts them (k8s.io/dynamic-resource-allocation structured
allocator; kubernetes.io/docs/concepts/resource-management/dynamic-resource-allocation/dra-features/).

- a pool publishes its counters in `spec.sharedCounters` of slices of their own: CounterSets, each named,
  each a map from a counter's name to its `value` (a quantity);
- a device's `consumesCounters` names a CounterSet of its own pool and the amount of each counter it
  consumes; it can be allocated only while every counter it names has that much left, after what the
  devices allocated (to any claim) and those picked before it consume;
- a counter a device names that its pool does not publish leaves nothing to consume: the device cannot be
  allocated.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Iterable, Mapping, MutableMapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any, TypeVar, cast

from webhook import resources

if TYPE_CHECKING:
    from webhook.controller.decide.device_types import Device

# (counter set, counter, amount): what a pool offers, or what a device consumes
Amounts = tuple[tuple[str, str, Decimal], ...]
# (driver, pool, counter set, counter): one counter of the cluster
CounterKey = tuple[str, str, str, str]


def _amounts(entries: Any, name_key: str) -> Amounts:
    found: list[tuple[str, str, Decimal]] = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, Mapping):
            continue
        owner = str(entry.get(name_key) or "")
        counters = entry.get("counters")
        for counter, value in counters.items() if isinstance(counters, Mapping) else ():
            amount = value.get("value") if isinstance(value, Mapping) else None
            try:
                found.append((owner, str(counter), resources.parse(str(amount))))
            except (ValueError, ArithmeticError):
                raise ValueError(f"counter {owner}/{counter}: unreadable value {amount!r}") from None
    return tuple(found)


def offered(slice_spec: Mapping[str, Any]) -> Amounts:
    """The counters a slice's `sharedCounters` publish."""
    return _amounts(slice_spec.get("sharedCounters"), "name")


def consumed_of(consumes_counters: Any) -> Amounts:
    """What a `consumesCounters` list takes."""
    return _amounts(consumes_counters, "counterSet")


def totals(pools: Iterable[tuple[str, str, Amounts]]) -> dict[CounterKey, Decimal]:
    """Each counter of the cluster's pools: (driver, pool, offered)."""
    found: dict[CounterKey, Decimal] = {}
    for driver, pool, amounts in pools:
        for counter_set, counter, value in amounts:
            found[(driver, pool, counter_set, counter)] = value
    return found


def take(driver: str, pool: str, consumes: Amounts, used: MutableMapping[CounterKey, Decimal], sign: int = 1) -> None:
    for counter_set, counter, amount in consumes:
        key = (driver, pool, counter_set, counter)
        used[key] = used.get(key, Decimal(0)) + sign * amount


def partitioned(
    devices: list[Device], offered_now: Mapping[CounterKey, Decimal], used: Mapping[CounterKey, Decimal]
) -> list[Device]:
    """Of devices that share counters, those that can be allocated together, in order (kube-scheduler
    takes them one by one so): two partitions of one GPU count once when it holds only one. What they
    take is kept apart from `used` (read at each node's count: 40,000 devices at a cold start)."""
    if not any(d.consumes for d in devices):
        return devices
    kept, taken, nothing = [], dict[CounterKey, Decimal](), Decimal(0)
    for device in devices:
        driver, pool = device.id[0], device.id[1]
        keys = [((driver, pool, counter_set, counter), amount) for counter_set, counter, amount in device.consumes]
        if all(
            (total := offered_now.get(key)) is not None
            and used.get(key, nothing) + taken.get(key, nothing) + amount <= total
            for key, amount in keys
        ):
            for key, amount in keys:
                taken[key] = taken.get(key, nothing) + amount
            kept.append(device)
    return kept


def take_if_left(device: Device, left: dict[CounterKey, Decimal]) -> bool:
    """Takes what the device consumes of its pool's counters from `left`, if all of it is there."""
    keys = [((device.id[0], device.id[1], s, c), amount) for s, c, amount in device.consumes]
    if any(left.get(key, Decimal(-1)) < amount for key, amount in keys):
        return False
    for key, amount in keys:
        left[key] -= amount
    return True


def unpublished(devices: Iterable[Device], offered_now: Mapping[CounterKey, Decimal]) -> str:
    """Why such devices cannot be allocated, when it is a counter their pool does not publish (a counter
    set named in `consumesCounters` that no `sharedCounters` of the pool has); "" otherwise."""
    for device in devices:
        driver, pool, name = device.id
        for counter_set, counter, _ in device.consumes:
            if (driver, pool, counter_set, counter) not in offered_now:
                return (
                    f" (device {pool}/{name} consumes counter {counter} of counter set {counter_set}, which pool "
                    f"{pool} does not publish in spec.sharedCounters)"
                )
    return ""


K = TypeVar("K")
V = TypeVar("V")


def written_over(base: Mapping[K, V]) -> ChainMap[K, V]:
    """A map that reads `base` and takes every write itself: what an inventory worked out once (the
    usage of allocated devices) taken further by one caller, without a copy of the cluster's worth."""
    return ChainMap({}, cast(MutableMapping[K, V], base))
