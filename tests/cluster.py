"""Helpers for controller tests: a test API server populated like a small kind cluster."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from tests import builders as b
from tests.apiserver import Store
from tests.schemas import validate
from webhook.admission.decide import admit
from webhook.backends import make
from webhook.controller.decide import placement, shapes
from webhook.controller.decide.pods import PodView
from webhook.controller.observe.informer import trim_pod


def node(
    name: str,
    cpu: str = "8",
    memory: str = "32Gi",
    pods: str = "110",
    taints: list[dict[str, str]] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": taints} if taints else {},
        "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": pods}},
    }


BLOCKED = [{"key": "test", "value": "blocked", "effect": "NoSchedule"}]
CONTROL_PLANE = [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]


def add_job(
    store: Store,
    name: str = "train",
    parallelism: int = 4,
    cpu: str = "4",
    namespace: str = "team-a",
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    job = b.job(name, parallelism=parallelism, spec=b.pod_spec(b.container(cpu, "1Gi")), annotations=annotations)
    job["metadata"]["namespace"] = namespace
    return store.create("batch/v1", "jobs", namespace, job)


def add_job_pods(store: Store, job: dict[str, Any], count: int | None = None, backend: str = "gate") -> list[str]:
    """Pods as the Job controller creates them, through the webhook's admission of the chosen backend."""
    meta = job["metadata"]
    names = []
    for _ in range(count if count is not None else job["spec"]["parallelism"]):
        pod = b.pod(
            "",
            labels={"batch.kubernetes.io/job-name": meta["name"], "batch.kubernetes.io/controller-uid": meta["uid"]},
            spec=dict(job["spec"]["template"]["spec"]),
            namespace=meta["namespace"],
        )
        pod["metadata"]["generateName"] = f"{meta['name']}-"
        pod["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": meta["name"],
                "uid": meta["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        name, _, version = backend.partition("-")  # "native-1.35": a native generation
        outcome = admit(pod, "CREATE", make(name, kubernetes_version=version or "1.37"), meta["namespace"])
        assert outcome.mutated is not None, outcome.reason
        names.append(store.create("v1", "pods", meta["namespace"], outcome.mutated)["metadata"]["name"])
    return names


def gated_job_pods(
    size: int, cpu: str = "1", memory: str = "1Gi", claim_template: str | None = None, namespace: str = "team-a"
) -> dict[str, dict[str, Any]]:
    """A Job `train`'s pods as the controller's cache holds them (informer.py trim_pod), each through the
    gate's admission, by key: what the controller's index reads, with no API server (bench/devices.py,
    tests that drive the index directly). `claim_template`: each pod claims from that template."""
    job = b.job("train", parallelism=size, spec=b.pod_spec(b.container(cpu, memory)))
    job["metadata"]["namespace"] = namespace
    if claim_template:
        job["spec"]["template"]["spec"]["resourceClaims"] = [
            {"name": "gpu", "resourceClaimTemplateName": claim_template}
        ]
    template = admit(job, "CREATE", make("gate"), namespace).mutated["spec"]["template"]
    found = {}
    for i in range(size):
        pod = b.pod(
            f"train-{i:04d}",
            labels=dict(template["metadata"]["labels"]),
            annotations=dict(template["metadata"]["annotations"]),
            owner=("batch/v1", "Job", "train"),
            spec=dict(template["spec"]),
        )
        pod["metadata"].update(namespace=namespace, uid=f"pod-{i}", resourceVersion="1")
        found[f"{namespace}/train-{i:04d}"] = trim_pod(admit(pod, "CREATE", make("gate"), namespace).mutated)
    return found


def pods(store: Store, namespace: str = "team-a") -> list[dict[str, Any]]:
    return store.list("v1", "pods", namespace)[0]


def free_capacity(
    nodes: Iterable[shapes.Node], bound: Iterable[tuple[str, Mapping[str, int]]]
) -> dict[str, dict[str, int]]:
    """Allocatable minus the requests of each pod bound (or promised) to the node."""
    free = {node.name: dict(node.allocatable) for node in nodes}
    for node_name, units in bound:
        node_free = free.get(node_name)
        if node_free is None:
            continue
        for name, amount in units.items():
            node_free[name] = node_free.get(name, 0) - amount
    return free


def default_scheduler(store: Store, only: Callable[[dict[str, Any]], bool] = lambda pod: True) -> int:
    """The stock kube-scheduler, pod by pod: bind each ungated pod (of those `only` keeps: its own, when
    another scheduler places the rest) to the first node where it fits."""
    bound = 0
    all_pods = store.list("v1", "pods", None)[0]
    nodes = [shapes.Node.from_api(n) for n in store.list("v1", "nodes", None)[0]]
    views = [PodView.from_api(p) for p in all_pods]
    free = free_capacity(nodes, ((v.node_name, v.units) for v in views if v.node_name))
    mine = {pod["metadata"]["name"] for pod in all_pods if only(pod)}
    for view in sorted(views, key=lambda v: v.name):
        if view.node_name or view.gated or view.terminal or view.name not in mine:
            continue
        result = placement.place([placement.Member(view.name, view.shape)], nodes, free)
        if result.complete:
            target = result.assignments[view.name]
            store.bind(view.namespace, view.name, target)
            for resource, amount in view.units.items():
                free[target][resource] -= amount
            bound += 1
    return bound


class Clock:
    def __init__(self) -> None:
        self.now = dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.UTC)

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += dt.timedelta(seconds=seconds)


def gang_object(store: Store, gang: str, namespace: str = "team-a") -> dict[str, Any]:
    """The controller's Gang object of `gang`, checked against the chart's CRD."""
    obj = store.get("gangkeeper.io/v1alpha1", "gangs", namespace, gang)
    validate(obj)
    return obj


def gang_status(store: Store, gang: str, namespace: str = "team-a") -> dict[str, Any]:
    status: dict[str, Any] = gang_object(store, gang, namespace).get("status") or {}
    return status
