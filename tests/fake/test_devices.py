"""The gate's model of DRA devices against the rules of kube-scheduler's structured allocator
(k8s.io/dynamic-resource-allocation structured/internal/stable) and Kubernetes' selector CEL
(k8s.io/dynamic-resource-allocation/cel/compile.go, k8s.io/apiserver/pkg/cel/library)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.cluster import gated_job_pods
from tests.cluster import node as api_node
from webhook.controller.decide import device_cel, devices
from webhook.controller.decide.devices import Allocator, inventory_from, pod_demand
from webhook.controller.decide.shapes import Node
from webhook.controller.observe.cluster import ClusterIndex
from webhook.controller.observe.informer import trim_node
from webhook.controller.observe.pool_book import PoolBook

DRIVER = "gpu.example.com"


def device_class(name: str = "gpu", *selectors: str, extended: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}
    spec["selectors"] += [{"cel": {"expression": s}} for s in selectors]
    if extended:
        spec["extendedResourceName"] = extended
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


def gpus(count: int, model: str = "a100", memory: str = "80Gi") -> list[dict[str, Any]]:
    return [
        {
            "name": f"gpu-{i}",
            "attributes": {"model": {"string": model}, "index": {"int": i}, "driverVersion": {"version": "550.1.0"}},
            "capacity": {"memory": {"value": memory}},
        }
        for i in range(count)
    ]


def node_slice(
    node: str, devs: list[dict[str, Any]], pool: str | None = None, generation: int = 1, count: int = 1, **spec: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "driver": DRIVER,
        "pool": {"name": pool or node, "generation": generation, "resourceSliceCount": count},
        "devices": devs,
        **spec,
    }
    if "allNodes" not in spec and "nodeSelector" not in spec:
        body["nodeName"] = node
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{pool}"},
        "spec": body,
    }


def template(name: str, *requests: dict[str, Any], constraints: list[Any] | None = None) -> dict[str, Any]:
    devices_spec: dict[str, Any] = {"requests": list(requests)}
    if constraints:
        devices_spec["constraints"] = constraints
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"spec": {"devices": devices_spec}},
    }


def exactly(
    name: str = "gpu", count: int = 1, cls: str = "gpu", *selectors: str, mode: str = "ExactCount"
) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": cls, "allocationMode": mode}
    if mode == "ExactCount":
        body["count"] = count
    if selectors:
        body["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"name": name, "exactly": body}


def pod_spec(*templates: str, claims: tuple[str, ...] = ()) -> dict[str, Any]:
    entries = [{"name": f"t{i}", "resourceClaimTemplateName": t} for i, t in enumerate(templates)]
    entries += [{"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claims)]
    return {"containers": [{"name": "c", "image": "x"}], "resourceClaims": entries}


def node(name: str, **labels: str) -> Node:
    return Node(name, {"cpu": 8000, "pods": 110}, labels)


def allocate(inventory: devices.Inventory, spec: dict[str, Any], *on: Node) -> list[str | None]:
    allocator = Allocator(inventory, nodes=on)
    demand = pod_demand("team-a", spec, inventory)
    return [allocator.allocate(demand, n) for n in on]


# --- CEL ----------------------------------------------------------------------------------------------


def variable(**attributes: Any) -> Any:
    return device_cel.device_variable(DRIVER, attributes, {"memory": {"value": "80Gi"}})


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ('device.attributes["gpu.example.com"].model == "a100"', True),
        # a name without a domain is the driver's (compile.go parseQualifiedName)
        ('device.attributes["gpu.example.com"].index == 3', True),
        ('device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) > 0', True),
        ('device.capacity["gpu.example.com"].memory.isLessThan(quantity("0.5Ti"))', True),
        ('device.capacity["gpu.example.com"].memory.asInteger() == 85899345920', True),
        ('quantity("1500m").isInteger()', False),
        ('quantity("2").add(1).compareTo(quantity("3")) == 0', True),
        ('device.attributes["gpu.example.com"].driverVersion.isGreaterThan(semver("550.0.9"))', True),
        ('device.attributes["gpu.example.com"].driverVersion.major() == 550', True),
        ('semver("1.0.0-rc.1").isLessThan(semver("1.0.0"))', True),
        ('semver("1.0.0-alpha.2").isGreaterThan(semver("1.0.0-alpha.10"))', False),
        ('isSemver("1.2") || isQuantity("1 Gi")', False),
        # an unknown domain is an empty map (newStringInterfaceMapWithDefault)
        ('device.attributes["other.example.com"].size() == 0', True),
        ('"model" in device.attributes["gpu.example.com"]', True),
        # cel.bind (ext.Bindings, compile.go), nested, its variable shadowing nothing outside it
        ('cel.bind(a, device.attributes["gpu.example.com"], a.model == "a100" && a.index == 3)', True),
        ('cel.bind(a, device.attributes["gpu.example.com"], cel.bind(i, a.index, i * i == 9))', True),
        ("cel.bind(x, 2, x + 1) == 3 && [1, 2].all(x, x > 0)", True),
        # the strings extension at version 2 (cel-go ext/strings.go), indices in code points
        ('device.attributes["gpu.example.com"].model.upperAscii() == "A100"', True),
        ('"TacoCÆt".lowerAscii() == "tacocÆt"', True),
        ('"hello".charAt(4) == "o" && "hello".charAt(5) == ""', True),
        ('"hello mellow".indexOf("ello") == 1 && "hello mellow".indexOf("ello", 2) == 7', True),
        ('"hello mellow".indexOf("", 2) == 2 && "hello mellow".indexOf("ello", 20) == -1', True),
        ('"hello mellow".lastIndexOf("ello") == 7 && "hello mellow".lastIndexOf("ello", 6) == 1', True),
        ('"hello mellow".lastIndexOf("") == 12 && "".lastIndexOf("a") == -1', True),
        ('"a,b,c".split(",") == ["a", "b", "c"] && "a,b,c".split(",", 2) == ["a", "b,c"]', True),
        ('"a,b".split(",", 0) == [] && "abc".split("") == ["a", "b", "c"]', True),
        ('"tacocat".substring(4) == "cat" && "tacocat".substring(0, 4) == "taco"', True),
        ('"  \\ttrim\\n ".trim() == "trim"', True),
        ('"aaa".replace("a", "b") == "bbb" && "aaa".replace("a", "b", 2) == "bba"', True),
        ('["a", "b"].join() == "ab" && ["a", "b"].join("-") == "a-b" && [].join("/") == ""', True),
        (r'strings.quote("x\ny") == "\"x\\ny\"" && strings.quote("a") == "\"a\""', True),
        # Kubernetes' lists library, the sets and lists extensions, its regular expressions
        ("[1, 2, 1].indexOf(1) == 0 && [1, 2, 1].lastIndexOf(1) == 2 && [1].indexOf(3) == -1", True),
        ("[1, 2, 2].isSorted() && ![2, 1].isSorted() && [1, 3].sum() == 4 && [].sum() == 0", True),
        ('[1, 3].min() == 1 && [1, 3].max() == 3 && ["b", "a"].sort() == ["a", "b"]', True),
        ("sets.contains([1, 2, 3], [1, 3]) && !sets.contains([1], [2]) && sets.equivalent([1, 2], [2, 1, 1])", True),
        ("sets.intersects([1, 2], [2.0]) && !sets.contains([true], [1])", True),  # heterogeneous equality
        ("lists.range(3) == [0, 1, 2] && [1, 2, 2, 3].distinct() == [1, 2, 3] && [5, 3].reverse() == [3, 5]", True),
        ("[1, [2, [3, 4]]].flatten() == [1, 2, [3, 4]] && [1, [2, [3]]].flatten(2) == [1, 2, 3]", True),
        ("[1, 2, 3, 4].slice(1, 3) == [2, 3] && [1, 2, 3].map(x, x > 1, x * 2) == [4, 6]", True),
        ('"abc 123".find("[0-9]+") == "123" && "a1b2".findAll("[0-9]") == ["1", "2"]', True),
        ('sets.contains(["a100", "h100"], [device.attributes["gpu.example.com"].model])', True),
        ('["bb", "a", "ccc"].sortBy(s, size(s)) == ["a", "bb", "ccc"] && [3, 1, 2].sortBy(x, -x) == [3, 2, 1]', True),
        # two-variable comprehensions (ext.TwoVarComprehensions): a list's index and element, a map's key and value
        ("[3, 4].all(i, v, v > i) && ![3, 0].all(i, v, v > i) && [1, 1, 2].existsOne(i, v, v == 2)", True),
        ('{"a": 1, "b": 2}.exists(k, v, k == "b" && v == 2)', True),
        ('{"a": 1}.transformList(k, v, k + string(v)) == ["a1"]', True),
        ("[10, 20].transformList(i, v, v + i) == [10, 21]", True),
        ("[10, 20, 30].transformList(i, v, i > 0, v * 2) == [40, 60]", True),
        ("[[1, 2], [3]].all(i, l, l.all(j, x, x > i))", True),
        ('{"greeting": "hello"}.transformMap(k, v, v + "!") == {"greeting": "hello!"}', True),
        ("[1, 2, 3].transformMap(i, v, i % 2 == 0, v * v) == {0: 1, 2: 9}", True),
        ("[1, 2, 3].transformMapEntry(i, v, {v: i}) == {1: 0, 2: 1, 3: 2}", True),
        ('[device.attributes["gpu.example.com"].index].all(i, v, v == 3)', True),
        # Kubernetes' IP and CIDR libraries (library/ip.go, cidr.go)
        ('cidr("10.0.0.0/8").containsIP("10.1.2.3") && !cidr("10.0.0.0/8").containsIP(ip("::1"))', True),
        ('ip("127.0.0.1").family() == 4 && ip("::1").isLoopback() && ip("0.0.0.0").isUnspecified()', True),
        ('isIP("1.2.3.4") && !isIP("1.2.3.256") && !isIP("::ffff:1.2.3.4") && !isIP("fe80::1%eth0")', True),
        ('ip.isCanonical("2001:db8::abcd") && !ip.isCanonical("2001:DB8::ABCD") && !isIP("01.2.3.4")', True),
        ('ip("ff12::1").isLinkLocalMulticast() && ip("169.254.1.1").isLinkLocalUnicast()', True),
        ('ip("10.0.0.1").isGlobalUnicast() && !ip("255.255.255.255").isGlobalUnicast()', True),
        ('cidr("10.0.0.1/8").ip() == ip("10.0.0.1") && cidr("10.0.0.1/8").masked() == cidr("10.0.0.0/8")', True),
        ('cidr("10.0.0.0/8").containsCIDR("10.1.0.0/16") && !cidr("10.1.0.0/16").containsCIDR("10.0.0.0/8")', True),
        ('isCIDR("10.0.0.0/8") && !isCIDR("10.0.0.0/08") && cidr("10.0.0.0/8").prefixLength() == 8', True),
        ('string(ip("2001:DB8::1")) == "2001:db8::1"', True),
        ("device.allowMultipleAllocations", False),
    ],
)
def test_selectors_evaluate_as_kubernetes_cel_does(expression: str, expected: bool) -> None:
    device = variable(model={"string": "a100"}, index={"int": 3}, driverVersion={"version": "550.1.0"})
    assert device_cel.matches(expression, device) is expected


@pytest.mark.parametrize(
    "expression",
    [
        '{"a": "x", "b": "x"}.transformMapEntry(k, v, {v: k}) == {}',  # a key made twice
        '"hello".charAt(6) == ""',
        '"hello".indexOf("l", -1) == 2',
        '"hello".substring(3, 2) == ""',
        '"a".substring(2) == ""',
    ],
)
def test_an_index_out_of_range_or_a_key_made_twice_is_a_runtime_error(expression: str) -> None:
    with pytest.raises(device_cel.SelectorError) as caught:
        device_cel.matches(expression, variable())
    assert not caught.value.unreadable


def test_a_device_that_allows_multiple_allocations_says_so_to_selectors() -> None:
    """compile.go: `device.allowMultipleAllocations` is the device's own (DRAConsumableCapacity, on in 1.36)."""
    shared = device_cel.device_variable(DRIVER, {}, {}, True)
    assert device_cel.matches("device.allowMultipleAllocations", shared)
    assert device_cel.evaluate("device.allowMultipleAllocations", (DRIVER, {}, {}, True)) is True


def test_a_missing_attribute_is_a_runtime_error_not_a_mismatch() -> None:
    """allocator_stable.go selectorsMatch: a CEL runtime error fails the allocation (no silent 'no')."""
    with pytest.raises(device_cel.SelectorError) as caught:
        device_cel.matches('device.attributes["other.example.com"].model == "x"', variable())
    assert not caught.value.unreadable


def test_a_selector_the_evaluator_cannot_read_is_said_so() -> None:
    """What this evaluator cannot do as kube-scheduler does (a time finer than cel-python's microsecond),
    and text that does not parse: unreadable, never a mismatch."""
    for expression in (
        'timestamp("2023-02-03T23:31:20.000000001Z") > timestamp("2023-02-03T23:31:20Z")',
        "device.driver ==",
    ):
        with pytest.raises(device_cel.SelectorError) as caught:
            device_cel.matches(expression, variable())
        assert caught.value.unreadable, expression


# --- pools and allocation ---------------------------------------------------------------------------


def test_a_pod_is_allocated_its_count_of_devices_the_class_and_the_request_select() -> None:
    inventory = inventory_from(
        [device_class("gpu")],
        [node_slice("n1", gpus(4, "a100")), node_slice("n2", gpus(4, "h100"))],
        [],
        [template("two-h100", exactly("g", 2, "gpu", 'device.attributes["gpu.example.com"].model == "h100"'))],
    )
    assert allocate(inventory, pod_spec("two-h100"), node("n1"), node("n2")) == [
        "no free devices on n1 for template team-a/two-h100",
        None,
    ]
    # devices picked for one pod are taken for the next: n2's four h100 hold two pods of two
    allocator = Allocator(inventory)
    demand = pod_demand("team-a", pod_spec("two-h100"), inventory)
    assert [allocator.allocate(demand, node("n2")) for _ in range(3)][:2] == [None, None]
    assert allocator.allocate(demand, node("n2")) is not None


def test_devices_an_allocated_claim_holds_are_taken() -> None:
    claim = {
        "metadata": {"name": "other", "namespace": "team-b"},
        "status": {"allocation": {"devices": {"results": [{"driver": DRIVER, "pool": "n1", "device": "gpu-0"}]}}},
    }
    inventory = inventory_from(
        [device_class()], [node_slice("n1", gpus(2))], [claim], [template("two", exactly(count=2))]
    )
    assert allocate(inventory, pod_spec("two"), node("n1")) == ["no free devices on n1 for template team-a/two"]
    assert inventory.class_totals(node("n1")) == {"deviceclass.resource.kubernetes.io/gpu": 1}


def test_only_the_newest_generation_counts_and_all_needs_a_complete_pool() -> None:
    """pools_stable.go GatherPools: slices of an older generation are ignored; a pool is complete when
    all resourceSliceCount slices of its generation are there, and `All` refuses an incomplete one."""
    old = node_slice("n1", gpus(8), pool="p", generation=1)
    new = node_slice("n1", gpus(2), pool="p", generation=2, count=2)  # one of its two slices published
    inventory = inventory_from([device_class()], [old, new], [], [template("all", exactly(mode="All"))])
    assert inventory.class_totals(node("n1")) == {"deviceclass.resource.kubernetes.io/gpu": 2}
    assert allocate(inventory, pod_spec("all"), node("n1")) == ["no free devices on n1 for template team-a/all"]
    complete = inventory_from(
        [device_class()], [new, node_slice("n1", [], pool="p", generation=2, count=2)], [], inventory.templates.values()
    )
    assert allocate(complete, pod_spec("all"), node("n1")) == [None]


def test_first_available_takes_the_first_choice_that_can_be_allocated() -> None:
    first = {
        "name": "g",
        "firstAvailable": [
            {"name": "big", "deviceClassName": "gpu", "count": 4},
            {"name": "small", "deviceClassName": "gpu", "count": 1},
        ],
    }
    inventory = inventory_from([device_class()], [node_slice("n1", gpus(2))], [], [template("either", first)])
    allocator = Allocator(inventory)
    assert allocator.allocate(pod_demand("team-a", pod_spec("either"), inventory), node("n1")) is None
    assert len(allocator.picked) == 1  # the second choice: four are not there


def test_requests_are_matched_to_devices_as_a_whole_not_first_come() -> None:
    """Request `any` could take the one h100 that request `h100` needs: an exhaustive allocator (as
    kube-scheduler's, which backtracks) finds the allocation that works."""
    inventory = inventory_from(
        [device_class()],
        [node_slice("n1", [*gpus(1, "h100"), *[{**d, "name": f"x{i}"} for i, d in enumerate(gpus(1, "a100"))]])],
        [],
        [
            template(
                "both", exactly("any"), exactly("h", 1, "gpu", 'device.attributes["gpu.example.com"].model == "h100"')
            )
        ],
    )
    assert allocate(inventory, pod_spec("both"), node("n1")) == [None]


def test_tainted_devices_are_taken_only_by_requests_that_tolerate_them() -> None:
    tainted = gpus(1)
    tainted[0]["taints"] = [{"key": "broken", "effect": "NoSchedule"}]
    tolerating = exactly()
    tolerating["exactly"]["tolerations"] = [{"key": "broken", "operator": "Exists"}]
    inventory = inventory_from(
        [device_class()],
        [node_slice("n1", tainted)],
        [],
        [template("plain", exactly()), template("tolerant", tolerating)],
    )
    assert allocate(inventory, pod_spec("plain"), node("n1")) != [None]
    assert allocate(inventory, pod_spec("tolerant"), node("n1")) == [None]


def test_slices_apply_to_nodes_by_name_selector_or_all() -> None:
    selected = node_slice(
        "rack",
        gpus(2),
        pool="rack-pool",
        nodeSelector={
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}]
        },
    )
    everywhere = node_slice("all", gpus(1), pool="net", allNodes=True)
    inventory = inventory_from([device_class()], [selected, everywhere], [], [])
    assert inventory.class_totals(node("n1", rack="r1")) == {"deviceclass.resource.kubernetes.io/gpu": 3}
    assert inventory.class_totals(node("n2", rack="r2")) == {"deviceclass.resource.kubernetes.io/gpu": 1}


def test_a_node_relabelled_into_a_pools_selection_counts_its_devices_at_once() -> None:
    """A node that gains the label a pool's nodeSelector names, while no device object changed: its
    devices count from the node's change on (the pools a node reaches were remembered by its name alone,
    so it waited for the next change of a slice or claim)."""
    rack = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}]}
    inventory = inventory_from([device_class()], [node_slice("rack", gpus(2), pool="rack", nodeSelector=rack)], [], [])
    index = ClusterIndex()
    index.apply_nodes({"/n1": trim_node(api_node("n1", labels={"rack": "r2"}))})
    index.use_devices(inventory)
    resource = "deviceclass.resource.kubernetes.io/gpu"
    assert resource not in index.nodes["n1"].allocatable
    index.apply_nodes({"/n1": trim_node(api_node("n1", labels={"rack": "r1"}))})
    assert index.nodes["n1"].allocatable.get(resource) == 2
    index.apply_nodes({"/n1": trim_node(api_node("n1", labels={"rack": "r3"}))})
    assert resource not in index.nodes["n1"].allocatable


def test_a_shared_claim_is_allocated_once_and_its_pods_go_where_it_reaches() -> None:
    shared = {"metadata": {"name": "domain", "namespace": "team-a"}, "spec": {"devices": {"requests": [exactly()]}}}
    inventory = inventory_from([device_class()], [node_slice("n1", gpus(1)), node_slice("n2", gpus(1))], [shared], [])
    nodes = (node("n1"), node("n2"))
    allocator = Allocator(inventory, nodes=nodes)
    demand = pod_demand("team-a", pod_spec(claims=("domain",)), inventory)
    assert allocator.allocate(demand, nodes[0]) is None
    assert allocator.allocate(demand, nodes[0]) is None  # counted once: the second pod takes nothing more
    assert len(allocator.picked) == 1
    assert "cannot reach" in str(allocator.allocate(demand, nodes[1]))
    # allocated already: its nodeSelector binds the pods
    shared["status"] = {
        "allocation": {
            "devices": {"results": [{"driver": DRIVER, "pool": "n2", "device": "gpu-0"}]},
            "nodeSelector": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}]
            },
        }
    }
    allocated = inventory_from([device_class()], [node_slice("n1", gpus(1)), node_slice("n2", gpus(1))], [shared], [])
    assert allocate(allocated, pod_spec(claims=("domain",)), *nodes) == [
        "claim team-a/domain is allocated where this node cannot reach it",
        None,
    ]


def test_what_cannot_be_known_or_judged_is_named() -> None:
    constrained = template("same-pcie", exactly(count=2), constraints=[{"matchAttribute": "gpu.example.com/pcie"}])
    inventory = inventory_from(
        [device_class()], [node_slice("n1", gpus(4))], [], [constrained, template("nope", exactly(cls="tpu"))]
    )
    assert pod_demand("team-a", pod_spec("missing"), inventory).problems == (
        "ResourceClaimTemplate missing does not exist",
    )
    assert pod_demand("team-a", pod_spec("nope"), inventory).problems == (
        "DeviceClass tpu does not exist (template team-a/nope)",
    )
    assert pod_demand("team-a", pod_spec("same-pcie"), inventory).unmodelled == ()  # modelled now


def test_devices_that_each_name_their_nodes_are_offered_only_there() -> None:
    """perDeviceNodeSelection (beta in 1.36 with partitionable devices): a device with its own nodeName,
    nodeSelector or allNodes is selectable only on the nodes it names (allocator_stable.go
    isSelectable); the slice's shared counters still count once for the pool."""
    devs = gpus(4)
    devs[0]["nodeName"], devs[1]["nodeName"] = "n1", "n1"
    devs[2]["nodeSelector"] = {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r2"]}]}]
    }
    devs[3]["allNodes"] = True
    spread = node_slice("any", devs, pool="spread", perDeviceNodeSelection=True)
    del spread["spec"]["nodeName"]
    inventory = inventory_from([device_class()], [spread], [], [template("two", exactly(count=2))])
    n1, n2, n3 = node("n1"), node("n2", rack="r2"), node("n3")
    totals = {n.name: inventory.class_totals(n).get("deviceclass.resource.kubernetes.io/gpu") for n in (n1, n2, n3)}
    assert totals == {"n1": 3, "n2": 2, "n3": 1}
    assert allocate(inventory, pod_spec("two"), n1, n2, n3)[:2] == [None, None]
    assert allocate(inventory, pod_spec("two"), n3) != [None]  # only the allNodes device reaches it


def test_a_class_with_an_extended_resource_serves_an_unchanged_manifest() -> None:
    """KEP-5004: a pod asking for nvidia.com/gpu in its containers gets devices of the class that names
    it, on nodes whose kubelet does not advertise that resource itself."""
    inventory = inventory_from([device_class(extended="nvidia.com/gpu")], [node_slice("n1", gpus(2))], [], [])
    spec = {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}
    assert inventory.class_totals(node("n1"))["nvidia.com/gpu"] == 2
    assert allocate(inventory, spec, node("n1")) == [None]
    spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "3"
    assert allocate(inventory, spec, node("n1")) != [None]


def test_a_malformed_slice_is_named_and_the_rest_still_counts() -> None:
    bad = node_slice("n1", gpus(1), pool="bad")
    bad["spec"]["pool"]["generation"] = "many"
    inventory = inventory_from([device_class()], [bad, node_slice("n2", gpus(1)), {"spec": None}], [], [])
    assert inventory.problems and "unreadable pool" in inventory.problems[0]
    assert inventory.class_totals(node("n2")) == {"deviceclass.resource.kubernetes.io/gpu": 1}


# --- the gate with devices (the controller on the test API server) -----------------------------------


def dra_controller(server: Any, api: Any, clock: Any = None) -> tuple[Any, Callable[[], None]]:
    from tests.cluster import Clock
    from tests.recorder import ListRecorder
    from webhook.controller.observe.devices import RESOURCES
    from webhook.controller.run.reconciler import Controller
    from webhook.informer import Informer

    server.store.served["resource.k8s.io/v1"] = {r.plural for r in RESOURCES}
    informers = {(r.group_version, r.plural): Informer(api, r, watch_seconds=1) for r in RESOURCES}

    def relist() -> None:
        for informer in informers.values():
            informer.relist()

    relist()
    return Controller(api, recorder=ListRecorder(), clock=clock or Clock(), informers=informers), relist


def job_claiming(store: Any, name: str, parallelism: int, claim_template: str) -> None:
    from tests.cluster import add_job, add_job_pods

    job = add_job(store, name, parallelism=parallelism, cpu="1")
    job["spec"]["template"]["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": claim_template}]
    add_job_pods(store, job)


def test_the_gate_releases_a_gang_only_when_every_pod_has_its_devices_and_pins_each_to_them(
    apiserver: Any, api: Any
) -> None:
    """Devices published for 8 of a 12-pod gang's pods: nothing is released (kube-scheduler would bind
    the 8 and leave 4 waiting on devices: the partial start). Devices for all: released whole, each pod
    pinned to a node whose devices it gets."""
    from tests.cluster import node as api_node
    from tests.cluster import pods
    from webhook.controller.decide.pods import pinned_to

    store = apiserver.store
    for i in range(4):
        store.create("v1", "nodes", "", api_node(f"w{i}", cpu="64"))
    store.create("resource.k8s.io/v1", "deviceclasses", "", device_class())
    store.create("resource.k8s.io/v1", "resourceclaimtemplates", "team-a", template("one-gpu", exactly()))
    for i in range(2):  # 4 devices each on w0 and w1: 8
        store.create("resource.k8s.io/v1", "resourceslices", "", node_slice(f"w{i}", gpus(4)))
    job_claiming(store, "train", 12, "one-gpu")
    controller, relist = dra_controller(apiserver, api)
    decision = controller.reconcile_once()["team-a/job-train"]
    # devices for 8: the cluster could not hold it even empty, until more are published
    assert decision.state == "NeverFits" and "could hold 8" in decision.message, decision.message
    assert all(p["spec"].get("schedulingGates") for p in pods(store))
    for i in range(2, 4):
        store.create("resource.k8s.io/v1", "resourceslices", "", node_slice(f"w{i}", gpus(4)))
    relist()
    decision = controller.reconcile_once()["team-a/job-train"]
    assert decision.state == "Release" and len(decision.release) == 12, decision.message
    by_node: dict[str, int] = {}
    for pod in pods(store):
        assert not pod["spec"].get("schedulingGates")
        node_name = pinned_to(pod["spec"])
        assert node_name is not None
        by_node[node_name] = by_node.get(node_name, 0) + 1
    assert sum(by_node.values()) == 12 and max(by_node.values()) == 4  # never more pods than a node's devices
    # kube-scheduler binds them and allocates each pod's own claim: counted once, by the pods
    for pod in pods(store):
        node_name = pinned_to(pod["spec"])
        store.bind("team-a", pod["metadata"]["name"], node_name)
        taken = {c["metadata"]["name"] for c in store.list("resource.k8s.io/v1", "resourceclaims", "team-a")[0]}
        device = next(f"gpu-{i}" for i in range(4) if f"{node_name}-gpu-{i}" not in taken)
        store.create(
            "resource.k8s.io/v1",
            "resourceclaims",
            "team-a",
            {
                "metadata": {
                    "name": f"{node_name}-{device}",
                    "ownerReferences": [
                        {
                            "apiVersion": "v1",
                            "kind": "Pod",
                            "name": pod["metadata"]["name"],
                            "uid": pod["metadata"]["uid"],
                        }
                    ],
                },
                "spec": template("one-gpu", exactly())["spec"]["spec"],
                "status": {
                    "allocation": {
                        "devices": {
                            "results": [{"request": "gpu", "driver": DRIVER, "pool": node_name, "device": device}]
                        }
                    }
                },
            },
        )
    relist()
    assert controller.reconcile_once()["team-a/job-train"].state == "Running"
    # the four devices left take a second gang of four, whole, and a third waits
    job_claiming(store, "second", 4, "one-gpu")
    decision = controller.reconcile_once()["team-a/job-second"]
    assert decision.state == "Release" and set(decision.release.values()) == set(
        by_node.keys() ^ {"w0", "w1", "w2", "w3"}
    )
    job_claiming(store, "third", 1, "one-gpu")
    decision = controller.reconcile_once()["team-a/job-third"]
    assert decision.state != "Release", decision.message


def test_a_gang_whose_devices_cannot_be_judged_or_known_waits_saying_why(apiserver: Any, api: Any) -> None:
    """A template that does not exist: the gang waits, its decision naming why, none of its pods released;
    a gang asking for capacity of its devices beside it is judged and released."""
    from tests.cluster import node as api_node
    from tests.cluster import pods

    store = apiserver.store
    store.create("v1", "nodes", "", api_node("w0", cpu="64"))
    store.create("resource.k8s.io/v1", "deviceclasses", "", device_class())
    store.create("resource.k8s.io/v1", "resourceslices", "", node_slice("w0", gpus(8)))
    consumable = {"name": "g", "exactly": {"deviceClassName": "gpu", "capacity": {"requests": {"memory": "1Gi"}}}}
    store.create("resource.k8s.io/v1", "resourceclaimtemplates", "team-a", template("share", consumable))
    job_claiming(store, "consumable", 2, "share")
    job_claiming(store, "missing", 2, "no-such-template")
    controller, _ = dra_controller(apiserver, api)
    decisions = controller.reconcile_once()
    # consumable capacity is judged now: 1Gi of an 80Gi device each, two pods on w0's eight
    assert decisions["team-a/job-consumable"].state == "Release", decisions["team-a/job-consumable"].message
    missing = decisions["team-a/job-missing"]
    assert (
        missing.state == "WaitingForCapacity"
        and "ResourceClaimTemplate no-such-template does not exist" in missing.message
    )
    missing_pods = [p for p in pods(store) if "missing" in p["metadata"]["name"]]
    assert missing_pods and all(p["spec"].get("schedulingGates") for p in missing_pods)


def test_placement_counts_what_a_request_selects_and_the_devices_check_what_requests_share(
    apiserver: Any, api: Any
) -> None:
    """Placement counts the devices a request's selectors take (an a100 is no room for an h100 request);
    two requests of one pod that may take the same device are counted apart, so the exact allocation
    before the release decides: one h100 cannot be both the pod's `any` and its `h100`."""
    from tests.cluster import node as api_node
    from tests.cluster import pods
    from webhook.controller.decide.pods import pinned_to

    store = apiserver.store
    for name in ("w0", "w1"):
        store.create("v1", "nodes", "", api_node(name, cpu="64"))
    store.create("resource.k8s.io/v1", "deviceclasses", "", device_class())
    h100 = exactly("h", 1, "gpu", 'device.attributes["gpu.example.com"].model == "h100"')
    store.create("resource.k8s.io/v1", "resourceclaimtemplates", "team-a", template("both", exactly("any"), h100))
    store.create("resource.k8s.io/v1", "resourceslices", "", node_slice("w0", gpus(4, "a100")))
    store.create("resource.k8s.io/v1", "resourceslices", "", node_slice("w1", gpus(1, "h100")))
    job_claiming(store, "train", 1, "both")
    controller, relist = dra_controller(apiserver, api)
    decision = controller.reconcile_once()["team-a/job-train"]
    assert decision.state == "WaitingForCapacity", decision.message
    assert "not their devices" in decision.message and "no free devices on w1" in decision.message
    assert all(p["spec"].get("schedulingGates") for p in pods(store))
    store.create("resource.k8s.io/v1", "resourceslices", "", node_slice("w1", gpus(1, "a100"), pool="more"))
    relist()
    decision = controller.reconcile_once()["team-a/job-train"]
    assert decision.state == "Release", decision.message
    assert {pinned_to(p["spec"]) for p in pods(store)} == {"w1"}


def test_a_gang_sharing_one_claim_is_placed_where_its_allocation_reaches(apiserver: Any, api: Any) -> None:
    """Every pod names ResourceClaim `domain` (one interconnect domain for the gang): it is allocated
    once, on the first pod's node, and kube-scheduler then puts every other pod only where that
    allocation reaches. The gate places the whole gang inside one such reach: w0's device reaches w0
    alone, which has CPU for two of the four pods; w1's reaches w1, which holds all four."""
    from tests.cluster import add_job, add_job_pods, pods
    from tests.cluster import node as api_node
    from webhook.controller.decide.pods import pinned_to

    store = apiserver.store
    store.create("v1", "nodes", "", api_node("w0", cpu="4"))
    store.create("v1", "nodes", "", api_node("w1", cpu="12"))
    store.create("resource.k8s.io/v1", "deviceclasses", "", device_class())
    for name in ("w0", "w1"):
        store.create("resource.k8s.io/v1", "resourceslices", "", node_slice(name, gpus(1)))
    domain = {"metadata": {"name": "domain"}, "spec": {"devices": {"requests": [exactly()]}}}
    store.create("resource.k8s.io/v1", "resourceclaims", "team-a", domain)
    job = add_job(store, "train", parallelism=3, cpu="3")
    job["spec"]["template"]["spec"]["resourceClaims"] = [{"name": "domain", "resourceClaimName": "domain"}]
    add_job_pods(store, job)
    controller, _ = dra_controller(apiserver, api)
    decision = controller.reconcile_once()["team-a/job-train"]
    assert decision.state == "Release", decision.message
    assert {pinned_to(p["spec"]) for p in pods(store)} == {"w1"}


@pytest.mark.parametrize("version", ["1.36", "1.37"])
def test_a_claim_every_pod_shares_is_the_native_pod_groups_own(version: str) -> None:
    """KEP-5729: the PodGroup's spec.resourceClaims, for the claims every pod template names by
    resourceClaimName (a pod's own claims from templates stay its own). The API server's own validation
    of it: tests/real/test_real_dra.py (kubernetes-validate has no schema of these API versions)."""
    from tests import builders as b
    from webhook import gangs
    from webhook.backends import make

    job = b.job("train", parallelism=4, spec=b.pod_spec(b.container("1", "1Gi")))
    job["metadata"]["namespace"] = "team-a"
    job["spec"]["template"]["spec"]["resourceClaims"] = [
        {"name": "domain", "resourceClaimName": "train-domain"},
        {"name": "gpu", "resourceClaimTemplateName": "one-gpu"},
    ]
    native = make("native", kubernetes_version=version)
    objects = native.group_objects(gangs.analyze(job).gangs, devices_namespace())
    (group,) = [o for o in objects if o["kind"] == "PodGroup"]
    assert group["spec"]["resourceClaims"] == [{"name": "domain", "resourceClaimName": "train-domain"}]


def devices_namespace() -> Any:
    from webhook.backends import NamespaceInfo

    return NamespaceInfo()


def test_a_pod_refused_while_its_shared_claim_is_allocated_for_another_is_not_refused() -> None:
    """kube-scheduler refuses the other pods of a shared claim while it is being allocated for one, and
    tries them again when it lands: that is no verdict on the node the gate gave them (a requeue then
    would undo a release that is about to succeed)."""
    from webhook.controller.decide.pods import PodView
    from webhook.controller.observe.informer import trim_pod

    message = "0/4 nodes are available: resource claim team-a/domain is in the process of being allocated."
    pod = {
        "metadata": {"name": "p", "namespace": "team-a", "labels": {"gangkeeper.io/group": "job-train"}},
        "spec": {},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}],
        },
    }
    assert not PodView.from_api(trim_pod(pod)).unschedulable
    pod["status"]["conditions"][0]["message"] = "0/4 nodes are available: 4 Insufficient cpu."
    assert PodView.from_api(trim_pod(pod)).unschedulable
    assert "message" not in trim_pod(pod)["status"]["conditions"][0]  # not kept for every pod


def test_an_allocated_shared_claim_binds_the_gang_to_where_it_reaches(apiserver: Any, api: Any) -> None:
    from tests.cluster import add_job, add_job_pods, pods
    from tests.cluster import node as api_node
    from webhook.controller.decide.pods import pinned_to

    store = apiserver.store
    store.create("v1", "nodes", "", api_node("w0", cpu="12"))
    store.create("v1", "nodes", "", api_node("w1", cpu="12"))
    store.create("resource.k8s.io/v1", "deviceclasses", "", device_class())
    for name in ("w0", "w1"):
        store.create("resource.k8s.io/v1", "resourceslices", "", node_slice(name, gpus(1)))
    on_w1 = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["w1"]}]}]}
    domain = {
        "metadata": {"name": "domain"},
        "spec": {"devices": {"requests": [exactly()]}},
        "status": {
            "allocation": {
                "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "w1", "device": "gpu-0"}]},
                "nodeSelector": on_w1,
            }
        },
    }
    store.create("resource.k8s.io/v1", "resourceclaims", "team-a", domain)
    job = add_job(store, "train", parallelism=3, cpu="3")
    job["spec"]["template"]["spec"]["resourceClaims"] = [{"name": "domain", "resourceClaimName": "domain"}]
    add_job_pods(store, job)
    controller, _ = dra_controller(apiserver, api)
    decision = controller.reconcile_once()["team-a/job-train"]
    assert decision.state == "Release", decision.message
    assert {pinned_to(p["spec"]) for p in pods(store)} == {"w1"}


def test_a_workload_claiming_devices_is_refused_under_a_volcano_not_known_to_allocate_them() -> None:
    from dataclasses import replace

    from tests import builders as b
    from webhook.admission.decide import admit
    from webhook.backends import make

    job = b.job("train", parallelism=2, spec=b.pod_spec(b.container("1", "1Gi")))
    job["spec"]["template"]["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    volcano = make("volcano")
    refused = admit(job, "CREATE", volcano, "team-a")
    assert not refused.allowed and refused.code == 422
    assert "spec.template.spec.resourceClaims: Forbidden" in refused.message
    assert "volcanoAllocatesDevices: true" in refused.message
    assert admit(job, "CREATE", replace(volcano, allocates_devices=True), "team-a").allowed  # type: ignore[type-var]
    for backend in ("gate", "native", "coscheduling"):
        assert admit(job, "CREATE", make(backend), "team-a").allowed, backend


def test_the_preview_says_a_gangs_pods_claim_devices(tmp_path: Any) -> None:
    import subprocess
    import sys

    import yaml

    from tests import builders as b

    job = b.job("train", parallelism=12, spec=b.pod_spec(b.container("1", "1Gi")))
    job["metadata"]["namespace"] = "team-a"
    job["spec"]["template"]["spec"]["resourceClaims"] = [
        {"name": "gpu", "resourceClaimTemplateName": "one-gpu"},
        {"name": "domain", "resourceClaimName": "train-domain"},
    ]
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    shown = subprocess.run(
        [sys.executable, "-m", "webhook", "mutate", "-f", str(path), "--backend", "gate"],
        capture_output=True,
        text=True,
        check=True,
    )
    summary = shown.stderr + shown.stdout
    assert "its pods claim devices (DRA): started only once devices for every pod are free" in summary
    assert "ResourceClaim train-domain shared by the whole gang" in summary


def test_a_high_priority_dra_gang_takes_the_devices_of_exactly_one_whole_lower_gang(apiserver: Any, api: Any) -> None:
    """CPU for everyone, devices for one gang: the high-priority gang preempts the low one whole (its Job
    suspended, no pod evicted alone), and is released once the low gang's pods and claims are gone."""
    from tests.cluster import Clock, add_job, add_job_pods, default_scheduler, pods
    from tests.cluster import node as api_node

    store = apiserver.store
    store.create("v1", "nodes", "", api_node("w1", cpu="64"))
    store.create("resource.k8s.io/v1", "deviceclasses", "", device_class())
    store.create("resource.k8s.io/v1", "resourceslices", "", node_slice("w1", gpus(4)))
    store.create("resource.k8s.io/v1", "resourceclaimtemplates", "team-a", template("one-gpu", exactly()))

    def job_of_priority(name: str, priority: int) -> None:
        job = add_job(store, name, parallelism=4, cpu="1")
        job["spec"]["template"]["spec"]["priority"] = priority
        job["spec"]["template"]["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
        add_job_pods(store, job)

    job_of_priority("low", 0)
    clock = Clock()
    controller, relist = dra_controller(apiserver, api, clock)
    assert controller.reconcile_once()["team-a/job-low"].state == "Release"
    assert default_scheduler(store) == 4
    allocate_their_claims_on(store, "job-low", "w1")
    relist()
    controller.reconcile_once()
    clock.advance(120)  # past the grace after its release
    job_of_priority("high", 1000)
    decision = controller.reconcile_once()["team-a/job-high"]
    assert decision.state == "WaitingForCapacity", decision.message
    assert "preempting gang team-a/job-low (priority 0)" in decision.message, decision.message
    assert store.get("batch/v1", "jobs", "team-a", "low")["spec"]["suspend"] is True
    # the Job controller removes the suspended Job's pods, the garbage collector their claims
    for pod in pods(store):
        if pod["metadata"]["labels"].get("gangkeeper.io/group") == "job-low":
            store.delete("v1", "pods", "team-a", pod["metadata"]["name"])
            store.delete("resource.k8s.io/v1", "resourceclaims", "team-a", f"{pod['metadata']['name']}-gpu")
    relist()
    decision = controller.reconcile_once()["team-a/job-high"]
    assert decision.state == "Release" and len(decision.release) == 4, decision.message


@pytest.mark.parametrize("seen_running", [True, False], ids=["seen-running", "lost-before-a-pass-saw-it-run"])
def test_a_gang_whose_devices_vanish_from_their_slice_is_requeued_whole(
    apiserver: Any, api: Any, seen_running: bool
) -> None:
    """The driver on one of the gang's nodes goes (its ResourceSlice deleted): the two pods there run on
    without their devices, no working members. The gang that ran whole is short, and once its recovery
    timeout passes it is requeued whole (its Job suspended), never left running partly. So too when the
    slice went before any pass saw the gang running: its whole release is on record."""
    from tests.cluster import Clock, add_job, add_job_pods, default_scheduler
    from tests.cluster import node as api_node

    store = apiserver.store
    for name in ("w1", "w2"):
        store.create("v1", "nodes", "", api_node(name, cpu="2"))
        store.create("resource.k8s.io/v1", "resourceslices", "", node_slice(name, gpus(2)))
    store.create("resource.k8s.io/v1", "deviceclasses", "", device_class())
    store.create("resource.k8s.io/v1", "resourceclaimtemplates", "team-a", template("one-gpu", exactly()))
    job = add_job(store, "train", parallelism=4, cpu="1", annotations={"gangkeeper.io/recovery-timeout-seconds": "60"})
    job["spec"]["template"]["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    add_job_pods(store, job)
    clock = Clock()
    controller, relist = dra_controller(apiserver, api, clock)
    assert controller.reconcile_once()["team-a/job-train"].state == "Release"
    assert default_scheduler(store) == 4
    for name in ("w1", "w2"):
        allocate_their_claims_on(store, "job-train", name)
    relist()
    if seen_running:
        assert controller.reconcile_once()["team-a/job-train"].state == "Running"
    store.delete("resource.k8s.io/v1", "resourceslices", "", "w2-None")
    relist()
    short = controller.reconcile_once()["team-a/job-train"]
    assert short.state != "Running" and "lost a member: 2 of 4 running" in short.message, short.message
    assert not store.get("batch/v1", "jobs", "team-a", "train")["spec"].get("suspend")
    clock.advance(61)
    requeued = controller.reconcile_once()["team-a/job-train"]
    assert requeued.state == "TimedOut" and requeued.whole_gang, requeued.message
    assert store.get("batch/v1", "jobs", "team-a", "train")["spec"]["suspend"] is True


def allocate_their_claims_on(store: Any, group: str, node_name: str) -> None:
    """Each bound pod of the group on `node_name`: its own claim allocated a device of that node."""
    from tests.cluster import pods

    used = 0
    for pod in pods(store):
        if pod["metadata"]["labels"].get("gangkeeper.io/group") != group or pod["spec"].get("nodeName") != node_name:
            continue
        owner = {"apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}
        result = {"request": "gpu", "driver": DRIVER, "pool": node_name, "device": f"gpu-{used}"}
        store.create(
            "resource.k8s.io/v1",
            "resourceclaims",
            "team-a",
            {
                "metadata": {"name": f"{pod['metadata']['name']}-gpu", "ownerReferences": [owner]},
                "spec": template("one-gpu", exactly())["spec"]["spec"],
                "status": {"allocation": {"devices": {"results": [result]}}},
            },
        )
        used += 1


def test_no_placeholder_asks_an_autoscaler_for_a_pod_that_claims_devices() -> None:
    """A new node's devices come from a driver once it runs there; Karpenter simulates DRA only with
    --ignore-dra-requests=false and from what its provider declares: placeholders for a DRA gang would
    bring nodes that may carry no device, again and again. The gang waits whole, saying so."""
    from webhook.controller.decide.autoscaling import NodePoolRoom, never_held
    from webhook.controller.decide.shapes import Shape

    pool = NodePoolRoom("default", limits={}, used={})
    plain = Shape(requests=(("cpu", 1000), ("pods", 1)))
    claiming = Shape(requests=(("cpu", 1000), ("deviceclass.resource.kubernetes.io/gpu", 1), ("pods", 1)))
    assert never_held({"a": plain}, [pool]) is None
    why = never_held({"a": plain, "b": claiming}, [pool])
    assert why is not None and "claims devices through DRA" in why
    # its spec names claims whose template the controller has not read yet: no device in its shape, and
    # still no node comes for it (stop 84's CI: a placeholder made in that moment brought a NodeClaim)
    unread = never_held({"a": plain, "b": plain}, [pool], claiming={"b"})
    assert unread is not None and "pod b" in unread and "claims devices through DRA" in unread


# --- the controller's picture kept from changes ----------------------------------------------------


def _pool_picture(pools: list[devices.Pool]) -> list[tuple[Any, ...]]:
    return [
        (p.driver, p.name, p.generation, p.complete, p.node_name, p.all_nodes, [d.id for d in p.devices]) for p in pools
    ]


slice_changes = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c", "d"]),  # the slice's name
        st.one_of(
            st.none(),  # deleted
            st.tuples(
                st.sampled_from(["n1", "n2", "shared"]),  # its pool (shared: a pool of allNodes)
                st.integers(1, 3),  # generation
                st.integers(1, 2),  # resourceSliceCount
                st.integers(0, 3),  # devices
            ),
        ),
    ),
    max_size=12,
)


@given(st.lists(slice_changes, min_size=1, max_size=6))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_pools_kept_from_changes_are_the_pools_gathered_whole(batches: list[Any]) -> None:
    """PoolBook (the controller's, fed by the slices' informer changes) against gather_pools over every
    slice there, after each batch of changes: the same pools in the same order, the same index; and a
    Gathered handed out before is never changed by a later batch."""
    book, now = PoolBook(), {}
    handed: list[tuple[devices.Gathered, list[Any]]] = []
    for batch in batches:
        changes: dict[str, Any] = {}
        for name, shape in batch:
            if shape is None:
                now.pop(name, None)
                changes[name] = None
                continue
            pool, generation, count, size = shape
            extra = {"allNodes": True} if pool == "shared" else {}
            body = node_slice(pool, gpus(size), pool=pool, generation=generation, count=count, **extra)
            body["metadata"]["name"] = name
            now[name] = changes[name] = body
        book.apply(changes)
        gathered = book.gathered()
        problems: list[str] = []
        whole = devices.gather_pools([now[k] for k in sorted(now)], problems)
        assert _pool_picture(gathered.pools) == _pool_picture(whole)
        index, expected = gathered.index, devices.PoolIndex.of(whole)
        assert {n: _pool_picture(list(p)) for n, p in index.local.items()} == {
            n: _pool_picture(list(p)) for n, p in expected.local.items()
        }
        assert _pool_picture(list(index.shared)) == _pool_picture(list(expected.shared))
        assert dict(index.nodes) == dict(expected.nodes) and dict(index.names) == dict(expected.names)
        handed.append((gathered, _pool_picture(gathered.pools)))
    for gathered, picture in handed:
        assert _pool_picture(gathered.pools) == picture


def test_an_inventory_remembers_what_still_holds_and_forgets_the_pools_gone() -> None:
    """A slice republished: the request's selection is worked out again for that pool only, and the
    pods' demands are kept (no class, template or shared claim changed); a class changed: nothing kept."""
    book = PoolBook()
    book.apply({"n1": node_slice("n1", gpus(2)), "n2": node_slice("n2", gpus(2))})
    first = inventory_from([device_class()], (), [], [template("one", exactly())], gathered=book.gathered())
    spec = pod_spec("one")
    demand = first.demand("team-a", spec)
    sub = demand.claims[0].requests[0].alternatives[0]
    kept_pool, gone_pool = first.pools
    assert len(first.selected(sub, kept_pool)) == len(first.selected(sub, gone_pool)) == 2
    book.apply({"n2": node_slice("n2", gpus(1))})
    second = inventory_from([device_class()], (), [], [template("one", exactly())], gathered=book.gathered())
    second.remembering(first)
    assert second.pools[0] is kept_pool and second.pools[1] is not gone_pool
    assert id(gone_pool) not in second._selected and id(kept_pool) in second._selected
    assert second.demand("team-a", spec) is demand
    assert len(second.selected(sub, second.pools[1])) == 1
    assert second.changed_nodes(first) == {"n2"}
    other = inventory_from(
        [device_class("gpu", "true")], (), [], [template("one", exactly())], gathered=book.gathered()
    )
    assert not other.remembering(second)._selected


def test_another_reader_follows_an_informers_changes_apart_from_the_drain() -> None:
    from webhook.informer import Informer
    from webhook.kube import Resource

    class Lists:
        def __init__(self) -> None:
            self.items: list[dict[str, Any]] = []

        def list(self, path: str, **query: str) -> dict[str, Any]:
            return {"items": [dict(i) for i in self.items], "metadata": {"resourceVersion": "1"}}

    api = Lists()
    api.items = [{"metadata": {"name": "a", "resourceVersion": "1"}}]
    informer = Informer(api, Resource("resource.k8s.io/v1", "resourceslices", namespaced=False))  # type: ignore[arg-type]
    informer.relist()
    assert set(informer.follow("devices")) == {"/a"}  # its first call: everything
    assert set(informer.drain()) == {"/a"}
    api.items = [{"metadata": {"name": "b", "resourceVersion": "2"}}]
    informer.relist()
    assert informer.follow("devices") == {"/a": None, "/b": {"metadata": {"name": "b", "resourceVersion": "2"}}}
    assert informer.follow("devices") == {}
    assert set(informer.drain()) == {"/a", "/b"}  # the drain's own, untouched by the follower


def test_no_answer_of_the_webhook_depends_on_a_resourceclaimtemplate() -> None:
    """A review names its own namespace, and the webhook cannot tell a forged one from the API server's:
    so no answer may depend on another namespace's objects. The webhook reads no ResourceClaimTemplate (it
    neither watches them nor may: charts' RBAC); a template that does not exist is said by the gang's Gang
    (test_a_gang_whose_devices_cannot_be_judged_or_known_waits_saying_why), where the namespace is real."""
    import inspect

    from tests import builders as b
    from webhook.admission import bootstrap, resolve
    from webhook.admission.decide import admit
    from webhook.backends import make

    job = b.job("train", parallelism=2, spec=b.pod_spec(b.container("1", "1Gi")))
    job["spec"]["template"]["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "secret"}]
    answers = {ns: admit(job, "CREATE", make("gate"), ns) for ns in ("team-a", "team-b")}
    assert answers["team-a"].warnings == answers["team-b"].warnings == []
    for module in (bootstrap, resolve):
        assert "resourceclaimtemplates" not in inspect.getsource(module)


def test_claims_parsed_once_are_shared_while_their_list_holds_and_a_claim_moved_shows_its_node() -> None:
    """The watch parses the claims once per version of their list (device_claims.py): inventories built
    meanwhile share them, so a republished slice costs its own node; claims parsed again show the node of
    the device a claim took, and a claim that went, the node of the device it let go."""

    def held(device: str, node_name: str) -> dict[str, Any]:
        results = [{"driver": DRIVER, "pool": node_name, "device": device, "request": "g"}]
        meta = {"name": f"held-{node_name}", "namespace": "team-b", "ownerReferences": [{"kind": "Pod", "uid": "b"}]}
        return {"metadata": meta, "status": {"allocation": {"devices": {"results": results}}}}

    book = PoolBook()
    book.apply({name: node_slice(name, gpus(2)) for name in ("n1", "n2", "n3")})
    claims = devices.claims_of([held("gpu-0", "n1")])
    first = inventory_from([device_class()], (), claims, [template("one", exactly())], gathered=book.gathered())
    book.apply({"n2": node_slice("n2", gpus(1))})
    second = inventory_from([device_class()], (), claims, [template("one", exactly())], gathered=book.gathered())
    assert second.taken is first.taken and second.changed_nodes(first) == {"n2"}
    assert second.class_totals(node("n1"))[devices.class_resource("gpu")] == 1
    moved = devices.claims_of([held("gpu-1", "n3")])
    third = inventory_from([device_class()], (), moved, [template("one", exactly())], gathered=book.gathered())
    assert third.changed_nodes(second) == {"n1", "n3"}


# --- a gang's devices check remembered between passes (GangRecord.device_check) --------------------


STEP = st.one_of(
    st.tuples(st.just("slice"), st.integers(0, 3), st.integers(0, 2)),  # node i's slice: j devices
    st.tuples(st.just("rack"), st.integers(0, 3), st.integers(0, 1)),  # node i relabelled into rack j
    st.tuples(st.just("place"), st.integers(0, 2), st.integers(0, 3)),  # pod i chosen for node j
    st.tuples(st.just("shared"), st.integers(0, 2), st.integers(0, 1)),  # the rack pool: i devices, rack j
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(STEP, min_size=1, max_size=12))
def test_a_remembered_devices_check_answers_as_one_worked_out_anew(steps: list[tuple[str, int, int]]) -> None:
    """Slices republished, nodes relabelled (a pool that selects nodes by label, or none), the placement
    moved, in any order: the check answered from the gang's record says what a check without one says."""
    from webhook.controller.observe.device_check import devices_check
    from webhook.controller.observe.store import GangStore

    book, memo, record = PoolBook(), devices.Memo(), GangStore().record("team-a/job-train")
    classes, templates = [device_class()], [template("one", exactly())]
    index = ClusterIndex()
    racks = ["r0"] * 4
    index.apply_nodes({f"/w{i}": trim_node(api_node(f"w{i}", labels={"rack": racks[i]})) for i in range(4)})
    book.apply({f"/w{i}": node_slice(f"w{i}", gpus(1)) for i in range(4)})
    index.use_devices(inventory_from(classes, (), [], templates, memo, book.gathered()))
    index.apply_pods(gated_job_pods(3, claim_template="one"))
    chosen = {f"train-{i:04d}": f"w{i}" for i in range(3)}
    generation = 1
    for kind, i, j in steps:
        generation += 1
        if kind == "slice":
            book.apply({f"/w{i}": node_slice(f"w{i}", gpus(j), generation=generation)})
        elif kind == "shared":
            rack = {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "rack", "operator": "In", "values": [f"r{j}"]}]}]
            }
            book.apply({"/rack": node_slice("rack", gpus(i), pool="rack", generation=generation, nodeSelector=rack)})
        elif kind == "rack":
            racks[i] = f"r{j}"
            index.apply_nodes({f"/w{i}": trim_node(api_node(f"w{i}", labels={"rack": racks[i]}))})
        else:
            chosen[f"train-{i:04d}"] = f"w{j}"
        if kind in ("slice", "shared"):
            index.use_devices(
                inventory_from(classes, (), [], templates, memo, book.gathered()).remembering(index.devices)
            )
        gang = index.gangs()["team-a/job-train"]
        remembered, anew = devices_check(index, gang, record), devices_check(index, gang)
        assert remembered is not None and anew is not None
        assert remembered(chosen) == anew(chosen), (kind, i, j, chosen)


SLICE_CHANGE = st.tuples(st.integers(0, 3), st.integers(-1, 3), st.booleans())  # node, devices (-1: gone), counters


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(changes=st.lists(SLICE_CHANGE, min_size=1, max_size=10))
def test_what_an_inventory_carries_from_the_one_before_is_what_it_would_work_out(
    changes: list[tuple[int, int, bool]],
) -> None:
    """Slices published, republished and deleted: the shared counters, the devices that consume them,
    those that allow several allocations and what the allocated ones use of the counters, carried from the
    inventory before (Inventory.remembering), are those worked out from the pools anew."""

    def published(node: str, count: int, counters: bool, generation: int) -> dict[str, Any]:
        devs = gpus(count)
        for i, device in enumerate(devs):
            if counters:
                device["consumesCounters"] = [{"counterSet": "gpu", "counters": {"memory": {"value": "10Gi"}}}]
            device["allowMultipleAllocations"] = i % 2 == 0
        extra = {"sharedCounters": [{"name": "gpu", "counters": {"memory": {"value": "20Gi"}}}]} if counters else {}
        return node_slice(node, devs, generation=generation, **extra)

    def held(node: int, device: int) -> dict[str, Any]:  # a claim of pod p-node holding that device
        result = {"request": "gpu", "driver": DRIVER, "pool": f"w{node}", "device": f"gpu-{device}"}
        if device == 0:  # a share of a device that allows several (its counters counted once)
            result.update(shareID=f"s-{node}", consumedCapacity={"memory": "10Gi"})
        return {
            "metadata": {
                "name": f"held-{node}-{device}",
                "namespace": "team-b",
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": f"p-{node}", "uid": f"p-{node}"}],
            },
            "status": {"allocation": {"devices": {"results": [result]}}},
        }

    book, memo, classes = PoolBook(), devices.Memo(), [device_class()]
    claims = devices.claims_of([held(n, d) for n in range(4) for d in range(2)])  # parsed once, as the watch does
    book.apply({f"/w{i}": published(f"w{i}", 2, True, 1) for i in range(4)})
    before = inventory_from(classes, (), claims, [], memo, book.gathered())

    def used(inventory: devices.Inventory, left_out: frozenset[str]) -> dict[Any, Any]:
        return {k: v for k, v in inventory.counters_used(left_out).items() if v}

    for generation, (node, count, counters) in enumerate(changes, start=2):
        for cached in ("counter_totals", "_consuming", "shared_devices", "demand_basis"):
            getattr(before, cached)
        used(before, frozenset()), used(before, frozenset({"p-1"}))
        book.apply({f"/w{node}": None if count < 0 else published(f"w{node}", count, counters, generation)})
        after = inventory_from(classes, (), claims, [], memo, book.gathered()).remembering(before)
        anew = inventory_from(classes, (), claims, [], devices.Memo(), book.gathered())
        assert after.counter_totals == anew.counter_totals
        assert after._consuming == anew._consuming
        assert after.shared_devices == anew.shared_devices
        assert after.demand_basis == anew.demand_basis
        for left_out in (frozenset(), frozenset({"p-1"})):
            assert used(after, left_out) == used(anew, left_out)
            # pods left out that own no claim leave out nothing: the same usage, worked out once
            assert after.counters_used(left_out | {"owns-nothing"}) is after.counters_used(left_out)
        before = after


def test_a_devices_check_counts_first_the_pods_another_gang_was_released_onto_and_forgets_them_once_gone() -> None:
    """Another team's gang released onto w0, its pods' claims not allocated yet (kube-scheduler binding
    them): w0's two GPUs are theirs, so this gang's pods fit only on w1, until those pods are deleted."""
    from webhook.controller.observe.device_check import devices_check
    from webhook.controller.observe.store import GangStore

    book, memo = PoolBook(), devices.Memo()
    index = ClusterIndex()
    index.apply_nodes({f"/w{i}": trim_node(api_node(f"w{i}")) for i in range(2)})
    book.apply({f"/w{i}": node_slice(f"w{i}", gpus(2)) for i in range(2)})
    templates = [template("one", exactly())]
    templates.append({**templates[0], "metadata": {**templates[0]["metadata"], "namespace": "team-b"}})
    index.use_devices(inventory_from([device_class()], (), [], templates, memo, book.gathered()))
    theirs = gated_job_pods(2, claim_template="one", namespace="team-b")
    for pod in theirs.values():
        del pod["spec"]["schedulingGates"]
        pod["spec"]["nodeName"] = "w0"
        pod["metadata"]["uid"] = "b-" + pod["metadata"]["uid"]
    index.apply_pods(theirs)
    index.apply_pods(gated_job_pods(2, claim_template="one"))
    record = GangStore().record("team-a/job-train")
    on = {"w0": {"train-0000": "w0", "train-0001": "w0"}, "w1": {"train-0000": "w1", "train-0001": "w1"}}

    def check(node: str) -> str | None:
        fit = devices_check(index, index.gangs()["team-a/job-train"], record)
        assert fit is not None
        return fit(on[node])

    assert check("w1") is None
    assert "train-0000 on w0" in (check("w0") or "")
    index.apply_pods(dict.fromkeys(theirs))  # their pods deleted
    assert check("w0") is None


def test_a_devices_check_counts_the_pods_released_before_once_when_their_claims_are_allocated() -> None:
    """Another team's gang released onto w0 and its claims allocated there by kube-scheduler (two of w0's
    four GPUs): those devices are taken, and the pods are not counted again as wanting two more, so this
    gang's two pods fit beside them."""
    from webhook.controller.observe.device_check import devices_check
    from webhook.controller.observe.store import GangStore

    book, memo = PoolBook(), devices.Memo()
    index = ClusterIndex()
    index.apply_nodes({"/w0": trim_node(api_node("w0"))})
    book.apply({"/w0": node_slice("w0", gpus(4))})
    templates = [template("one", exactly())]
    templates.append({**templates[0], "metadata": {**templates[0]["metadata"], "namespace": "team-b"}})
    theirs = gated_job_pods(2, claim_template="one", namespace="team-b")
    claims = []
    for i, pod in enumerate(theirs.values()):
        del pod["spec"]["schedulingGates"]
        pod["spec"]["nodeName"] = "w0"
        pod["metadata"]["uid"] = "b-" + pod["metadata"]["uid"]
        owner = {"apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}
        result = {"request": "gpu", "driver": DRIVER, "pool": "w0", "device": f"gpu-{i}"}
        claims.append(
            {
                "metadata": {
                    "name": f"{pod['metadata']['name']}-gpu",
                    "namespace": "team-b",
                    "ownerReferences": [owner],
                },
                "spec": templates[1]["spec"]["spec"],
                "status": {"allocation": {"devices": {"results": [result]}}},
            }
        )
    index.use_devices(inventory_from([device_class()], (), claims, templates, memo, book.gathered()))
    index.apply_pods(theirs)
    index.apply_pods(gated_job_pods(2, claim_template="one"))
    fit = devices_check(index, index.gangs()["team-a/job-train"], GangStore().record("team-a/job-train"))
    assert fit is not None
    assert fit({"train-0000": "w0", "train-0001": "w0"}) is None


def test_a_release_of_claims_counted_whole_is_not_taken_back_while_kube_scheduler_binds_it(
    apiserver: Any, api: Any
) -> None:
    """Two pods, each claiming two 2Gi shares of w0's one 8Gi device (two requests: the claim is counted
    whole per node, `counted_claims`). Released, the pods are no longer gated; a pass before kube-scheduler
    binds them must still count the node's claims for them, not read the node as overcommitted and take the
    release back (the real tier's DRA differential, fixed case B, saw that)."""
    from tests.cluster import node as api_node
    from tests.cluster import pods

    store = apiserver.store
    store.create("v1", "nodes", "", api_node("w0", cpu="64"))
    store.create("resource.k8s.io/v1", "deviceclasses", "", device_class())
    device = {
        "name": "gpu-0",
        "attributes": {"model": {"string": "shared"}},
        "allowMultipleAllocations": True,
        "capacity": {
            "memory": {"value": "8Gi", "requestPolicy": {"default": "2Gi", "validRange": {"min": "1Gi", "step": "1Gi"}}}
        },
    }
    store.create("resource.k8s.io/v1", "resourceslices", "", node_slice("w0", [device]))
    requests = [exactly(name) for name in ("a", "b")]
    for request in requests:
        request["exactly"]["capacity"] = {"requests": {"memory": "2Gi"}}
    store.create("resource.k8s.io/v1", "resourceclaimtemplates", "team-a", template("two-shares", *requests))
    job_claiming(store, "train", 2, "two-shares")
    controller, relist = dra_controller(apiserver, api)
    decision = controller.reconcile_once()["team-a/job-train"]
    assert decision.state == "Release" and len(decision.release) == 2, decision.message
    assert not any(p["spec"].get("schedulingGates") for p in pods(store))
    relist()
    for _ in range(2):
        decision = controller.reconcile_once()["team-a/job-train"]
        assert decision.state not in ("Repair", "Requeued"), decision.message
    for pod in pods(store):  # bound: no pod waits on the claims now, so no node counts them
        store.bind("team-a", pod["metadata"]["name"], "w0")
    relist()
    assert controller.reconcile_once()["team-a/job-train"].state == "Running"
    # another gang's pod released to w0 is judged by what it asks for, as kube-scheduler judges it: the
    # claims w0 no longer counts, held by the running pods, are nothing it needs
    from tests.cluster import add_job, add_job_pods

    add_job_pods(store, add_job(store, "other", parallelism=1, cpu="1"))
    assert controller.reconcile_once()["team-a/job-other"].state == "Release"
    for _ in range(2):
        decision = controller.reconcile_once()["team-a/job-other"]
        assert decision.state not in ("Repair", "Requeued"), decision.message
