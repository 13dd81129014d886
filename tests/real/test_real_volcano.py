"""The seeds' scenarios under Volcano (its scheduler and controller manager, real): gangkeeper gives an
opted-in namespace's pods `schedulerName: volcano` and the group annotation, its controller makes the
PodGroup in the `default` queue, and Volcano's gang plugin binds the group whole or not at all."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.real.test_real_seeds import Watch, assert_started_together, hold_pending
from tests.realcluster import operators, volcano, workloads
from tests.realcluster.stack import Stack, bound, running, wait_until

pytestmark = pytest.mark.cluster

EXAMPLES = Path(__file__).resolve().parents[3] / "shared" / "examples"


def admitted(stack: Stack, manifest: dict[str, Any]) -> None:
    # the webhook's API discovery refreshes each minute: until it sees Volcano's API the backend is
    # refused, naming what is missing (the CRDs were installed a moment ago)
    wait_until(lambda: stack.plane.apply(manifest), f"{manifest['kind']} admitted", 90, every=5)


def podgroups(stack: Stack, namespace: str) -> list[dict[str, Any]]:
    return list(stack.plane.get("podgroups.scheduling.volcano.sh", namespace=namespace))


@pytest.mark.parametrize("kind", ["job", "lws"])
def test_volcano_all_fit_start_together(vc: Stack, kind: str) -> None:
    """Seed scenario 1 under Volcano: room for all four, bound together by its gang plugin."""
    stack = vc
    stack.replace_workers(3)
    namespace = stack.namespace(f"volcano-fit-{kind}", "volcano")
    manifest = (
        workloads.job("train", namespace, 4, "100m")
        if kind == "job"
        else workloads.leader_worker_set("lws", namespace, 4, "100m")
    )
    admitted(stack, manifest)
    pods = wait_until(lambda: (p := stack.pods(namespace)) and len(running(p)) == 4 and p, "all four Running", 120)
    assert {p["spec"]["schedulerName"] for p in pods} == {volcano.SCHEDULER_NAME}
    assert_started_together(pods, 4)


@pytest.mark.parametrize("kind", ["job", "lws"])
def test_volcano_pinch_holds_the_gang_then_starts_it_whole(vc: Stack, kind: str) -> None:
    stack = vc
    nodes = stack.replace_workers(3)
    for node in nodes[:2]:
        stack.plane.kubectl("taint", "nodes", node, "test=blocked:NoSchedule")
    namespace = stack.namespace(f"volcano-pinch-{kind}", "volcano")
    manifest = (
        workloads.job("train", namespace, 4, "4")
        if kind == "job"
        else workloads.leader_worker_set("lws", namespace, 4, "4")
    )
    admitted(stack, manifest)
    with Watch(stack, namespace) as watch:
        pods = hold_pending(stack, namespace, 4, seconds=10)
        assert {p["spec"]["schedulerName"] for p in pods} == {volcano.SCHEDULER_NAME}
        (group,) = wait_until(lambda: podgroups(stack, namespace), "the PodGroup gangkeeper made", 60)
        assert group["spec"]["minMember"] == 4 and group["spec"].get("queue", "default") == "default"
        names = {p["metadata"]["annotations"]["scheduling.k8s.io/group-name"] for p in pods}
        assert names == {group["metadata"]["name"]}
        for node in nodes[:2]:
            stack.plane.kubectl("taint", "nodes", node, "test=blocked:NoSchedule-")
        pods = wait_until(lambda: (p := stack.pods(namespace)) and len(running(p)) == 4 and p, "all four Running", 120)
    assert not watch.partial
    assert_started_together(pods, 4)
    wait_until(
        lambda: (g := podgroups(stack, namespace)) and g[0].get("status", {}).get("phase") == "Running",
        "the PodGroup Running",
        60,
    )


def test_volcano_gang_larger_than_the_cluster_never_starts_part(vc: Stack) -> None:
    """Six 4-CPU pods on two 8-CPU nodes (room for four): Volcano's gang plugin keeps every pod unbound
    rather than start four of six."""
    stack = vc
    stack.replace_workers(2)
    namespace = stack.namespace("volcano-too-big", "volcano")
    admitted(stack, workloads.job("train", namespace, 6, "4"))
    hold_pending(stack, namespace, 6, seconds=15)
    assert not bound(stack.pods(namespace))


def test_a_generate_name_job_gets_its_podgroup_before_its_pods(vc: Stack) -> None:
    """`kubectl create` of a Job with only generateName: Volcano's pod admission refuses a pod whose
    PodGroup does not exist, so the PodGroup must come from the Job, by a name known at admission. The
    webhook names the Job (as the API server would), its controller makes the PodGroup, the gang starts."""
    stack = vc
    stack.replace_workers(2)
    namespace = stack.namespace("volcano-generate-name", "volcano")
    job = workloads.job("train", namespace, 3, "1")
    job["metadata"]["generateName"] = job["metadata"].pop("name") + "-"
    created = wait_until(
        lambda: (
            (
                r := stack.plane.kubectl("create", "-o", "name", "-f", "-", stdin=yaml.safe_dump(job), check=False)
            ).returncode
            == 0
            and r
        ),
        "Job admitted",
        90,
        every=5,
    )
    name = created.stdout.strip().rsplit("/", 1)[-1]
    assert name.startswith("train-") and len(name) == len("train-") + 5, name
    pods = wait_until(
        lambda: (p := stack.pods(namespace)) and len(running(p)) == 3 and p, "the gang Running", 120, every=2
    )
    assert {p["metadata"]["annotations"]["scheduling.k8s.io/group-name"] for p in pods} == {f"job-{name}"}
    assert_started_together(pods, 3)
    assert [g["metadata"]["name"] for g in podgroups(stack, namespace)] == [f"job-{name}"]


def test_jobs_applied_at_once_find_their_podgroups_before_their_first_pods(vc: Stack) -> None:
    """The webhook makes a Job's PodGroup at the Job's validating admission (admission/ahead.py), before
    any controller sees the Job: Volcano's pod admission refuses a pod whose PodGroup is missing, and the
    Job controller then retries after 1 s, doubling. Twelve Jobs applied at once: every pod is admitted
    the first time (the first Job may meet a webhook that has not discovered Volcano yet), every Job's
    pods exist within a second of it, and the controller has made each Job its PodGroup's owner."""
    stack = vc
    stack.replace_workers(2)
    namespace = stack.namespace("volcano-ahead", "volcano")
    jobs = [workloads.job(f"burst-{i}", namespace, 1, "10m") for i in range(12)]
    wait_until(lambda: stack.plane.apply(jobs[0]), "the first Job admitted", 90, every=5)
    stack.plane.apply(jobs[1:])
    pods = wait_until(lambda: (p := stack.pods(namespace)) and len(p) == 12 and p, "every Job's pod created", 120)
    refusals = {
        e["involvedObject"]["name"]: e.get("message", "")
        for e in stack.plane.get("events", namespace=namespace)
        if e.get("reason") == "FailedCreate" and e["involvedObject"].get("kind") == "Job"
    }
    refused = set(refusals)
    assert refused <= {"burst-0"}, f"pods refused for want of a PodGroup: {refusals}"
    jobs_now = stack.plane.get("jobs", namespace=namespace)
    created = {j["metadata"]["name"]: j["metadata"]["creationTimestamp"] for j in jobs_now}
    late = [
        p["metadata"]["name"]
        for p in pods
        if seconds_between(created[p["metadata"]["labels"]["job-name"]], p["metadata"]["creationTimestamp"]) > 1
    ]
    assert len(late) <= 1, f"pods created more than 1 s after their Job: {late}"
    uids = {j["metadata"]["uid"] for j in jobs_now}

    def adopted() -> bool:
        groups = podgroups(stack, namespace)
        owners = {o["uid"] for g in groups for o in g["metadata"].get("ownerReferences") or []}
        return len(groups) == 12 and owners == uids

    wait_until(adopted, "every PodGroup owned by its Job", 60)


def seconds_between(earlier: str, later: str) -> float:
    parse = dt.datetime.fromisoformat
    return (parse(later.replace("Z", "+00:00")) - parse(earlier.replace("Z", "+00:00"))).total_seconds()


@pytest.fixture
def lws_makes_volcano_gangs(vc: Stack) -> Iterator[Stack]:
    """LWS with `gangSchedulingManagement.schedulerProvider: volcano`: its pod webhook names each group's
    PodGroup and its pod controller creates it (lws pkg/schedulerprovider/volcano_provider.go), from the
    leader pod: Volcano's pod validation, which refuses that pod until the PodGroup exists, is off meanwhile
    (volcano.without_pod_validation: the two cannot run together upstream)."""
    saved = volcano.without_pod_validation(vc.plane)
    operators.replace_running(vc.plane, operators.lws("volcano"))
    yield vc
    operators.replace_running(vc.plane, operators.lws())
    vc.plane.apply(saved)


def test_lws_own_volcano_gang_wins_over_gangkeepers(lws_makes_volcano_gangs: Stack) -> None:
    """gangkeeper's webhook stamps each pod first (configurations run in name order), LWS's webhook then
    names its own PodGroup, and gangkeeper, called again (reinvocationPolicy IfNeeded), takes its stamp
    off: every pod of the group is in LWS's one PodGroup, none in a second, and the group starts whole."""
    stack = lws_makes_volcano_gangs
    stack.replace_workers(2)
    namespace = stack.namespace("volcano-lws-provider", "volcano")
    admitted(stack, workloads.leader_worker_set("lws", namespace, 4, "1"))
    pods = wait_until(lambda: (p := stack.pods(namespace)) and len(running(p)) == 4 and p, "the group Running", 150)
    names = {p["metadata"]["annotations"]["scheduling.k8s.io/group-name"] for p in pods}
    assert len(names) == 1 and names != {"lws-lws-0"}, names
    assert not [p for p in pods if "gangkeeper.io/group" in (p["metadata"].get("labels") or {})]
    assert not [
        p for p in pods if any(g["name"] == "gangkeeper.io/gang-gate" for g in p["spec"].get("schedulingGates") or [])
    ]
    groups = podgroups(stack, namespace)
    assert [g["metadata"]["name"] for g in groups] == sorted(names), "one PodGroup, LWS's"
    assert groups[0]["spec"]["minMember"] == 4


def test_a_missing_queue_is_a_warning_at_apply_and_the_jobs_pods_are_refused_by_volcano(vc: Stack) -> None:
    """The webhook sees Volcano's queues: kubectl prints the warning; Volcano's own pod admission then
    refuses each pod (the Job controller's FailedCreate event names the queue); creating the queue lets
    the gang start whole, with no change to the Job."""
    stack = vc
    stack.replace_workers(2)
    namespace = stack.namespace("volcano-no-queue", "volcano")
    # the namespace's owner lets its gangs use the queue research (only its default queue otherwise)
    stack.plane.kubectl("annotate", "namespace", namespace, "gangkeeper.io/volcano-queues=research")
    job = workloads.job("train", namespace, 3, "100m", annotations={"gangkeeper.io/queue": "research"})
    applied = wait_until(
        lambda: (
            (r := stack.plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(job), check=False)).returncode == 0 and r
        ),
        "Job admitted",
        90,
        every=5,
    )
    assert "Warning: Volcano queue 'research' does not exist" in applied.stderr, applied.stderr

    def refused() -> bool:
        events = stack.plane.get("events", namespace=namespace)
        return any(e.get("reason") == "FailedCreate" and "research" in e.get("message", "") for e in events)

    wait_until(refused, "Volcano refusing the pods (FailedCreate naming the queue)", 90)
    assert stack.pods(namespace) == []
    stack.plane.apply(
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": "research"},
            "spec": {"weight": 1},
        }
    )
    pods = wait_until(
        lambda: (p := stack.pods(namespace)) and len(running(p)) == 3 and p, "the gang Running", 240, every=2
    )
    assert len({p["metadata"]["annotations"]["scheduling.k8s.io/group-name"] for p in pods}) == 1


def upstream_example(path: str, namespace: str) -> dict[str, Any]:
    """A manifest from ../shared/examples, as released upstream, placed in the test's namespace."""
    (manifest,) = [o for o in yaml.safe_load_all((EXAMPLES / path).read_text()) if o]
    manifest["metadata"]["namespace"] = namespace
    return dict(manifest)


@pytest.fixture
def operator_making_volcano_gangs(vc: Stack, request: pytest.FixtureRequest) -> Iterator[Stack]:
    operator = {"kuberay": operators.kuberay, "training-operator": operators.training_operator}[request.param]()
    reason = operator.missing()
    if reason:
        pytest.skip(reason)
    operator.install(vc.plane)
    yield vc
    operator.uninstall(vc.plane)


def only_the_operators_gang(stack: Stack, namespace: str, size: int, group: str) -> None:
    """All `size` pods Running in the operator's PodGroup `group` and in no other: gangkeeper's stamp
    came off every pod and the PodGroup it made ahead of them is gone."""
    pods = wait_until(
        lambda: (p := stack.pods(namespace)) and len(running(p)) == size and p, "the gang Running", 180, every=2
    )
    assert {p["metadata"]["annotations"]["scheduling.k8s.io/group-name"] for p in pods} == {group}
    assert {p["spec"]["schedulerName"] for p in pods} == {volcano.SCHEDULER_NAME}
    assert not [p for p in pods if "gangkeeper.io/group" in (p["metadata"].get("labels") or {})]
    assert_started_together(pods, size)
    groups = wait_until(
        lambda: (g := podgroups(stack, namespace)) and len(g) == 1 and g, "one PodGroup, the operator's", 60
    )
    assert groups[0]["metadata"]["name"] == group and groups[0]["spec"]["minMember"] == size


@pytest.mark.parametrize("operator_making_volcano_gangs", ["kuberay"], indirect=True)
def test_kuberays_own_volcano_gang_wins_over_gangkeepers(operator_making_volcano_gangs: Stack) -> None:
    """KubeRay with `--batch-scheduler=volcano` and the upstream sample RayCluster (head and 3 workers,
    no gang label: KubeRay's Volcano plugin makes the group for every cluster)."""
    stack = operator_making_volcano_gangs
    stack.replace_workers(2)
    namespace = stack.namespace("volcano-kuberay", "volcano")
    cluster = upstream_example("ray/raycluster-sample.yaml", namespace)
    workers = cluster["spec"]["workerGroupSpecs"][0]
    workers["replicas"] = workers["minReplicas"] = 3
    admitted(stack, cluster)
    only_the_operators_gang(stack, namespace, 4, f"ray-{cluster['metadata']['name']}-pg")


@pytest.mark.parametrize("operator_making_volcano_gangs", ["training-operator"], indirect=True)
def test_training_operators_own_volcano_gang_wins_over_gangkeepers(operator_making_volcano_gangs: Stack) -> None:
    """training-operator v1 with `--gang-scheduler-name=volcano` and the upstream simple PyTorchJob (a
    master and 3 workers)."""
    stack = operator_making_volcano_gangs
    stack.replace_workers(2)
    namespace = stack.namespace("volcano-pytorch", "volcano")
    job = upstream_example("kubeflow/pytorchjob-simple.yaml", namespace)
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 3
    admitted(stack, job)
    only_the_operators_gang(stack, namespace, 4, job["metadata"]["name"])


@pytest.fixture
def volcano_named_otherwise(vc: Stack) -> Iterator[Stack]:
    """gangkeeper configured as a cluster whose Volcano profile is `volcano-gpu` would configure it
    (schedulerNames.volcano in the Configuration both components read), put back afterwards."""
    saved = vc.plane.get("configmap", "gangkeeper-config", namespace="gangkeeper-system")
    text = saved["data"]["config.yaml"]
    changed = text.replace("volcano: volcano\n", f"volcano: {volcano.OTHER_SCHEDULER_NAME}\n")
    assert changed != text, text
    patch = {"data": {"config.yaml": changed}}
    vc.plane.kubectl("-n", "gangkeeper-system", "patch", "configmap", "gangkeeper-config", "-p", json.dumps(patch))
    vc.restart("webhook", "controller")
    try:
        yield vc
    finally:
        patch = {"data": {"config.yaml": text}}
        vc.plane.kubectl("-n", "gangkeeper-system", "patch", "configmap", "gangkeeper-config", "-p", json.dumps(patch))
        vc.restart("webhook", "controller")


def test_a_leaderworkerset_under_a_volcano_scheduler_of_another_name_runs_whole(
    volcano_named_otherwise: Stack,
) -> None:
    """The controller reads the configured Volcano scheduler name too: a LeaderWorkerSet whose templates
    the webhook gave `volcano-gpu` gets its group's PodGroup from the set, ahead of the pods, so Volcano's
    pod admission (which refuses a pod naming a PodGroup that does not exist) lets them in. Before, the
    controller compared with `volcano`, made no PodGroup, and every pod of the set was refused."""
    stack = volcano_named_otherwise
    stack.replace_workers(2)
    namespace = stack.namespace("volcano-named", "volcano")
    admitted(stack, workloads.leader_worker_set("lws", namespace, 3, "1"))
    try:
        pods = wait_until(lambda: (p := stack.pods(namespace)) and len(running(p)) == 3 and p, "the group Running", 120)
    except AssertionError as error:
        raise AssertionError(f"{error}\n{stack.describe(namespace)}") from None
    assert {p["spec"]["schedulerName"] for p in pods} == {volcano.OTHER_SCHEDULER_NAME}
    assert {p["metadata"]["annotations"]["scheduling.k8s.io/group-name"] for p in pods} == {"lws-lws-0"}
    groups = podgroups(stack, namespace)
    assert [g["metadata"]["name"] for g in groups] == ["lws-lws-0"] and groups[0]["spec"]["minMember"] == 3
    assert "gangkeeper.io/group" in groups[0]["metadata"]["labels"]
    assert_started_together(pods, 3)


def test_a_forged_review_decides_nothing_and_the_webhooks_account_makes_only_held_groups(vc: Stack) -> None:
    """The webhook cannot tell a review the API server sends from one posted to its port: a forged
    review for another namespace's Job leaves a held PodGroup (Volcano starts none of its pods) with
    nothing the forger asked for; the real Job's PodGroup, adopted by the controller, is the real Job's
    gang. From the webhook's account kube-apiserver itself refuses any PodGroup not in the held shape
    (the ValidatingAdmissionPolicy gangkeeper-webhook-creates-held-podgroups-only)."""
    import base64
    import ssl
    import tempfile
    import urllib.request

    from webhook.admission.decide import admit
    from webhook.backends import make

    stack = vc
    stack.replace_workers(2)
    namespace = stack.namespace("volcano-forged", "volcano")
    wait_until(lambda: stack.plane.apply(workloads.job("warm", namespace, 1, "10m")), "the backend discovered", 90, 5)
    # the forged review: Job train in that namespace, at a priority and a size of the forger's choosing
    forged = workloads.job("train", namespace, 1, "100m")
    forged["spec"]["template"]["spec"]["priorityClassName"] = "system-cluster-critical"
    stamped = admit(forged, "CREATE", make("volcano"), namespace).mutated
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "forged-1",
            "kind": {"group": "batch", "version": "v1", "kind": "Job"},
            "resource": {"group": "batch", "version": "v1", "resource": "jobs"},
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "system:admin"},
            "object": stamped,
        },
    }
    bundle = stack.plane.get("validatingwebhookconfiguration", "gangkeeper")["webhooks"][0]["clientConfig"]["caBundle"]
    with tempfile.NamedTemporaryFile("wb", suffix=".crt") as ca:
        ca.write(base64.b64decode(bundle))
        ca.flush()
        context = ssl.create_default_context(cafile=ca.name)
        context.check_hostname = False
        address = stack.webhook_endpoints()[0]
        request = urllib.request.Request(
            f"https://{address}:8443/validate",
            data=json.dumps(review).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, context=context, timeout=10) as answer:
            assert json.loads(answer.read())["response"]["allowed"] is True
    held = wait_until(lambda: [g for g in podgroups(stack, namespace) if g["metadata"]["name"] == "job-train"], "held")
    assert held[0]["spec"]["minMember"] == 1_000_000 and "priorityClassName" not in held[0]["spec"], held[0]["spec"]
    # the real Job, three pods, no priority: its gang is what the PodGroup says once adopted
    stack.plane.apply(workloads.job("train", namespace, 3, "100m"))
    pods = wait_until(
        lambda: (
            (p := [q for q in stack.pods(namespace) if q["metadata"]["labels"].get("job-name") == "train"])
            and len(running(p)) == 3
            and p
        ),
        "Job train's gang Running",
        120,
        every=2,
    )
    assert_started_together(pods, 3)
    group = next(g for g in podgroups(stack, namespace) if g["metadata"]["name"] == "job-train")
    job_uid = stack.plane.get("job", "train", namespace=namespace)["metadata"]["uid"]
    assert group["spec"]["minMember"] == 3 and "priorityClassName" not in group["spec"], group["spec"]
    assert [o["uid"] for o in group["metadata"]["ownerReferences"]] == [job_uid]

    def create_as_the_webhook(spec: dict[str, Any], name: str) -> Any:
        podgroup = {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {"gangkeeper.io/group": name},
                "annotations": {"gangkeeper.io/awaiting-owner": "true"},
            },
            "spec": spec,
        }
        return stack.plane.kubectl(
            "--as=system:serviceaccount:gangkeeper-system:gangkeeper-webhook",
            "create",
            "-f",
            "-",
            stdin=json.dumps(podgroup),
            check=False,
        )

    refused = create_as_the_webhook({"minMember": 1, "priorityClassName": "system-cluster-critical"}, "job-other")
    assert refused.returncode != 0 and "gangkeeper-webhook-creates-held-podgroups-only" in refused.stderr, refused
    allowed = create_as_the_webhook({"minMember": 1_000_000}, "job-held")
    assert allowed.returncode == 0, allowed.stderr


def test_a_workload_claiming_devices_is_refused_under_a_volcano_that_does_not_allocate_them(vc: Stack) -> None:
    """Volcano 1.10 (the newest the Go module proxy serves) has no DRA in its predicates: it binds pods
    with their claims unallocated (tried here: all 12 pods of the DRA pinch bound, 4 on a node with no
    device, none of the 12 claims allocated). gangkeeper refuses such a workload at apply under Volcano,
    naming the field and the way out, unless the platform says its Volcano allocates devices."""
    from tests.realcluster import dra

    stack = vc
    stack.replace_workers(2)
    dra.publish(stack, stack.workers, 4)
    namespace = stack.namespace("volcano-dra", "volcano")
    stack.plane.apply(dra.claim_template(namespace))
    wait_until(lambda: stack.plane.apply(workloads.job("warm", namespace, 1, "10m")), "the backend discovered", 90, 5)
    job = dra.claiming(workloads.job("train", namespace, 2, "100m"))
    refused = stack.plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(job), check=False)
    assert refused.returncode != 0
    assert "spec.template.spec.resourceClaims: Forbidden" in refused.stderr, refused.stderr
    assert "gangkeeper.io/backend=gate or native" in refused.stderr
    assert not [p for p in stack.pods(namespace) if p["metadata"]["labels"].get("job-name") == "train"]
