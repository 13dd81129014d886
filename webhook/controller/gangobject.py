"""The Gang object (gangkeeper.io/v1alpha1): one per gang, owned by its workload, written only by the
controller. Its status is what `kubectl get gangs` shows for every backend, and the controller's own
books for the gang (requeue attempts, backoff, the suspension it made): those are read from here and
nowhere else, so an annotation a tenant writes on a workload never becomes the controller's state.

The pure part builds the object wanted; `GangObjects` writes it only when it differs from what the API
holds (a quiet gang costs no write), and remembers what it wrote so a pass reads its own books back
without an API call.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from webhook import contract
from webhook.controller import metrics
from webhook.controller.state import History, Release, format_time, parse_time
from webhook.informer import Informer
from webhook.kube import Api, ApiError, Resource

log = logging.getLogger("gangkeeper.controller")

GANGS = Resource("gangkeeper.io/v1alpha1", "gangs")
FLUSH_CONCURRENCY = 8  # deferred status writes sent side by side at a pass's end
API_VERSION, KIND = GANGS.group_version, "Gang"
MAX_MESSAGE = 1024
Obj = dict[str, Any]


@dataclass(frozen=True)
class Books:
    """The controller's state for one gang, as its Gang object's status holds it."""

    attempts: int = 0
    not_before: dt.datetime | None = None
    suspended_at: dt.datetime | None = None  # gangkeeper suspended the workload then, and resumes it
    ran_with: int = 0  # members running when it last ran whole (0: not since it was last requeued)
    short_since: dt.datetime | None = None  # it ran whole, and has had fewer running since then
    domain: str | None = None  # the topology domain(s) its release chose (a gang with a topology)
    claim_until: dt.datetime | None = None  # backfilled on its expected-seconds: to be done by then
    claim_broken: bool = False  # it once ran past such a claim: its expected-seconds is not believed

    @property
    def history(self) -> History:
        return History(self.ran_with, self.short_since)


def books_of(gang: Mapping[str, Any] | None) -> Books:
    status = (gang or {}).get("status") or {}
    attempts, ran_with = status.get("attempts"), status.get("ranWith")
    return Books(
        attempts if isinstance(attempts, int) and attempts > 0 else 0,
        parse_time(status.get("notBefore")),
        parse_time(status.get("suspendedAt")),
        ran_with if isinstance(ran_with, int) and ran_with > 0 else 0,
        parse_time(status.get("shortSince")),
        str(status["domain"])[:MAX_DOMAIN] if isinstance(status.get("domain"), str) else None,
        parse_time(status.get("claimUntil")),
        status.get("claimBroken") is True,
    )


MAX_RELEASES = 10_000  # the CRD's maxProperties of status.released
MAX_DOMAIN = 253  # the CRD's maxLength of status.domain


def releases_of(gang: Mapping[str, Any] | None) -> dict[str, Release]:
    """Pod name -> its release record, as the Gang's status holds them (unreadable entries skipped)."""
    found: dict[str, Release] = {}
    released = ((gang or {}).get("status") or {}).get("released")
    if not isinstance(released, Mapping):
        return found
    for name, record in list(released.items())[:MAX_RELEASES]:
        if not isinstance(record, Mapping):
            continue
        at = parse_time(record.get("at"))
        uid, node = record.get("uid"), record.get("node")
        if at is not None and isinstance(uid, str) and isinstance(node, str):
            found[str(name)] = Release(uid, node, at)
    return found


def release_records(released: Mapping[str, Release]) -> Obj:
    return {name: {"uid": r.uid, "node": r.node, "at": format_time(r.at)} for name, r in released.items()}


def books_status(books: Books) -> Obj:
    """The books as status fields (None removes one in a merge patch)."""
    return {
        "attempts": books.attempts or None,
        "notBefore": format_time(books.not_before) if books.not_before else None,
        "suspendedAt": format_time(books.suspended_at) if books.suspended_at else None,
        "ranWith": books.ran_with or None,
        "shortSince": format_time(books.short_since) if books.short_since else None,
        "domain": books.domain[:MAX_DOMAIN] if books.domain else None,
        "claimUntil": format_time(books.claim_until) if books.claim_until else None,
        "claimBroken": True if books.claim_broken else None,
    }


def workload_ref(workload: Mapping[str, Any] | None) -> Obj | None:
    meta = (workload or {}).get("metadata") or {}
    if workload is None or not meta.get("name"):
        return None
    ref = {"apiVersion": workload.get("apiVersion"), "kind": workload.get("kind"), "name": meta["name"]}
    if meta.get("uid"):
        ref["uid"] = meta["uid"]
    return ref


def desired_object(namespace: str, name: str, backend: str, min_member: int, workload: Mapping[str, Any] | None) -> Obj:
    """A new Gang object: owned by the workload, so it goes when the workload goes."""
    meta: Obj = {"name": name, "namespace": namespace, "labels": {contract.GROUP_LABEL: name}}
    ref = workload_ref(workload)
    spec: Obj = {"backend": backend, "minMember": max(1, min_member)}
    if ref is not None:
        spec["workload"] = ref
        if "uid" in ref:
            meta["ownerReferences"] = [{**ref, "controller": True, "blockOwnerDeletion": True}]
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta, "spec": spec}


def condition(kind: str, true: bool, reason: str, message: str, now: dt.datetime, previous: list[Obj]) -> Obj:
    """A condition, keeping its last transition time while its status stays the same."""
    status = "True" if true else "False"
    before = next((c for c in previous if isinstance(c, dict) and c.get("type") == kind), None)
    since = before.get("lastTransitionTime") if before and before.get("status") == status else None
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message[:MAX_MESSAGE],
        "lastTransitionTime": since or format_time(now),
    }


def desired_status(
    state: str,
    message: str,
    counts: tuple[int, int, int],
    min_member: int,
    position: int,
    books: Books,
    previous: Mapping[str, Any],
    now: dt.datetime,
) -> Obj:
    """What the Gang's status should say: the decision, the pods counted, the books, two conditions."""
    present, running, gated = counts
    old_conditions = list(previous.get("conditions") or [])
    released = gated == 0 and present > 0
    return {
        "state": state,
        "message": message[:MAX_MESSAGE],
        "present": present,
        "running": running,
        "gated": gated,
        "queuePosition": position or None,
        **books_status(books),
        "conditions": [
            condition("Released", released, state, message, now, old_conditions),
            condition(
                "Running",
                running >= min_member,
                "Running" if running >= min_member else state,
                f"{running} of {min_member} members running",
                now,
                old_conditions,
            ),
        ],
    }


# what a gang's progress changes on every pass while a big gang binds: written at most every
# COUNTS_SECONDS. A status PATCH costs kube-apiserver the whole object (schema, managed fields): 300 ms
# of its CPU for a Gang holding 1,000 release records against 17 ms for 10 (measured on the real tier),
# and a 1,000-pod release wrote its Gang 59 times, half the API server's CPU of the release.
COUNTED = frozenset({"present", "running", "gated", "message"})
COUNTS_SECONDS = 5.0


def differs_beyond_counts(current: Mapping[str, Any], patch: Mapping[str, Any]) -> bool:
    """Whether a status patch changes more than the counts and the messages: a state, a condition's
    status or reason, the books or the records are written at once."""

    def plain(status: Mapping[str, Any]) -> Obj:
        kept = {k: v for k, v in status.items() if k not in COUNTED and k != "conditions"}
        conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
        kept["conditions"] = [{k: v for k, v in c.items() if k != "message"} for c in conditions]
        return kept

    return plain(_merged(current, patch)) != plain(current)


def differs(current: Mapping[str, Any], patch: Mapping[str, Any]) -> bool:
    """Whether a merge patch would change `current`."""
    return _merged(current, patch) != current


class GangObjects:
    """Reads the Gang objects (a watch cache when there is one) and writes them when they differ.

    What it wrote is remembered until the watch delivers it (or for a minute at most): a pass reads its
    own books back at once, without an API call and without racing the watch."""

    FRESH_SECONDS = 60.0

    def __init__(
        self,
        api: Api,
        informer: Callable[[], Informer | None],
        may_write: Callable[[], bool],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api, self._informer, self.may_write, self.monotonic = api, informer, may_write, monotonic
        self._written: dict[str, tuple[float, Obj | None]] = {}  # namespace/name -> (when, object; None: deleted)
        self._listed: dict[str, Obj] | None = None  # without a watch: every Gang, listed once
        self._parsed: dict[str, tuple[Obj, Mapping[str, Release]]] = {}  # gang -> (the object, its records)
        # status writes kept for `flush`: gang -> (the object they go over, the patch, this pass's copy)
        self._deferred: dict[str, tuple[Obj, Obj, Obj]] = {}

    def _watched(self) -> Informer | None:
        informer = self._informer()
        return informer if informer is not None and informer.synced.is_set() else None

    def get(self, namespace: str, name: str) -> Obj | None:
        key = f"{namespace}/{name}"
        informer = self._watched()
        if informer is None:
            return self._listing().get(key)
        watched = informer.get(namespace, name)
        mine = self._written.get(key)
        if mine is None:
            return watched
        when, obj = mine
        if _same(obj, watched) or self.monotonic() - when > self.FRESH_SECONDS:
            del self._written[key]  # the watch has caught up (or never will: the object went)
            return watched
        return obj

    def _listing(self) -> dict[str, Obj]:
        if self._listed is None:
            try:
                items = self.api.list(GANGS.path()).get("items") or []
            except ApiError as error:
                if error.status != 404:  # 404: the CRD is not installed, there are no books to read
                    metrics.API_ERRORS.labels("list", str(error.status)).inc()
                    return {}
                items = []
            self._listed = {f"{i['metadata'].get('namespace')}/{i['metadata']['name']}": i for i in items}
        return self._listed

    def books(self, namespace: str, name: str) -> Books:
        return books_of(self.get(namespace, name))

    def releases(self, namespace: str, name: str) -> Mapping[str, Release]:
        """The gang's release records, parsed once per version of its Gang object: the index asks for
        them on every change of every member (a 1,000-pod release is 1,000 changes)."""
        gang = self.get(namespace, name)
        key = f"{namespace}/{name}"
        cached = self._parsed.get(key)
        if cached is not None and cached[0] is gang:
            return cached[1]
        found = releases_of(gang)
        if gang is None:
            self._parsed.pop(key, None)
        else:
            self._parsed[key] = (gang, found)  # the object is kept with its parse, so `is` stays meaningful
        return found

    def keep_only(self, gangs: set[str]) -> None:
        """Forget the parsed records of gangs no longer present (namespace/name)."""
        for key in self._parsed.keys() - gangs:
            del self._parsed[key]

    def suspended(self) -> list[Obj]:
        """The Gang objects whose books say gangkeeper suspended their workload."""
        informer = self._watched()
        if informer is None:
            candidates = list(self._listing().values())
        else:
            keys = {f"{(g.get('metadata') or {}).get('namespace')}/{g['metadata']['name']}" for g in informer.items()}
            keys |= self._written.keys()
            candidates = [g for key in keys if (g := self.get(*key.split("/", 1))) is not None]
        return [g for g in candidates if books_of(g).suspended_at is not None]

    def write(self, wanted: Obj, status: Obj, later: bool = False) -> Obj | None:
        """Create the Gang when missing (or when it belongs to an earlier workload of the same name), then
        patch its spec and status where they differ. Returns the object as now known. `later`: the status
        is sent by `flush`, at the pass's end, side by side with the other gangs' (a report, not a record
        a release or a suspension must wait for)."""
        meta = wanted["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        current = self.get(namespace, name)
        if not self.may_write():
            return current
        if current is not None and _stale(current, wanted):
            self.delete(namespace, name)
            current = None
        if current is None:
            try:
                current = dict(self.api.create(GANGS.path(namespace), wanted))
                metrics.GANG_WRITES.labels("create").inc()
            except ApiError as error:
                metrics.API_ERRORS.labels("create", str(error.status)).inc()
                self._remember(namespace, name, None, forget=True)
                return None  # 409: made meanwhile (read again next pass); else the next pass tries again
            self._remember(namespace, name, current)
        spec_patch = {k: v for k, v in wanted["spec"].items() if (current.get("spec") or {}).get(k) != v}
        if spec_patch:
            current = self._patch(current, "spec", spec_patch)
        if current is not None and differs(current.get("status") or {}, status):
            current = self._defer(current, status) if later else self._patch(current, "status", status)
        return current

    def _defer(self, current: Obj, status: Obj) -> Obj:
        """A status write kept for `flush`, read back by this pass as if written. Writes deferred for one
        gang are sent as one, over the version the first was computed on; one made at once meanwhile
        (a release's record) supersedes them, having been computed from them."""
        meta = current["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        base, pending, _ = self._deferred.get(key, (current, {}, current))
        if (base.get("metadata") or {}).get("resourceVersion") != meta.get("resourceVersion"):
            base, pending = current, {}
        updated = {**current, "status": _merged(current.get("status") or {}, status)}
        self._deferred[key] = (base, _composed(pending, status), updated)
        self._remember(meta["namespace"], meta["name"], updated)
        return updated

    def flush(self) -> None:
        """Send the deferred status writes, side by side: one synchronous round trip per gang per pass
        was a third of the controller's loop while 50 gangs of 20 started (py-spy, bench/cluster.py
        `many` at 5,000 nodes), and it held every release behind it."""
        deferred, self._deferred = self._deferred, {}
        if not deferred:
            return
        if not self.may_write():  # no longer the leader: not sent, and this replica's copies not believed
            for key, (_, _, updated) in deferred.items():
                if not self._superseded(key, updated):
                    namespace, name = key.split("/", 1)
                    self._remember(namespace, name, None, forget=True)
            return

        def send(item: tuple[Obj, Obj, Obj]) -> None:
            base, changes, updated = item
            self._patch(base, "status", changes, still=updated)

        if len(deferred) == 1:
            send(next(iter(deferred.values())))
            return
        with ThreadPoolExecutor(max_workers=min(FLUSH_CONCURRENCY, len(deferred))) as pool:
            list(pool.map(send, deferred.values()))

    def _patch(self, current: Obj, part: str, changes: Obj, still: Obj | None = None) -> Obj | None:
        """`still`: a deferred write's outcome is remembered only while this pass's copy is the one it
        made (a write made at once since then is newer)."""
        meta = current["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        if still is not None and self._superseded(key, still):
            return None  # a later write was computed from it and sent already
        sub = "status" if part == "status" else None
        body: Obj = {part: changes}
        if meta.get("resourceVersion"):
            # written only over the version read: a copy behind the API (a watch cache that has not
            # delivered an earlier write yet, after this replica forgot that write when a later one
            # failed) gets a 409 instead of putting back what it read, such as erasing the books of a
            # workload just suspended, which would then stay suspended for ever
            body["metadata"] = {"resourceVersion": meta["resourceVersion"]}
        try:
            answer = self.api.merge_patched(GANGS.path(meta["namespace"], meta["name"], sub), body)
            metrics.GANG_WRITES.labels(part).inc()
        except ApiError as error:
            metrics.API_ERRORS.labels("patch", str(error.status)).inc()
            log.warning(
                "gang object patch failed",
                extra={"gang": f"{meta['namespace']}/{meta['name']}", "status": error.status, "body": error.body[:300]},
            )
            if still is None or not self._superseded(key, still):
                self._remember(meta["namespace"], meta["name"], None, forget=True)
            return None
        if still is not None and self._superseded(key, still):
            return None
        updated = {**current, part: _merged(current.get(part) or {}, changes)}
        if isinstance(answer, dict) and answer.get("kind") and isinstance(answer.get("metadata"), dict):
            updated = answer  # with the version the API server gave it, for the next write over it
        self._remember(meta["namespace"], meta["name"], updated)
        return updated

    def delete(self, namespace: str, name: str) -> None:
        try:
            self.api.delete(GANGS.path(namespace, name))
            metrics.GANG_WRITES.labels("delete").inc()
        except ApiError as error:
            if error.status != 404:
                metrics.API_ERRORS.labels("delete", str(error.status)).inc()
        self._remember(namespace, name, None)

    def _superseded(self, key: str, copy: Obj) -> bool:
        """Whether this replica's copy of a Gang is no longer `copy` (a later write replaced it)."""
        mine = self._written.get(key)
        if mine is not None:
            return mine[1] is not copy
        return self._listed is not None and key in self._listed and self._listed[key] is not copy

    def _remember(self, namespace: str, name: str, obj: Obj | None, forget: bool = False) -> None:
        key = f"{namespace}/{name}"
        if self._listed is not None:
            if forget:
                self._listed = None  # unsure what the API holds now: list again when next asked
            elif obj is None:
                self._listed.pop(key, None)
            else:
                self._listed[key] = obj
        if forget:
            self._written.pop(key, None)
        elif self._informer() is not None:
            self._written[key] = (self.monotonic(), obj)


def _merged(current: Mapping[str, Any], patch: Mapping[str, Any]) -> Obj:
    """`current` with a JSON merge patch applied (RFC 7386), as the API server applies it."""
    merged = dict(current)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = value
    return merged


def _composed(first: Mapping[str, Any], then: Mapping[str, Any]) -> Obj:
    """One merge patch doing what `first` then `then` do (a None, a removal, is kept: it must reach the
    API server)."""
    composed = dict(first)
    for key, value in then.items():
        earlier = composed.get(key)
        if isinstance(value, Mapping) and isinstance(earlier, Mapping):
            composed[key] = _composed(earlier, value)
        else:
            composed[key] = value
    return composed


def _same(mine: Obj | None, watched: Obj | None) -> bool:
    if mine is None or watched is None:
        return mine is watched
    return all((mine.get(part) or {}) == (watched.get(part) or {}) for part in ("spec", "status"))


def _stale(current: Obj, wanted: Obj) -> bool:
    """A Gang of an earlier workload of the same name (deleted and recreated): its books are not this one's."""
    old = ((current.get("spec") or {}).get("workload") or {}).get("uid")
    new = ((wanted.get("spec") or {}).get("workload") or {}).get("uid")
    return bool(old and new and old != new)
