"""Checkpoints and undo on real git repositories: the work tree goes back, the user's git state never moves."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from harness.checkpoints import Checkpoint, Checkpoints, from_events
from harness.events import Checkpointed, Undone
from tests.helpers import git, make_calc_repo


def user_state(repo: Path) -> dict[str, str]:
    """Everything of the user's git state that checkpoints must leave byte-identical."""
    return {
        "status": git(repo, "status", "--porcelain=v1", "--untracked-files=all", "--ignored"),
        "head": git(repo, "rev-parse", "HEAD"),
        "branch": git(repo, "symbolic-ref", "HEAD"),
        "cached": git(repo, "diff", "--cached", "--binary"),
        "stash": git(repo, "stash", "list"),
        "refs": git(repo, "for-each-ref"),
        "index": git(repo, "ls-files", "--stage"),
    }


def tree(root: Path) -> dict[str, str]:
    """Every file under root (but .git) with its content."""
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*"))
            if p.is_file() and ".git" not in p.relative_to(root).parts}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """The calc repository with a staged change, a stash, an ignored folder and an untracked file."""
    repo = make_calc_repo(tmp_path)
    (repo / ".gitignore").write_text("build/\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-qm", "ignore build")
    (repo / "README.md").write_text("stashed change\n")
    git(repo, "stash", "-q")
    (repo / "calc" / "ops.py").write_text((repo / "calc" / "ops.py").read_text() + "# staged\n")
    git(repo, "add", "calc/ops.py")
    (repo / "notes.txt").write_text("mine, untracked\n")
    (repo / "build").mkdir()
    (repo / "build" / "big.bin").write_text("ignored\n")
    return repo


def test_undo_restores_modified_deleted_and_created_files_and_leaves_git_alone(repo: Path, tmp_path: Path) -> None:
    before = user_state(repo)
    index = (repo / ".git" / "index").read_bytes()  # `git status` refreshes it; ours must never write it
    store = Checkpoints.open(repo, tmp_path / "state")
    start = tree(repo)
    store.snapshot(1, "fix add")
    (repo / "calc" / "ops.py").write_text("changed by turn 1\n")
    (repo / "notes.txt").unlink()
    (repo / "calc" / "new").mkdir()
    (repo / "calc" / "new" / "made.py").write_text("created\n")
    after_one = tree(repo)
    store.snapshot(2, "and more")
    (repo / "README.md").write_text("turn 2\n")
    (repo / "build" / "out.o").write_text("ignored output\n")

    second = store.undo()
    assert second is not None and second.checkpoint.turn == 2 and second.modified == ["README.md"]
    assert {k: v for k, v in tree(repo).items() if not k.startswith("build/")} == {
        k: v for k, v in after_one.items() if not k.startswith("build/")}
    first = store.undo()
    assert first is not None and first.checkpoint.turn == 1
    assert (first.modified, first.removed, first.recreated) == (["calc/ops.py"], ["calc/new/made.py"], ["notes.txt"])
    assert "undid turn 1 (fix add)" in first.summary() and "brought back notes.txt" in first.summary()
    assert {k: v for k, v in tree(repo).items() if k != "build/out.o"} == start
    assert not (repo / "calc" / "new").exists()  # the folder the turn made is gone with its file
    assert (repo / "build" / "out.o").exists()  # ignored files are never touched
    assert store.undo() is None  # past the session's start: nothing to undo
    assert (repo / ".git" / "index").read_bytes() == index
    (repo / "build" / "out.o").unlink()
    assert user_state(repo) == before


def test_a_turn_that_changed_nothing_is_skipped_and_diff_covers_the_session(repo: Path, tmp_path: Path) -> None:
    store = Checkpoints.open(repo, tmp_path / "state")
    assert store.diff() is None
    store.snapshot(1, "edit")
    (repo / "calc" / "ops.py").write_text("edited\n")
    store.snapshot(2, "only looked")
    diff = store.diff()
    assert diff is not None and "+edited" in diff and "notes.txt" not in diff  # untracked before the session
    restored = store.undo()
    assert restored is not None and restored.checkpoint.turn == 1
    assert store.diff() == ""


def test_the_store_keeps_ignored_trees_out_and_borrows_the_users_objects(repo: Path, tmp_path: Path) -> None:
    store = Checkpoints.open(repo, tmp_path / "state")
    checkpoint = store.snapshot(1, "look")
    listed = subprocess.run(["git", "--git-dir", str(store.git_dir), "ls-tree", "-r", "--name-only",
                             checkpoint.commit], capture_output=True, text=True, check=True).stdout.split()
    assert "notes.txt" in listed and "calc/ops.py" in listed and not any(p.startswith("build/") for p in listed)
    objects = store.git_dir / "objects"
    loose = [p for p in objects.glob("??/*")]
    assert len(loose) < len(listed)  # unchanged files are the user's blobs, not copies


def test_a_directory_that_is_not_a_repository(tmp_path: Path) -> None:
    work = tmp_path / "plain"
    (work / "node_modules" / "dep").mkdir(parents=True)
    (work / "node_modules" / "dep" / "index.js").write_text("heavy\n")
    (work / "main.py").write_text("print(1)\n")
    store = Checkpoints.open(work, tmp_path / "state")
    store.snapshot(1, "go")
    (work / "main.py").write_text("print(2)\n")
    (work / "extra.py").write_text("x\n")
    restored = store.undo()
    assert restored is not None and restored.removed == ["extra.py"] and restored.modified == ["main.py"]
    assert (work / "main.py").read_text() == "print(1)\n" and not (work / "extra.py").exists()
    assert (work / "node_modules" / "dep" / "index.js").exists()
    assert not (work / ".git").exists()


def test_two_sessions_in_one_repository_keep_their_own_checkpoints(repo: Path, tmp_path: Path) -> None:
    one = Checkpoints.open(repo, tmp_path / "state", "one")
    two = Checkpoints.open(repo, tmp_path / "state", "two")
    one.snapshot(1, "first session")
    (repo / "a.txt").write_text("a\n")
    two.snapshot(1, "second session")
    (repo / "b.txt").write_text("b\n")
    restored = two.undo()
    assert restored is not None and restored.removed == ["b.txt"] and (repo / "a.txt").exists()
    one.close()
    two.close()
    assert not one.index.exists()


def test_a_resumed_session_can_still_undo_the_turns_before_it(repo: Path, tmp_path: Path) -> None:
    first = Checkpoints.open(repo, tmp_path / "state", "first")
    one = first.snapshot(1, "make x")
    (repo / "x.txt").write_text("x\n")
    two = first.snapshot(2, "make y")
    (repo / "y.txt").write_text("y\n")
    restored = first.undo()
    assert restored is not None and not (repo / "y.txt").exists()
    first.close()
    saved = [Checkpointed(0.0, 1, 1, one.commit, one.tree, one.label), Checkpointed(0.0, 2, 2, two.commit, two.tree),
             Undone(0.0, 2, 2, two.commit, restored.saved)]
    again = Checkpoints.open(repo, tmp_path / "state", "again")
    again.adopt(from_events(saved))
    restored = again.undo()
    assert restored is not None and restored.checkpoint.turn == 1 and not (repo / "x.txt").exists()
    assert again.undo() is None


def test_a_store_kept_inside_the_work_tree_is_never_snapshotted(tmp_path: Path) -> None:
    work = tmp_path / "plain"
    work.mkdir()
    (work / "main.py").write_text("print(1)\n")
    store = Checkpoints.open(work, work / ".state" / "checkpoints")
    store.snapshot(1, "one")
    checkpoint = store.snapshot(2, "two")
    listed = subprocess.run(["git", "--git-dir", str(store.git_dir), "ls-tree", "-r", "--name-only",
                             checkpoint.commit], capture_output=True, text=True, check=True).stdout.split()
    assert listed == ["main.py"]


def aged(paths: list[Path], days: float) -> None:
    """Make files look `days` old, as a store left alone that long would be."""
    then = time.time() - days * 86400
    for path in paths:
        os.utime(path, (then, then))


def objects(store: Path) -> list[Path]:
    return [p for p in (store / "objects").rglob("*") if p.is_file()]


def has(store: Path, name: str) -> bool:
    """Whether the store still holds the object `name` (a commit id, or a blob's id)."""
    return subprocess.run(["git", "--git-dir", str(store), "cat-file", "-e", name]).returncode == 0


def blob(text: str) -> str:
    return subprocess.run(["git", "hash-object", "--stdin"], input=text, capture_output=True, text=True,
                          check=True).stdout.strip()


def past_session(repo: Path, state: Path, name: str, content: str,
                 close: bool = True) -> tuple[Checkpoints, Checkpoint]:
    """A session that wrote `content` (a blob no other session has) and took a checkpoint of it."""
    store = Checkpoints.open(repo, state, name)
    (repo / "work.txt").write_text(content)
    checkpoint = store.snapshot(1, name)
    if close:
        store.close()
    return store, checkpoint


def test_sessions_past_the_newest_and_older_than_the_limit_are_pruned_with_their_objects(repo: Path,
                                                                                         tmp_path: Path) -> None:
    state = tmp_path / "state"
    past = [past_session(repo, state, f"s{i}", f"only s{i}\n", close=i != 1) for i in range(1, 5)]  # s1 crashed
    store = past[0][0].git_dir
    aged(objects(store), 70)
    for i, (session, _) in enumerate(past):
        aged([session.mark], 70 - i)  # s4 used last
    assert past[0][0].index.exists()
    now = Checkpoints.open(repo, state, "now", keep_sessions=3)  # itself, s4 and s3
    for (session, checkpoint), kept in zip(past, (False, False, True, True)):
        assert has(store, checkpoint.commit) is kept and has(store, blob(f"only {session.name}\n")) is kept
        assert session.mark.exists() is kept
    assert not past[0][0].index.exists()  # the crashed session's index went with it
    refs = subprocess.run(["git", "--git-dir", str(store), "for-each-ref", "--format=%(refname)"],
                          capture_output=True, text=True, check=True).stdout.split()
    assert sorted(refs) == sorted(f"refs/sessions/{s.key}/{c.commit}" for s, c in past[2:])
    now.adopt([past[0][1], past[3][1]])  # a saved session of s1 can no longer go back there; s4's still can
    assert [c.commit for c in now.stack] == [past[3][1].commit]
    (repo / "work.txt").write_text("changed since\n")
    restored = now.undo()
    assert restored is not None and (repo / "work.txt").read_text() == "only s4\n"


def test_recent_sessions_are_kept_however_many_and_a_resumed_old_one_keeps_its_own(repo: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    past = [past_session(repo, state, f"s{i}", f"only s{i}\n") for i in range(1, 4)]
    store = past[0][0].git_dir
    Checkpoints.open(repo, state, "now", keep_sessions=1).close()  # every other session is younger than 30 days
    assert all(has(store, checkpoint.commit) for _, checkpoint in past)
    aged([*objects(store), *(m for m in (store / "sessions").iterdir())], 70)
    again = Checkpoints.open(repo, state, "s1", keep_sessions=1)  # resumed: the same name, its checkpoints kept
    assert has(store, past[0][1].commit) and not has(store, past[1][1].commit)
    again.adopt([past[0][1]])
    restored = again.undo()  # the tree holds s3's work now
    assert restored is not None and (repo / "work.txt").read_text() == "only s1\n"


def test_a_store_from_before_retention_loses_only_its_old_unreferenced_objects(repo: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    _, old = past_session(repo, state, "old", "old\n")
    store = Checkpoints.open(repo, state, "probe").git_dir
    shutil.rmtree(store / "sessions")
    shutil.rmtree(store / "refs" / "sessions")  # as it was: commits that no ref keeps
    aged(objects(store), 70)
    _, young = past_session(repo, state, "young", "young\n")
    shutil.rmtree(store / "sessions")
    shutil.rmtree(store / "refs" / "sessions")
    Checkpoints.open(repo, state, "now").close()
    assert not has(store, old.commit) and not has(store, blob("old\n"))
    assert has(store, young.commit) and has(store, blob("young\n"))  # younger than 30 days: kept


def left_alone(store: Path, days: float) -> None:
    """Make the whole store look untouched for `days`, as a store nobody opened that long would be."""
    aged([store, *store.rglob("*")], days)


def abandoned_store(work: Path, state: Path, days: float = 70, held: bool = False,
                    recorded: bool = True) -> tuple[Path, Checkpoints]:
    """The store of `work` with one checkpoint, left alone `days`, then `work` deleted; `held`: its session is
    still open; `recorded`: unless False, the store says where its work tree was (stores made before it did not)."""
    session, _ = past_session(work, state, work.parent.name, f"only {work.parent.name}\n", close=not held)
    if not recorded:
        (session.git_dir / "repository").unlink(missing_ok=True)
    left_alone(session.git_dir, days)
    shutil.rmtree(work)
    return session.git_dir, session


def test_stores_unused_for_30_days_whose_work_tree_is_gone_are_removed_unless_held(tmp_path: Path) -> None:
    state = tmp_path / "state"
    gone, _ = abandoned_store(make_calc_repo(tmp_path / "gone"), state)
    recent, _ = abandoned_store(make_calc_repo(tmp_path / "recent"), state, days=10)
    held, session = abandoned_store(make_calc_repo(tmp_path / "held"), state, held=True)  # its session still open
    old, _ = abandoned_store(make_calc_repo(tmp_path / "old"), state, recorded=False)  # its borrowed objects gone
    (tmp_path / "plain" / "work").mkdir(parents=True)
    (tmp_path / "plain" / "work" / "main.py").write_text("print(1)\n")
    plain, _ = abandoned_store(tmp_path / "plain" / "work", state, recorded=False)  # nothing says where it was
    alive = Checkpoints.open(make_calc_repo(tmp_path / "alive"), state, "alive")
    alive.snapshot(1, "alive")
    alive.close()
    left_alone(alive.git_dir, 70)
    now = Checkpoints.open(make_calc_repo(tmp_path / "here"), state, "now")
    assert sorted(p.name for p in state.iterdir()) == sorted(s.name for s in (recent, held, plain, alive.git_dir,
                                                                                now.git_dir))
    assert not gone.exists() and not old.exists()
    session.close()  # let go: nothing holds it now
    Checkpoints.open(tmp_path / "here" / "calc", state, "again").close()
    assert not held.exists() and recent.exists() and plain.exists() and alive.git_dir.exists()
    now.snapshot(1, "still works")


def test_a_store_that_cannot_be_removed_is_logged_and_removed_at_a_later_opening(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    state = tmp_path / "state"
    gone, _ = abandoned_store(make_calc_repo(tmp_path / "gone"), state)
    here = make_calc_repo(tmp_path / "here")

    def refuse(path: Path) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(shutil, "rmtree", refuse)  # a stand-in for a disk that refuses: the test is about Tao's answer
    with caplog.at_level(logging.WARNING, logger="harness.checkpoints"):
        first = Checkpoints.open(here, state, "first")
    assert "could not remove the abandoned checkpoint store" in caplog.text and "Permission denied" in caplog.text
    assert not gone.exists()  # renamed out of the way first: no session can find it half deleted
    monkeypatch.undo()
    first.snapshot(1, "works")
    first.close()
    Checkpoints.open(here, state, "second").close()
    assert [p.name for p in state.iterdir()] == [first.git_dir.name]
