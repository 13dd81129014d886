"""Where each workload kind lives in the API, to read the gang a pod's stamp names."""

from __future__ import annotations

from webhook.controller.kube import Resource

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
