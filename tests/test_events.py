"""The event schema: JSON round trip, trajectory files that survive a crash, unknown types kept."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from harness import events as ev
from harness.errors import UsageError
from harness.interactive import open_live_session
from harness.launch import SessionOptions
from tests.helpers import ROOT, make_calc_repo
from tests.test_tui_support import TASK, call, isolated, session_options  # noqa: F401 - isolated is a fixture


def sample_events() -> list[ev.Event]:
    return [
        ev.SessionStart(0.0, "abc", "fix it", "/repo", "replay", ["grep", "read_file"], {"max_steps": 3},
                        "2026-01-01T00:00:00+00:00"),
        ev.LLMStart(0.1, 1, "abc-1", 2),
        ev.LLMFirstToken(0.2, 1, "abc-1"),
        ev.LLMEnd(0.5, 1, "abc-1", "text <tool_call>{}</tool_call>", None, "stop", 100, 60, 12, 0.1, 0.3),
        ev.ToolCall(0.5, 1, "call_1_0", "grep", {"pattern": "déf"}, "pure"),
        ev.ToolResult(0.6, 1, "call_1_0", "grep", "a.py:1:déf", False, 0, 0, 0, 0.1),
        ev.FormatError(0.7, 2, "no call"),
        ev.SessionEnd(0.9, "finished", "the model called finish", "done", 2, "diff --git a b", 12),
    ]


def test_every_event_round_trips_through_json() -> None:
    for event in sample_events():
        data = json.loads(event.to_json())
        assert data["type"] == event.type and isinstance(data["t"], float)
        assert ev.from_dict(data) == event


def test_trajectory_file_reads_back_equal(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "run.jsonl"
    writer = ev.TrajectoryWriter(path)
    for event in sample_events():
        writer.write(event)
        # Flushed after every event: another reader sees it at once.
        assert ev.read_trajectory(path)[-1] == event
    writer.close()
    assert ev.read_trajectory(path) == sample_events()


def test_a_torn_last_line_is_skipped_but_earlier_damage_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    lines = [e.to_json() for e in sample_events()[:3]]
    path.write_text("\n".join(lines) + '\n{"type": "llm_end", "t": 0.4, "te')
    assert ev.read_trajectory(path) == sample_events()[:3]
    path.write_text(lines[0] + "\nnot json\n" + lines[1] + "\n")
    with pytest.raises(ev.EventDecodeError, match=":2:"):
        ev.read_trajectory(path)


def test_unknown_event_types_are_kept_verbatim() -> None:
    raw = {"type": "from_a_newer_tao", "t": 1.5, "candidate": "grep x"}
    event = ev.from_dict(raw)
    assert isinstance(event, ev.UnknownEvent)
    assert json.loads(event.to_json()) == raw


def test_events_without_type_or_time_are_rejected() -> None:
    with pytest.raises(ev.EventDecodeError):
        ev.from_dict({"t": 1})
    with pytest.raises(ev.EventDecodeError):
        ev.from_dict({"type": "tool_call"})


def test_strip_timing_drops_only_timing_fields() -> None:
    stripped = list(ev.strip_timing(sample_events()))
    assert all("t" not in item for item in stripped)
    assert stripped[5]["output"] == "a.py:1:déf" and "duration" not in stripped[5]


def test_fields_of_the_wrong_type_are_refused_with_the_field_named() -> None:
    call = ev.ToolCall(0.5, 1, "call_1", "read_file", {"path": "a.py"}, "pure").to_dict()
    assert ev.from_dict({**call, "t": 1}) == ev.ToolCall(1, 1, "call_1", "read_file", {"path": "a.py"}, "pure")
    for field_name, value in (("arguments", ["a.py"]), ("name", 7), ("step", "1"), ("step", True), ("call_id", None)):
        with pytest.raises(ev.EventDecodeError, match=f"wrong type for {field_name}"):
            ev.from_dict({**call, field_name: value})
    for t in (float("nan"), float("inf"), True, "0.5", 10**400):
        with pytest.raises(ev.EventDecodeError, match="finite number 't'"):
            ev.from_dict({**call, "t": t})
    with pytest.raises(ev.EventDecodeError, match="not a list"):
        ev.from_dict([call])  # type: ignore[arg-type]
    spec = ev.SpecSummary(1.0, 1, 1, 0, 0, 0.5, 0.0, {"read": {"promoted": 1}}).to_dict()
    with pytest.raises(ev.EventDecodeError, match="by_kind"):
        ev.from_dict({**spec, "by_kind": {"read": {"promoted": "1"}}})


def test_a_line_separator_inside_a_string_is_no_line_break(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    writer = ev.TrajectoryWriter(path)
    events = [*sample_events()[:5], ev.ToolResult(0.6, 1, "call_1_0", "grep", "a\u2028b\x85c\rd\x1ce", False, 0)]
    for event in events:
        writer.write(event)
    writer.close()
    assert ev.read_trajectory(path) == events


async def wait_for(done: Callable[[], bool], what: str, seconds: float = 300.0) -> None:
    """Poll until `done()` holds (generous: the machine may be busy); fail saying `what` was awaited."""
    deadline = asyncio.get_running_loop().time() + seconds
    while not done():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"waited {seconds:.0f} s for {what}")
        await asyncio.sleep(0.02)


async def run_saved(options: SessionOptions, path: Path, resume: bool) -> list[ev.Event]:
    """A session through the path the TUI takes (new, or resumed from `path`): one turn, then stopped."""
    events: list[ev.Event] = []
    async with open_live_session(options, task="" if resume else TASK, resume=path if resume else None,
                                 sinks=[events.append]) as live:
        running = asyncio.create_task(live.session.run())
        if resume:
            await wait_for(lambda: any(e.type == "session_resume" for e in events), "the resumed session")
            live.session.send("once more")
        await wait_for(lambda: any(e.type == "turn_end" for e in events), "the turn's end")
        live.session.stop()
        await running
    return events


def tear(path: Path, inside: bytes = b"") -> None:
    """Cut the file's last line short, as a crash mid-write does (inside a multi-byte `inside` if given)."""
    data = path.read_bytes()
    last = data.rstrip(b"\n").rfind(b"\n") + 1
    at = data.index(inside, last) + 1 if inside else last + (len(data) - last) // 2
    path.write_bytes(data[:at])


async def test_a_torn_last_line_stays_resumable(isolated: Path) -> None:
    finish = call("finish", "Done.", summary="fini, café")  # the session_end line holds a two-byte character
    options = session_options(isolated, [call("grep", "Looking.", pattern="def add"), finish])
    path = options.trajectory
    first = await run_saved(options, path, resume=False)
    tear(path)  # the session_end line is lost mid-write
    second = await run_saved(options, path, resume=True)
    assert second[0].type == "session_resume" and len(second) > 2
    tear(path, inside="é".encode())  # and again, cut inside a character this time
    third = await run_saved(options, path, resume=True)
    assert first[-1].type == second[-1].type == "session_end"
    assert ev.read_trajectory(path) == first[:-1] + second[:-1] + third


def test_a_bad_line_in_the_middle_still_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    lines = [e.to_json() for e in sample_events()]
    resume = ev.SessionResume(1.0, "abc", 2).to_json()
    # torn but not followed by a session opening; not json; damaged near its end; torn and glued to the next event
    for middle, after in ((lines[3][:40], lines[4]), ("not json", resume), (lines[3][:-2] + "x}", resume),
                          (lines[3][:40] + lines[4], resume)):
        path.write_text("\n".join([*lines[:3], middle, after, ""]), encoding="utf-8")
        with pytest.raises(ev.EventDecodeError, match="run.jsonl:4: "):
            ev.read_trajectory(path)


def test_a_line_cut_anywhere_is_torn_and_a_resumed_session_reads_on(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    events = sample_events()
    resume = ev.SessionResume(1.0, "abc", 2)
    for index, event in enumerate(events):
        line = event.to_json().encode()
        for cut in range(1, len(line)):
            path.write_bytes(b"".join(e.to_json().encode() + b"\n" for e in events[:index]) + line[:cut])
            writer = ev.TrajectoryWriter(path)  # what a resumed session opens
            writer.write(resume)
            writer.close()
            assert ev.read_trajectory(path) == [*events[:index], resume], line[:cut]


def tao_cli(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    """`tao ...` as a user runs it, with its config, cache and state under `home`, and no terminal."""
    env = {**os.environ, **{name: str(home / name.lower()) for name in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME",
                                                                       "XDG_STATE_HOME")}}
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          env=env, stdin=subprocess.DEVNULL, timeout=300)


def damaged_trajectories(folder: Path, repo: Path) -> dict[str, tuple[Path, str]]:
    """Saved sessions damaged in several ways, each with what the error must say."""
    folder.mkdir(parents=True, exist_ok=True)
    start = ev.SessionStart(0.0, "abc", "fix it", str(repo), "replay", ["grep"]).to_json()
    lines = [start, *(e.to_json() for e in sample_events()[1:])]
    cases = {"middle": ("\n".join([*lines[:2], "{not json", *lines[2:]]) + "\n", ":3: invalid JSON"),
             "types": ("\n".join([*lines[:4], lines[4].replace('"step":1', '"step":"1"'), *lines[5:]]) + "\n",
                       ":5: bad tool_call event: wrong type for step"),
             "binary": (start + "\n\x00\xff garbage \x1b[2J\n" + lines[1] + "\n", ":2: "),
             "no-start": ("\n".join(lines[1:]) + "\n", "holds no session_start event")}
    made = {}
    for name, (text, says) in cases.items():
        path = folder / f"{name}.jsonl"
        path.write_bytes(text.encode("utf-8", errors="surrogateescape").replace(b"\xc3\xbf", b"\xff"))
        made[name] = (path, says)
    return made


@pytest.mark.parametrize("case", ["middle", "types", "binary", "no-start"])
def test_resuming_a_damaged_trajectory_says_which_line_and_exits_2(tmp_path: Path, case: str) -> None:
    repo = make_calc_repo(tmp_path)
    path, says = damaged_trajectories(tmp_path / "saved", repo)[case]
    result = tao_cli("run", "--resume", str(path), "--repo", str(repo), home=tmp_path)  # the TUI needs a terminal
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and f"tao: cannot resume {path}" in result.stderr, result.stderr
    assert says in result.stderr, result.stderr


def test_replaying_a_damaged_trajectory_says_which_line_and_exits_2(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    path, says = damaged_trajectories(tmp_path / "saved", repo)["middle"]
    result = tao_cli("run", "--headless", "--engine", "replay", "--replay", str(path), "--repo", str(repo),
                     home=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert f"{path}{says}" in result.stderr, result.stderr


async def test_the_tui_resume_of_a_damaged_trajectory_is_a_usage_error(isolated: Path) -> None:
    from tui.app import resolve_resume

    options = session_options(isolated)
    saved = damaged_trajectories(isolated / "xdg_state_home" / "tao" / "trajectories", options.repo)
    for path, says in saved.values():
        with pytest.raises(UsageError, match=re.escape(says)):
            resolve_resume(str(path), options.repo)
        with pytest.raises(UsageError, match=re.escape(says)):
            async with open_live_session(options, resume=path):
                pass
    os.mkfifo(saved["middle"][0].with_name("newest-fifo.jsonl"))  # neither it nor a broken link stops the search
    saved["middle"][0].with_name("newest-link.jsonl").symlink_to(isolated / "gone.jsonl")
    with pytest.raises(UsageError, match="cannot resume"):
        resolve_resume("last", options.repo)
