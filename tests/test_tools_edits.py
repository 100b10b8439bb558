"""edit_file and write_file place content atomically, keep mode and owner, and refuse stale edits.

Finding 6 of issue 21: edits lost concurrent appends and were not atomic; an edit went ahead on a file
changed since the model last read it.
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

from harness.engine.recorded import ReplayEngine, Recording, Turn
from harness.events import ToolResult
from harness.session import Session, SessionConfig
from sandbox import Workspace
from sandbox.beneath import locate
from tools import EditFile, ReadFile, WriteFile, default_tools, run_tool
from tools.placing import Changed, place
from tools.textfile import locate_text


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.py").write_text("x = 1\ny = 2\n")
    return Workspace(root)


def deliver(workspace: Workspace, obs) -> None:  # type: ignore[no-untyped-def]
    """What Session.answer (harness.acting) does with an observation the model is shown."""
    workspace.note_seen(obs.data.get("path"), obs.data.get("digest"))


# --- changed since the model last read it ---------------------------------------------------------------

async def test_an_edit_of_a_file_changed_since_read_is_refused(ws):
    deliver(ws, await run_tool(ReadFile(), {"path": "a.py"}, ws))
    with open(ws.root / "a.py", "a") as handle:  # a command, or the user, appends behind Tao's back
        handle.write("z = 3\n")
    obs = await run_tool(EditFile(), {"path": "a.py", "old": "x = 1", "new": "x = 10"}, ws)
    assert obs.is_error
    assert "a.py changed since you last read it (by a command or outside Tao); read_file it again" in obs.text
    assert (ws.root / "a.py").read_text() == "x = 1\ny = 2\nz = 3\n"  # nothing lost, nothing written
    deliver(ws, await run_tool(ReadFile(), {"path": "./a.py", "start_line": 2}, ws))  # any part counts
    again = await run_tool(EditFile(), {"path": "a.py", "old": "x = 1", "new": "x = 10"}, ws)
    assert not again.is_error, again.text
    assert (ws.root / "a.py").read_text() == "x = 10\ny = 2\nz = 3\n"


async def test_a_file_never_read_may_be_edited(ws):
    (ws.root / "a.py").write_text("x = 1\n")
    obs = await run_tool(EditFile(), {"path": "a.py", "old": "x = 1", "new": "x = 2"}, ws)
    assert not obs.is_error


async def test_own_edits_and_writes_count_as_seen(ws):
    deliver(ws, await run_tool(ReadFile(), {"path": "a.py"}, ws))
    deliver(ws, await run_tool(EditFile(), {"path": "a.py", "old": "x = 1", "new": "x = 5"}, ws))
    second = await run_tool(EditFile(), {"path": "a.py", "old": "y = 2", "new": "y = 6"}, ws)
    assert not second.is_error, second.text
    deliver(ws, second)
    deliver(ws, await run_tool(WriteFile(), {"path": "a.py", "content": "fresh\n"}, ws))
    third = await run_tool(EditFile(), {"path": "a.py", "old": "fresh", "new": "new"}, ws)
    assert not third.is_error, third.text


async def test_a_symlinked_spelling_shares_the_record(ws):
    (ws.root / "link.py").symlink_to("a.py")
    deliver(ws, await run_tool(ReadFile(), {"path": "link.py"}, ws))
    (ws.root / "a.py").write_text("x = 1\ny = 3\n")
    obs = await run_tool(EditFile(), {"path": "a.py", "old": "x = 1", "new": "x = 0"}, ws)
    assert obs.is_error and "changed since you last read it" in obs.text


async def test_running_a_read_is_not_seeing_it(ws):
    """Speculation runs read_file ahead of the model: only a delivered observation is recorded."""
    await run_tool(ReadFile(), {"path": "a.py"}, ws)
    assert ws.seen("a.py") is None
    (ws.root / "a.py").write_text("x = 1\ny = 9\n")
    assert not (await run_tool(EditFile(), {"path": "a.py", "old": "y = 9", "new": "y = 0"}, ws)).is_error


async def test_a_session_records_what_it_delivered(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    (root / "a.py").write_text("x = 1\n")
    calls = [
        ("read_file", {"path": "a.py"}),
        ("bash", {"command": "echo 'y = 2' >> a.py"}),
        ("edit_file", {"path": "a.py", "old": "x = 1", "new": "x = 3"}),
        ("read_file", {"path": "a.py"}),
        ("edit_file", {"path": "a.py", "old": "x = 1", "new": "x = 3"}),
        ("finish", {"summary": "done"}),
    ]
    import json

    turns = [Turn(f'<tool_call>{json.dumps({"name": name, "arguments": args})}</tool_call>') for name, args in calls]
    events: list = []
    tools = default_tools(bash_timeout=10)
    try:
        session = Session("edit", ReplayEngine(Recording(turns)), Workspace(root), tools, SessionConfig(),
                          [events.append])
        end = await session.run()
    finally:
        for tool in tools:
            if hasattr(tool, "close"):
                tool.close()
    assert end.status == "finished", end.reason
    results = [event for event in events if isinstance(event, ToolResult)]
    assert [r.name for r in results] == ["read_file", "bash", "edit_file", "read_file", "edit_file"]
    assert results[2].is_error and "changed since you last read it" in results[2].output
    assert not results[4].is_error, results[4].output
    assert (root / "a.py").read_text() == "x = 3\ny = 2\n"


# --- changed while editing, atomic placement -------------------------------------------------------------

def test_a_change_between_read_and_placement_is_refused(ws):
    file, spot = locate_text(ws, "a.py")
    with spot:
        with open(ws.root / "a.py", "a") as handle:  # lands after the read, before the rename
            handle.write("z = 3\n")
        with pytest.raises(Changed, match="a.py changed while it was being written"):
            place(spot, b"replaced\n", before=file.stat, spelling="a.py")
    assert (ws.root / "a.py").read_text() == "x = 1\ny = 2\nz = 3\n"
    assert sorted(os.listdir(ws.root)) == ["a.py"]  # no temporary file left behind


async def test_readers_never_see_half_an_edit(ws):
    """A reader sees the whole file before an edit or the whole file after it, never a part of either."""
    path = ws.root / "big.txt"
    block = "".join(f"line {n:06d} {'x' * 60}\n" for n in range(20_000))  # about 1.4 MB
    path.write_text("TOKEN-A\n" + block)
    whole = {len("TOKEN-A\n" + block)}
    torn: list[int] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            data = path.read_bytes()
            if len(data) not in whole or not data.endswith(b"\n"):
                torn.append(len(data))

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for n in range(30):
            old, new = ("TOKEN-A", "TOKEN-B") if n % 2 == 0 else ("TOKEN-B", "TOKEN-A")
            obs = await run_tool(EditFile(), {"path": "big.txt", "old": old, "new": new}, ws)
            assert not obs.is_error, obs.text
    finally:
        stop.set()
        thread.join()
    assert torn == []


async def test_edit_keeps_mode_and_owner(ws):
    path = ws.root / "run.sh"
    path.write_text("echo hi\n")
    path.chmod(0o751)
    if os.geteuid() == 0:
        os.chown(path, 1234, 5678)
    obs = await run_tool(EditFile(), {"path": "run.sh", "old": "hi", "new": "ho"}, ws)
    assert not obs.is_error, obs.text
    info = path.stat()
    assert info.st_mode & 0o7777 == 0o751
    if os.geteuid() == 0:
        assert (info.st_uid, info.st_gid) == (1234, 5678)
    written = await run_tool(WriteFile(), {"path": "run.sh", "content": "echo again\n"}, ws)
    assert not written.is_error
    assert path.stat().st_mode & 0o7777 == 0o751


async def test_a_hard_linked_file_is_written_in_place(ws):
    """Every link sees the edit (as before); the file is checked unchanged first all the same."""
    outside_link = ws.root.parent / "twin.py"
    os.link(ws.root / "a.py", outside_link)
    inode = (ws.root / "a.py").stat().st_ino
    obs = await run_tool(EditFile(), {"path": "a.py", "old": "x = 1", "new": "x = 7"}, ws)
    assert not obs.is_error, obs.text
    assert (ws.root / "a.py").stat().st_ino == inode
    assert outside_link.read_text() == "x = 7\ny = 2\n"
    file, spot = locate_text(ws, "a.py")
    with spot:
        outside_link.write_text("x = 7\ny = 2\nextra\n")
        with pytest.raises(Changed):
            place(spot, b"other\n", before=file.stat, spelling="a.py")
    assert outside_link.read_text() == "x = 7\ny = 2\nextra\n"


async def test_write_file_creates_with_the_usual_mode(ws):
    obs = await run_tool(WriteFile(), {"path": "new/dir/f.txt", "content": "hello\n"}, ws)
    assert not obs.is_error
    umask = os.umask(0o022)
    os.umask(umask)
    assert (ws.root / "new/dir/f.txt").stat().st_mode & 0o777 == 0o666 & ~umask
    assert sorted(os.listdir(ws.root / "new/dir")) == ["f.txt"]


async def test_write_file_through_an_inside_symlink_replaces_the_target(ws):
    (ws.root / "link.py").symlink_to("a.py")
    obs = await run_tool(WriteFile(), {"path": "link.py", "content": "new\n"}, ws)
    assert obs.text == "Overwrote a.py (4 bytes, 1 line)."
    assert (ws.root / "link.py").is_symlink() and (ws.root / "a.py").read_text() == "new\n"


def test_a_spot_for_a_new_file_in_new_folders(ws):
    with locate(ws.root, "p/q/r.txt", make_dirs=True) as spot:
        place(spot, b"data", before=None, spelling="p/q/r.txt")
    assert (ws.root / "p/q/r.txt").read_bytes() == b"data"


async def test_edits_run_off_the_event_loop(ws):
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    ticker = asyncio.ensure_future(tick())
    try:
        for tool, args in [(EditFile(), {"path": "a.py", "old": "x = 1", "new": "x = 2"}),
                           (WriteFile(), {"path": "b.py", "content": "b\n"})]:
            before = ticks
            assert not (await run_tool(tool, args, ws)).is_error
            assert ticks > before
    finally:
        ticker.cancel()
