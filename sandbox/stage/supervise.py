"""Pid 1's watch over the command: reap every process (pid 1 adopts orphans), answer the calls the filter
refuses (counting them), note the limit signals that killed anything, and end what is left at the end."""

from __future__ import annotations

import _signal as signal
import _socket
import os
import select
import struct

from .guard import answer

LIMIT_SIGNALS = (signal.SIGXCPU, signal.SIGXFSZ, signal.SIGKILL)


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


def watch(child: int, listener: int | None, machine: str) -> tuple[int, list[int], dict[str, int]]:
    """Until the command exits: its wait status, limit signals seen, and the refused calls by name."""
    seen: list[int] = []
    refused: dict[str, int] = {}
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
                return status, seen, refused
            for fd, events in poller.poll():
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


def end_the_rest() -> None:
    """Kill and reap whatever the command left in the pid namespace (only ever as its pid 1)."""
    if os.getpid() != 1:
        return
    try:
        os.kill(-1, signal.SIGKILL)
    except OSError:
        pass
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return
