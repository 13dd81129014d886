"""Gangs made of groups (issue 99) on the real tier: a RayCluster's multi-host worker replicas, made by
KubeRay 1.5's own operator with RayMultiHostIndexing on (each replica's 2 pods labelled with its name),
under the gate. Its minimum (the head and minReplicas replicas, in-tree autoscaling on) runs; the test
writes `replicas` as the Ray autoscaler would, with room for only part of the new replicas: each replica
binds whole or not at all, sampled every second from what the API server reports, and the running
members keep their uids."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.real.test_real_dra import add_worker
from tests.realcluster import operators
from tests.realcluster.stack import Stack, running, wait_until

REPLICA = "ray.io/worker-group-replica-name"
HOSTS = 2


@pytest.fixture
def kuberay_indexing(stack: Stack) -> Iterator[Stack]:
    operator = operators.kuberay(batch_scheduler=None, feature_gates="RayMultiHostIndexing=true")
    reason = operator.missing()
    if reason:
        pytest.skip(reason)
    operator.install(stack.plane)
    yield stack
    operator.uninstall(stack.plane)


def ray_cluster(namespace: str, replicas: int) -> dict[str, Any]:
    def template(name: str, cpu: str) -> dict[str, Any]:
        container = {"name": name, "image": "rayproject/ray:2.46.0", "resources": {"requests": {"cpu": cpu}}}
        return {"spec": {"containers": [container]}}

    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "slices", "namespace": namespace},
        "spec": {
            "enableInTreeAutoscaling": True,
            "headGroupSpec": {"rayStartParams": {}, "template": template("ray-head", "500m")},
            "workerGroupSpecs": [
                {
                    "groupName": "tpu",
                    "replicas": replicas,
                    "minReplicas": 1,
                    "maxReplicas": 4,
                    "numOfHosts": HOSTS,
                    "rayStartParams": {},
                    "template": template("ray-worker", "2"),
                }
            ],
        },
    }


class Sampler:
    """Every second, each replica's pods as the API server has them: how many are bound of how many."""

    def __init__(self, stack: Stack, namespace: str) -> None:
        self.stack, self.namespace = stack, namespace
        self.partial: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            try:
                pods = self.stack.pods(self.namespace)
            except Exception:  # the API answering slowly: the next second decides
                continue
            for replica, members in replicas(pods).items():
                placed = sum(1 for p in members if p["spec"].get("nodeName"))
                if 0 < placed < HOSTS or (placed and len(members) < HOSTS):
                    self.partial.append(f"{time.strftime('%X')} {replica}: {placed} of {len(members)} bound")


def replicas(pods: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        name = (pod["metadata"].get("labels") or {}).get(REPLICA)
        if name and not pod["metadata"].get("deletionTimestamp"):
            found.setdefault(name, []).append(pod)
    return found


def test_replicas_the_autoscaler_adds_start_whole_beside_the_running_minimum(kuberay_indexing: Stack) -> None:
    stack = kuberay_indexing
    stack.replace_workers(3, cpu="2")  # the head on one, the first replica's 2 hosts on the other two
    namespace = stack.namespace("ray-slices", "gate")
    stack.plane.apply(ray_cluster(namespace, 1))
    first = wait_until(
        lambda: (p := stack.pods(namespace)) and len(running(p)) == 1 + HOSTS and p,
        "the head and one 2-host replica Running",
        180,
        every=1,
        explain=lambda: stack.describe(namespace),
    )
    assert len(replicas(first)) == 1, "KubeRay did not label the replica (RayMultiHostIndexing)"
    uids = {p["metadata"]["uid"] for p in first}
    add_worker(stack, f"{stack.workers[0]}-room", "2")  # room for one host of the 2 replicas to come
    with Sampler(stack, namespace) as sampler:
        stack.plane.kubectl(
            "-n", namespace, "patch", "raycluster", "slices", "--type=json",
            "-p", '[{"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": 3}]',
        )  # fmt: skip
        wait_until(lambda: len(replicas(stack.pods(namespace))) == 3, "KubeRay's 2 new replicas made", 120, every=1)
        time.sleep(15)  # passes of the controller with room for one host: nothing of them may bind
        waiting = stack.pods(namespace)
        assert not [p for p in waiting if p["metadata"]["uid"] not in uids and p["spec"].get("nodeName")]
        add_worker(stack, f"{stack.workers[0]}-more", "2")  # room for a whole replica now
        grown = wait_until(
            lambda: (p := stack.pods(namespace)) and len(running(p)) == 1 + 2 * HOSTS and p,
            "a second replica Running whole",
            120,
            every=1,
            explain=lambda: stack.describe(namespace),
        )
        add_worker(stack, f"{stack.workers[0]}-last", "2")
        add_worker(stack, f"{stack.workers[0]}-last2", "2")
        wait_until(
            lambda: len(running(stack.pods(namespace))) == 1 + 3 * HOSTS,
            "the third replica Running whole",
            120,
            every=1,
            explain=lambda: stack.describe(namespace),
        )
    assert sampler.partial == [], sampler.partial
    assert uids <= {p["metadata"]["uid"] for p in grown}, "a running member was replaced"
    assert uids <= {p["metadata"]["uid"] for p in stack.pods(namespace)}
