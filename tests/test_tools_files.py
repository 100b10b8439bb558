"""read_file, list_files, write_file, edit_file, outline and finish on real files in a temporary workspace."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox import Workspace
from tools import EditFile, Finish, ListFiles, Outline, ReadFile, WriteFile, run_tool
from tools.base import MAX_OUTPUT_CHARS


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    root.mkdir()
    return Workspace(root)


def put(ws: Workspace, rel: str, content: str | bytes) -> Path:
    path = ws.root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


# --- read_file ----------------------------------------------------------------------------------------

async def test_read_whole_file_numbered_like_cat_n(ws):
    put(ws, "src/app.py", "import os\n\ndef main():\n    pass\n")
    obs = await run_tool(ReadFile(), {"path": "src/app.py"}, ws)
    assert not obs.is_error
    assert obs.text == "     1\timport os\n     2\t\n     3\tdef main():\n     4\t    pass"
    assert obs.data == {"path": "src/app.py", "start_line": 1, "end_line": 4, "total_lines": 4,
                        "digest": hashlib.sha256(b"import os\n\ndef main():\n    pass\n").hexdigest()}


async def test_read_range_is_inclusive_and_says_what_it_shows(ws):
    put(ws, "f.txt", "".join(f"line {n}\n" for n in range(1, 11)))
    obs = await run_tool(ReadFile(), {"path": "f.txt", "start_line": 3, "end_line": 5}, ws)
    assert obs.text.splitlines()[:3] == ["     3\tline 3", "     4\tline 4", "     5\tline 5"]
    assert obs.text.endswith("[showing lines 3-5 of 10]")


async def test_read_absolute_path_inside_workspace_shows_relative_path(ws):
    path = put(ws, "f.txt", "a\n")
    obs = await run_tool(ReadFile(), {"path": str(path)}, ws)
    assert obs.data["path"] == "f.txt"


async def test_read_range_errors(ws):
    put(ws, "f.txt", "a\nb\nc\n")
    past = await run_tool(ReadFile(), {"path": "f.txt", "start_line": 9}, ws)
    assert past.is_error and "start_line 9 is past the end of f.txt, which has 3 lines" in past.text
    inverted = await run_tool(ReadFile(), {"path": "f.txt", "start_line": 3, "end_line": 2}, ws)
    assert inverted.is_error and "end_line 2 is before start_line 3" in inverted.text
    clamped = await run_tool(ReadFile(), {"path": "f.txt", "start_line": 2, "end_line": 99}, ws)
    assert not clamped.is_error
    assert "     3\tc" in clamped.text and "end_line 99 is past the end of the file, which has 3 lines" in clamped.text


async def test_read_missing_file_and_directory(ws):
    put(ws, "src/config.py", "x\n")
    missing = await run_tool(ReadFile(), {"path": "src/confg.py"}, ws)
    assert missing.is_error and "file not found: src/confg.py" in missing.text
    assert "did you mean src/config.py?" in missing.text
    folder = await run_tool(ReadFile(), {"path": "src"}, ws)
    assert folder.is_error and "is a directory" in folder.text and "list_files" in folder.text


async def test_read_long_file_shows_first_2000_lines(ws):
    put(ws, "long.txt", "".join(f"{n}\n" for n in range(1, 5001)))
    obs = await run_tool(ReadFile(), {"path": "long.txt"}, ws)
    assert obs.text.splitlines()[-2] == "  2000\t2000"
    assert obs.text.endswith("[showing lines 1-2000 of 5000; "
                             "pass start_line/end_line for more (next: start_line=2001)]")
    rest = await run_tool(ReadFile(), {"path": "long.txt", "start_line": 4999}, ws)
    assert rest.text == "  4999\t4999\n  5000\t5000\n[showing lines 4999-5000 of 5000]"


async def test_read_respects_the_character_cap(ws):
    put(ws, "wide.txt", "".join(f"{n} {'x' * 200}\n" for n in range(1, 1001)))
    obs = await run_tool(ReadFile(), {"path": "wide.txt"}, ws)
    assert len(obs.text) <= MAX_OUTPUT_CHARS
    assert obs.truncated_chars == 0  # cut at a line boundary, not in the middle
    last = obs.data["end_line"]
    assert 100 < last < 1000
    assert f"showing lines 1-{last} of 1000; pass start_line/end_line for more" in obs.text


async def test_read_cuts_a_huge_line(ws):
    put(ws, "min.js", "a" * 100_000 + "\n")
    obs = await run_tool(ReadFile(), {"path": "min.js"}, ws)
    assert "[line cut: 98000 more characters]" in obs.text
    assert len(obs.text) < 3000


async def test_read_binary_and_non_utf8(ws):
    put(ws, "img.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    binary = await run_tool(ReadFile(), {"path": "img.png"}, ws)
    assert not binary.is_error and "img.png is a binary file (16 bytes)" in binary.text
    put(ws, "latin.txt", "caf\xe9\nna\xefve\n".encode("latin-1"))
    latin = await run_tool(ReadFile(), {"path": "latin.txt"}, ws)
    assert "not valid UTF-8" in latin.text
    assert "     1\tcaf\ufffd" in latin.text and "     2\tna\ufffdve" in latin.text


async def test_read_empty_and_crlf(ws):
    put(ws, "empty.txt", "")
    empty = await run_tool(ReadFile(), {"path": "empty.txt"}, ws)
    assert not empty.is_error and "empty" in empty.text
    put(ws, "dos.txt", b"one\r\ntwo\r\n")
    dos = await run_tool(ReadFile(), {"path": "dos.txt"}, ws)
    assert dos.text == "     1\tone\n     2\ttwo"


# --- list_files -----------------------------------------------------------------------------------------

async def test_list_files_tree(ws):
    for rel in ["b.txt", "a/x.py", "a/deep/y.py", "a/deep/deeper/z.py", ".hidden", ".git/config",
                "pkg/__pycache__/m.pyc", ".venv/bin/python", "node_modules/m/index.js", "pkg/m.py", "empty/.keep"]:
        put(ws, rel, "x")
    (ws.root / "link").symlink_to("a/x.py")
    obs = await run_tool(ListFiles(), {}, ws)
    assert obs.text == "\n".join([
        "./", "  a/", "    deep/", "    x.py", "  b.txt", "  empty/", "  link -> a/x.py", "  pkg/", "    m.py",
    ])
    deeper = await run_tool(ListFiles(), {"path": "a", "depth": 3}, ws)
    assert deeper.text == "a/\n  deep/\n    deeper/\n      z.py\n    y.py\n  x.py"
    one = await run_tool(ListFiles(), {"path": "a", "depth": 1}, ws)
    assert one.text == "a/\n  deep/\n  x.py"


async def test_list_files_errors_and_empty(ws):
    put(ws, "f.txt", "x")
    (ws.root / "void").mkdir()
    assert "is a file" in (await run_tool(ListFiles(), {"path": "f.txt"}, ws)).text
    assert "folder not found" in (await run_tool(ListFiles(), {"path": "nope"}, ws)).text
    empty = await run_tool(ListFiles(), {"path": "void"}, ws)
    assert not empty.is_error and "void/ is empty" in empty.text


async def test_list_files_caps_entries(ws):
    for n in range(30):
        put(ws, f"d/f{n:02}.txt", "x")
    obs = await run_tool(ListFiles(max_entries=10), {"path": "d"}, ws)
    assert obs.text.count("\n  f") == 10
    assert obs.text.endswith("[showing 10 of 30 entries; list a subfolder or pass a smaller depth to see the rest]")


# --- write_file -----------------------------------------------------------------------------------------

async def test_write_creates_parents_then_overwrites(ws):
    created = await run_tool(WriteFile(), {"path": "new/dir/f.py", "content": "a = 1\nb = 'é'\n"}, ws)
    assert not created.is_error
    assert created.text == "Created new/dir/f.py (15 bytes, 2 lines)."
    assert (ws.root / "new/dir/f.py").read_text() == "a = 1\nb = 'é'\n"
    again = await run_tool(WriteFile(), {"path": "new/dir/f.py", "content": "no newline"}, ws)
    assert again.text == "Overwrote new/dir/f.py (10 bytes, 1 line)."
    assert (ws.root / "new/dir/f.py").read_bytes() == b"no newline"


async def test_write_refuses_folder_and_file_as_parent(ws):
    put(ws, "f.txt", "x")
    (ws.root / "d").mkdir()
    folder = await run_tool(WriteFile(), {"path": "d", "content": "x"}, ws)
    assert folder.is_error and "is a folder" in folder.text
    under_file = await run_tool(WriteFile(), {"path": "f.txt/g.txt", "content": "x"}, ws)
    assert under_file.is_error and "part of the path is a file" in under_file.text


# --- edit_file ------------------------------------------------------------------------------------------

SOURCE = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"


async def test_edit_replaces_and_shows_numbered_context(ws):
    put(ws, "calc.py", SOURCE)
    obs = await run_tool(EditFile(), {"path": "calc.py", "old": "    return a - b",
                                      "new": "    # minus\n    return a - b"}, ws)
    assert not obs.is_error
    assert (ws.root / "calc.py").read_text() == SOURCE.replace("    return a - b", "    # minus\n    return a - b")
    assert obs.text.startswith("Edited calc.py: replaced lines 6-6 with lines 6-7. Lines 3-7 now read:\n")
    assert "     6\t    # minus\n     7\t    return a - b" in obs.text


async def test_edit_preserves_other_bytes_exactly(ws):
    original = b"a\r\nb\r\n\xff\xfe weird\r\nc = 1\r\nlast line without newline"
    put(ws, "mixed.txt", original)
    obs = await run_tool(EditFile(), {"path": "mixed.txt", "old": "c = 1", "new": "c = 2"}, ws)
    assert not obs.is_error
    assert (ws.root / "mixed.txt").read_bytes() == original.replace(b"c = 1", b"c = 2")


async def test_edit_matches_lf_text_in_a_crlf_file(ws):
    put(ws, "dos.txt", b"one\r\ntwo\r\nthree\r\n")
    obs = await run_tool(EditFile(), {"path": "dos.txt", "old": "one\ntwo", "new": "uno\ndos"}, ws)
    assert not obs.is_error
    assert (ws.root / "dos.txt").read_bytes() == b"uno\r\ndos\r\nthree\r\n"


async def test_edit_keeps_file_mode(ws):
    path = put(ws, "run.sh", "echo hi\n")
    path.chmod(0o755)
    await run_tool(EditFile(), {"path": "run.sh", "old": "hi", "new": "ho"}, ws)
    assert path.stat().st_mode & 0o777 == 0o755


async def test_edit_ambiguous_gives_line_numbers(ws):
    put(ws, "calc.py", SOURCE)
    obs = await run_tool(EditFile(), {"path": "calc.py", "old": "(a, b):", "new": "(x, y):"}, ws)
    assert obs.is_error
    assert "occurs 2 times in calc.py (starting at lines 1, 5)" in obs.text
    assert "more surrounding lines" in obs.text
    assert (ws.root / "calc.py").read_text() == SOURCE


async def test_edit_overlapping_occurrences_are_ambiguous(ws):
    put(ws, "a.txt", "aaa\n")
    obs = await run_tool(EditFile(), {"path": "a.txt", "old": "aa", "new": "b"}, ws)
    assert obs.is_error and "occurs 2 times" in obs.text


async def test_edit_not_found_hints(ws):
    put(ws, "calc.py", SOURCE)
    indent = await run_tool(EditFile(), {"path": "calc.py", "old": "\treturn a + b", "new": "x"}, ws)
    assert indent.is_error and "old was not found in calc.py" in indent.text
    assert "Its first line appears at line 2" in indent.text
    spaced = await run_tool(EditFile(), {"path": "calc.py", "old": "def add(a, b):\nreturn a + b", "new": "x"}, ws)
    assert "whitespace is ignored" in spaced.text
    close = await run_tool(EditFile(), {"path": "calc.py", "old": "def ad(a, b):", "new": "x"}, ws)
    assert "closest line to its first line is line 1: 'def add(a, b):'" in close.text
    numbered = await run_tool(EditFile(), {"path": "calc.py", "old": "     2\t    return a + b", "new": "x"}, ws)
    assert "line-number prefixes" in numbered.text
    assert (ws.root / "calc.py").read_text() == SOURCE


async def test_edit_argument_errors(ws):
    put(ws, "calc.py", SOURCE)
    put(ws, "blob.bin", b"\x00\x01abc")
    empty = await run_tool(EditFile(), {"path": "calc.py", "old": "", "new": "x"}, ws)
    assert empty.is_error and "old is empty" in empty.text and "write_file" in empty.text
    same = await run_tool(EditFile(), {"path": "calc.py", "old": "add", "new": "add"}, ws)
    assert same.is_error and "identical" in same.text
    missing = await run_tool(EditFile(), {"path": "nope.py", "old": "a", "new": "b"}, ws)
    assert missing.is_error and "file not found: nope.py" in missing.text
    binary = await run_tool(EditFile(), {"path": "blob.bin", "old": "abc", "new": "x"}, ws)
    assert binary.is_error and "binary" in binary.text


async def test_edit_delete_text(ws):
    put(ws, "calc.py", SOURCE)
    obs = await run_tool(EditFile(), {"path": "calc.py", "old": "\n\ndef sub(a, b):\n    return a - b\n", "new": ""},
                         ws)
    assert not obs.is_error and "deleted text from lines" in obs.text
    assert (ws.root / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"


# --- outline --------------------------------------------------------------------------------------------

OUTLINE_SOURCE = '''import functools


@functools.total_ordering
class Calculator:
    """Adds things."""

    def add(self, a, b):
        return a + b

    @staticmethod
    async def fetch():
        def helper():
            pass
        return helper

    class Inner:
        pass


def main():
    pass
'''


async def test_outline_nests_methods_and_includes_decorators_and_async(ws):
    put(ws, "calc.py", OUTLINE_SOURCE)
    obs = await run_tool(Outline(), {"path": "calc.py"}, ws)
    assert obs.text == "\n".join([
        "class Calculator  L4-L18",
        "  def add  L8-L9",
        "  async def fetch  L11-L15",
        "    def helper  L13-L14",
        "  class Inner  L17-L18",
        "def main  L21-L22",
    ])


async def test_outline_survives_syntax_errors(ws):
    put(ws, "broken.py",
        "def ok():\n    pass\n\ndef broken(:\n    pass\n\nclass Fine:\n    def m(self):\n        pass\n")
    obs = await run_tool(Outline(), {"path": "broken.py"}, ws)
    assert not obs.is_error
    assert "syntax errors" in obs.text
    assert "def ok  L1-L2" in obs.text
    assert "class Fine  L7-L9" in obs.text and "  def m  L8-L9" in obs.text


async def test_outline_unsupported_and_empty(ws):
    put(ws, "app.js", "function f() {}\n")
    put(ws, "consts.py", "X = 1\n")
    js = await run_tool(Outline(), {"path": "app.js"}, ws)
    assert js.is_error and ".py, .pyi" in js.text
    empty = await run_tool(Outline(), {"path": "consts.py"}, ws)
    assert not empty.is_error and "No classes or functions" in empty.text


async def test_outline_binary_and_non_utf8(ws):
    put(ws, "blob.py", b"\x00\x01")
    assert "binary" in (await run_tool(Outline(), {"path": "blob.py"}, ws)).text
    put(ws, "latin.py", "# caf\xe9\ndef f():\n    pass\n".encode("latin-1"))
    latin = await run_tool(Outline(), {"path": "latin.py"}, ws)
    assert "not valid UTF-8" in latin.text and "def f  L2-L3" in latin.text


# --- finish ---------------------------------------------------------------------------------------------

async def test_finish_returns_the_summary(ws):
    obs = await run_tool(Finish(), {"summary": "Fixed the bug; tests pass."}, ws)
    assert obs.text == "Fixed the bug; tests pass." and not obs.is_error
    assert (await run_tool(Finish(), {"summary": "  "}, ws)).is_error


# --- property: an edit changes exactly the replaced span ----------------------------------------------

_bytes_without_marker = st.binary(max_size=200).filter(lambda b: b"@@" not in b)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prefix=_bytes_without_marker, suffix=_bytes_without_marker,
       new=st.text(max_size=30).filter(lambda t: "@@" not in t))
def test_edit_changes_only_the_replaced_span(tmp_path, prefix, suffix, new):
    path = tmp_path / "f.txt"
    data = prefix.replace(b"\0", b"") + b"@@old@@" + suffix.replace(b"\0", b"")
    path.write_bytes(data)
    workspace = Workspace(tmp_path)
    obs = asyncio.run(run_tool(EditFile(), {"path": "f.txt", "old": "@@old@@", "new": new}, workspace))
    assert not obs.is_error, obs.text
    assert path.read_bytes() == data.replace(b"@@old@@", new.encode("utf-8", "surrogatepass"))
