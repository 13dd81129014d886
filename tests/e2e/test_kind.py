"""End to end on a real cluster: the seed scenarios and the timeout with the gate backend.

Runs only when KUBECONFIG points at a cluster (for example `kind create cluster --config
tests/e2e/kind.yaml`) where gangkeeper is installed with the gate overlay
(`kubectl apply -k manifests/overlays/gate`). Run with `make e2e`.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

KUBECONFIG = os.environ.get("KUBECONFIG", "")
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not KUBECONFIG or not Path(KUBECONFIG).exists(),
        reason="needs a real cluster: set KUBECONFIG to a kind cluster with gangkeeper installed",
    ),
]
EXAMPLES = Path(__file__).resolve().parents[2] / "manifests" / "examples"


def kubectl(*args: str, stdin: str | None = None) -> str:
    return subprocess.run(["kubectl", *args], input=stdin, capture_output=True, text=True, check=True).stdout


def pod_phases(namespace: str, selector: str) -> list[tuple[str, bool]]:
    listing = yaml.safe_load(kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "yaml"))
    return [(p["status"].get("phase", ""), bool(p["spec"].get("schedulingGates"))) for p in listing["items"]]


def wait_for(check, seconds: float = 180):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(2)
    raise AssertionError("timed out")


@contextlib.contextmanager
def pinch() -> Iterator[None]:
    """Taint every worker but one, as the seed scenario does; lift the taints afterwards."""
    workers = kubectl("get", "nodes", "-l", "!node-role.kubernetes.io/control-plane", "-o", "name").split()
    for worker in workers[:-1]:
        kubectl("taint", worker, "test=blocked:NoSchedule", "--overwrite")
    try:
        yield
    finally:
        for worker in workers[:-1]:
            kubectl("taint", worker, "test=blocked:NoSchedule-")


@pytest.fixture
def namespace() -> Iterator[str]:
    name = f"gang-e2e-{int(time.time())}"
    kubectl("create", "namespace", name)
    kubectl("label", "namespace", name, "gangkeeper.io/enabled=true", "gangkeeper.io/backend=gate")
    yield name
    kubectl("delete", "namespace", name, "--wait=false")


def test_all_pods_fit_and_start_together(namespace: str) -> None:
    kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "01-all-fit.yaml"))
    wait_for(
        lambda: (
            (p := pod_phases(namespace, "gangkeeper.io/group=job-all-fit"))
            and len(p) == 4
            and all(phase in ("Running", "Succeeded") for phase, _ in p)
        )
    )


def test_resource_pinch_keeps_all_pending_then_all_start(namespace: str) -> None:
    with pinch():
        kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "02-resource-pinch.yaml"))
        time.sleep(20)
        phases = pod_phases(namespace, "gangkeeper.io/group=job-pinch")
        assert len(phases) == 4 and all(phase == "Pending" and gated for phase, gated in phases)
    wait_for(lambda: all(phase == "Running" for phase, _ in pod_phases(namespace, "gangkeeper.io/group=job-pinch")))


def test_default_scheduler_control_starts_part_of_the_job(namespace: str) -> None:
    with pinch():
        kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "03-default-scheduler-control.yaml"))
        time.sleep(20)
        phases = [phase for phase, _ in pod_phases(namespace, "job-name=control")]
        assert 0 < phases.count("Running") < 4  # the partial start gangkeeper prevents


def test_timeout_evicts_and_retries_behind_the_gate(namespace: str) -> None:
    kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "04-timeout.yaml"))
    wait_for(
        lambda: "GangEvicted" in kubectl("get", "events", "-n", namespace, "-o", "jsonpath={.items[*].reason}"),
        seconds=240,
    )
