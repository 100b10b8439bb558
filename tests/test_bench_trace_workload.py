"""Other agents' trajectories as a `tao bench cosched` workload: the conversion, and a replay that uses it.

Reads real mini-swe-agent trajectories from ../shared/traces in place (skipped when they are absent).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.bench import cosched_run as runner
from harness.bench.simtools import sim_tools
from harness.bench.trace_workload import as_tao_call, convert, trace_workload, with_call
from harness.coscheduler import CoScheduler, FCFS
from harness.engine.recorded import ForcedReplayEngine
from harness.engine.sim import GPU, SimEngine
from harness.errors import UsageError
from harness.events import Event, ToolResult
from harness.protocol import CallParser
from harness.session import Session, SessionConfig
from harness.calls.canonical import canonical
from harness.traces import load_sessions
from sandbox import Workspace
from tests.helpers import ROOT, virtual

TRACES = ROOT.parent / "shared" / "traces" / "mini-swe-agent-gemini-3-pro-swebench-verified"
SMALL = TRACES / "django__django-16255.traj.json"
needs_traces = pytest.mark.skipif(not SMALL.is_file(), reason="../shared/traces is not on this machine")


def parsed(text: str) -> tuple[str, list[tuple[str, dict]]]:
    """The reasoning text and the calls Tao's parser reads from an answer."""
    parser = CallParser()
    parser.feed(text)
    parser.finish()
    return parser.text, [(c.name, c.arguments) for c in parser.calls]


def test_shell_commands_become_the_tao_tool_they_amount_to() -> None:
    assert as_tao_call("bash", {"command": "cat src/app.py"}) == ("read_file", {"path": "src/app.py"})
    name, args = as_tao_call("bash", {"command": "grep -rn 'def main' src"})
    assert name == "grep" and args["pattern"] == "def main" and args["path"] == "src"
    assert as_tao_call("bash", {"command": "python reproduce.py"}) == ("bash", {"command": "python reproduce.py"})
    assert as_tao_call("edit_file", {"path": "a", "old": "x", "new": "y"}) == ("edit_file", {"path": "a", "old": "x",
                                                                                           "new": "y"})


def test_the_command_block_is_replaced_by_one_tao_call() -> None:
    answer = "THOUGHT: look at the module.\n\n```bash\ncat src/app.py\n```"
    text, calls = parsed(with_call(answer, "read_file", {"path": "src/app.py"}))
    assert calls == [("read_file", {"path": "src/app.py"})]
    assert "```" not in text and "look at the module" in text
    assert parsed(with_call("", "finish", {"summary": ""}))[1] == [("finish", {"summary": ""})]


@needs_traces
def test_a_real_trajectory_converts_call_for_call() -> None:
    imported = next(load_sessions(SMALL))
    session, book = convert(imported)
    turns = session.recording.turns
    assert parsed(turns[-1].text)[1][0][0] == "finish"
    assert len(turns) == len(book.calls) + 1
    epoch = 0
    for turn, call in zip(turns, book.calls):
        (name, args), = parsed(turn.text)[1]
        assert canonical(name, args).key == call.key
        assert call.epoch == epoch and call.duration > 0
        epoch += name in ("bash", "edit_file", "write_file")
    assert any(name != "bash" for turn in turns for name, _ in parsed(turn.text)[1])


@needs_traces
def test_a_converted_session_replays_every_recorded_observation(tmp_path: Path) -> None:
    """Through the simulated engine and the book's tools, every call finds its recorded run at its epoch."""
    session, book = convert(next(load_sessions(SMALL)))
    events: list[Event] = []

    async def main() -> str:
        engine = ForcedReplayEngine(CoScheduler(SimEngine(GPU), FCFS()).engine_for("s"), session.recording)
        workspace = Workspace(tmp_path, watch="stat")
        config = SessionConfig(max_steps=len(session.recording.turns) + 1, max_seconds=1e7)
        try:
            end = await Session(session.recording.task or "", engine, workspace, sim_tools(book), config,
                                [events.append]).run()
        finally:
            workspace.close()
        return end.status

    assert virtual(main) == "finished"
    outputs = [e.output for e in events if isinstance(e, ToolResult)]
    assert outputs == [c.output for c in book.calls]


@needs_traces
def test_the_held_out_split_and_only_select_sessions(tmp_path: Path) -> None:
    sessions, _ = trace_workload(TRACES, holdout=0.3)
    everything, _ = trace_workload(TRACES)
    assert 0 < len(sessions) < len(everything)
    assert {s.name for s in sessions} < {s.name for s in everything}
    picked = virtual(lambda: runner.load_workload([sessions[0].name], None, tmp_path, TRACES, 0.3))
    assert [s.name for s in picked.sessions] == [sessions[0].name]
    with pytest.raises(UsageError, match="no trajectory named no-such-instance"):
        virtual(lambda: runner.load_workload([sessions[0].name, "no-such-instance"], None, tmp_path, TRACES, 0.3))


def test_a_missing_trace_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such file"):
        trace_workload(tmp_path / "nowhere")
    with pytest.raises(UsageError, match="no trajectory"):
        trace_workload(tmp_path)


@needs_traces
def test_sessions_longer_than_the_engines_window_are_refused_up_front() -> None:
    from harness.bench import cosched

    with pytest.raises(UsageError, match="context window .8192 tokens"):
        cosched.run([1], "sim", "cpu", None, None, 1, progress=False, traces=TRACES, holdout=0.3)


@needs_traces
def test_repetitions_rotate_the_modes_and_pool_their_sessions() -> None:
    from harness.bench import cosched
    from harness.bench.trace_workload import trace_workload

    short = next(s.name for s in trace_workload(TRACES, 0.3)[0] if len(s.recording.turns) <= 20)
    result = cosched.run([2], "sim", "gpu", [short], None, 1, progress=False, traces=TRACES, holdout=0.3, repeat=2,
                         modes=("fcfs", "cap", "tao+spec"), caps=(1, 2))
    [row] = result["levels"]
    assert row["order"] == [["fcfs", "cap-1", "cap-2", "tao+spec"], ["cap-1", "cap-2", "tao+spec", "fcfs"]]
    assert row["modes"]["cap"]["limit"] in (1, 2)  # the better of the two limits, reported as `cap`
    for mode in ("fcfs", "cap-1", "cap-2", "tao+spec"):
        summary = row["modes"][mode]
        assert summary["runs"] == 4 and len(summary["repetition_means"]) == 2  # 2 sessions, twice
        assert min(summary["repetition_means"]) <= summary["mean"] <= max(summary["repetition_means"])
    assert result["config"]["repeat"] == 2
    with pytest.raises(UsageError, match="--repeat 0"):
        cosched.run([2], "sim", "gpu", [short], None, 1, progress=False, traces=TRACES, holdout=0.3, repeat=0)
