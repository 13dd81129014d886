"""The Gang object gangkeeper.io/v1alpha1 as wanted, and the controller's books in its status (requeue
attempts, backoff, the suspension it made, each release's record): pure, built and read here, written by
act/gangobject.py. The books are read from the Gang object and nowhere else, so an annotation a tenant
writes on a workload never becomes the controller's state."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook import contract
from webhook.controller.decide.pods import Release, format_time, parse_time
from webhook.controller.decide.situation import History

API_VERSION = contract.GANG_API_VERSION
KIND = contract.GANG_KIND


MAX_MESSAGE = 1024


Obj = dict[str, Any]


@dataclass(frozen=True)
class Books:
    """The controller's state for one gang, as its Gang object's status holds it."""

    attempts: int = 0
    not_before: dt.datetime | None = None
    suspended_at: dt.datetime | None = None  # gangkeeper suspended the workload then, and resumes it
    ran_with: int = 0  # members running when it last ran whole (0: not since it was last requeued)
    short_since: dt.datetime | None = None  # it ran whole, and has had fewer running since then
    domain: str | None = None  # the topology domain(s) its release chose (a gang with a topology)
    claim_until: dt.datetime | None = None  # backfilled on its expected-seconds: to be done by then
    claim_broken: bool = False  # it once ran past such a claim: its expected-seconds is not believed

    @property
    def history(self) -> History:
        return History(self.ran_with, self.short_since)


def books_of(gang: Mapping[str, Any] | None) -> Books:
    status = (gang or {}).get("status") or {}
    attempts, ran_with = status.get("attempts"), status.get("ranWith")
    return Books(
        attempts if isinstance(attempts, int) and attempts > 0 else 0,
        parse_time(status.get("notBefore")),
        parse_time(status.get("suspendedAt")),
        ran_with if isinstance(ran_with, int) and ran_with > 0 else 0,
        parse_time(status.get("shortSince")),
        str(status["domain"])[:MAX_DOMAIN] if isinstance(status.get("domain"), str) else None,
        parse_time(status.get("claimUntil")),
        status.get("claimBroken") is True,
    )


MAX_RELEASES = 10_000  # the CRD's maxProperties of status.released


MAX_DOMAIN = 253  # the CRD's maxLength of status.domain


def releases_of(gang: Mapping[str, Any] | None) -> dict[str, Release]:
    """Pod name -> its release record, as the Gang's status holds them (unreadable entries skipped)."""
    found: dict[str, Release] = {}
    released = ((gang or {}).get("status") or {}).get("released")
    if not isinstance(released, Mapping):
        return found
    for name, record in list(released.items())[:MAX_RELEASES]:
        if not isinstance(record, Mapping):
            continue
        at = parse_time(record.get("at"))
        uid, node = record.get("uid"), record.get("node")
        if at is not None and isinstance(uid, str) and isinstance(node, str):
            found[str(name)] = Release(uid, node, at)
    return found


def release_records(released: Mapping[str, Release]) -> Obj:
    return {name: {"uid": r.uid, "node": r.node, "at": format_time(r.at)} for name, r in released.items()}


def books_status(books: Books) -> Obj:
    """The books as status fields (None removes one in a merge patch)."""
    return {
        "attempts": books.attempts or None,
        "notBefore": format_time(books.not_before) if books.not_before else None,
        "suspendedAt": format_time(books.suspended_at) if books.suspended_at else None,
        "ranWith": books.ran_with or None,
        "shortSince": format_time(books.short_since) if books.short_since else None,
        "domain": books.domain[:MAX_DOMAIN] if books.domain else None,
        "claimUntil": format_time(books.claim_until) if books.claim_until else None,
        "claimBroken": True if books.claim_broken else None,
    }


def workload_ref(workload: Mapping[str, Any] | None) -> Obj | None:
    meta = (workload or {}).get("metadata") or {}
    if workload is None or not meta.get("name"):
        return None
    ref = {"apiVersion": workload.get("apiVersion"), "kind": workload.get("kind"), "name": meta["name"]}
    if meta.get("uid"):
        ref["uid"] = meta["uid"]
    return ref


def desired_object(namespace: str, name: str, backend: str, min_member: int, workload: Mapping[str, Any] | None) -> Obj:
    """A new Gang object: owned by the workload, so it goes when the workload goes."""
    meta: Obj = {"name": name, "namespace": namespace, "labels": {contract.GROUP_LABEL: name}}
    ref = workload_ref(workload)
    spec: Obj = {"backend": backend, "minMember": max(1, min_member)}
    if ref is not None:
        spec["workload"] = ref
        if "uid" in ref:
            meta["ownerReferences"] = [{**ref, "controller": True, "blockOwnerDeletion": True}]
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta, "spec": spec}


def condition(kind: str, true: bool, reason: str, message: str, now: dt.datetime, previous: list[Obj]) -> Obj:
    """A condition, keeping its last transition time while its status stays the same."""
    status = "True" if true else "False"
    before = next((c for c in previous if isinstance(c, dict) and c.get("type") == kind), None)
    since = before.get("lastTransitionTime") if before and before.get("status") == status else None
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message[:MAX_MESSAGE],
        "lastTransitionTime": since or format_time(now),
    }


def desired_status(
    state: str,
    message: str,
    counts: tuple[int, int, int],
    min_member: int,
    position: int,
    books: Books,
    previous: Mapping[str, Any],
    now: dt.datetime,
    roles: Sequence[tuple[str, int, int, int]] = (),
) -> Obj:
    """What the Gang's status should say: the decision, the pods counted, the books, three conditions;
    with roles (whole_groups.role_counts: name, minimum, groups present, bound whole), each of them."""
    present, running, gated = counts
    old_conditions = list(previous.get("conditions") or [])
    released = gated == 0 and present > 0
    return {
        "state": state,
        "message": message[:MAX_MESSAGE],
        "present": present,
        "running": running,
        "gated": gated,
        "queuePosition": position or None,
        **books_status(books),
        **(
            {"roles": [{"name": n, "minimum": m, "present": p, "boundWhole": b} for n, m, p, b in roles]}
            if roles
            else {}
        ),
        "conditions": [
            condition("Released", released, state, message, now, old_conditions),
            condition(
                "Running",
                running >= min_member,
                "Running" if running >= min_member else state,
                f"{running} of {min_member} members running",
                now,
                old_conditions,
            ),
            minimum_available(running, min_member, books, old_conditions, now, roles),
        ],
    }


def minimum_available(
    running: int,
    min_member: int,
    books: Books,
    previous: list[Obj],
    now: dt.datetime,
    roles: Sequence[tuple[str, int, int, int]] = (),
) -> Obj:
    """Whether the gang has its minimum running, both ways (kubernetes/kubernetes#136334; Grove's
    MinAvailableBreached): False BelowMinimum once a gang that ran whole has fewer running (lost,
    evicted, preempted), True again once it is back; False NotStarted before it first ran whole. The
    members running above the minimum (replicas an autoscaler added) are counted apart. With roles, the
    minimum is every role's whole groups bound: enough pods running with a role short is below it."""
    before = next((c for c in previous if isinstance(c, dict) and c.get("type") == "MinimumAvailable"), None)
    ran = books.ran_with > 0 or (before is not None and before.get("reason") in ("MinimumRunning", "BelowMinimum"))
    short = [f"{name} {bound} of {minimum}" for name, minimum, _, bound in roles if bound < minimum]
    if running >= min_member and short:
        return condition(
            "MinimumAvailable",
            False,
            "BelowMinimum" if ran else "NotStarted",
            f"{running} running, but roles below their minimum of whole groups bound: {', '.join(short)}",
            now,
            previous,
        )
    if running >= min_member:
        above = running - min_member
        reason, message = (
            "MinimumRunning",
            f"{min_member} of its minimum {min_member} running" + (f", and {above} above it" if above else ""),
        )
    else:
        reason = "BelowMinimum" if ran else "NotStarted"
        message = f"{running} of its minimum {min_member} running"
    return condition("MinimumAvailable", running >= min_member, reason, message, now, previous)


# what a gang's progress changes on every pass while a big gang binds: written at most every
# COUNTS_SECONDS. A status PATCH costs kube-apiserver the whole object (schema, managed fields): 300 ms
# of its CPU for a Gang holding 1,000 release records against 17 ms for 10 (measured on the real tier),
# and a 1,000-pod release wrote its Gang 59 times, half the API server's CPU of the release. The place
# in the queue too: each release moves every gang behind it up one, a PATCH per waiting gang per release.
COUNTED = frozenset({"present", "running", "gated", "message", "queuePosition", "roles"})


COUNTS_SECONDS = 5.0


def differs_beyond_counts(current: Mapping[str, Any], patch: Mapping[str, Any]) -> bool:
    """Whether a status patch changes more than the counts and the messages: a state, a condition's
    status or reason, the books or the records are written at once."""

    def plain(status: Mapping[str, Any]) -> Obj:
        kept = {k: v for k, v in status.items() if k not in COUNTED and k != "conditions"}
        conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
        kept["conditions"] = [{k: v for k, v in c.items() if k != "message"} for c in conditions]
        return kept

    return plain(merged(current, patch)) != plain(current)


def differs(current: Mapping[str, Any], patch: Mapping[str, Any]) -> bool:
    """Whether a merge patch would change `current`."""
    return merged(current, patch) != current


def merged(current: Mapping[str, Any], patch: Mapping[str, Any]) -> Obj:
    """`current` with a JSON merge patch applied (RFC 7386), as the API server applies it."""
    result = dict(current)
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(result.get(key), Mapping):
            result[key] = merged(result[key], value)
        else:
            result[key] = value
    return result
