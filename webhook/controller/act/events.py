"""Kubernetes Events, sent in the background as client-go's recorder does: a pass never waits on them."""

from __future__ import annotations

import datetime as dt
import logging
import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol

from webhook.controller import metrics
from webhook.controller.decide.pods import format_time
from webhook.kube import EVENTS, Api, ApiError

log = logging.getLogger("gangkeeper.controller.events")


class Recorder(Protocol):
    """Where the controller tells people about gangs: Events by the API (EventRecorder), or a list."""

    def record(self, obj: dict[str, Any], kind: str, reason: str, message: str) -> None: ...

    def deferred(self) -> AbstractContextManager[None]:
        """Events recorded meanwhile wait until the block ends."""

    def flush(self) -> None:
        """Wait until every recorded event was sent."""


def event(
    obj: dict[str, Any], kind: str, reason: str, message: str, component: str, now: dt.datetime
) -> dict[str, Any]:
    """The core/v1 Event about `obj`, as client-go's recorder writes one."""
    meta = obj.get("metadata") or {}
    stamp = format_time(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta.get('name', 'gang')}.", "namespace": meta.get("namespace")},
        "involvedObject": {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
        },
        "reason": reason,
        "message": message[:1024],
        "type": kind,
        "source": {"component": component},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
        "reportingComponent": component,
    }


class EventRecorder:
    def __init__(self, api: Api, component: str, clock: Callable[[], dt.datetime], workers: int = 4) -> None:
        self.api, self.component, self.clock = api, component, clock
        self._queue: queue.Queue[dict[str, Any]] = queue.Queue(maxsize=10_000)
        self._open = threading.Event()  # cleared while a release's PATCHes are in flight
        self._open.set()
        for index in range(workers):
            threading.Thread(target=self._send_forever, name=f"events-{index}", daemon=True).start()

    def record(self, obj: dict[str, Any], kind: str, reason: str, message: str) -> None:
        body = event(obj, kind, reason, message, self.component, self.clock())
        meta = obj.get("metadata") or {}
        log.info(
            "gang event", extra={"object": f"{obj.get('kind')}/{meta.get('name')}", "reason": reason, "detail": message}
        )
        try:
            self._queue.put_nowait(body)
        except queue.Full:  # events are best effort; never block a release on them
            metrics.API_ERRORS.labels("event", "dropped").inc()

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Events recorded meanwhile wait until the block ends: a 1,000-pod release sends 1,000 PATCHes,
        and the gang starts sooner when its 1,000 events do not compete with them for the client's
        interpreter and the API server."""
        self._open.clear()
        try:
            yield
        finally:
            self._open.set()

    def flush(self) -> None:
        """Wait until every recorded event was sent (tests, shutdown)."""
        self._queue.join()

    def _send_forever(self) -> None:
        while True:
            body = self._queue.get()
            self._open.wait()
            try:
                self.api.create(EVENTS.path(body["metadata"]["namespace"]), body)
            except ApiError as error:
                metrics.API_ERRORS.labels("create", str(error.status)).inc()
            except Exception:
                log.warning("event not sent", exc_info=True)
            finally:
                self._queue.task_done()
