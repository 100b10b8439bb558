"""What the command may not do, whatever its uid: a seccomp filter, no_new_privs, and (where no user
namespace can be made) a bounding set cut down to the file powers a root test run needs.

The filter returns EPERM for the system calls that reach past the sandbox: file handles (the
open_by_handle_at escape), every mount call old and new, module and kexec loading, bpf, the kernel
keyring, swap, reboot, the clocks, accounting, quotas and port I/O; and for sockets of AF_VSOCK, the
one address family here that no network namespace confines. Where some of the real tree is only bound
read-only (no overlay over it), AF_UNIX sockets are refused too: a daemon's socket there (docker's, a
database's) would answer a bind-mounted path, while through an overlay it refuses. Syscalls of a foreign ABI
(x32 and i386 on x86_64, arm32 on aarch64) get EPERM whatever they are, so no second table can bypass the first.

In a user namespace that maps only the caller's own ids ("user" mode), a chown or set*id to any other id
fails with EINVAL, where a real run gets EPERM (a user) or succeeds (root): those calls are refused too
when an id argument is neither the mapped one nor -1 ("unchanged").

A real run would have made those calls, so a refusal is a difference: where the kernel allows it, the
filter hands each refused call to the sandbox's pid 1 (a user notification), which answers EPERM and
counts it (`answer`), and the run is tainted for it.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import struct

from .calls import (PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, StepFailed, check,
                    libc)

DENIED = ("open_by_handle_at", "name_to_handle_at", "mount", "umount2", "pivot_root", "fsopen", "fsconfig",
          "fsmount", "fspick", "move_mount", "open_tree", "open_tree_attr", "mount_setattr", "kexec_load",
          "kexec_file_load", "init_module", "finit_module", "delete_module", "bpf", "keyctl", "add_key",
          "request_key", "swapon", "swapoff", "reboot", "settimeofday", "clock_settime", "clock_adjtime",
          "adjtimex", "acct", "quotactl", "quotactl_fd", "iopl", "ioperm")
NUMBERS = {
    "x86_64": {
        "open_by_handle_at": 304, "name_to_handle_at": 303, "mount": 165, "umount2": 166, "pivot_root": 155,
        "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "move_mount": 429, "open_tree": 428,
        "open_tree_attr": 467, "mount_setattr": 442, "kexec_load": 246, "kexec_file_load": 320,
        "init_module": 175, "finit_module": 313, "delete_module": 176, "bpf": 321, "keyctl": 250,
        "add_key": 248, "request_key": 249, "swapon": 167, "swapoff": 168, "reboot": 169, "settimeofday": 164,
        "clock_settime": 227, "clock_adjtime": 305, "adjtimex": 159, "acct": 163, "quotactl": 179,
        "quotactl_fd": 443, "iopl": 172, "ioperm": 173, "socket": 41,
        "chown": 92, "fchown": 93, "lchown": 94, "fchownat": 260, "setuid": 105, "setgid": 106,
        "setreuid": 113, "setregid": 114, "setresuid": 117, "setresgid": 119,
    },
    "aarch64": {  # the generic table; aarch64 has no port I/O calls
        "open_by_handle_at": 265, "name_to_handle_at": 264, "mount": 40, "umount2": 39, "pivot_root": 41,
        "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "move_mount": 429, "open_tree": 428,
        "open_tree_attr": 467, "mount_setattr": 442, "kexec_load": 104, "kexec_file_load": 294,
        "init_module": 105, "finit_module": 273, "delete_module": 106, "bpf": 280, "keyctl": 219,
        "add_key": 217, "request_key": 218, "swapon": 224, "swapoff": 225, "reboot": 142, "settimeofday": 170,
        "clock_settime": 112, "clock_adjtime": 266, "adjtimex": 171, "acct": 89, "quotactl": 60,
        "quotactl_fd": 443, "socket": 198,
        "fchownat": 54, "fchown": 55, "setregid": 143, "setgid": 144, "setreuid": 145, "setuid": 146,
        "setresuid": 147, "setresgid": 149,
    },
}
# Calls that take ids: for each, which arguments are a uid ("u") or a gid ("g"), by position.
ID_ARGS = {"chown": "-ug", "fchown": "-ug", "lchown": "-ug", "fchownat": "--ug", "setuid": "u", "setgid": "g",
           "setreuid": "uu", "setregid": "gg", "setresuid": "uuu", "setresgid": "ggg"}
UNCHANGED_ID = 0xFFFFFFFF
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
X32_SYSCALL_BIT = 0x40000000
AF_UNIX, AF_VSOCK = 1, 40
FAMILY_NAMES = {AF_UNIX: "AF_UNIX", AF_VSOCK: "AF_VSOCK"}
# File powers a root test run uses; everything else leaves the bounding set in the no-user-namespace mode.
CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_FSETID, CAP_KILL, CAP_SETGID, CAP_SETUID = 0, 1, 3, 4, 5, 6, 7
CAP_NET_BIND_SERVICE = 10
FILE_POWERS = (CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_FSETID, CAP_KILL, CAP_SETGID, CAP_SETUID,
               CAP_NET_BIND_SERVICE)

# classic BPF opcodes and seccomp return values
LD_W_ABS, JEQ_K, JGE_K, RET_K = 0x20, 0x15, 0x35, 0x06
RET_ALLOW, RET_ERRNO, RET_USER_NOTIF = 0x7FFF0000, 0x00050000, 0x7FC00000
SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER = 1, 1 << 3
NOTIF_RECV, NOTIF_SEND = 0xC0502100, 0xC0182101  # _IOWR('!', 0, seccomp_notif), _IOWR('!', 1, seccomp_notif_resp)
SYS_SECCOMP = {"x86_64": 317, "aarch64": 277}
NR_OFFSET, ARCH_OFFSET, ARG0_OFFSET = 0, 4, 16  # offsets in struct seccomp_data (arg0's low word, little-endian)


def program(machine: str, *, unix_sockets: bool = True, notify: bool = False,
            ids: tuple[int, int] | None = None) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) instructions for `machine`; its last instruction denies: EPERM, or
    with `notify` a user notification for pid 1 to answer (and count). `ids`: the only (uid, gid) the
    command's user namespace maps, when it maps just those."""
    table = NUMBERS.get(machine)
    if table is None:
        raise StepFailed("seccomp", errno.ENOSYS, f"no system call table for {machine}; only x86_64 and aarch64")
    # ("deny-if", test, k): jump to the deny at the end when the test holds; ("op", code, jt, jf, k): as is
    steps: list[tuple] = [("op", LD_W_ABS, 0, 0, ARCH_OFFSET), ("deny-if", "ne", AUDIT_ARCH[machine]),
                          ("op", LD_W_ABS, 0, 0, NR_OFFSET)]
    if machine == "x86_64":
        steps.append(("deny-if", "ge", X32_SYSCALL_BIT))
    steps.extend(("deny-if", "eq", table[name]) for name in DENIED if name in table)
    if ids is not None:
        steps += id_checks(table, ids)
    families = [AF_VSOCK] if unix_sockets else [AF_VSOCK, AF_UNIX]
    steps += [("op", JEQ_K, 0, 1 + len(families), table["socket"]),  # not socket(): skip to the allow below
              ("op", LD_W_ABS, 0, 0, ARG0_OFFSET), *(("deny-if", "eq", family) for family in families),
              ("op", RET_K, 0, 0, RET_ALLOW),
              ("op", RET_K, 0, 0, RET_USER_NOTIF if notify else RET_ERRNO | errno.EPERM)]
    deny = len(steps) - 1
    if deny > 255:
        raise StepFailed("seccomp", errno.E2BIG, f"the filter's jumps reach past 255 instructions ({deny})")
    code: list[tuple[int, int, int, int]] = []
    for at, step in enumerate(steps):
        if step[0] == "op":
            code.append(tuple(step[1:]))
            continue
        skip = deny - at - 1
        test, k = step[1], step[2]
        code.append((JEQ_K, 0, skip, k) if test == "ne" else (JEQ_K if test == "eq" else JGE_K, skip, 0, k))
    return code


def id_checks(table: dict[str, int], ids: tuple[int, int]) -> list[tuple]:
    """For each id-taking call: allow it when every id argument is the mapped id or -1, else deny.
    Expects the call's number in the accumulator; leaves it there for a call that is not one of these."""
    steps: list[tuple] = []
    for name, kinds in ID_ARGS.items():
        if name not in table:
            continue
        checked = [(at, ids[0] if kind == "u" else ids[1]) for at, kind in enumerate(kinds) if kind != "-"]
        steps.append(("op", JEQ_K, 0, 3 * len(checked) + 1, table[name]))  # another call: skip this block
        for at, own in checked:
            steps += [("op", LD_W_ABS, 0, 0, ARG0_OFFSET + 8 * at), ("op", JEQ_K, 1, 0, own),
                      ("deny-if", "ne", UNCHANGED_ID)]
        steps.append(("op", RET_K, 0, 0, RET_ALLOW))
    return steps


def install_filter(machine: str, *, unix_sockets: bool = True, ids: tuple[int, int] | None = None) -> int:
    """no_new_privs, then the seccomp filter, for this process and everything it execs. Returns the
    listener of refused calls (close-on-exec), or -1 on a kernel without user notifications (before 5.0):
    then the filter answers EPERM itself and refusals go unseen."""
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "seccomp", "no_new_privs")
    for notify in (True, False):
        code = program(machine, unix_sockets=unix_sockets, notify=notify, ids=ids)
        raw = b"".join(struct.pack("HBBI", *ins) for ins in code)
        filters = ctypes.create_string_buffer(raw, len(raw))
        fprog = ctypes.create_string_buffer(struct.pack("HxxxxxxQ", len(code), ctypes.addressof(filters)), 16)
        flags = SECCOMP_FILTER_FLAG_NEW_LISTENER if notify else 0
        listener = libc.syscall(SYS_SECCOMP[machine], SECCOMP_SET_MODE_FILTER, flags, fprog)
        if listener >= 0:
            return listener if notify else -1
        if not notify or ctypes.get_errno() not in (errno.EINVAL, errno.EOPNOTSUPP):
            raise StepFailed("seccomp", ctypes.get_errno())
    return -1


def answer(listener: int, machine: str) -> str | None:
    """Take one refused call from the listener, answer it EPERM, and name it (None if it vanished)."""
    notif = bytearray(80)  # struct seccomp_notif: id, pid, flags, then struct seccomp_data
    try:
        fcntl.ioctl(listener, NOTIF_RECV, notif, True)
    except OSError:
        return None  # the caller died meanwhile, or an interrupted wait
    call_id, _pid, _flags, nr, arch = struct.unpack_from("QIIiI", notif)
    arg0 = struct.unpack_from("Q", notif, 32)[0]
    try:
        fcntl.ioctl(listener, NOTIF_SEND, bytearray(struct.pack("QqiI", call_id, 0, -errno.EPERM, 0)), True)
    except OSError:
        pass  # it died before the answer
    return call_name(machine, nr, arch, arg0)


def call_name(machine: str, nr: int, arch: int, arg0: int) -> str:
    """A refused call as people know it: `mount`, `socket(AF_VSOCK)`, or a foreign ABI's number."""
    table = NUMBERS.get(machine, {})
    if arch != AUDIT_ARCH.get(machine) or (machine == "x86_64" and nr >= X32_SYSCALL_BIT):
        return f"a call of a foreign ABI (number {nr & ~X32_SYSCALL_BIT})"
    if nr == table.get("socket"):
        return f"socket({FAMILY_NAMES.get(arg0 & 0xFFFFFFFF, arg0)})"
    name = next((name for name, number in table.items() if number == nr), None)
    if name in ID_ARGS:
        return f"{name} (to an id the sandbox's user namespace does not map)"
    return name or f"system call {nr}"


def keep_file_powers() -> None:
    """Real root without a user namespace: cut the bounding set down to FILE_POWERS and clear the inheritable
    and ambient sets, so the command execs with nothing more (no CAP_SYS_ADMIN, no CAP_DAC_READ_SEARCH)."""
    for cap in range(64):
        if cap in FILE_POWERS:
            continue
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == -1:
            if ctypes.get_errno() == errno.EINVAL:
                break  # past the last capability this kernel knows
            raise StepFailed("drop-caps", ctypes.get_errno(), f"capability {cap}")
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = ctypes.create_string_buffer(struct.pack("Ii", 0x20080522, 0), 8)  # _LINUX_CAPABILITY_VERSION_3
    data = ctypes.create_string_buffer(24)
    check(libc.capget(header, data), "drop-caps")
    keep = sum(1 << cap for cap in FILE_POWERS)
    effective, permitted = struct.unpack("6I", data.raw)[:2]
    words = (effective & keep, permitted & keep, 0, 0, 0, 0)  # (effective, permitted, inheritable) x 2 words
    check(libc.capset(header, ctypes.create_string_buffer(struct.pack("6I", *words), 24)), "drop-caps")


def machine() -> str:
    """This machine's architecture name as the tables above spell it."""
    return os.uname().machine
