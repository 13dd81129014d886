"""One ResourceSlice parsed into a Pool: its devices made once for every slice that publishes the same ones
(nodes of one model), each device's parts parsed once per distinct content."""

from __future__ import annotations

import marshal
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import replace
from operator import itemgetter
from typing import Any

from webhook.controller.decide import device_capacity, device_counters, device_reads
from webhook.controller.decide.device_parsed import ParsedOnce
from webhook.controller.decide.device_types import Device, Pool, SliceDevices
from webhook.gangs.model import Obj


def pool_of_slice(obj: Obj, driver: str, name: str, generation: int, read: frozenset[str] | None = None) -> Pool:
    """One slice as a Pool (a pool of several slices is several Pools with the same name; the devices
    are what matters, each slice keeps its own node selection). A slice whose devices each say which
    nodes they are on (`perDeviceNodeSelection`) carries one view per such selection in `views`. `read`:
    the attributes any selector or constraint reads (device_reads.attributes_read), None for all."""
    spec = obj.get("spec") or {}
    count = int((spec.get("pool") or {}).get("resourceSliceCount") or 1)
    node_name = str(spec["nodeName"]) if spec.get("nodeName") else None
    if not spec.get("perDeviceNodeSelection"):
        shape = alike_devices(driver, name, spec, read, obj.get(SKELETON), obj.get(COLUMNS))
        return Pool.of_shape(driver, name, generation, count, node_name, spec, shape)
    selector = spec.get("nodeSelector")
    node_selector = (selector or {}).get("nodeSelectorTerms") if isinstance(selector, dict) else None
    devices: list[Device] = []
    placements: dict[str, tuple[str | None, bool, Any, list[Device]]] = {}
    for raw in spec.get("devices") or []:
        if not isinstance(raw, dict):
            continue
        device = _device(raw, driver, name)
        devices.append(device)
        placement = _node_selection(raw)
        placements.setdefault(repr(placement), (*placement, []))[3].append(device)
    pool = Pool(
        driver,
        name,
        generation,
        complete=count == 1,
        slice_count=count,
        own_devices=tuple(devices),
        node_name=node_name,
        all_nodes=bool(spec.get("allNodes")),
        node_selector=node_selector,
        counters=device_counters.offered(spec),
    )
    if not placements:
        return pool
    # pools_stable.go GatherPools takes such a slice for a node when one of its devices is there, and
    # isSelectable then offers only the devices whose own nodeName/allNodes/nodeSelector match it
    # (allocator_stable.go): a view per selection is that, and a view with a nodeName is node-local
    views = tuple(
        replace(
            pool,
            own_devices=tuple(found),
            node_name=node_name,
            all_nodes=all_nodes,
            node_selector=node_selector,
            counters=pool.counters if i == 0 else (),  # the slice's counters counted once
            shape=None,
        )
        for i, (node_name, all_nodes, node_selector, found) in enumerate(placements.values())
    )
    return replace(pool, views=views)


def _node_selection(raw: Mapping[str, Any]) -> tuple[str | None, bool, Any]:
    """A device's own nodeName, allNodes or nodeSelector terms (resource/v1 Device)."""
    selector = raw.get("nodeSelector")
    terms = (selector or {}).get("nodeSelectorTerms") if isinstance(selector, dict) else None
    return (str(raw["nodeName"]) if raw.get("nodeName") else None, bool(raw.get("allNodes")), terms)


# slices kept (_alike), the oldest bucket out first: each holds its devices as the API gave them (7-9 KB
# for 8 GPUs), which a slice republished would otherwise have let go
MAX_SLICES_ALIKE = 1024
MAX_KINDS_PER_BUCKET = 4  # slices unlike each other kept under one key, the oldest out first
# buckets by a slice's driver, first device and count of devices, as bytes: the slices parsed with them,
# each as [its devices, its counters (as the API gave them: the informer never changes an object it holds),
# SliceDevices]. A bucket holds several: nodes of two kinds with the same first GPU (other partitions, or
# another model second) took each other's place under one key, and were each parsed again
_alike: OrderedDict[bytes, list[list[Any]]] = OrderedDict()  # popitem(last=False): no scan past the evicted
_alike_kept = [0]  # slices in all buckets
_alike_writing = threading.Lock()  # slices may be read on more than one thread (an informer's readers)


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


_alike_last: list[_Last | None] = [None]


def alike_devices(
    driver: str,
    name: str,
    spec: Mapping[str, Any],
    read: frozenset[str] | None = None,
    skeleton: Skeleton | None = None,
    columns: Mapping[str, tuple[Any, ...]] | None = None,
) -> SliceDevices:
    """The slice's devices as parsed for a slice alike, if one was: 5,000 nodes of one model are one
    parsing, each pool's devices made under its name when read (Pool.devices). Slices are compared
    whole (0.7 us for 8 devices) only when their drivers, first devices and counts are alike: a driver that
    gives each device a UUID makes every slice unlike the others, and then this costs the first device's
    bytes. The devices of the first such slice keep its pool's name. With `read` (the attributes some
    selector or constraint reads), the slices are compared, and their devices made, without the
    attributes none reads (`projected`; by `skeleton` and the values read, where the slice came with
    one): a driver's UUIDs then make no slice unlike another."""
    given, counters = spec.get("devices") or [], spec.get("sharedCounters")
    last = _alike_last[0]
    alike = last is not None and last.driver == driver and last.read == read and last.counters == counters
    if alike and last is not None and last.given is given:  # the same list: trim_slice shares equal ones
        last.known.shared = True
        return last.known
    # alike the slice before in what is read (each device's own UUID left out), by its skeleton's identity
    # and the values read: slices that came with one are not compared whole (1.6 us each, 5,000 at a cold
    # start, and unlike when every GPU has its UUID)
    if skeleton is not None and columns is not None and read is not None:
        values = read_values(columns, skeleton, read, driver)
        if alike and last is not None and last.skeleton is skeleton and last.values == values:
            last.known.shared = True  # kept as it is: the next slice alike is alike this one
            return last.known
    else:
        values = None
        # the slice before's as given: a cold start reads 5,000 slices of one model in a row (no key
        # made, nothing left out)
        if alike and last is not None and last.given == given:
            last.known.shared = True
            return last.known
    raw = projected(driver, given, read) if read is not None and type(given) is list else given
    key: bytes | None = None
    if isinstance(raw, list):
        try:
            key = marshal.dumps((driver, raw[0] if raw else None, len(raw)), 2)
        except ValueError:  # not JSON's types (never from the API)
            key = None
        for entry in _alike.get(key, ()) if key is not None else ():
            if entry[0] == raw and entry[1] == counters:
                known: SliceDevices = entry[2]
                known.shared = True
                _alike_last[0] = _Last(driver, given, counters, known, read, skeleton, values)
                return known
    devices = tuple(_device(d, driver, name) for d in raw if isinstance(d, dict))
    known = SliceDevices(devices, device_counters.offered(spec))
    _alike_last[0] = _Last(driver, given, counters, known, read, skeleton, values)
    if key is not None:
        with _alike_writing:
            bucket = _alike.pop(key, [])
            bucket.append([raw, counters, known])
            _alike_kept[0] += 1
            if len(bucket) > MAX_KINDS_PER_BUCKET:
                del bucket[0]
                _alike_kept[0] -= 1
            while _alike and _alike_kept[0] > MAX_SLICES_ALIKE:
                _alike_kept[0] -= len(_alike.popitem(last=False)[1])
            _alike[key] = bucket
    return known


class Skeleton:
    """A slice's devices with the value of each string, int or bool attribute left out (its kind kept), and
    the attribute names every one of its devices has (None when they differ). Made once per slice as it
    arrives (observe/informer.py trim_slice), the same object for slices alike in it: two slices alike in
    it and in the values of what is read are alike after `projected`, told by identity and those values
    (a copy of 40,000 devices without their UUIDs in the pass was 100 ms of a cold start's 250:
    bench/devices.py --unique)."""

    __slots__ = ("_getters", "devices", "names")

    def __init__(self, devices: list[Any], names: frozenset[str] | None) -> None:
        self.devices, self.names = devices, names
        # per (driver, what is read): the names read (few: a cluster's selectors)
        self._getters: dict[tuple[str, frozenset[str]], tuple[str, ...]] = {}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Skeleton) and other.names == self.names and other.devices == self.devices

    __hash__ = None  # type: ignore[assignment]


# where a trimmed slice carries its Skeleton and columns (`columns_of`), beside metadata and spec
SKELETON, COLUMNS = "gangkeeper/skeleton", "gangkeeper/columns"


def skeleton_of(devices: Any) -> Skeleton | None:
    """The slice's Skeleton, or None for devices not as the API gives them (parsed as given)."""
    if type(devices) is not list:
        return None
    kept: list[Any] = []
    names: Any = None
    same_names = True
    for device in devices:
        attributes = device.get("attributes") if type(device) is dict else None
        if type(attributes) is not dict:
            return None
        # inline, not a call per attribute (`_left_out`): 40,000 devices each with a UUID and an index
        kinds = {
            k: next(iter(v)) if type(v) is dict and len(v) == 1 and ("string" in v or "int" in v or "bool" in v) else v
            for k, v in attributes.items()
        }
        kept.append({**device, "attributes": kinds})
        if names is None:
            names = attributes.keys()
        elif same_names and attributes.keys() != names:
            same_names = False
    return Skeleton(kept, frozenset(names or ()) if same_names else None)


def _left_out(value: Any) -> bool:
    """An attribute's value `projected` leaves out where no selector reads it."""
    return type(value) is dict and len(value) == 1 and ("string" in value or "int" in value or "bool" in value)


def _kind(value: dict[str, Any]) -> str:
    return next(iter(value))


def columns_of(devices: list[Any], skeleton: Skeleton) -> dict[str, tuple[Any, ...]] | None:
    """Each attribute's values, one per device in order, where every device has the same names (None
    where they differ): made with the Skeleton, as the slice arrives, so a pass reads what is read of a
    slice by name, not device by device."""
    if skeleton.names is None:
        return None
    attributes = list(map(_ATTRIBUTES, devices))
    return {name: tuple(map(itemgetter(name), attributes)) for name in skeleton.names}


def read_values(
    columns: Mapping[str, tuple[Any, ...]], skeleton: Skeleton, read: frozenset[str], driver: str
) -> tuple[Any, ...]:
    """The values of what `read` names of a slice's devices, from its columns (`columns_of`)."""
    try:
        names = skeleton._getters[driver, read]
    except KeyError:
        names = skeleton._getters[driver, read] = tuple(
            sorted((skeleton.names or frozenset()) & device_reads.kept_names(driver, read))
        )
    return tuple(map(columns.__getitem__, names))


_ATTRIBUTES = itemgetter("attributes")


def projected(driver: str, raw: list[Any], read: frozenset[str]) -> list[Any]:
    """The slice's devices without the attributes `read` does not name (a copy of each device that had
    one; the informer's objects are never changed). Only a string, bool or int attribute is left out:
    CEL converts those whatever their value, as the API's schema admits it (a string, an int64, a bool);
    a version, or an attribute of no known kind, stays, as one that does not convert makes every
    selector on its device fail (compile.go DeviceMatches converts all)."""
    kept = device_reads.kept_names(driver, read)
    found = raw
    for at, device in enumerate(raw):
        attributes = device.get("attributes") if type(device) is dict else None
        if type(attributes) is not dict:
            continue
        unread = attributes.keys() - kept
        if not unread:
            continue
        # inline, not a call per attribute: 40,000 devices at a cold start, each with a UUID and an index
        dropped = [
            k
            for k in unread
            if type(v := attributes[k]) is dict and len(v) == 1 and ("string" in v or "int" in v or "bool" in v)
        ]
        if dropped:
            left = dict(attributes)
            for name in dropped:
                del left[name]
            if found is raw:
                found = list(raw)
            found[at] = {**device, "attributes": left}
    return found


_CAPACITIES = ParsedOnce(device_capacity.capacities)  # a device's capacity map
_CONSUMED = ParsedOnce(device_counters.consumed_of)  # a device's consumesCounters


def _device(raw: Mapping[str, Any], driver: str, pool: str) -> Device:
    get = raw.get  # a cluster's devices are parsed at the controller's start: 40,000 in bench/devices.py
    taints = get("taints")
    attributes, capacity, shared = get("attributes"), get("capacity"), bool(get("allowMultipleAllocations"))
    return Device(
        (driver, pool, str(get("name") or "")),
        attributes or {},
        capacity or {},
        tuple(
            (str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or ""))
            for t in taints
            if isinstance(t, dict)
        )
        if taints
        else (),
        None,
        _content(driver, attributes, capacity, shared),
        _CONSUMED(get("consumesCounters")) if get("consumesCounters") else (),
        shared,
        _CAPACITIES(capacity) if capacity else (),
    )


def _content(driver: str, attributes: Any, capacity: Any, shared: bool) -> bytes:
    """What a selector can see of a device, as the key of its selectors' results (Memo). marshal's format 2
    (no back-references, so equal content gives equal bytes) at a quarter of repr's cost, 40,000 devices
    at a cold start; not sorted: a driver writes its devices' fields in one order, and two orders of the
    same content only cost a second evaluation."""
    try:
        return marshal.dumps((driver, attributes, capacity, shared), 2)
    except ValueError:  # not JSON's types (never from the API): its text instead
        return repr((driver, attributes, capacity, shared)).encode()
