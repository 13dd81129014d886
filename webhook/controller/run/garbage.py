"""Python's cyclic garbage collector, kept off the controller's cache and out of its passes. Every
thread waits while a collection runs, and a full one walks every object alive: with 100,000 pods
cached one took 1.3 s on the real tier just as a gang's last pod arrived (bench/cluster.py `crowded`),
the release delayed by as much, and it found nothing to free (the caches are dicts and lists without
cycles). So full collections are not left to the allocator: one runs between passes every
FULL_EVERY_SECONDS, walking only what was made since the last (its survivors are then frozen,
`gc.freeze`), and once an hour everything is walked again, so a cycle that did form among frozen
objects is freed within the hour. Young collections stay automatic (they walk only new objects).
Every collection is timed into `gangkeeper_controller_gc_pause_seconds`; one long enough to matter
is logged."""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable
from typing import Any

from webhook.controller import metrics

log = logging.getLogger("gangkeeper.controller")

LOGGED_PAUSE_SECONDS = 0.1
FULL_EVERY_SECONDS = 30.0
AUDIT_SECONDS = 3600.0
# young collections as CPython's defaults; the oldest generation only when asked (between passes)
THRESHOLDS = (700, 10, 1_000_000_000)


class Collector:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._started = 0.0
        self._full_since_freeze = False
        self._audited_at = self._full_at = clock()
        # made here, not in the callback: a label's first use allocates under the metric's lock, where
        # a collection (and so this callback, wanting the same lock) may start
        self._by_generation = tuple(metrics.GC_PAUSES.labels(str(generation)) for generation in range(3))

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        paused = time.perf_counter() - self._started
        generation = min(2, max(0, int(info.get("generation", 0))))
        self._by_generation[generation].observe(paused)
        if generation == 2:
            self._full_since_freeze = True
        if paused >= LOGGED_PAUSE_SECONDS:
            log.info(
                "garbage collection paused the controller",
                extra={"generation": generation, "seconds": round(paused, 3), "collected": info.get("collected")},
            )

    def between_passes(self) -> None:
        """Called where a pause delays no decision under way: a full collection over what is not frozen
        when one is due (once an hour over everything), then what it kept frozen (not from the callback,
        which runs inside the collector)."""
        now = self.clock()
        if now - self._audited_at >= AUDIT_SECONDS:
            self._audited_at = self._full_at = now
            gc.unfreeze()
            gc.collect()
        elif now - self._full_at >= FULL_EVERY_SECONDS:
            self._full_at = now
            gc.collect()
        if self._full_since_freeze:
            self._full_since_freeze = False
            gc.freeze()


def start() -> Collector:
    """Everything made so far (the imports, the API client) frozen, and the collector watched: once per
    process, however often the controller starts in it (the tests start it many times)."""
    known = next((c for c in gc.callbacks if isinstance(c, Collector)), None)
    if known is not None:
        return known
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    collector = Collector()
    gc.callbacks.append(collector)
    return collector
