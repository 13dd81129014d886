"""Which gangs a watched object's change concerns.

A gang is looked at afresh (its workload read, its group objects synced) when its pods, its workload or
one of its group objects changed. The pods' changes reach the gang through the cluster index; this maps
the others: each gang's workload and group objects are indexed by the informer key they are cached
under, so an informer's changes name exactly the gangs to wake, as a controller-runtime watch maps an
object to the keys it enqueues (pkg/handler/enqueue_mapped.go). A steady pass reads no object per gang.

State: owned by the reconciler, one pass at a time; a gang's entry is rebuilt only when its pods changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from webhook import contract
from webhook.kube import Resource

if TYPE_CHECKING:
    from webhook.controller.observe.gangview import GangView
    from webhook.informer import Informer

# (group/version, plural, "namespace/name"): an object as an informer caches it
WatchKey = tuple[str, str, str]


class RelatedObjects:
    def __init__(self) -> None:
        self._of_gang: dict[str, tuple[int, frozenset[WatchKey]]] = {}
        self._gangs_of: dict[WatchKey, set[str]] = {}

    def note(self, gang: str, pods_version: int, keys: Callable[[], Iterable[WatchKey]]) -> None:
        """The objects `gang` is concerned with, worked out again only when its pods changed."""
        known = self._of_gang.get(gang)
        if known is not None and known[0] == pods_version:
            return
        before = known[1] if known is not None else frozenset()
        after = frozenset(keys())
        self._unlink(gang, before - after)
        for key in after - before:
            self._gangs_of.setdefault(key, set()).add(gang)
        self._of_gang[gang] = (pods_version, after)

    def touched(self, changed: Iterable[WatchKey]) -> set[str]:
        """The gangs these objects' changes concern."""
        found: set[str] = set()
        for key in changed:
            found |= self._gangs_of.get(key, set())
        return found

    def keep_only(self, live: Iterable[str]) -> None:
        for gang in self._of_gang.keys() - set(live):
            self._unlink(gang, self._of_gang.pop(gang)[1])

    def clear(self) -> None:
        self._of_gang.clear()
        self._gangs_of.clear()

    def _unlink(self, gang: str, keys: Iterable[WatchKey]) -> None:
        for key in keys:
            gangs = self._gangs_of.get(key)
            if gangs is not None:
                gangs.discard(gang)
                if not gangs:
                    del self._gangs_of[key]


def watch_keys(
    gang: GangView, workload_resource: Callable[[str], Resource | None], group_resources: Iterable[Resource]
) -> list[WatchKey]:
    """The watched workload and group objects of a gang: a scale-up or a deleted PodGroup concerns it,
    so the gang is looked at again at once, not at the next resync."""
    stamp = gang.pods[0].annotations.get(contract.WORKLOAD_ANNOTATION, "")
    kind, _, rest = stamp.partition("/")
    keys = []
    workload = workload_resource(kind)
    if workload is not None:
        keys.append((workload.group_version, workload.plural, f"{gang.namespace}/{rest.split('/')[0]}"))
    keys += [(r.group_version, r.plural, f"{gang.namespace}/{gang.name}") for r in group_resources]
    return keys


def drained(informers: Mapping[tuple[str, str], Informer]) -> list[WatchKey]:
    """What the watched workloads and group objects changed since the last pass (the informers' changes,
    drained: the reconciler is the one reader that drains; others `follow`)."""
    return [
        (group_version, plural, key)
        for (group_version, plural), informer in list(informers.items())
        for key in informer.drain()
    ]
