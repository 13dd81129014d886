"""The Helm chart on a real control plane of its own: `helm install` (gangkeeper's pods on the system
nodes through the chart's nodeSelector and tolerations), `helm upgrade` while gangs wait and run and
while clients keep creating pods (nothing lost, no call refused), and `helm uninstall`, whose
pre-delete hook lifts every gate before the webhooks and the controller go."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.realcluster import workloads
from tests.realcluster.controlplane import ControlPlane, binary, versions
from tests.realcluster.kubelet import SYSTEM_NODES
from tests.realcluster.stack import Stack, bound, gated, running, wait_until

pytestmark = pytest.mark.cluster
CHART = Path(__file__).resolve().parents[2] / "charts" / "gangkeeper"
PLUGINS = Path(__file__).resolve().parents[2] / "plugins"
NAMESPACE = "gangkeeper-system"
TAINT = "gangkeeper.test/system"
VALUES = {
    "backend": "gate",
    "nodeSelector": {"node-role.gangkeeper.test/system": ""},
    "tolerations": [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}],
}


class Helm:
    def __init__(self, plane: ControlPlane, values: Path) -> None:
        self.plane, self.values = plane, values
        self.exe = binary("helm", versions()["HELM_VERSION"], "helm")

    def __call__(self, *args: str, timeout: float = 400) -> str:
        import subprocess

        result = subprocess.run(
            [str(self.exe), f"--kubeconfig={self.plane.kubeconfig}", "--namespace", NAMESPACE, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert result.returncode == 0, f"helm {' '.join(args)}: {result.stdout}{result.stderr}"
        return result.stdout


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, Helm]]:
    helm_exe = binary("helm", versions()["HELM_VERSION"], "helm")
    if not helm_exe.exists():
        pytest.skip(f"not built: {helm_exe} (run hack/cluster/build.sh helm)")
    plane = ControlPlane(tmp_path_factory.mktemp("chart"), kubernetes_version=versions()["K8S_DEFAULT"])
    if plane.missing():
        pytest.skip(plane.missing())
    values = tmp_path_factory.mktemp("values") / "values.yaml"
    values.write_text(yaml.safe_dump(VALUES))
    with Stack(plane, overlay=None).running() as stack:
        plane.kubectl("taint", "nodes", *SYSTEM_NODES, f"{TAINT}=true:NoSchedule")
        yield stack, Helm(plane, values)


def gangkeeper_pods(stack: Stack) -> list[dict[str, Any]]:
    return stack.pods(NAMESPACE)


def test_helm_install_serves_admission_and_releases_gangs(cluster: tuple[Stack, Helm]) -> None:
    stack, helm = cluster
    helm("install", "gangkeeper", str(CHART), "--create-namespace", "-f", str(helm.values), "--wait", "--timeout", "5m")
    wait_until(stack.webhook_endpoints, "ready endpoints of the webhook Service", 90)
    wait_until(
        lambda: stack.plane.get("mutatingwebhookconfiguration", "gangkeeper")["webhooks"][0]["clientConfig"].get(
            "caBundle"
        ),
        "the webhook's CA bundle",
        60,
    )
    assert {p["spec"]["nodeName"] for p in gangkeeper_pods(stack)} == set(SYSTEM_NODES)
    # no apiServerCIDRs given: the webhook's NetworkPolicy admits the API server's own endpoints alone,
    # as the cluster listed them at install
    slices = stack.plane.get("endpointslices", namespace="default", selector="kubernetes.io/service-name=kubernetes")
    addresses = {f"{a}/32" for s in slices for e in s["endpoints"] for a in e["addresses"]}
    policy = stack.plane.get("networkpolicy", "gangkeeper-webhook", namespace=NAMESPACE)
    sources = {peer["ipBlock"]["cidr"] for peer in policy["spec"]["ingress"][0]["from"] if "ipBlock" in peer}
    assert addresses and sources == addresses, (sources, addresses)
    stack.replace_workers(3, cpu="4")
    stack.plane.kubectl("taint", "nodes", stack.workers[2], "test=blocked:NoSchedule")
    namespace = stack.namespace("helm-team", "gate")
    stack.plane.apply(workloads.job("small", namespace, 2, "1"))
    wait_until(lambda: len(running(stack.pods(namespace, "job-name=small"))) == 2, "the small gang Running", 120)
    stack.plane.apply(workloads.job("pinch", namespace, 2, "4"))  # one 4-CPU node free of three: waits
    wait_until(lambda: len(gated(stack.pods(namespace, "job-name=pinch"))) == 2, "the pinch gang gated", 60)


def test_helm_upgrade_loses_no_gang_and_refuses_no_call(cluster: tuple[Stack, Helm]) -> None:
    stack, helm = cluster
    namespace = "helm-team"
    before = {p["metadata"]["uid"] for p in gangkeeper_pods(stack)}
    refused: list[str] = []
    admitted = [0]
    stop = threading.Event()

    def keep_creating() -> None:  # server-side dry runs go through admission and store nothing
        probe = workloads.job("probe", namespace, 2, "1")
        while not stop.is_set():
            result = stack.plane.kubectl(
                "create", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(probe), check=False
            )
            if result.returncode:
                refused.append(result.stderr.strip())
            else:
                admitted[0] += 1
            time.sleep(0.3)

    creator = threading.Thread(target=keep_creating, daemon=True)
    creator.start()
    try:
        helm(
            "upgrade",
            "gangkeeper",
            str(CHART),
            "--reuse-values",
            "--set",
            "controller.queuePolicy=fifo,webhook.workers=2",
            "--wait",
            "--timeout",
            "5m",
        )
        wait_until(
            lambda: (
                not before & {p["metadata"]["uid"] for p in gangkeeper_pods(stack)}
                and len(running(gangkeeper_pods(stack))) == 4
            ),
            "every gangkeeper pod replaced",
            180,
        )
        time.sleep(3)
    finally:
        stop.set()
        creator.join()
    assert refused == [] and admitted[0] > 10, refused[:3]
    assert len(running(stack.pods(namespace, "job-name=small"))) == 2
    pinch = stack.pods(namespace, "job-name=pinch")
    assert len(pinch) == 2 and len(gated(pinch)) == 2, "the waiting gang is kept, whole and gated"
    stack.plane.kubectl("taint", "nodes", stack.workers[2], "test=blocked:NoSchedule-")
    try:
        wait_until(
            lambda: len(running(stack.pods(namespace, "job-name=pinch"))) == 2, "the waiting gang released after", 120
        )
    except AssertionError:
        lease = stack.plane.kubectl("get", "lease", "-n", NAMESPACE, "-o", "yaml", check=False).stdout
        print(stack.describe(namespace), lease, stack.plane.kubectl("get", "nodes", "-o", "wide").stdout)
        raise


def kubectl_gangkeeper(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    """The kubectl plugin as a user runs it: plugins/kubectl-gangkeeper found on the PATH by kubectl."""
    kubectl = stack.plane.k8s_binary("kubectl")
    env = {**os.environ, "PATH": f"{PLUGINS}:{kubectl.parent}:{os.environ.get('PATH', '')}"}
    env["KUBECONFIG"] = str(stack.plane.kubeconfig)
    return subprocess.run(
        [str(kubectl), "gangkeeper", *args], capture_output=True, text=True, timeout=400, env=env, check=False
    )


def test_the_kubectl_plugin_gets_explains_and_releases(cluster: tuple[Stack, Helm]) -> None:
    stack, _ = cluster
    namespace = "plugin-team"
    stack.namespace(namespace, "gate")
    stack.plane.apply(workloads.job("toobig", namespace, 2, "64"))  # larger than any node: never fits
    wait_until(lambda: len(gated(stack.pods(namespace, "job-name=toobig"))) == 2, "the gang gated", 60)
    wait_until(lambda: "NeverFits" in kubectl_gangkeeper(stack, "get", "-n", namespace).stdout, "the Gang's state", 60)
    listed = kubectl_gangkeeper(stack, "get", "-A")
    assert listed.returncode == 0 and "job-toobig" in listed.stdout and "gate" in listed.stdout, listed
    explained = kubectl_gangkeeper(stack, "explain", f"{namespace}/job-toobig")
    assert explained.returncode == 0, explained.stderr
    assert f"gang {namespace}/job-toobig (gate backend)" in explained.stdout
    assert "workload: Job toobig" in explained.stdout and "state: NeverFits" in explained.stdout, explained.stdout
    unknown = kubectl_gangkeeper(stack, "explain", f"{namespace}/job-nope")
    assert unknown.returncode == 1 and "no Gang" in unknown.stderr
    released = kubectl_gangkeeper(stack, "release")
    assert released.returncode == 0, released.stdout + released.stderr
    assert not gated(stack.pods(namespace, "job-name=toobig")), "release lifted the gates"
    stack.plane.kubectl("delete", "namespace", namespace, "--wait=false")


def test_helm_uninstall_lifts_every_gate_before_the_webhooks_go(cluster: tuple[Stack, Helm]) -> None:
    stack, helm = cluster
    namespace = "helm-team"
    stack.plane.apply(workloads.job("never", namespace, 2, "8"))  # needs two 8-CPU nodes: never fits
    wait_until(lambda: len(gated(stack.pods(namespace, "job-name=never"))) == 2, "a gang that never fits gated", 60)

    helm("uninstall", "gangkeeper", "--wait", "--timeout", "5m")

    never = stack.pods(namespace, "job-name=never")
    assert len(never) == 2 and not gated(never), "the pre-delete hook lifted the gates"
    assert not bound(never)  # they wait for room as any pod does, no longer for gangkeeper
    assert stack.plane.get("mutatingwebhookconfiguration", "gangkeeper") is None
    assert stack.plane.get("validatingwebhookconfiguration", "gangkeeper") is None
    assert not gangkeeper_pods(stack) or all(p["metadata"].get("deletionTimestamp") for p in gangkeeper_pods(stack))
    # a pod created now is admitted by nobody and is never gated
    stack.plane.apply(workloads.job("after", namespace, 1, "1"))
    wait_until(lambda: len(running(stack.pods(namespace, "job-name=after"))) == 1, "a pod after uninstall", 60)
