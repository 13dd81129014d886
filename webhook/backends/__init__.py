"""Gang mechanisms ("backends") and how the one for a namespace is chosen."""

from __future__ import annotations

from webhook.backends.base import Backend, NamespaceInfo, Target
from webhook.backends.coscheduling import Coscheduling
from webhook.backends.gate import Gate
from webhook.backends.native import DEFAULT_KUBERNETES_VERSION, Native
from webhook.backends.volcano import Volcano
from webhook.gangs.model import Obj
from webhook.gangs.topology import DEFAULT_LEVELS

NAMES = ("volcano", "coscheduling", "native", "gate")

__all__ = [
    "DEFAULT_KUBERNETES_VERSION",
    "NAMES",
    "Backend",
    "Coscheduling",
    "Gate",
    "Mechanisms",
    "NamespaceInfo",
    "Native",
    "Target",
    "Volcano",
    "make",
]


def make(
    name: str,
    *,
    scheduler_name: str | None = None,
    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION,
    network_topology: bool = False,
    composite_groups: bool = False,
    topology_levels: tuple[str, ...] = DEFAULT_LEVELS,
) -> Backend:
    if name == "volcano":
        return Volcano(scheduler_name or "volcano", network_topology, topology_levels)
    if name == "coscheduling":
        return Coscheduling(scheduler_name or "scheduler-plugins-scheduler")
    if name == "native":
        return Native(kubernetes_version, composite_groups)
    if name == "gate":
        return Gate()
    raise ValueError(f"unknown backend {name!r}; expected one of {', '.join(NAMES)} or auto")


class Mechanisms:
    """The cluster's gang mechanisms, each configured once (scheduler names, the native generation the
    API server serves): what the controller holds, so a pod's mechanism is the configured object that
    stamped it, never a name to rebuild with default arguments."""

    def __init__(
        self,
        volcano_scheduler: str = "volcano",
        coscheduling_scheduler: str = "scheduler-plugins-scheduler",
        native_version: str = DEFAULT_KUBERNETES_VERSION,
        native_composite: bool = False,
    ) -> None:
        self.volcano = Volcano(volcano_scheduler)
        self.coscheduling = Coscheduling(coscheduling_scheduler)
        self.gate = Gate()
        self.serve_native(native_version, native_composite)

    def serve_native(self, version: str, composite: bool = False) -> None:
        """The native generation the API server serves now: after a control-plane upgrade (1.36's v1alpha2
        gone in 1.37) the gangs' group objects are written in the new version."""
        self.native = Native(version, composite)
        # a pod linked in the other link's words (1.35's workloadRef, or 1.36's schedulingGroup) keeps
        # the generation it was stamped for: an upgrade does not change what its pods say
        other = Native("1.35" if version != "1.35" else DEFAULT_KUBERNETES_VERSION)
        # most specific first: every gangkeeper pod carries the group label the gate's mark reads
        self._in_order: tuple[Backend, ...] = (self.volcano, self.coscheduling, self.native, other, self.gate)

    def group_kinds(self) -> list[tuple[str, str]]:
        """Every group object kind a gang of this cluster may have, for the controller's watches."""
        return [
            kind for mechanism in (self.volcano, self.coscheduling, self.native) for kind in mechanism.group_kinds()
        ]

    def of_pod(self, pod: Obj) -> Backend:
        """The mechanism whose membership `pod` carries (a pod with none counts as the gate's)."""
        return next((m for m in self._in_order if m.marks(pod)), self.gate)
