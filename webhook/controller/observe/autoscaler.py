"""Whether the cluster grows: something adds nodes when pods are Unschedulable (controller/act/placeholders.py
makes such pods for gate gangs that wait on capacity). No metrics here: the CLI reads its defaults."""

from __future__ import annotations

import time
from collections.abc import Callable

from webhook.kube import Api, ApiError, Resource

PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
NODEPOOLS = Resource("karpenter.sh/v1", "nodepools")
AUTOSCALERS = ("auto", "karpenter", "cluster-autoscaler", "none")
CHECK_SECONDS = 15.0  # a NodePool made or removed is seen within this long


class Autoscaler:
    """Whether nodes come when pods are Unschedulable: `karpenter` or `cluster-autoscaler` as configured,
    `none`, or `auto` (Karpenter's NodePools exist, looked for every CHECK_SECONDS; Cluster Autoscaler serves
    no API to find it by)."""

    def __init__(self, api: Api, mode: str = "auto", clock: Callable[[], float] = time.monotonic) -> None:
        self.api, self.mode, self.clock = api, mode, clock
        self._known: tuple[float, bool] | None = None

    def present(self) -> bool:
        if self.mode != "auto":
            return self.mode != "none"
        now = self.clock()
        if self._known is None or now - self._known[0] >= CHECK_SECONDS:
            try:
                found = bool(self.api.list(NODEPOOLS.path(), limit="1").get("items"))
            except ApiError:  # 404: Karpenter not installed; anything else: asked again next minute
                found = False
            self._known = (now, found)
        return self._known[1]
