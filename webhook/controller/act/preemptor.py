"""Acting on whole-gang preemption (preemption.py decides): a waiting gate gang that fits only if
lower-priority pods go requeues whole victim gangs (as a lost member's recovery does: suspended Jobs count
no failure) and evicts lone victim pods, in one decision, then waits for their capacity.

Not while its PriorityClass says preemptionPolicy Never; never a victim a PodDisruptionBudget protects
(checked before any pod goes, so a victim gang is never left part-evicted by a refused eviction); never
a gang released within its min runtime (--min-runtime-seconds: no thrash between two gangs taking
turns). Events on both sides name the other gang only when it is in the same namespace.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from webhook.backends import Mechanisms
from webhook.controller import metrics
from webhook.controller.act.requeue import Requeuer
from webhook.controller.decide.placement import Member
from webhook.controller.decide.pods import gang_priority
from webhook.controller.decide.preemption import (
    DEFAULT_MIN_RUNTIME_SECONDS,
    MAX_CANDIDATES,
    Victim,
    budget_blocks,
    choose_victims,
)
from webhook.controller.decide.situation import Decision, GangState
from webhook.controller.observe.gangview import GangView
from webhook.controller.observe.resolve import Resolved
from webhook.controller.observe.reuse import Snapshot
from webhook.kube import PODS, Api, ApiError, Resource

PDBS = Resource("policy/v1", "poddisruptionbudgets")
PENDING_SECONDS = 120.0  # how long a preemptor waits for its victims before it may choose again


class Preemptor:
    def __init__(
        self,
        api: Api,
        requeuer: Requeuer,
        may_write: Callable[[], bool] = lambda: True,
        mechanisms: Mechanisms | None = None,
        min_runtime_seconds: float = DEFAULT_MIN_RUNTIME_SECONDS,
    ) -> None:
        """Each gang's last preemption, and what last preempted it, are fields of its record (the store)."""
        self.api, self.requeuer, self.may_write = api, requeuer, may_write
        self.mechanisms = mechanisms or Mechanisms()
        self.min_runtime_seconds = min_runtime_seconds
        self.store = requeuer.store

    def _preempted_by(self, victim: str, gang: str) -> bool:
        """Whether the victim gang's last preemption was for this gang (the same record of it): never
        requeued twice in a row by one preemptor (the first time did not make that gang start, a second
        would not either)."""
        record = self.store.get(victim)
        by = record.preempted_by if record is not None else None
        return by is not None and by[0] == gang and self.store.is_live(by)

    def consider(
        self, gang: GangView, resolved: Resolved, decision: Decision, snapshot: Snapshot, now: dt.datetime
    ) -> Decision:
        """A gang waiting for capacity that lower-priority pods hold: choose and act, or say why not. The
        decision comes back with that said (a new one: a waiting decision is reused between passes)."""
        if decision.state != GangState.WAITING_FOR_CAPACITY or not decision.preempt_nodes or resolved.spec is None:
            return decision
        said = self._act(gang, resolved, decision, snapshot, now)
        return replace(decision, message=f"{decision.message}; {said}") if said else decision

    def _act(self, gang: GangView, resolved: Resolved, decision: Decision, snapshot: Snapshot, now: dt.datetime) -> str:
        gated = [p for p in gang.pods if p.gated and not p.terminal]
        if not gated or resolved.spec is None:
            return ""
        if not all(p.preempts for p in gated):
            return "its PriorityClass says preemptionPolicy Never, so it preempts nothing"
        unmodelled = sorted({c for p in gated for c in p.shape.unmodelled})
        if unmodelled:
            # kube-scheduler runs its filters with the victims removed and preempts nothing where they
            # would still fail; placement cannot tell, so preempting could evict a gang for nothing
            return (
                f"its pods have constraints the gate's placement does not model ({', '.join(unmodelled)}), so "
                "preempting might not make it fit: it preempts nothing and waits for room"
            )
        going = self._still_going(gang, snapshot, now)
        if going:
            return going
        priority = gang_priority(p.priority for p in gang.pods if not p.terminal)
        # the nodes one placement would empty first, then every other node lower-priority pods hold: the
        # victims there may be protected (a PodDisruptionBudget, a fresh release) where others are not
        elsewhere = sorted(snapshot.index.nodes_below(priority) - set(decision.preempt_nodes))
        nodes = [*decision.preempt_nodes, *elsewhere]
        candidates = [
            replace(victim, released=self._released(victim, snapshot))
            for victim in snapshot.index.victims_below(
                priority, nodes, lambda key: self._gate_gang(key, snapshot, now), limit=MAX_CANDIDATES
            )
            if not self._preempted_by(victim.key, gang.key)
        ]
        budgets: dict[str, list[dict[str, Any]]] = {}
        chosen = choose_victims(
            [Member(p.name, p.shape) for p in gated],
            snapshot.nodes,
            snapshot.free,
            candidates,
            priority,
            nodes,
            spread=resolved.spec.spread,
            eligibility=snapshot.eligibility,
            domains=resolved.spec.domains(),
            protected=lambda victim: self._protected(victim, snapshot, budgets),
        )
        if chosen is None:
            return (
                "no whole lower-priority gangs or pods it may preempt make room (gangs released within the "
                f"min runtime, {self.min_runtime_seconds:g} s, pods a PodDisruptionBudget protects and gangs it "
                "preempted last time are never victims)"
            )
        named = ", ".join(self._named(v, gang.namespace) for v in chosen)
        if not self.may_write():  # `gangkeeper explain`, or a replica that is not the leader: only say it
            return f"would preempt {named}"
        self._preempt(gang, resolved, chosen, priority, snapshot, now)
        return f"preempting {named}"

    def _preempt(
        self,
        gang: GangView,
        resolved: Resolved,
        chosen: tuple[Victim, ...],
        priority: int,
        snapshot: Snapshot,
        now: dt.datetime,
    ) -> None:
        self.store.record(gang.key).preemption = (now, chosen)
        by = self.store.identity(gang.key)
        for victim in chosen:
            if victim.gang:
                self.store.record(victim.key).preempted_by = by
        metrics.PREEMPTIONS.inc(len(chosen))
        for victim in chosen:
            self._take(victim, gang, priority, snapshot, now)
        self.requeuer.reporter.event(
            resolved.workload or gang.raw[0],
            "Normal",
            "GangPreempting",
            f"gang {gang.name} (priority {priority}): {len(chosen)} lower-priority victims go so it fits: "
            + ", ".join(self._named(v, gang.namespace) for v in chosen),
        )

    def _still_going(self, gang: GangView, snapshot: Snapshot, now: dt.datetime) -> str:
        """What the gang's last preemption, still recent, waits for: its victims not yet gone ("": none)."""
        record = self.store.get(gang.key)
        waited = record.preemption if record is not None else None
        if waited is None or (now - waited[0]).total_seconds() >= PENDING_SECONDS:
            return ""
        still = [v for v in waited[1] if self._still_holds(v, snapshot)]
        if not still:
            return ""
        return f"waiting for {len(still)} preempted to go: " + ", ".join(
            self._named(v, gang.namespace) for v in still[:3]
        )

    def _take(self, victim: Victim, by: GangView, priority: int, snapshot: Snapshot, now: dt.datetime) -> None:
        who = f"gang {by.key}" if victim.namespace == by.namespace else "a gang in another namespace"
        why = f"preempted whole by {who} of priority {priority}"
        if not victim.gang:
            namespace, _, name = victim.key.partition("/")
            try:
                self.api.create(
                    PODS.path(namespace, name, "eviction"),
                    {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}},
                )
                metrics.EVICTIONS.inc()
            except ApiError as error:
                metrics.API_ERRORS.labels("evict", str(error.status)).inc()
            return
        view = snapshot.gangs.get(victim.key)
        if view is None:
            return
        resolved = self.requeuer.workloads.resolve(view, {})
        live = [p.name for p in view.pods if not p.terminal]
        requeue = Decision(GangState.TIMED_OUT, why, evict=live, present=len(live), whole_gang=True)
        self.requeuer.requeue_whole(view, resolved, requeue, now)
        self.requeuer.reporter.event(
            resolved.workload or view.raw[0], "Warning", "GangPreempted", f"gang {view.name}: {why}"
        )

    @staticmethod
    def _named(victim: Victim, namespace: str) -> str:
        if victim.namespace == namespace:
            return victim.describe()
        return f"a {'gang' if victim.gang else 'pod'} of priority {victim.priority} in another namespace"

    @staticmethod
    def _still_holds(victim: Victim, snapshot: Snapshot) -> bool:
        if victim.gang:
            view = snapshot.gangs.get(victim.key)
            return view is not None and any(p.holds_node for p in view.pods)
        return victim.key in snapshot.index.pods

    @staticmethod
    def _released(victim: Victim, snapshot: Snapshot) -> float:
        """When a victim gang was last released (-inf: a pod in no gang, or not known)."""
        released = last_release(snapshot.gangs.get(victim.key)) if victim.gang else None
        return released.timestamp() if released is not None else float("-inf")

    def _gate_gang(self, key: str, snapshot: Snapshot, now: dt.datetime) -> bool:
        """A gang the gate releases, not released within its min runtime."""
        view = snapshot.gangs.get(key)
        if view is None or not view.raw or not self.mechanisms.of_pod(view.raw[0]).gangkeeper_places:
            return False
        released = last_release(view)
        return released is None or (now - released).total_seconds() >= self.min_runtime_seconds

    def _protected(self, victim: Victim, snapshot: Snapshot, budgets: dict[str, list[dict[str, Any]]]) -> bool:
        """Whether a PodDisruptionBudget would refuse the victim's pods going (unreadable: protected)."""
        namespace = victim.namespace
        if namespace not in budgets:
            try:
                budgets[namespace] = list(self.api.list(PDBS.path(namespace)).get("items") or [])
            except ApiError as error:
                metrics.API_ERRORS.labels("list", str(error.status)).inc()
                return True
        if not budgets[namespace]:
            return False
        if victim.gang:
            view = snapshot.gangs.get(victim.key)
            labels = [dict(p.labels) for p in view.pods if not p.terminal] if view is not None else []
        else:
            try:
                pod = self.api.get(PODS.path(namespace, victim.key.partition("/")[2]))
            except ApiError:
                return True
            labels = [dict((pod.get("metadata") or {}).get("labels") or {})]
        return budget_blocks(budgets[namespace], labels)


def last_release(view: GangView | None) -> dt.datetime | None:
    """When the gate last released one of the gang's pods (its controller's record), if it ever did."""
    released = [p.released_at for p in view.pods if p.released_at is not None] if view is not None else []
    return max(released, default=None)
