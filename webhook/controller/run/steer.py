"""Steering: a gang another scheduler places, pinned before it chooses where its own pod-by-pod choice
would trap the gang (issue 78, item 3).

kube-scheduler allocates a ResourceClaim a gang's pods share for the first of them it places, on the node
it scores best, and the claim's device then decides where every other pod may go (its DynamicResources
plugin reads the allocation's nodeSelector; kubernetes/kubernetes#140053, #138765). Where the device
reaches too few nodes for the rest (an interconnect per rack, racks of unequal room) the gang is trapped
partly bound for good. So the native backend holds a pod that names a shared claim behind gangkeeper's
gate (backends/native.py `stamp`), and here, once the gang's pods are there, gangkeeper's model places the
whole gang inside the nodes one allocation of that claim reaches (the gate's own placement, run/cycle.py
`decide_for`) and lifts the gates with each pod pinned where it was placed (the pin the gate's releases
write, the only change of a pod's affinity the controller's self-protection policy allows): its
scheduler then checks, allocates and binds the gang as it would, inside a domain that holds it. A gang
the model finds no domain for within its timeout (`gangkeeper.io/timeout-seconds`), one it cannot size,
or one with no single shared claim has its gates lifted as they are, for its scheduler to try as it would
(and supervision to requeue it whole if that starts it partly): the model never holds a gang for ever.
Coscheduling's gangs are steered the same way, their claim allocated first by a holder pod
(act/claim_holders.py): its Permit would otherwise hold the pod allocating it while the rest are refused.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field

from webhook.controller.act.claim_holders import ClaimHolders
from webhook.controller.act.release import Releaser, adjust
from webhook.controller.decide.pods import PodView
from webhook.controller.decide.situation import GangState
from webhook.controller.observe.devices import shared_reaches, the_shared_claim
from webhook.controller.observe.gangview import GangView
from webhook.controller.observe.resolve import Resolved
from webhook.controller.observe.reuse import Snapshot
from webhook.controller.observe.store import GangStore
from webhook.controller.run.cycle import ReleaseCycle
from webhook.controller.run.workqueue import GangQueue
from webhook.gangs import kinds
from webhook.gangs.model import Obj

log = logging.getLogger("gangkeeper.controller")
STEER_RETRY_SECONDS = 5.0  # a gang no domain holds yet is placed again this often (and when it changes)
# gangs placed for steering in one pass: a tenant's many waiting gangs cost a pass this many placements
# at most, the rest looked at in the next one
MAX_STEERS_PER_PASS = 64
HOLDER_RETRY_SECONDS = 1.0  # a gang whose claim a holder is being allocated looks again this often


@dataclass
class Steering:
    cycle: ReleaseCycle
    releaser: Releaser
    work: GangQueue
    # where a mechanism needs the shared claim allocated first (backends: `shared_claims_allocated_first`)
    holders: ClaimHolders | None = None
    store: GangStore | None = None
    _placed: tuple[int, int] = field(default=(-1, 0), init=False)  # (pass, gangs placed in it): a cap per pass

    def turn(
        self,
        gang: GangView,
        resolved: Resolved,
        snap: Snapshot,
        now: dt.datetime,
        this_pass: int = 0,
        allocate_first: bool = False,
        all_at_once: bool = False,
    ) -> None:
        """The gang's gated pods pinned where its shared claim holds it whole and lifted, or lifted as they
        are when nothing can be steered; nothing while it waits for members or for room. With
        `allocate_first`, its claim is allocated by a holder pod before they are lifted."""
        gated = [(view, raw) for view, raw in zip(gang.pods, gang.raw, strict=True) if view.gated and not view.terminal]
        if not gated:
            if allocate_first:
                self._let_the_holder_go(gang, snap)
            return
        spec = resolved.spec
        if spec is None:
            self._lift(gang, now, gated, None, f"the gang cannot be sized ({resolved.problem})")
            return
        since = min((view.created_at for view, _ in gated if view.created_at), default=now)
        waited = (now - since).total_seconds()
        live = sum(1 for view in gang.pods if not view.terminal)
        if live < spec.min_member and waited < spec.timeout_seconds:
            self.work.add_at(gang.key, since.timestamp() + spec.timeout_seconds + 0.001)
            return  # its other members are still being made: each arrival looks again
        reaches = shared_reaches(snap.index, gang)
        if not reaches and any(kinds.in_whole_group(view.labels) for view, _ in gated):
            self._hand_over_whole(gang, resolved, snap, now, gated, this_pass, all_at_once)  # the webhook held them
            return
        if not reaches:
            self._lift(gang, now, gated, None, "its pods share no one claim whose allocation could be placed")
            return
        if allocate_first and waited < spec.timeout_seconds and self._holder_waits(gang, snap):
            self.work.add_at(gang.key, now.timestamp() + HOLDER_RETRY_SECONDS)
            return  # placed already: its holder's claim is not allocated yet
        spent = self._placed[1] if self._placed[0] == this_pass else 0
        if spent >= MAX_STEERS_PER_PASS:
            self.work.add_at(gang.key, now.timestamp() + 1.0)
            return
        self._placed = (this_pass, spent + 1)
        decision = self.cycle.decide_for(gang, resolved, snap, now)
        if decision.state == GangState.RELEASE and not decision.unmodelled:
            pins = dict(decision.release)
            if allocate_first and waited < spec.timeout_seconds and not self._claim_allocated(gang, snap, gated, pins):
                self.work.add_at(gang.key, now.timestamp() + HOLDER_RETRY_SECONDS)
                return
            for view, _ in gated:  # promised, as a release is: no gate gang of this pass takes it
                if view.name in pins:
                    adjust(snap.free, {pins[view.name]: view.units}, -1)
            nodes = sorted(set(pins.values()))
            why = (
                f"gang {gang.name} pinned where one allocation of the claim its pods share holds it whole "
                f"({', '.join(nodes[:4])}{', ...' if len(nodes) > 4 else ''}); its scheduler checks and binds it there"
            )
            self._lift(gang, now, gated, pins, why)
            return
        if waited >= spec.timeout_seconds:
            why = f"no domain held it whole for {spec.timeout_seconds}s ({decision.message or decision.state.value})"
            self._lift(gang, now, gated, None, why)
            return
        self.work.add_at(gang.key, now.timestamp() + STEER_RETRY_SECONDS)

    def _hand_over_whole(
        self,
        gang: GangView,
        resolved: Resolved,
        snap: Snapshot,
        now: dt.datetime,
        gated: list[tuple[PodView, Obj]],
        this_pass: int,
        all_at_once: bool = False,
    ) -> None:
        """A gang's groups useful only whole (KubeRay multi-host replicas), which its scheduler would bind
        pod by pod above the gang's minimum: the gate's own decision (whole groups, every role's minimum
        first) picks what fits now, and those pods' gates are lifted together, each pinned where it was
        placed; the rest stay held and are looked at again (`all_at_once`: all of it or nothing, for a
        scheduler that refuses a gang with a pod gated). Never let go unplaced: a group partly bound is
        what holding prevents."""
        spent = self._placed[1] if self._placed[0] == this_pass else 0
        if spent >= MAX_STEERS_PER_PASS:
            self.work.add_at(gang.key, now.timestamp() + 1.0)
            return
        self._placed = (this_pass, spent + 1)
        decision = self.cycle.decide_for(gang, resolved, snap, now)
        chosen = [(view, raw) for view, raw in gated if view.name in decision.release]
        if all_at_once and len(chosen) < len(gated):
            chosen = []  # its scheduler would refuse what is handed over while the rest is held
        if decision.state == GangState.RELEASE and chosen:
            pins = dict(decision.release)
            for view, _ in chosen:  # promised, as a release is: no gate gang of this pass takes it
                adjust(snap.free, {pins[view.name]: view.units}, -1)
            why = (
                f"gang {gang.name}: {len(chosen)} pods of groups useful only whole handed over together, "
                f"pinned where they fit ({decision.message}); its scheduler checks and binds them there"
            )
            written = self.releaser.steer(chosen, None if decision.unmodelled else pins, why)
            log.info("handed over whole", extra={"gang": gang.key, "pods": written})
            if written == len(gated):
                return
        self.work.add_at(gang.key, now.timestamp() + (1.0 if chosen else STEER_RETRY_SECONDS))

    def _claim_allocated(
        self, gang: GangView, snap: Snapshot, gated: list[tuple[PodView, Obj]], pins: dict[str, str]
    ) -> bool:
        """Whether the gang's shared claim is allocated; if not, a holder pod pinned to one of the gang's
        nodes asks its scheduler to allocate it there (act/claim_holders.py)."""
        claim = the_shared_claim(snap.index, gang)
        if claim is None or claim.allocated or self.holders is None or self.store is None:
            return True
        record = self.store.record(gang.key)
        if record.claim_holder is None:
            view, raw = next((view, raw) for view, raw in gated if view.name in pins)
            name = claim.key.partition("/")[2]
            record.claim_holder = self.holders.hold(view, raw, gang.name, name, pins[view.name])
        return False

    def _holder_waits(self, gang: GangView, snap: Snapshot) -> bool:
        """Whether the gang's holder is made and its claim not allocated yet."""
        record = self.store.get(gang.key) if self.store is not None else None
        if record is None or record.claim_holder is None:
            return False
        claim = the_shared_claim(snap.index, gang)
        return claim is not None and not claim.allocated

    def _let_the_holder_go(self, gang: GangView, snap: Snapshot) -> None:
        """The gang's claim holder deleted once every pod of the gang is bound (each is in the claim's
        reservedFor then, which keeps it allocated): the one its record names, else one an earlier start
        left (the gang requeued whole while it held the claim, and its record forgotten with its pods)."""
        live = [view for view in gang.pods if not view.terminal]
        if self.holders is None or self.store is None or not live or not all(view.node_name for view in live):
            return
        record = self.store.get(gang.key)
        holder = record.claim_holder if record is not None else None
        if holder is None:
            holder = self.holders.left_behind(gang.namespace, gang.name, lambda key: key in snap.index.pods)
        if holder is not None and self.holders.let_go(gang.namespace, holder) and record is not None:
            record.claim_holder = None

    def _lift(
        self, gang: GangView, now: dt.datetime, gated: list[tuple[PodView, Obj]], pins: dict[str, str] | None, why: str
    ) -> None:
        if pins is None:
            why = f"gang {gang.name} not steered: {why}; its scheduler places it as it would"
        written = self.releaser.steer(gated, pins, why)
        log.info("steered" if pins is not None else "steering given up", extra={"gang": gang.key, "pods": written})
        if written < len(gated):  # a pod changed meanwhile (409) or the API failed: looked at again soon
            self.work.add_at(gang.key, now.timestamp() + 1.0)
