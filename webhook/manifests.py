"""Reading manifests as kubectl reads them (`kubectl apply -f`): files, directories, standard input,
multi-document YAML or JSON, and `kind: List`, each object with where it came from.

Duplicate keys are refused as kubectl's strict decoding refuses them (sigs.k8s.io/yaml's
`yaml: unmarshal errors: ... already set in map`): two objects pasted one after the other without a
`---` between them would otherwise collapse into the last one, silently.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import yaml

# what kubectl takes from a directory (k8s.io/cli-runtime pkg/resource/visitor.go FileExtensions)
EXTENSIONS = (".json", ".yaml", ".yml")


class ManifestError(ValueError):
    """One line: the source, the line, what is wrong."""


@dataclass(frozen=True)
class Document:
    source: str  # the file, or "-" for standard input
    obj: Any


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping."""


def _strict_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
    seen: dict[Hashable, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if isinstance(key, Hashable) and key in seen:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"key {key!r} already set in the object begun on line {node.start_mark.line + 1}"
                " (two objects without a '---' between them?)",
                key_node.start_mark,
            )
        if isinstance(key, Hashable):
            seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _strict_mapping)


def _files(source: str) -> list[Path]:
    path = Path(source)
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.is_file() and p.suffix in EXTENSIONS)
    return [path]


def _expanded(obj: Any) -> Iterator[Any]:
    """A `kind: List` (or any `*List` with items, as `kubectl get -o yaml` prints) is its items."""
    if isinstance(obj, dict) and str(obj.get("kind", "")).endswith("List") and isinstance(obj.get("items"), list):
        for item in obj["items"]:
            yield from _expanded(item)
    elif obj is not None:
        yield obj


def parse(text: str, source: str) -> list[Document]:
    try:
        loaded = list(yaml.load_all(text, Loader=_StrictLoader))
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        where = f"{source}: line {mark.line + 1}" if mark is not None else source
        kind = "" if isinstance(error, yaml.constructor.ConstructorError) else "not valid YAML: "
        raise ManifestError(f"{where}: {kind}{error.problem or error}") from None
    except yaml.YAMLError as error:
        raise ManifestError(f"{source}: not valid YAML: {error}") from None
    return [Document(source, obj) for doc in loaded for obj in _expanded(doc)]


def read(sources: list[str], stdin: TextIO) -> list[Document]:
    """Every object of every source, in order; `-` is standard input (read once)."""
    documents: list[Document] = []
    for source in sources:
        if source == "-":
            documents += parse(stdin.read(), "-")
            continue
        files = _files(source)
        if not files:
            raise ManifestError(f"{source}: no {', '.join(EXTENSIONS)} files in the directory")
        for path in files:
            try:
                text = path.read_text()
            except OSError as error:
                raise ManifestError(f"cannot read {path}: {error.strerror or error}") from None
            documents += parse(text, str(path))
    return documents
