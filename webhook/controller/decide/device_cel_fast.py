"""Plain device selectors on the CEL project's own C++ runtime (cel-expr-python, a wrapper of cel-cpp).

Most selectors real drivers and users write read a device's driver and a few of its attributes by name
and compare them, perhaps with `matches`: `device.driver == "gpu.nvidia.com" &&
device.attributes["gpu.nvidia.com"].productName.matches("^NVIDIA H100")`. cel-cpp evaluates such a
selector about 40x faster than cel-python (bench/devices.py --cel prints both), and matches with RE2,
linear in its input as kube-scheduler's cel-go is (cel-python uses Python's backtracking `re`).

Only what both runtimes read alike is sent here; anything else goes to device_cel.py's cel-python
evaluator, which carries Kubernetes' own libraries (quantity, semver, the strings and optional
extensions, URLs, IPs, formats) held to kube-scheduler's by the Go oracle (tests/real/test_real_cel.py):
- `device` only as `device.driver`, `device.allowMultipleAllocations` and
  `device.attributes["<domain>"].<name>` (a literal domain, a plain name): Kubernetes gives an unknown
  domain as an empty map (compile.go newStringInterfaceMapWithDefault), so each domain named is given,
  empty when the device has none; never `device.capacity` (quantities are Kubernetes' own type);
- functions: `has`, `size`, `int`, and the members `matches`, `startsWith`, `endsWith`, `contains`,
  `size`; the macros `exists`, `all`, `exists_one`, `map`, `filter` on lists the expression writes;
- for each device, only attributes of the int, bool and string kinds are read: a selector that reads a
  version (semver) attribute of this device is evaluated by cel-python.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

try:  # the image has it (requirements.lock); without it every selector goes to cel-python
    from cel_expr_python import cel
except ImportError:  # pragma: no cover - a platform without its wheel
    cel = None


def _protobuf_usable() -> bool:
    """cel-cpp's wrapper reads message classes through google.protobuf when it can import it, and aborts
    the process when that protobuf has no `message_factory.GetMessageClass` (before 4.22; Debian 12's
    python3-protobuf is 4.21): then every selector goes to cel-python. No protobuf at all is fine."""
    if importlib.util.find_spec("google") is None or importlib.util.find_spec("google.protobuf") is None:
        return True
    from google.protobuf import message_factory

    return hasattr(message_factory, "GetMessageClass")


MAX_FAST = 4096  # expressions kept compiled (tenant input: bounded)
# bench/devices.py --cel python turns it off, to measure cel-python beside it
ENABLED = cel is not None and _protobuf_usable()
GLOBAL_FUNCTIONS = frozenset({"has", "size", "int"})
MEMBER_FUNCTIONS = frozenset({"matches", "startsWith", "endsWith", "contains", "size"})
MACROS = frozenset({"exists", "all", "exists_one", "map", "filter"})
DEVICE_FIELDS = frozenset({"driver", "allowMultipleAllocations", "attributes"})
WORDS = frozenset({"true", "false", "null", "in"})

_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'')
_PREFIXED = re.compile(r'(?<![\w"\'])[rRbB]{1,2}["\']|"""|\'\'\'')
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ATTRIBUTE = re.compile(r"device\s*\.\s*attributes\s*\[\s*(S\d+)\s*\]\s*\.\s*([A-Za-z_][A-Za-z0-9_]*)(?!\s*\()")
_MACRO_VARIABLE = re.compile(r"\.\s*(?:exists|all|exists_one|map|filter)\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*,")


@dataclass(frozen=True)
class FastSelector:
    program: Any
    reads: frozenset[tuple[str, str]]  # (domain, name) of every attribute it reads by name
    domains: frozenset[str]


def _masked(expression: str) -> tuple[str, list[str]] | None:
    """The expression with each string literal replaced by S<n>, and the literals' values; None for a
    literal this reading does not take (raw, bytes, triple-quoted, or with an escape)."""
    if _PREFIXED.search(expression):
        return None
    literals: list[str] = []

    def mask(found: re.Match[str]) -> str:
        literals.append(found.group(0))
        return f" S{len(literals) - 1} "

    masked = _STRING.sub(mask, expression)
    if '"' in masked or "'" in masked or any("\\" in literal for literal in literals):
        return None
    return masked, [literal[1:-1] for literal in literals]


def _plain(masked: str, literals: list[str]) -> tuple[frozenset[tuple[str, str]], frozenset[str]] | None:
    """What the selector reads of the device by name, when it reads nothing else (the module's rules)."""
    accesses = [(literals[int(m.group(1)[1:])], m.group(2)) for m in _ATTRIBUTE.finditer(masked)]
    variables = set(_MACRO_VARIABLE.findall(masked))
    attribute_uses = 0
    for found in _IDENTIFIER.finditer(masked):
        name, before, after = found.group(0), masked[: found.start()].rstrip(), masked[found.end() :].lstrip()
        if re.fullmatch(r"S\d+", name):
            continue
        called = after.startswith("(")
        if before.endswith("."):
            if called and name not in MEMBER_FUNCTIONS | MACROS:
                return None
            if name == "attributes":
                attribute_uses += 1
            continue
        if called:
            if name not in GLOBAL_FUNCTIONS:
                return None
        elif name == "device":
            field = _IDENTIFIER.match(after[1:].lstrip()) if after.startswith(".") else None
            if field is None or field.group(0) not in DEVICE_FIELDS:
                return None
        elif name not in WORDS and name not in variables:
            return None
    if attribute_uses != len(accesses) or "capacity" in masked:
        return None
    return frozenset(accesses), frozenset(domain for domain, _ in accesses)


@functools.lru_cache(maxsize=MAX_FAST)
def fast_selector(expression: str) -> FastSelector | None:
    """The selector compiled for cel-cpp, or None when it is not read alike by both runtimes."""
    if not ENABLED:
        return None
    masked = _masked(expression)
    read = _plain(*masked) if masked is not None else None
    if read is None:
        return None
    try:
        program = _environment().compile(expression)
    except Exception:  # its own parser's or checker's refusal: cel-python reads it (or says why not)
        return None
    return FastSelector(program, *read)


@functools.cache
def _environment() -> Any:
    assert cel is not None
    return cel.NewEnv(variables={"device": cel.Type.DYN})


def device_map(
    selector: FastSelector, driver: str, attributes: Mapping[str, Any], shared: bool
) -> dict[str, Any] | None:
    """The `device` variable, None when the selector reads an attribute of this device that is not an
    int, a bool or a string (a version: cel-python's Semver)."""
    by_domain: dict[str, dict[str, Any]] = {domain: {} for domain in selector.domains}
    for name, attribute in attributes.items():
        domain, slash, key = name.partition("/")  # no domain: the driver's (compile.go parseQualifiedName)
        domain, key = (domain, key) if slash else (driver, name)
        if domain not in by_domain or not isinstance(attribute, Mapping):
            continue
        if "int" in attribute and type(attribute["int"]) is int and -(2**63) <= attribute["int"] < 2**63:
            by_domain[domain][key] = attribute["int"]
        elif "bool" in attribute and type(attribute["bool"]) is bool:
            by_domain[domain][key] = attribute["bool"]
        elif "string" in attribute and type(attribute["string"]) is str:
            by_domain[domain][key] = attribute["string"]
        elif (domain, key) in selector.reads:
            return None
    return {"driver": driver, "attributes": by_domain, "allowMultipleAllocations": shared}


def evaluate(selector: FastSelector, device: dict[str, Any], expression: str) -> bool | str:
    """True or False, or why not, as device_cel words it (a runtime error fails kube-scheduler's
    allocation on that node: allocator_stable.go selectorsMatch)."""
    value = selector.program.eval(data={"device": device})
    kind = value.type()
    if kind == cel.Type.BOOL:
        return bool(value.value())
    if kind == cel.Type.ERROR:
        return f"CEL runtime error in {expression!r}: {str(value.value())[:200]}"
    return f"CEL {expression!r} gave {json.dumps(kind.name())}, not a bool"
