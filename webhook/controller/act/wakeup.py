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
from dataclasses import dataclass, field

from webhook.controller.decide import placement
from webhook.controller.decide.pods import PodView
from webhook.controller.observe.reuse import Snapshot

WAKE_ANNOTATION = "gangkeeper.io/woken-at"
# at most this often per gang: each wake-up costs the scheduler a round of attempts on every member
WAKE_INTERVAL_SECONDS = 30.0
# and the model asked at most this often per waiting gang: a placement per pass per gang would be the
# pass's largest cost on a big cluster with many waiting gangs
CHECK_INTERVAL_SECONDS = 5.0


def waiting_gang_fits(pods: Sequence[PodView], min_member: int, snapshot: Snapshot) -> bool:
    """Whether a coscheduling gang, none of it bound and at least `min_member` pods refused by the
    scheduler, now fits whole on the free capacity gangkeeper models (kube-scheduler's filters)."""
    live = [p for p in pods if not p.finished]
    if any(p.node_name for p in live):
        return False  # partly running: Coscheduling's Permit counts the bound ones and retries the rest
    refused = [p for p in live if p.unschedulable and not p.gated]
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


@dataclass
class Waker:
    """When each gang was last checked against the model and last woken: a gang that fits in the model
    but not in the scheduler (what the model does not see) is woken every WAKE_INTERVAL_SECONDS, not
    every pass."""

    checked_at: dict[str, float] = field(default_factory=dict)
    woken_at: dict[str, float] = field(default_factory=dict)
    # gangs woken at their last check: a second wake in a row touches the pods as well
    woken_in_a_row: set[str] = field(default_factory=set)

    def due(self, key: str, now: float) -> bool:
        never = float("-inf")
        return (
            now - self.checked_at.get(key, never) >= CHECK_INTERVAL_SECONDS
            and now - self.woken_at.get(key, never) >= WAKE_INTERVAL_SECONDS
        )

    def checked(self, key: str, now: float, woken: bool) -> bool:
        """Note a check; returns whether the gang's pods are to be touched too (woken at its last check
        as well, and still waiting whole)."""
        self.checked_at[key] = now
        if not woken:
            self.woken_in_a_row.discard(key)
            return False
        self.woken_at[key] = now
        again = key in self.woken_in_a_row
        self.woken_in_a_row.add(key)
        return again

    def keep_only(self, live: set[str]) -> None:
        for times in (self.checked_at, self.woken_at):
            for key in set(times) - live:
                del times[key]
        self.woken_in_a_row &= live
