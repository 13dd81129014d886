"""Which nodes a pod shape may go to at all (`Eligibility`: taints, selectors, required node affinity and
cordons, matched once per shape and kept until a node changes), and the topology domains a gang must or
would rather stay within (`Domains`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from webhook.controller.decide.shapes import (
    Node,
    Shape,
    static_reason,
)


@dataclass(frozen=True)
class Domains:
    """A gang's topology for one placement: all its pods in one domain of the node label `key`
    (`required`), else in as few as capacity allows; `near` are the nodes its running members hold, whose
    domain a replacement returns to (as Kueue's TAS places a replaced pod with its gang)."""

    key: str
    required: bool
    near: frozenset[str] = frozenset()
    # a broader level the gang shares with the other gangs of its workload (a LeaderWorkerSet's groups
    # in one block, each group in one rack); its `near` are the nodes the workload's gangs hold
    within: Domains | None = None


class Eligibility:
    """The nodes a shape may ever use, by the static filters, remembered per shape until the nodes
    change: a cluster's nodes change far less often than its pods, so a pass checks each pair once."""

    def __init__(self, nodes: Sequence[Node]) -> None:
        self.nodes = list(nodes)
        self._cache: dict[Shape, tuple[list[Node], dict[str, str]]] = {}
        self._names: dict[Shape, frozenset[str]] = {}
        # placement.on_empty_cluster's answers, which hold as long as these nodes do
        self.on_empty: dict[tuple[tuple[Shape, ...], bool, Domains | None], list[str] | None] = {}
        self._domains: dict[tuple[Shape, str], dict[str, list[Node]]] = {}
        self._domain_of: dict[str, dict[str, str]] = {}
        self._within: dict[tuple[str, str], Eligibility] = {}

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

    def by_domain(self, shape: Shape, key: str) -> dict[str, list[Node]]:
        """The shape's eligible nodes by their value of the label `key` (nodes without it in none)."""
        found = self._domains.get((shape, key))
        if found is None:
            found = {}
            for node in self(shape)[0]:
                value = node.labels.get(key)
                if value is not None:
                    found.setdefault(value, []).append(node)
            self._domains[(shape, key)] = found
        return found

    def within(self, key: str, value: str) -> Eligibility:
        """The same for the nodes of one domain only (remembered as long as the nodes are)."""
        found = self._within.get((key, value))
        if found is None:
            found = self._within[(key, value)] = Eligibility([n for n in self.nodes if n.labels.get(key) == value])
        return found

    def domain_of(self, key: str) -> dict[str, str]:
        """Node name -> its value of the label `key`."""
        found = self._domain_of.get(key)
        if found is None:
            found = self._domain_of[key] = {n.name: n.labels[key] for n in self.nodes if key in n.labels}
        return found
