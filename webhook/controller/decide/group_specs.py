"""What a group object should be, and whether the one stored is it: pure rules over the objects the
controller reads (act/groups.py writes what these decide)."""

from __future__ import annotations

import datetime as dt

from webhook import contract
from webhook.gangs.model import Obj

# the spec fields of the mutable group kinds the API server fills in when they are left out (a Volcano
# PodGroup's `queue`: `default: default` in its CRD): never taken out, or every pass would write them
DEFAULTED_SPEC_FIELDS = {"scheduling.volcano.sh": frozenset({"queue"}), "scheduling.x-k8s.io": frozenset()}


# how long after its held PodGroup a workload may be stored and still be the one it was made for: the
# admission steps after gangkeeper's validation (other webhooks, quota), each a few seconds at most
ADOPT_WITHIN_SECONDS = 15.0
# creation times are whole seconds, and two API servers' clocks may differ a little
CLOCK_SLACK_SECONDS = 2.0


def awaiting_owner(meta: Obj) -> bool:
    return contract.AWAITING_OWNER_ANNOTATION in (meta.get("annotations") or {}) and not meta.get("ownerReferences")


def made_ahead_for(group: Obj, workload: Obj) -> bool:
    """Whether `group` is the held PodGroup gangkeeper's webhook made at `workload`'s admission: marked,
    unowned, in the held shape the webhook makes and its ValidatingAdmissionPolicy allows (admission/
    ahead.py), made at most ADOPT_WITHIN_SECONDS before the workload was stored. One made for an earlier
    workload of the name is older than that, or was adopted by it."""
    meta = group.get("metadata") or {}
    spec = group.get("spec") or {}
    if not awaiting_owner(meta) or meta["annotations"][contract.AWAITING_OWNER_ANNOTATION] != "true":
        return False
    if spec.get("minMember") != contract.HELD_MIN_MEMBER or set(spec) - {"minMember", "queue", "minResources"}:
        return False
    stored = _timestamp((workload.get("metadata") or {}).get("creationTimestamp"))
    made = _timestamp(meta.get("creationTimestamp"))
    if stored is None or made is None:
        return False
    return -CLOCK_SLACK_SECONDS <= (stored - made).total_seconds() <= ADOPT_WITHIN_SECONDS


def spec_patch(group_version: str, current: object, desired: Obj) -> Obj | None:
    """The merge patch that makes a group object's spec the gang's, or None when it is already: every
    field the gang sets, and, on the kinds gangkeeper alone writes, every other field taken out but those
    the API server fills in (a spec is the gang's, not a merge with whatever was there)."""
    current_spec = current if isinstance(current, dict) else {}
    group = group_version.split("/", 1)[0]
    defaulted = DEFAULTED_SPEC_FIELDS.get(group)
    extra = (
        [
            key
            for key, value in current_spec.items()
            if key not in desired and key not in defaulted and value is not None
        ]
        if defaulted is not None
        else []
    )
    if not extra and contains(current_spec, desired):
        return None  # what the API server adds (defaults, a resolved priority) is no difference
    return {**dict.fromkeys(extra), **desired}


def _timestamp(value: object) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def contains(current: object, wanted: object) -> bool:
    """Whether `current` holds every field of `wanted` with the same value: objects compared field by
    field, lists item by item (a list of objects as the API server stores it carries fields we never
    wrote: a v1beta1 PodGroupTemplate's `schedulingConstraints` is serialized even when null, k8s.io/api
    scheduling/v1beta1/types.go has no omitempty on it, so comparing whole lists rewrote a 1.37 Workload
    at every change of its gang's pods: 277 PATCHes for one 1,000-pod Job in bench/cluster.py), anything
    else exactly."""
    if isinstance(wanted, dict):
        return isinstance(current, dict) and all(contains(current.get(key), value) for key, value in wanted.items())
    if isinstance(wanted, list):
        return (
            isinstance(current, list)
            and len(current) == len(wanted)
            and all(contains(have, want) for have, want in zip(current, wanted, strict=True))
        )
    return current == wanted
