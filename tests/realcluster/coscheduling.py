"""scheduler-plugins' Coscheduling, built from sigs.k8s.io/scheduler-plugins and run as a second
scheduler named `scheduler-plugins-scheduler` (its documented second-scheduler install), with its
PodGroup CRD from the same release (manifests/coscheduling/crd.yaml in its module)."""

from __future__ import annotations

import ssl
import urllib.request
from pathlib import Path

import yaml

from tests.realcluster.controlplane import ControlPlane, Process, binary, built, free_port, versions
from tests.realcluster.operators import module_dir
from tests.realcluster.stack import wait_until

SCHEDULER_NAME = "scheduler-plugins-scheduler"


def executable() -> Path:
    return binary("scheduler-plugins", versions()["SCHEDULER_PLUGINS_VERSION"], "scheduler")


def missing() -> str | None:
    exe = executable()
    return None if built(exe) else f"not built: {exe} (run hack/cluster/build.sh scheduler-plugins)"


def start(
    plane: ControlPlane, permit_wait_seconds: int = 30, scheduler_name: str = SCHEDULER_NAME, process_name: str = ""
) -> Process:
    """The plugin's scheduler under `scheduler_name`: a second scheduler (its documented install), or
    `default-scheduler` in place of kube-scheduler (its production install: Coscheduling in the default
    scheduler's profile)."""
    version = versions()["SCHEDULER_PLUGINS_VERSION"]
    source = module_dir("sigs.k8s.io/scheduler-plugins", f"v{version}")
    plane.kubectl("apply", "--server-side", "-f", str(source / "manifests" / "coscheduling" / "crd.yaml"))
    wait_until(
        lambda: plane.kubectl("get", "podgroups.scheduling.x-k8s.io", "-A", check=False).returncode == 0,
        "the coscheduling PodGroup CRD served",
        60,
    )
    config = plane.workdir / f"coscheduling-{scheduler_name}.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                "leaderElection": {"leaderElect": False},
                # the plane's client QPS when it sets one (bench/cluster.py), as kube-scheduler's flags
                "clientConnection": {
                    "kubeconfig": str(plane.kubeconfig),
                    **({"qps": plane.client_qps, "burst": 2 * plane.client_qps} if plane.client_qps else {}),
                },
                "profiles": [
                    {
                        "schedulerName": scheduler_name,
                        # as its manifests/coscheduling/scheduler-config.yaml: its queue sort replaces the default one
                        "plugins": {
                            "multiPoint": {"enabled": [{"name": "Coscheduling"}]},
                            "queueSort": {"enabled": [{"name": "Coscheduling"}], "disabled": [{"name": "*"}]},
                        },
                        "pluginConfig": [
                            {"name": "Coscheduling", "args": {"permitWaitingTimeSeconds": permit_wait_seconds}}
                        ],
                    }
                ],
            }
        )
    )
    port = free_port()
    process = plane.spawn(
        process_name or f"scheduler-plugins ({scheduler_name})",
        [
            str(executable()),
            f"--config={config}",
            f"--secure-port={port}",
            "--bind-address=127.0.0.1",
            f"--authentication-kubeconfig={plane.kubeconfig}",
            f"--authorization-kubeconfig={plane.kubeconfig}",
            "--v=1",
        ],
    )
    wait_until(lambda: _healthy(port), "the coscheduling scheduler healthy", 60)
    return process


def _healthy(port: int) -> bool:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=context, timeout=2) as answer:
        return int(answer.status) == 200
