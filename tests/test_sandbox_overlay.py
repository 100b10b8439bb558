"""Overlays of every backend that works here: same path, the real tree untouched, changes listed,
writes outside the workspace refused, private /tmp, discard and errors."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import pytest

from sandbox import ChangeKind, Limits, Overlay, OverlayClosed, Workspace, WorkspaceEscape, WorkspaceView
from sandbox.probe import detect
from tests.test_sandbox_support import VARIANTS, make_repo, state_base, tree_state, usable  # noqa: F401


@pytest.fixture(params=VARIANTS)
async def setup(request: pytest.FixtureRequest, tmp_path: Path, state_base: Path,
                monkeypatch: pytest.MonkeyPatch) -> tuple[Workspace, str, Path]:
    """A fresh repo, and the backend under test (skipped if it does not work here)."""
    root = make_repo(tmp_path / "ws")
    backend = await usable(request.param, state_base, root, monkeypatch)
    return Workspace(root), backend, state_base


async def test_same_path_and_real_tree_untouched(setup: tuple[Workspace, str, Path]) -> None:
    workspace, backend, base = setup
    before = tree_state(workspace.root)
    script = ("pwd; cat src/util.py; echo new > created.txt; echo more >> README.md; rm src/app.py; "
              "mkdir -p pkg/sub && echo x > pkg/sub/m.py; chmod 600 notes.txt; mv src/util.py src/moved.py; ls")
    async with Overlay(workspace, backend=backend, state_dir=base) as overlay:
        caps = await detect(base)
        assert overlay.same_path == caps.mountns
        assert (overlay.root == workspace.root) == overlay.same_path  # else the view's own path
        assert overlay.backend == backend
        result = await overlay.run(["sh", "-c", script])
        assert result.exit_code == 0, result.text
        lines = result.text.splitlines()
        assert lines[0] == str(overlay.root)
        assert lines[1] == "X = 2"  # the uncommitted change is there
        assert "created.txt" in lines and "pkg" in lines
        got = {(c.path, c.kind) for c in overlay.changes() if c.kind != ChangeKind.TOUCHED}
        assert got == {
            ("created.txt", ChangeKind.CREATED),
            ("README.md", ChangeKind.MODIFIED),
            ("src/app.py", ChangeKind.DELETED),
            ("pkg", ChangeKind.CREATED),
            ("pkg/sub", ChangeKind.CREATED),
            ("pkg/sub/m.py", ChangeKind.CREATED),
            ("notes.txt", ChangeKind.MODIFIED),
            ("src/util.py", ChangeKind.DELETED),
            ("src/moved.py", ChangeKind.CREATED),
        }
        created = next(c for c in overlay.changes() if c.path == "created.txt")
        assert created.source is not None and created.source.read_text() == "new\n"
    assert tree_state(workspace.root) == before


async def test_state_persists_between_runs_and_discard_deletes_it(setup: tuple[Workspace, str, Path]) -> None:
    workspace, backend, base = setup
    overlay = await Overlay.create(workspace, backend=backend, state_dir=base)
    assert (await overlay.run(["sh", "-c", "echo 1 > counter"])).exit_code == 0
    second = await overlay.run(["sh", "-c", "echo 2 >> counter; cat counter"])
    assert second.text == "1\n2\n"
    state = overlay.state_path
    assert state is not None and state.is_dir()
    await overlay.discard()
    assert not state.exists()
    assert not (workspace.root / "counter").exists()
    with pytest.raises(OverlayClosed):
        await overlay.run(["true"])
    await overlay.discard()  # twice is fine


async def test_directory_replaced_and_renamed(setup: tuple[Workspace, str, Path]) -> None:
    workspace, backend, base = setup
    before = tree_state(workspace.root)
    async with Overlay(workspace, backend=backend, state_dir=base) as overlay:
        result = await overlay.run(["sh", "-c", "rm -r src && mkdir src && echo n > src/new.py && mv docs manual"])
        assert result.exit_code == 0, result.text
        got = {(c.path, c.kind) for c in overlay.changes() if c.kind != ChangeKind.TOUCHED}
        assert got == {
            ("src/app.py", ChangeKind.DELETED),
            ("src/util.py", ChangeKind.DELETED),
            ("src/new.py", ChangeKind.CREATED),
            ("docs", ChangeKind.DELETED),
            ("manual", ChangeKind.CREATED),
        }
    assert tree_state(workspace.root) == before


async def test_git_sees_the_same_repository(setup: tuple[Workspace, str, Path]) -> None:
    workspace, backend, base = setup
    argv = ["git", "-c", "core.quotepath=off", "status", "--porcelain=v1", "--untracked-files=all"]
    real = await workspace.run(argv, env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"})
    async with Overlay(workspace, backend=backend, state_dir=base) as overlay:
        inside = await overlay.run(argv, env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"})
        log = await overlay.run(["git", "log", "--format=%s"])
    assert inside.text == real.text and "?? notes.txt" in real.text
    assert log.text == "init\n"


async def test_write_outside_the_workspace_stays_inside_and_taints(setup: tuple[Workspace, str, Path]) -> None:
    """Writes outside the workspace succeed, as in a real run, but land in a throwaway layer and taint the run."""
    workspace, backend, base = setup
    caps = await detect(base)
    if not caps.mountns:
        pytest.skip("without a mount namespace nothing outside the workspace can be kept from the real tree")
    home_target = Path.home() / f".tao-escape-{uuid.uuid4().hex}"
    sibling = workspace.root.parent / "sibling.txt"
    through_link = Path("/var/tmp") / f"tao-escape-{uuid.uuid4().hex}"
    try:
        async with Overlay(workspace, backend=backend, state_dir=base) as overlay:
            result = await overlay.run(["sh", "-c", f"echo x > {home_target} && echo y > ../sibling.txt && "
                                                    f"ln -s / escape && echo z > escape{through_link}"])
            assert result.exit_code == 0, result.text
            taints = overlay.taints()
        assert any(str(home_target) in t and str(through_link) in t for t in taints), taints
        assert not home_target.exists()
        assert not sibling.exists()
        assert not through_link.exists()
    finally:
        home_target.unlink(missing_ok=True)
        sibling.unlink(missing_ok=True)
        through_link.unlink(missing_ok=True)


async def test_program_not_found_raises_like_the_workspace(setup: tuple[Workspace, str, Path]) -> None:
    workspace, backend, base = setup
    with pytest.raises(FileNotFoundError):
        await workspace.run(["tao-no-such-program"])
    async with Overlay(workspace, backend=backend, state_dir=base) as overlay:
        with pytest.raises(FileNotFoundError):
            await overlay.run(["tao-no-such-program"])
        assert (await overlay.run(["true"])).exit_code == 0  # the overlay is still usable


async def test_surface_matches_the_workspace(tmp_path: Path, state_base: Path) -> None:
    workspace = Workspace(make_repo(tmp_path / "ws"))
    async with Overlay(workspace, state_dir=state_base) as overlay:
        assert isinstance(overlay, WorkspaceView) and isinstance(workspace, WorkspaceView)
        assert overlay.version == workspace.version
        assert overlay.resolve("src/app.py") == overlay.root / "src" / "app.py"
        assert overlay.same_path == (overlay.resolve("src") == workspace.resolve("src"))
        assert overlay.relative(overlay.root / "src") == "src"
        with pytest.raises(WorkspaceEscape):
            overlay.resolve("../outside")
        result = await overlay.run(["sh", "-c", "cat; echo \"$TAO_T\""], env={"TAO_T": "v", "PATH": os.environ["PATH"]},
                                   stdin=b"in\n")
        assert result.text == "in\nv\n"


async def test_exit_status_and_signals_pass_through(tmp_path: Path, state_base: Path) -> None:
    workspace = Workspace(make_repo(tmp_path / "ws"))
    async with Overlay(workspace, state_dir=state_base) as overlay:
        assert (await overlay.run(["sh", "-c", "exit 7"])).exit_code == 7
        assert (await overlay.run(["sh", "-c", "kill -TERM $$"])).exit_code == (await workspace.run(
            ["sh", "-c", "kill -TERM $$"])).exit_code == -15


async def test_concurrent_runs_in_one_overlay_take_turns(tmp_path: Path, state_base: Path) -> None:
    workspace = Workspace(make_repo(tmp_path / "ws"))
    async with Overlay(workspace, state_dir=state_base) as overlay:
        results = await asyncio.gather(*(overlay.run(["sh", "-c", f"echo {i} >> log; cat log | wc -l"])
                                         for i in range(3)))
        assert sorted(r.text.strip() for r in results) == ["1", "2", "3"]


async def test_overlays_are_independent(tmp_path: Path, state_base: Path) -> None:
    workspace = Workspace(make_repo(tmp_path / "ws"))
    async with Overlay(workspace, state_dir=state_base) as a, Overlay(workspace, state_dir=state_base) as b:
        await a.run(["sh", "-c", "echo a > only-a"])
        seen = await b.run(["sh", "-c", "test -e only-a || echo absent"])
        assert seen.text == "absent\n"
    assert not (workspace.root / "only-a").exists()


async def test_discard_kills_a_running_command(tmp_path: Path, state_base: Path) -> None:
    from tests.test_sandbox_support import await_until, processes_with

    workspace = Workspace(make_repo(tmp_path / "ws"))
    token = f"{uuid.uuid4().int % 1000 + 100}.{uuid.uuid4().int % 997}"
    overlay = await Overlay.create(workspace, state_dir=state_base, limits=Limits(timeout=60))
    running = asyncio.ensure_future(overlay.run(["sleep", token]))
    assert await await_until(lambda: processes_with(f"sleep {token}"))
    await overlay.discard()
    with pytest.raises(OverlayClosed):
        await running
    assert await await_until(lambda: not processes_with(f"sleep {token}"))


async def test_unknown_backend_is_explained(tmp_path: Path, state_base: Path) -> None:
    from sandbox import BackendUnavailable

    workspace = Workspace(tmp_path)
    with pytest.raises(BackendUnavailable, match="unknown overlay backend 'zfs'"):
        await Overlay.create(workspace, backend="zfs", state_dir=state_base)
    with pytest.raises(BackendUnavailable, match="git-worktree backend cannot be used"):
        await Overlay.create(workspace, backend="git-worktree", state_dir=state_base)


BUSY = "import time\nstart = time.process_time()\nwhile time.process_time() - start < 0.5:\n    pass\n"
WAIT = 3.0  # seconds a waiting run sleeps: were the wait counted, its cost would be at least this


async def test_cpu_seconds_count_the_work_not_the_wait(tmp_path: Path, state_base: Path) -> None:
    """A run's cost is the CPU it used. The waiting run is held against the time it waited, not against the busy
    run: starting a sandbox and an interpreter costs CPU too, and more of it on a busy machine (0.3 s seen)."""
    from tests.test_sandbox_support import await_until

    workspace = Workspace(make_repo(tmp_path / "ws"))
    async with Overlay(workspace, state_dir=state_base) as sleeper, Overlay(workspace, state_dir=state_base) as busy:
        await sleeper.run(["python3", "-c", f"import time; time.sleep({WAIT})"])
        await busy.run(["python3", "-c", BUSY])
        if sleeper.cpu_seconds() is None:
            pytest.skip("the sandbox stage here has no pid namespace, so a finished run cannot count its CPU")
        assert busy.cpu_seconds() >= 0.5  # it loops until it has used that much
        assert sleeper.cpu_seconds() < WAIT / 3  # its wait is not counted
        done = busy.cpu_seconds()
        running = asyncio.ensure_future(busy.run(["python3", "-c", BUSY + "time.sleep(600)\n"]))
        # The run going on, read from /proc. It is niced: beside other work it may take long to use 0.5 s.
        assert await await_until(lambda: busy.cpu_seconds() >= done + 0.5, timeout=300)
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
