"""The steering rule (webhook/controller/run/steer.py) on its own: when a native gang whose pods share a
claim is pinned, when it waits, and when it is let go as it is. The placement it asks for and the pods it
writes are stood in for here (the real tier runs it whole: tests/real/test_real_dra.py -k rack_link)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any

import pytest

from webhook.controller.decide.device_types import ClaimDemand
from webhook.controller.decide.pods import PodView
from webhook.controller.decide.situation import Decision, GangSpec, GangState
from webhook.controller.observe.gangview import GangView
from webhook.controller.observe.resolve import Resolved
from webhook.controller.observe.store import GangStore
from webhook.controller.run import steer
from webhook.controller.run.steer import Steering
from webhook.controller.run.workqueue import GangQueue

NOW = dt.datetime(2026, 12, 2, 12, 0, tzinfo=dt.UTC)
REACHES = [frozenset({"a1", "a2"}), frozenset({"b1", "b2"})]


@dataclass
class Written:
    calls: list[tuple[list[str], dict[str, str] | None, str]] = field(default_factory=list)

    def steer(self, pods: list[tuple[PodView, Any]], pins: dict[str, str] | None, why: str) -> int:
        self.calls.append(([view.name for view, _ in pods], pins, why))
        return len(pods)


@dataclass
class Placing:
    decision: Decision
    placed: int = 0

    def decide_for(self, *_: Any) -> Decision:
        self.placed += 1
        return self.decision


@dataclass
class Snap:
    free: dict[str, dict[str, int]] = field(default_factory=dict)
    index: Any = None


def gang(pods: int, age_seconds: float, gated: int | None = None) -> GangView:
    made = (NOW - dt.timedelta(seconds=age_seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
    views, raws = [], []
    for i in range(pods):
        gates = [{"name": "gangkeeper.io/gang-gate"}] if gated is None or i < gated else []
        raw = {
            "metadata": {"name": f"p{i}", "namespace": "team-a", "uid": f"u{i}", "creationTimestamp": made},
            "spec": {"schedulingGates": gates, "containers": [{"resources": {"requests": {"cpu": "1"}}}]},
        }
        views.append(PodView.from_api(raw, group="train"))
        raws.append(raw)
    return GangView("team-a", "job-train", views, raws)


def turn(view: GangView, decision: Decision, reaches: list[frozenset[str]] | None = REACHES) -> tuple[Written, float]:
    written, work = Written(), GangQueue()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(steer, "shared_reaches", lambda index, g: reaches)
        resolved = Resolved(GangSpec(min_member=4, timeout_seconds=300), None, None)
        Steering(Placing(decision), written, work).turn(view, resolved, Snap(), NOW)  # type: ignore[arg-type]
    due = work._due.get(view.key, float("inf"))
    return written, due


def test_a_gang_placed_whole_is_pinned_where_the_model_placed_it() -> None:
    pins = {"p0": "b1", "p1": "b1", "p2": "b2", "p3": "b2"}
    written, _ = turn(gang(4, 5), Decision(GangState.RELEASE, "", release=pins))
    ((names, said_pins, why),) = written.calls
    assert names == ["p0", "p1", "p2", "p3"] and said_pins == pins and "b1, b2" in why


def test_a_gang_no_domain_holds_waits_then_is_let_go_as_it_is_after_its_timeout() -> None:
    waiting = Decision(GangState.WAITING_FOR_CAPACITY, "room for 2 of 4")
    written, due = turn(gang(4, 5), waiting)
    assert written.calls == [] and due == NOW.timestamp() + steer.STEER_RETRY_SECONDS
    written, _ = turn(gang(4, 301), waiting)
    ((_, pins, why),) = written.calls
    assert pins is None and "no domain held it whole for 300s (room for 2 of 4)" in why


def test_a_gang_missing_members_waits_for_them_and_one_with_no_single_shared_claim_is_let_go() -> None:
    written, due = turn(gang(3, 5), Decision(GangState.RELEASE, "", release={"p0": "b1"}))
    assert written.calls == [] and due == pytest.approx(NOW.timestamp() - 5 + 300, abs=1)
    written, _ = turn(gang(4, 5), Decision(GangState.RELEASE, ""), reaches=None)
    ((_, pins, why),) = written.calls
    assert pins is None and "no one claim" in why


def test_only_the_gated_members_are_written_and_a_gang_with_none_costs_nothing() -> None:
    pins = {"p0": "b1", "p1": "b2"}
    written, _ = turn(gang(4, 5, gated=2), Decision(GangState.RELEASE, "", release=pins))
    assert [call[0] for call in written.calls] == [["p0", "p1"]]
    written, _ = turn(gang(4, 5, gated=0), Decision(GangState.RELEASE, "", release=pins))
    assert written.calls == []


def test_a_pass_places_at_most_its_cap_of_gangs_for_steering_and_the_rest_wait_for_the_next() -> None:
    """A tenant's many waiting gangs cost one pass MAX_STEERS_PER_PASS placements, not one each."""
    placing, work = Placing(Decision(GangState.WAITING_FOR_CAPACITY, "room for 2 of 4")), GangQueue()
    steering = Steering(placing, Written(), work)  # type: ignore[arg-type]
    resolved = Resolved(GangSpec(min_member=4, timeout_seconds=300), None, None)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(steer, "shared_reaches", lambda index, g: REACHES)
        for _ in range(steer.MAX_STEERS_PER_PASS + 3):
            steering.turn(gang(4, 5), resolved, Snap(), NOW, this_pass=7)  # type: ignore[arg-type]
        assert placing.placed == steer.MAX_STEERS_PER_PASS
        steering.turn(gang(4, 5), resolved, Snap(), NOW, this_pass=8)  # type: ignore[arg-type]
        assert placing.placed == steer.MAX_STEERS_PER_PASS + 1


@dataclass
class Holders:
    made: list[tuple[str, str, str]] = field(default_factory=list)  # (pod, claim, node)
    deleted: list[str] = field(default_factory=list)
    earlier: str | None = None  # a holder an earlier start of the gang left, in the index under this key

    def hold(self, member: PodView, raw: Any, gang: str, claim: str, node: str) -> tuple[str, str]:
        self.made.append((member.name, claim, node))
        return "claimholder-x", "uid-x"

    def let_go(self, namespace: str, holder: tuple[str, str]) -> bool:
        self.deleted.append(holder[0])
        return True

    def left_behind(self, namespace: str, gang: str, exists: Any) -> tuple[str, str] | None:
        return ("claimholder-x", "uid-x") if self.earlier is not None and exists(self.earlier) else None


def allocate_first(
    view: GangView,
    decision: Decision,
    allocated: bool,
    holders: Holders,
    store: GangStore,
    placing: Placing | None = None,
) -> Written:
    written, work = Written(), GangQueue()
    claim = ClaimDemand("claim team-a/fabric", (), shared=True, allocated=allocated)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(steer, "shared_reaches", lambda index, g: REACHES)
        patch.setattr(steer, "the_shared_claim", lambda index, g: claim)
        resolved = Resolved(GangSpec(min_member=4, timeout_seconds=300), None, None)
        steering = Steering(placing or Placing(decision), written, work, holders, store)  # type: ignore[arg-type]
        snap = Snap(index=SimpleNamespace(pods={holders.earlier: None} if holders.earlier else {}))
        steering.turn(view, resolved, snap, NOW, allocate_first=True)  # type: ignore[arg-type]
    return written


def test_a_claim_its_scheduler_cannot_allocate_at_permit_is_held_first_then_the_gang_is_pinned() -> None:
    """Coscheduling (backends: shared_claims_allocated_first): while the shared claim is not allocated a
    holder pod is made once, pinned to a node of the placement, and no gate is lifted; once it is, the
    gang is pinned and lifted; once every pod is bound, the holder is deleted."""
    pins = {"p0": "b1", "p1": "b1", "p2": "b2", "p3": "b2"}
    release = Decision(GangState.RELEASE, "", release=pins)
    holders, store, placing = Holders(), GangStore(), Placing(release)
    for _ in range(3):
        written = allocate_first(gang(4, 5), release, allocated=False, holders=holders, store=store, placing=placing)
        assert written.calls == []
    assert holders.made == [("p0", "fabric", "b1")]
    assert placing.placed == 1  # placed once: while the holder waits, not placed again
    written = allocate_first(gang(4, 5), release, allocated=True, holders=holders, store=store)
    assert [call[1] for call in written.calls] == [pins] and holders.deleted == []
    bound = gang(4, 5, gated=0)
    bound = GangView(bound.namespace, bound.name, [replace(v, node_name="b1") for v in bound.pods], bound.raw)
    allocate_first(bound, release, allocated=True, holders=holders, store=store)
    assert holders.deleted == ["claimholder-x"] and store.record(bound.key).claim_holder is None


def test_a_held_claim_never_allocated_lets_the_gang_go_pinned_at_its_timeout() -> None:
    pins = {"p0": "b1", "p1": "b1", "p2": "b2", "p3": "b2"}
    holders = Holders()
    written = allocate_first(gang(4, 301), Decision(GangState.RELEASE, "", release=pins), False, holders, GangStore())
    assert [call[1] for call in written.calls] == [pins] and holders.made == []


def test_a_holder_an_earlier_start_left_is_deleted_once_the_gang_is_bound_again() -> None:
    """A gang requeued whole while its holder held the claim comes back with a new record that names no
    holder: the one left (in the index, owned by the gang's Gang) is deleted once the gang is bound, and
    nothing is deleted while a pod still waits or when the index has no such pod."""
    release = Decision(GangState.RELEASE, "", release={})
    bound = gang(4, 5, gated=0)
    bound = GangView(bound.namespace, bound.name, [replace(v, node_name="b1") for v in bound.pods], bound.raw)
    waiting = GangView(bound.namespace, bound.name, [*bound.pods[:3], replace(bound.pods[3], node_name="")], bound.raw)
    holders = Holders(earlier="team-a/claimholder-x")
    allocate_first(waiting, release, allocated=True, holders=holders, store=GangStore())
    assert holders.deleted == []
    allocate_first(bound, release, allocated=True, holders=Holders(), store=GangStore())
    allocate_first(bound, release, allocated=True, holders=holders, store=GangStore())
    assert holders.deleted == ["claimholder-x"]


def replicas_gang(age_seconds: float) -> GangView:
    """A RayCluster's head and replica a running, replicas b and c (2 hosts each) held by gangkeeper's gate."""
    from webhook.gangs import ray

    made = (NOW - dt.timedelta(seconds=age_seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
    views, raws = [], []
    for name, replica, bound in [
        ("head", None, True), ("a-0", "a", True), ("a-1", "a", True),
        ("b-0", "b", False), ("b-1", "b", False), ("c-0", "c", False), ("c-1", "c", False),
    ]:  # fmt: skip
        labels = {ray.GROUP_LABEL: "tpu" if replica else "headgroup"} | (
            {ray.REPLICA_LABEL: replica} if replica else {}
        )
        spec: dict[str, Any] = {"containers": [{"resources": {"requests": {"cpu": "1"}}}]}
        spec |= {"nodeName": "n0"} if bound else {"schedulingGates": [{"name": "gangkeeper.io/gang-gate"}]}
        meta = {"name": name, "namespace": "team-a", "uid": name, "creationTimestamp": made, "labels": labels}
        raw = {"metadata": meta, "spec": spec}
        views.append(PodView.from_api(raw, group="train"))
        raws.append(raw)
    return GangView("team-a", "raycluster-slices", views, raws)


def test_groups_useful_only_whole_are_handed_over_a_whole_group_at_a_time_and_the_rest_stay_held() -> None:
    """Native binds a gang's pods above its minimum one by one: the model's release (replica b whole,
    pinned) is lifted, replica c stays held and is looked at again, and it is never let go unplaced,
    however long it waits."""
    from webhook.gangs import ray
    from webhook.gangs.model import WholeGroups

    rule = WholeGroups(ray.REPLICA_LABEL, ray.GROUP_LABEL, (("tpu", 2),))
    resolved = Resolved(GangSpec(min_member=3, timeout_seconds=300, whole_groups=rule), None, None)

    def hand_over(decision: Decision, age: float, at_once: bool = False) -> tuple[Written, float]:
        written, work = Written(), GangQueue()
        view = replicas_gang(age)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(steer, "shared_reaches", lambda index, g: None)  # no claim shared
            steering = Steering(Placing(decision), written, work)  # type: ignore[arg-type]
            steering.turn(view, resolved, Snap(), NOW, all_at_once=at_once)  # type: ignore[arg-type]
        return written, work._due.get(view.key, float("inf"))

    pins = {"b-0": "n1", "b-1": "n2"}
    written, due = hand_over(Decision(GangState.RELEASE, "releasing 2 pods", release=pins), 5)
    ((names, said_pins, why),) = written.calls
    assert names == ["b-0", "b-1"] and said_pins == pins and "useful only whole" in why
    assert due < NOW.timestamp() + 2  # replica c: looked at again soon
    # coscheduling refuses a group while any of its pods is gated: b waits with c, handed over with it
    written, _ = hand_over(Decision(GangState.RELEASE, "releasing 2 pods", release=pins), 5, at_once=True)
    assert written.calls == []
    every = pins | {"c-0": "n3", "c-1": "n4"}
    written, _ = hand_over(Decision(GangState.RELEASE, "releasing 4 pods", release=every), 5, at_once=True)
    assert [names for names, _, _ in written.calls] == [["b-0", "b-1", "c-0", "c-1"]]
    for age in (5, 3600):  # no room: held, never let go as it is
        written, due = hand_over(Decision(GangState.WAITING_FOR_CAPACITY, "2 of 4 fit"), age)
        assert written.calls == [] and due == NOW.timestamp() + steer.STEER_RETRY_SECONDS


def test_native_and_coscheduling_hold_a_multi_host_replicas_pods_and_no_other() -> None:
    """A multi-host replica's hosts are held (handed over whole); a RayCluster's head, a StatefulSet's and
    a Deployment's pods (held, a 1,000-pod set started in 106 s against 52 s on 5,000 nodes), a Job's
    pods and templates are not."""
    from webhook.backends import make
    from webhook.backends.base import Target
    from webhook.gangs import apps, batch, ray

    cases = [
        (ray.cluster_identity("slices"), {ray.REPLICA_LABEL: "slices-tpu-0"}, "pod", True),
        (ray.cluster_identity("slices"), {ray.GROUP_LABEL: "headgroup"}, "pod", False),
        (apps.sts_identity("db"), {}, "pod", False),
        (apps.deployment_identity("web"), {}, "pod", False),
        (apps.deployment_identity("web"), {}, "template", False),
        (batch.identity("train"), {}, "pod", False),
    ]
    for name in ("native", "coscheduling"):
        backend = make(name)
        for gang, labels, shape, held in cases:
            pod = {"metadata": {"name": "p", "labels": dict(labels)}, "spec": {"containers": []}}
            target = Target(pod if shape == "pod" else {"metadata": {}, "spec": pod["spec"]}, "template")
            backend.stamp(Target(pod, "pod") if shape == "pod" else target, gang, shape == "pod")
            gates = [g["name"] for g in pod["spec"].get("schedulingGates") or []]
            assert (gates == ["gangkeeper.io/gang-gate"]) is held, (name, gang.workload_kind, labels, gates)
