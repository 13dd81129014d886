"""Effective resource requests of pods, summed and printed with the kubernetes client's quantity helpers.

A pod's effective request for a resource is the larger of (a) the sum over its regular containers plus
its restartable (sidecar) init containers and (b) the peak of the init phase, where each ordinary init
container runs beside the sidecars started before it; pod overhead is added on top (KEP-753, KEP-688).
A container that sets only limits gets requests equal to those limits, as API defaulting does for pods.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from kubernetes.utils.quantity import format_quantity, parse_quantity

Resources = dict[str, Decimal]

_BINARY_SUFFIXES = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))
_DECIMAL_SUFFIXES = (("E", 10**18), ("P", 10**15), ("T", 10**12), ("G", 10**9), ("M", 10**6), ("k", 10**3))


def parse(value: object) -> Decimal:
    """Parse one quantity; raises ValueError with the offending text."""
    if isinstance(value, str):
        return _parse_text(value)
    return _parse(value)


# a cluster writes few distinct quantities ("10Gi" in each of 40,000 devices' counters): each parsed once,
# the least recently used forgotten first (Decimal is immutable, so one answer serves every caller)
@functools.lru_cache(maxsize=4096)
def _parse_text(value: str) -> Decimal:
    return _parse(value)


def _parse(value: object) -> Decimal:
    if isinstance(value, bool):
        raise ValueError(f"invalid quantity {value!r}")
    try:
        quantity = Decimal(parse_quantity(value))
    except (ValueError, TypeError, ArithmeticError) as exc:
        raise ValueError(f"invalid quantity {value!r}") from exc
    if not quantity.is_finite() or quantity < 0:
        raise ValueError(f"invalid quantity {value!r}: must be a finite amount of at least 0")
    return quantity


def _mapping(value: object, what: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{what} must be an object, not {type(value).__name__}")
    return value


def _containers(pod_spec: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    value = pod_spec.get(key) or []
    if not isinstance(value, list):
        raise ValueError(f"{key} must be a list")
    return [_mapping(c, key) for c in value]


def container_requests(container: Mapping[str, Any]) -> Resources:
    resources = _mapping(container.get("resources"), "resources")
    limits = _mapping(resources.get("limits"), "resources.limits")
    requests = _mapping(resources.get("requests"), "resources.requests")
    merged = {**limits, **requests}  # requests default to limits
    return {name: parse(value) for name, value in merged.items()}


def add(into: Resources, other: Mapping[str, Decimal], times: int = 1) -> Resources:
    for name, value in other.items():
        into[name] = into.get(name, Decimal(0)) + value * times
    return into


def maximum(left: Mapping[str, Decimal], right: Mapping[str, Decimal]) -> Resources:
    merged = dict(left)
    for name, value in right.items():
        merged[name] = max(merged.get(name, Decimal(0)), value)
    return merged


def pod_requests(pod_spec: Mapping[str, Any]) -> Resources:
    """Effective requests of one pod built from this spec (see the module docstring)."""
    sidecars: Resources = {}
    init_peak: Resources = {}
    for init in _containers(pod_spec, "initContainers"):
        requests = container_requests(init)
        if init.get("restartPolicy") == "Always":
            add(sidecars, requests)
            init_peak = maximum(init_peak, sidecars)
        else:
            init_peak = maximum(init_peak, add(dict(sidecars), requests))
    running = dict(sidecars)
    for container in _containers(pod_spec, "containers"):
        add(running, container_requests(container))
    effective = maximum(running, init_peak)
    # Pod-level resources (KEP-2837, beta and on by default since 1.34): where the pod states requests
    # for a resource, those are the pod's, whatever its containers say (kube-scheduler's
    # NodeResourcesFit reads them the same way, pkg/api/v1/resource computePodResourceRequest).
    pod_level = _mapping(pod_spec.get("resources"), "resources").get("requests") or {}
    for name, value in pod_level.items():
        effective[name] = parse(value)
    overhead = _mapping(pod_spec.get("overhead"), "overhead")
    return add(effective, {name: parse(value) for name, value in overhead.items()})


def has_requests(pod_spec: Mapping[str, Any]) -> bool:
    """True when every regular container states a cpu or memory request (or limit)."""
    containers = _containers(pod_spec, "containers")
    return bool(containers) and all(container_requests(c).keys() & {"cpu", "memory"} for c in containers)


def total(parts: Iterable[tuple[Mapping[str, Decimal], int]]) -> Resources:
    summed: Resources = {}
    for requests, count in parts:
        add(summed, requests, count)
    return summed


def canonical(value: Decimal, resource: str) -> str:
    """Canonical text for a summed quantity: whole numbers with the largest exact suffix, else millis.

    Memory-like amounts that divide evenly by a power of 1024 keep binary suffixes (1Gi, not 1073741824).
    """
    if value == value.to_integral_value():
        whole = int(value)
        if whole != 0 and resource != "cpu":
            for suffix, factor in _BINARY_SUFFIXES:
                if whole % factor == 0:
                    return str(format_quantity(value, suffix))
        if whole != 0:
            for suffix, factor in _DECIMAL_SUFFIXES:
                if whole % factor == 0:
                    return str(format_quantity(value, suffix))
        return str(whole)
    milli = value * 1000
    if milli == milli.to_integral_value():
        return str(format_quantity(value, "m"))
    return str(format_quantity(value, "m", quantize=Decimal("0.001")))


def render(resources: Mapping[str, Decimal]) -> dict[str, str]:
    return {name: canonical(resources[name], name) for name in sorted(resources) if resources[name] != 0}
