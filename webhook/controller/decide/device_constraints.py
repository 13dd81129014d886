"""A claim's `matchAttribute` and `distinctAttribute` constraints, as kube-scheduler's structured allocator
applies them (k8s.io/dynamic-resource-allocation structured/internal/stable allocator_stable.go:
matchAttributeConstraint, distinctAttributeConstraint; the v1 API's DeviceConstraint).

- a constraint names the requests it covers (`requests`; none: every request of the claim); a request
  with `firstAvailable` is covered by its own name and each subrequest by `request/subrequest`;
- `matchAttribute`: every device allocated for those requests has the attribute, all with one value;
  `distinctAttribute`: every one has it, all values different; a device without the attribute fails
  either (add returns false);
- the attribute is fully qualified (`domain/name`); a device's attribute without a domain is its
  driver's (`parseQualifiedName`), and values compare by type and value (int, bool, string, version).

The same search keeps a claim's devices within the shared counters of partitionable devices
(device_counters.py), which a matching by augmenting paths cannot.

The search is the allocator's: devices tried in order for each unit (one device of a request), backing
out of a choice that leaves a later unit none. It is exponential in the worst case upstream too; here it
stops after MAX_SEARCH_STEPS tries and the claim counts as not allocatable there (the Gang says why).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from webhook.controller.decide.device_types import Device

MAX_SEARCH_STEPS = 20_000  # devices tried per claim allocation on one node

DeviceId = tuple[str, str, str]
CounterKey = tuple[str, str, str, str]  # (driver, pool, counter set, counter)


@dataclass(frozen=True)
class Constraint:
    requests: tuple[str, ...]  # the requests it covers; none: all of the claim's
    attribute: str  # fully qualified
    distinct: bool = False  # distinctAttribute; else matchAttribute

    def covers(self, subrequest: str) -> bool:
        return not self.requests or subrequest in self.requests or subrequest.partition("/")[0] in self.requests


def constraints_of(claim_spec: Mapping[str, Any]) -> tuple[Constraint, ...]:
    """The claim's constraints (resource/v1 DeviceClaim.constraints); one naming neither kind is left out."""
    found = []
    for raw in (claim_spec.get("devices") or {}).get("constraints") or []:
        if not isinstance(raw, dict):
            continue
        requests = tuple(str(r) for r in raw.get("requests") or [])
        if raw.get("matchAttribute"):
            found.append(Constraint(requests, str(raw["matchAttribute"])))
        elif raw.get("distinctAttribute"):
            found.append(Constraint(requests, str(raw["distinctAttribute"]), distinct=True))
    return tuple(found)


def attribute_value(driver: str, attributes: Any, qualified: str) -> tuple[str, Any] | None:
    """The device's value of a fully qualified attribute, as (type, value); None when it has none."""
    if not isinstance(attributes, Mapping):
        return None
    domain, _, name = qualified.partition("/")
    raw = attributes.get(qualified)
    if raw is None and domain == driver:
        raw = attributes.get(name)
    if not isinstance(raw, Mapping):
        return None
    for kind in ("int", "bool", "string", "version"):
        if kind in raw:
            value = raw[kind]
            return (kind, value if isinstance(value, int | bool | str) else str(value))
    return None


def claims_alike(devices: Sequence[Device], attributes: Sequence[str], count: int, limit: int) -> int:
    """How many claims of one request for `count` devices, all with one value of each of `attributes`
    (its matchAttribute constraints), the devices hold one after the other: each claim takes `count`
    devices of one group of devices alike, whichever group the search finds first, so the number is the
    same in any order (a device without an attribute is in no group). At most `limit`."""
    groups: Counter[tuple[tuple[str, Any] | None, ...]] = Counter(
        tuple(attribute_value(d.id[0], d.attributes, a) for a in attributes) for d in devices
    )
    return min(limit, sum(n // count for values, n in groups.items() if None not in values))


@dataclass(frozen=True)
class Candidate:
    """A device one unit may take: its id, its values of the constrained attributes, and the shared
    counters it consumes (partitionable devices: device_counters.py). A device that allows multiple
    allocations (`shared`) may be taken again by another request of the claim, each share consuming
    `capacity` of what it has `left` (allocateDevice marks no such device in use)."""

    id: DeviceId
    values: tuple[tuple[str, Any] | None, ...]  # per constraint
    consumes: tuple[tuple[CounterKey, Decimal], ...] = ()
    shared: bool = False
    capacity: tuple[tuple[str, Decimal], ...] = ()
    left: tuple[tuple[str, Decimal], ...] = ()


class _Search:
    """The state of one search: each constraint's values taken (how often), the devices used (a shared
    one by request: one request's units take distinct devices, allocateOne's nextLocation), and what the
    shares of each shared device took."""

    def __init__(self, constraints: Sequence[Constraint], left: dict[CounterKey, Decimal] | None = None) -> None:
        self.constraints = constraints
        self.seen: list[dict[tuple[str, Any], int]] = [{} for _ in constraints]
        self.used: set[DeviceId | tuple[str, DeviceId]] = set()
        self.left = left if left is not None else {}  # what each shared counter still holds
        self.shares: dict[DeviceId, tuple[int, dict[str, Decimal]]] = {}  # a shared device's shares: how many, what
        self.steps = 0

    @staticmethod
    def _use(name: str, device: Candidate) -> DeviceId | tuple[str, DeviceId]:
        return (name.partition("/")[0], device.id) if device.shared else device.id

    def fits(self, name: str, device: Candidate) -> bool:
        if self._use(name, device) in self.used:
            return False
        if device.shared:
            took, left = self.shares.get(device.id, (0, {}))[1], dict(device.left)
            if any(took.get(c, Decimal(0)) + amount > left.get(c, Decimal(0)) for c, amount in device.capacity):
                return False
        if device.id not in self.shares and any(
            self.left.get(key, Decimal(0)) < amount for key, amount in device.consumes
        ):
            return False
        for i, constraint in enumerate(self.constraints):
            if not constraint.covers(name):
                continue
            value, seen = device.values[i], self.seen[i]
            if value is None or (value in seen if constraint.distinct else bool(seen) and value not in seen):
                return False
        return True

    def take(self, name: str, device: Candidate, sign: int) -> None:
        (self.used.add if sign > 0 else self.used.discard)(self._use(name, device))
        alone = True  # the device's only share in this search: its counters go with it (skipCounterCheck)
        if device.shared:
            count, took = self.shares.get(device.id, (0, {}))
            alone = count == (0 if sign > 0 else 1)
            for capacity, amount in device.capacity:
                took[capacity] = took.get(capacity, Decimal(0)) + sign * amount
            if count + sign:
                self.shares[device.id] = (count + sign, took)
            else:
                del self.shares[device.id]
        if alone:
            for key, amount in device.consumes:
                self.left[key] = self.left.get(key, Decimal(0)) - sign * amount
        for i, constraint in enumerate(self.constraints):
            value = device.values[i]
            if constraint.covers(name) and value is not None:
                count = self.seen[i].get(value, 0) + sign
                if count:
                    self.seen[i][value] = count
                else:
                    del self.seen[i][value]

    def assign(self, units: Sequence[tuple[str, Sequence[Candidate]]], at: int, chosen: list[DeviceId]) -> bool:
        if at == len(units):
            return True
        name, candidates = units[at]
        for device in candidates:
            self.steps += 1
            if self.steps > MAX_SEARCH_STEPS:
                return False
            if not self.fits(name, device):
                continue
            self.take(name, device, +1)
            chosen.append(device.id)
            if self.assign(units, at + 1, chosen):
                return True
            chosen.pop()
            self.take(name, device, -1)
        return False


def search(
    units: Sequence[tuple[str, Sequence[Candidate]]],
    fixed: Sequence[tuple[str, Candidate]],
    constraints: Sequence[Constraint],
    left: dict[CounterKey, Decimal] | None = None,
) -> list[DeviceId] | None:
    """Devices for every unit (a subrequest's name and the devices it may take, one unit per device it
    needs) and the `fixed` ones (an `All` request's), distinct, meeting every constraint and within what
    the shared counters hold (`left`); None when there are none, or none was found within
    MAX_SEARCH_STEPS."""
    state = _Search(constraints, dict(left or {}))
    for name, device in fixed:
        if not state.fits(name, device):
            return None
        state.take(name, device, +1)
    chosen: list[DeviceId] = []
    if not state.assign(units, 0, chosen):
        return None
    return [device.id for _, device in fixed] + chosen


def augment(
    unit: int,
    units: Sequence[Sequence[DeviceId]],
    owner: dict[DeviceId, int],
    seen: set[DeviceId],
    blocked: set[DeviceId],
) -> bool:
    """Kuhn's augmenting path: a device for `unit`, moving earlier units to other devices if need be (the
    search of an unconstrained claim: distinct devices, any of each unit's)."""
    for device in units[unit]:
        if device in blocked or device in seen:
            continue
        seen.add(device)
        if device not in owner or augment(owner[device], units, owner, seen, blocked):
            owner[device] = unit
            return True
    return False
