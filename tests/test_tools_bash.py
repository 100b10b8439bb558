"""The persistent bash tool with a real shell: state, quoting, timeouts, restarts, big outputs, cleanup."""

from __future__ import annotations

import asyncio
import shlex
import signal
import sys
import time
from pathlib import Path

import pytest

from sandbox import Workspace
from tools import Bash, run_tool


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    (root / "sub").mkdir(parents=True)
    return Workspace(root)


@pytest.fixture
def bash():
    tool = Bash(timeout=1)
    yield tool
    tool.close()


async def sh(tool: Bash, ws: Workspace, command: str):
    return await run_tool(tool, {"command": command}, ws)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def dies(pid: int, patience: float = 10.0) -> bool:
    """True once the process is gone (SIGKILL lands asynchronously, so allow a moment)."""
    deadline = time.monotonic() + patience
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


async def test_state_persists_between_calls(bash, ws):
    first = await sh(bash, ws, "cd sub && export GREETING=hi && shout() { echo \"$1!\"; }")
    assert first.text == "(no output)" and first.exit_code == 0
    second = await sh(bash, ws, "pwd; echo $GREETING; shout hey")
    assert second.text == f"{ws.root}/sub\nhi\nhey!"


async def test_multiline_heredoc_and_quoting(bash, ws):
    command = "x='single \"quoted\"'\ncat <<'EOF'\nliteral $x `not run`\nEOF\nfor i in 1 2; do\n  echo \"$i: $x\"\ndone"
    obs = await sh(bash, ws, command)
    assert obs.text == "literal $x `not run`\n1: single \"quoted\"\n2: single \"quoted\""


async def test_exit_code_and_stderr(bash, ws):
    obs = await sh(bash, ws, "echo out; echo err >&2; false")
    assert obs.exit_code == 1 and not obs.is_error
    assert obs.text == "out\nerr\n[exit code 1]"
    missing = await sh(bash, ws, "no-such-command-xyz")
    assert missing.exit_code == 127 and "no-such-command-xyz: command not found" in missing.text
    syntax = await sh(bash, ws, "if true; then")
    assert syntax.exit_code == 2 and "syntax error" in syntax.text and "tao-bash" not in syntax.text


async def test_stdin_is_empty_and_output_lookalikes_are_harmless(bash, ws):
    obs = await sh(bash, ws, "read -r line; echo \"[$line]\"; cat; echo __TAO_deadbeef_0__")
    assert obs.text == "[]\n__TAO_deadbeef_0__" and obs.exit_code == 0


async def test_environment_is_non_interactive_friendly(bash, ws):
    obs = await sh(bash, ws, "echo $TERM $PAGER $GIT_PAGER; "
                             "[[ $- == *i* ]] && echo interactive; [[ $- == *m* ]] && echo jobs")
    assert obs.text == "dumb cat cat\ninteractive\njobs"


async def test_timeout_kills_the_command_and_keeps_the_shell(bash, ws):
    await sh(bash, ws, "cd sub; MARK=kept")
    obs = await sh(bash, ws, "echo started; sleep 100; echo never")
    assert obs.is_error and obs.exit_code is None and obs.data["timed_out"]
    assert obs.text.startswith("started\n")
    assert obs.text.endswith("[timed out after 1 s; process group killed; shell state kept]")
    assert "never" not in obs.text
    after = await sh(bash, ws, "pwd; echo $MARK")
    assert after.text == f"{ws.root}/sub\nkept" and after.exit_code == 0


async def test_commands_get_default_sigint_when_tao_was_started_with_it_ignored(ws):
    """`nohup tao ...` or `tao ... &` in a script starts Tao with SIGINT ignored; what the model runs must not
    inherit that (a test suite's Ctrl+C handling, the interrupt Tao sends on timeout)."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    tool = Bash(timeout=120)
    try:
        await sh(tool, ws, "true")  # the shell is spawned now, while SIGINT is ignored
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        obs = await sh(tool, ws,
                       f"{shlex.quote(sys.executable)} -c 'import signal; print(signal.getsignal(signal.SIGINT))'")
        assert obs.text == "<built-in function default_int_handler>"
    finally:
        tool.close()


async def test_timeout_kills_children_in_the_foreground_group(bash, ws):
    pidfile = ws.root / "bg.pid"
    obs = await sh(bash, ws, f"bash -c 'sleep 300 & echo $! > {pidfile}; wait'")
    assert obs.text.endswith("shell state kept]")
    assert dies(int(pidfile.read_text()))
    assert (await sh(bash, ws, "echo alive")).text == "alive"


async def test_unresponsive_shell_is_restarted(bash, ws):
    """Only the runaway command has the 1 s timeout: on a busy machine even `pwd` in a fresh shell may take longer.
    The shell ignores SIGINT before the runaway is sent, so that it is deaf to the interrupt however late it runs."""
    bash.timeout = 120
    await sh(bash, ws, "cd sub; MARK=lost; trap '' INT")
    bash.timeout = 1
    obs = await sh(bash, ws, "while :; do :; done")
    bash.timeout = 120
    assert obs.is_error and obs.data["shell_restarted"]
    assert obs.text.endswith("the shell was restarted, cwd and environment reset]")
    after = await sh(bash, ws, "pwd; echo \"[$MARK]\"")
    assert after.text == f"{ws.root}\n[]"


async def test_exit_restarts_the_shell_next_call(bash, ws):
    await sh(bash, ws, "cd sub")
    obs = await sh(bash, ws, "echo bye; exit 3")
    assert obs.exit_code == 3 and obs.data["shell_restarted"]
    assert obs.text.startswith("bye\n")
    assert "the shell exited with code 3" in obs.text and "cwd and environment reset" in obs.text
    assert (await sh(bash, ws, "pwd")).text == str(ws.root)


async def test_huge_output_is_truncated_with_a_note(bash, ws):
    obs = await sh(bash, ws, "seq 1 3000000")
    assert obs.exit_code == 0
    assert obs.text.startswith("1\n2\n3\n") and obs.text.endswith("2999999\n3000000")
    assert "more bytes cut from the middle of this output" in obs.text
    assert obs.truncated_chars > 20_000_000 - 2 * 1024 * 1024
    assert len(obs.text) < 31_000


async def test_non_utf8_output(bash, ws):
    obs = await sh(bash, ws, r"printf 'caf\xe9\n'")
    assert obs.text == "caf\ufffd"


async def test_close_kills_background_jobs(ws):
    tool = Bash(timeout=5)
    obs = await sh(tool, ws, "sleep 300 > /dev/null 2>&1 & echo $!")
    pid = int(obs.text.strip())
    assert alive(pid)
    tool.close()
    assert dies(pid)
    assert (await sh(tool, ws, "echo again")).text == "again"  # a closed tool starts a new shell
    tool.close()


async def test_cancelled_call_leaves_a_usable_shell(bash, ws):
    bash.timeout = 60
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(sh(bash, ws, "sleep 100"), 0.5)
    assert (await sh(bash, ws, "echo fine")).text == "fine"


async def test_sessions_are_independent(ws):
    one, two = Bash(timeout=5), Bash(timeout=5)
    try:
        await sh(one, ws, "cd sub; V=1")
        assert (await sh(two, ws, "pwd; echo \"[$V]\"")).text == f"{ws.root}\n[]"
    finally:
        one.close()
        two.close()


async def test_empty_command_is_an_error(bash, ws):
    obs = await sh(bash, ws, "   ")
    assert obs.is_error and "command is empty" in obs.text


CRASHER = r"""
import asyncio, os, sys
from sandbox import Workspace
from tools import Bash, run_tool
tool = Bash(timeout=10)
asyncio.run(run_tool(tool, {"command": "true"}, Workspace(sys.argv[1])))
print(tool._shell.scratch, flush=True)
os.kill(tool._shell.pid, 9)  # the shell dies with its owner below; only its scratch folder is left
os._exit(1)  # a crash: no cleanup runs
"""


async def test_scratch_folders_of_dead_sessions_are_swept(ws, bash, tmp_path):
    import subprocess
    import sys

    from tests.helpers import ROOT

    crashed = subprocess.run([sys.executable, "-c", CRASHER, str(ws.root)], cwd=ROOT, capture_output=True,
                             text=True, timeout=120)
    left = Path(crashed.stdout.strip())
    assert left.name.startswith("tao-bash-") and left.is_dir(), crashed.stderr
    alive = Bash(timeout=5)
    try:
        await sh(alive, ws, "true")  # a live session's folder must survive the sweep
        mine = alive._shell.scratch
        await sh(bash, ws, "true")  # a new shell sweeps the folders whose owner is gone
        assert not left.exists()
        assert mine.is_dir() and bash._shell.scratch.is_dir()
    finally:
        alive.close()
    assert not mine.exists()  # closed: removed by its owner


def test_a_scratch_folder_of_unknown_or_foreign_owner_is_kept(tmp_path, monkeypatch):
    import tempfile

    from tools.bash import scratch_owner, sweep_scratch

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    pid, start, namespace = scratch_owner()
    foreign = tmp_path / f"tao-bash-{pid + 1}.{start}.{namespace + 1}-abc"  # another pid namespace: cannot tell
    legacy = tmp_path / "tao-bash-abc123"  # an older Tao's: no owner recorded
    reused = tmp_path / f"tao-bash-{pid}.{start + 1}.{namespace}-abc"  # this pid, but another process's start
    mine = tmp_path / f"tao-bash-{pid}.{start}.{namespace}-abc"
    for folder in (foreign, legacy, reused, mine):
        folder.mkdir()
    sweep_scratch()
    assert foreign.is_dir() and legacy.is_dir() and mine.is_dir()
    assert not reused.exists()
