"""More clusters beside the session's, for Kueue's MultiKueue: each worker a control plane of its own
(etcd, kube-apiserver, the controllers, KWOK) at an address of its own, gangkeeper deployed on it as on
the first; the manager reaches each through a kubeconfig in a Secret, its certificates inline as Kueue
requires (kueue pkg/controller/admissionchecks/multikueue/multikueuecluster.go validateKubeconfig)."""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from tests.realcluster.controlplane import ControlPlane
from tests.realcluster.stack import Stack

WORKER_ADDRESSES = ("10.253.0.2", "10.253.0.3")
KUEUE_NAMESPACE = "kueue-system"


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
def worker(workdir: Path, address: str, kubernetes_version: str) -> Iterator[Stack]:
    """A worker cluster with gangkeeper deployed (the gate overlay, as the first cluster's)."""
    plane = ControlPlane(workdir, kubernetes_version=kubernetes_version, advertise_address=address)
    with Stack(plane, overlay="gate").running() as stack:
        yield stack
