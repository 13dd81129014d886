"""The device model's values: classes, devices, pools, requests and what a pod claims (k8s.io/api
resource/v1 as kube-scheduler's structured allocator reads it), and the node resources they count as."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import repeat
from typing import Any, NamedTuple

from webhook.controller.decide import device_capacity, device_counters
from webhook.controller.decide.device_constraints import Constraint
from webhook.controller.decide.shapes import Node, Shape, Taint, term_matches, tolerates
from webhook.gangs.model import Obj

DeviceId = tuple[str, str, str]  # (driver, pool, device): allocator_stable.go MakeDeviceID
# a DeviceClass's devices as a node resource of the gate's placement: the name KEP-5004 gives a class's
# implicit extended resource (k8s.io/api resource/v1 ResourceDeviceClassPrefix)
CLASS_RESOURCE_PREFIX = "deviceclass.resource.kubernetes.io/"


def claim_resource(requests: Sequence[Request], constraints: Sequence[Constraint]) -> str:
    """The node resource of one claim with alternatives or constraints: how many times a node's devices
    can be allocated to it (claims alike, from one template or equal ones, share it)."""
    digest = hashlib.sha256(repr((tuple(requests), tuple(constraints))).encode()).hexdigest()[:10]
    return f"{CLASS_RESOURCE_PREFIX}claim/{digest}"


def class_resource(class_name: str, selectors: Sequence[str] = ()) -> str:
    """The node resource of the devices a class selects, narrowed by a request's own selectors: each
    distinct (class, selectors) is a resource of its own, so placement counts the devices a request
    can take, not all of its class's."""
    if not selectors:
        return CLASS_RESOURCE_PREFIX + class_name
    digest = hashlib.sha256("\n".join(selectors).encode()).hexdigest()[:10]
    return f"{CLASS_RESOURCE_PREFIX}{class_name}/{digest}"


@dataclass(frozen=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...]
    extended_resource: str | None = None

    @staticmethod
    def from_api(obj: Obj) -> DeviceClass:
        spec = obj.get("spec") or {}
        return DeviceClass(
            name=str((obj.get("metadata") or {}).get("name") or ""),
            selectors=cel_selectors(spec.get("selectors")),
            extended_resource=str(spec["extendedResourceName"]) if spec.get("extendedResourceName") else None,
        )


class Device(NamedTuple):
    """One device of a slice: immutable, and a tuple for the cost of making 40,000 at a cold start (a
    frozen dataclass sets each field through object.__setattr__: 1.8 us a device, against 0.25)."""

    id: DeviceId
    attributes: Any  # as the slice has them (JSON)
    capacity: Any
    taints: tuple[tuple[str, str, str], ...] = ()  # (key, value, effect)
    unmodelled: str | None = None  # why the gate cannot judge this device
    # what a selector can see of it (driver, attributes, capacity): devices alike share CEL results
    content: bytes = b""
    consumes: device_counters.Amounts = ()  # its pool's shared counters it takes (partitionable devices)
    shared: bool = False  # allowMultipleAllocations: claims share it, each consuming part of its capacity
    capacities: tuple[device_capacity.Capacity, ...] = ()


class SliceDevices:
    """A slice's devices and shared counters as parsed once for every slice that publishes the same ones
    (nodes of one model each publish their own pool of the same devices: device_slices.py). Compared by
    identity: the slices' Pool.shape, so nodes whose pools have the same shapes count the same
    (device_alike.py). `shared` once a second slice is found alike: a node of a kind of its own (a driver
    that gives each device a UUID) is not worth a key."""

    __slots__ = ("_by_name", "columns", "consumes", "counters", "devices", "names", "shared", "sharing")

    def __init__(self, devices: tuple[Device, ...], counters: device_counters.Amounts) -> None:
        self.devices, self.counters, self.shared = devices, counters, False
        self.names = frozenset(d.id[2] for d in devices)  # what PoolIndex.names holds for each such slice's pool
        # whether any device consumes shared counters, or allows multiple allocations (Pool.consuming, sharing)
        self.consumes, self.sharing = any(d.consumes for d in devices), any(d.shared for d in devices)
        self.columns: tuple[tuple[Any, ...], ...] | None = None  # the devices' fields after `id`, by field
        self._by_name: dict[str, Device] | None = None

    def by_name(self) -> dict[str, Device]:
        """Its devices by name, as parsed (their ids those of the first slice alike: read their other fields)."""
        if self._by_name is None:
            self._by_name = {d.id[2]: d for d in self.devices}
        return self._by_name

    def named(self, driver: str, pool: str) -> tuple[Device, ...]:
        """These devices as a slice alike publishes them, in its own pool."""
        devices = self.devices
        if not devices or devices[0].id[1] == pool:
            return devices
        if self.columns is None:
            self.columns = tuple(zip(*devices, strict=True))[1:]
        ids = [(driver, pool, d.id[2]) for d in devices]
        # made in C, a quarter of a microsecond a device
        return tuple(map(tuple.__new__, repeat(Device), zip(ids, *self.columns, strict=True)))


@dataclass(frozen=True)
class Pool:
    driver: str
    name: str
    generation: int
    complete: bool
    # None: `shape`'s, in this pool (Pool.devices), made when first read: most of 5,000 slices alike are
    # counted by their shape alone (device_alike.py), and their 40,000 devices made for nothing
    own_devices: tuple[Device, ...] | None
    node_name: str | None = None
    all_nodes: bool = False
    node_selector: Any = None  # nodeSelectorTerms
    slice_count: int = 1  # its pool's resourceSliceCount
    counters: device_counters.Amounts = ()  # the shared counters this slice publishes for its pool
    # a slice with per-device node selection: its devices grouped by the nodes each names (the Pools
    # placement uses in its place)
    views: tuple[Pool, ...] = ()
    shape: SliceDevices | None = None  # None: a view (perDeviceNodeSelection); compared by identity

    @staticmethod
    def of_shape(
        driver: str, name: str, generation: int, slice_count: int, node_name: str | None, spec: Mapping[str, Any],
        shape: SliceDevices,
    ) -> Pool:  # fmt: skip
        """A slice's Pool whose devices are `shape`'s, as `Pool(...)` makes it in a third of the time (its
        frozen fields set each through object.__setattr__: 7 of a cold start's 45 ms with 5,000 slices)."""
        selector = spec.get("nodeSelector")
        pool = object.__new__(Pool)
        pool.__dict__.update(
            driver=driver,
            name=name,
            generation=generation,
            complete=slice_count == 1,
            own_devices=None,
            node_name=node_name,
            all_nodes=bool(spec.get("allNodes")),
            node_selector=selector.get("nodeSelectorTerms") if isinstance(selector, dict) else None,
            slice_count=slice_count,
            counters=shape.counters,
            views=(),
            shape=shape,
        )
        return pool

    @functools.cached_property
    def devices(self) -> tuple[Device, ...]:
        if self.own_devices is not None:
            return self.own_devices
        return self.shape.named(self.driver, self.name) if self.shape is not None else ()

    def applies_to(self, node: Node) -> bool:
        """pools_stable.go NodeMatches."""
        if self.node_name:
            return node.name == self.node_name
        if self.all_nodes:
            return True
        if self.node_selector is not None:
            return any(term_matches(term, node) for term in self.node_selector)
        return False

    @property
    def node_local(self) -> bool:
        return bool(self.node_name)

    @functools.cached_property
    def consuming(self) -> tuple[Device, ...]:
        """Its devices that consume shared counters: worked out once per pool, which a PoolBook keeps while
        its slice is unchanged (each inventory walked all 40,000 devices of bench/devices.py for none)."""
        if self.shape is not None and not self.shape.consumes:
            return ()
        return tuple(d for d in self.devices if d.consumes)

    @functools.cached_property
    def sharing(self) -> tuple[Device, ...]:
        """Its devices that allow multiple allocations."""
        if self.shape is not None and not self.shape.sharing:
            return ()
        return tuple(d for d in self.devices if d.shared)

    @property
    def any_consuming(self) -> bool:
        """Whether a device of it consumes shared counters (a slice alike's devices not made for it)."""
        return self.shape.consumes if self.shape is not None else bool(self.consuming)

    @property
    def any_sharing(self) -> bool:
        return self.shape.sharing if self.shape is not None else bool(self.sharing)

    @functools.cached_property
    def by_name(self) -> dict[str, Device]:
        return {d.id[2]: d for d in self.devices}


@dataclass(frozen=True)
class Subrequest:
    """One way to satisfy a request: `exactly`, or one entry of `firstAvailable`."""

    name: str
    device_class: str
    selectors: tuple[str, ...] = ()
    all: bool = False
    count: int = 1
    tolerations: tuple[tuple[tuple[str, str], ...], ...] = ()  # each toleration's items, sorted (hashable)
    admin: bool = False  # adminAccess: devices in use too, holding none
    capacity: device_capacity.Consumption = ()  # capacity.requests (consumable capacity)


@dataclass(frozen=True)
class Request:
    name: str
    alternatives: tuple[Subrequest, ...]  # in order: the first that can be allocated wins


@dataclass(frozen=True)
class ClaimDemand:
    """One claim a pod needs allocated: its own (from a template) or one it shares."""

    key: str  # "template ns/name" or "claim ns/name"
    requests: tuple[Request, ...]
    shared: bool = False
    # a shared claim allocated already: its devices are not the pod's to take, its nodeSelector binds
    allocated_node_terms: Any = None
    allocated: bool = False
    constraints: tuple[Constraint, ...] = ()
    # a request of several devices where devices allow multiple allocations: its units take distinct
    # devices (allocateOne's nextLocation, 1.36 and later), which a class's units per node cannot say
    distinct_shares: bool = False

    @property
    def alternatives_or_constraints(self) -> bool:
        """Whether counting its first choices' devices per class says too little (or too much): a claim
        with firstAvailable alternatives, constraints or capacity requests (a device may serve several
        such claims) is counted whole per node (`claim_resource`)."""
        return (
            bool(self.constraints)
            or self.distinct_shares
            or any(len(r.alternatives) > 1 for r in self.requests)
            or any(s.capacity for r in self.requests for s in r.alternatives)
        )


@dataclass(frozen=True)
class Demand:
    """What one pod claims: its claims, what cannot be known (a template that does not exist), and what
    the model cannot judge."""

    claims: tuple[ClaimDemand, ...] = ()
    problems: tuple[str, ...] = ()
    unmodelled: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.claims or self.problems or self.unmodelled)

    def units(self) -> dict[str, int]:
        """The devices each class gives this pod, as node resources of the gate's placement: the own
        claims' devices per class; a claim with alternatives or constraints as one of itself, which each
        node counts by allocating it there as often as it can (Inventory.class_totals: kube-scheduler's
        own order of alternatives). A shared claim is counted once, by the devices check, not per pod."""
        units: dict[str, int] = {}
        for claim in self.claims:
            if claim.shared:
                continue
            if claim.alternatives_or_constraints:
                resource = claim_resource(claim.requests, claim.constraints)
                units[resource] = units.get(resource, 0) + 1
                continue
            for request in claim.requests:
                first = request.alternatives[0]
                resource = class_resource(first.device_class, first.selectors)
                units[resource] = units.get(resource, 0) + (1 if first.all else first.count)
        return units

    def shaped(self, shape: Shape) -> Shape:
        """with_demand, remembered for the few shapes of the pods that share this demand (a gang's
        template: 1,000 pods at a cold start)."""
        kept = self._shaped.get(shape)
        if kept is None:
            kept = with_demand(shape, self)
            if len(self._shaped) < MAX_SHAPES_PER_DEMAND:
                self._shaped[shape] = kept
        return kept

    @functools.cached_property
    def _shaped(self) -> dict[Shape, Shape]:
        return {}


MAX_SHAPES_PER_DEMAND = 64


PoolKey = tuple[str, str]  # (driver, pool name)


@dataclass(frozen=True)
class PoolIndex:
    """The pools found by what the checks ask: node-local pools by node, the others (nodeSelector,
    allNodes) apart; each pool's node (None: several nodes reach it); each pool's device names."""

    local: Mapping[str, Sequence[Pool]]
    shared: Sequence[Pool]
    nodes: Mapping[PoolKey, str | None]
    names: Mapping[PoolKey, frozenset[str]]

    @staticmethod
    def of(pools: Iterable[Pool]) -> PoolIndex:
        local: dict[str, list[Pool]] = {}
        shared: list[Pool] = []
        nodes: dict[PoolKey, str | None] = {}
        names: dict[PoolKey, set[str]] = {}
        for pool in pools:
            if pool.node_name:
                local.setdefault(pool.node_name, []).append(pool)
            else:
                shared.append(pool)
            key = (pool.driver, pool.name)
            nodes[key] = pool.node_name if nodes.get(key, pool.node_name) == pool.node_name else None
            names.setdefault(key, set()).update(d.id[2] for d in pool.devices)
        return PoolIndex(local, shared, nodes, {key: frozenset(found) for key, found in names.items()})


def claims_devices(spec: Mapping[str, Any]) -> bool:
    """Whether a pod may need devices: claims of its own, or extended resources a DeviceClass may serve."""
    return bool(spec.get("resourceClaims")) or bool(extended_requests(spec))


def with_demand(shape: Shape, demand: Demand) -> Shape:
    """The pod's shape with its devices as requests: its claims are modelled (placement counts devices
    per class; the devices check before a release allocates them exactly)."""
    units = dict(shape.requests)
    for resource, amount in demand.units().items():
        units[resource] = units.get(resource, 0) + amount
    unmodelled = tuple(u for u in shape.unmodelled if u != "resourceClaims")
    return replace(shape, requests=tuple(sorted(units.items())), unmodelled=unmodelled)


def allocation_results(claim: Obj) -> list[tuple[DeviceId, device_capacity.Consumption | None]]:
    """What an allocated claim holds, as the scheduler plugin's foreachAllocatedDevice reads it
    (allocateddevices.go): an adminAccess result holds nothing; one with a shareID a share of a device
    allowing multiple allocations (what its consumedCapacity says); any other its device whole (None)."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    found: list[tuple[DeviceId, device_capacity.Consumption | None]] = []
    for r in results:
        if not isinstance(r, dict) or r.get("adminAccess"):
            continue
        device = (str(r.get("driver") or ""), str(r.get("pool") or ""), str(r.get("device") or ""))
        share = None
        if r.get("shareID"):
            consumed = r.get("consumedCapacity")
            try:
                share = device_capacity.requested({"requests": consumed if isinstance(consumed, dict) else {}})
            except ValueError:
                share = ()
        found.append((device, share))
    return found


def cel_selectors(selectors: Any) -> tuple[str, ...]:
    return tuple(
        str((s.get("cel") or {}).get("expression") or "")
        for s in selectors or []
        if isinstance(s, dict) and isinstance(s.get("cel"), dict)
    )


def extended_requests(spec: Mapping[str, Any]) -> dict[str, int]:
    wanted: dict[str, int] = {}
    for container in spec.get("containers") or []:
        requests = ((container or {}).get("resources") or {}).get("requests") or {}
        limits = ((container or {}).get("resources") or {}).get("limits") or {}
        for name, value in {**limits, **requests}.items():
            if "/" in str(name) and not str(name).startswith(("kubernetes.io/", "hugepages-")):
                try:
                    wanted[str(name)] = wanted.get(str(name), 0) + int(str(value))
                except ValueError:
                    continue
    return wanted


def tolerated(sub: Subrequest, key: str, value: str, effect: str) -> bool:
    """Device taints are tolerated as node taints are (allocator_stable.go taintTolerated)."""
    return tolerates([dict(t) for t in sub.tolerations], Taint(key, value, effect))
