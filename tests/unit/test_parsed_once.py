"""Parts of devices parsed once per distinct content (observe/parsed_once.py): bounded, oldest out one at a time,
equal content shared, and nothing remembered for what cannot be read."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.controller.observe.parsed_once import ParsedOnce


def test_equal_content_is_parsed_once_and_the_oldest_goes_first_past_the_bound() -> None:
    calls: list[Any] = []

    def parse(raw: Any) -> tuple[str, ...]:
        calls.append(raw)
        return tuple(sorted(raw))

    parsed = ParsedOnce(parse, bound=2)
    first = parsed({"memory": {"value": "10Gi"}})
    assert parsed({"memory": {"value": "10Gi"}}) is first  # another object, the same content
    assert len(calls) == 1
    parsed({"a": 1})
    parsed({"b": 1})  # past the bound: the first one forgotten, only it
    assert len(parsed) == 2
    parsed({"b": 1})
    assert len(calls) == 3
    parsed({"memory": {"value": "10Gi"}})
    assert len(calls) == 4


def test_what_cannot_be_read_raises_each_time_and_is_not_remembered() -> None:
    def parse(raw: Any) -> int:
        raise ValueError(f"unreadable {raw!r}")

    parsed = ParsedOnce(parse)
    for _ in range(2):
        with pytest.raises(ValueError, match="unreadable"):
            parsed({"value": "x"})
    assert len(parsed) == 0
