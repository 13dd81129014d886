"""Nodes alike in their devices: a cluster's nodes of one model each publish their own pool of the same
devices, and count the same per class. What a node's count depends on, as a key, so that an inventory
counts each kind of node once (Inventory.class_totals): 5,000 nodes of 8 GPUs each cost one count."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from webhook.controller.decide.device_types import SliceDevices
from webhook.controller.decide.shapes import Node

if TYPE_CHECKING:
    from webhook.controller.decide.device_inventory import Inventory

MAX_KINDS_OF_NODE = 4096  # counts an inventory keeps by key; nodes of more kinds are each counted on their own


def nodes_alike_key(inventory: Inventory, node: Node, counted_by_pods: Collection[str]) -> tuple[Any, ...] | None:
    """What the node's class totals depend on, where its pools are all its own and each of one slice: each
    slice's devices as parsed for every slice alike (Pool.shape, by identity: SliceDevices),
    which of them claims hold and whether those count (`counted_by_pods`), and which classes' extended
    resources the node has of its own. None where they depend on more: a pool reaching other nodes, a
    pool of several slices, a device claims share (each share's capacity is its claim's), a slice like
    no other (then so is the node)."""
    parsed = inventory.parsed  # its fields, not Inventory's properties: 5,000 nodes at a cold start
    taken, shares = parsed.taken, parsed.shares
    resources = inventory.extended_resources
    extended = tuple(bool(node.allocatable.get(r)) for r in resources) if resources else ()
    pools = inventory.pools_for(node)
    if len(pools) == 1 and not (taken or shares):  # a node's one slice, no device held (5,000 at a cold start)
        pool = pools[0]
        shape = pool.shape
        if shape is None or not shape.shared or pool.node_name != node.name or pool.slice_count != 1:
            return None
        return (shape, extended)
    owners, held_in, shared = inventory.owners, parsed.held_in_pool, parsed.pools_shared
    parts: list[Any] = []
    for pool in pools:
        shape = pool.shape
        if shape is None or not shape.shared or pool.node_name != node.name or pool.slice_count != 1:
            return None
        parts.append(shape)
        # by the devices' names (one shape, one set of names), not the devices: those of a pool counted
        # alike are never made
        if (pool.driver, pool.name) in shared:
            return None
        held = held_in.get((pool.driver, pool.name))
        if held:  # Inventory.counted
            parts.append(tuple(sorted((name, owners.get(claim) in counted_by_pods) for name, claim in held.items())))
    parts.append(extended)
    return tuple(parts)


def class_totals_of(
    inventory: Inventory, nodes: Iterable[Node], counted_by_pods: Collection[str]
) -> dict[str, Mapping[str, int]]:
    """`Inventory.class_totals` of nodes changed together (a cold start's 5,000), read only. Where no device
    is held, no class serves an extended resource and no pool reaches nodes by label, a node whose one pool
    is its own slice's counts as its slice's kind (`nodes_alike_key` is then that slice's devices): found
    from the pool index directly, not through the layers per node."""
    parsed, index = inventory.parsed, inventory.pool_index
    if parsed.taken or parsed.shares or inventory.extended_resources or index is None or index.shared:
        return {node.name: inventory.class_totals(node, counted_by_pods) for node in nodes}
    local, kinds = index.local, dict[SliceDevices, Mapping[str, int]]()
    found: dict[str, Mapping[str, int]] = {}
    for node in nodes:
        own = local.get(node.name)
        pool = own[0] if own is not None and len(own) == 1 else None
        shape = pool.shape if pool is not None else None
        if pool is None or shape is None or not shape.shared or pool.node_name != node.name or pool.slice_count != 1:
            found[node.name] = inventory.class_totals(node, counted_by_pods)
            continue
        totals = kinds.get(shape)
        if totals is None:
            totals = kinds[shape] = inventory.class_totals(node, counted_by_pods)
        found[node.name] = totals
    return found
