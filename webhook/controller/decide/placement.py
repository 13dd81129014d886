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
from webhook.controller.decide.reasons import Why
from webhook.controller.decide.shapes import (
    PODS,
    HostPort,
    Node,
    Shape,
    fit_count,
    ports_clash,
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


_NO_PORTS: frozenset[HostPort] = frozenset()


def place(
    members: Sequence[Member],
    nodes: Sequence[Node],
    free: Mapping[str, Mapping[str, int]],
    used_ports: Mapping[str, Iterable[HostPort]] | None = None,
    spread: bool = False,
    eligibility: Eligibility | None = None,
    domains: Domains | None = None,
) -> Placement:
    """Nodes for every member, or the reasons why the whole gang does not fit now.

    `free` is each node's allocatable minus the requests of the pods bound or promised to it, and
    `used_ports` the host ports those pods take. `spread` puts one pod per node in turn instead of packing;
    `domains` keeps the gang inside one domain of a node label (topology).
    """
    eligibility = eligibility or Eligibility(nodes)
    if domains is None:
        return _place(members, free, used_ports, spread, eligibility)
    if domains.within is not None:
        return _place_within(members, free, used_ports, spread, eligibility, domains)
    return _place_in_domains(members, free, used_ports, spread, eligibility, domains)


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
    values = {value for shape in shapes for value in eligibility.by_domain(shape, key)}
    groups = eligibility.by_domain(biggest, key)
    return {
        value: sum(fit_count(biggest, free.get(n.name, n.allocatable)) for n in groups.get(value, ()))
        for value in values
    }


def _order(rooms: Mapping[str, int], near: set[str], required: bool) -> list[str]:
    """Domains to try: the ones the gang (or its workload) already holds, then, unless that is required,
    the rest, tightest first."""
    tightest = sorted(rooms, key=lambda v: (rooms[v], v))
    held = [v for v in tightest if v in near]
    return held if (held and required) else held + [v for v in tightest if v not in near]


Best = tuple[int, str, Placement]  # pods placed, in which domain, the placement: the closest miss


def _first_fit(
    order: Sequence[str], rooms: Mapping[str, int], attempt: Callable[[str], Placement], stop_at: set[str]
) -> tuple[tuple[str, Placement] | None, Best | None]:
    """Domains tried in order: the first whose placement is complete, else the closest miss. A domain
    with no room is skipped once a miss is known; after a domain in `stop_at` nothing more is tried."""
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
    near = {eligibility.domain_of(outer.key).get(node) for node in outer.near} - {None}
    found, best = _first_fit(
        _order(rooms, near, outer.required),  # type: ignore[arg-type]
        rooms,
        lambda value: _place_in_domains(members, free, used_ports, spread, eligibility.within(outer.key, value), inner),
        set(),
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
    shapes = {member.shape for member in members}
    values = sorted({value for shape in shapes for value in eligibility.by_domain(shape, key)})
    near = {eligibility.domain_of(key).get(node) for node in domains.near} - {None}

    def within(chosen: Iterable[str]) -> Candidates:
        chosen = set(chosen)

        def candidates(shape: Shape) -> tuple[list[Node], Mapping[str, str]]:
            groups = eligibility.by_domain(shape, key)
            return [node for value in sorted(chosen) for node in groups.get(value, ())], {}

        return candidates

    rooms = _rooms(eligibility, members, key, free)
    order = _order(rooms, near, domains.required)  # type: ignore[arg-type]
    # a running gang's replacements go back to its domain, or wait for it
    stop_at = {v for v in near if v is not None} if domains.required else set()
    found, best = _first_fit(
        order, rooms, lambda value: _place(members, free, used_ports, spread, eligibility, within([value])), stop_at
    )
    if found is not None:
        return replace(found[1], domain=found[0])
    if not domains.required:
        chosen: list[str] = []
        enough = 0
        for value in sorted(values, key=lambda v: (-rooms[v], v)):
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
) -> Placement:
    by_shape: dict[Shape, list[str]] = {}
    for member in members:
        by_shape.setdefault(member.shape, []).append(member.name)
    # biggest shapes first: they have the fewest places to go
    order = sorted(by_shape, key=lambda s: sorted((-a for n, a in s.requests if n != PODS)), reverse=False)
    placing = _Placing(free, used_ports or {})
    unmodelled: set[str] = set()
    complete = True
    for shape in order:
        names = by_shape[shape]
        unmodelled.update(shape.unmodelled)
        eligible, static = (candidates_of or eligibility)(shape)
        for node_name, reason in static.items():
            placing.reasons.setdefault(node_name, reason)
        candidates, base = placing.candidates(shape, len(names), eligible)
        takes = _spread(candidates, len(names)) if spread else _pack(candidates, len(names))
        if placing.take(shape, names, takes, base) < len(names):
            complete = False
            for fits, node_name in candidates:
                placing.reasons.setdefault(node_name, (shape, base[node_name], fits, len(names)))
    return Placement(placing.assignments, complete, {} if complete else placing.reasons, tuple(sorted(unmodelled)))


class _Placing:
    """One placement under way: what it took of each node (copied on first use: most nodes are only
    read), the host ports it took, where each member goes, and why nodes were passed over."""

    def __init__(self, free: Mapping[str, Mapping[str, int]], used_ports: Mapping[str, Iterable[HostPort]]) -> None:
        self.free, self.used_ports = free, used_ports
        self.remaining: dict[str, dict[str, int]] = {}
        self.taken_ports: dict[str, set[HostPort]] = {}
        self.assignments: dict[str, str] = {}
        self.reasons: dict[str, Why] = {}

    def candidates(
        self, shape: Shape, wanted: int, eligible: Iterable[Node]
    ) -> tuple[list[tuple[int, str]], dict[str, Mapping[str, int]]]:
        """(how many of the shape fit, node) for every eligible node with room, and each one's room."""
        candidates: list[tuple[int, str]] = []
        base: dict[str, Mapping[str, int]] = {}
        for node in eligible:
            node_free: Mapping[str, int] | None = self.remaining.get(node.name)
            if node_free is None:
                node_free = self.free.get(node.name, node.allocatable)
            fits = fit_count(shape, node_free)
            if fits > 0 and shape.host_ports:
                in_use = self.taken_ports.get(node.name) or self.used_ports.get(node.name, _NO_PORTS)
                clash = ports_clash(shape.host_ports, in_use)
                if clash is not None:
                    self.reasons.setdefault(node.name, f"host port {clash[2]}/{clash[0]} in use")
                    continue
            if fits > 0:
                candidates.append((fits, node.name))
                base[node.name] = node_free
            elif node.name not in self.reasons:
                self.reasons[node.name] = (shape, node_free, 0, wanted)
        return candidates, base

    def take(
        self,
        shape: Shape,
        names: Sequence[str],
        takes: Iterable[tuple[str, int]],
        base: Mapping[str, Mapping[str, int]],
    ) -> int:
        """The members assigned as `takes` says; how many were."""
        index = 0
        for node_name, take in takes:
            taking = self.remaining.get(node_name)
            if taking is None:
                taking = self.remaining[node_name] = dict(base[node_name])
            for name in names[index : index + take]:
                self.assignments[name] = node_name
            for resource, amount in shape.requests:
                taking[resource] = taking.get(resource, 0) - amount * take
            if shape.host_ports:
                ports = self.taken_ports.get(node_name)
                if ports is None:
                    ports = self.taken_ports[node_name] = set(self.used_ports.get(node_name, _NO_PORTS))
                ports.update(shape.host_ports)
            index += take
        return index


def _pack(candidates: list[tuple[int, str]], wanted: int) -> list[tuple[str, int]]:
    """Tightest nodes first, each filled as far as it goes."""
    takes, left = [], wanted
    for fits, node_name in sorted(candidates):
        if left == 0:
            break
        take = min(fits, left)
        takes.append((node_name, take))
        left -= take
    return takes


def _spread(candidates: list[tuple[int, str]], wanted: int) -> list[tuple[str, int]]:
    """One pod per node in turn, roomiest nodes first, so replicas land on as many nodes as possible."""
    ordered = sorted(candidates, key=lambda item: (-item[0], item[1]))
    counts: dict[str, int] = {}
    left, round_ = wanted, 0
    while left > 0:
        progressed = False
        for fits, node_name in ordered:
            if left == 0:
                break
            if fits > round_:
                counts[node_name] = counts.get(node_name, 0) + 1
                left -= 1
                progressed = True
        if not progressed:
            break
        round_ += 1
    return list(counts.items())


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
