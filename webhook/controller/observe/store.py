"""The controller's one memory: a record per gang of what it remembers between passes.

Everything the controller keeps about a gang from one pass to the next (what its workload said, its
mechanism, its last decision, the waiting decision it may reuse, its place in the queue, capacity kept
for members to come, when its workload went, what its Gang said of placeholders, when it was last
woken, its placeholders not yet seen, its Gang object as this replica last wrote it, its last devices
check) is a field of its
`GangRecord`; the store holds one per gang the index knows, and `forget(key)` (or `keep_only`, run each
pass with the live gangs) removes all of it at once. Beside them: one record per namespace, and the
version of each workload looked at ahead of its pods, by uid. A new feature adds a field here, not a
dict on a class in run/ or act/ (tests/unit/test_architecture.py, tests/fake/test_store.py).

Pass stamps replace the dicts that were swapped whole each pass: a decision or a waiting decision is
the previous pass's only when it was written in it (`decided_in`, `waiting_in`), as kube-scheduler's
cache tells a node's info current by its generation rather than by a copy made per cycle
(pkg/scheduler/backend/cache/cache.go UpdateSnapshot).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from webhook.backends import Backend
    from webhook.controller.decide.headofline import NamespaceHold
    from webhook.controller.decide.pods import Release
    from webhook.controller.decide.preemption import Victim
    from webhook.controller.decide.situation import Decision
    from webhook.controller.observe.books import Books
    from webhook.controller.observe.resolve import Resolved
    from webhook.controller.observe.reuse import Waiting
    from webhook.gangs.model import Obj

NEVER = float("-inf")


@dataclass(slots=True)
class GangRecord:
    """What the controller remembers of one gang (namespace/name) between passes."""

    key: str
    serial: int = 0  # which record of this key: a gang deleted and made again under its name is another
    # its pods' version when its workload was last read, and what was read
    seen: tuple[int, Resolved] | None = None
    # its mechanism (its first pod's) and the other mechanisms its pods carry, for that pods' version
    marks: tuple[int, Backend, frozenset[str]] | None = None
    decision: Decision | None = None  # what the pass `decided_in` decided for it
    decided_in: int = -1
    waiting: Waiting | None = None  # its waiting decision, reusable by the pass after `waiting_in`
    waiting_in: int = -1
    order: tuple[int, tuple[int, dt.datetime]] | None = None  # (roster version, its queue key)
    # capacity kept for members a released gang creates later (Spark executors): since when, node -> units
    reserved: tuple[dt.datetime, dict[str, dict[str, int]]] | None = None
    gone_since: float | None = None  # when its workload was first seen deleted
    handed: str | None = None  # what its Gang last said of placeholders kept for another scheduler
    checked_at: float = NEVER  # a coscheduling gang last checked against the model (act/wakeup.py)
    woken_at: float = NEVER  # ... and last woken
    woken_in_a_row: bool = False  # woken at its last check as well
    # what its Gang object was last told (act/report.py): the state decided (events when the Gang's is
    # unknown), when its counts were last written and when newer ones are due (held back COUNTS_SECONDS)
    last_state: str | None = None
    counts_written: dt.datetime | None = None
    counts_due: dt.datetime | None = None
    # (its roster version, the Gang's release records as read, the records of pods gone): while neither
    # changes, neither do the pods gone (walking a 1,000-pod gang's records each pass was 5% of the
    # leader's CPU, bench/cluster.py autoscale)
    gone_records: tuple[int, Obj, dict[str, None]] | None = None
    # nodes its pods were refused on by the scheduler: not planned for it again until then (act/requeue.py)
    avoid: dict[str, dt.datetime] | None = None
    # its last preemption (act/preemptor.py): when, and its victims; and, as a victim, the gang (key, serial)
    # that last preempted it, which never requeues it twice in a row
    preemption: tuple[dt.datetime, tuple[Victim, ...]] | None = None
    preempted_by: tuple[str, int] | None = None
    group_refused: str = ""  # why the API last refused its group object (act/groups.py): told once each
    # another mechanism's gang waiting whole: what gangkeeper's model last said of it, when (the controller's
    # clock, seconds) and on which nodes (the index's nodes epoch): looked at again as capacity moves
    model: tuple[float, int, str | None] | None = None
    # placeholders (act/placeholders.py, monotonic seconds): since when it holds some, and until when it
    # makes none after giving them back for other namespaces' gangs
    holding_since: float | None = None
    yielding_until: float | None = None
    # its Gang object's books and release records, each with the object parsed (act/gangobject.py): parsed
    # again only when the object is another (a profiled replay spent a tenth of its CPU parsing them)
    books: tuple[Obj, Books] | None = None
    releases: tuple[Obj, Mapping[str, Release]] | None = None
    # its placeholder pods created and not yet seen by the watch (act/placeholders.py): pod key -> when
    # (monotonic), counted against the caps until seen or CREATED_UNSEEN_SECONDS old
    unseen_placeholders: dict[str, float] | None = None
    # its Gang object as this replica last wrote it (act/gangobject.py): (when, monotonic; the object, None
    # when deleted), believed over the watch's copy until the watch shows it or FRESH_SECONDS pass
    written: tuple[float, Obj | None] | None = None
    # the pod holding its shared claim until its pods bind (act/claim_holders.py), (name, uid): deleted then
    claim_holder: tuple[str, str] | None = None
    # its last devices check (observe/device_check.py CheckRead): what it read (generations, the placement;
    # node by node, each node's part and its answer) and its answer, the same while none of them changed
    device_check: tuple[object, str | None] | None = None


class GangStore:
    """One record per gang, and the number of the pass under way."""

    def __init__(self) -> None:
        self._records: dict[str, GangRecord] = {}
        self._reserving: set[str] = set()  # records with a reservation: walked each pass, not all records
        self.pass_number = 0
        self._made = 0  # records made: each one's serial
        # one record per namespace: its turn at the head of the queue (decide/headofline.py), kept while
        # one of its gangs holds others back
        self.namespaces: dict[str, NamespaceHold] = {}
        # one per namespace whose gangs the placeholder caps refused (act/placeholders.py): the last two
        # passes that refused them, newest first (another namespace's gangs give theirs back for them)
        self._refused_placeholders: dict[str, tuple[int, int]] = {}
        # one per watched workload, by uid: the resourceVersion act/groups.py last made its group objects
        # ahead of its pods for (replaced whole each pass by the workloads still watched)
        self.workloads_looked_at: dict[str, str] = {}
        # the records with placeholders created and not yet seen by the watch: walked, not all records
        self._placing: set[str] = set()
        # the records with a Gang object this replica wrote that the watch may not show yet
        self._writing: set[str] = set()

    def begin_pass(self) -> None:
        self.pass_number += 1

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[GangRecord]:
        return iter(list(self._records.values()))

    def get(self, key: str) -> GangRecord | None:
        return self._records.get(key)

    def record(self, key: str) -> GangRecord:
        """The gang's record, made on first use."""
        found = self._records.get(key)
        if found is None:  # setdefault: a release's writer thread and the pass may make it together
            self._made += 1
            found = self._records.setdefault(key, GangRecord(key, self._made))
        return found

    def identity(self, key: str) -> tuple[str, int]:
        """The gang as one record of it: (key, serial)."""
        return key, self.record(key).serial

    def is_live(self, identity: tuple[str, int]) -> bool:
        """Whether that record of the gang is still its record (not forgotten and made again)."""
        found = self._records.get(identity[0])
        return found is not None and found.serial == identity[1]

    def forget(self, key: str) -> None:
        """Everything remembered of the gang, gone."""
        self._records.pop(key, None)
        self._reserving.discard(key)
        self._placing.discard(key)
        self._writing.discard(key)

    def keep_only(self, live: Collection[str]) -> None:
        """Forget every gang not in `live` (the gangs the index knows this pass)."""
        # list() copies the keys in one step: a release's writer thread may add a record meanwhile
        for key in [key for key in list(self._records) if key not in live]:
            self.forget(key)

    def forget_reads(self) -> None:
        """Every gang's workload and mechanism read again (the native API changed under the controller)."""
        for record in list(self._records.values()):
            record.seen = record.marks = None

    # --- what the previous pass left: valid only when written in it

    def previous_waiting(self, key: str) -> Waiting | None:
        found = self._records.get(key)
        return found.waiting if found is not None and found.waiting_in == self.pass_number - 1 else None

    def decided(self, key: str, decision: Decision) -> None:
        record = self.record(key)
        record.decision, record.decided_in = decision, self.pass_number

    def waits(self, key: str, waiting: Waiting) -> None:
        record = self.record(key)
        record.waiting, record.waiting_in = waiting, self.pass_number

    def decisions(self) -> dict[str, Decision]:
        """What the last pass decided, gang by gang."""
        records = list(self._records.values())
        return {r.key: r.decision for r in records if r.decision is not None and r.decided_in == self.pass_number}

    # --- reservations: the few records that hold one are walked each pass

    def reserve(self, key: str, since: dt.datetime, units: dict[str, dict[str, int]]) -> None:
        self.record(key).reserved = (since, units)
        self._reserving.add(key)

    def reservations(self) -> list[tuple[str, tuple[dt.datetime, dict[str, dict[str, int]]]]]:
        found = []
        for key in list(self._reserving):
            record = self._records.get(key)
            if record is None or record.reserved is None:
                self._reserving.discard(key)
            else:
                found.append((key, record.reserved))
        return found

    def end_reservation(self, key: str) -> None:
        self._reserving.discard(key)
        if (record := self._records.get(key)) is not None:
            record.reserved = None

    # --- placeholders created and not yet seen: the few records that have some are walked

    def placeholder_made(self, key: str, pod: str, when: float) -> None:
        record = self.record(key)
        record.unseen_placeholders = {**(record.unseen_placeholders or {}), pod: when}
        self._placing.add(key)

    def unseen_placeholders(self) -> list[tuple[str, dict[str, float]]]:
        found = []
        for key in list(self._placing):
            record = self._records.get(key)
            if record is None or not record.unseen_placeholders:
                self._placing.discard(key)
            else:
                found.append((key, record.unseen_placeholders))
        return found

    def placeholders_seen(self, seen: Collection[str], made_after: float) -> None:
        """Placeholders the watch shows now, or created before `made_after`, no longer counted as unseen."""
        for key, unseen in self.unseen_placeholders():
            kept = {pod: when for pod, when in unseen.items() if pod not in seen and when > made_after}
            if (record := self._records.get(key)) is not None:
                record.unseen_placeholders = kept or None
            if not kept:
                self._placing.discard(key)

    # --- namespaces the placeholder caps refused: this pass and the last

    def refuse_placeholders(self, namespace: str) -> None:
        latest, _ = self._refused_placeholders.get(namespace, (-1, -1))
        if latest != self.pass_number:
            self._refused_placeholders[namespace] = (self.pass_number, latest)

    def refused_placeholders_last_pass(self, besides: str) -> bool:
        """Whether a namespace other than `besides` had gangs refused placeholders in the previous pass."""
        last = self.pass_number - 1
        return any(last in passes for ns, passes in list(self._refused_placeholders.items()) if ns != besides)

    def forget_placeholder_refusals(self) -> None:
        """Refusals older than the previous pass, gone (at a pass's start)."""
        last = self.pass_number - 1
        for namespace, passes in list(self._refused_placeholders.items()):
            if max(passes) < last:
                del self._refused_placeholders[namespace]

    # --- Gang objects written and not yet seen by the watch

    def wrote(self, key: str, written: tuple[float, Obj | None] | None) -> None:
        record = self.record(key)
        record.written = written
        (self._writing.add if written is not None else self._writing.discard)(key)

    def writing(self) -> list[str]:
        """The gangs whose Gang object this replica wrote and the watch may not show yet."""
        return [key for key in list(self._writing) if (r := self._records.get(key)) is not None and r.written]
