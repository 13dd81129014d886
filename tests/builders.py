"""Small object builders for table tests."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

import jsonpatch


def container(cpu: str | None = "1", memory: str | None = "1Gi", name: str = "main", **extra: Any) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    c: dict[str, Any] = {"name": name, "image": "busybox:1.36"}
    if requests:
        c["resources"] = {"requests": requests}
    c.update(extra)
    return c


def pod_spec(*containers: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"containers": list(containers) or [container()], **extra}


def template(spec: dict[str, Any] | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    t: dict[str, Any] = {"spec": spec or pod_spec()}
    if labels:
        t["metadata"] = {"labels": labels}
    return t


def job(
    name: str = "train",
    parallelism: int | None = 4,
    completions: int | None = None,
    annotations: dict[str, str] | None = None,
    spec: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    job_spec: dict[str, Any] = {"template": template({**(spec or pod_spec()), "restartPolicy": "Never"})}
    if parallelism is not None:
        job_spec["parallelism"] = parallelism
    if completions is not None:
        job_spec["completions"] = completions
    job_spec.update(extra)
    meta: dict[str, Any] = {"name": name, "namespace": "team-a"}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": job_spec}


def statefulset(name: str = "db", replicas: int = 3, policy: str | None = "Parallel") -> dict[str, Any]:
    """A StatefulSet; `policy` None leaves podManagementPolicy at its default, OrderedReady."""
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {
            "replicas": replicas,
            **({"podManagementPolicy": policy} if policy else {}),
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": template(labels={"app": name}),
        },
    }


def lws(
    name: str = "gang-test",
    size: int = 4,
    replicas: int = 1,
    cpu: str = "100m",
    memory: str = "128Mi",
    startup_policy: str | None = None,
    scheduler: str | None = "volcano",
) -> dict[str, Any]:
    def part(role: str) -> dict[str, Any]:
        spec: dict[str, Any] = {"containers": [container(cpu, memory, name=role)]}
        if scheduler:
            spec["schedulerName"] = scheduler
        return {"spec": spec}

    spec: dict[str, Any] = {
        "replicas": replicas,
        "leaderWorkerTemplate": {"size": size, "leaderTemplate": part("leader"), "workerTemplate": part("worker")},
    }
    if startup_policy:
        spec["startupPolicy"] = startup_policy
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": "gang-demo"},
        "spec": spec,
    }


def pod(
    name: str = "p",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    owner: tuple[str, str, str] | None = None,
    spec: dict[str, Any] | None = None,
    namespace: str = "team-a",
    owned: bool = True,
) -> dict[str, Any]:
    """A pod; one with the Job controller's label is owned by that Job, as the Job controller makes it
    (`owned=False`: a pod that only copies the label)."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    job_name = (labels or {}).get("batch.kubernetes.io/job-name")
    if owner is None and owned and job_name:
        owner = ("batch/v1", "Job", job_name)
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    if owner:
        api_version, kind, owner_name = owner
        meta["ownerReferences"] = [
            {
                "apiVersion": api_version,
                "kind": kind,
                "name": owner_name,
                "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, owner_name)),
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec or pod_spec()}


def review(
    obj: dict[str, Any] | None,
    operation: str = "CREATE",
    uid: str | None = None,
    old: dict[str, Any] | None = None,
    dry_run: bool = False,
) -> dict[str, Any]:
    group, _, version = (obj or {}).get("apiVersion", "v1").rpartition("/")
    kind = (obj or {}).get("kind", "Pod")
    request: dict[str, Any] = {
        "uid": uid or str(uuid.uuid4()),
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": kind.lower() + "s"},
        "operation": operation,
        "namespace": ((obj or {}).get("metadata") or {}).get("namespace", "team-a"),
        "userInfo": {"username": "alice"},
        "dryRun": dry_run,
        "object": obj,
        "oldObject": old,
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def patched(obj: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    """The object after the response's JSONPatch is applied, as the API server would."""
    if "patch" not in response:
        assert "patchType" not in response
        return obj
    assert response["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(response["patch"]))
    result: dict[str, Any] = jsonpatch.apply_patch(obj, ops)
    return result
