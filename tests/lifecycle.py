"""Upstream workload controllers, simulated on the test API server, for lifecycle tests.

Each simulation does what its upstream controller does where gang membership depends on it, with the
source next to it. Objects are created through `store.admission`, set here to gangkeeper's own
admission decision (webhook.admission.decide.admit, what `/mutate` answers), so every child object
and pod is admitted as the API server would admit it.
"""

from __future__ import annotations

import copy
from typing import Any

from tests.apiserver import Obj, Reject, Store
from webhook import contract
from webhook.admission.decide import admit
from webhook.backends import Backend, NamespaceInfo, make

ENABLED = NamespaceInfo(labels={contract.NAMESPACE_ENABLED_LABEL: "true"})
NOT_ADMITTED = {"namespaces", "nodes", "events", "leases", "podgroups", "workloads", "secrets"}


def install_admission(store: Store, backend: str, configured: Backend | None = None) -> list[str]:
    """Every create in the store passes gangkeeper's mutating admission (the backend named, or one
    `configured` as discovery would); returns the warnings seen."""
    warnings: list[str] = []
    chosen = configured or make(backend)

    def admission(operation: str, gv: str, plural: str, namespace: str, obj: Obj, old: Obj | None) -> Obj:
        if plural in NOT_ADMITTED or operation != "CREATE":
            return obj
        outcome = admit(obj, operation, chosen, namespace, ENABLED)
        warnings.extend(outcome.warnings)
        if not outcome.allowed:
            raise Reject(outcome.code, "Forbidden", outcome.message)
        return outcome.mutated if outcome.mutated is not None else obj

    store.admission = admission
    return warnings


def owner_ref(obj: Obj) -> dict[str, Any]:
    meta = obj["metadata"]
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def pods_owned_by(store: Store, obj: Obj) -> list[Obj]:
    uid = obj["metadata"]["uid"]
    return [
        p
        for p in store.list("v1", "pods", obj["metadata"]["namespace"])[0]
        if any(r.get("uid") == uid for r in p["metadata"].get("ownerReferences") or [])
    ]


def pod_from_template(template: Obj, name: str | None, namespace: str, owner: Obj, labels: dict[str, str]) -> Obj:
    """What controllers do with a PodTemplateSpec: its labels, annotations and spec, plus their own."""
    meta = template.get("metadata") or {}
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "namespace": namespace,
            "labels": {**(meta.get("labels") or {}), **labels},
            "annotations": dict(meta.get("annotations") or {}),
            "ownerReferences": [owner_ref(owner)],
        },
        "spec": copy.deepcopy(template.get("spec") or {}),
    }
    if name:
        pod["metadata"]["name"] = name
    else:
        pod["metadata"]["generateName"] = f"{owner['metadata']['name']}-"
    return pod


class JobController:
    """kubernetes pkg/controller/job/job_controller.go, manageJob: keep
    `min(parallelism, completions - succeeded)` pods active; succeeded pods are not replaced; pods get
    the `batch.kubernetes.io/job-name` and `controller-uid` labels and a controller ownerReference.
    Deletion accounting (pod tracking with finalizers, GA 1.26): an active pod that disappears counts
    as failed, and past `backoffLimit` failures the Job fails. Suspend (KEP-2232): a suspended Job's
    active pods are deleted and not counted as failures."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._active: dict[str, set[str]] = {}  # job uid -> active pods seen at the last sync

    def sync(self, namespace: str, name: str) -> int:
        job = self.store.get("batch/v1", "jobs", namespace, name)
        spec, status = job["spec"], dict(job.get("status") or {})
        uid = job["metadata"]["uid"]
        pods = pods_owned_by(self.store, job)
        if any(c.get("type") == "Failed" for c in status.get("conditions") or []):
            return 0
        if spec.get("suspend"):
            for pod in pods:
                if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                    self.store.delete("v1", "pods", namespace, pod["metadata"]["name"])
            self._active[uid] = set()
            job["status"] = {**status, "active": 0}
            self.store.update("batch/v1", "jobs", namespace, name, job, None, admit=False)
            return 0
        present = {p["metadata"]["name"] for p in pods}
        failed = int(status.get("failed", 0)) + len(self._active.get(uid, set()) - present)
        if failed > int(spec.get("backoffLimit", 6)):
            job["status"] = {**status, "failed": failed, "conditions": [{"type": "Failed", "status": "True"}]}
            self.store.update("batch/v1", "jobs", namespace, name, job, None, admit=False)
            return 0
        succeeded = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Succeeded")
        active = [p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
        parallelism = int(spec.get("parallelism", 1))
        completions = spec.get("completions")
        want = parallelism if completions is None else max(min(parallelism, int(completions) - succeeded), 0)
        labels = {"batch.kubernetes.io/job-name": name, "batch.kubernetes.io/controller-uid": job["metadata"]["uid"]}
        created = 0
        for _ in range(want - len(active)):
            self.store.create(
                "v1", "pods", namespace, pod_from_template(spec["template"], None, namespace, job, labels)
            )
            created += 1
        job["status"] = {"succeeded": succeeded, "active": len(active) + created}
        self.store.update("batch/v1", "jobs", namespace, name, job, None, admit=False)
        return created


class StatefulSetController:
    """kubernetes pkg/controller/statefulset/stateful_set_control.go: pods `<set>-<ordinal>`; under
    OrderedReady (the default) ordinal N+1 is created only once N is Running and Ready; under Parallel
    all at once."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def sync(self, namespace: str, name: str) -> int:
        sts = self.store.get("apps/v1", "statefulsets", namespace, name)
        spec = sts["spec"]
        ordered = spec.get("podManagementPolicy", "OrderedReady") == "OrderedReady"
        existing = {p["metadata"]["name"]: p for p in pods_owned_by(self.store, sts)}
        created = 0
        for ordinal in range(int(spec.get("replicas", 1))):
            pod_name = f"{name}-{ordinal}"
            if pod_name not in existing:
                labels = {
                    "statefulset.kubernetes.io/pod-name": pod_name,
                    "apps.kubernetes.io/pod-index": str(ordinal),
                    "controller-revision-hash": revision(spec["template"]),
                }
                self.store.create(
                    "v1", "pods", namespace, pod_from_template(spec["template"], pod_name, namespace, sts, labels)
                )
                created += 1
                if ordered:
                    break
            elif ordered and (existing[pod_name].get("status") or {}).get("phase") != "Running":
                break
        return created


class JobSetController:
    """jobset pkg/controllers/jobset_controller.go (constructJob): a Job `<jobset>-<replicatedJob>-<i>` per
    replica of each replicatedJob, from its template, owned by the JobSet, with the jobset-name and
    replicatedjob-name labels on the Job and its pod template. Creation order: under
    `startupPolicyOrder: InOrder` a replicatedJob's Jobs are made once the previous one's pods all run
    (startup_policy.go); one with `dependsOn` once those it depends on are Ready or Complete
    (depends_on.go)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def _running(self, namespace: str, jobset: str, rjob: str) -> bool:
        pods = [
            p
            for p in self.store.list("v1", "pods", namespace)[0]
            if (p["metadata"].get("labels") or {}).get("jobset.sigs.k8s.io/replicatedjob-name") == rjob
            and p["metadata"]["labels"].get("jobset.sigs.k8s.io/jobset-name") == jobset
        ]
        return bool(pods) and all((p.get("status") or {}).get("phase") in ("Running", "Succeeded") for p in pods)

    def sync(self, namespace: str, name: str) -> list[str]:
        jobset = self.store.get("jobset.x-k8s.io/v1alpha2", "jobsets", namespace, name)
        in_order = (jobset["spec"].get("startupPolicy") or {}).get("startupPolicyOrder") == "InOrder"
        existing = {j["metadata"]["name"] for j in self.store.list("batch/v1", "jobs", namespace)[0]}
        made = []
        previous: str | None = None
        for rjob in jobset["spec"]["replicatedJobs"]:
            waits_for = [d["name"] for d in rjob.get("dependsOn") or []] + ([previous] if in_order and previous else [])
            previous = rjob["name"]
            if not all(self._running(namespace, name, other) for other in waits_for):
                break
            for index in range(int(rjob.get("replicas", 1))):
                if f"{name}-{rjob['name']}-{index}" in existing:
                    continue
                labels = {
                    "jobset.sigs.k8s.io/jobset-name": name,
                    "jobset.sigs.k8s.io/replicatedjob-name": rjob["name"],
                    "jobset.sigs.k8s.io/job-index": str(index),
                }
                spec = copy.deepcopy(rjob["template"]["spec"])
                template_meta = spec["template"].setdefault("metadata", {})
                template_meta["labels"] = {**(template_meta.get("labels") or {}), **labels}
                job = {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {
                        "name": f"{name}-{rjob['name']}-{index}",
                        "namespace": namespace,
                        "labels": labels,
                        "ownerReferences": [owner_ref(jobset)],
                    },
                    "spec": spec,
                }
                made.append(self.store.create("batch/v1", "jobs", namespace, job)["metadata"]["name"])
        return made


class MPIJobController:
    """mpi-operator v2 pkg/controller/mpi_job_controller.go: worker pods `<job>-worker-<i>` from the
    Worker template (newWorker) and a launcher Job `<job>-launcher` from the Launcher template
    (newLauncherJob), both owned by the MPIJob, with the training.kubeflow.org labels."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def sync(self, namespace: str, name: str) -> None:
        mpijob = self.store.get("kubeflow.org/v2beta1", "mpijobs", namespace, name)
        specs = mpijob["spec"]["mpiReplicaSpecs"]
        for index in range(int(specs["Worker"].get("replicas", 1))):
            labels = {
                "training.kubeflow.org/job-name": name,
                "training.kubeflow.org/job-role": "worker",
                "training.kubeflow.org/replica-index": str(index),
            }
            pod = pod_from_template(specs["Worker"]["template"], f"{name}-worker-{index}", namespace, mpijob, labels)
            self.store.create("v1", "pods", namespace, pod)
        launcher_template = copy.deepcopy(specs["Launcher"]["template"])
        meta = launcher_template.setdefault("metadata", {})
        meta["labels"] = {
            **(meta.get("labels") or {}),
            "training.kubeflow.org/job-name": name,
            "training.kubeflow.org/job-role": "launcher",
        }
        self.store.create(
            "batch/v1",
            "jobs",
            namespace,
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": f"{name}-launcher",
                    "namespace": namespace,
                    "labels": {"training.kubeflow.org/job-name": name},
                    "ownerReferences": [owner_ref(mpijob)],
                },
                "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 6, "template": launcher_template},
            },
        )


def kubelet(store: Store, namespace: str) -> int:
    """Bound pods start: phase Running (and Ready)."""
    started = 0
    for pod in store.list("v1", "pods", namespace)[0]:
        status = pod.get("status") or {}
        if pod["spec"].get("nodeName") and status.get("phase") in (None, "Pending"):
            pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
            store.update("v1", "pods", namespace, pod["metadata"]["name"], pod, None, admit=False)
            started += 1
    return started


def finish(store: Store, namespace: str, names: list[str]) -> None:
    """The containers of these pods exit 0: phase Succeeded."""
    for name in names:
        pod = store.get("v1", "pods", namespace, name)
        pod["status"] = {"phase": "Succeeded"}
        store.update("v1", "pods", namespace, name, pod, None, admit=False)


class SparkOperator:
    """The Spark operator submits the application, which creates the driver pod from `spec.driver`
    (labels and annotations of the role, `spark-role: driver`); only once the driver runs does Spark's
    ExecutorPodsAllocator (resource-managers/kubernetes) create the executor pods, owned by the driver
    pod. Requests: cores as cpu, memory plus the overhead (max(384Mi, 10%))."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def _pod(self, app: Obj, role: str, name: str, owner: Obj) -> Obj:
        spec = app["spec"][role]
        memory_mib = int(str(spec["memory"]).rstrip("m"))
        memory = memory_mib + max(384, memory_mib // 10)
        labels = {
            **(spec.get("labels") or {}),
            "spark-role": role,
            "sparkoperator.k8s.io/app-name": app["metadata"]["name"],
        }
        template = {
            "metadata": {"labels": labels, "annotations": dict(spec.get("annotations") or {})},
            "spec": {
                "containers": [
                    {
                        "name": f"spark-kubernetes-{role}",
                        "image": "spark:3.5.0",
                        "resources": {"requests": {"cpu": str(spec["cores"]), "memory": f"{memory}Mi"}},
                    }
                ]
            },
        }
        return pod_from_template(template, name, app["metadata"]["namespace"], owner, {})

    def sync(self, namespace: str, name: str) -> None:
        app = self.store.get("sparkoperator.k8s.io/v1beta2", "sparkapplications", namespace, name)
        pods = {p["metadata"]["name"]: p for p in self.store.list("v1", "pods", namespace)[0]}
        driver_name = f"{name}-driver"
        if driver_name not in pods:
            self.store.create("v1", "pods", namespace, self._pod(app, "driver", driver_name, app))
            return
        driver = pods[driver_name]
        if (driver.get("status") or {}).get("phase") != "Running":
            return
        for index in range(int(app["spec"]["executor"].get("instances", 1))):
            executor = f"{name}-exec-{index + 1}"
            if executor not in pods:
                self.store.create("v1", "pods", namespace, self._pod(app, "executor", executor, driver))


def revision(template: Obj) -> str:
    """A stand-in for controller-revision-hash / pod-template-hash: a digest of the pod template."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]


class StatefulSetRollout:
    """kubernetes pkg/controller/statefulset/stateful_set_control.go, RollingUpdate: pods whose revision
    differs are deleted one at a time from the highest ordinal down, each recreated from the new template
    (by the set's sync) and Running before the next goes."""

    def __init__(self, store: Store) -> None:
        self.store, self.sets = store, StatefulSetController(store)

    def sync(self, namespace: str, name: str) -> None:
        sts = self.store.get("apps/v1", "statefulsets", namespace, name)
        current = revision(sts["spec"]["template"])
        self.sets.sync(namespace, name)
        owned = sorted(pods_owned_by(self.store, sts), key=lambda p: -int(p["metadata"]["name"].rsplit("-", 1)[1]))
        if any((p.get("status") or {}).get("phase") != "Running" for p in owned):
            return  # one at a time: wait for the last one to run
        for pod in owned:
            if (pod["metadata"].get("labels") or {}).get("controller-revision-hash") != current:
                self.store.delete("v1", "pods", namespace, pod["metadata"]["name"])
                return


class DeploymentController:
    """kubernetes pkg/controller/deployment (rolling.go): a ReplicaSet per template revision, pods
    labelled pod-template-hash and owned by it; RollingUpdate with maxSurge 1 and maxUnavailable 0 adds
    one new pod, and removes one old pod once a new one runs."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def sync(self, namespace: str, name: str) -> None:
        deployment = self.store.get("apps/v1", "deployments", namespace, name)
        template = deployment["spec"]["template"]
        current = revision(template)
        replicas = int(deployment["spec"].get("replicas", 1))
        live = [
            p
            for p in self.store.list("v1", "pods", namespace)[0]
            if (p["metadata"].get("labels") or {}).get("app.kubernetes.io/deployment") == name
        ]
        new = [p for p in live if p["metadata"]["labels"].get("pod-template-hash") == current]
        old = [p for p in live if p not in new]
        running_new = [p for p in new if (p.get("status") or {}).get("phase") == "Running"]
        if old and running_new and len(live) > replicas:
            self.store.delete("v1", "pods", namespace, old[0]["metadata"]["name"])
            return
        if len(new) < replicas and len(live) < replicas + 1:
            replica_set = {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {"name": f"{name}-{current}", "namespace": namespace, "uid": f"rs-{current}"},
            }
            labels = {"app.kubernetes.io/deployment": name, "pod-template-hash": current}
            self.store.create(
                "v1", "pods", namespace, pod_from_template(template, None, namespace, replica_set, labels)
            )


class LeaderWorkerSetController:
    """lws pkg/controllers: a leader StatefulSet `<lws>` owned by the LeaderWorkerSet makes one leader pod
    per group; each leader pod owns a worker StatefulSet `<lws>-<group>` making size-1 workers. Every pod
    carries the leaderworkerset.sigs.k8s.io/name and group-index labels. Both StatefulSets are created
    through admission, as the operator's are."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def _statefulset(self, name: str, namespace: str, owner: Obj, template: Obj, replicas: int) -> Obj:
        try:
            return self.store.get("apps/v1", "statefulsets", namespace, name)
        except Reject:
            pass
        sts = {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": namespace, "ownerReferences": [owner_ref(owner)]},
            "spec": {"replicas": replicas, "podManagementPolicy": "Parallel", "template": copy.deepcopy(template)},
        }
        return self.store.create("apps/v1", "statefulsets", namespace, sts)

    def sync(self, namespace: str, name: str) -> None:
        lws = self.store.get("leaderworkerset.x-k8s.io/v1", "leaderworkersets", namespace, name)
        lwt = lws["spec"]["leaderWorkerTemplate"]
        size, groups = int(lwt.get("size", 1)), int(lws["spec"].get("replicas", 1))
        leaders = self._statefulset(name, namespace, lws, lwt.get("leaderTemplate") or lwt["workerTemplate"], groups)
        existing = {p["metadata"]["name"] for p in self.store.list("v1", "pods", namespace)[0]}
        for group in range(groups):
            labels = {"leaderworkerset.sigs.k8s.io/name": name, "leaderworkerset.sigs.k8s.io/group-index": str(group)}
            leader_name = f"{name}-{group}"
            if leader_name not in existing:
                pod = pod_from_template(leaders["spec"]["template"], leader_name, namespace, leaders, labels)
                self.store.create("v1", "pods", namespace, pod)
            leader = self.store.get("v1", "pods", namespace, leader_name)
            workers = self._statefulset(f"{name}-{group}", namespace, leader, lwt["workerTemplate"], size - 1)
            for index in range(1, size):
                worker_name = f"{name}-{group}-{index}"
                if worker_name not in existing:
                    pod = pod_from_template(workers["spec"]["template"], worker_name, namespace, workers, labels)
                    self.store.create("v1", "pods", namespace, pod)
