"""A node's pods of one demand allocated one after the other from devices looked up once: each pod given
what Allocator.allocate would give it, where only the allocator's own picks (and the shared counters they
consume) change between them. A gang's pods on one node share their template's claim, and looking up
each pod's candidates again cost most of a cold start's allocations (bench/devices.py: 1,000 pods of
device pairs on one PCIe root, 35 ms of 52)."""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any

from webhook.controller.decide import device_cel
from webhook.controller.decide.device_constraints import Candidate, attribute_value, search
from webhook.controller.decide.device_types import ClaimDemand, Demand, Device, DeviceId, Pool, Subrequest
from webhook.controller.decide.shapes import Node

if TYPE_CHECKING:
    from webhook.controller.decide.device_allocator import Allocator


def allocate_in_turn(allocator: Allocator, demand: Demand, node: Node, pods: int) -> int:
    """How many of `pods` pods of `demand` are allocated on `node` before the first that cannot be (0
    where the demand is not of a kind done so: then one by one). Kinds: a single claim of the pod's own,
    on pools of this node only, with no shared devices, no capacity requests, admin access or `All`;
    either with constraints (a request without alternatives each), or one request whose alternatives are
    tried in order, or one device of one request within shared counters."""
    claim = _single(demand)
    pools = allocator.inventory.pools_for(node)
    if claim is None or any(p.node_name != node.name for p in pools):
        return 0
    subs = [s for r in claim.requests for s in r.alternatives]
    if any(s.all or s.admin or s.capacity for s in subs):
        return 0
    try:
        eligible = [allocator.eligible(sub, pools, set()) or [] for sub in subs]
    except device_cel.SelectorError:
        return 0
    if any(d.shared for devices in eligible for d in devices):
        return 0
    consumes = any(d.consumes for devices in eligible for d in devices)
    if claim.constraints:
        if consumes or len(subs) != len(claim.requests):
            return 0
        return _constrained(allocator, claim, subs, eligible, pods)
    if len(claim.requests) != 1:
        return 0
    if consumes:
        if len(subs) != 1 or subs[0].count != 1:
            return 0
        return _within_counters(allocator, pools, eligible[0], pods)
    return _alternatives(allocator, subs, eligible, pods)


def _single(demand: Demand) -> ClaimDemand | None:
    if demand.problems or demand.unmodelled or len(demand.claims) != 1:
        return None
    claim = demand.claims[0]
    return None if claim.shared or claim.allocated else claim


def _constrained(
    allocator: Allocator, claim: ClaimDemand, subs: list[Subrequest], eligible: list[list[Device]], pods: int
) -> int:
    """Allocator._constrained's search, its candidates made once."""
    constraints = claim.constraints

    def values(d: Device) -> tuple[tuple[str, Any] | None, ...]:
        return tuple(attribute_value(d.id[0], d.attributes, c.attribute) for c in constraints)

    candidates = [[Candidate(d.id, values(d)) for d in devices] for devices in eligible]
    picked = allocator.picked
    for done in range(pods):
        units = [
            (sub.name, [c for c in found if c.id not in picked])
            for sub, found in zip(subs, candidates, strict=True)
            for _ in range(sub.count)
        ]
        chosen = search(units, [], constraints, {})
        if chosen is None:
            return done
        picked.update(chosen)
    return pods


def _alternatives(allocator: Allocator, subs: list[Subrequest], eligible: list[list[Device]], pods: int) -> int:
    """Each pod the first alternative with `count` free devices, the first such (Allocator._match's one
    request of ExactCount)."""
    picked = allocator.picked
    for done in range(pods):
        for sub, devices in zip(subs, eligible, strict=True):
            free = [d.id for d in devices if d.id not in picked][: sub.count]
            if len(free) == sub.count:
                picked.update(free)
                break
        else:
            return done
    return pods


def _within_counters(allocator: Allocator, pools: tuple[Pool, ...], devices: list[Device], pods: int) -> int:
    """Each pod the first free device whose shared counters still hold what it consumes
    (device_first_fit.first_within_counters), what it takes consumed before the next."""
    totals, used, zero = allocator.inventory.counter_totals, allocator.counters_used(), Decimal(0)
    picked = allocator.picked
    for done in range(pods):
        for device in devices:
            if device.id in picked:
                continue
            driver, pool = device.id[0], device.id[1]
            if all(
                (key := (driver, pool, s, c)) in totals and totals[key] - used.get(key, zero) >= amount
                for s, c, amount in device.consumes
            ):
                taken: DeviceId = device.id
                picked.add(taken)
                allocator.consume([taken])
                break
        else:
            return done
    return pods
