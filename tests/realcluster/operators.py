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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.realcluster.controlplane import ControlPlane, Process, binary, free_port, versions
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
    name: str  # lws, jobset
    module: str
    version: str
    api_group: str  # of its Configuration
    namespace: str
    executable: str
    settings: dict[str, Any] = field(default_factory=dict)
    # where its cert controller expects the Secret mounted, when it does not follow its configuration
    fixed_cert_dir: Path | None = None
    process: Process | None = None

    def install(self, plane: ControlPlane) -> Operator:
        source = module_dir(self.module, f"v{self.version}")
        rendered = plane.kubectl("kustomize", str(source / "config" / "default")).stdout
        objects = [o for o in yaml.safe_load_all(rendered) if o]
        service = next(o for o in objects if o["kind"] == "Service" and "webhook" in o["metadata"]["name"])
        kept = [o for o in objects if o["kind"] != "Deployment"]
        service["spec"].pop("selector", None)  # its endpoint is the process below, not a pod
        plane.apply(kept)
        port, health = free_port(), free_port()
        workdir = plane.workdir / self.name
        workdir.mkdir(exist_ok=True)
        cert_dir = self.fixed_cert_dir or workdir / "certs"
        configuration = {
            "apiVersion": f"{self.api_group}/v1alpha1",
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
        plane.apply(
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": service["metadata"]["name"],
                    "namespace": service["metadata"]["namespace"],
                    "labels": {
                        "kubernetes.io/service-name": service["metadata"]["name"],
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
        secret = f"{self.name}-webhook-server-cert"  # the released configuration's default
        threading.Thread(target=self._mount_secret, args=(plane, secret, cert_dir), daemon=True).start()
        exe = binary(self.name, self.version, self.executable)
        names = [
            (o["kind"].lower(), o["metadata"]["name"]) for o in objects if o["kind"].endswith("WebhookConfiguration")
        ]
        assert names, f"{self.name} has no webhook configuration"
        # Its cert controller (open-policy-agent/cert-controller) can lose a write race on the Secret at
        # start and then wait for good; the pod's restart is what brings it back, so it is restarted here.
        for attempt in range(3):
            self.process = plane.spawn(
                f"{self.name}-{attempt}", [str(exe), f"--config={config_file}", f"--kubeconfig={plane.kubeconfig}"]
            )
            try:
                # ready: its CA in its webhook configurations and its webhook server listening, as the
                # readiness probe of its Deployment waits for
                for kind, name in names:
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
        return None if exe.exists() else f"not built: {exe} (run hack/cluster/build.sh {self.name})"


def _ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as answer:
        return int(answer.status) == 200


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
        "config.lws.x-k8s.io",
        "lws-system",
        "lws-manager",
        settings,
    )


def jobset() -> Operator:
    # jobset pkg/util/cert/cert.go: the cert controller's directory is a constant
    return Operator(
        "jobset",
        "sigs.k8s.io/jobset",
        versions()["JOBSET_VERSION"],
        "config.jobset.x-k8s.io",
        "jobset-system",
        "jobset",
        fixed_cert_dir=Path("/tmp/k8s-webhook-server/serving-certs"),
    )
