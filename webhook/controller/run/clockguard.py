"""The controller's clock: wall time as of its start, advanced by the monotonic clock.

Release times, backoffs and recovery clocks are wall-clock marks (they outlive the process, in the Gang
objects), but every deadline is judged within a process by the time that really passed: a forward jump
of the wall clock (an NTP step, a VM resumed) would otherwise time out every healthy release at once and
requeue its gang, and a backward jump would delay a real timeout by the jump. `SteadyClock` starts equal
to the wall clock and then moves only with the monotonic one, so neither jump moves any deadline. A
jump is still seen (the wall and the steady clock part) and counted.

A restart reads back marks written before it: anchored on this host's wall clock after a jump, the new
process would judge them in the other frame (a +360 s step timed healthy releases out and suspended
their Jobs; a -3,600 s one left a release Releasing for an hour). So the anchor is the API server's
clock when it can be read (its Date header, `anchor`), the one clock every controller process of the
cluster shares; this host's wall clock only when it cannot.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass

from webhook.controller import metrics

log = logging.getLogger("gangkeeper.controller")
TOLERANCE_SECONDS = 5.0  # scheduling noise between two readings is not a jump


@dataclass
class SteadyClock:
    wall: Callable[[], dt.datetime]
    monotonic: Callable[[], float]
    anchor: Callable[[], dt.datetime | None] = lambda: None  # the API server's clock, read once
    _anchor: tuple[dt.datetime, float] | None = None
    _drift: float = 0.0  # how far the wall clock had moved from this one at the last reading (seconds)

    def __call__(self) -> dt.datetime:
        if self._anchor is None:
            start, tick = self._server_time(), self.monotonic()
            self._anchor = (start or self.wall(), tick)
            self._drift = (self.wall() - self._anchor[0]).total_seconds()
        tick, wall = self.monotonic(), self.wall()
        steady = self._anchor[0] + dt.timedelta(seconds=tick - self._anchor[1])
        drift = (wall - steady).total_seconds()
        if abs(drift - self._drift) > TOLERANCE_SECONDS:
            metrics.CLOCK_JUMPS.inc()
            log.warning(
                "the wall clock jumped; deadlines keep to the time that really passed",
                extra={"jump_seconds": round(drift - self._drift, 1)},
            )
            self._drift = drift
        return steady

    def _server_time(self) -> dt.datetime | None:
        """The API server's clock, when it can be read and compared with this host's (a time of another
        kind, or an error reading it, leaves the anchor to the wall clock: the clock never fails)."""
        try:
            start = self.anchor()
            if start is not None:
                start - self.wall()  # comparable with this host's, or TypeError
        except Exception:  # any failure only costs the anchor
            log.warning("the API server's clock could not be read; the controller's clock starts from this host's")
            return None
        return start
