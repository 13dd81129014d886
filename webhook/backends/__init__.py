"""Gang mechanisms ("backends"): the registry of them, and the controller's configured set.

A new mechanism is one module here (a class with the members of base.Mechanism and base.Backend) and
one entry in MECHANISMS; discovery, the CLI's and the namespace label's choices, and the controller's
watches follow from the registry.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from webhook.backends.base import DEFAULT_KUBERNETES_VERSION, Backend, Mechanism, NamespaceInfo, Settings, Target
from webhook.backends.coscheduling import Coscheduling
from webhook.backends.gate import Gate
from webhook.backends.native import Native
from webhook.backends.volcano import Volcano
from webhook.gangs.model import Obj

# `auto` picks the first one served: a dedicated gang scheduler that is installed was chosen by the
# platform team; the native API next, since the kube-scheduler enforces it; gate, last, needs only
# gangkeeper's controller and works on any cluster. Also the order a pod's membership is read in: most
# specific first, the gate's last (every gangkeeper pod carries the group label its mark reads).
MECHANISMS: tuple[Mechanism, ...] = (Volcano, Coscheduling, Native, Gate)
NAMES = tuple(m.name for m in MECHANISMS)

__all__ = [
    "DEFAULT_KUBERNETES_VERSION",
    "MECHANISMS",
    "NAMES",
    "Backend",
    "Coscheduling",
    "Gate",
    "Mechanism",
    "Mechanisms",
    "NamespaceInfo",
    "Native",
    "Settings",
    "Target",
    "Volcano",
    "by_name",
    "make",
]


def by_name(name: str) -> Mechanism:
    for mechanism in MECHANISMS:
        if mechanism.name == name:
            return mechanism
    raise ValueError(f"unknown backend {name!r}; expected one of {', '.join(NAMES)} or auto")


def _options(mechanism: Any) -> set[str]:
    return {f.name for f in dataclasses.fields(mechanism) if f.init}


def make(name: str, **options: Any) -> Backend:
    """The mechanism `name` with these options (its dataclass fields), e.g. make("native", kubernetes_version="1.36").
    An option of another mechanism is ignored (callers pass the same options whatever the name); one no
    mechanism has is an error."""
    mechanism: Any = by_name(name)  # each registered mechanism is a dataclass of its options
    unknown = set(options) - set().union(*(_options(m) for m in MECHANISMS))
    if unknown:
        raise TypeError(f"no mechanism has the options {sorted(unknown)}")
    own = _options(mechanism)
    backend: Backend = mechanism(**{key: value for key, value in options.items() if key in own})
    return backend


class Mechanisms:
    """The cluster's gang mechanisms, each configured once (scheduler names, the native generation the
    API server serves): what the controller holds, so a pod's mechanism is the configured object that
    stamped it, never a name to rebuild with default arguments."""

    def __init__(
        self,
        settings: Settings | None = None,
        native_version: str = DEFAULT_KUBERNETES_VERSION,
        native_composite: bool = False,
    ) -> None:
        self.settings = settings or Settings()
        self.by_name = {m.name: m.configured(self.settings) for m in MECHANISMS}
        self.serve_native(native_version, native_composite)

    def serve_native(self, version: str, composite: bool = False) -> None:
        """The native generation the API server serves now: after a control-plane upgrade (1.36's v1alpha2
        gone in 1.37) the gangs' group objects are written in the new version."""
        self.native = self.by_name["native"] = Native(version, composite)
        # a pod linked in the other link's words (1.35's workloadRef, or 1.36's schedulingGroup) keeps
        # the generation it was stamped for: an upgrade does not change what its pods say
        other = Native("1.35" if version != "1.35" else DEFAULT_KUBERNETES_VERSION)
        ordered = [self.by_name[m.name] for m in MECHANISMS]
        ordered.insert(ordered.index(self.native) + 1, other)
        self._in_order: tuple[Backend, ...] = tuple(ordered)
        self.gate = self.by_name["gate"]

    @property
    def volcano(self) -> Backend:
        return self.by_name["volcano"]

    @property
    def coscheduling(self) -> Backend:
        return self.by_name["coscheduling"]

    def group_kinds(self) -> list[tuple[str, str]]:
        """Every group object kind a gang of this cluster may have, for the controller's watches."""
        return [kind for mechanism in self.by_name.values() for kind in mechanism.group_kinds()]

    def of_pod(self, pod: Obj) -> Backend:
        """The mechanism whose membership `pod` carries (a pod with none counts as the gate's)."""
        return next((m for m in self._in_order if m.marks(pod)), self.gate)
