"""What a device selector reads (device_reads.py): devices alike in it share one evaluation, and every
device is answered as if it had been evaluated on its own (the property test against device_cel)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webhook.controller.decide import device_cel
from webhook.controller.decide.device_memo import Memo
from webhook.controller.decide.device_reads import reads
from webhook.controller.decide.device_types import Device

D = "gpu.example.com"


@pytest.mark.parametrize(
    ("expression", "read"),
    [
        (f'device.driver == "{D}" && device.attributes["{D}"].model == "h100"', [("attributes", D, "model")]),
        (f'device.attributes["{D}"]["model"] == "x"', [("attributes", D, "model")]),
        ('has(device.attributes["d.io"].x)', [("attributes", "d.io", "x")]),
        ('device.attributes["d.io"].x.startsWith("a")', [("attributes", "d.io", "x")]),
        ('device.attributes["d.io"].size() > 0', [("attributes", "d.io", None)]),  # the whole domain
        ('"x" in device.attributes["d.io"]', [("attributes", "d.io", None)]),
        ('device.capacity["d.io"].memory.compareTo(quantity("10Gi")) >= 0', [("capacity", "d.io", "memory")]),
        (f'device.attributes["{D}"].model == "it\'s // not a comment"', None),  # a comment or not: not told
        ('r"a" == device.attributes["d"].x', None),  # a raw string
        ('device.attributes["d\\\\.io"].x == 1', None),  # an escape in a name
        ("[1].all(device, device > 0)", None),  # a macro's own variable named device
        ('device["attributes"]["d"].x == 1', None),
        ("size(device) > 0", None),
        ('device.attributes["d"].x == "a', None),  # no closing quote
    ],
)
def test_what_a_selector_reads_or_none_where_it_cannot_be_told(expression: str, read: list[Any] | None) -> None:
    assert reads(expression) == (tuple(read) if read is not None else None)


EXPRESSIONS = [
    f'device.driver == "{D}" && device.attributes["{D}"].model == "h100"',
    f'device.attributes["{D}"].index >= 2',
    f'device.attributes["{D}"].uuid.startsWith("GPU-1")',
    f'device.attributes["{D}"].numa == 0',  # missing on some devices: a runtime error there
    f'"numa" in device.attributes["{D}"]',
    'device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0',
    f'device.attributes["{D}"].model == "h100" || device.attributes["other.io"].x == 1',
    f'device.allowMultipleAllocations && device.attributes["{D}"].index >= 2',
]
ATTRIBUTE = st.sampled_from(
    [
        ("model", {"string": "h100"}),
        ("model", {"string": "a100"}),
        ("index", {"int": 1}),
        ("index", {"int": 3}),
        ("numa", {"int": 0}),
        (f"{D}/numa", {"int": 1}),
        ("other.io/x", {"int": 1}),
        ("bad", {"list": [1]}),  # of no type CEL is given: the whole device errs
    ]
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    devices=st.lists(
        st.tuples(
            st.lists(ATTRIBUTE, max_size=4),
            st.sampled_from(["40Gi", "80Gi"]),
            st.integers(0, 3),
            st.integers(0, 2),
            st.booleans(),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_devices_alike_in_what_a_selector_reads_get_what_each_would_on_its_own(
    devices: list[tuple[list[tuple[str, Any]], str, int, int, bool]],
) -> None:
    made = []
    for i, (attributes, memory, uuid, twice, shared) in enumerate(devices):
        raw = dict(attributes) | {"uuid": {"string": f"GPU-{uuid}"}}
        capacity = {"memory": {"value": memory}}
        if twice:  # the same capacity under its qualified name too, after or before
            qualified = {f"{D}/memory": {"value": "10Gi"}}
            capacity = capacity | qualified if twice == 1 else qualified | capacity
        content = repr((i, raw, capacity)).encode()  # every device its own content, as drivers publish them
        made.append(Device((D, "pool", f"g{i}"), raw, capacity, content=content, shared=shared))
    memo = Memo()
    asked = {(device.content, e): device for device in made for e in EXPRESSIONS}
    answers = memo.evaluate(asked)
    for (_, expression), device in asked.items():
        alone = device_cel.evaluate(expression, (D, device.attributes, device.capacity, device.shared))
        shared = answers[(device.content, expression)]
        assert isinstance(shared, bool) == isinstance(alone, bool), (expression, device.attributes, alone, shared)
        if isinstance(alone, bool):
            assert shared == alone, (expression, device.attributes)
    assert memo.evaluations <= len(asked)


def test_a_cluster_of_devices_each_with_its_own_uuid_costs_one_evaluation_per_value_read() -> None:
    memo = Memo()
    made = [
        Device(
            (D, f"n{i}", f"g{j}"),
            {"model": {"string": "h100"}, "uuid": {"string": f"GPU-{i}-{j}"}},
            {},
            content=f"{i}/{j}".encode(),
        )
        for i in range(100)
        for j in range(8)
    ]
    answers = memo.evaluate({(d.content, EXPRESSIONS[0]): d for d in made})
    assert set(answers.values()) == {True}
    assert memo.evaluations == 1
    later = Device((D, "n100", "g0"), {"model": {"string": "h100"}, "uuid": {"string": "GPU-new"}}, {}, content=b"new")
    assert memo.evaluate({(later.content, EXPRESSIONS[0]): later}) == {(b"new", EXPRESSIONS[0]): True}
    assert memo.evaluations == 1  # a device published later: answered from what its alike gave


VALUE = st.one_of(
    st.fixed_dictionaries({"int": st.one_of(st.integers(), st.sampled_from(["7", "x", None]))}),
    st.fixed_dictionaries({"bool": st.booleans()}),
    st.fixed_dictionaries({"string": st.text(max_size=3)}),
    st.fixed_dictionaries({"version": st.sampled_from(["1.2.3", "1.2", "v1", "1.0.0-rc.1+b"])}),
    st.fixed_dictionaries({"list": st.just([1])}),
    st.just("plain"),
)
AMOUNT = st.one_of(
    st.sampled_from(["40Gi", "1.5", "x", "", "1e3", "-1"]), st.fixed_dictionaries({"value": st.just("8")})
)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])  # CI's load: no timing
@given(
    attributes=st.dictionaries(st.sampled_from(["a", "d.io/b", "c"]), VALUE, max_size=3),
    capacity=st.dictionaries(st.sampled_from(["memory", "d.io/cores"]), AMOUNT, max_size=2),
)
def test_a_device_is_convertible_exactly_when_its_variable_can_be_made(
    attributes: dict[str, Any], capacity: dict[str, Any]
) -> None:
    try:
        device_cel.device_variable(D, attributes, capacity)
        made = True
    except (ValueError, TypeError, ArithmeticError):
        made = False
    assert device_cel.convertible(attributes, capacity) == made
