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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from webhook.controller.shapes import (
    ANY_IP as ANY_IP,
)
from webhook.controller.shapes import (
    CORDON_TAINT as CORDON_TAINT,
)
from webhook.controller.shapes import (
    PODS as PODS,
)
from webhook.controller.shapes import (
    HostPort as HostPort,
)
from webhook.controller.shapes import (
    Node as Node,
)
from webhook.controller.shapes import (
    Shape as Shape,
)
from webhook.controller.shapes import (
    Taint as Taint,
)
from webhook.controller.shapes import (
    Units as Units,
)
from webhook.controller.shapes import (
    fit_count as fit_count,
)
from webhook.controller.shapes import (
    host_ports as host_ports,
)
from webhook.controller.shapes import (
    ports_clash as ports_clash,
)
from webhook.controller.shapes import (
    show as show,
)
from webhook.controller.shapes import (
    static_reason as static_reason,
)
from webhook.controller.shapes import (
    to_units as to_units,
)


class Eligibility:
    """The nodes a shape may ever use, by the static filters, remembered per shape until the nodes
    change: a cluster's nodes change far less often than its pods, so a pass checks each pair once."""

    def __init__(self, nodes: Sequence[Node]) -> None:
        self.nodes = list(nodes)
        self._cache: dict[Shape, tuple[list[Node], dict[str, str]]] = {}
        self._names: dict[Shape, frozenset[str]] = {}
        self._on_empty: dict[tuple[tuple[Shape, ...], bool], list[str] | None] = {}

    def __call__(self, shape: Shape) -> tuple[list[Node], dict[str, str]]:
        found = self._cache.get(shape)
        if found is None:
            eligible, reasons = [], {}
            for node in self.nodes:
                reason = static_reason(shape, node)
                if reason is None:
                    eligible.append(node)
                else:
                    reasons[node.name] = reason
            found = self._cache[shape] = (eligible, reasons)
        return found

    def names(self, shape: Shape) -> frozenset[str]:
        names = self._names.get(shape)
        if names is None:
            names = self._names[shape] = frozenset(node.name for node in self(shape)[0])
        return names

    def on_empty_cluster(self, members: Sequence[Member], spread: bool = False) -> list[str] | None:
        """The node of each member (in order) on the cluster emptied of every pod, or None if the gang
        could never fit: a queue's reservation when nothing says when running work ends. It depends
        on the nodes only, so it is remembered as long as they are."""
        key = (tuple(member.shape for member in members), spread)
        if key not in self._on_empty:
            if len(self._on_empty) >= 1024:
                self._on_empty.clear()
            empty = {node.name: node.allocatable for node in self.nodes}
            result = place(members, self.nodes, empty, spread=spread, eligibility=self)
            # place() fills members in order within each shape, so the answer holds for any names
            self._on_empty[key] = [result.assignments[m.name] for m in members] if result.complete else None
        return self._on_empty[key]


# why a node takes no more pods: a sentence, or (shape, its free capacity, pods that fit, pods wanted),
# written out only when someone reads it (most passes only need to know that a gang does not fit)
Why = str | tuple["Shape", Mapping[str, int], int, int]


@dataclass
class Placement:
    assignments: dict[str, str]  # pod name -> node name
    complete: bool
    why: dict[str, Why]  # node name -> why more pods do not go there (only when incomplete)
    unmodelled: tuple[str, ...] = ()

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
) -> Placement:
    """Nodes for every member, or the reasons why the whole gang does not fit now.

    `free` is each node's allocatable minus the requests of the pods bound or promised to it, and
    `used_ports` the host ports those pods take. `spread` puts one pod per node in turn instead of packing.
    """
    eligibility = eligibility or Eligibility(nodes)
    by_shape: dict[Shape, list[str]] = {}
    for member in members:
        by_shape.setdefault(member.shape, []).append(member.name)
    # biggest shapes first: they have the fewest places to go
    order = sorted(by_shape, key=lambda s: sorted((-a for n, a in s.requests if n != PODS)), reverse=False)
    remaining: dict[str, dict[str, int]] = {}  # copied on first use: most nodes are only read
    taken_ports: dict[str, set[HostPort]] = {}
    used_ports = used_ports or {}
    assignments: dict[str, str] = {}
    reasons: dict[str, Why] = {}
    unmodelled: set[str] = set()
    complete = True
    for shape in order:
        names = by_shape[shape]
        unmodelled.update(shape.unmodelled)
        candidates: list[tuple[int, str]] = []
        eligible, static = eligibility(shape)
        base: dict[str, Mapping[str, int]] = {}
        for node_name, reason in static.items():
            reasons.setdefault(node_name, reason)
        for node in eligible:
            node_free: Mapping[str, int] | None = remaining.get(node.name)
            if node_free is None:
                node_free = free.get(node.name, node.allocatable)
            fits = fit_count(shape, node_free)
            if fits > 0 and shape.host_ports:
                in_use = taken_ports.get(node.name) or used_ports.get(node.name, _NO_PORTS)
                clash = ports_clash(shape.host_ports, in_use)
                if clash is not None:
                    reasons.setdefault(node.name, f"host port {clash[2]}/{clash[0]} in use")
                    continue
            if fits > 0:
                candidates.append((fits, node.name))
                base[node.name] = node_free
            elif node.name not in reasons:
                reasons[node.name] = (shape, node_free, 0, len(names))
        takes = _spread(candidates, len(names)) if spread else _pack(candidates, len(names))
        index = 0
        for node_name, take in takes:
            taking = remaining.get(node_name)
            if taking is None:
                taking = remaining[node_name] = dict(base[node_name])
            for name in names[index : index + take]:
                assignments[name] = node_name
            for resource, amount in shape.requests:
                taking[resource] = taking.get(resource, 0) - amount * take
            if shape.host_ports:
                ports = taken_ports.get(node_name)
                if ports is None:
                    ports = taken_ports[node_name] = set(used_ports.get(node_name, _NO_PORTS))
                ports.update(shape.host_ports)
            index += take
        if index < len(names):
            complete = False
            for fits, node_name in candidates:
                reasons.setdefault(node_name, (shape, base[node_name], fits, len(names)))
    return Placement(assignments, complete, {} if complete else reasons, tuple(sorted(unmodelled)))


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


def summarize(why: Mapping[str, Why], limit: int = 6) -> list[str]:
    """Nodes grouped by reason, largest group first: ["worker1, worker2: taint ... not tolerated", ...].
    Capacity reasons are grouped by what limits the node, with the most any of them has free, so that
    5,000 nodes each a little short make one line, not 5,000."""
    said: dict[str, list[str]] = {}
    short: dict[tuple[int, int, tuple[tuple[str, int], ...]], tuple[list[str], dict[str, int]]] = {}
    for node, reason in sorted(why.items()):
        if isinstance(reason, str):
            said.setdefault(reason, []).append(node)
            continue
        shape, free, fits, wanted = reason
        limits = tuple((name, amount) for name, amount in shape.positive if free.get(name, 0) // amount == fits)
        names, most = short.setdefault((fits, wanted, limits), ([], {}))
        names.append(node)
        for name, _ in limits:
            most[name] = max(most.get(name, -(2**62)), free.get(name, 0))
    groups: list[tuple[list[str], str]] = [(names, reason) for reason, names in said.items()]
    for (fits, wanted, limits), (names, most) in short.items():
        parts = [
            "pod count at its limit"
            if name == PODS
            else f"needs {show(name, amount)} each, {'' if len(names) == 1 else 'at most '}"
            f"{show(name, max(most.get(name, 0), 0))} free"
            for name, amount in limits
        ]
        groups.append((names, f"{fits} of {wanted} pods fit ({'; '.join(parts) or 'no requests'})"))
    lines = []
    for names, reason in sorted(groups, key=lambda item: (-len(item[0]), item[1])):
        shown = ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")
        lines.append(f"{shown}: {reason}")
    return lines
