"""Which waiting gangs may be released now: the queue policy, a pure function of one pass's state.

Gangs are looked at in queue order (priority, then arrival). The policy decides what a gang that fits
may do when gangs ahead of it are still waiting:
- `fifo`: nothing; it waits behind the head (no starvation, but the cluster idles behind a large head).
- `first-fit`: it goes (the cluster stays busy, but small gangs keep a large one waiting forever).
- `backfill` (as Slurm's backfill scheduler): the first `depth` waiting gangs get reservations, the
  earliest time and the nodes at which each fits, from what runs now and when it is expected to end
  (a workload's `activeDeadlineSeconds` or `gangkeeper.io/expected-seconds`; unknown: never), each
  planned around the ones before it. A gang behind them goes only if it does not delay them: it ends
  before a reservation starts, or it fits in what the reservations leave over on their nodes. The
  head's reservation is exact; the later ones are planned at their start only.

The controller and `gangkeeper simulate` both run this code, so the replay measures what ships.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from webhook.controller.decide.eligibility import Domains, Eligibility
from webhook.controller.decide.placement import Member, on_empty_cluster, place
from webhook.controller.decide.pods import format_time
from webhook.controller.decide.shapes import Node, Shape, fit_count
from webhook.controller.decide.situation import Decision, GangState


class Policy(StrEnum):
    FIFO = "fifo"
    FIRST_FIT = "first-fit"
    BACKFILL = "backfill"


DEFAULT_POLICY = Policy.BACKFILL
DEFAULT_DEPTH = 4  # the replay of the Philly week: waits near first-fit's, large gangs no worse than fifo

Free = Mapping[str, Mapping[str, int]]


@dataclass(frozen=True)
class Ending:
    """Capacity that returns at `at` (seconds, on the caller's clock): a running pod expected to end."""

    at: float
    node: str
    units: Mapping[str, int]


@dataclass(frozen=True)
class Reservation:
    gang: str
    at: float | None  # None: not known (the capacity it needs is held by work of unknown length)
    use: dict[str, dict[str, int]]  # node -> units the head takes there
    ends: float | None = None  # when it gives them back, if its run time is known

    def signature(self) -> tuple[object, ...]:
        """Equal for two reservations exactly when they hold the same capacity over the same time."""
        use = tuple(sorted((node, tuple(sorted(units.items()))) for node, units in self.use.items()))
        return (self.gang, self.at, self.ends, use)

    def describe(self, clock: Callable[[float], str] = lambda t: f"{t:.0f}s") -> str:
        if not self.use:
            return "none: it would not fit even once all running work ended (see what blocks the rest)"
        when = clock(self.at) if self.at is not None else "when the running work on them ends (length unknown)"
        nodes = sorted(self.use)
        shown = ", ".join(nodes[:4]) + (f" and {len(nodes) - 4} more" if len(nodes) > 4 else "")
        return f"{len(nodes)} node{'s' if len(nodes) != 1 else ''} ({shown}) reserved from {when}"


def _units_of(members: Sequence[Member], assignments: Mapping[str, str]) -> dict[str, dict[str, int]]:
    use: dict[str, dict[str, int]] = {}
    for member in members:
        node_units = use.setdefault(assignments[member.name], {})
        for resource, amount in member.shape.requests:
            node_units[resource] = node_units.get(resource, 0) + amount
    return use


def reserve(
    gang: str,
    members: Sequence[Member],
    nodes: Sequence[Node],
    free: Free,
    endings: Iterable[Ending],
    now: float,
    eligibility: Eligibility | None = None,
    spread: bool = False,
    expected_seconds: float | None = None,
    domains: Domains | None = None,
) -> Reservation:
    """The earliest time, and where, the gang fits as the running work ends in its expected order.
    When it does not fit even once all work of known length ended, the nodes it would take on the
    emptied cluster are held for it from then on, whenever that is."""
    eligibility = eligibility or Eligibility(nodes)
    ordered = sorted(endings, key=lambda e: e.at)
    if ordered:
        found = _earliest(gang, members, nodes, free, ordered, now, eligibility, spread, expected_seconds, domains)
        if found is not None:
            return found
    where = on_empty_cluster(eligibility, members, spread, domains)
    if where is None:
        return Reservation(gang, None, {})
    return Reservation(gang, None, _units_of(members, {m.name: node for m, node in zip(members, where, strict=True)}))


def _earliest(
    gang: str,
    members: Sequence[Member],
    nodes: Sequence[Node],
    free: Free,
    ordered: Sequence[Ending],
    now: float,
    eligibility: Eligibility,
    spread: bool,
    expected_seconds: float | None,
    domains: Domains | None = None,
) -> Reservation | None:
    later: dict[str, dict[str, int]] = {name: dict(units) for name, units in free.items()}
    # a cheap necessary condition first: for each shape, the pods of that shape the nodes could hold
    # one shape at a time (kept up to date node by node as work ends) must cover its members
    wanted: dict[Shape, int] = {}
    for member in members:
        wanted[member.shape] = wanted.get(member.shape, 0) + 1
    per_node = {
        shape: {name: fit_count(shape, later[name]) for name in eligibility.names(shape) if name in later}
        for shape in wanted
    }
    totals = {shape: sum(fits.values()) for shape, fits in per_node.items()}
    index = 0
    while index < len(ordered):
        moment = ordered[index].at
        while index < len(ordered) and ordered[index].at <= moment:  # everything ending at that moment
            ending = ordered[index]
            node_free = later.get(ending.node)
            if node_free is not None:
                for resource, amount in ending.units.items():
                    node_free[resource] = node_free.get(resource, 0) + amount
                for shape, fits in per_node.items():
                    if ending.node in fits:
                        now_fits = fit_count(shape, node_free)
                        totals[shape] += now_fits - fits[ending.node]
                        fits[ending.node] = now_fits
            index += 1
        if any(totals[shape] < count for shape, count in wanted.items()):
            continue
        result = place(members, nodes, later, spread=spread, eligibility=eligibility, domains=domains)
        if result.complete:
            at = max(moment, now)
            ends = at + expected_seconds if expected_seconds is not None else None
            return Reservation(gang, at, _units_of(members, result.assignments), ends)
    return None


def held_by(reservations: Iterable[Reservation]) -> list[Ending]:
    """Reservations as changes of capacity over time: taken at their start, given back at their end."""
    changes = []
    for reservation in reservations:
        if reservation.at is None:
            continue
        for node, use in reservation.use.items():
            changes.append(Ending(reservation.at, node, {k: -v for k, v in use.items()}))
            if reservation.ends is not None:
                changes.append(Ending(reservation.ends, node, dict(use)))
    return changes


def backfill_free(
    free: Free,
    endings: Sequence[Ending],
    reservations: Sequence[Reservation],
    allocatable: Callable[[str], Mapping[str, int]],
) -> Free:
    """What a gang that would still run when these reservations start may use now: on each reserved node,
    no more than is left there at each reservation's start, once every reservation then holding it took
    its share. Only the reserved nodes' figures are new; the others are shared with `free`."""
    by_node: dict[str, list[Ending]] = {}
    for change in (*endings, *held_by(reservations)):
        by_node.setdefault(change.node, []).append(change)
    limited: dict[str, dict[str, int]] = {}
    for reservation in reservations:
        for node, use in reservation.use.items():
            now_free = free.get(node)
            if now_free is None:
                continue
            if reservation.at is None:  # its nodes, once everything on them ended
                then = {k: v - use.get(k, 0) for k, v in allocatable(node).items()}
            else:
                then = dict(now_free)
                for change in by_node.get(node, ()):
                    if change.at <= reservation.at:
                        for resource, amount in change.units.items():
                            then[resource] = then.get(resource, 0) + amount
            left = limited.get(node)
            if left is None:
                left = limited[node] = dict(now_free)
            for key in set(left) | set(then):
                left[key] = min(left.get(key, 0), then.get(key, 0))
    room = dict(free)
    room.update(limited)
    return room


@dataclass
class QueuePass:
    """One pass over the queue: ask `room_for` before deciding a gang, `may_release` when it fits, and
    tell `waits` when it does not (`take_turn` does all three)."""

    policy: Policy
    nodes: Sequence[Node]
    free: Free
    endings_of: Callable[[], list[Ending]]  # asked once, only when a reservation is needed
    now: float
    eligibility: Eligibility | None = None
    depth: int = DEFAULT_DEPTH  # backfill: how many gangs at the front of the queue hold a reservation
    # whether a waiting gang may hold others back now (a reservation, or fifo's block): a head that
    # could not start for too long yields for a while (the caller's head-of-line bound)
    may_hold: Callable[[str], bool] = lambda gang: True
    reservations: list[Reservation] = field(default_factory=list)
    blocked_by: str | None = None  # fifo: the first gang that waits
    position: int = 0
    positions: dict[str, int] = field(default_factory=dict)
    _limited: dict[tuple[int, ...], Free] = field(default_factory=dict)
    _endings: list[Ending] | None = None
    _by_name: dict[str, Node] | None = None
    _signatures: list[tuple[object, ...]] = field(default_factory=list)  # of each reservation, for `context`

    @property
    def head(self) -> Reservation | None:
        return self.reservations[0] if self.reservations else None

    @property
    def endings(self) -> list[Ending]:
        if self._endings is None:
            self._endings = self.endings_of()
        return self._endings

    def context(self, gang: str) -> tuple[object, ...]:
        """What this gang's decision depends on besides its own pods and the free capacity."""
        pairs = zip(self.reservations, self._signatures, strict=True)
        held = tuple(signature for reservation, signature in pairs if reservation.gang != gang)
        return (self.policy, self.blocked_by == gang or self.blocked_by is None, held)

    def room_for(self, expected_end: float | None) -> Free:
        """The capacity this gang may be placed on: all of it, unless it would still run when a
        reservation starts; then only what that reservation leaves."""
        if self.policy != Policy.BACKFILL or not self.reservations:
            return self.free
        overlapping = tuple(
            i for i, r in enumerate(self.reservations) if expected_end is None or r.at is None or expected_end > r.at
        )
        if not overlapping:
            return self.free  # done before any reservation starts: delays nothing
        found = self._limited.get(overlapping)
        if found is None:
            chosen = [self.reservations[i] for i in overlapping]
            found = self._limited[overlapping] = backfill_free(self.free, self.endings, chosen, self._allocatable)
        return found

    def _allocatable(self, node: str) -> Mapping[str, int]:
        if self._by_name is None:
            self._by_name = {n.name: n for n in self.nodes}
        return self._by_name[node].allocatable

    def may_release(self, gang: str) -> str | None:
        """None if the gang may go now; otherwise why it waits (fifo: behind the head)."""
        if self.policy == Policy.FIFO and self.blocked_by is not None and self.blocked_by != gang:
            return f"queued behind {seen_from(gang, self.blocked_by)} (strict first-in-first-out)"
        return None

    def waits(
        self,
        gang: str,
        members: Sequence[Member],
        spread: bool = False,
        expected_seconds: float | None = None,
        domains: Domains | None = None,
    ) -> None:
        """A gang that does not fit now: with fifo it blocks those behind; with backfill the first `depth`
        such gangs get reservations, each planned around the ones before it."""
        self.position += 1
        self.positions[gang] = self.position
        if not self.may_hold(gang):
            return
        if self.policy == Policy.FIFO and self.blocked_by is None:
            self.blocked_by = gang
        elif self.policy == Policy.BACKFILL and len(self.reservations) < self.depth and members:
            timeline = [*self.endings, *held_by(self.reservations)]
            reservation = reserve(
                gang,
                members,
                self.nodes,
                self.free,
                timeline,
                self.now,
                self.eligibility,
                spread=spread,
                expected_seconds=expected_seconds,
                domains=domains,
            )
            self.reservations.append(reservation)
            self._signatures.append(reservation.signature())
            self._limited = {}

    def holds_open_ended(self, gang: str) -> bool:
        """Whether the gang holds the others back with no end in sight: fifo's block, or a reservation
        whose start is unknown (the capacity it waits for is held by work of unknown length, or more
        than ever frees at once). Only such a hold is bounded (headofline.py): a reservation with a
        known start is a promise kept by run-time estimates, and starves nobody past it."""
        if self.blocked_by == gang:
            return True
        return any(r.gang == gang and r.at is None for r in self.reservations)

    def released(self) -> None:
        """Capacity promised to a released gang (taken from `free` by the caller) is gone for the ones behind."""
        self._limited = {}

    def reservation_of(self, gang: str, clock: Callable[[float], str]) -> str:
        mine = next((r for r in self.reservations if r.gang == gang), None)
        return mine.describe(clock) if mine is not None else ""


def seen_from(viewer: str, other: str) -> str:
    """Another gang as a message about `viewer` may name it: by name in the same namespace, else not at all
    (events and Gang statuses are read by the viewer's tenant)."""
    namespace, _, name = other.partition("/")
    return f"gang {name}" if viewer.partition("/")[0] == namespace else "a gang of another namespace"


def take_turn(
    queue: QueuePass,
    gang: str,
    decision: Decision,
    members: Sequence[Member],
    spread: bool,
    limited: bool,
    expected_seconds: float | None = None,
    domains: Domains | None = None,
) -> Decision:
    """The queue's say on one gang's decision: a gang that fits may still have to wait its turn (fifo);
    a gang that waits takes its place in the queue, and the first one gets the reservation (backfill)."""
    if decision.state == GangState.RELEASE:
        refusal = queue.may_release(gang)
        if refusal is None:
            return decision
        queue.waits(gang, [])
        return Decision(
            GangState.QUEUED, f"fits now, but {refusal}", present=decision.present, position=queue.positions[gang]
        )
    if decision.state != GangState.WAITING_FOR_CAPACITY:
        return decision
    head = queue.head
    queue.waits(gang, members, spread, expected_seconds, domains)
    message = decision.message
    if limited and head is not None:
        message += f"; behind {seen_from(gang, head.gang)}, it may only use what does not delay that gang's reservation"
    return replace(
        decision,
        message=message,
        position=queue.positions[gang],
        reservation=queue.reservation_of(gang, lambda t: format_time(dt.datetime.fromtimestamp(t, dt.UTC))),
    )
