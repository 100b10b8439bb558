"""Fixtures the tests build themselves: real git repositories from the bundled example, and the virtual clock."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from harness.bench.vclock import VirtualClockLoop
from harness.engine.sim import Profile, StepModel

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

T = TypeVar("T")


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout


ENGINE_NOISE = ("Triton", "FutureWarning", "NUMA", "UserWarning", "Warning:", "Loading safetensors", "leaked")
"""Words of the libraries' warnings under vLLM, none of which may reach a user's terminal."""


def make_calc_repo(parent: Path) -> Path:
    """A committed copy of examples/calc (its failing test included) in a fresh git repository."""
    repo = parent / "calc"
    shutil.copytree(EXAMPLES / "calc", repo, ignore=shutil.ignore_patterns("__pycache__"))
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "initial")
    return repo


def virtual(main: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine on the virtual clock."""
    with asyncio.Runner(loop_factory=VirtualClockLoop) as runner:
        return runner.run(main())


def flat_profile(**limits: int) -> Profile:
    """A simulated engine whose every step takes one second, whatever it computes, at one character a token."""
    step = StepModel(base=1.0, per_seq=0.0, per_token=0.0, per_decode_pair=0.0, per_prefill_pair=0.0)
    return Profile("flat", step, chars_per_token=1.0, **limits)
