"""Whole-gang preemption on the gate backend: victim choice as a rule (preemption.choose_victims), and the
controller acting on it against the test API server (preemptor.Preemptor)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tests import builders as b
from tests.apiserver import Store, TestApiServer
from tests.cluster import Clock, add_job_pods, default_scheduler, gang_status, node, pods
from tests.fake.test_controller import events
from tests.recorder import ListRecorder
from webhook.controller.decide.placement import Member
from webhook.controller.decide.preemption import Victim, budget_blocks, choose_victims
from webhook.controller.decide.shapes import Node, Shape
from webhook.controller.run.reconciler import Controller
from webhook.kube import Api

CPU = Shape(requests=(("cpu", 1000), ("pods", 1)))


def nodes(*names: str, cpu: int = 4) -> list[Node]:
    return [Node(name=n, allocatable={"cpu": cpu * 1000, "pods": 110}) for n in names]


def victim(key: str, priority: int, *on: str, gang: bool = True) -> Victim:
    return Victim(key, gang, priority, tuple((n, (("cpu", 1000), ("pods", 1))) for n in on))


def full(victims: list[Victim], cluster: list[Node]) -> dict[str, dict[str, int]]:
    free = {n.name: dict(n.allocatable) for n in cluster}
    for v in victims:
        for node_name, units in v.holds:
            for resource, amount in units:
                free[node_name][resource] -= amount
    return free


GANG = [Member(f"m{i}", CPU) for i in range(4)]


@pytest.mark.parametrize(
    ("case", "victims", "priority", "chosen"),
    [
        (
            "one whole gang of lower priority makes room: exactly it",
            [victim("a/low", 0, "n1", "n1", "n1", "n1"), victim("a/mid", 50, "n2", "n2", "n2", "n2")],
            100,
            ["a/low"],
        ),
        (
            "never part of two gangs: the one that suffices alone",
            [victim("a/low2", 0, "n1", "n1", "n2", "n2"), victim("a/low", 0, "n1", "n1", "n1", "n1")],
            100,
            ["a/low"],
        ),
        (
            "lowest priority first",
            [victim("a/mid", 50, "n1", "n1", "n1", "n1"), victim("a/low", 10, "n2", "n2", "n2", "n2")],
            100,
            ["a/low"],
        ),
        (
            "equal or higher priority is never a victim",
            [victim("a/same", 100, "n1", "n1", "n1", "n1"), victim("a/high", 200, "n2", "n2", "n2", "n2")],
            100,
            None,
        ),
        (
            "lone pods and a gang together when neither alone suffices",
            [
                victim("a/p1", 0, "n1", gang=False),
                victim("a/p2", 0, "n1", gang=False),
                victim("a/small", 5, "n1", "n1"),
                victim("a/other", 90, "n2", "n2", "n2", "n2"),
            ],
            100,
            ["a/p1", "a/p2", "a/small"],
        ),
    ],
)
def test_choose_victims(case: str, victims: list[Victim], priority: int, chosen: list[str] | None) -> None:
    cluster = nodes("n1", "n2")
    found = choose_victims(GANG, cluster, full(victims, cluster), victims, priority, ["n1", "n2"])
    assert (sorted(v.key for v in found) if found is not None else None) == chosen, case


def test_a_victim_the_gang_fits_without_is_given_back() -> None:
    """The lone pod (lowest priority) is taken first, then the gang; with the gang gone the pod's room
    is not needed, so the pod is given back."""
    cluster = nodes("n1", "n2", cpu=8)
    high = [victim("a/high", 200, *["n1"] * 3, *["n2"] * 8)]
    victims = [victim("a/p1", 0, "n1", gang=False), victim("a/big", 1, "n1", "n1", "n1", "n1")]
    found = choose_victims(GANG, cluster, full(victims + high, cluster), victims + high, 100, ["n1", "n2"])
    assert found is not None and [v.key for v in found] == ["a/big"]


def test_of_victims_alike_the_newest_goes_whichever_node_it_is_on() -> None:
    """The least work lost: of lowest-priority one-pod gangs, the one released last, though a node of
    the others sorts first (kube-scheduler: the latest start among the fewest victims)."""
    cluster = nodes("n1", "n2", cpu=1)
    older = replace(victim("a/early", 0, "n1"), released=1_000.0)
    newer = replace(victim("a/late", 0, "n2"), released=2_000.0)
    unknown = victim("a/pod", 0, "n2", gang=False)  # started when, not known: after those known
    one = [Member("m0", CPU)]
    for victims in ([older, newer, unknown], [unknown, newer, older]):
        found = choose_victims(one, cluster, full([older, newer], cluster), victims, 100, ["n1", "n2"])
        assert found is not None and [v.key for v in found] == ["a/late"]


def test_a_protected_victim_is_skipped_for_the_next() -> None:
    cluster = nodes("n1", "n2")
    victims = [victim("a/guarded", 0, "n1", "n1", "n1", "n1"), victim("a/open", 10, "n2", "n2", "n2", "n2")]
    found = choose_victims(
        GANG, cluster, full(victims, cluster), victims, 100, ["n1", "n2"], protected=lambda v: v.key == "a/guarded"
    )
    assert found is not None and [v.key for v in found] == ["a/open"]


@pytest.mark.parametrize(
    ("allowed", "labels", "blocks"),
    [
        (0, [{"app": "db"}], True),
        (1, [{"app": "db"}, {"app": "db"}], True),  # the whole gang goes: two disruptions, one allowed
        (2, [{"app": "db"}, {"app": "db"}], False),
        (0, [{"app": "web"}], False),  # not selected
    ],
)
def test_a_disruption_budget_blocks_a_victim_it_cannot_afford(
    allowed: int, labels: list[dict[str, str]], blocks: bool
) -> None:
    budget = {"spec": {"selector": {"matchLabels": {"app": "db"}}}, "status": {"disruptionsAllowed": allowed}}
    assert budget_blocks([budget], labels) is blocks


# --- the controller -----------------------------------------------------------------------------
@pytest.fixture
def server(apiserver: TestApiServer) -> TestApiServer:
    return apiserver


def job_of_priority(store: Store, name: str, priority: int, namespace: str = "team-a", **pod: Any) -> dict[str, Any]:
    spec = b.pod_spec(b.container("2", "1Gi"), priority=priority, **pod)
    job = b.job(name, parallelism=4, spec=spec)
    job["metadata"]["namespace"] = namespace
    created = store.create("batch/v1", "jobs", namespace, job)
    add_job_pods(store, created)
    return created


def running_low_gang(
    server: TestApiServer, api: Api, name: str = "low", priority: int = 0, lender: int | None = None
) -> Controller:
    """A gang of 4 running on one node, past the grace after its release; `lender`: one of its pods at
    that priority instead."""
    server.store.create("v1", "nodes", "", node("worker1", cpu="8"))
    job_of_priority(server.store, name, priority)
    if lender is not None:
        with_one_pod_at(server.store, name, lender)
    clock = Clock()
    controller = Controller(api, recorder=ListRecorder(), clock=clock)
    controller.reconcile_once()
    assert default_scheduler(server.store) == 4
    controller.reconcile_once()
    clock.advance(120)  # past the grace after its release
    return controller


def test_a_high_priority_gang_preempts_exactly_one_whole_lower_gang(server: TestApiServer, api: Api) -> None:
    controller = running_low_gang(server, api)
    job_of_priority(server.store, "high", 1000)
    decision = controller.reconcile_once()["team-a/job-high"]
    assert decision.state == "WaitingForCapacity"
    assert "preempting gang team-a/job-low (priority 0)" in decision.message
    low = server.store.get("batch/v1", "jobs", "team-a", "low")
    assert low["spec"]["suspend"] is True  # requeued whole: no pod of it evicted alone, no failure counted
    assert gang_status(server.store, "job-low")["attempts"] == 1
    assert events(controller, "GangPreempting") and events(controller, "GangPreempted")
    # the Job controller removes the suspended Job's pods; the high gang is released whole
    for pod in pods(server.store):
        if pod["metadata"]["labels"].get("gangkeeper.io/group") == "job-low":
            server.store.delete("v1", "pods", "team-a", pod["metadata"]["name"])
    assert controller.reconcile_once()["team-a/job-high"].state == "Release"


def test_preemption_policy_never_waits(server: TestApiServer, api: Api) -> None:
    controller = running_low_gang(server, api)
    job_of_priority(server.store, "polite", 1000, preemptionPolicy="Never")
    decision = controller.reconcile_once()["team-a/job-polite"]
    assert decision.state == "WaitingForCapacity" and "preemptionPolicy Never" in decision.message
    assert not server.store.get("batch/v1", "jobs", "team-a", "low")["spec"].get("suspend")


def test_a_victim_a_disruption_budget_protects_is_skipped(server: TestApiServer, api: Api) -> None:
    controller = running_low_gang(server, api)
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep-low", "namespace": "team-a"},
        "spec": {"selector": {"matchLabels": {"batch.kubernetes.io/job-name": "low"}}, "minAvailable": 4},
        "status": {"disruptionsAllowed": 0},
    }
    server.store.create("policy/v1", "poddisruptionbudgets", "team-a", budget)
    job_of_priority(server.store, "high", 1000)
    decision = controller.reconcile_once()["team-a/job-high"]
    assert "PodDisruptionBudget" in decision.message, decision.message
    assert not server.store.get("batch/v1", "jobs", "team-a", "low")["spec"].get("suspend")


@pytest.mark.parametrize(("min_runtime", "ran", "victim"), [(60.0, 30, False), (60.0, 61, True), (0.25, 1, True)])
def test_a_gang_released_within_its_min_runtime_is_nobodys_victim(
    server: TestApiServer, api: Api, min_runtime: float, ran: int, victim: bool
) -> None:
    """--min-runtime-seconds (60 by default; the replay compresses it with the trace, as it does the
    head-of-line bound)."""
    server.store.create("v1", "nodes", "", node("worker1", cpu="8"))
    job_of_priority(server.store, "low", 0)
    clock = Clock()
    controller = Controller(api, recorder=ListRecorder(), clock=clock, min_runtime_seconds=min_runtime)
    controller.reconcile_once()
    default_scheduler(server.store)
    clock.advance(ran)
    job_of_priority(server.store, "high", 1000)
    decision = controller.reconcile_once()["team-a/job-high"]
    assert ("no whole lower-priority gangs" in decision.message) is not victim, decision.message
    assert bool(server.store.get("batch/v1", "jobs", "team-a", "low")["spec"].get("suspend")) is victim


def test_a_victim_in_another_namespace_is_not_named(server: TestApiServer, api: Api) -> None:
    controller = running_low_gang(server, api)
    server.store.create("v1", "namespaces", "", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "vip"}})
    job_of_priority(server.store, "high", 1000, namespace="vip")
    decision = controller.reconcile_once()["vip/job-high"]
    assert "preempting a gang of priority 0 in another namespace" in decision.message
    assert "team-a" not in decision.message
    preempted = events(controller, "GangPreempted")
    assert preempted and "vip" not in preempted[0]["message"]


def test_the_controllers_trimmed_pod_keeps_the_preemption_policy() -> None:
    """The informer keeps only what the controller reads: a PriorityClass's preemptionPolicy Never must
    survive it (the real tier caught it dropped)."""
    from webhook.controller.decide.pods import PodView
    from webhook.controller.observe.informer import trim_pod

    pod = b.pod("p", labels={"gangkeeper.io/group": "job-train"}, spec=b.pod_spec(preemptionPolicy="Never"))
    assert PodView.from_api(trim_pod(pod)).preempts is False


def test_a_workload_naming_a_missing_priority_class_is_warned_about_at_apply() -> None:
    from tests import builders as b
    from webhook.admission.decide import admit
    from webhook.backends import make

    job = b.job(spec=b.pod_spec(b.container("1", "1Gi"), priorityClassName="batch-hihg"))
    outcome = admit(job, "CREATE", make("gate"), "team-a", priority_classes=frozenset({"batch-high"}))
    assert outcome.allowed
    assert any("'batch-hihg': no such PriorityClass" in w for w in outcome.warnings), outcome.warnings
    outcome = admit(job, "CREATE", make("gate"), "team-a", priority_classes=frozenset({"batch-hihg"}))
    assert not any("PriorityClass" in w for w in outcome.warnings)


def test_a_gang_of_whole_nodes_takes_every_lone_pod_on_as_few_nodes_as_it_needs() -> None:
    """Two 60-CPU pods need two whole nodes, each held by 30 lone pods: 60 victims, more than any fixed
    short list of candidates ordered by name would hold, all on the two nodes the gang takes."""
    cluster = nodes(*(f"n{i}" for i in range(4)), cpu=60)
    victims = [victim(f"a/p-{i:02d}-{n}", 0, f"n{n}", gang=False) for n in range(4) for i in range(30)]
    free = full(victims, cluster)  # half of every node is free: none holds a 60-CPU pod
    big = [Member(f"big-{i}", Shape(requests=(("cpu", 60_000), ("pods", 1)))) for i in range(2)]
    found = choose_victims(big, cluster, free, victims, 100, [f"n{i}" for i in range(4)])
    assert found is not None and len(found) == 60
    assert len({v.holds[0][0] for v in found}) == 2


def test_a_guarded_gang_on_the_first_node_sends_the_gang_to_the_unguarded_one(server: TestApiServer, api: Api) -> None:
    """Two low gangs fill two nodes; a PodDisruptionBudget guards the one on the node a placement
    looks at first. The high gang preempts the other, not nobody (found on the real tier: only the
    first placement's nodes were searched for victims, and the high gang waited for ever)."""
    for name in ("worker1", "worker2"):
        server.store.create("v1", "nodes", "", node(name, cpu="8"))
    clock = Clock()
    controller = Controller(api, recorder=ListRecorder(), clock=clock)
    for name in ("low-a", "low-b"):
        job_of_priority(server.store, name, 0)
        controller.reconcile_once()
        default_scheduler(server.store)
    on_first = {
        p["metadata"]["labels"]["batch.kubernetes.io/job-name"]
        for p in pods(server.store)
        if p["spec"].get("nodeName") == "worker1"
    }
    assert len(on_first) == 1
    guarded = on_first.pop()
    other = "low-b" if guarded == "low-a" else "low-a"
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep", "namespace": "team-a"},
        "spec": {"selector": {"matchLabels": {"batch.kubernetes.io/job-name": guarded}}, "minAvailable": 4},
        "status": {"disruptionsAllowed": 0},
    }
    server.store.create("policy/v1", "poddisruptionbudgets", "team-a", budget)
    clock.advance(120)
    job_of_priority(server.store, "high", 1000)
    decision = controller.reconcile_once()["team-a/job-high"]
    assert f"preempting gang team-a/job-{other}" in decision.message, decision.message
    assert server.store.get("batch/v1", "jobs", "team-a", other)["spec"]["suspend"] is True
    assert not server.store.get("batch/v1", "jobs", "team-a", guarded)["spec"].get("suspend")


def with_one_pod_at(store: Store, job: str, priority: int) -> None:
    """One member of the Job's gang created at another priority (its template names another
    PriorityClass, as a Kubeflow role or an LWS leader may), before the controller sees it."""
    pod = next(p for p in pods(store) if p["metadata"]["labels"].get("gangkeeper.io/group") == f"job-{job}")
    store.delete("v1", "pods", "team-a", pod["metadata"]["name"])
    pod["metadata"] = {k: v for k, v in pod["metadata"].items() if k not in ("uid", "resourceVersion")}
    pod["metadata"]["name"] += "-other"
    pod["spec"]["priority"] = priority
    store.create("v1", "pods", "team-a", pod)


def test_one_pod_in_a_high_priority_class_lends_its_gang_nothing(server: TestApiServer, api: Api) -> None:
    """A gang's priority is its least important pod's: three priority-0 pods and one of 1000 may not
    preempt a gang of 500 (each pod of it could not)."""
    controller = running_low_gang(server, api, "mid", 500)
    job_of_priority(server.store, "mixed", 0)
    with_one_pod_at(server.store, "mixed", 1000)
    decision = controller.reconcile_once()["team-a/job-mixed"]
    assert decision.state == "WaitingForCapacity" and "preempting" not in decision.message, decision.message
    assert not server.store.get("batch/v1", "jobs", "team-a", "mid")["spec"].get("suspend")


def test_a_mixed_gang_is_preempted_at_its_least_important_pods_priority(server: TestApiServer, api: Api) -> None:
    # one member far above the preemptor: the gang ranks at 0
    controller = running_low_gang(server, api, lender=2000)
    job_of_priority(server.store, "high", 1000)
    decision = controller.reconcile_once()["team-a/job-high"]
    assert "preempting gang team-a/job-low (priority 0)" in decision.message, decision.message


def test_a_gang_of_mixed_priority_classes_is_warned_about_and_its_group_gets_the_lowest() -> None:
    from webhook.admission.decide import admit
    from webhook.backends import make

    lws = b.lws(size=4, scheduler=None)
    template = lws["spec"]["leaderWorkerTemplate"]
    template["leaderTemplate"] = {"spec": {**template["workerTemplate"]["spec"], "priorityClassName": "urgent"}}
    template["workerTemplate"]["spec"]["priorityClassName"] = "batch"
    classes = {"urgent": 1000, "batch": 10, "": 0}
    for backend in ("volcano", "native"):
        outcome = admit(lws, "CREATE", make(backend), "team-a", priority_classes=classes)
        assert outcome.allowed, outcome.message
        assert any("different PriorityClasses (batch, urgent)" in w for w in outcome.warnings), outcome.warnings
        assert "'priorityClassName': 'batch'" in str(outcome.group_objects), backend
        assert "urgent" not in str(outcome.group_objects), backend


IMPOSSIBLE_AFFINITY = {
    "podAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "nowhere"}}, "topologyKey": "kubernetes.io/hostname"}
        ]
    }
}


def test_a_gang_with_constraints_placement_does_not_model_preempts_nothing(server: TestApiServer, api: Api) -> None:
    """kube-scheduler would run its filters without the victims and find the affinity still unmet; the
    gate cannot tell, so it never evicts a running gang for such a gang."""
    controller = running_low_gang(server, api)
    job_of_priority(server.store, "picky", 1000, affinity=IMPOSSIBLE_AFFINITY)
    for _ in range(3):
        decision = controller.reconcile_once()["team-a/job-picky"]
    assert decision.state == "WaitingForCapacity"
    assert "does not model (podAffinity)" in decision.message and "preempts nothing" in decision.message
    assert not server.store.get("batch/v1", "jobs", "team-a", "low")["spec"].get("suspend")


def test_a_victim_is_not_requeued_twice_in_a_row_for_one_preemptor(server: TestApiServer, api: Api) -> None:
    controller = running_low_gang(server, api)
    low = controller.store.record("team-a/job-low")
    low.preempted_by = controller.store.identity("team-a/job-high")  # as its last preemption left it
    job_of_priority(server.store, "high", 1000)
    decision = controller.reconcile_once()["team-a/job-high"]
    assert "gangs it preempted last time are never victims" in decision.message, decision.message
    assert not server.store.get("batch/v1", "jobs", "team-a", "low")["spec"].get("suspend")
    low.preempted_by = None  # another preemptor took it since: victim again
    decision = controller.reconcile_once()["team-a/job-high"]
    assert "preempting gang team-a/job-low" in decision.message, decision.message
