"""Volcano's scheduler and controller manager, built from volcano.sh/volcano (hack/cluster/build.sh
volcano) and run as processes beside the control plane, with the CRDs and the scheduler
configuration of the same release (installer/helm/chart/volcano in its module): the scheduler creates
the `default` queue itself (pkg/scheduler/cache/cache.go, newDefaultQueue) and moves PodGroups
Pending -> Inqueue -> Running; the controller manager keeps queue and PodGroup status."""

from __future__ import annotations

import urllib.request
from pathlib import Path

from tests.realcluster.controlplane import ControlPlane, Process, binary, free_port, versions
from tests.realcluster.operators import module_dir
from tests.realcluster.stack import wait_until

SCHEDULER_NAME = "volcano"


def executable(name: str) -> Path:
    return binary("volcano", versions()["VOLCANO_VERSION"], f"vc-{name}")


def missing() -> str | None:
    for name in ("scheduler", "controller-manager"):
        if not executable(name).exists():
            return f"not built: {executable(name)} (run hack/cluster/build.sh volcano)"
    return None


def start(plane: ControlPlane) -> list[Process]:
    chart = module_dir("volcano.sh/volcano", f"v{versions()['VOLCANO_VERSION']}") / "installer/helm/chart/volcano"
    for crd in sorted((chart / "crd" / "bases").glob("*.yaml")):
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
            f"--scheduler-conf={chart / 'config' / 'volcano-scheduler.conf'}",
            "--enable-healthz=true",
            f"--healthz-address=127.0.0.1:{scheduler_health}",
            f"--listen-address=127.0.0.1:{metrics}",
            "--schedule-period=500ms",
        ],
    )
    wait_until(lambda: _healthy(scheduler_health), "the Volcano scheduler healthy", 60)
    wait_until(lambda: _healthy(controller_health), "the Volcano controller manager healthy", 60)
    wait_until(lambda: plane.get("queue.scheduling.volcano.sh", "default"), "the default queue", 60)
    return [scheduler, controllers]


def _healthy(port: int) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as answer:
        return int(answer.status) == 200
