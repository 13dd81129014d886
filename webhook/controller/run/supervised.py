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
from dataclasses import dataclass, field

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
from webhook.controller.run.steer import Steering
from webhook.controller.run.workqueue import GangQueue

log = logging.getLogger("gangkeeper.controller")
# a waiting gang's model verdict is looked at again when capacity moves, at most this often per gang and
# for at most this many gangs a pass (each is a placement of the gang's pods on the nodes)
MODEL_REFRESH_SECONDS = 5.0
MODEL_REFRESHES_PER_PASS = 64


@dataclass
class SupervisedTurn:
    cycle: ReleaseCycle
    store: GangStore
    groups: GroupObjects
    supervisor: Supervisor
    releaser: Releaser
    work: GangQueue
    may_write: Callable[[], bool]
    steering: Steering
    # (pass, models refreshed in it): a cap that holds within a pass
    _refreshed: tuple[int, int] = field(default=(-1, 0), init=False)
    next_refresh: float | None = field(default=None, init=False)  # when a deferred refresh may run

    def take(
        self, gang: GangView, resolved: Resolved, mechanism: Backend, fresh: bool, snap: Snapshot, now: dt.datetime
    ) -> None:
        """The gang's group objects synced when its workload was read afresh (`fresh`), and its
        supervision, when that, what placeholders say of it, or what the model says of it changed."""
        if mechanism.steers_shared_claims and self.may_write():
            first = mechanism.shared_claims_allocated_first
            at_once = mechanism.hands_over_all_at_once
            self.steering.turn(gang, resolved, snap, now, self.store.pass_number, first, at_once)
        shown = mechanism.autoscaler_sees_part
        said = self.cycle.hand_over(gang, mechanism.name, snap) if shown else None
        record = self.store.record(gang.key)
        changed, record.handed = said != record.handed, said
        grows = self.cycle.autoscaled()
        moved = not (fresh or changed) and self.may_write() and self._capacity_moved(gang, resolved, snap, now, grows)
        if (fresh or changed or moved) and self.may_write():
            if fresh:
                self.groups.sync(gang, resolved, mechanism)
            # supervised as the gate's gangs are: never left partly running (act/supervise.py), and
            # told what gangkeeper's model makes of a gang still waiting (`moved`: just said again)
            model = record.model[2] if moved and record.model else self._model(gang, resolved, snap, now, grows)
            again = self.supervisor.look(gang, resolved, mechanism.name, now, grows, said, model)
            if again is not None:
                self.work.add_at(gang.key, again)
        if mechanism.stops_retrying and self.may_write():
            self._wake_if_it_fits(gang, resolved, snap, now)

    def _model(self, gang: GangView, resolved: Resolved, snap: Snapshot, now: dt.datetime, grows: bool) -> str | None:
        """What gangkeeper's model says of the gang now (decide/verdict.py), noted on its record."""
        spec = resolved.spec
        said = spec and model_verdict(
            gang.pods, spec.min_member, snap.nodes, snap.free, snap.ports, snap.eligibility, grows
        )
        self.store.record(gang.key).model = (now.timestamp(), snap.generations.room, said or None)
        return said or None

    def _capacity_moved(
        self, gang: GangView, resolved: Resolved, snap: Snapshot, now: dt.datetime, grows: bool
    ) -> bool:
        """Whether the model says otherwise of a gang waiting whole since nodes came, went or gained
        room (the index's room epoch), though nothing of the gang changed (issue 78: its verdict follows
        the cluster). At most every MODEL_REFRESH_SECONDS per gang and MODEL_REFRESHES_PER_PASS gangs a
        pass; one deferred sets `next_refresh`, when the pass must run again."""
        last = self.store.record(gang.key).model
        if last is None or resolved.spec is None or last[1] == snap.generations.room:
            return False
        if any(p.node_name for p in gang.pods if not p.terminal):
            return False
        stamp, this_pass = now.timestamp(), self.store.pass_number
        spent = self._refreshed[1] if self._refreshed[0] == this_pass else 0
        due = last[0] + MODEL_REFRESH_SECONDS if spent < MODEL_REFRESHES_PER_PASS else stamp
        if stamp < due or spent >= MODEL_REFRESHES_PER_PASS:
            # looked at in a later pass (the room it saw has moved since: the stamp says so then too)
            self.next_refresh = due if self.next_refresh is None else min(self.next_refresh, due)
            return False
        self._refreshed = (this_pass, spent + 1)
        return self._model(gang, resolved, snap, now, grows) != last[2]

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
