"""`tao run` headless as CI uses it: JSON events on stdout, trajectory on disk, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from harness.events import SessionEnd, from_dict, read_trajectory
from tests.helpers import EXAMPLES, ROOT, make_calc_repo


def tao(*args: str, state: Path) -> subprocess.CompletedProcess[str]:
    """Run the CLI as a user would, with default trajectories kept under `state`."""
    env = {**os.environ, "XDG_STATE_HOME": str(state)}
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=ROOT, capture_output=True,
                          text=True, env=env, timeout=300)


def test_headless_json_replay_matches_its_trajectory(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    trajectory = tmp_path / "out" / "run.jsonl"
    result = tao("run", "--headless", "--json", "--engine", "replay", "--replay", str(EXAMPLES / "calc.replay.json"),
                 "--repo", str(repo), "--trajectory", str(trajectory), state=tmp_path)
    assert result.returncode == 0, result.stderr
    streamed = [from_dict(json.loads(line)) for line in result.stdout.splitlines()]
    assert streamed == read_trajectory(trajectory)
    assert streamed[0].type == "session_start" and streamed[0].task.startswith("`calc.add`")
    end = streamed[-1]
    assert isinstance(end, SessionEnd) and end.status == "finished" and "+    return a + b" in end.submission
    assert "session finished after 6 steps" in result.stderr and "-> edit_file(" in result.stderr


def test_a_recorded_trajectory_replays_to_the_same_events(tmp_path: Path) -> None:
    first, second = make_calc_repo(tmp_path / "a"), make_calc_repo(tmp_path / "b")
    recorded = tmp_path / "first.jsonl"
    tao("run", "--headless", "--engine", "replay", "--replay", str(EXAMPLES / "calc.replay.json"),
        "--repo", str(first), "--trajectory", str(recorded), state=tmp_path)
    replayed = tmp_path / "second.jsonl"
    result = tao("run", "--headless", "--engine", "replay", "--replay", str(recorded), "--repo", str(second),
                 "--trajectory", str(replayed), state=tmp_path)
    assert result.returncode == 0, result.stderr

    def comparable(path: Path) -> list[tuple]:
        return [(e.type, getattr(e, "name", None), getattr(e, "output", None)) for e in read_trajectory(path)
                if e.type in ("tool_call", "tool_result")]

    assert comparable(recorded) == comparable(replayed)


def test_limit_and_usage_exit_codes(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    limited = tao("run", "--headless", "--engine", "replay", "--replay", str(EXAMPLES / "calc.replay.json"),
                  "--repo", str(repo), "--max-steps", "1", "--trajectory", str(tmp_path / "t.jsonl"), state=tmp_path)
    assert limited.returncode == 3 and "step limit of 1" in limited.stderr
    missing = tao("run", "task", "--repo", str(tmp_path / "nope"), "--engine", "replay", "--replay", "x.json", state=tmp_path)
    assert missing.returncode == 2 and "is not a directory" in missing.stderr
    no_file = tao("run", "task", "--repo", str(repo), "--engine", "replay", "--replay", str(tmp_path / "x.json"), state=tmp_path)
    assert no_file.returncode == 2 and "does not exist" in no_file.stderr


def test_a_session_adapts_speculation_to_the_users_past_sessions(tmp_path: Path) -> None:
    replay = ("run", "--headless", "--engine", "replay", "--replay", str(EXAMPLES / "calc.replay.json"))
    first = tao(*replay, "--repo", str(make_calc_repo(tmp_path / "a")), state=tmp_path / "state")
    assert first.returncode == 0, first.stderr
    assert "past sessions" not in first.stderr  # nothing to learn from yet
    saved = list((tmp_path / "state" / "tao" / "trajectories").glob("*.jsonl"))
    assert len(saved) == 1
    second = tao(*replay, "--repo", str(make_calc_repo(tmp_path / "b")), state=tmp_path / "state")
    assert second.returncode == 0, second.stderr
    assert "speculation: adapted to your past sessions (1 newest" in second.stderr
