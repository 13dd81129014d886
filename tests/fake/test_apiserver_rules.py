"""The test API server enforces the rules the controller depends on, the way the real one does."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from tests import builders as b
from tests.apiserver import TestApiServer
from tests.cluster import node
from webhook.controller.run.leader import LeaderElector
from webhook.informer import Informer
from webhook.kube import NODES, PODS, Api, ApiError

GATE = {"name": "gangkeeper.io/gang-gate"}


@pytest.fixture
def server(apiserver: TestApiServer) -> TestApiServer:
    return apiserver


def gated_pod(api: Api) -> dict:
    pod = b.pod("p", spec=b.pod_spec(schedulingGates=[GATE]))
    return api.create(PODS.path("team-a"), pod)


def test_gates_can_be_removed_but_never_added(api: Api) -> None:
    gated_pod(api)
    path = PODS.path("team-a", "p")
    with pytest.raises(ApiError) as denied:
        api.merge_patch(path, {"spec": {"schedulingGates": [GATE, {"name": "other"}]}})
    assert denied.value.status == 422 and "only deletion is allowed" in denied.value.body
    api.merge_patch(path, {"spec": {"schedulingGates": None}})
    with pytest.raises(ApiError):
        api.merge_patch(path, {"spec": {"schedulingGates": [GATE]}})


def test_node_selector_only_grows_and_only_while_gated(api: Api) -> None:
    gated_pod(api)
    path = PODS.path("team-a", "p")
    api.merge_patch(path, {"spec": {"nodeSelector": {"kubernetes.io/hostname": "w1"}}})
    with pytest.raises(ApiError) as changed:
        api.merge_patch(path, {"spec": {"nodeSelector": {"kubernetes.io/hostname": "w2"}}})
    assert changed.value.status == 422
    # the release: pin and lift the gate in one request
    api.merge_patch(path, {"spec": {"nodeSelector": {"zone": "a"}, "schedulingGates": None}})
    with pytest.raises(ApiError) as ungated:
        api.merge_patch(path, {"spec": {"nodeSelector": {"extra": "x"}}})
    assert ungated.value.status == 422


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "spec": {
            "affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}
            }
        }
    }


ZONE_A = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
ON_W1 = {"key": "metadata.name", "operator": "In", "values": ["w1"]}


def test_required_node_terms_only_gain_requirements_and_only_while_gated(api: Api) -> None:
    api.create(PODS.path("team-a"), b.pod("p", spec=b.pod_spec(schedulingGates=[GATE], **required(ZONE_A)["spec"])))
    path = PODS.path("team-a", "p")
    with pytest.raises(ApiError) as another_term:
        api.merge_patch(path, required(ZONE_A, {"matchFields": [ON_W1]}))
    assert another_term.value.status == 422 and "no additions/deletions" in another_term.value.body
    with pytest.raises(ApiError) as changed:
        api.merge_patch(path, required({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}))
    assert changed.value.status == 422 and "only additions are allowed" in changed.value.body
    # the release: the pin ANDed into the term, the gate lifted, in one request
    api.merge_patch(path, {"spec": {**required({**ZONE_A, "matchFields": [ON_W1]})["spec"], "schedulingGates": None}})
    with pytest.raises(ApiError) as ungated:
        api.merge_patch(path, required({**ZONE_A, "matchFields": [ON_W1, ON_W1]}))
    assert ungated.value.status == 422
    # none at all: any terms may be set
    gated = b.pod("q", spec=b.pod_spec(schedulingGates=[GATE]))
    api.create(PODS.path("team-a"), gated)
    api.merge_patch(PODS.path("team-a", "q"), required({"matchFields": [ON_W1]}))


def test_stale_resource_version_conflicts_and_missing_objects_are_404(api: Api) -> None:
    created = gated_pod(api)
    path = PODS.path("team-a", "p")
    api.merge_patch(path, {"metadata": {"labels": {"a": "b"}}})
    with pytest.raises(ApiError) as conflict:
        api.merge_patch(
            path, {"metadata": {"resourceVersion": created["metadata"]["resourceVersion"], "labels": {"a": "c"}}}
        )
    assert conflict.value.status == 409
    with pytest.raises(ApiError) as missing:
        api.get(PODS.path("team-a", "nope"))
    assert missing.value.status == 404
    with pytest.raises(ApiError) as exists:
        api.create(PODS.path("team-a"), b.pod("p"))
    assert exists.value.status == 409


def test_informer_resumes_watches_and_relists_after_410(server: TestApiServer, api: Api) -> None:
    server.store.history = 3
    informer = Informer(api, NODES, watch_seconds=1)
    informer.relist()
    server.store.create("v1", "nodes", "", node("a"))
    assert informer.watch_once() is True
    assert [n["metadata"]["name"] for n in informer.items()] == ["a"]
    for name in "bcdef":  # more changes than the server keeps
        server.store.create("v1", "nodes", "", node(name))
    informer.resource_version = "1"
    assert informer.watch_once() is False  # 410 Gone: the caller lists again
    informer.relist()
    assert sorted(n["metadata"]["name"] for n in informer.items()) == list("abcdef")
    assert informer.relists == 2


def elector(api: Api, identity: str, clock: Any, skew_seconds: float = 0.0) -> LeaderElector:
    return LeaderElector(
        api,
        "gangkeeper-system",
        "gangkeeper-controller",
        identity,
        lease_seconds=15,
        clock=lambda: clock() + dt.timedelta(seconds=skew_seconds),
        monotonic=lambda: clock().timestamp(),
    )


def test_only_one_leader_at_a_time(api: Api) -> None:
    from tests.cluster import Clock

    clock = Clock()
    first, second = elector(api, "a", clock), elector(api, "b", clock)
    assert first.try_acquire_or_renew() is True
    assert second.try_acquire_or_renew() is False
    clock.advance(10)
    assert first.try_acquire_or_renew() is True  # renewed
    assert second.try_acquire_or_renew() is False
    clock.advance(16)
    assert second.try_acquire_or_renew() is True  # first stopped renewing: the lease expired
    assert first.try_acquire_or_renew() is False


def test_a_leader_that_stops_cleanly_hands_the_lease_over_at_once(api: Api, apiserver: TestApiServer) -> None:
    """SIGTERM (a rollout, a restart): the leader gives the Lease up after its last pass, and a
    candidate that has just seen it held takes it on its next try, not a lease duration later."""
    from tests.cluster import Clock

    clock = Clock()
    first, second = elector(api, "a", clock), elector(api, "b", clock)
    assert first.try_acquire_or_renew() is True
    assert second.try_acquire_or_renew() is False  # held, and just renewed
    first.stop(release=True)
    assert not first.leading()
    lease = apiserver.store.get("coordination.k8s.io/v1", "leases", "gangkeeper-system", "gangkeeper-controller")
    assert lease["spec"]["holderIdentity"] == "" and lease["spec"]["leaseDurationSeconds"] == 1
    clock.advance(2)  # one retry period, far within the 15 s lease
    assert second.try_acquire_or_renew() is True
    assert first.release() is False  # not its lease any more: nothing written
    assert (
        apiserver.store.get("coordination.k8s.io/v1", "leases", "gangkeeper-system", "gangkeeper-controller")["spec"][
            "holderIdentity"
        ]
        == "b"
    )


def test_a_leader_that_cannot_give_the_lease_up_stops_all_the_same(api: Api, apiserver: TestApiServer) -> None:
    from tests.apiserver import Reject
    from tests.cluster import Clock

    clock = Clock()
    leader = elector(api, "a", clock)
    assert leader.try_acquire_or_renew() is True
    apiserver.store.fail_next.append(lambda m, p: Reject(429, "TooManyRequests", "slow down") if m == "PATCH" else None)
    assert leader.release() is False and not leader.leading()  # the Lease then expires as before


def test_a_holder_whose_clock_runs_behind_keeps_its_lease(api: Api) -> None:
    """Expiry is judged from when the candidate saw the record change, not from the holder's renewTime."""
    from tests.cluster import Clock

    clock = Clock()
    holder, candidate = elector(api, "a", clock, skew_seconds=-3600), elector(api, "b", clock)
    assert holder.try_acquire_or_renew() is True
    for _ in range(5):
        assert candidate.try_acquire_or_renew() is False  # renewTime says an hour ago: not expired for b
        clock.advance(5)
        assert holder.try_acquire_or_renew() is True


def test_a_leader_that_cannot_renew_stops_acting_before_the_lease_expires(api: Api, apiserver: TestApiServer) -> None:
    from tests.apiserver import Reject
    from tests.cluster import Clock

    clock = Clock()
    leader = elector(api, "a", clock)
    assert leader.try_acquire_or_renew() is True and leader.leading()
    apiserver.store.fail_next.extend([lambda m, p: Reject(500, "InternalError", "etcd timeout")] * 10)
    clock.advance(11)  # past the 10 s renew deadline, within the 15 s lease
    assert leader.try_acquire_or_renew() is False and not leader.leading()


def test_informer_lists_in_pages_and_a_relist_keeps_unchanged_objects(api: Api, apiserver: TestApiServer) -> None:
    for name in "abcde":
        apiserver.store.create("v1", "nodes", "", node(name))
    informer = Informer(api, NODES, page_size=2)
    informer.relist()
    assert sorted(n["metadata"]["name"] for n in informer.items()) == list("abcde")
    pages = [p for m, p in apiserver.store.requests if m == "GET" and p.startswith("/api/v1/nodes?")]
    assert len(pages) == 3 and all("limit=2" in p for p in pages) and "continue=" in pages[-1]
    kept = informer.get(None, "a")
    apiserver.store.patch("v1", "nodes", "", "b", {"metadata": {"labels": {"changed": "yes"}}})
    informer.relist()  # as after a 410 Gone
    assert informer.get(None, "a") is kept  # same resourceVersion: the cached copy is reused
    assert informer.get(None, "b")["metadata"]["labels"]["changed"] == "yes"


def test_a_continue_token_older_than_the_history_is_410(apiserver: TestApiServer) -> None:
    from tests.apiserver import Reject

    store = apiserver.store
    store.history = 3
    for name in "abcd":
        store.create("v1", "nodes", "", node(name))
    _, _, token = store.list("v1", "nodes", None, limit=2)
    for name in "efgh":
        store.create("v1", "nodes", "", node(name))
    with pytest.raises(Reject) as expired:
        store.list("v1", "nodes", None, limit=2, token=token)
    assert expired.value.code == 410
