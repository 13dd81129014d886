"""The seeds' workloads, as users write them: no gang fields, only resources."""

from __future__ import annotations

from typing import Any


def container(cpu: str, memory: str = "256Mi") -> dict[str, Any]:
    return {
        "name": "worker",
        "image": "busybox:1.36",
        "command": ["sh", "-c", "echo started; sleep 3600"],
        "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}},
    }


def job(
    name: str,
    namespace: str,
    size: int,
    cpu: str,
    annotations: dict[str, str] | None = None,
    pod_annotations: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
        "spec": {
            "parallelism": size,
            "completions": size,
            "backoffLimit": 0,
            **spec,
            "template": {
                "metadata": {"annotations": pod_annotations or {}},
                "spec": {"restartPolicy": "Never", "containers": [container(cpu)]},
            },
        },
    }


def leader_worker_set(
    name: str, namespace: str, size: int, cpu: str, replicas: int = 1, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """1 leader + size-1 workers per group, as the seeds' gang-test.yaml (without schedulerName)."""
    template = {"spec": {"containers": [container(cpu)]}}
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
        "spec": {
            "replicas": replicas,
            "leaderWorkerTemplate": {"size": size, "leaderTemplate": template, "workerTemplate": template},
        },
    }


def job_set(name: str, namespace: str, cpu: str, workers: int = 3) -> dict[str, Any]:
    """A leader Job of one pod and a worker Job of `workers` pods, started in any order."""

    def replicated(job_name: str, pods: int) -> dict[str, Any]:
        return {
            "name": job_name,
            "replicas": 1,
            "template": {
                "spec": {
                    "parallelism": pods,
                    "completions": pods,
                    "backoffLimit": 0,
                    "template": {"spec": {"restartPolicy": "Never", "containers": [container(cpu)]}},
                }
            },
        }

    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicatedJobs": [replicated("leader", 1), replicated("workers", workers)]},
    }


def statefulset(name: str, namespace: str, replicas: int, cpu: str) -> dict[str, Any]:
    """A Parallel StatefulSet: the podManagementPolicy that gets a gang."""
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "podManagementPolicy": "Parallel",
            "serviceName": name,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container(cpu)]}},
        },
    }
