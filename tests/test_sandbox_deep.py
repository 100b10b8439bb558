"""Trees deeper than Python's recursion limit: a run that makes 1,100 nested directories has its changes
listed, its state dir removed, and the overlays after it still work; a leftover that deep is swept."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sandbox import ChangeKind, Overlay, Workspace
from sandbox.cleanup import sweep
from sandbox.statedir import remove_tree
from tests.test_sandbox_support import VARIANTS, make_repo, state_base, tree_state, usable  # noqa: F401

DEPTH = 1100
NEST = f"import os\nfor _ in range({DEPTH}):\n    os.mkdir('d'); os.chdir('d')\nopen('leaf', 'w').write('x')\n"


@pytest.fixture(params=VARIANTS)
async def setup(request: pytest.FixtureRequest, tmp_path: Path, state_base: Path,
                monkeypatch: pytest.MonkeyPatch) -> tuple[Workspace, str, Path]:
    root = make_repo(tmp_path / "ws")
    backend = await usable(request.param, state_base, root, monkeypatch)
    return Workspace(root), backend, state_base


async def test_deep_nesting_is_listed_removed_and_harmless(setup: tuple[Workspace, str, Path]) -> None:
    workspace, backend, base = setup
    before = tree_state(workspace.root)
    overlay = await Overlay.create(workspace, backend=backend, state_dir=base)
    result = await overlay.run(["python3", "-c", NEST])
    assert result.exit_code == 0, result.text
    changes = overlay.changes()
    created = [c for c in changes if c.kind == ChangeKind.CREATED]
    assert len(created) == DEPTH + 1
    assert {c.path for c in created} == {"/".join(["d"] * n) for n in range(1, DEPTH + 1)} | {
        "/".join(["d"] * DEPTH + ["leaf"])}
    state = overlay.state_path
    await overlay.discard()
    assert state is not None and not state.exists()
    async with Overlay(workspace, backend=backend, state_dir=base) as after:
        assert (await after.run(["sh", "-c", "echo ok"])).text == "ok\n"
    assert tree_state(workspace.root) == before


def deep_tree(top: Path, depth: int) -> None:
    """`depth` nested dirs under top, made relative to an fd so no path grows past PATH_MAX."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        os.close(os.open("leaf", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    finally:
        os.close(fd)


def test_remove_tree_handles_any_depth_and_locked_dirs(tmp_path: Path) -> None:
    top = tmp_path / "state"
    top.mkdir()
    deep_tree(top, 3000)  # deeper than PATH_MAX allows as one path
    locked = top / "work" / "work"
    locked.mkdir(parents=True)
    (locked / "x").mkdir()
    locked.chmod(0)  # as overlayfs leaves its work dir
    remove_tree(top)
    assert not top.exists()


async def test_a_deep_leftover_is_swept_and_does_not_block_new_overlays(tmp_path: Path) -> None:
    base = tmp_path / "base"
    dead = base / "dead-overlay"
    (dead / "upper").mkdir(parents=True)
    (dead / "owner.json").write_text(json.dumps({"pid": 999999999, "start_time": 1, "boot_id": "", "pid_ns": ""}))
    deep_tree(dead / "upper", DEPTH)
    removed = sweep(base)
    assert [x.path for x in removed] == [dead] and not dead.exists()
    workspace = Workspace(make_repo(tmp_path / "ws"))
    async with Overlay(workspace, state_dir=base) as overlay:
        assert (await overlay.run(["true"])).exit_code == 0


async def test_deep_writes_outside_the_workspace_are_counted(tmp_path: Path, state_base: Path) -> None:
    workspace = Workspace(make_repo(tmp_path / "ws"))
    top = f"/tmp/tao-deep-{tmp_path.name}"
    script = f"import os\nos.mkdir({top!r}); os.chdir({top!r})\n" + NEST.split("\n", 1)[1]
    async with Overlay(workspace, state_dir=state_base) as overlay:
        if not overlay.same_path:
            pytest.skip("no mount namespace here: writes outside the workspace would be real")
        result = await overlay.run(["python3", "-c", script])
        assert result.exit_code == 0, result.text
        taints = overlay.taints()
    assert any(f"wrote outside the workspace: {top}" in t and f"({DEPTH + 2} paths)" in t for t in taints), taints
    assert not Path(top).exists()


async def test_a_deep_untracked_tree_in_the_workspace_gets_its_overlay(setup: tuple[Workspace, str, Path]) -> None:
    workspace, backend, base = setup
    (workspace.root / "deep").mkdir()
    deep_tree(workspace.root / "deep", DEPTH)
    async with Overlay(workspace, backend=backend, state_dir=base) as overlay:
        leaf = "/".join(["deep", *["d"] * DEPTH, "leaf"])
        result = await overlay.run(["sh", "-c", f"test -f {leaf} && echo there"])
        assert result.text == "there\n", result.text
    remove_tree(workspace.root / "deep")
