"""The cluster's devices as kube-scheduler sees them, counted per node for the gate's placement."""

from __future__ import annotations

import functools
import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from webhook.controller.decide import device_capacity, device_cel, device_counters
from webhook.controller.decide.device_alike import MAX_KINDS_OF_NODE, nodes_alike_key
from webhook.controller.decide.device_claims import Claims
from webhook.controller.decide.device_constraints import constraints_of
from webhook.controller.decide.device_count import MAX_CLAIMS_COUNTED_PER_NODE, claims_on
from webhook.controller.decide.device_demand import claim_requests, distinct_shares, pod_demand, selector_payers
from webhook.controller.decide.device_lookup import DevicesById, PoolsByKey
from webhook.controller.decide.device_memo import Memo
from webhook.controller.decide.device_pools import carry_worked_out, changed_nodes, replaced_pools
from webhook.controller.decide.device_types import (
    ClaimDemand,
    Demand,
    Device,
    DeviceClass,
    DeviceId,
    Pool,
    PoolIndex,
    Subrequest,
    claim_resource,
    class_resource,
    extended_requests,
    tolerated,
)
from webhook.controller.decide.device_usage import Usages
from webhook.controller.decide.shapes import Node
from webhook.controller.interning import is_canonical
from webhook.gangs.model import Obj

MAX_REMEMBERED_DEMANDS = 20_000  # pods' demands kept per inventory (by template), oldest out
# distinct selector sets of one namespace's waiting claims counted per node (`narrowed`): what one
# namespace's templates cost every node is bounded; past it, its other sets wait and say so
MAX_SELECTOR_SETS_PER_NAMESPACE = 16


@dataclass
class Inventory:
    """The cluster's devices as kube-scheduler sees them: classes, pools (newest generation), the
    devices taken by allocated claims, and the claims and templates pods name."""

    classes: dict[str, DeviceClass] = field(default_factory=dict)
    pools: list[Pool] = field(default_factory=list)
    parsed: Claims = field(default_factory=Claims)  # the claims, shared by the inventories of one list version
    templates: dict[tuple[str, str], Obj] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # slices that could not be read
    memo: Memo = field(default_factory=lambda: Memo())
    pool_index: PoolIndex | None = None  # a PoolBook's, kept up to date; else found from `pools`
    # by node name: the node as it was read (a pool's nodeSelector reads its labels) and its pools
    _pools_of: dict[str, tuple[Node, tuple[Pool, ...]]] = field(default_factory=dict)
    # remembered answers; each keeps the objects its key names by id, so no other object takes that id:
    # by pool, what each subrequest selects there
    _selected: dict[int, tuple[Pool, dict[Subrequest, tuple[Device, ...]]]] = field(default_factory=dict)
    _demands: dict[tuple[str, Any], tuple[Any, Any, Demand]] = field(default_factory=dict)
    # ("template" | "claim", namespace, name) named by pods that wait: only their selectors are counted
    # per node (`narrowed`); None counts every template and claim (offline: tests, simulation)
    waiting: frozenset[tuple[str, str, str]] | None = None
    templates_version: str | None = None  # the templates informer's resourceVersion, when watched
    deferred: dict[str, str] = field(default_factory=dict)  # class resource -> why it is not counted yet
    replaced: tuple[Sequence[Pool], list[Pool], list[Pool]] | None = None  # `remembering`'s pools, gone, come
    # class_totals by nodes alike: never carried by `replace` (another `waiting` counts other things)
    _totals_alike: dict[tuple[Any, ...], dict[str, int]] = field(default_factory=dict, init=False)

    def pools_for(self, node: Node) -> tuple[Pool, ...]:
        index = self._index
        known = self._pools_of.get(node.name)
        # the same node, or one relabelled where no pool selects nodes by label: its pools are the same
        if known is not None and (known[0] is node or not index.shared or known[0].labels == node.labels):
            return known[1]
        local = index.local.get(node.name, ())
        pools = (*local, *(p for p in index.shared if p.applies_to(node))) if index.shared else tuple(local)
        self._pools_of[node.name] = (node, pools)
        return pools

    @functools.cached_property
    def extended_resources(self) -> tuple[str, ...]:
        """The extended resources the classes' devices serve (KEP-5004), in the classes' order."""
        return tuple(c.extended_resource for c in self.classes.values() if c.extended_resource)

    @property
    def has_node_selecting_pools(self) -> bool:
        """Whether a pool reaches nodes by their labels or all of them (not one node by name)."""
        return bool(self._index.shared)

    @functools.cached_property
    def _index(self) -> PoolIndex:
        return self.pool_index or PoolIndex.of(self.pools)

    def selector_matches(self, device: Device, expression: str) -> bool:
        """Remembered per device content and expression (Memo): devices alike are evaluated once."""
        key = (device.content, expression)
        found = self.memo.matched.get(key)
        if found is None:
            found = self.memo.evaluate({key: device}, self.payers)[key]
        if isinstance(found, device_cel.SelectorError):
            if found.transient:  # not answered this pass (its payer's share spent): not selected, asked again
                return False
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
        device_class, unanswered = self.classes[sub.device_class], self.memo.unanswered
        self.memo.prime_within((pool,), device_class.selectors, sub.selectors, self.payers)
        found = tuple(
            device
            for device in pool.devices
            if not device.unmodelled
            and all(self.selector_matches(device, s) for s in device_class.selectors)
            and all(self.selector_matches(device, s) for s in sub.selectors)
            and not any(
                effect in ("NoSchedule", "NoExecute") and not tolerated(sub, k, v, effect)
                for k, v, effect in device.taints
            )
        )
        if self.memo.unanswered == unanswered:  # else asked again: some selectors were not answered now
            kept[1][sub] = found
        return found

    def demand(self, namespace: str, spec: Mapping[str, Any]) -> Demand:
        """`pod_demand`, remembered by what it reads of the spec (a gang's pods share their template)."""
        claims, containers = spec.get("resourceClaims"), spec.get("containers")
        key: tuple[str, Any]
        if is_canonical(claims) and is_canonical(containers):  # the controller's cached pods (informer.py)
            key = (namespace, (id(claims), id(containers)))
        else:
            key = (namespace, json.dumps([claims, extended_requests(spec)], sort_keys=True))
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
        """This inventory, with what `before` worked out that still holds (the devices a request selects in
        each pool still here, pods' demands): a slice republished costs its own pool, not every device."""
        if before is None:
            return self
        gone, came = replaced_pools(before.pools, self.pools)
        self.replaced = (before.pools, gone, came)
        carry_worked_out(before, self, gone, came)
        if before.classes != self.classes:
            return self
        # taken from `before`, not copied, as carry_worked_out takes its maps
        self._selected, before._selected = before._selected, {}
        for pool in gone:
            self._selected.pop(id(pool), None)
        if before.demand_basis == self.demand_basis:
            self._demands, before._demands = before._demands, {}
        return self

    @functools.cached_property
    def demand_basis(self) -> tuple[Any, ...]:
        """What pods' demands are read from (`pod_demand`): the classes, the templates, the claims made
        for no pod (shared ones, allocated or not), and whether any device allows multiple allocations.
        Other devices published, or allocated to pods' own claims, change none of them."""

        def versions(objects: Mapping[tuple[str, str], Obj]) -> frozenset[tuple[str, str, str]]:
            return frozenset(
                (*key, str((o.get("metadata") or {}).get("resourceVersion"))) for key, o in objects.items()
            )

        shared = {k: c for k, c in self.claims.items() if f"{k[0]}/{k[1]}" not in self.owners}
        # the templates' list version where the watch gives one: a thousand templates of another team are
        # not walked on every pass (a template changed anywhere costs the demands read again, a few)
        templates: Any = self.templates_version or versions(self.templates)
        # whether any device allows multiple allocations: a request of several devices is then counted
        # whole per node (device_demand.distinct_shares), so devices published can change demands
        return (tuple(sorted(self.classes.items())), templates, versions(shared), bool(self.shared_devices))

    def changed_nodes(self, before: Inventory | None) -> set[str] | None:  # device_pools.changed_nodes
        return changed_nodes(before, self)

    @property
    def claims(self) -> dict[tuple[str, str], Obj]:
        return self.parsed.by_name

    @property
    def owners(self) -> dict[str, str]:  # claim -> uid of the pod it was made for
        return self.parsed.owners

    @property
    def taken(self) -> dict[DeviceId, str]:  # device -> the claim holding it
        return self.parsed.taken

    @property
    def shares(self) -> dict[DeviceId, list[tuple[str, device_capacity.Consumption]]]:
        """A device allowing multiple allocations -> its shares: (the claim holding it, what it consumes)."""
        return self.parsed.shares

    def lost_devices(self, uid: str, namespace: str, spec: Mapping[str, Any]) -> list[DeviceId]:
        """The devices allocated to a pod's claims (its own, those it shares by name) no slice publishes now."""
        claims = list(self.parsed.by_pod.get(uid, ()))
        claims += [
            f"{namespace}/{entry['resourceClaimName']}"
            for entry in spec.get("resourceClaims") or []
            if isinstance(entry, dict) and entry.get("resourceClaimName")
        ]
        names, held = self._index.names, self.parsed.devices_held
        return [d for c in claims for d in held.get(c, ()) if d[2] not in names.get((d[0], d[1]), ())]

    def allocated_pods(self) -> frozenset[str]:
        """The uids of the pods whose own claims are allocated (kube-scheduler has placed them)."""
        return self.parsed.allocated_pods

    @functools.cached_property
    def counter_totals(self) -> dict[device_counters.CounterKey, Decimal]:
        """Every shared counter the pools publish (partitionable devices)."""
        return device_counters.totals((p.driver, p.name, p.counters) for p in self.pools if p.counters)

    @functools.cached_property
    def _consuming(self) -> DevicesById:
        """The devices that consume shared counters, by id (found in their pools when asked)."""
        return DevicesById(self._pools_by_key, self.pools, lambda d: bool(d.consumes), lambda p: p.any_consuming)

    @functools.cached_property
    def _pools_by_key(self) -> PoolsByKey:
        return PoolsByKey(self._index, self.pools)

    def counters_used(self, free_for: Collection[str] = ()) -> Mapping[device_counters.CounterKey, Decimal]:
        """What allocated devices consume of shared counters, pods in `free_for` aside (device_usage.py)."""
        return self._usages.of(free_for)[0]

    def capacity_used(self, free_for: Collection[str] = ()) -> Mapping[DeviceId, Mapping[str, Decimal]]:
        """What the shares of each shared device consume (those of pods in `free_for` aside); read only."""
        return self._usages.of(free_for)[1]

    @functools.cached_property
    def _usages(self) -> Usages:
        return Usages(self.taken, self.shares, self.owners, self._consuming, self.allocated_pods())

    @functools.cached_property
    def shared_devices(self) -> Mapping[DeviceId, Device]:
        """The devices that allow multiple allocations, by id (found in their pools when asked)."""
        return DevicesById(self._pools_by_key, self.pools, lambda d: d.shared, lambda p: p.any_sharing)

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
    def payers(self) -> Mapping[str, tuple[str, ...]]:  # who pays for each selector's CEL (cel_budget.py)
        return selector_payers(self._waiting_specs())

    @functools.cached_property
    def counted_claims(self) -> dict[str, ClaimDemand]:
        """The waiting pods' template claims with alternatives or constraints, by `claim_resource`: each
        node counts how many times its devices can be allocated to each (class_totals), within the same
        per-namespace bound as selector sets."""
        found: dict[str, ClaimDemand] = {}
        per_namespace: dict[str, set[str]] = {}
        for (namespace, name), spec in self._waiting_specs(templates_only=True):
            requests = claim_requests(spec, set())
            shares = distinct_shares(requests, self)
            claim = ClaimDemand(
                f"template {namespace}/{name}", requests, constraints=constraints_of(spec), distinct_shares=shares
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

    def class_totals(self, node: Node, counted_by_pods: Collection[str] = ()) -> Mapping[str, int]:
        """Per class resource (`class_resource`): the devices of the node's pools the class (and a
        request's selectors) select that no claim holds but the claims of the pods in `counted_by_pods`
        (uids), whose shapes hold their devices. Worked out once per inventory for nodes alike
        (device_alike.py): 5,000 nodes of one model count as one."""
        alike = nodes_alike_key(self, node, counted_by_pods)
        known = self._totals_alike.get(alike) if alike is not None else None
        if known is not None:
            return known  # read only: 5,000 nodes of a kind share it
        unanswered = self.memo.unanswered
        totals = self._class_totals(node, counted_by_pods)
        if alike is not None and self.memo.unanswered == unanswered and len(self._totals_alike) < MAX_KINDS_OF_NODE:
            self._totals_alike[alike] = totals  # not when CEL could not answer: counted again later
        return totals

    def _class_totals(self, node: Node, counted_by_pods: Collection[str]) -> dict[str, int]:
        totals: dict[str, int] = {}
        for device_class in self.classes.values():  # a request's selectors only where its class selects
            sets = [s for selectors in self.narrowed.get(device_class.name, ()) for s in selectors]
            self.memo.prime_within(self.pools_for(node), device_class.selectors, sets, self.payers)
        for device_class in self.classes.values():
            free = [
                device
                for pool in self.pools_for(node)
                for device in pool.devices
                if not device.unmodelled and self.counted(device, counted_by_pods)
            ]
            selected = [d for d in free if self._selects(d, device_class.selectors)]
            if any(d.consumes for d in selected):  # what claims hold of counters: asked only where one is read
                selected = device_counters.partitioned(
                    selected, self.counter_totals, self.counters_used(counted_by_pods)
                )
            if not selected:
                continue
            used = self.capacity_used(counted_by_pods) if any(d.shared for d in selected) else {}
            # a shared device serves as many requests without capacity requests as its capacity holds
            units = device_capacity.units_of(selected, used, MAX_CLAIMS_COUNTED_PER_NODE)
            totals[class_resource(device_class.name)] = sum(units.values())
            if device_class.extended_resource and not node.allocatable.get(device_class.extended_resource):
                totals[device_class.extended_resource] = sum(units.values())
            for selectors in self.narrowed.get(device_class.name, ()):
                count = sum(units[d.id] for d in selected if self._selects(d, selectors))
                if count:
                    totals[class_resource(device_class.name, selectors)] = count
        for resource, claim in self.counted_claims.items():
            held = self.memo.charged_count(claim.key, functools.partial(claims_on, self, node, claim, counted_by_pods))
            if held:
                totals[resource] = held
        return totals

    def selector_problems(self, sub: Subrequest) -> list[str]:
        """Why the subrequest's devices are not counted: a selector that failed, or its set deferred."""
        device_class = self.classes.get(sub.device_class)
        found = [
            f"selector {expression[:120]!r}: {failed}"
            for expression in (*(device_class.selectors if device_class else ()), *sub.selectors)
            if (failed := self.memo.failed.get(expression) or self.memo.postponed.get(expression)) is not None
        ]
        deferred = self.deferred.get(class_resource(sub.device_class, sub.selectors)) if sub.selectors else None
        return [*found, deferred] if deferred else found

    def counted(self, device: Device, counted_by_pods: Collection[str]) -> bool:
        holder = self.taken.get(device.id)
        return holder is None or self.owners.get(holder) in counted_by_pods

    def _selects(self, device: Device, selectors: Sequence[str]) -> bool:
        """Every selector matches; an error counts as no (the devices check names it at the release)."""
        try:
            return all(self.selector_matches(device, s) for s in selectors)
        except device_cel.SelectorError:
            return False
