"""A run that may have seen a different world than a real run would is tainted, and says why; a run
that saw the same world is not. Worlds compared: /tmp, $HOME, the network, memory, hard links, limits."""

from __future__ import annotations

import dataclasses
import os
import socket
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox import Limits, Overlay, Workspace
from sandbox import probe
from sandbox.probe import detect
from tests.test_sandbox_support import make_repo, state_base, tree_state  # noqa: F401


@pytest.fixture
async def workspace(tmp_path: Path, state_base: Path) -> Workspace:
    """A fresh repo; the tests need the kernel overlay with its own namespaces."""
    caps = await detect(state_base)
    if caps.overlay_options is None:
        pytest.skip(f"no kernel overlayfs here: {caps.notes.get('overlayfs')}")
    return Workspace(make_repo(tmp_path / "ws"))


async def test_a_plain_run_in_the_workspace_is_not_tainted(workspace: Workspace, state_base: Path) -> None:
    async with Overlay(workspace, state_dir=state_base) as overlay:
        result = await overlay.run(["sh", "-c", "echo new > made.txt; cat src/app.py; ls /tmp > /dev/null"])
        assert result.exit_code == 0, result.text
        assert overlay.taints() == []


async def test_a_fixture_written_in_the_real_tmp_is_seen_inside(workspace: Workspace, state_base: Path) -> None:
    fixture = Path("/tmp") / f"tao-fixture-{uuid.uuid4().hex}"
    fixture.write_text("from an earlier call\n")
    try:
        async with Overlay(workspace, state_dir=state_base) as overlay:
            result = await overlay.run(["cat", str(fixture)])
            assert result.text == "from an earlier call\n"
            assert overlay.taints() == []
    finally:
        fixture.unlink()


async def test_a_write_to_the_home_cache_works_taints_and_stays_inside(workspace: Workspace,
                                                                       state_base: Path) -> None:
    target = Path.home() / ".cache" / f"tao-taint-{uuid.uuid4().hex}"
    try:
        async with Overlay(workspace, state_dir=state_base) as overlay:
            result = await overlay.run(["sh", "-c", f"mkdir -p {target} && echo x > {target}/f && cat {target}/f"])
            assert result.exit_code == 0 and result.text == "x\n", result.text
            taints = overlay.taints()
        assert any("wrote outside the workspace" in t and str(target) in t for t in taints), taints
        assert not target.exists()
    finally:
        if target.exists():
            for child in target.iterdir():
                child.unlink()
            target.rmdir()


async def test_a_write_to_tmp_taints_and_stays_inside(workspace: Workspace, state_base: Path) -> None:
    name = f"/tmp/tao-taint-{uuid.uuid4().hex}"
    async with Overlay(workspace, state_dir=state_base) as overlay:
        result = await overlay.run(["sh", "-c", f"echo x > {name} && cat {name}"])
        assert result.text == "x\n"
        assert any(name in t for t in overlay.taints()), overlay.taints()
    assert not Path(name).exists()


@pytest.fixture
def outside_server() -> Iterator[int]:
    """A TCP server on 127.0.0.1 outside the sandbox, as a test's database would be; yields its port."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except (TimeoutError, OSError):
                continue
            conn.sendall(b"hello\n")
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(timeout=30)
    server.close()


async def test_a_local_service_outside_taints_the_run(workspace: Workspace, state_base: Path,
                                                      outside_server: int) -> None:
    if not (await detect(state_base)).netns:
        pytest.skip("no network namespace here: the run reaches the real loopback")
    quiet = ("import socket, sys\ntry:\n"
             f"    socket.create_connection(('127.0.0.1', {outside_server}), timeout=30).recv(6)\n"
             "except OSError:\n    sys.exit(3)\n")  # says nothing: the counters must tell
    async with Overlay(workspace, state_dir=state_base) as overlay:
        result = await overlay.run([sys.executable, "-c", quiet])
        assert result.exit_code == 3 and result.text == ""
        taints = overlay.taints()
    assert any("tried to reach the network" in t for t in taints), taints


async def test_a_server_inside_the_run_is_not_a_taint(workspace: Workspace, state_base: Path) -> None:
    script = ("import socket\n"
              "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
              "c = socket.create_connection(s.getsockname()); a, _ = s.accept()\n"
              "c.sendall(b'ping'); print(a.recv(4).decode()); a.sendall(b'pong'); print(c.recv(4).decode())\n"
              "c.close(); a.close(); s.close()\n")
    async with Overlay(workspace, state_dir=state_base) as overlay:
        result = await overlay.run([sys.executable, "-c", script])
        assert result.text == "ping\npong\n", result.text
        assert overlay.taints() == []


async def test_a_run_out_of_memory_is_tainted(workspace: Workspace, state_base: Path) -> None:
    limits = Limits(memory_bytes=200 << 20)
    async with Overlay(workspace, state_dir=state_base, limits=limits) as ended:
        result = await ended.run([sys.executable, "-c", "import time\nb = bytearray(600 << 20)\ntime.sleep(60)\n"],
                                 timeout=120)
        assert result.exit_code == -9
        assert any("memory" in t.lower() for t in ended.taints()), ended.taints()
    peak = "b = bytearray(170 << 20)\n"  # under the limit, but close: a real run could have needed more
    async with Overlay(workspace, state_dir=state_base, limits=limits) as close:
        result = await close.run([sys.executable, "-c", peak])
        assert result.exit_code == 0 and result.text == ""
        assert any("memory" in t.lower() for t in close.taints()), close.taints()


async def test_a_small_run_under_the_same_limit_is_not_tainted(workspace: Workspace, state_base: Path) -> None:
    async with Overlay(workspace, state_dir=state_base, limits=Limits(memory_bytes=200 << 20)) as overlay:
        result = await overlay.run([sys.executable, "-c", "b = bytearray(20 << 20); print('ok')"])
        assert result.text == "ok\n"
        assert overlay.taints() == []


async def test_modifying_a_hard_linked_file_taints_the_run(workspace: Workspace, state_base: Path) -> None:
    os.link(workspace.root / "README.md", workspace.root / "README.copy")
    before = tree_state(workspace.root)
    async with Overlay(workspace, state_dir=state_base) as overlay:
        await overlay.run(["sh", "-c", "echo more >> README.md"])
        taints = overlay.taints()
    assert any("hard-linked" in t and "README.md" in t for t in taints), taints
    assert tree_state(workspace.root) == before


async def test_a_timeout_and_a_cpu_limit_taint_the_run(workspace: Workspace, state_base: Path) -> None:
    async with Overlay(workspace, state_dir=state_base) as slow:
        result = await slow.run(["sleep", "60"], timeout=1.0)
        assert result.timed_out
        assert any("timed out" in t for t in slow.taints()), slow.taints()
    async with Overlay(workspace, state_dir=state_base, limits=Limits(cpu_seconds=1)) as busy:
        result = await busy.run(["sh", "-c", "while :; do :; done"], timeout=120)
        assert result.exit_code in (-24, -9)
        assert any("limit" in t for t in busy.taints()), busy.taints()


async def test_taints_accumulate_over_runs_and_survive_discard(workspace: Workspace, state_base: Path) -> None:
    overlay = await Overlay.create(workspace, state_dir=state_base)
    await overlay.run(["sh", "-c", "echo 'No space left on device' >&2"])
    await overlay.run(["true"])
    seen = overlay.taints()
    await overlay.discard()
    assert seen and overlay.taints() == seen


async def test_the_copy_backend_without_namespaces_is_always_tainted(tmp_path: Path, state_base: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAO_SANDBOX_NAMESPACES", "none")
    workspace = Workspace(make_repo(tmp_path / "ws"))
    async with Overlay(workspace, state_dir=state_base) as overlay:
        await overlay.run(["true"])
        assert any("cannot isolate" in t for t in overlay.taints()), overlay.taints()


async def test_without_an_overlay_of_root_every_run_is_tainted(workspace: Workspace, state_base: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The fallback where / cannot be overlaid: the rest is read-only, /tmp private, and no run is trusted."""
    monkeypatch.setenv("TAO_SANDBOX_NAMESPACES", "auto")
    caps = await detect(state_base)
    monkeypatch.setitem(probe._cache, (state_base, "auto"), dataclasses.replace(caps, world="readonly"))
    target = Path.home() / ".cache" / f"tao-taint-{uuid.uuid4().hex}"
    async with Overlay(workspace, state_dir=state_base) as overlay:
        result = await overlay.run(["sh", "-c", f"echo x > /tmp/t && cat /tmp/t && echo y > {target}"])
        assert result.text.startswith("x\n") and result.exit_code != 0  # /tmp private, the rest read-only
        taints = overlay.taints()
    assert any("no overlay of /" in t for t in taints) and any("/tmp/t" in t for t in taints), taints
    assert not target.exists()


async def test_with_capabilities_cut_instead_of_a_user_namespace_root_still_writes(
        workspace: Workspace, state_base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fallback without a user namespace for the command: real root keeps only its file powers."""
    if os.geteuid() != 0:
        pytest.skip("the capability fallback is for real root")
    monkeypatch.setenv("TAO_SANDBOX_NAMESPACES", "auto")
    caps = await detect(state_base)
    monkeypatch.setitem(probe._cache, (state_base, "auto"), dataclasses.replace(caps, inner="caps"))
    (workspace.root / "locked.txt").write_text("root may write this\n")
    (workspace.root / "locked.txt").chmod(0o444)
    async with Overlay(workspace, state_dir=state_base) as overlay:
        result = await overlay.run(["sh", "-c", "echo more >> locked.txt && grep Cap /proc/self/status"])
        assert result.exit_code == 0, result.text
        bounding = int(next(line for line in result.text.splitlines() if line.startswith("CapBnd")).split()[1], 16)
        assert overlay.taints() == []
    assert bounding == sum(1 << cap for cap in (0, 1, 3, 4, 5, 6, 7, 10))


async def test_a_silently_refused_system_call_taints_the_run(workspace: Workspace, state_base: Path) -> None:
    """A call the sandbox refuses (a real run as root may make it) taints the run even when nothing is printed."""
    script = ("import ctypes, os, sys\nlibc = ctypes.CDLL(None, use_errno=True)\n"
              "buf = ctypes.create_string_buffer(136); buf[0:4] = (128).to_bytes(4, sys.byteorder)\n"
              "mid = ctypes.c_int()\n"
              "sys.exit(0 if libc.name_to_handle_at(-100, b'/', buf, ctypes.byref(mid), 0) == 0 else 5)\n")
    async with Overlay(workspace, state_dir=state_base) as overlay:
        result = await overlay.run([sys.executable, "-c", script])
        assert result.text == ""
        taints = overlay.taints()
    assert any("refused system calls" in t and "name_to_handle_at" in t for t in taints), (result.exit_code, taints)


async def test_the_run_sees_the_same_resource_limits_as_a_real_run(workspace: Workspace, state_base: Path) -> None:
    """The sandbox's own limits are watched from outside the run, not set as rlimits it could read."""
    real = await workspace.run(["sh", "-c", "ulimit -a"])
    async with Overlay(workspace, state_dir=state_base) as overlay:
        inside = await overlay.run(["sh", "-c", "ulimit -a"])
    assert inside.text == real.text


async def test_the_workspace_directory_itself_looks_real_and_a_change_to_it_taints(
        workspace: Workspace, state_base: Path) -> None:
    workspace.root.chmod(0o750)
    async with Overlay(workspace, state_dir=state_base) as looked:
        seen = await looked.run(["stat", "-c", "%a", "."])
        assert seen.text == "750\n" and looked.taints() == []
    async with Overlay(workspace, state_dir=state_base) as changed:
        await changed.run(["chmod", "700", "."])
        taints = changed.taints()
    assert any("workspace directory itself" in t for t in taints), taints
    assert (workspace.root.stat().st_mode & 0o777) == 0o750


@pytest.fixture
async def user_mode(workspace: Workspace, state_base: Path, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    """The workspace, with the command in a user namespace that maps only its own ids (as for any user)."""
    monkeypatch.setenv("TAO_SANDBOX_NAMESPACES", "user")
    caps = await detect(state_base)
    if caps.overlay_options is None or not caps.userns:
        pytest.skip(f"no overlay through a user namespace here: {caps.notes.get('overlayfs')}")
    return workspace


async def test_chown_to_an_id_the_user_namespace_cannot_map_is_refused_and_taints(
        user_mode: Workspace, state_base: Path) -> None:
    """Inside, the kernel says EINVAL; a real run says EPERM (a user) or succeeds (root): never promoted."""
    async with Overlay(user_mode, state_dir=state_base) as overlay:
        result = await overlay.run(["sh", "-c", "chown 1234:1234 src/app.py; echo $?"])
        assert "Invalid argument" not in result.text
        taints = overlay.taints()
    assert any("chown" in t and "does not map" in t for t in taints), taints


async def test_chown_to_its_own_ids_and_setuid_unchanged_are_not_tainted(
        user_mode: Workspace, state_base: Path) -> None:
    script = f"import os; os.chown('src/app.py', {os.getuid()}, -1); os.setresuid(-1, -1, -1); print('ok')"
    async with Overlay(user_mode, state_dir=state_base) as overlay:
        result = await overlay.run([sys.executable, "-c", script])
        assert result.text == "ok\n", result.text
        assert overlay.taints() == []


async def test_setuid_to_another_user_taints(user_mode: Workspace, state_base: Path) -> None:
    async with Overlay(user_mode, state_dir=state_base) as overlay:
        await overlay.run([sys.executable, "-c", "import os\ntry: os.setuid(4321)\nexcept OSError as e: print(e)"])
        taints = overlay.taints()
    assert any("setuid" in t for t in taints), taints


async def test_a_file_of_an_unmapped_owner_shows_as_nobody_and_taints(
        user_mode: Workspace, state_base: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a file to another owner needs root")
    os.chown(user_mode.root / "src" / "app.py", 4321, 4321)
    async with Overlay(user_mode, state_dir=state_base) as overlay:
        result = await overlay.run(["stat", "-c", "%U:%G", "src/app.py"])
        taints = overlay.taints()
    assert "4321" not in result.text  # what the real run would say, the run in the overlay cannot
    assert any("cannot map" in t for t in taints), taints
