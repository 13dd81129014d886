"""How many pods' claims a node's devices hold, one after the other, as kube-scheduler would allocate them
for pods placed there in turn: what the gate's placement counts per node for a claim with alternatives,
constraints or capacity requests (`claim_resource`)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from webhook.controller.decide import device_capacity, device_constraints
from webhook.controller.decide.device_allocator import Allocator
from webhook.controller.decide.device_types import ClaimDemand, Demand, DeviceId, Subrequest
from webhook.controller.decide.shapes import Node

if TYPE_CHECKING:
    from webhook.controller.decide.device_inventory import Inventory

MAX_CLAIMS_COUNTED_PER_NODE = 256  # a claim with alternatives or constraints, allocated on one node in turn


def claims_on(inventory: Inventory, node: Node, claim: ClaimDemand, counted_by_pods: Collection[str]) -> int:
    """How many times the node's free devices can be allocated to the claim, one after the other, as
    kube-scheduler would for pods placed there in turn (at most MAX_CLAIMS_COUNTED_PER_NODE)."""
    requests, limit = claim.requests, MAX_CLAIMS_COUNTED_PER_NODE
    if len(requests) == 1 and len(requests[0].alternatives) == 1:
        sub = requests[0].alternatives[0]  # one request: counted device by device, or alike group by group
        pools = inventory.pools_for(node)
        found = [d for p in pools for d in inventory.selected(sub, p) if inventory.counted(d, counted_by_pods)]
        simple = not sub.all and not sub.admin and not any(d.consumes for d in found)
        shared = any(d.shared for d in found)
        if simple and not claim.constraints:
            used = inventory.capacity_used(counted_by_pods) if shared else {}
            return device_capacity.claims_held(found, sub, used, limit)
        if simple and not shared and not sub.capacity and not any(c.distinct for c in claim.constraints):
            alike = [c.attribute for c in claim.constraints if c.covers(sub.name)]
            return device_constraints.claims_alike(found, alike, sub.count, limit)
    if len(requests) == 1 and not claim.constraints:
        first_available = _first_available(inventory, node, requests[0].alternatives, counted_by_pods, limit)
        if first_available is not None:
            return first_available
    allocator = Allocator(inventory, nodes=(node,), free_for=counted_by_pods)
    demand, count = Demand((claim,)), 0
    while count < limit and allocator.allocate(demand, node) is None:
        count += 1
    return count


def _first_available(
    inventory: Inventory, node: Node, alternatives: Sequence[Subrequest], counted_by_pods: Collection[str], limit: int
) -> int | None:
    """One request's `firstAvailable` choices allocated claim after claim as the allocator does when nothing
    ties devices together (no constraint, counter, shared device, capacity, `All` or admin access): the
    first choice whose `count` free devices it selects are there takes the first of them, in the node's
    pool order (device_allocator.py `_match`, one ExactCount request). None where something does tie them."""
    pools, choices = inventory.pools_for(node), []
    for sub in alternatives:
        if sub.all or sub.admin or sub.capacity:
            return None
        found = [d for p in pools for d in inventory.selected(sub, p) if inventory.counted(d, counted_by_pods)]
        if any(d.consumes or d.shared for d in found):
            return None
        choices.append((sub.count, [d.id for d in found]))
    taken: set[DeviceId] = set()
    for count in range(limit):
        for wanted, ids in choices:
            free = [i for i in ids if i not in taken][:wanted]
            if len(free) == wanted:
                taken.update(free)
                break
        else:
            return count
    return limit
