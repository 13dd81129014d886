"""Placement that kube-scheduler agrees with: the controller pins, tests/scheduler.py (kube-scheduler's
filters, written from its sources) binds. A pinned pod the scheduler refuses would wait for its timeout."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import builders as b
from tests.apiserver import Store, TestApiServer
from tests.cluster import Clock, gang_status, node
from tests.lifecycle import JobController, StatefulSetController, install_admission, kubelet
from tests.scheduler import overcommitted, schedule
from tests.schemas import validate
from webhook.controller.decide.pods import HOSTNAME_LABEL, pinned_to
from webhook.controller.run.explain import explain
from webhook.controller.run.reconciler import Controller
from webhook.kube import Api, client_from

NS = "team-a"


def gang_pods(store: Store, group: str | None = None) -> list[dict[str, Any]]:
    return [
        p
        for p in store.list("v1", "pods", NS)[0]
        if (group is None and "gangkeeper.io/group" in p["metadata"].get("labels", {}))
        or p["metadata"].get("labels", {}).get("gangkeeper.io/group") == group
    ]


def add_job(store: Store, name: str, parallelism: int, spec: dict[str, Any], **meta: Any) -> None:
    job = b.job(name, parallelism=parallelism, spec=spec, **meta)
    store.create("batch/v1", "jobs", NS, job)
    JobController(store).sync(NS, name)


def add_statefulset(store: Store, name: str, replicas: int, spec: dict[str, Any]) -> None:
    sts = b.statefulset(name, replicas=replicas)
    sts["spec"]["template"]["spec"] = spec
    store.create("apps/v1", "statefulsets", NS, sts)
    StatefulSetController(store).sync(NS, name)


def bound_nodes(store: Store, group: str) -> list[str]:
    return sorted(p["spec"].get("nodeName") or "" for p in gang_pods(store, group))


def test_host_port_pods_get_a_node_each_and_every_one_binds(store: Store, api: Api) -> None:
    """NodePorts: 4 pods with hostPort 8080 and 4 roomy nodes; packing all on one node (as before the
    filter was modelled) leaves 3 refused by the scheduler."""
    install_admission(store, "gate")
    for name in ("worker1", "worker2", "worker3", "worker4"):
        store.create("v1", "nodes", "", node(name, cpu="16"))
    container = b.container("1", "1Gi", ports=[{"containerPort": 8080, "hostPort": 8080}])
    add_job(store, "ports", 4, b.pod_spec(container))
    decision = Controller(api, clock=Clock()).reconcile_once()["team-a/job-ports"]
    assert decision.state == "Release" and not decision.unmodelled, decision.message
    pins = [pinned_to(p["spec"]) for p in gang_pods(store)]
    assert sorted(pins) == ["worker1", "worker2", "worker3", "worker4"]
    outcome = schedule(store)
    assert not [why for why in outcome.values() if why.startswith("!")], outcome
    for pod in gang_pods(store):
        validate(pod)


def test_a_host_network_pod_takes_its_container_ports_and_avoids_a_node_using_them(store: Store, api: Api) -> None:
    install_admission(store, "gate")
    for name in ("worker1", "worker2", "worker3"):
        store.create("v1", "nodes", "", node(name, cpu="16"))
    exporter = b.pod(
        "exporter",
        spec=b.pod_spec(b.container("100m", "64Mi", ports=[{"containerPort": 9100, "hostPort": 9100}])),
        namespace="monitoring",
    )
    exporter["spec"]["nodeName"] = "worker1"
    store.create("v1", "pods", "monitoring", exporter)
    spec = b.pod_spec(b.container("1", "1Gi", ports=[{"containerPort": 9100}]), hostNetwork=True)
    add_job(store, "net", 2, spec)
    decision = Controller(api, clock=Clock()).reconcile_once()["team-a/job-net"]
    assert decision.state == "Release", decision.message
    assert sorted(decision.release.values()) == ["worker2", "worker3"]
    assert not [why for why in schedule(store).values() if why.startswith("!")]
    # a third replica has nowhere to go: one per node, and worker1's port is taken
    add_job(store, "net3", 3, spec)
    decision = Controller(api, clock=Clock()).reconcile_once()["team-a/job-net3"]
    assert decision.state == "NeverFits" or decision.state == "WaitingForCapacity", decision.message
    assert "host port 9100/TCP in use" in explain(api, NS, "job-net3")


# --- the property: whatever the cluster, every pod the controller pins binds where it was pinned -----------

_zones = st.sampled_from(["a", "b"])
_node = st.fixed_dictionaries(
    {
        "cpu": st.integers(1, 16),
        "gpu": st.sampled_from([0, 0, 4, 8]),
        "zone": _zones,
        "tainted": st.booleans(),
        "cordoned": st.integers(0, 9).map(lambda n: n == 0),
        "busy_cpu": st.integers(0, 8),
        "busy_port": st.booleans(),
        "leaving_cpu": st.integers(0, 4),
    }
)
_gang = st.fixed_dictionaries(
    {
        "size": st.integers(1, 6),
        "cpu": st.sampled_from(["500m", "1", "2", "3"]),
        "gpu": st.sampled_from([0, 0, 1, 4]),
        "zone": st.one_of(st.none(), _zones),
        "tolerates": st.booleans(),
        "port": st.booleans(),
        "pod_level": st.booleans(),
        "sidecar": st.booleans(),
    }
)


def _cluster(store: Store, nodes: list[dict[str, Any]]) -> None:
    for i, spec in enumerate(nodes):
        raw = node(
            f"n{i}",
            cpu=str(spec["cpu"]),
            memory="64Gi",
            labels={"zone": spec["zone"]},
            taints=[{"key": "dedicated", "value": "train", "effect": "NoSchedule"}] if spec["tainted"] else None,
        )
        raw["status"]["allocatable"]["nvidia.com/gpu"] = str(spec["gpu"])
        if spec["cordoned"]:
            raw["spec"]["unschedulable"] = True
        store.create("v1", "nodes", "", raw)
        ports = [{"containerPort": 7000, "hostPort": 7000}] if spec["busy_port"] else []
        if spec["busy_cpu"]:
            busy = b.pod(
                f"busy-{i}", spec=b.pod_spec(b.container(str(spec["busy_cpu"]), "1Gi", ports=ports)), namespace="other"
            )
            busy["spec"]["nodeName"] = f"n{i}"
            store.create("v1", "pods", "other", busy)
        if spec["leaving_cpu"]:  # terminating: still holds its node in the scheduler's cache
            leaving = b.pod(
                f"leaving-{i}", spec=b.pod_spec(b.container(str(spec["leaving_cpu"]), "1Gi")), namespace="other"
            )
            leaving["spec"]["nodeName"] = f"n{i}"
            leaving["metadata"]["deletionTimestamp"] = "2026-11-21T11:59:00Z"
            store.create("v1", "pods", "other", leaving)


def _gang_spec(gang: dict[str, Any]) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": gang["cpu"], "memory": "1Gi"}}
    if gang["gpu"]:
        resources["limits"] = {"nvidia.com/gpu": str(gang["gpu"])}
        resources["requests"]["nvidia.com/gpu"] = str(gang["gpu"])
    main = {"name": "main", "image": "busybox:1.36", "resources": resources}
    if gang["port"]:
        main["ports"] = [{"containerPort": 7000, "hostPort": 7000}]
    spec: dict[str, Any] = {"containers": [main]}
    if gang["sidecar"]:
        spec["initContainers"] = [
            {
                "name": "proxy",
                "image": "busybox:1.36",
                "restartPolicy": "Always",
                "resources": {"requests": {"cpu": "500m"}},
            }
        ]
    if gang["pod_level"]:  # KEP-2837: the pod's own requests replace the sum of its containers'
        main.pop("resources")
        spec["resources"] = copy.deepcopy(resources)
        if "limits" in spec["resources"]:
            main["resources"] = {"limits": spec["resources"]["limits"]}
    if gang["zone"]:
        spec["nodeSelector"] = {"zone": gang["zone"]}
    if gang["tolerates"]:
        spec["tolerations"] = [{"key": "dedicated", "operator": "Equal", "value": "train", "effect": "NoSchedule"}]
    return spec


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.lists(_node, min_size=1, max_size=6), gang=_gang)
def test_every_pinned_pod_is_bound_by_the_scheduler_where_it_was_pinned(
    nodes: list[dict[str, Any]], gang: dict[str, Any]
) -> None:
    with TestApiServer() as server:
        store = server.store
        install_admission(store, "gate")
        _cluster(store, nodes)
        already = set(overcommitted(store))  # busy pods bound by hand may already exceed a node
        add_job(store, "g", gang["size"], _gang_spec(gang))
        api = Api(client_from(server=server.url))
        decision = Controller(api, clock=Clock()).reconcile_once()["team-a/job-g"]
        if decision.state != "Release":
            assert decision.state in ("WaitingForCapacity", "NeverFits"), decision.message
            return
        pinned = {p["metadata"]["name"]: pinned_to(p["spec"]) for p in gang_pods(store)}
        assert None not in pinned.values(), pinned
        for pod in gang_pods(store):
            validate(pod)
        outcome = schedule(store)
        refused = {k: v for k, v in outcome.items() if v.startswith("!")}
        assert not refused, (decision.release, refused)
        for name, where in pinned.items():
            assert outcome[f"{NS}/{name}"] == where
        assert set(overcommitted(store)) <= already


# --- a steal is repaired at once ----------------------------------------------------------------------------


def test_a_node_taken_after_the_release_is_repaired_by_replacing_only_the_unbound_pods(store: Store, api: Api) -> None:
    """The gang is pinned; before the scheduler reaches it, a pod of another team binds on one of its
    nodes. The controller sees the node overcommitted, evicts just the pod that can no longer bind, and
    its replacement is placed on the free node: no wait for the 300 s timeout."""
    install_admission(store, "gate")
    for name in ("worker1", "worker2", "worker3"):
        store.create("v1", "nodes", "", node(name, cpu="8"))
    add_statefulset(store, "train", 2, b.pod_spec(b.container("6", "1Gi")))
    clock = Clock()
    gangs = Controller(api, clock=clock)
    decision = gangs.reconcile_once()["team-a/sts-train"]
    assert decision.state == "Release"
    victim_node = sorted(decision.release.values())[0]
    thief = b.pod("thief", spec=b.pod_spec(b.container("4", "1Gi")), namespace="other")
    thief["spec"]["nodeName"] = victim_node
    store.create("v1", "pods", "other", thief)
    # the scheduler binds the pod whose node still has room; the other stays pending, refused
    outcome = schedule(store)
    refused = [k for k, v in outcome.items() if v.startswith("!")]
    assert len(refused) == 1
    clock.advance(2)
    decision = gangs.reconcile_once()["team-a/sts-train"]
    assert decision.state == "Repair" and decision.evict == [refused[0].split("/")[1]], decision.message
    # room taken is seen as such: the node is not avoided (the scheduler refused nothing placement missed)
    assert not gangs.requeuer.avoided("team-a/sts-train", clock())
    bound = [p["metadata"]["name"] for p in gang_pods(store) if p["spec"].get("nodeName")]
    assert len(bound) == 1  # the member that bound stays
    # the StatefulSet controller replaces the evicted pod (test API server eviction deletes it)
    StatefulSetController(store).sync(NS, "train")
    clock.advance(2)
    decision = gangs.reconcile_once()["team-a/sts-train"]
    assert decision.state == "Release" and list(decision.release.values()) != [victim_node], decision.message
    assert not [v for v in schedule(store).values() if v.startswith("!")]
    kubelet(store, NS)
    assert gangs.reconcile_once()["team-a/sts-train"].state == "Running"
    assert not overcommitted(store)
    reasons = [e["reason"] for e in store.list("v1", "events", None)[0]]
    gangs.recorder.flush()
    reasons = [e["reason"] for e in store.list("v1", "events", None)[0]]
    assert "GangMembersReplaced" in reasons
    for pod in gang_pods(store):
        validate(pod)


def refused_by_the_scheduler(store: Store, pod: dict[str, Any]) -> None:
    """What kube-scheduler writes on a pod it cannot place: PodScheduled False, reason Unschedulable."""
    pod["status"] = {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
    }
    store.update("v1", "pods", NS, pod["metadata"]["name"], pod, None, admit=False)


def test_a_pinned_pod_the_scheduler_refuses_is_replaced_and_its_node_avoided(store: Store, api: Api) -> None:
    """PodScheduled=False/Unschedulable on a pinned pod (a node changed in a way placement did not see)."""
    install_admission(store, "gate")
    for name in ("worker1", "worker2"):
        store.create("v1", "nodes", "", node(name, cpu="8"))
    add_statefulset(store, "train", 1, b.pod_spec(b.container("6", "1Gi")))
    clock = Clock()
    gangs = Controller(api, clock=clock)
    first = gangs.reconcile_once()["team-a/sts-train"]
    refused_node = next(iter(first.release.values()))
    pod = gang_pods(store)[0]
    refused_by_the_scheduler(store, pod)
    # kube-scheduler retries a refused pod as soon as a pod on its node goes: a refusal is believed once
    # the release is a few seconds old
    assert gangs.reconcile_once()["team-a/sts-train"].state == "Releasing"
    clock.advance(5)
    assert gangs.reconcile_once()["team-a/sts-train"].state == "Repair"
    assert gangs.requeuer.avoided("team-a/sts-train", clock()) == {refused_node}
    StatefulSetController(store).sync(NS, "train")
    again = gangs.reconcile_once()["team-a/sts-train"]
    assert again.state == "Release" and refused_node not in again.release.values()


def test_a_job_whose_pinned_pod_is_refused_is_requeued_whole_never_thinned(store: Store, api: Api) -> None:
    """The Job controller counts a deleted pod that had not succeeded as a failure (spent against
    backoffLimit; the real tier's test_gate_timeout_never_fails_the_job saw a Job fail so): a Job's gang
    is not repaired by eviction but suspended whole, which counts nothing."""
    install_admission(store, "gate")
    for name in ("worker1", "worker2"):
        store.create("v1", "nodes", "", node(name, cpu="8"))
    add_job(store, "train", 1, b.pod_spec(b.container("6", "1Gi")))
    clock = Clock()
    gangs = Controller(api, clock=clock)
    gangs.reconcile_once()
    pod = gang_pods(store)[0]
    refused_by_the_scheduler(store, pod)
    clock.advance(5)
    assert gangs.reconcile_once()["team-a/job-train"].state == "Repair"
    assert store.get("batch/v1", "jobs", NS, "train")["spec"].get("suspend") is True
    assert [p["metadata"]["name"] for p in gang_pods(store)] == [pod["metadata"]["name"]]  # nothing evicted
    gangs.recorder.flush()
    assert "GangRequeued" in [e["reason"] for e in store.list("v1", "events", None)[0]]


def test_a_pinned_pod_refused_while_its_nodes_room_is_on_its_way_back_is_not_replaced(store: Store, api: Api) -> None:
    """Issue #64, seen on the real tier: a gang released onto its placeholders' room deletes them in the
    same turn; until they are gone kube-scheduler refuses the members (and the node looks overcommitted),
    then binds them. Neither is a lost node while a pod there is being deleted."""
    install_admission(store, "gate")
    store.create("v1", "nodes", "", node("worker1", cpu="8"))
    add_job(store, "train", 1, b.pod_spec(b.container("6", "1Gi")))
    clock = Clock()
    gangs = Controller(api, clock=clock)
    assert gangs.reconcile_once()["team-a/job-train"].state == "Release"
    pod = gang_pods(store)[0]
    going = b.pod("going", spec=b.pod_spec(b.container("6")), owned=False)
    going["metadata"]["deletionTimestamp"] = "2026-11-21T12:00:00Z"
    going["spec"]["nodeName"] = "worker1"
    store.create("v1", "pods", NS, going)
    refused_by_the_scheduler(store, pod)
    clock.advance(10)
    assert gangs.reconcile_once()["team-a/job-train"].state == "Releasing"
    store.delete("v1", "pods", NS, "going")
    assert gangs.reconcile_once()["team-a/job-train"].state == "Repair"  # gone, and still refused: lost


# --- unpinned releases keep their reservation ----------------------------------------------------------------


def test_an_unpinned_release_keeps_its_capacity_until_its_pods_bind(store: Store, api: Api) -> None:
    """A gang with pod anti-affinity goes unpinned; the next pass must not give its planned capacity to
    a second gang (both would end partially placed)."""
    install_admission(store, "gate")
    for name in ("worker1", "worker2"):
        store.create("v1", "nodes", "", node(name, cpu="8"))
    spread = b.pod_spec(
        b.container("6", "1Gi"),
        affinity={
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "a"}}, "topologyKey": HOSTNAME_LABEL}
                ]
            }
        },
    )
    add_job(store, "first", 2, spread)
    clock = Clock()
    gangs = Controller(api, clock=clock)
    decision = gangs.reconcile_once()["team-a/job-first"]
    assert decision.state == "Release" and decision.unmodelled == ("podAntiAffinity",)
    records = gang_status(store, "job-first", NS)["released"]
    assert sorted(r["node"] for r in records.values()) == ["worker1", "worker2"]
    assert {p["metadata"]["uid"] for p in gang_pods(store, "job-first")} == {r["uid"] for r in records.values()}
    assert all("nodeSelector" not in p["spec"] for p in gang_pods(store, "job-first"))
    add_job(store, "second", 2, b.pod_spec(b.container("6", "1Gi")))
    clock.advance(1)
    assert gangs.reconcile_once()["team-a/job-second"].state == "WaitingForCapacity"
    schedule(store)  # the first gang binds where planned
    kubelet(store, NS)
    clock.advance(1)
    decisions = gangs.reconcile_once()
    assert decisions["team-a/job-first"].state == "Running"
    assert decisions["team-a/job-second"].state == "WaitingForCapacity"


# --- priority ---------------------------------------------------------------------------------------------


def test_a_higher_priority_gang_goes_first_and_says_when_it_needs_preemption(store: Store, api: Api) -> None:
    install_admission(store, "gate")
    store.create("v1", "nodes", "", node("worker1", cpu="8"))
    store.create("v1", "nodes", "", node("worker2", cpu="8"))
    add_job(store, "low", 2, b.pod_spec(b.container("4", "1Gi")))
    add_job(store, "high", 2, b.pod_spec(b.container("4", "1Gi"), priority=1000, priorityClassName="urgent"))
    clock = Clock()
    gangs = Controller(api, clock=clock)
    # both fit one at a time on the 16 cpus: the older low gang fits... but the high one is served first
    for name in ("worker1", "worker2"):
        filler = b.pod(f"filler-{name}", spec=b.pod_spec(b.container("4", "1Gi")), namespace="other")
        filler["spec"]["nodeName"] = name
        store.create("v1", "pods", "other", filler)
    decisions = gangs.reconcile_once()
    assert decisions["team-a/job-high"].state == "Release"
    assert decisions["team-a/job-low"].state == "WaitingForCapacity"
    # now a third, even higher gang on a full cluster of priority-0 and priority-1000 pods
    schedule(store)
    kubelet(store, NS)
    add_job(store, "urgent", 2, b.pod_spec(b.container("4", "1Gi"), priority=5000, priorityClassName="critical"))
    clock.advance(1)
    decision = gangs.reconcile_once()["team-a/job-urgent"]
    assert decision.state == "WaitingForCapacity"
    # packed: both on one node once the priority-0 filler and the priority-1000 pod there were gone
    assert "fits if pods of priority below 5000 on 1 node were preempted" in decision.message, decision.message
    assert decision.preempt_nodes == ("worker1",)
    # both lone priority-0 fillers go (the fresh priority-1000 gang is nobody's victim): one pod of the
    # urgent gang on each node, named without their namespace; then it fits, as `explain` says
    assert decision.message.endswith(
        "preempting a pod of priority 0 in another namespace, a pod of priority 0 in another namespace"
    ), decision.message
    assert "Release" in explain(api, NS, "job-urgent")
    gangs.recorder.flush()
    assert "priority below 5000" in gang_status(store, "job-urgent", NS)["message"]


# --- serving spreads, batch packs -------------------------------------------------------------------------


def test_serving_replicas_spread_and_batch_gangs_pack(store: Store, api: Api) -> None:
    install_admission(store, "gate")
    for name in ("worker1", "worker2", "worker3"):
        store.create("v1", "nodes", "", node(name, cpu="16"))
    sts = b.statefulset("web", replicas=3)
    sts["spec"]["template"]["spec"] = b.pod_spec(b.container("1", "1Gi"))
    store.create("apps/v1", "statefulsets", NS, sts)
    StatefulSetController(store).sync(NS, "web")
    add_job(store, "batch", 3, b.pod_spec(b.container("1", "1Gi")))
    packed = b.statefulset("cache", replicas=3)
    packed["metadata"]["annotations"] = {"gangkeeper.io/placement": "pack"}
    packed["spec"]["template"]["spec"] = b.pod_spec(b.container("1", "1Gi"))
    store.create("apps/v1", "statefulsets", NS, packed)
    StatefulSetController(store).sync(NS, "cache")
    decisions = Controller(api, clock=Clock()).reconcile_once()
    spread = decisions["team-a/sts-web"]
    assert spread.state == "Release" and len(set(spread.release.values())) == 3
    assert len(set(decisions["team-a/job-batch"].release.values())) == 1
    assert len(set(decisions["team-a/sts-cache"].release.values())) == 1
    assert not [v for v in schedule(store).values() if v.startswith("!")]
