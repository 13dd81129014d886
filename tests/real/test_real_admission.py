"""Admission answers that only the real API server can show: warnings printed by kubectl, and a
workload above the gang size limit refused through the webhook's Service."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.real.test_real_recovery import patch_as
from tests.realcluster import workloads
from tests.realcluster.stack import Stack, wait_until

pytestmark = pytest.mark.cluster


def test_a_misspelt_opt_in_label_prints_a_warning_and_is_kept(stack: Stack) -> None:
    name = stack.namespace("typo", backend=None, opted_in=False)

    labelled = stack.plane.kubectl("label", "namespace", name, "gangkeeper.io/enable=true")

    assert "Warning: namespace label 'gangkeeper.io/enable' is not one gangkeeper reads" in labelled.stderr
    assert "did you mean 'gangkeeper.io/enabled'?" in labelled.stderr
    assert stack.plane.get("namespace", name)["metadata"]["labels"]["gangkeeper.io/enable"] == "true"


def test_a_job_above_the_gang_size_limit_is_refused_naming_the_field(stack: Stack) -> None:
    namespace = stack.namespace("huge", "gate")
    job = workloads.job("huge", namespace, 20_000, "1")

    refused = stack.plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(job), check=False)

    assert refused.returncode != 0
    assert 'admission webhook "mutate.gangkeeper.io" denied the request' in refused.stderr
    assert "makes 20000 pods, above this cluster's limit of 10000 pods per gang" in refused.stderr
    assert stack.plane.get("job", "huge", namespace=namespace) is None


def test_scaling_a_leaderworkerset_past_the_limit_is_refused(stack: Stack) -> None:
    """`kubectl scale` goes through /scale, past the workload's own validation."""
    namespace = stack.namespace("scale", "gate")
    stack.plane.apply(workloads.leader_worker_set("lws", namespace, 2, "1"))

    refused = stack.plane.kubectl("-n", namespace, "scale", "leaderworkerset/lws", "--replicas=20000", check=False)

    assert refused.returncode != 0
    assert 'admission webhook "validate.gangkeeper.io" denied the request' in refused.stderr
    assert "makes 20000 pods, above this cluster's limit of 10000 pods per gang" in refused.stderr
    assert stack.plane.get("leaderworkerset", "lws", namespace=namespace)["spec"]["replicas"] == 1


def test_a_built_in_lists_items_carry_no_kind_on_the_real_server_and_the_fake(stack: Stack) -> None:
    """The controller's caches are filled from lists: kube-apiserver leaves apiVersion and kind out of a
    typed list's items (watch events carry them). The fake API server must answer the same, or a Job
    read from a cache after a controller restart looks like no kind at all (found by the chart upgrade)."""
    from tests.apiserver import TestApiServer
    from webhook.informer import Informer
    from webhook.kube import Api, Resource, client_from

    namespace = stack.namespace("lists", "gate")
    stack.plane.apply(workloads.job("listed", namespace, 1, "1"))
    real = json.loads(stack.plane.kubectl("get", "--raw", f"/apis/batch/v1/namespaces/{namespace}/jobs").stdout)
    with TestApiServer() as fake_server:
        fake_server.store.create("batch/v1", "jobs", namespace, workloads.job("listed", namespace, 1, "1"))
        api = Api(client_from(server=fake_server.url))
        fake = api.list(f"/apis/batch/v1/namespaces/{namespace}/jobs")
        informer = Informer(api, Resource("batch/v1", "jobs"))
        informer.relist()
        cached = informer.get(namespace, "listed")
    for answer in (real, fake):
        assert answer["kind"] == "JobList" and answer["apiVersion"] == "batch/v1"
        assert "kind" not in answer["items"][0] and "apiVersion" not in answer["items"][0]
    assert cached is not None and (cached["apiVersion"], cached["kind"]) == ("batch/v1", "Job")


def test_the_webhooks_account_may_change_only_its_ca_bundle(stack: Stack) -> None:
    """RBAC lets the webhook's account patch its own configurations (it injects its CA bundle); the
    chart's ValidatingAdmissionPolicy refuses anything else from that account. (The CA injection at
    deploy, which the stack waits for, is the allowed case.)"""

    def patch_as_the_webhook(path: str, value: str) -> Any:
        operation = json.dumps([{"op": "replace", "path": path, "value": value}])
        return stack.plane.kubectl(
            "--as=system:serviceaccount:gangkeeper-system:gangkeeper-webhook",
            "patch",
            "mutatingwebhookconfiguration",
            "gangkeeper",
            "--type=json",
            "-p",
            operation,
            check=False,
        )

    widened = patch_as_the_webhook("/webhooks/0/failurePolicy", "Ignore")
    assert widened.returncode != 0
    assert "may change only the caBundle of its own webhook configurations" in widened.stderr
    config = stack.plane.get("mutatingwebhookconfiguration", "gangkeeper")
    assert config["webhooks"][0]["failurePolicy"] == "Fail"
    same = patch_as_the_webhook("/webhooks/0/clientConfig/caBundle", config["webhooks"][0]["clientConfig"]["caBundle"])
    assert same.returncode == 0, same.stderr


def test_a_pod_cannot_be_moved_into_another_gang(stack: Stack) -> None:
    """Pod UPDATE reaches the validating webhook: a gang's membership (and so its size) is fixed at
    creation; a label that moves a pod into another gang is refused."""
    stack.replace_workers(1, cpu="4")
    namespace = stack.namespace("membership", "gate")
    stack.plane.apply(workloads.job("member", namespace, 2, "8"))  # never fits: stays gated
    wait_until(lambda: len(stack.pods(namespace)) == 2, "two pods", 60)
    pod = stack.pods(namespace)[0]["metadata"]["name"]
    moved = stack.plane.kubectl(
        "-n", namespace, "label", "pod", pod, "gangkeeper.io/group=job-elsewhere", "--overwrite", check=False
    )
    assert moved.returncode != 0
    assert "metadata.labels[gangkeeper.io/group]: Invalid value: field is immutable" in moved.stderr
    # The controller's pod patches skip this webhook: the ValidatingAdmissionPolicy holds every account
    # of that name to a release, so a tenant's account named like it still cannot move a pod.
    stack.plane.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": "gangkeeper-controller", "namespace": namespace},
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": "pod-patcher", "namespace": namespace},
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]}],
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "pod-patcher", "namespace": namespace},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-patcher"},
                "subjects": [{"kind": "ServiceAccount", "name": "gangkeeper-controller", "namespace": namespace}],
            },
        ]
    )
    body = '{"metadata":{"labels":{"gangkeeper.io/group":"job-elsewhere"}}}'
    tries: list[Any] = []

    def past_rbac() -> bool:  # the RoleBinding reaches the authorizer's cache a moment after it is applied
        tries.append(
            patch_as(stack, f"/api/v1/namespaces/{namespace}/pods/{pod}", body, namespace, "gangkeeper-controller")
        )
        return "cannot patch resource" not in tries[-1].stderr

    wait_until(past_rbac, "the impostor's RoleBinding in force", 30)
    impostor = tries[-1]
    assert impostor.returncode != 0
    assert "gangkeeper-controller-pod-release-only" in impostor.stderr, impostor.stderr
    assert stack.pods(namespace)[0]["metadata"]["labels"]["gangkeeper.io/group"] == "job-member"


def _validating_calls(stack: Stack) -> tuple[float, float]:
    """(pod and workload CREATEs sent to the validating webhook, those its matchConditions kept back),
    as kube-apiserver counts them (apiserver_admission_webhook_admission_duration_seconds,
    apiserver_admission_match_condition_exclusions_total)."""
    text = stack.plane.kubectl("get", "--raw", "/metrics").stdout
    called = skipped = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if labels.get("name") != "validate.gangkeeper.io" or labels.get("operation") != "CREATE":
                continue
            if sample.name == "apiserver_admission_webhook_admission_duration_seconds_count":
                called += sample.value
            elif sample.name == "apiserver_admission_match_condition_exclusions_total":
                skipped += sample.value
    return called, skipped


def test_pods_the_job_and_statefulset_controllers_create_skip_the_validating_call_but_a_users_do_not(
    stack: Stack,
) -> None:
    """Their templates were checked when the workload was; the mutating webhook checks each pod. Pods of
    any other creator are still validated: the condition names the two controllers' own accounts."""
    stack.replace_workers(2, cpu="4")  # earlier tests' namespaces gone: no other pods made meanwhile
    namespace = stack.namespace("checked-once", "gate")
    called, skipped = _validating_calls(stack)

    stack.plane.apply(workloads.job("trained", namespace, 3, "1"))
    stack.plane.apply(workloads.statefulset("served", namespace, 2, "1"))
    wait_until(lambda: len(stack.pods(namespace)) == 5, "five pods", 60)
    after_workloads = _validating_calls(stack)
    users_pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "by-hand", "namespace": namespace},
        "spec": {"containers": [workloads.container("1")]},
    }
    stack.plane.apply(users_pod)
    after_users_pod = _validating_calls(stack)

    assert after_workloads[0] == called + 2  # the Job and the StatefulSet, not their five pods
    assert after_workloads[1] >= skipped + 5
    assert after_users_pod[0] == after_workloads[0] + 1


def test_only_the_controller_makes_placeholder_pods(stack: Stack) -> None:
    """A tenant who may create pods (the built-in `edit` role in its namespace) may not make a pod that
    carries gangkeeper's placeholder label or names a Gang as owner, nor give either to a pod it has:
    the chart's ValidatingAdmissionPolicy asks the authorizer for the verb `placehold` on gangs, which
    only the controller's ClusterRole grants. So no tenant pod is counted as a gang's room or deleted as
    a placeholder. (The controller's own placeholders are made in tests/real/test_real_autoscale.py.)"""
    stack.replace_workers(1)
    namespace = stack.namespace("dressing", "gate")
    stack.plane.kubectl("-n", namespace, "create", "rolebinding", "tenant-edits", "--clusterrole=edit", "--user=tenant")

    def as_tenant(*args: str, stdin: str | None = None) -> Any:
        return stack.plane.kubectl("--as=tenant", "-n", namespace, *args, stdin=stdin, check=False)

    def pod(name: str, labels: dict[str, str], owners: list[dict[str, str]] | None = None) -> str:
        meta: dict[str, Any] = {"name": name, "labels": labels}
        if owners:
            meta["ownerReferences"] = owners
        spec = {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
        return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})

    refusal = "only gangkeeper's controller makes placeholder pods"
    labelled = as_tenant("create", "-f", "-", stdin=pod("labelled", {"gangkeeper.io/placeholder-for": "job-x"}))
    assert labelled.returncode != 0 and refusal in labelled.stderr, labelled.stderr
    gang_owner = [{"apiVersion": "gangkeeper.io/v1alpha1", "kind": "Gang", "name": "job-x", "uid": "0000"}]
    owned = as_tenant("create", "-f", "-", stdin=pod("owned", {}, gang_owner))
    assert owned.returncode != 0 and refusal in owned.stderr, owned.stderr
    plain = as_tenant("create", "-f", "-", stdin=pod("plain", {"app": "mine"}))
    assert plain.returncode == 0, plain.stderr
    relabelled = as_tenant("label", "pod", "plain", "gangkeeper.io/placeholder-for=job-x")
    assert relabelled.returncode != 0 and refusal in relabelled.stderr, relabelled.stderr
    assert "gangkeeper.io/placeholder-for" not in (stack.plane.get("pod", "plain", namespace=namespace) or {}).get(
        "metadata", {}
    ).get("labels", {})
