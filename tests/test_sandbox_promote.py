"""Promotion of an overlay run's changes into the real tree: as the real run, never through a link out.

Real overlays, real commands; the comparison runs the same commands for real in a copy at the same path.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox import ChangeKind, Overlay, Workspace
from sandbox.changes import Change
from sandbox.promote import PromotionRefused, apply_changes, hard_links
from tests.test_sandbox_property import op


def tree(root: Path) -> dict[str, tuple]:
    """Type, mode, owner, bytes or link target of every entry under root, and which files are linked together."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if rel == ".git" or rel.startswith(".git/"):
                continue
            st_ = os.lstat(path)
            if stat.S_ISREG(st_.st_mode):
                content = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                content = os.readlink(path) if stat.S_ISLNK(st_.st_mode) else ""
            out[rel] = (stat.S_IFMT(st_.st_mode), stat.S_IMODE(st_.st_mode), st_.st_uid, st_.st_gid, content,
                        st_.st_nlink if stat.S_ISREG(st_.st_mode) else 0)
    return out


def small_tree(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "README.md").write_text("# demo\n")
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("def add(a, b):\n    return a + b\n")
    (root / "out").mkdir()
    (root / "run.sh").write_text("#!/bin/sh\necho run\n")
    (root / "run.sh").chmod(0o755)
    (root / "link").symlink_to("src/app.py")
    return root


async def overlay_run(root: Path, command: str) -> tuple[Overlay, list[Change]]:
    """Run `command` in a fresh overlay of root; the overlay (still open) and its changes."""
    overlay = Overlay(Workspace(root, watch="stat"))
    result = await overlay.run(["sh", "-c", command])
    assert result.exit_code == 0, result.text
    return overlay, await asyncio.to_thread(overlay.changes)


async def test_a_change_to_a_hard_linked_file_is_refused_and_nothing_outside_is_written(tmp_path: Path) -> None:
    root = small_tree(tmp_path / "work")
    outside = tmp_path / "outside.txt"
    outside.write_text("outside\n")
    os.link(outside, root / "linked.txt")
    overlay, changes = await overlay_run(root, "echo appended >> linked.txt && echo new > fresh.txt")
    try:
        with pytest.raises(PromotionRefused, match="hard-linked file: linked.txt"):
            apply_changes(root, changes)
    finally:
        await overlay.discard()
    assert outside.read_text() == "outside\n" and os.stat(outside).st_nlink == 2
    assert not (root / "fresh.txt").exists(), "a refused promotion writes nothing at all"


async def test_a_hard_link_the_run_made_is_never_promoted_as_copies(tmp_path: Path) -> None:
    """Promotion would place separate entries where the real run linked one inode (a file or a symlink)."""
    root = small_tree(tmp_path / "work")
    overlay, changes = await overlay_run(root, "ln -P link link2 && ln README.md readme2")
    try:
        reasons = hard_links(root, changes)
        with pytest.raises(PromotionRefused):
            apply_changes(root, changes)
    finally:
        await overlay.discard()
    assert any("link2" in r for r in reasons) and any("readme2" in r for r in reasons)
    assert not (root / "link2").exists() and not (root / "readme2").exists()


async def test_an_owner_change_alone_is_promoted(tmp_path: Path) -> None:
    """chown keeps the bytes and the mode: the overlay lists the file as touched, yet the real run changes it."""
    root = small_tree(tmp_path / "work")
    overlay, changes = await overlay_run(root, "chown 4327:4328 run.sh && chown -h 4329:4330 link")
    try:
        apply_changes(root, changes)
    finally:
        await overlay.discard()
    run, link = os.lstat(root / "run.sh"), os.lstat(root / "link")
    assert (run.st_uid, run.st_gid, stat.S_IMODE(run.st_mode)) == (4327, 4328, 0o755)
    assert (link.st_uid, link.st_gid) == (4329, 4330)


async def test_promotion_carries_owner_mode_and_bytes(tmp_path: Path) -> None:
    root = small_tree(tmp_path / "work")
    command = ("printf 'new\\n' > new.txt && chown 4321:4322 new.txt && chmod 640 new.txt && "
               "printf 'changed\\n' >> README.md && chown 4323:4324 README.md && mkdir -p d/e && "
               "chown 4325:4326 d/e && ln -s ../README.md d/e/l")
    overlay, changes = await overlay_run(root, command)
    try:
        apply_changes(root, changes)
    finally:
        await overlay.discard()
    new, readme, inner = os.lstat(root / "new.txt"), os.lstat(root / "README.md"), os.lstat(root / "d" / "e")
    assert (new.st_uid, new.st_gid, stat.S_IMODE(new.st_mode)) == (4321, 4322, 0o640)
    assert (readme.st_uid, readme.st_gid) == (4323, 4324) and (root / "README.md").read_text() == "# demo\nchanged\n"
    assert (inner.st_uid, inner.st_gid) == (4325, 4326)
    assert os.readlink(root / "d" / "e" / "l") == "../README.md"


async def test_a_reader_of_the_old_file_never_sees_it_rewritten(tmp_path: Path) -> None:
    """The new bytes are renamed over the file: an open reader keeps the whole old file, new opens see the new."""
    root = small_tree(tmp_path / "work")
    old = "old line\n" * 1000
    (root / "report.txt").write_text(old)
    overlay, changes = await overlay_run(root, "printf 'new\\n' > report.txt")
    try:
        with open(root / "report.txt") as reader:
            apply_changes(root, changes)
            assert reader.read() == old
    finally:
        await overlay.discard()
    assert (root / "report.txt").read_text() == "new\n"
    assert not [p for p in os.listdir(root) if p.startswith(".tao-promote-")]


async def test_a_symlink_planted_after_the_run_is_never_followed(tmp_path: Path) -> None:
    root = small_tree(tmp_path / "work")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    overlay, changes = await overlay_run(root, "echo report > out/report.txt && rm src/app.py")
    try:
        (root / "out").rmdir()
        (root / "out").symlink_to(elsewhere)  # planted between the run and the promotion
        (root / "src").rename(tmp_path / "src-moved")
        (root / "src").symlink_to(tmp_path / "src-moved")
        with pytest.raises(PromotionRefused, match="not a directory in the real tree"):
            apply_changes(root, changes)
    finally:
        await overlay.discard()
    assert os.listdir(elsewhere) == []
    assert (tmp_path / "src-moved" / "app.py").exists()


def test_promotion_handles_trees_of_any_depth(tmp_path: Path) -> None:
    """A run that made (or removed) 1,100 nested directories is promoted without recursion."""
    root = small_tree(tmp_path / "work")
    source = tmp_path / "upper"
    names = ["d"] * 1100
    deep = source.joinpath(*names)
    source.mkdir()
    for depth in range(1, len(names) + 1):  # one level at a time: pathlib's mkdir(parents=True) recurses
        os.mkdir(source.joinpath(*names[:depth]))
    (deep / "leaf.txt").write_text("leaf\n")
    paths = ["/".join(names[:i]) for i in range(1, len(names) + 1)]
    created = [Change(p, ChangeKind.CREATED, "dir", source / p) for p in paths]
    created.append(Change(paths[-1] + "/leaf.txt", ChangeKind.CREATED, "file", deep / "leaf.txt"))
    apply_changes(root, created)
    assert root.joinpath(*names, "leaf.txt").read_text() == "leaf\n"
    apply_changes(root, [Change("d", ChangeKind.DELETED, "dir", None)])  # listed alone: the rest must go too
    assert not (root / "d").exists()
    apply_changes(tmp_path, [Change("upper", ChangeKind.DELETED, "dir", None)])  # shutil.rmtree would recurse
    assert not source.exists()


def test_promotion_leaves_the_tree_as_the_real_run_does(tmp_path: Path) -> None:
    template = small_tree(tmp_path / "template")
    (template / "docs").mkdir()
    (template / "docs" / "x.md").write_text("x\n")
    counter = iter(range(10 ** 6))

    async def check(ops: list[str]) -> None:
        command = "; ".join(f"{{ {o}; }} 2>/dev/null" for o in ops) + "; true"
        work = tmp_path / "work"
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(template, work, symlinks=True)
        before = tree(work)
        overlay, changes = await overlay_run(work, command)
        try:
            apply_changes(work, changes)
        except PromotionRefused:  # refused before anything was written: the call then runs for real
            assert tree(work) == before
            return
        finally:
            await overlay.discard()
        promoted = tree(work)
        shutil.rmtree(work)
        shutil.copytree(template, work, symlinks=True)  # the same path: the real run
        proc = await asyncio.create_subprocess_exec("sh", "-c", command, cwd=work)
        await proc.wait()
        assert promoted == tree(work), f"run {next(counter)}: {command}"
        shutil.rmtree(work)

    @settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.lists(op, min_size=1, max_size=6))
    def prop(ops: list[str]) -> None:
        asyncio.run(check(ops))

    prop()
