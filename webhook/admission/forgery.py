"""Keys only gangkeeper's controller writes: its bookkeeping on pods and workloads (when a pod was
released, the node planned for it, a workload's suspension and backoff). A tenant who writes one could
move capacity or another gang's turn, so the validating webhook refuses any other writer.

Checked on the object and on every pod template in it (pods inherit their template's annotations).
Admission refuses them on CREATE, which no controller of gangkeeper's ever does with them, and refuses
an UPDATE that adds or changes one unless it comes from gangkeeper's controller (its service account;
it writes one of them, the `suspended` mark on a workload it suspends). Taking one off is allowed: a
user who removes `suspended` keeps the workload suspended. The controller reads none of them back:
its state is its Gang objects' status; refusing them keeps people from believing they mean something.
"""

from __future__ import annotations

import marshal
from collections.abc import Iterator, Mapping
from typing import Any

from webhook import contract
from webhook.admission.keys import CONTROLLER_KEYS

CONTROLLER_ACCOUNT = "gangkeeper-controller"
_controller_user = f"system:serviceaccount:{contract.SYSTEM_NAMESPACE}:{CONTROLLER_ACCOUNT}"


def set_namespace(namespace: str) -> None:
    """gangkeeper's namespace, set once at start: its controller's service account is the one writer."""
    global _controller_user
    _controller_user = f"system:serviceaccount:{namespace}:{CONTROLLER_ACCOUNT}"


def is_controller(username: str | None) -> bool:
    return username == _controller_user


# a pod's gang membership: set at creation (by the webhook, or by its user for a bare pod group) and
# never changed after, so a gang's size cannot move past validation; removing it (leaving the gang) is
# allowed, and the controller then lifts the pod's gate
MEMBERSHIP = (
    ("labels", "gangkeeper.io/group"),
    ("labels", "gangkeeper.io/group-name"),
    ("annotations", "gangkeeper.io/group-size"),
    ("annotations", "gangkeeper.io/workload"),
    ("annotations", "gangkeeper.io/workload-uid"),
)

# its state, without gang-status (what it shows people, read back by nothing)
STATE_KEYS = CONTROLLER_KEYS - {"gangkeeper.io/gang-status"}
MAX_REPORTED = 3
_STATE_KEY_BYTES = tuple(key.encode() for key in sorted(STATE_KEYS))


def _may_carry_state(obj: Mapping[str, Any]) -> bool:
    """Whether a state key appears anywhere in `obj`: one serialization in C instead of a walk of every
    mapping in it, which the few objects that pass this still get (a Job's pod as the API server sends
    it: 6 us against about 60 us for the walk). Marshal writes an ASCII string's own bytes the first
    time it meets it; later sightings of the same string may be references, but one is enough."""
    if not isinstance(obj, dict):  # marshal takes only the built-in containers JSON decodes to
        return True
    blob = marshal.dumps(obj)
    return any(key in blob for key in _STATE_KEY_BYTES)


def _metadata_maps(obj: Any, path: str = "", depth: int = 0) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(path, annotations) of the object and of every `template`/`metadata` nested in its spec."""
    if not isinstance(obj, Mapping) or depth > 8:  # pod templates sit at most a few levels deep
        return
    meta = obj.get("metadata")
    if isinstance(meta, Mapping) and isinstance(meta.get("annotations"), Mapping):
        yield f"{path}metadata.annotations", meta["annotations"]
    for key, value in obj.items():
        if key in ("metadata", "status"):
            continue
        if isinstance(value, Mapping):
            yield from _metadata_maps(value, f"{path}{key}.", depth + 1)
        elif isinstance(value, list):
            for index, item in enumerate(value[:64]):
                yield from _metadata_maps(item, f"{path}{key}[{index}].", depth + 1)


def forged(obj: Mapping[str, Any]) -> list[str]:
    """Field paths where `obj` carries one of the controller's state keys."""
    if not _may_carry_state(obj):
        return []
    found = [f"{path}[{key}]" for path, written in _metadata_maps(obj) for key in sorted(STATE_KEYS) if key in written]
    return found[:MAX_REPORTED]


def forged_on_update(obj: Mapping[str, Any], old: Mapping[str, Any]) -> list[str]:
    """Field paths where an update adds a state key, or changes its value."""
    if not _may_carry_state(obj):
        return []
    before = {path: written for path, written in _metadata_maps(old)}
    found = []
    for path, written in _metadata_maps(obj):
        previous = before.get(path) or {}
        found += [
            f"{path}[{key}]" for key in sorted(STATE_KEYS) if key in written and written[key] != previous.get(key)
        ]
    return found[:MAX_REPORTED]


def made_by(user: str | None, namespace: str | None) -> str | None:
    """What a pod's creator is, from the review's user: a controller (a system identity, or a service
    account of another namespace, as kube-controller-manager's and operators' are) or a tenant (a user, or
    an account of the pod's own namespace: what a principal that may create pods there has). None when
    the user is not known (offline)."""
    if not user:
        return None
    if user.startswith("system:serviceaccount:"):
        parts = user.split(":")  # system:serviceaccount:NAMESPACE:NAME; anything else is no controller's
        foreign = len(parts) == 4 and all(parts[2:]) and parts[2] != namespace
        return contract.MADE_BY_CONTROLLER if foreign else contract.MADE_BY_TENANT
    return contract.MADE_BY_CONTROLLER if user.startswith("system:") else contract.MADE_BY_TENANT


def made_by_changed(pod: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    """Whether an update adds, changes or removes who made the pod (only the webhook writes it, once)."""
    now = ((pod.get("metadata") or {}).get("annotations") or {}).get(contract.MADE_BY_ANNOTATION)
    before = ((old.get("metadata") or {}).get("annotations") or {}).get(contract.MADE_BY_ANNOTATION)
    return bool(now != before)


def membership_changed(pod: Mapping[str, Any], old: Mapping[str, Any]) -> list[str]:
    """Field paths where a pod update adds or changes its gang membership."""
    meta, before = pod.get("metadata") or {}, old.get("metadata") or {}
    changed = []
    for holder, key in MEMBERSHIP:
        value = (meta.get(holder) or {}).get(key)
        if value is not None and value != (before.get(holder) or {}).get(key):
            changed.append(f"metadata.{holder}[{key}]")
    return changed
