"""Attacks on the sandbox from inside a run, as root and through a user namespace: none may reach the
real tree, the kernel's tunables or a disk. Every probe opens for writing and closes at once: nothing
outside the workspace is ever written by these tests, even when an attack succeeds."""

from __future__ import annotations

import ctypes
import dataclasses
import os
import socket
import stat
import sys
import threading
from pathlib import Path

import pytest

from sandbox import Overlay, Workspace
from sandbox import probe
from sandbox.probe import detect
from tests.test_sandbox_support import make_repo, state_base, tree_state  # noqa: F401

# "auto" and "user" as the probe finds them; "caps" and "readonly": the fallbacks of a machine where the
# command gets no user namespace, or / no overlay (forced here by editing what the probe found).
MODES = ("auto", "user", "caps", "readonly")
# The interpreter itself, not the venv's link to it: a checkout under /tmp (as CI may clone) is hidden by
# the read-only fallback's private /tmp, and the attacks need nothing but the standard library.
PYTHON = os.path.realpath(sys.executable)
FORCED = {"caps": {"inner": "caps"}, "readonly": {"world": "readonly"}}

_libc = ctypes.CDLL(None, use_errno=True)


@pytest.fixture(params=MODES)
async def setup(request: pytest.FixtureRequest, tmp_path: Path, state_base: Path,
                monkeypatch: pytest.MonkeyPatch) -> tuple[Workspace, Path]:
    """A fresh repo and the namespace mode under test (a kernel overlay needed: it is what runs as root)."""
    if os.geteuid() != 0:
        pytest.skip("these attacks are about a sandbox started by root")
    mode = "user" if request.param == "user" else "auto"
    monkeypatch.setenv("TAO_SANDBOX_NAMESPACES", mode)
    caps = await detect(state_base)
    if caps.overlay_options is None:
        pytest.skip(f"no kernel overlayfs in mode {mode}: {caps.notes.get('overlayfs')}")
    if request.param in FORCED:
        monkeypatch.setitem(probe._cache, (state_base, mode), dataclasses.replace(caps, **FORCED[request.param]))
    return Workspace(make_repo(tmp_path / "ws")), state_base


def handle_of(path: Path) -> tuple[int, bytes]:
    """name_to_handle_at(2) of a path, taken outside the sandbox: (handle type, handle bytes)."""
    buf = ctypes.create_string_buffer(8 + 128)
    buf[0:4] = (128).to_bytes(4, sys.byteorder)
    mount_id = ctypes.c_int()
    if _libc.name_to_handle_at(-100, str(path).encode(), buf, ctypes.byref(mount_id), 0) != 0:
        pytest.skip(f"this file system gives no handles: {os.strerror(ctypes.get_errno())}")
    size = int.from_bytes(buf.raw[0:4], sys.byteorder)
    return int.from_bytes(buf.raw[4:8], sys.byteorder, signed=True), buf.raw[8:8 + size]


HANDLE_ATTACK = r"""
import ctypes, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
htype, raw, name = int(sys.argv[1]), bytes.fromhex(sys.argv[2]), sys.argv[3]
handles = [(htype, raw)]
buf = ctypes.create_string_buffer(8 + 128); buf[0:4] = struct.pack("I", 128); mid = ctypes.c_int()
for where in ("/", "/tmp", "."):   # the finding: a handle of "/" taken inside
    if libc.name_to_handle_at(-100, where.encode(), buf, ctypes.byref(mid), 0) == 0:
        size, t = struct.unpack("Ii", buf.raw[:8]); handles.append((t, buf.raw[8:8 + size]))
        print("name_to_handle_at allowed on", where)
for t, h in handles:
    hb = ctypes.create_string_buffer(struct.pack("Ii", len(h), t) + h)
    for where in ("/", "/tmp", "/var/tmp", ".", "/dev/shm", os.path.expanduser("~")):
        try:
            mfd = os.open(where, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            continue
        fd = libc.open_by_handle_at(mfd, hb, os.O_RDONLY | os.O_DIRECTORY)
        if fd < 0:
            print("refused", where, os.strerror(ctypes.get_errno()))
            continue
        print("HANDLE OPENED via", where)
        try:
            w = os.open(name, os.O_WRONLY | os.O_APPEND, dir_fd=fd); os.write(w, b"escaped\n"); os.close(w)
            print("ESCAPED")
        except OSError as exc:
            print("not written", exc)
"""


async def test_open_by_handle_cannot_reach_the_real_workspace(setup: tuple[Workspace, Path]) -> None:
    workspace, base = setup
    htype, raw = handle_of(workspace.root)
    before = tree_state(workspace.root)
    async with Overlay(workspace, state_dir=base) as overlay:
        result = await overlay.run([PYTHON, "-c", HANDLE_ATTACK, str(htype), raw.hex(), "README.md"])
    assert "refused" in result.text, result.text
    assert "HANDLE OPENED" not in result.text and "ESCAPED" not in result.text, result.text
    assert tree_state(workspace.root) == before


def writable_sysfs_files(limit: int = 3) -> list[str]:
    """A few sysfs files root may write (found by mode only: nothing is opened here)."""
    found: list[str] = []
    for top in ("/sys/kernel", "/sys/fs/cgroup", "/sys/class/net", "/sys/devices/system/cpu"):
        for dirpath, _dirs, files in os.walk(top):
            for name in files:
                path = os.path.join(dirpath, name)
                try:
                    mode = os.lstat(path).st_mode
                except OSError:
                    continue
                if stat.S_ISREG(mode) and mode & stat.S_IWUSR:
                    found.append(path)
                    break
            if len(found) >= limit:
                return found
    return found


def block_devices() -> list[tuple[int, int]]:
    """(major, minor) of every block device of this machine, from /sys/dev/block."""
    out = []
    for entry in os.listdir("/sys/dev/block"):
        major, minor = entry.split(":")
        out.append((int(major), int(minor)))
    return out


OPEN_FOR_WRITE = r"""
import os, stat, sys
for path in sys.argv[1:]:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)   # opened and closed: never written
    except OSError as exc:
        print("refused", path, exc.strerror)
        continue
    os.close(fd)
    print("WRITABLE", path)
"""

BLOCK_DEVICES = r"""
import os, stat, sys
devices = [tuple(map(int, d.split(":"))) for d in sys.argv[1:]]
seen = []
for dirpath, dirs, files in os.walk("/dev"):
    for name in files:
        path = os.path.join(dirpath, name)
        try:
            if stat.S_ISBLK(os.lstat(path).st_mode):
                seen.append(path)
        except OSError:
            pass
for place in ("/tmp", "/var/tmp", "/dev/shm", ".", "/dev"):
    for major, minor in devices:
        path = os.path.join(place, f"tao-blk-{major}-{minor}")
        try:
            os.mknod(path, stat.S_IFBLK | 0o600, os.makedev(major, minor))
            seen.append(path)
            print("mknod allowed", path)
        except OSError as exc:
            pass
for path in seen:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)   # opened and closed: never written
    except OSError as exc:
        print("refused", path, exc.strerror)
        continue
    os.close(fd)
    print("WRITABLE", path)
print("checked", len(seen))
"""


async def test_kernel_tunables_sysfs_and_disks_cannot_be_opened_for_writing(setup: tuple[Workspace, Path]) -> None:
    workspace, base = setup
    targets = ["/proc/sys/kernel/core_pattern", "/proc/sysrq-trigger", "/proc/sys/vm/drop_caches",
               "/dev/kmsg", *writable_sysfs_files()]
    async with Overlay(workspace, state_dir=base) as overlay:
        tunables = await overlay.run([PYTHON, "-c", OPEN_FOR_WRITE, *targets])
        disks = await overlay.run([PYTHON, "-c", BLOCK_DEVICES,
                                   *(f"{a}:{b}" for a, b in block_devices())])
    assert "WRITABLE" not in tunables.text, tunables.text
    assert tunables.text.count("refused") >= 3, tunables.text
    assert "WRITABLE" not in disks.text and "checked" in disks.text, disks.text


UNMOUNT_ATTACK = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
root = sys.argv[1]
for flags in (0, 2):   # plain, MNT_DETACH
    ok = libc.umount2(root.encode(), flags)
    print("umount2", flags, "ok" if ok == 0 else os.strerror(ctypes.get_errno()))
for flags in (32 | 4096, 32 | 4096 | 1):   # MS_REMOUNT|MS_BIND (rw, then ro)
    ok = libc.mount(None, root.encode(), None, flags, None)
    print("remount", flags, "ok" if ok == 0 else os.strerror(ctypes.get_errno()))
ok = libc.mount(b"tmpfs", root.encode(), b"tmpfs", 0, None)
print("mount over", "ok" if ok == 0 else os.strerror(ctypes.get_errno()))
"""

PATH_ATTACKS = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
root, state, name = sys.argv[1], sys.argv[2], sys.argv[3]
rel = root.lstrip("/")
tried = []
for pid in [p for p in os.listdir("/proc") if p.isdigit()] + ["self", "thread-self"]:
    for link in ("root", "cwd"):
        tried.append(f"/proc/{pid}/{link}/{rel}/{name}")
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            tried.append(f"/proc/{pid}/fd/{fd}/{name}")
            tried.append(f"/proc/{pid}/fd/{fd}/{rel}/{name}")
    except OSError:
        pass
for path in tried:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    except OSError:
        continue
    os.write(fd, b"through " + path.encode() + b"\n")
    os.close(fd)
for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
    try:
        nsfd = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY)
    except OSError:
        continue
    if libc.setns(nsfd, 0x00020000) == 0:
        print("SETNS into the mount namespace of", pid)
        try:
            with open(os.path.join(root, name), "a") as f:
                f.write("through setns\n")
        except OSError:
            pass
try:
    with open(os.path.join(state, "upper", "phantom.txt"), "w") as f:
        f.write("written into the layer by its path\n")
except OSError as exc:
    print("state dir:", exc.strerror)
print("tried", len(tried))
"""


async def test_a_run_cannot_unmount_remount_or_write_around_the_overlay(setup: tuple[Workspace, Path]) -> None:
    workspace, base = setup
    before = tree_state(workspace.root)
    async with Overlay(workspace, state_dir=base) as overlay:
        mounts = await overlay.run([PYTHON, "-c", UNMOUNT_ATTACK, str(workspace.root)])
        after_mounts = await overlay.run(["sh", "-c", "echo escaped >> README.md"])
        paths = await overlay.run([PYTHON, "-c", PATH_ATTACKS, str(workspace.root),
                                   str(overlay.state_path), "README.md"])
        changed = {c.path for c in overlay.changes()}
    assert " ok" not in mounts.text, mounts.text
    assert after_mounts.exit_code == 0
    assert "SETNS" not in paths.text and "tried" in paths.text, paths.text
    assert "phantom.txt" not in changed
    assert tree_state(workspace.root) == before


async def test_foreign_socket_families_and_key_syscalls_are_refused(setup: tuple[Workspace, Path]) -> None:
    workspace, base = setup
    script = ("import socket, ctypes, os\n"
              "try:\n    socket.socket(40, socket.SOCK_STREAM); print('VSOCK socket made')\n"
              "except OSError as exc:\n    print('vsock', exc.strerror)\n"
              "libc = ctypes.CDLL(None, use_errno=True)\n"
              "r = libc.syscall(250, 0, -1)  # keyctl(KEYCTL_GET_KEYRING_ID) on x86_64\n"
              "print('keyctl', r, os.strerror(ctypes.get_errno()))\n")
    if os.uname().machine != "x86_64":
        pytest.skip("the syscall number in the script is x86_64's")
    async with Overlay(workspace, state_dir=base) as overlay:
        result = await overlay.run([PYTHON, "-c", script])
    assert "VSOCK socket made" not in result.text, result.text
    assert "keyctl -1 Operation not permitted" in result.text, result.text


async def test_a_unix_socket_of_the_host_cannot_be_reached(setup: tuple[Workspace, Path], tmp_path: Path) -> None:
    """A daemon's socket (docker's, a database's) is a file in the real tree: connecting through the layers
    is refused, and the refusal taints the run when it shows."""
    workspace, base = setup
    place = Path.home() / ".cache" / f"tao-sock-{os.getpid()}-{tmp_path.name[-12:]}"  # not under a private /tmp
    place.mkdir(parents=True)
    path = place / "host.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen()
    server.settimeout(0.2)
    reached: list[bool] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                server.accept()[0].close()
                reached.append(True)
            except (TimeoutError, OSError):
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    script = ("import socket, sys\ns = socket.socket(socket.AF_UNIX)\n"
              f"try:\n    s.connect({str(path)!r}); print('CONNECTED')\nexcept OSError as e:\n    print(e)\n")
    try:
        async with Overlay(workspace, state_dir=base) as overlay:
            result = await overlay.run([PYTHON, "-c", script])
            taints = overlay.taints()
    finally:
        stop.set()
        thread.join(timeout=30)
        server.close()
        path.unlink(missing_ok=True)
        place.rmdir()
    assert "CONNECTED" not in result.text and not reached, result.text
    assert taints, result.text
