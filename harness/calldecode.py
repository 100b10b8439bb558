"""A call's JSON as the model wrote it: decoded into plain data, or refused with an error for the model.

Plain data is what every consumer of a call takes without care (the tools, the speculation analyzer,
the events and their trajectory file in UTF-8): objects, lists, strings, finite numbers, booleans and
null, nested at most `MAX_DEPTH` levels, integers of at most `MAX_DIGITS` digits, and strings that are
valid Unicode (no half of a UTF-16 surrogate pair). Anything else is refused with a `CallRefused`
whose message says what is wrong and what to write instead. Nothing here recurses, so no input can
exhaust the stack.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

MAX_DEPTH = 64  # levels of lists and objects in a call's arguments (tools take flat ones)
MAX_DIGITS = 4300  # Python's own limit on converting long integers to and from text
MAX_NAME = 200  # characters in a tool name
SHOWN = 60  # characters of a model's value quoted back in an error message
_SURROGATE = re.compile("[\ud800-\udfff]")


class CallRefused(ValueError):
    """A call the model must write again; the message is written for the model."""


def printable(text: str) -> str:
    """`text` with every unprintable character (control, format, surrogate) escaped as Python would show it."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def shown(text: str, limit: int = SHOWN) -> str:
    """A model's string as an error message may quote it: escaped, and cut short when long."""
    text = printable(text[: limit + 1])
    return text if len(text) <= limit else text[:limit] + "..."


class _Unfit(ValueError):
    """A value JSON decoding met that plain data refuses: what it is, and what to write instead."""

    def __init__(self, detail: str, fix: str) -> None:
        """`detail` names the value, `fix` says what to write instead."""
        super().__init__(detail)
        self.detail, self.fix = detail, fix


def load(text: str, what: str) -> Any:
    """Decode JSON into plain data; `what` names it in the error ("The tool call", "The call's arguments")."""
    try:
        value = json.loads(text, parse_int=_integer, parse_float=_float, parse_constant=_constant)
    except _Unfit as exc:
        raise _refused(what, exc) from None
    except json.JSONDecodeError as exc:
        raise CallRefused(f"{what} {_is_not_json(what)} ({exc.msg} at character {exc.pos}). {_how(what)}") from None
    except RecursionError:
        raise _too_deep(what) from None
    check_plain(value, what)
    return value


def check_plain(value: Any, what: str) -> None:
    """Refuse a decoded value that is not plain data (see the module docstring); walks it without recursion."""
    try:
        _walk(value, what)
    except _Unfit as exc:
        raise _refused(what, exc) from None


def _walk(value: Any, what: str) -> None:
    """Check every value inside `value`, depth first, with a stack of our own."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            _check_string(item)
        elif isinstance(item, dict):
            if depth >= MAX_DEPTH:
                raise _too_deep(what)
            for key, child in item.items():
                if not isinstance(key, str):
                    raise _Unfit(f"a key that is not a string ({shown(repr(key))})", _how(what))
                _check_string(key)
                stack.append((child, depth + 1))
        elif isinstance(item, list):
            if depth >= MAX_DEPTH:
                raise _too_deep(what)
            stack.extend((child, depth + 1) for child in item)
        elif isinstance(item, float) and not math.isfinite(item):
            raise _Unfit(f"{item!r}, which JSON does not allow", "Write a finite number, or null.")
        elif isinstance(item, int) and not isinstance(item, bool) and abs(item).bit_length() > MAX_DIGITS * 3.32:
            raise _Unfit(f"an integer of more than {MAX_DIGITS} digits", "Write a smaller number.")
        elif item is not None and not isinstance(item, (bool, int, float)):
            raise _Unfit(f"a {type(item).__name__}, which is not JSON", _how(what))


def check_name(name: Any) -> str:
    """The tool name of a call, escaped where unprintable; refuses one that is not a short non-empty string."""
    if not isinstance(name, str) or not name:
        raise CallRefused('The tool call needs a "name" string, as in {"name": "<tool>", "arguments": {...}}.')
    if len(name) > MAX_NAME:
        raise CallRefused(f'The tool name "{shown(name)}" is {len(name)} characters long; tool names are short '
                          'words. Write {"name": "<tool>", "arguments": {...}} with one of the listed tools.')
    return printable(name)


def json_type(value: Any) -> str:
    """The JSON name of a decoded value's type, for messages: object, array, string, number, boolean, null."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    names = {dict: "object", list: "array", str: "string", int: "number", float: "number"}
    return next((label for kind, label in names.items() if isinstance(value, kind)), type(value).__name__)


def _check_string(text: str) -> None:
    """Refuse a string holding half of a surrogate pair (it cannot be written as UTF-8)."""
    if not text.isprintable() and (found := _SURROGATE.search(text)):  # printable strings hold no surrogates
        raise _Unfit(f'"{printable(found.group())}", half of a UTF-16 surrogate pair with no other half',
                     "Write the character itself, or both halves of its pair.")


def _integer(digits: str) -> int:
    """JSON integers, refused past the digits Python converts."""
    if len(digits.lstrip("-")) > MAX_DIGITS:
        raise _Unfit(f"a number of {len(digits)} digits ({digits[:12]}...)", "Write a smaller number.")
    return int(digits)


def _float(text: str) -> float:
    """JSON numbers with a fraction or exponent, refused when they overflow to infinity."""
    value = float(text)
    if not math.isfinite(value):
        raise _Unfit(f"the number {shown(text, 24)}, too large for a JSON number", "Write a smaller number.")
    return value


def _constant(name: str) -> float:
    """NaN and Infinity, which Python's json accepts and JSON does not."""
    raise _Unfit(f"{name}, which JSON does not allow", "Write a finite number, or null.")


def _refused(what: str, unfit: _Unfit) -> CallRefused:
    """The error for the model: what holds what, and what to write instead."""
    verb = "hold" if what.endswith("arguments") else "holds"
    return CallRefused(f"{what} {verb} {unfit.detail}. {unfit.fix}")


def _is_not_json(what: str) -> str:
    """`is not valid JSON`, in the number `what` asks for."""
    return "are not valid JSON" if what.endswith("arguments") else "is not valid JSON"


def _how(what: str) -> str:
    """What a well-formed call or arguments object looks like."""
    if what.endswith("arguments"):
        return 'Write them as a JSON object, such as {"path": "src/app.py"}.'
    return 'Write <tool_call>{"name": "<tool>", "arguments": {...}}</tool_call> with double-quoted keys.'


def _too_deep(what: str) -> CallRefused:
    """The error for nesting deeper than MAX_DEPTH."""
    verb = "nest" if what.endswith("arguments") else "nests"
    return CallRefused(f"{what} {verb} lists or objects more than {MAX_DEPTH} levels deep. Write flat arguments, "
                       'such as {"path": "src/app.py", "start_line": 10}.')
