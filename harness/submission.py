"""The submission of a session: `git diff` of the workspace against HEAD, new files included.

Uses a throwaway index so the repository's own index is never touched.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


def git_diff(root: Path) -> str:
    """The workspace's changes as a patch; empty when nothing changed or the tree is not a git repo."""
    if subprocess.run(["git", "rev-parse", "--is-inside-work-tree"], cwd=root,
                      capture_output=True).returncode != 0:
        return ""
    has_head = subprocess.run(["git", "rev-parse", "--verify", "-q", "HEAD"], cwd=root,
                              capture_output=True).returncode == 0
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(tmp) / "index")}
        if has_head:
            subprocess.run(["git", "read-tree", "HEAD"], cwd=root, env=env, check=True, capture_output=True)
        subprocess.run(["git", "add", "-A", "."], cwd=root, env=env, check=True, capture_output=True)
        # An unborn branch diffs against the empty tree.
        base = "HEAD" if has_head else EMPTY_TREE
        args = ["git", "diff", "--cached", "--no-color", "--no-ext-diff", "--binary", base]
        return subprocess.run(args, cwd=root, env=env, check=True, capture_output=True,
                              text=True, errors="replace").stdout
