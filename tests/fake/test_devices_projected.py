"""Slices compared without the attributes no selector or constraint reads (device_slices.projected,
device_reads.attributes_read): a driver gives each device a UUID of its own, so no two nodes' slices are
alike whole; alike in what is read, they are parsed and counted once. Each node's count is what it counts
with every attribute kept, for selectors and constraints reading any of them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fake.test_devices import DRIVER, device_class, exactly, node_slice, template
from webhook.controller.decide import device_cel, device_reads, device_slices
from webhook.controller.decide.device_alike import class_totals_of
from webhook.controller.decide.devices import Memo, class_resource, inventory_from
from webhook.controller.decide.shapes import Node
from webhook.controller.observe.devices import RESOURCES, DeviceWatch
from webhook.controller.observe.informer import trim_slice
from webhook.controller.observe.pool_book import PoolBook
from webhook.informer import Informer

UUID = f'device.attributes["{DRIVER}"].uuid'
SELECTORS = [
    f'device.attributes["{DRIVER}"].model == "big"',
    f'{UUID}.endsWith("-1")',
    f'{UUID} == "GPU-n1-0"',
    f'device.attributes["{DRIVER}"].index < 2',
    f'device.attributes["{DRIVER}"].uuid.startsWith("GPU-n0")',
    '"other.example.com/serial" in device.attributes["other.example.com"]',
]
CONSTRAINTS = [None, {"matchAttribute": f"{DRIVER}/root"}, {"distinctAttribute": f"{DRIVER}/uuid"}]


def unique_slice(node: str, models: list[tuple[str, str]], odd: bool) -> dict[str, Any]:
    """Each device with its own UUID, an index, a root; `odd`: one attribute no CEL can convert, which
    fails every selector on its device whatever the selector reads."""
    made = []
    for i, (model, root) in enumerate(models):
        attributes: dict[str, Any] = {
            "model": {"string": model},
            "uuid": {"string": f"GPU-{node}-{i}"},
            "index": {"int": i},
            "root": {"string": root},
            "other.example.com/serial": {"string": f"S-{node}-{i}"},
        }
        if odd and i == 0:
            attributes["broken"] = {"version": "not-a-version"}
        made.append({"name": f"g{i}", "attributes": attributes})
    return node_slice(node, made)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    models=st.lists(st.tuples(st.sampled_from(["big", "small"]), st.sampled_from(["a", "b"])), min_size=1, max_size=4),
    nodes=st.integers(2, 5),
    odd=st.sets(st.integers(0, 4)),
    selectors=st.lists(st.sampled_from(SELECTORS), max_size=2),
    constraint=st.sampled_from(CONSTRAINTS),
    count=st.integers(1, 2),
)
def test_each_nodes_count_with_unread_attributes_left_out_is_its_count_with_them(
    models: list[tuple[str, str]],
    nodes: int,
    odd: set[int],
    selectors: list[str],
    constraint: dict[str, str] | None,
    count: int,
) -> None:
    slices = [unique_slice(f"n{i}", models, i in odd) for i in range(nodes)]
    classes = [device_class()]
    request = exactly("gpu", count, "gpu", *selectors)
    templates = [template("t", request, constraints=[constraint] if constraint else None)]
    read = device_reads.attributes_read(classes, [t["spec"]["spec"] for t in templates])
    book = PoolBook()
    book.reading(read)
    book.apply({f"/{i}": trim_slice(body) for i, body in enumerate(slices)})
    projected = inventory_from(classes, (), [], templates, Memo(), book.gathered())
    whole = inventory_from(classes, slices, [], templates)
    api_nodes = [Node(f"n{i}", {"cpu": 8000, "pods": 110}, {}) for i in range(nodes)]
    for node in api_nodes:  # an error too (a constraint's search on a device no selector can read)
        assert _outcome(projected.class_totals, node) == _outcome(lambda n: whole._class_totals(n, ()), node)
    if not odd:
        assert class_totals_of(projected, api_nodes, ()) == {n.name: whole._class_totals(n, ()) for n in api_nodes}
    reads_own = any("uuid" in s or "serial" in s for s in selectors) or "uuid" in str(constraint)
    if read is not None and not odd and not reads_own:  # nodes alike but for their UUIDs: one parsing
        assert len({id(pool.shape) for pool in book.gathered().pools}) == 1


def _outcome(count: Callable[[Node], Mapping[str, int]], node: Node) -> Any:
    try:
        return dict(count(node))
    except device_cel.SelectorError as error:
        return str(error)


SELECTS_UUID = [{"cel": {"expression": f"{UUID} == 'x'"}}]


def test_what_is_read_names_every_selector_and_constraint_and_stops_at_what_cannot_be_told() -> None:
    spec = template(
        "t",
        {"name": "r", "firstAvailable": [{"name": "a", "deviceClassName": "gpu", "selectors": SELECTS_UUID}]},
        constraints=[{"matchAttribute": "other.example.com/root"}],
    )["spec"]["spec"]
    found = device_reads.attributes_read([device_class("gpu", SELECTORS[0])], [spec])
    assert found == frozenset({f"{DRIVER}/model", f"{DRIVER}/uuid", "other.example.com/root"})
    whole_domain = f'device.attributes["{DRIVER}"].exists(name, name == "uuid")'
    assert device_reads.attributes_read([device_class("gpu", whole_domain)], []) is None
    passed_whole = "has(device.attributes) && size([device]) == 1"
    assert device_reads.attributes_read([device_class("gpu", passed_whole)], []) is None
    many = [device_class(f"c{i}", f'device.attributes["{DRIVER}"].a{i} == 1') for i in range(65)]
    assert device_reads.attributes_read(many, []) is None  # MAX_ATTRIBUTES_READ
    assert device_reads.kept_names(DRIVER, frozenset({f"{DRIVER}/uuid", "x.io/y"})) == {
        f"{DRIVER}/uuid",
        "uuid",
        "x.io/y",
    }


def test_a_projection_copies_what_it_changes_and_keeps_what_it_cannot_convert() -> None:
    raw = unique_slice("n0", [("big", "a"), ("small", "b")], odd=True)["spec"]["devices"]
    before = repr(raw)
    found = device_slices.projected(DRIVER, raw, frozenset({f"{DRIVER}/model"}))
    assert repr(raw) == before  # the informer's objects are never changed
    assert [sorted(d["attributes"]) for d in found] == [["broken", "model"], ["model"]]
    assert device_slices.projected(DRIVER, found, frozenset({f"{DRIVER}/model"})) is found  # nothing to leave out


class Served:
    def __init__(self, lists: dict[str, list[dict[str, Any]]]) -> None:
        self.lists, self.version = lists, 1

    def list(self, path: str, **query: str) -> dict[str, Any]:
        items = list(self.lists.get(path.rpartition("/")[2], ()))
        return {"items": items, "metadata": {"resourceVersion": str(self.version)}}

    def stream(self, path: str, query: dict[str, str], timeout: float) -> Any:
        return iter(())


def test_the_watch_parses_the_slices_again_when_a_selector_reads_what_none_read_before() -> None:
    """The controller's DeviceWatch: slices alike but for their UUIDs share one parsing while no selector
    reads the UUID; a template whose selector does (one device of one node) has it counted on that node
    alone, and what is read only grows (a tenant's selectors coming and going parse the slices again at
    most MAX_ATTRIBUTES_READ times)."""
    slices = [unique_slice(f"n{i}", [("big", "a"), ("big", "b")], False) for i in range(3)]
    served = Served({"deviceclasses": [device_class()], "resourceslices": slices, "resourceclaimtemplates": []})
    informers = {(r.group_version, r.plural): Informer(served, r) for r in RESOURCES}  # type: ignore[arg-type]
    for informer in informers.values():
        informer.relist()
    watch = DeviceWatch(informers, evaluator=device_cel.evaluate_all)
    nodes = [Node(f"n{i}", {"cpu": 8000, "pods": 110}, {}) for i in range(3)]
    inventory = watch.inventory()
    assert inventory is not None and len({id(p.shape) for p in inventory.pools}) == 1
    one = template("one", exactly("gpu", 1, "gpu", f'{UUID} == "GPU-n1-0"'))
    served.lists["resourceclaimtemplates"], served.version = [one], 2
    informers[("resource.k8s.io/v1", "resourceclaimtemplates")].relist()
    inventory = watch.inventory(frozenset({("template", "team-a", "one")}))
    assert inventory is not None and len({id(p.shape) for p in inventory.pools}) == 3
    counted = [
        sum(n for resource, n in inventory.class_totals(node).items() if resource != class_resource("gpu"))
        for node in nodes
    ]
    assert counted == [0, 1, 0]
    served.lists["resourceclaimtemplates"], served.version = [], 3  # the template gone: read stays as it grew
    informers[("resource.k8s.io/v1", "resourceclaimtemplates")].relist()
    inventory = watch.inventory()
    assert inventory is not None and len({id(p.shape) for p in inventory.pools}) == 3


def test_slices_alike_but_in_a_version_no_selector_reads_are_each_counted_with_it() -> None:
    """Trimmed slices are told alike by their Skeleton (device_slices.skeleton_of), which keeps a version's
    value: a version that does not parse fails every selector on its device, so two nodes alike but in it
    are not one parsing."""
    slices = []
    for i, firmware in enumerate(["1.2.3", "not-a-version", "1.2.3"]):
        made = unique_slice(f"n{i}", [("big", "a")], odd=False)
        made["spec"]["devices"][0]["attributes"]["firmware"] = {"version": firmware}
        slices.append(made)
    classes = [device_class()]
    templates = [template("t", exactly("gpu", 1, "gpu", SELECTORS[0]))]
    read = device_reads.attributes_read(classes, [t["spec"]["spec"] for t in templates])
    book = PoolBook()
    book.reading(read)
    book.apply({f"/{i}": trim_slice(body) for i, body in enumerate(slices)})
    kept = inventory_from(classes, (), [], templates, Memo(), book.gathered())
    whole = inventory_from(classes, slices, [], templates)
    for i in range(3):
        node = Node(f"n{i}", {"cpu": 8000, "pods": 110}, {})
        assert _outcome(kept.class_totals, node) == _outcome(lambda n: whole._class_totals(n, ()), node)
    shapes = [id(pool.shape) for pool in book.gathered().pools]
    assert shapes[0] != shapes[1] and len(set(shapes)) == 2  # n0 and n2 one parsing, each UUID left out
