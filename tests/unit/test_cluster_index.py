"""The controller's picture of the cluster, kept by informer changes, equals one built from scratch; and a
waiting gang is placed again only when something it could use changed."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest

from tests import builders as b
from tests.apiserver import Store
from tests.cluster import Clock, add_job, add_job_pods, default_scheduler, node
from tests.lifecycle import JobController, install_admission
from webhook.controller.decide.queue import Policy
from webhook.controller.observe.cluster import ClusterIndex
from webhook.controller.observe.informer import InformerSource, trim_node, trim_pod
from webhook.controller.observe.resolve import Workloads
from webhook.controller.run.reconciler import Controller
from webhook.informer import Informer
from webhook.kube import NODES, PODS, Api

NS = "team-a"


def informed(api: Api, **options: Any) -> tuple[Controller, list[Informer]]:
    pods = Informer(api, PODS, transform=trim_pod, watch_seconds=5)
    nodes = Informer(api, NODES, transform=trim_node, watch_seconds=5)
    for informer in (pods, nodes):
        informer.start()
    assert pods.synced.wait(5) and nodes.synced.wait(5)
    return Controller(api, InformerSource(pods, nodes), **{"clock": Clock(), **options}), [pods, nodes]


def settle(store: Store, informers: list[Informer]) -> None:
    """Until both caches hold the store's latest version."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with store.lock:
            latest = {plural: rv for rv, _, plural, _, _ in store.events}
        if all(int(i.resource_version or 0) >= latest.get(i.resource.plural, 0) for i in informers):
            return
        time.sleep(0.02)
    raise AssertionError("informers did not catch up")


def picture(index: ClusterIndex) -> dict[str, Any]:
    return {
        "free": {n: {k: v for k, v in u.items() if v} for n, u in index.free.items()},
        "ports": {n: dict(c) for n, c in index.ports.items()},
        "gangs": {k: sorted(p.name for p in g.pods) for k, g in index.gangs().items()},
        # what the index tallied of each gang's pods as they changed
        "tallies": {k: (sorted(g.mechanisms or ()), sorted(g.workload_uids or ())) for k, g in index.gangs().items()},
        "gated": index.gated,
        "stray": sorted(index.stray_gated),
        "going": {n: {k: v for k, v in u.items() if v} for n, u in index.going.items()},
        "yielding": {n: {k: v for k, v in u.items() if v} for n, u in index.yielding.items()},
    }


def test_the_index_kept_by_changes_equals_one_built_from_a_full_listing(store: Store, api: Api) -> None:
    install_admission(store, "gate")
    rng = random.Random(7)
    for i in range(6):
        store.create("v1", "nodes", "", node(f"n{i}", cpu="16"))
    controller, informers = informed(api)
    try:
        for round_ in range(12):
            for step in range(rng.randint(3, 10)):
                choice = rng.random()
                name = f"p{round_}-{step}"
                pods = store.list("v1", "pods", None)[0]
                if choice < 0.4:
                    ports = [{"containerPort": 80, "hostPort": 8000 + rng.randint(0, 3)}] if rng.random() < 0.3 else []
                    pod = b.pod(
                        name,
                        spec=b.pod_spec(b.container(str(rng.randint(1, 3)), "1Gi", ports=ports)),
                        namespace="other",
                    )
                    pod["spec"]["nodeName"] = f"n{rng.randint(0, 5)}"
                    pod["spec"]["priority"] = rng.choice([0, 100])
                    store.create("v1", "pods", "other", pod)
                elif choice < 0.55:
                    store.create("batch/v1", "jobs", NS, b.job(f"j{round_}-{step}", parallelism=rng.randint(1, 3)))
                    JobController(store).sync(NS, f"j{round_}-{step}")
                elif choice < 0.75 and pods:
                    victim = rng.choice(pods)
                    store.delete("v1", "pods", victim["metadata"]["namespace"], victim["metadata"]["name"])
                elif choice < 0.9 and pods:
                    done = rng.choice(pods)
                    done["status"] = {"phase": rng.choice(["Succeeded", "Failed", "Running"])}
                    store.update(
                        "v1", "pods", done["metadata"]["namespace"], done["metadata"]["name"], done, None, admit=False
                    )
                else:
                    changed = node(f"n{rng.randint(0, 7)}", cpu=str(rng.choice([8, 16, 32])))
                    try:
                        store.create("v1", "nodes", "", changed)
                    except Exception:
                        store.delete("v1", "nodes", "", changed["metadata"]["name"])
            settle(store, informers)
            controller.reconcile_once()  # releases gangs: their pods change again
            settle(store, informers)
            controller.snapshot()  # takes in what the informers saw since
            # the same release records and mechanisms
            fresh = ClusterIndex(controller.gang_objects.releases, controller.index.mechanism_of)
            fresh.replace_nodes(store.list("v1", "nodes", None)[0])
            fresh.replace_pods(trim_pod(p) for p in store.list("v1", "pods", None)[0])
            assert picture(controller.index) == picture(fresh), f"round {round_}"
            for gang in controller.index.gangs().values():  # the tallies are what the pods say
                assert gang.mechanisms == {controller.mechanisms.of_pod(raw).name for raw in gang.raw}
                assert gang.workload_uids == {view.workload_uid for view in gang.pods}
    finally:
        for informer in informers:
            informer.stop()


def test_a_waiting_gang_is_placed_again_only_when_room_it_could_use_appears(store: Store, api: Api) -> None:
    install_admission(store, "gate")
    for i in range(3):
        store.create("v1", "nodes", "", node(f"n{i}", cpu="8"))
        filler = b.pod(f"filler-{i}", spec=b.pod_spec(b.container("6", "1Gi")), namespace="other")
        filler["spec"]["nodeName"] = f"n{i}"
        store.create("v1", "pods", "other", filler)
    store.create("batch/v1", "jobs", NS, b.job("big", parallelism=2, spec=b.pod_spec(b.container("4", "1Gi"))))
    JobController(store).sync(NS, "big")
    controller, informers = informed(api)
    try:
        settle(store, informers)
        assert controller.reconcile_once()["team-a/job-big"].state == "WaitingForCapacity"
        assert controller.replaced == 1
        # churn that frees nothing the gang could use: a small pod comes and goes on a full node
        small = b.pod("small", spec=b.pod_spec(b.container("1", "1Gi")), namespace="other")
        small["spec"]["nodeName"] = "n0"
        store.create("v1", "pods", "other", small)
        settle(store, informers)
        controller.reconcile_once()
        store.delete("v1", "pods", "other", "small")
        settle(store, informers)
        assert controller.reconcile_once()["team-a/job-big"].state == "WaitingForCapacity"
        assert controller.replaced == 0  # 3 cpus free on n0 again, still less than the 4 a pod needs
        # two fillers end: room for the gang, which is placed again at once and released
        for i in (1, 2):
            store.delete("v1", "pods", "other", f"filler-{i}")
        settle(store, informers)
        decision = controller.reconcile_once()["team-a/job-big"]
        assert controller.replaced == 1 and decision.state == "Release", decision.message
    finally:
        for informer in informers:
            informer.stop()


def test_a_gang_with_more_gated_pods_than_its_minimum_is_released_once_its_minimum_fits(store: Store, api: Api) -> None:
    """Parallelism 3, min-member 2: room for two pods is room for the gang (its waiting decision, made
    when one fit, is not kept because all three still do not)."""
    install_admission(store, "gate")
    for i, (cpu, used) in enumerate([("8", "3"), ("6", "6"), ("8", "6")]):  # room for one pod of 4 cpus
        store.create("v1", "nodes", "", node(f"n{i}", cpu=cpu))
        filler = b.pod(f"filler-{i}", spec=b.pod_spec(b.container(used, "1Gi")), namespace="other")
        filler["spec"]["nodeName"] = f"n{i}"
        store.create("v1", "pods", "other", filler)
    job = b.job("wide", parallelism=3, spec=b.pod_spec(b.container("4", "1Gi")))
    job["metadata"]["annotations"] = {"gangkeeper.io/min-member": "2"}
    store.create("batch/v1", "jobs", NS, job)
    JobController(store).sync(NS, "wide")
    controller, informers = informed(api)
    try:
        settle(store, informers)
        decision = controller.reconcile_once()["team-a/job-wide"]
        assert decision.state == "WaitingForCapacity" and decision.message.startswith("1 of 2"), decision.message
        store.delete("v1", "pods", "other", "filler-1")  # room for one more: two, the gang's minimum
        settle(store, informers)
        decision = controller.reconcile_once()["team-a/job-wide"]
        assert decision.state == "Release", decision.message
    finally:
        for informer in informers:
            informer.stop()


@pytest.mark.parametrize("seed", range(24))  # seed 15 found the min-member reuse bug
def test_a_gang_that_fits_is_released_within_one_pass_of_the_change_that_made_it_fit(
    store: Store, api: Api, seed: int
) -> None:
    """Whatever the sequence of pod and node changes, the controller kept by changes (reusing waiting
    decisions) releases a gang in the pass after the change that made it fit: where a controller built
    from scratch on the same cluster would release it, it does too."""
    from webhook.controller.decide.situation import GangState
    from webhook.controller.observe.source import Listing
    from webhook.kube import Api as ApiClient

    install_admission(store, "gate")
    rng = random.Random(seed)
    for i in range(3):
        store.create("v1", "nodes", "", node(f"n{i}", cpu="8"))
    nodes, fillers, jobs = [f"n{i}" for i in range(3)], [], 0
    clock = Clock()
    controller, informers = informed(api, clock=clock, queue_policy=Policy.FIRST_FIT)
    readonly = ApiClient(api.client, read_only=True)
    try:
        for step in range(14):
            change = rng.choice(["filler", "filler", "free", "free", "node", "job", "job"])
            if change == "filler" and nodes:
                pod = b.pod(
                    f"filler-{step}", spec=b.pod_spec(b.container(str(rng.randint(1, 6)), "1Gi")), namespace="other"
                )
                pod["spec"]["nodeName"] = rng.choice(nodes)
                store.create("v1", "pods", "other", pod)
                fillers.append(pod["metadata"]["name"])
            elif change == "free" and fillers:
                store.delete("v1", "pods", "other", fillers.pop(rng.randrange(len(fillers))))
            elif change == "node":
                name = f"m{step}"
                store.create("v1", "nodes", "", node(name, cpu=str(rng.choice([4, 8, 16]))))
                nodes.append(name)
            elif change == "job" and jobs < 4:
                parallelism = rng.randint(2, 4)
                job = b.job(
                    f"j{step}", parallelism=parallelism, spec=b.pod_spec(b.container(str(rng.randint(1, 5)), "1Gi"))
                )
                job["metadata"]["annotations"] = {"gangkeeper.io/min-member": str(rng.randint(1, parallelism))}
                store.create("batch/v1", "jobs", NS, job)
                JobController(store).sync(NS, f"j{step}")
                jobs += 1
            settle(store, informers)
            fresh = Controller(readonly, Listing(readonly), clock=clock, queue_policy=Policy.FIRST_FIT)
            expected = {k: d.state for k, d in fresh.reconcile_once().items()}
            decided = controller.reconcile_once()
            for key, state in expected.items():
                if state == GangState.RELEASE:
                    assert decided[key].state == GangState.RELEASE, (seed, step, key, decided[key].message)
            default_scheduler(store)
            settle(store, informers)
    finally:
        for informer in informers:
            informer.stop()


def placeholder(name: str, node_name: str | None, deleting: bool = False) -> dict[str, Any]:
    pod = b.pod(name, spec=b.pod_spec(b.container("3", "1Gi")), namespace=NS, owned=False)
    pod["metadata"]["labels"] = {"gangkeeper.io/placeholder-for": "job-train", "gangkeeper.io/skip": "true"}
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "gangkeeper.io/v1alpha1", "kind": "Gang", "name": "job-train", "uid": "gang-uid"}
    ]
    if node_name:
        pod["spec"]["nodeName"] = node_name
    if deleting:
        pod["metadata"]["deletionTimestamp"] = "2026-11-21T12:00:00Z"
    return pod


def test_the_room_bound_placeholders_hold_is_known_per_node_until_they_go() -> None:
    """What a pinned pod that may preempt can count on (start.py node_taken): a placeholder's room while
    it is bound; once it is being deleted that room is `going` instead, and once gone, neither."""
    index = ClusterIndex()
    index.replace_nodes([node("n1", cpu="8")])
    key = f"{NS}/ph-0"
    index.apply_pods({key: placeholder("ph-0", None)})
    assert index.yielding == {}  # pending: it holds nothing yet
    index.apply_pods({key: placeholder("ph-0", "n1")})
    assert index.yielding["n1"]["cpu"] == 3000 and index.going == {}
    index.apply_pods({key: placeholder("ph-0", "n1", deleting=True)})
    assert not any(index.yielding.get("n1", {}).values()) and index.going["n1"]["cpu"] == 3000
    index.apply_pods({key: None})
    assert not any(index.yielding.get("n1", {}).values()) and "n1" not in index.going


def test_the_index_tallies_each_gangs_mechanisms_as_its_pods_change() -> None:
    """A pass reads a gang's mechanisms off the index's tally (reconciler._mechanisms_of), kept as its pods
    change: a member relabelled or gone leaves it, and a change of the mechanisms tells every pod anew."""

    def member(name: str, mechanism: str | None = None) -> dict[str, Any]:
        labels = {"gangkeeper.io/group-name": "mpi", "gangkeeper.io/group": "pg-mpi"}
        pod = b.pod(name, labels=labels | ({"m": mechanism} if mechanism else {}))
        pod["metadata"]["annotations"] = {"gangkeeper.io/workload": "Pod/mpi"}
        pod["spec"]["schedulingGates"] = [{"name": "gangkeeper.io/gang-gate"}]
        return pod

    def tallied() -> frozenset[str] | None:
        (gang,) = index.gangs().values()
        return gang.mechanisms

    index = ClusterIndex(mechanism_of=lambda pod: str(pod["metadata"]["labels"].get("m", "gate")))
    a, c = f"{NS}/a", f"{NS}/c"
    index.apply_pods({a: member("a"), c: member("c", "volcano")})
    assert tallied() == {"gate", "volcano"}
    index.apply_pods({c: member("c")})
    assert tallied() == {"gate"}
    index.apply_pods({c: None, a: member("a", "coscheduling")})
    assert tallied() == {"coscheduling"}
    index.reclassify(lambda pod: "native")
    assert tallied() == {"native"}


def test_a_gangs_members_stay_in_name_order_and_its_roster_moves_only_when_membership_does() -> None:
    """The members' order and the queue place (cycle.queue_key) are kept per roster version: it must move
    when the gang gains, loses or replaces a pod, or one ends, and only then; an event of a version the
    index holds already (the release's own answer, then the watch's copy) is not taken again."""

    def member(name: str, uid: str, version: str, phase: str = "Pending", gated: bool = True) -> dict[str, Any]:
        labels = {"gangkeeper.io/group-name": "mpi", "gangkeeper.io/group": "pg-mpi"}
        pod = b.pod(name, labels=labels)
        pod["metadata"].update(uid=uid, resourceVersion=version, annotations={"gangkeeper.io/workload": "Pod/mpi"})
        if gated:
            pod["spec"]["schedulingGates"] = [{"name": "gangkeeper.io/gang-gate"}]
        pod["status"] = {"phase": phase}
        return pod

    def seen() -> tuple[list[str], int]:
        (gang,) = index.gangs().values()
        return [view.uid for view in gang.pods], index.roster_versions[gang.key]

    index = ClusterIndex()
    a, bee, c = f"{NS}/a", f"{NS}/b", f"{NS}/c"
    index.apply_pods({c: member("c", "c1", "1"), a: member("a", "a1", "2")})
    order, roster = seen()
    assert order == ["a1", "c1"]
    index.apply_pods({a: member("a", "a1", "3", gated=False)})  # released: the same members
    assert seen() == (["a1", "c1"], roster)
    assert not index.gangs()[f"{NS}/pg-mpi"].pods[0].gated
    index.apply_pods({a: member("a", "a1", "3", gated=True)})  # a version held already: not taken again
    assert not index.gangs()[f"{NS}/pg-mpi"].pods[0].gated
    index.apply_pods({bee: member("b", "b1", "4")})
    order, moved = seen()
    assert order == ["a1", "b1", "c1"] and moved != roster
    index.apply_pods({bee: member("b", "b2", "5")})  # made again under the same name
    order, replaced = seen()
    assert order == ["a1", "b2", "c1"] and replaced != moved
    index.apply_pods({c: member("c", "c1", "6", phase="Succeeded", gated=False)})
    assert seen()[1] != replaced
    index.apply_pods({a: None})
    assert seen()[0] == ["b2", "c1"]


def test_a_workload_is_analyzed_again_only_when_it_changes(store: Store, api: Api) -> None:
    """Workloads.resolve keeps a workload's analysis per uid and resourceVersion: the same Resolved while
    the Job is unchanged, its new gang size as soon as it changes."""
    job = add_job(store, parallelism=4)
    add_job_pods(store, job)
    index = ClusterIndex()
    index.replace_pods(store.list("v1", "pods", None)[0])
    (gang,) = index.gangs().values()
    workloads = Workloads(api, {})
    first = workloads.resolve(gang, {})
    assert first.spec is not None and first.spec.min_member == 4
    assert workloads.resolve(gang, {}) is first
    job = store.get("batch/v1", "jobs", job["metadata"]["namespace"], job["metadata"]["name"])
    job["metadata"].setdefault("annotations", {})["gangkeeper.io/min-member"] = "2"
    store.update("batch/v1", "jobs", job["metadata"]["namespace"], job["metadata"]["name"], job, None, admit=False)
    again = workloads.resolve(gang, {})
    assert again is not first and again.spec is not None and again.spec.min_member == 2
