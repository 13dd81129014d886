"""The Gang object (gangkeeper.io/v1alpha1): one per gang, owned by its workload, written only by the
controller. Its status is what `kubectl get gangs` shows for every backend, and the controller's own
books for the gang (requeue attempts, backoff, the suspension it made): those are read from here and
nowhere else, so an annotation a tenant writes on a workload never becomes the controller's state.

The pure part builds the object wanted; `GangObjects` writes it only when it differs from what the API
holds (a quiet gang costs no write), and remembers what it wrote so a pass reads its own books back
without an API call.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from webhook.controller import metrics
from webhook.controller.decide.pods import Release
from webhook.controller.observe.books import API_VERSION, Books, Obj, books_of, differs, merged, releases_of
from webhook.controller.observe.store import GangStore
from webhook.informer import Informer
from webhook.kube import Api, ApiError, Resource

log = logging.getLogger("gangkeeper.controller")


GANGS = Resource(API_VERSION, "gangs")


FLUSH_CONCURRENCY = 8  # deferred status writes sent side by side at a pass's end


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
        store: GangStore | None = None,
    ) -> None:
        self.api, self._informer, self.may_write, self.monotonic = api, informer, may_write, monotonic
        # each gang's books and release records, parsed once per version of its Gang object, and its Gang
        # as this replica last wrote it (when, the object; None: deleted): its record
        self.store = store if store is not None else GangStore()
        self._listed: dict[str, Obj] | None = None  # without a watch: every Gang, listed once
        # status writes kept for `flush`: gang -> (the object they go over, the patch, this pass's copy)
        self._deferred: dict[str, tuple[Obj, Obj, Obj]] = {}
        # what this replica wrote is read by the pass and written by the releaser's pool (a release's
        # record) at once
        self._lock = threading.RLock()

    def _watched(self) -> Informer | None:
        informer = self._informer()
        return informer if informer is not None and informer.synced.is_set() else None

    def get(self, namespace: str, name: str) -> Obj | None:
        key = f"{namespace}/{name}"
        informer = self._watched()
        if informer is None:
            with self._lock:
                return self._listing().get(key)
        watched = informer.get(namespace, name)
        with self._lock:
            mine = self._mine(key)
            if mine is None:
                return watched
            when, obj = mine
            if _same(obj, watched) or self.monotonic() - when > self.FRESH_SECONDS:
                self.store.wrote(key, None)  # the watch has caught up (or never will: the object went)
                return watched
            return obj

    def _mine(self, key: str) -> tuple[float, Obj | None] | None:
        record = self.store.get(key)
        return record.written if record is not None else None

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
        """The gang's books, parsed once per version of its Gang object: a pass asks for them several
        times per waiting gang (a profiled replay spent a tenth of the controller's CPU parsing them)."""
        gang = self.get(namespace, name)
        if gang is None:
            return books_of(None)
        record = self.store.record(f"{namespace}/{name}")
        cached = record.books
        if cached is not None and cached[0] is gang:
            return cached[1]
        found = books_of(gang)
        record.books = (gang, found)  # the object is kept with its parse, so `is` stays meaningful
        return found

    def releases(self, namespace: str, name: str) -> Mapping[str, Release]:
        """The gang's release records, parsed once per version of its Gang object: the index asks for
        them on every change of every member (a 1,000-pod release is 1,000 changes)."""
        gang = self.get(namespace, name)
        if gang is None:
            return releases_of(None)
        record = self.store.record(f"{namespace}/{name}")
        cached = record.releases
        if cached is not None and cached[0] is gang:
            return cached[1]
        found = releases_of(gang)
        record.releases = (gang, found)  # the object is kept with its parse, so `is` stays meaningful
        return found

    def suspended(self) -> list[Obj]:
        """The Gang objects whose books say gangkeeper suspended their workload."""
        informer = self._watched()
        if informer is None:
            candidates = list(self._listing().values())
        else:
            # asked every pass: only the Gangs whose watched copy holds a suspension are looked at closer
            # (and those this replica wrote since, which may hold a newer one)
            keys = {
                f"{(g.get('metadata') or {}).get('namespace')}/{g['metadata']['name']}"
                for g in informer.items()
                if ((g.get("status") or {}).get("suspendedAt"))
            }
            with self._lock:
                keys |= set(self.store.writing())
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
        updated = {**current, "status": merged(current.get("status") or {}, status)}
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
        updated = {**current, part: merged(current.get(part) or {}, changes)}
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
        with self._lock:
            mine = self._mine(key)
            if mine is not None:
                return mine[1] is not copy
            return self._listed is not None and key in self._listed and self._listed[key] is not copy

    def _remember(self, namespace: str, name: str, obj: Obj | None, forget: bool = False) -> None:
        key = f"{namespace}/{name}"
        watching = self._informer() is not None
        with self._lock:
            if self._listed is not None:
                if forget:
                    self._listed = None  # unsure what the API holds now: list again when next asked
                elif obj is None:
                    self._listed.pop(key, None)
                else:
                    self._listed[key] = obj
            if forget:
                if self._mine(key) is not None:
                    self.store.wrote(key, None)
            elif watching:
                self.store.wrote(key, (self.monotonic(), obj))


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
