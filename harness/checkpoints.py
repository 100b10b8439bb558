"""Checkpoints of the work tree before each turn, and undo: a private git store that never touches the user's.

    store = Checkpoints.open(repo, state_dir() / "checkpoints")
    store.snapshot(1, "fix the test")     # before the agent works on a message
    restored = store.undo()              # the work tree as it was before the last turn that changed it
    store.diff()                         # what the session changed since its first checkpoint

The store is a git directory of its own under Tao's state folder, one per repository, with its own index
file per session and the repository as its work tree. Git runs with GIT_DIR, GIT_INDEX_FILE and
GIT_WORK_TREE pointing there, so the user's HEAD, branch, index, stash and refs are never read for
writing. In a git repository the store borrows the user's objects (alternates) and starts from a copy of
the user's index, so the first snapshot only hashes what differs from it; `.gitignore` (and the user's
`.git/info/exclude`) keep ignored trees out. Outside git, common heavy folders (node_modules, .venv, ...)
are left out. Ignored files are never restored or removed by an undo.

Retention: every commit a session makes (its checkpoints, the state before each undo, and those a resumed
session adopts) is kept by a ref of that session, `refs/sessions/<key>/<commit>`, and `sessions/<key>` says
when the session last used the store (its mtime). When a session opens the store, the sessions that are
neither among the KEEP_SESSIONS newest (the opening one counts) nor used within KEEP_DAYS lose their refs,
marks and leftover index, and `git prune` removes the objects nothing kept reaches and that are older than
KEEP_DAYS (a younger object may belong to a session taking a checkpoint at that moment). The opening
session is the newest, so what it takes or adopts is never pruned; a saved session whose checkpoints are
gone simply cannot undo those turns (`adopt` drops them).

Abandoned stores: each store records the path of its work tree (the file `repository`), and every session
holds a shared lock on the store's `in-use` file while it has the store open. Opening a store also removes each
other store in the folder that no session used within KEEP_DAYS (its session marks, index files and what each
opening writes are all older) and whose work tree is gone, unless a session holds it: a deleted repository or
a one-off checkout is never opened again, so its store would stay forever. A store made before the record says
nothing of its work tree (its name is a hash of the path): it counts as gone when the repository whose objects
it borrowed (alternates) is gone, as its checkpoints could not be read any more anyway; otherwise it is kept
until its work tree opens it again and records itself. A store is renamed out of the way under an exclusive
lock, then deleted; one that cannot be deleted is logged and tried again at the next opening.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import re
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.events import Checkpointed, Event, Undone

_log = logging.getLogger(__name__)

# Left out of snapshots of a directory that is not a git repository (it has no .gitignore to say so).
DEFAULT_EXCLUDES = ("node_modules/", ".venv/", "venv/", "__pycache__/", "*.pyc", ".tox/", ".nox/", ".mypy_cache/",
                    ".pytest_cache/", ".ruff_cache/", ".cache/", ".git/", ".hg/", ".svn/")
# Fixed identity and dates: a checkpoint's commit id depends only on the trees it records.
_IDENTITY = {"GIT_AUTHOR_NAME": "tao", "GIT_AUTHOR_EMAIL": "tao@localhost", "GIT_COMMITTER_NAME": "tao",
             "GIT_COMMITTER_EMAIL": "tao@localhost", "GIT_AUTHOR_DATE": "1970-01-01T00:00:00Z",
             "GIT_COMMITTER_DATE": "1970-01-01T00:00:00Z"}
KEEP_SESSIONS = 20  # a repository's newest sessions whose checkpoints are kept, however old
KEEP_DAYS = 30.0  # ... and those of every session that used the store more recently than this
RECORD = "repository"  # in each store: the path of its work tree, so that an abandoned store can be told
IN_USE = "in-use"  # in each store: a session holds a shared lock on it while it has the store open
_STORE_NAME = re.compile(r"[0-9a-f]{16}")  # a store's folder: the hash of its work tree's path
_REMOVING = ".removing-"  # a store being deleted is renamed so first; one left so is deleted at the next opening
# Variables that would point git at another repository than the store.
_FOREIGN = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES",
            "GIT_COMMON_DIR", "GIT_NAMESPACE", "GIT_CEILING_DIRECTORIES", "GIT_PREFIX")


class CheckpointError(RuntimeError):
    """A checkpoint could not be taken or restored (git is missing, or it failed); the message says why."""


@dataclass(frozen=True)
class Checkpoint:
    """The work tree as it was before one turn."""

    turn: int
    commit: str
    tree: str
    label: str  # the message of the turn, first line


@dataclass(frozen=True)
class Restored:
    """What an undo did: the checkpoint it went back to, and the files it changed to get there."""

    checkpoint: Checkpoint
    saved: str  # a commit of the work tree as it was just before the undo (kept as long as the session's checkpoints)
    modified: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)  # created since the checkpoint
    recreated: list[str] = field(default_factory=list)  # deleted since the checkpoint

    def summary(self) -> str:
        """One line for people: which turn was undone and what changed on disk."""
        return describe_undo(self.checkpoint.turn, self.checkpoint.label, self.modified, self.removed, self.recreated)


class Checkpoints:
    """The checkpoints of one session in one work tree; thread-safe (callers run it in a worker thread)."""

    def __init__(self, root: Path, git_dir: Path, name: str) -> None:
        """Use `open`; `name` keeps this session's index apart from other sessions' in the same store."""
        self.root, self.git_dir = root, git_dir
        self.name, self.index = name, git_dir / f"index-{name}"
        self.key = hashlib.sha256(name.encode()).hexdigest()[:16]  # names this session's refs and mark
        self.mark = git_dir / "sessions" / self.key
        self.stack: list[Checkpoint] = []  # checkpoints an undo can still go back to, oldest first
        self.start: Checkpoint | None = None  # the session's first checkpoint, for `diff`
        self._lock = threading.Lock()
        self._seeded = False
        self._in_use: int | None = None  # the descriptor of the store's IN_USE file, locked shared while open

    @classmethod
    def open(cls, root: Path, folder: Path, name: str = "", keep_sessions: int = KEEP_SESSIONS,
             keep_days: float = KEEP_DAYS) -> Checkpoints:
        """The store of `root` under `folder` (made on first use), with old sessions' checkpoints pruned and other
        work trees' abandoned stores removed (see the module's docstring: `keep_sessions`, `keep_days`); raises
        CheckpointError when git cannot run."""
        root = root.resolve()
        if shutil.which("git") is None:
            raise CheckpointError("git is not installed, so Tao keeps no checkpoints and /undo is unavailable")
        git_dir = folder / hashlib.sha256(str(root).encode()).hexdigest()[:16]
        store = cls(root, git_dir, name or f"{os.getpid()}-{id(root):x}")
        store._hold()
        try:
            store._prepare()
        except BaseException:
            store._release()
            raise
        try:
            store.prune(keep_sessions, keep_days)
        except (CheckpointError, OSError) as exc:  # old checkpoints stay a while longer; this session's are safe
            _log.warning("could not prune old checkpoints in %s: %s", git_dir, exc)
        remove_abandoned(folder, git_dir, keep_days)
        return store

    # -- taking and restoring -----------------------------------------------------------------------

    def snapshot(self, turn: int, label: str) -> Checkpoint:
        """Record the work tree as it is now, before turn `turn` (tracked and untracked, ignored files left out)."""
        with self._lock:
            tree = self._stage()
            parent = ["-p", self.stack[-1].commit] if self.stack else []
            commit = self._git("commit-tree", tree, *parent, "-m", f"turn {turn}: {label}").strip()
            self._keep([commit])
            checkpoint = Checkpoint(turn, commit, tree, label)
            self.stack.append(checkpoint)
            self.start = self.start or checkpoint
            return checkpoint

    def undo(self) -> Restored | None:
        """Put the work tree back as it was before the last turn that changed it; None when no turn did."""
        with self._lock:
            current = self._stage()
            while self.stack and self.stack[-1].tree == current:
                self.stack.pop()  # that turn changed nothing: undo the one before
            if not self.stack:
                return None
            checkpoint = self.stack.pop()
            saved = self._git("commit-tree", current, "-p", checkpoint.commit, "-m", "before undo").strip()
            self._keep([saved])
            changes = self._git("diff-index", "--cached", "--no-renames", "--name-status", "-z", checkpoint.tree)
            modified, removed, recreated = _split(changes)
            self._git("read-tree", "-u", "--reset", checkpoint.tree)
            return Restored(checkpoint, saved, modified, removed, recreated)

    def diff(self) -> str | None:
        """The patch from the session's first checkpoint to the work tree now; None before the first one."""
        with self._lock:
            if self.start is None:
                return None
            self._stage()
            return self._git("diff", "--cached", "--binary", "--no-color", "--no-ext-diff", self.start.tree)

    def adopt(self, checkpoints: list[Checkpoint]) -> None:
        """Take over a resumed session's checkpoints (oldest first), those whose commits the store still has."""
        with self._lock:
            kept = [c for c in checkpoints if self._run("cat-file", "-e", f"{c.commit}^{{commit}}").returncode == 0]
            self._keep([c.commit for c in kept])  # this session's now: pruned with it, not with the one that made them
            self.stack = kept
            self.start = self.start or (kept[0] if kept else None)

    def close(self) -> None:
        """Drop this session's index (the commits stay in the store) and let go of the store."""
        self.index.unlink(missing_ok=True)
        self._release()

    # -- retention ----------------------------------------------------------------------------------

    def prune(self, keep_sessions: int, keep_days: float) -> list[str]:
        """Drop the sessions neither among the `keep_sessions` newest (this one first) nor used within `keep_days`,
        then remove what nothing kept reaches and is older than `keep_days`; returns the names dropped."""
        marks = self.git_dir / "sessions"
        first = not marks.is_dir()  # a store from before retention: its commits have no refs yet
        with self._lock:
            self._used()
            cutoff = time.time() - keep_days * 86400
            others = sorted((m for m in marks.iterdir() if m != self.mark), key=lambda m: m.stat().st_mtime,
                            reverse=True)
            dropped = [m for m in others[max(0, keep_sessions - 1):] if m.stat().st_mtime < cutoff]
            names = [m.read_text(encoding="utf-8", errors="replace") for m in dropped]
            refs = self._git("for-each-ref", "--format=%(refname)",
                             *[f"refs/sessions/{m.name}" for m in dropped]) if dropped else ""
            if refs:
                self._git("update-ref", "--stdin", input="".join(f"delete {ref}\n" for ref in refs.split()))
            for mark, name in zip(dropped, names):
                (self.git_dir / f"index-{name}").unlink(missing_ok=True)  # left by a session that never closed
                mark.unlink()
            if dropped or first:
                self._git("prune", f"--expire={int(cutoff)}")
            return names

    def _used(self) -> None:
        """Say that this session uses the store now (its mark's time), so that its checkpoints are kept."""
        self.mark.parent.mkdir(exist_ok=True)
        self.mark.write_text(self.name, encoding="utf-8")

    def _keep(self, commits: list[str]) -> None:
        """Keep these commits (and all they reach) as long as this session is kept."""
        if commits:
            self._git("update-ref", "--stdin", input="".join(f"update refs/sessions/{self.key}/{c} {c}\n"
                                                             for c in commits))
            self._used()

    def _hold(self) -> None:
        """Lock the store shared for as long as this session has it open, so that no one removes it meanwhile;
        a store removed while this waited for the lock is made afresh."""
        while self._in_use is None:
            self.git_dir.mkdir(parents=True, exist_ok=True)
            self._in_use = _lock(self.git_dir, fcntl.LOCK_SH)

    def _release(self) -> None:
        """Let go of the store: once no session holds it, it may be removed when it is abandoned."""
        if self._in_use is not None:
            os.close(self._in_use)
            self._in_use = None

    # -- git ----------------------------------------------------------------------------------------

    def _prepare(self) -> None:
        """Make the store if needed, borrow the user's objects, write the exclude rules and record the work tree."""
        if not (self.git_dir / "HEAD").is_file():
            init = subprocess.run(["git", "init", "-q", "--bare", str(self.git_dir)], capture_output=True, text=True,
                                  env=_clean_env())
            if init.returncode != 0:
                raise CheckpointError(f"could not make the checkpoint store {self.git_dir}: {init.stderr.strip()}")
            for key, value in (("gc.auto", "0"), ("commit.gpgSign", "false"), ("core.fsmonitor", "false")):
                self._git("config", key, value)
        user = self._user_git_dir()
        info = self.git_dir / "info"
        info.mkdir(exist_ok=True)
        rules = list(DEFAULT_EXCLUDES) if user is None else [".git/"]
        if user is not None:
            (self.git_dir / "objects" / "info" / "alternates").write_text(f"{user / 'objects'}\n")
            exclude = user / "info" / "exclude"
            if exclude.is_file():
                rules.append(exclude.read_text(encoding="utf-8", errors="replace"))
        if self.git_dir.parent.is_relative_to(self.root):  # Tao's state kept inside the repository: never snapshot it
            rules.append("/" + self.git_dir.parent.relative_to(self.root).as_posix() + "/")
        (info / "exclude").write_text("\n".join(rules) + "\n", encoding="utf-8")
        (self.git_dir / RECORD).write_bytes(os.fsencode(self.root))  # its work tree: see remove_abandoned

    def _user_git_dir(self) -> Path | None:
        """The user's common git directory when the work tree's root is a repository's top level, else None."""
        top = subprocess.run(["git", "rev-parse", "--show-toplevel", "--git-common-dir"], cwd=self.root,
                             capture_output=True, text=True, env=_clean_env())
        lines = top.stdout.splitlines()
        if top.returncode != 0 or len(lines) != 2 or Path(lines[0]).resolve() != self.root:
            return None
        common = Path(lines[1])
        return (common if common.is_absolute() else self.root / common).resolve()

    def _stage(self) -> str:
        """Bring this session's index up to the work tree and return its tree id."""
        if not self._seeded:
            self._seeded = True
            user = self._user_git_dir()
            if user is not None and (user / "index").is_file() and not self.index.exists():
                shutil.copyfile(user / "index", self.index)  # its stat data spares hashing unchanged files
            if self._run("add", "-A", "--ignore-errors", "--", ".").returncode != 0:
                self.index.unlink(missing_ok=True)  # a copied index git cannot use here (a split index): start afresh
        self._git("add", "-A", "--ignore-errors", "--", ".")
        return self._git("write-tree").strip()

    def _run(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {**_clean_env(), **_IDENTITY, "GIT_DIR": str(self.git_dir), "GIT_WORK_TREE": str(self.root),
               "GIT_INDEX_FILE": str(self.index)}
        return subprocess.run(["git", *args], cwd=self.root, env=env, capture_output=True, text=True,
                              errors="surrogateescape", input=input)

    def _git(self, *args: str, input: str | None = None) -> str:
        done = self._run(*args, input=input)
        if done.returncode != 0:
            raise CheckpointError(f"git {args[0]} failed in the checkpoint store {self.git_dir}: "
                                  f"{done.stderr.strip() or done.stdout.strip()}")
        return done.stdout


def _clean_env() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if key not in _FOREIGN}


# -- abandoned stores ---------------------------------------------------------------------------------


def remove_abandoned(folder: Path, opening: Path, keep_days: float = KEEP_DAYS) -> list[Path]:
    """Remove the stores in `folder` (but `opening`) that no session used within `keep_days` and whose work tree
    is gone (see the module's docstring), and what an earlier removal left; returns the stores removed. Never
    raises: a store that cannot be removed is logged and tried again at the next opening."""
    cutoff = time.time() - keep_days * 86400
    removed: list[Path] = []
    try:
        entries = sorted(folder.iterdir())
    except OSError as exc:
        _log.warning("could not look for abandoned checkpoint stores in %s: %s", folder, exc)
        return removed
    for entry in entries:
        try:
            if entry.name.startswith(_REMOVING):
                shutil.rmtree(entry)
            elif entry != opening and _STORE_NAME.fullmatch(entry.name) and _abandoned(entry, cutoff):
                if _remove(entry, cutoff):
                    removed.append(entry)
        except FileNotFoundError:
            pass  # another session removed it at the same moment
        except OSError as exc:
            _log.warning("could not remove the abandoned checkpoint store %s (it is tried again when a session "
                         "opens a store): %s", entry, exc)
    return removed


def _abandoned(store: Path, cutoff: float) -> bool:
    """Whether no session used the store since `cutoff` and its work tree is gone."""
    return _last_used(store) < cutoff and _work_tree_gone(store)


def _last_used(store: Path) -> float:
    """When a session last used the store: the newest of what making it, opening it and taking checkpoints write."""
    sessions = store / "sessions"
    written = [store / "HEAD", store / RECORD, store / "info" / "exclude", *store.glob("index-*"),
               *(sessions.iterdir() if sessions.is_dir() else ())]
    return max((path.stat().st_mtime for path in written if path.exists()), default=0.0)


def _work_tree_gone(store: Path) -> bool:
    """Whether the store's work tree no longer exists. A store made before the record counts as gone only when the
    repository it borrowed objects from is gone (its checkpoints cannot be read any more); otherwise it is kept."""
    record = store / RECORD
    if record.is_file():
        return not Path(os.fsdecode(record.read_bytes())).is_dir()
    alternates = store / "objects" / "info" / "alternates"
    borrowed = os.fsdecode(alternates.read_bytes()).strip() if alternates.is_file() else ""
    return bool(borrowed) and not Path(borrowed).is_dir()


def _remove(store: Path, cutoff: float) -> bool:
    """Delete an abandoned store unless a session holds it or used it since it was found abandoned; whether it did."""
    held = _lock(store, fcntl.LOCK_EX | fcntl.LOCK_NB)
    if held is None:
        return False  # a session has it open
    try:
        if not _abandoned(store, cutoff):  # a session opened it and let go since the first look
            return False
        trash = store.with_name(f"{_REMOVING}{store.name}-{os.urandom(4).hex()}")
        store.rename(trash)  # gone for everyone at once: no session finds it half deleted
    finally:
        os.close(held)
    shutil.rmtree(trash)
    return True


def _lock(store: Path, how: int) -> int | None:
    """A descriptor of the store's IN_USE file (made if missing) locked `how` (fcntl.LOCK_SH, or LOCK_EX|LOCK_NB);
    None when the store went away meanwhile (renamed to be deleted) or, not waiting, a session holds it."""
    path = store / IN_USE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, how)
        here, held = os.stat(path), os.fstat(fd)
        if (here.st_dev, here.st_ino) == (held.st_dev, held.st_ino):
            return fd
    except (BlockingIOError, FileNotFoundError):
        pass
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    return None


def _split(name_status: str) -> tuple[list[str], list[str], list[str]]:
    """`diff-index --name-status -z` against a checkpoint: (modified, created since, deleted since)."""
    fields = name_status.split("\0")
    modified: list[str] = []
    removed: list[str] = []
    recreated: list[str] = []
    for status, path in zip(fields[0::2], fields[1::2]):
        {"A": removed, "D": recreated}.get(status[:1], modified).append(path)
    return modified, removed, recreated


def describe_undo(turn: int, label: str, modified: list[str], removed: list[str], recreated: list[str]) -> str:
    """An undo in one line: the turn undone, then the files restored, removed and brought back."""
    parts = [f"{verb} {_files(paths)}" for verb, paths in (("restored", modified), ("removed", removed),
                                                             ("brought back", recreated)) if paths]
    return f"undid turn {turn} ({label}): {'; '.join(parts) or 'no file changed'}"


def _files(paths: list[str], shown: int = 3) -> str:
    more = f" and {len(paths) - shown} more" if len(paths) > shown else ""
    return ", ".join(paths[:shown]) + more


def from_events(events: list[Event]) -> list[Checkpoint]:
    """The checkpoints an undo can still go back to, from a saved session's `checkpoint` and `undo` events."""
    stack: list[Checkpoint] = []
    for event in events:
        if isinstance(event, Checkpointed):
            stack.append(Checkpoint(event.turn, event.commit, event.tree, event.label))
        elif isinstance(event, Undone):
            while stack and stack.pop().commit != event.commit:
                pass
    return stack
