"""A workload created under Volcano gets its PodGroups at its validating admission, before the Job
controller's first pod (Volcano's pod admission refuses a pod whose PodGroup is missing): made once,
adopted by the controller once the workload is stored, an orphan if it never is, never on a dry run,
never for another backend, and never at the workload's cost."""

from __future__ import annotations

import datetime as dt
import json
import logging
from typing import Any

import pytest

from tests import builders as b
from tests.apiserver import Reject, TestApiServer
from tests.fake.test_controller import volcano_job_watched
from tests.schemas import validate
from webhook.admission.ahead import VolcanoGroupsAhead
from webhook.admission.bootstrap import WebhookSettings, build_resolver
from webhook.admission.decide import admit
from webhook.admission.handler import Handler
from webhook.backends import make
from webhook.contract import AWAITING_OWNER_ANNOTATION, HELD_MIN_MEMBER
from webhook.controller.act.groups import ORPHAN_GRACE_SECONDS, orphan_groups
from webhook.controller.decide.group_specs import ADOPT_WITHIN_SECONDS, spec_patch
from webhook.kube import Api, Resource

PODGROUPS = ("scheduling.volcano.sh/v1beta1", "podgroups")


@pytest.fixture
def server(apiserver: TestApiServer) -> TestApiServer:
    return apiserver


def stamped_job(uid: str = "job-uid-1") -> dict[str, Any]:
    """The Job as the validating webhook sees it: stamped by the mutating webhook, given its uid."""
    job = b.job("train", parallelism=3, spec=b.pod_spec(b.container("1", "1Gi")))
    job["metadata"]["namespace"] = "team-a"
    mutated = admit(job, "CREATE", make("volcano"), "team-a").mutated
    assert mutated is not None
    mutated["metadata"]["uid"] = uid
    return mutated


def validate_call(api: Api, obj: dict[str, Any], backend: str = "volcano", dry_run: bool = False) -> dict[str, Any]:
    resolver = build_resolver(WebhookSettings(backend=backend), groups_ahead=VolcanoGroupsAhead(api))
    body = json.dumps(b.review(obj, uid="u-1", dry_run=dry_run)).encode()
    status, document = Handler(resolver).handle("validate", body)
    assert status == 200
    response: dict[str, Any] = document["response"]
    return response


def test_the_podgroup_is_made_at_validation_and_adopted_by_the_controller(server: TestApiServer, api: Api) -> None:
    job = stamped_job()
    assert validate_call(api, job)["allowed"] is True
    group = server.store.get(*PODGROUPS, "team-a", "job-train")
    validate(group)
    # held: no review decides its size; Volcano starts none of its pods, and weighs its resources to enqueue it
    assert group["spec"] == {"minMember": HELD_MIN_MEMBER, "minResources": {"cpu": "3", "memory": "3Gi"}}
    # unowned: the Job is not stored yet, and the garbage collector deletes a dependent of a missing owner
    assert "ownerReferences" not in group["metadata"]
    assert group["metadata"]["annotations"][AWAITING_OWNER_ANNOTATION] == "true"
    # a second call (a second webhook replica, a retry) finds it made and admits all the same
    assert validate_call(api, job)["allowed"] is True
    assert len(server.store.list(*PODGROUPS, "team-a")[0]) == 1
    # the Job stored and seen, the controller makes it the PodGroup's owner
    created, controller, _ = volcano_job_watched(server, api, parallelism=3)
    controller.reconcile_once()
    adopted = server.store.get(*PODGROUPS, "team-a", "job-train")
    validate(adopted)
    assert [o["uid"] for o in adopted["metadata"]["ownerReferences"]] == [created["metadata"]["uid"]]
    assert AWAITING_OWNER_ANNOTATION not in (adopted["metadata"].get("annotations") or {})
    assert adopted["spec"]["minMember"] == 3  # the stored Job's gang, written at adoption
    assert adopted["metadata"]["uid"] == group["metadata"]["uid"]  # the same object, not made again


def forged_review_group(server: TestApiServer, api: Api) -> dict[str, Any]:
    """A review posted straight to the webhook's port, for team-a's Job train, asking for a priority,
    more members and resources team-a's own Job does not."""
    forged = b.job("train", parallelism=1, spec=b.pod_spec(b.container("64", "512Gi")))
    forged["metadata"]["namespace"] = "team-a"
    forged["spec"]["template"]["spec"]["priorityClassName"] = "batch-low"
    mutated = admit(forged, "CREATE", make("volcano"), "team-a").mutated
    assert mutated is not None
    assert validate_call(api, mutated)["allowed"] is True
    group: dict[str, Any] = server.store.get(*PODGROUPS, "team-a", "job-train")
    return group


def test_a_forged_review_decides_nothing_the_gang_gets(server: TestApiServer, api: Api) -> None:
    """The webhook cannot tell a forged review from the API server's: what it makes is held and carries
    nothing the review asked for, and adoption writes the stored Job's gang whole."""
    held = forged_review_group(server, api)
    assert held["spec"]["minMember"] == HELD_MIN_MEMBER and "priorityClassName" not in held["spec"]
    created, controller, _ = volcano_job_watched(server, api, parallelism=3)
    controller.reconcile_once()
    adopted = server.store.get(*PODGROUPS, "team-a", "job-train")
    validate(adopted)
    assert "priorityClassName" not in adopted["spec"] and adopted["spec"]["minMember"] == 3
    assert [o["uid"] for o in adopted["metadata"]["ownerReferences"]] == [created["metadata"]["uid"]]


def test_a_held_group_made_long_before_its_workload_is_not_inherited(server: TestApiServer, api: Api) -> None:
    """An earlier Job of the name was refused after its PodGroup was made (or a review was forged for
    it): a Job stored later than ADOPT_WITHIN_SECONDS after the group gets a group of its own."""
    held = forged_review_group(server, api)
    key = (*PODGROUPS, "team-a", "job-train")
    made_at = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=ADOPT_WITHIN_SECONDS + 5)
    server.store.objects[key]["metadata"]["creationTimestamp"] = made_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    created, controller, relist = volcano_job_watched(server, api, parallelism=3)
    controller.reconcile_once()
    relist()
    controller.reconcile_once()
    mine = server.store.get(*key)
    validate(mine)
    assert mine["metadata"]["uid"] != held["metadata"]["uid"]
    assert [o["uid"] for o in mine["metadata"]["ownerReferences"]] == [created["metadata"]["uid"]]
    assert mine["spec"]["minMember"] == 3 and AWAITING_OWNER_ANNOTATION not in (
        mine["metadata"].get("annotations") or {}
    )


def test_an_unowned_group_not_in_the_held_shape_is_replaced(server: TestApiServer, api: Api) -> None:
    """Marked and unowned, but not as the webhook makes them (its policy refuses that shape from its
    account): not adopted, replaced by the gang's."""
    forged_review_group(server, api)
    key = (*PODGROUPS, "team-a", "job-train")
    server.store.objects[key]["spec"] = {"minMember": 1, "priorityClassName": "batch-low"}
    created, controller, relist = volcano_job_watched(server, api, parallelism=3)
    controller.reconcile_once()
    relist()
    controller.reconcile_once()
    mine = server.store.get(*key)
    assert mine["spec"]["minMember"] == 3 and "priorityClassName" not in mine["spec"]
    assert [o["uid"] for o in mine["metadata"]["ownerReferences"]] == [created["metadata"]["uid"]]


def test_sync_makes_the_spec_the_gangs_not_a_merge() -> None:
    volcano = "scheduling.volcano.sh/v1beta1"
    desired = {"minMember": 3, "minResources": {"cpu": "3"}}
    current = {"minMember": 3, "minResources": {"cpu": "3"}, "priorityClassName": "batch-low", "queue": "default"}
    # a field the gang does not set is taken out; the queue the API server defaulted stays
    assert spec_patch(volcano, current, desired) == {"priorityClassName": None, **desired}
    assert spec_patch(volcano, {**desired, "queue": "default"}, desired) is None
    assert spec_patch(volcano, {"minMember": 2}, desired) == desired
    # the native kinds keep what their API server serializes beside the gang's fields
    native = {"minCount": 3, "schedulingConstraints": {"topology": []}}
    assert spec_patch("scheduling.k8s.io/v1beta1", native, {"minCount": 3}) is None


def test_past_their_bound_no_more_are_made_ahead_and_the_controller_makes_them(
    server: TestApiServer, api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workloads that are never stored (refused later, a name taken) each leave a held group until its
    grace ends: per namespace and in all, the webhook has at most so many outstanding."""
    from webhook.admission import ahead, metrics

    monkeypatch.setattr(ahead, "MAX_OUTSTANDING_PER_NAMESPACE", 3)
    monkeypatch.setattr(ahead, "MAX_OUTSTANDING", 5)
    now = [0.0]
    groups_ahead = VolcanoGroupsAhead(api, clock=lambda: now[0])
    resolver = build_resolver(WebhookSettings(backend="volcano"), groups_ahead=groups_ahead)

    def review(namespace: str, name: str) -> None:
        job = b.job(name, parallelism=2, spec=b.pod_spec(b.container("1", "1Gi")))
        job["metadata"]["namespace"] = namespace
        mutated = admit(job, "CREATE", make("volcano"), namespace).mutated
        body = json.dumps(b.review(mutated, uid=f"u-{namespace}-{name}")).encode()
        assert Handler(resolver).handle("validate", body)[1]["response"]["allowed"] is True

    def made(namespace: str) -> int:
        return len(server.store.list(*PODGROUPS, namespace)[0])

    bounded = metrics.GROUPS_AHEAD.labels("bounded")._value.get()
    for i in range(5):
        review("team-a", f"j{i}")
    assert made("team-a") == 3  # its namespace's bound
    for i in range(4):
        review("team-b", f"j{i}")
    assert made("team-b") == 2  # the bound in all
    assert metrics.GROUPS_AHEAD.labels("bounded")._value.get() - bounded == 4
    assert metrics.GROUPS_AHEAD_OUTSTANDING._value.get() == 5
    now[0] += ORPHAN_GRACE_SECONDS + 1  # adopted or deleted as orphans by now: room again
    review("team-a", "later")
    assert made("team-a") == 4
    assert metrics.GROUPS_AHEAD_OUTSTANDING._value.get() == 1


def test_a_hung_api_server_delays_the_workload_by_the_deadline_at_most(
    server: TestApiServer, api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    from webhook.admission import ahead

    monkeypatch.setattr(ahead, "DEADLINE_SECONDS", 0.3)

    def hangs(method: str, path: str) -> None:
        if method == "POST" and "podgroups" in path:  # every attempt, retries included (a hook kept)
            time.sleep(1.0)

    server.store.fail_next.append(hangs)
    started = time.monotonic()
    assert validate_call(api, stamped_job())["allowed"] is True
    assert time.monotonic() - started < 0.8  # one deadline for the create and its retries


def test_one_whose_workload_never_came_is_an_orphan_once_past_its_grace(server: TestApiServer, api: Api) -> None:
    """A later webhook refused the Job after this one made its PodGroup: nobody adopts it."""
    assert validate_call(api, stamped_job())["allowed"] is True
    resources = [Resource(*PODGROUPS)]
    now = dt.datetime.now(dt.UTC)
    assert orphan_groups(api, set(), resources, now) == []  # young: its owner may be on its way
    later = now + dt.timedelta(seconds=ORPHAN_GRACE_SECONDS + 1)
    assert orphan_groups(api, set(), resources, later) == ["team-a/job-train"]
    assert server.store.list(*PODGROUPS, "team-a")[0] == []


def test_no_podgroup_on_a_dry_run_an_update_or_under_another_backend(server: TestApiServer, api: Api) -> None:
    job = stamped_job()
    assert validate_call(api, job, dry_run=True)["allowed"] is True
    assert validate_call(api, stamped_job(), backend="gate")["allowed"] is True
    resolver = build_resolver(WebhookSettings(backend="volcano"), groups_ahead=VolcanoGroupsAhead(api))
    update = json.dumps(b.review(job, operation="UPDATE", uid="u-2", old=job)).encode()
    assert Handler(resolver).handle("validate", update)[1]["response"]["allowed"] is True
    assert server.store.list(*PODGROUPS, "team-a")[0] == []


def test_an_api_failure_is_logged_and_the_workload_admitted(
    server: TestApiServer, api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    server.store.fail_next.append(
        lambda method, path: Reject(500, "InternalError", "etcd down") if method == "POST" else None
    )
    with caplog.at_level(logging.WARNING, logger="gangkeeper.admission"):
        assert validate_call(api, stamped_job())["allowed"] is True
    assert any("the controller will" in r.getMessage() for r in caplog.records)
    assert server.store.list(*PODGROUPS, "team-a")[0] == []
