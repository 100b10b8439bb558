"""Crash clean-up: an overlay left by a killed process is found and removed on the next start, and the
command it was running dies with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

from sandbox import Overlay, Workspace
from sandbox.cleanup import find_leftovers, sweep
from tests.test_sandbox_support import await_until, make_repo, processes_with, wait_until

ROOT = Path(__file__).resolve().parent.parent

CRASHER = textwrap.dedent("""
    import asyncio, sys
    from sandbox import Overlay, Workspace

    async def main(root, base, seconds):
        overlay = await Overlay.create(Workspace(root), state_dir=base)
        await overlay.run(["sh", "-c", "echo leftover > left.txt"])
        print(overlay.state_path, flush=True)
        await overlay.run(["sleep", seconds])

    asyncio.run(main(*sys.argv[1:]))
""")


def start_crasher(root: Path, base: Path, seconds: str) -> tuple[subprocess.Popen[str], Path]:
    """A Tao-like process holding an overlay with a long command running in it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", CRASHER, str(root), str(base), seconds],
                            stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    state = Path(proc.stdout.readline().strip())
    assert state.is_dir(), f"the crasher printed no state dir (exit code {proc.poll()})"
    return proc, state


async def test_leftover_of_a_killed_process_is_removed_on_next_start(tmp_path: Path) -> None:
    base = tmp_path / "state"
    root = make_repo(tmp_path / "ws")
    seconds = f"{400 + uuid.uuid4().int % 500}.{uuid.uuid4().int % 9973}"
    proc, state = start_crasher(root, base, seconds)
    assert wait_until(lambda: processes_with(f"sleep {seconds}"))
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    # The command in the overlay dies with its owner (parent-death signal, then the pid namespace).
    assert await await_until(lambda: not processes_with(f"sleep {seconds}"))
    assert state.is_dir() and (state / "owner.json").is_file()
    assert [x.path for x in find_leftovers(base)] == [state]
    assert not (root / "left.txt").exists()

    async with Overlay(Workspace(root), state_dir=base) as fresh:  # the next start sweeps
        assert not state.exists()
        assert fresh.state_path is not None and fresh.state_path.is_dir()
        assert find_leftovers(base) == []  # a live owner's overlay is left alone


async def test_sweep_leaves_live_overlays_and_reports_dead_ones(tmp_path: Path) -> None:
    base = tmp_path / "state"
    root = make_repo(tmp_path / "ws")
    async with Overlay(Workspace(root), state_dir=base) as live:
        dead = base / "dead-overlay"
        (dead / "upper").mkdir(parents=True)
        (dead / "owner.json").write_text('{"pid": 999999999, "start_time": 1, "boot_id": "", "pid_ns": ""}')
        work = dead / "work" / "work"
        work.mkdir(parents=True)
        work.chmod(0)  # as overlayfs leaves it
        removed = sweep(base)
        assert [x.path for x in removed] == [dead] and removed[0].pid == 999999999
        assert not dead.exists()
        assert live.state_path is not None and live.state_path.is_dir()
