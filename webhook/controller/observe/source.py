"""Where a pass reads the cluster from: the informers' caches (which also say what changed), or a
listing on every pass (what `gangkeeper explain` uses)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from webhook.controller.decide.devices import Inventory
from webhook.controller.observe.cluster import ClusterIndex
from webhook.gangs.model import Obj
from webhook.kube import NODES, PODS, Api, typed_items


class Source(Protocol):
    def pods(self) -> list[Obj]: ...
    def nodes(self) -> list[Obj]: ...


@runtime_checkable
class ChangeSource(Source, Protocol):
    """A source that also says what changed since it was last asked (the informers)."""

    def changes(self) -> tuple[Mapping[str, Obj | None], Mapping[str, Obj | None]]: ...


@dataclass
class Listing:
    """A source that lists on every pass: simple, and what `gangkeeper explain` uses."""

    api: Api

    def pods(self) -> list[Obj]:
        return typed_items(self.api.list(PODS.path()))

    def nodes(self) -> list[Obj]:
        return typed_items(self.api.list(NODES.path()))


def bring_up_to_date(index: ClusterIndex, source: Source, devices: Callable[[ClusterIndex], Inventory | None]) -> None:
    """The index brought up to date by the source's changes (or by comparing a full listing), with
    `devices`, the devices' picture for the pods it holds: the pods first, since those that came to wait
    name other templates, whose selectors each node counts from this pass on; then the nodes, each counted
    once with that picture (twice, 5,000 at a cold start, when the nodes came first)."""
    index.use_devices(devices(index))
    changes = source.changes() if isinstance(source, ChangeSource) else None
    if changes is not None:
        index.apply_pods(changes[0])
    else:
        index.replace_pods(source.pods())
    index.use_devices(devices(index))
    if changes is not None:
        index.apply_nodes(changes[1])
    else:
        index.replace_nodes(source.nodes())
