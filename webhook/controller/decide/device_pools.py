"""ResourceSlices gathered into pools as kube-scheduler gathers them (pools_stable.go GatherPools), and
the PoolBook that keeps them up to date from the slices' changes."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from webhook.controller.decide.device_memo import MAX_REMEMBERED_SLICES, Memo
from webhook.controller.decide.device_slices import COLUMNS, SKELETON, alike_devices, pool_of_slice
from webhook.controller.decide.device_types import DeviceId, Pool, PoolIndex, PoolKey
from webhook.gangs.model import Obj

if TYPE_CHECKING:
    from webhook.controller.decide.device_inventory import Inventory


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
                    parsed = pool_of_slice(obj, driver, name, generation)
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


def _one_slice_pools(obj: Obj, key: PoolKey, problems: list[str], read: frozenset[str] | None = None) -> list[Pool]:
    """gather_pools of a pool published in one slice (`key` its driver and pool name), without the
    grouping: the slice is its pool's newest generation, complete when the pool says it has one slice."""
    name = (obj.get("metadata") or {}).get("name")
    try:
        generation = int(((obj.get("spec") or {}).get("pool") or {}).get("generation") or 0)
    except (TypeError, ValueError):
        problems.append(f"ResourceSlice {name}: unreadable pool")
        return []
    try:
        parsed = pool_of_slice(obj, key[0], key[1], generation, read)
    except (TypeError, ValueError, AttributeError) as error:
        problems.append(f"ResourceSlice {name}: {error}")
        return []
    complete = parsed.slice_count == 1
    views = parsed.views or (parsed,)
    return [view if view.complete == complete else replace(view, complete=complete) for view in views]


def _node_pool(obj: Obj, key: PoolKey, read: frozenset[str] | None) -> Pool | None:
    """A slice as `_one_slice_pools` reads it where it is simply a node's own (its spec's fields of the API's
    types, no per-device node selection); None for any other, which `_gather` reads."""
    spec = obj.get("spec")
    if type(spec) is not dict:
        return None
    pool = spec.get("pool")
    if type(pool) is not dict or spec.get("perDeviceNodeSelection"):
        return None
    generation, count, node_name = (
        pool.get("generation") or 0,
        pool.get("resourceSliceCount") or 1,
        spec.get("nodeName"),
    )
    if type(generation) is not int or type(count) is not int or type(node_name) is not str or not node_name:
        return None
    try:
        shape = alike_devices(key[0], key[1], spec, read, obj.get(SKELETON), obj.get(COLUMNS))
    except (TypeError, ValueError, AttributeError):
        return None  # `_gather` names it
    return Pool.of_shape(key[0], key[1], generation, count, node_name, spec, shape)


def _index_entries(
    key: PoolKey, pools: list[Pool], nodes: dict[PoolKey, str | None], names: dict[PoolKey, frozenset[str]]
) -> None:
    """A pool's entries of PoolIndex.nodes and .names (its Pools `pools`, none when it is gone)."""
    if len(pools) == 1 and pools[0].shape is not None:  # its device names found once per slice alike
        nodes[key], names[key] = pools[0].node_name, pools[0].shape.names
    elif pools:
        found = PoolIndex.of(pools)
        nodes.update(found.nodes)
        names.update(found.names)


def _pool_key(obj: Obj) -> PoolKey:
    spec = obj.get("spec")
    if type(spec) is dict:  # as the API gives it: no conversions (5,000 slices at a cold start)
        driver, pool = spec.get("driver"), spec.get("pool")
        name = pool.get("name") if type(pool) is dict else None
        if type(driver) is str and type(name) is str:
            return driver, name
    spec = spec or {}
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
    # the attributes some selector or constraint reads (device_reads.attributes_read), None for all: a
    # node's own slice is parsed without the others, and slices alike but for them share one parsing
    _read: frozenset[str] | None = None

    def reading(self, read: frozenset[str] | None) -> bool:
        """What selectors and constraints read now; every slice parsed again when that changed (a
        selector reading an attribute no one read before). Whether it did."""
        if read == self._read:
            return False
        self._read = read
        if self._gathered:
            self._gathered.clear()
            self._load()
        return True

    def apply(self, changes: Mapping[str, Obj | None]) -> None:
        """Slices now (by key), None for one deleted."""
        dirty: set[PoolKey] = set()
        pool_of, slices, members = self._pool_of, self._slices, self._members
        for key, obj in changes.items():
            old = pool_of.pop(key, None)
            if old is not None:
                members[old].discard(key)
                dirty.add(old)
            if obj is None:
                slices.pop(key, None)
                continue
            slices[key] = obj
            pool_of[key] = pool = _pool_key(obj)
            members.setdefault(pool, set()).add(key)
            dirty.add(pool)
        if dirty and self._gathered:
            self._regather(dirty)
        elif dirty:
            self._load()

    def _gather(self, key: PoolKey) -> list[Pool]:
        """The pool's slices gathered again (`_gathered`, `_unreadable`): its Pools now."""
        members = self._members.get(key)
        self._unreadable.discard(key)
        if not members:
            self._members.pop(key, None)
            self._gathered.pop(key, None)
            return []
        problems: list[str] = []
        if len(members) == 1:  # most pools: a node's own slice
            gathered = _one_slice_pools(self._slices[next(iter(members))], key, problems, self._read)
        else:
            gathered = gather_pools([self._slices[k] for k in sorted(members)], problems)
        self._gathered[key] = (gathered, problems)
        if problems:
            self._unreadable.add(key)
        return gathered

    def _load(self) -> None:
        """The first slices (a cold start: 5,000 nodes' own), gathered and indexed in one sweep; a node's
        own slice, its pool's only one, without the layers of `_gather` (5 us a slice of a cold start)."""
        pools: list[Pool] = []
        nodes: dict[PoolKey, str | None] = {}
        names: dict[PoolKey, frozenset[str]] = {}
        local: dict[str, list[Pool]] = {}
        start, gathered, slices, members_of = {}, self._gathered, self._slices, self._members
        self._unreadable.clear()  # none gathered yet
        for key in sorted(members_of):
            start[key] = len(pools)
            members = members_of[key]
            own = _node_pool(slices[next(iter(members))], key, self._read) if len(members) == 1 else None
            if own is not None and own.shape is not None and own.node_name is not None:
                gathered[key] = ([own], [])
                pools.append(own)
                nodes[key], names[key] = own.node_name, own.shape.names
                local[own.node_name] = [*local.get(own.node_name, ()), own]
                continue
            new = self._gather(key)
            pools.extend(new)
            _index_entries(key, new, nodes, names)
            for pool in new:
                if pool.node_name:
                    local.setdefault(pool.node_name, []).append(pool)
        self._start = start
        problems = [p for key in sorted(self._unreadable) for p in self._gathered[key][1]]
        shared = [p for p in pools if not p.node_name]
        self._now = Gathered(pools, problems, PoolIndex(local, shared, nodes, names))

    def _regather(self, dirty: set[PoolKey]) -> None:
        before = self._now
        pools: list[Pool] | None = list(before.pools)
        local = dict(before.index.local)
        nodes, names = dict(before.index.nodes), dict(before.index.names)
        shared_changed = False
        for key in dirty:
            old = self._gathered.get(key, ([], []))[0]
            new = self._gather(key)
            for pool in old:
                if pool.node_name:
                    local[pool.node_name] = [p for p in local.get(pool.node_name, ()) if p is not pool]
                    if not local[pool.node_name]:
                        del local[pool.node_name]
                else:
                    shared_changed = True
            for pool in new:
                if pool.node_name:
                    local[pool.node_name] = [*local.get(pool.node_name, ()), pool]
                else:
                    shared_changed = True
            nodes.pop(key, None)
            names.pop(key, None)
            _index_entries(key, new, nodes, names)
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
