"""What people see of each gang: its Gang object brought to the decision (state, counts, queue place,
conditions, the controller's books), an event when its state changes, and the gauges."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from webhook.backends import MECHANISMS
from webhook.controller import metrics
from webhook.controller.act.events import Recorder
from webhook.controller.act.gangobject import GangObjects
from webhook.controller.decide import reasons
from webhook.controller.decide.autoscaling import unseen_by_autoscalers
from webhook.controller.decide.pods import PodView, Release
from webhook.controller.decide.situation import Decision, GangState
from webhook.controller.decide.whole_groups import GROUP_STATES, role_counts
from webhook.controller.observe.books import (
    COUNTS_SECONDS,
    Books,
    books_of,
    desired_object,
    desired_status,
    differs,
    differs_beyond_counts,
    release_records,
)
from webhook.controller.observe.gangview import GangView
from webhook.controller.observe.resolve import Resolved
from webhook.controller.observe.store import GangStore
from webhook.gangs.model import Obj


class Reporter:
    def __init__(
        self,
        recorder: Recorder,
        gang_objects: GangObjects,
        may_write: Callable[[], bool],
        grows: Callable[[], bool] = lambda: False,
        store: GangStore | None = None,
    ) -> None:
        self.recorder, self.gang_objects, self.may_write = recorder, gang_objects, may_write
        # each gang's last state, the counts last written and when newer ones are due: on its record
        self.store = store if store is not None else GangStore()
        self.grows = grows  # whether an autoscaler may add nodes (observe/autoscaler.py Autoscaler.present)
        # what gangs partly running held at the last pass, by (mechanism, resource), and when
        self._partly: dict[tuple[str, str], int] = {}
        self._partly_at: dt.datetime | None = None

    def last_state(self, key: str) -> str | None:
        """What the gang was last decided by this controller."""
        record = self.store.get(key)
        return record.last_state if record is not None else None

    def note_state(self, key: str, state: str) -> None:
        self.store.record(key).last_state = state

    def counts_due(self, key: str) -> dt.datetime | None:
        """When the gang's newer counts, held back, are written."""
        record = self.store.get(key)
        return record.counts_due if record is not None else None

    def save_books(
        self,
        gang: GangView,
        resolved: Resolved,
        decision: Decision,
        books: Books,
        now: dt.datetime,
        later: bool = False,
    ) -> bool:
        """Write the gang's books (and its state) to its Gang object; False when that failed. `later`: sent
        at the pass's end (GangObjects.flush), for a report nothing waits on."""
        state, message, position = decision.state, decision.message, decision.position
        return self._write_gang(gang, resolved, "gate", state, message, position, books, now, later=later)

    def _write_gang(
        self,
        gang: GangView,
        resolved: Resolved,
        backend: str,
        state: str,
        message: str,
        position: int,
        books: Books,
        now: dt.datetime,
        released: Mapping[str, Release] | None = None,
        later: bool = False,
    ) -> bool:
        min_member = resolved.spec.min_member if resolved.spec is not None else max(1, len(gang.pods))
        wanted = desired_object(gang.namespace, gang.name, backend, min_member, resolved.workload)
        current = self.gang_objects.get(gang.namespace, gang.name)
        live = [p for p in gang.pods if not p.terminal]
        counts = (len(live), sum(1 for p in live if p.node_name), sum(1 for p in live if p.gated))
        rule = resolved.spec.whole_groups if resolved.spec is not None else None
        roles = role_counts(live, rule) if rule is not None and rule.minimums else ()
        status = desired_status(
            state, message, counts, min_member, position, books, (current or {}).get("status") or {}, now, roles
        )
        records = self._records_to_write(gang, current, live, released or {})
        if records:
            status["released"] = records
        elif current is None:
            if position:  # a new Gang of a gang in the queue: its place alone moves on every release ahead
                self.store.record(gang.key).counts_written = now
        elif differs(current.get("status") or {}, status):
            status = self._counts_now_or_later(gang.key, current.get("status") or {}, status, now)
        return self.gang_objects.write(wanted, status, later=later) is not None

    def _records_to_write(
        self, gang: GangView, current: Obj | None, live: Sequence[PodView], released: Mapping[str, Release]
    ) -> Obj:
        """The changes to the Gang's release records: the new releases, and a null (a merge-patch delete)
        for the record of each pod gone or replaced under the same name."""
        recorded = ((current or {}).get("status") or {}).get("released") or {}
        if not recorded:  # a gang that waits: no walk over its pods
            return release_records(released)
        record = self.store.record(gang.key)
        known = record.gone_records
        if gang.roster is not None and known is not None and known[0] == gang.roster and known[1] is recorded:
            gone = known[2]
        else:
            gone = _records_of_pods_gone(recorded, live)
            if gang.roster is not None:  # the records kept by reference: compared by identity, never reused
                record.gone_records = (gang.roster, recorded, gone)
        return {**gone, **release_records(released)}

    def _counts_now_or_later(self, key: str, current: Obj, status: Obj, now: dt.datetime) -> Obj:
        """The status to write this pass: a change of the counts alone waits until COUNTS_SECONDS after
        the last one written (a pass comes then: `counts_due`); any other change goes at once."""
        record = self.store.record(key)
        last = record.counts_written
        if not differs_beyond_counts(current, status) and last is not None:
            due = last + dt.timedelta(seconds=COUNTS_SECONDS)
            if now < due:
                record.counts_due = due
                return {}
        record.counts_written, record.counts_due = now, None
        return status

    def record_releases(
        self, gang: GangView, resolved: Resolved, decision: Decision, released: Mapping[str, Release], now: dt.datetime
    ) -> bool:
        """The release recorded in the gang's Gang object (created if need be), with the decision's state and
        the books after it (`next_books`) in the same write: `transition` writes nothing more for a release.
        False when it could not be written. Called on the releaser's pool, beside the pass."""
        books = next_books(self.gang_objects.books(gang.namespace, gang.name), gang, decision, now)
        state, message, position = decision.state, decision.message, decision.position
        return self._write_gang(gang, resolved, "gate", state, message, position, books, now, released)

    def report_other(
        self,
        gang: GangView,
        resolved: Resolved,
        backend: str,
        now: dt.datetime,
        autoscaled: bool = False,
        placeholders: str | None = None,
        books: Books | None = None,
        short: str | None = None,
        model: str | None = None,
    ) -> None:
        """The Gang object of a gang another scheduler places: its pods counted, as its PodGroup shows;
        on an autoscaled cluster, what its placeholders bring, else whether the autoscaler can see the
        pods it waits for; its books and a shortfall as the supervisor keeps them (act/supervise.py); and
        while it waits, what gangkeeper's model makes of it (decide/verdict.py)."""
        previous = (self.gang_objects.get(gang.namespace, gang.name) or {}).get("status") or {}
        live = [p for p in gang.pods if not p.terminal]
        running = sum(1 for p in live if p.node_name)
        need = resolved.spec.min_member if resolved.spec is not None else len(live)
        state = str(GangState.RUNNING) if running >= need else "Pending"
        message = f"{running} of {need} members scheduled by the {backend} gang scheduler"
        unseen = unseen_by_autoscalers(gang.pods, backend) if autoscaled and not placeholders else None
        if placeholders or unseen:
            message = f"{message}; {placeholders or unseen}"
        if model and running < need:
            message = f"{message}; {model}"
        if short:
            message = f"{short}; {message}"
        if resolved.spec is None:
            state, message = str(GangState.UNKNOWN), f"cannot size the gang: {resolved.problem}"
        kept = books if books is not None else books_of({"status": previous})
        self._write_gang(gang, resolved, backend, state, message, 0, kept, now, later=True)

    def state_of(self, gang: GangView) -> str | None:
        """The gang's state as its Gang object says (before this pass acts on it)."""
        current = self.gang_objects.get(gang.namespace, gang.name)
        return ((current or {}).get("status") or {}).get("state") or self.last_state(gang.key)

    def transition(
        self, gang: GangView, resolved: Resolved, decision: Decision, now: dt.datetime, previous: str | None
    ) -> None:
        """The Gang object brought to the decision; an event when its state changes from `previous`
        (level-based: compared with the Gang's, so a workload recreated under the same name is told again)."""
        self.note_state(gang.key, decision.state)
        # a release's state and books go with its record (`record_releases`, on the releaser's pool)
        if self.may_write() and decision.state != GangState.RELEASE:
            books = next_books(self.gang_objects.books(gang.namespace, gang.name), gang, decision, now)
            self.save_books(gang, resolved, decision, books, now, later=True)
        if previous != decision.state and not (previous in RELEASED_STATES and decision.state == GangState.RUNNING):
            # a gang running after the release it follows is told already, by the release's event and the
            # scheduler's Scheduled per pod: one event write per gang started, not two (bench/replay.py)
            self._tell(gang, resolved, decision)

    def _tell(self, gang: GangView, resolved: Resolved, decision: Decision) -> None:
        """The event of the state the gang entered, on its workload; on its pods too when they stay
        Pending for good (NeverFits on a cluster no autoscaler grows), so `kubectl describe pod` says
        why. Where one does, the pods wait for the nodes their placeholders bring (the workload's event
        and the Gang say so): an event each was a 1,000-pod gang's 1,000 writes, a tenth of the API
        server's requests in bench/cluster.py --scenarios autoscale. A released pod is told by the
        scheduler's own Scheduled event: a per-pod GangReleased was 1,000 event writes racing a
        1,000-pod gang's bindings on the API server (bench/cluster.py)."""
        reason, kind = STATE_EVENTS.get(decision.state, ("", ""))
        if not reason:
            return
        message = f"gang {gang.name}: {decision.message}"
        if decision.placement is not None and decision.state in ("WaitingForCapacity", "NeverFits"):
            message += "; " + "; ".join(reasons.summarize_for_tenant(decision.placement.why)[:3])
        self.event(resolved.workload or gang.raw[0], kind, reason, message)
        if decision.state == "NeverFits" and not self.grows():
            for pod in gang.raw:
                self.event(pod, kind, reason, message)

    def event(self, obj: Obj, kind: str, reason: str, message: str) -> None:
        self.recorder.record(obj, kind, reason, message)

    def publish(
        self,
        decisions: Mapping[str, Decision],
        gated: int,
        partly: Mapping[tuple[str, str], int] | None = None,
        now: dt.datetime | None = None,
        groups: Mapping[tuple[str, str], int] | None = None,
    ) -> None:
        if partly is not None and now is not None:
            self._publish_partly(partly, now)
        if groups is not None:  # every mechanism, each state: 0 when none is in it now
            for mechanism in (m.name for m in MECHANISMS):
                for state in GROUP_STATES:
                    metrics.GROUPS.labels(mechanism, state).set(groups.get((mechanism, state), 0))
        counts: dict[str, int] = {}
        for decision in decisions.values():
            counts[decision.state] = counts.get(decision.state, 0) + 1
        for state in GangState:
            metrics.GANGS.labels(state.value).set(counts.get(state, 0))
        metrics.GATED_PODS.set(gated)

    def _publish_partly(self, partly: Mapping[tuple[str, str], int], now: dt.datetime) -> None:
        """What gangs partly running hold now, and what they held since the last pass (its amounts held
        for the time between): a resource's amount in its own units (CPU in millicores)."""
        if self._partly_at is not None:
            seconds = max(0.0, (now - self._partly_at).total_seconds())
            for (mechanism, resource), amount in self._partly.items():
                metrics.PARTLY_HELD_SECONDS.labels(mechanism, resource).inc(amount * seconds)
        for labels in self._partly.keys() - partly.keys():
            metrics.PARTLY_HELD.labels(*labels).set(0)
        for labels, amount in partly.items():
            metrics.PARTLY_HELD.labels(*labels).set(amount)
        self._partly, self._partly_at = dict(partly), now


# a gang in these states was told released: its running next is no news
RELEASED_STATES = (GangState.RELEASE, GangState.RELEASING)

# the event a gang's entry into a state sends: (reason, type)
STATE_EVENTS = {
    "WaitingForMembers": ("WaitingForMembers", "Normal"),
    "WaitingForCapacity": ("WaitingForCapacity", "Normal"),
    "NeverFits": ("GangTooLarge", "Warning"),
    "Release": ("GangReleased", "Normal"),
    "Running": ("GangRunning", "Normal"),
    "Backoff": ("GangBackoff", "Normal"),
    "Unknown": ("GangUnknown", "Warning"),
    "GaveUp": ("GangGaveUp", "Warning"),
}


def next_books(books: Books, gang: GangView, decision: Decision, now: dt.datetime) -> Books:
    """The gang's books after this decision: budget, recovery clock, claim and domain."""
    return _domain_books(_claim_books(_run_books(books, gang, decision, now), decision), decision)


def _run_books(books: Books, gang: GangView, decision: Decision, now: dt.datetime) -> Books:
    # pods still running from a release that was requeued since (preempted whole, their Job just
    # suspended): the requeue's books stand until they are gone
    released = [p.released_at for p in gang.pods if p.released_at is not None and not p.terminal]
    requeued = books.suspended_at is not None or (
        books.not_before is not None and (not released or books.not_before > max(released))
    )
    if decision.state == GangState.RUNNING:
        if requeued:
            return books
        # a gang that runs gets its whole budget back, and is whole with the members it runs now
        running = sum(1 for p in gang.pods if not p.terminal and p.node_name)
        return replace(books, attempts=0, not_before=None, ran_with=running, short_since=None)
    if decision.short and decision.state != GangState.TIMED_OUT:
        # the recovery clock starts; a gang no pass saw running whole is whole with what it was released with
        return replace(books, short_since=books.short_since or now, ran_with=books.ran_with or decision.whole)
    if not decision.short:
        return replace(books, short_since=None)
    return books


def _claim_books(books: Books, decision: Decision) -> Books:
    if decision.state == GangState.RELEASE and decision.claim_until is not None:
        return replace(books, claim_until=decision.claim_until)
    if decision.whole_gang:
        return replace(books, claim_until=None, claim_broken=books.claim_broken or decision.claim_broken)
    return books


def _domain_books(books: Books, decision: Decision) -> Books:
    chosen = decision.placement.domain if decision.placement is not None else None
    if decision.state == GangState.RELEASE and chosen:
        return replace(books, domain=chosen)  # shown by `kubectl get gangs -o wide`
    if decision.whole_gang:
        return replace(books, domain=None)
    return books


def _records_of_pods_gone(recorded: Obj, live: Sequence[PodView]) -> dict[str, None]:
    """A null for the record of each pod gone or replaced under the same name."""
    live_uids = {p.name: p.uid for p in live}
    return {n: None for n, r in recorded.items() if not isinstance(r, dict) or live_uids.get(n) != r.get("uid")}
