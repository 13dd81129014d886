"""Which gang mechanism a namespace gets, from what the cluster really serves.

`auto` picks, best first: Volcano, scheduler-plugins coscheduling, native scheduling.k8s.io (newest
served version), then gate. A dedicated gang scheduler that is installed was chosen by the platform
team; the native API is next because the kube-scheduler enforces it; gate needs only gangkeeper's own
controller and works on any cluster. A backend asked for by name whose API is not served is refused
with what is missing, never silently ignored: a pod field the API server does not know is dropped.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from webhook.backends import MECHANISMS, by_name
from webhook.backends.base import Backend, Served, Settings

__all__ = ["DiscoveryCache", "Served", "Unavailable", "choose"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Unavailable:
    backend: str
    message: str


def choose(requested: str, served: Served | None, settings: Settings | None = None) -> Backend | Unavailable:
    """The mechanism for `requested` (a backend name or "auto") on a cluster serving `served`, configured
    with `settings`; the registry's order (webhook/backends/__init__.py MECHANISMS) is auto's.

    With no discovery (offline, or the API unreachable) a named backend is trusted as asked and auto
    falls back to gate, which needs nothing from the cluster but gangkeeper's controller.
    """
    settings = settings or Settings()
    if served is None:
        return by_name("gate" if requested == "auto" else requested).configured(settings)
    for mechanism in MECHANISMS if requested == "auto" else (by_name(requested),):
        found = mechanism.discover(served, settings)
        if found is not None:
            return found
    mechanism = by_name(requested)
    return Unavailable(
        requested,
        f"backend {requested} needs {mechanism.needs}, which this cluster does not serve: {mechanism.how_to_enable}",
    )


class DiscoveryCache:
    """Served APIs, refreshed in the background; readers never wait on the network."""

    def __init__(self, fetch: Callable[[], Served], refresh_seconds: float = 60.0) -> None:
        self._fetch, self._refresh = fetch, refresh_seconds
        self._served: Served | None = None
        self._stop = threading.Event()
        self._answered = threading.Event()

    @property
    def served(self) -> Served | None:
        return self._served

    def refresh(self) -> bool:
        try:
            self._served = self._fetch()
        except Exception:  # the cluster may be briefly unreachable; keep the last answer
            log.warning("api discovery failed; keeping the previous answer", exc_info=True)
            return False
        self._answered.set()
        return True

    def wait(self, timeout: float) -> bool:
        """True once discovery has answered at least once."""
        return self._answered.wait(timeout)

    def start(self) -> None:
        threading.Thread(target=self._loop, name="discovery", daemon=True).start()

    def _loop(self) -> None:
        # retried every 2 s until it answers, then on the refresh period: an API installed later (a CRD,
        # a feature gate) is seen within one period
        while True:
            interval = self._refresh if self.refresh() else 2.0
            if self._stop.wait(interval):
                return

    def stop(self) -> None:
        self._stop.set()


def fetch_from_cluster(api: Any) -> Served:
    """Which of the group-versions gangkeeper cares about the API server serves (GET /apis, then each
    wanted /apis/<group>/<version>), through the controller's REST access (webhook.kube.Api)."""
    wanted = {group_version for mechanism in MECHANISMS for group_version in mechanism.group_versions}
    groups = api.get("/apis")
    docs = []
    for group in groups.get("groups") or []:
        for version in group.get("versions") or []:
            group_version = version.get("groupVersion")
            if group_version in wanted:
                docs.append(api.get(f"/apis/{group_version}"))
    return Served.from_documents(docs)
