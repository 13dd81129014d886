"""Rules of the code's shape that hold by test (issue 77): kind facts live in the kind records of
webhook/gangs/ (kinds.Kind), not in the controller, which asks the records."""

from __future__ import annotations

import ast
from pathlib import Path

from webhook.gangs import kinds

ROOT = Path(__file__).resolve().parents[2]
# the built-in kinds every layer names (a pod's owner, a Job's suspend): not the facts of one record
BUILT_IN = {"Pod", "Job"}


def test_the_controller_names_no_workload_kind_the_records_describe() -> None:
    named = {record.kind for record in kinds.REGISTRY.values()} - BUILT_IN
    found = []
    for path in sorted((ROOT / "webhook" / "controller").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in named:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}")
    assert not found, "kind facts belong on the kind's record in webhook/gangs/: " + ", ".join(found)


MAX_LINES = 400
# modules over MAX_LINES, each held to its size until it is split: none left since issue 77 split six
OVER: dict[str, int] = {}


def test_no_module_grows_past_its_limit() -> None:
    found = []
    for path in sorted((ROOT / "webhook").rglob("*.py")):
        name = str(path.relative_to(ROOT))
        lines = len(path.read_text().splitlines())
        if lines > OVER.get(name, MAX_LINES):
            found.append(f"{name}: {lines} lines (limit {OVER.get(name, MAX_LINES)})")
    assert not found, "split these modules: " + ", ".join(found)
    assert all((ROOT / name).exists() for name in OVER), "a module split or gone: take it off OVER"


# attributes holding a dict, set or list on the classes of run/ and act/ (issue 77: at most 10 besides the
# work queue, none of them a gang's memory between passes). None may be added; one moved comes off.
CONTAINERS_LEFT = {
    # this pass's status writes, flushed at its end; every Gang object listed where no watch runs (a mirror
    # of the API's objects, as an informer's cache is: tests/fake/test_store.py MIRRORS)
    "act/gangobject.py": {"_deferred", "_listed"},
    "act/release.py": {"_sending"},  # this pass's release PATCHes in flight, awaited at its end
    "act/report.py": {"_partly"},  # units held partly per mechanism and resource: a metric's last value
    "act/uninstall.py": {"gates", "resumed", "failed"},  # what one uninstall did: a value, not memory
    "run/reconciler.py": {"informers"},
    "run/workqueue.py": {"_due", "_heap", "_failures", "_retry_at"},
}


CONTAINER_MAKERS = {"dict", "set", "list", "defaultdict", "OrderedDict", "Counter"}


def _makes_container(value: ast.expr | None) -> bool:
    if isinstance(value, ast.Dict | ast.Set | ast.List | ast.DictComp | ast.SetComp | ast.ListComp):
        return True
    if not isinstance(value, ast.Call):
        return False
    if isinstance(value.func, ast.Name) and value.func.id in CONTAINER_MAKERS:
        return True
    return any(k.arg == "default_factory" for k in value.keywords)  # a dataclass field made per instance


def _container_attributes(tree: ast.AST) -> set[str]:
    """The attributes of a module's classes that hold a container: `self.x = {}` in a method, or a
    dataclass field with a default_factory."""
    found = set()
    for cls in (node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)):
        for statement in cls.body:
            is_field = isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)
            if is_field and _makes_container(statement.value):
                found.add(statement.target.id)
        for node in ast.walk(cls):
            if isinstance(node, ast.AnnAssign | ast.Assign) and _makes_container(node.value):
                targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
                found.update(
                    t.attr
                    for t in targets
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
                )
    return found


def test_no_class_in_run_or_act_gains_memory_of_its_own() -> None:
    """Per-gang memory lives in one record per gang (observe/store.py), not in dicts on the classes that
    act; this list only shrinks."""
    controller = ROOT / "webhook" / "controller"
    found = {}
    for room in ("run", "act"):
        for path in sorted((controller / room).glob("*.py")):
            names = _container_attributes(ast.parse(path.read_text()))
            if names:
                found[str(path.relative_to(controller))] = names
    assert found == CONTAINERS_LEFT, "per-gang memory belongs on the gang's record in observe/store.py"


def test_the_controller_asks_a_mechanisms_record_not_its_name() -> None:
    """What the controller does differently per mechanism is a fact on the mechanism's record
    (webhook/backends: gangkeeper_places, autoscaler_sees_part, stops_retrying), never `name == "volcano"`."""
    from webhook.backends import Coscheduling, Gate, Native, Volcano

    names = {backend.name for backend in (Gate, Volcano, Coscheduling, Native)}
    found = []
    for path in sorted((ROOT / "webhook" / "controller").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                for side in (node.left, *node.comparators):
                    if isinstance(side, ast.Constant) and side.value in names:
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno} {side.value!r}")
    assert not found, "ask the mechanism's record: " + ", ".join(found)


def test_no_function_in_gangkeeper_passes_complexity_15_unsaid() -> None:
    """ruff's C901 holds every function to complexity 15 (pyproject.toml); none in webhook/ may opt out."""
    opted = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "webhook").rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "noqa: C901" in line
    ]
    assert not opted, "split these functions (complexity over 15): " + ", ".join(opted)


def test_the_layout_names_every_module() -> None:
    """docs/development.md's "Every module" lists each module of webhook/ under its package, and nothing
    that is not there (issue 98: 25 controller modules were missing from the layout)."""
    text = (ROOT / "docs" / "development.md").read_text()
    section = text.split("### Every module", 1)[1].split("\n## ", 1)[0]
    listed: set[str] = set()
    package = ""
    for line in section.splitlines():
        if line.startswith("- `webhook"):
            package = line.split("`")[1].rstrip("/")
        elif line.startswith("  - `") and package:
            listed.add(f"{package}/{line.split('`')[1]}")
    modules = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "webhook").rglob("*.py")
        if path.name != "__init__.py" and "__pycache__" not in path.parts
    }
    assert sorted(modules - listed) == [], "modules docs/development.md does not list"
    assert sorted(listed - modules) == [], "listed in docs/development.md, not in webhook/"


# functions of decide/ whose answers functools keeps (pure functions of their arguments: the same
# arguments, the same answer). None may be added; each moved to the observe side comes off.
MEMOS_LEFT = {
    "device_capacity.py": {"consumption"},
    "device_cel.py": {"compiled"},
    "device_cel_fast.py": {"_environment", "fast_selector"},
    "device_cel_optional.py": {"_parser"},
    "device_reads.py": {"kept_names", "reads"},
}
MUTATORS = {"append", "extend", "insert", "pop", "popitem", "clear", "update", "setdefault", "add", "discard", "remove"}


def _root_name(node: ast.expr) -> str | None:
    while isinstance(node, ast.Subscript | ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _memo_decorator(text: str) -> bool:
    """functools' process-wide memos (`lru_cache`, `cache`), not an instance's `cached_property`."""
    return "lru_cache" in text or text.rpartition(".")[2] == "cache"


def _module_memory(tree: ast.Module) -> set[str]:
    """A module's globals written after it is loaded (an item or attribute set or deleted, a mutating
    method called, `global`), its locks, and its memo decorators."""
    names = {
        target.id
        for statement in tree.body
        if isinstance(statement, ast.Assign | ast.AnnAssign)
        for target in (statement.targets if isinstance(statement, ast.Assign) else [statement.target])
        if isinstance(target, ast.Name)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            found.update(node.names)
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Delete):
            targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]
            found.update(
                root
                for target in targets
                if isinstance(target, ast.Subscript | ast.Attribute) and (root := _root_name(target)) in names
            )
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
            if (root := _root_name(node.func.value)) in names:
                found.add(root)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            found.update("threading" for m in modules if m.split(".")[0] == "threading")
        elif isinstance(node, ast.FunctionDef):
            found.update(f"@{node.name}" for d in node.decorator_list if _memo_decorator(ast.unparse(d)))
    return found


def test_decide_keeps_no_memory_of_its_own() -> None:
    """decide/ is values in, decisions out (issue 98): no module global written after the module is
    loaded, no lock. What outlives a call is the observe side's (the slices parsed: observe/pool_book.py;
    the pods' shapes: observe/holds.py ShapesSeen). Only the memos of pure functions are left, listed."""
    found = {}
    for path in sorted((ROOT / "webhook" / "controller" / "decide").glob("*.py")):
        memory = _module_memory(ast.parse(path.read_text()))
        memos = {name[1:] for name in memory if name.startswith("@")}
        if memory - {f"@{m}" for m in memos}:
            found[path.name] = sorted(memory - {f"@{m}" for m in memos})
        if memos != MEMOS_LEFT.get(path.name, set()):
            found[path.name + " memos"] = sorted(memos)
    assert found == {}, "decide/ keeps memory: move it to observe/ (or take a memo off MEMOS_LEFT)"
