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
from tests.schemas import validate
from tests.test_controller import volcano_job_watched
from webhook.admission.ahead import VolcanoGroupsAhead
from webhook.admission.bootstrap import WebhookSettings, build_resolver
from webhook.admission.decide import admit
from webhook.admission.handler import Handler
from webhook.backends import make
from webhook.contract import AWAITING_OWNER_ANNOTATION
from webhook.controller.act.groups import ORPHAN_GRACE_SECONDS, orphan_groups
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
    assert group["spec"]["minMember"] == 3
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
