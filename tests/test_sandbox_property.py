"""Property: for random shell command sequences run in an overlay, the real workspace stays byte-identical,
the output equals the output of the same commands run for real at the same path, and changes() lists
exactly what the real run changed."""

from __future__ import annotations

import asyncio
import itertools
import os
import stat
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox import ChangeKind, Overlay, Workspace
from sandbox.probe import detect
from tests.test_sandbox_support import MODES, VARIANTS, backend_name, make_repo, skip_reason, state_base, tree_state  # noqa: F401

PATHS = ["a.txt", "b.txt", "src/app.py", "src/util.py", "src/new.py", "docs", "docs/x.md", "d", "d/e", "d/e/f.txt",
         "notes.txt", "run.sh", "link"]
DIRS = ["src", "docs", "d", "d/e", "g"]
WORDS = st.sampled_from(["alpha", "beta", "", "x y", "42"])

op = st.one_of(
    st.builds(lambda p, w: f"printf '%s\\n' '{w}' > {p}", st.sampled_from(PATHS), WORDS),
    st.builds(lambda p, w: f"printf '%s\\n' '{w}' >> {p}", st.sampled_from(PATHS), WORDS),
    st.builds(lambda p: f"rm {p}", st.sampled_from(PATHS)),
    st.builds(lambda p: f"rm -r {p}", st.sampled_from(DIRS)),
    st.builds(lambda a, b: f"mv {a} {b}", st.sampled_from(PATHS + DIRS), st.sampled_from(PATHS + DIRS)),
    st.builds(lambda d: f"mkdir -p {d}", st.sampled_from(DIRS)),
    st.builds(lambda p, m: f"chmod {m} {p}", st.sampled_from(PATHS + DIRS), st.sampled_from(["600", "755", "700"])),
    st.builds(lambda p: f"cat {p}", st.sampled_from(PATHS)),
)
LISTING = ("find . -path ./.git -prune -o -printf '%p %y %m %l\\n' | LC_ALL=C sort; "
           "find . -path ./.git -prune -o -type f -print | LC_ALL=C sort | xargs -r sha256sum")
_counter = itertools.count()


def script(ops: list[str]) -> str:
    """The commands, each followed by its exit status, then a listing of the tree."""
    body = "".join(f"{o} 2>&1; echo \"rc=$?\"; " for o in ops)
    return f"{body}{LISTING}"


def diff(before: dict[str, tuple], after: dict[str, tuple]) -> set[tuple[str, ChangeKind]]:
    """What changed between two tree states (type, mode or bytes; not timestamps), outside .git."""
    out: set[tuple[str, ChangeKind]] = set()
    for path in set(before) | set(after):
        if path == ".git" or path.startswith(".git/"):
            continue
        if path not in after:
            out.add((path, ChangeKind.DELETED))
        elif path not in before:
            out.add((path, ChangeKind.CREATED))
        else:
            (t0, m0, _, d0), (t1, m1, _, d1) = before[path], after[path]
            if t0 != t1 or m0 != m1 or (d0 != d1 and not stat.S_ISDIR(t0)):
                out.add((path, ChangeKind.MODIFIED))
    return out


async def check(ops: list[str], backend: str, base: Path, template: Path) -> None:
    """The property for one command sequence, on a fresh copy of the template repository."""
    root = template.parent / f"ws{next(_counter)}"
    subprocess.run(["cp", "-a", str(template), str(root)], check=True)
    workspace = Workspace(root, watch="stat")
    argv = ["sh", "-c", script(ops)]
    env = {**os.environ, "LC_ALL": "C", "GIT_OPTIONAL_LOCKS": "0"}
    before = tree_state(root)
    async with Overlay(workspace, backend=backend, state_dir=base) as overlay:
        inside = await overlay.run(argv, env=env)
        changes = {(c.path, c.kind) for c in overlay.changes()
                   if c.kind != ChangeKind.TOUCHED and not c.path.startswith(".git")}
    assert tree_state(root) == before, "the overlay run changed the real workspace"
    assert workspace.refresh() == 0
    real = await workspace.run(argv, env=env)  # now for real, in the workspace itself
    assert inside.exit_code == real.exit_code
    assert inside.text == real.text
    assert changes == diff(before, tree_state(root))


@pytest.mark.parametrize("variant", VARIANTS)
def test_overlay_is_invisible_and_faithful(variant: str, state_base: Path, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    if variant in MODES:
        monkeypatch.setenv("TAO_SANDBOX_NAMESPACES", MODES[variant])
    caps = asyncio.run(detect(state_base))
    template = make_repo(tmp_path / "template", ignored=False)
    reason = skip_reason(variant, caps, template)
    if reason:
        pytest.skip(reason)
    backend = backend_name(variant)
    examples = 8 if variant in MODES else 15  # the mode variants share most code with their backend

    @settings(max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.lists(op, min_size=1, max_size=8))
    def prop(ops: list[str]) -> None:
        asyncio.run(check(ops, backend, state_base, template))

    prop()
