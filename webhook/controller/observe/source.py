"""Where a pass reads the cluster from: the informers' caches (which also say what changed), or a
listing on every pass (what `gangkeeper explain` uses)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

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
