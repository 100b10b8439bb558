"""Fixtures the tests build themselves: real git repositories from the bundled example."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout


def make_calc_repo(parent: Path) -> Path:
    """A committed copy of examples/calc (its failing test included) in a fresh git repository."""
    repo = parent / "calc"
    shutil.copytree(EXAMPLES / "calc", repo, ignore=shutil.ignore_patterns("__pycache__"))
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "initial")
    return repo
