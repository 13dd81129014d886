"""Membership by ownership: a pod is a member of a workload's gang only when that workload's controllers
made it (its controller ownerReference); one that merely carries the gang's labels is refused at CREATE."""

from __future__ import annotations

from typing import Any

import pytest

from tests import builders as b
from webhook.admission.decide import admit
from webhook.backends import make

STAMP = {"labels": {"gangkeeper.io/group": "job-train"}, "annotations": {"gangkeeper.io/workload": "Job/train"}}


def copied(owner: tuple[str, str, str] | None = None, **labels: str) -> dict[str, Any]:
    """A pod whose YAML was copied from a member of Job train's gang."""
    return b.pod(
        "copy",
        labels={**STAMP["labels"], **labels},
        annotations=dict(STAMP["annotations"]),
        owner=owner,
    )


@pytest.mark.parametrize(
    ("case", "pod", "found"),
    [
        ("the gang's stamp, no owner", copied(), "it has no controller ownerReference"),
        (
            "the Job controller's labels, no owner",
            b.pod("copy", labels={"batch.kubernetes.io/job-name": "train"}, owned=False),
            "it has no controller ownerReference",
        ),
        ("an owner of another kind", copied(owner=("v1", "ConfigMap", "mine")), "its controller is a ConfigMap"),
    ],
)
@pytest.mark.parametrize("backend", ["gate", "volcano"])
def test_a_pod_with_a_gangs_labels_that_its_workload_does_not_own_is_refused(
    case: str, pod: dict[str, Any], found: str, backend: str
) -> None:
    outcome = admit(pod, "CREATE", make(backend), "team-a")
    assert not outcome.allowed and outcome.code == 403, case
    assert outcome.message.startswith('Pod "copy" is forbidden: metadata.ownerReferences: Forbidden: gang job-train')
    assert found in outcome.message and "gangkeeper.io/group-name" in outcome.message


def test_the_jobs_own_pod_is_a_member() -> None:
    outcome = admit(copied(owner=("batch/v1", "Job", "train")), "CREATE", make("gate"), "team-a")
    assert outcome.allowed and outcome.mutated is not None
    assert outcome.mutated["spec"]["schedulingGates"] == [{"name": "gangkeeper.io/gang-gate"}]


def test_an_orphaned_member_can_still_be_updated() -> None:
    """`kubectl delete job --cascade=orphan`: the garbage collector takes the ownerReference off."""
    old = copied(owner=("batch/v1", "Job", "train"))
    orphan = copied()
    assert admit(orphan, "UPDATE", make("gate"), "team-a", old=old).allowed


def test_a_bare_pod_group_needs_no_owner() -> None:
    pod = b.pod("mpi-0", labels={"gangkeeper.io/group-name": "mpi"}, annotations={"gangkeeper.io/group-size": "2"})
    assert admit(pod, "CREATE", make("gate"), "team-a").allowed


# --- whole-gang preemption in the native API's own words ----------------------------------------
@pytest.mark.parametrize(
    ("version", "mode"),
    [("1.36", "PodGroup"), ("1.37", {"all": {}})],  # k8s.io/api scheduling v1alpha2 / v1beta1 DisruptionMode
)
def test_native_group_objects_ask_for_whole_gang_preemption_at_the_workloads_priority(
    version: str, mode: object
) -> None:
    from tests.schemas import validate
    from webhook.backends import NamespaceInfo
    from webhook.gangs import analyze

    job = b.job(spec=b.pod_spec(b.container("1", "1Gi"), priorityClassName="batch-high"))
    outcome = admit(job, "CREATE", make("native", kubernetes_version=version), "team-a")
    assert outcome.allowed
    objects = make("native", kubernetes_version=version).group_objects(analyze(job).gangs, NamespaceInfo())
    for obj in objects:
        validate(obj, version)
    workload = next(o for o in objects if o["kind"] == "Workload")
    group = next(o for o in objects if o["kind"] == "PodGroup")
    for fields in (workload["spec"]["podGroupTemplates"][0], group["spec"]):
        assert fields["disruptionMode"] == mode and fields["priorityClassName"] == "batch-high"


def test_native_135_has_no_preemption_fields() -> None:
    from tests.schemas import validate
    from webhook.backends import NamespaceInfo
    from webhook.gangs import analyze

    job = b.job(spec=b.pod_spec(b.container("1", "1Gi"), priorityClassName="batch-high"))
    (workload,) = make("native", kubernetes_version="1.35").group_objects(analyze(job).gangs, NamespaceInfo())
    validate(workload, "1.35")
    assert "disruptionMode" not in str(workload)
