"""Every upstream example in ../shared/examples through `gangkeeper mutate`, for every backend.

The output must validate against the CRD (or the strict Kubernetes schema of the matching release),
every synthesized group object against its own schema, and the gang sizes must follow design.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.schemas import EXAMPLES, load_all, validate
from webhook import gangs
from webhook.offline import mutate_stream

EXPECTED_GANGS = {
    "jobset/paralleljobs.yaml": {"jobset-paralleljobs": 5},  # 4 workers + 1 driver
    "jobset/pytorch-mnist.yaml": {"jobset-pytorch": 4},
    "kubeflow/mpijob-tensorflow-mnist.yaml": {"mpijob-tensorflow-mnist": 3},  # launcher + 2 workers
    "kubeflow/pytorchjob-simple.yaml": {"pytorchjob-pytorch-simple": 2},
    "kubeflow/tfjob-simple.yaml": {"tfjob-tfjob-simple": 2},
    "lws/lws-sample-volcano.yaml": {"lws-lws-sample-volcano-0": 4, "lws-lws-sample-volcano-1": 4},
    "lws/lws.yaml": {f"lws-leaderworkerset-sample-{i}": 4 for i in range(3)},
    "lws/vllm-gpu.yaml": {"lws-vllm-0": 2, "lws-vllm-1": 2},
    "ray/raycluster-complete.yaml": {"raycluster-raycluster-complete": 2},
    "ray/raycluster-sample.yaml": {"raycluster-raycluster-kuberay": 2},  # head + replicas 1
    # autoscaling off: head + replicas 2 (KubeRay starts 3 pods), not head + minReplicas 1
    "ray/rayjob-pytorch-mnist.yaml": {"rayjob-rayjob-pytorch-mnist": 3},
    "spark/spark-pi.yaml": {"spark-spark-pi": 1},  # the driver; its executor counted in minResources
    "spark/spark-pi-volcano.yaml": {},  # batchScheduler: volcano, the operator makes the gang
}
# Examples that pin schedulerName: volcano are left alone (with a warning) under other backends.
PINNED_TO_VOLCANO = {"lws/lws-sample-volcano.yaml"}
BACKENDS = [
    ("volcano", "1.37"),
    ("coscheduling", "1.37"),
    ("gate", "1.37"),
    ("native", "1.35"),
    ("native", "1.36"),
    ("native", "1.37"),
]


def example_files() -> list[str]:
    return sorted(str(p.relative_to(EXAMPLES)) for p in EXAMPLES.rglob("*.yaml"))


def test_every_example_has_an_expectation() -> None:
    assert example_files() == sorted(EXPECTED_GANGS)


def group_sizes(objects: list[dict]) -> dict[str, int]:
    sizes = {}
    for obj in objects:
        spec = obj.get("spec") or {}
        if obj["kind"] == "PodGroup" and "minMember" in spec:
            sizes[obj["metadata"]["name"]] = spec["minMember"]
        elif obj["kind"] == "PodGroup":
            sizes[obj["metadata"]["name"]] = spec["schedulingPolicy"]["gang"]["minCount"]
        elif obj["kind"] == "Workload" and "podGroups" in spec:  # 1.35: per-replica gangs share a group
            for group in spec["podGroups"]:
                sizes[f"{obj['metadata']['name']}/{group['name']}"] = group["policy"]["gang"]["minCount"]
    return sizes


@pytest.mark.parametrize("example", sorted(EXPECTED_GANGS))
def test_gang_sizes_follow_the_table(example: str) -> None:
    found = {}
    for doc in load_all(EXAMPLES / example):
        found.update({g.name: g.min_member for g in gangs.analyze(doc).gangs})
    assert found == EXPECTED_GANGS[example]


@pytest.mark.parametrize(("backend", "version"), BACKENDS, ids=[f"{b}-{v}" for b, v in BACKENDS])
@pytest.mark.parametrize("example", sorted(EXPECTED_GANGS))
def test_example_through_mutate_is_valid(example: str, backend: str, version: str) -> None:
    docs = load_all(EXAMPLES / Path(example))
    result = mutate_stream(docs, backend, version)
    assert not result.denials
    inputs = len(docs)
    admitted, synthesized = result.objects[:inputs], result.objects[inputs:]
    for obj in result.objects:
        validate(obj, version)
    expected = EXPECTED_GANGS[example]
    if backend != "volcano" and example in PINNED_TO_VOLCANO:
        assert admitted == docs and not synthesized
        assert any("left without a gang" in w for w in result.warnings)
        return
    sizes = group_sizes(synthesized)
    if backend == "gate":
        assert synthesized == []
    elif backend == "native" and version == "1.35":
        workload_sizes = {key.split("/")[0]: size for key, size in sizes.items()}
        assert set(workload_sizes.values()) <= set(expected.values())
        assert {g.id.native_workload for d in docs for g in gangs.analyze(d).gangs} == set(workload_sizes)
    else:
        assert sizes == expected


def _with_csi_volumes(value: object, path: str = "") -> int:
    """Every pod template's spec gets a CSI volume (whose `driver` is a string) and a container named
    `driver`: fields named like ones gangkeeper reads elsewhere, valid in any PodSpec."""
    added = 0
    if isinstance(value, list):
        return sum(_with_csi_volumes(item, f"{path}[]") for item in value)
    if not isinstance(value, dict):
        return 0
    if path.lower().endswith("template.spec") and "containers" in value:
        value.setdefault("volumes", []).append({"name": "bucket", "csi": {"driver": "gcsfuse.csi.storage.gke.io"}})
        value["containers"].append({"name": "driver", "image": "busybox"})
        added += 1
    for key, item in value.items():
        added += _with_csi_volumes(item, f"{path}.{key}" if path else str(key))
    return added


def _spark_csi_volumes(doc: dict[str, object]) -> int:
    """A SparkApplication has no pod template: its pods' volumes are `spec.volumes` and its extra
    containers each role's `sidecars` (the Spark operator's CRD), so the CSI volume and the container
    named `driver` go there, next to the `spec.driver` gangkeeper does read."""
    spec = doc.get("spec")
    if doc.get("kind") != "SparkApplication" or not isinstance(spec, dict):
        return 0
    spec.setdefault("volumes", []).append({"name": "bucket", "csi": {"driver": "gcsfuse.csi.storage.gke.io"}})
    for role in ("driver", "executor"):
        spec.setdefault(role, {}).setdefault("sidecars", []).append({"name": "driver", "image": "busybox"})
    return 1


@pytest.mark.parametrize("name", sorted(EXPECTED_GANGS))
def test_a_csi_volume_in_any_example_is_never_refused(name: str) -> None:
    """The shape check reads the paths gangkeeper reads: a CSI volume's `driver` inside a pod template is
    not SparkApplication's `spec.driver` (KubeRay's pytorch-image-classifier sample was refused so)."""
    docs = load_all(EXAMPLES / name)
    assert sum(_with_csi_volumes(doc) or _spark_csi_volumes(doc) for doc in docs)
    result = mutate_stream(docs, "gate", "1.37", "team-a")
    assert result.denials == []
