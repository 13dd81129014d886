"""One ResourceSlice parsed into a Pool, and what tells slices alike in what selectors read: values in,
values out. Which slices were parsed before, and sharing their devices, is the observe side's
(observe/pool_book.py SlicesAlike), as is parsing a device's parts once per distinct content
(observe/pool_book.py PartsParsedOnce, reached here through `DeviceParts`)."""

from __future__ import annotations

import marshal
from collections.abc import Mapping
from dataclasses import replace
from operator import itemgetter
from typing import Any, Protocol

from webhook.controller.decide import device_capacity, device_counters, device_reads
from webhook.controller.decide.device_types import Device, Pool, SliceDevices
from webhook.gangs.model import Obj


class DeviceParts(Protocol):
    """How a device's capacity map and consumed counters are parsed: each time (`EACH_TIME`), or once per
    distinct content by the observe side's memory."""

    def capacities(self, raw: Any) -> tuple[device_capacity.Capacity, ...]: ...

    def consumed(self, raw: Any) -> device_counters.Amounts: ...


class _EachTime:
    def capacities(self, raw: Any) -> tuple[device_capacity.Capacity, ...]:
        return device_capacity.capacities(raw)

    def consumed(self, raw: Any) -> device_counters.Amounts:
        return device_counters.consumed_of(raw)


EACH_TIME: DeviceParts = _EachTime()


def pool_of_slice(
    obj: Obj,
    driver: str,
    name: str,
    generation: int,
    shape: SliceDevices | None = None,
    parts: DeviceParts = EACH_TIME,
) -> Pool:
    """One slice as a Pool (a pool of several slices is several Pools with the same name; the devices
    are what matters, each slice keeps its own node selection). A slice whose devices each say which
    nodes they are on (`perDeviceNodeSelection`) carries one view per such selection in `views`. `shape`:
    its devices as parsed for a slice alike (observe/pool_book.py), else parsed here."""
    spec = obj.get("spec") or {}
    count = int((spec.get("pool") or {}).get("resourceSliceCount") or 1)
    node_name = str(spec["nodeName"]) if spec.get("nodeName") else None
    if not spec.get("perDeviceNodeSelection"):
        if shape is None:
            shape = slice_devices(driver, name, spec.get("devices") or [], spec, parts)
        return Pool.of_shape(driver, name, generation, count, node_name, spec, shape)
    selector = spec.get("nodeSelector")
    node_selector = (selector or {}).get("nodeSelectorTerms") if isinstance(selector, dict) else None
    devices: list[Device] = []
    placements: dict[str, tuple[str | None, bool, Any, list[Device]]] = {}
    for raw in spec.get("devices") or []:
        if not isinstance(raw, dict):
            continue
        device = _device(raw, driver, name, parts)
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


def slice_devices(driver: str, name: str, raw: Any, spec: Mapping[str, Any], parts: DeviceParts) -> SliceDevices:
    """A slice's devices (`raw`: as given, or `projected`) and shared counters, made under the pool `name`."""
    devices = tuple(_device(d, driver, name, parts) for d in raw if isinstance(d, dict))
    return SliceDevices(devices, device_counters.offered(spec))


class Skeleton:
    """A slice's devices with the value of each string, int or bool attribute left out (its kind kept), and
    the attribute names every one of its devices has (None when they differ). Made once per slice as it
    arrives (observe/informer.py trim_slice), the same object for slices alike in it: two slices alike in
    it and in the values of what is read are alike after `projected`, told by identity and those values
    (a copy of every device without its UUID in every pass was 40% of a cold start with 40,000 such:
    bench/devices.py --unique). Never changed once made."""

    __slots__ = ("devices", "names")

    def __init__(self, devices: list[Any], names: frozenset[str] | None) -> None:
        self.devices, self.names = devices, names

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
        # each value `projected` leaves out (a string, int or bool) as its kind; inline, not a call per
        # attribute: 40,000 devices each with a UUID and an index
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


def columns_of(devices: list[Any], skeleton: Skeleton) -> dict[str, tuple[Any, ...]] | None:
    """Each attribute's values, one per device in order, where every device has the same names (None
    where they differ): made with the Skeleton, as the slice arrives, so a pass reads what is read of a
    slice by name, not device by device."""
    if skeleton.names is None:
        return None
    attributes = list(map(_ATTRIBUTES, devices))
    return {name: tuple(map(itemgetter(name), attributes)) for name in skeleton.names}


def names_read(skeleton: Skeleton, read: frozenset[str], driver: str) -> tuple[str, ...]:
    """The attribute names of the skeleton's devices that `read` names."""
    return tuple(sorted((skeleton.names or frozenset()) & device_reads.kept_names(driver, read)))


def read_values(columns: Mapping[str, tuple[Any, ...]], names: tuple[str, ...]) -> tuple[Any, ...]:
    """The values of `names` of a slice's devices, from its columns (`columns_of`)."""
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


def _device(raw: Mapping[str, Any], driver: str, pool: str, parts: DeviceParts) -> Device:
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
        parts.consumed(get("consumesCounters")) if get("consumesCounters") else (),
        shared,
        parts.capacities(capacity) if capacity else (),
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
