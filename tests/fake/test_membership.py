"""Membership by ownership: a pod is a member of a workload's gang only when that workload's controllers
made it (its controller ownerReference); one that merely carries the gang's labels is refused at CREATE."""

from __future__ import annotations

from typing import Any

import pytest

from tests import builders as b
from tests.apiserver import TestApiServer
from tests.cluster import Clock, add_job, add_job_pods, node, pods
from webhook.admission.decide import admit
from webhook.backends import make
from webhook.controller.run.reconciler import Controller
from webhook.kube import Api

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


# --- membership by identity: the owner's name, not only its kind ----------------------------------
def test_a_pod_of_another_job_with_a_copied_stamp_is_refused() -> None:
    """A second Job whose template was copied from Job train's: its pods are not train's members."""
    pod = copied(owner=("batch/v1", "Job", "train-again"))
    outcome = admit(pod, "CREATE", make("gate"), "team-a")
    assert not outcome.allowed and outcome.code == 403
    assert "its controller is Job train-again, not one of Job train" in outcome.message


def rerun_of_train(name: str = "train-again") -> dict[str, Any]:
    """`kubectl get job train -o yaml`, renamed: the stored template carries train's stamp."""
    job = b.job(name)
    template_meta = job["spec"]["template"].setdefault("metadata", {})
    template_meta["labels"] = {**STAMP["labels"], "batch.kubernetes.io/job-name": "train"}
    template_meta["annotations"] = dict(STAMP["annotations"])
    return job


@pytest.mark.parametrize("backend", ["gate", "volcano", "coscheduling"])
def test_a_job_rerun_from_a_copy_of_another_jobs_yaml_gets_its_own_gang(backend: str) -> None:
    outcome = admit(rerun_of_train(), "CREATE", make(backend), "team-a")
    assert outcome.allowed and outcome.mutated is not None
    meta = outcome.mutated["spec"]["template"]["metadata"]
    assert meta["labels"]["gangkeeper.io/group"] == "job-train-again"
    assert meta["annotations"]["gangkeeper.io/workload"] == "Job/train-again"
    assert [g.name for g in outcome.gangs] == ["job-train-again"]
    assert "gets its own gang job-train-again: spec.template had a copied stamp of Job train" in outcome.warnings


def test_a_template_stamped_by_its_own_controller_owner_keeps_that_gang() -> None:
    """A workload made by a parent whose gang its pods join keeps the parent's stamp."""
    job = rerun_of_train("train-child")
    job["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u", "controller": True}
    ]
    outcome = admit(job, "CREATE", make("gate"), "team-a")
    assert outcome.allowed and not outcome.gangs
    assert "already belongs to gang job-train of Job train" in outcome.reason


@pytest.mark.parametrize(
    ("case", "pod", "group"),
    [
        ("the Job's own pod", copied(owner=("batch/v1", "Job", "train")), "job-train"),
        ("a skip-labelled copy, no owner", copied(**{"gangkeeper.io/skip": "true"}), ""),
        ("a pod of a rerun Job", copied(owner=("batch/v1", "Job", "train-again")), ""),
        ("an owner of another kind", copied(owner=("v1", "ConfigMap", "train")), ""),
        (
            "a bare pod group",
            b.pod(
                "mpi-0",
                labels={"gangkeeper.io/group-name": "mpi", "gangkeeper.io/group": "pg-mpi"},
                annotations={"gangkeeper.io/workload": "Pod/mpi"},
            ),
            "pg-mpi",
        ),
        ("labels without the workload stamp", b.pod("x", labels={"gangkeeper.io/group": "job-train"}), ""),
    ],
)
def test_the_controller_counts_a_pod_only_in_its_workloads_gang(case: str, pod: dict[str, Any], group: str) -> None:
    from webhook.controller.observe.cluster import ClusterIndex
    from webhook.gangs.pod import member_group

    assert member_group(pod) == group, case
    pod["spec"]["schedulingGates"] = [{"name": "gangkeeper.io/gang-gate"}]
    index = ClusterIndex()
    index.replace_pods([pod])
    assert {view.name for view in index.gangs().values()} == ({f"{group}"} if group else set()), case
    assert len(index.stray_gated) == (0 if group else 1), case


@pytest.mark.parametrize(
    ("workload", "owner", "member"),
    [
        ("Deployment/web", ("apps/v1", "ReplicaSet", "web-5d4f8c"), True),
        ("Deployment/web", ("apps/v1", "ReplicaSet", "webapp-5d4f8c"), False),
        ("JobSet/js", ("batch/v1", "Job", "js-workers-0"), True),
        ("JobSet/js", ("batch/v1", "Job", "other-workers-0"), False),
        ("RayJob/rj", ("ray.io/v1", "RayCluster", "rj-x7k2p"), True),
        ("RayCluster/rc", ("ray.io/v1", "RayCluster", "rc-copy"), False),
        ("PyTorchJob/pt", ("kubeflow.org/v1", "PyTorchJob", "pt"), True),
        ("PyTorchJob/pt", ("kubeflow.org/v1", "PyTorchJob", "pt-2"), False),
        ("MPIJob/m", ("batch/v1", "Job", "m-launcher"), True),
    ],
)
def test_each_kind_knows_the_names_its_operator_gives_the_pods_owners(
    workload: str, owner: tuple[str, str, str], member: bool
) -> None:
    from webhook.gangs import kinds
    from webhook.gangs.pod import member_group, stamped_identity

    kind_name, _, name = workload.partition("/")
    kind = kinds.by_name(kind_name)
    assert kind is not None
    gid = kind.identity(name)
    pod = b.pod(
        "p", labels={"gangkeeper.io/group": gid.name}, annotations={"gangkeeper.io/workload": workload}, owner=owner
    )
    assert stamped_identity(pod) == gid
    assert (member_group(pod) == gid.name) is member


# --- a running gang is not taken apart by an autoscaler's voluntary disruption ---------------------
@pytest.mark.parametrize("backend", ["gate", "native", "volcano"])
def test_gang_pods_ask_karpenter_not_to_disrupt_their_node(backend: str) -> None:
    outcome = admit(copied(owner=("batch/v1", "Job", "train")), "CREATE", make(backend), "team-a")
    assert outcome.mutated is not None
    assert outcome.mutated["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true"


def test_a_pods_own_disruption_word_and_the_setting_are_kept() -> None:
    pod = copied(owner=("batch/v1", "Job", "train"))
    pod["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] = "false"
    outcome = admit(pod, "CREATE", make("gate"), "team-a")
    assert (
        outcome.mutated is not None
        and outcome.mutated["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "false"
    )
    outcome = admit(
        copied(owner=("batch/v1", "Job", "train")), "CREATE", make("gate"), "team-a", protect_from_disruption="false"
    )
    assert (
        outcome.mutated is not None and "karpenter.sh/do-not-disrupt" not in outcome.mutated["metadata"]["annotations"]
    )


def test_a_namespace_opts_out_of_disruption_protection_by_its_label() -> None:
    """gangkeeper.io/protect-from-disruption: "false" on the namespace: its gang pods are left to
    Karpenter's consolidation and drift; any other value, or none, keeps the protection."""
    from webhook.backends import NamespaceInfo

    def marked(labels: dict[str, str]) -> bool:
        pod = copied(owner=("batch/v1", "Job", "train"))
        outcome = admit(pod, "CREATE", make("gate"), "team-a", namespace_info=NamespaceInfo(labels=labels))
        assert outcome.mutated is not None
        return outcome.mutated["metadata"]["annotations"].get("karpenter.sh/do-not-disrupt") == "true"

    assert not marked({"gangkeeper.io/enabled": "true", "gangkeeper.io/protect-from-disruption": "false"})
    assert marked({"gangkeeper.io/enabled": "true", "gangkeeper.io/protect-from-disruption": "true"})
    assert marked({"gangkeeper.io/enabled": "true"})


@pytest.mark.parametrize(
    ("setting", "label", "mark"),
    [
        ("true", None, "true"),
        ("12h", None, "12h"),  # the Configuration's bound
        ("true", "90m", "90m"),  # the namespace's own bound replaces the Configuration's
        ("12h", "1h30m", "1h30m"),
        ("12h", "true", "12h"),  # "true" on the namespace: as the Configuration says
        ("12h", "soon", "12h"),  # not a duration Karpenter could parse: as the Configuration says
        ("12h", "0s", "12h"),  # not positive: Karpenter would read it as no protection at all
        ("false", "90m", None),  # the operator's switch is off for every namespace
        ("12h", "false", None),
    ],
)
def test_a_bound_on_disruption_protection_is_the_annotations_value(
    setting: str, label: str | None, mark: str | None
) -> None:
    """Karpenter reads a duration in karpenter.sh/do-not-disrupt as a bound (pkg/utils/pod/scheduling.go
    IsDoNotDisruptActive): the member may be disrupted once it has run that long. The Configuration sets
    it for the cluster, a namespace's label for itself."""
    from webhook.backends import NamespaceInfo

    labels = {"gangkeeper.io/enabled": "true"} | ({"gangkeeper.io/protect-from-disruption": label} if label else {})
    pod = copied(owner=("batch/v1", "Job", "train"))
    outcome = admit(
        pod,
        "CREATE",
        make("gate"),
        "team-a",
        namespace_info=NamespaceInfo(labels=labels),
        protect_from_disruption=setting,
    )
    assert outcome.mutated is not None
    assert outcome.mutated["metadata"]["annotations"].get("karpenter.sh/do-not-disrupt") == mark


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("12h", 43200.0), ("1h30m", 5400.0), ("2.5h", 9000.0), ("90s", 90.0), ("500ms", 0.5), (".5h", 1800.0)],
)
def test_go_durations_read_as_karpenter_reads_them(text: str, seconds: float) -> None:
    from webhook.admission.checks import duration_seconds

    assert duration_seconds(text) == seconds


@pytest.mark.parametrize("text", ["", "0s", "12", "h", "1d", "-5m", "12 h", "true", "1h-30m"])
def test_what_is_not_a_positive_go_duration_is_not_a_bound(text: str) -> None:
    from webhook.admission.checks import duration_seconds, protection

    assert duration_seconds(text) is None
    if text not in ("true",):
        with pytest.raises(ValueError, match="positive duration"):
            protection(text)


# --- membership by uid: a workload deleted and made again under its name --------------------------
def jobset_job(uid: str = "js-uid-1") -> dict[str, Any]:
    """A Job as the JobSet controller makes it: its template carries JobSet js's stamp, and its
    controller ownerReference is that JobSet, by name and uid."""
    job = b.job("js-workers-0")
    job["spec"]["template"]["metadata"] = {
        "labels": {"gangkeeper.io/group": "jobset-js"},
        "annotations": {"gangkeeper.io/workload": "JobSet/js"},
    }
    job["metadata"]["ownerReferences"] = [
        {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "js", "uid": uid, "controller": True}
    ]
    return job


def test_a_job_its_jobset_made_carries_the_jobsets_uid_to_its_pods() -> None:
    outcome = admit(jobset_job(), "CREATE", make("gate"), "team-a")
    assert outcome.allowed and not outcome.gangs and outcome.mutated is not None
    annotations = outcome.mutated["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {"gangkeeper.io/workload": "JobSet/js", "gangkeeper.io/workload-uid": "js-uid-1"}
    assert outcome.patch == [
        {
            "op": "add",
            "path": "/spec/template/metadata/annotations/gangkeeper.io~1workload-uid",
            "value": "js-uid-1",
        }
    ]


def test_a_workloads_copied_uid_comes_off_its_own_template() -> None:
    """`kubectl get job js-workers-0 -o yaml`, its owner taken out, applied: a Job of its own."""
    job = jobset_job()
    del job["metadata"]["ownerReferences"]
    job["spec"]["template"]["metadata"]["annotations"]["gangkeeper.io/workload-uid"] = "js-uid-1"
    outcome = admit(job, "CREATE", make("gate"), "team-a")
    assert outcome.allowed and outcome.mutated is not None
    annotations = outcome.mutated["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {"gangkeeper.io/workload": "Job/js-workers-0"}


@pytest.mark.parametrize(
    ("case", "owner", "annotations", "uid"),
    [
        ("a Job's pod: its owner's uid", ("batch/v1", "Job", "train"), {}, "uid-of-train"),
        (
            "a JobSet's Job's pod: the stamped uid",
            ("batch/v1", "Job", "js-workers-0"),
            {"gangkeeper.io/workload": "JobSet/js", "gangkeeper.io/workload-uid": "js-uid-1"},
            "js-uid-1",
        ),
        (
            "a Job's pod with a stamped uid: its owner's uid wins",
            ("batch/v1", "Job", "train"),
            {"gangkeeper.io/workload-uid": "forged"},
            "uid-of-train",
        ),
        (
            "a JobSet's Job's pod made before uids were stamped",
            ("batch/v1", "Job", "js-workers-0"),
            {"gangkeeper.io/workload": "JobSet/js"},
            "",
        ),
    ],
)
def test_a_pod_says_the_uid_of_the_workload_it_was_made_for(
    case: str, owner: tuple[str, str, str], annotations: dict[str, str], uid: str
) -> None:
    from webhook.gangs.pod import workload_uid

    stamp = {"gangkeeper.io/workload": "Job/train", **annotations}
    group = "jobset-js" if stamp["gangkeeper.io/workload"] == "JobSet/js" else "job-train"
    pod = b.pod("p", labels={"gangkeeper.io/group": group}, annotations=stamp, owner=owner)
    if owner[2] == "train":
        pod["metadata"]["ownerReferences"][0]["uid"] = "uid-of-train"
    assert workload_uid(pod) == uid, case


def test_the_pods_of_a_deleted_job_are_no_members_of_its_namesakes_gang(apiserver: TestApiServer, api: Api) -> None:
    """Job train deleted while its two gated pods wait for the garbage collector, and made again: the
    old pods carry the same name and labels but its old uid. Counted by name, they were released in
    the new gang's place (and deleted a moment later by the garbage collector)."""
    store = apiserver.store
    store.create("v1", "nodes", "", node("n1", cpu="8"))  # room for one gang of two 4-CPU pods
    old = add_job(store, parallelism=2, cpu="4")
    old_pods = add_job_pods(store, old)
    store.delete("batch/v1", "jobs", "team-a", "train")  # the garbage collector has not run yet
    new = add_job(store, parallelism=2, cpu="4")
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    new_pods = add_job_pods(store, new)
    decision = Controller(api, clock=Clock()).reconcile_once()["team-a/job-train"]
    assert decision.state == "Release"
    assert sorted(decision.release) == sorted(new_pods)
    assert {p["metadata"]["name"] for p in pods(store) if p["spec"].get("schedulingGates")} == set(old_pods)


def made_for(uid: str) -> dict[str, Any]:
    """A pod of Job train's gang that its Job controller made for the Job of uid `uid`."""
    pod = copied(owner=("batch/v1", "Job", "train"))
    pod["metadata"]["ownerReferences"][0]["uid"] = uid
    return pod


@pytest.mark.parametrize(
    ("case", "pod", "now", "allowed"),
    [
        ("made for the Job that has the name now", made_for("uid-2"), "uid-2", True),
        ("made for the Job deleted before it", made_for("uid-1"), "uid-2", False),
        ("the Job cannot be read now (fails open: the controller's count holds it)", made_for("uid-1"), None, True),
        ("a JobSet's pod, by the uid on its Job's template", None, "js-uid-2", False),
    ],
)
def test_a_pod_made_for_an_earlier_workload_of_its_name_is_refused(
    case: str, pod: dict[str, Any] | None, now: str | None, allowed: bool
) -> None:
    if pod is None:  # made by a Job of JobSet js (uid js-uid-1), which was deleted and made again
        job_template = admit(jobset_job("js-uid-1"), "CREATE", make("gate"), "team-a").mutated["spec"]["template"]
        meta = job_template["metadata"]
        pod = b.pod("js-workers-0-0", labels=meta["labels"], annotations=meta["annotations"])
        pod["metadata"]["ownerReferences"] = jobset_job()["metadata"]["ownerReferences"]
        pod["metadata"]["ownerReferences"][0].update(kind="Job", apiVersion="batch/v1", name="js-workers-0")
    asked: list[tuple[str, ...]] = []

    def uids(*key: str) -> str | None:
        asked.append(key)
        return now

    outcome = admit(pod, "CREATE", make("gate"), "team-a", workload_uids=uids)
    assert outcome.allowed is allowed, (case, outcome.message)
    assert len(asked) == 1 and asked[0][:3] in (("Job", "team-a", "train"), ("JobSet", "team-a", "js")), asked
    if not allowed:
        assert outcome.code == 403 and "metadata.ownerReferences: Forbidden: it was made for" in outcome.message
        assert "which is not the uid of a" in outcome.message
        assert now is not None and now not in outcome.message  # another object's uid is not the pod's to read


def test_the_workloads_uid_is_read_once_and_a_contradicted_claim_at_most_once_a_second(
    apiserver: TestApiServer, api: Api
) -> None:
    from webhook.admission.workloads import ABSENT, WorkloadUids

    store, now = apiserver.store, [0.0]
    uid = add_job(store, parallelism=2, cpu="1")["metadata"]["uid"]
    uids = WorkloadUids(api, clock=lambda: now[0])

    def reads() -> int:
        return sum(1 for method, path in store.requests if method == "GET" and "/jobs/" in path)

    assert [uids("Job", "team-a", "train", uid) for _ in range(5)] == [uid] * 5
    assert reads() == 1  # a gang's pods come in a burst: one GET for all
    assert uids("Job", "team-a", "train", "forged") == uid  # a contradicted claim: read afresh, refused
    assert reads() == 2
    assert [uids("Job", "team-a", "train", "forged") for _ in range(50)] == [None] * 50
    assert reads() == 2  # more within the second: unknown (admitted, left out by the controller), no read
    assert uids("Job", "team-a", "train", uid) == uid  # the workload's own pods are still answered
    now[0] += 1.5
    assert uids("Job", "team-a", "train", "forged") == uid and reads() == 3
    assert uids("Job", "team-a", "gone", "any") == ABSENT  # not found: refused as another object's would be
    assert [uids("Job", "team-a", "gone", "any") for _ in range(20)] == [None] * 20
    assert sum(1 for _, path in store.requests if path.endswith("/jobs/gone")) == 1
    assert uids("Widget", "team-a", "train", "any") is None  # a kind gangkeeper does not read


def test_a_workload_that_cannot_be_read_admits_the_pod(
    apiserver: TestApiServer, api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    from tests.apiserver import Reject
    from webhook.admission import workloads

    store = apiserver.store
    add_job(store, parallelism=2, cpu="1")
    uids = workloads.WorkloadUids(api)
    busy = Reject(429, "TooManyRequests", "slow down")
    store.fail_next.append(lambda method, path: busy if "/jobs/" in path else None)
    assert uids("Job", "team-a", "train", "uid-1") is None
    monkeypatch.setattr(workloads, "READ_SECONDS", 0.2)

    def hangs(method: str, path: str) -> None:
        if "/jobs/" in path:
            time.sleep(1)

    store.fail_next.append(hangs)
    later = workloads.WorkloadUids(api)
    started = time.monotonic()
    assert later("Job", "team-a", "train", "uid-1") is None
    # given up, not waited for: one deadline for every attempt (urllib3's own three retries made it 4x)
    assert time.monotonic() - started < 0.5


def test_a_forged_review_learns_nothing_of_whether_another_namespace_has_a_workload(
    apiserver: TestApiServer, api: Api
) -> None:
    """A review naming team-b's Job train (it exists) and one naming team-b's Job absent (it does not), each
    for a pod claiming a made-up uid: the same refusal, word for word but the name; the answer once
    differed (403 against 200) and told who has what. A 404 that does not name the object (a version not
    served) still admits, as any read that cannot tell does."""
    from webhook.admission.workloads import WorkloadUids

    store = apiserver.store
    add_job(store, "train", parallelism=2, cpu="1", namespace="team-b")
    uids = WorkloadUids(api)

    def forged(name: str) -> Any:
        pod = copied(owner=("batch/v1", "Job", name))
        pod["metadata"]["namespace"] = "team-b"
        pod["metadata"]["labels"]["batch.kubernetes.io/job-name"] = name
        pod["metadata"]["labels"]["gangkeeper.io/group"] = f"job-{name}"
        pod["metadata"]["annotations"]["gangkeeper.io/workload"] = f"Job/{name}"
        pod["metadata"]["ownerReferences"][0]["uid"] = "made-up"
        return admit(pod, "CREATE", make("gate"), "team-b", workload_uids=uids)

    there, absent = forged("train"), forged("absent")
    assert (there.allowed, there.code) == (absent.allowed, absent.code) == (False, 403), (there, absent)
    assert there.message.replace("train", "NAME") == absent.message.replace("absent", "NAME")
