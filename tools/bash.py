"""bash: one persistent interactive shell per session, behind a pty (pexpect).

Each command is written to a script and run as `source SCRIPT < /dev/null > OUT 2>&1; printf MARKER $?`,
so multi-line commands, heredocs and quoting work, output never goes through the pty, and the shell's
cwd, variables and functions persist between calls. Job control is on (interactive bash), so every
foreground pipeline has its own process group: on timeout the shell is sent SIGINT (which aborts the
rest of the command list), the foreground group is killed, and the shell is re-synced with a fresh
marker. A shell that does not answer is killed with everything in its session and replaced.

The scripts and outputs live in a scratch folder under the temp dir whose name records its owner
(pid, start time, pid namespace); starting a shell sweeps the folders of owners that are gone.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import shlex
import shutil
import signal
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pexpect

from sandbox import WorkspaceView
from tools.base import Effect, Observation, ToolError, observe

DEFAULT_BASH_TIMEOUT = 120.0
OUTPUT_CAP_BYTES = 2 * 1024 * 1024  # head and tail of a command's output kept when it is larger
_START_TIMEOUT = 10.0
_RESYNC_WAITS = (0.25, 0.5, 1.0, 1.5)  # seconds to wait for the shell to answer each re-sync attempt
_POLL = 0.25  # how often a waiting command checks whether its call was cancelled
_SCRATCH_PREFIX = "tao-bash-"  # then "<pid>.<start time>.<pid namespace>-" of the owner, then random
_SCRATCH_OWNER = re.compile(r"tao-bash-(?P<pid>\d+)\.(?P<start>\d+)\.(?P<ns>\d+)-")


@dataclass(frozen=True)
class Outcome:
    """What one command did. `status`: done, exited (the shell ended), timeout_kept, timeout_restarted."""

    status: str
    exit_code: int | None
    output: bytes
    dropped_bytes: int


def _shell_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(TERM="dumb", PAGER="cat", GIT_PAGER="cat", PS1="", PS2="", PROMPT_COMMAND="",
               GIT_TERMINAL_PROMPT="0")
    return env


def _marker_command(nonce: str, status: str) -> str:
    # The marker is split in the command text (`%s`), so the command itself can never match it.
    return f"printf '__TAO_%s_%s__\\n' {nonce} \"{status}\""


def _marker(nonce_regex: str) -> re.Pattern[bytes]:
    return re.compile(rb"__TAO_" + nonce_regex.encode() + rb"_(\d+)__")


class Shell:
    """An interactive bash in `root`; blocking methods, to be called from a worker thread."""

    def __init__(self, root: Path) -> None:
        self.root = root
        sweep_scratch()
        pid, start, namespace = scratch_owner()
        # The owner is in the name from the first instant, so a crash at any point leaves it sweepable.
        self.scratch = Path(tempfile.mkdtemp(prefix=f"{_SCRATCH_PREFIX}{pid}.{start}.{namespace}-"))
        self.count = 0
        self.cancelled = threading.Event()
        bash = shutil.which("bash") or "/bin/bash"
        self.child = pexpect.spawn(bash, ["--norc", "--noprofile", "--noediting", "-i"], cwd=str(root),
                                   env=_shell_env(), echo=False, encoding=None, dimensions=(50, 200),
                                   preexec_fn=_default_interrupt_signals)
        nonce = secrets.token_hex(6)
        self.child.sendline("PS1=''; PS2=''; PROMPT_COMMAND=''; unset HISTFILE; set +o history; set +H; "
                            + _marker_command(nonce, "0"))
        if self.child.expect([_marker(nonce), pexpect.EOF, pexpect.TIMEOUT], timeout=_START_TIMEOUT) != 0:
            self.close()
            raise ToolError("could not start bash (no answer from the shell); try again")

    @property
    def pid(self) -> int:
        return self.child.pid

    def alive(self) -> bool:
        return self.child.isalive()

    def run(self, command: str, timeout: float) -> Outcome:
        self.cancelled.clear()
        self.count += 1
        script = self.scratch / f"cmd{self.count}.sh"
        out = self.scratch / f"out{self.count}.txt"
        script.write_text(command if command.endswith("\n") else command + "\n", encoding="utf-8", errors="replace")
        nonce = secrets.token_hex(6)
        self.child.sendline(f"source {shlex.quote(str(script))} < /dev/null > {shlex.quote(str(out))} 2>&1; "
                            + _marker_command(nonce, "$?"))
        index = self._wait_for(_marker(nonce), timeout)
        if index == 0:
            status, code = "done", int(self.child.match.group(1))
        elif index == 1:
            self.child.close()
            status, code = "exited", self.child.exitstatus
        else:
            status, code = ("timeout_kept" if self._resync() else "timeout_restarted"), None
        output, dropped = _read_bounded(out, OUTPUT_CAP_BYTES)
        # bash names the sourced script in its messages; say it as `bash -c` would.
        output = output.replace(f"{script}: ".encode(), b"")
        script.unlink(missing_ok=True)
        out.unlink(missing_ok=True)
        return Outcome(status, code, output, dropped)

    def _wait_for(self, marker: re.Pattern[bytes], timeout: float) -> int:
        """0: the marker came, 1: the shell ended, 2: timed out or cancelled. Polls so cancel() is seen."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.cancelled.is_set():
                return 2
            index = self.child.expect([marker, pexpect.EOF, pexpect.TIMEOUT], timeout=min(_POLL, remaining))
            if index != 2:
                return index

    def cancel(self) -> None:
        """Make the running command stop as if it had timed out (thread-safe)."""
        self.cancelled.set()

    def interrupt(self) -> None:
        """SIGINT the shell (abandon the command list) and SIGKILL its foreground process group."""
        try:
            foreground = os.tcgetpgrp(self.child.child_fd)
        except OSError:
            foreground = -1
        try:
            os.kill(self.child.pid, signal.SIGINT)
        except ProcessLookupError:
            return
        if foreground > 0 and foreground != self.child.pid:
            try:
                os.killpg(foreground, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def _resync(self) -> bool:
        """After a timeout: interrupt, then ask for a fresh marker until the shell answers (or give up)."""
        base = secrets.token_hex(6)
        answer = _marker(base + r"r\d+")
        for attempt, wait in enumerate(_RESYNC_WAITS):
            self.interrupt()
            time.sleep(0.05)
            self.child.sendintr()  # ^C also flushes pending input, so the marker is sent after it
            time.sleep(0.05)
            self.child.sendline(_marker_command(f"{base}r{attempt}", "0"))
            index = self.child.expect([answer, pexpect.EOF, pexpect.TIMEOUT], timeout=wait)
            if index == 0:
                return True
            if index == 1:
                return False
        return False

    def close(self) -> None:
        """Kill the shell and everything left in its session (background jobs too); remove the scratch."""
        _kill_session(self.child.pid)
        self.child.close(force=True)
        shutil.rmtree(self.scratch, ignore_errors=True)


def _default_interrupt_signals() -> None:
    """In the shell's child, before exec: SIGINT and SIGQUIT back to their defaults.

    A Tao started with them ignored (`nohup`, `cmd &` in a script) would hand that on, and then the
    interrupt that stops a timed-out command could not reach it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def scratch_owner(pid: int | None = None) -> tuple[int, int, int]:
    """(pid, start time in clock ticks since boot, pid namespace inode) of a process (default: this one).

    A pid alone can be reused; with its start time it names one process. Raises OSError if it is gone."""
    pid = os.getpid() if pid is None else pid
    with open(f"/proc/{pid}/stat", "rb") as handle:
        start = int(handle.read().rsplit(b")", 1)[1].split()[19])  # field 22, counted after the name
    return pid, start, os.stat("/proc/self/ns/pid").st_ino


def sweep_scratch() -> None:
    """Remove the scratch folders of bash tools whose owner process is gone (after a crash, say).

    Only folders that name their owner are judged, and only from the same pid namespace; a live
    owner's folder is never touched."""
    try:
        _, _, namespace = scratch_owner()
        entries = list(os.scandir(tempfile.gettempdir()))
    except OSError:
        return
    for entry in entries:
        owner = _SCRATCH_OWNER.match(entry.name)
        if owner is None or int(owner["ns"]) != namespace or not entry.is_dir(follow_symlinks=False):
            continue
        try:
            alive = scratch_owner(int(owner["pid"]))[1] == int(owner["start"])
        except (OSError, IndexError, ValueError):
            alive = False
        if not alive:
            shutil.rmtree(entry.path, ignore_errors=True)


def _kill_session(sid: int) -> None:
    """SIGKILL every process whose session is `sid` (the shell is its session's leader)."""
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
            if int(fields[3]) == sid:  # after the name: state, ppid, pgrp, session
                os.kill(int(entry), signal.SIGKILL)
        except (OSError, IndexError, ValueError):
            continue


def _read_bounded(path: Path, cap: int) -> tuple[bytes, int]:
    """The file's bytes, or its head and tail when larger than `cap`, and how many bytes were left out."""
    try:
        with path.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size <= cap:
                return handle.read(), 0
            head = handle.read(cap // 2)
            handle.seek(size - cap // 2)
            return head + handle.read(cap // 2), size - 2 * (cap // 2)
    except FileNotFoundError:
        return b"", 0


class Bash:
    """A persistent bash session: cwd, variables and functions carry over from one call to the next."""

    name = "bash"
    description = (
        "Run a command in a persistent bash shell in the workspace (cwd, variables and functions persist "
        "between calls); returns its combined stdout and stderr and the exit code. No interactive programs."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"command": {"type": "string", "description": "The shell command(s) to run."}},
        "required": ["command"],
        "additionalProperties": False,
    }
    effect = Effect.MUTATING
    timeout_grace = 30.0  # it stops its own command at `timeout`; run_tool waits this much longer

    def __init__(self, timeout: float = DEFAULT_BASH_TIMEOUT) -> None:
        self.timeout = timeout
        self._shell: Shell | None = None
        self._lock = threading.Lock()  # one command at a time, even if an awaiting task was cancelled
        # A thread of its own, so a long command never holds up the loop's shared to_thread pool.
        self._worker: ThreadPoolExecutor | None = None

    async def run(self, args: dict[str, Any], workspace: WorkspaceView) -> Observation:
        command: str = args["command"]
        if not command.strip():
            raise ToolError("command is empty; pass the shell command to run, e.g. 'ls -la'")
        try:
            if self._worker is None:
                self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tao-bash")
            loop = asyncio.get_running_loop()
            outcome = await loop.run_in_executor(self._worker, self._run_blocking, command, workspace.root)
        except asyncio.CancelledError:
            shell = self._shell
            if shell is not None:
                shell.cancel()  # the worker thread interrupts the command and re-syncs at once
            raise
        return self._observe(outcome)

    def _run_blocking(self, command: str, root: Path) -> Outcome:
        with self._lock:
            if self._shell is not None and (self._shell.root != root or not self._shell.alive()):
                self._shell.close()
                self._shell = None
            if self._shell is None:
                self._shell = Shell(root)
            outcome = self._shell.run(command, self.timeout)
            if outcome.status in ("exited", "timeout_restarted"):
                self._shell.close()
                self._shell = None
            return outcome

    def _observe(self, outcome: Outcome) -> Observation:
        text = outcome.output.decode("utf-8", errors="replace").removesuffix("\n")
        limit = f"{self.timeout:g}"
        note = {
            "timeout_kept": f"[timed out after {limit} s; process group killed; shell state kept]",
            "timeout_restarted": f"[timed out after {limit} s; the shell did not respond, so it was killed; "
                                 "the shell was restarted, cwd and environment reset]",
            "exited": f"[the shell exited with code {outcome.exit_code}; the next command runs in a new shell "
                      "in the workspace root, cwd and environment reset]",
        }.get(outcome.status, f"[exit code {outcome.exit_code}]" if outcome.exit_code else "")
        if note:
            text = f"{text}\n{note}" if text else note
        elif not text:
            text = "(no output)"
        timed_out = outcome.status.startswith("timeout")
        return observe(text, is_error=timed_out, exit_code=outcome.exit_code, extra_cut=outcome.dropped_bytes,
                       timed_out=timed_out, shell_restarted=outcome.status in ("exited", "timeout_restarted"))

    def close(self) -> None:
        """Kill the shell (and its background jobs); a later call starts a new one."""
        shell = self._shell
        if shell is not None:
            _kill_session(shell.pid)  # a command still running ends at once, so the lock frees quickly
        with self._lock:
            if self._shell is not None:
                self._shell.close()
                self._shell = None
        if self._worker is not None:
            self._worker.shutdown(wait=False)
            self._worker = None
