"""Whether the cluster grows: something adds nodes when pods are Unschedulable (controller/act/placeholders.py
makes such pods for gate gangs that wait on capacity). No metrics here: the CLI reads its defaults."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook import resources
from webhook.controller.decide.shapes import to_units
from webhook.kube import Api, ApiError, Resource

PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
NODEPOOLS = Resource("karpenter.sh/v1", "nodepools")
AUTOSCALERS = ("auto", "karpenter", "cluster-autoscaler", "none")
CHECK_SECONDS = 15.0  # a NodePool made or removed is seen within this long


@dataclass(frozen=True)
class NodePoolRoom:
    """What a Karpenter NodePool may still add: its `spec.limits` less the capacity it has made
    (`status.resources`), in a shape's units; a resource it does not limit is not listed."""

    name: str
    limits: Mapping[str, int]
    used: Mapping[str, int]

    def short_of(self, need: Mapping[str, int]) -> str | None:
        """The first limited resource this pool cannot add `need` of, None when it can add all of it."""
        for name, amount in sorted(need.items()):
            limit = self.limits.get(name)
            if limit is not None and amount > limit - self.used.get(name, 0):
                return name
        return None


def pool_room(pool: Mapping[str, Any]) -> NodePoolRoom:
    """A NodePool as listed (limits that cannot be read limit nothing gangkeeper can tell)."""
    name = str((pool.get("metadata") or {}).get("name", ""))
    try:
        limits = to_units({k: resources.parse(v) for k, v in ((pool.get("spec") or {}).get("limits") or {}).items()})
        used = to_units({k: resources.parse(v) for k, v in ((pool.get("status") or {}).get("resources") or {}).items()})
    except (ValueError, ArithmeticError):
        return NodePoolRoom(name, {}, {})
    return NodePoolRoom(name, limits, used)


class Autoscaler:
    """Whether nodes come when pods are Unschedulable: `karpenter` or `cluster-autoscaler` as configured,
    `none`, or `auto` (Karpenter's NodePools exist, looked for every CHECK_SECONDS; Cluster Autoscaler serves
    no API to find it by)."""

    def __init__(self, api: Api, mode: str = "auto", clock: Callable[[], float] = time.monotonic) -> None:
        self.api, self.mode, self.clock = api, mode, clock
        self._known: tuple[float, list[NodePoolRoom]] | None = None

    def present(self) -> bool:
        if self.mode != "auto":
            return self.mode != "none"
        return bool(self._pools())

    def pools(self) -> list[NodePoolRoom]:
        """Karpenter's NodePools and what each may still add ([] when there are none, or when they cannot
        be read: nothing is then said of limits)."""
        if self.mode in ("none", "cluster-autoscaler"):
            return []
        return self._pools()

    def _pools(self) -> list[NodePoolRoom]:
        now = self.clock()
        if self._known is None or now - self._known[0] >= CHECK_SECONDS:
            try:
                found = [pool_room(item) for item in self.api.list(NODEPOOLS.path()).get("items") or []]
            except ApiError:  # 404: Karpenter not installed; anything else: asked again next time
                found = []
            self._known = (now, found)
        return self._known[1]
