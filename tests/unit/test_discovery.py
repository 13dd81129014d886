"""Choosing the backend from recorded discovery documents (APIResourceList per group-version)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import builders as b
from tests.schemas import validate
from webhook.admission.bootstrap import WebhookSettings, build_resolver
from webhook.admission.decide import admit
from webhook.backends import Backend, Coscheduling, Gate, Native, Volcano
from webhook.backends.discovery import Served, Unavailable, choose

RECORDED = Path(__file__).parents[1] / "discovery"


def served(cluster: str) -> Served:
    return Served.from_documents(json.loads((RECORDED / f"{cluster}.json").read_text()))


@pytest.mark.parametrize(
    ("cluster", "choice"),
    [
        ("volcano", Volcano()),
        ("scheduler-plugins", Coscheduling()),
        ("native-1.35", Native("1.35")),
        ("native-1.36", Native("1.36")),
        ("native-1.37", Native("1.37")),
        ("bare", Gate()),
    ],
)
def test_auto_picks_the_best_mechanism_really_there(cluster: str, choice: Backend) -> None:
    assert choose("auto", served(cluster)) == choice


@pytest.mark.parametrize("backend", ["volcano", "coscheduling", "native"])
def test_named_backend_missing_from_a_bare_cluster_is_unavailable(backend: str) -> None:
    result = choose(backend, served("bare"))
    assert isinstance(result, Unavailable) and "does not serve" in result.message


def test_denial_when_nothing_fits_names_what_to_install() -> None:
    resolver = build_resolver(WebhookSettings(backend="volcano"), served=lambda: served("scheduler-plugins"))
    outcome = admit(b.job(), "CREATE", resolver.resolve("team-a"), "team-a")
    assert not outcome.allowed
    assert outcome.message == (
        'Job "train" cannot be given a gang: backend volcano needs '
        "scheduling.volcano.sh/v1beta1, which this cluster does not serve: install Volcano "
        "(its scheduling.volcano.sh/v1beta1 PodGroup CRD and scheduler)"
    )


@pytest.mark.parametrize(
    ("cluster", "field"),
    [("native-1.35", "workloadRef"), ("native-1.36", "schedulingGroup"), ("native-1.37", "schedulingGroup")],
)
def test_auto_on_native_clusters_stamps_the_served_generation(cluster: str, field: str) -> None:
    resolver = build_resolver(WebhookSettings(backend="auto"), served=lambda: served(cluster))
    pod = b.pod(labels={"batch.kubernetes.io/job-name": "train"})
    outcome = admit(pod, "CREATE", resolver.resolve("team-a"), "team-a")
    assert outcome.mutated is not None and field in outcome.mutated["spec"]
    validate(outcome.mutated, cluster.removeprefix("native-"))
