"""`tao run --headless` on the real vLLM engine, as a user runs it: a Ctrl-C that says what it does, and a quiet
stderr (a run to its end is checked quiet by tests/test_demo.py). The recorded answers of examples/calc.replay.json
are forced through the engine (`--replay` with the default engine), so a run is real and short."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from harness.events import SessionEnd, read_trajectory
from tests.helpers import ENGINE_NOISE, EXAMPLES, ROOT, make_calc_repo

pytestmark = pytest.mark.engine


def start(tmp_path: Path, *flags: str) -> tuple[subprocess.Popen[str], Path]:
    """`tao run --headless` on the embedded engine in a fresh calc repository, in a process group of its own
    with SIGINT at its default, as from a terminal (with --replay the engine always starts in-process)."""
    repo, trajectory = make_calc_repo(tmp_path), tmp_path / "run.jsonl"
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    proc = subprocess.Popen([str(ROOT / ".venv" / "bin" / "tao"), "run", "--headless", "--replay",
                             str(EXAMPLES / "calc.replay.json"), "--repo", str(repo), "--trajectory", str(trajectory),
                             *flags], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    return proc, trajectory


def test_ctrl_c_says_at_once_that_the_engine_stops_and_ends_the_trajectory(tmp_path: Path) -> None:
    proc, trajectory = start(tmp_path)
    assert proc.stderr is not None
    seen: list[str] = []
    try:
        for line in proc.stderr:
            seen.append(line)
            if "step 1: model answered" in line:
                os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C on a terminal reaches the whole foreground group
                break
        seen.extend(proc.stderr)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    err = "".join(seen)
    assert proc.returncode == 130, err
    # after step 1, or 2 if its tool ended before the signal came (a promoted speculation ends it at once)
    interrupted = err.index("session interrupted after ")
    stopping = err.index("tao: interrupted; stopping the engine (forced:vllm:")
    assert interrupted < stopping < err.index("tao: interrupted\n")
    assert err[interrupted:stopping].count("\n") == 1  # the very next line
    end = read_trajectory(trajectory)[-1]
    assert isinstance(end, SessionEnd) and end.status == "interrupted"
    assert [line for line in err.splitlines() if any(word in line for word in ENGINE_NOISE)] == []
