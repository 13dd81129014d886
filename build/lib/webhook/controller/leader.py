"""Leader election on a coordination.k8s.io/v1 Lease: at most one controller acts at a time.

The holder renews `renewTime` well within `leaseDurationSeconds`; a candidate takes the lease only
once it has expired. Every write carries the resourceVersion it read, so two candidates racing for
an expired lease cannot both win: the API server answers the slower one with 409.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from webhook.controller.kube import LEASES, Api, ApiError
from webhook.controller.state import format_time, parse_time


class LeaderElector:
    def __init__(
        self,
        api: Api,
        namespace: str,
        name: str,
        identity: str,
        lease_seconds: int = 15,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self.api, self.namespace, self.name, self.identity = api, namespace, name, identity
        self.lease_seconds, self.clock = lease_seconds, clock

    def try_acquire_or_renew(self) -> bool:
        """True while this process holds the lease; call every few seconds."""
        now = self.clock()
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.lease_seconds,
            "renewTime": format_time(now),
        }
        path = LEASES.path(self.namespace, self.name)
        try:
            lease = self.api.get(path)
        except ApiError as error:
            if error.status != 404:
                return False
            try:
                self.api.create(
                    LEASES.path(self.namespace),
                    {
                        "apiVersion": "coordination.k8s.io/v1",
                        "kind": "Lease",
                        "metadata": {"name": self.name, "namespace": self.namespace},
                        "spec": {**spec, "acquireTime": format_time(now), "leaseTransitions": 0},
                    },
                )
                return True
            except ApiError:
                return False
        current = lease.get("spec") or {}
        holder = current.get("holderIdentity")
        renewed = parse_time(current.get("renewTime"))
        duration = int(current.get("leaseDurationSeconds") or self.lease_seconds)
        expired = renewed is None or (now - renewed).total_seconds() > duration
        if holder != self.identity and not expired:
            return False
        if holder != self.identity:
            spec["acquireTime"] = format_time(now)
            spec["leaseTransitions"] = int(current.get("leaseTransitions") or 0) + 1
        try:
            self.api.merge_patch(
                path, {"metadata": {"resourceVersion": lease["metadata"]["resourceVersion"]}, "spec": spec}
            )
            return True
        except ApiError:
            return False
