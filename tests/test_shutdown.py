"""SIGTERM ends Tao like Ctrl-C: `finally` blocks run and child processes are shut down, not orphaned.

The child below stands in for a Tao command holding vLLM's engine: a spawned helper process (vLLM's
engine core is one) that only the parent's `finally` stops.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from harness import cli
from tests.helpers import ROOT

HOLDER = """
import asyncio, multiprocessing, sys, time
from harness.shutdown import terminate_as_interrupt

def idle():
    time.sleep(600)

async def main():
    helper = multiprocessing.get_context("spawn").Process(target=idle)
    helper.start()
    try:
        print(helper.pid, flush=True)  # inside the try: a SIGTERM that follows it always reaches `finally`
        await asyncio.sleep(600)
    finally:
        helper.terminate()
        helper.join()
        print("closed", flush=True)

if __name__ == "__main__":
    if sys.argv[1] == "handled":
        terminate_as_interrupt()
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(130)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie waiting for its (gone) parent counts as gone
        return stat.read().split()[2] != "Z"


def run_and_terminate(tmp_path: Path, mode: str) -> tuple[int, str, int, bool]:
    """Start the holder, SIGTERM it once its helper runs: its exit code and output, the helper's pid and
    whether the helper outlived it by 2 s (then it is killed, so that no test leaves it behind)."""
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    proc = subprocess.Popen([sys.executable, str(script), mode], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout is not None
    helper = int(proc.stdout.readline())
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=60)
    deadline = time.monotonic() + 2
    while alive(helper) and time.monotonic() < deadline:
        time.sleep(0.1)
    orphaned = alive(helper)
    if orphaned:
        os.kill(helper, signal.SIGKILL)  # it holds the pipe open: the output ends only when it does
    return code, proc.stdout.read(), helper, orphaned


def test_sigterm_runs_finally_and_stops_the_helper(tmp_path: Path) -> None:
    code, out, _, orphaned = run_and_terminate(tmp_path, "handled")
    assert code == 130 and "closed" in out
    assert not orphaned


def test_without_it_the_helper_is_orphaned(tmp_path: Path) -> None:
    """The failure the handler exists for: Python's default SIGTERM skips `finally` and leaves the helper."""
    code, out, _, orphaned = run_and_terminate(tmp_path, "default")
    assert code == -signal.SIGTERM and "closed" not in out
    assert orphaned


def test_the_cli_installs_it(tmp_path: Path) -> None:
    before = signal.getsignal(signal.SIGTERM)
    try:
        assert cli.main(["traces", "stats", str(tmp_path)]) in (0, 1, 2)
        assert signal.getsignal(signal.SIGTERM) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_caller_with_its_own_argv_gets_the_code_back_after_vllm_was_loaded(monkeypatch) -> None:
    """A pytest process whose engine fixture started vLLM calls `main([...])` in-process: it must not end there."""
    from harness import shutdown

    monkeypatch.setattr(shutdown, "_heavy", True)  # as after the session's vllm_engine fixture started
    assert shutdown.exits_at_once(lambda argv: len(argv))(["traces", "stats"]) == 2
