"""Recorded sessions for `tao bench live` and the real repositories they run against.

A session file (examples/sessions/*.json) is a replay turn script with two more keys:

    {"task": "...", "turns": [...],
     "repo": {"example": "calc"} | {"pypi": "six==1.17.0"},
     "setup": [{"path": "six.py", "old": "...", "new": "..."}]}

`repo` names a bundled example or a package whose source distribution (tests included) is fetched
from PyPI once, with pip, into the cache. `setup` is applied to a copy of it before the session (the
bug the task is about), and the result is committed to a fresh git repository: the template. Every
run starts from a fresh copy of the template at the same path, so that outputs naming paths agree.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.engine.recorded import Recording, load_recording
from harness.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SESSIONS_DIR = EXAMPLES / "sessions"
GIT_ENV = {"GIT_AUTHOR_NAME": "tao", "GIT_AUTHOR_EMAIL": "tao@example.invalid", "GIT_COMMITTER_NAME": "tao",
           "GIT_COMMITTER_EMAIL": "tao@example.invalid", "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
           "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}


def cache_dir() -> Path:
    """Where downloaded sources, templates and run copies live: $XDG_CACHE_HOME/tao/bench/live."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "tao" / "bench" / "live"


@dataclass(frozen=True)
class LiveSession:
    """One recorded session and the repository it runs against."""

    name: str
    recording: Recording
    repo: dict[str, str]
    setup: list[dict[str, str]]

    @property
    def dirname(self) -> str:
        """The repository folder's name (test output shows it, so it is the same in every run)."""
        if "example" in self.repo:
            return self.repo["example"]
        return self.repo["pypi"].split("==")[0].replace("-", "_")

    def stamp(self) -> str:
        """A digest of what the template is built from."""
        text = json.dumps({"repo": self.repo, "setup": self.setup}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def load_session(path: Path) -> LiveSession:
    """A session file: its turns (as the replay engine reads them), repository and setup."""
    data = json.loads(path.read_text(encoding="utf-8"))
    repo = data.get("repo")
    if not isinstance(repo, dict) or not ({"example", "pypi"} & set(repo)):
        raise UsageError(f"{path}: 'repo' must be {{'example': NAME}} or {{'pypi': 'NAME==VERSION'}}")
    return LiveSession(path.stem, load_recording(path), dict(repo), list(data.get("setup", [])))


def load_sessions(directory: Path = SESSIONS_DIR, only: list[str] | None = None) -> list[LiveSession]:
    """Every session file in `directory` (sorted by name), or the ones named in `only`."""
    paths = sorted(directory.glob("*.json"))
    if only:
        missing = set(only) - {p.stem for p in paths}
        if missing:
            raise UsageError(f"no session named {', '.join(sorted(missing))} in {directory}")
        paths = [p for p in paths if p.stem in only]
    if not paths:
        raise UsageError(f"no session files (*.json) in {directory}")
    return [load_session(p) for p in paths]


def source_tree(repo: dict[str, str], cache: Path) -> Path:
    """The pristine source of a repository: the bundled example, or the sdist fetched from PyPI once."""
    if "example" in repo:
        path = EXAMPLES / repo["example"]
        if not path.is_dir():
            raise UsageError(f"the bundled example {path} is missing")
        return path
    spec = repo["pypi"]
    target = cache / "src" / spec.replace("==", "-")
    if target.is_dir():
        return target
    downloads = cache / "sdists" / spec.replace("==", "-")
    if not any(downloads.glob("*.tar.gz")):
        downloads.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
               "-d", str(downloads), spec]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise UsageError(f"could not fetch {spec} from PyPI: {done.stderr.strip()[-400:]}")
    [archive] = sorted(downloads.glob("*.tar.gz"))[:1]
    unpack = target.with_name(target.name + ".tmp")
    shutil.rmtree(unpack, ignore_errors=True)
    with tarfile.open(archive) as tar:
        tar.extractall(unpack, filter="data")
    [top] = list(unpack.iterdir())
    top.rename(target)
    shutil.rmtree(unpack)
    return target


def apply_setup(tree: Path, edits: list[dict[str, str]]) -> None:
    """Apply the session's setup edits; each `old` must occur exactly once."""
    for edit in edits:
        path = tree / edit["path"]
        text = path.read_text(encoding="utf-8")
        if text.count(edit["old"]) != 1:
            raise UsageError(f"setup edit of {edit['path']}: the old text occurs {text.count(edit['old'])} times")
        path.write_text(text.replace(edit["old"], edit["new"]), encoding="utf-8")


def template(session: LiveSession, cache: Path) -> Path:
    """The committed starting repository of a session, built once (rebuilt when its recipe changes)."""
    base = cache / "templates" / session.name
    tree, stamp = base / session.dirname, base / "stamp"
    if tree.is_dir() and stamp.is_file() and stamp.read_text() == session.stamp():
        return tree
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    shutil.copytree(source_tree(session.repo, cache), tree,
                    ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    apply_setup(tree, session.setup)
    env = {**os.environ, **GIT_ENV}
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "initial"]):
        subprocess.run(cmd, cwd=tree, env=env, check=True, capture_output=True)
    stamp.write_text(session.stamp())
    return tree


def checkout(session: LiveSession, cache: Path) -> Path:
    """A fresh copy of the session's template at its fixed run path."""
    source = template(session, cache)
    target = cache / "run" / session.name / session.dirname
    shutil.rmtree(target.parent, ignore_errors=True)
    target.parent.mkdir(parents=True)
    shutil.copytree(source, target, symlinks=True)
    return target


def describe(session: LiveSession) -> dict[str, Any]:
    """What a session is, for the report."""
    return {"name": session.name, "repo": session.repo.get("example") or session.repo.get("pypi"),
            "turns": len(session.recording.turns)}
