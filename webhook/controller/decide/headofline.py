"""A head of the queue that cannot start stops blocking the others after a while (Kueue's BestEffortFIFO).

With backfill (and fifo), a waiting gang at the front holds the gangs behind it back: a reservation of
its nodes, or fifo's block. A gang that needs capacity held by work of unknown length, or more than
ever frees up at once, would hold everyone back for ever. So a gang holds others back for at most
`bound` seconds at a time, then yields for as long (the gangs behind it may start on what it would
have reserved), then holds again: neither it nor the ones behind it wait without end.

Only such an open-ended hold is bounded (`QueuePass.holds_open_ended`). A reservation with a known
start (the running work's run-time estimates) ends by itself; bounding it too let the small gangs
behind a large one take, in every yield, the capacity its reservation was freeing, and the large gang
never started: on the Philly week (`gangkeeper simulate`, 64 nodes) the worst wait of a 9-32 GPU gang
went from 27.7 h to 85.8 h with every reservation bounded at 1800 s.

The clock is the namespace's, not each gang's (the fairness rule): all the gangs of one namespace
together hold others back for at most `bound` seconds at a time, then all of them yield for as long.
Twenty giants of one tenant, each taking its turn at the head, would otherwise hold another tenant's
small gang back for twenty bounds in a row (Kueue bounds a ClusterQueue's head the same way, not each
workload's: pkg/queue, BestEffortFIFO; Volcano's fair share is per queue). The clock starts afresh once
no gang of the namespace holds others back any more.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, MutableMapping
from dataclasses import dataclass, field

from webhook.controller.decide.pods import format_time

DEFAULT_BOUND_SECONDS = 1800.0


def namespace_of(gang: str) -> str:
    return gang.partition("/")[0]


@dataclass(slots=True)
class NamespaceHold:
    """One namespace's turn at the head of the queue: since when its gangs hold others back, and which do."""

    since: dt.datetime
    holders: set[str] = field(default_factory=set)


@dataclass
class HeadOfLine:
    """The rule, over the namespaces' holds it is given: the controller's live in its store's namespace
    records (observe/store.py), so that this room keeps no memory of its own; the simulator's in a dict."""

    bound_seconds: float = DEFAULT_BOUND_SECONDS  # 0: no bound
    namespaces: MutableMapping[str, NamespaceHold] = field(default_factory=dict)

    def may_hold(self, gang: str, now: dt.datetime) -> bool:
        hold = self.namespaces.get(namespace_of(gang))
        if hold is None or self.bound_seconds <= 0:
            return True
        return (now - hold.since).total_seconds() % (2 * self.bound_seconds) < self.bound_seconds

    def holds(self, gang: str, now: dt.datetime) -> None:
        """The gang holds others back in this pass."""
        namespace = namespace_of(gang)
        hold = self.namespaces.get(namespace)
        if hold is None:
            hold = self.namespaces[namespace] = NamespaceHold(now)
        hold.holders.add(gang)

    def yields_until(self, gang: str, now: dt.datetime) -> dt.datetime | None:
        """While the gang's namespace yields: when it holds others back again; None when it does not yield now."""
        hold = self.namespaces.get(namespace_of(gang))
        if hold is None or self.may_hold(gang, now):
            return None
        period = 2 * self.bound_seconds
        cycles = (now - hold.since).total_seconds() // period + 1
        return hold.since + dt.timedelta(seconds=cycles * period)

    def next_change(self, now: dt.datetime) -> dt.datetime | None:
        """The next moment a gang that holds others back starts to yield, or one that yields holds again."""
        if self.bound_seconds <= 0 or not self.namespaces:
            return None
        bound = dt.timedelta(seconds=self.bound_seconds)
        return min(h.since + ((now - h.since) // bound + 1) * bound for h in list(self.namespaces.values()))

    def after_turn(self, gang: str, waiting: bool, queued: bool, holding: bool, now: dt.datetime) -> str:
        """One gang's turn accounted: `waiting` for capacity (`holding` others back: a reservation, fifo's
        block), `queued` not yet decided, else it started or left the queue. Returns what its message
        should add while it yields ("" otherwise). The controller's pass and `gangkeeper simulate` both
        call this, so the simulator bounds the head of the line as the controller does."""
        if not waiting:
            if not queued:
                self.done(gang)
            return ""
        if holding:
            self.holds(gang, now)
            return ""
        until = self.yields_until(gang, now)
        if until is None:
            return ""
        return (
            f"; it could not start within {self.bound_seconds:.0f}s at the head of the queue, so "
            f"it holds no gang back until {format_time(until)}"
        )

    def done(self, gang: str) -> None:
        """The gang started (or left the queue); once no gang of its namespace held others back, the
        namespace's next wait starts afresh."""
        namespace = namespace_of(gang)
        hold = self.namespaces.get(namespace)
        if hold is not None:
            hold.holders.discard(gang)
            if not hold.holders:
                del self.namespaces[namespace]

    def keep_only(self, gangs: Iterable[str]) -> None:
        live = set(gangs)
        for hold in list(self.namespaces.values()):
            for gang in hold.holders - live:
                self.done(gang)
