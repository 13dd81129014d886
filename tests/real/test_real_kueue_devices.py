"""Kueue's device quota beside gangkeeper's gate, for real: Kueue (alpha gate DynamicResourceAllocation,
`resources.deviceClassMappings`) counts the devices a Job's pods claim through their
ResourceClaimTemplate against its ClusterQueue, and admits one Job at a time; gangkeeper starts each
admitted Job's pods whole, on the devices published for them. Every assertion reads what the cluster
reports."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.real.test_real_dra import allocated_devices, said
from tests.real.test_real_kueue import condition, job_pods, kueue_workload, queued_job
from tests.real.test_real_seeds import assert_started_together
from tests.realcluster import dra, operators
from tests.realcluster.stack import Stack, bound, running, wait_until

pytestmark = pytest.mark.cluster
GPUS = "example.com/gpus"


@pytest.fixture(scope="module")
def kueue_with_devices(stack: Stack) -> Iterator[operators.Operator]:
    operator = operators.kueue(devices={GPUS: [dra.CLASS]})
    if operator.missing():
        pytest.skip(operator.missing())
    operator.install(stack.plane)
    yield operator
    operator.uninstall(stack.plane)


def device_queues(namespace: str, gpus: int) -> list[dict[str, object]]:
    return [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "default"}},
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": f"cq-{namespace}"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", GPUS],
                        "flavors": [
                            {
                                "name": "default",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "64"},
                                    {"name": "memory", "nominalQuota": "256Gi"},
                                    {"name": GPUS, "nominalQuota": str(gpus)},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "lq", "namespace": namespace},
            "spec": {"clusterQueue": f"cq-{namespace}"},
        },
    ]


def test_kueue_admits_dra_gangs_by_device_quota_and_the_gate_starts_each_whole(
    stack: Stack, kueue_with_devices: operators.Operator
) -> None:
    """A quota of 8 devices and devices published for 8: two Jobs of 8 pods, one device each. Kueue admits
    the first (8 of 8 devices), which starts whole; the second stays suspended with no pods; the first
    ends, Kueue admits the second, and it starts whole on the devices the first gave back."""
    nodes = stack.replace_workers(2, cpu="16")
    dra.publish(stack, nodes, 4)
    namespace = stack.namespace("kueue-devices", "gate")
    stack.plane.apply([*device_queues(namespace, 8), dra.claim_template(namespace)])
    stack.plane.apply(dra.claiming(queued_job("first", namespace, 8, "100m", run_for="30s")))
    try:
        first = wait_until(
            lambda: (p := job_pods(stack, namespace, "first")) and len(running(p)) == 8 and p,
            "the first Job admitted by Kueue and Running whole",
            150,
        )
    except AssertionError:
        print(said(stack, namespace))
        raise
    assert_started_together(first, 8)
    usage = kueue_workload(stack, namespace, "first")["status"]["admission"]["podSetAssignments"][0]["resourceUsage"]
    assert usage.get(GPUS) == "8", usage  # Kueue counted the claims' devices
    stack.plane.apply(dra.claiming(queued_job("second", namespace, 8, "100m")))
    wait_until(
        lambda: (j := stack.plane.get("job", "second", namespace=namespace)) and j["spec"].get("suspend") is True,
        "the second Job suspended by Kueue: no device quota left",
        60,
    )
    assert not job_pods(stack, namespace, "second")
    second = wait_until(
        lambda: (p := job_pods(stack, namespace, "second")) and len(running(p)) == 8 and p,
        "the second Job admitted once the first ended, Running whole",
        240,
    )
    assert_started_together(second, 8)
    assert condition(kueue_workload(stack, namespace, "second"), "Admitted")
    held = allocated_devices(stack, namespace)
    assert sorted(p["metadata"]["name"] for p in second) == sorted(n for n in held if n.startswith("second"))
    assert not bound([p for p in job_pods(stack, namespace, "first") if p["status"].get("phase") != "Succeeded"])
