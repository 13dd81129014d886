"""More clusters beside the session's, for Kueue's MultiKueue: each worker a control plane of its own
(etcd, kube-apiserver, the controllers, KWOK) at an address of its own, gangkeeper deployed on it as on
the first; the manager reaches each through a kubeconfig in a Secret, its certificates inline as Kueue
requires (kueue pkg/controller/admissionchecks/multikueue/multikueuecluster.go validateKubeconfig)."""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from tests.realcluster import operators
from tests.realcluster.controlplane import ControlPlane
from tests.realcluster.stack import Stack, wait_until
from tests.workers import host_address

WORKER_ADDRESSES = (host_address(2), host_address(3))
KUEUE_NAMESPACE = "kueue-system"
# the manager's Kueue: MultiKueue's own settings (a worker unreachable for 30 s is given up on)
MANAGER_KUEUE = {"multiKueue": {"gcInterval": "30s", "origin": "multikueue", "workerLostTimeout": "30s"}}


def _inline(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def inline_kubeconfig(plane: ControlPlane) -> str:
    """The admin kubeconfig of `plane` with its CA, certificate and key inline (no file paths)."""
    p = plane.pki
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "worker",
            "clusters": [
                {"name": "worker", "cluster": {"server": plane.server, "certificate-authority-data": _inline(p.ca)}}
            ],
            "users": [
                {
                    "name": "admin",
                    "user": {
                        "client-certificate-data": _inline(p.cert("admin")),
                        "client-key-data": _inline(p.key("admin")),
                    },
                }
            ],
            "contexts": [{"name": "worker", "context": {"cluster": "worker", "user": "admin"}}],
        }
    )


def multikueue_objects(workers: dict[str, ControlPlane], check: str = "multikueue") -> list[dict[str, Any]]:
    """On the manager: a Secret and a MultiKueueCluster per worker, one MultiKueueConfig naming them all,
    and the AdmissionCheck a ClusterQueue lists to dispatch through MultiKueue (kueue apis/kueue/v1beta2)."""
    objects: list[dict[str, Any]] = []
    for name, plane in workers.items():
        objects += [
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": f"{name}-kubeconfig", "namespace": KUEUE_NAMESPACE},
                "stringData": {"kubeconfig": inline_kubeconfig(plane)},
            },
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "MultiKueueCluster",
                "metadata": {"name": name},
                "spec": {"clusterSource": {"kubeConfig": {"locationType": "Secret", "location": f"{name}-kubeconfig"}}},
            },
        ]
    objects += [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "MultiKueueConfig",
            "metadata": {"name": "workers"},
            "spec": {"clusters": list(workers)},
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "AdmissionCheck",
            "metadata": {"name": check},
            "spec": {
                "controllerName": "kueue.x-k8s.io/multikueue",
                "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "workers"},
            },
        },
    ]
    return objects


@contextlib.contextmanager
def worker(
    workdir: Path, address: str, kubernetes_version: str, before: Callable[[ControlPlane], object] | None = None
) -> Iterator[Stack]:
    """A worker cluster with gangkeeper deployed (the gate overlay, as the first cluster's); `before`
    installs what gangkeeper should find served at its start (its controller's first discovery sees it,
    instead of the next one a minute later)."""
    plane = ControlPlane(workdir, kubernetes_version=kubernetes_version, advertise_address=address)
    with Stack(plane, overlay=None).running() as stack:
        if before is not None:
            before(plane)
        stack.overlay = "gate"
        stack.deploy()
        yield stack


def gang_fits_check() -> dict[str, Any]:
    """gangkeeper's Kueue AdmissionCheck, for a worker's ClusterQueue to list."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "AdmissionCheck",
        "metadata": {"name": "gang-fits"},
        "spec": {"controllerName": "gangkeeper.io/gang-fits"},
    }


def condition_true(obj: dict[str, Any], kind: str) -> bool:
    return any(c["type"] == kind and c["status"] == "True" for c in (obj.get("status") or {}).get("conditions") or [])


def check_active(stack: Stack, name: str = "gang-fits") -> bool:
    return condition_true(stack.plane.get("admissioncheck", name) or {}, "Active")


@contextlib.contextmanager
def workers_with_kueue(workdir: Path, kubernetes_version: str) -> Iterator[dict[str, Stack]]:
    """Two workers, worker1 and worker2, each with Kueue and gangkeeper's check (marked Active by the
    worker's gangkeeper), stopped and removed on leaving."""

    def kueue_and_check(plane: ControlPlane) -> None:
        operators.kueue().install(plane)
        plane.apply(gang_fits_check())

    with (
        worker(workdir / "worker1", WORKER_ADDRESSES[0], kubernetes_version, kueue_and_check) as one,
        worker(workdir / "worker2", WORKER_ADDRESSES[1], kubernetes_version, kueue_and_check) as two,
    ):
        workers = {"worker1": one, "worker2": two}
        for member in workers.values():
            wait_until(lambda m=member: check_active(m), "each worker's gangkeeper marked its check Active", 150)
        yield workers


def dispatch_to(manager: ControlPlane, workers: dict[str, Stack]) -> None:
    """The manager (its Kueue installed with MANAGER_KUEUE) told of the workers, once it reaches each."""
    manager.apply(multikueue_objects({name: s.plane for name, s in workers.items()}))
    wait_until(
        lambda: all(condition_true(manager.get("multikueuecluster", name) or {}, "Active") for name in workers),
        "the manager's MultiKueueClusters Active (the workers reachable)",
        120,
    )
