"""The run's private network: loopback brought up, and afterwards the namespace's own counters.

A connection to anything but a server inside the run fails at once in a namespace with only `lo`: to a
non-local address with no route (Ip: OutNoRoutes, Ip6: Ip6OutNoRoutes), to a local port nobody listens on
with a reset (Tcp: AttemptFails, OutRsts) or a port-unreachable (Icmp: OutDestUnreachs). Any of these
means the real run would have reached a real network or a real local service.
"""

from __future__ import annotations

import _socket
import fcntl
import struct

from .calls import CLONE_NEWNET, StepFailed, setns

SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
COUNTERS = {("Ip", "OutNoRoutes"), ("Tcp", "AttemptFails"), ("Tcp", "OutRsts"), ("Icmp", "OutDestUnreachs"),
            ("Udp", "NoPorts")}
COUNTERS6 = ("Ip6OutNoRoutes", "Icmp6OutDestUnreachs", "Udp6NoPorts")


def loopback_up() -> None:
    """Bring `lo` up in a fresh network namespace, so local sockets work as they do outside."""
    sock = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM)
    try:
        ifreq = fcntl.ioctl(sock.fileno(), SIOCGIFFLAGS, struct.pack("16sh22x", b"lo", 0))
        flags = struct.unpack("16sh22x", ifreq)[1]
        fcntl.ioctl(sock.fileno(), SIOCSIFFLAGS, struct.pack("16sh22x", b"lo", flags | IFF_UP))
    except OSError as exc:
        raise StepFailed("loopback", exc.errno or 0) from None
    finally:
        sock.close()


def counters(netns_fd: int) -> dict[str, int]:
    """The non-zero failure counters of the network namespace `netns_fd` (entered for good: call last)."""
    setns(netns_fd, CLONE_NEWNET, "netns")
    found: dict[str, int] = {}
    try:
        with open("/proc/thread-self/net/snmp") as handle:
            lines = handle.read().splitlines()
    except OSError:
        lines = []
    for names, values in zip(lines[::2], lines[1::2]):
        group, *keys = names.split()
        for key, value in zip(keys, values.split()[1:]):
            if (group.rstrip(":"), key) in COUNTERS and int(value):
                found[f"{group.rstrip(':')}.{key}"] = int(value)
    try:
        with open("/proc/thread-self/net/snmp6") as handle:
            for line in handle:
                parts = line.split()
                if len(parts) == 2 and parts[0] in COUNTERS6 and int(parts[1]):
                    found[parts[0]] = int(parts[1])
    except OSError:
        pass  # no IPv6 in this kernel
    return found
