"""Why a run in an overlay may have seen a different world than a real run would: its "taints".

A real run of a tool is a plain subprocess: the real network, /tmp and $HOME, no limits. A speculative
run sees the same file system through throwaway layers, but some differences cannot be hidden, only
noticed: what it wrote outside the workspace (the real run's writes would stay, the speculation's
vanish), a connection that found no network, a limit it hit, a hard link that overlayfs breaks, an
environment failure in its output. Any of them taints the run: its result is never promoted. A false
taint costs only the time speculation would have saved; a missed one breaks the guarantee.
"""

from __future__ import annotations

import grp
import os
import pwd
import signal
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from sandbox.changes import Change, ChangeKind
from sandbox.limits import Limits
from sandbox.process import ProcessResult

# Words of a failed environment in a run's output: memory, disk, read-only paths, the network, limits.
SIGNS = tuple(w.encode() for w in (
    "MemoryError", "Cannot allocate memory", "Unable to allocate", "std::bad_alloc", "out of memory",
    "Out of memory", "failed to mmap", "Failed to mmap", "Read-only file system", "No space left on device",
    "Disk quota exceeded", "File too large", "File size limit exceeded", "CPU time limit exceeded",
    "Connection refused", "Network is unreachable", "No route to host", "Cannot assign requested address",
    "Temporary failure in name resolution", "Name or service not known", "Could not resolve host",
    "getaddrinfo failed", "nodename nor servname", "Operation not permitted",
))
LIMIT_SIGNALS = {signal.SIGXCPU: "its CPU-time limit", signal.SIGXFSZ: "its file-size limit",
                 signal.SIGKILL: "SIGKILL (a hard limit or the out-of-memory killer)"}
MEMORY_NEAR = 0.75  # a peak RSS past this share of the memory limit may have met it


def unmapped_signs() -> tuple[bytes, ...]:
    """How an id that a one-id user namespace cannot map shows in output: the overflow uid and gid, as
    numbers and names (`nobody`, `nogroup`). A real run would have shown the real owner."""
    numbers = set()
    for kind in ("uid", "gid"):
        try:
            numbers.add(int(Path(f"/proc/sys/kernel/overflow{kind}").read_text()))
        except (OSError, ValueError):
            numbers.add(65534)
    names = {str(n) for n in numbers}
    for n in numbers:
        for lookup in (pwd.getpwuid, grp.getgrgid):
            try:
                names.add(lookup(n)[0])
            except KeyError:
                pass
    return tuple(sorted(name.encode() for name in names))


def of_run(result: ProcessResult, facts: Mapping[str, Any] | None, *, limits: Limits, timeout: float | None,
           watched: bool, unmapped: tuple[bytes, ...] = ()) -> list[str]:
    """The taints of one finished (or killed) run; `watched`: the sandbox's pid 1 should have reported;
    `unmapped`: the `unmapped_signs` to look for when the command's user namespace maps only its own ids."""
    out: list[str] = []
    if result.timed_out:
        out.append(f"timed out after {timeout:g} s (a real run has no time limit)" if timeout else "timed out")
    elif watched and (facts is None or not facts.get("reported")):
        out.append("the sandbox did not report on the run (its pid 1 died), so nothing it did was seen")
    signals = set(facts.get("signals", ())) if facts else set()
    if result.exit_code is not None and result.exit_code < 0:
        signals.add(-result.exit_code)
    out += [f"a process was killed by {LIMIT_SIGNALS[s]}" for s in sorted(signals) if s in LIMIT_SIGNALS]
    if facts:
        out += of_facts(facts, limits)
    out += [f"its output shows a different environment: {w.decode()!r}" for w in SIGNS if w in result.seen]
    out += [f"its output shows an owner the sandbox's user namespace cannot map: {w.decode()!r}"
            for w in unmapped if w in result.seen]
    return out


def of_facts(facts: Mapping[str, Any], limits: Limits) -> list[str]:
    """Taints from what the sandbox's pid 1 saw: writes outside, network counters, peak memory, gaps."""
    out: list[str] = []
    total = int(facts.get("writes_total") or 0)
    if total:
        listed = ", ".join(facts.get("writes") or [])
        more = "+" if total >= 10000 else ""
        out.append(f"wrote outside the workspace: {listed} ({total}{more} path{'s' if total != 1 else ''})")
    network = facts.get("network") or {}
    if network:
        counts = ", ".join(f"{k}={v}" for k, v in sorted(network.items()))
        out.append(f"tried to reach the network or a service outside the run ({counts})")
    peak = int(facts.get("maxrss_kib") or 0) * 1024
    if limits.memory_bytes and peak >= MEMORY_NEAR * limits.memory_bytes:
        out.append(f"used {peak >> 20} MiB of memory at its peak, near the sandbox's limit of "
                   f"{limits.memory_bytes >> 20} MiB (a real run has none)")
    if facts.get("ended"):
        out.append(f"the sandbox ended the run: {facts['ended']} (a real run has no such limit)")
    refused = facts.get("refused") or {}
    if refused:
        calls = ", ".join(f"{name} ({count})" if count > 1 else name for name, count in sorted(refused.items()))
        out.append(f"the sandbox refused system calls a real run would have made: {calls}")
    elif facts.get("refusals_seen") is False:
        out.append("this kernel cannot show the sandbox's refused system calls, so a refusal would go unseen")
    if not facts.get("pid1", True):
        out.append("no pid namespace: processes the run left behind were not seen")
    out += [f"the sandbox's view differs: {gap}" for gap in facts.get("gaps") or ()]
    return out


def hard_links(root: Path, changes: Iterable[Change]) -> list[str]:
    """A changed, deleted or touched path whose real file has other links: overlayfs breaks the link on
    copy-up, so the real run would have changed the other names too."""
    out = []
    for change in changes:
        if change.kind == ChangeKind.CREATED:
            continue
        try:
            st = os.lstat(root / change.path)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
            out.append(f"changed a hard-linked file: {change.path} ({st.st_nlink} links)")
    return out


def root_attributes(root: Path, seen: Path) -> list[str]:
    """The workspace directory itself (which changes() does not list) with another mode or owner than the
    real one: a run changed it, and promotion would not carry it over."""
    try:
        real, mine = os.stat(root), os.stat(seen)
    except OSError:
        return []
    if (stat.S_IMODE(real.st_mode), real.st_uid, real.st_gid) == (stat.S_IMODE(mine.st_mode), mine.st_uid, mine.st_gid):
        return []
    return [f"changed the workspace directory itself: mode {stat.S_IMODE(mine.st_mode):o} owner {mine.st_uid}:"
            f"{mine.st_gid}, real mode {stat.S_IMODE(real.st_mode):o} owner {real.st_uid}:{real.st_gid}"]
