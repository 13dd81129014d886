"""The framework-free handler: internal errors, backend choice per namespace, unavailable backends."""

from __future__ import annotations

import json
import logging

import pytest

from tests import builders as b
from tests.schemas import validate
from webhook.admission.bootstrap import WebhookSettings, build_resolver
from webhook.admission.handler import Handler
from webhook.admission.resolve import BackendResolver, StaticNamespaces
from webhook.backends import NamespaceInfo
from webhook.backends.discovery import Served


class Exploding(BackendResolver):
    def resolve(self, namespace: str | None):  # type: ignore[no-untyped-def]
        raise RuntimeError("boom")


def handle(handler: Handler, obj: dict, endpoint: str = "mutate") -> dict:
    status, document = handler.handle(endpoint, json.dumps(b.review(obj, uid="u-1")).encode())
    assert status == 200
    return document["response"]


def test_internal_error_is_logged_with_the_uid_and_denied_with_500(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR):
        response = handle(Handler(Exploding()), b.job())
    assert response["allowed"] is False and response["status"]["code"] == 500
    assert "u-1" in response["status"]["message"]
    assert any(getattr(r, "uid", None) == "u-1" and r.exc_info for r in caplog.records)


def test_a_denial_is_logged_at_info_and_an_object_let_through_only_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    resolver = build_resolver(WebhookSettings(backend="gate"))
    refusing = build_resolver(
        WebhookSettings(), namespaces=namespaces(**{"team-a": {"gangkeeper.io/backend": "kueue"}})
    )
    with caplog.at_level(logging.INFO, logger="gangkeeper.admission"):
        assert handle(Handler(resolver), b.job())["allowed"] is True
        assert handle(Handler(refusing), b.job())["allowed"] is False
    decisions = [r for r in caplog.records if r.getMessage() == "admission decision"]
    assert [(r.levelno, getattr(r, "allowed", None)) for r in decisions] == [(logging.INFO, False)]
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="gangkeeper.admission"):
        handle(Handler(resolver), b.job())
    assert [getattr(r, "gang", None) for r in caplog.records if r.getMessage() == "admission decision"] == ["job-train"]


def namespaces(**labels_by_namespace: dict[str, str]) -> StaticNamespaces:
    return StaticNamespaces({ns: NamespaceInfo(labels=labels) for ns, labels in labels_by_namespace.items()})


def test_namespace_label_chooses_the_backend() -> None:
    resolver = build_resolver(
        WebhookSettings(backend="volcano"), namespaces=namespaces(**{"team-a": {"gangkeeper.io/backend": "gate"}})
    )
    pod = b.pod(labels={"batch.kubernetes.io/job-name": "train"})
    response = handle(Handler(resolver), pod)
    patched = b.patched(pod, response)
    validate(patched)
    assert patched["spec"]["schedulingGates"] == [{"name": "gangkeeper.io/gang-gate"}]
    assert "schedulerName" not in patched["spec"]


def test_unknown_backend_label_is_denied_with_the_supported_values() -> None:
    resolver = build_resolver(
        WebhookSettings(), namespaces=namespaces(**{"team-a": {"gangkeeper.io/backend": "kueue"}})
    )
    response = handle(Handler(resolver), b.job())
    assert response["allowed"] is False and response["status"]["code"] == 403
    assert 'gangkeeper.io/backend: Unsupported value: "kueue"' in response["status"]["message"]


def test_native_backend_on_a_cluster_without_the_api_is_denied_with_how_to_enable() -> None:
    bare = Served({"v1": frozenset({"pods"}), "scheduling.k8s.io/v1": frozenset({"priorityclasses"})})
    resolver = build_resolver(WebhookSettings(backend="native"), served=lambda: bare)
    response = handle(Handler(resolver), b.job())
    assert response["allowed"] is False
    assert "GenericWorkload" in response["status"]["message"]
    # objects that are no gang are never blocked by a missing backend
    assert handle(Handler(resolver), b.pod())["allowed"] is True


def test_volcano_queue_comes_from_the_namespace_annotation() -> None:
    from webhook.admission.decide import admit
    from webhook.backends import Volcano

    info = NamespaceInfo(annotations={"scheduling.volcano.sh/queue-name": "research"})
    outcome = admit(b.job(), "CREATE", Volcano(), "team-a", info)
    assert outcome.group_objects[0]["spec"]["queue"] == "research"
    job = b.job(annotations={"gangkeeper.io/queue": "urgent"})
    anywhere = frozenset({"*"})  # --volcano-queues=*: any queue, as before there was a list
    assert (
        admit(job, "CREATE", Volcano(), "team-a", info, volcano_queues=anywhere).group_objects[0]["spec"]["queue"]
        == "urgent"
    )


def test_volcano_podgroup_is_owned_by_the_workload_when_its_uid_is_known() -> None:
    from webhook.admission.decide import admit
    from webhook.backends import Volcano

    job = b.job()
    job["metadata"]["uid"] = "5f0c0d1e-0000-4000-8000-000000000000"
    group = admit(job, "CREATE", Volcano(), "team-a").group_objects[0]
    validate(group)
    assert group["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "train",
            "uid": "5f0c0d1e-0000-4000-8000-000000000000",
            "controller": False,
            "blockOwnerDeletion": True,
        }
    ]
    assert group["spec"] == {"minMember": 4, "minResources": {"cpu": "4", "memory": "4Gi"}}


def test_coscheduling_scheduler_name_per_namespace_for_the_default_schedulers_profile() -> None:
    """scheduler-plugins' production install runs Coscheduling inside default-scheduler."""
    resolver = build_resolver(
        WebhookSettings(backend="coscheduling"),
        namespaces=StaticNamespaces(
            {
                "team-a": NamespaceInfo(annotations={"gangkeeper.io/scheduler-name": "default-scheduler"}),
                "team-b": NamespaceInfo(),
            }
        ),
    )
    job = b.job()
    in_profile = b.patched(job, handle(Handler(resolver), job))
    job_b = {**b.job(), "metadata": {"name": "train", "namespace": "team-b"}}
    second = b.patched(job_b, handle(Handler(resolver), job_b))
    validate(in_profile)
    assert in_profile["spec"]["template"]["spec"]["schedulerName"] == "default-scheduler"
    assert in_profile["spec"]["template"]["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"]
    assert second["spec"]["template"]["spec"]["schedulerName"] == "scheduler-plugins-scheduler"


def test_an_invalid_scheduler_name_annotation_is_denied_naming_it() -> None:
    resolver = build_resolver(
        WebhookSettings(backend="volcano"),
        namespaces=StaticNamespaces(
            {"team-a": NamespaceInfo(annotations={"gangkeeper.io/scheduler-name": "Bad_Name"})}
        ),
    )
    response = handle(Handler(resolver), b.job())
    assert response["allowed"] is False
    assert "gangkeeper.io/scheduler-name: Invalid value: 'Bad_Name'" in response["status"]["message"]


@pytest.mark.parametrize(
    ("queue", "warning"),
    [
        ("nosuch", "Volcano queue 'nosuch' does not exist: Volcano refuses the pods of PodGroup job-train"),
        ("closed", "Volcano queue 'closed' is Closed: PodGroup job-train waits until it opens"),
        ("default", None),
    ],
)
def test_a_missing_or_closed_volcano_queue_is_warned_at_apply_time(queue: str, warning: str | None) -> None:
    resolver = build_resolver(
        WebhookSettings(backend="volcano", volcano_queues=frozenset({"*"})),
        queues=lambda: {"default": "Open", "closed": "Closed"},
    )
    job = b.job(annotations={"gangkeeper.io/queue": queue})
    response = handle(Handler(resolver), job)
    assert response["allowed"]
    validate(b.patched(job, response))
    found = [w for w in response.get("warnings", []) if "Volcano queue" in w]
    assert [w for w in found if warning and warning in w] == found and len(found) == (1 if warning else 0), found


@pytest.mark.parametrize(("replicas", "allowed"), [(10_000, True), (1_000_000, False)])
def test_scale_past_the_gang_size_limit_is_refused(replicas: int, allowed: bool) -> None:
    scale = {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "lws", "namespace": "team-a"}}
    scale["spec"] = {"replicas": replicas}
    document = b.review(scale, operation="UPDATE", old={**scale, "spec": {"replicas": 2}})
    document["request"]["resource"] = {
        "group": "leaderworkerset.x-k8s.io",
        "version": "v1",
        "resource": "leaderworkersets",
    }
    document["request"]["subResource"] = "scale"
    status, answer = Handler(build_resolver(WebhookSettings(backend="volcano"))).handle(
        "validate", json.dumps(document).encode()
    )
    response = answer["response"]
    assert status == 200 and response["allowed"] is allowed
    if not allowed:
        assert response["status"]["code"] == 422
        assert 'spec.replicas: Invalid value: "1000000": makes 1000000 pods' in response["status"]["message"]


@pytest.mark.parametrize(
    ("queue", "operation", "allowed"),
    [("team-a", "CREATE", True), (None, "CREATE", False), ("team-b", "CREATE", False), ("team-b", "UPDATE", False)],
    ids=["listed", "default-not-listed", "another-teams-create", "another-teams-update"],
)
def test_a_namespace_may_name_the_volcano_queues_its_gangs_use(
    queue: str | None, operation: str, allowed: bool
) -> None:
    """Queues are shared between tenants: a namespace's owner lists the ones its gangs may take."""
    listed = NamespaceInfo(annotations={"gangkeeper.io/volcano-queues": "team-a, shared"})
    resolver = build_resolver(WebhookSettings(backend="volcano"), namespaces=StaticNamespaces({"team-a": listed}))
    job = b.job(annotations={"gangkeeper.io/queue": queue} if queue else None)
    document = b.review(job, operation=operation, old=job if operation == "UPDATE" else None)
    endpoint = "mutate" if operation == "CREATE" else "validate"
    _, answer = Handler(resolver).handle(endpoint, json.dumps(document).encode())
    response = answer["response"]
    assert response["allowed"] is allowed
    if not allowed:
        assert response["status"]["code"] == 403
        assert "Forbidden: Volcano queue" in response["status"]["message"]
        assert "may use: shared, team-a (gangkeeper.io/volcano-queues)" in response["status"]["message"]


@pytest.mark.parametrize(
    ("queue", "cluster", "allowed"),
    [
        (None, "", True),  # the namespace's default queue
        ("research", "", False),  # another team's, named by a tenant
        ("research", "research,shared", True),  # the platform's list
        ("research", "*", True),
    ],
)
def test_without_the_namespaces_list_a_gang_may_name_its_default_queue_and_the_clusters(
    queue: str | None, cluster: str, allowed: bool
) -> None:
    queues = frozenset(q for q in cluster.split(",") if q)
    resolver = build_resolver(WebhookSettings(backend="volcano", volcano_queues=queues))
    response = handle(Handler(resolver), b.job(annotations={"gangkeeper.io/queue": queue} if queue else None))
    assert response["allowed"] is allowed
    if not allowed:
        message = response["status"]["message"]
        assert "Forbidden: Volcano queue 'research' is not one namespace team-a may use: default" in message
        assert "gangkeeper.io/volcano-queues" in message


def generate_named(obj: dict) -> dict:
    meta = obj["metadata"]
    meta["generateName"] = meta.pop("name") + "-"
    return obj


def test_a_generate_name_job_under_volcano_is_named_so_its_podgroup_can_come_first() -> None:
    """The gang, the template's group annotation and the PodGroup all carry the name admission chose."""
    job = generate_named(b.job())
    response = handle(Handler(build_resolver(WebhookSettings(backend="volcano"), namespaces=namespaces())), job)
    patched = b.patched(job, response)
    validate(patched)
    name = patched["metadata"]["name"]
    assert name.startswith("train-") and len(name) == len("train-") + 5
    assert set(name[len("train-") :]) <= set("bcdfghjklmnpqrstvwxz2456789")
    template = patched["spec"]["template"]
    assert template["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == f"job-{name}"
    assert template["spec"]["schedulerName"] == "volcano"


@pytest.mark.parametrize("backend", ["gate", "coscheduling"])
def test_a_generate_name_job_elsewhere_keeps_the_api_servers_name(backend: str) -> None:
    """Only Volcano needs the gang's object before the pods; elsewhere each pod names its gang."""
    job = generate_named(b.job())
    resolver = build_resolver(WebhookSettings(backend=backend), namespaces=namespaces())
    patched = b.patched(job, handle(Handler(resolver), job))
    assert "name" not in patched["metadata"] and patched["metadata"]["generateName"] == "train-"


def test_a_long_generate_name_is_cut_as_the_api_server_cuts_it() -> None:
    from webhook.naming import generated_name

    name = generated_name("x" * 80)
    assert len(name) == 63 and name.startswith("x" * 58)
