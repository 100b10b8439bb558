"""run_tests: run the project's test command (detected, or given) with a timeout; deterministic output
(durations, temporary paths, process ids and addresses masked: see tools.masking)."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import stat
import sys
from pathlib import Path
from typing import Any

from sandbox import WorkspaceView
from tools.base import Effect, Observation, ToolError, observe
from tools.masking import mask_run

DEFAULT_TEST_TIMEOUT = 300.0
_PYTHON_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", "pytest.ini", "tox.ini")
_MAKEFILES = ("GNUmakefile", "makefile", "Makefile")
_MAKE_TEST_TARGET = re.compile(r"^test\s*:(?!=)", re.MULTILINE)
_MAX_MAKEFILE_BYTES = 1 << 20  # read this much of a Makefile to look for a test target

def detect_test_command(root: Path) -> str | None:
    """The project's test command, judged from the files at its root; None when nothing says."""
    if any((root / marker).is_file() for marker in _PYTHON_MARKERS):
        return _pytest_command(root)
    if (root / "package.json").is_file():
        return "npm test"
    if (root / "Cargo.toml").is_file():
        return "cargo test"
    if (root / "go.mod").is_file():
        return "go test ./..."
    if _make_has_test_target(root):
        return "make test"
    if (root / "tests").is_dir():
        return _pytest_command(root)
    return None


def _pytest_command(root: Path) -> str:
    python = ".venv/bin/python" if (root / ".venv" / "bin" / "python").exists() else shlex.quote(sys.executable)
    return f"{python} -m pytest -q"


def _make_has_test_target(root: Path) -> bool:
    """Whether the first Makefile make would read has a `test` target (a FIFO or device is no Makefile)."""
    for name in _MAKEFILES:
        try:
            fd = os.open(root / name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                continue
            text = os.read(fd, _MAX_MAKEFILE_BYTES).decode("utf-8", errors="replace")
        finally:
            os.close(fd)
        return _MAKE_TEST_TARGET.search(text) is not None
    return False


def deterministic_env() -> dict[str, str]:
    """The caller's environment, made quiet and repeatable: no bytecode, no pytest cache, no colour."""
    env = dict(os.environ)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTEST_ADDOPTS"] = f"{env.get('PYTEST_ADDOPTS', '')} -p no:cacheprovider".strip()
    env["NO_COLOR"] = "1"
    env["GIT_OPTIONAL_LOCKS"] = "0"  # a `git status` in a test must not rewrite .git/index (a false outside change)
    return env


def _encodable(text: str) -> bool:
    """Whether text can be passed to a process (no lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


EXAMPLE_RUNNER = "python -m pytest -q"
"""The test command the tool's description shows: what a model using Tao types when it names its own."""


class RunTests:
    """Run a test command through `bash -c` in the workspace root; the process group dies on timeout."""

    name = "run_tests"
    description = (
        "Run the project's tests in the workspace root and show the exit code and output. Without command "
        f"it runs the detected test command (e.g. `{EXAMPLE_RUNNER}`); pass command to run specific tests."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "command": {"type": "string",
                        "description": f"Shell command to run instead, e.g. '{EXAMPLE_RUNNER} tests/test_x.py'."},
        },
        "required": [],
        "additionalProperties": False,
    }
    effect = Effect.SANDBOXED
    timeout_grace = 30.0  # it stops its own command at `timeout`; run_tool waits this much longer

    def __init__(self, timeout: float = DEFAULT_TEST_TIMEOUT, default_command: str | None = None) -> None:
        self.timeout = timeout
        self.default_command = default_command

    def command_for(self, workspace: WorkspaceView) -> str | None:
        return self.default_command or detect_test_command(workspace.root)

    async def run(self, args: dict[str, Any], workspace: WorkspaceView) -> Observation:
        command = (args.get("command") or "").strip() or await asyncio.to_thread(self.command_for, workspace)
        if command and "\0" in command:
            raise ToolError("command contains a NUL byte, which no shell command can hold; remove it")
        if command and not _encodable(command):
            raise ToolError("command contains a lone surrogate (an unpaired \\ud800-\\udfff escape), which cannot "
                            "be passed to a shell; remove it")
        if not command:
            raise ToolError(
                "no command given and no test command detected in the workspace (looked for pyproject.toml, "
                "setup.py, setup.cfg, pytest.ini, tox.ini, package.json, Cargo.toml, go.mod, a Makefile with "
                "a test target, a tests/ folder); pass command, e.g. 'python -m pytest -q'"
            )
        # Through the workspace, so that inside an Overlay the tests run in its copy-on-write view.
        result = await workspace.run(["bash", "-c", command], timeout=self.timeout, env=deterministic_env())
        text = f"$ {command}\n{mask_run(result.text, str(workspace.root))}"  # what varies run to run: masking.py
        if not text.endswith("\n"):
            text += "\n"
        if result.timed_out:
            text += f"[timed out after {self.timeout:g} s; the process group was killed]"
            return observe(text, is_error=True, extra_cut=result.dropped_bytes, command=command, timed_out=True)
        text += f"[exit code {result.exit_code}]"
        return observe(text, exit_code=result.exit_code, extra_cut=result.dropped_bytes,
                       command=command, timed_out=False)
