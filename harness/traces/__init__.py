"""Trajectory importers: other agents' runs (and Tao's own) as lists of Tao events.

    load_sessions(src, fmt=None, report) -> Iterator[Imported]

`src` is a file or a directory (searched recursively); `fmt` is one of FORMATS, or None to recognise
each file by its name and first bytes. Unknown or damaged records go to `report.skipped`, never fatal.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

from harness import jsonl
from harness.traces import claude_code, codex, mini_swe_agent, swe_agent, tao
from harness.traces.common import Imported, ImportReport, write_session

FORMATS: dict[str, ModuleType] = {"mini-swe-agent": mini_swe_agent, "swe-agent": swe_agent,
                                   "claude-code": claude_code, "codex": codex, "tao": tao}
_SUFFIXES = (".traj.json", ".traj", ".jsonl", ".json")

__all__ = ["FORMATS", "Imported", "ImportReport", "detect", "load_sessions", "trajectory_files", "write_session"]


def detect(path: Path) -> str | None:
    """The format of one file, from its name and first 4 kB; None when it is none of FORMATS (or unreadable)."""
    try:
        head = jsonl.read_regular(path, head=4096).decode("utf-8", errors="replace").removeprefix("\ufeff")
    except OSError:
        return None
    for name in ("tao", "codex", "claude-code", "mini-swe-agent", "swe-agent"):
        if FORMATS[name].sniff(path, head):
            return name
    return None


def trajectory_files(src: Path) -> list[Path]:
    """The files under `src` (or `src` itself) that may hold trajectories, in a stable order.

    A path given by itself is kept whatever it is (the importer says why it cannot read it); in a folder, only
    the names of trajectory files count, and of those what is no regular file is kept too, to be reported."""
    if not src.is_dir():
        return [src]
    return sorted(p for p in src.rglob("*") if p.name.endswith(_SUFFIXES) and not p.is_dir())


def load_sessions(src: Path, fmt: str | None = None, report: ImportReport | None = None) -> Iterator[Imported]:
    """Every session found under `src`, as Tao events. A file that cannot be imported is skipped with a message in
    `report`, and never stops the others."""
    report = report if report is not None else ImportReport()
    for path in trajectory_files(src):
        if (problem := jsonl.problem(path)) is not None:
            report.skip(str(path), problem)
            continue
        name = fmt or detect(path)
        if name is None:
            if path.suffix != ".json" or path.name.endswith(".traj.json"):
                report.skip(str(path), "not a known trajectory format")
            continue
        yield from _load_one(path, name, report)


def _load_one(path: Path, name: str, report: ImportReport) -> list[Imported]:
    """The sessions of one file; an importer's unforeseen failure skips the file (reported) instead of the import."""
    try:
        sessions = FORMATS[name].load(path, report)
    except (Exception, RecursionError) as exc:  # one bad file must not stop a folder
        report.failed(str(path), exc)
        return []
    for session in sessions:
        report.sessions += 1
        report.actions += sum(1 for e in session.events if e.type == "tool_call")
    return sessions
