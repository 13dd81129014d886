"""The real tier's order on a fresh machine (tests/conftest.py) follows what `hack/cluster/build.sh rest`
builds beside it, and in which order: a module that waits for a component it was not staged for holds
one of the two workers for the whole build (cold CI at c9fba8a: 1,747 s in one setup)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import NEED_THE_REST, REST_BUILD_ORDER

ROOT = Path(__file__).resolve().parents[2]

# how a real-tier module asks for each component the rest of the build makes
USES = {
    "scheduler-plugins": re.compile(r"\bcosched: Stack\b"),
    "newest": re.compile(r"\bK8S_NEWEST\b"),
    "volcano": re.compile(r"\bvc: Stack\b"),
    "kuberay": re.compile(r"\boperators\.kuberay\b"),
    "training-operator": re.compile(r"\boperators\.training_operator\b"),
    "karpenter": re.compile(r"\bkarpenter\.\w+\("),
    "kueue": re.compile(r"\boperators\.kueue\b"),
}


def test_the_build_order_named_for_the_tests_is_build_sh_s() -> None:
    script = (ROOT / "hack/cluster/build.sh").read_text()
    rest = re.search(r"^\s*rest\) (.*) ;;$", script, re.M)
    assert rest is not None
    built = [
        "newest" if word == '"$K8S_NEWEST";' else word.rstrip(";")
        for word in rest.group(1).split()
        if word not in ('"$0"', "k8s")
    ]
    assert tuple(built) == REST_BUILD_ORDER


def test_each_module_is_staged_after_the_last_component_it_uses() -> None:
    found: dict[str, str] = {}
    for path in sorted((ROOT / "tests/real").glob("test_real_*.py")):
        text = path.read_text()
        used = [component for component, use in USES.items() if use.search(text)]
        if used:
            found[path.stem] = max(used, key=REST_BUILD_ORDER.index)
    assert found == NEED_THE_REST


def test_every_real_tier_module_is_staged_as_the_real_tier() -> None:
    """Unmarked, a module runs among the unit tests, before the build beside them has made what it uses,
    and skips (test_real_groups did until 2026-12-07: KubeRay is built late)."""
    unmarked = [
        path.name
        for path in sorted((ROOT / "tests/real").glob("test_real_*.py"))
        if not re.search(r"^pytestmark = pytest\.mark\.cluster\b", path.read_text(), re.M)
    ]
    assert unmarked == []
