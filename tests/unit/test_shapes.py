"""A pod's scheduling shape is kept per interned container list (observe/holds.py ShapesSeen, the index's);
the memory must still tell apart pods whose containers are equal and whose constraints are not (found on
the real cluster: a Job with required pod anti-affinity took the shape of an earlier plain pod and was
pinned to one node)."""

from __future__ import annotations

from typing import Any

from webhook.controller import interning
from webhook.controller.observe.holds import MAX_SHAPES, ShapesSeen

CONTAINERS = [{"name": "w", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}]
ANTI_AFFINITY = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "a"}}}
        ]
    }
}


def spec(**extra: Any) -> dict[str, Any]:
    return {"containers": interning.canonical([dict(c) for c in CONTAINERS]), **extra}


def test_equal_containers_different_constraints_get_different_shapes() -> None:
    shape_of = ShapesSeen().of
    plain = shape_of(spec())
    spread = shape_of(spec(affinity=ANTI_AFFINITY))
    selected = shape_of(spec(nodeSelector={"pool": "gpu"}))
    tolerant = shape_of(spec(tolerations=[{"key": "gpu", "operator": "Exists"}]))
    assert plain.unmodelled == () and spread.unmodelled == ("podAntiAffinity",)
    assert selected.node_selector == (("pool", "gpu"),) and plain.node_selector == ()
    assert tolerant.tolerations != plain.tolerations
    assert shape_of(spec()) is plain  # and the cache still serves equal pods


def test_shapes_of_pods_each_with_its_own_volumes_are_kept_up_to_a_bound() -> None:
    """A StatefulSet's pods each name their own PVC: each a shape of its own, never all kept."""
    seen = ShapesSeen()
    for i in range(MAX_SHAPES + 1000):
        volumes = [{"name": "data", "persistentVolumeClaim": {"claimName": f"data-web-{i}"}}]
        assert seen.of(spec(volumes=volumes)) is seen.of(spec(volumes=volumes))
    assert len(seen) == MAX_SHAPES
