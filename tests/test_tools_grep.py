"""grep with ripgrep and with the Python fallback: the same observations on the same real git repository."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox import Workspace, landlock
from tools import Grep, run_tool
from tools.globs import GlobFilter
from tools.grep import find_rg
from tools.textfile import split_lines

GIT = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", "-c", "init.defaultBranch=main"]


def put(root: Path, rel: str, content: str | bytes) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)


def build_tree(root: Path) -> None:
    """Files that exercise ordering, hidden and ignored entries, binaries, encodings and symlinks."""
    put(root, "a.txt", "alpha needle\nbeta\n")
    put(root, "a/b.txt", "needle in a/b\n")  # sorts before a.txt folder by folder
    put(root, "a/z/deep.py", "def needle():\n    return 'needle'\n")
    put(root, "a-b.py", "needle = 1\n")
    put(root, "B.md", "Needle upper\nneedle lower\n")
    put(root, "src/app.py", "import os\n\ndef main():\n    print('needle')\n" + "x = 1\n" * 50 + "# needle at end\n")
    put(root, "src/util.py", "NEEDLE = 'needle'\n")
    put(root, "src/.hidden.py", "needle hidden file\n")
    put(root, ".config/settings.txt", "needle in hidden folder\n")
    put(root, "build/out.txt", "needle ignored folder\n")
    put(root, "debug.log", "needle ignored file\n")
    put(root, "logs/keep.txt", "needle kept in logs\n")
    put(root, "logs/run.log", "needle ignored in logs\n")
    put(root, ".gitignore", "build/\n*.log\n")
    put(root, "bin.dat", b"needle\x00binary\n")
    put(root, "late.dat", b"needle before\n" + b"y" * 20_000 + b"\n\x00\n")
    put(root, "latin.txt", "caf\xe9 needle\n".encode("latin-1"))
    put(root, "dos.txt", b"needle crlf\r\nother\r\n")
    put(root, "long.txt", "needle " + "w" * 1000 + "\n")
    put(root, "many.txt", "".join(f"needle {n}\n" for n in range(300)))
    put(root, "uni/ünï.txt", "needle unicode name\n")
    (root / "link.txt").symlink_to("a.txt")


@pytest.fixture
def repo(tmp_path: Path) -> Workspace:
    root = tmp_path / "repo"
    root.mkdir()
    build_tree(root)
    subprocess.run([*GIT, "init", "-q"], cwd=root, check=True)
    subprocess.run([*GIT, "add", "-A"], cwd=root, check=True)
    put(root, "tracked.log", "needle tracked but ignored\n")
    subprocess.run([*GIT, "add", "-f", "tracked.log"], cwd=root, check=True)
    subprocess.run([*GIT, "commit", "-q", "-m", "init"], cwd=root, check=True)
    put(root, "untracked.py", "needle untracked\n")
    return Workspace(root)


@pytest.fixture
def plain(tmp_path: Path) -> Workspace:
    root = tmp_path / "plain"
    root.mkdir()
    build_tree(root)
    return Workspace(root)


CALLS = [
    {"pattern": "needle"},
    {"pattern": "Needle|NEEDLE"},
    {"pattern": "^needle$"},
    {"pattern": r"def \w+\(\)"},
    {"pattern": "crlf$"},
    {"pattern": "needle", "path": "src"},
    {"pattern": "needle", "path": "src/app.py"},
    {"pattern": "needle", "path": "src/.hidden.py"},
    {"pattern": "needle", "path": ".config"},
    {"pattern": "needle", "path": "logs"},
    {"pattern": "needle", "glob": "*.py"},
    {"pattern": "needle", "glob": "*.log"},
    {"pattern": "needle", "glob": "*.{py,md}"},
    {"pattern": "needle", "glob": "!*.txt"},
    {"pattern": "needle", "glob": "a/**"},
    {"pattern": "needle", "glob": "src/*.py"},
    {"pattern": "needle", "glob": "**/z/*.py"},
    {"pattern": "needle", "glob": "!a/"},
    {"pattern": "needle", "path": "a", "glob": "*.txt"},
    {"pattern": "zzz-no-such-thing"},
]


def test_ripgrep_is_available():
    assert find_rg(), "the ripgrep wheel should put rg next to the venv's python"


@pytest.mark.parametrize("tree", ["repo", "plain"])
async def test_ripgrep_and_fallback_agree(tree, request):
    workspace: Workspace = request.getfixturevalue(tree)
    with_rg, without_rg = Grep(), Grep(use_rg=False)
    assert with_rg.rg_path and without_rg.rg_path is None
    for call in CALLS:
        fast = await run_tool(with_rg, call, workspace)
        slow = await run_tool(without_rg, call, workspace)
        assert fast == slow, f"{call}:\n--- rg ---\n{fast.text}\n--- python ---\n{slow.text}"


async def test_output_format_order_and_filters(repo):
    obs = await run_tool(Grep(), {"pattern": "needle", "glob": "!many.txt"}, repo)
    paths = [line.split(":", 1)[0] for line in obs.text.splitlines()]
    assert paths == [
        "B.md", "a/b.txt", "a/z/deep.py", "a/z/deep.py", "a-b.py", "a.txt", "dos.txt", "latin.txt",
        "logs/keep.txt", "long.txt", "src/app.py", "src/app.py", "src/util.py", "uni/ünï.txt", "untracked.py",
    ]
    lines = obs.text.splitlines()
    assert "src/app.py:4:    print('needle')" in lines
    assert "src/app.py:55:# needle at end" in lines
    assert "dos.txt:1:needle crlf" in lines  # the CR is not shown
    assert "latin.txt:1:caf\ufffd needle" in lines
    # Skipped: binaries (a NUL within 64 KiB, even after a match), ignored and hidden files, symlinks.
    assert not any(line.startswith(("late.dat", "bin.dat", "debug.log", "build/", "tracked.log", "link.txt"))
                   for line in lines)
    long_line = next(line for line in lines if line.startswith("long.txt"))
    assert long_line.endswith(" [... 707 more characters]")
    assert obs.exit_code == 0 and obs.data["matches"] == len(lines)


async def test_match_cap_and_total(repo):
    obs = await run_tool(Grep(), {"pattern": "needle", "path": "many.txt"}, repo)
    lines = obs.text.splitlines()
    assert len(lines) == 201
    assert lines[0] == "many.txt:1:needle 0" and lines[199] == "many.txt:200:needle 199"
    assert lines[200] == ("[showing the first 200 of 300 matching lines; "
                          "narrow the pattern, path or glob to see the rest]")
    assert obs.data["matches"] == 300


async def test_huge_output_counts_every_match(tmp_path):
    root = tmp_path / "big"
    root.mkdir()
    line = "needle " + "q" * 200 + "\n"
    for n in range(4):
        put(root, f"f{n}.txt", line * 30_000)  # 24 MB of matches in all: more than grep keeps in memory
    workspace = Workspace(root)
    fast = await run_tool(Grep(), {"pattern": "needle"}, workspace)
    assert fast.data["matches"] == 120_000
    assert "of 120000 matching lines" in fast.text
    slow = await run_tool(Grep(use_rg=False), {"pattern": "needle"}, workspace)
    assert fast == slow


async def test_no_match_is_not_an_error(repo):
    obs = await run_tool(Grep(), {"pattern": "zzz-nothing", "glob": "*.py"}, repo)
    assert not obs.is_error
    assert obs.text == "No matches for 'zzz-nothing' in the workspace (glob '*.py')."
    assert obs.exit_code == 1


@pytest.mark.parametrize("use_rg", [True, False])
async def test_invalid_regex_is_a_clear_error(repo, use_rg):
    obs = await run_tool(Grep(use_rg=use_rg), {"pattern": "foo("}, repo)
    assert obs.is_error
    assert "invalid regex 'foo('" in obs.text
    assert "backslash" in obs.text


async def test_explicit_binary_file_and_missing_path(repo):
    binary = await run_tool(Grep(), {"pattern": "needle", "path": "bin.dat"}, repo)
    assert not binary.is_error and binary.text == "bin.dat is a binary file; grep searches text files only."
    missing = await run_tool(Grep(), {"pattern": "needle", "path": "nope"}, repo)
    assert missing.is_error and "path not found: nope" in missing.text
    empty = await run_tool(Grep(), {"pattern": ""}, repo)
    assert empty.is_error and "pattern is empty" in empty.text


@pytest.mark.parametrize(("glob", "path", "is_dir", "verdict"), [
    ("*.py", "a/b/c.py", False, True),
    ("*.py", "a/b/c.txt", False, False),
    ("*.py", "a", True, None),
    ("src/*.py", "src/x.py", False, True),
    ("src/*.py", "lib/src/x.py", False, False),
    ("**/test_*.py", "test_a.py", False, True),
    ("**/test_*.py", "x/y/test_a.py", False, True),
    ("a/**", "a/b/c", False, True),
    ("*.{js,ts}", "web/app.ts", False, True),
    ("!tests", "tests", True, False),
    ("!tests", "src/x.py", False, None),
    ("build/", "build", False, False),
    ("file[0-9].txt", "file7.txt", False, True),
    ("file[!0-9].txt", "file7.txt", False, False),
])
def test_glob_semantics(glob, path, is_dir, verdict):
    assert GlobFilter.parse(glob).verdict(path, is_dir) is verdict


async def test_ignore_files_above_the_workspace_still_apply(tmp_path):
    """ripgrep runs confined to the workspace, yet reads the .gitignore of a repository around it."""
    repo = tmp_path / "repo"
    (repo / "sub").mkdir(parents=True)
    subprocess.run([*GIT, "init", "-q"], cwd=repo, check=True)
    put(repo, ".gitignore", "*.log\n")
    put(repo, "sub/a.log", "needle\n")
    put(repo, "sub/a.txt", "needle\n")
    workspace = Workspace(repo / "sub")
    for tool in (Grep(), Grep(use_rg=False)):
        assert (await run_tool(tool, {"pattern": "needle"}, workspace)).text == "a.txt:1:needle"


async def test_ripgrep_reads_nothing_outside_even_named_through_a_symlink(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    put(outside, "secret.txt", "needle outside\n")
    root = tmp_path / "ws"
    root.mkdir()
    put(root, "in.txt", "needle inside\n")
    (root / "out").symlink_to(outside)
    obs = await run_tool(Grep(), {"pattern": "needle"}, Workspace(root))
    assert obs.text == "in.txt:1:needle inside"
    refused = await run_tool(Grep(), {"pattern": "needle", "path": "out"}, Workspace(root))
    assert refused.is_error and "outside the workspace" in refused.text and "needle outside" not in refused.text


async def test_a_catastrophic_pattern_ends_with_a_clear_error(tmp_path):
    """The Python fallback bounds matching: `(a|aa)+$` on a long line of a's backtracks without end."""
    root = tmp_path / "ws"
    root.mkdir()
    put(root, "a.txt", "a" * 64 + "!\n")
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    ticker = asyncio.ensure_future(tick())
    try:
        obs = await run_tool(Grep(use_rg=False, timeout=1), {"pattern": "(a|aa)+$"}, Workspace(root))
    finally:
        ticker.cancel()
    assert obs.is_error
    assert "took too long" in obs.text and "simplify it" in obs.text
    assert ticks > 1  # the event loop kept running while the pattern was matched


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet="ab \n\t_.-x", max_size=60),
       pattern=st.sampled_from([r"\bab\b", r"a\s+b", r"\Wx", r"[^a]b", r"a.b", r"\Bb", r"x*", r"b\n?a", r"(a|b)+_",
                                r"\sx\s", r"^a", r"b$", r"(?<=a)b", r"\b", r"[\s\S]x"]))
def test_the_whole_file_check_never_hides_a_line_match(text, pattern):
    """grep's fallback skips a file when one search of all of it finds nothing: never when a line matches."""
    import regex

    from tools.grep import Deadline, _Found, _scan_data

    found = _Found(1000)
    _scan_data("f", text.encode(), regex.compile(pattern), found, Deadline(60))
    expected = [n for n, line in enumerate(split_lines(text), start=1) if regex.search(pattern, line)]
    assert [m.line for m in found.matches] == expected


@pytest.mark.skipif(not landlock.available(), reason="this kernel does not enforce Landlock")
async def test_a_confined_helper_reads_only_its_trees(tmp_path):
    inside, outside = tmp_path / "ws", tmp_path / "outside"
    inside.mkdir()
    outside.mkdir()
    put(inside, "in.txt", "inside\n")
    put(outside, "out.txt", "outside\n")
    (inside / "link.txt").symlink_to(outside / "out.txt")
    cat = shutil.which("cat")
    assert cat
    rules = landlock.ReadRules(trees=(inside,), files=landlock.program_files(cat))
    ok = await landlock.run_readonly([cat, "in.txt"], inside, rules, timeout=60, max_bytes=1 << 20)
    assert ok.exit_code == 0 and ok.output == b"inside\n"
    for target in ("link.txt", str(outside / "out.txt")):
        denied = await landlock.run_readonly([cat, target], inside, rules, timeout=60, max_bytes=1 << 20)
        assert denied.exit_code != 0 and b"Permission denied" in denied.output
    assert (outside / "out.txt").read_text() == "outside\n"
