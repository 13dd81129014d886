"""gangkeeper's Kueue AdmissionCheck: Ready only when a Workload's whole gang fits the nodes now."""

from __future__ import annotations

from typing import Any

from webhook.controller.decide.kueue_check import demands, gang_fits, waiting_check
from webhook.controller.decide.shapes import Node

CHECK = "gang-fits"


def node(name: str, cpu: int, **labels: str) -> Node:
    return Node.from_api(
        {
            "metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"cpu": str(cpu), "memory": "32Gi", "pods": "110"}},
        }
    )


def workload(
    *pod_sets: tuple[str, int, str],
    state: str = "Pending",
    reserved: bool = True,
    selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    sets = [
        {
            "name": name,
            "count": count,
            "template": {
                "spec": {
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
                    **({"nodeSelector": selector} if selector else {}),
                }
            },
        }
        for name, count, cpu in pod_sets
    ]
    status: dict[str, Any] = {"admissionChecks": [{"name": CHECK, "state": state, "message": ""}]}
    if reserved:
        status["admission"] = {"clusterQueue": "cq", "podSetAssignments": [{"name": s["name"]} for s in sets]}
    return {"metadata": {"name": "w", "namespace": "team-a"}, "spec": {"podSets": sets}, "status": status}


def verdict(w: dict[str, Any], nodes: list[Node]) -> Any:
    wanted = demands(w)
    assert not isinstance(wanted, str)
    return gang_fits(wanted, nodes, {}, {})


def test_a_workload_waits_on_the_check_only_with_quota_reserved_and_the_check_pending() -> None:
    assert waiting_check(workload(("main", 8, "1")), [CHECK]) == CHECK
    assert waiting_check(workload(("main", 8, "1"), reserved=False), [CHECK]) is None
    assert waiting_check(workload(("main", 8, "1"), state="Ready"), [CHECK]) is None
    assert waiting_check(workload(("main", 8, "1")), ["another-check"]) is None


def test_the_whole_gang_must_fit_at_once_not_the_quota_alone() -> None:
    small = [node("a", 4)]
    answer = verdict(workload(("main", 8, "1")), small)
    assert not answer.fits and "4 of 8 pods" in answer.message
    answer = verdict(workload(("main", 8, "1")), [node("a", 4), node("b", 4)])
    assert answer.fits and "8 main" in answer.message


def test_every_pod_set_is_placed_in_the_room_the_others_left() -> None:
    nodes = [node("a", 4), node("b", 4)]
    assert verdict(workload(("launcher", 1, "1"), ("worker", 7, "1")), nodes).fits
    assert not verdict(workload(("launcher", 1, "2"), ("worker", 7, "1")), nodes).fits


def test_pods_go_only_to_the_nodes_they_may_use() -> None:
    nodes = [node("a", 8, pool="gpu"), node("b", 8, pool="cpu")]
    assert not verdict(workload(("main", 10, "1"), selector={"pool": "gpu"}), nodes).fits
    assert verdict(workload(("main", 8, "1"), selector={"pool": "gpu"}), nodes).fits


def test_a_partial_admission_is_checked_at_the_count_kueue_admitted() -> None:
    w = workload(("main", 8, "1"))
    w["status"]["admission"]["podSetAssignments"][0]["count"] = 4
    assert verdict(w, [node("a", 4)]).fits


def test_a_workload_whose_pods_cannot_be_read_is_named_not_placed() -> None:
    w = workload(("main", 8, "1"))
    w["spec"]["podSets"][0]["count"] = "eight"
    assert "count is not a number" in str(demands(w))
    w = workload(("main", 8, "lots"))
    assert "cannot be read" in str(demands(w))


def test_workloads_are_answered_oldest_first_each_in_the_room_the_earlier_left(api: Any, store: Any) -> None:
    """Two Workloads of 4 one-CPU pods, one 6-CPU node: the older is Ready, the younger Pending with what
    fits in what the older leaves; asked again with nothing changed, nothing is written."""
    import datetime as dt

    from tests.cluster import node as api_node
    from webhook.controller.act.kueue_checks import KueueChecks
    from webhook.controller.run.reconciler import Controller

    store.served["kueue.x-k8s.io/v1beta2"] = {"admissionchecks", "workloads"}
    check = {"metadata": {"name": CHECK}, "spec": {"controllerName": "gangkeeper.io/gang-fits"}}
    store.create("kueue.x-k8s.io/v1beta2", "admissionchecks", "", check)
    store.create("v1", "nodes", "", api_node("n1", cpu="6"))
    for name, created in (("younger", "2026-01-01T00:00:09Z"), ("older", "2026-01-01T00:00:01Z")):
        w = workload(("main", 4, "1"))
        w["metadata"] = {"name": name, "creationTimestamp": created}
        store.create("kueue.x-k8s.io/v1beta2", "workloads", "team-a", w)
        # the fake server stamps its own creation time: put the one the test means back
        store.patch("kueue.x-k8s.io/v1beta2", "workloads", "team-a", name, {"metadata": {"creationTimestamp": created}})
    controller = Controller(api)
    controller.reconcile_once()

    def state(name: str) -> dict[str, Any]:
        found = store.get("kueue.x-k8s.io/v1beta2", "workloads", "team-a", name)
        return dict(found["status"]["admissionChecks"][0], version=found["metadata"]["resourceVersion"])

    older, younger = state("older"), state("younger")
    assert older["state"] == "Ready" and "4 main" in older["message"]
    assert younger["state"] == "Pending" and "2 of 4 pods" in younger["message"]
    checks = KueueChecks(api, lambda: True)
    checks.sync(controller.snapshot(), dt.datetime.now(dt.UTC))
    assert state("younger")["version"] == younger["version"]  # the same answer is not written again


def test_a_workload_placement_cannot_read_waits_and_the_others_are_answered(api: Any, store: Any) -> None:
    from tests.cluster import node as api_node
    from webhook.controller.run.reconciler import Controller

    store.served["kueue.x-k8s.io/v1beta2"] = {"admissionchecks", "workloads"}
    check = {"metadata": {"name": CHECK}, "spec": {"controllerName": "gangkeeper.io/gang-fits"}}
    store.create("kueue.x-k8s.io/v1beta2", "admissionchecks", "", check)
    store.create("v1", "nodes", "", api_node("n1", cpu="8", taints=[{"key": "gpu", "effect": "NoSchedule"}]))
    odd = workload(("main", 1, "1"))
    odd["metadata"] = {"name": "odd"}
    odd["spec"]["podSets"][0]["template"]["spec"]["tolerations"] = "everything"
    store.create("kueue.x-k8s.io/v1beta2", "workloads", "team-a", odd)
    fine = workload(("main", 1, "1"))
    fine["metadata"] = {"name": "fine"}
    fine["spec"]["podSets"][0]["template"]["spec"]["tolerations"] = [{"key": "gpu", "operator": "Exists"}]
    store.create("kueue.x-k8s.io/v1beta2", "workloads", "team-a", fine)
    Controller(api).reconcile_once()  # the pass goes on
    answered = store.get("kueue.x-k8s.io/v1beta2", "workloads", "team-a", "fine")
    assert answered["status"]["admissionChecks"][0]["state"] == "Ready"
    assert (
        store.get("kueue.x-k8s.io/v1beta2", "workloads", "team-a", "odd")["status"]["admissionChecks"][0]["state"]
        == "Pending"
    )


def manager_workload(name: str, job_uid: str, **status: Any) -> dict[str, Any]:
    """A manager's Workload of Job `name`, its check MultiKueue's."""
    w = workload(("main", 8, "1"))
    w["metadata"] = {
        "name": f"job-{name}-1a2b3",
        "namespace": "team-a",
        "ownerReferences": [
            {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": job_uid, "controller": True}
        ],
    }
    w["status"] = {"admissionChecks": [{"name": "multikueue", "state": "Pending", "message": ""}], **status}
    return w


def test_a_dispatched_workload_says_which_worker_runs_it_and_none_other_is_reported() -> None:
    from webhook.controller.decide.kueue_check import dispatched

    waiting = dispatched(manager_workload("train", "u1", nominatedClusterNames=["w1", "w2"]), {"multikueue"})
    assert waiting is not None and waiting.state == "WaitingForCluster" and "w1, w2" in waiting.message
    assert waiting.owner == {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u1"}
    assert waiting.pods == 8 and waiting.cluster is None
    running = dispatched(manager_workload("train", "u1", clusterName="w2"), {"multikueue"})
    assert running is not None and (running.state, running.cluster) == ("Dispatched", "w2")
    done = dispatched(
        manager_workload("train", "u1", clusterName="w2", conditions=[{"type": "Finished", "status": "True"}]),
        {"multikueue"},
    )
    assert done is not None and done.state == "Finished"
    assert dispatched(manager_workload("train", "u1"), {"another-check"}) is None  # not MultiKueue's
    orphan = manager_workload("train", "u1")
    orphan["metadata"]["ownerReferences"][0]["controller"] = False
    assert dispatched(orphan, {"multikueue"}) is None  # nothing to own its Gang


def test_the_manager_writes_a_gang_owned_by_the_dispatched_job_saying_its_worker(api: Any, store: Any) -> None:
    """On a MultiKueue manager (no pod of the Job there), the Gang is made from the Workload Kueue wrote,
    owned by the Job's uid, with the worker cluster once MultiKueue chose it; unchanged, not written again."""
    import datetime as dt

    from webhook.controller.act.kueue_checks import KueueChecks
    from webhook.controller.run.reconciler import Controller

    store.served["kueue.x-k8s.io/v1beta2"] = {"admissionchecks", "workloads"}
    check = {"metadata": {"name": "multikueue"}, "spec": {"controllerName": "kueue.x-k8s.io/multikueue"}}
    store.create("kueue.x-k8s.io/v1beta2", "admissionchecks", "", check)
    store.create("kueue.x-k8s.io/v1beta2", "workloads", "team-a", manager_workload("train", "u1"))
    controller = Controller(api)
    controller.reconcile_once()
    gang = store.get("gangkeeper.io/v1alpha1", "gangs", "team-a", "job-train")
    assert gang["spec"] == {
        "backend": "multikueue",
        "minMember": 8,
        "workload": {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u1"},
    }
    assert gang["metadata"]["ownerReferences"][0]["uid"] == "u1"
    assert gang["status"]["state"] == "WaitingForCluster" and "cluster" not in gang["status"]
    store.patch("kueue.x-k8s.io/v1beta2", "workloads", "team-a", "job-train-1a2b3", {"status": {"clusterName": "w2"}})

    def look_again() -> None:  # unwatched, the pass lists Workloads every 2 s: a new reader lists them now
        checks = KueueChecks(api, lambda: True, None, controller.gang_objects)
        checks.sync(controller.snapshot(), dt.datetime.now(dt.UTC))
        controller.gang_objects.flush()

    look_again()
    gang = store.get("gangkeeper.io/v1alpha1", "gangs", "team-a", "job-train")
    assert (gang["status"]["state"], gang["status"]["cluster"]) == ("Dispatched", "w2")
    assert "runs in worker cluster w2" in gang["status"]["message"]
    version = gang["metadata"]["resourceVersion"]
    look_again()
    assert store.get("gangkeeper.io/v1alpha1", "gangs", "team-a", "job-train")["metadata"]["resourceVersion"] == version


def test_a_workload_whose_pods_claim_devices_is_ready_only_where_its_devices_are(apiserver: Any, api: Any) -> None:
    """4 pods each claiming a GPU (a ResourceClaimTemplate), a node with CPU for all and GPUs for 2: the
    check stays Pending, counting the devices; GPUs published for the rest: Ready."""
    from tests.cluster import node as api_node
    from tests.fake.test_devices import device_class, exactly, gpus, node_slice, template
    from tests.recorder import ListRecorder
    from webhook.controller.act.kueue_checks import KUEUE_RESOURCES
    from webhook.controller.observe.devices import RESOURCES
    from webhook.controller.run.reconciler import Controller
    from webhook.informer import Informer

    store = apiserver.store
    store.served["resource.k8s.io/v1"] = {r.plural for r in RESOURCES}
    store.served["kueue.x-k8s.io/v1beta2"] = {"admissionchecks", "workloads"}
    watched = (*RESOURCES, *KUEUE_RESOURCES)
    informers = {(r.group_version, r.plural): Informer(api, r, watch_seconds=1) for r in watched}
    store.create(
        "kueue.x-k8s.io/v1beta2",
        "admissionchecks",
        "",
        {"metadata": {"name": CHECK}, "spec": {"controllerName": "gangkeeper.io/gang-fits"}},
    )
    store.create("v1", "nodes", "", api_node("n1", cpu="16"))
    store.create("resource.k8s.io/v1", "deviceclasses", "", device_class())
    store.create("resource.k8s.io/v1", "resourceclaimtemplates", "team-a", template("one-gpu", exactly()))
    store.create("resource.k8s.io/v1", "resourceslices", "", node_slice("n1", gpus(2)))
    w = workload(("main", 4, "1"))
    w["spec"]["podSets"][0]["template"]["spec"]["resourceClaims"] = [
        {"name": "gpu", "resourceClaimTemplateName": "one-gpu"}
    ]
    store.create("kueue.x-k8s.io/v1beta2", "workloads", "team-a", w)
    controller = Controller(api, recorder=ListRecorder(), informers=informers)

    def answer() -> dict[str, Any]:
        for informer in informers.values():
            informer.relist()
        controller.reconcile_once()
        return dict(store.get("kueue.x-k8s.io/v1beta2", "workloads", "team-a", "w")["status"]["admissionChecks"][0])

    pending = answer()
    assert pending["state"] == "Pending" and "2 of 4 pods" in pending["message"], pending
    store.create("resource.k8s.io/v1", "resourceslices", "", node_slice("n1", gpus(2), pool="more"))
    ready = answer()
    assert ready["state"] == "Ready", ready


def admitted(ready_at: str, **conditions: str) -> dict[str, Any]:
    w = workload(("main", 8, "1"), state="Ready")
    w["status"]["admissionChecks"][0]["lastTransitionTime"] = ready_at
    w["status"]["conditions"] = [{"type": kind, "status": value} for kind, value in conditions.items()]
    return w


def test_a_gang_admitted_on_the_check_that_has_not_started_within_its_timeout_is_handed_back() -> None:
    import datetime as dt

    from webhook.controller.decide.kueue_check import overdue

    ready_at = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    later = (ready_at + dt.timedelta(seconds=31)).timestamp()
    w = admitted("2026-01-01T00:00:00Z", Admitted="True")
    assert overdue(w, {CHECK}, False, 30, later) == CHECK
    assert overdue(w, {CHECK}, False, 60, later) is None  # within its timeout
    assert overdue(w, {CHECK}, True, 30, later) is None  # a pod of its gang holds a node: it started
    assert overdue(admitted("2026-01-01T00:00:00Z", PodsReady="True"), {CHECK}, False, 30, later) is None
    assert overdue(admitted("2026-01-01T00:00:00Z", Evicted="True"), {CHECK}, False, 30, later) is None
    assert overdue(w, {"another"}, False, 30, later) is None


def test_the_check_says_retry_for_a_gang_that_never_started_and_kueue_takes_it_back(api: Any, store: Any) -> None:
    """Admitted on the check long ago, its gang's pods made and all still gated (no room: the node is
    too small): the check goes Retry (Kueue then evicts and requeues it), with why. Before any pod of
    it is seen, nothing is said: nothing tells that it has not started."""
    from tests.cluster import add_job, add_job_pods
    from tests.cluster import node as api_node
    from webhook.controller.run.reconciler import Controller

    store.served["kueue.x-k8s.io/v1beta2"] = {"admissionchecks", "workloads"}
    check = {"metadata": {"name": CHECK}, "spec": {"controllerName": "gangkeeper.io/gang-fits"}}
    store.create("kueue.x-k8s.io/v1beta2", "admissionchecks", "", check)
    store.create("v1", "nodes", "", api_node("n1", cpu="2"))
    job = add_job(store, "j", parallelism=4, cpu="1")
    w = admitted("2000-01-01T00:00:00Z", Admitted="True")
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": job["metadata"]["uid"], "controller": True}
    w["metadata"]["ownerReferences"] = [owner]
    store.create("kueue.x-k8s.io/v1beta2", "workloads", "team-a", w)

    def state() -> dict[str, Any]:
        return dict(store.get("kueue.x-k8s.io/v1beta2", "workloads", "team-a", "w")["status"]["admissionChecks"][0])

    controller = Controller(api)
    controller.reconcile_once()
    assert state()["state"] == "Ready"  # no pod of it yet
    add_job_pods(store, job)
    controller.kueue_checks = type(controller.kueue_checks)(  # a new reader: unwatched, it lists now
        api, lambda: True, None, controller.gang_objects, timeout_of=controller._timeout_of
    )
    controller.reconcile_once()
    assert state()["state"] == "Retry" and "handed back to Kueue" in state()["message"], state()
