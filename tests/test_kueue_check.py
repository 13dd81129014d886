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
