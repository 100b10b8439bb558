"""Run one command through the sandbox stage (`enter.py`) and turn a failed setup back into an exception."""

from __future__ import annotations

import errno as errnos
import marshal
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sandbox.sandbox_errors import SetupFailed
from sandbox.process import DEFAULT_MAX_BYTES, ProcessResult, run_process

ENTER = Path(__file__).with_name("enter.py")
MARKER = b"\0tao-sandbox "

HINTS = {
    "unshare": "this kernel or container forbids new namespaces (try `unshare -Urm true`); "
    "the git-worktree or copy backend works without them",
    "userns-map": "writing the user namespace's uid map was refused",
    "proc": "a fresh /proc could not be mounted",
    "loopback": "the loopback interface of the private network could not be brought up",
    "world": "the throwaway layer over the real file system (a tmpfs and an overlay of /) could not be mounted",
    "pivot": "the sandbox could not switch to its own root (pivot_root)",
    "inner-userns": "the command's own user namespace could not be made or mapped",
    "net": "the command's private network namespace could not be made",
    "seccomp": "the system call filter could not be installed",
    "drop-caps": "the command's capabilities could not be cut down",
    "pdeathsig": "the sandbox could not tie its life to Tao's",
}


def stage_argv(spec: Mapping[str, Any], argv: Sequence[str]) -> list[str]:
    """The command line that runs `argv` inside the sandbox described by `spec`."""
    if not argv:
        raise ValueError("an empty command cannot be run; pass the program and its arguments")
    return [sys.executable, "-I", "-S", str(ENTER), marshal.dumps(dict(spec)).hex(), "--", *argv]


def failure(result: ProcessResult) -> dict[str, Any] | None:
    """The stage's failure report, if the run failed before the command started."""
    if result.exit_code not in (125, 126, 127):
        return None
    at = result.output.find(MARKER)
    if at < 0:
        return None
    line = result.output[at + len(MARKER):].split(b"\n", 1)[0]
    try:
        report = marshal.loads(bytes.fromhex(line.decode("ascii")))
    except (ValueError, EOFError, TypeError, UnicodeDecodeError):
        return None
    return report if isinstance(report, dict) else None


def raise_for(report: Mapping[str, Any], argv: Sequence[str]) -> None:
    """Raise what a plain subprocess would (FileNotFoundError, PermissionError) or SetupFailed."""
    err = int(report.get("errno") or 0)
    if report.get("kind") == "exec":
        raise OSError(err or errnos.ENOENT, os.strerror(err or errnos.ENOENT), argv[0])
    step = str(report.get("step", "?"))
    hint = HINTS.get(step, "")
    if step.startswith("mount:"):
        hint = (f"mounting {step[6:]} failed; run `tao sandbox check` to see which backend works here, "
                "or choose another with backend=...")
    detail = report.get("detail") or ""
    raise SetupFailed(
        f"sandbox setup failed at step {step!r}: {report.get('error') or 'error'}"
        f"{f' ({detail})' if detail else ''}; {hint or 'run `tao sandbox check` for details'}",
        step=step,
        errno=err,
    )


def _read_report(read_end: int) -> dict[str, Any] | None:
    """The report the stage wrote when its command ended, if it did (never waits: a killed stage wrote none)."""
    os.set_blocking(read_end, False)
    chunks = []
    while True:
        try:
            chunk = os.read(read_end, 1 << 16)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    try:
        found = marshal.loads(b"".join(chunks)) if chunks else None
    except (ValueError, EOFError, TypeError):
        return None
    return found if isinstance(found, dict) else None


async def run_in_sandbox(
    spec: Mapping[str, Any],
    argv: Sequence[str],
    *,
    timeout: float | None,
    env: Mapping[str, str] | None,
    stdin: bytes | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    on_start: Callable[[int], None] | None = None,
    on_report: Callable[[dict[str, Any]], None] | None = None,
    watch: Sequence[bytes] = (),
) -> ProcessResult:
    """Run `argv` in the sandbox; raises SetupFailed, or OSError when the program cannot be executed.

    `on_report` receives the stage's report once the command ended (see `sandbox/enter.py`): the CPU
    seconds of the whole tree (`cpu`), and from the sandbox's pid 1 (`reported` true) the command's wait
    status, limit signals seen, peak RSS, writes outside the workspace and network counters. A run killed
    on timeout or cancel reports nothing."""
    read_end, write_end = os.pipe() if on_report is not None else (None, None)
    if write_end is not None:
        spec = {**spec, "report_fd": write_end}
    try:
        try:
            result = await run_process(stage_argv(spec, argv), Path(spec.get("cwd") or "/"), timeout=timeout,
                                       env=env, stdin=stdin, max_bytes=max_bytes, on_start=on_start,
                                       pass_fds=(write_end,) if write_end is not None else (), watch=watch)
        finally:
            if write_end is not None:
                os.close(write_end)  # ours: the stage has its own copy
        if read_end is not None and on_report is not None and (found := _read_report(read_end)) is not None:
            on_report(found)
    finally:
        if read_end is not None:
            os.close(read_end)
    if (report := failure(result)) is not None:
        raise_for(report, argv)
    return result
