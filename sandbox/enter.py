"""The sandbox stage: enters private namespaces, mounts the overlay at the workspace path, applies limits,
then execs the command.

Started by `sandbox.runner` as `python -I -S enter.py SPEC -- ARGV...` (SPEC: a dict, marshalled and
hex-encoded; the same interpreter writes and reads it). It runs outside the package (`-I` drops the import
path), so it imports nothing from `sandbox`, and it imports only C modules, because every run pays for
its start-up (json, re, signal and socket would double it). The steps, in order:

    parent-death signal -> unshare (user, mount, net, pid namespaces) -> map the caller to root in the
    user namespace -> make all mounts private -> open every source dir (O_PATH) -> fork pid 1 of the
    pid namespace -> mount /proc, the private /tmp dirs, the overlay (or the view) at the workspace path
    -> loopback up -> every other mount read-only -> fork the command: drop back to the caller's uid
    (user namespace) or drop CAP_SYS_ADMIN (real root), rlimits, nice, chdir, exec.

A failure before exec prints one line `\\0tao-sandbox <hex of a marshalled dict>` and exits 125 (setup)
or 126/127 (exec), which `sandbox.runner` turns back into an exception. With `cpu_fd` in SPEC (and a pid
namespace), the stage writes the CPU seconds of the whole run, a double in 8 bytes, to that descriptor
once the command has ended.
"""

from __future__ import annotations

import _signal as signal
import _socket
import ctypes
import errno
import fcntl
import marshal
import os
import resource
import struct
import sys

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 1, 24, 47, 4
CAP_SYS_ADMIN = 21
SYS_MOUNT_SETATTR = 442  # the same number on every architecture (new syscalls share one table)
AT_FDCWD, MOUNT_ATTR_RDONLY = -100, 1
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
MARKER = b"\0tao-sandbox "
SETUP_FAILED = 125

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.syscall.restype = ctypes.c_long


class StepFailed(Exception):
    """A setup step failed; carries the step name and errno for the report."""

    def __init__(self, step: str, err: int, detail: str = "") -> None:
        super().__init__(step)
        self.step, self.err, self.detail = step, err, detail


def report(kind: str, step: str, err: int, detail: str, code: int) -> None:
    """Write the machine-readable failure line and exit with `code`."""
    line = {"kind": kind, "step": step, "errno": err, "error": os.strerror(err) if err else "", "detail": detail}
    os.write(2, MARKER + marshal.dumps(line).hex().encode() + b"\n")
    os._exit(code)


def check(result: int, step: str, detail: str = "") -> None:
    """Raise StepFailed when a libc call returned -1."""
    if result == -1:
        raise StepFailed(step, ctypes.get_errno(), detail)


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None, step: str) -> None:
    """mount(2) with errors as StepFailed."""
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    check(_libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), step, target)


def write_file(path: str, text: str, step: str) -> None:
    """Write a /proc control file in one write(2)."""
    try:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
    except OSError as exc:
        raise StepFailed(step, exc.errno or 0, path) from None


def map_ids(inside_uid: int, outside_uid: int, inside_gid: int, outside_gid: int, step: str) -> None:
    """Map one uid and one gid of the parent user namespace into the one just unshared."""
    write_file("/proc/self/setgroups", "deny", step)
    write_file("/proc/self/uid_map", f"{inside_uid} {outside_uid} 1\n", step)
    write_file("/proc/self/gid_map", f"{inside_gid} {outside_gid} 1\n", step)


def escape_option(path: str) -> str:
    """Escape a path for an overlayfs option list (',' separates options, ':' separates layers)."""
    return path.replace("\\", "\\\\").replace(",", "\\,").replace(":", "\\:")


def open_sources(spec: dict) -> dict[str, str]:
    """Open every source dir before any mount hides it; map each path to a /proc/self/fd path."""
    paths: dict[str, str] = {}
    for m in spec["mounts"]:
        for key in ("lower", "upper", "work", "source"):
            path = m.get(key)
            if path and path not in paths:
                try:
                    fd = os.open(path, os.O_PATH | os.O_DIRECTORY)
                except OSError as exc:
                    raise StepFailed("open", exc.errno or 0, path) from None
                paths[path] = f"/proc/self/fd/{fd}"
    return paths


def mount_all(spec: dict, fds: dict[str, str]) -> None:
    """Mount the private dirs, then the workspace view; targets inside a private dir are created."""
    mounted: list[str] = []
    for m in spec["mounts"]:
        target, kind = m["target"], m["type"]
        if not os.path.isdir(target):
            if not any(target.startswith(t.rstrip("/") + "/") for t in mounted):
                raise StepFailed(f"mount:{target}", errno.ENOENT, "the mount point does not exist")
            try:  # inside a private dir (a workspace under /tmp): the real tree is not touched
                os.makedirs(target)
            except OSError as exc:
                raise StepFailed(f"mount:{target}", exc.errno or 0, "cannot create the mount point") from None
        mounted.append(target)
        if kind == "bind":
            mount(fds[m["source"]], target, None, MS_BIND | MS_REC, None, f"mount:{target}")
            if m.get("readonly"):
                make_readonly(target, "")
        elif kind == "tmpfs":
            mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={m['size']}", f"mount:{target}")
        elif kind == "overlay":
            opts = [f"lowerdir={escape_option(fds[m['lower']])}", f"upperdir={escape_option(fds[m['upper']])}",
                    f"workdir={escape_option(fds[m['work']])}", *m.get("options", [])]
            mount("overlay", target, "overlay", 0, ",".join(opts), f"mount:{target}")
        elif kind == "fuse-overlayfs":
            opts = f"lowerdir={fds[m['lower']]},upperdir={fds[m['upper']]},workdir={fds[m['work']]}"
            import subprocess

            done = subprocess.run([m["binary"], "-o", opts, target], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, pass_fds=[int(p.rsplit("/", 1)[1]) for p in fds.values()])
            if done.returncode != 0:
                raise StepFailed(f"mount:{target}", errno.EIO, done.stderr.decode(errors="replace").strip())
        else:
            raise StepFailed(f"mount:{target}", errno.EINVAL, f"unknown mount type {kind}")


def loopback_up() -> None:
    """Bring `lo` up in the fresh network namespace, so local sockets work as they do outside."""
    sock = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM)
    try:
        ifreq = fcntl.ioctl(sock.fileno(), SIOCGIFFLAGS, struct.pack("16sh22x", b"lo", 0))
        flags = struct.unpack("16sh22x", ifreq)[1]
        fcntl.ioctl(sock.fileno(), SIOCSIFFLAGS, struct.pack("16sh22x", b"lo", flags | IFF_UP))
    except OSError as exc:
        raise StepFailed("loopback", exc.errno or 0) from None
    finally:
        sock.close()


def unescape(field: str) -> str:
    """Undo mountinfo's octal escapes (\\040 for a space)."""
    parts = field.split("\\")
    out = [parts[0]]
    for part in parts[1:]:
        out.append(chr(int(part[:3], 8)) + part[3:] if part[:3].isdigit() else "\\" + part)
    return "".join(out)


def mount_points() -> list[tuple[str, str]]:
    """(mount point, per-mount options) of every mount in this namespace, from /proc/self/mountinfo."""
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            points.append((unescape(fields[4]), fields[5]))
    return points


def make_readonly(path: str, options: str) -> None:
    """Make the mount at `path` read-only: mount_setattr(2), or a bind remount where that is missing."""
    attr = struct.pack("QQQQ", MOUNT_ATTR_RDONLY, 0, 0, 0)
    buf = ctypes.create_string_buffer(attr, len(attr))
    res = _libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, path.encode(), 0, buf, len(attr))
    if res == 0:
        return
    err = ctypes.get_errno()
    if err not in (errno.ENOSYS, errno.EPERM):
        return  # not a mount root any more (shadowed), or a kernel object: nothing to protect
    flags = MS_REMOUNT | MS_BIND | MS_RDONLY
    for name, bit in (("nosuid", MS_NOSUID), ("nodev", MS_NODEV), ("noexec", MS_NOEXEC)):
        if name in options.split(","):
            flags |= bit
    if _libc.mount(None, path.encode(), None, flags, None) == -1 and err == errno.ENOSYS:
        raise StepFailed("readonly", ctypes.get_errno(), path)


def readonly_rest(spec: dict) -> None:
    """Make every mount read-only except the workspace view, the private dirs, /proc, /sys and /dev/pts."""
    own = [m["target"] for m in spec["mounts"]]
    exempt = ("/proc", "/sys", "/dev/pts")

    def under(path: str, top: str) -> bool:
        return path == top or path.startswith(top.rstrip("/") + "/")

    for path, options in mount_points():
        if any(under(path, t) for t in own) or any(under(path, e) for e in exempt):
            continue
        if "ro" in options.split(","):
            continue
        make_readonly(path, options)


def drop_admin() -> None:
    """Real root keeps its file powers but loses CAP_SYS_ADMIN, so it cannot unmount the overlay."""
    check(_libc.prctl(PR_CAPBSET_DROP, CAP_SYS_ADMIN, 0, 0, 0), "drop-caps")
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = struct.pack("Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = ctypes.create_string_buffer(24)
    hdr = ctypes.create_string_buffer(header, 8)
    check(_libc.capget(hdr, data), "drop-caps")
    words = list(struct.unpack("6I", data.raw))  # (effective, permitted, inheritable) x 2
    words[2] &= ~(1 << CAP_SYS_ADMIN)
    check(_libc.capset(hdr, ctypes.create_string_buffer(struct.pack("6I", *words), 24)), "drop-caps")


def apply_limits(spec: dict) -> None:
    """rlimits and nice for the command; they are inherited by everything it starts."""
    try:
        for name, (soft, hard) in spec.get("rlimits", {}).items():
            resource.setrlimit(getattr(resource, name), (soft, hard))
        if spec.get("nice"):
            os.nice(spec["nice"])
            nice_autogroup(spec["nice"])
    except (OSError, ValueError) as exc:
        raise StepFailed("limits", getattr(exc, "errno", 0) or errno.EINVAL, str(exc)) from None


def nice_autogroup(nice: int) -> None:
    """Lower the CPU weight of this session's autogroup too (best effort).

    With sched_autogroup on, every new session is its own scheduling group at equal weight, so a
    process's own nice only ranks it inside that group: without this, a niced speculative run takes
    as much CPU as the authoritative work it should yield to.
    """
    try:
        with open("/proc/self/autogroup", "w") as handle:
            handle.write(str(nice))
    except OSError:
        pass  # no autogroups on this kernel, or not allowed: the process nice still applies


def exec_command(spec: dict, argv: list[str]) -> None:
    """Become the command: drop privileges, apply limits, enter the workspace, exec."""
    if spec.get("userns"):
        check(_libc.unshare(CLONE_NEWUSER), "map-back")
        map_ids(spec["uid"], 0, spec["gid"], 0, "map-back")
    elif spec.get("drop_admin"):
        drop_admin()
    apply_limits(spec)
    try:
        os.chdir(spec["cwd"])
    except OSError as exc:
        raise StepFailed("chdir", exc.errno or 0, spec["cwd"]) from None
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores these; a plain subprocess restores them
        signal.signal(sig, signal.SIG_DFL)
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        code = 127 if exc.errno == errno.ENOENT else 126
        report("exec", "exec", exc.errno or 0, argv[0], code)


def wait_for(pid: int, status_fd: int | None) -> int:
    """Reap children until `pid` exits (pid 1 must reap orphans); return its wait status."""
    while True:
        try:
            child, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return 0
        if child == pid:
            if status_fd is not None:
                os.write(status_fd, struct.pack("i", status))
            return status


def exit_like(status: int) -> None:
    """Exit the way the command did: the same exit code, or the same signal."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) if not os.WIFSIGNALED(status) else 128 + os.WTERMSIG(status))


def inside(spec: dict, argv: list[str], fds: dict[str, str]) -> None:
    """Pid 1 of the new pid namespace (or the stage itself without one): mount, then run the command."""
    if spec.get("pidns"):
        try:
            mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None, "proc")
        except StepFailed:
            pass  # a container may forbid a fresh /proc; /proc/self still names the right process
    mount_all(spec, fds)
    if spec.get("netns"):
        loopback_up()
    if spec.get("readonly"):
        readonly_rest(spec)
    for fd_path in fds.values():
        os.close(int(fd_path.rsplit("/", 1)[1]))
    if not spec.get("pidns"):
        exec_command(spec, argv)
    child = os.fork()
    if child == 0:
        exec_command(spec, argv)
    status_fd = spec.get("_status_fd")
    exit_like(wait_for(child, status_fd))


def stage(spec: dict, argv: list[str]) -> None:
    """The whole setup; see the module docstring for the order."""
    check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "pdeathsig")
    if spec.get("cpu_fd") is not None:
        os.set_inheritable(spec["cpu_fd"], False)  # the stage's to write; never the command's
    if spec.get("ppid") and os.getppid() != spec["ppid"]:
        report("setup", "pdeathsig", errno.ESRCH, "the process that started the sandbox has exited", SETUP_FAILED)
    flags = (CLONE_NEWNS if spec.get("mountns") else 0) | (CLONE_NEWUSER if spec.get("userns") else 0)
    flags |= (CLONE_NEWNET if spec.get("netns") else 0) | (CLONE_NEWPID if spec.get("pidns") else 0)
    if flags:
        check(_libc.unshare(flags), "unshare", hex(flags))
    if spec.get("userns"):
        map_ids(0, spec["uid"], 0, spec["gid"], "userns-map")
    if spec.get("mountns"):
        mount(None, "/", None, MS_REC | MS_PRIVATE, None, "propagation")
    fds = open_sources(spec)  # after unshare: a bind source must be a mount of this namespace
    if not spec.get("pidns"):
        inside(spec, argv, fds)
        return
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read_end)
        check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "pdeathsig")
        try:
            inside({**spec, "_status_fd": write_end}, argv, fds)
        except StepFailed as exc:
            report("setup", exc.step, exc.err, exc.detail, SETUP_FAILED)
        os._exit(SETUP_FAILED)
    os.close(write_end)
    _, init_status = os.waitpid(child, 0)
    raw = os.read(read_end, 4)
    report_cpu(spec.get("cpu_fd"))
    exit_like(struct.unpack("i", raw)[0] if len(raw) == 4 else init_status)


def report_cpu(fd: int | None) -> None:
    """Write the CPU seconds of this stage and of everything its pid 1 reaped (the command's whole tree)."""
    if fd is None:
        return
    own, reaped = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        os.write(fd, struct.pack("d", own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime))
    except OSError:
        pass


def main() -> None:
    """Parse `SPEC -- ARGV` and run the stage, reporting a failed step as one marker line."""
    args = sys.argv[1:]
    if len(args) < 3 or args[1] != "--":
        os.write(2, b"usage: enter.py SPEC -- COMMAND [ARG...]\n")
        os._exit(2)
    spec, argv = marshal.loads(bytes.fromhex(args[0])), args[2:]
    try:
        stage(spec, argv)
    except StepFailed as exc:
        report("setup", exc.step, exc.err, exc.detail, SETUP_FAILED)


if __name__ == "__main__":
    main()
