"""gangkeeper's Kueue AdmissionCheck, answered (controller/decide/kueue_check.py decides): the checks
whose controllerName is gangkeeper's marked Active (Kueue holds a ClusterQueue inactive until each of its
checks is), and each Workload that reserved quota and waits on one told Ready once its whole gang fits
the nodes, or why it still waits. Written by server-side apply of that one check's entry (a list keyed
by name, kueue apis/kueue/v1beta2 workload_types.go), so Kueue's own fields stay Kueue's.

On a MultiKueue manager, where no pod of a dispatched workload is ever made, the Workloads MultiKueue's
check dispatches get a Gang saying which worker cluster runs them (decide `dispatched`)."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
from collections.abc import Callable, Mapping
from typing import Any

from webhook import contract, naming
from webhook.controller.act.gangobject import GangObjects
from webhook.controller.decide.kueue_check import (
    MULTIKUEUE_CONTROLLER,
    Dispatched,
    demands,
    dispatched,
    gang_fits,
    holds_room,
    overdue,
    told_ready,
    waiting_check,
)
from webhook.controller.decide.pods import DEFAULT_TIMEOUT_SECONDS
from webhook.controller.observe.books import desired_object
from webhook.controller.observe.reuse import Snapshot
from webhook.gangs import kinds
from webhook.informer import Informer
from webhook.kube import Api, ApiError, Resource

log = logging.getLogger("gangkeeper.controller")
WORKLOADS = Resource("kueue.x-k8s.io/v1beta2", "workloads")
ADMISSION_CHECKS = Resource("kueue.x-k8s.io/v1beta2", "admissionchecks", namespaced=False)
KUEUE_RESOURCES = (WORKLOADS, ADMISSION_CHECKS)  # watched where Kueue is served (run/process.py)
APPLY = "application/apply-patch+yaml"
FIELD_MANAGER = "gangkeeper-controller"
# watched, a Workload's change or a pod's wakes the pass that answers it, and this often all the same
# while one waits (room that frees with no event: a safety net)
WATCHED_RECHECK_SECONDS = 10.0
# with no watches at all (`gangkeeper explain`, tests), how often the Workloads are listed while checks
# exist; the controller itself only reads what it watches (Kueue installed after it started is watched
# from its next discovery, within REDISCOVER_SECONDS): no read of its own in the pass, none to hang on
LISTED_RECHECK_SECONDS = 2.0
CHECKS_SECONDS = 10.0  # unwatched, the AdmissionChecks are listed again this often
DEADLINE_SECONDS = 5.0  # each read or write, retries included: well inside a pass
DISPATCHED_BACKEND = "multikueue"  # a manager's Gang: the gang's pods run in a worker cluster


def _timestamp(now: dt.datetime) -> str:
    return now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class KueueChecks:
    def __init__(
        self,
        api: Api,
        may_write: Callable[[], bool],
        informers: Mapping[tuple[str, str], Informer] | None = None,
        gang_objects: GangObjects | None = None,
        opted_out: Callable[[str], bool] = lambda namespace: False,
        timeout_of: Callable[[str], float | None] = lambda gang: None,
    ) -> None:
        self.api, self.may_write, self.informers = api, may_write, informers or {}
        self.gang_objects, self.opted_out, self.timeout_of = gang_objects, opted_out, timeout_of
        # when listed; the names of gangkeeper's checks; of MultiKueue's
        self._checks: tuple[float, frozenset[str], frozenset[str]] = (float("-inf"), frozenset(), frozenset())
        self._next = float("-inf")

    def _watched(self, resource: Resource) -> Informer | None:
        informer = self.informers.get((resource.group_version, resource.plural))
        return informer if informer is not None and informer.synced.is_set() else None

    def _list(self, resource: Resource) -> list[dict[str, Any]] | None:
        """From the watch cache when watched (None until it has synced), else one listing (ApiError when it
        cannot be read)."""
        informer = self.informers.get((resource.group_version, resource.plural))
        if informer is not None:
            return informer.items() if informer.synced.is_set() else None
        return list(self.api.request("GET", resource.path(), deadline=DEADLINE_SECONDS).get("items") or [])

    def sync(self, snapshot: Snapshot, now: dt.datetime) -> float | None:
        """Answer the waiting Workloads (every pass when watched, else at most every LISTED_RECHECK_SECONDS);
        when to look again although nothing changes, None when nothing waits."""
        stamp = now.timestamp()
        checks, multikueue = self._checks_of(stamp, now)
        if not checks and not multikueue:
            return None
        watched = self._watched(WORKLOADS) is not None
        if not watched and stamp < self._next:
            return self._next
        self._next = stamp + (WATCHED_RECHECK_SECONDS if watched else LISTED_RECHECK_SECONDS)
        try:
            listed = self._list(WORKLOADS)
        except ApiError as error:
            log.warning("Kueue Workloads not read: %s", error)
            return self._next
        if listed is None:  # watched, not synced yet
            return self._next
        if multikueue:
            self._report_dispatched(listed, multikueue)
        if not checks:
            return None if watched else self._next
        devices = snapshot.index.devices
        for held in listed:  # the room of those told Ready a moment ago, whose pods may not be there yet
            with contextlib.suppress(ValueError, TypeError, KeyError, AttributeError, ArithmeticError):
                if holds_room(held, checks, stamp) and not isinstance(wanted := demands(held, devices), str):
                    verdict = gang_fits(wanted, snapshot.nodes, snapshot.free, snapshot.ports)
                    snapshot.free.update({node: dict(room) for node, room in verdict.taken.items()})
        self._hand_back(listed, checks, snapshot, now)
        waiting = [(w, name) for w in listed if (name := waiting_check(w, checks)) is not None]
        waiting.sort(key=lambda item: str((item[0].get("metadata") or {}).get("creationTimestamp", "")))
        for workload, check in waiting:
            if not self.may_write():
                break
            try:
                self._answer(workload, check, snapshot, now)
            except (ValueError, TypeError, KeyError, AttributeError, ArithmeticError):
                # a tenant's Workload the placement cannot read: it waits, the others are answered
                meta = workload.get("metadata") or {}
                log.exception("Kueue Workload %s/%s not answered", meta.get("namespace"), meta.get("name"))
        return self._next if waiting or not watched else None

    def _checks_of(self, stamp: float, now: dt.datetime) -> tuple[frozenset[str], frozenset[str]]:
        """The names of the AdmissionChecks gangkeeper answers, each marked Active once, and of MultiKueue's."""
        listed_at, names, multikueue = self._checks
        none: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())
        key = (ADMISSION_CHECKS.group_version, ADMISSION_CHECKS.plural)
        if self.informers and key not in self.informers:
            return none  # the controller watches what is served: Kueue is not (yet: discovery repeats)
        if stamp - listed_at < CHECKS_SECONDS and self._watched(ADMISSION_CHECKS) is None:
            return names, multikueue
        try:
            items = self._list(ADMISSION_CHECKS)
        except ApiError as error:  # 404: Kueue not installed; anything else: asked again later
            if error.status != 404:
                log.warning("Kueue AdmissionChecks not read: %s", error)
            self._checks = (stamp, *none)
            return none
        if items is None:  # watched, not synced yet
            return names, multikueue
        ours = [c for c in items if (c.get("spec") or {}).get("controllerName") == contract.KUEUE_CHECK_CONTROLLER]
        for check in ours:
            if not _active(check) and self.may_write():
                self._apply(
                    ADMISSION_CHECKS.path(name=check["metadata"]["name"], sub="status"),
                    {
                        "apiVersion": WORKLOADS.group_version,
                        "kind": "AdmissionCheck",
                        "metadata": {"name": check["metadata"]["name"]},
                        "status": {
                            "conditions": [
                                {
                                    "type": "Active",
                                    "status": "True",
                                    "reason": "Active",
                                    "message": "gangkeeper's controller answers this check",
                                    "lastTransitionTime": _timestamp(now),
                                }
                            ]
                        },
                    },
                )
        theirs = [c for c in items if (c.get("spec") or {}).get("controllerName") == MULTIKUEUE_CONTROLLER]
        self._checks = (
            stamp,
            frozenset(str(c["metadata"]["name"]) for c in ours),
            frozenset(str(c["metadata"]["name"]) for c in theirs),
        )
        return self._checks[1], self._checks[2]

    def _report_dispatched(self, listed: list[dict[str, Any]], multikueue: frozenset[str]) -> None:
        """Each dispatched workload's Gang, written where it differs (GangObjects: a quiet one costs no
        write). Its owner is the Workload's controller as Kueue set it, by uid: garbage collection takes
        the Gang with the workload, and one naming no live object goes at once."""
        if self.gang_objects is None:
            return
        for workload in listed:
            if not self.may_write():
                return
            namespace = str((workload.get("metadata") or {}).get("namespace"))
            if self.opted_out(namespace):  # gangkeeper leaves that namespace's workloads alone
                continue
            with contextlib.suppress(ValueError, TypeError, KeyError, AttributeError):
                found = dispatched(workload, multikueue)
                if found is not None and kinds.by_name(found.owner["kind"]) is not None:
                    self._write_dispatched(namespace, found)

    def _write_dispatched(self, namespace: str, found: Dispatched) -> None:
        assert self.gang_objects is not None
        name = naming.gang_name(kinds.tag_of(found.owner["kind"]), found.owner["name"])
        owner = {"apiVersion": found.owner["apiVersion"], "kind": found.owner["kind"], "metadata": found.owner}
        wanted = desired_object(namespace, name, DISPATCHED_BACKEND, found.pods, owner)
        status: dict[str, Any] = {"state": found.state, "message": found.message, "cluster": found.cluster}
        self.gang_objects.write(wanted, status, later=True)

    def _hand_back(
        self, listed: list[dict[str, Any]], checks: frozenset[str], snapshot: Snapshot, now: dt.datetime
    ) -> None:
        """Set Retry on the Workloads admitted on this check whose gang's pods are there and none has started
        within its timeout (gangkeeper.io/timeout-seconds, counted from Ready): Kueue takes them back and
        admits them again where the whole gang fits (decide `overdue`)."""
        stamp = now.timestamp()
        told = [w for w in listed if told_ready(w, checks) is not None]
        if not told:
            return
        # (namespace, workload uid) -> (a pod of its gang holds a node, the gang): joined by namespace and
        # uid, so no pod of another namespace speaks for a Workload (a uid is what a tenant can copy), a
        # running one decided at its first bound pod (the admitted Workloads stay here while they run when
        # Kueue keeps no PodsReady)
        namespaces = {str((w.get("metadata") or {}).get("namespace")) for w in told}
        gangs: dict[tuple[str, str], tuple[bool, str]] = {}
        for gang in snapshot.gangs.values():
            if gang.namespace not in namespaces:
                continue
            uids = gang.workload_uids if gang.workload_uids is not None else {v.workload_uid for v in gang.pods}
            for uid in uids - {""}:
                key = (gang.namespace, uid)
                started = gangs.get(key, (False, ""))[0] or any(
                    view.holds_node is not None for view in gang.pods if view.workload_uid == uid
                )
                gangs[key] = (started, gang.key)
        for workload in told:
            owner = next(
                (
                    str(r.get("uid"))
                    for r in (workload.get("metadata") or {}).get("ownerReferences") or []
                    if isinstance(r, dict) and r.get("controller") is True
                ),
                "",
            )
            joined = (str((workload.get("metadata") or {}).get("namespace")), owner)
            if joined not in gangs:
                # no pod of it seen waiting (its pods not made yet, or not gangkeeper's to see: Kueue's
                # PodsReady is only kept with waitForPodsReady): nothing tells that it has not started
                continue
            started, gang_key = gangs[joined]
            timeout = self.timeout_of(gang_key) or DEFAULT_TIMEOUT_SECONDS
            check = overdue(workload, checks, started, timeout, stamp)
            if check is None or not self.may_write():
                continue
            message = (
                f"no pod of its gang started in the {timeout:.0f} s since this check said Ready (the room went to "
                "others first): handed back to Kueue, to be admitted again where the whole gang fits"
            )
            self._write_state(workload, check, "Retry", message, now, changed=True)

    def _answer(self, workload: dict[str, Any], check: str, snapshot: Snapshot, now: dt.datetime) -> None:
        wanted = demands(workload, snapshot.index.devices)
        if isinstance(wanted, str):
            ready, message = False, f"gangkeeper cannot place this Workload's pods: {wanted}"
        else:
            verdict = gang_fits(wanted, snapshot.nodes, snapshot.free, snapshot.ports)
            ready, message = verdict.fits, verdict.message
            if verdict.fits:  # the next Workload of this pass is placed in what this one leaves
                snapshot.free.update({node: dict(room) for node, room in verdict.taken.items()})
        state = "Ready" if ready else "Pending"
        current: dict[str, Any] = next(
            (s for s in (workload.get("status") or {}).get("admissionChecks") or [] if s.get("name") == check), {}
        )
        if current.get("state") == state and current.get("message") == message:
            return
        self._write_state(workload, check, state, message, now, changed=current.get("state") != state, since=current)

    def _write_state(
        self,
        workload: dict[str, Any],
        check: str,
        state: str,
        message: str,
        now: dt.datetime,
        changed: bool,
        since: dict[str, Any] | None = None,
    ) -> None:
        meta = workload.get("metadata") or {}
        current = since or {}
        entry = {
            "name": check,
            "state": state,
            "message": message[:1024],  # Kueue's maxLength for a check's message
            "lastTransitionTime": _timestamp(now) if changed else current.get("lastTransitionTime") or _timestamp(now),
        }
        self._apply(
            WORKLOADS.path(meta.get("namespace"), meta.get("name"), "status"),
            {
                "apiVersion": WORKLOADS.group_version,
                "kind": "Workload",
                "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
                "status": {"admissionChecks": [entry]},
            },
        )
        if changed:
            log.info(
                "Kueue check %s of Workload %s/%s: %s (%s)",
                check,
                meta.get("namespace"),
                meta.get("name"),
                state,
                message,
            )

    def _apply(self, path: str, body: dict[str, Any]) -> None:
        try:
            self.api.request(
                "PATCH",
                path,
                {"fieldManager": FIELD_MANAGER, "force": "true"},
                body,
                content_type=APPLY,
                answer=False,
                deadline=DEADLINE_SECONDS,
            )
        except ApiError as error:  # the Workload is looked at again on the next check
            log.warning("Kueue check not written to %s: %s", path, error)


def _active(check: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Active" and c.get("status") == "True"
        for c in (check.get("status") or {}).get("conditions") or []
    )
