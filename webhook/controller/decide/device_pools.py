"""ResourceSlices gathered into pools as kube-scheduler gathers them (pools_stable.go GatherPools); what an
inventory carries to the next (its pool maps, the nodes whose devices changed). The PoolBook that keeps
the pools from the slices' changes is the observe side's (observe/pool_book.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from webhook.controller.decide.device_memo import MAX_REMEMBERED_SLICES, Memo
from webhook.controller.decide.device_slices import EACH_TIME, DeviceParts, pool_of_slice
from webhook.controller.decide.device_types import DeviceId, Pool, PoolIndex
from webhook.gangs.model import Obj

if TYPE_CHECKING:
    from webhook.controller.decide.device_inventory import Inventory


def gather_pools(
    slices: Iterable[Obj],
    problems: list[str] | None = None,
    memo: Memo | None = None,
    parts: DeviceParts = EACH_TIME,
) -> list[Pool]:
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
                    parsed = pool_of_slice(obj, driver, name, generation, parts=parts)
                except (TypeError, ValueError, AttributeError) as error:
                    if problems is not None:
                        problems.append(f"ResourceSlice {(obj.get('metadata') or {}).get('name')}: {error}")
                    continue
            kept[seen] = parsed
            complete = len(group) == parsed.slice_count
            for view in parsed.views or (parsed,):
                pools.append(view if view.complete == complete else replace(view, complete=complete))
    if memo is not None and len(kept) <= MAX_REMEMBERED_SLICES:
        memo.slices = kept  # only the slices there now: a deleted or changed one is forgotten
    return pools


@dataclass(frozen=True)
class Gathered:
    """A PoolBook's pools, in gather_pools' order, what could not be read, and their index."""

    pools: list[Pool]
    problems: list[str]
    index: PoolIndex


def replaced_pools(before: Sequence[Pool], after: Sequence[Pool]) -> tuple[list[Pool], list[Pool]]:
    """The pools of `before` not in `after`, and those of `after` not in `before` (pools unchanged are the same
    objects: PoolBook, Memo). Lists of one length, the usual case (a slice republished), are
    compared in place."""
    if len(before) == len(after):
        pairs = [(old, new) for old, new in zip(before, after, strict=True) if old is not new]
        gone, came = [old for old, _ in pairs], [new for _, new in pairs]
        # a pool of `before` still here at another place differs from what is at that place too, so
        # it is among those that came: none is, and the pools that went are exactly these
        if {id(p) for p in gone}.isdisjoint(id(p) for p in came):
            return gone, came
    old_pools, new_pools = {id(p): p for p in before}, {id(p): p for p in after}
    return (
        [p for i, p in old_pools.items() if i not in new_pools],
        [p for i, p in new_pools.items() if i not in old_pools],
    )


def changed_nodes(before: Inventory | None, after: Inventory) -> set[str] | None:
    """The nodes whose devices may count differently in `after` than in `before` (None: any node may): those of
    slices published, changed or gone, and of devices whose claim changed. Slices unchanged are the
    same Pool objects (Memo), so a claim allocated costs a look at its own node only."""
    if (
        before is None
        or before.classes != after.classes
        or before.narrowed != after.narrowed
        or before.counted_claims.keys() != after.counted_claims.keys()
    ):
        return None
    replaced = after.replaced
    gone, came = (
        replaced[1:]
        if replaced is not None and replaced[0] is before.pools
        else replaced_pools(before.pools, after.pools)
    )
    changed: set[str] = set()
    for pool in [*came, *gone]:
        if not pool.node_name:
            return None
        changed.add(pool.node_name)
    moved: set[DeviceId] = set()
    if after.taken is not before.taken or after.owners is not before.owners:  # else the claims parsed once
        moved = {d for d in after.taken.keys() | before.taken.keys() if after.taken.get(d) != before.taken.get(d)}
        moved |= {d for d, claim in after.taken.items() if after.owners.get(claim) != before.owners.get(claim)}
    for driver, pool_name, _ in moved:
        node = after._index.nodes.get((driver, pool_name), before._index.nodes.get((driver, pool_name), ""))
        if node is None:
            return None
        if node:
            changed.add(node)
    return changed


# what an inventory works out from its pools alone (cached properties of Inventory), each as entries per
# pool: carried to the inventory after it with only the pools that changed taken out and put in (built
# anew, each walked all 40,000 devices of bench/devices.py at every slice republished)
POOL_MAPS: dict[str, Callable[[Pool], Iterable[tuple[Any, Any]]]] = {
    "counter_totals": lambda p: (((p.driver, p.name, s, c), v) for s, c, v in p.counters),
}


def carry_worked_out(before: Inventory, after: Inventory, gone: Sequence[Pool], came: Sequence[Pool]) -> None:
    """What `before` worked out that `after` would work out the same, or with only the pools gone and come
    applied: its pool maps (an entry another pool of the same name still gives is kept), what the
    allocated devices use (device_usage.py), and, for the same claims and templates, its demand basis
    (its shared claims found among 15,000 held ones, bench/devices.py --allocated 3)."""
    index = after._index
    names = {(p.driver, p.name) for p in gone}
    others = [
        p
        for key in names
        for p in (index.local.get(index.nodes.get(key) or "", ()) if index.nodes.get(key) else after.pools)
        if (p.driver, p.name) == key
    ]
    for name, entries in POOL_MAPS.items():
        # taken from `before`, not copied (40,000 entries at every slice republished): an inventory is
        # replaced by the one remembering it, and would work the map out again if asked
        found = before.__dict__.pop(name, None)
        if found is None:
            continue
        for pool in gone:
            for key, _ in entries(pool):
                found.pop(key, None)
        for pool in [*others, *came]:
            found.update(entries(pool))
        after.__dict__[name] = found
    if "_usages" in before.__dict__:  # after the pool maps: it reads the consuming devices
        after._usages.carry(before._usages, gone, came)
    same_claims = after.claims is before.claims and after.owners is before.owners
    same_templates = after.templates is before.templates or (
        after.templates_version is not None and after.templates_version == before.templates_version
    )
    # whether any device allows multiple allocations (demand_basis reads it), from `before` and the pools
    # that came where that tells, not a walk of all 5,000 pools at every slice republished
    had = before.__dict__.get("shared_devices")
    if had is not None and "_any" in had.__dict__ and (any(p.any_sharing for p in came) or not had._any):
        after.shared_devices.__dict__["_any"] = any(p.any_sharing for p in came) or had._any
    same = same_claims and same_templates and after.classes == before.classes
    if "demand_basis" in before.__dict__ and same and bool(after.shared_devices) == bool(before.shared_devices):
        after.__dict__["demand_basis"] = before.demand_basis
