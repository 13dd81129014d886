"""Groups released whole or not at all (decide/whole_groups.py): a RayCluster's multi-host replicas above
its minimum, and one recreated after a node loss, where the release would otherwise take any pods that
fit; the Ray record says which pods make a group (gangs/ray.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.unit.test_decide import CPU, NOW, cluster, member, released
from webhook import offline
from webhook.controller.decide.situation import GangSpec, GangState
from webhook.controller.decide.start import start_decision
from webhook.controller.decide.whole_groups import role_counts
from webhook.gangs import ray
from webhook.gangs.model import WholeGroups

RULE = WholeGroups(ray.REPLICA_LABEL, ray.GROUP_LABEL, (("tpu", 2),))
HEAD = {ray.GROUP_LABEL: "headgroup"}


def host(replica: str, index: int, **changes: Any) -> Any:
    labels = {ray.GROUP_LABEL: "tpu", ray.REPLICA_LABEL: f"tpu-{replica}"}
    return member(f"tpu-{replica}-{index}", labels=labels, **changes)


def running(name: str, node: str, labels: dict[str, str]) -> Any:
    return replace(released(name, 30, node, bound=True), labels=labels)


def test_replicas_above_the_minimum_start_whole_where_the_room_holds_only_part_of_them() -> None:
    """The head and one 2-host replica run (the minimum, 3); the autoscaler adds replicas b and c; room for
    3 more pods: b starts whole and c waits whole, never one of its hosts bound alone."""
    pods = [
        running("head", "n0", HEAD),
        running("tpu-a-0", "n0", {ray.GROUP_LABEL: "tpu", ray.REPLICA_LABEL: "tpu-a"}),
        running("tpu-a-1", "n0", {ray.GROUP_LABEL: "tpu", ray.REPLICA_LABEL: "tpu-a"}),
        host("b", 0),
        host("c", 0),
        host("b", 1),
        host("c", 1),
    ]
    nodes, free = cluster(0, 1, 1, 1)
    decision = start_decision(pods, GangSpec(3, whole_groups=RULE), nodes, free, NOW)
    assert decision.state == GangState.RELEASE
    assert sorted(decision.release) == ["tpu-b-0", "tpu-b-1"]
    # without the rule, what fits goes: one of c's hosts with b's
    flat = start_decision(pods, GangSpec(3), nodes, free, NOW)
    assert len(flat.release) == 3


def test_a_replica_waits_until_all_its_hosts_exist() -> None:
    pods = [running("head", "n0", HEAD), host("b", 0)]
    nodes, free = cluster(4, 4)
    decision = start_decision(pods, GangSpec(1, whole_groups=RULE), nodes, free, NOW)
    assert decision.state != GangState.RELEASE and not decision.release
    decision = start_decision([*pods, host("b", 1)], GangSpec(1, whole_groups=RULE), nodes, free, NOW)
    assert sorted(decision.release) == ["tpu-b-0", "tpu-b-1"]


def test_a_replica_recreated_whole_after_a_node_loss_is_released_whole() -> None:
    """KubeRay deleted replica a (a host's node was lost) and made it again: 2 new gated pods beside the
    running head and replica b, room for one: neither is released alone."""
    pods = [
        running("head", "n0", HEAD),
        running("tpu-b-0", "n0", {ray.GROUP_LABEL: "tpu", ray.REPLICA_LABEL: "tpu-b"}),
        running("tpu-b-1", "n0", {ray.GROUP_LABEL: "tpu", ray.REPLICA_LABEL: "tpu-b"}),
        host("a", 0),
        host("a", 1),
    ]
    nodes, free = cluster(0, 1)
    assert not start_decision(pods, GangSpec(3, whole_groups=RULE), nodes, free, NOW).release
    nodes, free = cluster(0, 1, 1)
    assert sorted(start_decision(pods, GangSpec(3, whole_groups=RULE), nodes, free, NOW).release) == [
        "tpu-a-0",
        "tpu-a-1",
    ]


@given(room=st.lists(st.integers(0, 3), min_size=1, max_size=5), replicas=st.integers(1, 4), hosts=st.integers(2, 3))
def test_no_release_ever_leaves_a_replica_in_part(room: list[int], replicas: int, hosts: int) -> None:
    rule = WholeGroups(ray.REPLICA_LABEL, ray.GROUP_LABEL, (("tpu", hosts),))
    pods = [running("head", "h", HEAD)] + [host(str(r), i) for r in range(replicas) for i in range(hosts)]
    nodes, free = cluster(*room)
    decision = start_decision(pods, GangSpec(1, whole_groups=rule), nodes, free, NOW)
    for r in range(replicas):
        taken = sum(f"tpu-{r}-{i}" in decision.release for i in range(hosts))
        assert taken in (0, hosts), (r, decision.release)


def test_the_ray_record_names_multi_host_groups() -> None:
    cluster_obj = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "rc", "namespace": "team-a", "uid": "u"},
        "spec": {
            "headGroupSpec": {"template": {"spec": {"containers": [{"name": "h", "image": "x"}]}}},
            "workerGroupSpecs": [
                {"groupName": "tpu", "replicas": 2, "numOfHosts": 4, "template": {"spec": {"containers": []}}},
                {"groupName": "cpu", "replicas": 1, "template": {"spec": {"containers": []}}},
            ],
        },
    }
    (gang,) = ray.analyze_cluster(cluster_obj).gangs
    assert gang.min_member == 10
    # two worker groups: two roles, each with its minimum of whole replicas (all desired, autoscaling off)
    assert gang.whole_groups == WholeGroups(ray.REPLICA_LABEL, ray.GROUP_LABEL, (("tpu", 4),), (("tpu", 2), ("cpu", 1)))
    notes = offline.mutate_stream([cluster_obj], "gate", namespace="team-a").notes
    assert any("each tpu replica's 4 pods together or none of them" in note for note in notes), notes


def test_the_real_tiers_watch_tells_a_replica_partly_bound_from_replicas_waiting_whole() -> None:
    """tests/realcluster/partial.py, which fails any real-tier test after which a gang stayed partly bound:
    a replica waiting gated whole beside the running minimum is not partly bound, one bound in part is."""
    from tests.realcluster.partial import GATE, partly_bound

    def pod(name: str, replica: str | None, node: str | None) -> dict[str, Any]:
        labels = {"gangkeeper.io/group": "raycluster-rc"} | ({ray.REPLICA_LABEL: replica} if replica else {})
        spec: dict[str, Any] = {"nodeName": node} if node else {"schedulingGates": [{"name": GATE}]}
        return {"metadata": {"name": name, "namespace": "team-a", "labels": labels}, "spec": spec}

    running_minimum = [pod("head", None, "n0"), pod("a-0", "a", "n1"), pod("a-1", "a", "n2")]
    assert partly_bound([*running_minimum, pod("b-0", "b", None), pod("b-1", "b", None)]) == {}
    found = partly_bound([*running_minimum, pod("b-0", "b", "n3"), pod("b-1", "b", None)])
    assert list(found) == ["team-a/raycluster-rc replica b"]


def test_groups_are_counted_by_state_for_the_gauge() -> None:
    """gangkeeper_gang_groups{mechanism,state}: a replica waiting, one running, one partly bound."""
    from prometheus_client import REGISTRY

    from webhook.controller.act.report import Reporter
    from webhook.controller.decide.whole_groups import group_states
    from webhook.controller.observe.store import GangStore

    minimum = [running("head", "n0", HEAD)]
    pods = [
        *minimum,
        replace(host("a", 0), gated=False, node_name="n1"),
        replace(host("a", 1), gated=False, node_name="n2"),
        replace(host("b", 0), gated=False, node_name="n3"),
        host("b", 1, gated=False),
        host("c", 0),
        host("c", 1),
    ]
    counts = group_states([("native", pods, RULE), ("gate", minimum, None)])
    assert counts == {("native", "running"): 1, ("native", "partly_bound"): 1, ("native", "waiting"): 1}
    reporter = Reporter(None, None, lambda: True, store=GangStore())  # type: ignore[arg-type]
    reporter.publish({}, 0, groups=counts)
    sample = REGISTRY.get_sample_value
    assert sample("gangkeeper_gang_groups", {"mechanism": "native", "state": "partly_bound"}) == 1
    reporter.publish({}, 0, groups={})
    assert sample("gangkeeper_gang_groups", {"mechanism": "native", "state": "partly_bound"}) == 0


def test_explain_shows_the_groups_released_whole_by_state() -> None:
    from webhook.controller.run.explain import group_lines

    pods = [running("head", "n0", HEAD), replace(host("a", 0), gated=False, node_name="n1")]
    pods += [replace(host("a", 1), gated=False, node_name="n2"), host("b", 0), host("b", 1)]
    assert group_lines(GangSpec(3), pods) == []
    assert group_lines(GangSpec(3, whole_groups=RULE), pods) == [
        f"  groups released whole (tpu 2 pods each, by {ray.REPLICA_LABEL}): 1 waiting, 1 running, 0 partly bound"
    ]


# Roles (issue 100): a RayCluster's worker groups prefill (minReplicas 2 of 4) and decode (1 of 2), each
# replica 2 hosts; the gang's minimum is the head and 2 prefill and 1 decode replicas, every one whole
ROLES = WholeGroups(
    ray.REPLICA_LABEL, ray.GROUP_LABEL, (("prefill", 2), ("decode", 2)), (("prefill", 2), ("decode", 1))
)


def in_role(role: str, replica: str, index: int, **changes: Any) -> Any:
    labels = {ray.GROUP_LABEL: role, ray.REPLICA_LABEL: f"{role}-{replica}"}
    return member(f"{role}-{replica}-{index}", labels=labels, **changes)


def serving(**changes: Any) -> list[Any]:
    """KubeRay's creation order: the head, the 4 prefill replicas, then the 2 decode replicas."""
    pods = [member("head", labels=HEAD)]
    pods += [in_role("prefill", r, i, **changes) for r in "abcd" for i in range(2)]
    pods += [in_role("decode", r, i, **changes) for r in "ab" for i in range(2)]
    return pods


def test_every_roles_minimum_starts_together_where_the_room_holds_exactly_the_minimums() -> None:
    """Room for 7 pods: the head, 2 prefill replicas and 1 decode replica start, each whole; the flat
    release of any 7 pods that fit (the trap) takes 3 prefill replicas and no decode replica."""
    nodes, free = cluster(1, 1, 1, 1, 1, 1, 1)
    decision = start_decision(serving(), GangSpec(7, whole_groups=ROLES), nodes, free, NOW)
    assert decision.state == GangState.RELEASE
    assert sorted(decision.release) == [
        "decode-a-0", "decode-a-1", "head", "prefill-a-0", "prefill-a-1", "prefill-b-0", "prefill-b-1",
    ]  # fmt: skip
    flat = replace(ROLES, minimums=())
    trapped = start_decision(serving(), GangSpec(7, whole_groups=flat), nodes, free, NOW)
    assert not [name for name in trapped.release if name.startswith("decode")]
    assert len(trapped.release) == 7


def test_nothing_starts_while_one_roles_minimum_does_not_fit_and_the_message_names_it() -> None:
    nodes, free = cluster(1, 1, 1, 1, 1, 1)  # room for 6: the head and 5 workers, not 3 whole replicas
    decision = start_decision(serving(), GangSpec(7, whole_groups=ROLES), nodes, free, NOW)
    assert decision.state == GangState.WAITING_FOR_CAPACITY and not decision.release
    assert "every role's minimum binds at once" in decision.message, decision.message


def test_a_group_above_its_roles_minimum_never_takes_the_room_another_roles_minimum_needs() -> None:
    """Prefill hosts ask 2 CPUs, decode hosts 1: one placement of all 13 pods places the biggest shape
    first, and prefill replica c would take a node the decode replica needs (no role's minimum whole:
    nothing starts). Placed in turn, the minimums bind, each whole."""
    pods = [member("head", labels=HEAD)]
    pods += [
        in_role("prefill", r, i, shape=replace(CPU, requests=(("cpu", 2000), ("pods", 1))))
        for r in "abcd"
        for i in range(2)
    ]
    pods += [in_role("decode", r, i) for r in "ab" for i in range(2)]
    nodes, free = cluster(2, 2, 2, 2, 2, 1)  # 11 CPUs: exactly the minimums, if prefill takes only 4 nodes
    decision = start_decision(pods, GangSpec(7, whole_groups=ROLES), nodes, free, NOW)
    assert decision.state == GangState.RELEASE
    assert sorted(decision.release) == [
        "decode-a-0", "decode-a-1", "head", "prefill-a-0", "prefill-a-1", "prefill-b-0", "prefill-b-1",
    ]  # fmt: skip


def test_groups_above_the_minimums_start_whole_once_the_minimums_run() -> None:
    """The minimums run; room for 3 more pods: one further replica starts whole, never 3 hosts."""
    pods = serving()
    ran = {"head", "prefill-a-0", "prefill-a-1", "prefill-b-0", "prefill-b-1", "decode-a-0", "decode-a-1"}
    pods = [replace(running(p.name, "n0", dict(p.labels))) if p.name in ran else p for p in pods]
    nodes, free = cluster(0, 1, 1, 1)
    decision = start_decision(pods, GangSpec(7, whole_groups=ROLES), nodes, free, NOW)
    assert decision.state == GangState.RELEASE
    assert sorted(decision.release) == ["prefill-c-0", "prefill-c-1"]


def test_a_role_below_its_minimum_is_made_whole_before_any_group_above_another_roles() -> None:
    """The decode replica was lost and KubeRay made it again: room for 2 pods goes to it, not to the
    prefill replicas above their minimum that were created first."""
    pods = serving()
    ran = {"head", "prefill-a-0", "prefill-a-1", "prefill-b-0", "prefill-b-1"}
    pods = [running(p.name, "n0", dict(p.labels)) if p.name in ran else p for p in pods]
    nodes, free = cluster(0, 1, 1)
    decision = start_decision(pods, GangSpec(7, whole_groups=ROLES), nodes, free, NOW)
    assert sorted(decision.release) == ["decode-a-0", "decode-a-1"]


def test_explain_and_mutate_show_each_roles_minimum() -> None:
    from webhook.controller.run.explain import group_lines

    pods = serving()
    ran = {"head", "prefill-a-0", "prefill-a-1", "prefill-b-0", "prefill-b-1", "decode-a-0"}
    pods = [running(p.name, "n0", dict(p.labels)) if p.name in ran else p for p in pods]
    lines = group_lines(GangSpec(7, whole_groups=ROLES), pods)
    assert "  role prefill: minimum 2 whole groups, 4 present, 2 bound whole" in lines, lines
    assert "  role decode: minimum 1 whole groups, 2 present, 0 bound whole (below its minimum)" in lines, lines
    worker = {"template": {"spec": {"containers": [{"name": "w", "image": "x"}]}}, "numOfHosts": 2}
    cluster_obj = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "rc", "namespace": "team-a", "uid": "u"},
        "spec": {
            "enableInTreeAutoscaling": True,
            "headGroupSpec": {"template": {"spec": {"containers": [{"name": "h", "image": "x"}]}}},
            "workerGroupSpecs": [
                {"groupName": "prefill", "replicas": 4, "minReplicas": 2, "maxReplicas": 4, **worker},
                {"groupName": "decode", "replicas": 2, "minReplicas": 1, "maxReplicas": 2, **worker},
            ],
        },
    }
    (gang,) = ray.analyze_cluster(cluster_obj).gangs
    assert gang.min_member == 7 and gang.whole_groups is not None
    assert gang.whole_groups.minimums == (("prefill", 2), ("decode", 1))
    notes = offline.mutate_stream([cluster_obj], "gate", namespace="team-a").notes
    assert any("every role's minimum fits at once (prefill 2 whole, decode 1 whole)" in note for note in notes), notes


def test_the_gang_object_shows_each_role_and_falls_below_its_minimum_when_a_role_does() -> None:
    """The Gang's status.roles (valid for the Gang CRD) and its MinimumAvailable condition: 9 pods run
    (above the minimum of 7) but the decode role has no whole replica bound: below its minimum, both ways."""
    from tests.schemas import validate
    from webhook.controller.observe.books import Books, desired_object, desired_status

    pods = serving()
    ran = {"head", "prefill-a-0", "prefill-a-1", "prefill-b-0", "prefill-b-1", "prefill-c-0", "prefill-c-1"}
    ran |= {"prefill-d-0", "decode-a-0"}
    pods = [running(p.name, "n0", dict(p.labels)) if p.name in ran else p for p in pods]
    roles = role_counts(pods, ROLES)
    status = desired_status("Running", "m", (13, 9, 4), 7, 0, Books(ran_with=7), {}, NOW, roles)
    assert status["roles"] == [
        {"name": "prefill", "minimum": 2, "present": 4, "boundWhole": 3},
        {"name": "decode", "minimum": 1, "present": 2, "boundWhole": 0},
    ]
    condition = next(c for c in status["conditions"] if c["type"] == "MinimumAvailable")
    assert (condition["status"], condition["reason"]) == ("False", "BelowMinimum")
    assert "decode 0 of 1" in condition["message"]
    written = {key: value for key, value in status.items() if value is not None}  # a merge patch: None deletes
    validate({**desired_object("team-a", "raycluster-rc", "gate", 7, None), "status": written})
    ran |= {"decode-a-1"}
    pods = [running(p.name, "n0", dict(p.labels)) if p.name in ran else p for p in pods]
    status = desired_status("Running", "m", (13, 10, 3), 7, 0, Books(ran_with=7), status, NOW, role_counts(pods, ROLES))
    condition = next(c for c in status["conditions"] if c["type"] == "MinimumAvailable")
    assert (condition["status"], condition["reason"]) == ("True", "MinimumRunning")
