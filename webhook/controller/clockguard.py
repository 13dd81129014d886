"""Timeouts that a wall-clock jump cannot trip.

Release times are wall-clock marks (they outlive the process), so a forward jump of the clock (an NTP
step, a VM resumed) would make every released gang look late at once. The guard compares the wall
clock with the monotonic one between passes: what the wall gained beyond the monotonic time is a jump,
and the `now` that timeouts are judged by is taken back by it. A gang released just after a jump then
waits up to the jump longer; none is ever timed out early. Jumps are forgotten after `memory` seconds.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field

from webhook.controller import metrics

TOLERANCE_SECONDS = 5.0  # scheduling noise between two passes is not a jump


@dataclass
class ClockGuard:
    monotonic: Callable[[], float]
    memory: float = 3600.0
    _last: tuple[dt.datetime, float] | None = None
    _jumps: list[tuple[float, float]] = field(default_factory=list)  # (monotonic when seen, seconds)

    def judge(self, now: dt.datetime) -> dt.datetime:
        """The time timeouts are judged by at wall time `now`."""
        tick = self.monotonic()
        if self._last is not None:
            wall_gain = (now - self._last[0]).total_seconds()
            jump = wall_gain - (tick - self._last[1])
            if jump > TOLERANCE_SECONDS:
                self._jumps.append((tick, jump))
                metrics.CLOCK_JUMPS.inc()
        self._last = (now, tick)
        self._jumps = [(seen, size) for seen, size in self._jumps if tick - seen < self.memory]
        return now - dt.timedelta(seconds=sum(size for _, size in self._jumps))


def no_guard(now: dt.datetime) -> dt.datetime:
    """Tests that drive the clock by hand: every step of it is real time."""
    return now
