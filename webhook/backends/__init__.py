"""Gang mechanisms ("backends") and how the one for a namespace is chosen."""

from __future__ import annotations

from webhook.backends.base import Backend, NamespaceInfo, Target
from webhook.backends.coscheduling import Coscheduling
from webhook.backends.gate import Gate
from webhook.backends.native import Native
from webhook.backends.volcano import Volcano
from webhook.gangs.topology import DEFAULT_LEVELS

NAMES = ("volcano", "coscheduling", "native", "gate")

__all__ = ["NAMES", "Backend", "Coscheduling", "Gate", "NamespaceInfo", "Native", "Target", "Volcano", "make"]


def make(
    name: str,
    *,
    scheduler_name: str | None = None,
    kubernetes_version: str = "1.37",
    network_topology: bool = False,
    topology_levels: tuple[str, ...] = DEFAULT_LEVELS,
) -> Backend:
    if name == "volcano":
        return Volcano(scheduler_name or "volcano", network_topology, topology_levels)
    if name == "coscheduling":
        return Coscheduling(scheduler_name or "scheduler-plugins-scheduler")
    if name == "native":
        return Native(kubernetes_version)
    if name == "gate":
        return Gate()
    raise ValueError(f"unknown backend {name!r}; expected one of {', '.join(NAMES)} or auto")
