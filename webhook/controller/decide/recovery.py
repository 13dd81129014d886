"""The recovery rules: a gang that ran whole and lost a member, a release that left members behind, a
backfilled gang that overran the run time it claimed, and whether a gang could ever fit."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from webhook.controller.decide import placement
from webhook.controller.decide.eligibility import Domains, Eligibility
from webhook.controller.decide.placement import Member, Placement
from webhook.controller.decide.pods import PodView, Release
from webhook.controller.decide.shapes import Node
from webhook.controller.decide.situation import Decision, GangSpec, GangState, History

# decisions that already act on a short gang (its replacement released, bound or thrown back): the
# recovery clock keeps running under them, but they are not overruled
_ACTING = frozenset({GangState.RELEASE, GangState.RELEASING, GangState.TIMED_OUT, GangState.REPAIR})


def recover(
    decision: Decision,
    pods: Sequence[PodView],
    spec: GangSpec,
    history: History,
    now: dt.datetime,
    records: Mapping[str, Release] | None = None,
    requeued_until: dt.datetime | None = None,
) -> Decision:
    """A gang that ran whole and now has fewer than minMember members running (one preempted, its node
    lost, OOM-killed) is short. A replacement that fits is released as any gated member; a gang still
    short `recovery_seconds` after it first was is requeued whole (`whole_gang`), never left partly
    running: the failure gangs exist to prevent (Kueue's waitForPodsReady.recoveryTimeout, Volcano's
    PodEvicted -> RestartJob). A gang released whole that lost a released member before any pass saw it
    running is short too (`released_whole`)."""
    live = [p for p in pods if not p.terminal]
    running = sum(1 for p in live if p.node_name)
    # members that ran and never left keep it whole: a scale-up's newcomers that wait are not a loss
    # (they go back alone at their timeout), nor is a Job's next wave once members succeeded
    whole = min(spec.min_member, history.ran_with)
    if decision.state in (GangState.RUNNING, GangState.GAVE_UP) or any(p.succeeded for p in pods):
        return decision
    released = min(spec.min_member, released_whole(pods, spec, records or {}, requeued_until))
    if running >= whole and sum(1 for p in live if not p.gated) >= released:
        return decision
    whole = max(whole, released)
    decision.short = decision.timed = True
    decision.whole = whole
    since = history.short_since or now
    elapsed = max(0.0, (now - since).total_seconds())
    lost = f"lost a member: {running} of {whole} running"
    if spec.restarts_whole:  # the workload's own policy goes first; gangkeeper's requeue only if it stays short
        lost = f"{lost} ({spec.restarts_whole}; gangkeeper requeues it only if it stays short)"
    if elapsed < spec.recovery_seconds:
        if decision.state != GangState.RELEASE:
            left = spec.recovery_seconds - elapsed
            decision.message = f"{lost}, requeued whole in {left:.0f}s unless it is whole again; {decision.message}"
        return decision
    if decision.state == GangState.TIMED_OUT and decision.whole_gang:
        return decision
    return requeued_whole(f"{lost} for {elapsed:.0f}s (recovery timeout {spec.recovery_seconds}s)", live, spec)


def requeued_whole(why: str, live: Sequence[PodView], spec: GangSpec) -> Decision:
    """The decision to requeue a short gang whole (its live members evicted where its owner remakes them)."""
    return Decision(
        GangState.TIMED_OUT,
        f"{why}: the whole gang is requeued",
        evict=[p.name for p in live] if spec.evictable else [],
        present=len(live),
        whole_gang=True,
        short=True,
        timed=True,
    )


def released_whole(
    pods: Sequence[PodView], spec: GangSpec, records: Mapping[str, Release], requeued_until: dt.datetime | None
) -> int:
    """How many members the gang's release made it whole with, as its release records tell: the pods
    released since its last requeue (`requeued_until`, its backoff's end) that are out of the gate or gone
    since; 0 below minMember. A member can be lost before any pass sees the gang running (a busy
    controller; the watch folds a bind and a deletion into one event), and then only these records say
    it ran whole."""
    if len(records) < spec.min_member:  # too few released to have made it whole: no walk over its pods
        return 0
    gated = {p.uid for p in pods if p.gated and not p.terminal}
    count = sum(
        1
        for record in records.values()
        if record.uid not in gated and (requeued_until is None or record.at >= requeued_until)
    )
    return count if count >= spec.min_member else 0


# how long past its expected-seconds a backfilled gang may run before the gang it overtook is owed its
# capacity (a run time is an estimate; Slurm's OverTimeLimit plays this part)
CLAIM_GRACE_SECONDS = 60


def overran_claim(
    decision: Decision,
    claim_until: dt.datetime | None,
    now: dt.datetime,
    overtaken: str | None,
    evictable: bool,
    live: Sequence[str],
) -> Decision:
    """A gang backfilled ahead of the queue's head on the strength of its gangkeeper.io/expected-seconds,
    still running past that claim (and a grace) while the head waits on a reservation: requeued whole,
    so a claim that proves false costs the gang that made it, not the gang it overtook; its later claims
    are not believed (it is never backfilled again)."""
    if decision.state != GangState.RUNNING or claim_until is None or overtaken is None:
        return decision
    late = (now - claim_until).total_seconds()
    if late <= CLAIM_GRACE_SECONDS:
        return decision
    return Decision(
        GangState.TIMED_OUT,
        f"ran {late:.0f}s past its gangkeeper.io/expected-seconds claim (backfilled ahead of {overtaken}, "
        f"which waits for the capacity it holds): requeued whole; its run-time claims are no longer believed",
        evict=list(live) if evictable else [],
        present=decision.present,
        whole_gang=True,
        claim_broken=True,
    )


def stranded_since(live: Sequence[PodView], spec: GangSpec, records: Mapping[str, Release]) -> dt.datetime | None:
    """When a release left members behind: pods whose release was recorded (`records`, the Gang's; the
    record comes before the PATCH) are still gated, that PATCH answered 500, 429 or never answered and
    the node perhaps taken since, while the gang cannot run without them. None when no release stranded
    anyone; pods never released (a scale-up's, a lost member's replacement) are not stranded."""
    if not records:  # a gang that waits: nothing released yet, no walk over its pods
        return None
    stranded = [
        record.at for p in live if p.gated and (record := records.get(p.name)) is not None and record.uid == p.uid
    ]
    if not stranded or sum(1 for p in live if not p.gated) >= spec.min_member:
        return None
    return min(stranded)


def ever_placement(
    members: Sequence[Member],
    nodes: Sequence[Node],
    eligibility: Eligibility | None = None,
    domains: Domains | None = None,
) -> Placement:
    """Where the gang would go on the empty cluster, with taints lifted and cordons undone (which admins
    do routinely): if it does not fit even there, it never will. A running gang's domain counts as
    free of it: on the emptied cluster the whole gang could move."""
    if any(n.taints or n.unschedulable for n in nodes):
        lifted = [replace(n, taints=(), unschedulable=False) if n.taints or n.unschedulable else n for n in nodes]
        nodes, eligibility = lifted, None
    if domains is not None:  # on the emptied cluster the whole gang, and its workload, could move
        within = replace(domains.within, near=frozenset()) if domains.within is not None else None
        domains = replace(domains, near=frozenset(), within=within)
    empty = {n.name: n.allocatable for n in nodes}
    return placement.place(members, nodes, empty, eligibility=eligibility, domains=domains)


def may_hold_partly(decision: Decision | None) -> bool:
    """Whether a gang may hold nodes partly: another mechanism's (no gate decision), or a gate gang short
    or binding its release; a gate gang waiting behind its gate or running whole is not walked."""
    return decision is None or decision.short or decision.state in (GangState.RELEASE, GangState.RELEASING)


def held_partly(gangs: Iterable[tuple[str, Sequence[PodView], int]]) -> dict[tuple[str, str], int]:
    """(mechanism, resource) -> what the members of gangs partly running hold: gangs some of whose live
    members are bound, fewer than their minimum, whichever mechanism bound them (issue 78: GPU-hours held
    by gangs partly running, per backend). A Job whose members succeeded is between waves, not partly
    running; a gate gang binding its release is, for the seconds it takes."""
    held: dict[tuple[str, str], int] = {}
    for mechanism, pods, min_member in gangs:
        bound = [p for p in pods if not p.terminal and p.node_name]
        if not 0 < len(bound) < min_member or any(p.succeeded for p in pods):
            continue
        for pod in bound:
            for resource, amount in pod.shape.requests:
                if resource != "pods":
                    held[(mechanism, resource)] = held.get((mechanism, resource), 0) + amount
    return held
