"""Devices claimed through Dynamic Resource Allocation, as kube-scheduler's DynamicResources plugin
allocates them: which devices a pod's claims take on a node, all or nothing.

The rules, each from kube-scheduler's structured allocator (k8s.io/dynamic-resource-allocation
structured/internal/stable: allocator_stable.go, pools_stable.go; the v1 API in k8s.io/api resource/v1):
- a ResourceSlice applies to a node by `nodeName`, `allNodes` or `nodeSelector` (pools_stable.go
  NodeMatches); only the newest generation of a pool counts, and a pool is complete when all its
  `resourceSliceCount` slices of that generation are there (GatherPools, checkSlicesInPool); an
  incomplete pool's devices are still offered to an ExactCount request, never to `All`
  (validateDeviceRequest);
- a device is taken once allocated to any claim (`status.allocation.devices.results`), or picked for
  another claim being allocated in the same pass (allocatedstate.go; deviceInUse);
- a device fits a request when every selector of its DeviceClass and of the request matches
  (selectorsMatch: a CEL runtime error fails the allocation on that node, it is no "no") and no taint
  it carries with effect NoSchedule or NoExecute goes untolerated (taintPreventsAllocation);
- `exactly` with `allocationMode: ExactCount` takes `count` devices (default 1), `All` every matching
  device of the node's pools, at least one, none of them taken, no pool incomplete; `firstAvailable`
  tries its subrequests in order and takes the first that can be allocated (allocateOne);
- a claim is allocated once: a pod's own claims come from its ResourceClaimTemplates, a claim named by
  `resourceClaimName` is shared, and once allocated its pods go only where its
  `status.allocation.nodeSelector` lets them (the DynamicResources plugin's Filter).

- a claim's matchAttribute and distinctAttribute constraints (device_constraints.py).

- partitionable devices: shared counters, consumed by the devices allocated and picked (device_counters.py).

What this model does not judge is named (`Demand.unmodelled`), never guessed: admin access, consumable
capacity, per-device node selection. A gang whose pods need those is never released by the gate.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections import OrderedDict
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any, Generic, TypeVar

from webhook.controller.decide import device_cel, device_counters
from webhook.controller.decide.device_constraints import Candidate, Constraint, attribute_value, constraints_of, search
from webhook.controller.decide.shapes import Node, Shape, Taint, term_matches, tolerates
from webhook.controller.interning import is_canonical
from webhook.gangs.model import Obj

DeviceId = tuple[str, str, str]  # (driver, pool, device): allocator_stable.go MakeDeviceID
# a DeviceClass's devices as a node resource of the gate's placement: the name KEP-5004 gives a class's
# implicit extended resource (k8s.io/api resource/v1 ResourceDeviceClassPrefix)
CLASS_RESOURCE_PREFIX = "deviceclass.resource.kubernetes.io/"
MAX_REMEMBERED_MATCHES = 400_000  # selector results kept (device content, expression), least recent out
# selector evaluations one pass may ask for (40,000 devices alike cost a handful; a cluster of distinct
# devices and many waiting selector sets is spread over passes, each node counted again until done)
MAX_EVALUATIONS_PER_PASS = 50_000
MAX_REMEMBERED_FAILURES = 4096  # selectors' last errors kept, for the Gangs that wait on them
MAX_REMEMBERED_DEMANDS = 20_000  # pods' demands kept per inventory (by template), oldest out
# distinct selector sets of one namespace's waiting claims counted per node (`narrowed`): what one
# namespace's templates cost every node is bounded; past it, its other sets wait and say so
MAX_SELECTOR_SETS_PER_NAMESPACE = 16
MAX_CLAIMS_COUNTED_PER_NODE = 256  # a claim with alternatives or constraints, allocated on one node in turn
MAX_REMEMBERED_SLICES = 100_000  # slices kept parsed
MAX_ALTERNATIVE_CHOICES = 64  # firstAvailable combinations tried per claim, in order (a bound on the search)


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
            selectors=_cel_selectors(spec.get("selectors")),
            extended_resource=str(spec["extendedResourceName"]) if spec.get("extendedResourceName") else None,
        )


@dataclass(frozen=True)
class Device:
    id: DeviceId
    attributes: Any  # as the slice has them (JSON)
    capacity: Any
    taints: tuple[tuple[str, str, str], ...] = ()  # (key, value, effect)
    unmodelled: str | None = None  # why the gate cannot judge this device
    # what a selector can see of it (driver, attributes, capacity): devices alike share CEL results
    content: str = ""
    consumes: device_counters.Amounts = ()  # its pool's shared counters it takes (partitionable devices)


@dataclass(frozen=True)
class Pool:
    driver: str
    name: str
    generation: int
    complete: bool
    devices: tuple[Device, ...]
    node_name: str | None = None
    all_nodes: bool = False
    node_selector: Any = None  # nodeSelectorTerms
    unmodelled: str | None = None
    slice_count: int = 1  # its pool's resourceSliceCount
    counters: device_counters.Amounts = ()  # the shared counters this slice publishes for its pool

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


@dataclass(frozen=True)
class Subrequest:
    """One way to satisfy a request: `exactly`, or one entry of `firstAvailable`."""

    name: str
    device_class: str
    selectors: tuple[str, ...] = ()
    all: bool = False
    count: int = 1
    tolerations: tuple[tuple[tuple[str, str], ...], ...] = ()  # each toleration's items, sorted (hashable)


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

    @property
    def alternatives_or_constraints(self) -> bool:
        """Whether counting its first choices' devices per class says too little (or too much): a claim
        with firstAvailable alternatives or constraints is counted whole per node (`claim_resource`)."""
        return bool(self.constraints) or any(len(r.alternatives) > 1 for r in self.requests)


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


@dataclass
class Inventory:
    """The cluster's devices as kube-scheduler sees them: classes, pools (newest generation), the
    devices taken by allocated claims, and the claims and templates pods name."""

    classes: dict[str, DeviceClass] = field(default_factory=dict)
    pools: list[Pool] = field(default_factory=list)
    taken: dict[DeviceId, str] = field(default_factory=dict)  # device -> the claim holding it
    owners: dict[str, str] = field(default_factory=dict)  # claim -> uid of the pod it was made for
    claims: dict[tuple[str, str], Obj] = field(default_factory=dict)
    templates: dict[tuple[str, str], Obj] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # slices that could not be read
    memo: Memo = field(default_factory=lambda: Memo())
    pool_index: PoolIndex | None = None  # a PoolBook's, kept up to date; else found from `pools`
    _pools_of: dict[str, tuple[Pool, ...]] = field(default_factory=dict)
    # remembered answers; each keeps the objects its key names by id, so no other object takes that id:
    # by pool, what each subrequest selects there
    _selected: dict[int, tuple[Pool, dict[Subrequest, tuple[Device, ...]]]] = field(default_factory=dict)
    _demands: dict[tuple[str, Any], tuple[Any, Any, Demand]] = field(default_factory=dict)
    # ("template" | "claim", namespace, name) named by pods that wait: only their selectors are counted
    # per node (`narrowed`); None counts every template and claim (offline: tests, simulation)
    waiting: frozenset[tuple[str, str, str]] | None = None
    templates_version: str | None = None  # the templates informer's resourceVersion, when watched
    deferred: dict[str, str] = field(default_factory=dict)  # class resource -> why it is not counted yet

    def pools_for(self, node: Node) -> tuple[Pool, ...]:
        pools = self._pools_of.get(node.name)
        if pools is None:
            index = self._index
            local = index.local.get(node.name, ())
            pools = self._pools_of[node.name] = (*local, *(p for p in index.shared if p.applies_to(node)))
        return pools

    @functools.cached_property
    def _index(self) -> PoolIndex:
        return self.pool_index or PoolIndex.of(self.pools)

    def selector_matches(self, device: Device, expression: str) -> bool:
        """Remembered per device content and expression (Memo): cel-python takes about 2 ms an
        evaluation here, so devices alike are evaluated once, and a slice that did not change is never
        again."""
        key = (device.content, expression)
        found = self.memo.matched.get(key)
        if found is None:
            found = self.memo.evaluate({key: device})[key]
        if isinstance(found, device_cel.SelectorError):
            raise found
        return bool(found)

    def selected(self, sub: Subrequest, pool: Pool) -> tuple[Device, ...]:
        """The pool's devices the subrequest's class and selectors select and whose taints it tolerates,
        taken or not (remembered for this inventory: a gang's pods ask the same of the same pools)."""
        kept = self._selected.get(id(pool))
        if kept is None or kept[0] is not pool:
            kept = self._selected[id(pool)] = (pool, {})
        found = kept[1].get(sub)
        if found is not None:
            return found
        device_class = self.classes[sub.device_class]
        self.memo.prime((pool,), (*device_class.selectors, *sub.selectors))
        found = tuple(
            device
            for device in pool.devices
            if not device.unmodelled
            and all(self.selector_matches(device, s) for s in device_class.selectors)
            and all(self.selector_matches(device, s) for s in sub.selectors)
            and not any(
                effect in ("NoSchedule", "NoExecute") and not _tolerated(sub, k, v, effect)
                for k, v, effect in device.taints
            )
        )
        kept[1][sub] = found
        return found

    def demand(self, namespace: str, spec: Mapping[str, Any]) -> Demand:
        """`pod_demand`, remembered by what it reads of the spec (a gang's pods share their template)."""
        claims, containers = spec.get("resourceClaims"), spec.get("containers")
        key: tuple[str, Any]
        if is_canonical(claims) and is_canonical(containers):  # the controller's cached pods (informer.py)
            key = (namespace, (id(claims), id(containers)))
        else:
            key = (namespace, json.dumps([claims, _extended_requests(spec)], sort_keys=True))
            claims = containers = None  # the key holds what it reads
        kept = self._demands.get(key)
        if kept is not None and kept[0] is claims and kept[1] is containers:
            return kept[2]
        found = pod_demand(namespace, spec, self)
        demands = self._demands
        demands.pop(key, None)
        demands[key] = (claims, containers, found)
        while len(demands) > MAX_REMEMBERED_DEMANDS:
            del demands[next(iter(demands))]  # the oldest one: a dict keeps its insertion order
        return found

    def remembering(self, before: Inventory | None) -> Inventory:
        """This inventory, with what `before` worked out that still holds: the devices a request selects
        in each pool still here (same classes), and pods' demands (same classes, templates and shared
        claims). A slice republished or a claim allocated then costs its own pool, not all 40,000
        devices again."""
        if before is None or before.classes != self.classes:
            return self
        self._selected = dict(before._selected)
        for pool in self._replaced(before)[0]:
            self._selected.pop(id(pool), None)
        if before.demand_basis == self.demand_basis:
            self._demands = dict(before._demands)
        return self

    @functools.cached_property
    def demand_basis(self) -> tuple[Any, ...]:
        """What pods' demands are read from (`pod_demand`): the classes, the templates, and the claims
        made for no pod (shared ones, allocated or not). Devices published or allocated to pods' own
        claims change none of them."""

        def versions(objects: Mapping[tuple[str, str], Obj]) -> frozenset[tuple[str, str, str]]:
            return frozenset(
                (*key, str((o.get("metadata") or {}).get("resourceVersion"))) for key, o in objects.items()
            )

        shared = {k: c for k, c in self.claims.items() if f"{k[0]}/{k[1]}" not in self.owners}
        # the templates' list version where the watch gives one: a thousand templates of another team are
        # not walked on every pass (a template changed anywhere costs the demands read again, a few)
        templates: Any = self.templates_version or versions(self.templates)
        return (tuple(sorted(self.classes.items())), templates, versions(shared))

    def changed_nodes(self, before: Inventory | None) -> set[str] | None:
        """The nodes whose devices may count differently than in `before` (None: any node may): those of
        slices published, changed or gone, and of devices whose claim changed. Slices unchanged are the
        same Pool objects (Memo), so a claim allocated costs a look at its own node only."""
        if (
            before is None
            or before.classes != self.classes
            or before.narrowed != self.narrowed
            or before.counted_claims.keys() != self.counted_claims.keys()
        ):
            return None
        gone, came = self._replaced(before)
        changed: set[str] = set()
        for pool in [*came, *gone]:
            if not pool.node_name:
                return None
            changed.add(pool.node_name)
        moved = {d for d in self.taken.keys() | before.taken.keys() if self.taken.get(d) != before.taken.get(d)}
        moved |= {d for d, claim in self.taken.items() if self.owners.get(claim) != before.owners.get(claim)}
        for driver, pool_name, _ in moved:
            node = self._index.nodes.get((driver, pool_name), before._index.nodes.get((driver, pool_name), ""))
            if node is None:
                return None
            if node:
                changed.add(node)
        return changed

    def _replaced(self, before: Inventory) -> tuple[list[Pool], list[Pool]]:
        """The pools of `before` not here, and those here not there (pools unchanged are the same
        objects: PoolBook, Memo). Lists of one length, the usual case (a slice republished), are
        compared in place."""
        if len(before.pools) == len(self.pools):
            pairs = [(old, new) for old, new in zip(before.pools, self.pools, strict=True) if old is not new]
            gone, came = [old for old, _ in pairs], [new for _, new in pairs]
            # a pool of `before` still here at another place differs from what is at that place too, so
            # it is among those that came: none is, and the pools that went are exactly these
            if {id(p) for p in gone}.isdisjoint(id(p) for p in came):
                return gone, came
        old_pools, new_pools = {id(p): p for p in before.pools}, {id(p): p for p in self.pools}
        return (
            [p for i, p in old_pools.items() if i not in new_pools],
            [p for i, p in new_pools.items() if i not in old_pools],
        )

    def lost_devices(self, uid: str, namespace: str, spec: Mapping[str, Any]) -> list[DeviceId]:
        """The devices allocated to a pod's claims (its own, and those it shares by name) that no slice
        publishes now."""
        claims = list(self._claims_of_pods.get(uid, ()))
        claims += [
            f"{namespace}/{entry['resourceClaimName']}"
            for entry in spec.get("resourceClaims") or []
            if isinstance(entry, dict) and entry.get("resourceClaimName")
        ]
        names = self._index.names
        return [d for d in self._devices_of_claims(claims) if d[2] not in names.get((d[0], d[1]), ())]

    def _devices_of_claims(self, claims: Sequence[str]) -> list[DeviceId]:
        return [device for claim in claims for device in self._devices_by_claim.get(claim, ())]

    @functools.cached_property
    def _devices_by_claim(self) -> dict[str, list[DeviceId]]:
        found: dict[str, list[DeviceId]] = {}
        for device, claim in self.taken.items():
            found.setdefault(claim, []).append(device)
        return found

    @functools.cached_property
    def _claims_of_pods(self) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for claim, uid in self.owners.items():
            found.setdefault(uid, []).append(claim)
        return found

    def allocated_pods(self) -> set[str]:
        """The uids of the pods whose own claims are allocated (kube-scheduler has placed them)."""
        return {uid for claim, uid in self.owners.items() if claim in self._holding}

    @functools.cached_property
    def counter_totals(self) -> dict[device_counters.CounterKey, Decimal]:
        """Every shared counter the pools publish (partitionable devices)."""
        return device_counters.totals((p.driver, p.name, p.counters) for p in self.pools if p.counters)

    @functools.cached_property
    def _consuming(self) -> dict[DeviceId, Device]:
        """The devices that consume shared counters, by id."""
        return {d.id: d for p in self.pools if p.counters or p.devices for d in p.devices if d.consumes}

    def counters_used(self, free_for: Collection[str] = ()) -> dict[device_counters.CounterKey, Decimal]:
        """What the allocated devices consume of the shared counters (those of pods in `free_for` aside:
        their shapes hold their devices)."""
        used: dict[device_counters.CounterKey, Decimal] = {}
        for device_id, claim in self.taken.items():
            device = self._consuming.get(device_id)
            if device is not None and not (free_for and self.owners.get(claim) in free_for):
                device_counters.take(device.id[0], device.id[1], device.consumes, used)
        return used

    @functools.cached_property
    def _holding(self) -> set[str]:
        return set(self.taken.values())

    @functools.cached_property
    def narrowed(self) -> dict[str, set[tuple[str, ...]]]:
        """Per class, the request selectors that waiting pods' templates and claims narrow it by
        (`waiting`: every template and claim when None, offline). Each node counts its devices per set,
        so a namespace's sets beyond MAX_SELECTOR_SETS_PER_NAMESPACE wait (`deferred`): one tenant's
        templates cannot make every node's count cost more than that."""
        found: dict[str, set[tuple[str, ...]]] = {}
        per_namespace: dict[str, set[tuple[str, tuple[str, ...]]]] = {}
        for (namespace, _), spec in self._waiting_specs():
            for request in claim_requests(spec, set()):
                for sub in request.alternatives:
                    if not sub.selectors:
                        continue
                    counted = per_namespace.setdefault(namespace, set())
                    entry = (sub.device_class, sub.selectors)
                    if entry not in counted and len(counted) >= MAX_SELECTOR_SETS_PER_NAMESPACE:
                        self.deferred[class_resource(*entry)] = (
                            f"namespace {namespace} has more than {MAX_SELECTOR_SETS_PER_NAMESPACE} distinct "
                            "device selector sets waiting: this one is counted once others have started"
                        )
                        continue
                    counted.add(entry)
                    found.setdefault(sub.device_class, set()).add(sub.selectors)
        return found

    @functools.cached_property
    def counted_claims(self) -> dict[str, ClaimDemand]:
        """The waiting pods' template claims with alternatives or constraints, by `claim_resource`: each
        node counts how many times its devices can be allocated to each (class_totals), within the same
        per-namespace bound as selector sets."""
        found: dict[str, ClaimDemand] = {}
        per_namespace: dict[str, set[str]] = {}
        for (namespace, name), spec in self._waiting_specs(templates_only=True):
            claim = ClaimDemand(
                f"template {namespace}/{name}", claim_requests(spec, set()), constraints=constraints_of(spec)
            )
            resource = claim_resource(claim.requests, claim.constraints)
            if not claim.alternatives_or_constraints or resource in found:
                continue
            counted = per_namespace.setdefault(namespace, set())
            if len(counted) >= MAX_SELECTOR_SETS_PER_NAMESPACE:
                self.deferred[resource] = (
                    f"namespace {namespace} has more than {MAX_SELECTOR_SETS_PER_NAMESPACE} distinct claims with "
                    "alternatives or constraints waiting: this one is counted once others have started"
                )
                continue
            counted.add(resource)
            found[resource] = claim
        return found

    def _waiting_specs(self, templates_only: bool = False) -> list[tuple[tuple[str, str], Mapping[str, Any]]]:
        """The claim specs of the templates and claims `waiting` names, in name order."""
        if self.waiting is None:
            templates, claims = sorted(self.templates.items()), sorted(self.claims.items())
        else:
            named = sorted(self.waiting)
            templates = [
                ((n, m), self.templates[(n, m)]) for k, n, m in named if k == "template" and (n, m) in self.templates
            ]
            claims = [((n, m), self.claims[(n, m)]) for k, n, m in named if k == "claim" and (n, m) in self.claims]
        specs = [(k, (t.get("spec") or {}).get("spec") or {}) for k, t in templates]
        if templates_only:
            return specs
        return specs + [(k, c.get("spec") or {}) for k, c in claims]

    def class_totals(self, node: Node, counted_by_pods: Collection[str] = ()) -> dict[str, int]:
        """Per class resource (`class_resource`): the devices of the node's pools the class (and a
        request's selectors) select that no claim holds but the claims of the pods in `counted_by_pods`
        (uids), whose shapes hold their devices."""
        totals: dict[str, int] = {}
        expressions = [s for c in self.classes.values() for s in c.selectors]
        expressions += [s for sets in self.narrowed.values() for selectors in sets for s in selectors]
        self.memo.prime(self.pools_for(node), expressions)
        for device_class in self.classes.values():
            free = [
                device
                for pool in self.pools_for(node)
                for device in pool.devices
                if not device.unmodelled and self._counted(device, counted_by_pods)
            ]
            selected = self._partitioned([d for d in free if self._selects(d, device_class.selectors)], counted_by_pods)
            if not selected:
                continue
            totals[class_resource(device_class.name)] = len(selected)
            if device_class.extended_resource and not node.allocatable.get(device_class.extended_resource):
                totals[device_class.extended_resource] = len(selected)
            for selectors in self.narrowed.get(device_class.name, ()):
                count = sum(1 for d in selected if self._selects(d, selectors))
                if count:
                    totals[class_resource(device_class.name, selectors)] = count
        for resource, claim in self.counted_claims.items():
            count = self._claims_on(node, claim, counted_by_pods)
            if count:
                totals[resource] = count
        return totals

    def _partitioned(self, devices: list[Device], counted_by_pods: Collection[str]) -> list[Device]:
        """Of devices that share counters, those that can be allocated together, in order (kube-scheduler
        takes them one by one so): two partitions of one GPU count once when it holds only one."""
        if not any(d.consumes for d in devices):
            return devices
        used = self.counters_used(counted_by_pods)
        kept = []
        for device in devices:
            driver, pool = device.id[0], device.id[1]
            if device_counters.fits(driver, pool, device.consumes, self.counter_totals, used):
                device_counters.take(driver, pool, device.consumes, used)
                kept.append(device)
        return kept

    def _claims_on(self, node: Node, claim: ClaimDemand, counted_by_pods: Collection[str]) -> int:
        """How many times the node's free devices can be allocated to the claim, one after the other, as
        kube-scheduler would for pods placed there in turn (at most MAX_CLAIMS_COUNTED_PER_NODE)."""
        allocator = Allocator(self, nodes=(node,), free_for=counted_by_pods)
        demand, count = Demand((claim,)), 0
        while count < MAX_CLAIMS_COUNTED_PER_NODE and allocator.allocate(demand, node) is None:
            count += 1
        return count

    def selector_problems(self, sub: Subrequest) -> list[str]:
        """Why the subrequest's devices are not counted: a selector that failed, or its set deferred."""
        device_class = self.classes.get(sub.device_class)
        found = [
            f"selector {expression[:120]!r}: {failed}"
            for expression in (*(device_class.selectors if device_class else ()), *sub.selectors)
            if (failed := self.memo.failed.get(expression)) is not None
        ]
        deferred = self.deferred.get(class_resource(sub.device_class, sub.selectors)) if sub.selectors else None
        return [*found, deferred] if deferred else found

    def _counted(self, device: Device, counted_by_pods: Collection[str]) -> bool:
        holder = self.taken.get(device.id)
        return holder is None or self.owners.get(holder) in counted_by_pods

    def _selects(self, device: Device, selectors: Sequence[str]) -> bool:
        """Every selector matches; an error counts as no (the devices check names it at the release)."""
        try:
            return all(self.selector_matches(device, s) for s in selectors)
        except device_cel.SelectorError:
            return False


def claims_devices(spec: Mapping[str, Any]) -> bool:
    """Whether a pod may need devices: claims of its own, or extended resources a DeviceClass may serve."""
    return bool(spec.get("resourceClaims")) or bool(_extended_requests(spec))


def with_demand(shape: Shape, demand: Demand) -> Shape:
    """The pod's shape with its devices as requests: its claims are modelled (placement counts devices
    per class; the devices check before a release allocates them exactly)."""
    units = dict(shape.requests)
    for resource, amount in demand.units().items():
        units[resource] = units.get(resource, 0) + amount
    unmodelled = tuple(u for u in shape.unmodelled if u != "resourceClaims")
    return replace(shape, requests=tuple(sorted(units.items())), unmodelled=unmodelled)


# --- reading the API objects ----------------------------------------------------------------------


class Memo:
    """What outlives one inventory (DeviceWatch keeps one): slices parsed, by uid and resourceVersion,
    and selector results, by device content: a claim allocated or a slice republished changes the
    inventory, not the 40,000 devices' parsing and CEL. Selector results are evaluated in batches by
    `evaluator` (the controller's has a CPU budget per evaluation, out of process) and kept up to
    MAX_REMEMBERED_MATCHES, the least recently used evicted one by one."""

    def __init__(self, evaluator: device_cel.Evaluator = device_cel.evaluate_all) -> None:
        self.evaluator = evaluator
        self.matched: BoundedMap[tuple[str, str], bool | device_cel.SelectorError] = BoundedMap(MAX_REMEMBERED_MATCHES)
        self.slices: dict[tuple[str, str], Pool] = {}
        # expression -> why it is not evaluated (over its CEL budget): what a waiting gang's Gang says
        self.failed: BoundedMap[str, str] = BoundedMap(MAX_REMEMBERED_FAILURES)
        self.evaluations = 0  # selector evaluations asked of the evaluator (a metric: observe/devices.py)
        # what one pass may ask of the evaluator (`new_pass` refills it); the rest wait for the next pass
        self.budget = MAX_EVALUATIONS_PER_PASS
        self.deferred = 0  # evaluations left to a later pass for the budget (a metric)
        self.unanswered = 0  # of them, those no evaluator could answer then (asked again later)
        # by pool id: the pool (so no other takes its id) and the expressions primed on it
        self._primed: dict[int, tuple[Pool, frozenset[str]]] = {}

    def new_pass(self) -> None:
        """A pass begins: its budget of evaluations is whole again."""
        self.budget = MAX_EVALUATIONS_PER_PASS

    def prime(self, pools: Iterable[Pool], expressions: Iterable[str]) -> None:
        """Every (device content, expression) of these pools not remembered yet, evaluated in one batch. A
        pool already primed for these expressions (the same object: its slice unchanged) is skipped."""
        matched, primed = self.matched, self._primed
        wanted = frozenset(expressions)
        if not wanted:
            return
        missing: dict[tuple[str, str], Device] = {}
        for pool in pools:
            done = primed.get(id(pool))
            if done is not None and done[0] is pool and wanted <= done[1]:
                continue
            for device in pool.devices:
                if device.unmodelled:
                    continue
                for expression in wanted:
                    key = (device.content, expression)
                    if key not in matched and key not in missing:
                        missing[key] = device
            primed[id(pool)] = (pool, wanted | done[1] if done is not None and done[0] is pool else wanted)
        while len(primed) > MAX_REMEMBERED_SLICES:
            del primed[next(iter(primed))]
        if missing:
            self.evaluate(missing)

    def evaluate(
        self, missing: Mapping[tuple[str, str], Device]
    ) -> dict[tuple[str, str], bool | device_cel.SelectorError]:
        """Each (device content, expression) evaluated, remembered unless no evaluator could answer now."""
        matched = self.matched
        found: dict[tuple[str, str], bool | device_cel.SelectorError] = {}
        asked = list(missing.items())
        if len(asked) > self.budget:
            later = device_cel.SelectorError("this pass's CEL budget is spent: evaluated next pass", transient=True)
            for key, _ in asked[self.budget :]:
                found[key] = later
            self.deferred += len(asked) - self.budget
            self.unanswered += len(asked) - self.budget
            asked = asked[: self.budget]
        self.budget -= len(asked)
        pairs = [(expression, (d.id[0], d.attributes, d.capacity)) for (_, expression), d in asked]
        self.evaluations += len(pairs)
        for (key, device), outcome in zip(asked, self.evaluator(pairs) if pairs else [], strict=True):
            if isinstance(outcome, device_cel.SelectorError):
                found[key] = outcome
            elif isinstance(outcome, Exception):  # an attribute of no known type: kube-scheduler errs too
                found[key] = device_cel.SelectorError(f"device {'/'.join(device.id)}: {outcome}")
            else:
                found[key] = bool(outcome)
            said = found[key]
            if isinstance(said, device_cel.SelectorError) and said.transient:
                self.unanswered += 1
                continue
            matched[key] = said
            if isinstance(said, device_cel.SelectorError) and said.over_budget:
                self.failed[key[1]] = str(said)[-300:]
        return found


K = TypeVar("K")
V = TypeVar("V")


class BoundedMap(Generic[K, V]):
    """A map of at most `bound` entries, the least recently read or written evicted first, one at a
    time (never cleared whole: a tenant filling it costs only its own entries again)."""

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.evicted = 0
        self._entries: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        found = self._entries.get(key)
        if found is not None:
            self._entries.move_to_end(key)
        return found

    def __setitem__(self, key: K, value: V) -> None:
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self.bound:
            self._entries.popitem(last=False)
            self.evicted += 1

    def pop(self, key: K) -> V | None:
        return self._entries.pop(key, None)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries


def inventory_from(
    classes: Iterable[Obj],
    slices: Iterable[Obj],
    claims: Iterable[Obj],
    templates: Iterable[Obj] | Mapping[tuple[str, str], Obj],
    memo: Memo | None = None,
    gathered: Gathered | None = None,
    templates_version: str | None = None,
) -> Inventory:
    """The inventory of these objects; a PoolBook's pools (`gathered`) instead of the slices'."""
    inventory = Inventory(memo=memo or Memo(), templates_version=templates_version)
    for obj in classes:
        device_class = DeviceClass.from_api(obj)
        if device_class.name:
            inventory.classes[device_class.name] = device_class
    if gathered is None:
        inventory.pools = gather_pools(slices, inventory.problems, inventory.memo)
    else:
        inventory.pools, inventory.problems, inventory.pool_index = gathered.pools, gathered.problems, gathered.index
    for claim in claims:
        meta = claim.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        inventory.claims[key] = claim
        owner = next((o for o in meta.get("ownerReferences") or [] if o.get("kind") == "Pod"), None)
        if owner is not None:
            inventory.owners[f"{key[0]}/{key[1]}"] = str(owner.get("uid") or "")
        for device in allocated_devices(claim):
            inventory.taken[device] = f"{key[0]}/{key[1]}"
    inventory.templates = dict(templates) if isinstance(templates, Mapping) else templates_by_name(templates)
    return inventory


def templates_by_name(templates: Iterable[Obj]) -> dict[tuple[str, str], Obj]:
    """(namespace, name) -> template (DeviceWatch keeps it while the templates do not change)."""
    found: dict[tuple[str, str], Obj] = {}
    for template in templates:
        meta = template.get("metadata") or {}
        found[(str(meta.get("namespace") or ""), str(meta.get("name") or ""))] = template
    return found


def allocated_devices(claim: Obj) -> list[DeviceId]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    return [
        (str(r.get("driver") or ""), str(r.get("pool") or ""), str(r.get("device") or ""))
        for r in results
        if isinstance(r, dict)
    ]


def gather_pools(slices: Iterable[Obj], problems: list[str] | None = None, memo: Memo | None = None) -> list[Pool]:
    """Slices grouped by (driver, pool), the newest generation only, each complete when all its pool's
    `resourceSliceCount` slices of that generation are there (pools_stable.go GatherPools). A slice
    parsed before (same uid and resourceVersion, Memo) is not read again."""
    newest: dict[tuple[str, str], tuple[int, list[tuple[tuple[str, str], Obj, Pool | None]]]] = {}
    for obj in slices:
        meta = obj.get("metadata") or {}
        seen = (str(meta.get("uid") or ""), str(meta.get("resourceVersion") or ""))
        parsed = memo.slices.get(seen) if memo is not None and seen[1] else None
        if parsed is not None:
            key, generation = (parsed.driver, parsed.name), parsed.generation
        else:
            spec = obj.get("spec") or {}
            pool = spec.get("pool") or {}
            key = (str(spec.get("driver") or ""), str(pool.get("name") or ""))
            try:
                generation = int(pool.get("generation") or 0)
            except (TypeError, ValueError):
                if problems is not None:
                    problems.append(f"ResourceSlice {meta.get('name')}: unreadable pool")
                continue
        have = newest.get(key)
        if have is None or generation > have[0]:
            newest[key] = (generation, [(seen, obj, parsed)])
        elif generation == have[0]:
            have[1].append((seen, obj, parsed))
    pools = []
    kept: dict[tuple[str, str], Pool] = {}
    for (driver, name), (generation, group) in sorted(newest.items()):
        for seen, obj, parsed in group:
            if parsed is None:
                try:
                    parsed = _pool_of_slice(obj, driver, name, generation)
                except (TypeError, ValueError, AttributeError) as error:
                    if problems is not None:
                        problems.append(f"ResourceSlice {(obj.get('metadata') or {}).get('name')}: {error}")
                    continue
            kept[seen] = parsed
            complete = len(group) == parsed.slice_count
            pools.append(parsed if parsed.complete == complete else replace(parsed, complete=complete))
    if memo is not None and len(kept) <= MAX_REMEMBERED_SLICES:
        memo.slices = kept  # only the slices there now: a deleted or changed one is forgotten
    return pools


def _pool_key(obj: Obj) -> PoolKey:
    spec = obj.get("spec") or {}
    pool = (spec.get("pool") if isinstance(spec, dict) else None) or {}
    driver = spec.get("driver") if isinstance(spec, dict) else ""
    return str(driver or ""), str(pool.get("name") or "") if isinstance(pool, dict) else ""


@dataclass(frozen=True)
class Gathered:
    """A PoolBook's pools, in gather_pools' order, what could not be read, and their index."""

    pools: list[Pool]
    problems: list[str]
    index: PoolIndex


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

    def apply(self, changes: Mapping[str, Obj | None]) -> None:
        """Slices now (by key), None for one deleted."""
        dirty: set[PoolKey] = set()
        for key, obj in changes.items():
            old = self._pool_of.pop(key, None)
            if old is not None:
                self._members[old].discard(key)
                dirty.add(old)
            if obj is None:
                self._slices.pop(key, None)
                continue
            self._slices[key] = obj
            self._pool_of[key] = pool = _pool_key(obj)
            self._members.setdefault(pool, set()).add(key)
            dirty.add(pool)
        if dirty:
            self._regather(dirty)

    def _regather(self, dirty: set[PoolKey]) -> None:
        before = self._now
        pools: list[Pool] | None = list(before.pools)
        local = dict(before.index.local)
        nodes, names = dict(before.index.nodes), dict(before.index.names)
        shared_changed = False
        for key in dirty:
            old = self._gathered.pop(key, ([], []))[0]
            members = self._members.get(key)
            self._unreadable.discard(key)
            if members:
                problems: list[str] = []
                self._gathered[key] = (gather_pools([self._slices[k] for k in sorted(members)], problems), problems)
                if problems:
                    self._unreadable.add(key)
            else:
                self._members.pop(key, None)
            new = self._gathered.get(key, ([], []))[0]
            for pool in old:
                if pool.node_name:
                    local[pool.node_name] = [p for p in local.get(pool.node_name, ()) if p is not pool]
                    if not local[pool.node_name]:
                        del local[pool.node_name]
            for pool in new:
                if pool.node_name:
                    local[pool.node_name] = [*local.get(pool.node_name, ()), pool]
            shared_changed |= any(not p.node_name for p in (*old, *new))
            found = PoolIndex.of(new)
            nodes.pop(key, None)
            names.pop(key, None)
            nodes.update(found.nodes)
            names.update(found.names)
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


def _pool_of_slice(obj: Obj, driver: str, name: str, generation: int) -> Pool:
    """One slice as a Pool (a pool of several slices is several Pools with the same name; the devices
    are what matters, each slice keeps its own node selection)."""
    spec = obj.get("spec") or {}
    count = int((spec.get("pool") or {}).get("resourceSliceCount") or 1)
    unmodelled = None
    if spec.get("perDeviceNodeSelection"):
        unmodelled = "per-device node selection"
    devices = []
    for raw in spec.get("devices") or []:
        if not isinstance(raw, dict):
            continue
        device_unmodelled = None
        if raw.get("allowMultipleAllocations"):
            device_unmodelled = "consumable capacity (allowMultipleAllocations)"
        taints = tuple(
            (str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or ""))
            for t in raw.get("taints") or []
            if isinstance(t, dict)
        )
        devices.append(
            Device(
                (driver, name, str(raw.get("name") or "")),
                raw.get("attributes") or {},
                raw.get("capacity") or {},
                taints,
                device_unmodelled or unmodelled,
                # repr, not sorted JSON (a fifth of the cost; 40,000 devices): a driver writes its devices'
                # fields in one order, and two orders of the same content only cost a second evaluation
                repr((driver, raw.get("attributes"), raw.get("capacity"))),
                device_counters.consumed(raw),
            )
        )
    selector = spec.get("nodeSelector")
    return Pool(
        driver,
        name,
        generation,
        complete=count == 1,
        slice_count=count,
        devices=tuple(devices),
        node_name=str(spec["nodeName"]) if spec.get("nodeName") else None,
        all_nodes=bool(spec.get("allNodes")),
        node_selector=(selector or {}).get("nodeSelectorTerms") if isinstance(selector, dict) else None,
        unmodelled=unmodelled,
        counters=device_counters.offered(spec),
    )


def _cel_selectors(selectors: Any) -> tuple[str, ...]:
    return tuple(
        str((s.get("cel") or {}).get("expression") or "")
        for s in selectors or []
        if isinstance(s, dict) and isinstance(s.get("cel"), dict)
    )


def _subrequest(name: str, raw: Mapping[str, Any], unmodelled: set[str]) -> Subrequest:
    if raw.get("adminAccess"):
        unmodelled.add("admin access")
    if (raw.get("capacity") or {}).get("requests"):
        unmodelled.add("consumable capacity (capacity.requests)")
    mode = raw.get("allocationMode") or "ExactCount"
    return Subrequest(
        name=name,
        device_class=str(raw.get("deviceClassName") or ""),
        selectors=_cel_selectors(raw.get("selectors")),
        all=mode == "All",
        count=max(int(raw.get("count") or 1), 1),
        tolerations=tuple(
            tuple(sorted((str(k), str(v)) for k, v in t.items()))
            for t in raw.get("tolerations") or []
            if isinstance(t, dict)
        ),
    )


def claim_requests(claim_spec: Mapping[str, Any], unmodelled: set[str]) -> tuple[Request, ...]:
    """A claim's requests (resource/v1 DeviceClaim): `exactly` or `firstAvailable` each."""
    devices = claim_spec.get("devices") or {}
    requests = []
    for raw in devices.get("requests") or []:
        if not isinstance(raw, dict):
            continue
        name = str(raw.get("name") or "")
        if isinstance(raw.get("exactly"), dict):
            requests.append(Request(name, (_subrequest(name, raw["exactly"], unmodelled),)))
        elif raw.get("firstAvailable"):
            alternatives = tuple(
                _subrequest(f"{name}/{sub.get('name', '')}", sub, unmodelled)
                for sub in raw["firstAvailable"]
                if isinstance(sub, dict)
            )
            if alternatives:
                requests.append(Request(name, alternatives))
    return tuple(requests)


def pod_demand(namespace: str, spec: Mapping[str, Any], inventory: Inventory) -> Demand:
    """The claims of a pod (its spec's resourceClaims), read against the inventory."""
    claims: list[ClaimDemand] = []
    problems: list[str] = []
    unmodelled: set[str] = set()
    for entry in spec.get("resourceClaims") or []:
        if not isinstance(entry, dict):
            continue
        if entry.get("resourceClaimTemplateName"):
            name = str(entry["resourceClaimTemplateName"])
            template = inventory.templates.get((namespace, name))
            if template is None:
                problems.append(f"ResourceClaimTemplate {name} does not exist")
                continue
            claim_spec = (template.get("spec") or {}).get("spec") or {}
            requests = claim_requests(claim_spec, unmodelled)
            claims.append(ClaimDemand(f"template {namespace}/{name}", requests, constraints=constraints_of(claim_spec)))
        elif entry.get("resourceClaimName"):
            name = str(entry["resourceClaimName"])
            claim = inventory.claims.get((namespace, name))
            if claim is None:
                problems.append(f"ResourceClaim {name} does not exist")
                continue
            allocation = (claim.get("status") or {}).get("allocation")
            if allocation:
                terms = ((allocation.get("nodeSelector") or {}).get("nodeSelectorTerms")) or None
                claims.append(
                    ClaimDemand(f"claim {namespace}/{name}", (), True, allocated_node_terms=terms, allocated=True)
                )
            else:
                spec_of = claim.get("spec") or {}
                requests = claim_requests(spec_of, unmodelled)
                constraints = constraints_of(spec_of)
                claims.append(ClaimDemand(f"claim {namespace}/{name}", requests, shared=True, constraints=constraints))
    # a DeviceClass's extended resource asked for in the containers (KEP-5004): devices of that class
    wanted = _extended_requests(spec)
    for device_class in inventory.classes.values():
        amount = wanted.get(device_class.extended_resource or "")
        if amount:
            request = Request(device_class.name, (Subrequest(device_class.name, device_class.name, count=amount),))
            claims.append(ClaimDemand(f"extended resource {device_class.extended_resource}", (request,)))
    for needed in claims:
        for request in needed.requests:
            for alternative in request.alternatives:
                if alternative.device_class not in inventory.classes:
                    problems.append(f"DeviceClass {alternative.device_class} does not exist ({needed.key})")
    return Demand(tuple(claims), tuple(dict.fromkeys(problems)), tuple(sorted(unmodelled)))


def _extended_requests(spec: Mapping[str, Any]) -> dict[str, int]:
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


# --- allocation -----------------------------------------------------------------------------------


@dataclass
class Allocator:
    """Allocations in the order pods come, each on the node it is placed on, as kube-scheduler makes
    them pod by pod: devices picked for one pod are taken for the next (allocatedstate.go)."""

    inventory: Inventory
    picked: set[DeviceId] = field(default_factory=set)
    # a shared claim allocated in this run: its devices and the nodes that reach all of them
    shared: dict[str, tuple[tuple[DeviceId, ...], frozenset[str] | None]] = field(default_factory=dict)
    nodes: Sequence[Node] = ()
    # pods (uids) whose own claims' devices count as free: a gang member's shape holds them (class_totals)
    free_for: Collection[str] = ()
    _used: dict[device_counters.CounterKey, Decimal] | None = None  # shared counters taken so far

    def counters_used(self) -> dict[device_counters.CounterKey, Decimal]:
        if self._used is None:
            self._used = self.inventory.counters_used(self.free_for)
        return self._used

    def taken(self, device: DeviceId) -> bool:
        if device in self.picked:
            return True
        holder = self.inventory.taken.get(device)
        return holder is not None and not (self.free_for and self.inventory.owners.get(holder) in self.free_for)

    def allocate(self, demand: Demand, node: Node) -> str | None:
        """Allocates every claim of the pod on `node` (all or nothing); None, or why it cannot."""
        if demand.problems:
            return "; ".join(demand.problems)
        if demand.unmodelled:
            return "the gate does not model " + ", ".join(demand.unmodelled)
        picked: list[DeviceId] = []
        shared: dict[str, tuple[tuple[DeviceId, ...], frozenset[str] | None]] = {}
        for claim in demand.claims:
            if claim.allocated:
                if claim.allocated_node_terms is not None and not any(
                    term_matches(t, node) for t in claim.allocated_node_terms
                ):
                    return f"{claim.key} is allocated where this node cannot reach it"
                continue
            if claim.shared and claim.key in self.shared:
                _, reach = self.shared[claim.key]
                if reach is not None and node.name not in reach:
                    return f"{claim.key} was allocated for another pod where this node cannot reach it"
                continue
            try:
                chosen = self._allocate_claim(claim, node, set(picked))
            except device_cel.SelectorError as error:
                return str(error)
            if chosen is None:
                return f"no free devices on {node.name} for {claim.key}{self._constraints_note(claim, node, picked)}"
            picked.extend(chosen)
            if claim.shared:
                shared[claim.key] = (tuple(chosen), self._reach(chosen))
        self.picked.update(picked)
        self.shared.update(shared)
        self._consume(picked)
        return None

    def _consume(self, picked: Iterable[DeviceId]) -> None:
        consuming = [d for d in (self.inventory._consuming.get(i) for i in picked) if d is not None]
        if consuming:
            used = self.counters_used()
            for device in consuming:
                device_counters.take(device.id[0], device.id[1], device.consumes, used)

    def allocate_alike(self, demand: Demand, node: Node, pods: int) -> bool:
        """`pods` pods of this one demand on `node` at once, when that is the same as one by one: a single
        claim of its own, one request of ExactCount, and only pools of this node (what no pod elsewhere
        can take). False, nothing taken, when it is not so or the devices are too few: then one by one
        says which pod cannot be placed, and why."""
        if demand.problems or demand.unmodelled or len(demand.claims) != 1:
            return False
        claim = demand.claims[0]
        if claim.shared or claim.allocated or claim.alternatives_or_constraints or len(claim.requests) != 1:
            return False
        sub = claim.requests[0].alternatives[0]
        pools = self.inventory.pools_for(node)
        if sub.all or not all(pool.node_name == node.name for pool in pools):
            return False
        wanted = sub.count * pods
        try:
            eligible = self._eligible(sub, pools, set(), enough=wanted)
        except device_cel.SelectorError:
            return False
        if eligible is None or len(eligible) < wanted:
            return False
        if any(d.consumes for d in eligible):
            return False  # shared counters: one by one, each within what is left
        self.picked.update(d.id for d in eligible)
        return True

    def _constraints_note(self, claim: ClaimDemand, node: Node, picked: Sequence[DeviceId]) -> str:
        """Why, when it is the claim's constraints: devices there are, but none that meet them."""
        if not claim.constraints or self._allocate_claim(replace(claim, constraints=()), node, set(picked)) is None:
            return ""
        named = ", ".join(
            f"{'distinctAttribute' if c.distinct else 'matchAttribute'} {c.attribute}" for c in claim.constraints
        )
        return f" that meet spec.devices.constraints ({named})"

    def _reach(self, devices: Sequence[DeviceId]) -> frozenset[str] | None:
        """The nodes from which every device is reachable (None: every node)."""
        reach: frozenset[str] | None = None
        wanted = set(devices)
        for pool in self.inventory.pools:
            if not any(d.id in wanted for d in pool.devices):
                continue
            if pool.all_nodes:
                continue
            nodes = frozenset(n.name for n in self.nodes if pool.applies_to(n))
            reach = nodes if reach is None else reach & nodes
        return reach

    def _allocate_claim(self, claim: ClaimDemand, node: Node, also_taken: set[DeviceId]) -> list[DeviceId] | None:
        """The devices for every request of the claim, the first combination of firstAvailable choices
        (in order) that can be allocated: a matching of request units to distinct free devices."""
        pools = self.inventory.pools_for(node)
        for tried, choice in enumerate(_choices(claim.requests)):
            if tried >= MAX_ALTERNATIVE_CHOICES:
                return None
            result = self._match(choice, pools, also_taken, claim.constraints)
            if result is not None:
                return result
        return None

    def _eligible(
        self, sub: Subrequest, pools: Sequence[Pool], also_taken: set[DeviceId], enough: int = 0
    ) -> list[Device] | None:
        """The devices the subrequest may take (free, selected, untainted), the first `enough` of them
        when that is given; None when `All` cannot be met (a pool incomplete, a matching device taken,
        or none at all)."""
        eligible: list[Device] = []
        for pool in pools:
            if enough and len(eligible) >= enough:
                break
            for device in self.inventory.selected(sub, pool):
                if sub.all and not pool.complete:
                    return None
                if device.id in also_taken or self.taken(device.id):
                    if sub.all:
                        return None
                    continue
                eligible.append(device)
                if enough and len(eligible) >= enough:
                    break
        if sub.all and not eligible:
            return None
        return eligible

    def _match(
        self,
        choice: Sequence[Subrequest],
        pools: Sequence[Pool],
        also_taken: set[DeviceId],
        constraints: Sequence[Constraint] = (),
    ) -> list[DeviceId] | None:
        shares_counters = bool(self.inventory.counter_totals) and any(
            d.consumes for sub in choice for d in self._eligible(sub, pools, also_taken) or ()
        )
        if constraints or shares_counters:
            return self._constrained(choice, pools, also_taken, constraints)
        if len(choice) == 1 and not choice[0].all:
            # one request of ExactCount (most claims): any `count` free devices it selects, no matching
            count = choice[0].count
            only = self._eligible(choice[0], pools, also_taken, enough=count)
            return [d.id for d in only] if only is not None and len(only) == count else None
        units: list[list[DeviceId]] = []
        fixed: list[DeviceId] = []
        for sub in choice:
            eligible = self._eligible(sub, pools, also_taken)
            if eligible is None:
                return None
            if sub.all:
                fixed.extend(d.id for d in eligible)
                continue
            units.extend([[d.id for d in eligible]] * sub.count)
        if len(set(fixed)) < len(fixed):
            return None  # two `All` requests over the same device
        blocked = set(fixed)
        owner: dict[DeviceId, int] = {}
        for unit in range(len(units)):
            if not _augment(unit, units, owner, set(), blocked):
                return None
        return fixed + sorted(owner, key=lambda d: owner[d])

    def _constrained(
        self,
        choice: Sequence[Subrequest],
        pools: Sequence[Pool],
        also_taken: set[DeviceId],
        constraints: Sequence[Constraint],
    ) -> list[DeviceId] | None:
        """Devices for the subrequests chosen that meet the claim's constraints (device_constraints.py)."""
        units: list[tuple[str, list[Candidate]]] = []
        fixed: list[tuple[str, Candidate]] = []
        left = self._counters_left(also_taken)
        for sub in choice:
            eligible = self._eligible(sub, pools, also_taken)
            if eligible is None:
                return None
            candidates = [
                Candidate(
                    d.id,
                    tuple(attribute_value(d.id[0], d.attributes, c.attribute) for c in constraints),
                    tuple(((d.id[0], d.id[1], s, c), amount) for s, c, amount in d.consumes),
                )
                for d in eligible
            ]
            if sub.all:
                fixed.extend((sub.name, c) for c in candidates)
            else:
                units.extend([(sub.name, candidates)] * sub.count)
        return search(units, fixed, constraints, left)

    def _counters_left(self, also_taken: Iterable[DeviceId]) -> dict[device_counters.CounterKey, Decimal]:
        """What each shared counter still holds, after the devices allocated, picked, and `also_taken`."""
        totals = self.inventory.counter_totals
        if not totals:
            return {}
        used = dict(self.counters_used())
        for device in (d for d in (self.inventory._consuming.get(i) for i in also_taken) if d is not None):
            device_counters.take(device.id[0], device.id[1], device.consumes, used)
        return {key: total - used.get(key, Decimal(0)) for key, total in totals.items()}


def _augment(
    unit: int,
    units: Sequence[Sequence[DeviceId]],
    owner: dict[DeviceId, int],
    seen: set[DeviceId],
    blocked: set[DeviceId],
) -> bool:
    """Kuhn's augmenting path: a device for `unit`, moving earlier units to other devices if need be."""
    for device in units[unit]:
        if device in blocked or device in seen:
            continue
        seen.add(device)
        if device not in owner or _augment(owner[device], units, owner, seen, blocked):
            owner[device] = unit
            return True
    return False


def _choices(requests: Sequence[Request]) -> Iterator[tuple[Subrequest, ...]]:
    """Every combination of alternatives, the first ones first (allocateOne's order)."""
    if not requests:
        yield ()
        return
    first, rest = requests[0], requests[1:]
    for alternative in first.alternatives:
        for tail in _choices(rest):
            yield (alternative, *tail)


def _tolerated(sub: Subrequest, key: str, value: str, effect: str) -> bool:
    """Device taints are tolerated as node taints are (allocator_stable.go taintTolerated)."""
    return tolerates([dict(t) for t in sub.tolerations], Taint(key, value, effect))
