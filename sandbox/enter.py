"""The sandbox stage: private namespaces, a new root of throwaway layers, a confined command, a report.

Started by `sandbox.runner` as `python -I -S enter.py SPEC -- ARGV...` (SPEC: a dict, marshalled and
hex-encoded; the same interpreter writes and reads it). It runs outside the package (`-I` drops the import
path) and loads only its own parts (`sandbox/stage/`) and C-backed modules, since every run pays for its
start-up. Three processes:

    stage   parent-death signal -> unshare (mount, pid; and user, mapping the caller to root, in "user"
            mode) -> private propagation -> open every mount source (O_PATH) -> fork pid 1 -> wait; pass
            pid 1's report on (with the CPU seconds of the whole tree) and exit the way the command did
    pid 1   non-dumpable -> build the world and pivot into it (`stage.world`) -> close the sources -> fork
            the command, write its user namespace's id maps -> reap until the command ends -> kill the
            rest of the pid namespace -> report: exit status, writes outside the workspace, network
            counters, peak memory, signals seen
    command unshare a user namespace (as root: the whole id range mapped identically, so file powers are
            as in a real run while the capabilities of the initial namespace are gone; as a user: your
            own uid) and a network namespace with loopback up -> rlimits, nice, chdir ->
            no_new_privs + seccomp (`stage.guard`) -> exec. Where no user namespace can be made, the
            bounding set is cut to the file powers instead (`inner: "caps"`).

A failure before exec prints one line `\\0tao-sandbox <hex of a marshalled dict>` and exits 125 (setup)
or 126/127 (exec), which `sandbox.runner` turns back into an exception. With `report_fd` in SPEC the stage
writes its report (a marshalled dict) there once the command has ended.
"""

from __future__ import annotations

import _signal as signal
import errno
import marshal
import os
import resource
import sys

sys.path.append(os.path.dirname(os.path.abspath(__file__)))

import _socket

from stage import guard, network
from stage.calls import (CLONE_NEWNET, CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWUSER, MS_PRIVATE, MS_REC,
                         PR_SET_DUMPABLE, PR_SET_PDEATHSIG, StepFailed, mount, prctl, unshare, write_file)
from stage.supervise import end_the_rest, receive_listener, send_listener, watch
from stage.world import World

MARKER = b"\0tao-sandbox "
SETUP_FAILED = 125
FULL_RANGE = 4294967295


def report(kind: str, step: str, err: int, detail: str, code: int) -> None:
    """Write the machine-readable failure line and exit with `code`."""
    line = {"kind": kind, "step": step, "errno": err, "error": os.strerror(err) if err else "", "detail": detail}
    os.write(2, MARKER + marshal.dumps(line).hex().encode() + b"\n")
    os._exit(code)


def map_own(inside_uid: int, outside_uid: int, inside_gid: int, outside_gid: int, pid: str, step: str) -> None:
    """Map one uid and one gid of the parent user namespace into the user namespace of `pid`."""
    write_file(f"/proc/{pid}/setgroups", "deny", step)
    write_file(f"/proc/{pid}/uid_map", f"{inside_uid} {outside_uid} 1\n", step)
    write_file(f"/proc/{pid}/gid_map", f"{inside_gid} {outside_gid} 1\n", step)


def map_command(spec: dict, pid: int) -> None:
    """The command's user namespace: every id as itself (real root), or back to the caller's own ids."""
    if spec.get("userns"):
        map_own(spec["uid"], 0, spec["gid"], 0, str(pid), "inner-userns")
    else:
        write_file(f"/proc/{pid}/uid_map", f"0 0 {FULL_RANGE}\n", "inner-userns")
        write_file(f"/proc/{pid}/gid_map", f"0 0 {FULL_RANGE}\n", "inner-userns")


def open_sources(spec: dict) -> dict[str, str]:
    """Open every mount source before anything moves; map each path to a /proc/self/fd path."""
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


def apply_limits(spec: dict) -> None:
    """rlimits and nice for the command; they are inherited by everything it starts."""
    try:
        for name, (soft, hard) in spec.get("rlimits", {}).items():
            resource.setrlimit(getattr(resource, name), (soft, hard))
        if spec.get("nice"):
            os.nice(spec["nice"])
    except (OSError, ValueError) as exc:
        raise StepFailed("limits", getattr(exc, "errno", 0) or errno.EINVAL, str(exc)) from None


def nice_autogroup(nice: int) -> bool:
    """Lower the CPU weight of this session's autogroup (the run's session); True where that took effect.

    With sched_autogroup on, every new session is its own scheduling group at equal weight, so the group's
    nice is what makes a speculative run yield to the authoritative work, and a process's own nice only
    ranks it inside that group. Where it works the command keeps nice 0, so `nice` or `ps -o ni` prints
    what a real run prints.
    """
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled") as handle:
            if handle.read().strip() != "1":
                return False
        with open("/proc/self/autogroup", "w") as handle:
            handle.write(str(nice))
        return True
    except OSError:
        return False  # no autogroups on this kernel, or not allowed: the process nice applies instead


def become_command(spec: dict, argv: list[str], ready: int, go: int, channel: int) -> None:
    """The command's process: its own user and network namespaces, limits, the filter, exec."""
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL, "pdeathsig")
    prctl(PR_SET_DUMPABLE, 1, "dumpable")  # pid 1 (non-dumpable) must reach our /proc files; exec resets it anyway
    flags = (CLONE_NEWUSER if spec.get("inner") == "userns" else 0) | (CLONE_NEWNET if spec.get("netns") else 0)
    if flags:
        unshare(flags, "inner-userns" if flags & CLONE_NEWUSER else "net")
    os.write(ready, b"u")
    os.close(ready)
    if os.read(go, 1) != b"g":
        os._exit(SETUP_FAILED)  # pid 1 could not map our ids; it reported why
    os.close(go)
    if spec.get("netns"):
        network.loopback_up()
    if spec.get("inner") == "caps":
        guard.keep_file_powers()
    apply_limits(spec)
    try:
        os.chdir(spec["cwd"])
    except OSError as exc:
        raise StepFailed("chdir", exc.errno or 0, spec["cwd"]) from None
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores these; a plain subprocess restores them
        signal.signal(sig, signal.SIG_DFL)
    ids = (spec["uid"], spec["gid"]) if spec.get("userns") else None  # see map_command
    listener = guard.install_filter(guard.machine(), unix_sockets=not spec.get("bound_views"), ids=ids)
    send_listener(channel, listener)  # refused calls go to pid 1 from here on
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        report("exec", "exec", exc.errno or 0, argv[0], 127 if exc.errno == errno.ENOENT else 126)


def start_command(spec: dict, argv: list[str], keep: int) -> tuple[int, int | None, int | None]:
    """Fork the command, map its user namespace, hold its network namespace, receive its filter's listener:
    (pid, netns fd or None, listener or None)."""
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    mine, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
    child = os.fork()
    if child == 0:
        for fd in (ready_r, go_w, keep):
            os.close(fd)
        mine.close()
        try:
            become_command(spec, argv, ready_w, go_r, theirs.detach())
        except StepFailed as exc:
            report("setup", exc.step, exc.err, exc.detail, SETUP_FAILED)
        os._exit(SETUP_FAILED)
    os.close(ready_w)
    os.close(go_r)
    theirs.close()
    netns = None
    try:
        if os.read(ready_r, 1) == b"u":
            if spec.get("inner") == "userns":
                map_command(spec, child)
            if spec.get("netns"):
                netns = os.open(f"/proc/{child}/ns/net", os.O_RDONLY)
            os.write(go_w, b"g")
    except StepFailed:
        os.kill(child, signal.SIGKILL)
        raise
    finally:
        os.close(ready_r)
        os.close(go_w)
    return child, netns, receive_listener(mine.detach())


def supervise(spec: dict, argv: list[str], fds: dict[str, str], out: int) -> None:
    """Pid 1: build the world, run the command, then report what it did to `out` (see the module docstring)."""
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL, "pdeathsig")
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # pid 1 ignores signals from inside it has no handler for
    prctl(PR_SET_DUMPABLE, 0, "dumpable")
    world = World(spec) if spec.get("world") else None
    if world is not None:
        world.build(fds)
        spec = {**spec, "bound_views": world.bound_views}  # read-only binds of real data: no AF_UNIX for the command
    for fd_path in fds.values():
        os.close(int(fd_path.rsplit("/", 1)[1]))
    child, netns, listener = start_command(spec, argv, out)
    status, seen, refused, ended = watch(child, listener, guard.machine(), spec.get("guard") or {}, spec["cwd"])
    end_the_rest()
    facts: dict = {"status": status, "signals": sorted(set(seen)), "pid1": os.getpid() == 1,
                   "maxrss_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, "refused": refused,
                   "refusals_seen": listener is not None, "ended": ended}
    if world is not None:
        facts["writes"], facts["writes_total"] = world.writes()
        facts["gaps"] = world.gaps
    if netns is not None:
        facts["network"] = network.counters(netns)
    os.write(out, marshal.dumps(facts))
    os._exit(0)


def stage(spec: dict, argv: list[str]) -> None:
    """The outer process; see the module docstring for the order."""
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL, "pdeathsig")
    out = spec.get("report_fd")
    if out is not None:
        os.set_inheritable(out, False)  # the stage's to write; never the command's
    if spec.get("ppid") and os.getppid() != spec["ppid"]:
        report("setup", "pdeathsig", errno.ESRCH, "the process that started the sandbox has exited", SETUP_FAILED)
    if spec.get("nice") and nice_autogroup(spec["nice"]):  # with the caller's capabilities (rate-limited in a
        spec = {**spec, "nice": 0}                          # user namespace); the group's nice is enough
    if not spec.get("mountns"):
        apply_limits(spec)  # no namespaces at all: the copy backends' view, at its own path
        os.chdir(spec["cwd"])
        for sig in (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(sig, signal.SIG_DFL)
        try:
            os.execvp(argv[0], argv)
        except OSError as exc:
            report("exec", "exec", exc.errno or 0, argv[0], 127 if exc.errno == errno.ENOENT else 126)
    flags = CLONE_NEWNS | (CLONE_NEWPID if spec.get("pidns") else 0) | (CLONE_NEWUSER if spec.get("userns") else 0)
    unshare(flags, "unshare")
    if spec.get("userns"):
        map_own(0, spec["uid"], 0, spec["gid"], "self", "userns-map")
    mount(None, "/", None, MS_REC | MS_PRIVATE, None, "propagation")
    fds = open_sources(spec)
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read_end)
        try:
            supervise(spec, argv, fds, write_end)
        except StepFailed as exc:
            report("setup", exc.step, exc.err, exc.detail, SETUP_FAILED)
        except OSError as exc:  # a file operation while building the world
            report("setup", "world", exc.errno or 0, str(exc), SETUP_FAILED)
        os._exit(SETUP_FAILED)
    os.close(write_end)
    for fd_path in fds.values():
        os.close(int(fd_path.rsplit("/", 1)[1]))
    _, init_status = os.waitpid(child, 0)
    raw = b"".join(iter(lambda: os.read(read_end, 65536), b""))
    facts = marshal.loads(raw) if raw else None
    if out is not None:
        own, tree = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = own.ru_utime + own.ru_stime + tree.ru_utime + tree.ru_stime
        try:
            os.write(out, marshal.dumps({**(facts or {}), "cpu": cpu, "reported": facts is not None}))
        except OSError:
            pass
    exit_like(facts["status"] if facts else init_status)


def exit_like(status: int) -> None:
    """Exit the way the command did: the same exit code, or the same signal."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # those two cannot be caught, nor reset
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) if not os.WIFSIGNALED(status) else 128 + os.WTERMSIG(status))


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
