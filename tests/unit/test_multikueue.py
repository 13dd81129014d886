"""A workload Kueue's MultiKueue dispatches: validated and previewed on the manager, nothing written there;
its copy in the worker cluster (as MultiKueue makes it) gets its gang from the worker's gangkeeper."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests import builders as b
from tests.unit.test_decide import RUNNING
from webhook.admission.decide import admit
from webhook.backends import make
from webhook.gangs import kinds

MULTIKUEUE = "kueue.x-k8s.io/multikueue"


def dispatched_job(**extra: Any) -> dict[str, Any]:
    job = b.job(parallelism=8, managedBy=MULTIKUEUE, **extra)
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "lq"}
    return job


def workers_copy(job: dict[str, Any]) -> dict[str, Any]:
    """The Job MultiKueue creates in the worker (kueue job_multikueue_adapter.go SyncJob): metadata cloned
    for creation, its managedBy cleared, the prebuilt Workload and origin labels added."""
    remote = copy.deepcopy(job)
    remote["spec"].pop("managedBy", None)
    remote["spec"].pop("selector", None)
    remote["metadata"]["labels"] |= {
        "kueue.x-k8s.io/prebuilt-workload-name": "job-train-1a2b3",
        "kueue.x-k8s.io/multikueue-origin": "multikueue",
    }
    return remote


@pytest.mark.parametrize("backend", ["gate", "native", "volcano", "coscheduling"])
def test_the_manager_writes_nothing_and_previews_the_gang(backend: str) -> None:
    job = dispatched_job()
    outcome = admit(job, "CREATE", make(backend), namespace="team-a", controller=RUNNING)
    assert outcome.allowed and outcome.rule == "dispatched_elsewhere"
    assert not outcome.patch and not outcome.group_objects and outcome.mutated is None
    assert [g.min_member for g in outcome.gangs] == [8]
    assert any("gangkeeper starts them whole (gang job-train: 8 pods" in w for w in outcome.warnings)


def test_the_manager_still_refuses_a_bad_gang_at_apply() -> None:
    job = dispatched_job(annotations={"gangkeeper.io/min-member": "many"})
    outcome = admit(job, "CREATE", make("gate"), namespace="team-a", controller=RUNNING)
    assert not outcome.allowed and outcome.code == 422
    assert "gangkeeper.io/min-member" in outcome.message


def test_a_job_managed_by_another_controller_in_this_cluster_is_stamped_as_usual() -> None:
    """Only a multi-cluster dispatcher's value means the pods are made elsewhere."""
    job = b.job(managedBy="example.com/my-controller")
    assert kinds.dispatched_by(job) is None
    outcome = admit(job, "CREATE", make("gate"), namespace="team-a", controller=RUNNING)
    assert outcome.rule == "stamped" and outcome.patch


@pytest.mark.parametrize("backend", ["gate", "native"])
def test_the_workers_copy_gets_its_own_gang(backend: str) -> None:
    manager = admit(dispatched_job(), "CREATE", make(backend), namespace="team-a", controller=RUNNING)
    assert manager.mutated is None  # what MultiKueue copies is the user's Job as applied
    outcome = admit(workers_copy(dispatched_job()), "CREATE", make(backend), namespace="team-a", controller=RUNNING)
    assert outcome.allowed and outcome.rule == "stamped"
    assert outcome.mutated is not None
    template = outcome.mutated["spec"]["template"]
    assert template["metadata"]["labels"]["gangkeeper.io/group"] == "job-train"
    if backend == "native":
        assert {o["kind"] for o in outcome.group_objects} >= {"Workload"}


@pytest.mark.parametrize("backend", ["gate", "native", "volcano", "coscheduling"])
def test_the_marks_of_a_call_before_kueue_defaulted_managed_by_come_off_when_it_calls_again(backend: str) -> None:
    """Kueue's webhook sets managedBy after gangkeeper's ran (names in order); reinvoked, gangkeeper takes
    its first call's marks off so the worker's copy starts clean, the user's own template untouched."""
    job = dispatched_job()
    del job["spec"]["managedBy"]
    job["spec"]["template"]["metadata"] = {"labels": {"app": "train"}, "annotations": {"team": "a"}}
    first = admit(job, "CREATE", make(backend), namespace="team-a", controller=RUNNING)
    assert first.rule == "stamped" and first.mutated is not None
    defaulted = copy.deepcopy(first.mutated)
    defaulted["spec"]["managedBy"] = MULTIKUEUE
    again = admit(defaulted, "CREATE", make(backend), namespace="team-a", controller=RUNNING)
    assert again.rule == "dispatched_elsewhere" and again.mutated is not None
    expected = copy.deepcopy(job)
    expected["spec"]["managedBy"] = MULTIKUEUE
    template = again.mutated["spec"]["template"]
    assert template["metadata"]["labels"] == {"app": "train"}
    assert template["metadata"]["annotations"] == {"team": "a"}
    assert {k: v for k, v in template["spec"].items()} == expected["spec"]["template"]["spec"]


@pytest.mark.parametrize(
    ("obj", "path"),
    [
        (b.job(), ("spec", "managedBy")),
        ({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "spec": {}}, ("spec", "managedBy")),
        (
            {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "spec": {"runPolicy": {}}},
            ("spec", "runPolicy", "managedBy"),
        ),
        ({"apiVersion": "ray.io/v1", "kind": "RayJob", "spec": {}}, ("spec", "managedBy")),
        (
            {"apiVersion": "batch/v1", "kind": "CronJob", "spec": {"jobTemplate": {"spec": {}}}},
            ("spec", "jobTemplate", "spec", "managedBy"),
        ),
    ],
)
def test_each_kind_with_a_managed_by_field_is_read_there(obj: dict[str, Any], path: tuple[str, ...]) -> None:
    assert kinds.dispatched_by(obj) is None
    holder = obj
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = MULTIKUEUE
    assert kinds.dispatched_by(obj) == "Kueue's MultiKueue"
