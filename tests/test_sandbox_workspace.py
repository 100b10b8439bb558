"""Workspace versions: bumped by Tao's own changes, and by changes made behind its back (refresh)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbox import Overlay, Workspace
from tests.test_sandbox_support import git, make_repo, state_base  # noqa: F401


@pytest.fixture(params=["inotify", "stat"])
def workspace(request: pytest.FixtureRequest, tmp_path: Path) -> Workspace:
    ws = Workspace(make_repo(tmp_path / "ws"), watch=request.param)
    assert ws.version == 0
    assert ws.watch_mode == request.param
    return ws


def test_nothing_changed_keeps_the_version(workspace: Workspace) -> None:
    (workspace.root / "src" / "app.py").read_text()
    assert workspace.refresh() == 0
    assert workspace.refresh() == 0


@pytest.mark.parametrize(
    "change",
    [
        lambda r: (r / "src" / "app.py").write_text("changed\n"),
        lambda r: (r / "new.txt").write_text("new\n"),
        lambda r: (r / "notes.txt").unlink(),
        lambda r: (r / "run.sh").chmod(0o700),
        lambda r: (r / "src" / "app.py").rename(r / "src" / "renamed.py"),
        lambda r: (r / "deep" / "er").mkdir(parents=True),
        lambda r: os.utime(r / "README.md", (1, 1)),
    ],
    ids=["modify", "create", "delete", "chmod", "rename", "mkdir", "touch"],
)
def test_outside_change_bumps_once(workspace: Workspace, change) -> None:  # type: ignore[no-untyped-def]
    change(workspace.root)
    assert workspace.refresh() == 1
    assert workspace.refresh() == 1


def test_own_change_counts_once(workspace: Workspace) -> None:
    (workspace.root / "src" / "app.py").write_text("edited by a tool\n")
    assert workspace.bump() == 1
    assert workspace.refresh() == 1  # the bumped change is not counted again
    (workspace.root / "README.md").write_text("the user typed this\n")
    assert workspace.refresh() == 2


def test_changes_inside_new_directories_are_seen(workspace: Workspace) -> None:
    (workspace.root / "pkg").mkdir()
    (workspace.root / "pkg" / "a.py").write_text("a\n")
    assert workspace.refresh() == 1
    (workspace.root / "pkg" / "a.py").write_text("b\n")
    assert workspace.refresh() == 2


def test_git_objects_do_not_count(workspace: Workspace) -> None:
    git(workspace.root, "hash-object", "-w", "notes.txt")  # writes only under .git/objects
    assert workspace.refresh() == 0
    git(workspace.root, "add", "notes.txt")  # the index changes: git status output would too
    assert workspace.refresh() == 1


async def test_overlay_runs_are_not_outside_changes(workspace: Workspace, state_base: Path) -> None:
    async with Overlay(workspace, state_dir=state_base) as overlay:
        result = await overlay.run(["sh", "-c", "for i in 1 2 3; do echo $i > f$i; done; rm -r src; chmod 700 run.sh"])
        assert result.exit_code == 0
        assert overlay.version == 0 and overlay.current()
        (workspace.root / "README.md").write_text("edited behind Tao's back\n")
        assert not overlay.current() and workspace.version == 1


def test_confinement_is_unchanged(workspace: Workspace) -> None:
    from sandbox import WorkspaceEscape

    assert workspace.resolve("src/app.py") == workspace.root / "src" / "app.py"
    assert workspace.relative(workspace.root) == "."
    with pytest.raises(WorkspaceEscape):
        workspace.resolve("../x")
    (workspace.root / "out").symlink_to("/etc")
    with pytest.raises(WorkspaceEscape):
        workspace.resolve("out/passwd")


@pytest.mark.parametrize("use_openat2", [True, False], ids=["openat2", "walk"])
def test_lookups_beneath_the_root_agree_with_realpath(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       use_openat2: bool) -> None:
    """Symlinks that stay inside work as realpath made them work; ones that leave are refused."""
    from sandbox import WorkspaceEscape, beneath

    monkeypatch.setattr(beneath, "USE_OPENAT2", use_openat2)
    base = tmp_path.resolve()
    root = base / "ws"
    (root / "sub" / "deep").mkdir(parents=True)
    (base / "out").mkdir()
    (root / "a.py").write_text("A")
    (root / "sub" / "x.py").write_text("X")
    (base / "out" / "s.txt").write_text("S")
    links = {"lin": "sub", "abs_in": str(root / "a.py"), "abs_out": str(base / "out"), "rel_out": "../out",
             "back": "../ws/a.py", "sub/up": "../a.py", "loop": "loop"}
    for name, target in links.items():
        (root / name).symlink_to(target)
    inside = ["a.py", "./a.py", "a.py/", "lin/x.py", "lin/../a.py", "sub/up", "abs_in", "back", str(root / "a.py"),
              "../ws/a.py", ".", "", "sub/deep/.."]
    for path in inside:
        expected = os.path.realpath(root / path)
        assert str(beneath.real_path(root, path)) == expected, path
        fd, rel = beneath.open_beneath(root, path, os.O_RDONLY)
        try:
            assert os.path.samestat(os.fstat(fd), os.stat(expected)), path
            assert str(root / rel) == expected or (rel == "." and expected == str(root)), path
        finally:
            os.close(fd)
    for path in ["abs_out/s.txt", "rel_out/s.txt", "../out/s.txt", "/etc/passwd", "..", str(base / "out")]:
        with pytest.raises(WorkspaceEscape):
            beneath.real_path(root, path)
        with pytest.raises(WorkspaceEscape):
            beneath.open_beneath(root, path, os.O_RDONLY)
    with pytest.raises(OSError):
        beneath.open_beneath(root, "loop", os.O_RDONLY)
    with pytest.raises(FileNotFoundError):
        beneath.open_beneath(root, "nope/x.py", os.O_RDONLY)
    with pytest.raises(NotADirectoryError):
        beneath.open_beneath(root, "a.py/x", os.O_RDONLY)
    with pytest.raises(beneath.BadPath):
        beneath.open_beneath(root, "a\0b", os.O_RDONLY)
