"""What the controller knows of a gang's pods, and what to do next: pure functions, no API calls.

A release is a two-phase commit. Phase one decides nodes for the whole gang at once; phase two pins
each pod to its node (nodeSelector kubernetes.io/hostname) and lifts its gate in one PATCH per pod,
marking it with the release time. A controller that dies between two PATCHes loses nothing: pods
already released are recognised by that mark, their capacity counts as taken, and the rest of the
gang is placed around them on the next pass.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from webhook import contract
from webhook.controller import interning, placement
from webhook.controller.placement import Member, Node, Placement, Shape

HOSTNAME_LABEL = "kubernetes.io/hostname"
RELEASED_ANNOTATION = f"{contract.PREFIX}/released-at"
DEFAULT_TIMEOUT_SECONDS = 300  # what the native gang scheduler waits at Permit


def parse_time(text: str | None) -> dt.datetime | None:
    if not text:
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def format_time(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_EMPTY: Mapping[str, str] = MappingProxyType({})
_SHAPES: dict[int, Shape] = {}  # id of canonical containers (interning) -> their shape


def _shape(spec: Mapping[str, Any]) -> Shape:
    """The pod's scheduling shape, computed once per distinct canonical container list."""
    containers = spec.get("containers")
    plain = not (spec.get("initContainers") or spec.get("overhead") or spec.get("resources"))
    if plain and containers is not None and interning.is_canonical(containers):
        shape = _SHAPES.get(id(containers))
        if shape is None:
            shape = _SHAPES[id(containers)] = Shape.from_pod_spec(spec)
        return shape
    return Shape.from_pod_spec(spec)


@dataclass(frozen=True, slots=True)
class PodView:
    """The parts of a pod the controller acts on."""

    namespace: str
    name: str
    uid: str
    group: str
    gated: bool  # still behind gangkeeper's gate
    node_name: str | None  # bound to this node
    pinned_node: str | None  # nodeSelector kubernetes.io/hostname
    released_at: dt.datetime | None
    created_at: dt.datetime | None
    terminal: bool  # Succeeded, Failed, or being deleted
    shape: Shape
    owner: Mapping[str, Any] | None
    resource_version: str
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)

    @staticmethod
    def from_api(pod: Mapping[str, Any]) -> PodView:
        meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        annotations = dict(meta.get("annotations") or {}) or _EMPTY
        owner = next((ref for ref in meta.get("ownerReferences") or [] if ref.get("controller")), None)
        try:
            shape = _shape(spec)
        except ValueError:
            shape = Shape(requests=(("pods", 1),))
        return PodView(
            namespace=meta.get("namespace", ""),
            name=meta.get("name", ""),
            uid=meta.get("uid", ""),
            group=(meta.get("labels") or {}).get(contract.GROUP_LABEL, ""),
            gated=any(g.get("name") == contract.GATE for g in spec.get("schedulingGates") or []),
            node_name=spec.get("nodeName") or None,
            pinned_node=(spec.get("nodeSelector") or {}).get(HOSTNAME_LABEL),
            released_at=parse_time(annotations.get(RELEASED_ANNOTATION)),
            created_at=parse_time(meta.get("creationTimestamp")),
            terminal=status.get("phase") in ("Succeeded", "Failed") or bool(meta.get("deletionTimestamp")),
            shape=shape,
            owner=owner,
            resource_version=meta.get("resourceVersion", ""),
            annotations=annotations,
            labels=dict(meta.get("labels") or {}) or _EMPTY,
        )

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def units(self) -> dict[str, int]:
        return dict(self.shape.requests)

    @property
    def holds_node(self) -> str | None:
        """The node whose capacity this pod takes: where it is bound, or where it was promised."""
        if self.terminal:
            return None
        if self.node_name:
            return self.node_name
        if not self.gated and self.released_at is not None:
            return self.pinned_node  # promised; an unpinned release holds nothing until it binds
        return None


@dataclass(frozen=True)
class GangSpec:
    min_member: int
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS
    evictable: bool = True  # False for bare pods: nobody would recreate them


@dataclass
class Decision:
    state: str  # WaitingForMembers | WaitingForCapacity | NeverFits | Releasing | Running | TimedOut | Backoff
    message: str
    release: dict[str, str] = field(default_factory=dict)  # pod name -> node
    evict: list[str] = field(default_factory=list)
    placement: Placement | None = None
    present: int = 0
    unmodelled: tuple[str, ...] = ()


def decide(
    pods: Sequence[PodView],
    spec: GangSpec,
    nodes: Sequence[Node],
    free: Mapping[str, Mapping[str, int]],
    now: dt.datetime,
    not_before: dt.datetime | None = None,
) -> Decision:
    """The next step for one gang, given its live pods and the nodes' free capacity."""
    live = [p for p in pods if not p.terminal]
    gated = [p for p in live if p.gated]
    released = [p for p in live if not p.gated]
    bound = [p for p in released if p.node_name]
    present = len(live)
    if released and len(bound) < len(released):
        started = min((p.released_at for p in released if p.released_at), default=None)
        if started is not None and (now - started).total_seconds() > spec.timeout_seconds:
            unbound = len(released) - len(bound)
            return Decision(
                "TimedOut",
                f"{unbound} of {len(released)} released pods not scheduled within {spec.timeout_seconds}s",
                evict=[p.name for p in live] if spec.evictable else [],
                present=present,
            )
    if not gated:
        if len(bound) >= spec.min_member:
            return Decision("Running", f"{len(bound)} of {spec.min_member} pods scheduled", present=present)
        return Decision("Releasing", f"{len(bound)} of {len(released)} released pods scheduled", present=present)
    if present < spec.min_member:
        return Decision("WaitingForMembers", f"{present} of {spec.min_member} pods exist", present=present)
    if not_before is not None and now < not_before:
        return Decision("Backoff", f"next release attempt after {format_time(not_before)}", present=present)
    members = [Member(p.name, p.shape) for p in gated]
    result = placement.place(members, nodes, free)
    active = len(released)
    if result.complete or len(result.assignments) + active >= spec.min_member:
        chosen = result.assignments
        return Decision(
            "Release",
            f"releasing {len(chosen)} pods on {len(set(chosen.values()))} nodes",
            release=dict(chosen),
            placement=result,
            present=present,
            unmodelled=result.unmodelled,
        )
    # "ever": on the empty cluster, with taints lifted and cordons undone, which admins do routinely
    open_nodes = [replace(n, taints=(), unschedulable=False) for n in nodes]
    empty = placement.place(members, open_nodes, {n.name: n.allocatable for n in nodes})
    if not empty.complete and len(empty.assignments) + active < spec.min_member:
        return Decision(
            "NeverFits",
            f"the gang needs {spec.min_member} pods and the cluster could hold "
            f"{len(empty.assignments) + active} even if empty",
            placement=empty,
            present=present,
        )
    fit = len(result.assignments) + active
    return Decision(
        "WaitingForCapacity", f"{fit} of {spec.min_member} pods fit on free capacity", placement=result, present=present
    )


def release_patch(
    pod: PodView, node: str | None, now: dt.datetime, gates: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """One merge patch: pin to the node (None: no pin), lift gangkeeper's gate, mark the release;
    guarded by resourceVersion so a pod changed since it was read is left for the next pass."""
    remaining = [dict(g) for g in gates if g.get("name") != contract.GATE]
    spec: dict[str, Any] = {"schedulingGates": remaining or None}
    if node is not None:
        spec["nodeSelector"] = {HOSTNAME_LABEL: node}
    return {
        "metadata": {"resourceVersion": pod.resource_version, "annotations": {RELEASED_ANNOTATION: format_time(now)}},
        "spec": spec,
    }


def backoff_seconds(attempts: int, base: int = 30, cap: int = 900) -> int:
    return int(min(cap, base * 2 ** max(attempts - 1, 0)))
