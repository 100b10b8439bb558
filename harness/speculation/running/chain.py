"""Speculation past a mutating call: a file edit the model has fully streamed is applied in an overlay,
and the call predicted to follow it (the test run) starts there, while the model is still talking.

The rule. The follower's result is served only if
1. the real call is the streamed edit exactly (same tool, JSON-equal arguments), taken at the workspace
   version the chain started from (the file's new bytes were computed from that version's tree, and the
   overlay write does not depend on whether the real edit came first: it replaces the whole file);
2. the real edit succeeded and left every path the overlay edit wrote with the same type, mode and
   bytes (`differs`, checked when it lands and again when the follower is served); the version the real
   edit bumped to becomes the follower's version;
3. the next real call is the follower exactly, at that version: from 2 on it is an ordinary sandboxed
   speculation, promoted as the scheduler promotes any (untainted, its changes applied by
   `sandbox.promote.apply_changes`, less the edit's own paths the follower left alone: `untouched`).
Anything else (another call first, the edit failing for real or landing otherwise, the tree changing)
discards it, and spec_discard says why. Never a second mutating call: followers are sandboxed tools
only (a pure tool reads the real tree from Tao's own process, which does not see the overlay). Only
edit_file and write_file are chained: they say what they will write (`preview`), a shell command does
not. The overlay edit itself is a short write run inside the overlay, whatever its backend.

Known limits: the overlay's lower layer is the live tree, so a follower running while the real edit
lands could list its hidden temporary file (`.tao-*.tmp`) for that instant; and a change made behind
Tao's back while the real edit runs counts as the edit's own, as for every mutating call.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.events import ToolCall, ToolResult
from harness.protocol import ParsedCall
from harness.speculation.prediction.patterns import Analyzer, Candidate
from harness.vocabulary import Moment
from sandbox.changes import Change, ChangeKind
from sandbox.overlay import Overlay
from tools.base import Effect, Tool, ToolError
from tools.editing import EditFile, WriteFile
from tools.placing import current_umask

# Run inside the overlay (python -I -S: nothing but the standard library): write stdin's bytes to argv[1],
# folders first, with the file mode argv[2] and the umask argv[3] the real tool's own writes would use.
_WRITE = """import os, sys
path, mode, mask = sys.argv[1], int(sys.argv[2], 8), int(sys.argv[3], 8)
os.umask(mask)
if os.path.dirname(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
data = memoryview(sys.stdin.buffer.read())
while data:
    data = data[os.write(fd, data):]
os.fchmod(fd, mode)
os.close(fd)
"""


class ChainBroken(RuntimeError):
    """The edit could not be applied in the overlay: the follower is not run."""


@dataclass(frozen=True)
class Written:
    """What the overlay holds at one path the edit wrote."""

    type: str  # "file" or "dir"
    mode: int
    digest: str | None  # sha256 of a file's bytes
    mtime_ns: int


@dataclass
class Edit:
    """The streamed edit a chained speculation runs after, and what became of it."""

    name: str
    arguments: dict[str, Any]
    exact: str  # the call the real one must be (`exact_call`)
    path: str  # workspace-relative
    data: bytes
    mode: int
    footprint: dict[str, Written] | None = None  # path -> what the overlay holds; None until applied there
    call_id: str | None = None  # the real call running it, once taken
    landed: bool = False  # the real edit left the tree as the overlay: the follower's version is the new one

    @property
    def pending(self) -> bool:
        """The real edit has not landed yet: the follower may not be served."""
        return not self.landed


def plan(tool: Tool, args: dict[str, Any], exact: str, workspace: Any) -> Edit | None:
    """The edit a call would make, if it can be chained: a file edit that would succeed now, on a plain
    workspace-relative path (no symlink, no `..`: the overlay write goes by the same name)."""
    if not isinstance(tool, (EditFile, WriteFile)):
        return None
    try:
        rel, data, mode = tool.preview(args, workspace)
    except (ToolError, OSError, ValueError):
        return None
    if posixpath.normpath(str(args["path"])) != rel or rel.startswith(".."):
        return None
    return Edit(tool.name, args, exact, rel, data, mode)


def followers(analyzer: Analyzer, call: ParsedCall, edit: Edit, version: int, step: int,
              tools: dict[str, Tool], k: int) -> list[Candidate]:
    """The analyzer's candidates for the call after the edit, as if it had run and succeeded; sandboxed only."""
    seen = [ToolCall(0.0, step, call.call_id, edit.name, edit.arguments, Effect.MUTATING.value),
            ToolResult(0.0, step, call.call_id, edit.name, f"Wrote {edit.path}.", workspace_version=version + 1)]
    return [c for c in analyzer.ahead(seen).predict(Moment.A, k=k)
            if (tool := tools.get(c.name)) is not None and tool.effect is Effect.SANDBOXED]


async def apply(edit: Edit, overlay: Overlay) -> None:
    """Write the edit in the overlay and note what it holds there (ChainBroken if the write failed)."""
    argv = [sys.executable, "-I", "-S", "-c", _WRITE, edit.path, oct(edit.mode), oct(current_umask())]
    result = await overlay.run(argv, stdin=edit.data, timeout=30.0)
    if result.exit_code != 0:
        raise ChainBroken(f"the overlay write of {edit.path} failed ({result.exit_code}): {result.output[-300:]!r}")
    edit.footprint = {change.path: _written(change.source) for change in overlay.changes()
                      if change.source is not None}


def _written(source: Path) -> Written:
    """What an overlay entry holds."""
    info = os.lstat(source)
    digest = hashlib.sha256(source.read_bytes()).hexdigest() if stat.S_ISREG(info.st_mode) else None
    kind = "file" if stat.S_ISREG(info.st_mode) else "dir" if stat.S_ISDIR(info.st_mode) else "other"
    return Written(kind, stat.S_IMODE(info.st_mode), digest, info.st_mtime_ns)


def differs(edit: Edit, root: Path) -> str | None:
    """Why the real tree, after the real edit, is not what the overlay holds at the edit's paths (None: it is,
    or the overlay does not hold the edit yet: then the file alone is checked against what it will hold)."""
    want = {edit.path: Written("file", edit.mode, hashlib.sha256(edit.data).hexdigest(), 0)}
    for path, written in {**want, **(edit.footprint or {})}.items():
        real = root / path
        try:
            have = _written(real) if not real.is_symlink() else None
        except OSError:
            have = None
        if have is None or (have.type, have.mode, have.digest) != (written.type, written.mode, written.digest):
            return f"{path} differs"
    return None


def untouched(edit: Edit, changes: list[Change]) -> list[Change]:
    """The follower's changes to promote: the edit's own paths are left out where the follower did not touch
    them (the real edit wrote them already; their overlay times are the overlay edit's, not the real one's)."""
    footprint = edit.footprint or {}

    def own(change: Change) -> bool:
        want = footprint.get(change.path)
        if want is None or change.kind is not ChangeKind.TOUCHED or change.source is None:
            return False
        return want.type == "dir" or os.lstat(change.source).st_mtime_ns == want.mtime_ns

    return [change for change in changes if not own(change)]
