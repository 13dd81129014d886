"""Misspelt gangkeeper.io keys and values get a warning at apply time instead of silence."""

from __future__ import annotations

import json

import pytest

from tests import builders as b
from webhook.admission.bootstrap import WebhookSettings, build_resolver
from webhook.admission.handler import Handler
from webhook.admission.keys import MAX_WARNINGS, namespace_warnings


def namespace(labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> dict:
    meta: dict = {"name": "team-a", "labels": {"kubernetes.io/metadata.name": "team-a", **(labels or {})}}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def warnings_of(obj: dict, endpoint: str = "validate") -> tuple[bool, list[str]]:
    status, document = Handler(build_resolver(WebhookSettings(backend="volcano"))).handle(
        endpoint, json.dumps(b.review(obj)).encode()
    )
    assert status == 200
    response = document["response"]
    return response["allowed"], response.get("warnings", [])


@pytest.mark.parametrize(
    ("labels", "annotations", "expected"),
    [
        (
            {"gangkeeper.io/enable": "true"},
            {},
            "'gangkeeper.io/enable' is not one gangkeeper reads; did you mean 'gangkeeper.io/enabled'?",
        ),
        ({"gangkeeper.io/enabled": "yes"}, {}, "gangkeeper.io/enabled: 'yes' is not one of true"),
        (
            {"gangkeeper.io/enabled": "true", "gangkeeper.io/backend": "volcanoo"},
            {},
            "gangkeeper.io/backend: 'volcanoo' is not one of auto, volcano, coscheduling, native, gate",
        ),
        (
            {"gangkeeper.io/scheduler-name": "default-scheduler"},
            {},
            "namespace label 'gangkeeper.io/scheduler-name' is read as an annotation",
        ),
        ({}, {"gangkeeper.io/enabled": "true"}, "namespace annotation 'gangkeeper.io/enabled' is read as a label"),
    ],
    ids=["key-typo", "value-not-true", "backend-typo", "annotation-as-label", "label-as-annotation"],
)
def test_misspelt_namespace_opt_in_is_warned_and_allowed(labels: dict, annotations: dict, expected: str) -> None:
    allowed, warnings = warnings_of(namespace(labels, annotations))
    assert allowed
    assert any(expected in w for w in warnings), warnings


def test_a_correct_namespace_gets_no_warning() -> None:
    labels = {"gangkeeper.io/enabled": "true", "gangkeeper.io/backend": "gate"}
    assert warnings_of(namespace(labels, {"gangkeeper.io/scheduler-name": "default-scheduler"})) == (True, [])


def test_warnings_on_a_hostile_namespace_are_few_and_short() -> None:
    labels = {f"gangkeeper.io/{'x' * 60}{i}": "v" * 63 for i in range(500)}
    warnings = namespace_warnings(namespace(labels))
    assert len(warnings) == MAX_WARNINGS and all(len(w) < 300 for w in warnings)


@pytest.mark.parametrize(
    ("labels", "annotations", "expected"),
    [
        ({}, {"gangkeeper.io/skip": "true"}, "annotation 'gangkeeper.io/skip' is read as a label, not here"),
        ({}, {"gangkeeper.io/min-membr": "2"}, "did you mean 'gangkeeper.io/min-member'?"),
        ({"gangkeeper.io/min-member": "2"}, {}, "label 'gangkeeper.io/min-member' is read as an annotation"),
    ],
    ids=["skip-as-annotation", "annotation-typo", "annotation-as-label"],
)
def test_misspelt_workload_keys_are_warned_on_create(labels: dict, annotations: dict, expected: str) -> None:
    job = b.job(annotations=annotations)
    job["metadata"]["labels"] = labels
    allowed, warnings = warnings_of(job, "mutate")
    assert allowed
    assert any(expected in w for w in warnings), warnings


def test_the_controllers_own_keys_and_the_contract_are_not_warned() -> None:
    annotations = {
        "gangkeeper.io/min-member": "2",
        "gangkeeper.io/timeout-seconds": "60",
        "gangkeeper.io/gang-status": "Waiting",  # what the controller shows; read back by nothing
    }
    job = b.job(annotations=annotations)
    allowed, warnings = warnings_of(job, "mutate")
    assert allowed and not [w for w in warnings if "gangkeeper reads" in w or "read as" in w]


@pytest.mark.parametrize(
    ("obj", "path"),
    [
        (
            b.pod(
                labels={"batch.kubernetes.io/job-name": "train"},
                annotations={"gangkeeper.io/released-at": "2020-01-01T00:00:00Z", "gangkeeper.io/planned-node": "n1"},
            ),
            "metadata.annotations[gangkeeper.io/planned-node]",
        ),
        (b.job(annotations={"gangkeeper.io/suspended": "x"}), "metadata.annotations[gangkeeper.io/suspended]"),
        (
            {
                **b.job(),
                "spec": {
                    **b.job()["spec"],
                    "template": {**b.template(), "metadata": {"annotations": {"gangkeeper.io/released-at": "x"}}},
                },
            },
            "spec.template.metadata.annotations[gangkeeper.io/released-at]",
        ),
    ],
    ids=["pod", "job", "job-template"],
)
def test_the_controllers_state_written_at_creation_is_refused(obj: dict, path: str) -> None:
    """A tenant's pod claiming a release and a planned node would hold that node's capacity in the
    controller's books; a workload claiming gangkeeper's suspension would be resumed by it."""
    status, document = Handler(build_resolver(WebhookSettings(backend="gate"))).handle(
        "mutate", json.dumps(b.review(obj)).encode()
    )
    response = document["response"]
    assert status == 200 and response["allowed"] is False and response["status"]["code"] == 403
    assert f"{path}: Forbidden" in response["status"]["message"]
    assert "only gangkeeper's controller writes its state" in response["status"]["message"]


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"labels": {"gangkeeper.io/group": "job-victim"}}, "metadata.labels[gangkeeper.io/group]"),
        ({"annotations": {"gangkeeper.io/group-size": "100"}}, "metadata.annotations[gangkeeper.io/group-size]"),
    ],
    ids=["into-another-gang", "resized"],
)
def test_a_pods_gang_membership_cannot_change_after_creation(change: dict, path: str) -> None:
    before = b.pod(
        labels={"gangkeeper.io/group-name": "g", "gangkeeper.io/group": "pg-g"},
        annotations={"gangkeeper.io/group-size": "2"},
    )
    after = json.loads(json.dumps(before))
    for holder, values in change.items():
        after["metadata"][holder].update(values)
    _, document = Handler(build_resolver(WebhookSettings(backend="gate"))).handle(
        "validate", json.dumps(b.review(after, operation="UPDATE", old=before)).encode()
    )
    response = document["response"]
    assert response["allowed"] is False and response["status"]["code"] == 422
    assert f"{path}: Invalid value: field is immutable" in response["status"]["message"]


def test_leaving_a_gang_and_other_pod_updates_are_allowed() -> None:
    before = b.pod(labels={"gangkeeper.io/group": "job-train", "app": "a"})
    relabelled = json.loads(json.dumps(before))
    relabelled["metadata"]["labels"]["app"] = "b"
    left = json.loads(json.dumps(before))
    del left["metadata"]["labels"]["gangkeeper.io/group"]
    for after in (relabelled, left):
        _, document = Handler(build_resolver(WebhookSettings(backend="gate"))).handle(
            "validate", json.dumps(b.review(after, operation="UPDATE", old=before)).encode()
        )
        assert document["response"]["allowed"]


@pytest.mark.parametrize(
    ("user", "allowed"),
    [
        ("alice", False),  # the workload's owner: refused
        ("system:serviceaccount:gangkeeper-system:gangkeeper-controller", True),  # gangkeeper's controller
        ("system:serviceaccount:team-a:gangkeeper-controller", False),  # the same name in a tenant's namespace
    ],
)
def test_the_controllers_marks_added_by_an_update_are_refused_unless_it_is_the_controller(
    user: str, allowed: bool
) -> None:
    before = b.job("train")
    after = json.loads(json.dumps(before))
    after["metadata"]["annotations"] = {"gangkeeper.io/suspended": "2026-11-24T00:00:00Z"}
    review = b.review(after, operation="UPDATE", old=before)
    review["request"]["userInfo"] = {"username": user}
    _, document = Handler(build_resolver(WebhookSettings(backend="gate"))).handle(
        "validate", json.dumps(review).encode()
    )
    response = document["response"]
    assert response["allowed"] is allowed, response
    if not allowed:
        assert "metadata.annotations[gangkeeper.io/suspended]: Forbidden" in response["status"]["message"]


def test_taking_the_suspended_mark_off_is_allowed() -> None:
    """A user who removes gangkeeper's mark keeps the workload suspended: that is theirs to do."""
    before = b.job("train", annotations={"gangkeeper.io/suspended": "2026-11-24T00:00:00Z"})
    after = json.loads(json.dumps(before))
    del after["metadata"]["annotations"]["gangkeeper.io/suspended"]
    _, document = Handler(build_resolver(WebhookSettings(backend="gate"))).handle(
        "validate", json.dumps(b.review(after, operation="UPDATE", old=before)).encode()
    )
    assert document["response"]["allowed"]


@pytest.mark.parametrize(
    ("user", "made_by"),
    [
        ("system:serviceaccount:kube-system:job-controller", "controller"),  # --use-service-account-credentials
        ("system:kube-controller-manager", "controller"),  # without it
        ("system:serviceaccount:jobset-system:jobset-controller-manager", "controller"),  # an operator
        ("system:serviceaccount:team-a:ci-bot", "tenant"),  # an account of the pod's own namespace
        ("alice", "tenant"),
        ("system:serviceaccount:team-a", "tenant"),  # malformed: no account name, the namespace read as given
        (None, None),  # offline: nothing written
    ],
)
def test_who_made_a_pod_is_read_from_the_reviews_user(user: str | None, made_by: str | None) -> None:
    from webhook.admission import forgery

    assert forgery.made_by(user, "team-a") == made_by
