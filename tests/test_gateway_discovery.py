"""`tao run` finds a running `tao serve` through its state file and goes through it: real processes, real sockets.
The gateway serves an upstream (a second gateway in this process over the replay engine, under the embedded
model's id), so no vLLM starts."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.coscheduler import FCFS, CoScheduler
from harness.engine import server
from harness.engine.embedded_model import model_key
from harness.engine.recorded import Recording, ReplayEngine, Turn
from harness.gateway import serving
from tests.helpers import ROOT, make_calc_repo


@pytest.fixture(autouse=True)
def private_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The state file, cache and trajectories under tmp_path, for this process and the ones it starts."""
    for name in ("XDG_RUNTIME_DIR", "XDG_CACHE_HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME"):
        (tmp_path / name.lower()).mkdir()
        monkeypatch.setenv(name, str(tmp_path / name.lower()))


def tao(*args: str) -> subprocess.CompletedProcess[str]:
    """Run `tao ARGS` with this tree's code."""
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})


def call(name: str, **arguments: object) -> Turn:
    return Turn(f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>")


async def test_tao_run_attaches_to_tao_serve_and_is_paced_by_it(tmp_path: Path) -> None:
    upstream = CoScheduler(ReplayEngine(Recording([call("list_files"), call("finish", summary="listed")])), FCFS())
    repo = make_calc_repo(tmp_path)
    async with serving(upstream, model_key(None)) as url:
        started = await asyncio.to_thread(tao, "serve", "--upstream", url)
        assert started.returncode == 0, started.stderr
        try:
            # checked here first: were it not found, `tao run` would start vLLM in-process instead
            assert await asyncio.to_thread(server.running_server, model_key(None)) is not None
            run = await asyncio.to_thread(tao, "run", "--headless", "--json", "--yolo", "--no-speculation",
                                          "--max-steps", "4", "--repo", str(repo), "list the files")
        finally:
            await asyncio.to_thread(tao, "serve", "--stop")
    assert run.returncode == 0, run.stderr
    events = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    start, end = events[0], events[-1]
    assert start["type"] == "session_start" and "paced by tao serve" in start["engine"]
    assert end["type"] == "session_end" and end["status"] == "finished" and end["summary"] == "listed"
    assert [r.action for r in upstream.records].count("arrive") == 2  # both model turns went through tao serve
