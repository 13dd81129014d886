"""When a gate gang must be looked at again although nothing about it changes: its deadlines.

A level-based reconciler wakes on change; what no watch event announces is the passing of time. For a
gate gang that is a released pod's bind timeout (`decide` rule 1) and the end of a backoff (rule 5);
the controller adds its own (a reservation's end, a suspended workload's resume, a head of the queue's
bound, a promised run time's end) and sleeps until the earliest, never on a fixed poll.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence

from webhook.controller.decide.pods import PodView, Release
from webhook.controller.decide.recovery import stranded_since
from webhook.controller.decide.situation import GangSpec

# a deadline that has passed is looked at again this much later rather than at once: no busy loop on a
# moment a pass could not act on yet
MIN_REQUEUE_SECONDS = 1.0


def gang_deadline(
    pods: Sequence[PodView],
    spec: GangSpec | None,
    not_before: dt.datetime | None,
    now: dt.datetime,
    short_since: dt.datetime | None = None,
    records: Mapping[str, Release] | None = None,
) -> dt.datetime | None:
    """The next moment the decision for this gang changes with time alone; None if it never does."""
    moments: list[dt.datetime] = []
    if spec is not None and short_since is not None:  # a gang short of a member is requeued (recover)
        moments.append(short_since + dt.timedelta(seconds=spec.recovery_seconds, milliseconds=1))
    if spec is not None:
        stranded = stranded_since([p for p in pods if not p.terminal], spec, records or {})  # rule 1b
        if stranded is not None:
            moments.append(stranded + dt.timedelta(seconds=spec.timeout_seconds, milliseconds=1))
        for pod in pods:  # a released pod still unbound times out (rule 1)
            if not pod.terminal and not pod.gated and not pod.node_name and pod.released_at is not None:
                moments.append(pod.released_at + dt.timedelta(seconds=spec.timeout_seconds, milliseconds=1))
    if not_before is not None and not_before > now:  # the backoff ends (rule 5)
        moments.append(not_before)
    return min(moments, default=None)


def earliest(moments: Iterable[float | None], now: float) -> float | None:
    """The first of these moments (seconds), a past one pushed to MIN_REQUEUE_SECONDS from now."""
    found = [m for m in moments if m is not None]
    if not found:
        return None
    return max(min(found), now + MIN_REQUEUE_SECONDS) if min(found) <= now else min(found)
