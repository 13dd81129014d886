"""A gang another scheduler places (Volcano, coscheduling, native): its turn in a pass.

gangkeeper writes the mechanism's group objects and then supervises what the mechanism does with them
(issue 78): a gang left partly running is requeued whole (act/supervise.py), an autoscaler that would
see only part of it is shown all of it by placeholders, and a coscheduling gang the scheduler stopped
retrying is woken when gangkeeper's model sees it fit. Which of these a mechanism needs is a fact on
its record (backends: `autoscaler_sees_part`, `stops_retrying`), never its name.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass

from webhook.backends import Backend
from webhook.controller.act.groups import GroupObjects
from webhook.controller.act.release import Releaser
from webhook.controller.act.supervise import Supervisor
from webhook.controller.act.wakeup import note_check, waiting_gang_fits, wake_due
from webhook.controller.decide.verdict import model_verdict
from webhook.controller.observe.gangview import GangView
from webhook.controller.observe.resolve import Resolved
from webhook.controller.observe.reuse import Snapshot
from webhook.controller.observe.store import GangStore
from webhook.controller.run.cycle import ReleaseCycle
from webhook.controller.run.workqueue import GangQueue

log = logging.getLogger("gangkeeper.controller")


@dataclass
class SupervisedTurn:
    cycle: ReleaseCycle
    store: GangStore
    groups: GroupObjects
    supervisor: Supervisor
    releaser: Releaser
    work: GangQueue
    may_write: Callable[[], bool]

    def take(
        self, gang: GangView, resolved: Resolved, mechanism: Backend, fresh: bool, snap: Snapshot, now: dt.datetime
    ) -> None:
        """The gang's group objects synced when its workload was read afresh (`fresh`), and its
        supervision, when that or what placeholders say of it changed."""
        shown = mechanism.autoscaler_sees_part
        said = self.cycle.hand_over(gang, mechanism.name, snap) if shown else None
        record = self.store.record(gang.key)
        changed, record.handed = said != record.handed, said
        if (fresh or changed) and self.may_write():
            if fresh:
                self.groups.sync(gang, resolved, mechanism)
            # supervised as the gate's gangs are: never left partly running (act/supervise.py), and
            # told what gangkeeper's model makes of a gang still waiting
            grows = self.cycle.autoscaled()
            model = resolved.spec and model_verdict(
                gang.pods, resolved.spec.min_member, snap.nodes, snap.free, snap.ports, snap.eligibility, grows
            )
            again = self.supervisor.look(gang, resolved, mechanism.name, now, grows, said, model or None)
            if again is not None:
                self.work.add_at(gang.key, again)
        if mechanism.stops_retrying and self.may_write():
            self._wake_if_it_fits(gang, resolved, snap, now)

    def _wake_if_it_fits(self, gang: GangView, resolved: Resolved, snap: Snapshot, now: dt.datetime) -> None:
        """A coscheduling gang the scheduler stopped retrying, woken when the model sees it fit (wakeup.py)."""
        stamp = now.timestamp()
        record = self.store.record(gang.key)
        if resolved.spec is None or not wake_due(record, stamp):
            return
        fits = waiting_gang_fits(gang.pods, resolved.spec.min_member, snap)
        again = note_check(record, stamp, woken=fits)
        if not fits:
            return
        log.info(
            "coscheduling gang fits: its PodGroup touched for the scheduler to retry it",
            extra={"gang": gang.key, "pods_too": again},
        )
        self.groups.wake(resolved, now)
        if again:  # the last wake did not get it scheduled: a pod may be lost from the scheduler's queue
            self.releaser.touch([p for p in gang.pods if not p.finished and not p.node_name], now)
