"""Claim holders (webhook/controller/act/claim_holders.py) against the test API server: the pod a
coscheduling gang's shared claim is allocated for is a placeholder in every respect the self-protection
policy checks, valid for the Pod schema, known by its owner and its uid (a pod of that name the Gang does
not own is never taken for it). The real tier runs it whole: tests/real/test_real_coscheduling.py -k
rack_link."""

from __future__ import annotations

from typing import Any

import pytest

from tests.apiserver import Reject, Store
from tests.schemas import validate
from webhook import contract
from webhook.controller.act.claim_holders import HOLDER_MARK, ClaimHolders, holder_name
from webhook.controller.decide.pods import PodView
from webhook.kube import Api

IMAGE = "registry.k8s.io/pause:3.10"


def member() -> tuple[PodView, dict[str, Any]]:
    raw = {
        "metadata": {"name": "train-0", "namespace": "team-a", "uid": "p0"},
        "spec": {
            "schedulerName": "scheduler-plugins-scheduler",
            "tolerations": [{"key": "gpu", "operator": "Exists"}],
            "containers": [{"name": "c", "image": "x"}],
            "resourceClaims": [{"name": "fabric", "resourceClaimName": "fabric"}],
        },
    }
    return PodView.from_api(raw, group="job-train"), raw


def gang_object(store: Store) -> dict[str, Any]:
    body = {"apiVersion": "gangkeeper.io/v1alpha1", "kind": "Gang", "metadata": {"name": "job-train"}, "spec": {}}
    return store.create("gangkeeper.io/v1alpha1", "gangs", "team-a", body)


def test_a_holder_is_a_valid_gang_owned_placeholder_pinned_with_the_claim_alone(store: Store, api: Api) -> None:
    owner = gang_object(store)
    holders = ClaimHolders(api, lambda namespace, name: owner, IMAGE)
    view, raw = member()
    held = holders.hold(view, raw, "job-train", "fabric", "node-b1")
    assert held is not None and held[0] == holder_name(owner["metadata"]["uid"]) and held[1]
    pod = store.get("v1", "pods", "team-a", held[0])
    validate(pod)
    labels, spec = pod["metadata"]["labels"], pod["spec"]
    assert labels == {contract.PLACEHOLDER_LABEL: HOLDER_MARK, contract.SKIP_LABEL: "true"}
    assert [o["uid"] for o in pod["metadata"]["ownerReferences"]] == [owner["metadata"]["uid"]]
    assert spec["resourceClaims"] == [{"name": "shared", "resourceClaimName": "fabric"}]
    assert spec["containers"][0]["resources"] == {"claims": [{"name": "shared"}]}  # no CPU, no memory
    assert spec["containers"][0]["image"] == IMAGE and spec["automountServiceAccountToken"] is False
    assert spec["schedulerName"] == "scheduler-plugins-scheduler" and spec["tolerations"] == raw["spec"]["tolerations"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-b1"]}]}]
    # made again (a pass that lost its record): the same pod, found by its owner
    assert holders.hold(view, raw, "job-train", "fabric", "node-b1") == held
    # left by an earlier start: found where the index has its key, and not read where it has none
    assert holders.left_behind("team-a", "job-train", lambda key: key == f"team-a/{held[0]}") == held
    assert holders.left_behind("team-a", "job-train", lambda key: False) is None
    assert holders.let_go("team-a", held) and holders.let_go("team-a", held)  # gone, then already gone
    with pytest.raises(Reject):
        store.get("v1", "pods", "team-a", held[0])


def test_a_pod_of_the_holders_name_the_gang_does_not_own_is_never_taken_for_it(store: Store, api: Api) -> None:
    owner = gang_object(store)
    name = holder_name(owner["metadata"]["uid"])
    squatter = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": []}}
    store.create("v1", "pods", "team-a", squatter)
    view, raw = member()
    assert ClaimHolders(api, lambda namespace, name: owner, IMAGE).hold(view, raw, "job-train", "fabric", "b1") is None
    assert ClaimHolders(api, lambda namespace, name: None, IMAGE).hold(view, raw, "job-train", "fabric", "b1") is None
    holders = ClaimHolders(api, lambda namespace, name: owner, IMAGE)
    assert holders.left_behind("team-a", "job-train", lambda key: True) is None  # never taken to be deleted
