"""List-and-watch caches: a view of one resource kept current without listing it every time.

A watch resumes from the last resourceVersion it saw; when the server says that version is too old
(410 Gone) or the connection fails, the cache lists again from scratch. The webhook keeps namespaces,
queues and PriorityClasses this way; the controller its pods, nodes and workloads
(webhook.controller.observe.informer trims what it keeps).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import urllib3

from webhook.kube import Api, ApiError, Resource, typed_items

log = logging.getLogger("gangkeeper.informer")


def identity(obj: dict[str, Any]) -> dict[str, Any]:
    return obj


class Informer:
    def __init__(
        self,
        api: Api,
        resource: Resource,
        label_selector: str = "",
        watch_seconds: int = 300,
        transform: Callable[[dict[str, Any]], dict[str, Any]] = identity,
        changed: threading.Event | None = None,
        page_size: int = 500,
        on_error: Callable[[int], None] = lambda status: None,
    ) -> None:
        self.api, self.resource, self.selector, self.watch_seconds = api, resource, label_selector, watch_seconds
        self.transform, self.page_size = transform, page_size
        self.on_error = on_error  # a failed list or watch, by HTTP status (0: no answer): the owner counts it
        self._items: dict[str, dict[str, Any]] = {}
        # what changed since the consumer last asked (key -> the object now, None: deleted), so the
        # controller updates its picture of the cluster by the changes instead of rebuilding it each pass
        self._changes: dict[str, dict[str, Any] | None] = {}
        # the same, kept apart for each other reader that follows this cache by its changes (`follow`)
        self._followers: dict[str, dict[str, dict[str, Any] | None]] = {}
        self._lock = threading.Lock()
        self.resource_version = ""
        self.relists = 0
        self.synced = threading.Event()
        self.changed = changed or threading.Event()  # shared: any cache's change wakes the controller
        self._stop = threading.Event()

    def items(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._items.values())

    def drain(self) -> dict[str, dict[str, Any] | None]:
        """The changes since the last drain; the first drain holds every object."""
        with self._lock:
            changes, self._changes = self._changes, {}
        return changes

    def follow(self, reader: str) -> dict[str, dict[str, Any] | None]:
        """`drain` for another reader, apart from the one that drains: its first call holds every object."""
        with self._lock:
            if reader not in self._followers:
                self._followers[reader] = {}
                return dict(self._items)
            changes, self._followers[reader] = self._followers[reader], {}
        return changes

    def _record(self, key: str, obj: dict[str, Any] | None) -> None:
        """A change, for the drain and for each follower (under the lock)."""
        self._changes[key] = obj
        for changes in self._followers.values():
            changes[key] = obj

    def get(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        with self._lock:
            return self._items.get(f"{namespace or ''}/{name}")

    @staticmethod
    def _key(obj: dict[str, Any]) -> str:
        meta = obj.get("metadata") or {}
        return f"{meta.get('namespace', '')}/{meta.get('name', '')}"

    def relist(self) -> None:
        """List in pages of `page_size`: each page is parsed and trimmed before the next is asked for,
        so a large cluster is never held whole as JSON (the apiserver pages the same way for client-go's
        reflector, tools/pager). An object whose resourceVersion did not change keeps its trimmed copy:
        a relist after a 410 allocates only for what changed."""
        query = {"limit": str(self.page_size), **({"labelSelector": self.selector} if self.selector else {})}
        with self._lock:
            previous = self._items
        items: dict[str, dict[str, Any]] = {}
        resource_version = ""
        while True:
            page = self.api.list(self.resource.path(), **query)
            for obj in typed_items(page):
                key = self._key(obj)
                kept = previous.get(key)
                version = (obj.get("metadata") or {}).get("resourceVersion")
                same = kept is not None and (kept.get("metadata") or {}).get("resourceVersion") == version
                items[key] = kept if same and kept is not None else self.transform(obj)
            metadata = page.get("metadata") or {}
            resource_version = resource_version or metadata.get("resourceVersion", "")
            token = metadata.get("continue")
            del page
            if not token:
                break
            query["continue"] = token
        with self._lock:
            for key, obj in items.items():
                if previous.get(key) is not obj:
                    self._record(key, obj)
            for key in previous.keys() - items.keys():
                self._record(key, None)
            self._items = items
            self.resource_version = resource_version
        self.relists += 1
        self.synced.set()
        self.changed.set()

    def watch_once(self) -> bool:
        """Follow one watch until it ends; False when the cache must be listed again."""
        query = {
            "resourceVersion": self.resource_version,
            "timeoutSeconds": str(self.watch_seconds),
            "allowWatchBookmarks": "true",
        }
        if self.selector:
            query["labelSelector"] = self.selector
        for event in self.api.stream(self.resource.path(), query, timeout=self.watch_seconds + 30):
            kind, obj = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                log.info(
                    "watch expired; listing again", extra={"resource": self.resource.plural, "code": obj.get("code")}
                )
                return False
            with self._lock:
                if kind == "DELETED":
                    key = self._key(obj)
                    if self._items.pop(key, None) is not None:
                        self._record(key, None)
                elif kind in ("ADDED", "MODIFIED"):
                    key = self._key(obj)
                    self._items[key] = self.transform(obj)
                    self._record(key, self._items[key])
                self.resource_version = (obj.get("metadata") or {}).get("resourceVersion", self.resource_version)
            # recorded first, so a flag already up wakes the consumer for this change too: setting it
            # again takes the Event's lock and notifies for nothing (a tenth of an idle controller's CPU
            # at 1,000 pods changing, py-spy in bench/cluster.py --scenarios autoscale)
            if not self.changed.is_set():
                self.changed.set()
        return True

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                if not self.synced.is_set() or not self.resource_version:
                    self.relist()
                if not self.watch_once():
                    self.relist()
            except (ApiError, OSError, ValueError, urllib3.exceptions.HTTPError) as error:
                if self._stop.is_set():  # the watch broke because we are shutting down
                    return
                # a reset or refused connection must not end the thread: the cache would freeze
                self.on_error(int(getattr(error, "status", 0) or 0))
                log.warning("watch failed; listing again", extra={"resource": self.resource.plural}, exc_info=True)
                self.synced.clear()
                self._stop.wait(1.0)

    def start(self) -> None:
        threading.Thread(target=self.run, name=f"informer-{self.resource.plural}", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
