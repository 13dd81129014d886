"""Where each workload kind lives in the API, to read the gang a pod's stamp names."""

from __future__ import annotations

from typing import Any

from webhook import contract
from webhook.controller.kube import Resource

SUSPENDED_ANNOTATION = f"{contract.PREFIX}/suspended"  # set while gangkeeper holds the workload suspended

WORKLOAD_RESOURCES = {
    "Job": Resource("batch/v1", "jobs"),
    "StatefulSet": Resource("apps/v1", "statefulsets"),
    "Deployment": Resource("apps/v1", "deployments"),
    "LeaderWorkerSet": Resource("leaderworkerset.x-k8s.io/v1", "leaderworkersets"),
    "JobSet": Resource("jobset.x-k8s.io/v1alpha2", "jobsets"),
    "PyTorchJob": Resource("kubeflow.org/v1", "pytorchjobs"),
    "TFJob": Resource("kubeflow.org/v1", "tfjobs"),
    "XGBoostJob": Resource("kubeflow.org/v1", "xgboostjobs"),
    "JAXJob": Resource("kubeflow.org/v1", "jaxjobs"),
    "MPIJob": Resource("kubeflow.org/v1", "mpijobs"),
    "RayCluster": Resource("ray.io/v1", "rayclusters"),
    "RayJob": Resource("ray.io/v1", "rayjobs"),
    "SparkApplication": Resource("sparkoperator.k8s.io/v1beta2", "sparkapplications"),
    # never a gang's own workload (its JobSet is); read and suspended on the JobSet's behalf
    "TrainJob": Resource("trainer.kubeflow.org/v1alpha1", "trainjobs"),
}


# Kinds that another operator serves at another version: mpi-operator v2 serves MPIJob at v2beta1
# (training-operator served v1). Each is watched where served, and read at the version being watched.
OTHER_VERSIONS = {"MPIJob": (Resource("kubeflow.org/v2beta1", "mpijobs"),)}


def all_workload_resources() -> list[Resource]:
    return [*WORKLOAD_RESOURCES.values(), *(r for versions in OTHER_VERSIONS.values() for r in versions)]


def group_resource(api_version: str, kind: str) -> Resource:
    """The collection of a synthesized group object (PodGroup, Workload)."""
    return Resource(api_version, kind.lower() + "s")


# Where each kind with a suspend field keeps it. A timed-out gang of these kinds is requeued by
# suspending and later resuming its workload: the owner then deletes its pods without counting them as
# failures (batch/v1 Job: KEP-2232, pkg/controller/job; JobSet spec.suspend; training-operator and
# mpi-operator runPolicy.suspend; KubeRay RayJob spec.suspend), where evicting them would spend the
# workload's own retry budget (the Job controller counts a pod deleted before success as failed).
SUSPEND_PATHS: dict[str, tuple[str, ...]] = {
    "Job": ("spec", "suspend"),
    "JobSet": ("spec", "suspend"),
    "PyTorchJob": ("spec", "runPolicy", "suspend"),
    "TFJob": ("spec", "runPolicy", "suspend"),
    "XGBoostJob": ("spec", "runPolicy", "suspend"),
    "JAXJob": ("spec", "runPolicy", "suspend"),
    "MPIJob": ("spec", "runPolicy", "suspend"),
    "RayJob": ("spec", "suspend"),
    "TrainJob": ("spec", "suspend"),
}


def nested(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """{"spec": {"runPolicy": {"suspend": value}}} for ("spec", "runPolicy", "suspend")."""
    for key in reversed(path):
        value = {key: value}
    return value  # type: ignore[no-any-return]
