"""A gang as the controller's index shows it: its pods' views and objects, and what the index tallied of
them (observe/cluster.py makes these)."""

from __future__ import annotations

from dataclasses import dataclass, field

from webhook.controller.decide.pods import PodView
from webhook.gangs.model import Obj


@dataclass
class GangView:
    namespace: str
    name: str
    pods: list[PodView] = field(default_factory=list)
    raw: list[Obj] = field(default_factory=list)
    # made once: a pass asks for it a few dozen times per gang
    key: str = field(init=False, repr=False, compare=False)
    # what the index tallied of its pods as they changed (None: not known, read off the pods): the
    # mechanisms whose marks they carry, and the uids of the workloads they were made for
    mechanisms: frozenset[str] | None = field(default=None, repr=False, compare=False)
    workload_uids: frozenset[str] | None = field(default=None, repr=False, compare=False)
    # the index's roster version of the gang when the view was made (None: not the index's): the same
    # while its members, their uids and whether each ended are (ClusterIndex.roster_versions)
    roster: int | None = field(default=None, repr=False, compare=False)
    # the last `made_for`: (the workload's uid, the view, None for this one: no cycle for the collector to
    # find, garbage.py); the index keeps a view while its pods are the same
    _made_for: tuple[str, GangView | None] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.key = f"{self.namespace}/{self.name}"

    def made_for(self, workload: Obj | None) -> GangView:
        """The gang's pods made for this very workload. A pod whose workload uid is another's was made for
        an earlier workload of the same name, since deleted (its name and labels are the same): the
        garbage collector is deleting it, and it is no member of the new one's gang."""
        uid = str(((workload or {}).get("metadata") or {}).get("uid") or "")
        if self._made_for is not None and self._made_for[0] == uid:
            return self._made_for[1] or self
        if self.workload_uids is not None and self.workload_uids <= {"", uid}:
            self._made_for = (uid, None)  # all made for it, as the index's tally says: no pod to look at
            return self
        kept = [i for i, view in enumerate(self.pods) if not uid or view.workload_uid in ("", uid)]
        made = None
        if len(kept) != len(self.pods):
            made = GangView(self.namespace, self.name, [self.pods[i] for i in kept], [self.raw[i] for i in kept])
        self._made_for = (uid, made)
        return made or self
