"""The install manifests: every kustomization builds and validates, the webhook configurations are safe,
the pods are locked down, and the RBAC grants exactly the API calls the code makes."""

from __future__ import annotations

import datetime as dt
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import builders as b
from tests.apiserver import TestApiServer
from tests.cluster import Clock, add_job, add_job_pods, node
from tests.schemas import is_crd_kind, validate
from webhook.admission.decide import admit
from webhook.backends import make
from webhook.controller.observe.workloads import SUSPEND_PATHS, WORKLOAD_RESOURCES
from webhook.controller.run.leader import LeaderElector
from webhook.controller.run.reconciler import Controller
from webhook.gangs import kinds
from webhook.informer import Informer
from webhook.kube import NAMESPACES, NODES, PODS, Api, client_from

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
KUSTOMIZATIONS = [
    "base",
    "overlays/volcano",
    "overlays/coscheduling",
    "overlays/native",
    "overlays/gate",
    "examples",
]


@cache
def build(kustomization: str) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl (with its built-in kustomize) is needed to build the manifests"
    output = subprocess.run(
        [kubectl, "kustomize", str(MANIFESTS / kustomization)], capture_output=True, text=True, check=True
    ).stdout
    return [d for d in yaml.safe_load_all(output) if d]


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
@pytest.mark.parametrize("version", ["1.35", "1.36", "1.37"])
def test_every_object_validates(kustomization: str, version: str) -> None:
    for obj in build(kustomization):
        validate(obj, version)


def by_kind(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    return next(o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name))


@pytest.mark.parametrize("backend", ["volcano", "coscheduling", "native", "gate"])
def test_each_overlay_sets_its_backend(backend: str) -> None:
    webhook = by_kind(build(f"overlays/{backend}"), "Deployment", "gangkeeper-webhook")
    env = {e["name"]: e.get("value") for e in webhook["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["GANGKEEPER_BACKEND"] == backend


def test_webhook_configurations_only_touch_opted_in_namespaces_and_fail_closed_there() -> None:
    objects = build("base")
    # every kind's record (webhook/gangs/kinds.py) is admitted, at every version it is served at
    expected_resources = {(k.group, k.plural) for k in kinds.REGISTRY.values()}
    assert expected_resources >= {(r.group_version.rpartition("/")[0], r.plural) for r in WORKLOAD_RESOURCES.values()}
    for kind, name in (("MutatingWebhookConfiguration", "mutate"), ("ValidatingWebhookConfiguration", "validate")):
        (hook,) = [h for h in by_kind(objects, kind)["webhooks"] if h["name"] == f"{name}.gangkeeper.io"]
        # the validating call makes a Volcano workload's PodGroups (admission/ahead.py), never on a dry run
        assert hook["failurePolicy"] == "Fail"
        assert hook["sideEffects"] == ("NoneOnDryRun" if name == "validate" else "None")
        assert hook["admissionReviewVersions"] == ["v1"] and 1 <= hook["timeoutSeconds"] <= 5
        expressions = hook["namespaceSelector"]["matchExpressions"]
        assert {"key": "gangkeeper.io/enabled", "operator": "In", "values": ["true"]} in expressions
        assert {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]} in expressions
        assert {"key": "gangkeeper.io/system", "operator": "DoesNotExist"} in expressions
        resources = {(g, r) for rule in hook["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
        scales = {("apps", "statefulsets/scale"), ("leaderworkerset.x-k8s.io", "leaderworkersets/scale")}
        assert resources == expected_resources | (scales if name == "validate" else set())
        operations = {op for rule in hook["rules"] for op in rule["operations"]}
        if kind == "MutatingWebhookConfiguration":
            assert hook["reinvocationPolicy"] == "IfNeeded"
            assert operations == {"CREATE"}  # membership is set at creation; updates are never mutated
        else:
            assert operations == {"CREATE", "UPDATE"}
        for k in kinds.REGISTRY.values():
            versions = {v for rule in hook["rules"] if k.plural in rule["resources"] for v in rule["apiVersions"]}
            assert {k.version, *k.other_versions} - {""} <= versions, k.kind
        mpijob_versions = {v for rule in hook["rules"] if "mpijobs" in rule["resources"] for v in rule["apiVersions"]}
        assert mpijob_versions == {"v1", "v2beta1"}  # training-operator v1 and mpi-operator v2
    namespace = by_kind(objects, "Namespace")
    assert namespace["metadata"]["labels"]["gangkeeper.io/system"] == "true"


def test_the_namespace_label_check_sees_every_namespace_and_can_refuse_none() -> None:
    webhooks = by_kind(build("base"), "ValidatingWebhookConfiguration")["webhooks"]
    assert [h["name"] for h in webhooks] == ["validate.gangkeeper.io", "namespaces.gangkeeper.io"]
    hook = webhooks[1]
    assert hook["failurePolicy"] == "Ignore" and hook["timeoutSeconds"] <= 2
    assert hook["clientConfig"]["service"]["path"] == "/validate"
    assert hook["rules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["namespaces"], "operations": ["CREATE", "UPDATE"]}
    ]
    selector = hook["namespaceSelector"]["matchExpressions"]
    assert selector == [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}]


def test_another_namespace_leaves_no_reference_to_gangkeeper_system(tmp_path: Path) -> None:
    """An overlay that installs elsewhere (`namespace:`) must carry the name everywhere it is used."""
    overlay = MANIFESTS / ".namespace-check"
    overlay.mkdir(exist_ok=True)
    try:
        (overlay / "kustomization.yaml").write_text(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
            "namespace: platform-gang\nresources:\n  - ../base\n"
        )
        rendered = subprocess.run(
            ["kubectl", "kustomize", str(overlay)], capture_output=True, text=True, check=True
        ).stdout
        assert "gangkeeper-system" not in rendered
        assert "platform-gang" in rendered
    finally:
        shutil.rmtree(overlay)


def test_the_webhook_survives_a_node_and_a_drain() -> None:
    """Admission of every opted-in namespace waits on the webhook: two replicas never on one node, a
    PodDisruptionBudget, a critical priority, and readiness that tolerates one slow probe."""
    objects = build("base")
    webhook = by_kind(objects, "Deployment", "gangkeeper-webhook")
    pod = webhook["spec"]["template"]["spec"]
    assert webhook["spec"]["replicas"] == 2
    assert pod["priorityClassName"] == "system-cluster-critical"
    (term,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == webhook["spec"]["selector"]["matchLabels"]
    assert pod["containers"][0]["readinessProbe"]["failureThreshold"] >= 2
    budget = by_kind(objects, "PodDisruptionBudget", "gangkeeper-webhook")
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"] == webhook["spec"]["selector"]["matchLabels"]
    controller = by_kind(objects, "Deployment", "gangkeeper-controller")
    assert controller["spec"]["template"]["spec"]["priorityClassName"] == "system-cluster-critical"


def test_pods_are_locked_down() -> None:
    objects = build("base")
    for name in ("gangkeeper-webhook", "gangkeeper-controller"):
        spec = by_kind(objects, "Deployment", name)["spec"]
        pod = spec["template"]["spec"]
        assert spec["replicas"] == 2
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 65532
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in pod["containers"]:
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True and context["allowPrivilegeEscalation"] is False
            assert context["capabilities"] == {"drop": ["ALL"]}
            assert container["resources"]["requests"] and container["resources"]["limits"]
            assert container["livenessProbe"] and container["readinessProbe"]
    assert by_kind(objects, "PodDisruptionBudget")["spec"]["minAvailable"] == 1


def test_examples_pass_through_gangkeeper() -> None:
    from webhook.offline import mutate_stream

    for backend in ("gate", "volcano"):
        result = mutate_stream(build("examples"), backend)
        assert not result.denials
        for obj in result.objects:
            validate(obj)
        assert any(is_crd_kind(o) for o in result.objects)


# --- RBAC against the calls the code makes ------------------------------------------------------
_PATH = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)(?:/namespaces/(?P<ns>[^/]+))?/(?P<resource>[^/?]+)"
    r"(?:/(?P<name>[^/?]+))?(?:/(?P<sub>[^/?]+))?"
)


def to_call(method: str, path: str) -> tuple[str, str, str, str | None]:
    match = _PATH.match(path)
    assert match, path
    resource = match["resource"] + (f"/{match['sub']}" if match["sub"] else "")
    verb = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}.get(method)
    if verb is None:
        verb = "get" if match["name"] else ("watch" if "watch=true" in path else "list")
    return match["group"] or "", resource, verb, match["name"] if verb not in ("create", "list", "watch") else None


def rules_for(account: str) -> list[dict[str, Any]]:
    objects = build("base")
    roles = {(o["kind"], o["metadata"]["name"]): o for o in objects if o["kind"] in ("ClusterRole", "Role")}
    rules = []
    for binding in (o for o in objects if o["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        if any(s["name"] == account for s in binding["subjects"]):
            rules += roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]["rules"]
    return rules


def allowed(rules: list[dict[str, Any]], call: tuple[str, str, str, str | None]) -> bool:
    group, resource, verb, name = call
    return any(
        group in r["apiGroups"]
        and resource in r["resources"]
        and verb in r["verbs"]
        and (not r.get("resourceNames") or name in r["resourceNames"])
        for r in rules
    )


def granted(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(g, res, v) for r in rules for g in r["apiGroups"] for res in r["resources"] for v in r["verbs"]}


def exercise_controller(server: TestApiServer) -> None:
    from webhook.controller.act.gangobject import GANGS
    from webhook.controller.observe.devices import RESOURCES as DRA_RESOURCES
    from webhook.controller.run.process import served

    store, api = server.store, Api(client_from(server=server.url))
    store.served["scheduling.k8s.io/v1beta1"] = {"podgroups", "workloads"}
    store.served["scheduling.k8s.io/v1alpha3"] = {"compositepodgroups"}
    clock = Clock()
    store.served["gangkeeper.io/v1alpha1"] = {"gangs"}
    store.served["resource.k8s.io/v1"] = {r.plural for r in DRA_RESOURCES}
    groups = Controller(api, native_composite=True).groups.resources()
    watched = served([*WORKLOAD_RESOURCES.values(), *groups, GANGS, *DRA_RESOURCES], api)
    for resource in [PODS, NODES, NAMESPACES, *watched]:
        informer = Informer(api, resource, watch_seconds=1)
        informer.relist()
        informer.watch_once()
    elector = LeaderElector(api, "gangkeeper-system", "gangkeeper-controller", "a", clock=clock)
    elector.try_acquire_or_renew()
    elector.try_acquire_or_renew()
    store.create("v1", "nodes", "", node("w1", cpu="64"))
    # gate: release, then time out (a Job is suspended, with backoff annotations)
    add_job_pods(
        store, add_job(store, "gated", parallelism=2, cpu="1", annotations={"gangkeeper.io/timeout-seconds": "5"})
    )
    # gate: a StatefulSet gang has no suspend field: its pods are evicted
    sts = b.statefulset("db", replicas=2)
    sts["metadata"]["annotations"] = {"gangkeeper.io/timeout-seconds": "5"}
    sts_admitted = admit(sts, "CREATE", make("gate"), "team-a").mutated
    stored_sts = store.create("apps/v1", "statefulsets", "team-a", sts_admitted)
    for ordinal in range(2):
        template = stored_sts["spec"]["template"]
        pod = b.pod(
            f"db-{ordinal}",
            labels=dict(template["metadata"]["labels"]),
            annotations=dict(template["metadata"]["annotations"]),
            owner=("apps/v1", "StatefulSet", "db"),
            spec=dict(template["spec"]),
        )
        pod["metadata"]["ownerReferences"][0]["uid"] = stored_sts["metadata"]["uid"]  # made by that very one
        store.create("v1", "pods", "team-a", admit(pod, "CREATE", make("gate"), "team-a").mutated)
    # group objects of every backend, then a scale-up so each is patched
    for backend in ("volcano", "coscheduling", "native"):
        job = add_job(store, backend, parallelism=2, cpu="1")
        add_job_pods(store, job, backend=backend)
    # a native gang under a CompositePodGroup (1.37, a workload-wide domain)
    shared = {"gangkeeper.io/workload-topology-required": "topology.kubernetes.io/zone"}
    add_job_pods(store, add_job(store, "composite", parallelism=2, cpu="1", annotations=shared), backend="native")
    # orphaned groups of bare pods, one per backend
    for backend in ("volcano", "coscheduling", "native"):
        bare = b.pod(
            f"lonely-{backend}",
            labels={"gangkeeper.io/group-name": f"lonely-{backend}"},
            annotations={"gangkeeper.io/group-size": "1"},
        )
        store.create("v1", "pods", "team-a", admit(bare, "CREATE", make(backend), "team-a").mutated)
    # and one under a CompositePodGroup, which goes with it
    bare = b.pod(
        "lonely-composite",
        labels={"gangkeeper.io/group-name": "lonely-composite"},
        annotations={"gangkeeper.io/group-size": "1", "gangkeeper.io/workload-topology-required": "example.com/rack"},
    )
    composite = make("native", composite_groups=True)
    store.create("v1", "pods", "team-a", admit(bare, "CREATE", composite, "team-a").mutated)
    controller = Controller(api, clock=clock, orphan_seconds=0, resync_seconds=0, native_composite=True)
    controller.reconcile_once()
    for backend in ("volcano", "coscheduling", "native"):
        store.patch("batch/v1", "jobs", "team-a", backend, {"spec": {"parallelism": 3}})
    for backend in ("volcano", "coscheduling", "native", "composite"):
        store.delete("v1", "pods", "team-a", f"lonely-{backend}")
    clock.advance(10)
    controller.reconcile_once()
    controller.recorder.flush()
    # whole-gang preemption reads the victims' PodDisruptionBudgets before any pod goes
    from webhook.controller.decide.preemption import Victim

    assert not controller.cycle.preemptor._protected(Victim("team-a/x", False, 0, ()), controller.snapshot(), {})
    # the chart's pre-delete hook runs `gangkeeper release-all` with the controller's account
    from webhook.controller.act.uninstall import release_all

    add_job_pods(store, add_job(store, "left-gated", parallelism=2, cpu="1"))
    assert not release_all(api).failed
    # on a cluster Karpenter grows: placeholder pods for a gang that waits on capacity, then deleted
    store.served["karpenter.sh/v1"] = {"nodepools"}
    store.create("karpenter.sh/v1", "nodepools", "", {"metadata": {"name": "default"}, "spec": {}})
    add_job_pods(store, add_job(store, "grows", parallelism=2, cpu="100"))
    grower = Controller(api, clock=clock)
    grower.reconcile_once()  # its Gang object, which owns the placeholders
    grower.reconcile_once()
    assert [
        p
        for p in store.list("v1", "pods", "team-a")[0]
        if "gangkeeper.io/placeholder-for" in p["metadata"].get("labels", {})
    ]
    store.delete("batch/v1", "jobs", "team-a", "grows")
    for pod in store.list("v1", "pods", "team-a")[0]:
        if pod["metadata"].get("labels", {}).get("gangkeeper.io/group") == "job-grows":
            store.delete("v1", "pods", "team-a", pod["metadata"]["name"])
    grower.reconcile_once()
    # with Cluster Autoscaler: a ProvisioningRequest and its PodTemplate for a gang that waits, watched,
    # then deleted once it no longer waits (one of that name someone else made is never touched)
    from webhook.controller.act.provisioning import PROVISIONING_REQUESTS

    store.served[PROVISIONING_REQUESTS.group_version] = {PROVISIONING_REQUESTS.plural}
    requests = Informer(api, PROVISIONING_REQUESTS, watch_seconds=1)
    requests.relist()
    requests.watch_once()
    asker = Controller(api, clock=clock, autoscaler="cluster-autoscaler")
    asker.informers[(PROVISIONING_REQUESTS.group_version, PROVISIONING_REQUESTS.plural)] = requests
    add_job_pods(store, add_job(store, "asks", parallelism=2, cpu="100"))
    asker.reconcile_once()
    asker.reconcile_once()
    assert store.list(PROVISIONING_REQUESTS.group_version, PROVISIONING_REQUESTS.plural, "team-a")[0]
    requests.relist()
    for pod in store.list("v1", "pods", "team-a")[0]:
        if pod["metadata"].get("labels", {}).get("gangkeeper.io/group") == "job-asks":
            store.delete("v1", "pods", "team-a", pod["metadata"]["name"])
    asker.reconcile_once()  # gone: the request by its uid, then its template, read first for its owner
    assert not store.list(PROVISIONING_REQUESTS.group_version, PROVISIONING_REQUESTS.plural, "team-a")[0]
    assert not store.list("v1", "podtemplates", "team-a")[0]
    # gangkeeper's Kueue AdmissionCheck: marked Active, and a Workload waiting on it told Ready
    store.served["kueue.x-k8s.io/v1beta2"] = {"admissionchecks", "workloads"}
    from webhook.controller.act.kueue_checks import KUEUE_RESOURCES

    for resource in served(list(KUEUE_RESOURCES), api):  # watched where Kueue is served
        informer = Informer(api, resource, watch_seconds=1)
        informer.relist()
        informer.watch_once()
    store.create(
        "kueue.x-k8s.io/v1beta2",
        "admissionchecks",
        "",
        {"metadata": {"name": "gang-fits"}, "spec": {"controllerName": "gangkeeper.io/gang-fits"}},
    )
    store.create("kueue.x-k8s.io/v1beta2", "workloads", "team-a", kueue_workload("gang-fits"))
    Controller(api, clock=clock).reconcile_once()
    answered = store.get("kueue.x-k8s.io/v1beta2", "workloads", "team-a", "job-train")
    assert answered["status"]["admissionChecks"][0]["state"] == "Ready"
    assert store.get("kueue.x-k8s.io/v1beta2", "admissionchecks", "", "gang-fits")["status"]["conditions"]


def kueue_workload(check: str) -> dict[str, Any]:
    """A Workload as Kueue makes it for a 2-pod Job, quota reserved, waiting on `check`."""
    template = {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}
    return {
        "metadata": {"name": "job-train"},
        "spec": {"podSets": [{"name": "main", "count": 2, "template": template}]},
        "status": {
            "admission": {"clusterQueue": "cq", "podSetAssignments": [{"name": "main"}]},
            "admissionChecks": [
                {"name": check, "state": "Pending", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}
            ],
        },
    }


def exercise_webhook(server: TestApiServer, tmp_path: Path) -> None:
    from kubernetes import client

    from tests.fake.test_certs import webhook_configuration
    from webhook import certs
    from webhook.admission.resolve import WatchedNamespaces
    from webhook.certsync import CertSync

    store = server.store
    store.create("v1", "namespaces", "", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}})
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        store.create("admissionregistration.k8s.io/v1", kind.lower() + "s", "", webhook_configuration(kind))
    api_client = client_from(server=server.url)
    sync = CertSync(
        Api(api_client),
        "gangkeeper-system",
        "gangkeeper-webhook-certs",
        tmp_path,
        ["localhost"],
        clock=lambda: dt.datetime.now(dt.UTC),
    )
    sync.sync_once()
    sync.sans = ["localhost", "gangkeeper-webhook.gangkeeper-system.svc"]  # forces a rotation: a patch
    sync.sync_once()
    namespaces = WatchedNamespaces(Api(api_client))
    namespaces.start()
    import time

    def wait_for(name: str) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and namespaces.get(name) is None:
            time.sleep(0.05)
        assert namespaces.get(name) is not None, name

    from webhook.admission.controller_lease import LeaseWatch

    assert LeaseWatch(Api(api_client), "gangkeeper-system").poll_once() is not None  # GET of the Lease
    wait_for("team-a")  # from the list
    store.create("v1", "namespaces", "", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-b"}})
    wait_for("team-b")  # only the watch can bring this one
    from webhook.admission.resolve import WatchedQueues
    from webhook.backends.discovery import Served

    store.create("scheduling.volcano.sh/v1beta1", "queues", "", {"metadata": {"name": "default"}})
    queues = WatchedQueues(Api(api_client), lambda: Served({"scheduling.volcano.sh/v1beta1": frozenset({"queues"})}))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and queues.states() is None:
        time.sleep(0.05)
    assert queues.states() == {"default": "Open"}
    store.create("scheduling.volcano.sh/v1beta1", "queues", "", {"metadata": {"name": "research"}})
    deadline = time.monotonic() + 10  # only the watch can bring this one
    while time.monotonic() < deadline and "research" not in (queues.states() or {}):
        time.sleep(0.05)
    assert queues.states() == {"default": "Open", "research": "Open"}
    from webhook.admission.resolve import WatchedPriorityClasses

    store.create("scheduling.k8s.io/v1", "priorityclasses", "", {"metadata": {"name": "batch-high"}, "value": 10})
    classes = WatchedPriorityClasses(Api(api_client))
    classes.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and "batch-high" not in (classes.names() or ()):
        time.sleep(0.05)
    assert classes.names() == {"batch-high": 10, "": 0}  # "": a pod naming none (no global default here)
    # a gang pod's workload, by uid: one GET of each kind the webhook reads
    from webhook.admission.workloads import ABSENT, RESOURCES, WorkloadUids

    uids = WorkloadUids(Api(api_client))
    for kind in RESOURCES:  # none there: absent where the kind is served, unknown where it is not
        assert uids(kind, "team-a", "train", "uid-1") in (None, ABSENT)
    # a Volcano workload's PodGroups, made at its validation: one create
    from tests.fake.test_admission_ahead import stamped_job
    from webhook.admission.ahead import VolcanoGroupsAhead
    from webhook.backends import make

    assert VolcanoGroupsAhead(Api(api_client))(stamped_job(), make("volcano")) == 1  # type: ignore[arg-type]
    assert client and certs


@pytest.mark.parametrize("account", ["gangkeeper-controller", "gangkeeper-webhook"])
def test_rbac_is_exactly_what_the_code_calls(account: str, tmp_path: Path) -> None:
    with TestApiServer() as server:
        if account == "gangkeeper-controller":
            exercise_controller(server)
        else:
            exercise_webhook(server, tmp_path)
        # discovery (GET /apis/<group>/<version>) is granted to every authenticated client by system:discovery
        calls = {
            to_call(method, path)
            for method, path in server.store.requests
            if not re.match(r"^/apis?(/[^/]+/[^/?]+)?$", path)
        }
    rules = rules_for(account)
    missing = sorted(c for c in calls if not allowed(rules, c))
    assert missing == [], f"calls the RBAC does not allow: {missing}"
    used = {(g, r, v) for g, r, v, _ in calls}
    declared = set()
    if account == "gangkeeper-controller":  # workload kinds the code reads, exercised or not
        declared = {
            (r.group_version.rpartition("/")[0], r.plural, verb)
            for r in WORKLOAD_RESOURCES.values()
            for verb in ("get", "list", "watch")
        }
        # patched only where it suspends and resumes a workload (requeue.py, uninstall.py)
        declared |= {
            (WORKLOAD_RESOURCES[kind].group_version.rpartition("/")[0], WORKLOAD_RESOURCES[kind].plural, "patch")
            for kind in SUSPEND_PATHS
        }
        # used by the API server on our behalf: blockOwnerDeletion on group objects owned by workloads
        declared |= {
            (r.group_version.rpartition("/")[0], f"{r.plural}/finalizers", "update")
            for r in WORKLOAD_RESOURCES.values()
        }
    if account == "gangkeeper-controller":  # asked of the authorizer by a ValidatingAdmissionPolicy, not called
        declared |= {("gangkeeper.io", "gangs", "placehold")}
    extra = sorted(granted(rules) - used - declared)
    assert extra == [], f"permissions no code path uses: {extra}"
