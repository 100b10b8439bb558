"""What `tao bench live` and its `--engine embedded` variant share: the model and analyzer a mode runs with, a
timed session run, the environment the recorded sessions expect, and a quantile."""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from harness.bench import recordings as recorded
from harness.bench.oracle import OracleAnalyzer
from harness.errors import UsageError
from harness.events import Event, SessionEnd
from harness.session import Session
from harness.speculation.prediction.pattern_model import (SHIPPED_MODEL, PatternModel, installed_model)
from harness.speculation.prediction.past import PAST_SECONDS
from harness.speculation.prediction.patterns import Analyzer
from harness.speculation.prediction.training import adapt
from sandbox import Workspace


def quantile(values: list[float], q: float) -> float:
    """The nearest-rank quantile (p99 of 21 values is the largest)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def model_choice(path: Path | None) -> tuple[Path | None, str]:
    """The pattern model the `on` runs load, and how it was chosen (as the live CLI chooses it); `--model none`
    for rules and online learning only."""
    if path is not None and str(path) == "none":
        return None, "none: rules and online learning only (--model none)"
    if path is not None:
        if not path.is_file():
            raise UsageError(f"--model {path} does not exist; build one with `tao traces learn DIR --out {path}`")
        return path, f"{path} (--model)"
    found = installed_model()
    if found is None:
        return None, "none: rules and online learning only (no learned model)"
    return found, f"{found} ({'shipped with Tao' if found == SHIPPED_MODEL else 'default path'})"


def analyzer_for(mode: str, session: recorded.LiveSession, model: Path | None,
                 past: Iterable[list[Event]] = ()) -> Any:
    """No analyzer (off), Tao's default setup adapted to `past` sessions (on) or not (cold), or the oracle."""
    if mode == "off":
        return None
    if mode == "oracle":
        return OracleAnalyzer(session.recording)
    learned = PatternModel.load(model) if model is not None else PatternModel()
    if mode == "on":
        adapt(learned, past, seconds=PAST_SECONDS)
    return Analyzer(learned)


async def timed_run(loop: Session, workspace: Workspace) -> tuple[SessionEnd, float]:
    """Run a session to its end, then close its workspace: how it ended and the seconds it took."""
    started = time.perf_counter()
    try:
        return await loop.run(), time.perf_counter() - started
    finally:
        workspace.close()


def bench_environment() -> None:
    """The environment the recorded sessions expect, set in this process (tools inherit it).

    `python` is the interpreter Tao runs under, as in an activated venv; pytest loads no plugins from
    it (each package's own test environment has only pytest), which also keeps Tao's own dev plugins
    from adding seconds of start-up and warnings to every test run.
    """
    bin_dir = str(Path(sys.executable).parent)
    if os.environ.get("PATH", "").split(os.pathsep)[0] != bin_dir:
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
