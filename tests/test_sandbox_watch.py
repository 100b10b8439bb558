"""Noticing changes behind Tao's back, also those made through a hard link from outside the tree."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbox.watch import TreeWatcher


@pytest.fixture(params=["inotify", "stat"])
def mode(request: pytest.FixtureRequest) -> str:
    return request.param


def make_tree(tmp_path: Path) -> tuple[Path, Path]:
    tree, outside = tmp_path / "tree", tmp_path / "outside"
    (tree / "sub").mkdir(parents=True)
    outside.mkdir()
    (tree / "sub" / "a.txt").write_text("a\n")
    return tree, outside


def test_a_write_through_an_outside_hard_link_is_noticed(tmp_path: Path, mode: str) -> None:
    tree, outside = make_tree(tmp_path)
    os.link(tree / "sub" / "a.txt", outside / "a-link.txt")  # before watching starts
    watcher = TreeWatcher(tree, mode)
    try:
        assert not watcher.changed()
        with open(outside / "a-link.txt", "a") as handle:
            handle.write("more\n")
        assert watcher.changed()
        assert not watcher.changed()  # the change became the new baseline
    finally:
        watcher.close()


def test_a_file_linked_in_while_watching_is_kept_up_to_date(tmp_path: Path, mode: str) -> None:
    tree, outside = make_tree(tmp_path)
    (outside / "shared.txt").write_text("one\n")
    watcher = TreeWatcher(tree, mode)
    try:
        os.link(outside / "shared.txt", tree / "sub" / "shared.txt")  # the tree changes: seen
        assert watcher.changed()
        (outside / "shared.txt").write_text("two\n")  # the same inode through its outside name
        assert watcher.changed()
        (tree / "sub" / "shared.txt").unlink()
        assert watcher.changed()
        (outside / "shared.txt").write_text("three\n")  # no longer in the tree: no change of the tree
        assert not watcher.changed()
    finally:
        watcher.close()


def test_a_moved_directory_keeps_its_linked_files_watched(tmp_path: Path, mode: str) -> None:
    tree, outside = make_tree(tmp_path)
    os.link(tree / "sub" / "a.txt", outside / "a-link.txt")
    watcher = TreeWatcher(tree, mode)
    try:
        (tree / "sub").rename(tree / "moved")
        assert watcher.changed()
        (outside / "a-link.txt").write_text("changed\n")
        assert watcher.changed()
    finally:
        watcher.close()


def test_a_file_created_and_removed_between_checks_is_no_change(tmp_path: Path, mode: str) -> None:
    """A lock file or temporary that a run creates and removes leaves the tree as it was: no new version, as a
    promoted overlay run of the same call (which shows only net changes) gets none."""
    tree, _ = make_tree(tmp_path)
    watcher = TreeWatcher(tree, mode)
    try:
        assert not watcher.changed()
        lock = tree / "sub" / "index.lock"
        lock.write_text("locked\n")
        lock.unlink()
        (tree / "scratch").mkdir()
        (tree / "scratch" / "tmp.txt").write_text("x\n")
        (tree / "scratch" / "tmp.txt").rename(tree / "scratch" / "tmp2.txt")
        (tree / "scratch" / "tmp2.txt").unlink()
        (tree / "scratch").rmdir()
        assert not watcher.changed()
        lock.write_text("kept\n")  # created and left: a change
        assert watcher.changed()
        lock.unlink()
        lock.write_text("again\n")  # removed, then there again: a change
        assert watcher.changed()
    finally:
        watcher.close()
