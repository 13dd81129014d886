"""What outlives one inventory: slices parsed and selector results, in bounded maps evicted per entry."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

from webhook.controller.decide import device_cel, device_reads
from webhook.controller.decide.device_types import Device, Pool

MatchKey = tuple[bytes, str]  # (a device's content, Device.content; a selector's expression)
MAX_REMEMBERED_MATCHES = 400_000  # selector results kept (device content, expression), least recent out
# selector evaluations one pass may ask for (40,000 devices alike cost a handful; a cluster of distinct
# devices and many waiting selector sets is spread over passes, each node counted again until done)
MAX_EVALUATIONS_PER_PASS = 50_000
MAX_REMEMBERED_FAILURES = 4096  # selectors' last errors kept, for the Gangs that wait on them
MAX_REMEMBERED_SLICES = 100_000  # slices kept parsed
MAX_CHUNK = 1024  # pairs of one expression asked of the evaluator at once, when its payer has room
CLUSTER_PAYER = ""  # DeviceClass selectors: the administrator's, charged to no tenant
# an expression -> the namespaces whose waiting templates and claims name it (device_demand.selector_payers)
Payers = Mapping[str, tuple[str, ...]]
Asked = list[tuple[MatchKey, Device]]


class Ledger(Protocol):
    """What tenants' CEL costs a pass, by namespace (the controller's: observe/cel_budget.TenantBudget)."""

    clock: Callable[[], float]  # the CPU seconds the evaluator's evaluations used
    cpu: Callable[[], float]  # this thread's CPU seconds: what a constraint search uses

    def new_pass(self) -> None: ...
    def left(self, payer: str) -> float: ...
    def charge(self, payer: str, expression: str, seconds: float, evaluations: int) -> None: ...
    def dear(self, expression: str) -> str | None: ...
    def defer(self, payer: str, evaluations: int) -> str: ...
    def over_budget(self, expression: str) -> None: ...


class Memo:
    """What outlives one inventory (DeviceWatch keeps one): slices parsed, by uid and resourceVersion,
    and selector results, by device content: a claim allocated or a slice republished changes the
    inventory, not the 40,000 devices' parsing and CEL. Selector results are evaluated in batches by
    `evaluator` (the controller's has a CPU budget per evaluation, out of process) and kept up to
    MAX_REMEMBERED_MATCHES, the least recently used evicted one by one."""

    def __init__(self, evaluator: device_cel.Evaluator = device_cel.evaluate_all, ledger: Ledger | None = None) -> None:
        self.evaluator = evaluator
        self.ledger = ledger  # None: no namespace is charged (tests, simulation, explain)
        self.matched: BoundedMap[MatchKey, bool | device_cel.SelectorError] = BoundedMap(MAX_REMEMBERED_MATCHES)
        self.slices: dict[tuple[str, str], Pool] = {}
        # expression -> why it is not evaluated (over its CEL budget): what a waiting gang's Gang says
        self.failed: BoundedMap[str, str] = BoundedMap(MAX_REMEMBERED_FAILURES)
        # expression -> why its evaluations wait for a later pass (its namespace's share spent)
        self.postponed: BoundedMap[str, str] = BoundedMap(MAX_REMEMBERED_FAILURES)
        # (what an expression reads of a device, the expression) -> its result (device_reads.py)
        self.alike: BoundedMap[tuple[bytes, str], bool | device_cel.SelectorError] = BoundedMap(MAX_REMEMBERED_MATCHES)
        self.evaluations = 0  # selector evaluations asked of the evaluator (a metric: observe/devices.py)
        # what one pass may ask of the evaluator (`new_pass` refills it); the rest wait for the next pass
        self.budget = MAX_EVALUATIONS_PER_PASS
        self.deferred = 0  # evaluations left to a later pass for the budget (a metric)
        self.unanswered = 0  # of them, those no evaluator could answer then (asked again later)
        # by pool id: the pool (so no other takes its id) and the expressions primed on it
        self._primed: dict[int, tuple[Pool, frozenset[str]]] = {}

    def new_pass(self) -> None:
        """A pass begins: its budget of evaluations is whole again."""
        self.budget = MAX_EVALUATIONS_PER_PASS
        if self.ledger is not None:
            self.ledger.new_pass()

    def charged_count(self, claim_key: str, count: Callable[[], int]) -> int | None:
        """A claim's count on one node (device_count.claims_on: the constraint searches), charged to the
        claim's namespace as its CEL is; None, with the claim postponed, once the namespace's share of the
        pass is spent (the node is counted again at a later pass)."""
        ledger = self.ledger
        if ledger is None:
            return count()
        payer = claim_key.partition(" ")[2].partition("/")[0] or CLUSTER_PAYER
        if ledger.left(payer) <= 0:
            self.postponed[claim_key] = ledger.defer(payer, 1)
            self.unanswered += 1
            return None
        started = ledger.cpu()
        try:
            return count()
        finally:
            ledger.charge(payer, "", ledger.cpu() - started, 0)
            self.postponed.pop(claim_key)

    def prime_within(
        self, pools: Sequence[Pool], class_selectors: Sequence[str], selectors: Sequence[str], payers: Payers
    ) -> None:
        """A class's selectors on the pools' devices, then a request's `selectors` only on the devices the
        class selects, as kube-scheduler's allocator asks them in that order (allocator_stable.go
        isSelectable: the class's first): a tenant's selectors never cost devices of other classes."""
        self.prime(pools, class_selectors, payers)
        if not selectors:
            return
        matched = self.matched
        chosen = [
            device
            for pool in pools
            for device in pool.devices
            if not device.unmodelled and all(matched.get((device.content, s)) is True for s in class_selectors)
        ]
        missing = {(d.content, s): d for d in chosen for s in selectors if (d.content, s) not in matched}
        if missing:
            self.evaluate(missing, payers)

    def prime(self, pools: Iterable[Pool], expressions: Iterable[str], payers: Payers | None = None) -> None:
        """Every (device content, expression) of these pools not remembered yet, evaluated in one batch. A
        pool already primed for these expressions (the same object: its slice unchanged) is skipped."""
        matched, primed = self.matched, self._primed
        wanted = frozenset(expressions)
        if not wanted:
            return
        missing: dict[MatchKey, Device] = {}
        now_primed: list[tuple[int, tuple[Pool, frozenset[str]]]] = []
        for pool in pools:
            done = primed.get(id(pool))
            if done is not None and done[0] is pool and wanted <= done[1]:
                continue
            for device in pool.devices:
                if device.unmodelled:
                    continue
                for expression in wanted:
                    key = (device.content, expression)
                    if key not in matched and key not in missing:
                        missing[key] = device
            now_primed.append((id(pool), (pool, wanted | done[1] if done is not None and done[0] is pool else wanted)))
        unanswered = self.unanswered
        if missing:
            self.evaluate(missing, payers)
        if self.unanswered != unanswered:  # some pairs deferred (a share spent): primed at a later pass, whole
            return
        primed.update(now_primed)
        while len(primed) > MAX_REMEMBERED_SLICES:
            del primed[next(iter(primed))]

    def evaluate(
        self, missing: Mapping[MatchKey, Device], payers: Payers | None = None
    ) -> dict[MatchKey, bool | device_cel.SelectorError]:
        """Each (device content, expression) evaluated, remembered unless no evaluator could answer now.
        Devices alike in what the expression reads (device_reads.py) share one evaluation, in this batch
        and, through `alike`, in later ones."""
        found: dict[MatchKey, bool | device_cel.SelectorError] = {}
        asked: list[tuple[MatchKey, Device]] = []
        sharing: dict[tuple[bytes, str], list[tuple[MatchKey, Device]]] = {}
        for key, device in missing.items():
            seen = device_reads.alike_key(key[1], device.id[0], device.attributes, device.capacity, device.shared)
            if seen is None:
                asked.append((key, device))
                continue
            known = self.alike.get((seen, key[1]))
            if known is not None:
                found[key] = self.matched[key] = known
                continue
            group = sharing.setdefault((seen, key[1]), [])
            if not group:
                asked.append((key, device))
            group.append((key, device))
        answered = self._ask(asked, found, payers or {})
        for shared_key, group in sharing.items():
            said = answered.get(group[0][0])
            if said is None:  # deferred to a later pass, or unanswered: the group waits with it
                for key, _ in group[1:]:
                    found[key] = found[group[0][0]]
                continue
            self.alike[shared_key] = said
            for key, _ in group[1:]:
                found[key] = self.matched[key] = said
        return found

    def _ask(
        self, asked: Asked, found: dict[MatchKey, bool | device_cel.SelectorError], payers: Payers
    ) -> dict[MatchKey, bool | device_cel.SelectorError]:
        """The evaluator's answers, within this pass's budget, into `found`; those remembered, returned."""
        matched, remembered = self.matched, {}
        if len(asked) > self.budget:
            later = device_cel.SelectorError("this pass's CEL budget is spent: evaluated next pass", transient=True)
            for key, _ in asked[self.budget :]:
                found[key] = later
            self.deferred += len(asked) - self.budget
            self.unanswered += len(asked) - self.budget
            asked = asked[: self.budget]
        self.budget -= len(asked)
        by_expression: dict[str, Asked] = {}
        for item in asked:
            by_expression.setdefault(item[0][1], []).append(item)
        for expression, group in by_expression.items():
            for (key, device), outcome in self._answer(expression, group, payers.get(expression, ())):
                if isinstance(outcome, device_cel.SelectorError):
                    found[key] = outcome
                elif isinstance(outcome, Exception):  # an attribute of no known type: kube-scheduler errs too
                    found[key] = device_cel.SelectorError(f"device {'/'.join(device.id)}: {outcome}")
                else:
                    found[key] = bool(outcome)
                said = found[key]
                if isinstance(said, device_cel.SelectorError) and said.transient:
                    self.unanswered += 1
                    continue
                matched[key] = remembered[key] = said
                if isinstance(said, device_cel.SelectorError) and said.over_budget:
                    if key[1] not in self.failed:  # the first reason found stays what the Gang says
                        self.failed[key[1]] = str(said)[-300:]
                    if self.ledger is not None and not said.ended:
                        self.ledger.over_budget(key[1])
        return remembered

    def _answer(self, expression: str, group: Asked, owners: tuple[str, ...]) -> list[tuple[Any, device_cel.Outcome]]:
        """One expression on the group's devices. With a ledger: charged to the owner with the most room
        left, asked in chunks that grow while the owner's share holds them (1, 4, 16, ...: a dear selector
        spends about its share, not a batch's worth), the rest deferred once the share is spent; an
        expression dear on average (the ledger's `dear`) is over budget for the devices left."""
        ledger = self.ledger
        if ledger is None:
            self.evaluations += len(group)
            return list(zip(group, self.evaluator([_pair(expression, d) for _, d in group]), strict=True))
        payer = max(owners, key=ledger.left) if owners else CLUSTER_PAYER
        answered: list[tuple[Any, device_cel.Outcome]] = []
        at, size = 0, 1
        while at < len(group):
            dear = ledger.dear(expression)
            if dear is not None:
                over = device_cel.SelectorError(f"CEL {expression[:200]!r} {dear}", over_budget=True)
                return answered + [(item, over) for item in group[at:]]
            if ledger.left(payer) <= 0:
                later = device_cel.SelectorError(ledger.defer(payer, len(group) - at), transient=True)
                self.postponed[expression] = str(later)
                self.deferred += len(group) - at
                return answered + [(item, later) for item in group[at:]]
            chunk = group[at : at + size]
            started = ledger.clock()
            outcomes = self.evaluator([_pair(expression, d) for _, d in chunk])
            self.evaluations += len(chunk)
            took = ledger.clock() - started
            ledger.charge(payer, expression, took, len(chunk))
            answered += zip(chunk, outcomes, strict=True)
            at += len(chunk)
            room = ledger.left(payer) / max(took / len(chunk), 1e-6)
            size = max(1, int(min(size * 4, MAX_CHUNK, room)))
        self.postponed.pop(expression)
        return answered


def _pair(expression: str, device: Device) -> tuple[str, device_cel.DeviceFacts]:
    return expression, (device.id[0], device.attributes, device.capacity, device.shared)


K = TypeVar("K")
V = TypeVar("V")


class BoundedMap(Generic[K, V]):
    """A map of at most `bound` entries, the least recently read or written evicted first, one at a
    time (never cleared whole: a tenant filling it costs only its own entries again)."""

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.evicted = 0
        self._entries: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        found = self._entries.get(key)
        if found is not None:
            self._entries.move_to_end(key)
        return found

    def __setitem__(self, key: K, value: V) -> None:
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self.bound:
            self._entries.popitem(last=False)
            self.evicted += 1

    def pop(self, key: K) -> V | None:
        return self._entries.pop(key, None)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries
