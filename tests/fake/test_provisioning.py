"""ProvisioningRequests for Cluster Autoscaler (`--autoscaler cluster-autoscaler`, where its API is
served): one per gate gang that waits on capacity, with a PodTemplate per pod shape, in place of
placeholder pods; checked against Cluster Autoscaler's own CRD (hack/cluster/build.sh provisioning-crd)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.apiserver import Store, TestApiServer
from tests.cluster import Clock, add_job, add_job_pods, default_scheduler, node, pods
from tests.recorder import ListRecorder
from tests.schemas import provisioning_crd, validate
from webhook.controller.act.provisioning import PROVISIONING_REQUESTS, trim_request
from webhook.controller.decide.pods import format_time
from webhook.controller.run.reconciler import Controller
from webhook.informer import Informer
from webhook.kube import Api

NS = "team-a"
GV = PROVISIONING_REQUESTS.group_version


@pytest.fixture
def requests_informer(apiserver: TestApiServer, api: Api) -> Iterator[Informer]:
    apiserver.store.served[GV] = {"provisioningrequests"}
    informer = Informer(api, PROVISIONING_REQUESTS, transform=trim_request, watch_seconds=1)
    informer.start()
    assert informer.synced.wait(5)
    yield informer
    informer.stop()


def controller_for(api: Api, informer: Informer, clock: Clock) -> Controller:
    controller = Controller(api, recorder=ListRecorder(), clock=clock, autoscaler="cluster-autoscaler")
    controller.informers[(GV, PROVISIONING_REQUESTS.plural)] = informer
    return controller


def waiting_gang(store: Store, api: Api, informer: Informer, clock: Clock, node_cpu: str, size: int) -> Controller:
    """A gate gang of `size` three-CPU pods on one node of `node_cpu` CPUs, and a controller that made its
    Gang (which owns what it asks for)."""
    store.create("v1", "nodes", "", node("small", cpu=node_cpu))
    add_job_pods(store, add_job(store, "train", parallelism=size, cpu="3"))
    controller = controller_for(api, informer, clock)
    controller.reconcile_once()
    return controller


def requests(store: Store) -> list[dict[str, Any]]:
    return store.list(GV, "provisioningrequests", NS)[0]


def templates(store: Store) -> list[dict[str, Any]]:
    return store.list("v1", "podtemplates", NS)[0]


def caught_up(informer: Informer, store: Store) -> None:
    """Until the informer holds what the store holds: each request, with its conditions (the trimmed
    copy keeps no resourceVersion to compare)."""

    def seen(items: list[dict[str, Any]]) -> dict[str, list[tuple[str, str]]]:
        return {
            r["metadata"]["name"]: sorted(
                (c.get("type"), c.get("status")) for c in (r.get("status") or {}).get("conditions") or []
            )
            for r in items
        }

    want = seen(requests(store))
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        have = seen(list(informer.items()))
        if have == want:
            return
        time.sleep(0.02)
    raise AssertionError(f"informer holds {have}, the store {want}")


def gang_uid(store: Store, name: str) -> str:
    return str(store.get("gangkeeper.io/v1alpha1", "gangs", NS, name)["metadata"]["uid"])


def set_condition(store: Store, name: str, kind: str, clock: Clock, reason: str = "", message: str = "") -> None:
    """What Cluster Autoscaler writes on a request (its status)."""
    request = store.get(GV, "provisioningrequests", NS, name)
    request["status"] = {
        "conditions": [
            {
                "type": kind,
                "status": "True",
                "reason": reason or kind,
                "message": message,
                "lastTransitionTime": format_time(clock()),
            }
        ]
    }
    store.update(GV, "provisioningrequests", NS, name, request, None, admit=False)


def test_the_crd_is_there_to_check_against() -> None:
    assert provisioning_crd().exists(), f"{provisioning_crd()}: run hack/cluster/build.sh provisioning-crd"


def test_a_gang_waiting_on_cluster_autoscaler_gets_one_request_for_its_pods_without_room_and_starts_whole(
    apiserver: TestApiServer, api: Api, requests_informer: Informer
) -> None:
    store, clock = apiserver.store, Clock()
    controller = waiting_gang(store, api, requests_informer, clock, "4", 4)
    decision = controller.reconcile_once()["team-a/job-train"]
    uid = gang_uid(store, "job-train")
    (request,) = requests(store)
    validate(request)
    assert request["metadata"]["name"] == f"gangkeeper-{uid}"
    assert request["metadata"]["ownerReferences"][0]["uid"] == uid
    assert request["spec"]["provisioningClassName"] == "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
    (pod_set,) = request["spec"]["podSets"]
    assert pod_set["count"] == 3  # the pod the free room holds needs none
    (template,) = templates(store)
    validate(template)
    assert template["metadata"]["name"] == pod_set["podTemplateRef"]["name"]
    assert template["metadata"]["ownerReferences"][0]["uid"] == uid
    assert template["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "3000m"
    assert not [p for p in pods(store) if "placeholder-for" in str(p["metadata"].get("labels"))]
    assert f"ProvisioningRequest gangkeeper-{uid} made for 3 pods" in decision.message, decision.message
    caught_up(requests_informer, store)
    decision = controller.reconcile_once()["team-a/job-train"]
    assert "for 3 pods: not yet Accepted" in decision.message, decision.message
    assert len(requests(store)) == 1  # one per gang, not one per pass
    # Cluster Autoscaler adds the nodes for all of it and says so
    for i in range(3):
        store.create("v1", "nodes", "", node(f"new-{i}", cpu="4"))
    set_condition(store, f"gangkeeper-{uid}", "Provisioned", clock)
    caught_up(requests_informer, store)
    decision = controller.reconcile_once()["team-a/job-train"]
    assert decision.state == "Release", decision.message
    assert requests(store) == [] and templates(store) == []  # deleted in the turn that released the gang
    assert default_scheduler(store) == 4


def test_a_failed_request_is_said_and_asked_again_a_minute_later(
    apiserver: TestApiServer, api: Api, requests_informer: Informer
) -> None:
    store, clock = apiserver.store, Clock()
    controller = waiting_gang(store, api, requests_informer, clock, "1", 2)
    controller.reconcile_once()
    name = f"gangkeeper-{gang_uid(store, 'job-train')}"
    first = store.get(GV, "provisioningrequests", NS, name)["metadata"]["uid"]
    set_condition(store, name, "Failed", clock, "NoNodeGroup", "no node group can hold the pods")
    caught_up(requests_informer, store)
    decision = controller.reconcile_once()["team-a/job-train"]
    assert "Failed (NoNodeGroup no node group can hold the pods)" in decision.message, decision.message
    assert len(requests(store)) == 1
    clock.advance(61)
    decision = controller.reconcile_once()["team-a/job-train"]
    assert "asking again" in decision.message, decision.message
    assert requests(store) == [] and templates(store) == []
    caught_up(requests_informer, store)
    controller.reconcile_once()
    (again,) = requests(store)
    assert again["metadata"]["uid"] != first


def test_a_request_of_the_gangs_name_made_by_someone_else_is_never_counted_or_deleted(
    apiserver: TestApiServer, api: Api, requests_informer: Informer
) -> None:
    """Identity, not name: a tenant who reads the Gang's uid and makes a request of that name first gets
    it left alone, and the Gang says why it has none."""
    store, clock = apiserver.store, Clock()
    controller = waiting_gang(store, api, requests_informer, clock, "1", 2)
    name = f"gangkeeper-{gang_uid(store, 'job-train')}"
    forged = {
        "apiVersion": GV,
        "kind": "ProvisioningRequest",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"provisioningClassName": "check-capacity.autoscaling.x-k8s.io", "podSets": []},
    }
    store.create(GV, "provisioningrequests", NS, forged)
    caught_up(requests_informer, store)
    decision = controller.reconcile_once()["team-a/job-train"]
    assert f"no ProvisioningRequest: {name} exists and is not this gang's Gang's" in decision.message
    for pod in pods(store):  # the gang goes: what is not its own stays
        store.delete("v1", "pods", NS, pod["metadata"]["name"])
    controller.reconcile_once()
    assert [r["metadata"]["name"] for r in requests(store)] == [name]


def test_without_the_api_served_placeholder_pods_stand_in_as_before(apiserver: TestApiServer, api: Api) -> None:
    store, clock = apiserver.store, Clock()
    store.create("v1", "nodes", "", node("small", cpu="4"))
    add_job_pods(store, add_job(store, "train", parallelism=4, cpu="3"))
    controller = Controller(api, recorder=ListRecorder(), clock=clock, autoscaler="cluster-autoscaler")
    controller.reconcile_once()
    controller.reconcile_once()
    assert len([p for p in pods(store) if "placeholder-for" in str(p["metadata"].get("labels"))]) == 3


def test_a_template_for_pods_that_claim_devices_carries_their_claims_not_the_device_counts() -> None:
    """Placement keeps a member's devices as resources of its own, which no node has: the PodTemplate
    carries the member's claims instead, for Cluster Autoscaler to simulate, and is a valid PodTemplate."""
    from dataclasses import replace

    from tests import builders as b
    from webhook.controller.act.provisioning import pod_template
    from webhook.controller.decide.devices import class_resource
    from webhook.controller.decide.pods import PodView

    raw = b.pod("train-0", spec=b.pod_spec(b.container("1", "1Gi")))
    raw["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    raw["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    view = PodView.from_api(raw, None, "job-train")
    devices = (class_resource("gpu.example.com"), 1)
    view = replace(view, shape=replace(view.shape, requests=(*view.shape.requests, devices)))
    gang = {"metadata": {"name": "job-train", "uid": "u-1"}}
    template = pod_template(view, raw, gang, "gk-u-1-a")
    validate(template)
    spec = template["template"]["spec"]
    assert spec["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    (container,) = spec["containers"]
    assert container["resources"]["claims"] == [{"name": "gpu"}]
    assert container["resources"]["requests"] == {"cpu": "1000m", "memory": str(1 << 30)}, container["resources"]
    assert container["resources"]["limits"] == container["resources"]["requests"]


def test_a_template_or_request_owned_by_the_gang_but_not_made_by_gangkeeper_is_replaced(
    apiserver: TestApiServer, api: Api, requests_informer: Informer
) -> None:
    """A tenant who may write PodTemplates forges one of the predictable name with an owner reference to
    the Gang (96 CPUs): it is never put into the request; it is deleted and the gang's own made in its
    place. A request of the gang's name owned by the Gang that asks for more than waits is deleted too."""
    from webhook.controller.act.placeholder_pods import shape_tag

    store, clock = apiserver.store, Clock()
    controller = waiting_gang(store, api, requests_informer, clock, "4", 4)
    uid = gang_uid(store, "job-train")
    owner = [{"apiVersion": "gangkeeper.io/v1alpha1", "kind": "Gang", "name": "job-train", "uid": uid}]
    member = next(p for p in pods(store) if p["spec"].get("schedulingGates"))
    view = controller.index.gangs()["team-a/job-train"].pods[0]
    assert view.name == member["metadata"]["name"] or view.shape is not None
    name = f"gangkeeper-{uid}-{shape_tag(view.shape)}"
    forged = {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": name, "namespace": NS, "ownerReferences": owner},
        "template": {
            "spec": {
                "nodeSelector": {"node.kubernetes.io/instance-type": "p5.48xlarge"},
                "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "96"}}}],
            }
        },
    }
    store.create("v1", "podtemplates", NS, forged)
    for _ in range(3):
        caught_up(requests_informer, store)
        decision = controller.reconcile_once()["team-a/job-train"]
    (template,) = templates(store)
    assert template["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "3000m", template
    assert "nodeSelector" not in template["template"]["spec"]
    (request,) = requests(store)
    assert request["spec"]["podSets"] == [{"podTemplateRef": {"name": name}, "count": 3}]
    assert "ProvisioningRequest" in decision.message
    # a request of its name, owned by the Gang, asking for 100 pods: not what gangkeeper asked
    store.delete(GV, "provisioningrequests", NS, request["metadata"]["name"])
    inflated = {
        "apiVersion": GV,
        "kind": "ProvisioningRequest",
        "metadata": {"name": f"gangkeeper-{uid}", "namespace": NS, "ownerReferences": owner},
        "spec": {
            "provisioningClassName": "best-effort-atomic-scale-up.autoscaling.x-k8s.io",
            "podSets": [{"podTemplateRef": {"name": name}, "count": 100}],
        },
    }
    first = store.create(GV, "provisioningrequests", NS, inflated)["metadata"]["uid"]
    deadline = time.monotonic() + 5  # the informer holds the inflated one (its name is the deleted one's)
    while time.monotonic() < deadline:
        held = requests_informer.get(NS, f"gangkeeper-{uid}")
        if held is not None and held["metadata"].get("uid") == first:
            break
        time.sleep(0.02)
    decision = controller.reconcile_once()["team-a/job-train"]
    assert "was not one gangkeeper made for this gang; deleted" in decision.message, decision.message
    assert all(r["metadata"]["uid"] != first for r in requests(store))
