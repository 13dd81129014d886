"""Allocations in the order pods come, each on the node it is placed on (allocator_stable.go)."""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING

from webhook.controller.decide import device_capacity, device_cel, device_counters, device_first_fit, device_notes
from webhook.controller.decide.device_constraints import Candidate, Constraint, attribute_value, augment, search
from webhook.controller.decide.shapes import Node, term_matches

if TYPE_CHECKING:
    from webhook.controller.decide.device_inventory import Inventory
from webhook.controller.decide.device_types import ClaimDemand, Demand, Device, DeviceId, Pool, Request, Subrequest

MAX_ALTERNATIVE_CHOICES = 64  # firstAvailable combinations tried per claim, in order (a bound on the search)


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
    # shared counters taken so far: what this allocator took over what the inventory's allocations do
    _used: ChainMap[device_counters.CounterKey, Decimal] | None = None
    # what shares of devices allowing several allocations consume (an entry replaced, never changed in place)
    _capacity: ChainMap[DeviceId, Mapping[str, Decimal]] | None = None

    def capacity_used(self) -> ChainMap[DeviceId, Mapping[str, Decimal]]:
        if self._capacity is None:
            self._capacity = device_counters.written_over(self.inventory.capacity_used(self.free_for))
        return self._capacity

    def counters_used(self) -> ChainMap[device_counters.CounterKey, Decimal]:
        if self._used is None:
            self._used = device_counters.written_over(self.inventory.counters_used(self.free_for))
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
        inv, pools = self.inventory, self.inventory.pools_for(node)
        picked: list[DeviceId] = []
        use: dict[DeviceId, dict[str, Decimal]] = {}  # this pod's shares of shared devices
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
                chosen = self.allocate_claim(claim, node, set(picked), use)
            except device_cel.SelectorError as error:
                return str(error)
            if chosen is None:
                note = device_notes.constraints(self, claim, node, picked) or device_notes.capacity(
                    self, claim, node, picked
                )
                offered = (d for r in claim.requests for s in r.alternatives for p in pools for d in inv.selected(s, p))
                note = note or device_counters.unpublished(offered, inv.counter_totals)
                return f"no free devices on {node.name} for {claim.key}{note}"
            picked.extend(chosen)
            if claim.shared:
                shared[claim.key] = (tuple(chosen), self._reach(chosen))
        whole = [d for d in picked if d not in sharing] if (sharing := self.inventory.shared_devices) else picked
        self.picked.update(whole)
        self.shared.update(shared)
        self.consume(whole)
        capacity = self.capacity_used()
        self.consume([d for d in use if d not in capacity])  # a shared device's counters, at its first share
        for device, amounts in use.items():
            capacity[device] = device_capacity.added(capacity.get(device, {}), tuple(amounts.items()))
        return None

    def consume(self, picked: Iterable[DeviceId]) -> None:
        """What `picked` consume of shared counters, taken from what this allocator counts as left."""
        by_id = self.inventory._consuming  # falsy: no device of the cluster consumes shared counters
        consuming = [d for d in (by_id.get(i) for i in picked) if d is not None] if by_id else []
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
        if sub.all or sub.admin or sub.capacity or not all(pool.node_name == node.name for pool in pools):
            return False
        if any(pool.any_consuming or pool.any_sharing for pool in pools):
            return False  # shared counters or capacity: one by one (or in turn), each within what is left
        wanted = sub.count * pods
        try:
            eligible = self.eligible(sub, pools, set(), enough=wanted)
        except device_cel.SelectorError:
            return False
        if eligible is None or len(eligible) < wanted:
            return False
        self.picked.update(d.id for d in eligible)
        return True

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

    def allocate_claim(
        self, claim: ClaimDemand, node: Node, also_taken: set[DeviceId], use: dict[DeviceId, dict[str, Decimal]]
    ) -> list[DeviceId] | None:
        """The devices for every request of the claim, the first combination of firstAvailable choices
        (in order) that can be allocated: a matching of request units to distinct free devices."""
        pools = self.inventory.pools_for(node)
        for tried, choice in enumerate(_choices(claim.requests)):
            if tried >= MAX_ALTERNATIVE_CHOICES:
                return None
            shares: dict[DeviceId, dict[str, Decimal]] = {k: dict(v) for k, v in use.items()}
            result = self._match(choice, pools, also_taken, claim.constraints, shares)
            if result is not None:
                use.clear()
                use.update(shares)
                return result
        return None

    def eligible(
        self,
        sub: Subrequest,
        pools: Sequence[Pool],
        also_taken: set[DeviceId],
        enough: int = 0,
        use: Mapping[DeviceId, Mapping[str, Decimal]] | None = None,
    ) -> list[Device] | None:
        """The devices the subrequest may take (free, selected, untainted, with room for its capacity
        requests), the first `enough` of them when that is given; None when `All` cannot be met (a pool
        incomplete, a matching device taken, or none at all). A request for admin access may take a
        device in use (allocator_incubating.go: not for a device this claim already has)."""
        eligible: list[Device] = []
        for pool in pools:
            if enough and len(eligible) >= enough:
                break
            for device in self.inventory.selected(sub, pool):
                if sub.all and not pool.complete:
                    return None
                if (device.id in also_taken and not device.shared) or (
                    not sub.admin and not self.room(sub, device, use)
                ):
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
        use: dict[DeviceId, dict[str, Decimal]] | None = None,
    ) -> list[DeviceId] | None:
        use = {} if use is None else use
        if not constraints and (
            any(sub.capacity or sub.admin for sub in choice)
            or (
                self.inventory.shared_devices
                and any(d.shared for sub in choice for pool in pools for d in self.inventory.selected(sub, pool))
            )
        ):
            return device_first_fit.first_fit(self, choice, pools, also_taken, use)
        one = choice[0] if len(choice) == 1 and not constraints and choice[0].count == 1 else None
        if one is not None and not one.all and self.inventory.counter_totals:
            return device_first_fit.first_within_counters(self, one, pools, also_taken)
        shares_counters = bool(self.inventory.counter_totals) and any(
            d.consumes for sub in choice for d in self.eligible(sub, pools, also_taken) or ()
        )
        if constraints or shares_counters:
            return self._constrained(choice, pools, also_taken, constraints, use)
        if len(choice) == 1 and not choice[0].all:
            # one request of ExactCount (most claims): any `count` free devices it selects, no matching
            count = choice[0].count
            only = self.eligible(choice[0], pools, also_taken, enough=count)
            return [d.id for d in only] if only is not None and len(only) == count else None
        units: list[list[DeviceId]] = []
        fixed: list[DeviceId] = []
        for sub in choice:
            eligible = self.eligible(sub, pools, also_taken)
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
            if not augment(unit, units, owner, set(), blocked):
                return None
        return fixed + sorted(owner, key=lambda d: owner[d])

    def _constrained(
        self,
        choice: Sequence[Subrequest],
        pools: Sequence[Pool],
        also_taken: set[DeviceId],
        constraints: Sequence[Constraint],
        use: dict[DeviceId, dict[str, Decimal]],
    ) -> list[DeviceId] | None:
        """Devices for the subrequests chosen that meet the claim's constraints (device_constraints.py). A
        device allowing multiple allocations is a candidate once per request of the claim, its shares within
        what is left of its capacity (`_share`), its counters consumed at its first allocation only."""
        units: list[tuple[str, list[Candidate]]] = []
        fixed: list[tuple[str, Candidate]] = []
        order: list[Subrequest] = []  # the subrequest of each device the search returns, in its order
        left = self.counters_left(also_taken, pools)
        in_use = self.capacity_used()
        for sub in choice:
            eligible = self.eligible(sub, pools, also_taken, use=use)
            if eligible is None:
                return None
            candidates = [
                Candidate(
                    d.id,
                    tuple(attribute_value(d.id[0], d.attributes, c.attribute) for c in constraints),
                    ()
                    if d.shared and (d.id in use or d.id in in_use)
                    else tuple(((d.id[0], d.id[1], s, c), amount) for s, c, amount in d.consumes),
                    *(self._share(sub, d, use) if d.shared else ()),
                )
                for d in eligible
            ]
            if sub.all:
                fixed.extend((sub.name, c) for c in candidates)
                order.extend([sub] * len(candidates))
            else:
                units.extend([(sub.name, candidates)] * sub.count)
        order.extend(sub for sub in choice if not sub.all for _ in range(sub.count))
        found = search(units, fixed, constraints, left)
        shared = self.inventory.shared_devices
        for device_id, sub in zip(found or (), order, strict=False):
            if (device := shared.get(device_id)) is not None:
                amounts = device_capacity.consumption(sub.capacity, device.capacities) or ()
                device_capacity.add(use.setdefault(device_id, {}), amounts)
        return found

    def _share(
        self, sub: Subrequest, device: Device, use: Mapping[DeviceId, Mapping[str, Decimal]]
    ) -> tuple[bool, device_capacity.Consumption, device_capacity.Consumption]:
        """A shared device as a search candidate: shared, what one share of `sub` consumes, and what is left
        beside what is allocated of it and what this pod took (`use`): kube-scheduler applies constraints to
        it as to any device, and marks it in use for no request (allocator_incubating.go allocateDevice)."""
        used = device_capacity.added(self.capacity_used().get(device.id, {}), tuple(use.get(device.id, {}).items()))
        left = tuple((c.name, c.value - used.get(c.name, Decimal(0))) for c in device.capacities)
        return True, device_capacity.consumption(sub.capacity, device.capacities) or (), left

    def room(self, sub: Subrequest, device: Device, use: Mapping[DeviceId, Mapping[str, Decimal]] | None) -> bool:
        """Free for the subrequest: a device not taken, or a shared device whose capacity still holds
        what the subrequest consumes of it (CmpRequestOverCapacity); a request's capacity must fit a
        device it takes whole too."""
        if not device.shared:
            if self.taken(device.id):
                return False
            if not sub.capacity:
                return True
        amounts = device_capacity.consumption(sub.capacity, device.capacities)
        if amounts is None:
            return False
        if not device.shared:
            return device_capacity.fits(amounts, device.capacities, {})
        used = dict(self.capacity_used().get(device.id, {}))
        device_capacity.add(used, tuple((use or {}).get(device.id, {}).items()))
        return device_capacity.fits(amounts, device.capacities, used)

    def counters_left(
        self, also_taken: Iterable[DeviceId], pools: Sequence[Pool]
    ) -> dict[device_counters.CounterKey, Decimal]:
        """What each shared counter the devices of `pools` consume still holds, after the devices
        allocated, picked, and `also_taken` (only those counters: a pod's allocation costs its node's
        devices, not every counter of the cluster)."""
        totals = self.inventory.counter_totals
        if not totals:
            return {}
        keys = {(d.id[0], d.id[1], s, c) for pool in pools for d in pool.devices for s, c, _ in d.consumes}
        used, extra, zero = self.counters_used(), self.taken_counters(also_taken), Decimal(0)
        return {k: totals[k] - used.get(k, zero) - extra.get(k, zero) for k in keys if k in totals}

    def taken_counters(self, also_taken: Iterable[DeviceId]) -> dict[device_counters.CounterKey, Decimal]:
        """What the devices `also_taken` (this pod's, so far) consume of shared counters."""
        extra: dict[device_counters.CounterKey, Decimal] = {}
        for device in (d for d in (self.inventory._consuming.get(i) for i in also_taken) if d is not None):
            device_counters.take(device.id[0], device.id[1], device.consumes, extra)
        return extra


def _choices(requests: Sequence[Request]) -> Iterator[tuple[Subrequest, ...]]:
    """Every combination of alternatives, the first ones first (allocateOne's order)."""
    if not requests:
        yield ()
        return
    first, rest = requests[0], requests[1:]
    for alternative in first.alternatives:
        for tail in _choices(rest):
            yield (alternative, *tail)
