"""kube-scheduler, pod by pod, on the test API server: what a released pod meets in a real cluster.

Written from kube-scheduler's sources, independently of gangkeeper's placement code, so that a test
can find where the two disagree. One scheduling cycle (pkg/scheduler/schedule_one.go):
- the queue pops the highest priority first, then the oldest (framework/plugins/queuesort/priority_sort.go);
  gated pods stay out of it (framework/plugins/schedulinggates);
- Filter plugins, every one must pass: NodeUnschedulable (nodeunschedulable/node_unschedulable.go),
  NodeAffinity with nodeSelector (nodeaffinity/node_affinity.go), TaintToleration for NoSchedule and
  NoExecute (tainttoleration/taint_toleration.go), NodePorts (nodeports/node_ports.go with
  framework/types.go HostPortInfo), NodeResourcesFit on requests including the pod count
  (noderesources/fit.go, requests from k8s.io/component-helpers/resource: max of the sum of app
  containers plus restartable init containers and each init container, plus overhead; pod-level
  requests when set, KEP-2837);
- pods still on a node (terminating ones included, until deleted) hold its capacity and ports
  (the scheduler cache counts assumed and bound pods);
- Score: LeastAllocated over cpu and memory (the default NodeResourcesFit strategy), ties by name;
- no feasible node: condition PodScheduled=False with reason Unschedulable (schedule_one.go,
  handleSchedulingFailure). Preemption is not modelled.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

from tests.apiserver import Obj, Store

ANY_IP = "0.0.0.0"


def _requests_of(resources: Mapping[str, Any] | None) -> dict[str, Decimal]:
    return {k: Decimal(parse_quantity(v)) for k, v in ((resources or {}).get("requests") or {}).items()}


def pod_requests(spec: Mapping[str, Any]) -> dict[str, Decimal]:
    if (spec.get("resources") or {}).get("requests"):
        total = _requests_of(spec["resources"])
    else:
        total = {}
        for container in spec.get("containers") or []:
            for k, v in _requests_of(container.get("resources")).items():
                total[k] = total.get(k, Decimal(0)) + v
        sidecars: dict[str, Decimal] = {}
        for init in spec.get("initContainers") or []:
            own = _requests_of(init.get("resources"))
            if init.get("restartPolicy") == "Always":
                for k, v in own.items():
                    sidecars[k] = sidecars.get(k, Decimal(0)) + v
                    total[k] = total.get(k, Decimal(0)) + v
            else:
                for k, v in own.items():
                    total[k] = max(total.get(k, Decimal(0)), v + sidecars.get(k, Decimal(0)))
    for k, v in (spec.get("overhead") or {}).items():
        total[k] = total.get(k, Decimal(0)) + Decimal(parse_quantity(v))
    total["pods"] = Decimal(1)
    return total


def host_ports(spec: Mapping[str, Any]) -> list[tuple[str, str, int]]:
    found = []
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or []:
            if key == "initContainers" and container.get("restartPolicy") != "Always":
                continue
            for port in container.get("ports") or []:
                number = port.get("hostPort") or (port.get("containerPort") if spec.get("hostNetwork") else 0)
                if number:
                    found.append((port.get("protocol") or "TCP", port.get("hostIP") or ANY_IP, int(number)))
    return found


def _tolerated(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        if t.get("operator") == "Exists":
            if not t.get("key") or t.get("key") == taint.get("key"):
                return True
        elif t.get("key") == taint.get("key") and (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _requirement(expr: Mapping[str, Any], value: str | None) -> bool:
    op, values = expr.get("operator"), expr.get("values") or []
    if op == "In":
        return value in values
    if op == "NotIn":
        return value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None:
        try:
            return int(value) > int(values[0]) if op == "Gt" else int(value) < int(values[0])
        except (ValueError, IndexError):
            return False
    return False


def filter_reason(pod: Obj, node: Obj, used: Mapping[str, Decimal], ports: list[tuple[str, str, int]]) -> str | None:
    spec, meta = pod.get("spec") or {}, node.get("metadata") or {}
    labels = meta.get("labels") or {}
    tolerations = spec.get("tolerations") or []
    if (node.get("spec") or {}).get("unschedulable") and not _tolerated(
        tolerations, {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
    ):
        return "NodeUnschedulable"
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return "NodeAffinity: nodeSelector"
    required = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
        or {}
    ).get("nodeSelectorTerms")
    if required is not None:

        def term_ok(term: Mapping[str, Any]) -> bool:
            exprs = term.get("matchExpressions") or []
            fields = term.get("matchFields") or []
            if not exprs and not fields:
                return False
            return all(_requirement(e, labels.get(e.get("key"))) for e in exprs) and all(
                _requirement(f, meta.get("name") if f.get("key") == "metadata.name" else None) for f in fields
            )

        if not any(term_ok(t) for t in required):
            return "NodeAffinity: required terms"
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerated(tolerations, taint):
            return "TaintToleration"
    for protocol, ip, port in host_ports(spec):
        for p2, ip2, port2 in ports:
            if port == port2 and protocol == p2 and (ip == ip2 or ANY_IP in (ip, ip2)):
                return "NodePorts"
    allocatable = {
        k: Decimal(parse_quantity(v)) for k, v in ((node.get("status") or {}).get("allocatable") or {}).items()
    }
    for resource, amount in pod_requests(spec).items():
        if amount > 0 and used.get(resource, Decimal(0)) + amount > allocatable.get(resource, Decimal(0)):
            return f"NodeResourcesFit: Insufficient {resource}"
    return None


def _holding(pods: Iterable[Obj]) -> tuple[dict[str, dict[str, Decimal]], dict[str, list[tuple[str, str, int]]]]:
    used: dict[str, dict[str, Decimal]] = {}
    ports: dict[str, list[tuple[str, str, int]]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        for k, v in pod_requests(pod["spec"]).items():
            used.setdefault(node, {})[k] = used.setdefault(node, {}).get(k, Decimal(0)) + v
        ports.setdefault(node, []).extend(host_ports(pod["spec"]))
    return used, ports


def schedule(store: Store) -> dict[str, str]:
    """One round over every schedulable pending pod; returns pod key -> node bound (or the reason it is
    unschedulable, prefixed with "!")."""
    outcome: dict[str, str] = {}
    nodes = sorted(store.list("v1", "nodes", None)[0], key=lambda n: n["metadata"]["name"])
    pods = store.list("v1", "pods", None)[0]
    used, ports = _holding(pods)
    pending = [
        p
        for p in pods
        if not p["spec"].get("nodeName")
        and not p["spec"].get("schedulingGates")
        and not p["metadata"].get("deletionTimestamp")
        and (p.get("status") or {}).get("phase") in (None, "Pending")
    ]
    pending.sort(key=lambda p: (-int(p["spec"].get("priority") or 0), p["metadata"].get("creationTimestamp", "")))
    for pod in pending:
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        feasible = []
        reasons = []
        for node in nodes:
            name = node["metadata"]["name"]
            reason = filter_reason(pod, node, used.get(name, {}), ports.get(name, []))
            if reason is None:
                feasible.append(node)
            else:
                reasons.append(reason)
        if not feasible:
            outcome[key] = "!" + (reasons[0] if reasons else "no nodes")
            pod["status"] = {
                **(pod.get("status") or {}),
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
            }
            store.update("v1", "pods", pod["metadata"]["namespace"], pod["metadata"]["name"], pod, None, admit=False)
            continue

        def least_allocated(node: Obj) -> tuple[Decimal, str]:
            name = node["metadata"]["name"]
            allocatable = (node.get("status") or {}).get("allocatable") or {}
            score = Decimal(0)
            for resource in ("cpu", "memory"):
                total = Decimal(parse_quantity(allocatable.get(resource, "0")))
                if total:
                    score += (total - used.get(name, {}).get(resource, Decimal(0))) / total
            return (-score, name)

        chosen = min(feasible, key=least_allocated)["metadata"]["name"]
        store.bind(pod["metadata"]["namespace"], pod["metadata"]["name"], chosen)
        for k, v in pod_requests(pod["spec"]).items():
            used.setdefault(chosen, {})[k] = used.setdefault(chosen, {}).get(k, Decimal(0)) + v
        ports.setdefault(chosen, []).extend(host_ports(pod["spec"]))
        outcome[key] = chosen
    return outcome


def overcommitted(store: Store) -> list[str]:
    """Nodes whose bound pods ask for more than they have: must never happen."""
    nodes = {n["metadata"]["name"]: n for n in store.list("v1", "nodes", None)[0]}
    used, _ = _holding(store.list("v1", "pods", None)[0])
    bad = []
    for name, amounts in used.items():
        allocatable = (nodes[name].get("status") or {}).get("allocatable") or {}
        if any(v > Decimal(parse_quantity(allocatable.get(k, "0"))) for k, v in amounts.items() if v > 0):
            bad.append(name)
    return bad
