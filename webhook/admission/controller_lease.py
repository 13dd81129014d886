"""Whether gangkeeper's controller is there to lift a gate: read from its leader-election Lease.

A pod gated with no controller running would wait forever, so admission refuses to gate when no
controller has ever held the Lease, and warns while its holder has stopped renewing. Staleness is
judged as the controller's own election does (webhook.controller.run.leader): by how long this process
has seen `renewTime` unchanged, never by comparing another machine's clock with ours.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from webhook.kube import LEASES, Api, ApiError

log = logging.getLogger("gangkeeper.admission")

LEASE_NAME = "gangkeeper-controller"


@dataclass(frozen=True)
class ControllerHealth:
    state: Literal["running", "stale", "absent"]
    namespace: str
    unchanged_seconds: float = 0.0

    def refusal(self) -> str | None:
        """Why a pod must not be gated now, or None."""
        if self.state != "absent":
            return None
        return (
            f"no gangkeeper controller has run in this cluster (no Lease {self.namespace}/{LEASE_NAME}), so a gated "
            "pod would never start: install the controller (manifests/base), or label the namespace "
            "gangkeeper.io/backend with a mechanism the cluster has"
        )

    def warning(self) -> str | None:
        if self.state != "stale":
            return None
        return (
            f"the gangkeeper controller has not renewed its Lease for {self.unchanged_seconds:.0f}s: "
            "gated pods wait until it runs again"
        )


class LeaseWatch:
    """Polls the controller's Lease; `health()` is None until the first answer (or while the API errs)."""

    def __init__(
        self,
        api: Api,
        namespace: str,
        period: float = 10.0,
        stale_after: float = 60.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api, self.namespace, self.period, self.stale_after = api, namespace, period, stale_after
        self.monotonic = monotonic
        self._seen: tuple[str | None, float] | None = None  # renewTime, and when we first saw that value
        self._health: ControllerHealth | None = None
        self._stop = threading.Event()
        self.tried = threading.Event()  # set once the first attempt is over, answered or not

    def health(self) -> ControllerHealth | None:
        return self._health

    def poll_once(self) -> ControllerHealth | None:
        try:
            lease = self.api.get(LEASES.path(self.namespace, LEASE_NAME))
        except ApiError as error:
            if error.status == 404:
                self._health = ControllerHealth("absent", self.namespace)
            # anything else (403, 500, unreachable): keep the last answer rather than guess
            return self._health
        renewed = (lease.get("spec") or {}).get("renewTime")
        now = self.monotonic()
        if self._seen is None or self._seen[0] != renewed:
            self._seen = (renewed, now)
        unchanged = now - self._seen[1]
        state: Literal["running", "stale"] = "stale" if unchanged > self.stale_after else "running"
        self._health = ControllerHealth(state, self.namespace, unchanged)
        return self._health

    def start(self) -> None:
        def loop() -> None:
            while not self._stop.is_set():
                try:
                    self.poll_once()
                except Exception:  # the API may be briefly unreachable; the last answer stands
                    log.warning("could not read the controller's Lease", exc_info=True)
                self.tried.set()
                self._stop.wait(self.period)

        threading.Thread(target=loop, name="controller-lease", daemon=True).start()
