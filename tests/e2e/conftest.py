"""Where the conformance suite runs: a platform team's own cluster, or this machine's real tier.

- `make e2e` (GANGKEEPER_E2E_KUBECONFIG set to a kubeconfig): the cluster it names, where gangkeeper is
  already installed (`kubectl apply -k manifests/overlays/gate`, or the chart); its worker nodes are the
  nodes without the control-plane role, tainted and untainted by the pinch tests. Nothing else is touched
  but the namespaces the tests create.
- `make test` (the variable unset): the real tier of tests/realcluster (upstream kube-apiserver,
  controllers and scheduler, gangkeeper deployed from its manifests), with three fresh fake nodes of 8
  CPUs per test. KUBECONFIG alone never points the suite at a cluster: a developer's shell must not make
  `make test` taint their nodes.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

USER_KUBECONFIG = os.environ.get("GANGKEEPER_E2E_KUBECONFIG", "")


@dataclass
class Target:
    """A cluster with gangkeeper installed: kubectl against it, and its worker nodes."""

    name: str
    run: Callable[[list[str], str | None], str]
    list_workers: Callable[[], list[str]]
    # what a failed wait shows: the namespace's pods, Jobs and events (and, on the real tier, the
    # gang controller's log)
    show: Callable[[str], str] | None = None

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        return self.run(list(args), stdin)

    def workers(self) -> list[str]:
        return self.list_workers()

    def describe(self, namespace: str) -> str:
        if self.show is not None:
            return self.show(namespace)
        return self.kubectl("get", "pods,jobs,events", "-n", namespace, "-o", "wide")


def _user_cluster(kubeconfig: str) -> Target:
    def run(args: list[str], stdin: str | None) -> str:
        command = ["kubectl", f"--kubeconfig={kubeconfig}", *args]
        return subprocess.run(command, input=stdin, capture_output=True, text=True, check=True).stdout

    def workers() -> list[str]:
        names = run(["get", "nodes", "-l", "!node-role.kubernetes.io/control-plane", "-o", "name"], None)
        return [n.removeprefix("node/") for n in names.split()]

    return Target(f"the cluster of {kubeconfig}", run, workers)


@pytest.fixture
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    if USER_KUBECONFIG:
        if not Path(USER_KUBECONFIG).exists():
            pytest.fail(f"GANGKEEPER_E2E_KUBECONFIG={USER_KUBECONFIG}: no such file")
        yield _user_cluster(USER_KUBECONFIG)
        return
    from tests.realcluster.stack import Stack

    stack: Stack = request.getfixturevalue("stack")
    stack.replace_workers(3, cpu="8", prefix="e2e")

    def run(args: list[str], stdin: str | None) -> str:
        return stack.plane.kubectl(*args, stdin=stdin).stdout

    yield Target("the real tier", run, lambda: list(stack.workers), stack.describe)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On the real tier the suite is part of the cluster tier (`-m cluster` selects it, `-m "not
    cluster"` leaves it out); against a user's cluster it is its own run."""
    if USER_KUBECONFIG:
        return
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).parent == here:
            item.add_marker(pytest.mark.cluster)
