"""docs/security.md lists every API write the webhook's process makes: a module that writes without a row
in its table "What answering a review writes" fails here, and so does a row whose module no longer does."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# what runs in the webhook's pods (webhook/cli/serve.py and everything it serves with); the controller's
# writes are its RBAC's, checked verb by verb in tests/fake/test_manifests.py
WEBHOOK_PROCESS = [
    *sorted((ROOT / "webhook" / "admission").rglob("*.py")),
    *sorted((ROOT / "webhook" / "serving").rglob("*.py")),
    *sorted((ROOT / "webhook" / "backends").rglob("*.py")),
    ROOT / "webhook" / "certsync.py",
    ROOT / "webhook" / "rotation.py",
    ROOT / "webhook" / "informer.py",
    ROOT / "webhook" / "cli" / "serve.py",
]
WRITE_METHODS = {"create", "merge_patch", "merge_patched", "strategic_patched", "delete"}
READ_VERBS = {"GET"}


def writes_in(source: str) -> list[str]:
    """The API writes a module's code makes: the Api's write conveniences, and `request` with a verb
    other than GET (or one not written out)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        name = node.func.attr
        if name in WRITE_METHODS and node.args:
            found.append(name)
        elif name == "request" and node.args:
            verb = node.args[0]
            if not (isinstance(verb, ast.Constant) and verb.value in READ_VERBS):
                found.append(f"request {ast.unparse(verb)}")
    return found


def documented_modules() -> set[str]:
    text = (ROOT / "docs" / "security.md").read_text()
    section = text.split("## What answering a review writes", 1)[1]
    return set(re.findall(r"^\| `(webhook/[\w/]+\.py)` \|", section, re.M))


def test_every_write_of_the_webhooks_process_has_a_row_in_the_security_page() -> None:
    writing = {str(path.relative_to(ROOT)): calls for path in WEBHOOK_PROCESS if (calls := writes_in(path.read_text()))}
    documented = documented_modules()
    missing = {module: calls for module, calls in writing.items() if module not in documented}
    assert not missing, f"API writes with no row in docs/security.md's 'What answering a review writes': {missing}"
    stale = documented - set(writing)
    assert not stale, f"rows of docs/security.md for modules that write nothing: {stale}"


def test_the_scan_finds_a_write() -> None:
    """The scan itself: a new side effect of admission is found, in either spelling."""
    assert writes_in('self.api.request("POST", path, body=x)') == ["request 'POST'"]
    assert writes_in("api.merge_patch(path, {})") == ["merge_patch"]
    assert writes_in('api.request("GET", path)') == []


def test_every_test_the_security_page_cites_exists() -> None:
    """Each claim's "shown by": the file is there, and so is each test it names (`::name`, the file the
    last one named when it is left out)."""
    text = (ROOT / "docs" / "security.md").read_text()
    missing = []
    for row in re.findall(r"^\|.*$", text, re.M):
        current: Path | None = None
        for path, name in re.findall(r"`(tests/[\w/]+\.py)?(?:::(\w+))?", row):
            if path:
                current = ROOT / path
                if not current.exists():
                    missing.append(path)
                    continue
            if name and current is not None and f"def {name}(" not in current.read_text():
                missing.append(f"{current.relative_to(ROOT)}::{name}")
    assert not missing, f"docs/security.md cites tests that do not exist: {missing}"
