"""Events kept in a list: the recorder the unit tests pass the Controller (webhook/controller/act/events.py
Recorder), where the deployed controller sends them to the API."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from webhook.controller.act.events import event


class ListRecorder:
    """Events kept in a list, in order, at once: what the tests read instead of the API's."""

    def __init__(
        self, component: str = "gangkeeper-controller", clock: Callable[[], dt.datetime] | None = None
    ) -> None:
        self.component, self.clock = component, clock or (lambda: dt.datetime.now(dt.UTC))
        self.events: list[dict[str, Any]] = []

    def record(self, obj: dict[str, Any], kind: str, reason: str, message: str) -> None:
        self.events.append(event(obj, kind, reason, message, self.component, self.clock()))

    @contextmanager
    def deferred(self) -> Iterator[None]:
        yield

    def flush(self) -> None:
        pass

    def reasons(self, reason: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["reason"] == reason]
