"""Whether the cluster grows: something adds nodes when pods are Unschedulable (controller/act/placeholders.py
makes such pods for gate gangs that wait on capacity). No metrics here: the CLI reads its defaults."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from webhook import resources
from webhook.controller.decide.autoscaling import NodePoolRoom
from webhook.controller.decide.shapes import Taint, to_units
from webhook.kube import Api, ApiError, Resource

PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
DEFAULT_MAX_PLACEHOLDER_PODS = 2000  # placeholder pods in the cluster at once: a few large gangs' worth
NODEPOOLS = Resource("karpenter.sh/v1", "nodepools")
AUTOSCALERS = ("auto", "karpenter", "cluster-autoscaler", "none")
CHECK_SECONDS = 15.0  # a NodePool made or removed is seen within this long
# how old the NodePools may be when a gang's first placeholders are made: those bring nodes, so they are
# judged on the NodePools as they are (a limit lowered a moment ago), at most one read a second for all
FRESH_SECONDS = 1.0


def pool_labels(template: Mapping[str, Any]) -> dict[str, frozenset[str] | None]:
    """The labels a NodePool's nodes carry: its template's labels, and its requirements (In: those
    values; Exists and the other operators: any value, not modelled), keyed by label."""
    labels: dict[str, frozenset[str] | None] = {
        str(k): frozenset({str(v)}) for k, v in ((template.get("metadata") or {}).get("labels") or {}).items()
    }
    for requirement in (template.get("spec") or {}).get("requirements") or []:
        key = str(requirement.get("key", ""))
        values = frozenset(str(v) for v in requirement.get("values") or [])
        narrowed = values if requirement.get("operator") == "In" else None
        known = labels.get(key, narrowed)
        labels[key] = narrowed if known is None else known if narrowed is None else known & narrowed
    return labels


def pool_room(pool: Mapping[str, Any]) -> NodePoolRoom:
    """A NodePool as listed (limits that cannot be read limit nothing gangkeeper can tell)."""
    name = str((pool.get("metadata") or {}).get("name", ""))
    template = (pool.get("spec") or {}).get("template") or {}
    labels = pool_labels(template)
    labels.setdefault("karpenter.sh/nodepool", frozenset({name}))
    taints = tuple(
        Taint(str(t.get("key", "")), str(t.get("value", "") or ""), str(t.get("effect", "")))
        for t in (template.get("spec") or {}).get("taints") or []
    )
    try:
        limits = to_units({k: resources.parse(v) for k, v in ((pool.get("spec") or {}).get("limits") or {}).items()})
        used = to_units({k: resources.parse(v) for k, v in ((pool.get("status") or {}).get("resources") or {}).items()})
    except (ValueError, ArithmeticError):
        return NodePoolRoom(name, {}, {}, labels, taints)
    return NodePoolRoom(name, limits, used, labels, taints)


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

    def pools(self, max_age: float = CHECK_SECONDS) -> list[NodePoolRoom]:
        """Karpenter's NodePools and what each may still add, read at most `max_age` seconds ago ([] when
        there are none, or when they cannot be read: nothing is then said of limits)."""
        if self.mode in ("none", "cluster-autoscaler"):
            return []
        return self._pools(max_age)

    def _pools(self, max_age: float = CHECK_SECONDS) -> list[NodePoolRoom]:
        now = self.clock()
        if self._known is None or now - self._known[0] >= max_age:
            try:
                found = [pool_room(item) for item in self.api.list(NODEPOOLS.path()).get("items") or []]
            except ApiError:  # 404: Karpenter not installed; anything else: asked again next time
                found = []
            self._known = (now, found)
        return self._known[1]
