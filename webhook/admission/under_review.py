"""One object under admission, what is known around it, and the outcome of deciding about it: what
the rules of `admit` (admission/decide.py) read and return."""

from __future__ import annotations

import marshal
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from webhook import contract
from webhook.admission.checks import duration_seconds, topology_verdict
from webhook.backends import Backend, NamespaceInfo
from webhook.backends.discovery import Unavailable
from webhook.gangs.model import Gang, Obj, Plan

if TYPE_CHECKING:  # the decision only asks it; the Lease is read at admission's edge
    from webhook.admission.controller_lease import ControllerHealth


@dataclass
class Outcome:
    allowed: bool
    reason: str  # one line for the log: why this decision
    mutated: Obj | None = None
    patch: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    code: int = 200
    message: str = ""
    gangs: list[Gang] = field(default_factory=list)
    group_objects: list[Obj] = field(default_factory=list)
    plan: Plan | None = None
    rule: str = ""  # the admission rule that decided (ADMISSION_RULES), for the log and the table tests


def json_copy(value: Any) -> Any:
    """Deep copy of JSON data: marshal's C round trip, twice as fast as a Python walk on a large object
    and never recursing in Python (JSON holds only types marshal knows)."""
    return marshal.loads(marshal.dumps(value))


def describe(obj: Obj) -> str:
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    name = (meta or {}).get("name") or (meta or {}).get("generateName") or "<unnamed>"
    return f'{obj.get("kind", "object")} "{name}"'


@dataclass(frozen=True)
class Admission:
    """One object under admission and what is known around it: what the rules of `admit` read."""

    received: Obj  # as the API server sent it: the patch is the difference from this
    obj: Obj  # with a name chosen ahead where one is needed (named_ahead)
    operation: str
    backend: Backend | Unavailable
    plan: Plan
    namespace: str | None
    namespace_info: NamespaceInfo
    mutate: bool
    controller: ControllerHealth | None
    queues: Mapping[str, str] | None
    old: Obj | None
    user: str | None
    topology_levels: tuple[str, ...]
    priority_classes: Collection[str] | None  # names; a Mapping also gives each one's value
    volcano_queues: frozenset[str] = frozenset()  # queues every namespace may use (--volcano-queues)
    # members carry karpenter.sh/do-not-disrupt with this value, "false": not (--protect-from-disruption)
    protect_from_disruption: str = "true"
    # (kind, namespace, name, the uid a pod claims) -> that workload's uid now; None: unknown
    workload_uids: Callable[[str, str, str, str], str | None] | None = None

    @property
    def disruption_mark(self) -> str | None:
        """The karpenter.sh/do-not-disrupt value gang pods get: the Configuration's ("true", or a duration
        that bounds it), a namespace's own bound (its label gangkeeper.io/protect-from-disruption: "12h"),
        none where either says "false"."""
        label = self.namespace_info.labels.get(contract.NAMESPACE_PROTECT_LABEL, "")
        if self.protect_from_disruption == "false" or label == "false":
            return None
        return label if duration_seconds(label) is not None else self.protect_from_disruption

    @property
    def served(self) -> Backend:
        """The backend, for the rules after `backend_unavailable` (which refuses when there is none)."""
        assert not isinstance(self.backend, Unavailable)
        return self.backend

    @cached_property
    def topology(self) -> tuple[str | None, list[str]]:
        return topology_verdict(self.plan, self.served, self.topology_levels)

    @property
    def gating(self) -> bool:
        return self.served.name == "gate" and self.plan.pod_gang is not None

    def refuse(self, reason: str, code: int, message: str, warnings: list[str] | None = None) -> Outcome:
        return Outcome(False, reason, code=code, message=message, warnings=warnings or [], plan=self.plan)
