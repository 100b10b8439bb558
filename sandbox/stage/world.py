"""The run's file system: the real one, read-only under throwaway layers, behind a pivot_root.

Before the command starts, pid 1 of the sandbox (as real root, or as root of the run's user namespace)
mounts a size-limited tmpfs on `<state>/world` and builds the new root in it:

    /                 overlay, lowerdir=/ and its upper and work dirs on the tmpfs
    other mounts      a real file system: its own overlay with an upper on the same tmpfs (where a user
                      namespace refuses an overlay of a directory with mounts inside, a read-only
                      skeleton of it with overlays of its subdirectories); a pseudo file system:
                      a read-only bind
    /dev              a minimal tmpfs: null zero full random urandom tty bound from the host, a new
                      devpts with ptmx, a fresh tmpfs on /dev/shm, the fd links; no block device
    /proc             a fresh proc; sys, sysrq-trigger, irq, bus and fs read-only; kcore, keys and the
                      timer and scheduler dumps masked
    /sys              a read-only recursive bind
    the workspace     the backend's mount (the workspace overlay, its upper on disk to be promoted)

then pivots into it (`pivot_root(".", ".")`, a lazy unmount of the old root). In "readonly" mode (where
an overlay of / cannot be mounted) the real mounts are read-only binds and /tmp and /var/tmp fresh tmpfs.
After the run, `World.writes` lists what the run wrote outside the workspace: every file, symlink,
whiteout and new or opaque directory in the tmpfs uppers (directories merely copied up are not writes).
"""

from __future__ import annotations

import errno
import os

from .calls import (MNT_DETACH, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY, MS_BIND,
                    MS_NODEV, MS_NOEXEC, MS_NOSUID, MS_RDONLY, MS_REC, StepFailed, make_readonly, mount,
                    mount_setattr, pivot_root, unmount)

PSEUDO = frozenset({"proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "debugfs", "tracefs", "securityfs",
                    "pstore", "bpf", "mqueue", "hugetlbfs", "fusectl", "configfs", "binfmt_misc", "autofs",
                    "efivarfs", "nsfs", "selinuxfs", "rpc_pipefs", "ramfs"})
SPECIAL = ("/proc", "/sys", "/dev")
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
PROC_READONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs")
PROC_MASKED = ("kcore", "keys", "timer_list", "timer_stats", "latency_stats", "sched_debug")
PROC_MASKED_DIRS = ("acpi", "scsi", "asound")
LISTED = 8  # example paths kept for the report
COUNTED = 10000  # the walk stops counting here


def under(path: str, top: str) -> bool:
    """True if `path` is `top` or inside it."""
    return path == top or path.startswith(top.rstrip("/") + "/")


def escape_option(path: str) -> str:
    """Escape a path for an overlayfs option list (',' separates options, ':' separates layers)."""
    return path.replace("\\", "\\\\").replace(",", "\\,").replace(":", "\\:")


def unescape(field: str) -> str:
    """Undo mountinfo's octal escapes (\\040 for a space)."""
    parts = field.split("\\")
    out = [parts[0]]
    for part in parts[1:]:
        out.append(chr(int(part[:3], 8)) + part[3:] if part[:3].isdigit() else "\\" + part)
    return "".join(out)


def all_mounts() -> list[tuple[str, str, bool, bool]]:
    """(mount point, file system type, read-only, visible) of every mount, parents first; a mount is visible
    when a path lookup reaches it (not covered by a later mount on its point or on a parent's)."""
    rows = []
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            left, right = line.split(" - ", 1)
            fields = left.split()
            rows.append((fields[0], fields[1], unescape(fields[4]), right.split()[0], "ro" in fields[5].split(",")))
    top = {point: mount_id for mount_id, _, point, _, _ in rows}  # the last mount on a point covers the others
    kept: set[str] = set()
    out = []
    for mount_id, parent, point, fstype, readonly in sorted(rows, key=lambda r: (r[2] != "/", r[2].count("/"))):
        visible = top[point] == mount_id and (point == "/" or parent in kept)
        if visible:
            kept.add(mount_id)
        out.append((point, fstype, readonly, visible))
    return out


class World:
    """The new root of one run, and afterwards what the run wrote into its throwaway layers."""

    def __init__(self, spec: dict) -> None:
        self.spec = spec
        self.top = spec["world"]["dir"]
        self.root = self.top + "/root"
        self.uppers: list[tuple[str, str]] = []  # (mount point, its upper dir on the tmpfs): copy-ups are not writes
        self.fresh: list[tuple[str, int]] = []  # (mount point, descriptor) of private tmpfs: everything is a write
        self.gaps: list[str] = []  # where the run's view differs from the real one (each taints every run)
        self.top_fd = -1
        self.skeletons: list[str] = []  # tmpfs rebuilt from real directories, made read-only once built
        self.made = 0  # layers made on the tmpfs so far
        self.bound_views = spec["world"]["mode"] != "overlay"  # real data bound, not overlaid (sockets answer)

    # -- building ---------------------------------------------------------------------------------

    def build(self, fds: dict[str, str]) -> None:
        """Mount everything under the tmpfs, then pivot into it (see the module docstring)."""
        world = self.spec["world"]
        mounts = all_mounts()
        mount("tmpfs", self.top, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=0755,size={world['size']}", "world")
        self.top_fd = os.open(self.top, os.O_RDONLY | os.O_DIRECTORY)
        os.mkdir(self.root)
        private: list[str] = []
        if world["mode"] == "overlay":
            self.layered(mounts)
        else:
            self.bind("/", recursive=True)
            private = [p for p in ("/tmp", "/var/tmp") if os.path.isdir(self.root + p)]
            for path in private:
                mount("tmpfs", self.root + path, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={world['size']}",
                      "world:" + path)
        self.devices(world["shm"])
        self.proc()
        self.sys()
        self.workspace(fds, private)
        for skeleton in self.skeletons:
            make_readonly(skeleton, "world:skeleton")
        os.chdir(self.root)
        pivot_root(".", ".", "pivot")
        unmount(".", MNT_DETACH, "pivot")
        os.chdir("/")
        self.fresh = [(path, os.open(path, os.O_RDONLY | os.O_DIRECTORY)) for path in ["/dev/shm", *private]]

    def layered(self, mounts: list[tuple[str, str, bool, bool]]) -> None:
        """Every visible real mount: file systems as overlays (a write taints even where the real one is
        read-only), pseudo file systems as read-only binds."""
        skip = [m["target"] for m in self.spec["mounts"]] + [self.top, *SPECIAL]
        points = {point for point, _, _, _ in mounts if point != "/"}
        for point, fstype, _readonly, visible in mounts:
            if not visible or (point != "/" and any(under(point, s) for s in skip)):
                continue
            if fstype not in PSEUDO and os.path.isdir(point):  # read-only ones too: a socket there must not answer
                if not self.overlay(point):
                    self.split(point, points)
            else:
                self.bind(point)

    def overlay(self, point: str) -> bool:
        """An overlay of the real directory `point` with its upper on the tmpfs; False if it will not mount
        (in a user namespace overlayfs refuses a lower layer with mounts inside it)."""
        index = self.made = self.made + 1
        layer = f"{self.top}/l{index}"
        for sub in ("", "/upper", "/work"):
            os.mkdir(layer + sub)
        for options in self.spec["world"]["options"]:
            data = ",".join([f"lowerdir={escape_option(point)}", f"upperdir={escape_option(layer)}/upper",
                             f"workdir={escape_option(layer)}/work", *options])
            try:
                mount("overlay", self.root + point, "overlay", MS_NOSUID | MS_NODEV, data, "world")
            except StepFailed:
                continue
            self.uppers.append((point.rstrip("/"), f"l{index}/upper"))
            return True
        return False

    def split(self, top: str, points: set[str]) -> None:
        """Rebuild the real directory `top` as a read-only skeleton (a small tmpfs) whose entries are overlays
        of the real subdirectories, the real symlinks, and read-only binds of the real files; a subdirectory
        with mount points inside is split in turn."""
        mount("tmpfs", self.root + top, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m", "world:" + top)
        self.skeletons.append(self.root + top)
        todo = [top]
        while todo:
            here = todo.pop()
            os.chmod(self.root + here, os.stat(here).st_mode & 0o7777)
            for entry in os.scandir(here):
                real = f"{here.rstrip('/')}/{entry.name}"
                target = self.root + real
                if entry.is_symlink():
                    os.symlink(os.readlink(real), target)
                elif entry.is_dir(follow_symlinks=False):
                    os.mkdir(target)
                    if real in points:
                        continue  # a mount point: its own entry mounts it (or it is special)
                    if any(p.startswith(real + "/") for p in points):
                        todo.append(real)
                    elif not self.overlay(real):
                        self.gaps.append(f"{real} is read-only in the sandbox (no overlay would mount on it)")
                        self.bound_views = True
                        self.bind(real)
                elif entry.is_file(follow_symlinks=False):
                    os.close(os.open(target, os.O_WRONLY | os.O_CREAT, 0o644))
                    self.bind(real)

    def bind(self, point: str, *, recursive: bool = False) -> None:
        """A read-only bind of the real `point` (recursive when asked, or when a user namespace locks its
        submounts to it)."""
        target = self.root + point
        if not os.path.lexists(target):
            self.gaps.append(f"{point} is missing in the sandbox (no mount point for it)")
            return
        try:
            mount(point, target, None, MS_BIND | (MS_REC if recursive else 0), None, "world:" + point)
        except StepFailed as exc:
            if recursive or exc.err != errno.EINVAL:
                raise
            recursive = True
            mount(point, target, None, MS_BIND | MS_REC, None, "world:" + point)
        make_readonly(target, "world:" + point, recursive=recursive)

    def devices(self, shm_size: int) -> None:
        """A minimal /dev: a few character devices bound from the host, a new devpts, a fresh /dev/shm."""
        dev = self.root + "/dev"
        mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=1m", "dev")
        for name in DEVICES:
            if os.path.exists("/dev/" + name):
                os.close(os.open(f"{dev}/{name}", os.O_WRONLY | os.O_CREAT, 0o666))
                mount("/dev/" + name, f"{dev}/{name}", None, MS_BIND, None, "dev:" + name)
        os.mkdir(dev + "/pts")
        mount("devpts", dev + "/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620", "dev:pts")
        os.symlink("pts/ptmx", dev + "/ptmx")
        os.mkdir(dev + "/shm")
        mount("tmpfs", dev + "/shm", "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={shm_size}", "dev:shm")
        for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                             ("stderr", "/proc/self/fd/2")):
            os.symlink(target, f"{dev}/{name}")
        make_readonly(dev, "dev")

    def proc(self) -> None:
        """A fresh proc for the pid namespace, its kernel controls read-only and its kernel dumps masked."""
        proc = self.root + "/proc"
        mount("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None, "proc")
        for name in PROC_READONLY:
            path = f"{proc}/{name}"
            if os.path.exists(path):
                mount(path, path, None, MS_BIND | MS_REC, None, "proc:" + name)
                make_readonly(path, "proc:" + name, recursive=os.path.isdir(path))
        for name in PROC_MASKED:
            if os.path.isfile(f"{proc}/{name}"):
                mount(self.root + "/dev/null", f"{proc}/{name}", None, MS_BIND, None, "proc:" + name)
        for name in PROC_MASKED_DIRS:
            if os.path.isdir(f"{proc}/{name}"):
                mount("tmpfs", f"{proc}/{name}", "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=0",
                      "proc:" + name)

    def sys(self) -> None:
        """The host's /sys, recursively bound and read-only (its top mount alone on kernels before 5.12)."""
        target = self.root + "/sys"
        if not os.path.isdir("/sys") or not os.path.isdir(target):
            return
        mount("/sys", target, None, MS_BIND | MS_REC, None, "sys")
        attrs = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC
        err = mount_setattr(target, attrs, recursive=True)
        if err == errno.ENOSYS:
            unmount(target, MNT_DETACH, "sys")
            self.bind("/sys")
        elif err:
            raise StepFailed("sys", err, target)

    def workspace(self, fds: dict[str, str], private: list[str]) -> None:
        """The backend's mounts (the workspace overlay or view) at their paths in the new root; a mount point
        under a private tmpfs (a workspace in /tmp, in "readonly" mode) is made there."""
        for m in self.spec["mounts"]:
            target, kind = self.root + m["target"], m["type"]
            if not os.path.isdir(target) and any(under(m["target"], p) for p in private):
                os.makedirs(target)
            if not os.path.isdir(target):
                raise StepFailed(f"mount:{m['target']}", errno.ENOENT, "the mount point does not exist")
            if kind == "bind":
                mount(fds[m["source"]], target, None, MS_BIND | MS_REC, None, f"mount:{m['target']}")
                if m.get("readonly"):
                    make_readonly(target, f"mount:{m['target']}", recursive=True)
            elif kind == "overlay":
                opts = [f"lowerdir={escape_option(fds[m['lower']])}", f"upperdir={escape_option(fds[m['upper']])}",
                        f"workdir={escape_option(fds[m['work']])}", *m.get("options", [])]
                mount("overlay", target, "overlay", MS_NODEV, ",".join(opts), f"mount:{m['target']}")
            elif kind == "fuse-overlayfs":
                fuse_mount(m, target, fds)
            else:
                raise StepFailed(f"mount:{m['target']}", errno.EINVAL, f"unknown mount type {kind}")

    # -- after the run ----------------------------------------------------------------------------

    def writes(self) -> tuple[list[str], int]:
        """Up to LISTED paths the run wrote outside the workspace, and how many there were (COUNTED at most)."""
        sink = Sink()
        for point, rel in self.uppers:
            try:
                fd = os.open(rel, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=self.top_fd)
            except OSError:
                continue
            walk(fd, point, False, sink)
        for point, fd in self.fresh:
            walk(os.dup(fd), point, True, sink)
        return sink.listed, sink.total


class Sink:
    """Collects write paths: a few examples and a bounded count."""

    def __init__(self) -> None:
        self.listed: list[str] = []
        self.total = 0

    def add(self, path: str) -> None:
        """Count one written path."""
        self.total += 1
        if len(self.listed) < LISTED:
            self.listed.append(path[:300])

    @property
    def full(self) -> bool:
        """True once COUNTED paths were seen (the walk stops there)."""
        return self.total >= COUNTED


def dir_is_write(parent_fd: int, name: str) -> bool:
    """False for a directory that overlayfs merely copied up (it has an origin and is neither opaque nor
    redirected); True for one the run made, replaced or renamed (conservative when unsure)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent_fd)
    except OSError:
        return True
    try:
        names = os.listxattr(fd)
        for attr in names:
            if attr.endswith("overlay.opaque") and os.getxattr(fd, attr) == b"y":
                return True
            if attr.endswith("overlay.redirect"):
                return True
        return not any(attr.endswith("overlay.origin") for attr in names)
    except OSError:
        return True
    finally:
        os.close(fd)


def scan(fd: int, path: str, everything: bool, sink: Sink) -> list[tuple[str, bool]]:
    """Count the writes in one upper directory; return its subdirectories to visit (and if all below are writes)."""
    subdirs: list[tuple[str, bool]] = []
    with os.scandir(fd) as entries:
        for entry in entries:
            sub = f"{path}/{entry.name}"
            if not entry.is_dir(follow_symlinks=False):
                sink.add(sub)  # a file, symlink or whiteout
                continue
            written = everything or dir_is_write(fd, entry.name)
            if written:
                sink.add(sub)
            subdirs.append((entry.name, written))
    return subdirs


def walk(fd: int, prefix: str, everything: bool, sink: Sink) -> None:
    """Depth-first over an upper dir holding one descriptor at a time (any depth); closes `fd`."""
    try:
        frames = [(prefix, scan(fd, prefix, everything, sink))]
        while frames and not sink.full:
            path, pending = frames[-1]
            if pending:
                name, below = pending.pop()
                try:
                    child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                except OSError:
                    continue
                os.close(fd)
                fd = child
                frames.append((f"{path}/{name}", scan(fd, f"{path}/{name}", below, sink)))
                continue
            frames.pop()
            if frames:
                parent = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
                os.close(fd)
                fd = parent
    finally:
        os.close(fd)


def fuse_mount(m: dict, target: str, fds: dict[str, str]) -> None:
    """Mount fuse-overlayfs at `target` (its daemon lives in the sandbox's pid namespace)."""
    import subprocess

    opts = f"lowerdir={fds[m['lower']]},upperdir={fds[m['upper']]},workdir={fds[m['work']]}"
    done = subprocess.run([m["binary"], "-o", opts, target], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          pass_fds=[int(p.rsplit("/", 1)[1]) for p in fds.values()])
    if done.returncode != 0:
        raise StepFailed(f"mount:{m['target']}", errno.EIO, done.stderr.decode(errors="replace").strip())
