"""The TUI and its engine: the opening screen at launch, an engine that fails to start, a killed last session,
the status bar's fields, and the engine's stderr kept off the screen."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.cli import build_parser
from harness.events import LLMStart, SessionEnd, SessionStart, TrajectoryWriter, read_trajectory
from harness.launch import SessionOptions
from tests.helpers import ROOT, make_calc_repo
from tests.test_tui_support import TASK, TURNS, event_types, isolated, session_options, until  # noqa: F401
from tui.app import TaoApp
from tui.engine_log import stderr_to_log
from tui.widgets.conversation.opening import OpeningPanel
from tui.widgets.conversation.pane import ConversationPane
from tui.widgets.prompt.box import PromptBox
from tui.widgets.status.bar import StatusBar


def panel_text(app: TaoApp) -> str:
    return app.query_one(OpeningPanel).text().plain


def status_text(app: TaoApp) -> str:
    return app.query_one(StatusBar).line().plain


def notes(app: TaoApp) -> str:
    return "\n".join(str(note.render()) for note in app.query_one(ConversationPane).query(".note"))


async def test_the_opening_screen_shows_at_once_and_the_engine_loads_before_any_task(isolated: Path) -> None:
    options = session_options(isolated, [TURNS[0], TURNS[-1]])
    app = TaoApp(options)
    async with app.run_test(size=(140, 40)) as pilot:
        opening = panel_text(app)
        assert str(options.repo) in opening and "git branch" in opening
        assert "replay of script.json" in opening and "ask:" in opening and "Type a task" in opening
        await until(pilot, lambda: app.engine is not None, "the engine loaded with no task typed")
        assert "ready" in panel_text(app) and "ready" in status_text(app)
        await pilot.press(*TASK, "enter")
        await until(pilot, lambda: "turn_end" in event_types(app), "the end of the work")
        line = status_text(app)
        # replay keeps no engine books, nobody paces the session, and unpaced replay has no time for a rate
        assert "kv" not in line and "queue" not in line and "pacing" not in line and "tok/s" not in line
        assert "step 2" in line
        await pilot.press("ctrl+q")


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_an_engine_that_fails_to_start_says_why_keeps_the_task_and_can_be_retried(isolated: Path) -> None:
    repo = make_calc_repo(isolated)
    args = build_parser().parse_args(["tui", "--repo", str(repo), "--engine", "openai",
                                      "--base-url", f"http://127.0.0.1:{closed_port()}/v1"])
    app = TaoApp(SessionOptions.from_args(args, repo))
    async with app.run_test(size=(140, 40)) as pilot:
        await until(pilot, lambda: app.engine_error is not None, "the engine's failure")
        assert "failed" in panel_text(app) and "engine failed" in status_text(app)
        assert "tries again" in app.query_one(PromptBox).placeholder
        await pilot.press(*TASK, "enter")  # Enter tries again, with the task waiting for the engine
        saved = isolated / "xdg_state_home" / "tao" / "trajectories"
        await until(pilot, lambda: app.failed_trajectory is not None, "the retry's failure")
        assert app.loader is not None and not app.loader.is_running
        assert app.query_one(PromptBox).value == TASK  # Enter tries again with it
        assert "engine failed" in status_text(app) and "saved in" in notes(app)
        await pilot.press("ctrl+q")
    [path] = saved.glob("*.jsonl")
    events = read_trajectory(path)
    assert [e.type for e in events] == ["session_start", "session_end"]
    start, end = events
    assert isinstance(start, SessionStart) and start.task == TASK and start.repo == str(repo)
    assert isinstance(end, SessionEnd) and end.status == "error" and "engine failed to start" in end.reason


async def test_a_killed_last_session_is_named_with_how_to_resume_it(isolated: Path) -> None:
    options = session_options(isolated, [TURNS[0], TURNS[-1]])
    saved = isolated / "xdg_state_home" / "tao" / "trajectories"
    killed = saved / "killed.jsonl"
    writer = TrajectoryWriter(killed)
    writer.write(SessionStart(0.0, "abc", TASK, str(options.repo), "replay", ["grep"]))
    writer.write(LLMStart(0.1, 1, "abc-1", 2))  # the process died here: no session_end
    writer.close()
    app = TaoApp(options)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        assert str(killed) in notes(app) and "tao --resume" in notes(app)
        await pilot.press("ctrl+q")

    writer = TrajectoryWriter(killed)  # the same session, ended properly: nothing to say
    writer.write(SessionEnd(0.2, "finished", "the model called finish"))
    writer.close()
    app = TaoApp(options)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        assert "tao --resume" not in notes(app)
        await pilot.press("ctrl+q")


def test_child_processes_write_their_stderr_to_the_log_not_the_screen(tmp_path: Path,
                                                                       capfd: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "logs" / "engine.log"
    with stderr_to_log(log) as streams:
        subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('engine noise\\n')"], check=True)
        streams.screen.write("the screen\n")
        streams.screen.flush()
    drawn = capfd.readouterr().err
    assert "engine noise" in log.read_text() and "engine noise" not in drawn
    assert "the screen" in drawn and "the screen" not in log.read_text()
    with stderr_to_log(tmp_path / "logs" / "quiet.log"):
        pass
    assert not (tmp_path / "logs" / "quiet.log").exists()  # a run with nothing to say leaves no log


START = textwrap.dedent("""
    import asyncio, sys
    from harness.engine.vllm_local import VLLMEngine, VLLMSettings
    from harness.errors import EngineUnavailable

    class Stand_in:  # what Textual puts in sys.stderr while it draws: no file descriptor
        def write(self, text): return len(text)
        def flush(self): pass
        def fileno(self): return -1

    for model, stderr in ((sys.argv[1], sys.stderr), (sys.argv[2], Stand_in())):
        sys.stderr = stderr
        try:
            asyncio.run(VLLMEngine.start(VLLMSettings(model=model, name="test", max_model_len=2048)))
        except EngineUnavailable as exc:
            print(exc, flush=True)
""")


@pytest.mark.engine
def test_only_a_failure_about_the_model_is_reported_as_a_bad_model(tmp_path: Path, embedded_model: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    # The user's VLLM_WORKER_MULTIPROC_METHOD=spawn keeps vLLM's own way (Tao otherwise forks the engine core):
    # the spawn then fails in this process, on the stand-in's file descriptor, and the message says so.
    out = subprocess.run([sys.executable, "-c", START, str(broken), str(embedded_model)], capture_output=True,
                         text=True, cwd=ROOT, timeout=600, env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1",
                                                                  "VLLM_WORKER_MULTIPROC_METHOD": "spawn"})
    bad_model, no_fd = out.stdout.splitlines()[:2]
    assert "could not load model" in bad_model and str(broken) in bad_model
    assert "failed to start" in no_fd and "fds_to_keep" in no_fd and "could not load model" not in no_fd
