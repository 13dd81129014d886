"""Volcano's scheduler and controller manager, built from volcano.sh/volcano (hack/cluster/build.sh
volcano) and run as processes beside the control plane, with the CRDs and the scheduler
configuration of the same release (installer/helm/chart/volcano in its module): the scheduler creates
the `default` queue itself (pkg/scheduler/cache/cache.go, newDefaultQueue) and moves PodGroups
Pending -> Inqueue -> Running; the controller manager keeps queue and PodGroup status. Its admission
webhook-manager runs too, behind the webhook configurations its chart renders (templates/webhooks.yaml,
every admission the chart enables by default, failurePolicy Fail) and called through the chart's
Service: among them `/pods/validate`, which refuses a pod naming a PodGroup that does not exist yet, or
one in a queue that is not Open (pkg/webhooks/admission/pods/validate/admit_pod.go)."""

from __future__ import annotations

import ssl
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from tests.realcluster import pki
from tests.realcluster.controlplane import ControlPlane, Process, binary, built, free_port, versions
from tests.realcluster.operators import module_dir
from tests.realcluster.stack import wait_until

SCHEDULER_NAME = "volcano"
# a second name, as a cluster with several Volcano profiles runs (every component takes --scheduler-name
# more than once: volcano cmd/*/app/options/options.go); gangkeeper may be configured with either
OTHER_SCHEDULER_NAME = "volcano-gpu"
NAMES = [f"--scheduler-name={n}" for n in (SCHEDULER_NAME, OTHER_SCHEDULER_NAME)]
NAMESPACE = "volcano-system"
ADMISSION_SERVICE = "volcano-admission-service"  # {{ .Release.Name }}-admission-service, release `volcano`


def executable(name: str) -> Path:
    return binary("volcano", versions()["VOLCANO_VERSION"], f"vc-{name}")


def missing() -> str | None:
    for name in ("scheduler", "controller-manager", "webhook-manager"):
        if not built(executable(name)):
            return f"not built: {executable(name)} (run hack/cluster/build.sh volcano)"
    return None


def start(plane: ControlPlane) -> list[Process]:
    chart = module_dir("volcano.sh/volcano", f"v{versions()['VOLCANO_VERSION']}") / "installer/helm/chart/volcano"
    # the jobflow subchart's CRDs too: the controller manager's queue controller waits for every informer
    # of its shared factory, JobFlow's among them, so without them it never opens the default queue (and
    # Volcano's pod admission then refuses every pod: "queue `default` status is ``")
    crds = [*(chart / "crd" / "bases").glob("*.yaml"), *(chart / "charts" / "jobflow" / "crd" / "bases").glob("*.yaml")]
    for crd in sorted(crds):
        plane.kubectl("apply", "--server-side", "-f", str(crd))
    wait_until(
        lambda: plane.kubectl("get", "queues.scheduling.volcano.sh", check=False).returncode == 0,
        "the Volcano CRDs served",
        60,
    )
    common = [f"--kubeconfig={plane.kubeconfig}", "--leader-elect=false", "--logtostderr", "--v=2"]
    controller_health = free_port()
    controllers = plane.spawn(
        "vc-controller-manager",
        [
            str(executable("controller-manager")),
            *common,
            *NAMES,
            "--enable-healthz=true",
            f"--healthz-address=127.0.0.1:{controller_health}",
        ],
    )
    scheduler_health, metrics = free_port(), free_port()
    scheduler = plane.spawn(
        "vc-scheduler",
        [
            str(executable("scheduler")),
            *common,
            *NAMES,
            f"--scheduler-conf={chart / 'config' / 'volcano-scheduler.conf'}",
            "--enable-healthz=true",
            f"--healthz-address=127.0.0.1:{scheduler_health}",
            f"--listen-address=127.0.0.1:{metrics}",
            "--schedule-period=500ms",
        ],
    )
    wait_until(lambda: _healthy(scheduler_health), "the Volcano scheduler healthy", 60)
    wait_until(lambda: _healthy(controller_health), "the Volcano controller manager healthy", 60)
    wait_until(
        lambda: (plane.get("queue.scheduling.volcano.sh", "default") or {}).get("status", {}).get("state") == "Open",
        "the default queue Open",
        90,
    )
    return [scheduler, controllers, start_admission(plane, chart)]


def start_admission(plane: ControlPlane, chart: Path) -> Process:
    """The webhook-manager as the chart deploys it (its args in templates/admission.yaml), its webhook
    configurations rendered from the chart, its Service's endpoint this host's advertised address."""
    helm = binary("helm", versions()["HELM_VERSION"], "helm")
    rendered = subprocess.run(
        [str(helm), "template", "volcano", str(chart), "-n", NAMESPACE, "--show-only", "templates/webhooks.yaml"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    configurations = [o for o in yaml.safe_load_all(rendered) if o]
    port, health = free_port(), free_port()
    plane.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    plane.apply(_service_and_endpoint(plane, port))
    ca, cert, key = pki.serving(
        plane.workdir / "volcano-admission",
        [f"{ADMISSION_SERVICE}.{NAMESPACE}.svc", f"{ADMISSION_SERVICE}.{NAMESPACE}.svc.cluster.local"],
    )
    plane.apply(configurations)
    process = plane.spawn(
        "vc-webhook-manager",
        [
            str(executable("webhook-manager")),
            f"--kubeconfig={plane.kubeconfig}",
            f"--tls-cert-file={cert}",
            f"--tls-private-key-file={key}",
            f"--ca-cert-file={ca}",
            f"--port={port}",
            f"--webhook-namespace={NAMESPACE}",
            f"--webhook-service-name={ADMISSION_SERVICE}",
            *NAMES,
            "--enable-healthz=true",
            f"--healthz-address=127.0.0.1:{health}",
            "--logtostderr",
            "--v=2",
        ],
    )
    for configuration in configurations:  # ready: its CA written into every configuration it serves
        kind, name = configuration["kind"].lower(), configuration["metadata"]["name"]
        wait_until(
            lambda k=kind, n=name: all(w["clientConfig"].get("caBundle") for w in plane.get(k, n)["webhooks"]),
            f"Volcano's CA in {name}",
            60,
        )
    # its health server speaks TLS with the webhook's certificate (volcano.sh/apis helpers.StartHealthz)
    tls = ssl.create_default_context(cafile=str(ca))
    tls.check_hostname = False  # asked at 127.0.0.1; the certificate names the Service
    wait_until(lambda: _healthy(health, tls), "the Volcano webhook-manager healthy", 60)
    return process


POD_VALIDATION = "volcano-admission-service-pods-validate"


def without_pod_validation(plane: ControlPlane) -> dict[str, Any]:
    """Volcano's pod validation taken out, returned to be put back: LWS's own Volcano provider creates a
    group's PodGroup from its leader pod (lws pkg/controllers/pod_controller.go), which this validation
    refuses while that PodGroup does not exist, so the two cannot run together (upstream, whatever
    gangkeeper does)."""
    saved = plane.get("validatingwebhookconfiguration", POD_VALIDATION)
    plane.kubectl("delete", "validatingwebhookconfiguration", POD_VALIDATION)
    meta = saved["metadata"]
    saved["metadata"] = {k: meta[k] for k in ("name", "labels") if k in meta}
    return dict(saved)


def stop(plane: ControlPlane, processes: list[Process]) -> None:
    """Volcano gone as `helm uninstall` leaves it: its webhook configurations first (failurePolicy Fail:
    left behind with no server they would refuse every pod), then its processes."""
    for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        names = [o["metadata"]["name"] for o in plane.get(kind) if o["metadata"]["name"].startswith("volcano-")]
        if names:
            plane.kubectl("delete", kind, *names, "--ignore-not-found")
    for process in processes:
        process.stop()


def _service_and_endpoint(plane: ControlPlane, port: int) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": ADMISSION_SERVICE, "namespace": NAMESPACE},
            "spec": {"ports": [{"port": 443, "targetPort": port, "protocol": "TCP"}]},
        },
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": ADMISSION_SERVICE,
                "namespace": NAMESPACE,
                "labels": {
                    "kubernetes.io/service-name": ADMISSION_SERVICE,
                    "endpointslice.kubernetes.io/managed-by": "gangkeeper-tests",
                },
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [plane.advertise_address], "conditions": {"ready": True}}],
            "ports": [{"name": "", "port": port, "protocol": "TCP"}],
        },
    ]


def _healthy(port: int, tls: ssl.SSLContext | None = None) -> bool:
    scheme = "https" if tls else "http"
    with urllib.request.urlopen(f"{scheme}://127.0.0.1:{port}/healthz", timeout=2, context=tls) as answer:
        return int(answer.status) == 200
