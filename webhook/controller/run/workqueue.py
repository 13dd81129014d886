"""The gangs due for a look, keyed by gang: the ones asked for now, and the ones whose deadline came.

Shaped like client-go's delaying, rate-limited work queue (k8s.io/client-go/util/workqueue:
`AddAfter`, `AddRateLimited`, `Forget`): a gang is due at the earliest moment anyone asked for it; a
gang whose reconciliation raised comes back after its own exponential backoff, which `forget` resets
once it succeeds (`guarded` runs a turn so). Times are seconds on the controller's clock; nothing here
reads a clock itself.
"""

from __future__ import annotations

import heapq
import logging
import zlib
from collections.abc import Callable, Iterable
from typing import TypeVar

from webhook.controller import metrics

log = logging.getLogger("gangkeeper.controller")
_T = TypeVar("_T")

BASE_BACKOFF_SECONDS = 2.0
MAX_BACKOFF_SECONDS = 300.0


def staggered(key: str, seconds: float) -> float:
    """`seconds` less up to a quarter of it, the same for a key every time: the periodic re-reads of
    gangs first read together (a controller's first pass) fall due spread out, not in one pass."""
    return seconds * (1 - (zlib.crc32(key.encode()) % 1000) / 4000)


class GangQueue:
    def __init__(self, base_seconds: float = BASE_BACKOFF_SECONDS, max_seconds: float = MAX_BACKOFF_SECONDS) -> None:
        self.base_seconds, self.max_seconds = base_seconds, max_seconds
        self._due: dict[str, float] = {}  # gang -> the earliest moment it was asked for
        self._heap: list[tuple[float, str]] = []  # (moment, gang); entries no longer in _due are skipped
        self._failures: dict[str, int] = {}  # gang -> reconciliations in a row that raised
        self._retry_at: dict[str, float] = {}  # gang -> not looked at before this, after a failure

    def __len__(self) -> int:
        return len(self._due)

    def add_at(self, key: str, at: float) -> None:
        """The gang is due at `at` (or sooner, if someone already asked for sooner)."""
        if key in self._due and self._due[key] <= at:
            return
        self._due[key] = at
        heapq.heappush(self._heap, (at, key))

    def take_due(self, now: float) -> set[str]:
        """The gangs due by `now`, taken off the queue."""
        taken = set()
        while self._heap and self._heap[0][0] <= now:
            at, key = heapq.heappop(self._heap)
            if self._due.get(key) == at:
                del self._due[key]
                taken.add(key)
        return taken

    def next_at(self) -> float | None:
        """When the next gang falls due; None when none is queued."""
        while self._heap and self._due.get(self._heap[0][1]) != self._heap[0][0]:
            heapq.heappop(self._heap)  # superseded by an earlier moment, or taken
        return self._heap[0][0] if self._heap else None

    def failed(self, key: str, now: float) -> float:
        """The gang's reconciliation raised: it is held back, then due again, after its own backoff."""
        count = self._failures.get(key, 0) + 1
        self._failures[key] = count
        delay = min(self.max_seconds, self.base_seconds * 2.0 ** min(count - 1, 30))
        self._retry_at[key] = now + delay
        self.add_at(key, now + delay)
        return delay

    def backing_off(self, key: str, now: float) -> bool:
        return self._retry_at.get(key, float("-inf")) > now

    def guarded(self, key: str, now: float, turn: Callable[[], _T]) -> tuple[bool, _T | None]:
        """A gang's turn, (whether it ran through, what it returned); one that raises is that gang's
        failure alone: counted, logged, and the gang waits out its own backoff while the others go on."""
        if self.backing_off(key, now):
            return False, None
        try:
            return True, turn()
        except Exception:
            log.exception("gang reconciliation failed", extra={"gang": key})
            metrics.GANG_FAILURES.inc()
            self.failed(key, now)
            return False, None

    def forget(self, key: str) -> None:
        """The gang reconciled: its next failure starts the backoff afresh."""
        self._failures.pop(key, None)
        self._retry_at.pop(key, None)

    def keep_only(self, live: Iterable[str]) -> None:
        """Forget gangs that no longer exist (their heap entries are skipped when reached)."""
        keep = set(live)
        for table in (self._due, self._failures, self._retry_at):
            for key in table.keys() - keep:
                del table[key]
        if len(self._heap) > 4 * len(self._due) + 64:  # compact once mostly stale
            self._heap = [(at, key) for key, at in self._due.items()]
            heapq.heapify(self._heap)
