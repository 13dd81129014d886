"""The real operators gangkeeper must live beside, each run as a process from its own build
(hack/cluster/build.sh) and installed from its own upstream kustomization in the Go module cache:
CRDs, RBAC, webhook configurations and Service exactly as released. What a pod would give it is given
as a process: its configuration file (the released one, with ports of its own here, leader election
off), the admin kubeconfig in place of its token, and its Service's endpoint, an EndpointSlice naming
the host address the API server advertises (the API server calls the webhook through that Service).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.realcluster.controlplane import ControlPlane, Process, binary, built, free_port, versions
from tests.realcluster.stack import wait_until


def module_dir(module: str, version: str) -> Path:
    """The module's source, downloaded by the build into the Go module cache."""
    found = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "GOFLAGS": "-mod=mod"},
    )
    return Path(json.loads(found.stdout)["Dir"])


@dataclass
class Operator:
    name: str  # lws, jobset, training-operator, kuberay
    module: str
    version: str
    namespace: str
    executable: str
    # configured by a Configuration file of this API group (LWS, JobSet), or by `flags` when None
    api_group: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    # flags given the webhook and health ports: (port, health) -> argv tail
    flags: Callable[[int, int], list[str]] | None = None
    kustomization: str = "config/default"
    secret: str | None = None  # the Secret its cert controller writes; default <name>-webhook-server-cert
    # where its cert controller expects the Secret mounted, when it does not follow its configuration
    # a fixed directory is shared with another operator's (JobSet's and training-operator's are the same
    # path) and with the same operator of the other xdist worker's cluster (two JobSets overwriting one
    # another's certificates: "x509: certificate signed by unknown authority"): the process then runs in a
    # mount namespace of its own, a pod's private filesystem, its own directory seen at that path
    fixed_cert_dir: Path | None = None
    config_version: str = "v1alpha1"  # its Configuration's API version
    # kinds of its kustomization not installed: an APIService would point the API server's discovery
    # at a server this process does not run (Kueue's visibility API)
    skip_kinds: frozenset[str] = frozenset()
    extra_flags: tuple[str, ...] = ()  # beside its Configuration file
    process: Process | None = None

    def install(self, plane: ControlPlane) -> Operator:
        source = module_dir(self.module, f"v{self.version}")
        rendered = plane.kubectl("kustomize", str(source / self.kustomization)).stdout
        objects = [o for o in yaml.safe_load_all(rendered) if o]
        plane.apply([o for o in objects if o["kind"] != "Deployment" and o["kind"] not in self.skip_kinds])
        port, health = free_port(), free_port()
        workdir = plane.workdir / self.name
        workdir.mkdir(exist_ok=True)
        cert_dir = workdir / "certs"
        configurations = [o for o in objects if o["kind"].endswith("WebhookConfiguration")]
        if configurations:
            self._serve_webhooks(plane, objects, configurations, port, cert_dir)
        argv = [
            "env",
            f"KUBECONFIG={plane.kubeconfig}",
            f"MY_POD_NAMESPACE={self.namespace}",
            str(binary(self.name, self.version, self.executable)),
            *self._arguments(workdir, port, health, cert_dir),
        ]
        if self.fixed_cert_dir:
            argv = private_mount(self.fixed_cert_dir, cert_dir, argv)
        # Its cert controller (open-policy-agent/cert-controller) can lose a write race on the Secret at
        # start and then wait for good; the pod's restart is what brings it back, so it is restarted here.
        for attempt in range(3):
            self.process = plane.spawn(f"{self.name}-{attempt}", argv)
            try:
                # ready: its CA in its webhook configurations and its webhook server listening, as the
                # readiness probe of its Deployment waits for
                for configuration in configurations:
                    kind, name = configuration["kind"].lower(), configuration["metadata"]["name"]
                    wait_until(
                        lambda k=kind, n=name: all(
                            w["clientConfig"].get("caBundle") for w in plane.get(k, n)["webhooks"]
                        ),
                        f"{self.name}'s CA in {name}",
                        60,
                    )
                wait_until(lambda: _ok(f"http://127.0.0.1:{health}/readyz"), f"{self.name} ready", 60)
                break
            except AssertionError:
                if attempt == 2:
                    raise
                self.process.stop()
                plane.processes.remove(self.process)
        return self

    def uninstall(self, plane: ControlPlane) -> None:
        """Stop it and take its webhooks out of the admission chain (its CRDs and their objects stay)."""
        for process in [p for p in plane.processes if p.name.rsplit("-", 1)[0] == self.name]:
            process.stop()
            plane.processes.remove(process)
        source = module_dir(self.module, f"v{self.version}")
        rendered = plane.kubectl("kustomize", str(source / self.kustomization)).stdout
        for o in yaml.safe_load_all(rendered):
            if o and o["kind"].endswith("WebhookConfiguration"):
                plane.kubectl("delete", o["kind"].lower(), o["metadata"]["name"], "--ignore-not-found")

    def _arguments(self, workdir: Path, port: int, health: int, cert_dir: Path) -> list[str]:
        if self.flags is not None:
            return self.flags(port, health)
        configuration = {
            "apiVersion": f"{self.api_group}/{self.config_version}",
            "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": True},
            "webhook": {"port": port, "certDir": str(cert_dir)},
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
            **self.settings,
        }
        config_file = workdir / "config.yaml"
        config_file.write_text(yaml.safe_dump(configuration))
        return [f"--config={config_file}", *self.extra_flags]

    def _serve_webhooks(
        self,
        plane: ControlPlane,
        objects: list[dict[str, Any]],
        configurations: list[dict[str, Any]],
        port: int,
        cert_dir: Path,
    ) -> None:
        """Its webhook Service's endpoint is this process: an EndpointSlice naming the host address."""
        (service_name,) = {w["clientConfig"]["service"]["name"] for c in configurations for w in c["webhooks"]}
        service = next(o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == service_name)
        service["spec"].pop("selector", None)  # its endpoint is the process, not a pod
        plane.apply(service)
        plane.apply(
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": service_name,
                    "namespace": service["metadata"]["namespace"],
                    "labels": {
                        "kubernetes.io/service-name": service_name,
                        "endpointslice.kubernetes.io/managed-by": "gangkeeper-tests",
                    },
                },
                "addressType": "IPv4",
                "endpoints": [{"addresses": [plane.advertise_address], "conditions": {"ready": True}}],
                "ports": [
                    {"name": p.get("name", ""), "port": port, "protocol": "TCP"} for p in service["spec"]["ports"]
                ],
            }
        )
        secret = self.secret or f"{self.name}-webhook-server-cert"  # the released configuration's default
        threading.Thread(target=self._mount_secret, args=(plane, secret, cert_dir), daemon=True).start()

    def _mount_secret(self, plane: ControlPlane, secret: str, directory: Path) -> None:
        """The kubelet's secret volume: the Secret its cert controller writes, kept in its cert dir."""
        directory.mkdir(parents=True, exist_ok=True)
        while self.process is None or self.process.alive():
            with contextlib.suppress(Exception):
                found = plane.get("secret", secret, namespace=self.namespace)
                for key, value in ((found or {}).get("data") or {}).items():
                    data = base64.b64decode(value)
                    target = directory / key
                    if not target.exists() or target.read_bytes() != data:
                        target.write_bytes(data)
            time.sleep(1)

    def missing(self) -> str | None:
        exe = binary(self.name, self.version, self.executable)
        return None if built(exe) else f"not built: {exe} (run hack/cluster/build.sh {self.name})"


def _ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as answer:
        return int(answer.status) == 200


def private_mount(target: Path, source: Path, argv: list[str]) -> list[str]:
    """argv run in a mount namespace of its own where `source` is seen at `target` (we are root)."""
    script = 'mkdir -p "$1" && mount --bind "$2" "$1" && shift 2 && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", str(target), str(source), *argv]


def replace_running(plane: ControlPlane, operator: Operator) -> Operator:
    """Stop the running processes of the operator's name and install it afresh with its settings."""
    for process in [p for p in plane.processes if p.name.rsplit("-", 1)[0] == operator.name]:
        process.stop()
        plane.processes.remove(process)
    return operator.install(plane)


def lws(gang_provider: str | None = None) -> Operator:
    settings = {"gangSchedulingManagement": {"schedulerProvider": gang_provider}} if gang_provider else {}
    return Operator(
        "lws",
        "sigs.k8s.io/lws",
        versions()["LWS_VERSION"],
        "lws-system",
        "lws-manager",
        api_group="config.lws.x-k8s.io",
        settings=settings,
    )


def jobset() -> Operator:
    # jobset pkg/util/cert/cert.go: the cert controller's directory is a constant
    return Operator(
        "jobset",
        "sigs.k8s.io/jobset",
        versions()["JOBSET_VERSION"],
        "jobset-system",
        "jobset",
        api_group="config.jobset.x-k8s.io",
        fixed_cert_dir=Path("/tmp/k8s-webhook-server/serving-certs"),
    )


def training_operator(gang_scheduler: str = "volcano") -> Operator:
    """Kubeflow training-operator v1 with `--gang-scheduler-name`: it creates each job's PodGroup, named
    after the job and controlled by it, and holds the pods until Volcano has taken the group in; each pod
    names it (training-operator pkg/controller.v1/control/podgroup_control.go, common/pod.go)."""
    return Operator(
        "training-operator",
        "github.com/kubeflow/training-operator",
        versions()["TRAINING_OPERATOR_VERSION"],
        "kubeflow",
        "training-operator",
        flags=lambda port, health: [
            f"--gang-scheduler-name={gang_scheduler}",
            f"--webhook-server-port={port}",
            f"--health-probe-bind-address=127.0.0.1:{health}",
            "--metrics-bind-address=0",
        ],
        kustomization="manifests/overlays/standalone",
        secret="training-operator-webhook-cert",
        # pkg/cert/cert.go: a constant, the same as JobSet's
        fixed_cert_dir=Path("/tmp/k8s-webhook-server/serving-certs"),
    )


def kuberay(batch_scheduler: str | None = "volcano", feature_gates: str = "") -> Operator:
    """KubeRay's operator with `--batch-scheduler`: with Volcano it makes a PodGroup `ray-<cluster>-pg`
    for every RayCluster, controlled by it, and annotates each pod with it (kuberay ray-operator
    controllers/ray/batchscheduler/volcano/volcano_scheduler.go); None: no batch scheduler, its pods left
    to kube-scheduler (and gangkeeper). `feature_gates`: its `--feature-gates` (main.go), such as
    RayMultiHostIndexing=true (alpha and off in 1.5: a multi-host replica's pods then carry its name,
    ray.io/worker-group-replica-name). Its webhook is off by default."""
    return Operator(
        "kuberay",
        "github.com/ray-project/kuberay/ray-operator",
        versions()["KUBERAY_VERSION"],
        "default",
        "ray-operator",
        flags=lambda _port, health: [
            *([f"--batch-scheduler={batch_scheduler}"] if batch_scheduler else []),
            *([f"--feature-gates={feature_gates}"] if feature_gates else []),
            f"--health-probe-bind-address=127.0.0.1:{health}",
            "--metrics-addr=0",
            "--enable-leader-election=false",
        ],
        kustomization="config/crd",
    )


def kueue(devices: dict[str, list[str]] | None = None, more: dict[str, Any] | None = None) -> Operator:
    """Kueue, admitting batch/v1 Jobs by quota (its job webhook suspends each Job with a queue name until
    its Workload is admitted, then its controller resumes it: kueue pkg/controller/jobs/job). `devices`:
    its DRA quota (alpha gate DynamicResourceAllocation since v0.14), a quota resource name to the
    DeviceClasses it counts (Configuration resources.deviceClassMappings, apis/config/v1beta2). `more`:
    other fields of its Configuration (multiKueue, waitForPodsReady)."""
    settings: dict[str, Any] = {"integrations": {"frameworks": ["batch/job"]}, "manageJobsWithoutQueueName": False}
    settings |= more or {}
    gates = "VisibilityOnDemand=false"
    if devices:
        settings["resources"] = {
            "deviceClassMappings": [{"name": name, "deviceClassNames": classes} for name, classes in devices.items()]
        }
        gates += ",DynamicResourceAllocation=true"
    return Operator(
        "kueue",
        "sigs.k8s.io/kueue",
        versions()["KUEUE_VERSION"],
        "kueue-system",
        "kueue",
        api_group="config.kueue.x-k8s.io",
        config_version="v1beta2",
        settings=settings,
        skip_kinds=frozenset({"APIService"}),
        # its visibility API server needs in-cluster credentials a process here does not have (kueue
        # cmd/kueue/main.go); the queue visibility API is not what these tests read
        extra_flags=(f"--feature-gates={gates}",),
    )
