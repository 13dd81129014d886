"""Where a whole gang fits on the nodes' free capacity: a pure function, with the reasons when it does not.

The fit model is kube-scheduler's filter plugins for what they check of one pod against one node
(pkg/scheduler/framework/plugins/...): NodeUnschedulable, NodeName, NodeAffinity (nodeSelector and
required node affinity), TaintToleration, NodePorts and NodeResourcesFit (with pod-level resources,
KEP-2837). What it does not model (inter-pod affinity, DoNotSchedule topology spread, volumes bound to
nodes, DRA claims) is reported as `unmodelled` so the caller releases those pods without a pin.

Resources are integers (cpu in millicores, everything else in its base unit) so that thousands of
nodes can be checked in milliseconds. Pods of one gang usually come in a few identical shapes; each
shape is matched against the nodes once, then either packed best-fit (tightest node first: large free
nodes stay free for the next gang; batch work) or spread one pod per node in turn over the roomiest
nodes (serving replicas: one node's failure takes as few as possible).
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
    """Why `node` can never take a pod of this shape, whatever its free capacity; None if it can.
    (NodeUnschedulable: nodeunschedulable/node_unschedulable.go; NodeAffinity: nodeaffinity/node_affinity.go,
    nodeSelector and required terms ORed; TaintToleration: tainttoleration/taint_toleration.go, NoSchedule
    and NoExecute.)"""
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


class Eligibility:
    """The nodes a shape may ever use, by the static filters, remembered per shape until the nodes
    change: a cluster's nodes change far less often than its pods, so a pass checks each pair once."""

    def __init__(self, nodes: Sequence[Node]) -> None:
        self.nodes = list(nodes)
        self._cache: dict[Shape, tuple[list[Node], dict[str, str]]] = {}
        self._names: dict[Shape, frozenset[str]] = {}
        self._on_empty: dict[tuple[tuple[Shape, ...], bool], list[str] | None] = {}

    def __call__(self, shape: Shape) -> tuple[list[Node], dict[str, str]]:
        found = self._cache.get(shape)
        if found is None:
            eligible, reasons = [], {}
            for node in self.nodes:
                reason = static_reason(shape, node)
                if reason is None:
                    eligible.append(node)
                else:
                    reasons[node.name] = reason
            found = self._cache[shape] = (eligible, reasons)
        return found

    def names(self, shape: Shape) -> frozenset[str]:
        names = self._names.get(shape)
        if names is None:
            names = self._names[shape] = frozenset(node.name for node in self(shape)[0])
        return names

    def on_empty_cluster(self, members: Sequence[Member], spread: bool = False) -> list[str] | None:
        """The node of each member (in order) on the cluster emptied of every pod, or None if the gang
        could never fit: a queue's reservation when nothing says when running work ends. It depends
        on the nodes only, so it is remembered as long as they are."""
        key = (tuple(member.shape for member in members), spread)
        if key not in self._on_empty:
            if len(self._on_empty) >= 1024:
                self._on_empty.clear()
            empty = {node.name: node.allocatable for node in self.nodes}
            result = place(members, self.nodes, empty, spread=spread, eligibility=self)
            # place() fills members in order within each shape, so the answer holds for any names
            self._on_empty[key] = [result.assignments[m.name] for m in members] if result.complete else None
        return self._on_empty[key]


# why a node takes no more pods: a sentence, or (shape, its free capacity, pods that fit, pods wanted),
# written out only when someone reads it (most passes only need to know that a gang does not fit)
Why = str | tuple["Shape", Mapping[str, int], int, int]


@dataclass
class Placement:
    assignments: dict[str, str]  # pod name -> node name
    complete: bool
    why: dict[str, Why]  # node name -> why more pods do not go there (only when incomplete)
    unmodelled: tuple[str, ...] = ()

    @functools.cached_property
    def reasons(self) -> dict[str, str]:
        return {
            node: why if isinstance(why, str) else f"{why[2]} of {why[3]} pods fit ({_needs(why[0], why[1], why[2])})"
            for node, why in self.why.items()
        }


@dataclass(frozen=True)
class Member:
    name: str
    shape: Shape


_NO_PORTS: frozenset[HostPort] = frozenset()


def place(
    members: Sequence[Member],
    nodes: Sequence[Node],
    free: Mapping[str, Mapping[str, int]],
    used_ports: Mapping[str, Iterable[HostPort]] | None = None,
    spread: bool = False,
    eligibility: Eligibility | None = None,
) -> Placement:
    """Nodes for every member, or the reasons why the whole gang does not fit now.

    `free` is each node's allocatable minus the requests of the pods bound or promised to it, and
    `used_ports` the host ports those pods take. `spread` puts one pod per node in turn instead of packing.
    """
    eligibility = eligibility or Eligibility(nodes)
    by_shape: dict[Shape, list[str]] = {}
    for member in members:
        by_shape.setdefault(member.shape, []).append(member.name)
    # biggest shapes first: they have the fewest places to go
    order = sorted(by_shape, key=lambda s: sorted((-a for n, a in s.requests if n != PODS)), reverse=False)
    remaining: dict[str, dict[str, int]] = {}  # copied on first use: most nodes are only read
    taken_ports: dict[str, set[HostPort]] = {}
    used_ports = used_ports or {}
    assignments: dict[str, str] = {}
    reasons: dict[str, Why] = {}
    unmodelled: set[str] = set()
    complete = True
    for shape in order:
        names = by_shape[shape]
        unmodelled.update(shape.unmodelled)
        candidates: list[tuple[int, str]] = []
        eligible, static = eligibility(shape)
        base: dict[str, Mapping[str, int]] = {}
        for node_name, reason in static.items():
            reasons.setdefault(node_name, reason)
        for node in eligible:
            node_free: Mapping[str, int] | None = remaining.get(node.name)
            if node_free is None:
                node_free = free.get(node.name, node.allocatable)
            fits = fit_count(shape, node_free)
            if fits > 0 and shape.host_ports:
                in_use = taken_ports.get(node.name) or used_ports.get(node.name, _NO_PORTS)
                clash = ports_clash(shape.host_ports, in_use)
                if clash is not None:
                    reasons.setdefault(node.name, f"host port {clash[2]}/{clash[0]} in use")
                    continue
            if fits > 0:
                candidates.append((fits, node.name))
                base[node.name] = node_free
            elif node.name not in reasons:
                reasons[node.name] = (shape, node_free, 0, len(names))
        takes = _spread(candidates, len(names)) if spread else _pack(candidates, len(names))
        index = 0
        for node_name, take in takes:
            taking = remaining.get(node_name)
            if taking is None:
                taking = remaining[node_name] = dict(base[node_name])
            for name in names[index : index + take]:
                assignments[name] = node_name
            for resource, amount in shape.requests:
                taking[resource] = taking.get(resource, 0) - amount * take
            if shape.host_ports:
                ports = taken_ports.get(node_name)
                if ports is None:
                    ports = taken_ports[node_name] = set(used_ports.get(node_name, _NO_PORTS))
                ports.update(shape.host_ports)
            index += take
        if index < len(names):
            complete = False
            for fits, node_name in candidates:
                reasons.setdefault(node_name, (shape, base[node_name], fits, len(names)))
    return Placement(assignments, complete, {} if complete else reasons, tuple(sorted(unmodelled)))


def _pack(candidates: list[tuple[int, str]], wanted: int) -> list[tuple[str, int]]:
    """Tightest nodes first, each filled as far as it goes."""
    takes, left = [], wanted
    for fits, node_name in sorted(candidates):
        if left == 0:
            break
        take = min(fits, left)
        takes.append((node_name, take))
        left -= take
    return takes


def _spread(candidates: list[tuple[int, str]], wanted: int) -> list[tuple[str, int]]:
    """One pod per node in turn, roomiest nodes first, so replicas land on as many nodes as possible."""
    ordered = sorted(candidates, key=lambda item: (-item[0], item[1]))
    counts: dict[str, int] = {}
    left, round_ = wanted, 0
    while left > 0:
        progressed = False
        for fits, node_name in ordered:
            if left == 0:
                break
            if fits > round_:
                counts[node_name] = counts.get(node_name, 0) + 1
                left -= 1
                progressed = True
        if not progressed:
            break
        round_ += 1
    return list(counts.items())


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


def summarize(why: Mapping[str, Why], limit: int = 6) -> list[str]:
    """Nodes grouped by reason, largest group first: ["worker1, worker2: taint ... not tolerated", ...].
    Capacity reasons are grouped by what limits the node, with the most any of them has free, so that
    5,000 nodes each a little short make one line, not 5,000."""
    said: dict[str, list[str]] = {}
    short: dict[tuple[int, int, tuple[tuple[str, int], ...]], tuple[list[str], dict[str, int]]] = {}
    for node, reason in sorted(why.items()):
        if isinstance(reason, str):
            said.setdefault(reason, []).append(node)
            continue
        shape, free, fits, wanted = reason
        limits = tuple((name, amount) for name, amount in shape.positive if free.get(name, 0) // amount == fits)
        names, most = short.setdefault((fits, wanted, limits), ([], {}))
        names.append(node)
        for name, _ in limits:
            most[name] = max(most.get(name, -(2**62)), free.get(name, 0))
    groups: list[tuple[list[str], str]] = [(names, reason) for reason, names in said.items()]
    for (fits, wanted, limits), (names, most) in short.items():
        parts = [
            "pod count at its limit"
            if name == PODS
            else f"needs {show(name, amount)} each, {'' if len(names) == 1 else 'at most '}"
            f"{show(name, max(most.get(name, 0), 0))} free"
            for name, amount in limits
        ]
        groups.append((names, f"{fits} of {wanted} pods fit ({'; '.join(parts) or 'no requests'})"))
    lines = []
    for names, reason in sorted(groups, key=lambda item: (-len(item[0]), item[1])):
        shown = ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")
        lines.append(f"{shown}: {reason}")
    return lines
