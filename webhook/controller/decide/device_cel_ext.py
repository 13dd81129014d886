"""The functions of Kubernetes' CEL environment a device selector may use that cel-python lacks: the strings
extension at version 2 (k8s.io/apiserver/pkg/cel/environment/base.go: ext.Strings(ext.StringsVersion(2))
from 1.29; cel-go v0.26.0 ext/strings.go, the version Kubernetes 1.36 builds with).

Also the sets extension (`sets.contains`, `sets.equivalent`, `sets.intersects`: ext/sets.go), the lists
extension at version 2 (`lists.range`, `distinct`, `flatten`, `reverse`, `slice`, `sort`, and what its
`sortBy` macro calls: ext/lists.go), and Kubernetes' list and regular expression libraries
(k8s.io/apiserver/pkg/cel/library lists.go: `isSorted`, `sum`, `min`, `max`, `indexOf`, `lastIndexOf`;
regex.go: `find`, `findAll`). A namespaced function (`sets.contains`) is called by its whole name
(device_cel_rewrite.py).

Indices count Unicode code points, as cel-go's do over runes; an index out of range is an error.
Elements compare as CEL's heterogeneous equality does (`1 == 1.0`), which cel-python refuses.
"""

from __future__ import annotations

import re
from typing import Any

from celpy import celtypes

# Go's unicode.IsSpace over Latin-1, and Python's own test beyond it (strings.TrimSpace)
_GO_SPACE = frozenset("\t\n\v\f\r \x85\xa0")


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"no such overload: {type(value).__name__} is not a string")
    return str(value)


def _int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"no such overload: {type(value).__name__} is not an int")
    return int(value)


def _char_at(text: object, index: object) -> celtypes.StringType:
    runes, at = _text(text), _int(index)
    if at < 0 or at > len(runes):
        raise ValueError(f"index out of range: {at}")
    return celtypes.StringType(runes[at] if at < len(runes) else "")


def _equal(left: object, right: object) -> bool:
    """CEL's equality across numeric types (cel-go: heterogeneous equality); other types differ."""
    numbers = (celtypes.IntType, celtypes.UintType, celtypes.DoubleType)
    if type(left) is not type(right):
        return isinstance(left, numbers) and isinstance(right, numbers) and float(left) == float(right)
    try:
        return bool(left == right)
    except TypeError:
        return False


def _list(value: object) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"no such overload: {type(value).__name__} is not a list")
    return value


def _index_of(target: object, wanted: object, offset: object = None) -> celtypes.IntType:
    if isinstance(target, list):  # Kubernetes' lists library: the first equal element
        return celtypes.IntType(next((i for i, v in enumerate(target) if _equal(v, wanted)), -1))
    runes, sub = _text(target), _text(wanted)
    at = 0 if offset is None else _int(offset)
    if not sub:
        return celtypes.IntType(at)
    if at < 0:
        raise ValueError(f"index out of range: {at}")
    return celtypes.IntType(-1 if at >= len(runes) else runes.find(sub, at))


def _last_index_of(target: object, wanted: object, offset: object = None) -> celtypes.IntType:
    if isinstance(target, list):
        return celtypes.IntType(next((i for i in range(len(target) - 1, -1, -1) if _equal(target[i], wanted)), -1))
    runes, sub = _text(target), _text(wanted)
    if offset is None:
        if not sub:
            return celtypes.IntType(len(runes))
        if len(sub) > len(runes):
            return celtypes.IntType(-1)
        at = len(runes) - 1
    else:
        at = _int(offset)
        if not sub:
            return celtypes.IntType(at)
    if at < 0:
        raise ValueError(f"index out of range: {at}")
    if at >= len(runes) or len(sub) > len(runes):
        return celtypes.IntType(-1)
    return celtypes.IntType(runes.rfind(sub, 0, min(at, len(runes) - len(sub)) + len(sub)))


def _ascii(text: object, change: str) -> celtypes.StringType:
    return celtypes.StringType("".join(getattr(c, change)() if c.isascii() else c for c in _text(text)))


def _replace(text: object, old: object, new: object, limit: object = None) -> celtypes.StringType:
    count = -1 if limit is None else _int(limit)  # Go's strings.Replace: n < 0 is every one
    return celtypes.StringType(_text(text).replace(_text(old), _text(new), count if count >= 0 else -1))


def _split(text: object, separator: object, limit: object = None) -> celtypes.ListType:
    whole, sep = _text(text), _text(separator)
    count = -1 if limit is None else _int(limit)  # Go's strings.SplitN: 0 is none, < 0 is every one
    if count == 0:
        return celtypes.ListType([])
    if sep:
        parts = whole.split(sep, count - 1 if count > 0 else -1)
    else:  # each code point, the last holding the rest
        parts = list(whole) if count < 0 or count >= len(whole) else [*whole[: count - 1], whole[count - 1 :]]
    return celtypes.ListType([celtypes.StringType(p) for p in parts])


def _substring(text: object, start: object, end: object = None) -> celtypes.StringType:
    runes, begin = _text(text), _int(start)
    stop = len(runes) if end is None else _int(end)
    if begin > stop:
        raise ValueError(f"invalid substring range. start: {begin}, end: {stop}")
    for at in (begin, stop):
        if at < 0 or at > len(runes):
            raise ValueError(f"index out of range: {at}")
    return celtypes.StringType(runes[begin:stop])


def _trim(text: object) -> celtypes.StringType:
    whole = _text(text)
    start, stop = 0, len(whole)
    while start < stop and (whole[start] in _GO_SPACE or (whole[start] > "\xff" and whole[start].isspace())):
        start += 1
    while stop > start and (whole[stop - 1] in _GO_SPACE or (whole[stop - 1] > "\xff" and whole[stop - 1].isspace())):
        stop -= 1
    return celtypes.StringType(whole[start:stop])


_QUOTED = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    "\\": "\\\\",
    '"': '\\"',
}


def _quote(text: object) -> celtypes.StringType:
    """strings.quote (version 1): the string in double quotes, CEL's escapes for what needs them."""
    return celtypes.StringType('"' + "".join(_QUOTED.get(c, c) for c in _text(text)) + '"')


def _join(items: object, separator: object = "") -> celtypes.StringType:
    if not isinstance(items, list):
        raise TypeError(f"no such overload: {type(items).__name__} is not a list")
    return celtypes.StringType(_text(separator).join(_text(item) for item in items))


def _contains(whole: object, part: object) -> bool:
    items = _list(whole)
    return all(any(_equal(item, wanted) for item in items) for wanted in _list(part))


def _distinct(items: object) -> celtypes.ListType:
    found: list[Any] = []
    for item in _list(items):
        if not any(_equal(item, kept) for kept in found):
            found.append(item)
    return celtypes.ListType(found)


def _flatten(items: object, depth: object = 1) -> celtypes.ListType:
    levels = _int(depth)
    if levels < 0:
        raise ValueError("level must be non-negative")
    found: list[Any] = []
    for item in _list(items):
        found.extend(_flatten(item, levels - 1) if isinstance(item, list) and levels > 0 else [item])
    return celtypes.ListType(found)


def _slice(items: object, start: object, end: object) -> celtypes.ListType:
    whole, begin, stop = _list(items), _int(start), _int(end)
    if begin < 0 or stop < 0:
        raise ValueError(f"cannot slice({begin}, {stop}), negative indexes not supported")
    if begin > stop or stop > len(whole):
        raise ValueError(f"cannot slice({begin}, {stop}) of a list of length {len(whole)}")
    return celtypes.ListType(whole[begin:stop])


def _ordered(items: object) -> list[Any]:
    """The list's elements, all of one comparable type (sort, min, max, isSorted)."""
    whole = _list(items)
    if whole and (len({type(i) for i in whole}) > 1 or isinstance(whole[0], list | dict)):
        raise TypeError("list elements must be comparable and of one type")
    return whole


def _extreme(items: object, pick: Any) -> Any:
    whole = _ordered(items)
    if not whole:
        raise ValueError("the list is empty")
    return pick(whole)


def _sum(items: object) -> Any:
    whole = _list(items)
    total: Any = whole[0] if whole else celtypes.IntType(0)
    for item in whole[1:]:
        total = total + item
    return total


# k8s.io/api resource/v1 CELSelectorExpressionMaxCost: a selector costing more fails in kube-scheduler, and
# lists.range(n) costs at least n (a list of n built); the worker's memory is capped besides (cel_worker.py)
MAX_COST = 1_000_000


def _range(count: object) -> celtypes.ListType:
    size = _int(count)
    if size > MAX_COST:
        raise ValueError(f"lists.range({size}) exceeds the CEL cost limit of a selector ({MAX_COST})")
    return celtypes.ListType([celtypes.IntType(i) for i in range(size)])


def _sorted_by(items: object, keys: object) -> celtypes.ListType:
    """sortBy's list ordered by its keys (ext/lists.go sortByAssociatedKeys)."""
    whole, order = _list(items), _ordered(keys)
    if len(whole) != len(order):
        raise ValueError("sortBy: a key for each element")
    return celtypes.ListType([item for _, item in sorted(zip(order, whole, strict=True), key=lambda pair: pair[0])])


def _from_pairs(pairs: object) -> celtypes.MapType:
    """transformMap's map: each [key, value] pair (device_cel_rewrite.py)."""
    return celtypes.MapType({pair[0]: pair[1] for pair in (_list(p) for p in _list(pairs))})


def _merged(maps: object) -> celtypes.MapType:
    """transformMapEntry's map: every map made, a key made twice an error (CEL equality across numbers)."""
    merged: dict[Any, Any] = {}
    for made in _list(maps):
        if not isinstance(made, dict):
            raise TypeError("transformMapEntry: each entry must be a map")
        for key, value in made.items():
            if any(_equal(key, known) for known in merged):
                raise ValueError(f"transformMapEntry: duplicate key {key!r}")
            merged[key] = value
    return celtypes.MapType(merged)


def _find_all(text: object, pattern: object, limit: object = -1) -> celtypes.ListType:
    count = _int(limit)
    found = [celtypes.StringType(m.group(0)) for m in re.finditer(_text(pattern), _text(text))]
    return celtypes.ListType(found if count < 0 else found[:count])


def _find(text: object, pattern: object) -> celtypes.StringType:
    match = re.search(_text(pattern), _text(text))
    return celtypes.StringType(match.group(0) if match else "")


FUNCTIONS: dict[str, Any] = {
    "charAt": _char_at,
    "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
    "lowerAscii": lambda text: _ascii(text, "lower"),
    "upperAscii": lambda text: _ascii(text, "upper"),
    "replace": _replace,
    "split": _split,
    "substring": _substring,
    "trim": _trim,
    "join": _join,
    "strings.quote": _quote,
    "sets.contains": lambda whole, part: celtypes.BoolType(_contains(whole, part)),
    "sets.equivalent": lambda a, b: celtypes.BoolType(_contains(a, b) and _contains(b, a)),
    "sets.intersects": lambda a, b: celtypes.BoolType(any(_contains(a, [item]) for item in _list(b))),
    "lists.range": _range,
    "distinct": _distinct,
    "flatten": _flatten,
    "reverse": lambda items: celtypes.ListType(_list(items)[::-1]),
    "slice": _slice,
    "sort": lambda items: celtypes.ListType(sorted(_ordered(items))),
    "lists.sortByKeys": _sorted_by,
    "maps.fromPairs": _from_pairs,
    "maps.merged": _merged,
    "isSorted": lambda items: celtypes.BoolType(_ordered(items) == sorted(_ordered(items))),
    "sum": _sum,
    "min": lambda items: _extreme(items, min),
    "max": lambda items: _extreme(items, max),
    "find": _find,
    "findAll": _find_all,
}
