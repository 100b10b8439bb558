"""What a fidelity case's worlds leave behind: the place a case lives, its tree built fresh, snapshots of the
tree and of the canaries outside it, and the differences between two snapshots.

    places = Places(base, token, port)   # the same absolute paths for every world of every case
    build(case, places)                  # a fresh copy of the case's tree
    before = snapshot(places)            # every path's facts, and which paths are hard links of which
    diff_trees(snapshot(places), before) # one line a difference, the first snapshot's value first
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import shutil
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.bench.fidelity_cases import ESCAPE_MARK, Case


@dataclass(frozen=True)
class Places:
    """Where a case lives: the same absolute paths for both worlds of every case."""

    base: Path
    token: str  # prefix of the case's canary files in the real /tmp and the state base
    port: int = 0  # the loopback server's
    trash: Trash | None = field(default=None, compare=False)  # where old trees go to be deleted

    @property
    def root(self) -> Path:
        """The case root: `ws/`, `out/` and `home/` live in it."""
        return self.base / "case"

    @property
    def ws(self) -> Path:
        """The workspace."""
        return self.root / "ws"

    @property
    def state(self) -> Path:
        """The overlay state base of the run (TAO_OVERLAY_DIR)."""
        return self.base / "overlays"

    def fill(self, value: Any) -> Any:
        """`value` with the placeholders of fidelity_cases replaced, in every string, key and item.

        Through JSON text, so that arguments nested hundreds deep cost no Python recursion of the bench's own
        (the paths filled in hold no character JSON escapes)."""
        text = json.dumps(value)
        for name, filled in (("%WSREL%", str(self.ws).lstrip("/")), ("%WS%", str(self.ws)),
                             ("%OUT%", str(self.root / "out")), ("%HOME%", str(self.root / "home")),
                             ("%TMP%", f"/tmp/{self.token}"), ("%TOKEN%", self.token), ("%STATE%", str(self.state)),
                             ("%PORT%", str(self.port)), ("%MARK%", ESCAPE_MARK)):
            text = text.replace(name, filled)
        return json.loads(text)

    def canaries(self) -> list[tuple[str, Path]]:
        """The case's files in the real /tmp and in the overlay state base, with the names they are shown by."""
        found = []
        for folder, shown in ((Path("/tmp"), "%TMP%"), (self.state, "%STATE%/%TOKEN%")):
            for name in sorted(os.listdir(folder)) if folder.is_dir() else []:
                if name.startswith(self.token):
                    found.append((shown + name[len(self.token):], folder / name))
        return found


def remove(path: Path) -> None:
    """Delete a file or a whole tree, whatever modes a test left on it."""
    if not os.path.lexists(path):
        return
    if path.is_symlink() or not path.is_dir():
        path.unlink()
        return

    def fix(func: Any, failed: str, _exc: Any) -> None:
        """Open up what a test locked (modes) and delete it again."""
        os.chmod(os.path.dirname(failed), 0o700)
        if os.path.isdir(failed) and not os.path.islink(failed):
            os.chmod(failed, 0o700)
            shutil.rmtree(failed, onerror=fix)
        else:
            os.unlink(failed)

    shutil.rmtree(path, onerror=fix)


class Trash:
    """Deletes old case trees in a thread of its own, so the next case need not wait for it."""

    def __init__(self, base: Path) -> None:
        """Start the deleting thread; trees wait under `base/trash`."""
        self.base, self.count = base / "trash", 0
        self.base.mkdir(parents=True, exist_ok=True)
        self.queue: queue.Queue[Path | None] = queue.Queue()
        self.thread = threading.Thread(target=self._work, daemon=True)
        self.thread.start()

    def put(self, path: Path) -> None:
        """Move `path` out of the way at once; it is deleted later."""
        if os.path.lexists(path):
            self.count += 1
            path.rename(self.base / str(self.count))
            self.queue.put(self.base / str(self.count))

    def _work(self) -> None:
        """Delete what is put here until told to stop (None)."""
        while (path := self.queue.get()) is not None:
            remove(path)

    def close(self) -> None:
        """Wait until everything put here is deleted."""
        self.queue.put(None)
        self.thread.join()
        remove(self.base)


def clear(places: Places) -> None:
    """Remove the case root and the case's canary files."""
    if places.trash is not None:
        places.trash.put(places.root)
    remove(places.root)
    for _, path in places.canaries():
        remove(path)


def build(case: Case, places: Places) -> None:
    """A fresh copy of the case's tree at the case root."""
    clear(places)
    places.root.mkdir(parents=True)
    folders = []
    for entry in case.tree:
        path, data = places.root / entry.path, places.fill(entry.data)
        if entry.type == "dir":
            path.mkdir(parents=True, exist_ok=True)
            folders.append((path, entry.mode))
        elif entry.type == "file":
            path.write_bytes(data.encode("utf-8", "surrogateescape"))
            path.chmod(entry.mode)
        elif entry.type == "symlink":
            os.symlink(data, path)
        elif entry.type == "hardlink":
            os.link(places.root / data, path)
    for path, mode in reversed(folders):
        path.chmod(mode)


@dataclass(frozen=True)
class Snapshot:
    """Every path of the case root and the canaries: its facts, and the groups of hard-linked paths."""

    entries: dict[str, tuple[Any, ...]]
    links: tuple[tuple[str, ...], ...]


FIELDS = {"file": ("type", "mode", "uid", "gid", "nlink", "bytes"), "symlink": ("type", "target", "uid", "gid")}


def facts(path: Path, st: os.stat_result) -> tuple[Any, ...]:
    """What is compared of one path (never times, never a directory's size)."""
    owner = (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)
    if stat.S_ISREG(st.st_mode):
        data = path.read_bytes()
        return ("file", *owner, st.st_nlink, data if len(data) <= 1 << 20 else hashlib.sha256(data).hexdigest())
    if stat.S_ISLNK(st.st_mode):
        return ("symlink", os.readlink(path), st.st_uid, st.st_gid)
    kind = "dir" if stat.S_ISDIR(st.st_mode) else stat.filemode(st.st_mode)[0]
    return (kind, *owner, st.st_rdev if kind in "bc" else 0)


def snapshot(places: Places) -> Snapshot:
    """The case root (`ws/`, `out/`, `home/`) and the canaries, without following any link."""
    entries: dict[str, tuple[Any, ...]] = {}
    inodes: dict[tuple[int, int], list[str]] = {}
    stack = [(name, places.root / name) for name in sorted(os.listdir(places.root))] if places.root.is_dir() else []
    stack += places.canaries()
    while stack:
        key, path = stack.pop()
        st = os.lstat(path)
        entries[key] = facts(path, st)
        if stat.S_ISDIR(st.st_mode):
            stack += [(f"{key}/{name}", path / name) for name in os.listdir(path)]
        elif st.st_nlink > 1:
            inodes.setdefault((st.st_dev, st.st_ino), []).append(key)
    return Snapshot(entries, tuple(sorted(tuple(sorted(g)) for g in inodes.values() if len(g) > 1)))


def excerpt(a: Any, b: Any, width: int = 36) -> str:
    """Where two values first differ, shown compactly: `at 12: 'abc…' vs 'abd…'`."""
    if not isinstance(a, (str, bytes)) or not isinstance(b, (str, bytes)) or type(a) is not type(b):
        return f"{a!r} vs {b!r}"[:4 * width]
    at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    start = max(0, at - width // 3)
    return f"at {at}: {a[start:start + width]!r} vs {b[start:start + width]!r}"


def diff_trees(a: Snapshot, b: Snapshot, names: tuple[str, str] = ("on", "off")) -> list[str]:
    """Every way two snapshots differ, one line a path (the first world's value first)."""
    lines = []
    for key in sorted(a.entries.keys() | b.entries.keys()):
        x, y = a.entries.get(key), b.entries.get(key)
        if x == y:
            continue
        if x is None or y is None:
            only = x or y
            assert only is not None  # x == y when both are missing, and that key was skipped above
            lines.append(f"{key}: only in {names[0] if y is None else names[1]} ({only[0]})")
            continue
        fields = FIELDS.get(x[0], ("type", "mode", "uid", "gid", "rdev")) if x[0] == y[0] else ("type",)
        for name, u, v in zip(fields, x, y):
            if u != v:
                lines.append(f"{key}: {name} {excerpt(u, v) if name in ('bytes', 'target') else f'{u!r} vs {v!r}'}")
    if a.links != b.links:
        lines.append(f"hard links: {list(a.links)} vs {list(b.links)}")
    return lines
