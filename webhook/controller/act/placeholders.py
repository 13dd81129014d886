"""Placeholder pods: how a gate gang that waits on capacity makes an autoscaler add nodes for all of it
(and a Volcano gang, whose pods the autoscaler sees only in part: `Placeholders.hand_over`).

Karpenter and Cluster Autoscaler add nodes only for pods that kube-scheduler refused (PodScheduled False,
reason Unschedulable: Karpenter pkg/utils/pod/scheduling.go FailedToSchedule, Cluster Autoscaler
utils/kubernetes/listers.go isUnschedulable); a pod behind the gate is SchedulingGated and invisible to
both. So while a gang waits for capacity on an autoscaled cluster, the pods of it that the free room there
is cannot hold get placeholders: pause pods that kube-scheduler schedules or refuses as it would them.
The gang's pods alike (one shape: requests, node selector, node affinity, tolerations) share them, each
standing for as many as one node of the NodePools that could hold them takes (decide/autoscaling.py
pods_per_placeholder: the nodes a pool made, else the instance size its requirements pin; one pod
each when neither is known), so the autoscaler sees a 1,000-pod gang in about one pod per node it must
add. The autoscaler provisions for the refused ones; as they bind, the room they hold counts as the
gang's own (cycle.py) and once the gang fits there it is released onto that room, its placeholders
deleted in the same turn. While it waits, a gang's placeholders are only added to (the pods free room no
longer holds), never traded: one bound holds room the gang counts on.

A placeholder is known by who made it, not by its label: the label and an owner reference to the Gang
it names (observe/cluster.py placeholder_owner), which only the controller's account may put on a pod
(ValidatingAdmissionPolicy gangkeeper-placeholders-made-by-the-controller-only); one whose Gang is not
the gang's Gang now (another uid: an earlier Gang of that name) is deleted, never counted. It is
deleted as any pod is (its own grace period, no force), by uid. The cluster holds at most
`maxPlaceholderPods` of them, and one namespace's gangs at most `maxPlaceholderPodsPerNamespace` (half of
it by default, so no team takes all of it): a gang whose placeholders would pass either gets none, and
says so. Both count what this controller created in the pass and since, not only what the watch shows.
A gang that has held placeholders for HOLD_SECONDS while another namespace's gang got none for the caps
gives them back, and makes none for YIELD_SECONDS: the first team to fill the caps does not keep them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Protocol

from webhook.controller import metrics
from webhook.controller.act.placeholder_pods import (
    NODEPOOL_LABEL,
    FreeRoom,
    asked_of_pools,
    on_free,
    on_free_room_counts,
    parse_name,
    placeholder_for,
    placeholder_name,
    progress,
    refused_whole,
    shape_tag,
    stands_for,
    waiting_members,
)
from webhook.controller.decide.autoscaling import (
    NodePoolRoom,
    addable,
    batches,
    beyond_limits,
    never_held,
    node_room,
    pods_per_placeholder,
)
from webhook.controller.decide.pods import PodView
from webhook.controller.decide.shapes import show
from webhook.controller.decide.situation import Decision
from webhook.controller.observe.autoscaler import DEFAULT_MAX_PLACEHOLDER_PODS, PAUSE_IMAGE
from webhook.controller.observe.cluster import ClusterIndex
from webhook.controller.observe.gangview import GangView
from webhook.controller.observe.store import GangStore
from webhook.gangs.model import Obj
from webhook.kube import PODS, Api, ApiError

CREATED_UNSEEN_SECONDS = 60.0  # a placeholder created and not seen by the watch is counted this long
# a gang that has held placeholders this long while another namespace's gang gets none for the caps
# gives them back, and makes none for YIELD_SECONDS: the first team to fill the caps does not keep them
HOLD_SECONDS = 600.0
YIELD_SECONDS = 300.0


class WholeRequests(Protocol):
    """Another way to ask an autoscaler for a gang's room (act/provisioning.py ProvisioningRequests)."""

    def served(self) -> bool: ...

    def sync(self, gang: GangView, waiting: Sequence[tuple[PodView, Obj]], free_room: FreeRoom) -> str | None: ...

    def sweep(self, live: Mapping[str, GangView]) -> None: ...


class Placeholders:
    def __init__(
        self,
        api: Api,
        index: ClusterIndex,
        gang_object: Callable[[str, str], Obj | None],
        autoscaler: Callable[[], bool],
        may_write: Callable[[], bool] = lambda: True,
        image: str = PAUSE_IMAGE,
        pools: Callable[[], Sequence[NodePoolRoom]] = lambda: (),
        most: int = DEFAULT_MAX_PLACEHOLDER_PODS,
        fresh_pools: Callable[[], Sequence[NodePoolRoom]] | None = None,
        requests: WholeRequests | None = None,
        most_per_namespace: int | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        store: GangStore | None = None,
    ) -> None:
        self.api, self.index, self.gang_object = api, index, gang_object
        # since when each gang holds placeholders, until when one that gave them back makes none: its record
        self.store = store if store is not None else GangStore()
        self.autoscaler, self.may_write, self.image, self.pools = autoscaler, may_write, image, pools
        self.most = most  # placeholder pods in the cluster at once (maxPlaceholderPods)
        # of them, those of one namespace's gangs (maxPlaceholderPodsPerNamespace): no team takes it all
        self.most_per_namespace = most_per_namespace if most_per_namespace is not None else max(1, most // 2)
        self.monotonic = monotonic
        self.fresh_pools = fresh_pools or pools  # read anew before a gang's first placeholders
        self.requests = requests  # ProvisioningRequests in place of placeholder pods, where served
        self._allocatable_at: tuple[int, dict[str, int]] | None = None
        self._made_at: tuple[int, dict[str, list[dict[str, int]]]] | None = None
        # this pass: what the NodePools' limits still let the autoscaler add, less what the gangs ahead in
        # the queue asked of it (None: not read yet this pass), and whether a gang ahead waits on it
        self._left: dict[str, int] | None = None
        self._asked = False
        self._blocked = False

    def begin_pass(self) -> None:
        """A new pass: the gangs come in queue order (cycle.queue_key), each asking the limits' room in turn."""
        self._left, self._asked, self._blocked = None, False, False
        self.store.forget_placeholder_refusals()
        # placeholders created and not yet seen (each gang's record): counted so the caps hold within a pass
        # and across passes the watch has not caught up with, until seen or CREATED_UNSEEN_SECONDS old
        seen = {key for held in self.index.placeholders.values() for key in held}
        self.store.placeholders_seen(seen, self.monotonic() - CREATED_UNSEEN_SECONDS)

    def _gives_back(self, gang: GangView, wants: bool) -> str | None:
        """Why the gang holds no placeholders now though it wants some: it held them HOLD_SECONDS while
        another namespace's gangs got none for the caps (it makes none for YIELD_SECONDS after)."""
        now, record = self.monotonic(), self.store.record(gang.key)
        until = record.yielding_until if record.yielding_until is not None and record.yielding_until > now else None
        others_wait = self.store.refused_placeholders_last_pass(besides=gang.namespace)
        if until is not None and others_wait:
            return f"gave its placeholders back for other teams' gangs; none for {until - now:.0f}s more"
        since = self._holding_since(gang.key)
        if wants and since is not None and others_wait and now - since >= HOLD_SECONDS:
            record.yielding_until, record.holding_since = now + YIELD_SECONDS, None
            return f"held for {now - since:.0f}s while other teams' gangs got none for the caps: given back"
        return None

    def _holding_since(self, gang_key: str) -> float | None:
        """Since when the gang holds placeholders the index has seen (None: it holds none)."""
        record = self.store.get(gang_key)
        return record.holding_since if record is not None and gang_key in self.index.placeholders else None

    def _held_besides(self, gang_key: str) -> tuple[int, int]:
        """The placeholders of other gangs: (in the cluster, of the gang's namespace), those the index
        holds and those created since that it has not seen yet."""
        namespace = gang_key.partition("/")[0] + "/"
        cluster = in_namespace = 0
        for key, held in self.index.placeholders.items():
            if key != gang_key:
                cluster += len(held)
                in_namespace += len(held) if key.startswith(namespace) else 0
        for gang, unseen in self.store.unseen_placeholders():
            if gang != gang_key:
                count = sum(1 for key in unseen if key not in self.index.placeholder_owners)
                cluster += count
                in_namespace += count if gang.startswith(namespace) else 0
        return cluster, in_namespace

    def _ahead(self, asks: Mapping[str, int], pools: Sequence[NodePoolRoom]) -> str | None:
        """Whether the gangs ahead in the queue come first for the room the NodePools' limits leave: the
        room a limit allows goes whole to one gang at a time, in the queue's order, not a part to each
        (two gangs each holding part of it would wait on each other for ever). The first gang the room
        left does not hold keeps its placeholders (its nodes come as the ones behind it let go); every gang
        behind it has none. Why this gang has none, or None."""
        if self._left is None:
            self._left = addable(pools)
        short = [name for name, amount in asks.items() if name in self._left and amount > self._left[name]]
        if self._blocked:
            return "a gang ahead in the queue waits for the room the NodePools' limits leave; it comes first"
        if not short:
            for name, amount in asks.items():
                if name in self._left:
                    self._left[name] -= amount
            self._asked = self._asked or any(asks.values())
            return None
        self._blocked = True
        if not self._asked:
            return None  # the head of the queue: it keeps its own, and those behind let go of theirs
        return (
            f"the gangs ahead in the queue take what the NodePools' limits leave "
            f"({', '.join(show(name, max(0, self._left[name])) for name in sorted(short))} more); it comes first"
        )

    def sync(self, gang: GangView, decision: Decision, free_room: FreeRoom = lambda waiting: {}) -> Decision:
        """Make the gate gang's placeholders what its decision calls for; the decision says how far
        along, or why no NodePool could ever hold the gang (then it has none: nothing would come of them)."""
        waiting = waiting_members(gang, decision, self.autoscaler())
        if self.requests is not None and self.requests.served():
            self._sync(gang, [], free_room)  # placeholder pods made before the API was served go
            note = self.requests.sync(gang, waiting, free_room)
        else:
            note = self._sync(gang, waiting, free_room)
        return replace(decision, message=f"{decision.message}; {note}") if note else decision

    def hand_over(self, gang: GangView, scheduler: str, free_room: FreeRoom, with_own: FreeRoom) -> str | None:
        """Placeholders for a gang another gang scheduler places (Volcano) and refused for want of room
        (`refused_whole`): that scheduler marks the pods it could place `Schedulable` while the gang
        waits (volcano-sh/volcano#3976), so an autoscaler sees only the rest, counts the free room as
        theirs and adds nothing. The pods the free room cannot hold get placeholders as a gate gang's
        do, but only on the NodePools' nodes: the free room elsewhere is what the autoscaler already
        counts for the pods it sees, and a placeholder there would make it add their room twice. Once
        the free room and the gang's bound placeholders (`with_own`) hold all of it, the placeholders go,
        and the scheduler's next session places the whole gang there. What the Gang says, or None."""
        pending = refused_whole(gang) if self.autoscaler() else []
        if pending and sum(on_free_room_counts(pending, with_own).values()) >= len(pending):
            self._sync(gang, [], free_room)
            return f"room for the whole gang is there; the {scheduler} scheduler places it"
        return self._sync(gang, pending, free_room, on_pools=[pool.name for pool in self.pools()])

    def _sync(
        self,
        gang: GangView,
        waiting: Sequence[tuple[PodView, Obj]],
        free_room: FreeRoom,
        on_pools: Sequence[str] = (),
    ) -> str | None:
        """Make the gang's placeholders what its `waiting` pods call for; what the Gang says of them.

        A gang's pods the placement puts on free room get none; the others, alike (one shape), share
        placeholders of as many pods as one node of the NodePools takes (decide/autoscaling.py), so
        the autoscaler sees the gang in about one pod per node it must add. While the gang waits, its
        placeholders are only added to, never traded (one bound holds room the gang counts on)."""
        have = self.index.placeholders.get(gang.key, {})
        if not waiting and not have:
            return None
        owner = self.gang_object(gang.namespace, gang.name)
        uid = str((owner or {}).get("metadata", {}).get("uid") or "")
        own = self.index.placeholders_of(gang.key, uid)
        stale = have.keys() - own.keys() if uid else set()  # an earlier Gang's
        free = on_free(waiting, free_room)
        needing = [(view, raw) for view, raw in waiting if view.name not in free]
        # a gang's first placeholders bring nodes: judged on the NodePools as they are now
        pools = self.fresh_pools() if needing and not own else self.pools()
        keep, make, refusal = self._wanted(gang, waiting, needing, own, uid, pools)
        if self.may_write():
            for key in (have.keys() - keep) | stale:
                self._delete(key)
            if owner is not None and uid:
                for name, pods, (view, raw) in make:
                    self._create(placeholder_for(view, raw, owner, self.image, name, pods, on_pools), gang.key)
        metrics.PLACEHOLDERS_NOW.set(sum(len(held) for held in self.index.placeholders.values()))
        record = self.store.record(gang.key)
        record.holding_since = (self._holding_since(gang.key) or self.monotonic()) if keep or make else None
        if refusal:
            return f"no placeholders: {refusal}"
        if not waiting:
            return None
        by_tag = {shape_tag(view.shape): view.shape for view, _ in waiting}
        provisioned = len(free)
        for key, (node, units) in own.items():
            parsed = parse_name(key.partition("/")[2], uid)
            if node and parsed is not None and parsed[0] in by_tag:
                provisioned += stands_for(by_tag[parsed[0]], units)
        return progress(min(provisioned, len(waiting)), len(waiting), own, pools)

    def _wanted(
        self,
        gang: GangView,
        waiting: Sequence[tuple[PodView, Obj]],
        needing: Sequence[tuple[PodView, Obj]],
        own: Mapping[str, tuple[str, tuple[tuple[str, int], ...]]],
        uid: str,
        pools: Sequence[NodePoolRoom],
    ) -> tuple[set[str], list[tuple[str, int, tuple[PodView, Obj]]], str | None]:
        """The placeholders to keep and to make, or none and why: all of the gang's or none, since a part
        would hold room that starts nothing."""
        shapes, claiming = {v.name: v.shape for v, _ in waiting}, {v.name for v, _ in waiting if v.claims_devices}
        hopeless = never_held(shapes, pools, claiming) if needing else None
        if needing and not hopeless:  # nodes the gang could never fill whole would only hold others' room
            hopeless = beyond_limits(list(shapes.values()), self._allocatable(), pools)
        keep, make = self._plan(needing, own, uid, pools) if waiting and not hopeless else (set(), [])
        behind = self._ahead(asked_of_pools(own, keep, make, self._node_room(pools)), pools) if keep or make else None
        if refusal := hopeless or behind or self._gives_back(gang, bool(keep or make)):
            return set(), [], refusal
        elsewhere, in_namespace = self._held_besides(gang.key)
        wanted, more = len(keep) + len(make), len(make)
        if make and elsewhere + wanted > self.most:
            # only the cluster-wide cap counts toward another team's give-back: a namespace past its own
            # share is refused for what it holds itself, and others giving theirs back would help no one
            self.store.refuse_placeholders(gang.namespace)
            refusal = (
                f"the cluster holds {elsewhere} for other gangs, and this gang's {more} more would pass "
                f"maxPlaceholderPods ({self.most}); waiting for them to go"
            )
        elif make and in_namespace + wanted > self.most_per_namespace:
            refusal = (
                f"namespace {gang.namespace} holds {in_namespace} for its other gangs, and this gang's {more} "
                f"more would pass maxPlaceholderPodsPerNamespace ({self.most_per_namespace}); waiting for them to go"
            )
        if refusal:
            return set(), [], refusal
        return keep, make, None

    def _plan(
        self,
        needing: Sequence[tuple[PodView, Obj]],
        own: Mapping[str, tuple[str, tuple[tuple[str, int], ...]]],
        uid: str,
        pools: Sequence[NodePoolRoom],
    ) -> tuple[set[str], list[tuple[str, int, tuple[PodView, Obj]]]]:
        """The gang's placeholders to keep (those of a shape still waiting), and those to make: (name,
        how many pods it stands for, a member of that shape) for the pods no placeholder stands for yet."""
        alike: dict[str, list[tuple[PodView, Obj]]] = {}
        for member in needing:
            alike.setdefault(shape_tag(member[0].shape), []).append(member)
        keep: set[str] = set()
        taken: dict[str, set[int]] = {}
        covered: dict[str, int] = {}
        for key, (_, units) in own.items():
            parsed = parse_name(key.partition("/")[2], uid)
            if parsed is None or parsed[0] not in alike:
                continue  # a shape no longer waiting (or a name of an older controller's): let go
            tag, index = parsed
            keep.add(key)
            taken.setdefault(tag, set()).add(index)
            covered[tag] = covered.get(tag, 0) + stands_for(alike[tag][0][0].shape, units)
        made = self._made_by_pools()
        make: list[tuple[str, int, tuple[PodView, Obj]]] = []
        for tag, members in sorted(alike.items()):
            sizes = batches(len(members) - covered.get(tag, 0), pods_per_placeholder(members[0][0].shape, pools, made))
            used = taken.get(tag, set())
            free_indexes = [i for i in range(len(sizes) + len(used)) if i not in used][: len(sizes)]
            make.extend(
                (placeholder_name(uid, tag, i), size, members[0]) for i, size in zip(free_indexes, sizes, strict=True)
            )
        return keep, make

    def _node_room(self, pools: Sequence[NodePoolRoom]) -> dict[str, int]:
        """The least room one node of any of the NodePools has, for the resources all of them say."""
        made = self._made_by_pools()
        rooms = [node_room(pool, made.get(pool.name, ())) for pool in pools]
        if not rooms:
            return {}
        names = set.intersection(*(set(room) for room in rooms))
        return {name: min(room[name] for room in rooms) for name in names}

    def _made_by_pools(self) -> dict[str, list[dict[str, int]]]:
        """A NodePool's name -> the allocatable of the nodes it made (Karpenter labels each
        karpenter.sh/nodepool), once per change of the nodes."""
        if self._made_at is None or self._made_at[0] != self.index.nodes_epoch:
            made: dict[str, list[dict[str, int]]] = {}
            for node in self.index.nodes.values():
                pool = node.labels.get(NODEPOOL_LABEL)
                if pool:
                    made.setdefault(pool, []).append(dict(node.allocatable))
            self._made_at = (self.index.nodes_epoch, made)
        return self._made_at[1]

    def _allocatable(self) -> dict[str, int]:
        """What every node that takes pods could hold, summed (once per change of the nodes)."""
        if self._allocatable_at is None or self._allocatable_at[0] != self.index.nodes_epoch:
            total: dict[str, int] = {}
            for node in (n for n in self.index.nodes.values() if not n.unschedulable):
                for name, amount in node.allocatable.items():
                    total[name] = total.get(name, 0) + amount
            self._allocatable_at = (self.index.nodes_epoch, total)
        return self._allocatable_at[1]

    def sweep(self, live: Mapping[str, GangView]) -> None:
        """Placeholders whose gang is gone (its pods all deleted, the namespace opted out)."""
        if self.requests is not None:
            self.requests.sweep(live)
        if not self.may_write():
            return
        for gang_key in list(self.index.placeholders.keys() - live.keys()):
            for key in list(self.index.placeholders.get(gang_key, {})):
                self._delete(key)

    def _create(self, pod: Obj, gang_key: str) -> None:
        meta = pod["metadata"]
        try:
            self.api.create(PODS.path(meta["namespace"]), pod)
            self.store.placeholder_made(gang_key, f"{meta['namespace']}/{meta['name']}", self.monotonic())
            metrics.PLACEHOLDERS.labels("created").inc()
        except ApiError as error:
            if error.status != 409:  # 409: made by an earlier pass, not yet seen by the watch
                metrics.API_ERRORS.labels("create", str(error.status)).inc()

    def _delete(self, key: str) -> None:
        """Deleted as any pod is (its own grace period), and only the very pod seen (its uid)."""
        namespace, _, name = key.partition("/")
        pod_uid = self.index.placeholder_owners.get(key, ("", ""))[1]
        body = {"preconditions": {"uid": pod_uid}} if pod_uid else None
        try:
            self.api.request("DELETE", PODS.path(namespace, name), body=body, answer=False)
            metrics.PLACEHOLDERS.labels("deleted").inc()
        except ApiError as error:
            if error.status not in (404, 409):  # 409: the uid differs, another pod of that name now
                metrics.API_ERRORS.labels("delete", str(error.status)).inc()
