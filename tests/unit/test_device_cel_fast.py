"""The plain selectors cel-cpp evaluates (decide/device_cel_fast.py) answer as cel-python's evaluator
does, device by device; what is not plain goes to cel-python. kube-scheduler's own answers for the same
selectors: tests/real/test_real_cel.py::test_plain_selectors_on_cel_cpp_evaluate_as_kube_scheduler_evaluates_them."""

from __future__ import annotations

import time
from typing import Any

import pytest

from webhook.controller.decide import device_cel, device_cel_fast

DRIVER = "gpu.example.com"
DEVICES: list[tuple[str, dict[str, Any], dict[str, Any], bool]] = [
    (DRIVER, {"model": {"string": "a100"}, "index": {"int": 3}, "uuid": {"string": "GPU-0a"}}, {}, False),
    (DRIVER, {"model": {"string": "h100"}, "index": {"int": 9}, "other.example.com/zone": {"string": "r1"}}, {}, True),
    ("other.example.com", {"model": {"string": "a100"}, "driverVersion": {"version": "1.2.3"}}, {}, False),
    (DRIVER, {}, {}, False),
]
PLAIN = [
    f'device.driver == "{DRIVER}"',
    f'device.attributes["{DRIVER}"].model == "a100"',
    f'device.attributes["{DRIVER}"].index > 4 || device.allowMultipleAllocations',
    f'device.attributes["{DRIVER}"].uuid.matches("^GPU-[0-9a-f]+$")',
    'device.attributes["other.example.com"].zone == "r1"',
    'has(device.attributes["other.example.com"].zone)',
    'has(device.attributes["nowhere.example.com"].zone)',
    f'["a100", "b200"].exists(m, device.attributes["{DRIVER}"].model == m)',
    f'device.attributes["{DRIVER}"].model',
    'device.attributes["other.example.com"].model == "a100"',
]
NOT_PLAIN = [
    f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) > 0',
    f'device.attributes["{DRIVER}"].driverVersion.isGreaterThan(semver("1.0.0"))',
    f'"model" in device.attributes["{DRIVER}"]',
    f'device.attributes["{DRIVER}"].?model.orValue("") == "a100"',
    f'device.attributes[{DRIVER!r} + ""].model == "a100"',
    'string(device.attributes["gpu.example.com"].index) == "3"',
    f'r"x" == "x" && device.driver == "{DRIVER}"',
    'cel.bind(d, device.driver, d == "x")',
]


def outcome(expression: str, facts: tuple[str, dict[str, Any], dict[str, Any], bool]) -> Any:
    said = device_cel.evaluate(expression, facts)
    return "error" if isinstance(said, Exception) else said


def in_celpy(expression: str, facts: tuple[str, dict[str, Any], dict[str, Any], bool]) -> Any:
    try:
        return device_cel.matches(expression, device_cel.device_variable(*facts))
    except (device_cel.SelectorError, ValueError):
        return "error"


@pytest.mark.parametrize("expression", PLAIN)
def test_a_plain_selector_goes_to_cel_cpp_and_answers_as_cel_python_does(expression: str) -> None:
    assert device_cel_fast.fast_selector(expression) is not None
    for facts in DEVICES:
        assert outcome(expression, facts) == in_celpy(expression, facts), (expression, facts)


@pytest.mark.parametrize("expression", NOT_PLAIN)
def test_what_is_not_plain_goes_to_cel_python(expression: str) -> None:
    assert device_cel_fast.fast_selector(expression) is None


def test_a_version_attribute_read_by_name_sends_that_device_to_cel_python() -> None:
    expression = 'device.attributes["other.example.com"].driverVersion == "1.2.3"'
    fast = device_cel_fast.fast_selector(expression)
    assert fast is not None
    assert device_cel_fast.device_map(fast, *DEVICES[2][:2], False) is None
    assert outcome(expression, DEVICES[2]) == in_celpy(expression, DEVICES[2]) is False


def test_matches_is_linear_in_its_input() -> None:
    """RE2, as kube-scheduler's cel-go: a pattern that backtracks exponentially in a backtracking engine
    is answered at once."""
    facts = (DRIVER, {"uuid": {"string": "a" * 40 + "!"}}, {}, False)
    started = time.process_time()
    assert device_cel.evaluate(f'device.attributes["{DRIVER}"].uuid.matches("^(a+)+$")', facts) is False
    assert time.process_time() - started < 0.5


def test_a_protobuf_too_old_for_cel_cpp_sends_every_selector_to_cel_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """Debian 12's python3-protobuf (4.21) has no message_factory.GetMessageClass, and cel-cpp's wrapper
    aborts the process that reads one through it (the real tier's controller did, run on the host's
    Python as another user): such a protobuf turns the fast path off; the locked one keeps it on."""
    import types

    from google.protobuf import message_factory

    assert hasattr(message_factory, "GetMessageClass") and device_cel_fast._protobuf_usable()
    old = types.ModuleType("google.protobuf.message_factory")
    monkeypatch.setitem(__import__("sys").modules, "google.protobuf.message_factory", old)
    monkeypatch.setattr(__import__("google.protobuf").protobuf, "message_factory", old, raising=False)
    assert not device_cel_fast._protobuf_usable()
