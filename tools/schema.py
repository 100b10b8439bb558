"""Check a tool call's arguments against the tool's JSON schema, in the small subset the tools use.

Supported: an object schema with `properties`, `required` and `additionalProperties: false`; property
types `string`, `integer`, `number`, `boolean`; `minimum` on numbers; `enum`. Any violation raises
`ToolError` with a message naming the problem, what was expected, and how to call the tool instead.
"""

from __future__ import annotations

import json
from typing import Any

from tools.base import ToolError

_MAX_DIGITS = 30  # integers with more digits are named by their length in messages
_PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


def describe_parameters(parameters: dict[str, Any]) -> str:
    """One line naming each argument, its type and whether it is required: `path (string, required)`."""
    required = set(parameters.get("required", []))
    parts = []
    for name, spec in parameters.get("properties", {}).items():
        kind = spec.get("type", "any")
        parts.append(f"{name} ({kind}, {'required' if name in required else 'optional'})")
    return ", ".join(parts) if parts else "no arguments"


def coerce_args(tool_name: str, args: Any) -> dict[str, Any]:
    """Accept a dict, a JSON object string, or None (no arguments); anything else is a ToolError."""
    if args is None:
        return {}
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as exc:
            raise ToolError(f"the arguments for {tool_name} are not valid JSON ({exc.msg} at position {exc.pos}); "
                            "send a JSON object such as {\"path\": \"src/app.py\"}") from None
        except RecursionError:
            raise ToolError(f"the arguments for {tool_name} are nested too deeply to read; "
                            "send a flat JSON object such as {\"path\": \"src/app.py\"}") from None
        except ValueError as exc:  # an integer literal of thousands of digits
            raise ToolError(f"the arguments for {tool_name} could not be read ({exc.args[0].split(';')[0]}); "
                            "send a JSON object with ordinary values") from None
    if not isinstance(args, dict):
        raise ToolError(f"the arguments for {tool_name} must be a JSON object, not {_json_type(args)}")
    return args


def validate_args(tool_name: str, parameters: dict[str, Any], args: dict[str, Any]) -> None:
    """Raise ToolError when `args` does not fit `parameters`; return quietly when it does."""
    properties: dict[str, Any] = parameters.get("properties", {})
    problems: list[str] = []
    unknown = sorted((key for key in args if key not in properties), key=str)
    if unknown and parameters.get("additionalProperties") is False:
        problems.append(f"unknown argument{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}")
    missing = [key for key in parameters.get("required", []) if key not in args or args[key] is None]
    if missing:
        problems.append(f"missing required argument{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}")
    for key, value in args.items():
        if key in properties and value is not None:
            problem = _check_value(key, properties[key], value)
            if problem:
                problems.append(problem)
    if problems:
        raise ToolError(
            f"invalid arguments for {tool_name}: {'; '.join(problems)}. "
            f"Expected: {describe_parameters(parameters)}. Call {tool_name} again with corrected arguments."
        )


def _check_value(key: str, spec: dict[str, Any], value: Any) -> str | None:
    kind = spec.get("type")
    if kind in _PYTHON_TYPES:
        # bool is an int in Python but not in JSON: true is not an integer.
        if not isinstance(value, _PYTHON_TYPES[kind]) or (kind != "boolean" and isinstance(value, bool)):
            return f"{key!r} must be {_article(kind)} {kind}, got {_json_type(value)} {_preview(value)}"
    if "enum" in spec and value not in spec["enum"]:
        return f"{key!r} must be one of {', '.join(map(repr, spec['enum']))}, got {_preview(value)}"
    if "minimum" in spec and isinstance(value, (int, float)) and value < spec["minimum"]:
        return f"{key!r} must be at least {spec['minimum']}, got {number(value)}"
    return None


def number(value: int | float) -> str:
    """A number as text; one too long to print is named by its length instead."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**_MAX_DIGITS:
        magnitude = abs(value)
        digits = max(1, int((magnitude.bit_length() - 1) * 0.30102999566398120))
        while 10**digits <= magnitude:
            digits += 1
        return f"{'-' if value < 0 else ''}(a {digits}-digit number)"
    return str(value)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _article(kind: str) -> str:
    return "an" if kind[0] in "aeiou" else "a"


def _preview(value: Any, limit: int = 40) -> str:
    """The start of a value as JSON, bounded in depth and length whatever the model sent."""
    text = _sketch(value, limit + 1)
    return f"({text[:limit]}...)" if len(text) > limit else f"({text})"


def _sketch(value: Any, budget: int, depth: int = 0) -> str:
    """JSON text of `value`, stopping once about `budget` characters are written (no recursion limit hit)."""
    if isinstance(value, (list, tuple)) or isinstance(value, dict):
        if depth > 20:
            return "..."
        opening, closing = ("[", "]") if isinstance(value, (list, tuple)) else ("{", "}")
        items = value.items() if isinstance(value, dict) else ((None, item) for item in value)
        out = opening
        for key, item in items:
            if len(out) > budget:
                return out
            prefix = "" if out == opening else ", "
            label = f"{json.dumps(str(key), ensure_ascii=False)}: " if isinstance(value, dict) else ""
            out += prefix + label + _sketch(item, budget - len(out), depth + 1)
        return out + closing
    if isinstance(value, int) and not isinstance(value, bool):
        return number(value)
    try:
        return json.dumps(value, ensure_ascii=False, default=str)[: budget + 1]
    except (TypeError, ValueError):
        return type(value).__name__
