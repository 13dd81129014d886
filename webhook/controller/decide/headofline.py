"""A head of the queue that cannot start stops blocking the others after a while (Kueue's BestEffortFIFO).

With backfill (and fifo), a waiting gang at the front holds the gangs behind it back: a reservation of
its nodes, or fifo's block. A gang that needs capacity held by work of unknown length, or more than
ever frees up at once, would hold everyone back for ever. So a gang holds others back for at most
`bound` seconds at a time, then yields for as long (the gangs behind it may start on what it would
have reserved), then holds again: neither it nor the ones behind it wait without end.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field

DEFAULT_BOUND_SECONDS = 1800.0


@dataclass
class HeadOfLine:
    bound_seconds: float = DEFAULT_BOUND_SECONDS  # 0: no bound
    _since: dict[str, dt.datetime] = field(default_factory=dict)  # gang -> when it first held others back

    def may_hold(self, gang: str, now: dt.datetime) -> bool:
        since = self._since.get(gang)
        if since is None or self.bound_seconds <= 0:
            return True
        return (now - since).total_seconds() % (2 * self.bound_seconds) < self.bound_seconds

    def holds(self, gang: str, now: dt.datetime) -> None:
        """The gang holds others back in this pass."""
        self._since.setdefault(gang, now)

    def yields_until(self, gang: str, now: dt.datetime) -> dt.datetime | None:
        """While the gang yields: when it holds others back again; None when it does not yield now."""
        since = self._since.get(gang)
        if since is None or self.may_hold(gang, now):
            return None
        period = 2 * self.bound_seconds
        cycles = (now - since).total_seconds() // period + 1
        return since + dt.timedelta(seconds=cycles * period)

    def next_change(self, now: dt.datetime) -> dt.datetime | None:
        """The next moment a gang that holds others back starts to yield, or one that yields holds again."""
        if self.bound_seconds <= 0 or not self._since:
            return None
        bound = dt.timedelta(seconds=self.bound_seconds)
        return min(since + ((now - since) // bound + 1) * bound for since in self._since.values())

    def done(self, gang: str) -> None:
        """The gang started (or left the queue): its next wait starts afresh."""
        self._since.pop(gang, None)

    def keep_only(self, gangs: Iterable[str]) -> None:
        live = set(gangs)
        for gang in self._since.keys() - live:
            del self._since[gang]
