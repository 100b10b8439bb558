"""Find and remove overlays left behind by a process that crashed or was killed.

Mounts need no clean-up: they live in private namespaces that die with their processes (every sandbox
process gets SIGKILL when its parent dies). What remains is the state directory; it is removed when
its owner (pid + start time + boot id, see `sandbox.statedir`) is gone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from sandbox.statedir import candidate_bases, owner_alive, read_owner, remove_tree

ORPHAN_GRACE_SECONDS = 60.0  # a dir without owner.json may be one being created right now
_swept: set[Path] = set()


@dataclass(frozen=True)
class Leftover:
    """A state directory whose owner is gone."""

    path: Path
    pid: int | None
    root: str | None


def find_leftovers(base: Path) -> list[Leftover]:
    """State dirs under `base` whose owner process no longer runs."""
    found: list[Leftover] = []
    if not base.is_dir():
        return found
    for path in sorted(base.iterdir()):
        if not path.is_dir():
            continue
        owner = read_owner(path)
        if owner is None:
            if not _young(path):
                found.append(Leftover(path, None, None))
            continue
        if not owner_alive(owner):
            pid = owner.get("pid")
            root = owner.get("root")
            found.append(Leftover(path, pid if isinstance(pid, int) else None, root if isinstance(root, str) else None))
    return found


def _young(path: Path) -> bool:
    """True if a dir was touched within the grace period (its owner file may still be on its way)."""
    try:
        return time.time() - path.stat().st_mtime < ORPHAN_GRACE_SECONDS
    except OSError:
        return True


def sweep(base: Path | None = None) -> list[Leftover]:
    """Remove every leftover under `base` (default: every candidate base); return what was removed.

    A leftover that cannot be removed is skipped (remove_tree logs why) and tried again by the next sweep."""
    removed: list[Leftover] = []
    for b in [base] if base is not None else candidate_bases():
        try:
            leftovers = find_leftovers(b)
        except OSError:
            continue  # an unreadable base holds nothing we could remove
        removed.extend(leftover for leftover in leftovers if remove_tree(leftover.path))
    return removed


def sweep_once(base: Path) -> list[Leftover]:
    """`sweep(base)` the first time a process uses `base`; later calls do nothing."""
    if base in _swept:
        return []
    _swept.add(base)
    return sweep(base)
