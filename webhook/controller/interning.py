"""Sharing what many cached pods have in common, so 150,000 pods fit the controller's memory.

Pods of one workload carry identical container resources; the cache keeps one read-only copy of each
distinct value (and of repeated strings: namespaces, node names, phases) instead of one per pod.
Canonical values live as long as the process, so their identity can key caches of what is computed
from them (a pod's scheduling shape).
"""

from __future__ import annotations

import json
import sys
from typing import Any

MAX_DISTINCT = 50_000  # beyond this many distinct values, new ones are kept per pod (memory stays bounded)

_canonical: dict[str, Any] = {}
_canonical_ids: set[int] = set()


def canonical(value: Any) -> Any:
    """One shared copy of a JSON value; callers must never modify what they get back."""
    if not value:
        return value
    key = json.dumps(value, sort_keys=True, separators=(",", ":"))
    found = _canonical.get(key)
    if found is not None:
        return found
    if len(_canonical) >= MAX_DISTINCT:
        return value
    _canonical[key] = value
    _canonical_ids.add(id(value))
    return value


def is_canonical(value: Any) -> bool:
    return id(value) in _canonical_ids


def text(value: Any) -> Any:
    """An interned string (one object for every pod that names this node or namespace)."""
    return sys.intern(value) if isinstance(value, str) else value
