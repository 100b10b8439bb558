"""Tools under a tree that changes while they run: nothing outside is ever read or written, and no FIFO
ever holds up the event loop.

A separate process swaps a directory and a symlink to outside (renameat2 RENAME_EXCHANGE) as fast as it
can while a tool reads or writes through that directory in a loop; a canary file outside must never show
up in an observation or change. The number of calls is bounded; nothing depends on timing.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from sandbox import Workspace, beneath
from tools import EditFile, Grep, ListFiles, Outline, ReadFile, WriteFile, run_tool

CALLS = 250  # calls per tool while the flipper runs

FLIPPER = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
a, b = (os.fsencode(p) for p in sys.argv[1:3])
print("ready", flush=True)
while True:
    if libc.renameat2(-100, a, -100, b, 2) != 0:  # AT_FDCWD, RENAME_EXCHANGE
        raise SystemExit(ctypes.get_errno())
"""


@pytest.fixture(params=[True, False], ids=["openat2", "walk"])
def lookup(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Run each test with openat2 and with the O_NOFOLLOW walk that stands in where openat2 is missing."""
    monkeypatch.setattr(beneath, "USE_OPENAT2", request.param)
    return bool(request.param)


class Tree:
    """ws/d (a real folder) and ws/alt (a symlink to ../outside), swapped by a flipper process."""

    def __init__(self, base: Path) -> None:
        self.canary = f"CANARY-{uuid.uuid4().hex}"
        self.root = base / "ws"
        self.outside = base / "outside"
        (self.root / "d").mkdir(parents=True)
        self.outside.mkdir()
        (self.root / "d" / "f.txt").write_text("inside\n")
        (self.root / "d" / "m.py").write_text("def inside():\n    pass\n")
        (self.outside / "f.txt").write_text(f"{self.canary}\n")
        (self.outside / "m.py").write_text(f"def {self.canary.replace('-', '_')}():\n    pass\n")
        (self.outside / "only-outside.txt").write_text(f"{self.canary}\n")
        (self.root / "alt").symlink_to("../outside")
        self.before = self.snapshot()

    def snapshot(self) -> dict[str, bytes]:
        return {path.name: path.read_bytes() for path in sorted(self.outside.iterdir())}

    @contextmanager
    def flipping(self) -> Iterator[None]:
        """Run the flipper process for the duration of a `with` block."""
        proc = subprocess.Popen([sys.executable, "-c", FLIPPER, str(self.root / "d"), str(self.root / "alt")],
                                stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
            yield
            assert proc.poll() is None, f"the flipper stopped early (errno {proc.returncode})"
        finally:
            proc.kill()
            proc.wait()
        if (self.root / "d").is_symlink():  # leave the tree as it was made
            libc = ctypes.CDLL(None, use_errno=True)
            assert libc.renameat2(-100, os.fsencode(self.root / "d"), -100, os.fsencode(self.root / "alt"), 2) == 0


READERS = [
    (ReadFile(), {"path": "d/f.txt"}),
    (Grep(), {"pattern": "CANARY|inside", "path": "d"}),
    (Grep(), {"pattern": "CANARY|inside", "path": "d/f.txt"}),
    (Grep(), {"pattern": "CANARY|inside"}),
    (Outline(), {"path": "d/m.py"}),
    (ListFiles(), {"path": "d"}),
    (Grep(use_rg=False), {"pattern": "CANARY|inside", "path": "d"}),
    (Grep(use_rg=False), {"pattern": "CANARY|inside", "path": "d/f.txt"}),
    (Grep(use_rg=False), {"pattern": "CANARY|inside"}),
]


@pytest.mark.parametrize(("tool", "args"), READERS, ids=["read_file", "rg-dir", "rg-file", "rg-all", "outline",
                                                          "list_files", "grep-dir", "grep-file", "grep-all"])
async def test_reads_never_leave_the_workspace(tmp_path, lookup, tool, args):
    tree = Tree(tmp_path)
    workspace = Workspace(tree.root)
    calm = await run_tool(tool, args, workspace)
    assert not calm.is_error and ("inside" in calm.text or "f.txt" in calm.text), calm.text  # works when quiet
    with tree.flipping():
        for _ in range(CALLS):
            obs = await run_tool(tool, args, workspace)
            assert tree.canary not in obs.text and "only-outside" not in obs.text, obs.text
            assert "CANARY_" not in obs.text and "bug in Tao" not in obs.text, obs.text
    assert tree.snapshot() == tree.before


async def test_writes_never_leave_the_workspace(tmp_path, lookup):
    tree = Tree(tmp_path)
    workspace = Workspace(tree.root)
    write, edit = WriteFile(), EditFile()
    with tree.flipping():
        for n in range(CALLS):
            obs = await run_tool(write, {"path": "d/new.txt", "content": f"written {n}\n"}, workspace)
            assert "bug in Tao" not in obs.text, obs.text
            old, new = ("inside", "INSIDE") if n % 2 else ("INSIDE", "inside")
            obs = await run_tool(edit, {"path": "d/f.txt", "old": old, "new": new}, workspace)
            assert "bug in Tao" not in obs.text, obs.text
            obs = await run_tool(write, {"path": "d/sub/deeper.txt", "content": "x\n"}, workspace)
            assert "bug in Tao" not in obs.text, obs.text
    assert tree.snapshot() == tree.before  # nothing changed, nothing created outside
    assert (tree.root / "d" / "new.txt").exists()  # writes did land, inside


# --- FIFOs: refused at once, never waited on, and the event loop keeps running --------------------------

class Ticker:
    """A coroutine that counts loop iterations: a call that blocks the loop leaves the count still."""

    def __init__(self) -> None:
        self.ticks = 0
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            self.ticks += 1
            await asyncio.sleep(0)

    def stop(self) -> None:
        self.task.cancel()


FIFO_CALLS = [
    (ReadFile(), {}),
    (Outline(), {}),
    (EditFile(), {"old": "a", "new": "b"}),
    (Grep(), {"pattern": "x"}),
    (Grep(use_rg=False), {"pattern": "x"}),
    (WriteFile(), {"content": "x"}),
]


@pytest.mark.parametrize(("tool", "extra"), FIFO_CALLS,
                         ids=["read_file", "outline", "edit_file", "grep-rg", "grep-python", "write_file"])
@pytest.mark.parametrize("name", ["pipe.py", "link-to-pipe.py"])
async def test_a_fifo_is_refused_while_the_loop_keeps_running(tmp_path, tool, extra, name):
    root = tmp_path / "ws"
    root.mkdir()
    os.mkfifo(root / "pipe.py")
    (root / "link-to-pipe.py").symlink_to("pipe.py")
    workspace = Workspace(root)
    ticker = Ticker()
    try:
        before = ticker.ticks
        obs = await run_tool(tool, {"path": name, **extra}, workspace)
        assert ticker.ticks > before  # the call gave the loop back while it worked
    finally:
        ticker.stop()
    assert obs.is_error and "not a regular file" in obs.text, obs.text


async def test_grep_skips_a_fifo_in_a_folder(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    os.mkfifo(root / "pipe.txt")
    (root / "a.txt").write_text("x marks\n")
    for tool in (Grep(), Grep(use_rg=False)):
        obs = await run_tool(tool, {"pattern": "x"}, Workspace(root))
        assert obs.text == "a.txt:1:x marks"


class FifoSwapper:
    """Threads that keep replacing `path` by a FIFO and back by a regular file, and that open any FIFO a
    reader is stuck on for writing (then close it), so a blocked reader wakes up with an empty read."""

    def __init__(self, path: Path, content: str) -> None:
        self.path, self.content = path, content
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._swap, daemon=True),
                        threading.Thread(target=self._unblock, daemon=True)]

    def __enter__(self) -> FifoSwapper:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()
        self.path.unlink(missing_ok=True)
        self.path.write_text(self.content)

    def _swap(self) -> None:
        temp = self.path.with_name(".swap")
        while not self.stop.is_set():
            os.mkfifo(temp)
            os.replace(temp, self.path)
            temp.write_text(self.content)
            os.replace(temp, self.path)

    def _unblock(self) -> None:
        while not self.stop.is_set():
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                assert exc.errno in (errno.ENXIO, errno.ENOENT, errno.EISDIR), exc
                continue
            os.close(fd)


@pytest.mark.parametrize(("tool", "extra"), [(ReadFile(), {}), (Grep(use_rg=False), {"pattern": "regular"}),
                                              (EditFile(), {"old": "regular", "new": "regular"})],
                         ids=["read_file", "grep-python", "edit_file"])
async def test_a_file_replaced_by_a_fifo_is_refused_not_waited_on(tmp_path, tool, extra):
    root = tmp_path / "ws"
    root.mkdir()
    (root / "f.py").write_text("regular\n")
    workspace = Workspace(root)
    if isinstance(tool, EditFile):
        extra = {"old": "regular", "new": "REGULAR"}
    with FifoSwapper(root / "f.py", "regular\n"):
        for _ in range(CALLS):
            ticker = Ticker()
            try:
                before = ticker.ticks
                obs = await run_tool(tool, {"path": "f.py", **extra}, workspace)
                assert ticker.ticks > before
            finally:
                ticker.stop()
            assert obs.is_error or "regular" in obs.text.lower() or "Edited" in obs.text, obs.text
            assert "empty" not in obs.text and "No matches" not in obs.text, obs.text
