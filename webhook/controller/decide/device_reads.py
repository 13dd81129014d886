"""What a device selector reads of a device, so that devices alike in what it reads share its result.

A driver publishes each device with attributes of its own (a UUID, a PCIe bus id), so 40,000 devices
have 40,000 contents, and a selector keyed by the whole content was evaluated 40,000 times at a cold
start (cel-python: 0.3 ms each in process, more in the controller's sandbox). Most selectors read one or
two attributes (`device.driver`, `device.attributes["gpu.nvidia.com"].productName`): keyed by those,
they are evaluated once per distinct value.

The reading is conservative: the expression's string literals are set apart, and every other use of
`device` must be `device.driver`, `device.allowMultipleAllocations`, or `device.attributes[<string>]`
or `device.capacity[<string>]`, alone or followed by `.name` or `[<string>]`. Anything else (a raw
string, a comment, `device` passed whole, a macro's variable named `device`) reads "everything": the
whole content stays the key. What a name without a domain means follows compile.go parseQualifiedName
(device_cel.qualified).
"""

from __future__ import annotations

import functools
import marshal
import re
from collections.abc import Iterable, Mapping
from typing import Any

from webhook.controller.decide import device_cel
from webhook.controller.decide.device_types import cel_selectors

# a read: ("attributes" | "capacity", domain, name, or None for the whole domain)
Read = tuple[str, str, str | None]

_STRING = re.compile(
    r'"""(?:[^\\]|\\.)*?"""' r"|'''(?:[^\\]|\\.)*?'''" r'|"(?:[^"\\\n]|\\.)*"' r"|'(?:[^'\\\n]|\\.)*'", re.S
)
_RAW_OR_COMMENT = re.compile(r"(?<![\w.])[rR][bB]?[\"']|(?<![\w.])[bB][rR][\"']|//")
_DEVICE = re.compile(r"(?<![\w.])device\b")
_USE = re.compile(
    r"device\s*\.\s*(?:(?:driver|allowMultipleAllocations)\b|(attributes|capacity)\s*\[\s*\x00(\d+)\x00\s*\]"
    r"(?:\s*\.\s*([A-Za-z_]\w*)\b(?!\s*\()|\s*\[\s*\x00(\d+)\x00\s*\])?)"
)
_PLAIN = re.compile(r"[\w./-]*")  # a literal usable as a domain or a name: no escape, no quote


@functools.lru_cache(maxsize=device_cel.MAX_COMPILED)  # selectors are tenant input: bounded
def reads(expression: str) -> tuple[Read, ...] | None:
    """What the selector reads of a device beyond its driver; None when that cannot be told."""
    if len(expression) > device_cel.MAX_EXPRESSION_LENGTH or _RAW_OR_COMMENT.search(expression):
        return None
    literals: list[str | None] = []

    def set_apart(match: re.Match[str]) -> str:
        text = match.group(0)
        inner = text[3:-3] if text[:3] in ('"""', "'''") else text[1:-1]
        literals.append(inner if _PLAIN.fullmatch(inner) else None)
        return f"\x00{len(literals) - 1}\x00"

    skeleton = _STRING.sub(set_apart, expression)
    if '"' in skeleton or "'" in skeleton:  # a quote no literal took: not read as CEL reads it
        return None
    found: set[Read] = set()
    for at in _DEVICE.finditer(skeleton):
        use = _USE.match(skeleton, at.start())
        if use is None:
            return None
        kind, domain_at, name, name_at = use.groups()
        if kind is None:
            continue  # the driver and allowMultipleAllocations are always in the key
        domain = literals[int(domain_at)]
        if name_at is not None:
            name = literals[int(name_at)]
            if name is None:
                return None
        if domain is None:
            return None
        found.add((kind, domain, name))
    return tuple(sorted(found, key=repr))


def _mapping(value: Any) -> bool:
    return type(value) is dict or isinstance(value, Mapping)  # JSON's dict first: an ABC check costs more


def alike_key(expression: str, driver: str, attributes: Any, capacity: Any, shared: bool = False) -> bytes | None:
    """What the selector sees of this device, as bytes: devices with equal keys give it the same result.
    None when it reads more than can be told, or the device is not one CEL can be given (an attribute
    of no known type errs whatever the selector reads: compile.go DeviceMatches converts them all)."""
    wanted = reads(expression)
    if wanted is None or not _mapping(attributes or {}) or not _mapping(capacity or {}):
        return None
    if not device_cel.convertible(attributes or {}, capacity or {}):
        return None
    seen: list[Any] = [driver, shared]  # what `device.driver` and `device.allowMultipleAllocations` read
    for kind, domain, name in wanted:
        source: Mapping[str, Any] = (attributes if kind == "attributes" else capacity) or {}
        if name is None:  # in the slice's order: of two names for one attribute, the later one is seen
            seen.append([(k, v) for k, v in source.items() if device_cel.qualified(str(k), driver)[0] == domain])
        elif domain == driver and f"{domain}/{name}" in source and name in source:
            return None  # one attribute under both its names: which one CEL sees depends on their order
        else:
            seen.append(source.get(f"{domain}/{name}") if domain != driver or name not in source else source[name])
    try:
        return marshal.dumps(seen, 2)
    except ValueError:
        return None


# what `attributes_read` tells apart before it says "everything": a tenant's selectors each naming another
# attribute would otherwise keep every device's own attributes (its UUID) in what the slices are compared by
MAX_ATTRIBUTES_READ = 64


def attributes_read(classes: Iterable[Mapping[str, Any]], specs: Iterable[Mapping[str, Any]]) -> frozenset[str] | None:
    """The attributes, as "domain/name", that the DeviceClasses' selectors and the claim specs' request
    selectors and constraints (`matchAttribute`, `distinctAttribute`) read of any device; None when one
    reads more than can be told (`reads`), a whole domain, or more than MAX_ATTRIBUTES_READ of them. An
    attribute no one reads is in no answer: slices that differ only in such (each device's UUID) count
    alike (device_slices.projected)."""
    found: set[str] = set()
    expressions: list[str] = []
    for device_class in classes:
        expressions.extend(cel_selectors(_get(device_class, "spec", "selectors")))
    for spec in specs:
        devices = _get(spec, "devices")
        for request in _list(_get(devices, "requests")):
            for sub in [_get(request, "exactly"), *_list(_get(request, "firstAvailable"))]:
                expressions.extend(cel_selectors(_get(sub, "selectors")))
        for constraint in _list(_get(devices, "constraints")):
            for field in ("matchAttribute", "distinctAttribute"):
                if isinstance(name := _get(constraint, field), str) and name:
                    found.add(name if "/" in name else f"/{name}")  # a bare name: no domain, read as the driver's
    for expression in dict.fromkeys(expressions):
        read = reads(expression)
        if read is None:
            return None
        for kind, domain, name in read:
            if kind != "attributes":
                continue  # a device's capacity is compared whole
            if name is None:
                return None
            found.add(f"{domain}/{name}")
        if len(found) > MAX_ATTRIBUTES_READ:
            return None
    return frozenset(found) if len(found) <= MAX_ATTRIBUTES_READ else None


@functools.lru_cache(maxsize=64)  # per driver and set read: a handful in a cluster
def kept_names(driver: str, read: frozenset[str]) -> frozenset[str]:
    """The attribute keys a slice of `driver` may write that `read` names: "domain/name", and the bare
    name where the domain is the driver's (compile.go parseQualifiedName, device_cel.qualified)."""
    kept = set(read)
    for qualified_name in read:
        domain, _, name = qualified_name.partition("/")
        if domain in (driver, ""):
            kept.update((name, f"{driver}/{name}"))
    return frozenset(kept)


def _get(obj: Any, *path: str) -> Any:
    for step in path:
        obj = obj.get(step) if isinstance(obj, Mapping) else None
    return obj


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
