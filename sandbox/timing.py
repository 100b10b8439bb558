"""What an overlay costs here: create it, run `true` in it, discard it; on a scratch repository of any size.

`tao sandbox check` times each backend that works with these, and `tao bench sandbox` against repository size.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from pathlib import Path

from sandbox.overlay import Overlay
from sandbox.workspace import Workspace

GIT_IDENTITY = {"GIT_AUTHOR_NAME": "tao", "GIT_AUTHOR_EMAIL": "tao@example.invalid",
                "GIT_COMMITTER_NAME": "tao", "GIT_COMMITTER_EMAIL": "tao@example.invalid"}


def make_repo(path: Path, files: int) -> Path:
    """A git repo with `files` small files, 100 a directory, committed, plus ~1% modified and ~1% new."""
    path.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        d = path / f"pkg{i // 100:03d}"
        d.mkdir(exist_ok=True)
        (d / f"mod{i:05d}.py").write_text(f"# module {i}\nVALUE = {i}\n\ndef f():\n    return VALUE * 2\n")
    env = {**os.environ, **GIT_IDENTITY}
    for argv in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "generated"]):
        subprocess.run(argv, cwd=path, env=env, check=True, stdout=subprocess.DEVNULL)
    for i in range(0, files, 100):
        (path / f"pkg{i // 100:03d}" / f"mod{i:05d}.py").write_text(f"# changed {i}\n")
        (path / f"pkg{i // 100:03d}" / f"new{i:05d}.py").write_text(f"# new {i}\n")
    return path


def ms(seconds: float) -> float:
    """Seconds to milliseconds, rounded for tables."""
    return round(seconds * 1000, 1)


async def measure(workspace: Workspace, backend: str, state_dir: Path | None = None) -> dict[str, float]:
    """One create / run `true` / discard round, in milliseconds."""
    t0 = time.perf_counter()
    overlay = await Overlay.create(workspace, backend=backend, state_dir=state_dir)
    t1 = time.perf_counter()
    result = await overlay.run(["true"])
    t2 = time.perf_counter()
    await overlay.discard()
    t3 = time.perf_counter()
    if result.exit_code != 0:
        raise RuntimeError(f"`true` failed in the {backend} overlay: {result.text}")
    return {"create_ms": ms(t1 - t0), "run_ms": ms(t2 - t1), "discard_ms": ms(t3 - t2), "total_ms": ms(t3 - t0)}


async def measure_median(workspace: Workspace, backend: str, repeat: int,
                         state_dir: Path | None = None) -> dict[str, float]:
    """The median of each timing over `repeat` rounds."""
    rounds = [await measure(workspace, backend, state_dir) for _ in range(max(1, repeat))]
    return {key: round(statistics.median(r[key] for r in rounds), 1) for key in rounds[0]}
