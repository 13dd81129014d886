"""No gang left partly running, on the real control plane (tests/realcluster/): the real kube-scheduler
preempts a member of a running gate gang for a higher-priority pod, the real Job controller replaces it,
and gangkeeper requeues the gang whole once its recovery timeout passes; it then runs whole again.
Membership by ownership: a pod that only copies a gang's labels is refused by the real API server's
call to the webhook. Every assertion reads what the cluster reports."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.real.test_real_seeds import assert_started_together
from tests.realcluster import workloads
from tests.realcluster.stack import Stack, bound, running, wait_until
from webhook.controller.observe.books import desired_object

pytestmark = pytest.mark.cluster
URGENT = {
    "apiVersion": "scheduling.k8s.io/v1",
    "kind": "PriorityClass",
    "metadata": {"name": "gangkeeper-test-urgent"},
    "value": 1000000,
    "preemptionPolicy": "PreemptLowerPriority",
}


def urgent_pod(namespace: str, cpu: str) -> dict[str, object]:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "urgent", "namespace": namespace},
        "spec": {"priorityClassName": URGENT["metadata"]["name"], "containers": [workloads.container(cpu)]},  # type: ignore[index]
    }
    return pod


def job_events(stack: Stack, namespace: str) -> str:
    return str(stack.plane.kubectl("get", "events", "-n", namespace, "-o", "json").stdout)


def test_a_preempted_member_requeues_the_gang_whole_and_it_runs_whole_again(stack: Stack) -> None:
    nodes = stack.replace_workers(1, cpu="8")
    namespace = stack.namespace("recovery", "gate")
    other = stack.namespace("recovery-vip", None, opted_in=False)
    stack.plane.apply(URGENT)
    annotations = {"gangkeeper.io/recovery-timeout-seconds": "10", "gangkeeper.io/timeout-seconds": "30"}
    stack.plane.apply(workloads.job("train", namespace, 4, "2", annotations=annotations, backoffLimit=6))
    first = wait_until(lambda: (p := stack.pods(namespace)) and len(running(p)) == 4 and p, "the gang Running", 90)
    assert {p["spec"]["nodeName"] for p in first} == set(nodes)
    # the real scheduler preempts one member for the urgent pod; the Job controller replaces it, gated
    stack.plane.apply(urgent_pod(other, "2"))
    wait_until(lambda: (p := stack.plane.get("pod", "urgent", namespace=other)) and bound([p]), "urgent bound", 90)
    suspended = wait_until(
        lambda: (job := stack.plane.get("job", "train", namespace=namespace)) and job["spec"].get("suspend") and job,
        "the Job suspended by gangkeeper (the gang requeued whole)",
        60,
    )
    assert "gangkeeper.io/suspended" in suspended["metadata"]["annotations"]
    events = job_events(stack, namespace)
    assert "GangRequeued" in events and "lost a member: 3 of 4 running" in events, events[-3000:]
    wait_until(lambda: not stack.pods(namespace) or not bound(stack.pods(namespace)), "the gang's pods gone", 60)
    # room again: the urgent pod ends; after its backoff the gang is resumed and starts whole
    stack.plane.kubectl("delete", "pod", "urgent", "-n", other, "--wait=true", timeout=60)
    before = {y["metadata"]["uid"] for y in first}
    try:
        again = wait_until(
            lambda: (
                (p := [x for x in stack.pods(namespace) if x["metadata"]["uid"] not in before])
                and len(running(p)) == 4
                and p
            ),
            "the gang Running whole again",
            150,
        )
    except AssertionError as error:
        gang = stack.plane.get("gang", "job-train", namespace=namespace)
        raise AssertionError(f"{error}\n{stack.describe(namespace)}\ngang: {gang}") from None
    assert_started_together(again, 4)
    job = stack.plane.get("job", "train", namespace=namespace)
    assert not any(c["type"] == "Failed" and c["status"] == "True" for c in job["status"].get("conditions") or [])
    # the Gang's status follows the pods' by a pass or two (the release's record was written before
    # they bound): it says Running soon after, with no shortfall left
    wait_until(
        lambda: (
            (status := (stack.plane.get("gang", "job-train", namespace=namespace) or {}).get("status") or {})
            and status.get("state") == "Running"
            and "shortSince" not in status
        ),
        "the Gang Running with no shortfall",
        20,
    )


def test_a_replacement_that_fits_is_released_without_a_requeue(stack: Stack) -> None:
    """A member lost while room remains elsewhere: the replacement is released at once, the gang whole again."""
    stack.replace_workers(2, cpu="8")
    namespace = stack.namespace("recovery-fits", "gate")
    # a deleted member counts as a Job failure when the Job controller sees it before KWOK drops its
    # finalizer (job_controller.go isPodFailed): backoffLimit 0 would then fail the Job and delete the rest
    job = workloads.job("train", namespace, 4, "2", annotations={"gangkeeper.io/placement": "pack"}, backoffLimit=6)
    stack.plane.apply(job)
    first = wait_until(lambda: (p := stack.pods(namespace)) and len(running(p)) == 4 and p, "the gang Running", 90)
    victim = first[0]["metadata"]["name"]
    stack.plane.kubectl("delete", "pod", victim, "-n", namespace, "--wait=false")
    wait_until(
        lambda: (
            (p := stack.pods(namespace)) and victim not in {x["metadata"]["name"] for x in p} and len(running(p)) == 4
        ),
        "a replacement Running",
        60,
    )
    time.sleep(3)
    job = stack.plane.get("job", "train", namespace=namespace)
    assert not job["spec"].get("suspend")
    assert "GangRequeued" not in job_events(stack, namespace)


def test_a_copied_pod_with_a_gangs_labels_is_refused(stack: Stack) -> None:
    stack.replace_workers(1)
    namespace = stack.namespace("membership", "gate")
    copy = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "copy",
            "namespace": namespace,
            "labels": {"gangkeeper.io/group": "job-train", "batch.kubernetes.io/job-name": "train"},
            "annotations": {"gangkeeper.io/workload": "Job/train"},
        },
        "spec": {"containers": [workloads.container("100m")]},
    }
    result = stack.plane.kubectl("apply", "-f", "-", stdin=__import__("yaml").safe_dump(copy), check=False)
    assert result.returncode != 0
    assert "metadata.ownerReferences: Forbidden: gang job-train (Job train)" in result.stderr, result.stderr
    assert not stack.pods(namespace)


def priority_class(name: str, value: int, policy: str = "PreemptLowerPriority") -> dict[str, object]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        "preemptionPolicy": policy,
    }


def with_priority(job: dict[str, Any], name: str) -> dict[str, Any]:
    job["spec"]["template"]["spec"]["priorityClassName"] = name
    return job


def gang_pods(stack: Stack, namespace: str, job: str) -> list[dict[str, Any]]:
    return stack.pods(namespace, selector=f"batch.kubernetes.io/job-name={job}")


def test_a_high_priority_gang_preempts_exactly_one_whole_lower_gang(stack: Stack) -> None:
    """Two low-priority gangs fill two nodes; a PodDisruptionBudget guards one. A gang whose PriorityClass
    says preemptionPolicy Never waits; a high-priority gang preempts exactly the unguarded gang, whole
    (its Job suspended, never failed), and runs whole; once it is gone the victim runs whole again."""
    stack.replace_workers(2, cpu="8")
    namespace = stack.namespace("preemption", "gate")
    stack.plane.apply(
        [priority_class("gangkeeper-test-high", 1000), priority_class("gangkeeper-test-polite", 1000, "Never")]
    )
    stack.plane.apply(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "guard-low-a", "namespace": namespace},
            "spec": {"minAvailable": 4, "selector": {"matchLabels": {"batch.kubernetes.io/job-name": "low-a"}}},
        }
    )
    for name in ("low-a", "low-b"):
        stack.plane.apply(workloads.job(name, namespace, 4, "2", annotations={"gangkeeper.io/placement": "pack"}))
    wait_until(lambda: len(running(stack.pods(namespace))) == 8, "both low gangs Running", 120)
    time.sleep(62)  # a gang released within the last minute is nobody's victim (--min-runtime-seconds, 60)
    stack.plane.apply(with_priority(workloads.job("polite", namespace, 4, "2"), "gangkeeper-test-polite"))
    wait_until(lambda: len(gang_pods(stack, namespace, "polite")) == 4, "the polite gang's pods", 60)
    time.sleep(10)
    assert len(running(stack.pods(namespace))) == 8 and not bound(gang_pods(stack, namespace, "polite"))
    gang = stack.plane.get("gang", "job-polite", namespace=namespace)
    assert "preemptionPolicy Never" in gang["status"]["message"], gang["status"]
    stack.plane.kubectl("delete", "job", "polite", "-n", namespace, "--cascade=foreground", "--wait=true", timeout=90)

    stack.plane.apply(with_priority(workloads.job("high", namespace, 4, "2"), "gangkeeper-test-high"))
    try:
        high = wait_until(
            lambda: (p := gang_pods(stack, namespace, "high")) and len(running(p)) == 4 and p,
            "the high gang Running",
            120,
        )
    except AssertionError as error:
        gangs = stack.plane.get("gangs", namespace=namespace)
        states = {g["metadata"]["name"]: (g.get("status") or {}).get("message") for g in gangs}
        raise AssertionError(f"{error}\n{stack.describe(namespace)}\ngangs: {states}") from None
    assert_started_together(high, 4)
    low_a, low_b = (stack.plane.get("job", n, namespace=namespace) for n in ("low-a", "low-b"))
    assert not low_a["spec"].get("suspend") and len(running(gang_pods(stack, namespace, "low-a"))) == 4
    assert low_b["spec"].get("suspend") is True  # the whole unguarded gang went, by suspension
    assert not bound(gang_pods(stack, namespace, "low-b"))
    for job in (low_a, low_b):
        assert not any(c["type"] == "Failed" for c in (job.get("status") or {}).get("conditions") or [])
    events = job_events(stack, namespace)
    assert "GangPreempting" in events and "GangPreempted" in events
    # the high gang ends; the victim is resumed after its backoff and runs whole again
    stack.plane.kubectl("delete", "job", "high", "-n", namespace, "--wait=false")
    try:
        again = wait_until(
            lambda: (p := gang_pods(stack, namespace, "low-b")) and len(running(p)) == 4 and p,
            "the preempted gang Running whole again",
            150,
        )
    except AssertionError as error:
        # what a cold CI run under a build's load once showed no more of: the Job, its Gang's books, the
        # controller's log (kept here, since the pods' sandboxes go with the test)
        low_b = stack.plane.get("job", "low-b", namespace=namespace)
        books = stack.plane.get("gang", "job-low-b", namespace=namespace)
        raise AssertionError(
            f"{error}\nlow-b: {(low_b or {}).get('spec', {}).get('suspend')} "
            f"{((low_b or {}).get('metadata') or {}).get('annotations')}\ngang: {(books or {}).get('status')}\n"
            f"{stack.describe(namespace)}"
        ) from None
    assert_started_together(again, 4)


def test_native_workload_aware_preemption_moves_a_whole_gang(stack: Stack) -> None:
    """The native backend: gangkeeper's PodGroups carry the priority class and ask to be disrupted whole
    (1.36 disruptionMode PodGroup, 1.37 {all: {}}), so the real kube-scheduler's workload-aware
    preemption (KEP-5710) evicts the whole lower-priority gang for a higher one, never one member."""
    if stack.plane.minor == "1.35":
        pytest.skip("1.35 has no workload-aware preemption")
    stack.replace_workers(1, cpu="8")
    namespace = stack.namespace("native-preemption", "native")
    stack.plane.apply(priority_class("gangkeeper-test-high", 1000))
    stack.plane.apply(workloads.job("low", namespace, 4, "2", backoffLimit=20))
    low = wait_until(
        lambda: (p := gang_pods(stack, namespace, "low")) and len(running(p)) == 4 and p, "the low gang Running", 120
    )
    first = {p["metadata"]["uid"] for p in low}
    stack.plane.apply(with_priority(workloads.job("high", namespace, 4, "2"), "gangkeeper-test-high"))
    try:
        high = wait_until(
            lambda: (p := gang_pods(stack, namespace, "high")) and len(running(p)) == 4 and p,
            "the high gang Running",
            180,
        )
    except AssertionError as error:
        raise AssertionError(f"{error}\n{stack.describe(namespace)}") from None
    assert_started_together(high, 4)
    survivors = [p for p in gang_pods(stack, namespace, "low") if p["metadata"]["uid"] in first and bound([p])]
    assert survivors == [], [p["metadata"]["name"] for p in survivors]  # the whole gang went, not one member
    group = stack.plane.get("podgroups.scheduling.k8s.io", "job-high", namespace=namespace)
    assert group["spec"]["priorityClassName"] == "gangkeeper-test-high" and group["spec"]["priority"] == 1000
    assert group["spec"]["disruptionMode"] in ("PodGroup", {"all": {}})


def patch_as(stack: Stack, path: str, body: str, namespace: str, account: str) -> Any:
    """A merge PATCH impersonating a service account: (returncode 0 or 1, stderr) as kubectl would say."""
    import http.client
    import ssl
    import subprocess
    import urllib.parse

    pki = stack.plane.pki
    context = ssl.create_default_context(cafile=str(pki.ca))
    context.load_cert_chain(str(pki.cert("admin")), str(pki.key("admin")))
    server = urllib.parse.urlparse(stack.plane.server)
    connection = http.client.HTTPSConnection(server.hostname or "", server.port, context=context, timeout=30)
    headers = {
        "Content-Type": "application/merge-patch+json",
        "Impersonate-User": f"system:serviceaccount:{namespace}:{account}",
    }
    connection.putrequest("PATCH", path)
    for name, value in headers.items():
        connection.putheader(name, value)
    for group in ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"):
        connection.putheader("Impersonate-Group", group)
    connection.putheader("Content-Length", str(len(body)))
    connection.endheaders(body.encode())
    answer = connection.getresponse()
    text = answer.read().decode()
    connection.close()
    return subprocess.CompletedProcess([], 0 if answer.status < 300 else 1, "", text)


LINUX = {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}
DISK = {"key": "disk", "operator": "In", "values": ["ssd"]}
PIN = {"key": "metadata.name", "operator": "In", "values": ["x"]}
HOLD = {"name": "example.com/hold"}


def required(*terms: dict[str, Any]) -> str:
    """A merge patch setting the pod's required node terms."""
    terms_field = {"nodeSelectorTerms": list(terms)}
    return json.dumps(
        {"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": terms_field}}}}
    )


def test_the_controllers_pod_patches_are_limited_to_its_gate_and_pin(stack: Stack) -> None:
    """RBAC lets the controller patch any pod; the ValidatingAdmissionPolicy the chart renders lets it
    only take its own gate off, pin the node and set its wake annotation. Asked of the real API server,
    as the controller."""
    stack.replace_workers(1)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "held", "annotations": {"team.example.com/owner": "a"}},
        "spec": {
            "schedulingGates": [{"name": "gangkeeper.io/gang-gate"}, {"name": "example.com/hold"}],
            "affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [LINUX]}}
            },
            "containers": [workloads.container("100m")],
        },
    }
    unopted = stack.namespace("controller-patches-plain", None, opted_in=False)
    pod["metadata"]["namespace"] = unopted  # type: ignore[index]
    stack.plane.apply(pod)
    as_controller = ["--as=system:serviceaccount:gangkeeper-system:gangkeeper-controller", "-n", unopted]

    def patch(body: str) -> Any:
        """One merge PATCH as the controller's account sends it (kubectl patch would GET first, which
        that account may not: it lists and watches pods)."""
        return patch_as(
            stack, f"/api/v1/namespaces/{unopted}/pods/held", body, "gangkeeper-system", "gangkeeper-controller"
        )

    refused = {
        "a label": '{"metadata":{"labels":{"gangkeeper.io/group":"elsewhere"}}}',
        "another annotation": '{"metadata":{"annotations":{"gangkeeper.io/woken-at":"now","x.io/y":"z"}}}',
        "a user's annotation removed": '{"metadata":{"annotations":{"team.example.com/owner":null}}}',
        # (gangkeeper's own gate may already be gone: the controller lifts it from a pod in no gang)
        "another controller's gate": '{"spec":{"schedulingGates":[]}}',
        "a foreign nodeSelector": '{"spec":{"nodeSelector":{"disk":"ssd"}}}',
        "a hostname nodeSelector (not the pin)": '{"spec":{"nodeSelector":{"kubernetes.io/hostname":"x"}}}',
        "a label requirement": required({**LINUX, "matchExpressions": [*LINUX["matchExpressions"], DISK]}),
        # (what the API server itself refuses of a gated pod, the VAP never sees: a term dropped or
        # changed, a preferred term, two nodes in one metadata.name requirement)
        "a requirement that is not a pin": required({**LINUX, "matchFields": [{**PIN, "operator": "NotIn"}]}),
    }
    for what, body in refused.items():
        result = patch(body)
        assert result.returncode != 0 and "gangkeeper-controller-pod-release-only" in result.stderr, (
            what,
            result.stderr,
        )
    pinned = {**LINUX, "matchFields": [PIN]}
    allowed = patch(json.dumps({"spec": {**json.loads(required(pinned))["spec"], "schedulingGates": [HOLD]}}))
    assert allowed.returncode == 0, allowed.stderr
    woken = patch('{"metadata":{"annotations":{"gangkeeper.io/woken-at":"2026-11-26T04:00:00+00:00"}}}')
    assert woken.returncode == 0, woken.stderr
    held = stack.plane.get("pod", "held", namespace=unopted)
    assert held["spec"]["schedulingGates"] == [HOLD]
    assert held["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [pinned]
    }
    assert held["metadata"]["annotations"] == {
        "team.example.com/owner": "a",
        "gangkeeper.io/woken-at": "2026-11-26T04:00:00+00:00",
    }
    assert (
        stack.plane.kubectl(
            "auth", "can-i", "patch", "deployments", "-n", "kube-system", *as_controller[:1], check=False
        ).stdout.strip()
        == "no"
    )


def test_a_missing_priority_class_is_warned_about_at_apply(stack: Stack) -> None:
    """The webhook watches PriorityClasses: kubectl shows the warning the real API server relays."""
    stack.replace_workers(1)
    namespace = stack.namespace("priority-typo", "gate")
    job = with_priority(workloads.job("typo", namespace, 2, "100m"), "gangkeeper-test-no-such-class")
    result = stack.plane.kubectl("apply", "-f", "-", stdin=__import__("yaml").safe_dump(job))
    assert "'gangkeeper-test-no-such-class': no such PriorityClass" in result.stderr, result.stderr


def test_a_gang_status_written_over_a_stale_version_is_refused(stack: Stack) -> None:
    """The controller writes a Gang's status over the version it read (GangObjects._patch), so a copy
    behind the API server cannot put back what it read (erased books left a preempted Job suspended for
    ever). That rests on the real API server refusing a /status merge patch of a stale resourceVersion:
    asked of it, as the controller."""
    namespace = stack.namespace("stale-books", "gate")
    # owned (the orphan sweep leaves it) and without pods or a suspension (no pass of the controller's
    # touches it), so only the two writes below change it
    stack.plane.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner", "namespace": namespace}})
    owner = stack.plane.get("configmap", "owner", namespace=namespace)
    stack.plane.apply(desired_object(namespace, "job-stale", "gate", 2, owner))
    read = stack.plane.get("gang", "job-stale", namespace=namespace)["metadata"]["resourceVersion"]
    path = f"/apis/gangkeeper.io/v1alpha1/namespaces/{namespace}/gangs/job-stale/status"
    books = {"attempts": 2, "notBefore": "2026-11-26T10:00:30Z"}
    write = {"metadata": {"resourceVersion": read}, "status": books}
    written = patch_as(stack, path, json.dumps(write), "gangkeeper-system", "gangkeeper-controller")
    assert written.returncode == 0, written.stderr
    behind = {"metadata": {"resourceVersion": read}, "status": {"attempts": None, "notBefore": None}}
    refused = patch_as(stack, path, json.dumps(behind), "gangkeeper-system", "gangkeeper-controller")
    assert refused.returncode == 1 and json.loads(refused.stderr)["code"] == 409, refused.stderr
    assert stack.plane.get("gang", "job-stale", namespace=namespace)["status"] == books


def test_a_gang_preemption_cannot_help_preempts_nothing_and_the_victim_runs_on(stack: Stack) -> None:
    """A high-priority gang whose pods need a pod that does not exist (podAffinity): kube-scheduler would
    preempt nothing for it; the gate's placement does not model affinity, so it preempts nothing either,
    where it once requeued the running gang again and again."""
    stack.replace_workers(1, cpu="8")
    namespace = stack.namespace("preempt-in-vain", "gate")
    stack.plane.apply(priority_class("gangkeeper-test-high", 1000))
    stack.plane.apply(workloads.job("low", namespace, 4, "2"))
    wait_until(lambda: len(running(gang_pods(stack, namespace, "low"))) == 4, "the low gang Running", 120)
    time.sleep(62)  # past the grace after its release (--min-runtime-seconds, 60): a victim from now on
    picky = with_priority(workloads.job("picky", namespace, 4, "2"), "gangkeeper-test-high")
    picky["spec"]["template"]["spec"]["affinity"] = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "nowhere"}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
    stack.plane.apply(picky)
    gang = wait_until(
        lambda: (
            (g := stack.plane.get("gang", "job-picky", namespace=namespace))
            and "preempts nothing" in ((g.get("status") or {}).get("message") or "")
            and g
        ),
        "the picky gang saying it preempts nothing",
        60,
    )
    assert "does not model (podAffinity)" in gang["status"]["message"], gang["status"]
    time.sleep(15)  # several passes
    low = stack.plane.get("job", "low", namespace=namespace)
    assert not low["spec"].get("suspend") and len(running(gang_pods(stack, namespace, "low"))) == 4
    assert "GangPreempt" not in job_events(stack, namespace)
    assert not bound(gang_pods(stack, namespace, "picky"))
