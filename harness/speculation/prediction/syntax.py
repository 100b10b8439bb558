"""The enclosing function or class of a line, from tree-sitter, for the range a model will likely view."""

from __future__ import annotations

from functools import lru_cache

_DEFS = {"function_definition", "class_definition"}


@lru_cache(maxsize=1)
def _parser():  # tree_sitter.Parser, imported lazily (a few ms)
    import tree_sitter_python
    from tree_sitter import Language, Parser

    return Parser(Language(tree_sitter_python.language()))


@lru_cache(maxsize=64)
def _tree(text: str):  # tree_sitter.Tree
    return _parser().parse(text.encode("utf-8", errors="replace"))


def enclosing_range(path: str, text: str, line: int) -> tuple[int, int] | None:
    """1-based (first, last) line of the innermost def or class around `line` of a Python file."""
    if not path.endswith((".py", ".pyi")) or line < 1:
        return None
    lines = text.count("\n") + 1
    if line > lines:
        return None
    node = _tree(text).root_node.descendant_for_point_range((line - 1, 0), (line - 1, 0))
    while node is not None and node.type not in _DEFS:
        node = node.parent
    if node is None:
        return None
    if node.parent is not None and node.parent.type == "decorated_definition":
        node = node.parent
    return node.start_point[0] + 1, node.end_point[0] + 1
