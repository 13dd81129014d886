"""Why a claim cannot be allocated on a node, where devices there are: its constraints, or its capacity
requests (the Gang's message names the field: the claim allocated again without them succeeds)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from webhook.controller.decide.device_types import ClaimDemand, DeviceId
from webhook.controller.decide.shapes import Node

if TYPE_CHECKING:
    from webhook.controller.decide.device_allocator import Allocator


def constraints(allocator: Allocator, claim: ClaimDemand, node: Node, picked: Sequence[DeviceId]) -> str:
    """Why, when it is the claim's constraints: devices there are, but none that meet them."""
    if not claim.constraints or allocator.allocate_claim(replace(claim, constraints=()), node, set(picked), {}) is None:
        return ""
    named = ", ".join(
        f"{'distinctAttribute' if c.distinct else 'matchAttribute'} {c.attribute}" for c in claim.constraints
    )
    return f" that meet spec.devices.constraints ({named})"


def capacity(allocator: Allocator, claim: ClaimDemand, node: Node, picked: Sequence[DeviceId]) -> str:
    """Why, when it is the claim's capacity requests: devices there are, but none with room for them."""
    asked = [(s.name, s) for r in claim.requests for s in r.alternatives if s.capacity]
    if not asked:
        return ""
    uncapped = tuple(
        replace(r, alternatives=tuple(replace(s, capacity=()) for s in r.alternatives)) for r in claim.requests
    )
    if allocator.allocate_claim(replace(claim, requests=uncapped), node, set(picked), {}) is None:
        return ""
    named = "; ".join(
        f"request {name}: " + ", ".join(f"{capacity} {amount}" for capacity, amount in sub.capacity)
        for name, sub in asked
    )
    return f" with room for spec.devices.requests[].capacity.requests ({named})"
