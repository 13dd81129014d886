"""Supervision of the gangs another mechanism schedules (Volcano, coscheduling, native): the promise that a
gang is never left partly running holds there as on the gate.

Each of those schedulers starts a gang whole, but none requeues it when it later loses members: a node
lost, a member preempted or evicted, and the replacements have nowhere to go while the survivors hold
their nodes (Volcano 1.10, scheduler-plugins coscheduling 0.34.7 and native 1.36 all left a 4-pod Job
2 of 4 running for good on the real tier; volcano-sh/volcano#5805). gangkeeper applies the gate's own
recovery rule (decide/recovery.py `recover`) to them: a gang that ran whole and has had fewer than its
minimum running for its recovery timeout (`gangkeeper.io/recovery-timeout-seconds`, the same default) is
requeued whole exactly as a gate gang is (act/requeue.py: a Job suspended, not failed, and resumed after
its backoff; the pods of the other kinds evicted for their owners to make again), with the same Gang
messages, events and metrics. Its mechanism then starts it whole again once it fits. A gang a mechanism
started partly (some members bound, the others not, never whole) is requeued whole the same way once it
has been so for its timeout (`gangkeeper.io/timeout-seconds`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import replace

from webhook import contract
from webhook.controller.act.gangobject import GangObjects
from webhook.controller.act.report import Reporter
from webhook.controller.act.requeue import Requeuer
from webhook.controller.decide.recovery import recover, requeued_whole
from webhook.controller.decide.situation import Decision, GangSpec, GangState
from webhook.controller.observe.books import Books
from webhook.controller.observe.gangview import GangView
from webhook.controller.observe.resolve import Resolved


def supervised_books(books: Books, running: int, min_member: int, verdict: Decision, now: dt.datetime) -> Books:
    """The gang's books after a look: whole again (its members counted, its budget back once its backoff
    is over), or short since when; a requeue's books stand while its workload is suspended."""
    if books.suspended_at is not None:
        return books
    if running >= min_member:
        backoff_over = books.not_before is None or now >= books.not_before
        kept = replace(books, ran_with=running, short_since=None)
        return replace(kept, attempts=0, not_before=None) if backoff_over else kept
    if verdict.short:
        return replace(books, short_since=books.short_since or now)
    return replace(books, short_since=None)


def started_partly(
    verdict: Decision, gang: GangView, spec: GangSpec, books: Books, running: int, now: dt.datetime
) -> Decision:
    """A gang its mechanism started partly (some members bound, the rest not, and it never ran whole):
    short from then on, and requeued whole once it has been so for its timeout
    (`gangkeeper.io/timeout-seconds`), whichever mechanism bound them (volcano-sh/volcano#6010)."""
    live = [p for p in gang.pods if not p.terminal]
    if books.ran_with or not 0 < running < spec.min_member or len(live) < spec.min_member:
        return verdict
    if any(p.succeeded for p in gang.pods):
        return verdict  # a Job's members done: its next ones are no partial start
    since = books.short_since or now
    elapsed = max(0.0, (now - since).total_seconds())
    said = f"started partly: {running} of {spec.min_member} running"
    if elapsed < spec.timeout_seconds:
        left = spec.timeout_seconds - elapsed
        return replace(
            verdict, short=True, timed=True, message=f"{said}, requeued whole in {left:.0f}s unless it is whole"
        )
    return requeued_whole(f"{said} for {elapsed:.0f}s (timeout {spec.timeout_seconds}s)", live, spec)


def made_by_controllers(gang: GangView) -> GangView:
    """The gang's pods its workload's controllers made: a pod the webhook saw made by a tenant (a copy
    of a member, its ownerReference kept and `spec.nodeName` written by the copier) is no evidence that
    the gang started or lost anyone, so a workload is never requeued on its word. Pods from before the
    webhook wrote who made them carry no mark and count as before."""
    kept = [
        i
        for i, pod in enumerate(gang.pods)
        if pod.annotations.get(contract.MADE_BY_ANNOTATION) != contract.MADE_BY_TENANT
    ]
    if len(kept) == len(gang.pods):
        return gang
    return GangView(gang.namespace, gang.name, [gang.pods[i] for i in kept], [gang.raw[i] for i in kept])


class Supervisor:
    def __init__(
        self,
        reporter: Reporter,
        requeuer: Requeuer,
        gang_objects: GangObjects,
        may_write: Callable[[], bool] = lambda: True,
    ) -> None:
        self.reporter, self.requeuer, self.gang_objects, self.may_write = reporter, requeuer, gang_objects, may_write

    def look(
        self,
        gang: GangView,
        resolved: Resolved,
        backend: str,
        now: dt.datetime,
        autoscaled: bool = False,
        placeholders: str | None = None,
        model: str | None = None,
    ) -> float | None:
        """The gang's Gang brought up to date; the gang requeued whole once it has been short past its
        recovery timeout. When to look again though nothing changes (its recovery deadline), or None."""
        spec = resolved.spec
        if spec is None:
            self.reporter.report_other(gang, resolved, backend, now, autoscaled, placeholders)
            return None
        books = self.gang_objects.books(gang.namespace, gang.name)
        gang = made_by_controllers(gang)
        running = sum(1 for p in gang.pods if not p.terminal and p.node_name)
        state = GangState.RUNNING if running >= spec.min_member else GangState.WAITING_FOR_CAPACITY
        verdict = recover(Decision(state, ""), gang.pods, spec, books.history, now)
        if not verdict.short and books.suspended_at is None:
            verdict = started_partly(verdict, gang, spec, books, running, now)
        if verdict.state == GangState.TIMED_OUT and verdict.whole_gang:
            verdict.message = f"{verdict.message} (placed by the {backend} gang scheduler)"
            self.requeuer.time_out(gang, resolved, verdict, now)
            self.reporter.note_state(gang.key, GangState.TIMED_OUT)
            return None
        after = supervised_books(books, running, spec.min_member, verdict, now)
        note = verdict.message.rstrip("; ") if verdict.short else None
        self.reporter.report_other(gang, resolved, backend, now, autoscaled, placeholders, after, note, model)
        if verdict.short and after.short_since is not None:
            limit = spec.recovery_seconds if books.ran_with else spec.timeout_seconds
            return after.short_since.timestamp() + limit + 0.001
        return None
