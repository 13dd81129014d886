"""Nodes alike in their devices counted once per inventory (decide/device_alike.py): each node's class
totals are what it counts on its own, whatever its kind shares with others, for every shape a count reads
(classes with extended resources, alternatives, constraints, partitions of shared counters, devices taken
by claims that count or not)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fake.test_device_constraints import BIG, ONE_BIG_OR_TWO_SMALL, PCIE, gpu
from tests.fake.test_devices import DRIVER, device_class, exactly, node_slice, template
from webhook.controller.decide.device_alike import class_totals_of
from webhook.controller.decide.devices import Memo, inventory_from
from webhook.controller.decide.shapes import Node
from webhook.controller.observe import informer
from webhook.controller.observe.informer import trim_slice
from webhook.controller.observe.pool_book import PoolBook

DEVICE = st.tuples(st.sampled_from(["big", "small"]), st.sampled_from([None, "a", "b"]), st.booleans())
KIND = st.tuples(st.lists(DEVICE, min_size=1, max_size=5), st.booleans())  # devices, partitions of a counter
TEMPLATES = [
    template("either", ONE_BIG_OR_TWO_SMALL),
    template("pair", exactly(count=2), constraints=[{"matchAttribute": PCIE}]),
    template("big", exactly("gpu", 1, "gpu", BIG)),
]


def kind_slice(node: str, devices: list[tuple[str, str | None, bool]], partitioned: bool) -> dict[str, Any]:
    made = []
    for i, (model, root, consumes) in enumerate(devices):
        device = gpu(f"g{i}", model, root)
        if partitioned and consumes:
            device["consumesCounters"] = [{"counterSet": "mem", "counters": {"gb": {"value": "40"}}}]
        made.append(device)
    more = {"sharedCounters": [{"name": "mem", "counters": {"gb": {"value": "80"}}}]} if partitioned else {}
    return node_slice(node, made, **more)


def held(node: str, device: int, owner: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{node}-g{device}",
            "namespace": "team-b",
            "ownerReferences": [{"kind": "Pod", "name": owner, "uid": owner}],
        },
        "status": {"allocation": {"devices": {"results": [{"driver": DRIVER, "pool": node, "device": f"g{device}"}]}}},
    }


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kinds=st.lists(KIND, min_size=1, max_size=3),
    nodes=st.lists(st.tuples(st.integers(0, 2), st.booleans()), min_size=2, max_size=7),
    taken=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 4), st.sampled_from(["p1", "p2"])), max_size=6),
    counted=st.sets(st.sampled_from(["p1", "p2"])),
)
def test_each_nodes_count_is_its_own_whatever_its_kind_shares(
    kinds: list[tuple[list[tuple[str, str | None, bool]], bool]],
    nodes: list[tuple[int, bool]],
    taken: list[tuple[int, int, str]],
    counted: set[str],
) -> None:
    slices, claims, api_nodes = [], {}, []
    for at, (kind, extended) in enumerate(nodes):
        devices, partitioned = kinds[kind % len(kinds)]
        slices.append(kind_slice(f"n{at}", devices, partitioned))
        allocatable = {"cpu": 8000, "pods": 110} | ({"example.com/gpu": 1} if extended else {})
        api_nodes.append(Node(f"n{at}", allocatable, {}))
    for at, device, owner in taken:
        if at < len(nodes) and device < len(kinds[nodes[at][0] % len(kinds)][0]):
            claims[(at, device)] = held(f"n{at}", device, owner)
    classes = [device_class(), device_class("big-gpu", BIG, extended="example.com/gpu")]
    counting = inventory_from(classes, slices, list(claims.values()), TEMPLATES)
    totals = [counting.class_totals(n, counted) for n in api_nodes]
    for n, found in zip(api_nodes, totals, strict=True):
        alone = inventory_from(classes, slices, list(claims.values()), TEMPLATES)
        assert found == alone._class_totals(n, counted), n.name
    # counted together, as a cold start's nodes are (the slices through a PoolBook, as the watch reads
    # them; the classes without an extended resource too: then nodes are found by their kind directly;
    # them, trimmed as its cache keeps them: devices alike shared by identity, trim_slice)
    book = PoolBook()
    book.apply({f"/{i}": trim_slice(body) for i, body in enumerate(slices)})
    # kinds by the content of their slices (a device marked to consume counters no slice publishes is alike)
    seen = Counter((repr(kind_slice("n", *kinds[kind % len(kinds)])["spec"]), extended) for kind, extended in nodes)
    if not claims:  # nodes of one kind, none holding anything, are counted once (a kind seen before, too)
        booked = inventory_from(classes, (), [], TEMPLATES, Memo(), book.gathered())
        assert [booked.class_totals(n, counted) for n in api_nodes] == totals
        assert sum(1 for n in seen.values() if n > 1) <= len(booked._totals_alike) <= len(seen)
    for served in (classes, classes[:1]):
        together = inventory_from(served, (), list(claims.values()), TEMPLATES, Memo(), book.gathered())
        alone = inventory_from(served, slices, list(claims.values()), TEMPLATES)
        found = class_totals_of(together, api_nodes, counted)
        assert found == {n.name: alone._class_totals(n, counted) for n in api_nodes}


def test_an_inventory_narrowed_to_other_waiting_claims_counts_its_nodes_anew() -> None:
    """The watch narrows an inventory by `dataclasses.replace` when other pods wait (observe/devices.py):
    the counts of nodes alike belong to what the first one counted, not to the narrowed one."""
    slices = [kind_slice(f"n{i}", [("big", "a", False), ("small", "a", False)], False) for i in range(3)]
    nodes = [Node(f"n{i}", {"cpu": 8000, "pods": 110}, {}) for i in range(3)]
    first = inventory_from([device_class()], slices, [], TEMPLATES)
    first.waiting = frozenset()
    assert [first.class_totals(n) for n in nodes] == [{"deviceclass.resource.kubernetes.io/gpu": 2}] * 3
    narrowed = replace(first, waiting=frozenset({("template", "team-a", "either")}), deferred={})
    counted = [narrowed.class_totals(n) for n in nodes]
    assert counted == [narrowed._class_totals(n, ()) for n in nodes]
    assert any(resource.startswith("deviceclass.resource.kubernetes.io/claim/") for resource in counted[0])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kinds=st.lists(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=4), min_size=1, max_size=3),
    placed=st.lists(st.tuples(st.integers(0, 2), st.sampled_from(["own", "shared", "two-slices"])), max_size=6),
)
def test_devices_found_by_id_are_those_of_every_pool(
    kinds: list[list[tuple[bool, bool]]], placed: list[tuple[int, str]]
) -> None:
    """Inventory's devices by id (device_lookup.py: found through their pools when asked) against the maps
    of every device they stand for: each id of every pool, and ids no pool has, answer the same."""
    slices = []
    for at, (kind, where) in enumerate(placed):
        made = []
        for i, (consumes, shared) in enumerate(kinds[kind % len(kinds)]):
            device = gpu(f"g{i}", "big", None)
            if consumes:
                device["consumesCounters"] = [{"counterSet": "mem", "counters": {"gb": {"value": "40"}}}]
            if shared:
                device["allowMultipleAllocations"] = True
            made.append(device)
        counters = {"sharedCounters": [{"name": "mem", "counters": {"gb": {"value": "80"}}}]}
        if where == "shared":
            slices.append(node_slice(f"n{at}", made, allNodes=True, **counters))
        elif where == "two-slices":  # one pool of two nodes' slices: reaching several nodes
            slices += [node_slice(f"n{at}-{half}", made[half::2], pool=f"p{at}", count=2) for half in (0, 1)]
        else:
            slices.append(node_slice(f"n{at}", made, **counters))
    inventory = inventory_from([device_class()], slices, [], [])
    every = [d for p in inventory.pools for d in p.devices]
    consuming = {d.id: d for d in every if d.consumes}
    sharing = {d.id: d for d in every if d.shared}
    asked = [d.id for d in every] + [(DRIVER, "nowhere", "g0"), (DRIVER, "n0", "g9")]
    for found, expected in ((inventory._consuming, consuming), (inventory.shared_devices, sharing)):
        assert {i: found.get(i) for i in asked} == {i: expected.get(i) for i in asked}
        assert bool(found) == bool(expected) and dict(found) == expected
    # what each consumes, read from its pool's shape (no device made for it), is what the device says
    assert {i: inventory._consuming.consumes(i) for i in asked} == {
        i: consuming[i].consumes if i in consuming else () for i in asked
    }


def test_slices_kept_alike_stay_within_their_bound() -> None:
    """A PoolBook's slices parsed (observe/pool_book.py SlicesAlike) are at most MAX_SLICES_ALIKE, at most
    MAX_KINDS_PER_BUCKET under one key, however many kinds share a first device."""
    from webhook.controller.observe import pool_book

    alike = pool_book.SlicesAlike()
    for at in range(pool_book.MAX_SLICES_ALIKE + 200):
        # kinds alike in their first device and count, unlike after it: all under one key
        same_first = node_slice(f"s{at}", [gpu("g0", "big", None), gpu("g1", "big", f"root-{at}")])
        own_first = node_slice(f"u{at}", [gpu("g0", "big", f"uuid-{at}")])
        for made in (same_first, own_first):
            alike.devices(DRIVER, made["spec"]["pool"]["name"], made["spec"])
    buckets = alike.kept()
    assert sum(len(b) for b in buckets) == alike._kept <= pool_book.MAX_SLICES_ALIKE
    assert all(len(b) <= pool_book.MAX_KINDS_PER_BUCKET for b in buckets)
    assert len(buckets) > 1  # not one bucket: the bound was reached by many


def test_a_slice_trimmed_shares_the_devices_of_a_recent_slice_alike_and_nothing_else() -> None:
    """The slices' cache (observe/informer.py trim_slice): a slice's devices and counters are a recent
    slice's objects only when equal to them, the slice it is given is never changed, managedFields are
    dropped, and at most MAX_SLICES_SHARED slices are kept."""
    informer._recent_slices[0] = ()  # slices other tests of this process trimmed are not this test's
    counters = {"sharedCounters": [{"name": "mem", "counters": {"gb": {"value": "80"}}}]}
    first, alike = (node_slice(n, [gpu("g0", "big", "a"), gpu("g1", "small", "a")], **counters) for n in ("n0", "n1"))
    other = node_slice("n2", [gpu("g0", "big", "a"), gpu("g1", "small", "b")], **counters)
    alike["metadata"]["managedFields"] = [{"manager": "driver"}]
    given = repr(alike)
    kept = [trim_slice(s) for s in (first, other, alike)]
    assert repr(alike) == given and kept[2]["metadata"] == {"name": alike["metadata"]["name"]}
    assert kept[2]["spec"]["devices"] is kept[0]["spec"]["devices"] is first["spec"]["devices"]
    assert kept[2]["spec"]["sharedCounters"] is first["spec"]["sharedCounters"]
    assert kept[1]["spec"]["devices"] is other["spec"]["devices"] and kept[1]["spec"] == other["spec"]
    assert kept[2]["spec"] == alike["spec"]
    for at in range(informer.MAX_SLICES_SHARED * 3):
        trim_slice(node_slice(f"u{at}", [gpu("g0", "big", f"uuid-{at}")]))
    assert len(informer._recent_slices[0]) == informer.MAX_SLICES_SHARED
    again = node_slice("n3", [gpu("g0", "big", "a"), gpu("g1", "small", "a")], **counters)
    assert trim_slice(again)["spec"]["devices"] is again["spec"]["devices"]  # the first is no longer kept
