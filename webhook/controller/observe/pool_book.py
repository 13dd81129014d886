"""The pools of the cluster's slices kept between passes (PoolBook), and the slices parsed before, whose
devices a slice alike shares (SlicesAlike): the device model's memory of slices, on the observe side; the
parsing itself is decide/device_slices.py's."""

from __future__ import annotations

import marshal
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from webhook.controller.decide import device_capacity, device_counters
from webhook.controller.decide.device_pools import Gathered, gather_pools
from webhook.controller.decide.device_slices import (
    COLUMNS,
    SKELETON,
    Skeleton,
    names_read,
    pool_of_slice,
    projected,
    read_values,
    slice_devices,
)
from webhook.controller.decide.device_types import Pool, PoolIndex, PoolKey, SliceDevices
from webhook.controller.observe.parsed_once import ParsedOnce
from webhook.gangs.model import Obj

MAX_SLICES_ALIKE = 1024  # slices kept, the oldest bucket out first (each holds its devices as given: 7-9 KB)
MAX_KINDS_PER_BUCKET = 4  # slices unlike each other kept under one key, the oldest out first


class PartsParsedOnce:
    """decide/device_slices.py DeviceParts, each distinct capacity map and consumesCounters parsed once: a
    model's devices publish the same ones, 40,000 times over at a cold start."""

    def __init__(self) -> None:
        self._capacities = ParsedOnce(device_capacity.capacities)
        self._consumed = ParsedOnce(device_counters.consumed_of)

    def capacities(self, raw: Any) -> tuple[device_capacity.Capacity, ...]:
        return self._capacities(raw)

    def consumed(self, raw: Any) -> device_counters.Amounts:
        return self._consumed(raw)


class _Last:
    """The last slice's driver, devices as given, counters, SliceDevices, what was read, its Skeleton and
    the values of what was read: one entry, replaced whole (no lock needed)."""

    __slots__ = ("counters", "driver", "given", "known", "read", "skeleton", "values")

    def __init__(
        self,
        driver: str,
        given: Any,
        counters: Any,
        known: SliceDevices,
        read: frozenset[str] | None,
        skeleton: Skeleton | None,
        values: tuple[Any, ...] | None,
    ) -> None:
        self.driver, self.given, self.counters, self.known, self.read = driver, given, counters, known, read
        self.skeleton, self.values = skeleton, values


class SlicesAlike:
    """The slices parsed, whose devices a slice alike shares: 5,000 nodes of one model are one parsing,
    each pool's devices made under its name when read (Pool.devices). Kept in buckets by a slice's driver,
    first device and count of devices, as bytes, each bucket holding the slices parsed with that key as
    [devices as compared, counters as given, SliceDevices] (nodes of two kinds with the same first GPU
    share a key); and the last slice, which the next is compared with first: the API lists a cold start's
    slices of one model in a row."""

    def __init__(self) -> None:
        self.parts = PartsParsedOnce()
        self._buckets: OrderedDict[bytes, list[list[Any]]] = OrderedDict()  # popitem(last=False): oldest out
        self._kept = 0  # slices in all buckets
        self._writing = threading.Lock()  # slices may be read on more than one thread (an informer's readers)
        self._last: _Last | None = None
        # the names a skeleton's devices have that what is read names, per (skeleton, driver, read): few
        self._names: dict[tuple[int, str, frozenset[str]], tuple[Skeleton, tuple[str, ...]]] = {}

    def devices(
        self,
        driver: str,
        name: str,
        spec: Mapping[str, Any],
        read: frozenset[str] | None = None,
        skeleton: Skeleton | None = None,
        columns: Mapping[str, tuple[Any, ...]] | None = None,
    ) -> SliceDevices:
        """The slice's devices as parsed for a slice alike, if one was (the devices of the first such slice
        keep its pool's name). With `read` (the attributes some selector or constraint reads), slices are
        compared, and their devices made, without the attributes none reads (device_slices.projected; by
        `skeleton` and the values read where the slice came with one, observe/informer.py trim_slice): a
        driver's UUIDs then make no slice unlike another."""
        given, counters = spec.get("devices") or [], spec.get("sharedCounters")
        last = self._last
        alike = last is not None and last.driver == driver and last.read == read and last.counters == counters
        if alike and last is not None and last.given is given:  # the same list: trim_slice shares equal ones
            last.known.shared = True
            return last.known
        values: tuple[Any, ...] | None = None
        if skeleton is not None and columns is not None and read is not None:
            # alike the slice before but in what none reads, by its skeleton's identity and the values
            # read: not compared whole (unlike where every GPU has its UUID)
            values = read_values(columns, self._names_read(skeleton, read, driver))
            if alike and last is not None and last.skeleton is skeleton and last.values == values:
                last.known.shared = True  # kept as it is: the next slice alike is alike this one
                return last.known
        elif alike and last is not None and last.given == given:
            last.known.shared = True
            return last.known
        raw = projected(driver, given, read) if read is not None and type(given) is list else given
        key: bytes | None = None
        if isinstance(raw, list):
            try:
                key = marshal.dumps((driver, raw[0] if raw else None, len(raw)), 2)
            except ValueError:  # not JSON's types (never from the API)
                key = None
            for entry in self._buckets.get(key, ()) if key is not None else ():
                if entry[0] == raw and entry[1] == counters:
                    known: SliceDevices = entry[2]
                    known.shared = True
                    self._last = _Last(driver, given, counters, known, read, skeleton, values)
                    return known
        known = slice_devices(driver, name, raw, spec, self.parts)
        self._last = _Last(driver, given, counters, known, read, skeleton, values)
        if key is not None:
            self._keep(key, [raw, counters, known])
        return known

    def _keep(self, key: bytes, entry: list[Any]) -> None:
        with self._writing:
            bucket = self._buckets.pop(key, [])
            bucket.append(entry)
            self._kept += 1
            if len(bucket) > MAX_KINDS_PER_BUCKET:
                del bucket[0]
                self._kept -= 1
            while self._buckets and self._kept > MAX_SLICES_ALIKE:
                self._kept -= len(self._buckets.popitem(last=False)[1])
            self._buckets[key] = bucket

    def _names_read(self, skeleton: Skeleton, read: frozenset[str], driver: str) -> tuple[str, ...]:
        found = self._names.get((id(skeleton), driver, read))
        if found is None or found[0] is not skeleton:  # the skeleton held: its id is not another's
            while len(self._names) >= MAX_SLICES_ALIKE:  # the oldest out, one at a time
                del self._names[next(iter(self._names))]
            found = self._names[id(skeleton), driver, read] = (skeleton, names_read(skeleton, read, driver))
        return found[1]

    def kept(self) -> list[list[list[Any]]]:
        """The buckets, oldest first (tests/fake/test_devices_alike.py holds them to their bounds)."""
        return list(self._buckets.values())


@dataclass
class PoolBook:
    """The pools of the cluster's slices kept between passes, from the slices' changes: a change
    gathers its own pool again (generations and completeness are each pool's, pools_stable.go); the
    other pools stay the same objects, and what an earlier Gathered holds is never changed."""

    _slices: dict[str, Obj] = field(default_factory=dict)  # by the informer's key
    _members: dict[PoolKey, set[str]] = field(default_factory=dict)
    _pool_of: dict[str, PoolKey] = field(default_factory=dict)
    _gathered: dict[PoolKey, tuple[list[Pool], list[str]]] = field(default_factory=dict)
    _start: dict[PoolKey, int] = field(default_factory=dict)  # where each pool's Pools are in `pools`
    _unreadable: set[PoolKey] = field(default_factory=set)  # the pools with a slice that could not be read
    _now: Gathered = field(default_factory=lambda: Gathered([], [], PoolIndex({}, [], {}, {})))
    # the attributes some selector or constraint reads (device_reads.attributes_read), None for all: a
    # node's own slice is parsed without the others, and slices alike but for them share one parsing
    _read: frozenset[str] | None = None
    _alike: SlicesAlike = field(default_factory=lambda: SlicesAlike())  # the slices parsed, shared with those alike

    def reading(self, read: frozenset[str] | None) -> bool:
        """What selectors and constraints read now; every slice parsed again when that changed (a
        selector reading an attribute no one read before). Whether it did."""
        if read == self._read:
            return False
        self._read = read
        if self._gathered:
            self._gathered.clear()
            self._load()
        return True

    def apply(self, changes: Mapping[str, Obj | None]) -> None:
        """Slices now (by key), None for one deleted."""
        dirty: set[PoolKey] = set()
        pool_of, slices, members = self._pool_of, self._slices, self._members
        for key, obj in changes.items():
            old = pool_of.pop(key, None)
            if old is not None:
                members[old].discard(key)
                dirty.add(old)
            if obj is None:
                slices.pop(key, None)
                continue
            slices[key] = obj
            pool_of[key] = pool = _pool_key(obj)
            members.setdefault(pool, set()).add(key)
            dirty.add(pool)
        if dirty and self._gathered:
            self._regather(dirty)
        elif dirty:
            self._load()

    def _gather(self, key: PoolKey) -> list[Pool]:
        """The pool's slices gathered again (`_gathered`, `_unreadable`): its Pools now."""
        members = self._members.get(key)
        self._unreadable.discard(key)
        if not members:
            self._members.pop(key, None)
            self._gathered.pop(key, None)
            return []
        problems: list[str] = []
        if len(members) == 1:  # most pools: a node's own slice
            gathered = self._one_slice_pools(self._slices[next(iter(members))], key, problems)
        else:
            gathered = gather_pools([self._slices[k] for k in sorted(members)], problems, parts=self._alike.parts)
        self._gathered[key] = (gathered, problems)
        if problems:
            self._unreadable.add(key)
        return gathered

    def _load(self) -> None:
        """The first slices (a cold start: 5,000 nodes' own), gathered and indexed in one sweep; a node's
        own slice, its pool's only one, without the layers of `_gather` (5 us a slice of a cold start)."""
        pools: list[Pool] = []
        nodes: dict[PoolKey, str | None] = {}
        names: dict[PoolKey, frozenset[str]] = {}
        local: dict[str, list[Pool]] = {}
        start, gathered, slices, members_of = {}, self._gathered, self._slices, self._members
        self._unreadable.clear()  # none gathered yet
        for key in sorted(members_of):
            start[key] = len(pools)
            members = members_of[key]
            own = self._node_pool(slices[next(iter(members))], key) if len(members) == 1 else None
            if own is not None and own.shape is not None and own.node_name is not None:
                gathered[key] = ([own], [])
                pools.append(own)
                nodes[key], names[key] = own.node_name, own.shape.names
                local[own.node_name] = [*local.get(own.node_name, ()), own]
                continue
            new = self._gather(key)
            pools.extend(new)
            _index_entries(key, new, nodes, names)
            for pool in new:
                if pool.node_name:
                    local.setdefault(pool.node_name, []).append(pool)
        self._start = start
        problems = [p for key in sorted(self._unreadable) for p in self._gathered[key][1]]
        shared = [p for p in pools if not p.node_name]
        self._now = Gathered(pools, problems, PoolIndex(local, shared, nodes, names))

    def _regather(self, dirty: set[PoolKey]) -> None:
        before = self._now
        pools: list[Pool] | None = list(before.pools)
        local = dict(before.index.local)
        nodes, names = dict(before.index.nodes), dict(before.index.names)
        shared_changed = False
        for key in dirty:
            old = self._gathered.get(key, ([], []))[0]
            new = self._gather(key)
            for pool in old:
                if pool.node_name:
                    local[pool.node_name] = [p for p in local.get(pool.node_name, ()) if p is not pool]
                    if not local[pool.node_name]:
                        del local[pool.node_name]
                else:
                    shared_changed = True
            for pool in new:
                if pool.node_name:
                    local[pool.node_name] = [*local.get(pool.node_name, ()), pool]
                else:
                    shared_changed = True
            nodes.pop(key, None)
            names.pop(key, None)
            _index_entries(key, new, nodes, names)
            at = self._start.get(key)
            if pools is not None and at is not None and len(old) == len(new) and new:
                pools[at : at + len(new)] = new  # a pool republished in place: the rest stay where they are
            else:
                pools = None
        problems = [p for key in sorted(self._unreadable) for p in self._gathered[key][1]]
        if pools is None:
            pools, self._start = [], {}
            for key in sorted(self._gathered):
                self._start[key] = len(pools)
                pools.extend(self._gathered[key][0])
        shared = [p for p in pools if not p.node_name] if shared_changed else before.index.shared
        self._now = Gathered(pools, problems, PoolIndex(local, shared, nodes, names))

    def gathered(self) -> Gathered:
        return self._now

    def _one_slice_pools(self, obj: Obj, key: PoolKey, problems: list[str]) -> list[Pool]:
        """gather_pools of a pool published in one slice (`key` its driver and pool name), without the
        grouping: the slice is its pool's newest generation, complete when the pool says it has one slice."""
        name = (obj.get("metadata") or {}).get("name")
        try:
            generation = int(((obj.get("spec") or {}).get("pool") or {}).get("generation") or 0)
        except (TypeError, ValueError):
            problems.append(f"ResourceSlice {name}: unreadable pool")
            return []
        try:
            spec = obj.get("spec") or {}
            shape = (
                None
                if spec.get("perDeviceNodeSelection")
                else self._alike.devices(key[0], key[1], spec, self._read, obj.get(SKELETON), obj.get(COLUMNS))
            )
            parsed = pool_of_slice(obj, key[0], key[1], generation, shape, self._alike.parts)
        except (TypeError, ValueError, AttributeError) as error:
            problems.append(f"ResourceSlice {name}: {error}")
            return []
        complete = parsed.slice_count == 1
        views = parsed.views or (parsed,)
        return [view if view.complete == complete else replace(view, complete=complete) for view in views]

    def _node_pool(self, obj: Obj, key: PoolKey) -> Pool | None:
        """A slice as `_one_slice_pools` reads it where it is simply a node's own (its spec's fields of the API's
        types, no per-device node selection); None for any other, which `_gather` reads."""
        spec = obj.get("spec")
        if type(spec) is not dict:
            return None
        pool = spec.get("pool")
        if type(pool) is not dict or spec.get("perDeviceNodeSelection"):
            return None
        generation, count, node_name = (
            pool.get("generation") or 0,
            pool.get("resourceSliceCount") or 1,
            spec.get("nodeName"),
        )
        if type(generation) is not int or type(count) is not int or type(node_name) is not str or not node_name:
            return None
        try:
            shape = self._alike.devices(key[0], key[1], spec, self._read, obj.get(SKELETON), obj.get(COLUMNS))
        except (TypeError, ValueError, AttributeError):
            return None  # `_gather` names it
        return Pool.of_shape(key[0], key[1], generation, count, node_name, spec, shape)


def _index_entries(
    key: PoolKey, pools: list[Pool], nodes: dict[PoolKey, str | None], names: dict[PoolKey, frozenset[str]]
) -> None:
    """A pool's entries of PoolIndex.nodes and .names (its Pools `pools`, none when it is gone)."""
    if len(pools) == 1 and pools[0].shape is not None:  # its device names found once per slice alike
        nodes[key], names[key] = pools[0].node_name, pools[0].shape.names
    elif pools:
        found = PoolIndex.of(pools)
        nodes.update(found.nodes)
        names.update(found.names)


def _pool_key(obj: Obj) -> PoolKey:
    spec = obj.get("spec")
    if type(spec) is dict:  # as the API gives it: no conversions (5,000 slices at a cold start)
        driver, pool = spec.get("driver"), spec.get("pool")
        name = pool.get("name") if type(pool) is dict else None
        if type(driver) is str and type(name) is str:
            return driver, name
    spec = spec or {}
    pool = (spec.get("pool") if isinstance(spec, dict) else None) or {}
    driver = spec.get("driver") if isinstance(spec, dict) else ""
    return str(driver or ""), str(pool.get("name") or "") if isinstance(pool, dict) else ""
