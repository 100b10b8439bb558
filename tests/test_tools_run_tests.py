"""run_tests on tiny real projects: command detection, exit codes, masked durations, timeouts."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from sandbox import Workspace
from tools import RunTests, run_tool
from tools.masking import mask_durations
from tools.run_tests import deterministic_env, detect_test_command

PYTEST = f"{sys.executable} -m pytest -q"


def make_project(root: Path, files: dict[str, str]) -> Workspace:
    root.mkdir(parents=True, exist_ok=True)
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    return Workspace(root)


@pytest.mark.parametrize(("files", "expected"), [
    ({"pyproject.toml": "[project]\nname='x'\n"}, PYTEST),
    ({"setup.py": ""}, PYTEST),
    ({"setup.cfg": ""}, PYTEST),
    ({"pytest.ini": ""}, PYTEST),
    ({"tox.ini": ""}, PYTEST),
    ({"package.json": "{}"}, "npm test"),
    ({"Cargo.toml": ""}, "cargo test"),
    ({"go.mod": "module x\n"}, "go test ./..."),
    ({"Makefile": "build:\n\techo b\n\ntest: build\n\techo t\n"}, "make test"),
    ({"Makefile": "build:\n\techo b\nTEST := 1\n"}, None),
    ({"tests/test_x.py": ""}, PYTEST),
    ({"package.json": "{}", "tests/x.test.js": ""}, "npm test"),
    ({"README.md": "hi"}, None),
])
def test_detect_test_command(tmp_path, files, expected):
    workspace = make_project(tmp_path / "p", files)
    assert detect_test_command(workspace.root) == expected


def test_detect_prefers_the_workspace_venv(tmp_path):
    workspace = make_project(tmp_path / "p", {"pyproject.toml": "", ".venv/bin/python": ""})
    assert detect_test_command(workspace.root) == ".venv/bin/python -m pytest -q"


def test_mask_durations():
    assert mask_durations("1 failed, 2 passed in 0.12s\n") == "1 failed, 2 passed in <time>\n"
    assert (mask_durations("==== 3 passed, 1 warning in 65.20s (0:01:05) ====")
            == "==== 3 passed, 1 warning in <time> ====")
    assert mask_durations("no tests ran in 0.01s") == "no tests ran in <time>"
    assert mask_durations("assert 'ran in 3s' == x") == "assert 'ran in 3s' == x"  # not a summary line
    assert mask_durations("test result: ok. 2 passed; 0 failed; finished in 0.00s") == \
        "test result: ok. 2 passed; 0 failed; finished in <time>"
    assert mask_durations("ok  \texample.com/m\t0.003s\n--- FAIL: TestX (0.01s)") == \
        "ok  \texample.com/m\t<time>\n--- FAIL: TestX (<time>)"


def test_environment_is_quiet(monkeypatch):
    monkeypatch.setenv("PYTEST_ADDOPTS", "-x")
    env = deterministic_env()
    assert env["PYTEST_ADDOPTS"] == "-x -p no:cacheprovider"
    assert env["PYTHONDONTWRITEBYTECODE"] == "1" and env["NO_COLOR"] == "1"


TINY = {
    "pyproject.toml": "[project]\nname = 'tiny'\nversion = '0'\n",
    "calc.py": "def add(a, b):\n    return a - b\n",
    "tests/test_calc.py": "from calc import add\n\ndef test_add():\n    assert add(2, 2) == 4\n\n"
                          "def test_ok():\n    assert True\n",
}


async def test_failing_pytest_project(tmp_path):
    workspace = make_project(tmp_path / "tiny", TINY)
    (workspace.root / "conftest.py").write_text("")  # puts the root on sys.path for `import calc`
    first = await run_tool(RunTests(), {}, workspace)
    assert not first.is_error
    assert first.exit_code == 1
    assert first.data == {"command": PYTEST, "timed_out": False}
    assert first.text.startswith(f"$ {PYTEST}\n")
    assert "1 failed, 1 passed in <time>" in first.text
    assert first.text.endswith("[exit code 1]")
    second = await run_tool(RunTests(), {}, workspace)
    assert second == first  # byte-identical: durations masked, no cache
    leftovers = {p.name for p in workspace.root.rglob("*")}
    assert ".pytest_cache" not in leftovers and "__pycache__" not in leftovers


async def test_passing_command_and_explicit_command(tmp_path):
    workspace = make_project(tmp_path / "tiny", {**TINY, "conftest.py": ""})
    obs = await run_tool(RunTests(), {"command": f"{PYTEST} tests/test_calc.py::test_ok"}, workspace)
    assert obs.exit_code == 0 and "1 passed in <time>" in obs.text and obs.text.endswith("[exit code 0]")


async def test_default_command_from_constructor(tmp_path):
    workspace = make_project(tmp_path / "p", {"README.md": ""})
    obs = await run_tool(RunTests(default_command="echo custom; exit 3"), {}, workspace)
    assert obs.exit_code == 3 and "custom" in obs.text and obs.data["command"] == "echo custom; exit 3"


async def test_nothing_detected_is_a_clear_error(tmp_path):
    workspace = make_project(tmp_path / "p", {"README.md": ""})
    obs = await run_tool(RunTests(), {}, workspace)
    assert obs.is_error
    assert "no test command detected" in obs.text and "pass command" in obs.text


async def test_timeout_kills_the_process_group(tmp_path):
    workspace = make_project(tmp_path / "p", {})
    pidfile = workspace.root / "child.pid"
    obs = await run_tool(RunTests(timeout=1), {"command": f"sleep 60 & echo $! > {pidfile}; wait"}, workspace)
    assert obs.is_error and obs.exit_code is None
    assert obs.text.endswith("[timed out after 1 s; the process group was killed]")
    assert obs.data["timed_out"] is True
    assert _dies(int(pidfile.read_text()))


async def test_huge_output_is_truncated_with_a_note(tmp_path):
    workspace = make_project(tmp_path / "p", {})
    obs = await run_tool(RunTests(), {"command": "seq 1 2000000"}, workspace)
    assert obs.exit_code == 0
    assert obs.truncated_chars > 0
    assert "more bytes cut from the middle" in obs.text
    assert obs.text.startswith("$ seq 1 2000000\n1\n2\n")
    assert obs.text.endswith("1999999\n2000000\n[exit code 0]")


def _dies(pid: int, patience: float = 10.0) -> bool:
    """True once the process is gone; SIGKILL is delivered asynchronously, so give it a moment."""
    deadline = time.monotonic() + patience
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _alive(pid: int) -> bool:
    """True while the process exists and is not a zombie waiting to be reaped."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


async def test_speculative_run_in_an_overlay_matches_the_real_run(tmp_path):
    """The guarantee speculation needs: same observation in an Overlay, and the real tree untouched."""
    import sandbox

    overlay_class = getattr(sandbox, "Overlay", None)
    if overlay_class is None:
        pytest.skip("sandbox.Overlay is not available in this tree")
    workspace = make_project(tmp_path / "p", {
        "pyproject.toml": TINY["pyproject.toml"],
        "tests/test_w.py": "def test_w():\n    open('made.txt', 'w').write('x')\n    assert 1 == 2\n",
    })
    try:
        async with overlay_class(workspace) as overlay:
            speculative = await run_tool(RunTests(), {}, overlay)
    except getattr(sandbox, "BackendUnavailable", RuntimeError) as exc:
        pytest.skip(f"no overlay backend here: {exc}")
    assert not (workspace.root / "made.txt").exists()
    real = await run_tool(RunTests(), {}, workspace)
    assert speculative == real
    assert (workspace.root / "made.txt").exists()


async def test_a_fifo_named_makefile_does_not_hold_up_detection(tmp_path):
    import os

    root = tmp_path / "ws"
    root.mkdir()
    os.mkfifo(root / "Makefile")
    obs = await run_tool(RunTests(timeout=30), {}, Workspace(root))
    assert obs.is_error and "no test command detected" in obs.text
