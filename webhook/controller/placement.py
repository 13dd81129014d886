"""Where a whole gang fits on the nodes' free capacity: a pure function, with the reasons when it does not.

Resources are integers (cpu in millicores, everything else in its base unit) so that thousands of
nodes can be checked in milliseconds. Pods of one gang usually come in a few identical shapes; each
shape is matched against the nodes once, then packed best-fit (tightest node first) so that large
free nodes stay free for the next gang and fragments get used.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from webhook import resources

Units = dict[str, int]
PODS = "pods"
CORDON_TAINT = "node.kubernetes.io/unschedulable"


def to_units(requests: Mapping[str, Decimal]) -> Units:
    return {name: math.ceil(value * 1000) if name == "cpu" else math.ceil(value) for name, value in requests.items()}


def show(name: str, amount: int) -> str:
    value = Decimal(amount) / 1000 if name == "cpu" else Decimal(amount)
    return f"{resources.canonical(value, name)} {name}"


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


@dataclass(frozen=True)
class Node:
    name: str
    allocatable: Mapping[str, int]
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False

    @staticmethod
    def from_api(node: Mapping[str, Any]) -> Node:
        meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
        allocatable = {k: resources.parse(v) for k, v in (status.get("allocatable") or {}).items()}
        taints = tuple(
            Taint(t.get("key", ""), t.get("value", "") or "", t.get("effect", "")) for t in spec.get("taints") or []
        )
        return Node(
            name=meta.get("name", ""),
            allocatable=to_units(allocatable),
            labels=dict(meta.get("labels") or {}),
            taints=taints,
            unschedulable=bool(spec.get("unschedulable")),
        )


@dataclass(frozen=True)
class Shape:
    """What placement needs to know of a pod: requests and the node constraints it models."""

    requests: tuple[tuple[str, int], ...]  # includes ("pods", 1)
    node_selector: tuple[tuple[str, str], ...] = ()
    affinity_terms: Any = None  # required nodeSelectorTerms, as JSON (hashable tuple form)
    tolerations: Any = ()
    unmodelled: tuple[str, ...] = ()  # constraints placement does not model (pod affinity, spread)

    @staticmethod
    def from_requests(requests: Mapping[str, Decimal]) -> Shape:
        """A pod known only by its requests (one not created yet), with no node constraints."""
        units = to_units(requests)
        units[PODS] = units.get(PODS, 0) + 1
        return Shape(requests=tuple(sorted(units.items())))

    @staticmethod
    def from_pod_spec(spec: Mapping[str, Any]) -> Shape:
        units = to_units(resources.pod_requests(spec))
        units[PODS] = units.get(PODS, 0) + 1
        affinity = spec.get("affinity") or {}
        node_affinity = (affinity.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
        terms = _freeze((node_affinity or {}).get("nodeSelectorTerms")) if node_affinity else None
        unmodelled = tuple(
            name
            for name, present in (
                (
                    "podAffinity",
                    bool((affinity.get("podAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")),
                ),
                (
                    "podAntiAffinity",
                    bool((affinity.get("podAntiAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")),
                ),
                (
                    "topologySpreadConstraints",
                    any(
                        c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule"
                        for c in spec.get("topologySpreadConstraints") or []
                    ),
                ),
                # kube-scheduler's NodePorts filter: placement does not track ports yet, so a gang with
                # host ports is left to the scheduler rather than pinned where ports may clash
                (
                    "hostPorts",
                    bool(spec.get("hostNetwork"))
                    or any(port.get("hostPort") for c in spec.get("containers") or [] for port in c.get("ports") or []),
                ),
                # volumes that bind to nodes (VolumeBinding, WaitForFirstConsumer) and DRA claims
                ("persistentVolumeClaims", any("persistentVolumeClaim" in v for v in spec.get("volumes") or [])),
                ("resourceClaims", bool(spec.get("resourceClaims"))),
            )
            if present
        )
        return Shape(
            requests=tuple(sorted(units.items())),
            node_selector=tuple(sorted((spec.get("nodeSelector") or {}).items())),
            affinity_terms=terms,
            tolerations=_freeze(spec.get("tolerations") or []),
            unmodelled=unmodelled,
        )

    def describe_requests(self) -> str:
        return ", ".join(show(name, amount) for name, amount in self.requests if name != PODS and amount)


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def _thaw(value: Any) -> Any:
    if isinstance(value, tuple) and all(isinstance(i, tuple) and len(i) == 2 and isinstance(i[0], str) for i in value):
        return {k: _thaw(v) for k, v in value}
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    return value


def _tolerates(tolerations: Sequence[Mapping[str, Any]], taint: Taint) -> bool:
    for toleration in tolerations:
        if toleration.get("effect") and toleration["effect"] != taint.effect:
            continue
        operator = toleration.get("operator", "Equal")
        key = toleration.get("key", "")
        if operator == "Exists" and (not key or key == taint.key):
            return True
        if operator == "Equal" and key == taint.key and (toleration.get("value") or "") == taint.value:
            return True
    return False


def _expression_matches(expression: Mapping[str, Any], value: str | None) -> bool:
    operator, values = expression.get("operator"), expression.get("values") or []
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and values:
        try:
            left, right = int(value), int(values[0])
        except ValueError:
            return False
        return left > right if operator == "Gt" else left < right
    return False


def _term_matches(term: Mapping[str, Any], node: Node) -> bool:
    for expression in term.get("matchExpressions") or []:
        if not _expression_matches(expression, node.labels.get(expression.get("key", ""))):
            return False
    for expression in term.get("matchFields") or []:
        value = node.name if expression.get("key") == "metadata.name" else None
        if not _expression_matches(expression, value):
            return False
    return bool(term.get("matchExpressions") or term.get("matchFields"))


def static_reason(shape: Shape, node: Node) -> str | None:
    """Why `node` can never take a pod of this shape, whatever its free capacity; None if it can."""
    tolerations = _thaw(shape.tolerations) or []
    if node.unschedulable and not _tolerates(tolerations, Taint(CORDON_TAINT, "", "NoSchedule")):
        return "cordoned"
    for key, value in shape.node_selector:
        if node.labels.get(key) != value:
            return f"nodeSelector {key}={value} does not match"
    if shape.affinity_terms is not None:
        terms = _thaw(shape.affinity_terms) or []
        if not any(_term_matches(term, node) for term in terms):
            return "required node affinity does not match"
    for taint in node.taints:
        if taint.effect in ("NoSchedule", "NoExecute") and not _tolerates(tolerations, taint):
            return f"taint {taint} not tolerated"
    return None


def fit_count(shape: Shape, free: Mapping[str, int]) -> int:
    count = math.inf
    for name, amount in shape.requests:
        if amount > 0:
            count = min(count, free.get(name, 0) // amount)
    return 0 if count == math.inf else int(count)


@dataclass
class Placement:
    assignments: dict[str, str]  # pod name -> node name
    complete: bool
    reasons: dict[str, str]  # node name -> why more pods do not go there (only when incomplete)
    unmodelled: tuple[str, ...] = ()


@dataclass(frozen=True)
class Member:
    name: str
    shape: Shape


def place(members: Sequence[Member], nodes: Sequence[Node], free: Mapping[str, Mapping[str, int]]) -> Placement:
    """Nodes for every member, or the reasons why the whole gang does not fit now.

    `free` is each node's allocatable minus the requests of the pods bound or promised to it.
    """
    by_shape: dict[Shape, list[str]] = {}
    for member in members:
        by_shape.setdefault(member.shape, []).append(member.name)
    # biggest shapes first: they have the fewest places to go
    order = sorted(by_shape, key=lambda s: sorted((-a for n, a in s.requests if n != PODS)), reverse=False)
    remaining = {node.name: dict(free.get(node.name, node.allocatable)) for node in nodes}
    assignments: dict[str, str] = {}
    reasons: dict[str, str] = {}
    unmodelled: set[str] = set()
    complete = True
    for shape in order:
        names = by_shape[shape]
        unmodelled.update(shape.unmodelled)
        candidates: list[tuple[int, str]] = []
        before: dict[str, str] = {}
        for node in nodes:
            reason = static_reason(shape, node)
            if reason is not None:
                reasons.setdefault(node.name, reason)
                continue
            fits = fit_count(shape, remaining[node.name])
            if fits > 0:
                candidates.append((fits, node.name))
                before[node.name] = _needs(shape, remaining[node.name], fits)
            else:
                reasons.setdefault(node.name, f"0 of {len(names)} pods fit ({_needs(shape, remaining[node.name], 0)})")
        candidates.sort()
        index = 0
        for fits, node_name in candidates:
            take = min(fits, len(names) - index)
            node_free = remaining[node_name]
            for name in names[index : index + take]:
                assignments[name] = node_name
            for resource, amount in shape.requests:
                node_free[resource] = node_free.get(resource, 0) - amount * take
            index += take
            if index == len(names):
                break
        if index < len(names):
            complete = False
            for fits, node_name in candidates:
                reasons.setdefault(node_name, f"{fits} of {len(names)} pods fit ({before[node_name]})")
    return Placement(assignments, complete, {} if complete else reasons, tuple(sorted(unmodelled)))


def _needs(shape: Shape, free: Mapping[str, int], fits: int) -> str:
    """The resources that limit this node to `fits` pods of the shape."""
    parts = []
    for name, amount in shape.requests:
        if amount and free.get(name, 0) // amount == fits:
            if name == PODS:
                parts.append("pod count at its limit")
            else:
                parts.append(f"needs {show(name, amount)} each, {show(name, max(free.get(name, 0), 0))} free")
    return "; ".join(parts) or "no requests"


def free_capacity(nodes: Iterable[Node], bound: Iterable[tuple[str, Mapping[str, int]]]) -> dict[str, Units]:
    """Allocatable minus the requests of each pod bound (or promised) to the node."""
    free = {node.name: dict(node.allocatable) for node in nodes}
    for node_name, units in bound:
        node_free = free.get(node_name)
        if node_free is None:
            continue
        for name, amount in units.items():
            node_free[name] = node_free.get(name, 0) - amount
    return free


def summarize(reasons: Mapping[str, str], limit: int = 6) -> list[str]:
    """Nodes grouped by reason: ["worker1, worker2: taint ... not tolerated", ...]."""
    grouped: dict[str, list[str]] = {}
    for node, reason in sorted(reasons.items()):
        grouped.setdefault(reason, []).append(node)
    lines = []
    for reason, names in sorted(grouped.items(), key=lambda item: (-len(item[1]), item[0])):
        shown = ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")
        lines.append(f"{shown}: {reason}")
    return lines
