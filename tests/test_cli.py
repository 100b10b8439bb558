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
    missing = tao("run", "task", "--repo", str(tmp_path / "nope"), "--engine", "replay", "--replay", "x.json",
                  state=tmp_path)
    assert missing.returncode == 2 and "is not a directory" in missing.stderr
    no_file = tao("run", "task", "--repo", str(repo), "--engine", "replay", "--replay", str(tmp_path / "x.json"),
                  state=tmp_path)
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


def tao_without_terminal(*args: str, stdin: int | None = subprocess.DEVNULL) -> subprocess.CompletedProcess[str]:
    """Run the CLI as a script would: output piped, input from /dev/null unless `stdin` says otherwise."""
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=ROOT, stdin=stdin,
                          capture_output=True, text=True, timeout=60)


def test_the_tui_without_a_terminal_says_so_and_exits(tmp_path: Path) -> None:
    for args in ((), ("tui",), ("--resume",), ("tui", "--repo", str(tmp_path))):
        result = tao_without_terminal(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert "needs a terminal" in result.stderr and 'tao run --headless "TASK"' in result.stderr, args
        assert "--json" in result.stderr and "\x1b" not in result.stdout and "Traceback" not in result.stderr
    helped = tao_without_terminal("tui", "--help")
    assert helped.returncode == 0 and "usage: tao tui" in helped.stdout


def test_the_tui_with_a_terminal_for_input_but_a_pipe_for_output_exits() -> None:
    import pty

    controller, terminal = pty.openpty()
    try:
        result = tao_without_terminal(stdin=terminal)
    finally:
        os.close(controller)
        os.close(terminal)
    assert result.returncode == 2 and "needs a terminal" in result.stderr
    assert "\x1b" not in result.stdout


def test_an_unknown_flag_shows_the_subcommands_usage_and_names_the_flag() -> None:
    result = tao_without_terminal("run", "--frobnicate")
    assert result.returncode == 2
    assert "usage: tao run" in result.stderr and "--frobnicate" in result.stderr
    nested = tao_without_terminal("bench", "replay", "--traces", "x", "--frobnicate")
    assert nested.returncode == 2
    assert "usage: tao bench replay" in nested.stderr and "--frobnicate" in nested.stderr
    unknown = tao_without_terminal("frobnicate")
    assert unknown.returncode == 2 and "usage: tao " in unknown.stderr and "frobnicate" in unknown.stderr


def test_the_replay_engine_without_a_recording_asks_for_one() -> None:
    for args in (("run", "--engine", "replay"), ("run", "fix it", "--engine", "replay", "--headless")):
        result = tao_without_terminal(*args)
        assert result.returncode == 2, result.stderr
        assert ("--engine replay needs --replay FILE (a recorded trajectory .jsonl or a JSON turn script)"
                in result.stderr), args


def test_answers_to_force_through_the_real_engine_are_read_before_it_starts(tmp_path: Path) -> None:
    bad = tmp_path / "turns.json"
    bad.write_text("{not json")
    result = tao_without_terminal("run", "fix it", "--headless", "--replay", str(bad))
    assert result.returncode == 2, result.stderr
    assert str(bad) in result.stderr and "starting the vLLM engine" not in result.stderr


def test_the_log_counts_steps_in_good_grammar() -> None:
    from harness.log import HumanLog

    log = HumanLog()
    one = log.format(SessionEnd(t=1.0, status="limit", reason="the step limit of 1 was reached", steps=1))
    assert one is not None and "after 1 step:" in one
    many = log.format(SessionEnd(t=1.0, status="finished", reason="done", steps=6))
    assert many is not None and "after 6 steps:" in many


def test_an_engine_that_cannot_be_reached_still_ends_the_json_stream_with_session_end(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    result = tao("run", "--json", "--engine", "openai", "--base-url", "http://127.0.0.1:9/v1", "fix it",
                 "--repo", str(repo), state=tmp_path)
    assert result.returncode == 1, result.stderr
    events = [from_dict(json.loads(line)) for line in result.stdout.splitlines()]
    assert [event.type for event in events] == ["session_start", "session_end"]
    start, end = events
    assert start.task == "fix it" and start.repo == str(repo) and start.engine == "openai:http://127.0.0.1:9/v1"
    assert isinstance(end, SessionEnd) and end.status == "error"
    assert "no OpenAI-compatible server answers at http://127.0.0.1:9/v1" in end.reason
    assert "engine unavailable" in result.stderr  # the person reading stderr is told too
    assert not list((tmp_path / "tao").rglob("*.jsonl"))  # a session that never started leaves no trajectory
    usage = tao("run", "--json", "--engine", "openai", "fix it", "--repo", str(repo), state=tmp_path)
    assert usage.returncode == 2 and usage.stdout == ""  # bad usage: exit 2 before any event, as documented


def test_quiet_prints_only_the_final_answer(tmp_path: Path) -> None:
    replay = ("run", "--engine", "replay", "--replay", str(EXAMPLES / "calc.replay.json"))
    result = tao(*replay, "--quiet", "--repo", str(make_calc_repo(tmp_path / "a")), state=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "add() subtracted its arguments; it now returns a + b and the test suite passes.\n"
    assert "-> " not in result.stderr and "session finished" not in result.stderr  # no log either
    limited = tao(*replay, "-q", "--max-steps", "1", "--repo", str(make_calc_repo(tmp_path / "b")), state=tmp_path)
    assert limited.returncode == 3 and limited.stdout == ""
    assert "step limit of 1" in limited.stderr
    both = tao(*replay, "--quiet", "--json", "--repo", str(tmp_path), state=tmp_path)
    assert both.returncode == 2 and "not allowed with argument" in both.stderr and both.stdout == ""


def test_the_approval_mode_is_chosen_on_the_command_line(tmp_path: Path) -> None:
    """`--mode read-only` refuses the scripted edit, whatever the config files say; `--mode` and `--yolo` conflict."""
    repo = make_calc_repo(tmp_path)
    (repo / ".tao.toml").write_text('[approvals]\nmode = "auto-edit"\n')  # a repository file may only tighten
    config = tmp_path / "config" / "tao" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[approvals]\nmode = "full-auto"\n')
    trajectory = tmp_path / "run.jsonl"
    result = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--headless", "--mode", "read-only",
                             "--engine", "replay", "--replay", str(EXAMPLES / "calc.replay.json"), "--repo", str(repo),
                             "--trajectory", str(trajectory)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "XDG_STATE_HOME": str(tmp_path),
                                 "XDG_CONFIG_HOME": str(tmp_path / "config")})
    [edit] = [e for e in read_trajectory(trajectory) if e.type == "approval"]  # only the edit needs one
    assert (edit.decision, edit.by) == ("deny", "read-only"), result.stderr
    assert "return a - b" in (repo / "calc" / "ops.py").read_text()
    both = tao("run", "task", "--mode", "ask", "--yolo", "--engine", "replay", "--replay", "x.json", state=tmp_path)
    assert both.returncode == 2 and "not allowed with argument" in both.stderr


def test_the_terminal_is_checked_once_on_the_way_to_the_tui(tmp_path: Path, monkeypatch) -> None:
    """`tao tui` and `tao run` on a terminal ask `terminal_problem` once each, then open the TUI (replaced here by
    a stand-in that records its task: the TUI itself is tested in tests/test_tui_*.py)."""
    import tui.app
    from harness import cli

    asked: list[str] = []
    opened: list[str] = []
    monkeypatch.setattr(cli, "terminal_problem", lambda: asked.append("asked") or None)  # a terminal, as it says
    monkeypatch.setattr(tui.app, "main", lambda args, repo, task, resume: opened.append(task) or 0)
    for argv in (["tui", "--repo", str(tmp_path)], ["run", "--repo", str(tmp_path), "fix it"]):
        asked.clear()
        assert cli.main(argv) == 0
        assert asked == ["asked"], argv
    assert opened == ["", "fix it"]
