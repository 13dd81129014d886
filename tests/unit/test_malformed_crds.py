"""Custom resources reach mutating admission before the API server checks them against their CRD
(built-in kinds are typed first): every upstream example, with fields swapped for values of the wrong
type, gets a well-formed answer through the handler, a 422 naming a field path when it is refused,
and never a 500."""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import builders as b
from webhook.admission.bootstrap import WebhookSettings, build_resolver
from webhook.admission.handler import Handler

EXAMPLES = Path(__file__).resolve().parents[3] / "shared" / "examples"
WRONG = [None, 0, -1, 2**40, "x", "", [], {}, [1], {"a": 1}, True, 1.5, [{}], [None]]
BUILT_IN = ("v1", "batch/v1", "apps/v1")


def custom_resources() -> list[dict[str, Any]]:
    docs = [d for f in sorted(EXAMPLES.rglob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]
    return [d for d in docs if isinstance(d, dict) and d.get("apiVersion") not in BUILT_IN]


def paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for key, child in children:
        yield from paths(child, (*prefix, key))


def mutations(doc: dict[str, Any], count: int, seed: int) -> Iterator[dict[str, Any]]:
    rng = random.Random(seed)
    candidates = [p for p in paths(doc) if len(p) > 1 and p[0] == "spec"]  # metadata is checked first
    for _ in range(count):
        mutated = copy.deepcopy(doc)
        for path in rng.sample(candidates, min(2, len(candidates))):
            holder: Any = mutated
            try:
                for step in path[:-1]:
                    holder = holder[step]
                holder[path[-1]] = copy.deepcopy(rng.choice(WRONG))
            except (KeyError, IndexError, TypeError):
                continue  # an earlier swap removed the path
        yield mutated


@pytest.mark.parametrize("backend", ["volcano", "native", "gate"])
def test_wrong_typed_custom_resources_are_refused_with_a_field_path_never_a_500(backend: str) -> None:
    handler = Handler(build_resolver(WebhookSettings(backend=backend)))
    refused = 0
    for index, doc in enumerate(custom_resources()):
        doc.setdefault("metadata", {})["namespace"] = "team-a"
        for mutated in mutations(doc, 40, seed=index):
            status, document = handler.handle("mutate", json.dumps(b.review(mutated)).encode())
            response = document["response"]
            assert status == 200, document
            assert response.get("status", {}).get("code") != 500, (mutated, response)
            if not response["allowed"] and response["status"]["code"] == 422:
                refused += 1
                assert "Invalid value" in response["status"]["message"], response
    assert refused > 100  # the swaps do reach the fields gangkeeper reads
