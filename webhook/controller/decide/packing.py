"""One placement under way, node by node (placement.py chooses where to try): what it takes of each
node, the host ports it takes, and the two ways of filling nodes, packed (tightest first: large free
nodes stay free for the next gang) or spread (one pod per node in turn: replicas on as many nodes as
possible). Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from webhook.controller.decide.reasons import Why
from webhook.controller.decide.shapes import HostPort, Node, Shape, fit_count, ports_clash

_NO_PORTS: frozenset[HostPort] = frozenset()


class Placing:
    """One placement under way: what it took of each node (copied on first use: most nodes are only
    read), the host ports it took, where each member goes, and why nodes were passed over."""

    def __init__(self, free: Mapping[str, Mapping[str, int]], used_ports: Mapping[str, Iterable[HostPort]]) -> None:
        self.free, self.used_ports = free, used_ports
        self.remaining: dict[str, dict[str, int]] = {}
        self.taken_ports: dict[str, set[HostPort]] = {}
        self.assignments: dict[str, str] = {}
        self.reasons: dict[str, Why] = {}
        # each shape's last scan: a later turn of the same shape (the groups above the roles' minimums,
        # placed after them) rescans only the nodes this placement took room of; room only shrinks here
        self._scans: dict[Shape, tuple[list[tuple[int, str]], dict[str, Mapping[str, int]]]] = {}

    def candidates(
        self, shape: Shape, wanted: int, eligible: Iterable[Node]
    ) -> tuple[list[tuple[int, str]], dict[str, Mapping[str, int]]]:
        """(how many of the shape fit, node) for every eligible node with room, and each one's room."""
        scanned = self._scans.get(shape)
        if scanned is not None:
            return self._rescan(shape, *scanned)
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
        self._scans[shape] = (candidates, base)
        return candidates, base

    def _rescan(
        self, shape: Shape, before: list[tuple[int, str]], base: Mapping[str, Mapping[str, int]]
    ) -> tuple[list[tuple[int, str]], dict[str, Mapping[str, int]]]:
        """The last scan of the shape, with the nodes taken from since counted again."""
        changed = {name for name in self.remaining if name in base}
        candidates = [(fits, name) for fits, name in before if name not in changed]
        rooms = {name: room for name, room in base.items() if name not in changed}
        for name in sorted(changed):
            room = self.remaining[name]
            fits = fit_count(shape, room)
            if fits > 0 and shape.host_ports and ports_clash(shape.host_ports, self.taken_ports.get(name) or ()):
                fits = 0
            if fits > 0:
                candidates.append((fits, name))
                rooms[name] = room
        self._scans[shape] = (candidates, rooms)
        return candidates, rooms

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


def pack(candidates: list[tuple[int, str]], wanted: int) -> list[tuple[str, int]]:
    """Tightest nodes first, each filled as far as it goes."""
    takes, left = [], wanted
    for fits, node_name in sorted(candidates):
        if left == 0:
            break
        take = min(fits, left)
        takes.append((node_name, take))
        left -= take
    return takes


def spread_over(candidates: list[tuple[int, str]], wanted: int) -> list[tuple[str, int]]:
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
