"""`tao demo` (and so `make demo`): the bundled example fixed in a fresh copy, on the real engine with forced
answers, headless without a terminal, in the TUI on one, and as the README's screenshot."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest

from harness.events import SpecDiscard, SpecPromote, ToolResult, read_trajectory
from tests.helpers import ENGINE_NOISE, ROOT
from tests.test_tui_pty import TAO, screen_text

CLOSING = ('`tao` in your own repository', '`tao run "TASK"`', "`tao --model DIR`",
           "`tao --engine openai --base-url URL`")


def isolated_env(home: Path, cache: bool = True) -> dict[str, str]:
    """The environment of a user with no config and no past sessions (and, with `cache`, no cached patterns;
    the engine test keeps the real cache, where the embedded model was converted once)."""
    names = ("XDG_CONFIG_HOME", "XDG_STATE_HOME", *(("XDG_CACHE_HOME",) if cache else ()))
    return {**os.environ, **{name: str(home / name.lower()) for name in names}}


def demo(home: Path, *args: str, cache: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`tao demo ARGS` as a script or CI runs it: no terminal."""
    return subprocess.run([sys.executable, "-m", "harness.cli", "demo", *args], cwd=ROOT, capture_output=True,
                          text=True, env=isolated_env(home, cache), stdin=subprocess.DEVNULL, timeout=timeout)


def demo_repo(log: str) -> Path:
    """The fresh copy the demo says it ran in."""
    found = re.search(r"Tao demo in (\S+) \(a fresh copy", log)
    assert found, log
    return Path(found.group(1))


def trajectory(home: Path) -> list:
    [path] = (home / "xdg_state_home" / "tao" / "trajectories").glob("*.jsonl")
    return read_trajectory(path)


def suite_passes(repo: Path) -> bool:
    """Whether the example's own test suite passes in the copy the demo worked on."""
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=repo,
                         capture_output=True, text=True, env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    return run.returncode == 0


@pytest.mark.engine
def test_the_demo_fixes_the_example_on_the_real_engine(tmp_path: Path, embedded_model: Path) -> None:
    result = demo(tmp_path, "--headless", cache=False, timeout=1200)
    log = result.stderr
    assert result.returncode == 0, log
    assert "The answers are scripted (calc.replay.json) and forced token by token through the real vLLM engine" in log
    assert "<- result from speculation" in log and "discarded:" in log  # promoted and discarded, as they happen
    assert "Tests: failing at step 1 -> passing at step 5." in log
    assert all(hint in log for hint in CLOSING), log
    assert [line for line in log.splitlines() if any(word in line for word in ENGINE_NOISE)] == []
    repo = demo_repo(log)
    assert suite_passes(repo) and "return a + b" in (repo / "calc" / "ops.py").read_text()
    events = trajectory(tmp_path)
    assert events[0].engine.startswith("forced:vllm:")
    assert any(isinstance(e, SpecPromote) for e in events) and any(isinstance(e, SpecDiscard) for e in events)
    runs = [e for e in events if isinstance(e, ToolResult) and e.name == "run_tests"]
    assert runs[0].exit_code != 0 and runs[-1].exit_code == 0


def test_without_a_terminal_the_demo_runs_headless(tmp_path: Path) -> None:
    result = demo(tmp_path, "--engine", "replay")  # no --headless: stdin is not a terminal
    log = result.stderr
    assert result.returncode == 0, log
    assert "\x1b[" not in log + result.stdout  # a log, not a screen drawn into a pipe
    assert "The answers are scripted (calc.replay.json) and replayed without a model" in log
    assert "speculating: run_tests()" in log and "<- result from speculation" in log
    assert re.search(r"speculation s\d+ discarded: the model is calling run_tests", log)
    assert "Tests: failing at step 1 -> passing at step 5." in log
    assert re.search(r"Speculation: \d+ launched, [1-9]\d* promoted, [1-9]\d* discarded; \d+\.\d s of tool time", log)
    assert all(hint in log for hint in CLOSING), log
    assert suite_passes(demo_repo(log))
    assert "allow" in {e.decision for e in trajectory(tmp_path) if e.type == "approval"}  # the edit, by auto-edit


def test_on_a_terminal_the_demo_opens_the_tui_and_runs_the_task(tmp_path: Path) -> None:
    env = {**isolated_env(tmp_path), "TERM": "xterm-256color", "COLUMNS": "150", "LINES": "50"}
    env.pop("TEXTUAL", None)
    child = pexpect.spawn(str(TAO), ["demo", "--engine", "replay"], env=env, dimensions=(50, 150),
                          encoding="utf-8", timeout=120, cwd=str(tmp_path))
    child.logfile_read = log = io.StringIO()
    try:
        child.expect("The script ends here")  # the recap, after the task's turn ended: nobody was asked anything
        seen = screen_text(log.getvalue())
        assert "Tao demo" in seen and "replayed without" in seen  # the opening words say where answers come from
        assert "promoted" in seen and "discarded" in seen and "auto-edit" in seen
        assert "Point Tao at a real model" in seen
        child.send("\x11")  # Ctrl+Q
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0, screen_text(child.before or "")
    events = trajectory(tmp_path)
    assert events[-1].type == "session_end" and any(isinstance(e, SpecPromote) for e in events)
    [repo] = {Path(e.repo) for e in events if e.type == "session_start"}
    assert suite_passes(repo)


def test_the_screenshot_is_the_demo_screen_at_its_end(tmp_path: Path) -> None:
    svg = tmp_path / "docs" / "demo.svg"
    result = demo(tmp_path, "--engine", "replay", "--screenshot", str(svg))
    assert result.returncode == 0, result.stderr
    drawn = svg.read_text(encoding="utf-8")
    assert drawn.startswith("<svg") and "promoted" in drawn and "Point&#160;Tao&#160;at&#160;a&#160;real" in drawn
