"""A git worktree per instance at its base commit, made from a local clone under --repos (gitpython).

Worktrees of one clone are added and removed one at a time (git locks its worktree list); the batch
runs these calls in threads so the event loop never blocks.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import git

from harness.errors import TaoError

_LOCKS: dict[Path, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


class SetupError(TaoError):
    """An instance cannot be set up (no clone, unknown commit, a patch that does not apply)."""


def _lock(clone: Path) -> threading.Lock:
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(clone.resolve(), threading.Lock())


def find_clone(repos: Path, repo: str) -> Path:
    """The local clone of `repo` (owner/name): repos/owner/name, repos/owner__name or repos/name."""
    owner, _, name = repo.partition("/")
    candidates = [repos / owner / name, repos / f"{owner}__{name}", repos / (name or owner)]
    for path in candidates:
        if (path / ".git").exists() or (path / "HEAD").is_file() and (path / "objects").is_dir():
            return path
    looked = ", ".join(str(p) for p in dict.fromkeys(candidates))
    raise SetupError(f"no git clone of {repo} under {repos} (looked for {looked}); "
                     f"clone it there, e.g. `git clone https://github.com/{repo} {candidates[0]}`")


def resolve_commit(clone: Path, commit: str) -> str:
    """The full sha of `commit` in the clone, or SetupError saying to fetch it."""
    try:
        return git.Repo(clone).commit(commit).hexsha
    except (git.BadName, ValueError, git.GitCommandError):
        raise SetupError(f"commit {commit} is not in the clone {clone}; fetch it (`git -C {clone} fetch origin "
                         f"{commit}`) or fix base_commit") from None


def add_worktree(clone: Path, commit: str, dest: Path) -> Path:
    """A fresh detached worktree of `clone` at `commit` in `dest` (an old one there is replaced)."""
    sha = resolve_commit(clone, commit)
    with _lock(clone):
        repo = git.Repo(clone)
        _remove(repo, dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            repo.git.worktree("add", "--detach", "--force", str(dest), sha)
        except git.GitCommandError as exc:
            raise SetupError(f"could not add a worktree of {clone} at {commit} in {dest}: "
                             f"{exc.stderr.strip() or exc}") from None
    return dest


def remove_worktree(clone: Path, dest: Path) -> None:
    """Remove the worktree in `dest` and forget it in the clone."""
    with _lock(clone):
        _remove(git.Repo(clone), dest)


def _remove(repo: git.Repo, dest: Path) -> None:
    if dest.exists():
        try:
            repo.git.worktree("remove", "--force", "--force", str(dest))
        except git.GitCommandError:
            shutil.rmtree(dest, ignore_errors=True)
    repo.git.worktree("prune")


def reset_worktree(tree: Path, commit: str) -> None:
    """Put the worktree back at `commit` exactly: tracked files reset, untracked ones removed."""
    repo = git.Repo(tree)
    repo.git.reset("--hard", "-q", commit)
    repo.git.clean("-fdxq")


def apply_patch(tree: Path, patch: str, what: str) -> None:
    """`git apply` a patch in the worktree, or SetupError with git's complaint."""
    if not patch.strip():
        return
    repo = git.Repo(tree)
    path = tree.parent / f".{tree.name}.{what.replace(' ', '_')}.diff"
    path.write_text(patch if patch.endswith("\n") else patch + "\n", encoding="utf-8")
    try:
        repo.git.apply("--whitespace=nowarn", str(path))
    except git.GitCommandError as exc:
        raise SetupError(f"the {what} does not apply: {exc.stderr.strip() or exc}") from None
    finally:
        path.unlink(missing_ok=True)
