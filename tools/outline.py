"""outline: the classes and functions of a source file with their line ranges, parsed by tree-sitter."""

from __future__ import annotations

import asyncio
import functools
import threading
from typing import Any

from tree_sitter import Language, Parser

from sandbox import WorkspaceView
from tools.base import Effect, Observation, ToolError, observe
from tools.textfile import load_text, spell

SUPPORTED_EXTENSIONS = (".py", ".pyi")
_DEFINITIONS = ("class_definition", "function_definition")


_PARSERS = threading.local()  # a parser is not shared between threads: outline runs in worker threads


def _python_parser() -> Any:
    """This thread's tree-sitter parser for Python."""
    parser = getattr(_PARSERS, "python", None)
    if parser is None:
        parser = _PARSERS.python = Parser(_python_language())
    return parser


@functools.cache
def _python_language() -> Any:
    """The Python grammar, loaded once."""
    import tree_sitter_python

    return Language(tree_sitter_python.language())


class Outline:
    """List classes and functions (methods nested under their class) with their line ranges."""

    name = "outline"
    description = (
        "Show the classes and functions of a Python file with their line ranges (methods indented under "
        "their class), e.g. `class Calculator  L3-L40`. Use it to find where to read in a long file."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"path": {"type": "string", "description": "Python file relative to the workspace root."}},
        "required": ["path"],
        "additionalProperties": False,
    }
    effect = Effect.PURE

    def __init__(self, timeout: float | None = None) -> None:
        self.timeout = timeout  # seconds run_tool lets one call take (None: DEFAULT_TOOL_TIMEOUT)

    async def run(self, args: dict[str, Any], workspace: WorkspaceView) -> Observation:
        return await asyncio.to_thread(self._run, args, workspace)

    def _run(self, args: dict[str, Any], workspace: WorkspaceView) -> Observation:
        file = load_text(workspace, args["path"])
        if not file.path.name.endswith(SUPPORTED_EXTENSIONS):
            raise ToolError(f"outline supports {', '.join(SUPPORTED_EXTENSIONS)} files, not {spell(args['path'])}; "
                            "use grep or read_file for other files")
        if file.binary:
            return observe(f"{file.rel} is a binary file; outline reads source files only.", path=file.rel)
        tree = _python_parser().parse(file.data)
        entries = [f"{'  ' * depth}{label}  L{start}-L{end}" for depth, label, start, end in definitions(tree)]
        notes = []
        if not file.utf8:
            notes.append(f"[note: {file.rel} is not valid UTF-8; undecodable bytes in names are shown as \ufffd]")
        if tree.root_node.has_error:
            notes.append(f"[note: {file.rel} has syntax errors (the first near line {_first_error_line(tree)}); "
                         "this outline shows what parsed]")
        body = "\n".join(entries) if entries else f"No classes or functions in {file.rel}."
        return observe("\n".join([*notes, body]), path=file.rel, definitions=len(entries))


def definitions(tree: Any) -> list[tuple[int, str, int, int]]:
    """(nesting depth, 'class Name' / 'def name' / 'async def name', first line, last line), in file order.

    A decorated definition's range starts at its first decorator.
    """
    found = []
    stack = [(tree.root_node, 0)]
    while stack:
        node, depth = stack.pop()
        inner_depth = depth
        if node.type in _DEFINITIONS:
            name = node.child_by_field_name("name")
            label = "class" if node.type == "class_definition" else "def"
            if node.children and node.children[0].type == "async":
                label = "async def"
            text = name.text.decode("utf-8", errors="replace") if name is not None and name.text else "?"
            outer = node.parent if node.parent is not None and node.parent.type == "decorated_definition" else node
            found.append((depth, f"{label} {text}", outer.start_point.row + 1, node.end_point.row + 1))
            inner_depth = depth + 1
        stack.extend((child, inner_depth) for child in reversed(node.children))
    return found


def _first_error_line(tree: Any) -> int:
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.is_error or node.is_missing:
            return node.start_point.row + 1
        stack.extend(child for child in reversed(node.children) if child.has_error or child.is_missing)
    return tree.root_node.start_point.row + 1
