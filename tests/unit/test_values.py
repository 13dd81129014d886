"""Every documented gangkeeper.io key of a workload, given a value gangkeeper cannot use, is refused at
apply naming the field and what it may be (or, where the docs say so, warned). The list of keys is read
from the docs, so a key documented later without a check here fails this test."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests import builders as b
from webhook import contract
from webhook.admission import keys
from webhook.admission.decide import admit
from webhook.backends import make

DOCS = Path(__file__).parents[2] / "docs"
README = Path(__file__).parents[2] / "README.md"

# key -> (a value gangkeeper cannot use, what the refusal says the value may be)
BAD_ANNOTATIONS = {
    contract.PLACEMENT_ANNOTATION: ("packed", 'must be one of "pack", "spread"'),
    contract.EXPECTED_SECONDS_ANNOTATION: ("ten", "must be a positive number of seconds"),
    contract.QUEUE_ANNOTATION: ("team a", "must be a Volcano queue's name"),
    contract.MIN_MEMBER_ANNOTATION: ("all", "must be an integer between 1 and 4"),
    contract.TIMEOUT_ANNOTATION: ("soon", "must be a positive whole number of seconds"),
    contract.RECOVERY_ANNOTATION: ("-5", "must be a positive whole number of seconds"),
    contract.TOPOLOGY_REQUIRED_ANNOTATION: ("Rack Name", "must be a node label key"),
    contract.TOPOLOGY_PREFERRED_ANNOTATION: ("Rack Name", "must be a node label key"),
    contract.WORKLOAD_TOPOLOGY_REQUIRED_ANNOTATION: ("Rack Name", "must be a node label key"),
    contract.WORKLOAD_TOPOLOGY_PREFERRED_ANNOTATION: ("Rack Name", "must be a node label key"),
}
BAD_LABELS = {contract.SKIP_LABEL: ("yes", 'must be one of "true", "false"')}
# keys checked elsewhere, or not a workload's to set, each with where
ELSEWHERE = {
    contract.DEPLOYMENT_GANG_ANNOTATION: "a Deployment's: tests below",
    contract.GROUP_SIZE_ANNOTATION: "a bare pod's: tests/fake/test_limits.py, test_gangs.py",
    contract.GROUP_NAME_LABEL: "a bare pod's group: any label value the API server accepts",
    contract.GROUP_LABEL: "gangkeeper's stamp: tests/fake/test_membership.py",
    contract.WORKLOAD_ANNOTATION: "gangkeeper's stamp: tests/fake/test_membership.py",
    contract.SIZE_ANNOTATION: "gangkeeper's stamp",
}


def documented_workload_keys() -> set[str]:
    text = "\n".join(p.read_text() for p in [README, *DOCS.glob("*.md")])
    found = set(re.findall(r"gangkeeper\.io/[a-z0-9-]+", text))
    return found & (keys.OBJECT_ANNOTATIONS | keys.OBJECT_LABELS) - keys.CONTROLLER_KEYS


def test_every_documented_workload_key_has_a_value_check() -> None:
    checked = BAD_ANNOTATIONS.keys() | BAD_LABELS.keys() | ELSEWHERE.keys()
    assert documented_workload_keys() - checked == set()


@pytest.mark.parametrize(("key", "case"), sorted({**BAD_ANNOTATIONS, **BAD_LABELS}.items()))
def test_a_bad_value_is_refused_naming_the_field_and_what_it_may_be(key: str, case: tuple[str, str]) -> None:
    value, allowed = case
    job = b.job()
    where = "labels" if key in BAD_LABELS else "annotations"
    job["metadata"][where] = {key: value}
    outcome = admit(job, "CREATE", make("volcano"), "team-a")
    assert not outcome.allowed and outcome.code == 422, outcome.reason
    assert f"metadata.{where}[{key}]" in outcome.message and allowed in outcome.message, outcome.message


@pytest.mark.parametrize("value", ["pack", "spread"])
def test_the_documented_values_pass(value: str) -> None:
    job = b.job(
        annotations={
            contract.PLACEMENT_ANNOTATION: value,
            contract.EXPECTED_SECONDS_ANNOTATION: "90.5",
            contract.QUEUE_ANNOTATION: "team-a.gpu",
        }
    )
    outcome = admit(job, "CREATE", make("volcano"), "team-a", volcano_queues=frozenset({"team-a.gpu"}))
    assert outcome.allowed, outcome.message


def test_a_deployments_gang_annotation_takes_true_or_false() -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "team-a", "annotations": {contract.DEPLOYMENT_GANG_ANNOTATION: "yes"}},
        "spec": {"replicas": 2, "strategy": {"type": "Recreate"}, "template": b.template(b.pod_spec())},
    }
    outcome = admit(deployment, "CREATE", make("gate"), "team-a")
    assert not outcome.allowed and 'must be one of "true", "false"' in outcome.message, outcome.message
