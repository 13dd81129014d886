"""The release's pin: a required node affinity requirement on metadata.name, added the way the API server
lets a gated pod's terms change, and read back only in that form."""

from __future__ import annotations

from typing import Any

import pytest

from tests.apiserver import Reject, check_pod_update, strategic_merge_patch
from webhook.controller.decide.pods import PodView, pin_terms, pinned_to
from webhook.controller.decide.state import release_patch

ZONE_A = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
GPU = {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["w9"]}]}
GATES = [{"name": "gangkeeper.io/gang-gate"}, {"name": "example.com/hold"}]


def spec_with(*terms: dict[str, Any], **more: Any) -> dict[str, Any]:
    required = {"nodeSelectorTerms": list(terms)}
    return {
        "schedulingGates": GATES,
        "affinity": {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required},
            "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []},
        },
        "containers": [{"name": "c", "image": "x"}],
        **more,
    }


def released(spec: dict[str, Any], node: str | None) -> dict[str, Any]:
    """The pod after the strategic merge patch is applied, as the API server stores it."""
    pod = {"metadata": {"name": "p", "resourceVersion": "7"}, "spec": spec}
    patch = release_patch(PodView.from_api(pod), node, spec)
    after: dict[str, Any] = strategic_merge_patch({"spec": spec}, {"spec": patch["spec"]})["spec"]
    return after


def test_a_pod_with_no_terms_gets_one_term_of_the_pin_alone() -> None:
    spec = {"schedulingGates": GATES, "containers": [{"name": "c", "image": "x"}]}
    after = released(spec, "w1")
    assert after["affinity"] == {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["w1"]}]}]
            }
        }
    }
    assert after["schedulingGates"] == [{"name": "example.com/hold"}]
    assert "nodeSelector" not in after
    assert pinned_to(after) == "w1"
    check_pod_update({"spec": spec}, {"spec": after})  # what the API server allows a gated pod


def test_each_term_gets_the_pin_anded_in_and_the_rest_of_the_affinity_stays() -> None:
    spec = spec_with(ZONE_A, GPU, {})
    after = released(spec, "w2")
    terms = after["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    pin = {"key": "metadata.name", "operator": "In", "values": ["w2"]}
    assert terms == [{**ZONE_A, "matchFields": [pin]}, {"matchFields": [*GPU["matchFields"], pin]}, {}]
    assert after["affinity"]["podAffinity"] == spec["affinity"]["podAffinity"]
    assert pinned_to(after) == "w2"
    check_pod_update({"spec": spec}, {"spec": after})


def test_no_pin_lifts_the_gate_alone() -> None:
    spec = spec_with(ZONE_A)
    after = released(spec, None)
    assert after["affinity"] == spec["affinity"] and pinned_to(after) is None


def test_only_a_pin_every_term_carries_is_read_back_as_one() -> None:
    assert pinned_to(spec_with(ZONE_A)) is None
    assert pinned_to(spec_with(*pin_terms([ZONE_A, GPU], "w1"))) == "w1"
    half = [*pin_terms([ZONE_A], "w1"), GPU]
    assert pinned_to(spec_with(*half)) is None  # one term lets the pod go elsewhere
    two = [pin_terms([ZONE_A], "w1")[0], pin_terms([GPU], "w2")[0]]
    assert pinned_to(spec_with(*two)) is None
    # what an earlier version pinned with
    assert pinned_to({"nodeSelector": {"kubernetes.io/hostname": "w3"}}) == "w3"


def test_the_api_server_refuses_the_pin_on_an_ungated_pod() -> None:
    spec = spec_with(ZONE_A)
    after = released(spec, "w1")
    with pytest.raises(Reject) as refused:
        check_pod_update({"spec": {**spec, "schedulingGates": []}}, {"spec": {**after, "schedulingGates": []}})
    assert refused.value.code == 422
