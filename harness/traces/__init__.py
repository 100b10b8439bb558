"""Trajectory importers: other agents' runs (and Tao's own) as lists of Tao events.

    load_sessions(src, fmt=None, report) -> Iterator[Imported]

`src` is a file or a directory (searched recursively); `fmt` is one of FORMATS, or None to recognise
each file by its name and first bytes. Unknown or damaged records go to `report.skipped`, never fatal.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

from harness.traces import claude_code, mini_swe_agent, swe_agent, tao
from harness.traces.common import Imported, ImportReport, write_session

FORMATS: dict[str, ModuleType] = {"mini-swe-agent": mini_swe_agent, "swe-agent": swe_agent,
                                   "claude-code": claude_code, "tao": tao}
_SUFFIXES = (".traj.json", ".traj", ".jsonl", ".json")

__all__ = ["FORMATS", "Imported", "ImportReport", "detect", "load_sessions", "trajectory_files", "write_session"]


def detect(path: Path) -> str | None:
    """The format of one file, from its name and first 4 kB; None when it is none of FORMATS."""
    try:
        with path.open(encoding="utf-8", errors="replace") as handle:
            head = handle.read(4096)
    except OSError:
        return None
    for name in ("tao", "claude-code", "mini-swe-agent", "swe-agent"):
        if FORMATS[name].sniff(path, head):
            return name
    return None


def trajectory_files(src: Path) -> list[Path]:
    """The files under `src` (or `src` itself) that may hold trajectories, in a stable order."""
    if src.is_file():
        return [src]
    return sorted(p for p in src.rglob("*") if p.is_file() and p.name.endswith(_SUFFIXES))


def load_sessions(src: Path, fmt: str | None = None, report: ImportReport | None = None) -> Iterator[Imported]:
    """Every session found under `src`, as Tao events."""
    report = report if report is not None else ImportReport()
    for path in trajectory_files(src):
        name = fmt or detect(path)
        if name is None:
            if path.suffix != ".json" or path.name.endswith(".traj.json"):
                report.skip(str(path), "not a known trajectory format")
            continue
        for session in FORMATS[name].load(path, report):
            report.sessions += 1
            report.actions += sum(1 for e in session.events if e.type == "tool_call")
            yield session
