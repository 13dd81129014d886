"""Leader election on a coordination.k8s.io/v1 Lease: at most one controller acts at a time.

Modelled on client-go's leaderelection (tools/leaderelection/leaderelection.go):
- the leader renews on a fixed period (`retry_seconds`) from a thread of its own, however busy or
  quiet the reconcile loop is: renewals cost one GET and one PATCH per period, not per pass;
- a candidate judges expiry by its own clock: the lease is free once the record it last saw has not
  changed for `leaseDurationSeconds` (observed locally), never by comparing the holder's renewTime
  with its own clock, which may be skewed;
- a leader that cannot renew within `renew_deadline_seconds` stops acting at once (`leading()` turns
  false) before the lease can expire and another replica take it;
- every write carries the resourceVersion it read: two candidates racing cannot both win (409);
- a leader that stops cleanly (SIGTERM: a rollout, a drained node) gives the Lease up, as client-go
  does with ReleaseOnCancel (`release` in leaderelection.go): an empty holderIdentity is free to every
  candidate at once (resourcelock/interface.go, LeaderElectionRecord), so a restart does not leave the
  gates unlifted for a whole lease duration.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from webhook.controller import metrics
from webhook.controller.decide.pods import format_time
from webhook.kube import LEASES, Api, ApiError

log = logging.getLogger("gangkeeper.controller.leader")


class LeaderElector:
    def __init__(
        self,
        api: Api,
        namespace: str,
        name: str,
        identity: str,
        lease_seconds: int = 15,
        renew_deadline_seconds: float = 10.0,
        retry_seconds: float = 2.0,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
        monotonic: Callable[[], float] = time.monotonic,
        changed: threading.Event | None = None,
        remembered: Callable[[], Mapping[str, str]] = dict,
        recall: Callable[[Mapping[str, str]], None] = lambda annotations: None,
    ) -> None:
        """`remembered`: annotations the leader keeps on the Lease, written with a renewal when they
        changed; `recall`: given the Lease's annotations when this process becomes the leader (what the
        leader before it remembered: controller/observe/cel_budget.py)."""
        self.api, self.namespace, self.name, self.identity = api, namespace, name, identity
        self.lease_seconds, self.renew_deadline, self.retry = lease_seconds, renew_deadline_seconds, retry_seconds
        self.clock, self.monotonic = clock, monotonic
        self._observed: tuple[Any, ...] | None = None  # the record last seen, and when it last changed
        self._observed_at = 0.0
        self._renewed_at: float | None = None  # last successful acquire or renew, while leading
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.changed = changed or threading.Event()  # set when leadership is gained or lost
        self.remembered, self.recall = remembered, recall

    def leading(self) -> bool:
        """True while the last renewal is within the renew deadline: checked before every batch of writes."""
        return self._renewed_at is not None and self.monotonic() - self._renewed_at < self.renew_deadline

    def try_acquire_or_renew(self) -> bool:
        """One attempt; True when this process holds the lease afterwards."""
        now, observed_now = self.clock(), self.monotonic()
        spec: dict[str, Any] = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.lease_seconds,
            "renewTime": format_time(now),
        }
        path = LEASES.path(self.namespace, self.name)
        try:
            lease = self.api.get(path)
        except ApiError as error:
            if error.status != 404:
                return self._failed()
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
            except ApiError:
                return self._failed()
            return self._succeeded(observed_now)
        current = lease.get("spec") or {}
        record = (current.get("holderIdentity"), current.get("renewTime"), current.get("leaseTransitions"))
        if record != self._observed:
            self._observed, self._observed_at = record, observed_now
        holder = current.get("holderIdentity")
        duration = int(current.get("leaseDurationSeconds") or self.lease_seconds)
        held_by_other = bool(holder) and holder != self.identity
        if held_by_other and observed_now - self._observed_at < duration:
            return self._failed()
        if holder != self.identity:
            spec["acquireTime"] = format_time(now)
            spec["leaseTransitions"] = int(current.get("leaseTransitions") or 0) + 1
        annotations = (lease.get("metadata") or {}).get("annotations") or {}
        metadata: dict[str, Any] = {"resourceVersion": lease["metadata"]["resourceVersion"]}
        leading = self._renewed_at is not None
        if leading:  # a new leader writes nothing before it has taken what the one before remembered
            kept = {k: v for k, v in self.remembered().items() if annotations.get(k) != v}
            if kept:
                metadata["annotations"] = kept
        try:
            self.api.merge_patch(path, {"metadata": metadata, "spec": spec})
        except ApiError:
            return self._failed()
        if not leading:
            self.recall(annotations)
        return self._succeeded(observed_now)

    def _succeeded(self, at: float) -> bool:
        if self._renewed_at is None:
            log.info("became the leader", extra={"identity": self.identity})
            self.changed.set()
        self._renewed_at = at
        return True

    def _failed(self) -> bool:
        if self._renewed_at is not None and not self.leading():
            log.warning("lost the lease: stopping all writes", extra={"identity": self.identity})
            metrics.LEASE_LOST.inc()
            self._renewed_at = None
            self.changed.set()
        return self.leading()

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                self.try_acquire_or_renew()
            except Exception:  # a transport error is one failed attempt, not the end of the thread
                log.warning("lease attempt failed", exc_info=True)
                self._failed()
            self._stop.wait(self.retry)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="leader-election", daemon=True)
        self._thread.start()

    def stop(self, release: bool = False) -> None:
        """Stop renewing; with `release`, once the caller has made its last write, give the Lease up."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.retry + 30)  # no renewal may land after the release
        if release:
            self.release()

    def release(self) -> bool:
        """Hand the Lease back (holder empty, a one-second duration) if this process holds it; True
        when it did. Writing stops first: whatever the answer, this process no longer leads."""
        if self._renewed_at is None:
            return False
        self._renewed_at = None
        self.changed.set()
        path = LEASES.path(self.namespace, self.name)
        try:
            lease = self.api.get(path)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return False
            now = format_time(self.clock())
            released = {"holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": now, "acquireTime": now}
            self.api.merge_patch(
                path, {"metadata": {"resourceVersion": lease["metadata"]["resourceVersion"]}, "spec": released}
            )
        except ApiError as error:  # the Lease then expires as it would have: only the handover is slower
            log.warning("could not give the lease up: %s", error, extra={"identity": self.identity})
            return False
        log.info("gave the lease up", extra={"identity": self.identity})
        return True
