"""Resuming headless runs: `tao run --resume`/`--continue` finishes a killed run, the last session is chosen only
among this repository's, and `--trajectory` never appends a second session to a saved one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.errors import UsageError
from harness.events import LLMEnd, SessionEnd, SessionResume, SessionStart, ToolCall, ToolResult, read_trajectory
from harness.history import choose_session, last_session, new_trajectory, unanswered
from harness.interactive import last_trajectory
from tests.helpers import EXAMPLES, ROOT, make_calc_repo
from tests.test_tui_support import call

CALC = EXAMPLES / "calc.replay.json"


def environment(home: Path) -> dict[str, str]:
    """The environment of a user whose config, cache and state lie under `home`."""
    return {**os.environ, **{name: str(home / name.lower()) for name in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME",
                                                                        "XDG_STATE_HOME")}}


def tao(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    """`tao ...` as a user runs it, with no terminal."""
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          env=environment(home), stdin=subprocess.DEVNULL, timeout=300)


def killed_run(trajectory: Path, home: Path, args: list[str], until: str, seconds: float = 120.0) -> None:
    """Start a headless `tao run`, and SIGKILL it (its process group) once its trajectory has an `until` event."""
    process = subprocess.Popen([sys.executable, "-m", "harness.cli", "run", "--headless", "--trajectory",
                                str(trajectory), *args], cwd=ROOT, env=environment(home), stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + seconds
        while not (trajectory.is_file() and f'"type":"{until}"' in trajectory.read_text()):
            assert process.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline, f"no {until} event in {seconds:.0f} s"
            time.sleep(0.02)
        assert process.poll() is None, "the run ended before it could be killed"
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # the run and the shells it started, as a crash takes them
        except ProcessLookupError:
            pass  # it had ended already (the assertion above says so)
        process.wait(timeout=30)


def saved(folder: Path, name: str, repo: Path, mtime: float) -> Path:
    """A saved session of `repo` in `folder`, last written at `mtime`."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.jsonl"
    path.write_text(SessionStart(0.0, name, "fix it", str(repo.resolve()), "replay", ["grep"]).to_json() + "\n")
    os.utime(path, (mtime, mtime))
    return path


def test_a_killed_headless_run_resumes_to_its_end(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    trajectory = tmp_path / "run.jsonl"
    replay = ["--engine", "replay", "--replay", str(CALC), "--repo", str(repo)]
    killed_run(trajectory, tmp_path, [*replay, "--seconds-per-token", "0.05"], until="tool_result")
    before = read_trajectory(trajectory)
    assert not any(isinstance(e, SessionEnd) for e in before)

    resumed = tao("run", "--headless", "--resume", str(trajectory), "--trajectory", str(trajectory), *replay,
                  home=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming {trajectory}" in resumed.stderr
    whole = read_trajectory(trajectory)
    assert whole[:len(before)] == before  # the killed run's events are kept, the resumed part follows
    assert isinstance(whole[len(before)], SessionResume) and whole[len(before)].session_id == before[0].session_id
    end = whole[-1]
    assert isinstance(end, SessionEnd) and end.status == "finished"
    assert "+    return a + b" in end.submission
    # the same script goes on where the run stopped: each recorded answer was given once
    assert [e.text for e in whole if isinstance(e, LLMEnd)] == json.loads(CALC.read_text())["turns"]

    again = tao("run", "--headless", "--resume", str(trajectory), *replay, home=tmp_path)
    assert again.returncode == 2 and "already finished" in again.stderr and "Traceback" not in again.stderr


def test_a_call_the_killed_run_left_open_is_answered_before_it_goes_on(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"task": "wait, then finish",
                                  "turns": [call("bash", command="sleep 60"), call("finish", summary="waited")]}))
    trajectory = tmp_path / "run.jsonl"
    replay = ["--engine", "replay", "--replay", str(script), "--repo", str(repo), "--yolo"]
    killed_run(trajectory, tmp_path, replay, until="tool_call")
    [open_call] = [e for e in read_trajectory(trajectory) if isinstance(e, ToolCall)]
    assert [c.call_id for c in unanswered(read_trajectory(trajectory))] == [open_call.call_id]

    resumed = tao("run", "--headless", "--resume", str(trajectory), *replay, home=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    whole = read_trajectory(trajectory)
    [result] = [e for e in whole if isinstance(e, ToolResult)]
    assert result.call_id == open_call.call_id and result.is_error and "session stopped" in result.output
    answers = [i for i, e in enumerate(whole) if isinstance(e, LLMEnd)]
    assert whole.index(result) < answers[-1] and '"finish"' in whole[answers[-1]].text  # answered, then went on
    assert isinstance(whole[-1], SessionEnd) and whole[-1].status == "finished"


def test_the_last_session_is_only_ever_one_of_this_repository(tmp_path: Path) -> None:
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()
    folder = tmp_path / "trajectories"
    older = saved(folder, "older-here", here, 1_000_000)
    newest = saved(folder, "newest-there", there, 2_000_000)
    assert last_session(folder, here) == older and choose_session(folder, here) == older
    assert last_trajectory(folder, here) == older  # what `tao --resume` (the TUI) reopens
    older.unlink()
    assert last_session(folder, here) is None
    for choose in (choose_session, last_trajectory):
        with pytest.raises(UsageError) as error:
            choose(folder, here)
        message = str(error.value)
        assert f"no saved session of {here.resolve()}" in message and str(newest) in message
        assert "--resume FILE" in message and f"ls -t {folder}" in message
    with pytest.raises(UsageError, match="no saved session of"):
        choose_session(tmp_path / "none yet", here)


def test_resume_in_a_repository_without_sessions_says_how_to_choose_one(tmp_path: Path) -> None:
    first, second = make_calc_repo(tmp_path / "a"), make_calc_repo(tmp_path / "b")
    replay = ["--engine", "replay", "--replay", str(CALC)]
    ran = tao("run", "--headless", *replay, "--repo", str(first), home=tmp_path)
    assert ran.returncode == 0, ran.stderr
    [other] = (tmp_path / "xdg_state_home" / "tao" / "trajectories").glob("*.jsonl")
    for flag in (["--resume"], ["--continue"]):
        result = tao("run", "--headless", *flag, *replay, "--repo", str(second), home=tmp_path)
        assert result.returncode == 2, result.stderr
        assert f"tao: no saved session of {second.resolve()} to resume" in result.stderr, result.stderr
        assert str(other) in result.stderr and "--resume FILE" in result.stderr
        assert "Traceback" not in result.stderr and "resuming" not in result.stderr


def test_an_existing_trajectory_is_never_appended_to(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    trajectory = tmp_path / "run.jsonl"
    replay = ["--engine", "replay", "--replay", str(CALC), "--repo", str(repo), "--trajectory", str(trajectory)]
    assert tao("run", "--headless", *replay, home=tmp_path).returncode == 0
    kept = trajectory.read_bytes()
    again = tao("run", "--headless", *replay, home=tmp_path)
    assert again.returncode == 2, again.stderr
    assert f"--trajectory {trajectory} already exists" in again.stderr and "--resume" in again.stderr
    assert trajectory.read_bytes() == kept
    empty = tmp_path / "empty.jsonl"
    empty.touch()
    assert new_trajectory(empty) == empty  # an empty file (from mktemp) holds no session to keep
