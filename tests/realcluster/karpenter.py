"""Karpenter with its KWOK cloud provider, run as a process against the real control plane: it turns
Unschedulable pods into NodeClaims and those into Nodes annotated `kwok.x-k8s.io/node: fake`, which the
tier's KWOK makes Ready like the others (hack/cluster/build.sh karpenter builds it and keeps its CRDs
beside it). Leader election off, as one replica; ports of its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.realcluster.controlplane import ControlPlane, Process, binary, built, free_port, versions
from tests.realcluster.stack import wait_until

NODE_CLASS = {"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass", "metadata": {"name": "default"}}


def node_pool(
    name: str = "default",
    cpu_per_node: int = 4,
    limit_cpu: int = 64,
    consolidate_after: str = "30s",
    policy: str = "WhenEmptyOrUnderutilized",
    disrupt_at_once: str | None = None,
) -> dict[str, Any]:
    """Nodes of one size (KWOK's instance types of `cpu_per_node` CPUs), at most `limit_cpu` CPUs in all.
    `disrupt_at_once` is the budget of nodes Karpenter may take at once (its default is 10%: one node
    at a time for a handful, each after its own consolidation pass)."""
    disruption: dict[str, Any] = {"consolidationPolicy": policy, "consolidateAfter": consolidate_after}
    if disrupt_at_once is not None:
        disruption["budgets"] = [{"nodes": disrupt_at_once}]
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"labels": {"type": "kwok", "gangkeeper.test/pool": name}},
                "spec": {
                    "requirements": [
                        {"key": "karpenter.kwok.sh/instance-cpu", "operator": "In", "values": [str(cpu_per_node)]},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                    ],
                    "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
                    "expireAfter": "Never",
                },
            },
            "limits": {"cpu": str(limit_cpu)},
            "disruption": disruption,
        },
    }


def home() -> Path:
    return binary("karpenter", versions()["KARPENTER_VERSION"], "karpenter").parent


def missing() -> str | None:
    path = binary("karpenter", versions()["KARPENTER_VERSION"], "karpenter")
    if not built(path):
        return f"not built: {path} (run hack/cluster/build.sh karpenter)"
    return None


@dataclass
class Karpenter:
    plane: ControlPlane
    process: Process | None = None
    flags: tuple[str, ...] = ()  # more of its own flags (e.g. --ignore-dra-requests=false)

    def start(self) -> Karpenter:
        for crd in sorted((home() / "crds").glob("*.yaml")):
            self.plane.apply(yaml.safe_load(crd.read_text()))
        for crd in ("nodepools.karpenter.sh", "nodeclaims.karpenter.sh", "kwoknodeclasses.karpenter.kwok.sh"):
            self.plane.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")
        self.plane.apply(NODE_CLASS)
        self.process = self.plane.spawn(
            "karpenter",
            [
                "env",
                f"KUBECONFIG={self.plane.kubeconfig}",
                "SYSTEM_NAMESPACE=kube-system",
                str(binary("karpenter", versions()["KARPENTER_VERSION"], "karpenter")),
                "--disable-leader-election",
                f"--metrics-port={free_port()}",
                f"--health-probe-port={free_port()}",
                "--batch-idle-duration=1s",
                "--batch-max-duration=3s",
                *self.flags,
            ],
        )
        return self

    def nodes(self) -> list[dict[str, Any]]:
        """The nodes Karpenter made (its NodeClaims' nodes), Ready or not."""
        return [n for n in self.plane.get("nodes") if "karpenter.sh/nodepool" in n["metadata"].get("labels", {})]

    def _emptied(self) -> bool:
        """Whether its nodes are gone; the pods still on them deleted now (their NodeClaims are going,
        so no new pod lands there)."""
        nodes = self.nodes()
        for node in nodes:
            selector = f"spec.nodeName={node['metadata']['name']}"
            self.plane.kubectl(
                "delete", "pods", "-A", f"--field-selector={selector}", "--grace-period=0", "--force", "--wait=false"
            )
        return not nodes

    def stop(self) -> None:
        """Its NodePools and NodeClaims deleted while it runs (it drains and removes its nodes), then the
        process stopped. The pods left on its nodes are deleted at once: a gang's members carry
        karpenter.sh/do-not-disrupt, which holds a node's termination until its NodeClaim's grace runs
        out (none is set here), and a teardown that waited on them waited 120 s and left the nodes."""
        with contextlib.suppress(Exception):
            self.plane.kubectl("delete", "nodepools.karpenter.sh", "--all", "--wait=false")
            self.plane.kubectl("delete", "nodeclaims.karpenter.sh", "--all", "--wait=false")
            wait_until(self._emptied, "Karpenter's nodes gone", 120, every=2)
        if self.process is not None:
            self.process.stop()


@contextlib.contextmanager
def running(plane: ControlPlane, *flags: str) -> Iterator[Karpenter]:
    karpenter = Karpenter(plane, flags=flags).start()
    try:
        yield karpenter
    finally:
        karpenter.stop()
