"""Whole on every mechanism (issue 78), on the real control plane: a gang that native kube-scheduler,
scheduler-plugins' Coscheduling or Volcano started whole loses a node; none of them requeues it (the two
replacements have nowhere to go while the two survivors hold their node), so gangkeeper does, after its
recovery timeout, as it does a gate gang (act/supervise.py): the Job suspended, not failed, resumed after
its backoff, and started whole again by its own mechanism once the node is back. Every assertion reads
what the cluster reports."""

from __future__ import annotations

import json

import pytest

from tests.real.test_real_seeds import assert_started_together
from tests.realcluster import workloads
from tests.realcluster.stack import Stack, running, wait_until

pytestmark = pytest.mark.cluster
RECOVERY_SECONDS = 20
LOST = "test-node-lost"


def a_gang_that_loses_a_node_is_requeued_whole_and_runs_whole_again(stack: Stack, backend: str) -> None:
    nodes = stack.replace_workers(2, cpu="8")
    namespace = stack.namespace(f"node-loss-{backend}", backend)
    annotations = {"gangkeeper.io/recovery-timeout-seconds": str(RECOVERY_SECONDS)}
    job = workloads.job("train", namespace, 4, "4", annotations=annotations, backoffLimit=6)
    # a backend installed a moment ago is refused until the webhook's discovery (each minute) sees it
    wait_until(lambda: stack.plane.apply(job), "the Job admitted", 90, every=5)
    first = wait_until(
        lambda: (p := stack.pods(namespace)) and len(running(p)) == 4 and p,
        f"{backend}: the gang Running",
        120,
        explain=lambda: stack.describe(namespace),
    )
    assert {p["spec"]["nodeName"] for p in first} == set(nodes)
    # the scenario is a gang gangkeeper saw whole: one it first sees after the loss has only ever run partly,
    # and waits out its start timeout instead (seen on a loaded machine, the controller's pass behind)
    wait_until(
        lambda: (
            (status := (stack.plane.get("gang", "job-train", namespace=namespace) or {}).get("status") or {})
            and status.get("ranWith") == 4
        ),
        f"{backend}: the Gang seen running whole",
        60,
    )
    # the node is lost: its two members are evicted (NoExecute), their replacements have nowhere to go
    stack.plane.kubectl("taint", "nodes", nodes[1], f"{LOST}=true:NoExecute")
    suspended = wait_until(
        lambda: (j := stack.plane.get("job", "train", namespace=namespace)) and j["spec"].get("suspend") and j,
        f"{backend}: the Job suspended by gangkeeper (the gang requeued whole)",
        RECOVERY_SECONDS + 90,
        every=1,
        explain=lambda: (
            f"{stack.describe(namespace)}\ngang: {stack.plane.get('gang', 'job-train', namespace=namespace)}"
        ),
    )
    assert "gangkeeper.io/suspended" in suspended["metadata"]["annotations"]
    events = json.dumps(stack.plane.get("events", namespace=namespace))
    assert "GangRequeued" in events and "lost a member: 2 of 4 running" in events, events[-3000:]
    assert f"placed by the {backend} gang scheduler" in events
    # the node comes back: after its backoff the Job is resumed and its mechanism starts it whole
    stack.plane.kubectl("taint", "nodes", nodes[1], f"{LOST}=true:NoExecute-")
    before = {p["metadata"]["uid"] for p in first}
    again = wait_until(
        lambda: (
            (p := [x for x in stack.pods(namespace) if x["metadata"]["uid"] not in before])
            and len(running(p)) == 4
            and p
        ),
        f"{backend}: the gang Running whole again",
        180,
        every=1,
        explain=lambda: stack.describe(namespace),
    )
    assert_started_together(again, 4)
    job_now = stack.plane.get("job", "train", namespace=namespace)
    assert not any(c["type"] == "Failed" and c["status"] == "True" for c in job_now["status"].get("conditions") or [])
    wait_until(
        lambda: (
            (status := (stack.plane.get("gang", "job-train", namespace=namespace) or {}).get("status") or {})
            and status.get("state") == "Running"
            and status.get("ranWith") == 4
            and "shortSince" not in status
        ),
        f"{backend}: the Gang Running with no shortfall",
        30,
    )


def test_native_a_gang_that_loses_a_node_is_requeued_whole(stack: Stack) -> None:
    a_gang_that_loses_a_node_is_requeued_whole_and_runs_whole_again(stack, "native")


def test_coscheduling_a_gang_that_loses_a_node_is_requeued_whole(cosched: Stack) -> None:
    a_gang_that_loses_a_node_is_requeued_whole_and_runs_whole_again(cosched, "coscheduling")


def test_volcano_a_gang_that_loses_a_node_is_requeued_whole(vc: Stack) -> None:
    a_gang_that_loses_a_node_is_requeued_whole_and_runs_whole_again(vc, "volcano")
