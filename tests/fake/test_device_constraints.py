"""firstAvailable alternatives and matchAttribute/distinctAttribute constraints, as kube-scheduler's
structured allocator applies them (allocator_stable.go), in the allocation and in placement (issue 79):
the shapes native ran and the gate held for ever."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fake.test_devices import (
    DRIVER,
    device_class,
    dra_controller,
    exactly,
    job_claiming,
    node,
    node_slice,
    pod_spec,
    template,
)
from webhook.controller.decide import devices
from webhook.controller.decide.device_constraints import Candidate, Constraint, search
from webhook.controller.decide.device_first_fit import first_within_counters
from webhook.controller.decide.device_in_turn import allocate_in_turn
from webhook.controller.decide.device_usage import Usages
from webhook.controller.decide.devices import Allocator, inventory_from, pod_demand

PCIE = f"{DRIVER}/pcie"


def gpu(name: str, model: str = "big", root: str | None = None, **more: Any) -> dict[str, Any]:
    attributes: dict[str, Any] = {"model": {"string": model}}
    if root is not None:
        attributes["pcie"] = {"string": root}
    attributes.update(more)
    return {"name": name, "attributes": attributes}


BIG = f'device.attributes["{DRIVER}"].model == "big"'
SMALL = f'device.attributes["{DRIVER}"].model == "small"'
ONE_BIG_OR_TWO_SMALL = {
    "name": "g",
    "firstAvailable": [
        {"name": "big", "deviceClassName": "gpu", "count": 1, "selectors": [{"cel": {"expression": BIG}}]},
        {"name": "small", "deviceClassName": "gpu", "count": 2, "selectors": [{"cel": {"expression": SMALL}}]},
    ],
}


def test_a_node_counts_pods_of_a_claim_with_alternatives_in_kube_schedulers_order() -> None:
    """Node 0: one big GPU and two small; node 1: four small. One big or two small per pod: room for 2 on
    each node, 4 in all (the issue's shape; the first choices alone counted 1)."""
    slices = [
        node_slice("n0", [gpu("g0", "big"), gpu("g1", "small"), gpu("g2", "small")]),
        node_slice("n1", [gpu(f"g{i}", "small") for i in range(4)]),
    ]
    inventory = inventory_from([device_class()], slices, [], [template("either", ONE_BIG_OR_TWO_SMALL)])
    demand = pod_demand("team-a", pod_spec("either"), inventory)
    (resource,) = demand.units()
    assert resource.startswith(devices.CLASS_RESOURCE_PREFIX + "claim/")
    assert [inventory.class_totals(node(n)).get(resource) for n in ("n0", "n1")] == [2, 2]
    allocator = Allocator(inventory)
    assert [allocator.allocate(demand, node("n0")) for _ in range(3)][:2] == [None, None]
    assert allocator.allocate(demand, node("n0")) is not None  # a third: nothing left there


def test_match_attribute_takes_two_devices_on_one_pcie_root_or_none() -> None:
    """Node 0: four GPUs on roots a, a, b, c (one pair); node 1: a pair on root d: one 2-GPU pod each."""
    pair = template("pair", exactly(count=2), constraints=[{"matchAttribute": PCIE}])
    slices = [
        node_slice("n0", [gpu("g0", root="a"), gpu("g1", root="b"), gpu("g2", root="c"), gpu("g3", root="a")]),
        node_slice("n1", [gpu("g0", root="d"), gpu("g1", root="d")]),
    ]
    inventory = inventory_from([device_class()], slices, [], [pair])
    demand = pod_demand("team-a", pod_spec("pair"), inventory)
    assert demand.unmodelled == ()
    (resource,) = demand.units()
    assert [inventory.class_totals(node(n))[resource] for n in ("n0", "n1")] == [1, 1]
    allocator = Allocator(inventory)
    assert allocator.allocate(demand, node("n0")) is None
    assert sorted(d[2] for d in allocator.picked) == ["g0", "g3"]  # the two on root a, not the first two
    assert allocator.allocate(demand, node("n0")) == (  # b and c are left: two devices, no pair
        f"no free devices on n0 for template team-a/pair that meet spec.devices.constraints (matchAttribute {PCIE})"
    )


def test_distinct_attribute_and_a_missing_attribute_as_upstream() -> None:
    spread = template("spread", exactly(count=3), constraints=[{"distinctAttribute": PCIE}])
    slices = [node_slice("n0", [gpu("g0", root="a"), gpu("g1", root="a"), gpu("g2", root="b"), gpu("g3")])]
    inventory = inventory_from([device_class()], slices, [], [spread])
    demand = pod_demand("team-a", pod_spec("spread"), inventory)
    # three distinct roots are not there: g3 has no root at all, which fails the constraint
    assert Allocator(inventory).allocate(demand, node("n0")) is not None
    slices.append(
        node_slice("n1", [gpu("g0", root="a"), gpu("g1", root="a"), gpu("g2", root="b"), gpu("g3", root="c")])
    )
    inventory = inventory_from([device_class()], slices, [], [spread])
    allocator = Allocator(inventory)
    assert allocator.allocate(pod_demand("team-a", pod_spec("spread"), inventory), node("n1")) is None
    assert len({d[2] for d in allocator.picked}) == 3 and ("gpu.example.com", "n1", "g1") not in allocator.picked


def assert_counted_as_allocated(inventory: devices.Inventory, claim_template: str) -> None:
    """Node n0's count of a pod's claim from the template is the number of times the allocator, pod after
    pod, can allocate it there."""
    demand = pod_demand("team-a", pod_spec(claim_template), inventory)
    (resource,) = demand.units()
    allocator, allocated = Allocator(inventory), 0
    while allocator.allocate(demand, node("n0")) is None:
        allocated += 1
    assert inventory.class_totals(node("n0")).get(resource, 0) == allocated


ROOTS = st.one_of(st.none(), st.sampled_from(["a", "b", "c"]))  # a device's PCIe root; None: it has none


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    roots=st.lists(st.tuples(ROOTS, st.sampled_from(["x", "y"])), max_size=9),
    count=st.integers(1, 3),
    both=st.booleans(),
)
def test_claims_alike_counted_by_groups_are_those_the_allocator_gives_pod_after_pod(
    roots: list[tuple[str | None, str]], count: int, both: bool
) -> None:
    """A request for `count` GPUs on one PCIe root (and one NUMA node, `both`): the node's count per
    group of devices alike (device_count.py) is the number of times the allocator, pod after pod, can
    allocate the claim there."""
    devices_ = [gpu(f"g{i}", root=root, numa={"string": numa}) for i, (root, numa) in enumerate(roots)]
    constraints = [{"matchAttribute": PCIE}] + ([{"matchAttribute": f"{DRIVER}/numa"}] if both else [])
    claim = template("alike", exactly(count=count), constraints=constraints)
    assert_counted_as_allocated(inventory_from([device_class()], [node_slice("n0", devices_)], [], [claim]), "alike")


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    models=st.lists(st.sampled_from(["big", "small", "other"]), max_size=9),
    counts=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    small_first=st.booleans(),
)
def test_first_available_counted_per_node_is_what_the_allocator_gives_pod_after_pod(
    models: list[str], counts: tuple[int, int], small_first: bool
) -> None:
    """Alternatives over devices some of which both select (any GPU, or a big one): the node's count
    (device_count.py) is the number of times the allocator, pod after pod, can allocate the claim there."""
    choices = [
        {"name": "big", "deviceClassName": "gpu", "count": counts[0], "selectors": [{"cel": {"expression": BIG}}]},
        {"name": "any", "deviceClassName": "gpu", "count": counts[1]},
    ]
    request = {"name": "g", "firstAvailable": choices[::-1] if small_first else choices}
    slices = [node_slice("n0", [gpu(f"g{i}", model) for i, model in enumerate(models)])]
    assert_counted_as_allocated(inventory_from([device_class()], slices, [], [template("either", request)]), "either")


def test_a_constraint_names_the_requests_it_covers() -> None:
    """Only `a` and `b` must share a root; `c` may be anywhere: a subrequest is covered by its request."""
    cover = Constraint(("a", "b"), PCIE)
    assert cover.covers("a") and cover.covers("b/sub") and not cover.covers("c")
    x = [Candidate(("d", "p", f"x{i}"), (("string", root),)) for i, root in enumerate("xyy")]
    found = search([("a", x), ("b", x), ("c", x)], [], [cover])
    assert found == [("d", "p", "x1"), ("d", "p", "x2"), ("d", "p", "x0")]


def test_the_gate_starts_a_gang_that_fits_only_through_alternatives_and_constraints(apiserver: Any, api: Any) -> None:
    """The issue's two shapes end to end on the fake API server: each gang is released whole, each pod
    pinned where its devices are."""
    from tests.cluster import node as api_node
    from tests.cluster import pods

    store = apiserver.store
    for name in ("w0", "w1", "w2", "w3"):
        store.create("v1", "nodes", "", api_node(name, cpu="64"))
    store.create("resource.k8s.io/v1", "deviceclasses", "", device_class())
    store.create(
        "resource.k8s.io/v1",
        "resourceslices",
        "",
        node_slice("w0", [gpu("g0", "big"), gpu("g1", "small"), gpu("g2", "small")]),
    )
    store.create(
        "resource.k8s.io/v1", "resourceslices", "", node_slice("w1", [gpu(f"g{i}", "small") for i in range(4)])
    )
    roots = [gpu("g0", root="a"), gpu("g1", root="b"), gpu("g2", root="c"), gpu("g3", root="a")]
    store.create("resource.k8s.io/v1", "resourceslices", "", node_slice("w2", roots))
    store.create(
        "resource.k8s.io/v1", "resourceslices", "", node_slice("w3", [gpu("g0", root="d"), gpu("g1", root="d")])
    )
    store.create("resource.k8s.io/v1", "resourceclaimtemplates", "team-a", template("either", ONE_BIG_OR_TWO_SMALL))
    pair = exactly("pair", 2, "gpu", f'device.attributes["{DRIVER}"].model == "big"')
    store.create(
        "resource.k8s.io/v1",
        "resourceclaimtemplates",
        "team-a",
        template("pair", pair, constraints=[{"matchAttribute": PCIE}]),
    )
    job_claiming(store, "alternatives", 4, "either")
    controller, _ = dra_controller(apiserver, api)
    decision = controller.reconcile_once()["team-a/job-alternatives"]
    assert decision.state == "Release", decision.message
    from webhook.controller.decide.pods import pinned_to

    placed = [pinned_to(p["spec"]) for p in pods(store) if p["metadata"]["name"].startswith("alternatives")]
    assert sorted(placed) == ["w0", "w0", "w1", "w1"], placed
    job_claiming(store, "constrained", 3, "pair")
    decision = controller.reconcile_once()["team-a/job-constrained"]
    assert decision.state != "Release", decision.message  # room for two pairs, not three
    store.delete("batch/v1", "jobs", "team-a", "constrained")
    for pod in [p for p in pods(store) if p["metadata"]["name"].startswith("constrained")]:
        store.delete("v1", "pods", "team-a", pod["metadata"]["name"])
    job_claiming(store, "pairs", 2, "pair")
    decision = controller.reconcile_once()["team-a/job-pairs"]
    assert decision.state == "Release", decision.message
    placed = [pinned_to(p["spec"]) for p in pods(store) if p["metadata"]["name"].startswith("pairs")]
    assert sorted(placed) == ["w2", "w3"], placed


def test_a_constraint_no_device_can_meet_is_named() -> None:
    """Bad input known only in the cluster: a constraint on an attribute no device has. Nothing crashes;
    the reason names the constraint and its field."""
    odd = template("odd", exactly(count=2), constraints=[{"matchAttribute": "gpu.example.com/nvlink"}])
    inventory = inventory_from(
        [device_class()], [node_slice("n0", [gpu("g0", root="a"), gpu("g1", root="a")])], [], [odd]
    )
    why = Allocator(inventory).allocate(pod_demand("team-a", pod_spec("odd"), inventory), node("n0"))
    assert why == (
        "no free devices on n0 for template team-a/odd that meet spec.devices.constraints "
        "(matchAttribute gpu.example.com/nvlink)"
    )


def partitions(node_name: str, memory: str = "8Gi") -> list[dict[str, Any]]:
    """A GPU of `memory` published as two slices of one pool (a counter set, then its partitions): two
    halves of 4Gi, and the whole of 8Gi, each consuming the GPU's memory."""
    pool = {"name": node_name, "generation": 1, "resourceSliceCount": 2}
    counters = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-counters"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node_name,
            "pool": pool,
            "sharedCounters": [{"name": "gpu-0", "counters": {"memory": {"value": memory}}}],
        },
    }

    def part(name: str, size: str) -> dict[str, Any]:
        return {
            "name": name,
            "attributes": {"model": {"string": "big"}},
            "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": size}}}],
        }

    devices_slice = node_slice(node_name, [part("half-0", "4Gi"), part("half-1", "4Gi"), part("whole", "8Gi")])
    devices_slice["spec"]["pool"] = pool
    devices_slice["metadata"]["name"] = f"{node_name}-devices"
    return [counters, devices_slice]


def test_partitions_of_one_gpu_are_counted_and_allocated_within_its_counters() -> None:
    """Three partitions of one 8Gi GPU (two halves and the whole): two pods of one partition each fit, a
    third does not; a pod taking two partitions gets the two halves, never a half and the whole."""
    inventory = inventory_from(
        [device_class()], partitions("n0"), [], [template("one", exactly()), template("two", exactly(count=2))]
    )
    assert not any(d.unmodelled for p in inventory.pools for d in p.devices)
    assert inventory.class_totals(node("n0"))[devices.class_resource("gpu")] == 2  # the halves, not three
    one = pod_demand("team-a", pod_spec("one"), inventory)
    allocator = Allocator(inventory)
    assert [allocator.allocate(one, node("n0")) for _ in range(2)] == [None, None]
    assert allocator.allocate(one, node("n0")) == "no free devices on n0 for template team-a/one"
    pair = Allocator(inventory)
    assert pair.allocate(pod_demand("team-a", pod_spec("two"), inventory), node("n0")) is None
    assert sorted(d[2] for d in pair.picked) == ["half-0", "half-1"]


def test_a_partition_allocated_to_a_claim_consumes_its_counters() -> None:
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "held", "namespace": "team-b"},
        "status": {
            "allocation": {
                "devices": {"results": [{"driver": DRIVER, "pool": "n0", "device": "half-0", "request": "g"}]}
            }
        },
    }
    inventory = inventory_from([device_class()], partitions("n0"), [claim], [template("one", exactly())])
    assert inventory.class_totals(node("n0"))[devices.class_resource("gpu")] == 1  # half-1 only: whole won't fit
    allocator = Allocator(inventory)
    one = pod_demand("team-a", pod_spec("one"), inventory)
    assert allocator.allocate(one, node("n0")) is None and allocator.picked == {(DRIVER, "n0", "half-1")}


def test_what_allocated_devices_consume_is_worked_out_once_per_count_and_never_changed_by_an_allocator() -> None:
    """Every node's count reads what allocated devices consume of the counters: worked out once per set
    of pods left out (device_usage.py), not per node (a full cluster's count was quadratic: 2,000 nodes
    with 12,000 devices allocated took 50 s). Allocators and counts take more of it over a map of their
    own: the inventory's stays what the claims hold, and a count made after an allocation is the same."""
    held = {
        "metadata": {"name": "held", "namespace": "team-b", "ownerReferences": [{"kind": "Pod", "uid": "b-0"}]},
        "status": {
            "allocation": {
                "devices": {"results": [{"driver": DRIVER, "pool": "n0", "device": "half-0", "request": "g"}]}
            }
        },
    }
    slices = [s for name in ("n0", "n1", "n2") for s in partitions(name)]
    inventory = inventory_from([device_class()], slices, [held], [template("one", exactly())])
    worked = []
    original = Usages._counters
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Usages, "_counters", lambda self, *a: worked.append(a) or original(self, *a))
        totals = [inventory.class_totals(node(name))[devices.class_resource("gpu")] for name in ("n0", "n1", "n2")]
        members = {"b-0"}  # the holder's pod counted by its shape: its partition is free to it
        assert [inventory.class_totals(node(n), members)[devices.class_resource("gpu")] for n in ("n0", "n1")] == [2, 2]
    assert totals == [1, 2, 2] and len(worked) == 2  # once for no pods left out, once for `members`
    before = dict(inventory.counters_used())
    one = pod_demand("team-a", pod_spec("one"), inventory)
    allocator = Allocator(inventory)
    assert allocator.allocate(one, node("n0")) is None and allocator.allocate(one, node("n1")) is None
    assert inventory.counters_used() == before == {(DRIVER, "n0", "gpu-0", "memory"): Decimal(4 * 2**30)}
    assert inventory.class_totals(node("n1"))[devices.class_resource("gpu")] == 2


def test_a_counter_set_the_pool_does_not_publish_is_named() -> None:
    """Bad input (issue 79): devices consuming a counter set their pool has not published cannot be
    allocated (upstream: no counters left to take); the Gang names the device, the set and the field."""
    counters, devices_slice = partitions("n0")
    counters["spec"]["sharedCounters"][0]["name"] = "gpu-9"
    inventory = inventory_from([device_class()], [counters, devices_slice], [], [template("one", exactly())])
    assert inventory.class_totals(node("n0")).get(devices.class_resource("gpu"), 0) == 0
    one = pod_demand("team-a", pod_spec("one"), inventory)
    assert Allocator(inventory).allocate(one, node("n0")) == (
        "no free devices on n0 for template team-a/one (device n0/half-0 consumes counter memory of counter set "
        "gpu-0, which pool n0 does not publish in spec.sharedCounters)"
    )


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.tuples(st.sampled_from(["gpu-0", "gpu-1", "gpu-9"]), st.integers(1, 8)), max_size=8),
    held=st.lists(st.integers(0, 7), max_size=3),
)
def test_one_partition_is_the_first_the_full_search_would_give(sizes: list[tuple[str, int]], held: list[int]) -> None:
    """A claim of one device among partitions of two GPUs (8Gi each; `gpu-9` a counter set no slice
    publishes), some held already: the one-unit path (device_first_fit.py) takes the device the full
    search over counters takes (device_constraints.py), or none when it finds none."""
    pool = {"name": "n0", "generation": 1, "resourceSliceCount": 1}
    parts = [
        {
            "name": f"p{i}",
            "attributes": {"model": {"string": "big"}},
            "consumesCounters": [{"counterSet": s, "counters": {"memory": {"value": f"{gi}Gi"}}}],
        }
        for i, (s, gi) in enumerate(sizes)
    ]
    one_slice = node_slice("n0", parts)
    one_slice["spec"]["pool"] = pool
    one_slice["spec"]["sharedCounters"] = [
        {"name": n, "counters": {"memory": {"value": "8Gi"}}} for n in ("gpu-0", "gpu-1")
    ]
    inventory = inventory_from([device_class()], [one_slice], [], [template("one", exactly())])
    allocator = Allocator(inventory)
    taken = {(DRIVER, "n0", f"p{i}") for i in held if i < len(sizes)}
    (sub,) = pod_demand("team-a", pod_spec("one"), inventory).claims[0].requests[0].alternatives
    pools = inventory.pools_for(node("n0"))
    fast = first_within_counters(allocator, sub, pools, taken)
    assert fast == allocator._constrained([sub], pools, taken, (), {})


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    roots=st.lists(st.tuples(ROOTS, st.sampled_from(["x", "y"])), max_size=9),
    count=st.integers(1, 3),
    distinct=st.booleans(),
    pods=st.integers(2, 5),
    held=st.lists(st.integers(0, 8), max_size=2),
)
def test_pods_alike_allocated_in_turn_get_what_one_by_one_gives(
    roots: list[tuple[str | None, str]], count: int, distinct: bool, pods: int, held: list[int]
) -> None:
    """A node's pods of one constrained claim (devices on one PCIe root, on distinct NUMA nodes or not),
    some devices held already: allocated in turn from candidates made once (Allocator.allocate_in_turn),
    as many pods get the same devices as allocated one by one."""
    devices_ = [gpu(f"g{i}", root=root, numa={"string": numa}) for i, (root, numa) in enumerate(roots)]
    constraints = [{"matchAttribute": PCIE}] + ([{"distinctAttribute": f"{DRIVER}/numa"}] if distinct else [])
    claim = template("alike", exactly(count=count), constraints=constraints)
    inventory = inventory_from([device_class()], [node_slice("n0", devices_)], [], [claim])
    demand = pod_demand("team-a", pod_spec("alike"), inventory)
    taken = {(DRIVER, "n0", f"g{i}") for i in held if i < len(roots)}
    one_by_one, in_turn = Allocator(inventory, picked=set(taken)), Allocator(inventory, picked=set(taken))
    done = 0
    while done < pods and one_by_one.allocate(demand, node("n0")) is None:
        done += 1
    assert allocate_in_turn(in_turn, demand, node("n0"), pods) == done
    assert in_turn.picked == one_by_one.picked


def assert_in_turn_as_one_by_one(inventory: devices.Inventory, claim_template: str, pods: int, held: set[Any]) -> None:
    demand = pod_demand("team-a", pod_spec(claim_template), inventory)
    one_by_one, in_turn = Allocator(inventory, picked=set(held)), Allocator(inventory, picked=set(held))
    done = 0
    while done < pods and one_by_one.allocate(demand, node("n0")) is None:
        done += 1
    made = allocate_in_turn(in_turn, demand, node("n0"), pods)
    assert made == done and in_turn.picked == one_by_one.picked
    assert dict(in_turn.counters_used()) == dict(one_by_one.counters_used())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    models=st.lists(st.sampled_from(["big", "small", "other"]), max_size=9),
    counts=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    pods=st.integers(2, 5),
    held=st.lists(st.integers(0, 8), max_size=2),
)
def test_pods_alike_with_alternatives_allocated_in_turn_get_what_one_by_one_gives(
    models: list[str], counts: tuple[int, int], pods: int, held: list[int]
) -> None:
    request = {
        "name": "g",
        "firstAvailable": [
            {"name": "big", "deviceClassName": "gpu", "count": counts[0], "selectors": [{"cel": {"expression": BIG}}]},
            {"name": "any", "deviceClassName": "gpu", "count": counts[1]},
        ],
    }
    slices = [node_slice("n0", [gpu(f"g{i}", model) for i, model in enumerate(models)])]
    inventory = inventory_from([device_class()], slices, [], [template("either", request)])
    assert_in_turn_as_one_by_one(inventory, "either", pods, {(DRIVER, "n0", f"g{i}") for i in held})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.tuples(st.sampled_from(["gpu-0", "gpu-1", "gpu-9"]), st.integers(1, 8)), max_size=8),
    pods=st.integers(2, 6),
    held=st.lists(st.integers(0, 7), max_size=2),
)
def test_partitions_allocated_in_turn_get_what_one_by_one_gives(
    sizes: list[tuple[str, int]], pods: int, held: list[int]
) -> None:
    parts = [
        {
            "name": f"p{i}",
            "attributes": {"model": {"string": "big"}},
            "consumesCounters": [{"counterSet": s, "counters": {"memory": {"value": f"{gi}Gi"}}}],
        }
        for i, (s, gi) in enumerate(sizes)
    ]
    one_slice = node_slice("n0", parts)
    one_slice["spec"]["sharedCounters"] = [
        {"name": n, "counters": {"memory": {"value": "8Gi"}}} for n in ("gpu-0", "gpu-1")
    ]
    inventory = inventory_from([device_class()], [one_slice], [], [template("one", exactly())])
    assert_in_turn_as_one_by_one(inventory, "one", pods, {(DRIVER, "n0", f"p{i}") for i in held})
