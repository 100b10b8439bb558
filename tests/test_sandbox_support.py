"""Fixtures and helpers shared by the sandbox tests (imported by tests/test_sandbox_*.py).

Everything is real: git repositories made in tmp dirs, real overlay mounts, real subprocesses. A
backend that does not work on this machine is skipped with the reason the probe found.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest

from sandbox.backends import ORDER, unavailable
from sandbox.probe import Capabilities, detect

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid", "GIT_CONFIG_NOSYSTEM": "1"}
# Backends plus pseudo-backends: overlayfs through a user namespace (as a non-root user gets it), and
# the copy-based backends without any namespace (at their own path, where namespaces are forbidden).
VARIANTS = (*ORDER, "overlayfs-userns", "git-worktree-nons", "copy-nons")
MODES = {"overlayfs-userns": "user", "git-worktree-nons": "none", "copy-nons": "none"}


def git(root: Path, *args: str) -> str:
    """Run git in `root` and return its stdout."""
    env = {**os.environ, **GIT_ENV}
    return subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True, text=True).stdout


def make_repo(root: Path, *, ignored: bool = True) -> Path:
    """A small git repo: committed files, a dir, a symlink, an executable, uncommitted and untracked changes."""
    root.mkdir(parents=True)
    (root / "README.md").write_text("# demo\n")
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("def add(a, b):\n    return a + b\n")
    (root / "src" / "util.py").write_text("X = 1\n")
    (root / "docs").mkdir()
    (root / "docs" / "guide.txt").write_text("guide\n")
    (root / "run.sh").write_text("#!/bin/sh\necho run\n")
    (root / "run.sh").chmod(0o755)
    (root / "link").symlink_to("src/app.py")
    if ignored:
        (root / ".gitignore").write_text("build/\n")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "init")
    (root / "src" / "util.py").write_text("X = 2\n")  # modified, not staged
    (root / "docs" / "guide.txt").unlink()  # deleted
    (root / "notes.txt").write_text("untracked\n")
    if ignored:
        (root / "build").mkdir()
        (root / "build" / "out.o").write_bytes(b"\0\1")
    return root


def tree_state(root: Path) -> dict[str, tuple]:
    """Every entry under root: type, mode, mtime, and content hash or link target (byte-identical check)."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = os.lstat(path)
            rel = str(path.relative_to(root))
            if stat.S_ISREG(st.st_mode):
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
            elif stat.S_ISLNK(st.st_mode):
                digest = os.readlink(path)
            else:
                digest = ""
            out[rel] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_mtime_ns, digest)
    return out


def processes_with(token: str) -> list[int]:
    """Pids of live (non-zombie) processes whose command line starts with `token`."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cmdline.startswith(token):
            found.append(int(pid))
    return found


def wait_until(predicate, timeout: float = 10.0, step: float = 0.05) -> bool:  # type: ignore[no-untyped-def]
    """Poll until predicate() is true; False if it never was within `timeout`."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(step)
    return bool(predicate())


async def await_until(predicate, timeout: float = 10.0, step: float = 0.05) -> bool:  # type: ignore[no-untyped-def]
    """Async poll until predicate() is true."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        await asyncio.sleep(step)
    return bool(predicate())


@pytest.fixture(scope="session")
def state_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One overlay state base for the whole session (the probe runs once per base)."""
    return tmp_path_factory.mktemp("overlay-state")


@pytest.fixture
async def caps(state_base: Path) -> Capabilities:
    """What this machine allows (probed once per session and mode)."""
    return await detect(state_base)


def skip_reason(variant: str, caps: Capabilities, root: Path) -> str | None:
    """Why a backend variant cannot be tested here, or None."""
    if variant == "overlayfs-userns" and os.geteuid() != 0:
        return "not root: the overlayfs variant already goes through a user namespace"
    variant = backend_name(variant)
    if variant == "git-worktree" and shutil.which("git") is None:
        return "git is not installed"
    reason = unavailable(variant, caps, root)
    return f"{variant} backend unavailable on this machine: {reason}" if reason else None


def backend_name(variant: str) -> str:
    """The real backend behind a variant name."""
    return variant.removesuffix("-userns").removesuffix("-nons")


async def usable(variant: str, state_base: Path, root: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Set up `variant` (user-namespace mode if asked) and return its backend name, or skip the test."""
    if variant in MODES:
        monkeypatch.setenv("TAO_SANDBOX_NAMESPACES", MODES[variant])
    caps = await detect(state_base)
    reason = skip_reason(variant, caps, root)
    if reason:
        pytest.skip(reason)
    return backend_name(variant)
