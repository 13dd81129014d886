"""What tenants' device objects may cost one pass (CEL selectors, constraint searches), charged to the
namespace that wrote them.

The sandbox (cel_sandbox.py) bounds one evaluation; this bounds the sum. Each pass has PASS_SECONDS of
CEL for all tenants together, shared equally among the namespaces whose selectors were asked for in the
pass before (never less than MIN_SHARE_SECONDS each): one namespace's selectors, however many and
however dear, cost another team's pass at most its share, and a namespace past its share has the rest
of its evaluations deferred to later passes, while every other namespace's are answered in the same
pass. DeviceClass selectors are the cluster administrator's, charged to no tenant and never deferred.

kube-apiserver bounds a CEL expression before it runs (an estimated cost refused at admission) and
counts its actual cost per call (k8s.io/apiserver/pkg/cel, `PerCallLimit`); kube-scheduler's and
Kueue's fairness is by share. A selector here is bounded by what it costs in this process, which is
what the other teams wait on, not by an estimate of what it would cost in Go.

An expression whose evaluations cost on average more than DEAR_FRACTION of the sandbox's per-evaluation
CPU budget, over at least DEAR_AFTER evaluations, is taken as over budget (`dear`): a selector that runs
just under the limit on every device of a cluster would otherwise be paid for again at every pass.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

PASS_SECONDS = 1.0  # of CEL evaluation per pass, every tenant together
MIN_SHARE_SECONDS = 0.05  # a namespace's share is never less (a thousand namespaces: a pass is longer)
CLUSTER = ""  # the payer of DeviceClass selectors: the administrator's, never deferred
DEAR_FRACTION = 0.2  # of the sandbox's CPU budget per evaluation (cel_sandbox.CPU_BUDGET_SECONDS)
DEAR_AFTER = 4  # evaluations of one expression before its mean cost can make it dear
MAX_EXPRESSIONS_COSTED = 4096  # expressions whose cost is followed, least recent out
MAX_DEFERRED_NAMESPACES = 4096
# what outlives this process, on the controller's Lease (run/leader.py): a restart or a new leader does
# not pay again for an expression already found over budget, nor forget since when a namespace waits
OVER_BUDGET_KEY = "gangkeeper.io/over-budget-selectors"  # sha256 prefixes of the expressions, comma-separated
DEFERRED_KEY = "gangkeeper.io/deferred-namespaces"  # {namespace: since (epoch seconds)}, JSON
MAX_REMEMBERED_OVER = 512  # 25 characters each: 13 KiB of the Lease's annotations at most
MAX_REMEMBERED_DEFERRED = 256


@dataclass
class Cost:
    seconds: float = 0.0
    evaluations: int = 0


class TenantBudget:
    """The devices Memo's ledger (decide/device_memo.Ledger): what each namespace spent this pass, who
    is deferred since when, and each expression's mean cost."""

    def __init__(
        self,
        evaluation_budget: float = 0.5,
        clock: Callable[[], float] = time.thread_time,
        pass_seconds: float = PASS_SECONDS,
        wall: Callable[[], float] = time.time,
    ) -> None:
        """`clock`: the CPU seconds that evaluations use (the sandbox's workers' own, their starts aside;
        this thread's for an evaluator in process): a namespace pays what its selectors cost, not what a
        loaded node made them wait."""
        self.pass_seconds = pass_seconds
        self.dear_seconds = DEAR_FRACTION * evaluation_budget
        self.clock, self.wall = clock, wall
        self.cpu = time.thread_time  # the controller's own work for a tenant: its constraint searches
        self.spent: dict[str, float] = {}  # this pass, by namespace
        self._payers_before = 1  # namespaces charged in the pass before: this pass's shares
        # namespace -> the wall time since which it has been deferred in every pass, least recent out
        self.deferred_since: OrderedDict[str, float] = OrderedDict()
        self._deferred_now: set[str] = set()
        self.deferrals = 0  # evaluations deferred for a namespace's share (a metric)
        self._costs: OrderedDict[str, Cost] = OrderedDict()
        self._over: OrderedDict[str, None] = OrderedDict()  # digests of expressions found over budget
        self._recalled: Mapping[str, str] | None = None  # the Lease's annotations, taken at the next pass
        self.remembered: dict[str, str] = {}  # what the leader writes on its Lease, replaced whole each pass

    def new_pass(self) -> None:
        """A pass begins: every share is whole again, divided among the namespaces of the pass before; a
        namespace not deferred in the pass before is no longer deferred."""
        recalled, self._recalled = self._recalled, None
        if recalled is not None:
            self._take_back(recalled)
        tenants = [payer for payer in self.spent if payer != CLUSTER]
        self._payers_before = max(1, len(tenants))
        for namespace in [n for n in self.deferred_since if n not in self._deferred_now]:
            del self.deferred_since[namespace]
        self.spent, self._deferred_now = {}, set()
        since = dict(list(self.deferred_since.items())[-MAX_REMEMBERED_DEFERRED:])
        self.remembered = {
            OVER_BUDGET_KEY: ",".join(list(self._over)[-MAX_REMEMBERED_OVER:]),
            DEFERRED_KEY: json.dumps({n: round(t) for n, t in since.items()}, sort_keys=True),
        }

    def recall(self, annotations: Mapping[str, str]) -> None:
        """What an earlier leader wrote on the Lease, taken at the next pass (called from the elector's
        thread: only this one reference is written there)."""
        self._recalled = dict(annotations)

    def _take_back(self, annotations: Mapping[str, str]) -> None:
        for digest in str(annotations.get(OVER_BUDGET_KEY) or "").split(",")[-MAX_REMEMBERED_OVER:]:
            if _DIGEST.fullmatch(digest):
                self._over[digest] = None
        try:
            since = json.loads(str(annotations.get(DEFERRED_KEY) or "{}"))
        except ValueError:
            since = {}
        if isinstance(since, dict):
            for namespace, at in list(since.items())[-MAX_REMEMBERED_DEFERRED:]:
                if isinstance(namespace, str) and isinstance(at, int | float):
                    self.deferred_since.setdefault(namespace, float(at))
                    self._deferred_now.add(namespace)  # still deferred until a pass says otherwise

    def over_budget(self, expression: str) -> None:
        """The expression ran over its budget (the sandbox stopped it, or it is `dear`): remembered."""
        self._over[digest(expression)] = None
        self._over.move_to_end(digest(expression))
        while len(self._over) > MAX_REMEMBERED_OVER:
            self._over.popitem(last=False)

    @property
    def share(self) -> float:
        return max(self.pass_seconds / self._payers_before, MIN_SHARE_SECONDS)

    def left(self, payer: str) -> float:
        """Seconds of CEL the payer may still spend in this pass."""
        if payer == CLUSTER:
            return float("inf")
        return self.share - self.spent.setdefault(payer, 0.0)

    def charge(self, payer: str, expression: str, seconds: float, evaluations: int) -> None:
        """Seconds spent for the payer: on `evaluations` of an expression, or (none) on its searches."""
        self.spent[payer] = self.spent.get(payer, 0.0) + seconds
        if not evaluations:
            return
        cost = self._costs.pop(expression, None) or Cost()
        cost.seconds += seconds
        cost.evaluations += evaluations
        self._costs[expression] = cost
        while len(self._costs) > MAX_EXPRESSIONS_COSTED:
            self._costs.popitem(last=False)

    def dear(self, expression: str) -> str | None:
        """Why the expression is taken as over budget: its mean cost per evaluation, or that it was found
        over budget before (by this process or, on the Lease, an earlier leader); None when it is not."""
        if digest(expression) in self._over:
            return "ran over its budget before (in this controller or the leader before it): not evaluated again"
        cost = self._costs.get(expression)
        if cost is None or cost.evaluations < DEAR_AFTER:
            return None
        mean = cost.seconds / cost.evaluations
        if mean < self.dear_seconds:
            return None
        return (
            f"costs {mean * 1000:.0f} ms a device on average over {cost.evaluations} devices "
            f"(more than {self.dear_seconds * 1000:.0f} ms): taken as over its budget"
        )

    def defer(self, payer: str, evaluations: int) -> str:
        """The payer's evaluations left to a later pass: why, as its Gang says it."""
        self.deferrals += evaluations
        self._deferred_now.add(payer)
        since = self.deferred_since.setdefault(payer, self.wall())
        while len(self.deferred_since) > MAX_DEFERRED_NAMESPACES:
            self.deferred_since.popitem(last=False)
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since))
        return (
            f"namespace {payer} spent its share of this pass's CEL budget ({self.share:.2f} s), deferred "
            f"since {at}: its device selectors are evaluated over later passes"
        )


_DIGEST = re.compile(r"[0-9a-f]{24}")


def digest(expression: str) -> str:
    """An expression's name on the Lease: its text is a tenant's, and up to 10 KiB."""
    return hashlib.sha256(expression.encode()).hexdigest()[:24]
