"""`gangkeeper controller` and `gangkeeper explain` as processes against the test API server."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tests.apiserver import TestApiServer
from tests.cluster import BLOCKED, add_job, add_job_pods, default_scheduler, node, pods
from tests.conftest import free_port


@pytest.fixture
def server() -> Iterator[TestApiServer]:
    with TestApiServer() as running:
        yield running


def test_explain_prints_why_a_gang_waits_node_by_node(server: TestApiServer) -> None:
    store = server.store
    store.create("v1", "nodes", "", node("worker1", taints=BLOCKED))
    store.create("v1", "nodes", "", node("worker2", taints=BLOCKED))
    store.create("v1", "nodes", "", node("worker3", cpu="4"))
    add_job_pods(store, add_job(store, parallelism=4, cpu="4"))
    result = subprocess.run(
        [sys.executable, "-m", "webhook", "explain", "team-a/job-train", "--server", server.url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "gang team-a/job-train",
        "  members: 4 present of minMember 4 (4 gated)",
        "  state: WaitingForCapacity: 1 of 4 pods fit on free capacity",
        "  queue: position 1 of 1 waiting (policy backfill; priority 0, then arrival)",
        "  reservation: none: it would not fit even once all running work ended (see what blocks the rest)",
        "  each gated pod needs: 4 cpu, 1Gi memory; the gang needs 4 such pods",
        "  best placement found: worker3: 1",
        "  what blocks the rest:",
        "    worker1, worker2: taint test=blocked:NoSchedule not tolerated",
        "    worker3: 1 of 4 pods fit (needs 4 cpu each, 4 cpu free)",
    ]


def test_controller_process_releases_when_capacity_appears(server: TestApiServer) -> None:
    store = server.store
    store.create("v1", "nodes", "", node("worker1", cpu="8", taints=BLOCKED))
    store.create("v1", "nodes", "", node("worker2", cpu="8", taints=BLOCKED))
    add_job_pods(store, add_job(store, parallelism=4, cpu="4"))
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "webhook",
            "controller",
            "--server",
            server.url,
            "--interval",
            "0.2",
            "--metrics-port",
            str(free_port()),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not store.list("coordination.k8s.io/v1", "leases", None)[0]:
            time.sleep(0.1)
        time.sleep(1.0)
        assert all(p["spec"].get("schedulingGates") for p in pods(store))
        for name in ("worker1", "worker2"):
            store.patch("v1", "nodes", "", name, {"spec": {"taints": None}})
        while time.monotonic() < deadline and any(p["spec"].get("schedulingGates") for p in pods(store)):
            time.sleep(0.1)
        assert not any(p["spec"].get("schedulingGates") for p in pods(store))
        assert default_scheduler(store) == 4
    finally:
        process.terminate()
        process.wait(timeout=30)
