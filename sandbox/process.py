"""Run one command as a subprocess in its own process group, with a timeout that kills the whole group.

Output is captured as combined stdout+stderr, bounded in memory: past `max_bytes` the middle is dropped
and the number of dropped bytes is reported, so a runaway test suite cannot exhaust memory. Words asked
for in `watch` are looked for in the whole stream, dropped middle included.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MAX_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class ProcessResult:
    """What a finished (or killed) command produced."""

    exit_code: int | None  # None when the command was killed (timeout or cancel)
    output: bytes  # combined stdout and stderr, head and tail kept when over the bound
    dropped_bytes: int  # bytes cut from the middle of the output
    timed_out: bool
    duration: float  # seconds; a timing field, never shown to the model
    seen: frozenset[bytes] = frozenset()  # the `watch` words that occurred anywhere in the output

    @property
    def text(self) -> str:
        """The output decoded as UTF-8, undecodable bytes replaced."""
        return self.output.decode("utf-8", errors="replace")


class BoundedBuffer:
    """Keeps the first and last `max_bytes // 2` bytes of a stream and counts what it dropped."""

    def __init__(self, max_bytes: int, watch: Sequence[bytes] = ()) -> None:
        self.half = max(1, max_bytes // 2)
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0
        self.watch = tuple(watch)
        self.seen: set[bytes] = set()
        self.edge = b""  # the end of the previous chunk, so a word split across two chunks is found
        self.overlap = max((len(w) for w in self.watch), default=1) - 1

    def look(self, chunk: bytes) -> None:
        """Note every watched word in this chunk (or across its start)."""
        if not self.watch:
            return
        window = self.edge + chunk
        self.seen.update(w for w in self.watch if w not in self.seen and w in window)
        self.edge = window[-self.overlap:] if self.overlap else b""

    def add(self, chunk: bytes) -> None:
        """Keep a chunk in the head until it is full, then in the tail, dropping the oldest tail bytes."""
        self.look(chunk)
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if not chunk:
            return
        self.tail += chunk
        if len(self.tail) > self.half:
            excess = len(self.tail) - self.half
            del self.tail[:excess]
            self.dropped += excess

    def value(self) -> bytes:
        """Head and tail, joined."""
        return bytes(self.head + self.tail)


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    """Signal a whole process group, ignoring a group that is already gone."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


async def run_process(
    argv: Sequence[str],
    cwd: Path,
    *,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    on_start: Callable[[int], None] | None = None,
    pass_fds: Sequence[int] = (),
    watch: Sequence[bytes] = (),
) -> ProcessResult:
    """Run `argv` in `cwd` in a new session (own process group); kill the group on timeout or cancel.

    `on_start` receives the leader's pid (also the session and group id) once the process exists;
    `pass_fds` stay open in the child; the words of `watch` found in the output are in `seen`."""
    start = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=str(cwd),
        env=dict(env) if env is not None else None,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
        pass_fds=tuple(pass_fds),
    )
    if on_start is not None:
        on_start(proc.pid)
    buffer = BoundedBuffer(max_bytes, watch)

    async def feed() -> None:
        """Write stdin and close it."""
        assert proc.stdin is not None
        try:
            proc.stdin.write(stdin or b"")
            await proc.stdin.drain()
            proc.stdin.close()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the command exited without reading all of its input

    async def pump() -> None:
        """Read the output to its end, then wait for the process."""
        # Feed stdin while reading stdout: writing it all first deadlocks once both pipes are full.
        feeder = asyncio.ensure_future(feed()) if stdin is not None else None
        try:
            assert proc.stdout is not None
            while chunk := await proc.stdout.read(65536):
                buffer.add(chunk)
            if feeder is not None:
                await feeder
        finally:
            if feeder is not None and not feeder.done():
                feeder.cancel()
        await proc.wait()

    timed_out = False
    try:
        await asyncio.wait_for(pump(), timeout)
    except TimeoutError:
        timed_out = True
        kill_group(proc.pid)
        await proc.wait()
    except BaseException:
        kill_group(proc.pid)
        await proc.wait()
        raise
    # Children that outlived the leader (daemons, stray background jobs) go with the group.
    kill_group(proc.pid)
    return ProcessResult(
        exit_code=None if timed_out else proc.returncode,
        output=buffer.value(),
        dropped_bytes=buffer.dropped,
        timed_out=timed_out,
        duration=time.monotonic() - start,
        seen=frozenset(buffer.seen),
    )


def _session_stats(sid: int) -> list[tuple[int, list[bytes]]]:
    """The /proc/PID/stat fields after the name (state, ppid, pgrp, session, ...) of every live process of
    session `sid` (everything a command started, however deep)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid:
            found.append((int(entry), fields))
    return found


def session_pids(sid: int) -> list[int]:
    """Every live process of session `sid`."""
    return [pid for pid, _ in _session_stats(sid)]


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def session_cpu(sid: int) -> float:
    """CPU seconds (user and system) used so far by the live processes of session `sid`, counting the
    children they have already reaped (each process's utime, stime, cutime and cstime)."""
    ticks = sum(int(value) for _, fields in _session_stats(sid) for value in fields[11:15])
    return ticks / CLOCK_TICKS


def renice_session(sid: int, nice: int) -> bool:
    """Set the nice value (and autogroup nice) of a whole session; False where that is not allowed.

    Lowering a nice value needs CAP_SYS_NICE (root): a normal user's speculations stay niced."""
    done = False
    for pid in session_pids(sid):
        try:
            os.setpriority(os.PRIO_PROCESS, pid, nice)
            done = True
        except OSError:
            continue
    try:
        with open(f"/proc/{sid}/autogroup", "w") as handle:
            handle.write(str(nice))
    except OSError:
        pass
    return done
