"""A selector's parse tree (cel-python's, a lark Tree) rewritten into CEL cel-python evaluates as
Kubernetes does, where Kubernetes' environment has macros cel-python lacks:

- `cel.bind(v, init, body)` (ext.Bindings, k8s.io/dynamic-resource-allocation/cel/compile.go from 1.31)
  as `[init].map(v, body)[0]`: the map macro binds `v` to the one value;
- two-variable comprehensions (ext.TwoVarComprehensions, k8s.io/apiserver environment/base.go from 1.32):
  `t.all(i, v, p)`, `exists`, `existsOne` and `transformList(i, v, [filter,] e)` as the one-variable
  macro over a list's indexes (`lists.range(size(t))`) or a map's keys, with `v` bound to `t[i]`;
  `transformMap` as the map of each index or key to what is made of it (`maps.fromPairs`), and
  `transformMapEntry` as the maps made merged (`maps.merged`: a key made twice is an error);
- the three-argument `map(x, p, e)` of standard CEL as `filter(x, p).map(x, e)`;
- the lists extension's `l.sortBy(x, key)` as `lists.sortByKeys(l, l.map(x, key))` (ext/lists.go
  sortByAssociatedKeys);
- a namespaced function (`sets.contains(a, b)`, `lists.range(n)`, `ip.isCanonical(s)`) as a call of
  the function of that whole name: cel-python reads `sets` as a variable.

Each is written as CEL text with placeholders (`__gk_*`), parsed once, and its placeholders replaced by
the selector's own parts. ValueError for a form cel-python would evaluate otherwise.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from lark import Token, Tree

BIND = "[__gk_init].map(__gk_var, __gk_body)[0]"
SORT_BY = "lists.sortByKeys(__gk_target, (__gk_target).map(__gk_x, __gk_key))"  # ext/lists.go sortBy
# a two-variable comprehension over a list (its indexes) or a map (its keys); {macro}: the one-variable one
OVER_BOTH = "cel.bind(__gk_t, __gk_target, type(__gk_t) == list ? lists.range(size(__gk_t)).{step} : __gk_t.{step})"
STEP = "{macro}(__gk_i, cel.bind(__gk_v, __gk_t[__gk_i], __gk_body))"
FILTERED = (
    "filter(__gk_i, cel.bind(__gk_v, __gk_t[__gk_i], __gk_filter))"
    ".map(__gk_i, cel.bind(__gk_v, __gk_t[__gk_i], __gk_body))"
)
# transformMap: the pairs (key or index, value made) as a map; transformMapEntry: the maps made, merged
AS_MAP = {"transformMap": "maps.fromPairs({over})", "transformMapEntry": "maps.merged({over})"}
# optMap / optFlatMap (cel-go cel/library.go): the body with the optional's value bound, when it has one
OPT_MAP = "cel.bind(__gk_o, __gk_target, __gk_o.hasValue() ? {made} : optional.none())"
OPT_BODY = "cel.bind(__gk_x, __gk_o.value(), __gk_body)"
PAIR = "[__gk_i, cel.bind(__gk_v, __gk_t[__gk_i], __gk_body)]"
ONE_VARIABLE = {
    "all": "all",
    "exists": "exists",
    "existsOne": "exists_one",
    "exists_one": "exists_one",
    "transformList": "map",
    "transformMap": "map",
    "transformMapEntry": "map",
}


class Rewriter:
    """The rewrites above, their templates parsed by `parse` when first needed; a conversion call
    (`string(x)`) renamed as `conversions` say (cel-python's writes Python's "True" for CEL's "true")."""

    def __init__(
        self, parse: Callable[[str], Tree[Any]], namespaced: frozenset[str], conversions: Mapping[str, str]
    ) -> None:
        self._parse = parse
        self._namespaced = namespaced  # the functions called by a whole name (`sets.contains`)
        self._conversions = conversions
        self._templates: dict[str, Tree[Any]] = {}

    def __call__(self, tree: Tree[Any]) -> Tree[Any]:
        return self._rewrite(tree)  # type: ignore[no-any-return]

    def _template(self, text: str) -> Tree[Any]:
        """The node of the parsed `text` that stands where a call (member_dot_arg) stood: the child of its
        outermost `member`."""
        found = self._templates.get(text)
        if found is None:
            member = next(n for n in self._parse(text).iter_subtrees_topdown() if n.data == "member")  # type: ignore[no-untyped-call]
            found = self._templates[text] = member.children[0]
        return found

    def _filled(self, text: str, parts: Mapping[str, Any]) -> Any:
        """The template with each placeholder replaced by a copy of its part, then rewritten itself."""
        filled = copy.deepcopy(self._template(text))
        for parent in list(filled.iter_subtrees()):
            for at, child in enumerate(parent.children):
                name = _ident(child) if isinstance(child, Tree) and child.data == "expr" else None
                if name is not None and name in parts:
                    parent.children[at] = copy.deepcopy(parts[name])
        return self._rewrite(filled)

    def _rewrite(self, node: Any) -> Any:
        if not isinstance(node, Tree):
            return node
        node.children = [self._rewrite(child) for child in node.children]
        if node.data == "ident_arg" and str(node.children[0]) in self._conversions and len(node.children) == 2:
            node.children[0] = Token("IDENT", self._conversions[str(node.children[0])])
        if node.data != "member_dot_arg" or not 2 <= len(node.children) <= 3:
            return node
        target, method = node.children[0], str(node.children[1])
        namespace = _ident(target)
        if f"{namespace}.{method}" in self._namespaced:
            name = Token("IDENT", f"{namespace}.{method}")
            return Tree(Token("RULE", "primary"), [Tree(Token("RULE", "ident_arg"), [name, *node.children[2:]])])
        if len(node.children) != 3 or not isinstance(node.children[2], Tree):
            return node
        arguments = node.children[2].children
        if namespace == "cel" and method == "bind" and len(arguments) == 3 and _ident(arguments[0]):
            return self._filled(BIND, dict(zip(("__gk_var", "__gk_init", "__gk_body"), arguments, strict=True)))
        if method == "map" and len(arguments) == 3 and _ident(arguments[0]):
            variable, kept, made = arguments
            filtered = Tree(
                node.data, [target, Token("IDENT", "filter"), Tree(node.children[2].data, [variable, kept])]
            )
            node.children = [
                Tree(Token("RULE", "member"), [filtered]),
                node.children[1],
                Tree(node.children[2].data, [copy.deepcopy(variable), made]),
            ]
            return node
        if method in ONE_VARIABLE and len(arguments) in (3, 4) and _ident(arguments[0]) and _ident(arguments[1]):
            return self._two_variables(target, method, arguments)
        if method in ("optMap", "optFlatMap") and len(arguments) == 2 and _ident(arguments[0]):
            made = f"optional.of({OPT_BODY})" if method == "optMap" else OPT_BODY
            parts = {"__gk_target": _as_expr(target), "__gk_x": arguments[0], "__gk_body": arguments[1]}
            return self._filled(OPT_MAP.format(made=made), parts)
        if method == "sortBy" and len(arguments) == 2 and _ident(arguments[0]):
            return self._filled(
                SORT_BY, {"__gk_target": _as_expr(target), "__gk_x": arguments[0], "__gk_key": arguments[1]}
            )
        return node

    def _two_variables(self, target: Any, method: str, arguments: list[Any]) -> Any:
        if len(arguments) == 4 and not method.startswith("transform"):
            raise ValueError(f"{method} takes three arguments")
        step = FILTERED if len(arguments) == 4 else STEP.format(macro=ONE_VARIABLE[method])
        if method == "transformMap":  # each element's index or key beside what is made of it
            step = step.replace("cel.bind(__gk_v, __gk_t[__gk_i], __gk_body))", f"{PAIR})")
        parts = {
            "__gk_target": _as_expr(target),
            "__gk_i": arguments[0],
            "__gk_v": arguments[1],
            "__gk_body": arguments[-1],
        }
        if len(arguments) == 4:
            parts["__gk_filter"] = arguments[2]
        over = OVER_BOTH.format(step=step)
        return self._filled(AS_MAP[method].format(over=over) if method in AS_MAP else over, parts)


def _ident(node: Any) -> str | None:
    """The identifier a tree is, when it is one alone (`x` in `cel.bind(x, ...)`)."""
    while isinstance(node, Tree) and len(node.children) == 1 and node.data != "ident":
        node = node.children[0]
    if isinstance(node, Tree) and node.data == "ident" and isinstance(node.children[0], Token):
        return str(node.children[0])
    return None


def _as_expr(member: Any) -> Tree[Any]:
    """A `member` node (a call's target) as the whole expression it is, to stand where an `expr` does."""
    node: Any = member
    for rule in ("unary", "multiplication", "addition", "relation", "conditionaland", "conditionalor", "expr"):
        node = Tree(Token("RULE", rule), [node])
    return node  # type: ignore[no-any-return]
