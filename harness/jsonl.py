"""Reading JSON and JSONL files that may be damaged, for trajectories and the importers.

    data = read_regular(path)                     # OSError: missing, unreadable, not a regular file, too large
    for number, line in split_lines(data): ...    # JSONL lines, split on "\\n" alone
    value = parse(text)                           # DamagedJSON (a ValueError) for anything that is not sane JSON

Every failure says what is wrong in words a user can act on. Lines are split on "\\n" only: JSON written
with `ensure_ascii=False` keeps U+2028 and U+0085 raw inside strings, and `str.splitlines` would cut there.
"""

from __future__ import annotations

import json
import os
import re
import stat
from typing import Any

MAX_BYTES = 512 * 1024 * 1024  # a trajectory larger than this is not read
MAX_DEPTH = 200  # JSON nested deeper than this is refused (Tao's own events nest a few levels; others about 10)
_BOM = b"\xef\xbb\xbf"


class DamagedJSON(ValueError):
    """A text that is not a sane JSON value: invalid, not UTF-8, nested too deeply, or a number too long."""


def read_regular(path: str | os.PathLike[str], limit: int = MAX_BYTES, head: int | None = None) -> bytes:
    """The bytes of a regular file, or its first `head` bytes. A FIFO, a device or a folder is refused before
    it is read (a FIFO with no writer would block forever), and so is a file over `limit` bytes; OSError says
    which."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"not a regular file but {_kind(info.st_mode)}")
        if head is None and info.st_size > limit:
            raise OSError(f"{info.st_size} bytes, more than the {limit} a trajectory may have")
        chunks, size = [], 0
        while head is None or size < head:
            chunk = os.read(fd, 1 << 20 if head is None else min(1 << 20, head - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def problem(path: str | os.PathLike[str]) -> str | None:
    """Why `path` cannot be read as a trajectory file without opening it (missing, a broken link, a FIFO, a
    folder ...); None when it is a regular file."""
    try:
        info = os.stat(path)
    except OSError as exc:
        return f"unreadable ({describe(exc)})"
    return None if stat.S_ISREG(info.st_mode) else f"not a regular file but {_kind(info.st_mode)}"


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "a special file"


def describe(exc: OSError) -> str:
    """An OSError as a short reason: its message without the repeated file name."""
    return exc.strerror or str(exc) if exc.filename else str(exc)


def decode(data: bytes) -> str:
    """UTF-8 text (a leading byte order mark dropped); DamagedJSON names the first bad byte."""
    try:
        return data.removeprefix(_BOM).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DamagedJSON(f"not UTF-8 text (byte {exc.start}: {exc.reason})") from None


def split_lines(data: bytes) -> list[tuple[int, bytes]]:
    """The lines of a JSONL file, numbered from 1, split on "\\n" alone (a trailing "\\r" is dropped)."""
    lines = data.removeprefix(_BOM).split(b"\n")
    if lines and not lines[-1]:
        lines.pop()
    return [(number, line.removesuffix(b"\r")) for number, line in enumerate(lines, 1)]


def parse(text: str | bytes) -> Any:
    """A JSON value; DamagedJSON when the text is not JSON, not UTF-8, nested more than MAX_DEPTH levels or holds
    a number too long to read."""
    if isinstance(text, bytes):
        text = decode(text)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DamagedJSON(f"invalid JSON ({exc.msg} at character {exc.pos})") from None
    except RecursionError:
        raise DamagedJSON(f"JSON nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as exc:  # an integer of more than 4,300 digits
        raise DamagedJSON(f"unreadable JSON ({str(exc).split(';')[0]})") from None
    if depth(value) > MAX_DEPTH:
        raise DamagedJSON(f"JSON nested more than {MAX_DEPTH} levels deep")
    return value


def depth(value: Any) -> int:
    """How deeply lists and objects nest in `value` (a scalar is 0), counted without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


# What may be left of a token cut at the end of a line: a number, a word, or a \uXXXX escape (and a second one)
_NUMBER = re.compile(r"-?[0-9]*\.?[0-9]*(?:[eE][-+]?[0-9]*)?")
_ESCAPE = re.compile(r"u[0-9a-fA-F]{0,4}(?:\\(?:u[0-9a-fA-F]{0,4})?)?")
_WORDS = ("true", "false", "null", "NaN", "Infinity", "-Infinity")


def torn(text: str) -> bool:
    """Whether a JSON text that does not parse was cut short (a crash mid-write): the parser stopped in an
    unfinished string, or at a token that runs to the end of the text and could still be completed."""
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg.startswith("Unterminated string"):
            return True
        rest = text[exc.pos:].rstrip()
        if exc.msg.startswith("Invalid \\uXXXX escape"):
            return bool(_ESCAPE.fullmatch(rest))
        return not rest or any(word.startswith(rest) for word in _WORDS) or bool(_NUMBER.fullmatch(rest))
    except (ValueError, RecursionError):
        return False
    return False
