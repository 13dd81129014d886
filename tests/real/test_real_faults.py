"""A failing API server mid-release, on the real control plane (tests/realcluster/).

The deployed controller reaches the real kube-apiserver through a TLS proxy (tests/realcluster/
faultproxy.py) that answers one member's release PATCH with a fault (500, 429, or no answer at all)
while another tenant's pod takes the node that member was promised. Three members bind, one stays
gated, and no retry can place it: the gang must not stay that way. It is requeued whole once its timeout
passes, and runs whole when room returns. Every assertion reads what the cluster reports.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.real.test_real_recovery import job_events
from tests.real.test_real_seeds import assert_started_together
from tests.realcluster import workloads
from tests.realcluster.faultproxy import Fault, FaultProxy, Request
from tests.realcluster.stack import Stack, bound, gated, running, wait_until
from webhook.controller.decide.pods import pinned_to

pytestmark = pytest.mark.cluster
CONTROLLER = "gangkeeper-controller"


def route_controller(stack: Stack, address: tuple[str, int] | None) -> None:
    """The controller's pods started afresh, reaching the API server at `address` (None: directly)."""
    for node in stack.system:
        node.api_routes.pop(CONTROLLER, None)
        if address:
            node.api_routes[CONTROLLER] = address
    stack.restart("controller")


@pytest.fixture(scope="module")
def proxy(stack: Stack) -> Iterator[FaultProxy]:
    with FaultProxy(stack.plane) as running_proxy:
        route_controller(stack, running_proxy.address)
        assert running_proxy.forwarded, "the controller's requests do not pass the proxy"
        try:
            yield running_proxy
        finally:
            running_proxy.rule = lambda request: None
            route_controller(stack, None)


def release_of(namespace: str, request: Request) -> str | None:
    """The pod a request releases (a PATCH lifting scheduling gates) in `namespace`, else None."""
    prefix = f"/api/v1/namespaces/{namespace}/pods/"
    if request.method != "PATCH" or not request.path.startswith(prefix) or b"schedulingGates" not in request.body:
        return None
    return request.path.removeprefix(prefix).split("?")[0]


def intruder(namespace: str, node: str, cpu: str) -> dict[str, Any]:
    """Another tenant's pod bound straight to a node, as a DaemonSet's or a static pod would be."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "intruder", "namespace": namespace},
        "spec": {"nodeName": node, "containers": [workloads.container(cpu)]},
    }


@pytest.mark.parametrize(
    "fault", [Fault(status=500), Fault(status=429), Fault(seconds=40)], ids=["500", "429", "no-answer"]
)
def test_a_release_patch_lost_while_its_node_is_taken_requeues_the_gang_whole(
    stack: Stack, proxy: FaultProxy, fault: Fault
) -> None:
    stack.replace_workers(4, cpu="8")
    namespace = stack.namespace(f"fault-{fault.status or 'hang'}", "gate")
    other = stack.namespace(f"fault-{fault.status or 'hang'}-other", None, opted_in=False)
    victim: list[str] = []

    def rule(request: Request) -> Fault | None:
        pod = release_of(namespace, request)
        if pod is None:
            return None
        victim[:] = victim or [pod]  # the first member released is the one whose PATCHes all fail
        return fault if pod == victim[0] else None

    proxy.rule = rule
    job = workloads.job("train", namespace, 4, "6", annotations={"gangkeeper.io/timeout-seconds": "20"}, backoffLimit=6)
    stack.plane.apply(job)
    refused = wait_until(
        lambda: [r for r in proxy.faulted() if release_of(namespace, r)], f"a release PATCH answered {fault.name}", 90
    )
    promised = pinned_to(json.loads(refused[0].body)["spec"])
    assert promised, refused[0].body
    stack.plane.apply(intruder(other, promised, "6"))
    # three members bind, the fourth stays gated: its PATCHes fail, and its node is taken anyway
    wait_until(
        lambda: (
            (p := stack.pods(namespace)) and len(bound(p)) == 3 and [x["metadata"]["name"] for x in gated(p)] == victim
        ),
        "three members bound and the refused one gated",
        60,
        explain=lambda: stack.describe(namespace),
    )
    try:
        wait_until(
            lambda: (j := stack.plane.get("job", "train", namespace=namespace)) and j["spec"].get("suspend"),
            "the Job suspended by gangkeeper (the gang requeued whole)",
            90,
        )
    except AssertionError as error:
        raise AssertionError(f"{error}\n{stack.describe(namespace)}") from None
    events = job_events(stack, namespace)
    assert "GangRequeued" in events and "their release was refused or lost" in events, events[-3000:]
    wait_until(lambda: not bound(stack.pods(namespace)), "the gang's pods gone", 60)
    # room again: the gang is resumed after its backoff and starts whole, on the real API server
    stack.plane.kubectl("delete", "pod", "intruder", "-n", other, "--wait=true", timeout=60)
    again = wait_until(
        lambda: (p := stack.pods(namespace)) and len(running(p)) == 4 and p,
        "the gang Running whole again",
        150,
        explain=lambda: (
            f"{stack.describe(namespace)}\ngang: {stack.plane.get('gang', 'job-train', namespace=namespace)}"[-6000:]
        ),
    )
    assert_started_together(again, 4)
    assert victim[0] not in {p["metadata"]["name"] for p in again}
    assert {release_of(namespace, r) for r in proxy.faulted()} - {None} == set(victim)
    finished = stack.plane.get("job", "train", namespace=namespace)
    assert not any(c["type"] == "Failed" and c["status"] == "True" for c in finished["status"].get("conditions") or [])
