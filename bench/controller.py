"""Controller speed and memory at scale.

1. Placement: the decision for a 512-pod gang against 5,000 nodes holding 150,000 pods, next to a
   baseline measured in the same run: placing the same pods one at a time with a first-fit scan of
   every node, the way a per-pod scheduler would (and without any all-or-nothing answer).
2. Release: gangs of 8, 64 and 1,000 gated pods released against the test API server (one PATCH per
   pod), next to the floor of the same number of plain GETs on the same server.
3. Memory: resident memory of the controller's caches and views for 150,000 pods and 5,000 nodes.

    python bench/controller.py
"""

from __future__ import annotations

import gc
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import urllib3

from tests import builders as b
from tests.cluster import Clock, add_job, add_job_pods, node
from tests.conftest import free_port
from webhook.controller import placement
from webhook.controller.informer import trim_node, trim_pod
from webhook.controller.kube import NODES as NODES_RESOURCE
from webhook.controller.kube import PODS, Api, ApiError, Resource, client_from
from webhook.controller.reconciler import Controller
from webhook.controller.state import PodView

NODES, PODS_PER_NODE, GANG = 5000, 30, 512


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def realistic_pod(index: int, node_name: str) -> dict[str, Any]:
    """A bound pod with the bulk real pods carry (env, probes, volumes), which the informer trims."""
    container = b.container(
        "500m" if index % 3 else "1",
        "1Gi" if index % 2 else "2Gi",
        name="app",
        env=[{"name": f"VAR_{i}", "value": "x" * 40} for i in range(15)],
        volumeMounts=[{"name": "data", "mountPath": "/data"}],
        readinessProbe={"httpGet": {"path": "/healthz", "port": 8080}},
    )
    pod = b.pod(
        f"app-{index}",
        labels={"app": f"svc-{index % 200}", "pod-template-hash": "7d4b9c"},
        annotations={"kubectl.kubernetes.io/restartedAt": "2026-11-01T00:00:00Z"},
        owner=("apps/v1", "ReplicaSet", f"svc-{index % 200}-7d4b9c"),
        namespace=f"ns-{index % 50}",
        spec=b.pod_spec(container, volumes=[{"name": "data", "emptyDir": {}}], nodeName=node_name),
    )
    pod["status"] = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}] * 4,
        "podIP": "10.0.0.1",
        "containerStatuses": [{"name": "app", "ready": True, "restartCount": 0}],
    }
    return pod


def bench_placement() -> None:
    gc.collect()
    before = rss_mib()
    started = time.perf_counter()
    raw_nodes = [
        trim_node(node(f"node-{i:04d}", cpu="64", memory="256Gi", labels={"nvidia.com/gpu.present": "true"}))
        for i in range(NODES)
    ]
    for raw in raw_nodes:
        raw["status"]["allocatable"]["nvidia.com/gpu"] = "8"
    raw_pods = [trim_pod(realistic_pod(i, f"node-{i % NODES:04d}")) for i in range(NODES * PODS_PER_NODE)]
    nodes = [placement.Node.from_api(n) for n in raw_nodes]
    views = [PodView.from_api(p) for p in raw_pods]
    build = time.perf_counter() - started
    memory = rss_mib() - before

    started = time.perf_counter()
    free = placement.free_capacity(nodes, ((v.node_name, v.units) for v in views if v.node_name))
    index_time = time.perf_counter() - started

    gang_pod = b.pod_spec(
        b.container(
            "8", "32Gi", resources={"requests": {"cpu": "8", "memory": "32Gi"}, "limits": {"nvidia.com/gpu": "1"}}
        )
    )
    shape = placement.Shape.from_pod_spec(gang_pod)
    members = [placement.Member(f"trainer-{i}", shape) for i in range(GANG)]
    runs = []
    for _ in range(5):
        started = time.perf_counter()
        result = placement.place(members, nodes, free)
        runs.append(time.perf_counter() - started)
    assert result.complete

    started = time.perf_counter()
    remaining = {name: dict(units) for name, units in free.items()}
    placed = 0
    for _member in members:  # baseline: per pod, scan nodes in order, first fit
        for candidate in nodes:
            if placement.static_reason(shape, candidate) is None and placement.fit_count(
                shape, remaining[candidate.name]
            ):
                for res, amount in shape.requests:
                    remaining[candidate.name][res] -= amount
                placed += 1
                break
    baseline = time.perf_counter() - started

    print(f"placement: {GANG}-pod gang, {NODES} nodes, {len(views)} pods")
    print(f"  gang decision          median {sorted(runs)[2] * 1000:8.1f} ms  (target < 100 ms)")
    print(f"  baseline first-fit     {baseline * 1000:15.1f} ms  (per pod scan, {placed} placed, no all-or-nothing)")
    print(f"  free-capacity index    {index_time * 1000:15.1f} ms  (once per pass, from the cache)")
    print(f"  cache build            {build:15.1f} s   (list of {len(views)} pods, trimmed)")
    print(f"  memory of caches       {memory:15.0f} MiB (target < 500 MiB; peak RSS {rss_mib():.0f} MiB)")


class RemoteStore:
    """The test API server in a process of its own, filled through its HTTP API."""

    def __init__(self, api: Api) -> None:
        self.api = api

    def create(self, gv: str, plural: str, ns: str, obj: dict[str, Any]) -> dict[str, Any]:
        resource = Resource(gv, plural, namespaced=bool(ns))
        return dict(self.api.create(resource.path(ns or None), obj))


def bench_release() -> None:
    print("release: gated gang released against the test API server in its own process (one PATCH per pod)")
    for size in (8, 64, 1000):
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "tests.apiserver", "--port", str(port)], cwd=Path(__file__).resolve().parents[1]
        )
        try:
            api = Api(client_from(server=f"http://127.0.0.1:{port}"))
            for _ in range(100):
                try:
                    api.list(NODES_RESOURCE.path())
                    break
                except (OSError, ApiError, urllib3.exceptions.HTTPError):
                    time.sleep(0.1)
            store = RemoteStore(api)
            for i in range(size // 32 + 1):
                store.create("v1", "nodes", "", node(f"w{i}", cpu="64", memory="512Gi", pods="110"))
            job = add_job(store, "big", parallelism=size, cpu="1")  # type: ignore[arg-type]
            names = add_job_pods(store, job)  # type: ignore[arg-type]
            controller = Controller(api, clock=Clock())
            started = time.perf_counter()
            decision = controller.reconcile_once()["team-a/job-big"]
            release = time.perf_counter() - started
            assert decision.state == "Release" and len(decision.release) == size, decision.message
            started = time.perf_counter()
            for name in names:
                api.get(PODS.path("team-a", name))
            floor = time.perf_counter() - started
            print(
                f"  {size:5d} pods: release {release * 1000:8.1f} ms; same number of GETs {floor * 1000:8.1f} ms"
                f"{'  (target < 1 s)' if size == 1000 else ''}"
            )
        finally:
            server.terminate()
            server.wait(timeout=10)


if __name__ == "__main__":
    bench_release()
    bench_placement()
