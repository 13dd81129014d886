"""The values of gangkeeper's documented workload keys, checked at apply: one rule per key that no other
part of the gang's synthesis reads and checks itself (min-member, group-size, the timeouts and the
topology keys are checked where they are read). A value the controller would otherwise ignore in
silence, falling back to its default, is refused naming the field and what it may be.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from webhook import contract, naming
from webhook.gangs import common
from webhook.gangs.model import FieldError, Obj


def _number_of_seconds(value: str) -> bool:
    try:
        return 0 < float(value) < float("inf")
    except ValueError:
        return False


@dataclass(frozen=True)
class ValueRule:
    key: str
    label: bool  # a label, else an annotation
    valid: Callable[[str], bool]
    allowed: str  # what the error says the value may be


RULES = (
    ValueRule(contract.PLACEMENT_ANNOTATION, False, lambda v: v in ("pack", "spread"), 'one of "pack", "spread"'),
    ValueRule(
        contract.EXPECTED_SECONDS_ANNOTATION,
        False,
        _number_of_seconds,
        'a positive number of seconds the workload runs once started, e.g. "3600"',
    ),
    ValueRule(
        contract.QUEUE_ANNOTATION,
        False,
        naming.is_dns_subdomain,
        "a Volcano queue's name: lowercase letters, digits, '-' and '.', e.g. team-a",
    ),
    ValueRule(contract.DEPLOYMENT_GANG_ANNOTATION, False, lambda v: v in ("true", "false"), 'one of "true", "false"'),
    ValueRule(contract.SKIP_LABEL, True, lambda v: v in ("true", "false"), 'one of "true", "false"'),
)


def errors(obj: Obj) -> list[FieldError]:
    """Each documented key of the object's metadata whose value the controller could not use."""
    found = []
    for rule in RULES:
        held = common.labels_of(obj) if rule.label else common.annotations_of(obj)
        value = held.get(rule.key)
        if value is not None and not rule.valid(str(value)):
            where = "labels" if rule.label else "annotations"
            found.append(FieldError(f"metadata.{where}[{rule.key}]", value, f"must be {rule.allowed}"))
    return found
