"""Warnings for gangkeeper.io keys gangkeeper does not read, or reads elsewhere.

The opt-in is a namespace selector, so `gangkeeper.io/enable` or `enabled: yes` would otherwise mean
no gang and no word; a misspelt annotation on a workload would be ignored just as silently. Every key
and value here is tenant input: the warnings are few and their text is bounded.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from webhook import backends, contract

P = contract.PREFIX
SYSTEM_LABEL = f"{P}/system"  # set on gangkeeper's own namespace (manifests/base/namespace.yaml)
# keys the controller writes on workloads and pods (its state, read only by itself)
CONTROLLER_KEYS = frozenset(
    f"{P}/{k}" for k in ("gang-status", "not-before", "planned-node", "release-attempts", "released-at", "suspended")
)
NAMESPACE_LABEL_VALUES: dict[str, tuple[str, ...] | None] = {
    contract.NAMESPACE_ENABLED_LABEL: ("true",),
    contract.NAMESPACE_BACKEND_LABEL: ("auto", *backends.NAMES),
    SYSTEM_LABEL: None,
}
NAMESPACE_ANNOTATIONS = frozenset({contract.NAMESPACE_SCHEDULER_ANNOTATION, contract.NAMESPACE_QUEUES_ANNOTATION})
OBJECT_LABELS = frozenset({contract.SKIP_LABEL, contract.GROUP_NAME_LABEL, contract.GROUP_LABEL})
OBJECT_ANNOTATIONS = frozenset(
    {
        contract.DEPLOYMENT_GANG_ANNOTATION,
        contract.GROUP_SIZE_ANNOTATION,
        contract.MIN_MEMBER_ANNOTATION,
        contract.QUEUE_ANNOTATION,
        contract.TIMEOUT_ANNOTATION,
        contract.RECOVERY_ANNOTATION,
        contract.EXPECTED_SECONDS_ANNOTATION,
        contract.PLACEMENT_ANNOTATION,
        contract.TOPOLOGY_REQUIRED_ANNOTATION,
        contract.TOPOLOGY_PREFERRED_ANNOTATION,
        contract.WORKLOAD_TOPOLOGY_REQUIRED_ANNOTATION,
        contract.WORKLOAD_TOPOLOGY_PREFERRED_ANNOTATION,
        contract.WORKLOAD_ANNOTATION,
        contract.SIZE_ANNOTATION,
        *CONTROLLER_KEYS,
    }
)
MAX_WARNINGS = 5
MAX_SHOWN = 80  # characters of a key or value quoted back


def _shown(text: object) -> str:
    text = str(text)
    return repr(text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "...")


def _unknown(key: str, where: str, known: frozenset[str], elsewhere: frozenset[str], other: str) -> str:
    if key in elsewhere:
        return f"{where} {_shown(key)} is read as {other}, not here: move it, or gangkeeper ignores it"
    close = difflib.get_close_matches(key, sorted(known | elsewhere), n=1, cutoff=0.75)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"{where} {_shown(key)} is not one gangkeeper reads{hint}"


def _ours(mapping: object) -> list[tuple[str, object]]:
    if not isinstance(mapping, Mapping):
        return []
    return [(str(k), v) for k, v in mapping.items() if str(k).startswith(P + "/")]


def namespace_warnings(namespace: Mapping[str, object]) -> list[str]:
    meta = namespace.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    labels, annotations = meta.get("labels"), meta.get("annotations")
    warnings = []
    label_keys = frozenset(NAMESPACE_LABEL_VALUES)
    for key, value in _ours(labels):
        allowed = NAMESPACE_LABEL_VALUES.get(key, ())
        if key not in NAMESPACE_LABEL_VALUES:
            warnings.append(_unknown(key, "namespace label", label_keys, NAMESPACE_ANNOTATIONS, "an annotation"))
        elif allowed is not None and value not in allowed:
            values = ", ".join(allowed)
            warnings.append(f"namespace label {key}: {_shown(value)} is not one of {values}: gangkeeper ignores it")
    for key, _ in _ours(annotations):
        if key not in NAMESPACE_ANNOTATIONS:
            warnings.append(_unknown(key, "namespace annotation", NAMESPACE_ANNOTATIONS, label_keys, "a label"))
    return warnings[:MAX_WARNINGS]


def object_warnings(obj: Mapping[str, object]) -> list[str]:
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    warnings = []
    for key, _ in _ours(meta.get("labels")):
        if key not in OBJECT_LABELS:
            warnings.append(_unknown(key, "label", OBJECT_LABELS, OBJECT_ANNOTATIONS, "an annotation"))
    for key, _ in _ours(meta.get("annotations")):
        if key not in OBJECT_ANNOTATIONS:
            warnings.append(_unknown(key, "annotation", OBJECT_ANNOTATIONS, OBJECT_LABELS, "a label"))
    return warnings[:MAX_WARNINGS]
