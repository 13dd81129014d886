"""Placeholder pods: how a gate gang that waits on capacity makes an autoscaler add nodes for all of it.

Karpenter and Cluster Autoscaler add nodes only for pods that kube-scheduler refused (PodScheduled False,
reason Unschedulable: Karpenter pkg/utils/pod/scheduling.go FailedToSchedule, Cluster Autoscaler
utils/kubernetes/listers.go isUnschedulable); a pod behind the gate is SchedulingGated and invisible to
both. So while a gang waits for capacity on an autoscaled cluster, each of its gated members has a
placeholder: a pause pod with the member's requests, node selector, node affinity and tolerations, that
kube-scheduler schedules or refuses like the member would. The autoscaler provisions for the refused
ones; as they bind, the room they hold counts as the gang's own (cycle.py) and once the gang fits there
it is released onto that room, its placeholders deleted in the same turn.

A placeholder is known by who made it, not by its label: the label and an owner reference to the Gang
it names (observe/cluster.py placeholder_owner), which only the controller's account may put on a pod
(ValidatingAdmissionPolicy gangkeeper-placeholders-made-by-the-controller-only); one whose Gang is not
the gang's Gang now (another uid: an earlier Gang of that name) is deleted, never counted. It is
deleted as any pod is (its own grace period, no force), by uid. The cluster holds at most
`maxPlaceholderPods` of them: a gang whose placeholders would pass that gets none, and says so.

A placeholder is never a member (it carries no gang label, and gangkeeper.io/skip keeps every webhook
off it); it never preempts and is the first thing any scheduler preempts (PriorityClass
gangkeeper-placeholder, value -10: the lowest Cluster Autoscaler still scales up for); it is owned by the
gang's Gang object, so the garbage collector removes it when the gang or gangkeeper goes; the controller
deletes it as soon as its gang is released, deleted, times out, gives up, waits for anything other than
capacity, or its namespace opts out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from webhook import contract
from webhook.controller import metrics
from webhook.controller.act.books import API_VERSION as GANG_API_VERSION
from webhook.controller.act.books import KIND as GANG_KIND
from webhook.controller.decide.autoscaling import NodePoolRoom, beyond_limits, never_held
from webhook.controller.decide.pods import PodView
from webhook.controller.decide.shapes import PODS as POD_COUNT
from webhook.controller.decide.shapes import show
from webhook.controller.decide.situation import Decision, GangState
from webhook.controller.observe.autoscaler import DEFAULT_MAX_PLACEHOLDER_PODS, PAUSE_IMAGE
from webhook.controller.observe.cluster import ClusterIndex, GangView
from webhook.gangs.model import Obj
from webhook.kube import PODS, Api, ApiError

# the states in which a gang waits on capacity alone (not on the queue, its members, a backoff)
WAITS_ON_CAPACITY = (GangState.WAITING_FOR_CAPACITY, GangState.NEVER_FITS)
# a pause container ends at once on SIGTERM; the grace is a bound, not a wait
PLACEHOLDER_GRACE_SECONDS = 5


def placeholder_name(member: PodView) -> str:
    return f"placeholder-{member.uid}" if member.uid else f"placeholder-{member.name}"[:253]


def quantities(requests: tuple[tuple[str, int], ...]) -> dict[str, str]:
    """A shape's units (cpu in millicores, the rest in whole units) as resource quantities."""
    return {name: f"{amount}m" if name == "cpu" else str(amount) for name, amount in requests if name != "pods"}


def placeholder_for(member: PodView, raw: Mapping[str, Any], gang_object: Mapping[str, Any], image: str) -> Obj:
    """The pause pod that stands in for `member` (raw: its pod as the informer keeps it)."""
    spec = raw.get("spec") or {}
    meta = gang_object.get("metadata") or {}
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity")
    requests = quantities(member.shape.requests)
    pod_spec: Obj = {
        "priorityClassName": contract.PLACEHOLDER_PRIORITY_CLASS,
        "terminationGracePeriodSeconds": PLACEHOLDER_GRACE_SECONDS,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65535, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
                "name": "placeholder",
                "image": image,
                "resources": {"requests": requests, "limits": requests},
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
            }
        ],
    }
    for key in ("nodeSelector", "tolerations"):
        if spec.get(key):
            pod_spec[key] = spec[key]
    if node_affinity:
        pod_spec["affinity"] = {"nodeAffinity": node_affinity}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": placeholder_name(member),
            "namespace": member.namespace,
            "labels": {contract.PLACEHOLDER_LABEL: str(meta.get("name", "")), contract.SKIP_LABEL: "true"},
            "ownerReferences": [
                {
                    "apiVersion": GANG_API_VERSION,
                    "kind": GANG_KIND,
                    "name": meta.get("name"),
                    "uid": meta.get("uid"),
                    "blockOwnerDeletion": False,
                }
            ],
        },
        "spec": pod_spec,
    }


def wanted(gang: GangView, decision: Decision, autoscaled: bool) -> dict[str, tuple[PodView, Obj]]:
    """Placeholder name -> the member it stands for, with the member's pod: one per gated member while
    the gang waits on capacity alone on an autoscaled cluster; none otherwise."""
    if not autoscaled or decision.state not in WAITS_ON_CAPACITY:
        return {}
    return {
        placeholder_name(view): (view, raw)
        for view, raw in zip(gang.pods, gang.raw, strict=True)
        if view.gated and not view.terminal
    }


def progress(
    gang_key: str, owner_uid: str, index: ClusterIndex, wanted_count: int, pools: Sequence[NodePoolRoom] = ()
) -> str:
    """What the Gang says while the autoscaler works: how many of its pods have room, and the NodePool
    limits that stop the rest, if every NodePool's does."""
    held = index.placeholders_of(gang_key, owner_uid).values()
    bound = sum(1 for node, _ in held if node)
    said = f"waiting for the autoscaler: capacity for {bound} of {wanted_count} pods provisioned"
    need: dict[str, int] = {}
    for node, units in held:
        for name, amount in units if not node else ():
            if name != POD_COUNT:
                need[name] = need.get(name, 0) + amount
    stopped = limits_in_the_way(pools, need)
    return f"{said}; {stopped}" if stopped else said


def limits_in_the_way(pools: Sequence[NodePoolRoom], need: Mapping[str, int]) -> str | None:
    """Why no NodePool adds what the gang's pods without room need: each one's limit, named; None when
    one of them may add it all (or none is known)."""
    shorts = [(pool, pool.short_of(need)) for pool in pools]
    if not need or not shorts or any(name is None for _, name in shorts):
        return None
    asked = ", ".join(show(name, amount) for name, amount in sorted(need.items()))
    each = "; ".join(
        f"NodePool {pool.name} may add {show(name, max(0, pool.limits[name] - pool.used.get(name, 0)))} more "
        f"(spec.limits {show(name, pool.limits[name])})"
        for pool, name in shorts
        if name is not None
    )
    return f"its pods without room need {asked}, more than any NodePool's limits allow: {each}"


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
    ) -> None:
        self.api, self.index, self.gang_object = api, index, gang_object
        self.autoscaler, self.may_write, self.image, self.pools = autoscaler, may_write, image, pools
        self.most = most  # placeholder pods in the cluster at once (maxPlaceholderPods)
        self.fresh_pools = fresh_pools or pools  # read anew before a gang's first placeholders
        self._allocatable_at: tuple[int, dict[str, int]] | None = None

    def sync(self, gang: GangView, decision: Decision) -> Decision:
        """Make the gang's placeholders what its decision calls for; the decision says how far along,
        or why no NodePool could ever hold the gang (then it has none: nothing would come of them)."""
        want = wanted(gang, decision, self.autoscaler())
        have = self.index.placeholders.get(gang.key, {})
        if not want and not have:
            return decision
        # a gang's first placeholders bring nodes: judged on the NodePools as they are now
        pools = self.fresh_pools() if want and not have else self.pools()
        hopeless = never_held({view.name: view.shape for view, _ in want.values()}, pools) if want else None
        if want and not hopeless:  # nodes the gang could never fill whole would only hold others' room
            hopeless = beyond_limits([view.shape for view, _ in want.values()], self._allocatable(), pools)
        if hopeless:
            want = {}
        owner = self.gang_object(gang.namespace, gang.name)
        uid = str((owner or {}).get("metadata", {}).get("uid") or "")
        owners = self.index.placeholder_owners
        stale = {key for key in have if uid and owners.get(key, ("", ""))[0] != uid}  # an earlier Gang's
        missing = [name for name in want if f"{gang.namespace}/{name}" not in have.keys() - stale]
        elsewhere = sum(len(held) for key, held in self.index.placeholders.items() if key != gang.key)
        capped = bool(missing) and elsewhere + len(want) > self.most
        if capped:  # all of the gang's or none: a part would hold room that starts nothing
            want = {}
        if self.may_write():
            for key in (have.keys() - {f"{gang.namespace}/{name}" for name in want}) | stale:
                self._delete(key)
            if owner is not None and uid:
                for name in missing if want else ():
                    view, raw = want[name]
                    self._create(placeholder_for(view, raw, owner, self.image))
        metrics.PLACEHOLDERS_NOW.set(sum(len(held) for held in self.index.placeholders.values()))
        if hopeless:
            return replace(decision, message=f"{decision.message}; no placeholders: {hopeless}")
        if capped:
            said = (
                f"no placeholders: the cluster holds {elsewhere} for other gangs, and this gang's "
                f"{len(missing)} more would pass maxPlaceholderPods ({self.most}); waiting for them to go"
            )
            return replace(decision, message=f"{decision.message}; {said}")
        if not want:
            return decision
        said = progress(gang.key, uid, self.index, len(want), pools)
        return replace(decision, message=f"{decision.message}; {said}")

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
        if not self.may_write():
            return
        for gang_key in list(self.index.placeholders.keys() - live.keys()):
            for key in list(self.index.placeholders.get(gang_key, {})):
                self._delete(key)

    def _create(self, pod: Obj) -> None:
        try:
            self.api.create(PODS.path(pod["metadata"]["namespace"]), pod)
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
