"""CEL's optional values, as Kubernetes' environment has them (k8s.io/apiserver/pkg/cel/environment/base.go
cel.OptionalTypes() from 1.29, at its latest version: cel-go v0.26.0 cel/library.go): the syntax
`m.?f`, `m[?k]`, `[?x]` and `{?k: v}`, the functions `optional.of`, `optional.ofNonZeroValue`,
`optional.none`, `hasValue`, `value`, `or`, `orValue`, `optMap`, `optFlatMap`, `first`, `last` and
`optional.unwrap` / `unwrapOpt`.

cel-python reads none of the syntax, so selectors are parsed here with its own grammar (celpy/cel.lark)
extended by those four forms, and the parse tree made plain CEL again: each optional form becomes a call of
a function below. Selection after an optional one is optional too, as cel-go's attributes apply
qualifiers (interpreter/attributes.go applyQualifiers: once optional, "qualify if present"); a selection on
anything but the `device` variable itself goes through `_select`, which takes an optional operand as cel-go
does, so `cel.bind(o, m.?a, o.b)` is an optional too.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import celpy
import lark
from celpy import celtypes
from celpy.evaluation import NameContainer
from lark import Token, Tree

MEMBER_RULE = "member         : member_dot | member_dot_arg | member_index | member_object | primary"
GRAMMAR_CHANGES = {
    MEMBER_RULE: MEMBER_RULE
    + " | member_dot_opt | member_index_opt\n"
    + 'member_dot_opt : member "." "?" IDENT\n'
    + 'member_index_opt : member "[" "?" expr "]"',
    'list_lit       : "[" [exprlist] "]"': 'list_lit : "[" [elements] "]"\n'
    + 'elements : (expr | opt_expr) ("," (expr | opt_expr))* [","]\n'
    + 'opt_expr : "?" expr',
    'map_lit        : "{" [mapinits] "}"': 'map_lit : "{" [entries] "}"\n'
    + 'entries : (expr | opt_expr) ":" expr ("," (expr | opt_expr) ":" expr)* [","]',
}
CALLS = ("member_dot_arg", "ident_arg", "dot_ident_arg")
ROOT = "device"  # the one variable, never optional: its own selections stay cel-python's


class Optional:
    """An optional value: `present` False is optional.none()."""

    __slots__ = ("present", "value")

    def __init__(self, present: bool, value: Any = None) -> None:
        self.present = present
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Optional) and (self.present, self.value) == (other.present, other.value)

    def __hash__(self) -> int:
        return hash((self.present, self.value))

    def __repr__(self) -> str:
        return f"optional.of({self.value!r})" if self.present else "optional.none()"


NONE = Optional(False)


@functools.cache
def _parser() -> lark.Lark:
    text = (Path(celpy.__file__).parent / "cel.lark").read_text()
    for old, new in GRAMMAR_CHANGES.items():
        if old not in text:
            raise RuntimeError(f"cel-python's grammar changed: {old!r} not found")
        text = text.replace(old, new)
    return lark.Lark(
        text,
        parser="lalr",
        start="expr",
        g_regex_flags=re.M,
        lexer_callbacks={"IDENT": celpy.celparser.CELParser.ambiguous_literals},
        propagate_positions=True,
        maybe_placeholders=False,
        priority="invert",
    )


def parse(text: str) -> Tree[Any]:
    """The selector's parse tree, its optional forms made calls of this module's functions."""
    tree = _parser().parse(text)
    plain: Tree[Any] = _plain(tree)[0]
    plain._meta = tree.meta
    return plain


def with_positions(tree: Tree[Any]) -> Tree[Any]:
    """Each node made by a rewrite given its parent's place in the text: cel-python's errors read it."""
    for node in tree.iter_subtrees_topdown():  # type: ignore[no-untyped-call]
        for child in node.children:
            if isinstance(child, Tree) and child.meta.empty:
                child._meta = node.meta
    return tree


def _plain(node: Any) -> tuple[Any, bool]:
    """(node without optional syntax, whether it is a selection chain gone optional)."""
    if not isinstance(node, Tree):
        return node, False
    if node.data == "ident_arg" and str(node.children[0]) == "has" and len(node.children) == 2:
        return _has(node), False
    parts = [_plain(child) for child in node.children]
    children = [child for child, _ in parts]
    optional = any(chained for _, chained in parts[:1]) and node.data in ("member_dot", "member_index")
    if node.data == "member":
        return Tree(node.data, children), parts[0][1]
    if node.data in ("member_dot_opt", "member_dot", "member_index_opt", "member_index"):
        return _selection(node.data, children, optional)
    if node.data == "list_lit":
        return _list_literal(children), False
    if node.data == "map_lit":
        return _map_literal(children), False
    return Tree(node.data, children), False


def _selection(rule: str, children: list[Any], chained: bool) -> tuple[Any, bool]:
    """`e.f` or `e[k]`: cel-python's own on the `device` variable's chain, else a call of `_select`, optional
    when written so or after an optional selection (the flag returned)."""
    target, key = children
    optional = rule.endswith("_opt") or chained
    if not optional and _plain_operand(target):
        return Tree(rule, children), False
    if rule.startswith("member_dot"):
        key = _string(str(key))
    return _call("optional.gkSelect", [target, key, _bool(optional)]), optional


def _has(node: Tree[Any]) -> Tree[Any]:
    """`has(e.f)` keeps its selection (the macro reads it), its operand made plain."""
    selection: Any = node.children[1]
    while isinstance(selection, Tree) and selection.data != "member_dot" and len(selection.children) == 1:
        selection = selection.children[0]
    if not isinstance(selection, Tree) or selection.data != "member_dot":
        return Tree(node.data, [node.children[0], _plain(node.children[1])[0]])
    selection.children[0] = _plain(selection.children[0])[0]
    return node


def _plain_operand(member: Any) -> bool:
    """Whether a selection's operand can never be optional: a chain of selections from `device`."""
    node = member
    while isinstance(node, Tree):
        if node.data == "ident":
            return str(node.children[0]) == ROOT
        if node.data in CALLS or node.data in ("paren_expr", "list_lit", "map_lit", "literal"):
            return False
        if node.data in ("member_dot", "member_index"):
            node = node.children[0]
            continue
        if len(node.children) != 1:
            return False
        node = node.children[0]
    return False


def _list_literal(children: list[Any]) -> Tree[Any]:
    elements = children[0].children if children else []
    if not any(e.data == "opt_expr" for e in elements):
        return Tree("list_lit", [Tree("exprlist", elements)] if elements else [])
    wrapped = [e.children[0] if e.data == "opt_expr" else _as_expr(_call("optional.of", [e])) for e in elements]
    return _call("optional.unwrap", [Tree("list_lit", [Tree("exprlist", wrapped)])]).children[0]


def _map_literal(children: list[Any]) -> Tree[Any]:
    entries = children[0].children if children else []
    keys, values = entries[0::2], entries[1::2]
    if not any(k.data == "opt_expr" for k in keys):
        return Tree("map_lit", [Tree("mapinits", entries)] if entries else [])
    pairs = [
        _as_expr(Tree("list_lit", [Tree("exprlist", [k.children[0], v])]))
        if k.data == "opt_expr"
        else _as_expr(Tree("list_lit", [Tree("exprlist", [k, _as_expr(_call("optional.of", [v]))])]))
        for k, v in zip(keys, values, strict=True)
    ]
    return _call("optional.gkEntries", [Tree("list_lit", [Tree("exprlist", pairs)])]).children[0]


def _call(name: str, arguments: list[Any]) -> Tree[Any]:
    """A call of the function `name`, as a `primary` (what a member's child is)."""
    exprs = [a if isinstance(a, Tree) and a.data == "expr" else _as_expr(a) for a in arguments]
    return Tree("primary", [Tree("ident_arg", [Token("IDENT", name), Tree("exprlist", exprs)])])


def _as_expr(node: Any) -> Tree[Any]:
    if node.data in ("list_lit", "map_lit", "literal", "ident_arg", "ident"):
        node = Tree("primary", [node])
    if node.data != "member":
        node = Tree("member", [node])
    for rule in ("unary", "multiplication", "addition", "relation", "conditionaland", "conditionalor", "expr"):
        node = Tree(rule, [node])
    return node  # type: ignore[no-any-return]


def _string(text: str) -> Tree[Any]:
    return Tree("primary", [Tree("literal", [Token("STRING_LIT", f'"{text}"')])])


def _bool(value: bool) -> Tree[Any]:
    return Tree("primary", [Tree("literal", [Token("BOOL_LIT", "true" if value else "false")])])


# --- the functions ----------------------------------------------------------------------------------------


def _present(target: Any, key: Any) -> Optional:
    """cel-go QualifyIfPresent: a map's key or a list's index when there, else none."""
    if isinstance(target, celtypes.MapType):
        return Optional(True, target[key]) if key in target else NONE
    if isinstance(target, celtypes.ListType):
        if not isinstance(key, int) or isinstance(key, bool):
            raise TypeError(f"no such overload: list index {type(key).__name__}")
        return Optional(True, target[key]) if 0 <= key < len(target) else NONE
    raise TypeError(f"no such overload: {type(target).__name__} has no fields or indexes")


def _select(target: Any, key: Any, optional: Any) -> Any:
    if isinstance(target, NameContainer) and not optional:  # a qualified name: google.protobuf.Timestamp
        if key not in target:
            raise ValueError(f"undeclared reference to {key!r}")
        return target[key].value
    if isinstance(target, Optional):
        return _present(target.value, key) if target.present else NONE
    if optional:
        return _present(target, key)
    if isinstance(target, celtypes.MapType | celtypes.ListType):
        try:
            return target[key]
        except (KeyError, IndexError) as error:  # an error value, so `||` and `&&` can absorb it
            raise ValueError(f"no such key: {key}") from error
    raise TypeError(f"no such overload: {type(target).__name__} does not support selection")


def _optional(value: Any) -> Optional:
    if not isinstance(value, Optional):
        raise TypeError(f"no such overload: {type(value).__name__} is not an optional")
    return value


def _value(value: Any) -> Any:
    if not _optional(value).present:
        raise ValueError("optional.none() dereference")
    return value.value


def _non_zero(value: Any) -> Optional:
    zero = value is None or (not isinstance(value, Optional) and not bool(value))
    return NONE if zero else Optional(True, value)


def _unwrap(items: Any) -> celtypes.ListType:
    if not isinstance(items, list):
        raise TypeError(f"no such overload: {type(items).__name__} is not a list")
    return celtypes.ListType([o.value for o in map(_optional, items) if o.present])


def _entries(pairs: Any) -> celtypes.MapType:
    made = celtypes.MapType({})
    for key, value in pairs:
        if key in made:
            raise ValueError(f"Failed with repeated key: {key}")
        if _optional(value).present:
            made[key] = value.value
    return made


def _end(items: Any, at: int) -> Optional:
    if not isinstance(items, list):
        raise TypeError(f"no such overload: {type(items).__name__} is not a list")
    return Optional(True, items[at]) if items else NONE


FUNCTIONS: dict[str, Any] = {
    "optional.of": lambda value: Optional(True, value),
    "optional.ofNonZeroValue": _non_zero,
    "optional.none": lambda: NONE,
    "optional.unwrap": _unwrap,
    "optional.gkSelect": _select,
    "optional.gkEntries": _entries,
    "unwrapOpt": _unwrap,
    "hasValue": lambda value: celtypes.BoolType(_optional(value).present),
    "value": _value,
    "orValue": lambda value, other: value.value if _optional(value).present else other,
    "or": lambda value, other: value if _optional(value).present else _optional(other),
    "first": lambda items: _end(items, 0),
    "last": lambda items: _end(items, -1),
}
