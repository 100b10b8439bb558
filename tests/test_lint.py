"""The linters `make test` runs: ruff, mypy and import-linter, each as configured in pyproject.toml, must pass."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

BIN = Path(sys.executable).parent

LINTERS = {
    # id: (module that must be importable, command line)
    "ruff": ("ruff", [sys.executable, "-m", "ruff", "check", "--no-fix", "--output-format", "concise", "."]),
    "mypy": ("mypy", [sys.executable, "-m", "mypy"]),
    "import-linter": ("importlinter", [str(BIN / "lint-imports"), "--no-logo"]),
}


@pytest.mark.parametrize("name", list(LINTERS))
def test_linter_passes(name: str) -> None:
    module, command = LINTERS[name]
    if importlib.util.find_spec(module) is None:
        pytest.fail(f"{name} is not installed in {BIN.parent}; run `make install` (it comes with the test extra)")
    # The code checked is this checkout's, not whichever one the virtualenv's editable install points at.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, f"{name} found problems ({' '.join(command)}):\n{result.stdout}{result.stderr}"
