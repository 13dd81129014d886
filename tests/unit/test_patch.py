"""The patch diff agrees with jsonpatch, the reference implementation, on random documents."""

from __future__ import annotations

from typing import Any

import jsonpatch
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.admission.patch import diff

keys = st.sampled_from(["a", "b", "c", "x/y", "t~0", "", "metadata", "spec"])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=25,
)


@settings(max_examples=500, deadline=None)
@given(before=json_values, after=json_values)
def test_applying_the_diff_gives_the_target(before: Any, after: Any) -> None:
    result = jsonpatch.apply_patch(before, diff(before, after))
    assert result == after and type(result) is type(after)


@settings(max_examples=200, deadline=None)
@given(document=json_values)
def test_equal_documents_give_no_operations(document: Any) -> None:
    assert diff(document, jsonpatch.apply_patch(document, [])) == []


def test_keys_are_escaped_and_lists_grow_at_the_end() -> None:
    before = {"metadata": {"labels": {"app": "x"}}, "spec": {"schedulingGates": [{"name": "a"}]}}
    after = {
        "metadata": {"labels": {"app": "x", "gangkeeper.io/group": "g"}},
        "spec": {"schedulingGates": [{"name": "a"}, {"name": "gangkeeper.io/gang-gate"}]},
    }
    assert diff(before, after) == [
        {"op": "add", "path": "/metadata/labels/gangkeeper.io~1group", "value": "g"},
        {"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": "gangkeeper.io/gang-gate"}},
    ]


def test_type_changes_are_replacements() -> None:
    assert diff({"a": 1}, {"a": 1.0}) == [{"op": "replace", "path": "/a", "value": 1.0}]
    assert diff({"a": True}, {"a": 1}) == [{"op": "replace", "path": "/a", "value": 1}]


def test_a_type_change_inside_a_large_list_is_found() -> None:
    """Large equal-looking subtrees are confirmed in C; 1 == True in Python but not in JSON."""
    before = {"spec": {"values": [1] * 40, "other": list(range(40))}}
    after = {"spec": {"values": [1] * 39 + [True], "other": list(range(40))}}
    assert diff(before, after) == [{"op": "replace", "path": "/spec/values/39", "value": True}]
