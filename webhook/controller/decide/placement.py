"""Where a whole gang fits on the nodes' free capacity: a pure function, with the reasons when it does not.

One pod against one node is shapes.py's (kube-scheduler's filter plugins). What it does not model
(inter-pod affinity, DoNotSchedule topology spread, volumes bound to nodes, DRA claims) is reported as
`unmodelled` so the caller releases those pods without a pin.

Pods of one gang usually come in a few identical shapes; each shape is matched against the nodes once
(Eligibility), then either packed best-fit (tightest node first: large free nodes stay free for the
next gang; batch work) or spread one pod per node in turn over the roomiest nodes (serving replicas:
one node's failure takes as few as possible).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from webhook.controller.decide.eligibility import Domains, Eligibility
from webhook.controller.decide.packing import Placing, pack, spread_over
from webhook.controller.decide.reasons import Why
from webhook.controller.decide.shapes import (
    PODS,
    HostPort,
    Node,
    Shape,
    fit_count,
    show,
)


@dataclass
class Placement:
    assignments: dict[str, str]  # pod name -> node name
    complete: bool
    why: dict[str, Why]  # node name -> why more pods do not go there (only when incomplete)
    unmodelled: tuple[str, ...] = ()
    # with a topology: the domain(s) chosen ("rack-3"), or why no domain holds the whole gang
    domain: str | None = None
    domain_note: str | None = None

    @functools.cached_property
    def reasons(self) -> dict[str, str]:
        return {
            node: why if isinstance(why, str) else f"{why[2]} of {why[3]} pods fit ({_needs(why[0], why[1], why[2])})"
            for node, why in self.why.items()
        }


@dataclass(frozen=True)
class Member:
    name: str
    shape: Shape


def place(
    members: Sequence[Member],
    nodes: Sequence[Node],
    free: Mapping[str, Mapping[str, int]],
    used_ports: Mapping[str, Iterable[HostPort]] | None = None,
    spread: bool = False,
    eligibility: Eligibility | None = None,
    domains: Domains | None = None,
    then: Sequence[Member] = (),
) -> Placement:
    """Nodes for every member, or the reasons why the whole gang does not fit now.

    `free` is each node's allocatable minus the requests of the pods bound or promised to it, and
    `used_ports` the host ports those pods take. `spread` puts one pod per node in turn instead of packing;
    `domains` keeps the gang inside one domain of a node label (topology). `then`: members placed only
    once all of `members` fit, on the room they leave (groups above their roles' minimums, which one
    placement of both could give room a minimum needs: it places the biggest shapes first).
    """
    eligibility = eligibility or Eligibility(nodes)
    if then and members and domains is not None:
        return _in_turn(members, then, nodes, free, used_ports, spread, eligibility, domains)
    if domains is None:
        return _place(members, free, used_ports, spread, eligibility, then=then)
    members = [*members, *then]
    if domains.within is not None:
        return _place_within(members, free, used_ports, spread, eligibility, domains)
    return _place_in_domains(members, free, used_ports, spread, eligibility, domains)


def _in_turn(
    first: Sequence[Member],
    then: Sequence[Member],
    nodes: Sequence[Node],
    free: Mapping[str, Mapping[str, int]],
    used_ports: Mapping[str, Iterable[HostPort]] | None,
    spread: bool,
    eligibility: Eligibility,
    domains: Domains,
) -> Placement:
    """place() with `then` and a topology: `first` placed alone, then, only if it all fits, `then` on
    what it leaves, joining the domain `first` went to."""
    before = place(first, nodes, free, used_ports, spread, eligibility, domains)
    if not before.complete:
        return before
    left: dict[str, Mapping[str, int]] = dict(free)  # the room of the nodes `first` took, less what it took
    ports: dict[str, Iterable[HostPort]] = dict(used_ports or {})
    empty = {node.name: node.allocatable for node in nodes} if set(before.assignments.values()) - free.keys() else {}
    for member in first:
        node = before.assignments[member.name]
        room = dict(left.get(node) or empty[node])
        for resource, amount in member.shape.requests:
            room[resource] = room.get(resource, 0) - amount
        left[node], ports[node] = room, {*ports.get(node, ()), *member.shape.host_ports}
    domains = replace(domains, near=domains.near | frozenset(before.assignments.values()))
    after = place(then, nodes, left, ports, spread, eligibility, domains)
    return Placement(
        {**before.assignments, **after.assignments},
        after.complete,
        after.why,
        tuple(sorted({*before.unmodelled, *after.unmodelled})),
        domain=before.domain,
        domain_note=after.domain_note,
    )


def on_empty_cluster(
    eligibility: Eligibility, members: Sequence[Member], spread: bool = False, domains: Domains | None = None
) -> list[str] | None:
    """The node of each member (in order) on the cluster emptied of every pod, or None if the gang
    could never fit: a queue's reservation when nothing says when running work ends. It depends
    on the nodes only, so it is remembered with them (in the Eligibility)."""
    key = (tuple(member.shape for member in members), spread, domains)
    if key not in eligibility.on_empty:
        if len(eligibility.on_empty) >= 1024:
            eligibility.on_empty.clear()
        empty = {node.name: node.allocatable for node in eligibility.nodes}
        result = place(members, eligibility.nodes, empty, spread=spread, eligibility=eligibility, domains=domains)
        # place() fills members in order within each shape, so the answer holds for any names
        eligibility.on_empty[key] = [result.assignments[m.name] for m in members] if result.complete else None
    return eligibility.on_empty[key]


def _rooms(
    eligibility: Eligibility, members: Sequence[Member], key: str, free: Mapping[str, Mapping[str, int]]
) -> dict[str, int]:
    """How many of the gang's pods each domain of `key` could take, by the gang's biggest shape."""
    shapes = {member.shape for member in members}
    biggest = max(shapes, key=lambda s: sorted((a for n, a in s.requests if n != PODS), reverse=True))
    rooms = dict.fromkeys((value for shape in shapes for value in eligibility.by_domain(shape, key)), 0)
    for value, group in eligibility.by_domain(biggest, key).items():
        room = 0
        for node in group:  # a plain loop: called for every domain of every waiting gang in a pass
            room += fit_count(biggest, free.get(node.name, node.allocatable))
        rooms[value] = room
    return rooms


def _order(rooms: Mapping[str, int], near: set[str], required: bool, holds: Mapping[str, bool]) -> list[str]:
    """Domains to try: the ones the gang (or its workload) already holds, then, unless that is required,
    the rest, tightest first; none that cannot hold the gang (`holds`)."""
    held = sorted((v for v in near if v in rooms), key=lambda v: (rooms[v], v))
    if held and required:
        return [v for v in held if holds[v]]
    rest = sorted((v for v in rooms if holds[v] and v not in near), key=lambda v: (rooms[v], v))
    return [v for v in held if holds[v]] + rest


def _hopeless(rooms: Mapping[str, int], near: set[str], required: bool, holds: Mapping[str, bool]) -> list[str]:
    """The domains `_order` leaves out as unable to hold the gang (the closest miss is one of them)."""
    held = [v for v in near if v in rooms]
    return [v for v in (held if held and required else rooms) if not holds[v]]


Best = tuple[int, str, Placement]  # pods placed, in which domain, the placement: the closest miss


def _can_hold(
    eligibility: Eligibility,
    members: Sequence[Member],
    key: str,
    free: Mapping[str, Mapping[str, int]],
    rooms: Mapping[str, int],
) -> dict[str, bool]:
    """Whether each domain could hold the whole gang at all, checked before any placement is tried: for
    a gang of one shape, room for every pod (`rooms`); for any gang, its eligible nodes' free capacity,
    summed, covering the gang's requests. Necessary, not sufficient: a domain failing it is never tried
    (with a required topology on nodes as domains, one waiting gang tried every node of the cluster in
    every pass: 65 ms per gang at 2,000 nodes)."""
    shapes = {member.shape for member in members}
    if len(shapes) == 1:
        return {value: room >= len(members) for value, room in rooms.items()}
    need: dict[str, int] = {}
    for member in members:
        for name, amount in member.shape.requests:
            need[name] = need.get(name, 0) + amount
    nodes_of: dict[str, dict[str, Node]] = {}
    for shape in shapes:
        for value, group in eligibility.by_domain(shape, key).items():
            nodes_of.setdefault(value, {}).update((node.name, node) for node in group)
    holds = {}
    for value in rooms:
        totals = dict.fromkeys(need, 0)
        for node in nodes_of.get(value, {}).values():
            room = free.get(node.name, node.allocatable)
            for name in need:
                totals[name] += room.get(name, 0)
        holds[value] = all(totals[name] >= amount for name, amount in need.items())
    return holds


def _first_fit(
    order: Sequence[str],
    rooms: Mapping[str, int],
    attempt: Callable[[str], Placement],
    stop_at: set[str],
    hopeless: Sequence[str] = (),
) -> tuple[tuple[str, Placement] | None, Best | None]:
    """Domains tried in order: the first whose placement is complete, else the closest miss. A domain
    with no room is skipped once a miss is known; after a domain in `stop_at` nothing more is tried.
    When none was tried, the roomiest of the `hopeless` ones is, for the closest miss the gang's status
    names."""
    best: Best | None = None
    for value in order:
        if rooms[value] == 0 and best is not None:
            continue
        result = attempt(value)
        if result.complete:
            return (value, result), best
        if best is None or len(result.assignments) > best[0]:
            best = (len(result.assignments), value, result)
        if value in stop_at:
            break
    if best is None and hopeless:
        closest = min(hopeless, key=lambda value: (-rooms[value], value))  # the roomiest, by name on a tie
        result = attempt(closest)
        best = (len(result.assignments), closest, result)
    return None, best


def _unlabelled(key: str, eligibility: Eligibility) -> Placement:
    note = f"no node has the label {key}"
    return Placement({}, False, {n.name: note for n in eligibility.nodes}, (), None, note)


def _place_within(
    members: Sequence[Member],
    free: Mapping[str, Mapping[str, int]],
    used_ports: Mapping[str, Iterable[HostPort]] | None,
    spread: bool,
    eligibility: Eligibility,
    domains: Domains,
) -> Placement:
    """Two levels: a domain of the broader key (the one the workload's other gangs hold, else the
    tightest that fits), and inside it the gang's own domain."""
    outer = domains.within
    assert outer is not None
    inner = replace(domains, within=None)
    rooms = _rooms(eligibility, members, outer.key, free)
    labels = eligibility.domain_of(outer.key)
    near = {labels[node] for node in outer.near if node in labels}
    holds = _can_hold(eligibility, members, outer.key, free, rooms)
    found, best = _first_fit(
        _order(rooms, near, outer.required, holds),
        rooms,
        lambda value: _place_in_domains(members, free, used_ports, spread, eligibility.within(outer.key, value), inner),
        set(),
        _hopeless(rooms, near, outer.required, holds),
    )
    if found is not None:
        return replace(found[1], domain=f"{found[0]}/{found[1].domain}")
    if not outer.required:
        return _place_in_domains(members, free, used_ports, spread, eligibility, inner)
    if best is None:
        return _unlabelled(outer.key, eligibility)
    return replace(best[2], domain_note=f"within {outer.key} {best[1]}: {best[2].domain_note or 'no room'}")


Candidates = Callable[[Shape], tuple[list[Node], Mapping[str, str]]]


def _place_in_domains(
    members: Sequence[Member],
    free: Mapping[str, Mapping[str, int]],
    used_ports: Mapping[str, Iterable[HostPort]] | None,
    spread: bool,
    eligibility: Eligibility,
    domains: Domains,
) -> Placement:
    """The whole gang in one domain of `domains.key`: the domain its running members hold if any, else
    the tightest that fits (the least room for the gang's pods, so large domains stay free for large
    gangs). Preferred and no single domain fits: the fewest domains, the roomiest first, then packed
    tightest-first within them; nodes without the label are left for last."""
    key = domains.key
    labels = eligibility.domain_of(key)
    near = {labels[node] for node in domains.near if node in labels}

    def within(chosen: Iterable[str]) -> Candidates:
        chosen = set(chosen)

        def candidates(shape: Shape) -> tuple[list[Node], Mapping[str, str]]:
            groups = eligibility.by_domain(shape, key)
            return [node for value in sorted(chosen) for node in groups.get(value, ())], {}

        return candidates

    rooms = _rooms(eligibility, members, key, free)
    holds = _can_hold(eligibility, members, key, free, rooms)
    # a running gang's replacements go back to its domain, or wait for it
    stop_at = near if domains.required else set()
    found, best = _first_fit(
        _order(rooms, near, domains.required, holds),
        rooms,
        lambda value: _place(members, free, used_ports, spread, eligibility, within([value])),
        stop_at,
        _hopeless(rooms, near, domains.required, holds),
    )
    if found is not None:
        return replace(found[1], domain=found[0])
    if not domains.required:
        chosen: list[str] = []
        enough = 0
        for value in sorted(rooms, key=lambda v: (-rooms[v], v)):
            if enough >= len(members):
                break
            chosen.append(value)
            enough += rooms[value]
        if chosen and enough >= len(members):
            result = _place(members, free, used_ports, spread, eligibility, within(chosen))
            if result.complete:
                used = sorted({eligibility.domain_of(key).get(node, "") for node in result.assignments.values()})
                return replace(result, domain=", ".join(used))
        result = _place(members, free, used_ports, spread, eligibility)
        if result.complete:
            used = sorted({eligibility.domain_of(key).get(node, "(none)") for node in result.assignments.values()})
            return replace(result, domain=", ".join(used))
        return replace(result, domain_note=_no_domain(key, len(members), best))
    if best is None:
        return _unlabelled(key, eligibility)
    return replace(best[2], domain_note=_no_domain(key, len(members), best))


def _no_domain(key: str, wanted: int, best: Best | None) -> str:
    if best is None:
        return f"no node has the label {key}"
    return f"no {key} domain has room for all {wanted} pods; the best, {best[1]}, has room for {best[0]}"


def _place(
    members: Sequence[Member],
    free: Mapping[str, Mapping[str, int]],
    used_ports: Mapping[str, Iterable[HostPort]] | None,
    spread: bool,
    eligibility: Eligibility,
    candidates_of: Candidates | None = None,
    then: Sequence[Member] = (),
) -> Placement:
    """`members` placed; then, if they all fit, `then` on the room they leave (place with `then`)."""
    placing = Placing(free, used_ports or {})
    unmodelled: set[str] = set()
    complete = _place_turn(members, placing, unmodelled, eligibility, candidates_of, spread)
    if complete and then:
        complete = _place_turn(then, placing, unmodelled, eligibility, candidates_of, spread)
    return Placement(placing.assignments, complete, {} if complete else placing.reasons, tuple(sorted(unmodelled)))


def _place_turn(
    members: Sequence[Member],
    placing: Placing,
    unmodelled: set[str],
    eligibility: Eligibility,
    candidates_of: Candidates | None,
    spread: bool,
) -> bool:
    by_shape: dict[Shape, list[str]] = {}
    for member in members:
        by_shape.setdefault(member.shape, []).append(member.name)
    # biggest shapes first: they have the fewest places to go
    order = sorted(by_shape, key=lambda s: sorted((-a for n, a in s.requests if n != PODS)), reverse=False)
    complete = True
    for shape in order:
        names = by_shape[shape]
        unmodelled.update(shape.unmodelled)
        eligible, static = (candidates_of or eligibility)(shape)
        for node_name, reason in static.items():
            placing.reasons.setdefault(node_name, reason)
        candidates, base = placing.candidates(shape, len(names), eligible)
        takes = spread_over(candidates, len(names)) if spread else pack(candidates, len(names))
        if placing.take(shape, names, takes, base) < len(names):
            complete = False
            for fits, node_name in candidates:
                placing.reasons.setdefault(node_name, (shape, base[node_name], fits, len(names)))
    return complete


def _needs(shape: Shape, free: Mapping[str, int], fits: int) -> str:
    """The resources that limit this node to `fits` pods of the shape."""
    parts = []
    for name, amount in shape.requests:
        if amount and free.get(name, 0) // amount == fits:
            if name == PODS:
                parts.append("pod count at its limit")
            else:
                parts.append(f"needs {show(name, amount)} each, {show(name, max(free.get(name, 0), 0))} free")
    return "; ".join(parts) or "no requests"
