"""One ResourceSlice parsed into a Pool: its devices made once for every slice that publishes the same ones
(nodes of one model), each device's parts parsed once per distinct content."""

from __future__ import annotations

import marshal
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import replace
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
        shape = alike_devices(driver, name, spec, read)
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
# the last slice's (driver, devices as given, counters, SliceDevices, what was read, its devices as compared):
# one entry, replaced whole (no lock needed)
_alike_last: list[tuple[str, Any, Any, SliceDevices, frozenset[str] | None, Any] | None] = [None]


def alike_devices(driver: str, name: str, spec: Mapping[str, Any], read: frozenset[str] | None = None) -> SliceDevices:
    """The slice's devices as parsed for a slice alike, if one was: 5,000 nodes of one model are one
    parsing, each pool's devices made under its name when read (Pool.devices). Slices are compared
    whole (0.7 us for 8 devices) only when their drivers, first devices and counts are alike: a driver that
    gives each device a UUID makes every slice unlike the others, and then this costs the first device's
    bytes. The devices of the first such slice keep its pool's name. With `read` (the attributes some
    selector or constraint reads), the slices are compared, and their devices made, without the
    attributes none reads (`projected`): a driver's UUIDs then make no slice unlike another."""
    given, counters = spec.get("devices") or [], spec.get("sharedCounters")
    last = _alike_last[0]
    # the slice before's, first, as given: a cold start reads 5,000 slices of one model in a row (no key
    # made, nothing left out)
    if last is not None and last[0] == driver and last[4] == read and last[1] == given and last[2] == counters:
        last[3].shared = True
        return last[3]
    raw = projected(driver, given, read) if read is not None and type(given) is list else given
    # alike the slice before in what is read (each device's own UUID left out)
    alike = last is not None and last[0] == driver and last[4] == read and last[2] == counters
    if raw is not given and last is not None and alike and last[5] == raw:
        last[3].shared = True
        _alike_last[0] = (driver, given, counters, last[3], read, raw)
        return last[3]
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
                _alike_last[0] = (driver, given, counters, known, read, raw)
                return known
    devices = tuple(_device(d, driver, name) for d in raw if isinstance(d, dict))
    known = SliceDevices(devices, device_counters.offered(spec))
    _alike_last[0] = (driver, given, counters, known, read, raw)
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
