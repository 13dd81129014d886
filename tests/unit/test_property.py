"""Property tests: random pods and Jobs never crash the handler, get a well-formed answer, and converge."""

from __future__ import annotations

import base64
import json
from typing import Any

import jsonpatch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import builders as b
from webhook.admission.bootstrap import WebhookSettings, build_resolver
from webhook.admission.handler import Handler

HANDLERS = {
    name: Handler(build_resolver(WebhookSettings(backend=name)))
    for name in ("volcano", "coscheduling", "native", "gate")
}

label_values = st.one_of(st.text(max_size=70), st.sampled_from(["train", "0", "", "a" * 80, "x/y"]))
quantities = st.one_of(
    st.sampled_from(["1", "500m", "2Gi", "0", "1e3", "bogus", "-1", ""]),
    st.integers(-5, 10**6),
    st.none(),
    st.floats(allow_nan=False, allow_infinity=False),  # NaN is no JSON: refused with a 400 (test_review)
)
interesting_labels = st.sampled_from(
    [
        "batch.kubernetes.io/job-name",
        "gangkeeper.io/group-name",
        "leaderworkerset.sigs.k8s.io/name",
        "leaderworkerset.sigs.k8s.io/group-index",
        "jobset.sigs.k8s.io/jobset-name",
        "ray.io/cluster",
        "sparkoperator.k8s.io/app-name",
        "gangkeeper.io/group",
        "gangkeeper.io/skip",
        "scheduling.x-k8s.io/pod-group",
    ]
)
interesting_annotations = st.sampled_from(
    [
        "gangkeeper.io/group-size",
        "gangkeeper.io/min-member",
        "gangkeeper.io/timeout-seconds",
        "gangkeeper.io/workload",
        "scheduling.k8s.io/group-name",
        "gangkeeper.io/queue",
    ]
)


@st.composite
def containers(draw: Any) -> dict[str, Any]:
    resources = {
        kind: draw(st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), quantities, max_size=3))
        for kind in ("requests", "limits")
    }
    return {"name": "c", "image": "x", "resources": draw(st.sampled_from([resources, None, {}, "junk"]))}


@st.composite
def pods(draw: Any) -> dict[str, Any]:
    spec = {
        "containers": draw(st.lists(containers(), max_size=3)),
        "initContainers": draw(st.lists(containers(), max_size=2)),
        "schedulerName": draw(st.sampled_from([None, "volcano", "default-scheduler", "other"])),
    }
    obj = b.pod(
        labels=draw(st.dictionaries(interesting_labels, label_values, max_size=4)),
        annotations=draw(st.dictionaries(interesting_annotations, label_values, max_size=3)),
        owner=draw(st.sampled_from([None, ("batch/v1", "Job", "train"), ("apps/v1", "StatefulSet", "db")])),
        spec={k: v for k, v in spec.items() if v is not None},
    )
    return obj


@st.composite
def jobs(draw: Any) -> dict[str, Any]:
    job = b.job(
        parallelism=draw(st.one_of(st.none(), st.integers(-2, 2000), st.text(max_size=3))),
        completions=draw(st.one_of(st.none(), st.integers(-2, 2000))),
        annotations=draw(st.dictionaries(interesting_annotations, label_values, max_size=3)),
    )
    job["spec"]["template"]["spec"]["containers"] = draw(st.lists(containers(), min_size=0, max_size=2))
    return job


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    obj=st.one_of(pods(), jobs()),
    backend=st.sampled_from(sorted(HANDLERS)),
    operation=st.sampled_from(["CREATE", "UPDATE"]),
)
def test_random_objects_get_a_well_formed_answer_and_converge(obj: dict, backend: str, operation: str) -> None:
    handler = HANDLERS[backend]
    status, document = handler.handle("mutate", json.dumps(b.review(obj, operation, uid="u")).encode())
    assert status == 200
    response = document["response"]
    assert response["uid"] == "u" and isinstance(response["allowed"], bool)
    assert response.get("status", {}).get("code") != 500, response
    assert ("patch" in response) == ("patchType" in response)
    for warning in response.get("warnings", []):
        assert "\n" not in warning and len(warning) <= 120
    if not response["allowed"]:
        assert response["status"]["code"] in (403, 422) and response["status"]["message"]
        return
    if "patch" in response:
        mutated = jsonpatch.apply_patch(obj, json.loads(base64.b64decode(response["patch"])))
        _, again = handler.handle("mutate", json.dumps(b.review(mutated, operation, uid="u")).encode())
        assert "patch" not in again["response"], "mutation must converge"


@settings(max_examples=200, deadline=None)
@given(
    body=st.one_of(
        st.binary(max_size=200),
        st.text(max_size=200).map(str.encode),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=5),
            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
            max_leaves=10,
        ).map(lambda v: json.dumps(v).encode()),
    )
)
def test_arbitrary_bodies_never_crash(body: bytes) -> None:
    status, document = HANDLERS["volcano"].handle("mutate", body)
    assert status in (200, 400, 413)
    if status != 200:
        assert document["error"]


class RandomApi:
    """An API server that answers each call with what hypothesis drew: an object of any shape, or an
    error of any status (no answer at all included)."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers, self.calls = answers, 0

    def request(self, method: str, path: str, *args: Any, **kwargs: Any) -> Any:
        from webhook.kube import ApiError

        answer = self.answers[self.calls % len(self.answers)] if self.answers else None
        self.calls += 1
        if isinstance(answer, int):
            raise ApiError(answer, "drawn", method, path)
        return answer


api_answers = st.lists(
    st.one_of(
        st.sampled_from([0, 400, 403, 404, 409, 422, 429, 500, 503]),
        st.none(),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=8),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(st.sampled_from(["metadata", "uid", "spec", "kind", "x"]), inner, max_size=3)
            ),
            max_leaves=8,
        ),
        st.builds(lambda uid: {"metadata": {"uid": uid}}, st.one_of(st.text(max_size=8), st.integers(), st.none())),
    ),
    max_size=4,
)


@st.composite
def gang_pods(draw: Any) -> dict[str, Any]:
    """A pod of Job train's gang as its Job controller makes it (the stamp, the Job as its owner, the uid
    it claims), with whatever else hypothesis adds: the review that reads the Job's uid."""
    pod = draw(pods())
    meta = pod["metadata"]
    meta["labels"] = {**(meta.get("labels") or {}), "gangkeeper.io/group": "job-train"}
    meta["annotations"] = {**(meta.get("annotations") or {}), "gangkeeper.io/workload": "Job/train"}
    meta["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "controller": True, "uid": draw(label_values)}
    ]
    return pod


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    obj=st.one_of(gang_pods(), jobs()),
    answers=api_answers,
    dry_run=st.sampled_from([False, False, False, True]),
    endpoint=st.sampled_from(["mutate", "validate", "validate"]),
)
def test_reviews_that_read_or_make_groups_ahead_never_answer_500(
    obj: dict, answers: list[Any], dry_run: bool, endpoint: str
) -> None:
    """The paths with API calls in them (a gang pod's workload uid read, a workload's PodGroups made
    ahead under Volcano): whatever the API answers, the review gets a well-formed answer, never a 500."""
    from webhook.admission.ahead import VolcanoGroupsAhead
    from webhook.admission.workloads import WorkloadUids

    api: Any = RandomApi(answers)
    resolver = build_resolver(
        WebhookSettings(backend="volcano"), workload_uids=WorkloadUids(api), groups_ahead=VolcanoGroupsAhead(api)
    )
    handler = Handler(resolver)
    if obj.get("kind") != "Pod":  # the workload as the validating webhook sees it: stamped by the mutating one
        status, document = handler.handle("mutate", json.dumps(b.review(obj, uid="m")).encode())
        patch = document["response"].get("patch")
        if patch:
            obj = jsonpatch.apply_patch(obj, json.loads(base64.b64decode(patch)))
    status, document = handler.handle(endpoint, json.dumps(b.review(obj, uid="u", dry_run=dry_run)).encode())
    assert status == 200
    response = document["response"]
    assert response["uid"] == "u" and isinstance(response["allowed"], bool)
    assert response.get("status", {}).get("code") != 500, response
    if not response["allowed"]:
        assert response["status"]["code"] in (403, 422) and response["status"]["message"]
