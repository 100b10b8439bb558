"""The real `tao` binary in a real pseudo-terminal: type a task, read the screen, quit (on replay and on the real
embedded engine)."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pexpect
import pytest

from harness.bench.first_call import screen_text
from harness.engine.embedded_model import MODEL_NAME
from harness.events import read_trajectory
from tests.helpers import ROOT, make_calc_repo
from tests.test_tui_support import TASK, TURNS

TAO = ROOT / ".venv" / "bin" / "tao"


def test_tao_in_a_terminal_runs_a_typed_task(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [TURNS[0], TURNS[1], TURNS[2], TURNS[-1]]}))
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "150", "LINES": "45",
           **{name: str(tmp_path / name.lower()) for name in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME")}}
    env.pop("TEXTUAL", None)
    child = pexpect.spawn(str(TAO), ["--repo", str(repo), "--engine", "replay", "--replay", str(script)],
                          env=env, dimensions=(45, 150), encoding="utf-8", timeout=90, cwd=str(tmp_path))
    child.logfile_read = log = io.StringIO()  # everything drawn, to read the screen from
    try:
        child.expect("Describe the task")
        child.send(TASK)
        child.send("\r")
        child.expect("Approve once")  # the edit asks (mode "ask"); its keys show once the modal's guard is over
        child.send("y")
        child.expect("finished: add\\(\\) now returns a \\+ b")
        seen = screen_text(log.getvalue())
        # Textual redraws only what changed, so a line's words may come in pieces: look for short ones.
        assert "grep(pattern='def add')" in seen and "instead of adding" in seen
        assert "promoted" in seen and "discarded" in seen  # the speculation pane, live
        child.send("\x11")  # Ctrl+Q
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0, screen_text(child.before or "")
    assert "tao --resume" in screen_text(child.before)
    [trajectory] = (tmp_path / "xdg_state_home" / "tao" / "trajectories").glob("*.jsonl")
    events = read_trajectory(trajectory)
    assert events[0].task == TASK and events[-1].type == "session_end"
    assert (repo / "calc" / "ops.py").read_text().count("return a + b") == 1
    [approval] = [e for e in events if e.type == "approval"]
    assert approval.decision == "allow" and approval.by == "user"


def spawn_tao(tmp_path: Path, *args: str, timeout: float = 90) -> tuple[pexpect.spawn, io.StringIO]:
    """`tao ARGS` in a 150x45 pseudo-terminal, with config, cache and state under tmp_path; what it draws is logged."""
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "150", "LINES": "45", "VLLM_CPU_KVCACHE_SPACE": "1",
           **{name: str(tmp_path / name.lower()) for name in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME")}}
    env.pop("TEXTUAL", None)
    child = pexpect.spawn(str(TAO), list(args), env=env, dimensions=(45, 150), encoding="utf-8", timeout=timeout,
                          cwd=str(tmp_path))
    child.logfile_read = log = io.StringIO()
    return child, log


@pytest.mark.engine
def test_tao_on_the_embedded_engine_runs_a_task_and_resumes_it(tmp_path: Path, embedded_model: Path) -> None:
    """The real engine, answers forced token by token from a script (so the session is predictable)."""
    repo = make_calc_repo(tmp_path)
    models = tmp_path / "xdg_cache_home" / "tao" / "models"
    models.mkdir(parents=True)
    (models / MODEL_NAME).symlink_to(embedded_model)  # the converted model, without converting it again
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [TURNS[0], TURNS[1], TURNS[2], TURNS[-1]]}))
    child, log = spawn_tao(tmp_path, "--repo", str(repo), "--replay", str(script), timeout=300)
    try:
        child.expect("Describe the task")
        child.expect("loading")  # the opening screen, at once, with the engine loading behind it
        child.send(TASK)
        child.send("\r")
        child.expect("waits for the engine")  # typed while the engine loads: it starts once the engine is ready
        child.expect("ready in")
        child.expect("grep\\(pattern='def add'\\)")  # the model's first tool call
        child.expect("promoted|discarded")  # a speculation settled in the speculation pane
        child.expect("Approve once")
        child.send("y")
        child.expect("finished: add\\(\\) now returns a \\+ b")
        seen = screen_text(log.getvalue())
        assert "kv " in seen and "pacing" not in seen  # the real engine's load; nobody paces this session
        assert "Triton" not in seen and "NUMA" not in seen  # the engine's stderr went to its log
        child.send("\x11")  # Ctrl+Q
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0, screen_text(child.before or "")
    [trajectory] = (tmp_path / "xdg_state_home" / "tao" / "trajectories").glob("*.jsonl")
    events = read_trajectory(trajectory)
    assert events[0].task == TASK and events[0].engine.startswith("forced:vllm:") and events[-1].type == "session_end"
    assert [e.type for e in events].count("llm_end") == 4 and events[-1].status == "finished"
    [approval] = [e for e in events if e.type == "approval"]
    assert approval.decision == "allow" and approval.by == "user"
    assert (repo / "calc" / "ops.py").read_text().count("return a + b") == 1

    # The resume on the scripted engine: what it tests (the conversation redrawn from the trajectory, the session
    # going on after its last step) does not depend on the engine, and a second engine start would cost the suite
    # a minute or more on a busy 2-core CI machine.
    child, log = spawn_tao(tmp_path, "--repo", str(repo), "--continue", "--engine", "replay", "--replay", str(script))
    try:
        child.expect("grep\\(pattern='def add'\\)")  # the conversation, drawn from the trajectory at once
        child.expect("session resumed after step 4")
        child.send("\x11")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0, screen_text(child.before or "")
    resumed = [e.type for e in read_trajectory(trajectory)]
    assert resumed.count("session_start") == 1 and resumed.count("session_resume") == 1
    assert resumed[-1] == "session_end"


@pytest.mark.engine
def test_quitting_while_the_engine_loads_keeps_the_typed_task(tmp_path: Path, embedded_model: Path) -> None:
    repo = make_calc_repo(tmp_path)
    models = tmp_path / "xdg_cache_home" / "tao" / "models"
    models.mkdir(parents=True)
    (models / MODEL_NAME).symlink_to(embedded_model)
    child, log = spawn_tao(tmp_path, "--repo", str(repo))
    try:
        child.expect("loading")
        child.send(TASK)
        child.send("\r")
        child.expect("waits for the engine")
        child.send("\x11")  # Ctrl+Q before the engine is ready: its start is stopped, not waited for
        child.expect("never ran")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0, screen_text(log.getvalue())
    [trajectory] = (tmp_path / "xdg_state_home" / "tao" / "trajectories").glob("*.jsonl")
    start, end = read_trajectory(trajectory)
    assert start.task == TASK and (end.type, end.status) == ("session_end", "interrupted")
