"""Pool.of_shape, the cold start's quick constructor, makes the Pool the dataclass makes."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.controller.decide.device_types import Device, Pool, SliceDevices

TERMS = [{"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}]


@pytest.mark.parametrize(
    ("spec", "node_name", "count"),
    [
        ({"nodeName": "n1"}, "n1", 1),
        ({"allNodes": True}, None, 2),
        ({"nodeSelector": {"nodeSelectorTerms": TERMS}}, None, 1),
        ({"nodeSelector": "not an object"}, None, 3),
    ],
)
def test_a_pool_of_a_shape_is_the_pool_the_dataclass_makes(
    spec: dict[str, Any], node_name: str | None, count: int
) -> None:
    shape = SliceDevices((Device(("d", "shape-pool", "gpu-0"), {}, {}),), (("set", "memory", 1),))
    quick = Pool.of_shape("d", "pool-1", 7, count, node_name, spec, shape)
    selector = spec.get("nodeSelector")
    made = Pool(
        "d",
        "pool-1",
        7,
        complete=count == 1,
        own_devices=None,
        node_name=node_name,
        all_nodes=bool(spec.get("allNodes")),
        node_selector=selector.get("nodeSelectorTerms") if isinstance(selector, dict) else None,
        slice_count=count,
        counters=shape.counters,
        shape=shape,
    )
    assert quick == made and vars(quick) == vars(made)
    assert [d.id for d in quick.devices] == [("d", "pool-1", "gpu-0")]  # named under its own pool
