"""Consumable capacity and admin access, as kube-scheduler's allocator counts them (device_capacity.py):
a device that allows multiple allocations serves several claims within its capacity, a request's
capacity is rounded up by the device's policy, a claim allocated before holds its share, and a request
for admin access takes a device in use."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fake.test_devices import allocate, device_class, exactly, gpus, node, node_slice, pod_spec, template
from webhook.controller.decide import device_capacity
from webhook.controller.decide.devices import Allocator, claim_resource, inventory_from, pod_demand

GIB = 2**30


def shared_gpu(name: str = "gpu-0", memory: str = "80Gi", **policy: Any) -> dict[str, Any]:
    capacity: dict[str, Any] = {"value": memory}
    if policy:
        capacity["requestPolicy"] = policy
    return {
        "name": name,
        "allowMultipleAllocations": True,
        "attributes": {"model": {"string": "a100"}},
        "capacity": {"memory": capacity},
    }


def wanting(memory: str | None, name: str = "slice", **extra: Any) -> dict[str, Any]:
    request = exactly()
    if memory is not None:
        request["exactly"]["capacity"] = {"requests": {"memory": memory}}
    request["exactly"].update(extra)
    return template(name, request)


def claimed(name: str, device: str, consumed: dict[str, str] | None, **result: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"request": "gpu", "driver": "gpu.example.com", "pool": "n1", "device": device}
    if consumed is not None:
        entry.update(shareID="6f1a7f2e-0000-4000-8000-000000000001", consumedCapacity=consumed)
    entry.update(result)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "team-b"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
        "status": {"allocation": {"devices": {"results": [entry]}}},
    }


def test_a_request_is_rounded_up_by_the_devices_policy_and_refused_past_it() -> None:
    """consumable_capacity.go calculateConsumedCapacity and violatesPolicy."""
    stepped = device_capacity.capacities(
        {
            "memory": {
                "value": "80Gi",
                "requestPolicy": {"default": "10Gi", "validRange": {"min": "10Gi", "max": "40Gi", "step": "10Gi"}},
            }
        }
    )
    listed = device_capacity.capacities(
        {"memory": {"value": "80Gi", "requestPolicy": {"default": "8Gi", "validValues": ["8Gi", "16Gi", "32Gi"]}}}
    )
    plain = device_capacity.capacities({"memory": {"value": "80Gi"}})

    def consumed(asked: str | None, device: Any) -> Decimal | None:
        found = device_capacity.consumption(
            (("memory", device_capacity.resources.parse(asked)),) if asked else (), device
        )
        return None if found is None else dict(found)["memory"] / GIB

    assert [consumed(a, stepped) for a in ("4Gi", "25Gi", "40Gi", "41Gi", None)] == [10, 30, 40, None, 10]
    assert [consumed(a, listed) for a in ("1Gi", "9Gi", "32Gi", "33Gi", None)] == [8, 16, 32, None, 8]
    assert [consumed(a, plain) for a in ("5Gi", None)] == [5, 80]  # no policy: the request, or all of it
    assert device_capacity.consumption((("cores", Decimal(1)),), plain) is None  # a capacity it does not define


def test_a_shared_device_serves_claims_while_its_capacity_holds() -> None:
    inventory = inventory_from(
        [device_class()],
        [node_slice("n1", [shared_gpu(validRange={"min": "10Gi", "step": "10Gi"}, default="10Gi")])],
        [],
        [wanting("25Gi")],
    )
    n1 = node("n1")
    # 25Gi rounds up to 30Gi: two shares of 80Gi, not three
    assert allocate(inventory, pod_spec("slice", "slice"), n1) == [None]
    assert allocate(inventory, pod_spec("slice", "slice", "slice"), n1)[0].startswith("no free devices on n1")
    demand = pod_demand("team-a", pod_spec("slice"), inventory)
    resource = claim_resource(demand.claims[0].requests, ())
    assert demand.units() == {resource: 1}  # counted whole per node: a device serves several
    assert inventory.class_totals(n1)[resource] == 2


def test_requests_without_capacity_take_the_default_share() -> None:
    inventory = inventory_from(
        [device_class()],
        [node_slice("n1", [shared_gpu(default="20Gi", validRange={"min": "20Gi"})])],
        [],
        [wanting(None)],
    )
    assert inventory.class_totals(node("n1"))["deviceclass.resource.kubernetes.io/gpu"] == 4
    assert allocate(inventory, pod_spec(*["slice"] * 4), node("n1")) == [None]
    assert allocate(inventory, pod_spec(*["slice"] * 5), node("n1")) != [None]
    whole = inventory_from([device_class()], [node_slice("n1", [shared_gpu()])], [], [wanting(None)])
    assert whole.class_totals(node("n1"))["deviceclass.resource.kubernetes.io/gpu"] == 1  # no default: all of it


def test_a_share_allocated_before_holds_its_capacity_and_the_device_stays_shared() -> None:
    held = claimed("other", "gpu-0", {"memory": "60Gi"})
    inventory = inventory_from(
        [device_class()], [node_slice("n1", [shared_gpu()])], [held], [wanting("20Gi"), wanting("30Gi", "big")]
    )
    assert inventory.taken == {}
    assert allocate(inventory, pod_spec("slice"), node("n1")) == [None]
    assert allocate(inventory, pod_spec("big"), node("n1"))[0].startswith("no free devices on n1")


def test_a_capacity_request_no_device_can_hold_is_named() -> None:
    """A request larger than any device: the Gang names the request and the field."""
    inventory = inventory_from([device_class()], [node_slice("n1", [shared_gpu()])], [], [wanting("100Gi")])
    assert allocate(inventory, pod_spec("slice"), node("n1")) == [
        "no free devices on n1 for template team-a/slice with room for spec.devices.requests[].capacity.requests "
        "(request gpu: memory 107374182400)"
    ]
    exclusive = {"name": "gpu-0", "capacity": {"memory": {"value": "80Gi"}}}
    inventory = inventory_from(
        [device_class()], [node_slice("n1", [exclusive])], [], [wanting("40Gi"), wanting("90Gi", "big")]
    )
    assert allocate(inventory, pod_spec("slice"), node("n1")) == [None]  # taken whole, the request fits in it
    assert allocate(inventory, pod_spec("big"), node("n1")) != [None]


def test_devices_taken_whole_each_hold_a_capacity_request_their_capacity_covers() -> None:
    """The DRA differential's seed 364264077, case 47 (issue 79): four 80Gi devices that are not shared,
    three pods each claiming one with `capacity.requests: {memory: 3Gi}`. kube-scheduler binds all three
    (incubating/consumable_capacity.go CmpRequestOverCapacity: the request is within the device's value);
    a device that defines no memory is refused (requestsContainNonExistCapacity)."""
    inventory = inventory_from([device_class()], [node_slice("n1", gpus(4))], [], [wanting("3Gi")])
    assert allocate(inventory, pod_spec(*["slice"] * 4), node("n1")) == [None]
    assert allocate(inventory, pod_spec(*["slice"] * 5), node("n1")) != [None]
    bare = inventory_from([device_class()], [node_slice("n1", [{"name": "gpu-0"}])], [], [wanting("3Gi")])
    assert "with room for spec.devices.requests[].capacity.requests" in str(
        allocate(bare, pod_spec("slice"), node("n1"))
    )


def test_admin_access_takes_a_device_in_use_and_its_allocation_holds_nothing() -> None:
    """allocateddevices.go: an adminAccess result is not allocated; allocator: an admin request may take
    a device in use."""
    plain = {"name": "gpu-0", "capacity": {"memory": {"value": "80Gi"}}}
    in_use = claimed("training", "gpu-0", None)
    monitor = template("monitor", {"name": "gpu", "exactly": {"deviceClassName": "gpu", "adminAccess": True}})
    inventory = inventory_from([device_class()], [node_slice("n1", [plain])], [in_use], [monitor, wanting(None)])
    assert pod_demand("team-a", pod_spec("monitor"), inventory).unmodelled == ()
    assert allocate(inventory, pod_spec("monitor"), node("n1")) == [None]
    assert allocate(inventory, pod_spec("slice"), node("n1")) != [None]
    watched = claimed("watching", "gpu-0", None, adminAccess=True)
    inventory = inventory_from([device_class()], [node_slice("n1", [plain])], [watched], [wanting(None)])
    assert inventory.taken == {} and allocate(inventory, pod_spec("slice"), node("n1")) == [None]


def test_constraints_hold_over_devices_that_allow_multiple_allocations() -> None:
    """Issue 79: a claim's matchAttribute or distinctAttribute over devices that allow multiple allocations
    is allocated as kube-scheduler does (allocator_incubating.go: the constraint applies to such a device
    as to any, each within its capacity); it used to wait for ever. Two shares of 40Gi fit each 80Gi GPU."""

    def on_root(name: str, root: str) -> dict[str, Any]:
        gpu = shared_gpu(name)
        gpu["attributes"]["pcie"] = {"string": root}
        return gpu

    pair = {"requests": {"memory": "40Gi"}}
    request = exactly(count=2)
    request["exactly"]["capacity"] = pair
    match = template("match", request, constraints=[{"matchAttribute": "gpu.example.com/pcie"}])
    distinct = template("distinct", request, constraints=[{"distinctAttribute": "gpu.example.com/pcie"}])
    gpus_ = [on_root("gpu-0", "a"), on_root("gpu-1", "a"), on_root("gpu-2", "b")]
    inventory = inventory_from([device_class()], [node_slice("n1", gpus_)], [], [match, distinct])
    n1 = node("n1")
    # both pairs on root a (gpu-0 and gpu-1 twice over), then none: gpu-2 alone is on b
    assert allocate(inventory, pod_spec("match", "match"), n1) == [None]
    assert allocate(inventory, pod_spec("match", "match", "match"), n1)[0].startswith("no free devices on n1")
    # one on each root: a and b, and again; a third finds b's GPU full
    assert allocate(inventory, pod_spec("distinct", "distinct"), n1) == [None]
    assert allocate(inventory, pod_spec("distinct", "distinct", "distinct"), n1)[0].startswith("no free devices")


AMOUNT = st.integers(0, 12).map(Decimal)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])  # CI's load: no timing
@given(
    capacities=st.lists(st.tuples(AMOUNT, AMOUNT, AMOUNT), min_size=0, max_size=3),
    limit=st.integers(0, 20),
)
def test_the_times_a_share_fits_are_those_taken_one_after_the_other(
    capacities: list[tuple[Decimal, Decimal, Decimal]], limit: int
) -> None:
    """`times_fitting` (one division per capacity) says what `fits` then `add`, repeated, find."""
    device = [device_capacity.Capacity(f"c{i}", value) for i, (value, _, _) in enumerate(capacities)]
    amounts = tuple((f"c{i}", amount) for i, (_, amount, _) in enumerate(capacities))
    used = {f"c{i}": taken for i, (_, _, taken) in enumerate(capacities)}
    left, count = dict(used), 0
    while count < limit and device_capacity.fits(amounts, device, left):
        device_capacity.add(left, amounts)
        count += 1
    assert device_capacity.times_fitting(amounts, device, used, limit) == count


def test_one_request_takes_distinct_devices_and_another_request_may_share_one() -> None:
    """Kubernetes 1.36 and later (allocator_incubating.go allocateOne looks for a request's next device
    after its last): one request's units take distinct devices, a shared one once; another request of the
    same claim may take that device again within its capacity, under matchAttribute too, not under
    distinctAttribute. Placement counts each claim on the node as the allocator allocates it."""

    def share(name: str, count: int = 1) -> dict[str, Any]:
        request = exactly(name, count=count)
        request["exactly"]["capacity"] = {"requests": {"memory": "10Gi"}}
        return request

    gpu = shared_gpu("gpu-0")  # 80Gi: eight shares of 10Gi
    gpu["attributes"]["pcie"] = {"string": "a"}
    on_root = "gpu.example.com/pcie"
    templates = [
        template("pair", share("gpu", count=2)),
        template("each", share("a"), share("b")),
        template("matched", share("a"), share("b"), constraints=[{"matchAttribute": on_root}]),
        template("distinct", share("a"), share("b"), constraints=[{"distinctAttribute": on_root}]),
    ]
    inventory = inventory_from([device_class()], [node_slice("n1", [gpu])], [], templates)
    n1 = node("n1")
    assert allocate(inventory, pod_spec("pair"), n1)[0].startswith("no free devices on n1")
    assert allocate(inventory, pod_spec("each"), n1) == [None]
    assert allocate(inventory, pod_spec("matched"), n1) == [None]
    assert allocate(inventory, pod_spec("distinct"), n1)[0].startswith("no free devices on n1")
    totals = inventory.class_totals(n1)
    for name, held in (("pair", 0), ("each", 4), ("matched", 4), ("distinct", 0)):
        (resource,) = pod_demand("team-a", pod_spec(name), inventory).units()
        assert totals.get(resource, 0) == held, name
    # a second GPU: the pair takes one share of each, four times over
    inventory = inventory_from([device_class()], [node_slice("n1", [gpu, shared_gpu("gpu-1")])], [], templates)
    (resource,) = pod_demand("team-a", pod_spec("pair"), inventory).units()
    assert allocate(inventory, pod_spec("pair"), n1) == [None]
    assert inventory.class_totals(n1)[resource] == 8


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kinds=st.lists(st.sampled_from(["whole", "shared", "small"]), max_size=6),
    count=st.integers(1, 3),
    memory=st.sampled_from([None, "10Gi", "30Gi", "50Gi"]),
)
def test_claims_counted_per_node_over_shared_devices_are_those_the_allocator_gives_pod_after_pod(
    kinds: list[str], count: int, memory: str | None
) -> None:
    """A request of `count` devices (with a capacity request or none) over devices taken whole and devices
    shared (80Gi, or 30Gi with a 10Gi default share): the node's count is the number of times the allocator,
    pod after pod, allocates the claim there."""
    made = []
    for i, kind in enumerate(kinds):
        if kind == "whole":
            made.append({**gpus(1)[0], "name": f"g{i}", "capacity": {"memory": {"value": "80Gi"}}})
        else:
            made.append(shared_gpu(f"g{i}", "80Gi" if kind == "shared" else "30Gi", default="10Gi"))
    request = exactly(count=count)
    if memory is not None:
        request["exactly"]["capacity"] = {"requests": {"memory": memory}}
    inventory = inventory_from([device_class()], [node_slice("n0", made)], [], [template("t", request)])
    demand = pod_demand("team-a", pod_spec("t"), inventory)
    allocator, allocated = Allocator(inventory), 0
    while allocator.allocate(demand, node("n0")) is None and allocated < 64:
        allocated += 1
    counted = inventory.class_totals(node("n0"))  # as placement reads it: how many pods' units the node holds
    assert min(counted.get(resource, 0) // units for resource, units in demand.units().items()) == allocated


def test_a_device_allowing_multiple_allocations_published_later_changes_the_demands_remembered() -> None:
    """A request of two devices is counted per node by its class while no device allows multiple
    allocations, and as a claim of its own once one does (distinct_shares): the demands an inventory
    remembers from the one before it are read again then, and pods are given the new shape (demand_basis)."""
    from webhook.controller.observe.pool_book import PoolBook

    book = PoolBook()
    book.apply({"n1": node_slice("n1", gpus(2))})
    pair = template("pair", exactly(count=2))
    first = inventory_from([device_class()], (), [], [pair], gathered=book.gathered())
    spec = pod_spec("pair")
    assert not first.demand("team-a", spec).claims[0].distinct_shares
    book.apply({"n2": node_slice("n2", [shared_gpu("gpu-0"), shared_gpu("gpu-1")])})
    second = inventory_from([device_class()], (), [], [pair], gathered=book.gathered()).remembering(first)
    assert second.demand_basis != first.demand_basis
    assert second.demand("team-a", spec).claims[0].distinct_shares
    book.apply({"n3": node_slice("n3", gpus(2))})  # one more whole-device node: the basis carries over
    third = inventory_from([device_class()], (), [], [pair], gathered=book.gathered()).remembering(second)
    assert third.demand_basis == second.demand_basis and bool(third.shared_devices)
    book.apply({"n2": None})  # the only shared devices gone
    fourth = inventory_from([device_class()], (), [], [pair], gathered=book.gathered()).remembering(third)
    assert not fourth.shared_devices and not fourth.demand("team-a", spec).claims[0].distinct_shares
