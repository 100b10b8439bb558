"""Limits of overlay runs: timeout, kill on cancel, CPU, memory, nice, no network, pid namespace."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from sandbox import Limits, Overlay, Workspace
from sandbox.probe import detect
from sandbox.process import session_pids
from tests.test_sandbox_support import await_until, make_repo, processes_with, state_base  # noqa: F401


def token() -> str:
    """A unique `sleep` duration, to find the process in /proc."""
    return f"{300 + uuid.uuid4().int % 600}.{uuid.uuid4().int % 9973}"


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    return Workspace(make_repo(tmp_path / "ws"))


async def test_timeout_kills_the_whole_group(workspace: Workspace, state_base: Path) -> None:
    t = token()
    async with Overlay(workspace, state_dir=state_base) as overlay:
        result = await overlay.run(["sh", "-c", f"sleep {t} & sleep {t}; wait"], timeout=1.0)
    assert result.timed_out and result.exit_code is None
    assert await await_until(lambda: not processes_with(f"sleep {t}"))


async def test_cancel_kills_the_whole_group(workspace: Workspace, state_base: Path) -> None:
    t = token()
    async with Overlay(workspace, state_dir=state_base) as overlay:
        task = asyncio.ensure_future(overlay.run(["sh", "-c", f"sleep {t} & sleep {t}; wait"]))
        assert await await_until(lambda: len(processes_with(f"sleep {t}")) == 2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await await_until(lambda: not processes_with(f"sleep {t}"))
        assert (await overlay.run(["true"])).exit_code == 0  # still usable after a cancelled run


async def test_processes_that_leave_the_group_die_with_the_run(workspace: Workspace,
                                                               state_base: Path) -> None:
    if not (await detect(state_base)).pidns:
        pytest.skip("no pid namespace here: a process that calls setsid can outlive its run")
    t = token()
    async with Overlay(workspace, state_dir=state_base) as overlay:
        result = await overlay.run(["sh", "-c", f"setsid sleep {t} > /dev/null 2>&1 & echo started"])
    assert result.text == "started\n"
    assert await await_until(lambda: not processes_with(f"sleep {t}"))


async def test_cpu_limit(workspace: Workspace, state_base: Path) -> None:
    async with Overlay(workspace, state_dir=state_base, limits=Limits(cpu_seconds=1)) as overlay:
        result = await overlay.run(["sh", "-c", "while :; do :; done"], timeout=60)
    assert not result.timed_out
    assert result.exit_code in (-24, -9)  # SIGXCPU at the soft limit, SIGKILL at the hard one


async def test_memory_limit(workspace: Workspace, state_base: Path) -> None:
    """Pid 1 ends a run whose processes pass the memory limit (no rlimit: `ulimit -d` shows none)."""
    if not (await detect(state_base)).pidns:
        pytest.skip("no pid namespace here: no pid 1 watches the run's memory")
    limits = Limits(memory_bytes=200 << 20)
    grow = "import time\nb = bytearray(600 << 20)\ntime.sleep(60)\n"
    async with Overlay(workspace, state_dir=state_base, limits=limits) as overlay:
        big = await overlay.run([sys.executable, "-c", grow], timeout=120)
        small = await overlay.run(["sh", "-c",
                                   f"ulimit -d; {sys.executable} -c \"b = bytearray(20 << 20); print('ok')\""])
    assert big.exit_code == -9 and not big.timed_out
    assert small.exit_code == 0 and small.text == "unlimited\nok\n"


def autogroups() -> bool:
    """Whether the scheduler groups each session (then a run is niced as a group, not process by process)."""
    enabled = Path("/proc/sys/kernel/sched_autogroup_enabled")
    return enabled.exists() and enabled.read_text().strip() == "1"


def autogroup_nice(sid: int) -> int:
    """The nice value of a session's autogroup ("/autogroup-N nice K")."""
    return int(Path(f"/proc/{sid}/autogroup").read_text().split()[-1])


async def test_low_priority_the_command_cannot_see(workspace: Workspace, state_base: Path) -> None:
    """With autogroups the run's session is niced as a group, and the command's own nice is the caller's, as in
    a real run (`nice`, `ps -o ni` and /proc/self/stat print the same); without them the process is niced."""
    async with Overlay(workspace, state_dir=state_base) as overlay:
        result = await overlay.run([sys.executable, "-c", "import os; print(os.nice(0))"])
    expected = os.nice(0) if autogroups() else min(19, os.nice(0) + Limits().nice)
    assert int(result.text) == expected


async def test_low_priority_holds_against_other_sessions(workspace: Workspace, state_base: Path) -> None:
    """With autogroups, a run's own session is niced as a group, or its nice would not count."""
    if not autogroups():
        pytest.skip("no scheduler autogroups on this kernel: the process nice is all there is")
    async with Overlay(workspace, state_dir=state_base) as overlay:
        result = await overlay.run(["cat", "/proc/self/autogroup"])
    assert result.text.split()[-1] == str(Limits().nice)


async def test_no_network_but_loopback_works(workspace: Workspace, state_base: Path) -> None:
    if not (await detect(state_base)).netns:
        pytest.skip("no network namespace here: speculative runs keep the host network")
    script = ("import socket\n"
              "names = [l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]]\n"
              "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
              "c = socket.create_connection(s.getsockname()); c.sendall(b'hi')\n"
              "a, _ = s.accept(); print(names, a.recv(2))\n")
    async with Overlay(workspace, state_dir=state_base) as overlay:
        result = await overlay.run([sys.executable, "-c", script])
    assert result.text == "['lo'] b'hi'\n", result.text


async def test_tmp_writes_stay_in_the_run(workspace: Workspace, state_base: Path) -> None:
    """/tmp and /dev/shm are the real ones under a layer each run throws away: another overlay, the real /tmp
    and the next run never see what a run wrote there (and the run is tainted for it)."""
    if not (await detect(state_base)).mountns:
        pytest.skip("no mount namespace here: /tmp cannot be kept from the real tree")
    name = f"tao-private-{uuid.uuid4().hex}"
    async with Overlay(workspace, state_dir=state_base) as overlay, Overlay(workspace, state_dir=state_base) as other:
        result = await overlay.run(["sh", "-c", f"echo x > /tmp/{name} && echo y > /dev/shm/{name} && cat /tmp/{name}"])
        again = await overlay.run(["sh", "-c", f"test -e /tmp/{name} || echo absent"])
        elsewhere = await other.run(["sh", "-c", f"test -e /tmp/{name} || echo absent"])
        assert any(f"/tmp/{name}" in t and f"/dev/shm/{name}" in t for t in overlay.taints()), overlay.taints()
        assert other.taints() == []
    assert result.text == "x\n" and again.text == "absent\n" and elsewhere.text == "absent\n"
    assert not Path("/tmp", name).exists() and not Path("/dev/shm", name).exists()


def nices_of(sid: int) -> set[int]:
    """The nice values of a session's live processes (field 19 of /proc/PID/stat)."""
    return {int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[16]) for pid in session_pids(sid)}


async def test_boost_lifts_a_run_to_tao_priority(workspace: Workspace, state_base: Path) -> None:
    """A speculative run the real call now waits for gets the caller's nice back (root only)."""
    if os.geteuid() != 0:
        pytest.skip("lowering a nice value needs root (CAP_SYS_NICE); a normal user's runs stay niced")
    niced = min(19, os.nice(0) + Limits().nice)

    def priority(sid: int) -> int:
        """What ranks the run against other work: its autogroup's nice, or its processes' own."""
        return autogroup_nice(sid) if autogroups() else max(nices_of(sid) or {0})

    async with Overlay(workspace, state_dir=state_base) as overlay:
        run = asyncio.ensure_future(overlay.run(["sleep", "30"]))
        await await_until(lambda: any(priority(sid) == niced and nices_of(sid) for sid in overlay._sessions))
        assert overlay.boost()
        [sid] = overlay._sessions
        lifted = priority(sid), nices_of(sid)
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)
    assert lifted == (os.nice(0), {os.nice(0)})


async def test_a_run_started_after_a_boost_is_not_niced(workspace: Workspace, state_base: Path) -> None:
    """A boost may come while a run is still setting up; runs from then on keep the caller's priority."""
    async with Overlay(workspace, state_dir=state_base) as overlay:
        overlay.boost()
        result = await overlay.run([sys.executable, "-c", "import os; print(os.nice(0))"])
    assert result.text == f"{os.nice(0)}\n"


async def test_an_interpreter_under_tmp_is_there_in_the_sandbox(tmp_path: Path, state_base: Path) -> None:
    """A checkout (and its venv) under /tmp: speculative runs still find the interpreter Tao runs them with."""
    if not str(tmp_path).startswith("/tmp/") or not (await detect(state_base)).mountns:
        pytest.skip("needs tmp_path under /tmp and a mount namespace (the sandbox's own /tmp)")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    repo = make_repo(tmp_path / "ws")
    script = ("import asyncio, sys\nfrom sandbox import Overlay, Workspace\n"
              "async def main():\n"
              f"    async with Overlay(Workspace({str(repo)!r}), state_dir={str(state_base)!r}) as overlay:\n"
              "        print((await overlay.run([sys.executable, '-c', 'print(40 + 2)'])).text, end='')\n"
              "asyncio.run(main())\n")
    done = subprocess.run([str(venv / "bin" / "python"), "-c", script], capture_output=True, text=True,
                          env={**without_preload(), "PYTHONPATH": str(Path(__file__).parent.parent)}, timeout=120)
    assert done.stdout == "42\n", done.stderr


def without_preload() -> dict[str, str]:
    """This process's environment minus LD_PRELOAD, which vLLM sets to a library of this venv, not the test's."""
    return {key: value for key, value in os.environ.items() if key != "LD_PRELOAD"}
