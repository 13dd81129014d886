"""The CEL of DRA device selectors, as kube-scheduler evaluates them, on cel-python (celpy).

What Kubernetes adds to plain CEL for a selector (k8s.io/dynamic-resource-allocation/cel/compile.go):
- one variable, `device`: `driver`, `attributes` and `capacity`, each a map from a domain to a map from
  an attribute (or capacity) name to its value; a name without a domain is the driver's
  (`parseQualifiedName`). An unknown domain is an empty map, not an error
  (`newStringInterfaceMapWithDefault`): `device.attributes["other.example.com"].model` fails on `model`;
- attribute values are int, bool, string or a semantic version (`getAttributeValue`), capacities are
  quantities;
- Kubernetes' quantity and semver libraries (k8s.io/apiserver/pkg/cel/library quantity.go, semverlib.go):
  `quantity(s)`, `isQuantity(s)`, `q.compareTo(q)`, `q.isGreaterThan(q)`, `q.isLessThan(q)`,
  `q.isInteger()`, `q.asInteger()`, `q.asApproximateFloat()`, `q.sign()`, `q.add(q|int)`,
  `q.sub(q|int)`; `semver(s)`, `isSemver(s)`, `v.major()`, `v.minor()`, `v.patch()`,
  `v.compareTo(v)`, `v.isGreaterThan(v)`, `v.isLessThan(v)`.

Kubernetes' extensions are device_cel_ext.py's, its macros device_cel_rewrite.py's. A selector this
evaluator cannot read (a function it does not have, such as `format`) is reported as such, never taken
for a device that does not match: kube-scheduler would judge it, gangkeeper cannot.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any

import celpy
from celpy import celtypes
from celpy.evaluation import CELEvalError

from webhook import resources
from webhook.controller.decide import (
    device_cel_ext,
    device_cel_fast,
    device_cel_format,
    device_cel_formats,
    device_cel_net,
    device_cel_optional,
    device_cel_rewrite,
    device_cel_url,
)

MAX_COMPILED = 4096  # selectors are tenant input: the compiled cache is bounded
# resource.k8s.io's own bound on a selector's text (k8s.io/api/resource/v1 types.go
# CELSelectorExpressionMaxLength): the API server refuses longer ones, so a longer one was never applied
MAX_EXPRESSION_LENGTH = 10 * 1024

# what a selector can see of one device: (driver, attributes, capacity, allowMultipleAllocations) as the
# slice has them (JSON)
DeviceFacts = tuple[str, Any, Any, bool]
Outcome = bool | Exception  # a SelectorError, or a ValueError for an attribute of no known type
# evaluates each (expression, device) pair; the controller's runs out of process with a CPU budget per
# pair (controller/observe/cel_sandbox.py), the default here in process (tests, simulation, explain)
Evaluator = Callable[[Sequence[tuple[str, DeviceFacts]]], list[Outcome]]


class SelectorError(Exception):
    """A CEL runtime error (kube-scheduler fails the allocation on that node: allocator_stable.go
    selectorsMatch, "CEL runtime error"), or a selector this evaluator cannot read (`unreadable`)."""

    def __init__(
        self,
        message: str,
        unreadable: bool = False,
        over_budget: bool = False,
        transient: bool = False,
        ended: bool = False,
    ) -> None:
        super().__init__(message)
        self.unreadable = unreadable
        self.over_budget = over_budget  # it ran over its CPU budget (observe/cel_sandbox.py)
        self.transient = transient  # no evaluator could answer now: asked again, never remembered
        self.ended = ended  # its worker ended on it (over budget in this process only: cel_budget.py)


@functools.total_ordering
class Quantity:
    """A resource.Quantity in CEL: compared by value, as apiserver's cel.Quantity does."""

    def __init__(self, value: Decimal) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.value == other.value

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.value < other.value

    def __hash__(self) -> int:
        return hash(self.value)


SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*))*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$"
)


@functools.total_ordering
class Semver:
    """A semantic version (semver.org 2.0.0 precedence, as blang/semver's Compare: the build metadata
    is ignored, a pre-release sorts before its release, numeric identifiers below alphanumeric ones)."""

    def __init__(self, text: str) -> None:
        match = SEMVER.match(text)
        if match is None:
            raise ValueError(f"invalid semantic version {text!r}")
        self.major, self.minor, self.patch = (int(match.group(i)) for i in (1, 2, 3))
        self.pre = tuple(match.group(4).split(".")) if match.group(4) else ()

    def _key(self) -> tuple[Any, ...]:
        # no pre-release sorts after any pre-release of the same version
        pre = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in self.pre)
        return (self.major, self.minor, self.patch, 0 if self.pre else 1, pre)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Semver) and self._key() == other._key()

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Semver):
            return NotImplemented
        return self._key() < other._key()

    def __hash__(self) -> int:
        return hash(self._key())


# resource.ParseQuantity's grammar (k8s.io/apimachinery/pkg/api/resource/quantity.go): a signed number,
# then a binary or decimal SI suffix or a decimal exponent; nothing else, no space
QUANTITY = re.compile(r"^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[KMGTPE]i|[numkMGTPE]|[eE][+-]?\d+)?$")


def _quantity(text: object) -> Quantity:
    if not QUANTITY.match(str(text)):
        raise ValueError(f"quantities must match the regular expression {QUANTITY.pattern!r}: {text!r}")
    try:
        return Quantity(resources.parse(str(text)))
    except (ValueError, ArithmeticError) as error:
        raise ValueError(f"invalid quantity {text!r}") from error


def _is_quantity(text: object) -> celtypes.BoolType:
    try:
        _quantity(text)
    except ValueError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _is_semver(text: object) -> celtypes.BoolType:
    return celtypes.BoolType(SEMVER.match(str(text)) is not None)


def _compare(left: object, right: object) -> celtypes.IntType:
    if type(left) is not type(right) or not isinstance(left, Quantity | Semver):
        raise TypeError(f"compareTo: {type(left).__name__} with {type(right).__name__}")
    return celtypes.IntType((left > right) - (left < right))


def _as_quantity(value: object) -> Quantity:
    if isinstance(value, Quantity):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return Quantity(Decimal(int(value)))
    raise TypeError(f"not a quantity: {type(value).__name__}")


def _as_integer(q: Quantity) -> celtypes.IntType:
    if q.value != q.value.to_integral_value() or abs(q.value) >= 2**63:
        raise ValueError("cannot convert value to integer")
    return celtypes.IntType(int(q.value))


FUNCTIONS: dict[str, Any] = {
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "semver": lambda text: Semver(str(text)),
    "isSemver": _is_semver,
    "compareTo": _compare,
    "isGreaterThan": lambda a, b: celtypes.BoolType(_compare(a, b) > 0),
    "isLessThan": lambda a, b: celtypes.BoolType(_compare(a, b) < 0),
    "isInteger": lambda q: celtypes.BoolType(q.value == q.value.to_integral_value()),
    "asInteger": _as_integer,
    "asApproximateFloat": lambda q: celtypes.DoubleType(float(q.value)),
    "sign": lambda q: celtypes.IntType((q.value > 0) - (q.value < 0)),
    "add": lambda q, other: Quantity(q.value + _as_quantity(other).value),
    "sub": lambda q, other: Quantity(q.value - _as_quantity(other).value),
    "major": lambda v: celtypes.IntType(v.major),
    "minor": lambda v: celtypes.IntType(v.minor),
    "patch": lambda v: celtypes.IntType(v.patch),
}


class DomainMap(celtypes.MapType):
    """`device.attributes` and `device.capacity`: an unknown domain is an empty map."""

    def __getitem__(self, key: Any) -> Any:
        try:
            return super().__getitem__(key)
        except KeyError:
            return celtypes.MapType({})


_ENVIRONMENT = celpy.Environment()
_ALL_FUNCTIONS = {
    **FUNCTIONS,
    **device_cel_ext.FUNCTIONS,
    **device_cel_net.FUNCTIONS,
    **device_cel_optional.FUNCTIONS,
    **device_cel_format.FUNCTIONS,
    **device_cel_formats.FUNCTIONS,
    **device_cel_url.FUNCTIONS,
}
_REWRITTEN = device_cel_rewrite.Rewriter(
    device_cel_optional.parse,
    frozenset(n for n in _ALL_FUNCTIONS if "." in n),
    device_cel_format.CONVERSIONS,
)


@functools.lru_cache(maxsize=MAX_COMPILED)
def compiled(expression: str) -> Any:
    """The runnable selector, or a SelectorError(unreadable) for one cel-python cannot parse."""
    try:
        tree = device_cel_optional.with_positions(_REWRITTEN(device_cel_optional.parse(expression)))
        return _ENVIRONMENT.program(tree, functions=_ALL_FUNCTIONS)
    except Exception as error:  # celpy raises its parser's own errors: a selector it cannot read
        return SelectorError(f"cannot read CEL {expression!r}: {str(error).splitlines()[0][:200]}", unreadable=True)


def qualified(name: str, driver: str) -> tuple[str, str]:
    """(domain, name): a name without a domain is the driver's (compile.go parseQualifiedName)."""
    domain, slash, rest = name.partition("/")
    return (domain, rest) if slash else (driver, name)


def attribute_value(attribute: Mapping[str, Any]) -> Any:
    """One ResourceSlice attribute as CEL sees it (compile.go getAttributeValue); ValueError when it
    holds no value this model knows (kube-scheduler: "unsupported attribute value")."""
    if "int" in attribute:
        return celtypes.IntType(int(attribute["int"]))
    if "bool" in attribute:
        return celtypes.BoolType(bool(attribute["bool"]))
    if "string" in attribute:
        return celtypes.StringType(str(attribute["string"]))
    if "version" in attribute:
        return Semver(str(attribute["version"]))
    raise ValueError(f"unsupported attribute value {sorted(attribute)}")


def convertible(attributes: Mapping[str, Any], capacity: Mapping[str, Any]) -> bool:
    """Whether `device_variable` can make the device's variable (no attribute of no known type, no
    unreadable capacity), without making it: asked for every device not evaluated yet (device_reads.py)."""
    for attribute in attributes.values():
        if type(attribute) is not dict and not isinstance(attribute, Mapping):  # JSON's dict: no ABC check
            return False
        if "int" in attribute:
            try:
                if not -(2**63) <= int(attribute["int"]) < 2**63:  # CEL's int is 64 bits (celtypes.IntType)
                    return False
            except (TypeError, ValueError, OverflowError):
                return False
        elif "bool" in attribute or "string" in attribute:
            continue
        elif "version" not in attribute or not SEMVER.match(str(attribute["version"])):
            return False
    for value in capacity.values():
        try:
            _quantity(value.get("value") if isinstance(value, Mapping) else value)
        except ValueError:
            return False
    return True


def device_variable(
    driver: str, attributes: Mapping[str, Any], capacity: Mapping[str, Any], shared: bool = False
) -> celtypes.MapType:
    """The `device` variable of one device (compile.go DeviceMatches; `allowMultipleAllocations` from 1.34
    with DRAConsumableCapacity, beta and on by default in 1.36: the allocator passes the device's own)."""
    by_domain: dict[str, dict[str, Any]] = {}
    for name, attribute in attributes.items():
        domain, key = qualified(str(name), driver)
        by_domain.setdefault(domain, {})[key] = attribute_value(attribute if isinstance(attribute, Mapping) else {})
    capacities: dict[str, dict[str, Any]] = {}
    for name, value in capacity.items():
        domain, key = qualified(str(name), driver)
        amount = value.get("value") if isinstance(value, Mapping) else value
        capacities.setdefault(domain, {})[key] = _quantity(amount)

    def domains(values: Mapping[str, Mapping[str, Any]]) -> DomainMap:
        return DomainMap(
            {
                celtypes.StringType(domain): celtypes.MapType({celtypes.StringType(k): v for k, v in inner.items()})
                for domain, inner in values.items()
            }
        )

    return celtypes.MapType(
        {
            celtypes.StringType("driver"): celtypes.StringType(driver),
            celtypes.StringType("allowMultipleAllocations"): celtypes.BoolType(shared),
            celtypes.StringType("attributes"): domains(by_domain),
            celtypes.StringType("capacity"): domains(capacities),
        }
    )


def evaluate(expression: str, facts: DeviceFacts) -> Outcome:
    """One selector on one device, its error as a value (what a batch carries back)."""
    try:
        if len(expression) > MAX_EXPRESSION_LENGTH:
            raise SelectorError(f"CEL selector of {len(expression)} characters, over {MAX_EXPRESSION_LENGTH}")
        fast = device_cel_fast.fast_selector(expression)
        device = device_cel_fast.device_map(fast, facts[0], facts[1] or {}, facts[3]) if fast else None
        if fast is not None and device is not None:  # a plain selector, on cel-cpp (device_cel_fast.py)
            said = device_cel_fast.evaluate(fast, device, expression)
            return said if isinstance(said, bool) else SelectorError(said)
        return matches(expression, device_variable(facts[0], facts[1] or {}, facts[2] or {}, facts[3]))
    except (SelectorError, ValueError) as error:
        return error


def evaluate_all(pairs: Sequence[tuple[str, DeviceFacts]]) -> list[Outcome]:
    """The in-process Evaluator: no bound on the time one pair takes (trusted input only)."""
    return [evaluate(expression, facts) for expression, facts in pairs]


def matches(expression: str, device: celtypes.MapType) -> bool:
    """Whether the device satisfies the selector; SelectorError on a runtime error or an unreadable one."""
    program = compiled(expression)
    if isinstance(program, SelectorError):
        raise program
    try:
        result = program.evaluate({"device": device})
    except CELEvalError as error:
        raise _runtime_error(expression, error) from error
    except device_cel_format.Unsupported as error:
        raise SelectorError(f"cannot evaluate {expression!r}: {error}", unreadable=True) from error
    except (TypeError, ValueError, ArithmeticError, KeyError) as error:
        raise SelectorError(f"CEL runtime error in {expression!r}: {error}") from error
    if isinstance(result, CELEvalError):
        raise _runtime_error(expression, result)
    if not isinstance(result, celtypes.BoolType):
        raise SelectorError(f"CEL {expression!r} gave {type(result).__name__}, not a bool")
    return bool(result)


def _runtime_error(expression: str, error: Exception) -> SelectorError:
    text = str(error.args[0]) if error.args else str(error)
    # a function or macro of Kubernetes' CEL that cel-python lacks (cel.bind, the strings extension...)
    unreadable = text.startswith("undeclared reference")
    what = "cannot evaluate" if unreadable else "CEL runtime error in"
    return SelectorError(f"{what} {expression!r}: {text[:200]}", unreadable=unreadable)
