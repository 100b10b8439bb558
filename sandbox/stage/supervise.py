"""Pid 1's watch over the command: reap every process (pid 1 adopts orphans), answer the calls the filter
refuses (counting them), note the limit signals that killed anything, end the run if its tree's memory
or the disk's free space crosses the limits (sampled, so the run sees no rlimit), and end what is left."""

from __future__ import annotations

import _signal as signal
import _socket
import os
import select
import struct

from .guard import answer

LIMIT_SIGNALS = (signal.SIGXCPU, signal.SIGXFSZ, signal.SIGKILL)
SAMPLE_MS = 100  # how often memory and disk are looked at
PAGE = os.sysconf("SC_PAGE_SIZE")


def send_listener(sock: int, listener: int) -> None:
    """The command's side: pass the filter's listener to pid 1 over the socket pair, then close both."""
    channel = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM, 0, sock)
    try:
        if listener >= 0:
            channel.sendmsg([b"l"], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, struct.pack("i", listener))])
    finally:
        channel.close()
        if listener >= 0:
            os.close(listener)


def receive_listener(sock: int) -> int | None:
    """Pid 1's side: the listener the command passed, or None (no notifications, or it failed before)."""
    channel = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM, 0, sock)
    try:
        _, ancillary, _, _ = channel.recvmsg(1, _socket.CMSG_SPACE(4))
    except OSError:
        return None
    finally:
        channel.close()
    for level, kind, data in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS and len(data) >= 4:
            return struct.unpack("i", data[:4])[0]
    return None


def reap_ready(until: int, seen: list[int]) -> int | None:
    """Reap every child that has exited, without waiting; the wait status of `until` if it was one of them."""
    found = None
    while True:
        try:
            child, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return found if found is not None else 0
        if child == 0:
            return found
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) in LIMIT_SIGNALS:
            seen.append(os.WTERMSIG(status))
        if child == until:
            found = status


def tree_rss() -> int:
    """Resident bytes of every process in the pid namespace but pid 1 (shared pages counted per process)."""
    total = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit() and entry != "1":
            try:
                with open(f"/proc/{entry}/statm", "rb") as handle:
                    total += int(handle.read().split()[1]) * PAGE
            except (OSError, IndexError, ValueError):
                continue
    return total


def over_limits(guard: dict, where: str) -> str | None:
    """Why the run must end now (memory or disk past the guard's limits), or None."""
    memory = guard.get("memory")
    if memory and os.getpid() == 1 and (used := tree_rss()) > memory:
        return f"its processes used {used >> 20} MiB of memory, past the sandbox's limit of {memory >> 20} MiB"
    reserve = guard.get("disk_reserve")
    if reserve:
        try:
            st = os.statvfs(where)
        except OSError:
            return None
        if st.f_bavail * st.f_frsize < reserve:
            return f"it left less than {reserve >> 20} MiB free on the disk of the workspace layer"
    return None


def watch(child: int, listener: int | None, machine: str, guard: dict,
          where: str) -> tuple[int, list[int], dict[str, int], str | None]:
    """Until the command exits: its wait status, limit signals seen, the refused calls by name, and why pid 1
    ended the run (None if it did not); `where` is the workspace, whose file system's free space is watched."""
    seen: list[int] = []
    refused: dict[str, int] = {}
    ended: str | None = None
    sample = SAMPLE_MS if guard.get("memory") or guard.get("disk_reserve") else -1
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wakeup fd hears of every exit
    signal.set_wakeup_fd(wake_w)
    poller = select.poll()
    poller.register(wake_r, select.POLLIN)
    if listener is not None:
        poller.register(listener, select.POLLIN)
    try:
        while True:
            status = reap_ready(child, seen)
            if status is not None:
                return status, seen, refused, ended
            if ended is None and sample > 0 and (ended := over_limits(guard, where)) is not None:
                end_the_rest(reap=False)
            for fd, events in poller.poll(sample):
                if fd == wake_r:
                    while _drain(wake_r):
                        pass
                elif events & select.POLLIN:
                    name = answer(fd, machine)
                    if name is not None:
                        refused[name] = refused.get(name, 0) + 1
                else:
                    poller.unregister(fd)  # every user of the filter is gone
    finally:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.close(wake_r)
        os.close(wake_w)


def _drain(fd: int) -> bool:
    """Read what a non-blocking pipe holds; False once it is empty."""
    try:
        return bool(os.read(fd, 512))
    except BlockingIOError:
        return False


def end_the_rest(*, reap: bool = True) -> None:
    """Kill (and reap, unless told not to) every process in the pid namespace but pid 1 (only ever as pid 1)."""
    if os.getpid() != 1:
        return
    try:
        os.kill(-1, signal.SIGKILL)
    except OSError:
        pass
    while reap:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return
