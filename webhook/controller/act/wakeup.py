"""Waking a coscheduling gang that kube-scheduler would not retry.

scheduler-plugins' Coscheduling asks kube-scheduler to retry the pods it rejected only when a pod is
added or a PodGroup is added or updated (pkg/coscheduling/coscheduling.go, EventsToRegister). A gang
that waited while the cluster was full ends with every pod rejected by Coscheduling itself (Permit's
"optimistic rejection in PostFilter", "rejection in Unreserve"), so a node freeing up or losing a taint
retries none of them until the scheduler's unschedulable flush, 5 minutes by default (on the real tier:
`"Event is not making pod schedulable" ... event="NodeUpdateNodeTaint"` for each pod of the gang).
When gangkeeper's own placement model sees the whole waiting gang fit, it touches the gang's PodGroup:
the update is the event Coscheduling waits for.

A gang woken once that still waits whole while it fits has its pods touched too, at the next wake. The
scheduler of scheduler-plugins 0.34 can lose a pod from its queue: `AddUnschedulableIfNotPresent`
requeues a rejected pod into the active queue before its deferred `Done`, a Pop in that instant finds
the pod still in flight and drops it ("The same pod is tracked in multiple places in the scheduler, and
just discard it", k8s.io/kubernetes pkg/scheduler/backend/queue/active_queue.go), and the pod is then in
no queue at all: no PodGroup event and no unschedulable flush reaches it (seen on the real tier: three
of four pods retried on each wake, the fourth never). An update of the pod itself does:
`PriorityQueue.Update` puts a pod found in no queue into the active queue (scheduling_queue.go), and
leaves one in the unschedulable queue where it is (Coscheduling registers no Pod/Update event).
"""

from __future__ import annotations

from collections.abc import Sequence

from webhook.controller.decide import placement
from webhook.controller.decide.pods import PodView
from webhook.controller.observe.reuse import Snapshot
from webhook.controller.observe.store import GangRecord

WAKE_ANNOTATION = "gangkeeper.io/woken-at"
# at most this often per gang: each wake-up costs the scheduler a round of attempts on every member
WAKE_INTERVAL_SECONDS = 30.0
# and the model asked at most this often per waiting gang: a placement per pass per gang would be the
# pass's largest cost on a big cluster with many waiting gangs
CHECK_INTERVAL_SECONDS = 5.0


def waiting_gang_fits(pods: Sequence[PodView], min_member: int, snapshot: Snapshot) -> bool:
    """Whether a coscheduling gang, none of it bound and at least `min_member` pods refused by the
    scheduler, now fits whole on the free capacity gangkeeper models (kube-scheduler's filters); or,
    part of it running, whether the step handed over to it (run/steer.py), every pod of it refused, now
    fits whole. Coscheduling's PreFilter refuses a group any of whose pods is still gated ("cannot
    proceed due to gated pods in the same PodGroup"), which it is for the moment between the first and
    the last gate lifted; the step is then retried by nothing but the unschedulable flush."""
    live = [p for p in pods if not p.finished]
    refused = [p for p in live if p.unschedulable and not p.gated and not p.node_name]
    if any(p.node_name for p in live):  # partly running: only a step all of whose pods were refused
        waiting = [p for p in live if not p.node_name]
        if not refused or len(refused) < len(waiting):  # one still gated: its group is refused anyway
            return False
        min_member = len(refused)
    if len(refused) < min_member:
        return False
    result = placement.place(
        [placement.Member(p.name, p.shape) for p in refused],
        snapshot.nodes,
        snapshot.free,
        used_ports=snapshot.ports,
        eligibility=snapshot.eligibility,
    )
    return len(result.assignments) >= min_member


def wake_due(record: GangRecord, now: float) -> bool:
    """Whether a gang is checked against the model again: every CHECK_INTERVAL_SECONDS, and a gang that
    fits in the model but not in the scheduler (what the model does not see) woken at most every
    WAKE_INTERVAL_SECONDS, not every pass."""
    return now - record.checked_at >= CHECK_INTERVAL_SECONDS and now - record.woken_at >= WAKE_INTERVAL_SECONDS


def note_check(record: GangRecord, now: float, woken: bool) -> bool:
    """Note a check on the gang's record; returns whether its pods are to be touched too (woken at its
    last check as well, and still waiting whole)."""
    record.checked_at = now
    again = woken and record.woken_in_a_row
    record.woken_in_a_row = woken
    if woken:
        record.woken_at = now
    return again
