"""One pod against one node, as kube-scheduler's filter plugins check it (pkg/scheduler/framework/
plugins/...): NodeUnschedulable, NodeName, NodeAffinity (nodeSelector and required node affinity),
TaintToleration, NodePorts and NodeResourcesFit (with pod-level resources, KEP-2837). A pod is reduced
to its Shape (integer requests, ports, constraints) and a node to its allocatable, labels and taints,
so that thousands of nodes are checked in milliseconds; placement.py places whole gangs with these.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from webhook import resources

Units = dict[str, int]
HostPort = tuple[str, str, int]  # (protocol, host IP, port)
PODS = "pods"
ANY_IP = "0.0.0.0"
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

    def with_units(self, units: Mapping[str, int]) -> Node:
        """The node with `units` added to its allocatable (its devices as resources): dataclasses.replace
        cost 4 us a node, 5,000 nodes at a cold start with devices."""
        return Node(self.name, {**self.allocatable, **units}, self.labels, self.taints, self.unschedulable)


@dataclass(frozen=True)
class Shape:
    """What placement needs to know of a pod: requests and the node constraints it models."""

    requests: tuple[tuple[str, int], ...]  # includes ("pods", 1)
    node_selector: tuple[tuple[str, str], ...] = ()
    affinity_terms: Any = None  # required nodeSelectorTerms, as JSON (hashable tuple form)
    tolerations: Any = ()
    unmodelled: tuple[str, ...] = ()  # constraints placement does not model (pod affinity, spread)
    host_ports: tuple[HostPort, ...] = ()

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
            host_ports=host_ports(spec),
        )

    @functools.cached_property
    def _hash(self) -> int:
        return hash(
            (self.requests, self.node_selector, self.affinity_terms, self.tolerations, self.unmodelled, self.host_ports)
        )

    def __hash__(self) -> int:
        """Hashed once: shapes key the placement's counts of a 1,000-pod gang on every pass, and hashing
        the nested tuples each time was a twentieth of the controller's CPU (bench/cluster.py autoscale)."""
        return self._hash

    @functools.cached_property
    def positive(self) -> tuple[tuple[str, int], ...]:
        """The requests that limit how many pods fit (placement asks this millions of times)."""
        return tuple((name, amount) for name, amount in self.requests if amount > 0)

    def describe_requests(self) -> str:
        return ", ".join(show(name, amount) for name, amount in self.requests if name != PODS and amount)


def host_ports(spec: Mapping[str, Any]) -> tuple[HostPort, ...]:
    """The host ports a pod takes, as the NodePorts plugin reads them (nodeports/node_ports.go,
    getContainerPorts; framework/types.go HostPortInfo sanitizes "" to 0.0.0.0 and TCP). With
    hostNetwork the API server defaults each hostPort to its containerPort (core/v1/defaults.go), which
    is applied here too for objects that did not pass through defaulting."""
    host_network = bool(spec.get("hostNetwork"))
    found: set[HostPort] = set()
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or []:
            if key == "initContainers" and container.get("restartPolicy") != "Always":
                continue  # only sidecars keep their ports while the pod runs
            for port in container.get("ports") or []:
                number = port.get("hostPort") or (port.get("containerPort") if host_network else 0)
                if number:
                    found.add((port.get("protocol") or "TCP", port.get("hostIP") or ANY_IP, int(number)))
    return tuple(sorted(found))


def ports_clash(wanted: Iterable[HostPort], used: Iterable[HostPort]) -> HostPort | None:
    """The first wanted port already taken: same protocol and port, and the same IP or either one
    0.0.0.0 (framework/types.go HostPortInfo.CheckConflict)."""
    used_set = set(used)
    if not used_set:
        return None
    for protocol, ip, port in wanted:
        for other_protocol, other_ip, other_port in used_set:
            if port == other_port and protocol == other_protocol and (ip == other_ip or ANY_IP in (ip, other_ip)):
                return (protocol, ip, port)
    return None


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    if isinstance(value, tuple) and all(isinstance(i, tuple) and len(i) == 2 and isinstance(i[0], str) for i in value):
        return {k: thaw(v) for k, v in value}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


def tolerates(tolerations: Sequence[Mapping[str, Any]], taint: Taint) -> bool:
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


def term_matches(term: Mapping[str, Any], node: Node) -> bool:
    for expression in term.get("matchExpressions") or []:
        if not _expression_matches(expression, node.labels.get(expression.get("key", ""))):
            return False
    for expression in term.get("matchFields") or []:
        value = node.name if expression.get("key") == "metadata.name" else None
        if not _expression_matches(expression, value):
            return False
    return bool(term.get("matchExpressions") or term.get("matchFields"))


def static_reason(shape: Shape, node: Node) -> str | None:
    """Why `node` can never take a pod of this shape, whatever its free capacity; None if it can.
    (NodeUnschedulable: nodeunschedulable/node_unschedulable.go; NodeAffinity: nodeaffinity/node_affinity.go,
    nodeSelector and required terms ORed; TaintToleration: tainttoleration/taint_toleration.go, NoSchedule
    and NoExecute.)"""
    tolerations = thaw(shape.tolerations) or []
    if node.unschedulable and not tolerates(tolerations, Taint(CORDON_TAINT, "", "NoSchedule")):
        return "cordoned"
    for key, value in shape.node_selector:
        if node.labels.get(key) != value:
            return f"nodeSelector {key}={value} does not match"
    if shape.affinity_terms is not None:
        terms = thaw(shape.affinity_terms) or []
        if not any(term_matches(term, node) for term in terms):
            return "required node affinity does not match"
    for taint in node.taints:
        if taint.effect in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
            return f"taint {taint} not tolerated"
    return None


def fit_count(shape: Shape, free: Mapping[str, int]) -> int:
    """How many pods of the shape the free capacity holds (NodeResourcesFit: noderesources/fit.go, every
    requested resource, the pod count included). Host ports allow one per node at most."""
    count = -1
    for name, amount in shape.positive:
        fits = free.get(name, 0) // amount
        if count < 0 or fits < count:
            count = fits
            if count <= 0:
                return 0
    if count < 0:
        return 0
    return min(count, 1) if shape.host_ports else count
