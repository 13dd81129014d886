"""The two central decisions as rule tables, a case per rule: the controller's start rules
(webhook.controller.decide.start.START_RULES) and admission's (webhook.admission.decide.ADMISSION_RULES).

Each case builds the least input under which its rule is the first that applies and checks which rule
decided and what it decided; the last test of each table checks every rule has its case, so a rule
added without one fails here.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any

import pytest

from tests import builders as b
from webhook.admission.controller_lease import ControllerHealth
from webhook.admission.decide import ADMISSION_RULES, Outcome, admit
from webhook.backends import Mechanisms, NamespaceInfo, Native, Settings, make
from webhook.backends.discovery import Unavailable
from webhook.controller.decide.pods import PodView, Release
from webhook.controller.decide.shapes import Node, Shape
from webhook.controller.decide.situation import GangSpec, GangState
from webhook.controller.decide.start import START_RULES, start_decision

NOW = dt.datetime(2026, 11, 25, 12, 0, tzinfo=dt.UTC)
CPU = Shape(requests=(("cpu", 1000), ("pods", 1)))


def member(name: str, **changes: Any) -> PodView:
    """A gated member of gang `train`, created a minute ago; `changes` set any other field."""
    pod = PodView(
        namespace="team-a",
        name=name,
        uid=name,
        group="train",
        gated=True,
        node_name=None,
        pinned_node=None,
        released_at=None,
        created_at=NOW - dt.timedelta(minutes=1),
        terminal=False,
        finished=False,
        shape=CPU,
        owner=None,
        resource_version="1",
    )
    return replace(pod, **changes)


def released(name: str, seconds_ago: float, node: str | None = None, bound: bool = False) -> PodView:
    at = NOW - dt.timedelta(seconds=seconds_ago)
    return member(
        name, gated=False, released_at=at, pinned_node=node, planned_node=node, node_name=node if bound else None
    )


def cluster(*free_cpus: int) -> tuple[list[Node], dict[str, dict[str, int]]]:
    """Nodes of 4 CPUs with the given free CPUs each."""
    nodes = [
        Node(f"n{i}", {"cpu": 4000, "pods": 110}, {"kubernetes.io/hostname": f"n{i}"}) for i in range(len(free_cpus))
    ]
    return nodes, {f"n{i}": {"cpu": cpus * 1000, "pods": 110} for i, cpus in enumerate(free_cpus)}


START_CASES: dict[str, tuple[GangState, str, dict[str, Any]]] = {
    # rule: (state, words of the message, the decision's inputs)
    "late_release": (
        GangState.TIMED_OUT,
        "2 of 2 released pods not scheduled within 300s",
        {"pods": [released("a", 400, "n0"), released("b", 400, "n0")], "spec": GangSpec(2), "free": (4,)},
    ),
    "stranded_release": (
        GangState.TIMED_OUT,
        "still gated after 300s (their release was refused or lost)",
        {
            "pods": [released("a", 400, "n0", bound=True), member("b")],
            "spec": GangSpec(2),
            "free": (4,),
            "records": {"b": Release("b", "n0", NOW - dt.timedelta(seconds=400))},
        },
    ),
    "node_taken": (
        GangState.REPAIR,
        "1 released pods can no longer bind on the 1 node they were given",
        {"pods": [released("a", 10, "n0"), released("b", 10, "n1", bound=True)], "spec": GangSpec(2), "free": (-1, 4)},
    ),
    "all_finished": (
        GangState.FINISHED,
        "all 2 pods finished",
        {
            "pods": [
                replace(released("a", 10, "n0", bound=True), terminal=True, finished=True, succeeded=True),
                replace(released("b", 10, "n0", bound=True), terminal=True, finished=True),
            ],
            "spec": GangSpec(2),
        },
    ),
    "nothing_gated": (
        GangState.RUNNING,
        "2 of 2 pods scheduled",
        {"pods": [released("a", 10, "n0", bound=True), released("b", 10, "n0", bound=True)], "spec": GangSpec(2)},
    ),
    "members_missing": (
        GangState.WAITING_FOR_MEMBERS,
        "1 of 2 pods exist",
        {"pods": [member("a")], "spec": GangSpec(2)},
    ),
    "gated_by_others": (
        GangState.WAITING_FOR_MEMBERS,
        "1 of 2 gated pods also carry kueue.x-k8s.io/topology: waiting for it to lift",
        {"pods": [member("a", other_gates=("kueue.x-k8s.io/topology",)), member("b")], "spec": GangSpec(2)},
    ),
    "backing_off": (
        GangState.BACKOFF,
        "next release attempt after",
        {"pods": [member("a"), member("b")], "spec": GangSpec(2), "not_before": NOW + dt.timedelta(seconds=30)},
    ),
    "fits": (
        GangState.RELEASE,
        "releasing 2 pods on 1 nodes",
        {"pods": [member("a"), member("b")], "spec": GangSpec(2)},
    ),
    "never_fits": (
        GangState.NEVER_FITS,
        "the gang needs 6 pods and the cluster could hold 4 even if empty",
        {"pods": [member(f"p{i}") for i in range(6)], "spec": GangSpec(6), "free": (0,)},
    ),
    "waits_for_capacity": (
        GangState.WAITING_FOR_CAPACITY,
        "2 of 3 pods fit on free capacity",
        {"pods": [member(f"p{i}") for i in range(3)], "spec": GangSpec(3), "free": (2,)},
    ),
}


@pytest.mark.parametrize("rule", list(START_CASES))
def test_each_start_rule_decides_its_case(rule: str) -> None:
    state, words, inputs = START_CASES[rule]
    nodes, free = cluster(*inputs.get("free", (4,)))
    decision = start_decision(
        inputs["pods"],
        inputs["spec"],
        nodes,
        free,
        NOW,
        inputs.get("not_before"),
        records=inputs.get("records", {}),
    )
    assert (decision.rule, decision.state) == (rule, state), decision.message
    assert words in decision.message


@pytest.mark.parametrize(
    ("released_seconds_ago", "lost"),
    [
        (None, False),  # no record of the release yet: a refusal is not believed
        (1, False),  # released 1 s ago: not yet
        (30, True),  # refused 30 s after its release: lost
    ],
)
def test_a_refusal_is_believed_only_after_the_release_is_recorded_and_settled(
    released_seconds_ago: float | None, lost: bool
) -> None:
    """The Gang's release records are written after the pods' gates go, so a pass may see a released pod
    before its record; kube-scheduler refuses a pod for a moment while another's allocation of a device
    they share lands. A refusal counts only once the record says the release is 5 s old."""
    pod = replace(released("a", 1, "n0"), unschedulable=True)
    records = (
        {"a": Release("a", "n0", NOW - dt.timedelta(seconds=released_seconds_ago))}
        if released_seconds_ago is not None
        else {}
    )
    nodes, free = cluster(4)
    decision = start_decision([pod], GangSpec(1), nodes, free, NOW, None, records=records)
    assert (decision.rule == "node_taken") is lost, decision.message


def test_every_start_rule_has_a_case_and_the_last_always_decides() -> None:
    assert [rule.__name__ for rule in START_RULES] == list(START_CASES)


def pod_of(job: str, **kwargs: Any) -> dict[str, Any]:
    return b.pod(labels={"batch.kubernetes.io/job-name": job}, **kwargs)


RUNNING = ControllerHealth("running", "gangkeeper-system")

ADMISSION_CASES: dict[str, tuple[bool, int, str, dict[str, Any]]] = {
    # rule: (allowed, code, words of the message or warning, admit's arguments)
    "membership_moved": (
        False,
        422,
        "field is immutable",
        {
            "obj": b.pod(labels={"gangkeeper.io/group": "job-b"}),
            "operation": "UPDATE",
            "old": b.pod(labels={"gangkeeper.io/group": "job-a"}),
        },
    ),
    "made_by_rewritten": (
        False,
        422,
        "gangkeeper.io/made-by]: Invalid value: field is immutable",
        {
            "obj": b.pod(annotations={"gangkeeper.io/made-by": "controller"}),
            "operation": "UPDATE",
            "old": b.pod(annotations={"gangkeeper.io/made-by": "tenant"}),
            "user": "alice",
        },
    ),
    "state_forged": (
        False,
        403,
        "only gangkeeper's controller writes its state",
        {"obj": b.job(annotations={"gangkeeper.io/suspended": "true"})},
    ),
    "impostor_member": (False, 403, "metadata.ownerReferences: Forbidden", {"obj": pod_of("train", owned=False)}),
    "made_for_another": (
        False,
        403,
        "which is not the uid of a Job of that name now",
        {
            "obj": b.pod(
                labels={"gangkeeper.io/group": "job-train", "batch.kubernetes.io/job-name": "train"},
                annotations={"gangkeeper.io/workload": "Job/train"},
            ),
            "namespace": "team-a",
            "workload_uids": lambda kind, namespace, name, claimed: "uid-of-the-job-made-again",
        },
    ),
    "invalid_settings": (
        False,
        422,
        "is invalid",
        {"obj": b.job(annotations={"gangkeeper.io/min-member": "many"})},
    ),
    "no_gang": (True, 200, "", {"obj": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}}),
    "dispatched_elsewhere": (
        True,
        200,
        "dispatched by Kueue's MultiKueue",
        {"obj": b.job(managedBy="kueue.x-k8s.io/multikueue"), "backend": Unavailable("volcano", "not installed")},
    ),
    "backend_unavailable": (
        False,
        403,
        "Volcano is not installed",
        {"obj": b.job(), "backend": Unavailable("volcano", "Volcano is not installed")},
    ),
    "queue_forbidden": (
        False,
        403,
        "Volcano queue 'theirs' is not one namespace team-a may use",
        {
            "obj": b.job(annotations={"gangkeeper.io/queue": "theirs"}),
            "backend": make("volcano"),
            "namespace": "team-a",
            "namespace_info": NamespaceInfo(annotations={"gangkeeper.io/volcano-queues": "ours"}),
        },
    ),
    "update_validated": (True, 200, "", {"obj": b.job(), "operation": "UPDATE", "old": b.job()}),
    "no_native_gang": (
        False,
        422,
        "cannot lower a gang's minCount",
        {"obj": b.job(parallelism=4, completions=6), "backend": make("native", kubernetes_version="1.36")},
    ),
    "devices_unheld": (
        False,
        422,
        "spec.template.spec.resourceClaims: Forbidden",
        {
            "obj": b.job(spec=b.pod_spec(resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}])),
            "backend": make("volcano"),
        },
    ),
    "topology_refused": (
        False,
        422,
        "Invalid value: 'example.com/rack'",
        {
            "obj": b.job(annotations={"gangkeeper.io/topology-required": "example.com/rack"}),
            "backend": make("coscheduling"),
        },
    ),
    "foreign_scheduler": (
        True,
        200,
        "uses scheduler 'my-scheduler'",
        {"obj": b.job(spec=b.pod_spec(schedulerName="my-scheduler"))},
    ),
    "no_controller": (
        False,
        403,
        "no gangkeeper controller has run in this cluster",
        {"obj": pod_of("train"), "controller": ControllerHealth("absent", "gangkeeper-system")},
    ),
    "stamped": (True, 200, "", {"obj": pod_of("train")}),
}


def decided(arguments: dict[str, Any]) -> Outcome:
    arguments = {"operation": "CREATE", "backend": make("gate"), "controller": RUNNING, **arguments}
    return admit(arguments.pop("obj"), arguments.pop("operation"), arguments.pop("backend"), **arguments)


@pytest.mark.parametrize("rule", list(ADMISSION_CASES))
def test_each_admission_rule_decides_its_case(rule: str) -> None:
    allowed, code, words, arguments = ADMISSION_CASES[rule]
    outcome = decided(arguments)
    assert (outcome.rule, outcome.allowed, outcome.code) == (rule, allowed, code), outcome.message or outcome.reason
    assert words in outcome.message + " ".join(outcome.warnings)


def test_every_admission_rule_has_a_case_and_the_last_always_decides() -> None:
    assert [rule.__name__ for rule in ADMISSION_RULES] == list(ADMISSION_CASES)


def test_the_stamped_rule_writes_the_gang_and_a_patch() -> None:
    outcome = decided({"obj": pod_of("train")})
    assert outcome.patch and outcome.mutated is not None
    assert outcome.mutated["metadata"]["labels"]["gangkeeper.io/group"] == "job-train"
    assert {"name": "gangkeeper.io/gang-gate"} in outcome.mutated["spec"]["schedulingGates"]


MECHANISM_CASES = [
    # (the pod's marks, the mechanism's name, its scheduler or API version)
    ({"metadata": {"annotations": {"scheduling.k8s.io/group-name": "g"}}}, "volcano", "volcano-gpu"),
    ({"metadata": {"labels": {"scheduling.x-k8s.io/pod-group": "g"}}}, "coscheduling", "scheduler-plugins-scheduler"),
    ({"spec": {"workloadRef": {"name": "w", "podGroup": "g"}}}, "native", "scheduling.k8s.io/v1alpha1"),
    ({"spec": {"schedulingGroup": {"podGroupName": "g"}}}, "native", "scheduling.k8s.io/v1alpha2"),
    ({"metadata": {"labels": {"gangkeeper.io/group": "g"}}}, "gate", None),
    ({}, "gate", None),
]


@pytest.mark.parametrize(("pod", "name", "detail"), MECHANISM_CASES)
def test_a_pods_mechanism_is_the_configured_object_that_stamped_it(
    pod: dict[str, Any], name: str, detail: str | None
) -> None:
    """The controller holds each mechanism once, as configured (a Volcano profile of another name, the
    native generation served), and a pod's is read from its marks: never a name rebuilt with defaults."""
    mechanisms = Mechanisms(Settings(scheduler_names={"volcano": "volcano-gpu"}), native_version="1.36")
    mechanism = mechanisms.of_pod(pod)
    assert mechanism.name == name
    if name == "native":
        assert isinstance(mechanism, Native) and mechanism.api_version == detail
    else:
        assert mechanism.scheduler_name == detail
    if name == "volcano":
        assert mechanism is mechanisms.volcano


def test_every_mechanism_reads_back_the_marks_it_stamps() -> None:
    from webhook.backends.base import Target
    from webhook.gangs.model import GangId

    gang = GangId("job-train", "Job", "train", native_workload="job-train", template="workers")
    for name in ("volcano", "coscheduling", "native", "gate"):
        for version in ("1.35", "1.36", "1.37") if name == "native" else ("1.37",):
            backend = make(name, kubernetes_version=version)
            pod = b.pod()
            backend.stamp(Target(pod, "pod"), gang, is_pod=True)
            assert backend.marks(pod), (name, version)
            assert Mechanisms(native_version=version).of_pod(pod).name == name


def test_a_pods_other_scheduling_gates_are_seen_beside_gangkeepers() -> None:
    gates = [{"name": "kueue.x-k8s.io/topology"}, {"name": "gangkeeper.io/gang-gate"}]
    pod = {"metadata": {"name": "p", "namespace": "team-a", "uid": "u"}, "spec": {"schedulingGates": gates}}
    view = PodView.from_api(pod, group="train")
    assert view.gated and view.other_gates == ("kueue.x-k8s.io/topology",)
    assert PodView.from_api({**pod, "spec": {"schedulingGates": gates[1:]}}, group="train").other_gates == ()


def test_a_native_pod_naming_a_shared_claim_waits_to_be_steered_and_no_other_does() -> None:
    """kube-scheduler allocates a claim a gang shares for its first pod, wherever that lands (issue 78,
    item 3): the native backend holds such a pod behind gangkeeper's gate for the controller to pin the
    gang where one allocation holds it whole (controller/run/steer.py). A pod whose claims come from a
    template (each its own), a template, and Volcano get no gate for it. Coscheduling's is steered too, its
    claim allocated first by a holder pod (controller/act/claim_holders.py)."""
    from webhook.backends.base import Target
    from webhook.gangs.model import GangId

    gang = GangId("job-train", "Job", "train", native_workload="job-train", template="workers")
    shared = [{"name": "fabric", "resourceClaimName": "fabric"}]
    own = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]

    def gates(name: str, claims: list[dict[str, str]], is_pod: bool = True, version: str = "1.36") -> list[str]:
        pod = b.pod()
        pod["spec"]["resourceClaims"] = claims
        make(name, kubernetes_version=version).stamp(Target(pod, "pod"), gang, is_pod=is_pod)
        return [g["name"] for g in pod["spec"].get("schedulingGates") or []]

    assert gates("native", shared + own) == ["gangkeeper.io/gang-gate"]
    assert gates("native", shared, version="1.37") == ["gangkeeper.io/gang-gate"]
    assert gates("native", own) == []
    assert gates("native", shared, is_pod=False) == []
    assert gates("coscheduling", shared) == ["gangkeeper.io/gang-gate"]  # steered too, its claim held first
    assert gates("coscheduling", own) == [] and gates("coscheduling", shared, is_pod=False) == []
    assert gates("volcano", shared) == []
    assert make("native").steers_shared_claims and not make("native").shared_claims_allocated_first
    assert make("coscheduling").steers_shared_claims and make("coscheduling").shared_claims_allocated_first
    assert make("coscheduling").hands_over_all_at_once and not make("native").hands_over_all_at_once
    assert not make("volcano").steers_shared_claims
