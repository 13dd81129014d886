"""Placeholder pods on a cluster that grows: a gate gang that waits on capacity gets pause pods for the
members free room does not hold (one per node to add when the node size is known), which an autoscaler
can see (gated pods it cannot); as they bind on new nodes, that room is
the gang's own, and the gang is released onto it with its placeholders deleted. The real autoscaler is
in tests/real/test_real_autoscale.py; here the test API server and the stock scheduler's model stand in."""

from __future__ import annotations

from typing import Any

import pytest

from tests import builders as b
from tests.apiserver import Store, TestApiServer
from tests.cluster import Clock, add_job, add_job_pods, default_scheduler, gang_status, node, pods
from tests.recorder import ListRecorder
from tests.schemas import validate
from webhook.controller.decide.autoscaling import (
    NodePoolRoom,
    batches,
    instance_room,
    never_held,
    pods_per_node,
    pods_per_placeholder,
    unseen_by_autoscalers,
)
from webhook.controller.decide.pods import PodView
from webhook.controller.decide.shapes import Shape, Taint
from webhook.controller.observe.autoscaler import pool_room
from webhook.controller.run.reconciler import Controller
from webhook.kube import Api


def placeholders(store: Store) -> list[dict[str, Any]]:
    return [p for p in pods(store) if "gangkeeper.io/placeholder-for" in p["metadata"].get("labels", {})]


def karpenter(store: Store) -> None:
    store.served["karpenter.sh/v1"] = {"nodepools"}
    store.create("karpenter.sh/v1", "nodepools", "", {"metadata": {"name": "default"}, "spec": {}})


def test_a_gang_waiting_on_an_autoscaler_gets_placeholders_and_starts_whole_on_their_room(
    apiserver: TestApiServer, api: Api
) -> None:
    store = apiserver.store
    karpenter(store)
    store.create("v1", "nodes", "", node("small", cpu="4"))
    add_job_pods(store, add_job(store, "train", parallelism=4, cpu="3"))
    controller = Controller(api, recorder=ListRecorder(), clock=Clock())
    controller.reconcile_once()  # the Gang object first: it owns the placeholders
    decision = controller.reconcile_once()["team-a/job-train"]
    made = placeholders(store)
    assert len(made) == 3, decision.message  # the pod the free room holds needs none
    gang = store.get("gangkeeper.io/v1alpha1", "gangs", "team-a", "job-train")
    for pod in made:
        validate(pod)
        assert pod["metadata"]["ownerReferences"][0]["uid"] == gang["metadata"]["uid"]
        assert pod["metadata"]["labels"]["gangkeeper.io/skip"] == "true"
        assert pod["spec"]["priorityClassName"] == "gangkeeper-placeholder"
        assert pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "3000m"
        assert not pod["spec"].get("schedulingGates")
    assert "waiting for the autoscaler: capacity for 1 of 4 pods provisioned" in decision.message
    # told on the Job alone: its pods wait for the nodes their placeholders bring, not for good
    assert isinstance(controller.recorder, ListRecorder)
    too_large = controller.recorder.reasons("GangTooLarge")
    assert [e["involvedObject"]["kind"] for e in too_large] == ["Job"], too_large
    # the stock scheduler binds one placeholder to the room there is: that pod's free room is gone, so it
    # gets one too; the autoscaler brings the rest
    default_scheduler(store)
    assert sum(1 for p in placeholders(store) if p["spec"].get("nodeName")) == 1
    decision = controller.reconcile_once()["team-a/job-train"]
    assert "capacity for 1 of 4 pods provisioned" in decision.message, decision.message
    assert len(placeholders(store)) == 4
    assert not any(p["spec"].get("nodeName") for p in pods(store) if p not in placeholders(store))
    for i in range(3):
        store.create("v1", "nodes", "", node(f"new-{i}", cpu="4"))
    default_scheduler(store)
    decision = controller.reconcile_once()["team-a/job-train"]
    assert decision.state == "Release", decision.message
    assert sorted(decision.release.values()) == ["new-0", "new-1", "new-2", "small"]
    assert placeholders(store) == []  # deleted in the turn that released the gang
    assert default_scheduler(store) == 4


def test_no_placeholders_without_an_autoscaler_or_for_a_gang_that_fits(apiserver: TestApiServer, api: Api) -> None:
    store = apiserver.store
    store.create("v1", "nodes", "", node("small", cpu="4"))
    add_job_pods(store, add_job(store, "big", parallelism=4, cpu="3"))
    controller = Controller(api, recorder=ListRecorder(), clock=Clock())
    controller.reconcile_once()
    assert "autoscaler" not in controller.reconcile_once()["team-a/job-big"].message
    assert placeholders(store) == []  # no NodePool: nothing would come for them
    karpenter(store)
    add_job_pods(store, add_job(store, "fits", parallelism=1, cpu="1"))
    grower = Controller(api, recorder=ListRecorder(), clock=Clock())
    grower.reconcile_once()
    grower.reconcile_once()
    assert {p["metadata"]["labels"]["gangkeeper.io/placeholder-for"] for p in placeholders(store)} == {"job-big"}


def test_placeholders_go_with_their_gang(apiserver: TestApiServer, api: Api) -> None:
    store = apiserver.store
    karpenter(store)
    store.create("v1", "nodes", "", node("small", cpu="4"))
    add_job_pods(store, add_job(store, "gone", parallelism=2, cpu="8"))
    controller = Controller(api, recorder=ListRecorder(), clock=Clock())
    controller.reconcile_once()
    controller.reconcile_once()
    assert len(placeholders(store)) == 2
    for pod in pods(store):
        if pod["metadata"].get("labels", {}).get("gangkeeper.io/group") == "job-gone":
            store.delete("v1", "pods", "team-a", pod["metadata"]["name"])
    controller.reconcile_once()
    assert placeholders(store) == []


def test_a_placeholder_holds_room_no_other_gang_may_take(apiserver: TestApiServer, api: Api) -> None:
    """The room an autoscaler brought for one gang is not released to another meanwhile."""
    store = apiserver.store
    karpenter(store)
    store.create("v1", "nodes", "", node("small", cpu="1"))
    add_job_pods(store, add_job(store, "first", parallelism=2, cpu="4"))
    controller = Controller(api, recorder=ListRecorder(), clock=Clock())
    controller.reconcile_once()
    controller.reconcile_once()
    store.create("v1", "nodes", "", node("new", cpu="4"))
    default_scheduler(store)  # one placeholder of first's binds there
    add_job_pods(store, add_job(store, "second", parallelism=1, cpu="4"))
    decisions = controller.reconcile_once()
    assert decisions["team-a/job-second"].state != "Release", decisions["team-a/job-second"].message
    assert b  # builders kept for symmetry with the other controller tests


def test_a_nodepool_limit_below_the_gangs_need_is_named_and_the_gang_waits_whole(
    apiserver: TestApiServer, api: Api
) -> None:
    """Karpenter adds no node past a NodePool's spec.limits: a gang whose waiting pods need more than
    the nodes there are and every NodePool may still add could never start whole, so it gets no
    placeholders (they would only hold room others' pods could use), waits whole, and its Gang says which
    limits stop it."""
    store = apiserver.store
    store.served["karpenter.sh/v1"] = {"nodepools"}
    for name, limit in (("small-pool", "4"), ("gpu-pool", "64")):
        pool = {"metadata": {"name": name}, "spec": {"limits": {"cpu": limit}}, "status": {"resources": {"cpu": "2"}}}
        if name == "gpu-pool":
            pool["spec"]["limits"] = {"nvidia.com/gpu": "8", "cpu": "5"}
        store.create("karpenter.sh/v1", "nodepools", "", pool)
    store.create("v1", "nodes", "", node("small", cpu="4"))
    add_job_pods(store, add_job(store, "train", parallelism=4, cpu="3"))
    controller = Controller(api, recorder=ListRecorder(), clock=Clock())
    controller.reconcile_once()
    controller.reconcile_once()
    default_scheduler(store)
    decision = controller.reconcile_once()["team-a/job-train"]
    assert placeholders(store) == [], decision.message
    assert (
        "no placeholders: its 4 waiting pods need 12 cpu, more than the nodes there are (4 cpu) and every "
        "NodePool's limits allow: NodePool gpu-pool may add 3 cpu more (spec.limits 5 cpu); NodePool small-pool "
        "may add 2 cpu more (spec.limits 4 cpu)" in decision.message
    ), decision.message
    assert not any(p["spec"].get("nodeName") for p in pods(store))
    gang = store.get("gangkeeper.io/v1alpha1", "gangs", "team-a", "job-train")
    assert "spec.limits 4 cpu" in gang["status"]["message"]


def test_a_nodepool_with_room_for_the_gang_is_not_named(apiserver: TestApiServer, api: Api) -> None:
    store = apiserver.store
    store.served["karpenter.sh/v1"] = {"nodepools"}
    store.create("karpenter.sh/v1", "nodepools", "", {"metadata": {"name": "big"}, "spec": {"limits": {"cpu": "64"}}})
    store.create("v1", "nodes", "", node("small", cpu="4"))
    add_job_pods(store, add_job(store, "train", parallelism=4, cpu="3"))
    controller = Controller(api, recorder=ListRecorder(), clock=Clock())
    controller.reconcile_once()
    decision = controller.reconcile_once()["team-a/job-train"]
    assert "capacity for 1 of 4 pods provisioned" in decision.message
    assert "NodePool" not in decision.message, decision.message


GPU_POOL = NodePoolRoom(
    "gpu",
    limits={"cpu": 64000, "nvidia.com/gpu": 16},
    used={},
    labels={"example.com/accelerator": frozenset({"a100", "h100"}), "karpenter.sh/nodepool": frozenset({"gpu"})},
    taints=(Taint("nvidia.com/gpu", "", "NoSchedule"),),
)
TOLERATES_GPU = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def shape(
    selector: dict[str, str] | None = None, cpu: str = "1", tolerations: Any = None, affinity: Any = None
) -> Shape:
    spec: dict[str, Any] = {"containers": [b.container(cpu, "1Gi")], "tolerations": tolerations or TOLERATES_GPU}
    if selector:
        spec["nodeSelector"] = selector
    if affinity:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": affinity}}
    return Shape.from_pod_spec(spec)


def term(key: str, *values: str) -> dict[str, Any]:
    return {"nodeSelectorTerms": [{"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]}]}


@pytest.mark.parametrize(
    ("pod", "refusal"),
    [
        (shape(), None),
        (shape({"example.com/accelerator": "h100"}), None),
        (shape({"topology.kubernetes.io/zone": "zone-b"}), None),  # a well-known label: any value may come
        (shape({"karpenter.kwok.sh/instance-family": "c"}), None),  # the provider's own labels likewise
        (shape(affinity=term("example.com/accelerator", "v100", "a100")), None),
        (shape({"example.com/accelerator": "v100"}), "its nodes never carry example.com/accelerator=v100"),
        (shape({"example.com/team": "a"}), "its nodes never carry example.com/team=a"),
        (shape({"karpenter.sh/nodepool": "cpu"}), "its nodes never carry karpenter.sh/nodepool=cpu"),
        (shape({"kubernetes.io/hostname": "n1"}), "nodeSelector kubernetes.io/hostname=n1 names a node"),
        (shape(affinity=term("example.com/accelerator", "v100")), "never match the pod's required node affinity"),
        (shape(tolerations=[{"key": "other", "operator": "Exists"}]), "its nodes' taint nvidia.com/gpu:NoSchedule"),
        (shape(cpu="65"), "one pod's 65 cpu is more than its spec.limits 64 cpu"),
    ],
)
def test_what_a_nodepool_could_never_hold(pod: Shape, refusal: str | None) -> None:
    said = GPU_POOL.refusal(pod)
    assert (said is None) if refusal is None else (said is not None and refusal in said), said


def test_a_pod_any_pool_might_hold_is_not_hopeless() -> None:
    cpu_pool = NodePoolRoom("cpu", limits={}, used={})
    assert never_held({"p": shape({"example.com/accelerator": "v100"})}, [GPU_POOL]) is not None
    assert never_held({"p": shape({"karpenter.sh/nodepool": "cpu"})}, [GPU_POOL, cpu_pool]) is None
    assert never_held({"p": shape({"example.com/team": "a"})}, []) is None  # no pool known: nothing said


def test_nodepool_labels_from_its_template_and_requirements() -> None:
    pool = pool_room(
        {
            "metadata": {"name": "gpu"},
            "spec": {
                "template": {
                    "metadata": {"labels": {"example.com/team": "ml"}},
                    "spec": {
                        "requirements": [
                            {"key": "example.com/accelerator", "operator": "In", "values": ["a100", "h100"]},
                            {"key": "example.com/accelerator", "operator": "In", "values": ["h100"]},
                            {"key": "example.com/spot", "operator": "Exists"},
                        ],
                        "taints": [{"key": "gpu", "effect": "NoSchedule"}],
                    },
                }
            },
        }
    )
    assert pool.labels == {
        "example.com/team": frozenset({"ml"}),
        "example.com/accelerator": frozenset({"h100"}),
        "example.com/spot": None,
        "karpenter.sh/nodepool": frozenset({"gpu"}),
    }
    assert pool.taints == (Taint("gpu", "", "NoSchedule"),)


def test_a_gang_no_nodepool_could_ever_hold_gets_no_placeholders_and_says_why(
    apiserver: TestApiServer, api: Api
) -> None:
    """Placeholders for pods no NodePool could ever make a node for would bring nothing (or nodes the
    gang cannot use): none are made, and the Gang names each pool's reason."""
    store = apiserver.store
    store.served["karpenter.sh/v1"] = {"nodepools"}
    pool = {"metadata": {"name": "general"}, "spec": {"template": {"metadata": {"labels": {"team": "b"}}}}}
    store.create("karpenter.sh/v1", "nodepools", "", pool)
    store.create("v1", "nodes", "", node("small", cpu="4"))
    job = add_job(store, "train", parallelism=4, cpu="3")
    job["spec"]["template"]["spec"]["nodeSelector"] = {"team": "a"}
    add_job_pods(store, job)
    controller = Controller(api, recorder=ListRecorder(), clock=Clock())
    controller.reconcile_once()
    decision = controller.reconcile_once()["team-a/job-train"]
    assert not placeholders(store)
    assert "no placeholders: no NodePool can ever make a node for pod" in decision.message, decision.message
    assert "NodePool general: its nodes never carry team=a" in decision.message
    assert decision.state != "Release"
    gang = store.get("gangkeeper.io/v1alpha1", "gangs", "team-a", "job-train")
    assert "its nodes never carry team=a" in gang["status"]["message"]


def pending(name: str, verdict: str | None, node: str | None = None) -> PodView:
    """A pod whose PodScheduled=False reason is `verdict` (None: not looked at yet)."""
    return PodView(
        "team-a",
        name,
        name,
        "g",
        False,
        node,
        None,
        None,
        None,
        False,
        False,
        shape(),
        None,
        "1",
        unschedulable=verdict == "Unschedulable",
        passed_over=verdict not in (None, "Unschedulable"),
    )


def test_a_gang_its_scheduler_marks_partly_schedulable_is_unseen_by_autoscalers() -> None:
    """Volcano marks the tasks it could place Schedulable while its gang waits (volcano-sh/volcano#3976):
    an autoscaler sees only the others, and counts the free room as theirs."""
    refused, placeable = "Unschedulable", "Schedulable"
    split = [pending("a", refused), pending("b", placeable), pending("c", placeable), pending("d", None)]
    said = unseen_by_autoscalers(split, "volcano")
    assert said is not None and said.startswith("2 of its 4 pending pods are not marked Unschedulable by the volcano")
    assert unseen_by_autoscalers([pending("a", refused), pending("b", refused)], "volcano") is None  # all seen
    assert unseen_by_autoscalers([pending("a", placeable), pending("b", placeable)], "volcano") is None
    # a pod just made, not looked at yet, may still be refused: the scheduler has not said (seen on the real tier)
    assert unseen_by_autoscalers([pending("a", refused), pending("b", None)], "volcano") is None
    assert unseen_by_autoscalers([pending("a", refused), pending("b", placeable, node="n1")], "volcano") is None


def marked_by_volcano(store: Store, job: str, schedulable: int) -> None:
    """Volcano's marks on a gang it could not place whole (volcano-sh/volcano#3976): the first
    `schedulable` of its pods `Schedulable` (it could place them), the rest `Unschedulable`."""
    mine = sorted(
        (p for p in pods(store) if p["metadata"]["labels"].get("batch.kubernetes.io/job-name") == job),
        key=lambda p: p["metadata"]["name"],
    )
    for i, pod in enumerate(mine):
        reason = "Schedulable" if i < schedulable else "Unschedulable"
        condition = {"type": "PodScheduled", "status": "False", "reason": reason}
        store.patch("v1", "pods", "team-a", pod["metadata"]["name"], {"status": {"conditions": [condition]}})


def test_a_volcano_gang_waiting_on_an_autoscaler_gets_placeholders_on_nodepool_nodes_only(
    apiserver: TestApiServer, api: Api
) -> None:
    """Volcano marks what it could place Schedulable, so an autoscaler sees only the rest and counts the
    free room as theirs. The pods the free room cannot hold get placeholders, only on the NodePools'
    nodes (on the free room they would make the autoscaler add that room twice); once the free room
    and the bound placeholders hold the whole gang, the placeholders go and Volcano places it."""
    store = apiserver.store
    karpenter(store)
    store.create("v1", "nodes", "", node("small", cpu="4"))
    add_job_pods(store, add_job(store, "train", parallelism=4, cpu="3"), backend="volcano")
    marked_by_volcano(store, "train", schedulable=1)
    controller = Controller(api, recorder=ListRecorder(), clock=Clock())
    controller.reconcile_once()  # the Gang object first: it owns the placeholders
    controller.reconcile_once()
    made = placeholders(store)
    assert len(made) == 3  # the pod the free room holds needs none
    for pod in made:
        validate(pod)
        terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms["nodeSelectorTerms"] == [
            {"matchExpressions": [{"key": "karpenter.sh/nodepool", "operator": "In", "values": ["default"]}]}
        ]
    status = gang_status(store, "job-train")
    assert status["message"] == (
        "0 of 4 members scheduled by the volcano gang scheduler; "
        "waiting for the autoscaler: capacity for 1 of 4 pods provisioned"
    )
    is_placeholder = lambda pod: "gangkeeper.io/placeholder-for" in pod["metadata"].get("labels", {})  # noqa: E731
    assert default_scheduler(store, only=is_placeholder) == 0  # not on the free room: it is the gang's already
    for i in range(3):
        store.create("v1", "nodes", "", node(f"new-{i}", cpu="4", labels={"karpenter.sh/nodepool": "default"}))
    assert default_scheduler(store, only=is_placeholder) == 3
    controller.reconcile_once()
    assert placeholders(store) == []  # the room for all of it is there: Volcano's to place it
    assert gang_status(store, "job-train")["message"].endswith(
        "room for the whole gang is there; the volcano scheduler places it"
    )
    controller.reconcile_once()
    assert placeholders(store) == []  # none made again while Volcano has not placed it yet
    assert default_scheduler(store, only=lambda pod: not is_placeholder(pod)) == 4  # Volcano's turn: all of it


def test_a_pods_scheduler_verdict_is_read_from_its_podscheduled_condition() -> None:
    def with_reason(reason: str | None) -> PodView:
        conditions = [] if reason is None else [{"type": "PodScheduled", "status": "False", "reason": reason}]
        return PodView.from_api(
            {"metadata": {"name": "p", "uid": "u"}, "spec": {}, "status": {"conditions": conditions}}
        )

    assert with_reason("Unschedulable").unschedulable and not with_reason("Unschedulable").passed_over
    assert with_reason("Schedulable").passed_over and not with_reason("Schedulable").unschedulable
    assert not with_reason(None).passed_over and not with_reason(None).unschedulable
    # a gated pod (another gate, Kueue's) is not one the scheduler looked at
    assert not with_reason("SchedulingGated").passed_over and not with_reason("SchedulingGated").unschedulable


def test_a_pod_dressed_as_a_placeholder_is_neither_counted_nor_deleted(apiserver: TestApiServer, api: Api) -> None:
    """A placeholder is one the controller made: the label and an owner reference to the gang's Gang
    now (its uid). A tenant's pod with the label alone, or owned by another uid, holds no room for the
    gang and is never deleted by it; a placeholder of an earlier Gang of that name is deleted, by uid."""
    store = apiserver.store
    karpenter(store)
    store.create("v1", "nodes", "", node("small", cpu="4"))
    add_job_pods(store, add_job(store, "train", parallelism=2, cpu="3"))
    controller = Controller(api, recorder=ListRecorder(), clock=Clock())
    controller.reconcile_once()
    controller.reconcile_once()
    gang = store.get("gangkeeper.io/v1alpha1", "gangs", "team-a", "job-train")
    made = {p["metadata"]["name"] for p in placeholders(store)}
    assert len(made) == 1  # the other pod fits the free room

    def dressed(name: str, owner_uid: str | None) -> dict[str, Any]:
        pod = b.pod(name, labels={"gangkeeper.io/placeholder-for": "job-train"}, spec=b.pod_spec(b.container("3")))
        pod["metadata"]["namespace"] = "team-a"
        if owner_uid is not None:
            ref = {"apiVersion": "gangkeeper.io/v1alpha1", "kind": "Gang", "name": "job-train", "uid": owner_uid}
            pod["metadata"]["ownerReferences"] = [ref]
        pod["spec"]["nodeName"] = "small"  # bound: room a placeholder would hand to the gang
        return pod

    store.create("v1", "pods", "team-a", dressed("labelled", None))
    store.create("v1", "pods", "team-a", dressed("earlier-gang", "uid-of-an-earlier-gang"))
    decision = controller.reconcile_once()["team-a/job-train"]
    left = {p["metadata"]["name"] for p in pods(store)}
    assert "labelled" in left  # not the controller's: untouched
    assert "earlier-gang" not in left  # its own kind, an earlier Gang's: deleted
    assert "capacity for 0 of 2 pods provisioned" in decision.message, decision.message
    assert made < {p["metadata"]["name"] for p in placeholders(store)} - {"labelled"}  # the free room is taken
    assert gang["metadata"]["uid"] != "uid-of-an-earlier-gang"


def test_no_more_placeholders_than_the_cap_and_the_gang_past_it_says_so(apiserver: TestApiServer, api: Api) -> None:
    """maxPlaceholderPods: a gang whose placeholders would pass it gets none (never part of them), and its
    Gang says why; once the first gang's go, the second gets its own."""
    store = apiserver.store
    karpenter(store)
    store.create("v1", "nodes", "", node("small", cpu="1"))
    add_job_pods(store, add_job(store, "first", parallelism=3, cpu="2"))
    controller = Controller(
        api, recorder=ListRecorder(), clock=Clock(), max_placeholder_pods=4, max_placeholder_pods_per_namespace=4
    )
    controller.reconcile_once()
    controller.reconcile_once()
    assert len(placeholders(store)) == 3
    add_job_pods(store, add_job(store, "second", parallelism=2, cpu="2"))
    controller.reconcile_once()
    decision = controller.reconcile_once()["team-a/job-second"]
    assert len(placeholders(store)) == 3
    assert "no placeholders: the cluster holds 3 for other gangs, and this gang's 2 more would pass" in (
        decision.message
    ), decision.message
    store.delete("batch/v1", "jobs", "team-a", "first")
    for pod in [p for p in pods(store) if p["metadata"]["name"].startswith("first-")]:
        store.delete("v1", "pods", "team-a", pod["metadata"]["name"])
    controller.reconcile_once()
    controller.reconcile_once()
    left = {p["metadata"]["labels"]["gangkeeper.io/placeholder-for"] for p in placeholders(store)}
    assert left == {"job-second"} and len(placeholders(store)) == 2


def test_a_gang_is_beyond_the_limits_only_when_no_growth_could_hold_it() -> None:
    """beyond_limits: the waiting pods' need against the nodes there are and what every NodePool may still
    add; a pool that does not limit a resource may add any amount of it; a limit raised lifts the verdict."""
    from webhook.controller.decide.autoscaling import beyond_limits

    pods = [Shape(requests=(("cpu", 3000), ("pods", 1)))] * 4  # 12 cpu
    capped = NodePoolRoom("default", {"cpu": 8000}, {"cpu": 4000})
    assert beyond_limits(pods, {"cpu": 4000}, [capped]) == (
        "its 4 waiting pods need 12 cpu, more than the nodes there are (4 cpu) and every NodePool's limits "
        "allow: NodePool default may add 4 cpu more (spec.limits 8 cpu)"
    )
    assert beyond_limits(pods, {"cpu": 8000}, [capped]) is None  # 8 there and 4 more: 12
    assert beyond_limits(pods, {"cpu": 4000}, [NodePoolRoom("default", {"cpu": 40000}, {"cpu": 4000})]) is None
    assert beyond_limits(pods, {"cpu": 4000}, [capped, NodePoolRoom("open", {}, {})]) is None
    assert beyond_limits(pods, {"cpu": 4000}, []) is None  # no NodePool known: nothing said


def bound(name: str, cpu: str, node_name: str) -> dict[str, Any]:
    """Another team's pod, running on `node_name`."""
    pod = b.pod(name, spec=b.pod_spec(b.container(cpu)), owned=False)
    pod["spec"]["nodeName"] = node_name
    return pod


def sized_pool(store: Store, cpu: int) -> None:
    """A Karpenter NodePool whose nodes are one KWOK instance size of `cpu` CPUs."""
    store.served["karpenter.sh/v1"] = {"nodepools"}
    requirement = {"key": "karpenter.kwok.sh/instance-cpu", "operator": "In", "values": [str(cpu)]}
    pool = {"metadata": {"name": "sized"}, "spec": {"template": {"spec": {"requirements": [requirement]}}}}
    store.create("karpenter.sh/v1", "nodepools", "", pool)


def test_pods_alike_share_placeholders_a_node_each_and_none_for_the_pods_free_room_takes(
    apiserver: TestApiServer, api: Api
) -> None:
    """Issue #64: a 20-pod gang of 1-CPU pods beside 4 free CPUs and a NodePool of 8-CPU nodes: the 4 that
    fit the free room get no placeholder, the other 16 share 3 (each asks for what one new node holds,
    sizes even), not 16; the room the 3 bring is the gang's, and it starts whole there."""
    store = apiserver.store
    sized_pool(store, 8)
    store.create("v1", "nodes", "", node("small", cpu="4"))
    add_job_pods(store, add_job(store, "train", parallelism=20, cpu="1"))
    controller = Controller(api, recorder=ListRecorder(), clock=Clock())
    controller.reconcile_once()
    decision = controller.reconcile_once()["team-a/job-train"]
    made = placeholders(store)
    for pod in made:
        validate(pod)
    asked = sorted(p["spec"]["containers"][0]["resources"]["requests"]["cpu"] for p in made)
    assert asked == ["5000m", "5000m", "6000m"], decision.message  # 16 over 3: one 8-CPU node keeps 1 CPU
    assert "capacity for 4 of 20 pods provisioned" in decision.message, decision.message
    default_scheduler(store)  # nothing binds them on the 4 free CPUs
    assert not any(p["spec"].get("nodeName") for p in placeholders(store))
    again = controller.reconcile_once()["team-a/job-train"]
    assert sorted(p["metadata"]["name"] for p in placeholders(store)) == sorted(p["metadata"]["name"] for p in made)
    labels = {"karpenter.sh/nodepool": "sized"}
    for i in range(3):
        store.create("v1", "nodes", "", node(f"new-{i}", cpu="7900m", labels=labels))
    default_scheduler(store)
    again = controller.reconcile_once()["team-a/job-train"]
    assert again.state == "Release", again.message
    assert sorted(set(again.release.values())) == ["new-0", "new-1", "new-2", "small"]
    assert placeholders(store) == []
    assert default_scheduler(store) == 20


def test_a_placeholder_is_sized_by_the_nodes_its_nodepool_made_once_there_are_some(
    apiserver: TestApiServer, api: Api
) -> None:
    """The nodes a NodePool made tell exactly what one more holds; its instance size only bounds it."""
    store = apiserver.store
    sized_pool(store, 8)
    store.create("v1", "nodes", "", node("made", cpu="7900m", labels={"karpenter.sh/nodepool": "sized"}))
    store.create("v1", "pods", "team-a", bound("busy", "7900m", "made"))
    add_job_pods(store, add_job(store, "train", parallelism=14, cpu="1"))
    controller = Controller(api, recorder=ListRecorder(), clock=Clock())
    controller.reconcile_once()
    decision = controller.reconcile_once()["team-a/job-train"]
    asked = sorted(p["spec"]["containers"][0]["resources"]["requests"]["cpu"] for p in placeholders(store))
    assert asked == ["7000m", "7000m"], decision.message  # 7 of them on a made node's 7.9 CPUs


def test_a_waiting_gangs_placeholders_are_added_to_never_traded(apiserver: TestApiServer, api: Api) -> None:
    """Room that frees while a gang waits does not cost it the placeholders it has (one bound holds room
    the gang counts on); the pods the free room no longer holds get more."""
    store = apiserver.store
    sized_pool(store, 4)
    store.create("v1", "nodes", "", node("small", cpu="2"))
    store.create("v1", "pods", "team-a", bound("other", "1", "small"))
    add_job_pods(store, add_job(store, "train", parallelism=7, cpu="1"))
    controller = Controller(api, recorder=ListRecorder(), clock=Clock())
    controller.reconcile_once()
    controller.reconcile_once()
    first = {p["metadata"]["name"] for p in placeholders(store)}
    assert len(first) == 2, first  # 6 without free room, 3 a node
    store.delete("v1", "pods", "team-a", "other")
    controller.reconcile_once()
    assert {p["metadata"]["name"] for p in placeholders(store)} == first
    store.create("v1", "pods", "team-a", bound("other", "2", "small"))
    controller.reconcile_once()
    now = {p["metadata"]["name"] for p in placeholders(store)}
    assert first < now and len(now) == 3, now


def test_how_many_pods_one_placeholder_stands_for() -> None:
    one_cpu = Shape.from_pod_spec({"containers": [b.container("1", "1Gi")]})
    kwok = NodePoolRoom("kwok", {}, {}, {"karpenter.kwok.sh/instance-cpu": frozenset({"32", "16"})})
    assert instance_room(kwok) == {"cpu": 15000, "memory": 32 * 1024**3 - int(32 * 1024**3 * 0.1)}  # 2 GiB a CPU
    assert pods_per_placeholder(one_cpu, [kwok], {}) == 15
    unsized = NodePoolRoom("unsized", {}, {}, {"karpenter.kwok.sh/instance-cpu": None})
    assert instance_room(unsized) == {} and pods_per_placeholder(one_cpu, [unsized], {}) == 1  # never guessed
    sized = NodePoolRoom(
        "aws",
        {},
        {},
        {"karpenter.k8s.aws/instance-cpu": frozenset({"8"}), "karpenter.k8s.aws/instance-memory": frozenset({"32768"})},
    )
    assert instance_room(sized) == {"cpu": 7000, "memory": 32 * 1024**3 - int(32 * 1024**3 * 0.1)}
    assert pods_per_placeholder(one_cpu, [sized], {}) == 7
    assert pods_per_placeholder(one_cpu, [sized], {"aws": [{"cpu": 7900, "memory": 3 * 1024**3, "pods": 110}]}) == 3
    assert pods_per_placeholder(one_cpu, [sized, NodePoolRoom("any", {}, {})], {}) == 1  # one pool's size unknown
    assert pods_per_node(Shape((("pods", 1),)), {"cpu": 4000}) == 1
    assert batches(16, 7) == [6, 5, 5] and batches(0, 7) == [] and batches(3, 1) == [1, 1, 1]
    assert batches(752, 31) == [31, 31] + [30] * 23


def test_the_room_a_limit_leaves_goes_to_one_gang_at_a_time_in_queue_order(apiserver: TestApiServer, api: Api) -> None:
    """Issue #64: two gangs of 5 one-CPU pods and a NodePool limit (8 CPUs of 4-CPU nodes) that holds one:
    the first in the queue gets its placeholders, the second none (each holding part of the room, they
    would wait on each other for ever; seen on the real tier before this), and once the first started
    the second gets its own."""
    store = apiserver.store
    sized_pool(store, 4)
    pool = store.get("karpenter.sh/v1", "nodepools", "", "sized")
    pool["spec"]["limits"] = {"cpu": "8"}
    store.update("karpenter.sh/v1", "nodepools", "", "sized", pool, None, admit=False)
    store.create("v1", "nodes", "", node("small", cpu="1"))
    for name in ("first", "second"):
        add_job_pods(store, add_job(store, name, parallelism=5, cpu="1"))
    controller = Controller(api, recorder=ListRecorder(), clock=Clock())
    controller.reconcile_once()
    decisions = controller.reconcile_once()
    held = {p["metadata"]["labels"]["gangkeeper.io/placeholder-for"] for p in placeholders(store)}
    head = "job-first" if decisions["team-a/job-first"].position <= 1 else "job-second"
    other = ({"job-first", "job-second"} - {head}).pop()
    assert held == {head}, (decisions["team-a/job-first"].message, decisions["team-a/job-second"].message)
    assert "the gangs ahead in the queue take what the NodePools' limits leave (2 cpu more)" in (
        decisions[f"team-a/{other}"].message
    )
    for i in range(2):
        store.create("v1", "nodes", "", node(f"new-{i}", cpu="3900m", labels={"karpenter.sh/nodepool": "sized"}))
    default_scheduler(store)
    decisions = controller.reconcile_once()
    assert decisions[f"team-a/{head}"].state == "Release", decisions[f"team-a/{head}"].message
    assert {p["metadata"]["labels"]["gangkeeper.io/placeholder-for"] for p in placeholders(store)} <= {other}


def test_a_placeholder_bound_on_a_released_gangs_room_is_preempted_for_it_not_a_reason_to_replace_it(
    apiserver: TestApiServer, api: Api
) -> None:
    """Issue #64, from the real tier (CI, test_gangs_competing_for_the_room...): the first gang is
    released onto the room its placeholders held and deletes them; the next gang's placeholder, made
    in that turn, binds there before the first's pods (a pod whose gates just went waits out the
    scheduler's backoff; a new one does not). kube-scheduler preempts a placeholder for any pod that may
    preempt, so the first gang's pods still have their room: no repair (for a Job, a requeue whole
    that avoided those nodes for 300 s, while its placeholders came back on them). A pod that may not
    preempt has lost it."""
    store = apiserver.store
    karpenter(store)
    store.create("v1", "nodes", "", node("small", cpu="1"))
    add_job_pods(store, add_job(store, "first", parallelism=2, cpu="3"))
    clock = Clock()
    controller = Controller(api, recorder=ListRecorder(), clock=clock)
    controller.reconcile_once()
    controller.reconcile_once()
    for name in ("new-0", "new-1"):
        store.create("v1", "nodes", "", node(name, cpu="4"))
    default_scheduler(store)
    clock.advance(1)
    assert controller.reconcile_once()["team-a/job-first"].state == "Release"
    add_job_pods(store, add_job(store, "second", parallelism=1, cpu="3"))
    clock.advance(1)
    controller.reconcile_once()
    clock.advance(1)
    assert controller.reconcile_once()["team-a/job-second"].state == "WaitingForCapacity"
    (thief,) = placeholders(store)
    pinned = store.get("gangkeeper.io/v1alpha1", "gangs", "team-a", "job-first")["status"]["released"]
    store.bind("team-a", thief["metadata"]["name"], sorted(r["node"] for r in pinned.values())[0])
    clock.advance(6)  # past the refusal's settling: only the room counts
    decision = controller.reconcile_once()["team-a/job-first"]
    assert decision.state == "Releasing", decision.message
    assert store.get("batch/v1", "jobs", "team-a", "first")["spec"].get("suspend") is not True
    assert not controller.requeuer.avoided("team-a/job-first", clock())
    # the scheduler preempts the placeholder; the first gang's pods bind on their room
    store.delete("v1", "pods", "team-a", thief["metadata"]["name"])
    assert default_scheduler(store, only=lambda pod: "placeholder-for" not in str(pod["metadata"])) == 2
    assert controller.reconcile_once()["team-a/job-first"].state == "Running"
