"""gangkeeper on the real control plane, deployed as a user deploys it.

`kubectl apply -k` of an overlay; the real ReplicaSet controller makes gangkeeper's pods and the real
scheduler binds them to the system node, whose kubelet (tests/realcluster/kubelet.py) runs them; the
API server calls the webhook through the manifests' Service, at the endpoints the EndpointSlice
controller lists for it. The system node is cordoned once gangkeeper runs there, so workloads only
land on KWOK's fake nodes, which each test makes afresh.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.realcluster.controlplane import ControlPlane
from tests.realcluster.kubelet import SYSTEM_NODES, SystemNode
from tests.realcluster.partial import PartialWatch, pods_lister
from webhook.contract import PLACEHOLDER_LABEL

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
FAKE = {"kwok.x-k8s.io/node": "fake"}


def wait_until(
    check: Callable[[], Any],
    what: str,
    timeout: float = 60,
    every: float = 0.3,
    explain: Callable[[], str] | None = None,
) -> Any:
    """`check()` once it is truthy; on timeout an AssertionError naming `what`, with `explain()` (what
    the cluster shows then) when given."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
        except Exception as error:  # the cluster answers errors while it settles; keep asking
            last, value = error, None
        if value:
            return value
        time.sleep(every)
    shown = f"\n{explain()}" if explain is not None else ""
    raise AssertionError(
        f"timed out after {timeout:.0f}s waiting for {what}" + (f" (last error: {last})" if last else "") + shown
    )


@dataclass
class Stack:
    plane: ControlPlane
    overlay: str | None = "gate"  # None: gangkeeper not deployed (the chart's tests install it)
    system: list[SystemNode] = field(default_factory=list)
    workers: list[str] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    generation: int = 0
    watch: PartialWatch | None = None  # no gate gang partly bound for long (tests/conftest.py asserts it)
    image: Path | None = None  # an unpacked gangkeeper image: its pods run from it under runc (test_real_image.py)

    @contextlib.contextmanager
    def running(self) -> Iterator[Stack]:
        with self.plane, contextlib.ExitStack() as nodes:
            self.system = [nodes.enter_context(SystemNode(self.plane, name, self.image)) for name in SYSTEM_NODES]
            self.watch = PartialWatch(pods_lister(self.plane.get))
            self.watch.start()
            try:
                if self.overlay:
                    self.deploy()
                yield self
            except (KeyboardInterrupt, SystemExit):  # asked to stop (Ctrl-C, SIGTERM): nothing to diagnose
                raise
            except BaseException:
                print(self.diagnostics())
                raise
            finally:
                self.watch.stop()

    def deploy(self) -> None:
        self.plane.kubectl("apply", "-k", str(MANIFESTS / "overlays" / str(self.overlay)))
        for deployment in ("gangkeeper-webhook", "gangkeeper-controller"):
            self.plane.kubectl(
                "-n",
                "gangkeeper-system",
                "rollout",
                "status",
                f"deployment/{deployment}",
                "--timeout=180s",
                timeout=200,
            )
        # the webhook injected its CA into the configuration, and its Service has ready endpoints
        wait_until(
            lambda: self.plane.get("mutatingwebhookconfiguration", "gangkeeper")["webhooks"][0]["clientConfig"].get(
                "caBundle"
            ),
            "the webhook's CA bundle",
            60,
        )
        wait_until(self.webhook_endpoints, "ready endpoints of the gangkeeper-webhook Service", 60)
        self.cordon_system(True)

    def restart(self, *components: str) -> None:
        """gangkeeper's pods of these components (`webhook`, `controller`) started afresh, as a changed
        configuration does (the chart's checksum annotation): they read their ConfigMap and the system
        nodes' API routes again. Only the system nodes may take them: the fake nodes go first."""
        self.replace_workers(0)
        holder = self._lease_holder()
        self.cordon_system(False)
        try:
            for component in components:
                selector = f"app.kubernetes.io/component={component}"
                self.plane.kubectl("-n", "gangkeeper-system", "delete", "pod", "-l", selector, timeout=90)
            for component in components:
                self.plane.kubectl(
                    "-n",
                    "gangkeeper-system",
                    "rollout",
                    "status",
                    f"deployment/gangkeeper-{component}",
                    "--timeout=120s",
                    timeout=130,
                )
        finally:
            self.cordon_system(True)
        if "webhook" in components:
            wait_until(self.webhook_endpoints, "ready endpoints of the gangkeeper-webhook Service", 60)
        if "controller" in components:
            wait_until(lambda: self._lease_holder() not in ("", holder), "a new controller holding the Lease", 90)

    def _lease_holder(self) -> str:
        lease = self.plane.get("lease", "gangkeeper-controller", namespace="gangkeeper-system") or {}
        return str((lease.get("spec") or {}).get("holderIdentity") or "")

    def cordon_system(self, cordoned: bool) -> None:
        """The system nodes run gangkeeper only: cordoned, so workloads land on KWOK's nodes."""
        self.plane.kubectl("cordon" if cordoned else "uncordon", *SYSTEM_NODES)

    def webhook_endpoints(self) -> list[str]:
        slices = self.plane.get(
            "endpointslices", namespace="gangkeeper-system", selector="kubernetes.io/service-name=gangkeeper-webhook"
        )
        return [
            a
            for s in slices
            for e in s.get("endpoints") or []
            if (e.get("conditions") or {}).get("ready")
            for a in e["addresses"]
        ]

    # --- fake nodes -----------------------------------------------------------------------------
    def replace_workers(
        self,
        count: int,
        cpu: str = "8",
        memory: str = "32Gi",
        gpus: int = 0,
        prefix: str = "worker",
        labels: Callable[[int], dict[str, str]] = lambda index: {},
    ) -> list[str]:
        """A clean slate for one test: the last tests' namespaces and fake nodes deleted (PodGC removes
        pods left on deleted nodes), and `count` new Ready nodes under names never used before."""
        for namespace in self.namespaces:
            self.plane.kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=false")
        self.namespaces.clear()
        for name in self.workers:
            self.plane.kubectl("delete", "node", name, "--ignore-not-found", "--wait=false")
        self.generation += 1
        self.workers = [f"{prefix}{self.generation}-{i}" for i in range(1, count + 1)]
        capacity = {"cpu": cpu, "memory": memory, "pods": "110", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
        nodes = [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": n,
                    "annotations": dict(FAKE),
                    "labels": {"kubernetes.io/hostname": n, "kubernetes.io/os": "linux", "type": "kwok", **labels(i)},
                },
                "status": {"capacity": capacity, "allocatable": capacity},
            }
            for i, n in enumerate(self.workers)
        ]
        wait_until(lambda: not any(self.plane.get("node", n) for n in self.workers), "old nodes to go", 60)
        if nodes:
            self.plane.apply(nodes)
        wait_until(lambda: all(_ready(self.plane.get("node", n)) for n in self.workers), "fake nodes Ready", 60)
        return self.workers

    def add_worker_like(self, model: str, cpu: str | None = None) -> str:
        """One more Ready fake node, a copy of `model` (its labels and size, `cpu` CPUs if given): a node
        added to a running cluster."""
        node = self.plane.get("node", model)
        extra = f"{model}-more"
        capacity = {**node["status"]["capacity"], **({"cpu": cpu} if cpu else {})}
        self.plane.apply(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": extra,
                    "annotations": node["metadata"]["annotations"],
                    "labels": {**node["metadata"]["labels"], "kubernetes.io/hostname": extra},
                },
                "status": {"capacity": capacity, "allocatable": capacity},
            }
        )
        self.workers.append(extra)
        return extra

    def namespace(
        self,
        name: str,
        backend: str | None,
        opted_in: bool = True,
        more_labels: dict[str, str] | None = None,
        settle: float = 60,
    ) -> str:
        """A namespace made anew, once kube-controller-manager has given it its default ServiceAccount
        (pods are refused without it). `settle`: how long that may take (after an API server came back,
        the controller manager's informers find it again only after their backoff)."""
        labels = ({"gangkeeper.io/enabled": "true"} if opted_in else {}) | (more_labels or {})
        if backend:
            labels["gangkeeper.io/backend"] = backend
        self.plane.kubectl("delete", "namespace", name, "--ignore-not-found", "--timeout=120s", timeout=130)
        self.namespaces.append(name)
        self.plane.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
        wait_until(lambda: self.plane.get("serviceaccount", "default", namespace=name), "the namespace's SA", settle)
        return name

    def pods(self, namespace: str, selector: str | None = None) -> list[dict[str, Any]]:
        """The namespace's pods that a user made (its workloads'); gangkeeper's own pause pods (placeholders,
        claim holders: the label gangkeeper.io/placeholder-for) only when `selector` asks for them. A test
        that read every pod of the namespace once read a claim holder as a fifth, unbound gang member."""
        return list(self.plane.get("pods", namespace=namespace, selector=selector or f"!{PLACEHOLDER_LABEL}"))

    def describe(self, namespace: str) -> str:
        """What a user would look at: the namespace's pods and events, the gang controller's log."""
        shown = self.plane.kubectl("get", "pods,jobs,events", "-n", namespace, "-o", "wide", check=False).stdout
        controller = "\n".join(
            s.logs()[-3000:] for node in self.system for s in node.sandboxes.values() if "controller" in s.name
        )
        return f"{shown}\n--- gangkeeper controller\n{controller}"

    def diagnostics(self) -> str:
        parts = [self.plane.kubectl("get", "pods,nodes,events", "-A", "-o", "wide", check=False).stdout]
        parts += [node.logs() for node in self.system]
        for process in self.plane.processes:
            parts.append(f"--- {process.name}\n{process.tail(15)}")
        return "\n".join(parts)


def _ready(node: dict[str, Any] | None) -> bool:
    return bool(node) and any(
        c["type"] == "Ready" and c["status"] == "True" for c in (node or {}).get("status", {}).get("conditions", [])
    )


def running(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if p["status"].get("phase") == "Running"]


def bound(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if p["spec"].get("nodeName")]


def gated(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if p["spec"].get("schedulingGates")]
