"""Devices of an inventory found by id through their pools, when asked. A pass asks for few of them (the
devices picked for a pod, those claims hold); a map of every device that consumes shared counters or
allows multiple allocations was made at each cold start instead: 40,000 devices made and hashed for it
in bench/devices.py --shape capacity, where most pools are otherwise counted by their shape alone."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence

from webhook.controller.decide.device_counters import Amounts
from webhook.controller.decide.device_types import Device, DeviceId, Pool, PoolIndex, PoolKey


class PoolsByKey:
    """An inventory's pools by (driver, pool name): a node's own through PoolIndex.local, the others
    (a pool reaching several nodes, or none by name) in one map made when first asked."""

    def __init__(self, index: PoolIndex, pools: Sequence[Pool]) -> None:
        self._index, self._pools = index, pools

    def __call__(self, key: PoolKey) -> Sequence[Pool]:
        node = self._index.nodes.get(key, "")
        if node:
            return [p for p in self._index.local.get(node, ()) if p.driver == key[0] and p.name == key[1]]
        return self._spread.get(key, ()) if node is None else ()

    @functools.cached_property
    def _spread(self) -> dict[PoolKey, list[Pool]]:
        spread: dict[PoolKey, list[Pool]] = {}
        for pool in self._pools:
            key = (pool.driver, pool.name)
            if self._index.nodes.get(key, "") is None:
                spread.setdefault(key, []).append(pool)
        return spread


class DevicesById(Mapping[DeviceId, Device]):
    """The devices `admits` keeps, by id, looked up in their pools (Pool.by_name). Read only; iterating
    walks every pool (nothing in a pass does)."""

    def __init__(
        self,
        pools_of: Callable[[PoolKey], Sequence[Pool]],
        pools: Sequence[Pool],
        admits: Callable[[Device], bool],
        pool_admits: Callable[[Pool], bool],
    ) -> None:
        self._pools_of, self._pools, self._admits, self._pool_admits = pools_of, pools, admits, pool_admits

    def __getitem__(self, device_id: DeviceId) -> Device:
        for pool in self._pools_of((device_id[0], device_id[1])):
            device = pool.by_name.get(device_id[2])
            if device is not None and self._admits(device):
                return device
        raise KeyError(device_id)

    def consumes(self, device_id: DeviceId) -> Amounts:
        """What the device of that id consumes of its pool's shared counters (() for none), read from its
        pool's shape where it has one: no pool's devices made for it (15,000 held devices over 5,000 pools
        alike, at a cold start of bench/devices.py --allocated 3)."""
        for pool in self._pools_of((device_id[0], device_id[1])):
            if pool.shape is not None and not pool.shape.consumes:
                continue
            device = (pool.shape.by_name() if pool.shape is not None else pool.by_name).get(device_id[2])
            if device is not None and device.consumes:
                return device.consumes
        return ()

    def get(self, device_id: DeviceId, default: Device | None = None) -> Device | None:  # type: ignore[override]
        try:
            return self[device_id]
        except KeyError:
            return default

    def __contains__(self, device_id: object) -> bool:
        return isinstance(device_id, tuple) and self.get(device_id) is not None

    def __bool__(self) -> bool:
        return self._any

    @functools.cached_property
    def _any(self) -> bool:
        return any(self._pool_admits(p) for p in self._pools)

    def __iter__(self) -> Iterator[DeviceId]:
        return (d.id for p in self._pools if self._pool_admits(p) for d in p.devices if self._admits(d))

    def __len__(self) -> int:
        return sum(1 for _ in self)
