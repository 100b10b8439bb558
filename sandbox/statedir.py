"""Where overlay state lives on disk, and who owns each overlay.

Every overlay has a directory `<base>/<id>/` holding `owner.json` (pid, process start time, boot id,
workspace, backend) and the backend's layers: `upper/` and `work/` for overlayfs, `view/` for the
git-worktree and copy backends, plus `tmp/` and `vartmp/` that become the run's private /tmp and
/var/tmp. The base is, in order of preference:

    $TAO_OVERLAY_DIR
    $XDG_CACHE_HOME/tao/overlays     (default ~/.cache/tao/overlays: on disk, not in RAM)
    /var/tmp/tao-overlays-<uid>

skipping any base that lies inside the workspace (overlayfs refuses overlapping layers, and a copy
would copy itself). `sandbox.cleanup.sweep` removes directories whose owner process is gone.
"""

from __future__ import annotations

import json
import os
import logging
import secrets
import stat
import time
from pathlib import Path

OWNER_FILE = "owner.json"
log = logging.getLogger(__name__)


def candidate_bases() -> list[Path]:
    """Bases to try, best first (see the module docstring)."""
    out: list[Path] = []
    if env := os.environ.get("TAO_OVERLAY_DIR"):
        out.append(Path(env))
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    out.append(Path(cache) / "tao" / "overlays")
    out.append(Path("/var/tmp") / f"tao-overlays-{os.getuid()}")
    return [p.expanduser().absolute() for p in out]


def overlaps(a: Path, b: Path) -> bool:
    """True if one path is the other or lies inside it."""
    a, b = Path(os.path.realpath(a)), Path(os.path.realpath(b))
    return a == b or a in b.parents or b in a.parents


def choose_base(root: Path, explicit: Path | None = None) -> Path:
    """The state base to use for overlays of `root`; created with mode 0700 if missing."""
    bases = [explicit] if explicit is not None else candidate_bases()
    for base in bases:
        if overlaps(base, root):
            continue
        try:
            base.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError:
            continue
        return Path(os.path.realpath(base))
    tried = ", ".join(str(b) for b in bases)
    raise OSError(
        f"no usable directory for overlay state (tried {tried}); they overlap the workspace {root} "
        "or cannot be created. Set TAO_OVERLAY_DIR to a writable directory outside the workspace."
    )


def boot_id() -> str:
    """This boot's id, so state from before a reboot is known to be dead."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def pid_namespace() -> str:
    """This process's pid namespace, so pids from another container are not misread."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def start_time(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot), or None if there is no such process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(raw.rsplit(")", 1)[1].split()[19])


def owner_record(root: Path, backend: str) -> dict[str, object]:
    """What owner.json says about the current process."""
    pid = os.getpid()
    return {
        "pid": pid,
        "start_time": start_time(pid),
        "boot_id": boot_id(),
        "pid_ns": pid_namespace(),
        "root": str(root),
        "backend": backend,
        "created": time.time(),
    }


def new_state_dir(base: Path, root: Path, backend: str) -> Path:
    """Create `<base>/<id>/` with its owner file; the id is unique and sorts by creation time."""
    name = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{secrets.token_hex(4)}"
    path = base / name
    path.mkdir(mode=0o700)
    tmp = path / (OWNER_FILE + ".tmp")
    tmp.write_text(json.dumps(owner_record(root, backend)))
    tmp.rename(path / OWNER_FILE)
    return path


def read_owner(path: Path) -> dict[str, object] | None:
    """The owner record of a state dir, or None if missing or unreadable."""
    try:
        data = json.loads((path / OWNER_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def owner_alive(owner: dict[str, object]) -> bool:
    """Is the process that created this overlay still running? Unknown owners count as alive."""
    if owner.get("boot_id") and owner["boot_id"] != boot_id():
        return False
    if owner.get("pid_ns") and owner["pid_ns"] != pid_namespace():
        return True  # another container's process: not ours to judge
    pid = owner.get("pid")
    if not isinstance(pid, int):
        return True
    started = start_time(pid)
    return started is not None and (owner.get("start_time") in (None, started))


def remove_tree(path: Path) -> bool:
    """Delete a state dir at any depth (overlayfs's mode-000 `work/work` and read-only dirs included).

    Never raises for a tree it cannot remove: it logs why and returns False, and the next sweep tries again.
    """
    try:
        _remove(path)
    except OSError as exc:
        log.warning("could not remove overlay state %s (%s); it will be swept later", path, exc)
        return False
    return True


def _remove(path: Path) -> None:
    """Depth-first removal holding one directory descriptor at a time (no recursion, no long paths)."""
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            os.unlink(path)
            return
    except FileNotFoundError:
        return
    names: list[str] = []  # from `path` down to the directory `fd` is open on
    fd = _open_dir(str(path), None)
    try:
        while True:
            sub = _unlink_all_but_a_dir(fd)
            if sub is not None:
                child = _open_dir(sub, fd)
                os.close(fd)
                fd = child
                names.append(sub)
                continue
            if not names:
                break
            parent = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = parent
            os.rmdir(names.pop(), dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(path)


def _open_dir(name: str, dir_fd: int | None) -> int:
    """Open a directory without following a symlink, making it readable and writable for us first."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except PermissionError:
        os.chmod(name, stat.S_IRWXU, dir_fd=dir_fd)
        fd = os.open(name, flags, dir_fd=dir_fd)
    mode = os.fstat(fd).st_mode
    if mode & stat.S_IRWXU != stat.S_IRWXU:
        os.fchmod(fd, stat.S_IMODE(mode) | stat.S_IRWXU)
    return fd


def _unlink_all_but_a_dir(fd: int) -> str | None:
    """Unlink every non-directory in the directory `fd`; return a subdirectory's name, or None if none is left."""
    with os.scandir(fd) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                return entry.name
            try:
                os.unlink(entry.name, dir_fd=fd)
            except FileNotFoundError:
                pass
    return None
